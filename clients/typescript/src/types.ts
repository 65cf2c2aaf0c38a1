import { randomUUID } from "node:crypto";
import type { Duration } from "./gen/google/protobuf/duration";
import * as pb from "./gen/leasehold/v1/leasehold";

let processUuid = randomUUID();

/**
 * A holder identity for this process: `name@uuid`, with one UUID made at
 * process start. A restarted process is a new holder, never mistaken for
 * the old one. For one-off calls: an `Elector` never uses it (see
 * `electorHolder`).
 */
export function processHolder(name: string): string {
  return `${name}@${processUuid}`;
}

/**
 * A fresh holder identity for one elector: `name@uuid`, with a UUID made by
 * this call. Two electors for one job in one process are then two holders
 * to the server: at most one leads, each with its own tokens.
 */
export function electorHolder(name: string): string {
  return `${name}@${randomUUID()}`;
}

/** Whether `name` is the job of one of `job`'s slots, `"{job}#{k}"`. */
export function isSlotJob(job: string, name: string): boolean {
  return name.startsWith(`${job}#`) && /^\d+$/.test(name.slice(job.length + 1));
}

/** A job's lease, as the server reported it. Durations in milliseconds. */
export interface Lease {
  job: string;
  /** The live holder, or undefined when the job is free. */
  holder: string | undefined;
  /** The newest token; 0n if never granted. */
  token: bigint;
  /** The TTL of the live grant, in ms. */
  ttlMs: number | undefined;
  /** Time left when the server answered, in ms. */
  remainingMs: number | undefined;
  /** The principal of the server's policy that holds the lease; undefined without a policy or when free. */
  principal: string | undefined;
  /**
   * The grant's proof: a token the server signed, stating that it issued
   * `token` of `job` to `holder` (`verifyProof` checks it, with the keys
   * of `Client.getSigningKeys`). The same for every answer about one grant
   * (renewals keep it); a new grant has a new one. It proves the token was
   * issued, not that the lease is still live. Undefined when the job is
   * free, or the server signs nothing. docs/proofs.md.
   */
  proof: string | undefined;
  /**
   * The value the holder published with its grant (`AcquireOptions.value`)
   * or its last renewal that set one (`RenewOptions.value`): where to reach
   * the leader, say its address, for routing requests to it. At most 1024
   * bytes; empty when the job is free or the holder published nothing
   * (`value.toString()` reads it as UTF-8). Advisory: it says who the
   * holder said it is, not that it still leads. The token fences, not the
   * value.
   */
  value: Buffer;
  /**
   * In the answer to a counted Acquire (`AcquireOptions.slots`): the slot
   * granted, 0 to `slots - 1`, whose own job `job` names (`"{job}#{slot}"`).
   * 0 elsewhere, as `slots` is.
   */
  slot: number;
  /**
   * In the answer to a counted Acquire: the job's count of slots. 0
   * elsewhere (`getLease`, `observe` and renewals answer about one slot's
   * job as about any job).
   */
  slots: number;
}

/** The answer to `renew`: our lease, renewed, and whether a preferred candidate waits. */
export interface RenewedLease extends Lease {
  /**
   * A preferred candidate waits for the job (`AcquireOptions.preferred`)
   * and our grant is not a preferred one: hand over (`transferLease` to
   * the first in line) when it suits. Nothing is taken from us: we lead
   * until we release, transfer or let the lease expire.
   */
  successorWaiting: boolean;
}

/** The answer to `acquire`. */
export interface Acquired {
  /** Whether we hold the lease now. */
  acquired: boolean;
  /** Our lease when acquired, else the current holder's. */
  lease: Lease;
}

/** One Acquire waiting for a job, from `Client.listWaiters`. */
export interface Waiter {
  /** The waiting holder. */
  holder: string;
  /** The principal (of the server's policy) it asked as; undefined without a policy. */
  principal: string | undefined;
  /** It asked as a preferred candidate (`AcquireOptions.preferred`). */
  preferred: boolean;
}

/** The answer to `Client.listWaiters`: a job's line of waiting Acquires. */
export interface Waiters {
  /** The waiters, first in line first: the preferred ones, then the others, each first come, first served. At most the limit asked for. */
  waiters: Waiter[];
  /** How many wait in all (may be more than listed). */
  waiting: number;
}

/** A stored value. */
export interface Value {
  /** False when never written or deleted. */
  found: boolean;
  value: Buffer;
  /** The token of the write that stored it. */
  token: bigint;
  /** The key's version; 0n if never written. */
  version: bigint;
}

/** One live key. */
export interface KeyInfo {
  key: Buffer;
  token: bigint;
  version: bigint;
  /** The value's size in bytes. */
  size: number;
}

/** Why a watch event was sent. */
export enum EventKind {
  Unspecified = "UNSPECIFIED",
  Current = "CURRENT",
  Acquired = "ACQUIRED",
  Released = "RELEASED",
  Expired = "EXPIRED",
  /** The holder changed the lease's value (`Lease.value`): same holder, same token. */
  ValueChanged = "VALUE_CHANGED",
}

/** One event of `watch`: the lease after a change. */
export interface LeaseEvent {
  kind: EventKind;
  lease: Lease;
}

/**
 * One state of a job's lease, as `Client.observe` yields it: the lease
 * after a change (a free lease has no `holder`), and why it was sent.
 */
export interface LeaseChange extends Lease {
  /**
   * `Current` (the state when observing began), `Acquired` (a grant to a
   * new holder or a new token), `Released` or `Expired` (free now), or
   * `ValueChanged` (the holder changed its `value`: same holder and token).
   */
  kind: EventKind;
}

export function toDuration(ms: number): Duration {
  const nanosTotal = BigInt(Math.max(0, Math.round(ms * 1e6)));
  return { seconds: nanosTotal / 1_000_000_000n, nanos: Number(nanosTotal % 1_000_000_000n) };
}

function toMs(d: Duration | undefined): number | undefined {
  if (!d) return undefined;
  return Number(d.seconds) * 1000 + d.nanos / 1e6;
}

export function leaseFromPb(l: pb.Lease | undefined): Lease {
  return {
    job: l?.job ?? "",
    holder: l?.holder || undefined,
    token: l?.token ?? 0n,
    ttlMs: toMs(l?.ttl),
    remainingMs: toMs(l?.remaining),
    principal: l?.principal || undefined,
    proof: l?.proof || undefined,
    value: Buffer.from(l?.value ?? Buffer.alloc(0)),
    slot: l?.slot ?? 0,
    slots: l?.slots ?? 0,
  };
}

const KINDS: Record<number, EventKind> = {
  [pb.LeaseEvent_Kind.KIND_CURRENT]: EventKind.Current,
  [pb.LeaseEvent_Kind.KIND_ACQUIRED]: EventKind.Acquired,
  [pb.LeaseEvent_Kind.KIND_RELEASED]: EventKind.Released,
  [pb.LeaseEvent_Kind.KIND_EXPIRED]: EventKind.Expired,
  [pb.LeaseEvent_Kind.KIND_VALUE_CHANGED]: EventKind.ValueChanged,
};

export function eventFromPb(e: pb.LeaseEvent): LeaseEvent {
  return { kind: KINDS[e.kind] ?? EventKind.Unspecified, lease: leaseFromPb(e.lease) };
}

export type Bytes = string | Uint8Array;

/** The most bytes a lease's value may have (`Lease.value`); the server refuses more with `InvalidArgument`, field "value". */
export const MAX_VALUE_BYTES = 1024;

export function asBytes(b: Bytes): Buffer {
  return typeof b === "string" ? Buffer.from(b, "utf8") : Buffer.from(b);
}

/** How a tenure (one token's time as leader) ended; `Live` while it has not. */
export enum TenureEnd {
  /** Not ended: the holder leads now (or led when the server last started, and was not replaced since). */
  Live = "LIVE",
  /** The holder released it. */
  Released = "RELEASED",
  /** It ran out, and was next granted to the same holder (a new token) or to nobody yet. */
  Expired = "EXPIRED",
  /** It ran out, and another holder was granted the job. */
  TakenOver = "TAKEN_OVER",
  /** It ran out and the job was deleted (older servers only: DeleteJob now removes the history). */
  Deleted = "DELETED",
  /** `leasehold restore` released it. */
  Restored = "RESTORED",
  /** `leasehold recover` released it. */
  Recovered = "RECOVERED",
  /** Bound to its connection (`bindToStream`), which closed or reset. */
  ConnectionClosed = "CONNECTION_CLOSED",
  /** The holder handed it to a waiting successor (`transferLease`). */
  Transferred = "TRANSFERRED",
  /** The chaos API ended it on purpose (`chaos().expire`). */
  Chaos = "CHAOS",
  /** An end this client's proto does not know (a newer server's). */
  Unknown = "UNKNOWN",
}

const ENDS: Record<number, TenureEnd> = {
  [pb.Tenure_End.END_UNSPECIFIED]: TenureEnd.Live,
  [pb.Tenure_End.END_RELEASED]: TenureEnd.Released,
  [pb.Tenure_End.END_EXPIRED]: TenureEnd.Expired,
  [pb.Tenure_End.END_TAKEN_OVER]: TenureEnd.TakenOver,
  [pb.Tenure_End.END_DELETED]: TenureEnd.Deleted,
  [pb.Tenure_End.END_RESTORED]: TenureEnd.Restored,
  [pb.Tenure_End.END_RECOVERED]: TenureEnd.Recovered,
  [pb.Tenure_End.END_CONNECTION_CLOSED]: TenureEnd.ConnectionClosed,
  [pb.Tenure_End.END_TRANSFERRED]: TenureEnd.Transferred,
  [pb.Tenure_End.END_CHAOS]: TenureEnd.Chaos,
};

/**
 * One token's time as the job's leader, from `Client.history`. Its times
 * are on the server's wall clock, for people: no lease rule reads them.
 */
export interface Tenure {
  token: bigint;
  holder: string;
  /** The principal the grant was bound to (servers with a policy); else undefined. */
  principal: string | undefined;
  /** When it was granted. */
  grantedAt: Date | undefined;
  /** The TTL it was granted with (renewals may have changed it since), ms. */
  ttlMs: number | undefined;
  /** How it ended; `TenureEnd.Live` while it has not. */
  end: TenureEnd;
  /** When it ended (the release, or the deadline that passed); undefined while live. */
  endedAt: Date | undefined;
  /**
   * The value published with the grant (`AcquireOptions.value`, an
   * elector's `value`); empty when none. A later change by a renewal is
   * not recorded here.
   */
  value: Buffer;
}

/** One action of the chaos API on a job (a server run with `--enable-chaos`). */
export interface ChaosEvent {
  /** When, on the server's wall clock. */
  at: Date | undefined;
  /** "expire", "pause", "delay", "fence", "transfer" or "clear". */
  action: string;
  /** What it did, for people ("token 3 expired on purpose"). */
  detail: string;
}

/** One page of a job's history, from `Client.history`. */
export interface HistoryPage {
  /** Newest first. */
  tenures: Tenure[];
  /** Pass as `pageToken` for the older tenures; undefined on the last page. */
  nextPageToken: string | undefined;
  /** The chaos API's last actions on the job, newest first: on the first page only. */
  chaos: ChaosEvent[];
}

export function tenureFromPb(t: pb.Tenure): Tenure {
  return {
    token: t.token,
    holder: t.holder,
    principal: t.principal || undefined,
    grantedAt: t.grantedAt,
    ttlMs: toMs(t.ttl),
    end: ENDS[t.end] ?? TenureEnd.Unknown,
    endedAt: t.endedAt,
    value: Buffer.from(t.value),
  };
}

export function historyFromPb(r: pb.GetHistoryResponse): HistoryPage {
  return {
    tenures: r.tenures.map(tenureFromPb),
    nextPageToken: r.nextPageToken || undefined,
    chaos: r.chaos.map((c) => ({ at: c.at, action: c.action, detail: c.detail })),
  };
}
