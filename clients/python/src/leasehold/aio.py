"""asyncio variants: :class:`AsyncClient` (and its
:class:`AsyncWriteStream`, :class:`~leasehold.AsyncLock` and
:class:`AsyncShardMember`), :class:`AsyncElector` and
:class:`AsyncElectorSet`.

They behave exactly as :class:`~leasehold.Client` and
:class:`~leasehold.Elector`, on ``grpc.aio`` and one asyncio task::

    async with AsyncClient("127.0.0.1:50051") as client:
        async with AsyncElector(client, "bridge_health", "bridge", ttl=10) as elector:
            token = await elector.wait_elected()
            await client.checked_write("bridge_health", token, b"status", b"ok")
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import weakref
from collections import deque
from typing import AsyncIterator, Awaitable, Callable, Deque, Iterable, List, Optional, Tuple, Union

import grpc
import grpc.aio

from . import errors
from ._giveback import Calls
from ._wire import (
    Pem,
    channel_security,
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT,
    GIVE_BACK_AFTER,
    _PAGE_SIZE,
    acquire_request,
    key_from_pb,
    release_request,
    renew_request,
    transfer_request,
    split_writes,
    stream_closed_error,
    stream_timeout_error,
    value_from_pb,
    write_outcomes,
    write_request,
    REFUSALS,
    campaign_timing,
    leader_callback,
)
from ._retry import Backoff, Warnings
from .chaos import AsyncChaos
from .lock import DEFAULT_LOCK_NAME, AsyncLock
from .proof import KeySet
from .types import (
    Acquired,
    Bytes,
    HistoryPage,
    KeyInfo,
    Lease,
    LeaseEvent,
    Renewed,
    ShardGroup,
    Tenure,
    StreamWrite,
    Value,
    Waiters,
    WriteOutcome,
    as_bytes,
    check_elector_args,
    check_slots,
    check_value,
    elector_holder,
    event_from_pb,
    group_from_pb,
    history_from_pb,
    lease_from_pb,
    waiters_from_pb,
)
from .v1 import chaos_pb2_grpc as chaos_grpc
from .v1 import leasehold_pb2 as pb
from .v1 import leasehold_pb2_grpc as pb_grpc

log = logging.getLogger("leasehold.elector")

AsyncTokenCallback = Callable[[int], Union[None, Awaitable[None]]]
#: ``on_new_leader(holder, token, value)``, or ``(holder, token)`` as
#: before leases had values: a function or a coroutine function.
AsyncLeaderCallback = Union[
    Callable[[str, int, bytes], Union[None, Awaitable[None]]],
    Callable[[str, int], Union[None, Awaitable[None]]],
]


def _retrieve(fut: "asyncio.Future[List[WriteOutcome]]") -> None:
    # An answer nobody awaits any more (its writer was cancelled) is not an
    # "exception was never retrieved".
    if not fut.cancelled():
        fut.exception()


class _AsyncStreamState:
    """What an :class:`AsyncWriteStream` shares with its reader task. It
    holds no reference to the AsyncWriteStream, so an abandoned stream is
    collected and its finalizer cancels the call."""

    def __init__(self, call: grpc.aio.StreamStreamCall, loop: asyncio.AbstractEventLoop) -> None:
        self.call = call
        self.loop = loop
        self.send_lock = asyncio.Lock()
        self.pending: Deque[Tuple[int, int, "asyncio.Future[List[WriteOutcome]]"]] = deque()
        self.next_id = 0
        self.closing = False
        self.error: Optional[errors.LeaseholdError] = None

    def fail(self, err: errors.LeaseholdError, *also: "asyncio.Future[List[WriteOutcome]]") -> None:
        """Breaks the stream with ``err`` (unless already broken): every
        pending write, those in ``also`` and every later one raise it.
        Cancels the call."""
        if self.error is None:
            self.error = err
        failed = list(also) + [f for _, _, f in self.pending]
        self.pending.clear()
        for f in failed:
            if not f.done():
                f.set_exception(self.error)
        self.call.cancel()

    async def read(self) -> None:
        """The reader task: answers the pending writes in order, until the
        stream ends."""
        try:
            while True:
                resp = await self.call.read()
                if resp is grpc.aio.EOF:
                    break
                if self.error is not None:
                    return
                if not self.pending:
                    self.fail(
                        errors.LeaseholdError(
                            f"write response {resp.id} answers no request", code=grpc.StatusCode.INTERNAL
                        )
                    )
                    return
                request_id, count, fut = self.pending.popleft()
                try:
                    outcomes = write_outcomes(request_id, count, resp)
                except errors.LeaseholdError as e:
                    self.fail(e, fut)
                    return
                if not fut.done():
                    fut.set_result(outcomes)
            # Ended with OK: after close(), once every write was answered.
            self.fail(stream_closed_error("write stream closed" if self.closing else "write stream ended"))
        except grpc.aio.AioRpcError as e:
            self.fail(errors.stream_error(e))
        except asyncio.CancelledError:
            # The call was cancelled (by fail(), the channel's close, or the
            # loop shutting down): end quietly.
            self.fail(stream_closed_error("write stream cancelled"))
        except BaseException as e:  # never leave writers waiting
            self.fail(errors.LeaseholdError(f"write stream reader failed: {e!r}"))
            raise

    def abandon(self) -> None:
        self.fail(stream_closed_error("write stream abandoned"))


async def _final_error(call, e: "grpc.aio.AioRpcError") -> errors.LeaseholdError:
    """The error for a write that failed with ``e``. A write that races the
    server ending the call fails with a bare INTERNAL ("Internal error from
    Core") before the call's own status has arrived; that status (for
    example UNAVAILABLE while the server shuts down) says what happened, so
    it is awaited briefly and used when there is one."""
    if e.code() == grpc.StatusCode.INTERNAL:
        try:
            code = await asyncio.wait_for(call.code(), timeout=1.0)
            if code is not None and code != grpc.StatusCode.OK:
                final = grpc.aio.AioRpcError(
                    code,
                    await call.initial_metadata(),
                    await call.trailing_metadata(),
                    details=await call.details(),
                )
                return errors.stream_error(final)
        except (asyncio.TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass
    return errors.stream_error(e)


def _abandon(state: _AsyncStreamState) -> None:
    """The finalizer of an AsyncWriteStream collected without close()."""
    if state.call.done():
        return
    try:
        state.loop.call_soon_threadsafe(state.abandon)
    except RuntimeError:  # the loop is closed: so is the call
        pass


class AsyncWriteStream:
    """The asyncio :class:`~leasehold.WriteStream`, from
    :meth:`AsyncClient.write_stream`: fenced writes over one long-lived gRPC
    stream. Tasks of one event loop may share it: each :meth:`write` sends
    its messages back to back, and one reader task matches the answers to
    the writes in order. The stream opens on first use; use it as an async
    context manager, or call :meth:`close`::

        async with client.write_stream() as stream:
            out = await stream.write([StreamWrite.put("reconcile", token, b"cursor", b"42")])

    **A raised error breaks the stream**: the write that raised it, every
    other unanswered one and every later one raise the same error. The
    writes the stream did not answer may or may not have been made: open a
    new stream and read them back.
    """

    def __init__(self, store: pb_grpc.FencedStoreStub, timeout: float) -> None:
        self._store = store
        self._timeout = timeout
        self._state: Optional[_AsyncStreamState] = None
        self._reader: Optional["asyncio.Task[None]"] = None
        self._closed = False
        self._finalizer: Optional[weakref.finalize] = None

    def _start(self) -> _AsyncStreamState:
        if self._state is None:
            call = self._store.WriteStream()
            st = _AsyncStreamState(call, asyncio.get_running_loop())
            self._reader = st.loop.create_task(st.read(), name="leasehold-write-stream")
            self._finalizer = weakref.finalize(self, _abandon, st)
            self._state = st
        return self._state

    async def write(self, writes: Iterable[StreamWrite], *, timeout: Optional[float] = None) -> List[WriteOutcome]:
        """Makes every write, in order; returns one
        :class:`~leasehold.WriteOutcome` per write, in the same order, once
        the written ones are durable. A fenced, unknown-token or malformed
        write is an outcome, not an error, and does not stop the others.

        Large batches are split into messages of at most 1000 writes and
        about 48 KiB (a larger write goes alone), sent back to back
        (pipelined).

        Raises the typed error the stream ended with (``ShuttingDown``,
        ``StorageError``, ``DiskFull``, ``Unavailable``, ``InvalidArgument``
        with field ``"writes"``...), or ``Unavailable`` with code
        DEADLINE_EXCEEDED when the answers take longer than ``timeout``
        seconds (default: the client's timeout). Either breaks the stream,
        and the unanswered writes may or may not have been made: read them
        back. Cancelling a write while it is being sent breaks the stream
        too."""
        messages = split_writes([w.to_pb() for w in writes])
        if self._closed:
            raise stream_closed_error()
        st = self._start()
        t = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        sent: List["asyncio.Future[List[WriteOutcome]]"] = []
        async with st.send_lock:
            for m in messages:
                if st.error is not None:
                    raise st.error
                if st.closing:
                    raise stream_closed_error()
                st.next_id += 1
                fut: "asyncio.Future[List[WriteOutcome]]" = st.loop.create_future()
                fut.add_done_callback(_retrieve)
                st.pending.append((st.next_id, len(m), fut))
                sent.append(fut)
                try:
                    await st.call.write(pb.WriteStreamRequest(id=st.next_id, writes=m))
                except grpc.aio.AioRpcError as e:
                    st.fail(await _final_error(st.call, e))
                    raise st.error from None  # type: ignore[misc]
                except asyncio.InvalidStateError:  # the call has ended
                    st.fail(stream_closed_error("write stream ended"))
                    raise st.error from None  # type: ignore[misc]
                except asyncio.CancelledError:
                    if st.error is not None and st.call.cancelled():
                        raise st.error from None
                    # Our task was cancelled mid-send: whether the message
                    # went out is unknown, so the answers can no longer be
                    # matched.
                    st.fail(stream_closed_error("write stream: a write was cancelled while being sent"))
                    raise
        done, _ = await asyncio.wait(sent, timeout=max(deadline - time.monotonic(), 0))
        if len(done) < len(sent):
            st.fail(stream_timeout_error(t))
        out: List[WriteOutcome] = []
        for fut in sent:
            out.extend(fut.result())
        return out

    async def close(self, timeout: Optional[float] = None) -> None:
        """Half-closes the sending side and waits (up to ``timeout``
        seconds, default the client's timeout) for the server to answer
        every write sent and end the stream; past that, cancels it. Writes
        still waiting in other tasks get their answers. Later writes raise
        ``Unavailable``. Does not raise (but for cancellation)."""
        self._closed = True
        st = self._state
        if st is None or self._reader is None:
            return
        async with st.send_lock:
            if not st.closing:
                st.closing = True
                if st.error is None:
                    try:
                        await st.call.done_writing()
                    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                        pass
                    except asyncio.CancelledError:
                        if not st.call.cancelled():
                            raise
        done, _ = await asyncio.wait({self._reader}, timeout=self._timeout if timeout is None else timeout)
        if not done:
            st.fail(stream_closed_error("write stream did not end in time after close"))
            await asyncio.wait({self._reader})
        if self._finalizer is not None:
            self._finalizer.detach()

    async def __aenter__(self) -> "AsyncWriteStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncClient:
    """The asyncio client over one ``grpc.aio`` channel. Use it from one
    event loop. ``ca``, ``cert``, ``key``, ``token`` and ``server_name``
    are as for :class:`~leasehold.Client` (TLS, mutual TLS, a bearer
    token)."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        channel: Optional[grpc.aio.Channel] = None,
        timeout: float = DEFAULT_TIMEOUT,
        ca: Optional[Pem] = None,
        cert: Optional[Pem] = None,
        key: Optional[Pem] = None,
        token: Optional[str] = None,
        server_name: Optional[str] = None,
    ) -> None:
        self._own_channel = channel is None
        if channel is not None and any(v is not None for v in (ca, cert, key, token, server_name)):
            raise ValueError("give channel=, or ca/cert/key/token/server_name, not both")
        if channel is None:
            target, creds, options = channel_security(
                target, ca=ca, cert=cert, key=key, token=token, server_name=server_name
            )
            if creds is None:
                channel = grpc.aio.insecure_channel(target, options=options)
            else:
                channel = grpc.aio.secure_channel(target, creds, options=options)
        self._channel = channel
        self._timeout = timeout
        self._leases = pb_grpc.LeasesStub(self._channel)
        self._store = pb_grpc.FencedStoreStub(self._channel)
        self._shards = pb_grpc.ShardsStub(self._channel)
        self._chaos = chaos_grpc.ChaosStub(self._channel)
        self._cleanups: "set[asyncio.Task]" = set()
        # Acquires and Renews on their way, and tokens told, per (job,
        # holder): what a cancelled Acquire's give-back must respect.
        self._calls = Calls()

    async def close(self) -> None:
        """Waits for any clean-up of a cancelled Acquire, then closes the
        channel if this client opened it."""
        if self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)
        if self._own_channel:
            await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    @property
    def timeout(self) -> float:
        """How long a call may take, on top of any time it asks the server
        to wait (seconds)."""
        return self._timeout

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method, request, timeout: Optional[float]):
        t = self._timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            return await method(request, timeout=t)
        except grpc.aio.AioRpcError as e:
            raise errors.from_call_error(e, started, t) from None

    async def acquire(
        self,
        job: str,
        holder: str,
        ttl: float,
        wait: float = 0.0,
        *,
        timeout: Optional[float] = None,
        bind_to_stream: bool = False,
        preferred: bool = False,
        value: Optional[Bytes] = None,
        slots: Optional[int] = None,
    ) -> Acquired:
        """As :meth:`leasehold.Client.acquire` (``bind_to_stream=True`` binds
        the grant to this client's connection; ``preferred=True`` queues it
        ahead of the Acquires that are not preferred, and tells a holder
        that is not preferred that it waits; ``value`` is published with
        the grant, at most 1024 bytes; ``slots=N`` asks for one of N slots
        of a counted lease, granted on the slot's own job, ``Lease.job``,
        ``"{job}#{k}"``, which the holder then renews, releases and writes
        with; another count than the job's, or over 100, is
        :class:`~leasehold.InvalidArgument` naming ``"slots"``). A waiting
        Acquire (``wait > 0``) that is cancelled (``asyncio.CancelledError``) or times out
        (:class:`~leasehold.DeadlineExceeded`, a ``TimeoutError``) gives back
        a grant it may have been given meanwhile: a task reads the lease
        100 ms later and gives it back if its holder is ``holder``. **A
        give-back never ends a lease a caller was told it holds**: not while
        another Acquire or Renew of this client for the job and holder
        started since or is on its way, not a token one of them was told,
        and not once the holder asked again from anywhere (the server's
        ``give_back`` release)."""
        t = wait + self._timeout if timeout is None else timeout
        with self._calls.start(job, holder) as asking:
            try:
                r = await self._call(
                    self._leases.Acquire,
                    acquire_request(job, holder, ttl, wait, bind_to_stream, preferred, value, slots),
                    t,
                )
            except (asyncio.CancelledError, errors.DeadlineExceeded):
                if wait > 0:
                    asking.end()
                    self._give_back_later(job, holder, asking.n)
                raise
            if r.acquired:
                asking.told(r.lease.token)
        return Acquired(acquired=r.acquired, lease=lease_from_pb(r.lease))

    def _give_back_later(self, job: str, holder: str, n: int) -> None:
        """The clean-up of the cancelled waiting Acquire numbered ``n`` (its
        registration ended), as a task of its own: as
        :meth:`leasehold.Client._give_back_later`."""

        async def give_back() -> None:
            try:
                await asyncio.sleep(GIVE_BACK_AFTER)
                lease = await self.get_lease(job, timeout=5)
                if lease.holder == holder and self._calls.may_give_back(job, holder, n, lease.token):
                    await self._call(self._leases.Release, release_request(job, holder, lease.token, True), 5)
            except Exception:  # best effort: the lease runs out on its own
                pass

        task = asyncio.get_running_loop().create_task(give_back())
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    def lock(
        self,
        job: str,
        ttl: float,
        *,
        timeout: Optional[float] = None,
        name: str = DEFAULT_LOCK_NAME,
        on_lost: Optional[AsyncTokenCallback] = None,
        slots: Optional[int] = None,
    ) -> AsyncLock:
        """An :class:`~leasehold.AsyncLock` on ``job``, as
        :meth:`leasehold.Client.lock`, for ``async with``::

            async with client.lock("reports", ttl=10, timeout=30) as lock:
                await client.checked_write("reports", lock.token, b"cursor", b"42")

        Its renewals run as a task on this event loop. ``on_lost(token)``
        (a function or a coroutine function) is called once if the lease is
        lost while held (not after a plain release). ``slots=N`` makes it
        a counted lock, held in one of N slots; its writes name
        :attr:`~leasehold.AsyncLock.lease_job`, the slot's job::

            async with client.lock("nightly", ttl=10, slots=2) as lock:
                await client.checked_write(lock.lease_job, lock.token, b"cursor", b"42")
        """
        return AsyncLock(self, job, ttl, timeout=timeout, name=name, on_lost=on_lost, slots=slots)

    async def renew(
        self,
        job: str,
        holder: str,
        token: int,
        ttl: float,
        *,
        timeout: Optional[float] = None,
        value: Optional[Bytes] = None,
    ) -> Lease:
        """As :meth:`leasehold.Client.renew`: ``value`` ``None`` keeps the
        lease's value, given it replaces it (``b""`` clears it)."""
        return (await self.renew_lease(job, holder, token, ttl, timeout=timeout, value=value)).lease

    async def renew_lease(
        self,
        job: str,
        holder: str,
        token: int,
        ttl: float,
        *,
        timeout: Optional[float] = None,
        value: Optional[Bytes] = None,
    ) -> Renewed:
        """As :meth:`leasehold.Client.renew_lease`: :meth:`renew`, with
        whether a preferred candidate waits (``successor_waiting``)."""
        with self._calls.start(job, holder) as asking:
            r = await self._call(self._leases.Renew, renew_request(job, holder, token, ttl, value), timeout)
            lease = lease_from_pb(r.lease)
            asking.told(lease.token)
        return Renewed(lease=lease, successor_waiting=r.successor_waiting)

    async def release(self, job: str, holder: str, token: int, *, timeout: Optional[float] = None) -> None:
        await self._call(self._leases.Release, release_request(job, holder, token), timeout)
        self._calls.released(job, holder)

    async def transfer_lease(
        self,
        job: str,
        holder: str,
        token: int,
        to_holder: Optional[str] = None,
        ttl: Optional[float] = None,
        *,
        timeout: Optional[float] = None,
    ) -> Lease:
        """As :meth:`leasehold.Client.transfer_lease`: hands our live lease
        to the first waiter (``to_holder`` ``None``) or to the waiting
        ``to_holder``, with ``token + 1``; the successor's lease. Raises
        :class:`~leasehold.NoSuccessor` or :class:`~leasehold.LeaseLost`."""
        r = await self._call(
            self._leases.TransferLease, transfer_request(job, holder, token, to_holder, ttl), timeout
        )
        self._calls.released(job, holder)
        return lease_from_pb(r.lease)

    async def get_lease(self, job: str, *, timeout: Optional[float] = None) -> Lease:
        return lease_from_pb(await self._call(self._leases.GetLease, pb.GetLeaseRequest(job=job), timeout))

    async def list_waiters(self, job: str, limit: int = 0, *, timeout: Optional[float] = None) -> Waiters:
        """As :meth:`leasehold.Client.list_waiters`: the Acquires waiting
        for ``job``, in line order (preferred first), at most ``limit`` (0:
        100), and how many wait in all. Empty for a job nobody waits for."""
        return waiters_from_pb(
            await self._call(self._leases.ListWaiters, pb.ListWaitersRequest(job=job, limit=limit), timeout)
        )

    async def delete_job(self, job: str, *, timeout: Optional[float] = None) -> bool:
        """Deletes ``job`` and its keys, if its lease is not live and nobody
        waits for it (:class:`~leasehold.JobInUse` otherwise); whether there
        was such a job."""
        return (await self._call(self._leases.DeleteJob, pb.DeleteJobRequest(job=job), timeout)).deleted

    async def list_leases(self, prefix: str = "", *, timeout: Optional[float] = None) -> List[Lease]:
        out: List[Lease] = []
        page = ""
        while True:
            r = await self._call(
                self._leases.ListLeases,
                pb.ListLeasesRequest(prefix=prefix, page_size=_PAGE_SIZE, page_token=page),
                timeout,
            )
            out.extend(lease_from_pb(l) for l in r.leases)
            if not r.next_page_token:
                return out
            page = r.next_page_token

    async def watch(self, job: str, *, timeout: Optional[float] = None) -> AsyncIterator[LeaseEvent]:
        """The current lease, then every change of holder or token (and of
        the holder's value: ``VALUE_CHANGED``). Stop iterating (or cancel
        the task) to end the watch."""
        call = self._leases.WatchLease(pb.WatchLeaseRequest(job=job), timeout=timeout)
        try:
            async for msg in call:
                yield event_from_pb(msg)
        except grpc.aio.AioRpcError as e:
            raise errors.from_rpc_error(e) from None
        finally:
            call.cancel()

    def observe(self, job: str, *, timeout: Optional[float] = None) -> AsyncIterator[LeaseEvent]:
        """As :meth:`leasehold.Client.observe`: ``job``'s lease changes
        (``WatchLease``), the current state first, for ``async for``::

            async for change in client.observe("reports"):
                print(change.kind, change.lease.holder, change.lease.token)

        ``break``, ``aclose()`` or cancelling the task ends it cleanly; a
        stream the server breaks raises its typed error. The same as
        :meth:`watch`."""
        return self.watch(job, timeout=timeout)

    def join_shards(
        self,
        group: str,
        name: str,
        shards: int,
        *,
        ttl: float = 10.0,
        revoke_timeout: Optional[float] = None,
    ) -> "AsyncShardMember":
        """A member of the shard group ``group`` of ``shards`` shards (1 to
        1024, fixed by the group's first member), named ``name``: an
        :class:`~leasehold.aio.AsyncShardMember` whose identity is
        ``name@uuid`` (:attr:`~leasehold.aio.AsyncShardMember.member`, a
        UUID made for it). It joins when awaited, on entering ``async
        with`` or at its first event, and is an async iterator of
        :class:`~leasehold.ShardAssigned`, :class:`~leasehold.ShardRevoked`
        and :class:`~leasehold.ShardLost`; ``run(work)`` runs ``work`` per
        owned shard and cancels it before acknowledging a revoke::

            async with client.join_shards("orders", "worker", 16, ttl=10) as member:
                await member.run(consume)    # consume(shard): shard.job, shard.token

        Shard k is the job ``"{group}/{k}"``, with its own lease and token:
        write its state under that job with that token, so that a stale
        owner is fenced. Its holdings are renewed every ``ttl / 3``;
        ``revoke_timeout`` (default: the TTL) is how long it has to
        acknowledge a revoke before the shard moves anyway. Joining a
        group of another count raises :class:`~leasehold.InvalidArgument`
        naming ``"shards"``; an empty group or name, or a count that is not
        1 to 1024, raises it at once, naming the field."""
        return AsyncShardMember(self, group, name, shards, ttl=ttl, revoke_timeout=revoke_timeout)

    async def get_group(self, group: str, *, timeout: Optional[float] = None) -> ShardGroup:
        """As :meth:`leasehold.Client.get_group`: the shard group's count,
        its live members and each shard's owner and token (a
        :class:`~leasehold.ShardGroup`; ``shards`` 0 when never joined)."""
        return group_from_pb(await self._call(self._shards.GetGroup, pb.GetGroupRequest(group=group), timeout))

    async def history(
        self, job: str, page_size: int = 0, page_token: str = "", *, timeout: Optional[float] = None
    ) -> HistoryPage:
        """As :meth:`leasehold.Client.history`: one page of ``job``'s
        history, newest first."""
        r = await self._call(
            self._leases.GetHistory,
            pb.GetHistoryRequest(job=job, page_size=page_size, page_token=page_token),
            timeout,
        )
        return history_from_pb(r)

    async def history_all(
        self, job: str, page_size: int = 0, *, timeout: Optional[float] = None
    ) -> AsyncIterator[Tenure]:
        """As :meth:`leasehold.Client.history_all`: every tenure, newest
        first, page after page, for ``async for``."""
        token = ""
        while True:
            page = await self.history(job, page_size, token, timeout=timeout)
            for t in page.tenures:
                yield t
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def signing_keys(self, *, timeout: Optional[float] = None) -> KeySet:
        """As :meth:`leasehold.Client.signing_keys`: the server's public
        keys, a :class:`~leasehold.proof.KeySet` for
        :func:`leasehold.proof.verify`."""
        return KeySet.from_pb(await self._call(self._leases.GetSigningKeys, pb.GetSigningKeysRequest(), timeout))

    def chaos(self) -> AsyncChaos:
        """As :meth:`leasehold.Client.chaos`: the chaos API of a server
        started with ``--enable-chaos``, an :class:`~leasehold.AsyncChaos`
        whose methods are awaited (``await client.chaos().expire(job)``)."""
        return AsyncChaos(self._chaos, self._call)

    async def checked_write(
        self,
        job: str,
        token: Optional[int],
        key: Bytes,
        value: Bytes,
        *,
        proof: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> int:
        """As :meth:`leasehold.Client.checked_write`: ``proof`` (a grant's
        ``Lease.proof``) may stand in for the token (``None`` or 0)."""
        r = await self._call(
            self._store.CheckedWrite, write_request(job, token, key, value, False, proof), timeout
        )
        return r.version

    async def delete(
        self,
        job: str,
        token: Optional[int],
        key: Bytes,
        *,
        proof: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> int:
        r = await self._call(self._store.CheckedWrite, write_request(job, token, key, b"", True, proof), timeout)
        return r.version

    def write_stream(self) -> AsyncWriteStream:
        """An :class:`AsyncWriteStream`: fenced writes, one or many per
        message, over one long-lived stream, opened on its first use (from
        this client's event loop). ``async with client.write_stream() as
        stream:``, or ``await stream.close()``; errors surface on its first
        write."""
        return AsyncWriteStream(self._store, self._timeout)

    async def read(self, job: str, key: Bytes, *, timeout: Optional[float] = None) -> Value:
        return value_from_pb(await self._call(self._store.Read, pb.ReadRequest(job=job, key=as_bytes(key)), timeout))

    async def list_keys(self, job: str, prefix: Bytes = b"", *, timeout: Optional[float] = None) -> List[KeyInfo]:
        out: List[KeyInfo] = []
        page = b""
        while True:
            r = await self._call(
                self._store.ListKeys,
                pb.ListKeysRequest(job=job, prefix=as_bytes(prefix), page_size=_PAGE_SIZE, page_token=page),
                timeout,
            )
            out.extend(key_from_pb(k) for k in r.keys)
            if not r.next_page_token:
                return out
            page = bytes(r.next_page_token)


class _Stopped(Exception):
    pass


class _Ended(Exception):
    """The leadership ended meanwhile: handed over by ``transfer()``."""


class AsyncElector:
    """The asyncio :class:`~leasehold.Elector`: one task campaigns for
    ``job`` as ``name@<uuid>`` (a UUID made for this elector), renews at
    ttl/3, steps down by its own deadline, and releases on :meth:`resign`.

    ``on_elected(token)`` / ``on_lost(token)`` may be plain functions or
    coroutine functions; coroutines run as their own tasks, so a slow one
    cannot delay a renewal.

    ``on_new_leader(holder, token, value)`` (a function or a coroutine
    function; one taking two arguments gets ``(holder, token)``) is called
    for every grant of the job, ours included, in token order, at most
    once each, as :class:`leasehold.Elector`'s: from a ``WatchLease`` kept
    open (as a task) while the elector runs, and from what the campaign
    learns. A value change is not a new leader: it is not reported.

    ``value`` is published with every Acquire of the campaign;
    :meth:`set_value` changes it (sent with the next renewal, or the next
    Acquire when not leading, until one succeeds); :meth:`leader` reads
    the job's lease with the leader's value, as for
    :class:`leasehold.Elector`. Advisory: the token fences, not the value.

    An empty job or name, or a TTL that is not positive, raises
    ``ValueError`` here. A campaign the server refuses with an error asking
    again cannot fix (:class:`~leasehold.InvalidArgument`,
    :class:`~leasehold.Unauthenticated`, :class:`~leasehold.PermissionDenied`)
    is not retried: the elector stops, :attr:`error` holds the error and
    :meth:`wait_elected` raises it.

    ``bind_to_stream=True`` binds every grant of the campaign to the
    client's connection, and :meth:`transfer` hands the leadership to a
    waiting elector, as for :class:`~leasehold.Elector`; so do
    ``preferred=True`` (campaign as a preferred candidate) and
    ``yield_to_preferred=True`` (hand over to a waiting preferred candidate
    at the next renewal, then campaign again behind it).

    ``slots=N`` campaigns for one of the N slots of a counted lease, as
    for :class:`~leasehold.Elector`: while leading, :attr:`lease_job` is
    the slot's job, ``"{job}#{slot}"`` (:attr:`slot` is k), which the
    elector renews, releases and transfers, and which writes fenced by
    :attr:`token` name.
    """

    def __init__(
        self,
        client: AsyncClient,
        job: str,
        name: str,
        ttl: float,
        *,
        holder: Optional[str] = None,
        on_elected: Optional[AsyncTokenCallback] = None,
        on_lost: Optional[AsyncTokenCallback] = None,
        on_new_leader: Optional[AsyncLeaderCallback] = None,
        bind_to_stream: bool = False,
        preferred: bool = False,
        yield_to_preferred: bool = False,
        value: Optional[Bytes] = None,
        slots: Optional[int] = None,
    ) -> None:
        check_elector_args(job, name, ttl)
        self._slots = check_slots(slots)
        if self._slots >= 2 and on_new_leader is not None:
            # A counted lease has several leaders at once, and the job's own
            # lease is its line's turn: there is no one new leader to tell.
            raise ValueError(
                "on_new_leader cannot be combined with slots: a counted lease has several "
                "leaders at once (observe the slots' jobs, job#k, instead)"
            )
        # As Elector's: (token, the job the grant is on, the slot).
        self._granted: Optional[Tuple[int, str, Optional[int]]] = None
        self._client = client
        self._on_new_leader = leader_callback(on_new_leader)
        # As Elector's: the value, its generation, and the newest generation
        # the server was answered for (renewals stop sending it then).
        self._value = check_value(value) if value is not None else b""
        self._value_gen = 0
        self._value_sent = -1
        self._leader_token = 0
        self._watcher: Optional[asyncio.Task] = None
        self._job = job
        self._ttl = float(ttl)
        self._bind = bool(bind_to_stream)
        self._preferred = bool(preferred)
        self._yield = bool(yield_to_preferred)
        # Set when the leadership of the moment ends (a new one per term).
        self._ended: Optional[asyncio.Event] = None
        # The token a transfer() is handing over, while its call is on its way.
        self._handing: Optional[int] = None
        self._holder = holder or elector_holder(name)
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._token: Optional[int] = None
        self._proof: Optional[str] = None
        self._deadline = 0.0
        self._changed: Optional[asyncio.Condition] = None
        self._stop: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None
        self._callback_tasks: "set[asyncio.Task]" = set()
        self._finished = False
        self._error: Optional[errors.LeaseholdError] = None
        self._warnings = Warnings(log)

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def job(self) -> str:
        return self._job

    @property
    def bind_to_stream(self) -> bool:
        """Whether the campaign's grants are bound to the client's
        connection."""
        return self._bind

    @property
    def preferred(self) -> bool:
        """Whether the campaign's Acquires ask as a preferred candidate."""
        return self._preferred

    @property
    def yield_to_preferred(self) -> bool:
        """Whether this elector hands over to a waiting preferred candidate
        at its next renewal."""
        return self._yield

    @property
    def slots(self) -> int:
        """The count of slots the campaign asks for; 0 for an ordinary
        lease."""
        return self._slots

    @property
    def lease_job(self) -> Optional[str]:
        """As :attr:`leasehold.Elector.lease_job`: the job our lease is on
        while we lead (the slot's job for a counted lease, else
        :attr:`job`); ``None`` when not leading."""
        token = self.token
        return None if token is None else self._lease_job_of(token)

    @property
    def slot(self) -> Optional[int]:
        """As :attr:`leasehold.Elector.slot`: the slot we lead in, for a
        counted lease; ``None`` when not leading, or not counted."""
        token, g = self.token, self._granted
        return g[2] if token is not None and g is not None and g[0] == token else None

    def _lease_job_of(self, token: int) -> str:
        g = self._granted
        return g[1] if g is not None and g[0] == token else self._job

    def _counted(self) -> bool:
        return self._slots >= 2

    @property
    def value(self) -> bytes:
        """The value this elector publishes; ``b""`` for none."""
        return self._value

    def set_value(self, value: Bytes) -> None:
        """As :meth:`leasehold.Elector.set_value`: publishes ``value`` from
        the next renewal (or Acquire, when not leading) on, sent until one
        succeeds. Returns at once (nothing to await). Over 1024 bytes:
        :class:`~leasehold.InvalidArgument` naming ``"value"``, and nothing
        changed."""
        self._value = check_value(value)
        self._value_gen += 1

    def _value_to_send(self) -> Tuple[Optional[bytes], int]:
        if self._value_sent >= self._value_gen:
            return None, self._value_gen
        return self._value, self._value_gen

    def _value_done(self, gen: int) -> None:
        self._value_sent = max(self._value_sent, gen)

    async def leader(self, *, timeout: Optional[float] = None) -> Lease:
        """As :meth:`leasehold.Elector.leader`: the job's lease now
        (``GetLease``), its ``holder`` (``None`` when free), ``token`` and
        the leader's ``value``."""
        return await self._client.get_lease(self._job, timeout=timeout)

    @property
    def token(self) -> Optional[int]:
        """The token we lead with, or ``None`` (also past our own deadline)."""
        if self._token is not None and time.monotonic() < self._deadline:
            return self._token
        return None

    @property
    def proof(self) -> Optional[str]:
        """As :attr:`leasehold.Elector.proof`: the proof of the grant we
        lead with, whenever :attr:`token` is set; else ``None``."""
        if self._token is not None and time.monotonic() < self._deadline:
            return self._proof
        return None

    @property
    def is_leader(self) -> bool:
        return self.token is not None

    @property
    def error(self) -> Optional[errors.LeaseholdError]:
        """The error that stopped the campaign (the server refused it), else
        ``None``."""
        return self._error

    def start(self) -> "AsyncElector":
        """Starts campaigning, on the running event loop (once)."""
        if self._task is None:
            self._changed = asyncio.Condition()
            self._stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._run(), name=f"leasehold-elector-{self._job}")
            if self._on_new_leader is not None:
                self._watcher = loop.create_task(self._watch_leaders(), name=f"leasehold-leaders-{self._job}")
        return self

    async def wait_elected(self, timeout: Optional[float] = None) -> Optional[int]:
        """Waits until we lead; the token, or ``None`` on timeout or once
        resigned. Raises :attr:`error` if the campaign stopped on one."""
        assert self._changed is not None, "start() first"
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self._token is not None or self._finished), timeout
                )
            except asyncio.TimeoutError:
                pass
            if self._token is None and self._error is not None:
                raise self._error
            return self._token

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until we no longer lead with the current token."""
        assert self._changed is not None, "start() first"
        token = self._token
        if token is None:
            return True
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self._token != token), timeout)
                return True
            except asyncio.TimeoutError:
                return False

    async def transfer(self, to: Optional[str] = None, *, timeout: Optional[float] = None) -> Lease:
        """As :meth:`leasehold.Elector.transfer`: hands the leadership to the
        first waiter in line, or to the waiting holder ``to``, with our
        token + 1; returns the successor's lease. Then reports the end of
        our leadership as a loss (``on_lost``, :meth:`wait_lost`) and
        campaigns again behind the successor, unless resigning.

        Raises :class:`~leasehold.NotLeader` when not leading (nothing is
        sent), :class:`~leasehold.NoSuccessor` (we still lead), or
        :class:`~leasehold.LeaseLost` (the elector steps down)."""
        token = self.token
        if token is None:
            raise errors.NotLeader(f"{self._job}: not leading, nothing to transfer")
        self._handing = token
        try:
            lease = await self._client.transfer_lease(
                self._lease_job_of(token), self._holder, token, to_holder=to, timeout=timeout
            )
        except errors.LeaseLost as e:
            log.warning("%s: transfer of token %d: lease lost: %s", self._job, token, e)
            await self._set_follower(token)
            raise
        finally:
            self._handing = None
        log.info("%s: handed token %d over to %s (token %d)", self._job, token, lease.holder, lease.token)
        await self._set_follower(token)
        return lease

    async def resign(self) -> None:
        """Stops campaigning, releases the lease if held (bounded by our
        deadline, at least 200 ms), and waits for the callbacks."""
        if self._task is not None and self._stop is not None:
            self._stop.set()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._watcher is not None:
            self._watcher.cancel()
            try:
                await self._watcher
            except asyncio.CancelledError:
                pass
        if self._callback_tasks:
            await asyncio.gather(*self._callback_tasks, return_exceptions=True)
        self._finished = True
        await self._notify()

    async def __aenter__(self) -> "AsyncElector":
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.resign()

    # The campaign task

    async def _notify(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    async def _until(self, aw: Awaitable, deadline: float, ended: Optional[asyncio.Event] = None):
        """Awaits ``aw`` until ``deadline``; raises _Ended if ``ended`` is
        set first (the leadership was handed over), _Stopped if told to stop
        first, asyncio.TimeoutError at the deadline."""
        assert self._stop is not None
        task = asyncio.ensure_future(aw)
        stop = asyncio.ensure_future(self._stop.wait())
        waits = {task, stop}
        end = asyncio.ensure_future(ended.wait()) if ended is not None else None
        if end is not None:
            waits.add(end)
        try:
            done, _ = await asyncio.wait(
                waits, timeout=max(deadline - time.monotonic(), 0), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stop.cancel()
            if end is not None:
                end.cancel()
        if task in done:
            return task.result()
        task.cancel()
        if ended is not None and ended.is_set():
            raise _Ended()
        if stop in done or self._stop.is_set():
            raise _Stopped()
        raise asyncio.TimeoutError()

    async def _sleep_until(self, when: float, ended: Optional[asyncio.Event] = None) -> None:
        """Sleeps until ``when``; raises _Ended or _Stopped as :meth:`_until`."""
        try:
            await self._until(asyncio.sleep(max(when - time.monotonic(), 0)), when + 1.0, ended)
        except asyncio.TimeoutError:
            pass

    async def _run(self) -> None:
        campaign_wait, _ = campaign_timing(self._ttl)
        backoff = Backoff.campaign(self._ttl)
        try:
            while True:
                sent = time.monotonic()
                limit = campaign_wait + self._ttl
                value, gen = self._value, self._value_gen  # every Acquire carries it
                try:
                    a = await self._until(
                        self._client.acquire(
                            self._job,
                            self._holder,
                            self._ttl,
                            campaign_wait,
                            timeout=limit,
                            bind_to_stream=self._bind,
                            preferred=self._preferred,
                            value=value,
                            slots=self._slots,
                        ),
                        sent + limit,
                    )
                except _Stopped:
                    await self._release_if_granted()
                    return
                except asyncio.TimeoutError:
                    self._warnings.warn("campaign for %s: acquire timed out", self._job)
                    continue
                except REFUSALS as e:
                    log.error("campaign for %s refused, not campaigning again: %s", self._job, e)
                    self._error = e
                    return
                except errors.LeaseholdError as e:
                    self._warnings.warn("campaign for %s: acquire failed, retrying: %s", self._job, e)
                    try:
                        await self._sleep_until(time.monotonic() + backoff.next())
                    except _Stopped:
                        return
                    continue
                backoff.reset()
                if not self._counted():  # a counted answer is about a slot's job, not ours
                    self._observe(a.lease.holder, a.lease.token, a.lease.value)
                if not a.acquired:
                    continue
                self._value_done(gen)
                token = a.lease.token
                slot = a.lease.slot if self._counted() and a.lease.job not in ("", self._job) else None
                self._granted = (token, a.lease.job or self._job, slot)
                anchor = await self._anchor(token, sent)
                if anchor is None:
                    continue
                if await self._lead(token, anchor, a.lease.proof, a.lease.value):
                    return
                if self._stop is not None and self._stop.is_set():
                    return  # handed over by transfer() while resigning
        except Exception:
            log.exception("elector for %s failed", self._job)
            if self._token is not None:
                await self._set_follower(self._token)
        finally:
            self._finished = True
            await self._notify()

    async def _anchor(self, token: int, sent: float) -> Optional[float]:
        if time.monotonic() < sent + self._ttl / 10:
            return sent
        sent = time.monotonic()
        value, gen = self._value_to_send()
        try:
            await self._client.renew(
                self._lease_job_of(token), self._holder, token, self._ttl, timeout=self._ttl / 2, value=value
            )
            if value is not None:
                self._value_done(gen)
            return sent
        except errors.LeaseholdError as e:
            log.warning("%s: granted token %d, but the confirming renew failed: %s", self._job, token, e)
            return None

    async def _lead(self, token: int, sent: float, proof: Optional[str] = None, value: bytes = b"") -> bool:
        _, every = campaign_timing(self._ttl)
        retry = Backoff.renew(self._ttl)
        deadline = sent + self._ttl
        on = self._lease_job_of(token)  # a counted grant's slot job: renewed there
        ended = await self._set_leader(token, deadline, proof, value)
        nxt = sent + every
        while True:
            try:
                await self._sleep_until(min(nxt, deadline), ended)
            except _Ended:  # handed over by transfer(), which reported it
                return False
            except _Stopped:
                return await self._resign_lease(token, deadline)
            now = time.monotonic()
            if now >= deadline:
                log.warning("%s: token %d reached its deadline without a renewal", self._job, token)
                break
            # A value set since the server last took one goes with this
            # renewal, and with each after it until one is answered.
            sending, gen = self._value_to_send()
            try:
                renewed = await self._until(
                    self._client.renew_lease(
                        on, self._holder, token, self._ttl, timeout=deadline - now, value=sending
                    ),
                    deadline,
                    ended,
                )
            except _Ended:
                return False
            except _Stopped:
                return await self._resign_lease(token, deadline)
            except asyncio.TimeoutError:
                log.warning("%s: renew of token %d did not answer before the deadline", self._job, token)
                break
            except errors.InvalidArgument as e:
                if sending is not None and e.field == "value":
                    # A server whose limit is below ours refused the value,
                    # and nothing else: keep leading, with the value it has.
                    log.error("%s: the server refused the value, keeping the one it has: %s", self._job, e)
                    self._value_done(gen)
                    nxt = time.monotonic()
                    continue
                if self._token == token and self._handing != token:
                    log.warning("%s: lease lost (token %d): %s", self._job, token, e)
                break
            except (errors.LeaseLost,) + REFUSALS as e:
                if self._token == token and self._handing != token:  # else transfer() is handing it over
                    log.warning("%s: lease lost (token %d): %s", self._job, token, e)
                break
            except errors.LeaseholdError as e:
                self._warnings.warn("%s: renew of token %d failed, retrying: %s", self._job, token, e)
                nxt = time.monotonic() + retry.next_before(deadline)
                continue
            if sending is not None:
                self._value_done(gen)
            deadline = now + self._ttl
            nxt = now + every
            retry.reset()
            if self._token == token:
                self._deadline = deadline
                # The same proof, unless it was made again under a new signing key.
                self._proof = renewed.lease.proof or self._proof
            if self._yield and renewed.successor_waiting and await self._yield_lease(token, deadline):
                return False
        await self._set_follower(token)
        return False

    async def _yield_lease(self, token: int, deadline: float) -> bool:
        """As :meth:`leasehold.Elector._yield_lease`: right after a renewal
        whose answer says a preferred candidate waits, hands the lease to
        the first in line by :meth:`transfer`. True when the leadership
        ended (handed over, or lost); False when we still lead."""
        log.info("%s: a preferred candidate waits: handing token %d over", self._job, token)
        try:
            await self.transfer(timeout=max(deadline - time.monotonic(), 0.001))
            return True
        except errors.LeaseLost:
            return True  # transfer() stepped down and reported the loss
        except errors.NotLeader:
            return self._token != token  # ended meanwhile, or past our deadline
        except errors.NoSuccessor:
            log.info("%s: the preferred candidate left: still leading with token %d", self._job, token)
            return False
        except errors.LeaseholdError as e:
            self._warnings.warn("%s: hand-over of token %d to a preferred candidate failed: %s", self._job, token, e)
            return False

    async def _resign_lease(self, token: int, deadline: float) -> bool:
        if not await self._set_follower(token):
            return True  # transfer() handed it over meanwhile: nothing to release
        until = max(deadline, time.monotonic() + 0.2)
        try:
            await self._client.release(
                self._lease_job_of(token), self._holder, token, timeout=max(until - time.monotonic(), 0.001)
            )
        except errors.LeaseholdError as e:
            log.warning("%s: release of token %d on resign failed: %s", self._job, token, e)
        return True

    async def _release_if_granted(self) -> None:
        try:
            lease = await self._client.get_lease(self._job, timeout=0.2)
            if lease.holder == self._holder:
                await self._client.release(self._job, self._holder, lease.token, timeout=0.2)
        except errors.LeaseholdError:
            pass

    def _callback(self, cb: Optional[AsyncTokenCallback], token: int) -> None:
        if cb is None:
            return
        try:
            r = cb(token)
        except Exception:
            log.exception("elector callback failed")
            return
        if inspect.isawaitable(r):
            t = asyncio.ensure_future(r)
            self._callback_tasks.add(t)
            t.add_done_callback(self._callback_tasks.discard)

    def _observe(self, holder: Optional[str], token: int, value: bytes) -> None:
        """As :meth:`leasehold.Elector._observe`: tells ``on_new_leader`` of
        a grant above the last one told, with its value."""
        if self._on_new_leader is None or not holder or not token:
            return
        if token <= self._leader_token or (self._stop is not None and self._stop.is_set()):
            return
        self._leader_token = token
        cb = self._on_new_leader
        try:
            r = cb(holder, token, value)
        except Exception:
            log.exception("on_new_leader callback failed")
            return
        if inspect.isawaitable(r):
            t = asyncio.ensure_future(r)
            self._callback_tasks.add(t)
            t.add_done_callback(self._callback_tasks.discard)

    async def _watch_leaders(self) -> None:
        """As :meth:`leasehold.Elector._watch_leaders`: follows the job on a
        WatchLease stream while the elector runs, opened again with backoff
        when it breaks; not after a refusal."""
        retry = Backoff.campaign(self._ttl)
        while self._stop is None or not self._stop.is_set():
            err: Optional[BaseException] = None
            try:
                async for ev in self._client.watch(self._job):
                    retry.reset()
                    self._observe(ev.lease.holder, ev.lease.token, ev.lease.value)
            except errors.LeaseholdError as e:
                err = e
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never die silently
                log.exception("watch of %s failed", self._job)
                err = e
            if isinstance(err, REFUSALS):
                log.warning("watch of %s refused; on_new_leader hears only what the campaign learns: %s",
                            self._job, err)
                return
            self._warnings.warn("watch of %s ended, watching again: %s", self._job, err or "end of stream")
            await asyncio.sleep(retry.next())

    async def _set_leader(
        self, token: int, deadline: float, proof: Optional[str] = None, value: bytes = b""
    ) -> asyncio.Event:
        """Leads with ``token``; the event set when that leadership ends."""
        if not self._counted():  # a counted grant's token is its slot's, not the job's
            self._observe(self._holder, token, value)
        self._token = token
        self._proof = proof
        self._deadline = deadline
        ended = self._ended = asyncio.Event()
        log.info("%s: elected with token %d", self._lease_job_of(token), token)
        await self._notify()
        self._callback(self._on_elected, token)
        return ended

    async def _set_follower(self, token: int) -> bool:
        """Reports the end of the leadership with ``token``, once: True if
        this call did (so that a renewal's LEASE_LOST after a transfer is
        not a second loss)."""
        if self._token != token:
            return False
        self._token = None
        self._proof = None
        if self._ended is not None:
            self._ended.set()
        log.info("%s: stepped down from token %d", self._job, token)
        await self._notify()
        self._callback(self._on_lost, token)
        return True


# At the end: it refers to AsyncClient's module only for typing.
from .aio_elector_set import AsyncElectorSet  # noqa: E402,F401
from .aio_shards import AsyncShardMember  # noqa: E402,F401
