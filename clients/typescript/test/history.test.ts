/**
 * `client.history` (GetHistory) and `client.historyAll` against a real
 * server started with `--enable-chaos`: several tenures newest first with
 * their holders, ends and times, paging, the chaos events of the first
 * page, and the typed errors.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, InvalidArgument, type Tenure, TenureEnd } from "../src";
import { Server, uniqueJob } from "./harness";

describe("history against the real server", () => {
  let server: Server;
  let client: Client;
  before(async () => {
    server = await Server.start(30_000, { extra: ["--enable-chaos"] });
    client = new Client(server.target);
  });
  after(async () => {
    await client.chaos().clear();
    client.close();
    await server.stop();
  });

  const brief = (t: Tenure) => [t.token, t.holder, t.end];

  test("several tenures, newest first, paged; historyAll reads every page", async () => {
    const job = uniqueJob("history");
    const started = new Date(Date.now() - 1000);
    await client.acquire(job, "a", 30_000);
    await client.release(job, "a", 1n);
    await client.acquire(job, "b", 30_000);
    await client.chaos().expire(job); // token 2 ends by chaos
    await client.acquire(job, "a", 30_000);
    await client.release(job, "a", 3n);
    await client.acquire(job, "c", 20_000); // live

    const first = await client.history(job);
    assert.deepEqual(first.tenures.map(brief), [
      [4n, "c", TenureEnd.Live],
      [3n, "a", TenureEnd.Released],
      [2n, "b", TenureEnd.Chaos],
      [1n, "a", TenureEnd.Released],
    ]);
    assert.equal(first.nextPageToken, undefined, "one page holds them all");
    const [live, released] = first.tenures;
    assert.equal(live.ttlMs, 20_000);
    assert.equal(live.endedAt, undefined);
    assert.ok(live.grantedAt instanceof Date && live.grantedAt >= started, `${live.grantedAt}`);
    assert.ok(released.endedAt instanceof Date && released.endedAt >= released.grantedAt!);
    assert.equal(released.principal, undefined, "no policy: no principal");
    // The chaos API's action, on the first page.
    assert.equal(first.chaos.length, 1);
    assert.equal(first.chaos[0].action, "expire");
    assert.match(first.chaos[0].detail, /token 2/);

    // Pages of two: newest first across pages, the chaos events on the first only.
    const p1 = await client.history(job, { pageSize: 2 });
    assert.deepEqual(p1.tenures.map((t) => t.token), [4n, 3n]);
    assert.ok(p1.nextPageToken);
    assert.equal(p1.chaos.length, 1);
    const p2 = await client.history(job, { pageSize: 2, pageToken: p1.nextPageToken });
    assert.deepEqual(p2.tenures.map((t) => t.token), [2n, 1n]);
    assert.deepEqual(p2.chaos, []);
    if (p2.nextPageToken !== undefined) {
      assert.deepEqual((await client.history(job, { pageSize: 2, pageToken: p2.nextPageToken })).tenures, []);
    }

    const all: bigint[] = [];
    for await (const t of client.historyAll(job, { pageSize: 1 })) all.push(t.token);
    assert.deepEqual(all, [4n, 3n, 2n, 1n]);
  });

  test("a job never granted has an empty history; bad input gets InvalidArgument naming the field", async () => {
    const none = await client.history(uniqueJob("history-none"));
    assert.deepEqual(none, { tenures: [], nextPageToken: undefined, chaos: [] });
    const all: Tenure[] = [];
    for await (const t of client.historyAll(uniqueJob("history-none"))) all.push(t);
    assert.deepEqual(all, []);

    await assert.rejects(client.history(""), (e: unknown) => {
      assert.ok(e instanceof InvalidArgument, `${e}`);
      assert.equal(e.field, "job");
      return true;
    });
    // A page token of another job's history is refused.
    const job = uniqueJob("history-token");
    for (let i = 1n; i <= 3n; i++) {
      await client.acquire(job, "a", 30_000);
      await client.release(job, "a", i);
    }
    const page = await client.history(job, { pageSize: 1 });
    assert.ok(page.nextPageToken);
    await assert.rejects(client.history(uniqueJob("history-other"), { pageToken: page.nextPageToken }), (e: unknown) => {
      assert.ok(e instanceof InvalidArgument, `${e}`);
      assert.equal(e.field, "page_token");
      return true;
    });
  });
});
