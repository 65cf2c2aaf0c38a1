import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createServer } from "node:net";
import { Metadata, status as Code } from "@grpc/grpc-js";
import {
  Client,
  DiskFull,
  EventKind,
  Fenced,
  fromStatus,
  InvalidArgument,
  JobInUse,
  LeaseholdError,
  LeaseLost,
  NoSuccessor,
  Overloaded,
  processHolder,
  QuotaExceeded,
  ShuttingDown,
  StorageError,
  Unavailable,
  UnknownToken,
} from "../src";
import { ErrorInfo } from "../src/gen/google/rpc/error_details";
import { Status } from "../src/gen/google/rpc/status";
import { Server, uniqueJob, waitUntil } from "./harness";

describe("Client against the real server", () => {
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

  test("holder identity is name@process-uuid", () => {
    const h = processHolder("billing");
    assert.match(h, /^billing@[0-9a-f-]{36}$/);
    assert.equal(processHolder("x").split("@")[1], h.split("@")[1]);
  });

  test("acquire, busy, renew, get, list, release", async () => {
    const job = uniqueJob("basic");
    const got = await client.acquire(job, "a", 30_000);
    assert.equal(got.acquired, true);
    assert.equal(got.lease.holder, "a");
    assert.equal(got.lease.token, 1n);
    assert.equal(got.lease.ttlMs, 30_000);
    const busy = await client.acquire(job, "b", 30_000);
    assert.equal(busy.acquired, false);
    assert.equal(busy.lease.holder, "a");
    assert.ok(busy.lease.remainingMs! > 0 && busy.lease.remainingMs! <= 30_000);
    const renewed = await client.renew(job, "a", 1n, 20_000);
    assert.equal(renewed.token, 1n);
    assert.equal(renewed.ttlMs, 20_000);
    const lease = await client.getLease(job);
    assert.deepEqual([lease.holder, lease.token], ["a", 1n]);
    assert.ok((await client.listLeases(job)).some((l) => l.job === job));
    await client.release(job, "a", 1n);
    const free = await client.getLease(job);
    assert.deepEqual([free.holder, free.token, free.ttlMs], [undefined, 1n, undefined]);
    assert.equal((await client.acquire(job, "b", 30_000)).lease.token, 2n);
  });

  test("a waiting acquire is granted on release", async () => {
    const job = uniqueJob("wait");
    await client.acquire(job, "a", 30_000);
    const waiting = client.acquire(job, "b", 30_000, 10_000);
    await server.waitWaiters(1);
    const released = Date.now();
    await client.release(job, "a", 1n);
    const r = await waiting;
    assert.equal(r.acquired, true);
    assert.equal(r.lease.token, 2n);
    assert.ok(Date.now() - released < 1000);
  });

  test("write, read, delete, listKeys", async () => {
    const job = uniqueJob("store");
    const { lease } = await client.acquire(job, "w", 30_000);
    assert.equal(await client.checkedWrite(job, lease.token, "k1", "v1"), 1n);
    assert.equal(await client.checkedWrite(job, lease.token, Buffer.from("k1"), Buffer.from("v2")), 2n);
    assert.equal(await client.checkedWrite(job, lease.token, "k2", ""), 1n);
    const v = await client.read(job, "k1");
    assert.deepEqual([v.found, v.value.toString(), v.token, v.version], [true, "v2", 1n, 2n]);
    const keys = await client.listKeys(job);
    assert.deepEqual(
      keys.map((k) => [k.key.toString(), k.version, k.size]),
      [
        ["k1", 2n, 2],
        ["k2", 1n, 0],
      ],
    );
    assert.equal(await client.delete(job, lease.token, "k1"), 3n);
    assert.equal((await client.read(job, "k1")).found, false);
    assert.deepEqual(
      (await client.listKeys(job, "k")).map((k) => k.key.toString()),
      ["k2"],
    );
  });

  test("watch: current, then acquired, released, expired", async () => {
    const job = uniqueJob("watch");
    const w = client.watch(job, { timeoutMs: 20_000 });
    const it = w[Symbol.asyncIterator]();
    const next = async () => (await it.next()).value!;
    assert.equal((await next()).kind, EventKind.Current);
    await client.acquire(job, "a", 30_000);
    let e = await next();
    assert.deepEqual([e.kind, e.lease.holder, e.lease.token], [EventKind.Acquired, "a", 1n]);
    await client.release(job, "a", 1n);
    e = await next();
    assert.deepEqual([e.kind, e.lease.holder, e.lease.token], [EventKind.Released, undefined, 1n]);
    await client.acquire(job, "b", 200);
    e = await next();
    assert.deepEqual([e.kind, e.lease.token], [EventKind.Acquired, 2n]);
    e = await next();
    assert.deepEqual([e.kind, e.lease.holder, e.lease.token], [EventKind.Expired, undefined, 2n]);
    w.cancel();
    assert.equal((await it.next()).done, true);
  });

  test("LeaseLost names the current token and holder", async () => {
    const job = uniqueJob("lost");
    await client.acquire(job, "a", 200);
    await waitUntil(async () => (await client.getLease(job)).holder === undefined, 5000, "expiry");
    await client.acquire(job, "b", 30_000);
    await assert.rejects(client.renew(job, "a", 1n, 30_000), (e: unknown) => {
      assert.ok(e instanceof LeaseLost);
      assert.equal(e.currentToken, 2n);
      assert.equal(e.currentHolder, "b");
      assert.equal(e.reason, "LEASE_LOST");
      assert.equal(e.code, Code.FAILED_PRECONDITION);
      assert.equal(e.retryable, false);
      return true;
    });
    await assert.rejects(client.release(job, "a", 1n), LeaseLost);
  });

  test("Fenced names the current token", async () => {
    const job = uniqueJob("fenced");
    await client.acquire(job, "a", 30_000);
    await client.checkedWrite(job, 1n, "k", "from 1");
    await client.release(job, "a", 1n);
    await client.acquire(job, "b", 30_000);
    await assert.rejects(client.checkedWrite(job, 1n, "k", "stale"), (e: unknown) => {
      assert.ok(e instanceof Fenced);
      assert.equal(e.currentToken, 2n);
      assert.equal(e.reason, "FENCED");
      return true;
    });
    assert.equal((await client.read(job, "k")).value.toString(), "from 1");
  });

  for (const [name, call, field] of [
    ["empty job", (c: Client, j: string) => c.acquire("", "h", 1000), "job"],
    ["empty holder", (c: Client, j: string) => c.acquire(j, "", 1000), "holder"],
    ["ttl too short", (c: Client, j: string) => c.acquire(j, "h", 1), "ttl"],
    ["ttl too long", (c: Client, j: string) => c.acquire(j, "h", 7_200_000), "ttl"],
    ["empty key", (c: Client, j: string) => c.checkedWrite(j, 1n, "", "v"), "key"],
  ] as const) {
    test(`InvalidArgument names the field: ${name}`, async () => {
      const job = uniqueJob("invalid");
      await assert.rejects(call(client, job), (e: unknown) => {
        assert.ok(e instanceof InvalidArgument);
        assert.equal(e.constructor, InvalidArgument);
        assert.equal(e.field, field);
        assert.equal(e.code, Code.INVALID_ARGUMENT);
        return true;
      });
      assert.equal((await client.getLease(job)).token, 0n, "bad input changes nothing");
    });
  }

  test("UnknownToken", async () => {
    const job = uniqueJob("unknown");
    await client.acquire(job, "a", 30_000);
    await assert.rejects(client.checkedWrite(job, 7n, "k", "v"), (e: unknown) => {
      assert.ok(e instanceof UnknownToken && e instanceof InvalidArgument);
      assert.equal(e.currentToken, 1n);
      return true;
    });
  });
});

test("an unreachable server is Unavailable", async () => {
  const port = await new Promise<number>((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
  const c = new Client(`127.0.0.1:${port}`, { timeoutMs: 5000 });
  await assert.rejects(c.getLease("j"), (e: unknown) => {
    assert.ok(e instanceof Unavailable);
    assert.equal(e.retryable, true);
    return true;
  });
  c.close();
});

test("a call or an observation on a closed client is Unavailable, not a plain Error", async () => {
  const c = new Client("127.0.0.1:1");
  c.close();
  // grpc-js throws "Channel has been shut down" at once: the client types it.
  await assert.rejects(c.getLease("j"), Unavailable);
  await assert.rejects(c.release("j", "h", 1n), Unavailable);
  await assert.rejects(c.observe("j").next(), Unavailable);
});

test("a waiting acquire ends with ShuttingDown when the server stops", async () => {
  const server = await Server.start();
  const c = new Client(server.target);
  try {
    await c.acquire("j", "a", 30_000);
    const waiting = c.acquire("j", "b", 30_000, 20_000);
    await server.waitWaiters(1);
    server.signal("SIGTERM");
    await assert.rejects(waiting, (e: unknown) => {
      assert.ok(e instanceof ShuttingDown, String(e));
      assert.equal(e.retryable, true);
      return true;
    });
  } finally {
    c.close();
    await server.stop();
  }
});

test("decoding of every reason", () => {
  const md = (code: Code, reason: string, domain = "leasehold") => {
    const info = ErrorInfo.encode({
      reason,
      domain,
      metadata: { current_token: "5", field: "ttl", free_bytes: "10", needed_bytes: "4096", limit: "--max-watchers", max: "7" },
    }).finish();
    const st = Status.encode({
      code,
      message: "m",
      details: [{ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: Buffer.from(info) }],
    }).finish();
    const m = new Metadata();
    m.set("grpc-status-details-bin", Buffer.from(st));
    return m;
  };
  const cases = [
    [Code.FAILED_PRECONDITION, "LEASE_LOST", LeaseLost],
    [Code.FAILED_PRECONDITION, "FENCED", Fenced],
    [Code.INVALID_ARGUMENT, "INVALID_ARGUMENT", InvalidArgument],
    [Code.INVALID_ARGUMENT, "UNKNOWN_TOKEN", UnknownToken],
    [Code.UNAVAILABLE, "STORAGE", StorageError],
    [Code.UNAVAILABLE, "SHUTTING_DOWN", ShuttingDown],
    [Code.RESOURCE_EXHAUSTED, "DISK_FULL", DiskFull],
    [Code.RESOURCE_EXHAUSTED, "OVERLOADED", Overloaded],
    [Code.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", QuotaExceeded],
    [Code.FAILED_PRECONDITION, "JOB_IN_USE", JobInUse],
    [Code.FAILED_PRECONDITION, "NO_SUCCESSOR", NoSuccessor],
  ] as const;
  for (const [code, reason, cls] of cases) {
    const e = fromStatus(code, "m", md(code, reason));
    assert.equal(e.constructor, cls, reason);
    assert.equal(e.reason, reason);
  }
  const full = fromStatus(Code.RESOURCE_EXHAUSTED, "m", md(Code.RESOURCE_EXHAUSTED, "DISK_FULL")) as DiskFull;
  assert.deepEqual([full.freeBytes, full.neededBytes, full.retryable], [10n, 4096n, true]);
  const quota = fromStatus(Code.RESOURCE_EXHAUSTED, "m", md(Code.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED")) as QuotaExceeded;
  assert.deepEqual([quota.limit, quota.max, quota.retryable], ["--max-watchers", 7, false]);
  const busy = fromStatus(Code.RESOURCE_EXHAUSTED, "m", md(Code.RESOURCE_EXHAUSTED, "OVERLOADED")) as Overloaded;
  assert.deepEqual([busy.limit, busy.max, busy.retryable, busy instanceof Unavailable], ["--max-watchers", 7, true, true]);
  assert.equal(fromStatus(Code.UNAVAILABLE, "m", md(Code.UNAVAILABLE, "FENCED", "other")).constructor, Unavailable);
  assert.equal(fromStatus(Code.FAILED_PRECONDITION, "m").constructor, LeaseholdError);
});
