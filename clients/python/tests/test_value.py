"""The leader's value against the real server: ``acquire(..., value=)``
publishes it with the grant, ``renew(..., value=)`` replaces it (``None``
keeps it, ``b""`` clears it), every lease, event and tenure carries it, and
a value over 1024 bytes is ``InvalidArgument`` naming ``"value"`` with
nothing changed. The electors publish ``value=`` with every Acquire (also
when they campaign again), send ``set_value``'s with the next renewal and
then no more, and show it to followers: ``leader()``, observe (an
``EventKind.VALUE_CHANGED``), ``on_new_leader``'s third argument (a value
change is not a new leader) and the history."""

import asyncio
import queue
import threading

import pytest

import harness
import leasehold
from leasehold import EventKind
from leasehold._wire import acquire_request, renew_request
from leasehold.aio import AsyncClient, AsyncElector

# A lease that outlives every step of a test on a loaded machine.
TTL = 30.0
# The electors' TTL: they renew every ELECTOR_TTL / 3, so a set_value
# reaches the server within about a second.
ELECTOR_TTL = 3.0
PATIENCE = 20.0
BIG = b"x" * 1025


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


class Leaders:
    """An ``on_new_leader(holder, token, value)`` that records its calls."""

    def __init__(self):
        self.cond = threading.Condition()
        self.seen = []

    def __call__(self, holder, token, value):
        with self.cond:
            self.seen.append((holder, token, value))
            self.cond.notify_all()

    def wait_for(self, n, timeout=PATIENCE):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.seen) >= n, timeout), self.seen
            return list(self.seen)


class Changes:
    """``client.observe(job)`` read on a thread; :meth:`wait_for` the first
    change (after those already returned) that matches."""

    def __init__(self, client, job):
        self.watch = client.observe(job)
        self.q = queue.Queue()
        self.all = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for c in self.watch:
                self.q.put(c)
        except Exception as e:  # handed to the test
            self.q.put(e)

    def wait_for(self, pred, what, timeout=PATIENCE):
        while True:
            try:
                c = self.q.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {what} within {timeout}s; changes {self.all}") from None
            assert not isinstance(c, Exception), c
            self.all.append(c)
            if pred(c):
                return c

    def close(self):
        self.watch.close()


def wait_value(read, want, what):
    """Polls ``read()`` (a lease) until its value is ``want``."""
    harness.wait_until(lambda: read().value == want, PATIENCE, what)


# Requests (no server)


def test_the_requests_carry_the_value():
    assert acquire_request("j", "h", 1.0, 0.0).value == b""
    assert acquire_request("j", "h", 1.0, 0.0, value="10.0.0.1:80").value == b"10.0.0.1:80"
    # Renew: unset keeps the lease's value, set (even empty) replaces it.
    assert not renew_request("j", "h", 1, 1.0).HasField("value")
    r = renew_request("j", "h", 1, 1.0, b"")
    assert r.HasField("value") and r.value == b""
    assert renew_request("j", "h", 1, 1.0, "é").value == "é".encode()


def test_the_electors_refuse_a_value_over_1024_bytes_before_sending_anything():
    for make in (leasehold.Elector, AsyncElector):
        with pytest.raises(leasehold.InvalidArgument) as e:
            make(None, "j", "n", 1.0, value=BIG)
        assert e.value.field == "value"
        el = make(None, "j", "n", 1.0, value=b"y" * 1024)
        assert el.value == b"y" * 1024
        with pytest.raises(leasehold.InvalidArgument) as e:
            el.set_value(BIG)
        assert e.value.field == "value" and el.value == b"y" * 1024, "nothing changed"
        el.set_value("addr")
        assert el.value == b"addr"
        assert make(None, "j", "n", 1.0).value == b""


# The clients (blocking and asyncio, through `connect`)


def test_acquire_and_renew_publish_keep_replace_and_clear_the_value(server, connect, job):
    c = connect(server.target)
    a = c.acquire(job, "a", ttl=TTL, value="10.0.0.1:7000")
    assert a.acquired and a.lease.value == b"10.0.0.1:7000" and a.lease.value_text == "10.0.0.1:7000"
    assert c.get_lease(job).value == b"10.0.0.1:7000"
    # Another holder's Acquire is not granted, and sees the holder's value.
    other = c.acquire(job, "b", ttl=TTL, value="10.0.0.2:7000")
    assert not other.acquired and (other.lease.holder, other.lease.value) == ("a", b"10.0.0.1:7000")
    # A renewal without a value keeps it; with one, replaces it.
    assert c.renew(job, "a", 1, ttl=TTL).value == b"10.0.0.1:7000"
    r = c.renew_lease(job, "a", 1, ttl=TTL, value=b"10.0.0.1:7001")
    assert (r.lease.token, r.lease.value) == (1, b"10.0.0.1:7001")
    assert c.get_lease(job).value == b"10.0.0.1:7001"
    assert [l.value for l in c.list_leases(job) if l.job == job] == [b"10.0.0.1:7001"]
    # The tenure keeps the value of the grant, not the renewal's.
    [t] = c.history(job).tenures
    assert (t.token, t.holder, t.value) == (1, "a", b"10.0.0.1:7000")
    # An empty value clears it.
    assert c.renew(job, "a", 1, ttl=TTL, value=b"").value == b""
    assert c.get_lease(job).value == b""
    # A repeated Acquire by the live holder replaces it (same token).
    again = c.acquire(job, "a", ttl=TTL, value="10.0.0.1:7002")
    assert again.acquired and (again.lease.token, again.lease.value) == (1, b"10.0.0.1:7002")
    c.release(job, "a", 1)
    assert (c.get_lease(job).holder, c.get_lease(job).value) == (None, b""), "a free job has no value"
    # The next grant, with its own value, and both tenures with theirs.
    assert c.acquire(job, "b", ttl=TTL, value="10.0.0.2:7000").lease.value == b"10.0.0.2:7000"
    assert [(t.token, t.value) for t in c.history(job).tenures] == [(2, b"10.0.0.2:7000"), (1, b"10.0.0.1:7000")]
    c.release(job, "b", 2)


def test_a_value_over_1024_bytes_is_invalid_argument_naming_value_and_nothing_changed(server, connect, job):
    c = connect(server.target)
    with pytest.raises(leasehold.InvalidArgument) as e:
        c.acquire(job, "a", ttl=TTL, value=BIG)
    assert e.value.field == "value"
    l = c.get_lease(job)
    assert (l.holder, l.token) == (None, 0), "nothing granted"
    # 1024 bytes is the limit, and allowed.
    assert c.acquire(job, "a", ttl=TTL, value=b"v" * 1024).lease.value == b"v" * 1024
    with pytest.raises(leasehold.InvalidArgument) as e:
        c.renew(job, "a", 1, ttl=TTL, value=BIG)
    assert e.value.field == "value"
    with pytest.raises(leasehold.InvalidArgument) as e:
        c.acquire(job, "a", ttl=TTL, value=BIG)
    assert e.value.field == "value"
    l = c.get_lease(job)
    assert (l.holder, l.token, l.value) == ("a", 1, b"v" * 1024), "the value is unchanged"
    c.release(job, "a", 1)


def test_observe_reports_a_value_change_as_value_changed(server, client, job):
    changes = Changes(client, job)
    try:
        changes.wait_for(lambda c: c.kind is EventKind.CURRENT, "current state")
        client.acquire(job, "a", ttl=TTL, value="v1")
        c = changes.wait_for(lambda c: c.kind is not EventKind.CURRENT, "the grant")
        assert (c.kind, c.lease.holder, c.lease.token, c.lease.value) == (EventKind.ACQUIRED, "a", 1, b"v1")
        client.renew(job, "a", 1, ttl=TTL)  # keeps the value: no event
        client.renew(job, "a", 1, ttl=TTL, value="v2")
        c = changes.wait_for(lambda c: True, "the value change")
        assert (c.kind, c.lease.holder, c.lease.token, c.lease.value) == (EventKind.VALUE_CHANGED, "a", 1, b"v2")
        client.release(job, "a", 1)
        c = changes.wait_for(lambda c: True, "the release")
        assert (c.kind, c.lease.holder, c.lease.value) == (EventKind.RELEASED, None, b"")
    finally:
        changes.close()


# The electors


def test_an_electors_value_is_seen_by_leader_observe_on_new_leader_and_history(client, job):
    la, lb = Leaders(), Leaders()
    changes = Changes(client, job)
    a = leasehold.Elector(client, job, "a", ELECTOR_TTL, value="10.0.0.1:7000", on_new_leader=la)
    b = leasehold.Elector(client, job, "b", ELECTOR_TTL, value=b"10.0.0.2:7000", on_new_leader=lb)
    try:
        a.start()
        assert a.wait_elected(PATIENCE) == 1
        c = changes.wait_for(lambda c: c.lease.token == 1, "a's grant")
        assert (c.lease.holder, c.lease.value) == (a.holder, b"10.0.0.1:7000")
        b.start()
        # The follower reads the leader's value: leader(), on_new_leader.
        l = b.leader()
        assert (l.holder, l.token, l.value, l.value_text) == (a.holder, 1, b"10.0.0.1:7000", "10.0.0.1:7000")
        assert lb.wait_for(1) == [(a.holder, 1, b"10.0.0.1:7000")]
        assert la.wait_for(1) == [(a.holder, 1, b"10.0.0.1:7000")]

        # set_value: sent with the next renewal; watchers see VALUE_CHANGED.
        a.set_value("10.0.0.1:7001")
        assert a.value == b"10.0.0.1:7001"
        c = changes.wait_for(lambda c: c.kind is EventKind.VALUE_CHANGED, "the value change")
        assert (c.lease.holder, c.lease.token, c.lease.value) == (a.holder, 1, b"10.0.0.1:7001")
        wait_value(b.leader, b"10.0.0.1:7001", "the new value read by the follower")

        # A hand-over: b leads with its value; a campaigns again behind it.
        harness.wait_until(lambda: _transferred(a), PATIENCE, "the hand-over to b")
        assert b.wait_elected(PATIENCE) == 2
        c = changes.wait_for(lambda c: c.lease.token == 2, "b's grant")
        assert (c.kind, c.lease.holder, c.lease.value) == (EventKind.ACQUIRED, b.holder, b"10.0.0.2:7000")
        l = a.leader()
        assert (l.holder, l.token, l.value) == (b.holder, 2, b"10.0.0.2:7000")
        # b resigns: a's new campaign carried its current value, not its first.
        b.resign()
        assert a.wait_elected(PATIENCE) == 3
        l = a.leader()
        assert (l.holder, l.token, l.value) == (a.holder, 3, b"10.0.0.1:7001")
        # Every grant reported once, with its value; the value change was
        # not a new leader.
        assert la.wait_for(3) == [
            (a.holder, 1, b"10.0.0.1:7000"),
            (b.holder, 2, b"10.0.0.2:7000"),
            (a.holder, 3, b"10.0.0.1:7001"),
        ]
        assert lb.seen == [(a.holder, 1, b"10.0.0.1:7000"), (b.holder, 2, b"10.0.0.2:7000")]
        # The history keeps each grant's value.
        tenures = client.history(job).tenures
        assert [(t.token, t.holder, t.value) for t in tenures] == [
            (3, a.holder, b"10.0.0.1:7001"),
            (2, b.holder, b"10.0.0.2:7000"),
            (1, a.holder, b"10.0.0.1:7000"),
        ]
        # Too long: refused here, before anything is sent; nothing changed.
        with pytest.raises(leasehold.InvalidArgument) as e:
            a.set_value(BIG)
        assert e.value.field == "value"
        assert a.value == b"10.0.0.1:7001" and a.leader().value == b"10.0.0.1:7001"
        assert a.token == 3, "still leading"
    finally:
        b.resign()
        a.resign()
        changes.close()
    assert client.get_lease(job).holder is None


def _transferred(elector):
    try:
        elector.transfer()
        return True
    except leasehold.NoSuccessor:  # the follower's Acquire is not queued yet
        return False


def test_set_value_is_sent_until_a_renewal_takes_it_then_no_more(own_server, job):
    # A server of the test's own: its renewal counter counts this elector's.
    with leasehold.Client(own_server.target) as client, leasehold.Client(own_server.target) as other:
        e = leasehold.Elector(client, job, "e", ELECTOR_TTL, value="v1")
        try:
            e.start()
            token = e.wait_elected(PATIENCE)
            assert client.get_lease(job).value == b"v1"
            e.set_value("v2")
            wait_value(lambda: client.get_lease(job), b"v2", "the value of set_value")
            # Someone with the holder's identity changes the value behind
            # the elector's back. Were the elector still sending v2, its
            # next renewals would put it back.
            other.renew(job, e.holder, token, ELECTOR_TTL, value="v3")
            renewals = own_server.metric("leasehold_renewals_total")
            harness.wait_until(
                lambda: own_server.metric("leasehold_renewals_total") >= renewals + 3,
                PATIENCE,
                "three more renewals of the elector",
            )
            l = client.get_lease(job)
            assert (l.holder, l.token, l.value) == (e.holder, token, b"v3"), "the renewals kept the value"
            assert e.token == token and e.value == b"v2"
        finally:
            e.resign()


def test_an_elector_without_a_value_publishes_none_and_two_argument_callbacks_still_work(client, job):
    seen = []
    got = threading.Event()

    def two(holder, token):
        seen.append((holder, token))
        got.set()

    e = leasehold.Elector(client, job, "e", ELECTOR_TTL, on_new_leader=two)
    try:
        e.start()
        assert e.wait_elected(PATIENCE) == 1
        assert got.wait(PATIENCE) and seen == [(e.holder, 1)]
        l = e.leader()
        assert (l.holder, l.token, l.value) == (e.holder, 1, b"")
    finally:
        e.resign()
    l = e.leader()
    assert (l.holder, l.value) == (None, b""), "resigned: the job is free"


def test_async_elector_value_leader_set_value_and_on_new_leader(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            seen = []
            changed = asyncio.Event()

            async def on_new_leader(holder, token, value):
                seen.append((holder, token, value))
                changed.set()

            async def wait_for(n):
                while len(seen) < n:
                    changed.clear()
                    await asyncio.wait_for(changed.wait(), PATIENCE)
                return list(seen)

            async def until_value(e, want):
                for _ in range(int(PATIENCE / 0.05)):
                    if (await e.leader()).value == want:
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(f"the value did not become {want!r}")

            async with AsyncElector(c, job, "a", ELECTOR_TTL, value="10.0.0.1:7000") as a:
                assert await a.wait_elected(PATIENCE) == 1
                async with AsyncElector(c, job, "b", ELECTOR_TTL, value="b", on_new_leader=on_new_leader) as b:
                    l = await b.leader()
                    assert (l.holder, l.token, l.value) == (a.holder, 1, b"10.0.0.1:7000")
                    assert await wait_for(1) == [(a.holder, 1, b"10.0.0.1:7000")]
                    a.set_value(b"10.0.0.1:7001")
                    await until_value(b, b"10.0.0.1:7001")
                    await a.resign()
                    assert await b.wait_elected(PATIENCE) == 2
                    assert await wait_for(2) == [(a.holder, 1, b"10.0.0.1:7000"), (b.holder, 2, b"b")]
                    l = await b.leader()
                    assert (l.holder, l.token, l.value) == (b.holder, 2, b"b")
                    with pytest.raises(leasehold.InvalidArgument):
                        b.set_value(BIG)
                    assert b.value == b"b"
            page = await c.history(job)
            assert [(t.token, t.value) for t in page.tenures] == [(2, b"b"), (1, b"10.0.0.1:7000")]
            assert seen == [(a.holder, 1, b"10.0.0.1:7000"), (b.holder, 2, b"b")], "a value change is no new leader"

    run(main())
