/**
 * Preferred candidates (`AcquireOptions.preferred`) and electors that
 * yield to them (`yieldToPreferred`), against the real server. A
 * preferred Acquire waits ahead of the plain ones (first come, first
 * served within each class); the holder, unless its own grant was a
 * preferred one, is told so on every renewal (`successorWaiting`); an
 * elector that yields hands over right after such a renewal, as
 * `transfer()` does, and one that does not keeps the lease.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { credentials, type ServiceError } from "@grpc/grpc-js";
import { Client, Elector, LeaseholdError, type Acquired, type Lease, type RenewedLease } from "../src";
import * as pb from "../src/gen/leasehold/v1/leasehold";
import { PATIENCE, Server, spawnChild, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

function history(raw: pb.LeasesClient, job: string): Promise<pb.Tenure[]> {
  return new Promise((resolve, reject) => {
    raw.getHistory({ job, pageSize: 0, pageToken: "" }, (err: ServiceError | null, r: pb.GetHistoryResponse) =>
      err ? reject(err) : resolve(r.tenures),
    );
  });
}

function record(e: Elector): string[] {
  const events: string[] = [];
  e.on("elected", (t) => events.push(`elected ${t}`));
  e.on("lost", (t) => events.push(`lost ${t}`));
  return events;
}

/** A waiting Acquire whose answer a test can look at without awaiting it. */
class Waiting {
  settled: Acquired | Error | undefined;
  readonly done: Promise<Acquired>;
  constructor(p: Promise<Acquired>) {
    this.done = p;
    p.then(
      (a) => (this.settled = a),
      (e: Error) => (this.settled = e),
    );
  }
}

/** A gate a test opens: `wait()` resolves once `open()` was called. */
class Gate {
  open: () => void = () => {};
  private readonly opened = new Promise<void>((resolve) => (this.open = resolve));
  wait(): Promise<void> {
    return this.opened;
  }
}

/**
 * A client that holds the answer of a renewal saying `successorWaiting`
 * (once the server gave it) while `hold` is set, and records the outcome
 * of every TransferLease.
 */
class HoldingClient extends Client {
  hold: Gate | undefined;
  /** Renewal answers held so far. */
  held = 0;
  /** Each TransferLease's outcome: the successor's holder, or the error's name. */
  readonly transfers: string[] = [];

  override async renew(...args: Parameters<Client["renew"]>): Promise<RenewedLease> {
    const renewed = await super.renew(...args);
    const gate = this.hold;
    if (gate && renewed.successorWaiting) {
      this.held++;
      await gate.wait();
    }
    return renewed;
  }

  override async transferLease(...args: Parameters<Client["transferLease"]>): Promise<Lease> {
    try {
      const lease = await super.transferLease(...args);
      this.transfers.push(`to ${lease.holder}`);
      return lease;
    } catch (e) {
      this.transfers.push(e instanceof LeaseholdError ? e.name : String(e));
      throw e;
    }
  }
}

describe("preferred candidates against the real server", () => {
  let server: Server;
  let client: Client;
  let raw: pb.LeasesClient;
  before(async () => {
    server = await Server.start();
    client = new Client(server.target);
    raw = new pb.LeasesClient(server.target, credentials.createInsecure());
  });
  after(async () => {
    raw.close();
    client.close();
    await server.stop();
  });

  /** Waits until exactly `n` Acquires are queued on the server. */
  const waiters = (n: number) =>
    waitUntil(async () => (await server.metric("leasehold_waiting_acquires")) === n, PATIENCE, `${n} waiter(s)`);

  test("a holder's renewals say successorWaiting while a preferred Acquire waits, not while only plain ones do", async () => {
    const job = uniqueJob("told");
    const ttl = 30_000;
    assert.equal((await client.acquire(job, "h", ttl)).lease.token, 1n);
    const alone = await client.renew(job, "h", 1n, ttl);
    assert.deepEqual([alone.holder, alone.token, alone.successorWaiting], ["h", 1n, false]);

    const plain = new Waiting(client.acquire(job, "p", ttl, PATIENCE));
    await waiters(1);
    const withPlain = await client.renew(job, "h", 1n, ttl);
    assert.deepEqual([withPlain.holder, withPlain.token, withPlain.successorWaiting], ["h", 1n, false]);

    const preferred = new Waiting(client.acquire(job, "q", ttl, PATIENCE, { preferred: true }));
    await waiters(2);
    for (let i = 0; i < 2; i++) {
      const told = await client.renew(job, "h", 1n, ttl);
      assert.deepEqual([told.holder, told.token, told.successorWaiting], ["h", 1n, true], `renewal ${i}`);
    }
    // Nothing was taken from the holder.
    const lease = await client.getLease(job);
    assert.deepEqual([lease.holder, lease.token], ["h", 1n]);
    assert.equal(preferred.settled, undefined);

    // The preferred one goes first, and is told nothing of the plain one.
    await client.release(job, "h", 1n);
    const q = await preferred.done;
    assert.deepEqual([q.acquired, q.lease.holder, q.lease.token], [true, "q", 2n]);
    assert.equal((await client.renew(job, "q", 2n, ttl)).successorWaiting, false);
    await client.release(job, "q", 2n);
    const p = await plain.done;
    assert.deepEqual([p.acquired, p.lease.holder, p.lease.token], [true, "p", 3n]);
    assert.equal((await client.renew(job, "p", 3n, ttl)).successorWaiting, false);
    await client.release(job, "p", 3n);
  });

  test("a preferred waiter that came after plain ones is granted first; each class first come, first served", async () => {
    const job = uniqueJob("order");
    const ttl = 30_000;
    assert.equal((await client.acquire(job, "h", ttl)).lease.token, 1n);
    // In the order they come: p1, q1 (preferred), p2, q2 (preferred).
    const line: [string, Waiting][] = [];
    for (const [holder, preferred] of [["p1", false], ["q1", true], ["p2", false], ["q2", true]] as const) {
      line.push([holder, new Waiting(client.acquire(job, holder, ttl, PATIENCE, { preferred }))]);
      await waiters(line.length);
    }
    const waiting = new Map(line);
    let [holder, token] = ["h", 1n];
    for (const next of ["q1", "q2", "p1", "p2"]) {
      await client.release(job, holder, token);
      const got = await waiting.get(next)!.done;
      assert.deepEqual([got.acquired, got.lease.holder, got.lease.token], [true, next, token + 1n], `after ${holder}`);
      waiting.delete(next);
      assert.equal((await client.getLease(job)).holder, next);
      for (const [other, w] of waiting) assert.equal(w.settled, undefined, `${other} still waits`);
      [holder, token] = [next, token + 1n];
    }
    await client.release(job, holder, token);
  });

  test("a yielding elector hands over to a preferred elector at its next renewal, and is not handed it back", async () => {
    const job = uniqueJob("yield");
    // Renewals every second.
    const ttl = 3000;
    const a = new Elector(client, job, "a", ttl, { logger: quiet, yieldToPreferred: true });
    const b = new Elector(client, job, "b", ttl, { logger: quiet, preferred: true });
    const [ea, eb] = [record(a), record(b)];
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();
      await waiters(1);
      const t = performance.now();
      assert.equal(await b.elected({ timeoutMs: PATIENCE }), 2n);
      const handover = performance.now() - t;
      console.log(`handed over ${Math.round(handover)} ms after the preferred candidate queued (renewals every ${ttl / 3} ms)`);
      assert.ok(handover < ttl, `at the next renewal: ${handover} ms`);
      await waitUntil(() => ea.includes("lost 1"), PATIENCE, "A's loss");
      assert.deepEqual(
        (await history(raw, job)).map((x) => [x.token, x.holder, x.end]),
        [
          [2n, b.holder, pb.Tenure_End.END_UNSPECIFIED],
          [1n, a.holder, pb.Tenure_End.END_TRANSFERRED],
        ],
      );
      // A campaigns again, behind B, and B (preferred) is told nothing:
      // it keeps the lease across its renewals.
      await waiters(1);
      const renewed = await server.metric("leasehold_renewals_total");
      await server.waitRenewals(renewed + 3, PATIENCE);
      assert.deepEqual(ea, ["elected 1", "lost 1"]);
      assert.deepEqual(eb, ["elected 2"]);
      assert.equal(a.isLeader, false);
      assert.equal(b.token, 2n);
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [b.holder, 2n]);
      // B's resign hands the job to A, waiting.
      await b.resign();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 3n);
      assert.deepEqual(ea, ["elected 1", "lost 1", "elected 3"]);
      assert.deepEqual(eb, ["elected 2", "lost 2"]);
    } finally {
      await Promise.all([a.resign(), b.resign()]);
    }
  });

  test("a preferred leader is not told successorWaiting when another preferred candidate waits", async () => {
    const job = uniqueJob("preferred-holder");
    const ttl = 30_000;
    // Granted at once to a preferred Acquire: a preferred grant.
    assert.equal((await client.acquire(job, "q0", ttl, 0, { preferred: true })).lease.token, 1n);
    const q1 = new Waiting(client.acquire(job, "q1", ttl, PATIENCE, { preferred: true }));
    await waiters(1);
    assert.equal((await client.renew(job, "q0", 1n, ttl)).successorWaiting, false);
    await client.release(job, "q0", 1n);
    assert.equal((await q1.done).lease.token, 2n);

    // Granted on a release, as a preferred waiter: not told either.
    const q2 = new Waiting(client.acquire(job, "q2", ttl, PATIENCE, { preferred: true }));
    await waiters(1);
    assert.equal((await client.renew(job, "q1", 2n, ttl)).successorWaiting, false);
    await client.release(job, "q1", 2n);
    assert.equal((await q2.done).lease.token, 3n);
    await client.release(job, "q2", 3n);

    // Granted by a transfer to the first in line, a preferred waiter:
    // not told either.
    const h = await client.acquire(job, "h", ttl);
    assert.equal(h.lease.token, 4n);
    const q3 = new Waiting(client.acquire(job, "q3", ttl, PATIENCE, { preferred: true }));
    await waiters(1);
    assert.equal((await client.renew(job, "h", 4n, ttl)).successorWaiting, true);
    assert.equal((await client.transferLease(job, "h", 4n)).holder, "q3");
    assert.equal((await q3.done).lease.token, 5n);
    const q4 = new Waiting(client.acquire(job, "q4", ttl, PATIENCE, { preferred: true }));
    await waiters(1);
    assert.equal((await client.renew(job, "q3", 5n, ttl)).successorWaiting, false);
    await client.release(job, "q3", 5n);
    assert.equal((await q4.done).lease.token, 6n);
    await client.release(job, "q4", 6n);
  });

  test("a preferred elector that yields keeps leading while another preferred elector waits", async () => {
    const job = uniqueJob("both-preferred");
    const ttl = 3000;
    const a = new Elector(client, job, "a", ttl, { logger: quiet, preferred: true, yieldToPreferred: true });
    const b = new Elector(client, job, "b", ttl, { logger: quiet, preferred: true, yieldToPreferred: true });
    const [ea, eb] = [record(a), record(b)];
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();
      await waiters(1);
      const renewed = await server.metric("leasehold_renewals_total");
      await server.waitRenewals(renewed + 3, PATIENCE);
      assert.equal(a.token, 1n);
      assert.deepEqual(ea, ["elected 1"]);
      assert.deepEqual(eb, []);
      await a.resign();
      assert.equal(await b.elected({ timeoutMs: PATIENCE }), 2n);
    } finally {
      await Promise.all([a.resign(), b.resign()]);
    }
  });

  test("a yielding elector whose preferred candidate left (NoSuccessor) goes on leading", async () => {
    const job = uniqueJob("left");
    const ttl = 3000;
    const held = new HoldingClient(server.target);
    const a = new Elector(held, job, "a", ttl, { logger: quiet, yieldToPreferred: true });
    const ea = record(a);
    const gate = new Gate();
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      held.hold = gate;
      const leave = new AbortController();
      const q = new Waiting(client.acquire(job, "q", ttl, PATIENCE, { preferred: true, signal: leave.signal }));
      // A renewal says the candidate waits; its answer is held, and the
      // candidate leaves before A can hand over.
      await waitUntil(() => held.held > 0, PATIENCE, "a renewal saying successorWaiting");
      held.hold = undefined;
      leave.abort();
      await assert.rejects(q.done, { name: "AbortError" });
      await waiters(0);
      gate.open();
      await waitUntil(() => held.transfers.length > 0, PATIENCE, "the hand-over");
      assert.deepEqual(held.transfers, ["NoSuccessor"]);
      const renewed = await server.metric("leasehold_renewals_total");
      await server.waitRenewals(renewed + 2, PATIENCE);
      assert.equal(a.token, 1n);
      assert.deepEqual(ea, ["elected 1"]);
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [a.holder, 1n]);
    } finally {
      gate.open();
      await a.resign();
      held.close();
    }
  });

  test("a yielding elector whose lease was taken meanwhile (LeaseLost) steps down once and campaigns again", async () => {
    const job = uniqueJob("taken");
    const ttl = 3000;
    const held = new HoldingClient(server.target);
    const a = new Elector(held, job, "a", ttl, { logger: quiet, yieldToPreferred: true });
    const ea = record(a);
    const gate = new Gate();
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      held.hold = gate;
      const q = new Waiting(client.acquire(job, "q", 30_000, PATIENCE, { preferred: true }));
      await waitUntil(() => held.held > 0, PATIENCE, "a renewal saying successorWaiting");
      held.hold = undefined;
      // The lease goes to the candidate behind A's back.
      await client.release(job, a.holder, 1n);
      assert.equal((await q.done).lease.token, 2n);
      gate.open();
      await waitUntil(() => ea.includes("lost 1"), PATIENCE, "A's step-down");
      assert.deepEqual(held.transfers, ["LeaseLost"]);
      assert.deepEqual(ea, ["elected 1", "lost 1"]);
      await waiters(1);
      await client.release(job, "q", 2n);
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 3n);
      assert.deepEqual(ea, ["elected 1", "lost 1", "elected 3"]);
    } finally {
      gate.open();
      await a.resign();
      held.close();
    }
  });

  test("the conformance worker's --yield hands over to a worker's --preferred", async () => {
    const job = uniqueJob("worker");
    const worker = join(__dirname, "..", "examples", "conformance_worker.js");
    const start = (name: string, flag: string) => {
      const args = ["--server", server.target, "--job", job, "--name", name, "--ttl-ms", "3000", flag];
      // Its stdin open: the worker shuts down at the end of its input.
      const proc = spawnChild(process.execPath, [worker, ...args], { stdin: "pipe" });
      const lines: string[] = [];
      createInterface({ input: proc.stdout! }).on("line", (l) => lines.push(l));
      const exited = new Promise((r) => proc.once("exit", r));
      return { lines, stop: () => (proc.kill("SIGTERM"), exited) };
    };
    const a = start("a", "--yield");
    let b: ReturnType<typeof start> | undefined;
    try {
      await waitUntil(() => a.lines.includes("elected token=1"), PATIENCE, "A elected");
      b = start("b", "--preferred");
      const bw = b;
      await waitUntil(() => bw.lines.includes("elected token=2"), PATIENCE, "B elected by A's yield");
      await waitUntil(() => a.lines.includes("lost token=1"), PATIENCE, "A's loss");
      const holder = bw.lines.find((l) => l.startsWith("holder "))!.slice("holder ".length);
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [holder, 2n]);
    } finally {
      await Promise.all([a.stop(), b?.stop()]);
    }
    assert.ok(a.lines.includes("bye") && b!.lines.includes("bye"), `${a.lines} | ${b!.lines}`);
  });
});
