package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/** The server is shutting down (reason SHUTTING_DOWN). */
public class ShuttingDownException extends UnavailableException {
  private static final long serialVersionUID = 1L;

  public ShuttingDownException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }
}
