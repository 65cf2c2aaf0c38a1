/**
 * Handing a lease over (TransferLease): `Client.transferLease` and
 * `Elector.transfer`, against the real server. The successor is granted
 * the next token at once; the old leader reports the end of its
 * leadership exactly once, as for a loss, and campaigns again; a
 * renewal racing with the transfer reports nothing more.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { credentials, type ServiceError } from "@grpc/grpc-js";
import { Client, Elector, LeaseholdError, LeaseLost, NoSuccessor, NotLeader, type Lease, type RenewedLease } from "../src";
import * as pb from "../src/gen/leasehold/v1/leasehold";
import { PATIENCE, Server, sleep, uniqueJob, waitUntil } from "./harness";

const quiet = { warn: () => {} };

function record(e: Elector): string[] {
  const events: string[] = [];
  e.on("elected", (t) => events.push(`elected ${t}`));
  e.on("lost", (t) => events.push(`lost ${t}`));
  return events;
}

/** The job's history, newest first, through the generated stub. */
export function history(raw: pb.LeasesClient, job: string): Promise<pb.Tenure[]> {
  return new Promise((resolve, reject) => {
    raw.getHistory({ job, pageSize: 0, pageToken: "" }, (err: ServiceError | null, r: pb.GetHistoryResponse) =>
      err ? reject(err) : resolve(r.tenures),
    );
  });
}

/** A gate a test opens: `wait()` resolves once `open()` was called. */
class Gate {
  open: () => void = () => {};
  private readonly opened = new Promise<void>((resolve) => (this.open = resolve));
  wait(): Promise<void> {
    return this.opened;
  }
}

/**
 * A client whose Renews and TransferLeases a test can hold: a renewal
 * before it is sent (`holdRenew: "send"`) or its answer once the server
 * gave it (`"answer"`), and a transfer's answer once the server gave it.
 */
class HeldClient extends Client {
  holdRenew: { at: "send" | "answer"; gate: Gate } | undefined;
  /** Renewals held so far. */
  renewsHeld = 0;
  transferGate: Gate | undefined;

  override async renew(
    job: string,
    holder: string,
    token: bigint,
    ttlMs: number,
    opts?: Parameters<Client["renew"]>[4],
  ): Promise<RenewedLease> {
    const hold = this.holdRenew;
    if (hold?.at === "send") {
      this.renewsHeld++;
      await hold.gate.wait();
    }
    const lease = await super.renew(job, holder, token, ttlMs, opts);
    if (hold?.at === "answer") {
      this.renewsHeld++;
      await hold.gate.wait();
    }
    return lease;
  }

  override async transferLease(...args: Parameters<Client["transferLease"]>): Promise<Lease> {
    const gate = this.transferGate;
    const lease = await super.transferLease(...args);
    if (gate) await gate.wait();
    return lease;
  }
}

describe("transfer against the real server", () => {
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

  test("the leader transfers: the waiting elector leads with token + 1 at once, the old one reports the loss and campaigns again", async () => {
    const job = uniqueJob("transfer");
    // A hand-over by the transfer is told from one by expiry by a third of the TTL.
    const ttl = 30_000;
    const a = new Elector(client, job, "a", ttl, { logger: quiet });
    const ea = record(a);
    const b = new Elector(client, job, "b", ttl, { logger: quiet });
    const eb = record(b);
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();
      await server.waitWaiters(1);
      const lost = a.lost();
      const t = performance.now();
      const successor = await a.transfer();
      assert.deepEqual([successor.holder, successor.token, successor.ttlMs], [b.holder, 2n, ttl]);
      // The loss was reported before transfer() resolved, once.
      assert.deepEqual(ea, ["elected 1", "lost 1"]);
      await lost;
      assert.equal(a.isLeader, false);
      assert.equal(a.token, undefined);
      assert.equal(await b.elected({ timeoutMs: PATIENCE }), 2n);
      const handover = performance.now() - t;
      assert.ok(handover < ttl / 3, `hand-over came from the transfer, not expiry: ${handover} ms`);
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [b.holder, 2n]);
      const tenures = await history(raw, job);
      assert.deepEqual(
        tenures.map((x) => [x.token, x.holder, x.end]),
        [
          [2n, b.holder, pb.Tenure_End.END_UNSPECIFIED],
          [1n, a.holder, pb.Tenure_End.END_TRANSFERRED],
        ],
      );
      // A campaigns again at once (not on its next renewal, 10 s on),
      // behind B: B's resign hands the job back to it.
      await server.waitWaiters(1, ttl / 6);
      await b.resign();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 3n);
      assert.deepEqual(ea, ["elected 1", "lost 1", "elected 3"]);
      assert.deepEqual(eb, ["elected 2", "lost 2"]);
    } finally {
      await Promise.all([a.resign(), b.resign()]);
    }
  });

  test("transfer(to) hands over to the named waiter, not the first in line", async () => {
    const job = uniqueJob("transfer-to");
    const ttl = 30_000;
    const a = new Elector(client, job, "a", ttl, { logger: quiet });
    const b = new Elector(client, job, "b", ttl, { logger: quiet });
    const c = new Elector(client, job, "c", ttl, { logger: quiet });
    const [ea, eb, ec] = [record(a), record(b), record(c)];
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();
      await server.waitWaiters(1); // B is first in line
      c.start();
      await server.waitWaiters(2);
      const successor = await a.transfer(c.holder);
      assert.deepEqual([successor.holder, successor.token], [c.holder, 2n]);
      assert.equal(await c.elected({ timeoutMs: PATIENCE }), 2n);
      assert.deepEqual(ea, ["elected 1", "lost 1"]);
      // B still waits, and A queues again.
      await server.waitWaiters(2);
      assert.equal(b.isLeader, false);
      assert.deepEqual(eb, []);
      assert.deepEqual(ec, ["elected 2"]);
      assert.equal((await client.getLease(job)).holder, c.holder);
    } finally {
      await Promise.all([a.resign(), b.resign(), c.resign()]);
    }
  });

  test("a transfer with nobody waiting is NoSuccessor, and the leader goes on leading", async () => {
    const job = uniqueJob("alone");
    // Renewals every 3 s; the lease lasts 9 s.
    const ttl = 9000;
    const e = new Elector(client, job, "alone", ttl, { logger: quiet });
    const events = record(e);
    try {
      e.start();
      assert.equal(await e.elected({ timeoutMs: PATIENCE }), 1n);
      for (const to of [undefined, "nobody@waits"]) {
        await assert.rejects(e.transfer(to), (err: unknown) => {
          assert.ok(err instanceof NoSuccessor, String(err));
          assert.ok(err instanceof LeaseholdError);
          assert.equal(err.reason, "NO_SUCCESSOR");
          assert.equal(err.retryable, false);
          return true;
        });
        assert.equal(e.token, 1n);
      }
      // It renews on as before.
      const renewed = await server.metric("leasehold_renewals_total");
      await server.waitRenewals(renewed + 2, 2 * PATIENCE);
      assert.equal(e.token, 1n);
      const lease = await client.getLease(job);
      assert.deepEqual([lease.holder, lease.token], [e.holder, 1n]);
      assert.deepEqual(events, ["elected 1"]);
    } finally {
      await e.resign();
    }
    assert.equal((await client.getLease(job)).holder, undefined, "resign released the lease");
  });

  test("client transferLease: to a waiting acquire, with a TTL; a stale token is LeaseLost, no waiter NoSuccessor", async () => {
    const job = uniqueJob("client");
    const held = await client.acquire(job, "a", 30_000);
    assert.equal(held.lease.token, 1n);
    const waiting = client.acquire(job, "b", 30_000, PATIENCE);
    await server.waitWaiters(1);
    const successor = await client.transferLease(job, "a", 1n, undefined, 5000);
    assert.deepEqual([successor.job, successor.holder, successor.token, successor.ttlMs], [job, "b", 2n, 5000]);
    const granted = await waiting;
    assert.deepEqual([granted.acquired, granted.lease.holder, granted.lease.token], [true, "b", 2n]);
    // The old holder's token is stale now: LeaseLost, as Renew would answer.
    for (const [holder, token] of [["a", 1n], ["b", 1n], ["a", 2n]] as const) {
      await assert.rejects(client.transferLease(job, holder, token), (err: unknown) => {
        assert.ok(err instanceof LeaseLost, `${holder} ${token}: ${err}`);
        return true;
      });
    }
    // Nobody waits: NoSuccessor, and B still holds it.
    await assert.rejects(client.transferLease(job, "b", 2n), NoSuccessor);
    await assert.rejects(client.transferLease(job, "b", 2n, "a"), NoSuccessor);
    const lease = await client.getLease(job);
    assert.deepEqual([lease.holder, lease.token], ["b", 2n]);
    const tenures = await history(raw, job);
    assert.deepEqual(
      tenures.map((x) => [x.token, x.end]),
      [
        [2n, pb.Tenure_End.END_UNSPECIFIED],
        [1n, pb.Tenure_End.END_TRANSFERRED],
      ],
    );
    await client.release(job, "b", 2n);
  });

  test("a transfer of a lease no longer ours is LeaseLost: the elector steps down and campaigns again", async () => {
    const job = uniqueJob("stale");
    // Renewals every 10 s: the transfer learns of the theft first.
    const ttl = 30_000;
    const e = new Elector(client, job, "e", ttl, { logger: quiet });
    const events = record(e);
    try {
      e.start();
      assert.equal(await e.elected({ timeoutMs: PATIENCE }), 1n);
      // Hand the lease to a waiting thief behind the elector's back.
      const thief = client.acquire(job, "thief", 60_000, PATIENCE);
      await server.waitWaiters(1);
      await client.release(job, e.holder, 1n);
      assert.equal((await thief).lease.token, 2n);
      assert.equal(e.token, 1n, "it has not noticed yet");
      await assert.rejects(e.transfer(), (err: unknown) => {
        assert.ok(err instanceof LeaseLost, String(err));
        assert.equal(err.currentToken, 2n);
        return true;
      });
      assert.deepEqual(events, ["elected 1", "lost 1"]);
      assert.equal(e.isLeader, false);
      // It campaigns again: granted when the thief lets go.
      await server.waitWaiters(1);
      await client.release(job, "thief", 2n);
      assert.equal(await e.elected({ timeoutMs: PATIENCE }), 3n);
      assert.deepEqual(events, ["elected 1", "lost 1", "elected 3"]);
    } finally {
      await e.resign();
    }
  });

  test("a follower's transfer() is NotLeader", async () => {
    const job = uniqueJob("follower");
    const ttl = 30_000;
    const a = new Elector(client, job, "a", ttl, { logger: quiet });
    const b = new Elector(client, job, "b", ttl, { logger: quiet });
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();
      await server.waitWaiters(1);
      await assert.rejects(b.transfer(), NotLeader);
      await assert.rejects(b.transfer(a.holder), NotLeader);
      assert.equal(a.token, 1n);
      assert.equal((await client.getLease(job)).holder, a.holder);
    } finally {
      await Promise.all([a.resign(), b.resign()]);
    }
    // After resign, not leading either.
    await assert.rejects(a.transfer(), NotLeader);
  });

  /**
   * A renewal learns of the transfer before the transfer's own answer
   * arrives: its LEASE_LOST reports the loss, and the transfer's answer
   * reports nothing more.
   */
  test("a renewal refused after the transfer, answered first, reports the loss once", async () => {
    const job = uniqueJob("race-lost");
    // Renewals every 2 s.
    const ttl = 6000;
    const held = new HeldClient(server.target);
    const a = new Elector(held, job, "a", ttl, { logger: quiet });
    const b = new Elector(client, job, "b", ttl, { logger: quiet });
    const ea = record(a);
    try {
      a.start();
      assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
      b.start();
      await server.waitWaiters(1);
      const gate = new Gate();
      held.transferGate = gate;
      const losses = await server.metric("leasehold_renew_losses_total");
      const transfer = a.transfer();
      assert.equal(await b.elected({ timeoutMs: PATIENCE }), 2n);
      // A's next renewal is refused (LEASE_LOST): the loss is reported
      // while the transfer's answer is held, and A campaigns again.
      await waitUntil(() => ea.includes("lost 1"), PATIENCE, "the loss from the renewal");
      assert.ok((await server.metric("leasehold_renew_losses_total")) > losses, "the loss came from a renewal");
      await server.waitWaiters(1);
      gate.open();
      const successor = await transfer;
      assert.deepEqual([successor.holder, successor.token], [b.holder, 2n]);
      await sleep(100);
      assert.deepEqual(ea, ["elected 1", "lost 1"]);
      assert.equal(b.token, 2n);
    } finally {
      await Promise.all([a.resign(), b.resign()]);
      held.close();
    }
  });

  for (const at of ["send", "answer"] as const) {
    test(`a renewal held at its ${at} across the transfer reports nothing more`, async () => {
      const job = uniqueJob(`race-${at}`);
      const ttl = 6000;
      const held = new HeldClient(server.target);
      const a = new Elector(held, job, "a", ttl, { logger: quiet });
      const b = new Elector(client, job, "b", ttl, { logger: quiet });
      const ea = record(a);
      const gate = new Gate();
      try {
        a.start();
        assert.equal(await a.elected({ timeoutMs: PATIENCE }), 1n);
        b.start();
        await server.waitWaiters(1);
        const renewed = await server.metric("leasehold_renewals_total");
        held.holdRenew = { at, gate };
        await waitUntil(() => held.renewsHeld > 0, PATIENCE, "a held renewal");
        if (at === "answer") assert.ok((await server.metric("leasehold_renewals_total")) > renewed);
        const successor = await a.transfer();
        assert.deepEqual([successor.holder, successor.token], [b.holder, 2n]);
        assert.deepEqual(ea, ["elected 1", "lost 1"]);
        assert.equal(await b.elected({ timeoutMs: PATIENCE }), 2n);
        held.holdRenew = undefined;
        gate.open();
        // A campaigns again behind B, and reports nothing more.
        await server.waitWaiters(1);
        await sleep(ttl / 3 + 500);
        assert.deepEqual(ea, ["elected 1", "lost 1"]);
        assert.equal(a.isLeader, false);
        assert.equal(b.token, 2n);
      } finally {
        gate.open();
        await Promise.all([a.resign(), b.resign()]);
        held.close();
      }
    });
  }
});

test("transfer() of an elector that does not lead is NotLeader, without a call", async () => {
  // Nothing listens on port 1: a call would fail with Unavailable.
  const client = new Client("127.0.0.1:1", { timeoutMs: 1000 });
  const e = new Elector(client, "j", "n", 1000, { logger: quiet });
  try {
    await assert.rejects(e.transfer(), NotLeader);
    e.start();
    await assert.rejects(e.transfer("other"), (err: unknown) => {
      assert.ok(err instanceof NotLeader && !(err instanceof LeaseholdError), String(err));
      assert.equal(err.name, "NotLeader");
      return true;
    });
  } finally {
    await e.resign();
    client.close();
  }
});
