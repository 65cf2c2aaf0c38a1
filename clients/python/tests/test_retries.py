"""Retries, reconnecting and cancellation, sync and asyncio, against the
real server: an outage is retried with backoff and bounded warnings, the
elector leads again soon after the server is back, timeouts and
cancellation raise Python's own types, and a cancelled waiting Acquire
gives back a grant it may have been given."""

import asyncio
import logging
import threading
import time

import pytest

import harness
import leasehold
from leasehold.aio import AsyncClient, AsyncElector

TTL = 2.0


class _Count(logging.Handler):
    """Counts the elector's warnings, and its failed attempts (one debug
    record each)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.warnings = 0
        self.attempts = 0

    def emit(self, record):
        if record.levelno == logging.WARNING:
            self.warnings += 1
        elif record.levelno == logging.DEBUG:
            self.attempts += 1


@pytest.fixture()
def counted():
    log = logging.getLogger("leasehold.elector")
    h, level = _Count(), log.level
    log.addHandler(h)
    log.setLevel(logging.DEBUG)
    yield h
    log.removeHandler(h)
    log.setLevel(level)


def _check_outage(h, still_leading):
    assert not still_leading, "stepped down by its deadline"
    print(f"5 s outage: {h.attempts} failed attempts, {h.warnings} warnings")
    # Renewals from ttl/10 within the deadline, then a campaign from 100 ms
    # up to 1 s; warnings one every 5 s, plus the step-down.
    assert h.attempts <= 25, f"{h.attempts} attempts in a 5 s outage"
    assert h.warnings <= 4, f"{h.warnings} warnings in a 5 s outage"


def test_outage_is_retried_with_backoff_and_the_elector_leads_again(own_server, counted):
    with leasehold.Client(own_server.target) as c:
        with leasehold.Elector(c, "outage", "e", ttl=TTL) as e:
            first = e.wait_elected(10)
            assert first is not None
            own_server.kill(keep_data=True)
            time.sleep(5)
            _check_outage(counted, e.is_leader)
            own_server.restart()
            back = time.monotonic()
            token = e.wait_elected(15)
            print(f"re-elected {time.monotonic() - back:.2f}s after the server was back")
            assert token is not None and token >= first


def test_async_outage_is_retried_with_backoff_and_the_elector_leads_again(own_server, counted):
    async def main():
        async with AsyncClient(own_server.target) as c:
            async with AsyncElector(c, "outage", "e", ttl=TTL) as e:
                first = await e.wait_elected(10)
                assert first is not None
                own_server.kill(keep_data=True)
                await asyncio.sleep(5)
                _check_outage(counted, e.is_leader)
                own_server.restart()
                back = time.monotonic()
                token = await e.wait_elected(15)
                print(f"re-elected {time.monotonic() - back:.2f}s after the server was back")
                assert token is not None and token >= first

    asyncio.run(main())


def test_a_call_that_times_out_raises_timeout_error(server, connect, job):
    c = connect(server.target)
    assert c.acquire(job, "a", ttl=30).acquired
    with pytest.raises(TimeoutError) as e:
        c.acquire(job, "b", ttl=30, wait=10, timeout=0.3)
    assert isinstance(e.value, leasehold.DeadlineExceeded)
    assert isinstance(e.value, leasehold.Unavailable) and e.value.retryable


def test_a_cancelled_async_call_raises_cancelled_error(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            assert (await c.acquire(job, "a", ttl=30)).acquired
            waiting = asyncio.ensure_future(c.acquire(job, "b", ttl=30, wait=10))
            await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, 1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting

    asyncio.run(main())


ROUNDS = 50


def _check_free(a, job, held_token):
    """B was not told of a grant: the job must be (or soon be) free."""
    end = time.monotonic() + 3
    while True:
        l = a.get_lease(job)
        if l.holder is None:
            return l.token > held_token
        assert time.monotonic() < end, f"{job}: held by {l.holder} (token {l.token}), whose Acquire was cancelled"
        time.sleep(0.02)


def test_a_cancelled_waiting_acquire_gives_back_a_grant_it_was_given(own_server):
    told = given_back = 0
    with leasehold.Client(own_server.target) as a:
        for i in range(ROUNDS):
            job = f"cancel-{i}"
            held = a.acquire(job, "a", ttl=30)
            assert held.acquired
            with leasehold.Client(own_server.target) as b:
                fut = b.acquire_future(job, "b", 30, 20, 30)
                own_server.wait_waiters(1)
                skew = (i * 137 % 1000) / 1e6
                canceller = threading.Thread(target=lambda: (time.sleep(skew if i % 2 == 0 else 0), fut.cancel()))
                canceller.start()
                if i % 2 == 1:
                    time.sleep(skew)
                a.release(job, "a", held.lease.token)
                canceller.join()
                if not fut.cancelled() and fut.exception(10) is None and fut.result().acquired:
                    told += 1
                    continue
                given_back += _check_free(a, job, held.lease.token)
    print(f"{ROUNDS} rounds: {told} grants reached B before the cancel, {given_back} given back")


def test_a_cancelled_async_waiting_acquire_gives_back_a_grant_it_was_given(own_server):
    async def main():
        told = given_back = 0
        loop = asyncio.get_running_loop()
        async with AsyncClient(own_server.target) as a:
            for i in range(ROUNDS):
                job = f"cancel-async-{i}"
                held = await a.acquire(job, "a", ttl=30)
                assert held.acquired
                async with AsyncClient(own_server.target) as b:
                    waiting = asyncio.ensure_future(b.acquire(job, "b", ttl=30, wait=20))
                    await loop.run_in_executor(None, own_server.wait_waiters, 1)
                    skew = (i * 137 % 1000) / 1e6

                    async def cancel():
                        if i % 2 == 0:
                            await asyncio.sleep(skew)
                        waiting.cancel()

                    async def release():
                        if i % 2 == 1:
                            await asyncio.sleep(skew)
                        await a.release(job, "a", held.lease.token)

                    await asyncio.gather(cancel(), release())
                    try:
                        r = await waiting
                    except asyncio.CancelledError:
                        r = None
                    if r is not None and r.acquired:
                        told += 1
                        continue
                # b closed: its clean-up task has run.
                end = time.monotonic() + 3
                while True:
                    l = await a.get_lease(job)
                    if l.holder is None:
                        given_back += l.token > held.lease.token
                        break
                    assert time.monotonic() < end, f"{job}: held by {l.holder} (token {l.token}) after a cancel"
                    await asyncio.sleep(0.02)
        print(f"{ROUNDS} rounds: {told} grants reached B before the cancel, {given_back} given back")

    asyncio.run(main())
