"""The :class:`ElectorSet`: one holder campaigning for several jobs,
renewing every lease it holds together over one ``KeepAlive`` stream (the
Rust client's ``ElectorSet``, on threads).

Each job gets its own campaign (a waiting ``Acquire``, so a release hands
over at once, with the Elector's backoff), on a thread of its own. Once
held, a lease joins the set's one renewer thread, which every ``ttl / 3``
sends one ``KeepAliveRequest`` carrying a renewal for every held lease
(split into messages of at most 1000) and reads one result per renewal, in
order: a worker leading a hundred jobs sends one message per period
instead of a hundred calls.

The step-down rule is the Elector's, per job: a lease is given up no later
than the instant its own last successful grant or renewal was *sent*, plus
the TTL, whether or not the server can be reached to say so (a stuck
stream is bounded by the earliest deadline, then opened again with
backoff). A ``LEASE_LOST`` or ``UNKNOWN_TOKEN`` result steps that job alone
down, and its campaign starts again. A job's campaign refused with an error
asking again cannot fix (``InvalidArgument``, ``Unauthenticated``,
``PermissionDenied``) stops; :meth:`ElectorSet.error` has it.

::

    with leasehold.ElectorSet(client, "sync-worker", ttl=10,
                              on_elected=lambda job, token: ...,
                              on_lost=lambda job, token: ...) as fleet:
        fleet.campaign("sync_eu", "sync_us", "sync_ap")
        ...  # lead the jobs fleet.token(job) is set for, carrying that token
    # leaving the block resigns: releases every lease held
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import grpc

from . import errors
from ._retry import Backoff, Warnings
from ._wire import REFUSALS, campaign_timing, split_writes, stream_closed_error, stream_timeout_error
from .client import Client
from .elector import _Dispatcher
from .types import check_elector_args, elector_holder, to_duration
from .v1 import leasehold_pb2 as pb
from .v1 import leasehold_pb2_grpc as pb_grpc

log = logging.getLogger("leasehold.elector_set")

#: ``on_elected(job, token)`` / ``on_lost(job, token)``.
JobCallback = Callable[[str, int], None]

_END = object()


@dataclass
class _Held:
    token: int
    #: Our conservative deadline: when the last successful grant or
    #: renewal was sent, plus the TTL.
    deadline: float


class KeepAliveStream:
    """One open ``KeepAlive`` stream (private to the set; its renewer is the
    only caller). :meth:`renew` sends a batch, split into messages of at
    most 1000 renewals and about 48 KiB, back to back, and reads one result
    per renewal in order, checking each answer's ``id``. Any error breaks
    the stream: close it and open a new one."""

    def __init__(self, stub: pb_grpc.LeasesStub, bind_to_stream: bool = False) -> None:
        self._bind = bind_to_stream
        self._requests: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self._responses: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self._next_id = 0
        self._call = stub.KeepAlive(self._request_iterator())
        # gRPC's blocking stream has no read with a timeout: a reader thread
        # hands the answers over a queue, which the renewer waits on with
        # its deadline.
        self._reader = threading.Thread(target=self._read, name="leasehold-keep-alive", daemon=True)
        self._reader.start()

    def _request_iterator(self) -> Iterator[pb.KeepAliveRequest]:
        while True:
            r = self._requests.get()
            if r is _END:
                return
            yield r  # type: ignore[misc]

    def _read(self) -> None:
        try:
            for resp in self._call:  # type: ignore[attr-defined]
                self._responses.put(resp)
            self._responses.put(stream_closed_error("keep-alive stream ended"))
        except grpc.RpcError as e:
            self._responses.put(errors.stream_error(e))
        except BaseException as e:  # never leave the renewer waiting
            self._responses.put(errors.LeaseholdError(f"keep-alive reader failed: {e!r}"))

    def renew(self, renewals: List[pb.KeepAliveRenewal], deadline: float) -> List[pb.KeepAliveResult]:
        """One result per renewal, in order; raises the stream's typed
        error, or ``Unavailable`` (DEADLINE_EXCEEDED) when the answers are
        not all in by ``deadline`` (monotonic)."""
        sent: List[Tuple[int, int]] = []
        for m in split_writes(renewals):
            self._next_id += 1
            sent.append((self._next_id, len(m)))
            self._requests.put(pb.KeepAliveRequest(id=self._next_id, renewals=m, bind_to_stream=self._bind))
        out: List[pb.KeepAliveResult] = []
        for request_id, count in sent:
            try:
                r = self._responses.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise stream_timeout_error(max(deadline - time.monotonic(), 0)) from None
            if isinstance(r, errors.LeaseholdError):
                self._responses.put(r)  # and for any later call
                raise r
            assert isinstance(r, pb.KeepAliveResponse)
            if r.id != request_id or len(r.results) != count:
                raise errors.LeaseholdError(
                    f"keep-alive response {r.id} with {len(r.results)} results does not answer "
                    f"request {request_id} with {count}",
                    code=grpc.StatusCode.INTERNAL,
                )
            out.extend(r.results)
        return out

    def close(self) -> None:
        """Half-closes and cancels the stream; the reader thread ends."""
        self._requests.put(_END)
        self._call.cancel()  # type: ignore[attr-defined]


class ElectorSet:
    """Campaigns for several jobs as one holder, ``name@<uuid>`` (a UUID
    made for this set), and renews every lease it holds over one
    ``KeepAlive`` stream; see the module's documentation.

    ``on_elected(job, token)`` and ``on_lost(job, token)`` are called in
    order on a callback thread (a slow one cannot delay a renewal).
    :meth:`token` and :meth:`is_leader` check the job's deadline themselves,
    so they turn false on time even if the renewer is held up.

    ``bind_to_stream=True`` binds every lease to the client's connection
    (the Acquires and the KeepAlive stream ask for it); ``preferred=True``
    campaigns as a preferred candidate for every job. An empty name or a
    TTL that is not positive raises ``ValueError`` here, an empty job in
    :meth:`campaign`.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        ttl: float,
        *,
        on_elected: Optional[JobCallback] = None,
        on_lost: Optional[JobCallback] = None,
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
        self._cond = threading.Condition()
        self._stopped = False
        self._held: Dict[str, _Held] = {}
        self._errors: Dict[str, errors.LeaseholdError] = {}
        self._campaigns: Dict[str, threading.Thread] = {}
        self._stream: Optional[KeepAliveStream] = None
        self._renewals_sent = 0
        self._dispatcher = _Dispatcher() if (on_elected or on_lost) else None
        self._warnings = Warnings(log)
        self._renewer = threading.Thread(target=self._renew_loop, name="leasehold-elector-set", daemon=True)
        self._renewer.start()

    # Public surface

    @property
    def holder(self) -> str:
        """Our holder identity, ``name@uuid``, the UUID this set's own."""
        return self._holder

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def renewals_sent(self) -> int:
        """How many renewals the set has sent over its KeepAlive streams."""
        with self._cond:
            return self._renewals_sent

    def campaign(self, *jobs: str) -> "ElectorSet":
        """Starts campaigning for each of ``jobs`` (a job already
        campaigned for is left alone). Raises ``ValueError`` for an empty
        job, and ``RuntimeError`` once resigned."""
        for job in jobs:
            check_elector_args(job, self._name, self._ttl)
        with self._cond:
            if self._stopped:
                raise RuntimeError("the ElectorSet was resigned")
            for job in jobs:
                if job in self._campaigns:
                    continue
                t = threading.Thread(
                    target=self._campaign, args=(job,), name=f"leasehold-campaign-{job}", daemon=True
                )
                self._campaigns[job] = t
                t.start()
        return self

    @property
    def jobs(self) -> List[str]:
        """Every job campaigned for, in the order added."""
        with self._cond:
            return list(self._campaigns)

    def token(self, job: str) -> Optional[int]:
        """The token we lead ``job`` with, or ``None`` (not leading, or
        past that lease's own deadline even if the renewer has not caught
        up yet)."""
        with self._cond:
            h = self._held.get(job)
            if h is not None and time.monotonic() < h.deadline:
                return h.token
            return None

    def deadline(self, job: str) -> Optional[float]:
        """When we step down from ``job`` unless a renewal succeeds first
        (``time.monotonic()``: the last successful grant or renewal's send
        time plus the TTL), or ``None`` when not leading it."""
        with self._cond:
            h = self._held.get(job)
            return None if h is None else h.deadline

    def is_leader(self, job: str) -> bool:
        return self.token(job) is not None

    def leading(self) -> Dict[str, int]:
        """Every job we lead right now, with its token, ordered by job."""
        now = time.monotonic()
        with self._cond:
            return {j: h.token for j, h in sorted(self._held.items()) if now < h.deadline}

    def error(self, job: str) -> Optional[errors.LeaseholdError]:
        """The error that stopped ``job``'s campaign, if one did."""
        with self._cond:
            return self._errors.get(job)

    def wait_leading(self, jobs: Optional[List[str]] = None, timeout: Optional[float] = None) -> bool:
        """Waits until we lead every one of ``jobs`` (default: every job
        campaigned for); whether we do."""
        want = list(self.jobs if jobs is None else jobs)
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if all(self.token(j) is not None for j in want):
                    return True
                left = None if end is None else end - time.monotonic()
                if (left is not None and left <= 0) or self._stopped:
                    return False
                self._cond.wait(0.05 if left is None else min(left, 0.05))

    def resign(self, timeout: Optional[float] = None) -> None:
        """Stops every campaign and the renewer, releases every lease held
        (all at once, each bounded by its own deadline, at least 200 ms:
        past it the lease runs out on its own), reports each as lost, and
        waits for that and for the callbacks."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            stream = self._stream
            threads = list(self._campaigns.values())
        if stream is not None:
            stream.close()
        end = None if timeout is None else time.monotonic() + timeout

        def left() -> Optional[float]:
            return None if end is None else max(0.0, end - time.monotonic())

        for t in [self._renewer] + threads:
            if t is not threading.current_thread():
                t.join(left())
        with self._cond:
            held = list(self._held.items())
            self._held.clear()
        releases = []
        for job, h in held:
            self._report(self._on_lost, job, h.token)
            until = max(h.deadline, time.monotonic() + 0.2)
            t = threading.Thread(target=self._release, args=(job, h.token, until), daemon=True)
            t.start()
            releases.append(t)
        for t in releases:
            t.join(left())
        if self._dispatcher is not None:
            self._dispatcher.close(left())

    def __enter__(self) -> "ElectorSet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.resign()

    # Events

    def _report(self, cb: Optional[JobCallback], job: str, token: int) -> None:
        if cb is not None and self._dispatcher is not None:
            self._dispatcher.submit(lambda: cb(job, token))

    def _step_down(self, job: str, token: int, why: str) -> None:
        """Steps down from ``job`` if we still hold it with ``token``."""
        with self._cond:
            h = self._held.get(job)
            if h is None or h.token != token:
                return
            del self._held[job]
            self._cond.notify_all()
            # Reported under the lock: the campaign cannot be elected again
            # (and report it) before this loss is queued.
            self._report(self._on_lost, job, token)
        log.warning("%s: stepped down from token %d: %s", job, token, why)

    # A job's campaign, on its own thread

    def _sleep_until(self, when: float) -> bool:
        """Sleeps until ``when``; True if told to stop meanwhile."""
        with self._cond:
            while not self._stopped:
                left = when - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def _campaign(self, job: str) -> None:
        """Campaigns for ``job`` until the set stops or a refusal. A failure
        no one foresaw is logged, steps down, and the campaign starts again
        after a backoff: never a job the set silently stops campaigning
        for (as the asyncio set's)."""
        backoff = Backoff.campaign(self._ttl)
        while not self._stopped:
            try:
                self._campaign_rounds(job)
                return
            except Exception:  # never die silently: step down, campaign again
                log.exception("campaign for %s failed, campaigning again", job)
                with self._cond:
                    h = self._held.get(job)
                if h is not None:
                    self._step_down(job, h.token, "its campaign failed")
                if self._sleep_until(time.monotonic() + backoff.next()):
                    return

    def _campaign_rounds(self, job: str) -> None:
        campaign_wait, _ = campaign_timing(self._ttl)
        backoff = Backoff.campaign(self._ttl)
        warnings = Warnings(log)
        while not self._stopped:
            sent = time.monotonic()
            limit = campaign_wait + self._ttl
            fut = self._client.acquire_future(
                job, self._holder, self._ttl, campaign_wait, limit,
                bind_to_stream=self._bind, preferred=self._preferred,
            )
            fut.add_done_callback(lambda _: self._notify())
            with self._cond:
                while not fut.done() and not self._stopped and time.monotonic() < sent + limit:
                    self._cond.wait(max(sent + limit - time.monotonic(), 0))
                stopped = self._stopped
            if not fut.done():
                fut.cancel()
                if stopped:
                    self._release_if_granted(job)
                    return
                warnings.warn("campaign for %s: acquire timed out", job)
                continue
            if stopped:
                if not fut.cancelled() and fut.exception() is None and fut.result().acquired:
                    self._release(job, fut.result().lease.token, time.monotonic() + 0.2)
                return
            err = fut.exception()
            if err is not None:
                e = errors.from_rpc_error(err) if isinstance(err, grpc.RpcError) else err
                if isinstance(e, REFUSALS):
                    log.error("campaign for %s refused, not campaigning again: %s", job, e)
                    with self._cond:
                        self._errors[job] = e  # type: ignore[assignment]
                        self._cond.notify_all()
                    return
                warnings.warn("campaign for %s: acquire failed, retrying: %s", job, e)
                if self._sleep_until(time.monotonic() + backoff.next()):
                    return
                continue
            backoff.reset()
            r = fut.result()
            if not r.acquired:
                continue
            token = r.lease.token
            anchor = self._anchor(job, token, sent)
            if anchor is None or anchor + self._ttl <= time.monotonic():
                continue
            with self._cond:
                if self._stopped:
                    held = None
                else:
                    held = self._held[job] = _Held(token, anchor + self._ttl)
                    self._report(self._on_elected, job, token)
                    self._cond.notify_all()  # the renewer counts it in
            if held is None:
                self._release(job, token, anchor + self._ttl)
                return
            log.info("%s: elected with token %d", job, token)
            with self._cond:
                while not self._stopped and self._held.get(job) is held:
                    self._cond.wait()

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _anchor(self, job: str, token: int, sent: float) -> Optional[float]:
        """As the Elector's: a grant that came more than ttl/10 after its
        Acquire was sent is confirmed by a Renew, whose send time anchors
        the deadline."""
        if time.monotonic() < sent + self._ttl / 10:
            return sent
        sent = time.monotonic()
        try:
            self._client.renew(job, self._holder, token, self._ttl, timeout=self._ttl / 2)
            return sent
        except errors.LeaseholdError as e:
            log.warning("%s: granted token %d, but the confirming renew failed: %s", job, token, e)
            return None

    def _release(self, job: str, token: int, until: float) -> None:
        try:
            self._client.release(job, self._holder, token, timeout=max(until - time.monotonic(), 0.001))
        except errors.LeaseholdError as e:
            log.warning("%s: release of token %d on resign failed: %s", job, token, e)

    def _release_if_granted(self, job: str) -> None:
        """Stopped while an Acquire was in flight: release a grant that may
        have come in that instant (best effort, briefly)."""
        try:
            lease = self._client.get_lease(job, timeout=0.2)
            if lease.holder == self._holder:
                self._client.release(job, self._holder, lease.token, timeout=0.2)
        except errors.LeaseholdError:
            pass

    # The renewer, on its own thread

    def _renew_loop(self) -> None:
        every = self._ttl / 3
        retry = Backoff.renew(self._ttl)
        nxt = time.monotonic() + every
        try:
            while True:
                with self._cond:
                    while not self._stopped:
                        deadlines = [h.deadline for h in self._held.values()]
                        wake = min([nxt] + deadlines)
                        left = wake - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    if self._stopped:
                        return
                    # Our own deadlines first: no answer can extend them.
                    now = time.monotonic()
                    expired = [(j, h.token) for j, h in self._held.items() if h.deadline <= now]
                for job, token in expired:
                    self._step_down(job, token, "its deadline passed without a renewal")
                if now < nxt:
                    continue
                with self._cond:
                    batch = [(j, h.token) for j, h in self._held.items()]
                    earliest = min((h.deadline for h in self._held.values()), default=None)
                if not batch or earliest is None:
                    nxt = now + every
                    continue
                sent = time.monotonic()
                try:
                    results = self._send(batch, max(earliest, sent + 0.01))
                except errors.LeaseholdError as e:
                    self._warnings.warn("keep-alive failed, retrying on a new stream: %s", e)
                    self._drop_stream()
                    nxt = time.monotonic() + retry.next_before(earliest)
                    continue
                for (job, token), r in zip(batch, results):
                    if r.outcome == pb.KeepAliveResult.OUTCOME_RENEWED:
                        with self._cond:
                            h = self._held.get(job)
                            if h is not None and h.token == token:
                                h.deadline = sent + self._ttl
                    else:
                        name = pb.KeepAliveResult.Outcome.Name(r.outcome)
                        self._step_down(job, token, f"renewal refused ({name}): {r.message}")
                nxt = sent + every
                retry.reset()
        except Exception:  # never die silently: every lease runs to its deadline
            log.exception("the elector set's renewer failed")
        finally:
            self._drop_stream()

    def _send(self, batch: List[Tuple[str, int]], deadline: float) -> List[pb.KeepAliveResult]:
        with self._cond:
            if self._stopped:
                raise stream_closed_error("the elector set was resigned")
            if self._stream is None:
                self._stream = KeepAliveStream(self._client._leases, self._bind)
            stream = self._stream
            self._renewals_sent += len(batch)
        ttl = to_duration(self._ttl)
        return stream.renew(
            [pb.KeepAliveRenewal(job=j, holder=self._holder, token=t, ttl=ttl) for j, t in batch], deadline
        )

    def _drop_stream(self) -> None:
        with self._cond:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
