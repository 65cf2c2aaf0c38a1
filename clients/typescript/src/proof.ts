/**
 * Signed grants: verifying a grant's proof (`Lease.proof`) with the
 * server's public keys (`Client.getSigningKeys`, or `GET /keys` on the
 * admin port), on Node's built-in `crypto` alone. The format and the
 * order of the refusals: docs/proofs.md.
 *
 * A proof is a JWS in compact serialization signed with EdDSA over
 * Ed25519: it proves that the server *issued* token T of job J to holder
 * H. It does not prove that the lease is still live: a paused leader
 * keeps a valid proof after its lease has passed on. Storage that
 * leasehold does not own verifies the proof, then compares tokens.
 *
 * ```ts
 * const keys = await client.getSigningKeys(); // cache it; fetch again on an unknown key
 * const claims = verifyProof(lease.proof!, keys, { job: "bridge_health", token: lease.token });
 * // claims.token was issued for the job: fence on it ("token >= the stored one")
 * ```
 */
import { createPublicKey, type KeyObject, verify } from "node:crypto";
import { TextDecoder } from "node:util";
import type * as pb from "./gen/leasehold/v1/leasehold";

/** The class of a proof's refusal, in the order the checks are made (docs/proofs.md). */
export enum ProofErrorKind {
  /** Not three base64url parts, a header or claims that are not what the format says, a bad token or issuer. */
  Malformed = "malformed",
  /** An `alg` other than `EdDSA`, or a `typ` other than `leasehold-proof+jwt`. */
  Unsupported = "unsupported",
  /** The `kid` names no Ed25519 key of the set (a key rotated out, or another server's). */
  UnknownKey = "unknown key",
  /** The signature does not verify with the key the `kid` names. */
  BadSignature = "bad signature",
  /** A good proof, of another job than the one expected. */
  WrongJob = "wrong job",
  /** A good proof, of another token than the one expected. */
  WrongToken = "wrong token",
}

/**
 * `verifyProof` refused a proof; `kind` says why. A plain `Error`, not a
 * `LeaseholdError`: no call was made.
 */
export class ProofError extends Error {
  constructor(
    /** Why the proof was refused. */
    readonly kind: ProofErrorKind,
    message: string,
  ) {
    super(`proof refused (${kind}): ${message}`);
    this.name = "ProofError";
  }
}

/** What a verified proof states. */
export interface ProofClaims {
  /** The job the token was issued for. */
  job: string;
  /** The fencing token issued (a u64, above 0). */
  token: bigint;
  /** The holder it was issued to, as its client named it. */
  holder: string;
  /** The principal of the server's policy the grant is bound to; "" on a server without a policy. */
  principal: string;
  /** When the token was granted, the server's wall clock: seconds since the Unix epoch (`iat`). */
  issuedAt: number;
  /** The TTL the token was granted with, ms (`ttl_ms`). */
  ttlMs: number;
  /** The id of the key that signed the proof. */
  kid: string;
}

/** One key of a JWKS (RFC 7517), as leasehold serves it: `kty` "OKP", `crv` "Ed25519", `x` the public key. */
export interface Jwk {
  kty: string;
  crv?: string;
  alg?: string;
  use?: string;
  kid?: string;
  /** The public key, base64url without padding. */
  x?: string;
  [other: string]: unknown;
}

/** A JWKS (RFC 7517): `{"keys":[...]}`, as `GET /keys` and `GetSigningKeysResponse.jwks` carry it. */
export interface Jwks {
  keys: Jwk[];
}

/** Options of `verifyProof`: what the caller expects the proof to state. */
export interface ProofCheck {
  /** The job the proof must be of (else `WrongJob`); undefined: any. */
  job?: string;
  /** The token the proof must be of (else `WrongToken`); undefined: any. */
  token?: bigint;
}

const TYP = "leasehold-proof+jwt";
const MAX_U64 = (1n << 64n) - 1n;
const BASE64URL = /^[A-Za-z0-9_-]*$/;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The server's public keys: parsed from a JWKS (`KeySet.parse`, the JSON
 * text or the parsed object) or from the answer of `GetSigningKeys`
 * (`KeySet.fromResponse`; `Client.getSigningKeys` returns one). The first
 * key signs new grants; every one verifies. `JSON.stringify(keySet)`
 * gives the JWKS back.
 */
export class KeySet {
  /** Ed25519 keys by kid, made on first use; null for a key that is not one. */
  private readonly byKid = new Map<string, KeyObject | null>();

  private constructor(
    /** The keys, as the JWKS lists them (the signing one first). */
    readonly keys: readonly Jwk[],
  ) {}

  /** A key set from a JWKS: its JSON text, or the parsed object. Throws a TypeError if it is not a JWKS. */
  static parse(jwks: string | Jwks): KeySet {
    let doc: unknown = jwks;
    if (typeof jwks === "string") {
      try {
        doc = JSON.parse(jwks);
      } catch (e) {
        throw new TypeError(`the key set is not JSON: ${(e as Error).message}`);
      }
    }
    if (!isObject(doc) || !Array.isArray(doc.keys) || !doc.keys.every(isObject)) {
      throw new TypeError('the key set is not a JWKS: {"keys":[{...}, ...]}');
    }
    return new KeySet((doc.keys as Jwk[]).map((k) => ({ ...k })));
  }

  /** The key set of a `GetSigningKeys` answer: its `jwks`, or when that is empty its `keys` list. */
  static fromResponse(r: pb.GetSigningKeysResponse): KeySet {
    if (r.jwks) return KeySet.parse(r.jwks);
    return new KeySet(
      r.keys.map((k) => ({
        kty: "OKP",
        crv: "Ed25519",
        alg: "EdDSA",
        use: "sig",
        kid: k.kid,
        x: Buffer.from(k.publicKey).toString("base64url"),
      })),
    );
  }

  /** `keys` itself (for `KeySet.parse`), or a key set parsed from it. */
  static from(keys: KeySet | Jwks | string): KeySet {
    return keys instanceof KeySet ? keys : KeySet.parse(keys);
  }

  /** The kids of the set's Ed25519 keys, the signing one first. */
  get kids(): string[] {
    return this.keys.filter((k) => this.key(k.kid) !== undefined).map((k) => k.kid as string);
  }

  /** The Ed25519 key (`kty` "OKP", `crv` "Ed25519", a 32-byte `x`) whose kid is `kid`, if the set lists one. */
  key(kid: unknown): KeyObject | undefined {
    if (typeof kid !== "string") return undefined;
    let found = this.byKid.get(kid);
    if (found === undefined) {
      found = null;
      for (const k of this.keys) {
        if (k.kid !== kid || k.kty !== "OKP" || k.crv !== "Ed25519") continue;
        const raw = typeof k.x === "string" ? strictBase64url(k.x) : undefined;
        if (raw === undefined || raw.length !== 32) continue;
        try {
          found = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: k.x as string }, format: "jwk" });
          break;
        } catch {
          // not a key Node can use: as if not listed
        }
      }
      this.byKid.set(kid, found);
    }
    return found ?? undefined;
  }

  /** The JWKS: `{"keys":[...]}`. */
  toJSON(): Jwks {
    return { keys: this.keys.map((k) => ({ ...k })) };
  }
}

/**
 * Verifies a grant's proof with the server's keys and returns what it
 * states; throws a `ProofError` whose `kind` says why it is refused, in
 * this order (docs/proofs.md):
 *
 * 1. not three base64url parts (no padding), or a header that is not a
 *    JSON object: `Malformed`;
 * 2. an `alg` other than `EdDSA` or a `typ` other than
 *    `leasehold-proof+jwt`: `Unsupported`;
 * 3. a `kid` that names no Ed25519 key of `keys`: `UnknownKey`;
 * 4. a signature that does not verify with that key: `BadSignature`;
 * 5. claims that are not a JSON object of the format's types, an `iss`
 *    other than `leasehold`, a token that is not a decimal u64 above 0:
 *    `Malformed`;
 * 6. with `check.job`, another job: `WrongJob`; with `check.token`,
 *    another token: `WrongToken`.
 *
 * `keys` is a `KeySet`, or a JWKS as its JSON text or parsed object
 * (a TypeError if it is not one). A verified proof says the token was
 * issued, not that the lease is still live.
 */
export function verifyProof(proof: string, keys: KeySet | Jwks | string, check: ProofCheck = {}): ProofClaims {
  const set = KeySet.from(keys);
  if (typeof proof !== "string") throw new ProofError(ProofErrorKind.Malformed, "not a string");
  const parts = proof.split(".");
  if (parts.length !== 3) {
    throw new ProofError(ProofErrorKind.Malformed, `${parts.length} part(s), not three joined by dots`);
  }
  const names = ["header", "claims", "signature"];
  const bytes = parts.map((p, i) => {
    if (p.includes("=")) throw new ProofError(ProofErrorKind.Malformed, `the ${names[i]} has '=' padding`);
    if (!BASE64URL.test(p)) throw new ProofError(ProofErrorKind.Malformed, `the ${names[i]} is not base64url`);
    const b = strictBase64url(p);
    if (b === undefined) throw new ProofError(ProofErrorKind.Malformed, `the ${names[i]} is not canonical base64url`);
    return b;
  });
  const header = jsonObject(bytes[0]);
  if (header === undefined) throw new ProofError(ProofErrorKind.Malformed, "the header is not a JSON object");

  if (header.alg !== "EdDSA") {
    throw new ProofError(ProofErrorKind.Unsupported, `alg ${JSON.stringify(header.alg)}, not "EdDSA"`);
  }
  if (header.typ !== TYP) {
    throw new ProofError(ProofErrorKind.Unsupported, `typ ${JSON.stringify(header.typ)}, not "${TYP}"`);
  }

  const key = set.key(header.kid);
  if (key === undefined) {
    throw new ProofError(ProofErrorKind.UnknownKey, `kid ${JSON.stringify(header.kid)} names no Ed25519 key of the set`);
  }

  let good = false;
  try {
    good = verify(null, Buffer.from(`${parts[0]}.${parts[1]}`, "ascii"), key, bytes[2]);
  } catch {
    good = false;
  }
  if (!good) throw new ProofError(ProofErrorKind.BadSignature, `the signature does not verify with key ${header.kid}`);

  const c = jsonObject(bytes[1]);
  if (c === undefined) throw new ProofError(ProofErrorKind.Malformed, "the claims are not a JSON object");
  for (const name of ["iss", "job", "token", "principal", "holder"]) {
    if (typeof c[name] !== "string") throw new ProofError(ProofErrorKind.Malformed, `the claim ${name} is not a string`);
  }
  for (const name of ["iat", "ttl_ms"]) {
    const v = c[name];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
      throw new ProofError(ProofErrorKind.Malformed, `the claim ${name} is not a non-negative integer`);
    }
  }
  if (c.iss !== "leasehold") throw new ProofError(ProofErrorKind.Malformed, `iss ${JSON.stringify(c.iss)}, not "leasehold"`);
  const raw = c.token as string;
  const token = /^[1-9][0-9]*$/.test(raw) ? BigInt(raw) : -1n;
  if (token < 1n || token > MAX_U64) {
    throw new ProofError(ProofErrorKind.Malformed, `token ${JSON.stringify(raw)} is not a decimal u64 above 0 without leading zeros`);
  }
  const claims: ProofClaims = {
    job: c.job as string,
    token,
    holder: c.holder as string,
    principal: c.principal as string,
    issuedAt: c.iat as number,
    ttlMs: c.ttl_ms as number,
    kid: header.kid as string,
  };

  if (check.job !== undefined && claims.job !== check.job) {
    throw new ProofError(
      ProofErrorKind.WrongJob,
      `a proof of job ${JSON.stringify(claims.job)}, not ${JSON.stringify(check.job)}`,
    );
  }
  if (check.token !== undefined && claims.token !== check.token) {
    throw new ProofError(ProofErrorKind.WrongToken, `a proof of token ${claims.token}, not ${check.token}`);
  }
  return claims;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * The bytes of `s`, base64url without padding, or undefined when it is
 * not exactly that: other characters, a length no encoding has, or unused
 * bits that are not zero (Node's decoder skips what it does not know).
 */
function strictBase64url(s: string): Buffer | undefined {
  if (!BASE64URL.test(s) || s.length % 4 === 1) return undefined;
  const b = Buffer.from(s, "base64url");
  return b.toString("base64url") === s ? b : undefined;
}

/** The JSON object that `bytes` (UTF-8) hold, or undefined. */
function jsonObject(bytes: Buffer): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(utf8.decode(bytes));
    return isObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}
