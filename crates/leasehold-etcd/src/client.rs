//! A small etcd v3 client over tonic: exactly the calls the backend makes,
//! each bounded by a deadline.
//!
//! Calls go to one member at a time, the next one once it fails a call, gives
//! no answer within an attempt, or is found stalled by the prober (see
//! `members`: a paused member is left within about half a second). Reads
//! and other idempotent calls are retried on another member until the
//! deadline; calls that change something are made once, and a failure is
//! reported as [`Error::Storage`] (UNAVAILABLE): its outcome is unknown, as
//! for any lost reply. Every lease keep-alive of the client goes over one
//! shared `LeaseKeepAlive` stream (see [`keep_alive`]).
//!
//! # Why not the `etcd-client` crate
//!
//! The README promises that a fresh machine builds the server with nothing
//! but a Rust toolchain: leasehold compiles its own protos, and etcd's
//! part in `etcd.proto`, with the `protoc` that `protoc-bin-vendored`
//! ships (see `build.rs`).
//! `etcd-client` (0.21.1, the newest when checked) cannot keep that
//! promise. Its build script compiles etcd's protos on every build with
//! `tonic-prost-build`, whose `prost-build` (0.14) runs the `protoc` named
//! by the `PROTOC` environment variable, else `protoc` on the `PATH`, and
//! bundles none. None of its features (the TLS choices, `build-server`,
//! `pub-response-field`, `raw-channel`) vendors `protoc` or skips that
//! step, and the `PROTOC` our own build script sets reaches no other
//! crate's build script. Checked by building it (`cargo check` of a crate
//! depending on `etcd-client = "0.21"`, default features) on a machine
//! without `protoc`: its build script panics with "Failed to compile proto
//! files: ... Could not find `protoc`". It would also bring the whole etcd
//! API (auth, election, lock, cluster) where the backend makes a dozen
//! calls. So the client is this file, over the part of etcd's API in
//! `etcd.proto`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use tonic::{Code, Status};

use leasehold_core::error::{Error, Result};

pub mod keep_alive;
mod members;
pub mod secure;

use keep_alive::KeepAlives;
pub(crate) use members::Members;
pub use secure::Security;
use secure::{token_refused, EtcdChannel, Login, Token};

/// Code generated from `src/etcd.proto`: etcd's own names.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("etcdserverpb");
}

use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::kv_client::KvClient;
use pb::lease_client::LeaseClient;
use pb::maintenance_client::MaintenanceClient;
use pb::request_op::Request as Op;
use pb::watch_client::WatchClient;

/// The etcd cluster, through every endpoint.
#[derive(Clone)]
pub struct Etcd {
    members: Arc<Members>,
    timeout: Duration,
    keep_alives: KeepAlives,
    /// Calls in flight to etcd at most ([`IN_FLIGHT`]); more wait here,
    /// within their deadline.
    in_flight: Arc<tokio::sync::Semaphore>,
    /// etcd's token, sent with every call (empty for an etcd without
    /// authentication).
    token: Arc<Token>,
    /// How to get a new token, for an etcd with authentication.
    login: Option<Arc<Login>>,
}

/// Unary calls a frontend has in flight to etcd at most. etcd refuses
/// proposals past a few thousand pending ("too many requests"); ten
/// thousand waiting `Acquire`s joining the line at once wait their turn in
/// the frontend instead.
const IN_FLIGHT: usize = 512;

/// How long one attempt of a call may take before another is tried.
const ATTEMPT: Duration = Duration::from_secs(2);

/// How long the shared keep-alive stream may leave keep-alives unanswered
/// before it is taken for stalled and replaced. etcd answers a keep-alive
/// from memory (a follower forwards it to the leader), in milliseconds on
/// a healthy cluster; every lease of the frontend waits while its stream
/// stalls, so this is shorter than [`ATTEMPT`]: the callers' retry goes to
/// a new stream within their first attempt.
const KEEP_ALIVE_STALL: Duration = Duration::from_secs(1);

fn storage(what: &str, s: &Status) -> Error {
    if s.code() == Code::ResourceExhausted && s.message().contains("database space exceeded") {
        return Error::Storage(format!(
            "{NO_SPACE}: etcd refused the {what} and applied nothing ({})",
            s.message()
        ));
    }
    Error::Storage(format!("etcd {what}: {} ({:?})", s.message(), s.code()))
}

/// How the refusal of an etcd out of space (its NOSPACE alarm) starts:
/// etcd refuses every change that puts a key (or grants a lease) before
/// applying anything, so the change certainly did not happen. See
/// [`super::is_no_space`].
pub const NO_SPACE: &str = "etcd is out of space (NOSPACE alarm)";

/// Whether another attempt of an idempotent call can help.
/// What this frontend's own full queue answers (the keep-alive stream's):
/// worth trying again, but no fault of the member, which must not be
/// left for it.
pub(super) const LOCAL_FULL: &str = "the keep-alive stream cannot take more";

/// Whether `s` is this frontend's own back-pressure ([`LOCAL_FULL`]).
fn local_full(s: &Status) -> bool {
    s.code() == Code::Unavailable && s.message().starts_with(LOCAL_FULL)
}

fn retryable(s: &Status) -> bool {
    !matches!(
        s.code(),
        Code::InvalidArgument
            | Code::FailedPrecondition
            | Code::NotFound
            | Code::OutOfRange
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::ResourceExhausted
            | Code::Unimplemented
    )
}

impl Etcd {
    /// A client of the cluster at `endpoints` (`http://host:port`). Every
    /// call gives up after `timeout`. Connects lazily: a cluster that is
    /// down shows in the first call. Call within a tokio runtime (it starts
    /// the task that owns the keep-alive stream).
    pub fn connect(endpoints: &[String], timeout: Duration) -> Result<Etcd> {
        Self::connect_with(endpoints, timeout, &Security::default())
    }

    /// [`Etcd::connect`] to a secured etcd: TLS when `security` has a CA
    /// (the endpoints are then `https://`), and etcd's authentication when
    /// it has a user ([`Etcd::log_in`] before the first call).
    pub fn connect_with(
        endpoints: &[String],
        timeout: Duration,
        security: &Security,
    ) -> Result<Etcd> {
        if endpoints.is_empty() {
            return Err(Error::Storage("no etcd endpoints given".into()));
        }
        let token = Arc::new(Token::default());
        let mut channels = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let ep = Endpoint::from_shared(e.clone())
                .map_err(|err| Error::Storage(format!("bad etcd endpoint {e:?}: {err}")))?
                .connect_timeout(Duration::from_secs(1))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(1))
                .keep_alive_timeout(Duration::from_secs(2))
                .keep_alive_while_idle(true);
            let ep = security.endpoint(e, ep)?;
            channels.push(EtcdChannel::new(ep.connect_lazy(), token.clone()));
        }
        let members = Members::new(channels);
        Ok(Etcd {
            keep_alives: KeepAlives::spawn(members.clone(), KEEP_ALIVE_STALL),
            members,
            timeout,
            in_flight: Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT)),
            login: security
                .user
                .as_ref()
                .map(|(u, p)| Arc::new(Login::new(u.clone(), p.clone(), token.clone()))),
            token,
        })
    }

    /// Logs in to etcd with the user name and password, when there are
    /// any; later logins happen by themselves, whenever etcd refuses a
    /// token.
    pub async fn log_in(&self) -> Result<()> {
        if self.login.is_none() {
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let (member, ch) = self.members.pick();
            match self.relogin(ch, self.token.generation()).await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(Error::Storage(m)) if m.contains("(Unavailable)") => {
                    self.members.failed(member);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Logs in again through `ch`, unless somebody did since generation
    /// `seen` of the token.
    async fn relogin(&self, ch: EtcdChannel, seen: u64) -> Result<()> {
        let Some(login) = &self.login else {
            return Ok(());
        };
        match tokio::time::timeout(ATTEMPT, login.renew(ch, seen)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(s)) => Err(Error::Storage(format!(
                "etcd login as {:?}: {} ({:?})",
                login.user,
                s.message(),
                s.code()
            ))),
            Err(_) => Err(Error::Storage(format!(
                "etcd login as {:?}: no answer within {ATTEMPT:?}",
                login.user
            ))),
        }
    }

    /// The deadline of every call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `f` until it succeeds, fails for good, or the deadline passes.
    /// Only for calls that may safely run more than once.
    /// Each attempt goes to the current member; an attempt that fails or
    /// gets no answer moves the client on to the next member.
    async fn retry<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
    where
        F: FnMut(EtcdChannel) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Status>>,
    {
        self.retry_with(what, true, f).await
    }

    /// [`Etcd::retry`], waiting for a place among the calls in flight when
    /// `limited`: lease keep-alives never wait behind other calls (a lease
    /// that is not renewed in time runs out).
    async fn retry_with<T, F, Fut>(&self, what: &str, limited: bool, mut f: F) -> Result<T>
    where
        F: FnMut(EtcdChannel) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Status>>,
    {
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Duration::from_millis(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // A place among the calls in flight, within the deadline but
            // not counted against the attempt: a call that waited its turn
            // must not lose it to an attempt's timeout and queue again.
            let _permit = if limited {
                Some(self.place(what, left).await?)
            } else {
                None
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let (member, ch) = self.members.pick();
            let seen = self.token.generation();
            let stalled = self.members.stalled(member);
            let attempt = tokio::time::timeout(left.min(ATTEMPT), f(ch.clone()));
            let err = match tokio::select! {
                r = attempt => Some(r),
                () = stalled => None,
            } {
                Some(Ok(Ok(v))) => return Ok(v),
                // A token etcd no longer takes: log in, and send it again.
                Some(Ok(Err(s))) if self.login.is_some() && token_refused(&s) => {
                    match self.relogin(ch, seen).await {
                        Ok(()) => continue,
                        Err(e) => e,
                    }
                }
                Some(Ok(Err(s))) if !retryable(&s) => return Err(storage(what, &s)),
                // Our own queue is full: again after the backoff, to the
                // same member (a bench's 6,400 renewals in flight used to
                // move every call of the frontend off a healthy leader).
                Some(Ok(Err(s))) if local_full(&s) => storage(what, &s),
                Some(Ok(Err(s))) => {
                    self.members.failed(member);
                    storage(what, &s)
                }
                Some(Err(_)) => {
                    self.members.failed(member);
                    Error::Storage(format!("etcd {what}: no answer within {ATTEMPT:?}"))
                }
                // Sent again at once, to the member that answered.
                None => continue,
            };
            if Instant::now() + backoff >= deadline {
                return Err(match err {
                    Error::Storage(m) => Error::Storage(format!(
                        "{m}; gave up after {:?}: is a majority of etcd up?",
                        self.timeout
                    )),
                    e => e,
                });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// A place among the calls in flight ([`IN_FLIGHT`]), waited for up to
    /// `within`; the call is not sent without one.
    async fn place(
        &self,
        what: &str,
        within: Duration,
    ) -> Result<tokio::sync::SemaphorePermit<'_>> {
        match tokio::time::timeout(within, self.in_flight.acquire()).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) | Err(_) => Err(Error::Storage(format!(
                "etcd {what}: too many calls in flight to etcd for {within:?}; not sent"
            ))),
        }
    }

    /// Runs `f` once, on the current member, within the deadline: a change
    /// is not retried (its outcome would be unknown), but a member that
    /// failed it or did not answer is left for the next call. (Not within
    /// one attempt: a busy cluster may take longer than that to commit, and
    /// the reads that come first in every operation already move on from a
    /// member that does not answer.)
    async fn once<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
    where
        F: FnMut(EtcdChannel) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Status>>,
    {
        self.once_with(what, true, f).await.1
    }

    /// Runs `f` once within the deadline, with a place among the calls in
    /// flight when `limited`; also the member it went to. A call refused
    /// for its token is sent again after a new login (etcd refused it
    /// before applying anything).
    async fn once_with<T, F, Fut>(&self, what: &str, limited: bool, mut f: F) -> (usize, Result<T>)
    where
        F: FnMut(EtcdChannel) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Status>>,
    {
        let deadline = Instant::now() + self.timeout;
        let _permit = if limited {
            match self.place(what, self.timeout).await {
                Ok(p) => Some(p),
                Err(e) => return (self.members.pick().0, Err(e)),
            }
        } else {
            None
        };
        let mut logged_in = false;
        loop {
            let (member, ch) = self.members.pick();
            let seen = self.token.generation();
            let limit = deadline.saturating_duration_since(Instant::now());
            let stalled = self.members.stalled(member);
            let r = tokio::select! {
                r = tokio::time::timeout(limit, f(ch.clone())) => r,
                () = stalled => {
                    return (member, Err(Error::Storage(format!(
                        "etcd {what}: the member it was sent to stopped answering; the change \
                         may or may not have happened"
                    ))));
                }
            };
            let r = match r {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(s)) if !logged_in && self.login.is_some() && token_refused(&s) => {
                    logged_in = true;
                    match self.relogin(ch, seen).await {
                        Ok(()) => continue,
                        Err(e) => Err(e),
                    }
                }
                Ok(Err(s)) => {
                    if retryable(&s) {
                        self.members.failed(member);
                    }
                    Err(storage(what, &s))
                }
                Err(_) => {
                    self.members.failed(member);
                    Err(Error::Storage(format!(
                        "etcd {what}: no answer within {limit:?}; the change may or may not have happened"
                    )))
                }
            };
            return (member, r);
        }
    }

    /// A linearizable range read, retried until the deadline.
    pub async fn range(&self, req: pb::RangeRequest) -> Result<pb::RangeResponse> {
        self.retry("range", |ch| {
            let mut kv = KvClient::new(ch);
            let req = req.clone();
            async move { kv.range(req).await.map(|r| r.into_inner()) }
        })
        .await
    }

    /// A transaction that only reads (its ranges see one revision),
    /// retried until the deadline.
    pub async fn read_txn(&self, reads: Vec<pb::RangeRequest>) -> Result<pb::TxnResponse> {
        self.read_txn_noting(reads, &std::sync::atomic::AtomicBool::new(false))
            .await
    }

    /// [`Etcd::read_txn`], setting `sent` as its first attempt is sent (after
    /// any wait for a place among the calls in flight): an answer to it
    /// reflects everything that happened before that moment.
    pub async fn read_txn_noting(
        &self,
        reads: Vec<pb::RangeRequest>,
        sent: &std::sync::atomic::AtomicBool,
    ) -> Result<pb::TxnResponse> {
        let req = pb::TxnRequest {
            compare: Vec::new(),
            success: reads
                .into_iter()
                .map(|r| pb::RequestOp {
                    request: Some(Op::RequestRange(r)),
                })
                .collect(),
            failure: Vec::new(),
        };
        self.retry("read", |ch| {
            sent.store(true, std::sync::atomic::Ordering::Release);
            let mut kv = KvClient::new(ch);
            let req = req.clone();
            async move { kv.txn(req).await.map(|r| r.into_inner()) }
        })
        .await
    }

    /// A transaction that changes something: made once.
    pub async fn txn(&self, req: pb::TxnRequest) -> Result<pb::TxnResponse> {
        self.once("txn", |ch| {
            let mut kv = KvClient::new(ch);
            let req = req.clone();
            async move { kv.txn(req).await.map(|r| r.into_inner()) }
        })
        .await
    }

    /// A transaction that puts waiter keys, made once without waiting for
    /// a place among the calls in flight: each carries many waiters' keys,
    /// and its caller keeps a few in flight at most (see
    /// `queue::Joins`), so it never waits behind the reads of the
    /// very waiters it is joining.
    pub async fn join_txn(&self, req: pb::TxnRequest) -> Result<pb::TxnResponse> {
        self.once_with("join", false, |ch| {
            let mut kv = KvClient::new(ch);
            let req = req.clone();
            async move { kv.txn(req).await.map(|r| r.into_inner()) }
        })
        .await
        .1
    }

    /// Puts `key` bound to `lease` (0 for none): made once.
    pub async fn put(&self, key: Vec<u8>, value: Vec<u8>, lease: i64) -> Result<pb::PutResponse> {
        self.once("put", |ch| {
            let mut kv = KvClient::new(ch);
            let (key, value) = (key.clone(), value.clone());
            async move {
                kv.put(pb::PutRequest { key, value, lease })
                    .await
                    .map(|r| r.into_inner())
            }
        })
        .await
    }

    /// Deletes one key, retried until the deadline (deleting twice is
    /// deleting once).
    pub async fn delete(&self, key: Vec<u8>) -> Result<()> {
        self.retry("delete", |ch| {
            let mut kv = KvClient::new(ch);
            let key = key.clone();
            async move {
                kv.delete_range(pb::DeleteRangeRequest {
                    key,
                    range_end: Vec::new(),
                })
                .await
                .map(|_| ())
            }
        })
        .await
    }

    /// Compacts etcd's history up to `revision`: every older revision of
    /// every key is forgotten, and its space free for etcd to use again.
    /// Retried until the deadline (compacting twice is compacting once:
    /// etcd refuses a revision already compacted, which is not an error
    /// here).
    pub async fn compact(&self, revision: i64) -> Result<()> {
        let r = self
            .retry("compact", |ch| {
                let mut kv = KvClient::new(ch);
                async move {
                    kv.compact(pb::CompactionRequest {
                        revision,
                        physical: false,
                    })
                    .await
                    .map(|_| ())
                }
            })
            .await;
        match r {
            Err(Error::Storage(m)) if m.contains("compacted") => Ok(()),
            r => r,
        }
    }

    /// etcd's current revision, from a linearizable read of `key`.
    pub async fn revision(&self, key: Vec<u8>) -> Result<i64> {
        let r = self.range(range_req(key, Vec::new(), 1)).await?;
        Ok(r.header.map_or(0, |h| h.revision))
    }

    /// A new etcd lease of `ttl` seconds: its id and the TTL etcd granted
    /// (etcd raises a TTL below its minimum to the minimum).
    pub async fn grant(&self, ttl: i64) -> Result<(i64, i64)> {
        let r = self
            .once("lease grant", |ch| {
                let mut l = LeaseClient::new(ch);
                async move {
                    l.lease_grant(pb::LeaseGrantRequest { ttl, id: 0 })
                        .await
                        .map(|r| r.into_inner())
                }
            })
            .await?;
        if !r.error.is_empty() {
            return Err(Error::Storage(format!("etcd lease grant: {}", r.error)));
        }
        Ok((r.id, r.ttl))
    }

    /// Revokes an etcd lease, deleting every key bound to it. A lease that
    /// is already gone is not an error.
    pub async fn revoke(&self, id: i64) -> Result<()> {
        self.retry("lease revoke", |ch| {
            let mut l = LeaseClient::new(ch);
            async move {
                match l.lease_revoke(pb::LeaseRevokeRequest { id }).await {
                    Ok(_) => Ok(()),
                    Err(s) if s.code() == Code::NotFound => Ok(()),
                    Err(s) => Err(s),
                }
            }
        })
        .await
    }

    /// Renews an etcd lease once; the TTL it now has and the raft term of
    /// the member that answered, or `None` when the lease is gone (expired
    /// or revoked: etcd never renews an expired lease, it waits for its
    /// revocation and says not found). Sent on the client's one
    /// keep-alive stream.
    pub async fn keep_alive(&self, id: i64) -> Result<Option<(i64, u64)>> {
        self.retry_with("lease keep-alive", false, |_member| {
            let ka = self.keep_alives.clone();
            async move {
                let r = ka.keep_alive(id).await?;
                Ok((r.ttl > 0).then(|| (r.ttl, r.header.map_or(0, |h| h.raft_term))))
            }
        })
        .await
    }

    /// Sends later keep-alives on a new stream (which the balancer may
    /// open to another member): for an answer from a member behind the
    /// current raft term.
    pub fn reopen_keep_alives(&self) {
        self.keep_alives.reopen();
    }

    /// How many keep-alive streams this client has opened: one, unless a
    /// stream broke, stalled or was reopened.
    pub fn keep_alive_streams(&self) -> u64 {
        self.keep_alives.opened()
    }

    /// The seconds an etcd lease has left (etcd rounds down), or `None`
    /// when it is gone.
    pub async fn time_to_live(&self, id: i64) -> Result<Option<i64>> {
        self.time_to_live_noting(id, &std::sync::atomic::AtomicBool::new(false))
            .await
    }

    /// [`Etcd::time_to_live`], setting `sent` when it is sent.
    pub async fn time_to_live_noting(
        &self,
        id: i64,
        sent: &std::sync::atomic::AtomicBool,
    ) -> Result<Option<i64>> {
        let r = self
            .retry("lease time-to-live", |ch| {
                sent.store(true, std::sync::atomic::Ordering::Release);
                let mut l = LeaseClient::new(ch);
                async move {
                    l.lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys: false })
                        .await
                        .map(|r| r.into_inner())
                }
            })
            .await?;
        Ok((r.ttl >= 0).then_some(r.ttl))
    }

    /// The keys bound to the etcd lease `id`; `None` when the lease is
    /// gone. A read, tried again on another member when one fails.
    pub async fn lease_keys(&self, id: i64) -> Result<Option<Vec<Vec<u8>>>> {
        let r = self
            .retry("lease time-to-live", |ch| {
                let mut l = LeaseClient::new(ch);
                async move {
                    l.lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys: true })
                        .await
                        .map(|r| r.into_inner())
                }
            })
            .await?;
        Ok((r.ttl >= 0).then_some(r.keys))
    }

    /// Watches the key ranges from `revision` on. Events from `revision`
    /// on are never missed, however late the watch is registered.
    pub async fn watch(&self, ranges: &[WatchRange], revision: i64) -> Result<Watch> {
        let creates: Vec<pb::WatchRequest> = ranges
            .iter()
            .map(|r| pb::WatchRequest {
                request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                    pb::WatchCreateRequest {
                        key: r.start.clone(),
                        range_end: r.end.clone(),
                        start_revision: revision,
                        filters: match r.deletes_only {
                            true => vec![pb::watch_create_request::FilterType::Noput as i32],
                            false => Vec::new(),
                        },
                        ..Default::default()
                    },
                )),
            })
            .collect();
        let (member, r) = self
            .once_with("watch", true, |ch| {
                let (tx, rx) = mpsc::channel(creates.len().max(1));
                for c in &creates {
                    tx.try_send(c.clone())
                        .expect("room for every create request");
                }
                let mut w = WatchClient::new(ch);
                async move {
                    w.watch(ReceiverStream::new(rx))
                        .await
                        .map(|r| (tx, r.into_inner()))
                }
            })
            .await;
        let (tx, stream) = r?;
        Ok(Watch {
            _tx: tx,
            stream,
            stalled: Box::pin(self.members.stalled(member)),
            members: self.members.clone(),
            member,
        })
    }

    /// The alarms etcd reports (a member's status lists the cluster's
    /// alarms, e.g. `memberID:… alarm:NOSPACE`), retried until the
    /// deadline.
    pub async fn alarms(&self) -> Result<Vec<String>> {
        self.retry("status", |ch| {
            let mut m = MaintenanceClient::new(ch);
            async move {
                m.status(pb::StatusRequest {})
                    .await
                    .map(|r| r.into_inner().errors)
            }
        })
        .await
    }

    /// The member status of one endpoint: (its member id, the leader it
    /// knows). For tests and operators, not for decisions.
    pub async fn status(endpoint: &str, timeout: Duration) -> Result<(u64, u64)> {
        let ch = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| Error::Storage(format!("bad etcd endpoint {endpoint:?}: {e}")))?
            .connect_timeout(timeout)
            .timeout(timeout);
        let fut = async move {
            let ch = ch
                .connect()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            MaintenanceClient::new(ch)
                .status(pb::StatusRequest {})
                .await
                .map(|r| r.into_inner())
        };
        let r = match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(r)) => r,
            Ok(Err(s)) => return Err(storage("status", &s)),
            Err(_) => {
                return Err(Error::Storage(format!(
                    "etcd status of {endpoint}: no answer"
                )))
            }
        };
        Ok((r.header.map_or(0, |h| h.member_id), r.leader))
    }
}

/// A key range `[start, end)` to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchRange {
    /// The first key.
    pub start: Vec<u8>,
    /// The end, not in the range (etcd's `range_end`).
    pub end: Vec<u8>,
    /// Deletions only: etcd drops the puts before they are sent.
    pub deletes_only: bool,
}

impl WatchRange {
    /// Every change in `[start, end)`.
    pub fn all((start, end): (Vec<u8>, Vec<u8>)) -> WatchRange {
        WatchRange {
            start,
            end,
            deletes_only: false,
        }
    }

    /// Whether `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.start.as_slice() <= key && key < self.end.as_slice()
    }
}

/// An open etcd watch.
pub struct Watch {
    /// Keeps the request side open: the watch lives as long as this.
    _tx: mpsc::Sender<pb::WatchRequest>,
    stream: tonic::Streaming<pb::WatchResponse>,
    /// The member it was opened on: left for the next if the watch breaks.
    members: Arc<Members>,
    member: usize,
    /// Completes when that member is found stalled: its watch would wait
    /// for events that never come.
    stalled: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl Watch {
    /// The next response with events; an error when the watch broke or
    /// was cancelled (the caller reads afresh and watches again).
    pub async fn next(&mut self) -> Result<pb::WatchResponse> {
        loop {
            let message = tokio::select! {
                m = self.stream.message() => m,
                () = &mut self.stalled => {
                    return Err(Error::Storage("etcd watch: its member stopped answering".into()));
                }
            };
            let r = match message {
                Ok(Some(r)) => r,
                Ok(None) => {
                    self.members.failed(self.member);
                    return Err(Error::Storage("etcd watch ended".into()));
                }
                Err(s) => {
                    self.members.failed(self.member);
                    return Err(storage("watch", &s));
                }
            };
            if r.canceled {
                return Err(Error::Storage(format!(
                    "etcd watch cancelled: {} (compacted at {})",
                    r.cancel_reason, r.compact_revision
                )));
            }
            if !r.events.is_empty() {
                return Ok(r);
            }
        }
    }
}

/// A comparison that `key`'s `target` equals `value`.
fn equal(key: Vec<u8>, target: CompareTarget, value: TargetUnion) -> pb::Compare {
    pb::Compare {
        result: CompareResult::Equal as i32,
        target: target as i32,
        key,
        target_union: Some(value),
        range_end: Vec::new(),
    }
}

/// `key`'s create revision is `rev` (0: the key does not exist).
pub fn create_is(key: Vec<u8>, rev: i64) -> pb::Compare {
    equal(key, CompareTarget::Create, TargetUnion::CreateRevision(rev))
}

/// `key` exists.
pub fn exists(key: Vec<u8>) -> pb::Compare {
    pb::Compare {
        result: CompareResult::Greater as i32,
        ..create_is(key, 0)
    }
}

/// `key`'s mod revision is `rev` (0: the key does not exist).
pub fn mod_is(key: Vec<u8>, rev: i64) -> pb::Compare {
    equal(key, CompareTarget::Mod, TargetUnion::ModRevision(rev))
}

/// `key`'s version is `version`: 1 when it was put once since it was
/// created, 0 when it does not exist.
pub fn version_is(key: Vec<u8>, version: i64) -> pb::Compare {
    equal(key, CompareTarget::Version, TargetUnion::Version(version))
}

/// `key` exists and holds exactly `value`.
pub fn value_is(key: Vec<u8>, value: Vec<u8>) -> pb::Compare {
    equal(key, CompareTarget::Value, TargetUnion::Value(value))
}

/// `key` exists and its value sorts below `bound`, byte-wise.
pub fn value_below(key: Vec<u8>, bound: Vec<u8>) -> pb::Compare {
    pb::Compare {
        result: CompareResult::Less as i32,
        target: CompareTarget::Value as i32,
        key,
        target_union: Some(TargetUnion::Value(bound)),
        range_end: Vec::new(),
    }
}

/// `key` is bound to etcd lease `id`.
pub fn lease_is(key: Vec<u8>, id: i64) -> pb::Compare {
    equal(key, CompareTarget::Lease, TargetUnion::Lease(id))
}

/// The range `[start, end)` holds no key.
pub fn range_empty(start: Vec<u8>, end: Vec<u8>) -> pb::Compare {
    pb::Compare {
        range_end: end,
        ..create_is(start, 0)
    }
}

/// Every key in `[start, end)` was created at revision `rev` or later
/// (false for an empty range).
pub fn range_created_since(start: Vec<u8>, end: Vec<u8>, rev: i64) -> pb::Compare {
    pb::Compare {
        result: CompareResult::Greater as i32,
        target: CompareTarget::Create as i32,
        key: start,
        target_union: Some(TargetUnion::CreateRevision(rev - 1)),
        range_end: end,
    }
}

/// A put in a transaction.
pub fn put_op(key: Vec<u8>, value: Vec<u8>, lease: i64) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Op::RequestPut(pb::PutRequest { key, value, lease })),
    }
}

/// A delete of one key in a transaction.
pub fn delete_op(key: Vec<u8>) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Op::RequestDeleteRange(pb::DeleteRangeRequest {
            key,
            range_end: Vec::new(),
        })),
    }
}

/// A delete of every key in `[key, end)` in a transaction.
pub fn delete_range_op(key: Vec<u8>, end: Vec<u8>) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Op::RequestDeleteRange(pb::DeleteRangeRequest {
            key,
            range_end: end,
        })),
    }
}

/// A read of one key in a transaction.
pub fn range_op(key: Vec<u8>) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Op::RequestRange(range_req(key, Vec::new(), 0))),
    }
}

/// A read of `[key, end)` (one key when `end` is empty), up to `limit`
/// keys (0: all).
pub fn range_req(key: Vec<u8>, end: Vec<u8>, limit: i64) -> pb::RangeRequest {
    pb::RangeRequest {
        key,
        range_end: end,
        limit,
        ..Default::default()
    }
}

/// The ranges a read-only transaction answered, in order.
pub fn ranges(r: pb::TxnResponse) -> Vec<pb::RangeResponse> {
    r.responses
        .into_iter()
        .filter_map(|op| match op.response {
            Some(pb::response_op::Response::ResponseRange(rr)) => Some(rr),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keep-alive stream's own full queue is tried again, without
    /// blaming the member; the member's own refusals are not ours.
    #[test]
    fn our_own_full_queue_is_not_the_members_fault() {
        let ours = Status::unavailable(format!("{LOCAL_FULL}: no available capacity"));
        assert!(retryable(&ours) && local_full(&ours));
        let theirs = Status::unavailable("etcdserver: leader changed");
        assert!(retryable(&theirs) && !local_full(&theirs));
        let other = Status::resource_exhausted(format!("{LOCAL_FULL}: no"));
        assert!(!local_full(&other));
    }
}
