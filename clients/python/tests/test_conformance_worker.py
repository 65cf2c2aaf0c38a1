"""examples/conformance_worker.py's transfer commands, ``--bind``,
``--preferred`` and ``--yield`` (clients/conformance/README.md has the
protocol), with real worker processes against the real server:
``transfer`` and ``transfer-to`` answer ``ok token=N``, ``no-successor``,
``not-leader`` or ``lost``, the old leader prints its ``lost`` line, a
``--bind`` leader killed with SIGKILL is replaced at once, not after its
TTL, and a ``--yield`` leader hands over to a ``--preferred`` worker at its
next renewal.

The workers run with the ``leasehold`` package installed, as a user runs
them (clients/test.sh installs it), not from this source tree."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

import harness
from leasehold.v1 import leasehold_pb2 as pb
from test_transfer import tenure_end

WORKER = Path(__file__).resolve().parents[1] / "examples" / "conformance_worker.py"
PATIENCE = 30.0
# Far longer than the test: a hand-over within a third of it is not expiry.
TTL_MS = 30_000


def start(server, job, name, *flags, ttl_ms=TTL_MS):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    w = harness.LineProcess(
        [sys.executable, str(WORKER), "--server", server.target, "--job", job, "--name", name,
         "--ttl-ms", str(ttl_ms), *flags],
        name, env=env,
    )
    _, line = w.expect(lambda l: l.startswith("holder "), PATIENCE, "the holder line")
    w.holder = line.split(" ", 1)[1]
    return w


def expect_all(w, lines, timeout=PATIENCE):
    """Waits until ``w`` printed every line of ``lines``, in any order
    (a command's answer and the elector's report come from two threads)."""
    want = set(lines)
    deadline = time.monotonic() + timeout
    while want:
        _, line = w.lines.next(deadline - time.monotonic())
        if line is None:
            raise AssertionError(f"{w.name} exited while waiting for {want}; lines {w.lines.seen}")
        want.discard(line)


def answer(w, command, timeout=PATIENCE):
    """Sends ``command``; its answer line (the next line starting with the
    command's first word)."""
    w.send(command)
    word = command.split(" ", 1)[0]
    first = "transfer" if word == "transfer-to" else word
    return w.expect(lambda l: l.startswith(first + " "), timeout, f"the answer to {command!r}")[1]


@pytest.fixture()
def workers():
    started = []
    yield started
    for w in started:
        w.kill()


def test_worker_transfer_commands_and_a_bound_leader_killed(server, client, job, workers):
    a = start(server, job, "a", "--bind")
    workers.append(a)
    a.expect(lambda l: l == "elected token=1", PATIENCE, "a elected")
    assert answer(a, "transfer") == "transfer no-successor", "nobody waits"

    b = start(server, job, "b", "--bind")
    workers.append(b)
    server.wait_waiters(1)
    assert answer(b, "transfer") == "transfer not-leader"

    a.send("transfer")
    expect_all(a, ["transfer ok token=2", "lost token=1"])
    b.expect(lambda l: l == "elected token=2", PATIENCE, "b elected")
    assert tenure_end(server, job, 1) == pb.Tenure.END_TRANSFERRED

    server.wait_waiters(1)  # a campaigns again, behind b
    b.send(f"transfer-to {a.holder}")
    expect_all(b, ["transfer ok token=3", "lost token=2"])
    a.expect(lambda l: l == "elected token=3", PATIENCE, "a elected again")
    server.wait_waiters(1)
    assert answer(a, "transfer-to nobody@nowhere") == "transfer no-successor"
    assert answer(a, "write x") == "write ok version=1"

    # The bound leader's process dies: its connection closes, and b leads at once.
    t = time.monotonic()
    a.proc.kill()
    a.proc.wait(PATIENCE)
    b.expect(lambda l: l == "elected token=4", TTL_MS / 3000, "b elected after a was killed")
    assert time.monotonic() - t < TTL_MS / 3000, "released by the connection's end, not expiry"
    assert tenure_end(server, job, 3) == pb.Tenure.END_CONNECTION_CLOSED

    # Lost behind its back: the transfer says so, and the elector reports the loss.
    client.release(job, b.holder, 4)
    b.send("transfer")
    expect_all(b, ["transfer lost", "lost token=4"])
    b.expect(lambda l: l == "elected token=5", PATIENCE, "b elected again")
    b.send("quit")
    expect_all(b, ["lost token=5", "bye"])
    assert b.wait(PATIENCE) == 0
    assert client.get_lease(job).holder is None


def test_a_worker_without_bind_keeps_its_lease_after_sigkill(server, client, job, workers):
    a = start(server, job, "a")
    workers.append(a)
    a.expect(lambda l: l == "elected token=1", PATIENCE, "a elected")
    a.signal(signal.SIGKILL)
    a.proc.wait(PATIENCE)
    time.sleep(1.0)
    l = client.get_lease(job)
    assert (l.holder, l.token) == (a.holder, 1), "an unbound lease runs for its TTL"
    client.release(job, a.holder, 1)


def test_a_yielding_worker_hands_over_to_a_preferred_one(server, client, job, workers):
    ttl_ms = 1500  # renewals every 0.5 s: the hand-over comes at the next one
    a = start(server, job, "a", "--yield", ttl_ms=ttl_ms)
    workers.append(a)
    a.expect(lambda l: l == "elected token=1", PATIENCE, "a elected")
    b = start(server, job, "b", "--preferred", ttl_ms=ttl_ms)
    workers.append(b)
    b.expect(lambda l: l == "elected token=2", PATIENCE, "b elected")
    a.expect(lambda l: l == "lost token=1", PATIENCE, "a's loss")
    assert tenure_end(server, job, 1) == pb.Tenure.END_TRANSFERRED

    # a campaigns again, behind b, and is not handed the lease back.
    server.wait_waiters(1)
    time.sleep(ttl_ms / 1000)
    l = client.get_lease(job)
    assert (l.holder, l.token) == (b.holder, 2)
    assert answer(b, "write x") == "write ok version=1"
    b.send("quit")
    expect_all(b, ["lost token=2", "bye"])
    assert b.wait(PATIENCE) == 0
    a.expect(lambda l: l == "elected token=3", PATIENCE, "a elected again")
    assert [l for l in a.lines.seen if l.startswith(("elected", "lost"))] == [
        "elected token=1", "lost token=1", "elected token=3"
    ]
    a.send("quit")
    expect_all(a, ["lost token=3", "bye"])
    assert a.wait(PATIENCE) == 0
