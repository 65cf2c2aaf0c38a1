//! The etcd backend: any number of stateless leasehold frontends over one
//! etcd cluster, serving the same API with the same guarantees.
//!
//! This is the only module that speaks to etcd. It offers the node's
//! methods ([`EtcdNode`]), and [`crate::backend::Backend`] picks it or the
//! single-node [`crate::node::Node`].
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
//!   transaction that fails revokes it).
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
//!   transaction that compares the old value and lease.
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

pub mod client;
pub mod keys;
mod mirror;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use crate::error::{Error, Result};
use crate::lease::rules::{self, classify};
use crate::lease::{HolderId, JobName, LeaseState, LeaseView, Token, Vacancy};
use crate::node::{EventKind, RenewOutcome, Renewal, Snapshot};
use crate::store::ValueRecord;
use client::{
    create_is, delete_op, lease_is, mod_is, pb, put_op, range_created_since, range_empty,
    range_req, ranges, value_below, value_is, Etcd, Watch,
};
use keys::{decode_value, encode_value, token_below, HolderRec, Keys, TokenRec};
use mirror::Mirror;

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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            prefix: "leasehold/".into(),
            timeout: Duration::from_secs(5),
            session_ttl: Duration::from_secs(5),
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
    writes: AtomicU64,
    fenced_writes: AtomicU64,
    failures: AtomicU64,
}

struct Inner {
    etcd: Etcd,
    keys: Keys,
    /// etcd's minimum lease TTL, learned at start-up.
    min_ttl: Duration,
    session_ttl: Duration,
    /// The session lease the waiters' keys are bound to.
    session: watch::Sender<i64>,
    closing: watch::Sender<bool>,
    counters: Counters,
    /// Waiter keys this frontend has in etcd.
    waiters: AtomicUsize,
    mirror: Arc<Mirror>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A leasehold frontend on etcd. Cheap to clone: clones share one state.
#[derive(Clone)]
pub struct EtcdNode {
    inner: Arc<Inner>,
}

/// One job as read from etcd, at one revision.
#[derive(Debug, Clone, Default)]
struct JobState {
    revision: i64,
    token: Option<TokenRec>,
    token_mod: i64,
    holder: Option<Holding>,
    /// The create revision of the first waiter in line.
    first_waiter: Option<i64>,
    /// The create revision of our own waiter key, when asked.
    mine: Option<i64>,
}

#[derive(Debug, Clone)]
struct Holding {
    rec: HolderRec,
    raw: Vec<u8>,
    lease: i64,
}

impl JobState {
    fn token(&self) -> Token {
        self.token.as_ref().map_or(Token::NONE, |t| t.token)
    }

    fn vacancy(&self) -> Vacancy {
        match &self.token {
            None => Vacancy::Never,
            Some(t) if t.released => Vacancy::Released,
            Some(_) => Vacancy::Expired,
        }
    }

    /// The lease as a view; `remaining` as given for a held lease.
    fn view(&self, job: &JobName, remaining: Duration) -> LeaseView {
        let state = match &self.holder {
            Some(h) => held(&h.rec, remaining),
            None => LeaseState::Free(self.vacancy()),
        };
        LeaseView {
            job: job.clone(),
            token: self.token(),
            state,
        }
    }

    /// Applies one watch event on the job's keys.
    fn apply(&mut self, keys: &Keys, ev: &pb::Event) {
        let Some(kv) = &ev.kv else { return };
        let Some((_, kind)) = keys.parse_job_key(&kv.key) else {
            return;
        };
        let deleted = ev.r#type == pb::event::EventType::Delete as i32;
        match (kind, deleted) {
            (b't', false) => {
                self.token = TokenRec::decode(&kv.value).ok();
                self.token_mod = kv.mod_revision;
            }
            (b'h', false) => {
                self.holder = HolderRec::decode(&kv.value).ok().map(|rec| Holding {
                    rec,
                    raw: kv.value.clone(),
                    lease: kv.lease,
                })
            }
            (b'h', true) => self.holder = None,
            _ => {}
        }
        self.revision = self.revision.max(kv.mod_revision);
    }
}

fn held(rec: &HolderRec, remaining: Duration) -> LeaseState {
    let remaining = remaining.min(rec.ttl);
    LeaseState::Held {
        holder: HolderId::from_trusted(rec.holder.clone()),
        ttl: rec.ttl,
        deadline: crate::clock::now() + remaining,
        remaining,
    }
}

fn lost(job: &JobName, st: &JobState, token: Token) -> Error {
    rules::unknown_or_lost(
        job,
        st.holder.as_ref().map(|h| h.rec.holder.clone()),
        st.token(),
        token,
    )
}

fn contention(what: &str) -> Error {
    Error::Storage(format!(
        "{what}: the job kept changing under {MAX_TRIES} tries; try again"
    ))
}

/// A waiting `Acquire`'s key in etcd. Dropping it takes the waiter out of
/// line (unless its grant already did).
struct Waiting {
    node: EtcdNode,
    key: Vec<u8>,
    rev: i64,
    granted: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let inner = self.node.inner.clone();
        if self.granted {
            inner.waiters.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let key = std::mem::take(&mut self.key);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = inner.etcd.delete(key).await {
                        tracing::warn!(error = %e, "could not delete a waiter's key; it goes with the session lease");
                    }
                    inner.waiters.fetch_sub(1, Ordering::AcqRel);
                });
            }
            Err(_) => {
                inner.waiters.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl EtcdNode {
    /// Connects to etcd, learns its minimum lease TTL, opens the session
    /// lease and starts the metrics mirror. Fails when etcd does not
    /// answer within `config.timeout`.
    pub async fn open(config: Config) -> Result<EtcdNode> {
        if config.session_ttl.subsec_nanos() != 0 || config.session_ttl.is_zero() {
            return Err(Error::invalid(
                "etcd_session_ttl",
                format!("{:?} is not a whole number of seconds", config.session_ttl),
            ));
        }
        let etcd = Etcd::connect(&config.endpoints, config.timeout)?;
        // etcd raises a TTL below its minimum to the minimum and says so in
        // its answer: ask for 1 s to learn it.
        let (probe, min) = etcd.grant(1).await?;
        etcd.revoke(probe).await?;
        let min_ttl = Duration::from_secs(min.max(1) as u64);
        if config.session_ttl < min_ttl {
            return Err(Error::invalid(
                "etcd_session_ttl",
                format!(
                    "{:?} is below etcd's minimum lease TTL of {min_ttl:?}",
                    config.session_ttl
                ),
            ));
        }
        let (session, _) = etcd.grant(config.session_ttl.as_secs() as i64).await?;
        let node = EtcdNode {
            inner: Arc::new(Inner {
                etcd,
                keys: Keys::new(&config.prefix),
                min_ttl,
                session_ttl: config.session_ttl,
                session: watch::Sender::new(session),
                closing: watch::Sender::new(false),
                counters: Counters::default(),
                waiters: AtomicUsize::new(0),
                mirror: Arc::new(Mirror::default()),
                tasks: Mutex::new(Vec::new()),
            }),
        };
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
            .extend([keeper, mirror]);
        Ok(node)
    }

    /// etcd's minimum lease TTL, as etcd reported it at start-up.
    pub fn min_ttl(&self) -> Duration {
        self.inner.min_ttl
    }

    /// Refuses a TTL etcd cannot keep exactly: not whole seconds, or below
    /// etcd's minimum lease TTL.
    pub fn check_ttl(&self, ttl: Duration) -> Result<Duration> {
        if ttl.subsec_nanos() != 0 || ttl < self.inner.min_ttl {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{ttl:?} is not allowed: with the etcd store, TTLs are whole seconds \
                     and at least {:?} (etcd's minimum lease TTL)",
                    self.inner.min_ttl
                ),
            ));
        }
        Ok(ttl)
    }

    /// Keeps the session lease alive at a third of its TTL; opens a new one
    /// if it was lost (its waiters then ask again).
    async fn keep_session(self) {
        let mut closing = self.inner.closing.subscribe();
        let every = self.inner.session_ttl / 3;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = closed(&mut closing) => return,
            }
            let id = *self.inner.session.borrow();
            match self.inner.etcd.keep_alive(id).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    tracing::warn!("the etcd session lease expired; waiters of this frontend lost their places in line");
                    match self
                        .inner
                        .etcd
                        .grant(self.inner.session_ttl.as_secs() as i64)
                        .await
                    {
                        Ok((id, _)) => {
                            self.inner.session.send_replace(id);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot open a new etcd session lease")
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot renew the etcd session lease"),
            }
        }
    }

    fn check_open(&self) -> Result<()> {
        if *self.inner.closing.borrow() {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }

    fn failed<T>(&self, r: Result<T>) -> Result<T> {
        if matches!(r, Err(Error::Storage(_))) {
            self.inner.counters.failures.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Reads the job's keys, its first waiter and (when given) our own
    /// waiter key, at one revision.
    async fn read_job(&self, job: &JobName, mine: Option<&[u8]>) -> Result<JobState> {
        let k = &self.inner.keys;
        let (js, je) = k.job_range(job.as_str());
        let (ws, we) = k.waiters_range(job.as_str());
        let mut first = range_req(ws, we, 1);
        first.sort_order = pb::range_request::SortOrder::Ascend as i32;
        first.sort_target = pb::range_request::SortTarget::Create as i32;
        first.keys_only = true;
        let mut reads = vec![range_req(js, je, 0), first];
        if let Some(m) = mine {
            let mut r = range_req(m.to_vec(), Vec::new(), 0);
            r.keys_only = true;
            reads.push(r);
        }
        let r = self.failed(self.inner.etcd.read_txn(reads).await)?;
        let revision = r.header.as_ref().map_or(0, |h| h.revision);
        let mut rs = ranges(r).into_iter();
        let mut st = JobState {
            revision,
            ..JobState::default()
        };
        for kv in rs.next().map(|r| r.kvs).unwrap_or_default() {
            match k.parse_job_key(&kv.key) {
                Some((_, b't')) => {
                    st.token = Some(TokenRec::decode(&kv.value)?);
                    st.token_mod = kv.mod_revision;
                }
                Some((_, b'h')) => {
                    st.holder = Some(Holding {
                        rec: HolderRec::decode(&kv.value)?,
                        raw: kv.value,
                        lease: kv.lease,
                    })
                }
                _ => {}
            }
        }
        st.first_waiter = rs
            .next()
            .and_then(|r| r.kvs.first().map(|kv| kv.create_revision));
        st.mine = rs
            .next()
            .and_then(|r| r.kvs.first().map(|kv| kv.create_revision));
        Ok(st)
    }

    /// How long the holding has left, from etcd (whole seconds).
    async fn remaining(&self, h: &Holding) -> Result<Duration> {
        let left = self.failed(self.inner.etcd.time_to_live(h.lease).await)?;
        Ok(Duration::from_secs(left.unwrap_or(0).max(0) as u64))
    }

    /// The job's lease as read, with `remaining` from etcd when held.
    async fn view(&self, job: &JobName, st: &JobState) -> Result<LeaseView> {
        let remaining = match &st.holder {
            Some(h) => self.remaining(h).await?,
            None => Duration::ZERO,
        };
        Ok(st.view(job, remaining))
    }

    /// Asks for the lease; waits up to `wait` for it to free up, first come
    /// first served across every frontend. Returns whether it was granted,
    /// and the lease.
    pub async fn acquire(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        wait: Duration,
    ) -> Result<(bool, LeaseView)> {
        self.check_open()?;
        self.check_ttl(ttl)?;
        let give_up = Instant::now() + wait;
        let mut waiting: Option<Waiting> = None;
        let mut watch: Option<Watch> = None;
        let mut closing = self.inner.closing.subscribe();
        let mut tries = 0;
        loop {
            let st = self
                .read_job(job, waiting.as_ref().map(|w| w.key.as_slice()))
                .await?;
            if let Some(w) = &waiting {
                if st.mine != Some(w.rev) {
                    return Err(Error::Storage(
                        "this waiting Acquire lost its place in line (its frontend's etcd \
                         session lease ran out); ask again"
                            .into(),
                    ));
                }
            }
            let mine = match &st.holder {
                Some(h) => h.rec.holder == holder.as_str(),
                None => match &waiting {
                    None => st.first_waiter.is_none(),
                    Some(w) => st.first_waiter == Some(w.rev),
                },
            };
            if mine {
                tries += 1;
                if tries > MAX_TRIES {
                    return Err(contention("Acquire"));
                }
                let done = match &st.holder {
                    Some(h) => self.extend(job, h, ttl).await?,
                    None => self.grant(job, holder, ttl, &st, waiting.as_ref()).await?,
                };
                if let Some(view) = done {
                    if let Some(mut w) = waiting.take() {
                        // A grant deleted our key in its transaction; an
                        // extension leaves it to the drop.
                        w.granted = st.holder.is_none();
                    }
                    return Ok((true, view));
                }
                continue;
            }
            // Busy.
            if Instant::now() >= give_up {
                return Ok((false, self.view(job, &st).await?));
            }
            if waiting.is_none() {
                waiting = Some(self.enqueue(job, holder).await?);
                continue; // read again: the job may have changed meanwhile
            }
            if watch.is_none() {
                let k = &self.inner.keys;
                let ranges = [k.job_range(job.as_str()), k.waiters_range(job.as_str())];
                watch = Some(self.failed(self.inner.etcd.watch(&ranges, st.revision + 1).await)?);
            }
            let w = watch.as_mut().expect("watch open");
            tokio::select! {
                r = w.next() => if r.is_err() {
                    // Read afresh and watch again from there.
                    watch = None;
                },
                _ = sleep_until(give_up) => {}
                _ = closed(&mut closing) => return Err(Error::ShuttingDown),
            }
        }
    }

    /// Puts our waiter key, last in line.
    async fn enqueue(&self, job: &JobName, holder: &HolderId) -> Result<Waiting> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let key = self.inner.keys.waiter(job.as_str(), &id);
        let session = *self.inner.session.borrow();
        let r = self
            .inner
            .etcd
            .put(key.clone(), holder.as_str().as_bytes().to_vec(), session)
            .await;
        let r = match self.failed(r) {
            Ok(r) => r,
            Err(e) => {
                // The put may have happened: take it out of line again.
                let etcd = self.inner.etcd.clone();
                tokio::spawn(async move { etcd.delete(key).await });
                return Err(e);
            }
        };
        self.inner.waiters.fetch_add(1, Ordering::AcqRel);
        Ok(Waiting {
            node: self.clone(),
            key,
            rev: r.header.map_or(0, |h| h.revision),
            granted: false,
        })
    }

    /// Grants the free lease to `holder` with the next token, in one
    /// transaction; `None` when the job changed since `st` was read.
    async fn grant(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        st: &JobState,
        waiting: Option<&Waiting>,
    ) -> Result<Option<LeaseView>> {
        let k = &self.inner.keys;
        let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
        let token = st.token().next();
        let (hk, tk) = (k.holder(job.as_str()), k.token(job.as_str()));
        let (ws, we) = k.waiters_range(job.as_str());
        let mut compare = vec![create_is(hk.clone(), 0), mod_is(tk.clone(), st.token_mod)];
        match waiting {
            None => compare.push(range_empty(ws, we)),
            Some(w) => {
                compare.push(create_is(w.key.clone(), w.rev));
                compare.push(range_created_since(ws, we, w.rev));
            }
        }
        let rec = HolderRec {
            token,
            ttl,
            holder: holder.to_string(),
        };
        let mut success = vec![
            put_op(
                tk,
                TokenRec {
                    token,
                    released: false,
                    holder: holder.to_string(),
                }
                .encode(),
                0,
            ),
            put_op(hk, rec.encode(), lease),
        ];
        if let Some(w) = waiting {
            success.push(delete_op(w.key.clone()));
        }
        let r = self.inner.etcd.txn(pb::TxnRequest {
            compare,
            success,
            failure: Vec::new(),
        });
        // On an unknown outcome the etcd lease is left to run out: the
        // grant may have happened, and its holder may yet learn of it by
        // asking again.
        if !self.failed(r.await)?.succeeded {
            self.revoke_later(lease);
            return Ok(None);
        }
        Ok(Some(LeaseView {
            job: job.clone(),
            token,
            state: held(&rec, ttl),
        }))
    }

    /// Extends our live holding for `ttl` from now: an etcd keep-alive, or
    /// a move to a new etcd lease when the TTL changes. `None` when the
    /// holding is gone (read again).
    async fn extend(&self, job: &JobName, h: &Holding, ttl: Duration) -> Result<Option<LeaseView>> {
        let view = |rec: &HolderRec| LeaseView {
            job: job.clone(),
            token: rec.token,
            state: held(rec, ttl),
        };
        if h.rec.ttl == ttl {
            return self
                .keep_alive(job, h)
                .await
                .map(|ok| ok.then(|| view(&h.rec)));
        }
        let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
        let hk = self.inner.keys.holder(job.as_str());
        let rec = HolderRec {
            ttl,
            ..h.rec.clone()
        };
        let r = self
            .inner
            .etcd
            .txn(pb::TxnRequest {
                compare: vec![
                    value_is(hk.clone(), h.raw.clone()),
                    lease_is(hk.clone(), h.lease),
                ],
                success: vec![put_op(hk, rec.encode(), lease)],
                failure: Vec::new(),
            })
            .await;
        if !self.failed(r)?.succeeded {
            self.revoke_later(lease);
            return Ok(None);
        }
        self.revoke_later(h.lease);
        Ok(Some(view(&rec)))
    }

    /// Keeps the holding's etcd lease alive, and confirms it: `false` when
    /// the holding is gone.
    ///
    /// etcd's lessor renews in memory on the member that thinks it leads.
    /// etcd 3.4 before 3.4.25 lets a deposed leader that has not yet heard
    /// of the new term (paused, partitioned) renew, while the real leader
    /// may let the same lease run out. So the keep-alive counts only if the
    /// member that answered was in the current raft term: the term of a
    /// linearizable read made after it (every leader of a later term
    /// restarts every lease's full TTL when it takes over, so a renewal
    /// in the current term is never undone). The read also checks that the
    /// holder key is still this holding.
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
            match r.kvs.first() {
                Some(kv) if kv.lease == h.lease && kv.value == h.raw => {}
                _ => return Ok(false),
            }
            if term >= current {
                return Ok(true);
            }
            tracing::debug!(
                term,
                current,
                "keep-alive answered in an older raft term; again"
            );
        }
        Err(Error::Storage(
            "etcd keep-alive kept being answered by a member in an older raft term".into(),
        ))
    }

    fn revoke_later(&self, lease: i64) {
        let etcd = self.inner.etcd.clone();
        tokio::spawn(async move {
            if let Err(e) = etcd.revoke(lease).await {
                tracing::debug!(error = %e, lease, "revoke failed; the etcd lease runs out on its own");
            }
        });
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
        for _ in 0..MAX_TRIES {
            let st = self.read_job(job, None).await?;
            match &st.holder {
                Some(h) if h.rec.holder == holder.as_str() && h.rec.token == token => {
                    if let Some(view) = self.extend(job, h, ttl).await? {
                        self.inner.counters.renewals.fetch_add(1, Ordering::Relaxed);
                        return Ok(Ok(view));
                    }
                }
                _ => {
                    self.inner
                        .counters
                        .renew_losses
                        .fetch_add(1, Ordering::Relaxed);
                    let view = self.view(job, &st).await?;
                    return Ok(Err((lost(job, &st, token), view)));
                }
            }
        }
        Err(contention("Renew"))
    }

    /// Renews many leases, each on its own (concurrently). Fails as a whole
    /// only when the frontend is closing or etcd fails.
    pub async fn renew_many(&self, batch: &[Renewal]) -> Result<Vec<RenewOutcome>> {
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
    pub async fn release(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<()> {
        self.check_open()?;
        for _ in 0..MAX_TRIES {
            let st = self.read_job(job, None).await?;
            match &st.holder {
                Some(h) if h.rec.holder == holder.as_str() && h.rec.token == token => {
                    let k = &self.inner.keys;
                    let (hk, tk) = (k.holder(job.as_str()), k.token(job.as_str()));
                    let r = self
                        .inner
                        .etcd
                        .txn(pb::TxnRequest {
                            compare: vec![
                                value_is(hk.clone(), h.raw.clone()),
                                lease_is(hk.clone(), h.lease),
                            ],
                            success: vec![
                                put_op(
                                    tk,
                                    TokenRec {
                                        token,
                                        released: true,
                                        holder: holder.to_string(),
                                    }
                                    .encode(),
                                    0,
                                ),
                                delete_op(hk),
                            ],
                            failure: Vec::new(),
                        })
                        .await;
                    if self.failed(r)?.succeeded {
                        if let Err(e) = self.inner.etcd.revoke(h.lease).await {
                            tracing::debug!(error = %e, "revoke after release failed; the etcd lease runs out on its own");
                        }
                        return Ok(());
                    }
                }
                // Released or expired already, by this holder and token.
                None if rules::released_already(
                    false,
                    st.token(),
                    st.token.as_ref().map(|t| t.holder.as_str()),
                    holder,
                    token,
                ) =>
                {
                    return Ok(())
                }
                _ => return Err(lost(job, &st, token)),
            }
        }
        Err(contention("Release"))
    }

    /// The lease of `job`.
    pub async fn lease(&self, job: &JobName) -> Result<LeaseView> {
        let st = self.read_job(job, None).await?;
        self.view(job, &st).await
    }

    /// Up to `limit` leases of jobs starting with `prefix`, after `after`,
    /// in job order, read at one revision.
    pub async fn leases(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LeaseView>> {
        let k = &self.inner.keys;
        let (start, end) = k.jobs_range(prefix, after);
        // Each job has at most two keys: twice the limit holds at least
        // `limit` whole jobs.
        let r = self.failed(
            self.inner
                .etcd
                .range(range_req(start, end, 2 * limit as i64))
                .await,
        )?;
        let mut jobs: Vec<(JobName, JobState)> = Vec::new();
        for kv in r.kvs {
            let Some((name, kind)) = k.parse_job_key(&kv.key) else {
                continue;
            };
            if jobs.last().is_none_or(|(j, _)| j.as_str() != name) {
                jobs.push((JobName::from_trusted(name.to_owned()), JobState::default()));
            }
            let st = &mut jobs.last_mut().expect("pushed").1;
            match kind {
                b't' => st.token = Some(TokenRec::decode(&kv.value)?),
                b'h' => {
                    st.holder = Some(Holding {
                        rec: HolderRec::decode(&kv.value)?,
                        raw: kv.value,
                        lease: kv.lease,
                    })
                }
                _ => {}
            }
        }
        // A job cut off by the limit (its holder key in, its token key
        // out) is on the next page.
        jobs.retain(|(_, st)| st.token.is_some());
        jobs.truncate(limit);
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
        Ok(jobs
            .iter()
            .zip(remaining)
            .map(|((job, st), left)| st.view(job, left))
            .collect())
    }

    /// Stores `value` (or deletes, when `None`) under (job, key), if `token`
    /// passes the fence. Returns the key's new version.
    pub async fn checked_write(
        &self,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
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
            let mut st = JobState::default();
            for kv in rs.next().map(|r| r.kvs).unwrap_or_default() {
                match k.parse_job_key(&kv.key) {
                    Some((_, b't')) => st.token = Some(TokenRec::decode(&kv.value)?),
                    Some((_, b'h')) => {
                        st.holder = Some(Holding {
                            rec: HolderRec::decode(&kv.value)?,
                            raw: kv.value,
                            lease: kv.lease,
                        })
                    }
                    _ => {}
                }
            }
            let existing = match rs.next().and_then(|r| r.kvs.into_iter().next()) {
                Some(kv) => Some((decode_value(&kv.value)?, kv.mod_revision)),
                None => None,
            };
            let verdict = rules::fence(
                job,
                token,
                st.token(),
                st.holder.as_ref().map(|h| h.rec.token),
                existing.as_ref().map(|(r, _)| r.token),
            );
            if let Err(e) = verdict {
                if matches!(e, Error::Fenced { .. }) {
                    self.inner
                        .counters
                        .fenced_writes
                        .fetch_add(1, Ordering::Relaxed);
                }
                return Err(e);
            }
            let h = st.holder.as_ref().expect("checked live");
            let hk = k.holder(job.as_str());
            let version = existing.as_ref().map_or(0, |(r, _)| r.version) + 1;
            let mut compare = vec![value_is(hk, h.raw.clone())];
            match &existing {
                Some((_, rev)) => {
                    compare.push(value_below(vk.clone(), token_below(token)));
                    compare.push(mod_is(vk.clone(), *rev));
                }
                None => compare.push(create_is(vk.clone(), 0)),
            }
            let rec = ValueRecord {
                token,
                version,
                value: value.clone(),
            };
            let r = self
                .inner
                .etcd
                .txn(pb::TxnRequest {
                    compare,
                    success: vec![put_op(vk.clone(), encode_value(&rec), 0)],
                    failure: Vec::new(),
                })
                .await;
            if self.failed(r)?.succeeded {
                self.inner.counters.writes.fetch_add(1, Ordering::Relaxed);
                return Ok(version);
            }
        }
        Err(contention("CheckedWrite"))
    }

    /// The record under (job, key): a linearizable read.
    pub async fn read(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
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

    /// Watches `job`: the current lease first, then every change of holder
    /// or token, from an etcd watch. A consumer that falls behind gets the
    /// latest state, with what it missed folded into it.
    pub fn watch(&self, job: JobName) -> mpsc::Receiver<Result<(EventKind, LeaseView)>> {
        let (tx, rx) = mpsc::channel(4);
        let node = self.clone();
        tokio::spawn(async move { node.watch_task(job, tx).await });
        rx
    }

    async fn watch_task(self, job: JobName, tx: mpsc::Sender<Result<(EventKind, LeaseView)>>) {
        let mut closing = self.inner.closing.subscribe();
        let first = async {
            let st = self.read_job(&job, None).await?;
            let view = self.view(&job, &st).await?;
            Ok::<_, Error>((st, view))
        };
        let (mut st, mut sent) = match first.await {
            Ok(v) => v,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        if tx
            .send(Ok((EventKind::Current, sent.clone())))
            .await
            .is_err()
        {
            return;
        }
        let range = self.inner.keys.job_range(job.as_str());
        let mut watch: Option<Watch> = None;
        let mut pending: Option<LeaseView> = None;
        loop {
            if watch.is_none() {
                match self.failed(
                    self.inner
                        .etcd
                        .watch(std::slice::from_ref(&range), st.revision + 1)
                        .await,
                ) {
                    Ok(w) => watch = Some(w),
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
            let w = watch.as_mut().expect("watch open");
            tokio::select! {
                _ = tx.closed() => return,
                _ = closed(&mut closing) => {
                    let _ = tx.try_send(Err(Error::ShuttingDown));
                    return;
                }
                permit = tx.reserve(), if pending.is_some() => {
                    let Ok(permit) = permit else { return };
                    let view = pending.take().expect("pending");
                    if let Some(kind) = classify(&sent, &view) {
                        permit.send(Ok((kind, view.clone())));
                        sent = view;
                    }
                }
                r = w.next() => match r {
                    Ok(resp) => {
                        for ev in &resp.events {
                            st.apply(&self.inner.keys, ev);
                        }
                        let ttl = st.holder.as_ref().map_or(Duration::ZERO, |h| h.rec.ttl);
                        pending = Some(st.view(&job, ttl));
                    }
                    Err(_) => {
                        // Read afresh and watch again from there; what was
                        // missed is folded into the next event.
                        watch = None;
                        match self.read_job(&job, None).await {
                            Ok(fresh) => {
                                let ttl = fresh.holder.as_ref().map_or(Duration::ZERO, |h| h.rec.ttl);
                                pending = Some(fresh.view(&job, ttl));
                                st = fresh;
                            }
                            Err(e) => {
                                let _ = tx.send(Err(e)).await;
                                return;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Per-job leadership from the mirror of etcd, the cluster-wide counts
    /// of grants, takeovers, expiries and releases it saw, and this
    /// frontend's own renew losses, fenced writes, waiters and etcd
    /// failures.
    pub fn snapshot(&self) -> Snapshot {
        let (jobs, mut stats) = self.inner.mirror.snapshot();
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
            // etcd syncs its own log; its metrics tell how.
            sync: None,
            integrity: None,
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
        let session = *self.inner.session.borrow();
        if let Err(e) = self.inner.etcd.revoke(session).await {
            tracing::warn!(error = %e, "could not revoke the etcd session lease; it runs out on its own");
        }
        for t in self.inner.tasks.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
    }
}

/// Resolves once `closing` turns true (or its sender is gone).
async fn closed(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|c| *c).await;
}
