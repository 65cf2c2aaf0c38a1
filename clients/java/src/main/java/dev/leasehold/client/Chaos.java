package dev.leasehold.client;

import com.google.common.util.concurrent.ListenableFuture;
import dev.leasehold.v1.ChaosClearRequest;
import dev.leasehold.v1.ChaosDelayRequest;
import dev.leasehold.v1.ChaosFenceRequest;
import dev.leasehold.v1.ChaosGrpc;
import dev.leasehold.v1.ChaosJobRequest;
import dev.leasehold.v1.ChaosPauseRequest;
import dev.leasehold.v1.ChaosResponse;
import io.grpc.Channel;
import io.grpc.Status;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;

/**
 * A test helper over the chaos API ({@code chaos.proto}) of a server
 * started with {@code --enable-chaos} (test and staging servers only): make
 * a worker lose its lease, stall, or be fenced, on purpose, and check that
 * it steps down. From {@link Client#chaos()}; over the client's channel,
 * with its timeout. Thread-safe.
 *
 * <pre>{@code
 * try (Elector elector = Elector.builder(client, "sync", "worker").ttl(Duration.ofSeconds(3))
 *     .onLost(token -> worker.stop()).start()) {
 *   long token = elector.awaitElected(Duration.ofSeconds(10)).orElseThrow();
 *   client.chaos().expire("sync"); // the lease is gone, now: onLost runs at the next renewal
 *   // ...the worker stopped, and a write with the old token is fenced:
 *   assertThrows(FencedException.class, () -> client.checkedWrite("sync", token, "k", "late"));
 * } finally {
 *   client.chaos().clear();
 * }
 * }</pre>
 *
 * <p>Each call returns a {@link ChaosOutcome}: the job's lease after the
 * action and what is in force on it. Errors are the client's typed
 * exceptions ({@link NoSuccessorException}, {@link InvalidArgumentException}
 * for a duration or count out of range, {@link PermissionDeniedException}
 * on a listener that is not loopback without a policy's {@code chaos}
 * grant...); a server without {@code --enable-chaos} throws
 * {@link ChaosDisabledException}. Each {@code ...Async} twin returns a
 * {@link CompletableFuture} that fails with the same exception, as the
 * client's other futures do.
 */
public final class Chaos {
  private final Client client;
  private final ChaosGrpc.ChaosBlockingStub stub;
  private final ChaosGrpc.ChaosFutureStub future;

  Chaos(Client client, Channel channel) {
    this.client = client;
    this.stub = ChaosGrpc.newBlockingStub(channel);
    this.future = ChaosGrpc.newFutureStub(channel);
  }

  /**
   * Ends {@code job}'s live grant now, as an expiry would: the holder's next
   * renewal gets {@link LeaseLostException}, its writes are fenced, and the
   * first waiter is granted the next token at once. The job's history
   * records the end as {@code END_CHAOS}. When nobody holds the job nothing
   * changes, and the outcome's lease says so.
   */
  public ChaosOutcome expire(String job) {
    ChaosJobRequest req = jobRequest(job);
    return call(s -> s.expire(req));
  }

  /** {@link #expire(String)} as a future. */
  public CompletableFuture<ChaosOutcome> expireAsync(String job) {
    return async(s -> s.expire(jobRequest(job)));
  }

  /**
   * Pauses {@code job}'s holder for {@code duration} (above 0, at most 1 h):
   * its renewals are refused with {@link LeaseLostException} as if they came
   * too late, so its grant runs out at its deadline and passes to the first
   * waiter, and its Acquires of the job are held until the pause ends.
   */
  public ChaosOutcome pause(String job, Duration duration) {
    ChaosPauseRequest req = ChaosPauseRequest.newBuilder().setJob(Objects.requireNonNull(job, "job"))
        .setDuration(Durations.toProto(Objects.requireNonNull(duration, "duration"))).build();
    return call(s -> s.pause(req));
  }

  /** {@link #pause(String, Duration)} as a future. */
  public CompletableFuture<ChaosOutcome> pauseAsync(String job, Duration duration) {
    ChaosPauseRequest req = ChaosPauseRequest.newBuilder().setJob(Objects.requireNonNull(job, "job"))
        .setDuration(Durations.toProto(Objects.requireNonNull(duration, "duration"))).build();
    return async(s -> s.pause(req));
  }

  /**
   * Delays every answer about {@code job} (Acquire, Renew, Release,
   * GetLease, the fenced store's calls...) by {@code by} (above 0, at most
   * 60 s), until cleared ({@link #clear(String)}).
   */
  public ChaosOutcome delay(String job, Duration by) {
    ChaosDelayRequest req = ChaosDelayRequest.newBuilder().setJob(Objects.requireNonNull(job, "job"))
        .setBy(Durations.toProto(Objects.requireNonNull(by, "by"))).build();
    return call(s -> s.delay(req));
  }

  /** {@link #delay(String, Duration)} as a future. */
  public CompletableFuture<ChaosOutcome> delayAsync(String job, Duration by) {
    ChaosDelayRequest req = ChaosDelayRequest.newBuilder().setJob(Objects.requireNonNull(job, "job"))
        .setBy(Durations.toProto(Objects.requireNonNull(by, "by"))).build();
    return async(s -> s.delay(req));
  }

  /**
   * Refuses {@code job}'s next {@code writes} fenced writes (1 to 1,000,000;
   * {@code checkedWrite}, {@code delete} and each write of a
   * {@link WriteStream}) as FENCED, whatever their token.
   */
  public ChaosOutcome fence(String job, int writes) {
    ChaosFenceRequest req = ChaosFenceRequest.newBuilder().setJob(Objects.requireNonNull(job, "job")).setWrites(writes).build();
    return call(s -> s.fence(req));
  }

  /** {@link #fence(String, int)} as a future. */
  public CompletableFuture<ChaosOutcome> fenceAsync(String job, int writes) {
    ChaosFenceRequest req = ChaosFenceRequest.newBuilder().setJob(Objects.requireNonNull(job, "job")).setWrites(writes).build();
    return async(s -> s.fence(req));
  }

  /**
   * Hands {@code job}'s lease to its first waiter now, as a forced failover
   * (a transfer on the holder's behalf: the waiter is granted the next
   * token, and the history records {@code END_TRANSFERRED}). The outcome's
   * lease is the successor's.
   *
   * @throws NoSuccessorException when nobody waits; nothing changed
   */
  public ChaosOutcome transfer(String job) {
    ChaosJobRequest req = jobRequest(job);
    return call(s -> s.transfer(req));
  }

  /** {@link #transfer(String)} as a future. */
  public CompletableFuture<ChaosOutcome> transferAsync(String job) {
    return async(s -> s.transfer(jobRequest(job)));
  }

  /**
   * Clears the chaos in force on {@code job}, or on every job when
   * {@code job} is null or empty ({@link #clear()}).
   */
  public ChaosOutcome clear(String job) {
    ChaosClearRequest req = ChaosClearRequest.newBuilder().setJob(job == null ? "" : job).build();
    return call(s -> s.clear(req));
  }

  /** Clears the chaos in force on every job; the outcome has no lease. */
  public ChaosOutcome clear() {
    return clear(null);
  }

  /** {@link #clear(String)} as a future. */
  public CompletableFuture<ChaosOutcome> clearAsync(String job) {
    return async(s -> s.clear(ChaosClearRequest.newBuilder().setJob(job == null ? "" : job).build()));
  }

  /** {@link #clear()} as a future. */
  public CompletableFuture<ChaosOutcome> clearAsync() {
    return clearAsync(null);
  }

  private static ChaosJobRequest jobRequest(String job) {
    return ChaosJobRequest.newBuilder().setJob(Objects.requireNonNull(job, "job")).build();
  }

  private ChaosOutcome call(Function<ChaosGrpc.ChaosBlockingStub, ChaosResponse> f) {
    try {
      return ChaosOutcome.fromProto(client.call(stub, f));
    } catch (LeaseholdException e) {
      throw disabled(e);
    }
  }

  private CompletableFuture<ChaosOutcome> async(Function<ChaosGrpc.ChaosFutureStub, ListenableFuture<ChaosResponse>> f) {
    return client.asyncMapped(f.apply(client.deadline(future)), ChaosOutcome::fromProto, Chaos::disabled);
  }

  /**
   * {@code e}, or a {@link ChaosDisabledException} when it says that the
   * server does not serve the chaos API: UNIMPLEMENTED (the service is not
   * there without {@code --enable-chaos}), or the reason CHAOS_DISABLED.
   */
  static LeaseholdException disabled(LeaseholdException e) {
    if (e.code() == Status.Code.UNIMPLEMENTED || "CHAOS_DISABLED".equals(e.reason())) {
      return new ChaosDisabledException(
          "the server does not serve the chaos API: start it with --enable-chaos (test and staging servers only) ["
              + e.getMessage() + "]",
          e.code(), e.reason(), e.metadata(), e.getCause());
    }
    return e;
  }
}
