package dev.leasehold.client;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.Objects;

/**
 * One token's time as a job's leader, from {@link Client#history}: who
 * held it, when it was granted and how it ended. Its times are on the
 * server's wall clock, for people (a post-mortem asking which token led
 * when a write was made); no lease rule reads them.
 *
 * @param token its token (unsigned)
 * @param holder its holder
 * @param principal the principal the grant was bound to (servers with a policy), or null
 * @param grantedAt when it was granted
 * @param ttl the TTL it was granted with (renewals may change it later)
 * @param end how it ended; {@link End#NOT_ENDED} while the holder leads
 * @param endedAt when it ended (the release, or the deadline that passed), or null while it has not
 * @param value the value published with the grant ({@code Tenure.value}, the Acquire's; a later change by
 *     a renewal is not recorded here); empty (never null) when none. {@link #valueUtf8()} is the same as text
 */
public record Tenure(long token, String holder, String principal, Instant grantedAt, Duration ttl, End end,
    Instant endedAt, byte[] value) {
  private static final byte[] EMPTY = new byte[0];

  /** Copies {@code value} (null: empty). */
  public Tenure {
    value = value == null || value.length == 0 ? EMPTY : value.clone();
  }

  /** A tenure without a value. */
  public Tenure(long token, String holder, String principal, Instant grantedAt, Duration ttl, End end,
      Instant endedAt) {
    this(token, holder, principal, grantedAt, ttl, end, endedAt, null);
  }

  /** The value published with the grant (a copy; empty when none). */
  @Override
  public byte[] value() {
    return value.length == 0 ? EMPTY : value.clone();
  }

  /** {@link #value()} as UTF-8 text ("" when none). */
  public String valueUtf8() {
    return new String(value, StandardCharsets.UTF_8);
  }

  /** Equal when every component is, the value compared byte for byte. */
  @Override
  public boolean equals(Object o) {
    return o instanceof Tenure t && token == t.token && Objects.equals(holder, t.holder)
        && Objects.equals(principal, t.principal) && Objects.equals(grantedAt, t.grantedAt)
        && Objects.equals(ttl, t.ttl) && end == t.end && Objects.equals(endedAt, t.endedAt)
        && Arrays.equals(value, t.value);
  }

  @Override
  public int hashCode() {
    return Objects.hash(token, holder, principal, grantedAt, ttl, end, endedAt) * 31 + Arrays.hashCode(value);
  }

  /** The components, the value as UTF-8 text. */
  @Override
  public String toString() {
    return "Tenure[token=" + Long.toUnsignedString(token) + ", holder=" + holder + ", principal=" + principal
        + ", grantedAt=" + grantedAt + ", ttl=" + ttl + ", end=" + end + ", endedAt=" + endedAt + ", value="
        + valueUtf8() + "]";
  }

  /** How a tenure ended ({@code Tenure.End} of the proto, without its prefix). */
  public enum End {
    /** Not ended: the holder leads now (or led when the server last started, and has not been replaced since). */
    NOT_ENDED,
    /** The holder released it. */
    RELEASED,
    /** It ran out, and was next granted to the same holder (a new token) or to nobody yet. */
    EXPIRED,
    /** It ran out, and another holder was granted the job. */
    TAKEN_OVER,
    /** It ran out and the job was deleted (only from older servers). */
    DELETED,
    /** {@code leasehold restore} released it. */
    RESTORED,
    /** {@code leasehold recover} released it. */
    RECOVERED,
    /** Bound to its connection ({@code bindToStream}), which closed or reset. */
    CONNECTION_CLOSED,
    /** The holder handed it to a waiting successor (a transfer). */
    TRANSFERRED,
    /** The chaos API ended it on purpose ({@link Chaos#expire}). */
    CHAOS,
    /** An end this client's proto does not know (a newer server's). */
    UNKNOWN
  }

  /** Whether it has ended. */
  public boolean ended() {
    return end != End.NOT_ENDED;
  }

  static Tenure fromProto(dev.leasehold.v1.Tenure t) {
    End end = switch (t.getEnd()) {
      case END_UNSPECIFIED -> End.NOT_ENDED;
      case END_RELEASED -> End.RELEASED;
      case END_EXPIRED -> End.EXPIRED;
      case END_TAKEN_OVER -> End.TAKEN_OVER;
      case END_DELETED -> End.DELETED;
      case END_RESTORED -> End.RESTORED;
      case END_RECOVERED -> End.RECOVERED;
      case END_CONNECTION_CLOSED -> End.CONNECTION_CLOSED;
      case END_TRANSFERRED -> End.TRANSFERRED;
      case END_CHAOS -> End.CHAOS;
      default -> End.UNKNOWN;
    };
    return new Tenure(t.getToken(), t.getHolder(), t.getPrincipal().isEmpty() ? null : t.getPrincipal(),
        t.hasGrantedAt() ? instant(t.getGrantedAt()) : null,
        t.hasTtl() ? Durations.fromProto(t.getTtl()) : null, end,
        t.hasEndedAt() ? instant(t.getEndedAt()) : null, t.getValue().toByteArray());
  }

  static Instant instant(com.google.protobuf.Timestamp ts) {
    return Instant.ofEpochSecond(ts.getSeconds(), ts.getNanos());
  }
}
