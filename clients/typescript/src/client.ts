/**
 * The promise-based `Client`. Durations are milliseconds, tokens and
 * versions are `bigint` (they are uint64 on the wire), keys and values are
 * `Buffer`s (a string is encoded as UTF-8). Every method rejects with a
 * typed `LeaseholdError`.
 */
import { readFileSync } from "node:fs";
import {
  credentials as grpcCredentials,
  type ChannelCredentials,
  type ClientOptions,
  type ClientReadableStream,
  type ClientUnaryCall,
  InterceptingCall,
  type Interceptor,
  Metadata,
  status as Code,
  type ServiceError,
} from "@grpc/grpc-js";
import { Chaos, type ChaosMethod } from "./chaos";
import { fromServiceError, LeaseholdError } from "./errors";
import { KeySet } from "./proof";
import { abortError } from "./retry";
import * as pb from "./gen/leasehold/v1/leasehold";
import { ChaosClient } from "./gen/leasehold/v1/chaos";
import {
  type Acquired,
  asBytes,
  type Bytes,
  eventFromPb,
  historyFromPb,
  type HistoryPage,
  isSlotJob,
  type KeyInfo,
  type Lease,
  type LeaseChange,
  type LeaseEvent,
  leaseFromPb,
  type RenewedLease,
  type Tenure,
  toDuration,
  type Value,
  type Waiters,
} from "./types";
import { KeepAlive } from "./keepalive";
import { Lock, type LockOptions } from "./lock";
import { type JoinShardsOptions, type ShardGroup, shardGroupFromPb, ShardMember } from "./shards";
import { TlsCredentials } from "./tls";
import { WriteStream } from "./writestream";

/**
 * The channel options every client sets, under any `channelOptions` given:
 * after the connection breaks, try again from 100 ms up to 1 s apart
 * (grpc-js's default grows to 120 s), so a client is back within about a
 * second of the server.
 */
export const RECONNECT_OPTIONS: Partial<ClientOptions> = {
  "grpc.initial_reconnect_backoff_ms": 100,
  "grpc.max_reconnect_backoff_ms": 1000,
};

/**
 * How long a cancelled waiting Acquire's give-back waits before it reads
 * the lease, ms: a grant made as the call was cancelled is made durable
 * before it is sent.
 */
const GIVE_BACK_AFTER_MS = 100;

/** One (job, holder) pair's Acquires and Renews through one client. */
interface Pair {
  /** The number of the newest call started (see `Calls.start`). */
  newest: number;
  /** Calls started and not ended. */
  inFlight: number;
  /** The highest token a call told its caller the holder holds; 0n for none. */
  told: bigint;
}

/**
 * Every (job, holder) pair of one client with an Acquire or Renew on its
 * way or a token told: what a cancelled waiting Acquire's give-back must
 * respect. A pair leaves when it has neither (a release through the client
 * forgets what was told), so the registry stays small.
 *
 * The give-back reads the lease and releases it if it is the holder's.
 * That is only safe if nothing told a caller of this client that the
 * holder leads with that token:
 * - no call of this client for the pair started after the cancelled one,
 *   and none is on its way: a retry may have been granted the lease, and
 *   been told;
 * - the token is above every token a call of this client was told for the
 *   pair: an earlier grant or renewal told its caller that it leads;
 * - the release is a give-back (`ReleaseRequest.giveBack`): the server
 *   keeps the lease if the holder asked again since the grant (an Acquire
 *   or Renew from anywhere, racing with the give-back).
 */
class Calls {
  private readonly pairs = new Map<string, Pair>();
  private last = 0;

  /** An Acquire or Renew of (`job`, `holder`) starts; end it with `Asking.end`. */
  start(job: string, holder: string): Asking {
    const n = ++this.last;
    const key = pairKey(job, holder);
    let p = this.pairs.get(key);
    if (p === undefined) {
      p = { newest: 0, inFlight: 0, told: 0n };
      this.pairs.set(key, p);
    }
    p.newest = n;
    p.inFlight++;
    return new Asking(this.pairs, key, n);
  }

  /** The holder released the pair's lease through this client: nothing told is live now. */
  released(job: string, holder: string): void {
    const key = pairKey(job, holder);
    const p = this.pairs.get(key);
    if (p === undefined) return;
    p.told = 0n;
    if (p.inFlight === 0) this.pairs.delete(key);
  }

  /**
   * A counted Acquire of the pair (`job`, `holder`) told its caller that
   * the holder leads `slotJob` (the slot's own job) with `token`: what a
   * give-back of that slot must respect, kept until its release.
   */
  toldSlot(slotJob: string, holder: string, token: bigint): void {
    const key = pairKey(slotJob, holder);
    let p = this.pairs.get(key);
    if (p === undefined) {
      p = { newest: 0, inFlight: 0, told: 0n };
      this.pairs.set(key, p);
    }
    if (token > p.told) p.told = token;
  }

  /**
   * Whether the give-back of call `n`, an Acquire of (`job`, `holder`),
   * may release `token` of `leaseJob`: `job` itself, or one of its slots'
   * jobs for a counted Acquire (see the class docs).
   */
  mayGiveBack(job: string, holder: string, n: number, leaseJob: string, token: bigint): boolean {
    const p = this.pairs.get(pairKey(job, holder));
    if (p !== undefined && (p.newest !== n || p.inFlight !== 0)) return false;
    const q = this.pairs.get(pairKey(leaseJob, holder));
    return q === undefined || (q.inFlight === 0 && token > q.told);
  }
}

function pairKey(job: string, holder: string): string {
  return JSON.stringify([job, holder]);
}

/** One Acquire or Renew on its way, registered in `Calls` until `end()`. */
class Asking {
  private ended = false;

  constructor(
    private readonly pairs: Map<string, Pair>,
    private readonly key: string,
    /** The call's number. */
    readonly n: number,
  ) {}

  /** The call told its caller that the holder leads with `token`. */
  told(token: bigint): void {
    const p = this.ended ? undefined : this.pairs.get(this.key);
    if (p !== undefined && token > p.told) p.told = token;
  }

  /** The call ended: answered, failed or cancelled. Idempotent. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    const p = this.pairs.get(this.key);
    if (p === undefined) return;
    p.inFlight--;
    if (p.inFlight === 0 && p.told === 0n) this.pairs.delete(this.key);
  }
}

/** The server the client talks to when given no target. */
export const DEFAULT_TARGET = "127.0.0.1:50051";
/** How long a call may take, on top of any time it asks the server to wait. */
export const DEFAULT_TIMEOUT_MS = 10_000;
const PAGE_SIZE = 1000;

/** Per-call options. */
export interface CallOptions {
  /** Bound on the call; default: the client's timeout (plus `wait`). */
  timeoutMs?: number;
  /**
   * Cancels the call when aborted: it then rejects with a DOMException
   * named "AbortError" (its `cause`: the leasehold error the call ended
   * with). A waiting `acquire` so aborted gives back a grant it may have
   * been given meanwhile (see `Client.acquire`).
   */
  signal?: AbortSignal;
}

/** Options of `Client.acquire`: the per-call options, and how to hold the grant. */
export interface AcquireOptions extends CallOptions {
  /**
   * Binds the grant to this client's connection (default false): when the
   * client's end of the connection closes or resets, as when its process
   * dies (its kernel sends FIN or RST), the server releases the lease at
   * once and the first waiter is granted the next token; the job's history
   * records the tenure's end as `END_CONNECTION_CLOSED`. A connection that
   * merely goes silent (the process paused, a partition) releases nothing:
   * the lease runs for its TTL as usual. The trade: a live holder whose
   * connection is cut (a proxy that closes it, a reconnect of the channel)
   * loses its lease at once, and its writes are then fenced.
   */
  bindToStream?: boolean;
  /**
   * Asks as a preferred candidate (default false): while it waits, it is
   * queued ahead of the waiting Acquires that are not preferred (first
   * come, first served within each class), and the live holder, unless
   * its own grant was a preferred one, is told so on every renewal
   * (`RenewedLease.successorWaiting`), so that it can hand over
   * (`transferLease`) when it suits it. Nothing is taken from the holder:
   * the lease changes hands only by release, transfer or expiry, as
   * always.
   */
  preferred?: boolean;
  /**
   * A value to publish with the grant (`Lease.value`): where to reach the
   * leader, say its address (a string is sent as UTF-8). At most 1024
   * bytes: more is refused with `InvalidArgument` (`field` "value") and
   * nothing changes. An Acquire of the live holder replaces the value
   * (with nothing, when undefined or empty). Advisory: the token fences,
   * not the value.
   */
  value?: Bytes;
  /**
   * Asks for one slot of a counted lease (a semaphore) on `job` with this
   * many slots, 2 to 100: up to that many holders at once. Undefined, 0 or
   * 1: the ordinary lease of one holder. Over 100 is refused with
   * `InvalidArgument` (`field` "slots").
   *
   * Slot k is a job of its own, `"{job}#{k}"`, with its own lease, token,
   * history and fenced keys. The grant's `Lease.job` names it (and
   * `Lease.slot` its number, `Lease.slots` the count): renew, release,
   * transfer and write with that name, not with `job`. The line is first
   * come, first served: a slot that frees goes to the first waiter. A live
   * holder of a slot that asks again is extended in its slot.
   *
   * The count is fixed by the job's first counted grant: an Acquire that
   * names another is refused with `InvalidArgument` (`field` "slots", the
   * message says the job's count) and changes nothing. While the first
   * waiter waits for a slot, the server holds `job`'s own lease for it
   * (the line's turn): `getLease(job)` shows that waiter, not a slot's
   * holder (ask `getLease("{job}#{k}")`); do not acquire `job` without
   * `slots`, which would hold the line up.
   */
  slots?: number;
}

/** Options of `Client.renew`: the per-call options, and the lease's value. */
export interface RenewOptions extends CallOptions {
  /**
   * Replaces the lease's value (`Lease.value`; a string is sent as UTF-8),
   * at most 1024 bytes; empty clears it. Undefined keeps it. Watchers see
   * a change (`EventKind.ValueChanged`).
   */
  value?: Bytes;
}

/** Options of `Client.checkedWrite` and `Client.delete`: the per-call options, and a proof. */
export interface WriteOptions extends CallOptions {
  /**
   * A grant's proof (`Lease.proof`), instead of the token: the server
   * verifies it with its own keys, takes the token from it and fences the
   * write exactly as with that token. Pass the token as `0n` (or the
   * proof's token: another one is refused). The proof's job must be the
   * write's; one that does not verify is refused with `InvalidArgument`
   * (`field` "proof"). So a service that is not the holder can forward
   * the holder's write.
   */
  proof?: string;
}

/** Options of `Client.history`: the per-call options, and which page. */
export interface HistoryOptions extends CallOptions {
  /** At most this many tenures; default (0 or undefined) the server's, 100; at most 1000. */
  pageSize?: number;
  /** The `nextPageToken` of the previous page of this job's history; undefined for the first. */
  pageToken?: string;
}

/** Options of `Client.observe`. */
export interface ObserveOptions {
  /**
   * Ends the observation when aborted: the stream is cancelled and the
   * iteration ends cleanly (no error). `AbortSignal.timeout(ms)` bounds it
   * in time.
   */
  signal?: AbortSignal;
}

/**
 * How to reach the server. Plaintext by default; TLS with `ca`/`caFile`,
 * a client certificate (`cert` + `key`, or the `*File` forms), or an
 * `https://` target; and a bearer `token` sent on every call.
 */
export interface ClientConfig {
  /** grpc-js channel credentials of your own (then no ca/cert/key); default: made from the options below. */
  credentials?: ChannelCredentials;
  /** grpc-js channel options. */
  channelOptions?: Partial<ClientOptions>;
  /** The default per-call timeout, ms. */
  timeoutMs?: number;
  /** The CA certificate(s) that signed the server's certificate, PEM (as node:tls takes them). */
  ca?: string | Buffer;
  /** `ca` from a PEM file. */
  caFile?: string;
  /** This client's certificate, PEM, for mutual TLS; needs `key`. */
  cert?: string | Buffer;
  /** `cert` from a PEM file. */
  certFile?: string;
  /** The private key of `cert`, PEM. */
  key?: string | Buffer;
  /** `key` from a PEM file. */
  keyFile?: string;
  /** A bearer secret of a principal in the server's policy, sent as `authorization: Bearer ...` on every call. */
  token?: string;
  /** The name the server's certificate must carry; default: the target's host. */
  serverName?: string;
}

/** Accepts `host:port`, `http://host:port` or `https://host:port` (as the Rust client does). */
export function normalizeTarget(target: string): string {
  for (const scheme of ["http://", "grpc://", "https://"]) {
    if (target.startsWith(scheme)) return target.slice(scheme.length).replace(/\/+$/, "");
  }
  return target;
}

function pem(what: string, value: string | Buffer | undefined, file: string | undefined): Buffer | undefined {
  if (value !== undefined && file !== undefined) throw new TypeError(`give ${what} or ${what}File, not both`);
  if (file !== undefined) return readFileSync(file);
  return value === undefined ? undefined : Buffer.from(value);
}

/** Adds the bearer token to every call, for a channel without TLS (grpc-js sends call credentials over TLS only). */
function bearerInterceptor(value: string): Interceptor {
  return (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set("authorization", value);
        next(metadata, listener);
      },
    });
}

/** The channel credentials and options for `config` (TLS, client certificate, bearer token). */
function security(target: string, config: ClientConfig): [ChannelCredentials, Partial<ClientOptions>] {
  const ca = pem("ca", config.ca, config.caFile);
  const cert = pem("cert", config.cert, config.certFile);
  const key = pem("key", config.key, config.keyFile);
  if ((cert === undefined) !== (key === undefined)) {
    throw new TypeError("a client certificate needs its key, and a key its certificate");
  }
  if (config.credentials && (ca !== undefined || cert !== undefined)) {
    throw new TypeError("give credentials, or ca/cert/key, not both");
  }
  const tls = ca !== undefined || cert !== undefined || target.startsWith("https://");
  // Our TLS credentials, not grpc-js's createSsl: they never send an IP
  // address as the TLS server name (which makes Node print a
  // DeprecationWarning), and still check the certificate against it (src/tls.ts).
  let creds =
    config.credentials ?? (tls ? new TlsCredentials(ca, key, cert, config.serverName || undefined) : grpcCredentials.createInsecure());
  const options: Partial<ClientOptions> = { ...RECONNECT_OPTIONS, ...config.channelOptions };
  if (config.serverName) {
    // Credentials of the caller's own are grpc-js's: they take the name from this option.
    if (config.credentials) options["grpc.ssl_target_name_override"] = config.serverName;
    options["grpc.default_authority"] = config.serverName;
  }
  if (config.token !== undefined) {
    const secret = config.token.trim();
    if (!/^[\x21-\x7e]+$/.test(secret)) {
      throw new TypeError("the bearer token must be non-empty printable ASCII without spaces");
    }
    const value = `Bearer ${secret}`;
    if (creds._isSecure()) {
      const bearer = grpcCredentials.createFromMetadataGenerator((_params, callback) => {
        const md = new Metadata();
        md.set("authorization", value);
        callback(null, md);
      });
      creds = grpcCredentials.combineChannelCredentials(creds, bearer);
    } else {
      options.interceptors = [...(options.interceptors ?? []), bearerInterceptor(value)];
    }
  }
  return [creds, options];
}

type Callback<Res> = (err: ServiceError | null, res: Res) => void;
type UnaryMethod<Req, Res> = (
  req: Req,
  md: Metadata,
  opts: { deadline: Date },
  cb: Callback<Res>,
) => ClientUnaryCall;

/** The events of one watch: an async iterable; `cancel()` ends it. */
export class Watch implements AsyncIterable<LeaseEvent> {
  private cancelled = false;
  constructor(private readonly call: ClientReadableStream<pb.LeaseEvent>) {}

  async *[Symbol.asyncIterator](): AsyncIterator<LeaseEvent> {
    try {
      for await (const msg of this.call as AsyncIterable<pb.LeaseEvent>) {
        yield eventFromPb(msg);
      }
    } catch (e) {
      if (this.cancelled && (e as ServiceError).code === Code.CANCELLED) return;
      throw fromServiceError(e as ServiceError);
    } finally {
      this.cancel();
    }
  }

  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.call.cancel();
  }
}

/** A client over one gRPC channel; share one per process. */
export class Client {
  private readonly leases: pb.LeasesClient;
  private readonly store: pb.FencedStoreClient;
  private readonly chaosStub: ChaosClient;
  private readonly shardsStub: pb.ShardsClient;
  private readonly timeoutMs: number;
  /** Acquires and Renews on their way, and tokens told, per (job, holder). */
  private readonly calls = new Calls();

  constructor(target: string = DEFAULT_TARGET, config: ClientConfig = {}) {
    const [creds, options] = security(target, config);
    const addr = normalizeTarget(target);
    this.leases = new pb.LeasesClient(addr, creds, options);
    // Share one channel between both services.
    this.store = new pb.FencedStoreClient(addr, creds, {
      ...options,
      channelOverride: this.leases.getChannel(),
    });
    this.chaosStub = new ChaosClient(addr, creds, { ...options, channelOverride: this.leases.getChannel() });
    this.shardsStub = new pb.ShardsClient(addr, creds, { ...options, channelOverride: this.leases.getChannel() });
    this.timeoutMs = config.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** Closes the channel. */
  close(): void {
    this.leases.close();
  }

  /**
   * The chaos API of a server started with `--enable-chaos`, for tests of
   * workers that must step down: `expire(job)`, `pause(job, durationMs)`,
   * `delay(job, byMs)`, `fence(job, writes)`, `transfer(job)`,
   * `clear(job?)` (see `Chaos`). Over this client's channel.
   */
  chaos(): Chaos {
    return new Chaos(<Req, Res>(method: ChaosMethod, req: Req, opts?: CallOptions) =>
      this.unary(this.chaosStub, this.chaosStub[method] as unknown as UnaryMethod<Req, Res>, req, opts),
    );
  }

  private unary<Req, Res>(
    svc: object,
    method: UnaryMethod<Req, Res>,
    req: Req,
    opts: CallOptions | undefined,
    extraMs = 0,
  ): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      const signal = opts?.signal;
      if (signal?.aborted) {
        reject(abortError(signal.reason));
        return;
      }
      const deadline = new Date(Date.now() + (opts?.timeoutMs ?? this.timeoutMs + extraMs));
      const onAbort = () => call.cancel();
      let call: ClientUnaryCall;
      try {
        call = method.call(svc, req, new Metadata(), { deadline }, (err, res) => {
          signal?.removeEventListener("abort", onAbort);
          if (err) reject(signal?.aborted ? abortError(fromServiceError(err)) : fromServiceError(err));
          else resolve(res);
        });
      } catch (e) {
        // grpc-js throws at once on a closed client ("Channel has been
        // shut down"): a typed Unavailable, as every other failure.
        reject(fromServiceError(e as Error));
        return;
      }
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /**
   * Asks for the lease on `job`; waits up to `waitMs` for it to free up.
   *
   * A waiting Acquire (`waitMs > 0`) that is aborted (`opts.signal`) or
   * times out gives back a grant it may have been given meanwhile, so that
   * the job is not held for a whole TTL by a holder that never learned its
   * token: the server releases a grant whose reply it could not deliver,
   * and for a reply that was on its way, 100 ms later the client reads the
   * lease and gives it back if its holder is `holder` (holders are unique
   * per elector, so that is never someone else's). A give-back never ends
   * a lease a caller was told it holds: not while another `acquire` or
   * `renew` of this client for the job and holder started since or is on
   * its way, not a token one of them was told, and not once the holder
   * asked again from anywhere (the server's `giveBack` release).
   *
   * With `opts.bindToStream` the grant is bound to this client's
   * connection: released at once when it closes or resets (see
   * `AcquireOptions.bindToStream`). With `opts.preferred` it asks as a
   * preferred candidate: queued ahead of the others, and the holder is
   * told that it waits (see `AcquireOptions.preferred`). With
   * `opts.value` it publishes a value with the grant, such as its address
   * (see `AcquireOptions.value`). With `opts.slots` (2 to 100) it asks for
   * a slot of a counted lease: the grant is on the slot's own job, which
   * `lease.job` names (see `AcquireOptions.slots`); a give-back then looks
   * for a grant on the slots' jobs.
   *
   * ```ts
   * const a = await client.acquire("nightly", holder, 60_000, 0, { slots: 2 });
   * if (a.acquired) await client.checkedWrite(a.lease.job, a.lease.token, "progress", "0"); // "nightly#0" or "nightly#1"
   * ```
   */
  async acquire(job: string, holder: string, ttlMs: number, waitMs = 0, opts?: AcquireOptions): Promise<Acquired> {
    const asking = this.calls.start(job, holder);
    try {
      let r: pb.AcquireResponse;
      try {
        r = await this.unary(
          this.leases,
          this.leases.acquire as UnaryMethod<pb.AcquireRequest, pb.AcquireResponse>,
          {
            job,
            holder,
            ttl: toDuration(ttlMs),
            wait: toDuration(waitMs),
            bindToStream: opts?.bindToStream ?? false,
            preferred: opts?.preferred ?? false,
            value: opts?.value === undefined ? Buffer.alloc(0) : asBytes(opts.value),
            slots: opts?.slots ?? 0,
          },
          opts,
          waitMs,
        );
      } catch (e) {
        const timedOut = e instanceof LeaseholdError && (e.code === Code.DEADLINE_EXCEEDED || e.code === Code.CANCELLED);
        if (waitMs > 0 && (opts?.signal?.aborted || timedOut)) {
          // The cancelled call has ended before its give-back looks.
          asking.end();
          this.giveBackLater(job, holder, asking.n, opts?.slots ?? 0);
        }
        throw e;
      }
      const lease = leaseFromPb(r.lease);
      if (r.acquired) {
        // A counted grant is on a slot's job: its renewals and release name that.
        if (lease.job !== job && lease.job !== "") this.calls.toldSlot(lease.job, holder, lease.token);
        else asking.told(lease.token);
      }
      return { acquired: r.acquired, lease };
    } finally {
      asking.end();
    }
  }

  /**
   * A cancelled waiting Acquire's give-back (the call numbered `n`):
   * releases, with `giveBack`, a grant of `holder` that no caller of this
   * client was told of. For a counted Acquire (`slots` 2 or more) the
   * grant would be on one of the slots' jobs, `"{job}#{k}"`: those are
   * looked at, never `job` itself, which holds the line's turn. Best
   * effort.
   */
  private giveBackLater(job: string, holder: string, n: number, slots: number): void {
    setTimeout(() => {
      void (async () => {
        try {
          const leases =
            slots >= 2
              ? (await this.listLeases(`${job}#`, { timeoutMs: 5000 })).filter((l) => isSlotJob(job, l.job))
              : [await this.getLease(job, { timeoutMs: 5000 })];
          for (const lease of leases) {
            if (lease.holder !== holder || !this.calls.mayGiveBack(job, holder, n, lease.job, lease.token)) continue;
            await this.unary(
              this.leases,
              this.leases.release as UnaryMethod<pb.ReleaseRequest, pb.ReleaseResponse>,
              { job: lease.job, holder, token: lease.token, giveBack: true },
              { timeoutMs: 5000 },
            );
          }
        } catch {
          // best effort: the lease runs out on its own
        }
      })();
    }, GIVE_BACK_AFTER_MS);
  }

  /**
   * Renews our live lease; rejects with LeaseLost when it is not ours.
   * Resolves to the renewed lease, with `successorWaiting`: true while a
   * preferred candidate waits for the job and our grant is not a
   * preferred one (see `AcquireOptions.preferred`): hand over
   * (`transferLease`) when it suits. With `opts.value` it replaces the
   * lease's value (empty clears it); without, the value is kept.
   */
  async renew(job: string, holder: string, token: bigint, ttlMs: number, opts?: RenewOptions): Promise<RenewedLease> {
    const asking = this.calls.start(job, holder);
    try {
      const r = await this.unary(
        this.leases,
        this.leases.renew as UnaryMethod<pb.RenewRequest, pb.RenewResponse>,
        { job, holder, token, ttl: toDuration(ttlMs), value: opts?.value === undefined ? undefined : asBytes(opts.value) },
        opts,
      );
      const lease = leaseFromPb(r.lease);
      asking.told(lease.token);
      return { ...lease, successorWaiting: r.successorWaiting };
    } finally {
      asking.end();
    }
  }

  /** Releases our lease; the first waiter is granted at once. */
  async release(job: string, holder: string, token: bigint, opts?: CallOptions): Promise<void> {
    await this.unary(
      this.leases,
      this.leases.release as UnaryMethod<pb.ReleaseRequest, pb.ReleaseResponse>,
      { job, holder, token, giveBack: false },
      opts,
    );
    this.calls.released(job, holder);
  }

  /**
   * Hands our live lease (`holder` with `token`) to a waiting Acquire, in
   * one step: the successor is granted `token + 1` with no moment when the
   * job is free, and its waiting Acquire returns at once. The successor is
   * the first waiter in line whose holder is `toHolder`, or the first in
   * line when `toHolder` is undefined (or empty). Its TTL is `ttlMs`, or
   * when undefined the TTL the lease has now. Resolves to the successor's
   * lease.
   *
   * Rejects with `NoSuccessor` when no such waiter waits (nothing changed:
   * we still lead), and with `LeaseLost` when the lease is no longer
   * `holder`'s with `token` (nothing changed either).
   */
  async transferLease(
    job: string,
    holder: string,
    token: bigint,
    toHolder?: string,
    ttlMs?: number,
    opts?: CallOptions,
  ): Promise<Lease> {
    const r = await this.unary(
      this.leases,
      this.leases.transferLease as UnaryMethod<pb.TransferLeaseRequest, pb.TransferLeaseResponse>,
      { job, holder, token, toHolder: toHolder ?? "", ttl: ttlMs === undefined ? undefined : toDuration(ttlMs) },
      opts,
    );
    // Nothing told for `holder` is live any more, as after a release.
    this.calls.released(job, holder);
    return leaseFromPb(r.lease);
  }

  /** The lease of `job` (token 0n and no holder if never granted). */
  async getLease(job: string, opts?: CallOptions): Promise<Lease> {
    const r = await this.unary(
      this.leases,
      this.leases.getLease as UnaryMethod<pb.GetLeaseRequest, pb.Lease>,
      { job },
      opts,
    );
    return leaseFromPb(r);
  }

  /**
   * The Acquires waiting for `job`, in line order: the preferred
   * candidates first, then the others, each first come, first served (the
   * order in which a release would hand the lease over). At most `limit`
   * of them (0, the default: the server's, 100; at most 1000), and
   * `waiting`, how many wait in all. A job nobody waits for, or that does
   * not exist, has an empty line.
   *
   * ```ts
   * const { waiters, waiting } = await client.listWaiters("bridge_health");
   * for (const w of waiters) console.log(w.holder, w.preferred ? "(preferred)" : "");
   * ```
   */
  async listWaiters(job: string, limit = 0, opts?: CallOptions): Promise<Waiters> {
    const r = await this.unary(
      this.leases,
      this.leases.listWaiters as UnaryMethod<pb.ListWaitersRequest, pb.ListWaitersResponse>,
      { job, limit },
      opts,
    );
    return {
      waiters: r.waiters.map((w) => ({ holder: w.holder, principal: w.principal || undefined, preferred: w.preferred })),
      waiting: r.waiting,
    };
  }

  /**
   * Deletes `job` and every key of its fenced store, if its lease is not
   * live and no Acquire waits for it (`JobInUse` otherwise). Resolves to
   * whether there was such a job. A job created again later gets tokens
   * above its old ones.
   */
  async deleteJob(job: string, opts?: CallOptions): Promise<boolean> {
    const r = await this.unary(
      this.leases,
      this.leases.deleteJob as UnaryMethod<pb.DeleteJobRequest, pb.DeleteJobResponse>,
      { job },
      opts,
    );
    return r.deleted;
  }

  /**
   * The server's public keys, that verify grants' proofs (`Lease.proof`,
   * with `verifyProof`): the first signs new grants, every one verifies.
   * Empty when the server signs nothing. Cache them, and fetch them again
   * when a proof names a key they do not list (`ProofErrorKind.UnknownKey`):
   * the server's keys rotated.
   */
  async getSigningKeys(opts?: CallOptions): Promise<KeySet> {
    const r = await this.unary(
      this.leases,
      this.leases.getSigningKeys as UnaryMethod<pb.GetSigningKeysRequest, pb.GetSigningKeysResponse>,
      {},
      opts,
    );
    return KeySet.fromResponse(r);
  }

  /** Every lease whose job starts with `prefix`, all pages. */
  async listLeases(prefix = "", opts?: CallOptions): Promise<Lease[]> {
    const out: Lease[] = [];
    let pageToken = "";
    for (;;) {
      const r = await this.unary(
        this.leases,
        this.leases.listLeases as UnaryMethod<pb.ListLeasesRequest, pb.ListLeasesResponse>,
        { prefix, pageSize: PAGE_SIZE, pageToken },
        opts,
      );
      out.push(...r.leases.map(leaseFromPb));
      if (!r.nextPageToken) return out;
      pageToken = r.nextPageToken;
    }
  }

  /**
   * One page of `job`'s history of leaders, newest first: one `Tenure` per
   * token granted (holder, principal, when granted and ended, how it
   * ended), `nextPageToken` for the older ones (undefined on the last
   * page), and on the first page the chaos API's last actions on the job.
   * The server keeps each job's newest tenures (`--history-per-job`,
   * default 100); a job with no history (or none at all) has an empty
   * one. A `pageToken` the server did not issue for this job's history is
   * refused with `InvalidArgument` (`field` "page_token").
   */
  async history(job: string, opts?: HistoryOptions): Promise<HistoryPage> {
    const r = await this.unary(
      this.leases,
      this.leases.getHistory as UnaryMethod<pb.GetHistoryRequest, pb.GetHistoryResponse>,
      { job, pageSize: opts?.pageSize ?? 0, pageToken: opts?.pageToken ?? "" },
      opts,
    );
    return historyFromPb(r);
  }

  /**
   * Every tenure of `job`'s history, newest first, page after page (see
   * `history`); `opts.pageSize` sets the size of each page asked for, and
   * each page's call takes `opts`' timeout and signal.
   *
   * ```ts
   * for await (const t of client.historyAll("bridge_health")) console.log(t.token, t.holder, t.end);
   * ```
   */
  async *historyAll(job: string, opts?: Omit<HistoryOptions, "pageToken">): AsyncGenerator<Tenure, void, undefined> {
    let pageToken: string | undefined;
    do {
      const page = await this.history(job, { ...opts, pageToken });
      yield* page.tenures;
      pageToken = page.nextPageToken;
    } while (pageToken !== undefined);
  }

  /**
   * Waits for the lease on `job` and resolves to it held, as a `Lock`
   * renewed every ttl/3 until released: with `await using` it is released
   * at the end of the block, on a throw too.
   *
   * ```ts
   * await using lock = await client.lock("reports", { ttlMs: 10_000, timeoutMs: 30_000 });
   * await client.checkedWrite("reports", lock.token, "cursor", "42");
   * ```
   *
   * Waits up to `opts.timeoutMs` (then rejects with `LockTimeout`, nothing
   * held; undefined: as long as it takes), or until `opts.signal` is
   * aborted (an AbortError). The lock is its own holder, `name@uuid`. A
   * loss while held aborts `lock.signal` and turns `lock.isHeld` false
   * (see `Lock`). With `opts.slots` (2 to 100) it is a counted lock: up to
   * that many held at once, each on its slot's job, `lock.leaseJob`, which
   * writes with `lock.token` must name.
   */
  lock(job: string, opts: LockOptions): Promise<Lock> {
    return Lock.acquire(this, job, opts);
  }

  /**
   * Runs `fn` holding the lease on `job` (taken as `lock` does), and
   * releases it once `fn` settles, resolving or rejecting as `fn` did.
   * `lock.signal` is aborted if the lease is lost meanwhile: hand it to
   * the work, and carry `lock.token` into every write.
   *
   * ```ts
   * await client.withLock("reports", { ttlMs: 10_000 }, async (lock) => {
   *   await client.checkedWrite("reports", lock.token, "cursor", "42");
   * });
   * ```
   */
  async withLock<T>(job: string, opts: LockOptions, fn: (lock: Lock) => Promise<T> | T): Promise<T> {
    const lock = await this.lock(job, opts);
    try {
      return await fn(lock);
    } finally {
      await lock.release();
    }
  }

  /**
   * Joins the shard group `group` of `shards` shards (1 to 1024) as a new
   * member named `name` (its identity is `name@uuid`, made here), and
   * resolves to the `ShardMember` once the server has answered JOINED: an
   * async iterable of its `ShardEvent`s (`assigned`, `revoked`, `lost`,
   * with the shard, its token and its job `"{group}/{shard}"`), renewed
   * every ttl/3 until `leave()`. `member.run(work)` runs `work` per owned
   * shard and cancels it before a revoke is acknowledged.
   *
   * ```ts
   * const member = await client.joinShards("queue", "consumer", 16, { ttlMs: 10_000 });
   * await member.run(async (shard, signal) => consume(shard, signal), { signal: stop.signal });
   * ```
   *
   * Rejects with `InvalidArgument` naming the field at fault: `shards`
   * when the group has another count (or it is not 1 to 1024), `group`
   * when empty (those two checked here too, before any call), `ttl`,
   * `revoke_timeout`; with `Unavailable` when the server cannot be
   * reached or does not answer within `opts.timeoutMs` (default the
   * client's timeout). See `ShardMember`.
   */
  joinShards(group: string, name: string, shards: number, opts: JoinShardsOptions = {}): Promise<ShardMember> {
    return ShardMember.join(this.shardsStub, group, name, shards, opts, this.timeoutMs);
  }

  /**
   * A shard group as the server sees it: its count of shards (0 when it
   * was never joined), its live members with the shards each owns, and
   * each shard's owner (undefined when none) and newest token.
   *
   * ```ts
   * const g = await client.getGroup("queue");
   * for (const m of g.members) console.log(m.member, m.shards.join(","));
   * ```
   */
  async getGroup(group: string, opts?: CallOptions): Promise<ShardGroup> {
    const r = await this.unary(
      this.shardsStub,
      this.shardsStub.getGroup as UnaryMethod<pb.GetGroupRequest, pb.ShardGroup>,
      { group },
      opts,
    );
    return shardGroupFromPb(r);
  }

  /**
   * Opens a `KeepAlive` stream: renew many leases per message, one result
   * each (what `ElectorSet` renews over). With `bindToStream`, every lease
   * it renews is bound to this client's connection (see
   * `AcquireOptions.bindToStream`). No deadline: `cancel()` it when done.
   */
  keepAlive(opts?: { bindToStream?: boolean }): KeepAlive {
    return new KeepAlive(this.leases.keepAlive(new Metadata()), opts?.bindToStream ?? false);
  }

  /** Watches `job`: the current lease, then every change of holder, token or value. */
  watch(job: string, opts?: { timeoutMs?: number }): Watch {
    const options = opts?.timeoutMs !== undefined ? { deadline: new Date(Date.now() + opts.timeoutMs) } : {};
    return new Watch(this.leases.watchLease({ job }, new Metadata(), options));
  }

  /**
   * Observes `job`'s lease over one `WatchLease` stream: an async iterable
   * of its states, first the current one (`kind` `Current`), then one per
   * change of holder or token (`Acquired`, `Released`, `Expired`) or of
   * the holder's value (`ValueChanged`, same holder and token). Renewals
   * that change no value yield nothing. A reader that falls behind
   * gets the latest state, the changes it missed folded into it.
   *
   * ```ts
   * for await (const lease of client.observe("bridge_health", { signal })) {
   *   console.log(lease.kind, lease.holder ?? "(free)", lease.token, lease.value.toString());
   * }
   * ```
   *
   * The stream is opened when the iteration starts and has no deadline.
   * It ends cleanly when `opts.signal` is aborted (or the loop is left
   * with `break`/`return`, which cancels the stream). It does not
   * reconnect: when the stream breaks (the server stops, the connection
   * drops, a `--max-watchers` limit) the iteration throws the typed error
   * (`ShuttingDown`, `Unavailable`, `QuotaExceeded`...); observe again to
   * go on, from the state at that moment.
   */
  async *observe(job: string, opts: ObserveOptions = {}): AsyncGenerator<LeaseChange, void, undefined> {
    const { signal } = opts;
    if (signal?.aborted) return;
    let call: ClientReadableStream<pb.LeaseEvent>;
    try {
      call = this.leases.watchLease({ job }, new Metadata(), {});
    } catch (e) {
      throw fromServiceError(e as Error); // a closed client
    }
    const onAbort = () => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const msg of call as AsyncIterable<pb.LeaseEvent>) {
        if (signal?.aborted) return;
        const { kind, lease } = eventFromPb(msg);
        yield { ...lease, kind };
      }
    } catch (e) {
      if (signal?.aborted) return;
      throw fromServiceError(e as ServiceError);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      call.cancel();
    }
  }

  /**
   * Writes `value` under (job, key), fenced by `token`; the new version.
   * With `opts.proof`, fenced by the token of that grant's proof instead
   * (`token` may then be `0n`; see `WriteOptions.proof`).
   */
  async checkedWrite(job: string, token: bigint, key: Bytes, value: Bytes, opts?: WriteOptions): Promise<bigint> {
    return this.write(job, token, key, value, false, opts);
  }

  /** Deletes (job, key), fenced by `token` (or `opts.proof`'s, as `checkedWrite`); the new version. */
  async delete(job: string, token: bigint, key: Bytes, opts?: WriteOptions): Promise<bigint> {
    return this.write(job, token, key, Buffer.alloc(0), true, opts);
  }

  private async write(
    job: string,
    token: bigint,
    key: Bytes,
    value: Bytes,
    del: boolean,
    opts?: WriteOptions,
  ): Promise<bigint> {
    const r = await this.unary(
      this.store,
      this.store.checkedWrite as UnaryMethod<pb.CheckedWriteRequest, pb.CheckedWriteResponse>,
      { job, token, key: asBytes(key), value: asBytes(value), delete: del, proof: opts?.proof ?? "" },
      opts,
    );
    return r.version;
  }

  /**
   * Opens a `WriteStream`: fenced writes, one or many per message, over
   * one long-lived stream; far cheaper per write than `checkedWrite`. The
   * stream has no deadline: `close()` it when done (or `cancel()` it).
   */
  writeStream(): WriteStream {
    return new WriteStream(this.store.writeStream(new Metadata()));
  }

  /** Reads (job, key); linearizable. */
  async read(job: string, key: Bytes, opts?: CallOptions): Promise<Value> {
    const r = await this.unary(
      this.store,
      this.store.read as UnaryMethod<pb.ReadRequest, pb.ReadResponse>,
      { job, key: asBytes(key) },
      opts,
    );
    return { found: r.found, value: Buffer.from(r.value), token: r.token, version: r.version };
  }

  /** Every live key of `job` starting with `prefix`, all pages. */
  async listKeys(job: string, prefix: Bytes = "", opts?: CallOptions): Promise<KeyInfo[]> {
    const out: KeyInfo[] = [];
    let pageToken: Buffer = Buffer.alloc(0);
    for (;;) {
      const r = await this.unary(
        this.store,
        this.store.listKeys as UnaryMethod<pb.ListKeysRequest, pb.ListKeysResponse>,
        { job, prefix: asBytes(prefix), pageSize: PAGE_SIZE, pageToken },
        opts,
      );
      out.push(
        ...r.keys.map((k) => ({ key: Buffer.from(k.key), token: k.token, version: k.version, size: k.size })),
      );
      if (r.nextPageToken.length === 0) return out;
      pageToken = Buffer.from(r.nextPageToken);
    }
  }
}

export { LeaseholdError };
