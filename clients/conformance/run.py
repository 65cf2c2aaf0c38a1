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
    (11, "locks (the async API where the language has one): the second waits, unlock hands over, a loss is reported; WriteStream writes fenced by the lock's token"),
    (12, "observe and on-new-leader: every change and every grant, in token order, across languages"),
    (13, "fleets: two ElectorSets over KeepAlive on the same jobs; one job expired steps down alone; a resign hands over the rest"),
    (14, "history and DeleteJob: the history matches the server's; a held job is in use, a free one deleted, then absent"),
    (15, "TLS and a bearer token: two electors over TLS race, one leads and writes, the other takes over on quit"),
    (16, "a leader's value and its candidates: leader(), observe and on-new-leader carry the value, set-value is seen, ListWaiters in line order, across languages"),
    (17, "counted leases: two electors of two languages lead at once in two slots; a third waits and gets the slot that frees with its token + 1; another count or one over 100 is refused naming slots"),
    (18, "shards: members of two languages share a group's 4 shards 2 and 2 by handover with token + 1; the old owner's write is fenced; another count is refused naming shards; a leave hands its shards over"),
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
#: Steps 11 to 14: the job each worker's own elector campaigns for (the
#: steps drive the workers' other parts: locks, follows, fleets), and
#: the jobs the steps use.
AUX_JOB = "conformance-aux"
LOCK_JOB = "conformance-lock"
OBSERVE_JOB = "conformance-observe"
FLEET_PREFIX = "conformance-fleet-"
FLEET_JOBS = 6
DELETE_JOB = "conformance-delete"
#: Step 15: its job, on a second server with TLS and a policy.
TLS_JOB = "conformance-tls"
#: Step 16: its job.
VALUE_JOB = "conformance-value"
#: Step 17: its counted job.
SLOTS_JOB = "conformance-slots"
#: Step 18: its shard group, and the job its workers' electors campaign for.
SHARDS_GROUP = "conformance-shards"
SHARDS_AUX_JOB = "conformance-shards-aux"


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
                how = cols[5].split(" (principal ", 1)[0].split(" value=", 1)[0]
                tenures[int(cols[0])] = (cols[1], how)
        return tenures

    def values(self, job: str) -> Tuple[Optional[str], Dict[int, Optional[str]]]:
        """The live lease's value, and each tenure's, from ``status`` and
        ``history`` with ``--output json``."""
        run = lambda *a: json.loads(
            subprocess.run([self.bin, *a, "--server", self.url, "--output", "json", job],
                           capture_output=True, text=True, timeout=10, check=True).stdout
        )
        live = [l.get("value") for l in run("status") if l["job"] == job]
        tenures = {t["token"]: t.get("value") for t in run("history")["tenures"]}
        return (live[0] if live else None), tenures

    def group(self, group: str) -> Dict[str, Tuple[str, int]]:
        """Each owned shard's (owner, token) of ``group``, from
        ``leasehold shards --output json``, by shard number."""
        out = subprocess.run(
            [self.bin, "shards", "--server", self.url, "--output", "json", group],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        return {o["shard"]: (o["member"], o["token"]) for o in json.loads(out)["owners"] if o["member"]}

    def chaos_expire(self, job: str) -> None:
        subprocess.run(
            [self.bin, "chaos", "expire", "--server", self.url, job], capture_output=True, text=True, timeout=10,
            check=True,
        )

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


def calls(server: harness.ServerProcess, method: str) -> float:
    """How many calls of ``method`` the server answered, by
    ``leasehold_rpc_responses_total{method,code}`` (a stream counts when
    it ends)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{server.admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    prefix = f'leasehold_rpc_responses_total{{method="{method}",'
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(prefix))


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
    # The chaos API ends a lock's or a fleet job's lease on purpose (steps
    # 11 and 13).
    server = harness.ServerProcess(extra=["--enable-chaos"])
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
        for w in (yielder, plain, preferred):
            w.kill()

        # 11. Locks. A of the first language takes the lock (the async
        #     idiom where the language has one), writes through its
        #     WriteStream; B of the second waits for it, and gets it,
        #     token 2, when A unlocks; A's write with its old token is
        #     fenced, B's goes through; the chaos API expires B's lease and
        #     B's lock reports the loss, and does not take the lock again.
        current = 11
        la = Worker(argv_a, f"{label}-lock-a", server, AUX_JOB)
        lb = Worker(argv_b, f"{label}-lock-b", server, AUX_JOB)
        workers += [la, lb]
        # One of the two leads AUX_JOB, the other waits for it.
        server.wait_waiters(1, STEP)
        base = int(server.metric("leasehold_waiting_acquires"))
        la.send(f"lock {LOCK_JOB}")
        _, line = la.expect(lambda l: l.startswith(f"lock held {LOCK_JOB} "), STEP, "A's lock")
        check(line.startswith(f"lock held {LOCK_JOB} token=1 holder="), f"A's lock: {line!r}")
        holder_a = line.split("holder=", 1)[1]
        check(cli.lease(LOCK_JOB) == (holder_a, 1), f"server says {cli.lease(LOCK_JOB)}")
        got = la.command("lock-write a", "lock-write")
        check(got == "lock-write ok version=1", f"A's write through its WriteStream: {got!r}")
        lb.send(f"lock {LOCK_JOB}")
        server.wait_waiters(base + 1, STEP)
        check(
            not any(l.startswith("lock held") for l in lb.lines.seen), f"B holds the lock A holds: {lb.lines.seen}"
        )
        check(la.command("unlock", "unlock") == "unlock done", "A's unlock")
        _, line = lb.expect(lambda l: l.startswith(f"lock held {LOCK_JOB} "), STEP, "B's lock")
        check(line.startswith(f"lock held {LOCK_JOB} token=2 holder="), f"B's lock: {line!r}")
        holder_b = line.split("holder=", 1)[1]
        check(holder_b != holder_a, "one holder for two locks")
        check(cli.lease(LOCK_JOB) == (holder_b, 2), f"after the unlock the server says {cli.lease(LOCK_JOB)}")
        got = la.command("lock-write b", "lock-write")
        check(got == "lock-write fenced current=2", f"A's write with its old token: {got!r}")
        got = lb.command("lock-write c", "lock-write")
        check(got == "lock-write ok version=2", f"B's write: {got!r}")
        check(cli.read(LOCK_JOB, "status") == ("c", 2, 2), f"the store: {cli.read(LOCK_JOB, 'status')}")
        cli.chaos_expire(LOCK_JOB)
        lb.saw(f"lock lost {LOCK_JOB} token=2")
        got = lb.command("lock-write d", "lock-write")
        check(got == "lock-write fenced current=2", f"B's write after its loss: {got!r}")
        check(lb.command("unlock", "unlock") == "unlock done", "B's unlock")
        check(cli.lease(LOCK_JOB) == (None, 2), f"a lost lock took the job again: {cli.lease(LOCK_JOB)}")
        results[11] = "pass"

        # 12. Observe and on-new-leader. A holds a lock on the job; B
        #     follows it (an elector with an on-new-leader callback, and an
        #     observation): it sees A's grant, then, once A unlocks, its own
        #     elector's, in token order; then A locks again once B stops.
        current = 12
        la.send(f"lock {OBSERVE_JOB}")
        _, line = la.expect(lambda l: l.startswith(f"lock held {OBSERVE_JOB} "), STEP, "A's lock")
        check(line == f"lock held {OBSERVE_JOB} token=1 holder={line.split('holder=', 1)[1]}", line)
        holder_a = line.split("holder=", 1)[1]
        lb.send(f"follow {OBSERVE_JOB}")
        _, line = lb.expect(lambda l: l.startswith("follow holder "), STEP, "B's follow holder line")
        holder_f = line.split(" ", 2)[2]
        lb.saw(f"observe {OBSERVE_JOB} holder={holder_a} token=1")
        lb.saw(f"newleader {OBSERVE_JOB} holder={holder_a} token=1")
        server.wait_waiters(base + 1, STEP)  # B's elector waits
        check(la.command("unlock", "unlock") == "unlock done", "A's unlock")
        lb.saw(f"follow elected {OBSERVE_JOB} token=2")
        lb.saw(f"newleader {OBSERVE_JOB} holder={holder_f} token=2")
        lb.saw(f"observe {OBSERVE_JOB} holder={holder_f} token=2")
        check(cli.lease(OBSERVE_JOB) == (holder_f, 2), f"server says {cli.lease(OBSERVE_JOB)}")
        la.send(f"lock {OBSERVE_JOB}")
        server.wait_waiters(base + 1, STEP)
        check(lb.command("follow-stop", "follow-stop") == "follow-stop done", "B's follow-stop")
        _, line = la.expect(lambda l: l.startswith(f"lock held {OBSERVE_JOB} "), STEP, "A's second lock")
        check(line.startswith(f"lock held {OBSERVE_JOB} token=3 "), f"A's second lock: {line!r}")
        reports = [l for l in lb.lines.seen if l.startswith(f"newleader {OBSERVE_JOB} ")]
        tokens = [int(l.rsplit("token=", 1)[1]) for l in reports]
        check(tokens == sorted(set(tokens)) and tokens[:2] == [1, 2], f"on-new-leader reports: {reports}")
        observed = [l for l in lb.lines.seen if l.startswith(f"observe {OBSERVE_JOB} ")]
        check(
            observed.index(f"observe {OBSERVE_JOB} holder={holder_a} token=1")
            < observed.index(f"observe {OBSERVE_JOB} holder={holder_f} token=2"),
            f"observed out of order: {observed}",
        )
        check(la.command("unlock", "unlock") == "unlock done", "A's unlock")
        results[12] = "pass"

        # 13. Fleets. A's ElectorSet leads FLEET_JOBS jobs and keeps them
        #     for three TTLs over one KeepAlive stream; B's waits on every
        #     one. The chaos API expires one job: A steps down from it
        #     alone, B is granted it. A resigns: B is granted the rest.
        current = 13
        jobs = [f"{FLEET_PREFIX}{i}" for i in range(FLEET_JOBS)]
        la.send(f"fleet {FLEET_JOBS} {FLEET_PREFIX}")
        _, line = la.expect(lambda l: l.startswith("fleet holder "), STEP, "A's fleet holder line")
        fleet_a = line.split(" ", 2)[2]
        for j in jobs:
            la.saw(f"fleet elected {j} token=1")
            check(cli.lease(j) == (fleet_a, 1), f"{j}: server says {cli.lease(j)}")
        lb.send(f"fleet {FLEET_JOBS} {FLEET_PREFIX}")
        _, line = lb.expect(lambda l: l.startswith("fleet holder "), STEP, "B's fleet holder line")
        fleet_b = line.split(" ", 2)[2]
        server.wait_waiters(base + FLEET_JOBS, STEP)
        # Renewed over KeepAlive, not unary Renew: of the renewals the
        # server counts meanwhile, at least two rounds of the fleet's are
        # not unary calls (the workers' own electors renew AUX_JOB with
        # Renew; a stream's call is counted only when it ends).
        renewals, unary = server.metric("leasehold_renewals_total"), calls(server, "Renew")
        time.sleep(3 * TTL_MS / 1000)
        streamed = (server.metric("leasehold_renewals_total") - renewals) - (calls(server, "Renew") - unary)
        check(streamed >= 2 * FLEET_JOBS, f"only {streamed:.0f} renewals not by unary Renew: not over KeepAlive")
        for j in jobs:
            check(cli.lease(j) == (fleet_a, 1), f"{j} after three TTLs: {cli.lease(j)}")
        gone = jobs[3]
        cli.chaos_expire(gone)
        la.saw(f"fleet lost {gone} token=1")
        lb.saw(f"fleet elected {gone} token=2")
        check(cli.lease(gone) == (fleet_b, 2), f"{gone}: server says {cli.lease(gone)}")
        for j in jobs:
            if j != gone:
                check(cli.lease(j) == (fleet_a, 1), f"{j} moved with {gone}: {cli.lease(j)}")
        check(la.command("fleet-stop", "fleet-stop") == "fleet-stop done", "A's fleet-stop")
        for j in jobs:
            if j != gone:
                lb.saw(f"fleet elected {j} token=2")
                check(cli.lease(j) == (fleet_b, 2), f"{j} after A's resign: {cli.lease(j)}")
        check(lb.command("fleet-stop", "fleet-stop") == "fleet-stop done", "B's fleet-stop")
        for j in jobs:
            check(cli.lease(j) == (None, 2), f"{j} after both resigned: {cli.lease(j)}")
        results[13] = "pass"

        # 14. History and DeleteJob. B reads the history of JOB (steps 1
        #     to 5): the same tokens as the server's CLI shows. A deletes
        #     LOCK_JOB (free since step 11): deleted, then absent; a job B
        #     holds a lock on is in use, and deleted once B unlocks.
        current = 14
        want = ",".join(str(t) for t in sorted(cli.history(JOB), reverse=True))
        got = lb.command(f"history {JOB}", "history")
        check(got == f"history {JOB} tokens={want}", f"history: {got!r}, the server's: {want}")
        check(la.command(f"delete-job {LOCK_JOB}", "delete-job") == "delete-job deleted", "deleting a free job")
        check(cli.lease(LOCK_JOB) == (None, 0), f"after the delete the server says {cli.lease(LOCK_JOB)}")
        check(la.command(f"delete-job {LOCK_JOB}", "delete-job") == "delete-job absent", "deleting it again")
        lb.send(f"lock {DELETE_JOB}")
        # (Its first token is above every deleted job's: no token is
        # issued twice, even to a job of the same name made again.)
        _, line = lb.expect(lambda l: l.startswith(f"lock held {DELETE_JOB} "), STEP, "B's lock")
        held = int(line.split("token=", 1)[1].split()[0])
        got = la.command(f"delete-job {DELETE_JOB}", "delete-job")
        check(got == "delete-job in-use", f"deleting a held job: {got!r}")
        check(cli.lease(DELETE_JOB)[1] == held, "the refused delete changed the job")
        check(lb.command("unlock", "unlock") == "unlock done", "B's unlock")
        got = la.command(f"delete-job {DELETE_JOB}", "delete-job")
        check(got == "delete-job deleted", f"deleting it once free: {got!r}")
        results[14] = "pass"
        for w in (la, lb):
            check(w.command("quit", "bye") == "bye", f"{w.name}: quit")

        # 15. TLS and a bearer token, on a second server with TLS, mutual
        #     TLS and a policy (clients/tools/pki.sh): electors of both
        #     languages connect with the CA and alice's token; one leads
        #     and writes; when it quits the other leads with token 2.
        current = 15
        secure = harness.ServerProcess(secure=True)
        try:
            assert secure.pki is not None
            token = (secure.pki / "alice.token").read_text().strip()
            flags = ("--ca", str(secure.pki / "ca.pem"), "--token", token)
            ta = Worker(argv_a, f"{label}-tls-a", secure, TLS_JOB, flags=flags)
            tb = Worker(argv_b, f"{label}-tls-b", secure, TLS_JOB, flags=flags)
            workers += [ta, tb]
            leader, _, line = first_elected([ta, tb], STEP)
            other = tb if leader is ta else ta
            check(line == "elected token=1", f"first election over TLS: {line!r}")
            check(leader.command("write a", "write") == "write ok version=1", "the leader's write over TLS")
            check(leader.command("quit", "bye") == "bye", "quit")
            _, line = other.expect(lambda l: l.startswith("elected"), STEP, "the other's election over TLS")
            check(line == "elected token=2", f"after the quit: {line!r}")
            got = other.command("write b", "write")
            check(got == "write ok version=2", f"the new leader's write over TLS: {got!r}")
            check(other.command("quit", "bye") == "bye", "quit")
        finally:
            for w in workers:
                w.kill()
            secure.stop()
        results[15] = "pass"

        # 16. A leader's value and its candidates. A (the first language)
        #     leads publishing a value; B's elector waits, publishing its
        #     own, and B follows the job: B's leader(), observation and
        #     on-new-leader carry A's value; A's set-value reaches B's
        #     observation (a change of value, same token); both languages
        #     list the same line in order; when A quits, B leads with its
        #     value, and the server's status and history agree.
        current = 16
        workers = []
        va = Worker(argv_a, f"{label}-value-a", server, VALUE_JOB, flags=("--value", "a-addr"))
        workers.append(va)
        # (A new job's first token is above the tokens of the jobs step 14
        # deleted: tokens are never issued twice.)
        _, line = va.expect(lambda l: l.startswith("elected"), STEP, "A's election")
        t = int(line.split("token=", 1)[1])
        check(cli.lease(VALUE_JOB) == (va.holder, t), f"A's election: {line!r}, the server's {cli.lease(VALUE_JOB)}")
        check(cli.values(VALUE_JOB)[0] == "a-addr", f"the server's value: {cli.values(VALUE_JOB)}")
        base = int(server.metric("leasehold_waiting_acquires"))
        vb = Worker(argv_b, f"{label}-value-b", server, VALUE_JOB, flags=("--value", "b-addr"))
        workers.append(vb)
        server.wait_waiters(base + 1, STEP)
        got = vb.command("leader", "leader")
        check(got == f"leader holder={va.holder} token={t} value=a-addr", f"B's leader(): {got!r}")
        vb.send(f"follow {VALUE_JOB}")
        _, line = vb.expect(lambda l: l.startswith("follow holder "), STEP, "B's follow holder line")
        holder_f = line.split(" ", 2)[2]
        vb.saw(f"observe {VALUE_JOB} holder={va.holder} token={t} value=a-addr")
        vb.saw(f"newleader {VALUE_JOB} holder={va.holder} token={t} value=a-addr")
        server.wait_waiters(base + 2, STEP)
        check(va.command("set-value a-moved", "set-value") == "set-value done", "A's set-value")
        vb.saw(f"observe {VALUE_JOB} holder={va.holder} token={t} value=a-moved")
        check(cli.values(VALUE_JOB)[0] == "a-moved", f"the server's value: {cli.values(VALUE_JOB)}")
        line_up = f"waiters n=2 {vb.holder} {holder_f}"
        for w in (va, vb):
            got = w.command(f"waiters {VALUE_JOB}", "waiters")
            check(got == line_up, f"{w.name}'s waiters: {got!r}, expected {line_up!r}")
        check(va.command("quit", "bye") == "bye", "A's quit")
        _, line = vb.expect(lambda l: l.startswith("elected"), STEP, "B's election")
        check(line == f"elected token={t + 1}", f"B's election: {line!r}")
        vb.saw(f"newleader {VALUE_JOB} holder={vb.holder} token={t + 1} value=b-addr")
        vb.saw(f"observe {VALUE_JOB} holder={vb.holder} token={t + 1} value=b-addr")
        live, tenures = cli.values(VALUE_JOB)
        check(live == "b-addr" and tenures.get(t) == "a-addr" and tenures.get(t + 1) == "b-addr",
              f"the server's value {live!r} and history {tenures}")
        got = vb.command(f"waiters {VALUE_JOB}", "waiters")
        check(got == f"waiters n=1 {holder_f}", f"B's waiters after the hand-over: {got!r}")
        check(vb.command("follow-stop", "follow-stop") == "follow-stop done", "B's follow-stop")
        check(vb.command("quit", "bye") == "bye", "B's quit")
        results[16] = "pass"

        # 17. Counted leases. A and B (two languages) campaign for a job
        #     with two slots: both lead at once, each in a slot of its own
        #     with a token of its own (the first of a new job: above the
        #     tokens of the jobs step 14 deleted), and the server agrees. C (A's language) waits:
        #     it holds the line's turn, leads nowhere. Another count, or
        #     one over 100, is refused naming `slots`. A writes on its
        #     slot's job and quits: C leads in that slot with its token + 1 and
        #     writes the next version of the same key.
        current = 17
        workers = []
        elected = {}
        for tag, argv in (("a", argv_a), ("b", argv_b)):
            w = Worker(argv, f"{label}-slots-{tag}", server, SLOTS_JOB, flags=("--slots", "2"))
            workers.append(w)
            _, line = w.expect(lambda l: l.startswith("elected"), STEP, f"{tag}'s election in a slot")
            parts = dict(kv.split("=", 1) for kv in line.split()[1:])
            check(parts.get("token", "").isdigit() and parts.get("job") == f"{SLOTS_JOB}#{parts.get('slot')}",
                  f"{tag}'s election: {line!r}")
            elected[tag] = (w, parts["job"], int(parts["token"]))
        (sa, job_a, ta), (sb, job_b, tb) = elected["a"], elected["b"]
        check({job_a, job_b} == {f"{SLOTS_JOB}#0", f"{SLOTS_JOB}#1"}, f"the slots: {job_a}, {job_b}")
        check(cli.lease(job_a) == (sa.holder, ta) and cli.lease(job_b) == (sb.holder, tb),
              f"the server's slots: {cli.lease(job_a)}, {cli.lease(job_b)}")
        sc = Worker(argv_a, f"{label}-slots-c", server, SLOTS_JOB, flags=("--slots", "2"))
        workers.append(sc)
        deadline = time.monotonic() + STEP
        while cli.lease(SLOTS_JOB)[0] != sc.holder:
            check(time.monotonic() < deadline, f"C never held the line's turn: {cli.lease(SLOTS_JOB)}")
            time.sleep(0.05)
        got = sb.command(f"acquire-slots {SLOTS_JOB} 3", "acquire-slots")
        check(got == "acquire-slots invalid field=slots", f"B asking for 3 slots: {got!r}")
        got = sa.command(f"acquire-slots {SLOTS_JOB} 101", "acquire-slots")
        check(got == "acquire-slots invalid field=slots", f"A asking for 101 slots: {got!r}")
        check(sa.command("write a", "write") == "write ok version=1", "A's write on its slot")
        check(sa.command("quit", "bye") == "bye", "A's quit")
        _, line = sc.expect(lambda l: l.startswith("elected"), STEP, "C's election in the freed slot")
        check(line == f"elected token={ta + 1} job={job_a} slot={job_a.rsplit('#', 1)[1]}", f"C's election: {line!r}")
        check(cli.lease(job_a) == (sc.holder, ta + 1), f"the server's {job_a}: {cli.lease(job_a)}")
        check(cli.lease(job_b) == (sb.holder, tb), f"B's slot moved: {cli.lease(job_b)}")
        check(sc.command("write c", "write") == "write ok version=2", "C's write on the slot")
        for w in (sb, sc):
            check(w.command("quit", "bye") == "bye", f"{w.name}: quit")
        results[17] = "pass"

        # 18. Shards. A (the first language) joins a group of 4 shards and
        #     owns all 4; B (the second) joins: A is revoked 2, which B is
        #     assigned with token + 1, and the server agrees. A's write on a
        #     moved shard with its old token is fenced, B's passes. C (A's
        #     language) naming another count is refused naming `shards`.
        #     A leaves: B is assigned A's 2 with token + 1 and owns all 4.
        current = 18
        workers = []
        ha = Worker(argv_a, f"{label}-shards-a", server, SHARDS_AUX_JOB)
        workers.append(ha)
        ha.send(f"shards {SHARDS_GROUP} 4")
        _, line = ha.expect(lambda l: l.startswith("shards member ") or l.startswith("shards invalid") or l.startswith("shards error"), STEP, "A's member line")
        check(line.startswith("shards member "), f"A's join: {line!r}")
        owned_a = {}
        while len(owned_a) < 4:
            _, line = ha.expect(lambda l: l.startswith("shards assigned "), STEP, "A's assignments")
            k, t = line.split()[2], int(line.split("token=", 1)[1])
            owned_a[int(k)] = t
        check(set(owned_a) == {0, 1, 2, 3}, f"A's shards: {owned_a}")
        hb = Worker(argv_b, f"{label}-shards-b", server, SHARDS_AUX_JOB)
        workers.append(hb)
        hb.send(f"shards {SHARDS_GROUP} 4")
        _, line = hb.expect(lambda l: l.startswith("shards member "), STEP, "B's member line")
        member_b = line.split(" ", 2)[2]
        owned_b = {}
        while len(owned_b) < 2:
            _, line = hb.expect(lambda l: l.startswith("shards assigned "), STEP, "B's assignments")
            k, t = int(line.split()[2]), int(line.split("token=", 1)[1])
            owned_b[k] = t
        for k, t in owned_b.items():
            check(t == owned_a[k] + 1, f"B's shard {k}: token {t}, A's was {owned_a[k]}")
            ha.saw(f"shards revoked {k}")
        deadline = time.monotonic() + STEP
        while True:
            g = cli.group(SHARDS_GROUP)
            if all(g.get(k) == (member_b, t) for k, t in owned_b.items()) and len(g) == 4:
                break
            check(time.monotonic() < deadline, f"the server's group: {g}, B's shards {owned_b}")
            time.sleep(0.05)
        moved = min(owned_b)
        got = ha.command(f"shards-write {moved} a", "shards-write")
        check(got == f"shards-write fenced current={owned_b[moved]}", f"A's write on moved shard {moved}: {got!r}")
        got = hb.command(f"shards-write {moved} b", "shards-write")
        check(got == "shards-write ok version=1", f"B's write on shard {moved}: {got!r}")
        hc = Worker(argv_a, f"{label}-shards-c", server, SHARDS_AUX_JOB)
        workers.append(hc)
        got = hc.command(f"shards {SHARDS_GROUP} 5", "shards")
        check(got == "shards invalid field=shards", f"C naming 5 shards: {got!r}")
        check(ha.command("shards-stop", "shards-stop") == "shards-stop done", "A's shards-stop")
        kept_a = {k: t for k, t in owned_a.items() if k not in owned_b}
        for k, t in kept_a.items():
            hb.saw(f"shards assigned {k} token={t + 1}")
        for w in (ha, hb, hc):
            check(w.command("quit", "bye") == "bye", f"{w.name}: quit")
        results[18] = "pass"
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
