"""``client.lock(job, ttl=...)`` and its asyncio twin against the real server."""

import asyncio
import signal
import threading
import time

import pytest

import harness
import leasehold
from leasehold.aio import AsyncClient


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


# The blocking Lock


def test_lock_yields_the_token_and_releases_on_exit(client, job):
    with client.lock(job, ttl=5) as lock:
        assert isinstance(lock, leasehold.Lock)
        assert lock.token == 1 and lock.is_held and not lock.lost and lock.error is None
        assert lock.holder.startswith("lock@") and lock.job == job
        lock.check()
        assert client.get_lease(job).holder == lock.holder
        assert client.checked_write(job, lock.token, b"k", b"v") == 1
    assert client.get_lease(job).holder is None, "leaving the block released the lease"
    assert not lock.is_held and not lock.lost and lock.token == 1
    assert lock.wait_lost(0)
    with pytest.raises(leasehold.LeaseLost):
        lock.check()
    assert client.acquire(job, "other", ttl=5).lease.token == 2
    with pytest.raises(leasehold.Fenced):
        client.checked_write(job, 1, b"k", b"stale")


def test_two_locks_in_one_process_are_two_holders(client, job):
    a, b = client.lock(job, ttl=5, name="w"), client.lock(job, ttl=5, name="w")
    assert a.holder != b.holder and a.holder.startswith("w@")


def test_a_second_locker_waits_until_the_first_leaves(server, client, job):
    entered = threading.Event()
    got = []
    left_at = []

    def second():
        with client.lock(job, ttl=10) as lock:
            got.append((lock.token, time.monotonic()))
            entered.set()

    with client.lock(job, ttl=10) as first:
        assert first.token == 1
        t = threading.Thread(target=second)
        t.start()
        server.wait_waiters(1)  # the second one is queued on the server
        assert not entered.wait(0.3), "the second locker entered while the first held the lease"
        left_at.append(time.monotonic())
    assert entered.wait(5)
    t.join(5)
    token, at = got[0]
    assert token == 2
    assert at - left_at[0] < 2.5, f"hand-over came from the release, not expiry: {at - left_at[0]:.3f}s"
    assert client.get_lease(job).holder is None


def test_the_lease_is_released_when_the_block_raises(client, job):
    with pytest.raises(RuntimeError, match="boom"):
        with client.lock(job, ttl=30) as lock:
            assert lock.is_held
            raise RuntimeError("boom")
    lease = client.get_lease(job)
    assert (lease.holder, lease.token) == (None, 1)
    # Free at once for the next one, not after the 30 s TTL.
    with client.lock(job, ttl=30, timeout=0) as again:
        assert again.token == 2


def test_a_timeout_raises_deadline_exceeded(server, client, job):
    with client.lock(job, ttl=30) as holder:
        t = time.monotonic()
        with pytest.raises(leasehold.DeadlineExceeded) as e:
            with client.lock(job, ttl=30, timeout=0.5):
                pytest.fail("entered a held lock")
        took = time.monotonic() - t
        assert isinstance(e.value, TimeoutError) and e.value.retryable
        assert 0.45 <= took < 5, took
        with pytest.raises(TimeoutError):
            client.lock(job, ttl=30, timeout=0).acquire()  # one try, no wait
        # No grant was taken meanwhile: the first still holds, nobody waits.
        time.sleep(0.3)
        assert client.get_lease(job).holder == holder.holder
        assert holder.is_held and holder.token == 1
        assert server.metric("leasehold_waiting_acquires") == 0


def test_renewals_keep_the_lease_past_its_ttl(client, job):
    ttl = 0.6
    with client.lock(job, ttl=ttl) as lock:
        end = time.monotonic() + 4 * ttl
        while time.monotonic() < end:
            assert lock.is_held and lock.token == 1
            time.sleep(ttl / 10)
        lease = client.get_lease(job)
        assert (lease.holder, lease.token) == (lock.holder, 1)
        assert client.checked_write(job, lock.token, b"k", b"still ours") == 1
    assert client.get_lease(job).holder is None


def test_a_lease_lost_inside_the_block_is_reported_and_fences_writes(client, job):
    ttl = 0.6
    with client.lock(job, ttl=ttl) as lock:
        # Someone releases our lease behind our back (an operator, say)
        # and another holder takes it.
        client.release(job, lock.holder, lock.token)
        client.acquire(job, "intruder", ttl=30)
        assert lock.wait_lost(ttl + 2), "the next renewal found the lease lost"
        assert lock.lost and not lock.is_held
        assert isinstance(lock.error, leasehold.LeaseLost)
        with pytest.raises(leasehold.LeaseLost):
            lock.check()
        with pytest.raises(leasehold.Fenced) as e:
            client.checked_write(job, lock.token, b"k", b"stale")
        assert e.value.current_token == 2
    # Leaving the block raised nothing and left the new holder alone.
    assert client.get_lease(job).holder == "intruder"


def test_a_lock_on_a_paused_server_is_lost_by_its_own_deadline(own_server, job):
    ttl = 0.6
    with leasehold.Client(own_server.target) as c:
        with c.lock(job, ttl=ttl) as lock:
            own_server.signal(signal.SIGSTOP)
            try:
                t = time.monotonic()
                assert lock.wait_lost(ttl + 2)
                assert time.monotonic() - t <= ttl + 0.3, "lost by the lock's own deadline"
                assert lock.lost and not lock.is_held
                assert isinstance(lock.error, leasehold.LeaseLost)
            finally:
                own_server.signal(signal.SIGCONT)
        # Leaving the block tried to release: the lease is free (or ran out).
        harness.wait_until(lambda: c.get_lease(job).holder is None, 5, "the lease to be free")


def test_a_lock_retries_an_unreachable_server_until_its_timeout(job):
    with leasehold.Client("127.0.0.1:1", timeout=0.5) as c:
        t = time.monotonic()
        with pytest.raises(leasehold.DeadlineExceeded) as e:
            c.lock(job, ttl=5, timeout=1.0).acquire()
        assert 1.0 <= time.monotonic() - t < 3
        assert isinstance(e.value.__cause__, leasehold.Unavailable)

    async def main():
        async with AsyncClient("127.0.0.1:1", timeout=0.5) as c:
            t = time.monotonic()
            with pytest.raises(leasehold.DeadlineExceeded):
                await c.lock(job, ttl=5, timeout=1.0).acquire()
            assert 1.0 <= time.monotonic() - t < 3

    run(main())


def test_bad_arguments_are_refused_at_once(client, job):
    with pytest.raises(ValueError):
        client.lock(job, ttl=0)
    with pytest.raises(ValueError):
        client.lock("", ttl=5)
    with pytest.raises(ValueError):
        client.lock(job, ttl=5, timeout=-1)
    with pytest.raises(leasehold.InvalidArgument) as e:
        client.lock(job, ttl=10 * 3600, timeout=5).acquire()  # over --max-ttl: not retried
    assert e.value.field == "ttl"
    lock = client.lock(job, ttl=5).acquire()
    with pytest.raises(RuntimeError):
        lock.acquire()
    lock.release()
    lock.release()  # twice is fine
    assert client.get_lease(job).holder is None


# The asyncio AsyncLock


def test_async_lock_yields_the_token_and_releases_on_exit(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            async with c.lock(job, ttl=5) as lock:
                assert isinstance(lock, leasehold.AsyncLock)
                assert lock.token == 1 and lock.is_held
                assert (await c.get_lease(job)).holder == lock.holder
                assert await c.checked_write(job, lock.token, b"k", b"v") == 1
            assert (await c.get_lease(job)).holder is None
            assert not lock.is_held and not lock.lost
            assert await lock.wait_lost(0)

    run(main())


def test_async_a_second_locker_waits_until_the_first_leaves(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            got = []

            async def second():
                async with c.lock(job, ttl=10) as lock:
                    got.append((lock.token, time.monotonic()))

            async with c.lock(job, ttl=10) as first:
                assert first.token == 1
                task = asyncio.ensure_future(second())
                await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, 1)
                await asyncio.sleep(0.3)
                assert not got and not task.done()
                left = time.monotonic()
            await asyncio.wait_for(task, 5)
            token, at = got[0]
            assert token == 2 and at - left < 2.5
            assert (await c.get_lease(job)).holder is None

    run(main())


def test_async_lock_released_when_the_block_raises(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            with pytest.raises(RuntimeError):
                async with c.lock(job, ttl=30):
                    raise RuntimeError("boom")
            lease = await c.get_lease(job)
            assert (lease.holder, lease.token) == (None, 1)

    run(main())


def test_async_timeout_and_cancellation(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            async with c.lock(job, ttl=30) as holder:
                t = time.monotonic()
                with pytest.raises(leasehold.DeadlineExceeded):
                    async with c.lock(job, ttl=30, timeout=0.5):
                        pytest.fail("entered a held lock")
                assert 0.45 <= time.monotonic() - t < 5
                with pytest.raises(TimeoutError):
                    await c.lock(job, ttl=30, timeout=0).acquire()
                # A task waiting to lock is cancelled: it leaves no waiter.
                waiting = asyncio.ensure_future(c.lock(job, ttl=30).acquire())
                await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, 1)
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters_at_most, 0)
                assert holder.is_held
            # Released: free now, and no cancelled waiter took it.
            await asyncio.sleep(0.3)
            lease = await c.get_lease(job)
            assert (lease.holder, lease.token) == (None, 1)

    run(main())


def test_async_renewals_keep_the_lease_and_a_loss_is_reported(server, job):
    ttl = 0.6

    async def main():
        async with AsyncClient(server.target) as c:
            async with c.lock(job, ttl=ttl) as lock:
                end = time.monotonic() + 4 * ttl
                while time.monotonic() < end:
                    assert lock.is_held and lock.token == 1
                    await asyncio.sleep(ttl / 10)
                assert (await c.get_lease(job)).holder == lock.holder
                await c.release(job, lock.holder, lock.token)
                await c.acquire(job, "intruder", ttl=30)
                assert await lock.wait_lost(ttl + 2)
                assert lock.lost and isinstance(lock.error, leasehold.LeaseLost)
                with pytest.raises(leasehold.Fenced):
                    await c.checked_write(job, lock.token, b"k", b"stale")
            assert (await c.get_lease(job)).holder == "intruder"

    run(main())


# A loss made on purpose by the chaos API, reported by both locks


@pytest.fixture(scope="module")
def chaos_server():
    s = harness.ServerProcess(extra=["--enable-chaos"])
    yield s
    s.stop()


def test_lock_reports_a_chaos_expiry_and_its_token_is_fenced(chaos_server, job):
    ttl = 1.5
    lost = []
    told = threading.Event()

    def on_lost(token):
        lost.append(token)
        told.set()

    with leasehold.Client(chaos_server.target) as c:
        with c.lock(job, ttl=ttl, on_lost=on_lost) as lock:
            assert lock.token == 1 and lock.is_held
            c.chaos().expire(job)  # the lease ends now, behind the lock's back
            assert lock.wait_lost(ttl + 5), "the next renewal found the lease lost"
            assert told.wait(5) and lost == [1], "on_lost was called once, with the token"
            assert lock.lost and not lock.is_held
            assert isinstance(lock.error, leasehold.LeaseLost)
            with pytest.raises(leasehold.LeaseLost):
                lock.check()
            c.acquire(job, "next", ttl=30)
            with pytest.raises(leasehold.Fenced) as e:
                c.checked_write(job, lock.token, b"k", b"stale")
            assert e.value.current_token == 2
        assert c.get_lease(job).holder == "next", "leaving the block left the new holder alone"
        # A plain release is not a loss: on_lost is not called.
        c.release(job, "next", 2)
        with c.lock(job, ttl=ttl, on_lost=on_lost):
            pass
        assert lost == [1]


def test_async_lock_reports_a_chaos_expiry_and_its_token_is_fenced(chaos_server, job):
    ttl = 1.5

    async def main():
        lost = []
        told = asyncio.Event()

        async def on_lost(token):
            lost.append(token)
            told.set()

        async with AsyncClient(chaos_server.target) as c:
            async with c.lock(job, ttl=ttl, on_lost=on_lost) as lock:
                assert lock.token == 1
                await c.chaos().expire(job)
                assert await lock.wait_lost(ttl + 5)
                await asyncio.wait_for(told.wait(), 5)
                assert lost == [1] and lock.lost and not lock.is_held
                await c.acquire(job, "next", ttl=30)
                with pytest.raises(leasehold.Fenced):
                    await c.checked_write(job, lock.token, b"k", b"stale")
            assert (await c.get_lease(job)).holder == "next"

    run(main())
