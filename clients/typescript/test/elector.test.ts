import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Elector, Fenced, InvalidArgument, LeaseholdError } from "../src";
import { PATIENCE, Server, sleep, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

function record(e: Elector): string[] {
  const events: string[] = [];
  e.on("elected", (t) => events.push(`elected ${t}`));
  e.on("lost", (t) => events.push(`lost ${t}`));
  return events;
}

describe("Elector against the real server", () => {
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

  test("exactly one of two leads; resign hands over at once", async () => {
    const job = uniqueJob("two");
    // The hand-over by the release is told from one by expiry by a bound
    // of a third of the TTL, longer than a stall.
    const ttl = 30_000;
    const a = new Elector(client, job, "a", ttl, { logger: quiet });
    const b = new Elector(client, job, "b", ttl, { logger: quiet });
    const ea = record(a);
    const eb = record(b);
    a.start();
    b.start();
    after(() => Promise.all([a.resign(), b.resign()]));
    assert.notEqual(a.holder, b.holder);
    const first = await Promise.race([a.elected(), b.elected()]);
    assert.equal(first, 1n);
    const [leader, follower, el, ef] = a.isLeader ? [a, b, ea, eb] : [b, a, eb, ea];
    await server.waitWaiters(1);
    assert.equal(follower.isLeader, false);
    assert.equal((await client.getLease(job)).holder, leader.holder);
    const t = performance.now();
    await leader.resign();
    assert.equal(await follower.elected(), 2n);
    const handover = performance.now() - t;
    assert.ok(handover < ttl / 3, `hand-over came from the release, not expiry: ${handover} ms`);
    assert.deepEqual(el, ["elected 1", "lost 1"]);
    await follower.resign();
    assert.deepEqual(ef, ["elected 2", "lost 2"]);
    const lease = await client.getLease(job);
    assert.deepEqual([lease.holder, lease.token], [undefined, 2n], "resign released the lease");
  });

  test("keeps leading across renewals", async () => {
    const job = uniqueJob("renewals");
    // Renewals go out every 3 s, and the lease lasts 9 s: a stall between
    // two of them does not end it.
    const ttl = 9000;
    const e = new Elector(client, job, "r", ttl, { logger: quiet });
    const events = record(e);
    e.start();
    try {
      const renewed = await server.metric("leasehold_renewals_total");
      assert.equal(await e.elected({ timeoutMs: PATIENCE }), 1n);
      // Four renewals, TTL/3 apart: it leads past the TTL of its grant.
      await waitUntil(
        async () => {
          assert.equal(e.token, 1n);
          return (await server.metric("leasehold_renewals_total")) >= renewed + 4;
        },
        2 * PATIENCE,
        "4 renewals",
      );
      assert.equal(e.token, 1n);
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [e.holder, 1n]);
      assert.deepEqual(events, ["elected 1"]);
    } finally {
      await e.resign();
    }
    assert.equal((await client.getLease(job)).holder, undefined);
  });

  test("a grant long after the acquire was sent is confirmed, not dropped", async () => {
    const job = uniqueJob("late");
    // The elector's waiting Acquire waits up to 3*TTL (18 s); it is
    // granted 1.5*TTL after it was sent, past its TTL. A TTL of 6 s
    // outlasts a stall between the renewals that follow.
    const ttl = 6000;
    await client.acquire(job, "other", 60_000);
    const e = new Elector(client, job, "late", ttl, { logger: quiet });
    const events = record(e);
    e.start();
    try {
      await server.waitWaiters(1);
      await sleep(1.5 * ttl); // the waiting Acquire ages past a TTL
      const renewed = await server.metric("leasehold_renewals_total");
      await client.release(job, "other", 1n);
      assert.equal(await e.elected({ timeoutMs: PATIENCE }), 2n);
      // The confirming renewal and three more, TTL/3 apart: it leads past
      // a TTL after the grant.
      await waitUntil(
        async () => {
          assert.equal(e.token, 2n, `events ${events}`);
          return (await server.metric("leasehold_renewals_total")) >= renewed + 4;
        },
        2 * PATIENCE,
        "4 renewals",
      );
      assert.equal(e.token, 2n);
      assert.deepEqual(events, ["elected 2"], "stepped down after the late grant");
    } finally {
      await e.resign();
    }
  });

  test("LEASE_LOST on renew steps down, then campaigns again", async () => {
    const job = uniqueJob("again");
    // The elector's lease outlives the steps before the theft; it learns
    // of the theft from its next renewal, TTL/3 (3 s) later.
    const ttl = 9000;
    const e = new Elector(client, job, "again", ttl, { logger: quiet });
    const events = record(e);
    e.start();
    try {
      assert.equal(await e.elected({ timeoutMs: PATIENCE }), 1n);
      const losses = await server.metric("leasehold_renew_losses_total");
      // Hand the lease to a waiting thief behind the elector's back: the
      // release grants the queued waiter in the same step.
      const thief = client.acquire(job, "thief", 60_000, PATIENCE);
      await server.waitWaiters(1);
      await client.release(job, e.holder, 1n);
      const other = await thief;
      assert.equal(other.acquired, true);
      assert.equal(other.lease.token, 2n);
      await waitUntil(() => events.includes("lost 1"), PATIENCE, "the step-down");
      // It stepped down because its renewal was refused, not by its own
      // deadline: the server refused a renewal with LEASE_LOST.
      assert.ok((await server.metric("leasehold_renew_losses_total")) > losses, "stepped down without a lost renewal");
      // It campaigns again: its waiting Acquire is granted when the thief
      // lets go.
      await server.waitWaiters(1);
      await client.release(job, "thief", 2n);
      await waitUntil(() => events.includes("elected 3"), PATIENCE, "re-election");
      assert.deepEqual(events, ["elected 1", "lost 1", "elected 3"]);
    } finally {
      await e.resign();
    }
  });

  test("two electors with one name in one process are two holders", async () => {
    const job = uniqueJob("twin");
    const ttl = 10_000;
    const a = new Elector(client, job, "twin", ttl, { logger: quiet }).start();
    const b = new Elector(client, job, "twin", ttl, { logger: quiet }).start();
    after(() => Promise.all([a.resign(), b.resign()]));
    assert.notEqual(a.holder, b.holder, "one identity per elector");
    assert.ok(a.holder.startsWith("twin@") && b.holder.startsWith("twin@"));
    assert.equal(await Promise.race([a.elected(), b.elected()]), 1n);
    const [leader, follower] = a.isLeader ? [a, b] : [b, a];
    await server.waitWaiters(1); // the follower is queued behind the leader
    for (let i = 0; i < 10; i++) {
      assert.equal(leader.token, 1n);
      assert.equal(follower.token, undefined);
      await sleep(30);
    }
    assert.equal((await client.getLease(job)).holder, leader.holder);
    assert.equal(await client.checkedWrite(job, 1n, "k", "a"), 1n);
    await leader.resign();
    const token = (await follower.elected())!;
    assert.ok(token > 1n, `a higher token: ${token}`);
    await assert.rejects(client.checkedWrite(job, 1n, "k", "old"), (e) => e instanceof Fenced && e.currentToken === token);
    await client.checkedWrite(job, token, "k", "b");
    assert.equal((await client.getLease(job)).holder, follower.holder);
  });

  test("an empty job or name, or a ttl that is not positive, is refused up front", () => {
    assert.throws(() => new Elector(client, "j", "n", 0), RangeError);
    assert.throws(() => new Elector(client, "", "n", 1000), RangeError);
    assert.throws(() => new Elector(client, "j", "", 1000), RangeError);
  });
});

test("steps down by its own deadline when the server is paused; resign stays bounded", async () => {
  const server = await Server.start();
  const client = new Client(server.target);
  // Its deadline (a renewal's send time plus 10 s) is told from a
  // step-down half a TTL late by more than a stall.
  const ttl = 10_000;
  const e = new Elector(client, "paused", "e", ttl, { logger: quiet }).start();
  try {
    assert.equal(await e.elected({ timeoutMs: PATIENCE }), 1n);
    await server.waitRenewals(1); // its deadline is now a renewal's
    server.signal("SIGSTOP");
    const stopped = performance.now();
    const lost = e.lost();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      lost,
      new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("never stepped down")), PATIENCE))),
    ]).finally(() => clearTimeout(timer));
    const after = performance.now() - stopped;
    assert.ok(after <= ttl + ttl / 2, `stepped down late: ${after} ms`);
    assert.equal(e.token, undefined);
    const t = performance.now();
    await e.resign();
    assert.ok(performance.now() - t < ttl / 2, "resign is bounded");
  } finally {
    server.signal("SIGCONT");
    await e.resign();
    client.close();
    await server.stop();
  }
});

test("a campaign the server refuses stops: 'error' is emitted and elected() rejects", async () => {
  const server = await Server.start(30_000, { extra: ["--max-ttl", "10s", "--max-name-bytes", "64"] });
  const client = new Client(server.target);
  try {
    for (const [job, ttl, field] of [["long-ttl", 20_000, "ttl"], ["j".repeat(65), 1000, "job"]] as const) {
      const e = new Elector(client, job, "n", ttl, { logger: quiet });
      const emitted = new Promise<LeaseholdError>((resolve) => e.once("error", resolve));
      e.start();
      await assert.rejects(e.elected(), (err) => err instanceof InvalidArgument && err.field === field);
      const err = await emitted;
      assert.ok(err instanceof InvalidArgument && err === e.error);
      // Stopped campaigning: a later elected() rejects at once too.
      await assert.rejects(e.elected(), InvalidArgument);
      assert.equal(e.isLeader, false);
      await e.resign();
    }
  } finally {
    client.close();
    await server.stop();
  }
});
