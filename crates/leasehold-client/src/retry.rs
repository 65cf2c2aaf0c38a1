//! Retry pacing shared by the electors: jittered exponential backoff, and
//! warnings limited to one every few seconds during an outage.

use std::time::Duration;

use tokio::time::Instant;

use crate::clock::tokio_now;

/// At most one retry warning this often per elector; the ones in between
/// are counted and the count goes with the next warning.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(5);

/// The campaign's backoff: from `ttl / 10` (10 ms to 100 ms), doubling, up
/// to 1 s, so that a campaign asks again within about a second of the
/// server coming back.
pub(crate) fn campaign_backoff(ttl: Duration) -> Backoff {
    Backoff::new(
        (ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(100)),
        Duration::from_secs(1),
    )
}

/// A renewal's backoff: from `ttl / 10` (at least 10 ms), doubling, up to
/// 1 s; [`Backoff::next_before`] caps each wait further so that a retry is
/// always sent before the lease's deadline.
pub(crate) fn renew_backoff(ttl: Duration) -> Backoff {
    Backoff::new(
        (ttl / 10).max(Duration::from_millis(10)),
        Duration::from_secs(1),
    )
}

/// Jittered exponential backoff: the n-th wait is drawn evenly from
/// [d/2, d] with d = min(cap, base * 2^n).
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    pub(crate) fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap: cap.max(base),
            attempt: 0,
        }
    }

    /// Back to the first wait, after a success.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The next wait.
    pub(crate) fn next(&mut self) -> Duration {
        let d = self
            .base
            .saturating_mul(1 << self.attempt.min(20))
            .min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        let half = d / 2;
        half + half.mul_f64(random_unit())
    }

    /// The next wait, but never past half the time left to `deadline` (nor
    /// under 10 ms): a retry still goes out before the deadline, and the one
    /// after it too.
    pub(crate) fn next_before(&mut self, deadline: Instant) -> Duration {
        self.next_within(deadline.saturating_duration_since(tokio_now()))
    }

    fn next_within(&mut self, left: Duration) -> Duration {
        self.next().min(left / 2).max(Duration::from_millis(10))
    }
}

/// A number in [0, 1), from the OS's randomness (through a UUID v4).
fn random_unit() -> f64 {
    (uuid::Uuid::new_v4().as_u128() as u64 >> 11) as f64 / (1u64 << 53) as f64
}

/// Limits retry warnings to one every [`WARN_EVERY`].
pub(crate) struct Warnings {
    last: Option<Instant>,
    suppressed: u64,
}

impl Warnings {
    pub(crate) fn new() -> Warnings {
        Warnings {
            last: None,
            suppressed: 0,
        }
    }

    /// Whether to log this warning now; if so, how many were suppressed
    /// since the last one logged.
    pub(crate) fn allow(&mut self) -> Option<u64> {
        self.allow_at(tokio_now())
    }

    fn allow_at(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|l| now < l + WARN_EVERY) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_with_jitter_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        for want in [100, 200, 400, 800, 1000, 1000] {
            let d = b.next();
            let want = Duration::from_millis(want);
            assert!(
                d >= want / 2 && d <= want,
                "{d:?} not in [{:?}, {want:?}]",
                want / 2
            );
        }
        b.reset();
        assert!(b.next() <= Duration::from_millis(100));
    }

    #[test]
    fn a_renew_retry_waits_at_most_half_the_time_left() {
        let mut b = Backoff::new(Duration::from_secs(5), Duration::from_secs(5));
        assert!(b.next_within(Duration::from_secs(2)) <= Duration::from_secs(1));
    }

    #[test]
    fn one_warning_every_few_seconds_with_the_count_of_the_rest() {
        let mut w = Warnings::new();
        let t0 = Instant::now();
        assert_eq!(w.allow_at(t0), Some(0));
        for i in 1..50 {
            assert_eq!(w.allow_at(t0 + Duration::from_millis(100) * i), None);
        }
        assert_eq!(w.allow_at(t0 + WARN_EVERY), Some(49));
        assert_eq!(w.allow_at(t0 + WARN_EVERY), None);
    }
}
