package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;
import java.util.OptionalLong;

/**
 * Too many calls in flight (reason OVERLOADED, status RESOURCE_EXHAUSTED):
 * the server refused the call before running it, over {@code --max-in-flight}
 * or {@code --max-in-flight-per-connection}. Nothing was changed; retry with
 * backoff.
 */
public class OverloadedException extends UnavailableException {
  private static final long serialVersionUID = 1L;

  public OverloadedException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  /** The flag that sets the limit, such as {@code "--max-in-flight-per-connection"}, or null. */
  public String limit() {
    return metadata().get("limit");
  }

  /** The limit's value, if the server said. */
  public OptionalLong max() {
    return tokenFromMetadata("max");
  }
}
