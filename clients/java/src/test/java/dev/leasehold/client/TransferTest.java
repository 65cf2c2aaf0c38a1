package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.leasehold.v1.Tenure;
import io.grpc.Status;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * TransferLease: a leader hands its lease to a waiting Acquire, which is
 * granted the next token at once. Through the client
 * ({@link Client#transferLease}) and the elector ({@link Elector#transfer}),
 * against the real server.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TransferTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final Duration LONG = Duration.ofSeconds(30);

  static ServerProcess server;
  static Client client;

  @BeforeAll
  static void start() throws Exception {
    server = new ServerProcess();
    client = Client.connect(server.target);
  }

  /** Nothing waits on the server: a test's count of queued Acquires is its own. */
  @BeforeEach
  void noWaiters() throws Exception {
    if (server != null) {
      ServerProcess.waitUntil(PATIENCE, "no queued acquires", () -> {
        try {
          return server.metric("leasehold_waiting_acquires") == 0;
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
      });
    }
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

  /** An elector that starts now and leads: the first of its job. */
  static Elector leading(ElectorTest.Recorder r, String job, String name, Duration ttl) throws Exception {
    Elector e = r.attach(Elector.builder(client, job, name).ttl(ttl)).start();
    assertTrue(e.awaitElected(PATIENCE).isPresent(), name + " never led");
    return e;
  }

  /**
   * The leader transfers: the waiting elector is elected with the next
   * token at once, the old leader reports the loss exactly once (its
   * renewals of the old token do not report it again) and campaigns again,
   * behind the successor.
   */
  @Test
  void theLeaderTransfersToTheWaiterWhichLeadsWithTheNextToken() throws Exception {
    String job = ClientTest.job("transfer");
    // Renewals every 2 s: the test sees several of the successor's, and the
    // old leader's would come in that time.
    Duration ttl = Duration.ofSeconds(6);
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    ElectorTest.Recorder rb = new ElectorTest.Recorder();
    try (Elector a = leading(ra, job, "a", ttl);
         Elector b = rb.attach(Elector.builder(client, job, "b").ttl(ttl)).start()) {
      assertEquals(1, a.token().getAsLong());
      server.waitWaiters(1);
      Lease successor = a.transfer();
      assertEquals(b.holder(), successor.holder());
      assertEquals(2, successor.token());
      assertEquals(ttl, successor.ttl(), "the lease's TTL, unchanged");
      assertFalse(a.isLeader());
      assertEquals(2, b.awaitElected(PATIENCE).getAsLong());
      ServerProcess.waitUntil(PATIENCE, "the loss reported", () -> ra.get().size() == 2);
      assertEquals(List.of("elected 1", "lost 1"), ra.get());
      assertEquals(Tenure.End.END_TRANSFERRED, server.tenureEnd(job, 1));

      // The old leader campaigns again, queued behind the successor, and
      // reports nothing more while the successor renews.
      server.waitWaiters(1);
      double renewals = server.metric("leasehold_renewals_total");
      server.waitRenewals(renewals + 3, () -> assertEquals(2, b.token().orElse(-1), "the successor lost the lead"));
      assertEquals(List.of("elected 1", "lost 1"), ra.get());
      assertEquals(List.of("elected 2"), rb.get());
      assertEquals(b.holder(), client.getLease(job).holder());

      // A transfer back: the old leader is the waiter now.
      Lease back = b.transfer(null);
      assertEquals(a.holder(), back.holder());
      assertEquals(3, back.token());
      assertEquals(3, a.awaitElected(PATIENCE).getAsLong());
      ServerProcess.waitUntil(PATIENCE, "the loss reported", () -> rb.get().size() == 2);
      assertEquals(List.of("elected 2", "lost 2"), rb.get());
    }
  }

  /** A transfer to a named waiter skips the waiters before it in line, who keep their place. */
  @Test
  void aTransferToANamedWaiterSkipsTheFirstInLine() throws Exception {
    String job = ClientTest.job("named");
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    ElectorTest.Recorder rb = new ElectorTest.Recorder();
    ElectorTest.Recorder rc = new ElectorTest.Recorder();
    try (Elector a = leading(ra, job, "a", LONG);
         Elector b = rb.attach(Elector.builder(client, job, "b").ttl(LONG)).start()) {
      server.waitWaiters(1); // b is first in line
      try (Elector c = rc.attach(Elector.builder(client, job, "c").ttl(LONG)).start()) {
        server.waitWaiters(2); // c is second
        Lease successor = a.transfer(c.holder());
        assertEquals(c.holder(), successor.holder());
        assertEquals(2, successor.token());
        assertEquals(2, c.awaitElected(PATIENCE).getAsLong());
        assertFalse(b.isLeader());
        ServerProcess.waitUntil(PATIENCE, "the loss reported", () -> ra.get().size() == 2);
        assertEquals(List.of("elected 1", "lost 1"), ra.get());
        server.waitWaiters(2); // b, then a again
        // b kept its place: first in line when c lets go.
        c.close();
        assertEquals(3, b.awaitElected(PATIENCE).getAsLong());
        assertEquals(List.of("elected 2", "lost 2"), rc.get());
        assertFalse(a.isLeader());
      }
    }
  }

  /**
   * With nobody waiting, or no waiter of the name given, the transfer fails
   * with NoSuccessorException and changes nothing: the elector still leads
   * with its token and reports nothing.
   */
  @Test
  void aTransferWithNoSuccessorFailsAndTheLeaderKeepsLeading() throws Exception {
    String job = ClientTest.job("nobody");
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    try (Elector a = leading(ra, job, "a", LONG)) {
      NoSuccessorException e = assertThrows(NoSuccessorException.class, a::transfer);
      assertEquals("NO_SUCCESSOR", e.reason());
      assertEquals(Status.Code.FAILED_PRECONDITION, e.code());
      assertFalse(e.isRetryable());
      assertEquals(1, a.token().getAsLong());
      assertEquals(a.holder(), client.getLease(job).holder());

      // Someone waits, but not the holder named.
      CompletableFuture<Acquired> waiter = client.acquireAsync(job, "w", LONG, PATIENCE);
      server.waitWaiters(1);
      assertThrows(NoSuccessorException.class, () -> a.transfer("not-waiting"));
      assertEquals(1, a.token().getAsLong());
      assertFalse(waiter.isDone());
      assertEquals(List.of("elected 1"), ra.get());
      assertEquals(Tenure.End.END_UNSPECIFIED, server.tenureEnd(job, 1), "not ended");

      // And then to the one that waits.
      assertEquals("w", a.transfer("w").holder());
      Acquired granted = waiter.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
      assertTrue(granted.acquired());
      assertEquals(2, granted.lease().token());
      client.release(job, "w", 2);
    }
  }

  /**
   * Client.transferLease: to the first waiter with the lease's TTL, or to a
   * named one with a TTL of the caller's; a stale token or holder is
   * LeaseLostException; the async twin fails with the same typed errors.
   */
  @Test
  void transferLeaseHandsOverAndAStaleTokenIsLeaseLost() throws Exception {
    String job = ClientTest.job("client");
    assertEquals(1, client.acquire(job, "a", LONG).lease().token());
    CompletableFuture<Acquired> b = client.acquireAsync(job, "b", LONG, PATIENCE);
    server.waitWaiters(1);
    CompletableFuture<Acquired> c = client.acquireAsync(job, "c", LONG, PATIENCE);
    server.waitWaiters(2);

    long t0 = System.nanoTime();
    Lease toB = client.transferLease(job, "a", 1);
    assertEquals("b", toB.holder());
    assertEquals(2, toB.token());
    assertEquals(LONG, toB.ttl());
    Acquired gb = b.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertTrue(gb.acquired());
    assertEquals(2, gb.lease().token());
    // Granted by the transfer, not by the expiry of a's 30 s lease.
    assertTrue(System.nanoTime() - t0 < LONG.toNanos() / 3, "granted late");

    // The old token, the old holder: lease lost, and nothing changes.
    LeaseLostException lost = assertThrows(LeaseLostException.class, () -> client.transferLease(job, "a", 1));
    assertEquals("LEASE_LOST", lost.reason());
    assertEquals(Status.Code.FAILED_PRECONDITION, lost.code());
    assertEquals(2, lost.currentToken().getAsLong());
    assertEquals("b", lost.currentHolder());
    assertThrows(LeaseLostException.class, () -> client.transferLease(job, "x", 2, "c", null));
    assertFalse(c.isDone());
    assertEquals("b", client.getLease(job).holder());

    // Async, named, with a TTL of its own.
    Lease toC = client.transferLeaseAsync(job, "b", 2, "c", Duration.ofSeconds(20)).get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertEquals("c", toC.holder());
    assertEquals(3, toC.token());
    assertEquals(Duration.ofSeconds(20), toC.ttl());
    assertEquals(3, c.get(PATIENCE.toSeconds(), TimeUnit.SECONDS).lease().token());
    ExecutionException none = assertThrows(ExecutionException.class,
        () -> client.transferLeaseAsync(job, "c", 3).get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
    assertInstanceOf(NoSuccessorException.class, none.getCause());
    ExecutionException stale = assertThrows(ExecutionException.class,
        () -> client.transferLeaseAsync(job, "b", 2).get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
    assertInstanceOf(LeaseLostException.class, stale.getCause());

    List<Tenure> history = server.history(job);
    assertEquals(List.of(3L, 2L, 1L), history.stream().map(Tenure::getToken).toList());
    assertEquals(List.of(Tenure.End.END_UNSPECIFIED, Tenure.End.END_TRANSFERRED, Tenure.End.END_TRANSFERRED),
        history.stream().map(Tenure::getEnd).toList());
    client.release(job, "c", 3);
    assertNull(client.getLease(job).holder());
  }

  /**
   * An elector whose lease was taken behind its back: its transfer fails
   * with LeaseLostException, and it steps down (reports the loss) and
   * campaigns again.
   */
  @Test
  void anElectorsTransferOfALostLeaseStepsDown() throws Exception {
    String job = ClientTest.job("lost");
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    // A TTL of 30 s: its next renewal, 10 s away, does not learn of the
    // release before the transfer does.
    try (Elector a = leading(ra, job, "a", LONG)) {
      client.release(job, a.holder(), 1);
      assertThrows(LeaseLostException.class, a::transfer);
      assertFalse(a.isLeader());
      // It campaigns again, and the job is free: elected with token 2.
      assertEquals(2, a.awaitElected(PATIENCE).getAsLong());
      ServerProcess.waitUntil(PATIENCE, "the election reported", () -> ra.get().size() == 3);
      assertEquals(List.of("elected 1", "lost 1", "elected 2"), ra.get());
    }
  }

  /** Not leading: IllegalStateException, without a call to the server. */
  @Test
  void aTransferWhenNotLeadingFailsWithoutACall() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    // No server there: a call would fail with UnavailableException.
    try (Client nowhere = Client.connect("127.0.0.1:" + port)) {
      try (Elector never = Elector.builder(nowhere, "j", "n").build()) {
        assertThrows(IllegalStateException.class, never::transfer);
      }
      try (Elector campaigning = Elector.builder(nowhere, "j", "n").start()) {
        assertThrows(IllegalStateException.class, () -> campaigning.transfer("x"));
      }
    }
    // A follower of a live job.
    String job = ClientTest.job("follower");
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    try (Elector a = leading(ra, job, "a", LONG);
         Elector b = Elector.builder(client, job, "b").ttl(LONG).start()) {
      server.waitWaiters(1);
      assertThrows(IllegalStateException.class, b::transfer);
      assertEquals(1, a.token().getAsLong());
    }
  }

  /**
   * A renewal refused because of the transfer (sent after the server
   * handed the lease over, answered LEASE_LOST) reaches the elector with
   * the transfer's own answer: the lead ends once, reported once, whichever
   * the elector takes in first. The proxy holds the server's replies to the
   * leader back until both are on their way.
   */
  @Test
  void aRenewalRefusedAroundTheTransferReportsNothingMore() throws Exception {
    String job = ClientTest.job("refused");
    // Renewals every 2 s; its deadline, 6 s after the last, is far enough
    // for the replies held back to come first.
    Duration ttl = Duration.ofSeconds(6);
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    ElectorTest.Recorder rb = new ElectorTest.Recorder();
    try (TcpProxy proxy = new TcpProxy(server.target);
         Client viaProxy = Client.connect(proxy.target());
         Elector a = ra.attach(Elector.builder(viaProxy, job, "a").ttl(ttl)).start()) {
      assertEquals(1, a.awaitElected(PATIENCE).getAsLong());
      try (Elector b = rb.attach(Elector.builder(client, job, "b").ttl(ttl)).start()) {
        server.waitWaiters(1);
        double refused = server.metric("leasehold_renew_losses_total");
        proxy.holdReplies(true);
        CompletableFuture<Lease> transfer = CompletableFuture.supplyAsync(a::transfer);
        assertEquals(2, b.awaitElected(PATIENCE).getAsLong()); // the server has handed over
        // a's next renewal of token 1 is refused; it does not know yet.
        ServerProcess.waitUntil(PATIENCE, "a's renewal refused", () -> {
          try {
            return server.metric("leasehold_renew_losses_total") > refused;
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        });
        assertEquals(1, a.token().orElse(-1), "a learnt of the transfer with the replies held back");
        proxy.holdReplies(false);
        Lease successor = transfer.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
        assertEquals(b.holder(), successor.holder());
        assertEquals(2, successor.token());
        assertTrue(a.awaitLost(PATIENCE));
        // It campaigns again, behind b, and reports nothing more while b
        // renews.
        server.waitWaiters(1);
        double renewals = server.metric("leasehold_renewals_total");
        server.waitRenewals(renewals + 2, () -> assertEquals(2, b.token().orElse(-1), "b lost the lead"));
        assertEquals(List.of("elected 1", "lost 1"), ra.get());
        assertEquals(List.of("elected 2"), rb.get());
      }
    }
  }

  /**
   * Transfers back and forth between two electors, at random moments
   * against their renewals (every 500 ms): whatever races with what, each
   * elector reports each lead once, elected then lost, and no token is led
   * by both. (One elector may lead with one token twice: stepped down by its
   * own deadline in a stall, it is granted its live lease again.)
   */
  @Test
  void transfersRacingWithRenewalsReportEachLeadOnce() throws Exception {
    String job = ClientTest.job("race");
    Duration ttl = Duration.ofMillis(1500);
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    ElectorTest.Recorder rb = new ElectorTest.Recorder();
    int transfers = 0;
    try (Elector a = ra.attach(Elector.builder(client, job, "a").ttl(ttl)).start();
         Elector b = rb.attach(Elector.builder(client, job, "b").ttl(ttl)).start()) {
      for (int round = 0; round < 12; round++) {
        ServerProcess.waitUntil(PATIENCE, "a leader", () -> a.isLeader() || b.isLeader());
        server.waitWaiters(1);
        Thread.sleep(ThreadLocalRandom.current().nextLong(500));
        Elector leader = a.isLeader() ? a : b;
        try {
          leader.transfer();
          transfers++;
        } catch (IllegalStateException | LeaseLostException | NoSuccessorException e) {
          // lost meanwhile (a stall past its deadline), or the other was not
          // queued again yet: the checks below hold all the same
        }
      }
    }
    assertTrue(transfers >= 6, "only " + transfers + " transfers");
    List<Set<Long>> led = List.of(new HashSet<>(), new HashSet<>());
    List<List<String>> both = List.of(ra.get(), rb.get());
    for (int k = 0; k < 2; k++) {
      List<String> events = both.get(k);
      assertEquals(0, events.size() % 2, "a lead not reported as lost at close: " + events);
      for (int i = 0; i < events.size(); i += 2) {
        String elected = events.get(i);
        assertTrue(elected.startsWith("elected "), events.toString());
        long t = Long.parseLong(elected.substring("elected ".length()));
        assertEquals("lost " + t, events.get(i + 1), events.toString());
        led.get(k).add(t);
      }
    }
    Set<Long> common = new HashSet<>(led.get(0));
    common.retainAll(led.get(1));
    assertTrue(common.isEmpty(), "tokens led by both: " + common + ": " + both);
  }
}
