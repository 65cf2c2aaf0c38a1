package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Retries, reconnecting and cancellation against the real server: an
 * outage is retried with backoff and bounded warnings, the elector leads
 * again soon after the server is back, cancellation and timeouts surface as
 * java.util.concurrent's own types, and a cancelled waiting Acquire gives
 * back a grant it may have been given.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class RetriesTest {
  private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);

  @Test
  void backoffDoublesWithJitterUpToItsCapAndWarningsComeOneEveryFewSeconds() {
    Retry.Backoff b = new Retry.Backoff(100 * MS, 1000 * MS);
    for (long want : new long[] {100, 200, 400, 800, 1000, 1000}) {
      long d = b.next();
      assertTrue(d >= want * MS / 2 && d <= want * MS, d + " not in [" + want / 2 + ", " + want + "] ms");
    }
    b.reset();
    assertTrue(b.next() <= 100 * MS);
    assertTrue(new Retry.Backoff(5000 * MS, 5000 * MS).nextBefore(12_000 * MS, 10_000 * MS) <= 1000 * MS);
    Retry.Warnings w = new Retry.Warnings();
    assertEquals(0, w.allow(0));
    for (int i = 1; i < 50; i++) {
      assertEquals(-1, w.allow(i * 100 * MS));
    }
    assertEquals(49, w.allow(Retry.WARN_EVERY_NANOS));
  }

  /**
   * Counts the elector's warnings and its failed attempts (one DEBUG line
   * each) as SLF4J's binding in the tests (slf4j-simple, which writes each
   * line to the System.err of the moment) prints them, and passes every
   * line on.
   */
  static final class Count extends OutputStream {
    final AtomicInteger warnings = new AtomicInteger();
    final AtomicInteger attempts = new AtomicInteger();
    private final PrintStream to;
    private final java.io.ByteArrayOutputStream line = new java.io.ByteArrayOutputStream();

    Count(PrintStream to) {
      this.to = to;
    }

    @Override
    public synchronized void write(int b) {
      to.write(b);
      if (b != '\n') {
        line.write(b);
        return;
      }
      String s = line.toString(StandardCharsets.UTF_8);
      line.reset();
      if (s.contains(" WARN " + Elector.class.getName() + " ")) {
        warnings.incrementAndGet();
      } else if (s.contains(" DEBUG " + Elector.class.getName() + " ")) {
        attempts.incrementAndGet();
      }
    }

    @Override
    public void flush() {
      to.flush();
    }
  }

  @Test
  void anOutageIsRetriedWithBackoffAndTheElectorLeadsAgainWhenTheServerIsBack() throws Exception {
    PrintStream err = System.err;
    Count count = new Count(err);
    ServerProcess server = new ServerProcess();
    ServerProcess back = null;
    System.setErr(new PrintStream(count, true, StandardCharsets.UTF_8));
    try (Client client = Client.connect(server.target);
        Elector e = Elector.builder(client, "outage", "e").ttl(Duration.ofSeconds(2)).start()) {
      long first = e.awaitElected(ServerProcess.PATIENCE).orElseThrow();
      server.kill();
      long killed = System.nanoTime();
      ServerProcess.waitUntil(ServerProcess.PATIENCE, "the step-down by its deadline", () -> !e.isLeader());
      // The outage lasts 5 s, past the deadline and into the campaign's backoff.
      long left = TimeUnit.SECONDS.toNanos(5) - (System.nanoTime() - killed);
      if (left > 0) {
        TimeUnit.NANOSECONDS.sleep(left);
      }
      int warnings = count.warnings.get();
      int attempts = count.attempts.get();
      System.out.println("5 s outage: " + attempts + " failed attempts, " + warnings + " warnings");
      assertTrue(warnings >= 1, "the outage was logged: slf4j-simple writes the elector's WARN lines to stderr");
      // Renewals from ttl/10 within the deadline, then a campaign from 100 ms
      // up to 1 s; warnings one every 5 s, plus the step-down.
      assertTrue(attempts <= 25, attempts + " attempts in a 5 s outage");
      assertTrue(warnings <= 4, warnings + " warnings in a 5 s outage");
      back = server.restart();
      long t = System.nanoTime();
      long token = e.awaitElected(ServerProcess.PATIENCE).orElseThrow();
      System.out.println("re-elected " + (System.nanoTime() - t) / MS + " ms after the server was back");
      assertTrue(token >= first);
    } finally {
      System.setErr(err);
      if (back != null) {
        back.close();
      }
      server.close();
    }
  }

  @Test
  void cancellationAndTimeoutsAreJavaConcurrentTypesWithTheLeaseholdErrorAsCause() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      assertTrue(client.acquire("cancel", "a", Duration.ofSeconds(30)).acquired());
      // A future: get(timeout) times out; cancel(true) cancels the call.
      CompletableFuture<Acquired> f = client.acquireAsync("cancel", "b", Duration.ofSeconds(30), Duration.ofSeconds(10));
      assertThrows(TimeoutException.class, () -> f.get(100, TimeUnit.MILLISECONDS));
      assertTrue(f.cancel(true));
      assertThrows(CancellationException.class, f::get);
      // A blocking call whose thread is interrupted.
      AtomicReference<Throwable> thrown = new AtomicReference<>();
      Thread t = new Thread(() -> {
        try {
          client.acquire("cancel", "c", Duration.ofSeconds(30), Duration.ofSeconds(10));
        } catch (RuntimeException e) {
          thrown.set(e);
        }
      });
      t.start();
      server.waitWaiters(1);
      t.interrupt();
      t.join(ServerProcess.PATIENCE.toMillis());
      assertInstanceOf(CancellationException.class, thrown.get());
      assertInstanceOf(LeaseholdException.class, thrown.get().getCause());
      // A failed call: ExecutionException with the leasehold error.
      ExecutionException ee = assertThrows(ExecutionException.class,
          () -> client.acquireAsync("cancel", "d", Duration.ZERO, Duration.ZERO).get());
      assertInstanceOf(InvalidArgumentException.class, ee.getCause());
    }
  }

  @Test
  void aCancelledWaitingAcquireGivesBackAGrantItWasGiven() throws Exception {
    int told = 0;
    int givenBack = 0;
    try (ServerProcess server = new ServerProcess(); Client a = Client.connect(server.target)) {
      for (int i = 0; i < 50; i++) {
        String job = "cancel-" + i;
        Acquired held = a.acquire(job, "a", Duration.ofSeconds(30));
        assertTrue(held.acquired());
        try (Client b = Client.connect(server.target)) {
          // The server's answers to GetLease: the test's own, and the read of
          // B's give-back.
          double looked = server.metric("leasehold_rpc_responses_total", "method=\"GetLease\"");
          int ownLooks = 0;
          CompletableFuture<Acquired> waiting = b.acquireAsync(job, "b", Duration.ofSeconds(30), Duration.ofSeconds(20));
          server.waitWaiters(1);
          long skew = (i * 137L % 1000) * 1000; // ns
          final int round = i;
          Thread canceller = new Thread(() -> {
            if (round % 2 == 0) {
              java.util.concurrent.locks.LockSupport.parkNanos(skew);
            }
            waiting.cancel(true);
          });
          canceller.start();
          if (i % 2 == 1) {
            java.util.concurrent.locks.LockSupport.parkNanos(skew);
          }
          a.release(job, "a", held.lease().token());
          canceller.join();
          Acquired r = null;
          try {
            r = waiting.get(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS);
          } catch (CancellationException | ExecutionException e) {
            // cancelled, or failed
          }
          if (r != null && r.acquired()) {
            told++;
            continue;
          }
          long end = System.nanoTime() + ServerProcess.PATIENCE.toNanos();
          while (true) {
            ownLooks++;
            Lease l = a.getLease(job);
            if (l.holder() == null || l.holder().isEmpty()) {
              if (l.token() > held.lease().token()) {
                givenBack++;
              }
              break;
            }
            assertTrue(System.nanoTime() < end, job + ": held by " + l.holder() + " after its Acquire was cancelled");
            Thread.sleep(20);
          }
          // B's clean-up, its give-back, reads the lease (100 ms after the
          // cancel) before its channel closes.
          server.waitMetricAbove("leasehold_rpc_responses_total", "method=\"GetLease\"", looked + ownLooks,
              job + ": B's give-back to read the lease");
        }
      }
    }
    System.out.println("50 rounds: " + told + " grants reached B before the cancel, " + givenBack + " given back");
  }
}
