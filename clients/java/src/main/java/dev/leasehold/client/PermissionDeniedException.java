package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/**
 * The caller's principal may not do this (PERMISSION_DENIED): no grant for
 * the action on the job, or the job's lease is another principal's. Nothing
 * was changed; retrying cannot help until the policy or the holder changes.
 */
public class PermissionDeniedException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public PermissionDeniedException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  /** The action refused ("lease", "write", "read" or "admin"), or null. */
  public String action() {
    return metadata().get("action");
  }

  /** The job the call was refused on, or null. */
  public String job() {
    return metadata().get("job");
  }
}
