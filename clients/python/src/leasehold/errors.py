"""Typed errors, decoded from the ``google.rpc.ErrorInfo`` reason.

Every leasehold error status carries an ``ErrorInfo`` with domain
``"leasehold"`` and a reason: the name of a value of the contract's
``ErrorReason`` enum without its ``ERROR_REASON_`` prefix (``LEASE_LOST``,
``FENCED``, ...). :func:`reason_enum` maps the string to the generated enum
value, and the decoding branches on that value, so every reason comes from
the proto.
:func:`from_rpc_error` turns a ``grpc.RpcError`` (sync or asyncio) into the
matching exception below, so that callers branch on the type, never on the
message::

    try:
        client.checked_write(job, token, b"status", b"ok")
    except leasehold.Fenced as e:
        stop_leading()          # e.current_token is the job's newest token

Hierarchy::

    LeaseholdError
    ├── LeaseLost          renew/release of a lease we no longer hold
    ├── Fenced             write with a token that is not the live one
    ├── InvalidArgument    bad input; .field names it
    │   └── UnknownToken   a token the server never issued for the job
    ├── Unauthenticated    no credentials, or ones the server's policy does not know
    ├── PermissionDenied   the principal may not do this; .action and .job
    ├── QuotaExceeded      a limit on state (jobs, keys, watchers, waiters); .limit and .max
    ├── JobInUse           delete_job of a job whose lease is live or awaited
    ├── NoSuccessor        transfer_lease with nobody (or not that holder) waiting
    ├── NotLeader          Elector.transfer() while not leading (nothing was sent)
    ├── ProofError         a grant's proof refused by leasehold.proof.verify; .kind says why
    ├── ChaosDisabled      a chaos call to a server without --enable-chaos
    └── Unavailable        server unreachable or not answering; retryable
        ├── StorageError   the store could not make a change durable
        ├── DiskFull       the server's disk is (nearly) full; reads go on
        ├── Overloaded     too many calls in flight; .limit and .max; back off
        └── ShuttingDown   the server is stopping
"""

from __future__ import annotations

import enum
import time
from typing import Iterable, Mapping, Optional, Tuple

import grpc
from google.rpc import error_details_pb2, status_pb2

from .v1 import leasehold_pb2 as pb

DOMAIN = "leasehold"
_DETAILS_KEY = "grpc-status-details-bin"
_REASON_PREFIX = "ERROR_REASON_"


def reason_enum(reason: Optional[str]) -> Optional[pb.ErrorReason]:
    """The generated ``ErrorReason`` value for a reason as sent in
    ``ErrorInfo`` (``"FENCED"`` gives ``ERROR_REASON_FENCED``), or ``None``
    when there is no reason or it is not one this client's proto knows."""
    if not reason:
        return None
    try:
        return pb.ErrorReason.Value(_REASON_PREFIX + reason)
    except ValueError:
        return None


def reason_string(value: pb.ErrorReason) -> str:
    """The reason as sent in ``ErrorInfo`` for a generated ``ErrorReason``
    value: its name without the ``ERROR_REASON_`` prefix."""
    name = pb.ErrorReason.Name(value)
    return name[len(_REASON_PREFIX):] if name.startswith(_REASON_PREFIX) else name


class LeaseholdError(Exception):
    """Any error from leasehold, with the gRPC code, the ErrorInfo reason
    (``None`` when the status had none) and the ErrorInfo metadata."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata = dict(metadata or {})

    def __str__(self) -> str:
        tag = self.reason or (self.code.name if self.code else "")
        return f"{self.message} ({tag})" if tag else self.message

    def _token(self, key: str = "current_token") -> Optional[int]:
        raw = self.metadata.get(key)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None


class LeaseLost(LeaseholdError):
    """The lease is no longer ours (reason LEASE_LOST): stop leading.
    Retrying is useless; campaign again if you like."""

    @property
    def current_token(self) -> Optional[int]:
        """The job's newest token, if the server said."""
        return self._token()

    @property
    def current_holder(self) -> Optional[str]:
        """The job's holder now, if it has one."""
        return self.metadata.get("current_holder") or None


class Fenced(LeaseholdError):
    """The write was fenced (reason FENCED): the writer is not the live
    leader and must stop. Nothing was written."""

    @property
    def current_token(self) -> Optional[int]:
        """The job's newest token."""
        return self._token()


class InvalidArgument(LeaseholdError):
    """Bad input (INVALID_ARGUMENT): retrying the same call cannot help.
    Nothing was changed."""

    @property
    def field(self) -> Optional[str]:
        """The request field at fault (``"job"``, ``"ttl"``, ``"key"``...)."""
        return self.metadata.get("field")


class UnknownToken(InvalidArgument):
    """A token the server never issued for the job: zero, or above the
    job's newest token (reason UNKNOWN_TOKEN)."""

    @property
    def field(self) -> Optional[str]:
        return self.metadata.get("field", "token")

    @property
    def current_token(self) -> Optional[int]:
        """The job's newest token."""
        return self._token()


class Unauthenticated(LeaseholdError):
    """The server's policy does not know the caller (reason
    UNAUTHENTICATED): no credentials, or a token or certificate of no
    principal. Retrying with the same credentials cannot help."""


class PermissionDenied(LeaseholdError):
    """The caller's principal may not do this (reason PERMISSION_DENIED):
    no grant for the action on the job, or the job's lease is another
    principal's. Retrying cannot help until the policy or the holder
    changes. Nothing was changed."""

    @property
    def action(self) -> Optional[str]:
        """The action refused: ``"lease"``, ``"write"``, ``"read"`` or
        ``"admin"``."""
        return self.metadata.get("action") or None

    @property
    def job(self) -> Optional[str]:
        """The job the call was refused on."""
        return self.metadata.get("job") or None


class QuotaExceeded(LeaseholdError):
    """A limit on state was reached (reason QUOTA_EXCEEDED, status
    RESOURCE_EXHAUSTED): too many jobs (``--max-jobs``), keys in a job
    (``--max-keys-per-job``), watchers (``--max-watchers``) or waiters on
    a job (``--max-waiters-per-job``). Nothing was changed; retrying helps
    only once the state shrinks (``delete_job`` gives jobs and keys back,
    watchers and waiters leave)."""

    @property
    def limit(self) -> Optional[str]:
        """The flag that sets the limit, such as ``"--max-jobs"``."""
        return self.metadata.get("limit") or None

    @property
    def max(self) -> Optional[int]:
        """The limit's value."""
        return self._token("max")


class JobInUse(LeaseholdError):
    """``delete_job`` of a job whose lease is live, or that an Acquire waits
    for (reason JOB_IN_USE, status FAILED_PRECONDITION). Nothing was
    deleted; retry once the lease is released or has expired and nobody
    waits."""


class NoSuccessor(LeaseholdError):
    """``transfer_lease`` (or ``Elector.transfer()``) found no successor
    (reason NO_SUCCESSOR, status FAILED_PRECONDITION): nobody waits for the
    job, or the holder named has no Acquire waiting. Nothing changed: the
    caller still leads. Retry once a successor waits, or release."""


class NotLeader(LeaseholdError):
    """``Elector.transfer()`` (or ``AsyncElector.transfer()``) while the
    elector does not lead: campaigning, past its own deadline, or stopped.
    Raised by the client; nothing was sent to the server (status code
    FAILED_PRECONDITION, no reason)."""

    def __init__(self, message: str = "not leading") -> None:
        super().__init__(message, code=grpc.StatusCode.FAILED_PRECONDITION)


class ChaosDisabled(LeaseholdError):
    """A call of the chaos test helper (:meth:`leasehold.Client.chaos`) to a
    server that does not serve the chaos API: it was not started with
    ``--enable-chaos`` (the server answers UNIMPLEMENTED), or predates it.
    Nothing was changed. Start the test server with ``--enable-chaos``
    (test and staging servers only)."""


class ProofErrorKind(enum.Enum):
    """Why :func:`leasehold.proof.verify` refused a proof: the classes of
    refusal of docs/proofs.md (the values are their names there)."""

    #: Not three unpadded base64url parts, a header or claims that are not
    #: a JSON object of the documented types, an ``iss`` other than
    #: ``leasehold``, or a token that is not a decimal u64 above 0.
    MALFORMED = "malformed"
    #: An ``alg`` other than ``EdDSA`` or a ``typ`` other than
    #: ``leasehold-proof+jwt``.
    UNSUPPORTED = "unsupported"
    #: A ``kid`` that names no Ed25519 key of the key set: a key rotated
    #: out, or another server's.
    UNKNOWN_KEY = "unknown key"
    #: The signature does not verify: forged, or altered.
    BAD_SIGNATURE = "bad signature"
    #: A proof for another job than the one expected.
    WRONG_JOB = "wrong job"
    #: A proof for another token than the one expected.
    WRONG_TOKEN = "wrong token"


class ProofError(LeaseholdError, ValueError):
    """A grant's proof was refused by :func:`leasehold.proof.verify`, in
    this process (nothing was sent to a server; status code
    INVALID_ARGUMENT, no reason). :attr:`kind` says why; branch on it, never
    on the message. Also a ``ValueError``."""

    def __init__(self, kind: ProofErrorKind, message: str) -> None:
        super().__init__(f"proof refused ({kind.value}): {message}", code=grpc.StatusCode.INVALID_ARGUMENT)
        self.kind = kind

    def __str__(self) -> str:
        return self.message


class Unavailable(LeaseholdError):
    """The server could not be reached or could not answer (UNAVAILABLE,
    DEADLINE_EXCEEDED, CANCELLED, a transport failure). The outcome of a
    change is unknown; retrying later can help."""

    retryable = True


class DeadlineExceeded(Unavailable, TimeoutError):
    """A call's timeout passed before the answer (DEADLINE_EXCEEDED): an
    :class:`Unavailable`, and the built-in ``TimeoutError`` too, so
    ``except TimeoutError`` catches it. The outcome of a change is
    unknown."""


class StorageError(Unavailable):
    """The server could not make the change durable (reason STORAGE)."""


class ShuttingDown(Unavailable):
    """The server is shutting down (reason SHUTTING_DOWN)."""


class DiskFull(Unavailable):
    """The server's data disk is (nearly) full (reason DISK_FULL, status
    RESOURCE_EXHAUSTED): the change was refused before anything was
    written. Reads go on; retry once space is freed."""

    @property
    def free_bytes(self) -> Optional[int]:
        return self._token("free_bytes")

    @property
    def needed_bytes(self) -> Optional[int]:
        return self._token("needed_bytes")


class Overloaded(Unavailable):
    """Too many calls in flight (reason OVERLOADED, status
    RESOURCE_EXHAUSTED): the server refused the call before running it,
    over ``--max-in-flight`` or ``--max-in-flight-per-connection``. Nothing
    was changed; retry with backoff."""

    @property
    def limit(self) -> Optional[str]:
        """The flag that sets the limit, such as
        ``"--max-in-flight-per-connection"``."""
        return self.metadata.get("limit") or None

    @property
    def max(self) -> Optional[int]:
        """The limit's value."""
        return self._token("max")


_BY_REASON = {
    pb.ERROR_REASON_LEASE_LOST: LeaseLost,
    pb.ERROR_REASON_FENCED: Fenced,
    pb.ERROR_REASON_UNKNOWN_TOKEN: UnknownToken,
    pb.ERROR_REASON_INVALID_ARGUMENT: InvalidArgument,
    pb.ERROR_REASON_STORAGE: StorageError,
    pb.ERROR_REASON_SHUTTING_DOWN: ShuttingDown,
    pb.ERROR_REASON_DISK_FULL: DiskFull,
    pb.ERROR_REASON_UNAUTHENTICATED: Unauthenticated,
    pb.ERROR_REASON_PERMISSION_DENIED: PermissionDenied,
    pb.ERROR_REASON_OVERLOADED: Overloaded,
    pb.ERROR_REASON_QUOTA_EXCEEDED: QuotaExceeded,
    pb.ERROR_REASON_JOB_IN_USE: JobInUse,
    pb.ERROR_REASON_NO_SUCCESSOR: NoSuccessor,
}

_UNAVAILABLE_CODES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
}


def error_info(
    trailing_metadata: Optional[Iterable[Tuple[str, object]]],
) -> Optional[error_details_pb2.ErrorInfo]:
    """The leasehold ``ErrorInfo`` in a status's trailing metadata, if any."""
    for key, value in trailing_metadata or ():
        if key != _DETAILS_KEY or not isinstance(value, (bytes, bytearray)):
            continue
        status = status_pb2.Status.FromString(bytes(value))
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                if info.domain == DOMAIN:
                    return info
    return None


def from_status(
    code: grpc.StatusCode,
    message: str,
    trailing_metadata: Optional[Iterable[Tuple[str, object]]] = None,
) -> LeaseholdError:
    """The typed error for a status code, message and trailing metadata."""
    info = error_info(trailing_metadata)
    reason = info.reason if info is not None else None
    metadata = dict(info.metadata) if info is not None else {}
    message = message or (code.name if code else "error")
    known = reason_enum(reason)
    cls = _BY_REASON.get(known) if known is not None else None
    if cls is None:
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            cls = InvalidArgument
        elif code == grpc.StatusCode.UNAUTHENTICATED:
            cls = Unauthenticated
        elif code == grpc.StatusCode.PERMISSION_DENIED:
            cls = PermissionDenied
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            cls = DeadlineExceeded
        elif code in _UNAVAILABLE_CODES:
            cls = Unavailable
        else:
            cls = LeaseholdError
    return cls(message, code=code, reason=reason, metadata=metadata)


def from_call_error(e: grpc.RpcError, started: float, timeout: Optional[float]) -> LeaseholdError:
    """:func:`from_rpc_error` for a call started at ``started``
    (``time.monotonic()``) with ``timeout``: a call that failed because its
    timeout passed is a :class:`DeadlineExceeded`, whether gRPC said so or
    the server answered first that the timeout it was sent expired
    (CANCELLED)."""
    err = from_rpc_error(e)
    if (
        timeout is not None
        and type(err) is Unavailable
        and err.code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED)
        and time.monotonic() - started >= timeout
    ):
        return DeadlineExceeded(err.message, code=err.code, reason=err.reason, metadata=err.metadata)
    return err


def from_rpc_error(e: grpc.RpcError) -> LeaseholdError:
    """The typed error for a failed call (``grpc.RpcError`` or
    ``grpc.aio.AioRpcError``)."""
    try:
        code = e.code()  # type: ignore[attr-defined]
        message = e.details() or ""  # type: ignore[attr-defined]
        trailing = e.trailing_metadata()  # type: ignore[attr-defined]
    except Exception:  # an RpcError that is not a call (rare)
        return Unavailable(str(e), code=grpc.StatusCode.UNKNOWN)
    return from_status(code, message, trailing)


def stream_error(e: grpc.RpcError) -> LeaseholdError:
    """The typed error a write stream breaks with. A bare INTERNAL (no
    leasehold reason) is gRPC's own when the call failed locally before the
    server's status arrived, for example a write sent as the server ended
    the call: the stream broke, so it is :class:`Unavailable`."""
    err = from_rpc_error(e)
    if type(err) is LeaseholdError and err.code == grpc.StatusCode.INTERNAL and err.reason is None:
        return Unavailable(f"write stream broke before the server's status arrived ({err.message})", code=err.code)
    return err
