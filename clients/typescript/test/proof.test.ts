// Signed grants (docs/proofs.md): verifyProof against every case of
// clients/conformance/proof-vectors.json (no server), then proofs of a
// real server's grants: verified under getSigningKeys(), kept by
// renewals, new for a new grant, and written with instead of a token.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { get } from "node:http";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  Client,
  Elector,
  Fenced,
  InvalidArgument,
  type Jwks,
  KeySet,
  ProofError,
  ProofErrorKind,
  verifyProof,
} from "../src";
import type * as pb from "../src/gen/leasehold/v1/leasehold";
import { ROOT, Server, uniqueJob } from "./harness";

interface VectorCase {
  name: string;
  proof: string;
  job?: string;
  token?: string;
  ok: boolean;
  claims?: {
    job: string;
    token: string;
    principal: string;
    holder: string;
    iat: number;
    ttl_ms: number;
    kid: string;
  };
  error?: string;
}

interface Vectors {
  keys: Jwks;
  signed_by_a: { proof: string };
  cases: VectorCase[];
}

const vectors: Vectors = JSON.parse(
  readFileSync(join(ROOT, "clients", "conformance", "proof-vectors.json"), "utf8"),
);

/** `proof` with one character of part `part` changed to another base64url one. */
function flip(proof: string, part: number): string {
  const parts = proof.split(".");
  const p = parts[part];
  const i = Math.floor(p.length / 2);
  parts[part] = p.slice(0, i) + (p[i] === "A" ? "B" : "A") + p.slice(i + 1);
  return parts.join(".");
}

/** `verifyProof` throws a ProofError of `kind`. */
function refused(f: () => unknown, kind: ProofErrorKind, what: string): void {
  assert.throws(f, (e: unknown) => {
    assert.ok(e instanceof ProofError, `${what}: ${String(e)}`);
    assert.equal(e.kind, kind, `${what}: ${e.message}`);
    assert.ok(e.message.includes(kind), e.message);
    return true;
  });
}

describe("proof vectors", () => {
  const sets: [string, () => KeySet | Jwks | string][] = [
    ["the parsed JWKS", () => vectors.keys],
    ["the JWKS text", () => JSON.stringify(vectors.keys)],
    ["a KeySet", () => KeySet.parse(vectors.keys)],
  ];
  for (const c of vectors.cases) {
    test(c.name, () => {
      for (const [how, keys] of sets) {
        const check = { job: c.job, token: c.token === undefined ? undefined : BigInt(c.token) };
        if (c.ok) {
          const got = verifyProof(c.proof, keys(), check);
          const want = c.claims!;
          assert.deepEqual(
            got,
            {
              job: want.job,
              token: BigInt(want.token),
              holder: want.holder,
              principal: want.principal,
              issuedAt: want.iat,
              ttlMs: want.ttl_ms,
              kid: want.kid,
            },
            how,
          );
        } else {
          const kinds = Object.values(ProofErrorKind) as string[];
          assert.ok(kinds.includes(c.error!), `an error class this client does not know: ${c.error}`);
          refused(() => verifyProof(c.proof, keys(), check), c.error as ProofErrorKind, how);
        }
      }
    });
  }

  test("every class of refusal is in the vectors", () => {
    const classes = new Set(vectors.cases.filter((c) => !c.ok).map((c) => c.error));
    assert.deepEqual([...classes].sort(), (Object.values(ProofErrorKind) as string[]).sort());
  });
});

describe("verifyProof", () => {
  const good = vectors.signed_by_a.proof;
  const [h, c, s] = good.split(".");

  test("'=' padding and characters outside base64url are malformed", () => {
    for (const [what, proof] of [
      ["padding on the signature", `${h}.${c}.${s}==`],
      ["padding on the claims", `${h}.${c}=.${s}`],
      ["standard base64's '+'", `${h}.${c}.+${s.slice(1)}`],
      ["standard base64's '/'", `${h}.${c.slice(0, 4)}/${c.slice(5)}.${s}`],
      ["a space", `${h}.${c}. ${s}`],
      ["a length no encoding has", `${h}.${c}.${s}AAA`],
      ["four parts", `${good}.${s}`],
    ]) {
      refused(() => verifyProof(proof, vectors.keys), ProofErrorKind.Malformed, what);
    }
    // The signature's last character with other unused bits: the same
    // bytes to a lenient decoder, but not base64url as the server writes it.
    const last = s[s.length - 1];
    const other = last === "A" ? "B" : String.fromCharCode(last.charCodeAt(0) ^ 1);
    refused(() => verifyProof(`${h}.${c}.${s.slice(0, -1)}${other}`, vectors.keys), ProofErrorKind.Malformed, "unused bits");
  });

  test("a header that is no JSON object is malformed", () => {
    for (const header of ["[1]", "null", "{", "\"EdDSA\""]) {
      const proof = `${Buffer.from(header).toString("base64url")}.${c}.${s}`;
      refused(() => verifyProof(proof, vectors.keys), ProofErrorKind.Malformed, header);
    }
  });

  test("a key of another type under the proof's kid is no key of the set", () => {
    const kid = vectors.keys.keys[0].kid;
    const keys = { keys: [{ kty: "RSA", kid, n: "AQAB", e: "AQAB" }, { ...vectors.keys.keys[0], crv: "X25519" }] };
    refused(() => verifyProof(good, keys), ProofErrorKind.UnknownKey, "kty RSA, crv X25519");
    refused(() => verifyProof(good, { keys: [] }), ProofErrorKind.UnknownKey, "an empty set");
  });

  test("the key set: JSON text, object, GetSigningKeysResponse, back to JSON", () => {
    const set = KeySet.parse(JSON.stringify(vectors.keys));
    assert.deepEqual(set.kids, vectors.keys.keys.map((k) => k.kid));
    assert.deepEqual(JSON.parse(JSON.stringify(set)), vectors.keys);
    assert.equal(KeySet.from(set), set);
    // Only the list (no jwks text): the same keys.
    const response: pb.GetSigningKeysResponse = {
      jwks: "",
      keys: vectors.keys.keys.map((k, i) => ({ kid: k.kid!, publicKey: Buffer.from(k.x!, "base64url"), signing: i === 0 }),),
    };
    const fromList = KeySet.fromResponse(response);
    assert.deepEqual(fromList.toJSON(), vectors.keys);
    assert.equal(verifyProof(good, fromList).token, 7n);
    assert.deepEqual(KeySet.fromResponse({ ...response, jwks: JSON.stringify(vectors.keys) }).toJSON(), vectors.keys);
    for (const bad of ["", "[]", "{}", '{"keys":{}}', '{"keys":[1]}', "not json"]) {
      assert.throws(() => KeySet.parse(bad), TypeError, bad);
      assert.throws(() => verifyProof(good, bad), TypeError, bad);
    }
  });
});

/** The JWKS the admin port serves at GET /keys. */
function adminKeys(server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    get(`http://${server.admin}/keys`, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`GET /keys: ${res.statusCode} ${body}`))));
    }).on("error", reject);
  });
}

describe("proofs of a real server's grants", () => {
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

  test("the key set: one signing key, the same on the admin port", async () => {
    const keys = await client.getSigningKeys();
    assert.equal(keys.kids.length, 1, JSON.stringify(keys));
    assert.deepEqual(KeySet.parse(await adminKeys(server)).toJSON(), keys.toJSON());
  });

  test("a grant's proof verifies, renewals keep it, a new grant has a new one", async () => {
    const keys = await client.getSigningKeys();
    const job = uniqueJob("proof");
    const before = Math.floor(Date.now() / 1000);
    const { acquired, lease } = await client.acquire(job, "a", 30_000);
    assert.ok(acquired);
    assert.ok(lease.proof, "an acquired lease carries a proof");
    const claims = verifyProof(lease.proof, keys, { job, token: lease.token });
    assert.deepEqual(
      [claims.job, claims.token, claims.holder, claims.principal, claims.ttlMs, claims.kid],
      [job, lease.token, "a", "", 30_000, keys.kids[0]],
    );
    assert.ok(claims.issuedAt >= before - 5 && claims.issuedAt <= Date.now() / 1000 + 5, String(claims.issuedAt));

    const renewed = await client.renew(job, "a", lease.token, 20_000);
    assert.equal(renewed.proof, lease.proof, "a renewal returns the same proof");
    assert.equal((await client.getLease(job)).proof, lease.proof);

    refused(() => verifyProof(lease.proof!, keys, { job: `${job}-other` }), ProofErrorKind.WrongJob, "another job");
    refused(() => verifyProof(lease.proof!, keys, { token: lease.token + 1n }), ProofErrorKind.WrongToken, "another token");

    await client.release(job, "a", lease.token);
    assert.equal((await client.getLease(job)).proof, undefined, "a free job has no proof");
    const again = await client.acquire(job, "a", 30_000);
    assert.equal(again.lease.token, lease.token + 1n);
    assert.ok(again.lease.proof && again.lease.proof !== lease.proof, "a new grant has a new proof");
    assert.equal(verifyProof(again.lease.proof, keys, { job, token: lease.token + 1n }).token, lease.token + 1n);
    refused(() => verifyProof(again.lease.proof!, keys, { token: lease.token }), ProofErrorKind.WrongToken, "the old token");
  });

  test("a write with the proof instead of the token: written while live, Fenced once passed on", async () => {
    const job = uniqueJob("proof-write");
    const { lease } = await client.acquire(job, "a", 30_000);
    const proof = lease.proof!;
    assert.equal(await client.checkedWrite(job, 0n, "k", "v1", { proof }), 1n);
    const v = await client.read(job, "k");
    assert.deepEqual([v.value.toString(), v.token], ["v1", lease.token]);
    assert.equal(await client.delete(job, 0n, "k", { proof }), 2n);

    await client.release(job, "a", lease.token);
    const b = await client.acquire(job, "b", 30_000);
    await assert.rejects(client.checkedWrite(job, 0n, "k", "stale", { proof }), (e: unknown) => {
      assert.ok(e instanceof Fenced, String(e));
      assert.equal(e.currentToken, b.lease.token);
      return true;
    });
    assert.equal((await client.read(job, "k")).found, false);
  });

  test("a write with an altered proof is InvalidArgument", async () => {
    const job = uniqueJob("proof-forged");
    const { lease } = await client.acquire(job, "a", 30_000);
    for (const proof of [flip(lease.proof!, 1), flip(lease.proof!, 2), "not.a.proof"]) {
      await assert.rejects(client.checkedWrite(job, 0n, "k", "forged", { proof }), (e: unknown) => {
        assert.ok(e instanceof InvalidArgument, String(e));
        assert.equal(e.field, "proof");
        return true;
      });
    }
    assert.equal((await client.read(job, "k")).found, false);
  });

  test("the Elector exposes its grant's proof", async () => {
    const job = uniqueJob("proof-elector");
    const keys = await client.getSigningKeys();
    const e = new Elector(client, job, "p", 30_000);
    const elected = new Promise<[bigint, string | undefined]>((resolve) =>
      e.once("elected", (token, proof) => resolve([token, proof])),
    );
    assert.equal(e.proof, undefined);
    e.start();
    try {
      const [token, proof] = await elected;
      assert.equal(e.token, token);
      assert.ok(proof);
      assert.equal(e.proof, proof);
      const claims = verifyProof(proof, keys, { job, token });
      assert.equal(claims.holder, e.holder);
      assert.equal((await client.getLease(job)).proof, proof);
      assert.equal(await client.checkedWrite(job, 0n, "k", "v", { proof: e.proof }), 1n);
    } finally {
      await e.resign();
    }
    assert.equal(e.proof, undefined);
  });
});
