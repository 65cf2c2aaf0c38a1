package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;
import java.util.OptionalLong;

/** A token the server never issued for the job: zero, or above its newest (reason UNKNOWN_TOKEN). */
public class UnknownTokenException extends InvalidArgumentException {
  private static final long serialVersionUID = 1L;

  public UnknownTokenException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  @Override
  public String field() {
    return metadata().getOrDefault("field", "token");
  }

  /** The job's newest token. */
  public OptionalLong currentToken() {
    return tokenFromMetadata("current_token");
  }
}
