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

#![warn(missing_docs)]

pub mod commit;
pub mod recovery;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Notify};
use tokio::time::sleep_until;

use leasehold_backend::{
    Acquired, EventKind, HolderGuard, Picker, ReleaseIfDropped, RenewOutcome, Renewal, Snapshot,
    Staged, StateLimits, Statuses, StoreHealth, Write, CHANGES_BUFFERED,
};
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules::classify;
use leasehold_core::lease::{
    Acquire, Effects, HistoryEvent, HolderId, JobName, LeaseTable, LeaseView, TenureEnd, Token,
    WaiterId,
};
use leasehold_store::{recheck_value, HistoryPut, Store, Tenure, ValueRecord};

use commit::GroupCommit;
use recovery::{Next, Recovery};

/// Jobs walked under one hold of the state lock by a snapshot.
const SNAPSHOT_CHUNK: usize = 16_384;

/// Whether a renewal moved a live lease's deadline from `before` to the
/// earlier `after`.
fn earlier(after: Option<Instant>, before: Option<Instant>) -> bool {
    matches!((after, before), (Some(a), Some(b)) if a < b)
}

/// A history event as the store keeps it: its instant on the wall clock,
/// which is for people only. `now` and `wall_now` are one moment on both
/// clocks.
pub fn history_put(e: &HistoryEvent, now: Instant, wall_now: u64) -> HistoryPut {
    let wall =
        |at: Instant| wall_now.saturating_sub(now.saturating_duration_since(at).as_millis() as u64);
    match e {
        HistoryEvent::Granted { token, holder, ttl } => HistoryPut::Grant {
            token: *token,
            holder: holder.clone(),
            at_unix_ms: wall_now,
            ttl: *ttl,
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
        let (r, fx) = f(&mut st.table, now);
        let seq = match &fx.persist {
            Some(rec) => {
                // Most persisted decisions add no history (a renewal that
                // raised the TTL): no clock read for them.
                let history: Vec<HistoryPut> = match self.inner.limits.history_per_job {
                    _ if fx.history.is_empty() => Vec::new(),
                    0 => Vec::new(),
                    _ => {
                        let wall = clock::wall_unix_ms();
                        fx.history
                            .iter()
                            .map(|e| history_put(e, now, wall))
                            .collect()
                    }
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

    /// Asks for the lease; waits up to `wait` for it to free up, first come
    /// first served. Returns whether it was granted, whether the grant is a
    /// new one (a new token) rather than the live holder's extension, and
    /// the lease.
    ///
    /// **A new grant whose call is dropped before it returns (the client
    /// cancelled while the grant was made durable) is released at once**,
    /// so that the next in line gets it instead of waiting out a TTL for a
    /// holder that never learned its token.
    pub async fn acquire(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Acquired> {
        self.check_open()?;
        let give_up = clock::now() + wait;
        let limits = self.inner.limits;
        let (res, seq, changed) = self.decide(job, |t, now| {
            if !t.contains(job) && t.len() >= limits.max_jobs {
                return (Err(limits.too_many_jobs()), Effects::default());
            }
            let (a, fx) = t.acquire(job, holder, ttl, now, None);
            (Ok(a), fx)
        })?;
        let busy = match res? {
            Acquire::Granted(view) => {
                let undo = self.release_if_dropped(changed, job, holder, view.token);
                self.publish_when_durable(job, seq, changed).await?;
                undo.disarm();
                return Ok(Acquired {
                    acquired: true,
                    fresh: changed,
                    lease: view,
                });
            }
            Acquire::Busy { view, .. } => view,
            Acquire::Exhausted(_) => {
                self.inner.commit.wait(seq).await?;
                return Err(Error::TokensExhausted {
                    job: job.to_string(),
                });
            }
        };
        if wait.is_zero() {
            self.inner.commit.wait(seq).await?;
            return Ok(Acquired {
                acquired: false,
                fresh: false,
                lease: busy,
            });
        }

        // Join the queue.
        let notify = Arc::new(Notify::new());
        let (id, generation) = {
            let mut st = self.lock();
            let id = st.table.enqueue(job, holder, ttl, clock::now());
            st.wakers.insert(id, notify.clone());
            (id, st.generation)
        };
        let mut queued = Queued {
            node: self,
            job,
            id,
            holder,
            joined: busy.token,
            answered: false,
        };
        let mut closing = self.inner.closing.subscribe();
        loop {
            if self.lock().generation != generation {
                return Err(Error::Storage(
                    "the store was reopened after a failure while this Acquire waited; ask again"
                        .into(),
                ));
            }
            let (res, seq, changed) =
                self.decide(job, |t, now| t.acquire(job, holder, ttl, now, Some(id)))?;
            match res {
                Acquire::Granted(view) => {
                    // A release may have handed the lease to us already
                    // (then this decision only extends it): new all the
                    // same, to its caller.
                    let fresh = changed || view.token > queued.joined;
                    let undo = self.release_if_dropped(fresh, job, holder, view.token);
                    queued.answered = true;
                    self.publish_when_durable(job, seq, changed).await?;
                    undo.disarm();
                    return Ok(Acquired {
                        acquired: true,
                        fresh,
                        lease: view,
                    });
                }
                Acquire::Exhausted(_) => {
                    self.inner.commit.wait(seq).await?;
                    return Err(Error::TokensExhausted {
                        job: job.to_string(),
                    });
                }
                Acquire::Busy {
                    view,
                    first_in_line,
                } => {
                    if clock::now() >= give_up {
                        self.inner.commit.wait(seq).await?;
                        return Ok(Acquired {
                            acquired: false,
                            fresh: false,
                            lease: view,
                        });
                    }
                    // Only the first in line watches the deadline; the rest
                    // are woken when they move up. Nobody polls.
                    let wake_at = match (first_in_line, view.deadline()) {
                        (true, Some(d)) => d.min(give_up),
                        _ => give_up,
                    };
                    tokio::select! {
                        _ = notify.notified() => {}
                        _ = sleep_until(wake_at.into()) => {}
                        _ = closing.wait_for(|c| *c) => return Err(Error::ShuttingDown),
                    }
                }
            }
        }
    }

    /// A guard that releases the grant of `token` to `holder` if it is
    /// dropped armed (its call was cancelled); unarmed unless `fresh`.
    fn release_if_dropped(
        &self,
        fresh: bool,
        job: &JobName,
        holder: &HolderId,
        token: Token,
    ) -> ReleaseIfDropped {
        if !fresh {
            return ReleaseIfDropped::unarmed();
        }
        let (node, job, holder) = (self.clone(), job.clone(), holder.clone());
        ReleaseIfDropped::new(async move { node.release_undelivered(&job, &holder, token).await })
    }

    /// Releases a grant whose holder never learned of it (its call was
    /// cancelled, or its reply could not be delivered): [`Node::give_back`],
    /// logged, errors included (nobody waits for it).
    pub async fn release_undelivered(&self, job: &JobName, holder: &HolderId, token: Token) {
        match self.give_back(job, holder, token).await {
            Ok(true) => tracing::info!(
                job = %job,
                token = token.0,
                "released a grant whose caller went away before it was told"
            ),
            Ok(false) => tracing::debug!(
                job = %job,
                token = token.0,
                "an undelivered grant was not given back: it ended, or its holder asked again"
            ),
            Err(e) => {
                tracing::debug!(job = %job, error = %e, "an undelivered grant was not released")
            }
        }
    }

    /// Gives back the grant of `token` to `holder`, whose caller may never
    /// have learned of it: released only while it is still that grant and
    /// its holder has not asked again since (see
    /// [`LeaseTable::give_back`]). Returns whether it released.
    pub async fn give_back(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.check_open()?;
        let (released, seq, changed) = self.decide(job, |t, now| {
            let fx = t.give_back(job, holder, token, now);
            (fx.changed, fx)
        })?;
        self.publish_when_durable(job, seq, changed).await?;
        Ok(released)
    }

    /// Renews a live lease. Fails with [`Error::LeaseLost`] otherwise.
    pub async fn renew(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
    ) -> Result<LeaseView> {
        self.check_open()?;
        let (r, seq, _) = self.decide(job, |t, now| {
            let before = t.view(job, now).deadline();
            match t.renew(job, holder, token, ttl, now) {
                Ok((view, fx)) => (Ok((earlier(view.deadline(), before), view)), fx),
                Err(e) => (Err(e), Effects::default()),
            }
        })?;
        let (earlier, view) = r?;
        if earlier {
            self.deadline_moved_earlier(job);
        }
        self.inner.commit.wait(seq).await?;
        Ok(view)
    }

    /// Renews many leases in one decision: the state lock is taken once,
    /// every renewal is decided at the same instant with the rules of
    /// [`Node::renew`], and the reply waits for one durability point that
    /// covers every change it shows. Each renewal succeeds or fails on its
    /// own. Fails as a whole only when the node is closing or the store
    /// fails.
    pub async fn renew_many(&self, batch: &[Renewal]) -> Result<Vec<RenewOutcome>> {
        self.check_open()?;
        let mut out = Vec::with_capacity(batch.len());
        let mut seq = 0;
        let mut moved_earlier = Vec::new();
        {
            let mut st = self.lock();
            let now = clock::now();
            for r in batch {
                let before = st.table.view(&r.job, now).deadline();
                match st.table.renew(&r.job, &r.holder, r.token, r.ttl, now) {
                    Ok((view, fx)) => {
                        if earlier(view.deadline(), before) {
                            moved_earlier.push(&r.job);
                        }
                        if let Some(rec) = &fx.persist {
                            self.inner.store.put_lease(&r.job, rec, &[], 0)?;
                            let s = self.inner.commit.stage();
                            st.table.set_stamp(&r.job, s);
                        }
                        st.wake(&fx.wake);
                        out.push(Ok(view));
                    }
                    Err(e) => out.push(Err((e, st.table.view(&r.job, now)))),
                }
                // What we show of the job must be durable: its last change.
                seq = seq.max(st.table.stamp(&r.job));
            }
        }
        for job in moved_earlier {
            self.deadline_moved_earlier(job);
        }
        self.inner.commit.wait(seq).await?;
        Ok(out)
    }

    /// Resolves once the node starts closing ([`Node::start_closing`]), so
    /// that long-lived streams can end with [`Error::ShuttingDown`].
    pub async fn closing(&self) {
        let mut rx = self.inner.closing.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Releases a lease; the first waiter is granted at once.
    pub async fn release(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.check_open()?;
        let (r, seq, changed) =
            self.decide(job, |t, now| match t.release(job, holder, token, now) {
                Ok(fx) => (Ok(()), fx),
                Err(e) => (Err(e), Effects::default()),
            })?;
        r?;
        self.publish_when_durable(job, seq, changed).await?;
        Ok(changed)
    }

    /// Deletes `job` and its keys, if it has no live lease and nobody
    /// waits for it ([`Error::JobInUse`] otherwise); returns whether there
    /// was such a job. **A job created again under the name gets tokens
    /// above every token the deleted one issued**: the deletion and the
    /// raised new-job floor are one change in the store.
    pub async fn delete_job(&self, job: &JobName) -> Result<bool> {
        self.check_open()?;
        let seq = {
            let mut st = self.lock();
            let undo = st.table.checkpoint(job);
            let now = clock::now();
            // A tenure that ran out unrecorded ends with the deletion.
            let end = st.table.unrecorded_end(job, now);
            let Some(token) = st.table.delete(job, now)? else {
                return Ok(false);
            };
            let stored = match end {
                Some((t, at)) if self.inner.limits.history_per_job > 0 => {
                    let e = HistoryEvent::Ended {
                        token: t,
                        how: TenureEnd::Deleted,
                        at,
                    };
                    let put = history_put(&e, now, clock::wall_unix_ms());
                    self.inner.store.put_history(job, &[put])
                }
                _ => Ok(()),
            };
            if let Err(e) = stored.and_then(|()| self.inner.store.delete_job(job, token)) {
                match &e {
                    Error::NoSpace { .. } => {
                        st.table.rollback(undo);
                        self.inner.check_space();
                    }
                    _ => self.inner.fail(&mut st, None, &e),
                }
                return Err(e);
            }
            st.keys.remove(job);
            self.inner.commit.stage()
        };
        self.inner.commit.wait(seq).await?;
        tracing::info!(job = %job, "job deleted");
        Ok(true)
    }

    /// Up to `limit` tenures of `job`'s history with a token below
    /// `before` (all when `None`), newest first, each durable. The newest
    /// may be open (its holder leads, or led when the server last
    /// started); one that ran out unrecorded shows as expired at its
    /// deadline.
    pub async fn history(
        &self,
        job: &JobName,
        before: Option<Token>,
        limit: usize,
    ) -> Result<Vec<Tenure>> {
        // What the table knows of a tenure that ran out, first: a tenure
        // read from the store after this is at least as new.
        let end = {
            let st = self.lock();
            let now = clock::now();
            st.table.unrecorded_end(job, now).map(|(token, at)| {
                let e = HistoryEvent::Ended {
                    token,
                    how: TenureEnd::Expired,
                    at,
                };
                (token, history_put(&e, now, clock::wall_unix_ms()))
            })
        };
        let mut tenures = self.inner.store.history(job, before, limit)?;
        // What was read may be staged and not durable yet: wait until
        // everything staged by now is. (A decision stages its records and
        // takes its number under the lock: once the lock is had, every
        // record this read saw has its number.)
        let seq = {
            let _st = self.lock();
            self.inner.commit.staged()
        };
        self.inner.commit.wait(seq).await?;
        if let Some((
            token,
            HistoryPut::End {
                how, at_unix_ms, ..
            },
        )) = end
        {
            if let Some(t) = tenures
                .iter_mut()
                .find(|t| t.token == token && t.end.is_none())
            {
                t.end = Some((how, at_unix_ms));
            }
        }
        Ok(tenures)
    }

    /// Up to `limit` jobs starting with `prefix` (after `after`), as the
    /// status page shows them: each lease with its leaderless time, its
    /// waiters and its fenced writes, once what it shows is durable.
    pub async fn status(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Statuses> {
        let (rows, seq) = {
            let st = self.lock();
            let rows = st.table.status(prefix, after, limit, clock::now());
            (rows, self.inner.commit.staged())
        };
        self.inner.commit.wait(seq).await?;
        Ok(Statuses {
            jobs: rows,
            counted: true,
        })
    }

    /// The jobs whose leadership changes from now on (or that refuse a
    /// fenced write), as they change. A receiver that falls more than
    /// [`CHANGES_BUFFERED`] behind is told it lagged, and reads afresh.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<JobName> {
        self.inner.changes.subscribe()
    }

    /// The lease of `job` as decided now, durable or not: for checks made
    /// before a decision that re-checks what matters under the lock (never
    /// shown to a client).
    pub fn lease_now(&self, job: &JobName) -> LeaseView {
        self.lock().table.view(job, clock::now())
    }

    /// The lease of `job`, once the change it shows is durable.
    pub async fn lease(&self, job: &JobName) -> Result<LeaseView> {
        let (view, seq) = {
            let st = self.lock();
            // A job the table does not know may have just been deleted:
            // wait for everything staged, its deletion included.
            let seq = match st.table.contains(job) {
                true => st.table.stamp(job),
                false => self.inner.commit.staged(),
            };
            (st.table.view(job, clock::now()), seq)
        };
        self.inner.commit.wait(seq).await?;
        Ok(view)
    }

    /// Up to `limit` leases of jobs starting with `prefix`, after `after`.
    pub async fn leases(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LeaseView>> {
        let (views, seq) = {
            let st = self.lock();
            let views = st.table.list(prefix, after, limit, clock::now());
            (views, self.inner.commit.staged())
        };
        self.inner.commit.wait(seq).await?;
        Ok(views)
    }

    /// Stores `value` (or deletes, when `None`) under (job, key), if the
    /// core's `rules::admit_write` admits it: `guard` (if any) lets the
    /// live grant's holder be written for, then `token` passes the fence.
    /// Returns the key's new version once durable.
    pub async fn checked_write(
        &self,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<u64> {
        self.check_open()?;
        let (outcome, seq) = {
            let (mut st, mut existing) = self.lock_with_records(&[(job, key)])?;
            let existing = existing.pop().expect("one record for one key");
            let guard = guard.map(|g| g as &dyn Fn(&str) -> bool);
            self.write_one(&mut st, job, token, key, value, existing, guard)?
        };
        self.inner.commit.wait(seq).await?;
        outcome
    }

    /// The state lock, and the records of `keys` as they are under it.
    /// Each is read before the lock is taken ([`Node::read_ahead`]); under
    /// it the store confirms it from memory. If a checkpoint moved records
    /// meanwhile, only a read of the store can tell, and a read of sled
    /// waits while a checkpoint applies: then the lock is let go and the
    /// keys are read again, a few times, before the read is made under the
    /// lock. **No decision waits for the disk, or for a checkpoint, under
    /// the state lock**: a 64 KiB write flood's checkpoints used to stall
    /// the leaders' renewals for tens of milliseconds that way.
    fn lock_with_records(
        &self,
        keys: &[(&JobName, &[u8])],
    ) -> Result<(MutexGuard<'_, State>, Vec<Option<ValueRecord>>)> {
        const TRIES: usize = 3;
        for attempt in 1.. {
            let pre = keys
                .iter()
                .map(|(job, key)| self.read_ahead(job, key))
                .collect::<Result<Vec<_>>>()?;
            let st = self.lock();
            let mut out = Vec::with_capacity(keys.len());
            for ((job, key), pre) in keys.iter().zip(pre) {
                let store = &self.inner.store;
                let now = match store.recheck_value_in_memory(job, key, pre.epoch)? {
                    Some(now) => now,
                    None if attempt < TRIES => break,
                    None => recheck_value(&**store, job, key, pre.epoch)?,
                };
                out.push(match now {
                    None => pre.record,
                    Some(now) => now,
                });
            }
            if out.len() == keys.len() {
                return Ok((st, out));
            }
        }
        unreachable!("the last try reads under the lock")
    }

    /// Many writes in one decision: the state lock is taken once, and the
    /// writes are made in order with the rules of [`Node::checked_write`],
    /// each on its own (a fenced one does not stop the others). Returns
    /// each write's new version or why it was refused (`Fenced`,
    /// `UnknownToken`), and the sequence number to pass to
    /// [`Node::durable`] before any of it is shown. Not waiting here lets a
    /// stream decide its next message, in order, while earlier ones wait
    /// for their sync. Fails as a whole when the node is closing or the
    /// store refuses or fails; writes before that one may have been made.
    pub fn stage_writes(&self, batch: Vec<Write>) -> Result<Staged> {
        self.check_open()?;
        let mut out = Vec::with_capacity(batch.len());
        let mut last = 0;
        let keys: Vec<(&JobName, &[u8])> = batch.iter().map(|w| (&w.job, &w.key[..])).collect();
        let epoch = self.inner.store.read_epoch();
        let (mut st, existing) = self.lock_with_records(&keys)?;
        drop(keys);
        // A key written earlier in the batch: its record is the one just
        // staged, which the store has in memory.
        let mut written = std::collections::HashSet::new();
        for (w, existing) in batch.into_iter().zip(existing) {
            let existing = match written.contains(&(w.job.clone(), w.key.clone())) {
                false => existing,
                true => match recheck_value(&*self.inner.store, &w.job, &w.key, epoch)? {
                    Some(now) => now,
                    None => existing,
                },
            };
            written.insert((w.job.clone(), w.key.clone()));
            let (outcome, seq) =
                self.write_one(&mut st, &w.job, w.token, &w.key, w.value, existing, None)?;
            last = last.max(seq);
            out.push(outcome);
        }
        Ok(Staged {
            outcomes: out,
            seq: last,
        })
    }

    /// Waits until every change up to sequence number `seq` is durable
    /// (at once for 0).
    pub async fn durable(&self, seq: u64) -> Result<()> {
        if seq == 0 {
            return Ok(());
        }
        self.inner.commit.wait(seq).await
    }

    /// One write, under the state lock: its admission (the core's rule,
    /// [`LeaseTable::admit_write`](leasehold_core::lease::LeaseTable::admit_write):
    /// `guard` if any, then the fence), then the store. The
    /// outer error is the store's (the whole call fails), the inner one
    /// the admission's (this write is refused). Returns the new version or
    /// the refusal, and the sequence number to wait for before showing it:
    /// a refusal names the job's current token, which must be durable too.
    ///
    /// `existing` is the key's record as it is under the lock (see
    /// [`Node::lock_with_records`]).
    #[allow(clippy::too_many_arguments)] // one write's parts, and its guard
    fn write_one(
        &self,
        st: &mut State,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        existing: Option<ValueRecord>,
        guard: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<(Result<u64>, u64)> {
        let key_token = existing.as_ref().map(|r| r.token);
        if let Err(e) = st
            .table
            .admit_write(job, token, key_token, guard, clock::now())
        {
            if matches!(e, Error::Fenced { .. }) {
                self.inner.changed(job);
            }
            return Ok((Err(e), st.table.stamp(job)));
        }
        // A new key counts against the job's limit; a deleted key keeps its
        // tombstone (and its place) until the job is deleted.
        let keys = match existing {
            Some(_) => None,
            None => {
                let n = match st.keys.get(job) {
                    Some(n) => *n,
                    None => self.inner.store.count_keys(job)?,
                };
                if n >= self.inner.limits.max_keys_per_job {
                    return Ok((Err(self.inner.limits.too_many_keys()), st.table.stamp(job)));
                }
                Some(n + 1)
            }
        };
        let version = existing.map_or(0, |r| r.version) + 1;
        let rec = ValueRecord {
            token,
            version,
            value,
        };
        if let Err(e) = self.inner.store.put_value(job, key, &rec) {
            match e {
                Error::NoSpace { .. } => self.inner.check_space(),
                _ => self.inner.fail(st, None, &e),
            }
            return Err(e);
        }
        if let Some(n) = keys {
            st.keys.insert(job.clone(), n);
        }
        Ok((Ok(version), self.inner.commit.stage()))
    }

    /// The sequence number a read made just before must wait for. Reads
    /// run without the state lock (a read from disk must not stall every
    /// decision); a put is staged and numbered under the lock, so taking
    /// it after the read means every put the read may have seen is
    /// numbered by now, at or below what this returns.
    fn staged_after_read(&self) -> u64 {
        let _st = self.lock();
        self.inner.commit.staged()
    }

    /// Reads the key's record without the state lock, for
    /// [`Node::write_one`] to confirm under it.
    fn read_ahead(&self, job: &JobName, key: &[u8]) -> Result<ReadAhead> {
        let epoch = self.inner.store.read_epoch();
        let record = self.inner.store.get_value(job, key)?;
        Ok(ReadAhead { epoch, record })
    }

    /// The record under (job, key), once everything staged before the read
    /// is durable: reads are linearizable.
    pub async fn read(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        let rec = self.inner.store.get_value(job, key)?;
        let seq = self.staged_after_read();
        self.inner.commit.wait(seq).await?;
        Ok(rec)
    }

    /// Up to `limit` live keys of `job` starting with `prefix`, after `after`.
    pub async fn keys(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, ValueRecord)>> {
        let list = self.inner.store.list_values(job, prefix, after, limit)?;
        let seq = self.staged_after_read();
        self.inner.commit.wait(seq).await?;
        Ok(list)
    }

    /// Watches `job`: the current lease first, then every change of holder
    /// or token. The channel is bounded: a consumer that falls behind gets
    /// the latest state, with the changes it missed folded into it. The
    /// stream ends when the receiver is dropped or the node closes.
    pub fn watch(&self, job: JobName) -> mpsc::Receiver<Result<(EventKind, LeaseView)>> {
        let (tx, rx) = mpsc::channel(4);
        let mut changes = {
            let mut w = self.inner.watchers.lock().expect("watchers lock");
            w.entry(job.clone())
                .or_insert_with(|| {
                    let s = watch::Sender::new(0);
                    self.watch_deadline(job.clone(), s.subscribe());
                    s
                })
                .subscribe()
        };
        let node = self.clone();
        tokio::spawn(async move {
            let mut closing = node.inner.closing.subscribe();
            let mut last = match node.lease(&job).await {
                Ok(v) => v,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            if tx
                .send(Ok((EventKind::Current, last.clone())))
                .await
                .is_err()
            {
                return;
            }
            loop {
                // Woken by a change, or by the job's one deadline timer
                // (`watch_deadline`) when the lease runs out: never a
                // timer per watcher, so that many watchers of one job do
                // not all wake, and read, at each of its deadlines.
                let mut shutting_down = false;
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = closing.wait_for(|c| *c) => shutting_down = true,
                    r = changes.changed() => if r.is_err() { return },
                }
                if shutting_down {
                    // Tell the watcher why, so it reconnects elsewhere.
                    let _ = tx.send(Err(Error::ShuttingDown)).await;
                    return;
                }
                let view = match node.lease(&job).await {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                if let Some(kind) = classify(&last, &view) {
                    if tx.send(Ok((kind, view.clone()))).await.is_err() {
                        return;
                    }
                }
                last = view;
            }
        });
        rx
    }

    /// The one timer of a watched job: it sleeps until the lease's
    /// deadline and, if the lease has run out by then (not renewed), tells
    /// the job's watchers, as a change does. Ends, taking the job's entry
    /// out of the watchers' map, once nobody else watches the job.
    fn watch_deadline(&self, job: JobName, mut rx: watch::Receiver<u64>) {
        let node = self.clone();
        tokio::spawn(async move {
            let mut closing = node.inner.closing.subscribe();
            loop {
                // Nobody else watches: leave, and take the entry out under
                // the lock that new watchers subscribe under.
                {
                    let mut w = node.inner.watchers.lock().expect("watchers lock");
                    match w.get(&job) {
                        Some(s) if s.receiver_count() > 1 => {}
                        Some(_) => {
                            w.remove(&job);
                            return;
                        }
                        None => return,
                    }
                }
                let view = node.lease_now(&job);
                let Some(deadline) = view.deadline() else {
                    tokio::select! {
                        r = rx.changed() => if r.is_err() { return },
                        _ = closing.wait_for(|c| *c) => return,
                        // Watchers that leave are noticed within a minute.
                        _ = tokio::time::sleep(Duration::from_secs(60)) => {}
                    }
                    continue;
                };
                // At least once a minute, to notice that the watchers left.
                let wake = deadline.min(clock::now() + Duration::from_secs(60));
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    _ = closing.wait_for(|c| *c) => return,
                    _ = sleep_until(wake.into()) => {
                        if wake < deadline {
                            continue;
                        }
                        let now = node.lease_now(&job);
                        if now.deadline().is_none_or(|d| d <= clock::now()) || now.token != view.token {
                            let w = node.inner.watchers.lock().expect("watchers lock");
                            if let Some(s) = w.get(&job) {
                                s.send_modify(|n| *n += 1);
                            }
                        }
                    }
                }
            }
        });
    }

    /// After a renewal that moved a lease's deadline earlier (a shorter
    /// TTL): wakes the job's deadline timer, which sleeps until the
    /// deadline it read and would otherwise tell the watchers of the expiry
    /// only at the old, later one. The watchers wake too, and find nothing
    /// to tell; a renewal is not a change to them.
    fn deadline_moved_earlier(&self, job: &JobName) {
        let w = self.inner.watchers.lock().expect("watchers lock");
        if let Some(s) = w.get(job) {
            s.send_modify(|n| *n += 1);
        }
    }

    fn publish(&self, job: &JobName) {
        self.inner.changed(job);
        let mut w = self.inner.watchers.lock().expect("watchers lock");
        if let Some(s) = w.get(job) {
            if s.receiver_count() == 0 {
                w.remove(job);
            } else {
                s.send_modify(|n| *n += 1);
            }
        }
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

    /// Counters and every job's leadership.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_showing(usize::MAX)
    }

    /// Counters and per-job leadership for metrics: every job counted, at
    /// most `max_jobs` of them picked to be shown
    /// ([`leasehold_backend::JobsShown::pick`], under the state lock: one
    /// pass, no copy of the others' names).
    pub fn snapshot_showing(&self, max_jobs: usize) -> Snapshot {
        let (store_failures, store_recoveries) = self.inner.recovery.counts();
        // The jobs are walked in chunks, each under the state lock on its
        // own: with a million jobs, one walk held it for up to half a
        // second, and every renewal waited. Expiries are counted as the
        // jobs are walked.
        let mut picker = Picker::new(max_jobs);
        let mut after: Option<JobName> = None;
        let st = loop {
            let mut st = self.lock();
            let now = clock::now();
            let mut n = 0;
            let mut last = None;
            for (job, leadership) in st
                .table
                .settle_leadership_after(after.as_ref(), now)
                .take(SNAPSHOT_CHUNK)
            {
                picker.offer(job, leadership);
                last = Some(job);
                n += 1;
            }
            if n < SNAPSHOT_CHUNK {
                break st;
            }
            after = last.cloned();
        };
        let jobs = picker.finish();
        Snapshot {
            stats: st.table.stats().clone(),
            jobs,
            waiters: st.wakers.len(),
            store_failures,
            store_recoveries,
            unreadable_jobs: 0,
        }
    }

    /// Group commit's syncs: how many, the changes they made durable, and
    /// the live histogram of their durations. Not part of [`Snapshot`],
    /// which both backends give (etcd syncs its own log; its metrics tell
    /// how).
    pub fn sync_stats(&self) -> commit::SyncStats {
        self.inner.commit.sync_stats()
    }

    /// The embedded store's token floor, and how its data dir was last
    /// recovered or restored, if it was.
    pub fn integrity(&self) -> (u64, Option<String>) {
        (
            self.inner.store.floors().every.0,
            self.inner.store.recovered(),
        )
    }

    /// Whether the store takes changes, as it changes: for gRPC health and
    /// `/healthz`.
    pub fn store_health(&self) -> watch::Receiver<StoreHealth> {
        self.inner.recovery.subscribe()
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

/// A key's record read before the state lock was taken, with the store's
/// read epoch from before the read.
struct ReadAhead {
    epoch: u64,
    record: Option<ValueRecord>,
}

/// Takes a waiting `Acquire` out of line however it ends: granted, timed
/// out, or dropped because the client went away.
struct Queued<'a> {
    node: &'a Node,
    job: &'a JobName,
    id: WaiterId,
    holder: &'a HolderId,
    /// The job's token when the waiter joined the line.
    joined: Token,
    /// Whether the Acquire has its answer (from here on, a guard of its
    /// own answers for a grant).
    answered: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut st = self.node.lock();
        st.wakers.remove(&self.id);
        // Room for ten thousand waiters is given back once they have gone.
        let (len, cap) = (st.wakers.len(), st.wakers.capacity());
        if cap > 1024 && len < cap / 4 {
            st.wakers.shrink_to(len * 2);
        }
        let fx = st.table.dequeue(self.job, self.id);
        st.wake(&fx.wake);
        if self.answered {
            return;
        }
        // Dropped unanswered (the call was cancelled): a release may have
        // handed the lease to this waiter in the meantime, and its caller
        // will never know. Give it back.
        let view = st.table.view(self.job, clock::now());
        if view.holder() == Some(self.holder) && view.token > self.joined {
            drop(st);
            let (node, job, holder) = (self.node.clone(), self.job.clone(), self.holder.clone());
            drop(ReleaseIfDropped::new(async move {
                node.release_undelivered(&job, &holder, view.token).await
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::lease::{Leadership, Limits};
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

    /// A snapshot walks the table in chunks, releasing the state lock
    /// between them, and still counts every job once and shows the led
    /// ones first.
    #[tokio::test]
    async fn a_snapshot_in_chunks_counts_every_job_once() {
        let node = Node::open(Arc::new(MemoryStore::new())).unwrap();
        let l = Limits::default();
        let n = SNAPSHOT_CHUNK * 2 + 7;
        let holder = l.holder("h").unwrap();
        let now = clock::now();
        {
            // Straight into the table: a grant through the store for each
            // of 30,000 jobs would only make the test slow.
            let mut st = node.lock();
            for i in 0..n {
                let job = l.job(&format!("j{i:06}")).unwrap();
                let ttl = if i % 1000 == 0 {
                    Duration::from_secs(60)
                } else {
                    Duration::from_millis(1)
                };
                let _ = st.table.acquire(&job, &holder, ttl, now, None);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
        let snap = node.snapshot_showing(10);
        assert_eq!(snap.jobs.total, n);
        assert_eq!(snap.jobs.led, n.div_ceil(1000));
        assert_eq!(snap.jobs.shown.len(), 10);
        assert!(snap
            .jobs
            .shown
            .iter()
            .all(|(_, l)| matches!(l, Leadership::Led { .. })));
        assert_eq!(snap.stats.expiries as usize, n - n.div_ceil(1000));
    }
}
