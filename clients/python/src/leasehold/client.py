"""The blocking :class:`Client`.

Durations are seconds (``float``); keys and values are ``bytes`` (a ``str``
is encoded as UTF-8). Every method raises a typed
:class:`~leasehold.errors.LeaseholdError` on failure.
"""

from __future__ import annotations

from typing import Iterator, List, Optional

import grpc

from . import errors
from .types import (
    Acquired,
    Bytes,
    KeyInfo,
    Lease,
    LeaseEvent,
    Value,
    as_bytes,
    event_from_pb,
    lease_from_pb,
    to_duration,
)
from .v1 import leasehold_pb2 as pb
from .v1 import leasehold_pb2_grpc as pb_grpc

#: The server the clients talk to when given no target.
DEFAULT_TARGET = "127.0.0.1:50051"
#: How long a call may take, on top of any time it asks the server to wait.
DEFAULT_TIMEOUT = 10.0
_PAGE_SIZE = 1000


def normalize_target(target: str) -> str:
    """Accepts ``host:port`` or ``http://host:port`` (as the Rust client and
    CLI do) and returns what gRPC expects."""
    for scheme in ("http://", "grpc://"):
        if target.startswith(scheme):
            return target[len(scheme):].rstrip("/")
    if target.startswith("https://"):
        raise ValueError("https:// targets need a secure channel: pass channel=")
    return target


# Request builders, shared with the asyncio client.
def acquire_request(job: str, holder: str, ttl: float, wait: float) -> pb.AcquireRequest:
    return pb.AcquireRequest(job=job, holder=holder, ttl=to_duration(ttl), wait=to_duration(wait))


def renew_request(job: str, holder: str, token: int, ttl: float) -> pb.RenewRequest:
    return pb.RenewRequest(job=job, holder=holder, token=token, ttl=to_duration(ttl))


def release_request(job: str, holder: str, token: int) -> pb.ReleaseRequest:
    return pb.ReleaseRequest(job=job, holder=holder, token=token)


def write_request(job: str, token: int, key: Bytes, value: Bytes, delete: bool) -> pb.CheckedWriteRequest:
    return pb.CheckedWriteRequest(
        job=job, token=token, key=as_bytes(key), value=as_bytes(value), delete=delete
    )


def value_from_pb(r: pb.ReadResponse) -> Value:
    return Value(found=r.found, value=bytes(r.value), token=r.token, version=r.version)


def key_from_pb(k: pb.KeyInfo) -> KeyInfo:
    return KeyInfo(key=bytes(k.key), token=k.token, version=k.version, size=k.size)


class Watch:
    """The events of one ``watch``: iterate over it; ``cancel()`` ends it."""

    def __init__(self, call: grpc.Call) -> None:
        self._call = call

    def __iter__(self) -> Iterator[LeaseEvent]:
        try:
            for msg in self._call:  # type: ignore[attr-defined]
                yield event_from_pb(msg)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and self._cancelled:
                return
            raise errors.from_rpc_error(e) from None

    _cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class Client:
    """A blocking client over one gRPC channel. Thread-safe; share one.

    ``Client("127.0.0.1:50051")`` opens an insecure channel; pass
    ``channel=`` to use your own (TLS, interceptors, options).
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        channel: Optional[grpc.Channel] = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._own_channel = channel is None
        self._channel = channel or grpc.insecure_channel(normalize_target(target))
        self._timeout = timeout
        self._leases = pb_grpc.LeasesStub(self._channel)
        self._store = pb_grpc.FencedStoreStub(self._channel)

    def close(self) -> None:
        """Closes the channel, if this client opened it."""
        if self._own_channel:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def timeout(self) -> float:
        return self._timeout

    def _call(self, method, request, timeout: Optional[float]):
        try:
            return method(request, timeout=self._timeout if timeout is None else timeout)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    # Leases

    def acquire(
        self, job: str, holder: str, ttl: float, wait: float = 0.0, *, timeout: Optional[float] = None
    ) -> Acquired:
        """Asks for the lease on ``job``; waits up to ``wait`` seconds for it
        to free up. ``timeout`` defaults to ``wait`` plus the client's
        timeout."""
        t = wait + self._timeout if timeout is None else timeout
        r = self._call(self._leases.Acquire, acquire_request(job, holder, ttl, wait), t)
        return Acquired(acquired=r.acquired, lease=lease_from_pb(r.lease))

    def acquire_future(self, job: str, holder: str, ttl: float, wait: float, timeout: float) -> grpc.Future:
        """``acquire`` as a cancellable ``grpc.Future`` of the raw response
        (used by the Elector). Its exception is a raw ``grpc.RpcError``."""
        return self._leases.Acquire.future(acquire_request(job, holder, ttl, wait), timeout=timeout)

    def renew(self, job: str, holder: str, token: int, ttl: float, *, timeout: Optional[float] = None) -> Lease:
        """Renews our live lease for ``ttl`` seconds from now. Raises
        :class:`~leasehold.LeaseLost` when it is not ours any more."""
        r = self._call(self._leases.Renew, renew_request(job, holder, token, ttl), timeout)
        return lease_from_pb(r.lease)

    def renew_future(self, job: str, holder: str, token: int, ttl: float, timeout: float) -> grpc.Future:
        """``renew`` as a cancellable ``grpc.Future`` of the raw response."""
        return self._leases.Renew.future(renew_request(job, holder, token, ttl), timeout=timeout)

    def release(self, job: str, holder: str, token: int, *, timeout: Optional[float] = None) -> None:
        """Releases our lease; the first waiter is granted at once."""
        self._call(self._leases.Release, release_request(job, holder, token), timeout)

    def get_lease(self, job: str, *, timeout: Optional[float] = None) -> Lease:
        """The lease of ``job`` (token 0 and no holder if never granted)."""
        return lease_from_pb(self._call(self._leases.GetLease, pb.GetLeaseRequest(job=job), timeout))

    def list_leases(self, prefix: str = "", *, timeout: Optional[float] = None) -> List[Lease]:
        """Every lease whose job starts with ``prefix``, all pages."""
        out: List[Lease] = []
        page = ""
        while True:
            r = self._call(
                self._leases.ListLeases,
                pb.ListLeasesRequest(prefix=prefix, page_size=_PAGE_SIZE, page_token=page),
                timeout,
            )
            out.extend(lease_from_pb(l) for l in r.leases)
            if not r.next_page_token:
                return out
            page = r.next_page_token

    def watch(self, job: str, *, timeout: Optional[float] = None) -> Watch:
        """Watches ``job``: the current lease first, then every change of
        holder or token. ``timeout`` (default: none) bounds the whole watch."""
        return Watch(self._leases.WatchLease(pb.WatchLeaseRequest(job=job), timeout=timeout))

    # Fenced store

    def checked_write(
        self, job: str, token: int, key: Bytes, value: Bytes, *, timeout: Optional[float] = None
    ) -> int:
        """Writes ``value`` under (job, key), fenced by ``token``; returns the
        key's new version. Raises :class:`~leasehold.Fenced` when ``token``
        is not the job's live token."""
        return self._call(self._store.CheckedWrite, write_request(job, token, key, value, False), timeout).version

    def delete(self, job: str, token: int, key: Bytes, *, timeout: Optional[float] = None) -> int:
        """Deletes (job, key), fenced by ``token``; returns the new version."""
        return self._call(self._store.CheckedWrite, write_request(job, token, key, b"", True), timeout).version

    def read(self, job: str, key: Bytes, *, timeout: Optional[float] = None) -> Value:
        """Reads (job, key); linearizable."""
        return value_from_pb(self._call(self._store.Read, pb.ReadRequest(job=job, key=as_bytes(key)), timeout))

    def list_keys(self, job: str, prefix: Bytes = b"", *, timeout: Optional[float] = None) -> List[KeyInfo]:
        """Every live key of ``job`` starting with ``prefix``, all pages."""
        out: List[KeyInfo] = []
        page = b""
        while True:
            r = self._call(
                self._store.ListKeys,
                pb.ListKeysRequest(job=job, prefix=as_bytes(prefix), page_size=_PAGE_SIZE, page_token=page),
                timeout,
            )
            out.extend(key_from_pb(k) for k in r.keys)
            if not r.next_page_token:
                return out
            page = bytes(r.next_page_token)
