package dev.leasehold.client;

import com.google.protobuf.Any;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import dev.leasehold.v1.ErrorReason;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.util.Map;
import java.util.Set;

/**
 * Decodes failed calls into typed {@link LeaseholdException}s. The ErrorInfo
 * reason is the name of a value of the contract's {@link ErrorReason} enum
 * without its {@code ERROR_REASON_} prefix ({@code "FENCED"} for
 * {@code ERROR_REASON_FENCED}); it is mapped to the generated enum value and
 * the decoding branches on that, so every reason comes from the proto.
 */
public final class Errors {
  /** The ErrorInfo domain of every leasehold error. */
  public static final String DOMAIN = "leasehold";

  private static final String REASON_PREFIX = "ERROR_REASON_";

  private static final Set<Status.Code> UNAVAILABLE = Set.of(
      Status.Code.UNAVAILABLE, Status.Code.DEADLINE_EXCEEDED, Status.Code.CANCELLED, Status.Code.UNKNOWN);

  private Errors() {}

  /**
   * The generated {@link ErrorReason} for a reason as sent in ErrorInfo, or
   * {@link ErrorReason#UNRECOGNIZED} when there is none or it is not one this
   * client's proto knows.
   */
  static ErrorReason reasonOf(String reason) {
    if (reason == null || reason.isEmpty()) {
      return ErrorReason.UNRECOGNIZED;
    }
    EnumValueDescriptor value = ErrorReason.getDescriptor().findValueByName(REASON_PREFIX + reason);
    return value == null ? ErrorReason.UNRECOGNIZED : ErrorReason.valueOf(value);
  }

  /** The reason as sent in ErrorInfo for a generated {@link ErrorReason}: its name without the prefix. */
  static String reasonString(ErrorReason reason) {
    String name = reason.name();
    return name.startsWith(REASON_PREFIX) ? name.substring(REASON_PREFIX.length()) : name;
  }

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
    switch (reasonOf(reason)) {
      case ERROR_REASON_LEASE_LOST:
        return new LeaseLostException(message, code, reason, meta, t);
      case ERROR_REASON_FENCED:
        return new FencedException(message, code, reason, meta, t);
      case ERROR_REASON_UNKNOWN_TOKEN:
        return new UnknownTokenException(message, code, reason, meta, t);
      case ERROR_REASON_INVALID_ARGUMENT:
        return new InvalidArgumentException(message, code, reason, meta, t);
      case ERROR_REASON_STORAGE:
        return new StorageException(message, code, reason, meta, t);
      case ERROR_REASON_SHUTTING_DOWN:
        return new ShuttingDownException(message, code, reason, meta, t);
      case ERROR_REASON_DISK_FULL:
        return new DiskFullException(message, code, reason, meta, t);
      case ERROR_REASON_UNAUTHENTICATED:
        return new UnauthenticatedException(message, code, reason, meta, t);
      case ERROR_REASON_PERMISSION_DENIED:
        return new PermissionDeniedException(message, code, reason, meta, t);
      case ERROR_REASON_OVERLOADED:
        return new OverloadedException(message, code, reason, meta, t);
      case ERROR_REASON_QUOTA_EXCEEDED:
        return new QuotaExceededException(message, code, reason, meta, t);
      case ERROR_REASON_JOB_IN_USE:
        return new JobInUseException(message, code, reason, meta, t);
      case ERROR_REASON_NO_SUCCESSOR:
        return new NoSuccessorException(message, code, reason, meta, t);
      default:
        break;
    }
    if (code == Status.Code.INVALID_ARGUMENT) {
      return new InvalidArgumentException(message, code, reason, meta, t);
    }
    if (code == Status.Code.UNAUTHENTICATED) {
      return new UnauthenticatedException(message, code, reason, meta, t);
    }
    if (code == Status.Code.PERMISSION_DENIED) {
      return new PermissionDeniedException(message, code, reason, meta, t);
    }
    if (UNAVAILABLE.contains(code)) {
      return new UnavailableException(message, code, reason, meta, t);
    }
    return new LeaseholdException(message, code, reason, meta, t);
  }
}
