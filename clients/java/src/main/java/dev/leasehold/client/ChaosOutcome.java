package dev.leasehold.client;

/**
 * What a {@link Chaos} action left ({@code ChaosResponse}).
 *
 * @param lease the job's lease after the action; null for
 *     {@link Chaos#clear()} (every job)
 * @param inForce what is in force on the job now, for people ("worker@...
 *     paused for 4.9s, answers delayed by 200ms, 2 writes to fence"); empty
 *     when nothing is. Not a format to parse
 */
public record ChaosOutcome(Lease lease, String inForce) {
  static ChaosOutcome fromProto(dev.leasehold.v1.ChaosResponse r) {
    return new ChaosOutcome(r.hasLease() ? Lease.fromProto(r.getLease()) : null, r.getInForce());
  }
}
