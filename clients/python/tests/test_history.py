"""``client.history(job, page_size, page_token)`` and ``history_all`` (also
on ``AsyncClient``) against the real server: tenures newest first with
holder, times and how each ended, paging, the first page's chaos events,
an empty history for an unknown job, and the typed error for a page token
the server did not issue."""

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

import harness
import leasehold
from leasehold import TenureEnd
from leasehold.aio import AsyncClient


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def chaos_server():
    s = harness.ServerProcess(extra=["--enable-chaos"])
    yield s
    s.stop()


def test_history_pages_newest_first_with_how_each_ended(chaos_server, job):
    with leasehold.Client(chaos_server.target) as c:
        before = datetime.now(timezone.utc)
        c.acquire(job, "a", ttl=30)
        c.release(job, "a", 1)
        c.acquire(job, "b", ttl=30)
        c.release(job, "b", 2)
        c.acquire(job, "a", ttl=30)
        c.chaos().expire(job)
        c.acquire(job, "c", ttl=12)

        page = c.history(job)
        assert isinstance(page, leasehold.HistoryPage)
        assert page.tokens == [4, 3, 2, 1] and page.next_page_token == ""
        live, chaosed, second, first = page.tenures
        assert isinstance(live, leasehold.Tenure)
        assert (live.holder, live.end, live.ended_at, live.ttl) == ("c", TenureEnd.NOT_ENDED, None, 12.0)
        assert chaosed.end is TenureEnd.CHAOS and chaosed.holder == "a"
        assert (second.holder, second.end) == ("b", TenureEnd.RELEASED)
        assert (first.holder, first.end) == ("a", TenureEnd.RELEASED)
        for t in page.tenures:
            assert t.granted_at is not None and t.granted_at.tzinfo is not None
            # The server's wall clock, in UTC (a few seconds of slack).
            assert before - timedelta(seconds=5) <= t.granted_at <= datetime.now(timezone.utc) + timedelta(seconds=5)
            assert t.principal is None
        assert first.ended_at is not None and first.ended_at >= first.granted_at
        # The first page has the chaos API's action on the job.
        assert [e.action for e in page.chaos] == ["expire"]
        assert isinstance(page.chaos[0], leasehold.ChaosEvent) and page.chaos[0].at is not None

        # Paging: two, then two, then none left.
        p1 = c.history(job, page_size=2)
        assert p1.tokens == [4, 3] and p1.next_page_token
        p2 = c.history(job, page_size=2, page_token=p1.next_page_token)
        assert p2.tokens == [2, 1] and p2.chaos == [], "chaos events on the first page only"
        assert [t.token for t in c.history_all(job, page_size=1)] == [4, 3, 2, 1]
        assert [t.token for t in c.history_all(job)] == [4, 3, 2, 1]


def test_history_of_an_unknown_job_is_empty_and_a_bad_page_token_is_refused(client, job):
    page = client.history(job)
    assert (page.tenures, page.next_page_token, page.chaos) == ([], "", [])
    assert list(client.history_all(job)) == []
    with pytest.raises(leasehold.InvalidArgument) as e:
        client.history(job, page_token="not-a-token")
    assert e.value.field == "page_token"
    with pytest.raises(leasehold.InvalidArgument) as e:
        client.history("", page_size=1)
    assert e.value.field == "job"


def test_async_history_and_history_all(server, job):
    async def main():
        async with AsyncClient(server.target) as c:
            for i, holder in enumerate(["a", "b", "c"], start=1):
                await c.acquire(job, holder, ttl=30)
                if i < 3:
                    await c.release(job, holder, i)
            page = await c.history(job, page_size=2)
            assert page.tokens == [3, 2] and page.next_page_token
            assert [t.holder for t in page.tenures] == ["c", "b"]
            rest = await c.history(job, page_size=2, page_token=page.next_page_token)
            assert rest.tokens == [1] and rest.next_page_token == ""
            assert [t.token async for t in c.history_all(job, page_size=1)] == [3, 2, 1]
            assert (await c.history(job + "-unknown")).tenures == []
            with pytest.raises(leasehold.InvalidArgument):
                await c.history(job, page_token="bogus")

    run(main())
