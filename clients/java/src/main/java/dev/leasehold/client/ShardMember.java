package dev.leasehold.client;

import dev.leasehold.v1.ErrorReason;
import dev.leasehold.v1.JoinRequest;
import dev.leasehold.v1.JoinResponse;
import dev.leasehold.v1.ShardsGrpc;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.TreeMap;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A member of a shard group ({@code Shards.Join}): the server spreads the
 * group's N shards (the partitions of a queue, say) over its live
 * members, each owning floor(N/M) or ceil(N/M), and moves them by
 * handover, with no gap and no double owner.
 *
 * <pre>{@code
 * try (ShardMember m = ShardMember.builder(client, "orders", "consumer", 16)
 *     .ttl(Duration.ofSeconds(10))
 *     .work((shard, cancelled) -> {
 *       while (!cancelled.isCancelled()) {
 *         long offset = consume(shard.shard());
 *         client.checkedWrite(shard.job(), shard.token(), "offset", Long.toString(offset));
 *       }
 *     })
 *     .join()) {
 *   ...
 * } // close(): stops every shard's work, then leaves; the others take the shards at once
 * }</pre>
 *
 * <p>Each shard is its own job, {@code "{group}/{k}"}, with its own lease
 * and token ({@link Shard#job()}, {@link Shard#token()}): write a shard's
 * state under its job with its token, so that a stale owner is fenced.
 *
 * <p>The {@link ShardListener} hears {@code onAssigned} (start the shard's
 * work), {@code onRevoked} (the shard is to move: stop its work; the
 * acknowledgement is sent once the callback returns, or by
 * {@link #release(int)} with {@link Builder#manualAck(boolean)}) and
 * {@code onLost} (the holding ended without a revoke: stop its work), in
 * order, on one callback thread. {@link Builder#work(ShardWork)} does that
 * bookkeeping: it runs the work of each owned shard on an executor and, on
 * a revoke or a loss, cancels it (interrupts it) and waits until it has
 * ended <b>before</b> the acknowledgement is sent.
 *
 * <p>The member is {@code name@uuid}, with a UUID made for it. It renews
 * its holdings with a message every ttl/3 from a thread of its own. If
 * the stream breaks (the server restarts, the connection is cut), every
 * shard is reported lost at once, so that no work runs unowned, and the
 * member joins again under the same identity (backoff from 100 ms,
 * doubling up to 1 s): the server assigns it again the shards still its
 * own. Any other error ends the membership: {@link ShardListener#onError},
 * {@link #error()} and {@link #done()} have it. {@link #close()} stops
 * every shard's work (reported lost), then leaves: closing the stream frees
 * every shard at once, to the members waiting for them.
 *
 * <p>Threads: one for the stream, one for the callbacks, and the work's
 * executor (by default a thread per running shard).
 */
public final class ShardMember implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(ShardMember.class);

  /** The most shards a group may have ({@code JoinRequest.shards}). */
  public static final int MAX_SHARDS = 1024;

  private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);
  /** How long a leave waits for the server to end the stream. */
  private static final long LEAVE_WAIT_NANOS = TimeUnit.SECONDS.toNanos(5);

  private final Client client;
  private final ShardsGrpc.ShardsStub stub;
  private final String group;
  private final String member;
  private final int shards;
  private final Duration ttl;
  private final JoinRequest first;
  private final ShardListener listener;
  private final boolean manualAck;
  private final ShardWork work;
  private final ExecutorService workers;
  private final boolean ownWorkers;

  /** What the stream thread acts on, in order: answers, ends, acks, the leave. */
  private final BlockingQueue<Object> signals;
  private final ExecutorService callbacks;
  private final Thread session;
  private final CompletableFuture<Void> done = new CompletableFuture<>();

  /** Guards {@link #owned}, {@link #closing}, {@link #opening} and the dispatch of assignments. */
  private final Object lock = new Object();
  /** The shards owned, as the stream told: assigned, not yet lost or acknowledged. */
  private final TreeMap<Integer, Shard> owned = new TreeMap<>();
  /** The owned shards being revoked: an ack of one of them ends its ownership. */
  private final java.util.Set<Integer> revoking = new java.util.HashSet<>();
  private boolean closing;
  private boolean closed;
  /** A stream being opened, which close() may give up on. */
  private Call opening;

  /** The running work per shard (callback thread only). */
  private final Map<Integer, Running> running = new HashMap<>();

  private record Ack(int shard) {}

  private record Leave() {}

  private record Answer(Call call, JoinResponse response) {}

  private record Ended(Call call, LeaseholdException error) {}

  private ShardMember(Builder b, BlockingQueue<Object> signals, Call call) {
    this.client = b.client;
    this.signals = signals;
    this.stub = b.stub;
    this.group = b.group;
    this.member = b.member;
    this.shards = b.shards;
    this.ttl = b.ttl;
    this.first = b.first;
    this.listener = b.listener;
    this.manualAck = b.manualAck;
    this.work = b.work;
    this.ownWorkers = b.work != null && b.executor == null;
    this.workers = b.work == null ? null : ownWorkers ? Executors.newCachedThreadPool(r -> {
      Thread t = new Thread(r, "leasehold-shard-work-" + b.group);
      t.setDaemon(true);
      return t;
    }) : b.executor;
    this.callbacks = Executors.newSingleThreadExecutor(r -> {
      Thread t = new Thread(r, "leasehold-shard-callbacks-" + b.group);
      t.setDaemon(true);
      return t;
    });
    this.session = new Thread(() -> run(call), "leasehold-shards-" + b.group);
    this.session.setDaemon(true);
  }

  /**
   * A builder for a member of {@code group}, a group of {@code shards}
   * shards (1 to {@link #MAX_SHARDS}, fixed by the group's first member),
   * named {@code name@<uuid>}, with a UUID made for this member.
   *
   * @throws IllegalArgumentException if {@code name} is empty
   */
  public static Builder builder(Client client, String group, String name, int shards) {
    return new Builder(client, group, name, shards);
  }

  /** Configures a {@link ShardMember}; {@link #join()} joins. */
  public static final class Builder {
    private final Client client;
    private final String group;
    private final String name;
    private final int shards;
    private Duration ttl = Duration.ofSeconds(10);
    private Duration revokeTimeout;
    private ShardListener listener;
    private boolean manualAck;
    private ShardWork work;
    private ExecutorService executor;
    // Set by join().
    private ShardsGrpc.ShardsStub stub;
    private String member;
    private JoinRequest first;

    private Builder(Client client, String group, String name, int shards) {
      this.client = Objects.requireNonNull(client, "client");
      this.group = Objects.requireNonNull(group, "group");
      this.name = Objects.requireNonNull(name, "name");
      if (name.isEmpty()) {
        throw new IllegalArgumentException("name must not be empty");
      }
      this.shards = shards;
    }

    /** The TTL of the member's holdings (default 10 s); a heartbeat renews them every ttl/3. */
    public Builder ttl(Duration ttl) {
      if (ttl.isNegative() || ttl.isZero()) {
        throw new IllegalArgumentException("ttl must be positive");
      }
      this.ttl = ttl;
      return this;
    }

    /**
     * How long the member has to acknowledge a revoke before its shard
     * moves anyway (its writes are then fenced, and it hears
     * {@link ShardListener#onLost}). Default: the TTL.
     */
    public Builder revokeTimeout(Duration revokeTimeout) {
      if (revokeTimeout.isNegative() || revokeTimeout.isZero()) {
        throw new IllegalArgumentException("revokeTimeout must be positive");
      }
      this.revokeTimeout = revokeTimeout;
      return this;
    }

    /** Hears the assignment as it changes (see {@link ShardListener}). */
    public Builder listener(ShardListener listener) {
      this.listener = Objects.requireNonNull(listener, "listener");
      return this;
    }

    /**
     * With {@code true}, a revoke is acknowledged only by
     * {@link ShardMember#release(int)}, not when
     * {@link ShardListener#onRevoked} returns: for a listener that hands
     * the stop to work of its own. A shard never released moves at the
     * revoke's deadline, and the member hears it lost.
     */
    public Builder manualAck(boolean manualAck) {
      this.manualAck = manualAck;
      return this;
    }

    /**
     * Runs {@code work} for each shard while the member owns it, on the
     * executor ({@link #executor}; by default a thread per running shard).
     * On a revoke or a loss the shard's work is cancelled (its
     * {@link ShardWork.Cancellation} says so and its thread is
     * interrupted) and awaited, then the listener (if any) hears it, and
     * then the revoke is acknowledged. So no shard's work runs on once it
     * has moved: <b>work that ignores the cancellation holds the
     * acknowledgement up</b> (and the member's later events; never its
     * heartbeats), until the revoke's deadline moves the shard anyway.
     */
    public Builder work(ShardWork work) {
      this.work = Objects.requireNonNull(work, "work");
      return this;
    }

    /** The executor for {@link #work}'s runs (the caller shuts it down); default: a thread per running shard. */
    public Builder executor(ExecutorService executor) {
      this.executor = Objects.requireNonNull(executor, "executor");
      return this;
    }

    /**
     * Joins: opens the member's stream and waits (up to the client's
     * timeout) for the server's answer. Returns the member, whose events
     * then flow to the listener and the work.
     *
     * @throws InvalidArgumentException {@code field()} {@code "shards"}: a
     *     count outside 1 to 1024 (checked here), or another count than the
     *     group's (its message says the group's); {@code "group"}: an empty
     *     group (checked here) or a bad one; {@code "ttl"},
     *     {@code "revoke_timeout"}: outside the server's range
     * @throws UnavailableException the server could not be reached or did
     *     not answer in time
     * @throws CancellationException the thread was interrupted while
     *     joining (its interrupt flag stays set)
     * @throws LeaseholdException any other refusal (a policy's
     *     {@link PermissionDeniedException}...)
     */
    public ShardMember join() {
      if (group.isEmpty()) {
        throw invalid("group", "is required");
      }
      if (shards < 1 || shards > MAX_SHARDS) {
        throw invalid("shards", "must be 1 to " + MAX_SHARDS + ", not " + Integer.toUnsignedString(shards));
      }
      if (listener == null) {
        listener = new ShardListener() {
          @Override
          public void onAssigned(Shard shard) {}

          @Override
          public void onRevoked(Shard shard) {}
        };
      }
      stub = ShardsGrpc.newStub(client.channel());
      member = Elector.electorHolder(name);
      JoinRequest.Builder r = JoinRequest.newBuilder().setGroup(group).setMember(member).setShards(shards)
          .setTtl(Durations.toProto(ttl));
      if (revokeTimeout != null) {
        r.setRevokeTimeout(Durations.toProto(revokeTimeout));
      }
      first = r.build();
      BlockingQueue<Object> signals = new LinkedBlockingQueue<>();
      Call call;
      try {
        call = open(stub, first, signals, null, client.timeout());
      } catch (UnavailableException e) {
        client.reconnectNow();
        throw e;
      }
      ShardMember m = new ShardMember(this, signals, call);
      m.session.start();
      return m;
    }
  }

  /** The typed error the server would answer for a bad field. */
  static InvalidArgumentException invalid(String field, String message) {
    return new InvalidArgumentException(field + " " + message, Status.Code.INVALID_ARGUMENT,
        Errors.reasonString(ErrorReason.ERROR_REASON_INVALID_ARGUMENT), Map.of("field", field), null);
  }

  /** This member's identity, {@code name@uuid}: the holder of its shards' leases. */
  public String member() {
    return member;
  }

  /** The group. */
  public String group() {
    return group;
  }

  /** The group's count of shards. */
  public int shards() {
    return shards;
  }

  /** The TTL of the member's holdings. */
  public Duration ttl() {
    return ttl;
  }

  /**
   * The shards this member owns now, by shard: assigned, and not yet lost
   * or released. A revoked shard stays until it is released.
   */
  public Map<Integer, Shard> owned() {
    synchronized (lock) {
      return new TreeMap<>(owned);
    }
  }

  /**
   * Acknowledges the revoke of {@code shard}: its work has stopped, and it
   * may move. For {@link Builder#manualAck(boolean)}; otherwise the member
   * acknowledges once {@link ShardListener#onRevoked} returns. A shard not
   * being revoked is ignored by the server. Returns at once.
   */
  public void release(int shard) {
    signals.add(new Ack(shard));
  }

  /**
   * Completes when the membership has ended: normally once closed,
   * exceptionally with the typed {@link LeaseholdException} when an error
   * retrying cannot fix ended it.
   */
  public CompletableFuture<Void> done() {
    return done;
  }

  /** The error that ended the membership, if one did. */
  public Optional<LeaseholdException> error() {
    if (done.isCompletedExceptionally()) {
      try {
        done.getNow(null);
      } catch (java.util.concurrent.CompletionException e) {
        if (e.getCause() instanceof LeaseholdException le) {
          return Optional.of(le);
        }
      }
    }
    return Optional.empty();
  }

  /**
   * Leaves the group: stops every shard's work and reports each owned
   * shard lost (on the callback thread, waited for), then closes the
   * stream, which frees every shard at once to the members waiting for
   * them, and waits (at most 5 s) for the server to end it. Idempotent.
   */
  @Override
  public void close() {
    synchronized (lock) {
      if (closed) {
        return;
      }
      closed = true;
      closing = true; // no assignment is dispatched from now on
      if (opening != null) {
        opening.joined.completeExceptionally(new CancellationException("the member is closing"));
      }
    }
    boolean interrupted = false;
    // Stop the work and report the losses before the shards move.
    Future<?> stopped = null;
    boolean onCallbacks = Thread.currentThread().getName().startsWith("leasehold-shard-callbacks-");
    if (onCallbacks) {
      stopEverything();
    } else {
      try {
        stopped = callbacks.submit(this::stopEverything);
      } catch (RejectedExecutionException e) {
        // the callbacks ended already
      }
    }
    if (stopped != null) {
      while (true) {
        try {
          stopped.get();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        } catch (ExecutionException e) {
          LOG.warn("{}: stopping the shards' work failed", group, e.getCause());
          break;
        }
      }
    }
    signals.add(new Leave());
    if (session != Thread.currentThread()) {
      while (true) {
        try {
          session.join();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
    }
    done.complete(null);
    callbacks.shutdown();
    if (!onCallbacks) {
      try {
        callbacks.awaitTermination(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (ownWorkers) {
      workers.shutdownNow();
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /** On the callback thread, closing: every shard's work stopped, every owned shard reported lost. */
  private void stopEverything() {
    for (Running r : new ArrayList<>(running.values())) {
      r.stop();
    }
    running.clear();
    List<Shard> lost;
    synchronized (lock) {
      lost = new ArrayList<>(owned.values());
      owned.clear();
      revoking.clear();
    }
    for (Shard s : lost) {
      call("onLost", () -> listener.onLost(s));
    }
  }

  // The stream.

  /** One {@code Join} stream: its answers go to {@link #signals}, tagged with it. */
  private static final class Call implements ClientResponseObserver<JoinRequest, JoinResponse> {
    /** The first answer: JOINED, or the refusal. */
    final CompletableFuture<JoinResponse> joined = new CompletableFuture<>();
    final BlockingQueue<Object> signals;
    volatile ClientCallStreamObserver<JoinRequest> requests;

    Call(BlockingQueue<Object> signals) {
      this.signals = signals;
    }

    @Override
    public void beforeStart(ClientCallStreamObserver<JoinRequest> requests) {
      this.requests = requests;
    }

    @Override
    public void onNext(JoinResponse r) {
      if (!joined.isDone()) {
        if (r.getKind() == JoinResponse.Kind.KIND_JOINED) {
          joined.complete(r);
        } else {
          joined.completeExceptionally(unavailable("the server answered a Join with " + r.getKind() + ", not JOINED"));
        }
        return;
      }
      signals.add(new Answer(this, r));
    }

    @Override
    public void onError(Throwable t) {
      LeaseholdException e = Errors.from(t);
      if (!joined.completeExceptionally(e)) {
        signals.add(new Ended(this, e));
      }
    }

    @Override
    public void onCompleted() {
      LeaseholdException e = unavailable("the server ended the Join stream");
      if (!joined.completeExceptionally(e)) {
        signals.add(new Ended(this, e));
      }
    }

    void cancel() {
      ClientCallStreamObserver<JoinRequest> r = requests;
      if (r != null) {
        r.cancel("shard member: stream given up", null);
      }
    }
  }

  private static UnavailableException unavailable(String message) {
    return new UnavailableException(message, Status.Code.UNAVAILABLE, null, Map.of(), null);
  }

  /**
   * Opens a Join stream: sends {@code first}, waits up to {@code timeout}
   * for JOINED; its later answers go to {@code signals}. {@code member},
   * when not null, may give up on it ({@link #close()}).
   */
  private static Call open(ShardsGrpc.ShardsStub stub, JoinRequest first, BlockingQueue<Object> signals,
      ShardMember member, Duration timeout) {
    Call c = new Call(signals);
    if (member != null) {
      synchronized (member.lock) {
        if (member.closing) {
          throw new CancellationException("the member is closing");
        }
        member.opening = c;
      }
    }
    try {
      stub.join(c);
      c.requests.onNext(first);
      c.joined.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
      return c;
    } catch (InterruptedException e) {
      c.cancel();
      Thread.currentThread().interrupt();
      throw new CancellationException("interrupted while joining");
    } catch (ExecutionException e) {
      c.cancel();
      if (e.getCause() instanceof RuntimeException r) {
        throw r;
      }
      throw Errors.from(e.getCause());
    } catch (TimeoutException e) {
      c.cancel();
      throw new UnavailableException("no answer to the Join within " + timeout, Status.Code.DEADLINE_EXCEEDED, null,
          Map.of(), null);
    } catch (RuntimeException e) {
      c.cancel();
      throw e;
    } finally {
      if (member != null) {
        synchronized (member.lock) {
          member.opening = null;
        }
      }
    }
  }

  /** The stream thread: serves the stream, joins again after a break, until the leave or an error. */
  private void run(Call call) {
    Call c = call;
    Retry.Backoff backoff = new Retry.Backoff(100 * MS, 1000 * MS);
    Retry.Warnings warnings = new Retry.Warnings();
    try {
      LeaseholdException broke = serve(c);
      while (broke != null) {
        lostAll();
        if (!broke.isRetryable()) {
          end(broke);
          return;
        }
        warn(warnings, "stream broke, joining again: " + broke);
        client.reconnectNow();
        c = null;
        while (c == null) {
          if (pause(backoff.next())) {
            return; // left while apart: nothing is held
          }
          try {
            c = open(stub, first, signals, this, client.timeout());
          } catch (CancellationException e) {
            return; // closing
          } catch (LeaseholdException e) {
            if (!e.isRetryable()) {
              end(e);
              return;
            }
            warn(warnings, "joining again failed, retrying: " + e);
            client.reconnectNow();
          }
        }
        backoff.reset();
        LOG.info("{}: joined again as {}", group, member);
        broke = serve(c);
      }
    } catch (InterruptedException e) {
      if (c != null) {
        c.cancel();
      }
    }
  }

  /**
   * Serves stream {@code c}: heartbeats every ttl/3, answers, acks. Returns
   * null once the member left, or the error that broke the stream.
   */
  private LeaseholdException serve(Call c) throws InterruptedException {
    long every = Math.max(ttl.toNanos() / 3, MS);
    long next = System.nanoTime() + every;
    while (true) {
      Object s = signals.poll(Math.max(next - System.nanoTime(), 0), TimeUnit.NANOSECONDS);
      if (s == null) {
        if (!send(c, JoinRequest.getDefaultInstance())) {
          return unavailable("the Join stream closed");
        }
        next = System.nanoTime() + every;
      } else if (s instanceof Answer a) {
        if (a.call == c) {
          told(a.response);
        }
      } else if (s instanceof Ended e) {
        if (e.call == c) {
          return e.error;
        }
      } else if (s instanceof Ack a) {
        synchronized (lock) {
          if (revoking.remove(a.shard)) {
            owned.remove(a.shard);
          }
        }
        if (!send(c, JoinRequest.newBuilder().addReleased(a.shard).build())) {
          return unavailable("the Join stream closed");
        }
        next = System.nanoTime() + every;
      } else if (s instanceof Leave) {
        leave(c);
        return null;
      }
    }
  }

  /** Sends {@code r} on {@code c}; false if the stream is gone. */
  private static boolean send(Call c, JoinRequest r) {
    try {
      c.requests.onNext(r);
      return true;
    } catch (RuntimeException e) {
      return false;
    }
  }

  /** Closes our side of {@code c} (the shards go to the others at once) and waits a while for the server to end it. */
  private void leave(Call c) throws InterruptedException {
    try {
      c.requests.onCompleted();
    } catch (RuntimeException e) {
      c.cancel(); // the server sees the stream end either way
      return;
    }
    long until = System.nanoTime() + LEAVE_WAIT_NANOS;
    while (true) {
      long left = until - System.nanoTime();
      Object s = left > 0 ? signals.poll(left, TimeUnit.NANOSECONDS) : null;
      if (s == null) {
        c.cancel();
        return;
      }
      if (s instanceof Ended e && e.call == c) {
        return;
      }
    }
  }

  /** Waits {@code nanos} between joins; true if the member left meanwhile. */
  private boolean pause(long nanos) throws InterruptedException {
    long until = System.nanoTime() + nanos;
    while (true) {
      long left = until - System.nanoTime();
      if (left <= 0) {
        return false;
      }
      Object s = signals.poll(left, TimeUnit.NANOSECONDS);
      if (s instanceof Leave) {
        return true;
      }
      // Answers of a broken stream, and acks of shards lost with it: dropped.
    }
  }

  /** An answer of the live stream. */
  private void told(JoinResponse r) {
    Shard s = Shard.fromProto(r);
    switch (r.getKind()) {
      case KIND_ASSIGNED -> {
        synchronized (lock) {
          if (closing || s.equals(owned.get(s.shard()))) {
            return;
          }
          owned.put(s.shard(), s);
          revoking.remove(s.shard());
          dispatch(() -> assigned(s));
        }
      }
      case KIND_REVOKED -> {
        synchronized (lock) {
          if (owned.containsKey(s.shard())) {
            revoking.add(s.shard());
          }
        }
        dispatch(() -> revoked(s));
      }
      case KIND_LOST -> {
        synchronized (lock) {
          revoking.remove(s.shard());
          if (owned.remove(s.shard()) == null) {
            return;
          }
        }
        dispatch(() -> lost(s));
      }
      default -> {
        // JOINED again, or a kind this client does not know: nothing to do
      }
    }
  }

  /** The stream broke: every owned shard is reported lost at once (it may move while we are apart). */
  private void lostAll() {
    List<Shard> lost;
    synchronized (lock) {
      lost = new ArrayList<>(owned.values());
      owned.clear();
      revoking.clear();
    }
    for (Shard s : lost) {
      dispatch(() -> lost(s));
    }
  }

  /** The membership ended with {@code e}. */
  private void end(LeaseholdException e) {
    LOG.error("{}: the membership of {} ended: {}", group, member, e.toString());
    dispatch(() -> call("onError", () -> listener.onError(e)));
    dispatch(() -> done.completeExceptionally(e));
  }

  private void warn(Retry.Warnings warnings, String message) {
    LOG.debug("{}: {}", group, message);
    long n = warnings.allow(System.nanoTime());
    if (n >= 0) {
      LOG.warn("{}: {} ({} similar warnings suppressed)", group, message, n);
    }
  }

  // The callback thread.

  private void dispatch(Runnable r) {
    try {
      callbacks.execute(r);
    } catch (RejectedExecutionException e) {
      // closed
    }
  }

  private void assigned(Shard s) {
    // An assignment dispatched before close() is stopped by its
    // stopEverything(), queued after it; none is dispatched after.
    call("onAssigned", () -> listener.onAssigned(s));
    if (work != null) {
      Running old = running.remove(s.shard());
      if (old != null) {
        old.stop();
      }
      Running r = new Running(s);
      running.put(s.shard(), r);
      r.start();
    }
  }

  private void revoked(Shard s) {
    if (isClosing()) {
      release(s.shard()); // its work was stopped, and reported lost
      return;
    }
    if (work != null) {
      Running r = running.remove(s.shard());
      if (r != null) {
        r.stop(); // cancelled and ended before the ack
      }
    }
    boolean ok = call("onRevoked", () -> listener.onRevoked(s));
    if (ok && !manualAck) {
      release(s.shard());
    }
  }

  private void lost(Shard s) {
    if (work != null) {
      Running r = running.remove(s.shard());
      if (r != null) {
        r.stop();
      }
    }
    call("onLost", () -> listener.onLost(s));
  }

  private boolean isClosing() {
    synchronized (lock) {
      return closing;
    }
  }

  /** Runs a listener callback; false if it threw (logged). */
  private boolean call(String what, Runnable r) {
    try {
      r.run();
      return true;
    } catch (RuntimeException e) {
      LOG.warn("{}: shard listener {} failed", group, what, e);
      return false;
    }
  }

  /** One shard's run of the work. */
  private final class Running implements ShardWork.Cancellation {
    private final Shard shard;
    private final CountDownLatch cancelled = new CountDownLatch(1);
    private final CountDownLatch ended = new CountDownLatch(1);
    /** 0: queued, 1: running, 2: ended (or never to run). */
    private final AtomicInteger state = new AtomicInteger();
    private Future<?> future;

    Running(Shard shard) {
      this.shard = shard;
    }

    void start() {
      try {
        future = workers.submit(this::body);
      } catch (RejectedExecutionException e) {
        LOG.warn("{}: the work of shard {} was not started: the executor refused it", group, shard.shard());
        state.set(2);
        ended.countDown();
      }
    }

    private void body() {
      if (!state.compareAndSet(0, 1)) {
        return;
      }
      try {
        work.run(shard, this);
      } catch (InterruptedException e) {
        // cancelled
      } catch (Exception | Error e) {
        if (!isCancelled()) {
          LOG.warn("{}: the work of shard {} failed", group, shard.shard(), e);
        }
      } finally {
        state.set(2);
        ended.countDown();
      }
    }

    /** Cancels the work and waits until it has ended. */
    void stop() {
      cancelled.countDown();
      if (state.compareAndSet(0, 2)) {
        if (future != null) {
          future.cancel(false); // never started
        }
        ended.countDown();
        return;
      }
      if (future != null) {
        future.cancel(true); // interrupts it
      }
      boolean interrupted = false;
      while (true) {
        try {
          ended.await();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }

    @Override
    public boolean isCancelled() {
      return cancelled.getCount() == 0;
    }

    @Override
    public void await() throws InterruptedException {
      cancelled.await();
    }

    @Override
    public boolean await(Duration timeout) throws InterruptedException {
      return cancelled.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
    }
  }
}
