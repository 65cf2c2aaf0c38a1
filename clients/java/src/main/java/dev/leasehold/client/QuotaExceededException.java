package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;
import java.util.OptionalLong;

/**
 * A limit on state was reached (reason QUOTA_EXCEEDED, status
 * RESOURCE_EXHAUSTED): too many jobs ({@code --max-jobs}), keys in a job
 * ({@code --max-keys-per-job}), watchers ({@code --max-watchers}) or waiters
 * on a job ({@code --max-waiters-per-job}). Nothing was changed; retrying
 * helps only once the state shrinks ({@link Client#deleteJob} gives jobs and
 * keys back, watchers and waiters leave).
 */
public class QuotaExceededException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public QuotaExceededException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  /** The flag that sets the limit, such as {@code "--max-jobs"}, or null. */
  public String limit() {
    return metadata().get("limit");
  }

  /** The limit's value, if the server said. */
  public OptionalLong max() {
    return tokenFromMetadata("max");
  }
}
