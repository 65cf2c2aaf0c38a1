"""Grants' proofs (docs/proofs.md): ``leasehold.proof.verify`` on every
case of clients/conformance/proof-vectors.json and on what the vectors do
not cover (strict base64url, the key set's forms, the optional
``cryptography``); then against the real server: an acquired lease's proof
verifies under ``signing_keys()`` with its job and token, a renewal keeps
it, a new grant has a new one, a checked write may carry it instead of the
token (and is fenced once the lease passed on; an altered one is
INVALID_ARGUMENT), and the electors and locks expose it."""

import asyncio
import base64
import json
import sys
import urllib.request
from pathlib import Path

import pytest

import leasehold
from leasehold import proof
from leasehold._wire import write_request
from leasehold.aio import AsyncClient, AsyncElector
from leasehold.v1 import leasehold_pb2 as pb

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "conformance" / "proof-vectors.json").read_text(encoding="utf-8")
)
KEYS = VECTORS["keys"]
GOOD = VECTORS["signed_by_a"]["proof"]
TTL = 30.0
PATIENCE = 30.0


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def altered(p: str, part: int = 1) -> str:
    """``p`` with one character of ``part`` changed to another base64url
    one (as proof_vectors.py's flip)."""
    parts = p.split(".")
    s = parts[part]
    i = len(s) // 2
    parts[part] = s[:i] + ("A" if s[i] != "A" else "B") + s[i + 1 :]
    return ".".join(parts)


# The vectors (no server)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_proof_vectors(case):
    token = int(case["token"]) if "token" in case else None
    if case["ok"]:
        c = proof.verify(case["proof"], KEYS, job=case.get("job"), token=token)
        want = case["claims"]
        assert c == leasehold.ProofClaims(
            job=want["job"],
            token=int(want["token"]),
            holder=want["holder"],
            principal=want["principal"],
            issued_at=want["iat"],
            ttl_ms=want["ttl_ms"],
            kid=want["kid"],
        )
        assert isinstance(c.token, int) and c.ttl == want["ttl_ms"] / 1000
    else:
        with pytest.raises(leasehold.ProofError) as e:
            proof.verify(case["proof"], KEYS, job=case.get("job"), token=token)
        assert e.value.kind.value == case["error"], str(e.value)
        assert e.value.kind is leasehold.ProofErrorKind(case["error"])


def test_the_vectors_cover_every_kind_of_refusal():
    assert {c["error"] for c in VECTORS["cases"] if not c["ok"]} == {k.value for k in leasehold.ProofErrorKind}


# verify, beyond the vectors (no server)


def test_the_key_set_is_taken_as_an_object_a_json_string_bytes_or_a_key_set():
    text = json.dumps(KEYS)
    for keys in (KEYS, text, text.encode(), leasehold.KeySet.parse(KEYS)):
        assert proof.verify(GOOD, keys).token == 7
    ks = leasehold.KeySet(text)
    assert leasehold.KeySet.parse(ks) is ks and leasehold.KeySet.parse(KEYS) == ks
    assert repr(ks) == f"KeySet(kids={ks.kids!r})"
    assert ks.kids == [k["kid"] for k in KEYS["keys"]] and ks.signing_kid == KEYS["keys"][0]["kid"]
    assert len(ks) == 2 and KEYS["keys"][1]["kid"] in ks and "nope" not in ks
    assert ks.public_key(ks.signing_kid) == base64.urlsafe_b64decode(KEYS["keys"][0]["x"] + "=")
    assert json.loads(ks.to_json()) == KEYS


def test_a_key_set_from_get_signing_keys_response():
    ks = leasehold.KeySet.from_pb(pb.GetSigningKeysResponse(jwks=json.dumps(KEYS)))
    assert ks.kids == [k["kid"] for k in KEYS["keys"]]
    assert proof.verify(GOOD, ks, job="bridge_health", token=7).holder == "worker-a@5f0c"
    empty = leasehold.KeySet.from_pb(pb.GetSigningKeysResponse())
    assert len(empty) == 0 and empty.signing_kid is None
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(GOOD, empty)
    assert e.value.kind is leasehold.ProofErrorKind.UNKNOWN_KEY


def test_keys_of_other_types_are_ignored_and_a_broken_key_set_is_a_value_error():
    rsa = {"kty": "RSA", "kid": KEYS["keys"][0]["kid"], "n": "AQAB", "e": "AQAB"}
    x25519 = {"kty": "OKP", "crv": "X25519", "kid": "x", "x": KEYS["keys"][0]["x"]}
    assert proof.verify(GOOD, {"keys": [rsa, x25519, *KEYS["keys"]]}).token == 7
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(GOOD, {"keys": [rsa, x25519]})
    assert e.value.kind is leasehold.ProofErrorKind.UNKNOWN_KEY, "an RSA key under the kid is no Ed25519 key"
    key = KEYS["keys"][0]
    for broken in ("not json", "[]", {"keys": {}}, {"nokeys": []},
                   {"keys": [dict(key, x=key["x"][:-2])]},          # 31 bytes
                   {"keys": [dict(key, x=key["x"] + "=")]},         # padded
                   {"keys": [{k: v for k, v in key.items() if k != "kid"}]}):
        with pytest.raises(ValueError):
            proof.verify(GOOD, broken)


def test_padding_and_characters_outside_base64url_are_malformed():
    h, c, s = GOOD.split(".")
    for bad in (
        f"{h}.{c}.{s}=",                       # padding on the signature
        f"{h}.{c}==.{s}",                      # and on the claims
        f"{h}.{c.replace('-', '+')}.{s}" if "-" in c else f"{h}.+{c[1:]}.{s}",  # standard base64
        f"{h}.{c}.{s[:10]}/{s[11:]}",
        f"{h}.{c} .{s}",                       # whitespace
        f" {GOOD}",
        f"{h}.{c}.{s}\n",
        f"{h}.{c}.{s}.",                       # four parts
        f"{h}.{c}.{s[:-1]}",                   # an impossible length (4n + 1)
        f"{h}.{c}.{s[:-1]}x",                  # unused bits that are not zero: not the canonical encoding
        "..",
        GOOD.encode("utf-8") + b"\xff",
    ):
        with pytest.raises(leasehold.ProofError) as e:
            proof.verify(bad, KEYS)
        assert e.value.kind is leasehold.ProofErrorKind.MALFORMED, (bad, str(e.value))
    assert proof.verify(GOOD.encode("ascii"), KEYS).token == 7, "bytes are taken too"


def test_the_refusal_order():
    h, c, s = GOOD.split(".")
    header = json.loads(base64.urlsafe_b64decode(h + "=" * (-len(h) % 4)))
    claims_not_json = b64(b"not json")
    # 1 before 2: a header that is no JSON object is malformed, whatever else.
    for not_object in (b"[]", b'"EdDSA"', b"{", b"\xff"):
        with pytest.raises(leasehold.ProofError) as e:
            proof.verify(f"{b64(not_object)}.{c}.{s}", KEYS)
        assert e.value.kind is leasehold.ProofErrorKind.MALFORMED
    # 2 before 3: an unsupported alg under an unknown kid is unsupported.
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(b64(json.dumps(dict(header, alg="ES256", kid="nope")).encode()) + f".{c}.{s}", KEYS)
    assert e.value.kind is leasehold.ProofErrorKind.UNSUPPORTED
    for missing in ("alg", "typ"):
        hdr = {k: v for k, v in header.items() if k != missing}
        with pytest.raises(leasehold.ProofError) as e:
            proof.verify(b64(json.dumps(hdr).encode()) + f".{c}.{s}", KEYS)
        assert e.value.kind is leasehold.ProofErrorKind.UNSUPPORTED
    # 3 before 4: no kid, or one not a string, names no key.
    for kid in (None, 7):
        hdr = dict(header, kid=kid) if kid is not None else {k: v for k, v in header.items() if k != "kid"}
        with pytest.raises(leasehold.ProofError) as e:
            proof.verify(b64(json.dumps(hdr).encode()) + f".{c}.{s}", KEYS)
        assert e.value.kind is leasehold.ProofErrorKind.UNKNOWN_KEY
    # 4 before 5: claims that are no JSON, unsigned, are a bad signature.
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(f"{h}.{claims_not_json}.{s}", KEYS)
    assert e.value.kind is leasehold.ProofErrorKind.BAD_SIGNATURE
    # 5 before 6: checked against another job, another issuer is malformed.
    other_iss = next(x for x in VECTORS["cases"] if x["name"] == "another issuer")["proof"]
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(other_iss, KEYS, job="other_job", token=8)
    assert e.value.kind is leasehold.ProofErrorKind.MALFORMED
    # 6: the job first, then the token.
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(GOOD, KEYS, job="other_job", token=8)
    assert e.value.kind is leasehold.ProofErrorKind.WRONG_JOB


def _signed_by_a(claims: dict) -> str:
    """A proof of ``claims`` signed by the vectors' key a."""
    from cryptography.hazmat.primitives import serialization

    sk = serialization.load_pem_private_key(VECTORS["signing_keys_pem"]["a"].encode(), None)
    header = {"alg": "EdDSA", "kid": KEYS["keys"][0]["kid"], "typ": "leasehold-proof+jwt"}
    signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    return signing_input + "." + b64(sk.sign(signing_input.encode()))


def test_claims_of_the_wrong_types_are_malformed_and_unknown_claims_are_ignored():
    base = VECTORS["signed_by_a"]["claims"]
    assert proof.verify(_signed_by_a(dict(base, exp=1, extra={"a": 1})), KEYS).token == 7
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(_signed_by_a(dict(base, token="0007")), KEYS)
    assert e.value.kind is leasehold.ProofErrorKind.MALFORMED  # the server writes no leading zero
    for bad in (
        dict(base, token=7),                    # a number, not a string
        dict(base, token="-7"),
        dict(base, token="+7"),
        dict(base, token=" 7"),
        dict(base, token="7_0"),
        dict(base, token="\u0667"),             # a digit, but not an ASCII one
        dict(base, token="1" * 5000),           # longer than Python's int() takes
        dict(base, iat="1764892800"),
        dict(base, iat=1764892800.0),
        dict(base, iat=True),
        dict(base, ttl_ms=-1),
        dict(base, holder=None),
        {k: v for k, v in base.items() if k != "principal"},
        {k: v for k, v in base.items() if k != "iss"},
    ):
        with pytest.raises(leasehold.ProofError) as e:
            proof.verify(_signed_by_a(bad), KEYS)
        assert e.value.kind is leasehold.ProofErrorKind.MALFORMED, bad
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(_signed_by_a(["not", "an", "object"]), KEYS)  # type: ignore[arg-type]
    assert e.value.kind is leasehold.ProofErrorKind.MALFORMED


def test_proof_error_is_a_typed_leasehold_error_and_a_value_error():
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(altered(GOOD), KEYS)
    err = e.value
    assert isinstance(err, leasehold.LeaseholdError) and isinstance(err, ValueError)
    assert err.kind is leasehold.ProofErrorKind.BAD_SIGNATURE and not err.retryable
    assert str(err).startswith("proof refused (bad signature): ")


def test_without_cryptography_verify_says_which_extra_to_install(monkeypatch):
    monkeypatch.setattr(proof, "_crypto", None)
    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cryptography", None)  # import cryptography raises ImportError
    with pytest.raises(ImportError, match=r"leasehold\[proof\]"):
        proof.verify(GOOD, KEYS)
    # The key set and the rest of the client need no cryptography.
    assert len(leasehold.KeySet.parse(KEYS)) == 2


def test_a_write_request_carries_a_proof_instead_of_a_token():
    r = write_request("j", None, b"k", b"v", False, "p.r.f")
    assert (r.token, r.proof) == (0, "p.r.f")
    r = write_request("j", 3, b"k", b"v", False, "p.r.f")
    assert (r.token, r.proof) == (3, "p.r.f")
    assert write_request("j", 3, b"k", b"v", False).proof == ""
    with pytest.raises(ValueError):
        write_request("j", None, b"k", b"v", False)


def test_electors_and_locks_have_no_proof_before_leading():
    assert leasehold.Elector(None, "j", "n", 1.0).proof is None
    assert AsyncElector(None, "j", "n", 1.0).proof is None
    assert leasehold.Lock(None, "j", 1.0).proof is None


# Against the real server (blocking and asyncio, through `connect`)


def test_a_grant_carries_a_proof_that_verifies_under_the_servers_keys(server, connect, job):
    c = connect(server.target)
    keys = c.signing_keys()
    assert isinstance(keys, leasehold.KeySet) and len(keys) >= 1
    # The same JWKS as GET /keys on the admin port.
    with urllib.request.urlopen(f"http://{server.admin}/keys", timeout=10) as r:
        assert leasehold.KeySet.parse(r.read()).kids == keys.kids

    holder = f"a@{job}"
    lease = c.acquire(job, holder, ttl=TTL).lease
    assert lease.proof, "a grant carries a proof"
    claims = proof.verify(lease.proof, keys, job=job, token=lease.token)
    assert (claims.job, claims.token, claims.holder) == (job, lease.token, holder)
    assert claims.kid == keys.signing_kid and claims.ttl == pytest.approx(TTL)
    assert claims.principal == "", "no policy"
    assert c.get_lease(job).proof == lease.proof, "every answer about the grant carries it"

    # A renewal keeps the proof, byte for byte.
    assert c.renew(job, holder, lease.token, ttl=TTL).proof == lease.proof
    assert c.acquire(job, holder, ttl=TTL).lease.proof == lease.proof, "acquire by the live holder"

    # Refused for another job, or another token.
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(lease.proof, keys, job=job + "-other")
    assert e.value.kind is leasehold.ProofErrorKind.WRONG_JOB
    with pytest.raises(leasehold.ProofError) as e:
        proof.verify(lease.proof, keys, job=job, token=lease.token + 1)
    assert e.value.kind is leasehold.ProofErrorKind.WRONG_TOKEN

    # A new grant: a new proof, for token + 1.
    c.release(job, holder, lease.token)
    assert c.get_lease(job).proof is None, "a free job has no proof"
    b = f"b@{job}"
    nxt = c.acquire(job, b, ttl=TTL).lease
    assert nxt.token == lease.token + 1 and nxt.proof and nxt.proof != lease.proof
    claims = proof.verify(nxt.proof, keys, job=job, token=nxt.token)
    assert (claims.holder, claims.token) == (b, lease.token + 1)
    assert proof.verify(lease.proof, keys).token == lease.token, "the old proof still verifies: issued, not live"
    c.release(job, b, nxt.token)


def test_a_checked_write_may_carry_the_proof_instead_of_the_token(server, connect, job):
    c = connect(server.target)
    a = c.acquire(job, "a", ttl=TTL).lease
    assert c.checked_write(job, None, b"k", b"by proof", proof=a.proof) == 1
    assert c.checked_write(job, 0, b"k", b"token 0", proof=a.proof) == 2
    assert c.checked_write(job, a.token, b"k", b"both", proof=a.proof) == 3
    v = c.read(job, b"k")
    assert (v.value, v.token, v.version) == (b"both", a.token, 3)
    assert c.delete(job, None, b"gone", proof=a.proof) >= 1

    # An altered proof is refused before anything else.
    for bad in (altered(a.proof, 1), altered(a.proof, 2), "not.a.proof"):
        with pytest.raises(leasehold.InvalidArgument) as e:
            c.checked_write(job, None, b"k", b"forged", proof=bad)
        assert e.value.field == "proof", str(e.value)
    other = c.acquire(job + "-other", "o", ttl=TTL).lease
    with pytest.raises(leasehold.InvalidArgument) as e:
        c.checked_write(job + "-other", None, b"k", b"wrong job", proof=a.proof)
    assert e.value.field == "proof", "a proof for another job"
    with pytest.raises(leasehold.InvalidArgument) as e:
        c.checked_write(job, a.token + 1, b"k", b"two tokens", proof=a.proof)
    assert e.value.field == "token", "a token that is not the proof's"
    c.release(job + "-other", "o", other.token)
    assert c.read(job, b"k").value == b"both"

    # The lease passes to another holder: the old proof is fenced.
    c.release(job, "a", a.token)
    b = c.acquire(job, "b", ttl=TTL).lease
    with pytest.raises(leasehold.Fenced) as e:
        c.checked_write(job, None, b"k", b"stale", proof=a.proof)
    assert e.value.current_token == b.token
    assert c.checked_write(job, None, b"k", b"new", proof=b.proof) == 4
    assert c.read(job, b"k").value == b"new"
    c.release(job, "b", b.token)


def test_the_elector_exposes_its_grants_proof(server, client, job):
    keys = client.signing_keys()
    with leasehold.Elector(client, job, "e", ttl=TTL) as e:
        token = e.wait_elected(PATIENCE)
        p = e.proof
        claims = proof.verify(p, keys, job=job, token=token)
        assert claims.holder == e.holder
        assert client.get_lease(job).proof == p
        assert client.checked_write(job, None, b"k", b"v", proof=p) == 1
    assert e.proof is None, "not leading any more"


def test_the_async_elector_exposes_its_grants_proof(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            keys = await c.signing_keys()
            async with AsyncElector(c, job, "e", ttl=TTL) as e:
                token = await e.wait_elected(PATIENCE)
                claims = proof.verify(e.proof, keys, job=job, token=token)
                assert claims.holder == e.holder
                assert await c.checked_write(job, None, b"k", b"v", proof=e.proof) == 1
            assert e.proof is None

    asyncio.run(asyncio.wait_for(main(), 60))


def test_locks_expose_their_grants_proof(server, client, job):
    keys = client.signing_keys()
    with client.lock(job, ttl=TTL) as lock:
        assert proof.verify(lock.proof, keys, job=job, token=lock.token).holder == lock.holder

    async def main():
        async with AsyncClient(server.target) as c:
            async with c.lock(job, ttl=TTL) as lock:
                assert proof.verify(lock.proof, keys, job=job, token=lock.token).holder == lock.holder

    asyncio.run(asyncio.wait_for(main(), 60))
