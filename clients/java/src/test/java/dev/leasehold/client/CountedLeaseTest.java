package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.leasehold.client.BindToStreamTest.Worker;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Counted leases (semaphores, {@code AcquireRequest.slots}) against a real
 * server: the unary Acquire with {@code slots} and its refusals, electors
 * and locks that hold one slot each, renewing, releasing and writing with
 * the slot's job ({@code "{job}#{k}"}), and the conformance worker's
 * {@code --slots} and {@code acquire-slots}.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class CountedLeaseTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  /** Longer than any wait of these tests: a hand-over seen within PATIENCE came from a release, not an expiry. */
  static final Duration LONG = Duration.ofSeconds(90);

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

  /** Whether the job's own lease (the line's turn) is held by {@code holder}: it waits first in line. */
  static boolean waitsFirst(String job, String holder) {
    return holder.equals(client.getLease(job).holder());
  }

  @Test
  void threeElectorsWithTwoSlotsTwoLeadInTheirOwnSlotsAndTheThirdTakesTheFreedSlot() throws Exception {
    String job = ClientTest.job("slots-electors");
    List<String> elected = Collections.synchronizedList(new ArrayList<>());
    List<Elector> electors = new ArrayList<>();
    try {
      for (String name : List.of("a", "b", "c")) {
        electors.add(Elector.builder(client, job, name).ttl(LONG).slots(2)
            .onElected((t, grant) -> elected.add(grant.holder() + " " + grant.job() + " " + grant.slot() + "/"
                + grant.slots() + " " + t))
            .build());
      }
      // Two first, so that the third is the one that waits.
      electors.get(0).start();
      electors.get(1).start();
      ServerProcess.waitUntil(PATIENCE, "two leaders", () -> electors.get(0).isLeader() && electors.get(1).isLeader());
      Elector third = electors.get(2).start();
      ServerProcess.waitUntil(PATIENCE, "the third waiting first in line", () -> waitsFirst(job, third.holder()));
      assertFalse(third.isLeader());
      assertEquals(Optional.empty(), third.leaseJob());
      assertEquals(OptionalInt.empty(), third.slot());

      // Two lead at once, each in its own slot, each with that slot's token.
      Elector first = electors.get(0);
      Elector second = electors.get(1);
      assertEquals(Set.of(job + "#0", job + "#1"), Set.of(first.leaseJob().orElseThrow(), second.leaseJob().orElseThrow()));
      for (Elector e : List.of(first, second)) {
        String slotJob = e.leaseJob().orElseThrow();
        assertEquals(slotJob, job + "#" + e.slot().orElseThrow());
        assertEquals(1, e.token().getAsLong(), "each slot has its own tokens: " + slotJob);
        Lease l = client.getLease(slotJob);
        assertEquals(e.holder(), l.holder(), slotJob + " is held by its leader");
        assertEquals(1, l.token());
      }
      // What onElected heard: each grant with its slot's job.
      ServerProcess.waitUntil(PATIENCE, "two onElected reports", () -> elected.size() == 2);
      assertTrue(elected.contains(first.holder() + " " + first.leaseJob().get() + " " + first.slot().getAsInt() + "/2 1"),
          elected.toString());
      assertTrue(elected.contains(second.holder() + " " + second.leaseJob().get() + " " + second.slot().getAsInt() + "/2 1"),
          elected.toString());

      // A live slot holder writes with its slot's job and token.
      String freed = first.leaseJob().orElseThrow();
      int freedSlot = first.slot().getAsInt();
      long oldToken = first.token().getAsLong();
      assertEquals(1, client.checkedWrite(freed, oldToken, "k", "first"));

      // The first resigns (releasing its slot): the third leads in that
      // slot, with its token + 1, long before the lease could have expired.
      first.close();
      assertEquals(oldToken + 1, third.awaitElected(PATIENCE).orElseThrow());
      assertEquals(Optional.of(freed), third.leaseJob());
      assertEquals(OptionalInt.of(freedSlot), third.slot());
      assertEquals(third.holder(), client.getLease(freed).holder());
      assertEquals(Optional.empty(), first.leaseJob());
      assertEquals(OptionalInt.empty(), first.slot());
      assertTrue(second.isLeader(), "the other slot's leader leads on");

      // The resigned leader's write on its old slot job, with its old token: fenced.
      FencedException fenced = assertThrows(FencedException.class,
          () -> client.checkedWrite(freed, oldToken, "k", "stale"));
      assertEquals(oldToken + 1, fenced.currentToken().orElseThrow());
      // The live holders' writes on their slots' jobs pass.
      assertEquals(2, client.checkedWrite(freed, third.token().getAsLong(), "k", "third"));
      assertEquals(1, client.checkedWrite(second.leaseJob().get(), second.token().getAsLong(), "k", "second"));
      assertEquals("third", client.read(freed, "k").valueUtf8());
    } finally {
      electors.forEach(Elector::close);
    }
    // close() released the slots the electors held.
    for (String slotJob : List.of(job + "#0", job + "#1")) {
      assertFalse(client.getLease(slotJob).isHeld(), slotJob + " released on close");
    }
  }

  @Test
  void aSlotsElectorRenewsItsSlotsJobAcrossSeveralTtls() throws Exception {
    String job = ClientTest.job("slots-renew");
    // Renewals every 2 s, the lease 6 s: a stall between two does not end it.
    Duration ttl = Duration.ofSeconds(6);
    List<String> lost = Collections.synchronizedList(new ArrayList<>());
    double before = server.metric("leasehold_renewals_total");
    try (Elector e = Elector.builder(client, job, "r").ttl(ttl).slots(3)
        .onLost(t -> lost.add("lost " + t)).start()) {
      assertEquals(1, e.awaitElected(PATIENCE).orElseThrow());
      String slotJob = e.leaseJob().orElseThrow();
      assertEquals(job + "#0", slotJob, "the first slot of a free job");
      // Four renewals: past the TTL of its grant, still leading in its slot
      // (a renewal of the wrong job would be LEASE_LOST, and it would step down).
      server.waitRenewals(before + 4, () -> assertEquals(List.of(), lost, "stepped down"));
      assertEquals(1, e.token().orElse(-1));
      assertEquals(Optional.of(slotJob), e.leaseJob());
      Lease l = client.getLease(slotJob);
      assertEquals(e.holder(), l.holder());
      assertEquals(1, l.token());
    }
    assertFalse(client.getLease(job + "#0").isHeld(), "close released the slot's lease");
  }

  @Test
  void anOrdinaryElectorLeadsOnItsJobWithNoSlot() throws Exception {
    String job = ClientTest.job("slots-none");
    try (Elector e = Elector.builder(client, job, "o").ttl(LONG).slots(1).start()) {
      assertEquals(1, e.awaitElected(PATIENCE).orElseThrow());
      assertEquals(Optional.of(job), e.leaseJob(), "slots 1 is the ordinary lease");
      assertEquals(OptionalInt.empty(), e.slot());
      assertEquals(e.holder(), client.getLease(job).holder());
    }
  }

  @Test
  void anElectorWithSlotsRefusesOnNewLeaderAndANegativeCount() {
    Elector.Builder b = Elector.builder(client, "j", "n").slots(2).onNewLeader((h, t) -> { });
    assertThrows(IllegalArgumentException.class, b::build);
    assertThrows(IllegalArgumentException.class, () -> Elector.builder(client, "j", "n").slots(-1));
  }

  @Test
  void aUnaryAcquireNamingAnotherCountOrOver100IsInvalidArgumentNamingSlots() throws Exception {
    String job = ClientTest.job("slots-unary");
    String h1 = Client.processHolder("u1");
    String h2 = Client.processHolder("u2");
    String h3 = Client.processHolder("u3");

    Acquired a = client.acquire(job, h1, LONG, Duration.ZERO, 2);
    assertTrue(a.acquired());
    Lease one = a.lease();
    assertEquals(job + "#0", one.job());
    assertEquals(0, one.slot());
    assertEquals(2, one.slots());
    assertTrue(one.isSlot());
    assertEquals(h1, one.holder());
    assertEquals(1, one.token());

    // Another count than the job's: refused, naming slots and the job's count; nothing changed.
    InvalidArgumentException other = assertThrows(InvalidArgumentException.class,
        () -> client.acquire(job, h2, LONG, Duration.ZERO, 3));
    assertEquals("slots", other.field());
    assertTrue(other.getMessage().contains("2"), other.getMessage());
    assertFalse(client.getLease(job + "#1").isHeld(), "the refused Acquire took no slot");
    assertEquals(h1, client.getLease(job + "#0").holder());
    // The future fails the same way.
    ExecutionException async = assertThrows(ExecutionException.class,
        () -> client.acquireAsync(job, h2, LONG, Duration.ZERO, 3).get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
    assertEquals("slots", assertInstanceOf(InvalidArgumentException.class, async.getCause()).field());
    // Over 100, on a job of its own: refused too.
    InvalidArgumentException over = assertThrows(InvalidArgumentException.class,
        () -> client.acquire(ClientTest.job("slots-101"), h2, LONG, Duration.ZERO, 101));
    assertEquals("slots", over.field());

    // The count the job has: the other slot, through the future.
    Acquired b = client.acquireAsync(job, h2, LONG, Duration.ZERO, 2).get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertTrue(b.acquired());
    assertEquals(job + "#1", b.lease().job());
    assertEquals(1, b.lease().slot());
    assertEquals(2, b.lease().slots());
    // Both taken: a third holder is busy.
    assertFalse(client.acquire(job, h3, LONG, Duration.ZERO, 2).acquired());
    // The holder of a slot that asks again is renewed in its slot.
    Acquired again = client.acquire(job, h1, LONG, Duration.ZERO, 2);
    assertTrue(again.acquired());
    assertEquals(job + "#0", again.lease().job());
    assertEquals(1, again.lease().token());

    // Renew, write and release with the slot's job.
    Lease renewed = client.renew(one.job(), h1, one.token(), LONG);
    assertEquals(h1, renewed.holder());
    assertEquals(1, client.checkedWrite(one.job(), one.token(), "k", "v"));
    client.release(one.job(), h1, one.token());
    // The freed slot goes to the next Acquire, with that slot's token + 1.
    Acquired c = client.acquire(job, h3, LONG, Duration.ZERO, 2);
    assertTrue(c.acquired());
    assertEquals(job + "#0", c.lease().job());
    assertEquals(2, c.lease().token());
    assertThrows(FencedException.class, () -> client.checkedWrite(one.job(), one.token(), "k", "stale"));

    // Without slots (0 or 1): the ordinary lease, no slot.
    String plain = ClientTest.job("slots-plain");
    Lease p = client.acquire(plain, h1, LONG, Duration.ZERO, 1).lease();
    assertEquals(plain, p.job());
    assertFalse(p.isSlot());
    assertEquals(0, p.slots());
  }

  @Test
  void aCountedLockHoldsOneOfItsSlotsRenewsAndWritesWithTheSlotsJob() throws Exception {
    String job = ClientTest.job("slots-lock");
    Duration ttl = Duration.ofSeconds(3); // renewals every second
    try (Lock a = client.lock(job, ttl, null, "la", 2);
         Lock b = client.lock(job, ttl, null, "lb", 2)) {
      assertEquals(job, a.job());
      assertEquals(Set.of(job + "#0", job + "#1"), Set.of(a.leaseJob(), b.leaseJob()));
      assertEquals(a.leaseJob(), job + "#" + a.slot().orElseThrow());
      assertEquals(b.leaseJob(), job + "#" + b.slot().orElseThrow());
      assertEquals(1, a.token());
      assertEquals(1, b.token());
      // A third waits for a slot.
      CompletableFuture<Lock> third = client.lockAsync(job, ttl, null, "lc", 2);
      try {
        ServerProcess.waitUntil(PATIENCE, "the third lock waiting", () -> {
          Lease turn = client.getLease(job);
          return turn.isHeld() && turn.holder().startsWith("lc@");
        });
        assertFalse(third.isDone());
        // Several TTLs of renewals: both hold their slots all along.
        double before = server.metric("leasehold_renewals_total");
        server.waitRenewals(before + 8, () -> assertTrue(a.isHeld() && b.isHeld(), "held while renewed"));
        assertEquals(a.holder(), client.getLease(a.leaseJob()).holder());
        assertEquals(1, client.checkedWrite(a.leaseJob(), a.token(), "k", "a"));
        // The first leaves: the third takes its slot with that slot's token + 1.
        a.close();
        try (Lock c = third.get(PATIENCE.toSeconds(), TimeUnit.SECONDS)) {
          assertEquals(a.leaseJob(), c.leaseJob());
          assertEquals(a.token() + 1, c.token());
          assertThrows(FencedException.class, () -> client.checkedWrite(a.leaseJob(), a.token(), "k", "stale"));
          assertEquals(2, client.checkedWrite(c.leaseJob(), c.token(), "k", "c"));
          assertEquals(1, client.checkedWrite(b.leaseJob(), b.token(), "k", "b"));
          assertTrue(b.isHeld());
        }
        assertFalse(client.getLease(a.leaseJob()).isHeld(), "closing the lock released its slot");
      } finally {
        third.cancel(true);
      }
    }
    // A count other than the job's: the typed error, nothing held.
    InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
        () -> client.lock(job, ttl, Duration.ZERO, "ld", 3));
    assertEquals("slots", e.field());
    // An ordinary lock has no slot and writes with its job.
    try (Lock plain = client.lock(ClientTest.job("slots-plain-lock"), ttl)) {
      assertEquals(plain.job(), plain.leaseJob());
      assertEquals(OptionalInt.empty(), plain.slot());
    }
  }

  @Test
  void theWorkersSlotsFlagAndAcquireSlotsCommand() throws Exception {
    String job = ClientTest.job("slots-worker");
    try (Worker a = new Worker("A", server.target, job, Duration.ofSeconds(30), "--slots", "2");
         Worker b = new Worker("B", server.target, job, Duration.ofSeconds(30), "--slots", "2")) {
      a.holder();
      b.holder();
      String ea = expect(a, "elected token=1 job=" + job + "#");
      String eb = expect(b, "elected token=1 job=" + job + "#");
      assertNotEquals(ea, eb);
      assertTrue(ea.matches("elected token=1 job=\\Q" + job + "\\E#([01]) slot=\\1"), ea);
      assertTrue(eb.matches("elected token=1 job=\\Q" + job + "\\E#([01]) slot=\\1"), eb);
      // write: with the slot's job.
      a.send("write one");
      expect(a, "write ok version=1");
      String aJob = ea.substring(ea.indexOf("job=") + 4, ea.indexOf(" slot="));
      assertEquals("one", client.read(aJob, "status").valueUtf8());

      String other = ClientTest.job("slots-worker-unary");
      a.send("acquire-slots " + other + " 2");
      expect(a, "acquire-slots ok job=" + other + "#0 slot=0 token=1");
      a.send("acquire-slots " + other + " 2");
      expect(a, "acquire-slots ok job=" + other + "#1 slot=1 token=1");
      a.send("acquire-slots " + other + " 2");
      expect(a, "acquire-slots busy");
      a.send("acquire-slots " + other + " 3");
      expect(a, "acquire-slots invalid field=slots");
      a.send("acquire-slots " + other + " 101");
      expect(a, "acquire-slots invalid field=slots");

      a.send("quit");
      b.send("quit");
      expect(a, "bye");
      expect(b, "bye");
    }
  }

  static String expect(Worker w, String prefix) throws InterruptedException {
    String line = w.await(prefix, PATIENCE.toMillis());
    assertNotNull(line, w.name + " printed no line starting with \"" + prefix + "\"");
    return line;
  }
}
