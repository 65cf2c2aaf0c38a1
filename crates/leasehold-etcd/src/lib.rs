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
//!   the grant was still live. (A `KeepAlive` stream shares one etcd
//!   lease among the leases it renews together, a group, which only that
//!   stream keeps alive, and only in a message that renews every lease
//!   on it: module `groups`. Any other renewal moves a lease off it
//!   first.) The keep-alive counts only if the member
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
//! - **Transfer**: one transaction compares the holder key's exact value
//!   and lease, the token counter, and the successor's waiter key, then
//!   puts the successor's holder key (the next token, on a new etcd
//!   lease) over the old one, the token record, the untold key, and
//!   deletes the waiter key: the holder key is never absent, so no
//!   frontend ever sees the job free. The successor's waiting Acquire,
//!   woken by the watch, finds the lease its own. The old etcd lease is
//!   revoked after. A release of a lease bound to a connection whose
//!   client closed it is a Release, its end recorded as
//!   `connection closed`; the binding itself lives in the frontend that
//!   took the call (`server::bound`).
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
//! So that churn does not get there, each frontend compacts etcd's
//! history every `--etcd-compact-every` (five minutes), up to the revision
//! it read one period before (module `compact`): etcd's space
//! then follows live data, not the bytes ever written.
//!
//! # Waiting, first come, first served, across frontends
//!
//! A waiting `Acquire` puts a key of its own under the job's waiters'
//! prefix (`w/`, or `p/` for a preferred candidate: the line is every
//! `p/` key, then every `w/` key, each class by create revision; a grant
//! to a preferred candidate also puts its token under `r/`, so that a
//! renewal can tell its holder whether a preferred candidate waits for a
//! grant that is not one), bound to its frontend's session lease (so a frontend that dies
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
//! again until etcd confirms it (`queue::Orphans`); **a put whose outcome
//! is unknown is withdrawn, not just deleted**, so that etcd cannot apply
//! it after the delete (a paused member may hold it for that long). The
//! line is *counted*
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
//!
//! [`EtcdNode`] is the API the handlers call: each of its calls reads,
//! asks `decide`, commits with `txn`, and counts. Its calls are kept by
//! what they do:
//!
//! - `acquire`: `Acquire`, the wait in line, and the grant's transaction.
//! - `renew`: `Renew`, the batched `KeepAlive` (a message's jobs read
//!   together, its plain renewals' terms proved by one read), and the
//!   extension of a live holding (keep-alive, or a move to a new etcd
//!   lease).
//! - `release`: `Release`, and the give-back of a grant whose caller went
//!   away.
//! - `values`: checked writes, and reads of a job's keys.
//! - `views`: a job's read, `GetLease`, `ListLeases`, the status page.
//! - `history`: `GetHistory`, and the tenures a re-created job keeps.
//! - `meta`: the job count and the new-job floor; `DeleteJob`.
//! - `health`: the health probe, health, and the metrics snapshot.
//! - `faults`: the rules broken on purpose (a fault-injection build).
//! - this file: [`EtcdNode`]'s state, its opening and closing, and what
//!   every call goes through: the bound by `--etcd-timeout`
//!   (`EtcdNode::bounded`), the closing check, the count of etcd's
//!   failures.

#![warn(missing_docs)]

mod acquire;
pub mod client;
mod compact;
mod decide;
mod faults;
mod groups;
mod health;
mod history;
pub mod keys;
mod meta;
mod mirror;
mod queue;
mod reads;
mod release;
mod renew;
mod session;
mod settings;
mod txn;
mod values;
mod views;
mod watch;

pub use groups::{GroupStats, RenewGroups};
pub use settings::SharedSettings;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch as signal;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use leasehold_backend::{StateLimits, StoreHealth};
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::Faults;

use client::{range_req, Etcd};
use health::no_space_health;
use keys::{JobState, Keys};
use mirror::Mirror;
use queue::Line;
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
    /// `--etcd-compact-every`: how often the frontend compacts etcd's
    /// history, up to the revision it read one period before (see
    /// `compact`). Zero never compacts.
    pub compact_every: Duration,
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
            compact_every: compact::DEFAULT_EVERY,
        }
    }
}

/// How often a decision is tried again when its transaction's comparison
/// failed because another frontend changed the job in between.
const MAX_TRIES: usize = 64;

#[derive(Default)]
struct Counters {
    renewals: AtomicU64,
    renew_losses: AtomicU64,
    /// Keep-alives of a group's etcd lease that renewed its members.
    group_keep_alives: AtomicU64,
    /// Leases moved onto a group's etcd lease.
    group_joins: AtomicU64,
    /// Leases moved off a group's etcd lease by its stream.
    group_moves_off: AtomicU64,
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
                joins: queue::Joins::spawn(etcd.clone(), keys.clone(), waiters.clone()),
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
        if !config.compact_every.is_zero() {
            let compactor = tokio::spawn(node.clone().compact_history(config.compact_every));
            node.inner.tasks.lock().expect("tasks lock").push(compactor);
        }
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

    fn revoke_later(&self, lease: i64) {
        let etcd = self.inner.etcd.clone();
        tokio::spawn(async move {
            if let Err(e) = etcd.revoke(lease).await {
                tracing::debug!(error = %e, lease, "revoke failed; the etcd lease runs out on its own");
            }
        });
    }

    /// What this frontend's `KeepAlive` groups did since it started.
    pub fn group_stats(&self) -> GroupStats {
        let c = &self.inner.counters;
        GroupStats {
            keep_alives: c.group_keep_alives.load(Ordering::Relaxed),
            joins: c.group_joins.load(Ordering::Relaxed),
            moves_off: c.group_moves_off.load(Ordering::Relaxed),
        }
    }

    /// Revokes the etcd lease of `h`, which was just moved, released or
    /// handed over, when it is the holding's own; a group's etcd lease
    /// still binds the group's other leases (see [`keys::Sharing`]).
    fn revoke_own(&self, h: &keys::Holding) {
        if !h.rec.sharing.shared {
            self.revoke_later(h.lease);
        }
    }

    /// Resolves once the frontend starts closing.
    pub async fn closing(&self) {
        let mut rx = self.inner.closing.subscribe();
        let _ = rx.wait_for(|c| *c).await;
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
