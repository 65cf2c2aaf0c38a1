package dev.leasehold.client;

import com.google.common.util.concurrent.FutureCallback;
import com.google.common.util.concurrent.Futures;
import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.MoreExecutors;
import com.google.protobuf.ByteString;
import dev.leasehold.v1.AcquireRequest;
import dev.leasehold.v1.AcquireResponse;
import dev.leasehold.v1.CheckedWriteRequest;
import dev.leasehold.v1.DeleteJobRequest;
import dev.leasehold.v1.FencedStoreGrpc;
import dev.leasehold.v1.GetLeaseRequest;
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
import dev.leasehold.v1.WatchLeaseRequest;
import io.grpc.Channel;
import io.grpc.Grpc;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.StatusRuntimeException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * A blocking leasehold client over one gRPC channel. Thread-safe; share one
 * per process. Tokens and versions are unsigned 64-bit values held in a
 * {@code long}. Every method throws a typed {@link LeaseholdException}.
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
  private final Duration timeout;

  private Client(Channel channel, ManagedChannel owned, Duration timeout) {
    this.owned = owned;
    this.leases = LeasesGrpc.newBlockingStub(channel);
    this.leasesFuture = LeasesGrpc.newFutureStub(channel);
    this.managed = channel instanceof ManagedChannel m ? m : null;
    this.store = FencedStoreGrpc.newBlockingStub(channel);
    this.storeAsync = FencedStoreGrpc.newStub(channel);
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
    return new Client(ch, ch, DEFAULT_TIMEOUT);
  }

  /** A client over an existing channel (TLS, interceptors...), which the caller closes. */
  public static Client of(Channel channel) {
    return new Client(channel, null, DEFAULT_TIMEOUT);
  }

  /** The same client with another default timeout per call. */
  public Client withTimeout(Duration timeout) {
    return new Client(leases.getChannel(), null, timeout);
  }

  /**
   * A holder identity for this process: {@code name@uuid}, with one UUID made
   * at process start. A restarted process is a new holder. For one-off
   * calls: an {@link Elector} makes a UUID of its own.
   */
  public static String processHolder(String name) {
    return name + "@" + PROCESS_UUID;
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

  static AcquireRequest acquireRequest(String job, String holder, Duration ttl, Duration wait) {
    return AcquireRequest.newBuilder().setJob(job).setHolder(holder)
        .setTtl(Durations.toProto(ttl)).setWait(Durations.toProto(wait)).build();
  }

  static RenewRequest renewRequest(String job, String holder, long token, Duration ttl) {
    return RenewRequest.newBuilder().setJob(job).setHolder(holder).setToken(token).setTtl(Durations.toProto(ttl)).build();
  }

  /**
   * Asks for the lease on {@code job}; waits up to {@code wait} for it to
   * free up.
   *
   * <p>A waiting Acquire ({@code wait > 0}) that is cancelled (the thread
   * interrupted: {@link CancellationException}) or times out gives back a
   * grant it may have been given meanwhile: the server releases a grant
   * whose reply it could not deliver, and for a reply that was on its way,
   * 100 ms later the client reads the lease and releases it if its holder
   * is {@code holder} (holders are unique per elector, so that is never
   * someone else's).
   */
  public Acquired acquire(String job, String holder, Duration ttl, Duration wait) {
    AcquireResponse r;
    try {
      r = call(leases, wait.plus(timeout), s -> s.acquire(acquireRequest(job, holder, ttl, wait)));
    } catch (CancellationException | UnavailableException e) {
      if (!wait.isZero() && (e instanceof CancellationException || isTimeout(e))) {
        giveBackLater(job, holder);
      }
      throw e;
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
   * {@link CancellationException}, and a waiting Acquire so cancelled gives
   * back a grant it may have been given meanwhile. A failed call completes
   * it exceptionally with the {@link LeaseholdException} ({@code get}'s
   * {@link java.util.concurrent.ExecutionException} has it as the cause).
   */
  public CompletableFuture<Acquired> acquireAsync(String job, String holder, Duration ttl, Duration wait) {
    ListenableFuture<AcquireResponse> call = acquireCall(job, holder, ttl, wait, wait.plus(timeout));
    CompletableFuture<Acquired> out = new CompletableFuture<>() {
      @Override
      public boolean cancel(boolean mayInterruptIfRunning) {
        boolean cancelled = super.cancel(mayInterruptIfRunning);
        call.cancel(true);
        return cancelled;
      }
    };
    Futures.addCallback(call, new FutureCallback<AcquireResponse>() {
      @Override
      public void onSuccess(AcquireResponse r) {
        out.complete(new Acquired(r.getAcquired(), Lease.fromProto(r.getLease())));
      }

      @Override
      public void onFailure(Throwable t) {
        out.completeExceptionally(t instanceof CancellationException ? t : Errors.from(t));
      }
    }, MoreExecutors.directExecutor());
    return out;
  }

  private static boolean isTimeout(RuntimeException e) {
    return e instanceof UnavailableException u
        && (u.code() == io.grpc.Status.Code.DEADLINE_EXCEEDED || u.code() == io.grpc.Status.Code.CANCELLED);
  }

  /** A cancelled waiting Acquire's clean-up: release the lease if it is {@code holder}'s. Best effort. */
  private void giveBackLater(String job, String holder) {
    CLEANUP.schedule(() -> {
      try {
        Lease l = getLease(job);
        if (holder.equals(l.holder())) {
          release(job, holder, l.token());
        }
      } catch (RuntimeException e) {
        // best effort: the lease runs out on its own
      }
    }, GIVE_BACK_AFTER_MS, TimeUnit.MILLISECONDS);
  }

  /**
   * Acquire as a cancellable future of the raw response (for the Elector).
   * A waiting one that is cancelled gives back a grant it may have been
   * given meanwhile.
   */
  ListenableFuture<AcquireResponse> acquireCall(String job, String holder, Duration ttl, Duration wait, Duration timeout) {
    ListenableFuture<AcquireResponse> f = leasesFuture.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS)
        .acquire(acquireRequest(job, holder, ttl, wait));
    if (!wait.isZero()) {
      f.addListener(() -> {
        if (f.isCancelled()) {
          giveBackLater(job, holder);
        }
      }, MoreExecutors.directExecutor());
    }
    return f;
  }

  /** Renew as a cancellable future of the raw response (for the Elector). */
  ListenableFuture<RenewResponse> renewCall(String job, String holder, long token, Duration ttl, Duration timeout) {
    return leasesFuture.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS)
        .renew(renewRequest(job, holder, token, ttl));
  }

  /** Renews our live lease; throws {@link LeaseLostException} when it is not ours. */
  public Lease renew(String job, String holder, long token, Duration ttl) {
    return renew(job, holder, token, ttl, timeout);
  }

  Lease renew(String job, String holder, long token, Duration ttl, Duration timeout) {
    return Lease.fromProto(call(leases, timeout, s -> s.renew(renewRequest(job, holder, token, ttl))).getLease());
  }

  /** Releases our lease; the first waiter is granted at once. */
  public void release(String job, String holder, long token) {
    release(job, holder, token, timeout);
  }

  void release(String job, String holder, long token, Duration timeout) {
    call(leases, timeout, s -> s.release(ReleaseRequest.newBuilder().setJob(job).setHolder(holder).setToken(token).build()));
  }

  /** The lease of {@code job} (token 0 and no holder if never granted). */
  public Lease getLease(String job) {
    return getLease(job, timeout);
  }

  Lease getLease(String job, Duration timeout) {
    return Lease.fromProto(call(leases, timeout, s -> s.getLease(GetLeaseRequest.newBuilder().setJob(job).build())));
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
   * Watches {@code job}: the current lease first, then every change of holder
   * or token. Close the watch to end it.
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

  /** Deletes (job, key), fenced by {@code token}; returns the new version. */
  public long delete(String job, long token, byte[] key) {
    return write(CheckedWriteRequest.newBuilder().setJob(job).setToken(token)
        .setKey(ByteString.copyFrom(key)).setDelete(true).build());
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
