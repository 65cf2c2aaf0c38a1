"""``Elector(..., on_new_leader=cb)`` and the same on ``AsyncElector``
against the real server: every grant of the job, ours included, reported
once, in token order, with the right holder, from a WatchLease kept open
while the elector runs."""

import asyncio
import threading

import harness
import leasehold
from leasehold.aio import AsyncClient, AsyncElector

PATIENCE = 20.0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class Leaders:
    def __init__(self):
        self.cond = threading.Condition()
        self.seen = []

    def __call__(self, holder, token):
        with self.cond:
            self.seen.append((holder, token))
            self.cond.notify_all()

    def wait_for(self, n, timeout=PATIENCE):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.seen) >= n, timeout), self.seen
            return list(self.seen)


def test_on_new_leader_three_grants_to_two_holders_in_token_order(client, job):
    leaders = Leaders()
    # Token 1 goes to another holder before the elector starts: the watch's
    # first event reports it.
    client.acquire(job, "other", ttl=30)
    elector = leasehold.Elector(client, job, "me", 30, on_new_leader=leaders)
    try:
        elector.start()
        assert leaders.wait_for(1) == [("other", 1)]
        # Token 2: ours, once the other releases (its campaign waits).
        client.release(job, "other", 1)
        assert elector.wait_elected(PATIENCE) == 2
        assert leaders.wait_for(2) == [("other", 1), (elector.holder, 2)]
        # Token 3: the other takes over after our lease is handed to it.
        waiting = client.acquire_future(job, "other", 30, 20, 25)
        harness.wait_until(lambda: _transferred(elector), PATIENCE, "the hand-over")
        assert waiting.result(PATIENCE).acquired
        assert leaders.wait_for(3) == [("other", 1), (elector.holder, 2), ("other", 3)]
    finally:
        elector.resign()
    tokens = [t for _, t in leaders.seen]
    assert tokens == sorted(set(tokens)), "each token once, in order"
    n = len(leaders.seen)
    client.release(job, "other", 3)
    client.acquire(job, "later", ttl=30)
    assert len(leaders.seen) == n, "nothing reported after resign returned"


def _transferred(elector):
    try:
        elector.transfer()
        return True
    except leasehold.NoSuccessor:  # the waiter's Acquire is not queued yet
        return False


def test_on_new_leader_of_two_electors_report_the_same_grants(client, job):
    la, lb = Leaders(), Leaders()
    a = leasehold.Elector(client, job, "w", 30, on_new_leader=la).start()
    try:
        assert a.wait_elected(PATIENCE) == 1
        b = leasehold.Elector(client, job, "w", 30, on_new_leader=lb).start()
        try:
            assert lb.wait_for(1) == [(a.holder, 1)]
            a.resign()
            assert b.wait_elected(PATIENCE) == 2
            assert la.seen == [(a.holder, 1)]
            assert lb.wait_for(2) == [(a.holder, 1), (b.holder, 2)]
        finally:
            b.resign()
    finally:
        a.resign()


def test_async_on_new_leader_three_grants_to_two_holders_in_token_order(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            seen = []
            changed = asyncio.Event()

            async def on_new_leader(holder, token):
                seen.append((holder, token))
                changed.set()

            async def wait_for(n):
                while len(seen) < n:
                    changed.clear()
                    await asyncio.wait_for(changed.wait(), PATIENCE)
                return list(seen)

            await c.acquire(job, "other", ttl=30)
            async with AsyncElector(c, job, "me", 30, on_new_leader=on_new_leader) as e:
                assert await wait_for(1) == [("other", 1)]
                await c.release(job, "other", 1)
                assert await e.wait_elected(PATIENCE) == 2
                assert await wait_for(2) == [("other", 1), (e.holder, 2)]
                waiting = asyncio.ensure_future(c.acquire(job, "other", ttl=30, wait=20))
                await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, 1)
                await e.transfer()
                assert (await asyncio.wait_for(waiting, PATIENCE)).acquired
                assert await wait_for(3) == [("other", 1), (e.holder, 2), ("other", 3)]
            n = len(seen)
            await c.release(job, "other", 3)
            await c.acquire(job, "later", ttl=30)
            await asyncio.sleep(0.2)
            assert len(seen) == n, "nothing reported after resign returned"

    run(main())
