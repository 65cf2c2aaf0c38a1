package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.leasehold.v1.LeasesGrpc;
import dev.leasehold.v1.ReleaseRequest;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Giving back a grant whose caller may never have learned of it (a cancelled
 * waiting Acquire), and the rule that makes it safe: <b>a give-back never
 * ends a lease its holder was told it holds</b>. A repeated Acquire or a
 * Renew may have told the holder that it leads; after one, only its own
 * release or the TTL ends the lease, or another holder could take over
 * before the TTL it was promised. Against the real server.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class GiveBackTest {
  private static final Duration TTL = Duration.ofSeconds(30);
  private static final int ROUNDS = 10;

  /** A give-back through the generated stub: whether it released. */
  private static boolean giveBack(LeasesGrpc.LeasesBlockingStub raw, String job, String holder, long token) {
    return raw.release(ReleaseRequest.newBuilder()
        .setJob(job).setHolder(holder).setToken(token).setGiveBack(true).build()).getReleased();
  }

  /**
   * {@code ReleaseRequest.give_back} releases a grant nobody asked for
   * again, and keeps one that was: asked again by a repeated Acquire, or by
   * a Renew.
   */
  @Test
  void aGiveBackEndsOnlyAGrantNeverAskedForAgain() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client c = Client.connect(server.target)) {
      ManagedChannel channel = ManagedChannelBuilder.forTarget(server.target).usePlaintext().build();
      try {
        LeasesGrpc.LeasesBlockingStub raw = LeasesGrpc.newBlockingStub(channel);

        // Granted, never asked again: given back, and the job is free.
        Acquired a = c.acquire("j", "a", TTL);
        assertTrue(a.acquired());
        assertTrue(giveBack(raw, "j", "a", a.lease().token()));
        assertNull(c.getLease("j").holder());

        // Asked again with a repeated Acquire: kept.
        a = c.acquire("j", "a", TTL);
        Acquired again = c.acquire("j", "a", TTL);
        assertEquals(a.lease().token(), again.lease().token(), "a re-grant");
        assertFalse(giveBack(raw, "j", "a", a.lease().token()));
        Lease l = c.getLease("j");
        assertEquals("a", l.holder());
        assertEquals(a.lease().token(), l.token());

        // Asked again with a Renew: kept.
        c.release("j", "a", a.lease().token());
        a = c.acquire("j", "a", TTL);
        c.renew("j", "a", a.lease().token(), TTL);
        assertFalse(giveBack(raw, "j", "a", a.lease().token()));
        assertEquals("a", c.getLease("j").holder());

        // Another holder's, or another token's: nothing changes, no error.
        assertFalse(giveBack(raw, "j", "b", a.lease().token()));
        assertFalse(giveBack(raw, "j", "a", a.lease().token() + 1));
        assertFalse(giveBack(raw, "never-granted", "a", 1));
        assertEquals("a", c.getLease("j").holder());

        // A plain release says whether it ended the holding.
        ReleaseRequest plain = ReleaseRequest.newBuilder().setJob("j").setHolder("a").setToken(a.lease().token()).build();
        assertTrue(raw.release(plain).getReleased());
        assertFalse(raw.release(plain).getReleased(), "a repeated release changes nothing");
      } finally {
        channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      }
    }
  }

  /** The round's skew between B's release and the cancel of A's waiting Acquire: 0 to 1 ms. */
  private static long skewNanos(int round) {
    return (round * 137L % 1000) * 1000;
  }

  /** The server's answers to GetLease so far. */
  private static double looks(ServerProcess server) throws Exception {
    return server.metric("leasehold_rpc_responses_total", "method=\"GetLease\"");
  }

  /**
   * A's lease after its retry was granted with {@code told}: still A's, same
   * token, once the give-back of the cancelled call, if it was cancelled,
   * has looked at the lease (the server has answered a GetLease since
   * {@code looked}; the give-back looks 100 ms after the cancel, and
   * releases, if it does, as soon as it has the answer); then A releases it.
   */
  private static void keptWhatItWasTold(ServerProcess server, Client a, String job, Acquired told, int round,
      boolean cancelled, double looked) throws Exception {
    assertTrue(told.acquired(), "round " + round + ": B released; A's retry is granted");
    if (cancelled) {
      server.waitMetricAbove("leasehold_rpc_responses_total", "method=\"GetLease\"", looked,
          "round " + round + ": the give-back to read the lease");
    }
    Lease l = a.getLease(job);
    assertEquals("a", l.holder(),
        "round " + round + ": A was told it holds token " + told.lease().token() + ", and its lease ended early");
    assertEquals(told.lease().token(), l.token(),
        "round " + round + ": A was told it holds token " + told.lease().token() + ", and its lease ended early");
    a.release(job, "a", told.lease().token());
  }

  /**
   * Per round: B holds the job and A waits for it (a blocking call); B
   * releases as A's thread is interrupted, and A asks again at once on the
   * same client (a retry, as an elector does). When the retry is granted, A
   * was told that it leads: its lease must still be A's, same token, after
   * any give-back of the cancelled call has run.
   */
  @Test
  void aRetryAfterAnInterruptedAcquireKeepsItsGrant() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client a = Client.connect(server.target);
        Client b = Client.connect(server.target)) {
      int cancelled = 0;
      for (int i = 0; i < ROUNDS; i++) {
        String job = "r" + i;
        Acquired held = b.acquire(job, "b", TTL);
        assertTrue(held.acquired());
        AtomicBoolean answered = new AtomicBoolean();
        Thread waiting = new Thread(() -> {
          try {
            a.acquire(job, "a", TTL, Duration.ofSeconds(20));
            answered.set(true);
          } catch (CancellationException | LeaseholdException e) {
            // cancelled: the retry asks again
          }
        });
        waiting.start();
        server.waitWaiters(1); // A is in line
        double looked = looks(server);
        long skew = skewNanos(i);
        Thread canceller = new Thread(() -> {
          LockSupport.parkNanos(skew);
          waiting.interrupt();
        });
        canceller.start();
        b.release(job, "b", held.lease().token());
        canceller.join();
        waiting.join(ServerProcess.PATIENCE.toMillis());
        assertFalse(waiting.isAlive(), "round " + i + ": the interrupted Acquire ended");
        cancelled += answered.get() ? 0 : 1;
        Acquired retry = a.acquire(job, "a", TTL, ServerProcess.PATIENCE);
        keptWhatItWasTold(server, a, job, retry, i, !answered.get(), looked);
      }
      System.out.println(ROUNDS + " rounds: " + cancelled + " waiting Acquires interrupted before their answer");
      assertEquals(0, a.pairsKept(), "nothing on its way, nothing told: the client keeps nothing");
    }
  }

  /**
   * {@link #aRetryAfterAnInterruptedAcquireKeepsItsGrant} with futures: A's
   * waiting {@code acquireAsync} is cancelled ({@code cancel(true)}), and the
   * retry is an {@code acquireAsync} too.
   */
  @Test
  void aRetryAfterACancelledAsyncAcquireKeepsItsGrant() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client a = Client.connect(server.target);
        Client b = Client.connect(server.target)) {
      int cancelled = 0;
      for (int i = 0; i < ROUNDS; i++) {
        String job = "r" + i;
        Acquired held = b.acquire(job, "b", TTL);
        assertTrue(held.acquired());
        CompletableFuture<Acquired> waiting = a.acquireAsync(job, "a", TTL, Duration.ofSeconds(20));
        server.waitWaiters(1); // A is in line
        double looked = looks(server);
        long skew = skewNanos(i);
        Thread canceller = new Thread(() -> {
          LockSupport.parkNanos(skew);
          waiting.cancel(true);
        });
        canceller.start();
        b.release(job, "b", held.lease().token());
        canceller.join();
        boolean wasCancelled = false;
        try {
          waiting.get(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS);
        } catch (CancellationException | ExecutionException e) {
          cancelled++; // the retry asks again
          wasCancelled = true;
        }
        Acquired retry = a.acquireAsync(job, "a", TTL, ServerProcess.PATIENCE)
            .get(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS);
        keptWhatItWasTold(server, a, job, retry, i, wasCancelled, looked);
      }
      System.out.println(ROUNDS + " rounds: " + cancelled + " waiting acquireAsync futures cancelled before their answer");
      assertEquals(0, a.pairsKept(), "nothing on its way, nothing told: the client keeps nothing");
    }
  }

  /**
   * The registry's rule on its own (no server): a give-back may release a
   * token only if no call for the pair started since the cancelled one,
   * none is on its way, and no caller was told that token or a higher one;
   * a pair is forgotten once it has neither a call nor a token told.
   */
  @Test
  void theGiveBackRuleKeepsWhatACallerMayHaveBeenTold() {
    Calls calls = new Calls();
    Calls.Asking first = calls.start("j", "a");
    first.end();
    assertEquals(0, calls.size(), "ended, nothing told: forgotten");
    assertTrue(calls.mayGiveBack("j", "a", first.n, 5), "nothing known: nothing was told");

    Calls.Asking told = calls.start("j", "a");
    told.told(5);
    told.end();
    told.end(); // a second end changes nothing
    assertEquals(1, calls.size(), "token 5 was told");

    Calls.Asking cancelled = calls.start("j", "a");
    Calls.Asking retry = calls.start("j", "a");
    cancelled.end();
    assertFalse(calls.mayGiveBack("j", "a", cancelled.n, 6), "a retry on its way");
    retry.end();
    assertFalse(calls.mayGiveBack("j", "a", cancelled.n, 6), "a retry started since");

    Calls.Asking last = calls.start("j", "a");
    assertFalse(calls.mayGiveBack("j", "a", last.n, 6), "the call itself not ended");
    last.end();
    assertFalse(calls.mayGiveBack("j", "a", last.n, 5), "token 5 was told");
    assertTrue(calls.mayGiveBack("j", "a", last.n, 6), "token 6 was never told");
    assertTrue(calls.mayGiveBack("j", "b", last.n, 5), "another holder's pair knows nothing");

    // Tokens are unsigned: one above 2^63 is above 5.
    Calls.Asking high = calls.start("j", "a");
    high.told(-2L);
    high.end();
    assertFalse(calls.mayGiveBack("j", "a", high.n, 6), "a token told above 2^63");
    assertTrue(calls.mayGiveBack("j", "a", high.n, -1L));

    calls.released("j", "a");
    assertEquals(0, calls.size(), "a release forgets what was told");
  }
}
