/**
 * Counted leases (semaphores) against the real server: `slots` on the
 * unary acquire, the Elector and the lock. Slot k of job J is a job of its
 * own, "J#k", with its own token: the holder renews, releases and writes
 * with that name.
 *
 * TTLs are long (30 s) wherever a hand-over must be told from an expiry,
 * so that a stalled, loaded machine cannot make one look like the other.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Elector, electorHolder, Fenced, InvalidArgument, type Lease, LockTimeout, NoSuccessor } from "../src";
import { PATIENCE, Server, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

/**
 * Waits until a counted Acquire of `job` by the holder `holder` (or whose
 * holder starts with it) is first in line: the server then holds the
 * job's own lease for it (the line's turn), as GetLease(job) shows. The
 * first waiter of a counted lease is that turn's holder, not one of the
 * server's waiting Acquires.
 */
async function waitTurn(client: Client, job: string, holder: string): Promise<void> {
  await waitUntil(
    async () => (await client.getLease(job)).holder?.startsWith(holder) ?? false,
    PATIENCE,
    `${holder} first in line for ${job}`,
  );
}

/** Asserts that `p` rejects with `InvalidArgument` naming the field "slots"; returns its message. */
async function refusedNamingSlots(p: Promise<unknown>): Promise<string> {
  let message = "";
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof InvalidArgument, `${e}`);
    assert.equal(e.field, "slots");
    message = e.message;
    return true;
  });
  return message;
}

describe("counted leases (slots) against the real server", () => {
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

  test("three electors with slots=2: two lead at once in J#0 and J#1, the third waits; a resign hands its slot to the third with token + 1; the old token is Fenced", async () => {
    const job = uniqueJob("semaphore");
    const ttl = 30_000;
    const electors = ["a", "b", "c"].map((n) => new Elector(client, job, n, ttl, { logger: quiet, slots: 2 }));
    const elected = new Map<Elector, string[]>();
    for (const e of electors) {
      const seen: string[] = [];
      elected.set(e, seen);
      e.on("elected", (token, _proof, leaseJob) => seen.push(`${leaseJob} ${token}`));
      e.start();
    }
    after(() => Promise.all(electors.map((e) => e.resign())));

    await waitUntil(() => electors.filter((e) => e.isLeader).length === 2, PATIENCE, "two slot holders");
    const leaders = electors.filter((e) => e.isLeader);
    const [waiter] = electors.filter((e) => !e.isLeader);
    // The third's counted Acquire is first in line, not granted a slot.
    await waitTurn(client, job, waiter.holder);
    assert.equal(leaders.length, 2);
    assert.deepEqual(leaders.map((e) => e.leaseJob()).sort(), [`${job}#0`, `${job}#1`]);
    assert.deepEqual(leaders.map((e) => e.slot()).sort(), [0, 1]);
    for (const e of leaders) {
      // Each slot its own job with its own token: both are token 1.
      assert.equal(e.token, 1n);
      const lease = await client.getLease(e.leaseJob()!);
      assert.deepEqual([lease.holder, lease.token], [e.holder, 1n]);
      assert.deepEqual(elected.get(e), [`${e.leaseJob()} 1`], "elected names the slot's job");
    }
    assert.equal(waiter.isLeader, false);
    assert.equal(waiter.leaseJob(), undefined);
    assert.equal(waiter.slot(), undefined);
    assert.deepEqual(elected.get(waiter), []);

    const [first, second] = leaders;
    const kept = second.leaseJob()!;
    const freed = first.leaseJob()!;
    const freedSlot = first.slot()!;
    const oldToken = first.token!;
    const t = performance.now();
    await first.resign();
    assert.equal(first.leaseJob(), undefined);
    // The release hands the freed slot to the waiter, at once (not by expiry).
    assert.equal(await waiter.elected({ timeoutMs: PATIENCE }), oldToken + 1n);
    const handover = performance.now() - t;
    assert.ok(handover < ttl / 3, `hand-over came from the release of the slot's job, not expiry: ${handover} ms`);
    assert.equal(waiter.leaseJob(), freed);
    assert.equal(waiter.slot(), freedSlot);
    assert.deepEqual(elected.get(waiter), [`${freed} ${oldToken + 1n}`]);
    const lease = await client.getLease(freed);
    assert.deepEqual([lease.holder, lease.token], [waiter.holder, oldToken + 1n]);
    // The other slot did not move.
    assert.deepEqual([second.leaseJob(), second.token], [kept, 1n]);

    // The resigned leader's write on its slot's job, with its old token: fenced.
    await assert.rejects(client.checkedWrite(freed, oldToken, "status", "stale"), (e: unknown) => {
      assert.ok(e instanceof Fenced, `${e}`);
      assert.equal(e.currentToken, oldToken + 1n);
      return true;
    });
    // Live slot holders write on their slots' jobs with their tokens.
    assert.equal(await client.checkedWrite(second.leaseJob()!, second.token!, "status", "b"), 1n);
    assert.equal(await client.checkedWrite(waiter.leaseJob()!, waiter.token!, "status", "c"), 1n);
    const stored = await client.read(freed, "status");
    assert.deepEqual([stored.value.toString(), stored.token], ["c", oldToken + 1n]);

    await waiter.resign();
    const released = await client.getLease(freed);
    assert.deepEqual([released.holder, released.token], [undefined, oldToken + 1n], "resign released the slot's job");
  });

  test("an error naming a slot's job reads it as sent: the '#' is not left percent-encoded", async () => {
    const job = uniqueJob("named");
    const a = await client.acquire(job, "a", 30_000, 0, { slots: 2 });
    assert.equal(a.lease.job, `${job}#0`);
    await assert.rejects(client.transferLease(a.lease.job, "a", a.lease.token), (e: unknown) => {
      assert.ok(e instanceof NoSuccessor, `${e}`);
      assert.ok(e.message.includes(`"${job}#0"`), e.message);
      return true;
    });
    await client.release(a.lease.job, "a", a.lease.token);
  });

  test("a counted elector renews its slot's job: it keeps leading across several TTLs", async () => {
    const job = uniqueJob("semaphore-renew");
    // Renewals every 2 s of a 6 s lease: a stall between two does not end it.
    const ttl = 6000;
    const e = new Elector(client, job, "r", ttl, { logger: quiet, slots: 3 });
    e.start();
    after(() => e.resign());
    const renewed = await server.metric("leasehold_renewals_total");
    assert.equal(await e.elected({ timeoutMs: PATIENCE }), 1n);
    const slotJob = e.leaseJob()!;
    assert.equal(slotJob, `${job}#${e.slot()}`);
    await waitUntil(
      async () => {
        assert.equal(e.token, 1n, "still leading with token 1");
        return (await server.metric("leasehold_renewals_total")) >= renewed + 4;
      },
      2 * PATIENCE,
      "4 renewals",
    );
    assert.equal(e.leaseJob(), slotJob);
    const lease = await client.getLease(slotJob);
    assert.deepEqual([lease.holder, lease.token], [e.holder, 1n]);
  });

  test("a unary acquire naming another count is InvalidArgument naming slots, and so is slots=101; nothing changed", async () => {
    const job = uniqueJob("semaphore-count");
    const h1 = electorHolder("one");
    const a = await client.acquire(job, h1, 30_000, 0, { slots: 3 });
    assert.equal(a.acquired, true);
    assert.deepEqual(
      [a.lease.job, a.lease.slot, a.lease.slots, a.lease.token, a.lease.holder],
      [`${job}#0`, 0, 3, 1n, h1],
    );

    // Another count than the job's: refused, the message says the job's.
    const message = await refusedNamingSlots(client.acquire(job, electorHolder("two"), 30_000, 0, { slots: 2 }));
    assert.match(message, /3/);
    // Over 100: refused, on a job with no count yet too.
    await refusedNamingSlots(client.acquire(uniqueJob("semaphore-big"), electorHolder("big"), 30_000, 0, { slots: 101 }));
    await refusedNamingSlots(client.acquire(job, electorHolder("big"), 30_000, 0, { slots: 101 }));
    // Nothing changed: slot 0 is still h1's, slot 1 was never granted.
    const s0 = await client.getLease(`${job}#0`);
    assert.deepEqual([s0.holder, s0.token], [h1, 1n]);
    assert.equal((await client.getLease(`${job}#1`)).token, 0n);
    // With the job's count, the next holder gets the next slot.
    const b = await client.acquire(job, electorHolder("three"), 30_000, 0, { slots: 3 });
    assert.deepEqual([b.acquired, b.lease.job, b.lease.slot, b.lease.token], [true, `${job}#1`, 1, 1n]);

    // The holder renews and releases with the slot's job.
    const renewed = await client.renew(a.lease.job, h1, a.lease.token, 30_000);
    assert.deepEqual([renewed.job, renewed.holder, renewed.token], [`${job}#0`, h1, 1n]);
    await client.release(a.lease.job, h1, a.lease.token);
    assert.equal((await client.getLease(`${job}#0`)).holder, undefined);

    // An elector asking for another count stops on the refusal.
    const e = new Elector(client, job, "e", 30_000, { logger: quiet, slots: 5 });
    e.start();
    after(() => e.resign());
    await refusedNamingSlots(e.elected({ timeoutMs: PATIENCE }));
    assert.ok(e.error instanceof InvalidArgument && e.error.field === "slots", `${e.error}`);
    assert.throws(() => new Elector(client, job, "e", 30_000, { slots: 1.5 }), RangeError);
  });

  test("a counted lock: two held at once on their slots' jobs, a third times out; one released, the third takes its slot with token + 1", async () => {
    const job = uniqueJob("semaphore-lock");
    const opts = { ttlMs: 30_000, slots: 2, logger: quiet };
    const one = await client.lock(job, opts);
    const two = await client.lock(job, opts);
    after(() => Promise.all([one.release(), two.release()]));
    assert.deepEqual([one.leaseJob, two.leaseJob].sort(), [`${job}#0`, `${job}#1`]);
    assert.deepEqual([one.slot, two.slot].sort(), [0, 1]);
    assert.deepEqual([one.job, two.job], [job, job]);
    assert.deepEqual([one.token, two.token], [1n, 1n]);
    assert.ok(one.isHeld && two.isHeld);
    // Both slots are held: one try of a third finds none.
    await assert.rejects(client.lock(job, { ...opts, timeoutMs: 0 }), LockTimeout);
    assert.equal(await client.checkedWrite(one.leaseJob, one.token, "status", "one"), 1n);

    const waiting = client.lock(job, { ...opts, name: "third", timeoutMs: PATIENCE });
    await waitTurn(client, job, "third@");
    await one.release();
    const three = await waiting;
    after(() => three.release());
    assert.deepEqual([three.leaseJob, three.slot, three.token], [one.leaseJob, one.slot, 2n]);
    await assert.rejects(client.checkedWrite(one.leaseJob, one.token, "status", "stale"), Fenced);
    assert.equal(await client.checkedWrite(three.leaseJob, three.token, "status", "three"), 2n);

    // withLock: the same, around a callback, released when it settles.
    await three.release();
    const got = await client.withLock(job, opts, async (lock) => {
      assert.ok(lock.isHeld);
      return [lock.leaseJob, lock.token] as const;
    });
    assert.deepEqual(got, [one.leaseJob, 3n]);
    assert.equal((await client.getLease(one.leaseJob)).holder, undefined, "withLock released its slot");
  });

  test("a waiting counted acquire that is aborted is not granted a slot: the freed slot stays free", async () => {
    const job = uniqueJob("semaphore-abort");
    const holders = [electorHolder("x"), electorHolder("y")];
    const grants: Lease[] = [];
    for (const h of holders) grants.push((await client.acquire(job, h, 30_000, 0, { slots: 2 })).lease);
    const abort = new AbortController();
    const me = electorHolder("w");
    const waiting = client.acquire(job, me, 30_000, PATIENCE, { slots: 2, signal: abort.signal });
    await waitTurn(client, job, me);
    abort.abort();
    await assert.rejects(waiting, (e: unknown) => (e as Error).name === "AbortError");
    // The line's turn ends with the cancelled Acquire.
    await waitUntil(async () => (await client.getLease(job)).holder === undefined, PATIENCE, "the turn to end");
    await client.release(grants[0].job, holders[0], grants[0].token);
    // Given back if granted as it was cancelled: either way, not held by `me`.
    await waitUntil(
      async () => (await client.getLease(grants[0].job)).holder === undefined,
      PATIENCE,
      "the freed slot to be free",
    );
    const leases = await client.listLeases(`${job}`);
    assert.ok(!leases.some((l) => l.holder === me), JSON.stringify(leases.map((l) => [l.job, l.holder])));
  });
});
