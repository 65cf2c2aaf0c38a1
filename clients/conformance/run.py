#!/usr/bin/env python3
"""The conformance scenario, written once (README.md beside this file is
its spec), run against each language's worker and a real
``leasehold serve``.

    run.py --workers workers.json [--lang python --lang go ...] [--mixed A:B ...]
           [--results results.json]

``workers.json`` maps a language to the argv of its worker (the flags
``--server --job --name --ttl-ms`` are appended, then ``--bind``,
``--preferred`` or ``--yield`` where a step needs them). Server-side state
is checked with the Rust ``leasehold`` CLI, the reference implementation,
and the server's /metrics, so that no client under test checks itself.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

TTL_MS = 1000
JOB = "conformance"
#: Generous bound for what should take well under a second; JVM start-up
#: on a loaded 2-core machine included.
STEP = 20.0
#: Step 4: a waiting elector takes over within this long after the
#: leader's graceful shutdown has released the lease.
HANDOVER_LIMIT = 0.050

STEPS = [
    (1, "two electors race for one job: exactly one leads"),
    (2, "leader paused past the TTL (SIGSTOP): the other takes over with token+1"),
    (3, "the old leader's fenced write gets the typed Fenced error, and its elector reports the loss"),
    (4, "graceful shutdown (SIGTERM) releases; the waiting elector takes over within 50 ms"),
    (5, "bad input gets the typed invalid-argument error naming the field"),
    (6, "two electors with one name in one process are two holders: one leads, the old token is fenced"),
    (7, "leader and waiter SIGTERMed together (cancel at release): the job is never left held"),
    (8, "a bound leader that dies (SIGKILL) hands over at once, not after the TTL"),
    (9, "transfer: no successor keeps the lease; to the first waiter, or to a named one; a follower is refused"),
    (10, "a yielding leader hands over to a preferred candidate at its next renewal, and does not get it back"),
]
TWIN_JOB = "conformance-twin"
#: Step 7: its job, its rounds, and a TTL long enough that a grant left
#: behind by a cancelled Acquire would still be held when it is checked.
CANCEL_JOB = "conformance-cancel"
CANCEL_ROUNDS = 5
CANCEL_TTL_MS = 30_000
#: Steps 8 and 9: their job, and a TTL long enough that a hand-over by
#: expiry cannot pass for one by the connection's close.
BIND_JOB = "conformance-bind"
BIND_TTL_MS = 5000
#: Step 10: its job and TTL (the yielder renews, and so may hand over,
#: every TTL/3).
PREFERRED_JOB = "conformance-preferred"
PREFERRED_TTL_MS = 1500


class StepFailed(AssertionError):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise StepFailed(msg)


class Cli:
    """The Rust CLI against the server under test."""

    def __init__(self, server: harness.ServerProcess) -> None:
        self.bin = str(harness.server_binary())
        self.url = server.url

    def lease(self, job: str) -> Tuple[Optional[str], int]:
        """(holder or None, token) of ``job``."""
        out = subprocess.run(
            [self.bin, "status", "--server", self.url, job], capture_output=True, text=True, timeout=10, check=True
        ).stdout
        for line in out.splitlines()[1:]:
            cols = line.split()
            if cols and cols[0] == job:
                return (None if cols[1] == "-" else cols[1]), int(cols[2])
        return None, 0

    def read(self, job: str, key: str) -> Tuple[Optional[str], int, int]:
        """(value or None, token, version) of (job, key)."""
        p = subprocess.run(
            [self.bin, "read", "--meta", "--server", self.url, job, key], capture_output=True, text=True, timeout=10
        )
        meta = dict(kv.split("=", 1) for kv in p.stderr.split() if "=" in kv)
        value = p.stdout if meta.get("found") == "true" else None
        return value, int(meta.get("token", 0)), int(meta.get("version", 0))

    def history(self, job: str) -> Dict[int, Tuple[str, str]]:
        """{token: (holder, how it ended)} from ``leasehold history``; how
        is its HOW column (``-`` while it leads, ``released``,
        ``connection closed``, ``transferred``...)."""
        out = subprocess.run(
            [self.bin, "history", "--server", self.url, job], capture_output=True, text=True, timeout=10, check=True
        ).stdout
        tenures = {}
        for line in out.splitlines()[1:]:
            # TOKEN HOLDER GRANTED TTL ENDED HOW [(principal P)]
            cols = line.split(None, 5)
            if len(cols) == 6 and cols[0].isdigit():
                tenures[int(cols[0])] = (cols[1], cols[5].split(" (principal ", 1)[0])
        return tenures

    def how(self, job: str, token: int) -> str:
        """How the tenure of ``token`` ended, per ``leasehold history``."""
        return self.history(job).get(token, ("", "(not in the history)"))[1]


class Worker(harness.LineProcess):
    def __init__(
        self,
        argv: List[str],
        label: str,
        server: harness.ServerProcess,
        job: str = JOB,
        ttl_ms: int = TTL_MS,
        flags: Tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            [*argv, "--server", server.target, "--job", job, "--name", label, "--ttl-ms", str(ttl_ms), *flags],
            label,
            cwd=str(harness.ROOT),
        )
        _, line = self.expect(lambda l: l.startswith("holder "), STEP, "the holder line")
        self.holder = line.split(" ", 1)[1]

    def printed(self, line: str) -> bool:
        return line in self.lines.seen

    def command(self, cmd: str, answer: str) -> str:
        self.send(cmd)
        return self.expect(lambda l: l.split(" ")[0] == answer, STEP, f"the answer to {cmd!r}")[1]

    def saw(self, line: str, timeout: float = STEP) -> float:
        """Waits for ``line`` unless it was printed already (a command's
        answer may come after it); when it arrived, or now if it had."""
        if self.printed(line):
            return time.monotonic()
        return self.expect(lambda l: l == line, timeout, repr(line))[0]

    def elected_lines(self) -> List[str]:
        return [l for l in self.lines.seen if l.startswith("elected")]


def first_elected(workers: List[Worker], timeout: float) -> Tuple[Worker, float, str]:
    """The first worker to print an ``elected`` line, reading both."""
    deadline = time.monotonic() + timeout
    while True:
        for w in workers:
            try:
                at, line = w.lines.next(0.01)
            except TimeoutError:
                continue
            if line is None:
                raise StepFailed(f"{w.name} ended its output: {w.lines.seen}")
            if line.startswith("elected"):
                return w, at, line
        if time.monotonic() > deadline:
            raise StepFailed(f"nobody elected within {timeout}s: " + "; ".join(f"{w.name}: {w.lines.seen}" for w in workers))


def scenario(argv_a: List[str], argv_b: List[str], label: str) -> Dict[int, str]:
    """Runs the scenario once; {step: "pass" | "FAIL: why"}."""
    results: Dict[int, str] = {}
    server = harness.ServerProcess()
    cli = Cli(server)
    workers: List[Worker] = []
    current = 0
    try:
        # 1. Two electors race for one job: exactly one leads.
        current = 1
        a = Worker(argv_a, f"{label}-a", server)
        b = Worker(argv_b, f"{label}-b", server)
        workers = [a, b]
        leader, _, line = first_elected(workers, STEP)
        follower = b if leader is a else a
        check(line == "elected token=1", f"first election: {line!r}")
        holder, token = cli.lease(JOB)
        check((holder, token) == (leader.holder, 1), f"server says {holder} token {token}, {leader.name} says it leads")
        server.wait_waiters(1, STEP)  # the follower is queued behind the leader
        check(not any(l.startswith("elected") for l in follower.lines.seen), f"both lead: {follower.lines.seen}")
        check(cli.lease(JOB) == (leader.holder, 1), "the leader changed while both ran")
        check(leader.command("write a", "write") == "write ok version=1", "the leader's first write")
        results[1] = "pass"

        # 2. The leader is paused past the TTL; the other takes over, token 2.
        current = 2
        leader.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        harness.wait_until(lambda: cli.lease(JOB)[1] >= 2, STEP, "a new grant after SIGSTOP")
        took = time.monotonic() - stopped
        check(cli.lease(JOB) == (follower.holder, 2), f"after SIGSTOP the server says {cli.lease(JOB)}")
        check(took >= TTL_MS / 1000 * 0.5, f"taken over {took:.3f}s after SIGSTOP: before the lease could expire")
        _, line = follower.expect(lambda l: l.startswith("elected"), STEP, "the follower's election")
        check(line == "elected token=2", f"follower: {follower.lines.seen}")
        results[2] = "pass"

        # 3. The old leader wakes; its in-flight write is fenced before the
        #    new leader wrote anything, and its elector reports the loss.
        current = 3
        leader.signal(signal.SIGCONT)
        answer = leader.command("write b", "write")
        check(answer == "write fenced current=2", f"stale write: {answer!r}")
        if not leader.printed("lost token=1"):
            leader.expect(lambda l: l == "lost token=1", STEP, "the old leader's loss")
        check(cli.read(JOB, "status") == ("a", 1, 1), f"the store after the stale write: {cli.read(JOB, 'status')}")
        check(cli.lease(JOB) == (follower.holder, 2), "the fenced worker disturbed the new leader")
        results[3] = "pass"

        # 4. Graceful shutdown of the new leader releases; the old leader,
        #    campaigning again with a waiting Acquire, takes over at once.
        current = 4
        server.wait_waiters(1, STEP)
        sigterm = time.monotonic()
        follower.signal(signal.SIGTERM)
        bye_at, _ = follower.expect(lambda l: l == "bye", STEP, "bye after SIGTERM")
        check(follower.printed("lost token=2"), f"the shut-down leader did not report its loss: {follower.lines.seen}")
        code = follower.wait(STEP)
        check(code == 0, f"the shut-down leader exited with {code}")
        elected_at, line = leader.expect(lambda l: l.startswith("elected"), STEP, "the waiting elector's election")
        check(line == "elected token=3", f"after the release: {line!r}")
        handover = elected_at - bye_at
        total = elected_at - sigterm
        check(handover <= HANDOVER_LIMIT, f"took over {handover * 1000:.1f} ms after the release (limit 50 ms)")
        check(total < TTL_MS / 1000, f"took over {total:.3f}s after SIGTERM: by expiry, not by release")
        check(cli.lease(JOB) == (leader.holder, 3), f"after the hand-over the server says {cli.lease(JOB)}")
        results[4] = f"pass ({max(handover, 0) * 1000:.1f} ms after release, {total * 1000:.0f} ms after SIGTERM)"

        # 5. Bad input: typed invalid-argument errors naming the field.
        current = 5
        for case, want in [
            ("job", "bad job invalid field=job"),
            ("ttl", "bad ttl invalid field=ttl"),
            ("key", "bad key invalid field=key"),
            ("token", "bad token unknown-token current=3"),
        ]:
            got = leader.command(f"bad {case}", "bad")
            check(got == want, f"bad {case}: {got!r}, want {want!r}")
        check(cli.lease(JOB) == (leader.holder, 3), "bad input changed the lease")
        check(cli.read(JOB, "status") == ("a", 1, 1), "bad input changed the store")
        # And a clean exit, releasing.
        check(leader.command("quit", "bye") == "bye", "quit")
        check(leader.wait(STEP) == 0, "the last worker's exit code")
        check(cli.lease(JOB) == (None, 3), f"after quit the server says {cli.lease(JOB)}")
        results[5] = "pass"

        # 6. Two electors with the same name for one job in one process
        #    (worker A's language): two holders, exactly one leads; when it
        #    stops the other takes over with a higher token, and the old
        #    leader's token is fenced.
        current = 6
        c = Worker(argv_a, f"{label}-c", server)
        workers.append(c)
        c.send(f"twin {TWIN_JOB}")
        holders = {}
        for _ in range(2):
            _, line = c.expect(lambda l: l.startswith("twin holder "), STEP, "the twins' holder lines")
            _, _, i, h = line.split(" ", 3)
            holders[int(i)] = h
        check(len(holders) == 2 and holders[0] != holders[1], f"one holder for two electors: {holders}")
        check(all(h.startswith(f"{label}-c@") for h in holders.values()), f"holders {holders}")
        _, line = c.expect(lambda l: l.startswith("twin elected "), STEP, "a twin's election")
        _, _, i, tok = line.split(" ")
        first, second = int(i), 1 - int(i)
        check(tok == "token=1", f"first twin election: {line!r}")
        check(cli.lease(TWIN_JOB) == (holders[first], 1), f"server says {cli.lease(TWIN_JOB)}")
        server.wait_waiters(1, STEP)  # the other twin is queued
        check(not any(l.startswith(f"twin elected {second} ") for l in c.lines.seen), f"both lead: {c.lines.seen}")
        got = c.command(f"twin-write {second} x", "twin-write")
        check(got == "twin-write error never-led", f"the follower's write: {got!r}")
        got = c.command(f"twin-write {first} a", "twin-write")
        check(got == "twin-write ok version=1", f"the leader's write: {got!r}")
        check(c.command(f"twin-stop {first}", "twin-stop") == "twin-stop done", "stopping the leading twin")
        # The other twin may be elected before the stop's answer is printed
        # (command() skips the lines before its answer): look there first.
        elected = [l for l in c.lines.seen if l.startswith(f"twin elected {second} ")]
        if elected:
            line = elected[-1]
        else:
            _, line = c.expect(lambda l: l.startswith(f"twin elected {second} "), STEP, "the other twin's election")
        check(line == f"twin elected {second} token=2", f"the other twin: {line!r}")
        check(cli.lease(TWIN_JOB) == (holders[second], 2), f"after the stop the server says {cli.lease(TWIN_JOB)}")
        got = c.command(f"twin-write {first} b", "twin-write")
        check(got == "twin-write fenced current=2", f"the old leader's write: {got!r}")
        check(c.command("quit", "bye") == "bye", "quit")
        check(c.wait(STEP) == 0, "the twins' worker's exit code")
        check(cli.lease(TWIN_JOB) == (None, 2), f"after quit the server says {cli.lease(TWIN_JOB)}")
        results[6] = "pass"

        # 7. Cancel at release: the leader (A's language) and a waiter
        #    (B's) are SIGTERMed in the same instant, so the leader's
        #    release and the waiter's cancelled Acquire race. Whatever
        #    wins, once both have exited the job is free: a grant the
        #    waiter never learned of is given back (by the server, or by
        #    the waiter's client), not left held for a whole TTL.
        current = 7
        for round_ in range(CANCEL_ROUNDS):
            lead = Worker(argv_a, f"{label}-lead{round_}", server, CANCEL_JOB, CANCEL_TTL_MS)
            workers.append(lead)
            lead.expect(lambda l: l.startswith("elected"), STEP, "the leader's election")
            harness.wait_until(lambda: cli.lease(CANCEL_JOB)[0] == lead.holder, STEP, "the lead's lease")
            waiter = Worker(argv_b, f"{label}-wait{round_}", server, CANCEL_JOB, CANCEL_TTL_MS)
            workers.append(waiter)
            server.wait_waiters(1, STEP)
            lead.signal(signal.SIGTERM)
            waiter.signal(signal.SIGTERM)
            for w in (lead, waiter):
                w.expect(lambda l: l == "bye", STEP, "bye after SIGTERM")
                code = w.wait(STEP)
                check(code == 0, f"{w.name} exited with {code}")
            holder, token = cli.lease(CANCEL_JOB)
            check(
                holder is None,
                f"round {round_}: after both exited the job is still held by {holder} (token {token}); "
                f"the waiter printed {waiter.lines.seen}",
            )
        results[7] = f"pass ({CANCEL_ROUNDS} rounds)"

        # 8. A bound leader that dies hands over at once: its kernel closes
        #    its connection, and the server releases the lease bound to it
        #    (worker A's language dies, B's takes over), long before the TTL.
        current = 8
        dying = Worker(argv_a, f"{label}-bind-a", server, BIND_JOB, BIND_TTL_MS, ("--bind",))
        workers.append(dying)
        _, line = dying.expect(lambda l: l.startswith("elected"), STEP, "the bound leader's election")
        check(line == "elected token=1", f"first election on {BIND_JOB}: {line!r}")
        check(cli.lease(BIND_JOB) == (dying.holder, 1), f"server says {cli.lease(BIND_JOB)}")
        heir = Worker(argv_b, f"{label}-bind-b", server, BIND_JOB, BIND_TTL_MS, ("--bind",))
        workers.append(heir)
        server.wait_waiters(1, STEP)
        check(not heir.elected_lines(), f"both lead: {heir.lines.seen}")
        expiries = server.metric("leasehold_expiries_total")
        killed = time.monotonic()
        dying.signal(signal.SIGKILL)
        elected_at, line = heir.expect(lambda l: l.startswith("elected"), STEP, "the waiter's election")
        took = elected_at - killed
        check(line == "elected token=2", f"after the SIGKILL: {line!r}")
        check(
            took < BIND_TTL_MS / 1000 / 2,
            f"elected {took:.3f}s after the SIGKILL: not before half the TTL ({BIND_TTL_MS} ms), as by expiry",
        )
        check(cli.lease(BIND_JOB) == (heir.holder, 2), f"after the SIGKILL the server says {cli.lease(BIND_JOB)}")
        check(cli.how(BIND_JOB, 1) == "connection closed", f"token 1 ended: {cli.how(BIND_JOB, 1)!r}")
        check(server.metric("leasehold_expiries_total") == expiries, "a lease expired: not handed over by the close")
        dying.wait(STEP)
        results[8] = f"pass ({took * 1000:.0f} ms after SIGKILL, TTL {BIND_TTL_MS} ms)"

        # 9. Transfer. The leader (B's language, token 2) with nobody
        #    waiting keeps its lease; with a waiter (A's language) it hands
        #    over, token 3, and campaigns again behind it; a follower cannot
        #    transfer; the new leader hands over to a named waiter (B's
        #    language), second in line, token 4.
        current = 9
        first = heir
        got = first.command("transfer", "transfer")
        check(got == "transfer no-successor", f"transfer with nobody waiting: {got!r}")
        check(cli.lease(BIND_JOB) == (first.holder, 2), f"after no-successor the server says {cli.lease(BIND_JOB)}")
        check(not first.printed("lost token=2"), f"it reported a loss: {first.lines.seen}")
        second = Worker(argv_a, f"{label}-bind-c", server, BIND_JOB, BIND_TTL_MS, ("--bind",))
        workers.append(second)
        server.wait_waiters(1, STEP)
        transfers = server.metric("leasehold_transfers_total")
        sent = time.monotonic()
        got = first.command("transfer", "transfer")
        check(got == "transfer ok token=3", f"transfer to the waiter: {got!r}")
        elected_at, line = second.expect(lambda l: l.startswith("elected"), STEP, "the successor's election")
        took_first = elected_at - sent
        check(line == "elected token=3", f"the successor: {line!r}")
        first.saw("lost token=2")
        check(cli.lease(BIND_JOB) == (second.holder, 3), f"after the transfer the server says {cli.lease(BIND_JOB)}")
        check(cli.how(BIND_JOB, 2) == "transferred", f"token 2 ended: {cli.how(BIND_JOB, 2)!r}")
        check(server.metric("leasehold_transfers_total") == transfers + 1, "leasehold_transfers_total did not count it")
        # The old leader campaigns again (its successor's Acquire has left
        # the line: it was answered before the successor said so).
        server.wait_waiters(1, STEP)
        got = first.command("transfer", "transfer")
        check(got == "transfer not-leader", f"the old leader's transfer as a follower: {got!r}")
        third = Worker(argv_b, f"{label}-bind-d", server, BIND_JOB, BIND_TTL_MS, ("--bind",))
        workers.append(third)
        server.wait_waiters(2, STEP)  # the old leader first, then the third
        got = third.command("transfer", "transfer")
        check(got == "transfer not-leader", f"a waiter's transfer: {got!r}")
        check(cli.lease(BIND_JOB) == (second.holder, 3), f"followers' transfers moved the lease: {cli.lease(BIND_JOB)}")
        sent = time.monotonic()
        got = second.command(f"transfer-to {third.holder}", "transfer")
        check(got == "transfer ok token=4", f"transfer-to the second in line: {got!r}")
        elected_at, line = third.expect(lambda l: l.startswith("elected"), STEP, "the named successor's election")
        took_named = elected_at - sent
        check(line == "elected token=4", f"the named successor: {line!r}")
        second.saw("lost token=3")
        check(cli.lease(BIND_JOB) == (third.holder, 4), f"after transfer-to the server says {cli.lease(BIND_JOB)}")
        check(cli.how(BIND_JOB, 3) == "transferred", f"token 3 ended: {cli.how(BIND_JOB, 3)!r}")
        check(first.elected_lines() == ["elected token=2"], f"the first in line was elected: {first.lines.seen}")
        check(server.metric("leasehold_transfers_total") == transfers + 2, "leasehold_transfers_total did not count it")
        for w in (first, second, third):
            w.kill()
        results[9] = (
            f"pass (successor elected {took_first * 1000:.0f} ms after transfer, "
            f"{took_named * 1000:.0f} ms after transfer-to)"
        )

        # 10. Preferred. A leader of A's language with --yield keeps its
        #     lease while only a plain waiter (B's) waits; a --preferred
        #     worker (B's) is queued ahead of that waiter and is handed the
        #     lease at the yielder's next renewal, token 2; the yielder
        #     campaigns again and gets nothing back while it leads.
        current = 10
        yielder = Worker(argv_a, f"{label}-yield", server, PREFERRED_JOB, PREFERRED_TTL_MS, ("--yield",))
        workers.append(yielder)
        _, line = yielder.expect(lambda l: l.startswith("elected"), STEP, "the yielder's election")
        check(line == "elected token=1", f"first election on {PREFERRED_JOB}: {line!r}")
        check(cli.lease(PREFERRED_JOB) == (yielder.holder, 1), f"server says {cli.lease(PREFERRED_JOB)}")
        plain = Worker(argv_b, f"{label}-plain", server, PREFERRED_JOB, PREFERRED_TTL_MS)
        workers.append(plain)
        server.wait_waiters(1, STEP)
        # Two renewals with a waiter that is not preferred: no hand-over.
        renewals = server.metric("leasehold_renewals_total")
        harness.wait_until(
            lambda: server.metric("leasehold_renewals_total") >= renewals + 2, STEP, "two renewals by the yielder"
        )
        check(
            cli.lease(PREFERRED_JOB) == (yielder.holder, 1), f"it yielded to a plain waiter: {cli.lease(PREFERRED_JOB)}"
        )
        preferred = Worker(argv_b, f"{label}-preferred", server, PREFERRED_JOB, PREFERRED_TTL_MS, ("--preferred",))
        workers.append(preferred)
        server.wait_waiters(2, STEP)
        queued = time.monotonic()
        elected_at, line = preferred.expect(lambda l: l.startswith("elected"), STEP, "the preferred one's election")
        took = elected_at - queued
        check(line == "elected token=2", f"the preferred candidate: {line!r}")
        check(
            took < PREFERRED_TTL_MS / 1000,
            f"elected {took:.3f}s after it queued: more than a TTL ({PREFERRED_TTL_MS} ms; renewals every TTL/3)",
        )
        yielder.saw("lost token=1")
        check(cli.lease(PREFERRED_JOB) == (preferred.holder, 2), f"server says {cli.lease(PREFERRED_JOB)}")
        check(cli.how(PREFERRED_JOB, 1) == "transferred", f"token 1 ended: {cli.how(PREFERRED_JOB, 1)!r}")
        check(not plain.elected_lines(), f"the plain waiter was elected: {plain.lines.seen}")
        # The yielder campaigns again, behind the plain waiter; three
        # renewals of the preferred leader (a TTL) change nothing.
        server.wait_waiters(2, STEP)
        renewals = server.metric("leasehold_renewals_total")
        harness.wait_until(
            lambda: server.metric("leasehold_renewals_total") >= renewals + 3,
            STEP,
            "three renewals by the preferred leader",
        )
        check(cli.lease(PREFERRED_JOB) == (preferred.holder, 2), f"the lease moved on: {cli.lease(PREFERRED_JOB)}")
        check(yielder.elected_lines() == ["elected token=1"], f"the yielder got it back: {yielder.lines.seen}")
        check(not plain.elected_lines(), f"the plain waiter was elected: {plain.lines.seen}")
        check(server.metric("leasehold_waiting_acquires") >= 2, "the yielder stopped campaigning")
        results[10] = f"pass (elected {took * 1000:.0f} ms after it queued, TTL {PREFERRED_TTL_MS} ms)"
    except (StepFailed, AssertionError, TimeoutError, subprocess.SubprocessError, OSError) as e:
        results[current] = f"FAIL: {e}"
        sys.stderr.write(f"[{label}] step {current} failed: {e}\n")
        for w in workers:
            sys.stderr.write(f"  {w.name} printed: {w.lines.seen}\n")
        if not isinstance(e, StepFailed):
            traceback.print_exc()
    finally:
        for w in workers:
            w.kill()
        server.stop()
    for n, _ in STEPS:
        results.setdefault(n, "not run")
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", required=True, help="JSON: language -> worker argv")
    p.add_argument("--lang", action="append", help="languages to run (default: all in the workers file)")
    p.add_argument("--mixed", action="append", default=[], help="LANG_A:LANG_B, one elector in each")
    p.add_argument("--results", help="write the results here as JSON")
    args = p.parse_args()
    workers = json.loads(Path(args.workers).read_text())
    runs = [(lang, workers[lang], workers[lang]) for lang in (args.lang or list(workers))]
    for pair in args.mixed:
        x, y = pair.split(":")
        runs.append((f"{x}+{y}", workers[x], workers[y]))

    table: Dict[str, Dict[int, str]] = {}
    for label, argv_a, argv_b in runs:
        t = time.monotonic()
        table[label] = scenario(argv_a, argv_b, label)
        print(f"conformance {label}: {time.monotonic() - t:.1f}s", flush=True)
        for n, title in STEPS:
            print(f"  {n}. {title}: {table[label][n]}", flush=True)

    failed = sum(1 for r in table.values() for v in r.values() if not v.startswith("pass"))
    passed = sum(1 for r in table.values() for v in r.values() if v.startswith("pass"))
    print()
    print("| language | " + " | ".join(f"{n}" for n, _ in STEPS) + " |")
    print("|---|" + "---|" * len(STEPS))
    for label, r in table.items():
        print(f"| {label} | " + " | ".join("pass" if r[n].startswith("pass") else "FAIL" for n, _ in STEPS) + " |")
    print()
    if args.results:
        Path(args.results).write_text(json.dumps(table, indent=2) + "\n")
    print(f"conformance: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
