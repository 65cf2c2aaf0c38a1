/**
 * Candidates: `client.listWaiters` (ListWaiters) against the real server.
 * The Acquires waiting for a job, in line order (the preferred first, then
 * the others, each first come, first served), the count of all, a limit,
 * and an empty line for a job nobody waits for or that does not exist.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Elector, InvalidArgument, type Acquired } from "../src";
import { PATIENCE, Server, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

describe("listWaiters against the real server", () => {
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

  /** Waits until `job` has `n` waiters, as listWaiters says. */
  const queued = (job: string, n: number) =>
    waitUntil(async () => (await client.listWaiters(job)).waiting === n, PATIENCE, `${n} waiter(s) on ${job}`);

  test("two waiters behind a leader, in line order: the preferred one first though it queued later; waiting = 2", async () => {
    const job = uniqueJob("waiters");
    await client.acquire(job, "leader", 30_000);
    assert.deepEqual(await client.listWaiters(job), { waiters: [], waiting: 0 }, "nobody waits yet");

    const waits: Promise<Acquired>[] = [];
    waits.push(client.acquire(job, "plain", 30_000, PATIENCE));
    await queued(job, 1);
    waits.push(client.acquire(job, "preferred", 30_000, PATIENCE, { preferred: true }));
    await queued(job, 2);

    const line = await client.listWaiters(job);
    assert.equal(line.waiting, 2);
    assert.deepEqual(line.waiters, [
      { holder: "preferred", principal: undefined, preferred: true },
      { holder: "plain", principal: undefined, preferred: false },
    ]);
    // A limit lists the first in line; `waiting` still counts them all.
    const first = await client.listWaiters(job, 1);
    assert.deepEqual([first.waiters.map((w) => w.holder), first.waiting], [["preferred"], 2]);

    // The line is the order of hand-over: the release grants the first listed.
    await client.release(job, "leader", 1n);
    const granted = await Promise.race(waits);
    assert.deepEqual([granted.acquired, granted.lease.holder, granted.lease.token], [true, "preferred", 2n]);
    const rest = await client.listWaiters(job);
    assert.deepEqual([rest.waiters.map((w) => w.holder), rest.waiting], [["plain"], 1]);
    await client.release(job, "preferred", 2n);
    assert.equal((await waits[0]).lease.token, 3n);
    await client.release(job, "plain", 3n);
    assert.deepEqual(await client.listWaiters(job), { waiters: [], waiting: 0 });
  });

  test("electors waiting for a job are listed with their holders", async () => {
    const job = uniqueJob("waiters-electors");
    const a = new Elector(client, job, "a", 30_000, { logger: quiet }).start();
    const b = new Elector(client, job, "b", 30_000, { logger: quiet });
    const c = new Elector(client, job, "c", 30_000, { logger: quiet, preferred: true });
    try {
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();
      await queued(job, 1);
      c.start();
      await queued(job, 2);
      const line = await client.listWaiters(job);
      assert.deepEqual(
        line.waiters.map((w) => [w.holder, w.preferred]),
        [
          [c.holder, true],
          [b.holder, false],
        ],
      );
    } finally {
      await Promise.all([a.resign(), b.resign(), c.resign()]);
    }
  });

  test("an unknown job has an empty line, not an error; an empty job is InvalidArgument", async () => {
    assert.deepEqual(await client.listWaiters(uniqueJob("waiters-unknown")), { waiters: [], waiting: 0 });
    assert.deepEqual(await client.listWaiters(uniqueJob("waiters-unknown"), 5), { waiters: [], waiting: 0 });
    await assert.rejects(client.listWaiters(""), (e: unknown) => {
      assert.ok(e instanceof InvalidArgument, `${e}`);
      assert.equal(e.field, "job");
      return true;
    });
  });
});
