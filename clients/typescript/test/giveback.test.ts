/**
 * Giving back a grant whose caller may never have learned of it (an
 * aborted waiting Acquire), and the rule that makes it safe: a give-back
 * never ends a lease its holder was told it holds. A repeated Acquire or
 * a Renew may have told the holder that it leads; after one, only its own
 * release or the TTL ends the lease, or another holder could take over
 * before the TTL it was promised. Against the real server.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { credentials, type ServiceError } from "@grpc/grpc-js";
import { Client } from "../src";
import * as pb from "../src/gen/leasehold/v1/leasehold";
import { PATIENCE, Server, waitUntil } from "./harness";

const TTL = 30_000;

/** A Release through the generated stub; resolves to `released`. */
function rawRelease(raw: pb.LeasesClient, job: string, holder: string, token: bigint, giveBack: boolean): Promise<boolean> {
  return new Promise((resolve, reject) => {
    raw.release({ job, holder, token, giveBack }, (err: ServiceError | null, r: pb.ReleaseResponse) =>
      err ? reject(err) : resolve(r.released),
    );
  });
}

/** Waits about `ms` (below 1 ms too), yielding to I/O all along. */
async function skew(ms: number): Promise<void> {
  const until = performance.now() + ms;
  while (performance.now() < until) await new Promise((r) => setImmediate(r));
}

test("a give-back (ReleaseRequest.giveBack) ends only a grant never asked for again", async () => {
  const server = await Server.start();
  const c = new Client(server.target);
  const raw = new pb.LeasesClient(server.target, credentials.createInsecure());
  const giveBack = (job: string, holder: string, token: bigint) => rawRelease(raw, job, holder, token, true);
  try {
    // Granted, never asked again: given back, and the job is free.
    let a = await c.acquire("j", "a", TTL);
    assert.ok(a.acquired);
    assert.equal(await giveBack("j", "a", a.lease.token), true);
    assert.equal((await c.getLease("j")).holder, undefined);

    // Asked again with a repeated Acquire: kept.
    a = await c.acquire("j", "a", TTL);
    const again = await c.acquire("j", "a", TTL);
    assert.equal(again.lease.token, a.lease.token, "a re-grant");
    assert.equal(await giveBack("j", "a", a.lease.token), false);
    let l = await c.getLease("j");
    assert.deepEqual([l.holder, l.token], ["a", a.lease.token]);

    // Asked again with a Renew: kept.
    await c.release("j", "a", a.lease.token);
    a = await c.acquire("j", "a", TTL);
    await c.renew("j", "a", a.lease.token, TTL);
    assert.equal(await giveBack("j", "a", a.lease.token), false);
    assert.equal((await c.getLease("j")).holder, "a");

    // Another holder's, or another token's: nothing changes, no error.
    assert.equal(await giveBack("j", "b", a.lease.token), false);
    assert.equal(await giveBack("j", "a", a.lease.token + 1n), false);
    assert.equal(await giveBack("never-granted", "a", 1n), false);
    l = await c.getLease("j");
    assert.deepEqual([l.holder, l.token], ["a", a.lease.token]);

    // A plain release says whether it ended the holding.
    assert.equal(await rawRelease(raw, "j", "a", a.lease.token, false), true);
    assert.equal(await rawRelease(raw, "j", "a", a.lease.token, false), false, "a repeated release changes nothing");
  } finally {
    raw.close();
    c.close();
    await server.stop();
  }
});

/**
 * Per round: B holds the job and A waits for it; B releases as A's call is
 * aborted, and A asks again at once on the same client (a retry, as an
 * elector does). When the retry is granted, A was told that it leads: its
 * lease must still be A's, same token, after any give-back of the aborted
 * call has looked at the lease (the client's looks 100 ms after the abort,
 * and releases, if it does, as soon as it has the answer).
 */
test("a retry after an aborted waiting acquire keeps its grant (10 rounds)", async () => {
  const ROUNDS = 10;
  const server = await Server.start();
  const a = new Client(server.target);
  const b = new Client(server.target);
  let delivered = 0;
  try {
    for (let i = 0; i < ROUNDS; i++) {
      const job = `r${i}`;
      const held = await b.acquire(job, "b", TTL);
      assert.ok(held.acquired);
      const ac = new AbortController();
      const looked = await server.metricWith("leasehold_rpc_responses_total", 'method="GetLease"');
      const waiting = a.acquire(job, "a", TTL, 20_000, { signal: ac.signal }).catch(() => undefined);
      // A is in line once its Acquire reached the server.
      await server.waitWaiters(1);
      const release = b.release(job, "b", held.lease.token);
      const cancel = (async () => {
        await skew(((i * 137) % 1000) / 1000);
        ac.abort();
      })();
      await Promise.all([release, cancel]);
      const answer = await waiting;
      if (answer?.acquired) delivered++;
      const retry = await a.acquire(job, "a", TTL, PATIENCE);
      assert.ok(retry.acquired, `round ${i}: B released; A's retry is granted`);
      if (answer === undefined) {
        // The aborted call's give-back reads the lease first.
        await waitUntil(
          async () => (await server.metricWith("leasehold_rpc_responses_total", 'method="GetLease"')) > looked,
          PATIENCE,
          "the give-back to read the lease",
        );
      }
      const l = await a.getLease(job);
      assert.deepEqual(
        [l.holder, l.token],
        ["a", retry.lease.token],
        `round ${i}: A was told it holds token ${retry.lease.token}, and its lease ended early`,
      );
      await a.release(job, "a", retry.lease.token);
    }
    console.log(`${ROUNDS} rounds: ${delivered} grants reached A before the abort`);
  } finally {
    a.close();
    b.close();
    await server.stop();
  }
});
