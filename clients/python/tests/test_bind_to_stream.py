"""bind_to_stream against the real server: a grant bound to its
connection is released at once when the client's end of the connection
closes (as when its process dies), not after its TTL, and the history
says CONNECTION_CLOSED; an unbound grant outlives its connection; an
Elector (and AsyncElector) with ``bind_to_stream=True`` works like any
elector and binds its grants.

gRPC shares one connection between the channels of a process to one
target; the clients whose connection a test closes are given their own
(``grpc.use_local_subchannel_pool``)."""

import asyncio
import threading
import time

import grpc
import pytest

import leasehold
from leasehold.aio import AsyncClient, AsyncElector
from leasehold.client import RECONNECT_OPTIONS
from leasehold.v1 import leasehold_pb2 as pb
from test_transfer import PATIENCE, Recorder, history, tenure_end, wait_until

# Far longer than any step of a test: a release must come from the
# connection's end, well before the TTL.
TTL = 30.0
OWN_CONNECTION = [*RECONNECT_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]


def own_client(target):
    """(client, channel): a Client on a connection of its own."""
    ch = grpc.insecure_channel(target, options=OWN_CONNECTION)
    return leasehold.Client(channel=ch), ch


def test_a_bound_grant_is_released_at_once_when_its_connection_closes(server, client, job):
    bound, ch = own_client(server.target)
    a = bound.acquire(job, "bound", ttl=TTL, bind_to_stream=True)
    assert a.acquired and a.lease.token == 1
    assert client.get_lease(job).holder == "bound"

    t = time.monotonic()
    ch.close()
    wait_until(lambda: client.get_lease(job).holder is None, TTL / 3, "release by the connection's end")
    assert time.monotonic() - t < TTL / 3
    l = client.get_lease(job)
    assert (l.holder, l.token) == (None, 1)
    assert tenure_end(server, job, 1) == pb.Tenure.END_CONNECTION_CLOSED


def test_the_first_waiter_is_granted_when_a_bound_holder_s_connection_closes(server, client, job):
    bound, ch = own_client(server.target)
    assert bound.acquire(job, "bound", ttl=TTL, bind_to_stream=True).acquired
    got = {}
    waiter = threading.Thread(target=lambda: got.update(r=client.acquire(job, "next", ttl=TTL, wait=TTL)))
    waiter.start()
    server.wait_waiters(1)

    t = time.monotonic()
    ch.close()
    waiter.join(TTL / 3)
    assert "r" in got, "the waiter was not granted before a third of the TTL"
    assert time.monotonic() - t < TTL / 3
    assert got["r"].acquired and got["r"].lease.token == 2
    assert tenure_end(server, job, 1) == pb.Tenure.END_CONNECTION_CLOSED
    client.release(job, "next", 2)


def test_an_unbound_grant_outlives_its_connection(server, client, job):
    unbound, ch = own_client(server.target)
    assert unbound.acquire(job, "unbound", ttl=TTL).acquired
    ch.close()
    time.sleep(1.0)
    l = client.get_lease(job)
    assert (l.holder, l.token) == ("unbound", 1), "released without bind_to_stream"
    client.release(job, "unbound", 1)


def test_an_async_bound_grant_is_released_when_its_connection_closes(server, client, job):
    async def main():
        ch = grpc.aio.insecure_channel(server.target, options=OWN_CONNECTION)
        c = AsyncClient(channel=ch)
        a = await c.acquire(job, "bound", ttl=TTL, bind_to_stream=True)
        assert a.acquired and a.lease.token == 1
        t = time.monotonic()
        await ch.close()
        return t

    t = asyncio.run(main())
    wait_until(lambda: client.get_lease(job).holder is None, TTL / 3, "release by the connection's end")
    assert time.monotonic() - t < TTL / 3
    assert tenure_end(server, job, 1) == pb.Tenure.END_CONNECTION_CLOSED


def test_electors_with_bind_to_stream_work_like_any_elector(server, client, job):
    ra, rb = Recorder(), Recorder()
    a = leasehold.Elector(client, job, "a", TTL, on_elected=ra.elected, on_lost=ra.lost, bind_to_stream=True)
    b = leasehold.Elector(client, job, "b", TTL, on_elected=rb.elected, on_lost=rb.lost, bind_to_stream=True)
    assert a.bind_to_stream and not leasehold.Elector(client, job, "c", TTL).bind_to_stream
    a.start()
    b.start()
    try:
        wait_until(lambda: a.is_leader or b.is_leader, what="leader")
        leader, follower = (a, b) if a.is_leader else (b, a)
        assert leader.token == 1
        server.wait_waiters(1)
        assert not follower.is_leader
        assert client.checked_write(job, 1, b"k", b"a") == 1
        # Renewals keep it (a bound lease still needs them).
        time.sleep(0.5)
        assert leader.token == 1

        lease = leader.transfer()
        assert (lease.holder, lease.token) == (follower.holder, 2)
        assert follower.wait_elected(PATIENCE) == 2
        with pytest.raises(leasehold.Fenced):
            client.checked_write(job, 1, b"k", b"stale")
        server.wait_waiters(1)
        t = time.monotonic()
        follower.resign()
        assert leader.wait_elected(PATIENCE) == 3
        assert time.monotonic() - t < TTL / 3, "handed over by the release"
    finally:
        a.resign()
        b.resign()
    l = client.get_lease(job)
    assert (l.holder, l.token) == (None, 3)
    ends = [t.end for t in history(server, job)]
    assert ends == [pb.Tenure.END_RELEASED, pb.Tenure.END_RELEASED, pb.Tenure.END_TRANSFERRED]


def test_an_elector_s_bound_grant_is_released_when_its_connection_closes(server, client, job):
    """The leader's connection closes (as when its process dies): the
    waiting elector leads at once, not after the TTL."""
    own, ch = own_client(server.target)
    r = Recorder()
    gone = leasehold.Elector(own, job, "gone", TTL, bind_to_stream=True)
    waiting = leasehold.Elector(client, job, "waiting", TTL, on_elected=r.elected)
    try:
        gone.start()
        assert gone.wait_elected(PATIENCE) == 1
        waiting.start()
        server.wait_waiters(1)
        t = time.monotonic()
        ch.close()
        assert waiting.wait_elected(TTL / 3) == 2
        assert time.monotonic() - t < TTL / 3
        assert tenure_end(server, job, 1) == pb.Tenure.END_CONNECTION_CLOSED
    finally:
        waiting.resign()
        gone.resign(timeout=5)


def test_an_async_elector_with_bind_to_stream_binds_its_grants(server, client, job):
    async def main():
        ch = grpc.aio.insecure_channel(server.target, options=OWN_CONNECTION)
        c = AsyncClient(channel=ch)
        e = AsyncElector(c, job, "async", TTL, bind_to_stream=True).start()
        assert e.bind_to_stream
        try:
            assert await e.wait_elected(PATIENCE) == 1
            assert (await c.get_lease(job)).holder == e.holder
            t = time.monotonic()
            await ch.close()
            return t
        finally:
            await e.resign()  # its release fails: the channel is closed

    t = asyncio.run(main())
    wait_until(lambda: client.get_lease(job).holder is None, TTL / 3, "release by the connection's end")
    assert time.monotonic() - t < TTL / 3
    assert tenure_end(server, job, 1) == pb.Tenure.END_CONNECTION_CLOSED
