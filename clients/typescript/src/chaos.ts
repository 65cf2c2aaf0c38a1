/**
 * A test helper over the chaos API (`proto/leasehold/v1/chaos.proto`) of a
 * server started with `--enable-chaos`: make a worker lose its lease,
 * stall, or be fenced, on purpose, and check that it steps down.
 *
 * ```ts
 * const elector = new Elector(client, "sync", "worker", 3_000).start();
 * const token = (await elector.elected())!;
 * const lost = elector.lost();
 * await client.chaos().expire("sync"); // the lease is gone, now
 * await lost;                          // the elector reports the loss
 * await client.checkedWrite("sync", token, "k", "late"); // rejects: Fenced
 * await client.chaos().clear();
 * ```
 *
 * For test and staging servers only: the server serves the API only with
 * `--enable-chaos` (otherwise every call rejects with `ChaosDisabled`), and
 * on a listener that is not loopback only to a principal that a policy
 * grants the action `chaos` (otherwise `PermissionDenied`).
 */
import { status as Code } from "@grpc/grpc-js";
import type { CallOptions } from "./client";
import { ChaosDisabled, LeaseholdError } from "./errors";
import * as pb from "./gen/leasehold/v1/chaos";
import { type Lease, leaseFromPb, toDuration } from "./types";

/** What a chaos action left: the job's lease, and what is in force on it. */
export interface ChaosOutcome {
  /** The job's lease after the action; undefined for a `clear()` of every job. */
  lease: Lease | undefined;
  /**
   * What is in force on the job now, for people ("worker@... paused for
   * 1.9s, answers delayed by 200ms, 2 writes to fence"); empty when
   * nothing is.
   */
  inForce: string;
}

/** How `Chaos` makes a call: the client's unary call of the chaos stub's `method`. */
export type ChaosCall = <Req, Res>(method: ChaosMethod, req: Req, opts?: CallOptions) => Promise<Res>;

/** The chaos service's methods. */
export type ChaosMethod = "expire" | "pause" | "delay" | "fence" | "transfer" | "clear";

/** The message of `ChaosDisabled`. */
const DISABLED = "the server does not serve the chaos API: start it with --enable-chaos (test and staging servers only)";

/**
 * The chaos API, over a `Client`'s channel (`client.chaos()`). Durations
 * in ms, as everywhere in the client. Every method resolves to a
 * `ChaosOutcome` and rejects with the client's typed errors:
 * `ChaosDisabled` when the server runs without `--enable-chaos`,
 * `NoSuccessor` from `transfer` when nobody waits, `InvalidArgument`
 * (`field`) for a duration or count out of range, `PermissionDenied`
 * without a policy's `chaos` grant.
 */
export class Chaos {
  /** Made by `Client.chaos()`. */
  constructor(private readonly call: ChaosCall) {}

  private async run(method: ChaosMethod, req: object, opts?: CallOptions): Promise<ChaosOutcome> {
    let r: pb.ChaosResponse;
    try {
      r = await this.call<object, pb.ChaosResponse>(method, req, opts);
    } catch (e) {
      // Without --enable-chaos the service is not served (UNIMPLEMENTED);
      // the contract also names the reason CHAOS_DISABLED.
      if (e instanceof LeaseholdError && (e.code === Code.UNIMPLEMENTED || e.reason === "CHAOS_DISABLED")) {
        const disabled = new ChaosDisabled(DISABLED, e.code, e.reason, e.metadata);
        disabled.cause = e;
        throw disabled;
      }
      throw e;
    }
    return { lease: r.lease === undefined ? undefined : leaseFromPb(r.lease), inForce: r.inForce };
  }

  /**
   * Ends `job`'s live grant now, as an expiry would: the holder's next
   * renewal gets `LeaseLost`, its writes are `Fenced`, and the first
   * waiter is granted the next token at once. The job's history records
   * the tenure's end as `END_CHAOS`. Nothing changes when nobody holds
   * the job.
   */
  expire(job: string, opts?: CallOptions): Promise<ChaosOutcome> {
    return this.run("expire", { job } satisfies pb.ChaosJobRequest, opts);
  }

  /**
   * Pauses `job`'s holder for `durationMs` (above 0, at most 1 h): its
   * renewals are refused (`LeaseLost`) as if they came too late, so its
   * grant runs out at its deadline and goes to the first waiter; its
   * Acquires on the job are held until the pause ends. The lease still
   * shows it as holder until then.
   */
  pause(job: string, durationMs: number, opts?: CallOptions): Promise<ChaosOutcome> {
    return this.run("pause", { job, duration: toDuration(durationMs) } satisfies pb.ChaosPauseRequest, opts);
  }

  /**
   * Delays every answer about `job` (acquire, renew, release, getLease,
   * checkedWrite, read...) by `byMs` (above 0, at most 60 s), until
   * cleared.
   */
  delay(job: string, byMs: number, opts?: CallOptions): Promise<ChaosOutcome> {
    return this.run("delay", { job, by: toDuration(byMs) } satisfies pb.ChaosDelayRequest, opts);
  }

  /**
   * Fails `job`'s next `writes` fenced writes (`checkedWrite`, `delete`,
   * each write of a `WriteStream`; 1 to 1,000,000) as `Fenced`, whatever
   * their token.
   */
  fence(job: string, writes: number, opts?: CallOptions): Promise<ChaosOutcome> {
    return this.run("fence", { job, writes } satisfies pb.ChaosFenceRequest, opts);
  }

  /**
   * Hands `job`'s lease to its first waiter now, as a forced failover: it
   * is granted the next token (history `END_TRANSFERRED`). Rejects with
   * `NoSuccessor` when nobody waits (or nobody holds the job).
   */
  transfer(job: string, opts?: CallOptions): Promise<ChaosOutcome> {
    return this.run("transfer", { job } satisfies pb.ChaosJobRequest, opts);
  }

  /**
   * Clears the chaos in force on `job`, or on every job when `job` is
   * undefined or empty (the outcome's `lease` is then undefined).
   */
  clear(job?: string, opts?: CallOptions): Promise<ChaosOutcome> {
    return this.run("clear", { job: job ?? "" } satisfies pb.ChaosClearRequest, opts);
  }
}
