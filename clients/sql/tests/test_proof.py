"""The PostgreSQL recipe with proofs (leasehold_pg's *_with_proof), against a
real PostgreSQL: a write is accepted only with a valid proof whose token is
the job's fence and at least the row's. Forged, altered, wrong-key,
other-job and expired-key proofs are refused before the database and
change no row; a stale but valid proof is fenced. The forged cases use the
key set (and the signing keys) of clients/conformance/proof-vectors.json;
the last test uses a real leasehold server and its keys."""

import base64
import json
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

import leasehold

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import leasehold_pg  # noqa: E402

VECTORS = json.loads((HERE.parents[1] / "conformance" / "proof-vectors.json").read_text(encoding="utf-8"))
KEYS = VECTORS["keys"]
JOB = "bridge_health"
CLAIMS = VECTORS["signed_by_a"]["claims"]  # bridge_health, token 7
GOOD = VECTORS["signed_by_a"]["proof"]


def case(name):
    return next(c for c in VECTORS["cases"] if c["name"] == name)["proof"]


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def sign(token: int, job: str = JOB, key: str = "a") -> str:
    """A valid proof of ``token`` for ``job``, signed by the vectors' key
    ``key`` (a or b, both in KEYS)."""
    sk = serialization.load_pem_private_key(VECTORS["signing_keys_pem"][key].encode(), None)
    kid = KEYS["keys"][0 if key == "a" else 1]["kid"]
    header = json.dumps({"alg": "EdDSA", "kid": kid, "typ": "leasehold-proof+jwt"}, separators=(",", ":"))
    claims = json.dumps(dict(CLAIMS, job=job, token=str(token)), separators=(",", ":"))
    signing_input = b64(header.encode()) + "." + b64(claims.encode())
    return signing_input + "." + b64(sk.sign(signing_input.encode()))


def state(db):
    """Everything the recipe keeps: the fences and the rows."""
    return (
        db.execute("SELECT job, token, proof FROM leasehold_fence ORDER BY job").fetchall(),
        db.execute("SELECT job, key, value, fence_token, proof FROM bridge_status ORDER BY job, key").fetchall(),
    )


def test_a_valid_proof_takes_over_and_writes_and_is_kept_beside_the_row(db):
    assert leasehold_pg.take_over_with_proof(db, KEYS, GOOD, JOB, "bridge_status")
    assert db.execute("SELECT token, proof FROM leasehold_fence WHERE job = %s", (JOB,)).fetchone() == (7, GOOD)
    assert leasehold_pg.fenced_upsert_with_proof(db, KEYS, GOOD, JOB, "status", "ok")
    assert list(leasehold_pg.rows(db, JOB)) == [("status", "ok", 7)]
    # The key set as JSON (GET /keys) does as well as the parsed object.
    assert leasehold_pg.fenced_upsert_with_proof(db, json.dumps(KEYS), GOOD, JOB, "status", "ok again")

    # An auditor verifies the kept proof again.
    [(key, fence_token, claims)] = leasehold_pg.audit(db, KEYS, JOB)
    assert (key, fence_token) == ("status", 7)
    assert isinstance(claims, leasehold.ProofClaims) and (claims.job, claims.token) == (JOB, 7)
    # With a set that no longer lists the key: it says so.
    [(_, _, err)] = leasehold_pg.audit(db, {"keys": KEYS["keys"][1:]}, JOB)
    assert isinstance(err, leasehold.ProofError) and err.kind is leasehold.ProofErrorKind.UNKNOWN_KEY

    # A write with a bare token clears the row's proof: it has none.
    assert leasehold_pg.put(db, JOB, "status", "bare", 7)
    assert leasehold_pg.audit(db, KEYS, JOB) == [("status", 7, None)]


REFUSED = [
    ("forged: token 2^63, no valid signature", case("forged: token 2^63 with no valid signature"), JOB,
     leasehold.ProofErrorKind.BAD_SIGNATURE),
    ("forged: token 2^63 - 1, re-signed by nobody", None, JOB, leasehold.ProofErrorKind.BAD_SIGNATURE),
    ("altered claims", case("an altered claims byte"), JOB, leasehold.ProofErrorKind.BAD_SIGNATURE),
    ("altered signature", case("an altered signature byte"), JOB, leasehold.ProofErrorKind.BAD_SIGNATURE),
    ("wrong key", case("signed by another key under a listed key id (wrong key)"), JOB,
     leasehold.ProofErrorKind.BAD_SIGNATURE),
    ("expired key", case("a key id the set does not list (an expired key)"), JOB,
     leasehold.ProofErrorKind.UNKNOWN_KEY),
    ("other job", GOOD, "other_job", leasehold.ProofErrorKind.WRONG_JOB),
    ("alg none", case("alg none"), JOB, leasehold.ProofErrorKind.UNSUPPORTED),
    ("no proof", "", JOB, leasehold.ProofErrorKind.MALFORMED),
]


@pytest.mark.parametrize("name, proof, job, kind", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_proofs_change_no_row(db, name, proof, job, kind):
    if proof is None:  # the largest bigint, under a good proof's header and signature
        h, _, s = GOOD.split(".")
        proof = f"{h}.{b64(json.dumps(dict(CLAIMS, token=str(leasehold_pg.MAX_TOKEN))).encode())}.{s}"
    # A job already led with token 7 and written, and the job the proof names.
    assert leasehold_pg.take_over_with_proof(db, KEYS, GOOD, JOB, "bridge_status")
    assert leasehold_pg.fenced_upsert_with_proof(db, KEYS, GOOD, JOB, "status", "ok")
    before = state(db)
    with pytest.raises(leasehold.ProofError) as e:
        leasehold_pg.take_over_with_proof(db, KEYS, proof, job, "bridge_status")
    assert e.value.kind is kind, str(e.value)
    with pytest.raises(leasehold.ProofError) as e:
        leasehold_pg.fenced_upsert_with_proof(db, KEYS, proof, job, "status", "forged")
    assert e.value.kind is kind
    with pytest.raises(leasehold.ProofError):
        leasehold_pg.fenced_upsert_with_proof(db, KEYS, proof, job, "brand-new", "forged")
    assert state(db) == before


def test_a_token_beyond_bigint_is_refused_before_the_database(db):
    # A valid proof (the vectors' largest token, 2^64 - 1), but no bigint holds it.
    largest = case("good, escapes and the largest token")
    job = 'jobs/"quoted"\\ünï'
    assert leasehold.proof.verify(largest, KEYS, job=job).token == 2**64 - 1
    before = state(db)
    with pytest.raises(ValueError, match="bigint"):
        leasehold_pg.take_over_with_proof(db, KEYS, largest, job, "bridge_status")
    with pytest.raises(ValueError, match="bigint"):
        leasehold_pg.fenced_upsert_with_proof(db, KEYS, largest, job, "k", "v")
    assert state(db) == before


def test_a_stale_but_valid_proof_is_fenced(db):
    p7, p8 = sign(7), sign(8, key="b")
    assert leasehold_pg.take_over_with_proof(db, KEYS, p7, JOB, "bridge_status")
    assert leasehold_pg.fenced_upsert_with_proof(db, KEYS, p7, JOB, "status", "from 7")
    # A valid proof for a higher token that has not taken over: fenced too.
    assert not leasehold_pg.fenced_upsert_with_proof(db, KEYS, p8, JOB, "status", "from 8, early")
    assert leasehold_pg.take_over_with_proof(db, KEYS, p8, JOB, "bridge_status")
    before = state(db)
    assert before[1] == [(JOB, "status", "from 7", 8, p7)], "raised by the take-over; the writer's proof kept"

    # The old leader, with its proof (valid, issued, no longer live): fenced.
    assert not leasehold_pg.fenced_upsert_with_proof(db, KEYS, p7, JOB, "status", "stale")
    assert not leasehold_pg.fenced_upsert_with_proof(db, KEYS, p7, JOB, "brand-new", "stale")
    assert not leasehold_pg.take_over_with_proof(db, KEYS, p7, JOB, "bridge_status")
    assert state(db) == before

    assert leasehold_pg.fenced_upsert_with_proof(db, KEYS, p8, JOB, "status", "from 8")
    assert [(k, t, c.token) for k, t, c in leasehold_pg.audit(db, KEYS, JOB)] == [("status", 8, 8)]


def test_with_the_real_server_and_its_keys(db, server):
    client = leasehold.Client(server.target)
    try:
        keys = client.signing_keys()
        a = client.acquire(JOB, "a", ttl=30).lease
        assert a.proof
        assert leasehold_pg.take_over_with_proof(db, keys, a.proof, JOB, "bridge_status")
        assert leasehold_pg.fenced_upsert_with_proof(db, keys, a.proof, JOB, "status", "from a")
        # The server's keys verify no proof of the vectors' keys.
        with pytest.raises(leasehold.ProofError) as e:
            leasehold_pg.fenced_upsert_with_proof(db, keys, GOOD, JOB, "status", "vectors")
        assert e.value.kind is leasehold.ProofErrorKind.UNKNOWN_KEY

        client.release(JOB, "a", a.token)
        b = client.acquire(JOB, "b", ttl=30).lease
        assert b.token == a.token + 1
        assert leasehold_pg.take_over_with_proof(db, keys, b.proof, JOB, "bridge_status")
        assert not leasehold_pg.fenced_upsert_with_proof(db, keys, a.proof, JOB, "status", "stale a")
        assert leasehold_pg.fenced_upsert_with_proof(db, keys, b.proof, JOB, "status", "from b")
        assert list(leasehold_pg.rows(db, JOB)) == [("status", "from b", b.token)]
        [(_, _, claims)] = leasehold_pg.audit(db, keys, JOB)
        assert (claims.holder, claims.token) == ("b", b.token)
        client.release(JOB, "b", b.token)
    finally:
        client.close()
