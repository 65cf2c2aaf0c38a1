import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, JobInUse, Overloaded, QuotaExceeded, Unavailable } from "../src";
import { Server } from "./harness";

test("quotas and deleteJob on a server with --max-jobs 1 and --max-keys-per-job 1", async () => {
  const server = await Server.start(30_000, { extra: ["--max-jobs", "1", "--max-keys-per-job", "1"] });
  const c = new Client(server.target);
  try {
    const t1 = (await c.acquire("a", "h", 30_000)).lease.token;

    // One job is the most: a second is refused, and nothing is made.
    await assert.rejects(c.acquire("b", "h", 30_000), (e: unknown) => {
      assert.ok(e instanceof QuotaExceeded, String(e));
      assert.deepEqual([e.limit, e.max, e.reason, e.retryable], ["--max-jobs", 1, "QUOTA_EXCEEDED", false]);
      return true;
    });
    assert.deepEqual((await c.listLeases()).map((l) => l.job), ["a"]);

    // One key is the most: a second is refused, by checkedWrite and on a
    // write stream; the first key may still be written.
    assert.equal(await c.checkedWrite("a", t1, "k1", "v"), 1n);
    await assert.rejects(c.checkedWrite("a", t1, "k2", "v"), (e: unknown) => {
      assert.ok(e instanceof QuotaExceeded, String(e));
      assert.deepEqual([e.limit, e.max], ["--max-keys-per-job", 1]);
      return true;
    });
    const stream = c.writeStream();
    const out = await stream.write([
      { job: "a", token: t1, key: "k1", value: "w" },
      { job: "a", token: t1, key: "k3", value: "v" },
    ]);
    await stream.close();
    assert.deepEqual(out.map((o) => o.kind), ["written", "quotaExceeded"]);
    assert.deepEqual(out[0], { kind: "written", version: 2n });
    assert.ok(out[1].kind === "quotaExceeded" && out[1].message.includes("--max-keys-per-job"), JSON.stringify(out[1]));
    assert.deepEqual((await c.listKeys("a")).map((k) => Buffer.from(k.key).toString()), ["k1"]);

    // A held job is not deleted.
    await assert.rejects(c.deleteJob("a"), (e: unknown) => {
      assert.ok(e instanceof JobInUse, String(e));
      assert.deepEqual([e.reason, e.retryable], ["JOB_IN_USE", false]);
      return true;
    });
    assert.equal((await c.read("a", "k1")).found, true);

    await c.release("a", "h", t1);
    assert.equal(await c.deleteJob("a"), true);
    assert.equal(await c.deleteJob("a"), false);
    assert.deepEqual(await c.listLeases(), []);
    assert.equal((await c.read("a", "k1")).found, false);

    // Created again, it gets a token above the old one; its room is back.
    const t2 = (await c.acquire("a", "h", 30_000)).lease.token;
    assert.ok(t2 > t1, `${t2} > ${t1}`);
    assert.equal(await c.checkedWrite("a", t2, "k2", "v"), 1n);
  } finally {
    c.close();
    await server.stop();
  }
});

test("a call over --max-in-flight-per-connection is Overloaded", async () => {
  const server = await Server.start(30_000, { extra: ["--max-in-flight-per-connection", "1"] });
  const c = new Client(server.target);
  try {
    await c.acquire("j", "a", 30_000);
    const waiting = c.acquire("j", "b", 30_000, 20_000).catch((e: unknown) => e);
    await server.waitWaiters(1);
    // The waiting Acquire takes the connection's one place.
    await assert.rejects(c.getLease("j"), (e: unknown) => {
      assert.ok(e instanceof Overloaded, String(e));
      assert.ok(e instanceof Unavailable);
      assert.deepEqual([e.limit, e.max, e.reason, e.retryable], ["--max-in-flight-per-connection", 1, "OVERLOADED", true]);
      return true;
    });
    await server.stop();
    await waiting;
  } finally {
    c.close();
    await server.stop();
  }
});
