"""Retry pacing shared by the electors: jittered exponential backoff, and
warnings limited to one every few seconds during an outage."""

from __future__ import annotations

import logging
import random
import time
from typing import Optional

#: An elector logs at most one retry warning this often (seconds); the ones
#: in between are counted, and the count goes with the next warning.
WARN_EVERY = 5.0


class Backoff:
    """Jittered exponential backoff: the n-th wait is drawn evenly from
    [d/2, d] with d = min(cap, base * 2**n)."""

    def __init__(self, base: float, cap: float) -> None:
        self.base = base
        self.cap = max(cap, base)
        self.attempt = 0

    @classmethod
    def campaign(cls, ttl: float) -> "Backoff":
        """From ttl/10 (10 to 100 ms), doubling, up to 1 s: a campaign asks
        again within about a second of the server coming back."""
        return cls(min(max(ttl / 10, 0.01), 0.1), 1.0)

    @classmethod
    def renew(cls, ttl: float) -> "Backoff":
        """From ttl/10 (at least 10 ms), doubling, up to 1 s; see
        :meth:`next_before`."""
        return cls(max(ttl / 10, 0.01), 1.0)

    def reset(self) -> None:
        self.attempt = 0

    def next(self) -> float:
        d = min(self.cap, self.base * (2 ** min(self.attempt, 20)))
        self.attempt += 1
        return d / 2 + random.uniform(0, d / 2)

    def next_before(self, deadline: float, now: Optional[float] = None) -> float:
        """:meth:`next`, but never past half the time left to ``deadline``
        (nor under 10 ms): a retry still goes out before the deadline."""
        now = time.monotonic() if now is None else now
        return max(min(self.next(), (deadline - now) / 2), 0.01)


class Warnings:
    """Logs a retry warning at most every :data:`WARN_EVERY` seconds, with
    the count of those suppressed since; every one at debug level."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._last: Optional[float] = None
        self._suppressed = 0

    def allow(self, now: float) -> Optional[int]:
        """The count suppressed since the last warning, if one may be
        logged at ``now``; else ``None``."""
        if self._last is not None and now - self._last < WARN_EVERY:
            self._suppressed += 1
            return None
        self._last = now
        n, self._suppressed = self._suppressed, 0
        return n

    def warn(self, msg: str, *args: object) -> None:
        self._log.debug(msg, *args)
        n = self.allow(time.monotonic())
        if n is not None:
            self._log.warning(msg + " (%d similar warnings suppressed)", *args, n)
