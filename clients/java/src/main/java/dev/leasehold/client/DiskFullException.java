package dev.leasehold.client;

import io.grpc.Status;
import java.util.Map;
import java.util.OptionalLong;

/**
 * The server's data disk is (nearly) full (reason DISK_FULL, status
 * RESOURCE_EXHAUSTED): the change was refused before anything was written.
 * Reads go on; retry once space is freed.
 */
public class DiskFullException extends UnavailableException {
  private static final long serialVersionUID = 1L;

  public DiskFullException(String message, Status.Code code, String reason, Map<String, String> metadata, Throwable cause) {
    super(message, code, reason, metadata, cause);
  }

  /** Free bytes on the server's data disk, as it reported. */
  public OptionalLong freeBytes() {
    return tokenFromMetadata("free_bytes");
  }

  /** The bytes the change needed, as the server reported. */
  public OptionalLong neededBytes() {
    return tokenFromMetadata("needed_bytes");
  }
}
