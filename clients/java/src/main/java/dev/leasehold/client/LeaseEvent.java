package dev.leasehold.client;

/**
 * One event of {@link Client#watch}: the lease after a change.
 *
 * @param kind why it was sent
 * @param lease the lease after the change
 */
public record LeaseEvent(Kind kind, Lease lease) {
  /** Why a watch event was sent. */
  public enum Kind {
    UNSPECIFIED,
    /** The state when the watch began. */
    CURRENT,
    /** A grant to a new holder, or a new token. */
    ACQUIRED,
    /** The holder released the lease. */
    RELEASED,
    /** The lease ran out without being renewed. */
    EXPIRED,
    /**
     * The holder changed the lease's value ({@link Lease#value()}: a renewal
     * that set one, or its repeated Acquire with another): same holder, same
     * token. Not a new leader.
     */
    VALUE_CHANGED
  }

  static LeaseEvent fromProto(dev.leasehold.v1.LeaseEvent e) {
    Kind kind;
    switch (e.getKind()) {
      case KIND_CURRENT -> kind = Kind.CURRENT;
      case KIND_ACQUIRED -> kind = Kind.ACQUIRED;
      case KIND_RELEASED -> kind = Kind.RELEASED;
      case KIND_EXPIRED -> kind = Kind.EXPIRED;
      case KIND_VALUE_CHANGED -> kind = Kind.VALUE_CHANGED;
      default -> kind = Kind.UNSPECIFIED;
    }
    return new LeaseEvent(kind, Lease.fromProto(e.getLease()));
  }
}
