"""The asyncio client and AsyncElector against the real server."""

import asyncio
import signal
import time

import pytest

import harness
import leasehold
from leasehold.aio import AsyncClient, AsyncElector


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_async_client_calls_and_typed_errors(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            a = await c.acquire(job, "a", ttl=30)
            assert a.acquired and a.lease.token == 1
            assert (await c.renew(job, "a", 1, ttl=30)).token == 1
            assert await c.checked_write(job, 1, b"k", b"v") == 1
            assert (await c.read(job, b"k")).value == b"v"
            assert [k.key for k in await c.list_keys(job)] == [b"k"]
            assert job in [l.job for l in await c.list_leases(job)]
            with pytest.raises(leasehold.InvalidArgument) as e:
                await c.acquire(job, "b", ttl=0)
            assert e.value.field == "ttl"
            with pytest.raises(leasehold.UnknownToken):
                await c.checked_write(job, 9, b"k", b"v")
            await c.release(job, "a", 1)
            with pytest.raises(leasehold.LeaseLost) as e:
                await c.renew(job, "a", 1, ttl=30)
            assert e.value.current_token == 1
            await c.acquire(job, "b", ttl=30)
            with pytest.raises(leasehold.Fenced) as e:
                await c.checked_write(job, 1, b"k", b"stale")
            assert e.value.current_token == 2
            assert await c.delete(job, 2, b"k") == 2

    run(main())


def test_async_watch(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            events = c.watch(job, timeout=20)
            first = await events.__anext__()
            assert first.kind == leasehold.EventKind.CURRENT
            await c.acquire(job, "a", ttl=30)
            e = await events.__anext__()
            assert (e.kind, e.lease.token) == (leasehold.EventKind.ACQUIRED, 1)
            await events.aclose()

    run(main())


def test_async_electors_one_leads_and_resign_hands_over(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            seen = []
            a = AsyncElector(c, job, "a", 10, on_elected=lambda t: seen.append(("a", t))).start()

            async def b_elected(t):  # a coroutine callback
                seen.append(("b", t))

            b = AsyncElector(c, job, "b", 10, on_elected=b_elected).start()
            done, _ = await asyncio.wait(
                {asyncio.ensure_future(a.wait_elected()), asyncio.ensure_future(b.wait_elected())},
                return_when=asyncio.FIRST_COMPLETED,
            )
            assert [t.result() for t in done] == [1]
            leader, follower = (a, b) if a.is_leader else (b, a)
            await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, 1)
            assert not follower.is_leader
            t = time.monotonic()
            await leader.resign()
            assert await follower.wait_elected(5) == 2
            assert time.monotonic() - t < 2.5
            await follower.resign()
            lease = await c.get_lease(job)
            assert (lease.holder, lease.token) == (None, 2)
            assert sorted(t for _, t in seen) == [1, 2], seen

    run(main())


def test_async_elector_steps_down_by_its_deadline_when_the_server_is_paused(own_server):
    ttl = 0.9

    async def main():
        async with AsyncClient(own_server.target) as c:
            e = AsyncElector(c, "paused", "e", ttl).start()
            assert await e.wait_elected(5) == 1
            await asyncio.sleep(ttl)
            own_server.signal(signal.SIGSTOP)
            stopped = time.monotonic()
            assert await e.wait_lost(3 * ttl)
            after = time.monotonic() - stopped
            assert after <= ttl + 0.3, f"stepped down late: {after:.3f}s"
            t = time.monotonic()
            await e.resign()
            assert time.monotonic() - t < 2.0
            own_server.signal(signal.SIGCONT)

    try:
        run(main())
    finally:
        own_server.signal(signal.SIGCONT)


def test_async_late_grant_is_confirmed_and_lease_lost_campaigns_again(server, job):
    """As for the thread-based Elector: a grant long after the Acquire was
    sent is confirmed with a Renew (no flapping), and LEASE_LOST steps down
    and campaigns again."""
    ttl = 0.5

    async def main():
        async with AsyncClient(server.target) as c:
            await c.acquire(job, "other", ttl=30)
            events = []
            e = AsyncElector(
                c, job, "late", ttl,
                on_elected=lambda t: events.append(("elected", t)),
                on_lost=lambda t: events.append(("lost", t)),
            ).start()
            try:
                await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, 1)
                await asyncio.sleep(2 * ttl)  # the waiting Acquire ages past a TTL
                await c.release(job, "other", 1)
                assert await e.wait_elected(5) == 2
                await asyncio.sleep(3 * ttl)
                assert e.token == 2 and events == [("elected", 2)], events
                # Handed to a waiting thief behind its back (the release
                # grants the queued waiter in the same step): LEASE_LOST,
                # then elected again once the thief's lease runs out.
                thief = asyncio.ensure_future(c.acquire(job, "thief", ttl=1.0, wait=10))
                await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, 1)
                await c.release(job, e.holder, 2)
                assert (await thief).lease.token == 3
                deadline = time.monotonic() + 5
                while ("elected", 4) not in events:
                    assert time.monotonic() < deadline, events
                    await asyncio.sleep(0.02)
                assert events == [("elected", 2), ("lost", 2), ("elected", 4)]
            finally:
                await e.resign()

    run(main())


def test_async_two_electors_with_one_name_are_two_holders(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            a = AsyncElector(c, job, "twin", 10).start()
            b = AsyncElector(c, job, "twin", 10).start()
            try:
                assert a.holder != b.holder and a.holder.startswith("twin@")
                done, _ = await asyncio.wait(
                    {asyncio.ensure_future(a.wait_elected()), asyncio.ensure_future(b.wait_elected())},
                    return_when=asyncio.FIRST_COMPLETED,
                )
                assert [t.result() for t in done] == [1]
                leader, follower = (a, b) if a.is_leader else (b, a)
                await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, 1)
                for _ in range(10):
                    assert leader.token == 1 and follower.token is None
                    await asyncio.sleep(0.03)
                assert (await c.get_lease(job)).holder == leader.holder
                await leader.resign()
                token = await follower.wait_elected(5)
                assert token is not None and token > 1
                with pytest.raises(leasehold.Fenced) as e:
                    await c.checked_write(job, 1, b"k", b"old")
                assert e.value.current_token == token
                await c.checked_write(job, token, b"k", b"new")
            finally:
                await a.resign()
                await b.resign()

    run(main())


def test_async_elector_checks_up_front_and_stops_on_a_refused_campaign():
    s = harness.ServerProcess(extra=["--max-ttl", "10s", "--max-name-bytes", "64"])

    async def main():
        async with AsyncClient(s.target) as c:
            for job, name, ttl in [("j", "n", 0), ("", "n", 1), ("j", "", 1)]:
                with pytest.raises(ValueError):
                    AsyncElector(c, job, name, ttl)
            for job, ttl, field in [("long-ttl", 20.0, "ttl"), ("j" * 65, 1.0, "job")]:
                e = AsyncElector(c, job, "n", ttl).start()
                with pytest.raises(leasehold.InvalidArgument) as err:
                    await e.wait_elected(5)
                assert err.value.field == field and e.error is err.value
                assert e._task is not None and e._task.done(), "stopped campaigning"
                await e.resign()

    try:
        run(main())
    finally:
        s.stop()
