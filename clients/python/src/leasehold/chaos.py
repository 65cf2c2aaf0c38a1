"""A test helper over the chaos API (``chaos.proto``) of a server started
with ``--enable-chaos``: make a worker lose its lease, stall, or be fenced,
on purpose, and check that it steps down. :meth:`Client.chaos
<leasehold.Client.chaos>` gives a :class:`Chaos`, :meth:`AsyncClient.chaos
<leasehold.aio.AsyncClient.chaos>` an :class:`AsyncChaos`::

    stopped = threading.Event()
    with leasehold.Elector(client, "sync", "worker", ttl=3, on_lost=lambda t: stopped.set()) as elector:
        token = elector.wait_elected()
        client.checked_write("sync", token, b"k", b"1")

        client.chaos().expire("sync")      # the lease is gone, now
        assert stopped.wait(5)             # the elector reports the loss
        with pytest.raises(leasehold.Fenced):
            client.checked_write("sync", token, b"k", b"2")  # and the old token is fenced
    client.chaos().clear()

Every method returns a :class:`ChaosOutcome`: the job's lease after the
action, and what chaos is in force on the job (for people). Errors are the
client's typed errors (:class:`~leasehold.NoSuccessor`,
:class:`~leasehold.InvalidArgument`, :class:`~leasehold.PermissionDenied`
...); a server without the chaos API raises
:class:`~leasehold.ChaosDisabled`.

**For test and staging servers only.** Chaos is kept by the server in
memory (a restart clears it); each action is logged at WARN, counted on
``/metrics`` and shown on the status page while in force. On a listener
that is not loopback, a call also needs a policy that grants the action
``chaos`` on the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

import grpc

from . import errors
from .types import Lease, lease_from_pb, to_duration
from .v1 import chaos_pb2 as chaos_pb
from .v1 import chaos_pb2_grpc as chaos_grpc

__all__ = ["AsyncChaos", "Chaos", "ChaosOutcome"]


@dataclass(frozen=True)
class ChaosOutcome:
    """What a chaos action left."""

    #: The job's lease after the action; ``None`` for :meth:`Chaos.clear`
    #: of every job.
    lease: Optional[Lease]
    #: What is in force on the job now, for people (``"worker@... paused
    #: for 9.8s, answers delayed by 200ms, 3 writes to fence"``); empty
    #: when nothing is. Branch on the job's behaviour, not on this text.
    in_force: str = ""


def outcome_from_pb(r: chaos_pb.ChaosResponse) -> ChaosOutcome:
    return ChaosOutcome(lease=lease_from_pb(r.lease) if r.HasField("lease") else None, in_force=r.in_force)


def chaos_error(action: str, job: Optional[str], err: errors.LeaseholdError) -> errors.LeaseholdError:
    """The error a chaos call raises for ``err``: :class:`~leasehold.ChaosDisabled`
    when the server does not serve the chaos API (UNIMPLEMENTED, or the
    reason ``CHAOS_DISABLED`` that chaos.proto names), else ``err``."""
    if err.code == grpc.StatusCode.UNIMPLEMENTED or err.reason == "CHAOS_DISABLED":
        what = f"chaos {action} {job!r}" if job else f"chaos {action}"
        return errors.ChaosDisabled(
            f"{what}: the server runs without the chaos API; start it with --enable-chaos "
            f"(test and staging servers only)",
            code=err.code,
            reason=err.reason,
            metadata=err.metadata,
        )
    return err


def _pause_request(job: str, seconds: float) -> chaos_pb.ChaosPauseRequest:
    return chaos_pb.ChaosPauseRequest(job=job, duration=to_duration(seconds))


def _delay_request(job: str, seconds: float) -> chaos_pb.ChaosDelayRequest:
    return chaos_pb.ChaosDelayRequest(job=job, by=to_duration(seconds))


def _fence_request(job: str, writes: int) -> chaos_pb.ChaosFenceRequest:
    if writes < 1:
        raise ValueError("writes must be at least 1")
    return chaos_pb.ChaosFenceRequest(job=job, writes=writes)


class Chaos:
    """The chaos API over a :class:`~leasehold.Client`'s channel, from
    :meth:`leasehold.Client.chaos`. Thread-safe, as the client. Durations
    are seconds; ``timeout`` defaults to the client's."""

    def __init__(self, stub: chaos_grpc.ChaosStub, call: Callable[[Any, Any, Optional[float]], Any]) -> None:
        self._stub = stub
        self._call = call

    def _run(self, action: str, job: Optional[str], method: Any, request: Any, timeout: Optional[float]) -> ChaosOutcome:
        try:
            r = self._call(method, request, timeout)
        except errors.LeaseholdError as e:
            mapped = chaos_error(action, job, e)
            if mapped is e:
                raise
            raise mapped from None
        return outcome_from_pb(r)

    def expire(self, job: str, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """Ends ``job``'s live grant now, as an expiry would: the holder's
        next renewal raises :class:`~leasehold.LeaseLost` (an elector steps
        down), its writes are :class:`~leasehold.Fenced`, and the first
        waiter is granted the next token at once. The job's history
        records the tenure's end as ``END_CHAOS``. When nobody holds the
        job nothing changes, and the outcome's lease says so."""
        return self._run("expire", job, self._stub.Expire, chaos_pb.ChaosJobRequest(job=job), timeout)

    def pause(self, job: str, seconds: float, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """Pauses ``job``'s holder for ``seconds`` (above 0, at most an
        hour): its renewals are refused (:class:`~leasehold.LeaseLost`) as
        if they came too late, so its grant runs out at its deadline and
        goes to the first waiter; meanwhile :meth:`~leasehold.Client.get_lease`
        still shows it as the holder. Its Acquires on the job are held
        until the pause ends. When nobody holds the job nothing changes."""
        return self._run("pause", job, self._stub.Pause, _pause_request(job, seconds), timeout)

    def delay(self, job: str, seconds: float, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """Delays every answer about ``job`` (acquire, renew, release,
        transfer, get_lease, writes, reads, list_keys, keep-alives) by
        ``seconds`` (above 0, at most 60), until cleared. Calls with a
        ``timeout`` below the delay then raise
        :class:`~leasehold.DeadlineExceeded`."""
        return self._run("delay", job, self._stub.Delay, _delay_request(job, seconds), timeout)

    def fence(self, job: str, writes: int, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """Refuses ``job``'s next ``writes`` fenced writes (1 to 1,000,000:
        ``checked_write``, ``delete`` and each write of a write stream) as
        fenced, whatever their token: they raise
        :class:`~leasehold.Fenced` (a stream's outcome is ``FENCED``)."""
        return self._run("fence", job, self._stub.Fence, _fence_request(job, writes), timeout)

    def transfer(self, job: str, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """Hands ``job``'s lease to its first waiter now, as a forced
        failover (a transfer on the holder's behalf: the waiter is granted
        the holder's token + 1; the history records ``END_TRANSFERRED``).
        Raises :class:`~leasehold.NoSuccessor` when nobody waits (or nobody
        holds the job)."""
        return self._run("transfer", job, self._stub.Transfer, chaos_pb.ChaosJobRequest(job=job), timeout)

    def clear(self, job: Optional[str] = None, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """Clears the chaos in force on ``job`` (a pause, a delay, writes
        still to fence), or on every job when ``job`` is ``None`` (the
        outcome's lease is then ``None``). A grant already ended stays
        ended."""
        return self._run("clear", job, self._stub.Clear, chaos_pb.ChaosClearRequest(job=job or ""), timeout)


class AsyncChaos:
    """The asyncio :class:`Chaos`, from
    :meth:`leasehold.aio.AsyncClient.chaos`: the same methods, awaited."""

    def __init__(
        self, stub: chaos_grpc.ChaosStub, call: Callable[[Any, Any, Optional[float]], Awaitable[Any]]
    ) -> None:
        self._stub = stub
        self._call = call

    async def _run(
        self, action: str, job: Optional[str], method: Any, request: Any, timeout: Optional[float]
    ) -> ChaosOutcome:
        try:
            r = await self._call(method, request, timeout)
        except errors.LeaseholdError as e:
            mapped = chaos_error(action, job, e)
            if mapped is e:
                raise
            raise mapped from None
        return outcome_from_pb(r)

    async def expire(self, job: str, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """As :meth:`Chaos.expire`: ends ``job``'s live grant now."""
        return await self._run("expire", job, self._stub.Expire, chaos_pb.ChaosJobRequest(job=job), timeout)

    async def pause(self, job: str, seconds: float, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """As :meth:`Chaos.pause`: refuses the holder's renewals for ``seconds``."""
        return await self._run("pause", job, self._stub.Pause, _pause_request(job, seconds), timeout)

    async def delay(self, job: str, seconds: float, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """As :meth:`Chaos.delay`: delays every answer about ``job``."""
        return await self._run("delay", job, self._stub.Delay, _delay_request(job, seconds), timeout)

    async def fence(self, job: str, writes: int, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """As :meth:`Chaos.fence`: fences ``job``'s next ``writes`` writes."""
        return await self._run("fence", job, self._stub.Fence, _fence_request(job, writes), timeout)

    async def transfer(self, job: str, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """As :meth:`Chaos.transfer`: hands the lease to the first waiter
        (:class:`~leasehold.NoSuccessor` when nobody waits)."""
        return await self._run("transfer", job, self._stub.Transfer, chaos_pb.ChaosJobRequest(job=job), timeout)

    async def clear(self, job: Optional[str] = None, *, timeout: Optional[float] = None) -> ChaosOutcome:
        """As :meth:`Chaos.clear`: clears ``job``'s chaos, or every job's."""
        return await self._run("clear", job, self._stub.Clear, chaos_pb.ChaosClearRequest(job=job or ""), timeout)
