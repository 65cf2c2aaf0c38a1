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

@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ElectorTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;

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
    // The hand-over by the release is told from one by expiry by a bound
    // of a third of the TTL, longer than a stall.
    Duration ttl = Duration.ofSeconds(30);
    Recorder ra = new Recorder();
    Recorder rb = new Recorder();
    try (Elector a = ra.attach(Elector.builder(client, job, "a").ttl(ttl)).start();
         Elector b = rb.attach(Elector.builder(client, job, "b").ttl(ttl)).start()) {
      assertNotEquals(a.holder(), b.holder());
      ServerProcess.waitUntil(PATIENCE, "a leader", () -> a.isLeader() || b.isLeader());
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
      assertEquals(2, follower.awaitElected(PATIENCE).getAsLong());
      long handover = System.nanoTime() - t0;
      assertTrue(handover < ttl.toNanos() / 3, "hand-over came from expiry: " + handover / 1e6 + " ms");
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
    // Renewals go out every 3 s, and the lease lasts 9 s: a stall between
    // two of them does not end it.
    Duration ttl = Duration.ofSeconds(9);
    Recorder r = new Recorder();
    try (Elector e = r.attach(Elector.builder(client, job, "r").ttl(ttl)).start()) {
      assertEquals(1, e.awaitElected(PATIENCE).getAsLong());
      // Four renewals, TTL/3 apart: it leads past the TTL of its grant.
      double renewals = server.metric("leasehold_renewals_total");
      server.waitRenewals(renewals + 4, () -> assertEquals(1, e.token().orElse(-1), "lost the lead: " + r.get()));
      assertEquals(1, e.token().orElse(-1));
      assertEquals(e.holder(), client.getLease(job).holder());
      assertEquals(List.of("elected 1"), r.get());
    }
    assertEquals(List.of("elected 1", "lost 1"), r.get());
    assertNull(client.getLease(job).holder());
  }

  @Test
  void aGrantLongAfterTheAcquireWasSentIsConfirmed() throws Exception {
    String job = ClientTest.job("late");
    // The elector's waiting Acquire waits up to 3*TTL (18 s); it is granted
    // 1.5*TTL after it was sent, past its TTL. A TTL of 6 s outlasts a
    // stall between the renewals that follow.
    Duration ttl = Duration.ofSeconds(6);
    client.acquire(job, "other", Duration.ofSeconds(60));
    Recorder r = new Recorder();
    try (Elector e = r.attach(Elector.builder(client, job, "late").ttl(ttl)).start()) {
      server.waitWaiters(1);
      Thread.sleep(ttl.toMillis() * 3 / 2); // the waiting Acquire ages past a TTL
      client.release(job, "other", 1);
      assertEquals(2, e.awaitElected(PATIENCE).getAsLong());
      // The confirming renewal and three more, TTL/3 apart: it leads past a
      // TTL after the grant.
      double renewals = server.metric("leasehold_renewals_total");
      server.waitRenewals(renewals + 4, () -> assertEquals(2, e.token().orElse(-1), "lost the lead: " + r.get()));
      assertEquals(2, e.token().orElse(-1));
      assertEquals(List.of("elected 2"), r.get(), "stepped down after the late grant");
    }
  }

  @Test
  void leaseLostOnRenewStepsDownThenCampaignsAgain() throws Exception {
    String job = ClientTest.job("again");
    Recorder r = new Recorder();
    // The elector's lease outlives the steps before the theft; it learns of
    // the theft from its next renewal, TTL/3 (3 s) later.
    try (Elector e = r.attach(Elector.builder(client, job, "again").ttl(Duration.ofSeconds(9))).start()) {
      assertEquals(1, e.awaitElected(PATIENCE).getAsLong());
      double losses = server.metric("leasehold_renew_losses_total");
      // Hand the lease to a waiting thief behind the elector's back: the
      // release grants the queued waiter in the same step.
      java.util.concurrent.CompletableFuture<Acquired> thief = java.util.concurrent.CompletableFuture.supplyAsync(
          () -> client.acquire(job, "thief", Duration.ofSeconds(60), PATIENCE));
      server.waitWaiters(1);
      client.release(job, e.holder(), 1);
      Acquired a = thief.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
      assertTrue(a.acquired());
      assertEquals(2, a.lease().token());
      ServerProcess.waitUntil(PATIENCE, "the step-down", () -> r.get().contains("lost 1"));
      // It stepped down because its renewal was refused, not by its own
      // deadline: the server refused a renewal with LEASE_LOST.
      assertTrue(server.metric("leasehold_renew_losses_total") > losses, "stepped down without a lost renewal");
      // The elector campaigns again: its waiting Acquire is granted when the
      // thief lets go.
      server.waitWaiters(1);
      client.release(job, "thief", 2);
      ServerProcess.waitUntil(PATIENCE, "re-election", () -> r.get().contains("elected 3"));
      assertEquals(List.of("elected 1", "lost 1", "elected 3"), r.get());
    }
  }

  @Test
  void stepsDownByItsOwnDeadlineWhenTheServerIsPaused() throws Exception {
    // Its deadline (a renewal's send time plus 10 s) is told from a
    // step-down half a TTL late by more than a stall.
    Duration ttl = Duration.ofSeconds(10);
    try (ServerProcess own = new ServerProcess(); Client c = Client.connect(own.target)) {
      Elector e = Elector.builder(c, "paused", "e").ttl(ttl).start();
      try {
        assertEquals(1, e.awaitElected(PATIENCE).getAsLong());
        own.waitRenewals(1, () -> { }); // its deadline is now a renewal's
        own.signal("STOP");
        long stopped = System.nanoTime();
        assertTrue(e.awaitLost(PATIENCE), "never stepped down");
        long after = System.nanoTime() - stopped;
        assertTrue(after <= ttl.toNanos() * 3 / 2, "stepped down late: " + after / 1e6 + " ms");
        assertFalse(e.isLeader());
        long t0 = System.nanoTime();
        e.close();
        assertTrue(System.nanoTime() - t0 < ttl.toNanos() / 2, "close is bounded");
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
      ServerProcess.waitUntil(PATIENCE, "a leader", () -> a.isLeader() || b.isLeader());
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
      long token = follower.awaitElected(PATIENCE).orElseThrow();
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
              () -> e.awaitElected(PATIENCE));
          assertEquals(tc[2], err.field());
          assertEquals(err, e.error().orElseThrow());
          assertFalse(e.isLeader());
        }
      }
    }
  }
}
