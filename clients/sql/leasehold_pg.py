"""Fencing for PostgreSQL, from Python (psycopg 3): the calls of
fencing.sql, with the rules for using them.

    import leasehold, leasehold_pg

    def on_elected(token):
        # Before any work: raise the job's fence and every protected row.
        if not leasehold_pg.take_over(conn, "bridge_health", token, "bridge_status"):
            elector.resign()   # this database has seen a newer leader
            return
        start_work(token)

    ...
    if not leasehold_pg.put(conn, "bridge_health", "status", "ok", token):
        stop_work()            # fenced: a newer leader took over

Every write carries the token it was elected with, even when the worker
believes it still leads: it cannot notice its own pause, the database
decides.

With proofs (README.md, "Only issued tokens: proofs"), the token comes
from a grant's proof, verified here with the server's keys before it
reaches the database, so that a token nobody issued is refused::

    keys = client.signing_keys()             # refresh it when a kid is unknown
    leasehold_pg.take_over_with_proof(conn, keys, elector.proof, "bridge_health", "bridge_status")
    leasehold_pg.fenced_upsert_with_proof(conn, keys, elector.proof, "bridge_health", "status", "ok")
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, List, Optional, Tuple, Union

import psycopg

from leasehold import proof as lh_proof

#: The recipe: tables and functions, idempotent.
RECIPE = Path(__file__).resolve().parent / "fencing.sql"

#: The SQLSTATE leasehold_check raises when fenced.
FENCED_SQLSTATE = "LH001"

#: The largest token a ``bigint`` column holds.
MAX_TOKEN = (1 << 63) - 1

#: The fenced upsert for bridge_status: 1 row written, 0 rows fenced. The
#: row keeps the write's proof (NULL for a bare token).
FENCED_UPSERT = """
INSERT INTO bridge_status AS t (job, key, value, fence_token, proof)
SELECT %(job)s, %(key)s, %(value)s, %(token)s, %(proof)s
  FROM leasehold_fence AS f
 WHERE f.job = %(job)s AND f.token = %(token)s
   FOR SHARE OF f
ON CONFLICT (job, key) DO UPDATE
   SET value = EXCLUDED.value, fence_token = EXCLUDED.fence_token, proof = EXCLUDED.proof
 WHERE t.fence_token <= EXCLUDED.fence_token
"""


def install(conn: psycopg.Connection) -> None:
    """Creates the recipe's tables and functions (idempotent)."""
    with conn.transaction():
        conn.execute(RECIPE.read_text())


def take_over(conn: psycopg.Connection, job: str, token: int, *tables: str) -> bool:
    """On taking leadership, before any work: raises the job's fence, and
    the fence_token of every row of ``job`` in ``tables``, to ``token``, in
    one transaction. False when the database has already seen a higher
    token (we are stale; nothing changed)."""
    with conn.transaction():
        sql = "SELECT leasehold_take_over(%s, %s" + ", %s::regclass" * len(tables) + ")"
        row = conn.execute(sql, (job, token, *tables)).fetchone()
    return bool(row and row[0])


def put(conn: psycopg.Connection, job: str, key: str, value: str, token: int) -> bool:
    """The fenced upsert into bridge_status: True when written, False when
    fenced (missing row = insert; a lower token, or a token other than the
    job's fence, = 0 rows)."""
    return _put(conn, job, key, value, token, None)


def _put(conn: psycopg.Connection, job: str, key: str, value: str, token: int, proof: Optional[str]) -> bool:
    with conn.transaction():
        cur = conn.execute(FENCED_UPSERT, {"job": job, "key": key, "value": value, "token": token, "proof": proof})
        return cur.rowcount == 1


#: A key set: a :class:`leasehold.KeySet` (``client.signing_keys()``), or
#: the JWKS of ``GET /keys`` as a JSON string or the parsed object.
Keys = lh_proof.Keys


def verified_claims(keys: Keys, proof: str, job: str) -> lh_proof.ProofClaims:
    """The claims of ``proof`` for ``job``, verified with ``keys``
    (:func:`leasehold.proof.verify`). Raises :class:`leasehold.ProofError`
    (its ``kind`` says why) for a proof that does not verify or is for
    another job, and ``ValueError`` for a token above ``bigint``
    (:data:`MAX_TOKEN`; the server issues none). Nothing is sent to the
    database."""
    claims = lh_proof.verify(proof, keys, job=job)
    if claims.token > MAX_TOKEN:
        raise ValueError(f"token {claims.token} is above what a bigint holds ({MAX_TOKEN})")
    return claims


def take_over_with_proof(conn: psycopg.Connection, keys: Keys, proof: str, job: str, *tables: str) -> bool:
    """:func:`take_over` with the token of a grant's ``proof``, verified
    first (:func:`verified_claims`): on taking leadership, before any work.
    The fence keeps the proof. False when the database has already seen a
    higher token (nothing changed). Raises :class:`leasehold.ProofError` or
    ``ValueError`` before touching the database: a forged proof changes
    nothing there."""
    claims = verified_claims(keys, proof, job)
    with conn.transaction():
        if not take_over(conn, job, claims.token, *tables):
            return False
        conn.execute("UPDATE leasehold_fence SET proof = %s WHERE job = %s AND token = %s", (proof, job, claims.token))
    return True


def fenced_upsert_with_proof(
    conn: psycopg.Connection, keys: Keys, proof: str, job: str, key: str, value: str
) -> bool:
    """The fenced upsert into bridge_status with the token of a grant's
    ``proof``, verified first (:func:`verified_claims`: a valid proof, for
    ``job``); the row keeps the proof, for an auditor. True when written;
    False when fenced: the proof's token is not the job's fence (a newer
    leader took over, or this token has not: :func:`take_over_with_proof`
    first) or is below the row's. A stale proof is valid, and fenced here.
    Raises :class:`leasehold.ProofError` or ``ValueError`` before touching
    the database: forged, altered, signed by another key, by a key no
    longer listed, or for another job."""
    claims = verified_claims(keys, proof, job)
    return _put(conn, job, key, value, claims.token, proof)


#: What :func:`audit` says of one row: its key, its fence_token, and the
#: claims of its proof, the :class:`leasehold.ProofError` it now fails
#: with, or ``None`` when it was written without a proof.
Audited = Tuple[str, int, Union["lh_proof.ProofClaims", "lh_proof.ProofError", None]]


def audit(conn: psycopg.Connection, keys: Keys, job: str) -> List[Audited]:
    """Verifies again the proof of every bridge_status row of ``job`` (for
    an auditor, with the keys of the time: a key since rotated out is
    UNKNOWN_KEY). A proof that verifies shows that its token was issued
    for ``job``; its token is at most the row's fence_token (a take-over
    may have raised that since)."""
    out: List[Audited] = []
    for key, fence_token, proof in conn.execute(
        "SELECT key, fence_token, proof FROM bridge_status WHERE job = %s ORDER BY key", (job,)
    ).fetchall():
        verdict: Union[lh_proof.ProofClaims, lh_proof.ProofError, None] = None
        if proof is not None:
            try:
                verdict = lh_proof.verify(proof, keys, job=job)
            except lh_proof.ProofError as e:
                verdict = e
        out.append((key, fence_token, verdict))
    return out


def check(conn: psycopg.Connection, job: str, token: int) -> None:
    """For a multi-statement transaction: call first inside it. Raises
    psycopg's error with SQLSTATE LH001 when fenced; otherwise holds a share
    lock on the job's fence until the transaction ends."""
    conn.execute("SELECT leasehold_check(%s, %s)", (job, token))


def rows(conn: psycopg.Connection, job: str) -> Iterable[tuple]:
    """(key, value, fence_token) of every bridge_status row of ``job``."""
    return conn.execute(
        "SELECT key, value, fence_token FROM bridge_status WHERE job = %s ORDER BY key", (job,)
    ).fetchall()
