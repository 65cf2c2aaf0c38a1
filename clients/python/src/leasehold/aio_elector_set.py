"""The asyncio :class:`AsyncElectorSet` (``leasehold.aio.AsyncElectorSet``):
:class:`leasehold.ElectorSet` on one event loop, with a task per job's
campaign and one renewer task that renews every held lease over one
``KeepAlive`` stream. The rules are the ElectorSet's (see
:mod:`leasehold.elector_set`)::

    async with AsyncElectorSet(client, "sync-worker", ttl=10,
                               on_elected=..., on_lost=...) as fleet:
        fleet.campaign("sync_eu", "sync_us", "sync_ap")
        ...
    # leaving the block resigns: releases every lease held
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, Dict, List, Optional, Set, Tuple, Union

import grpc
import grpc.aio

from . import errors
from ._retry import Backoff, Warnings
from ._tasks import retrieved
from ._wire import REFUSALS, campaign_timing, split_writes, stream_closed_error
from .types import check_elector_args, elector_holder, to_duration
from .v1 import leasehold_pb2 as pb
from .v1 import leasehold_pb2_grpc as pb_grpc

if TYPE_CHECKING:  # pragma: no cover
    from .aio import AsyncClient

log = logging.getLogger("leasehold.elector_set")

#: ``on_elected(job, token)`` / ``on_lost(job, token)``: functions or
#: coroutine functions.
AsyncJobCallback = Callable[[str, int], Union[None, Awaitable[None]]]


@dataclass
class _Held:
    token: int
    deadline: float
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class _AsyncKeepAlive:
    """One open ``KeepAlive`` stream on ``grpc.aio``: :meth:`renew` writes a
    batch (messages of at most 1000 renewals) and reads one result per
    renewal, in order. Any error breaks it: close it and open another."""

    def __init__(self, stub: pb_grpc.LeasesStub, bind_to_stream: bool) -> None:
        self._bind = bind_to_stream
        self._call = stub.KeepAlive()
        self._next_id = 0

    async def renew(self, renewals: List[pb.KeepAliveRenewal]) -> List[pb.KeepAliveResult]:
        try:
            sent: List[Tuple[int, int]] = []
            for m in split_writes(renewals):
                self._next_id += 1
                await self._call.write(pb.KeepAliveRequest(id=self._next_id, renewals=m, bind_to_stream=self._bind))
                sent.append((self._next_id, len(m)))
            out: List[pb.KeepAliveResult] = []
            for request_id, count in sent:
                r = await self._call.read()
                if r is grpc.aio.EOF:
                    raise stream_closed_error("keep-alive stream ended")
                if r.id != request_id or len(r.results) != count:
                    raise errors.LeaseholdError(
                        f"keep-alive response {r.id} with {len(r.results)} results does not answer "
                        f"request {request_id} with {count}",
                        code=grpc.StatusCode.INTERNAL,
                    )
                out.extend(r.results)
            return out
        except grpc.aio.AioRpcError as e:
            raise errors.stream_error(e) from None
        except asyncio.InvalidStateError:  # the call has ended
            raise stream_closed_error("keep-alive stream ended") from None

    def close(self) -> None:
        self._call.cancel()


class AsyncElectorSet:
    """The asyncio :class:`leasehold.ElectorSet`: campaigns for several jobs
    as one holder, ``name@<uuid>``, and renews every lease it holds over
    one ``KeepAlive`` stream; each job steps down by its own deadline.
    Use it from one event loop: :meth:`campaign` starts tasks on the
    running loop."""

    def __init__(
        self,
        client: "AsyncClient",
        name: str,
        ttl: float,
        *,
        on_elected: Optional[AsyncJobCallback] = None,
        on_lost: Optional[AsyncJobCallback] = None,
        bind_to_stream: bool = False,
        preferred: bool = False,
    ) -> None:
        check_elector_args("-", name, ttl)
        self._client = client
        self._name = name
        self._ttl = float(ttl)
        self._holder = elector_holder(name)
        self._bind = bool(bind_to_stream)
        self._preferred = bool(preferred)
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._held: Dict[str, _Held] = {}
        self._errors: Dict[str, errors.LeaseholdError] = {}
        self._campaigns: Dict[str, asyncio.Task] = {}
        self._callback_tasks: Set[asyncio.Task] = set()
        self._stream: Optional[_AsyncKeepAlive] = None
        self._renewer: Optional[asyncio.Task] = None
        self._stop: Optional[asyncio.Event] = None
        self._wake: Optional[asyncio.Event] = None
        self._stopped = False
        self._renewals_sent = 0
        self._warnings = Warnings(log)

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def renewals_sent(self) -> int:
        """How many renewals the set has sent over its KeepAlive streams."""
        return self._renewals_sent

    @property
    def jobs(self) -> List[str]:
        return list(self._campaigns)

    def campaign(self, *jobs: str) -> "AsyncElectorSet":
        """Starts campaigning for each of ``jobs``, on the running loop (a
        job already campaigned for is left alone)."""
        for job in jobs:
            check_elector_args(job, self._name, self._ttl)
        if self._stopped:
            raise RuntimeError("the AsyncElectorSet was resigned")
        loop = asyncio.get_running_loop()
        if self._renewer is None:
            self._stop = asyncio.Event()
            self._wake = asyncio.Event()
            self._renewer = loop.create_task(self._renew_loop(), name="leasehold-elector-set")
            self._renewer.add_done_callback(self._renewer_ended)
        for job in jobs:
            if job not in self._campaigns:
                task = loop.create_task(self._campaign(job), name=f"leasehold-campaign-{job}")
                task.add_done_callback(lambda t, job=job: self._campaign_ended(job, t))
                self._campaigns[job] = task
        return self

    def token(self, job: str) -> Optional[int]:
        """As :meth:`leasehold.ElectorSet.token`."""
        h = self._held.get(job)
        if h is not None and time.monotonic() < h.deadline:
            return h.token
        return None

    def is_leader(self, job: str) -> bool:
        return self.token(job) is not None

    def deadline(self, job: str) -> Optional[float]:
        h = self._held.get(job)
        return None if h is None else h.deadline

    def leading(self) -> Dict[str, int]:
        now = time.monotonic()
        return {j: h.token for j, h in sorted(self._held.items()) if now < h.deadline}

    def error(self, job: str) -> Optional[errors.LeaseholdError]:
        return self._errors.get(job)

    async def wait_leading(self, jobs: Optional[List[str]] = None, timeout: Optional[float] = None) -> bool:
        """Waits until we lead every one of ``jobs`` (default: all)."""
        want = list(self.jobs if jobs is None else jobs)
        end = None if timeout is None else time.monotonic() + timeout
        while not all(self.token(j) is not None for j in want):
            if self._stopped or (end is not None and time.monotonic() >= end):
                return False
            await asyncio.sleep(0.02)
        return True

    async def resign(self) -> None:
        """As :meth:`leasehold.ElectorSet.resign`: stops every campaign and
        the renewer, releases every lease held (each bounded by its own
        deadline, at least 200 ms), reports each as lost, and waits for the
        callbacks."""
        self._stopped = True
        if self._stop is not None:
            self._stop.set()
        tasks = ([self._renewer] if self._renewer is not None else []) + list(self._campaigns.values())
        if self._renewer is not None:
            self._renewer.cancel()
        self._drop_stream()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        held = list(self._held.items())
        self._held.clear()
        releases = []
        for job, h in held:
            h.ended.set()
            self._callback(self._on_lost, job, h.token)
            releases.append(self._release(job, h.token, max(h.deadline, time.monotonic() + 0.2)))
        if releases:
            await asyncio.gather(*releases, return_exceptions=True)
        if self._callback_tasks:
            await asyncio.gather(*self._callback_tasks, return_exceptions=True)

    async def __aenter__(self) -> "AsyncElectorSet":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.resign()

    # Events

    def _callback(self, cb: Optional[AsyncJobCallback], job: str, token: int) -> None:
        if cb is None:
            return
        try:
            r = cb(job, token)
        except Exception:
            log.exception("elector set callback failed")
            return
        if inspect.isawaitable(r):
            t = asyncio.ensure_future(r)
            self._callback_tasks.add(t)
            t.add_done_callback(self._callback_tasks.discard)

    def _step_down(self, job: str, token: int, why: str) -> None:
        h = self._held.get(job)
        if h is None or h.token != token:
            return
        del self._held[job]
        h.ended.set()
        log.warning("%s: stepped down from token %d: %s", job, token, why)
        self._callback(self._on_lost, job, token)

    # A job's campaign

    async def _stoppable(self, aw: Awaitable, until: Optional[float] = None):
        """Awaits ``aw`` as a task of its own; raises _Stopped if the set
        stops first (``aw`` is cancelled), asyncio.TimeoutError at
        ``until``.

        A cancellation of the task calling it always propagates, and
        cancels ``aw`` too. ``await task`` after ``task.cancel()`` cannot
        tell the two cancellations apart, and Python 3.11's
        ``asyncio.wait_for`` returns the inner result instead of raising
        when both end in the same instant: either way the caller's
        cancellation was lost, and the renewer ran on after ``resign``,
        which then waited for it forever. ``aw`` itself ending cancelled
        (a gRPC call cancelled locally ends with ``CancelledError``) is a
        LeaseholdError (CANCELLED) here, retried as any failure, never a
        cancellation that silently ends the caller."""
        assert self._stop is not None
        task = asyncio.ensure_future(aw)
        task.add_done_callback(retrieved)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            timeout = None if until is None else max(until - time.monotonic(), 0)
            done, _ = await asyncio.wait({task, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()  # the set stopped, the time ran out, or we were cancelled
        if task in done:
            if task.cancelled():
                raise errors.LeaseholdError("the call was cancelled", code=grpc.StatusCode.CANCELLED)
            return task.result()
        # Its end (a cancelled Acquire gives back a grant it may have had);
        # asyncio.wait, unlike `await task`, raises our own cancellation.
        await asyncio.wait({task})  # cancelled, or failed or answered meanwhile: either way gone
        if self._stop.is_set():
            raise _Stopped()
        raise asyncio.TimeoutError()

    async def _campaign(self, job: str) -> None:
        """Campaigns for ``job`` until the set stops or a refusal. A failure
        no one foresaw is logged, steps down, and the campaign starts again
        after a backoff: never a job the set silently stops campaigning
        for."""
        backoff = Backoff.campaign(self._ttl)
        while not self._stopped:
            try:
                await self._campaign_rounds(job)
                return
            except Exception:  # never die silently: step down, campaign again
                log.exception("campaign for %s failed, campaigning again", job)
                h = self._held.get(job)
                if h is not None:
                    self._step_down(job, h.token, "its campaign failed")
                try:
                    await self._stoppable(asyncio.sleep(backoff.next()))
                except _Stopped:
                    return

    async def _campaign_rounds(self, job: str) -> None:
        campaign_wait, _ = campaign_timing(self._ttl)
        backoff = Backoff.campaign(self._ttl)
        warnings = Warnings(log)
        while not self._stopped:
            sent = time.monotonic()
            limit = campaign_wait + self._ttl
            try:
                a = await self._stoppable(
                    self._client.acquire(
                        job, self._holder, self._ttl, campaign_wait, timeout=limit,
                        bind_to_stream=self._bind, preferred=self._preferred,
                    ),
                    sent + limit,
                )
            except _Stopped:
                return  # the cancelled Acquire gives back a grant it may have had
            except asyncio.TimeoutError:
                warnings.warn("campaign for %s: acquire timed out", job)
                continue
            except REFUSALS as e:
                log.error("campaign for %s refused, not campaigning again: %s", job, e)
                self._errors[job] = e
                return
            except errors.LeaseholdError as e:
                warnings.warn("campaign for %s: acquire failed, retrying: %s", job, e)
                try:
                    await self._stoppable(asyncio.sleep(backoff.next()))
                except _Stopped:
                    return
                continue
            backoff.reset()
            if not a.acquired:
                continue
            token = a.lease.token
            try:
                anchor = await self._anchor(job, token, sent)
            except _Stopped:
                anchor = None
            if self._stopped:
                await self._release(job, token, time.monotonic() + 0.2 if anchor is None else anchor + self._ttl)
                return
            if anchor is None or anchor + self._ttl <= time.monotonic():
                continue
            h = self._held[job] = _Held(token, anchor + self._ttl)
            log.info("%s: elected with token %d", job, token)
            self._callback(self._on_elected, job, token)
            assert self._wake is not None
            self._wake.set()  # the renewer counts it in
            try:
                await self._stoppable(h.ended.wait())
            except _Stopped:
                return

    async def _anchor(self, job: str, token: int, sent: float) -> Optional[float]:
        if time.monotonic() < sent + self._ttl / 10:
            return sent
        sent = time.monotonic()
        try:
            await self._stoppable(self._client.renew(job, self._holder, token, self._ttl, timeout=self._ttl / 2))
            return sent
        except errors.LeaseholdError as e:
            log.warning("%s: granted token %d, but the confirming renew failed: %s", job, token, e)
            return None

    async def _release(self, job: str, token: int, until: float) -> None:
        try:
            await self._client.release(job, self._holder, token, timeout=max(until - time.monotonic(), 0.001))
        except errors.LeaseholdError as e:
            log.warning("%s: release of token %d on resign failed: %s", job, token, e)

    # The renewer

    async def _renew_loop(self) -> None:
        """Renews every held lease each ttl/3, and steps each job down by
        its own deadline. Ends when the set stops (it waits through
        _stoppable, and checks, so even a cancellation lost somewhere
        cannot keep it running after resign); a failure no one foresaw is
        logged and the loop goes on after a backoff, deadlines kept."""
        assert self._wake is not None
        every = self._ttl / 3
        retry = Backoff.renew(self._ttl)
        nxt = time.monotonic() + every
        try:
            while not self._stopped:
                try:
                    nxt = await self._renew_round(nxt, every, retry)
                except _Stopped:
                    return
                except Exception:  # never die silently: deadlines kept, renewals retried
                    log.exception("the elector set's renewer failed, renewing again")
                    self._drop_stream()
                    nxt = time.monotonic() + retry.next()
        finally:
            self._drop_stream()

    async def _renew_round(self, nxt: float, every: float, retry: Backoff) -> float:
        """Waits until the next renewal or deadline, steps down each job
        past its deadline, and renews at ``nxt``; when to renew next."""
        assert self._wake is not None
        # Cleared before the deadlines are read: a job elected from here on
        # sets it again, and the wait below ends at once.
        self._wake.clear()
        wake = min([nxt] + [h.deadline for h in self._held.values()])
        if wake > time.monotonic():
            try:
                await self._stoppable(self._wake.wait(), wake)
            except asyncio.TimeoutError:
                pass
        # Our own deadlines first: no answer can extend them.
        now = time.monotonic()
        for job, h in list(self._held.items()):
            if h.deadline <= now:
                self._step_down(job, h.token, "its deadline passed without a renewal")
        if now < nxt:
            return nxt
        batch = [(j, h.token) for j, h in self._held.items()]
        if not batch:
            return now + every
        earliest = min(h.deadline for h in self._held.values())
        sent = time.monotonic()
        try:
            if self._stream is None:
                self._stream = _AsyncKeepAlive(self._client._leases, self._bind)
            self._renewals_sent += len(batch)
            ttl = to_duration(self._ttl)
            renewals = [pb.KeepAliveRenewal(job=j, holder=self._holder, token=t, ttl=ttl) for j, t in batch]
            results = await self._stoppable(self._stream.renew(renewals), max(earliest, sent + 0.01))
        except (errors.LeaseholdError, asyncio.TimeoutError) as e:
            self._warnings.warn("keep-alive failed, retrying on a new stream: %s", str(e) or "timed out")
            self._drop_stream()
            return time.monotonic() + retry.next_before(earliest)
        for (job, token), r in zip(batch, results):
            if r.outcome == pb.KeepAliveResult.OUTCOME_RENEWED:
                h = self._held.get(job)
                if h is not None and h.token == token:
                    h.deadline = sent + self._ttl
            else:
                name = pb.KeepAliveResult.Outcome.Name(r.outcome)
                self._step_down(job, token, f"renewal refused ({name}): {r.message}")
        retry.reset()
        return sent + every

    def _campaign_ended(self, job: str, task: asyncio.Task) -> None:
        """A campaign's task ended: said out loud unless the set stopped or
        the job was refused (logged, and :meth:`error` has it)."""
        if self._stopped or job in self._errors:
            return
        why = "cancelled" if task.cancelled() else repr(task.exception() or "returned")
        log.error("campaign for %s ended while the set runs (%s): not campaigning for it", job, why)
        self._errors[job] = errors.LeaseholdError(
            f"the campaign for {job} ended: {why}", code=grpc.StatusCode.CANCELLED
        )

    def _renewer_ended(self, task: asyncio.Task) -> None:
        if self._stopped:
            return
        why = "cancelled" if task.cancelled() else repr(task.exception() or "returned")
        log.error("the elector set's renewer ended while the set runs (%s): each lease runs to its deadline", why)

    def _drop_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()


class _Stopped(Exception):
    pass
