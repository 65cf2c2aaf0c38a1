"""WriteStream and AsyncWriteStream against the real server.

Every scenario runs twice through the ``api`` fixture: on the blocking
:class:`~leasehold.Client`, and on the :class:`~leasehold.aio.AsyncClient`
driven on an event loop of its own thread (see ``connect`` in conftest.py).
"""

import gc
import signal
import sys
import threading
import time

import grpc
import pytest

import leasehold
from leasehold import _wire as wire
from leasehold.v1 import leasehold_pb2 as pb

put = leasehold.StreamWrite.put
delete = leasehold.StreamWrite.delete
K = leasehold.WriteOutcomeKind


@pytest.fixture()
def api(connect, server):
    return connect(server.target)


def kinds(out):
    return [o.kind for o in out]


def test_writes_get_versions_read_back_and_delete(api, job):
    token = api.acquire(job, f"w@{job}", ttl=30).lease.token
    with api.write_stream() as s:
        # One batch: a later write sees the earlier ones.
        out = s.write([put(job, token, b"k1", b"a"), put(job, token, "k2", "b"), put(job, token, b"k1", b"c")])
        assert kinds(out) == [K.WRITTEN] * 3
        assert [o.version for o in out] == [1, 1, 2]
        assert all(o.written and o.current_token is None and o.field is None for o in out)
        # Several calls on the same stream.
        assert [o.version for o in s.write([put(job, token, b"k1", b"d")])] == [3]
        assert s.write([]) == []
        out = s.write([delete(job, token, b"k2")])
        assert (out[0].kind, out[0].version) == (K.WRITTEN, 2)
    k1 = api.read(job, b"k1")
    assert (k1.found, k1.value, k1.token, k1.version) == (True, b"d", token, 3)
    k2 = api.read(job, b"k2")
    assert (k2.found, k2.version) == (False, 2)
    assert [k.key for k in api.list_keys(job)] == [b"k1"]


def test_malformed_write_gets_invalid_argument_for_itself_only(api, job):
    token = api.acquire(job, f"w@{job}", ttl=30).lease.token
    too_big = b"x" * (64 * 1024 + 1)  # the server's default limit is 64 KiB
    with api.write_stream() as s:
        # In the middle of one message.
        out = s.write([put(job, token, b"a", b"1"), put(job, token, b"", b"v"), put(job, token, b"b", b"2")])
        assert kinds(out) == [K.WRITTEN, K.INVALID_ARGUMENT, K.WRITTEN]
        assert (out[1].field, out[1].version) == ("key", None)
        assert out[1].message and not out[1].written
        # A value over the limit (sent in a message of its own).
        out = s.write([put(job, token, b"a", b"3"), put(job, token, b"big", too_big), put(job, token, b"b", b"4")])
        assert kinds(out) == [K.WRITTEN, K.INVALID_ARGUMENT, K.WRITTEN]
        assert out[1].field == "value"
        assert [out[0].version, out[2].version] == [2, 2]
        # The stream goes on.
        assert kinds(s.write([put(job, token, b"c", b"5")])) == [K.WRITTEN]
    assert api.read(job, b"a").value == b"3" and api.read(job, b"b").value == b"4"
    assert not api.read(job, b"big").found


def test_fenced_write_names_the_current_token_and_changes_nothing(api, job):
    a, b = f"a@{job}", f"b@{job}"
    t = api.acquire(job, a, ttl=30).lease.token
    with api.write_stream() as s:
        assert kinds(s.write([put(job, t, b"k", b"from A")])) == [K.WRITTEN]
        api.release(job, a, t)
        assert api.acquire(job, b, ttl=30).lease.token == t + 1
        out = s.write([put(job, t, b"k", b"stale")])
        assert kinds(out) == [K.FENCED]
        assert (out[0].current_token, out[0].version) == (t + 1, None)
        assert str(t + 1) in out[0].message
        v = api.read(job, b"k")
        assert (v.value, v.token, v.version) == (b"from A", t, 1)
        # A's stale write and B's live one, in one message: decided one by one.
        out = s.write([delete(job, t, b"k"), put(job, t + 1, b"k", b"from B")])
        assert kinds(out) == [K.FENCED, K.WRITTEN] and out[1].version == 2
    assert api.read(job, b"k").value == b"from B"


def test_never_issued_token_gets_unknown_token(api, job):
    t = api.acquire(job, f"a@{job}", ttl=30).lease.token
    with api.write_stream() as s:
        out = s.write([put(job, t + 6, b"k", b"v"), put(job, 0, b"k", b"v"), put(job, t, b"k", b"v")])
    # Above the newest token: unknown. Zero is malformed (field "token").
    assert kinds(out) == [K.UNKNOWN_TOKEN, K.INVALID_ARGUMENT, K.WRITTEN]
    assert (out[0].current_token, out[0].version) == (t, None)
    assert out[0].message
    assert out[1].field == "token"
    assert api.read(job, b"k").version == 1


def test_large_batches_are_split_and_answered_in_order(api, job):
    # A short job name: 2500 writes fit in 48 KiB, so the count splits them.
    job = f"lb{job.rsplit('-', 1)[1]}"
    t = api.acquire(job, f"a@{job}", ttl=30).lease.token
    with api.write_stream() as s:
        # More than the server takes in one message (1000): one key, so the
        # versions show the order.
        out = s.write([put(job, t, b"k", str(i)) for i in range(2500)])
        assert kinds(out) == [K.WRITTEN] * 2500
        assert [o.version for o in out] == list(range(1, 2501))
        # More bytes than one message may carry (about 66 KiB).
        big = b"v" * (60 * 1024)
        out = s.write([put(job, t, b"b1", big), put(job, t, b"s", b"small"), put(job, t, b"b2", big)])
        assert [o.version for o in out] == [1, 1, 1]
    assert api.read(job, b"k").value == b"2499"
    assert api.read(job, b"b2").value == big


def test_split_writes_respects_count_and_size():
    w = lambda n: put("j", 1, b"k", b"\0" * n).to_pb()  # noqa: E731
    assert [len(m) for m in wire.split_writes([])] == [0]
    assert [len(m) for m in wire.split_writes([w(1)] * 2500)] == [1000, 1000, 500]
    assert [len(m) for m in wire.split_writes([w(60 * 1024), w(10), w(60 * 1024)])] == [1, 1, 1]
    assert [len(m) for m in wire.split_writes([w(20 * 1024)] * 5)] == [2, 2, 1]


def test_concurrent_writers_share_one_stream(api, job):
    t = api.acquire(job, f"a@{job}", ttl=30).lease.token
    writers, n, big = 6, 40, 700  # a batch of `big` writes takes two messages
    seen = {}
    failures = []
    start = threading.Barrier(writers)
    with api.write_stream() as s:

        def writer(i):
            try:
                start.wait(10)
                key = f"k{i}"
                versions = []
                for j in range(n):
                    size = big if j % 10 == 9 else 1 + j % 3
                    out = s.write([put(job, t, key, f"{i}-{j}-{m}") for m in range(size)])
                    versions += [o.version for o in out]
                seen[i] = versions
            except BaseException as e:  # reported below
                failures.append(e)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
        # Switch threads often, so that an unguarded send would interleave.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        try:
            for th in threads:
                th.start()
            for th in threads:
                th.join(30)
        finally:
            sys.setswitchinterval(interval)
        assert not any(th.is_alive() for th in threads)
    assert not failures, failures
    sizes = [big if j % 10 == 9 else 1 + j % 3 for j in range(n)]
    total = sum(sizes)
    for i in range(writers):
        assert seen[i] == list(range(1, total + 1)), i
        v = api.read(job, f"k{i}")
        assert (v.value, v.version) == (f"{i}-{n - 1}-{big - 1}".encode(), total)


def test_stream_status_breaks_the_stream_with_a_typed_error(api, job, monkeypatch):
    # Make the client send more writes in one message than the server
    # takes: the server ends the stream with INVALID_ARGUMENT (field "writes").
    # A short job name keeps 1001 writes under the message size limits.
    job = f"st{job.rsplit('-', 1)[1]}"
    t = api.acquire(job, f"a@{job}", ttl=30).lease.token
    before = set(threading.enumerate())
    with api.write_stream() as s:
        assert kinds(s.write([put(job, t, b"k", b"v")])) == [K.WRITTEN]
        monkeypatch.setattr(wire, "MAX_WRITES_PER_MESSAGE", 1001)
        with pytest.raises(leasehold.InvalidArgument) as e:
            s.write([put(job, t, b"k", b"v")] * 1001)
        assert type(e.value) is leasehold.InvalidArgument
        assert e.value.field == "writes" and e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        monkeypatch.undo()
        # Broken: later writes raise the same error.
        with pytest.raises(leasehold.InvalidArgument) as later:
            s.write([put(job, t, b"k", b"after")])
        assert later.value.field == "writes"
    _no_new_threads(before)
    assert api.read(job, b"k").version == 1, "the refused message wrote nothing"
    # A new stream works.
    with api.write_stream() as s:
        assert [o.version for o in s.write([put(job, t, b"k", b"again")])] == [2]


def test_write_after_close_raises_unavailable(api, job):
    t = api.acquire(job, f"a@{job}", ttl=30).lease.token
    s = api.write_stream()
    assert kinds(s.write([put(job, t, b"k", b"v")])) == [K.WRITTEN]
    began = time.monotonic()
    s.close()  # half-closes: the server ends the stream at once
    assert time.monotonic() - began < 2
    s.close()  # idempotent
    with pytest.raises(leasehold.Unavailable):
        s.write([put(job, t, b"k", b"v")])
    assert api.read(job, b"k").version == 1


def test_unanswered_write_times_out_and_breaks_the_stream(connect, own_server):
    c = connect(own_server.target)
    t = c.acquire("j", "a", ttl=60).lease.token
    s = c.write_stream()
    assert kinds(s.write([put("j", t, b"k", b"v")])) == [K.WRITTEN]
    own_server.signal(signal.SIGSTOP)
    try:
        began = time.monotonic()
        with pytest.raises(leasehold.Unavailable) as e:
            s.write([put("j", t, b"k", b"v2")], timeout=0.3)
        assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - began < 5
        with pytest.raises(leasehold.Unavailable) as later:
            s.write([put("j", t, b"k", b"v3")])
        assert later.value is e.value or later.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        own_server.signal(signal.SIGCONT)
    s.close()
    # The unanswered write may or may not have been made: read it back.
    assert c.read("j", b"k").version in (1, 2)


def test_write_after_sigterm_raises_a_typed_error(connect, own_server):
    c = connect(own_server.target)
    t = c.acquire("j", "a", ttl=60).lease.token
    s = c.write_stream()
    assert kinds(s.write([put("j", t, b"k", b"v")])) == [K.WRITTEN]
    own_server.signal(signal.SIGTERM)
    began = time.monotonic()
    errs = []
    # The first write may race the shutdown and be answered; soon they fail.
    for _ in range(50):
        try:
            s.write([put("j", t, b"k", b"later")], timeout=5)
        except leasehold.LeaseholdError as e:
            errs.append(e)
            if len(errs) == 2:
                break
        time.sleep(0.02)
    assert len(errs) == 2, "writes after SIGTERM kept succeeding"
    assert isinstance(errs[0], (leasehold.ShuttingDown, leasehold.Unavailable)), repr(errs[0])
    assert errs[0].retryable
    assert type(errs[1]) is type(errs[0]), "the stream stays broken"
    assert time.monotonic() - began < 10
    s.close()


def _no_new_threads(before, timeout=5.0):
    """Waits until every thread started since ``before`` has ended."""
    deadline = time.monotonic() + timeout
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not set(threading.enumerate()) - before


def test_abandoned_or_closed_stream_leaves_no_thread(server, job):
    with leasehold.Client(server.target) as c:
        t = c.acquire(job, f"a@{job}", ttl=30).lease.token
        before = set(threading.enumerate())
        s = c.write_stream()
        assert kinds(s.write([put(job, t, b"k", b"v")])) == [K.WRITTEN]
        assert "leasehold-write-stream" in [th.name for th in threading.enumerate()]
        del s  # never closed
        gc.collect()
        _no_new_threads(before)
        with c.write_stream() as s2:
            s2.write([put(job, t, b"k", b"w")])
        _no_new_threads(before)


def test_a_result_without_outcome_or_for_another_request_is_an_error():
    ok = pb.WriteResult(outcome=pb.WriteResult.OUTCOME_WRITTEN, version=4)
    assert wire.write_outcomes(3, 1, pb.WriteStreamResponse(id=3, results=[ok]))[0].version == 4
    with pytest.raises(leasehold.LeaseholdError) as e:
        wire.write_outcomes(3, 2, pb.WriteStreamResponse(id=3, results=[ok, pb.WriteResult()]))
    assert e.value.code == grpc.StatusCode.INTERNAL and "no outcome" in e.value.message
    with pytest.raises(leasehold.LeaseholdError):
        wire.write_outcomes(3, 1, pb.WriteStreamResponse(id=2, results=[ok]))
    with pytest.raises(leasehold.LeaseholdError):
        wire.write_outcomes(3, 2, pb.WriteStreamResponse(id=3, results=[ok]))
