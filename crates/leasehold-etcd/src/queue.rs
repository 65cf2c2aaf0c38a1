//! Waiters: first come, first served across every frontend.
//!
//! A waiting `Acquire` puts a key of its own, `w/{job}\0{uuid}`, bound to
//! its frontend's session lease (see [`super::session`]): a frontend that
//! dies leaves no waiter behind for longer than the session TTL. The key's
//! create revision is its place in line; etcd orders revisions across the
//! whole cluster, so the line is one line whatever frontend each waiter
//! came through (etcd's election recipe does the same).
//!
//! The grant re-checks the line inside its transaction with one range
//! comparison ([`grant_compares`]): an `Acquire` that did not queue needs
//! the waiters' range empty; a queued one needs its own key unchanged and
//! every key in the range created at its revision or later. So a grant
//! decided on a stale read of the line cannot pass anybody who queued
//! before it. The grant deletes the waiter's key in the same transaction;
//! a waiter that gives up deletes its key when its [`Waiting`] is dropped.
//!
//! A put whose outcome is unknown (no answer in time, the member it went
//! to stalled) may still be applied by etcd after its waiter is gone, even
//! after the key's delete: a member that was paused holds the request, and
//! proposes it once it runs again. A key put so would stay first in line
//! for as long as its frontend lives, and nobody could be granted the job.
//! So each batch's transaction requires a key of its own absent
//! ([`super::keys::Keys::join_guard`]), and a key whose put's outcome is
//! unknown is taken out of line by a transaction that puts that key and
//! deletes the waiter's ([`Orphans`]): once it is applied, the batch can
//! no longer be.
//!
//! Waiters that join (or leave) while others' keys are being put go in
//! together, in one transaction ([`Joins`]): ten thousand waiters arriving
//! at once cost etcd about a hundred proposals, not ten thousand. Keys put together
//! share a create revision; they are equally far in line, and whichever
//! of them grants first wins (the grant's other comparisons let only one
//! through), so ties cost fairness among simultaneous arrivals only,
//! never safety, and never a place to anyone who came before or after.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Notify, Semaphore};

use super::client::{
    create_is, delete_op, pb, put_op, range_created_since, range_empty, range_req, Etcd, WatchRange,
};
use super::keys::{self, JobState, Keys};
use super::EtcdNode;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{HolderId, JobName, Published};

/// The job's line as read with its keys, at the same revision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Line {
    /// How many wait, of both classes.
    pub waiting: i64,
    /// How many of them are preferred candidates (`p/`).
    pub preferred: i64,
    /// The token of the newest grant to a preferred candidate
    /// ([`super::keys::Keys::preferred_grant`]; 0 for none).
    pub preferred_grant: u64,
    /// The create revision of the first waiter in line, once asked for
    /// ([`first_read`]; `None` when nobody waits, or not asked yet).
    pub first: Option<i64>,
    /// The create revision of our own waiter key, when we asked for it
    /// (`None`: not asked, or gone).
    pub mine: Option<i64>,
}

impl Line {
    /// The line from the answers to [`line_reads`], in order. Who is first
    /// is not known yet: [`Line::with_first`].
    pub fn from_ranges(mut answers: impl Iterator<Item = pb::RangeResponse>) -> Line {
        let preferred = answers.next().map_or(0, |r| r.count);
        let preferred_grant = answers
            .next()
            .and_then(|r| r.kvs.first().map(|kv| kv.value.clone()))
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map_or(0, u64::from_be_bytes);
        let waiting = answers.next().map_or(0, |r| r.count) + preferred;
        let mine = answers
            .next()
            .and_then(|r| r.kvs.first().map(|kv| kv.create_revision));
        Line {
            waiting,
            preferred,
            preferred_grant,
            first: None,
            mine,
        }
    }

    /// The line with its first waiter, from the answer to [`first_read`].
    pub fn with_first(self, answer: pb::RangeResponse) -> Line {
        Line {
            first: answer.kvs.first().map(|kv| kv.create_revision),
            ..self
        }
    }
}

/// The reads that find the job's line, cheaply: how many wait (counted
/// from etcd's index, without reading a key) and, when given, our own
/// waiter key. Who is first costs etcd a read of every waiter's key (it
/// sorts them by create revision), so it is asked separately, and only
/// when the job is free ([`first_read`]): a busy job's waiters need not
/// know, and renewals, writes and watches never do.
pub fn line_reads(keys: &Keys, job: &str, mine: Option<&[u8]>) -> Vec<pb::RangeRequest> {
    let count = |(s, e)| {
        let mut r = range_req(s, e, 0);
        r.count_only = true;
        r
    };
    let mut reads = vec![
        count(keys.line_range(job, true)),
        range_req(keys.preferred_grant(job), Vec::new(), 0),
        count(keys.line_range(job, false)),
    ];
    if let Some(m) = mine {
        let mut r = range_req(m.to_vec(), Vec::new(), 0);
        r.keys_only = true;
        reads.push(r);
    }
    reads
}

/// The read of the first waiter in line (the smallest create revision,
/// keys only; among the preferred candidates when `line` has any) at
/// `revision`, the revision of the rest of the caller's read.
pub fn first_read(keys: &Keys, job: &str, line: &Line, revision: i64) -> pb::RangeRequest {
    let (ws, we) = keys.line_range(job, line.preferred > 0);
    let mut first = range_req(ws, we, 1);
    first.sort_order = pb::range_request::SortOrder::Ascend as i32;
    first.sort_target = pb::range_request::SortTarget::Create as i32;
    first.keys_only = true;
    first.revision = revision;
    first
}

/// Where a queued `Acquire` stands: its key and the key's create revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The waiter key.
    pub key: Vec<u8>,
    /// Its create revision: the place in line.
    pub rev: i64,
    /// A preferred candidate's (under `p/`).
    pub preferred: bool,
}

/// The grant transaction's comparisons of the line. Without a place:
/// nobody waits, in either class. With one: our key is still ours, and
/// every waiter's key of our class was created at our revision or later
/// (so nobody is ahead), and, for a waiter that is not preferred, no
/// preferred candidate waits.
pub fn grant_compares(keys: &Keys, job: &str, place: Option<&Place>) -> Vec<pb::Compare> {
    let (ws, we) = keys.line_range(job, false);
    let (ps, pe) = keys.line_range(job, true);
    match place {
        None => vec![range_empty(ps, pe), range_empty(ws, we)],
        Some(p) if p.preferred => vec![
            create_is(p.key.clone(), p.rev),
            range_created_since(ps, pe, p.rev),
        ],
        Some(p) => vec![
            create_is(p.key.clone(), p.rev),
            range_empty(ps, pe),
            range_created_since(ws, we, p.rev),
        ],
    }
}

/// The reads of the whole line with each waiter's holder (its key's
/// value): the preferred candidates, then the others, each first in line
/// first. For a transfer, which must find a named successor (rare, so
/// reading every waiter is fine there).
pub fn line_by_age(keys: &Keys, job: &str) -> [pb::RangeRequest; 2] {
    [true, false].map(|preferred| {
        let (s, e) = keys.line_range(job, preferred);
        let mut r = range_req(s, e, 0);
        r.sort_order = pb::range_request::SortOrder::Ascend as i32;
        r.sort_target = pb::range_request::SortTarget::Create as i32;
        r
    })
}

/// The ranges whose changes can make it a waiter's turn: the job's keys (a
/// release, an expiry) and the deletions among its waiters (somebody ahead
/// leaving). A waiter joining the line joins behind everyone waiting, and
/// a waiter's key is never put again, so a put in the line changes nothing
/// for anyone in it: etcd leaves those out (ten thousand joins used to send
/// every watching frontend ten thousand events to decode and drop).
pub fn wake_ranges(keys: &Keys, job: &str) -> [WatchRange; 3] {
    let deletes = |(start, end)| WatchRange {
        start,
        end,
        deletes_only: true,
    };
    [
        WatchRange::all(keys.job_range(job)),
        deletes(keys.line_range(job, true)),
        deletes(keys.line_range(job, false)),
    ]
}

/// One etcd watch per job, shared by every waiting `Acquire` of that job
/// on this frontend. A waiter used to open a watch stream of its own, and a
/// few thousand waiters ran into the connection's stream limit; now ten
/// thousand waiters on one job cost one stream. The watch publishes the
/// revision of the newest change it saw; a waiter reads again whenever it
/// passes the revision of its own last read.
#[derive(Default)]
pub(super) struct JobWatches {
    jobs: std::sync::Mutex<WatchMap>,
    /// Waiters that joined on a read noted by another ([`Self::busy_read`]).
    noted: std::sync::atomic::AtomicU64,
}

/// The jobs' shared watches, by job, and when to drop the entries of
/// watches that ended. Dropped in one pass once the map has doubled since
/// the last: a pass at every new watch cost a frontend with waiters on many
/// jobs time in their number at each new one.
#[derive(Default)]
struct WatchMap {
    by_job: std::collections::HashMap<String, std::sync::Weak<JobWatch>>,
    prune_at: usize,
}

/// Entries a [`WatchMap`] keeps before its first pass.
const PRUNE_MIN: usize = 64;

impl WatchMap {
    /// Drops the entries of ended watches, when it is time to: at most as
    /// many ended ones as live ones (and [`PRUNE_MIN`]) are ever kept, and
    /// each pass is paid for by the entries added since the last.
    fn prune(&mut self) {
        if self.by_job.len() >= self.prune_at {
            self.by_job.retain(|_, w| w.strong_count() > 0);
            leasehold_backend::room::give_back_room(&mut self.by_job);
            self.prune_at = (self.by_job.len() * 2).max(PRUNE_MIN);
        }
    }
}

/// A job's shared watch: alive while a waiter holds it.
pub(super) struct JobWatch {
    /// The revision the watch started from: it sees every change after it.
    start: i64,
    /// The newest revision a change was seen at; `-1` once the watch broke
    /// (its waiters read again and share a new one).
    seen: tokio::sync::watch::Sender<i64>,
    /// The newest read of the job, by a waiter sharing this watch, that
    /// found it held: its revision and what it read (see
    /// [`JobWatches::busy_read`]).
    busy: std::sync::Mutex<Option<(i64, JobState)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for JobWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl JobWatch {
    /// Waits until a change after `revision` was seen (`true`), or the
    /// watch broke (`false`).
    pub(super) async fn changed_after(&self, revision: i64) -> bool {
        let mut rx = self.seen.subscribe();
        let r = rx.wait_for(|s| *s < 0 || *s > revision).await;
        r.is_ok_and(|s| *s > revision)
    }

    /// Whether it sees every change after `revision` (and still runs).
    pub(super) fn starts_by(&self, revision: i64) -> bool {
        self.live() && self.start <= revision + 1
    }

    /// Notes a waiter's read at `revision` that found the job held, for the
    /// waiters that come after it.
    pub(super) fn note_read(&self, revision: i64, st: &JobState) {
        if st.holder.is_none() || !self.starts_by(revision) {
            return;
        }
        let mut busy = self.busy.lock().expect("busy read lock");
        if busy.as_ref().is_none_or(|(r, _)| *r < revision) {
            *busy = Some((revision, st.clone()));
        }
    }

    /// Whether it still runs.
    fn live(&self) -> bool {
        *self.seen.borrow() >= 0
    }
}

impl JobWatches {
    /// The shared watch of `job` that sees every change after `revision`
    /// (the waiter's last read); `None` when the running one started after
    /// that revision (read again first: something may have changed in
    /// between).
    pub(super) fn watch(
        &self,
        node: &EtcdNode,
        job: &str,
        revision: i64,
    ) -> Option<std::sync::Arc<JobWatch>> {
        let mut jobs = self.jobs.lock().expect("job watches lock");
        jobs.prune();
        if let Some(w) = jobs.by_job.get(job).and_then(std::sync::Weak::upgrade) {
            if w.live() {
                return (w.start <= revision + 1).then_some(w);
            }
        }
        let start = revision + 1;
        let (seen, _) = tokio::sync::watch::channel(start - 1);
        let tx = seen.clone();
        let (etcd, ranges) = (node.inner.etcd.clone(), wake_ranges(&node.inner.keys, job));
        let task = tokio::spawn(async move {
            let mut w = match etcd.watch(&ranges, start).await {
                Ok(w) => w,
                Err(_) => {
                    tx.send_replace(-1);
                    return;
                }
            };
            loop {
                match w.next().await {
                    // Joins never come (see `wake_ranges`): every event
                    // may make it somebody's turn.
                    Ok(r) => {
                        if !r.events.is_empty() {
                            let rev = r.header.map_or(0, |h| h.revision);
                            tx.send_modify(|s| *s = (*s).max(rev));
                        }
                    }
                    Err(_) => {
                        tx.send_replace(-1);
                        return;
                    }
                }
            }
        });
        let w = std::sync::Arc::new(JobWatch {
            start,
            seen,
            busy: std::sync::Mutex::new(None),
            task,
        });
        jobs.by_job
            .insert(job.to_owned(), std::sync::Arc::downgrade(&w));
        Some(w)
    }

    /// The newest read of a held `job` noted on its shared watch, with the
    /// watch, while the watch has seen no change since that read.
    ///
    /// A waiting `Acquire` that arrives while its job is held joins the
    /// line on that read instead of reading the job itself: whatever
    /// changes after it (a release, an expiry, somebody ahead leaving)
    /// comes through the same watch and wakes it, exactly as if it had read
    /// at that revision itself. So ten thousand waiters joining a held job
    /// cost one read, not one each (shared reads gathered most of those
    /// already; this spares each waiter its wait for one).
    pub(super) fn busy_read(&self, job: &str) -> Option<(std::sync::Arc<JobWatch>, i64, JobState)> {
        let jobs = self.jobs.lock().expect("job watches lock");
        let w = jobs.by_job.get(job)?.upgrade()?;
        drop(jobs);
        let (revision, st) = w.busy.lock().expect("busy read lock").clone()?;
        let seen = *w.seen.borrow();
        if !(w.starts_by(revision) && seen <= revision) {
            return None;
        }
        self.noted.fetch_add(1, Ordering::Relaxed);
        Some((w, revision, st))
    }

    /// How many waiters joined on a read noted by another.
    pub(super) fn joined_on_noted_reads(&self) -> u64 {
        self.noted.load(Ordering::Relaxed)
    }

    /// Jobs with a shared watch now, for tests.
    pub(super) fn len(&self) -> usize {
        let jobs = self.jobs.lock().expect("job watches lock");
        jobs.by_job
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

/// A queued `Acquire`'s key in etcd. Dropping it takes the waiter out of
/// line (unless its grant already did), once its put is answered.
pub struct Waiting {
    node: EtcdNode,
    /// Where it stands; `place.rev` is 0 until its put is answered
    /// ([`Waiting::placed`]).
    pub place: Place,
    /// The put's outcome, filled in by the transaction that makes it.
    slot: Arc<JoinSlot>,
    /// Whether a grant deleted the key in its transaction.
    pub granted: bool,
}

impl Waiting {
    /// Its place in line, once the put that made its key is answered
    /// (at once after the first time); the put's error if it failed.
    pub(super) async fn placed(&mut self) -> Result<&Place> {
        if self.place.rev == 0 {
            self.place.rev = self.slot.outcome().await?;
        }
        Ok(&self.place)
    }

    /// Resolves with the put's error, if it fails; never, if it does not.
    /// Waking nobody when a put succeeds is the point: a waiter sleeps
    /// through its own join and reads its place only when the job changes.
    pub(super) async fn failure(&self) -> Error {
        self.slot.failure().await
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let inner = self.node.inner.clone();
        if self.granted {
            inner.waiters.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let key = std::mem::take(&mut self.place.key);
        let slot = self.slot.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    // A delete sent before the put is answered could
                    // overtake it; the key would then stay.
                    if slot.outcome().await.is_err() {
                        // The put may have happened, or may yet: withdraw
                        // it, however long that takes.
                        inner.waiters.fetch_add(1, Ordering::AcqRel);
                        inner.orphans.add(key, Some(slot));
                        return;
                    }
                    match inner.joins.delete(key.clone()).await {
                        Ok(()) => {
                            inner.waiters.fetch_sub(1, Ordering::AcqRel);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "could not delete a departed waiter's key; trying again until it is gone");
                            inner.orphans.add(key, None);
                        }
                    }
                });
            }
            Err(_) => {
                if !matches!(slot.now(), Some(Ok(_))) {
                    inner.waiters.fetch_add(1, Ordering::AcqRel);
                }
                inner.orphans.add(key, Some(slot));
            }
        }
    }
}

/// The outcome of one waiter key's put: the revision it was created at, or
/// the error that leaves it unknown whether the key is there.
#[derive(Default)]
pub(super) struct JoinSlot {
    outcome: std::sync::Mutex<Option<Result<i64>>>,
    /// The key whose absence the put's transaction requires
    /// ([`super::keys::Keys::join_guard`]), once the put is sent.
    guard: std::sync::OnceLock<Vec<u8>>,
    /// Told once the outcome is known.
    done: Notify,
    /// Told once the outcome is known to be an error.
    failed: Notify,
}

impl JoinSlot {
    fn finish(&self, r: Result<i64>) {
        let failed = r.is_err();
        *self.outcome.lock().expect("join slot lock") = Some(r);
        self.done.notify_waiters();
        if failed {
            self.failed.notify_waiters();
        }
    }

    fn now(&self) -> Option<Result<i64>> {
        self.outcome.lock().expect("join slot lock").clone()
    }

    async fn outcome(&self) -> Result<i64> {
        loop {
            let told = self.done.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            if let Some(r) = self.now() {
                return r;
            }
            told.await;
        }
    }

    async fn failure(&self) -> Error {
        loop {
            let told = self.failed.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            match self.now() {
                Some(Err(e)) => return e,
                Some(Ok(_)) => std::future::pending::<()>().await,
                None => told.await,
            }
        }
    }
}

/// Waiter keys whose caller has gone but whose delete failed (etcd did not
/// answer, or the outcome of the put that made them is unknown). Left
/// alone, such a key would stay first in line for as long as this
/// frontend's session lease lives, and no later waiter could ever be
/// granted. [`Orphans::sweep`] deletes them, again and again, until etcd
/// says they are gone; if the frontend itself dies, its session lease takes
/// them within `--etcd-session-ttl`.
#[derive(Default)]
pub(super) struct Orphans {
    /// Each key, and the slot of the put that made it unless that put is
    /// known to have been applied.
    keys: std::sync::Mutex<std::collections::BTreeMap<Vec<u8>, Option<Arc<JoinSlot>>>>,
    added: tokio::sync::Notify,
}

/// How often the sweep tries the orphans' deletes again.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

impl Orphans {
    /// Hands a key to the sweep, with the slot of the put that made it
    /// unless that put is known to have been applied.
    pub(super) fn add(&self, key: Vec<u8>, put: Option<Arc<JoinSlot>>) {
        self.keys.lock().expect("orphans lock").insert(key, put);
        self.added.notify_one();
    }

    /// How many keys wait for their delete.
    pub fn len(&self) -> usize {
        self.keys.lock().expect("orphans lock").len()
    }

    /// Deletes orphaned waiter keys until the node closes.
    pub(super) async fn sweep(node: EtcdNode) {
        let inner = &node.inner;
        let mut closing = inner.closing.subscribe();
        loop {
            tokio::select! {
                _ = inner.orphans.added.notified() => {}
                _ = tokio::time::sleep(SWEEP_EVERY) => {}
                _ = closing.wait_for(|c| *c) => return,
            }
            let keys: Vec<(Vec<u8>, Option<Arc<JoinSlot>>)> = inner
                .orphans
                .keys
                .lock()
                .expect("orphans lock")
                .iter()
                .map(|(k, p)| (k.clone(), p.clone()))
                .collect();
            for (key, put) in keys {
                let how = match put.as_ref().map(|p| (p.now(), p.guard.get())) {
                    // Its put not answered yet: a delete now could
                    // overtake it.
                    Some((None, _)) => continue,
                    // Refused by an etcd out of space, which applied
                    // nothing: there is no key, nor will there be.
                    Some((Some(Err(e)), _)) if super::is_no_space(&e) => Gone::Already,
                    // Its outcome unknown: withdrawn, so that etcd can no
                    // longer apply it.
                    Some((Some(Err(_)), Some(guard))) => Gone::Withdrawn(guard.clone()),
                    // Applied (or never sent): deleted.
                    _ => Gone::Deleted,
                };
                let gone = match how {
                    Gone::Already => Ok(()),
                    Gone::Deleted => inner.etcd.delete(key.clone()).await,
                    Gone::Withdrawn(guard) => {
                        let req = pb::TxnRequest {
                            compare: Vec::new(),
                            success: vec![
                                put_op(guard, Vec::new(), inner.session.id()),
                                delete_op(key.clone()),
                            ],
                            failure: Vec::new(),
                        };
                        inner.etcd.txn(req).await.map(|_| ())
                    }
                };
                if gone.is_ok() {
                    inner
                        .orphans
                        .keys
                        .lock()
                        .expect("orphans lock")
                        .remove(&key);
                    inner.waiters.fetch_sub(1, Ordering::AcqRel);
                    tracing::info!("a departed waiter's key is gone at last");
                }
            }
        }
    }
}

/// How an orphaned waiter key leaves the line.
enum Gone {
    /// Its put was refused: there is nothing to take out.
    Already,
    /// Its put was applied: the key is deleted.
    Deleted,
    /// Its put's outcome is unknown: the key is deleted, and the put's
    /// guard (the key given) put in the same transaction.
    Withdrawn(Vec<u8>),
}

/// Waiter keys put or deleted at most this many to a transaction.
const JOIN_BATCH: usize = 128;

/// Join transactions in flight at once; joins that arrive meanwhile wait
/// and go together in the next one.
const JOINS_IN_FLIGHT: usize = 4;

/// One waiter key to put or delete, and where the outcome goes: the
/// revision of the transaction.
struct Join {
    op: pb::RequestOp,
    reply: Reply,
}

/// Where a change's outcome goes.
enum Reply {
    /// To a caller that waits for it.
    Call(oneshot::Sender<Result<i64>>),
    /// To a waiter's slot, which nobody need wait for; a key put counts
    /// among the frontend's waiters.
    Slot(Arc<JoinSlot>),
}

/// Puts and deletes waiter keys, those that arrive together in one
/// transaction: waiters joining the line, and waiters leaving it (ten
/// thousand cancelled at once are a hundred transactions, and wake the
/// rest of the line a hundred times, not ten thousand). The keys are
/// distinct (each waiter's own, put once and deleted after), as etcd
/// requires of one transaction's operations.
pub(super) struct Joins {
    tx: mpsc::UnboundedSender<Join>,
}

impl Joins {
    /// Starts the task that makes the changes: call within a tokio
    /// runtime. It ends once the [`Joins`] is dropped.
    /// `waiters` counts the keys put. The channel is unbounded: what
    /// waits in it is bounded by the waiters' quota, and a join that waited
    /// for room would cost its waiter a wake.
    pub(super) fn spawn(etcd: Etcd, keys: Keys, waiters: Arc<AtomicUsize>) -> Joins {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(Self::run(etcd, keys, rx, waiters));
        Joins { tx }
    }

    /// Puts `key` bound to `lease`, without waiting: the slot gets the
    /// revision it was created at. Made once, like any change: an error
    /// leaves it unknown whether the key is there.
    fn put(&self, key: Vec<u8>, value: Vec<u8>, lease: i64) -> Result<Arc<JoinSlot>> {
        let slot = Arc::new(JoinSlot::default());
        let reply = Reply::Slot(slot.clone());
        self.tx
            .send(Join {
                op: put_op(key, value, lease),
                reply,
            })
            .map_err(|_| gone())?;
        Ok(slot)
    }

    /// Deletes `key`; after an error it may or may not be there.
    pub(super) async fn delete(&self, key: Vec<u8>) -> Result<()> {
        self.send(delete_op(key)).await.map(|_| ())
    }

    async fn send(&self, op: pb::RequestOp) -> Result<i64> {
        let (reply, rx) = oneshot::channel();
        let reply = Reply::Call(reply);
        self.tx.send(Join { op, reply }).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    async fn run(
        etcd: Etcd,
        keys: Keys,
        mut rx: mpsc::UnboundedReceiver<Join>,
        waiters: Arc<AtomicUsize>,
    ) {
        let slots = Arc::new(Semaphore::new(JOINS_IN_FLIGHT));
        loop {
            // A slot first: changes that arrive while every slot is taken
            // gather in the channel and go together.
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let Some(first) = rx.recv().await else { return };
            let mut batch = vec![first];
            while batch.len() < JOIN_BATCH {
                match rx.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(_) => break,
                }
            }
            let (etcd, waiters) = (etcd.clone(), waiters.clone());
            // The batch's guard, when it puts keys: its transaction
            // requires it absent, and a withdrawal puts it (see `Orphans`).
            let guard = batch
                .iter()
                .any(|j| matches!(j.reply, Reply::Slot(_)))
                .then(|| keys.join_guard(&uuid::Uuid::new_v4().simple().to_string()));
            tokio::spawn(async move {
                let (ops, replies): (Vec<_>, Vec<_>) =
                    batch.into_iter().map(|j| (j.op, j.reply)).unzip();
                let mut compare = Vec::new();
                if let Some(g) = &guard {
                    compare.push(create_is(g.clone(), 0));
                    for reply in &replies {
                        if let Reply::Slot(slot) = reply {
                            let _ = slot.guard.set(g.clone());
                        }
                    }
                }
                let req = pb::TxnRequest {
                    compare,
                    success: ops,
                    failure: Vec::new(),
                };
                let r = etcd.join_txn(req).await.and_then(|r| match r.succeeded {
                    true => Ok(r.header.map_or(0, |h| h.revision)),
                    // Only a withdrawn batch's guard is ever put, and
                    // nobody withdraws a batch before its outcome is known.
                    false => Err(Error::Storage(
                        "a batch of waiter keys was withdrawn before etcd applied it".into(),
                    )),
                });
                for reply in replies {
                    match reply {
                        Reply::Call(tx) => {
                            let _ = tx.send(r.clone());
                        }
                        Reply::Slot(slot) => {
                            if r.is_ok() {
                                waiters.fetch_add(1, Ordering::AcqRel);
                            }
                            slot.finish(r.clone());
                        }
                    }
                }
                drop(slot);
            });
        }
    }
}

impl EtcdNode {
    /// Puts our waiter key, last in line, bound to the session lease,
    /// without waiting for etcd's answer ([`Waiting::placed`] waits).
    pub(super) fn enqueue(
        &self,
        job: &JobName,
        holder: &HolderId,
        preferred: bool,
        value: &Published,
    ) -> Result<Waiting> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let key = self.inner.keys.waiter(job.as_str(), &id, preferred);
        let session = self.inner.session.id();
        let slot =
            self.inner
                .joins
                .put(key.clone(), keys::encode_waiter(holder, value), session)?;
        Ok(Waiting {
            node: self.clone(),
            place: Place {
                key,
                rev: 0,
                preferred,
            },
            slot,
            granted: false,
        })
    }
}

fn gone() -> Error {
    Error::Storage("the etcd join task has stopped".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};

    /// Ended watches' entries are dropped in passes that come as the map
    /// doubles: never more ended entries than live ones (past the first
    /// few), and the live ones always kept.
    #[tokio::test]
    async fn ended_watches_are_dropped_as_the_map_grows_and_live_ones_kept() {
        let live_watch = || {
            std::sync::Arc::new(JobWatch {
                start: 1,
                seen: tokio::sync::watch::channel(0).0,
                busy: std::sync::Mutex::new(None),
                task: tokio::spawn(async {}),
            })
        };
        let mut map = WatchMap::default();
        let live: Vec<_> = (0..100).map(|_| live_watch()).collect();
        for (i, w) in live.iter().enumerate() {
            map.prune();
            map.by_job
                .insert(format!("live-{i}"), std::sync::Arc::downgrade(w));
        }
        for i in 0..10_000 {
            map.prune();
            // A watch that ended: its waiters are gone.
            map.by_job
                .insert(format!("ended-{i}"), std::sync::Weak::new());
            let ended = map.by_job.len() - live.len();
            assert!(
                ended <= live.len().max(PRUNE_MIN) + 1,
                "{ended} ended entries kept"
            );
        }
        for i in 0..live.len() {
            assert!(map.by_job[&format!("live-{i}")].upgrade().is_some());
        }
    }

    /// etcd's meaning of a create-revision comparison over `[key,
    /// range_end)` (one key when `range_end` is empty), on `waiters` (key,
    /// create revision): every key in the range must satisfy it; an empty
    /// range compares as one absent key (create revision 0).
    fn holds(c: &pb::Compare, waiters: &[(Vec<u8>, i64)]) -> bool {
        assert_eq!(c.target, CompareTarget::Create as i32);
        let Some(TargetUnion::CreateRevision(want)) = c.target_union else {
            panic!("a create-revision comparison");
        };
        let in_range = |k: &Vec<u8>| {
            if c.range_end.is_empty() {
                *k == c.key
            } else {
                c.key <= *k && *k < c.range_end
            }
        };
        let mut revs: Vec<i64> = waiters
            .iter()
            .filter(|(k, _)| in_range(k))
            .map(|(_, r)| *r)
            .collect();
        if revs.is_empty() {
            revs.push(0);
        }
        revs.iter().all(|&r| match c.result {
            x if x == CompareResult::Equal as i32 => r == want,
            x if x == CompareResult::Greater as i32 => r > want,
            x if x == CompareResult::Less as i32 => r < want,
            _ => r != want,
        })
    }

    fn all_hold(cs: &[pb::Compare], waiters: &[(Vec<u8>, i64)]) -> bool {
        cs.iter().all(|c| holds(c, waiters))
    }

    #[test]
    fn the_grant_passes_nobody_who_queued_before() {
        let k = Keys::new("lh/");
        let w = |id: &str, rev: i64| (k.waiter("j", id, false), rev);
        let (a, b, c) = (w("a", 10), w("b", 12), w("c", 15));
        let place = |(key, rev): &(Vec<u8>, i64)| Place {
            key: key.clone(),
            rev: *rev,
            preferred: k.is_preferred_waiter(key),
        };
        // Only the first in line may be granted.
        let line = [a.clone(), b.clone(), c.clone()];
        assert!(all_hold(&grant_compares(&k, "j", Some(&place(&a))), &line));
        assert!(!all_hold(&grant_compares(&k, "j", Some(&place(&b))), &line));
        assert!(!all_hold(&grant_compares(&k, "j", Some(&place(&c))), &line));
        // Once the first leaves, the second is first.
        let line = [b.clone(), c.clone()];
        assert!(all_hold(&grant_compares(&k, "j", Some(&place(&b))), &line));
        // A place whose key is gone (session lease ran out) is no place.
        assert!(!all_hold(&grant_compares(&k, "j", Some(&place(&a))), &line));
        // Without a place: only when nobody waits, on this job.
        assert!(!all_hold(&grant_compares(&k, "j", None), &line));
        let elsewhere = [
            (k.waiter("j2", "x", false), 3),
            (k.waiter("i", "y", true), 4),
        ];
        assert!(all_hold(&grant_compares(&k, "j", None), &elsewhere));
        assert!(all_hold(&grant_compares(&k, "j", None), &[]));
        // Other jobs' waiters are not in our line.
        let mixed = [(k.waiter("j2", "x", false), 3), b.clone()];
        assert!(all_hold(&grant_compares(&k, "j", Some(&place(&b))), &mixed));
        // A preferred candidate, though it came later, is ahead of every
        // waiter that is not; among the preferred, the first came first.
        let p = |id: &str, rev: i64| (k.waiter("j", id, true), rev);
        let (p1, p2) = (p("p1", 20), p("p2", 22));
        let line = [b.clone(), c.clone(), p1.clone(), p2.clone()];
        assert!(all_hold(&grant_compares(&k, "j", Some(&place(&p1))), &line));
        assert!(!all_hold(
            &grant_compares(&k, "j", Some(&place(&p2))),
            &line
        ));
        assert!(!all_hold(&grant_compares(&k, "j", Some(&place(&b))), &line));
        assert!(!all_hold(
            &grant_compares(&k, "j", None),
            std::slice::from_ref(&p1)
        ));
        // Once the preferred have gone, the others' line is as it was.
        let line = [b.clone(), c.clone()];
        assert!(all_hold(&grant_compares(&k, "j", Some(&place(&b))), &line));
    }

    #[test]
    fn the_line_is_counted_and_its_first_read_by_create_revision_keys_only() {
        let k = Keys::new("lh/");
        let (ws, we) = k.waiters_range("j");
        let (ps, pe) = k.line_range("j", true);
        let reads = line_reads(&k, "j", None);
        assert_eq!(reads.len(), 3);
        assert_eq!((&reads[0].key, &reads[0].range_end), (&ps, &pe));
        assert!(reads[0].count_only);
        assert_eq!(reads[1].key, k.preferred_grant("j"));
        assert_eq!((&reads[2].key, &reads[2].range_end), (&ws, &we));
        assert!(reads[2].count_only);
        let mine = k.waiter("j", "me", false);
        let reads = line_reads(&k, "j", Some(&mine));
        assert_eq!(reads.len(), 4);
        assert_eq!(
            (&reads[3].key, reads[3].range_end.is_empty()),
            (&mine, true)
        );
        assert!(reads[3].keys_only);
        let first = first_read(&k, "j", &Line::default(), 42);
        assert_eq!((&first.key, &first.range_end, first.limit), (&ws, &we, 1));
        let some_preferred = Line {
            preferred: 1,
            ..Line::default()
        };
        let first_preferred = first_read(&k, "j", &some_preferred, 42);
        assert_eq!(
            (&first_preferred.key, &first_preferred.range_end),
            (&ps, &pe)
        );
        assert_eq!(first.revision, 42);
        assert_eq!(
            first.sort_target,
            pb::range_request::SortTarget::Create as i32
        );
        assert_eq!(
            first.sort_order,
            pb::range_request::SortOrder::Ascend as i32
        );
        assert!(first.keys_only);
    }

    #[test]
    fn the_line_is_parsed_from_the_answers_in_order() {
        let count = |n: i64| pb::RangeResponse {
            count: n,
            ..Default::default()
        };
        let answer = |rev: Option<i64>| pb::RangeResponse {
            kvs: rev
                .map(|r| pb::KeyValue {
                    create_revision: r,
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let marker = |token: u64| pb::RangeResponse {
            kvs: vec![pb::KeyValue {
                value: token.to_be_bytes().to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let line = Line::from_ranges([count(1), marker(7), count(2), answer(Some(9))].into_iter());
        assert_eq!(
            line,
            Line {
                waiting: 3,
                preferred: 1,
                preferred_grant: 7,
                first: None,
                mine: Some(9)
            }
        );
        assert_eq!(line.with_first(answer(Some(4))).first, Some(4));
        assert_eq!(
            Line::from_ranges([count(0), answer(None), count(0)].into_iter()),
            Line::default()
        );
        assert_eq!(
            Line::from_ranges([count(0), answer(None), count(1), answer(None)].into_iter()),
            Line {
                waiting: 1,
                ..Line::default()
            }
        );
    }

    #[test]
    fn a_waiter_is_woken_by_its_job_and_its_line_only() {
        let k = Keys::new("lh/");
        let [job, preferred, line] = wake_ranges(&k, "j");
        assert!(job.contains(&k.holder("j")) && job.contains(&k.token("j")));
        assert!(!job.deletes_only, "a grant, a release or an expiry");
        assert!(line.contains(&k.waiter("j", "x", false)));
        assert!(preferred.contains(&k.waiter("j", "x", true)));
        assert!(
            line.deletes_only && preferred.deletes_only,
            "a join changes nobody's turn"
        );
        for other in [
            k.holder("j2"),
            k.waiter("j2", "x", true),
            k.value("j", b"k"),
        ] {
            assert!(!job.contains(&other) && !line.contains(&other) && !preferred.contains(&other));
        }
    }
}
