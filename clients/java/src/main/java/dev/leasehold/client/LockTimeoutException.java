package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/**
 * {@link Client#lock(String, java.time.Duration, java.time.Duration, String)}
 * did not get the lease within its timeout; nothing is left held. Code
 * {@code DEADLINE_EXCEEDED}; retryable, as every {@link UnavailableException}.
 */
public class LockTimeoutException extends UnavailableException {
  private static final long serialVersionUID = 1L;

  public LockTimeoutException(String message) {
    super(message, Status.Code.DEADLINE_EXCEEDED, null, Map.of(), null);
  }
}
