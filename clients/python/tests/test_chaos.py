"""The chaos test helper (``client.chaos()``) against a real server started
with ``--enable-chaos``: first the example of the README, a worker that
steps down when its lease is expired on purpose (the Elector reports the
loss, its guarded work stops, its old token is fenced); then each method,
on both clients (through ``connect``); and a server without the flag."""

import asyncio
import threading
import time

import grpc
import pytest

import harness
import leasehold
from leasehold import errors
from leasehold.aio import AsyncClient, AsyncElector
from leasehold.v1 import leasehold_pb2 as pb
from leasehold.v1 import leasehold_pb2_grpc as pb_grpc

# Short leases keep the tests quick: an elector renews every TTL / 3.
TTL = 3.0
# How long a test waits for what it expects.
PATIENCE = 10.0


@pytest.fixture(scope="module")
def chaos_server():
    """A server with the chaos API, for this module's tests."""
    s = harness.ServerProcess(extra=["--enable-chaos"])
    yield s
    s.stop()


@pytest.fixture()
def chaos_client(chaos_server):
    c = leasehold.Client(chaos_server.target)
    yield c
    c.chaos().clear()
    c.close()


def tenure_end(server, job, token):
    with grpc.insecure_channel(server.target) as ch:
        tenures = pb_grpc.LeasesStub(ch).GetHistory(pb.GetHistoryRequest(job=job), timeout=10).tenures
    ends = {t.token: t.end for t in tenures}
    assert token in ends, f"token {token} not in the history of {job}: {ends}"
    return ends[token]


# The README's example: a worker steps down when its lease is expired.


def test_a_worker_steps_down_when_its_lease_is_expired(chaos_server, chaos_client, job):
    client = chaos_client
    lost = threading.Event()
    writes = []

    def work(elector, token):
        """The guarded work: writes with its token while it leads."""
        while not lost.is_set():
            try:
                writes.append(client.checked_write(job, token, b"count", str(len(writes)).encode()))
            except leasehold.Fenced:
                return
            time.sleep(0.02)

    with leasehold.Elector(client, job, "worker", TTL, on_lost=lambda token: lost.set()) as elector:
        token = elector.wait_elected(PATIENCE)
        worker = threading.Thread(target=work, args=(elector, token), daemon=True)
        worker.start()
        while len(writes) < 3:
            assert worker.is_alive(), "the work stopped before the chaos"
            time.sleep(0.01)

        out = client.chaos().expire(job)  # the lease is gone, now
        assert out.lease.holder is None or out.lease.token > token, out

        assert lost.wait(PATIENCE), "the elector did not report the loss"
        worker.join(PATIENCE)
        assert not worker.is_alive(), "the guarded work did not stop"
        assert not elector.is_leader or elector.token != token
        with pytest.raises(leasehold.Fenced):
            client.checked_write(job, token, b"count", b"late")  # the old leader is fenced
    assert tenure_end(chaos_server, job, token) == pb.Tenure.END_CHAOS


def test_an_async_worker_steps_down_when_its_lease_is_expired(chaos_server, job):
    async def main():
        async with AsyncClient(chaos_server.target) as client:
            lost = asyncio.Event()
            writes = []

            async def work(token):
                """The guarded work: writes with its token while it leads."""
                while not lost.is_set():
                    try:
                        writes.append(await client.checked_write(job, token, b"count", b"1"))
                    except leasehold.Fenced:
                        return
                    await asyncio.sleep(0.02)

            async with AsyncElector(client, job, "worker", TTL, on_lost=lambda token: lost.set()) as elector:
                token = await elector.wait_elected(PATIENCE)
                task = asyncio.ensure_future(work(token))
                while len(writes) < 3:
                    assert not task.done(), "the work stopped before the chaos"
                    await asyncio.sleep(0.01)

                await client.chaos().expire(job)  # the lease is gone, now
                await asyncio.wait_for(lost.wait(), PATIENCE)  # the elector reports the loss
                await asyncio.wait_for(task, PATIENCE)  # the guarded work stopped
                with pytest.raises(leasehold.Fenced):
                    await client.checked_write(job, token, b"count", b"late")
            await client.chaos().clear(job)
        assert tenure_end(chaos_server, job, token) == pb.Tenure.END_CHAOS

    asyncio.run(asyncio.wait_for(main(), 60))


# Each method, on the blocking and the asyncio client.


def test_fence_refuses_the_next_writes_then_lets_them_through(chaos_server, connect, job):
    c = connect(chaos_server.target)
    token = c.acquire(job, "a", TTL).lease.token
    out = c.chaos().fence(job, 2)
    assert out.lease.holder == "a" and out.lease.token == token and out.in_force
    for _ in range(2):
        with pytest.raises(leasehold.Fenced):
            c.checked_write(job, token, b"k", b"v")
    assert c.checked_write(job, token, b"k", b"v") == 1
    assert c.chaos().clear(job).in_force == ""


def test_delay_delays_every_answer_about_the_job(chaos_server, connect, job):
    c = connect(chaos_server.target)
    out = c.chaos().delay(job, 0.5)
    assert out.in_force
    t = time.monotonic()
    c.get_lease(job)
    assert time.monotonic() - t >= 0.5
    c.chaos().clear(job)
    t = time.monotonic()
    c.get_lease(job)
    assert time.monotonic() - t < 0.5


def test_pause_refuses_the_holders_renewals_while_it_still_holds(chaos_server, connect, job):
    c = connect(chaos_server.target)
    token = c.acquire(job, "a", TTL).lease.token
    out = c.chaos().pause(job, 30)
    assert out.lease.holder == "a" and out.in_force
    with pytest.raises(leasehold.LeaseLost):
        c.renew(job, "a", token, TTL)
    lease = c.get_lease(job)
    assert (lease.holder, lease.token) == ("a", token), "paused, not expired: it runs out at its deadline"
    c.chaos().clear(job)


def test_transfer_grants_the_first_waiter_or_raises_no_successor(chaos_server, connect, job):
    c = connect(chaos_server.target)
    with pytest.raises(leasehold.NoSuccessor):
        c.chaos().transfer(job)  # nobody holds it
    token = c.acquire(job, "a", TTL).lease.token
    with pytest.raises(leasehold.NoSuccessor):
        c.chaos().transfer(job)  # nobody waits: "a" still holds it
    assert c.get_lease(job).holder == "a"

    waited = {}
    waiter = threading.Thread(target=lambda: waited.update(r=c.acquire(job, "b", TTL, wait=PATIENCE)), daemon=True)
    waiter.start()
    chaos_server.wait_waiters(1)
    out = c.chaos().transfer(job)
    assert (out.lease.holder, out.lease.token) == ("b", token + 1)
    waiter.join(PATIENCE)
    assert waited["r"].acquired and waited["r"].lease.token == token + 1
    with pytest.raises(leasehold.LeaseLost):
        c.renew(job, "a", token, TTL)
    assert tenure_end(chaos_server, job, token) == pb.Tenure.END_TRANSFERRED


def test_clear_clears_a_job_or_every_job(chaos_server, connect, job):
    c = connect(chaos_server.target)
    other = job + "-other"
    token = c.acquire(job, "a", TTL).lease.token
    assert c.chaos().fence(job, 5).in_force
    assert c.chaos().fence(other, 5).in_force
    out = c.chaos().clear(job)
    assert out.in_force == "" and out.lease.holder == "a" and out.lease.token == token
    assert c.checked_write(job, token, b"k", b"v") == 1  # no write left to fence

    out = c.chaos().clear()
    assert out.lease is None and out.in_force == ""
    other_token = c.acquire(other, "a", TTL).lease.token
    assert c.checked_write(other, other_token, b"k", b"v") == 1


def test_expire_of_a_free_job_changes_nothing(chaos_server, connect, job):
    c = connect(chaos_server.target)
    out = c.chaos().expire(job)
    assert out.lease.holder is None and out.lease.token == 0 and out.in_force == ""


def test_bad_arguments_are_invalid(chaos_server, connect, job):
    c = connect(chaos_server.target)
    with pytest.raises(leasehold.InvalidArgument):
        c.chaos().pause(job, 0)
    with pytest.raises(leasehold.InvalidArgument):
        c.chaos().delay(job, 61)
    with pytest.raises(ValueError):
        c.chaos().fence(job, 0)


# A server without --enable-chaos.


def test_a_server_without_enable_chaos_gives_a_clear_error(server, connect, job):
    c = connect(server.target)
    with pytest.raises(leasehold.ChaosDisabled) as e:
        c.chaos().expire(job)
    assert isinstance(e.value, leasehold.LeaseholdError) and not e.value.retryable
    assert e.value.code == grpc.StatusCode.UNIMPLEMENTED
    assert "--enable-chaos" in str(e.value)
    with pytest.raises(leasehold.ChaosDisabled):
        c.chaos().clear()


def test_unimplemented_is_chaos_disabled_and_other_errors_pass_through():
    e = errors.from_status(grpc.StatusCode.UNIMPLEMENTED, "")
    out = leasehold.chaos.chaos_error("fence", "j", e)
    assert type(out) is leasehold.ChaosDisabled and "chaos fence 'j'" in str(out)
    e = errors.from_status(grpc.StatusCode.INVALID_ARGUMENT, "bad")
    assert leasehold.chaos.chaos_error("fence", "j", e) is e
