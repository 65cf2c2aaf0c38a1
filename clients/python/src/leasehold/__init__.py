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

``leasehold.aio`` has the asyncio variants (``AsyncClient``,
``AsyncElector``); ``leasehold.v1`` the generated protobuf and gRPC modules.
"""

from .aio import AsyncClient, AsyncElector
from .client import DEFAULT_TARGET, Client, Watch
from .elector import Elector
from .errors import (
    DOMAIN,
    DiskFull,
    Fenced,
    InvalidArgument,
    LeaseholdError,
    LeaseLost,
    ShuttingDown,
    StorageError,
    Unavailable,
    UnknownToken,
)
from .types import Acquired, EventKind, KeyInfo, Lease, LeaseEvent, Value, process_holder

__version__ = "0.1.0"

__all__ = [
    "Acquired",
    "AsyncClient",
    "AsyncElector",
    "Client",
    "DEFAULT_TARGET",
    "DOMAIN",
    "DiskFull",
    "Elector",
    "EventKind",
    "Fenced",
    "InvalidArgument",
    "KeyInfo",
    "Lease",
    "LeaseEvent",
    "LeaseLost",
    "LeaseholdError",
    "ShuttingDown",
    "StorageError",
    "Unavailable",
    "UnknownToken",
    "Value",
    "Watch",
    "process_holder",
]
