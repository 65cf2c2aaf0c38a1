package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/**
 * A {@link Chaos} call to a server that does not serve the chaos API: it was
 * not started with {@code --enable-chaos} (status UNIMPLEMENTED, or reason
 * CHAOS_DISABLED). Start the test or staging server with
 * {@code leasehold serve --enable-chaos}; retrying does not help.
 */
public class ChaosDisabledException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public ChaosDisabledException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }
}
