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

/// Milliseconds since the Unix epoch on the wall clock: for people only
/// (when a checkpoint or a backup was made). No rule reads it.
pub fn wall_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
