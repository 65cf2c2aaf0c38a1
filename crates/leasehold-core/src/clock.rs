//! The only place that reads a clock.
//!
//! Lease expiry runs on the monotonic clock, so a wall-clock jump (NTP, an
//! operator setting the date) changes no lease timing. Everything else takes
//! `now` as an argument.

use std::time::Instant;

/// The current instant on the monotonic clock.
pub fn now() -> Instant {
    Instant::now()
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock std's `Instant` reads,
/// as a number one process can send another on the same machine (an
/// `Instant` cannot be sent). `leasehold run` tells its watchdog the
/// lease's deadline in it.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own; CLOCK_MONOTONIC
    // always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds since the Unix epoch on the wall clock: for people only
/// (when a checkpoint or a backup was made). No rule reads it.
pub fn wall_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
