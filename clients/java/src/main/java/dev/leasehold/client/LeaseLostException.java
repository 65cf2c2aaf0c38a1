package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;
import java.util.OptionalLong;

/** The lease is no longer ours (reason LEASE_LOST): stop leading. Retrying is useless. */
public class LeaseLostException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public LeaseLostException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  /** The job's newest token, if the server said. */
  public OptionalLong currentToken() {
    return tokenFromMetadata("current_token");
  }

  /** The job's holder now, or null when it is free. */
  public String currentHolder() {
    String h = metadata().get("current_holder");
    return h == null || h.isEmpty() ? null : h;
  }
}
