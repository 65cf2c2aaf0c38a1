/**
 * The leader's value (`Lease.value`), against the real server: published
 * by `acquire` and an Elector's `value`, replaced by `renew` and
 * `setValue`, kept by renewals without one (KeepAlive's too), seen by
 * `getLease` and another elector's `leader()`, by `observe` (with a
 * `ValueChanged` event for a change), by `"newLeader"` (a change is not a
 * new leader) and in the history's tenure; and a value over 1024 bytes
 * refused with `InvalidArgument` naming "value", nothing changed.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  Elector,
  EventKind,
  InvalidArgument,
  type LeaseChange,
  MAX_VALUE_BYTES,
  type RenewedLease,
  type Acquired,
} from "../src";
import * as pb from "../src/gen/leasehold/v1/leasehold";
import { eventFromPb } from "../src/types";
import { PATIENCE, Server, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

/** Reads the next state of `it`, failing after `ms`. */
async function next(it: AsyncIterator<LeaseChange>, ms = PATIENCE): Promise<LeaseChange> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no lease state within ${ms} ms`)), ms);
  });
  try {
    const r = await Promise.race([it.next(), timeout]);
    assert.equal(r.done, false, "the observation ended");
    return r.value as LeaseChange;
  } finally {
    clearTimeout(timer);
  }
}

/** A state as [kind, holder, token, value as text]. */
const brief = (l: LeaseChange) => [l.kind, l.holder, l.token, l.value.toString()];

/** Asserts that `p` rejects with `InvalidArgument` naming the field "value". */
async function refusesValue(p: Promise<unknown> | (() => unknown)): Promise<void> {
  const check = (e: unknown) => {
    assert.ok(e instanceof InvalidArgument, `${e}`);
    assert.equal(e.field, "value");
    return true;
  };
  if (typeof p === "function") assert.throws(p, check);
  else await assert.rejects(p, check);
}

/** One renewal an elector sent: its value (undefined: none), and whether it succeeded (undefined: on its way). */
interface SentRenewal {
  value: string | undefined;
  ok: boolean | undefined;
}

/**
 * A client that records the value each `renew` and `acquire` sent
 * (undefined: none), to tell what an elector sends; the calls themselves
 * go to the real server.
 */
class RecordingClient extends Client {
  readonly renewals: SentRenewal[] = [];
  readonly acquireValues: (string | undefined)[] = [];

  override async renew(...args: Parameters<Client["renew"]>): Promise<RenewedLease> {
    const v = args[4]?.value;
    const sent: SentRenewal = { value: v === undefined ? undefined : Buffer.from(v).toString(), ok: undefined };
    this.renewals.push(sent);
    try {
      const renewed = await super.renew(...args);
      sent.ok = true;
      return renewed;
    } catch (e) {
      sent.ok = false;
      throw e;
    }
  }

  override acquire(...args: Parameters<Client["acquire"]>): Promise<Acquired> {
    const v = args[4]?.value;
    this.acquireValues.push(v === undefined ? undefined : Buffer.from(v).toString());
    return super.acquire(...args);
  }
}

test("every kind of the generated LeaseEvent maps to its EventKind, VALUE_CHANGED to ValueChanged (no server)", () => {
  const kinds = Object.values(pb.LeaseEvent_Kind).filter(
    (v): v is pb.LeaseEvent_Kind =>
      typeof v === "number" && v !== pb.LeaseEvent_Kind.KIND_UNSPECIFIED && v !== pb.LeaseEvent_Kind.UNRECOGNIZED,
  );
  const mapped = kinds.map((kind) => eventFromPb({ kind, lease: undefined }).kind);
  assert.ok(!mapped.includes(EventKind.Unspecified), `${mapped}`);
  assert.deepEqual(
    mapped.map((k) => `KIND_${k}`),
    kinds.map((k) => pb.LeaseEvent_Kind[k]),
  );
  const e = eventFromPb({
    kind: pb.LeaseEvent_Kind.KIND_VALUE_CHANGED,
    lease: { job: "j", holder: "h", token: 3n, ttl: undefined, remaining: undefined, principal: "", proof: "", value: Buffer.from("addr"), slot: 0, slots: 0 },
  });
  assert.deepEqual([e.kind, e.lease.holder, e.lease.token, e.lease.value.toString()], [EventKind.ValueChanged, "h", 3n, "addr"]);
});

describe("the leader's value against the real server", () => {
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

  test("acquire publishes the value; renew without one keeps it, with one replaces it, empty clears it; each change observed as ValueChanged", async () => {
    const job = uniqueJob("value-unary");
    const ac = new AbortController();
    const it = client.observe(job, { signal: ac.signal })[Symbol.asyncIterator]();
    try {
      assert.deepEqual(brief(await next(it)), [EventKind.Current, undefined, 0n, ""]);

      const granted = await client.acquire(job, "a", 30_000, 0, { value: "10.0.0.1:8080" });
      assert.equal(granted.lease.value.toString(), "10.0.0.1:8080");
      assert.deepEqual(brief(await next(it)), [EventKind.Acquired, "a", 1n, "10.0.0.1:8080"]);

      // A renewal without a value keeps it, and is no change.
      const kept = await client.renew(job, "a", 1n, 30_000);
      assert.equal(kept.value.toString(), "10.0.0.1:8080");
      // With one, it replaces it: same holder and token, a ValueChanged.
      const replaced = await client.renew(job, "a", 1n, 30_000, { value: Buffer.from("10.0.0.2:8080") });
      assert.deepEqual([replaced.token, replaced.value.toString()], [1n, "10.0.0.2:8080"]);
      assert.deepEqual(brief(await next(it)), [EventKind.ValueChanged, "a", 1n, "10.0.0.2:8080"]);
      assert.equal((await client.getLease(job)).value.toString(), "10.0.0.2:8080");

      // Empty clears it.
      const cleared = await client.renew(job, "a", 1n, 30_000, { value: "" });
      assert.equal(cleared.value.length, 0);
      assert.deepEqual(brief(await next(it)), [EventKind.ValueChanged, "a", 1n, ""]);

      // A repeated Acquire of the live holder replaces it, keeping the token.
      const again = await client.acquire(job, "a", 30_000, 0, { value: "10.0.0.3:8080" });
      assert.deepEqual([again.acquired, again.lease.token, again.lease.value.toString()], [true, 1n, "10.0.0.3:8080"]);
      assert.deepEqual(brief(await next(it)), [EventKind.ValueChanged, "a", 1n, "10.0.0.3:8080"]);

      // A KeepAlive renewal keeps it.
      const stream = client.keepAlive();
      try {
        const [o] = await stream.renew([{ job, holder: "a", token: 1n, ttlMs: 30_000 }]);
        assert.equal(o.kind, "renewed");
        assert.equal(o.kind === "renewed" && o.lease.value.toString(), "10.0.0.3:8080");
      } finally {
        stream.cancel();
      }
      assert.equal((await client.getLease(job)).value.toString(), "10.0.0.3:8080");

      // Freed, the job has no value; another holder's grant has its own.
      await client.release(job, "a", 1n);
      assert.deepEqual(brief(await next(it)), [EventKind.Released, undefined, 1n, ""]);
      await client.acquire(job, "b", 30_000);
      assert.deepEqual(brief(await next(it)), [EventKind.Acquired, "b", 2n, ""]);

      // The history keeps each grant's value (not the later changes).
      const tenures = (await client.history(job)).tenures;
      assert.deepEqual(
        tenures.map((t) => [t.token, t.holder, t.value.toString()]),
        [
          [2n, "b", ""],
          [1n, "a", "10.0.0.1:8080"],
        ],
      );
    } finally {
      ac.abort();
      await it.return?.();
    }
  });

  test("an elector's value is seen by another elector's leader(), getLease, observe (ValueChanged after setValue), newLeader and the history", async () => {
    const job = uniqueJob("value-elector");
    const ttl = 3000; // renewals every second
    const a = new Elector(client, job, "a", ttl, { logger: quiet, value: "10.0.0.1:8080" }).start();
    const b = new Elector(client, job, "b", ttl, { logger: quiet, value: Buffer.from("10.0.0.2:8080") });
    const seen: [string, bigint, string][] = [];
    b.on("newLeader", (holder, token, value) => seen.push([holder, token, value.toString()]));
    const ac = new AbortController();
    let it: AsyncIterator<LeaseChange> | undefined;
    try {
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();

      // The other elector asks the server who leads, and where.
      const leader = await b.leader();
      assert.deepEqual([leader.holder, leader.token, leader.value.toString()], [a.holder, 1n, "10.0.0.1:8080"]);
      assert.equal((await client.getLease(job)).value.toString(), "10.0.0.1:8080");
      // Its newLeader hears the value too.
      await waitUntil(() => seen.length === 1, PATIENCE, "b's report of a's grant");
      assert.deepEqual(seen, [[a.holder, 1n, "10.0.0.1:8080"]]);

      it = client.observe(job, { signal: ac.signal })[Symbol.asyncIterator]();
      assert.deepEqual(brief(await next(it)), [EventKind.Current, a.holder, 1n, "10.0.0.1:8080"]);

      // setValue: the value goes with a's next renewal; same holder, same token.
      a.setValue("10.0.0.9:9090");
      assert.deepEqual(brief(await next(it)), [EventKind.ValueChanged, a.holder, 1n, "10.0.0.9:9090"]);
      const changed = await b.leader();
      assert.deepEqual([changed.holder, changed.token, changed.value.toString()], [a.holder, 1n, "10.0.0.9:9090"]);
      assert.equal(a.token, 1n, "a value change is no loss");

      // a resigns: b is granted token 2 with its own value.
      await a.resign();
      assert.equal(await b.elected({ timeoutMs: PATIENCE }), 2n);
      let s = await next(it);
      if (s.kind === EventKind.Released) s = await next(it); // or folded into the grant
      assert.deepEqual(brief(s), [EventKind.Acquired, b.holder, 2n, "10.0.0.2:8080"]);
      const now = await b.leader();
      assert.deepEqual([now.holder, now.token, now.value.toString()], [b.holder, 2n, "10.0.0.2:8080"]);

      // newLeader: the two grants, each with its value, and nothing for the
      // value change between them (its event came before token 2's).
      await waitUntil(() => seen.length === 2, PATIENCE, "b's report of its own grant");
      assert.deepEqual(seen, [
        [a.holder, 1n, "10.0.0.1:8080"],
        [b.holder, 2n, "10.0.0.2:8080"],
      ]);

      // The history: each tenure with the value of its grant.
      const tenures = (await client.history(job)).tenures;
      assert.deepEqual(
        tenures.map((t) => [t.token, t.holder, t.value.toString()]),
        [
          [2n, b.holder, "10.0.0.2:8080"],
          [1n, a.holder, "10.0.0.1:8080"],
        ],
      );
    } finally {
      ac.abort();
      await it?.return?.();
      await a.resign();
      await b.resign();
    }
    // Free: leader() says so.
    const free = await b.leader();
    assert.deepEqual([free.holder, free.token, free.value.length], [undefined, 2n, 0]);
  });

  test("setValue goes with the next renewal, and with every renewal until one succeeds, then no more; a follower's with its next Acquire", async () => {
    const job = uniqueJob("value-once");
    const c = new RecordingClient(server.target);
    const ttl = 1500; // renewals every 500 ms
    const e = new Elector(c, job, "e", ttl, { logger: quiet, value: "v1" }).start();
    const f = new Elector(c, job, "f", ttl, { logger: quiet, value: "f1" });
    try {
      assert.equal(await e.elected({ timeoutMs: PATIENCE }), 1n);
      assert.deepEqual(c.acquireValues, ["v1"]);
      // Renewals without a value: the server keeps the grant's.
      await waitUntil(() => c.renewals.filter((r) => r.ok).length >= 2, PATIENCE, "two renewals");
      assert.deepEqual(c.renewals.map((r) => r.value).filter((v) => v !== undefined), []);

      e.setValue("v2");
      // The renewal on its way (if any) went without it; the next ones carry
      // it until one succeeds, and those after that do not.
      const from = c.renewals.length;
      const firstOk = () => c.renewals.findIndex((r, i) => i >= from && r.value === "v2" && r.ok);
      await waitUntil(() => firstOk() >= 0, PATIENCE, "a successful renewal with v2");
      const okAt = firstOk();
      await waitUntil(() => c.renewals.length >= okAt + 4, PATIENCE, "three renewals more");
      const sent = c.renewals.map((r) => r.value);
      assert.deepEqual(sent.slice(okAt + 1), [undefined, undefined, undefined, ...sent.slice(okAt + 4).map(() => undefined)]);
      const firstSent = sent.indexOf("v2", from);
      assert.deepEqual(sent.slice(firstSent, okAt + 1), sent.slice(firstSent, okAt + 1).map(() => "v2"), `${sent}`);
      assert.equal(e.token, 1n);
      assert.equal((await c.getLease(job)).value.toString(), "v2");

      // A follower: its waiting Acquire publishes its value, and one set
      // while it waits is published once it leads.
      f.start();
      await server.waitWaiters(1);
      f.setValue("f2");
      await e.resign();
      assert.equal(await f.elected({ timeoutMs: PATIENCE }), 2n);
      await waitUntil(async () => (await c.getLease(job)).value.toString() === "f2", PATIENCE, "f's new value on the lease");
      assert.equal((await f.leader()).holder, f.holder);
      assert.ok(c.acquireValues.includes("f1"), `${c.acquireValues}`);
    } finally {
      await e.resign();
      await f.resign();
      c.close();
    }
  });

  test("a value over 1024 bytes is InvalidArgument naming value, and nothing changed", async () => {
    const job = uniqueJob("value-limit");
    const big = Buffer.alloc(MAX_VALUE_BYTES + 1, "x");
    assert.equal(MAX_VALUE_BYTES, 1024);

    // Acquire: not granted.
    await refusesValue(client.acquire(job, "a", 30_000, 0, { value: big }));
    const none = await client.getLease(job);
    assert.deepEqual([none.holder, none.token], [undefined, 0n]);

    // 1024 bytes are fine.
    const max = Buffer.alloc(MAX_VALUE_BYTES, "y");
    const granted = await client.acquire(job, "a", 30_000, 0, { value: max });
    assert.deepEqual([granted.acquired, granted.lease.token], [true, 1n]);
    assert.ok(granted.lease.value.equals(max));

    // Renew and a repeated Acquire: the value stays.
    await refusesValue(client.renew(job, "a", 1n, 30_000, { value: big }));
    await refusesValue(client.acquire(job, "a", 30_000, 0, { value: big }));
    const after = await client.getLease(job);
    assert.deepEqual([after.holder, after.token], ["a", 1n]);
    assert.ok(after.value.equals(max), "the value did not change");
    assert.deepEqual((await client.history(job)).tenures.map((t) => t.token), [1n]);
    await client.release(job, "a", 1n);

    // An elector: refused at once, as the server would, changing nothing.
    await refusesValue(() => new Elector(client, job, "e", 30_000, { value: big }));
    const e = new Elector(client, job, "e", 1500, { logger: quiet, value: "ok" }).start();
    try {
      assert.equal(await e.elected({ timeoutMs: PATIENCE }), 2n);
      await refusesValue(() => e.setValue(big));
      await refusesValue(() => e.setValue("é".repeat(513))); // 1026 bytes of UTF-8
      // Renewals go on, keeping the value.
      const renewals = await server.metric("leasehold_renewals_total");
      await server.waitRenewals(renewals + 2);
      const lease = await e.leader();
      assert.deepEqual([lease.holder, lease.token, lease.value.toString()], [e.holder, 2n, "ok"]);
      assert.equal(e.token, 2n);
    } finally {
      await e.resign();
    }
  });
});
