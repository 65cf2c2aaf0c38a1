"""leasehold: per-job leases with fencing tokens, an Elector, and a store
fenced by the tokens, over gRPC.

::

    import leasehold

    client = leasehold.Client("127.0.0.1:50051")
    with leasehold.Elector(client, "bridge_health", "bridge", ttl=10) as elector:
        token = elector.wait_elected()
        try:
            client.checked_write("bridge_health", token, b"status", b"ok")
        except leasehold.Fenced:
            pass  # not the leader any more: stop

``with client.lock(job, ttl=10) as lock:`` holds the lease on ``job`` for
the block, renewed in the background (:class:`Lock`; ``lock.token``
fences the writes).

``client.observe(job)`` iterates over a job's lease changes;
``client.history(job)`` pages through its leaders (:class:`Tenure`);
``client.list_waiters(job)`` lists its candidates in line order
(:class:`Waiters`). A leader publishes a value, where to reach it
(``Elector(..., value=...)``, ``elector.set_value(...)``), that followers
read as ``elector.leader().value`` (:attr:`Lease.value`): advisory, the
token fences, not the value.
:class:`ElectorSet` campaigns for many jobs as one holder and renews them
all over one ``KeepAlive`` stream.

``client.write_stream()`` opens a :class:`WriteStream` for many fenced
writes over one stream (``StreamWrite`` in, ``WriteOutcome`` out).

``leasehold.proof.verify(lease.proof, client.signing_keys(), job=...)``
checks a grant's proof, the server's signed statement that it issued the
token, for storage that leasehold does not own (needs the
``leasehold[proof]`` extra).

``client.chaos()`` is a test helper over the chaos API of a server
started with ``--enable-chaos`` (:class:`Chaos`): expire, pause, delay or
fence a job's holder on purpose, and check that the worker steps down.

``client.get_group(group)`` shows a shard group (:class:`ShardGroup`);
``AsyncClient.join_shards(group, name, shards)`` makes a member of it, an
async iterator of :class:`ShardAssigned`, :class:`ShardRevoked` and
:class:`ShardLost` whose ``run(work)`` runs a task per owned shard
(:class:`~leasehold.aio.AsyncShardMember`); ``Client.join_shards`` one
with callbacks on a thread of its own (:class:`ShardMember`).

``leasehold.aio`` has the asyncio variants (``AsyncClient``,
``AsyncWriteStream``, ``AsyncElector``); ``leasehold.v1`` the generated
protobuf and gRPC modules.
"""

from importlib import metadata as _metadata

from .aio import AsyncClient, AsyncElector, AsyncElectorSet, AsyncShardMember, AsyncWriteStream
from .chaos import AsyncChaos, Chaos, ChaosOutcome
from .client import DEFAULT_TARGET, Client, Watch, WriteStream
from .elector import Elector
from .elector_set import ElectorSet
from .lock import AsyncLock, Lock
from .shards import ShardMember
from .errors import (
    DOMAIN,
    ChaosDisabled,
    DiskFull,
    Fenced,
    InvalidArgument,
    JobInUse,
    LeaseholdError,
    LeaseLost,
    NoSuccessor,
    NotLeader,
    Overloaded,
    PermissionDenied,
    ProofError,
    ProofErrorKind,
    QuotaExceeded,
    ShuttingDown,
    StorageError,
    Unauthenticated,
    Unavailable,
    DeadlineExceeded,
    UnknownToken,
)
from . import proof
from .proof import KeySet, ProofClaims
from .types import (
    Acquired,
    ChaosEvent,
    EventKind,
    HistoryPage,
    KeyInfo,
    Lease,
    LeaseEvent,
    Renewed,
    ShardAssigned,
    ShardEvent,
    ShardGroup,
    ShardGroupMember,
    ShardLost,
    ShardOwner,
    ShardRevoked,
    StreamWrite,
    Tenure,
    TenureEnd,
    Value,
    Waiter,
    Waiters,
    WriteOutcome,
    WriteOutcomeKind,
    process_holder,
)

try:
    #: This package's version, as its metadata (pyproject.toml) gives it.
    __version__: str = _metadata.version("leasehold")
except _metadata.PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0+unknown"

__all__ = [
    "Acquired",
    "AsyncChaos",
    "AsyncClient",
    "AsyncElector",
    "AsyncElectorSet",
    "AsyncLock",
    "AsyncShardMember",
    "AsyncWriteStream",
    "Chaos",
    "ChaosDisabled",
    "ChaosEvent",
    "ChaosOutcome",
    "Client",
    "DEFAULT_TARGET",
    "DOMAIN",
    "DiskFull",
    "Elector",
    "ElectorSet",
    "EventKind",
    "Fenced",
    "HistoryPage",
    "InvalidArgument",
    "JobInUse",
    "KeyInfo",
    "KeySet",
    "Lease",
    "LeaseEvent",
    "LeaseLost",
    "LeaseholdError",
    "Lock",
    "NoSuccessor",
    "NotLeader",
    "Overloaded",
    "ProofClaims",
    "ProofError",
    "ProofErrorKind",
    "QuotaExceeded",
    "Renewed",
    "ShardAssigned",
    "ShardEvent",
    "ShardGroup",
    "ShardGroupMember",
    "ShardLost",
    "ShardMember",
    "ShardOwner",
    "ShardRevoked",
    "ShuttingDown",
    "StorageError",
    "StreamWrite",
    "Tenure",
    "TenureEnd",
    "Unavailable",
    "DeadlineExceeded",
    "UnknownToken",
    "Unauthenticated",
    "PermissionDenied",
    "Value",
    "Waiter",
    "Waiters",
    "Watch",
    "WriteOutcome",
    "WriteOutcomeKind",
    "WriteStream",
    "process_holder",
    "proof",
]
