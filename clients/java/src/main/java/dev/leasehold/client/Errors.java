package dev.leasehold.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.util.Map;
import java.util.Set;

/** Decodes failed calls into typed {@link LeaseholdException}s. */
public final class Errors {
  /** The ErrorInfo domain of every leasehold error. */
  public static final String DOMAIN = "leasehold";

  private static final Set<Status.Code> UNAVAILABLE = Set.of(
      Status.Code.UNAVAILABLE, Status.Code.DEADLINE_EXCEEDED, Status.Code.CANCELLED, Status.Code.UNKNOWN);

  private Errors() {}

  /** The leasehold ErrorInfo of a failed call, or null. */
  public static ErrorInfo errorInfo(Throwable t) {
    com.google.rpc.Status status = StatusProto.fromThrowable(t);
    if (status == null) {
      return null;
    }
    for (Any detail : status.getDetailsList()) {
      if (detail.is(ErrorInfo.class)) {
        try {
          ErrorInfo info = detail.unpack(ErrorInfo.class);
          if (DOMAIN.equals(info.getDomain())) {
            return info;
          }
        } catch (InvalidProtocolBufferException e) {
          // not ours; keep looking
        }
      }
    }
    return null;
  }

  /** The typed exception for a failed call (a StatusRuntimeException or any Throwable). */
  public static LeaseholdException from(Throwable t) {
    if (t instanceof LeaseholdException le) {
      return le;
    }
    Status status = Status.fromThrowable(t);
    ErrorInfo info = errorInfo(t);
    String reason = info == null ? null : info.getReason();
    Map<String, String> meta = info == null ? Map.of() : info.getMetadataMap();
    String message = status.getDescription() != null ? status.getDescription() : status.getCode().name();
    Status.Code code = status.getCode();
    if (reason != null) {
      switch (reason) {
        case "LEASE_LOST":
          return new LeaseLostException(message, code, reason, meta, t);
        case "FENCED":
          return new FencedException(message, code, reason, meta, t);
        case "UNKNOWN_TOKEN":
          return new UnknownTokenException(message, code, reason, meta, t);
        case "INVALID_ARGUMENT":
          return new InvalidArgumentException(message, code, reason, meta, t);
        case "STORAGE":
          return new StorageException(message, code, reason, meta, t);
        case "SHUTTING_DOWN":
          return new ShuttingDownException(message, code, reason, meta, t);
        case "DISK_FULL":
          return new DiskFullException(message, code, reason, meta, t);
        default:
          break;
      }
    }
    if (code == Status.Code.INVALID_ARGUMENT) {
      return new InvalidArgumentException(message, code, reason, meta, t);
    }
    if (UNAVAILABLE.contains(code)) {
      return new UnavailableException(message, code, reason, meta, t);
    }
    return new LeaseholdException(message, code, reason, meta, t);
  }
}
