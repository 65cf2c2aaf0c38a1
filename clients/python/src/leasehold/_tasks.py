"""Task helpers shared by the asyncio elector set and shard member."""

from __future__ import annotations

import asyncio


def retrieved(task: "asyncio.Future") -> None:
    """Marks a task's exception as seen (a done callback): a task that a
    wait gave up on is dropped, and asyncio would log its exception as
    never retrieved."""
    if not task.cancelled():
        task.exception()
