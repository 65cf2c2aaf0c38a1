"""Giving back a grant whose caller may never have learned of it (a
cancelled waiting Acquire), and the rule that makes it safe: **a give-back
never ends a lease its holder was told it holds**. A repeated Acquire or a
Renew may have told the holder that it leads; after one, only its own
release or the TTL ends the lease, or another holder could take over before
the TTL it was promised. Against the real server, sync and asyncio."""

import asyncio
import threading
import time

import grpc
import pytest

import leasehold
from leasehold._giveback import Calls
from leasehold.aio import AsyncClient
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as pb_grpc

TTL = 30.0
ROUNDS = 10


@pytest.fixture()
def raw(server):
    """The generated stub, on a channel of its own."""
    with grpc.insecure_channel(server.target) as ch:
        yield pb_grpc.LeasesStub(ch)


def _give_back(raw, job, holder, token):
    r = raw.Release(pb.ReleaseRequest(job=job, holder=holder, token=token, give_back=True), timeout=10)
    return r.released


def test_a_give_back_ends_only_a_grant_never_asked_for_again(server, client, raw, job):
    c = client
    # Granted, never asked again: given back, and the job is free.
    a = c.acquire(job, "a", TTL)
    assert a.acquired
    assert _give_back(raw, job, "a", a.lease.token)
    assert c.get_lease(job).holder is None

    # Asked again with a repeated Acquire: kept.
    a = c.acquire(job, "a", TTL)
    again = c.acquire(job, "a", TTL)
    assert again.lease.token == a.lease.token, "a re-grant"
    assert not _give_back(raw, job, "a", a.lease.token)
    l = c.get_lease(job)
    assert (l.holder, l.token) == ("a", a.lease.token)

    # Asked again with a Renew: kept.
    c.release(job, "a", a.lease.token)
    a = c.acquire(job, "a", TTL)
    c.renew(job, "a", a.lease.token, TTL)
    assert not _give_back(raw, job, "a", a.lease.token)
    assert c.get_lease(job).holder == "a"

    # Another holder's, or another token's: nothing changes, no error.
    assert not _give_back(raw, job, "b", a.lease.token)
    assert not _give_back(raw, job, "a", a.lease.token + 1)
    assert not _give_back(raw, f"{job}-never-granted", "a", 1)
    assert c.get_lease(job).holder == "a"

    # A plain release says whether it ended the holding.
    release = pb.ReleaseRequest(job=job, holder="a", token=a.lease.token)
    assert raw.Release(release, timeout=10).released
    assert not raw.Release(release, timeout=10).released, "a repeated release changes nothing"


def _ended_early(i, retry, l):
    return (
        f"round {i}: A was told it holds token {retry.lease.token}, and its lease ended early "
        f"(now held by {l.holder}, token {l.token})"
    )


def _check_kept(a, job, i, retry):
    """A was told it holds the retry's token: after any give-back of the
    cancelled call has had time to run, the lease is still A's."""
    time.sleep(0.4)
    l = a.get_lease(job)
    assert (l.holder, l.token) == ("a", retry.lease.token), _ended_early(i, retry, l)


def test_a_retry_after_a_cancelled_acquire_keeps_its_grant(server, job):
    """Per round: B holds the job and A waits for it; B releases as A's call
    is cancelled, and A asks again at once on the same client (a retry, as
    an elector does). The retry is granted, so A was told that it leads."""
    cancelled = 0
    with leasehold.Client(server.target) as a, leasehold.Client(server.target) as b:
        for i in range(ROUNDS):
            j = f"{job}-{i}"
            held = b.acquire(j, "b", TTL)
            assert held.acquired
            fut = a.acquire_future(j, "a", TTL, 20, 30)
            # A is in line once its Acquire reached the server.
            time.sleep(0.03)
            skew = (i * 137 % 1000) / 1e6
            canceller = threading.Thread(target=lambda: (time.sleep(skew), fut.cancel()))
            canceller.start()
            b.release(j, "b", held.lease.token)
            canceller.join()
            cancelled += fut.cancelled()
            retry = a.acquire(j, "a", TTL, wait=5)
            assert retry.acquired, f"round {i}: B released; A's retry is granted"
            _check_kept(a, j, i, retry)
            a.release(j, "a", retry.lease.token)
        # Nothing on its way, nothing told: the registries are empty.
        assert len(a._calls) == 0 and len(b._calls) == 0
    print(f"{ROUNDS} rounds: {cancelled} cancels won over the reply")


def test_an_async_retry_after_a_cancelled_acquire_keeps_its_grant(server, job):
    async def main():
        cancelled = 0
        async with AsyncClient(server.target) as a, AsyncClient(server.target) as b:
            for i in range(ROUNDS):
                j = f"{job}-{i}"
                held = await b.acquire(j, "b", TTL)
                assert held.acquired
                waiting = asyncio.ensure_future(a.acquire(j, "a", TTL, wait=20))
                # A is in line once its Acquire reached the server.
                await asyncio.sleep(0.03)
                skew = (i * 137 % 1000) / 1e6

                async def cancel():
                    await asyncio.sleep(skew)
                    waiting.cancel()

                await asyncio.gather(b.release(j, "b", held.lease.token), cancel())
                try:
                    await waiting
                except asyncio.CancelledError:
                    cancelled += 1
                retry = await a.acquire(j, "a", TTL, wait=5)
                assert retry.acquired, f"round {i}: B released; A's retry is granted"
                await asyncio.sleep(0.4)
                l = await a.get_lease(j)
                assert (l.holder, l.token) == ("a", retry.lease.token), _ended_early(i, retry, l)
                await a.release(j, "a", retry.lease.token)
            assert len(a._calls) == 0 and len(b._calls) == 0
        print(f"{ROUNDS} rounds: {cancelled} cancels won over the reply")

    asyncio.run(main())


def test_the_registry_lets_a_give_back_through_only_when_nothing_was_told():
    c = Calls()
    # Alone, and its call ended: may give back a grant above what was told.
    cancelled = c.start("j", "a")
    cancelled.end()
    assert len(c) == 0
    assert c.may_give_back("j", "a", cancelled.n, 7)

    # A retry started since: never, whether or not it is still on its way.
    cancelled = c.start("j", "a")
    cancelled.end()
    with c.start("j", "a") as retry:
        assert not c.may_give_back("j", "a", cancelled.n, 7)
        retry.told(7)
    assert not c.may_give_back("j", "a", cancelled.n, 7)

    # An older call on its way: not while it may tell its caller.
    older = c.start("j", "a")
    cancelled = c.start("j", "a")
    cancelled.end()
    assert not c.may_give_back("j", "a", cancelled.n, 8)
    older.end()
    # Told 7: a token above it may go, not 7 itself.
    assert c.may_give_back("j", "a", cancelled.n, 8)
    assert not c.may_give_back("j", "a", cancelled.n, 7)

    # Released through the client: forgotten.
    c.released("j", "a")
    assert len(c) == 0
    # Other pairs are their own.
    other = c.start("j", "b")
    assert c.may_give_back("j", "a", cancelled.n, 7)
    other.end()
    other.end()  # once only
    assert len(c) == 0
