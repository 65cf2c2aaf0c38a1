"""TransferLease against the real server: the clients' ``transfer_lease``
(blocking and asyncio) and the electors' ``transfer()``. The successor is
granted token + 1 with no gap, the old leader reports the end of its
leadership as a loss and campaigns again behind it; NO_SUCCESSOR leaves the
leader leading; a stale token is LEASE_LOST."""

import asyncio
import threading
import time

import grpc
import pytest

import leasehold
from leasehold import errors
from leasehold._wire import acquire_request, transfer_request
from leasehold.aio import AsyncClient, AsyncElector
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as pb_grpc

# A lease that outlives every step of a test on a loaded machine.
TTL = 30.0
# How long a test waits for what it expects.
PATIENCE = 10.0


class Recorder:
    """Collects on_elected / on_lost callbacks in order."""

    def __init__(self):
        self.events = []
        self.cond = threading.Condition()

    def elected(self, token):
        with self.cond:
            self.events.append(("elected", token))
            self.cond.notify_all()

    def lost(self, token):
        with self.cond:
            self.events.append(("lost", token))
            self.cond.notify_all()

    def wait_for(self, event, timeout=PATIENCE):
        with self.cond:
            assert self.cond.wait_for(lambda: event in self.events, timeout), (event, self.events)


def history(server, job):
    """The job's tenures, newest first, as the server keeps them."""
    with grpc.insecure_channel(server.target) as ch:
        return list(pb_grpc.LeasesStub(ch).GetHistory(pb.GetHistoryRequest(job=job), timeout=10).tenures)


def tenure_end(server, job, token):
    ends = {t.token: t.end for t in history(server, job)}
    assert token in ends, f"token {token} not in the history of {job}: {ends}"
    return ends[token]


def wait_until(pred, timeout=PATIENCE, what="a condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.01)


def check_each_leadership_reported_once(events):
    """Every ``lost`` ends the leadership the last ``elected`` began, and no
    token is reported twice: a renewal's LEASE_LOST after a transfer is not
    a second loss."""
    leading = None
    seen = set()
    for kind, token in events:
        if kind == "elected":
            assert leading is None, f"elected {token} while leading {leading}: {events}"
            assert token not in seen, f"token {token} reported twice: {events}"
            seen.add(token)
            leading = token
        else:
            assert leading == token, f"lost {token} while leading {leading}: {events}"
            leading = None


# Requests (no server)


def test_the_requests_carry_bind_to_stream_and_the_transfer_fields():
    assert not acquire_request("j", "h", 1.0, 0.0).bind_to_stream
    assert acquire_request("j", "h", 1.0, 0.0, True).bind_to_stream
    r = transfer_request("j", "a", 7, None, None)
    assert (r.job, r.holder, r.token, r.to_holder) == ("j", "a", 7, "")
    assert not r.HasField("ttl"), "unset: the lease's current TTL"
    r = transfer_request("j", "a", 7, "b", 2.5)
    assert r.to_holder == "b" and (r.ttl.seconds, r.ttl.nanos) == (2, 500_000_000)


def test_no_successor_is_a_typed_error():
    e = errors.from_status(grpc.StatusCode.FAILED_PRECONDITION, "nobody waits", _details("NO_SUCCESSOR"))
    assert type(e) is leasehold.NoSuccessor and e.reason == "NO_SUCCESSOR" and not e.retryable
    e = errors.from_status(grpc.StatusCode.FAILED_PRECONDITION, "gone", _details("LEASE_LOST"))
    assert type(e) is leasehold.LeaseLost


def _details(reason):
    from google.rpc import error_details_pb2, status_pb2

    st = status_pb2.Status(code=grpc.StatusCode.FAILED_PRECONDITION.value[0])
    st.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain=errors.DOMAIN))
    return [("grpc-status-details-bin", st.SerializeToString())]


class _NoServer:
    """A client that must not be called."""

    def __getattr__(self, name):
        raise AssertionError(f"the client was called: {name}")


def test_transfer_while_not_leading_raises_not_leader_without_calling_the_server():
    e = leasehold.Elector(_NoServer(), "j", "n", 1.0)
    with pytest.raises(leasehold.NotLeader) as err:
        e.transfer()
    assert isinstance(err.value, leasehold.LeaseholdError)
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION and err.value.reason is None

    async def main():
        a = AsyncElector(_NoServer(), "j", "n", 1.0)
        with pytest.raises(leasehold.NotLeader):
            await a.transfer("someone")

    asyncio.run(main())


# The clients' transfer_lease (blocking and asyncio, through `connect`)


def _wait_in_thread(c, job, holder, wait=20.0):
    """An Acquire that waits, on a thread: (thread, result dict)."""
    out = {}

    def run():
        try:
            out["r"] = c.acquire(job, holder, ttl=TTL, wait=wait)
        except Exception as e:  # the test reads it
            out["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_transfer_lease_hands_the_lease_to_the_first_waiter_with_the_next_token(server, connect, job):
    c = connect(server.target)
    assert c.acquire(job, "a", ttl=TTL).lease.token == 1
    waiter, got = _wait_in_thread(c, job, "b")
    server.wait_waiters(1)

    lease = c.transfer_lease(job, "a", 1)
    assert (lease.holder, lease.token) == ("b", 2)
    assert lease.ttl == TTL, "unset: the TTL the lease has now"
    waiter.join(PATIENCE)
    assert "r" in got, got
    assert got["r"].acquired and got["r"].lease.token == 2, "the waiting Acquire returned the grant"
    l = c.get_lease(job)
    assert (l.holder, l.token) == ("b", 2)
    assert tenure_end(server, job, 1) == pb.Tenure.END_TRANSFERRED

    # The old token is gone: renewing it, or handing it over again, is LEASE_LOST.
    with pytest.raises(leasehold.LeaseLost):
        c.renew(job, "a", 1, ttl=TTL)
    with pytest.raises(leasehold.LeaseLost):
        c.transfer_lease(job, "a", 1)

    # A TTL of the successor's own.
    waiter, got = _wait_in_thread(c, job, "c")
    server.wait_waiters(1)
    lease = c.transfer_lease(job, "b", 2, ttl=5)
    assert (lease.holder, lease.token, lease.ttl) == ("c", 3, 5.0)
    waiter.join(PATIENCE)
    assert got["r"].lease.token == 3
    c.release(job, "c", 3)


def test_transfer_lease_to_a_named_waiter_when_two_wait(server, connect, job):
    c = connect(server.target)
    c.acquire(job, "a", ttl=TTL)
    first, got_first = _wait_in_thread(c, job, "first")
    server.wait_waiters(1)
    second, got_second = _wait_in_thread(c, job, "second")
    server.wait_waiters(2)

    lease = c.transfer_lease(job, "a", 1, to_holder="second")
    assert (lease.holder, lease.token) == ("second", 2)
    second.join(PATIENCE)
    assert got_second["r"].lease.token == 2
    assert first.is_alive() and not got_first, "the first in line still waits"

    # The one left in line is the first waiter now.
    lease = c.transfer_lease(job, "second", 2)
    assert (lease.holder, lease.token) == ("first", 3)
    first.join(PATIENCE)
    assert got_first["r"].lease.token == 3
    assert [t.end for t in history(server, job)][1:] == [pb.Tenure.END_TRANSFERRED] * 2
    c.release(job, "first", 3)


def test_transfer_lease_with_nobody_waiting_is_no_successor_and_changes_nothing(server, connect, job):
    c = connect(server.target)
    c.acquire(job, "a", ttl=TTL)
    with pytest.raises(leasehold.NoSuccessor) as e:
        c.transfer_lease(job, "a", 1)
    assert e.value.reason == "NO_SUCCESSOR"
    # A holder named that does not wait, while another does: the same.
    waiter, got = _wait_in_thread(c, job, "b")
    server.wait_waiters(1)
    with pytest.raises(leasehold.NoSuccessor):
        c.transfer_lease(job, "a", 1, to_holder="nobody")
    l = c.get_lease(job)
    assert (l.holder, l.token) == ("a", 1), "the caller still leads"
    assert c.renew(job, "a", 1, ttl=TTL).token == 1
    assert waiter.is_alive()
    c.release(job, "a", 1)
    waiter.join(PATIENCE)
    assert got["r"].lease.token == 2
    c.release(job, "b", 2)


def test_transfer_lease_with_a_stale_token_or_holder_is_lease_lost(server, connect, job):
    c = connect(server.target)
    c.acquire(job, "a", ttl=TTL)
    c.release(job, "a", 1)
    c.acquire(job, "b", ttl=TTL)
    waiter, got = _wait_in_thread(c, job, "w")
    server.wait_waiters(1)
    for holder, token in [("a", 1), ("a", 2), ("b", 1)]:
        with pytest.raises(leasehold.LeaseLost):
            c.transfer_lease(job, holder, token)
    l = c.get_lease(job)
    assert (l.holder, l.token) == ("b", 2), "nothing changed"
    assert waiter.is_alive(), "the waiter still waits"
    c.release(job, "b", 2)
    waiter.join(PATIENCE)
    assert got["r"].lease.token == 3
    c.release(job, "w", 3)


# The thread-based Elector's transfer()


def _one_leads(a, b):
    wait_until(lambda: a.is_leader or b.is_leader, what="leader")
    return (a, b) if a.is_leader else (b, a)


def test_elector_transfer_hands_over_and_the_old_leader_reports_the_loss_and_queues_again(server, client, job):
    ra, rb = Recorder(), Recorder()
    a = leasehold.Elector(client, job, "a", TTL, on_elected=ra.elected, on_lost=ra.lost).start()
    b = leasehold.Elector(client, job, "b", TTL, on_elected=rb.elected, on_lost=rb.lost).start()
    try:
        leader, follower = _one_leads(a, b)
        rl, rf = (ra, rb) if leader is a else (rb, ra)
        assert leader.token == 1
        server.wait_waiters(1)

        t = time.monotonic()
        lease = leader.transfer()
        assert (lease.holder, lease.token) == (follower.holder, 2)
        assert follower.wait_elected(PATIENCE) == 2
        assert time.monotonic() - t < TTL / 3, "handed over, not expired"
        assert leader.wait_lost(PATIENCE) and not leader.is_leader and leader.token is None
        rl.wait_for(("lost", 1))
        rf.wait_for(("elected", 2))
        assert tenure_end(server, job, 1) == pb.Tenure.END_TRANSFERRED

        # The old leader campaigns again, queued behind its successor...
        server.wait_waiters(1)
        l = client.get_lease(job)
        assert (l.holder, l.token) == (follower.holder, 2)
        # ... and leads again when the successor resigns.
        follower.resign()
        assert leader.wait_elected(PATIENCE) == 3
        rl.wait_for(("elected", 3))
        assert rl.events == [("elected", 1), ("lost", 1), ("elected", 3)]
        assert rf.events == [("elected", 2), ("lost", 2)]
    finally:
        a.resign()
        b.resign()


def test_elector_transfer_to_a_named_waiter_when_two_wait(server, client, job):
    a, b, c = (leasehold.Elector(client, job, name, TTL) for name in "abc")
    try:
        a.start()
        assert a.wait_elected(PATIENCE) == 1
        b.start()
        server.wait_waiters(1)
        c.start()
        server.wait_waiters(2)

        lease = a.transfer(c.holder)
        assert (lease.holder, lease.token) == (c.holder, 2)
        assert c.wait_elected(PATIENCE) == 2
        assert a.wait_lost(PATIENCE)
        assert not b.is_leader, "the first in line was passed over"
        # b first in line, then a, queued again.
        server.wait_waiters(2)
        lease = c.transfer()
        assert (lease.holder, lease.token) == (b.holder, 3)
        assert b.wait_elected(PATIENCE) == 3
        server.wait_waiters(2)
        lease = b.transfer()
        assert (lease.holder, lease.token) == (a.holder, 4)
        assert a.wait_elected(PATIENCE) == 4
    finally:
        for e in (a, b, c):
            e.resign()


def test_elector_transfer_with_nobody_waiting_raises_no_successor_and_keeps_leading(server, client, job):
    ttl = 0.9
    r = Recorder()
    e = leasehold.Elector(client, job, "alone", ttl, on_elected=r.elected, on_lost=r.lost).start()
    try:
        assert e.wait_elected(PATIENCE) == 1
        with pytest.raises(leasehold.NoSuccessor):
            e.transfer()
        with pytest.raises(leasehold.NoSuccessor):
            e.transfer("nobody@" + job)
        # Still leading, through several renewals.
        t_end = time.monotonic() + 3 * ttl
        while time.monotonic() < t_end:
            assert e.token == 1
            time.sleep(ttl / 10)
        assert r.events == [("elected", 1)]
        assert client.get_lease(job).holder == e.holder
    finally:
        e.resign()
    with pytest.raises(leasehold.NotLeader):
        e.transfer()
    assert client.get_lease(job).holder is None, "resign released it"


def test_a_follower_transfer_raises_not_leader(server, client, job):
    a = leasehold.Elector(client, job, "a", TTL).start()
    b = leasehold.Elector(client, job, "b", TTL).start()
    try:
        leader, follower = _one_leads(a, b)
        server.wait_waiters(1)
        with pytest.raises(leasehold.NotLeader):
            follower.transfer()
        with pytest.raises(leasehold.NotLeader):
            follower.transfer(leader.holder)
        assert leader.token == 1 and client.get_lease(job).holder == leader.holder
    finally:
        a.resign()
        b.resign()


def test_elector_transfer_of_a_lease_it_lost_raises_lease_lost_and_steps_down(server, client, job):
    r = Recorder()
    e = leasehold.Elector(client, job, "e", TTL, on_elected=r.elected, on_lost=r.lost).start()
    try:
        assert e.wait_elected(PATIENCE) == 1
        # Released behind its back: the elector still believes it leads
        # (its next renewal is TTL/3 away).
        client.release(job, e.holder, 1)
        with pytest.raises(leasehold.LeaseLost):
            e.transfer()
        assert not e.is_leader
        r.wait_for(("lost", 1))
        # It campaigns again: the job is free, so it leads with a new token.
        assert e.wait_elected(PATIENCE) == 2
        r.wait_for(("elected", 2))
        assert r.events == [("elected", 1), ("lost", 1), ("elected", 2)]
    finally:
        e.resign()


def test_elector_transfers_racing_renewals_report_each_leadership_once(server, client, job):
    """Short TTL, so renewals are always in flight; the leadership goes back
    and forth by transfer. A renewal of the old token answered after the
    transfer (LEASE_LOST) must not be a second loss."""
    ttl = 0.6
    rounds = 8
    ra, rb = Recorder(), Recorder()
    a = leasehold.Elector(client, job, "a", ttl, on_elected=ra.elected, on_lost=ra.lost).start()
    b = leasehold.Elector(client, job, "b", ttl, on_elected=rb.elected, on_lost=rb.lost).start()
    try:
        handed = []
        for _ in range(rounds):
            leader, follower = _one_leads(a, b)
            server.wait_waiters(1)
            time.sleep(ttl / 3 * (len(handed) % 3) / 2)  # land at several points of the renewal cycle
            try:
                lease = leader.transfer()
            except (leasehold.NotLeader, leasehold.LeaseLost):
                continue  # a stall of the machine cost it the lease: not what is tested
            handed.append(lease.token)
            assert lease.holder == follower.holder
            wait_until(lambda: follower.token is not None and follower.token >= lease.token, what="successor")
        assert len(handed) >= rounds // 2, handed
        time.sleep(ttl)  # late renewals of old tokens come back meanwhile
    finally:
        a.resign()
        b.resign()
    check_each_leadership_reported_once(ra.events)
    check_each_leadership_reported_once(rb.events)
    for t in handed:
        lost = [e for r in (ra, rb) for e in r.events if e == ("lost", t - 1)]
        assert len(lost) == 1, f"token {t - 1} was handed over: one loss report, {ra.events} {rb.events}"


# The AsyncElector's transfer()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def _in_thread(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def test_async_elector_transfer_hands_over_and_the_old_leader_queues_again(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            ra, rb = Recorder(), Recorder()
            a = AsyncElector(c, job, "a", TTL, on_elected=ra.elected, on_lost=ra.lost).start()
            assert await a.wait_elected(PATIENCE) == 1

            async def b_lost(t):  # a coroutine callback
                rb.lost(t)

            b = AsyncElector(c, job, "b", TTL, on_elected=rb.elected, on_lost=b_lost).start()
            try:
                await _in_thread(server.wait_waiters, 1)
                with pytest.raises(leasehold.NotLeader):
                    await b.transfer()
                t = time.monotonic()
                lease = await a.transfer()
                assert (lease.holder, lease.token) == (b.holder, 2)
                assert await b.wait_elected(PATIENCE) == 2
                assert time.monotonic() - t < TTL / 3
                assert await a.wait_lost(PATIENCE) and not a.is_leader
                assert ra.events == [("elected", 1), ("lost", 1)]
                assert tenure_end(server, job, 1) == pb.Tenure.END_TRANSFERRED

                # a queued again behind b; back to a, by name.
                await _in_thread(server.wait_waiters, 1)
                lease = await b.transfer(a.holder)
                assert (lease.holder, lease.token) == (a.holder, 3)
                assert await a.wait_elected(PATIENCE) == 3
                assert await b.wait_lost(PATIENCE)
                # b is queued again: nobody else waits for a named holder.
                await _in_thread(server.wait_waiters, 1)
                with pytest.raises(leasehold.NoSuccessor):
                    await a.transfer("nobody")
                assert a.token == 3
                await b.resign()
                with pytest.raises(leasehold.NoSuccessor):
                    await _until_no_waiter(server, a)
                assert a.token == 3
                assert ra.events == [("elected", 1), ("lost", 1), ("elected", 3)]
                assert rb.events == [("elected", 2), ("lost", 2)]
            finally:
                await a.resign()
                await b.resign()
            lease = await c.get_lease(job)
            assert (lease.holder, lease.token) == (None, 3)
            with pytest.raises(leasehold.NotLeader):
                await a.transfer()

    run(main())


async def _until_no_waiter(server, elector):
    """``elector.transfer()`` once nobody waits any more (a resigned
    elector's cancelled Acquire leaves the line when the server sees it)."""
    await _in_thread(server.wait_waiters_at_most, 0)
    return await elector.transfer()


def test_async_elector_transfer_of_a_lost_lease_raises_lease_lost_and_steps_down(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            r = Recorder()
            e = AsyncElector(c, job, "e", TTL, on_elected=r.elected, on_lost=r.lost).start()
            try:
                assert await e.wait_elected(PATIENCE) == 1
                await c.release(job, e.holder, 1)
                with pytest.raises(leasehold.LeaseLost):
                    await e.transfer()
                assert not e.is_leader
                assert await e.wait_elected(PATIENCE) == 2
                assert r.events == [("elected", 1), ("lost", 1), ("elected", 2)]
            finally:
                await e.resign()

    run(main())


def test_async_elector_transfers_racing_renewals_report_each_leadership_once(server, job):
    ttl = 0.6
    rounds = 8

    async def main():
        async with AsyncClient(server.target) as c:
            ra, rb = Recorder(), Recorder()
            a = AsyncElector(c, job, "a", ttl, on_elected=ra.elected, on_lost=ra.lost).start()
            b = AsyncElector(c, job, "b", ttl, on_elected=rb.elected, on_lost=rb.lost).start()
            handed = []
            try:
                for i in range(rounds):
                    deadline = time.monotonic() + PATIENCE
                    while not (a.is_leader or b.is_leader):
                        assert time.monotonic() < deadline, "nobody leads"
                        await asyncio.sleep(0.01)
                    leader, follower = (a, b) if a.is_leader else (b, a)
                    await _in_thread(server.wait_waiters, 1)
                    await asyncio.sleep(ttl / 3 * (i % 3) / 2)
                    try:
                        lease = await leader.transfer()
                    except (leasehold.NotLeader, leasehold.LeaseLost):
                        continue
                    handed.append(lease.token)
                    assert lease.holder == follower.holder
                    deadline = time.monotonic() + PATIENCE
                    while not (follower.token is not None and follower.token >= lease.token):
                        assert time.monotonic() < deadline, "the successor never led"
                        await asyncio.sleep(0.01)
                assert len(handed) >= rounds // 2, handed
                await asyncio.sleep(ttl)
            finally:
                await a.resign()
                await b.resign()
            check_each_leadership_reported_once(ra.events)
            check_each_leadership_reported_once(rb.events)
            for t in handed:
                lost = [e for r in (ra, rb) for e in r.events if e == ("lost", t - 1)]
                assert len(lost) == 1, (t, ra.events, rb.events)

    run(main())
