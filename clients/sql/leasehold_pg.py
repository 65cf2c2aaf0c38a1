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
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import psycopg

#: The recipe: tables and functions, idempotent.
RECIPE = Path(__file__).resolve().parent / "fencing.sql"

#: The SQLSTATE leasehold_check raises when fenced.
FENCED_SQLSTATE = "LH001"

#: The fenced upsert for bridge_status: 1 row written, 0 rows fenced.
FENCED_UPSERT = """
INSERT INTO bridge_status AS t (job, key, value, fence_token)
SELECT %(job)s, %(key)s, %(value)s, %(token)s
  FROM leasehold_fence AS f
 WHERE f.job = %(job)s AND f.token = %(token)s
   FOR SHARE OF f
ON CONFLICT (job, key) DO UPDATE
   SET value = EXCLUDED.value, fence_token = EXCLUDED.fence_token
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
    with conn.transaction():
        cur = conn.execute(FENCED_UPSERT, {"job": job, "key": key, "value": value, "token": token})
        return cur.rowcount == 1


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
