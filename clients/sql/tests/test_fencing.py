"""The PostgreSQL fencing recipe (fencing.sql), against a real PostgreSQL
and a real leasehold server, from Python."""

import os
import signal
import sys
import threading
import time

import psycopg
import pytest

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import leasehold_pg  # noqa: E402

JOB = "bridge_health"
STEP = 20.0


def naive_put(conn, job, key, value, token):
    """The per-row check alone, without the job's fence: what the recipe
    improves on."""
    cur = conn.execute(
        """INSERT INTO bridge_status AS t (job, key, value, fence_token) VALUES (%s, %s, %s, %s)
           ON CONFLICT (job, key) DO UPDATE SET value = EXCLUDED.value, fence_token = EXCLUDED.fence_token
           WHERE t.fence_token <= EXCLUDED.fence_token""",
        (job, key, value, token),
    )
    return cur.rowcount == 1


def test_fenced_upsert_rules(db):
    # No take-over yet: nothing may be written.
    assert not leasehold_pg.put(db, JOB, "k", "v", 1)
    assert leasehold_pg.take_over(db, JOB, 1, "bridge_status")
    assert leasehold_pg.put(db, JOB, "k", "a", 1)  # missing row = insert
    assert leasehold_pg.put(db, JOB, "k", "b", 1)  # same token = update
    assert leasehold_pg.take_over(db, JOB, 2, "bridge_status")
    assert list(leasehold_pg.rows(db, JOB)) == [("k", "b", 2)], "take-over raised the row's token"
    assert not leasehold_pg.put(db, JOB, "k", "stale", 1)  # lower token = 0 rows
    assert not leasehold_pg.put(db, JOB, "new", "stale", 1)  # and no insert either
    assert not leasehold_pg.put(db, JOB, "k", "skipped", 3)  # a token that never took over
    assert leasehold_pg.put(db, JOB, "k", "c", 2)
    assert list(leasehold_pg.rows(db, JOB)) == [("k", "c", 2)]
    # Another job is fenced on its own.
    assert leasehold_pg.take_over(db, "other", 7, "bridge_status")
    assert leasehold_pg.put(db, "other", "k", "x", 7)
    assert list(leasehold_pg.rows(db, JOB)) == [("k", "c", 2)]


def test_a_stale_take_over_changes_nothing(db):
    assert leasehold_pg.take_over(db, JOB, 5, "bridge_status")
    assert leasehold_pg.put(db, JOB, "k", "v", 5)
    assert not leasehold_pg.take_over(db, JOB, 4, "bridge_status")
    assert db.execute("SELECT token FROM leasehold_fence WHERE job = %s", (JOB,)).fetchone() == (5,)
    assert list(leasehold_pg.rows(db, JOB)) == [("k", "v", 5)]
    assert leasehold_pg.take_over(db, JOB, 5, "bridge_status"), "taking over again with the same token is fine"
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        leasehold_pg.take_over(db, JOB, 0)


def test_leasehold_check_guards_a_transaction(db, postgres):
    assert leasehold_pg.take_over(db, JOB, 3)
    with postgres.connect() as conn:
        with conn.transaction():
            leasehold_pg.check(conn, JOB, 3)
            conn.execute("INSERT INTO bridge_status VALUES (%s, 'k', 'v', 3)", (JOB,))
        with pytest.raises(psycopg.DatabaseError) as e:
            with conn.transaction():
                leasehold_pg.check(conn, JOB, 2)
                conn.execute("INSERT INTO bridge_status VALUES (%s, 'k2', 'v', 2)", (JOB,))
        assert e.value.sqlstate == leasehold_pg.FENCED_SQLSTATE
    assert [r[0] for r in leasehold_pg.rows(db, JOB)] == ["k"]


def test_without_the_take_over_a_stale_write_lands(db):
    """The gap, shown: with the per-row check alone, a paused leader's write
    lands as long as the new leader has not written that row (or at all).
    The recipe refuses the same writes."""
    assert leasehold_pg.take_over(db, JOB, 1, "bridge_status")
    assert leasehold_pg.put(db, JOB, "k", "a", 1)
    # Token 2 is elected but has not written yet.
    assert naive_put(db, JOB, "k", "stale", 1), "the per-row check alone accepts it"
    assert naive_put(db, JOB, "new", "stale", 1)
    db.execute("DELETE FROM bridge_status WHERE job = %s AND key = 'new'", (JOB,))
    db.execute("UPDATE bridge_status SET value = 'a' WHERE job = %s", (JOB,))
    # Now with the take-over, as the recipe says, before any work.
    assert leasehold_pg.take_over(db, JOB, 2, "bridge_status")
    assert not naive_put(db, JOB, "k", "stale", 1), "the raised row token refuses the update"
    assert not leasehold_pg.put(db, JOB, "k", "stale", 1)
    assert not leasehold_pg.put(db, JOB, "new", "stale", 1), "the job's fence refuses the insert"
    assert list(leasehold_pg.rows(db, JOB)) == [("k", "a", 2)]


def _waits_on_a_lock(db, pid):
    return db.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == ("Lock",)


def test_a_take_over_and_a_stale_write_never_interleave(db, postgres):
    """Both orders, with real concurrent transactions: a stale write that
    started first delays the take-over and is then raised by it; a stale
    write that comes during the take-over waits for it and is refused."""
    assert leasehold_pg.take_over(db, JOB, 1, "bridge_status")
    with postgres.connect() as stale, postgres.connect() as new:
        # 1. The stale leader's transaction holds the fence's share lock.
        with stale.transaction():
            assert leasehold_pg.put(stale, JOB, "k", "from 1", 1)
            done = threading.Event()
            result = {}

            def take():
                result["ok"] = leasehold_pg.take_over(new, JOB, 2, "bridge_status")
                done.set()

            t = threading.Thread(target=take)
            t.start()
            harness.wait_until(lambda: _waits_on_a_lock(db, new.info.backend_pid), 10, "the take-over to wait")
            assert not done.is_set()
        t.join(10)
        assert result == {"ok": True}
        assert list(leasehold_pg.rows(db, JOB)) == [("k", "from 1", 2)], "the take-over came after, and raised it"

        # 2. An uncommitted take-over to 3: the stale write (token 2) waits, then is fenced.
        with new.transaction():
            new.execute("SELECT leasehold_take_over(%s, 3, 'bridge_status')", (JOB,))
            done = threading.Event()
            result = {}

            def write():
                result["ok"] = leasehold_pg.put(stale, JOB, "k", "from 2", 2)
                done.set()

            t = threading.Thread(target=write)
            t.start()
            harness.wait_until(lambda: _waits_on_a_lock(db, stale.info.backend_pid), 10, "the stale write to wait")
            assert not done.is_set()
        t.join(10)
        assert result == {"ok": False}
        assert list(leasehold_pg.rows(db, JOB)) == [("k", "from 1", 3)]


class Worker(harness.LineProcess):
    def __init__(self, server, postgres, name):
        super().__init__(
            [sys.executable, os.path.join(os.path.dirname(HERE), "example_worker.py"),
             "--server", server.target, "--dsn", postgres.dsn, "--job", JOB, "--name", name, "--ttl-ms", "1000"],
            name,
        )
        self.holder = self.expect(lambda l: l.startswith("holder "), STEP)[1].split(" ", 1)[1]

    def command(self, cmd, answer):
        self.send(cmd)
        return self.expect(lambda l: l.split(" ")[0] == answer, STEP, cmd)[1]


def test_a_paused_leader_is_fenced_in_postgres(db, postgres, server):
    """The paused-leader story, with real processes: the leader is frozen
    with SIGSTOP, a follower takes over with token 2 and raises the fence
    before any work, and the old leader's in-flight writes (an update and an
    insert) are refused by PostgreSQL, before the new leader wrote anything."""
    a, b = Worker(server, postgres, "a"), Worker(server, postgres, "b")
    workers = [a, b]
    try:
        deadline = time.monotonic() + STEP
        leader = None
        while leader is None:
            for w in workers:
                try:
                    _, line = w.lines.next(0.01)
                except TimeoutError:
                    continue
                if line and line.startswith("elected"):
                    assert line == "elected token=1"
                    leader = w
            assert time.monotonic() < deadline, "nobody was elected"
        follower = b if leader is a else a
        assert leader.command("put status ok-1", "put") == "put ok"
        assert leader.command("put seen yes", "put") == "put ok"

        leader.signal(signal.SIGSTOP)
        _, line = follower.expect(lambda l: l.startswith("elected"), STEP, "the take-over")
        assert line == "elected token=2"
        # The follower took over in PostgreSQL too, before writing anything.
        assert db.execute("SELECT token FROM leasehold_fence WHERE job = %s", (JOB,)).fetchone() == (2,)
        assert list(leasehold_pg.rows(db, JOB)) == [("seen", "yes", 2), ("status", "ok-1", 2)]

        leader.signal(signal.SIGCONT)
        assert leader.command("put status stale", "put") == "put fenced"
        assert leader.command("put brand-new stale", "put") == "put fenced"
        if "lost token=1" not in leader.lines.seen:  # maybe read while waiting for an answer
            leader.expect(lambda l: l == "lost token=1", STEP, "the old leader's loss")
        assert list(leasehold_pg.rows(db, JOB)) == [("seen", "yes", 2), ("status", "ok-1", 2)]

        assert follower.command("put status ok-2", "put") == "put ok"
        assert list(leasehold_pg.rows(db, JOB)) == [("seen", "yes", 2), ("status", "ok-2", 2)]
        for w in (leader, follower):
            assert w.command("quit", "bye") == "bye"
            assert w.wait(STEP) == 0
    finally:
        for w in workers:
            w.kill()
