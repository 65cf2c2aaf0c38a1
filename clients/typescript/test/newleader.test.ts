/**
 * The Elector's `"newLeader"` event: every grant of its job (its own
 * included), once per token and in token order, from a WatchLease kept
 * open while it runs, and nothing after `resign()`.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Elector } from "../src";
import { PATIENCE, Server, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };
/** WatchLease streams the server has seen end (with any status). */
const watchesEnded = (s: Server) => s.metricWith("leasehold_rpc_responses_total", 'method="WatchLease"');

describe("newLeader against the real server", () => {
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

  test("three grants to two holders, reported once each, in token order, with the right holders", async () => {
    const job = uniqueJob("newleader");
    await client.acquire(job, "other", 30_000); // token 1
    const e = new Elector(client, job, "e", 30_000, { logger: quiet }).start();
    const seen: [string, bigint][] = [];
    const order: string[] = [];
    // Listened for after start(): the watch starts then.
    e.on("newLeader", (holder, token) => {
      seen.push([holder, token]);
      order.push(`newLeader ${token}`);
    });
    e.on("elected", (token) => order.push(`elected ${token}`));
    try {
      await waitUntil(() => seen.length === 1, PATIENCE, "the current leader's report");
      assert.deepEqual(seen, [["other", 1n]]);

      // The other leaves: our waiting Acquire is granted token 2.
      await server.waitWaiters(1);
      await client.release(job, "other", 1n);
      assert.equal(await e.elected(), 2n);
      // The other waits again, and we hand over to it: token 3.
      const waiting = client.acquire(job, "other", 30_000, 30_000);
      await server.waitWaiters(1);
      const successor = await e.transfer("other");
      assert.equal(successor.token, 3n);
      assert.equal((await waiting).lease.token, 3n);
      await waitUntil(() => seen.length === 3, PATIENCE, "three reports");
      assert.deepEqual(seen, [
        ["other", 1n],
        [e.holder, 2n],
        ["other", 3n],
      ]);
      // Our own grant is reported before (never after) we announce it.
      assert.ok(order.indexOf("newLeader 2") < order.indexOf("elected 2"), order.join(", "));
    } finally {
      const watches = await watchesEnded(server);
      await e.resign();
      // The watch ended with the elector.
      await waitUntil(async () => (await watchesEnded(server)) > watches, PATIENCE, "the watch to end");
    }
    // Nothing after resign: the release and a new grant are not reported.
    await client.release(job, "other", 3n);
    await client.acquire(job, "third", 30_000);
    await client.getLease(job);
    assert.equal(seen.length, 3);
  });

  test("without a newLeader listener, no watch is opened", async () => {
    const job = uniqueJob("newleader-none");
    const before = await server.metricWith("leasehold_rpc_duration_seconds_count", 'method="WatchLease"');
    const e = new Elector(client, job, "e", 30_000, { logger: quiet }).start();
    assert.equal(await e.elected(), 1n);
    await e.resign();
    // A watch, had one been opened, would have ended with the resign.
    assert.equal(await server.metricWith("leasehold_rpc_duration_seconds_count", 'method="WatchLease"'), before);
  });

  test("a watch broken by a server restart is opened again: another's grant is still reported", async () => {
    const local = await Server.start();
    const c = new Client(local.target);
    const job = uniqueJob("newleader-restart");
    await c.acquire(job, "other", 60_000); // token 1, outlives the restart
    const seen: [string, bigint][] = [];
    const e = new Elector(c, job, "e", 2000, { logger: quiet });
    e.on("newLeader", (holder, token) => seen.push([holder, token]));
    e.start();
    let server2: Server | undefined;
    try {
      await waitUntil(() => seen.length === 1, PATIENCE, "the current leader's report");
      await local.kill(); // the watch breaks
      server2 = await local.restart();
      // The channel is back once a call goes through (it may be between reconnects).
      await waitUntil(() => c.getLease(job).then(() => true, () => false), PATIENCE, "the client to reconnect");
      // Both wait: our elector (campaigning again) and a third holder.
      const third = c.acquire(job, "third", 30_000, 30_000);
      await server2.waitWaiters(2);
      // A grant our campaign does not learn of: only the watch, opened again, can tell.
      await c.transferLease(job, "other", 1n, "third");
      assert.equal((await third).lease.token, 2n);
      await waitUntil(() => seen.length === 2, PATIENCE, "the third holder's report");
      assert.deepEqual(seen, [
        ["other", 1n],
        ["third", 2n],
      ]);
      assert.equal(e.isLeader, false);
    } finally {
      await e.resign();
      c.close();
      await (server2 ?? local).stop();
    }
  });
});
