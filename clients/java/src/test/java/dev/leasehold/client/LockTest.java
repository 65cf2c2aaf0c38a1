package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link Client#lock} and {@link Client#lockAsync} against a real server
 * started with {@code --enable-chaos}: a lock waits for the holder to
 * leave, renews across several TTLs, releases on a normal exit and on an
 * exception, reports a loss (chaos expire), after which its token is
 * fenced, and a timeout while waiting throws the typed exception and
 * leaves nothing held.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class LockTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final Duration LONG = Duration.ofSeconds(60);

  static ServerProcess server;
  static Client client;

  @BeforeAll
  static void start() throws Exception {
    server = ServerProcess.withArgs("--enable-chaos");
    client = Client.connect(server.target);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) {
      server.close();
    }
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

  @Test
  void aLockWaitsForTheHolderToLeaveAndReleasesOnExit() throws Exception {
    String job = ClientTest.job("lock-wait");
    long first = client.acquire(job, "other", LONG).lease().token();
    CompletableFuture<Lock> waiting = CompletableFuture.supplyAsync(() -> client.lock(job, Duration.ofSeconds(5)));
    server.waitWaiters(1); // the lock waits in line
    assertFalse(waiting.isDone(), "the lock does not take a held lease");
    client.release(job, "other", first);
    try (Lock lock = waiting.get(PATIENCE.toSeconds(), TimeUnit.SECONDS)) {
      assertEquals(first + 1, lock.token());
      assertTrue(lock.isHeld());
      assertTrue(lock.holder().startsWith(Lock.DEFAULT_NAME + "@"), lock.holder());
      assertEquals(lock.holder(), client.getLease(job).holder());
      assertEquals(1, client.checkedWrite(job, lock.token(), "k", "v"));
      lock.check(); // held: nothing thrown
    }
    assertFalse(client.getLease(job).isHeld(), "closing the lock released the lease");
  }

  @Test
  void eachLockIsItsOwnHolder() throws Exception {
    String job = ClientTest.job("lock-holders");
    try (Lock a = client.lock(job, LONG, Duration.ZERO, "same")) {
      // One try, same name: a second lock is another holder, refused.
      assertThrows(LockTimeoutException.class, () -> client.lock(job, LONG, Duration.ZERO, "same"));
      assertTrue(a.holder().startsWith("same@"));
      assertTrue(a.isHeld());
    }
  }

  @Test
  void aLockRenewsAcrossSeveralTtls() throws Exception {
    String job = ClientTest.job("lock-renews");
    Duration ttl = Duration.ofSeconds(1); // renewals every 333 ms
    double before = server.metric("leasehold_renewals_total");
    try (Lock lock = client.lock(job, ttl)) {
      // Four TTLs' worth of renewals: held all along.
      server.waitRenewals(before + 12, () -> assertTrue(lock.isHeld(), "held while renewed"));
      assertFalse(lock.lost().isDone());
      Lease now = client.getLease(job);
      assertEquals(lock.holder(), now.holder());
      assertEquals(lock.token(), now.token(), "renewals keep the token");
    }
    assertFalse(client.getLease(job).isHeld());
  }

  @Test
  void anExceptionInTheBlockReleasesTheLease() throws Exception {
    String job = ClientTest.job("lock-throws");
    long[] token = new long[1];
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> {
      try (Lock lock = client.lock(job, LONG)) {
        token[0] = lock.token();
        assertTrue(client.getLease(job).isHeld());
        throw new IllegalStateException("the work failed");
      }
    });
    assertEquals("the work failed", e.getMessage());
    Lease after = client.getLease(job);
    assertFalse(after.isHeld(), "released on the exception");
    assertEquals(token[0], after.token());
    assertEquals(Tenure.End.RELEASED, client.history(job).get(0).end());
  }

  @Test
  void aLossIsReportedAndTheTokenIsFencedAfterIt() throws Exception {
    String job = ClientTest.job("lock-lost");
    Duration ttl = Duration.ofSeconds(3);
    AtomicInteger told = new AtomicInteger();
    try (Lock lock = client.lock(job, ttl)) {
      lock.onLost(told::incrementAndGet);
      long token = lock.token();
      assertEquals(1, client.checkedWrite(job, token, "k", "before"));
      client.chaos().expire(job);
      // The next renewal (within ttl/3) is refused: the lock reports it.
      assertEquals(token, lock.lost().get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
      assertTrue(lock.awaitLost(Duration.ZERO));
      assertFalse(lock.isHeld());
      ServerProcess.waitUntil(PATIENCE, "the loss listener", () -> told.get() == 1);
      LeaseLostException lost = assertThrows(LeaseLostException.class, lock::check);
      assertInstanceOf(LeaseLostException.class, lost.getCause(), "the renewal's refusal");
      FencedException fenced = assertThrows(FencedException.class,
          () -> client.checkedWrite(job, token, "k", "after"));
      assertEquals(token, fenced.currentToken().getAsLong());
      // Another holder takes the job; the old token stays fenced.
      long next = client.acquire(job, "next", LONG).lease().token();
      assertEquals(token + 1, next);
      assertThrows(FencedException.class, () -> client.checkedWrite(job, token, "k", "later"));
      assertEquals("before", client.read(job, "k").valueUtf8());
    }
    // Closing a lost lock releases nothing: the new holder keeps it.
    assertEquals("next", client.getLease(job).holder());
    assertEquals(1, told.get(), "one loss, one report");
  }

  @Test
  void aLockStepsDownByItsOwnDeadlineWhenTheServerIsPaused() throws Exception {
    try (ServerProcess paused = new ServerProcess(); Client c = Client.connect(paused.target)) {
      String job = "lock-paused";
      Duration ttl = Duration.ofSeconds(2);
      try (Lock lock = c.lock(job, ttl)) {
        paused.signal("STOP");
        long stopped = System.nanoTime();
        try {
          assertTrue(lock.awaitLost(PATIENCE), "lost by its deadline");
          long after = System.nanoTime() - stopped;
          assertTrue(after <= ttl.toNanos() + TimeUnit.SECONDS.toNanos(5),
              "lost " + after / 1_000_000 + " ms after the freeze (ttl " + ttl + ")");
          assertFalse(lock.isHeld());
        } finally {
          paused.signal("CONT");
        }
      }
    }
  }

  @Test
  void aTimeoutWhileWaitingThrowsTheTypedExceptionAndLeavesNothingHeld() throws Exception {
    String job = ClientTest.job("lock-timeout");
    long held = client.acquire(job, "other", LONG).lease().token();
    LockTimeoutException e = assertThrows(LockTimeoutException.class,
        () -> client.lock(job, LONG, Duration.ofMillis(500), "late"));
    assertTrue(e.isRetryable());
    assertEquals(io.grpc.Status.Code.DEADLINE_EXCEEDED, e.code());
    ServerProcess.waitUntil(PATIENCE, "the timed-out Acquire to leave the queue", () -> {
      try {
        return server.metric("leasehold_waiting_acquires") == 0;
      } catch (Exception x) {
        throw new RuntimeException(x);
      }
    });
    client.release(job, "other", held);
    assertFalse(client.getLease(job).isHeld(), "nothing granted to the lock that timed out");
    // One try on a free job takes it.
    try (Lock lock = client.lock(job, LONG, Duration.ZERO)) {
      assertEquals(held + 1, lock.token());
    }
  }

  @Test
  void lockAsyncCompletesWithTheLockAndACancelLeavesNothingHeld() throws Exception {
    String job = ClientTest.job("lock-async");
    CompletableFuture<Lock> f = client.lockAsync(job, LONG);
    Lock lock = f.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    try {
      assertEquals(1, lock.token());
      // A second lock waits; cancelling it leaves the queue, takes nothing.
      CompletableFuture<Lock> second = client.lockAsync(job, LONG);
      server.waitWaiters(1);
      assertTrue(second.cancel(true));
      assertThrows(CancellationException.class, second::get);
      ServerProcess.waitUntil(PATIENCE, "the cancelled Acquire to leave the queue", () -> {
        try {
          return server.metric("leasehold_waiting_acquires") == 0;
        } catch (Exception x) {
          throw new RuntimeException(x);
        }
      });
    } finally {
      lock.close();
    }
    assertFalse(client.getLease(job).isHeld());
    lock.close(); // idempotent
    assertTrue(lock.lost().isCancelled(), "closed without a loss");
    // A refused campaign fails the future with the typed exception.
    ExecutionException bad = assertThrows(ExecutionException.class,
        () -> client.lockAsync(job, Duration.ofMillis(1)).get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
    assertInstanceOf(InvalidArgumentException.class, bad.getCause());
    assertThrows(IllegalArgumentException.class, () -> client.lock("", LONG));
    assertThrows(IllegalArgumentException.class, () -> client.lock(job, Duration.ZERO));
    Lock again = client.lockAsync(job, LONG, null, "again").get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    try (again) {
      assertNotEquals(lock.holder(), again.holder());
      assertSame(again, again.onLost(() -> { }));
    }
  }
}
