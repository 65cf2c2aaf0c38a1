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
   * new holder or a new token), `Released` or `Expired` (free now).
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
  };
}

const KINDS: Record<number, EventKind> = {
  [pb.LeaseEvent_Kind.KIND_CURRENT]: EventKind.Current,
  [pb.LeaseEvent_Kind.KIND_ACQUIRED]: EventKind.Acquired,
  [pb.LeaseEvent_Kind.KIND_RELEASED]: EventKind.Released,
  [pb.LeaseEvent_Kind.KIND_EXPIRED]: EventKind.Expired,
};

export function eventFromPb(e: pb.LeaseEvent): LeaseEvent {
  return { kind: KINDS[e.kind] ?? EventKind.Unspecified, lease: leaseFromPb(e.lease) };
}

export type Bytes = string | Uint8Array;

export function asBytes(b: Bytes): Buffer {
  return typeof b === "string" ? Buffer.from(b, "utf8") : Buffer.from(b);
}
