package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;

/** The server could not make the change durable (reason STORAGE). */
public class StorageException extends UnavailableException {
  private static final long serialVersionUID = 1L;

  public StorageException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }
}
