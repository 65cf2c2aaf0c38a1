/**
 * Shard groups against the real server: `client.joinShards` (a member,
 * iterated or `run`), `client.getGroup`. Shard k of group G is the job
 * "G/k", with its own lease and token: its owner writes under it with
 * that token, and a stale owner's writes are Fenced.
 *
 * TTLs are 3 s (renewals every second), so that a loaded machine cannot
 * make a member look silent; every wait is a bounded poll.
 */
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { after, before, describe, test } from "node:test";
import { Client, Fenced, InvalidArgument, type Shard, type ShardEvent, type ShardMember } from "../src";
import { PATIENCE, Server, sleep, uniqueJob, waitUntil } from "./harness";

const TTL_MS = 3000;
/**
 * How long a work takes to wind down once its signal is aborted (it
 * flushes, say). A member that acknowledged a revoke before its work had
 * settled would let the shard move while this is still running.
 */
const WIND_DOWN_MS = 300;

/** A member under `run`, and what it saw: its events, what it owns, which works have ended. */
class Running {
  readonly events: (ShardEvent & { at: number })[] = [];
  /** Shard -> token, as the events say: assigned adds, revoked (acknowledged) and lost remove. */
  readonly owned = new Map<number, bigint>();
  /** `"shard:token"` of every work started, and of every work that has ended. */
  readonly started = new Set<string>();
  readonly ended = new Set<string>();
  readonly done: Promise<void>;

  constructor(
    readonly member: ShardMember,
    /** Called on each event, as `run` handles it (before the owned map changes). */
    onEvent: (e: ShardEvent) => void = () => {},
    windDownMs = 0,
  ) {
    this.done = member.run(
      async (shard: Shard, signal: AbortSignal) => {
        const id = `${shard.shard}:${shard.token}`;
        this.started.add(id);
        await new Promise<void>((r) => signal.addEventListener("abort", () => r(), { once: true }));
        if (windDownMs > 0) await sleep(windDownMs); // winding down, not waiting for a state
        this.ended.add(id);
      },
      {
        onEvent: (e) => {
          onEvent(e);
          this.events.push({ ...e, at: performance.now() });
          if (e.kind === "assigned") this.owned.set(e.shard, e.token);
          else this.owned.delete(e.shard);
        },
      },
    );
  }

  /** The first `assigned` event of `shard` after the event numbered `from`. */
  firstAssigned(shard: number, from = 0): (ShardEvent & { at: number }) | undefined {
    return this.events.slice(from).find((e) => e.kind === "assigned" && e.shard === shard);
  }
}

/** Asserts that `p` rejects with the typed InvalidArgument naming `field`. */
async function refusedNaming(p: Promise<unknown>, field: string): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof InvalidArgument, `${e}`);
    assert.equal(e.field, field);
    return true;
  });
}

describe("shard groups against the real server", () => {
  let server: Server;
  let clientA: Client;
  let clientB: Client;
  before(async () => {
    server = await Server.start();
    // Two members, two connections, as two processes would have.
    clientA = new Client(server.target);
    clientB = new Client(server.target);
  });
  after(async () => {
    clientA.close();
    clientB.close();
    await server.stop();
  });

  // (a) and (b) are one story: (b) continues from the group (a) left.
  const group = uniqueJob("g");
  let a: Running | undefined;
  let b: Running | undefined;
  /** Per shard moved to B: whether A's work for it had ended when B was told ASSIGNED. */
  const aEndedWhenBAssigned = new Map<number, boolean>();

  test("balance and handover: A owns all 4 shards with token 1; B joins and each owns 2; the moved shards' work on A ends before B is assigned them with token 2; A's old token is Fenced, B's writes; getGroup shows 2 members with 2 each", async () => {
    const memberA = await clientA.joinShards(group, "a", 4, { ttlMs: TTL_MS });
    a = new Running(memberA, () => {}, WIND_DOWN_MS);
    assert.match(memberA.member, /^a@[0-9a-f-]{36}$/);
    assert.equal(memberA.shards, 4);
    await waitUntil(() => a!.owned.size === 4, PATIENCE, "A assigned all 4 shards");
    for (const [k, token] of a.owned) {
      assert.equal(token, 1n, `shard ${k}`);
      assert.equal(a.firstAssigned(k)!.job, `${group}/${k}`);
    }
    await waitUntil(() => a!.started.size === 4, PATIENCE, "A's 4 works started");

    const memberB = await clientB.joinShards(group, "b", 4, { ttlMs: TTL_MS });
    assert.notEqual(memberB.member, memberA.member);
    b = new Running(memberB, (e) => {
      // Recorded as B is told: had A's work for the shard (token 1) ended?
      if (e.kind === "assigned" && !aEndedWhenBAssigned.has(e.shard)) {
        aEndedWhenBAssigned.set(e.shard, a!.ended.has(`${e.shard}:1`));
      }
    });

    // Balanced, and the server agrees with both members.
    await waitUntil(
      async () => {
        if (a!.owned.size !== 2 || b!.owned.size !== 2) return false;
        const g = await clientA.getGroup(group);
        return g.owners.every((o) =>
          o.member === memberA.member ? a!.owned.get(o.shard) === o.token : b!.owned.get(o.shard) === o.token,
        );
      },
      PATIENCE,
      "A and B own 2 shards each",
    );
    const moved = [...b.owned.keys()].sort();
    const kept = [...a.owned.keys()].sort();
    assert.deepEqual([...moved, ...kept].sort(), [0, 1, 2, 3]);
    for (const k of kept) assert.equal(a.owned.get(k), 1n, `A keeps shard ${k} with token 1`);

    for (const k of moved) {
      // A was told REVOKED with its token, and its work for the shard ended.
      const revoked: ShardEvent | undefined = a.events.find((e) => e.kind === "revoked" && e.shard === k);
      assert.ok(revoked, `A was told REVOKED for shard ${k}`);
      assert.equal(revoked.token, 1n);
      assert.ok(a.ended.has(`${k}:1`), `A's work for shard ${k} ended`);
      // The handover: token + 1, and only once A's work had ended.
      assert.equal(b.firstAssigned(k)!.token, 2n, `B's first grant of shard ${k}`);
      assert.equal(aEndedWhenBAssigned.get(k), true, `A's work for shard ${k} had ended when B was assigned it`);
      // (The server may re-grant a freshly moved shard to B once more, with
      // a newer token: B's token is the newest either way.)
      const tokenB: bigint = b.owned.get(k)!;
      assert.ok(tokenB >= 2n);

      // A's write with its old token is Fenced; B's, with its own, passes.
      await assert.rejects(clientA.checkedWrite(`${group}/${k}`, 1n, "status", "stale"), (e: unknown) => {
        assert.ok(e instanceof Fenced, `${e}`);
        assert.equal(e.currentToken, tokenB);
        return true;
      });
      assert.equal(await clientB.checkedWrite(`${group}/${k}`, tokenB, "status", "b"), 1n);
    }
    for (const k of kept) assert.equal(await clientA.checkedWrite(`${group}/${k}`, 1n, "status", "a"), 1n);

    const g = await clientA.getGroup(group);
    assert.equal(g.group, group);
    assert.equal(g.shards, 4);
    assert.deepEqual(
      g.members.map((m) => [m.member, m.shards]).sort(),
      [
        [memberA.member, kept],
        [memberB.member, moved],
      ].sort(),
    );
    assert.deepEqual(
      g.owners.map((o) => [o.shard, o.job, o.member]),
      [0, 1, 2, 3].map((k) => [k, `${group}/${k}`, moved.includes(k) ? memberB.member : memberA.member]),
    );
  });

  test("leave: A leaves; its works end first, and B is assigned A's shards with their tokens + 1 and owns all 4", async () => {
    assert.ok(a && b, "needs the group of the test before");
    const kept = [...a.owned.keys()].sort();
    assert.equal(kept.length, 2);
    const from = b.events.length;
    await a.member.leave();
    await a.done; // run resolves once A left
    assert.equal(a.ended.size, a.started.size, "every work of A ended");
    assert.equal(a.member.closed, true);

    await waitUntil(() => b!.owned.size === 4, PATIENCE, "B owns all 4 shards");
    for (const k of kept) {
      assert.equal(b.firstAssigned(k, from)!.token, 2n, `B's grant of shard ${k}, A's with token 1`);
      await assert.rejects(clientA.checkedWrite(`${group}/${k}`, 1n, "status", "gone"), Fenced);
    }
    await waitUntil(
      async () => (await clientB.getGroup(group)).members.length === 1,
      PATIENCE,
      "the server to see A gone",
    );
    const g = await clientB.getGroup(group);
    assert.deepEqual(g.members, [{ member: b.member.member, shards: [0, 1, 2, 3] }]);
    for (const o of g.owners) assert.deepEqual([o.member, o.token], [b.member.member, b.owned.get(o.shard)]);

    await b.member.leave();
    await b.done;
    await waitUntil(async () => (await clientB.getGroup(group)).members.length === 0, PATIENCE, "the group empty");
    const empty = await clientB.getGroup(group);
    assert.equal(empty.shards, 4, "the count stays");
    assert.ok(empty.owners.every((o) => o.member === undefined));
  });

  test("mismatch: joining a group of 4 with 5 shards is InvalidArgument naming shards; so are 0 and 1025 shards (refused here), and an empty group names group", async () => {
    const g = uniqueJob("mismatch");
    const first = await clientA.joinShards(g, "first", 4, { ttlMs: TTL_MS });
    try {
      await refusedNaming(clientB.joinShards(g, "other", 5, { ttlMs: TTL_MS }), "shards");
      await refusedNaming(clientB.joinShards(g, "other", 0, { ttlMs: TTL_MS }), "shards");
      await refusedNaming(clientB.joinShards(g, "other", 1025, { ttlMs: TTL_MS }), "shards");
      await refusedNaming(clientB.joinShards("", "other", 4, { ttlMs: TTL_MS }), "group");
      // Nothing changed: one member, 4 shards.
      const view = await clientB.getGroup(g);
      assert.equal(view.shards, 4);
      assert.deepEqual(
        view.members.map((m) => m.member),
        [first.member],
      );
    } finally {
      await first.leave();
    }
    // A group never joined has no count.
    const never = await clientB.getGroup(uniqueJob("never"));
    assert.deepEqual([never.shards, never.members, never.owners], [0, [], []]);
  });

  test("a member that never acknowledges: after its revoke timeout the shard moves anyway, and it is told LOST", async () => {
    const g = uniqueJob("deaf");
    const revokeTimeoutMs = 1000;
    const x = await clientA.joinShards(g, "deaf", 2, { ttlMs: TTL_MS, revokeTimeoutMs });
    // The event API, never calling release.
    const seen: (ShardEvent & { at: number })[] = [];
    const reading = (async () => {
      for await (const e of x) seen.push({ ...e, at: performance.now() });
    })();
    try {
      await waitUntil(() => seen.filter((e) => e.kind === "assigned").length === 2, PATIENCE, "X assigned both shards");
      const y = new Running(await clientB.joinShards(g, "y", 2, { ttlMs: TTL_MS }));
      try {
        await waitUntil(() => y.owned.size === 1, PATIENCE, "Y assigned one shard");
        const [k] = [...y.owned.keys()];
        const revoked = seen.find((e) => e.kind === "revoked" && e.shard === k);
        assert.ok(revoked, `X was told REVOKED for shard ${k}`);
        assert.equal(revoked.token, 1n);
        const assigned = y.firstAssigned(k)!;
        assert.equal(assigned.token, 2n);
        const waited = assigned.at - revoked.at;
        // Moved by the deadline, not by an acknowledgement (with slack for
        // a loaded machine, which can only shorten what we see).
        assert.ok(waited >= revokeTimeoutMs / 2, `the shard moved ${waited} ms after the revoke`);
        await waitUntil(() => seen.some((e) => e.kind === "lost" && e.shard === k), PATIENCE, "X told LOST");
        const lost = seen.find((e) => e.kind === "lost" && e.shard === k)!;
        assert.deepEqual([lost.token, lost.job], [1n, `${g}/${k}`]);
        assert.ok(seen.indexOf(revoked) < seen.indexOf(lost));
        await assert.rejects(clientA.checkedWrite(`${g}/${k}`, 1n, "status", "late"), Fenced);
        // X keeps the other shard.
        assert.ok(!seen.some((e) => e.kind !== "assigned" && e.shard !== k));
      } finally {
        await y.member.leave();
        await y.done;
      }
    } finally {
      await x.leave();
      await reading;
    }
  });
});

describe("a shard member across a server restart", () => {
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

  test("reconnect: when the stream breaks every shard is lost at once (its work stopped), and the member joins again under the same identity and is assigned its shards again", async () => {
    const g = uniqueJob("restart");
    const m = new Running(await client.joinShards(g, "r", 2, { ttlMs: TTL_MS }));
    await waitUntil(() => m.owned.size === 2, PATIENCE, "both shards assigned");
    await waitUntil(() => m.started.size === 2, PATIENCE, "both works started");
    const before = m.events.length;
    await server.kill();
    await waitUntil(() => m.owned.size === 0, PATIENCE, "both shards lost");
    const lost = m.events.slice(before);
    assert.deepEqual(lost.map((e) => [e.kind, e.shard, e.token]).sort(), [
      ["lost", 0, 1n],
      ["lost", 1, 1n],
    ]);
    await waitUntil(() => m.ended.size === 2, PATIENCE, "both works ended");

    server = await server.restart();
    await waitUntil(() => m.owned.size === 2, PATIENCE, "both shards assigned again");
    for (const [, token] of m.owned) assert.ok(token >= 1n);
    const g2 = await client.getGroup(g);
    assert.deepEqual(
      g2.members.map((x) => x.member),
      [m.member.member],
      "the same member identity",
    );
    await m.member.leave();
    await m.done;
    assert.equal(m.ended.size, m.started.size);
  });
});
