"""Fixtures: the real ``leasehold serve`` (see clients/conformance/harness.py)."""

import asyncio
import inspect
import itertools
import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "conformance"))

import harness  # noqa: E402

import leasehold  # noqa: E402
from leasehold.aio import AsyncClient, AsyncWriteStream  # noqa: E402
from leasehold.chaos import AsyncChaos  # noqa: E402

_jobs = itertools.count()


@pytest.fixture(scope="module")
def server():
    """One server for the module's tests; each test uses its own job."""
    s = harness.ServerProcess()
    yield s
    s.stop()


@pytest.fixture()
def own_server():
    """A server of the test's own, for tests that pause or stop it."""
    s = harness.ServerProcess()
    yield s
    s.stop()


@pytest.fixture()
def client(server):
    c = leasehold.Client(server.target)
    yield c
    c.close()


@pytest.fixture()
def job(request):
    return f"{request.node.name[:80]}-{next(_jobs)}"


class _OnLoop:
    """Calls an asyncio object's methods on ``loop`` (in another thread)
    and waits for them, so that one scenario drives both clients. Several
    threads calling at once make several tasks on the loop."""

    def __init__(self, obj, loop):
        self._obj = obj
        self._loop = loop

    def __getattr__(self, name):
        attr = getattr(self._obj, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            async def run():
                r = attr(*args, **kwargs)
                return await r if inspect.isawaitable(r) else r

            r = asyncio.run_coroutine_threadsafe(run(), self._loop).result(60)
            return _OnLoop(r, self._loop) if isinstance(r, (AsyncWriteStream, AsyncChaos)) else r

        return call

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture(params=["sync", "async"])
def connect(request):
    """``connect(target)``: a client with the blocking Client's methods."""
    if request.param == "sync":
        opened = []

        def connect(target):
            c = leasehold.Client(target)
            opened.append(c)
            return c

        yield connect
        for c in opened:
            c.close()
        return

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-loop", daemon=True)
    thread.start()
    opened_async = []

    def on_loop(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    def connect_async(target):
        async def make():
            return AsyncClient(target)

        c = on_loop(make())
        opened_async.append(c)
        return _OnLoop(c, loop)

    yield connect_async

    async def shutdown():
        for c in opened_async:
            await c.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.wait_for(asyncio.gather(*others, return_exceptions=True), 10) if others else None

    on_loop(shutdown())
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()
