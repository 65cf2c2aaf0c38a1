"""The conformance worker for Python (clients/conformance/README.md has
the protocol): one Elector for one job, driven over stdin, reporting on
stdout. Also a complete example of a worker: lead, write fenced by the
token, release on SIGTERM.

    python conformance_worker.py --server 127.0.0.1:50051 --job j --name w1 --ttl-ms 1000

``--bind`` builds the worker's elector with ``bind_to_stream=True``: if the
process dies, the server releases its lease at once. ``--preferred`` builds
it with ``preferred=True`` (it campaigns as a preferred candidate),
``--yield`` with ``yield_to_preferred=True`` (it hands over to a waiting
preferred candidate at its next renewal: ``lost token=N``, then campaigns
again). ``--ca FILE`` connects with TLS trusting that CA, ``--token
SECRET`` sends it as a bearer token; both apply to every client it makes.
``--value V`` builds the elector with ``value=V``: it publishes V (UTF-8)
with its grants, where to reach it; ``set-value <v>`` changes it (sent
with the next renewal), ``leader`` prints the leader's lease with its
value (``Elector.leader()``), and ``waiters <job>`` the job's line of
candidates (``Client.list_waiters``).

``--slots N`` builds the elector with ``slots=N``: it campaigns for one of
the N slots of a counted lease on the job, and its ``elected`` line names
the slot's job and the slot: ``elected token=<T> job=<job>#<k> slot=<k>``
(without ``--slots`` the line is ``elected token=<T>``, as before);
``write`` writes with the job its last lease was on, the slot's job.
``acquire-slots <job> <n>`` is one unary Acquire (wait 0) of ``<job>``
with ``slots=<n>``, as a holder of its own (``<name>@<new uuid>``) with
the worker's TTL, whose lease is left to run out: it answers
``acquire-slots ok job=<lease job> slot=<k> token=<T>``, ``acquire-slots
busy``, ``acquire-slots invalid field=<field>`` (the typed
``InvalidArgument``) or ``acquire-slots error <message>``.

Beyond the elector, the commands ``lock``/``lock-write``/``unlock`` (the
asyncio lock, on an event loop of its own thread, and writes through the
WriteStream), ``follow``/``follow-stop`` (an Elector's on_new_leader and
an observation, each line with the leader's value when it has one),
``fleet``/``fleet-stop`` (an ElectorSet), ``history`` and ``delete-job``.

``shards <group> <n>`` joins the shard group as a member named the
worker's name, with its TTL and a revoke timeout of the TTL, through
``AsyncShardMember.run`` (each shard's work waits until cancelled): it
prints ``shards member <id>``, then ``shards assigned <k> token=<T>``,
``shards revoked <k>`` (once the shard's work was cancelled, just before
the acknowledgement) and ``shards lost <k> token=<T>``; a refused join
prints ``shards invalid field=<f>`` or ``shards error <message>``.
``shards-write <k> <value>`` writes ``value`` under key ``status`` of the
job ``<group>/<k>`` with the token it last owned shard k with:
``shards-write ok version=<V>``, ``shards-write fenced current=<T>``,
``shards-write error never-owned`` or ``shards-write error <message>``.
``shards-stop`` leaves the group (``shards-stop done``); so do ``quit``
and SIGTERM.
"""

import argparse
import asyncio
import signal
import sys
import threading
import uuid
from typing import Optional

import leasehold
from leasehold.aio import AsyncClient

_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Shutdown(Exception):
    pass


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--ttl-ms", type=int, default=1000)
    p.add_argument("--bind", action="store_true", help="bind the elector's grants to its connection")
    p.add_argument("--preferred", action="store_true", help="campaign as a preferred candidate")
    p.add_argument(
        "--yield",
        dest="yield_to_preferred",
        action="store_true",
        help="hand over to a waiting preferred candidate at the next renewal",
    )
    p.add_argument("--ca", help="connect with TLS, trusting this CA (a PEM file)")
    p.add_argument("--token", help="send this bearer token on every call")
    p.add_argument("--value", help="the value the elector publishes with its grants (UTF-8)")
    p.add_argument(
        "--slots", type=int, default=0, help="campaign for one of N slots of a counted lease (a semaphore)"
    )
    args = p.parse_args()
    security = {"ca": args.ca, "token": args.token}

    # SIGTERM ends the command loop below, wherever it is: the handler
    # raises there, and what follows the loop resigns and says "bye". Until
    # the loop runs, SIGTERM is blocked (kept pending, not lost): it may
    # come as soon as the campaign reaches the server, before start() has
    # returned, and raised inside start() it would end the process with a
    # traceback, never resigning nor saying "bye". The threads started
    # meanwhile (gRPC's, the elector's) inherit the block, so it is
    # delivered to this one once unblocked.
    def on_term(signum, frame):
        raise Shutdown()

    signal.signal(signal.SIGTERM, on_term)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    client = leasehold.Client(args.server, **security)
    extras = Extras(client, args.server, security, args.name, args.ttl_ms / 1000)
    last_token = [None]  # the token we last led with, kept after losing
    last_job = [args.job]  # the job that lease was on: a counted one's slot job

    def elected(token: int) -> None:
        last_token[0] = token
        if not args.slots:
            say(f"elected token={token}")
            return
        # Read on the callback thread, right after the grant: the job and
        # slot of the leadership this callback reports.
        last_job[0] = elector.lease_job or args.job
        say(f"elected token={token} job={last_job[0]} slot={elector.slot}")

    def lost(token: int) -> None:
        say(f"lost token={token}")

    elector = leasehold.Elector(
        client,
        args.job,
        args.name,
        args.ttl_ms / 1000,
        on_elected=elected,
        on_lost=lost,
        bind_to_stream=args.bind,
        preferred=args.preferred,
        yield_to_preferred=args.yield_to_preferred,
        value=args.value,
        slots=args.slots,
    )
    say(f"holder {elector.holder}")
    elector.start()
    twins = []  # (elector, [last token]): two more electors, one name, one process
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "quit":
                break
            if cmd == "write":
                say(write(client, last_job[0], last_token[0], arg))
            elif cmd == "transfer":
                say(transfer(elector, None))
            elif cmd == "transfer-to":
                say(transfer(elector, arg))
            elif cmd == "bad":
                say(f"bad {arg} {bad(client, args.job, elector.holder, last_token[0], arg)}")
            elif cmd == "twin" and not twins:
                twins = start_twins(client, arg, args.name, args.ttl_ms / 1000)
            elif cmd == "twin-write":
                i, _, value = arg.partition(" ")
                e, last = twins[int(i)]
                say("twin-" + write(client, e.job, last[0], value))
            elif cmd == "twin-stop":
                twins[int(arg)][0].resign()
                say("twin-stop done")
            elif cmd == "set-value":
                say(set_value(elector, arg))
            elif cmd == "leader":
                say(leader(elector))
            elif cmd == "waiters":
                say(waiters(client, arg))
            elif cmd == "acquire-slots":
                say(acquire_slots(client, args.name, args.ttl_ms / 1000, arg))
            elif extras.handle(cmd, arg):
                pass
            elif cmd:
                say(f"error unknown command {cmd!r}")
    except Shutdown:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for e, _ in twins:
        e.resign()
    extras.close()  # the lock, the follow elector and the fleet
    elector.resign()  # releases the lease if held
    say("bye")
    client.close()
    return 0


class Extras:
    """The commands beyond the elector's: a lock, a follow, a fleet, the
    history and DeleteJob (one lock, one follow and one fleet at a time)."""

    def __init__(self, client: leasehold.Client, server: str, security: dict, name: str, ttl: float) -> None:
        self.client = client
        self.name = name
        self.ttl = ttl
        # The asyncio lock runs on an event loop of its own thread, with an
        # AsyncClient made there.
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="worker-loop", daemon=True).start()

        async def connect() -> AsyncClient:
            return AsyncClient(server, **security)

        self.aclient = self.on_loop(connect())
        self.lock: Optional[leasehold.AsyncLock] = None
        self.locking = None  # the future of a lock being entered
        self.lock_token: Optional[int] = None  # the lock's last token, kept after it ends
        self.lock_job = ""  # the job the lock's lease is on (a counted lock's slot job)
        self.stream: Optional[leasehold.WriteStream] = None
        self.follow: Optional[leasehold.Elector] = None
        self.observing: Optional[leasehold.Watch] = None
        self.observer: Optional[threading.Thread] = None
        self.fleet: Optional[leasehold.ElectorSet] = None
        self.member: Optional[leasehold.AsyncShardMember] = None
        self.member_run = None  # the future of its run()
        self.shard_tokens: dict = {}  # shard -> the token it was last owned with, kept after it moved
        self.last_group = ""  # the group of the last member, for shards-write after shards-stop

    def on_loop(self, coro, timeout: Optional[float] = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def handle(self, cmd: str, arg: str) -> bool:
        """Runs ``cmd``; False if it is not one of these."""
        if cmd == "lock":
            self.start_lock(arg)
        elif cmd == "lock-write":
            say(self.lock_write(arg))
        elif cmd == "unlock":
            self.unlock()
            say("unlock done")
        elif cmd == "follow":
            job, _, value = arg.partition(" ")
            self.start_follow(job, value or None)
        elif cmd == "follow-stop":
            self.stop_follow()
            say("follow-stop done")
        elif cmd == "fleet":
            n, _, prefix = arg.partition(" ")
            self.start_fleet(int(n), prefix)
        elif cmd == "fleet-stop":
            self.stop_fleet()
            say("fleet-stop done")
        elif cmd == "shards":
            group, _, n = arg.partition(" ")
            self.start_shards(group, n)
        elif cmd == "shards-write":
            k, _, value = arg.partition(" ")
            say(self.shards_write(k, value))
        elif cmd == "shards-stop":
            self.stop_shards()
            say("shards-stop done")
        elif cmd == "history":
            say(self.history(arg))
        elif cmd == "delete-job":
            say(self.delete_job(arg))
        else:
            return False
        return True

    # lock, lock-write, unlock

    def start_lock(self, job: str) -> None:
        if self.lock is not None:
            say("lock error one lock at a time")
            return

        def lost(token: int) -> None:
            say(f"lock lost {job} token={token}")

        def entered(task: "asyncio.Task[leasehold.AsyncLock]") -> None:  # on the loop
            if task.cancelled():
                return
            if task.exception() is not None:
                say(f"lock error {type(task.exception()).__name__} {task.exception()}")
                return
            self.lock_token = lock.token
            self.lock_job = lock.lease_job or job
            say(f"lock held {job} token={lock.token} holder={lock.holder}")

        async def start() -> "asyncio.Task[leasehold.AsyncLock]":
            task = asyncio.ensure_future(lock.acquire())
            task.add_done_callback(entered)
            return task

        # Waits as long as it takes, on the loop: the commands go on meanwhile.
        lock = self.aclient.lock(job, ttl=self.ttl, name=self.name, on_lost=lost)
        self.lock = lock
        self.locking = self.on_loop(start())

    def lock_write(self, value: str) -> str:
        # Through the WriteStream, with the lock's last token (even after
        # its loss or the unlock: the server decides).
        token = self.lock_token
        if token is None:
            return "lock-write error never-locked"
        try:
            if self.stream is None:
                self.stream = self.client.write_stream()
            [out] = self.stream.write([leasehold.StreamWrite.put(self.lock_job, token, b"status", value.encode())])
        except leasehold.LeaseholdError as e:
            self.stream = None  # broken: the next write opens another
            return f"lock-write error {type(e).__name__} {e}"
        if out.kind is leasehold.WriteOutcomeKind.WRITTEN:
            return f"lock-write ok version={out.version}"
        if out.kind is leasehold.WriteOutcomeKind.FENCED:
            return f"lock-write fenced current={out.current_token}"
        return f"lock-write error {out.kind.name} {out.message}"

    def unlock(self) -> None:
        lock, self.lock = self.lock, None
        if lock is None:
            return
        task = self.locking

        async def leave() -> None:
            if not task.done():
                task.cancel()  # still waiting: a grant that came meanwhile is given back
                await asyncio.wait([task])
            await lock.release()

        self.on_loop(leave())

    # follow, follow-stop

    def start_follow(self, job: str, value: Optional[str] = None) -> None:
        if self.follow is not None:
            say("follow error one follow at a time")
            return
        self.follow = leasehold.Elector(
            self.client, job, self.name, self.ttl,
            on_elected=lambda t: say(f"follow elected {job} token={t}"),
            on_lost=lambda t: say(f"follow lost {job} token={t}"),
            # Three arguments: the new leader's value comes as the third.
            on_new_leader=lambda h, t, v: say(f"newleader {job} holder={h} token={t}{value_suffix(v)}"),
            value=value,
        )
        say(f"follow holder {self.follow.holder}")
        self.observing = self.client.observe(job)
        changes = self.observing

        def observe() -> None:
            try:
                # Every kind, VALUE_CHANGED included (same holder and token).
                for c in changes:
                    say(f"observe {job} holder={c.lease.holder or '-'} token={c.lease.token}{value_suffix(c.lease.value)}")
            except leasehold.LeaseholdError as e:
                say(f"observe error {type(e).__name__} {e}")

        self.observer = threading.Thread(target=observe, name="worker-observe", daemon=True)
        self.observer.start()
        self.follow.start()

    def stop_follow(self) -> None:
        if self.follow is not None:
            self.follow.resign()
            self.follow = None
        if self.observing is not None:
            self.observing.close()
            self.observing = None
        if self.observer is not None:
            self.observer.join(10)
            self.observer = None

    # fleet, fleet-stop

    def start_fleet(self, n: int, prefix: str) -> None:
        if self.fleet is not None:
            say("fleet error one fleet at a time")
            return
        self.fleet = leasehold.ElectorSet(
            self.client, self.name, self.ttl,
            on_elected=lambda j, t: say(f"fleet elected {j} token={t}"),
            on_lost=lambda j, t: say(f"fleet lost {j} token={t}"),
        )
        say(f"fleet holder {self.fleet.holder}")
        self.fleet.campaign(*[f"{prefix}{i}" for i in range(n)])

    def stop_fleet(self) -> None:
        if self.fleet is not None:
            self.fleet.resign()  # releases every lease held
            self.fleet = None

    # shards, shards-write, shards-stop

    def start_shards(self, group: str, n: str) -> None:
        if self.member is not None:
            say("shards error one shard member at a time")
            return
        try:
            # A revoke timeout of the TTL; the member's name is the worker's.
            member = self.aclient.join_shards(group, self.name, int(n), ttl=self.ttl, revoke_timeout=self.ttl)
            self.on_loop(member.join())
        except leasehold.InvalidArgument as e:
            say(f"shards invalid field={e.field}")
            return
        except (leasehold.LeaseholdError, ValueError) as e:
            say(f"shards error {type(e).__name__} {e}")
            return
        self.member = member
        self.shard_tokens = {}
        say(f"shards member {member.member}")

        async def work(shard: leasehold.ShardAssigned) -> None:
            await asyncio.Event().wait()  # until cancelled: the shard moved, or was lost

        def told(ev) -> None:  # on the loop, by run(): a revoke's work has ended by now
            if isinstance(ev, leasehold.ShardAssigned):
                self.shard_tokens[ev.shard] = ev.token
                say(f"shards assigned {ev.shard} token={ev.token}")
            elif isinstance(ev, leasehold.ShardRevoked):
                say(f"shards revoked {ev.shard}")
            elif isinstance(ev, leasehold.ShardLost):
                say(f"shards lost {ev.shard} token={ev.token}")

        async def run() -> None:
            try:
                await member.run(work, on_event=told)
            except leasehold.LeaseholdError as e:
                say(f"shards error {type(e).__name__} {e}")

        async def start():
            return asyncio.ensure_future(run())

        self.member_run = self.on_loop(start())

    def shards_write(self, k: str, value: str) -> str:
        # With the token this member last owned shard k with, even after it
        # moved: the server decides.
        member = self.member
        try:
            token = self.shard_tokens[int(k)]
        except (KeyError, ValueError):
            return "shards-write error never-owned"
        job = f"{member.group if member else self.last_group}/{k}"
        try:
            version = self.client.checked_write(job, token, b"status", value.encode())
            return f"shards-write ok version={version}"
        except leasehold.Fenced as e:
            return f"shards-write fenced current={e.current_token}"
        except leasehold.LeaseholdError as e:
            return f"shards-write error {type(e).__name__} {e}"

    def stop_shards(self) -> None:
        member, self.member = self.member, None
        if member is None:
            return
        self.last_group = member.group
        running = self.member_run

        async def leave() -> None:
            await member.aclose()  # cancels each shard's work, then leaves
            await asyncio.wait([running])

        self.on_loop(leave())

    # history, delete-job

    def history(self, job: str) -> str:
        try:
            page = self.client.history(job)
        except leasehold.LeaseholdError as e:
            return f"history error {type(e).__name__} {e}"
        return f"history {job} tokens={','.join(str(t) for t in page.tokens)}"

    def delete_job(self, job: str) -> str:
        try:
            return "delete-job deleted" if self.client.delete_job(job) else "delete-job absent"
        except leasehold.JobInUse:
            return "delete-job in-use"
        except leasehold.LeaseholdError as e:
            return f"delete-job error {type(e).__name__} {e}"

    def close(self) -> None:
        """Resigns the lock, the follow elector and the fleet; closes the
        rest."""
        self.unlock()
        self.stop_follow()
        self.stop_fleet()
        self.stop_shards()
        if self.stream is not None:
            self.stream.close()
        self.on_loop(self.aclient.close())
        self.loop.call_soon_threadsafe(self.loop.stop)


def start_twins(client: leasehold.Client, job: str, name: str, ttl: float):
    """Two electors with the same name for ``job`` in this process: each is
    its own holder, so at most one leads."""
    twins = []
    for i in range(2):
        last = [None]

        def elected(token: int, i=i, last=last) -> None:
            last[0] = token
            say(f"twin elected {i} token={token}")

        def lost(token: int, i=i) -> None:
            say(f"twin lost {i} token={token}")

        twins.append((leasehold.Elector(client, job, name, ttl, on_elected=elected, on_lost=lost), last))
    for i, (e, _) in enumerate(twins):
        say(f"twin holder {i} {e.holder}")
    for e, _ in twins:
        e.start()
    return twins


def value_suffix(value: bytes) -> str:
    """`` value=<v>`` for a lease with a value; nothing without one, so
    that the lines stay as they were before leases had values."""
    return f" value={value.decode('utf-8', errors='replace')}" if value else ""


def set_value(elector: leasehold.Elector, value: str) -> str:
    # Returns at once: the value goes with the elector's next renewal.
    try:
        elector.set_value(value)
        return "set-value done"
    except leasehold.LeaseholdError as e:
        return f"set-value error {type(e).__name__} {e}"


def leader(elector: leasehold.Elector) -> str:
    try:
        lease = elector.leader()
    except leasehold.LeaseholdError as e:
        return f"leader error {type(e).__name__} {e}"
    return f"leader holder={lease.holder or '-'} token={lease.token} value={lease.value_text or '-'}"


def waiters(client: leasehold.Client, job: str) -> str:
    try:
        line = client.list_waiters(job)
    except leasehold.LeaseholdError as e:
        return f"waiters error {type(e).__name__} {e}"
    return " ".join([f"waiters n={line.waiting}"] + line.holders)


def acquire_slots(client: leasehold.Client, name: str, ttl: float, arg: str) -> str:
    """``acquire-slots <job> <n>``: one Acquire of a slot, wait 0, as a
    holder of its own; the lease it gets is left to run out."""
    job, _, n = arg.partition(" ")
    try:
        slots = int(n)
    except ValueError:
        return f"acquire-slots error not a count: {n!r}"
    try:
        r = client.acquire(job, f"{name}@{uuid.uuid4()}", ttl, slots=slots)
    except leasehold.InvalidArgument as e:
        return f"acquire-slots invalid field={e.field}"
    except (leasehold.LeaseholdError, ValueError) as e:
        return f"acquire-slots error {type(e).__name__} {e}"
    if not r.acquired:
        return "acquire-slots busy"
    return f"acquire-slots ok job={r.lease.job} slot={r.lease.slot} token={r.lease.token}"


def write(client: leasehold.Client, job: str, token, value: str) -> str:
    # No "am I still the leader?" check first: it could be stale by the
    # time the write lands. The token goes with the write; the server
    # decides.
    if token is None:
        return "write error never-led"
    try:
        version = client.checked_write(job, token, b"status", value.encode())
        return f"write ok version={version}"
    except leasehold.Fenced as e:
        return f"write fenced current={e.current_token}"
    except leasehold.LeaseholdError as e:
        return f"write error {type(e).__name__} {e}"


def transfer(elector: leasehold.Elector, to) -> str:
    """Hands the leadership to the first waiter (``to`` None) or to ``to``.
    The elector then reports the loss (``lost token=N``) and campaigns
    again behind the successor."""
    try:
        lease = elector.transfer(to)
        return f"transfer ok token={lease.token}"
    except leasehold.NoSuccessor:
        return "transfer no-successor"
    except leasehold.LeaseLost:
        return "transfer lost"
    except leasehold.NotLeader:
        return "transfer not-leader"
    except leasehold.LeaseholdError as e:
        return f"transfer error {type(e).__name__} {e}"


def bad(client: leasehold.Client, job: str, holder: str, token, case: str) -> str:
    try:
        if case == "job":
            client.acquire("", holder, ttl=1.0)
        elif case == "ttl":
            client.acquire(job, holder, ttl=0.001)
        elif case == "key":
            client.checked_write(job, token or 1, b"", b"x")
        elif case == "token":
            client.checked_write(job, 1 << 62, b"status", b"x")
        else:
            return "error unknown case"
        return "accepted"
    except leasehold.UnknownToken as e:
        return f"unknown-token current={e.current_token}"
    except leasehold.InvalidArgument as e:
        return f"invalid field={e.field}"
    except leasehold.LeaseholdError as e:
        return f"other {type(e).__name__} {e}"


if __name__ == "__main__":
    sys.exit(main())
