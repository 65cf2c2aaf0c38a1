"""examples/conformance_worker.py's commands beyond the elector
(clients/conformance/README.md): ``lock``/``lock-write``/``unlock`` (the
asyncio lock; writes over the WriteStream), ``follow``/``follow-stop``
(on_new_leader and observe), ``fleet``/``fleet-stop`` (the ElectorSet),
``history``, ``delete-job``, the ``--ca``/``--token`` flags, and the
leader's value and the candidates (``--value``, ``set-value``, ``leader``,
``waiters``, ``follow <job> <value>``), and counted leases (``--slots``,
``acquire-slots``); real worker processes against the real server."""

import re

import pytest

import harness
import leasehold
from test_conformance_worker import PATIENCE, answer, expect_all, start


@pytest.fixture()
def chaos_server():
    # A server of each test's own: after a DeleteJob, the server gives new
    # jobs tokens above the deleted ones, and the tests count tokens.
    s = harness.ServerProcess(extra=["--enable-chaos"])
    yield s
    s.stop()


@pytest.fixture()
def workers():
    started = []
    yield started
    for w in started:
        w.kill()


def line(w, pattern, what=None):
    """The next line of ``w`` matching ``pattern`` (a regex), as a match."""
    _, l = w.expect(lambda l: re.fullmatch(pattern, l) is not None, PATIENCE, what or pattern)
    return re.fullmatch(pattern, l)


def test_worker_lock_commands(chaos_server, job, workers):
    with leasehold.Client(chaos_server.target) as c:
        a = start(chaos_server, job + "-elector", "a", ttl_ms=1000)
        workers.append(a)
        a.send(f"lock {job}")
        m = line(a, rf"lock held {re.escape(job)} token=(\d+) holder=(a@\S+)")
        assert m.group(1) == "1" and m.group(2) != a.holder, "the lock is its own holder"
        assert c.get_lease(job).holder == m.group(2)
        assert answer(a, "lock-write x") == "lock-write ok version=1"
        c.chaos().expire(job)
        line(a, rf"lock lost {re.escape(job)} token=1")
        c.acquire(job, "intruder", ttl=30)
        assert answer(a, "lock-write y") == "lock-write fenced current=2"
        assert answer(a, "unlock") == "unlock done"
        assert c.get_lease(job).holder == "intruder"
        # DeleteJob: in use while held, then deleted, then absent.
        assert answer(a, f"delete-job {job}") == "delete-job in-use"
        c.release(job, "intruder", 2)
        assert answer(a, f"delete-job {job}") == "delete-job deleted"
        assert answer(a, f"delete-job {job}") == "delete-job absent"
        # A lock waiting for a holder is entered once it leaves; unlock releases.
        t = c.acquire(job, "holder", ttl=30).lease.token
        assert t > 2, "a job created again gets tokens above its old ones"
        a.send(f"lock {job}")
        chaos_server.wait_waiters(1)
        c.release(job, "holder", t)
        line(a, rf"lock held {re.escape(job)} token={t + 1} holder=a@\S+")
        assert answer(a, "unlock") == "unlock done"
        assert c.get_lease(job).holder is None
        # unlock while still waiting: nothing is left held.
        c.acquire(job, "holder", ttl=30)
        a.send(f"lock {job}")
        chaos_server.wait_waiters(1)
        assert answer(a, "unlock") == "unlock done"
        chaos_server.wait_waiters_at_most(0)
        c.release(job, "holder", t + 2)
        assert c.get_lease(job).holder is None
        a.send("quit")
        a.expect(lambda l: l == "bye", PATIENCE, "bye")
        assert a.wait(PATIENCE) == 0


def test_worker_follow_fleet_and_history(chaos_server, job, workers):
    follow = job + "-follow"
    a = start(chaos_server, job, "a", ttl_ms=1000)
    b = start(chaos_server, job, "b", ttl_ms=1000)
    workers.extend([a, b])
    a.send(f"follow {follow}")
    ha = line(a, r"follow holder (a@\S+)").group(1)
    expect_all(a, [
        f"newleader {follow} holder={ha} token=1",
        f"follow elected {follow} token=1",
        f"observe {follow} holder={ha} token=1",
    ])
    b.send(f"follow {follow}")
    hb = line(b, r"follow holder (b@\S+)").group(1)
    expect_all(b, [f"newleader {follow} holder={ha} token=1", f"observe {follow} holder={ha} token=1"])
    chaos_server.wait_waiters(1)
    a.send("follow-stop")
    expect_all(a, [f"follow lost {follow} token=1", "follow-stop done"])
    expect_all(b, [
        f"newleader {follow} holder={hb} token=2",
        f"follow elected {follow} token=2",
        f"observe {follow} holder={hb} token=2",
    ])
    assert answer(b, f"history {follow}") == f"history {follow} tokens=2,1"
    assert answer(b, f"history {job}-none") == f"history {job}-none tokens="
    b.send("follow-stop")
    expect_all(b, [f"follow lost {follow} token=2", "follow-stop done"])

    # fleet: three jobs led, then released by fleet-stop.
    prefix = job + "-fleet-"
    a.send(f"fleet 3 {prefix}")
    hf = line(a, r"fleet holder (a@\S+)").group(1)
    expect_all(a, [f"fleet elected {prefix}{i} token=1" for i in range(3)])
    with leasehold.Client(chaos_server.target) as c:
        assert {c.get_lease(f"{prefix}{i}").holder for i in range(3)} == {hf}
        a.send("fleet-stop")
        expect_all(a, [f"fleet lost {prefix}{i} token=1" for i in range(3)] + ["fleet-stop done"])
        assert {c.get_lease(f"{prefix}{i}").holder for i in range(3)} == {None}
        # quit resigns a fleet still running, before bye.
        b.send(f"fleet 2 {prefix}")
        expect_all(b, [f"fleet elected {prefix}{i} token=2" for i in range(2)])
        b.send("quit")
        expect_all(b, [f"fleet lost {prefix}{i} token=2" for i in range(2)] + ["bye"])
        assert b.wait(PATIENCE) == 0
        assert {c.get_lease(f"{prefix}{i}").holder for i in range(2)} == {None}
    a.send("quit")
    a.expect(lambda l: l == "bye", PATIENCE, "bye")
    assert a.wait(PATIENCE) == 0


def test_worker_ca_and_token_flags(job, workers):
    with harness.ServerProcess(secure=True) as s:
        token = (s.pki / "alice.token").read_text()
        a = start(s, job, "a", "--ca", str(s.pki / "ca.pem"), "--token", token, ttl_ms=5000)
        workers.append(a)
        a.expect(lambda l: l == "elected token=1", PATIENCE, "elected over TLS with a token")
        assert answer(a, "write x") == "write ok version=1"
        assert answer(a, f"history {job}") == f"history {job} tokens=1"
        a.send(f"lock {job}-lock")
        line(a, rf"lock held {re.escape(job)}-lock token=1 holder=a@\S+")
        assert answer(a, "lock-write v") == "lock-write ok version=1"
        assert answer(a, "unlock") == "unlock done"
        a.send("quit")
        a.expect(lambda l: l == "bye", PATIENCE, "bye")
        assert a.wait(PATIENCE) == 0
        # Without the token, the server refuses the worker's calls.
        b = start(s, job + "-b", "b", "--ca", str(s.pki / "ca.pem"), ttl_ms=5000)
        workers.append(b)
        assert answer(b, f"history {job}").startswith("history error Unauthenticated")


def test_worker_value_set_value_leader_waiters_and_follow_values(chaos_server, job, workers):
    a = start(chaos_server, job, "a", "--value", "10.0.0.1:7000", ttl_ms=1500)
    workers.append(a)
    a.expect(lambda l: l == "elected token=1", PATIENCE, "a elected")
    assert answer(a, "leader") == f"leader holder={a.holder} token=1 value=10.0.0.1:7000"
    # Two candidates: b, then c, preferred, who is first in line.
    b = start(chaos_server, job, "b", ttl_ms=1500)
    workers.append(b)
    harness.wait_until(lambda: answer(a, f"waiters {job}") == f"waiters n=1 {b.holder}", PATIENCE, "b waiting")
    c = start(chaos_server, job, "c", "--preferred", ttl_ms=1500)
    workers.append(c)
    want = f"waiters n=2 {c.holder} {b.holder}"
    harness.wait_until(lambda: answer(a, f"waiters {job}") == want, PATIENCE, "c first in line")
    assert answer(b, f"waiters {job}-none") == "waiters n=0"
    # A follower reads the leader's value; set-value answers at once, and
    # the value goes with a's next renewal.
    assert answer(b, "leader") == f"leader holder={a.holder} token=1 value=10.0.0.1:7000"
    b.send(f"follow {job}")
    line(b, r"follow holder (b@\S+)")
    expect_all(b, [
        f"newleader {job} holder={a.holder} token=1 value=10.0.0.1:7000",
        f"observe {job} holder={a.holder} token=1 value=10.0.0.1:7000",
    ])
    assert answer(a, "set-value 10.0.0.1:7001") == "set-value done"
    # The VALUE_CHANGED event: an observe line, and no newleader line.
    line(b, rf"observe {re.escape(job)} holder={re.escape(a.holder)} token=1 value=10\.0\.0\.1:7001")
    assert answer(c, "leader") == f"leader holder={a.holder} token=1 value=10.0.0.1:7001"
    b.send("follow-stop")
    expect_all(b, ["follow-stop done"])
    # Every line before "follow-stop done" was read: no newleader for the change.
    assert [l for l in b.lines.seen if l.startswith(f"newleader {job} ")] == [
        f"newleader {job} holder={a.holder} token=1 value=10.0.0.1:7000"
    ], b.lines.seen

    # A follow elector with a value: its grant's lines carry it.
    follow = job + "-follow"
    c.send(f"follow {follow} 10.0.0.3:7000")
    hc = line(c, r"follow holder (c@\S+)").group(1)
    expect_all(c, [
        f"newleader {follow} holder={hc} token=1 value=10.0.0.3:7000",
        f"follow elected {follow} token=1",
        f"observe {follow} holder={hc} token=1 value=10.0.0.3:7000",
    ])
    assert answer(a, f"waiters {follow}") == "waiters n=0"
    c.send("follow-stop")
    expect_all(c, [f"follow lost {follow} token=1", "follow-stop done"])
    for w in (a, b, c):
        w.send("quit")
        w.expect(lambda l: l == "bye", PATIENCE, "bye")
        assert w.wait(PATIENCE) == 0


def test_worker_slots_flag_and_acquire_slots_command(server, job, workers):
    """``--slots 2``: two workers lead at once, each line naming its slot's
    job and slot; a third waits and takes the slot the first frees, with
    that slot's token + 1; ``write`` goes to the slot's job. Then
    ``acquire-slots``: ok, busy, and invalid for another count or over 100."""
    elected = r"elected token=(\d+) job=(\S+) slot=(\d+)"
    with leasehold.Client(server.target) as c:
        a = start(server, job, "a", "--slots", "2")
        workers.append(a)
        ma = line(a, elected)
        b = start(server, job, "b", "--slots", "2")
        workers.append(b)
        mb = line(b, elected)
        for m in (ma, mb):
            assert m.group(1) == "1" and m.group(2) == f"{job}#{m.group(3)}"
        assert {ma.group(3), mb.group(3)} == {"0", "1"}, "two slots"
        assert c.get_lease(ma.group(2)).holder == a.holder and c.get_lease(mb.group(2)).holder == b.holder
        w = start(server, job, "w", "--slots", "2")
        workers.append(w)
        harness.wait_until(lambda: c.get_lease(job).holder == w.holder, PATIENCE, "the third worker in line")
        assert answer(a, "write x") == "write ok version=1"
        assert c.read(ma.group(2), b"status").value == b"x", "written to the slot's job"
        a.send("quit")
        a.expect(lambda l: l == "bye", PATIENCE, "bye")
        mw = line(w, elected)
        assert mw.groups() == ("2", ma.group(2), ma.group(3)), "the freed slot, its token + 1"
        assert answer(w, "write y") == "write ok version=2"
        with pytest.raises(leasehold.Fenced):
            c.checked_write(ma.group(2), 1, b"status", b"stale")
        assert answer(b, "write z") == "write ok version=1"

        assert answer(w, f"acquire-slots {job} 3") == "acquire-slots invalid field=slots"
        assert answer(w, f"acquire-slots {job} 2") == "acquire-slots busy"
        assert answer(w, f"acquire-slots {job}-x 101") == "acquire-slots invalid field=slots"
        assert answer(w, f"acquire-slots {job}-y 2") == f"acquire-slots ok job={job}-y#0 slot=0 token=1"
        held = c.get_lease(f"{job}-y#0").holder
        assert held.startswith("w@") and held != w.holder, "a holder of its own"
        assert answer(w, f"acquire-slots {job}-y 2") == f"acquire-slots ok job={job}-y#1 slot=1 token=1"
        for x in (b, w):
            x.send("quit")
            x.expect(lambda l: l == "bye", PATIENCE, "bye")
            assert x.wait(PATIENCE) == 0
        assert c.get_lease(ma.group(2)).holder is None and c.get_lease(mb.group(2)).holder is None
