package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.leasehold.v1.Tenure;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The chaos API's test helper ({@link Client#chaos()}), against a real
 * server started with {@code --enable-chaos}: first the example of the
 * README, a worker that steps down when its lease is expired on purpose,
 * then each action, and a server without the flag.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ChaosTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final Duration LONG = Duration.ofSeconds(30);

  static ServerProcess server;
  static Client client;

  @BeforeAll
  static void start() throws Exception {
    server = ServerProcess.withArgs("--enable-chaos");
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

  /** As a user's tests would: no chaos outlives the test that made it. */
  @AfterEach
  void clearAll() {
    if (client != null) {
      ChaosOutcome out = client.chaos().clear();
      assertNull(out.lease());
      assertEquals("", out.inForce());
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

  /**
   * Guarded work, as a worker does it: while it leads, it writes with its
   * token every 50 ms; it stops when its elector reports the loss, or when
   * a write is fenced. It keeps the writes that started after
   * {@link #expired} and succeeded: there must be none.
   */
  static final class GuardedWork {
    final AtomicBoolean stop = new AtomicBoolean();
    final AtomicInteger written = new AtomicInteger();
    /** System.nanoTime() once the lease was expired; Long.MAX_VALUE before. */
    final AtomicLong expired = new AtomicLong(Long.MAX_VALUE);
    final List<Long> lateWrites = Collections.synchronizedList(new ArrayList<>());
    final CompletableFuture<String> stopped = new CompletableFuture<>();

    GuardedWork(String job, long token) {
      Thread t = new Thread(() -> {
        try {
          while (!stop.get()) {
            long started = System.nanoTime();
            long version = client.checkedWrite(job, token, "progress", Integer.toString(written.get()));
            if (started - expired.get() > 0) {
              lateWrites.add(version);
            }
            written.incrementAndGet();
            Thread.sleep(50);
          }
          stopped.complete("lost");
        } catch (FencedException e) {
          stopped.complete("fenced");
        } catch (Throwable e) {
          stopped.completeExceptionally(e);
        }
      }, "guarded-work-" + job);
      t.setDaemon(true);
      t.start();
    }
  }

  /**
   * The README's example: an elector leads and does guarded work; chaos
   * expires its lease. The standby is granted the next token at once, the
   * elector reports the loss, the guarded work stops, no write of it that
   * started after the expiry went through, and a write with the old token
   * is fenced. The history says the chaos API ended the tenure.
   */
  @Test
  void aWorkerStepsDownWhenItsLeaseIsExpired() throws Exception {
    String job = ClientTest.job("steps-down");
    Duration ttl = Duration.ofSeconds(3); // renewals every second
    CompletableFuture<Long> lost = new CompletableFuture<>();
    WorkSlot work = new WorkSlot();
    try (Elector worker = Elector.builder(client, job, "worker").ttl(ttl)
            .onLost(t -> {
              work.stop();
              lost.complete(t);
            }).start()) {
      long token = worker.awaitElected(PATIENCE).orElseThrow();
      assertEquals(1, token);
      try (Elector standby = Elector.builder(client, job, "standby").ttl(ttl).start()) {
        server.waitWaiters(1); // the standby waits
        GuardedWork w = work.start(job, token);
        ServerProcess.waitUntil(PATIENCE, "guarded writes", () -> w.written.get() >= 3);

        ChaosOutcome out = client.chaos().expire(job);
        w.expired.set(System.nanoTime());
        // The first waiter is granted the next token at once.
        assertEquals(standby.holder(), out.lease().holder());
        assertEquals(2, out.lease().token());
        assertEquals("", out.inForce(), "expire leaves nothing in force");
        assertEquals(2, standby.awaitElected(PATIENCE).getAsLong());

        // The worker steps down: the elector reports the loss (at its next
        // renewal), and the guarded work stops (fenced, or told by onLost).
        assertEquals(1, lost.get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
        assertFalse(worker.isLeader());
        String why = w.stopped.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
        assertTrue(why.equals("fenced") || why.equals("lost"), why);
        assertEquals(List.of(), w.lateWrites, "writes with the expired token went through");

        // Its next write with the old token is fenced.
        FencedException fenced = assertThrows(FencedException.class,
            () -> client.checkedWrite(job, token, "progress", "late"));
        assertEquals(2, fenced.currentToken().getAsLong());
        assertEquals(Tenure.End.END_CHAOS, server.tenureEnd(job, 1));
      }
    }
  }

  /** The guarded work of an elector's callback, started once it leads. */
  static final class WorkSlot {
    private volatile GuardedWork work;

    GuardedWork start(String job, long token) {
      work = new GuardedWork(job, token);
      return work;
    }

    void stop() {
      GuardedWork w = work;
      if (w != null) {
        w.stop.set(true);
      }
    }
  }

  /** Expire with nobody waiting frees the job; the holder's renewal is LEASE_LOST. */
  @Test
  void expireEndsTheGrantAndTheHoldersRenewalIsLeaseLost() throws Exception {
    String job = ClientTest.job("expire");
    assertEquals(1, client.acquire(job, "a", LONG).lease().token());
    ChaosOutcome out = client.chaos().expire(job);
    assertEquals(job, out.lease().job());
    assertNull(out.lease().holder(), "free");
    assertEquals(1, out.lease().token());
    assertThrows(LeaseLostException.class, () -> client.renew(job, "a", 1, LONG));
    assertThrows(FencedException.class, () -> client.checkedWrite(job, 1, "k", "v"));
    assertEquals(Tenure.End.END_CHAOS, server.tenureEnd(job, 1));

    // Nobody holds it now: nothing changes.
    ChaosOutcome again = client.chaos().expire(job);
    assertNull(again.lease().holder());
    assertEquals(1, again.lease().token());
  }

  /** fence(job, 2): the next two fenced writes are FENCED whatever their token, the third goes through. */
  @Test
  void fenceRefusesTheNextWritesThenLetsThemThrough() throws Exception {
    String job = ClientTest.job("fence");
    long token = client.acquire(job, "a", LONG).lease().token();
    ChaosOutcome out = client.chaos().fence(job, 2);
    assertEquals("a", out.lease().holder());
    assertEquals(token, out.lease().token());
    assertTrue(out.inForce().contains("2"), out.inForce());
    for (int i = 0; i < 2; i++) {
      FencedException e = assertThrows(FencedException.class, () -> client.checkedWrite(job, token, "k", "v"));
      assertEquals("FENCED", e.reason());
    }
    assertEquals(1, client.checkedWrite(job, token, "k", "v"));
    assertEquals("a", client.getLease(job).holder(), "the lease is untouched");
    client.release(job, "a", token);
  }

  /** delay(job, by): an answer about the job takes at least that long, until cleared. */
  @Test
  void delayHoldsEveryAnswerAboutTheJob() throws Exception {
    String job = ClientTest.job("delay");
    Duration by = Duration.ofMillis(500);
    ChaosOutcome out = client.chaos().delay(job, by);
    assertFalse(out.inForce().isEmpty());
    long t0 = System.nanoTime();
    Lease l = client.getLease(job);
    long took = System.nanoTime() - t0;
    assertNull(l.holder());
    assertTrue(took >= by.toNanos(), "GetLease took " + took / 1e6 + " ms");
    ChaosOutcome cleared = client.chaos().clear(job);
    assertEquals("", cleared.inForce());
    assertEquals(job, cleared.lease().job());
  }

  /**
   * pause(job, d): the holder's renewal is refused as LEASE_LOST, as if it
   * came too late, while GetLease still shows it as the holder (its grant
   * runs out at its deadline).
   */
  @Test
  void pauseRefusesTheHoldersRenewals() throws Exception {
    String job = ClientTest.job("pause");
    long token = client.acquire(job, "a", LONG).lease().token();
    ChaosOutcome out = client.chaos().pause(job, Duration.ofSeconds(5));
    assertFalse(out.inForce().isEmpty());
    LeaseLostException e = assertThrows(LeaseLostException.class, () -> client.renew(job, "a", token, LONG));
    assertEquals("LEASE_LOST", e.reason());
    Lease l = client.getLease(job);
    assertEquals("a", l.holder(), "still the holder until its deadline");
    assertEquals(token, l.token());
  }

  /**
   * transfer(job): the first waiter is granted token + 1 at once (history
   * END_TRANSFERRED); with nobody waiting, NoSuccessorException and nothing
   * changes.
   */
  @Test
  void transferHandsTheLeaseToTheWaiterOrIsNoSuccessor() throws Exception {
    String job = ClientTest.job("transfer");
    long token = client.acquire(job, "a", LONG).lease().token();
    NoSuccessorException none = assertThrows(NoSuccessorException.class, () -> client.chaos().transfer(job));
    assertEquals("NO_SUCCESSOR", none.reason());
    assertEquals(Status.Code.FAILED_PRECONDITION, none.code());
    assertEquals("a", client.getLease(job).holder(), "nothing changed");

    CompletableFuture<Acquired> waiter = client.acquireAsync(job, "b", LONG, PATIENCE);
    server.waitWaiters(1);
    ChaosOutcome out = client.chaos().transfer(job);
    assertEquals("b", out.lease().holder());
    assertEquals(token + 1, out.lease().token());
    Acquired granted = waiter.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertTrue(granted.acquired());
    assertEquals(token + 1, granted.lease().token());
    assertThrows(LeaseLostException.class, () -> client.renew(job, "a", token, LONG));
    assertEquals(Tenure.End.END_TRANSFERRED, server.tenureEnd(job, token));
    client.release(job, "b", token + 1);
  }

  /** clear(job) clears that job; clear() every job (no lease in its outcome). */
  @Test
  void clearClearsOneJobOrEveryJob() throws Exception {
    String one = ClientTest.job("clear-one");
    String other = ClientTest.job("clear-other");
    long t1 = client.acquire(one, "a", LONG).lease().token();
    long t2 = client.acquire(other, "a", LONG).lease().token();
    client.chaos().fence(one, 5);
    assertFalse(client.chaos().delay(one, Duration.ofMillis(100)).inForce().isEmpty());
    assertFalse(client.chaos().fence(other, 5).inForce().isEmpty());

    ChaosOutcome cleared = client.chaos().clear(one);
    assertEquals("", cleared.inForce());
    assertEquals("a", cleared.lease().holder());
    assertEquals(1, client.checkedWrite(one, t1, "k", "v"), "no write of the job is fenced now");
    assertThrows(FencedException.class, () -> client.checkedWrite(other, t2, "k", "v"), "the other job's fence holds");

    ChaosOutcome all = client.chaos().clear();
    assertNull(all.lease());
    assertEquals("", all.inForce());
    assertEquals(1, client.checkedWrite(other, t2, "k", "v"));
    client.release(one, "a", t1);
    client.release(other, "a", t2);
  }

  /** Each action's future answers as the blocking call does, and fails with the same typed exceptions. */
  @Test
  void everyActionHasAFuture() throws Exception {
    String job = ClientTest.job("async");
    Chaos chaos = client.chaos();
    long token = client.acquire(job, "a", LONG).lease().token();
    ChaosOutcome fenced = chaos.fenceAsync(job, 1).get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertEquals("a", fenced.lease().holder());
    assertThrows(FencedException.class, () -> client.checkedWrite(job, token, "k", "v"));
    assertFalse(chaos.delayAsync(job, Duration.ofMillis(50)).get(PATIENCE.toSeconds(), TimeUnit.SECONDS).inForce().isEmpty());
    assertEquals("", chaos.clearAsync(job).get(PATIENCE.toSeconds(), TimeUnit.SECONDS).inForce());
    ExecutionException none = assertThrows(ExecutionException.class,
        () -> chaos.transferAsync(job).get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
    assertInstanceOf(NoSuccessorException.class, none.getCause());
    ExecutionException invalid = assertThrows(ExecutionException.class,
        () -> chaos.pauseAsync(job, Duration.ZERO).get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
    assertInstanceOf(InvalidArgumentException.class, invalid.getCause());
    assertFalse(chaos.pauseAsync(job, Duration.ofSeconds(5)).get(PATIENCE.toSeconds(), TimeUnit.SECONDS).inForce().isEmpty());
    assertThrows(LeaseLostException.class, () -> client.renew(job, "a", token, LONG));
    ChaosOutcome expired = chaos.expireAsync(job).get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertNull(expired.lease().holder());
    ChaosOutcome all = chaos.clearAsync().get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertNull(all.lease());
  }

  /** Out of range: a pause or delay that is not above 0, a fence of no writes. */
  @Test
  void outOfRangeIsInvalidArgument() {
    String job = ClientTest.job("range");
    assertThrows(InvalidArgumentException.class, () -> client.chaos().pause(job, Duration.ZERO));
    assertThrows(InvalidArgumentException.class, () -> client.chaos().delay(job, Duration.ofSeconds(61)));
    assertThrows(InvalidArgumentException.class, () -> client.chaos().fence(job, 0));
  }

  /** A server without --enable-chaos: every call throws ChaosDisabledException, which says so. */
  @Test
  void aServerWithoutTheFlagSaysSo() throws Exception {
    try (ServerProcess plain = new ServerProcess(); Client c = Client.connect(plain.target)) {
      ChaosDisabledException e = assertThrows(ChaosDisabledException.class, () -> c.chaos().expire("job"));
      assertTrue(e.getMessage().contains("--enable-chaos"), e.getMessage());
      assertEquals(Status.Code.UNIMPLEMENTED, e.code());
      assertFalse(e.isRetryable());
      assertThrows(ChaosDisabledException.class, () -> c.chaos().clear());
      ExecutionException async = assertThrows(ExecutionException.class,
          () -> c.chaos().fenceAsync("job", 1).get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
      assertInstanceOf(ChaosDisabledException.class, async.getCause());
      // The rest of the API is served as usual.
      assertTrue(c.acquire("job", "a", LONG).acquired());
    }
  }
}
