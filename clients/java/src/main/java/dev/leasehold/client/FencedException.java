package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;
import java.util.OptionalLong;

/** The write was fenced (reason FENCED): the writer is not the live leader and must stop. Nothing was written. */
public class FencedException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public FencedException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  /** The job's newest token. */
  public OptionalLong currentToken() {
    return tokenFromMetadata("current_token");
  }
}
