"""Fixtures: the real ``leasehold serve`` (see clients/conformance/harness.py)."""

import itertools
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "conformance"))

import harness  # noqa: E402

import leasehold  # noqa: E402

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
