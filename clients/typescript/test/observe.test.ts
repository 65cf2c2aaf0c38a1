import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, EventKind, type LeaseChange, QuotaExceeded, ShuttingDown, Unavailable } from "../src";
import { Server, uniqueJob, waitUntil } from "./harness";

/** WatchLease streams the server has seen end. */
const WATCHES_ENDED = 'leasehold_rpc_duration_seconds_count{method="WatchLease"}';

/** Reads the next state of `it`, failing after `ms`. */
async function next(it: AsyncIterator<LeaseChange>, ms = 5000): Promise<LeaseChange> {
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

const brief = (l: LeaseChange) => [l.kind, l.holder, l.token];

describe("observe against the real server", () => {
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

  test("a grant, no event for a renewal, a release, an expiry and a takeover with token + 1", async () => {
    const job = uniqueJob("observe");
    const ac = new AbortController();
    const it = client.observe(job, { signal: ac.signal })[Symbol.asyncIterator]();
    assert.deepEqual(brief(await next(it)), [EventKind.Current, undefined, 0n]);

    await client.acquire(job, "a", 30_000);
    const granted = await next(it);
    assert.deepEqual(brief(granted), [EventKind.Acquired, "a", 1n]);
    assert.equal(granted.job, job);
    assert.equal(granted.ttlMs, 30_000);

    // A renewal changes neither holder nor token: nothing is sent for it,
    // so the next state is the release's.
    await client.renew(job, "a", 1n, 20_000);
    await client.release(job, "a", 1n);
    assert.deepEqual(brief(await next(it)), [EventKind.Released, undefined, 1n]);

    await client.acquire(job, "b", 300);
    assert.deepEqual(brief(await next(it)), [EventKind.Acquired, "b", 2n]);
    assert.deepEqual(brief(await next(it)), [EventKind.Expired, undefined, 2n]);

    // A takeover: c holds, d waits; c's release hands over to d at once.
    await client.acquire(job, "c", 30_000);
    assert.deepEqual(brief(await next(it)), [EventKind.Acquired, "c", 3n]);
    const waiting = client.acquire(job, "d", 30_000, 10_000);
    await server.waitWaiters(1);
    await client.release(job, "c", 3n);
    assert.equal((await waiting).lease.token, 4n);
    // The release and the grant may come as two states or, folded, as one.
    let s = await next(it);
    if (s.kind === EventKind.Released) s = await next(it);
    assert.deepEqual(brief(s), [EventKind.Acquired, "d", 4n]);

    // Aborting ends a pending read cleanly.
    const pending = it.next();
    ac.abort();
    assert.equal((await pending).done, true);
    assert.equal((await it.next()).done, true);
  });

  test("for await ends when the signal is aborted; an aborted signal yields nothing", async () => {
    const job = uniqueJob("observe-loop");
    const ac = new AbortController();
    const seen: LeaseChange[] = [];
    for await (const lease of client.observe(job, { signal: ac.signal })) {
      seen.push(lease);
      if (lease.kind === EventKind.Current) await client.acquire(job, "a", 30_000);
      else ac.abort();
    }
    assert.deepEqual(seen.map(brief), [
      [EventKind.Current, undefined, 0n],
      [EventKind.Acquired, "a", 1n],
    ]);
    for await (const _ of client.observe(job, { signal: ac.signal })) assert.fail("observed with an aborted signal");
  });

});

describe("observe against a server with --max-watchers 3", () => {
  let server: Server;
  let client: Client;
  before(async () => {
    server = await Server.start(30_000, { extra: ["--max-watchers", "3"] });
    client = new Client(server.target);
  });
  after(async () => {
    client.close();
    await server.stop();
  });

  test("leaving the loop cancels the stream: its watcher slot is free again", async () => {
    const job = uniqueJob("observe-break");
    // --max-watchers is 3: open and leave more loops than that, one by one.
    for (let i = 0; i < 5; i++) {
      const ended = await server.metric(WATCHES_ENDED);
      for await (const lease of client.observe(job)) {
        assert.equal(lease.kind, EventKind.Current);
        break;
      }
      await waitUntil(async () => (await server.metric(WATCHES_ENDED)) > ended, 5000, "the server to end the watch");
    }
  });

  test("a stream the server refuses throws the typed error (QuotaExceeded over --max-watchers)", async () => {
    const job = uniqueJob("observe-quota");
    const ac = new AbortController();
    const open = [0, 1, 2].map(() => client.observe(job, { signal: ac.signal })[Symbol.asyncIterator]());
    try {
      for (const it of open) assert.equal((await next(it)).kind, EventKind.Current);
      await assert.rejects(next(client.observe(job)[Symbol.asyncIterator]()), (e: unknown) => {
        assert.ok(e instanceof QuotaExceeded, `${e}`);
        assert.deepEqual([e.limit, e.max], ["--max-watchers", 3]);
        return true;
      });
    } finally {
      ac.abort();
      await Promise.all(open.map((it) => it.return?.()));
    }
  });
});

test("observe throws ShuttingDown when the server stops, and Unavailable with no server", async () => {
  const server = await Server.start();
  const client = new Client(server.target);
  try {
    const it = client.observe(uniqueJob("observe-stop"))[Symbol.asyncIterator]();
    assert.equal((await next(it)).kind, EventKind.Current);
    const ended = it.next();
    server.signal("SIGTERM");
    await assert.rejects(ended, ShuttingDown);
    await server.stop(); // waits for it to exit
    await assert.rejects(next(client.observe("x")[Symbol.asyncIterator](), 15_000), Unavailable);
  } finally {
    client.close();
    await server.stop();
  }
});
