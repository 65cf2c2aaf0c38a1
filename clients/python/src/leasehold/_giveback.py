"""The give-back of a cancelled waiting Acquire, and the rule that makes it
safe: **a give-back never ends a lease a caller was told it holds**.

A grant made as a waiting Acquire was cancelled, its reply on its way, is
released so that the job is not held for a TTL by a holder that never
learned its token. Its caller never saw the reply, so the give-back reads
the lease and releases it if it is the holder's. That is only safe if
nothing told a caller of this client that the holder leads with that
token:

- **No call of this client for the (job, holder) started after the
  cancelled one, and none is on its way**: a retry may have been granted
  the lease, and been told.
- **The token is above every token a call of this client was told** for
  the pair: an earlier grant or renewal told its caller that it leads.
- **The release is a give-back** (``ReleaseRequest.give_back``): the server
  keeps the lease if the holder asked again since the grant (an Acquire or
  Renew from anywhere, racing with the give-back), whose answer may have
  told it that it leads.

:class:`Calls` keeps what the first two need, per client; both clients
share it.
"""

from __future__ import annotations

import threading
from typing import Dict, Tuple

_Key = Tuple[str, str]


class _Pair:
    """One (job, holder) pair's calls through one client."""

    __slots__ = ("newest", "in_flight", "told")

    def __init__(self) -> None:
        #: The number of the newest call started (see :meth:`Calls.start`).
        self.newest = 0
        #: Calls started and not ended.
        self.in_flight = 0
        #: The highest token a call was told the holder holds; 0 for none.
        self.told = 0


class Calls:
    """Every pair with an Acquire or Renew on its way or a token told,
    shared by everything using one client (threads, tasks). A pair leaves
    when it has neither (a release through the client forgets what was
    told), so it stays small."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pairs: Dict[_Key, _Pair] = {}
        self._next = 0

    def start(self, job: str, holder: str) -> "Asking":
        """An Acquire or Renew of (``job``, ``holder``) starts. End it
        (:meth:`Asking.end`, or use it as a context manager) however the
        call ends."""
        key = (job, holder)
        with self._lock:
            self._next += 1
            n = self._next
            p = self._pairs.get(key)
            if p is None:
                p = self._pairs[key] = _Pair()
            p.newest = n
            p.in_flight += 1
        return Asking(self, key, n)

    def released(self, job: str, holder: str) -> None:
        """The holder released the pair's lease: nothing told is live now."""
        key = (job, holder)
        with self._lock:
            p = self._pairs.get(key)
            if p is not None:
                p.told = 0
                if p.in_flight == 0:
                    del self._pairs[key]

    def may_give_back(self, job: str, holder: str, n: int, token: int) -> bool:
        """Whether the give-back of call ``n`` may release ``token``: see
        the module's docs."""
        with self._lock:
            p = self._pairs.get((job, holder))
            return p is None or (p.newest == n and p.in_flight == 0 and token > p.told)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pairs)


class Asking:
    """One Acquire or Renew on its way, from :meth:`Calls.start`."""

    __slots__ = ("_calls", "_key", "n", "_ended")

    def __init__(self, calls: Calls, key: _Key, n: int) -> None:
        self._calls = calls
        self._key = key
        #: The call's number: a give-back checks that no call started since.
        self.n = n
        self._ended = False

    def told(self, token: int) -> None:
        """The call told its caller that the holder leads with ``token``."""
        with self._calls._lock:
            p = self._calls._pairs.get(self._key)
            if p is not None and not self._ended:
                p.told = max(p.told, token)

    def end(self) -> None:
        """The call ended (answered, failed or cancelled). Once only; later
        calls do nothing."""
        with self._calls._lock:
            if self._ended:
                return
            self._ended = True
            p = self._calls._pairs.get(self._key)
            if p is not None:
                p.in_flight -= 1
                if p.in_flight == 0 and p.told == 0:
                    del self._calls._pairs[self._key]

    def __enter__(self) -> "Asking":
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()
