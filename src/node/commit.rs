//! Group commit: many concurrent changes share one durability barrier.
//!
//! A change is staged by writing it to the store and taking the next
//! sequence number, both while the node's state lock is held, so sequence
//! order is store order. The caller then awaits [`GroupCommit::wait`]. One
//! flusher thread runs [`Store::sync`] for everything staged so far and
//! publishes the highest sequence number it covered; every waiter at or
//! below it is released by that one sync. Under load the batches grow by
//! themselves: while one sync runs, the next batch gathers.
//!
//! The flusher is a plain thread, not a tokio task, because `sync` blocks
//! for as long as the disk takes; it must not hold a runtime worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::node::recovery::Trigger;
use crate::store::Store;

#[derive(Debug, Clone, Default)]
struct Flushed {
    /// Every change with a sequence number up to this one is durable,
    /// except those in `lost`.
    durable: u64,
    /// The last sync that failed covered changes up to this one...
    failed_upto: u64,
    /// ...and failed with this error.
    error: Option<String>,
    /// Ranges `(after, upto]` of changes that were staged on a store that
    /// failed and was reopened, with why: they will never be durable,
    /// whatever later syncs cover.
    lost: Vec<(u64, u64, String)>,
}

impl Flushed {
    fn outcome(&self, seq: u64) -> Option<Result<()>> {
        if let Some((_, _, why)) = self.lost.iter().find(|(a, b, _)| *a < seq && seq <= *b) {
            return Some(Err(Error::Storage(format!(
                "{why}; the change was not made durable and was discarded"
            ))));
        }
        if self.durable >= seq {
            return Some(Ok(()));
        }
        if self.failed_upto >= seq {
            return Some(Err(Error::Storage(
                self.error.clone().unwrap_or_else(|| "sync failed".into()),
            )));
        }
        None
    }
}

#[derive(Default)]
struct Requests {
    /// The highest sequence number somebody waits for.
    wanted: u64,
    stop: bool,
    /// The flusher waits on the condvar: only then does a new request
    /// need a (system call) wake-up.
    sleeping: bool,
}

struct Shared {
    /// The broken rule "ack-before-sync": replies do not wait for the sync.
    ack_early: std::sync::atomic::AtomicBool,
    staged: AtomicU64,
    requests: Mutex<Requests>,
    wake: Condvar,
    flushed: watch::Sender<Flushed>,
}

/// The group committer; see the module docs.
pub struct GroupCommit {
    shared: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

impl GroupCommit {
    /// Starts the flusher thread for `store`. A failed sync fires
    /// `on_failure`.
    pub fn start(store: Arc<dyn Store>, on_failure: Arc<Trigger>) -> GroupCommit {
        let shared = Arc::new(Shared {
            ack_early: std::sync::atomic::AtomicBool::new(false),
            staged: AtomicU64::new(0),
            requests: Mutex::new(Requests::default()),
            wake: Condvar::new(),
            flushed: watch::Sender::new(Flushed::default()),
        });
        let s = shared.clone();
        let flusher = std::thread::Builder::new()
            .name("leasehold-flusher".into())
            .spawn(move || flusher(&s, store.as_ref(), &on_failure))
            .expect("spawn the flusher thread");
        GroupCommit {
            shared,
            flusher: Mutex::new(Some(flusher)),
        }
    }

    /// Takes the next sequence number for a change just written to the
    /// store. Call it under the same lock as the store write.
    pub fn stage(&self) -> u64 {
        self.shared.staged.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The sequence number of the last staged change.
    pub fn staged(&self) -> u64 {
        self.shared.staged.load(Ordering::Acquire)
    }

    /// Waits until the change with sequence number `seq` (and every one
    /// before it) is durable. Returns at once if it already is.
    pub async fn wait(&self, seq: u64) -> Result<()> {
        if self.shared.ack_early.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut rx = self.shared.flushed.subscribe();
        let mut asked = false;
        loop {
            if let Some(r) = rx.borrow_and_update().outcome(seq) {
                return r;
            }
            if !asked {
                let wake = {
                    let mut r = self.shared.requests.lock().expect("requests lock");
                    if r.stop {
                        return Err(Error::ShuttingDown);
                    }
                    let later = seq > r.wanted;
                    r.wanted = r.wanted.max(seq);
                    later && r.sleeping
                };
                // After the unlock, so that the flusher does not wake up
                // only to wait for the lock; it rechecks `wanted` under it.
                if wake {
                    self.shared.wake.notify_one();
                }
                asked = true;
            }
            if rx.changed().await.is_err() {
                return Err(Error::ShuttingDown);
            }
        }
    }

    /// Breaks the durability rule on purpose: replies stop waiting for the
    /// sync. For the torture test's broken runs only.
    #[cfg(feature = "fault-injection")]
    pub fn ack_before_sync(&self) {
        self.shared.ack_early.store(true, Ordering::Relaxed);
    }

    /// Declares every staged change that is not durable yet lost: the store
    /// failed and is being reopened from what is on stable storage. Call it
    /// under the same lock as `stage`, so nothing is staged meanwhile.
    pub fn lose_pending(&self, why: &str) {
        let staged = self.staged();
        self.shared.flushed.send_modify(|f| {
            let after = f.lost.last().map_or(f.durable, |l| l.1.max(f.durable));
            if staged > after {
                f.lost.push((after, staged, why.to_owned()));
            }
        });
    }

    /// Syncs what is staged, stops the flusher and waits for it.
    pub fn stop(&self) {
        {
            let mut r = self.shared.requests.lock().expect("requests lock");
            r.wanted = r.wanted.max(self.staged());
            r.stop = true;
            self.shared.wake.notify_one();
        }
        if let Some(h) = self.flusher.lock().expect("flusher lock").take() {
            let _ = h.join();
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.stop();
    }
}

fn flusher(shared: &Shared, store: &dyn Store, on_failure: &Trigger) {
    let mut done = 0u64;
    loop {
        let stop = {
            let mut r = shared.requests.lock().expect("requests lock");
            while r.wanted <= done && !r.stop {
                r.sleeping = true;
                r = shared.wake.wait(r).expect("requests lock");
                r.sleeping = false;
            }
            r.stop && r.wanted <= done
        };
        if stop {
            // A clean shutdown: leave nothing for the next start to replay.
            if let Err(e) = store.checkpoint() {
                tracing::warn!(error = %e, "checkpoint at shutdown failed; the next start replays the log");
            }
            return;
        }
        // Everything staged so far was written to the store before its
        // number was taken, so this one sync covers all of it.
        let target = shared.staged.load(Ordering::Acquire);
        let result = store.sync();
        let failed = result.is_err();
        shared.flushed.send_modify(|f| match result {
            Ok(()) => f.durable = f.durable.max(target),
            Err(e) => {
                tracing::error!(error = %e, "sync failed; changes up to #{target} are not acknowledged");
                f.failed_upto = target;
                f.error = Some(e.to_string());
            }
        });
        done = target;
        if failed {
            on_failure.fire();
        } else if let Err(e) = store.settle() {
            // What was acknowledged is durable; the store needs a reopen
            // (which replays its log) before it takes more changes.
            tracing::error!(error = %e, "store failed after a sync");
            on_failure.fire();
        }
    }
}
