package dev.leasehold.client;

/**
 * The answer to {@link Client#renewLease}.
 *
 * @param lease our lease, renewed
 * @param successorWaiting a preferred candidate waits for the job, and our
 *     grant is not a preferred one ({@code RenewResponse.successor_waiting}):
 *     hand over ({@link Client#transferLease}) when it suits; nothing is
 *     taken from us
 */
public record Renewed(Lease lease, boolean successorWaiting) {
  static Renewed fromProto(dev.leasehold.v1.RenewResponse r) {
    return new Renewed(Lease.fromProto(r.getLease()), r.getSuccessorWaiting());
  }
}
