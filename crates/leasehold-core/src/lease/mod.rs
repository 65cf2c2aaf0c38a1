//! Leases, fencing tokens and the fence: the rules, and nothing else.
//!
//! # What a lease promises, and what it cannot
//!
//! A job that must run on exactly one replica elects a leader by taking a
//! lease: a grant that lasts `ttl` on the server's monotonic clock unless the
//! holder renews it (at about `ttl / 3`) or releases it. The lease changes
//! hands only once it has expired or been released, and a waiting `Acquire`
//! is served first come, first served the moment that happens.
//!
//! A lease alone cannot stop two processes from *believing* they lead. A
//! holder that is paused (a GC pause, SIGSTOP, a VM migration, a network
//! partition) does not notice its lease running out; when it resumes it
//! carries on as leader until its next renewal fails. Meanwhile a successor
//! was legitimately elected. No timeout on the holder's side closes this
//! window, because the holder cannot observe its own pause.
//!
//! # Fencing is what makes writes safe
//!
//! Every grant carries a **token**, an epoch that goes up by one whenever the
//! lease changes hands or is granted again after it expired or was released,
//! and stays the same on a renewal. The leader passes its token with every
//! write, and the store checks it ([`LeaseTable::check_write`]):
//!
//! - the token is the job's *newest* token,
//! - the lease of that token is *live* right now, and
//! - no higher token has written the key.
//!
//! The first rule is the important one. A store that only compares a write's
//! token with the last token *seen on the key* accepts the paused leader's
//! write as long as its successor has not written yet. Comparing with the
//! job's newest token rejects it from the moment the successor's grant is
//! durable, with no extra "raise the fence" step.
//!
//! # Invariants
//!
//! - **A token is never issued twice for a job, whatever crashes**: the
//!   newest token is stored durably before a grant is acknowledged, and
//!   every grant issues the stored token plus one.
//! - **A renewal never changes the token.**
//! - **A lease is never shortened by a restart**: a lease held when the
//!   server stopped is live again for its full TTL from start-up
//!   ([`LeaseTable::restore`]).
//! - **Expiry is decided lazily from `now`**, at every check, in one place.
//!   Nothing waits for a background reaper.
//!
//! The module is pure: no clock, no I/O, no async. Callers pass `now`.

#[cfg(any(test, feature = "model"))]
pub mod model;
pub mod rules;
mod table;
mod types;

pub use rules::Faults;
pub use table::{
    Acquire, Checkpoint, Effects, Floors, HistoryEvent, Issued, JobStatus, Leadership, LeaseRecord,
    LeaseState, LeaseTable, LeaseView, Stats, TenureEnd, Vacancy, WaiterId,
};
pub use types::{
    slot_job, too_long, HolderId, JobName, Limits, Published, Token, BIND, DEFAULT_PAGE_SIZE,
    MAX_LEASE_VALUE_BYTES, MAX_PAGE_SIZE, MAX_SLOTS, SLOTS_KEY,
};
