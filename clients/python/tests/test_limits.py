"""DeleteJob and the server's limits (QUOTA_EXCEEDED, OVERLOADED,
JOB_IN_USE) against the real server, on the blocking Client and on the
AsyncClient (the ``connect`` fixture)."""

import threading

import pytest

import harness
import leasehold

put = leasehold.StreamWrite.put
K = leasehold.WriteOutcomeKind


@pytest.fixture()
def limited():
    s = harness.ServerProcess(extra=["--max-jobs", "1", "--max-keys-per-job", "1"])
    yield s
    s.stop()


def test_quotas_and_delete_job(connect, limited):
    c = connect(limited.target)
    t1 = c.acquire("a", "h", ttl=30).lease.token

    # One job is the most: a second is refused, and nothing is made.
    with pytest.raises(leasehold.QuotaExceeded) as e:
        c.acquire("b", "h", ttl=30)
    assert (e.value.limit, e.value.max, e.value.reason, e.value.retryable) == ("--max-jobs", 1, "QUOTA_EXCEEDED", False)
    assert [l.job for l in c.list_leases()] == ["a"]

    # One key is the most: a write of a second is refused, by CheckedWrite
    # and on a write stream; the first key may still be written.
    assert c.checked_write("a", t1, b"k1", b"v") == 1
    with pytest.raises(leasehold.QuotaExceeded) as e:
        c.checked_write("a", t1, b"k2", b"v")
    assert (e.value.limit, e.value.max) == ("--max-keys-per-job", 1)
    with c.write_stream() as s:
        out = s.write([put("a", t1, b"k1", b"w"), put("a", t1, b"k3", b"v")])
    assert [o.kind for o in out] == [K.WRITTEN, K.QUOTA_EXCEEDED]
    assert out[0].version == 2
    assert not out[1].written and "--max-keys-per-job" in out[1].message
    assert [k.key for k in c.list_keys("a")] == [b"k1"]

    # A held job is not deleted.
    with pytest.raises(leasehold.JobInUse) as e:
        c.delete_job("a")
    assert (e.value.reason, e.value.retryable) == ("JOB_IN_USE", False)
    assert c.read("a", b"k1").found

    c.release("a", "h", t1)
    assert c.delete_job("a") is True
    assert c.delete_job("a") is False
    assert c.list_leases() == []
    assert not c.read("a", b"k1").found

    # Created again, it gets a token above the old one; its room is back.
    t2 = c.acquire("a", "h", ttl=30).lease.token
    assert t2 > t1
    assert c.checked_write("a", t2, b"k2", b"v") == 1


def test_calls_over_the_connection_limit_are_overloaded(connect):
    with harness.ServerProcess(extra=["--max-in-flight-per-connection", "1"]) as s:
        c = connect(s.target)
        c.acquire("j", "a", ttl=30)

        def wait():
            try:
                c.acquire("j", "b", ttl=30, wait=20)
            except leasehold.LeaseholdError:
                pass  # the server stops under it

        t = threading.Thread(target=wait, daemon=True)
        t.start()
        s.wait_waiters(1)
        # The waiting Acquire takes the connection's one place.
        with pytest.raises(leasehold.Overloaded) as e:
            c.get_lease("j")
        assert (e.value.limit, e.value.max, e.value.reason) == ("--max-in-flight-per-connection", 1, "OVERLOADED")
        assert e.value.retryable and isinstance(e.value, leasehold.Unavailable)
        s.stop()
        t.join(15)
