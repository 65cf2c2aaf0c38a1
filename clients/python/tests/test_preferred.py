"""A preferred leader against the real server: ``acquire(...,
preferred=True)`` is queued ahead of the Acquires that are not preferred
(first come, first served within each class); ``renew_lease`` tells a
holder that is not preferred that a preferred candidate waits
(``successor_waiting``), and a preferred holder nothing; an elector with
``yield_to_preferred=True`` hands over to a ``preferred=True`` one at its
next renewal, reports the loss once and campaigns again behind it, keeps
leading when the candidate left (NO_SUCCESSOR) and steps down when the
lease was lost; an elector that does not yield keeps its lease."""

import asyncio
import threading
import time

import pytest

import leasehold
from leasehold._wire import acquire_request
from leasehold.aio import AsyncClient, AsyncElector
from leasehold.v1 import leasehold_pb2 as pb
from test_transfer import PATIENCE, Recorder, tenure_end, wait_until

# A lease that outlives every step of a client test on a loaded machine.
TTL = 30.0
# The electors' TTL: they renew every ELECTOR_TTL / 3, so a yielding one
# hands over within about half a second.
ELECTOR_TTL = 1.5


# Requests (no server)


def test_the_acquire_request_carries_preferred():
    assert not acquire_request("j", "h", 1.0, 0.0).preferred
    assert acquire_request("j", "h", 1.0, 0.0, preferred=True).preferred
    r = acquire_request("j", "h", 1.0, 0.0, True, True)
    assert r.bind_to_stream and r.preferred


def test_the_electors_options_default_to_false():
    e = leasehold.Elector(None, "j", "n", 1.0)
    assert (e.preferred, e.yield_to_preferred) == (False, False)
    e = leasehold.Elector(None, "j", "n", 1.0, preferred=True, yield_to_preferred=True)
    assert (e.preferred, e.yield_to_preferred) == (True, True)
    a = AsyncElector(None, "j", "n", 1.0, preferred=True)
    assert (a.preferred, a.yield_to_preferred) == (True, False)


# The clients (blocking and asyncio, through `connect`)


def _wait_in_thread(c, job, holder, preferred=False, wait=20.0):
    """An Acquire that waits, on a thread: (thread, result dict)."""
    out = {}

    def run():
        try:
            out["r"] = c.acquire(job, holder, ttl=TTL, wait=wait, preferred=preferred)
        except Exception as e:  # the test reads it
            out["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _granted(waiter, got, token):
    waiter.join(PATIENCE)
    assert "r" in got, got
    assert got["r"].acquired and got["r"].lease.token == token, got


def test_a_holder_is_told_successor_waiting_while_a_preferred_acquire_waits(server, connect, job):
    c = connect(server.target)
    assert c.acquire(job, "a", ttl=TTL).lease.token == 1
    r = c.renew_lease(job, "a", 1, ttl=TTL)
    assert isinstance(r, leasehold.Renewed)
    assert (r.lease.holder, r.lease.token, r.successor_waiting) == ("a", 1, False), "nobody waits"

    plain, got_plain = _wait_in_thread(c, job, "b")
    server.wait_waiters(1)
    assert not c.renew_lease(job, "a", 1, ttl=TTL).successor_waiting, "only a plain Acquire waits"

    pref, got_pref = _wait_in_thread(c, job, "p", preferred=True)
    server.wait_waiters(2)
    r = c.renew_lease(job, "a", 1, ttl=TTL)
    assert r.successor_waiting and r.lease.token == 1, "a preferred Acquire waits"
    assert c.renew_lease(job, "a", 1, ttl=TTL).successor_waiting, "on every renewal"
    # renew() is unchanged: the lease alone.
    l = c.renew(job, "a", 1, ttl=TTL)
    assert isinstance(l, leasehold.Lease) and (l.holder, l.token) == ("a", 1)
    l = c.get_lease(job)
    assert (l.holder, l.token) == ("a", 1), "nothing was taken from the holder"
    assert pref.is_alive() and plain.is_alive()

    # Handed over to the first in line: the preferred one.
    lease = c.transfer_lease(job, "a", 1)
    assert (lease.holder, lease.token) == ("p", 2)
    _granted(pref, got_pref, 2)
    c.release(job, "p", 2)
    _granted(plain, got_plain, 3)
    assert not c.renew_lease(job, "b", 3, ttl=TTL).successor_waiting, "nobody waits any more"
    c.release(job, "b", 3)


def test_a_preferred_waiter_that_came_later_is_granted_first(server, connect, job):
    c = connect(server.target)
    c.acquire(job, "a", ttl=TTL)
    plain, got_plain = _wait_in_thread(c, job, "plain")
    server.wait_waiters(1)
    p1, got_p1 = _wait_in_thread(c, job, "p1", preferred=True)
    server.wait_waiters(2)
    p2, got_p2 = _wait_in_thread(c, job, "p2", preferred=True)
    server.wait_waiters(3)

    c.release(job, "a", 1)
    _granted(p1, got_p1, 2)
    assert plain.is_alive() and p2.is_alive(), "the others still wait"
    # Within the preferred class, first come, first served; then the plain one.
    c.release(job, "p1", 2)
    _granted(p2, got_p2, 3)
    assert plain.is_alive()
    c.release(job, "p2", 3)
    _granted(plain, got_plain, 4)
    c.release(job, "plain", 4)


def test_a_preferred_leader_is_not_told_successor_waiting(server, connect, job):
    c = connect(server.target)
    a = c.acquire(job, "p", ttl=TTL, preferred=True)
    assert a.acquired and a.lease.token == 1
    q, got_q = _wait_in_thread(c, job, "q", preferred=True)
    server.wait_waiters(1)
    assert not c.renew_lease(job, "p", 1, ttl=TTL).successor_waiting, "another preferred candidate waits"
    plain, got_plain = _wait_in_thread(c, job, "plain")
    server.wait_waiters(2)
    assert not c.renew_lease(job, "p", 1, ttl=TTL).successor_waiting, "and a plain one"

    # A preferred candidate granted by a transfer holds a preferred grant too.
    c.transfer_lease(job, "p", 1)
    _granted(q, got_q, 2)
    r, got_r = _wait_in_thread(c, job, "r", preferred=True)
    server.wait_waiters(2)
    assert not c.renew_lease(job, "q", 2, ttl=TTL).successor_waiting
    c.release(job, "q", 2)
    _granted(r, got_r, 3)
    c.release(job, "r", 3)
    _granted(plain, got_plain, 4)
    c.release(job, "plain", 4)


# The thread-based Elector


def test_a_yielding_elector_hands_over_to_a_preferred_one_at_its_next_renewal(server, client, job):
    ry, rp = Recorder(), Recorder()
    y = leasehold.Elector(
        client, job, "yielder", ELECTOR_TTL, on_elected=ry.elected, on_lost=ry.lost, yield_to_preferred=True
    ).start()
    p = None
    try:
        t = y.wait_elected(PATIENCE)
        assert t is not None
        p = leasehold.Elector(
            client, job, "chosen", ELECTOR_TTL, on_elected=rp.elected, on_lost=rp.lost, preferred=True
        ).start()
        assert p.wait_elected(PATIENCE) == t + 1
        assert y.wait_lost(PATIENCE) and not y.is_leader
        ry.wait_for(("lost", t))
        assert tenure_end(server, job, t) == pb.Tenure.END_TRANSFERRED, "handed over, not expired"

        # The yielder campaigns again, behind the preferred leader, and is
        # not handed the lease back: several of the leader's renewals pass.
        server.wait_waiters(1)
        time.sleep(ELECTOR_TTL * 1.5)
        assert p.token == t + 1 and not y.is_leader
        assert ry.events == [("elected", t), ("lost", t)], "the loss is reported once"
        assert rp.events == [("elected", t + 1)]
        l = client.get_lease(job)
        assert (l.holder, l.token) == (p.holder, t + 1)

        p.resign()
        assert y.wait_elected(PATIENCE) == t + 2
        ry.wait_for(("elected", t + 2))
        assert ry.events == [("elected", t), ("lost", t), ("elected", t + 2)]
    finally:
        y.resign()
        if p is not None:
            p.resign()


def test_an_elector_that_does_not_yield_keeps_its_lease(server, client, job):
    r = Recorder()
    e = leasehold.Elector(client, job, "plain", ELECTOR_TTL, on_elected=r.elected, on_lost=r.lost).start()
    p = None
    try:
        t = e.wait_elected(PATIENCE)
        p = leasehold.Elector(client, job, "chosen", ELECTOR_TTL, preferred=True).start()
        server.wait_waiters(1)
        time.sleep(ELECTOR_TTL * 1.5)
        assert e.token == t and not p.is_leader, "nothing is taken from a holder that does not yield"
        assert r.events == [("elected", t)]
        e.resign()
        assert p.wait_elected(PATIENCE) == t + 1
    finally:
        e.resign()
        if p is not None:
            p.resign()


class _Intercepted:
    """A client whose ``transfer_lease`` first runs ``before()``: what
    happens between the renewal that said a candidate waits and the
    hand-over."""

    def __init__(self, client, before):
        self._client = client
        self._before = before
        self.transfers = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def transfer_lease(self, *args, **kwargs):
        self.transfers += 1
        self._before()
        return self._client.transfer_lease(*args, **kwargs)


def test_a_yielding_elector_keeps_leading_when_the_candidate_left(server, client, job):
    ttl = 2.0
    candidate = {}

    def leave():  # the preferred candidate gives up before the hand-over
        candidate["fut"].cancel()
        server.wait_waiters_at_most(0)

    c = _Intercepted(client, leave)
    r = Recorder()
    e = leasehold.Elector(c, job, "yielder", ttl, on_elected=r.elected, on_lost=r.lost, yield_to_preferred=True)
    try:
        e.start()
        t = e.wait_elected(PATIENCE)
        candidate["fut"] = client.acquire_future(job, "p", TTL, wait=TTL, timeout=TTL + 10, preferred=True)
        wait_until(lambda: c.transfers == 1, what="a hand-over")
        # The server said NO_SUCCESSOR: still leading, through more renewals.
        time.sleep(ttl)
        assert e.token == t and r.events == [("elected", t)]
        assert c.transfers == 1, "the renewals say nobody waits any more"
        assert client.get_lease(job).holder == e.holder
    finally:
        e.resign()
    assert client.get_lease(job).holder is None


def test_a_yielding_elector_whose_lease_was_lost_steps_down(server, client, job):
    ry = Recorder()
    holder = {}

    def lose():  # released behind its back: the hand-over says LEASE_LOST
        client.release(job, holder["h"], holder["t"])

    c = _Intercepted(client, lose)
    y = leasehold.Elector(c, job, "yielder", ELECTOR_TTL, on_elected=ry.elected, on_lost=ry.lost, yield_to_preferred=True)
    holder["h"] = y.holder
    p = leasehold.Elector(client, job, "chosen", ELECTOR_TTL, preferred=True)
    try:
        y.start()
        holder["t"] = t = y.wait_elected(PATIENCE)
        p.start()
        # The release granted the preferred candidate; the yielder steps
        # down, reports the loss once and campaigns again.
        assert p.wait_elected(PATIENCE) == t + 1
        ry.wait_for(("lost", t))
        assert c.transfers == 1
        assert tenure_end(server, job, t) == pb.Tenure.END_RELEASED
        server.wait_waiters(1)
        assert ry.events == [("elected", t), ("lost", t)]
        assert not y.is_leader and p.token == t + 1
    finally:
        p.resign()
        y.resign()


# The AsyncElector


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def _in_thread(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def test_async_yielding_elector_hands_over_to_a_preferred_one_at_its_next_renewal(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            ry, rp = Recorder(), Recorder()

            async def y_lost(token):  # a coroutine callback
                ry.lost(token)

            y = AsyncElector(
                c, job, "yielder", ELECTOR_TTL, on_elected=ry.elected, on_lost=y_lost, yield_to_preferred=True
            ).start()
            p = AsyncElector(c, job, "chosen", ELECTOR_TTL, on_elected=rp.elected, on_lost=rp.lost, preferred=True)
            try:
                t = await y.wait_elected(PATIENCE)
                assert t is not None
                p.start()
                assert await p.wait_elected(PATIENCE) == t + 1
                assert await y.wait_lost(PATIENCE) and not y.is_leader
                assert tenure_end(server, job, t) == pb.Tenure.END_TRANSFERRED

                await _in_thread(server.wait_waiters, 1)
                await asyncio.sleep(ELECTOR_TTL * 1.5)
                assert p.token == t + 1 and not y.is_leader
                assert ry.events == [("elected", t), ("lost", t)]
                assert rp.events == [("elected", t + 1)]

                await p.resign()
                assert await y.wait_elected(PATIENCE) == t + 2
                assert ry.events == [("elected", t), ("lost", t), ("elected", t + 2)]
            finally:
                await y.resign()
                await p.resign()

    run(main())


class _AsyncIntercepted(_Intercepted):
    async def transfer_lease(self, *args, **kwargs):
        self.transfers += 1
        await _in_thread(self._before)
        return await self._client.transfer_lease(*args, **kwargs)


def test_async_yielding_elector_keeps_leading_when_the_candidate_left(server, client, job):
    ttl = 2.0
    candidate = {}

    def leave():
        candidate["fut"].cancel()
        server.wait_waiters_at_most(0)

    async def main():
        async with AsyncClient(server.target) as ac:
            c = _AsyncIntercepted(ac, leave)
            r = Recorder()
            e = AsyncElector(c, job, "yielder", ttl, on_elected=r.elected, on_lost=r.lost, yield_to_preferred=True)
            try:
                e.start()
                t = await e.wait_elected(PATIENCE)
                # The candidate, from the blocking client: cancelled from a thread.
                candidate["fut"] = client.acquire_future(job, "p", TTL, wait=TTL, timeout=TTL + 10, preferred=True)
                deadline = time.monotonic() + PATIENCE
                while c.transfers < 1:
                    assert time.monotonic() < deadline, "no hand-over"
                    await asyncio.sleep(0.01)
                await asyncio.sleep(ttl)
                assert e.token == t and r.events == [("elected", t)]
                assert c.transfers == 1
            finally:
                await e.resign()
            assert (await ac.get_lease(job)).holder is None

    run(main())
