/**
 * The `ElectorSet` against a real server started with `--enable-chaos`:
 * one set leads many jobs and keeps them over several TTLs with its
 * renewals on one KeepAlive stream (the server's metrics show KeepAlive
 * messages, no unary Renew); a chaos-expired job steps down alone and is
 * campaigned for again; with the server frozen each job steps down by its
 * own deadline; two sets on the same jobs share them out and a resign
 * hands over; resign releases every lease; a refused campaign stops its
 * job alone; a failure a campaign does not foresee is logged and the job
 * campaigned for again.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, ElectorSet, InvalidArgument } from "../src";
import { splitRenewals } from "../src/keepalive";
import { PATIENCE, Server, sleep, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

/** KeepAlive streams the server has opened, and unary Renews it answered. */
const keepAlives = (s: Server) => s.metricWith("leasehold_rpc_duration_seconds_count", 'method="KeepAlive"');
const renews = (s: Server) => s.metricWith("leasehold_rpc_duration_seconds_count", 'method="Renew"');

/** Records a set's events as "elected job token" / "lost job token", with when they came. */
function record(set: ElectorSet): { events: string[]; at: Map<string, number> } {
  const events: string[] = [];
  const at = new Map<string, number>();
  set.on("elected", (job, token) => {
    events.push(`elected ${job} ${token}`);
    at.set(`elected ${job}`, performance.now());
  });
  set.on("lost", (job, token) => {
    events.push(`lost ${job} ${token}`);
    at.set(`lost ${job}`, performance.now());
  });
  return { events, at };
}

function jobs(prefix: string, n: number): string[] {
  const base = uniqueJob(prefix);
  return Array.from({ length: n }, (_, i) => `${base}-${i}`);
}

describe("ElectorSet against the real server", () => {
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

  test("one set leads N jobs over several TTLs, renewing them over KeepAlive, not Renew", async () => {
    const names = jobs("set-lead", 5);
    const ttlMs = 1500;
    const set = new ElectorSet(client, "fleet", ttlMs, { logger: quiet });
    const { events } = record(set);
    const streams = await keepAlives(server);
    set.campaign(...names);
    try {
      assert.match(set.holder, /^fleet@[0-9a-f-]{36}$/);
      await waitUntil(() => set.leading().size === names.length, PATIENCE, "every job led");
      for (const job of names) {
        assert.equal(set.token(job), 1n);
        assert.equal((await client.getLease(job)).holder, set.holder, "one holder for the whole set");
      }
      // Several TTLs of renewals (the server counts Renews and KeepAlive
      // entries alike), all over one KeepAlive stream: no unary Renew.
      const rn = await renews(server);
      const renewed = await server.metric("leasehold_renewals_total");
      await server.waitRenewals(renewed + names.length * 12); // 12 rounds: four TTLs
      assert.equal(await renews(server), rn, "no unary Renew");
      assert.equal(await keepAlives(server), streams + 1, "one KeepAlive stream for the whole set");
      assert.equal(set.leading().size, names.length, "every job still led");
      assert.deepEqual(events.filter((e) => e.startsWith("lost")), []);
    } finally {
      await set.resign();
    }
  });

  test("client.keepAlive: 1,200 renewals in one call, split into messages of at most 1000, one outcome each in order", async () => {
    const names = jobs("keepalive", 1200);
    for (let i = 0; i < names.length; i += 100) {
      await Promise.all(names.slice(i, i + 100).map((job) => client.acquire(job, "h", 30_000)));
    }
    const renewals = names.map((job) => ({ job, holder: "h", token: 1n, ttlMs: 20_000 }));
    renewals[3] = { ...renewals[3], holder: "someone-else" }; // not theirs: LEASE_LOST
    renewals[1100] = { ...renewals[1100], token: 9n }; // never issued: UNKNOWN_TOKEN
    const stream = client.keepAlive();
    try {
      const out = await stream.renew(renewals);
      assert.equal(out.length, names.length);
      out.forEach((o, i) => assert.equal(o.job, names[i], "in order"));
      assert.equal(out[3].kind, "leaseLost");
      assert.equal(out[1100].kind, "unknownToken");
      const renewed = out.filter((o) => o.kind === "renewed");
      assert.equal(renewed.length, names.length - 2);
      if (renewed[0].kind === "renewed") assert.equal(renewed[0].lease.ttlMs, 20_000);
    } finally {
      stream.cancel();
    }
    // The split itself: by count, and one empty message for an empty batch.
    const entry = { job: "j", holder: "h", token: 1n, ttl: { seconds: 1n, nanos: 0 } };
    assert.deepEqual(splitRenewals(Array(2500).fill(entry)).map((m) => m.length), [1000, 1000, 500]);
    assert.deepEqual(splitRenewals([]).map((m) => m.length), [0]);
  });

  test("a job expired by the chaos API steps down alone and is campaigned for again", async () => {
    const names = jobs("set-chaos", 3);
    const set = new ElectorSet(client, "fleet", 1500, { logger: quiet });
    const { events } = record(set);
    set.campaign(...names);
    try {
      await waitUntil(() => set.leading().size === 3, PATIENCE, "every job led");
      await client.chaos().expire(names[1]);
      // Its renewal is refused (LEASE_LOST): it steps down, and its campaign wins it back with token 2.
      await waitUntil(() => set.token(names[1]) === 2n, PATIENCE, "the job led again");
      assert.ok(events.includes(`lost ${names[1]} 1`), events.join(", "));
      assert.ok(events.includes(`elected ${names[1]} 2`), events.join(", "));
      // The others were never touched.
      for (const job of [names[0], names[2]]) {
        assert.equal(set.token(job), 1n);
        assert.ok(!events.includes(`lost ${job} 1`), events.join(", "));
      }
    } finally {
      await set.resign();
      await client.chaos().clear();
    }
  });

  test("a failure the campaign does not foresee is logged and the job campaigned for again", async () => {
    // A failure nothing in the campaign expects (here injected once, right
    // after a grant) is logged, and the job is campaigned for again: the
    // set never silently stops campaigning for a job.
    const job = uniqueJob("set-unforeseen");
    const logged: string[] = [];
    const set = new ElectorSet(client, "fleet", 5000, { logger: { warn: (m) => logged.push(m) } });
    const { events } = record(set);
    type Anchor = (job: string, token: bigint, sent: number) => Promise<number | undefined>;
    const inner = set as unknown as { anchor: Anchor };
    const anchor = inner.anchor.bind(set);
    let failures = 0;
    inner.anchor = async (...args) => {
      if (failures === 0) {
        failures++;
        throw new Error("injected");
      }
      return anchor(...args);
    };
    set.campaign(job);
    try {
      await waitUntil(() => set.isLeader(job), PATIENCE, "the job led");
      assert.equal(failures, 1, "the failure was injected");
      assert.equal(set.token(job), 1n);
      assert.equal(set.error(job), undefined);
      assert.equal((await client.getLease(job)).holder, set.holder);
      assert.ok(
        logged.some((m) => m.includes(job) && m.includes("campaigning again") && m.includes("injected")),
        logged.join("\n"),
      );
    } finally {
      await set.resign();
    }
    assert.deepEqual(events, [`elected ${job} 1`, `lost ${job} 1`]);
  });

  test("two sets on the same jobs: one leads each; resign hands every job over at once; resign releases all", async () => {
    const names = jobs("set-two", 4);
    const ttlMs = 30_000; // a hand-over by expiry would take far longer than the bound below
    const a = new ElectorSet(client, "a", ttlMs, { logger: quiet });
    const b = new ElectorSet(client, "b", ttlMs, { logger: quiet });
    const ra = record(a);
    const rb = record(b);
    a.campaign(...names);
    await waitUntil(() => a.leading().size === names.length, PATIENCE, "a leads every job");
    b.campaign(...names);
    try {
      await server.waitWaiters(names.length);
      assert.equal(b.leading().size, 0, "b leads nothing while a does");
      const t = performance.now();
      await a.resign();
      assert.equal(a.leading().size, 0);
      for (const job of names) assert.ok(ra.events.includes(`lost ${job} 1`), ra.events.join(", "));
      await waitUntil(() => b.leading().size === names.length, PATIENCE, "b leads every job");
      const handover = performance.now() - t;
      assert.ok(handover < ttlMs / 3, `handed over by the release, not expiry: ${handover} ms`);
      for (const job of names) {
        assert.equal(b.token(job), 2n);
        assert.equal((await client.getLease(job)).holder, b.holder);
      }
    } finally {
      await a.resign();
      await b.resign();
    }
    for (const job of names) {
      assert.ok(rb.events.includes(`lost ${job} 2`), rb.events.join(", "));
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [undefined, 2n], `${job} released`);
    }
  });

  test("with the server frozen, each job steps down by its own deadline", async () => {
    // Two jobs granted about a second apart, and the server frozen before
    // any renewal: their deadlines (grant + TTL) are a second apart too. A
    // renewal before the freeze would give both the same deadline: then
    // the round is run again.
    const ttlMs = 6000;
    const gap = 1000;
    for (let attempt = 1; ; attempt++) {
      const local = await Server.start();
      const c = new Client(local.target);
      const [first, second] = jobs("set-frozen", 2);
      const set = new ElectorSet(c, "fleet", ttlMs, { logger: quiet });
      const { at } = record(set);
      try {
        set.campaign(first);
        await waitUntil(() => set.isLeader(first), PATIENCE, "the first job led");
        await sleep(gap); // not a wait for a state: the gap between the two grants
        set.campaign(second);
        await waitUntil(() => set.isLeader(second), PATIENCE, "the second job led");
        if ((await local.metric("leasehold_renewals_total")) !== 0) {
          assert.ok(attempt < 3, "a renewal came before the freeze in three rounds: the machine is too slow for this test");
          continue;
        }
        local.signal("SIGSTOP");
        const frozen = performance.now();
        await waitUntil(() => !set.isLeader(first) && !set.isLeader(second), PATIENCE, "both stepped down");
        await waitUntil(() => at.has(`lost ${first}`) && at.has(`lost ${second}`), PATIENCE, "both reported lost");
        const lostFirst = at.get(`lost ${first}`)!;
        const lostSecond = at.get(`lost ${second}`)!;
        // Each by its own deadline (a grant's deadline is before its "elected" plus the TTL)...
        for (const job of [first, second]) {
          const late = at.get(`lost ${job}`)! - (at.get(`elected ${job}`)! + ttlMs);
          assert.ok(late <= ttlMs / 4, `${job} stepped down ${late} ms after its deadline`);
        }
        assert.ok(lostFirst - frozen <= ttlMs + ttlMs / 4, "the first stepped down within a TTL of the freeze");
        // ... so not together: the second about the gap after the first.
        assert.ok(lostSecond - lostFirst >= gap / 2, `stepped down ${lostSecond - lostFirst} ms apart`);
        return;
      } finally {
        local.signal("SIGCONT");
        await set.resign();
        c.close();
        await local.stop();
      }
    }
  });
});

test("a broken KeepAlive stream is opened again: the set goes on leading on a restarted server", async () => {
  const first = await Server.start();
  const client = new Client(first.target);
  const names = jobs("set-restart", 3);
  const set = new ElectorSet(client, "fleet", 4000, { logger: quiet });
  let second: Server | undefined;
  try {
    set.campaign(...names);
    await waitUntil(() => set.leading().size === names.length, PATIENCE, "every job led");
    await first.waitRenewals(names.length); // the stream is open
    await first.kill(); // the stream breaks
    second = await first.restart(); // same port, same data: the leases are still there
    // A new stream on the new server, renewing every job (led with its old token, or a new one after a loss).
    await waitUntil(async () => (await keepAlives(second!)) >= 1, PATIENCE, "a KeepAlive stream on the restarted server");
    await second.waitRenewals(names.length * 2);
    await waitUntil(() => set.leading().size === names.length, PATIENCE, "every job led again");
    for (const job of names) assert.equal((await client.getLease(job)).holder, set.holder);
  } finally {
    await set.resign();
    client.close();
    await (second ?? first).stop();
  }
});

test("a campaign the server refuses stops that job alone, keeping the error", async () => {
  const server = await Server.start(30_000, { extra: ["--max-name-bytes", "64"] });
  const client = new Client(server.target);
  const set = new ElectorSet(client, "fleet", 5000, { logger: quiet });
  const errors: [string, unknown][] = [];
  set.on("error", (job, e) => errors.push([job, e]));
  const good = uniqueJob("set-good");
  const bad = "x".repeat(65);
  try {
    set.campaign(good, bad);
    await waitUntil(() => set.isLeader(good) && set.error(bad) !== undefined, PATIENCE, "one led, one refused");
    assert.ok(set.error(bad) instanceof InvalidArgument, `${set.error(bad)}`);
    assert.deepEqual(errors.map(([j]) => j), [bad]);
    assert.equal(set.error(good), undefined);
    assert.throws(() => set.campaign(""), RangeError);
    assert.throws(() => new ElectorSet(client, "", 1000), RangeError);
    assert.throws(() => new ElectorSet(client, "n", 0), RangeError);
  } finally {
    await set.resign();
    client.close();
    await server.stop();
  }
});
