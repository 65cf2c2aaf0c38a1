package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/** The server could not be reached or could not answer (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, a transport failure). The outcome of a change is unknown; retrying later can help. */
public class UnavailableException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public UnavailableException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  @Override
  public boolean isRetryable() {
    return true;
  }
}
