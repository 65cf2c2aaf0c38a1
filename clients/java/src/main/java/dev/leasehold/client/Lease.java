package dev.leasehold.client;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Objects;

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
 * @param value the value the holder published ({@code Lease.value}: with
 *     its grant, or a renewal that replaced it), for routing to the leader,
 *     say its address; at most 1024 bytes. Empty (never null) when the job
 *     is free or the holder published nothing. <b>Advisory: the token
 *     fences, not the value</b>: it says where the holder said to reach it,
 *     not that it still leads. {@link #valueUtf8()} is the same as text
 * @param slot in the answer to a counted Acquire ({@code AcquireRequest.slots},
 *     {@link Client#acquire(String, String, Duration, Duration, int)}): the
 *     slot granted, 0 to {@code slots - 1}, whose own job {@code job} names
 *     ({@code "{job}#{slot}"}); 0 elsewhere, as {@code slots} is
 * @param slots in the answer to a counted Acquire: the job's count of slots;
 *     0 elsewhere (a GetLease, an observation or a renewal answers about a
 *     slot's job as about any job). {@link #isSlot()} tells the two apart
 */
public record Lease(String job, String holder, long token, Duration ttl, Duration remaining, String principal,
    String proof, byte[] value, int slot, int slots) {
  private static final byte[] EMPTY = new byte[0];

  /** Copies {@code value} (null: empty), so that a lease does not change under its reader. */
  public Lease {
    value = value == null || value.length == 0 ? EMPTY : value.clone();
  }

  /** A lease without a principal, a proof or a value. */
  public Lease(String job, String holder, long token, Duration ttl, Duration remaining) {
    this(job, holder, token, ttl, remaining, null, null, null);
  }

  /** A lease without a proof or a value. */
  public Lease(String job, String holder, long token, Duration ttl, Duration remaining, String principal) {
    this(job, holder, token, ttl, remaining, principal, null, null);
  }

  /** A lease that is not the answer to a counted Acquire (slot and slots 0). */
  public Lease(String job, String holder, long token, Duration ttl, Duration remaining, String principal,
      String proof, byte[] value) {
    this(job, holder, token, ttl, remaining, principal, proof, value, 0, 0);
  }

  /** A lease without a value. */
  public Lease(String job, String holder, long token, Duration ttl, Duration remaining, String principal,
      String proof) {
    this(job, holder, token, ttl, remaining, principal, proof, null);
  }

  /** The value the holder published (a copy; empty when none): see the class's {@code value}. */
  @Override
  public byte[] value() {
    return value.length == 0 ? EMPTY : value.clone();
  }

  /** {@link #value()} as UTF-8 text ("" when none), for a value published as a string, such as an address. */
  public String valueUtf8() {
    return new String(value, StandardCharsets.UTF_8);
  }

  /**
   * Whether this is a counted Acquire's answer about a slot
   * ({@code slots} above 0): then {@link #job()} is the slot's job,
   * {@code "{job}#{slot}"}, which renewals, releases and writes name.
   */
  public boolean isSlot() {
    return slots > 0;
  }

  /** Whether the holder published a value ({@link #value()} is not empty). */
  public boolean hasValue() {
    return value.length > 0;
  }

  /** Equal when every component is, the value compared byte for byte. */
  @Override
  public boolean equals(Object o) {
    return o instanceof Lease l && token == l.token && Objects.equals(job, l.job) && Objects.equals(holder, l.holder)
        && Objects.equals(ttl, l.ttl) && Objects.equals(remaining, l.remaining)
        && Objects.equals(principal, l.principal) && Objects.equals(proof, l.proof) && Arrays.equals(value, l.value)
        && slot == l.slot && slots == l.slots;
  }

  @Override
  public int hashCode() {
    return Objects.hash(job, holder, token, ttl, remaining, principal, proof, slot, slots) * 31 + Arrays.hashCode(value);
  }

  /** The components, the value as UTF-8 text. */
  @Override
  public String toString() {
    return "Lease[job=" + job + ", holder=" + holder + ", token=" + Long.toUnsignedString(token) + ", ttl=" + ttl
        + ", remaining=" + remaining + ", principal=" + principal + ", proof=" + proof + ", value=" + valueUtf8()
        + (slots > 0 ? ", slot=" + slot + ", slots=" + slots : "") + "]";
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
        l.getProof().isEmpty() ? null : l.getProof(),
        l.getValue().toByteArray(),
        l.getSlot(),
        l.getSlots());
  }
}
