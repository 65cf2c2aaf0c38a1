"""The thread-based :class:`Elector`: campaign for a job, renew at ttl/3,
step down on loss, release on shutdown, hand over with :meth:`Elector.transfer`
(or at a renewal, to a preferred candidate, with ``yield_to_preferred``).

One background thread owns the lease. It campaigns with a waiting
``Acquire`` (so a release hands over at once), renews every ``ttl / 3``,
and steps down **no later than its own conservative deadline**: the
instant the last successful grant or renewal was *sent*, plus the TTL. The
server counts the TTL from when it *received* that request, later, so the
elector believes it has lost before the server can give the lease away,
even when the server cannot be reached to say so.

What no elector can do is notice its own process being paused (GC, SIGSTOP,
a VM migration): carry the token into every write, so that a stale leader
is fenced. :attr:`Elector.token` also checks the deadline itself, so it
turns ``None`` on time even if the elector thread is held up.

Failed calls are retried with jittered exponential backoff: a campaign
from ttl/10 (10 to 100 ms) doubling up to 1 s, a renewal from ttl/10
doubling up to 1 s but never waiting past half the time left to its
deadline. During an outage the ``leasehold.elector`` logger gets at most
one warning every 5 s per elector, with the count of those suppressed;
every failed attempt is logged at debug level.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Optional, Tuple, Union

import grpc

from . import errors
from ._retry import Backoff, Warnings
from .client import Client
from ._wire import REFUSALS, campaign_timing, leader_callback  # noqa: F401 (re-exported)
from .types import Bytes, Lease, check_elector_args, check_slots, check_value, elector_holder

log = logging.getLogger("leasehold.elector")

TokenCallback = Callable[[int], None]
#: ``on_new_leader(holder, token, value)``, or ``on_new_leader(holder,
#: token)`` as before leases had values (see :class:`Elector`).
LeaderCallback = Union[Callable[[str, int, bytes], None], Callable[[str, int], None]]

_STOP = "stop"
_TIMEOUT = "timeout"
_DONE = "done"
_ENDED = "ended"


class _Dispatcher:
    """Runs callbacks in order on their own thread, so that a slow callback
    cannot delay a renewal."""

    def __init__(self) -> None:
        self._q: "queue.Queue[Optional[Callable[[], None]]]" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="leasehold-callbacks", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], None]) -> None:
        self._q.put(fn)

    def close(self, timeout: Optional[float]) -> None:
        self._q.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            fn = self._q.get()
            if fn is None:
                return
            try:
                fn()
            except Exception:  # a user callback failed; keep dispatching
                log.exception("elector callback failed")


class Elector:
    """Campaigns for ``job`` as ``name@<uuid>``, with a UUID made for this
    elector: two electors in one process are two holders.

    ::

        with Elector(client, "bridge_health", "bridge", ttl=10) as elector:
            token = elector.wait_elected()
            client.checked_write("bridge_health", token, b"status", b"ok")
        # leaving the block resigns: releases the lease if held

    ``on_elected(token)`` and ``on_lost(token)`` are called in order on a
    callback thread.

    ``on_new_leader(holder, token, value)`` is called, on the same thread
    and in order with them, for every grant of the job this elector sees:
    another holder took over, or we did (``holder`` is then
    :attr:`holder`). ``value`` is the value the new leader published
    (``b""`` for none). A callback that takes two arguments,
    ``on_new_leader(holder, token)``, is called with those two, as before
    leases had values. At most once per grant, in token order (never a
    lower token after a higher one), not after :meth:`resign` returned; a
    free job is not reported, nor is a value change (the same grant).
    With it set, the elector keeps a ``WatchLease`` open on the job while
    it runs (opened again with backoff if it breaks), and also reports
    what its campaign learns (its own grant, the holder an Acquire
    found in place), so a broken watch delays a report of another's
    leadership, never of its own. Our own grant may be reported a moment
    before ``on_elected``: the watch can be quicker than the Acquire's
    answer. (As the Go client's ``LeaderCallbacks.OnNewLeader``.) :attr:`is_leader`, :attr:`token`, :meth:`wait_elected`
    and :meth:`wait_lost` can be used instead of, or as well as, callbacks.
    After losing, the elector campaigns again until :meth:`resign`.

    ``bind_to_stream=True`` binds every grant of the campaign to the
    client's connection (see :meth:`leasehold.Client.acquire`): if this
    process dies, the server releases the lease at once and the next
    elector takes over without waiting out the TTL. :meth:`transfer` hands
    the leadership to a waiting elector, with no gap.

    ``preferred=True`` campaigns as a preferred candidate: every Acquire of
    the campaign is queued ahead of those that are not preferred, and a
    leader that is not preferred is told that it waits.
    ``yield_to_preferred=True`` makes this elector, when it leads with a
    grant that is not preferred, hand over to a preferred candidate at its
    next renewal (right after a renewal whose answer says one waits): as
    :meth:`transfer` to the first in line, reporting the end of its
    leadership as a transfer does, then campaigning again behind the
    successor. If the candidate left meanwhile (``NoSuccessor``) it goes
    on leading; if the lease was lost (``LeaseLost``) it steps down as
    usual. An elector that does not yield is never made to: a preferred
    candidate waits as any other until the lease is released, handed over
    or expires.

    ``value`` (``bytes``, or a ``str`` sent as UTF-8) is published with
    every Acquire of the campaign (also when it campaigns again after a
    loss), as :attr:`Lease.value <leasehold.Lease.value>`: where to reach
    this worker, so that followers can route to the leader (they read
    :meth:`leader`, or observe the job). :meth:`set_value` changes it: the
    new value goes with the next renewal (or the next Acquire, when not
    leading), and with every renewal until one succeeds; after that,
    renewals leave it as it is. The value is advisory: the token fences,
    not the value.

    ``slots=N`` (2 to 100) campaigns for one of the N slots of a counted
    lease on ``job`` (a semaphore): up to N electors lead at once, each in
    a slot of its own, with its own token. Slot k is a job of its own,
    ``"{job}#{k}"``: while leading, :attr:`lease_job` names it and
    :attr:`slot` is k; the elector renews, releases and transfers that
    job, and writes fenced by :attr:`token` must name it. After a loss it
    campaigns for ``job`` with ``slots`` again, and may land in another
    slot. The job's count is fixed by its first counted grant: a campaign
    with another is refused (:attr:`error`, an
    :class:`~leasehold.InvalidArgument` naming ``"slots"``). While an
    elector waits first in line, the server holds ``job``'s own lease for
    it, so :meth:`leader` and ``on_new_leader`` (which follow ``job``)
    see the line, not the slots' holders: read ``job#k`` for those.
    ``on_new_leader`` with ``slots`` raises ``ValueError``: a counted lease
    has several leaders at once.

    An empty job or name, or a TTL that is not positive, raises
    ``ValueError`` here; a value over 1024 bytes,
    :class:`~leasehold.InvalidArgument` naming ``"value"``. A campaign the
    server refuses with an error asking again cannot fix
    (:class:`~leasehold.InvalidArgument`, such as a TTL over its
    ``--max-ttl``, :class:`~leasehold.Unauthenticated`,
    :class:`~leasehold.PermissionDenied`) is not retried: the elector stops,
    :attr:`error` holds the error and :meth:`wait_elected` raises it.
    """

    def __init__(
        self,
        client: Client,
        job: str,
        name: str,
        ttl: float,
        *,
        holder: Optional[str] = None,
        on_elected: Optional[TokenCallback] = None,
        on_lost: Optional[TokenCallback] = None,
        on_new_leader: Optional[LeaderCallback] = None,
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
        # The grant we lead with or are about to: (token, the job it is on,
        # the slot). A counted grant is on its slot's job, which every
        # call about the lease names.
        self._granted: Optional[Tuple[int, str, Optional[int]]] = None
        self._client = client
        self._on_new_leader = leader_callback(on_new_leader)
        # The value we publish, and its generation (bumped by set_value);
        # _value_sent is the newest generation a grant or renewal of ours
        # was answered for: the server has it, so renewals stop sending it.
        self._value = check_value(value) if value is not None else b""
        self._value_gen = 0
        self._value_sent = -1
        # The newest token on_new_leader was told of, and the watch it reads.
        self._leader_token = 0
        self._watch = None
        self._watcher: Optional[threading.Thread] = None
        self._job = job
        self._ttl = float(ttl)
        self._bind = bool(bind_to_stream)
        self._preferred = bool(preferred)
        self._yield = bool(yield_to_preferred)
        self._holder = holder or elector_holder(name)
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._cond = threading.Condition()
        self._stopped = False
        self._finished = False
        self._token: Optional[int] = None
        self._proof: Optional[str] = None
        self._deadline = 0.0
        # The token a transfer() is handing over, while its call is on its way.
        self._handing: Optional[int] = None
        self._error: Optional[errors.LeaseholdError] = None
        self._thread: Optional[threading.Thread] = None
        self._dispatcher = _Dispatcher() if (on_elected or on_lost or on_new_leader) else None
        self._warnings = Warnings(log)

    # Public surface

    @property
    def holder(self) -> str:
        """Our holder identity, ``name@uuid``, the UUID this elector's own."""
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
        """The count of slots the campaign asks for (``slots=``); 0 for an
        ordinary lease."""
        return self._slots

    @property
    def lease_job(self) -> Optional[str]:
        """The job our lease is on while we lead (whenever :attr:`token`
        is set): :attr:`job`, or for a counted lease (``slots=``) our
        slot's job, ``"{job}#{slot}"``. Writes fenced by our token name
        it::

            token = elector.wait_elected()
            client.checked_write(elector.lease_job, token, b"progress", b"1/3")

        ``None`` when not leading."""
        with self._cond:
            if self._token is None or time.monotonic() >= self._deadline:
                return None
            return self._lease_job_of(self._token)

    @property
    def slot(self) -> Optional[int]:
        """The slot we lead in (0 to ``slots - 1``), for a counted lease,
        whenever :attr:`token` is set; ``None`` when not leading, or the
        lease is not counted."""
        with self._cond:
            if self._token is None or time.monotonic() >= self._deadline:
                return None
            g = self._granted
            return g[2] if g is not None and g[0] == self._token else None

    def _lease_job_of(self, token: int) -> str:
        """The job the grant with ``token`` is on: its slot's job for a
        counted grant, else :attr:`job`."""
        g = self._granted
        return g[1] if g is not None and g[0] == token else self._job

    def _counted(self) -> bool:
        return self._slots >= 2

    @property
    def value(self) -> bytes:
        """The value this elector publishes (the newest :meth:`set_value`,
        or the ``value`` it was made with); ``b""`` for none."""
        with self._cond:
            return self._value

    def set_value(self, value: Bytes) -> None:
        """Publishes ``value`` (``bytes``, or a ``str`` as UTF-8) from now
        on: it goes with the next renewal when leading (watchers then see an
        ``EventKind.VALUE_CHANGED``), else with the next Acquire, and with
        every renewal until one succeeds; then no more (a renewal without a
        value keeps it on the server). Returns at once. A value over 1024
        bytes raises :class:`~leasehold.InvalidArgument` naming ``"value"``
        and changes nothing."""
        b = check_value(value)
        with self._cond:
            self._value = b
            self._value_gen += 1

    def _value_to_send(self) -> Tuple[Optional[bytes], int]:
        """(the value a renewal sends now, ``None`` for none; its
        generation)."""
        with self._cond:
            if self._value_sent >= self._value_gen:
                return None, self._value_gen
            return self._value, self._value_gen

    def _value_done(self, gen: int) -> None:
        """A grant or renewal that carried the value of generation ``gen``
        was answered: the server has it."""
        with self._cond:
            self._value_sent = max(self._value_sent, gen)

    def leader(self, *, timeout: Optional[float] = None) -> Lease:
        """The job's lease as the server has it now (``GetLease``): its
        ``holder`` (``None`` when the job is free), ``token`` and ``value``,
        the value the leader published. For a follower routing to the
        leader::

            lease = elector.leader()
            if lease.holder is not None and lease.holder != elector.holder:
                forward_to(lease.value_text)

        Advisory: by the time it is used the lease may have moved; the
        leader's writes are fenced by its token, not by the value."""
        return self._client.get_lease(self._job, timeout=timeout)

    @property
    def token(self) -> Optional[int]:
        """The token we lead with, or ``None`` when not leading (or past our
        own deadline, even if the elector thread has not caught up yet)."""
        with self._cond:
            if self._token is not None and time.monotonic() < self._deadline:
                return self._token
            return None

    @property
    def proof(self) -> Optional[str]:
        """The proof of the grant we lead with (``Lease.proof``: the server's
        signed statement of our job, token and holder, for storage that
        checks it with :func:`leasehold.proof.verify`), whenever
        :attr:`token` is set; ``None`` when not leading, or when the server
        signs nothing. It proves the token was issued, not that we still
        lead: storage still compares tokens."""
        with self._cond:
            if self._token is not None and time.monotonic() < self._deadline:
                return self._proof
            return None

    @property
    def is_leader(self) -> bool:
        return self.token is not None

    @property
    def error(self) -> Optional[errors.LeaseholdError]:
        """The error that stopped the campaign (the server refused it:
        :class:`~leasehold.InvalidArgument`, :class:`~leasehold.Unauthenticated`
        or :class:`~leasehold.PermissionDenied`), else ``None``."""
        with self._cond:
            return self._error

    def start(self) -> "Elector":
        """Starts campaigning (once)."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"leasehold-elector-{self._job}", daemon=True
                )
                self._thread.start()
                if self._on_new_leader is not None:
                    self._watcher = threading.Thread(
                        target=self._watch_leaders, name=f"leasehold-leaders-{self._job}", daemon=True
                    )
                    self._watcher.start()
        return self

    def wait_elected(self, timeout: Optional[float] = None) -> Optional[int]:
        """Waits until we lead; returns the token, or ``None`` on timeout or
        once resigned. Raises :attr:`error` if the campaign stopped on one."""
        with self._cond:
            self._cond.wait_for(lambda: self._token is not None or self._finished, timeout)
            if self._token is None and self._error is not None:
                raise self._error
            return self._token

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until we no longer lead with the token we lead with now;
        True once that happened (at once if not leading)."""
        with self._cond:
            token = self._token
            if token is None:
                return True
            return self._cond.wait_for(lambda: self._token != token, timeout)

    def transfer(self, to: Optional[str] = None, *, timeout: Optional[float] = None) -> Lease:
        """Hands the leadership to a waiting elector (or any waiting
        Acquire): the first in line, or the one whose holder is ``to``. It
        is granted our token + 1 at once, with no moment when the job is
        free. Returns the successor's :class:`~leasehold.Lease`.

        Then this elector reports the end of its leadership as it reports a
        loss (``on_lost``, :meth:`wait_lost`, :attr:`is_leader` ``False``)
        and campaigns again, queued behind the successor (unless it is
        resigning).

        Raises :class:`~leasehold.NotLeader` when not leading (nothing is
        sent); :class:`~leasehold.NoSuccessor` when nobody (or not ``to``)
        waits, and we still lead; :class:`~leasehold.LeaseLost` when the
        lease was no longer ours, and the elector steps down (reports the
        loss). Another error (``Unavailable``...) leaves the outcome
        unknown: the elector goes on as leader, and its next renewal finds
        out (a transfer that was made ends the leadership then).
        ``timeout`` defaults to the client's."""
        token = self.token
        if token is None:
            raise errors.NotLeader(f"{self._job}: not leading, nothing to transfer")
        with self._cond:
            self._handing = token
        try:
            with self._cond:
                on = self._lease_job_of(token)
            lease = self._client.transfer_lease(on, self._holder, token, to_holder=to, timeout=timeout)
        except errors.LeaseLost as e:
            log.warning("%s: transfer of token %d: lease lost: %s", self._job, token, e)
            self._set_follower(token)
            raise
        finally:
            with self._cond:
                self._handing = None
        log.info("%s: handed token %d over to %s (token %d)", self._job, token, lease.holder, lease.token)
        self._set_follower(token)
        return lease

    def resign(self, timeout: Optional[float] = None) -> None:
        """Stops campaigning, releases the lease if held, and waits for that
        (and for the callbacks). The release is bounded by our deadline
        (at least 200 ms): past it the lease runs out on its own."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread = self._thread
            watch, watcher = self._watch, self._watcher
        if watch is not None:
            watch.cancel()
        end = None if timeout is None else time.monotonic() + timeout
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(None if end is None else max(0.0, end - time.monotonic()))
        if self._dispatcher is not None:
            left = None if end is None else max(0.0, end - time.monotonic())
            self._dispatcher.close(left)
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def __enter__(self) -> "Elector":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.resign()

    # The campaign, on the elector thread

    def _run(self) -> None:
        campaign_wait, _ = campaign_timing(self._ttl)
        backoff = Backoff.campaign(self._ttl)
        try:
            while not self._stopped:
                sent = time.monotonic()
                limit = campaign_wait + self._ttl
                with self._cond:  # every Acquire carries the value, sent or not before
                    value, gen = self._value, self._value_gen
                fut = self._client.acquire_future(
                    self._job,
                    self._holder,
                    self._ttl,
                    campaign_wait,
                    limit,
                    bind_to_stream=self._bind,
                    preferred=self._preferred,
                    value=value,
                    slots=self._slots,
                )
                outcome = self._wait(fut, sent + limit)
                if outcome == _STOP:
                    self._release_if_granted()
                    return
                if outcome == _TIMEOUT:
                    self._warnings.warn("campaign for %s: acquire timed out", self._job)
                    continue
                err = fut.exception()
                if err is not None:
                    e = errors.from_rpc_error(err) if isinstance(err, grpc.RpcError) else err
                    if isinstance(e, REFUSALS):
                        log.error("campaign for %s refused, not campaigning again: %s", self._job, e)
                        with self._cond:
                            self._error = e
                        return
                    self._warnings.warn("campaign for %s: acquire failed, retrying: %s", self._job, e)
                    if self._sleep_until(time.monotonic() + backoff.next()):
                        return
                    continue
                backoff.reset()
                r = fut.result()
                if not self._counted():  # a counted answer is about a slot's job, not ours
                    self._observe(r.lease.holder, r.lease.token, bytes(r.lease.value))
                if not r.acquired:
                    continue
                self._value_done(gen)
                token = r.lease.token
                with self._cond:
                    slot = r.lease.slot if self._counted() and r.lease.job not in ("", self._job) else None
                    self._granted = (token, r.lease.job or self._job, slot)
                anchor = self._anchor(token, sent)
                if anchor is None:
                    continue
                if self._lead(token, anchor, r.lease.proof or None, bytes(r.lease.value)):
                    return
        except Exception:  # never die silently: step down and stop
            log.exception("elector for %s failed", self._job)
            with self._cond:
                token = self._token
            if token is not None:
                self._set_follower(token)
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def _wait(self, fut: grpc.Future, deadline: float) -> str:
        """Waits for ``fut``, a stop, or ``deadline``; cancels ``fut``
        unless it completed."""
        fut.add_done_callback(lambda _: self._notify())
        with self._cond:
            while True:
                if fut.done():
                    return _DONE
                if self._stopped:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    fut.cancel()
                    return _TIMEOUT
                self._cond.wait(left)
        fut.cancel()
        return _STOP

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _sleep_leading(self, token: int, when: float) -> Optional[str]:
        """Sleeps until ``when`` while we lead with ``token``: ``_ENDED``
        as soon as that leadership ended (:meth:`transfer`), else ``_STOP``
        if told to stop, else ``None`` at ``when``."""
        with self._cond:
            while True:
                if self._token != token:
                    return _ENDED
                if self._stopped:
                    return _STOP
                left = when - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def _sleep_until(self, when: float) -> bool:
        """Sleeps until ``when``; True if told to stop meanwhile."""
        with self._cond:
            while not self._stopped:
                left = when - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def _anchor(self, token: int, sent: float) -> Optional[float]:
        """The instant our lease's TTL may be counted from: at or before the
        server granted or last renewed it. A waiting Acquire may have been
        granted long after it was sent; then a Renew sent now confirms the
        lease and gives a fresh anchor. ``None`` when it cannot."""
        if time.monotonic() < sent + self._ttl / 10:
            return sent
        sent = time.monotonic()
        value, gen = self._value_to_send()
        with self._cond:
            on = self._lease_job_of(token)
        try:
            self._client.renew(on, self._holder, token, self._ttl, timeout=self._ttl / 2, value=value)
            if value is not None:
                self._value_done(gen)
            return sent
        except errors.LeaseholdError as e:
            log.warning("%s: granted token %d, but the confirming renew failed: %s", self._job, token, e)
            return None

    def _lead(self, token: int, sent: float, proof: Optional[str] = None, value: bytes = b"") -> bool:
        """Leads until the lease is lost or handed over (False) or we are
        told to stop (releases; True). With ``yield_to_preferred``, a
        renewal that says a preferred candidate waits is followed at once
        by the hand-over (:meth:`_yield_lease`)."""
        _, every = campaign_timing(self._ttl)
        retry = Backoff.renew(self._ttl)
        deadline = sent + self._ttl
        with self._cond:
            on = self._lease_job_of(token)  # a counted grant's slot job: renewed there
        self._set_leader(token, deadline, proof, value)
        nxt = sent + every
        while True:
            woke = self._sleep_leading(token, min(nxt, deadline))
            if woke == _ENDED:  # handed over by transfer(), which reported it
                return False
            if woke == _STOP:
                return self._resign_lease(token, deadline)
            now = time.monotonic()
            if now >= deadline:
                log.warning("%s: token %d reached its deadline without a renewal", self._job, token)
                break
            # A value set since the server last took one goes with this
            # renewal, and with each after it until one is answered.
            value, gen = self._value_to_send()
            fut = self._client.renew_future(on, self._holder, token, self._ttl, deadline - now, value=value)
            outcome = self._wait(fut, deadline)
            if outcome == _STOP:
                return self._resign_lease(token, deadline)
            if outcome == _TIMEOUT:
                log.warning("%s: renew of token %d did not answer before the deadline", self._job, token)
                break
            err = fut.exception()
            if err is None:
                if value is not None:
                    self._value_done(gen)
                deadline = now + self._ttl
                nxt = now + every
                retry.reset()
                with self._cond:
                    if self._token == token:
                        self._deadline = deadline
                        # The same proof, unless it was made again under a new signing key.
                        self._proof = fut.result().lease.proof or self._proof
                if self._yield and fut.result().successor_waiting and self._yield_lease(token, deadline):
                    return False
                continue
            e = errors.from_rpc_error(err) if isinstance(err, grpc.RpcError) else err
            if value is not None and isinstance(e, errors.InvalidArgument) and e.field == "value":
                # A server whose limit is below ours refused the value, and
                # nothing else: keep leading, with the value it has.
                log.error("%s: the server refused the value, keeping the one it has: %s", self._job, e)
                self._value_done(gen)
                nxt = time.monotonic()
                continue
            if isinstance(e, (errors.LeaseLost,) + REFUSALS):
                with self._cond:
                    ours = self._token == token and self._handing != token
                if ours:  # else transfer() is handing it over: not a loss of its own
                    log.warning("%s: lease lost (token %d): %s", self._job, token, e)
                break
            self._warnings.warn("%s: renew of token %d failed, retrying: %s", self._job, token, e)
            nxt = time.monotonic() + retry.next_before(deadline)
        self._set_follower(token)
        return False

    def _yield_lease(self, token: int, deadline: float) -> bool:
        """Our safe point, right after a renewal whose answer says a
        preferred candidate waits (nothing of ours is in flight): hands the
        lease to the first in line by :meth:`transfer`, which reports the
        end of the leadership. True when the leadership ended (handed over,
        or the lease was lost); False when we still lead: the candidate left
        (``NoSuccessor``), or the call failed and the next renewal tells
        (bounded by our deadline: past it we step down as usual)."""
        log.info("%s: a preferred candidate waits: handing token %d over", self._job, token)
        try:
            self.transfer(timeout=max(deadline - time.monotonic(), 0.001))
            return True
        except errors.LeaseLost:
            return True  # transfer() stepped down and reported the loss
        except errors.NotLeader:
            with self._cond:  # ended meanwhile (a transfer() of the caller's), or past our deadline
                return self._token != token
        except errors.NoSuccessor:
            log.info("%s: the preferred candidate left: still leading with token %d", self._job, token)
            return False
        except errors.LeaseholdError as e:
            self._warnings.warn("%s: hand-over of token %d to a preferred candidate failed: %s", self._job, token, e)
            return False

    def _resign_lease(self, token: int, deadline: float) -> bool:
        if not self._set_follower(token):
            return True  # transfer() handed it over meanwhile: nothing to release
        until = max(deadline, time.monotonic() + 0.2)
        with self._cond:
            on = self._lease_job_of(token)
        try:
            self._client.release(on, self._holder, token, timeout=max(until - time.monotonic(), 0.001))
        except errors.LeaseholdError as e:
            log.warning("%s: release of token %d on resign failed: %s", self._job, token, e)
        return True

    def _release_if_granted(self) -> None:
        """Stopped while an Acquire was in flight: the server may have
        granted it just before the cancel. Best effort, briefly: release the
        lease if it is ours, rather than leave it to run out."""
        try:
            lease = self._client.get_lease(self._job, timeout=0.2)
            if lease.holder == self._holder:
                self._client.release(self._job, self._holder, lease.token, timeout=0.2)
        except errors.LeaseholdError:
            pass

    # on_new_leader

    def _observe(self, holder: Optional[str], token: int, value: bytes) -> None:
        """Notes ``holder`` leading with ``token`` and ``value``:
        ``on_new_leader`` is told if ``token`` is above the last one told
        (tokens of a job only grow, so the watch and the campaign never
        report a grant twice, nor an older one after a newer, nor a value
        change of one grant)."""
        if self._on_new_leader is None or not holder or not token:
            return
        with self._cond:
            if token <= self._leader_token or self._stopped:
                return
            self._leader_token = token
            cb = self._on_new_leader
            # Queued under the lock, so the reports keep the tokens' order.
            assert self._dispatcher is not None
            self._dispatcher.submit(lambda: cb(holder, token, value))

    def _watch_leaders(self) -> None:
        """Follows the job's lease on a WatchLease stream while the elector
        runs, opening it again with the campaign's backoff when it breaks
        (a new stream's first event is the current lease, so little is
        missed). A watch the server refuses for good (``InvalidArgument``,
        ``Unauthenticated``, ``PermissionDenied``) is not opened again:
        ``on_new_leader`` then hears only what the campaign learns."""
        retry = Backoff.campaign(self._ttl)
        while True:
            with self._cond:
                if self._stopped:
                    return
                watch = self._watch = self._client.watch(self._job)
            err: Optional[BaseException] = None
            try:
                for ev in watch:
                    retry.reset()
                    self._observe(ev.lease.holder, ev.lease.token, ev.lease.value)
            except errors.LeaseholdError as e:
                err = e
            except Exception as e:  # never die silently
                log.exception("watch of %s failed", self._job)
                err = e
            with self._cond:
                self._watch = None
                if self._stopped:
                    return
            if isinstance(err, REFUSALS):
                log.warning("watch of %s refused; on_new_leader hears only what the campaign learns: %s",
                            self._job, err)
                return
            self._warnings.warn("watch of %s ended, watching again: %s", self._job, err or "end of stream")
            if self._sleep_until(time.monotonic() + retry.next()):
                return

    def _set_leader(self, token: int, deadline: float, proof: Optional[str] = None, value: bytes = b"") -> None:
        if not self._counted():  # a counted grant's token is its slot's, not the job's
            self._observe(self._holder, token, value)
        with self._cond:
            self._token = token
            self._proof = proof
            self._deadline = deadline
            self._cond.notify_all()
        log.info("%s: elected with token %d", self._lease_job_of(token), token)
        if self._dispatcher is not None and self._on_elected is not None:
            cb = self._on_elected
            self._dispatcher.submit(lambda: cb(token))

    def _set_follower(self, token: int) -> bool:
        """Reports the end of the leadership with ``token``, once: True if
        this call did (so that a renewal's LEASE_LOST after a transfer is
        not a second loss)."""
        with self._cond:
            if self._token != token:
                return False
            self._token = None
            self._proof = None
            self._cond.notify_all()
        log.info("%s: stepped down from token %d", self._job, token)
        if self._dispatcher is not None and self._on_lost is not None:
            cb = self._on_lost
            self._dispatcher.submit(lambda: cb(token))
        return True
