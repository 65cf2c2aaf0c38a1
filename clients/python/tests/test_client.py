"""The blocking Client against the real server: every call, and every
error reason decoded into its typed exception."""

import signal
import socket
import threading
import time

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

import leasehold
from leasehold import errors


def test_holder_identity_is_name_at_process_uuid():
    h = leasehold.process_holder("billing")
    name, _, uid = h.partition("@")
    assert name == "billing" and len(uid) == 36
    assert leasehold.process_holder("other").endswith(uid), "one UUID per process"


def test_acquire_busy_renew_release_get_and_list(client, job):
    a, b = f"a@{job}", f"b@{job}"
    got = client.acquire(job, a, ttl=30)
    assert got.acquired and got.lease.holder == a and got.lease.token == 1
    assert got.lease.ttl == pytest.approx(30)

    busy = client.acquire(job, b, ttl=30)
    assert not busy.acquired
    assert (busy.lease.holder, busy.lease.token) == (a, 1)
    assert 0 < busy.lease.remaining <= 30

    # Acquire by the live holder keeps the token.
    again = client.acquire(job, a, ttl=30)
    assert again.acquired and again.lease.token == 1

    renewed = client.renew(job, a, 1, ttl=20)
    assert (renewed.holder, renewed.token, renewed.ttl) == (a, 1, pytest.approx(20))

    lease = client.get_lease(job)
    assert (lease.job, lease.holder, lease.token) == (job, a, 1)
    assert job in [l.job for l in client.list_leases(prefix=job)]

    client.release(job, a, 1)
    free = client.get_lease(job)
    assert (free.holder, free.token, free.ttl, free.remaining) == (None, 1, None, None)

    # The next grant carries a higher token.
    assert client.acquire(job, b, ttl=30).lease.token == 2


def test_never_granted_job_has_token_zero(client, job):
    lease = client.get_lease(job)
    assert (lease.holder, lease.token) == (None, 0)


def test_waiting_acquire_is_granted_on_release(server, client, job):
    a, b = f"a@{job}", f"b@{job}"
    client.acquire(job, a, ttl=30)
    result = {}

    def wait():
        result["r"] = client.acquire(job, b, ttl=30, wait=10)

    t = threading.Thread(target=wait)
    t.start()
    server.wait_waiters(1)
    released = time.monotonic()
    client.release(job, a, 1)
    t.join(10)
    assert not t.is_alive()
    assert result["r"].acquired and result["r"].lease.token == 2
    assert time.monotonic() - released < 1.0


def test_write_read_delete_and_list_keys(client, job):
    h = f"w@{job}"
    token = client.acquire(job, h, ttl=30).lease.token
    assert client.checked_write(job, token, b"k1", b"v1") == 1
    assert client.checked_write(job, token, "k1", "v2") == 2
    assert client.checked_write(job, token, b"k2", b"") == 1
    v = client.read(job, b"k1")
    assert (v.found, v.value, v.token, v.version) == (True, b"v2", token, 2)
    keys = client.list_keys(job)
    assert [(k.key, k.version, k.size) for k in keys] == [(b"k1", 2, 2), (b"k2", 1, 0)]
    assert client.delete(job, token, b"k1") == 3
    gone = client.read(job, b"k1")
    assert (gone.found, gone.version) == (False, 3)
    assert [k.key for k in client.list_keys(job, prefix=b"k")] == [b"k2"]
    missing = client.read(job, b"never")
    assert (missing.found, missing.version, missing.token) == (False, 0, 0)


def test_watch_reports_current_then_changes(client, job):
    a, b = f"a@{job}", f"b@{job}"
    with client.watch(job, timeout=20) as w:
        events = iter(w)
        first = next(events)
        assert first.kind == leasehold.EventKind.CURRENT and first.lease.token == 0
        client.acquire(job, a, ttl=30)
        e = next(events)
        assert (e.kind, e.lease.holder, e.lease.token) == (leasehold.EventKind.ACQUIRED, a, 1)
        client.release(job, a, 1)
        e = next(events)
        assert (e.kind, e.lease.holder, e.lease.token) == (leasehold.EventKind.RELEASED, None, 1)
        client.acquire(job, b, ttl=0.2)
        e = next(events)
        assert (e.kind, e.lease.holder, e.lease.token) == (leasehold.EventKind.ACQUIRED, b, 2)
        e = next(events)  # nobody renews: it expires
        assert (e.kind, e.lease.holder, e.lease.token) == (leasehold.EventKind.EXPIRED, None, 2)


def test_lease_lost_names_the_current_token_and_holder(client, job):
    a, b = f"a@{job}", f"b@{job}"
    client.acquire(job, a, ttl=0.2)
    deadline = time.monotonic() + 5
    while client.get_lease(job).holder is not None:  # bounded: expiry
        assert time.monotonic() < deadline
        time.sleep(0.05)
    client.acquire(job, b, ttl=30)
    with pytest.raises(leasehold.LeaseLost) as e:
        client.renew(job, a, 1, ttl=30)
    assert e.value.current_token == 2
    assert e.value.current_holder == b
    assert e.value.reason == "LEASE_LOST" and e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert not e.value.retryable
    with pytest.raises(leasehold.LeaseLost):
        client.release(job, a, 1)
    # Nothing changed.
    assert client.get_lease(job).holder == b


def test_fenced_write_names_the_current_token(client, job):
    a, b = f"a@{job}", f"b@{job}"
    client.acquire(job, a, ttl=30)
    client.checked_write(job, 1, b"k", b"from 1")
    client.release(job, a, 1)
    client.acquire(job, b, ttl=30)
    with pytest.raises(leasehold.Fenced) as e:
        client.checked_write(job, 1, b"k", b"stale")
    assert e.value.current_token == 2
    assert e.value.reason == "FENCED"
    assert "2" in e.value.message
    assert client.read(job, b"k").value == b"from 1"


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda c, j: c.acquire("", "h", ttl=1), "job"),
        (lambda c, j: c.acquire(j, "", ttl=1), "holder"),
        (lambda c, j: c.acquire(j, "h", ttl=0.001), "ttl"),
        (lambda c, j: c.acquire(j, "h", ttl=7200), "ttl"),
        (lambda c, j: c.acquire("x" * 300, "h", ttl=1), "job"),
        (lambda c, j: c.checked_write(j, 1, b"", b"v"), "key"),
    ],
)
def test_invalid_argument_names_the_field(client, job, call, field):
    with pytest.raises(leasehold.InvalidArgument) as e:
        call(client, job)
    assert type(e.value) is leasehold.InvalidArgument
    assert e.value.field == field
    assert e.value.reason == "INVALID_ARGUMENT"
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert client.get_lease(job).token == 0, "bad input changes nothing"


def test_unknown_token(client, job):
    client.acquire(job, f"a@{job}", ttl=30)
    with pytest.raises(leasehold.UnknownToken) as e:
        client.checked_write(job, 7, b"k", b"v")
    assert isinstance(e.value, leasehold.InvalidArgument)
    assert e.value.current_token == 1
    assert e.value.reason == "UNKNOWN_TOKEN"


def test_unreachable_server_is_unavailable():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with leasehold.Client(f"127.0.0.1:{port}", timeout=5) as c:
        with pytest.raises(leasehold.Unavailable) as e:
            c.get_lease("j")
    assert e.value.retryable and e.value.reason is None


def test_waiting_acquire_ends_with_shutting_down_when_the_server_stops(own_server):
    with leasehold.Client(own_server.target) as c:
        c.acquire("j", "a", ttl=30)
        result = {}

        def wait():
            try:
                c.acquire("j", "b", ttl=30, wait=20)
            except leasehold.LeaseholdError as e:
                result["e"] = e

        t = threading.Thread(target=wait)
        t.start()
        own_server.wait_waiters(1)
        own_server.signal(signal.SIGTERM)
        t.join(15)
        assert not t.is_alive()
    assert isinstance(result.get("e"), leasehold.ShuttingDown), result
    assert result["e"].retryable


def _status_metadata(code, reason, meta, domain="leasehold"):
    info = error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=meta)
    detail = any_pb2.Any()
    detail.Pack(info)
    st = status_pb2.Status(code=code.value[0], message="m", details=[detail])
    return [("grpc-status-details-bin", st.SerializeToString())]


def test_decoding_of_every_reason():
    U = grpc.StatusCode
    cases = [
        (U.FAILED_PRECONDITION, "LEASE_LOST", leasehold.LeaseLost),
        (U.FAILED_PRECONDITION, "FENCED", leasehold.Fenced),
        (U.INVALID_ARGUMENT, "INVALID_ARGUMENT", leasehold.InvalidArgument),
        (U.INVALID_ARGUMENT, "UNKNOWN_TOKEN", leasehold.UnknownToken),
        (U.UNAVAILABLE, "STORAGE", leasehold.StorageError),
        (U.UNAVAILABLE, "SHUTTING_DOWN", leasehold.ShuttingDown),
        (U.RESOURCE_EXHAUSTED, "DISK_FULL", leasehold.DiskFull),
        (U.UNAUTHENTICATED, "UNAUTHENTICATED", leasehold.Unauthenticated),
        (U.PERMISSION_DENIED, "PERMISSION_DENIED", leasehold.PermissionDenied),
        (U.RESOURCE_EXHAUSTED, "OVERLOADED", leasehold.Overloaded),
        (U.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", leasehold.QuotaExceeded),
        (U.FAILED_PRECONDITION, "JOB_IN_USE", leasehold.JobInUse),
    ]
    for code, reason, cls in cases:
        e = errors.from_status(code, "m", _status_metadata(code, reason, {"current_token": "5", "field": "ttl"}))
        assert type(e) is cls, (reason, e)
        assert e.reason == reason
    full = errors.from_status(
        U.RESOURCE_EXHAUSTED, "m", _status_metadata(U.RESOURCE_EXHAUSTED, "DISK_FULL", {"free_bytes": "10", "needed_bytes": "4096"})
    )
    assert (full.free_bytes, full.needed_bytes, full.retryable) == (10, 4096, True)
    limits = {"limit": "--max-watchers", "max": "7"}
    quota = errors.from_status(U.RESOURCE_EXHAUSTED, "m", _status_metadata(U.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", limits))
    assert (quota.limit, quota.max, quota.retryable) == ("--max-watchers", 7, False)
    busy = errors.from_status(U.RESOURCE_EXHAUSTED, "m", _status_metadata(U.RESOURCE_EXHAUSTED, "OVERLOADED", limits))
    assert (busy.limit, busy.max, busy.retryable) == ("--max-watchers", 7, True)
    assert isinstance(busy, leasehold.Unavailable)
    # Another domain's ErrorInfo is not ours: the code decides.
    e = errors.from_status(U.UNAVAILABLE, "m", _status_metadata(U.UNAVAILABLE, "FENCED", {}, domain="other"))
    assert type(e) is leasehold.Unavailable
    denied = errors.from_status(
        U.PERMISSION_DENIED, "m", _status_metadata(U.PERMISSION_DENIED, "PERMISSION_DENIED", {"action": "write", "job": "j"})
    )
    assert (denied.action, denied.job, denied.retryable) == ("write", "j", False)
    # Without an ErrorInfo (a proxy in between), the code decides.
    assert type(errors.from_status(U.PERMISSION_DENIED, "m")) is leasehold.PermissionDenied
    assert type(errors.from_status(U.UNAUTHENTICATED, "m")) is leasehold.Unauthenticated
    assert type(errors.from_status(U.FAILED_PRECONDITION, "m")) is leasehold.LeaseholdError


def test_a_write_stream_broken_locally_is_unavailable():
    """gRPC's own bare INTERNAL, when a write races the server ending the
    call, breaks a write stream as Unavailable; the server's own errors keep
    their types."""
    U = grpc.StatusCode
    bare = grpc.aio.AioRpcError(U.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), details="Internal error from Core")
    e = errors.stream_error(bare)
    assert type(e) is leasehold.Unavailable and e.code == U.INTERNAL, repr(e)
    assert "Internal error from Core" in e.message
    # Outside a write stream the same status stays untyped.
    assert type(errors.from_rpc_error(bare)) is leasehold.LeaseholdError
    trailing = grpc.aio.Metadata(*_status_metadata(U.UNAVAILABLE, "SHUTTING_DOWN", {}))
    ours = grpc.aio.AioRpcError(U.UNAVAILABLE, grpc.aio.Metadata(), trailing, details="the server is shutting down")
    assert type(errors.stream_error(ours)) is leasehold.ShuttingDown
