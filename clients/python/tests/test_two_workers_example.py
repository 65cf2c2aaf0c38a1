"""examples/two-workers: two real worker processes against the real server.

The workers run as a user runs them: from the example's folder, with the
``leasehold`` package installed (``pip install ./clients/python``, as
clients/test.sh does), not from this source tree."""

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

import harness
import leasehold

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "two-workers"

# How long a test waits for a state it expects: far longer than a stall of
# a loaded machine. Waiting costs only the time the state takes.
PATIENCE = 30.0
# A lease that must outlive the steps of a test: renewed every TTL/3, it
# outlasts a stall between two renewals.
TTL = 30.0

_LEADER = re.compile(r"^leader token=(\d+) counter=(\d+)$")
_WROTE = re.compile(r"^wrote token=(\d+) counter=(\d+) version=(\d+)$")


def start(server, job, name, ttl=TTL):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    w = harness.LineProcess(
        [sys.executable, "worker.py", "--server", server.target, "--name", name, "--ttl", str(ttl), job],
        name, cwd=str(EXAMPLE), env=env,
    )
    w.expect(lambda l: l.startswith(f"started holder={name}@"), PATIENCE, "the started line")
    return w


def first_of(workers, pred, timeout, what):
    """The first worker to print a line matching ``pred``: (worker, line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for w in workers:
            try:
                _, line = w.lines.next(0.02)
            except TimeoutError:
                continue
            if line is None:
                raise AssertionError(f"{w.name} exited while waiting for {what}; lines {w.lines.seen}")
            if pred(line):
                return w, line
    raise AssertionError(f"no {what} within {timeout}s: " + "; ".join(f"{w.name}: {w.lines.seen}" for w in workers))


def drain(w, quiet=0.1):
    """Reads the lines ``w`` printed so far; returns them."""
    out = []
    while True:
        try:
            _, line = w.lines.next(quiet)
        except TimeoutError:
            return out
        if line is None:
            return out
        out.append(line)


@pytest.fixture()
def workers():
    started = []
    yield started
    for w in started:
        w.kill()


def test_two_workers_one_leads_and_sigterm_hands_over(server, client, job, workers):
    a = start(server, job, "a")
    b = start(server, job, "b")
    workers += [a, b]

    leader, line = first_of([a, b], lambda l: l.startswith("leader"), PATIENCE, "a leader")
    follower = b if leader is a else a
    assert line == "leader token=1 counter=0"
    # The leader writes, fenced by its token, every ~200 ms.
    _, wrote = leader.expect(lambda l: l.startswith("wrote"), PATIENCE, "a write")
    assert _WROTE.match(wrote).group(1) == "1"
    leader.expect(lambda l: l.startswith("wrote token=1 counter=3 "), PATIENCE, "three writes")
    # The server says so too: the leader holds the lease, and the follower's
    # campaign waits in line for it.
    server.wait_waiters(1, PATIENCE)
    assert client.get_lease(job).holder.startswith(f"{leader.name}@")
    assert not [l for l in drain(follower) if l.startswith(("leader", "wrote"))], "exactly one leads"

    leader.signal(signal.SIGTERM)
    t = time.monotonic()
    _, line = follower.expect(lambda l: l.startswith("leader"), PATIENCE, "the take-over")
    took = time.monotonic() - t
    token, counter = map(int, _LEADER.match(line).groups())
    assert token == 2
    # Nothing the follower printed before it took over was a leader's line,
    # however late it was read.
    before = follower.lines.seen[: follower.lines.seen.index(line)]
    assert not [l for l in before if l.startswith(("leader", "wrote"))], f"exactly one leads: {before}"
    assert took < TTL / 3, f"took over by the release, not by expiry: {took:.2f}s"
    assert leader.wait(PATIENCE) == 0
    rest = drain(leader, quiet=PATIENCE)  # it has exited: up to its last line
    assert rest[-1:] == ["resigned"], rest
    last = max(int(m.group(2)) for m in map(_WROTE.match, leader.lines.seen) if m)
    assert counter == last, "the new leader carries on from the last write"
    _, wrote = follower.expect(lambda l: l.startswith("wrote"), PATIENCE, "a write by the new leader")
    assert wrote.startswith(f"wrote token=2 counter={last + 1} ")

    # SIGINT (Ctrl-C) resigns too.
    follower.signal(signal.SIGINT)
    assert follower.wait(PATIENCE) == 0
    assert drain(follower, quiet=PATIENCE)[-1:] == ["resigned"]
    lease = client.get_lease(job)
    assert (lease.holder, lease.token) == (None, 2)
    assert client.read(job, b"counter").token == 2


def test_a_paused_leader_loses_and_never_writes_after_the_take_over(server, client, job, workers):
    # a's lease is the one that runs out: 6 s, renewed every 2 s, so that
    # it lasts through a's first writes despite a stall. b's lease lives
    # on through the rest of the test.
    ttl = 6.0
    a = start(server, job, "a", ttl)
    a.expect(lambda l: l == "leader token=1 counter=0", PATIENCE, "a leads")
    b = start(server, job, "b")
    workers += [a, b]
    a.expect(lambda l: l.startswith("wrote token=1 counter=2 "), PATIENCE, "writes")

    a.signal(signal.SIGSTOP)
    try:
        b.expect(lambda l: l.startswith("leader token=2"), ttl + PATIENCE, "the take-over after expiry")
        b.expect(lambda l: l.startswith("wrote token=2"), PATIENCE, "a write by the new leader")
    finally:
        a.signal(signal.SIGCONT)
    _, line = a.expect(lambda l: l.startswith(("lost", "fenced")), PATIENCE, "the paused one to notice")
    assert line in ("lost token=1", "fenced token=1 current=2"), line
    # a stops first: were b stopped first, a would lead again with token 3.
    # Once it has exited, everything it printed after it noticed is read.
    a.signal(signal.SIGTERM)
    assert a.wait(PATIENCE) == 0
    after = drain(a, quiet=PATIENCE)
    assert not [l for l in after if l.startswith("wrote")], after
    assert after[-1:] == ["resigned"], after
    b.signal(signal.SIGTERM)
    assert b.wait(PATIENCE) == 0
    # The counter's last value was written by token 2, which led last.
    assert client.read(job, b"counter").token == 2
