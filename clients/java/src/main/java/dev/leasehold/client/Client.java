package dev.leasehold.client;

import com.google.common.util.concurrent.FutureCallback;
import com.google.common.util.concurrent.Futures;
import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.MoreExecutors;
import com.google.protobuf.ByteString;
import dev.leasehold.v1.AcquireRequest;
import dev.leasehold.v1.AcquireResponse;
import dev.leasehold.v1.CheckedWriteRequest;
import dev.leasehold.v1.CheckedWriteResponse;
import dev.leasehold.v1.DeleteJobRequest;
import dev.leasehold.v1.DeleteJobResponse;
import dev.leasehold.v1.FencedStoreGrpc;
import dev.leasehold.v1.GetGroupRequest;
import dev.leasehold.v1.GetLeaseRequest;
import dev.leasehold.v1.GetSigningKeysRequest;
import dev.leasehold.v1.LeasesGrpc;
import dev.leasehold.v1.ListKeysRequest;
import dev.leasehold.v1.ListKeysResponse;
import dev.leasehold.v1.ListLeasesRequest;
import dev.leasehold.v1.ListLeasesResponse;
import dev.leasehold.v1.ReadRequest;
import dev.leasehold.v1.ReadResponse;
import dev.leasehold.v1.ReleaseRequest;
import dev.leasehold.v1.RenewRequest;
import dev.leasehold.v1.RenewResponse;
import dev.leasehold.v1.ShardsGrpc;
import dev.leasehold.v1.TransferLeaseRequest;
import dev.leasehold.v1.TransferLeaseResponse;
import dev.leasehold.v1.WatchLeaseRequest;
import io.grpc.Channel;
import io.grpc.Grpc;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.UnaryOperator;

/**
 * A leasehold client over one gRPC channel. Thread-safe; share one per
 * process. Tokens and versions are unsigned 64-bit values held in a
 * {@code long}. Every blocking method throws a typed
 * {@link LeaseholdException}; each {@code ...Async} method returns a
 * {@link CompletableFuture} that fails with the same exception.
 *
 * <pre>{@code
 * try (Client client = Client.connect("127.0.0.1:50051");
 *      Elector elector = Elector.builder(client, "bridge_health", "bridge").ttl(Duration.ofSeconds(10)).start()) {
 *   long token = elector.awaitElected(Duration.ofMinutes(1)).orElseThrow();
 *   client.checkedWrite("bridge_health", token, "status", "ok");
 * } catch (FencedException e) {
 *   // not the leader any more: stop
 * }
 * }</pre>
 */
public final class Client implements AutoCloseable {
  /**
   * This client's version: the Maven project's version
   * ({@code dev.leasehold:leasehold-client}), also the jar manifest's
   * {@code Implementation-Version}.
   */
  public static final String VERSION = readVersion();

  /** The server of a default installation. */
  public static final String DEFAULT_TARGET = "127.0.0.1:50051";
  /** How long a call may take by default, on top of any time it asks the server to wait. */
  public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);

  private static final int PAGE_SIZE = 1000;
  private static final String PROCESS_UUID = UUID.randomUUID().toString();

  private final ManagedChannel owned;
  /** The channel, when it is a ManagedChannel: its connect backoff is reset after a call finds the server unavailable. */
  private final ManagedChannel managed;
  /** How long a cancelled waiting Acquire's clean-up waits before it reads the lease. */
  private static final long GIVE_BACK_AFTER_MS = 100;
  /** Runs the clean-ups of cancelled waiting Acquires. */
  private static final ScheduledExecutorService CLEANUP = Executors.newSingleThreadScheduledExecutor(r -> {
    Thread t = new Thread(r, "leasehold-give-back");
    t.setDaemon(true);
    return t;
  });
  private final LeasesGrpc.LeasesBlockingStub leases;
  private final LeasesGrpc.LeasesFutureStub leasesFuture;
  private final FencedStoreGrpc.FencedStoreBlockingStub store;
  private final FencedStoreGrpc.FencedStoreStub storeAsync;
  private final FencedStoreGrpc.FencedStoreFutureStub storeFuture;
  private final ShardsGrpc.ShardsBlockingStub shards;
  private final ShardsGrpc.ShardsFutureStub shardsFuture;
  private final Duration timeout;
  /**
   * Acquires and Renews on their way, and tokens told, per (job, holder):
   * what a cancelled Acquire's give-back must respect. Shared with
   * {@link #withTimeout}'s clients.
   */
  private final Calls calls;

  private Client(Channel channel, ManagedChannel owned, Duration timeout, Calls calls) {
    this.owned = owned;
    this.calls = calls;
    this.leases = LeasesGrpc.newBlockingStub(channel);
    this.leasesFuture = LeasesGrpc.newFutureStub(channel);
    this.managed = channel instanceof ManagedChannel m ? m : null;
    this.store = FencedStoreGrpc.newBlockingStub(channel);
    this.storeAsync = FencedStoreGrpc.newStub(channel);
    this.storeFuture = FencedStoreGrpc.newFutureStub(channel);
    this.shards = ShardsGrpc.newBlockingStub(channel);
    this.shardsFuture = ShardsGrpc.newFutureStub(channel);
    this.timeout = timeout;
  }

  /**
   * Connects (plaintext) to {@code target}: "host:port", or "http://host:port"
   * as the Rust client takes it.
   */
  public static Client connect(String target) {
    return connect(target, Security.builder().build());
  }

  /**
   * Connects to {@code target} ("host:port", "http://host:port" or
   * "https://host:port") with TLS, mutual TLS and a bearer token as
   * {@code security} says:
   *
   * <pre>{@code
   * Client client = Client.connect("leasehold.internal:50051", Security.builder()
   *     .caFile(Path.of("/etc/leasehold/ca.pem"))
   *     .clientCertificate(Path.of("/etc/leasehold/worker.pem"), Path.of("/etc/leasehold/worker-key.pem"))
   *     .token(System.getenv("LEASEHOLD_SECRET"))
   *     .build());
   * }</pre>
   */
  public static Client connect(String target, Security security) {
    boolean https = target.startsWith("https://");
    for (String scheme : new String[] {"http://", "grpc://", "https://"}) {
      if (target.startsWith(scheme)) {
        target = target.substring(scheme.length());
      }
    }
    if (target.endsWith("/")) {
      target = target.substring(0, target.length() - 1);
    }
    ManagedChannelBuilder<?> b = Grpc.newChannelBuilder(target, security.channelCredentials(https));
    if (security.serverName() != null) {
      b.overrideAuthority(security.serverName());
    }
    ManagedChannel ch = b.build();
    return new Client(ch, ch, DEFAULT_TIMEOUT, new Calls());
  }

  /** A client over an existing channel (TLS, interceptors...), which the caller closes. */
  public static Client of(Channel channel) {
    return new Client(channel, null, DEFAULT_TIMEOUT, new Calls());
  }

  /**
   * The same client with another default timeout per call (over the same
   * channel, and sharing what a give-back must respect: see
   * {@link #acquire(String, String, Duration, Duration)}).
   */
  public Client withTimeout(Duration timeout) {
    return new Client(leases.getChannel(), null, timeout, calls);
  }

  /**
   * A holder identity for this process: {@code name@uuid}, with one UUID made
   * at process start. A restarted process is a new holder. For one-off
   * calls: an {@link Elector} makes a UUID of its own.
   */
  public static String processHolder(String name) {
    return name + "@" + PROCESS_UUID;
  }

  /** The version Maven wrote into version.properties (a filtered resource). */
  private static String readVersion() {
    try (InputStream in = Client.class.getResourceAsStream("version.properties")) {
      if (in != null) {
        Properties p = new Properties();
        p.load(in);
        String v = p.getProperty("version");
        if (v != null && !v.isEmpty() && !v.startsWith("${")) {
          return v;
        }
      }
    } catch (IOException e) {
      // fall through
    }
    String v = Client.class.getPackage().getImplementationVersion();
    return v != null ? v : "unknown";
  }

  /** Shuts the channel down, if {@link #connect} made it. */
  @Override
  public void close() {
    if (owned != null) {
      owned.shutdown();
      try {
        if (!owned.awaitTermination(5, TimeUnit.SECONDS)) {
          owned.shutdownNow();
        }
      } catch (InterruptedException e) {
        owned.shutdownNow();
        Thread.currentThread().interrupt();
      }
    }
  }

  /**
   * Runs a blocking call. A thread interrupted during it gets a
   * {@link CancellationException} whose cause is the leasehold error the
   * call ended with (the thread's interrupt flag stays set).
   */
  private <S extends io.grpc.stub.AbstractStub<S>, R> R call(S stub, Duration timeout, Function<S, R> f) {
    try {
      return f.apply(stub.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS));
    } catch (StatusRuntimeException e) {
      throw failed(e);
    }
  }

  /** {@link #call(io.grpc.stub.AbstractStub, Duration, Function)} with this client's timeout (for {@link Chaos}). */
  <S extends io.grpc.stub.AbstractStub<S>, R> R call(S stub, Function<S, R> f) {
    return call(stub, timeout, f);
  }

  private RuntimeException failed(Throwable e) {
    LeaseholdException le = Errors.from(e);
    if (le instanceof UnavailableException) {
      reconnectNow();
    }
    if (e.getCause() instanceof InterruptedException || Thread.currentThread().isInterrupted()) {
      Thread.currentThread().interrupt();
      CancellationException c = new CancellationException("interrupted: " + le.getMessage());
      c.initCause(le);
      return c;
    }
    return le;
  }

  /**
   * Ends the channel's reconnect backoff, so that it connects again at once:
   * grpc-java's backoff grows to 120 s and has no public setting, so after
   * a call finds the server unavailable the client (and the elector before
   * each retry) resets it, and is back within about a second of the server.
   */
  void reconnectNow() {
    if (managed != null) {
      managed.resetConnectBackoff();
    }
  }

  /** The largest value a lease may carry ({@code Lease.value}); a larger one is refused by the server. */
  public static final int MAX_VALUE_BYTES = 1024;

  /** The most slots a counted lease may have ({@code AcquireRequest.slots}); more is refused by the server. */
  public static final int MAX_SLOTS = 100;

  static AcquireRequest acquireRequest(String job, String holder, Duration ttl, Duration wait, boolean bindToStream,
      boolean preferred, byte[] value, int slots) {
    // A negative count is sent as its unsigned value, far over 100: the
    // server refuses it naming "slots", as any count out of range.
    AcquireRequest.Builder b = AcquireRequest.newBuilder().setJob(job).setHolder(holder)
        .setTtl(Durations.toProto(ttl)).setWait(Durations.toProto(wait)).setBindToStream(bindToStream)
        .setPreferred(preferred).setSlots(slots);
    if (value != null) {
      b.setValue(ByteString.copyFrom(value));
    }
    return b.build();
  }

  /** A RenewRequest; {@code value} null leaves the field unset (the server keeps the lease's value). */
  static RenewRequest renewRequest(String job, String holder, long token, Duration ttl, byte[] value) {
    RenewRequest.Builder b = RenewRequest.newBuilder().setJob(job).setHolder(holder).setToken(token)
        .setTtl(Durations.toProto(ttl));
    if (value != null) {
      b.setValue(ByteString.copyFrom(value));
    }
    return b.build();
  }

  /**
   * Asks for the lease on {@code job}; waits up to {@code wait} for it to
   * free up.
   *
   * <p>A waiting Acquire ({@code wait > 0}) that is cancelled (the thread
   * interrupted: {@link CancellationException}) or times out gives back a
   * grant it may have been given meanwhile, so that the job is not held for
   * a whole TTL by a holder that never learned its token: the server
   * releases a grant whose reply it could not deliver, and for a reply that
   * was on its way, 100 ms later the client reads the lease and gives it
   * back if its holder is {@code holder} (holders are unique per elector, so
   * that is never someone else's). <b>A give-back never ends a lease a
   * caller was told it holds</b>: not while another Acquire or Renew of this
   * client (or of its {@link #withTimeout} twins) for the job and holder
   * started since or is on its way, not a token one of them was told, and
   * not once the holder asked again from anywhere (the server's
   * {@code give_back} release). So a retry at once after a cancelled
   * Acquire keeps the lease it is granted.
   */
  public Acquired acquire(String job, String holder, Duration ttl, Duration wait) {
    return acquire(job, holder, ttl, wait, false);
  }

  /**
   * {@link #acquire(String, String, Duration, Duration)}, with the grant
   * bound to this client's connection when {@code bindToStream} is true
   * ({@code AcquireRequest.bind_to_stream}): when the client's end of the
   * connection closes or resets (its process dies, {@link #close()}), the
   * server releases the lease at once and grants the first waiter the next
   * token, instead of waiting out the TTL. Silence (a partition, a paused
   * process) releases nothing: the TTL runs as usual. The trade: a live
   * holder whose connection is cut (a proxy that closes it, the channel
   * reconnecting or going idle) loses the lease at once, and its writes are
   * then fenced.
   */
  public Acquired acquire(String job, String holder, Duration ttl, Duration wait, boolean bindToStream) {
    return acquire(job, holder, ttl, wait, bindToStream, false);
  }

  /**
   * {@link #acquire(String, String, Duration, Duration, boolean)}, asking as
   * a preferred candidate when {@code preferred} is true
   * ({@code AcquireRequest.preferred}): while it waits it is queued ahead of
   * the waiting Acquires that are not preferred (first come, first served
   * within each class), and the live holder, unless its own grant was a
   * preferred one, is told so by its renewals
   * ({@link Renewed#successorWaiting()}, from {@link #renewLease}), so that
   * it can hand over ({@link #transferLease}) when it suits it. Nothing is
   * taken from the holder: the lease changes hands only by its release,
   * transfer or expiry, as for any waiter.
   */
  public Acquired acquire(String job, String holder, Duration ttl, Duration wait, boolean bindToStream, boolean preferred) {
    return acquire(job, holder, ttl, wait, bindToStream, preferred, null);
  }

  /**
   * {@link #acquire(String, String, Duration, Duration)}, publishing
   * {@code value} with the grant ({@code AcquireRequest.value}, at most
   * {@link #MAX_VALUE_BYTES}; null or empty: none): where to reach the
   * leader, say its address, which every reader of the lease sees
   * ({@link Lease#value()}: {@link #getLease}, {@link #observe}, the
   * history's {@link Tenure#value()}). A repeated Acquire by the live
   * holder replaces it. <b>Advisory: the token fences, not the value.</b>
   *
   * <pre>{@code
   * Acquired a = client.acquire("reports", holder, Duration.ofSeconds(10), Duration.ZERO,
   *     "10.0.0.7:8080".getBytes(StandardCharsets.UTF_8));
   * }</pre>
   *
   * @throws InvalidArgumentException a value over 1024 bytes ({@code field()} {@code "value"}); nothing changed
   */
  public Acquired acquire(String job, String holder, Duration ttl, Duration wait, byte[] value) {
    return acquire(job, holder, ttl, wait, false, false, value);
  }

  /**
   * {@link #acquire(String, String, Duration, Duration, boolean, boolean)},
   * publishing {@code value} with the grant (null or empty: none): see
   * {@link #acquire(String, String, Duration, Duration, byte[])}.
   */
  public Acquired acquire(String job, String holder, Duration ttl, Duration wait, boolean bindToStream, boolean preferred,
      byte[] value) {
    return acquire(job, holder, ttl, wait, bindToStream, preferred, value, 0);
  }

  /**
   * {@link #acquire(String, String, Duration, Duration)} for one of
   * {@code slots} slots of a counted lease (a semaphore) on {@code job}
   * ({@code AcquireRequest.slots}, 2 to {@link #MAX_SLOTS}; 0 or 1: the
   * ordinary lease): up to {@code slots} holders at once, each in a slot of
   * its own. Slot k is a job of its own, {@code "{job}#{k}"}, with its own
   * token: the grant's {@link Lease#job()} names it, {@link Lease#slot()} is
   * k and {@link Lease#slots()} the count. <b>Renew, release, transfer and
   * write with the grant's {@link Lease#job()}, not {@code job}.</b>
   *
   * <p>Waiters are served first come, first served: a slot that frees goes
   * to the first of them. While the first waits, the server holds
   * {@code job}'s own lease for it (the line's turn), so
   * {@code getLease(job)} shows a waiter, not a slot's holder: read a slot
   * with {@code getLease(job + "#" + k)}. A live holder of a slot that asks
   * again is renewed in its slot. The count is fixed by the job's first
   * counted grant (and forgotten by {@link #deleteJob}).
   *
   * <pre>{@code
   * // At most 2 nightly runs at once.
   * Acquired a = client.acquire("nightly", holder, Duration.ofMinutes(1), Duration.ofMinutes(5), 2);
   * if (a.acquired()) {
   *   Lease slot = a.lease(); // slot.job() is "nightly#0" or "nightly#1"
   *   client.checkedWrite(slot.job(), slot.token(), "started", "...");
   * }
   * }</pre>
   *
   * @throws InvalidArgumentException {@code field()} {@code "slots"}: a count
   *     over 100, or another count than the job's (its message says the
   *     job's count); nothing changed
   */
  public Acquired acquire(String job, String holder, Duration ttl, Duration wait, int slots) {
    return acquire(job, holder, ttl, wait, false, false, null, slots);
  }

  /**
   * {@link #acquire(String, String, Duration, Duration, boolean, boolean, byte[])}
   * for a slot of a counted lease with {@code slots} slots (0 or 1: the
   * ordinary lease): see {@link #acquire(String, String, Duration, Duration, int)}.
   */
  public Acquired acquire(String job, String holder, Duration ttl, Duration wait, boolean bindToStream, boolean preferred,
      byte[] value, int slots) {
    Calls.Asking asking = calls.start(job, holder);
    AcquireResponse r;
    try {
      r = call(leases, wait.plus(timeout),
          s -> s.acquire(acquireRequest(job, holder, ttl, wait, bindToStream, preferred, value, slots)));
      if (r.getAcquired()) {
        told(asking, job, r);
      }
    } catch (CancellationException | UnavailableException e) {
      if (!wait.isZero() && (e instanceof CancellationException || isTimeout(e))) {
        asking.end(); // the cancelled call has ended before its give-back
        giveBackLater(job, holder, asking.n);
      }
      throw e;
    } finally {
      asking.end();
    }
    return new Acquired(r.getAcquired(), Lease.fromProto(r.getLease()));
  }

  /** Asks for the lease on {@code job} without waiting. */
  public Acquired acquire(String job, String holder, Duration ttl) {
    return acquire(job, holder, ttl, Duration.ZERO);
  }

  /**
   * {@link #acquire(String, String, Duration, Duration)} as a future, for
   * waiting with a timeout ({@code get(timeout)} throws
   * {@link java.util.concurrent.TimeoutException}) or cancelling:
   * {@code cancel(true)} cancels the call, {@code get} then throws
   * {@link CancellationException}, and a waiting Acquire so cancelled (or
   * ended by {@code orTimeout}, or timed out at the server's deadline) gives
   * back a grant it may have been given meanwhile, as the blocking call
   * does, and as safely: never a lease a caller was told it holds. A failed
   * call completes it exceptionally with the
   * {@link LeaseholdException} ({@code get}'s
   * {@link java.util.concurrent.ExecutionException} has it as the cause,
   * {@code join}'s {@link java.util.concurrent.CompletionException} too).
   */
  public CompletableFuture<Acquired> acquireAsync(String job, String holder, Duration ttl, Duration wait) {
    return acquireAsync(job, holder, ttl, wait, false);
  }

  /**
   * {@link #acquireAsync(String, String, Duration, Duration)}, with the
   * grant bound to this client's connection when {@code bindToStream} is
   * true: see {@link #acquire(String, String, Duration, Duration, boolean)}.
   */
  public CompletableFuture<Acquired> acquireAsync(String job, String holder, Duration ttl, Duration wait, boolean bindToStream) {
    return acquireAsync(job, holder, ttl, wait, bindToStream, false);
  }

  /**
   * {@link #acquireAsync(String, String, Duration, Duration, boolean)},
   * asking as a preferred candidate when {@code preferred} is true: see
   * {@link #acquire(String, String, Duration, Duration, boolean, boolean)}.
   */
  public CompletableFuture<Acquired> acquireAsync(String job, String holder, Duration ttl, Duration wait, boolean bindToStream,
      boolean preferred) {
    return acquireAsync(job, holder, ttl, wait, bindToStream, preferred, null);
  }

  /**
   * {@link #acquireAsync(String, String, Duration, Duration, boolean, boolean)},
   * publishing {@code value} with the grant (null or empty: none): see
   * {@link #acquire(String, String, Duration, Duration, byte[])}.
   */
  public CompletableFuture<Acquired> acquireAsync(String job, String holder, Duration ttl, Duration wait, boolean bindToStream,
      boolean preferred, byte[] value) {
    return acquireAsync(job, holder, ttl, wait, bindToStream, preferred, value, 0);
  }

  /**
   * {@link #acquire(String, String, Duration, Duration, int)} as a future:
   * a slot of a counted lease with {@code slots} slots; see
   * {@link #acquireAsync(String, String, Duration, Duration)}.
   */
  public CompletableFuture<Acquired> acquireAsync(String job, String holder, Duration ttl, Duration wait, int slots) {
    return acquireAsync(job, holder, ttl, wait, false, false, null, slots);
  }

  /**
   * {@link #acquireAsync(String, String, Duration, Duration, boolean, boolean, byte[])}
   * for a slot of a counted lease with {@code slots} slots: see
   * {@link #acquire(String, String, Duration, Duration, int)}.
   */
  public CompletableFuture<Acquired> acquireAsync(String job, String holder, Duration ttl, Duration wait, boolean bindToStream,
      boolean preferred, byte[] value, int slots) {
    long[] n = new long[1];
    ListenableFuture<AcquireResponse> call =
        acquireCall(job, holder, ttl, wait, bindToStream, preferred, value, slots, wait.plus(timeout), a -> n[0] = a);
    return async(call, r -> new Acquired(r.getAcquired(), Lease.fromProto(r.getLease())), r -> {
      // The grant reached this client, but its caller had cancelled the
      // future first and never saw it: give it back, as for a grant that
      // came after the cancel. A counted grant is on its slot's job.
      if (r.getAcquired() && !wait.isZero()) {
        giveBackUndelivered(job, r.getLease().getJob(), holder, n[0], r.getLease().getToken());
      }
    });
  }

  /**
   * Records that call {@code asking} for {@code job} told its caller of the
   * grant in {@code r}. Only a grant of {@code job} itself: a counted grant
   * is on a slot's job, which no give-back of {@code job} can end (a
   * give-back reads and releases {@code job}'s lease: for a counted lease,
   * the line's turn, never a slot), and its renewals and release count
   * under the slot's job.
   */
  private static void told(Calls.Asking asking, String job, AcquireResponse r) {
    if (r.getLease().getJob().equals(job)) {
      asking.told(r.getLease().getToken());
    }
  }

  /** {@link #acquire(String, String, Duration)} as a future: asks without waiting. */
  public CompletableFuture<Acquired> acquireAsync(String job, String holder, Duration ttl) {
    return acquireAsync(job, holder, ttl, Duration.ZERO);
  }

  /**
   * A gRPC call's future as a {@link CompletableFuture}: it completes with
   * {@code map} of the response, or exceptionally with the typed
   * {@link LeaseholdException}; completing it first in any other way
   * ({@code cancel}, {@code orTimeout}, {@code completeExceptionally})
   * cancels the call. Dependent stages that are not {@code ...Async} run on
   * gRPC's callback thread.
   */
  private <T, R> CompletableFuture<R> async(ListenableFuture<T> call, Function<T, R> map) {
    return async(call, map, r -> { });
  }

  /**
   * {@link #async(ListenableFuture, Function)}, with {@code undelivered}
   * called with a response that came after the future was completed
   * another way (cancelled): its caller never saw it.
   */
  private <T, R> CompletableFuture<R> async(ListenableFuture<T> call, Function<T, R> map, java.util.function.Consumer<T> undelivered) {
    return async(call, map, undelivered, UnaryOperator.identity());
  }

  /**
   * {@link #async(ListenableFuture, Function)}, failing with
   * {@code errors} of the typed exception (for {@link Chaos}, which tells a
   * server without the chaos API by its error).
   */
  <T, R> CompletableFuture<R> asyncMapped(ListenableFuture<T> call, Function<T, R> map, UnaryOperator<LeaseholdException> errors) {
    return async(call, map, r -> { }, errors);
  }

  private <T, R> CompletableFuture<R> async(ListenableFuture<T> call, Function<T, R> map, java.util.function.Consumer<T> undelivered,
      UnaryOperator<LeaseholdException> errors) {
    CompletableFuture<R> out = new CompletableFuture<>();
    Futures.addCallback(call, new FutureCallback<T>() {
      @Override
      public void onSuccess(T r) {
        try {
          if (!out.complete(map.apply(r))) {
            undelivered.accept(r);
          }
        } catch (RuntimeException e) {
          out.completeExceptionally(e);
        }
      }

      @Override
      public void onFailure(Throwable t) {
        if (t instanceof CancellationException) {
          out.completeExceptionally(t);
          return;
        }
        LeaseholdException le = Errors.from(t);
        if (le instanceof UnavailableException) {
          reconnectNow();
        }
        out.completeExceptionally(errors.apply(le));
      }
    }, MoreExecutors.directExecutor());
    out.whenComplete((r, t) -> {
      if (t != null) {
        call.cancel(true); // a no-op once the call has ended
      }
    });
    return out;
  }

  /** {@code stub} with this client's timeout as its deadline, from now. */
  <S extends io.grpc.stub.AbstractStub<S>> S deadline(S stub) {
    return stub.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS);
  }

  private static boolean isTimeout(Throwable e) {
    return e instanceof UnavailableException u
        && (u.code() == io.grpc.Status.Code.DEADLINE_EXCEEDED || u.code() == io.grpc.Status.Code.CANCELLED);
  }

  /**
   * The clean-up of a cancelled waiting Acquire, call {@code n} of
   * {@link #calls} (ended): gives the lease back if it is {@code holder}'s
   * and no caller of this client was told it holds it (see {@link Calls}).
   * Best effort.
   */
  private void giveBackLater(String job, String holder, long n) {
    CLEANUP.schedule(() -> {
      try {
        Lease l = getLease(job);
        if (holder.equals(l.holder()) && calls.mayGiveBack(job, holder, n, l.token())) {
          call(leases, timeout, s -> s.release(ReleaseRequest.newBuilder()
              .setJob(job).setHolder(holder).setToken(l.token()).setGiveBack(true).build()));
        }
      } catch (RuntimeException e) {
        // best effort: the lease runs out on its own
      }
    }, GIVE_BACK_AFTER_MS, TimeUnit.MILLISECONDS);
  }

  /**
   * The clean-up of a waiting Acquire of {@code job}, call {@code n} of
   * {@link #calls}, whose grant of {@code token} on {@code leaseJob} (a
   * counted lease's slot job, else {@code job}) reached this client after its caller
   * cancelled the future: gives the lease back if it still is that grant
   * and no call for the pair started since or is on its way. The grant was
   * recorded as told when it arrived, but its caller was never told, so
   * the token told is not in the way here; the server's give-back keeps
   * the lease if the holder asked again since.
   */
  private void giveBackUndelivered(String job, String leaseJob, String holder, long n, long token) {
    CLEANUP.schedule(() -> {
      try {
        Lease l = getLease(leaseJob);
        if (holder.equals(l.holder()) && l.token() == token && calls.mayGiveBackUndelivered(job, holder, n)) {
          call(leases, timeout, s -> s.release(ReleaseRequest.newBuilder()
              .setJob(leaseJob).setHolder(holder).setToken(token).setGiveBack(true).build()));
          calls.released(job, holder);
        }
      } catch (RuntimeException e) {
        // best effort: the lease runs out on its own
      }
    }, GIVE_BACK_AFTER_MS, TimeUnit.MILLISECONDS);
  }

  /**
   * Acquire as a cancellable future of the raw response (for the Elector).
   * A waiting one that is cancelled or times out gives back a grant it may
   * have been given meanwhile. The future completes once the call's grant
   * is recorded as told, and its call ends however it ends.
   */
  ListenableFuture<AcquireResponse> acquireCall(String job, String holder, Duration ttl, Duration wait, boolean bindToStream,
      boolean preferred, byte[] value, int slots, Duration timeout) {
    return acquireCall(job, holder, ttl, wait, bindToStream, preferred, value, slots, timeout, n -> { });
  }

  /** {@link #acquireCall}, telling {@code number} the call's number in {@link #calls}. */
  private ListenableFuture<AcquireResponse> acquireCall(String job, String holder, Duration ttl, Duration wait, boolean bindToStream,
      boolean preferred, byte[] value, int slots, Duration timeout, java.util.function.LongConsumer number) {
    Calls.Asking asking = calls.start(job, holder);
    number.accept(asking.n);
    ListenableFuture<AcquireResponse> f;
    try {
      f = Futures.transform(leasesFuture.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS)
          .acquire(acquireRequest(job, holder, ttl, wait, bindToStream, preferred, value, slots)), r -> {
            if (r.getAcquired()) {
              told(asking, job, r);
            }
            return r;
          }, MoreExecutors.directExecutor());
    } catch (RuntimeException e) {
      asking.end();
      throw e;
    }
    f.addListener(() -> {
      asking.end(); // the cancelled call has ended before its give-back
      if (!wait.isZero() && (f.isCancelled() || timedOut(f))) {
        giveBackLater(job, holder, asking.n);
      }
    }, MoreExecutors.directExecutor());
    return f;
  }

  /** Whether the done {@code f} failed as a timeout (the server's deadline, a cancelled call). */
  private static boolean timedOut(ListenableFuture<?> f) {
    try {
      Futures.getDone(f);
      return false;
    } catch (ExecutionException e) {
      return isTimeout(Errors.from(e.getCause()));
    } catch (CancellationException e) {
      return false;
    }
  }

  /**
   * Renew as a cancellable future of the raw response (for the Elector). The
   * future completes once the renewed token is recorded as told.
   */
  ListenableFuture<RenewResponse> renewCall(String job, String holder, long token, Duration ttl, byte[] value,
      Duration timeout) {
    Calls.Asking asking = calls.start(job, holder);
    ListenableFuture<RenewResponse> f;
    try {
      f = Futures.transform(leasesFuture.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS)
          .renew(renewRequest(job, holder, token, ttl, value)), r -> {
            asking.told(r.getLease().getToken());
            return r;
          }, MoreExecutors.directExecutor());
    } catch (RuntimeException e) {
      asking.end();
      throw e;
    }
    f.addListener(asking::end, MoreExecutors.directExecutor());
    return f;
  }

  /** Renews our live lease; throws {@link LeaseLostException} when it is not ours. */
  public Lease renew(String job, String holder, long token, Duration ttl) {
    return renew(job, holder, token, ttl, timeout);
  }

  /**
   * {@link #renew(String, String, long, Duration)} as a future; fails with
   * the same exceptions ({@link LeaseLostException}...), and
   * {@code cancel(true)} cancels the call.
   */
  public CompletableFuture<Lease> renewAsync(String job, String holder, long token, Duration ttl) {
    return renewAsync(job, holder, token, ttl, null);
  }

  /**
   * {@link #renew(String, String, long, Duration)}, replacing the lease's
   * value ({@link Lease#value()}) with {@code value} when it is not null
   * ({@code RenewRequest.value}; empty clears it, at most
   * {@link #MAX_VALUE_BYTES}); null keeps it. Watchers see a change as
   * {@link LeaseEvent.Kind#VALUE_CHANGED} (same holder, same token).
   *
   * @throws InvalidArgumentException a value over 1024 bytes ({@code field()} {@code "value"}); nothing changed
   */
  public Lease renew(String job, String holder, long token, Duration ttl, byte[] value) {
    return renewLease(job, holder, token, ttl, value, timeout).lease();
  }

  /** {@link #renew(String, String, long, Duration, byte[])} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<Lease> renewAsync(String job, String holder, long token, Duration ttl, byte[] value) {
    return async(renewCall(job, holder, token, ttl, value, timeout), r -> Lease.fromProto(r.getLease()));
  }

  /**
   * {@link #renew(String, String, long, Duration)}, with whether a
   * preferred candidate waits for the job while our grant is not a
   * preferred one ({@link Renewed#successorWaiting()},
   * {@code RenewResponse.successor_waiting}): hand over
   * ({@link #transferLease(String, String, long)}) when it suits, or keep
   * leading; nothing is taken from us.
   */
  public Renewed renewLease(String job, String holder, long token, Duration ttl) {
    return renewLease(job, holder, token, ttl, timeout);
  }

  /**
   * {@link #renewLease(String, String, long, Duration)} as a future; fails
   * with the same exceptions ({@link LeaseLostException}...), and
   * {@code cancel(true)} cancels the call.
   */
  public CompletableFuture<Renewed> renewLeaseAsync(String job, String holder, long token, Duration ttl) {
    return renewLeaseAsync(job, holder, token, ttl, null);
  }

  /**
   * {@link #renewLease(String, String, long, Duration)}, replacing the
   * lease's value with {@code value} when it is not null (empty clears it;
   * null keeps it): see {@link #renew(String, String, long, Duration, byte[])}.
   */
  public Renewed renewLease(String job, String holder, long token, Duration ttl, byte[] value) {
    return renewLease(job, holder, token, ttl, value, timeout);
  }

  /** {@link #renewLease(String, String, long, Duration, byte[])} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<Renewed> renewLeaseAsync(String job, String holder, long token, Duration ttl, byte[] value) {
    return async(renewCall(job, holder, token, ttl, value, timeout), Renewed::fromProto);
  }

  Lease renew(String job, String holder, long token, Duration ttl, Duration timeout) {
    return renewLease(job, holder, token, ttl, null, timeout).lease();
  }

  Renewed renewLease(String job, String holder, long token, Duration ttl, Duration timeout) {
    return renewLease(job, holder, token, ttl, null, timeout);
  }

  Renewed renewLease(String job, String holder, long token, Duration ttl, byte[] value, Duration timeout) {
    Calls.Asking asking = calls.start(job, holder);
    try {
      RenewResponse r = call(leases, timeout, s -> s.renew(renewRequest(job, holder, token, ttl, value)));
      asking.told(r.getLease().getToken());
      return Renewed.fromProto(r);
    } finally {
      asking.end();
    }
  }

  /** Releases our lease; the first waiter is granted at once. */
  public void release(String job, String holder, long token) {
    release(job, holder, token, timeout);
  }

  /** {@link #release(String, String, long)} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<Void> releaseAsync(String job, String holder, long token) {
    return async(deadline(leasesFuture).release(
        ReleaseRequest.newBuilder().setJob(job).setHolder(holder).setToken(token).build()), r -> {
          calls.released(job, holder);
          return null;
        });
  }

  void release(String job, String holder, long token, Duration timeout) {
    call(leases, timeout, s -> s.release(ReleaseRequest.newBuilder().setJob(job).setHolder(holder).setToken(token).build()));
    calls.released(job, holder);
  }

  static TransferLeaseRequest transferRequest(String job, String holder, long token, String toHolder, Duration ttl) {
    TransferLeaseRequest.Builder b = TransferLeaseRequest.newBuilder().setJob(job).setHolder(holder).setToken(token);
    if (toHolder != null) {
      b.setToHolder(toHolder);
    }
    if (ttl != null) {
      b.setTtl(Durations.toProto(ttl));
    }
    return b.build();
  }

  /**
   * Hands our live lease (held by {@code holder} with {@code token}) to a
   * waiting Acquire, in one step: the successor is granted the next token
   * ({@code token + 1}) with no moment when the job is free, and its waiting
   * Acquire returns at once. The successor is the first waiter in line
   * whose holder is {@code toHolder}, or the first waiter in line when
   * {@code toHolder} is null or empty; its TTL is {@code ttl}, or when null
   * the TTL the lease has now. Returns the successor's lease.
   *
   * @throws NoSuccessorException when no such waiter waits; nothing changed,
   *     we still lead
   * @throws LeaseLostException when the lease is not {@code holder}'s with
   *     {@code token} (expired, released, moved on); nothing changed
   */
  public Lease transferLease(String job, String holder, long token, String toHolder, Duration ttl) {
    return transferLease(job, holder, token, toHolder, ttl, timeout);
  }

  /**
   * {@link #transferLease(String, String, long, String, Duration)} to the
   * first waiter in line, with the lease's current TTL.
   */
  public Lease transferLease(String job, String holder, long token) {
    return transferLease(job, holder, token, null, null);
  }

  /**
   * {@link #transferLease(String, String, long, String, Duration)} as a
   * future of the successor's lease; fails with the same exceptions
   * ({@link NoSuccessorException}, {@link LeaseLostException}...), and
   * {@code cancel(true)} cancels the call (the transfer may or may not have
   * been made).
   */
  public CompletableFuture<Lease> transferLeaseAsync(String job, String holder, long token, String toHolder, Duration ttl) {
    return async(deadline(leasesFuture).transferLease(transferRequest(job, holder, token, toHolder, ttl)), r -> {
      calls.released(job, holder);
      return Lease.fromProto(r.getLease());
    });
  }

  /** {@link #transferLease(String, String, long)} as a future. */
  public CompletableFuture<Lease> transferLeaseAsync(String job, String holder, long token) {
    return transferLeaseAsync(job, holder, token, null, null);
  }

  Lease transferLease(String job, String holder, long token, String toHolder, Duration ttl, Duration timeout) {
    TransferLeaseResponse r = call(leases, timeout, s -> s.transferLease(transferRequest(job, holder, token, toHolder, ttl)));
    calls.released(job, holder);
    return Lease.fromProto(r.getLease());
  }

  /** How many (job, holder) pairs this client keeps for its give-backs (for tests). */
  int pairsKept() {
    return calls.size();
  }

  /** The lease of {@code job} (token 0 and no holder if never granted). */
  public Lease getLease(String job) {
    return getLease(job, timeout);
  }

  /** {@link #getLease(String)} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<Lease> getLeaseAsync(String job) {
    return async(deadline(leasesFuture).getLease(GetLeaseRequest.newBuilder().setJob(job).build()), Lease::fromProto);
  }

  Lease getLease(String job, Duration timeout) {
    return Lease.fromProto(call(leases, timeout, s -> s.getLease(GetLeaseRequest.newBuilder().setJob(job).build())));
  }

  /**
   * The Acquires waiting for {@code job} ({@code ListWaiters}), in line
   * order: the preferred candidates first, then the others, each class
   * first come, first served (the order in which a release would hand the
   * lease over), at most {@code limit} of them (0: the server's default,
   * 100; at most 1000), with how many wait in all
   * ({@link Waiters#waiting()}, which may be more than listed). A job
   * nobody waits for, or that does not exist, has an empty line, not an
   * error. With a policy, this needs {@code read} on the job.
   *
   * <pre>{@code
   * Waiters line = client.listWaiters("reports", 10);
   * for (Waiter w : line.waiters()) {
   *   System.out.println(w.holder() + (w.preferred() ? " (preferred)" : ""));
   * }
   * }</pre>
   *
   * @throws IllegalArgumentException a negative {@code limit} (nothing is sent)
   */
  public Waiters listWaiters(String job, int limit) {
    return Waiters.fromProto(call(leases, timeout, s -> s.listWaiters(listWaitersRequest(job, limit))));
  }

  /** {@link #listWaiters(String, int)} with the server's default limit (100). */
  public Waiters listWaiters(String job) {
    return listWaiters(job, 0);
  }

  /** {@link #listWaiters(String, int)} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<Waiters> listWaitersAsync(String job, int limit) {
    return async(deadline(leasesFuture).listWaiters(listWaitersRequest(job, limit)), Waiters::fromProto);
  }

  static dev.leasehold.v1.ListWaitersRequest listWaitersRequest(String job, int limit) {
    if (limit < 0) {
      throw new IllegalArgumentException("limit must not be negative");
    }
    return dev.leasehold.v1.ListWaitersRequest.newBuilder().setJob(job).setLimit(limit).build();
  }

  /**
   * The server's public signing keys ({@code GetSigningKeys}; the admin
   * port's {@code GET /keys} serves the same JWKS), with which
   * {@link Proofs#verify} checks a grant's proof ({@link Lease#proof()}).
   * The first key signs new grants; every one listed verifies. Empty when
   * the server signs nothing. Needs no grant. Fetch it once and again when a
   * proof names a key it does not list (a rotation).
   */
  public KeySet getSigningKeys() {
    return KeySet.of(call(leases, timeout, s -> s.getSigningKeys(GetSigningKeysRequest.getDefaultInstance())));
  }

  /** {@link #getSigningKeys()} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<KeySet> getSigningKeysAsync() {
    return async(deadline(leasesFuture).getSigningKeys(GetSigningKeysRequest.getDefaultInstance()), KeySet::of);
  }

  /**
   * The chaos API of a server started with {@code --enable-chaos} (test and
   * staging servers only), for tests that a worker steps down: expire a
   * job's lease now, pause its holder, delay answers, fence writes, force a
   * transfer. Over this client's channel, with its timeout. A server
   * without the flag throws {@link ChaosDisabledException} on every call.
   * See {@link Chaos}.
   */
  public Chaos chaos() {
    return new Chaos(this, leases.getChannel());
  }

  /**
   * Deletes {@code job} and every key of its fenced store, if its lease is not
   * live and no Acquire waits for it ({@link JobInUseException} otherwise).
   * Returns whether there was such a job. A job created again later gets
   * tokens above its old ones.
   */
  public boolean deleteJob(String job) {
    return call(leases, timeout, s -> s.deleteJob(DeleteJobRequest.newBuilder().setJob(job).build())).getDeleted();
  }

  /**
   * {@link #deleteJob(String)} as a future (fails with
   * {@link JobInUseException}...); {@code cancel(true)} cancels the call.
   */
  public CompletableFuture<Boolean> deleteJobAsync(String job) {
    return async(deadline(leasesFuture).deleteJob(DeleteJobRequest.newBuilder().setJob(job).build()),
        DeleteJobResponse::getDeleted);
  }

  /**
   * A shard group ({@code Shards.GetGroup}): its count of shards, its live
   * members with the shards each owns, and each shard's owner and newest
   * token. A group never joined has 0 shards and no members. With a
   * policy, this needs {@code read} on the group's job. Members join with
   * {@link ShardMember}.
   *
   * <pre>{@code
   * ShardGroup g = client.getGroup("orders");
   * for (ShardGroup.Member m : g.members()) {
   *   System.out.println(m.member() + " owns " + m.shards());
   * }
   * }</pre>
   */
  public ShardGroup getGroup(String group) {
    return ShardGroup.fromProto(call(shards, timeout, s -> s.getGroup(GetGroupRequest.newBuilder().setGroup(group).build())));
  }

  /** {@link #getGroup(String)} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<ShardGroup> getGroupAsync(String group) {
    return async(deadline(shardsFuture).getGroup(GetGroupRequest.newBuilder().setGroup(group).build()), ShardGroup::fromProto);
  }

  /** Every lease whose job starts with {@code prefix}, all pages. */
  public List<Lease> listLeases(String prefix) {
    List<Lease> out = new ArrayList<>();
    String page = "";
    while (true) {
      ListLeasesRequest req = ListLeasesRequest.newBuilder().setPrefix(prefix).setPageSize(PAGE_SIZE).setPageToken(page).build();
      ListLeasesResponse r = call(leases, timeout, s -> s.listLeases(req));
      r.getLeasesList().forEach(l -> out.add(Lease.fromProto(l)));
      if (r.getNextPageToken().isEmpty()) {
        return out;
      }
      page = r.getNextPageToken();
    }
  }

  /**
   * One page of {@code job}'s history of leaders ({@code GetHistory}),
   * newest first: a {@link Tenure} per token granted, with its holder,
   * principal, when it was granted and how and when it ended; the first
   * page also lists the chaos API's actions on the job
   * ({@link HistoryPage#chaos()}). {@code pageSize} 0 asks for the server's
   * default (100; at most 1000); {@code pageToken} is empty (or null) for
   * the first page, else the previous page's
   * {@link HistoryPage#nextPageToken()}. A job with no history (never
   * granted, or deleted) has an empty one. A page token the server did not
   * issue for this job's history throws {@link InvalidArgumentException}
   * ({@code field()} {@code "page_token"}).
   */
  public HistoryPage history(String job, int pageSize, String pageToken) {
    return HistoryPage.fromProto(call(leases, timeout, s -> s.getHistory(historyRequest(job, pageSize, pageToken))));
  }

  /** {@link #history(String, int, String)} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<HistoryPage> historyAsync(String job, int pageSize, String pageToken) {
    return async(deadline(leasesFuture).getHistory(historyRequest(job, pageSize, pageToken)), HistoryPage::fromProto);
  }

  /**
   * Every page of {@code job}'s history, newest first, each fetched when
   * the iteration reaches it ({@link #history(String, int, String)}, so a
   * failed call throws from the iterator's {@code hasNext}). Each
   * {@code iterator()} starts again from the first page.
   *
   * <pre>{@code
   * for (HistoryPage page : client.historyPages("reports", 100)) {
   *   for (Tenure t : page.tenures()) {
   *     System.out.println(t.token() + " " + t.holder() + " " + t.end());
   *   }
   * }
   * }</pre>
   */
  public Iterable<HistoryPage> historyPages(String job, int pageSize) {
    return () -> new java.util.Iterator<HistoryPage>() {
      private String next = "";
      private boolean done;

      @Override
      public boolean hasNext() {
        return !done;
      }

      @Override
      public HistoryPage next() {
        if (done) {
          throw new java.util.NoSuchElementException();
        }
        HistoryPage page = history(job, pageSize, next);
        next = page.nextPageToken();
        done = !page.hasNext();
        return page;
      }
    };
  }

  /** Every tenure of {@code job}'s history, newest first, all pages ({@link #historyPages}). */
  public List<Tenure> history(String job) {
    List<Tenure> out = new ArrayList<>();
    for (HistoryPage page : historyPages(job, PAGE_SIZE)) {
      out.addAll(page.tenures());
    }
    return out;
  }

  /**
   * {@link #history(String)} as a future: every page, fetched one after
   * the other; fails with the first failed page's exception.
   * {@code cancel(true)} stops it (the page on its way is cancelled).
   */
  public CompletableFuture<List<Tenure>> historyAsync(String job) {
    CompletableFuture<List<Tenure>> out = new CompletableFuture<>();
    historyFrom(job, "", new ArrayList<>(), out);
    return out;
  }

  private void historyFrom(String job, String pageToken, List<Tenure> acc, CompletableFuture<List<Tenure>> out) {
    CompletableFuture<HistoryPage> page = historyAsync(job, PAGE_SIZE, pageToken);
    out.whenComplete((r, t) -> page.cancel(true)); // a no-op once the page is in
    page.whenComplete((p, t) -> {
      if (t != null) {
        out.completeExceptionally(t);
      } else if (!out.isDone()) {
        acc.addAll(p.tenures());
        if (p.hasNext()) {
          historyFrom(job, p.nextPageToken(), acc, out);
        } else {
          out.complete(List.copyOf(acc));
        }
      }
    });
  }

  static dev.leasehold.v1.GetHistoryRequest historyRequest(String job, int pageSize, String pageToken) {
    if (pageSize < 0) {
      throw new IllegalArgumentException("pageSize must not be negative");
    }
    return dev.leasehold.v1.GetHistoryRequest.newBuilder().setJob(job).setPageSize(pageSize)
        .setPageToken(pageToken == null ? "" : pageToken).build();
  }

  /**
   * Observes {@code job}'s lease ({@code WatchLease}): {@code listener}
   * hears the current lease first ({@link LeaseEvent.Kind#CURRENT}), then
   * each change as it happens ({@link LeaseEvent.Kind#ACQUIRED},
   * {@link LeaseEvent.Kind#RELEASED}, {@link LeaseEvent.Kind#EXPIRED}, and
   * {@link LeaseEvent.Kind#VALUE_CHANGED} when the holder changes the
   * lease's {@link Lease#value()}); renewals that change no value send
   * nothing. Returns at once; close the {@link Observation}
   * to end it (the listener then hears nothing more, not even an error). A
   * broken stream (the server stopping, unreachable) ends it with the typed
   * exception: {@link LeaseListener#onError} and
   * {@link Observation#done()} get it. The listener runs on a gRPC thread,
   * one call at a time, in order: keep it short, or hand the work to an
   * executor of your own.
   *
   * <pre>{@code
   * try (Observation o = client.observe("reports", e ->
   *     System.out.println(e.kind() + " " + e.lease().holder() + " " + e.lease().token()))) {
   *   ...
   * }
   * }</pre>
   */
  public Observation observe(String job, LeaseListener listener) {
    return new Observation(LeasesGrpc.newStub(leases.getChannel()), job, listener);
  }

  /**
   * Holds the lease on {@code job} for the length of a try-with-resources
   * block: waits for it as long as it takes, renews it every ttl/3 in the
   * background, and releases it on {@link Lock#close()} (normal exit or
   * exception). The lock is its own holder, {@code lock@uuid}. A loss
   * inside the block (the lease lost, or no renewal succeeded by the
   * lock's own deadline) does not interrupt it: {@link Lock#isHeld()}
   * turns false, {@link Lock#lost()} completes, {@link Lock#onLost}
   * listeners run, {@link Lock#check()} throws, and writes with
   * {@link Lock#token()} are fenced once another holder has the lease.
   *
   * <pre>{@code
   * try (Lock lock = client.lock("reports", Duration.ofSeconds(10))) {
   *   client.checkedWrite("reports", lock.token(), "cursor", "42");
   * }
   * }</pre>
   *
   * @throws LeaseholdException a campaign the server refuses with an error
   *     retrying cannot fix ({@link InvalidArgumentException},
   *     {@link UnauthenticatedException}, {@link PermissionDeniedException})
   * @throws CancellationException the thread was interrupted while waiting
   *     (its interrupt flag stays set); nothing is left held
   */
  public Lock lock(String job, Duration ttl) {
    return lock(job, ttl, null, Lock.DEFAULT_NAME);
  }

  /**
   * {@link #lock(String, Duration)}, waiting at most {@code timeout}
   * ({@link Duration#ZERO}: one try; null: as long as it takes), with the
   * holder {@code name@uuid}.
   *
   * @throws LockTimeoutException the lease did not come within
   *     {@code timeout}; nothing is left held (a grant that came as it
   *     timed out is given back)
   */
  public Lock lock(String job, Duration ttl, Duration timeout, String name) {
    return lock(job, ttl, timeout, name, 0);
  }

  /** {@link #lock(String, Duration, Duration, String)} with the name {@code "lock"}. */
  public Lock lock(String job, Duration ttl, Duration timeout) {
    return lock(job, ttl, timeout, Lock.DEFAULT_NAME);
  }

  /**
   * {@link #lock(String, Duration)} as a future of the held {@link Lock}
   * (close it when done). {@code cancel(true)} stops waiting and gives back
   * a grant that came meanwhile; it fails with the exceptions the blocking
   * call throws.
   */
  public CompletableFuture<Lock> lockAsync(String job, Duration ttl) {
    return lockAsync(job, ttl, null, Lock.DEFAULT_NAME);
  }

  /** {@link #lock(String, Duration, Duration, String)} as a future (see {@link #lockAsync(String, Duration)}). */
  public CompletableFuture<Lock> lockAsync(String job, Duration ttl, Duration timeout, String name) {
    return lockAsync(job, ttl, timeout, name, 0);
  }

  /**
   * A counted lock ({@code consul lock -n N}): {@link #lock(String, Duration, Duration, String)}
   * for one of {@code slots} slots of a counted lease on {@code job} (2 to
   * {@link #MAX_SLOTS}; 0 or 1: the ordinary lock), so that up to
   * {@code slots} locks on {@code job} are held at once, each in its own
   * slot with its own token (see
   * {@link #acquire(String, String, Duration, Duration, int)}). The lock
   * renews and releases its slot's job, {@link Lock#leaseJob()}
   * ({@code "{job}#{k}"}): <b>write with {@link Lock#leaseJob()} and
   * {@link Lock#token()}</b>.
   *
   * <pre>{@code
   * // At most 2 nightly runs at once, each fenced in its own slot.
   * try (Lock lock = client.lock("nightly", Duration.ofSeconds(30), null, "nightly", 2)) {
   *   client.checkedWrite(lock.leaseJob(), lock.token(), "progress", "started");
   * }
   * }</pre>
   *
   * @throws InvalidArgumentException {@code field()} {@code "slots"}: a count
   *     over 100, or another count than the job's
   */
  public Lock lock(String job, Duration ttl, Duration timeout, String name, int slots) {
    CompletableFuture<Lock> f = lockAsync(job, ttl, timeout, name, slots);
    try {
      return f.get();
    } catch (InterruptedException e) {
      f.cancel(true);
      Thread.currentThread().interrupt();
      throw new CancellationException("interrupted while waiting for the lock on " + job);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RuntimeException r) {
        throw r;
      }
      throw new IllegalStateException(e.getCause());
    }
  }

  /** {@link #lock(String, Duration, Duration, String, int)} as a future (see {@link #lockAsync(String, Duration)}). */
  public CompletableFuture<Lock> lockAsync(String job, Duration ttl, Duration timeout, String name, int slots) {
    return Lock.acquire(this, job, ttl, timeout, name, slots);
  }

  /** The channel of this client. */
  Channel channel() {
    return leases.getChannel();
  }

  /** This client's timeout per call. */
  Duration timeout() {
    return timeout;
  }

  /**
   * Watches {@code job}: the current lease first, then every change of holder
   * or token, and of the holder's value ({@link LeaseEvent.Kind#VALUE_CHANGED}).
   * Close the watch to end it.
   */
  public Watch watch(String job) {
    return new Watch(leases, WatchLeaseRequest.newBuilder().setJob(job).build());
  }

  /**
   * Writes {@code value} under (job, key), fenced by {@code token}; returns the
   * key's new version. Throws {@link FencedException} when {@code token} is not
   * the job's live token.
   */
  public long checkedWrite(String job, long token, byte[] key, byte[] value) {
    return write(CheckedWriteRequest.newBuilder().setJob(job).setToken(token)
        .setKey(ByteString.copyFrom(key)).setValue(ByteString.copyFrom(value)).build());
  }

  /** {@link #checkedWrite(String, long, byte[], byte[])} with UTF-8 text. */
  public long checkedWrite(String job, long token, String key, String value) {
    return checkedWrite(job, token, key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
  }

  /**
   * {@link #checkedWrite(String, long, byte[], byte[])} with a grant's proof
   * ({@link Lease#proof()}) instead of its token
   * ({@code CheckedWriteRequest.proof}): the server verifies the proof with
   * its own keys, takes the token from it, and fences the write exactly as
   * with that token. So a service that is not the holder can forward the
   * holder's write (it needs {@code write} on the job). Throws
   * {@link FencedException} when the proof's token is not the job's live
   * one (the lease passed on), and {@link InvalidArgumentException} with
   * {@code field()} {@code "proof"} when the proof does not verify or is
   * for another job.
   */
  public long checkedWrite(String job, String proof, byte[] key, byte[] value) {
    return write(CheckedWriteRequest.newBuilder().setJob(job).setProof(Objects.requireNonNull(proof, "proof"))
        .setKey(ByteString.copyFrom(key)).setValue(ByteString.copyFrom(value)).build());
  }

  /** {@link #checkedWrite(String, String, byte[], byte[])} with UTF-8 text. */
  public long checkedWrite(String job, String proof, String key, String value) {
    return checkedWrite(job, proof, key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
  }

  /**
   * {@link #delete(String, long, byte[])} with a grant's proof instead of
   * its token (see {@link #checkedWrite(String, String, byte[], byte[])}).
   */
  public long delete(String job, String proof, byte[] key) {
    return write(CheckedWriteRequest.newBuilder().setJob(job).setProof(Objects.requireNonNull(proof, "proof"))
        .setKey(ByteString.copyFrom(key)).setDelete(true).build());
  }

  /** {@link #checkedWrite(String, String, byte[], byte[])} as a future of the key's new version. */
  public CompletableFuture<Long> checkedWriteAsync(String job, String proof, byte[] key, byte[] value) {
    return writeAsync(CheckedWriteRequest.newBuilder().setJob(job).setProof(Objects.requireNonNull(proof, "proof"))
        .setKey(ByteString.copyFrom(key)).setValue(ByteString.copyFrom(value)).build());
  }

  /** {@link #checkedWriteAsync(String, String, byte[], byte[])} with UTF-8 text. */
  public CompletableFuture<Long> checkedWriteAsync(String job, String proof, String key, String value) {
    return checkedWriteAsync(job, proof, key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
  }

  /** {@link #delete(String, String, byte[])} as a future of the new version. */
  public CompletableFuture<Long> deleteAsync(String job, String proof, byte[] key) {
    return writeAsync(CheckedWriteRequest.newBuilder().setJob(job).setProof(Objects.requireNonNull(proof, "proof"))
        .setKey(ByteString.copyFrom(key)).setDelete(true).build());
  }

  /** Deletes (job, key), fenced by {@code token}; returns the new version. */
  public long delete(String job, long token, byte[] key) {
    return write(CheckedWriteRequest.newBuilder().setJob(job).setToken(token)
        .setKey(ByteString.copyFrom(key)).setDelete(true).build());
  }

  /**
   * {@link #checkedWrite(String, long, byte[], byte[])} as a future of the
   * key's new version; fails with {@link FencedException} when {@code token}
   * is not the job's live token. {@code cancel(true)} cancels the call (the
   * write may or may not have been made).
   */
  public CompletableFuture<Long> checkedWriteAsync(String job, long token, byte[] key, byte[] value) {
    return writeAsync(CheckedWriteRequest.newBuilder().setJob(job).setToken(token)
        .setKey(ByteString.copyFrom(key)).setValue(ByteString.copyFrom(value)).build());
  }

  /** {@link #checkedWriteAsync(String, long, byte[], byte[])} with UTF-8 text. */
  public CompletableFuture<Long> checkedWriteAsync(String job, long token, String key, String value) {
    return checkedWriteAsync(job, token, key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
  }

  /** {@link #delete(String, long, byte[])} as a future of the new version. */
  public CompletableFuture<Long> deleteAsync(String job, long token, byte[] key) {
    return writeAsync(CheckedWriteRequest.newBuilder().setJob(job).setToken(token)
        .setKey(ByteString.copyFrom(key)).setDelete(true).build());
  }

  private CompletableFuture<Long> writeAsync(CheckedWriteRequest req) {
    return async(deadline(storeFuture).checkedWrite(req), CheckedWriteResponse::getVersion);
  }

  private long write(CheckedWriteRequest req) {
    return call(store, timeout, s -> s.checkedWrite(req)).getVersion();
  }

  /**
   * Opens a {@link WriteStream}: fenced writes, many per message, over one
   * long-lived stream; far cheaper than {@link #checkedWrite} per write. Does
   * not wait for the server: a server that cannot be reached shows as an
   * {@link UnavailableException} from the first {@link WriteStream#write}.
   * The stream has no deadline; each {@code write} and the {@code close} wait
   * up to this client's timeout. Close it when done.
   */
  public WriteStream writeStream() {
    return new WriteStream(storeAsync, timeout);
  }

  /** Reads (job, key); linearizable. */
  public Value read(String job, byte[] key) {
    ReadResponse r = call(store, timeout, s -> s.read(ReadRequest.newBuilder().setJob(job).setKey(ByteString.copyFrom(key)).build()));
    return new Value(r.getFound(), r.getValue().toByteArray(), r.getToken(), r.getVersion());
  }

  /** {@link #read(String, byte[])} as a future; {@code cancel(true)} cancels the call. */
  public CompletableFuture<Value> readAsync(String job, byte[] key) {
    return async(deadline(storeFuture).read(ReadRequest.newBuilder().setJob(job).setKey(ByteString.copyFrom(key)).build()),
        r -> new Value(r.getFound(), r.getValue().toByteArray(), r.getToken(), r.getVersion()));
  }

  /** {@link #readAsync(String, byte[])} with a UTF-8 key. */
  public CompletableFuture<Value> readAsync(String job, String key) {
    return readAsync(job, key.getBytes(StandardCharsets.UTF_8));
  }

  /** {@link #read(String, byte[])} with a UTF-8 key. */
  public Value read(String job, String key) {
    return read(job, key.getBytes(StandardCharsets.UTF_8));
  }

  /** Every live key of {@code job} starting with {@code prefix}, all pages. */
  public List<KeyInfo> listKeys(String job, byte[] prefix) {
    List<KeyInfo> out = new ArrayList<>();
    ByteString page = ByteString.EMPTY;
    while (true) {
      ListKeysRequest req = ListKeysRequest.newBuilder().setJob(job).setPrefix(ByteString.copyFrom(prefix))
          .setPageSize(PAGE_SIZE).setPageToken(page).build();
      ListKeysResponse r = call(store, timeout, s -> s.listKeys(req));
      r.getKeysList().forEach(k -> out.add(new KeyInfo(k.getKey().toByteArray(), k.getToken(), k.getVersion(), k.getSize())));
      if (r.getNextPageToken().isEmpty()) {
        return out;
      }
      page = r.getNextPageToken();
    }
  }
}
