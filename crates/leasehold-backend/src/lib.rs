//! The vocabulary both backends speak, and neither owns.
//!
//! leasehold decides on one of two backends: the single node
//! (`leasehold-node`: one process on sled) and etcd (`leasehold-etcd`:
//! stateless frontends whose decisions are etcd transactions). The server
//! holds either behind its `Backend` and does not know which. What they
//! share is defined here, below both, so that neither imports the other
//! to describe itself:
//!
//! - the arguments of the batched calls ([`Renewal`], [`Write`]) and the
//!   outcomes of the calls ([`Acquired`], [`RenewOutcome`], [`Statuses`],
//!   [`Staged`]), named fields instead of tuples of booleans;
//! - what a write asks of its caller's policy ([`HolderGuard`],
//!   [`held_by_another`]);
//! - the limits on stored state ([`StateLimits`]);
//! - the give-back of a grant whose caller went away
//!   ([`ReleaseIfDropped`]);
//! - the change feed ([`EventKind`], [`CHANGES_BUFFERED`]);
//! - the store's health ([`StoreHealth`]);
//! - what `/metrics` reads ([`Snapshot`], with the jobs picked to be shown
//!   by [`Picker`]).
//!
//! The rules themselves are `leasehold-core`'s; this crate depends on it
//! alone (and on tokio's runtime handle, for [`ReleaseIfDropped`]).

#![warn(missing_docs)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{HolderId, JobName, JobStatus, LeaseView, Stats, Token};

pub mod health;
pub mod jobs;
pub mod room;

pub use health::StoreHealth;
pub use jobs::{JobsShown, Picker};
pub use leasehold_core::lease::rules::EventKind;

/// A point-in-time copy of a backend's counters and per-job leadership.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The lease rules' counters.
    pub stats: Stats,
    /// How many jobs there are and how many are led, and the
    /// leadership of those picked to be shown.
    pub jobs: JobsShown,
    /// Acquires waiting right now.
    pub waiters: usize,
    /// Store failures. Single node: each put, sync or checkpoint whose
    /// error put the store out of service (see its `recovery` module).
    /// etcd: calls to etcd that failed.
    pub store_failures: u64,
    /// Times the store was reopened after a failure.
    pub store_recoveries: u64,
    /// Jobs a listing skipped because a record of theirs does not decode
    /// (etcd mode, each named in a WARN line; always 0 on the single
    /// node, whose records are checked when the store opens).
    pub unreadable_jobs: u64,
}

/// What an `Acquire` came to: whether the lease was granted, whether the
/// grant is a new one (a new token) rather than the live holder's
/// extension, and the lease as it is now.
#[derive(Debug, Clone)]
pub struct Acquired {
    /// The lease is the caller's.
    pub acquired: bool,
    /// The grant is new: released at once if its reply never reaches the
    /// caller. Never set when `acquired` is not.
    pub fresh: bool,
    /// The lease: the caller's grant, or the holder it is busy with.
    pub lease: LeaseView,
}

/// A page of jobs' status, and whether its waiters and fenced writes are
/// counted (the single node) or not known (etcd mode: they are not
/// gathered across frontends).
#[derive(Debug, Clone)]
pub struct Statuses {
    /// The jobs, in name order.
    pub jobs: Vec<JobStatus>,
    /// Whether each job's waiters and fenced writes are counted.
    pub counted: bool,
}

/// The writes of a `stage_writes` batch as decided: each one's new version
/// or refusal, in order, and the sequence number to wait for before any
/// is acknowledged (0 when they are durable already, as on etcd).
#[derive(Debug)]
pub struct Staged {
    /// Each write's version, or why it was refused (`Fenced`,
    /// `UnknownToken`, `QuotaExceeded`, and `PermissionDenied` when the
    /// batch's [`HolderGuard`] refused the live grant's holder); another
    /// error fails the batch.
    pub outcomes: Vec<Result<u64>>,
    /// What to pass to `durable` before answering.
    pub seq: u64,
}

/// A release not started yet, spawned if the guard is dropped armed: gives
/// back a grant whose call was cancelled before its caller learned of it
/// (see the backends' `acquire`).
pub struct ReleaseIfDropped(Option<Pin<Box<dyn Future<Output = ()> + Send>>>);

impl ReleaseIfDropped {
    /// A guard of `release` (a future: nothing runs unless the guard is
    /// dropped armed).
    pub fn new(release: impl Future<Output = ()> + Send + 'static) -> ReleaseIfDropped {
        ReleaseIfDropped(Some(Box::pin(release)))
    }

    /// A guard with nothing to release: the grant was not a new one.
    pub fn unarmed() -> ReleaseIfDropped {
        ReleaseIfDropped(None)
    }

    /// The grant reached its caller: nothing to undo.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for ReleaseIfDropped {
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            // Dropped by the runtime that ran the call; at shutdown there
            // is none, and the lease runs out on its own.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(release);
            }
        }
    }
}

/// One renewal in a `renew_many` batch: the arguments of `renew`.
#[derive(Debug, Clone)]
pub struct Renewal {
    /// The job.
    pub job: JobName,
    /// The holder that was granted it.
    pub holder: HolderId,
    /// The token of that grant.
    pub token: Token,
    /// The new lifetime, counted from now.
    pub ttl: Duration,
}

/// One write in a `stage_writes` batch: the arguments of `checked_write`.
#[derive(Debug, Clone)]
pub struct Write {
    /// The job whose token fences the key.
    pub job: JobName,
    /// The writer's token.
    pub token: Token,
    /// The key.
    pub key: Vec<u8>,
    /// The value, or `None` for a delete.
    pub value: Option<Vec<u8>>,
}

/// With a policy: whether a write carrying the live grant's token is to be
/// refused because of who holds that grant, asked of the grant's holder
/// as stored (bound to its principal). The policy answers it (see
/// `server::auth::Caller::held_by_another`); the store decides it on the
/// very state the write is decided on, so no other read is needed.
pub type HolderGuard<'a> = &'a (dyn Fn(&str) -> bool + Send + Sync);

/// The refusal of a write the [`HolderGuard`] refused: the core's
/// ([`leasehold_core::lease::rules::held_by_another`]), which both backends
/// answer through [`leasehold_core::lease::rules::admit_write`].
pub fn held_by_another(job: &JobName) -> Error {
    leasehold_core::lease::rules::held_by_another(job)
}

/// A renewal's answer: our lease, and whether a preferred candidate waits
/// for it while it is not a preferred grant (the holder is told, to hand
/// over when it suits it).
#[derive(Debug, Clone)]
pub struct Renewed {
    /// Our lease, renewed.
    pub lease: LeaseView,
    /// A preferred Acquire waits, and our grant is not a preferred one.
    pub successor_waiting: bool,
}

/// One `Acquire` waiting in a job's line (`ListWaiters`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Who waits: its holder, bound to the principal it asked as, if any
    /// ([`HolderId::principal`]).
    pub holder: HolderId,
    /// It asked as a preferred candidate.
    pub preferred: bool,
}

/// The outcome of one renewal in a batch: our renewed lease, or why not
/// (`LeaseLost` or `UnknownToken`) with the job's current lease.
pub type RenewOutcome = std::result::Result<Renewed, (Error, LeaseView)>;

/// Limits on what a backend keeps (`--max-jobs`, `--max-keys-per-job`).
/// Over one, a change that would grow past it is refused with
/// [`Error::QuotaExceeded`] and nothing changes. They are decided in the
/// same decision as the change: an Acquire that would create a job, a
/// write of a new key (deleted keys count, as their tombstones stay). The
/// single node checks both under its state lock (a job's key count is
/// read from the store once, then kept), so they are exact. etcd keeps the
/// job count in its `meta` record, compared and put by the grant that
/// creates a job, so it is exact across frontends; the key count is read
/// before the write, so parallel writes of new keys can pass it together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLimits {
    /// Jobs known at once; an `Acquire` of a new job is refused at it.
    pub max_jobs: usize,
    /// Keys per job, deleted ones included (a delete keeps a tombstone, so
    /// that versions never go back); a write of a new key is refused at it.
    /// Deleting the job gives the room back.
    pub max_keys_per_job: usize,
    /// Tenures kept in each job's history of leaders (the newest tokens'),
    /// `--history-per-job`; 0 keeps none.
    pub history_per_job: usize,
}

impl Default for StateLimits {
    fn default() -> StateLimits {
        StateLimits {
            max_jobs: 1_000_000,
            max_keys_per_job: 10_000,
            history_per_job: 100,
        }
    }
}

impl StateLimits {
    /// The refusal of a new job.
    pub fn too_many_jobs(&self) -> Error {
        Error::QuotaExceeded {
            limit: "--max-jobs",
            max: self.max_jobs,
            principal: None,
        }
    }

    /// The refusal of a new key.
    pub fn too_many_keys(&self) -> Error {
        Error::QuotaExceeded {
            limit: "--max-keys-per-job",
            max: self.max_keys_per_job,
            principal: None,
        }
    }
}

/// Changes kept for a slow reader of a backend's `changes` (the status
/// page's feed of jobs whose leadership changed) before it is told it
/// lagged.
pub const CHANGES_BUFFERED: usize = 4096;
