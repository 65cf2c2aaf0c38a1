/**
 * The chaos API (`client.chaos()`) against a real server started with
 * `--enable-chaos`: first the example of the README, a worker that steps
 * down correctly when its lease is taken away (the elector reports the
 * loss, the work bound to its leadership stops, and a late write with its
 * old token is fenced), then each of the helper's methods, and the error
 * of a server without the flag.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { credentials, type ServiceError } from "@grpc/grpc-js";
import { ChaosDisabled, Client, Elector, Fenced, LeaseLost, NoSuccessor } from "../src";
import * as pb from "../src/gen/leasehold/v1/leasehold";
import { PATIENCE, Server, sleep, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

/** `p`, or a rejection once `ms` passed. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** The job's history, newest first, through the generated stub. */
function history(raw: pb.LeasesClient, job: string): Promise<pb.Tenure[]> {
  return new Promise((resolve, reject) => {
    raw.getHistory({ job, pageSize: 0, pageToken: "" }, (err: ServiceError | null, r: pb.GetHistoryResponse) =>
      err ? reject(err) : resolve(r.tenures),
    );
  });
}

/**
 * The worker of the README's example: while its elector leads, it writes
 * its progress with the token it leads with, and it stops that work as
 * soon as the elector reports the loss (or a write is fenced).
 */
class Worker {
  readonly elector: Elector;
  /** Progress writes that succeeded: their token, and when they were sent. */
  readonly written: { token: bigint; sentAt: number }[] = [];
  /** Why the first work loop that stopped did: "lost", "fenced" or "error: ...". */
  stoppedBy: string | undefined;
  /** The work loop of the current leadership, if any. */
  running: Promise<void> | undefined;

  constructor(
    private readonly client: Client,
    private readonly job: string,
    name: string,
    ttlMs: number,
  ) {
    this.elector = new Elector(client, job, name, ttlMs, { logger: quiet });
    this.elector.on("elected", (token) => {
      const stop = new AbortController();
      const onLost = (t: bigint) => {
        if (t !== token) return;
        this.elector.off("lost", onLost);
        this.stoppedBy ??= "lost";
        stop.abort();
      };
      this.elector.on("lost", onLost);
      this.running = this.work(token, stop.signal);
    });
  }

  /** The work bound to one leadership: every write carries its token. */
  private async work(token: bigint, signal: AbortSignal): Promise<void> {
    for (let i = 0; !signal.aborted; i++) {
      const sentAt = performance.now();
      try {
        await this.client.checkedWrite(this.job, token, "progress", String(i));
        this.written.push({ token, sentAt });
      } catch (e) {
        // Fenced: not the leader any more, stop (the elector will tell).
        this.stoppedBy ??= e instanceof Fenced ? "fenced" : `error: ${e}`;
        return;
      }
      await sleep(20);
    }
  }
}

describe("chaos against the real server (--enable-chaos)", () => {
  let server: Server;
  let client: Client;
  before(async () => {
    server = await Server.start(30_000, { extra: ["--enable-chaos"] });
    client = new Client(server.target);
  });
  after(async () => {
    client.close();
    await server.stop();
  });

  test("a worker steps down when chaos expires its lease: the loss is reported, its work stops, its late write is fenced", async () => {
    const job = uniqueJob("chaos-step-down");
    const worker = new Worker(client, job, "worker", 3000);
    const standby = new Elector(client, job, "standby", 3000, { logger: quiet });
    try {
      worker.elector.start();
      const token = await worker.elector.elected({ timeoutMs: PATIENCE });
      assert.equal(token, 1n);
      await waitUntil(() => worker.written.length >= 3, PATIENCE, "the worker's first writes");
      standby.start();
      await server.waitWaiters(1);

      const lost = worker.elector.lost();
      const out = await client.chaos().expire(job);
      const expired = performance.now();
      // The first waiter was granted the next token at once.
      assert.equal(out.lease?.holder, standby.holder);
      assert.equal(out.lease?.token, 2n);
      assert.equal(out.inForce, "");

      // The elector reports the loss (at its next renewal, within ttl/3)...
      await within(lost, PATIENCE, "the elector to report the loss");
      assert.ok(worker.stoppedBy === "lost" || worker.stoppedBy === "fenced", String(worker.stoppedBy));
      // ... the guarded work stops, and no write sent since the expiry was written...
      await within(worker.running!, PATIENCE, "the work to stop");
      assert.deepEqual(worker.written.filter((w) => w.sentAt >= expired), []);
      assert.equal(await standby.elected({ timeoutMs: PATIENCE }), 2n);
      // ... and a late write with the old token is fenced.
      const late = await client.checkedWrite(job, token!, "progress", "late").then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(late instanceof Fenced, String(late));
      assert.equal(late.currentToken, 2n);

      // The history says chaos ended the tenure.
      const raw = new pb.LeasesClient(server.target, credentials.createInsecure());
      try {
        const first = (await history(raw, job)).find((t) => t.token === 1n);
        assert.equal(first?.end, pb.Tenure_End.END_CHAOS);
      } finally {
        raw.close();
      }
    } finally {
      // The worker first: it is not elected again when the standby releases.
      await worker.elector.resign();
      await standby.resign();
    }
  });

  test("fence(job, 2): the next two writes are fenced, the third is written", async () => {
    const job = uniqueJob("chaos-fence");
    const { lease } = await client.acquire(job, "w", 5000);
    const out = await client.chaos().fence(job, 2);
    assert.equal(out.lease?.holder, "w");
    assert.match(out.inForce, /2 writes to fence/);
    for (let i = 0; i < 2; i++) {
      await assert.rejects(client.checkedWrite(job, lease.token, "k", String(i)), Fenced);
    }
    assert.ok((await client.checkedWrite(job, lease.token, "k", "third")) > 0n);
    assert.equal((await client.read(job, "k")).value.toString(), "third");
    assert.equal((await client.chaos().clear(job)).inForce, "");
    await client.release(job, "w", lease.token);
  });

  test("delay(job, ms): a getLease takes at least the delay", async () => {
    const job = uniqueJob("chaos-delay");
    await client.acquire(job, "w", 5000);
    const out = await client.chaos().delay(job, 300);
    assert.match(out.inForce, /delayed/);
    const t = performance.now();
    const lease = await client.getLease(job);
    const took = performance.now() - t;
    assert.equal(lease.holder, "w");
    assert.ok(took >= 300, `getLease took ${took} ms`);
    await client.chaos().clear(job);
  });

  test("pause(job, ms): the holder's renewal is LeaseLost while getLease still shows it as holder", async () => {
    const job = uniqueJob("chaos-pause");
    const { lease } = await client.acquire(job, "w", 5000);
    const out = await client.chaos().pause(job, 2000);
    assert.equal(out.lease?.holder, "w");
    assert.match(out.inForce, /paused/);
    await assert.rejects(client.renew(job, "w", lease.token, 5000), LeaseLost);
    const now = await client.getLease(job);
    assert.equal(now.holder, "w");
    assert.equal(now.token, lease.token);
    await client.chaos().clear(job);
  });

  test("transfer(job): the first waiter is granted token + 1; with nobody waiting, NoSuccessor", async () => {
    const job = uniqueJob("chaos-transfer");
    const { lease } = await client.acquire(job, "a", 5000);
    await assert.rejects(client.chaos().transfer(job), NoSuccessor);
    const waiting = client.acquire(job, "b", 5000, 10_000);
    await server.waitWaiters(1);
    const out = await client.chaos().transfer(job);
    assert.equal(out.lease?.holder, "b");
    assert.equal(out.lease?.token, lease.token + 1n);
    const b = await waiting;
    assert.equal(b.acquired, true);
    assert.equal(b.lease.token, lease.token + 1n);
    await assert.rejects(client.renew(job, "a", lease.token, 5000), LeaseLost);
    await client.release(job, "b", b.lease.token);
  });

  test("clear(job) and clear(): nothing is in force after", async () => {
    const job = uniqueJob("chaos-clear");
    const other = uniqueJob("chaos-clear");
    await client.chaos().fence(job, 5);
    const before = await client.chaos().delay(job, 50);
    assert.match(before.inForce, /fence/);
    assert.match(before.inForce, /delayed/);
    const cleared = await client.chaos().clear(job);
    assert.equal(cleared.inForce, "");
    assert.equal(cleared.lease?.job, job);

    await client.chaos().fence(other, 1);
    const all = await client.chaos().clear();
    assert.equal(all.lease, undefined);
    assert.equal(all.inForce, "");
    assert.equal((await client.chaos().clear(other)).inForce, "");
    const { lease } = await client.acquire(other, "w", 5000);
    assert.ok((await client.checkedWrite(other, lease.token, "k", "v")) > 0n, "the cleared fence fences nothing");
    await client.release(other, "w", lease.token);
  });

  test("an out-of-range argument is InvalidArgument", async () => {
    const job = uniqueJob("chaos-invalid");
    await assert.rejects(client.chaos().fence(job, 0), (e: unknown) => {
      assert.equal((e as { field?: string }).field, "writes");
      return true;
    });
    await assert.rejects(client.chaos().delay(job, 0), (e: unknown) => {
      assert.equal((e as { field?: string }).field, "by");
      return true;
    });
  });
});

describe("chaos against a server without --enable-chaos", () => {
  let server: Server;
  let client: Client;
  before(async () => {
    server = await Server.start();
    client = new Client(server.target);
  });
  after(async () => {
    client.close();
    await server.stop();
  });

  test("every call rejects with ChaosDisabled, saying the server needs --enable-chaos", async () => {
    const job = uniqueJob("chaos-off");
    for (const call of [
      () => client.chaos().expire(job),
      () => client.chaos().pause(job, 1000),
      () => client.chaos().delay(job, 1000),
      () => client.chaos().fence(job, 1),
      () => client.chaos().transfer(job),
      () => client.chaos().clear(),
    ]) {
      await assert.rejects(call(), (e: unknown) => {
        assert.ok(e instanceof ChaosDisabled, String(e));
        assert.match(e.message, /--enable-chaos/);
        assert.equal(e.retryable, false);
        return true;
      });
    }
  });
});
