"""The retry pacing, without a server."""

from leasehold._retry import WARN_EVERY, Backoff, Warnings


def test_backoff_doubles_with_jitter_up_to_its_cap():
    b = Backoff(0.1, 1.0)
    for want in (0.1, 0.2, 0.4, 0.8, 1.0, 1.0):
        assert want / 2 <= b.next() <= want
    b.reset()
    assert b.next() <= 0.1
    assert Backoff(5, 5).next_before(deadline=12.0, now=10.0) <= 1.0


def test_one_warning_every_few_seconds_with_the_count_of_the_rest():
    w = Warnings(None)
    assert w.allow(0.0) == 0
    assert all(w.allow(i / 10) is None for i in range(1, 50))
    assert w.allow(WARN_EVERY) == 49
