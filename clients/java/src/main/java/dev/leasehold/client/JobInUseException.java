package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/**
 * {@link Client#deleteJob} of a job whose lease is live, or that an Acquire
 * waits for (reason JOB_IN_USE, status FAILED_PRECONDITION). Nothing was
 * deleted; retry once the lease is released or has expired and nobody waits.
 */
public class JobInUseException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public JobInUseException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }
}
