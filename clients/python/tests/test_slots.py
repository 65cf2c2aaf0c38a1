"""Counted leases (semaphores, ``slots=N``) against the real server: the
unary ``acquire(..., slots=)`` (blocking and asyncio), the electors'
``slots`` with ``lease_job`` and ``slot``, and the counted locks. Slot k
of job J is the job ``J#k``, with its own token: the holder renews,
releases and writes with that name."""

import asyncio
import threading
import time

import pytest

import harness
import leasehold
from leasehold.aio import AsyncClient, AsyncElector
from leasehold._wire import acquire_request

# Long enough that no lease here runs out by accident on a loaded machine;
# the renewals are proved by a shorter one where it matters.
TTL = 30.0
PATIENCE = 30.0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


class Recorder:
    """The on_elected / on_lost callbacks of one elector, with the job and
    slot it named when elected (read on the callback thread)."""

    def __init__(self):
        self.elector = None
        self.events = []
        self.cond = threading.Condition()

    def elected(self, token):
        with self.cond:
            self.events.append(("elected", token, self.elector.lease_job, self.elector.slot))
            self.cond.notify_all()

    def lost(self, token):
        with self.cond:
            self.events.append(("lost", token))
            self.cond.notify_all()

    def wait_for(self, event, timeout=PATIENCE):
        with self.cond:
            assert self.cond.wait_for(lambda: event in self.events, timeout), (event, self.events)


def test_the_request_carries_slots_and_bad_counts_are_refused_before_sending():
    assert acquire_request("j", "h", 1.0, 0.0).slots == 0
    assert acquire_request("j", "h", 1.0, 0.0, slots=3).slots == 3
    for bad in (-1, 1.5, "2"):
        with pytest.raises(ValueError):
            acquire_request("j", "h", 1.0, 0.0, slots=bad)
    # The electors and locks refuse a count over 100 as the server would,
    # before campaigning: a campaign would stop on it.
    for make in (leasehold.Elector, AsyncElector):
        with pytest.raises(leasehold.InvalidArgument) as e:
            make(None, "j", "n", 1.0, slots=101)
        assert e.value.field == "slots"
        assert make(None, "j", "n", 1.0, slots=100).slots == 100
        assert make(None, "j", "n", 1.0).slots == 0
    with pytest.raises(leasehold.InvalidArgument) as e:
        leasehold.Lock(None, "j", 1.0, slots=101)
    assert e.value.field == "slots"


# The unary Acquire (blocking and asyncio, through `connect`)


def test_acquire_with_slots_grants_each_slot_on_its_own_job_with_its_own_token(server, connect, job):
    c = connect(server.target)
    a = c.acquire(job, "a", ttl=TTL, slots=2)
    b = c.acquire(job, "b", ttl=TTL, slots=2)
    assert a.acquired and b.acquired
    assert {(a.lease.job, a.lease.slot), (b.lease.job, b.lease.slot)} == {(f"{job}#0", 0), (f"{job}#1", 1)}
    assert (a.lease.slots, b.lease.slots, a.lease.token, b.lease.token) == (2, 2, 1, 1), "a token per slot"
    # Both slots taken: a third is told so, and not granted.
    busy = c.acquire(job, "c", ttl=TTL, slots=2)
    assert not busy.acquired and busy.lease.holder in ("a", "b")
    # The live holder asking again is renewed in its slot: same job, same token.
    again = c.acquire(job, "a", ttl=TTL, slots=2)
    assert again.acquired and (again.lease.job, again.lease.token) == (a.lease.job, 1)
    # The holder renews and releases with its slot's job.
    assert c.renew(a.lease.job, "a", 1, ttl=TTL).job == a.lease.job
    c.release(a.lease.job, "a", 1)
    freed = c.acquire(job, "c", ttl=TTL, slots=2)
    assert freed.acquired and freed.lease.job == a.lease.job and freed.lease.token == 2, "the freed slot, token + 1"
    # GetLease of a slot's job answers as for any job: its holder and token.
    l = c.get_lease(a.lease.job)
    assert (l.holder, l.token, l.slots) == ("c", 2, 0)
    c.release(a.lease.job, "c", 2)
    c.release(b.lease.job, "b", 1)


def test_acquire_naming_another_count_or_over_100_is_invalid_argument_naming_slots(server, connect, job):
    c = connect(server.target)
    first = c.acquire(job, "a", ttl=TTL, slots=2)
    assert first.acquired and first.lease.slots == 2
    with pytest.raises(leasehold.InvalidArgument) as e:
        c.acquire(job, "b", ttl=TTL, slots=3)
    assert e.value.field == "slots"
    assert "2" in str(e.value), f"the message names the job's count: {e.value}"
    # Nothing changed: the job still has 2 slots, one free.
    second = c.acquire(job, "b", ttl=TTL, slots=2)
    assert second.acquired and second.lease.slots == 2 and second.lease.job != first.lease.job
    with pytest.raises(leasehold.InvalidArgument) as e:
        c.acquire(job + "-other", "a", ttl=TTL, slots=101)
    assert e.value.field == "slots"
    l = c.get_lease(job + "-other#0")
    assert (l.holder, l.token) == (None, 0), "nothing granted"
    c.release(first.lease.job, "a", 1)
    c.release(second.lease.job, "b", 1)


# The Elector


def wait_leaders(electors, n, timeout=PATIENCE):
    harness.wait_until(lambda: sum(e.is_leader for e in electors) >= n, timeout, f"{n} leaders")
    return [e for e in electors if e.is_leader]


def test_three_electors_two_slots_two_lead_the_third_takes_the_freed_slot_and_the_old_token_is_fenced(
    server, client, job
):
    recs = [Recorder() for _ in range(3)]
    electors = []
    for i, r in enumerate(recs):
        e = leasehold.Elector(client, job, f"w{i}", TTL, slots=2, on_elected=r.elected, on_lost=r.lost)
        r.elector = e
        electors.append(e)
    try:
        for e in electors[:2]:
            e.start()
        leaders = wait_leaders(electors[:2], 2)
        electors[2].start()
        # Two lead at once, in different slots, each with its slot's token.
        assert {(e.lease_job, e.slot) for e in leaders} == {(f"{job}#0", 0), (f"{job}#1", 1)}
        for e in leaders:
            assert e.token == 1 and e.slots == 2
            l = client.get_lease(e.lease_job)
            assert (l.holder, l.token) == (e.holder, 1), "the server agrees"
        third = electors[2]
        # The third waits: first in line, the server holds the job's own
        # lease for it (the line's turn), and it leads nowhere.
        harness.wait_until(lambda: client.get_lease(job).holder == third.holder, PATIENCE, "the third in line")
        assert not third.is_leader and third.lease_job is None and third.slot is None
        assert client.get_lease(f"{job}#0").holder != third.holder
        assert client.get_lease(f"{job}#1").holder != third.holder

        first, other = leaders
        freed, old_token = first.lease_job, first.token
        first.resign()
        assert first.lease_job is None and first.slot is None, "not leading: no slot"
        # The third leads in the freed slot, with that slot's token + 1:
        # handed over by the release of that slot, not by its expiry.
        assert third.wait_elected(TTL / 3) == old_token + 1
        assert third.lease_job == freed and third.slot == int(freed.rsplit("#", 1)[1])
        rec = recs[electors.index(third)]
        rec.wait_for(("elected", old_token + 1, freed, third.slot))
        l = client.get_lease(freed)
        assert (l.holder, l.token) == (third.holder, old_token + 1)
        # The resigned leader's old token is fenced on its slot's job...
        with pytest.raises(leasehold.Fenced) as e:
            client.checked_write(freed, old_token, b"status", b"stale")
        assert e.value.current_token == old_token + 1
        # ...and the live slot holders write on theirs.
        assert client.checked_write(other.lease_job, other.token, b"status", b"ok") == 1
        assert client.checked_write(third.lease_job, third.token, b"status", b"ok") == 1
        assert other.is_leader and other.token == 1, "the other slot did not move"
    finally:
        for e in electors:
            e.resign()
    for s in (f"{job}#0", f"{job}#1"):
        assert client.get_lease(s).holder is None, "resign released each slot"


def test_a_counted_elector_renews_its_slot_job_past_several_ttls(server, client, job):
    # A short TTL. Were the renewals sent for `job` rather than the slot's
    # job, they would be refused (LeaseLost): the elector would step down
    # (and, still the slot's live holder, be granted it again with the same
    # token), so no step-down at all is what proves them.
    ttl = 1.5
    recs = [Recorder(), Recorder()]
    es = []
    for name, r in zip("ab", recs):
        r.elector = leasehold.Elector(client, job, name, ttl, slots=2, on_elected=r.elected, on_lost=r.lost)
        es.append(r.elector)
    try:
        for e in es:
            e.start()
        wait_leaders(es, 2)
        tokens = {e.holder: (e.lease_job, e.slot, e.token) for e in es}
        renewed = server.metric("leasehold_renewals_total")
        # Six renewals, three rounds of two: longer than a TTL.
        harness.wait_until(
            lambda: server.metric("leasehold_renewals_total") >= renewed + 6, PATIENCE, "three rounds of renewals"
        )
        for e, r in zip(es, recs):
            assert e.is_leader and (e.lease_job, e.slot, e.token) == tokens[e.holder], "still leading its slot"
            l = client.get_lease(e.lease_job)
            assert (l.holder, l.token) == (e.holder, e.token)
            with r.cond:
                assert r.events == [("elected", 1, e.lease_job, e.slot)], "elected once, never stepped down"
    finally:
        for e in es:
            e.resign()


def test_a_counted_elector_waits_in_line_and_campaigns_again_with_slots_after_a_loss(server, client, job):
    a = client.acquire(job, "x", ttl=TTL, slots=2).lease
    b = client.acquire(job, "y", ttl=TTL, slots=2).lease
    # A short TTL, so that the renewal that finds the loss comes soon.
    e = leasehold.Elector(client, job, "e", 3.0, slots=2).start()
    try:
        harness.wait_until(lambda: client.get_lease(job).holder == e.holder, PATIENCE, "the elector in line")
        client.release(b.job, "y", b.token)
        assert e.wait_elected(PATIENCE) == b.token + 1 and e.lease_job == b.job
        # A slot's transfer names the slot's job, where nobody waits: no
        # successor, and the elector still leads.
        with pytest.raises(leasehold.NoSuccessor):
            e.transfer()
        assert e.is_leader and e.lease_job == b.job
        # Its lease ended behind its back: it steps down at its next
        # renewal and campaigns again with slots, landing in the free slot.
        client.release(b.job, e.holder, b.token + 1)
        assert e.wait_lost(PATIENCE)
        assert e.wait_elected(PATIENCE) == b.token + 2 and e.lease_job == b.job and e.slot == b.slot
    finally:
        e.resign()
    assert client.get_lease(b.job).holder is None, "resign released the slot's job"
    client.release(a.job, "x", a.token)


def test_async_electors_two_slots_lead_in_different_slots_and_resign_hands_the_slot_over(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            es = [AsyncElector(c, job, f"w{i}", TTL, slots=2) for i in range(3)]
            for e in es[:2]:
                e.start()
            try:
                for e in es[:2]:
                    assert await e.wait_elected(PATIENCE) == 1
                assert {(e.lease_job, e.slot) for e in es[:2]} == {(f"{job}#0", 0), (f"{job}#1", 1)}
                third = es[2].start()
                deadline = time.monotonic() + PATIENCE
                while (await c.get_lease(job)).holder != third.holder:
                    assert time.monotonic() < deadline, "the third never waited in line"
                    await asyncio.sleep(0.02)
                assert third.lease_job is None
                freed = es[0].lease_job
                await es[0].resign()
                assert await third.wait_elected(PATIENCE) == 2
                assert third.lease_job == freed and third.slot == int(freed.rsplit("#", 1)[1])
                with pytest.raises(leasehold.Fenced):
                    await c.checked_write(freed, 1, b"status", b"stale")
                assert await c.checked_write(third.lease_job, third.token, b"status", b"ok") == 1
            finally:
                for e in es:
                    await e.resign()
            for s in (f"{job}#0", f"{job}#1"):
                assert (await c.get_lease(s)).holder is None

    run(main())


# The lock


def test_a_counted_lock_holds_up_to_n_at_once_and_writes_on_its_slot_job(server, client, job):
    a = client.lock(job, ttl=TTL, slots=2)
    b = client.lock(job, ttl=TTL, slots=2)
    with a, b:
        assert {(a.lease_job, a.slot), (b.lease_job, b.slot)} == {(f"{job}#0", 0), (f"{job}#1", 1)}
        assert a.token == 1 and b.token == 1 and a.job == job and a.slots == 2
        assert client.get_lease(a.lease_job).holder == a.holder
        # A third does not get in while both are held (one try, timeout 0).
        with pytest.raises(leasehold.DeadlineExceeded):
            with client.lock(job, ttl=TTL, slots=2, timeout=0):
                pass
        assert client.checked_write(a.lease_job, a.token, b"k", b"a") == 1
        freed = a.lease_job
        got = []

        def third():
            with client.lock(job, ttl=TTL, slots=2) as c:
                got.append((c.lease_job, c.slot, c.token, client.checked_write(c.lease_job, c.token, b"k", b"c")))

        t = threading.Thread(target=third)
        t.start()
        harness.wait_until(lambda: client.get_lease(job).holder is not None, PATIENCE, "the third lock in line")
        a.release()  # leaving a's block early: its slot goes to the third
        t.join(PATIENCE)
        assert not t.is_alive()
        assert got == [(freed, int(freed.rsplit("#", 1)[1]), 2, 2)], "the freed slot, token + 1, its key's 2nd version"
        with pytest.raises(leasehold.Fenced):
            client.checked_write(freed, a.token, b"k", b"stale")
        assert b.is_held and client.checked_write(b.lease_job, b.token, b"k", b"b") == 1
    assert client.get_lease(f"{job}#0").holder is None and client.get_lease(f"{job}#1").holder is None
    assert a.lease_job == freed, "kept after the release, as the token is"


def test_a_counted_lock_renews_its_slot_job_past_its_ttl(server, client, job):
    ttl = 1.5
    with client.lock(job, ttl=ttl, slots=3) as lock:
        renewed = server.metric("leasehold_renewals_total")
        harness.wait_until(
            lambda: server.metric("leasehold_renewals_total") >= renewed + 4, PATIENCE, "four renewals"
        )
        assert lock.is_held and not lock.lost
        l = client.get_lease(lock.lease_job)
        assert (l.holder, l.token) == (lock.holder, lock.token)
    assert client.get_lease(lock.lease_job).holder is None


def test_async_counted_lock_holds_a_slot_and_releases_it(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            async with c.lock(job, ttl=TTL, slots=2) as a, c.lock(job, ttl=TTL, slots=2) as b:
                assert {a.lease_job, b.lease_job} == {f"{job}#0", f"{job}#1"}
                assert {a.slot, b.slot} == {0, 1} and a.token == b.token == 1
                assert await c.checked_write(a.lease_job, a.token, b"k", b"v") == 1
                assert (await c.get_lease(b.lease_job)).holder == b.holder
            for s in (a.lease_job, b.lease_job):
                assert (await c.get_lease(s)).holder is None

    run(main())


def test_an_ordinary_lock_and_elector_lease_job_is_the_job(client, job):
    with client.lock(job, ttl=TTL) as lock:
        assert lock.lease_job == job and lock.slot is None and lock.slots == 0
    with leasehold.Elector(client, job, "e", TTL) as e:
        assert e.wait_elected(PATIENCE) == 2
        assert e.lease_job == job and e.slot is None


def test_on_new_leader_with_slots_is_refused_for_both_electors(server, client):
    """A counted lease has several leaders at once: there is no one new
    leader to report, so the combination is refused before anything is
    sent."""
    with pytest.raises(ValueError, match="on_new_leader"):
        leasehold.Elector(client, "pool", "a", 5.0, slots=2, on_new_leader=lambda h, t: None)

    async def main() -> None:
        c = AsyncClient(server.target)
        try:
            with pytest.raises(ValueError, match="on_new_leader"):
                AsyncElector(c, "pool", "a", 5.0, slots=2, on_new_leader=lambda h, t: None)
        finally:
            await c.close()

    asyncio.run(main())
