/**
 * The `Elector`: campaign for a job, renew at ttl/3, step down on loss,
 * release on shutdown. An EventEmitter:
 *
 * - `"elected"` (token: bigint, proof: string | undefined) when it becomes
 *   leader, with the grant's proof (`Lease.proof`),
 * - `"lost"` (token: bigint) when it stops leading with that token.
 *
 * It campaigns with a waiting Acquire (a release hands over at once),
 * renews every ttl/3, and steps down **no later than its own deadline**:
 * the instant the last successful grant or renewal was *sent*, plus the
 * TTL. The server counts the TTL from when it *received* that request,
 * later, so the elector believes it has lost before the server can give
 * the lease away, even when the server cannot answer. `token` also checks
 * the deadline itself, so it turns undefined on time even if the event
 * loop was held up. What no elector can notice is its own process being
 * paused: carry the token into every write, so a stale leader is fenced.
 *
 * Each elector is its own holder, `name@uuid` with a UUID made for it, so
 * two electors for one job in one process compete as two processes would.
 *
 * Failed calls are retried with jittered exponential backoff: a campaign
 * from ttl/10 (10 to 100 ms) doubling up to 1 s, a renewal from ttl/10
 * doubling up to 1 s but never waiting past half the time left to its
 * deadline. Retry warnings come at most one every 5 s per elector, with the
 * count of those suppressed.
 *
 * An empty job or name, or a TTL that is not positive, throws a
 * `RangeError` from the constructor. A campaign the server refuses with an
 * error retrying cannot fix (`InvalidArgument`, such as a TTL over its
 * `--max-ttl`; `Unauthenticated`; `PermissionDenied`) is not retried: the
 * elector stops, `error` holds the error, `"error"` is emitted with it (when
 * there is a listener: an unheard `"error"` would crash the process) and
 * `elected()` rejects with it.
 *
 * - `"newLeader"` (holder: string, token: bigint, value: Buffer) for every
 *   grant of the job as the elector sees it: another holder's or its own,
 *   once per token and in token order (never a lower token after a higher
 *   one), with the value the holder published (`Lease.value`; empty when
 *   none). A change of value is not a new leader: it is not reported. With a
 *   listener for it, the elector keeps a `WatchLease` stream open while it
 *   runs (opened again with backoff if it breaks), and also reports what
 *   its campaign learns (its own grants, the holder a waiting Acquire found
 *   in place), so a broken watch delays a report of another's leadership,
 *   never of its own. Its own grant is reported just before `"elected"`
 *   (or a moment earlier, when the watch is faster than the Acquire's
 *   answer). A free job is not reported. Nothing is emitted once `resign()`
 *   has resolved.
 *
 * `transfer(to?)` hands the leadership to a waiting elector (or any
 * waiting Acquire) at once, with the next token: the elector reports the
 * end of its leadership (`"lost"`) and campaigns again, behind the
 * successor. With the option `bindToStream`, every Acquire of its
 * campaign binds the grant to the client's connection: the server
 * releases the lease at once when that connection closes or resets (the
 * process died), rather than after the TTL.
 *
 * With the option `preferred`, every Acquire of its campaign asks as a
 * preferred candidate: it waits ahead of the electors that are not
 * preferred, and a leader that is not preferred is told so on its
 * renewals. With `yieldToPreferred`, a leader so told hands over right
 * after that renewal, its safe point: it transfers to the first in line
 * (as `transfer()` does, reporting `"lost"`), then campaigns again behind
 * the successor. Nothing is taken from an elector that does not yield.
 *
 * With the option `value` (bytes, or a string sent as UTF-8), every
 * Acquire of its campaign publishes that value with the grant
 * (`Lease.value`: where to reach the leader, say its address).
 * `setValue(v)` changes it: the new value goes with the next renewal
 * while leading (with every renewal until one succeeds, then no more: the
 * server keeps it), or with the next Acquire. `leader()` asks the server
 * for the job's lease: who leads, with which token and value. The value
 * is advisory: the token fences, not the value.
 *
 * With the option `slots` (2 to 100), it campaigns for one slot of a
 * counted lease (a semaphore) on `job`: up to that many electors lead at
 * once, each in its own slot with its own token. Slot k is a job of its
 * own, `"{job}#{k}"`: while leading, `leaseJob()` names it and `slot()`
 * says k, and the elector renews, releases and transfers with that name;
 * writes fenced by its token must name it too. A campaign after a loss
 * asks for `job` with `slots` again, and may land in another slot. A
 * counted lease has no one leader: `"newLeader"` is not emitted (the
 * job's own lease is the line's turn, held for the first waiter), and
 * `leader()` shows that turn; ask `client.getLease("{job}#{k}")` for a
 * slot's holder.
 */
import { EventEmitter } from "node:events";
import { performance } from "node:perf_hooks";
import { status as Code } from "@grpc/grpc-js";
import type { CallOptions, Client } from "./client";
import { InvalidArgument, LeaseholdError, LeaseLost, PermissionDenied, Unauthenticated } from "./errors";
import { abortError, Backoff, sleep, Warnings } from "./retry";
import { asBytes, type Bytes, electorHolder, isSlotJob, type Lease, MAX_VALUE_BYTES, type RenewedLease } from "./types";

export interface ElectorOptions {
  /** Holder identity; default `name@<uuid>`, with a UUID made for this elector. */
  holder?: string;
  /**
   * Where warnings go; default console.warn. Retry warnings come at most
   * one every 5 s, with the count of those suppressed; `debug`, if given,
   * gets every failed attempt.
   */
  logger?: ElectorLogger;
  /**
   * Binds every grant of the campaign to the client's connection (default
   * false; `AcquireOptions.bindToStream`): when the client's end of the
   * connection closes or resets, as when this process dies, the server
   * releases the lease at once and the next elector is granted the next
   * token, instead of after the TTL. Silence (the process paused, a
   * partition) releases nothing: the TTL and this elector's own deadline
   * apply as always. The trade: a live leader whose connection is cut (a
   * proxy that closes it, a reconnect of the channel) loses its lease at
   * once; it steps down on its next renewal, and its writes are fenced.
   */
  bindToStream?: boolean;
  /**
   * Campaigns as a preferred candidate (default false;
   * `AcquireOptions.preferred`): every Acquire of the campaign waits ahead
   * of the Acquires that are not preferred (first come, first served
   * within each class), and a leader whose grant was not a preferred one
   * is told on each renewal that we wait (`RenewedLease.successorWaiting`).
   * It hands over only if it yields (`yieldToPreferred`), a `transfer()`
   * or a release; otherwise we are granted the lease when it frees up, as
   * always, ahead of the others. A grant we win is a preferred one: no
   * other preferred candidate's waiting is reported to us.
   */
  preferred?: boolean;
  /**
   * Yields to a preferred candidate (default false): when a renewal's
   * answer says that one waits (`RenewedLease.successorWaiting`), the
   * elector hands over right after that renewal, its safe point: it
   * transfers the lease to the first in line, exactly as `transfer()`
   * does (`"lost"` with its token; the successor leads with token + 1),
   * then campaigns again, behind the successor. If the candidate left
   * meanwhile (`NoSuccessor`) it goes on leading, and if the lease was no
   * longer ours (`LeaseLost`) it steps down as on any loss. A leader
   * without this option is told too, and keeps the lease.
   */
  yieldToPreferred?: boolean;
  /**
   * A value to publish with every grant of the campaign (`Lease.value`;
   * a string is sent as UTF-8): where to reach this elector when it leads,
   * say its address, so that followers can route to the leader
   * (`leader()`, `"newLeader"`, `client.observe`). At most 1024 bytes
   * (`MAX_VALUE_BYTES`; more throws `InvalidArgument`, field "value").
   * Default: none. Change it with `setValue`. Advisory: the token fences,
   * not the value.
   */
  value?: Bytes;
  /**
   * Campaigns for a slot of a counted lease (a semaphore) with this many
   * slots, 2 to 100 (`AcquireOptions.slots`): up to that many electors
   * lead at once, each in its own slot, with its own token. While leading,
   * `leaseJob()` names the slot's job, `"{job}#{k}"`, which the elector
   * renews, releases and transfers, and which writes fenced by its token
   * must name; `slot()` says k. Another count than the job's (fixed by its
   * first counted grant), or over 100, is refused (`InvalidArgument`,
   * field "slots"): the campaign stops on it. Default 0: the ordinary
   * lease (0 and 1 are the same). Not an integer, or negative: `RangeError`.
   */
  slots?: number;
}

export interface ElectorLogger {
  warn(message: string): void;
  debug?(message: string): void;
}

/** Options of `Elector.elected`. */
export interface ElectedOptions {
  /** Stops waiting when aborted: `elected` rejects with an AbortError. */
  signal?: AbortSignal;
  /** Stops waiting after this long: `elected` rejects with a DOMException named "TimeoutError". */
  timeoutMs?: number;
}

export interface ElectorEvents {
  /**
   * We lead with `token`; `proof` is its grant's proof (`Lease.proof`),
   * undefined if the server signs nothing; `leaseJob` the job the lease is
   * on (`leaseJob()`: a slot's job with `slots`, else the elector's job).
   */
  elected: [token: bigint, proof: string | undefined, leaseJob: string];
  lost: [token: bigint];
  /**
   * A grant of the job, to `holder` (ours included) with `token` and the
   * value it published (empty when none): once per token, in token order
   * (see the class docs). A change of value alone is not reported.
   */
  newLeader: [holder: string, token: bigint, value: Buffer];
  /** The campaign stopped on an error retrying cannot fix. */
  error: [error: LeaseholdError];
}

const now = () => performance.now();

/** `value` as bytes, refused with `InvalidArgument` (field "value") over `MAX_VALUE_BYTES`, as the server would. */
function checkedValue(value: Bytes): Buffer {
  const b = asBytes(value);
  if (b.length > MAX_VALUE_BYTES) {
    const message = `value is ${b.length} bytes, the limit is ${MAX_VALUE_BYTES} bytes`;
    throw new InvalidArgument(message, Code.INVALID_ARGUMENT, "INVALID_ARGUMENT", { field: "value" });
  }
  return b;
}

/**
 * Errors retrying cannot fix: the server refused the request itself (a TTL
 * out of its range, a job name too long) or the caller (its policy). An
 * elector stops campaigning on them.
 */
function refused(e: unknown): e is InvalidArgument | Unauthenticated | PermissionDenied {
  return e instanceof InvalidArgument || e instanceof Unauthenticated || e instanceof PermissionDenied;
}

class Stopped extends Error {}
class TimedOut extends Error {}
/** The tenure the lead loop runs was ended by `transfer()`. */
class Ended extends Error {}

/**
 * `Elector.transfer()` while the elector does not lead: no call was made.
 */
export class NotLeader extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotLeader";
  }
}

/** One leadership: its token, the job its lease is on, and what ends it early (a transfer, or a loss the transfer learned of). */
interface Tenure {
  token: bigint;
  /** The elector's job, or a counted lease's slot job (`"{job}#{k}"`). */
  job: string;
  ended: AbortController;
}

/** The job a grant is on and its slot: the grant's `Lease.job` for a counted lease, else the elector's job. */
interface Granted {
  job: string;
  /** The slot, for a counted lease; else undefined. */
  slot: number | undefined;
}

/** (one waiting Acquire's wait, renew period), as the Rust Elector; retries back off as `Backoff` says. */
function timing(ttlMs: number) {
  return {
    campaignWait: Math.min(Math.max(ttlMs * 3, 1000), 30_000),
    every: ttlMs / 3,
  };
}

export class Elector extends EventEmitter<ElectorEvents> {
  readonly holder: string;
  private readonly stop = new AbortController();
  private loop: Promise<void> | undefined;
  private leading: bigint | undefined;
  /** The proof of the grant of `leading`. */
  private leadingProof: string | undefined;
  /** The job and slot of the grant of `leading`. */
  private leadingOn: Granted | undefined;
  private deadline = 0;
  private finished = false;
  private refusal: LeaseholdError | undefined;
  private resolveFinished: () => void = () => {};
  private readonly finishedPromise = new Promise<void>((resolve) => (this.resolveFinished = resolve));
  private readonly log: ElectorLogger;
  private readonly warnings = new Warnings();
  private readonly bindToStream: boolean;
  private readonly preferred: boolean;
  private readonly yieldToPreferred: boolean;
  /** The count of a counted lease's slots; 0 for an ordinary lease. */
  private readonly slots: number;
  /** The tenure `lead` runs now, if any. */
  private tenure: Tenure | undefined;
  /** The highest token reported by `"newLeader"`; 0n before any. */
  private lastLeader = 0n;
  /** The watch behind `"newLeader"`, once a listener asked for it. */
  private watching: Promise<void> | undefined;
  /** Ends the watch: aborted once the elector has stopped. */
  private readonly watchStop = new AbortController();
  /** The value every Acquire publishes, and the one a renewal sends while `valueSet > valueSent`. */
  private value: Buffer;
  /** How many times the value was set (`setValue`). */
  private valueSet = 0;
  /** The `valueSet` of the newest value a successful grant or renewal published. */
  private valueSent = 0;

  constructor(
    private readonly client: Client,
    readonly job: string,
    name: string,
    readonly ttlMs: number,
    options: ElectorOptions = {},
  ) {
    super();
    if (!job) throw new RangeError("job must not be empty");
    if (!name) throw new RangeError("name must not be empty");
    if (!(ttlMs > 0)) throw new RangeError("ttlMs must be positive");
    this.holder = options.holder ?? electorHolder(name);
    this.log = options.logger ?? { warn: (m) => console.warn(`leasehold elector: ${m}`) };
    this.bindToStream = options.bindToStream ?? false;
    this.preferred = options.preferred ?? false;
    this.yieldToPreferred = options.yieldToPreferred ?? false;
    this.value = checkedValue(options.value ?? Buffer.alloc(0));
    const slots = options.slots ?? 0;
    if (!Number.isInteger(slots) || slots < 0) throw new RangeError("slots must be a non-negative integer");
    this.slots = slots;
    // A "newLeader" listener added while the elector runs starts the watch.
    (this as EventEmitter).on("newListener", (event: string | symbol) => {
      if (event === "newLeader" && this.loop && !this.finished) this.startWatching();
    });
  }

  /** The token we lead with; undefined when not leading or past our deadline. */
  get token(): bigint | undefined {
    return this.leading !== undefined && now() < this.deadline ? this.leading : undefined;
  }

  /**
   * The proof of the grant we lead with (`Lease.proof`: `verifyProof`
   * checks it; `checkedWrite`'s `proof` option writes with it); undefined
   * when `token` is, or when the server signs nothing.
   */
  get proof(): string | undefined {
    return this.token !== undefined ? this.leadingProof : undefined;
  }

  get isLeader(): boolean {
    return this.token !== undefined;
  }

  /**
   * The job our lease is on while we lead: the elector's job, or with
   * `slots` the slot's own job, `"{job}#{k}"`. Writes fenced by our token
   * name it. Undefined when `token` is.
   */
  leaseJob(): string | undefined {
    return this.token !== undefined ? this.leadingOn?.job : undefined;
  }

  /** The slot we lead in, with `slots`; undefined when we do not lead, or the lease is not counted. */
  slot(): number | undefined {
    return this.token !== undefined ? this.leadingOn?.slot : undefined;
  }

  /** A counted lease (`slots` 2 or more): no one leader, no `"newLeader"`. */
  private get counted(): boolean {
    return this.slots >= 2;
  }

  /** The error that stopped the campaign (the server refused it), else undefined. */
  get error(): LeaseholdError | undefined {
    return this.refusal;
  }

  /**
   * Publishes `value` (bytes, or a string as UTF-8; empty clears it) as the
   * lease's value: with the next renewal while leading, sent with every
   * renewal until one succeeds and then no more (the server keeps it); or
   * with the next Acquire of the campaign when not leading. Watchers see
   * the change (`EventKind.ValueChanged`); it is not a new leader, so
   * `"newLeader"` is not emitted. Returns at once. Over 1024 bytes it
   * throws `InvalidArgument` (field "value") and changes nothing.
   */
  setValue(value: Bytes): void {
    this.value = checkedValue(value);
    this.valueSet++;
  }

  /**
   * The job's lease as the server has it now (`getLease`): the leader's
   * `holder` (undefined when the job is free), its `token` and the `value`
   * it published, say its address, for routing requests to it. Advisory:
   * by the time it is used the lease may have moved; the token fences.
   * With `slots`, the job's own lease is the line's turn, held for the
   * first waiter: not a slot's holder.
   */
  leader(opts?: CallOptions): Promise<Lease> {
    return this.client.getLease(this.job, opts);
  }

  /**
   * The value to send with a renewal now (undefined: keep the server's)
   * and the `valueSet` it stands for; `published` records its success.
   */
  private pendingValue(): { value: Buffer | undefined; set: number } {
    return { value: this.valueSet > this.valueSent ? this.value : undefined, set: this.valueSet };
  }

  /** A grant or renewal that carried the value of `set` succeeded. */
  private published(set: number): void {
    if (set > this.valueSent) this.valueSent = set;
  }

  /** Starts campaigning (once). */
  start(): this {
    if (!this.loop) {
      this.loop = this.run();
      if (this.listenerCount("newLeader") > 0) this.startWatching();
    }
    return this;
  }

  /**
   * Resolves with the token once we lead; undefined once resigned. Rejects
   * with `error` when the campaign stopped on one; with an AbortError when
   * `opts.signal` is aborted first, and with a DOMException named
   * "TimeoutError" when `opts.timeoutMs` passes first.
   */
  elected(opts: ElectedOptions = {}): Promise<bigint | undefined> {
    const { signal, timeoutMs } = opts;
    if (signal?.aborted) return Promise.reject(abortError(signal.reason));
    if (this.leading !== undefined) return Promise.resolve(this.leading);
    if (this.finished) return this.refusal ? Promise.reject(this.refusal) : Promise.resolve(undefined);
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const cleanup = () => {
        this.off("elected", onElected);
        signal?.removeEventListener("abort", onAbort);
        if (timer !== undefined) clearTimeout(timer);
      };
      const onElected = (t: bigint) => {
        cleanup();
        resolve(t);
      };
      const onAbort = () => {
        cleanup();
        reject(abortError(signal?.reason));
      };
      this.once("elected", onElected);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          cleanup();
          reject(new DOMException(`not elected within ${timeoutMs} ms`, "TimeoutError"));
        }, timeoutMs);
      }
      void this.finishedPromise.then(() => {
        cleanup();
        if (this.refusal) reject(this.refusal);
        else resolve(undefined);
      });
    });
  }

  /** A retry warning: at most one every 5 s, with the count suppressed; every one at debug. */
  private retryWarn(message: string): void {
    this.log.debug?.(message);
    const n = this.warnings.allow(now());
    if (n !== undefined) this.log.warn(`${message} (${n} similar warnings suppressed)`);
  }

  /** Resolves once we no longer lead with the token we lead with now. */
  lost(): Promise<void> {
    const token = this.leading;
    if (token === undefined) return Promise.resolve();
    return new Promise((resolve) => {
      const onLost = (t: bigint) => {
        if (t === token) {
          this.off("lost", onLost);
          resolve();
        }
      };
      this.on("lost", onLost);
    });
  }

  /**
   * Stops campaigning, releases the lease if held, and waits for that. The
   * release is bounded by our deadline (at least 200 ms): past it the
   * lease runs out on its own.
   */
  async resign(): Promise<void> {
    this.stop.abort();
    await this.loop;
    this.finish();
    await this.watching;
  }

  /**
   * Hands the leadership to a waiting Acquire: the first in line, or the
   * first whose holder is `to` (another elector's `holder`). The successor
   * is granted our token + 1 at once, with no moment when the job is free;
   * its TTL is ours. Resolves to the successor's lease once this elector
   * has reported the end of its leadership (`"lost"` with its token, as for
   * any loss); it then campaigns again, its waiting Acquire behind the
   * successor, unless it is resigning.
   *
   * Rejects with `NotLeader` when it does not lead (no call is made); with
   * `NoSuccessor` when no such Acquire waits, and it goes on leading; with
   * `LeaseLost` when the lease was no longer ours, and it steps down
   * (`"lost"`); with any other error of the call (`Unavailable`...), and it
   * goes on leading as its renewals allow.
   */
  async transfer(to?: string): Promise<Lease> {
    const token = this.token;
    const tenure = this.tenure;
    if (token === undefined || tenure === undefined || tenure.token !== token || this.stop.signal.aborted) {
      throw new NotLeader(`not leading ${this.job}: nothing to transfer`);
    }
    return this.handOver(tenure, to);
  }

  /**
   * The transfer of `tenure`'s lease, for `transfer()` and for a yield to
   * a preferred candidate: on success, and on `LeaseLost`, the tenure is
   * ended (reported once, its lead loop woken); on any other error it
   * goes on.
   */
  private async handOver(tenure: Tenure, to?: string, opts?: { timeoutMs?: number }): Promise<Lease> {
    const { token } = tenure;
    let successor: Lease;
    try {
      successor = await this.client.transferLease(tenure.job, this.holder, token, to, undefined, opts);
    } catch (e) {
      if (e instanceof LeaseLost) {
        this.log.warn(`${tenure.job}: lease lost (token ${token}) on transfer: ${e.message}`);
        this.endTenure(tenure);
      }
      throw e;
    }
    this.endTenure(tenure);
    this.reportLeader(successor.holder, successor.token, successor.value);
    return successor;
  }

  /**
   * After a renewal that said a preferred candidate waits: hands the lease
   * to the first in line (`handOver`). True when the tenure ended (handed
   * over, or lost); false when it goes on: the candidate left
   * (`NoSuccessor`) or the call failed, and the next renewal says again.
   * The call is bounded by our `deadline`.
   */
  private async yieldLead(tenure: Tenure, deadline: number): Promise<boolean> {
    const { token } = tenure;
    try {
      const to = await this.handOver(tenure, undefined, { timeoutMs: Math.max(1, deadline - now()) });
      this.log.debug?.(`${this.job}: handed token ${token} over to a preferred candidate, ${to.holder} (token ${to.token})`);
      return true;
    } catch (e) {
      if (e instanceof LeaseLost) return true;
      if (e instanceof LeaseholdError) {
        this.log.debug?.(`${this.job}: hand-over of token ${token} to a preferred candidate failed: ${e.message}`);
        // Still ours, unless a transfer() ended it meanwhile.
        return tenure.ended.signal.aborted;
      }
      throw e;
    }
  }

  /**
   * Reports the end of `tenure` (once: a renewal that learned of it first
   * has reported it) and wakes its lead loop, which returns to campaigning.
   */
  private endTenure(tenure: Tenure): void {
    this.setFollower(tenure.token);
    tenure.ended.abort();
  }

  private finish() {
    if (this.finished) return;
    this.finished = true;
    this.watchStop.abort();
    this.resolveFinished();
  }

  /** Reports `holder` leading with `token` and `value` (`"newLeader"`), if above every token reported. */
  private reportLeader(holder: string | undefined, token: bigint, value: Buffer): void {
    // A counted lease has no one leader: its job's lease is the line's turn.
    if (this.counted || !holder || token <= this.lastLeader || this.finished) return;
    this.lastLeader = token;
    try {
      this.emit("newLeader", holder, token, value);
    } catch (e) {
      this.log.warn(`newLeader listener threw: ${e}`);
    }
  }

  private startWatching(): void {
    if (this.counted) return; // nothing to report (see reportLeader)
    this.watching ??= this.watchLeaders();
  }

  /**
   * Follows the job's lease on a `WatchLease` stream until the elector
   * stops, opening it again with the campaign's backoff when it breaks
   * (the first state of a new stream is the lease as it is, so a grant
   * missed meanwhile is still reported, if it is the newest). A watch
   * refused for good (`InvalidArgument`, `Unauthenticated`,
   * `PermissionDenied`) is not opened again: `"newLeader"` then hears
   * what the campaign learns only.
   */
  private async watchLeaders(): Promise<void> {
    const stop = this.watchStop.signal;
    const retry = Backoff.campaign(this.ttlMs);
    while (!stop.aborted) {
      let error: unknown;
      try {
        for await (const lease of this.client.observe(this.job, { signal: stop })) {
          retry.reset();
          // A ValueChanged event keeps the token: never a new leader.
          this.reportLeader(lease.holder, lease.token, lease.value);
        }
      } catch (e) {
        error = e;
      }
      if (stop.aborted) return;
      if (refused(error)) {
        this.log.warn(`watch of ${this.job} refused; newLeader hears what the campaign learns only: ${error.message}`);
        return;
      }
      this.retryWarn(`watch of ${this.job} ended, watching again: ${error instanceof Error ? error.message : "stream closed"}`);
      await sleep(retry.next(), stop);
    }
  }

  private safeEmit(event: "elected" | "lost", token: bigint, proof?: string, leaseJob?: string) {
    try {
      if (event === "elected") this.emit(event, token, proof, leaseJob ?? this.job);
      else this.emit(event, token);
    } catch (e) {
      this.log.warn(`${event} listener threw: ${e}`);
    }
  }

  /**
   * Awaits `p` until `deadline`; throws Stopped or TimedOut first, or
   * Ended once `ended` (a tenure's) is aborted.
   */
  private until<T>(start: (signal: AbortSignal) => Promise<T>, deadline: number, ended?: AbortSignal): Promise<T> {
    const ac = new AbortController();
    return new Promise<T>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.stop.signal.removeEventListener("abort", onStop);
        ended?.removeEventListener("abort", onEnded);
      };
      const onStop = () => {
        done();
        ac.abort();
        reject(new Stopped());
      };
      const onEnded = () => {
        done();
        ac.abort();
        reject(new Ended());
      };
      const timer = setTimeout(() => {
        done();
        ac.abort();
        reject(new TimedOut());
      }, Math.max(0, deadline - now()));
      if (this.stop.signal.aborted) return onStop();
      if (ended?.aborted) return onEnded();
      this.stop.signal.addEventListener("abort", onStop, { once: true });
      ended?.addEventListener("abort", onEnded, { once: true });
      start(ac.signal).then(
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

  private sleepUntil(when: number, ended?: AbortSignal): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    return this.until(
      () => new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, when - now())))),
      when + 1000,
      ended,
    ).finally(() => clearTimeout(timer));
  }

  private async run(): Promise<void> {
    const { campaignWait } = timing(this.ttlMs);
    const backoff = Backoff.campaign(this.ttlMs);
    try {
      for (;;) {
        const sent = now();
        const limit = campaignWait + this.ttlMs;
        // Every Acquire publishes the value as it is now.
        const valueSet = this.valueSet;
        const value = this.value;
        let acquired;
        try {
          acquired = await this.until(
            (signal) =>
              this.client.acquire(this.job, this.holder, this.ttlMs, campaignWait, {
                timeoutMs: limit,
                signal,
                bindToStream: this.bindToStream,
                preferred: this.preferred,
                value,
                slots: this.slots,
              }),
            sent + limit,
          );
        } catch (e) {
          if (e instanceof Stopped) {
            await this.releaseIfGranted();
            return;
          }
          if (e instanceof TimedOut) {
            this.retryWarn(`campaign for ${this.job}: acquire timed out`);
            continue;
          }
          if (refused(e)) {
            this.log.warn(`campaign for ${this.job} refused, not campaigning again: ${e.message}`);
            this.refusal = e;
            if (this.listenerCount("error") > 0) {
              try {
                this.emit("error", e);
              } catch (thrown) {
                this.log.warn(`error listener threw: ${thrown}`);
              }
            }
            return;
          }
          this.retryWarn(`campaign for ${this.job}: acquire failed, retrying: ${(e as Error).message}`);
          try {
            await this.sleepUntil(now() + backoff.next());
          } catch {
            return; // stopped
          }
          continue;
        }
        backoff.reset();
        if (!acquired.acquired) {
          this.reportLeader(acquired.lease.holder, acquired.lease.token, acquired.lease.value);
          continue;
        }
        this.published(valueSet);
        const token = acquired.lease.token;
        // A counted grant is on its slot's job: everything we do with the lease names it.
        const on: Granted = this.counted
          ? { job: acquired.lease.job || this.job, slot: acquired.lease.slot }
          : { job: this.job, slot: undefined };
        const anchor = await this.anchor(token, sent, acquired.lease, on.job);
        if (anchor === undefined) continue;
        if (await this.lead(token, on, anchor.at, anchor.proof, anchor.value)) return;
      }
    } catch (e) {
      this.log.warn(`elector for ${this.job} failed: ${(e as Error).stack ?? e}`);
      if (this.leading !== undefined) this.setFollower(this.leading);
    } finally {
      this.finish();
    }
  }

  /**
   * The instant our lease's TTL may be counted from: at or before the
   * server granted or last renewed it. A waiting Acquire may have been
   * granted long after it was sent; then a Renew sent now confirms the
   * lease and gives a fresh anchor. Undefined when it cannot. With the
   * grant's proof and value (`granted`'s, or the confirming renewal's).
   */
  private async anchor(
    token: bigint,
    sent: number,
    granted: Lease,
    job: string,
  ): Promise<{ at: number; proof: string | undefined; value: Buffer } | undefined> {
    if (now() < sent + this.ttlMs / 10) return { at: sent, proof: granted.proof, value: granted.value };
    const at = now();
    try {
      const pending = this.pendingValue();
      const renewed = await this.client.renew(job, this.holder, token, this.ttlMs, {
        timeoutMs: this.ttlMs / 2,
        value: pending.value,
      });
      if (pending.value !== undefined) this.published(pending.set);
      return { at, proof: renewed.proof ?? granted.proof, value: renewed.value };
    } catch (e) {
      this.log.warn(`${job}: granted token ${token}, but the confirming renew failed: ${(e as Error).message}`);
      return undefined;
    }
  }

  /**
   * Leads until lost or transferred (false) or told to stop (releases;
   * true).
   */
  private async lead(token: bigint, on: Granted, sent: number, proof: string | undefined, value: Buffer): Promise<boolean> {
    const tenure: Tenure = { token, job: on.job, ended: new AbortController() };
    this.tenure = tenure;
    try {
      return await this.leadTenure(tenure, on, sent, proof, value);
    } finally {
      if (this.tenure === tenure) this.tenure = undefined;
    }
  }

  private async leadTenure(
    tenure: Tenure,
    on: Granted,
    sent: number,
    proof: string | undefined,
    value: Buffer,
  ): Promise<boolean> {
    const { token, job } = tenure;
    const ended = tenure.ended.signal;
    const { every } = timing(this.ttlMs);
    const retry = Backoff.renew(this.ttlMs);
    let deadline = sent + this.ttlMs;
    this.setLeader(token, on, deadline, proof, value);
    let next = sent + every;
    for (;;) {
      // Ended by transfer(), which reported it: campaign again.
      if (ended.aborted) return false;
      try {
        await this.sleepUntil(Math.min(next, deadline), ended);
      } catch (e) {
        if (e instanceof Ended) return false;
        return this.resignLease(token, job, deadline);
      }
      const at = now();
      if (at >= deadline) {
        this.log.warn(`${job}: token ${token} reached its deadline without a renewal`);
        break;
      }
      let renewed: RenewedLease;
      // A value set since the last published one goes with this renewal.
      const pending = this.pendingValue();
      try {
        renewed = await this.until(
          (signal) =>
            this.client.renew(job, this.holder, token, this.ttlMs, {
              timeoutMs: deadline - at,
              signal,
              value: pending.value,
            }),
          deadline,
          ended,
        );
      } catch (e) {
        if (e instanceof Ended) return false;
        if (e instanceof Stopped) return this.resignLease(token, job, deadline);
        if (e instanceof TimedOut) {
          this.log.warn(`${job}: renew of token ${token} did not answer before the deadline`);
          break;
        }
        if (e instanceof LeaseLost || refused(e)) {
          this.log.warn(`${job}: lease lost (token ${token}): ${e.message}`);
          break;
        }
        this.retryWarn(`${job}: renew of token ${token} failed, retrying: ${(e as Error).message}`);
        next = now() + retry.nextBefore(deadline, now());
        continue;
      }
      deadline = at + this.ttlMs;
      next = at + every;
      retry.reset();
      if (pending.value !== undefined) this.published(pending.set);
      if (this.leading === token) {
        this.deadline = deadline;
        // The same proof, unless the server's signing key rotated.
        if (renewed.proof !== undefined) this.leadingProof = renewed.proof;
      }
      // Our safe point: just renewed, nothing else in flight. Resigning,
      // we release instead (on the next turn).
      if (renewed.successorWaiting && this.yieldToPreferred && !this.stop.signal.aborted) {
        if (await this.yieldLead(tenure, deadline)) return false;
      }
    }
    this.setFollower(token);
    return false;
  }

  private async resignLease(token: bigint, job: string, deadline: number): Promise<boolean> {
    this.setFollower(token);
    const until = Math.max(deadline, now() + 200);
    try {
      await this.client.release(job, this.holder, token, { timeoutMs: Math.max(until - now(), 1) });
    } catch (e) {
      if (e instanceof LeaseholdError) this.log.warn(`${job}: release of token ${token} failed: ${e.message}`);
      else throw e;
    }
    return true;
  }

  /**
   * Stopped while an Acquire was in flight: the server may have granted it
   * just before the cancel. Best effort, briefly: release the lease if it
   * is ours, rather than leave it to run out.
   */
  private async releaseIfGranted(): Promise<void> {
    try {
      // A counted grant would be on a slot's job; the job's own lease is
      // the line's turn, which the server ends with our waiting Acquire.
      const leases = this.counted
        ? (await this.client.listLeases(`${this.job}#`, { timeoutMs: 200 })).filter((l) => isSlotJob(this.job, l.job))
        : [await this.client.getLease(this.job, { timeoutMs: 200 })];
      for (const lease of leases) {
        if (lease.holder === this.holder) {
          await this.client.release(lease.job, this.holder, lease.token, { timeoutMs: 200 });
        }
      }
    } catch {
      // best effort
    }
  }

  private setLeader(token: bigint, on: Granted, deadline: number, proof: string | undefined, value: Buffer) {
    this.leading = token;
    this.leadingProof = proof;
    this.leadingOn = on;
    this.deadline = deadline;
    this.reportLeader(this.holder, token, value);
    this.safeEmit("elected", token, proof, on.job);
  }

  private setFollower(token: bigint) {
    if (this.leading !== token) return;
    this.leading = undefined;
    this.leadingProof = undefined;
    this.leadingOn = undefined;
    this.safeEmit("lost", token);
  }
}
