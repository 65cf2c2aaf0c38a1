package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/**
 * The server's policy does not know the caller (UNAUTHENTICATED): no
 * credentials, or a token or certificate of no principal. Retrying with the
 * same credentials cannot help.
 */
public class UnauthenticatedException extends LeaseholdException {
  private static final long serialVersionUID = 1L;

  public UnauthenticatedException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }
}
