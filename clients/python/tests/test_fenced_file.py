"""examples/fenced_file.py: a file written only with a valid proof whose
token is at least the stored one. With the key set and signing keys of
clients/conformance/proof-vectors.json (no server): first write, newer and
equal tokens, a stale but valid proof, forged, other-job and tampered
proofs, no temporary file left behind, the lock file; then the example run
as a program against the real server."""

import base64
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

import leasehold

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fenced_file.py"
_spec = importlib.util.spec_from_file_location("fenced_file", EXAMPLE)
ff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ff)

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "conformance" / "proof-vectors.json").read_text(encoding="utf-8")
)
KEYS = VECTORS["keys"]
JOB = "bridge_health"
PATIENCE = 30.0


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def sign(token: int, job: str = JOB) -> str:
    """A valid proof of ``token`` for ``job``, by the vectors' key a."""
    sk = serialization.load_pem_private_key(VECTORS["signing_keys_pem"]["a"].encode(), None)
    header = {"alg": "EdDSA", "kid": KEYS["keys"][0]["kid"], "typ": "leasehold-proof+jwt"}
    claims = dict(VECTORS["signed_by_a"]["claims"], job=job, token=str(token))
    signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    return signing_input + "." + b64(sk.sign(signing_input.encode()))


def forged():
    return next(c for c in VECTORS["cases"] if c["name"].startswith("forged"))["proof"]


def listing(d: Path):
    return sorted(p.name for p in d.iterdir())


def test_writes_with_a_token_at_least_the_stored_one(tmp_path):
    f = tmp_path / "report.json"
    assert ff.write_fenced(f, b"v7", sign(7), KEYS, JOB).token == 7
    assert listing(tmp_path) == ["report.json", "report.json.proof"], "no temporary file left"
    data, claims = ff.read_fenced(f, KEYS, JOB)
    assert (data, claims.token) == (b"v7", 7)
    assert ff.proof_path(f).read_text().strip() == sign(7)

    assert ff.write_fenced(f, b"v7 again", sign(7), KEYS, JOB).token == 7, "the same token: the same leader"
    assert ff.write_fenced(f, b"v9", sign(9), KEYS, JOB).token == 9
    assert ff.read_fenced(f, KEYS, JOB)[0] == b"v9"
    assert listing(tmp_path) == ["report.json", "report.json.proof"]


def test_a_stale_but_valid_proof_is_refused_and_changes_nothing(tmp_path):
    f = tmp_path / "report.json"
    ff.write_fenced(f, b"v9", sign(9), KEYS, JOB)
    with pytest.raises(ff.Stale) as e:
        ff.write_fenced(f, b"stale", sign(8), KEYS, JOB)
    assert (e.value.token, e.value.stored) == (8, 9)
    assert f.read_bytes() == b"v9" and ff.read_fenced(f, KEYS, JOB)[1].token == 9
    assert listing(tmp_path) == ["report.json", "report.json.proof"]


@pytest.mark.parametrize(
    "what, make, kind",
    [
        ("forged token 2^63", forged, leasehold.ProofErrorKind.BAD_SIGNATURE),
        ("another job", lambda: sign(10, job="other_job"), leasehold.ProofErrorKind.WRONG_JOB),
        ("a key no longer listed",
         lambda: next(c for c in VECTORS["cases"] if "expired key" in c["name"])["proof"],
         leasehold.ProofErrorKind.UNKNOWN_KEY),
    ],
)
def test_a_proof_that_does_not_verify_is_refused(tmp_path, what, make, kind):
    f = tmp_path / "report.json"
    ff.write_fenced(f, b"v7", sign(7), KEYS, JOB)
    with pytest.raises(leasehold.ProofError) as e:
        ff.write_fenced(f, b"bad", make(), KEYS, JOB)
    assert e.value.kind is kind
    assert f.read_bytes() == b"v7"
    with pytest.raises(leasehold.ProofError):
        ff.write_fenced(tmp_path / "new", b"bad", make(), KEYS, JOB)
    assert listing(tmp_path) == ["report.json", "report.json.proof"]


def test_a_tampered_stored_proof_stops_every_writer(tmp_path):
    f = tmp_path / "report.json"
    ff.write_fenced(f, b"v7", sign(7), KEYS, JOB)
    ff.proof_path(f).write_text(forged())  # someone claims 2^63 on disk
    with pytest.raises(leasehold.ProofError) as e:
        ff.write_fenced(f, b"v8", sign(8), KEYS, JOB)
    assert e.value.kind is leasehold.ProofErrorKind.BAD_SIGNATURE
    assert f.read_bytes() == b"v7"


def test_the_lock_file_makes_a_second_writer_wait(tmp_path):
    f = tmp_path / "report.json"
    assert ff.write_fenced(f, b"v7", sign(7), KEYS, JOB, lock=True).token == 7
    assert not ff.lock_path(f).exists(), "removed after the rename"
    ff.lock_path(f).write_text("{}")  # another writer is between its check and its rename
    with pytest.raises(ff.Busy):
        ff.write_fenced(f, b"v8", sign(8), KEYS, JOB, lock=True)
    assert f.read_bytes() == b"v7"
    ff.lock_path(f).unlink()
    assert ff.write_fenced(f, b"v8", sign(8), KEYS, JOB, lock=True).token == 8
    # Refused under the lock: the lock is removed all the same.
    with pytest.raises(ff.Stale):
        ff.write_fenced(f, b"stale", sign(7), KEYS, JOB, lock=True)
    assert listing(tmp_path) == ["report.json", "report.json.proof"]


def run_example(server, job, path, data, *flags):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "--server", server.target, "--job", job, "--ttl", "30", *flags, str(path)],
        input=data, capture_output=True, timeout=PATIENCE, env=env,
    )


def test_the_example_against_the_real_server(server, client, job, tmp_path):
    f = tmp_path / "out.txt"
    r = run_example(server, job, f, b"first")
    assert (r.returncode, r.stdout) == (0, b"wrote token=1\n"), r.stderr
    r = run_example(server, job, f, b"second", "--lock")
    assert (r.returncode, r.stdout) == (0, b"wrote token=2\n"), r.stderr
    keys = client.signing_keys()
    data, claims = ff.read_fenced(f, keys, job)
    assert (data, claims.token, claims.job) == (b"second", 2, job)

    # A holder whose lease passed on, with its valid proof: refused.
    a = client.acquire(job, "a", ttl=30).lease
    client.release(job, "a", a.token)
    assert ff.write_fenced(f, b"third", a.proof, keys, job).token == a.token == 3
    b = client.acquire(job, "b", ttl=30).lease
    assert ff.write_fenced(f, b"fourth", b.proof, keys, job).token == 4
    with pytest.raises(ff.Stale):
        ff.write_fenced(f, b"stale", a.proof, keys, job)
    assert f.read_bytes() == b"fourth"
    client.release(job, "b", b.token)
