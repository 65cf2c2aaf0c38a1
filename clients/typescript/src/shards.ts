/**
 * A member of a shard group (`Shards.Join`): `client.joinShards(group,
 * name, shards, { ttlMs })` resolves to a `ShardMember`, an async iterable
 * of its `ShardEvent`s, once the server has answered JOINED.
 *
 * The server spreads the group's N shards over its live members and
 * streams this member's part: `assigned` with each shard's fencing token,
 * `revoked` when a shard is to move (stop its work, then `release` it),
 * `lost` when a holding ended without a revoke. `run(work)` does the
 * bookkeeping: it runs `work` per owned shard and, on a revoke, aborts
 * that work's signal and waits for its promise to settle **before**
 * acknowledging, so no shard's work runs on once it has moved.
 *
 * ```ts
 * const member = await client.joinShards("queue", "consumer", 16, { ttlMs: 10_000 });
 * await member.run(async (shard, signal) => {
 *   while (!signal.aborted) await consume(shard.shard, shard.job, shard.token, signal);
 * }, { signal: stop.signal }); // leaves when stop is aborted
 * ```
 *
 * The member renews its holdings every ttl/3 with a message on its
 * stream. If the stream breaks with a retryable error (the server
 * restarts, the connection is cut), every owned shard is reported `lost`
 * at once, so that no work runs unowned, and the member joins again
 * under the same identity, 100 ms apart doubling to 1 s, until it leaves:
 * the shards still its own are assigned again, with their tokens. Any
 * other error (`LeaseLost`: another stream joined as this member;
 * `PermissionDenied`...) ends the membership: the iteration throws it
 * and `run` rejects with it.
 */
import { type ClientDuplexStream, Metadata, status as Code, type ServiceError } from "@grpc/grpc-js";
import { fromServiceError, fromStatus, InvalidArgument, type LeaseholdError, reasonString } from "./errors";
import * as pb from "./gen/leasehold/v1/leasehold";
import { sleep } from "./retry";
import { electorHolder, toDuration } from "./types";

/** The most shards a group may have (`JoinRequest.shards`). */
export const MAX_SHARDS = 1024;
/** A member's TTL when `JoinShardsOptions.ttlMs` is not given, ms. */
export const DEFAULT_SHARD_TTL_MS = 10_000;
/** How long `leave()` waits for the server to end the stream (its shards freed), ms. */
const LEAVE_WAIT_MS = 5000;
const RECONNECT_FIRST_MS = 100;
const RECONNECT_MAX_MS = 1000;

/** One shard of a group, as its member owns it. */
export interface Shard {
  /** The shard, 0 to N-1. */
  shard: number;
  /** Its fencing token while this member owns it: write under `job` with it. */
  token: bigint;
  /** Its job, `"{group}/{shard}"`, with its own lease, token and fenced keys. */
  job: string;
}

/**
 * What the server tells a member about one shard; branch on `kind`.
 * `assigned`: the member owns it, with `token`. `revoked`: it is to
 * move: stop its work, then `release(shard)` it within the revoke's
 * timeout (until then it is still owned, and its token still writes).
 * `lost`: the member no longer owns it (it ran out, a revoke's timeout
 * passed, or the stream broke): stop its work; `token` is the one that
 * owned it.
 */
export interface ShardEvent extends Shard {
  kind: "assigned" | "revoked" | "lost";
}

/** Options of `Client.joinShards`. */
export interface JoinShardsOptions {
  /**
   * The TTL of the member's holdings, ms, within the server's range; the
   * member renews them every ttl/3. Default 10 s. A member that goes
   * silent (its process paused) keeps its shards until it runs out.
   */
  ttlMs?: number;
  /**
   * How long the member has to acknowledge a revoke, ms, before its shard
   * moves anyway (it is then told `lost`, and its writes are fenced).
   * Default: the TTL.
   */
  revokeTimeoutMs?: number;
  /**
   * How long to wait for the server's JOINED, on the first join and on
   * each join again after a break, ms. Default: the client's timeout.
   */
  timeoutMs?: number;
}

/** Options of `ShardMember.run`. */
export interface ShardRunOptions {
  /** Leaves the group when aborted: every work is aborted and settled first, then `run` resolves. */
  signal?: AbortSignal;
  /**
   * Called for each event as `run` handles it: `assigned` before the
   * shard's work starts, `revoked` once its work has settled, just before
   * the acknowledgement is sent, `lost` once its work has settled.
   */
  onEvent?: (event: ShardEvent) => void;
  /** A work's rejection, unless its signal was aborted; default console.warn. */
  onError?: (shard: Shard, error: unknown) => void;
}

/** The typed invalid-argument error naming `field`, as the server would send it. */
function invalid(field: string, message: string): InvalidArgument {
  return new InvalidArgument(message, Code.INVALID_ARGUMENT, reasonString(pb.ErrorReason.ERROR_REASON_INVALID_ARGUMENT), {
    field,
  });
}

/** A JoinRequest with every field at its default, then `fields`. */
function request(fields: Partial<pb.JoinRequest>): pb.JoinRequest {
  return { group: "", member: "", shards: 0, ttl: undefined, revokeTimeout: undefined, released: [], ...fields };
}

/** One Join stream, once JOINED. */
interface Stream {
  call: ClientDuplexStream<pb.JoinRequest, pb.JoinResponse>;
  /** Resolves once the stream has ended, however. */
  ended: Promise<void>;
}

/** One shard's work under `run`. */
interface Task {
  shard: Shard;
  abort: AbortController;
  settled: Promise<void>;
}

/**
 * A member of a shard group (from `Client.joinShards`; see the module
 * docs). Iterate it for its events (`for await (const e of member)`), one
 * reader at a time, or hand it a work with `run`. Breaking out of the
 * loop does not leave: `leave()` (or the end of an `await using` block)
 * does.
 */
export class ShardMember implements AsyncIterable<ShardEvent>, AsyncDisposable {
  /** The shards this member owns now (assigned, not released or lost), by shard. */
  private readonly owned = new Map<number, Shard>();
  private readonly queue: ShardEvent[] = [];
  /** Wakes the reader waiting for an event. */
  private wake: (() => void) | undefined;
  private reading = false;
  /** The error that ended the membership, once it did. */
  private failure: LeaseholdError | undefined;
  /** The stream joined on, while connected. */
  private stream: Stream | undefined;
  /** Acknowledgements made while no stream was joined: sent on the next. */
  private pendingAcks: number[] = [];
  private heartbeat: NodeJS.Timeout | undefined;
  /** Stops the joins again (and their backoff) once leaving. */
  private readonly stopping = new AbortController();
  private reconnecting: Promise<void> | undefined;
  private leaving: Promise<void> | undefined;
  /** `run`'s: aborts every work and waits for them to settle. */
  private stopWork: (() => Promise<void>) | undefined;

  private constructor(
    private readonly stub: pb.ShardsClient,
    private readonly first: pb.JoinRequest,
    private readonly ttlMs: number,
    private readonly timeoutMs: number,
    /** The group joined. */
    readonly group: string,
    /** This member's identity, `name@uuid`: the holder of its shards' leases. */
    readonly member: string,
    /** The group's count of shards. */
    readonly shards: number,
  ) {}

  /** Made by `Client.joinShards`. */
  static async join(
    stub: pb.ShardsClient,
    group: string,
    name: string,
    shards: number,
    opts: JoinShardsOptions,
    clientTimeoutMs: number,
  ): Promise<ShardMember> {
    // What is obviously bad is refused here, as the server would.
    if (group === "") throw invalid("group", "group must not be empty");
    if (!Number.isInteger(shards) || shards < 1 || shards > MAX_SHARDS) {
      throw invalid("shards", `shards must be 1 to ${MAX_SHARDS}, got ${shards}`);
    }
    const ttlMs = opts.ttlMs ?? DEFAULT_SHARD_TTL_MS;
    if (!(ttlMs > 0) || !Number.isFinite(ttlMs)) throw invalid("ttl", `ttl must be positive, got ${ttlMs} ms`);
    const revoke = opts.revokeTimeoutMs;
    if (revoke !== undefined && (!(revoke > 0) || !Number.isFinite(revoke))) {
      throw invalid("revoke_timeout", `revoke timeout must be positive, got ${revoke} ms`);
    }
    const member = electorHolder(name);
    const first = request({
      group,
      member,
      shards,
      ttl: toDuration(ttlMs),
      revokeTimeout: revoke === undefined ? undefined : toDuration(revoke),
    });
    const m = new ShardMember(stub, first, ttlMs, opts.timeoutMs ?? clientTimeoutMs, group, member, shards);
    await m.open();
    return m;
  }

  /** Whether the membership has ended: left, or ended by an error (`error`). */
  get closed(): boolean {
    return this.leaving !== undefined || this.failure !== undefined;
  }

  /** The error that ended the membership, if one did. */
  get error(): LeaseholdError | undefined {
    return this.failure;
  }

  /** The shards this member owns now: assigned and neither released nor lost, in order. */
  ownedShards(): Shard[] {
    return [...this.owned.values()].sort((a, b) => a.shard - b.shard);
  }

  /**
   * The events, in order: ends once the member left; throws the typed
   * error that ended the membership (after the `lost` events it caused).
   * One reader at a time.
   */
  async *[Symbol.asyncIterator](): AsyncIterator<ShardEvent> {
    if (this.reading) throw new TypeError("a ShardMember's events have one reader at a time");
    this.reading = true;
    try {
      for (;;) {
        const e = await this.next();
        if (e === undefined) return;
        yield e;
      }
    } finally {
      this.reading = false;
    }
  }

  /** The next event; undefined once left; throws the error that ended the membership. */
  private async next(): Promise<ShardEvent | undefined> {
    for (;;) {
      if (this.leaving) return undefined;
      const e = this.queue.shift();
      if (e) return e;
      if (this.failure) throw this.failure;
      await new Promise<void>((r) => (this.wake = r));
    }
  }

  private push(e: ShardEvent): void {
    this.queue.push(e);
    this.wakeReader();
  }

  private wakeReader(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /**
   * Acknowledges a revoke: the shard's work has stopped, and it may move
   * (to the member waiting for it, with the next token). A shard not being
   * revoked is ignored by the server. `run` calls it for you.
   */
  release(shard: number): void {
    if (this.closed) return;
    this.owned.delete(shard);
    if (this.stream) this.send(this.stream, request({ released: [shard] }));
    else this.pendingAcks.push(shard);
  }

  /**
   * Leaves the group: `run`'s works are aborted and settled first, then
   * the stream's sending side is closed, and the server frees every shard
   * at once to the members waiting for them. Resolves once the server has
   * ended the stream (at most about 5 s). The iteration then ends.
   * Idempotent.
   */
  leave(): Promise<void> {
    this.leaving ??= this.doLeave();
    return this.leaving;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.leave();
  }

  private async doLeave(): Promise<void> {
    this.wakeReader(); // the iteration ends
    this.stopping.abort();
    // No shard is handed over while its work may still run.
    await this.stopWork?.();
    this.stopBeating();
    const s = this.stream;
    if (s) {
      // Half-close: the server frees our shards, then ends the stream.
      s.call.end();
      await waitFor(s.ended, LEAVE_WAIT_MS);
      s.call.cancel();
    }
    await this.reconnecting;
  }

  /**
   * Runs `work` for each shard while this member owns it, until the
   * member leaves (`leave()`, or `opts.signal` aborted: then `run` leaves)
   * or the membership ends with an error (then `run` rejects with it). On
   * a revoke or a loss, the shard's work's `signal` is aborted and its
   * promise awaited (settled, resolved or rejected) **before** the revoke
   * is acknowledged, so no shard's work runs on once it has moved. The
   * signal's `reason` is the `revoked` or `lost` event that stopped it
   * (an AbortError when the member leaves). Once `run` settles, no work
   * runs.
   */
  async run(work: (shard: Shard, signal: AbortSignal) => Promise<void>, opts: ShardRunOptions = {}): Promise<void> {
    if (this.stopWork) throw new TypeError("a ShardMember runs one work at a time");
    const tasks = new Map<number, Task>();
    const onError =
      opts.onError ??
      ((shard: Shard, e: unknown) => console.warn(`leasehold: work for shard ${shard.shard} of ${this.group} failed: ${e}`));
    const stop = async (k: number, reason: unknown): Promise<void> => {
      const t = tasks.get(k);
      if (!t) return;
      tasks.delete(k);
      t.abort.abort(reason);
      await t.settled;
    };
    const stopAll = async (reason: unknown): Promise<void> => {
      await Promise.all([...tasks.keys()].map((k) => stop(k, reason)));
    };
    this.stopWork = () => stopAll(new DOMException("the member left the group", "AbortError"));
    const handle = async (e: ShardEvent): Promise<void> => {
      const shard: Shard = { shard: e.shard, token: e.token, job: e.job };
      try {
        // A revoke or a loss stops the work; so does an assignment again
        // (a join again after a break), before the new work starts.
        await stop(e.shard, e);
        if (e.kind === "assigned") {
          if (this.closed) return;
          opts.onEvent?.(e);
          const abort = new AbortController();
          const settled = (async () => {
            try {
              await work(shard, abort.signal);
            } catch (err) {
              if (!abort.signal.aborted) onError(shard, err);
            }
          })();
          tasks.set(e.shard, { shard, abort, settled });
        } else {
          opts.onEvent?.(e);
          if (e.kind === "revoked") this.release(e.shard);
        }
      } catch (err) {
        onError(shard, err); // onEvent threw
      }
    };
    // Each shard's events are handled in order, and the shards apart: a
    // work slow to stop delays its own shard's acknowledgement only.
    const chains = new Map<number, Promise<void>>();
    const onAbort = () => void this.leave();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    if (opts.signal?.aborted) onAbort();
    try {
      for await (const e of this) {
        const next = (chains.get(e.shard) ?? Promise.resolve()).then(() => handle(e));
        chains.set(e.shard, next);
        void next.then(() => {
          if (chains.get(e.shard) === next) chains.delete(e.shard);
        });
      }
    } finally {
      opts.signal?.removeEventListener("abort", onAbort);
      const reason = this.failure ?? new DOMException("the member left the group", "AbortError");
      await stopAll(reason);
      await Promise.all(chains.values());
      await stopAll(reason);
      this.stopWork = undefined;
    }
  }

  /**
   * Opens a Join stream and resolves once the server answers JOINED (then
   * the stream is this member's); rejects with the typed error of a
   * refusal, or `Unavailable` when no JOINED came within the timeout.
   */
  private open(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let call: ClientDuplexStream<pb.JoinRequest, pb.JoinResponse>;
      try {
        call = this.stub.join(new Metadata());
      } catch (e) {
        reject(fromServiceError(e as Error)); // a closed client
        return;
      }
      let joined = false;
      let statusError: LeaseholdError | undefined;
      let markEnded!: () => void;
      const stream: Stream = { call, ended: new Promise<void>((r) => (markEnded = r)) };
      let done = false;
      const timer = setTimeout(() => {
        statusError ??= fromStatus(Code.DEADLINE_EXCEEDED, `no answer to Join within ${this.timeoutMs} ms`);
        call.cancel();
      }, this.timeoutMs);
      // Left while joining again: no need to wait for the answer.
      const onStop = () => {
        if (!joined) call.cancel();
      };
      this.stopping.signal.addEventListener("abort", onStop, { once: true });
      call.on("data", (m: pb.JoinResponse) => {
        if (done) return;
        if (joined) {
          this.told(stream, m);
          return;
        }
        if (m.kind !== pb.JoinResponse_Kind.KIND_JOINED) {
          statusError ??= fromStatus(Code.UNAVAILABLE, "the server answered a Join with something other than JOINED");
          call.cancel();
          return;
        }
        joined = true;
        clearTimeout(timer);
        this.stopping.signal.removeEventListener("abort", onStop);
        if (this.leaving) {
          // Left while joining again: closing our side frees the shards.
          call.end();
        } else {
          this.attach(stream);
        }
        resolve();
      });
      call.on("error", (e: ServiceError) => {
        statusError ??= fromServiceError(e);
      });
      // The messages sent before the status are delivered first: `end`
      // comes after them; `status` (deferred) is the fallback.
      const finish = () => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        this.stopping.signal.removeEventListener("abort", onStop);
        markEnded();
        const e = statusError ?? fromStatus(Code.UNAVAILABLE, "the server ended the Join stream");
        if (!joined) reject(e);
        else this.broke(stream, e);
      };
      call.on("end", finish);
      call.on("status", () => setImmediate(finish));
      call.write(this.first);
    });
  }

  /** `stream` has joined: it carries the acknowledgements and heartbeats from now on. */
  private attach(stream: Stream): void {
    this.stream = stream;
    const acks = this.pendingAcks;
    this.pendingAcks = [];
    if (acks.length > 0) this.send(stream, request({ released: acks }));
    // Every message renews the member's holdings: an empty one every ttl/3.
    this.stopBeating();
    this.heartbeat = setInterval(() => {
      if (this.stream === stream) this.send(stream, request({}));
    }, Math.max(1, this.ttlMs / 3));
  }

  private stopBeating(): void {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }

  private send(stream: Stream, req: pb.JoinRequest): void {
    try {
      stream.call.write(req);
    } catch {
      // The stream is ending: its end reports it.
    }
  }

  /** One message of the joined `stream`. */
  private told(stream: Stream, m: pb.JoinResponse): void {
    if (this.stream !== stream || this.closed) return;
    const shard: Shard = { shard: m.shard, token: m.token, job: m.job };
    switch (m.kind) {
      case pb.JoinResponse_Kind.KIND_ASSIGNED: {
        // After a join again, the shards still ours come again: the same
        // holding is no news.
        const had = this.owned.get(shard.shard);
        if (had && had.token === shard.token && had.job === shard.job) return;
        this.owned.set(shard.shard, shard);
        this.push({ kind: "assigned", ...shard });
        return;
      }
      case pb.JoinResponse_Kind.KIND_REVOKED:
        this.push({ kind: "revoked", ...shard });
        return;
      case pb.JoinResponse_Kind.KIND_LOST:
        if (!this.owned.delete(shard.shard)) return;
        this.push({ kind: "lost", ...shard });
        return;
      default:
        return;
    }
  }

  /** The joined `stream` ended with `e`. */
  private broke(stream: Stream, e: LeaseholdError): void {
    if (this.stream !== stream) return;
    this.stream = undefined;
    this.stopBeating();
    if (this.leaving) return;
    // Stop every shard's work: it may move while we are away.
    for (const s of this.ownedShards()) this.push({ kind: "lost", ...s });
    this.owned.clear();
    if (!e.retryable) {
      this.fail(e);
      return;
    }
    this.reconnecting = this.reconnect();
  }

  private fail(e: LeaseholdError): void {
    this.failure ??= e;
    this.stopping.abort();
    this.wakeReader();
  }

  /** Joins again under the same identity, with backoff, until joined, left, or refused for good. */
  private async reconnect(): Promise<void> {
    let backoffMs = RECONNECT_FIRST_MS;
    while (!this.stopping.signal.aborted) {
      await sleep(backoffMs, this.stopping.signal);
      backoffMs = Math.min(backoffMs * 2, RECONNECT_MAX_MS);
      if (this.stopping.signal.aborted) return;
      try {
        await this.open();
        return;
      } catch (e) {
        const err = fromServiceError(e as Error);
        if (!err.retryable) {
          this.fail(err);
          return;
        }
      }
    }
  }
}

/** Waits for `p`, at most `ms`. */
async function waitFor(p: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

/** A group's member, as `Client.getGroup` shows it. */
export interface ShardGroupMember {
  /** The member's identity, as it joined (`name@uuid`). */
  member: string;
  /** The shards it owns, in order. */
  shards: number[];
}

/** A shard's owner, as `Client.getGroup` shows it. */
export interface ShardOwner {
  shard: number;
  /** The shard's job, `"{group}/{shard}"`. */
  job: string;
  /** Its owner's identity; undefined when it has none. */
  member: string | undefined;
  /** Its newest token; 0n when never owned. */
  token: bigint;
}

/** A group, as `Client.getGroup` shows it. */
export interface ShardGroup {
  group: string;
  /** The group's count of shards; 0 when it was never joined. */
  shards: number;
  /** Its live members. */
  members: ShardGroupMember[];
  /** Every shard, in order, with its owner, if any, and its newest token. */
  owners: ShardOwner[];
}

export function shardGroupFromPb(g: pb.ShardGroup): ShardGroup {
  return {
    group: g.group,
    shards: g.shards,
    members: g.members.map((m) => ({ member: m.member, shards: [...m.shards] })),
    owners: g.owners.map((o) => ({ shard: o.shard, job: o.job, member: o.member || undefined, token: o.token })),
  };
}
