"""The blocking :class:`ShardMember`, from :meth:`leasehold.Client.join_shards`:
a member of a shard group (``Shards.Join``) whose events are callbacks
run on a thread of its own.

It follows the same rules as :class:`leasehold.aio.AsyncShardMember` (see
:mod:`leasehold.aio_shards`): heartbeats every TTL/3, every shard reported
lost at once when the stream breaks and a rejoin under the same identity,
100 ms apart doubling to 1 s, and any other error ending the membership.
A revoke is acknowledged as soon as ``on_revoked`` has returned: stop the
shard's work inside it::

    def assigned(shard):                 # a ShardAssigned: shard, token, job
        workers[shard.shard] = start_consumer(shard.shard, shard.job, shard.token)

    def revoked(shard):                  # returns once the work has stopped
        workers.pop(shard.shard).stop_and_wait()

    with client.join_shards("orders", "worker", 16, ttl=10,
                            on_assigned=assigned, on_revoked=revoked, on_lost=revoked) as member:
        member.wait()                    # until the membership ends
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import grpc

from . import errors
from ._shards import LEAVE_WAIT, REJOIN_FIRST, REJOIN_MAX, Ownership, ended_error, join_request, joined_shards
from .types import ShardAssigned, ShardEvent, ShardLost, ShardRevoked, check_join_args, elector_holder
from .v1 import leasehold_pb2 as pb

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

log = logging.getLogger("leasehold.shards")

_LEAVE = object()  # in a stream's queue: half-close it


class _Stream:
    """One Join call: its requests come from a queue (acknowledgements, and
    the leave), with a heartbeat whenever nothing was sent for TTL/3."""

    def __init__(self, stub, first: pb.JoinRequest, every: float) -> None:
        self.queue: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self._first = first
        self._every = every
        self.call = stub.Join(self._requests())

    def _requests(self) -> Iterator[pb.JoinRequest]:
        # Run by gRPC's sending thread: it may block here.
        yield self._first
        beat = time.monotonic() + self._every
        while True:
            try:
                item = self.queue.get(timeout=max(beat - time.monotonic(), 0))
            except queue.Empty:
                yield pb.JoinRequest()  # a heartbeat: renews every holding
                beat = time.monotonic() + self._every
                continue
            if item is _LEAVE:
                return  # half-closes the stream: the server frees our shards
            yield pb.JoinRequest(released=[item])  # type: ignore[list-item]  # renews too
            beat = time.monotonic() + self._every


class ShardMember:
    """A member of a shard group, its events told to callbacks on a thread
    of its own (see the module docs). Made by :meth:`Client.join_shards
    <leasehold.Client.join_shards>`; :meth:`start` (or entering its
    ``with`` block) joins, raising the server's refusal
    (:class:`~leasehold.InvalidArgument` naming ``shards`` when the group
    has another count, ...).

    ``on_assigned(shard)``, ``on_revoked(shard)`` and ``on_lost(shard)``
    get the :class:`~leasehold.ShardAssigned`,
    :class:`~leasehold.ShardRevoked` and :class:`~leasehold.ShardLost`,
    one at a time, in order, on the member's thread. **The revoke is
    acknowledged once ``on_revoked`` returns**: stop the shard's work
    before returning. A callback that raises is logged (after
    ``on_revoked``, the revoke is still acknowledged). Heartbeats do not
    wait for the callbacks."""

    def __init__(
        self,
        client: "Client",
        group: str,
        name: str,
        shards: int,
        *,
        ttl: float = 10.0,
        revoke_timeout: Optional[float] = None,
        on_assigned: Optional[Callable[[ShardAssigned], object]] = None,
        on_revoked: Optional[Callable[[ShardRevoked], object]] = None,
        on_lost: Optional[Callable[[ShardLost], object]] = None,
    ) -> None:
        check_join_args(group, name, shards, ttl, revoke_timeout)
        self._client = client
        self._group = group
        self._count = shards
        self._ttl = float(ttl)
        self._member = elector_holder(name)
        self._first = join_request(group, self._member, shards, self._ttl, revoke_timeout)
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._on_lost = on_lost
        self._ownership = Ownership()
        self._lock = threading.Lock()
        self._stream: Optional[_Stream] = None
        self._thread: Optional[threading.Thread] = None
        self._leaving = threading.Event()
        self._ended = threading.Event()
        self._error: Optional[errors.LeaseholdError] = None

    @property
    def member(self) -> str:
        """This member's identity, ``name@uuid`` (a UUID made for it)."""
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

    def start(self) -> "ShardMember":
        """Joins the group and starts the member's thread (once). Raises
        the typed error of a refusal."""
        with self._lock:
            if self._thread is not None:
                return self
            if self._leaving.is_set():
                raise RuntimeError("the shard member left")
            self._stream = self._open()
            self._thread = threading.Thread(
                target=self._run, name=f"leasehold-shards-{self._group}", daemon=True
            )
            self._thread.start()
        return self

    def __enter__(self) -> "ShardMember":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.leave()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the membership ended (left, or an error: see
        :attr:`error`); whether it did within ``timeout`` seconds."""
        return self._ended.wait(timeout)

    def leave(self) -> None:
        """Leaves the group: half-closes the stream, and the server hands
        every shard to the members waiting for it at once. Waits (up to
        5 s) for the server to end the stream and for the member's thread
        (unless called from a callback). Does not raise; no callback runs
        after it returns."""
        self._leaving.set()
        with self._lock:
            stream, thread = self._stream, self._thread
        if stream is not None:
            stream.queue.put(_LEAVE)
        if thread is None:
            self._ended.set()
            return
        if thread is threading.current_thread():
            return
        thread.join(LEAVE_WAIT + 1.0)
        if thread.is_alive() and stream is not None:
            stream.call.cancel()
            thread.join()

    def close(self) -> None:
        """The same as :meth:`leave`."""
        self.leave()

    # The member's thread

    def _open(self) -> _Stream:
        """Opens a Join stream and reads JOINED; raises the typed error of a
        refusal. A stream with no answer within the client's timeout is
        cancelled (``DeadlineExceeded``)."""
        stream = _Stream(self._client._shards, self._first, self._ttl / 3)
        timer = threading.Timer(self._client.timeout, stream.call.cancel)
        timer.daemon = True
        timer.start()
        started = time.monotonic()
        try:
            m = next(stream.call, None)
            if m is None:
                raise ended_error()
            self._count = joined_shards(m)
            return stream
        except grpc.RpcError as e:
            stream.queue.put(_LEAVE)
            if e.code() == grpc.StatusCode.CANCELLED and time.monotonic() - started >= self._client.timeout:
                raise errors.DeadlineExceeded(
                    f"no answer to the Join within {self._client.timeout:g}s",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                ) from None
            raise errors.stream_error(e) from None
        except BaseException:
            stream.queue.put(_LEAVE)
            stream.call.cancel()
            raise
        finally:
            timer.cancel()

    def _run(self) -> None:
        try:
            while True:
                stream = self._stream
                assert stream is not None
                err = self._serve(stream)
                stream.queue.put(_LEAVE)
                stream.call.cancel()
                if err is None or self._leaving.is_set():
                    return
                # Stop every shard's work: it may have moved while the
                # stream was down.
                for lost in self._ownership.lose_all():
                    self._tell(self._on_lost, lost)
                if not err.retryable:
                    self._fail(err)
                    return
                log.warning("%s: the Join stream broke, joining again as %s: %s", self._group, self._member, err)
                nxt = self._rejoin()
                if nxt is None:
                    return
                with self._lock:
                    self._stream = nxt
        except Exception as e:  # never die silently
            log.exception("the shard member of %s failed", self._group)
            self._fail(errors.LeaseholdError(f"the shard member failed: {e!r}"))
        finally:
            self._ended.set()

    def _fail(self, err: errors.LeaseholdError) -> None:
        log.error("%s: the membership of %s ended: %s", self._group, self._member, err)
        self._error = err

    def _rejoin(self) -> Optional[_Stream]:
        backoff = REJOIN_FIRST
        while not self._leaving.wait(backoff):
            backoff = min(backoff * 2, REJOIN_MAX)
            try:
                return self._open()
            except errors.LeaseholdError as e:
                if not e.retryable:
                    self._fail(e)
                    return None
        return None

    def _serve(self, stream: _Stream) -> Optional[errors.LeaseholdError]:
        """Reads one stream until it ends: ``None`` when the member left,
        else the error it broke with."""
        try:
            for m in stream.call:
                ev = self._ownership.told(m)
                if ev is None or self._leaving.is_set():
                    continue
                if isinstance(ev, ShardAssigned):
                    self._tell(self._on_assigned, ev)
                elif isinstance(ev, ShardRevoked):
                    self._tell(self._on_revoked, ev)
                    # Only now: the callback has stopped the shard's work.
                    self._ownership.released([ev.shard])
                    stream.queue.put(ev.shard)
                else:
                    self._tell(self._on_lost, ev)
        except grpc.RpcError as e:
            if self._leaving.is_set():
                return None
            return errors.stream_error(e)
        return None if self._leaving.is_set() else ended_error()

    def _tell(self, cb: Optional[Callable[..., object]], ev: ShardEvent) -> None:
        if cb is None:
            return
        try:
            cb(ev)
        except Exception:
            log.exception("a shard member callback of %s failed", self._group)
