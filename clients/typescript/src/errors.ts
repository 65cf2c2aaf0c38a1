/**
 * Typed errors, decoded from the `google.rpc.ErrorInfo` reason (domain
 * "leasehold") in a failed call's status details. The reason is the name of
 * a value of the contract's `ErrorReason` enum without its `ERROR_REASON_`
 * prefix; `reasonEnum` maps it to the generated enum value and the decoding
 * branches on that value, so every reason comes from the proto. Branch on
 * the class, never on the message:
 *
 * ```ts
 * try {
 *   await client.checkedWrite(job, token, "status", "ok");
 * } catch (e) {
 *   if (e instanceof Fenced) stopLeading(); // e.currentToken is the newest
 *   else throw e;
 * }
 * ```
 *
 * LeaseholdError
 * ├── LeaseLost          renew/release of a lease we no longer hold
 * ├── Fenced             write with a token that is not the live one
 * ├── InvalidArgument    bad input; .field names it
 * │   └── UnknownToken   a token the server never issued for the job
 * ├── Unauthenticated    no credentials, or ones the server's policy does not know
 * ├── PermissionDenied   the principal may not do this; .action and .job
 * ├── QuotaExceeded      a limit on state (jobs, keys, watchers, waiters); .limit and .max
 * ├── JobInUse           deleteJob of a job whose lease is live or awaited
 * ├── NoSuccessor        transferLease with no such waiter; the caller still leads
 * ├── ChaosDisabled      a chaos call to a server without --enable-chaos
 * └── Unavailable        unreachable or not answering; retryable
 *     ├── LockTimeout    client.lock() did not get the lease within its timeoutMs
 *     ├── StorageError   the store could not make a change durable
 *     ├── DiskFull       the server's disk is (nearly) full; reads go on
 *     ├── Overloaded     too many calls in flight; .limit and .max; back off
 *     └── ShuttingDown   the server is stopping
 */
import { Metadata, status as Code, type ServiceError } from "@grpc/grpc-js";
import { ErrorInfo } from "./gen/google/rpc/error_details";
import { Status } from "./gen/google/rpc/status";
import { ErrorReason, errorReasonFromJSON, errorReasonToJSON } from "./gen/leasehold/v1/leasehold";

/** The ErrorInfo domain of every leasehold error. */
export const DOMAIN = "leasehold";
const DETAILS_KEY = "grpc-status-details-bin";
const ERROR_INFO_TYPE = "google.rpc.ErrorInfo";
const REASON_PREFIX = "ERROR_REASON_";

/**
 * The generated `ErrorReason` for a reason as sent in ErrorInfo ("FENCED"
 * gives `ERROR_REASON_FENCED`), or `ErrorReason.UNRECOGNIZED` when there is
 * no reason or it is not one this client's proto knows.
 */
export function reasonEnum(reason: string | undefined): ErrorReason {
  return reason ? errorReasonFromJSON(REASON_PREFIX + reason) : ErrorReason.UNRECOGNIZED;
}

/** The reason as sent in ErrorInfo for a generated `ErrorReason`: its name without the prefix. */
export function reasonString(reason: ErrorReason): string {
  const name = errorReasonToJSON(reason);
  return name.startsWith(REASON_PREFIX) ? name.slice(REASON_PREFIX.length) : name;
}

/** Any error from leasehold. */
export class LeaseholdError extends Error {
  /** Whether retrying the same call later can help. */
  readonly retryable: boolean = false;

  constructor(
    message: string,
    /** The gRPC status code. */
    readonly code: Code,
    /** The ErrorInfo reason, or undefined when the status had none. */
    readonly reason: string | undefined,
    /** The ErrorInfo metadata. */
    readonly metadata: Readonly<Record<string, string>>,
  ) {
    super(message);
    this.name = new.target.name;
  }

  protected tokenFromMetadata(key = "current_token"): bigint | undefined {
    const raw = this.metadata[key];
    if (raw === undefined || !/^\d+$/.test(raw)) return undefined;
    return BigInt(raw);
  }
  protected numberFromMetadata(key: string): number | undefined {
    const raw = this.metadata[key];
    if (raw === undefined || !/^\d+$/.test(raw)) return undefined;
    return Number(raw);
  }
}

/** The lease is no longer ours (LEASE_LOST): stop leading. */
export class LeaseLost extends LeaseholdError {
  /** The job's newest token, if the server said. */
  get currentToken(): bigint | undefined {
    return this.tokenFromMetadata();
  }
  /** The job's holder now, if it has one. */
  get currentHolder(): string | undefined {
    return this.metadata["current_holder"] || undefined;
  }
}

/** The write was fenced (FENCED): the writer is not the live leader. */
export class Fenced extends LeaseholdError {
  /** The job's newest token. */
  get currentToken(): bigint | undefined {
    return this.tokenFromMetadata();
  }
}

/** Bad input (INVALID_ARGUMENT); nothing was changed. */
export class InvalidArgument extends LeaseholdError {
  /** The request field at fault ("job", "ttl", "key"...). */
  get field(): string | undefined {
    return this.metadata["field"];
  }
}

/** A token the server never issued for the job (UNKNOWN_TOKEN). */
export class UnknownToken extends InvalidArgument {
  override get field(): string | undefined {
    return this.metadata["field"] ?? "token";
  }
  /** The job's newest token. */
  get currentToken(): bigint | undefined {
    return this.tokenFromMetadata();
  }
}

/**
 * The server's policy does not know the caller (UNAUTHENTICATED): no
 * credentials, or a token or certificate of no principal. Retrying with the
 * same credentials cannot help.
 */
export class Unauthenticated extends LeaseholdError {}

/**
 * The caller's principal may not do this (PERMISSION_DENIED): no grant for
 * the action on the job, or the job's lease is another principal's.
 * Retrying cannot help until the policy or the holder changes.
 */
export class PermissionDenied extends LeaseholdError {
  /** The action refused: "lease", "write", "read" or "admin". */
  get action(): string | undefined {
    return this.metadata["action"] || undefined;
  }
  /** The job the call was refused on. */
  get job(): string | undefined {
    return this.metadata["job"] || undefined;
  }
}

/**
 * A limit on state was reached (QUOTA_EXCEEDED, RESOURCE_EXHAUSTED): too
 * many jobs (`--max-jobs`), keys in a job (`--max-keys-per-job`), watchers
 * (`--max-watchers`) or waiters on a job (`--max-waiters-per-job`).
 * Nothing was changed; retrying helps only once the state shrinks
 * (`deleteJob` gives jobs and keys back, watchers and waiters leave).
 */
export class QuotaExceeded extends LeaseholdError {
  /** The flag that sets the limit, such as "--max-jobs". */
  get limit(): string | undefined {
    return this.metadata["limit"] || undefined;
  }
  /** The limit's value. */
  get max(): number | undefined {
    return this.numberFromMetadata("max");
  }
}

/**
 * `deleteJob` of a job whose lease is live, or that an Acquire waits for
 * (JOB_IN_USE, FAILED_PRECONDITION). Nothing was deleted; retry once the
 * lease is released or has expired and nobody waits.
 */
export class JobInUse extends LeaseholdError {}

/**
 * `transferLease` found no successor (NO_SUCCESSOR, FAILED_PRECONDITION):
 * nobody waits for the job, or the holder named is not waiting. Nothing
 * changed: the caller still leads. Retry once a successor waits, or
 * release.
 */
export class NoSuccessor extends LeaseholdError {}

/**
 * A call of the chaos API (`client.chaos()`) to a server that does not
 * serve it (UNIMPLEMENTED): the server must run with `--enable-chaos`
 * (test and staging servers only). `cause` is the error as the server
 * sent it.
 */
export class ChaosDisabled extends LeaseholdError {}

/** The server could not be reached or could not answer; retryable. */
export class Unavailable extends LeaseholdError {
  override readonly retryable: boolean = true;
}

/**
 * `Client.lock` (or `withLock`) did not get the lease within its
 * `timeoutMs` (DEADLINE_EXCEEDED): someone else held it all along, or the
 * server could not be reached. Nothing is held. Retryable: ask again
 * later.
 */
export class LockTimeout extends Unavailable {
  constructor(
    /** The job the lock waited for. */
    readonly job: string,
    /** How long it waited, ms. */
    readonly timeoutMs: number,
    /** The last failure, when the server could not be reached. */
    cause?: unknown,
  ) {
    super(`lock on ${JSON.stringify(job)}: not acquired within ${timeoutMs} ms`, Code.DEADLINE_EXCEEDED, undefined, {});
    if (cause !== undefined) (this as { cause?: unknown }).cause = cause;
  }
}

/** The server could not make the change durable (STORAGE). */
export class StorageError extends Unavailable {}

/** The server is shutting down (SHUTTING_DOWN). */
export class ShuttingDown extends Unavailable {}

/**
 * The server's data disk is (nearly) full (DISK_FULL, RESOURCE_EXHAUSTED):
 * the change was refused before anything was written. Reads go on; retry
 * once space is freed.
 */
export class DiskFull extends Unavailable {
  get freeBytes(): bigint | undefined {
    return this.tokenFromMetadata("free_bytes");
  }
  get neededBytes(): bigint | undefined {
    return this.tokenFromMetadata("needed_bytes");
  }
}

/**
 * Too many calls in flight (OVERLOADED, RESOURCE_EXHAUSTED): the server
 * refused the call before running it, over `--max-in-flight` or
 * `--max-in-flight-per-connection`. Nothing was changed; retry with backoff.
 */
export class Overloaded extends Unavailable {
  /** The flag that sets the limit, such as "--max-in-flight-per-connection". */
  get limit(): string | undefined {
    return this.metadata["limit"] || undefined;
  }
  /** The limit's value. */
  get max(): number | undefined {
    return this.numberFromMetadata("max");
  }
}

type ErrorClass = new (
  message: string,
  code: Code,
  reason: string | undefined,
  metadata: Record<string, string>,
) => LeaseholdError;

const BY_REASON = new Map<ErrorReason, ErrorClass>([
  [ErrorReason.ERROR_REASON_LEASE_LOST, LeaseLost],
  [ErrorReason.ERROR_REASON_FENCED, Fenced],
  [ErrorReason.ERROR_REASON_UNKNOWN_TOKEN, UnknownToken],
  [ErrorReason.ERROR_REASON_INVALID_ARGUMENT, InvalidArgument],
  [ErrorReason.ERROR_REASON_STORAGE, StorageError],
  [ErrorReason.ERROR_REASON_SHUTTING_DOWN, ShuttingDown],
  [ErrorReason.ERROR_REASON_DISK_FULL, DiskFull],
  [ErrorReason.ERROR_REASON_UNAUTHENTICATED, Unauthenticated],
  [ErrorReason.ERROR_REASON_PERMISSION_DENIED, PermissionDenied],
  [ErrorReason.ERROR_REASON_OVERLOADED, Overloaded],
  [ErrorReason.ERROR_REASON_QUOTA_EXCEEDED, QuotaExceeded],
  [ErrorReason.ERROR_REASON_JOB_IN_USE, JobInUse],
  [ErrorReason.ERROR_REASON_NO_SUCCESSOR, NoSuccessor],
]);

const UNAVAILABLE_CODES = new Set<Code>([Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.CANCELLED, Code.UNKNOWN]);

/** The leasehold ErrorInfo in a status's trailing metadata, if any. */
export function errorInfo(metadata: Metadata | undefined): ErrorInfo | undefined {
  for (const raw of metadata?.get(DETAILS_KEY) ?? []) {
    if (typeof raw === "string") continue;
    let status: Status;
    try {
      status = Status.decode(raw);
    } catch {
      continue;
    }
    for (const d of status.details) {
      if (d.typeUrl.slice(d.typeUrl.lastIndexOf("/") + 1) !== ERROR_INFO_TYPE) continue;
      const info = ErrorInfo.decode(d.value);
      if (info.domain === DOMAIN) return info;
    }
  }
  return undefined;
}

/** The typed error for a status code, message and trailing metadata. */
export function fromStatus(code: Code, message: string, metadata?: Metadata): LeaseholdError {
  const info = errorInfo(metadata);
  const reason = info?.reason;
  let cls: ErrorClass | undefined = BY_REASON.get(reasonEnum(reason));
  if (!cls) {
    if (code === Code.INVALID_ARGUMENT) cls = InvalidArgument;
    else if (code === Code.UNAUTHENTICATED) cls = Unauthenticated;
    else if (code === Code.PERMISSION_DENIED) cls = PermissionDenied;
    else if (UNAVAILABLE_CODES.has(code)) cls = Unavailable;
    else cls = LeaseholdError;
  }
  return new cls(message || Code[code] || "error", code, reason, { ...(info?.metadata ?? {}) });
}

/** The typed error for a failed grpc-js call. */
export function fromServiceError(e: ServiceError | Error): LeaseholdError {
  if (e instanceof LeaseholdError) return e;
  const se = e as Partial<ServiceError>;
  if (typeof se.code !== "number") return new Unavailable(e.message, Code.UNKNOWN, undefined, {});
  return fromStatus(se.code, undoReserved(se.details ?? e.message), se.metadata);
}

/**
 * grpc-js decodes a status message (sent percent-encoded) with
 * `decodeURI`, which leaves the escapes of URI-reserved characters as they
 * are: a counted lease's slot job `nightly#1` would read `nightly%231`.
 * Those escapes are decoded here; any other `%` came through decoded.
 */
function undoReserved(message: string): string {
  return message.replace(/%(23|24|26|2B|2C|2F|3A|3B|3D|3F|40)/gi, (_, hex: string) =>
    String.fromCharCode(parseInt(hex, 16)),
  );
}
