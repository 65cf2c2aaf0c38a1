//! Recovery from a failed store (disk full, I/O error).
//!
//! A failed put or sync fires the [`Trigger`]. The recovery thread then
//! declares every change that was not durable lost (their callers get
//! UNAVAILABLE, reason STORAGE), reopens the store from what is on stable
//! storage, and reloads the lease table from it, exactly as a restart
//! would: held leases are live again for a full TTL, tokens continue from
//! the stored ones. Until that succeeds every write fails fast; it is
//! retried every half second, so the server recovers by itself when space
//! returns.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How long to wait between attempts to reopen a failed store.
pub const RETRY: Duration = Duration::from_millis(500);

#[derive(Default)]
struct Flags {
    fired: bool,
    stop: bool,
}

/// Wakes the recovery thread.
#[derive(Default)]
pub struct Trigger {
    flags: Mutex<Flags>,
    cv: Condvar,
}

impl Trigger {
    /// Asks for a recovery.
    pub fn fire(&self) {
        self.flags.lock().expect("trigger lock").fired = true;
        self.cv.notify_all();
    }

    /// Ends the recovery thread.
    pub fn stop(&self) {
        self.flags.lock().expect("trigger lock").stop = true;
        self.cv.notify_all();
    }

    /// Waits until fired (true) or stopped (false).
    pub fn wait(&self) -> bool {
        let mut f = self.flags.lock().expect("trigger lock");
        while !f.fired && !f.stop {
            f = self.cv.wait(f).expect("trigger lock");
        }
        f.fired = false;
        !f.stop
    }

    /// Sleeps for `d` unless stopped first; false when stopped.
    pub fn pause(&self, d: Duration) -> bool {
        let f = self.flags.lock().expect("trigger lock");
        let (f, _) = self
            .cv
            .wait_timeout_while(f, d, |f| !f.stop)
            .expect("trigger lock");
        !f.stop
    }
}
