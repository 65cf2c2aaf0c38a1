/**
 * Grants bound to their connection (`bindToStream`), against the real
 * server: when the client's end of the connection closes (its process
 * died, its channel was closed, a proxy cut it), the lease is released at
 * once, long before its TTL, and the next waiter is granted the next
 * token; the history says CONNECTION_CLOSED. Unbound grants run their TTL.
 */
import assert from "node:assert/strict";
import { connect, createServer, type Server as NetServer, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";
import { credentials, type ServiceError } from "@grpc/grpc-js";
import { Client, Elector } from "../src";
import * as pb from "../src/gen/leasehold/v1/leasehold";
import { PATIENCE, Server, sleep, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };
/** The TTL of the bound grants: their release on a closed connection comes well before it. */
const TTL = 30_000;
/**
 * A client on a connection of its own: grpc-js shares one connection
 * between the channels of a process with the same target and options
 * (its global subchannel pool), and closing one would not close it.
 */
const OWN_CONNECTION = { channelOptions: { "grpc.use_local_subchannel_pool": 1 } };

function record(e: Elector): string[] {
  const events: string[] = [];
  e.on("elected", (t) => events.push(`elected ${t}`));
  e.on("lost", (t) => events.push(`lost ${t}`));
  return events;
}

function history(raw: pb.LeasesClient, job: string): Promise<pb.Tenure[]> {
  return new Promise((resolve, reject) => {
    raw.getHistory({ job, pageSize: 0, pageToken: "" }, (err: ServiceError | null, r: pb.GetHistoryResponse) =>
      err ? reject(err) : resolve(r.tenures),
    );
  });
}

/** A TCP proxy to the server whose connections a test can cut, as a proxy or load balancer may. */
class Proxy {
  private readonly sockets = new Set<Socket>();
  private readonly listener: NetServer;

  private constructor(upstream: string) {
    const i = upstream.lastIndexOf(":");
    const [host, port] = [upstream.slice(0, i), Number(upstream.slice(i + 1))];
    this.listener = createServer((down) => {
      const up = connect(port, host);
      for (const [s, other] of [[down, up], [up, down]] as const) {
        this.sockets.add(s);
        s.on("error", () => other.destroy());
        s.on("close", () => {
          this.sockets.delete(s);
          other.destroy();
        });
      }
      down.pipe(up);
      up.pipe(down);
    });
  }

  static start(upstream: string): Promise<Proxy> {
    const proxy = new Proxy(upstream);
    return new Promise((resolve) => proxy.listener.listen(0, "127.0.0.1", () => resolve(proxy)));
  }

  get target(): string {
    return `127.0.0.1:${(this.listener.address() as { port: number }).port}`;
  }

  /** Closes every connection through the proxy, both ends; new ones are accepted as before. */
  cut(): void {
    for (const s of this.sockets) s.destroy();
  }

  close(): void {
    this.cut();
    this.listener.close();
  }
}

describe("bindToStream against the real server", () => {
  let server: Server;
  let client: Client;
  let raw: pb.LeasesClient;
  before(async () => {
    server = await Server.start();
    client = new Client(server.target);
    raw = new pb.LeasesClient(server.target, credentials.createInsecure());
  });
  after(async () => {
    raw.close();
    client.close();
    await server.stop();
  });

  test("a bound grant is released at once when its connection closes, as when its process dies", async () => {
    const job = uniqueJob("bound");
    const proxy = await Proxy.start(server.target);
    const bound = new Client(proxy.target);
    try {
      const held = await bound.acquire(job, "a", TTL, 0, { bindToStream: true });
      assert.deepEqual([held.acquired, held.lease.token], [true, 1n]);
      assert.equal((await client.getLease(job)).holder, "a");
      // The connection's end at the server is closed (a FIN), as the
      // kernel closes a dead process's connections.
      const t = performance.now();
      proxy.cut();
      await waitUntil(async () => (await client.getLease(job)).holder === undefined, TTL / 3, "the release");
      console.log(`free ${Math.round(performance.now() - t)} ms after the connection closed (TTL ${TTL} ms)`);
      assert.equal((await client.getLease(job)).token, 1n);
      assert.deepEqual(
        (await history(raw, job)).map((x) => [x.token, x.holder, x.end]),
        [[1n, "a", pb.Tenure_End.END_CONNECTION_CLOSED]],
      );

      // With a waiter: it is granted the next token at once. The client
      // reconnects through the proxy for its next call.
      const again = await bound.acquire(job, "a", TTL, 0, { bindToStream: true });
      assert.equal(again.lease.token, 2n);
      const waiting = client.acquire(job, "b", TTL, PATIENCE);
      await server.waitWaiters(1);
      const t2 = performance.now();
      proxy.cut();
      const granted = await waiting;
      assert.deepEqual([granted.acquired, granted.lease.holder, granted.lease.token], [true, "b", 3n]);
      assert.ok(performance.now() - t2 < TTL / 3, "the waiter was granted on the close, not the expiry");
      assert.equal((await history(raw, job))[1]?.end, pb.Tenure_End.END_CONNECTION_CLOSED);
      await client.release(job, "b", 3n);
    } finally {
      bound.close();
      proxy.close();
    }
  });

  test("a bound grant is released at once when its client is closed", async () => {
    const job = uniqueJob("closed");
    const bound = new Client(server.target, OWN_CONNECTION);
    const held = await bound.acquire(job, "a", TTL, 0, { bindToStream: true });
    assert.deepEqual([held.acquired, held.lease.token], [true, 1n]);
    const t = performance.now();
    bound.close();
    await waitUntil(async () => (await client.getLease(job)).holder === undefined, TTL / 3, "the release");
    console.log(`free ${Math.round(performance.now() - t)} ms after the client was closed (TTL ${TTL} ms)`);
    assert.deepEqual(
      (await history(raw, job)).map((x) => [x.token, x.holder, x.end]),
      [[1n, "a", pb.Tenure_End.END_CONNECTION_CLOSED]],
    );
  });

  test("an unbound grant outlives its connection", async () => {
    const job = uniqueJob("unbound");
    const proxy = await Proxy.start(server.target);
    const own = new Client(proxy.target);
    try {
      const held = await own.acquire(job, "a", TTL);
      proxy.cut();
      // A bound grant is released within milliseconds of the close.
      await sleep(2000);
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], ["a", held.lease.token]);
      await client.release(job, "a", held.lease.token);
    } finally {
      own.close();
      proxy.close();
    }
  });

  test("an Elector with bindToStream leads, renews, transfers and resigns like any elector", async () => {
    const job = uniqueJob("elector");
    // Renewals every 3 s; the lease lasts 9 s.
    const ttl = 9000;
    const a = new Elector(client, job, "a", ttl, { logger: quiet, bindToStream: true });
    const b = new Elector(client, job, "b", ttl, { logger: quiet, bindToStream: true });
    const [ea, eb] = [record(a), record(b)];
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      const renewed = await server.metric("leasehold_renewals_total");
      await server.waitRenewals(renewed + 2, 2 * PATIENCE);
      assert.equal(a.token, 1n);
      b.start();
      await server.waitWaiters(1);
      const successor = await a.transfer();
      assert.deepEqual([successor.holder, successor.token], [b.holder, 2n]);
      assert.equal(await b.elected({ timeoutMs: PATIENCE }), 2n);
      await server.waitWaiters(1);
      await b.resign();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 3n);
      await a.resign();
      assert.deepEqual(ea, ["elected 1", "lost 1", "elected 3", "lost 3"]);
      assert.deepEqual(eb, ["elected 2", "lost 2"]);
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [undefined, 3n], "resign released the lease");
    } finally {
      await Promise.all([a.resign(), b.resign()]);
    }
  });

  test("a bound elector whose connection is cut loses the lease at once, steps down, and campaigns again", async () => {
    const job = uniqueJob("cut");
    // Renewals every 5 s: the waiter is granted on the cut, long before
    // the lease's TTL, and the leader learns of it on its next renewal.
    const ttl = 15_000;
    const proxy = await Proxy.start(server.target);
    const proxied = new Client(proxy.target);
    const a = new Elector(proxied, job, "a", ttl, { logger: quiet, bindToStream: true });
    const b = new Elector(client, job, "b", ttl, { logger: quiet });
    const [ea, eb] = [record(a), record(b)];
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();
      await server.waitWaiters(1);
      const t = performance.now();
      proxy.cut();
      assert.equal(await b.elected({ timeoutMs: PATIENCE }), 2n);
      const handover = performance.now() - t;
      console.log(`waiter granted ${Math.round(handover)} ms after the cut (TTL ${ttl} ms)`);
      assert.ok(handover < ttl / 3, `granted on the cut, not the expiry: ${handover} ms`);
      // A's next renewal (on a new connection) is refused: it steps down,
      // and campaigns again behind B.
      await waitUntil(() => ea.includes("lost 1"), PATIENCE, "A's step-down");
      await server.waitWaiters(1);
      const tenures = await history(raw, job);
      assert.deepEqual(
        tenures.map((x) => [x.token, x.holder, x.end]),
        [
          [2n, b.holder, pb.Tenure_End.END_UNSPECIFIED],
          [1n, a.holder, pb.Tenure_End.END_CONNECTION_CLOSED],
        ],
      );
      await b.resign();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 3n);
      assert.deepEqual(ea, ["elected 1", "lost 1", "elected 3"]);
      assert.deepEqual(eb, ["elected 2", "lost 2"]);
    } finally {
      await Promise.all([a.resign(), b.resign()]);
      proxied.close();
      proxy.close();
    }
  });
});
