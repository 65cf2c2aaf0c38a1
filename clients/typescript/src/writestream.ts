/**
 * Fenced writes over one long-lived `WriteStream`: a message per write
 * costs far less than a unary call, and the writes of one message share
 * one sync.
 *
 * ```ts
 * const stream = client.writeStream();
 * const out = await stream.write([
 *   { job: "reconcile", token, key: "cursor", value: "42" },
 *   { job: "reconcile", token, key: "pending" }, // no value: a delete
 * ]);
 * if (out.some((o) => o.kind === "fenced")) stopWork(); // not the leader any more
 * await stream.close();
 * ```
 */
import { type ClientDuplexStream, status as Code, type ServiceError } from "@grpc/grpc-js";
import { fromServiceError, fromStatus, InvalidArgument, type LeaseholdError, reasonString } from "./errors";
import * as pb from "./gen/leasehold/v1/leasehold";
import { asBytes, type Bytes } from "./types";

/** The most writes the client puts in one message (the server takes up to 1000). */
export const MAX_WRITES_PER_MESSAGE = 1000;
/**
 * The most encoded bytes of writes the client puts in one message, unless a
 * single write is larger: well under the server's default limit of about
 * 66 KiB.
 */
export const MAX_MESSAGE_BYTES = 48 * 1024;

const MAX_UINT64 = (1n << 64n) - 1n;

/**
 * One write on a `WriteStream`: the fields of `CheckedWrite`. With no
 * `value` (or with `delete: true`) it deletes the key; an empty value
 * (`""`) is a value, not a delete.
 */
export interface StreamWrite {
  /** The job whose token fences the key. */
  job: string;
  /** The writer's token, from its grant. */
  token: bigint;
  /** The key (a string is encoded as UTF-8). */
  key: Bytes;
  /** The value; undefined deletes the key. */
  value?: Bytes;
  /** Delete the key; `value` is then ignored. */
  delete?: boolean;
}

/** The key was stored durably (WRITTEN). */
export interface Written {
  /** The discriminant. */
  kind: "written";
  /** The key's new version: 1 for its first write, then one more per write or delete. */
  version: bigint;
}

/**
 * The token is not the job's live token (FENCED): the writer is not the
 * leader and must stop. Nothing was written.
 */
export interface FencedWrite {
  /** The discriminant. */
  kind: "fenced";
  /** The job's newest token. */
  currentToken: bigint;
  /** Why, in words; branch on `kind`, not on this. */
  message: string;
}

/** The token was never issued for the job (UNKNOWN_TOKEN). Nothing was written. */
export interface UnknownTokenWrite {
  /** The discriminant. */
  kind: "unknownToken";
  /** The job's newest token. */
  currentToken: bigint;
  /** Why, in words; branch on `kind`, not on this. */
  message: string;
}

/**
 * The write would add a key to a job at its limit of keys
 * (QUOTA_EXCEEDED, `--max-keys-per-job`). Nothing was written.
 */
export interface QuotaExceededWrite {
  /** The discriminant. */
  kind: "quotaExceeded";
  /** Why, naming the limit; branch on `kind`, not on this. */
  message: string;
}

/** The write was malformed (INVALID_ARGUMENT). Nothing was written. */
export interface InvalidWrite {
  /** The discriminant. */
  kind: "invalidArgument";
  /** The field at fault: "job", "token", "key" or "value". */
  field: string;
  /** What is wrong, naming the limit. */
  message: string;
}

/** The outcome of one write on a `WriteStream`; branch on `kind`. */
export type WriteOutcome = Written | FencedWrite | UnknownTokenWrite | QuotaExceededWrite | InvalidWrite;

/** The message for one write; throws InvalidArgument for a token that is no uint64. */
function toPb(w: StreamWrite): pb.CheckedWriteRequest {
  if (typeof w.token !== "bigint" || w.token < 0n || w.token > MAX_UINT64) {
    throw new InvalidArgument(
      `token must be a uint64 bigint, got ${String(w.token)}`,
      Code.INVALID_ARGUMENT,
      reasonString(pb.ErrorReason.ERROR_REASON_INVALID_ARGUMENT),
      { field: "token" },
    );
  }
  const del = w.delete === true || w.value === undefined;
  return {
    job: w.job,
    token: w.token,
    key: asBytes(w.key),
    value: del ? Buffer.alloc(0) : asBytes(w.value!),
    delete: del,
    // The stream takes tokens only: a write with a proof goes by checkedWrite.
    proof: "",
  };
}

function varintLength(n: bigint | number): number {
  let v = BigInt(n);
  let len = 1;
  while (v >= 0x80n) {
    v >>= 7n;
    len++;
  }
  return len;
}

/** The encoded size of one CheckedWriteRequest, as the protobuf encoder writes it. */
export function encodedLength(w: pb.CheckedWriteRequest): number {
  const bytesField = (n: number) => (n === 0 ? 0 : 1 + varintLength(n) + n);
  return (
    bytesField(Buffer.byteLength(w.job, "utf8")) +
    (w.token === 0n ? 0 : 1 + varintLength(w.token)) +
    bytesField(w.key.length) +
    bytesField(w.value.length) +
    (w.delete ? 2 : 0) +
    bytesField(Buffer.byteLength(w.proof, "utf8"))
  );
}

/**
 * Splits writes into messages of at most `MAX_WRITES_PER_MESSAGE` writes
 * and about `MAX_MESSAGE_BYTES` bytes (a larger write goes alone), as the
 * Rust client does. An empty batch is one empty message.
 */
export function splitWrites<T extends pb.CheckedWriteRequest>(all: readonly T[]): T[][] {
  const out: T[][] = [[]];
  let bytes = 0;
  for (const w of all) {
    // The write, its tag and its length prefix.
    const len = encodedLength(w) + 4;
    let cur = out[out.length - 1];
    if (cur.length > 0 && (cur.length === MAX_WRITES_PER_MESSAGE || bytes + len > MAX_MESSAGE_BYTES)) {
      cur = [];
      out.push(cur);
      bytes = 0;
    }
    bytes += len;
    cur.push(w);
  }
  return out;
}

/** One write() call waiting for its messages' answers. */
interface Waiter {
  results: WriteOutcome[];
  /** Messages not yet answered. */
  left: number;
  resolve: (r: WriteOutcome[]) => void;
  reject: (e: LeaseholdError) => void;
}

/** One sent message waiting for its answer. */
interface Sent {
  id: bigint;
  count: number;
  waiter: Waiter;
}

function outcomeFromPb(r: pb.WriteResult): WriteOutcome | undefined {
  switch (r.outcome) {
    case pb.WriteResult_Outcome.OUTCOME_WRITTEN:
      return { kind: "written", version: r.version };
    case pb.WriteResult_Outcome.OUTCOME_FENCED:
      return { kind: "fenced", currentToken: r.currentToken, message: r.message };
    case pb.WriteResult_Outcome.OUTCOME_UNKNOWN_TOKEN:
      return { kind: "unknownToken", currentToken: r.currentToken, message: r.message };
    case pb.WriteResult_Outcome.OUTCOME_QUOTA_EXCEEDED:
      return { kind: "quotaExceeded", message: r.message };
    case pb.WriteResult_Outcome.OUTCOME_INVALID_ARGUMENT:
      return { kind: "invalidArgument", field: r.field, message: r.message };
    default:
      return undefined;
  }
}

/**
 * One open `WriteStream` (from `Client.writeStream()`): fenced writes, one
 * or many per message, answered in order over one gRPC stream.
 *
 * Calls to `write` may overlap (from several async functions): each gets
 * its own outcomes, and the writes are made in the order the calls were
 * made.
 *
 * When the stream breaks (the server ends it with an error such as
 * `ShuttingDown`, `StorageError` or `DiskFull`, the connection drops, or it
 * is cancelled), every pending and later `write` rejects with that error,
 * and **the writes that were not answered may or may not have been made**:
 * open a new stream and read them back.
 */
export class WriteStream {
  private nextId = 0n;
  private readonly sent: Sent[] = [];
  /** Why the stream is broken, once it is. */
  private broken: LeaseholdError | undefined;
  /** The error status the stream ended with, until the answers before it are in. */
  private statusError: LeaseholdError | undefined;
  private closing = false;
  private ended = false;
  private readonly endedPromise: Promise<void>;
  private markEnded!: () => void;

  /** Made by `Client.writeStream()`, over a grpc-js WriteStream call. */
  constructor(private readonly call: ClientDuplexStream<pb.WriteStreamRequest, pb.WriteStreamResponse>) {
    this.endedPromise = new Promise((r) => (this.markEnded = r));
    call.on("data", (resp: pb.WriteStreamResponse) => this.onResponse(resp));
    call.on("error", (e: ServiceError) => {
      this.statusError ??= fromServiceError(e);
    });
    // The answers sent before the status are delivered first: `end` comes
    // after them; `status` (deferred) is the fallback.
    call.on("end", () => this.finish());
    call.on("status", () => setImmediate(() => this.finish()));
  }

  /**
   * Makes every write of `writes`, in order; resolves with one outcome per
   * write, in the same order, once the written ones are durable. A fenced
   * or malformed write does not stop the others, and a later write sees
   * the earlier ones (two writes to one key give versions n and n+1).
   *
   * Large batches are split into messages of at most 1000 writes and about
   * 48 KiB, sent back to back (pipelined). An empty batch is sent as one
   * empty message and resolves with `[]` once the writes before it are
   * answered.
   *
   * Rejects with the stream's typed error when the stream is broken: the
   * writes not answered may or may not have been made (read them back);
   * with `Unavailable` after `close()`; with `InvalidArgument` (field
   * "token", nothing sent) when a token is not a uint64 `bigint`.
   */
  async write(writes: readonly StreamWrite[]): Promise<WriteOutcome[]> {
    // Everything up to the sends is synchronous: overlapping calls keep
    // their order, and their messages stay contiguous in `sent`.
    const messages = splitWrites(writes.map(toPb));
    const broken = this.broken ?? this.statusError;
    if (broken) throw broken;
    if (this.closing) throw fromStatus(Code.UNAVAILABLE, "write stream closed");
    return new Promise<WriteOutcome[]>((resolve, reject) => {
      const waiter: Waiter = { results: [], left: messages.length, resolve, reject };
      for (const m of messages) {
        this.nextId += 1n;
        this.sent.push({ id: this.nextId, count: m.length, waiter });
        this.call.write({ id: this.nextId, writes: m });
      }
    });
  }

  /**
   * Half-closes the sending side and waits for the stream to end: the
   * server answers every write sent before, then ends the stream. Never
   * rejects; a pending write that the server did not answer rejects on its
   * own. Later writes reject with `Unavailable`.
   */
  async close(): Promise<void> {
    if (!this.closing) {
      this.closing = true;
      if (!this.ended && !this.broken) this.call.end();
    }
    await this.endedPromise;
  }

  /**
   * Cancels the stream at once: pending and later writes reject with
   * `Unavailable`, and the pending ones may or may not have been made.
   */
  cancel(): void {
    if (this.ended) return;
    this.broken ??= fromStatus(Code.UNAVAILABLE, "write stream cancelled");
    this.call.cancel();
    this.finish();
  }

  private onResponse(resp: pb.WriteStreamResponse): void {
    if (this.ended) return;
    const head = this.sent[0];
    if (!head || resp.id !== head.id || resp.results.length !== head.count) {
      const expected = head ? `request ${head.id} with ${head.count}` : "no request";
      this.breakWith(
        fromStatus(
          Code.INTERNAL,
          `write response ${resp.id} with ${resp.results.length} results does not answer ${expected}`,
        ),
      );
      return;
    }
    const outcomes: WriteOutcome[] = [];
    for (const r of resp.results) {
      const o = outcomeFromPb(r);
      if (!o) {
        this.breakWith(fromStatus(Code.INTERNAL, `write result with no outcome (${r.outcome}) in response ${resp.id}`));
        return;
      }
      outcomes.push(o);
    }
    this.sent.shift();
    const w = head.waiter;
    for (const o of outcomes) w.results.push(o);
    if (--w.left === 0) w.resolve(w.results);
  }

  /** A protocol violation: the stream can no longer be trusted. */
  private breakWith(e: LeaseholdError): void {
    this.broken ??= e;
    this.call.cancel();
    this.finish();
  }

  /** The stream has ended: fail whatever it did not answer. */
  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    // A clean end after close() with every write answered is no break;
    // anything else is.
    const clean = this.closing && this.sent.length === 0 && !this.statusError;
    if (!clean) this.broken ??= this.statusError ?? fromStatus(Code.UNAVAILABLE, "write stream ended");
    const waiters = new Set(this.sent.map((s) => s.waiter));
    this.sent.length = 0;
    for (const w of waiters) w.reject(this.broken!);
    this.markEnded();
  }
}
