/**
 * A lease held for the length of a block: `client.lock(job, { ttlMs })`
 * resolves to a held `Lock`, released by `await using` (it is
 * `AsyncDisposable`) or by `release()`; `client.withLock(job, opts, fn)`
 * runs `fn` while it holds the lease and releases it when `fn` settles.
 *
 * ```ts
 * await using lock = await client.lock("reports", { ttlMs: 10_000, timeoutMs: 30_000 });
 * await client.checkedWrite("reports", lock.token, "cursor", "42");
 * // released here, at the end of the block, normally or on a throw
 *
 * await client.withLock("reports", { ttlMs: 10_000 }, async (lock) => {
 *   await longTask({ signal: lock.signal }); // aborted if the lease is lost
 * });
 * ```
 *
 * Taking the lock waits for the lease (up to `timeoutMs`, then
 * `LockTimeout`; as long as it takes without one). While it is held, the
 * lock renews it every ttl/3 in the background.
 *
 * **If the lease is lost while the block runs** (a renewal is refused: the
 * lease expired and went to someone else; or no renewal succeeded by the
 * lock's own deadline, the instant the last successful grant or renewal
 * was *sent* plus the TTL, even if the server cannot be reached), the lock
 * cannot stop your code: it tells it. `signal` is aborted (its `reason` is
 * the `LeaseLost` error), `isHeld` turns false, `lost` true, `check()`
 * throws; and every write with `token` is `Fenced` once another holder has
 * the lease. Carry the token into every write, and hand `signal` to the
 * work. Leaving the block then throws nothing of its own.
 *
 * Each lock is its own holder, `name@uuid` with a UUID made for it: two
 * locks on one job exclude each other, in one process as in two (a lock is
 * not re-entrant).
 *
 * With `slots` (2 to 100) it is a counted lock (`consul lock -n N`): up
 * to that many locks on `job` are held at once, each in a slot of its
 * own, `"{job}#{k}"`, with its own token. `lock.leaseJob` names the
 * slot's job: the lock renews and releases it, and writes fenced by
 * `lock.token` must name it.
 *
 * ```ts
 * await using lock = await client.lock("nightly", { ttlMs: 10_000, slots: 2 }); // at most 2 at once
 * await client.checkedWrite(lock.leaseJob, lock.token, "progress", "started");
 * ```
 */
import { status as Code } from "@grpc/grpc-js";
import { performance } from "node:perf_hooks";
import type { Client } from "./client";
import type { ElectorLogger } from "./elector";
import {
  InvalidArgument,
  LeaseholdError,
  LeaseLost,
  LockTimeout,
  PermissionDenied,
  reasonString,
  Unauthenticated,
} from "./errors";
import { ErrorReason } from "./gen/leasehold/v1/leasehold";
import { abortError, Backoff, sleep, Warnings } from "./retry";
import { electorHolder } from "./types";

/** The holder name of a lock given none (the holder is `lock@uuid`). */
export const DEFAULT_LOCK_NAME = "lock";
/** The longest one waiting Acquire of a lock asks the server to wait, ms; a lock that waits longer asks again. */
const MAX_WAIT_MS = 30_000;

/** Options of `Client.lock` and `Client.withLock`. */
export interface LockOptions {
  /** The lease's TTL, ms: renewed every ttl/3; a loss is reported no later than a TTL after the last renewal sent. */
  ttlMs: number;
  /**
   * How long to wait for the lease, ms: past it, `lock` rejects with
   * `LockTimeout` and nothing is held. Undefined: as long as it takes; 0:
   * one try. Failures worth retrying (`Unavailable`) are retried with
   * backoff meanwhile; others (`InvalidArgument`, `PermissionDenied`,
   * `QuotaExceeded`...) reject at once.
   */
  timeoutMs?: number;
  /** The holder's name; the holder is `name@uuid`. Default "lock". */
  name?: string;
  /**
   * Stops waiting when aborted: `lock` rejects with an AbortError, and a
   * grant that came meanwhile is given back. (Not the lock's own
   * `signal`, which tells of its loss.)
   */
  signal?: AbortSignal;
  /** Where warnings go; default console.warn. `debug`, if given, gets every failed attempt. */
  logger?: ElectorLogger;
  /**
   * A counted lock (a semaphore) with this many slots, 2 to 100
   * (`AcquireOptions.slots`): up to that many locks on `job` are held at
   * once, each in its own slot's job, `"{job}#{k}"` (`Lock.leaseJob`),
   * with its own token. Another count than the job's, or over 100, rejects
   * with `InvalidArgument` (field "slots"). Default 0: the ordinary lock.
   */
  slots?: number;
}

const now = () => performance.now();

/** Errors a renewal cannot come back from: the lease is gone, or the server refuses the request or the caller. */
function final(e: unknown): boolean {
  return e instanceof LeaseLost || e instanceof InvalidArgument || e instanceof Unauthenticated || e instanceof PermissionDenied;
}

function lostError(job: string, token: bigint, why: string): LeaseLost {
  return new LeaseLost(
    `lock on ${JSON.stringify(job)} (token ${token}) lost: ${why}`,
    Code.FAILED_PRECONDITION,
    reasonString(ErrorReason.ERROR_REASON_LEASE_LOST),
    {},
  );
}

/**
 * A held lease on `job` (from `Client.lock`), renewed in the background
 * every ttl/3 until `release()` (or the end of an `await using` block).
 * See the module docs for what a loss does.
 */
export class Lock implements AsyncDisposable {
  private deadline: number;
  private lostWith: LeaseholdError | undefined;
  private releasing: Promise<void> | undefined;
  /** Aborted on loss (reason: the error) or once released. */
  private readonly ended = new AbortController();
  /** Stops the renewals. */
  private readonly stop = new AbortController();
  private readonly loop: Promise<void>;
  /** Reports the loss at our deadline, whatever the renewals are doing. */
  private deadlineTimer: NodeJS.Timeout | undefined;
  private readonly warnings = new Warnings();

  private constructor(
    private readonly client: Client,
    /** The job locked (with `slots`, the counted lease's: its slots' jobs are `"{job}#{k}"`). */
    readonly job: string,
    /**
     * The job our lease is on: `job`, or with `slots` the slot's own job,
     * `"{job}#{k}"`. Writes fenced by `token` name it.
     */
    readonly leaseJob: string,
    /** The slot we hold, with `slots`; else undefined. */
    readonly slot: number | undefined,
    /** Our holder identity, `name@uuid`, the UUID this lock's own. */
    readonly holder: string,
    readonly ttlMs: number,
    /** The fencing token of our grant. It stays after a loss or the release: writes with it are then fenced. */
    readonly token: bigint,
    /** The grant's proof (`Lease.proof`); undefined when the server signs nothing. It proves the token was issued, not that it is still held. */
    readonly proof: string | undefined,
    anchor: number,
    private readonly log: ElectorLogger,
  ) {
    this.deadline = anchor + ttlMs;
    this.armDeadline();
    this.loop = this.renewLoop(anchor);
  }

  /**
   * Waits for the lease on `job` and returns it held (see `LockOptions`);
   * `Client.lock` calls this.
   */
  static async acquire(client: Client, job: string, opts: LockOptions): Promise<Lock> {
    const { ttlMs, timeoutMs, signal } = opts;
    const name = opts.name ?? DEFAULT_LOCK_NAME;
    if (!job) throw new RangeError("job must not be empty");
    if (!name) throw new RangeError("name must not be empty");
    if (!(ttlMs > 0)) throw new RangeError("ttlMs must be positive");
    if (timeoutMs !== undefined && !(timeoutMs >= 0)) throw new RangeError("timeoutMs must not be negative");
    const slots = opts.slots ?? 0;
    if (!Number.isInteger(slots) || slots < 0) throw new RangeError("slots must be a non-negative integer");
    const log = opts.logger ?? { warn: (m: string) => console.warn(`leasehold lock: ${m}`) };
    const holder = electorHolder(name);
    const end = timeoutMs === undefined ? undefined : now() + timeoutMs;
    const backoff = Backoff.campaign(ttlMs);
    const warnings = new Warnings();
    for (;;) {
      if (signal?.aborted) throw abortError(signal.reason);
      const left = end === undefined ? MAX_WAIT_MS : Math.max(Math.min(end - now(), MAX_WAIT_MS), 0);
      const sent = now();
      let acquired;
      try {
        // Aborted, a waiting Acquire gives back a grant that came meanwhile.
        acquired = await client.acquire(job, holder, ttlMs, left, { signal, slots });
      } catch (e) {
        if (!(e instanceof LeaseholdError) || !e.retryable) throw e;
        const message = `lock on ${job}: acquire failed, retrying: ${e.message}`;
        log.debug?.(message);
        const n = warnings.allow(now());
        if (n !== undefined) log.warn(`${message} (${n} similar warnings suppressed)`);
        let pause = backoff.next();
        if (end !== undefined) {
          if (now() >= end) throw new LockTimeout(job, timeoutMs!, e);
          pause = Math.min(pause, end - now()); // and try once more at the end
        }
        await sleep(pause, signal);
        continue;
      }
      backoff.reset();
      if (acquired.acquired) {
        const token = acquired.lease.token;
        // A counted grant is on its slot's job: renewals, the release and writes name it.
        const leaseJob = slots >= 2 ? acquired.lease.job || job : job;
        const slot = slots >= 2 ? acquired.lease.slot : undefined;
        let anchor: number | undefined = sent;
        let proof = acquired.lease.proof;
        // A grant that came long after its Acquire was sent: a Renew
        // confirms it, and its send time anchors our deadline (counting
        // from the Acquire's send, it could already be near or past).
        if (now() >= sent + ttlMs / 10) {
          anchor = now();
          try {
            proof = (await client.renew(leaseJob, holder, token, ttlMs, { timeoutMs: ttlMs / 2 })).proof ?? proof;
          } catch (e) {
            log.warn(`lock on ${leaseJob}: granted token ${token}, but the confirming renew failed: ${(e as Error).message}`);
            anchor = undefined;
          }
        }
        if (anchor !== undefined) {
          if (signal?.aborted) {
            // Aborted while confirming: give the grant back rather than hand it out.
            await client.release(leaseJob, holder, token, { timeoutMs: Math.max(anchor + ttlMs - now(), 200) }).catch(() => {});
            throw abortError(signal.reason);
          }
          return new Lock(client, job, leaseJob, slot, holder, ttlMs, token, proof, anchor, log);
        }
      }
      if (end !== undefined && now() >= end) throw new LockTimeout(job, timeoutMs!);
    }
  }

  /**
   * Whether we hold the lease: not released, not lost, and before our own
   * deadline (even if no renewal has told us otherwise yet).
   */
  get isHeld(): boolean {
    return this.releasing === undefined && this.lostWith === undefined && now() < this.deadline;
  }

  /** Whether the lease was lost while we meant to hold it. False after a plain release. */
  get lost(): boolean {
    return this.lostWith !== undefined || (this.releasing === undefined && now() >= this.deadline);
  }

  /** Why the lease was lost (a `LeaseLost`, or the error that refused a renewal), else undefined. */
  get error(): LeaseholdError | undefined {
    return this.lostWith;
  }

  /**
   * Aborted once the lease is no longer held by this lock: on a loss (its
   * `reason` is the error, as `error`), and once released (an AbortError).
   * Hand it to the work the lock guards.
   */
  get signal(): AbortSignal {
    return this.ended.signal;
  }

  /** Throws unless `isHeld`: the loss's error, or a `LeaseLost` saying why. */
  check(): void {
    if (this.isHeld) return;
    if (this.lostWith) throw this.lostWith;
    throw lostError(this.leaseJob, this.token, this.releasing ? "released" : "its deadline passed without a renewal");
  }

  /**
   * Stops the renewals and releases the lease (also after a loss: past our
   * own deadline the server may still hold it for us, and a release with
   * our token frees nobody else's). Bounded by the deadline (at least
   * 200 ms); a release that fails is logged, and the lease then runs out on
   * its own. Never rejects; later calls return the same promise.
   */
  release(): Promise<void> {
    this.releasing ??= this.doRelease();
    return this.releasing;
  }

  /** `await using lock = await client.lock(...)`: releases at the end of the block. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }

  private async doRelease(): Promise<void> {
    this.stop.abort();
    this.disarmDeadline();
    await this.loop;
    if (!this.ended.signal.aborted) this.ended.abort(abortError(`lock on ${this.leaseJob} released`));
    try {
      await this.client.release(this.leaseJob, this.holder, this.token, { timeoutMs: Math.max(this.deadline - now(), 200) });
    } catch (e) {
      if (e instanceof LeaseLost) return;
      this.log.warn(`lock on ${this.leaseJob}: release of token ${this.token} failed (it runs out on its own): ${(e as Error).message}`);
    }
  }

  private armDeadline(): void {
    this.disarmDeadline();
    this.deadlineTimer = setTimeout(() => {
      if (this.releasing === undefined && now() >= this.deadline) {
        this.setLost(lostError(this.leaseJob, this.token, "its deadline passed without a renewal"));
      } else if (this.releasing === undefined && this.lostWith === undefined) {
        this.armDeadline(); // a timer that fired a hair early
      }
    }, Math.max(0, this.deadline - now()));
  }

  private disarmDeadline(): void {
    if (this.deadlineTimer !== undefined) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
  }

  private setLost(e: LeaseholdError): void {
    if (this.lostWith !== undefined || this.releasing !== undefined) return;
    this.lostWith = e;
    this.disarmDeadline();
    this.stop.abort();
    this.log.warn(`lock on ${this.leaseJob}: lease lost (token ${this.token}): ${e.message}`);
    this.ended.abort(e);
  }

  private async renewLoop(anchor: number): Promise<void> {
    const every = this.ttlMs / 3;
    const retry = Backoff.renew(this.ttlMs);
    const stop = this.stop.signal;
    let next = anchor + every;
    try {
      for (;;) {
        await sleep(Math.min(next, this.deadline) - now(), stop);
        if (stop.aborted) return;
        const at = now();
        if (at >= this.deadline) {
          this.setLost(lostError(this.leaseJob, this.token, "its deadline passed without a renewal"));
          return;
        }
        try {
          await this.client.renew(this.leaseJob, this.holder, this.token, this.ttlMs, {
            timeoutMs: Math.max(this.deadline - at, 1),
            signal: stop,
          });
        } catch (e) {
          if (stop.aborted) return;
          if (final(e)) {
            this.setLost(e as LeaseholdError);
            return;
          }
          if (!(e instanceof LeaseholdError)) throw e;
          const message = `lock on ${this.leaseJob}: renew of token ${this.token} failed, retrying: ${e.message}`;
          this.log.debug?.(message);
          const n = this.warnings.allow(now());
          if (n !== undefined) this.log.warn(`${message} (${n} similar warnings suppressed)`);
          next = now() + retry.nextBefore(this.deadline, now());
          continue;
        }
        if (stop.aborted) return;
        this.deadline = at + this.ttlMs;
        this.armDeadline();
        next = at + every;
        retry.reset();
      }
    } catch (e) {
      // Never die silently: count the lease as lost.
      this.setLost(lostError(this.leaseJob, this.token, `renewals failed: ${(e as Error).message}`));
    }
  }
}
