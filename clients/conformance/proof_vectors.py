#!/usr/bin/env python3
"""Writes proof-vectors.json: a key set and proofs, good and bad, with the
verdict every client's verify helper must reach (docs/proofs.md).

The keys come from fixed seeds, and Ed25519 signatures are deterministic,
so the file is the same on every run: `--check` fails if it is not.
The Rust server's signer is tested against the same file, byte for byte.

Needs the `cryptography` package (clients/tools/requirements.txt).
"""

import base64
import hashlib
import json
import pathlib
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives import serialization

OUT = pathlib.Path(__file__).with_name("proof-vectors.json")


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def key(seed_byte: int):
    sk = Ed25519PrivateKey.from_private_bytes(bytes([seed_byte]) * 32)
    x = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    thumb = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": b64(x)}, separators=(",", ":"))
    kid = b64(hashlib.sha256(thumb.encode()).digest())
    jwk = {"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": kid, "x": b64(x)}
    pem = sk.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return sk, kid, jwk, pem


def header(kid, alg="EdDSA", typ="leasehold-proof+jwt"):
    return json.dumps({"alg": alg, "kid": kid, "typ": typ}, separators=(",", ":"), ensure_ascii=False)


def claims(job, token, principal, holder, iat, ttl_ms, iss="leasehold"):
    return json.dumps(
        {"iss": iss, "job": job, "token": token, "principal": principal, "holder": holder, "iat": iat, "ttl_ms": ttl_ms},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def sign(sk, h: str, c: str) -> str:
    signing_input = b64(h.encode()) + "." + b64(c.encode())
    return signing_input + "." + b64(sk.sign(signing_input.encode()))


def flip(proof: str, part: int) -> str:
    """The proof with one character of `part` changed to another valid one."""
    parts = proof.split(".")
    p = parts[part]
    i = len(p) // 2
    parts[part] = p[:i] + ("A" if p[i] != "A" else "B") + p[i + 1 :]
    return ".".join(parts)


ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def noncanonical(proof: str) -> str:
    """The proof with the signature's last character changed in its unused
    bits only: decoders that ignore them read the same bytes."""
    parts = proof.split(".")
    s = parts[2]
    assert len(s) % 4 == 2  # 64 bytes: 86 characters, the last holding 2 bits
    v = ALPHABET.index(s[-1])
    parts[2] = s[:-1] + ALPHABET[v | 1]
    assert base64.urlsafe_b64decode(parts[2] + "==") == base64.urlsafe_b64decode(s + "==")
    return ".".join(parts)


def main():
    a_sk, a_kid, a_jwk, a_pem = key(1)
    b_sk, b_kid, b_jwk, b_pem = key(2)
    c_sk, c_kid, c_jwk, _ = key(3)
    keys = {"keys": [a_jwk, b_jwk]}
    std = claims("bridge_health", "7", "ops", "worker-a@5f0c", 1764892800, 10000)
    good = sign(a_sk, header(a_kid), std)
    expect_std = {
        "job": "bridge_health",
        "token": "7",
        "principal": "ops",
        "holder": "worker-a@5f0c",
        "iat": 1764892800,
        "ttl_ms": 10000,
        "kid": a_kid,
    }
    odd = claims('jobs/"quoted"\\ünï', "18446744073709551615", "", "h\u00e9@1", 1764892801, 250)
    cases = [
        {"name": "good", "proof": good, "ok": True, "claims": expect_std},
        {"name": "good, checked against its job and token", "proof": good, "job": "bridge_health", "token": "7",
         "ok": True, "claims": expect_std},
        {"name": "good, by the second key of the set", "proof": sign(b_sk, header(b_kid), std), "ok": True,
         "claims": dict(expect_std, kid=b_kid)},
        {"name": "good, escapes and the largest token", "proof": sign(a_sk, header(a_kid), odd), "ok": True,
         "claims": {"job": 'jobs/"quoted"\\ünï', "token": "18446744073709551615", "principal": "",
                    "holder": "h\u00e9@1", "iat": 1764892801, "ttl_ms": 250, "kid": a_kid}},
        {"name": "another job", "proof": good, "job": "other_job", "ok": False, "error": "wrong job"},
        {"name": "a token that does not match the claim", "proof": good, "token": "8", "ok": False,
         "error": "wrong token"},
        {"name": "an altered claims byte", "proof": flip(good, 1), "ok": False, "error": "bad signature"},
        {"name": "an altered signature byte", "proof": flip(good, 2), "ok": False, "error": "bad signature"},
        {"name": "signed by another key under a listed key id (wrong key)",
         "proof": sign(b_sk, header(a_kid), std), "ok": False, "error": "bad signature"},
        {"name": "a key id the set does not list (an expired key)", "proof": sign(c_sk, header(c_kid), std),
         "ok": False, "error": "unknown key"},
        {"name": "forged: token 2^63 with no valid signature",
         "proof": b64(header(a_kid).encode()) + "." + b64(claims("bridge_health", "9223372036854775808", "ops",
                  "mallory", 1764892800, 10000).encode()) + "." + good.split(".")[2],
         "ok": False, "error": "bad signature"},
        {"name": "alg none", "proof": b64(header(a_kid, alg="none").encode()) + "." + b64(std.encode()) + ".",
         "ok": False, "error": "unsupported"},
        {"name": "alg HS256", "proof": sign(a_sk, header(a_kid, alg="HS256"), std), "ok": False,
         "error": "unsupported"},
        {"name": "another typ", "proof": sign(a_sk, header(a_kid, typ="JWT"), std), "ok": False,
         "error": "unsupported"},
        {"name": "two parts", "proof": ".".join(good.split(".")[:2]), "ok": False, "error": "malformed"},
        {"name": "padding in a part", "proof": good.split(".")[0] + "=." + ".".join(good.split(".")[1:]),
         "ok": False, "error": "malformed"},
        {"name": "empty", "proof": "", "ok": False, "error": "malformed"},
        {"name": "a token that is not a number", "proof": sign(a_sk, header(a_kid),
         claims("bridge_health", "7x", "ops", "worker-a@5f0c", 1764892800, 10000)), "ok": False, "error": "malformed"},
        {"name": "token 0", "proof": sign(a_sk, header(a_kid),
         claims("bridge_health", "0", "ops", "worker-a@5f0c", 1764892800, 10000)), "ok": False, "error": "malformed"},
        {"name": "a token with a leading zero", "proof": sign(a_sk, header(a_kid),
         claims("bridge_health", "07", "ops", "worker-a@5f0c", 1764892800, 10000)), "ok": False, "error": "malformed"},
        {"name": "a signature whose last character has non-zero unused bits", "proof": noncanonical(good),
         "ok": False, "error": "malformed"},
        {"name": "a token above u64", "proof": sign(a_sk, header(a_kid),
         claims("bridge_health", "18446744073709551616", "ops", "w", 1764892800, 10000)), "ok": False,
         "error": "malformed"},
        {"name": "another issuer", "proof": sign(a_sk, header(a_kid),
         claims("bridge_health", "7", "ops", "worker-a@5f0c", 1764892800, 10000, iss="other")), "ok": False,
         "error": "malformed"},
    ]
    doc = {
        "about": "Written by proof_vectors.py; see docs/proofs.md. 'error' is the class of refusal: "
                 "malformed, unsupported, unknown key, bad signature, wrong job, wrong token.",
        "keys": keys,
        "signing_keys_pem": {"a": a_pem, "b": b_pem},
        "signed_by_a": {"claims": json.loads(std), "proof": good},
        "cases": cases,
    }
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    if "--check" in sys.argv:
        if OUT.read_text() != text:
            sys.exit(f"{OUT.name} is stale: run {pathlib.Path(__file__).name}")
        return
    OUT.write_text(text)


if __name__ == "__main__":
    main()
