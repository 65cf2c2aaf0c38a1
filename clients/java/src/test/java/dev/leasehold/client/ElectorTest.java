package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ElectorTest {
  static ServerProcess server;
  static Client client;

  @BeforeAll
  static void start() throws Exception {
    server = new ServerProcess();
    client = Client.connect(server.target);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) { // null: skipped, no server binary
      server.close();
    }
  }

  /** Collects callbacks in order. */
  static final class Recorder {
    final List<String> events = Collections.synchronizedList(new ArrayList<>());

    Elector.Builder attach(Elector.Builder b) {
      return b.onElected(t -> events.add("elected " + t)).onLost(t -> events.add("lost " + t));
    }

    List<String> get() {
      synchronized (events) {
        return List.copyOf(events);
      }
    }
  }

  @Test
  void exactlyOneOfTwoLeadsAndCloseHandsOverAtOnce() throws Exception {
    String job = ClientTest.job("two");
    Duration ttl = Duration.ofSeconds(10);
    Recorder ra = new Recorder();
    Recorder rb = new Recorder();
    try (Elector a = ra.attach(Elector.builder(client, job, "a").ttl(ttl)).start();
         Elector b = rb.attach(Elector.builder(client, job, "b").ttl(ttl)).start()) {
      assertNotEquals(a.holder(), b.holder());
      ServerProcess.waitUntil(Duration.ofSeconds(10), "a leader", () -> a.isLeader() || b.isLeader());
      Elector leader = a.isLeader() ? a : b;
      Elector follower = leader == a ? b : a;
      Recorder rl = leader == a ? ra : rb;
      Recorder rf = leader == a ? rb : ra;
      assertEquals(1, leader.token().getAsLong());
      server.waitWaiters(1);
      assertFalse(follower.isLeader());
      assertEquals(leader.holder(), client.getLease(job).holder());
      long t0 = System.nanoTime();
      leader.close();
      assertEquals(2, follower.awaitElected(Duration.ofSeconds(5)).getAsLong());
      long handover = System.nanoTime() - t0;
      assertTrue(handover < ttl.toNanos() / 4, "hand-over came from expiry: " + handover / 1e6 + " ms");
      assertEquals(List.of("elected 1", "lost 1"), rl.get());
      follower.close();
      assertEquals(List.of("elected 2", "lost 2"), rf.get());
    }
    Lease l = client.getLease(job);
    assertNull(l.holder(), "close released the lease");
    assertEquals(2, l.token());
  }

  @Test
  void keepsLeadingAcrossRenewals() throws Exception {
    String job = ClientTest.job("renewals");
    Duration ttl = Duration.ofMillis(600);
    Recorder r = new Recorder();
    try (Elector e = r.attach(Elector.builder(client, job, "r").ttl(ttl)).start()) {
      assertEquals(1, e.awaitElected(Duration.ofSeconds(10)).getAsLong());
      long end = System.nanoTime() + 3 * ttl.toNanos();
      while (System.nanoTime() < end) {
        assertEquals(1, e.token().orElse(-1));
        Thread.sleep(ttl.toMillis() / 10);
      }
    }
    assertEquals(List.of("elected 1", "lost 1"), r.get());
    assertNull(client.getLease(job).holder());
  }

  @Test
  void aGrantLongAfterTheAcquireWasSentIsConfirmed() throws Exception {
    String job = ClientTest.job("late");
    Duration ttl = Duration.ofMillis(500);
    client.acquire(job, "other", Duration.ofSeconds(30));
    Recorder r = new Recorder();
    try (Elector e = r.attach(Elector.builder(client, job, "late").ttl(ttl)).start()) {
      server.waitWaiters(1);
      Thread.sleep(2 * ttl.toMillis()); // the waiting Acquire ages past a TTL
      client.release(job, "other", 1);
      assertEquals(2, e.awaitElected(Duration.ofSeconds(5)).getAsLong());
      Thread.sleep(3 * ttl.toMillis());
      assertEquals(2, e.token().orElse(-1));
      assertEquals(List.of("elected 2"), r.get(), "stepped down after the late grant");
    }
  }

  @Test
  void leaseLostOnRenewStepsDownThenCampaignsAgain() throws Exception {
    String job = ClientTest.job("again");
    Recorder r = new Recorder();
    try (Elector e = r.attach(Elector.builder(client, job, "again").ttl(Duration.ofMillis(300))).start()) {
      assertEquals(1, e.awaitElected(Duration.ofSeconds(10)).getAsLong());
      // Hand the lease to a waiting thief behind the elector's back: the
      // release grants the queued waiter in the same step.
      java.util.concurrent.CompletableFuture<Acquired> thief = java.util.concurrent.CompletableFuture.supplyAsync(
          () -> client.acquire(job, "thief", Duration.ofSeconds(1), Duration.ofSeconds(10)));
      server.waitWaiters(1);
      client.release(job, e.holder(), 1);
      Acquired a = thief.get(10, TimeUnit.SECONDS);
      assertTrue(a.acquired());
      assertEquals(2, a.lease().token());
      ServerProcess.waitUntil(Duration.ofSeconds(5), "re-election", () -> r.get().contains("elected 3"));
      assertEquals(List.of("elected 1", "lost 1", "elected 3"), r.get());
    }
  }

  @Test
  void stepsDownByItsOwnDeadlineWhenTheServerIsPaused() throws Exception {
    Duration ttl = Duration.ofMillis(900);
    try (ServerProcess own = new ServerProcess(); Client c = Client.connect(own.target)) {
      Elector e = Elector.builder(c, "paused", "e").ttl(ttl).start();
      try {
        assertEquals(1, e.awaitElected(Duration.ofSeconds(10)).getAsLong());
        Thread.sleep(ttl.toMillis());
        own.signal("STOP");
        long stopped = System.nanoTime();
        assertTrue(e.awaitLost(ttl.multipliedBy(3)), "never stepped down");
        long after = System.nanoTime() - stopped;
        assertTrue(after <= ttl.toNanos() + TimeUnit.MILLISECONDS.toNanos(300), "stepped down late: " + after / 1e6 + " ms");
        assertFalse(e.isLeader());
        long t0 = System.nanoTime();
        e.close();
        assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(2), "close is bounded");
      } finally {
        own.signal("CONT");
        e.close();
      }
    }
  }

  @Test
  void anEmptyJobOrNameOrATtlThatIsNotPositiveIsRefusedUpFront() {
    assertThrows(IllegalArgumentException.class, () -> Elector.builder(client, "j", "n").ttl(Duration.ZERO));
    assertThrows(IllegalArgumentException.class, () -> Elector.builder(client, "j", "n").ttl(Duration.ofSeconds(-1)));
    assertThrows(IllegalArgumentException.class, () -> Elector.builder(client, "", "n"));
    assertThrows(IllegalArgumentException.class, () -> Elector.builder(client, "j", ""));
  }

  /**
   * Two electors with one name for one job in one process are two holders:
   * exactly one leads, the old leader's token is fenced after the hand-over,
   * and the other takes over with a higher token when the leader stops.
   */
  @Test
  void twoElectorsWithOneNameInOneProcessAreTwoHolders() throws Exception {
    String job = ClientTest.job("twin");
    Duration ttl = Duration.ofSeconds(10);
    try (Elector a = Elector.builder(client, job, "twin").ttl(ttl).start();
         Elector b = Elector.builder(client, job, "twin").ttl(ttl).start()) {
      assertNotEquals(a.holder(), b.holder(), "one identity per elector");
      assertTrue(a.holder().startsWith("twin@") && b.holder().startsWith("twin@"));
      ServerProcess.waitUntil(Duration.ofSeconds(10), "a leader", () -> a.isLeader() || b.isLeader());
      Elector leader = a.isLeader() ? a : b;
      Elector follower = leader == a ? b : a;
      server.waitWaiters(1); // the follower is queued behind the leader
      for (int i = 0; i < 10; i++) {
        assertEquals(1, leader.token().getAsLong());
        assertFalse(follower.isLeader(), "both lead");
        Thread.sleep(30);
      }
      assertEquals(leader.holder(), client.getLease(job).holder());
      assertEquals(1, client.checkedWrite(job, 1, "k", "a"));
      leader.close();
      long token = follower.awaitElected(Duration.ofSeconds(5)).orElseThrow();
      assertTrue(token > 1, "a higher token: " + token);
      FencedException e = assertThrows(FencedException.class, () -> client.checkedWrite(job, 1, "k", "old"));
      assertEquals(token, e.currentToken().getAsLong());
      client.checkedWrite(job, token, "k", "b");
      assertEquals(follower.holder(), client.getLease(job).holder());
    }
  }

  /**
   * A campaign the server refuses with INVALID_ARGUMENT (a TTL over
   * --max-ttl, a job over --max-name-bytes) is not retried: awaitElected
   * throws it.
   */
  @Test
  void aCampaignTheServerRefusesStopsAndAwaitElectedThrows() throws Exception {
    try (ServerProcess s = ServerProcess.withArgs("--max-ttl", "10s", "--max-name-bytes", "64");
         Client c = Client.connect(s.target)) {
      String[][] cases = {{"long-ttl", "20", "ttl"}, {"j".repeat(65), "1", "job"}};
      for (String[] tc : cases) {
        try (Elector e = Elector.builder(c, tc[0], "n").ttl(Duration.ofSeconds(Long.parseLong(tc[1]))).start()) {
          InvalidArgumentException err = assertThrows(InvalidArgumentException.class,
              () -> e.awaitElected(Duration.ofSeconds(5)));
          assertEquals(tc[2], err.field());
          assertEquals(err, e.error().orElseThrow());
          assertFalse(e.isLeader());
        }
      }
    }
  }
}
