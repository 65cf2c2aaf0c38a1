package dev.leasehold.client;

import com.google.common.util.concurrent.ListenableFuture;
import dev.leasehold.v1.AcquireResponse;
import dev.leasehold.v1.KeepAliveRenewal;
import dev.leasehold.v1.KeepAliveResult;
import dev.leasehold.v1.LeasesGrpc;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One process campaigning for many jobs, renewing every lease it holds
 * together over one {@code KeepAlive} stream: a worker leading a hundred
 * jobs sends one message every ttl/3 instead of a hundred calls.
 *
 * <pre>{@code
 * try (ElectorSet set = ElectorSet.builder(client, "sync-worker")
 *     .ttl(Duration.ofSeconds(10))
 *     .listener(new ElectorSet.Listener() {
 *       public void onElected(String job, long token) { startSync(job, token); }
 *       public void onLost(String job, long token) { stopSync(job); }
 *     })
 *     .start()) {
 *   set.campaign("sync_eu");
 *   set.campaign("sync_us");
 *   ...
 * } // close(): releases every lease held
 * }</pre>
 *
 * <p>The set is one holder, {@code name@uuid} with a UUID made for it: two
 * sets (or a set and an {@link Elector}) in one process are different
 * holders. Each job has its own campaign, exactly like an
 * {@link Elector}'s: a waiting Acquire (so a release hands over at once),
 * retried with the same backoff, a grant that came long after its Acquire
 * was sent confirmed by a Renew. Once held, a lease joins the set's one
 * renewer, which every ttl/3 sends one {@code KeepAliveRequest} carrying a
 * renewal for every held lease (split into messages of at most 1000) and
 * reads one result per renewal, in order.
 *
 * <p>Each job steps down no later than its own deadline: the instant its
 * last successful grant or renewal was <em>sent</em>, plus the TTL, even
 * when the stream is stuck or the server frozen. A {@code LEASE_LOST} or
 * {@code UNKNOWN_TOKEN} result steps that job alone down, and its campaign
 * starts again. A broken stream is opened again with the renewal backoff
 * (never past half the time left to the earliest deadline) while the
 * deadlines keep running. A job whose campaign the server refuses with an
 * error retrying cannot fix ({@link InvalidArgumentException},
 * {@link UnauthenticatedException}, {@link PermissionDeniedException})
 * stops; {@link #error(String)} has it. A failure a campaign does not
 * foresee (any {@link RuntimeException} it throws) is logged, steps that
 * job down, and its campaign starts again after a backoff.
 *
 * <p>The {@link Listener} hears {@code onElected(job, token)} and
 * {@code onLost(job, token)} in order, on one callback thread, so a slow
 * listener delays no renewal. {@link #close()} stops every campaign and
 * the renewer, releases every lease held (each bounded by its deadline, at
 * least 200 ms) and reports those as lost. Threads: one per job campaigned
 * for, one renewer, one for the callbacks.
 */
public final class ElectorSet implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(ElectorSet.class);

  /** Hears each job's elections and losses. */
  public interface Listener {
    /** We lead {@code job} with {@code token} (unsigned). */
    default void onElected(String job, long token) {}

    /** We no longer lead {@code job} with {@code token}: stop its work. */
    default void onLost(String job, long token) {}
  }

  private final Client client;
  private final LeasesGrpc.LeasesStub stub;
  private final String holder;
  private final Duration ttl;
  private final boolean bindToStream;
  private final Listener listener;

  private final ReentrantLock mu = new ReentrantLock();
  private final Condition changed = mu.newCondition();
  private boolean stopped;
  private boolean closed;
  private final Map<String, Held> held = new HashMap<>();
  private final Map<String, Thread> campaigns = new LinkedHashMap<>();
  private final Map<String, LeaseholdException> errors = new HashMap<>();
  private KeepAliveStream stream;
  private final Thread renewer;
  private final ExecutorService callbacks;
  private final Retry.Warnings warnings = new Retry.Warnings();

  /**
   * How a campaign confirms a fresh grant: {@code anchor} itself. For
   * tests only: one may wrap it to inject a failure into a campaign.
   */
  volatile Anchor anchorHook = this::anchor;

  /** The shape of {@code anchor}, for {@code anchorHook}. */
  interface Anchor {
    Long at(String job, long token, long sent);
  }

  /** A lease we hold. */
  private static final class Held {
    final long token;
    /** System.nanoTime(): the send time of the last successful grant or renewal, plus the TTL. */
    long deadline;

    Held(long token, long deadline) {
      this.token = token;
      this.deadline = deadline;
    }
  }

  private ElectorSet(Builder b) {
    this.client = b.client;
    this.stub = LeasesGrpc.newStub(b.client.channel());
    this.holder = Elector.electorHolder(b.name);
    this.ttl = b.ttl;
    this.bindToStream = b.bindToStream;
    this.listener = b.listener;
    this.callbacks = Executors.newSingleThreadExecutor(r -> {
      Thread t = new Thread(r, "leasehold-set-callbacks");
      t.setDaemon(true);
      return t;
    });
    this.renewer = new Thread(this::renewLoop, "leasehold-set-renewer");
    this.renewer.setDaemon(true);
  }

  /**
   * A builder for a set campaigning as {@code name@<uuid>}.
   *
   * @throws IllegalArgumentException if {@code name} is empty
   */
  public static Builder builder(Client client, String name) {
    return new Builder(client, name);
  }

  /** Configures an {@link ElectorSet}. */
  public static final class Builder {
    private final Client client;
    private final String name;
    private Duration ttl = Duration.ofSeconds(10);
    private boolean bindToStream;
    private Listener listener = new Listener() {};
    private final List<String> jobs = new ArrayList<>();

    private Builder(Client client, String name) {
      this.client = Objects.requireNonNull(client, "client");
      this.name = Objects.requireNonNull(name, "name");
      if (name.isEmpty()) {
        throw new IllegalArgumentException("name must not be empty");
      }
    }

    /** The TTL of every lease (default 10 s); renewals go out every ttl/3. */
    public Builder ttl(Duration ttl) {
      if (ttl.isNegative() || ttl.isZero()) {
        throw new IllegalArgumentException("ttl must be positive");
      }
      this.ttl = ttl;
      return this;
    }

    /**
     * Binds every lease to the client's connection: the campaigns'
     * Acquires and the KeepAlive stream ask for it (see
     * {@link Elector.Builder#bindToStream(boolean)} for what it trades).
     */
    public Builder bindToStream(boolean bind) {
      this.bindToStream = bind;
      return this;
    }

    /** Hears every job's elections and losses. */
    public Builder listener(Listener listener) {
      this.listener = Objects.requireNonNull(listener, "listener");
      return this;
    }

    /** Jobs to campaign for from the start (more later with {@link ElectorSet#campaign}). */
    public Builder jobs(String... jobs) {
      for (String j : jobs) {
        checkJob(j);
        this.jobs.add(j);
      }
      return this;
    }

    /** The set, campaigning for the jobs given. */
    public ElectorSet start() {
      ElectorSet set = new ElectorSet(this);
      set.renewer.start();
      for (String j : jobs) {
        set.campaign(j);
      }
      return set;
    }
  }

  private static void checkJob(String job) {
    Objects.requireNonNull(job, "job");
    if (job.isEmpty()) {
      throw new IllegalArgumentException("job must not be empty");
    }
  }

  /** Our holder identity, {@code name@uuid}. */
  public String holder() {
    return holder;
  }

  /** The TTL of every lease. */
  public Duration ttl() {
    return ttl;
  }

  /**
   * Starts campaigning for {@code job} (once: asking again does nothing).
   *
   * @throws IllegalArgumentException if {@code job} is empty
   * @throws IllegalStateException once closed
   */
  public void campaign(String job) {
    checkJob(job);
    mu.lock();
    try {
      if (stopped) {
        throw new IllegalStateException("elector set closed");
      }
      if (campaigns.containsKey(job)) {
        return;
      }
      Thread t = new Thread(() -> campaignLoop(job), "leasehold-set-" + job);
      t.setDaemon(true);
      campaigns.put(job, t);
      t.start();
    } finally {
      mu.unlock();
    }
  }

  /** The token we lead {@code job} with; empty when not leading it, or past its deadline (checked here). */
  public OptionalLong token(String job) {
    mu.lock();
    try {
      Held h = held.get(job);
      return h != null && System.nanoTime() - h.deadline < 0 ? OptionalLong.of(h.token) : OptionalLong.empty();
    } finally {
      mu.unlock();
    }
  }

  /** Whether we lead {@code job} now. */
  public boolean isLeader(String job) {
    return token(job).isPresent();
  }

  /** Every job we lead now, with its token, ordered by job. */
  public Map<String, Long> leading() {
    mu.lock();
    try {
      Map<String, Long> out = new TreeMap<>();
      long now = System.nanoTime();
      held.forEach((j, h) -> {
        if (now - h.deadline < 0) {
          out.put(j, h.token);
        }
      });
      return out;
    } finally {
      mu.unlock();
    }
  }

  /** The exception that stopped {@code job}'s campaign (an error retrying cannot fix), or empty. */
  public Optional<LeaseholdException> error(String job) {
    mu.lock();
    try {
      return Optional.ofNullable(errors.get(job));
    } finally {
      mu.unlock();
    }
  }

  /** The deadline (System.nanoTime()) of our lease on {@code job}, or empty when not held (for tests). */
  OptionalLong deadlineNanos(String job) {
    mu.lock();
    try {
      Held h = held.get(job);
      return h == null ? OptionalLong.empty() : OptionalLong.of(h.deadline);
    } finally {
      mu.unlock();
    }
  }

  /**
   * Resigns: stops every campaign and the renewer, releases every lease
   * held, each bounded by its deadline (at least 200 ms; past it the lease
   * runs out on its own), reports each as lost, and waits for that and
   * the callbacks. Idempotent.
   */
  @Override
  public void close() {
    List<Thread> threads;
    KeepAliveStream s;
    mu.lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
      stopped = true;
      changed.signalAll();
      threads = new ArrayList<>(campaigns.values());
      threads.add(renewer);
      s = stream;
    } finally {
      mu.unlock();
    }
    if (s != null) {
      s.cancel(); // wakes the renewer if it waits for answers
    }
    boolean interrupted = false;
    for (Thread t : threads) {
      while (true) {
        try {
          t.join();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
    }
    Map<String, Held> toRelease;
    mu.lock();
    try {
      toRelease = new HashMap<>(held);
      held.clear();
    } finally {
      mu.unlock();
    }
    List<CompletableFuture<Void>> releases = new ArrayList<>();
    for (Map.Entry<String, Held> e : toRelease.entrySet()) {
      String job = e.getKey();
      Held h = e.getValue();
      long now = System.nanoTime();
      dispatchLost(job, h.token);
      if (now - h.deadline >= 0) {
        continue; // ran out already
      }
      long bound = Math.max(h.deadline - now, TimeUnit.MILLISECONDS.toNanos(200));
      releases.add(client.releaseAsync(job, holder, h.token).orTimeout(bound, TimeUnit.NANOSECONDS)
          .exceptionally(err -> {
            LOG.warn("{}: release of token {} on close failed: {}", job, h.token, err.toString());
            return null;
          }));
    }
    for (CompletableFuture<Void> r : releases) {
      try {
        r.get();
      } catch (InterruptedException e) {
        interrupted = true;
      } catch (ExecutionException e) {
        // logged
      }
    }
    callbacks.shutdown();
    if (!Thread.currentThread().getName().equals("leasehold-set-callbacks")) {
      try {
        callbacks.awaitTermination(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  // The campaigns, one thread per job.

  /**
   * Campaigns for {@code job} until the set stops or a refusal. A failure
   * no one foresaw is logged, steps the job down if it was held, and the
   * campaign starts again after a backoff: never a job the set silently
   * stops campaigning for.
   */
  private void campaignLoop(String job) {
    Retry.Backoff backoff = Retry.Backoff.campaign(ttl.toNanos());
    try {
      while (!isStopped()) {
        try {
          campaignRounds(job);
          return;
        } catch (RuntimeException e) {
          LOG.error("{}: campaign failed, campaigning again", job, e);
          Long token;
          mu.lock();
          try {
            Held h = held.get(job);
            token = h == null ? null : h.token;
          } finally {
            mu.unlock();
          }
          if (token != null) {
            stepDown(job, token);
          }
          if (sleepUntil(System.nanoTime() + backoff.next())) {
            return;
          }
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** Acquire (waiting), lead until stepped down, again, until the set stops or a refusal. */
  private void campaignRounds(String job) throws InterruptedException {
    long ms = TimeUnit.MILLISECONDS.toNanos(1);
    long ttlN = ttl.toNanos();
    Retry.Backoff backoff = Retry.Backoff.campaign(ttlN);
    long campaignWait = Math.min(Math.max(ttlN * 3, 1000 * ms), 30_000 * ms);
    while (!isStopped()) {
      long sent = System.nanoTime();
      long limit = campaignWait + ttlN;
      ListenableFuture<AcquireResponse> f = client.acquireCall(job, holder, ttl, Duration.ofNanos(campaignWait),
          bindToStream, false, null, 0, Duration.ofNanos(limit));
      f.addListener(this::signal, Runnable::run);
      if (!awaitDone(f, sent + limit)) {
        f.cancel(true); // gives back a grant it may have been given meanwhile
        if (isStopped()) {
          return;
        }
        retryWarning(job + ": campaign: acquire timed out");
        continue;
      }
      AcquireResponse r;
      try {
        r = f.get();
      } catch (ExecutionException e) {
        LeaseholdException le = Errors.from(e.getCause());
        if (Elector.refused(le)) {
          LOG.error("{}: campaign refused, not campaigning again: {}", job, le.toString());
          mu.lock();
          try {
            errors.put(job, le);
          } finally {
            mu.unlock();
          }
          return;
        }
        retryWarning(job + ": campaign: acquire failed, retrying: " + le);
        client.reconnectNow();
        if (sleepUntil(System.nanoTime() + backoff.next())) {
          return;
        }
        continue;
      }
      backoff.reset();
      if (!r.getAcquired()) {
        continue;
      }
      long token = r.getLease().getToken();
      Long anchor = anchorHook.at(job, token, sent);
      if (anchor == null || anchor + ttlN - System.nanoTime() <= 0) {
        continue;
      }
      mu.lock();
      try {
        if (stopped) {
          // Granted as we stop, never reported: give it back (best effort).
          try {
            client.release(job, holder, token, Duration.ofMillis(200));
          } catch (LeaseholdException e) {
            // it runs out on its own
          }
          return;
        }
        held.put(job, new Held(token, anchor + ttlN));
        changed.signalAll();
        dispatchElected(job, token);
        // Lead until this grant is stepped down from, or we stop.
        while (!stopped && held.containsKey(job) && held.get(job).token == token) {
          changed.await();
        }
        if (stopped) {
          return;
        }
      } finally {
        mu.unlock();
      }
    }
  }

  /**
   * The instant a fresh grant's TTL may be counted from: when the Acquire
   * was sent if it came back within ttl/10, else when a confirming Renew
   * was sent (a waiting Acquire granted long after it was sent). Null when
   * it cannot be confirmed.
   */
  private Long anchor(String job, long token, long sent) {
    if (System.nanoTime() - (sent + ttl.toNanos() / 10) < 0) {
      return sent;
    }
    long at = System.nanoTime();
    try {
      client.renew(job, holder, token, ttl, ttl.dividedBy(2));
      return at;
    } catch (LeaseholdException e) {
      LOG.warn("{}: granted token {}, but the confirming renew failed: {}", job, token, e.toString());
      return null;
    }
  }

  // The renewer: one KeepAlive stream for every held lease.

  private void renewLoop() {
    long ttlN = ttl.toNanos();
    long every = ttlN / 3;
    Retry.Backoff retry = Retry.Backoff.renew(ttlN);
    long next = System.nanoTime() + every;
    try {
      while (true) {
        mu.lock();
        try {
          while (!stopped) {
            long wake = next;
            for (Held h : held.values()) {
              if (h.deadline - wake < 0) {
                wake = h.deadline;
              }
            }
            long left = wake - System.nanoTime();
            if (left <= 0) {
              break;
            }
            changed.awaitNanos(left);
          }
          if (stopped) {
            return;
          }
        } finally {
          mu.unlock();
        }
        // Our own deadlines first: no answer can extend them now.
        long now = System.nanoTime();
        stepDownExpired(now);
        if (now - next < 0) {
          continue;
        }
        List<KeepAliveRenewal> batch = new ArrayList<>();
        List<Long> tokens = new ArrayList<>();
        long earliest = 0;
        mu.lock();
        try {
          boolean first = true;
          for (Map.Entry<String, Held> e : held.entrySet()) {
            batch.add(KeepAliveRenewal.newBuilder().setJob(e.getKey()).setHolder(holder).setToken(e.getValue().token)
                .setTtl(Durations.toProto(ttl)).build());
            tokens.add(e.getValue().token);
            if (first || e.getValue().deadline - earliest < 0) {
              earliest = e.getValue().deadline;
              first = false;
            }
          }
        } finally {
          mu.unlock();
        }
        if (batch.isEmpty()) {
          next = now + every;
          continue;
        }
        long sent = System.nanoTime();
        KeepAliveStream s;
        mu.lock();
        try {
          if (stopped) {
            return;
          }
          if (stream == null) {
            stream = new KeepAliveStream(stub, bindToStream);
          }
          s = stream;
        } finally {
          mu.unlock();
        }
        List<KeepAliveResult> results;
        try {
          results = s.renew(batch, Math.max(earliest, sent + TimeUnit.MILLISECONDS.toNanos(10)));
        } catch (LeaseholdException e) {
          if (isStopped()) {
            return;
          }
          retryWarning("keep-alive failed, opening the stream again: " + e);
          s.cancel();
          mu.lock();
          try {
            if (stream == s) {
              stream = null;
            }
          } finally {
            mu.unlock();
          }
          client.reconnectNow();
          long at = System.nanoTime();
          next = at + retry.nextBefore(earliest, at);
          continue;
        }
        retry.reset();
        next = sent + every;
        for (int i = 0; i < batch.size(); i++) {
          String job = batch.get(i).getJob();
          long token = tokens.get(i);
          KeepAliveResult r = results.get(i);
          if (r.getOutcome() == KeepAliveResult.Outcome.OUTCOME_RENEWED) {
            mu.lock();
            try {
              Held h = held.get(job);
              if (h != null && h.token == token) {
                h.deadline = sent + ttlN;
              }
            } finally {
              mu.unlock();
            }
          } else {
            LOG.warn("{}: lease lost (token {}): {} {}", job, token, r.getOutcome(), r.getMessage());
            stepDown(job, token);
          }
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      KeepAliveStream s;
      mu.lock();
      try {
        s = stream;
        stream = null;
      } finally {
        mu.unlock();
      }
      if (s != null) {
        s.cancel();
      }
    }
  }

  private void stepDownExpired(long now) {
    List<Map.Entry<String, Long>> expired = new ArrayList<>();
    mu.lock();
    try {
      held.forEach((j, h) -> {
        if (now - h.deadline >= 0) {
          expired.add(Map.entry(j, h.token));
        }
      });
    } finally {
      mu.unlock();
    }
    for (Map.Entry<String, Long> e : expired) {
      LOG.warn("{}: token {} reached its deadline without a renewal", e.getKey(), e.getValue());
      stepDown(e.getKey(), e.getValue());
    }
  }

  /** Steps down from {@code job} if we still hold it with {@code token}; its campaign starts again. */
  private void stepDown(String job, long token) {
    mu.lock();
    try {
      Held h = held.get(job);
      if (h == null || h.token != token || stopped) {
        return;
      }
      held.remove(job);
      changed.signalAll();
      dispatchLost(job, token);
    } finally {
      mu.unlock();
    }
  }

  // Helpers.

  private boolean isStopped() {
    mu.lock();
    try {
      return stopped;
    } finally {
      mu.unlock();
    }
  }

  private void signal() {
    mu.lock();
    try {
      changed.signalAll();
    } finally {
      mu.unlock();
    }
  }

  /** Waits for {@code f} until {@code until}; false on a stop or the time. */
  private boolean awaitDone(ListenableFuture<?> f, long until) throws InterruptedException {
    mu.lock();
    try {
      while (!f.isDone()) {
        long left = until - System.nanoTime();
        if (stopped || left <= 0) {
          return false;
        }
        changed.awaitNanos(left);
      }
      return true;
    } finally {
      mu.unlock();
    }
  }

  /** Sleeps until {@code until}; true if stopped meanwhile. */
  private boolean sleepUntil(long until) throws InterruptedException {
    mu.lock();
    try {
      while (!stopped) {
        long left = until - System.nanoTime();
        if (left <= 0) {
          return false;
        }
        changed.awaitNanos(left);
      }
      return true;
    } finally {
      mu.unlock();
    }
  }

  private void retryWarning(String message) {
    LOG.debug(message);
    long n = warnings.allow(System.nanoTime());
    if (n >= 0) {
      LOG.warn("{} ({} similar warnings suppressed)", message, n);
    }
  }

  private void dispatchElected(String job, long token) {
    LOG.debug("{}: elected with token {}", job, token);
    dispatch(() -> listener.onElected(job, token));
  }

  private void dispatchLost(String job, long token) {
    LOG.debug("{}: stepped down from token {}", job, token);
    dispatch(() -> listener.onLost(job, token));
  }

  private void dispatch(Runnable r) {
    try {
      callbacks.execute(() -> {
        try {
          r.run();
        } catch (RuntimeException e) {
          LOG.warn("elector set listener failed", e);
        }
      });
    } catch (java.util.concurrent.RejectedExecutionException e) {
      // closed
    }
  }
}
