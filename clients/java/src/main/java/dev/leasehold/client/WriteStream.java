package dev.leasehold.client;

import dev.leasehold.v1.CheckedWriteRequest;
import dev.leasehold.v1.FencedStoreGrpc;
import dev.leasehold.v1.WriteResult;
import dev.leasehold.v1.WriteStreamRequest;
import dev.leasehold.v1.WriteStreamResponse;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Fenced writes over one long-lived {@code FencedStore.WriteStream}, opened by
 * {@link Client#writeStream()}: a message per batch costs far less than a unary
 * call, and the writes of one message share one sync on the server.
 *
 * <pre>{@code
 * long token = 7; // from our grant of "reconcile"
 * try (WriteStream stream = client.writeStream()) {
 *   List<WriteOutcome> out = stream.write(List.of(
 *       StreamWrite.put("reconcile", token, "cursor", "42"),
 *       StreamWrite.delete("reconcile", token, "pending")));
 *   if (out.stream().anyMatch(o -> o.kind() == WriteOutcome.Kind.FENCED)) {
 *     // not the leader any more: stop
 *   }
 * }
 * }</pre>
 *
 * <p>Thread-safe: several threads may call {@link #write} on one stream. Each
 * call's messages are sent back to back (pipelined) and answered in the order
 * they were sent; a call returns once its own answers are in.
 *
 * <p>A fenced or malformed write is an outcome, not an exception, and does
 * not stop the others. A {@link LeaseholdException} from {@link #write} means
 * the stream is broken (the server ended it with a status, it could not be
 * reached, it answered out of order, or no answer came in time): that call,
 * every call still waiting, and every later call throw it. <b>The writes it did
 * not answer may or may not have been made</b>: open a new stream and read
 * them back. (An interrupted {@link #write} is the one exception that leaves
 * the stream working.)
 *
 * <p>Messages are handed to grpc-java as they are made, without waiting for
 * HTTP/2 flow control: what is buffered is bounded by the lists of the calls
 * in progress.
 */
public final class WriteStream implements AutoCloseable {
  /** The most writes the client puts in one message (the server takes up to 1000). */
  static final int MAX_PER_MESSAGE = 1000;
  /**
   * The most encoded bytes the client puts in one message, unless a single
   * write is larger: well under the server's default limit of about 66 KiB.
   */
  static final int MAX_MESSAGE_BYTES = 48 * 1024;

  /** One message sent and not yet answered. */
  private static final class Pending {
    final long id;
    final int count;
    final CompletableFuture<List<WriteOutcome>> results = new CompletableFuture<>();

    Pending(long id, int count) {
      this.id = id;
      this.count = count;
    }
  }

  private final Duration timeout;
  /** Guards everything below, and every call on {@link #requests} but cancel (which is thread-safe). */
  private final Object lock = new Object();
  /** The messages sent and not answered, oldest first: the server answers in this order. */
  private final ArrayDeque<Pending> pending = new ArrayDeque<>();
  /** Completed once the call has ended, either way. */
  private final CompletableFuture<Void> ended = new CompletableFuture<>();
  private volatile ClientCallStreamObserver<WriteStreamRequest> requests;
  private long nextId;
  /** Why the stream is broken; null while it works. */
  private LeaseholdException failure;
  /** Whether {@link #close()} was called. */
  private boolean closed;
  /** Whether we cancelled the call (no half-close after that). */
  private boolean cancelled;

  WriteStream(FencedStoreGrpc.FencedStoreStub stub, Duration timeout) {
    this.timeout = timeout;
    stub.writeStream(new Responses()); // sets requests before it returns
  }

  /**
   * Makes every write in {@code writes}, in order; returns one outcome per
   * write, in the same order, once the written ones are durable. Within the
   * list and across calls, a later write sees the earlier ones (two writes to
   * one key give versions n and n+1).
   *
   * <p>Large lists are split across messages of at most 1000 writes and
   * about 48 KiB (a larger single write goes alone), sent back to back. An
   * empty list is sent as one empty message. Waits up to the client's timeout
   * ({@link Client#withTimeout}) for the answers; past that the stream is
   * cancelled and broken.
   *
   * @throws LeaseholdException the stream is broken, with the mapping of
   *     unary calls: {@link DiskFullException}, {@link StorageException},
   *     {@link ShuttingDownException}, {@link InvalidArgumentException} (field
   *     "writes"), {@link UnavailableException} (also when no answer came in
   *     time)... The writes the stream did not answer may or may not have
   *     been made: read them back. This call, the calls still waiting and
   *     every later call throw it. An {@link UnavailableException} (code
   *     CANCELLED) is also thrown when the thread is interrupted while
   *     waiting: the interrupt flag is kept, the stream goes on, and the
   *     writes may or may not be made.
   * @throws IllegalStateException after {@link #close()}
   */
  public List<WriteOutcome> write(List<StreamWrite> writes) {
    List<CheckedWriteRequest> all = new ArrayList<>(writes.size());
    for (StreamWrite w : writes) {
      all.add(w.toProto());
    }
    List<List<CheckedWriteRequest>> messages = split(all);
    List<Pending> mine = new ArrayList<>(messages.size());
    List<Pending> failed = null;
    synchronized (lock) {
      if (closed) {
        throw new IllegalStateException("write stream closed");
      }
      if (failure != null) {
        throw failure;
      }
      try {
        for (List<CheckedWriteRequest> m : messages) {
          Pending p = new Pending(++nextId, m.size());
          pending.add(p);
          mine.add(p);
          requests.onNext(WriteStreamRequest.newBuilder().setId(p.id).addAllWrites(m).build());
        }
      } catch (RuntimeException e) {
        failed = failLocked(new UnavailableException("write stream: could not send: " + e,
            Status.Code.UNKNOWN, null, Map.of(), e));
      }
    }
    if (failed != null) {
      abort(failed);
      throw failure();
    }
    long deadline = System.nanoTime() + timeout.toNanos();
    List<WriteOutcome> out = new ArrayList<>(writes.size());
    for (Pending p : mine) {
      try {
        out.addAll(p.results.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS));
      } catch (ExecutionException e) {
        throw Errors.from(e.getCause());
      } catch (TimeoutException e) {
        List<Pending> dropped;
        synchronized (lock) {
          dropped = failLocked(new UnavailableException(
              "write stream: no answer within " + timeout + "; the stream is cancelled",
              Status.Code.DEADLINE_EXCEEDED, null, Map.of(), null));
        }
        abort(dropped);
        throw failure();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        // The stream goes on: the answers still come, in order.
        throw new UnavailableException("interrupted while waiting for the write stream; the writes may or may not be made",
            Status.Code.CANCELLED, null, Map.of(), e);
      }
    }
    return out;
  }

  /**
   * Half-closes the sending side and waits, up to the client's timeout, for
   * the server to answer what was sent and end the stream (writes of other
   * threads still waiting get their answers); past that, cancels it. Later
   * {@link #write} calls throw {@link IllegalStateException}. Never throws a
   * {@link LeaseholdException}: a broken stream was reported by
   * {@link #write}. Idempotent.
   */
  @Override
  public void close() {
    synchronized (lock) {
      if (!closed) {
        closed = true;
        if (!cancelled && !ended.isDone()) {
          try {
            requests.onCompleted();
          } catch (RuntimeException e) {
            // the call is over already
          }
        }
      }
    }
    try {
      ended.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
    } catch (TimeoutException | ExecutionException e) {
      cancel("write stream closed");
    } catch (InterruptedException e) {
      cancel("write stream closed");
      Thread.currentThread().interrupt();
    }
  }

  /** Cancels the call, failing whatever is still waiting. */
  private void cancel(String why) {
    List<Pending> dropped;
    synchronized (lock) {
      dropped = failLocked(new UnavailableException(why, Status.Code.CANCELLED, null, Map.of(), null));
    }
    abort(dropped);
  }

  private LeaseholdException failure() {
    synchronized (lock) {
      return failure;
    }
  }

  /**
   * Under the lock: marks the stream broken by {@code e} (unless it already
   * is) and takes the pending messages, to be failed by {@link #abort} or
   * {@link #fail} outside the lock.
   */
  private List<Pending> failLocked(LeaseholdException e) {
    if (failure == null) {
      failure = e;
    }
    List<Pending> out = new ArrayList<>(pending);
    pending.clear();
    return out;
  }

  /** Outside the lock: fails {@code dropped} and cancels the call. */
  private void abort(List<Pending> dropped) {
    boolean cancel;
    synchronized (lock) {
      cancel = !cancelled && !ended.isDone();
      cancelled = true;
    }
    fail(dropped);
    if (cancel) {
      // ClientCall.cancel is thread-safe; called outside our lock, as its
      // callbacks take it.
      requests.cancel(failure().getMessage(), null);
    }
  }

  /** Outside the lock: fails {@code dropped} with the stream's failure. */
  private void fail(List<Pending> dropped) {
    LeaseholdException e = failure();
    for (Pending p : dropped) {
      p.results.completeExceptionally(e);
    }
  }

  /**
   * Splits writes into messages of at most {@link #MAX_PER_MESSAGE} writes
   * and about {@link #MAX_MESSAGE_BYTES} encoded bytes (a larger write goes
   * alone). An empty list is one empty message.
   */
  static List<List<CheckedWriteRequest>> split(List<CheckedWriteRequest> all) {
    List<List<CheckedWriteRequest>> out = new ArrayList<>();
    List<CheckedWriteRequest> cur = new ArrayList<>();
    out.add(cur);
    long bytes = 0;
    for (CheckedWriteRequest w : all) {
      // The write, its tag and its length prefix.
      long len = w.getSerializedSize() + 4L;
      if (!cur.isEmpty() && (cur.size() == MAX_PER_MESSAGE || bytes + len > MAX_MESSAGE_BYTES)) {
        cur = new ArrayList<>();
        out.add(cur);
        bytes = 0;
      }
      bytes += len;
      cur.add(w);
    }
    return out;
  }

  /** The server's side of the call; grpc-java calls these one at a time. */
  private final class Responses implements ClientResponseObserver<WriteStreamRequest, WriteStreamResponse> {
    @Override
    public void beforeStart(ClientCallStreamObserver<WriteStreamRequest> stream) {
      requests = stream;
    }

    @Override
    public void onNext(WriteStreamResponse resp) {
      List<WriteOutcome> outcomes = new ArrayList<>(resp.getResultsCount());
      LeaseholdException bad = null;
      try {
        for (WriteResult r : resp.getResultsList()) {
          outcomes.add(WriteOutcome.fromProto(r));
        }
      } catch (LeaseholdException e) {
        bad = e;
      }
      Pending p;
      List<Pending> dropped = null;
      synchronized (lock) {
        if (failure != null) {
          return; // we broke it already; the pending writes were failed
        }
        p = pending.peek();
        if (p == null || p.id != resp.getId() || p.count != resp.getResultsCount()) {
          String want = p == null ? "no request" : "request " + Long.toUnsignedString(p.id) + " with " + p.count;
          bad = new LeaseholdException(
              "write stream: response " + Long.toUnsignedString(resp.getId()) + " with " + resp.getResultsCount()
                  + " results does not answer " + want,
              Status.Code.INTERNAL, null, Map.of(), null);
        }
        if (bad != null) {
          dropped = failLocked(bad);
        } else {
          pending.poll();
        }
      }
      if (dropped != null) {
        abort(dropped);
        return;
      }
      p.results.complete(outcomes);
    }

    @Override
    public void onError(Throwable t) {
      List<Pending> dropped;
      synchronized (lock) {
        dropped = failLocked(Errors.from(t));
      }
      fail(dropped);
      ended.complete(null);
    }

    @Override
    public void onCompleted() {
      List<Pending> dropped;
      synchronized (lock) {
        String why = pending.isEmpty() ? "write stream ended"
            : "write stream ended with " + pending.size() + " message(s) unanswered";
        dropped = failLocked(new UnavailableException(why, Status.Code.UNAVAILABLE, null, Map.of(), null));
      }
      fail(dropped);
      ended.complete(null);
    }
  }
}
