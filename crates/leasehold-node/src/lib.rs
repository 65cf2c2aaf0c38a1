//! The single-node coordinator: the lease rules, the store, group commit,
//! waiting `Acquire`s and watchers, wired together.
//!
//! One of leasehold's two backends; the server's `Backend` picks it or the
//! etcd frontend (`leasehold-etcd`), which this crate never imports. The
//! types both speak are `leasehold-backend`'s, the rules
//! `leasehold-core`'s, and durability `leasehold-store`'s.
//!
//! # One owner of lease state
//!
//! The [`LeaseTable`] lives behind one `std::sync::Mutex`, together with the
//! wakers of waiting `Acquire`s. The lock is held only to decide and to
//! hand the change to the store (an in-memory buffer write), never across an
//! `.await`: a decision takes microseconds, so a tokio mutex or an actor
//! task would only add a hop. Durability is awaited after the lock is
//! released, through [`commit::GroupCommit`].
//!
//! # Nothing is acknowledged, or shown, before it is durable
//!
//! Every change that the store must keep (a grant, a release, a longer TTL,
//! an accepted write) is staged in the store under the lock and gets a
//! sequence number. Each reply waits until the change it reports is durable,
//! including replies that only *show* state: `GetLease` waits for the job's
//! last change, `Read` for everything staged before it read. So no client
//! ever sees a token or a value that a crash could take back.
//!
//! # No decision waits for the disk under the state lock
//!
//! A change that depends on stored records (a write reads its key's) reads
//! them before it takes the lock; under the lock the store confirms them
//! from memory, and if a checkpoint moved them meanwhile the node lets go
//! and reads again (`Node::lock_with_records`). So a leader's renewal
//! waits behind at most the decisions ahead of it.
//!
//! # Waiting
//!
//! `Acquire` with a wait joins the job's first-come-first-served line in
//! the table. Only the first in line sleeps until the lease's deadline; the
//! others sleep until they move up. A `Release` grants the first waiter in
//! the same decision, so one durable write covers both, and the waiter
//! just wakes up. Nothing polls.
//!
//! # Where each part lives
//!
//! - this file: [`Node`]'s state, its opening and closing, and what every
//!   decision goes through (`Node::decide`: the state lock, the store, the
//!   sequence number to wait for); the reopen after a store failure.
//! - `leases`: `Acquire` and the wait in line, `Renew`, `Release`, the
//!   give-back of a grant whose caller went away, `DeleteJob`.
//! - `values`: checked writes, staged writes, reads of a job's keys.
//! - `views`: `GetLease`, `ListLeases`, the status page, `GetHistory`.
//! - `watchers`: `WatchLease`, and each watched job's deadline timer.
//! - `health`: the metrics snapshot, sync statistics, the store's health.
//! - [`commit`]: group commit; [`recovery`]: the store's failures and the
//!   reopen.

#![warn(missing_docs)]

pub mod commit;
mod health;
mod leases;
pub mod recovery;
mod values;
mod views;
mod watchers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use tokio::sync::{watch, Notify};

use leasehold_backend::{StateLimits, CHANGES_BUFFERED};
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{Effects, HistoryEvent, JobName, LeaseTable, WaiterId};
use leasehold_store::{HistoryPut, Store};

use commit::GroupCommit;
use recovery::{Next, Recovery};

/// A history event as the store keeps it: its instant on the wall clock,
/// which is for people only. `now` and `wall_now` are one moment on both
/// clocks.
pub fn history_put(e: &HistoryEvent, now: Instant, wall_now: u64) -> HistoryPut {
    let wall =
        |at: Instant| wall_now.saturating_sub(now.saturating_duration_since(at).as_millis() as u64);
    match e {
        HistoryEvent::Granted {
            token,
            holder,
            ttl,
            value,
        } => HistoryPut::Grant {
            token: *token,
            holder: holder.clone(),
            at_unix_ms: wall_now,
            ttl: *ttl,
            value: value.clone(),
        },
        HistoryEvent::Ended { token, how, at } => HistoryPut::End {
            token: *token,
            how: *how,
            at_unix_ms: wall(*at),
        },
    }
}

struct State {
    table: LeaseTable,
    /// Keys per job (tombstones included), for the jobs that wrote a new key since the
    /// start: counted from the store the first time, then kept.
    keys: HashMap<JobName, usize>,
    wakers: HashMap<WaiterId, Arc<Notify>>,
    /// Goes up each time the table is reloaded after a store failure;
    /// waiters queued before that must ask again.
    generation: u64,
}

impl State {
    fn wake(&self, ids: &[WaiterId]) {
        for id in ids {
            if let Some(n) = self.wakers.get(id) {
                n.notify_one();
            }
        }
    }
}

struct Inner {
    state: Mutex<State>,
    store: Arc<dyn Store>,
    commit: GroupCommit,
    watchers: Mutex<HashMap<JobName, watch::Sender<u64>>>,
    /// Every job whose leadership changed (as its watchers are told) or
    /// that refused a fenced write: the status page's feed.
    changes: tokio::sync::broadcast::Sender<JobName>,
    closing: watch::Sender<bool>,
    recovery: Arc<Recovery>,
    limits: StateLimits,
}

impl Inner {
    /// Tells the change feed of `job`; costs nothing while no status page
    /// is open.
    fn changed(&self, job: &JobName) {
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(job.clone());
        }
    }

    /// Under the state lock, after a put failed or before a reopen: every
    /// change not durable yet is lost, and the recovery thread must run.
    fn fail(&self, st: &mut State, job: Option<&JobName>, e: &Error) {
        // A number for this change too, so that a reply waiting on the
        // job's last change sees the loss instead of older, durable state.
        let seq = self.commit.stage();
        if let Some(job) = job {
            st.table.set_stamp(job, seq);
        }
        self.commit.lose_pending(&e.to_string());
        self.recovery.failed("put", e);
    }

    /// Asks the store whether the disk is too full for any change, for the
    /// health: after a change was refused for lack of space, and every
    /// [`recovery::RETRY`] while it is full.
    fn check_space(&self) {
        match self.store.check_space() {
            Ok(()) => {
                if self.recovery.set_full(None) {
                    tracing::info!("disk space is back: changes are accepted again");
                }
            }
            Err(Error::NoSpace { free, needed }) => {
                if self.recovery.set_full(Some((free, needed))) {
                    tracing::warn!(
                        free,
                        needed,
                        "disk full: {free} bytes are free, and a change needs at least {needed} \
                         beyond its own size. No change can be made until space is freed; \
                         reads and renewals go on"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot tell the free space of the data dir"),
        }
    }

    /// Reopens the store and reloads the lease table from it.
    fn recover(&self) -> Result<()> {
        // No sync or checkpoint runs from here on: none can report a failure
        // of the store that this reopen replaces.
        let _held = self.commit.hold_syncs();
        let mut st = self.state.lock().expect("lease state lock poisoned");
        self.commit
            .lose_pending("the store failed and was reopened from stable storage");
        self.store.reopen()?;
        let records = self.store.leases()?;
        st.table.reload(records, self.store.floors(), clock::now());
        st.keys.clear();
        self.commit.reopened();
        st.generation += 1;
        self.recovery.recovered();
        for n in st.wakers.values() {
            n.notify_one();
        }
        drop(st);
        for s in self.watchers.lock().expect("watchers lock").values() {
            s.send_modify(|n| *n += 1);
        }
        tracing::warn!("store recovered: lease table reloaded from stable storage");
        Ok(())
    }
}

/// Runs recoveries when a failure fires one, retrying each until it
/// succeeds, and looks at the free space while the disk is full.
fn recovery_thread(inner: Weak<Inner>, recovery: Arc<Recovery>) {
    loop {
        match recovery.wait() {
            Next::Stop => return,
            Next::CheckSpace => match inner.upgrade() {
                Some(inner) => inner.check_space(),
                None => return,
            },
            Next::Recover => loop {
                let Some(inner) = inner.upgrade() else { return };
                match inner.recover() {
                    Ok(()) => break,
                    Err(e) => tracing::error!(error = %e, "store recovery failed; retrying"),
                }
                drop(inner);
                if !recovery.pause(recovery::RETRY) {
                    return;
                }
            },
        }
    }
}

/// The coordinator. Cheap to clone: clones share one state.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

impl Node {
    /// Loads every lease record from `store` and starts serving from it.
    /// Leases held when the store was last written are live again for their
    /// full TTL from now.
    ///
    /// A disk too full for any change does not stop it: it says so (a
    /// warning naming the free and the needed bytes), refuses changes with
    /// [`Error::NoSpace`] and reports an unhealthy store until space
    /// returns, while reads and renewals go on.
    pub fn open(store: Arc<dyn Store>) -> Result<Node> {
        Node::open_with(store, StateLimits::default())
    }

    /// [`Node::open`], with limits on the state it keeps.
    pub fn open_with(store: Arc<dyn Store>, limits: StateLimits) -> Result<Node> {
        let records = store.leases()?;
        let table = LeaseTable::restore(records, store.floors(), clock::now());
        let recovery = Arc::new(Recovery::default());
        let commit = GroupCommit::start(store.clone(), recovery.clone());
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                table,
                keys: HashMap::new(),
                wakers: HashMap::new(),
                generation: 0,
            }),
            store,
            commit,
            watchers: Mutex::new(HashMap::new()),
            changes: tokio::sync::broadcast::Sender::new(CHANGES_BUFFERED),
            closing: watch::Sender::new(false),
            recovery: recovery.clone(),
            limits,
        });
        if let Err(Error::NoSpace { free, needed }) = inner.store.check_space() {
            inner.recovery.set_full(Some((free, needed)));
            tracing::warn!(
                free,
                needed,
                "starting on a full disk: {free} bytes are free, and a change needs at least \
                 {needed} beyond its own size. No change can be made (each is refused with \
                 DISK_FULL) and health is NOT_SERVING until space is freed; reads and renewals \
                 work"
            );
        }
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("leasehold-recovery".into())
            .spawn(move || recovery_thread(weak, recovery))
            .map_err(Error::storage)?;
        Ok(Node { inner })
    }

    /// The store, for a backup.
    pub fn store(&self) -> Arc<dyn Store> {
        self.inner.store.clone()
    }

    /// [`Store::backup`], on a blocking thread's time. The checkpoint a
    /// backup starts with is a store operation like any other: when it
    /// fails, the store is out of service and the recovery thread is told
    /// at once (health shows it, and a reopen starts), not at the next
    /// change.
    pub fn backup(&self, out: &mut dyn std::io::Write) -> Result<()> {
        let r = self.inner.store.backup(out);
        if let Err(e) = &r {
            if self.inner.store.needs_reopen() {
                self.inner.recovery.failed("checkpoint", e);
            }
        }
        r
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while deciding would leave the table half-changed; the
        // server must not go on from that.
        self.inner.state.lock().expect("lease state lock poisoned")
    }

    /// Decides under the lock and stages what the decision wants kept.
    /// Returns the decision, the sequence number to wait for, and whether
    /// watchers must be told.
    fn decide<R>(
        &self,
        job: &JobName,
        f: impl FnOnce(&mut LeaseTable, Instant) -> (R, Effects),
    ) -> Result<(R, u64, bool)> {
        let mut st = self.lock();
        // On a nearly full disk, be ready to undo a decision whose change
        // the store refuses.
        let undo = self
            .inner
            .store
            .nearly_full()
            .then(|| st.table.checkpoint(job));
        let now = clock::now();
        let wall = clock::wall_unix_ms();
        st.table.set_wall_clock(wall);
        let (r, fx) = f(&mut st.table, now);
        let seq = match &fx.persist {
            Some(rec) => {
                // A grant's history entry and its `Issued` share one wall
                // clock reading.
                let history: Vec<HistoryPut> = match self.inner.limits.history_per_job {
                    _ if fx.history.is_empty() => Vec::new(),
                    0 => Vec::new(),
                    _ => fx
                        .history
                        .iter()
                        .map(|e| history_put(e, now, wall))
                        .collect(),
                };
                let keep = self.inner.limits.history_per_job as u64;
                if let Err(e) = self.inner.store.put_lease(job, rec, &history, keep) {
                    match (undo, &e) {
                        // Refused before anything was written: undo.
                        (Some(c), Error::NoSpace { .. }) => {
                            st.table.rollback(c);
                            self.inner.check_space();
                        }
                        // The table has already changed in memory; the
                        // reload after the reopen puts it back to what is
                        // durable.
                        _ => self.inner.fail(&mut st, Some(job), &e),
                    }
                    return Err(e);
                }
                let seq = self.inner.commit.stage();
                st.table.set_stamp(job, seq);
                seq
            }
            None => st.table.stamp(job),
        };
        st.wake(&fx.wake);
        Ok((r, seq, fx.changed))
    }

    async fn publish_when_durable(&self, job: &JobName, seq: u64, changed: bool) -> Result<()> {
        self.inner.commit.wait(seq).await?;
        if changed {
            self.publish(job);
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if *self.inner.closing.borrow() {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }

    /// Resolves once the node starts closing ([`Node::start_closing`]), so
    /// that long-lived streams can end with [`Error::ShuttingDown`].
    pub async fn closing(&self) {
        let mut rx = self.inner.closing.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Breaks rules on purpose, from a list such as
    /// `no-fence,early-expiry,renew-bumps-token,ack-before-sync`, so that
    /// the torture test can show its checker catches real bugs.
    #[cfg(feature = "fault-injection")]
    pub fn break_rules(&self, list: &str) -> Result<()> {
        let f = leasehold_core::lease::Faults::parse(list)?;
        if f.ack_before_sync() {
            self.inner.commit.ack_before_sync();
        }
        self.lock().table.break_rules(f);
        tracing::warn!(
            rules = list,
            "BREAKING LEASE RULES ON PURPOSE (fault-injection build)"
        );
        Ok(())
    }

    /// Stops taking changes: waiting `Acquire`s and watchers end with
    /// [`Error::ShuttingDown`], then everything staged is synced.
    pub fn close(&self) {
        self.start_closing();
        self.inner.recovery.stop();
        self.inner.commit.stop();
    }

    /// The first half of [`Node::close`]: refuse new changes and end
    /// waiting `Acquire`s and watchers, but keep syncing what is in flight.
    pub fn start_closing(&self) {
        self.inner.closing.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use leasehold_core::lease::{Limits, Token};
    use leasehold_store::memory::MemoryStore;

    /// A sync that fails: the grant it would have made durable is refused
    /// (its caller is told of the failure), the recovery thread reopens
    /// the store and reloads the table from what was durable, and the next
    /// grant is made as if the refused one had never been: the token its
    /// caller never learned is issued again, every acknowledged one stays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_sync_loses_only_what_was_not_acknowledged() {
        let store = Arc::new(MemoryStore::new());
        let node = Node::open(store.clone()).unwrap();
        let l = Limits::default();
        let job = l.job("j").unwrap();
        let (a, b) = (l.holder("a").unwrap(), l.holder("b").unwrap());
        let ttl = Duration::from_secs(30);
        let g = node.acquire(&job, &a, ttl, Duration::ZERO).await.unwrap();
        assert_eq!(g.lease.token, Token(1));
        assert!(node.release(&job, &a, Token(1)).await.unwrap());

        store.fail_next_sync();
        let e = node
            .acquire(&job, &b, ttl, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Storage(_)), "{e:?}");
        let t = Instant::now();
        while node.snapshot().store_recoveries == 0 {
            assert!(t.elapsed() < Duration::from_secs(30), "never recovered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(node.snapshot().store_failures, 1);
        let v = node.lease(&job).await.unwrap();
        assert_eq!((v.token, v.holder()), (Token(1), None), "as durable");
        let g = node.acquire(&job, &b, ttl, Duration::ZERO).await.unwrap();
        assert!(g.acquired);
        assert_eq!(g.lease.token, Token(2));
        node.close();
    }
}
