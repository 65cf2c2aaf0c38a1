//! The etcd backend: any number of stateless leasehold frontends over one
//! etcd cluster, serving the same API with the same guarantees.
//!
//! This is the only crate that speaks to etcd. It offers the backend's
//! methods ([`EtcdNode`]), and the server's `Backend` picks it or the
//! single node (`leasehold-node`), which this crate never imports: the
//! types both speak are `leasehold-backend`'s, the rules and the record
//! encodings `leasehold-core`'s. It links no storage engine.
//!
//! **Every public call is bounded here** by `--etcd-timeout` (an
//! `Acquire` by that plus its wait), retries and re-reads included
//! (`EtcdNode::bounded`), and counts its own failures: the dispatcher in
//! front of it only dispatches.
//!
//! # Where the truth lives
//!
//! Nothing a decision depends on is kept in the frontend. Every decision
//! reads etcd (linearizable reads, etcd's default) and is made by **one
//! etcd transaction** whose comparisons re-check, inside etcd, everything
//! the decision relied on. When a comparison fails, somebody else changed
//! the job in between: the frontend reads again and decides again. The key
//! layout is in [`keys`].
//!
//! - **Grant**: the holder key is absent, the token key is unchanged since
//!   the read, and nobody is queued ahead (the waiters' range is empty, or
//!   the first waiter is us). Then, in the same transaction: the token
//!   counter goes up by one and the holder key is put, bound to a new etcd
//!   lease of the grant's TTL (granted just before the transaction; a
//!   transaction that fails revokes it), with the grant's "untold" key on
//!   the same lease, which the holder's first repeated Acquire or Renew
//!   deletes (a give-back of a grant whose caller went away ends it only
//!   while both its untold key is there and the holder key's version is
//!   1; see `txn::give_back`).
//! - **Expiry is etcd's**: the holder key lives exactly as long as its etcd
//!   lease, whose TTL etcd's leader keeps (and extends, never shortens, when
//!   the leader changes). No frontend reads a clock to decide expiry.
//! - **Renew** reads the holder key, checks it holds (holder, token), and
//!   keeps its etcd lease alive. etcd never renews an expired lease (it
//!   waits for the revocation and answers not found), and a grant's etcd
//!   lease belongs to that grant alone, so a successful keep-alive proves
//!   the grant was still live. The keep-alive counts only if the member
//!   that answered was in the raft term of a linearizable read made after
//!   it, which also re-checks the holder key: etcd 3.4 before 3.4.25 lets a
//!   deposed leader that has not heard of the new term renew in memory
//!   while the real leader lets the lease run out. A renewal with a
//!   different TTL moves the holder key to a new etcd lease in one
//!   transaction that compares the old value and lease. A renewal that
//!   keeps its TTL needs no etcd write: an etcd out of space (its NOSPACE
//!   alarm) refuses every put, yet takes keep-alives and deletes.
//! - **Release**: one transaction compares the holder key's exact value and
//!   lease, marks the token record released and deletes the holder key;
//!   then the etcd lease is revoked.
//! - **CheckedWrite**: one transaction compares that the holder key holds
//!   exactly (holder, token) (so the lease is live and the token is the
//!   job's newest), that the key's stored token is `<=` ours (a byte-wise
//!   comparison of the big-endian token that starts every stored value),
//!   and that the key is unchanged since the read (so its version is
//!   right), then puts the value. A write cannot slip in between a check
//!   and a put.
//! - **The token counter is never deleted or reset**: it is a key without
//!   a lease, only ever put with a higher token by a transaction that
//!   compared its revision.
//!
//! # Out of space
//!
//! etcd past its quota raises its NOSPACE alarm and refuses every change
//! that puts a key or grants a lease, before applying anything, until an
//! operator compacts, defragments and disarms the alarm. Such a refusal is
//! answered DISK_FULL ([`is_no_space`]), not UNAVAILABLE: nothing was
//! applied. Health is NOT_SERVING from the first refusal, or the first
//! probe that finds the alarm, until a probe finds it gone.
//!
//! # Waiting, first come, first served, across frontends
//!
//! A waiting `Acquire` puts a key of its own under the job's waiters'
//! prefix, bound to its frontend's session lease (so a frontend that dies
//! leaves no waiter behind for longer than the session TTL). Its place in
//! line is the key's create revision, which etcd orders globally, as in
//! etcd's election recipe. A waiter may be granted only when every
//! waiter's key was created at its own revision or later (one range
//! comparison inside the grant transaction), and the grant deletes its
//! key. An `Acquire` that does not wait is granted only when nobody waits.
//! Waiters sleep on an etcd watch of the job's keys and of the waiters'
//! range, started at the revision they read: a release, an expiry (etcd
//! deleting the holder key) or a waiter ahead leaving wakes them at once.
//! Nothing polls.
//!
//! On one frontend, the waiters of a job share one etcd watch
//! (`queue::JobWatches`), which leaves puts in the line out (a waiter
//! joining wakes no one). A waiter arriving at a held job that others of
//! its frontend watch joins on the newest read one of them noted, while
//! the watch has seen no change since (`JobWatches::busy_read`): **a
//! waiter that joins on a read is woken by any change after that read,
//! whoever made it**. Nor does it wait for its own join: it hands its key
//! to the batched put (`queue::Joins`, up to 128 keys a transaction) and
//! sleeps on the watch; it reads its place (the key's create revision)
//! when the job changes. **A departing waiter's delete is sent only after
//! its put is answered**, so it cannot overtake the put and leave the key
//! behind, and the key of a waiter whose call is gone is deleted again and
//! again until etcd confirms it (`queue::Orphans`). The line is *counted*
//! with the job's read; who is first is read (which costs etcd a read of
//! every waiter key) only when the job is free. Plain reads of one job,
//! and questions of how long a lease has left, are shared by the calls
//! that ask at once (`reads`). A frontend keeps at most 512 calls in
//! flight to etcd (lease keep-alives and join transactions exempt).
//! BENCHMARKS.md has what ten thousand waiters cost etcd.
//!
//! # Reads, deadlines and retries
//!
//! Reads are etcd linearizable reads (a majority confirms the leader's
//! read index). A serializable read is never used: one member's local
//! state, lagging or partitioned, could show a lease already released or
//! taken over, an old token, or an overwritten value.
//!
//! An operation gets `--etcd-timeout` in all, every etcd call, retry and
//! re-read included; past it, UNAVAILABLE (reason STORAGE). **Only what is
//! safe to run twice is retried on another member**: reads (ranges and
//! read-only transactions), lease time-to-live, keep-alives and revokes.
//! A grant, release, move or write transaction, a batch of waiter keys and
//! a lease grant are sent once (again only when refused for etcd's auth
//! token before etcd applied anything): their comparisons would fail a
//! second run, the operation would decide again on the new state, and a
//! write whose first run took effect could be made twice under a new
//! version. Their outcome is unknown after a failure, as for any lost
//! reply. A probe each second tells health whether a majority answers a
//! linearizable read and whether etcd raises its NOSPACE alarm.
//!
//! # Shared settings, history, the last token
//!
//! The settings that are rules of the whole are recorded under the prefix
//! and compared by every frontend at start-up (`settings`). History is
//! trimmed one tenure at a time: a grant removes the tenure
//! `--history-per-job` tokens older, and the grant that creates a job
//! again above the new-job floor keeps the newest tenures of its earlier
//! life. A job at its last token (2^64 - 1) is never granted again
//! (TOKENS_EXHAUSTED, before anything is written), as on the single node.
//!
//! # TTLs
//!
//! etcd leases count whole seconds and have a minimum (1.5 election
//! timeouts rounded up: 2 s with etcd's defaults; etcd silently raises
//! anything shorter). The frontend learns the minimum from etcd at
//! start-up, and TTLs that are not whole seconds, or below it, are
//! refused with INVALID_ARGUMENT naming `ttl`. etcd checks for expired
//! leases every 500 ms, so a lease ends between its TTL and about a
//! second later: late, never early.
//!
//! # What a reply reports
//!
//! `remaining` comes from etcd's lease time-to-live (whole seconds, rounded
//! down) for `GetLease`, `ListLeases` and a busy `Acquire`; it is the full
//! TTL right after a grant or renewal, and in watch events.
//!
//! # Where each part lives
//!
//! Every operation reads, decides, and makes its decision with one
//! transaction, reading and deciding again when a comparison failed. The
//! reading, deciding and committing are apart:
//!
//! - [`keys`]: the key layout, the record encodings, and the one parse of
//!   a job's records into a [`keys::JobState`], for reads and watch events
//!   alike; a record that does not decode is an error naming its job.
//! - `decide`: what to do, from a `JobState` (and the line of waiters):
//!   grant, extend, renew, release, a write's admission. Pure; **the rules
//!   themselves are the core's** (`leasehold_core::lease::rules`: who gets
//!   the lease next, the guard then the fence, the rules broken on
//!   purpose), the very functions the single node's table calls.
//! - `txn`: the transaction that makes each decision, its comparisons
//!   re-checking what the decision relied on. Pure.
//! - `queue`: waiters: their keys, their place in line, the grant's range
//!   comparison.
//! - `session`: the frontend's session lease, which waiters are bound to,
//!   and its keep-alive.
//! - `watch`: `WatchLease`: watch tasks, and which etcd events a watcher is
//!   told of.
//! - `mirror`: per-job leadership for metrics, from one etcd watch.
//! - `reads`: reads of one job (and lease TTLs) shared by the calls that
//!   ask at once.
//! - `settings`: the settings every frontend on a prefix must share.
//! - [`client`]: the small etcd client, with one keep-alive stream shared by
//!   every lease.
//! - this file: [`EtcdNode`], the API the handlers call: each method reads,
//!   asks `decide`, commits with `txn`, and counts.

#![warn(missing_docs)]

pub mod client;
mod decide;
pub mod keys;
mod mirror;
mod queue;
mod reads;
mod session;
mod settings;
mod txn;
mod watch;

pub use settings::SharedSettings;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch as signal;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use leasehold_backend::{
    Acquired, HolderGuard, JobsShown, ReleaseIfDropped, RenewOutcome, Renewal, Snapshot, Staged,
    StateLimits, Statuses, StoreHealth, Write,
};
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules::{self, MayGrant, WriteRefusal};
use leasehold_core::lease::{
    Faults, HolderId, JobName, LeaseState, LeaseView, TenureEnd, Token, Vacancy,
};
use leasehold_core::record::{decode_history, HistoryPut, Tenure, ValueRecord};

use client::{range_req, ranges, Etcd};
use decide::{Extend, Proof, Refused, Release};
use keys::{decode_value, Holding, JobState, Keys, Meta, MetaRec};
use mirror::Mirror;
use queue::{Line, Place, Waiting};
use session::Session;

/// How a frontend reaches etcd.
#[derive(Debug, Clone)]
pub struct Config {
    /// Client URLs of the etcd members, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Every key leasehold writes starts with this.
    pub prefix: String,
    /// How long one operation may wait for etcd before it fails with
    /// UNAVAILABLE.
    pub timeout: Duration,
    /// The TTL of the frontend's session lease, which its waiters' places
    /// in line are bound to: how long a dead frontend's waiters block the
    /// line. Whole seconds.
    pub session_ttl: Duration,
    /// TLS and authentication for a secured etcd.
    pub security: client::Security,
    /// `--max-jobs` and `--max-keys-per-job`.
    pub limits: StateLimits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            prefix: "leasehold/".into(),
            timeout: Duration::from_secs(5),
            session_ttl: Duration::from_secs(5),
            security: client::Security::default(),
            limits: StateLimits::default(),
        }
    }
}

/// How often a decision is tried again when its transaction's comparison
/// failed because another frontend changed the job in between.
const MAX_TRIES: usize = 64;

/// How often a frontend asks etcd whether a majority answers (health).
const PROBE_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Counters {
    renewals: AtomicU64,
    renew_losses: AtomicU64,
    writes: AtomicU64,
    fenced_writes: AtomicU64,
    failures: AtomicU64,
    unreadable_jobs: AtomicU64,
}

struct Inner {
    etcd: Etcd,
    keys: Keys,
    /// etcd's minimum lease TTL, learned at start-up.
    min_ttl: Duration,
    /// The session lease the waiters' keys are bound to.
    session: Session,
    closing: signal::Sender<bool>,
    counters: Counters,
    /// Waiter keys this frontend has in etcd.
    waiters: Arc<AtomicUsize>,
    mirror: Arc<Mirror>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Whether the frontend can take changes: what health reports.
    health: tokio::sync::watch::Sender<StoreHealth>,
    /// Departed waiters' keys still to delete.
    orphans: queue::Orphans,
    /// One etcd watch per job with waiters on this frontend.
    job_watches: queue::JobWatches,
    /// Puts waiter keys, several to a transaction.
    joins: queue::Joins,
    /// Held by a grant of a new job from its read of `meta` to its
    /// transaction's answer.
    new_jobs: tokio::sync::Mutex<()>,
    /// Reads of a job shared by the calls that ask at once.
    reads: reads::Shared<String, Read>,
    /// Questions of how long an etcd lease has left, shared likewise.
    ttls: reads::Shared<i64, Option<i64>>,
    limits: StateLimits,
    /// Rules broken on purpose ([`EtcdNode::break_rules`]); never set but
    /// in a fault-injection build.
    faults: OnceLock<Faults>,
    /// The broken rule "early-expiry": when each etcd lease this frontend
    /// granted or renewed runs out ([`EtcdNode::expire_early`]). Empty
    /// unless the rule is broken.
    early: Mutex<std::collections::HashMap<i64, Instant>>,
}

/// A leasehold frontend on etcd. Cheap to clone: clones share one state.
#[derive(Clone)]
pub struct EtcdNode {
    inner: Arc<Inner>,
}

/// One job as read from etcd at one revision: its records and its line of
/// waiters.
#[derive(Debug, Clone)]
struct Read {
    revision: i64,
    job: JobState,
    line: Line,
}

/// Whether `e` is etcd's refusal of a change for lack of space (its NOSPACE
/// alarm): nothing was applied, and no change can be made until an
/// operator frees space in etcd and disarms the alarm. Answered as
/// DISK_FULL, as the single node answers a full disk.
pub fn is_no_space(e: &Error) -> bool {
    matches!(e, Error::Storage(m) if m.starts_with(client::NO_SPACE))
}

/// The health of a frontend whose etcd is out of space.
fn no_space_health() -> StoreHealth {
    StoreHealth::Unavailable {
        reason: format!(
            "{}: changes are refused; reads and renewals go on",
            client::NO_SPACE
        ),
    }
}

/// The waiter's join's error, if it fails (see [`Waiting::failure`]).
async fn join_failure(waiting: Option<&Waiting>) -> Error {
    match waiting {
        Some(w) => w.failure().await,
        None => std::future::pending().await,
    }
}

fn contention(what: &str) -> Error {
    Error::Storage(format!(
        "{what}: the job kept changing under {MAX_TRIES} tries; try again"
    ))
}

impl EtcdNode {
    /// Connects to etcd, learns its minimum lease TTL, opens the session
    /// lease and starts the metrics mirror. Fails when etcd does not
    /// answer within `config.timeout`.
    pub async fn open(config: Config) -> Result<EtcdNode> {
        session::check_ttl(config.session_ttl, None)?;
        let etcd = Etcd::connect_with(&config.endpoints, config.timeout, &config.security)?;
        etcd.log_in().await?;
        // One read under the prefix, so that an etcd that refuses it (no
        // user given where etcd asks for one, a role without the prefix)
        // stops the start-up instead of failing every call after it.
        let keys = Keys::new(&config.prefix);
        let (start, end) = keys.all_jobs();
        etcd.range(range_req(start, end, 1)).await.map_err(|e| {
            Error::Storage(format!(
                "reading under the prefix {:?}: {e}; with etcd's authentication on, give \
                 --etcd-user (its role must read and write the prefix)",
                config.prefix
            ))
        })?;
        let (session, min_ttl) = Session::open(&etcd, config.session_ttl).await?;
        let waiters = Arc::new(AtomicUsize::new(0));
        let node = EtcdNode {
            inner: Arc::new(Inner {
                joins: queue::Joins::spawn(etcd.clone(), waiters.clone()),
                etcd,
                keys: Keys::new(&config.prefix),
                min_ttl,
                session,
                closing: signal::Sender::new(false),
                counters: Counters::default(),
                waiters,
                mirror: Arc::new(Mirror::new(config.limits.history_per_job > 0)),
                tasks: Mutex::new(Vec::new()),
                health: tokio::sync::watch::Sender::new(StoreHealth::Ok),
                orphans: queue::Orphans::default(),
                job_watches: queue::JobWatches::default(),
                new_jobs: tokio::sync::Mutex::new(()),
                reads: reads::Shared::default(),
                ttls: reads::Shared::default(),
                limits: config.limits,
                faults: OnceLock::new(),
                early: Mutex::default(),
            }),
        };
        node.init_meta().await?;
        let sweeper = tokio::spawn(queue::Orphans::sweep(node.clone()));
        let prober = tokio::spawn(node.clone().probe_health());
        let keeper = tokio::spawn(node.clone().keep_session());
        let mirror = tokio::spawn(node.inner.mirror.clone().run(
            node.inner.etcd.clone(),
            node.inner.keys.clone(),
            node.inner.closing.subscribe(),
        ));
        node.inner
            .tasks
            .lock()
            .expect("tasks lock")
            .extend([keeper, mirror, prober, sweeper]);
        Ok(node)
    }

    /// Reads the store-wide `meta` record.
    async fn meta(&self) -> Result<Meta> {
        let r = self.failed(
            self.inner
                .etcd
                .range(range_req(self.inner.keys.meta(), Vec::new(), 0))
                .await,
        )?;
        match r.kvs.first() {
            Some(kv) => Ok(Meta {
                rec: MetaRec::decode(&kv.value)?,
                mod_revision: kv.mod_revision,
            }),
            None => Ok(Meta::default()),
        }
    }

    /// Writes the `meta` record if there is none yet (a prefix written by
    /// an older leasehold, or a new one): the job count, counted once from
    /// the token keys, and no floor.
    async fn init_meta(&self) -> Result<()> {
        if self.meta().await?.mod_revision != 0 {
            return Ok(());
        }
        let k = &self.inner.keys;
        let (mut start, end) = k.all_jobs();
        let mut jobs = 0u64;
        let mut revision = 0;
        loop {
            let mut req = range_req(start.clone(), end.clone(), 10_000);
            req.keys_only = true;
            req.revision = revision;
            let r = self.failed(self.inner.etcd.range(req).await)?;
            revision = r.header.as_ref().map_or(0, |h| h.revision);
            jobs += r
                .kvs
                .iter()
                .filter(|kv| matches!(k.parse_job_key(&kv.key), Some((_, keys::JobKey::Token))))
                .count() as u64;
            match r.kvs.last() {
                Some(kv) if r.more => {
                    start = kv.key.clone();
                    start.push(0);
                }
                _ => break,
            }
        }
        let rec = MetaRec {
            new_job_floor: Token::NONE,
            jobs,
        };
        let req = client::pb::TxnRequest {
            compare: vec![client::create_is(k.meta(), 0)],
            success: vec![client::put_op(k.meta(), rec.encode(), 0)],
            failure: Vec::new(),
        };
        // Lost to another frontend's: theirs counted the same jobs.
        self.failed(self.inner.etcd.txn(req).await)?;
        Ok(())
    }

    /// Deletes `job` and its keys, if its lease is not live and nobody
    /// waits for it; returns whether there was such a job. One
    /// transaction deletes the job's keys and raises the new-job floor to
    /// the job's newest token, comparing that the holder key is still
    /// absent and the token key and `meta` unchanged since they were read.
    pub async fn delete_job(&self, job: &JobName) -> Result<bool> {
        self.bounded("DeleteJob", Duration::ZERO, self.delete_job_unbounded(job))
            .await
    }

    /// The work of [`EtcdNode::delete_job`], which bounds it.
    async fn delete_job_unbounded(&self, job: &JobName) -> Result<bool> {
        self.check_open()?;
        let k = &self.inner.keys;
        for _ in 0..MAX_TRIES {
            let read = self.read_job(job, None).await?;
            let Some(t) = &read.job.token else {
                return Ok(false);
            };
            if let Some(h) = &read.job.holder {
                return Err(Error::JobInUse {
                    job: job.to_string(),
                    why: format!(
                        "its lease is held by {:?} with token {}",
                        h.rec.holder, h.rec.token
                    ),
                });
            }
            if read.line.waiting > 0 {
                return Err(Error::JobInUse {
                    job: job.to_string(),
                    why: format!("{} Acquire(s) wait for it", read.line.waiting),
                });
            }
            let meta = self.meta().await?;
            let rec = MetaRec {
                new_job_floor: meta.rec.new_job_floor.max(t.token),
                jobs: meta.rec.jobs.saturating_sub(1),
            };
            let mut req = txn::delete_job(k, job.as_str(), &read.job, &meta, &rec);
            // A tenure that ran out unrecorded ends with the deletion.
            if self.inner.limits.history_per_job > 0 && !t.released && t.token > Token::NONE {
                req.success.push(txn::history_end_if_absent(
                    k,
                    job,
                    t.token,
                    TenureEnd::Deleted,
                    clock::wall_unix_ms(),
                ));
            }
            if self.failed(self.inner.etcd.txn(req).await)?.succeeded {
                tracing::info!(job = %job, "job deleted");
                return Ok(true);
            }
        }
        Err(contention("DeleteJob"))
    }

    /// Jobs whose waiters on this frontend share an etcd watch now.
    pub fn shared_waiter_watches(&self) -> usize {
        self.inner.job_watches.len()
    }

    /// Waiting `Acquire`s that joined a held job's line on another
    /// waiter's read, without reading the job themselves.
    pub fn joined_on_noted_reads(&self) -> u64 {
        self.inner.job_watches.joined_on_noted_reads()
    }

    /// Keys of departed waiters that this frontend still has to delete
    /// (their delete failed; the sweep tries again).
    pub fn orphaned_waiter_keys(&self) -> usize {
        self.inner.orphans.len()
    }

    /// Whether the frontend can take changes now, for gRPC health and
    /// `/healthz`: a majority of etcd answered the last probe, and etcd is
    /// not out of space.
    pub fn store_health(&self) -> tokio::sync::watch::Receiver<StoreHealth> {
        self.inner.health.subscribe()
    }

    /// Asks etcd for a linearizable read (which needs a majority to
    /// confirm its leader) every [`PROBE_EVERY`], bounded by the timeout,
    /// then for its alarms, and reports the answer as the backend's
    /// health: NOT_SERVING while no majority answers within
    /// `--etcd-timeout`, or while etcd reports its NOSPACE alarm (it
    /// refuses every change then), SERVING again as soon as neither holds.
    /// A change refused for NOSPACE reports it at once ([`EtcdNode::failed`]);
    /// only the probe ends it, once etcd no longer reports the alarm.
    async fn probe_health(self) {
        let mut closing = self.inner.closing.subscribe();
        let probe = self.inner.keys.health_probe();
        loop {
            let r = self
                .inner
                .etcd
                .read_txn(vec![range_req(probe.clone(), Vec::new(), 1)])
                .await;
            let now = match r {
                Err(e) => Some(StoreHealth::Unavailable {
                    reason: format!("no majority of etcd answered: {e}"),
                }),
                Ok(_) => match self.inner.etcd.alarms().await {
                    Ok(alarms) if alarms.iter().any(|a| a.contains("NOSPACE")) => {
                        Some(no_space_health())
                    }
                    Ok(_) => Some(StoreHealth::Ok),
                    // Health as it was: the alarms are asked again in a
                    // second.
                    Err(e) => {
                        tracing::debug!(error = %e, "asking etcd for its alarms failed");
                        None
                    }
                },
            };
            if let Some(now) = now {
                self.set_health(now);
            }
            tokio::select! {
                _ = tokio::time::sleep(PROBE_EVERY) => {}
                _ = closed(&mut closing) => return,
            }
        }
    }

    /// Reports `now` as the backend's health, and logs a change: at WARN
    /// when the frontend stops serving, at INFO when it serves again.
    fn set_health(&self, now: StoreHealth) {
        self.inner.health.send_if_modified(|h| {
            if *h == now {
                return false;
            }
            let was_full = *h == no_space_health();
            match &now {
                StoreHealth::Ok if was_full => tracing::info!(
                    "etcd has space again (no NOSPACE alarm): serving, changes are taken again"
                ),
                StoreHealth::Ok => tracing::info!("etcd answers again: serving"),
                full if *full == no_space_health() => tracing::warn!(
                    "{full}; not serving until an operator frees space in etcd (compact, \
                     defragment) and disarms the alarm"
                ),
                other => tracing::warn!(health = %other, "etcd does not answer: not serving"),
            }
            *h = now;
            true
        });
    }

    /// Runs one operation within `--etcd-timeout` plus `extra` (an
    /// `Acquire`'s wait), retries and re-reads included: a call never
    /// overruns the time the operator set. On expiry the outcome of a
    /// change is unknown, as for any lost reply.
    async fn bounded<T>(
        &self,
        what: &str,
        extra: Duration,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let limit = self.inner.etcd.timeout() + extra;
        match tokio::time::timeout(limit, f).await {
            Ok(r) => r,
            Err(_) => Err(Error::Storage(format!(
                "etcd {what}: no answer within {limit:?} (--etcd-timeout); its outcome is unknown"
            ))),
        }
    }

    /// etcd's minimum lease TTL, as etcd reported it at start-up.
    pub fn min_ttl(&self) -> Duration {
        self.inner.min_ttl
    }

    /// Refuses a TTL etcd cannot keep exactly: not whole seconds, or below
    /// etcd's minimum lease TTL.
    pub fn check_ttl(&self, ttl: Duration) -> Result<Duration> {
        decide::check_ttl(ttl, self.inner.min_ttl)
    }

    fn check_open(&self) -> Result<()> {
        if *self.inner.closing.borrow() {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }

    fn failed<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e @ Error::Storage(_)) = &r {
            self.inner.counters.failures.fetch_add(1, Ordering::Relaxed);
            if is_no_space(e) {
                self.set_health(no_space_health());
            }
        }
        r
    }

    /// Reads the job's keys, how many wait in its line and (when given) our
    /// own waiter key, at one revision.
    /// Calls that need no waiter key of their own share one read
    /// ([`reads`]).
    async fn read_job(&self, job: &JobName, mine: Option<&[u8]>) -> Result<Read> {
        match mine {
            None => self.read_job_shared(job).await,
            Some(_) => {
                self.read_job_noting(job, mine, &AtomicBool::new(false))
                    .await
            }
        }
    }

    /// [`EtcdNode::read_job`], on its own, setting `sent` when it is sent.
    async fn read_job_noting(
        &self,
        job: &JobName,
        mine: Option<&[u8]>,
        sent: &AtomicBool,
    ) -> Result<Read> {
        let k = &self.inner.keys;
        let (js, je) = k.job_range(job.as_str());
        let mut reads = vec![range_req(js, je, 0)];
        reads.extend(queue::line_reads(k, job.as_str(), mine));
        let r = self.failed(self.inner.etcd.read_txn_noting(reads, sent).await)?;
        let revision = r.header.as_ref().map_or(0, |h| h.revision);
        let mut rs = ranges(r).into_iter();
        let kvs = rs.next().map(|r| r.kvs).unwrap_or_default();
        Ok(Read {
            revision,
            job: k.job(job.as_str(), &kvs)?,
            line: Line::from_ranges(rs),
        })
    }

    /// `read`'s line with its first waiter, read at `read`'s revision (see
    /// [`queue::first_read`]).
    async fn first_in_line(&self, job: &JobName, read: &Read) -> Result<Line> {
        let req = queue::first_read(&self.inner.keys, job.as_str(), read.revision);
        let r = self.failed(self.inner.etcd.range(req).await)?;
        Ok(read.line.with_first(r))
    }

    /// How long the holding has left, from etcd (whole seconds).
    /// Shared with the callers that ask at once ([`reads`]).
    async fn remaining(&self, h: &Holding) -> Result<Duration> {
        let (etcd, id) = (self.inner.etcd.clone(), h.lease);
        let left = self
            .inner
            .ttls
            .get(&id, move |sent| async move {
                etcd.time_to_live_noting(id, &sent).await
            })
            .await;
        let left = self.failed(left)?;
        Ok(Duration::from_secs(left.unwrap_or(0).max(0) as u64))
    }

    /// The job's lease as read, with `remaining` from etcd when held.
    async fn view(&self, job: &JobName, st: &JobState) -> Result<LeaseView> {
        let remaining = match &st.holder {
            Some(h) => self.remaining(h).await?,
            None => Duration::ZERO,
        };
        Ok(decide::view(job, st, remaining, clock::now()))
    }

    /// Asks for the lease; waits up to `wait` for it to free up, first come
    /// first served across every frontend. Returns whether it was granted,
    /// whether the grant is a new one rather than the live holder's
    /// extension, and the lease. A grant whose call is dropped while its
    /// transaction is in flight is released (if it was made), so that the
    /// next in line gets it.
    pub async fn acquire(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Acquired> {
        self.bounded(
            "Acquire",
            wait,
            self.acquire_unbounded(job, holder, ttl, wait),
        )
        .await
    }

    /// The work of [`EtcdNode::acquire`], which bounds it.
    async fn acquire_unbounded(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Acquired> {
        self.check_open()?;
        self.check_ttl(ttl)?;
        let give_up = Instant::now() + wait;
        let mut waiting: Option<Waiting> = None;
        let mut watch: Option<Arc<queue::JobWatch>> = None;
        let mut closing = self.inner.closing.subscribe();
        let mut tries = 0;
        // A held job's newest read, when other waiters of this frontend
        // watch it and nothing changed since ([`queue::JobWatches::busy_read`]).
        let mut noted = match wait.is_zero() {
            true => None,
            false => self.inner.job_watches.busy_read(job.as_str()),
        };
        loop {
            if let Some(w) = waiting.as_mut() {
                // Woken: our place in line, now that it matters.
                self.failed(w.placed().await.map(|_| ()))?;
            }
            let mut read = match noted.take() {
                Some((w, revision, st)) => {
                    watch = Some(w);
                    Read {
                        revision,
                        job: st,
                        line: Line::default(),
                    }
                }
                None => {
                    self.read_job(job, waiting.as_ref().map(|w| w.place.key.as_slice()))
                        .await?
                }
            };
            if read.job.holder.is_none() && read.line.waiting > 0 {
                read.line = match self.first_in_line(job, &read).await {
                    Ok(line) => line,
                    // etcd compacted the read's revision in between: read
                    // the job again.
                    Err(Error::Storage(m)) if m.contains("compacted") && tries < MAX_TRIES => {
                        tries += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
            }
            let place = waiting.as_ref().map(|w| &w.place);
            let step = decide::acquire(&read.job, &read.line, holder, place.map(|p| p.rev))
                .map_err(|r| r.error(job, Token::NONE, read.job.token()))?;
            if step == MayGrant::Exhausted {
                return Err(Error::TokensExhausted {
                    job: job.to_string(),
                });
            }
            if !matches!(step, MayGrant::Busy { .. }) {
                tries += 1;
                if tries > MAX_TRIES {
                    return Err(contention("Acquire"));
                }
                let done = match (step, &read.job.holder) {
                    (MayGrant::Extend, Some(h)) => self.extend(job, h, ttl).await?,
                    _ => self.grant(job, holder, ttl, &read.job, place).await?,
                };
                if let Some(view) = done {
                    if let Some(mut w) = waiting.take() {
                        // A grant deleted our key in its transaction; an
                        // extension leaves it to the drop.
                        w.granted = step == MayGrant::Grant;
                    }
                    return Ok(Acquired {
                        acquired: true,
                        fresh: step == MayGrant::Grant,
                        lease: view,
                    });
                }
                continue; // the job changed since the read: read again
            }
            // Busy.
            if Instant::now() >= give_up {
                return Ok(Acquired {
                    acquired: false,
                    fresh: false,
                    lease: self.view(job, &read.job).await?,
                });
            }
            if waiting.is_none() {
                // In line now. Not read again: the watch below starts
                // from this read's revision, so whatever changed since (a
                // release, an expiry, a waiter ahead leaving) wakes us at
                // once, and a join changes nothing for anyone. (Reading
                // again here cost ten thousand waiters joining at once ten
                // thousand more reads.)
                waiting = Some(self.enqueue(job, holder)?);
            }
            // The job's shared watch; a new one when the one running started
            // after our read (read again first).
            let fits = watch.as_ref().is_some_and(|w| w.starts_by(read.revision));
            if !fits {
                watch = self
                    .inner
                    .job_watches
                    .watch(self, job.as_str(), read.revision);
                if watch.is_none() {
                    continue;
                }
            }
            let w = watch.clone().expect("watch open");
            w.note_read(read.revision, &read.job);
            tokio::select! {
                changed = w.changed_after(read.revision) => if !changed {
                    // It broke: read afresh and share a new one.
                    watch = None;
                },
                _ = sleep_until(give_up) => {}
                _ = closed(&mut closing) => return Err(Error::ShuttingDown),
                // Our join failed (nothing wakes us when it succeeds).
                e = join_failure(waiting.as_ref()) => return self.failed(Err(e)),
            }
        }
    }

    /// Grants the free lease to `holder` with the next token, in one
    /// transaction; `None` when the job changed since `st` was read.
    async fn grant(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        st: &JobState,
        place: Option<&Place>,
    ) -> Result<Option<LeaseView>> {
        // A new job: counted and above the new-job floor, both in `meta`,
        // which the grant compares and puts. This frontend's new jobs take
        // their turn at it: all at once, each grant's comparison would fail
        // but one, and the losers try again (64 creating at once through
        // one frontend had one in ten refused after 64 tries).
        let _turn = match st.token {
            Some(_) => None,
            None => Some(self.inner.new_jobs.lock().await),
        };
        let meta = match st.token {
            Some(_) => None,
            None => {
                let m = self.meta().await?;
                if m.rec.jobs >= self.inner.limits.max_jobs as u64 {
                    return Err(self.inner.limits.too_many_jobs());
                }
                Some(m)
            }
        };
        let floor = meta.map_or(Token::NONE, |m| m.rec.new_job_floor);
        // Refused before anything is created in etcd.
        let (holder_rec, token_rec) = decide::grant(job, st, floor, holder, ttl)?;
        let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
        let mut req = txn::grant(
            &self.inner.keys,
            job.as_str(),
            st,
            place,
            &holder_rec,
            &token_rec,
            lease,
        );
        if let Some(m) = meta {
            txn::count_new_job(&self.inner.keys, &mut req, &m);
        }
        let keep = self.inner.limits.history_per_job as u64;
        // A job created (again): its earlier life's tenures are kept, the
        // newest `keep - 1` of them (one read, at creation only).
        let older_out = match st.token {
            None if keep > 0 => self.history_past(job, keep - 1).await?,
            _ => Vec::new(),
        };
        req.success.extend(txn::grant_history(
            &self.inner.keys,
            job,
            st,
            holder_rec.token,
            holder,
            ttl,
            keep,
            clock::wall_unix_ms(),
            &older_out,
        ));
        if self.faults().ack_before_sync() {
            // The broken rule "ack-before-sync": the grant is answered
            // before its transaction has committed, or even been sent.
            self.commit_later(req);
            self.expire_early(lease, ttl);
            return Ok(Some(decide::granted(job, &holder_rec, clock::now())));
        }
        // On an unknown outcome the etcd lease is left to run out: the
        // grant may have happened, and its holder may yet learn of it by
        // asking again. But a call dropped meanwhile (its client went away)
        // never will: then the grant, if it was made, is released.
        let undo = {
            let (node, job, holder) = (self.clone(), job.clone(), holder.clone());
            let token = holder_rec.token;
            ReleaseIfDropped::new(
                async move { node.release_undelivered(&job, &holder, token).await },
            )
        };
        let done = self.failed(self.inner.etcd.txn(req).await);
        undo.disarm();
        if !done?.succeeded {
            self.revoke_later(lease);
            return Ok(None);
        }
        self.expire_early(lease, ttl);
        Ok(Some(decide::granted(job, &holder_rec, clock::now())))
    }

    /// The tokens of `job`'s recorded tenures beyond its newest `kept`,
    /// oldest first.
    async fn history_past(&self, job: &JobName, kept: u64) -> Result<Vec<Token>> {
        let prefix = self.inner.keys.history_prefix(job.as_str());
        let mut req = range_req(prefix.clone(), keys::prefix_end(&prefix), 0);
        req.keys_only = true;
        let r = self.failed(self.inner.etcd.range(req).await)?;
        let mut tokens: Vec<Token> = r
            .kvs
            .iter()
            .filter_map(|kv| {
                let t = kv.key.get(prefix.len()..prefix.len() + 8)?;
                Some(Token(u64::from_be_bytes(t.try_into().ok()?)))
            })
            .collect();
        tokens.dedup();
        let excess = tokens.len().saturating_sub(kept as usize);
        tokens.truncate(excess);
        Ok(tokens)
    }

    /// Extends our live holding for `ttl` from now: an etcd keep-alive, or
    /// a move to a new etcd lease when the TTL changes. `None` when the
    /// holding is gone (read again).
    async fn extend(&self, job: &JobName, h: &Holding, ttl: Duration) -> Result<Option<LeaseView>> {
        let rec = match decide::extend(h, ttl) {
            Extend::KeepAlive => {
                // The first time the holder asks again, the grant is marked
                // told (see `txn::told_again`) before it is extended, so
                // that no give-back ends it after this answer.
                //
                // A renewal must never need a write: etcd out of space (its
                // NOSPACE alarm) refuses every put, but still takes
                // keep-alives and transactions that only delete. So when
                // the marking is refused for NOSPACE, the grant is marked
                // by deleting its untold key alone, which etcd takes. That
                // is enough: a give-back compares both the holder key's
                // version (1) and the untold key (still the grant's token),
                // so after either mark none can end the grant, on any
                // frontend, even once etcd takes writes again. (Skipping
                // the mark and keeping the lease alive anyway would not
                // be: a give-back made after the alarm is disarmed would
                // find version 1 and release a lease whose holder was just
                // told it is renewed.) While the version stays 1, each
                // renewal tries the put again, and the first after the
                // alarm makes it.
                if h.version == 1 {
                    let k = &self.inner.keys;
                    let told = match self
                        .inner
                        .etcd
                        .txn(txn::told_again(k, job.as_str(), h))
                        .await
                    {
                        Err(e) if is_no_space(&e) => {
                            self.set_health(no_space_health());
                            let req = txn::told_again_by_deletion(k, job.as_str(), h);
                            self.failed(self.inner.etcd.txn(req).await)?
                        }
                        r => self.failed(r)?,
                    };
                    if !told.succeeded {
                        return Ok(None);
                    }
                }
                let live = self.keep_alive(job, h).await?;
                if live {
                    self.expire_early(h.lease, ttl);
                }
                return Ok(live.then(|| decide::granted(job, &h.rec, clock::now())));
            }
            Extend::Move(rec) => rec,
        };
        let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
        let req = txn::move_holding(&self.inner.keys, job.as_str(), h, &rec, lease);
        if !self.failed(self.inner.etcd.txn(req).await)?.succeeded {
            self.revoke_later(lease);
            return Ok(None);
        }
        self.revoke_later(h.lease);
        self.expire_early(lease, ttl);
        Ok(Some(decide::granted(job, &rec, clock::now())))
    }

    /// Keeps the holding's etcd lease alive, and confirms it: `false` when
    /// the holding is gone.
    ///
    /// etcd's lessor renews in memory on the member that thinks it leads,
    /// so the keep-alive counts only if the member that answered was in
    /// the current raft term: the term of a linearizable read made after
    /// it, which also checks that the holder key is still this holding
    /// (see [`decide::keep_alive_proof`]). An answer from an older term
    /// is asked again, on a new keep-alive stream.
    async fn keep_alive(&self, job: &JobName, h: &Holding) -> Result<bool> {
        let hk = self.inner.keys.holder(job.as_str());
        for _ in 0..3 {
            let Some((_, term)) = self.failed(self.inner.etcd.keep_alive(h.lease).await)? else {
                return Ok(false);
            };
            let r = self.failed(
                self.inner
                    .etcd
                    .range(range_req(hk.clone(), Vec::new(), 0))
                    .await,
            )?;
            let current = r.header.as_ref().map_or(0, |h| h.raft_term);
            match decide::keep_alive_proof(h, r.kvs.first(), term, current) {
                Proof::Live => return Ok(true),
                Proof::Gone => return Ok(false),
                Proof::StaleTerm => {
                    tracing::debug!(
                        term,
                        current,
                        "keep-alive answered in an older raft term; again"
                    );
                    self.inner.etcd.reopen_keep_alives();
                }
            }
        }
        Err(Error::Storage(
            "etcd keep-alive kept being answered by a member in an older raft term".into(),
        ))
    }

    /// The broken rule "renew-bumps-token": moves the holding `h` to a new
    /// etcd lease for `ttl` with the token `bumped`, and the job's token
    /// counter with it. `None` when the holding is gone (read again).
    async fn bump(
        &self,
        job: &JobName,
        h: &Holding,
        ttl: Duration,
        bumped: Token,
    ) -> Result<Option<LeaseView>> {
        let rec = keys::HolderRec {
            token: bumped,
            ttl,
            holder: h.rec.holder.clone(),
        };
        let token_rec = keys::TokenRec {
            token: bumped,
            released: false,
            holder: h.rec.holder.clone(),
        };
        let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
        let req = txn::bump_token(&self.inner.keys, job.as_str(), h, &rec, &token_rec, lease);
        if !self.failed(self.inner.etcd.txn(req).await)?.succeeded {
            self.revoke_later(lease);
            return Ok(None);
        }
        self.revoke_later(h.lease);
        self.expire_early(lease, ttl);
        Ok(Some(decide::granted(job, &rec, clock::now())))
    }

    /// The rules broken on purpose, if any (a fault-injection build).
    fn faults(&self) -> Faults {
        self.inner.faults.get().copied().unwrap_or_default()
    }

    /// The broken rule "early-expiry": the holding bound to the etcd lease
    /// `lease`, just granted or renewed for `ttl`, runs out when the core's
    /// rule says it lasts ([`rules::lasts`]: half its TTL) unless it is
    /// renewed again through this frontend before: its etcd lease is then
    /// revoked, which deletes the holder key and wakes the waiters, as etcd
    /// does at its TTL. (etcd keeps a lease at least its minimum TTL, 2 s
    /// by default, so a shorter etcd lease could not break the rule for
    /// the TTLs etcd accepts.) Nothing without the broken rule.
    fn expire_early(&self, lease: i64, ttl: Duration) {
        let lasts = rules::lasts(ttl, self.faults());
        if lasts >= ttl {
            return;
        }
        let deadline = Instant::now() + lasts;
        self.inner
            .early
            .lock()
            .expect("early expiries")
            .insert(lease, deadline);
        let node = self.clone();
        tokio::spawn(async move {
            sleep_until(deadline).await;
            let due = {
                let mut early = node.inner.early.lock().expect("early expiries");
                let due = early.get(&lease).is_some_and(|d| *d <= Instant::now());
                if due {
                    early.remove(&lease);
                }
                due
            };
            if due {
                tracing::info!(lease, "early-expiry: revoking a lease at half its TTL");
                node.revoke_later(lease);
            }
        });
    }

    /// The broken rule "ack-before-sync": sends a transaction whose change
    /// the caller has already answered, and forgets it.
    fn commit_later(&self, req: client::pb::TxnRequest) {
        let etcd = self.inner.etcd.clone();
        tokio::spawn(async move {
            if let Err(e) = etcd.txn(req).await {
                tracing::debug!(error = %e, "an answered change's transaction failed");
            }
        });
    }

    /// Breaks rules on purpose, from a list such as
    /// `no-fence,early-expiry,renew-bumps-token,ack-before-sync` (parsed
    /// by the core, [`Faults::parse`], as the single node's is), so that
    /// the torture test can show its checker catches real bugs on this
    /// backend too. Each is the core's rule broken by the same switch as
    /// on the single node (the fence, a lease's length, a renewal's
    /// token); "ack-before-sync" answers a grant or a write before its
    /// etcd transaction has committed (sent in the background, its outcome
    /// ignored): what the single node's answer before its sync is to a
    /// crash, that is to a race with another frontend or to a SIGKILL of
    /// this one.
    #[cfg(feature = "fault-injection")]
    pub fn break_rules(&self, list: &str) -> Result<()> {
        let f = Faults::parse(list)?;
        if self.inner.faults.set(f).is_err() {
            return Err(Error::invalid(
                "LEASEHOLD_BREAK",
                "rules are broken already",
            ));
        }
        tracing::warn!(
            rules = list,
            "BREAKING LEASE RULES ON PURPOSE (fault-injection build)"
        );
        Ok(())
    }

    fn revoke_later(&self, lease: i64) {
        let etcd = self.inner.etcd.clone();
        tokio::spawn(async move {
            if let Err(e) = etcd.revoke(lease).await {
                tracing::debug!(error = %e, lease, "revoke failed; the etcd lease runs out on its own");
            }
        });
    }

    /// Releases a grant whose holder never learned of it (its call was
    /// cancelled, or its reply could not be delivered). A no-op when the
    /// lease is no longer that grant.
    pub async fn release_undelivered(&self, job: &JobName, holder: &HolderId, token: Token) {
        let r = self.give_back(job, holder, token).await;
        match r {
            Ok(false) => tracing::debug!(
                job = %job,
                token = token.0,
                "an undelivered grant was not given back: it ended, or its holder asked again"
            ),
            Ok(true) => tracing::info!(
                job = %job,
                token = token.0,
                "released a grant whose caller went away before it was told"
            ),
            Err(e) => {
                tracing::debug!(job = %job, error = %e, "an undelivered grant was not released")
            }
        }
    }

    /// Releases the grant of `token` to `holder` if its holder key was
    /// never put again since the grant: its transaction compares the key's
    /// version with 1, which the holder's first repeated Acquire or Renew
    /// moves past (see `Node::give_back` for the rule). Returns whether it
    /// did.
    pub async fn give_back(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.bounded(
            "Release",
            Duration::ZERO,
            self.give_back_unbounded(job, holder, token),
        )
        .await
    }

    /// The work of [`EtcdNode::give_back`], which bounds it.
    async fn give_back_unbounded(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
    ) -> Result<bool> {
        self.check_open()?;
        self.end_holding(job, holder, token, true).await
    }

    /// Renews a live lease. Fails with [`Error::LeaseLost`] otherwise.
    pub async fn renew(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
    ) -> Result<LeaseView> {
        self.bounded(
            "Renew",
            Duration::ZERO,
            self.renew_unbounded(job, holder, token, ttl),
        )
        .await
    }

    /// The work of [`EtcdNode::renew`], which bounds it.
    async fn renew_unbounded(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
    ) -> Result<LeaseView> {
        self.check_open()?;
        self.check_ttl(ttl)?;
        self.renew_one(job, holder, token, ttl)
            .await?
            .map_err(|(e, _)| e)
    }

    async fn renew_one(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
    ) -> Result<RenewOutcome> {
        let c = &self.inner.counters;
        for _ in 0..MAX_TRIES {
            let read = self.read_job(job, None).await?;
            match decide::renew(job, &read.job, holder, token) {
                Ok(h) => {
                    let answered = rules::renewed_token(h.rec.token, self.faults());
                    let done = match answered == h.rec.token {
                        true => self.extend(job, h, ttl).await?,
                        false => self.bump(job, h, ttl, answered).await?,
                    };
                    if let Some(view) = done {
                        c.renewals.fetch_add(1, Ordering::Relaxed);
                        return Ok(Ok(view));
                    }
                }
                Err(lost) => {
                    c.renew_losses.fetch_add(1, Ordering::Relaxed);
                    let view = self.view(job, &read.job).await?;
                    return Ok(Err((lost, view)));
                }
            }
        }
        Err(contention("Renew"))
    }

    /// Renews many leases, each on its own (concurrently). Fails as a whole
    /// only when the frontend is closing or etcd fails.
    pub async fn renew_many(&self, batch: &[Renewal]) -> Result<Vec<RenewOutcome>> {
        self.bounded(
            "KeepAlive",
            Duration::ZERO,
            self.renew_many_unbounded(batch),
        )
        .await
    }

    /// The work of [`EtcdNode::renew_many`], which bounds it.
    async fn renew_many_unbounded(&self, batch: &[Renewal]) -> Result<Vec<RenewOutcome>> {
        self.check_open()?;
        let mut set = tokio::task::JoinSet::new();
        for (i, r) in batch.iter().cloned().enumerate() {
            let node = self.clone();
            set.spawn(async move {
                let out = match node.check_ttl(r.ttl) {
                    Ok(_) => node.renew_one(&r.job, &r.holder, r.token, r.ttl).await,
                    Err(e) => Ok(Err((
                        e,
                        LeaseView {
                            job: r.job.clone(),
                            token: Token::NONE,
                            state: LeaseState::Free(Vacancy::Never),
                        },
                    ))),
                };
                (i, out)
            });
        }
        let mut out: Vec<Option<RenewOutcome>> = vec![None; batch.len()];
        while let Some(done) = set.join_next().await {
            let (i, r) = done.map_err(|e| Error::Storage(format!("renewal task failed: {e}")))?;
            out[i] = Some(r?);
        }
        let out: Vec<RenewOutcome> = out.into_iter().flatten().collect();
        assert_eq!(out.len(), batch.len(), "every renewal answered");
        Ok(out)
    }

    /// Resolves once the frontend starts closing.
    pub async fn closing(&self) {
        let mut rx = self.inner.closing.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Releases a lease; the first waiter (on any frontend) is woken by
    /// etcd's watch and takes it.
    pub async fn release(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.bounded(
            "Release",
            Duration::ZERO,
            self.release_unbounded(job, holder, token),
        )
        .await
    }

    /// The work of [`EtcdNode::release`], which bounds it.
    async fn release_unbounded(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
    ) -> Result<bool> {
        self.check_open()?;
        self.end_holding(job, holder, token, false).await
    }

    /// Ends the holding of (`holder`, `token`) and marks its token
    /// released; with `untold_only`, only a holding whose holder key is
    /// still at version 1 (a give-back), and nothing else is an error.
    /// Returns whether it ended one.
    async fn end_holding(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        untold_only: bool,
    ) -> Result<bool> {
        for _ in 0..MAX_TRIES {
            let read = self.read_job(job, None).await?;
            let (h, mut req) = match (decide::release(job, &read.job, holder, token), untold_only) {
                (Ok(Release::Delete(h)), false) => (
                    h,
                    txn::release(&self.inner.keys, job.as_str(), h, holder, token),
                ),
                (Ok(Release::Delete(h)), true) if h.version == 1 => (
                    h,
                    txn::give_back(&self.inner.keys, job.as_str(), h, holder, token),
                ),
                (Err(e), false) => return Err(e),
                _ => return Ok(false),
            };
            if self.inner.limits.history_per_job > 0 {
                let end = HistoryPut::End {
                    token,
                    how: TenureEnd::Released,
                    at_unix_ms: clock::wall_unix_ms(),
                };
                req.success
                    .push(txn::history_put(&self.inner.keys, job, &end));
            }
            let r = self.failed(self.inner.etcd.txn(req).await)?;
            // A give-back that finds the grant told (its untold key gone,
            // which a renewal may do without touching the holder key) is
            // over: reading the job again would find it unchanged.
            if !r.succeeded && untold_only && txn::untold_gone(&r, token) {
                return Ok(false);
            }
            if r.succeeded {
                if let Err(e) = self.inner.etcd.revoke(h.lease).await {
                    tracing::debug!(error = %e, "revoke after release failed; the etcd lease runs out on its own");
                }
                return Ok(true);
            }
        }
        Err(contention("Release"))
    }

    /// Up to `limit` jobs starting with `prefix` (after `after`) for the
    /// status page: each lease as listed, and its leaderless time from the
    /// metrics mirror. Waiters and fenced writes are not counted across
    /// frontends: zero here (the page says they are not known).
    pub async fn status(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Statuses> {
        self.bounded(
            "status",
            Duration::ZERO,
            self.status_unbounded(prefix, after, limit),
        )
        .await
    }

    /// The work of [`EtcdNode::status`], which bounds it.
    async fn status_unbounded(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Statuses> {
        let views = self.leases_unbounded(prefix, after, limit).await?;
        let names: Vec<&str> = views.iter().map(|v| v.job.as_str()).collect();
        let vacant = self.inner.mirror.vacant_for(&names);
        let jobs = views
            .iter()
            .zip(vacant)
            .map(|(v, vacant_for)| leasehold_core::lease::JobStatus {
                vacant_for: match v.holder() {
                    Some(_) => None,
                    None => Some(vacant_for.unwrap_or_default()),
                },
                view: v.clone(),
                waiters: 0,
                fenced: 0,
                fenced_ago: None,
            })
            .collect();
        Ok(Statuses {
            jobs,
            counted: false,
        })
    }

    /// The jobs whose leadership changes from now on, as this frontend's
    /// mirror of etcd sees them.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<JobName> {
        self.inner.mirror.changes()
    }

    /// Up to `limit` tenures of `job`'s history with a token below
    /// `before` (all when `None`), newest first, read with the job's
    /// records at one revision. A tenure that ran out with no end recorded
    /// yet (the frontends record an expiry as they see the holder key go)
    /// shows as expired now.
    pub async fn history(
        &self,
        job: &JobName,
        before: Option<Token>,
        limit: usize,
    ) -> Result<Vec<Tenure>> {
        self.bounded(
            "GetHistory",
            Duration::ZERO,
            self.history_unbounded(job, before, limit),
        )
        .await
    }

    /// The work of [`EtcdNode::history`], which bounds it.
    async fn history_unbounded(
        &self,
        job: &JobName,
        before: Option<Token>,
        limit: usize,
    ) -> Result<Vec<Tenure>> {
        let k = &self.inner.keys;
        let prefix = k.history_prefix(job.as_str());
        let end = match before {
            Some(t) if t == Token::NONE => return Ok(Vec::new()),
            // `before`'s own tenure too: it says whether the one before it
            // was taken over.
            Some(t) => k.history(job.as_str(), t, 2),
            None => keys::prefix_end(&prefix),
        };
        let (js, je) = k.job_range(job.as_str());
        let reads = vec![range_req(js, je, 0), range_req(prefix.clone(), end, 0)];
        let r = self.failed(self.inner.etcd.read_txn(reads).await)?;
        let mut rs = ranges(r).into_iter();
        let job_kvs = rs.next().map(|r| r.kvs).unwrap_or_default();
        let st = k.job(job.as_str(), &job_kvs)?;
        let records: Vec<(Vec<u8>, ValueRecord)> = rs
            .next()
            .map(|r| r.kvs)
            .unwrap_or_default()
            .into_iter()
            .map(|kv| {
                let rest = kv.key[prefix.len()..].to_vec();
                let token = rest
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_be_bytes);
                let rec = ValueRecord {
                    token: Token(token),
                    version: 1,
                    value: Some(kv.value),
                };
                (rest, rec)
            })
            .collect();
        let mut tenures = decode_history(&records).map_err(|e| {
            Error::Storage(format!("the history of job {job:?} does not decode: {e}"))
        })?;
        // An expiry followed by another holder's grant was a takeover.
        for i in 1..tenures.len() {
            let next_holder = tenures[i].holder.clone();
            let prev = &mut tenures[i - 1];
            if matches!(prev.end, Some((TenureEnd::Expired, _))) && prev.holder != next_holder {
                prev.end = prev.end.map(|(_, at)| (TenureEnd::TakenOver, at));
            }
        }
        if let Some(b) = before {
            tenures.retain(|t| t.token < b);
        }
        tenures.reverse();
        tenures.truncate(limit);
        if let (None, Some(t)) = (&st.holder, &st.token) {
            if !t.released {
                if let Some(open) = tenures
                    .iter_mut()
                    .find(|x| x.token == t.token && x.end.is_none())
                {
                    open.end = Some((TenureEnd::Expired, clock::wall_unix_ms()));
                }
            }
        }
        Ok(tenures)
    }

    /// The lease of `job`.
    pub async fn lease(&self, job: &JobName) -> Result<LeaseView> {
        self.bounded("GetLease", Duration::ZERO, self.lease_unbounded(job))
            .await
    }

    /// The work of [`EtcdNode::lease`], which bounds it.
    async fn lease_unbounded(&self, job: &JobName) -> Result<LeaseView> {
        let read = self.read_job(job, None).await?;
        self.view(job, &read.job).await
    }

    /// Up to `limit` leases of jobs starting with `prefix`, after `after`,
    /// in job order, read at one revision.
    ///
    /// A job whose record does not decode fails the whole listing, with an
    /// error naming that job.
    pub async fn leases(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LeaseView>> {
        self.bounded(
            "ListLeases",
            Duration::ZERO,
            self.leases_unbounded(prefix, after, limit),
        )
        .await
    }

    /// The work of [`EtcdNode::leases`], which bounds it.
    async fn leases_unbounded(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LeaseView>> {
        let k = &self.inner.keys;
        let mut jobs: Vec<(JobName, JobState)> = Vec::new();
        let mut from = after.map(str::to_owned);
        // A job with a record that does not decode is skipped, named in a
        // WARN line and counted, so one damaged job does not hide the
        // others; the scan goes on until `limit` readable jobs are found,
        // so a full page still means there may be more.
        loop {
            let (start, end) = k.jobs_range(prefix, from.as_deref());
            // Each job has at most two keys: twice what is still wanted
            // holds that many whole jobs.
            let want = 2 * (limit - jobs.len()).max(1) as i64;
            let r = self.failed(self.inner.etcd.range(range_req(start, end, want)).await)?;
            let parsed = k.jobs(&r.kvs);
            let n = parsed.len();
            let mut last = None;
            for (i, (name, st)) in parsed.into_iter().enumerate() {
                // The last job of a range that went on may be cut off (its
                // holder key in, its token key out): the next round reads
                // it whole.
                if r.more && i + 1 == n && n > 1 {
                    break;
                }
                last = Some(name.clone());
                match st {
                    Ok(st) if st.token.is_some() => jobs.push((JobName::from_trusted(name), st)),
                    Ok(_) => {}
                    Err(bad) => {
                        self.inner
                            .counters
                            .unreadable_jobs
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(job = %bad.job, "ListLeases skipped a job: {bad}");
                    }
                }
                if jobs.len() == limit {
                    break;
                }
            }
            if jobs.len() >= limit || !r.more || last.is_none() {
                break;
            }
            from = last;
        }
        let mut set = tokio::task::JoinSet::new();
        for (i, (_, st)) in jobs.iter().enumerate() {
            if let Some(h) = &st.holder {
                let etcd = self.inner.etcd.clone();
                let lease = h.lease;
                set.spawn(async move { (i, etcd.time_to_live(lease).await) });
            }
        }
        let mut remaining = vec![Duration::ZERO; jobs.len()];
        while let Some(done) = set.join_next().await {
            let (i, left) = done.map_err(|e| Error::Storage(format!("lookup task failed: {e}")))?;
            remaining[i] = Duration::from_secs(self.failed(left)?.unwrap_or(0).max(0) as u64);
        }
        let now = clock::now();
        Ok(jobs
            .iter()
            .zip(remaining)
            .map(|((job, st), left)| decide::view(job, st, left, now))
            .collect())
    }

    /// Many writes, made one after the other, each its own transaction
    /// bounded on its own, and durable when this returns (the sequence
    /// number is 0). A write refused by the fence or a quota is that
    /// write's outcome; any other error fails the batch, writes before it
    /// made.
    pub async fn stage_writes(&self, batch: Vec<Write>) -> Result<Staged> {
        let mut outcomes = Vec::with_capacity(batch.len());
        for w in batch {
            outcomes.push(
                match self
                    .bounded(
                        "WriteStream",
                        Duration::ZERO,
                        self.checked_write_unbounded(&w.job, w.token, &w.key, w.value, None),
                    )
                    .await
                {
                    Ok(v) => Ok(v),
                    Err(
                        e @ (Error::Fenced { .. }
                        | Error::UnknownToken { .. }
                        | Error::QuotaExceeded { .. }),
                    ) => Err(e),
                    Err(e) => return Err(e),
                },
            );
        }
        Ok(Staged { outcomes, seq: 0 })
    }

    /// Stores `value` (or deletes, when `None`) under (job, key), if the
    /// core's `rules::admit_write` admits it: `guard` (if any) lets the
    /// live grant's holder be written for, then `token` passes the fence,
    /// both decided on the one read the write is made against, in the
    /// single node's order. Returns the key's new version.
    pub async fn checked_write(
        &self,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<u64> {
        self.bounded(
            "CheckedWrite",
            Duration::ZERO,
            self.checked_write_unbounded(job, token, key, value, guard),
        )
        .await
    }

    /// The work of [`EtcdNode::checked_write`], which bounds it.
    async fn checked_write_unbounded(
        &self,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<u64> {
        self.check_open()?;
        let k = &self.inner.keys;
        let (js, je) = k.job_range(job.as_str());
        let vk = k.value(job.as_str(), key);
        for _ in 0..MAX_TRIES {
            let r = self.failed(
                self.inner
                    .etcd
                    .read_txn(vec![
                        range_req(js.clone(), je.clone(), 0),
                        range_req(vk.clone(), Vec::new(), 0),
                    ])
                    .await,
            )?;
            let mut rs = ranges(r).into_iter();
            let st = k.job(job.as_str(), &rs.next().map(|r| r.kvs).unwrap_or_default())?;
            let existing = match rs.next().and_then(|r| r.kvs.into_iter().next()) {
                Some(kv) => Some((decode_value(&kv.value)?, kv.mod_revision)),
                None => None,
            };
            let key_token = existing.as_ref().map(|(r, _)| r.token);
            let guard = guard.map(|g| g as &dyn Fn(&str) -> bool);
            let h = match decide::write(&st, token, key_token, guard, self.faults()) {
                Ok(h) => h,
                Err(r) => {
                    if matches!(r, Refused::Write(WriteRefusal::Fenced(_))) {
                        self.inner
                            .counters
                            .fenced_writes
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(r.error(job, token, st.token()));
                }
            };
            // Admitted: `h` is the live grant, with this token (`None`
            // only under the broken rule "no-fence").
            let rec = ValueRecord {
                token,
                version: existing.as_ref().map_or(0, |(r, _)| r.version) + 1,
                value: value.clone(),
            };
            let stored_at = existing.as_ref().map(|(_, rev)| *rev);
            if stored_at.is_none() {
                // A new key: counted (tombstones included) before the
                // write. Parallel writes of new keys can pass the count
                // together, so a job can go over by as many.
                let (vs, ve) = k.values_range(job.as_str(), b"", None);
                let mut req = range_req(vs, ve, 0);
                req.count_only = true;
                let n = self.failed(self.inner.etcd.range(req).await)?.count;
                if n >= self.inner.limits.max_keys_per_job as i64 {
                    return Err(self.inner.limits.too_many_keys());
                }
            }
            let req = txn::write(k, job.as_str(), h, &vk, stored_at, &rec);
            if self.faults().ack_before_sync() {
                // The broken rule "ack-before-sync": answered before the
                // transaction has committed.
                self.commit_later(req);
                return Ok(rec.version);
            }
            if self.failed(self.inner.etcd.txn(req).await)?.succeeded {
                self.inner.counters.writes.fetch_add(1, Ordering::Relaxed);
                return Ok(rec.version);
            }
        }
        Err(contention("CheckedWrite"))
    }

    /// The record under (job, key): a linearizable read.
    pub async fn read(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        self.bounded("Read", Duration::ZERO, self.read_unbounded(job, key))
            .await
    }

    /// The work of [`EtcdNode::read`], which bounds it.
    async fn read_unbounded(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        let vk = self.inner.keys.value(job.as_str(), key);
        let r = self.failed(self.inner.etcd.range(range_req(vk, Vec::new(), 0)).await)?;
        r.kvs.first().map(|kv| decode_value(&kv.value)).transpose()
    }

    /// Up to `limit` live keys of `job` starting with `prefix`, after
    /// `after`; deleted keys are skipped.
    pub async fn keys(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, ValueRecord)>> {
        self.bounded(
            "ListKeys",
            Duration::ZERO,
            self.keys_unbounded(job, prefix, after, limit),
        )
        .await
    }

    /// The work of [`EtcdNode::keys`], which bounds it.
    async fn keys_unbounded(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, ValueRecord)>> {
        let k = &self.inner.keys;
        let (mut start, end) = k.values_range(job.as_str(), prefix, after);
        let mut out = Vec::new();
        let mut revision = 0;
        loop {
            let mut req = range_req(start.clone(), end.clone(), (limit - out.len()) as i64);
            req.revision = revision;
            let r = self.failed(self.inner.etcd.range(req).await)?;
            if revision == 0 {
                revision = r.header.as_ref().map_or(0, |h| h.revision);
            }
            for kv in &r.kvs {
                let rec = decode_value(&kv.value)?;
                if rec.value.is_some() {
                    let user = k
                        .value_user_key(job.as_str(), &kv.key)
                        .unwrap_or_default()
                        .to_vec();
                    out.push((user, rec));
                }
            }
            match r.kvs.last() {
                Some(last) if r.more && out.len() < limit => {
                    start = last.key.clone();
                    start.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// Per-job leadership from the mirror of etcd, the cluster-wide counts
    /// of grants, takeovers, expiries and releases it saw, and this
    /// frontend's own renew losses, fenced writes, waiters and etcd
    /// failures.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_showing(usize::MAX)
    }

    /// [`EtcdNode::snapshot`] with at most `max_jobs` jobs picked to be
    /// shown ([`JobsShown::pick`]); every job is counted.
    pub fn snapshot_showing(&self, max_jobs: usize) -> Snapshot {
        let (jobs, mut stats) = self.inner.mirror.snapshot();
        let jobs = JobsShown::pick(jobs.iter().map(|(j, l)| (j, *l)), max_jobs);
        let c = &self.inner.counters;
        stats.renewals = c.renewals.load(Ordering::Relaxed);
        stats.renew_losses = c.renew_losses.load(Ordering::Relaxed);
        stats.writes = c.writes.load(Ordering::Relaxed);
        stats.fenced_writes = c.fenced_writes.load(Ordering::Relaxed);
        Snapshot {
            stats,
            jobs,
            waiters: self.inner.waiters.load(Ordering::Acquire),
            store_failures: c.failures.load(Ordering::Relaxed),
            store_recoveries: 0,
            unreadable_jobs: c.unreadable_jobs.load(Ordering::Relaxed),
        }
    }

    /// Refuses new changes and ends waiting `Acquire`s and watches with
    /// [`Error::ShuttingDown`].
    pub fn start_closing(&self) {
        self.inner.closing.send_replace(true);
    }

    /// Closes: as [`EtcdNode::start_closing`], then revokes the session
    /// lease (taking this frontend's waiters out of line at once) and
    /// stops the background tasks. Nothing else is left to sync: every
    /// acknowledged change is already in etcd.
    pub async fn close(&self) {
        self.start_closing();
        self.inner.session.revoke(&self.inner.etcd).await;
        for t in self.inner.tasks.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
    }
}

/// Resolves once `closing` turns true (or its sender is gone).
async fn closed(closing: &mut signal::Receiver<bool>) {
    let _ = closing.wait_for(|c| *c).await;
}
