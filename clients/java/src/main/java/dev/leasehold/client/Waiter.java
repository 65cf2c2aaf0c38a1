package dev.leasehold.client;

/**
 * One Acquire waiting in a job's line, from {@link Client#listWaiters}.
 *
 * @param holder the waiting holder ({@code AcquireRequest.holder}), such as another elector's {@link Elector#holder()}
 * @param principal the principal of the server's policy it asked as, or null (no policy)
 * @param preferred it asked as a preferred candidate ({@code AcquireRequest.preferred}): queued ahead of the others
 */
public record Waiter(String holder, String principal, boolean preferred) {
  static Waiter fromProto(dev.leasehold.v1.Waiter w) {
    return new Waiter(w.getHolder(), w.getPrincipal().isEmpty() ? null : w.getPrincipal(), w.getPreferred());
  }
}
