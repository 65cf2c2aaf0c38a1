package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.leasehold.v1.Tenure;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A preferred candidate: its waiting Acquire is queued ahead of those that
 * are not preferred, the live holder (unless preferred itself) is told so
 * by its renewals ({@link Client#renewLease}: successorWaiting), and an
 * elector built with {@code yieldToPreferred} hands over at its next
 * renewal. Through the client, the elector and the conformance worker,
 * against the real server.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class PreferredTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final Duration LONG = Duration.ofSeconds(30);
  /** An elector's TTL where a test waits for its renewals: one every second. */
  static final Duration TTL = Duration.ofSeconds(3);

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
      waitWaitersExactly(0);
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

  static void waitWaitersExactly(int n) throws Exception {
    ServerProcess.waitUntil(PATIENCE, n + " queued acquire(s)", () -> {
      try {
        return server.metric("leasehold_waiting_acquires") == n;
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
  }

  /** A waiting Acquire of {@code holder}, preferred or not. */
  static CompletableFuture<Acquired> waiter(String job, String holder, boolean preferred) {
    return client.acquireAsync(job, holder, LONG, PATIENCE, false, preferred);
  }

  static Acquired granted(CompletableFuture<Acquired> f) throws Exception {
    Acquired a = f.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertTrue(a.acquired(), a.toString());
    return a;
  }

  /**
   * The holder's renewals say successorWaiting while a preferred Acquire
   * waits, and not while only plain ones wait (nor once the preferred one
   * left); renew() and the async twin go on as before.
   */
  @Test
  void aHolderIsToldWhileAPreferredCandidateWaits() throws Exception {
    String job = ClientTest.job("told");
    assertEquals(1, client.acquire(job, "a", LONG).lease().token());
    Renewed alone = client.renewLease(job, "a", 1, LONG);
    assertFalse(alone.successorWaiting(), "nobody waits");
    assertEquals("a", alone.lease().holder());
    assertEquals(1, alone.lease().token());
    assertEquals(LONG, alone.lease().ttl());

    CompletableFuture<Acquired> plain = waiter(job, "w", false);
    server.waitWaiters(1);
    assertFalse(client.renewLease(job, "a", 1, LONG).successorWaiting(), "only a plain Acquire waits");

    CompletableFuture<Acquired> preferred = waiter(job, "p", true);
    server.waitWaiters(2);
    Renewed told = client.renewLease(job, "a", 1, LONG);
    assertTrue(told.successorWaiting(), "a preferred Acquire waits");
    assertEquals(1, told.lease().token());
    assertTrue(client.renewLeaseAsync(job, "a", 1, LONG).get(PATIENCE.toSeconds(), TimeUnit.SECONDS).successorWaiting());
    // Nothing is taken from the holder: it holds on, and renew() is as before.
    Lease renewed = client.renew(job, "a", 1, LONG);
    assertEquals("a", renewed.holder());
    assertEquals(1, renewed.token());
    assertEquals("a", client.getLease(job).holder());
    assertFalse(plain.isDone());
    assertFalse(preferred.isDone());

    // The preferred candidate leaves: no longer told.
    preferred.cancel(true);
    waitWaitersExactly(1);
    assertFalse(client.renewLease(job, "a", 1, LONG).successorWaiting(), "the preferred candidate left");

    client.release(job, "a", 1);
    assertEquals(2, granted(plain).lease().token());
    client.release(job, "w", 2);
  }

  /**
   * Preferred waiters are queued ahead of plain ones that came before them,
   * first come, first served within each class: released in turn, the job
   * goes to p1, p2, then w1, w2.
   */
  @Test
  void aPreferredWaiterIsGrantedBeforeAPlainOneThatCameFirst() throws Exception {
    String job = ClientTest.job("line");
    assertEquals(1, client.acquire(job, "a", LONG).lease().token());
    CompletableFuture<Acquired> w1 = waiter(job, "w1", false);
    server.waitWaiters(1);
    CompletableFuture<Acquired> p1 = waiter(job, "p1", true);
    server.waitWaiters(2);
    CompletableFuture<Acquired> w2 = waiter(job, "w2", false);
    server.waitWaiters(3);
    CompletableFuture<Acquired> p2 = waiter(job, "p2", true);
    server.waitWaiters(4);

    client.release(job, "a", 1);
    assertEquals("p1", granted(p1).lease().holder());
    assertEquals(2, p1.get().lease().token());
    assertFalse(w1.isDone(), "w1 came first, but is not preferred");
    client.release(job, "p1", 2);
    assertEquals(3, granted(p2).lease().token());
    client.release(job, "p2", 3);
    assertEquals(4, granted(w1).lease().token());
    assertFalse(w2.isDone());
    client.release(job, "w1", 4);
    assertEquals(5, granted(w2).lease().token());
    client.release(job, "w2", 5);
  }

  /**
   * A preferred holder is not told when another preferred candidate waits,
   * neither one granted a free job nor one granted by a transfer; and a
   * preferred elector that would yield leads on across its renewals.
   */
  @Test
  void aPreferredLeaderIsNotToldOfAnotherPreferredCandidate() throws Exception {
    String job = ClientTest.job("both");
    assertEquals(1, client.acquire(job, "p1", LONG, Duration.ZERO, false, true).lease().token());
    CompletableFuture<Acquired> p2 = waiter(job, "p2", true);
    server.waitWaiters(1);
    assertFalse(client.renewLease(job, "p1", 1, LONG).successorWaiting(), "a preferred holder");
    CompletableFuture<Acquired> w = waiter(job, "w", false);
    server.waitWaiters(2);
    assertFalse(client.renewLease(job, "p1", 1, LONG).successorWaiting());

    // Handed to the first in line, p2: a preferred grant too.
    assertEquals("p2", client.transferLease(job, "p1", 1).holder());
    assertEquals(2, granted(p2).lease().token());
    CompletableFuture<Acquired> p3 = waiter(job, "p3", true);
    server.waitWaiters(2);
    assertFalse(client.renewLease(job, "p2", 2, LONG).successorWaiting(), "a preferred holder, by transfer");
    client.release(job, "p2", 2);
    assertEquals(3, granted(p3).lease().token());
    client.release(job, "p3", 3);
    assertEquals(4, granted(w).lease().token());
    client.release(job, "w", 4);

    // Electors: the preferred leader, though it yields to preferred
    // candidates, is never told of the one that waits, and leads on.
    String ejob = ClientTest.job("both-electors");
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    ElectorTest.Recorder rb = new ElectorTest.Recorder();
    try (Elector a = ra.attach(Elector.builder(client, ejob, "a").ttl(TTL).preferred(true).yieldToPreferred(true)).start()) {
      assertEquals(1, a.awaitElected(PATIENCE).getAsLong());
      try (Elector b = rb.attach(Elector.builder(client, ejob, "b").ttl(TTL).preferred(true)).start()) {
        server.waitWaiters(1);
        double renewals = server.metric("leasehold_renewals_total");
        server.waitRenewals(renewals + 3, () -> assertEquals(1, a.token().orElse(-1), "a lost the lead: " + ra.get()));
        assertEquals(List.of("elected 1"), ra.get());
        assertEquals(List.of(), rb.get());
        assertFalse(b.isLeader());
        assertEquals(a.holder(), client.getLease(ejob).holder());
      }
    }
  }

  /**
   * A plain elector that does not yield is told, and nothing is taken from
   * it: it leads on across its renewals while a preferred elector waits.
   */
  @Test
  void aLeaderThatDoesNotYieldKeepsTheLease() throws Exception {
    String job = ClientTest.job("keeps");
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    try (Elector a = ra.attach(Elector.builder(client, job, "a").ttl(TTL)).start()) {
      assertEquals(1, a.awaitElected(PATIENCE).getAsLong());
      try (Elector p = Elector.builder(client, job, "p").ttl(TTL).preferred(true).start()) {
        server.waitWaiters(1);
        double renewals = server.metric("leasehold_renewals_total");
        server.waitRenewals(renewals + 3, () -> assertEquals(1, a.token().orElse(-1), "a lost the lead: " + ra.get()));
        assertEquals(List.of("elected 1"), ra.get());
        assertFalse(p.isLeader());
      }
    }
  }

  /**
   * A yielding elector hands over to a preferred elector at its next
   * renewal: the preferred one leads with the next token, the tenure ends
   * TRANSFERRED, the yielder reports the loss once and campaigns again,
   * and is not handed the lease back while the preferred one leads; when
   * that one closes, the yielder leads again.
   */
  @Test
  void aYieldingElectorHandsOverToAPreferredOneAtItsNextRenewal() throws Exception {
    String job = ClientTest.job("yield");
    ElectorTest.Recorder ra = new ElectorTest.Recorder();
    ElectorTest.Recorder rb = new ElectorTest.Recorder();
    try (Elector a = ra.attach(Elector.builder(client, job, "a").ttl(TTL).yieldToPreferred(true)).start()) {
      assertEquals(1, a.awaitElected(PATIENCE).getAsLong());
      Elector b = rb.attach(Elector.builder(client, job, "b").ttl(TTL).preferred(true)).start();
      try {
        assertEquals(2, b.awaitElected(PATIENCE).getAsLong());
        assertTrue(a.awaitLost(PATIENCE));
        assertFalse(a.isLeader());
        ServerProcess.waitUntil(PATIENCE, "the loss reported", () -> ra.get().size() == 2);
        assertEquals(List.of("elected 1", "lost 1"), ra.get());
        assertEquals(Tenure.End.END_TRANSFERRED, server.tenureEnd(job, 1), "handed over, not released or expired");

        // The yielder campaigns again, behind b, and is not handed the lease
        // back: b's grant is a preferred one, so b's renewals do not tell.
        server.waitWaiters(1);
        double renewals = server.metric("leasehold_renewals_total");
        server.waitRenewals(renewals + 4, () -> assertEquals(2, b.token().orElse(-1), "b lost the lead: " + rb.get()));
        assertEquals(List.of("elected 1", "lost 1"), ra.get());
        assertEquals(List.of("elected 2"), rb.get());
        assertEquals(b.holder(), client.getLease(job).holder());
      } finally {
        b.close();
      }
      assertEquals(3, a.awaitElected(PATIENCE).getAsLong());
      assertEquals(List.of("elected 2", "lost 2"), rb.get());
    }
  }

  /**
   * The conformance worker's {@code --yield} and {@code --preferred}: the
   * yielding worker leads, the preferred one starts and is elected with the
   * next token at the yielder's next renewal; the yielder reports the loss
   * and is not elected again while the preferred one leads.
   */
  @Test
  void theWorkersYieldAndPreferredFlags() throws Exception {
    String job = ClientTest.job("workers");
    try (BindToStreamTest.Worker y = new BindToStreamTest.Worker("yielder", server.target, job, TTL, "--yield")) {
      assertNotNull(y.holder());
      assertEquals("elected token=1", y.await("elected ", PATIENCE.toMillis()));
      try (BindToStreamTest.Worker p = new BindToStreamTest.Worker("preferred", server.target, job, TTL, "--preferred")) {
        String ph = p.holder();
        assertEquals("elected token=2", p.await("elected ", PATIENCE.toMillis()));
        assertEquals("lost token=1", y.await("lost ", PATIENCE.toMillis()));
        assertEquals(ph, client.getLease(job).holder());
        assertEquals(Tenure.End.END_TRANSFERRED, server.tenureEnd(job, 1));
        server.waitWaiters(1); // the yielder, queued again
        double renewals = server.metric("leasehold_renewals_total");
        server.waitRenewals(renewals + 3, () -> { });
        assertNull(y.await("elected ", 0), "the yielder was handed the lease back");
        assertEquals(ph, client.getLease(job).holder());
        p.send("quit");
        assertNotNull(p.await("bye", PATIENCE.toMillis()));
      }
      // The preferred worker released on quit: the yielder leads again.
      assertEquals("elected token=3", y.await("elected ", PATIENCE.toMillis()));
      y.send("quit");
      assertNotNull(y.await("bye", PATIENCE.toMillis()));
    }
  }
}
