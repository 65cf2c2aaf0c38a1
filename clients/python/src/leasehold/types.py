"""Plain values the clients return, and the conversions from the wire."""

from __future__ import annotations

import enum
import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import List, Optional, Union

import grpc
from google.protobuf import duration_pb2

from . import errors
from .v1 import leasehold_pb2 as pb

Bytes = Union[bytes, bytearray, memoryview, str]

_process_uuid = uuid.uuid4()


def _new_process_uuid() -> None:
    global _process_uuid
    _process_uuid = uuid.uuid4()


# A forked child is a new process, so it is a new holder too.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_process_uuid)


def process_holder(name: str) -> str:
    """A holder identity for this process: ``name@uuid``, with one UUID made
    at process start (and again in a forked child). A restarted process is
    therefore a new holder, never mistaken for the old one.

    For one-off calls; an elector never uses it (see :func:`elector_holder`)."""
    return f"{name}@{_process_uuid}"


def elector_holder(name: str) -> str:
    """A fresh holder identity for one elector: ``name@uuid``, with a UUID
    made by this call. Two electors for one job in one process are then two
    holders to the server: at most one leads, each with its own tokens."""
    return f"{name}@{uuid.uuid4()}"


def check_elector_args(job: str, name: str, ttl: float) -> None:
    """Refuses, with ValueError, what the server is sure to refuse: an empty
    job or name, a TTL that is not positive."""
    if not job:
        raise ValueError("job must not be empty")
    if not name:
        raise ValueError("name must not be empty")
    if not ttl > 0:
        raise ValueError("ttl must be positive")


@dataclass(frozen=True)
class Lease:
    """A job's lease, as the server reported it."""

    job: str
    #: The live holder, or ``None`` when the job is free.
    holder: Optional[str]
    #: The newest token; 0 if never granted.
    token: int
    #: The TTL of the live grant, in seconds.
    ttl: Optional[float]
    #: Seconds left when the server answered.
    remaining: Optional[float]
    #: The principal of the server's policy that holds the lease, or
    #: ``None`` (no policy, or the job is free).
    principal: Optional[str] = None
    #: The grant's proof: a compact JWS, signed by the server, stating job,
    #: token, holder and principal (docs/proofs.md). Storage that leasehold
    #: does not own checks it with :func:`leasehold.proof.verify` and the
    #: keys of :meth:`~leasehold.Client.signing_keys`; it proves that the
    #: token was issued, not that the lease is still live. The same for
    #: every answer about one grant (renewals keep it). ``None`` when the
    #: job is free, the caller may not see the token, or the server signs
    #: nothing.
    proof: Optional[str] = None
    #: The value the holder published (``Acquire``'s ``value``, or its last
    #: renewal that set one): where to reach the leader, say its address,
    #: for routing requests to it. At most 1024 bytes; ``b""`` when the job
    #: is free or the holder published nothing. **Advisory**: it says who
    #: the holder said it is, not that it still leads; the token fences,
    #: not the value.
    value: bytes = b""
    #: In the answer to a counted Acquire (``acquire(..., slots=N)``): the
    #: slot granted, 0 to N - 1, whose own job :attr:`job` names
    #: (``"{job}#{slot}"``). 0 elsewhere, as :attr:`slots` is.
    slot: int = 0
    #: In the answer to a counted Acquire: the job's count of slots, N. 0
    #: elsewhere: ``get_lease``, observe and the others answer about one
    #: slot's job as about any job.
    slots: int = 0

    @property
    def value_text(self) -> str:
        """:attr:`value` decoded as UTF-8 (a byte that is not UTF-8 shows as
        U+FFFD): the value of a holder that published a string."""
        return self.value.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Acquired:
    """The answer to ``acquire``."""

    #: Whether we hold the lease now.
    acquired: bool
    #: Our lease when acquired, else the current holder's.
    lease: Lease


@dataclass(frozen=True)
class Renewed:
    """The answer to ``renew_lease``."""

    #: Our lease, renewed.
    lease: Lease
    #: A preferred candidate (an ``acquire(..., preferred=True)``) waits for
    #: the job, and our grant is not a preferred one: hand over
    #: (``transfer_lease``) or release when it suits. Nothing is taken from
    #: us meanwhile.
    successor_waiting: bool = False


@dataclass(frozen=True)
class Value:
    """A stored value, as ``read`` returns it."""

    #: False when never written or deleted.
    found: bool
    value: bytes
    #: The token of the write that stored this value (or the delete).
    token: int
    #: The key's version; 0 if never written.
    version: int


@dataclass(frozen=True)
class KeyInfo:
    """One live key, as ``list_keys`` returns it."""

    key: bytes
    token: int
    version: int
    #: The value's size in bytes.
    size: int


class EventKind(enum.Enum):
    """Why a watch event was sent."""

    CURRENT = pb.LeaseEvent.KIND_CURRENT
    ACQUIRED = pb.LeaseEvent.KIND_ACQUIRED
    RELEASED = pb.LeaseEvent.KIND_RELEASED
    EXPIRED = pb.LeaseEvent.KIND_EXPIRED
    #: The holder changed the lease's value (a renewal with ``value``, or
    #: its repeated Acquire with another one): same holder, same token, so
    #: not a new leader.
    VALUE_CHANGED = pb.LeaseEvent.KIND_VALUE_CHANGED
    UNSPECIFIED = pb.LeaseEvent.KIND_UNSPECIFIED


@dataclass(frozen=True)
class LeaseEvent:
    """One event of ``watch``: the lease after a change."""

    kind: EventKind
    lease: Lease


@dataclass(frozen=True)
class StreamWrite:
    """One write on a :class:`~leasehold.WriteStream`: the fields of
    ``CheckedWrite``. Build it with :meth:`put` or :meth:`delete` (a ``str``
    key or value is encoded as UTF-8)."""

    #: The job whose token fences the key.
    job: str
    #: The writer's token, from its grant.
    token: int
    #: The key: 1 byte to 1 KiB by default.
    key: bytes
    #: The value (up to 64 KiB by default), or ``None`` to delete the key.
    value: Optional[bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", as_bytes(self.key))
        if self.value is not None:
            object.__setattr__(self, "value", as_bytes(self.value))

    @classmethod
    def put(cls, job: str, token: int, key: Bytes, value: Bytes) -> "StreamWrite":
        """Stores ``value`` under (``job``, ``key``) with ``token``."""
        return cls(job=job, token=token, key=as_bytes(key), value=as_bytes(value))

    @classmethod
    def delete(cls, job: str, token: int, key: Bytes) -> "StreamWrite":
        """Deletes (``job``, ``key``) with ``token``."""
        return cls(job=job, token=token, key=as_bytes(key), value=None)

    def to_pb(self) -> pb.CheckedWriteRequest:
        """The ``CheckedWriteRequest`` this write is sent as."""
        return pb.CheckedWriteRequest(
            job=self.job,
            token=self.token,
            key=self.key,
            value=self.value if self.value is not None else b"",
            delete=self.value is None,
        )


class WriteOutcomeKind(enum.Enum):
    """What became of one write on a write stream."""

    #: Stored durably; ``version`` is the key's new version.
    WRITTEN = pb.WriteResult.OUTCOME_WRITTEN
    #: The token is not the job's live token: the writer is not the leader
    #: and must stop. Nothing was written.
    FENCED = pb.WriteResult.OUTCOME_FENCED
    #: The token was never issued for the job. Nothing was written.
    UNKNOWN_TOKEN = pb.WriteResult.OUTCOME_UNKNOWN_TOKEN
    #: The write would add a key to a job at its limit of keys
    #: (``--max-keys-per-job``, named in ``message``). Nothing was written.
    QUOTA_EXCEEDED = pb.WriteResult.OUTCOME_QUOTA_EXCEEDED
    #: The write was malformed; ``field`` names the field. Nothing was written.
    INVALID_ARGUMENT = pb.WriteResult.OUTCOME_INVALID_ARGUMENT


@dataclass(frozen=True)
class WriteOutcome:
    """The outcome of one write on a write stream: branch on ``kind``
    (or :attr:`written`), never on ``message``.

    ============================  ==========================================
    ``kind``                      set fields
    ============================  ==========================================
    ``WRITTEN``                   ``version``
    ``FENCED``                    ``current_token``, ``message``
    ``UNKNOWN_TOKEN``             ``current_token``, ``message``
    ``QUOTA_EXCEEDED``            ``message``
    ``INVALID_ARGUMENT``          ``field``, ``message``
    ============================  ==========================================
    """

    kind: WriteOutcomeKind
    #: WRITTEN: the key's new version (1 for its first write); else ``None``.
    version: Optional[int] = None
    #: FENCED and UNKNOWN_TOKEN: the job's newest token; else ``None``.
    current_token: Optional[int] = None
    #: INVALID_ARGUMENT: the field at fault (``"job"``, ``"token"``,
    #: ``"key"`` or ``"value"``); else ``None``.
    field: Optional[str] = None
    #: Not WRITTEN: why, in words (names the limit or the current token).
    message: str = ""

    @property
    def written(self) -> bool:
        """Whether the write was made (and is durable)."""
        return self.kind is WriteOutcomeKind.WRITTEN


class TenureEnd(enum.Enum):
    """How a :class:`Tenure` ended (``Tenure.End`` in the proto)."""

    #: Not ended: the holder leads now (or led when the server last started).
    NOT_ENDED = pb.Tenure.END_UNSPECIFIED
    #: The holder released it.
    RELEASED = pb.Tenure.END_RELEASED
    #: It ran out, and was next granted to the same holder or to nobody yet.
    EXPIRED = pb.Tenure.END_EXPIRED
    #: It ran out, and another holder was granted the job.
    TAKEN_OVER = pb.Tenure.END_TAKEN_OVER
    #: It ran out and the job was deleted (older servers only).
    DELETED = pb.Tenure.END_DELETED
    #: ``leasehold restore`` released it.
    RESTORED = pb.Tenure.END_RESTORED
    #: ``leasehold recover`` released it.
    RECOVERED = pb.Tenure.END_RECOVERED
    #: Bound to its connection (``bind_to_stream``), which closed.
    CONNECTION_CLOSED = pb.Tenure.END_CONNECTION_CLOSED
    #: Handed to a waiting successor (``transfer_lease``).
    TRANSFERRED = pb.Tenure.END_TRANSFERRED
    #: The chaos API ended it on purpose.
    CHAOS = pb.Tenure.END_CHAOS


@dataclass(frozen=True)
class Tenure:
    """One token's time as the job's leader, from :meth:`Client.history
    <leasehold.Client.history>`. Its times are the server's wall clock (UTC),
    for people: no lease rule reads them."""

    token: int
    holder: str
    #: The principal the grant was bound to (servers with a policy), or ``None``.
    principal: Optional[str]
    #: When it was granted.
    granted_at: Optional[datetime]
    #: The TTL it was granted with, in seconds.
    ttl: Optional[float]
    #: How it ended; :attr:`TenureEnd.NOT_ENDED` while it lasts.
    end: TenureEnd
    #: When it ended (the release, or the deadline that passed); ``None``
    #: while it lasts.
    ended_at: Optional[datetime]
    #: The value published with the grant (``acquire``'s ``value``); a later
    #: change by a renewal is not recorded here. ``b""`` for none.
    value: bytes = b""


@dataclass(frozen=True)
class ChaosEvent:
    """One action of the chaos API on a job, as the history reports it."""

    at: Optional[datetime]
    #: ``expire``, ``pause``, ``delay``, ``fence``, ``transfer`` or ``clear``.
    action: str
    #: What it did, for people.
    detail: str


@dataclass(frozen=True)
class HistoryPage:
    """One page of a job's history (``GetHistory``), newest first."""

    tenures: List[Tenure]
    #: Pass as ``page_token`` for the older tenures; ``""`` on the last page.
    next_page_token: str = ""
    #: The chaos API's actions on the job, newest first (first page only).
    chaos: List[ChaosEvent] = field(default_factory=list)

    @property
    def tokens(self) -> List[int]:
        """The tokens of :attr:`tenures`, in order (newest first)."""
        return [t.token for t in self.tenures]


@dataclass(frozen=True)
class Waiter:
    """One Acquire waiting in a job's line, from :meth:`Client.list_waiters
    <leasehold.Client.list_waiters>`."""

    #: The waiting holder (``acquire``'s ``holder``).
    holder: str
    #: The principal (of the server's policy) it asked as, or ``None``
    #: without a policy.
    principal: Optional[str]
    #: Whether it asked as a preferred candidate (``preferred=True``).
    preferred: bool


@dataclass(frozen=True)
class Waiters:
    """A job's line of waiting Acquires (``ListWaiters``): the candidates a
    release would hand the lease to, in that order."""

    #: First in line first: the preferred candidates, then the others,
    #: each class first come, first served. At most the ``limit`` asked for.
    waiters: List[Waiter]
    #: How many wait in all (may be more than listed).
    waiting: int

    @property
    def holders(self) -> List[str]:
        """The holders of :attr:`waiters`, in line order."""
        return [w.holder for w in self.waiters]


def waiters_from_pb(r: pb.ListWaitersResponse) -> Waiters:
    return Waiters(
        waiters=[Waiter(holder=w.holder, principal=w.principal or None, preferred=w.preferred) for w in r.waiters],
        waiting=r.waiting,
    )


#: The most bytes a lease's value may have (``Lease.value``); the server
#: refuses more with INVALID_ARGUMENT naming ``"value"``.
MAX_VALUE_BYTES = 1024


def check_value(value: Bytes) -> bytes:
    """``value`` as bytes (a ``str`` encoded as UTF-8), or
    :class:`~leasehold.InvalidArgument` naming ``"value"`` when it is over
    :data:`MAX_VALUE_BYTES`: the error the server would answer, raised
    before anything is sent."""
    b = as_bytes(value)
    if len(b) > MAX_VALUE_BYTES:
        raise errors.InvalidArgument(
            f"value: {len(b)} bytes, at most {MAX_VALUE_BYTES}",
            code=grpc.StatusCode.INVALID_ARGUMENT,
            reason=errors.reason_string(pb.ERROR_REASON_INVALID_ARGUMENT),
            metadata={"field": "value"},
        )
    return b


#: The most slots a counted lease may have (``AcquireRequest.slots``); the
#: server refuses more with INVALID_ARGUMENT naming ``"slots"``.
MAX_SLOTS = 100


def slots_arg(slots: Optional[int]) -> int:
    """``slots`` as the request's field: ``None`` is 0 (the ordinary
    lease). ``ValueError`` for what the field cannot carry (not an int, or
    negative); a count over :data:`MAX_SLOTS` is the server's to refuse."""
    if slots is None:
        return 0
    if isinstance(slots, bool) or not isinstance(slots, int):
        raise ValueError(f"slots must be an int, not {type(slots).__name__}")
    if not 0 <= slots < 1 << 32:
        raise ValueError(f"slots must be 0 to {MAX_SLOTS}, not {slots}")
    return slots


def check_slots(slots: Optional[int]) -> int:
    """:func:`slots_arg`, and :class:`~leasehold.InvalidArgument` naming
    ``"slots"`` over :data:`MAX_SLOTS`: the error the server would answer,
    raised by the electors and locks before they campaign (a campaign
    would stop on it anyway)."""
    n = slots_arg(slots)
    if n > MAX_SLOTS:
        raise errors.InvalidArgument(
            f"slots: {n} is above the limit of {MAX_SLOTS}",
            code=grpc.StatusCode.INVALID_ARGUMENT,
            reason=errors.reason_string(pb.ERROR_REASON_INVALID_ARGUMENT),
            metadata={"field": "slots"},
        )
    return n


def _time(msg, name: str) -> Optional[datetime]:
    if not msg.HasField(name):
        return None
    return getattr(msg, name).ToDatetime(tzinfo=timezone.utc)


def tenure_from_pb(t: pb.Tenure) -> Tenure:
    try:
        end = TenureEnd(t.end)
    except ValueError:  # a newer server's end: say only that it ended
        end = TenureEnd.EXPIRED
    return Tenure(
        token=t.token,
        holder=t.holder,
        principal=t.principal or None,
        granted_at=_time(t, "granted_at"),
        ttl=(t.ttl.seconds + t.ttl.nanos / 1e9) if t.HasField("ttl") else None,
        end=end,
        ended_at=_time(t, "ended_at"),
        value=bytes(t.value),
    )


def history_from_pb(r: pb.GetHistoryResponse) -> HistoryPage:
    return HistoryPage(
        tenures=[tenure_from_pb(t) for t in r.tenures],
        next_page_token=r.next_page_token,
        chaos=[ChaosEvent(at=_time(c, "at"), action=c.action, detail=c.detail) for c in r.chaos],
    )


def outcome_from_pb(r: pb.WriteResult) -> Optional[WriteOutcome]:
    """The outcome a ``WriteResult`` reports; ``None`` when it has none
    (``OUTCOME_UNSPECIFIED``, or one this client does not know)."""
    if r.outcome == pb.WriteResult.OUTCOME_WRITTEN:
        return WriteOutcome(WriteOutcomeKind.WRITTEN, version=r.version)
    if r.outcome == pb.WriteResult.OUTCOME_FENCED:
        return WriteOutcome(WriteOutcomeKind.FENCED, current_token=r.current_token, message=r.message)
    if r.outcome == pb.WriteResult.OUTCOME_UNKNOWN_TOKEN:
        return WriteOutcome(WriteOutcomeKind.UNKNOWN_TOKEN, current_token=r.current_token, message=r.message)
    if r.outcome == pb.WriteResult.OUTCOME_QUOTA_EXCEEDED:
        return WriteOutcome(WriteOutcomeKind.QUOTA_EXCEEDED, message=r.message)
    if r.outcome == pb.WriteResult.OUTCOME_INVALID_ARGUMENT:
        return WriteOutcome(WriteOutcomeKind.INVALID_ARGUMENT, field=r.field, message=r.message)
    return None


def to_duration(seconds: float) -> duration_pb2.Duration:
    if seconds < 0:
        seconds = 0.0
    nanos_total = int(round(seconds * 1e9))
    return duration_pb2.Duration(
        seconds=nanos_total // 1_000_000_000, nanos=nanos_total % 1_000_000_000
    )


def _seconds(msg: pb.Lease, field: str) -> Optional[float]:
    if not msg.HasField(field):
        return None
    d = getattr(msg, field)
    return max(d.seconds, 0) + max(d.nanos, 0) / 1e9


def lease_from_pb(msg: pb.Lease) -> Lease:
    return Lease(
        job=msg.job,
        holder=msg.holder or None,
        token=msg.token,
        ttl=_seconds(msg, "ttl"),
        remaining=_seconds(msg, "remaining"),
        principal=msg.principal or None,
        proof=msg.proof or None,
        value=bytes(msg.value),
        slot=msg.slot,
        slots=msg.slots,
    )


def event_from_pb(msg: pb.LeaseEvent) -> LeaseEvent:
    try:
        kind = EventKind(msg.kind)
    except ValueError:
        kind = EventKind.UNSPECIFIED
    return LeaseEvent(kind=kind, lease=lease_from_pb(msg.lease))


def as_bytes(b: Bytes) -> bytes:
    if isinstance(b, str):
        return b.encode("utf-8")
    return bytes(b)


# Shard groups (the Shards service)

#: The most shards a group may have (``JoinRequest.shards``); the server
#: refuses more, or 0, with INVALID_ARGUMENT naming ``"shards"``.
MAX_SHARDS = 1024


@dataclass(frozen=True)
class ShardAssigned:
    """The member owns ``shard`` from now until a :class:`ShardRevoked` or
    :class:`ShardLost` for it: write its state under ``job`` with
    ``token``."""

    #: The shard, 0 to N-1.
    shard: int
    #: Its fencing token while this member owns it.
    token: int
    #: Its job, ``"{group}/{shard}"``.
    job: str


@dataclass(frozen=True)
class ShardRevoked:
    """The shard is to move to another member: stop its work, then
    acknowledge with ``release(shard)`` within ``deadline`` seconds. Until
    then it is still owned, and ``token`` still writes."""

    shard: int
    #: The token it was owned with.
    token: int
    job: str
    #: How long the member has to acknowledge (seconds), as the server said.
    deadline: Optional[float] = None


@dataclass(frozen=True)
class ShardLost:
    """The member no longer owns the shard: its holding ran out (the member
    was silent for its TTL), a revoke's deadline passed, or the stream
    broke. ``token`` no longer writes once another member owns it: stop its
    work (no acknowledgement)."""

    shard: int
    #: The token it was owned with.
    token: int
    job: str


#: What a shard member is told.
ShardEvent = Union[ShardAssigned, ShardRevoked, ShardLost]


@dataclass(frozen=True)
class ShardGroupMember:
    """A live member of a group, from ``get_group``."""

    #: Its identity, ``name@uuid``, as it joined.
    member: str
    #: The shards it owns, in order.
    shards: List[int]


@dataclass(frozen=True)
class ShardOwner:
    """One shard of a group, from ``get_group``."""

    shard: int
    #: Its job, ``"{group}/{shard}"``.
    job: str
    #: Its owner, or ``None`` when nobody owns it.
    member: Optional[str]
    #: Its newest token (0 when never owned).
    token: int


@dataclass(frozen=True)
class ShardGroup:
    """A shard group as the server sees it (``GetGroup``)."""

    group: str
    #: Its count of shards; 0 when it has none (never joined).
    shards: int
    #: Its live members.
    members: List[ShardGroupMember]
    #: Every shard, in order, with its owner.
    owners: List[ShardOwner]

    def owned_by(self, member: str) -> List[int]:
        """The shards ``member`` owns, in order (none when it is not a
        member)."""
        return [o.shard for o in self.owners if o.member == member]

    @property
    def unowned(self) -> List[int]:
        """The shards nobody owns right now (moving, or no member)."""
        return [o.shard for o in self.owners if o.member is None]


def group_from_pb(g: pb.ShardGroup) -> ShardGroup:
    return ShardGroup(
        group=g.group,
        shards=g.shards,
        members=[ShardGroupMember(member=m.member, shards=list(m.shards)) for m in g.members],
        owners=[ShardOwner(shard=o.shard, job=o.job, member=o.member or None, token=o.token) for o in g.owners],
    )


def _invalid(field: str, message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(
        message,
        code=grpc.StatusCode.INVALID_ARGUMENT,
        reason=errors.reason_string(pb.ERROR_REASON_INVALID_ARGUMENT),
        metadata={"field": field},
    )


def check_join_args(
    group: str, name: str, shards: int, ttl: float, revoke_timeout: Optional[float] = None
) -> None:
    """Refuses, with :class:`~leasehold.InvalidArgument` naming the field
    as the server would, what the server is sure to refuse: an empty group
    or name, a count of shards that is not 1 to :data:`MAX_SHARDS`, a TTL
    or revoke timeout that is not positive."""
    if not group:
        raise _invalid("group", "group must not be empty")
    if not name:
        raise _invalid("member", "name must not be empty")
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise _invalid("shards", f"shards: {shards!r} is not 1 to {MAX_SHARDS}")
    if not ttl > 0:
        raise _invalid("ttl", "ttl must be positive")
    if revoke_timeout is not None and not revoke_timeout > 0:
        raise _invalid("revoke_timeout", "revoke_timeout must be positive")
