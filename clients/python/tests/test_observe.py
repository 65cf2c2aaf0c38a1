"""``client.observe(job)`` (a closable iterator) and ``AsyncClient.observe``
(``async for``) against the real server: the current state first, then
acquired / released / expired; closing ends it cleanly; a server shutting
down surfaces the typed error."""

import asyncio
import queue
import threading
import time

import pytest

import harness
import leasehold
from leasehold import EventKind
from leasehold.aio import AsyncClient

PATIENCE = 20.0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def collect(changes, out):
    """Reads ``changes`` on a thread into the queue ``out``; ends with
    ``None``, or the error the iteration raised."""
    try:
        for c in changes:
            out.put(c)
        out.put(None)
    except Exception as e:  # handed to the test
        out.put(e)


def test_observe_reports_current_acquired_released_expired(client, job):
    out = queue.Queue()
    with client.observe(job) as changes:
        t = threading.Thread(target=collect, args=(changes, out), daemon=True)
        t.start()
        first = out.get(timeout=PATIENCE)
        assert (first.kind, first.lease.holder, first.lease.token) == (EventKind.CURRENT, None, 0)
        client.acquire(job, "a", ttl=30)
        c = out.get(timeout=PATIENCE)
        assert (c.kind, c.lease.holder, c.lease.token) == (EventKind.ACQUIRED, "a", 1)
        client.renew(job, "a", 1, ttl=30)  # renewals send nothing
        client.release(job, "a", 1)
        c = out.get(timeout=PATIENCE)
        assert (c.kind, c.lease.holder, c.lease.token) == (EventKind.RELEASED, None, 1)
        client.acquire(job, "b", ttl=0.3)
        c = out.get(timeout=PATIENCE)
        assert (c.kind, c.lease.holder, c.lease.token) == (EventKind.ACQUIRED, "b", 2)
        c = out.get(timeout=PATIENCE)
        assert (c.kind, c.lease.holder, c.lease.token) == (EventKind.EXPIRED, None, 2)
    # Leaving the block closed it: the iteration ends without an error.
    assert out.get(timeout=PATIENCE) is None
    t.join(PATIENCE)


def test_observe_close_from_another_thread_ends_it_cleanly(client, job):
    changes = client.observe(job)
    out = queue.Queue()
    t = threading.Thread(target=collect, args=(changes, out), daemon=True)
    t.start()
    assert out.get(timeout=PATIENCE).kind is EventKind.CURRENT
    changes.close()
    assert out.get(timeout=PATIENCE) is None
    t.join(PATIENCE)
    assert not t.is_alive()


def test_observe_a_server_shutting_down_raises_the_typed_error(own_server, job):
    with leasehold.Client(own_server.target) as c:
        out = queue.Queue()
        changes = c.observe(job)
        t = threading.Thread(target=collect, args=(changes, out), daemon=True)
        t.start()
        assert out.get(timeout=PATIENCE).kind is EventKind.CURRENT
        own_server.stop()  # SIGTERM
        err = out.get(timeout=PATIENCE)
        assert isinstance(err, leasehold.Unavailable), repr(err)
        assert err.retryable


def test_async_observe_reports_changes_and_ends_on_break(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            seen = []
            changes = c.observe(job)
            async for change in changes:
                seen.append((change.kind, change.lease.holder, change.lease.token))
                if change.kind is EventKind.CURRENT:
                    await c.acquire(job, "a", ttl=30)
                elif change.kind is EventKind.ACQUIRED:
                    await c.release(job, "a", 1)
                else:
                    break
            await changes.aclose()
            assert seen == [
                (EventKind.CURRENT, None, 0),
                (EventKind.ACQUIRED, "a", 1),
                (EventKind.RELEASED, None, 1),
            ]
            # A task observing is cancelled: it ends with CancelledError, at once.
            got_current = asyncio.Event()

            async def observe_forever():
                async for _ in c.observe(job):
                    got_current.set()

            task = asyncio.ensure_future(observe_forever())
            await asyncio.wait_for(got_current.wait(), PATIENCE)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, PATIENCE)

    run(main())


def test_async_observe_a_server_shutting_down_raises_the_typed_error(own_server, job):
    async def main():
        async with AsyncClient(own_server.target) as c:
            changes = c.observe(job)
            first = await asyncio.wait_for(changes.__anext__(), PATIENCE)
            assert first.kind is EventKind.CURRENT
            await asyncio.get_running_loop().run_in_executor(None, own_server.stop)
            with pytest.raises(leasehold.Unavailable):
                await asyncio.wait_for(changes.__anext__(), PATIENCE)

    run(main())
