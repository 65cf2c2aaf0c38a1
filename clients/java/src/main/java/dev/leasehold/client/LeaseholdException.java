package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;
import java.util.OptionalLong;

/**
 * Any error from leasehold, decoded from the {@code google.rpc.ErrorInfo}
 * reason (domain {@code "leasehold"}) of a failed call's status. Catch the
 * subclasses, never parse the message:
 *
 * <pre>
 * LeaseholdException
 * ├── LeaseLostException          renew/release of a lease we no longer hold
 * ├── FencedException             write with a token that is not the live one
 * ├── InvalidArgumentException    bad input; field() names it
 * │   └── UnknownTokenException   a token the server never issued for the job
 * ├── UnauthenticatedException    no credentials, or ones the server's policy does not know
 * ├── PermissionDeniedException   the principal may not do this; action() and job()
 * ├── QuotaExceededException      a limit on state (jobs, keys, watchers, waiters); limit() and max()
 * ├── JobInUseException           deleteJob of a job whose lease is live or awaited
 * ├── NoSuccessorException        transferLease with no such waiter; the caller still leads
 * ├── ChaosDisabledException      a Chaos call to a server without --enable-chaos
 * └── UnavailableException        unreachable or not answering; retryable
 *     ├── StorageException        the store could not make a change durable
 *     ├── DiskFullException       the server's disk is (nearly) full; reads go on
 *     ├── OverloadedException     too many calls in flight; limit() and max(); back off
 *     └── ShuttingDownException   the server is stopping
 * </pre>
 */
public class LeaseholdException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final Status.Code code;
  private final String reason;
  private final Map<String, String> metadata;

  public LeaseholdException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, cause);
    this.code = code;
    this.reason = reason;
    this.metadata = Map.copyOf(metadata);
  }

  /** The gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /** The ErrorInfo reason, or null when the status had none. */
  public String reason() {
    return reason;
  }

  /** The ErrorInfo metadata. */
  public Map<String, String> metadata() {
    return metadata;
  }

  /** Whether retrying the same call later can help. */
  public boolean isRetryable() {
    return false;
  }

  OptionalLong tokenFromMetadata(String key) {
    String raw = metadata.get(key);
    if (raw == null) {
      return OptionalLong.empty();
    }
    try {
      return OptionalLong.of(Long.parseUnsignedLong(raw));
    } catch (NumberFormatException e) {
      return OptionalLong.empty();
    }
  }

  @Override
  public String toString() {
    return getClass().getSimpleName() + ": " + getMessage() + " (" + (reason != null ? reason : code) + ")";
  }
}
