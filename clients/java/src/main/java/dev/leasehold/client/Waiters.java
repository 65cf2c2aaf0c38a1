package dev.leasehold.client;

import java.util.List;

/**
 * A job's line of waiting Acquires, from {@link Client#listWaiters}: the
 * candidates a release or a transfer would hand the lease to, in that order.
 *
 * @param waiters the waiters, first in line first: the preferred candidates, then the others,
 *     each class first come, first served; at most the limit asked for
 * @param waiting how many wait in all (may be more than listed)
 */
public record Waiters(List<Waiter> waiters, int waiting) {
  public Waiters {
    waiters = List.copyOf(waiters);
  }

  /** Whether nobody waits. */
  public boolean isEmpty() {
    return waiting == 0 && waiters.isEmpty();
  }

  static Waiters fromProto(dev.leasehold.v1.ListWaitersResponse r) {
    return new Waiters(r.getWaitersList().stream().map(Waiter::fromProto).toList(), r.getWaiting());
  }
}
