package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/**
 * {@link Client#transferLease} (or {@link Elector#transfer}) found no
 * successor: nobody waits for the job, or the holder it named has no Acquire
 * waiting (reason NO_SUCCESSOR, status FAILED_PRECONDITION). Nothing
 * changed: the caller still leads. Retry once a successor waits, or release.
 */
public class NoSuccessorException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public NoSuccessorException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }
}
