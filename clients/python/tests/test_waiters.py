"""``list_waiters(job, limit)`` (the candidates) against the real server,
on the blocking and the asyncio client: the waiting Acquires in line order,
a preferred one first even when it queued later, ``waiting`` the count of
all of them (also past ``limit``), the line moving as the lease is handed
on, and an empty line, not an error, for a job nobody waits for."""

import asyncio

import harness
import leasehold
from leasehold.aio import AsyncClient, AsyncElector
from test_preferred import TTL, _granted, _wait_in_thread

PATIENCE = 20.0


def _line(c, job, n):
    """The line of ``job`` once ``n`` wait (each Acquire is queued a
    moment after its call starts)."""
    harness.wait_until(lambda: c.list_waiters(job).waiting == n, PATIENCE, f"{n} waiting for {job}")
    return c.list_waiters(job)


def test_two_waiters_are_listed_in_line_order_a_preferred_one_first(server, connect, job):
    c = connect(server.target)
    assert c.acquire(job, "leader", ttl=TTL).lease.token == 1
    line = c.list_waiters(job)
    assert isinstance(line, leasehold.Waiters) and (line.waiters, line.waiting) == ([], 0), "nobody waits yet"

    plain, got_plain = _wait_in_thread(c, job, "plain")
    _line(c, job, 1)
    pref, got_pref = _wait_in_thread(c, job, "pref", preferred=True)
    line = _line(c, job, 2)
    # The preferred one queued later, and is first in line.
    assert line.waiting == 2
    assert [(w.holder, w.preferred, w.principal) for w in line.waiters] == [
        ("pref", True, None),
        ("plain", False, None),
    ]
    assert line.holders == ["pref", "plain"]
    assert all(isinstance(w, leasehold.Waiter) for w in line.waiters)
    # A limit lists the first in line; `waiting` still counts them all.
    first = c.list_waiters(job, 1)
    assert (first.holders, first.waiting) == (["pref"], 2)
    # Nobody waits for an unknown job: an empty line, not an error.
    none = c.list_waiters(job + "-unknown")
    assert (none.waiters, none.waiting) == ([], 0)

    # The line is the order the lease is handed on in.
    c.release(job, "leader", 1)
    _granted(pref, got_pref, 2)
    line = c.list_waiters(job)
    assert ([(w.holder, w.preferred) for w in line.waiters], line.waiting) == ([("plain", False)], 1)
    c.release(job, "pref", 2)
    _granted(plain, got_plain, 3)
    line = c.list_waiters(job)
    assert (line.waiters, line.waiting) == ([], 0)
    c.release(job, "plain", 3)


def test_electors_waiting_for_a_leader_are_its_candidates(client, job):
    lead = leasehold.Elector(client, job, "lead", 30)
    later = leasehold.Elector(client, job, "later", 30)
    pref = leasehold.Elector(client, job, "pref", 30, preferred=True)
    try:
        lead.start()
        assert lead.wait_elected(PATIENCE) == 1
        later.start()
        _line(client, job, 1)
        pref.start()
        line = _line(client, job, 2)
        assert line.holders == [pref.holder, later.holder]
        assert [w.preferred for w in line.waiters] == [True, False]
    finally:
        for e in (pref, later, lead):
            e.resign()


def test_async_list_waiters_in_line_order(server, job):
    async def main():
        async with AsyncClient(server.target) as c:

            async def line_of(n):
                for _ in range(int(PATIENCE / 0.02)):
                    line = await c.list_waiters(job)
                    if line.waiting == n:
                        return line
                    await asyncio.sleep(0.02)
                raise AssertionError(f"{n} did not come to wait for {job}")

            await c.acquire(job, "leader", ttl=TTL)
            plain = asyncio.ensure_future(c.acquire(job, "plain", ttl=TTL, wait=60))
            await line_of(1)
            async with AsyncElector(c, job, "pref", TTL, preferred=True) as e:
                line = await line_of(2)
                assert (line.holders, line.waiting) == ([e.holder, "plain"], 2)
                assert (await c.list_waiters(job, limit=1)).holders == [e.holder]
                empty = await c.list_waiters(job + "-unknown")
                assert (empty.waiters, empty.waiting) == ([], 0)
                await c.release(job, "leader", 1)
                assert await e.wait_elected(PATIENCE) == 2
                line = await c.list_waiters(job)
                assert (line.holders, line.waiting) == (["plain"], 1)
            assert (await asyncio.wait_for(plain, PATIENCE)).lease.token == 3
            await c.release(job, "plain", 3)

    asyncio.run(asyncio.wait_for(main(), 120))
