"""A lease held for the length of a ``with`` block: :meth:`Client.lock
<leasehold.Client.lock>` gives a :class:`Lock`, :meth:`AsyncClient.lock
<leasehold.aio.AsyncClient.lock>` an :class:`AsyncLock`::

    with client.lock("reports", ttl=10) as lock:
        client.checked_write("reports", lock.token, b"cursor", b"42")

    async with client.lock("reports", ttl=10) as lock:
        await client.checked_write("reports", lock.token, b"cursor", b"42")

Entering the block waits for the lease (up to ``timeout`` seconds, or for
as long as it takes when ``timeout`` is ``None``); while the block runs, a
thread (an asyncio task for :class:`AsyncLock`) renews it every ``ttl / 3``;
leaving the block, normally or by an exception, stops the renewals and
releases it.

**If the lease is lost inside the block** (a renewal is refused because
the lease expired and went to someone else, or no renewal succeeded before
the lock's own deadline: the instant the last successful grant or renewal
was *sent*, plus the TTL), the lock does not interrupt the block: it cannot
stop your code safely, and a paused process would not notice anyway.
Instead :attr:`~Lock.is_held` turns ``False``, :attr:`~Lock.lost` ``True``,
:meth:`~Lock.wait_lost` returns and :meth:`~Lock.check` raises
:class:`~leasehold.LeaseLost`; and every write made with :attr:`~Lock.token`
after another holder got the lease is refused with
:class:`~leasehold.Fenced`. Carry the token into every write, and check
:attr:`~Lock.is_held` (or call :meth:`~Lock.check`) between steps of a long
task. Leaving the block then raises nothing of its own.

Each lock is its own holder, ``name@uuid`` with a UUID made for it: two
locks on one job, in one process or in two, exclude each other (a lock is
not re-entrant: a second ``lock`` on the same job inside the first's block
waits for the first).

**A counted lock** (``slots=N``, 2 to 100: a semaphore, as ``consul lock
-n N``) is held by up to N locks on the job at once, each in a slot of its
own. Slot k is a job of its own, ``"{job}#{k}"``, with its own token: the
lock renews and releases that job, :attr:`~Lock.lease_job`, and writes
fenced by :attr:`~Lock.token` must name it::

    with client.lock("nightly", ttl=10, slots=2) as lock:   # at most 2 at once
        client.checked_write(lock.lease_job, lock.token, b"progress", b"50%")
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

import grpc

from . import errors
from ._retry import Backoff, Warnings
from .types import check_elector_args, check_slots, elector_holder

if TYPE_CHECKING:  # pragma: no cover
    from .aio import AsyncClient
    from .client import Client

log = logging.getLogger("leasehold.lock")

#: The holder name a lock uses when given none (the holder is
#: ``name@uuid``).
DEFAULT_LOCK_NAME = "lock"
#: The longest one waiting Acquire of a lock asks the server to wait
#: (seconds); a lock that waits longer asks again.
MAX_WAIT = 30.0

#: Errors a renewal cannot come back from: the lease is gone, or the
#: server refuses the request itself or the caller.
_FINAL = (errors.LeaseLost, errors.InvalidArgument, errors.Unauthenticated, errors.PermissionDenied)


def _check_timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    timeout = float(timeout)
    if timeout < 0:
        raise ValueError("timeout must not be negative")
    return timeout


def _timed_out(job: str, timeout: float) -> errors.DeadlineExceeded:
    return errors.DeadlineExceeded(
        f"lock on {job!r}: not acquired within {timeout:g}s", code=grpc.StatusCode.DEADLINE_EXCEEDED
    )


def _lost_error(job: str, token: int, why: str) -> errors.LeaseLost:
    return errors.LeaseLost(f"lock on {job!r} (token {token}) lost: {why}", code=grpc.StatusCode.FAILED_PRECONDITION)


class _State:
    """What both locks share: the fields, the properties that read them."""

    def __init__(
        self,
        job: str,
        ttl: float,
        timeout: Optional[float],
        name: str,
        on_lost: Optional[Callable[[int], Any]] = None,
        slots: Optional[int] = None,
    ) -> None:
        check_elector_args(job, name, ttl)
        self._slots = check_slots(slots)
        self._on_lost = on_lost
        self._job = job
        # The job our grant is on (the slot's, for a counted lock), and the
        # slot: set with the token.
        self._lease_job: Optional[str] = None
        self._slot: Optional[int] = None
        self._ttl = float(ttl)
        self._timeout = _check_timeout(timeout)
        self._holder = elector_holder(name)
        self._token: Optional[int] = None
        self._proof: Optional[str] = None
        self._deadline = 0.0
        self._lost: Optional[errors.LeaseholdError] = None
        self._acquired = False
        self._released = False
        self._warnings = Warnings(log)

    @property
    def job(self) -> str:
        return self._job

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def slots(self) -> int:
        """The count of slots the lock asks for (``slots=``); 0 for an
        ordinary lock."""
        return self._slots

    @property
    def lease_job(self) -> Optional[str]:
        """The job our lease is on, set with :attr:`token`: :attr:`job`,
        or for a counted lock (``slots=``) its slot's job,
        ``"{job}#{slot}"``. The lock renews and releases it, and writes
        fenced by :attr:`token` name it. ``None`` before the lock is
        acquired; it stays set after, as the token does."""
        return self._lease_job

    @property
    def slot(self) -> Optional[int]:
        """The slot we hold, for a counted lock, set with :attr:`token`;
        ``None`` before, and for an ordinary lock."""
        return self._slot

    def _granted(self, job: str, slot: int) -> str:
        """Notes the job and slot of our grant; the job, for the calls."""
        self._lease_job = job or self._job
        self._slot = slot if self._slots and job and job != self._job else None
        return self._lease_job

    @property
    def holder(self) -> str:
        """Our holder identity, ``name@uuid``, the UUID this lock's own."""
        return self._holder

    @property
    def token(self) -> Optional[int]:
        """The fencing token of our grant, from the moment it is acquired
        (``None`` before). It stays set after the lease is lost or
        released: writes made with it then are fenced."""
        return self._token

    @property
    def proof(self) -> Optional[str]:
        """The proof of our grant (``Lease.proof``, for storage that checks
        it with :func:`leasehold.proof.verify`), set with :attr:`token`;
        ``None`` before, or when the server signs nothing. It proves the
        token was issued, not that the lease is still held."""
        return self._proof

    @property
    def is_held(self) -> bool:
        """Whether we hold the lease: acquired, not released, not lost, and
        not past our own deadline (even if the renewal has not caught up
        yet)."""
        return (
            self._token is not None
            and not self._released
            and self._lost is None
            and time.monotonic() < self._deadline
        )

    @property
    def lost(self) -> bool:
        """Whether the lease was lost while we meant to hold it (see the
        module's documentation). ``False`` after a plain release."""
        return self._lost is not None or (
            self._token is not None and not self._released and time.monotonic() >= self._deadline
        )

    @property
    def error(self) -> Optional[errors.LeaseholdError]:
        """Why the lease was lost (a :class:`~leasehold.LeaseLost`, or the
        error that refused a renewal), else ``None``."""
        return self._lost

    def check(self) -> None:
        """Raises :class:`~leasehold.LeaseLost` unless :attr:`is_held`."""
        if self.is_held:
            return
        if self._lost is not None:
            raise self._lost
        if self._token is None:
            raise errors.LeaseLost(f"lock on {self._job!r} not acquired", code=grpc.StatusCode.FAILED_PRECONDITION)
        if self._released:
            raise _lost_error(self._job, self._token, "released")
        raise _lost_error(self._job, self._token, "its deadline passed without a renewal")

    def _anchor_needed(self, sent: float) -> bool:
        """A grant that came more than ttl/10 after its Acquire was sent is
        confirmed by a Renew, whose send time anchors our deadline (as the
        Elector does): counted from the Acquire's send, the deadline could
        already be near or past."""
        return time.monotonic() >= sent + self._ttl / 10

    def _log_lost(self, token: int, err: errors.LeaseholdError) -> None:
        log.warning("lock on %s: lease lost (token %d): %s", self._job, token, err)

    def _call_on_lost(self, token: int) -> Any:
        """Calls ``on_lost(token)``, if given; what it returned (an
        awaitable, for the asyncio lock), or ``None``."""
        if self._on_lost is None:
            return None
        try:
            return self._on_lost(token)
        except Exception:  # a user callback failed: the loss stands
            log.exception("lock on %s: on_lost callback failed", self._job)
            return None

    def __repr__(self) -> str:
        state = "held" if self.is_held else "lost" if self.lost else "released" if self._released else "not held"
        on = f" lease_job={self._lease_job!r}" if self._lease_job not in (None, self._job) else ""
        return f"<{type(self).__name__} job={self._job!r}{on} holder={self._holder!r} token={self._token} {state}>"


class Lock(_State):
    """A lease on ``job`` held for the length of a ``with`` block (or from
    :meth:`acquire` to :meth:`release`), renewed in the background every
    ``ttl / 3``. Made by :meth:`Client.lock <leasehold.Client.lock>`; see
    the module's documentation for what happens when the lease is lost
    inside the block."""

    def __init__(
        self,
        client: "Client",
        job: str,
        ttl: float,
        *,
        timeout: Optional[float] = None,
        name: str = DEFAULT_LOCK_NAME,
        on_lost: Optional[Callable[[int], None]] = None,
        slots: Optional[int] = None,
    ) -> None:
        super().__init__(job, ttl, timeout, name, on_lost, slots)
        self._client = client
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None

    # Acquiring

    def acquire(self) -> "Lock":
        """Waits for the lease: up to the lock's ``timeout`` (``None``: as
        long as it takes; 0: one try), then raises
        :class:`~leasehold.DeadlineExceeded` (a ``TimeoutError``). Failures
        worth retrying (:class:`~leasehold.Unavailable`) are retried with
        backoff within that time; others (``InvalidArgument``,
        ``PermissionDenied``, ``QuotaExceeded``...) are raised. A server
        that stops answering can hold a call up to the client's timeout
        past ``timeout``. Once only."""
        with self._cond:
            if self._acquired:
                raise RuntimeError("a Lock is acquired once; make a new one with client.lock()")
            self._acquired = True
        end = None if self._timeout is None else time.monotonic() + self._timeout
        backoff = Backoff.campaign(self._ttl)
        while True:
            left = None if end is None else end - time.monotonic()
            wait = MAX_WAIT if left is None else max(min(left, MAX_WAIT), 0.0)
            call_timeout = wait + self._client.timeout
            sent = time.monotonic()
            fut = self._client.acquire_future(
                self._job, self._holder, self._ttl, wait, call_timeout, slots=self._slots
            )
            try:
                r = fut.result()
            except grpc.RpcError as e:
                err = errors.from_call_error(e, sent, call_timeout)
                if not err.retryable:
                    raise err from None
                self._warnings.warn("lock on %s: acquire failed, retrying: %s", self._job, err)
                pause = backoff.next()
                if end is not None:
                    if time.monotonic() >= end:
                        raise _timed_out(self._job, self._timeout) from err  # type: ignore[arg-type]
                    pause = min(pause, end - time.monotonic())  # and try once more at the end
                time.sleep(max(pause, 0.0))
                continue
            except BaseException:
                # Interrupted (KeyboardInterrupt...): cancelling gives back
                # a grant that may have come meanwhile.
                fut.cancel()
                raise
            backoff.reset()
            if r.acquired:
                token = r.lease.token
                # A counted grant is on its slot's job: renewed and released there.
                on = r.lease.job or self._job
                anchor: Optional[float] = sent
                if self._anchor_needed(sent):
                    anchor = time.monotonic()
                    try:
                        self._client.renew(on, self._holder, token, self._ttl, timeout=self._ttl / 2)
                    except errors.LeaseholdError as e:
                        log.warning("lock on %s: granted token %d, but the confirming renew failed: %s",
                                    self._job, token, e)
                        anchor = None
                if anchor is not None:
                    self._proof = r.lease.proof or None
                    self._granted(r.lease.job, r.lease.slot)
                    self._hold(token, anchor)
                    return self
            if end is not None and time.monotonic() >= end:
                raise _timed_out(self._job, self._timeout)  # type: ignore[arg-type]

    def _hold(self, token: int, anchor: float) -> None:
        with self._cond:
            self._token = token
            self._deadline = anchor + self._ttl
        log.debug("lock on %s: acquired with token %d", self._job, token)
        self._thread = threading.Thread(
            target=self._renew_loop, args=(token, anchor), name=f"leasehold-lock-{self._job}", daemon=True
        )
        self._thread.start()

    # Renewing, on the lock's thread

    def _renew_loop(self, token: int, anchor: float) -> None:
        every = self._ttl / 3
        retry = Backoff.renew(self._ttl)
        deadline = anchor + self._ttl
        nxt = anchor + every
        try:
            while True:
                with self._cond:
                    while not self._stopping:
                        left = min(nxt, deadline) - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    if self._stopping:
                        return
                now = time.monotonic()
                if now >= deadline:
                    self._set_lost(token, _lost_error(self._job, token, "its deadline passed without a renewal"))
                    return
                fut = self._client.renew_future(self._lease_job, self._holder, token, self._ttl, deadline - now)
                fut.add_done_callback(lambda _: self._notify())
                with self._cond:
                    while not fut.done() and not self._stopping and time.monotonic() < deadline:
                        self._cond.wait(max(deadline - time.monotonic(), 0))
                    stopping = self._stopping
                if not fut.done():
                    fut.cancel()
                    if stopping:
                        return
                    self._set_lost(token, _lost_error(self._job, token, "no renewal answered before its deadline"))
                    return
                if fut.cancelled():
                    return
                err = fut.exception()
                if err is None:
                    deadline = now + self._ttl
                    nxt = now + every
                    retry.reset()
                    with self._cond:
                        self._deadline = deadline
                    continue
                e = errors.from_rpc_error(err) if isinstance(err, grpc.RpcError) else err
                if isinstance(e, _FINAL):
                    self._set_lost(token, e)
                    return
                self._warnings.warn("lock on %s: renew of token %d failed, retrying: %s", self._job, token, e)
                nxt = time.monotonic() + retry.next_before(deadline)
        except Exception as e:  # never die silently: count the lease as lost
            log.exception("lock on %s: renewals failed", self._job)
            self._set_lost(token, _lost_error(self._job, token, f"renewals failed: {e!r}"))

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _set_lost(self, token: int, err: errors.LeaseholdError) -> None:
        with self._cond:
            first = self._lost is None and not self._released
            if self._lost is None:
                self._lost = err
            self._cond.notify_all()
        self._log_lost(token, err)
        if first:
            self._call_on_lost(token)

    # Waiting and releasing

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until the lease is lost (or released); ``True`` once it
        is, ``False`` on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._lost is not None or self._released, timeout)

    def release(self) -> None:
        """Stops the renewals and releases the lease, if held (once; later
        calls do nothing). Does not raise: a release that fails is logged,
        and the lease then runs out on its own within its TTL."""
        with self._cond:
            if self._released:
                return
            self._released = True
            self._stopping = True
            self._cond.notify_all()
            token, deadline = self._token, self._deadline
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if token is None:
            return
        # Also after a loss: past our own deadline the server may still
        # hold the lease for us, and a release with our token can free
        # nobody else's.
        timeout = min(self._client.timeout, max(deadline - time.monotonic(), 0.2))
        try:
            self._client.release(self._lease_job or self._job, self._holder, token, timeout=timeout)
        except errors.LeaseLost:
            pass
        except errors.LeaseholdError as e:
            log.warning("lock on %s: release of token %d failed (it runs out on its own): %s", self._job, token, e)
        log.debug("lock on %s: released token %d", self._job, token)

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class AsyncLock(_State):
    """The asyncio :class:`Lock`, from :meth:`AsyncClient.lock
    <leasehold.aio.AsyncClient.lock>`: ``async with client.lock(job,
    ttl=10) as lock:``. The renewals run as a task on the event loop that
    acquired it. Cancelling a task waiting to acquire gives back a grant
    that may have come meanwhile (as :meth:`AsyncClient.acquire
    <leasehold.aio.AsyncClient.acquire>` does)."""

    def __init__(
        self,
        client: "AsyncClient",
        job: str,
        ttl: float,
        *,
        timeout: Optional[float] = None,
        name: str = DEFAULT_LOCK_NAME,
        on_lost: Optional[Callable[[int], Any]] = None,
        slots: Optional[int] = None,
    ) -> None:
        super().__init__(job, ttl, timeout, name, on_lost, slots)
        self._client = client
        self._callback_task: Optional["asyncio.Future[Any]"] = None
        self._task: Optional["asyncio.Task[None]"] = None
        self._stop: Optional[asyncio.Event] = None
        self._changed: Optional[asyncio.Event] = None

    async def acquire(self) -> "AsyncLock":
        """As :meth:`Lock.acquire`."""
        if self._acquired:
            raise RuntimeError("an AsyncLock is acquired once; make a new one with client.lock()")
        self._acquired = True
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        end = None if self._timeout is None else time.monotonic() + self._timeout
        backoff = Backoff.campaign(self._ttl)
        while True:
            left = None if end is None else end - time.monotonic()
            wait = MAX_WAIT if left is None else max(min(left, MAX_WAIT), 0.0)
            sent = time.monotonic()
            try:
                a = await self._client.acquire(
                    self._job, self._holder, self._ttl, wait, timeout=wait + self._client.timeout, slots=self._slots
                )
            except errors.LeaseholdError as err:
                if not err.retryable:
                    raise
                self._warnings.warn("lock on %s: acquire failed, retrying: %s", self._job, err)
                pause = backoff.next()
                if end is not None:
                    if time.monotonic() >= end:
                        raise _timed_out(self._job, self._timeout) from err  # type: ignore[arg-type]
                    pause = min(pause, end - time.monotonic())  # and try once more at the end
                await asyncio.sleep(max(pause, 0.0))
                continue
            backoff.reset()
            if a.acquired:
                token = a.lease.token
                on = a.lease.job or self._job  # a counted grant's slot job
                anchor: Optional[float] = sent
                if self._anchor_needed(sent):
                    anchor = time.monotonic()
                    try:
                        await self._client.renew(on, self._holder, token, self._ttl, timeout=self._ttl / 2)
                    except errors.LeaseholdError as e:
                        log.warning("lock on %s: granted token %d, but the confirming renew failed: %s",
                                    self._job, token, e)
                        anchor = None
                if anchor is not None:
                    self._proof = a.lease.proof
                    self._granted(a.lease.job, a.lease.slot)
                    self._token = token
                    self._deadline = anchor + self._ttl
                    log.debug("lock on %s: acquired with token %d", self._job, token)
                    self._task = asyncio.get_running_loop().create_task(
                        self._renew_loop(token, anchor), name=f"leasehold-lock-{self._job}"
                    )
                    return self
            if end is not None and time.monotonic() >= end:
                raise _timed_out(self._job, self._timeout)  # type: ignore[arg-type]

    async def _renew_loop(self, token: int, anchor: float) -> None:
        assert self._stop is not None
        every = self._ttl / 3
        retry = Backoff.renew(self._ttl)
        deadline = anchor + self._ttl
        nxt = anchor + every
        try:
            while True:
                try:
                    await asyncio.wait_for(self._stop.wait(), max(min(nxt, deadline) - time.monotonic(), 0))
                    return
                except asyncio.TimeoutError:
                    pass
                now = time.monotonic()
                if now >= deadline:
                    self._set_lost(token, _lost_error(self._job, token, "its deadline passed without a renewal"))
                    return
                renew = asyncio.ensure_future(
                    self._client.renew(self._lease_job, self._holder, token, self._ttl, timeout=deadline - now)
                )
                stop = asyncio.ensure_future(self._stop.wait())
                try:
                    done, _ = await asyncio.wait(
                        {renew, stop}, timeout=max(deadline - now, 0), return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    stop.cancel()
                if renew not in done:
                    renew.cancel()
                    if self._stop.is_set():
                        return
                    self._set_lost(token, _lost_error(self._job, token, "no renewal answered before its deadline"))
                    return
                e = renew.exception()
                if e is None:
                    deadline = now + self._ttl
                    nxt = now + every
                    retry.reset()
                    self._deadline = deadline
                    continue
                if isinstance(e, _FINAL):
                    self._set_lost(token, e)
                    return
                if not isinstance(e, errors.LeaseholdError):
                    raise e
                self._warnings.warn("lock on %s: renew of token %d failed, retrying: %s", self._job, token, e)
                nxt = time.monotonic() + retry.next_before(deadline)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # never die silently: count the lease as lost
            log.exception("lock on %s: renewals failed", self._job)
            self._set_lost(token, _lost_error(self._job, token, f"renewals failed: {e!r}"))

    def _set_lost(self, token: int, err: errors.LeaseholdError) -> None:
        first = self._lost is None and not self._released
        if self._lost is None:
            self._lost = err
        if self._changed is not None:
            self._changed.set()
        self._log_lost(token, err)
        if first:
            r = self._call_on_lost(token)
            if inspect.isawaitable(r):
                self._callback_task = asyncio.ensure_future(r)

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until the lease is lost (or released); ``True`` once it
        is, ``False`` on timeout."""
        if self._lost is not None or self._released:
            return True
        if self._changed is None:
            raise RuntimeError("acquire the lock first")
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def release(self) -> None:
        """As :meth:`Lock.release`: stops the renewals and releases the
        lease, if held; does not raise (but for cancellation)."""
        if self._released:
            return
        self._released = True
        if self._changed is not None:
            self._changed.set()
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                if not self._task.cancelled():
                    raise
        token = self._token
        if token is None:
            return
        timeout = min(self._client.timeout, max(self._deadline - time.monotonic(), 0.2))
        try:
            await self._client.release(self._lease_job or self._job, self._holder, token, timeout=timeout)
        except errors.LeaseLost:
            pass
        except errors.LeaseholdError as e:
            log.warning("lock on %s: release of token %d failed (it runs out on its own): %s", self._job, token, e)
        log.debug("lock on %s: released token %d", self._job, token)

    async def __aenter__(self) -> "AsyncLock":
        return await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
