package dev.leasehold.client;

import dev.leasehold.v1.WriteResult;
import io.grpc.Status;
import java.util.Map;

/**
 * The outcome of one write on a {@link WriteStream}. Branch on {@link #kind()}:
 *
 * <pre>{@code
 * switch (outcome.kind()) {
 *   case WRITTEN -> log("version " + outcome.version());
 *   case FENCED -> stopLeading(outcome.currentToken());
 *   case QUOTA_EXCEEDED -> deleteOldKeysOrJobs(outcome.message());
 *   case UNKNOWN_TOKEN, INVALID_ARGUMENT -> throw new IllegalStateException(outcome.message());
 * }
 * }</pre>
 *
 * @param kind what happened
 * @param version {@link Kind#WRITTEN}: the key's new version (unsigned); else 0
 * @param currentToken {@link Kind#FENCED} and {@link Kind#UNKNOWN_TOKEN}: the
 *     job's newest token (unsigned); else 0
 * @param field {@link Kind#INVALID_ARGUMENT}: the field at fault ("job",
 *     "token", "key" or "value"); else null
 * @param message when not {@link Kind#WRITTEN}: why, in words (branch on
 *     {@code kind}, not on this text); else null
 */
public record WriteOutcome(Kind kind, long version, long currentToken, String field, String message) {
  /** What happened to one write. */
  public enum Kind {
    /** Stored durably; {@link #version()} is the key's new version. */
    WRITTEN,
    /**
     * The token is not the job's live token: the writer is not the leader and
     * must stop. Nothing was written; {@link #currentToken()} is the job's
     * newest token.
     */
    FENCED,
    /**
     * The token was never issued for the job (zero, or above its newest).
     * Nothing was written; {@link #currentToken()} is the job's newest token.
     */
    UNKNOWN_TOKEN,
    /**
     * The write would add a key to a job at its limit of keys
     * ({@code --max-keys-per-job}, named in {@link #message()}). Nothing was
     * written.
     */
    QUOTA_EXCEEDED,
    /** The write was malformed. Nothing was written; {@link #field()} names the field at fault. */
    INVALID_ARGUMENT
  }

  /** A write stored with {@code version}. */
  public static WriteOutcome written(long version) {
    return new WriteOutcome(Kind.WRITTEN, version, 0, null, null);
  }

  /** A write fenced by the newer {@code currentToken}. */
  public static WriteOutcome fenced(long currentToken, String message) {
    return new WriteOutcome(Kind.FENCED, 0, currentToken, null, message);
  }

  /** A write with a token never issued; the job's newest is {@code currentToken}. */
  public static WriteOutcome unknownToken(long currentToken, String message) {
    return new WriteOutcome(Kind.UNKNOWN_TOKEN, 0, currentToken, null, message);
  }

  /** A write of a new key refused by the job's limit of keys. */
  public static WriteOutcome quotaExceeded(String message) {
    return new WriteOutcome(Kind.QUOTA_EXCEEDED, 0, 0, null, message);
  }

  /** A malformed write, {@code field} at fault. */
  public static WriteOutcome invalidArgument(String field, String message) {
    return new WriteOutcome(Kind.INVALID_ARGUMENT, 0, 0, field, message);
  }

  /** Whether the write was made. */
  public boolean isWritten() {
    return kind == Kind.WRITTEN;
  }

  /** The outcome of a result; a result without a known outcome is an error. */
  static WriteOutcome fromProto(WriteResult r) {
    switch (r.getOutcome()) {
      case OUTCOME_WRITTEN:
        return written(r.getVersion());
      case OUTCOME_FENCED:
        return fenced(r.getCurrentToken(), r.getMessage());
      case OUTCOME_UNKNOWN_TOKEN:
        return unknownToken(r.getCurrentToken(), r.getMessage());
      case OUTCOME_QUOTA_EXCEEDED:
        return quotaExceeded(r.getMessage());
      case OUTCOME_INVALID_ARGUMENT:
        return invalidArgument(r.getField(), r.getMessage());
      default:
        throw new LeaseholdException("write result has no known outcome (" + r.getOutcomeValue() + ")",
            Status.Code.INTERNAL, null, Map.of(), null);
    }
  }
}
