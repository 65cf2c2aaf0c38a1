/**
 * Many renewals per message over one long-lived `KeepAlive` stream, with a
 * result per lease: what an `ElectorSet` renews its leases with, one
 * message every ttl/3 however many it holds.
 *
 * ```ts
 * const stream = client.keepAlive();
 * const out = await stream.renew([
 *   { job: "sync_eu", holder, token: 4n, ttlMs: 10_000 },
 *   { job: "sync_us", holder, token: 9n, ttlMs: 10_000 },
 * ]);
 * for (const o of out) if (o.kind !== "renewed") stopWork(o.job); // lost: o.lease is the job's lease now
 * stream.cancel();
 * ```
 */
import { type ClientDuplexStream, status as Code, type ServiceError } from "@grpc/grpc-js";
import { fromServiceError, fromStatus, type LeaseholdError } from "./errors";
import * as pb from "./gen/leasehold/v1/leasehold";
import { type Lease, leaseFromPb, type RenewedLease, toDuration } from "./types";

/** The most renewals the client puts in one message (the server takes up to 1000). */
export const MAX_RENEWALS_PER_MESSAGE = 1000;
/** The most encoded bytes of renewals in one message: well under the server's default limit of about 66 KiB. */
export const MAX_RENEWAL_BYTES = 48 * 1024;

/** One lease to renew: the fields of `renew`. */
export interface KeepAliveRenewal {
  job: string;
  holder: string;
  token: bigint;
  /** The new lifetime, counted from when the server handles it, ms. */
  ttlMs: number;
}

/**
 * The outcome of one renewal; branch on `kind`. `renewed`: our lease
 * (with `successorWaiting`; its `proof` is always empty on this stream).
 * `leaseLost` / `unknownToken`: the lease is not ours (any more, or ever):
 * `lease` is the job's lease now. `invalidArgument`: the entry was
 * malformed (`field`); nothing changed for it.
 */
export type KeepAliveOutcome =
  | { kind: "renewed"; job: string; lease: RenewedLease }
  | { kind: "leaseLost"; job: string; lease: Lease; message: string }
  | { kind: "unknownToken"; job: string; lease: Lease; message: string }
  | { kind: "invalidArgument"; job: string; field: string; message: string };

function outcomeFromPb(r: pb.KeepAliveResult): KeepAliveOutcome | undefined {
  const lease = leaseFromPb(r.lease);
  switch (r.outcome) {
    case pb.KeepAliveResult_Outcome.OUTCOME_RENEWED:
      return { kind: "renewed", job: r.job, lease: { ...lease, successorWaiting: r.successorWaiting } };
    case pb.KeepAliveResult_Outcome.OUTCOME_LEASE_LOST:
      return { kind: "leaseLost", job: r.job, lease, message: r.message };
    case pb.KeepAliveResult_Outcome.OUTCOME_UNKNOWN_TOKEN:
      return { kind: "unknownToken", job: r.job, lease, message: r.message };
    case pb.KeepAliveResult_Outcome.OUTCOME_INVALID_ARGUMENT:
      return { kind: "invalidArgument", job: r.job, field: r.field, message: r.message };
    default:
      return undefined;
  }
}

/**
 * Splits renewals into messages of at most 1000 and about 48 KiB (a larger
 * one goes alone). An empty batch is one empty message.
 */
export function splitRenewals(all: readonly pb.KeepAliveRenewal[]): pb.KeepAliveRenewal[][] {
  const out: pb.KeepAliveRenewal[][] = [[]];
  let bytes = 0;
  for (const r of all) {
    // The entry, its tag and its length prefix.
    const len = pb.KeepAliveRenewal.encode(r).finish().length + 4;
    let cur = out[out.length - 1];
    if (cur.length > 0 && (cur.length === MAX_RENEWALS_PER_MESSAGE || bytes + len > MAX_RENEWAL_BYTES)) {
      cur = [];
      out.push(cur);
      bytes = 0;
    }
    bytes += len;
    cur.push(r);
  }
  return out;
}

interface Waiter {
  results: KeepAliveOutcome[];
  left: number;
  resolve: (r: KeepAliveOutcome[]) => void;
  reject: (e: LeaseholdError) => void;
}

/**
 * One open `KeepAlive` stream (from `Client.keepAlive()`). Calls to
 * `renew` may overlap; each gets its own outcomes. When the stream breaks
 * (the server stops, the connection drops, `cancel()`), every pending and
 * later `renew` rejects with the typed error: open a new stream.
 */
export class KeepAlive {
  private nextId = 0n;
  private readonly sent: { id: bigint; count: number; waiter: Waiter }[] = [];
  private broken: LeaseholdError | undefined;
  private statusError: LeaseholdError | undefined;
  private ended = false;

  /** Made by `Client.keepAlive()`. */
  constructor(
    private readonly call: ClientDuplexStream<pb.KeepAliveRequest, pb.KeepAliveResponse>,
    private readonly bindToStream: boolean,
  ) {
    call.on("data", (resp: pb.KeepAliveResponse) => this.onResponse(resp));
    call.on("error", (e: ServiceError) => {
      this.statusError ??= fromServiceError(e);
    });
    call.on("end", () => this.finish());
    call.on("status", () => setImmediate(() => this.finish()));
  }

  /** Whether the stream has ended or broken: `renew` would reject. */
  get closed(): boolean {
    return this.ended || this.broken !== undefined;
  }

  /**
   * Renews every lease of `renewals`; resolves with one outcome per
   * renewal, in order, once the server has answered them all. Each is
   * decided on its own, as `renew` would decide it. Rejects with the
   * stream's typed error when it is broken.
   */
  renew(renewals: readonly KeepAliveRenewal[]): Promise<KeepAliveOutcome[]> {
    const messages = splitRenewals(
      renewals.map((r) => ({ job: r.job, holder: r.holder, token: r.token, ttl: toDuration(r.ttlMs) })),
    );
    const broken = this.broken ?? this.statusError ?? (this.ended ? fromStatus(Code.UNAVAILABLE, "keep-alive stream ended") : undefined);
    if (broken) return Promise.reject(broken);
    return new Promise<KeepAliveOutcome[]>((resolve, reject) => {
      const waiter: Waiter = { results: [], left: messages.length, resolve, reject };
      for (const m of messages) {
        this.nextId += 1n;
        this.sent.push({ id: this.nextId, count: m.length, waiter });
        this.call.write({ id: this.nextId, renewals: m, bindToStream: this.bindToStream });
      }
    });
  }

  /** Cancels the stream: pending and later renewals reject with `Unavailable`. */
  cancel(): void {
    if (this.ended) return;
    this.broken ??= fromStatus(Code.UNAVAILABLE, "keep-alive stream cancelled");
    this.call.cancel();
    this.finish();
  }

  private onResponse(resp: pb.KeepAliveResponse): void {
    if (this.ended) return;
    const head = this.sent[0];
    if (!head || resp.id !== head.id || resp.results.length !== head.count) {
      const expected = head ? `request ${head.id} with ${head.count}` : "no request";
      this.breakWith(fromStatus(Code.INTERNAL, `keep-alive response ${resp.id} with ${resp.results.length} results does not answer ${expected}`));
      return;
    }
    const outcomes: KeepAliveOutcome[] = [];
    for (const r of resp.results) {
      const o = outcomeFromPb(r);
      if (!o) {
        this.breakWith(fromStatus(Code.INTERNAL, `keep-alive result for ${JSON.stringify(r.job)} has no outcome (${r.outcome})`));
        return;
      }
      outcomes.push(o);
    }
    this.sent.shift();
    const w = head.waiter;
    w.results.push(...outcomes);
    if (--w.left === 0) w.resolve(w.results);
  }

  private breakWith(e: LeaseholdError): void {
    this.broken ??= e;
    this.call.cancel();
    this.finish();
  }

  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    this.broken ??= this.statusError ?? fromStatus(Code.UNAVAILABLE, "keep-alive stream ended");
    const waiters = new Set(this.sent.map((s) => s.waiter));
    this.sent.length = 0;
    for (const w of waiters) w.reject(this.broken);
  }
}
