package dev.leasehold.client;

import dev.leasehold.v1.LeasesGrpc;
import dev.leasehold.v1.WatchLeaseRequest;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.concurrent.CompletableFuture;

/**
 * An observation of one job's lease, from {@link Client#observe}: a
 * {@code WatchLease} stream whose events go to a {@link LeaseListener}.
 * {@link #close()} ends it; {@link #done()} tells how it ended.
 */
public final class Observation implements AutoCloseable {
  private final String job;
  private final CompletableFuture<Void> done = new CompletableFuture<>();
  private volatile ClientCallStreamObserver<WatchLeaseRequest> call;
  private volatile boolean closed;

  Observation(LeasesGrpc.LeasesStub stub, String job, LeaseListener listener) {
    this.job = job;
    stub.watchLease(WatchLeaseRequest.newBuilder().setJob(job).build(),
        new ClientResponseObserver<WatchLeaseRequest, dev.leasehold.v1.LeaseEvent>() {
          @Override
          public void beforeStart(ClientCallStreamObserver<WatchLeaseRequest> requestStream) {
            call = requestStream;
          }

          @Override
          public void onNext(dev.leasehold.v1.LeaseEvent e) {
            if (!closed) {
              listener.onEvent(LeaseEvent.fromProto(e));
            }
          }

          @Override
          public void onError(Throwable t) {
            if (closed) {
              done.complete(null);
              return;
            }
            LeaseholdException le = Errors.from(t);
            try {
              listener.onError(le);
            } finally {
              done.completeExceptionally(le);
            }
          }

          @Override
          public void onCompleted() {
            try {
              if (!closed) {
                listener.onCompleted();
              }
            } finally {
              done.complete(null);
            }
          }
        });
  }

  /** The job observed. */
  public String job() {
    return job;
  }

  /**
   * Completes once the observation has ended: normally when closed or when
   * the server ended the stream without an error, exceptionally with the
   * typed {@link LeaseholdException} when the stream broke.
   */
  public CompletableFuture<Void> done() {
    return done;
  }

  /** Ends the observation: cancels the stream; the listener hears nothing more. Idempotent. */
  @Override
  public void close() {
    closed = true;
    ClientCallStreamObserver<WatchLeaseRequest> c = call;
    if (c != null) {
      c.cancel("observation closed", null);
    }
  }
}
