package dev.leasehold.client;

import com.google.common.util.concurrent.Futures;
import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.MoreExecutors;
import dev.leasehold.v1.AcquireResponse;
import dev.leasehold.v1.RenewResponse;
import io.grpc.Status;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A job's lease held for the length of a try-with-resources block, from
 * {@link Client#lock(String, Duration)} or {@link Client#lockAsync}:
 *
 * <pre>{@code
 * try (Lock lock = client.lock("reports", Duration.ofSeconds(10))) {
 *   lock.onLost(() -> log.warn("lost the reports lock"));
 *   client.checkedWrite("reports", lock.token(), "cursor", "42");
 * } // close(): releases the lease
 * }</pre>
 *
 * <p>While it is held, the lock renews the lease every ttl/3 in the
 * background, retrying a failed renewal with backoff (never past half the
 * time left to its deadline). Its own deadline is the instant its last
 * successful grant or renewal was <em>sent</em>, plus the TTL: the server
 * counts from when it received that request, later, so the lock knows it
 * has lost no later than the server can give the lease away, even when
 * the server cannot be reached.
 *
 * <p><b>A loss does not interrupt the block</b> (no lock could stop your
 * code safely, and a paused process would not notice anyway). Instead
 * {@link #isHeld()} turns false, {@link #lost()} completes with the token,
 * the {@link #onLost} listeners run, {@link #awaitLost} returns true and
 * {@link #check()} throws {@link LeaseLostException}; and every write made
 * with {@link #token()} once another holder has the lease (or the lease
 * ended) is refused with {@link FencedException}. Carry the token into
 * every write, and check {@link #isHeld()} between steps of a long task.
 *
 * <p>{@link #close()} stops the renewals and releases the lease if it is
 * still held, bounded by its deadline (at least 200 ms); it is idempotent
 * and throws nothing. Each lock is its own holder, {@code name@uuid} with
 * a UUID made for it: two locks on one job exclude each other, in one
 * process or in two (a lock is not re-entrant).
 *
 * <p>A counted lock ({@link Client#lock(String, Duration, Duration, String, int)}:
 * up to N holders at once, as {@code consul lock -n N}) holds one slot of a
 * counted lease on {@link #job()}: the slot is a job of its own,
 * {@link #leaseJob()} ({@code "{job}#{slot}"}), with its own token, and the
 * lock renews and releases that job. Write with {@link #leaseJob()} and
 * {@link #token()}; a key that every holder writes under the same job is
 * ordered by token, not owned by one.
 *
 * <p>Renewals run on a thread shared by every lock, loss listeners on
 * another ({@code leasehold-lock-callbacks}): keep listeners short, or a
 * slow one delays other locks' loss reports.
 */
public final class Lock implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(Lock.class);

  /** The holder name of a lock given none (the holder is {@code name@uuid}). */
  public static final String DEFAULT_NAME = "lock";

  /** The longest one waiting Acquire asks the server to wait; a lock that waits longer asks again. */
  static final Duration MAX_WAIT = Duration.ofSeconds(30);

  /** Schedules every lock's renewals, deadlines and waits; nothing blocks on it. */
  private static final ScheduledExecutorService TIMER = Executors.newSingleThreadScheduledExecutor(r -> {
    Thread t = new Thread(r, "leasehold-locks");
    t.setDaemon(true);
    return t;
  });

  /**
   * Completes {@link #lost()} and so runs the loss listeners: a slow
   * listener delays other locks' loss reports, never a renewal.
   */
  private static final java.util.concurrent.ExecutorService CALLBACKS = Executors.newSingleThreadExecutor(r -> {
    Thread t = new Thread(r, "leasehold-lock-callbacks");
    t.setDaemon(true);
    return t;
  });

  private final Client client;
  private final String job;
  /** The job the lease is on: a counted lock's slot job, else {@link #job}. */
  private final String leaseJob;
  private final int slot;
  private final int slots;
  private final String holder;
  private final Duration ttl;
  private final long token;
  private final String proof;
  private final Retry.Backoff retry;

  private final Object mu = new Object();
  /** System.nanoTime() past which the lock is not held: the send time of its last successful grant or renewal, plus the TTL. */
  private long deadline;
  private boolean closed;
  private boolean lostFlag;
  private LeaseholdException lossCause;
  private ScheduledFuture<?> nextRenewal;
  private ScheduledFuture<?> deadlineWatch;
  private ListenableFuture<RenewResponse> renewing;
  private final CompletableFuture<Long> lost = new CompletableFuture<>();

  private Lock(Client client, String job, Lease grant, String holder, Duration ttl, long anchor) {
    this.client = client;
    this.job = job;
    this.leaseJob = grant.job();
    this.slot = grant.slot();
    this.slots = grant.slots();
    long token = grant.token();
    String proof = grant.proof();
    this.holder = holder;
    this.ttl = ttl;
    this.token = token;
    this.proof = proof == null || proof.isEmpty() ? null : proof;
    this.retry = Retry.Backoff.renew(ttl.toNanos());
    this.deadline = anchor + ttl.toNanos();
  }

  // Taking the lock.

  /** The waiting Acquires of {@link Client#lockAsync}, one after the other, until granted, refused, timed out or cancelled. */
  static CompletableFuture<Lock> acquire(Client client, String job, Duration ttl, Duration timeout, String name,
      int slots) {
    Objects.requireNonNull(job, "job");
    Objects.requireNonNull(ttl, "ttl");
    Objects.requireNonNull(name, "name");
    if (job.isEmpty()) {
      throw new IllegalArgumentException("job must not be empty");
    }
    if (name.isEmpty()) {
      throw new IllegalArgumentException("name must not be empty");
    }
    if (ttl.isNegative() || ttl.isZero()) {
      throw new IllegalArgumentException("ttl must be positive");
    }
    if (timeout != null && timeout.isNegative()) {
      throw new IllegalArgumentException("timeout must not be negative");
    }
    Taking t = new Taking(client, job, ttl, timeout, Elector.electorHolder(name), slots);
    t.attempt();
    return t.out;
  }

  /** One lock being taken. */
  private static final class Taking {
    final Client client;
    final String job;
    final Duration ttl;
    final Duration timeout;
    final String holder;
    final int slots;
    final long end; // System.nanoTime() of the timeout; unused without one
    final Retry.Backoff backoff;
    final CompletableFuture<Lock> out = new CompletableFuture<>();
    final AtomicReference<java.util.concurrent.Future<?>> current = new AtomicReference<>();

    Taking(Client client, String job, Duration ttl, Duration timeout, String holder, int slots) {
      this.client = client;
      this.job = job;
      this.ttl = ttl;
      this.timeout = timeout;
      this.holder = holder;
      this.slots = slots;
      this.end = System.nanoTime() + (timeout == null ? 0 : timeout.toNanos());
      this.backoff = Retry.Backoff.campaign(ttl.toNanos());
      if (timeout != null && !timeout.isZero()) { // zero: one try, ended by its answer
        ScheduledFuture<?> timer = TIMER.schedule(this::timedOut, timeout.toNanos(), TimeUnit.NANOSECONDS);
        out.whenComplete((l, e) -> timer.cancel(false));
      }
      // Cancelled, timed out or failed: the Acquire on its way is cancelled,
      // which gives back a grant it may have been given meanwhile.
      out.whenComplete((l, e) -> {
        if (e != null) {
          java.util.concurrent.Future<?> f = current.get();
          if (f != null) {
            f.cancel(true);
          }
        }
      });
    }

    void timedOut() {
      out.completeExceptionally(new LockTimeoutException(
          job + ": the lock was not granted within " + timeout + " (" + holder + "); nothing is held"));
    }

    /** The next waiting Acquire: up to {@link #MAX_WAIT}, or the time left to the timeout. */
    void attempt() {
      if (out.isDone()) {
        return;
      }
      long now = System.nanoTime();
      long wait = timeout == null ? MAX_WAIT.toNanos() : Math.max(0, Math.min(MAX_WAIT.toNanos(), end - now));
      Duration w = Duration.ofNanos(wait);
      ListenableFuture<AcquireResponse> f;
      try {
        f = client.acquireCall(job, holder, ttl, w, false, false, null, slots, w.plus(client.timeout()));
      } catch (RuntimeException e) {
        out.completeExceptionally(Errors.from(e));
        return;
      }
      current.set(f);
      if (out.isDone()) {
        f.cancel(true); // completed as the call started: it gives back what it gets
        return;
      }
      f.addListener(() -> answered(f, now, wait == 0), MoreExecutors.directExecutor());
    }

    void answered(ListenableFuture<AcquireResponse> f, long sent, boolean once) {
      if (f.isCancelled() || out.isDone()) {
        return; // the cancel gives back a grant, if one came
      }
      AcquireResponse r;
      try {
        r = Futures.getDone(f);
      } catch (ExecutionException e) {
        LeaseholdException le = Errors.from(e.getCause());
        if (Elector.refused(le)) {
          out.completeExceptionally(le);
          return;
        }
        client.reconnectNow();
        LOG.debug("{}: lock: acquire failed, retrying: {}", job, le.toString());
        TIMER.schedule(this::attempt, backoff.next(), TimeUnit.NANOSECONDS);
        return;
      } catch (CancellationException e) {
        return;
      }
      backoff.reset();
      if (!r.getAcquired()) {
        if (timeout != null && (once || System.nanoTime() - end >= 0)) {
          timedOut();
        } else {
          attempt();
        }
        return;
      }
      Lease grant = Lease.fromProto(r.getLease()); // a counted lock's is on its slot's job
      long granted = grant.token();
      if (System.nanoTime() - (sent + ttl.toNanos() / 10) < 0) {
        granted(grant, sent);
        return;
      }
      // Granted long after it was sent: counting the TTL from the send would
      // put the deadline in the past. A renewal sent now confirms the lease
      // and gives a fresh anchor.
      long at = System.nanoTime();
      ListenableFuture<RenewResponse> confirm = client.renewCall(grant.job(), holder, granted, ttl, null, ttl.dividedBy(2));
      current.set(confirm);
      confirm.addListener(() -> {
        try {
          Futures.getDone(confirm);
          granted(grant, at);
        } catch (ExecutionException | CancellationException e) {
          LOG.warn("{}: lock granted token {}, but the confirming renew failed: {}", grant.job(), granted, e.toString());
          if (out.isDone()) {
            return;
          }
          TIMER.schedule(this::attempt, backoff.next(), TimeUnit.NANOSECONDS);
        }
      }, MoreExecutors.directExecutor());
    }

    void granted(Lease grant, long anchor) {
      Lock lock = new Lock(client, job, grant, holder, ttl, anchor);
      lock.start();
      if (!out.complete(lock)) {
        // Cancelled or timed out as the grant came: its caller never sees it.
        CompletableFuture.runAsync(lock::close); // a release: not on the timer's thread
      }
    }
  }

  // Keeping it.

  private void start() {
    synchronized (mu) {
      long now = System.nanoTime();
      nextRenewal = TIMER.schedule(this::renewNow, Math.max(0, deadline - ttl.toNanos() + ttl.toNanos() / 3 - now),
          TimeUnit.NANOSECONDS);
      deadlineWatch = TIMER.schedule(this::watchDeadline, Math.max(0, deadline - now), TimeUnit.NANOSECONDS);
    }
  }

  /** At the deadline: lost, unless a renewal moved it meanwhile (then watch the new one). */
  private void watchDeadline() {
    synchronized (mu) {
      if (closed || lostFlag) {
        return;
      }
      long left = deadline - System.nanoTime();
      if (left > 0) {
        deadlineWatch = TIMER.schedule(this::watchDeadline, left, TimeUnit.NANOSECONDS);
        return;
      }
    }
    lose(null, "no renewal succeeded by its deadline");
  }

  private void renewNow() {
    long now = System.nanoTime();
    long until;
    synchronized (mu) {
      if (closed || lostFlag) {
        return;
      }
      until = deadline;
    }
    if (now - until >= 0) {
      lose(null, "no renewal succeeded by its deadline");
      return;
    }
    ListenableFuture<RenewResponse> f;
    try {
      f = client.renewCall(leaseJob, holder, token, ttl, null, Duration.ofNanos(until - now));
    } catch (RuntimeException e) {
      retryRenewal(Errors.from(e), until);
      return;
    }
    synchronized (mu) {
      renewing = f;
      if (closed) {
        f.cancel(true);
        return;
      }
    }
    f.addListener(() -> renewed(f, now, until), TIMER);
  }

  private void renewed(ListenableFuture<RenewResponse> f, long sent, long until) {
    try {
      Futures.getDone(f);
    } catch (CancellationException e) {
      return; // closed
    } catch (ExecutionException e) {
      LeaseholdException le = Errors.from(e.getCause());
      if (le instanceof LeaseLostException || Elector.refused(le)) {
        lose(le, "renewal refused: " + le.getMessage());
      } else {
        retryRenewal(le, until);
      }
      return;
    }
    synchronized (mu) {
      if (closed || lostFlag) {
        return;
      }
      deadline = sent + ttl.toNanos();
      retry.reset();
      nextRenewal = TIMER.schedule(this::renewNow, Math.max(0, sent + ttl.toNanos() / 3 - System.nanoTime()),
          TimeUnit.NANOSECONDS);
    }
  }

  private void retryRenewal(LeaseholdException le, long until) {
    client.reconnectNow();
    long now = System.nanoTime();
    if (now - until >= 0) {
      lose(le, "no renewal succeeded by its deadline: " + le.getMessage());
      return;
    }
    LOG.debug("{}: lock: renew of token {} failed, retrying: {}", leaseJob, token, le.toString());
    synchronized (mu) {
      if (closed || lostFlag) {
        return;
      }
      nextRenewal = TIMER.schedule(this::renewNow, retry.nextBefore(until, now), TimeUnit.NANOSECONDS);
    }
  }

  /** Marks the lock lost (once; not after close) and tells the listeners. */
  private void lose(LeaseholdException cause, String why) {
    synchronized (mu) {
      if (closed || lostFlag) {
        return;
      }
      lostFlag = true;
      lossCause = cause;
      cancelTimersLocked();
    }
    LOG.warn("{}: lock lost (token {}): {}", leaseJob, token, why);
    CALLBACKS.execute(() -> lost.complete(token));
  }

  private void cancelTimersLocked() {
    if (nextRenewal != null) {
      nextRenewal.cancel(false);
    }
    if (deadlineWatch != null) {
      deadlineWatch.cancel(false);
    }
    if (renewing != null) {
      renewing.cancel(true);
    }
  }

  // What the caller sees.

  /** The job the lock was asked for. */
  public String job() {
    return job;
  }

  /**
   * The job the lock's lease is on, which writes fenced by {@link #token()}
   * name: for a counted lock its slot's job, {@code "{job}#{slot}"}; else
   * {@link #job()}.
   */
  public String leaseJob() {
    return leaseJob;
  }

  /** The slot a counted lock holds (0 to {@code slots - 1}); empty for an ordinary lock. */
  public java.util.OptionalInt slot() {
    return slots > 0 ? java.util.OptionalInt.of(slot) : java.util.OptionalInt.empty();
  }

  /** The lock's holder identity, {@code name@uuid}. */
  public String holder() {
    return holder;
  }

  /** The TTL of the lease. */
  public Duration ttl() {
    return ttl;
  }

  /** The token of the grant (unsigned), kept after a loss and after close: carry it into every write. */
  public long token() {
    return token;
  }

  /** The grant's proof ({@link Lease#proof()}), or null when the server signs nothing. */
  public String proof() {
    return proof;
  }

  /** Whether the lease is ours now: not closed, not lost, and before the lock's own deadline (checked here, on time). */
  public boolean isHeld() {
    synchronized (mu) {
      return !closed && !lostFlag && System.nanoTime() - deadline < 0;
    }
  }

  /**
   * Completes with the token when the lock is lost while held (a renewal
   * refused, or its deadline passed without a renewal); cancelled when it
   * is closed without a loss.
   */
  public CompletableFuture<Long> lost() {
    return lost;
  }

  /**
   * Runs {@code listener} when the lock is lost (at once if it already
   * was); never after a close without a loss. An exception it throws is
   * logged. Returns this lock.
   */
  public Lock onLost(Runnable listener) {
    Objects.requireNonNull(listener, "listener");
    lost.thenRun(() -> {
      try {
        listener.run();
      } catch (RuntimeException e) {
        LOG.warn("{}: lock loss listener failed", leaseJob, e);
      }
    });
    return this;
  }

  /** Waits up to {@code timeout} for a loss; true once the lock was lost. */
  public boolean awaitLost(Duration timeout) throws InterruptedException {
    try {
      lost.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
      return true;
    } catch (TimeoutException | CancellationException e) {
      return false;
    } catch (ExecutionException e) {
      return false;
    }
  }

  /**
   * Throws {@link LeaseLostException} once the lock is lost, or past its
   * deadline; call it between the steps of a long task.
   *
   * @throws IllegalStateException after {@link #close()}
   */
  public void check() {
    boolean gone;
    LeaseholdException cause;
    synchronized (mu) {
      if (closed) {
        throw new IllegalStateException(leaseJob + ": the lock is closed");
      }
      gone = lostFlag || System.nanoTime() - deadline >= 0;
      cause = lossCause;
    }
    if (gone) {
      throw new LeaseLostException(leaseJob + ": the lock with token " + Long.toUnsignedString(token) + " was lost",
          Status.Code.FAILED_PRECONDITION, "LEASE_LOST", Map.of(), cause);
    }
  }

  /**
   * Stops renewing and releases the lease if it is still held, bounded by
   * its deadline (at least 200 ms): past it the lease runs out on its own.
   * Idempotent; throws nothing (a failed release is logged).
   */
  @Override
  public void close() {
    boolean held;
    boolean wasLost;
    long bound;
    synchronized (mu) {
      if (closed) {
        return;
      }
      wasLost = lostFlag;
      held = !lostFlag && System.nanoTime() - deadline < 0;
      closed = true;
      cancelTimersLocked();
      bound = Math.max(deadline - System.nanoTime(), TimeUnit.MILLISECONDS.toNanos(200));
    }
    if (!wasLost) {
      lost.cancel(false); // a loss reported meanwhile completes it instead
    }
    if (held) {
      try {
        client.release(leaseJob, holder, token, Duration.ofNanos(bound));
      } catch (LeaseholdException | CancellationException e) {
        LOG.warn("{}: lock: release of token {} failed: {}", leaseJob, token, e.toString());
      }
    }
  }

  @Override
  public String toString() {
    return "Lock(job=" + leaseJob + " holder=" + holder + " token=" + Long.toUnsignedString(token) + ")";
  }
}
