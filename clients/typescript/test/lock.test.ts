/**
 * `client.lock` (with `await using`) and `client.withLock`, against a real
 * server started with `--enable-chaos`: waiting for a holder to leave,
 * renewing across several TTLs, releasing on a normal exit and on a throw,
 * reporting a loss (the chaos API expires the lease; the server is frozen)
 * with a token that is then fenced, and a timed-out wait that leaves
 * nothing held.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Fenced, LeaseLost, Lock, LockTimeout, Unavailable } from "../src";
import { PATIENCE, Server, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

/** Resolves once `signal` is aborted; fails after `ms`. */
function aborted(signal: AbortSignal, ms = PATIENCE): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(() => reject(new Error(`signal not aborted within ${ms} ms`)), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

describe("lock against the real server", () => {
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

  test("await using: waits for the holder to leave, renews across several TTLs, releases at the end of the block", async () => {
    const job = uniqueJob("lock-wait");
    const ttlMs = 1500;
    await client.acquire(job, "other", 30_000);
    const pending = client.lock(job, { ttlMs, name: "worker", logger: quiet });
    await server.waitWaiters(1);
    await client.release(job, "other", 1n);
    let held: Lock | undefined;
    {
      await using lock = await pending;
      held = lock;
      assert.equal(lock.token, 2n);
      assert.match(lock.holder, /^worker@[0-9a-f-]{36}$/);
      assert.equal(lock.isHeld, true);
      assert.equal(lock.signal.aborted, false);
      // Renewals every 500 ms: four TTLs' worth of them, the lease ours throughout.
      const renewed = await server.metric("leasehold_renewals_total");
      await server.waitRenewals(renewed + 12);
      assert.equal(lock.isHeld, true, "held across several TTLs");
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [lock.holder, 2n]);
      assert.equal(String(await client.checkedWrite(job, lock.token, "k", "v")), "1");
    }
    // Leaving the block released it: the job is free, and the lock says so.
    const lease = await client.getLease(job);
    assert.deepEqual([lease.holder, lease.token], [undefined, 2n]);
    assert.equal(held!.isHeld, false);
    assert.equal(held!.lost, false, "a release is no loss");
    assert.equal(held!.signal.aborted, true, "the signal is aborted once released");
    assert.throws(() => held!.check(), LeaseLost);
  });

  test("withLock: resolves to fn's result and releases; on a throw, releases and rejects with it", async () => {
    const job = uniqueJob("lock-with");
    const out = await client.withLock(job, { ttlMs: 5000, logger: quiet }, async (lock) => {
      assert.equal(lock.isHeld, true);
      assert.equal((await client.getLease(job)).holder, lock.holder);
      return lock.token;
    });
    assert.equal(out, 1n);
    assert.equal((await client.getLease(job)).holder, undefined, "released on a normal exit");

    const boom = new Error("boom");
    let inside: Lock | undefined;
    await assert.rejects(
      client.withLock(job, { ttlMs: 5000, logger: quiet }, async (lock) => {
        inside = lock;
        throw boom;
      }),
      (e) => e === boom,
    );
    const lease = await client.getLease(job);
    assert.deepEqual([lease.holder, lease.token], [undefined, 2n], "released on a throw");
    assert.equal(inside?.isHeld, false);

    // await using releases on a throw too.
    await assert.rejects(
      (async () => {
        await using lock = await client.lock(job, { ttlMs: 5000, logger: quiet });
        inside = lock;
        throw boom;
      })(),
      (e) => e === boom,
    );
    assert.equal((await client.getLease(job)).holder, undefined, "await using released on a throw");
  });

  test("a lease expired by the chaos API: signal aborted with LeaseLost, isHeld false, its token fenced", async () => {
    const job = uniqueJob("lock-lost");
    await client.withLock(job, { ttlMs: 1500, logger: quiet }, async (lock) => {
      await client.chaos().expire(job);
      // The next renewal (within ttl/3) is refused.
      await aborted(lock.signal);
      assert.ok(lock.signal.reason instanceof LeaseLost, `${lock.signal.reason}`);
      assert.equal(lock.lost, true);
      assert.equal(lock.isHeld, false);
      assert.ok(lock.error instanceof LeaseLost);
      assert.throws(() => lock.check(), LeaseLost);
      // Someone else takes the job; our token's writes are fenced.
      const other = await client.acquire(job, "other", 30_000);
      assert.equal(other.lease.token, lock.token + 1n);
      await assert.rejects(client.checkedWrite(job, lock.token, "k", "late"), (e: unknown) => {
        assert.ok(e instanceof Fenced, `${e}`);
        assert.equal(e.currentToken, lock.token + 1n);
        return true;
      });
    });
    // Leaving the block after a loss neither throws nor frees the new holder's lease.
    assert.equal((await client.getLease(job)).holder, "other");
    await client.chaos().clear();
  });

  test("a timeout while waiting rejects with LockTimeout and leaves nothing held", async () => {
    const job = uniqueJob("lock-timeout");
    await client.acquire(job, "other", 30_000);
    const t = performance.now();
    await assert.rejects(client.lock(job, { ttlMs: 5000, timeoutMs: 500, logger: quiet }), (e: unknown) => {
      assert.ok(e instanceof LockTimeout, `${e}`);
      assert.ok(e instanceof Unavailable, "a LockTimeout is an Unavailable (retryable)");
      assert.equal(e.job, job);
      return true;
    });
    const waited = performance.now() - t;
    assert.ok(waited >= 450, `gave up after ${waited} ms, before its timeout`);
    // No Acquire of ours is left waiting: when the holder leaves, the job stays free.
    await waitUntil(async () => (await server.metric("leasehold_waiting_acquires")) === 0, PATIENCE, "no waiter");
    await client.release(job, "other", 1n);
    const lease = await client.getLease(job);
    assert.deepEqual([lease.holder, lease.token], [undefined, 1n]);

    // timeoutMs 0 is one try.
    await client.acquire(job, "other", 30_000);
    await assert.rejects(client.lock(job, { ttlMs: 5000, timeoutMs: 0, logger: quiet }), LockTimeout);
    await client.release(job, "other", 2n);
  });

  test("aborting the wait rejects with an AbortError and leaves nothing held", async () => {
    const job = uniqueJob("lock-abort");
    await client.acquire(job, "other", 30_000);
    const ac = new AbortController();
    const pending = client.lock(job, { ttlMs: 5000, signal: ac.signal, logger: quiet });
    await server.waitWaiters(1);
    ac.abort();
    await assert.rejects(pending, (e: unknown) => (e as Error).name === "AbortError");
    await client.release(job, "other", 1n);
    await waitUntil(async () => (await server.metric("leasehold_waiting_acquires")) === 0, PATIENCE, "no waiter");
    assert.equal((await client.getLease(job)).holder, undefined);
  });

  test("bad options throw a RangeError before anything is sent", async () => {
    await assert.rejects(client.lock("", { ttlMs: 1000 }), RangeError);
    await assert.rejects(client.lock("j", { ttlMs: 0 }), RangeError);
    await assert.rejects(client.lock("j", { ttlMs: 1000, name: "" }), RangeError);
    await assert.rejects(client.lock("j", { ttlMs: 1000, timeoutMs: -1 }), RangeError);
  });
});

test("with the server frozen (SIGSTOP), the lock reports the loss by its own deadline", async () => {
  const server = await Server.start();
  const client = new Client(server.target);
  try {
    const job = uniqueJob("lock-frozen");
    const ttlMs = 1500;
    const lock = await client.lock(job, { ttlMs, logger: quiet });
    // Past one renewal, so the deadline counts from a renewal's send.
    await server.waitRenewals(1);
    server.signal("SIGSTOP");
    const stopped = performance.now();
    await aborted(lock.signal);
    const after = performance.now() - stopped;
    assert.ok(after <= ttlMs + ttlMs / 2, `reported the loss late: ${after} ms after the freeze`);
    assert.equal(lock.isHeld, false);
    assert.ok(lock.error instanceof LeaseLost, `${lock.error}`);
    server.signal("SIGCONT");
    await lock.release(); // never rejects
  } finally {
    client.close();
    await server.stop();
  }
});
