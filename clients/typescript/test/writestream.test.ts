import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createServer } from "node:net";
import { credentials } from "@grpc/grpc-js";
import {
  Client,
  InvalidArgument,
  LeaseholdError,
  ShuttingDown,
  type StreamWrite,
  Unavailable,
  type WriteOutcome,
  WriteStream,
} from "../src";
import * as pb from "../src/gen/leasehold/v1/leasehold";
import { encodedLength, MAX_MESSAGE_BYTES, splitWrites } from "../src/writestream";
import { Server, uniqueJob } from "./harness";

const written = (...versions: bigint[]): WriteOutcome[] => versions.map((version) => ({ kind: "written", version }));
/** `p`, or a rejection if it takes longer than `ms`: a hang fails fast. */
const within = <T>(ms: number, p: Promise<T>): Promise<T> => {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
};
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => BigInt(from + i));

describe("WriteStream against the real server", () => {
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

  test("writes in one batch and in several calls; versions; read back; delete; close", async () => {
    const job = uniqueJob("ws");
    const { lease } = await client.acquire(job, "w", 30_000);
    const t = lease.token;
    const s = client.writeStream();
    assert.deepEqual(
      await s.write([
        { job, token: t, key: "a", value: "a1" },
        { job, token: t, key: Buffer.from("b"), value: Buffer.from("b1") },
        { job, token: t, key: "a", value: "a2" },
        { job, token: t, key: new Uint8Array([0x63]), value: "" },
      ]),
      written(1n, 1n, 2n, 1n),
    );
    assert.deepEqual(await s.write([{ job, token: t, key: "a", value: "a3" }]), written(3n));
    assert.deepEqual(await s.write([{ job, token: t, key: "b", value: "b2" }]), written(2n));
    assert.deepEqual(await s.write([]), []);
    const a = await client.read(job, "a");
    assert.deepEqual([a.found, a.value.toString(), a.version, a.token], [true, "a3", 3n, t]);
    const c = await client.read(job, "c");
    assert.deepEqual([c.found, c.value.length, c.version], [true, 0, 1n], "an empty value is a value");
    // Both ways to delete.
    assert.deepEqual(
      await s.write([
        { job, token: t, key: "a" },
        { job, token: t, key: "b", value: "ignored", delete: true },
      ]),
      written(4n, 3n),
    );
    assert.equal((await client.read(job, "a")).found, false);
    assert.equal((await client.read(job, "b")).found, false);
    assert.deepEqual(
      (await client.listKeys(job)).map((k) => k.key.toString()),
      ["c"],
    );
    // close() lets a pending write finish, then later writes reject.
    const pending = s.write([{ job, token: t, key: "c", value: "c2" }]);
    await s.close();
    assert.deepEqual(await pending, written(2n));
    await assert.rejects(s.write([{ job, token: t, key: "c", value: "c3" }]), Unavailable);
    assert.equal((await client.read(job, "c")).version, 2n);
    await s.close(); // twice is fine
  });

  test("a malformed write gets invalidArgument naming its field; the others are written", async () => {
    const job = uniqueJob("ws-invalid");
    const { lease } = await client.acquire(job, "w", 30_000);
    const t = lease.token;
    const s = client.writeStream();
    try {
      const out = await s.write([
        { job, token: t, key: "before", value: "1" },
        { job, token: t, key: "", value: "empty key" },
        { job, token: t, key: "after", value: "2" },
        { job, token: t, key: "big", value: Buffer.alloc(64 * 1024 + 1) },
        { job, token: t, key: "last", value: "3" },
      ]);
      assert.equal(out.length, 5);
      assert.deepEqual(out[0], { kind: "written", version: 1n });
      assert.equal(out[1].kind, "invalidArgument");
      assert.equal(out[1].kind === "invalidArgument" && out[1].field, "key");
      assert.deepEqual(out[2], { kind: "written", version: 1n });
      assert.equal(out[3].kind, "invalidArgument");
      assert.equal(out[3].kind === "invalidArgument" && out[3].field, "value");
      assert.match(out[3].kind === "invalidArgument" ? out[3].message : "", /65536|64/);
      assert.deepEqual(out[4], { kind: "written", version: 1n });
      assert.deepEqual(
        (await client.listKeys(job)).map((k) => k.key.toString()),
        ["after", "before", "last"],
      );
      // The stream goes on.
      assert.deepEqual(await s.write([{ job, token: t, key: "big", value: "small" }]), written(1n));
      // A token that is no uint64 is refused before anything is sent.
      await assert.rejects(s.write([{ job, token: -1n, key: "k", value: "v" }]), (e: unknown) => {
        assert.ok(e instanceof InvalidArgument);
        assert.equal(e.field, "token");
        return true;
      });
      assert.deepEqual(await s.write([{ job, token: t, key: "k", value: "v" }]), written(1n));
    } finally {
      await s.close();
    }
  });

  test("a stale holder is fenced with the current token; the value is unchanged", async () => {
    const job = uniqueJob("ws-fenced");
    const a = (await client.acquire(job, "a", 30_000)).lease.token;
    const s = client.writeStream();
    try {
      assert.deepEqual(await s.write([{ job, token: a, key: "k", value: "from a" }]), written(1n));
      await client.release(job, "a", a);
      const b = (await client.acquire(job, "b", 30_000)).lease.token;
      assert.equal(b, a + 1n);
      const out = await s.write([
        { job, token: a, key: "k", value: "stale" },
        { job, token: a, key: "k" },
        { job, token: b, key: "other", value: "from b" },
      ]);
      for (const o of out.slice(0, 2)) {
        assert.equal(o.kind, "fenced");
        assert.equal(o.kind === "fenced" && o.currentToken, b);
        assert.ok(o.kind === "fenced" && o.message.length > 0);
      }
      assert.deepEqual(out[2], { kind: "written", version: 1n });
      const v = await client.read(job, "k");
      assert.deepEqual([v.found, v.value.toString(), v.token, v.version], [true, "from a", a, 1n]);
    } finally {
      await s.close();
    }
  });

  test("a token never issued gets unknownToken", async () => {
    const job = uniqueJob("ws-unknown");
    const t = (await client.acquire(job, "a", 30_000)).lease.token;
    const s = client.writeStream();
    try {
      const out = await s.write([
        { job, token: t + 5n, key: "k", value: "v" },
        { job, token: 0n, key: "k", value: "v" },
      ]);
      assert.equal(out[0].kind, "unknownToken");
      assert.equal(out[0].kind === "unknownToken" && out[0].currentToken, t);
      // Token 0 is never issued either; the server calls it malformed.
      assert.equal(out[1].kind, "invalidArgument");
      assert.equal(out[1].kind === "invalidArgument" && out[1].field, "token");
      assert.equal((await client.read(job, "k")).found, false);
    } finally {
      await s.close();
    }
  });

  test("2500 writes in one call are split into messages and answered in order", async () => {
    const job = uniqueJob("ws-split");
    const t = (await client.acquire(job, "w", 30_000)).lease.token;
    const writes: StreamWrite[] = range(1, 2500).map((i) => ({ job, token: t, key: "k", value: `v${i}` }));
    const s = client.writeStream();
    try {
      // One message of 2500 would end the stream (INVALID_ARGUMENT "writes").
      const out = await s.write(writes);
      assert.deepEqual(out, written(...range(1, 2500)));
      const v = await client.read(job, "k");
      assert.deepEqual([v.value.toString(), v.version], ["v2500", 2500n]);
      // Large values: several messages by size, pipelined on the same stream.
      const big = range(1, 5).map((i) => ({ job, token: t, key: `big${i}`, value: Buffer.alloc(30_000, Number(i)) }));
      assert.deepEqual(await s.write(big), written(1n, 1n, 1n, 1n, 1n));
      assert.equal((await client.read(job, "big5")).value[0], 5);
    } finally {
      await s.close();
    }
  });

  test("overlapping write calls on one stream each get their own outcomes", async () => {
    const job = uniqueJob("ws-concurrent");
    const t = (await client.acquire(job, "w", 30_000)).lease.token;
    const s = client.writeStream();
    const N = 20;
    try {
      // Writer w writes its own key N times, w+1 writes per call: a
      // mismatched answer would show as a wrong length or wrong versions.
      const writer = async (w: number) => {
        const seen: bigint[] = [];
        for (let i = 0; i < N; i++) {
          const batch = Array.from({ length: w + 1 }, () => ({ job, token: t, key: `w${w}`, value: `${w}` }));
          const out = await s.write(batch);
          assert.equal(out.length, w + 1);
          for (const o of out) {
            assert.equal(o.kind, "written");
            if (o.kind === "written") seen.push(o.version);
          }
        }
        return seen;
      };
      const all = await Promise.all([0, 1, 2, 3, 4].map(writer));
      all.forEach((seen, w) => assert.deepEqual(seen, range(1, N * (w + 1)), `writer ${w}`));
      for (let w = 0; w < 5; w++) assert.equal((await client.read(job, `w${w}`)).version, BigInt(N * (w + 1)));
    } finally {
      await s.close();
    }
  });

  test("cancel rejects pending and later writes with Unavailable", async () => {
    const job = uniqueJob("ws-cancel");
    const t = (await client.acquire(job, "w", 30_000)).lease.token;
    const s = client.writeStream();
    assert.deepEqual(await s.write([{ job, token: t, key: "k", value: "1" }]), written(1n));
    const pending = s.write([{ job, token: t, key: "k", value: "2" }]);
    s.cancel();
    await assert.rejects(within(5000, pending), Unavailable);
    await assert.rejects(within(1000, s.write([{ job, token: t, key: "k", value: "3" }])), Unavailable);
    await within(1000, s.close());
    assert.ok((await client.read(job, "k")).version <= 2n);
  });

  test("a stream ended by the server rejects pending and later writes with its typed error", async () => {
    const job = uniqueJob("ws-status");
    const t = (await client.acquire(job, "w", 30_000)).lease.token;
    // The helper never sends more than 1000 writes in a message; send one
    // by hand on the same call, ahead of the helper's own.
    const raw = new pb.FencedStoreClient(server.target, credentials.createInsecure());
    try {
      const call = raw.writeStream();
      const s = new WriteStream(call);
      const tooMany = Array.from({ length: 1001 }, () => ({
        job,
        token: t,
        key: Buffer.from("x"),
        value: Buffer.from("x"),
        delete: false,
        proof: "",
      }));
      call.write({ id: 1000n, writes: tooMany });
      let first: unknown;
      await assert.rejects(within(5000, s.write([{ job, token: t, key: "k", value: "v" }])), (e: unknown) => {
        assert.ok(e instanceof InvalidArgument, String(e));
        assert.equal(e.field, "writes");
        first = e;
        return true;
      });
      await assert.rejects(s.write([{ job, token: t, key: "k", value: "v" }]), (e: unknown) => e === first);
      await within(5000, s.close());
      assert.equal((await client.read(job, "k")).found, false);
      assert.equal((await client.read(job, "x")).found, false);
    } finally {
      raw.close();
    }
  });
});

test("splitting: at most 1000 writes and about 48 KiB per message", () => {
  const w = (n: number): pb.CheckedWriteRequest => ({
    job: "j",
    token: 1n,
    key: Buffer.from("k"),
    value: Buffer.alloc(n),
    delete: false,
    proof: "",
  });
  assert.deepEqual(splitWrites([]), [[]]);
  assert.deepEqual(
    splitWrites(Array.from({ length: 2500 }, () => w(1))).map((m) => m.length),
    [1000, 1000, 500],
  );
  assert.deepEqual(
    splitWrites([w(60 * 1024), w(10), w(60 * 1024)]).map((m) => m.length),
    [1, 1, 1],
  );
  const sizes = splitWrites(Array.from({ length: 100 }, () => w(1000))).map((m) =>
    m.reduce((n, x) => n + encodedLength(x) + 4, 0),
  );
  assert.ok(sizes.length > 1 && sizes.every((n) => n <= MAX_MESSAGE_BYTES), String(sizes));
  for (const x of [
    w(0),
    w(200),
    { job: "ünïcode", token: (1n << 64n) - 1n, key: Buffer.alloc(300), value: Buffer.alloc(70_000), delete: false, proof: "" },
    { job: "", token: 0n, key: Buffer.alloc(0), value: Buffer.alloc(0), delete: true, proof: "" },
    { job: "j", token: 0n, key: Buffer.from("k"), value: Buffer.from("v"), delete: false, proof: "e".repeat(300) },
  ]) {
    assert.equal(encodedLength(x), pb.CheckedWriteRequest.encode(x).finish().length);
  }
});

test("a write stream to an unreachable server rejects with Unavailable", async () => {
  const port = await new Promise<number>((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
  const c = new Client(`127.0.0.1:${port}`);
  try {
    const s = c.writeStream();
    await assert.rejects(within(5000, s.write([{ job: "j", token: 1n, key: "k", value: "v" }])), Unavailable);
    await assert.rejects(within(5000, s.write([{ job: "j", token: 1n, key: "k", value: "v" }])), Unavailable);
    await s.close();
  } finally {
    c.close();
  }
});

test("writes on a stream reject with ShuttingDown when the server stops", async () => {
  const server = await Server.start();
  const c = new Client(server.target);
  try {
    const job = "j";
    const t = (await c.acquire(job, "a", 30_000)).lease.token;
    const s: WriteStream = c.writeStream();
    assert.deepEqual(await s.write([{ job, token: t, key: "k", value: "v" }]), written(1n));
    const inFlight = s.write([{ job, token: t, key: "k", value: "v" }]);
    server.signal("SIGTERM");
    // Writes sent before the server sees the signal may still be answered;
    // keep writing until the stream breaks, which must not take long.
    const deadline = Date.now() + 10_000;
    let err: unknown;
    for (;;) {
      try {
        await within(5000, s.write([{ job, token: t, key: "k", value: "v" }]));
      } catch (e) {
        err = e;
        break;
      }
      assert.ok(Date.now() < deadline, "the stream did not end after SIGTERM");
    }
    assert.ok(err instanceof ShuttingDown || err instanceof Unavailable, String(err));
    assert.ok(err instanceof LeaseholdError && err.retryable);
    // The write in flight at the signal was answered, or rejects with it.
    await within(5000, inFlight).then(
      (out) => assert.deepEqual(out, written(2n)),
      (e) => assert.equal(e, err),
    );
    // The stream is broken: later writes reject at once with the same error.
    await assert.rejects(within(1000, s.write([{ job, token: t, key: "k", value: "v" }])), (e: unknown) => e === err);
    await within(5000, s.close());
  } finally {
    c.close();
    await server.stop();
  }
});
