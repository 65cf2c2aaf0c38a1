"""What the blocking and asyncio shard members share: the first Join
message, and the bookkeeping of the shards a member owns, which turns the
server's messages into the events the user sees. Private: the public
names are re-exported by :mod:`leasehold`."""

from __future__ import annotations

from typing import Dict, List, Optional

import grpc

from . import errors
from .types import ShardAssigned, ShardEvent, ShardLost, ShardRevoked, to_duration
from .v1 import leasehold_pb2 as pb

#: A member that lost its stream joins again after this long, doubling up
#: to :data:`REJOIN_MAX` (seconds).
REJOIN_FIRST = 0.1
REJOIN_MAX = 1.0
#: How long a member that leaves waits for the server to end its stream
#: (having freed its shards) before it cancels the call (seconds).
LEAVE_WAIT = 5.0

_KIND = pb.JoinResponse.Kind


def join_request(
    group: str, member: str, shards: int, ttl: float, revoke_timeout: Optional[float]
) -> pb.JoinRequest:
    """The first message of a Join: the group, the member, the count and the
    TTL; ``revoke_timeout`` ``None`` leaves it unset (the server's default,
    the TTL)."""
    r = pb.JoinRequest(group=group, member=member, shards=shards, ttl=to_duration(ttl))
    if revoke_timeout is not None:
        r.revoke_timeout.CopyFrom(to_duration(revoke_timeout))
    return r


def joined_shards(m: object) -> int:
    """The group's count from the first answer of a Join, which must be
    JOINED (else :class:`~leasehold.Unavailable`: the stream is of no use)."""
    if m is None or getattr(m, "kind", None) != _KIND.KIND_JOINED:
        raise errors.Unavailable(
            "the server answered a Join with something other than JOINED", code=grpc.StatusCode.UNAVAILABLE
        )
    return m.shards  # type: ignore[attr-defined]


def ended_error() -> errors.Unavailable:
    """The error of a Join stream the server ended without a status: the
    member joins again."""
    return errors.Unavailable("the server ended the Join stream", code=grpc.StatusCode.UNAVAILABLE)


class Ownership:
    """The shards a member owns, as its stream says: the server's messages
    in, the user's events out. A repeated ASSIGNED (the same token, after a
    rejoin that found the shard still ours) is told again only if the
    shard was reported lost meanwhile; a LOST for a shard not owned is not
    told."""

    def __init__(self) -> None:
        self.owned: Dict[int, ShardAssigned] = {}

    def told(self, m: pb.JoinResponse) -> Optional[ShardEvent]:
        """The event for one message of the stream, or ``None``."""
        if m.kind == _KIND.KIND_ASSIGNED:
            ev = ShardAssigned(shard=m.shard, token=m.token, job=m.job)
            if self.owned.get(m.shard) == ev:
                return None
            self.owned[m.shard] = ev
            return ev
        if m.kind == _KIND.KIND_REVOKED:
            deadline = m.deadline.seconds + m.deadline.nanos / 1e9 if m.HasField("deadline") else None
            return ShardRevoked(shard=m.shard, token=m.token, job=m.job, deadline=deadline)
        if m.kind == _KIND.KIND_LOST:
            if self.owned.pop(m.shard, None) is None:
                return None
            return ShardLost(shard=m.shard, token=m.token, job=m.job)
        return None  # JOINED again, or a kind this client does not know

    def released(self, shards: List[int]) -> None:
        """The member let go of ``shards`` (its acknowledgement is sent)."""
        for k in shards:
            self.owned.pop(k, None)

    def lose_all(self) -> List[ShardLost]:
        """Every shard owned, as lost, in order: the stream broke, and the
        shards may have moved while it was down."""
        lost = [ShardLost(shard=s.shard, token=s.token, job=s.job) for _, s in sorted(self.owned.items())]
        self.owned.clear()
        return lost
