package dev.leasehold.client;

import java.time.Duration;

/**
 * A job's lease, as the server reported it.
 *
 * @param job the job
 * @param holder the live holder, or null when the job is free
 * @param token the newest token (unsigned); 0 if never granted
 * @param ttl the TTL of the live grant, or null when free
 * @param remaining the time left when the server answered, or null when free
 * @param principal the principal of the server's policy that holds the lease, or null (no policy, or free)
 */
public record Lease(String job, String holder, long token, Duration ttl, Duration remaining, String principal) {
  /** A lease without a principal. */
  public Lease(String job, String holder, long token, Duration ttl, Duration remaining) {
    this(job, holder, token, ttl, remaining, null);
  }

  /** Whether the job has a live holder. */
  public boolean isHeld() {
    return holder != null;
  }

  static Lease fromProto(dev.leasehold.v1.Lease l) {
    return new Lease(
        l.getJob(),
        l.getHolder().isEmpty() ? null : l.getHolder(),
        l.getToken(),
        l.hasTtl() ? Durations.fromProto(l.getTtl()) : null,
        l.hasRemaining() ? Durations.fromProto(l.getRemaining()) : null,
        l.getPrincipal().isEmpty() ? null : l.getPrincipal());
  }
}
