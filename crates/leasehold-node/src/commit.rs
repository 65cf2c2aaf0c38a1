//! Group commit: many concurrent changes share one durability barrier.
//!
//! A change is staged by writing it to the store and taking the next
//! sequence number, both while the node's state lock is held, so sequence
//! order is store order. The caller then awaits [`GroupCommit::wait`]. One
//! flusher thread runs [`Store::sync`] for everything staged so far and
//! publishes the highest sequence number it covered; every waiter at or
//! below it is released by that one sync, and only those are woken: a
//! waiter whose change is still pending sleeps through the publication.
//! Under load the batches grow by themselves: while one sync runs, the
//! next batch gathers. While writers are concurrent, the flusher also
//! waits a little before each sync (at most 150 µs), so that the
//! writes on their way join it; a lone writer never waits.
//!
//! The flusher is a plain thread, not a tokio task, because `sync` blocks
//! for as long as the disk takes; it must not hold a runtime worker. The
//! one exception is a lone change on an otherwise idle store with a fast
//! disk (see [`GroupCommit::wait`]): its waiter runs the sync itself, one
//! short `fdatasync` on its worker, which is quicker than the hand-off to
//! the flusher and back. **At most one sync runs at a time** (`syncing`),
//! so the log takes batches in sequence order and a published sequence
//! number never overtakes an unsynced change.
//!
//! A failed sync or checkpoint is reported to [`Recovery`] before the sync or
//! checkpoint counts as finished, and a reopen of the store holds syncs and
//! checkpoints off ([`GroupCommit::hold_syncs`]) once the running one has
//! finished. So no failure report ever crosses a reopen: the reopened store
//! is never taken for failed because of an error of the one before.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;

use crate::recovery::Recovery;
use leasehold_core::error::{Error, Result};
use leasehold_store::Store;

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

/// What syncs have decided, and who waits for a decision.
#[derive(Default)]
struct Published {
    flushed: Flushed,
    /// Waiters whose change is undecided, by `(seq, id)`: in sequence
    /// order, so a publication takes out exactly the decided ones with one
    /// `split_off`. A waiter is woken only when its own change is decided,
    /// not at every sync.
    waiters: BTreeMap<(u64, u64), Waker>,
    next_id: u64,
}

impl Published {
    /// Takes out the wakers of every waiter whose change is now decided.
    fn decided(&mut self) -> Vec<Waker> {
        let bound = self.flushed.decided_upto();
        let undecided = self.waiters.split_off(&(bound.saturating_add(1), 0));
        let candidates = std::mem::replace(&mut self.waiters, undecided);
        let mut woken = Vec::with_capacity(candidates.len());
        for ((seq, id), w) in candidates {
            if self.flushed.outcome(seq).is_some() {
                woken.push(w);
            } else {
                self.waiters.insert((seq, id), w);
            }
        }
        woken
    }
}

/// Resolves when the change with sequence number `seq` is decided: durable,
/// failed or lost.
struct Decided<'a> {
    shared: &'a Shared,
    seq: u64,
    /// This waiter's id in [`Published::waiters`], once registered.
    id: Option<u64>,
}

impl Future for Decided<'_> {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let seq = self.seq;
        let mut p = self.shared.published.lock().expect("published lock");
        if let Some(r) = p.flushed.outcome(seq) {
            // The publisher took the entry out when it decided `seq`.
            drop(p);
            self.id = None;
            return Poll::Ready(r);
        }
        match self.id {
            Some(id) => {
                if let Some(w) = p.waiters.get_mut(&(seq, id)) {
                    w.clone_from(cx.waker());
                }
            }
            None => {
                let id = p.next_id;
                p.next_id += 1;
                p.waiters.insert((seq, id), cx.waker().clone());
                drop(p);
                self.id = Some(id);
            }
        }
        Poll::Pending
    }
}

impl Drop for Decided<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut p = self.shared.published.lock().expect("published lock");
            p.waiters.remove(&(self.seq, id));
        }
    }
}

impl Flushed {
    /// Every change up to this one is decided (durable, failed or lost);
    /// some later ones may be too.
    fn decided_upto(&self) -> u64 {
        self.lost
            .iter()
            .map(|(_, b, _)| *b)
            .fold(self.durable.max(self.failed_upto), u64::max)
    }

    fn outcome(&self, seq: u64) -> Option<Result<()>> {
        if let Some((_, _, why)) = self.lost.iter().find(|(a, b, _)| *a < seq && seq <= *b) {
            return Some(Err(Error::Storage(format!(
                "{why}; the change was not made durable: it is discarded when the store reopens \
                 (should the server die before that, its outcome is unknown)"
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

/// Upper bounds, in seconds, of the sync-duration histogram's buckets.
const SYNC_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// What group commit has done since start: for `/metrics`.
#[derive(Debug, Clone)]
pub struct SyncStats {
    /// Syncs run (each one log write and one `fdatasync`), failed ones
    /// included.
    pub syncs: u64,
    /// Changes made durable by them: `changes / syncs` is the mean batch.
    pub changes: u64,
    /// How long each sync took. A handle on the live histogram (clones
    /// share it), read when it is encoded, not a copy.
    pub duration: Histogram,
}

struct SyncCounters {
    syncs: AtomicU64,
    changes: AtomicU64,
    duration: Histogram,
}

impl Default for SyncCounters {
    fn default() -> Self {
        SyncCounters {
            syncs: AtomicU64::new(0),
            changes: AtomicU64::new(0),
            duration: Histogram::new(SYNC_BUCKETS),
        }
    }
}

impl SyncCounters {
    /// Called once per sync, by the one sync running: the histogram's
    /// lock is taken by nobody else but a scrape.
    fn record(&self, took: Duration, changes: u64) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.changes.fetch_add(changes, Ordering::Relaxed);
        self.duration.observe(took.as_secs_f64());
    }

    fn snapshot(&self) -> SyncStats {
        SyncStats {
            syncs: self.syncs.load(Ordering::Relaxed),
            changes: self.changes.load(Ordering::Relaxed),
            duration: self.duration.clone(),
        }
    }
}

/// A waiter leads its own sync only while syncs take no longer than this:
/// it blocks its runtime worker for that long.
const LEAD_MAX_SYNC: Duration = Duration::from_micros(500);

/// The longest the flusher waits for more changes to join a sync when
/// writers are concurrent ([`Requests::gather`])...
const GATHER_MAX: Duration = Duration::from_micros(150);
/// ...and at most this many times as long as the last sync took, so that
/// on a fast disk the wait stays in proportion.
const GATHER_SYNCS: u32 = 4;

/// How long the flusher waits, after the last sync of a burst, with
/// nothing else to do, before it settles the store ([`Store::settle`]).
pub const SETTLE_AFTER: Duration = Duration::from_secs(5);

/// Whether the runtime has another worker to run tasks while this one
/// blocks in a sync.
fn other_workers() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|h| h.metrics().num_workers() > 1)
}

#[derive(Default)]
struct Requests {
    /// The highest sequence number somebody waits for.
    wanted: u64,
    /// The highest sequence number a finished sync covered.
    synced: u64,
    /// How many changes the last sync covered, and how long it took.
    last_batch: u64,
    last_took: Duration,
    /// More changes were waiting when the last sync ended than it
    /// covered: writers are concurrent.
    overlapped: bool,
    /// A sync runs (on the flusher, or led by a waiter): at most one at a
    /// time, so that the log takes batches in sequence order.
    syncing: bool,
    /// A waiter's sync left a checkpoint due: [`Store::checkpoint_if_due`].
    checkpoint: bool,
    /// The flusher runs [`Store::checkpoint_if_due`], which may checkpoint and hold
    /// the log for a while: no waiter leads a sync meanwhile.
    settling: bool,
    /// A reopen of the store holds off every new sync and checkpoint.
    held: bool,
    /// ...and waits, on `idle`, for the one running to finish.
    holder_waits: bool,
    stop: bool,
    /// The flusher waits on the condvar and nobody has woken it yet:
    /// only then does a new request need a (system call) wake-up.
    sleeping: bool,
}

impl Requests {
    /// How long the flusher waits before its next sync, so that the
    /// writes on their way join it: [`GATHER_MAX`], or four times as long
    /// as the last sync took if that is less, and only while writers are
    /// concurrent (the last sync covered more than one change, or more
    /// were waiting when it ended). A lone writer never waits: its write
    /// is synced at once.
    ///
    /// Each sync costs the flusher and the runtime's workers a sleep and a
    /// wake-up each, and on a virtual machine those cost more than the
    /// writes themselves: at 16 clients a sync used to cover 4 writes and
    /// a durable write cost 1.9x a renewal's server CPU. The clients'
    /// next writes arrive within about a round trip of the replies, so a
    /// short wait gathers most of them into one sync (BENCHMARKS.md).
    fn gather(&self) -> Option<Duration> {
        let concurrent = self.last_batch > 1 || self.overlapped;
        (concurrent && !self.last_took.is_zero())
            .then(|| (self.last_took * GATHER_SYNCS).min(GATHER_MAX))
    }
}

struct Shared {
    store: Arc<dyn Store>,
    /// Told of every failed sync and checkpoint.
    on_failure: Arc<Recovery>,
    /// The broken rule "ack-before-sync": replies do not wait for the sync.
    ack_early: std::sync::atomic::AtomicBool,
    staged: AtomicU64,
    /// Syncs that a waiter ran itself.
    led: AtomicU64,
    counters: SyncCounters,
    requests: Mutex<Requests>,
    wake: Condvar,
    /// Wakes a reopen waiting for the running sync or checkpoint to finish.
    idle: Condvar,
    published: Mutex<Published>,
}

impl Shared {
    /// Changes what syncs have decided, and wakes the waiters it decides.
    fn publish(&self, change: impl FnOnce(&mut Flushed)) {
        let woken = {
            let mut p = self.published.lock().expect("published lock");
            change(&mut p.flushed);
            p.decided()
        };
        for w in woken {
            w.wake();
        }
    }

    fn outcome(&self, seq: u64) -> Option<Result<()>> {
        let p = self.published.lock().expect("published lock");
        p.flushed.outcome(seq)
    }

    /// Under the requests lock, when a sync or checkpoint has just finished:
    /// wakes a reopen that waits for it.
    fn finished(&self, r: &mut Requests) {
        if r.holder_waits && !r.syncing && !r.settling {
            r.holder_waits = false;
            self.idle.notify_all();
        }
    }
}

/// The group committer; see the module docs.
pub struct GroupCommit {
    shared: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

/// Syncs and checkpoints held off, for a reopen of the store; see
/// [`GroupCommit::hold_syncs`].
pub struct SyncsHeld<'a> {
    shared: &'a Shared,
}

impl Drop for SyncsHeld<'_> {
    fn drop(&mut self) {
        let wake = {
            let mut r = self.shared.requests.lock().expect("requests lock");
            r.held = false;
            let wake = r.sleeping && (r.wanted > r.synced || r.stop || r.checkpoint);
            if wake {
                r.sleeping = false;
            }
            wake
        };
        if wake {
            self.shared.wake.notify_one();
        }
    }
}

impl GroupCommit {
    /// Starts the flusher thread for `store`. Failed syncs and checkpoints are
    /// reported to `on_failure`.
    pub fn start(store: Arc<dyn Store>, on_failure: Arc<Recovery>) -> GroupCommit {
        let shared = Arc::new(Shared {
            store,
            on_failure,
            ack_early: std::sync::atomic::AtomicBool::new(false),
            staged: AtomicU64::new(0),
            led: AtomicU64::new(0),
            counters: SyncCounters::default(),
            requests: Mutex::new(Requests::default()),
            wake: Condvar::new(),
            idle: Condvar::new(),
            published: Mutex::new(Published::default()),
        });
        let s = shared.clone();
        let flusher = std::thread::Builder::new()
            .name("leasehold-flusher".into())
            .spawn(move || flusher(&s))
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
    ///
    /// A lone change is synced right here, on the caller's runtime worker,
    /// which saves the two thread hand-offs of the flusher's round trip
    /// (about 40 µs of a 200 µs write): when it is the newest change, no
    /// sync or checkpoint runs, nobody else waits, the last sync covered at
    /// most one change and took at most 0.5 ms (`LEAD_MAX_SYNC`), and the
    /// runtime has another worker. Anything busier goes to the flusher,
    /// which batches.
    pub async fn wait(&self, seq: u64) -> Result<()> {
        if self.shared.ack_early.load(Ordering::Relaxed) {
            return Ok(());
        }
        loop {
            if let Some(r) = self.shared.outcome(seq) {
                return r;
            }
            let (lead, wake) = {
                let mut r = self.shared.requests.lock().expect("requests lock");
                if r.stop {
                    return Err(Error::ShuttingDown);
                }
                let lone = !r.syncing
                    && !r.settling
                    && !r.held
                    && r.last_batch <= 1
                    && r.last_took <= LEAD_MAX_SYNC
                    && r.wanted <= r.synced
                    && seq == self.shared.staged.load(Ordering::Acquire)
                    && other_workers();
                if lone {
                    r.syncing = true;
                }
                let later = seq > r.wanted;
                r.wanted = r.wanted.max(seq);
                // One wake-up per sleep: whoever wakes the flusher clears
                // `sleeping`, so the writes that follow before it runs do
                // not make a system call each.
                let wake = !lone && later && r.sleeping;
                if wake {
                    r.sleeping = false;
                }
                (lone, wake)
            };
            // After the unlock, so that the flusher does not wake up only
            // to wait for the lock; it rechecks `wanted` under it.
            if wake {
                self.shared.wake.notify_one();
            }
            if !lead {
                // Woken once, by the sync that decides `seq`.
                return Decided {
                    shared: &self.shared,
                    seq,
                    id: None,
                }
                .await;
            }
            self.shared.led.fetch_add(1, Ordering::Relaxed);
            sync_once(&self.shared, false);
        }
    }

    /// Syncs run so far, their batches, and their durations' histogram.
    pub fn sync_stats(&self) -> SyncStats {
        self.shared.counters.snapshot()
    }

    /// How many syncs a lone waiter ran itself, not the flusher.
    pub fn led_syncs(&self) -> u64 {
        self.shared.led.load(Ordering::Relaxed)
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
        self.shared.publish(|f| {
            let after = f.lost.last().map_or(f.durable, |l| l.1.max(f.durable));
            if staged > after {
                f.lost.push((after, staged, why.to_owned()));
            }
        });
    }

    /// Holds off every sync and checkpoint, once the one running (if any) has
    /// finished, until the guard is dropped: for a reopen of the store, so
    /// that a failure a sync reports is always about the store it ran on.
    /// One holder at a time (the recovery thread). Take it before the
    /// node's state lock: a sync never waits for that lock.
    pub fn hold_syncs(&self) -> SyncsHeld<'_> {
        let mut r = self.shared.requests.lock().expect("requests lock");
        r.held = true;
        while r.syncing || r.settling {
            r.holder_waits = true;
            r = self.shared.idle.wait(r).expect("requests lock");
        }
        SyncsHeld {
            shared: &self.shared,
        }
    }

    /// After the store was reopened: every change staged so far is durable
    /// or was declared lost ([`GroupCommit::lose_pending`]), and the store
    /// holds nothing unsynced. Takes a sequence number for the reopen
    /// itself and publishes it durable, so that a read, which waits for the
    /// newest number staged, never waits for a lost change: it reads the
    /// reopened store, which holds none. Call it under the same lock as
    /// `stage`, with syncs held off.
    pub fn reopened(&self) {
        let seq = self.stage();
        self.shared.publish(|f| f.durable = f.durable.max(seq));
        let mut r = self.shared.requests.lock().expect("requests lock");
        r.synced = r.synced.max(seq);
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

/// Runs one sync of everything staged so far and publishes it. The
/// caller set `syncing`; this reports a failure, clears `syncing`, and
/// wakes the flusher if there is work for it. Returns whether the sync
/// failed.
fn sync_once(shared: &Shared, on_flusher: bool) -> bool {
    // Everything staged so far was written to the store before its number
    // was taken, so this one sync covers all of it.
    let target = shared.staged.load(Ordering::Acquire);
    let started = leasehold_core::clock::now();
    let result = shared.store.sync();
    let took = leasehold_core::clock::now().saturating_duration_since(started);
    let failed = result.is_err();
    if let Err(e) = &result {
        // Before `syncing` is cleared: no reopen runs in between.
        shared.on_failure.failed("sync", e);
    }
    // Counted before the changes are published durable: a caller that saw
    // its change acknowledged finds its sync on /metrics. `synced` moves
    // only here (one sync at a time) and in a reopen, with syncs held.
    let batch = {
        let r = shared.requests.lock().expect("requests lock");
        target.saturating_sub(r.synced)
    };
    shared.counters.record(took, if failed { 0 } else { batch });
    shared.publish(|f| match result {
        Ok(()) => f.durable = f.durable.max(target),
        Err(e) => {
            tracing::error!(error = %e, "sync failed; changes up to #{target} are not acknowledged");
            f.failed_upto = target;
            f.error = Some(e.to_string());
        }
    });
    let checkpoint = !on_flusher && !failed && shared.store.checkpoint_due();
    let wake = {
        let mut r = shared.requests.lock().expect("requests lock");
        r.last_batch = batch;
        r.last_took = took;
        r.overlapped = r.wanted > target;
        r.synced = r.synced.max(target);
        r.syncing = false;
        r.checkpoint |= checkpoint;
        shared.finished(&mut r);
        let wake = r.sleeping && (r.wanted > r.synced || r.stop || r.checkpoint);
        if wake {
            r.sleeping = false;
        }
        wake
    };
    if wake {
        shared.wake.notify_one();
    }
    failed
}

fn flusher(shared: &Shared) {
    enum Next {
        Sync(Option<Duration>),
        Settle,
        Idle,
        Stop,
    }
    let store = shared.store.as_ref();
    // The syncs the last settle covered: a burst since waits to be.
    let mut settled = 0;
    loop {
        let next = {
            let mut r = shared.requests.lock().expect("requests lock");
            loop {
                // A waiter's own sync runs, or a reopen holds syncs off:
                // either wakes the flusher when done.
                if !r.syncing && !r.held {
                    if r.wanted > r.synced {
                        r.syncing = true;
                        break Next::Sync(r.gather());
                    }
                    if r.checkpoint {
                        r.checkpoint = false;
                        break Next::Settle;
                    }
                    if r.stop {
                        break Next::Stop;
                    }
                }
                r.sleeping = true;
                if r.synced > settled && !r.syncing && !r.held {
                    let (g, waited) = shared
                        .wake
                        .wait_timeout(r, SETTLE_AFTER)
                        .expect("requests lock");
                    r = g;
                    r.sleeping = false;
                    let quiet = r.wanted <= r.synced && !r.checkpoint && !r.stop;
                    if waited.timed_out() && quiet && !r.syncing && !r.held {
                        settled = r.synced;
                        r.settling = true;
                        break Next::Idle;
                    }
                    continue;
                }
                r = shared.wake.wait(r).expect("requests lock");
                r.sleeping = false;
            }
        };
        if let Next::Sync(Some(gather)) = next {
            // `syncing` is set: the writes that come meanwhile wait for
            // this sync, which takes them all.
            std::thread::sleep(gather);
        }
        match next {
            Next::Stop => {
                // A clean shutdown: leave nothing for the next start to replay.
                if let Err(e) = store.checkpoint() {
                    shared.on_failure.failed("checkpoint", &e);
                    tracing::warn!(error = %e, "checkpoint at shutdown failed; the next start replays the log");
                }
                return;
            }
            Next::Idle => {
                if let Err(e) = store.settle() {
                    shared.on_failure.failed("checkpoint", &e);
                }
                let mut r = shared.requests.lock().expect("requests lock");
                r.settling = false;
                shared.finished(&mut r);
            }
            Next::Sync(_) if sync_once(shared, true) => continue,
            Next::Sync(_) | Next::Settle => {
                {
                    let mut r = shared.requests.lock().expect("requests lock");
                    if r.held {
                        // A reopen began since the sync: checkpoint after it.
                        r.checkpoint = true;
                        continue;
                    }
                    r.settling = true;
                }
                let checkpointed = store.checkpoint_if_due();
                if let Err(e) = &checkpointed {
                    // What was acknowledged is durable; the store needs a
                    // reopen (which replays its log) before it takes more
                    // changes. Reported before `settling` is cleared.
                    shared.on_failure.failed("checkpoint", e);
                }
                let mut r = shared.requests.lock().expect("requests lock");
                r.settling = false;
                shared.finished(&mut r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::lease::Limits;
    use leasehold_store::memory::MemoryStore;
    use leasehold_store::sled::SledStore;
    use leasehold_store::ValueRecord;

    fn put(store: &dyn Store, commit: &GroupCommit, key: &str, version: u64) -> u64 {
        let job = Limits::default().job("j").unwrap();
        let rec = ValueRecord {
            token: leasehold_core::lease::Token(1),
            version,
            value: Some(key.as_bytes().to_vec()),
        };
        store.put_value(&job, key.as_bytes(), &rec).unwrap();
        commit.stage()
    }

    fn version(store: &dyn Store, key: &str) -> Option<u64> {
        let job = Limits::default().job("j").unwrap();
        store
            .get_value(&job, key.as_bytes())
            .unwrap()
            .map(|r| r.version)
    }

    /// Counts its wake-ups.
    struct Counter(AtomicU64);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A waiter is woken once, by the publication that decides its own
    /// change, not by those that decide earlier ones; a dropped waiter
    /// leaves nothing behind.
    #[test]
    fn waiters_wake_only_when_their_change_is_decided() {
        let store = Arc::new(MemoryStore::new());
        let commit = GroupCommit::start(store, Arc::new(Recovery::default()));
        let shared = &commit.shared;
        let counters: Vec<_> = (0..3)
            .map(|_| Arc::new(Counter(AtomicU64::new(0))))
            .collect();
        let mut waits: Vec<_> = [10, 20, 30]
            .into_iter()
            .map(|seq| {
                Box::pin(Decided {
                    shared,
                    seq,
                    id: None,
                })
            })
            .collect();
        let poll = |w: &mut Pin<Box<Decided<'_>>>, c: &Arc<Counter>| {
            let waker = Waker::from(c.clone());
            w.as_mut().poll(&mut Context::from_waker(&waker))
        };
        for (w, c) in waits.iter_mut().zip(&counters) {
            assert!(poll(w, c).is_pending());
        }
        let woken = |counters: &[Arc<Counter>]| -> Vec<u64> {
            counters
                .iter()
                .map(|c| c.0.load(Ordering::Relaxed))
                .collect()
        };
        shared.publish(|f| f.durable = 15);
        assert_eq!(woken(&counters), [1, 0, 0]);
        assert!(matches!(
            poll(&mut waits[0], &counters[0]),
            Poll::Ready(Ok(()))
        ));
        shared.publish(|f| f.durable = 19);
        assert_eq!(woken(&counters), [1, 0, 0], "nothing decided, nobody woken");
        // A failed sync decides its changes too: with an error.
        shared.publish(|f| {
            f.failed_upto = 25;
            f.error = Some("disk gone".into());
        });
        assert_eq!(woken(&counters), [1, 1, 0]);
        assert!(matches!(
            poll(&mut waits[1], &counters[1]),
            Poll::Ready(Err(Error::Storage(m))) if m == "disk gone"
        ));
        // The last waiter gives up: its entry goes with it.
        assert_eq!(shared.published.lock().unwrap().waiters.len(), 1);
        waits.truncate(2);
        assert!(shared.published.lock().unwrap().waiters.is_empty());
        shared.publish(|f| f.durable = 30);
        assert_eq!(woken(&counters), [1, 1, 0]);
    }

    /// A lone write on an idle store syncs on its own worker; one on a
    /// runtime with a single worker never blocks it, and goes to the
    /// flusher. Both are durable when the wait returns: a reopen, which
    /// drops whatever is not, keeps them.
    #[test]
    fn a_lone_write_syncs_itself_only_with_another_worker_to_spare() {
        for (workers, led) in [(2, true), (1, false)] {
            let store = Arc::new(MemoryStore::new());
            let commit = GroupCommit::start(store.clone(), Arc::new(Recovery::default()));
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .build()
                .unwrap();
            let seq = put(&*store, &commit, "k", 1);
            rt.block_on(commit.wait(seq)).unwrap();
            assert_eq!(commit.led_syncs() == 1, led, "{workers} workers");
            assert_eq!(store.syncs(), 1);
            drop(commit);
            store.reopen().unwrap();
            assert_eq!(version(&*store, "k"), Some(1));
        }
    }

    /// The flusher waits for more writes only while writers are
    /// concurrent, never for a lone writer's, and never longer than
    /// [`GATHER_MAX`] or four of the last syncs.
    #[test]
    fn the_flusher_gathers_only_while_writers_are_concurrent() {
        let took = Duration::from_micros(20);
        let gather = |last_batch, overlapped, last_took| {
            Requests {
                last_batch,
                overlapped,
                last_took,
                ..Requests::default()
            }
            .gather()
        };
        assert_eq!(gather(1, false, took), None, "a lone writer");
        assert_eq!(gather(0, false, took), None, "nothing synced yet");
        assert_eq!(gather(2, false, took), Some(took * 4));
        assert_eq!(gather(1, true, took), Some(took * 4), "another waited");
        assert_eq!(gather(9, true, Duration::from_millis(3)), Some(GATHER_MAX));
    }

    /// Many writers at once, some syncing themselves and some through the
    /// flusher: every acknowledged write is durable, and the log keeps
    /// them in order (the newest version of each key wins after a reopen).
    /// On sled: durable means on disk, read back by a new open.
    #[test]
    fn concurrent_waiters_never_acknowledge_an_unsynced_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path()).unwrap());
        let commit = Arc::new(GroupCommit::start(
            store.clone(),
            Arc::new(Recovery::default()),
        ));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let stage = Arc::new(Mutex::new(()));
        rt.block_on(async {
            let mut tasks = Vec::new();
            for w in 0..8 {
                let (store, commit, stage) = (store.clone(), commit.clone(), stage.clone());
                tasks.push(tokio::spawn(async move {
                    for v in 1..=40u64 {
                        let key = format!("k{}", (w + v) % 5);
                        // Put and stage under one lock, as the node does.
                        let seq = {
                            let _g = stage.lock().unwrap();
                            let v = version(&*store, &key).unwrap_or(0) + 1;
                            put(&*store, &commit, &key, v)
                        };
                        commit.wait(seq).await.unwrap();
                        assert!(
                            commit.shared.published.lock().unwrap().flushed.durable >= seq,
                            "acknowledged before durable"
                        );
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let newest: Vec<_> = (0..5).map(|k| version(&*store, &format!("k{k}"))).collect();
        assert_eq!(newest.iter().map(|v| v.unwrap()).sum::<u64>(), 8 * 40);
        commit.stop();
        drop(commit);
        drop(store);
        let reopened = SledStore::open(dir.path()).unwrap();
        let after: Vec<_> = (0..5)
            .map(|k| version(&reopened, &format!("k{k}")))
            .collect();
        assert_eq!(after, newest);
    }

    /// A burst of writes that leaves no checkpoint due is checkpointed once
    /// the flusher has had nothing to do for [`SETTLE_AFTER`]; then the
    /// flusher sleeps again, and a new write is synced as usual.
    #[test]
    fn an_idle_store_is_settled_after_a_burst() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path()).unwrap());
        let commit = GroupCommit::start(store.clone(), Arc::new(Recovery::default()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let generation = || store.last_checkpoint().unwrap().generation;
        let start = generation();
        rt.block_on(async {
            for v in 1..=3 {
                let seq = put(&*store, &commit, "k", v);
                commit.wait(seq).await.unwrap();
            }
        });
        assert!(!store.checkpoint_due(), "a burst too small to be due");
        assert_eq!(generation(), start, "no checkpoint yet");
        let t = std::time::Instant::now();
        while generation() == start {
            assert!(
                t.elapsed() < SETTLE_AFTER * 4,
                "never settled after {:?}",
                t.elapsed()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(t.elapsed() >= SETTLE_AFTER / 2, "settled during the burst");
        // Settled once: nothing new, no new checkpoint.
        let settled = generation();
        std::thread::sleep(SETTLE_AFTER + Duration::from_secs(1));
        assert_eq!(generation(), settled, "settled again with nothing to do");
        rt.block_on(async {
            let seq = put(&*store, &commit, "k", 4);
            commit.wait(seq).await.unwrap();
        });
        assert_eq!(version(&*store, "k"), Some(4));
        commit.stop();
    }
}
