/**
 * Retries, reconnecting and cancellation against the real server: an
 * outage is retried with backoff and bounded warnings, the elector leads
 * again soon after the server is back, aborted calls and waits reject with
 * an AbortError, and an aborted waiting Acquire gives back a grant it may
 * have been given.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, Elector, type Acquired } from "../src";
import { Backoff, Warnings, WARN_EVERY_MS } from "../src/retry";
import { PATIENCE, Server, sleep, waitUntil } from "./harness";

test("backoff doubles with jitter up to its cap; one warning every few seconds", () => {
  const b = new Backoff(100, 1000);
  for (const want of [100, 200, 400, 800, 1000, 1000]) {
    const d = b.next();
    assert.ok(d >= want / 2 && d <= want, `${d} not in [${want / 2}, ${want}]`);
  }
  b.reset();
  assert.ok(b.next() <= 100);
  assert.ok(new Backoff(5000, 5000).nextBefore(12_000, 10_000) <= 1000);
  const w = new Warnings();
  assert.equal(w.allow(0), 0);
  for (let i = 1; i < 50; i++) assert.equal(w.allow(i * 100), undefined);
  assert.equal(w.allow(WARN_EVERY_MS), 49);
});

test("an outage is retried with backoff, and the elector leads again when the server is back", async () => {
  let server = await Server.start();
  const client = new Client(server.target);
  const counts = { warnings: 0, attempts: 0 };
  const logger = { warn: () => counts.warnings++, debug: () => counts.attempts++ };
  const e = new Elector(client, "outage", "e", 2000, { logger }).start();
  try {
    const first = await e.elected({ timeoutMs: PATIENCE });
    assert.ok(first !== undefined);
    await server.kill();
    const killed = performance.now();
    await waitUntil(() => !e.isLeader, PATIENCE, "the step-down by its deadline");
    // The outage lasts 5 s, past the deadline and into the campaign's backoff.
    await sleep(Math.max(0, 5000 - (performance.now() - killed)));
    console.log(`5 s outage: ${counts.attempts} failed attempts, ${counts.warnings} warnings`);
    // Renewals from ttl/10 within the deadline, then a campaign from 100 ms
    // up to 1 s; warnings one every 5 s, plus the step-down.
    assert.ok(counts.attempts <= 25, `${counts.attempts} attempts in a 5 s outage`);
    assert.ok(counts.warnings <= 4, `${counts.warnings} warnings in a 5 s outage`);
    server = await server.restart();
    const back = performance.now();
    const token = await e.elected({ timeoutMs: PATIENCE });
    console.log(`re-elected ${Math.round(performance.now() - back)} ms after the server was back`);
    assert.ok(token !== undefined && token >= first);
  } finally {
    await e.resign();
    client.close();
    await server.stop();
  }
});

test("aborted calls and waits reject with an AbortError; elected() times out with a TimeoutError", async () => {
  const server = await Server.start();
  const client = new Client(server.target);
  try {
    assert.ok((await client.acquire("abort", "a", 30_000)).acquired);
    const ac = new AbortController();
    const waiting = client.acquire("abort", "b", 30_000, 10_000, { signal: ac.signal });
    await server.waitWaiters(1);
    ac.abort();
    await assert.rejects(waiting, (e: Error) => e.name === "AbortError");
    await assert.rejects(client.getLease("abort", { signal: ac.signal }), (e: Error) => e.name === "AbortError");

    const e = new Elector(client, "abort", "e", 30_000, { logger: { warn: () => {} } }).start();
    try {
      const stop = new AbortController();
      const p = e.elected({ signal: stop.signal });
      stop.abort();
      await assert.rejects(p, (err: Error) => err.name === "AbortError");
      await assert.rejects(e.elected({ timeoutMs: 100 }), (err: Error) => err.name === "TimeoutError");
    } finally {
      await e.resign();
    }
  } finally {
    client.close();
    await server.stop();
  }
});

test("an aborted waiting acquire gives back a grant it was given (50 rounds)", async () => {
  const server = await Server.start();
  const a = new Client(server.target);
  let told = 0;
  let givenBack = 0;
  try {
    for (let i = 0; i < 50; i++) {
      const job = `cancel-${i}`;
      const held = await a.acquire(job, "a", 30_000);
      assert.ok(held.acquired);
      const b = new Client(server.target);
      try {
        const ac = new AbortController();
        // The server's answers to GetLease: the test's own, and the read of
        // B's give-back.
        const looked = await server.metricWith("leasehold_rpc_responses_total", 'method="GetLease"');
        let ownLooks = 0;
        const waiting: Promise<Acquired | undefined> = b
          .acquire(job, "b", 30_000, 20_000, { signal: ac.signal })
          .catch(() => undefined);
        await server.waitWaiters(1);
        const skew = ((i * 137) % 1000) / 1000;
        const cancel = (async () => {
          if (i % 2 === 0) await sleep(skew);
          ac.abort();
        })();
        const release = (async () => {
          if (i % 2 === 1) await sleep(skew);
          await a.release(job, "a", held.lease.token);
        })();
        await Promise.all([cancel, release]);
        const r = await waiting;
        if (r?.acquired) {
          told++;
          continue;
        }
        await waitUntil(
          async () => {
            ownLooks++;
            const l = await a.getLease(job);
            if (l.holder === undefined && l.token > held.lease.token) givenBack++;
            return l.holder === undefined;
          },
          PATIENCE,
          `${job}: free again, not held by a cancelled B`,
        );
        // B's clean-up, its give-back, reads the lease (100 ms after the
        // abort) before its channel closes.
        await waitUntil(
          async () =>
            (await server.metricWith("leasehold_rpc_responses_total", 'method="GetLease"')) > looked + ownLooks,
          PATIENCE,
          `${job}: B's give-back to read the lease`,
        );
      } finally {
        b.close();
      }
    }
    console.log(`50 rounds: ${told} grants reached B before the cancel, ${givenBack} given back`);
  } finally {
    a.close();
    await server.stop();
  }
});
