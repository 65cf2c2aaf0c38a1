package dev.leasehold.client;

import dev.leasehold.v1.LeasesGrpc;
import dev.leasehold.v1.WatchLeaseRequest;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.Iterator;
import java.util.NoSuchElementException;

/** The events of one watch, in order; {@link #close()} ends it. */
public final class Watch implements Iterator<LeaseEvent>, AutoCloseable {
  private final Context.CancellableContext context;
  private final Iterator<dev.leasehold.v1.LeaseEvent> events;
  private volatile boolean closed;

  Watch(LeasesGrpc.LeasesBlockingStub stub, WatchLeaseRequest req) {
    this.context = Context.current().withCancellation();
    try {
      this.events = context.call(() -> stub.watchLease(req));
    } catch (Exception e) {
      context.cancel(null);
      throw Errors.from(e);
    }
  }

  /** Blocks for the next event; false once the watch ended or was closed. */
  @Override
  public boolean hasNext() {
    try {
      return events.hasNext();
    } catch (StatusRuntimeException e) {
      if (closed && e.getStatus().getCode() == Status.Code.CANCELLED) {
        return false;
      }
      throw Errors.from(e);
    }
  }

  @Override
  public LeaseEvent next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    return LeaseEvent.fromProto(events.next());
  }

  @Override
  public void close() {
    closed = true;
    context.cancel(null);
  }
}
