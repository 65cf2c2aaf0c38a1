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
 * @param proof the grant's proof ({@code Lease.proof}): a JWS in which the
 *     server states that it issued this token of this job to this holder,
 *     for storage leasehold does not own to check ({@link Proofs#verify});
 *     the same for every answer about one grant (renewals keep it), a new
 *     one for a new grant. Null when the job is free, when the caller may
 *     not see the token, or when the server signs nothing (etcd mode
 *     without {@code --signing-key})
 */
public record Lease(String job, String holder, long token, Duration ttl, Duration remaining, String principal,
    String proof) {
  /** A lease without a principal or a proof. */
  public Lease(String job, String holder, long token, Duration ttl, Duration remaining) {
    this(job, holder, token, ttl, remaining, null, null);
  }

  /** A lease without a proof. */
  public Lease(String job, String holder, long token, Duration ttl, Duration remaining, String principal) {
    this(job, holder, token, ttl, remaining, principal, null);
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
        l.getPrincipal().isEmpty() ? null : l.getPrincipal(),
        l.getProof().isEmpty() ? null : l.getProof());
  }
}
