"""The blocking :class:`Client`.

Durations are seconds (``float``); keys and values are ``bytes`` (a ``str``
is encoded as UTF-8). Every method raises a typed
:class:`~leasehold.errors.LeaseholdError` on failure.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections import deque
from typing import Callable, Deque, Iterable, Iterator, List, Optional

import grpc

from . import errors
from ._giveback import Calls
from .chaos import Chaos
from ._wire import (  # noqa: F401 (re-exported)
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT,
    _PAGE_SIZE,
    MAX_WRITES_PER_MESSAGE,
    MAX_MESSAGE_BYTES,
    GIVE_BACK_AFTER,
    RECONNECT_OPTIONS,
    normalize_target,
    _read_pem,
    _BearerToken,
    Pem,
    channel_security,
    acquire_request,
    renew_request,
    release_request,
    transfer_request,
    write_request,
    split_writes,
    write_outcomes,
    stream_closed_error,
    stream_timeout_error,
    value_from_pb,
    key_from_pb,
)
from .lock import DEFAULT_LOCK_NAME, Lock
from .shards import ShardMember
from .proof import KeySet
from .types import (
    Acquired,
    Bytes,
    HistoryPage,
    KeyInfo,
    Lease,
    LeaseEvent,
    Renewed,
    ShardAssigned,
    ShardGroup,
    ShardLost,
    ShardRevoked,
    Tenure,
    StreamWrite,
    Value,
    Waiters,
    WriteOutcome,
    as_bytes,
    event_from_pb,
    group_from_pb,
    history_from_pb,
    lease_from_pb,
    waiters_from_pb,
)
from .v1 import chaos_pb2_grpc as chaos_grpc
from .v1 import leasehold_pb2 as pb
from .v1 import leasehold_pb2_grpc as pb_grpc

class Watch:
    """The events of one ``watch`` (or ``observe``): iterate over it, from
    one thread; ``cancel()`` (or ``close()``, or leaving its ``with``
    block), from any thread, ends it, and the iteration then stops without
    an error. A stream the server breaks (it shuts down, say) raises its
    typed error (:class:`~leasehold.ShuttingDown`, an
    :class:`~leasehold.Unavailable`...) from the iteration."""

    def __init__(self, call: grpc.Call) -> None:
        self._call = call

    def __iter__(self) -> Iterator[LeaseEvent]:
        try:
            for msg in self._call:  # type: ignore[attr-defined]
                yield event_from_pb(msg)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and self._cancelled:
                return
            raise errors.from_rpc_error(e) from None

    _cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()

    def close(self) -> None:
        """The same as :meth:`cancel`."""
        self.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


_END = object()


class _Pending:
    """One sent WriteStream message, waiting for its answer."""

    __slots__ = ("id", "count", "done", "outcomes", "error")

    def __init__(self, request_id: int, count: int) -> None:
        self.id = request_id
        self.count = count
        self.done = threading.Event()
        self.outcomes: List[WriteOutcome] = []
        self.error: Optional[errors.LeaseholdError] = None


class _StreamState:
    """What a :class:`WriteStream` shares with its reader thread. It holds
    no reference to the WriteStream, so an abandoned stream is collected and
    its finalizer ends the call and the threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self.pending: Deque[_Pending] = deque()
        self.next_id = 0
        self.closing = False
        self.error: Optional[errors.LeaseholdError] = None
        self.call: Optional[grpc.Call] = None

    def request_iterator(self) -> Iterator[pb.WriteStreamRequest]:
        """The requests, for gRPC's sending thread: ends (half-closing the
        stream) at ``_END``."""
        while True:
            r = self.requests.get()
            if r is _END:
                return
            yield r  # type: ignore[misc]

    def fail(self, err: errors.LeaseholdError, *also: _Pending) -> None:
        """Breaks the stream with ``err`` (unless already broken): every
        pending write, those in ``also`` and every later one raise it. Ends
        the sending side and cancels the call."""
        with self.lock:
            if self.error is None:
                self.error = err
            err = self.error
            failed = list(also) + list(self.pending)
            self.pending.clear()
            self.requests.put(_END)
        for p in failed:
            if not p.done.is_set():
                p.error = err
                p.done.set()
        if self.call is not None:
            self.call.cancel()

    def read(self, call: Iterator[pb.WriteStreamResponse]) -> None:
        """The reader thread: answers the pending writes in order, until the
        stream ends."""
        try:
            for resp in call:
                with self.lock:
                    if self.error is not None:
                        return
                    p = self.pending.popleft() if self.pending else None
                if p is None:
                    self.fail(
                        errors.LeaseholdError(
                            f"write response {resp.id} answers no request", code=grpc.StatusCode.INTERNAL
                        )
                    )
                    return
                try:
                    p.outcomes = write_outcomes(p.id, p.count, resp)
                except errors.LeaseholdError as e:
                    self.fail(e, p)
                    return
                p.done.set()
            # Ended with OK: after close(), once every write was answered.
            self.fail(stream_closed_error("write stream closed" if self.closing else "write stream ended"))
        except grpc.RpcError as e:
            self.fail(errors.stream_error(e))
        except BaseException as e:  # never leave writers waiting
            self.fail(errors.LeaseholdError(f"write stream reader failed: {e!r}"))
            raise


def _abandon(state: _StreamState) -> None:
    """The finalizer of a WriteStream collected without close()."""
    state.fail(stream_closed_error("write stream abandoned"))


class WriteStream:
    """One open ``WriteStream``: fenced writes over one long-lived gRPC
    stream, from :meth:`Client.write_stream`. A message on an open stream
    costs far less than a unary ``checked_write``, and the writes of one
    message share one sync on the server.

    Safe to share between threads: each :meth:`write` sends its messages
    back to back under a lock, and the answers are matched to the writes in
    order by one reader thread. Use it as a context manager, or call
    :meth:`close`::

        with client.write_stream() as stream:
            out = stream.write([
                leasehold.StreamWrite.put("reconcile", token, b"cursor", b"42"),
                leasehold.StreamWrite.delete("reconcile", token, b"pending"),
            ])
            if any(o.kind is leasehold.WriteOutcomeKind.FENCED for o in out):
                ...  # not the leader any more: stop

    **A raised error breaks the stream**: the write that raised it, every
    other unanswered one and every later one raise the same error. The
    writes the stream did not answer may or may not have been made: open a
    new stream and read them back.
    """

    def __init__(self, store: pb_grpc.FencedStoreStub, timeout: float) -> None:
        self._timeout = timeout
        self._state = _StreamState()
        call = store.WriteStream(self._state.request_iterator())
        self._state.call = call
        self._reader = threading.Thread(
            target=self._state.read, args=(call,), name="leasehold-write-stream", daemon=True
        )
        self._reader.start()
        self._finalizer = weakref.finalize(self, _abandon, self._state)

    def write(self, writes: Iterable[StreamWrite], *, timeout: Optional[float] = None) -> List[WriteOutcome]:
        """Makes every write, in order; returns one
        :class:`~leasehold.WriteOutcome` per write, in the same order, once
        the written ones are durable. A fenced, unknown-token or malformed
        write is an outcome, not an error, and does not stop the others; a
        later write sees the earlier ones (two writes to one key give
        versions n and n+1).

        Large batches are split into messages of at most 1000 writes and
        about 48 KiB (a larger write goes alone), sent back to back
        (pipelined).

        Raises the typed error the stream ended with (``ShuttingDown``,
        ``StorageError``, ``DiskFull``, ``Unavailable``, ``InvalidArgument``
        with field ``"writes"``...), or ``Unavailable`` with code
        DEADLINE_EXCEEDED when the answers take longer than ``timeout``
        seconds (default: the client's timeout). Either breaks the stream,
        and the unanswered writes may or may not have been made: read them
        back."""
        messages = split_writes([w.to_pb() for w in writes])
        st = self._state
        sent: List[_Pending] = []
        with st.lock:
            if st.error is not None:
                raise st.error
            if st.closing:
                raise stream_closed_error()
            for m in messages:
                st.next_id += 1
                p = _Pending(st.next_id, len(m))
                st.pending.append(p)
                st.requests.put(pb.WriteStreamRequest(id=p.id, writes=m))
                sent.append(p)
        t = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        out: List[WriteOutcome] = []
        for p in sent:
            if not p.done.wait(max(deadline - time.monotonic(), 0)):
                st.fail(stream_timeout_error(t))
                p.done.wait()  # set by now: failed, or being answered
            if p.error is not None:
                raise p.error
            out.extend(p.outcomes)
        return out

    def close(self, timeout: Optional[float] = None) -> None:
        """Half-closes the sending side and waits (up to ``timeout``
        seconds, default the client's timeout) for the server to answer
        every write sent and end the stream; past that, cancels it. Writes
        still waiting in other threads get their answers. Later writes
        raise ``Unavailable``. Does not raise."""
        st = self._state
        with st.lock:
            if not st.closing:
                st.closing = True
                st.requests.put(_END)
        self._reader.join(self._timeout if timeout is None else timeout)
        if self._reader.is_alive():
            st.fail(stream_closed_error("write stream did not end in time after close"))
            self._reader.join()
        self._finalizer.detach()

    def __enter__(self) -> "WriteStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    """A blocking client over one gRPC channel. Thread-safe; share one.

    ``Client("127.0.0.1:50051")`` opens a plaintext channel. For a server
    with TLS and a policy::

        Client("leasehold.internal:50051", ca="ca.pem",
               cert="worker.pem", key="worker-key.pem",   # mutual TLS
               token=os.environ["LEASEHOLD_TOKEN_SECRET"])

    ``ca``, ``cert`` and ``key`` are PEM ``bytes`` or the path of a PEM
    file; with either of ``ca`` and ``cert`` (or an ``https://`` target) the
    channel is TLS. ``token`` is a bearer secret, sent as ``authorization:
    Bearer ...`` on every call, streams included. ``server_name`` is the
    name the server's certificate must carry, when not the target's host.
    Or pass ``channel=`` to use your own (interceptors, options).
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        channel: Optional[grpc.Channel] = None,
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
                channel = grpc.insecure_channel(target, options=options)
            else:
                channel = grpc.secure_channel(target, creds, options=options)
        self._channel = channel
        self._timeout = timeout
        self._leases = pb_grpc.LeasesStub(self._channel)
        self._store = pb_grpc.FencedStoreStub(self._channel)
        self._shards = pb_grpc.ShardsStub(self._channel)
        self._chaos = chaos_grpc.ChaosStub(self._channel)
        # Acquires and Renews on their way, and tokens told, per (job,
        # holder): what a cancelled Acquire's give-back must respect.
        self._calls = Calls()

    def close(self) -> None:
        """Closes the channel, if this client opened it."""
        if self._own_channel:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def timeout(self) -> float:
        return self._timeout

    def _call(self, method, request, timeout: Optional[float]):
        t = self._timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            return method(request, timeout=t)
        except grpc.RpcError as e:
            raise errors.from_call_error(e, started, t) from None

    # Leases

    def acquire(
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
        """Asks for the lease on ``job``; waits up to ``wait`` seconds for it
        to free up. ``timeout`` defaults to ``wait`` plus the client's
        timeout; when it passes the call raises
        :class:`~leasehold.DeadlineExceeded`, a ``TimeoutError``.

        ``slots=N`` (2 to 100) asks for one of the N slots of a counted
        lease on ``job`` (a semaphore): up to N holders at once. Slot k is
        a job of its own, ``"{job}#{k}"``, with its own token: the grant's
        :attr:`Lease.job <leasehold.Lease.job>` names it (and
        :attr:`~leasehold.Lease.slot` is k, :attr:`~leasehold.Lease.slots`
        N), and the holder renews, releases, transfers and writes with
        that name, not ``job``. A waiting counted Acquire is served first
        come, first served as slots free up; a live holder of a slot that
        asks again is renewed in its slot. The first counted grant fixes
        N: another count, or one over 100, raises
        :class:`~leasehold.InvalidArgument` with ``field == "slots"`` and
        changes nothing. ``None``, 0 or 1: the ordinary lease.

        ``value`` (``bytes``, or a ``str`` sent as UTF-8; at most 1024
        bytes, else :class:`~leasehold.InvalidArgument` naming ``"value"``)
        is published with the grant as :attr:`Lease.value
        <leasehold.Lease.value>`: where to reach the leader, for routing to
        it. A repeated Acquire by the live holder replaces it (``None`` or
        ``b""``: with nothing). Advisory: the token fences, not the value.

        ``bind_to_stream=True`` binds the grant to this client's connection:
        when the connection closes or resets (this process dies, or the
        channel is closed) the server releases the lease at once and grants
        the first waiter; a connection that merely goes silent (a pause, a
        partition) keeps it for its TTL. The trade: a connection cut while
        the holder lives (a proxy closing it, a reconnect) ends the lease
        at once too, and its writes are then fenced. gRPC may share one
        connection between the channels of a process to one target (its
        global subchannel pool): closing one of them closes the connection
        only once no other uses it.

        ``preferred=True`` asks as a preferred candidate: while waiting, it
        is queued ahead of the Acquires that are not preferred (first come,
        first served within each class), and a live holder that is not
        preferred is told so by its renewals (:meth:`renew_lease`'s
        ``successor_waiting``), so that it can hand over when it suits it.
        Nothing is taken from the holder: the lease changes hands only by a
        release, a transfer or its expiry.

        A waiting Acquire (``wait > 0``) that times out gives back a grant
        it may have been given meanwhile: the server releases a grant whose
        reply it could not deliver, and for a reply that was on its way, a
        thread reads the lease 100 ms later and gives it back if its holder
        is ``holder`` (holders are unique per elector, so that is never
        someone else's). **A give-back never ends a lease a caller was told
        it holds**: not while another Acquire or Renew of this client for
        the job and holder started since or is on its way, not a token one
        of them was told, and not once the holder asked again from anywhere
        (the server's ``give_back`` release)."""
        t = wait + self._timeout if timeout is None else timeout
        with self._calls.start(job, holder) as asking:
            try:
                r = self._call(
                    self._leases.Acquire,
                    acquire_request(job, holder, ttl, wait, bind_to_stream, preferred, value, slots),
                    t,
                )
            except errors.DeadlineExceeded:
                if wait > 0:
                    asking.end()
                    self._give_back_later(job, holder, asking.n)
                raise
            if r.acquired:
                asking.told(r.lease.token)
        return Acquired(acquired=r.acquired, lease=lease_from_pb(r.lease))

    def acquire_future(
        self,
        job: str,
        holder: str,
        ttl: float,
        wait: float,
        timeout: float,
        *,
        bind_to_stream: bool = False,
        preferred: bool = False,
        value: Optional[Bytes] = None,
        slots: Optional[int] = None,
    ) -> grpc.Future:
        """``acquire`` as a cancellable ``grpc.Future`` of the raw response
        (used by the Elector). Its exception is a raw ``grpc.RpcError``.
        ``slots`` as for :meth:`acquire`.

        A waiting one (``wait > 0``) that is cancelled, or whose timeout
        passes, gives back a grant it may have been given meanwhile, never
        one a caller was told it holds (see :meth:`acquire`)."""
        asking = self._calls.start(job, holder)
        try:
            fut = self._leases.Acquire.future(
                acquire_request(job, holder, ttl, wait, bind_to_stream, preferred, value, slots), timeout=timeout
            )
        except BaseException:
            asking.end()
            raise

        def done(f: grpc.Future) -> None:
            try:
                gone = f.cancelled() or (
                    f.exception() is not None
                    and f.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
                )
                if not gone and f.exception() is None and f.result().acquired:
                    asking.told(f.result().lease.token)
            finally:
                asking.end()
            if gone and wait > 0:
                self._give_back_later(job, holder, asking.n)

        fut.add_done_callback(done)
        return fut

    def _give_back_later(self, job: str, holder: str, n: int) -> None:
        """The clean-up of the cancelled waiting Acquire numbered ``n`` (its
        registration ended), on a thread of its own: after
        :data:`GIVE_BACK_AFTER`, give the lease back if it is ``holder``'s
        and no caller was told it holds it (see :mod:`leasehold._giveback`).
        Best effort."""

        def give_back() -> None:
            try:
                lease = self.get_lease(job, timeout=5)
                if lease.holder == holder and self._calls.may_give_back(job, holder, n, lease.token):
                    self._call(self._leases.Release, release_request(job, holder, lease.token, True), 5)
            except Exception:  # best effort: the lease runs out on its own
                pass

        t = threading.Timer(GIVE_BACK_AFTER, give_back)
        t.daemon = True
        t.start()

    def lock(
        self,
        job: str,
        ttl: float,
        *,
        timeout: Optional[float] = None,
        name: str = DEFAULT_LOCK_NAME,
        on_lost: Optional[Callable[[int], None]] = None,
        slots: Optional[int] = None,
    ) -> Lock:
        """A :class:`~leasehold.Lock` on ``job``: the lease, held for the
        length of a ``with`` block and renewed every ``ttl / 3`` meanwhile::

            with client.lock("reports", ttl=10, timeout=30) as lock:
                client.checked_write("reports", lock.token, b"cursor", b"42")

        Entering the block waits for the lease up to ``timeout`` seconds
        (``None``: as long as it takes; 0: one try), then raises
        :class:`~leasehold.DeadlineExceeded` (a ``TimeoutError``). Leaving
        it, normally or by an exception, releases the lease. The lock is
        its own holder, ``name@uuid``. If the lease is lost inside the
        block, the block goes on: :attr:`~leasehold.Lock.is_held` turns
        ``False``, :meth:`~leasehold.Lock.check` raises
        :class:`~leasehold.LeaseLost`, and writes with the token are
        :class:`~leasehold.Fenced` once another holder has the lease.
        ``on_lost(token)``, if given, is called once when that happens (on
        the lock's renewal thread; not after a plain release).

        ``slots=N`` (2 to 100) makes it a counted lock (a semaphore, as
        ``consul lock -n N``): up to N locks on ``job`` are held at once,
        each in a slot of its own with its own token. The lock renews and
        releases its slot's job, :attr:`~leasehold.Lock.lease_job`
        (``"{job}#{k}"``, k :attr:`~leasehold.Lock.slot`), and writes
        fenced by its token name that job::

            with client.lock("nightly", ttl=10, slots=2) as lock:
                client.checked_write(lock.lease_job, lock.token, b"cursor", b"42")
        """
        return Lock(self, job, ttl, timeout=timeout, name=name, on_lost=on_lost, slots=slots)

    def renew(
        self,
        job: str,
        holder: str,
        token: int,
        ttl: float,
        *,
        timeout: Optional[float] = None,
        value: Optional[Bytes] = None,
    ) -> Lease:
        """Renews our live lease for ``ttl`` seconds from now. Raises
        :class:`~leasehold.LeaseLost` when it is not ours any more.

        ``value`` ``None`` (the default) keeps the lease's value; given, it
        replaces it (``b""`` clears it; at most 1024 bytes, else
        :class:`~leasehold.InvalidArgument` naming ``"value"``, and nothing
        changed), and watchers see an ``EventKind.VALUE_CHANGED``."""
        return self.renew_lease(job, holder, token, ttl, timeout=timeout, value=value).lease

    def renew_lease(
        self,
        job: str,
        holder: str,
        token: int,
        ttl: float,
        *,
        timeout: Optional[float] = None,
        value: Optional[Bytes] = None,
    ) -> Renewed:
        """:meth:`renew`, with whether a preferred candidate waits: a
        :class:`~leasehold.Renewed` whose ``successor_waiting`` is true
        while an ``acquire(..., preferred=True)`` waits for the job and our
        grant is not a preferred one. Nothing is taken from us: hand over
        (:meth:`transfer_lease` to the first waiter, who is then the
        preferred one) or release when it suits. ``value`` as for
        :meth:`renew`."""
        with self._calls.start(job, holder) as asking:
            r = self._call(self._leases.Renew, renew_request(job, holder, token, ttl, value), timeout)
            lease = lease_from_pb(r.lease)
            asking.told(lease.token)
        return Renewed(lease=lease, successor_waiting=r.successor_waiting)

    def renew_future(
        self, job: str, holder: str, token: int, ttl: float, timeout: float, *, value: Optional[Bytes] = None
    ) -> grpc.Future:
        """``renew`` as a cancellable ``grpc.Future`` of the raw response
        (its ``successor_waiting`` as :meth:`renew_lease`'s; ``value`` as
        :meth:`renew`'s)."""
        asking = self._calls.start(job, holder)
        try:
            fut = self._leases.Renew.future(renew_request(job, holder, token, ttl, value), timeout=timeout)
        except BaseException:
            asking.end()
            raise

        def done(f: grpc.Future) -> None:
            try:
                if not f.cancelled() and f.exception() is None:
                    asking.told(f.result().lease.token)
            finally:
                asking.end()

        fut.add_done_callback(done)
        return fut

    def release(self, job: str, holder: str, token: int, *, timeout: Optional[float] = None) -> None:
        """Releases our lease; the first waiter is granted at once."""
        self._call(self._leases.Release, release_request(job, holder, token), timeout)
        self._calls.released(job, holder)

    def transfer_lease(
        self,
        job: str,
        holder: str,
        token: int,
        to_holder: Optional[str] = None,
        ttl: Optional[float] = None,
        *,
        timeout: Optional[float] = None,
    ) -> Lease:
        """Hands our live lease (``holder`` with ``token``) to a waiting
        Acquire, in one step: the successor is granted ``token + 1`` with no
        moment when the job is free, and its waiting Acquire returns at once.
        The successor is the first waiter in line whose holder is
        ``to_holder``, or the first in line when ``to_holder`` is ``None``;
        its lease lasts ``ttl`` seconds (``None``: the TTL the lease has
        now). Returns the successor's lease.

        Raises :class:`~leasehold.NoSuccessor` when no such waiter waits
        (nothing changed: we still lead), :class:`~leasehold.LeaseLost` when
        the lease is not ``holder``'s with ``token`` any more (nothing
        changed)."""
        r = self._call(self._leases.TransferLease, transfer_request(job, holder, token, to_holder, ttl), timeout)
        self._calls.released(job, holder)
        return lease_from_pb(r.lease)

    def get_lease(self, job: str, *, timeout: Optional[float] = None) -> Lease:
        """The lease of ``job`` (token 0 and no holder if never granted)."""
        return lease_from_pb(self._call(self._leases.GetLease, pb.GetLeaseRequest(job=job), timeout))

    def list_waiters(self, job: str, limit: int = 0, *, timeout: Optional[float] = None) -> Waiters:
        """The candidates: the Acquires waiting for ``job``, in line order
        (the preferred ones first, then the others, each class first come,
        first served), which is the order a release would hand the lease
        over in. A :class:`~leasehold.Waiters`: ``waiters`` (at most
        ``limit``; 0 is the server's default of 100, at most 1000), each a
        :class:`~leasehold.Waiter` (holder, principal, preferred), and
        ``waiting``, how many wait in all::

            line = client.list_waiters("reports")
            print(line.waiting, [w.holder for w in line.waiters])

        A job nobody waits for, or that does not exist, has an empty line
        (not an error). With a policy, this is action ``read``."""
        return waiters_from_pb(
            self._call(self._leases.ListWaiters, pb.ListWaitersRequest(job=job, limit=limit), timeout)
        )

    def delete_job(self, job: str, *, timeout: Optional[float] = None) -> bool:
        """Deletes ``job`` and every key of its fenced store, if its lease is
        not live and no Acquire waits for it (:class:`~leasehold.JobInUse`
        otherwise). Returns whether there was such a job. A job created
        again later gets tokens above its old ones."""
        return self._call(self._leases.DeleteJob, pb.DeleteJobRequest(job=job), timeout).deleted

    def list_leases(self, prefix: str = "", *, timeout: Optional[float] = None) -> List[Lease]:
        """Every lease whose job starts with ``prefix``, all pages."""
        out: List[Lease] = []
        page = ""
        while True:
            r = self._call(
                self._leases.ListLeases,
                pb.ListLeasesRequest(prefix=prefix, page_size=_PAGE_SIZE, page_token=page),
                timeout,
            )
            out.extend(lease_from_pb(l) for l in r.leases)
            if not r.next_page_token:
                return out
            page = r.next_page_token

    def watch(self, job: str, *, timeout: Optional[float] = None) -> Watch:
        """Watches ``job``: the current lease first, then every change of
        holder or token, and of the holder's value (``VALUE_CHANGED``).
        ``timeout`` (default: none) bounds the whole watch."""
        return Watch(self._leases.WatchLease(pb.WatchLeaseRequest(job=job), timeout=timeout))

    def observe(self, job: str, *, timeout: Optional[float] = None) -> Watch:
        """A stream of ``job``'s lease changes (``WatchLease``): a
        :class:`~leasehold.LeaseEvent` for the current state first (kind
        ``CURRENT``), then one per change (``ACQUIRED``, ``RELEASED``,
        ``EXPIRED``, and ``VALUE_CHANGED`` when the holder changed its
        value: same holder and token); renewals send nothing. Each
        lease carries the holder's ``value``. The same as :meth:`watch`::

            with client.observe("reports") as changes:
                for change in changes:
                    print(change.kind, change.lease.holder, change.lease.token)

        ``close()`` (from any thread) or leaving the ``with`` block ends it
        cleanly; a stream the server breaks raises its typed error.
        ``timeout`` (default: none) bounds the whole observation."""
        return self.watch(job, timeout=timeout)

    def join_shards(
        self,
        group: str,
        name: str,
        shards: int,
        *,
        ttl: float = 10.0,
        revoke_timeout: Optional[float] = None,
        on_assigned: Optional[Callable[[ShardAssigned], object]] = None,
        on_revoked: Optional[Callable[[ShardRevoked], object]] = None,
        on_lost: Optional[Callable[[ShardLost], object]] = None,
    ) -> ShardMember:
        """A member of the shard group ``group`` of ``shards`` shards (1 to
        1024, fixed by the group's first member), named ``name``
        (:attr:`~leasehold.ShardMember.member` is ``name@uuid``): a
        :class:`~leasehold.ShardMember`, not yet joined; ``start()`` or its
        ``with`` block joins. Its callbacks run on a thread of its own,
        one event at a time; a revoke is acknowledged once ``on_revoked``
        has returned, so stop the shard's work in it::

            with client.join_shards("orders", "worker", 16, ttl=10,
                                    on_assigned=start, on_revoked=stop, on_lost=stop) as member:
                member.wait()

        Shard k is the job ``"{group}/{k}"`` with its own lease and token
        (the event's ``job`` and ``token``): write its state under that
        job with that token, so that a stale owner is fenced. The
        holdings are renewed every ``ttl / 3``; ``revoke_timeout``
        (default: the TTL) is how long a revoke may take before the shard
        moves anyway. A group of another count is
        :class:`~leasehold.InvalidArgument` naming ``"shards"`` (from
        ``start()``); an empty group or name, or a count that is not 1 to
        1024, raises it at once. The asyncio form,
        :meth:`leasehold.aio.AsyncClient.join_shards`, is an async iterator
        of the events with a ``run(work)`` helper."""
        return ShardMember(
            self, group, name, shards, ttl=ttl, revoke_timeout=revoke_timeout,
            on_assigned=on_assigned, on_revoked=on_revoked, on_lost=on_lost,
        )

    def get_group(self, group: str, *, timeout: Optional[float] = None) -> ShardGroup:
        """The shard group ``group`` as the server sees it (``GetGroup``):
        a :class:`~leasehold.ShardGroup` with its count of shards (0 when
        never joined), its live members (each a
        :class:`~leasehold.ShardGroupMember`: ``member``, the shards it
        owns) and every shard's :class:`~leasehold.ShardOwner` (``job``,
        ``member``, ``None`` when nobody owns it, and its newest
        ``token``)::

            g = client.get_group("orders")
            print(g.shards, {m.member: m.shards for m in g.members})

        With a policy, this is action ``read`` on the group's job."""
        return group_from_pb(self._call(self._shards.GetGroup, pb.GetGroupRequest(group=group), timeout))

    def history(
        self, job: str, page_size: int = 0, page_token: str = "", *, timeout: Optional[float] = None
    ) -> HistoryPage:
        """One page of ``job``'s history (``GetHistory``): a
        :class:`~leasehold.HistoryPage` of :class:`~leasehold.Tenure`, one
        per token granted, newest first, with how each ended; its
        ``next_page_token`` asks for the older ones, and the first page
        also has the chaos API's actions on the job. ``page_size`` 0 is the
        server's default (100; at most 1000). A job with no history has an
        empty one; a ``page_token`` the server did not issue for this job
        raises :class:`~leasehold.InvalidArgument` (``field``
        ``"page_token"``)."""
        r = self._call(
            self._leases.GetHistory,
            pb.GetHistoryRequest(job=job, page_size=page_size, page_token=page_token),
            timeout,
        )
        return history_from_pb(r)

    def history_all(self, job: str, page_size: int = 0, *, timeout: Optional[float] = None) -> Iterator[Tenure]:
        """Every tenure of ``job``'s history, newest first, asking for one
        page after another as the iteration goes (each call bounded by
        ``timeout``)."""
        token = ""
        while True:
            page = self.history(job, page_size, token, timeout=timeout)
            yield from page.tenures
            if not page.next_page_token:
                return
            token = page.next_page_token

    def signing_keys(self, *, timeout: Optional[float] = None) -> KeySet:
        """The server's public keys, which verify grants' proofs
        (``Lease.proof``): a :class:`~leasehold.proof.KeySet`, for
        :func:`leasehold.proof.verify`. The first signs new grants; every
        one listed verifies. Empty when the server signs nothing. The same
        JWKS is served at ``GET /keys`` on the admin port."""
        return KeySet.from_pb(self._call(self._leases.GetSigningKeys, pb.GetSigningKeysRequest(), timeout))

    def chaos(self) -> Chaos:
        """The chaos API of a server started with ``--enable-chaos`` (test
        and staging servers only), for tests of workers that must step
        down: a :class:`~leasehold.Chaos` whose ``expire(job)``,
        ``pause(job, seconds)``, ``delay(job, seconds)``, ``fence(job,
        writes)``, ``transfer(job)`` and ``clear(job=None)`` return a
        :class:`~leasehold.ChaosOutcome` (the job's lease, and what is in
        force on it)::

            client.chaos().expire("sync")  # the holder's lease ends now

        A server without the chaos API raises
        :class:`~leasehold.ChaosDisabled`."""
        return Chaos(self._chaos, self._call)

    # Fenced store

    def checked_write(
        self,
        job: str,
        token: Optional[int],
        key: Bytes,
        value: Bytes,
        *,
        proof: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> int:
        """Writes ``value`` under (job, key), fenced by ``token``; returns the
        key's new version. Raises :class:`~leasehold.Fenced` when ``token``
        is not the job's live token.

        ``proof`` (a grant's ``Lease.proof``) may stand in for the token:
        the server verifies it with its own keys and fences the write with
        the proof's token, so a service that is not the holder can forward
        the holder's write. ``token`` may then be ``None`` (or 0); if given,
        it must be the proof's (else :class:`~leasehold.InvalidArgument`,
        ``field`` ``"token"``). A proof that does not verify, or is for
        another job, raises :class:`~leasehold.InvalidArgument` (``field``
        ``"proof"``); a valid proof whose token is no longer the live one,
        :class:`~leasehold.Fenced`."""
        return self._call(
            self._store.CheckedWrite, write_request(job, token, key, value, False, proof), timeout
        ).version

    def delete(
        self,
        job: str,
        token: Optional[int],
        key: Bytes,
        *,
        proof: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> int:
        """Deletes (job, key), fenced by ``token`` (or by ``proof``, as
        :meth:`checked_write`); returns the new version."""
        return self._call(
            self._store.CheckedWrite, write_request(job, token, key, b"", True, proof), timeout
        ).version

    def write_stream(self) -> WriteStream:
        """Opens a :class:`WriteStream`: fenced writes, one or many per
        message, over one long-lived stream. Close it (or use it as a
        context manager); errors surface on its first write."""
        return WriteStream(self._store, self._timeout)

    def read(self, job: str, key: Bytes, *, timeout: Optional[float] = None) -> Value:
        """Reads (job, key); linearizable."""
        return value_from_pb(self._call(self._store.Read, pb.ReadRequest(job=job, key=as_bytes(key)), timeout))

    def list_keys(self, job: str, prefix: Bytes = b"", *, timeout: Optional[float] = None) -> List[KeyInfo]:
        """Every live key of ``job`` starting with ``prefix``, all pages."""
        out: List[KeyInfo] = []
        page = b""
        while True:
            r = self._call(
                self._store.ListKeys,
                pb.ListKeysRequest(job=job, prefix=as_bytes(prefix), page_size=_PAGE_SIZE, page_token=page),
                timeout,
            )
            out.extend(key_from_pb(k) for k in r.keys)
            if not r.next_page_token:
                return out
            page = bytes(r.next_page_token)
