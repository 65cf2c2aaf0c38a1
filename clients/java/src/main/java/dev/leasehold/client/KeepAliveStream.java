package dev.leasehold.client;

import dev.leasehold.v1.KeepAliveRenewal;
import dev.leasehold.v1.KeepAliveRequest;
import dev.leasehold.v1.KeepAliveResponse;
import dev.leasehold.v1.KeepAliveResult;
import dev.leasehold.v1.LeasesGrpc;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One open {@code KeepAlive} stream (for {@link ElectorSet}): many
 * renewals per message, one result per renewal, in order. One caller at a
 * time; a {@link LeaseholdException} from {@link #renew} means the stream
 * is broken: {@link #cancel()} it and open another.
 */
final class KeepAliveStream {
  /** The most renewals in one message (the server takes up to 1000). */
  static final int MAX_PER_MESSAGE = 1000;
  /** The most encoded bytes in one message, well under the server's default limit of about 66 KiB. */
  static final int MAX_MESSAGE_BYTES = 48 * 1024;

  private static final class Pending {
    final long id;
    final int count;
    final CompletableFuture<List<KeepAliveResult>> results = new CompletableFuture<>();

    Pending(long id, int count) {
      this.id = id;
      this.count = count;
    }
  }

  private final boolean bindToStream;
  private final Object lock = new Object();
  private final ArrayDeque<Pending> pending = new ArrayDeque<>();
  private volatile ClientCallStreamObserver<KeepAliveRequest> requests;
  private long nextId;
  private LeaseholdException failure;

  KeepAliveStream(LeasesGrpc.LeasesStub stub, boolean bindToStream) {
    this.bindToStream = bindToStream;
    stub.keepAlive(new ClientResponseObserver<KeepAliveRequest, KeepAliveResponse>() {
      @Override
      public void beforeStart(ClientCallStreamObserver<KeepAliveRequest> r) {
        requests = r;
      }

      @Override
      public void onNext(KeepAliveResponse r) {
        Pending p;
        synchronized (lock) {
          p = pending.poll();
        }
        if (p == null || p.id != r.getId() || p.count != r.getResultsCount()) {
          fail(new UnavailableException("keep-alive: an answer out of order (id " + r.getId() + ")",
              Status.Code.INTERNAL, null, Map.of(), null));
          if (p != null) {
            p.results.completeExceptionally(failure());
          }
          return;
        }
        p.results.complete(r.getResultsList());
      }

      @Override
      public void onError(Throwable t) {
        fail(Errors.from(t));
      }

      @Override
      public void onCompleted() {
        fail(new UnavailableException("keep-alive: the server ended the stream", Status.Code.UNAVAILABLE, null,
            Map.of(), null));
      }
    });
  }

  private LeaseholdException failure() {
    synchronized (lock) {
      return failure;
    }
  }

  /** Marks the stream broken by {@code e} (the first cause stays) and fails what waits. */
  private void fail(LeaseholdException e) {
    List<Pending> dropped;
    synchronized (lock) {
      if (failure == null) {
        failure = e;
      }
      dropped = new ArrayList<>(pending);
      pending.clear();
    }
    for (Pending p : dropped) {
      p.results.completeExceptionally(failure());
    }
  }

  /**
   * Renews every lease of {@code batch}, split into messages of at most
   * {@link #MAX_PER_MESSAGE} renewals and {@link #MAX_MESSAGE_BYTES},
   * sent back to back; returns one result per renewal, in order. Waits
   * until {@code untilNanos} (System.nanoTime()) at most.
   *
   * @throws LeaseholdException the stream is broken, or did not answer in time
   */
  List<KeepAliveResult> renew(List<KeepAliveRenewal> batch, long untilNanos) throws InterruptedException {
    List<Pending> mine = new ArrayList<>();
    synchronized (lock) {
      if (failure != null) {
        throw failure;
      }
      try {
        for (List<KeepAliveRenewal> m : split(batch)) {
          Pending p = new Pending(++nextId, m.size());
          pending.add(p);
          mine.add(p);
          requests.onNext(KeepAliveRequest.newBuilder().setId(p.id).addAllRenewals(m).setBindToStream(bindToStream).build());
        }
      } catch (RuntimeException e) {
        if (failure == null) {
          failure = new UnavailableException("keep-alive: could not send: " + e, Status.Code.UNKNOWN, null, Map.of(), e);
        }
        throw failure;
      }
    }
    List<KeepAliveResult> out = new ArrayList<>(batch.size());
    for (Pending p : mine) {
      try {
        out.addAll(p.results.get(Math.max(0, untilNanos - System.nanoTime()), TimeUnit.NANOSECONDS));
      } catch (ExecutionException e) {
        throw Errors.from(e.getCause());
      } catch (TimeoutException e) {
        fail(new UnavailableException("keep-alive: no answer in time", Status.Code.DEADLINE_EXCEEDED, null, Map.of(), null));
        throw failure();
      }
    }
    return out;
  }

  /** Cancels the stream; whatever waits fails. */
  void cancel() {
    fail(new UnavailableException("keep-alive: cancelled", Status.Code.CANCELLED, null, Map.of(), null));
    ClientCallStreamObserver<KeepAliveRequest> r = requests;
    if (r != null) {
      r.cancel("keep-alive stream closed", null);
    }
  }

  /** Splits renewals into messages of at most {@link #MAX_PER_MESSAGE} and about {@link #MAX_MESSAGE_BYTES}. */
  static List<List<KeepAliveRenewal>> split(List<KeepAliveRenewal> all) {
    List<List<KeepAliveRenewal>> out = new ArrayList<>();
    List<KeepAliveRenewal> cur = new ArrayList<>();
    out.add(cur);
    long bytes = 0;
    for (KeepAliveRenewal r : all) {
      long len = r.getSerializedSize() + 4L;
      if (!cur.isEmpty() && (cur.size() == MAX_PER_MESSAGE || bytes + len > MAX_MESSAGE_BYTES)) {
        cur = new ArrayList<>();
        out.add(cur);
        bytes = 0;
      }
      cur.add(r);
      bytes += len;
    }
    return out;
  }
}
