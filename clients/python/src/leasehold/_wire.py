"""What the blocking and asyncio clients share: defaults and limits, the
channel's security, the requests they build and the answers they read, and
the elector's timing. Private: the public names are re-exported by
:mod:`leasehold`."""

from __future__ import annotations

import inspect
import os
from typing import Callable, List, Optional, Sequence, Tuple, Union

import grpc

from . import errors
from .types import (
    Bytes,
    KeyInfo,
    Value,
    WriteOutcome,
    as_bytes,
    outcome_from_pb,
    slots_arg,
    to_duration,
)
from .v1 import leasehold_pb2 as pb

#: The server the clients talk to when given no target.
DEFAULT_TARGET = "127.0.0.1:50051"
#: How long a call may take, on top of any time it asks the server to wait.
DEFAULT_TIMEOUT = 10.0
_PAGE_SIZE = 1000
#: The most writes the clients put in one WriteStream message (the server
#: takes up to 1000).
MAX_WRITES_PER_MESSAGE = 1000
#: The most encoded bytes the clients put in one WriteStream message, unless
#: a single write is larger: well under the server's default limit of about
#: 66 KiB.
MAX_MESSAGE_BYTES = 48 * 1024


#: The channel options every client sets: after the connection breaks, try
#: again from 100 ms up to 1 s apart (gRPC's default grows to 120 s), so a
#: client is back within about a second of the server.
RECONNECT_OPTIONS: Tuple[Tuple[str, object], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)

#: How long a cancelled waiting Acquire's clean-up waits before it reads
#: the lease: time for the server to decide (seconds).
GIVE_BACK_AFTER = 0.1


def normalize_target(target: str) -> str:
    """Accepts ``host:port``, ``http://host:port`` or ``https://host:port``
    (as the Rust client and CLI do) and returns what gRPC expects."""
    for scheme in ("http://", "grpc://", "https://"):
        if target.startswith(scheme):
            return target[len(scheme):].rstrip("/")
    return target


#: A PEM given as its bytes, or as the path of a file holding it.
Pem = Union[bytes, str, "os.PathLike[str]"]


def _read_pem(what: str, pem: Optional[Pem]) -> Optional[bytes]:
    if pem is None:
        return None
    if isinstance(pem, (bytes, bytearray)):
        return bytes(pem)
    try:
        with open(pem, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{what}: cannot read {os.fspath(pem)!r}: {e.strerror}") from None


class _BearerToken(grpc.AuthMetadataPlugin):
    """Adds ``authorization: Bearer SECRET`` to every call. Its repr never
    shows the secret."""

    def __init__(self, token: str) -> None:
        token = token.strip()
        if not token or not all(0x20 < ord(c) < 0x7F for c in token):
            raise ValueError("the bearer token must be non-empty printable ASCII without spaces")
        self._metadata = (("authorization", "Bearer " + token),)

    def __call__(self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback) -> None:
        callback(self._metadata, None)

    def __repr__(self) -> str:
        return "<bearer token>"


def channel_security(
    target: str,
    *,
    ca: Optional[Pem] = None,
    cert: Optional[Pem] = None,
    key: Optional[Pem] = None,
    token: Optional[str] = None,
    server_name: Optional[str] = None,
) -> Tuple[str, Optional[grpc.ChannelCredentials], List[Tuple[str, object]]]:
    """(target, credentials, options) for a channel to ``target``: TLS when
    a CA or a client certificate is given or the target is ``https://``
    (the system's roots when no CA is given), plaintext otherwise
    (``None`` credentials). A token is sent as ``authorization: Bearer
    ...`` on every call; without TLS gRPC sends it to loopback addresses
    only. Shared by :class:`Client` and the asyncio client."""
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs its key, and a key its certificate")
    tls = ca is not None or cert is not None or target.startswith("https://")
    target = normalize_target(target)
    options: List[Tuple[str, object]] = list(RECONNECT_OPTIONS)
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    if tls:
        creds: Optional[grpc.ChannelCredentials] = grpc.ssl_channel_credentials(
            root_certificates=_read_pem("ca", ca),
            private_key=_read_pem("key", key),
            certificate_chain=_read_pem("cert", cert),
        )
    elif token is not None:
        # gRPC attaches call credentials only to a secure channel; "local"
        # credentials are plaintext to a loopback address.
        creds = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    else:
        creds = None
    if token is not None:
        assert creds is not None
        creds = grpc.composite_channel_credentials(creds, grpc.metadata_call_credentials(_BearerToken(token)))
    return target, creds, options


# Request builders, shared with the asyncio client.
def acquire_request(
    job: str,
    holder: str,
    ttl: float,
    wait: float,
    bind_to_stream: bool = False,
    preferred: bool = False,
    value: Optional[Bytes] = None,
    slots: Optional[int] = None,
) -> pb.AcquireRequest:
    """An ``AcquireRequest``; ``value`` (``None``: none) is published with
    the grant; ``slots`` (``None`` or 0: the ordinary lease) asks for a
    slot of a counted lease."""
    return pb.AcquireRequest(
        job=job,
        holder=holder,
        ttl=to_duration(ttl),
        wait=to_duration(wait),
        bind_to_stream=bind_to_stream,
        preferred=preferred,
        value=as_bytes(value) if value is not None else b"",
        slots=slots_arg(slots),
    )


def renew_request(job: str, holder: str, token: int, ttl: float, value: Optional[Bytes] = None) -> pb.RenewRequest:
    """A ``RenewRequest``. ``value`` ``None`` leaves the field unset, which
    keeps the lease's value; given, it replaces it (``b""`` clears it): the
    field is ``optional`` in the proto for exactly that difference."""
    r = pb.RenewRequest(job=job, holder=holder, token=token, ttl=to_duration(ttl))
    if value is not None:
        r.value = as_bytes(value)
    return r


def release_request(job: str, holder: str, token: int, give_back: bool = False) -> pb.ReleaseRequest:
    return pb.ReleaseRequest(job=job, holder=holder, token=token, give_back=give_back)


def transfer_request(
    job: str, holder: str, token: int, to_holder: Optional[str], ttl: Optional[float]
) -> pb.TransferLeaseRequest:
    """A ``TransferLeaseRequest``: ``to_holder`` ``None`` (or empty) for the
    first waiter in line, ``ttl`` ``None`` for the lease's current TTL."""
    r = pb.TransferLeaseRequest(job=job, holder=holder, token=token, to_holder=to_holder or "")
    if ttl is not None:
        r.ttl.CopyFrom(to_duration(ttl))
    return r


def write_request(
    job: str, token: Optional[int], key: Bytes, value: Bytes, delete: bool, proof: Optional[str] = None
) -> pb.CheckedWriteRequest:
    """A ``CheckedWriteRequest``. With a ``proof`` (a grant's
    ``Lease.proof``) the server takes the token from it: ``token`` may then
    be ``None`` or 0, and must otherwise be the proof's. Without one a
    ``None`` token is a ``ValueError``."""
    if token is None:
        if not proof:
            raise ValueError("a write needs a token, or a proof")
        token = 0
    return pb.CheckedWriteRequest(
        job=job, token=token, key=as_bytes(key), value=as_bytes(value), delete=delete, proof=proof or ""
    )


def split_writes(writes: Sequence[pb.CheckedWriteRequest]) -> List[List[pb.CheckedWriteRequest]]:
    """Splits writes into messages of at most :data:`MAX_WRITES_PER_MESSAGE`
    writes and about :data:`MAX_MESSAGE_BYTES` encoded bytes (a larger write
    goes alone), in order. An empty batch is one empty message."""
    out: List[List[pb.CheckedWriteRequest]] = [[]]
    size = 0
    for w in writes:
        # The write, its tag and its length prefix.
        n = w.ByteSize() + 4
        cur = out[-1]
        if cur and (len(cur) == MAX_WRITES_PER_MESSAGE or size + n > MAX_MESSAGE_BYTES):
            out.append([])
            size = 0
        size += n
        out[-1].append(w)
    return out


def write_outcomes(request_id: int, count: int, resp: pb.WriteStreamResponse) -> List[WriteOutcome]:
    """The outcomes in ``resp``, checked to answer the request ``request_id``
    of ``count`` writes. Raises :class:`~leasehold.LeaseholdError` (code
    INTERNAL) when it does not, or when a result has no outcome."""
    if resp.id != request_id or len(resp.results) != count:
        raise errors.LeaseholdError(
            f"write response {resp.id} with {len(resp.results)} results does not answer "
            f"request {request_id} with {count}",
            code=grpc.StatusCode.INTERNAL,
        )
    out: List[WriteOutcome] = []
    for r in resp.results:
        o = outcome_from_pb(r)
        if o is None:
            raise errors.LeaseholdError(
                f"write result has no outcome (outcome {r.outcome})", code=grpc.StatusCode.INTERNAL
            )
        out.append(o)
    return out


def stream_closed_error(what: str = "write stream closed") -> errors.Unavailable:
    """The error for a write on a stream that was closed or ended."""
    return errors.Unavailable(what, code=grpc.StatusCode.CANCELLED)


def stream_timeout_error(timeout: float) -> errors.Unavailable:
    """The error that breaks a stream whose answers took too long."""
    return errors.Unavailable(
        f"write stream: no answer within {timeout:g}s", code=grpc.StatusCode.DEADLINE_EXCEEDED
    )


def value_from_pb(r: pb.ReadResponse) -> Value:
    return Value(found=r.found, value=bytes(r.value), token=r.token, version=r.version)


def key_from_pb(k: pb.KeyInfo) -> KeyInfo:
    return KeyInfo(key=bytes(k.key), token=k.token, version=k.version, size=k.size)


#: Errors that asking again cannot fix: the server refused the request
#: itself (a TTL out of its range, a job name too long) or the caller (its
#: policy). An elector stops campaigning on them.
REFUSALS = (errors.InvalidArgument, errors.Unauthenticated, errors.PermissionDenied)


def campaign_timing(ttl: float):
    """(how long one waiting Acquire waits, renew period), as the Rust
    Elector. Retries back off as :class:`~leasehold._retry.Backoff` says."""
    campaign_wait = min(max(ttl * 3, 1.0), 30.0)
    return campaign_wait, ttl / 3


def leader_callback(cb: Optional[Callable[..., object]]) -> Optional[Callable[[str, int, bytes], object]]:
    """``on_new_leader`` as a function of ``(holder, token, value)``. A
    callback that takes three positional arguments gets the value as the
    third; one written for ``(holder, token)`` (before leases had values)
    is called as before. Decided once, from its signature; one without a
    signature the interpreter can read (some builtins) gets two."""
    if cb is None:
        return None
    try:
        inspect.signature(cb).bind("holder", 1, b"")
        return cb
    except (TypeError, ValueError):
        return lambda holder, token, value: cb(holder, token)
