//! The store's health, and recovery from a failed store.
//!
//! # What a store failure is
//!
//! **A store failure is a put, a sync, or a
//! checkpoint whose error puts the store out of service**: from then on the
//! store refuses every change until it is reopened (see the durability
//! contract in [`leasehold_store`]). Each one is counted once, by the first
//! error since the store was last (re)opened. The errors that follow until
//! the reopen (changes refused because the store is out of service, a
//! reopen attempt that fails and is retried) are its consequences and are
//! not counted again. A change refused up front because the disk is full
//! is not a failure either: it changes nothing, and the store goes on.
//! So `leasehold_store_failures_total` minus
//! `leasehold_store_recoveries_total` is 1 while a recovery is under way,
//! and 0 otherwise.
//!
//! # Recovery
//!
//! A failure wakes the recovery thread. It waits for the sync or checkpoint
//! under way to finish and holds off new ones, declares every change that
//! was not durable lost (their callers get UNAVAILABLE, reason STORAGE),
//! reopens the store from what is on stable storage, and reloads the lease
//! table from it, exactly as a restart would: held leases are live again
//! for a full TTL, tokens continue from the stored ones. Until that
//! succeeds every change fails fast; it is retried every half second, so
//! the server recovers by itself when the disk does. No sync runs during a
//! reopen, so a failure reported by a sync is always about the store it
//! ran on: a stale report never fails the reopened store.
//!
//! # Health
//!
//! [`StoreHealth`] says whether the store takes changes: not while it is
//! out of service, and not while the disk is too full for even the
//! smallest change (then the recovery thread asks the file system again
//! every half second, and the health comes back by itself when space
//! does). Reads and renewals that change nothing are served either way.
//! gRPC health and `/healthz` report it.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

pub use leasehold_backend::health::{StoreHealth, RETRY};
use leasehold_core::error::Error;

/// What the recovery thread is to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Reopen the store.
    Recover,
    /// Ask the file system for the free space again.
    CheckSpace,
    /// End.
    Stop,
}

#[derive(Default)]
struct Flags {
    fired: bool,
    stop: bool,
    /// Set by the failure that put the store out of service; cleared by a
    /// successful reopen.
    failed: Option<String>,
    /// `(free, needed)` while not even the smallest change fits.
    full: Option<(u64, u64)>,
    failures: u64,
    recoveries: u64,
}

impl Flags {
    fn health(&self) -> StoreHealth {
        match (&self.failed, self.full) {
            (Some(error), _) => StoreHealth::Failed {
                error: error.clone(),
            },
            (None, Some((free, needed))) => StoreHealth::Full { free, needed },
            (None, None) => StoreHealth::Ok,
        }
    }
}

/// The store's health and failure counts, and the recovery thread's
/// wake-ups. Shared by the node (failed puts, reopens) and group commit
/// (failed syncs and checkpoints).
pub struct Recovery {
    flags: Mutex<Flags>,
    cv: Condvar,
    health: watch::Sender<StoreHealth>,
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery {
            flags: Mutex::new(Flags::default()),
            cv: Condvar::new(),
            health: watch::Sender::new(StoreHealth::Ok),
        }
    }
}

impl Recovery {
    fn lock(&self) -> std::sync::MutexGuard<'_, Flags> {
        self.flags.lock().expect("recovery lock")
    }

    /// Shows the health that `f` now implies (under its lock, so that
    /// changes are shown in the order they happened).
    fn show(&self, f: &Flags) {
        let h = f.health();
        self.health.send_if_modified(|old| {
            if *old == h {
                return false;
            }
            *old = h;
            true
        });
    }

    /// A store operation (`what`: put, sync, checkpoint) failed.
    /// The first failure since the store was (re)opened puts it out of
    /// service: it is counted and wakes the recovery thread. Later ones are
    /// its consequences, and are not. Returns whether this one counted.
    pub fn failed(&self, what: &str, e: &Error) -> bool {
        let mut f = self.lock();
        if f.failed.is_some() {
            return false;
        }
        f.failed = Some(format!("{what} failed: {e}"));
        f.failures += 1;
        f.fired = true;
        self.show(&f);
        drop(f);
        self.cv.notify_all();
        tracing::error!(error = %e, "store {what} failed; the store refuses changes until it is reopened");
        true
    }

    /// The store was reopened: it takes changes again.
    pub fn recovered(&self) {
        let mut f = self.lock();
        f.failed = None;
        f.recoveries += 1;
        self.show(&f);
    }

    /// Records whether even the smallest change is refused for lack of
    /// space: `Some((free, needed))`, or `None` once it fits again. Returns
    /// whether that changed (from fitting to full or back).
    pub fn set_full(&self, full: Option<(u64, u64)>) -> bool {
        let mut f = self.lock();
        let changed = f.full.is_some() != full.is_some();
        f.full = full;
        self.show(&f);
        drop(f);
        if changed {
            // The recovery thread starts, or stops, looking at the space.
            self.cv.notify_all();
        }
        changed
    }

    /// The store's health now.
    pub fn health(&self) -> StoreHealth {
        self.lock().health()
    }

    /// The store's health, as it changes.
    pub fn subscribe(&self) -> watch::Receiver<StoreHealth> {
        self.health.subscribe()
    }

    /// Store failures and successful reopens so far.
    pub fn counts(&self) -> (u64, u64) {
        let f = self.lock();
        (f.failures, f.recoveries)
    }

    /// Ends the recovery thread.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
    }

    /// Waits for what the recovery thread must do next: a reopen once a
    /// failure fired, a look at the free space every [`RETRY`] while the
    /// disk is full, or the end.
    pub fn wait(&self) -> Next {
        let mut f = self.lock();
        let mut timer = None;
        loop {
            if f.stop {
                return Next::Stop;
            }
            if f.fired {
                f.fired = false;
                return Next::Recover;
            }
            if f.full.is_none() {
                timer = None;
                f = self.cv.wait(f).expect("recovery lock");
                continue;
            }
            let deadline = *timer.get_or_insert_with(|| leasehold_core::clock::now() + RETRY);
            let left = deadline.saturating_duration_since(leasehold_core::clock::now());
            if left.is_zero() {
                return Next::CheckSpace;
            }
            f = self.cv.wait_timeout(f, left).expect("recovery lock").0;
        }
    }

    /// Sleeps for `d` unless stopped first; false when stopped.
    pub fn pause(&self, d: Duration) -> bool {
        let f = self.lock();
        let (f, _) = self
            .cv
            .wait_timeout_while(f, d, |f| !f.stop)
            .expect("recovery lock");
        !f.stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One failure, whatever follows from it until the reopen; then the
    /// next one counts again. Health follows.
    #[test]
    fn a_failure_counts_once_until_the_store_is_reopened() {
        let r = Recovery::default();
        let health = r.subscribe();
        assert!(r.failed("sync", &Error::storage("EIO")));
        assert!(!r.failed("put", &Error::storage("being reopened")));
        assert!(!r.failed("checkpoint", &Error::storage("being reopened")));
        assert_eq!(r.counts(), (1, 0));
        assert!(
            matches!(&*health.borrow(), StoreHealth::Failed { error } if error == "sync failed: storage failure: EIO"),
            "{:?}",
            *health.borrow()
        );
        assert_eq!(r.wait(), Next::Recover);
        r.recovered();
        assert_eq!(r.counts(), (1, 1));
        assert!(health.borrow().is_ok());
        assert!(r.failed("checkpoint", &Error::storage("EIO")));
        assert_eq!(r.counts(), (2, 1));
    }

    /// A full disk shows in the health, under a failure's; the recovery
    /// thread is asked to look at the space until it returns.
    #[test]
    fn a_full_disk_is_checked_until_space_returns() {
        let r = Recovery::default();
        r.set_full(Some((2 << 20, 4 << 20)));
        assert_eq!(
            r.health(),
            StoreHealth::Full {
                free: 2 << 20,
                needed: 4 << 20
            }
        );
        assert_eq!(r.wait(), Next::CheckSpace);
        r.failed("put", &Error::storage("EIO"));
        assert!(matches!(r.health(), StoreHealth::Failed { .. }));
        assert_eq!(r.wait(), Next::Recover);
        r.recovered();
        r.set_full(None);
        assert!(r.health().is_ok());
        r.stop();
        assert_eq!(r.wait(), Next::Stop);
    }
}
