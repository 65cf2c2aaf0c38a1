"""The thread-based Elector against the real server."""

import signal
import threading
import time

import pytest

import harness
import leasehold


class Recorder:
    """Collects on_elected / on_lost callbacks in order."""

    def __init__(self):
        self.events = []
        self.cond = threading.Condition()

    def elected(self, token):
        with self.cond:
            self.events.append(("elected", token))
            self.cond.notify_all()

    def lost(self, token):
        with self.cond:
            self.events.append(("lost", token))
            self.cond.notify_all()

    def wait_for(self, event, timeout=10):
        with self.cond:
            assert self.cond.wait_for(lambda: event in self.events, timeout), (event, self.events)


def test_exactly_one_of_two_leads_and_resign_hands_over_at_once(server, client, job):
    ttl = 10.0
    ra, rb = Recorder(), Recorder()
    a = leasehold.Elector(client, job, "a", ttl, on_elected=ra.elected, on_lost=ra.lost).start()
    b = leasehold.Elector(client, job, "b", ttl, on_elected=rb.elected, on_lost=rb.lost).start()
    assert a.holder != b.holder and a.holder.startswith("a@")
    deadline = time.monotonic() + 10
    while not (a.is_leader or b.is_leader):
        assert time.monotonic() < deadline, "nobody was elected"
        time.sleep(0.01)
    leader, follower, rl, rf = (a, b, ra, rb) if a.is_leader else (b, a, rb, ra)
    assert leader.token == 1
    server.wait_waiters(1)  # the follower is queued behind the leader
    assert not follower.is_leader and follower.token is None
    assert client.get_lease(job).holder == leader.holder

    t = time.monotonic()
    leader.resign()
    assert follower.wait_elected(5) == 2
    handover = time.monotonic() - t
    assert handover < ttl / 4, f"hand-over came from the release, not expiry: {handover:.3f}s"
    assert not leader.is_leader
    assert rl.events == [("elected", 1), ("lost", 1)]
    rf.wait_for(("elected", 2))
    follower.resign()
    assert rf.events == [("elected", 2), ("lost", 2)]
    lease = client.get_lease(job)
    assert (lease.holder, lease.token) == (None, 2), "resign released the lease"


def test_context_manager_resigns_and_keeps_leading_across_renewals(client, job):
    ttl = 0.6
    with leasehold.Elector(client, job, "cm", ttl) as e:
        assert e.wait_elected(5) == 1
        # Several renewal periods: still the leader, same token.
        t_end = time.monotonic() + 3 * ttl
        while time.monotonic() < t_end:
            assert e.token == 1
            time.sleep(ttl / 10)
        assert client.get_lease(job).holder == e.holder
    assert client.get_lease(job).holder is None


def test_a_grant_that_came_long_after_the_acquire_was_sent_is_confirmed(server, client, job):
    """A waiting Acquire granted more than a TTL after it was sent: counted
    from the send, the deadline would already have passed and the elector
    would step down at once (and flap). It confirms with a Renew instead."""
    ttl = 0.5
    holder = f"other@{job}"
    client.acquire(job, holder, ttl=30)
    r = Recorder()
    e = leasehold.Elector(client, job, "late", ttl, on_elected=r.elected, on_lost=r.lost).start()
    try:
        server.wait_waiters(1)
        time.sleep(2 * ttl)  # the waiting Acquire ages past a TTL
        client.release(job, holder, 1)
        assert e.wait_elected(5) == 2
        time.sleep(3 * ttl)
        assert e.token == 2
        assert r.events == [("elected", 2)], "stepped down after the late grant"
    finally:
        e.resign()


def test_steps_down_by_its_own_deadline_when_the_server_is_paused(own_server):
    ttl = 0.9
    client = leasehold.Client(own_server.target)
    r = Recorder()
    e = leasehold.Elector(client, "paused", "e", ttl, on_lost=r.lost).start()
    try:
        assert e.wait_elected(5) == 1
        time.sleep(ttl)  # a renewal or two succeed
        own_server.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        assert e.wait_lost(3 * ttl)
        after = time.monotonic() - stopped
        # The deadline is the send time of the last successful renewal plus
        # the TTL, and that renewal was sent before the freeze.
        assert after <= ttl + 0.3, f"stepped down late: {after:.3f}s"
        r.wait_for(("lost", 1))
        assert e.token is None
        # Resign is bounded even though the server cannot answer.
        t = time.monotonic()
        e.resign()
        assert time.monotonic() - t < 2.0
    finally:
        own_server.signal(signal.SIGCONT)
        e.resign()
        client.close()


def test_lease_lost_on_renew_steps_down_and_campaigns_again(server, client, job):
    """The lease is taken away behind the elector's back (released with its
    token, granted to another holder): the next renewal gets LEASE_LOST, the
    elector reports the loss, campaigns again and leads once the other
    holder's lease runs out."""
    ttl = 0.3
    r = Recorder()
    e = leasehold.Elector(client, job, "again", ttl, on_elected=r.elected, on_lost=r.lost).start()
    try:
        assert e.wait_elected(5) == 1
        # Hand the lease to a waiting thief behind the elector's back: the
        # release grants the queued waiter in the same step.
        thief = {}
        t = threading.Thread(target=lambda: thief.update(r=client.acquire(job, f"thief@{job}", ttl=1.0, wait=10)))
        t.start()
        server.wait_waiters(1)
        client.release(job, e.holder, 1)
        t.join(10)
        assert thief["r"].acquired and thief["r"].lease.token == 2
        r.wait_for(("lost", 1), timeout=5)
        # The thief does not renew: the elector is granted token 3 after expiry.
        r.wait_for(("elected", 3), timeout=5)
        assert e.token == 3
    finally:
        e.resign()


def test_invalid_arguments_are_rejected_up_front(client):
    for job, name, ttl in [("j", "n", 0), ("j", "n", -1), ("", "n", 1), ("j", "", 1)]:
        with pytest.raises(ValueError):
            leasehold.Elector(client, job, name, ttl)


def test_two_electors_with_one_name_in_one_process_are_two_holders(server, client, job):
    """One identity per elector: exactly one leads, the other's writes are
    fenced, and it takes over with a higher token when the leader stops."""
    ttl = 10.0
    a = leasehold.Elector(client, job, "twin", ttl).start()
    b = leasehold.Elector(client, job, "twin", ttl).start()
    try:
        assert a.holder != b.holder, "one identity per elector"
        assert a.holder.startswith("twin@") and b.holder.startswith("twin@")
        deadline = time.monotonic() + 10
        while not (a.is_leader or b.is_leader):
            assert time.monotonic() < deadline, "nobody was elected"
            time.sleep(0.01)
        leader, follower = (a, b) if a.is_leader else (b, a)
        server.wait_waiters(1)  # the follower is queued behind the leader
        for _ in range(10):  # exactly one leads, for a while
            assert leader.token == 1 and follower.token is None
            time.sleep(0.03)
        assert client.get_lease(job).holder == leader.holder
        assert client.checked_write(job, 1, b"k", b"a") == 1

        leader.resign()
        token = follower.wait_elected(5)
        assert token is not None and token > 1
        with pytest.raises(leasehold.Fenced) as e:
            client.checked_write(job, 1, b"k", b"old")
        assert e.value.current_token == token
        client.checked_write(job, token, b"k", b"b")
        assert client.get_lease(job).holder == follower.holder
    finally:
        a.resign()
        b.resign()


@pytest.fixture(scope="module")
def strict_server():
    s = harness.ServerProcess(extra=["--max-ttl", "10s", "--max-name-bytes", "64"])
    yield s
    s.stop()


@pytest.mark.parametrize("what", ["ttl", "job"])
def test_a_campaign_the_server_refuses_stops_and_wait_elected_raises(strict_server, what):
    """A TTL over --max-ttl, a job over --max-name-bytes: INVALID_ARGUMENT,
    which retrying cannot fix. The elector stops instead of retrying."""
    client = leasehold.Client(strict_server.target)
    job, ttl = ("j" * 65, 1.0) if what == "job" else ("long-ttl", 20.0)
    e = leasehold.Elector(client, job, "n", ttl).start()
    try:
        with pytest.raises(leasehold.InvalidArgument) as err:
            e.wait_elected(5)
        assert err.value.field == what
        assert e.error is err.value and not e.is_leader
        assert e._thread is not None and not e._thread.is_alive(), "stopped campaigning"
    finally:
        e.resign()
        client.close()
