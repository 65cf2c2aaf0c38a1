"""Shard groups (``Shards.Join``, ``GetGroup``) against the real server:
``AsyncClient.join_shards`` (the events, ``release``, ``run``, the leave,
the rejoin after a broken stream) and ``get_group`` on both clients.

Shard k of group G is the job ``G/k`` with its own lease and token. A move
is a handover: the old owner is told REVOKED, stops the shard's work,
acknowledges, and only then is the new owner told ASSIGNED with token + 1.
Every wait is a bounded poll, and the TTL (3 s, renewals every second) is
long enough that a loaded machine does not lose a holding by accident."""

import asyncio
import threading
import time

import grpc
import grpc.aio
import pytest

import harness
import leasehold
from leasehold.aio import AsyncClient
from leasehold.types import to_duration
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as pb_grpc

TTL = 3.0
PATIENCE = 30.0
# How long a shard's work takes to stop once cancelled (it flushes its
# state, say): long enough that an acknowledgement sent before the work
# has ended would let the new owner be assigned the shard first.
SLOW_STOP = 0.5


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 150))


async def eventually(what, check, timeout=PATIENCE):
    """Polls ``check`` (a function or a coroutine function) until it
    returns something truthy, which it returns; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        r = check()
        if asyncio.iscoroutine(r):
            r = await r
        if r:
            return r
        last = r
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(0.05)


async def balanced(client, group, want):
    """Waits until the group's members own ``want`` ({member: count}) and
    no shard is unowned; the group."""

    async def check():
        g = await client.get_group(group)
        counts = {m.member: len(m.shards) for m in g.members}
        return g if counts == want and not g.unowned else None

    return await eventually(f"group {group} to be {want}", check)


class Work:
    """A ``work(shard)`` for ``run``: each shard's task waits until
    cancelled, then takes SLOW_STOP to stop; what started and when each
    stopped."""

    def __init__(self, slow_stop=SLOW_STOP):
        self.slow_stop = slow_stop
        self.started = {}  # shard -> token
        self.stopped = {}  # shard -> monotonic time its work ended
        self.starts = []  # (shard, token), in order

    async def __call__(self, shard):
        self.started[shard.shard] = shard.token
        self.stopped.pop(shard.shard, None)
        self.starts.append((shard.shard, shard.token))
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(self.slow_stop)
            self.stopped[shard.shard] = time.monotonic()
            raise


async def collect(member, events, acknowledge=True):
    """Iterates ``member``'s events into ``events`` (each with the time it
    arrived); acknowledges revokes when ``acknowledge``."""
    async for ev in member:
        events.append((time.monotonic(), ev))
        if acknowledge and isinstance(ev, leasehold.ShardRevoked):
            member.release(ev.shard)


def of(events, kind):
    return [ev for _, ev in events if isinstance(ev, kind)]


async def stop(*tasks):
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def test_join_validates_locally_and_the_member_is_a_name_plus_a_uuid_of_its_own():
    async def main():
        c = AsyncClient("127.0.0.1:1")  # nothing is sent
        for args, field in [
            (("g", "a", 0), "shards"),
            (("g", "a", 1025), "shards"),
            (("", "a", 4), "group"),
            (("g", "", 4), "member"),
        ]:
            with pytest.raises(leasehold.InvalidArgument) as e:
                c.join_shards(*args, ttl=TTL)
            assert e.value.field == field, args
        with pytest.raises(leasehold.InvalidArgument) as e:
            c.join_shards("g", "a", 4, ttl=0)
        assert e.value.field == "ttl"
        one, two = c.join_shards("g", "a", 4, ttl=TTL), c.join_shards("g", "a", 4, ttl=TTL)
        assert one.member.startswith("a@") and two.member.startswith("a@") and one.member != two.member
        assert one.shards == 4
        await c.close()

    run(main())


def test_a_second_member_takes_half_by_handover_after_the_first_cancelled_its_work(server, job):
    """(a) A owns all 4 shards with token 1; B joins: each owns 2, the 2
    that moved have token 2 on B, and A's work for each moved shard had
    ended (cancelled, then SLOW_STOP to stop) before B was assigned it. A's
    write with its old token is Fenced, B's passes; get_group agrees."""
    group = job

    async def main():
        ca, cb = AsyncClient(server.target), AsyncClient(server.target)
        work_a = Work()
        a = await ca.join_shards(group, "a", 4, ttl=TTL)
        run_a = asyncio.ensure_future(a.run(work_a))
        one = await balanced(ca, group, {a.member: 4})
        assert one.shards == 4 and [(o.member, o.token) for o in one.owners] == [(a.member, 1)] * 4
        assert [o.job for o in one.owners] == [f"{group}/{k}" for k in range(4)]
        await eventually("A's work for every shard", lambda: work_a.started == {k: 1 for k in range(4)})

        b = await cb.join_shards(group, "b", 4, ttl=TTL)
        assert b.member != a.member
        b_events = []
        # At each ASSIGNED of B, whether A's work for that shard had ended.
        a_had_stopped = {}

        async def watch_b():
            async for ev in b:
                b_events.append(ev)
                if isinstance(ev, leasehold.ShardAssigned):
                    a_had_stopped[ev.shard] = ev.shard in work_a.stopped

        reading_b = asyncio.ensure_future(watch_b())
        two = await balanced(ca, group, {a.member: 2, b.member: 2})
        moved = two.owned_by(b.member)
        kept = two.owned_by(a.member)
        assert len(moved) == 2 and len(kept) == 2
        await eventually("B's two ASSIGNED", lambda: len(of_kind(b_events, leasehold.ShardAssigned)) == 2)
        assert {(e.shard, e.token, e.job) for e in of_kind(b_events, leasehold.ShardAssigned)} == {
            (k, 2, f"{group}/{k}") for k in moved
        }, "a move is token + 1, on the shard's job"
        assert a_had_stopped == {k: True for k in moved}, (
            "B was assigned a shard whose work still ran on A: the ack went before the work had ended"
        )
        for k in kept:
            assert two.owners[k].token == 1 and k not in work_a.stopped, "A kept its other shards, working"
        assert work_a.starts == [(k, 1) for k in range(4)], "nothing was started twice"

        for k in moved:
            with pytest.raises(leasehold.Fenced) as e:
                await ca.checked_write(f"{group}/{k}", 1, b"offset", b"a")
            assert e.value.current_token == 2
            assert await cb.checked_write(f"{group}/{k}", 2, b"offset", b"b") == 1
        for k in kept:
            assert await ca.checked_write(f"{group}/{k}", 1, b"offset", b"a") == 1

        g = await cb.get_group(group)
        assert sorted((m.member, m.shards) for m in g.members) == sorted([(a.member, kept), (b.member, moved)])

        await a.aclose()
        await b.aclose()
        await asyncio.wait_for(run_a, PATIENCE)
        await asyncio.wait_for(reading_b, PATIENCE)
        await ca.close()
        await cb.close()

    run(main())


def of_kind(events, kind):
    return [e for e in events if isinstance(e, kind)]


def test_a_member_that_leaves_hands_its_shards_over_with_token_plus_one(server, job):
    """(b) A and B own 2 shards each; A leaves (its run's tasks are
    cancelled first): B is assigned A's shards with token + 1 and owns all
    4; A's run returns."""
    group = job

    async def main():
        ca, cb = AsyncClient(server.target), AsyncClient(server.target)
        work_a, work_b = Work(slow_stop=0), Work(slow_stop=0)
        a = ca.join_shards(group, "a", 4, ttl=TTL)
        run_a = asyncio.ensure_future(a.run(work_a))  # run joins
        await balanced(ca, group, {a.member: 4})
        async with cb.join_shards(group, "b", 4, ttl=TTL) as b:
            run_b = asyncio.ensure_future(b.run(work_b))
            before = await balanced(ca, group, {a.member: 2, b.member: 2})
            a_had = before.owned_by(a.member)
            await eventually("A's work on its 2", lambda: set(work_a.started) == set(range(4)) and
                             set(work_a.stopped) == set(before.owned_by(b.member)))

            await a.leave()
            assert await asyncio.wait_for(run_a, PATIENCE) is None, "a run ends once its member left"
            assert set(work_a.stopped) == set(range(4)), "every shard's work of A was cancelled"
            after = await balanced(cb, group, {b.member: 4})
            for k in a_had:
                assert after.owners[k].token == before.owners[k].token + 1, (k, before, after)
            for k in before.owned_by(b.member):
                assert after.owners[k].token == before.owners[k].token, "B's own shards stayed put"
            want = {k: after.owners[k].token for k in range(4)}
            await eventually("B's work on all 4", lambda: work_b.started == want)
            assert a.error is None
        # Leaving the block left: B's run ends, and the group is empty.
        assert await asyncio.wait_for(run_b, PATIENCE) is None
        await eventually("no member left", lambda: _no_members(cb, group))
        await ca.close()
        await cb.close()

    run(main())


async def _no_members(client, group):
    g = await client.get_group(group)
    return g.shards == 4 and not g.members


def test_a_join_naming_another_count_or_zero_is_invalid_argument_naming_shards(server, client, job):
    """(c) The group has 4 shards: a Join with 5 is refused by the server
    with InvalidArgument naming ``shards`` (awaited, in ``async with`` and
    at the first event), 0 and 1025 before anything is sent; the group is
    unchanged."""
    group = job

    async def main():
        c = AsyncClient(server.target)
        async with c.join_shards(group, "a", 4, ttl=TTL) as a:
            await balanced(c, group, {a.member: 4})
            with pytest.raises(leasehold.InvalidArgument) as e:
                await c.join_shards(group, "x", 5, ttl=TTL)
            assert e.value.field == "shards" and "4" in str(e.value)
            with pytest.raises(leasehold.InvalidArgument) as e:
                async with c.join_shards(group, "x", 5, ttl=TTL):
                    pass
            assert e.value.field == "shards"
            with pytest.raises(leasehold.InvalidArgument) as e:
                async for _ in c.join_shards(group, "x", 5, ttl=TTL):
                    pass
            assert e.value.field == "shards"
            for bad in (0, 1025):
                with pytest.raises(leasehold.InvalidArgument) as e:
                    c.join_shards(group, "x", bad, ttl=TTL)
                assert e.value.field == "shards"
            g = await c.get_group(group)
            assert (g.shards, [m.member for m in g.members]) == (4, [a.member])
        await c.close()

    run(main())
    # The blocking client's view, once the member left.
    g = client.get_group(group)
    assert (g.group, g.shards, g.members) == (group, 4, [])
    assert [(o.shard, o.job, o.member, o.token) for o in g.owners] == [(k, f"{group}/{k}", None, 1) for k in range(4)]
    none = client.get_group(group + "-never")
    assert (none.shards, none.members, none.owners) == (0, [], [])


def test_a_member_that_never_acknowledges_loses_the_shard_at_the_revoke_timeout(server, job):
    """(d) S never acknowledges (the event API, no release): one revoke
    timeout (1 s) after REVOKED its shard moves anyway to T with token + 1,
    S is told LOST for it, and S's old token is fenced."""
    group = job

    async def main():
        cs, ct = AsyncClient(server.target), AsyncClient(server.target)
        s = await cs.join_shards(group, "s", 2, ttl=TTL, revoke_timeout=1.0)
        s_events = []
        reading_s = asyncio.ensure_future(collect(s, s_events, acknowledge=False))
        await eventually("S's two shards", lambda: len(of(s_events, leasehold.ShardAssigned)) == 2)
        t_events = []
        t = await ct.join_shards(group, "t", 2, ttl=TTL)
        reading_t = asyncio.ensure_future(collect(t, t_events))
        await eventually("S's revoke", lambda: of(s_events, leasehold.ShardRevoked))
        [(revoked_at, revoke)] = [(at, ev) for at, ev in s_events if isinstance(ev, leasehold.ShardRevoked)]
        assert revoke.deadline == pytest.approx(1.0) and revoke.token == 1
        await eventually("S's loss", lambda: of(s_events, leasehold.ShardLost))
        [(lost_at, lost)] = [(at, ev) for at, ev in s_events if isinstance(ev, leasehold.ShardLost)]
        assert (lost.shard, lost.token, lost.job) == (revoke.shard, revoke.token, revoke.job)
        assert lost_at - revoked_at >= 0.8, "not before the revoke's deadline"
        after = await balanced(ct, group, {s.member: 1, t.member: 1})
        assert after.owners[revoke.shard].member == t.member
        assert after.owners[revoke.shard].token == 2
        assert [(e.shard, e.token) for e in of(t_events, leasehold.ShardAssigned)] == [(revoke.shard, 2)]
        with pytest.raises(leasehold.Fenced):
            await cs.checked_write(revoke.job, revoke.token, b"k", b"late")
        assert await ct.checked_write(revoke.job, 2, b"k", b"new") == 1
        await s.aclose()
        await t.aclose()
        await asyncio.wait_for(asyncio.gather(reading_s, reading_t), PATIENCE)
        await cs.close()
        await ct.close()

    run(main())


def test_a_broken_stream_reports_every_shard_lost_then_rejoins_under_the_same_identity(own_server, job):
    """The server is killed: the member reports both shards lost at once
    (their work cancelled), and once the server is back joins again as the
    same member, which is assigned its shards again with their tokens (a
    TTL of 30 s: still its own)."""
    group = job

    async def main():
        c = AsyncClient(own_server.target)
        work = Work(slow_stop=0)
        m = await c.join_shards(group, "m", 2, ttl=30.0)
        running = asyncio.ensure_future(m.run(work))
        await eventually("work on both shards", lambda: work.started == {0: 1, 1: 1})
        own_server.kill(keep_data=True)
        await eventually("both shards' work stopped", lambda: set(work.stopped) == {0, 1})
        assert not running.done(), "a broken stream does not end the membership"
        own_server.restart()
        await eventually("work on both shards again", lambda: len(work.starts) == 4)
        assert sorted(work.starts[2:]) == [(0, 1), (1, 1)], "the same tokens: the shards were still its own"
        g = await balanced(c, group, {m.member: 2})
        assert [o.token for o in g.owners] == [1, 1]
        await m.aclose()
        assert await asyncio.wait_for(running, PATIENCE) is None
        await c.close()

    run(main())


def test_another_stream_joining_as_the_member_ends_the_membership_with_lease_lost(server, job):
    """A second Join under the same member identity takes its place: the
    first stream ends with FAILED_PRECONDITION LEASE_LOST, which ends the
    membership (its shards reported lost first) and is raised by run."""
    group = job

    async def main():
        c = AsyncClient(server.target)
        work = Work(slow_stop=0)
        m = await c.join_shards(group, "m", 2, ttl=TTL)
        running = asyncio.ensure_future(m.run(work))
        await eventually("work on both shards", lambda: work.started == {0: 1, 1: 1})
        # A second stream joins as the same member (as a restarted process
        # that kept its identity would), over a channel of its own.
        channel = grpc.aio.insecure_channel(server.target)
        twin = pb_grpc.ShardsStub(channel).Join()
        await twin.write(pb.JoinRequest(group=group, member=m.member, shards=2, ttl=to_duration(TTL)))
        assert (await twin.read()).kind == pb.JoinResponse.KIND_JOINED
        with pytest.raises(leasehold.LeaseLost):
            await asyncio.wait_for(running, PATIENCE)
        assert set(work.stopped) == {0, 1}
        assert isinstance(m.error, leasehold.LeaseLost)
        twin.cancel()
        await channel.close()
        await c.close()

    run(main())


def test_a_member_cancelled_in_the_instant_an_acknowledgement_is_queued_stops_at_once(server, job):
    """The member's writer waits for the next acknowledgement, or the next
    heartbeat, with a timeout. Cancelled in the instant an acknowledgement
    is queued (release() and the cancel in one turn of the loop), it must
    end cancelled at once and leave the acknowledgement queued. It waited
    with asyncio.wait_for, which on Python 3.11 then returns the item
    instead of raising the cancellation, so the writer ran on, every time:
    with the session cancelled (as aclose does when the server does not end
    the stream), it tried to send the acknowledgement on the call the
    reader's cancel had just cancelled and ended with its error, the
    acknowledgement gone; with the tasks cancelled in the order session,
    writer, reader (an order asyncio.run's cancel of the tasks a program
    left running can take), it sent it and then waited a whole heartbeat
    period (TTL/3: 10 s here) before it saw the call cancelled, and the
    session waited with it. Never a hang: the reader's cancel cancels the
    gRPC call, so the writer's next send fails."""
    ttl = 30.0

    def tasks_of(m):
        by = {}
        for t in asyncio.all_tasks():
            name = t.get_coro().__qualname__
            if name in ("AsyncShardMember._read", "AsyncShardMember._write"):
                by[name.rsplit("_", 1)[1]] = t
        by["session"] = m._session  # private, as m._acks below: what the cancel must stop, what it must keep
        assert len(by) == 3, by
        return by

    async def main():
        c = AsyncClient(server.target)
        for attempt in range(6):
            order = [("session",), ("session", "write", "read")][attempt % 2]
            m = await c.join_shards(f"{job}-{attempt}", "m", 2, ttl=ttl)
            events = []
            reading = asyncio.ensure_future(collect(m, events))
            await eventually("both shards", lambda: len(of(events, leasehold.ShardAssigned)) == 2)
            tasks = tasks_of(m)
            m.release(0)  # queued: the writer's wait gets it on the next turn
            for name in order:
                tasks[name].cancel()
            started = time.monotonic()
            await asyncio.wait(set(tasks.values()), timeout=ttl / 6)
            took = time.monotonic() - started
            assert all(t.done() for t in tasks.values()), f"{order}: still running after {took:.1f}s: {tasks}"
            writer = tasks["write"]
            assert writer.cancelled(), f"{order}: the writer ran on after its cancel and ended with {writer.result()!r}"
            assert m._acks.qsize() == 1, f"{order}: the acknowledgement taken in that instant was put back"
            await asyncio.wait_for(m.aclose(), PATIENCE)
            await asyncio.wait_for(reading, PATIENCE)
        await c.close()

    run(main())


# The conformance worker's commands (clients/conformance/README.md), with
# real worker processes: `shards`, `shards-write`, `shards-stop`.


@pytest.fixture()
def workers():
    started = []
    yield started
    for w in started:
        w.kill()


def members_are(client, group, want):
    """Waits (bounded) until the group's members and their shards are
    ``want``, a list of (member, shards)."""
    harness.wait_until(
        lambda: sorted((m.member, m.shards) for m in client.get_group(group).members) == sorted(want),
        PATIENCE,
        f"the members of {group} to be {want}",
    )


def test_worker_shards_commands(server, client, job, workers):
    from test_conformance_worker import answer, expect_all, start
    from test_worker_commands import line

    group = job
    a = start(server, job + "-a", "a", ttl_ms=3000)
    workers.append(a)
    a.send(f"shards {group} 4")
    ida = line(a, r"shards member (a@\S+)").group(1)
    expect_all(a, [f"shards assigned {k} token=1" for k in range(4)])

    b = start(server, job + "-b", "b", ttl_ms=3000)
    workers.append(b)
    b.send(f"shards {group} 4")
    idb = line(b, r"shards member (b@\S+)").group(1)
    moved = sorted(int(line(b, r"shards assigned (\d+) token=2").group(1)) for _ in range(2))
    kept = sorted(set(range(4)) - set(moved))
    # A printed each revoke once the shard's work had ended, before its ack.
    expect_all(a, [f"shards revoked {k}" for k in moved])
    members_are(client, group, [(ida, kept), (idb, moved)])

    assert answer(a, f"shards-write {moved[0]} x") == "shards-write fenced current=2"
    assert answer(b, f"shards-write {moved[0]} y") == "shards-write ok version=1"
    assert answer(a, f"shards-write {kept[0]} x") == "shards-write ok version=1"
    assert answer(b, f"shards-write {kept[0]} y") == "shards-write error never-owned"

    c = start(server, job + "-c", "c", ttl_ms=3000)
    workers.append(c)
    assert answer(c, f"shards {group} 5") == "shards invalid field=shards"

    # A leaves: B is assigned A's two, with token 2.
    assert answer(a, "shards-stop") == "shards-stop done"
    expect_all(b, [f"shards assigned {k} token=2" for k in kept])
    assert answer(a, f"shards-write {kept[0]} z") == "shards-write fenced current=2", "its token, kept after it left"
    members_are(client, group, [(idb, [0, 1, 2, 3])])
    # quit leaves too.
    b.send("quit")
    b.expect(lambda l: l == "bye", PATIENCE, "bye")
    assert b.wait(PATIENCE) == 0
    members_are(client, group, [])
    for w in (a, c):
        w.send("quit")
        w.expect(lambda l: l == "bye", PATIENCE, "bye")


# The blocking ShardMember: callbacks on a thread of its own.


def test_sync_shard_member_acknowledges_a_revoke_once_its_callback_returned(server, job):
    """Client.join_shards: A owns 4; B joins and is assigned 2 with token 2,
    each after A's on_revoked for it had returned (it takes SLOW_STOP);
    A's on_lost is not called for a handover. A leaves: B owns 4, A's
    two with token + 1. A group of another count is refused by start()."""
    group = job
    lock = threading.Lock()
    a_stopped = {}
    b_assigned = {}  # shard -> (token, whether A's on_revoked for it had returned)
    a_events = []

    def a_revoked(ev):
        time.sleep(SLOW_STOP)  # the shard's work stops
        with lock:
            a_events.append(ev)
            a_stopped[ev.shard] = True

    def b_on_assigned(ev):
        with lock:
            b_assigned[ev.shard] = (ev.token, a_stopped.get(ev.shard, False))

    with leasehold.Client(server.target) as ca, leasehold.Client(server.target) as cb:
        a = ca.join_shards(group, "a", 4, ttl=TTL, on_assigned=a_events.append, on_revoked=a_revoked,
                           on_lost=a_events.append)
        with a:
            assert a.member.startswith("a@") and a.shards == 4
            harness.wait_until(lambda: len(a_events) == 4, PATIENCE, "A's four shards")
            assert sorted((e.shard, e.token, e.job) for e in a_events) == [(k, 1, f"{group}/{k}") for k in range(4)]
            with pytest.raises(leasehold.InvalidArgument) as e:
                cb.join_shards(group, "x", 5, ttl=TTL).start()
            assert e.value.field == "shards"
            b = cb.join_shards(group, "b", 4, ttl=TTL, on_assigned=b_on_assigned)
            with b:
                harness.wait_until(lambda: len(b_assigned) == 2, PATIENCE, "B's two shards")
                moved = sorted(b_assigned)
                assert {k: t for k, (t, _) in b_assigned.items()} == {k: 2 for k in moved}
                assert all(stopped for _, stopped in b_assigned.values()), (
                    f"B was assigned a shard before A's on_revoked returned: {b_assigned}"
                )
                members_are(ca, group, [(a.member, sorted(set(range(4)) - set(moved))), (b.member, moved)])
                assert not any(isinstance(e, leasehold.ShardLost) for e in a_events)
                a.leave()
                assert a.wait(PATIENCE) and a.error is None
                harness.wait_until(lambda: len(b_assigned) == 4, PATIENCE, "B's four shards")
                assert {k: t for k, (t, _) in b_assigned.items()} == {k: 2 for k in range(4)}
                members_are(ca, group, [(b.member, [0, 1, 2, 3])])
            assert b.wait(PATIENCE)
        members_are(ca, group, [])


def test_sync_shard_member_reports_its_shards_lost_when_the_stream_breaks_and_rejoins(own_server, job):
    """The server is killed: on_lost for both shards at once; once it is
    back, the member (the same identity) is assigned them again with their
    tokens (TTL 30 s: still its own)."""
    events = []
    with leasehold.Client(own_server.target) as c:
        with c.join_shards(job, "m", 2, ttl=30.0, on_assigned=events.append, on_lost=events.append) as m:
            harness.wait_until(lambda: len(events) == 2, PATIENCE, "both shards")
            own_server.kill(keep_data=True)
            harness.wait_until(lambda: len(events) == 4, PATIENCE, "both shards lost")
            assert sorted((type(e).__name__, e.shard, e.token) for e in events[2:]) == [
                ("ShardLost", 0, 1), ("ShardLost", 1, 1)
            ]
            own_server.restart()
            harness.wait_until(lambda: len(events) == 6, PATIENCE, "both shards again")
            assert sorted((type(e).__name__, e.shard, e.token) for e in events[4:]) == [
                ("ShardAssigned", 0, 1), ("ShardAssigned", 1, 1)
            ]
            members_are(c, job, [(m.member, [0, 1])])
            assert m.error is None
        assert m.wait(PATIENCE)
