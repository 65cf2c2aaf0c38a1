package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The CompletableFuture API against the real server: each async call
 * answers as its blocking twin does, fails with the same typed exception,
 * and a future completed first by the caller (cancel, orTimeout) cancels
 * its call; a waiting acquire so ended gives its place and any grant back.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AsyncTest {
  private static final Duration TTL = Duration.ofSeconds(30);

  /** The cause of a failed future's get(), checked to be of {@code type}. */
  static <T extends Throwable> T failure(Class<T> type, CompletableFuture<?> f) {
    ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(10, TimeUnit.SECONDS));
    return assertInstanceOf(type, e.getCause());
  }

  @Test
  void everyCallHasAFutureThatAnswersAsTheBlockingOne() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "async";
      Acquired a = client.acquireAsync(job, "a", TTL).get(10, TimeUnit.SECONDS);
      assertTrue(a.acquired());
      long token = a.lease().token();
      assertEquals(1, token);
      Lease renewed = client.renewAsync(job, "a", token, TTL).get(10, TimeUnit.SECONDS);
      assertEquals(token, renewed.token());
      assertEquals("a", renewed.holder());
      Lease got = client.getLeaseAsync(job).get(10, TimeUnit.SECONDS);
      assertEquals("a", got.holder());
      assertEquals(token, got.token());

      assertEquals(1, client.checkedWriteAsync(job, token, "k", "v1").get(10, TimeUnit.SECONDS));
      assertEquals(2, client.checkedWriteAsync(job, token, "k".getBytes(StandardCharsets.UTF_8),
          "v2".getBytes(StandardCharsets.UTF_8)).get(10, TimeUnit.SECONDS));
      Value v = client.readAsync(job, "k").get(10, TimeUnit.SECONDS);
      assertTrue(v.found());
      assertEquals("v2", v.valueUtf8());
      assertEquals(token, v.token());
      assertEquals(2, v.version());
      assertEquals(3, client.deleteAsync(job, token, "k".getBytes(StandardCharsets.UTF_8)).get(10, TimeUnit.SECONDS));
      assertFalse(client.readAsync(job, "k".getBytes(StandardCharsets.UTF_8)).get(10, TimeUnit.SECONDS).found());

      // Dependent stages compose as usual.
      assertEquals("a", client.getLeaseAsync(job).thenApply(Lease::holder).get(10, TimeUnit.SECONDS));

      assertNull(client.releaseAsync(job, "a", token).get(10, TimeUnit.SECONDS));
      assertFalse(client.getLeaseAsync(job).get(10, TimeUnit.SECONDS).isHeld());
      assertTrue(client.deleteJobAsync(job).get(10, TimeUnit.SECONDS));
      assertFalse(client.deleteJobAsync(job).get(10, TimeUnit.SECONDS));
    }
  }

  @Test
  void aFailedFutureHasTheTypedExceptionOfTheBlockingCall() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "async-errors";
      long first = client.acquire(job, "a", Duration.ofMillis(300)).lease().token();
      ServerProcess.waitUntil(ServerProcess.PATIENCE, "the first lease to run out", () -> !client.getLease(job).isHeld());
      long second = client.acquire(job, "b", TTL).lease().token();
      assertEquals(first + 1, second);

      LeaseLostException lost = failure(LeaseLostException.class, client.renewAsync(job, "a", first, TTL));
      assertEquals(second, lost.currentToken().getAsLong());
      failure(LeaseLostException.class, client.releaseAsync(job, "a", first));
      FencedException fenced = failure(FencedException.class, client.checkedWriteAsync(job, first, "k", "stale"));
      assertEquals(second, fenced.currentToken().getAsLong());
      failure(JobInUseException.class, client.deleteJobAsync(job));
      InvalidArgumentException bad = failure(InvalidArgumentException.class, client.acquireAsync(job, "c", Duration.ZERO));
      assertFalse(bad.isRetryable());
      failure(InvalidArgumentException.class, client.readAsync("", "k"));
      // join() wraps it in a CompletionException, with the same cause.
      CompletionException ce = assertThrows(CompletionException.class,
          () -> client.checkedWriteAsync(job, first, "k", "stale").join());
      assertInstanceOf(FencedException.class, ce.getCause());
    }
    // No server: UnavailableException, retryable.
    try (Client client = Client.connect("127.0.0.1:1").withTimeout(Duration.ofSeconds(2))) {
      UnavailableException u = failure(UnavailableException.class, client.getLeaseAsync("j"));
      assertTrue(u.isRetryable());
    }
  }

  /** Records how each call through it ended. */
  static final class Closes implements ClientInterceptor {
    final BlockingQueue<Status> statuses = new LinkedBlockingQueue<>();

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(listener) {
            @Override
            public void onClose(Status status, Metadata trailers) {
              statuses.add(status);
              super.onClose(status, trailers);
            }
          }, headers);
        }
      };
    }
  }

  @Test
  void cancellingAFutureCancelsItsCallAndTheClientsTimeoutEndsIt() throws Exception {
    try (ServerProcess server = new ServerProcess()) {
      ManagedChannel channel = ManagedChannelBuilder.forTarget(server.target).usePlaintext().build();
      Closes closes = new Closes();
      try {
        // A long timeout per call: on a loaded machine the loop below may take
        // seconds, and a call that reached its deadline first could no longer
        // be cancelled (the default 10 s raced with it).
        Client client = Client.of(ClientInterceptors.intercept(channel, closes)).withTimeout(Duration.ofMinutes(5));
        assertTrue(client.acquire("stopped", "a", TTL).acquired()); // connected
        assertEquals(Status.Code.OK, closes.statuses.poll(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS).getCode());
        server.signal("STOP"); // calls now hang until cancelled or past their deadline
        try {
          for (CompletableFuture<?> f : java.util.List.<CompletableFuture<?>>of(
              client.readAsync("stopped", "k"),
              client.getLeaseAsync("stopped"),
              client.checkedWriteAsync("stopped", 1, "k", "v"),
              client.renewAsync("stopped", "a", 1, TTL))) {
            // The server is stopped: nothing can complete the future but the
            // cancel (its deadline is minutes away).
            assertFalse(f.isDone(), "a call to a stopped server is still on its way");
            assertTrue(f.cancel(true));
            assertThrows(CancellationException.class, f::get);
            Status s = closes.statuses.poll(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS);
            assertEquals(Status.Code.CANCELLED, s == null ? null : s.getCode(), "the call was cancelled");
          }
          // orTimeout completes the future first: that cancels the call too.
          CompletableFuture<Value> late = client.readAsync("stopped", "k").orTimeout(100, TimeUnit.MILLISECONDS);
          ExecutionException e = assertThrows(ExecutionException.class,
              () -> late.get(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS));
          assertInstanceOf(TimeoutException.class, e.getCause());
          assertEquals(Status.Code.CANCELLED, closes.statuses.poll(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS).getCode());
          // The client's own timeout (withTimeout) ends a call with a retryable error.
          UnavailableException u = failure(UnavailableException.class,
              client.withTimeout(Duration.ofMillis(200)).getLeaseAsync("stopped"));
          assertEquals(Status.Code.DEADLINE_EXCEEDED, u.code());
        } finally {
          server.signal("CONT");
        }
      } finally {
        channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      }
    }
  }

  @Test
  void aWaitingAcquireEndedByOrTimeoutLeavesTheQueueAndTakesNoGrant() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client a = Client.connect(server.target);
        Client b = Client.connect(server.target)) {
      String job = "async-wait";
      long held = a.acquire(job, "a", TTL).lease().token();
      String getLease = "method=\"GetLease\"";
      double looked = server.metric("leasehold_rpc_responses_total", getLease);
      // orTimeout is armed only once the test has seen the call in line: a
      // timer started with the call could end it before a loaded machine
      // let the test look (the call waits up to 5 min meanwhile).
      CompletableFuture<Acquired> waiting = b.withTimeout(Duration.ofMinutes(5))
          .acquireAsync(job, "b", TTL, Duration.ofMinutes(5));
      server.waitWaiters(1);
      assertTrue(waiting == waiting.orTimeout(100, TimeUnit.MILLISECONDS), "orTimeout arms the future itself");
      ExecutionException e = assertThrows(ExecutionException.class,
          () -> waiting.get(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS));
      assertInstanceOf(TimeoutException.class, e.getCause());
      ServerProcess.waitUntil(ServerProcess.PATIENCE, "B's Acquire to leave the queue", () -> {
        try {
          return server.metric("leasehold_waiting_acquires") == 0;
        } catch (Exception x) {
          throw new RuntimeException(x);
        }
      });
      // The give-back of B's cancelled call reads the lease (100 ms after the
      // cancel), while A still holds it: it has nothing to give back.
      server.waitMetricAbove("leasehold_rpc_responses_total", getLease, looked, "the give-back's read of the lease");
      a.release(job, "a", held);
      assertFalse(a.getLease(job).isHeld(), "nobody holds it: B's call was cancelled, not granted");

      // A waiting acquire that is granted completes with the grant.
      long again = a.acquire(job, "a", TTL).lease().token();
      CompletableFuture<Acquired> next = b.acquireAsync(job, "b", TTL, Duration.ofMinutes(5));
      server.waitWaiters(1);
      a.releaseAsync(job, "a", again).get(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS);
      Acquired got = next.get(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS);
      assertTrue(got.acquired());
      assertEquals("b", got.lease().holder());
      assertEquals(again + 1, got.lease().token());
    }
  }
}
