"""The asyncio :class:`AsyncShardMember` (``leasehold.aio.AsyncShardMember``),
from :meth:`leasehold.aio.AsyncClient.join_shards`: a member of a shard
group (``Shards.Join``).

The server spreads the group's N shards over its live members, each owning
floor(N/M) or ceil(N/M), and streams this member's part, which the member
yields as events: :class:`~leasehold.ShardAssigned` with each shard's
fencing token, :class:`~leasehold.ShardRevoked` when a shard is to move
(stop its work, then :meth:`AsyncShardMember.release` it),
:class:`~leasehold.ShardLost` when a holding ended without a revoke.
:meth:`AsyncShardMember.run` does the bookkeeping: a task per owned shard,
cancelled and awaited **before** a revoke is acknowledged::

    async def consume(shard):            # a ShardAssigned: shard, token, job
        while True:
            batch = await queue.poll(partition=shard.shard)
            await client.checked_write(shard.job, shard.token, b"offset", batch.end)

    async with client.join_shards("orders", "worker", shards=16, ttl=10) as member:
        await member.run(consume)

The member renews its holdings every TTL/3 from a task of its own (every
message it sends renews them). If the stream breaks (the server restarts,
the connection is cut), every shard is reported lost at once, so that no
work runs unowned, and the member joins again under the same identity,
100 ms apart doubling to 1 s: the shards still its own are assigned again,
with their tokens. Any other end (``LeaseLost``: another stream joined as
this member; ``PermissionDenied``...) ends the membership, and the
iteration raises it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Union

import grpc
import grpc.aio

from . import errors
from ._shards import LEAVE_WAIT, REJOIN_FIRST, REJOIN_MAX, Ownership, ended_error, join_request, joined_shards
from ._tasks import retrieved
from .types import ShardAssigned, ShardEvent, ShardRevoked, check_join_args, elector_holder
from .v1 import leasehold_pb2 as pb

if TYPE_CHECKING:  # pragma: no cover
    from .aio import AsyncClient

log = logging.getLogger("leasehold.shards")

#: ``work(shard)`` for :meth:`AsyncShardMember.run`: a coroutine function
#: of the :class:`~leasehold.ShardAssigned`.
AsyncShardWork = Callable[[ShardAssigned], Awaitable[None]]
#: ``on_event(event)`` for :meth:`AsyncShardMember.run`: a function or a
#: coroutine function.
AsyncShardEventCallback = Callable[[ShardEvent], Union[None, Awaitable[None]]]

_END = object()  # in the events queue: the membership ended
_LEAVE = object()  # in the acks queue: half-close the stream


async def _within(aw: Awaitable[Any], timeout: float, put_back: Optional[Callable[[Any], None]] = None) -> Any:
    """Awaits ``aw`` as a task of its own for up to ``timeout`` seconds;
    raises asyncio.TimeoutError then (``aw`` cancelled).

    Not ``asyncio.wait_for``: on Python 3.11 it returns the inner result
    instead of raising when the caller is cancelled in the instant the
    inner await finishes, so a loop around it ran on after its cancel. Here
    a cancellation of the caller always propagates: ``aw`` is cancelled
    with it, or, when it had finished in that instant with a result,
    ``put_back(result)`` is called (an item a queue's ``get`` had just
    taken goes back in the queue; a ``get`` cancelled before it returns
    leaves its item there)."""
    task = asyncio.ensure_future(aw)
    task.add_done_callback(retrieved)
    try:
        await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        if not task.done():
            task.cancel()
        elif put_back is not None and not task.cancelled() and task.exception() is None:
            put_back(task.result())
        raise
    if task.done():
        return task.result()
    task.cancel()
    raise asyncio.TimeoutError()


async def _stream_error(call: grpc.aio.StreamStreamCall, e: Optional[BaseException]) -> errors.LeaseholdError:
    """The typed error of a Join call that failed with ``e``, or (``e``
    ``None`` or not a status) that has ended: its final status, when it has
    one."""
    if isinstance(e, grpc.aio.AioRpcError) and e.code() != grpc.StatusCode.INTERNAL:
        return errors.stream_error(e)
    # A write that races the server ending the call fails on its own (a bare
    # INTERNAL, or InvalidStateError) before the call's status has arrived:
    # that status says what happened.
    try:
        code = await asyncio.wait_for(call.code(), timeout=1.0)
        if code is not None and code != grpc.StatusCode.OK:
            return errors.from_status(code, await call.details(), await call.trailing_metadata())
    except (asyncio.TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
        pass
    if isinstance(e, grpc.aio.AioRpcError):
        return errors.stream_error(e)
    return ended_error()


class AsyncShardMember:
    """A member of a shard group, on one event loop (see the module docs).
    Made by :meth:`AsyncClient.join_shards <leasehold.aio.AsyncClient.join_shards>`;
    it joins when awaited, on entering ``async with``, or at the first
    event::

        member = await client.join_shards("orders", "worker", shards=16, ttl=10)
        async for event in member:
            if isinstance(event, leasehold.ShardAssigned):
                start(event.shard, event.job, event.token)
            elif isinstance(event, leasehold.ShardRevoked):
                await stop(event.shard)
                member.release(event.shard)     # the acknowledgement
            elif isinstance(event, leasehold.ShardLost):
                await stop(event.shard)

    Joining raises the server's refusal: :class:`~leasehold.InvalidArgument`
    naming ``shards`` when the group has another count (or naming the field
    at fault; an empty group or name, or a count that is not 1 to 1024, is
    refused before anything is sent), ``Unavailable`` when no server
    answers. The iteration ends once the member left (:meth:`aclose`), and
    raises the error that ended the membership otherwise.
    """

    def __init__(
        self,
        client: "AsyncClient",
        group: str,
        name: str,
        shards: int,
        *,
        ttl: float = 10.0,
        revoke_timeout: Optional[float] = None,
    ) -> None:
        check_join_args(group, name, shards, ttl, revoke_timeout)
        self._client = client
        self._group = group
        self._count = shards
        self._ttl = float(ttl)
        self._member = elector_holder(name)
        self._first = join_request(group, self._member, shards, self._ttl, revoke_timeout)
        self._ownership = Ownership()
        self._events: "asyncio.Queue[object]" = asyncio.Queue()
        self._acks: "asyncio.Queue[object]" = asyncio.Queue()
        self._join_lock = asyncio.Lock()
        self._session: Optional["asyncio.Task[None]"] = None
        self._leaving: Optional[asyncio.Event] = None
        self._left = False
        self._ended = False
        self._error: Optional[errors.LeaseholdError] = None
        # run()'s tasks, one per owned shard: the leave stops them first.
        self._work: Dict[int, "asyncio.Task[None]"] = {}

    @property
    def member(self) -> str:
        """This member's identity, ``name@uuid`` (a UUID made for it): the
        holder of its shards' leases. It joins again under it after a
        broken stream."""
        return self._member

    @property
    def group(self) -> str:
        return self._group

    @property
    def shards(self) -> int:
        """The group's count of shards."""
        return self._count

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def error(self) -> Optional[errors.LeaseholdError]:
        """The error that ended the membership, if one did."""
        return self._error

    # Joining and leaving

    async def join(self) -> "AsyncShardMember":
        """Joins the group (once; later calls return at once). Raises the
        typed error of a refusal."""
        async with self._join_lock:
            if self._session is not None:
                return self
            if self._left:
                raise RuntimeError("the shard member left")
            call = await self._open()
            self._leaving = asyncio.Event()
            self._session = asyncio.get_running_loop().create_task(
                self._run_session(call), name=f"leasehold-shards-{self._group}"
            )
        return self

    def __await__(self):
        return self.join().__await__()

    async def __aenter__(self) -> "AsyncShardMember":
        return await self.join()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Leaves the group: stops :meth:`run`'s tasks (cancelled and
        awaited), then half-closes the stream, and the server hands every
        shard to the members waiting for it at once. Waits (up to 5 s) for
        the server to end the stream. The iteration then ends. Does not
        raise."""
        self._left = True
        await self._stop_work()
        async with self._join_lock:  # a join under way ends first
            session = self._session
        if session is None:
            self._events.put_nowait(_END)
            return
        assert self._leaving is not None
        self._leaving.set()
        self._acks.put_nowait(_LEAVE)
        await asyncio.wait({session}, timeout=LEAVE_WAIT + 1.0)
        if not session.done():
            session.cancel()
            await asyncio.wait({session})

    async def leave(self) -> None:
        """The same as :meth:`aclose`."""
        await self.aclose()

    def release(self, shard: int) -> None:
        """Acknowledges the revoke of ``shard``: its work has stopped, and
        it may move. Sent at once (by the member's task); a shard not being
        revoked is ignored by the server."""
        if self._session is not None and not self._session.done():
            self._acks.put_nowait(shard)

    # The events

    def __aiter__(self) -> "AsyncShardMember":
        return self

    async def __anext__(self) -> ShardEvent:
        if self._session is None and not self._left:
            await self.join()
        if self._ended:
            raise StopAsyncIteration
        item = await self._events.get()
        if item is _END:
            self._ended = True
            raise StopAsyncIteration
        if isinstance(item, errors.LeaseholdError):
            self._ended = True
            raise item
        return item  # type: ignore[return-value]

    # The run helper

    async def run(self, work: AsyncShardWork, *, on_event: Optional[AsyncShardEventCallback] = None) -> None:
        """Runs ``work(shard)`` (``shard`` the
        :class:`~leasehold.ShardAssigned`: its ``shard``, ``job`` and
        ``token``) as a task for each shard while this member owns it. On a
        revoke the shard's task is cancelled (``task.cancel()``) and awaited
        **before** the revoke is acknowledged, so that no shard's work runs
        on once another member may own it; on a loss it is cancelled and
        awaited too. A task that ends on its own (or raises, which is
        logged) leaves its shard owned until it moves.

        ``on_event(event)`` (a function or a coroutine function, awaited),
        if given, hears each event once it is handled: an ASSIGNED once its
        task is started, a REVOKED once its task has ended and just before
        the acknowledgement, a LOST once its task has ended. Its errors are
        logged.

        Returns once the member left (:meth:`aclose` from another task);
        raises the error that ended the membership. Cancelling ``run``
        cancels every task and leaves. Joins first if not joined. Iterate
        or run, not both."""
        await self.join()
        try:
            async for ev in self:
                await self._stop_shard(ev.shard)
                if isinstance(ev, ShardAssigned):
                    if self._left:
                        continue
                    self._start_shard(work, ev)
                await self._tell_user(on_event, ev)
                if isinstance(ev, ShardRevoked):
                    self.release(ev.shard)  # only now: its work has ended
        finally:
            await self.aclose()

    async def _tell_user(self, on_event: Optional[AsyncShardEventCallback], ev: ShardEvent) -> None:
        if on_event is None:
            return
        try:
            r = on_event(ev)
            if inspect.isawaitable(r):
                await r
        except Exception:
            log.exception("on_event of the shard member of %s failed", self._group)

    def _start_shard(self, work: AsyncShardWork, shard: ShardAssigned) -> None:
        task = asyncio.get_running_loop().create_task(work(shard), name=f"leasehold-shard-{shard.job}")

        def ended(t: "asyncio.Task[None]") -> None:
            if not t.cancelled() and t.exception() is not None:
                log.error("the work of shard %s (token %d) failed", shard.job, shard.token, exc_info=t.exception())

        task.add_done_callback(ended)
        self._work[shard.shard] = task

    async def _stop_shard(self, shard: int) -> None:
        """Cancels the task of ``shard`` and waits until it has ended."""
        task = self._work.pop(shard, None)
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def _stop_work(self) -> None:
        tasks = list(self._work.values())
        self._work.clear()
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # The member's task

    async def _open(self) -> grpc.aio.StreamStreamCall:
        """Opens a Join stream: sends the first message and reads JOINED.
        Raises the typed error of a refusal."""
        call = self._client._shards.Join()
        try:
            await call.write(self._first)
            # Not asyncio.wait_for: a cancel of a rejoin lost as the answer
            # arrives would serve a new stream after the cancel.
            m = await _within(call.read(), self._client.timeout)
            if m is grpc.aio.EOF:
                raise await _stream_error(call, None)
            self._count = joined_shards(m)
            return call
        except asyncio.TimeoutError:
            call.cancel()
            raise errors.DeadlineExceeded(
                f"no answer to the Join within {self._client.timeout:g}s", code=grpc.StatusCode.DEADLINE_EXCEEDED
            ) from None
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
            err = await _stream_error(call, e)
            call.cancel()
            raise err from None
        except BaseException:
            call.cancel()
            raise

    def _tell(self, events: List[object]) -> None:
        for ev in events:
            self._events.put_nowait(ev)

    async def _run_session(self, call: grpc.aio.StreamStreamCall) -> None:
        assert self._leaving is not None
        current: Optional[grpc.aio.StreamStreamCall] = call
        try:
            while current is not None:
                err = await self._serve(current)
                current.cancel()
                current = None
                if err is None or self._leaving.is_set():
                    return
                # Stop every shard's work: it may have moved while the
                # stream was down.
                self._tell(list(self._ownership.lose_all()))
                if not err.retryable:
                    self._fail(err)
                    return
                log.warning("%s: the Join stream broke, joining again as %s: %s", self._group, self._member, err)
                current = await self._rejoin()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # never die silently
            log.exception("the shard member of %s failed", self._group)
            self._tell(list(self._ownership.lose_all()))
            self._fail(errors.LeaseholdError(f"the shard member failed: {e!r}"))
        finally:
            if current is not None:
                current.cancel()
            self._events.put_nowait(_END)

    def _fail(self, err: errors.LeaseholdError) -> None:
        log.error("%s: the membership of %s ended: %s", self._group, self._member, err)
        self._error = err
        self._events.put_nowait(err)

    async def _rejoin(self) -> Optional[grpc.aio.StreamStreamCall]:
        """Joins again under the same identity, 100 ms apart doubling to
        1 s, until it works or the member leaves (``None``; also after an
        error that is not worth retrying, which it reports)."""
        assert self._leaving is not None
        backoff = REJOIN_FIRST
        while True:
            try:
                await asyncio.wait_for(self._leaving.wait(), backoff)
                return None
            except asyncio.TimeoutError:
                pass
            backoff = min(backoff * 2, REJOIN_MAX)
            try:
                return await self._open()
            except errors.LeaseholdError as e:
                if not e.retryable:
                    self._fail(e)
                    return None

    async def _serve(self, call: grpc.aio.StreamStreamCall) -> Optional[errors.LeaseholdError]:
        """Serves one stream until it breaks (its error) or the member
        leaves (``None``)."""
        assert self._leaving is not None
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._read(call), name=f"leasehold-shards-{self._group}-read")
        writer = loop.create_task(self._write(call), name=f"leasehold-shards-{self._group}-write")
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if self._leaving.is_set() or (writer.done() and writer.result() is None):
                # Half-closed: the server frees our shards and ends the
                # stream.
                await asyncio.wait({reader, writer}, timeout=LEAVE_WAIT)
                return None
            return reader.result() if reader.done() else writer.result()
        finally:
            for t in (reader, writer):
                if not t.done():
                    t.cancel()
            await asyncio.wait({reader, writer})

    async def _read(self, call: grpc.aio.StreamStreamCall) -> errors.LeaseholdError:
        try:
            while True:
                m = await call.read()
                if m is grpc.aio.EOF:
                    return await _stream_error(call, None)
                ev = self._ownership.told(m)
                if ev is not None:
                    self._events.put_nowait(ev)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
            return await _stream_error(call, e)

    async def _write(self, call: grpc.aio.StreamStreamCall) -> Optional[errors.LeaseholdError]:
        """Sends the heartbeats (every TTL/3) and the acknowledgements; at
        the leave, half-closes the stream (``None``). Cancelled (by _serve,
        once the stream ended or the session is cancelled), it ends at once,
        and an acknowledgement taken in that instant stays queued: it waits
        through _within, never asyncio.wait_for."""
        every = self._ttl / 3
        beat = time.monotonic() + every
        try:
            while True:
                try:
                    item = await _within(self._acks.get(), max(beat - time.monotonic(), 0), self._acks.put_nowait)
                except asyncio.TimeoutError:
                    await call.write(pb.JoinRequest())  # a heartbeat: renews every holding
                    beat = time.monotonic() + every
                    continue
                items = [item]
                while not self._acks.empty():
                    items.append(self._acks.get_nowait())
                released = [k for k in items if isinstance(k, int)]
                if released:
                    self._ownership.released(released)
                    await call.write(pb.JoinRequest(released=released))  # renews too
                    beat = time.monotonic() + every
                if any(k is _LEAVE for k in items):
                    await call.done_writing()
                    return None
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
            return await _stream_error(call, e)
