package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/** Bad input (INVALID_ARGUMENT); nothing was changed, and retrying the same call cannot help. */
public class InvalidArgumentException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public InvalidArgumentException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  /** The request field at fault ("job", "ttl", "key"...), or null. */
  public String field() {
    return metadata().get("field");
  }
}
