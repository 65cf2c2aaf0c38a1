/**
 * The `ElectorSet`: one holder campaigning for many jobs, renewing every
 * lease it holds together over one `KeepAlive` stream. An EventEmitter:
 *
 * - `"elected"` (job: string, token: bigint) when it leads `job`,
 * - `"lost"` (job: string, token: bigint) when it stops leading `job` with
 *   that token (a loss, or `resign()`),
 * - `"error"` (job: string, error: LeaseholdError) when `job`'s campaign
 *   stopped on an error retrying cannot fix (only when listened for).
 *
 * ```ts
 * const set = new ElectorSet(client, "sync-worker", 10_000);
 * set.on("elected", (job, token) => startSync(job, token));
 * set.on("lost", (job) => stopSync(job));
 * set.campaign("sync_eu", "sync_us", "sync_ap");
 * // ...
 * await set.resign(); // releases every lease held
 * ```
 *
 * Each job has its own campaign, as an `Elector`'s: a waiting Acquire (a
 * release hands over at once), retried with the same backoff, a late grant
 * confirmed by a Renew. A lease held joins the set's one renewer, which
 * every ttl/3 sends one `KeepAliveRequest` carrying a renewal for every
 * held lease (split into messages of at most 1000) and reads one result per
 * lease, in order: a process leading a hundred jobs sends one message per
 * period, not a hundred calls.
 *
 * Each job steps down **no later than its own deadline**: the instant its
 * last successful grant or renewal was *sent*, plus the TTL, by a timer of
 * its own, even while the stream is stuck or the server frozen; `token(job)`
 * checks that deadline too. A `LEASE_LOST` or `UNKNOWN_TOKEN` result steps
 * that job alone down, and its campaign starts again. A broken stream is
 * opened again, with backoff, while the deadlines run. A campaign refused
 * with an error retrying cannot fix (`InvalidArgument`, `Unauthenticated`,
 * `PermissionDenied`) stops that job alone: `error(job)` keeps it. A
 * failure a campaign does not foresee is logged, steps that job down, and
 * its campaign starts again after a backoff.
 *
 * The set is one holder, `name@uuid` with a UUID made for it: two sets (or
 * a set and an `Elector`) in one process are different holders.
 */
import { EventEmitter } from "node:events";
import { performance } from "node:perf_hooks";
import type { Client } from "./client";
import type { ElectorLogger } from "./elector";
import { InvalidArgument, LeaseholdError, LeaseLost, PermissionDenied, Unauthenticated } from "./errors";
import type { KeepAlive } from "./keepalive";
import { Backoff, sleep, Warnings } from "./retry";
import { electorHolder } from "./types";

export interface ElectorSetOptions {
  /** Holder identity; default `name@<uuid>`, with a UUID made for this set. */
  holder?: string;
  /** Where warnings go; default console.warn (see `ElectorOptions.logger`). */
  logger?: ElectorLogger;
  /**
   * Binds every lease to the client's connection: the campaigns' Acquires
   * and the KeepAlive stream ask for it (see `ElectorOptions.bindToStream`
   * for what it trades).
   */
  bindToStream?: boolean;
  /**
   * Campaigns as a preferred candidate for every job (see
   * `ElectorOptions.preferred`). The set never yields on its own: hand a
   * job over with `client.transferLease`.
   */
  preferred?: boolean;
}

export interface ElectorSetEvents {
  /** We lead `job` with `token`. */
  elected: [job: string, token: bigint];
  /** We no longer lead `job` with `token`. */
  lost: [job: string, token: bigint];
  /** `job`'s campaign stopped on an error retrying cannot fix. */
  error: [job: string, error: LeaseholdError];
}

const now = () => performance.now();

function refused(e: unknown): e is InvalidArgument | Unauthenticated | PermissionDenied {
  return e instanceof InvalidArgument || e instanceof Unauthenticated || e instanceof PermissionDenied;
}

/** One lease we hold. */
interface Held {
  token: bigint;
  /** When the last successful grant or renewal was sent, plus the TTL. */
  deadline: number;
  /** Steps the job down at `deadline`. */
  timer: NodeJS.Timeout | undefined;
  /** Wakes the job's campaign: the lease is gone. */
  wake: () => void;
}

class TimedOut extends Error {}

/** Campaigns for several jobs and renews the leases it holds over one stream; see the module docs. */
export class ElectorSet extends EventEmitter<ElectorSetEvents> {
  readonly holder: string;
  private readonly held = new Map<string, Held>();
  private readonly errors = new Map<string, LeaseholdError>();
  private readonly campaigns = new Map<string, Promise<void>>();
  private readonly stop = new AbortController();
  private renewer: Promise<void> | undefined;
  private stream: KeepAlive | undefined;
  private resigning: Promise<void> | undefined;
  private readonly log: ElectorLogger;
  private readonly warnings = new Warnings();
  private readonly bindToStream: boolean;
  private readonly preferred: boolean;

  /**
   * A set that campaigns as `name@<uuid>` with `ttlMs` for every lease; add
   * jobs with `campaign`. An empty name or a TTL that is not positive
   * throws a `RangeError`.
   */
  constructor(
    private readonly client: Client,
    name: string,
    readonly ttlMs: number,
    options: ElectorSetOptions = {},
  ) {
    super();
    if (!name) throw new RangeError("name must not be empty");
    if (!(ttlMs > 0)) throw new RangeError("ttlMs must be positive");
    this.holder = options.holder ?? electorHolder(name);
    this.log = options.logger ?? { warn: (m) => console.warn(`leasehold elector set: ${m}`) };
    this.bindToStream = options.bindToStream ?? false;
    this.preferred = options.preferred ?? false;
  }

  /**
   * Starts campaigning for each of `jobs` (once per job: asking again does
   * nothing). An empty job throws a `RangeError`, as does a set that
   * resigned.
   */
  campaign(...jobs: string[]): this {
    for (const job of jobs) if (!job) throw new RangeError("job must not be empty");
    if (this.stop.signal.aborted) throw new RangeError("the set has resigned");
    for (const job of jobs) {
      if (this.campaigns.has(job)) continue;
      this.campaigns.set(job, this.campaignFor(job));
    }
    this.renewer ??= this.renewLoop();
    return this;
  }

  /** Every job campaigned for, in the order added. */
  get jobs(): string[] {
    return [...this.campaigns.keys()];
  }

  /** The token we lead `job` with; undefined when not leading it or past its deadline. */
  token(job: string): bigint | undefined {
    const h = this.held.get(job);
    return h !== undefined && now() < h.deadline ? h.token : undefined;
  }

  isLeader(job: string): boolean {
    return this.token(job) !== undefined;
  }

  /** Every job we lead now, with its token, ordered by job. */
  leading(): Map<string, bigint> {
    const out = new Map<string, bigint>();
    for (const job of [...this.held.keys()].sort()) {
      const t = this.token(job);
      if (t !== undefined) out.set(job, t);
    }
    return out;
  }

  /** The error that stopped `job`'s campaign, if one did. */
  error(job: string): LeaseholdError | undefined {
    return this.errors.get(job);
  }

  /**
   * Stops every campaign and the renewals, releases every lease held
   * (`"lost"` for each), and resolves once done. Each release is bounded
   * by its lease's deadline (at least 200 ms): past it the lease runs out
   * on its own. Later calls return the same promise.
   */
  resign(): Promise<void> {
    this.resigning ??= this.doResign();
    return this.resigning;
  }

  private async doResign(): Promise<void> {
    this.stop.abort();
    await Promise.all(this.campaigns.values());
    await this.renewer;
    const held = [...this.held];
    this.held.clear();
    await Promise.all(
      held.map(async ([job, h]) => {
        if (h.timer !== undefined) clearTimeout(h.timer);
        this.safeEmit("lost", job, h.token);
        try {
          await this.client.release(job, this.holder, h.token, { timeoutMs: Math.max(h.deadline - now(), 200) });
        } catch (e) {
          if (!(e instanceof LeaseLost)) this.log.warn(`${job}: release of token ${h.token} failed: ${(e as Error).message}`);
        }
      }),
    );
  }

  private safeEmit(event: "elected" | "lost", job: string, token: bigint): void {
    try {
      this.emit(event, job, token);
    } catch (e) {
      this.log.warn(`${event} listener threw: ${e}`);
    }
  }

  private retryWarn(message: string): void {
    this.log.debug?.(message);
    const n = this.warnings.allow(now());
    if (n !== undefined) this.log.warn(`${message} (${n} similar warnings suppressed)`);
  }

  /**
   * Campaigns for `job` until the set stops or a refusal. A failure no one
   * foresaw is logged, steps the job down if it was held, and the campaign
   * starts again after a backoff: never a job the set silently stops
   * campaigning for.
   */
  private async campaignFor(job: string): Promise<void> {
    const stop = this.stop.signal;
    const backoff = Backoff.campaign(this.ttlMs);
    while (!stop.aborted) {
      try {
        await this.campaignRounds(job);
        return;
      } catch (e) {
        // ElectorLogger has no error level: warn is the loudest it has.
        this.log.warn(`campaign for ${job} failed, campaigning again: ${(e as Error)?.stack ?? e}`);
        const h = this.held.get(job);
        if (h !== undefined) this.stepDown(job, h.token, "its campaign failed");
        await sleep(backoff.next(), stop);
      }
    }
  }

  /** Acquire (waiting), hold until lost, again, until stopped or refused. */
  private async campaignRounds(job: string): Promise<void> {
    const stop = this.stop.signal;
    const backoff = Backoff.campaign(this.ttlMs);
    const campaignWait = Math.min(Math.max(this.ttlMs * 3, 1000), 30_000);
    while (!stop.aborted) {
      const sent = now();
      let acquired;
      try {
        acquired = await this.client.acquire(job, this.holder, this.ttlMs, campaignWait, {
          timeoutMs: campaignWait + this.ttlMs,
          signal: stop,
          bindToStream: this.bindToStream,
          preferred: this.preferred,
        });
      } catch (e) {
        if (stop.aborted) {
          await this.releaseIfGranted(job);
          return;
        }
        if (refused(e)) {
          this.log.warn(`campaign for ${job} refused, not campaigning again: ${e.message}`);
          this.errors.set(job, e);
          if (this.listenerCount("error") > 0) {
            try {
              this.emit("error", job, e);
            } catch (thrown) {
              this.log.warn(`error listener threw: ${thrown}`);
            }
          }
          return;
        }
        this.retryWarn(`campaign for ${job}: acquire failed, retrying: ${(e as Error).message}`);
        await sleep(backoff.next(), stop);
        continue;
      }
      backoff.reset();
      if (!acquired.acquired) continue;
      const token = acquired.lease.token;
      const anchor = await this.anchor(job, token, sent);
      if (anchor === undefined || anchor + this.ttlMs <= now()) continue;
      if (stop.aborted) {
        await this.client.release(job, this.holder, token, { timeoutMs: Math.max(anchor + this.ttlMs - now(), 200) }).catch(() => {});
        return;
      }
      await this.hold(job, token, anchor);
    }
  }

  /**
   * The instant a fresh grant's TTL may be counted from (as the
   * Elector's): the Acquire's send if it came back quickly, else the send
   * of a confirming Renew. Undefined when it cannot be confirmed.
   */
  private async anchor(job: string, token: bigint, sent: number): Promise<number | undefined> {
    if (now() < sent + this.ttlMs / 10) return sent;
    const at = now();
    try {
      await this.client.renew(job, this.holder, token, this.ttlMs, { timeoutMs: this.ttlMs / 2 });
      return at;
    } catch (e) {
      this.log.warn(`${job}: granted token ${token}, but the confirming renew failed: ${(e as Error).message}`);
      return undefined;
    }
  }

  /** Leads `job` with `token` until it is lost or the set stops. */
  private hold(job: string, token: bigint, anchor: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const stop = this.stop.signal;
      const wake = () => {
        stop.removeEventListener("abort", wake);
        resolve();
      };
      const h: Held = { token, deadline: anchor + this.ttlMs, timer: undefined, wake };
      this.held.set(job, h);
      this.armDeadline(job, h);
      stop.addEventListener("abort", wake, { once: true });
      this.safeEmit("elected", job, token);
    });
  }

  /** Steps `job` down at its deadline, unless a renewal moves it first. */
  private armDeadline(job: string, h: Held): void {
    if (h.timer !== undefined) clearTimeout(h.timer);
    h.timer = setTimeout(() => {
      h.timer = undefined;
      if (now() >= h.deadline) this.stepDown(job, h.token, "its deadline passed without a renewal");
      else this.armDeadline(job, h); // a timer that fired a hair early
    }, Math.max(0, h.deadline - now()));
  }

  /** Stops leading `job` if we still lead it with `token`; its campaign starts again. */
  private stepDown(job: string, token: bigint, why: string): void {
    const h = this.held.get(job);
    if (h === undefined || h.token !== token) return;
    this.held.delete(job);
    if (h.timer !== undefined) clearTimeout(h.timer);
    this.log.warn(`${job}: stepped down (token ${token}): ${why}`);
    this.safeEmit("lost", job, token);
    h.wake();
  }

  /**
   * Stopped while an Acquire was in flight: the server may have granted it
   * just before the cancel. Best effort, briefly: release it if it is ours.
   */
  private async releaseIfGranted(job: string): Promise<void> {
    try {
      const lease = await this.client.getLease(job, { timeoutMs: 200 });
      if (lease.holder === this.holder) await this.client.release(job, this.holder, lease.token, { timeoutMs: 200 });
    } catch {
      // best effort
    }
  }

  /**
   * Renews every held lease every ttl/3 in one KeepAlive message (or more,
   * past 1000), and steps down a job whose renewal is refused. Deadlines
   * are not its business: each job's timer keeps it.
   */
  private async renewLoop(): Promise<void> {
    const stop = this.stop.signal;
    const every = this.ttlMs / 3;
    const retry = Backoff.renew(this.ttlMs);
    let next = now() + every;
    try {
      for (;;) {
        await sleep(next - now(), stop);
        if (stop.aborted) return;
        const batch = [...this.held].map(([job, h]) => ({ job, holder: this.holder, token: h.token, ttlMs: this.ttlMs }));
        if (batch.length === 0) {
          next = now() + every;
          continue;
        }
        const earliest = Math.min(...[...this.held.values()].map((h) => h.deadline));
        const sent = now();
        try {
          if (this.stream === undefined || this.stream.closed) {
            this.stream = this.client.keepAlive({ bindToStream: this.bindToStream });
          }
          const outcomes = await this.bounded(this.stream.renew(batch), Math.max(earliest - sent, 10));
          if (stop.aborted) return;
          batch.forEach((r, i) => {
            const o = outcomes[i];
            const h = this.held.get(r.job);
            if (h === undefined || h.token !== r.token) return; // stepped down meanwhile
            if (o.kind === "renewed") {
              h.deadline = sent + this.ttlMs;
              this.armDeadline(r.job, h);
            } else {
              this.stepDown(r.job, r.token, `renewal refused: ${o.message}`);
            }
          });
          next = sent + every;
          retry.reset();
        } catch (e) {
          if (stop.aborted) return;
          this.retryWarn(`keep-alive failed, opening it again: ${(e as Error).message}`);
          this.stream?.cancel();
          this.stream = undefined;
          next = now() + retry.nextBefore(earliest, now());
        }
      }
    } finally {
      this.stream?.cancel();
      this.stream = undefined;
    }
  }

  /** `p`, or a `TimedOut` rejection after `ms`, or as soon as the set stops. */
  private bounded<T>(p: Promise<T>, ms: number): Promise<T> {
    const stop = this.stop.signal;
    return new Promise<T>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        stop.removeEventListener("abort", onStop);
      };
      const onStop = () => {
        done();
        reject(new TimedOut("stopped"));
      };
      const timer = setTimeout(() => {
        done();
        reject(new TimedOut(`no answer within ${Math.round(ms)} ms`));
      }, ms);
      stop.addEventListener("abort", onStop, { once: true });
      p.then(
        (v) => {
          done();
          resolve(v);
        },
        (e) => {
          done();
          reject(e);
        },
      );
    });
  }
}
