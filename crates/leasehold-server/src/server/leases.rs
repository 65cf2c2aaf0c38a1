//! The `Leases` service: decode, call the node, encode.
//!
//! Besides admission ([`super::layers`]), this service holds the limits on
//! state that open calls keep, counted in front of either backend
//! ([`Quotas`]; in etcd mode per frontend): at most `--max-watchers`
//! `WatchLease` streams, and `--max-waiters-per-job` Acquires waiting on
//! one job (one more is still granted if the lease is free, but never
//! joins the line); with a policy, each principal at most its own
//! `max_watchers` and `max_waiters_per_job`, checked first. Over a limit:
//! RESOURCE_EXHAUSTED, reason QUOTA_EXCEEDED, naming the flag (or the
//! principal and the field), counted in
//! `leasehold_quota_exceeded_total{limit}`; nothing changed.
//!
//! **Acquires are paced per connection** to
//! `--max-acquire-rate-per-connection` a second, a second's worth at once
//! ([`Pacing::acquire`], after the arguments are checked, before any
//! decision; counted in `leasehold_acquires_paced_total`): a grant is a
//! durable change, and one connection creating jobs as fast as it could
//! took the cores from the renewals of others (BENCHMARKS.md,
//! "Isolation"). The rate is per connection; what bounds a principal
//! across its connections is its share of the calls in flight. **Renewals
//! (`Renew`, `KeepAlive`) are never paced.** The handler reads no
//! connection and carries no rate: the pacing layer
//! ([`super::pacing`]) hands it the call's [`Pacing`], and the handler
//! waits as long as that says, taking the time from the Acquire's own
//! wait.
//!
//! A watcher that cannot keep up costs nothing that grows: the backend
//! folds the changes it missed into the newest state, and `relay`
//! closes a watch whose event has waited `--watch-stall-timeout` for room
//! in its stream.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::backend::{Acquired, Backend, ReleaseIfDropped, RenewGroups, Renewal};
use crate::error::{Error, Result};
use crate::lease::{HolderId, JobName, LeaseState, Limits, Token};
use crate::metrics::RpcMetrics;
use crate::proofs::Proofs;
use crate::proto;
use crate::server::auth::{self, Action, Caller, PrincipalLoad};
use crate::server::bound::{Bindings, ConnBinds};
use crate::server::chaos::ChaosState;
use crate::server::conn::Peer;
use crate::server::convert::{self, duration, lease};
use crate::server::counted;
use crate::server::grpc_status::status;
use crate::server::layers::try_take;
use crate::server::layers::{Admitted, Undelivered};
use crate::server::pacing::Pacing;
use crate::server::{bulk, layers, page, wire};

/// Serves `leasehold.v1.Leases`.
pub struct LeasesService {
    node: Backend,
    limits: Limits,
    quotas: Arc<Quotas>,
    bindings: Arc<Bindings>,
    proofs: Arc<Proofs>,
    chaos: Arc<ChaosState>,
}

/// Limits on the state calls hold while they are open: watches, and
/// waiting Acquires per job. Counted here, in front of either backend, so
/// that a refusal changes nothing. In etcd mode each frontend counts its
/// own calls.
///
/// With a policy, each principal is held to its own limits as well (its
/// `[principal.limits]`, else the server's), counted in its
/// [`PrincipalLoad`] and checked first: a watch or a wait refused for its
/// principal takes no place from the other principals.
pub struct Quotas {
    /// `WatchLease` streams open at once (`--max-watchers`).
    pub max_watchers: usize,
    /// `Acquire`s with a wait in progress on one job
    /// (`--max-waiters-per-job`).
    pub max_waiters_per_job: usize,
    /// `Acquire`s with a wait in progress, on every job (`--max-waiters`).
    pub max_waiters: usize,
    /// How long a watcher may leave events unread before it is closed
    /// (`--watch-stall-timeout`).
    pub watch_stall_timeout: Duration,
    /// Where refusals are counted.
    pub metrics: Arc<RpcMetrics>,
    watchers: AtomicUsize,
    waiting: Mutex<HashMap<JobName, usize>>,
    waiters_total: AtomicUsize,
}

impl Quotas {
    /// Quotas of `max_watchers` and `max_waiters_per_job`.
    pub fn new(max_watchers: usize, max_waiters_per_job: usize, metrics: Arc<RpcMetrics>) -> Self {
        Quotas {
            max_watchers,
            max_waiters_per_job,
            watch_stall_timeout: DEFAULT_WATCH_STALL_TIMEOUT,
            max_waiters: DEFAULT_MAX_WAITERS,
            waiters_total: AtomicUsize::new(0),
            metrics,
            watchers: AtomicUsize::new(0),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// Counts `e`, a QUOTA_EXCEEDED, and returns it.
    fn exceeded(&self, e: Error) -> Error {
        if let Error::QuotaExceeded { limit, .. } = &e {
            self.metrics.refused(limit);
        }
        e
    }

    /// A place for one more watcher of `caller`, held until the stream
    /// ends.
    fn watcher(self: &Arc<Self>, caller: &Caller) -> Result<WatcherPlace> {
        let mut mine = None;
        if let Some((limits, load)) = caller.share() {
            let max = limits.max_watchers.unwrap_or(self.max_watchers);
            if !try_take(&load.watchers, max) {
                return Err(self.exceeded(caller.over_limit("max_watchers", max, true)));
            }
            mine = Some(load.clone());
        }
        let mut place = WatcherPlace(None, mine);
        if !try_take(&self.watchers, self.max_watchers) {
            return Err(self.exceeded(Error::QuotaExceeded {
                limit: "--max-watchers",
                max: self.max_watchers,
                principal: None,
            }));
        }
        place.0 = Some(self.clone());
        Ok(place)
    }

    /// A place in `job`'s line for `caller`, held while the Acquire waits;
    /// else the refusal to give if the Acquire is not granted at once (the
    /// line is full, or the caller's principal has its own limit's worth
    /// of waiters in it).
    fn waiter(self: &Arc<Self>, job: &JobName, caller: &Caller) -> Result<WaiterPlace, Error> {
        let mut mine = None;
        if let Some((limits, load)) = caller.share() {
            let max = limits
                .max_waiters_per_job
                .unwrap_or(self.max_waiters_per_job);
            if !join(&load.waiting, job, max) {
                return Err(caller.over_limit("max_waiters_per_job", max, true));
            }
            mine = Some(load.clone());
        }
        let mut place = WaiterPlace {
            job: job.clone(),
            server: None,
            principal: mine,
            principal_counted: false,
            counted: false,
        };
        // The principal's own share of --max-waiters, so that one
        // principal's waiters on many jobs cannot fill the server's line.
        if let (Some((limits, load)), Some(_)) = (caller.share(), &place.principal) {
            let max = limits.max_waiters.unwrap_or(self.max_waiters);
            if !try_take(&load.waiters, max) {
                return Err(caller.over_limit("max_waiters", max, true));
            }
            place.principal_counted = true;
        }
        if !join(&self.waiting, job, self.max_waiters_per_job) {
            return Err(Error::QuotaExceeded {
                limit: "--max-waiters-per-job",
                max: self.max_waiters_per_job,
                principal: None,
            });
        }
        place.server = Some(self.clone());
        if !crate::server::layers::try_take(&self.waiters_total, self.max_waiters) {
            return Err(Error::QuotaExceeded {
                limit: "--max-waiters",
                max: self.max_waiters,
                principal: None,
            });
        }
        place.counted = true;
        Ok(place)
    }
}

/// Takes a place in `job`'s line of at most `max`, or says no.
fn join(lines: &Mutex<HashMap<JobName, usize>>, job: &JobName, max: usize) -> bool {
    // A std Mutex: held for one map operation, never across an await.
    let mut w = lines.lock().unwrap_or_else(|e| e.into_inner());
    let n = w.entry(job.clone()).or_insert(0);
    if *n >= max {
        if *n == 0 {
            w.remove(job);
        }
        return false;
    }
    *n += 1;
    true
}

/// Gives back a place taken by [`join`].
fn leave(lines: &Mutex<HashMap<JobName, usize>>, job: &JobName) {
    let mut w = lines.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = w.get_mut(job) {
        *n -= 1;
        if *n == 0 {
            w.remove(job);
        }
    }
}

/// A watcher's places: in the server's count and its principal's.
struct WatcherPlace(Option<Arc<Quotas>>, Option<Arc<PrincipalLoad>>);

impl Drop for WatcherPlace {
    fn drop(&mut self) {
        if let Some(q) = &self.0 {
            q.watchers.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(load) = &self.1 {
            load.watchers.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A waiter's places: in its job's line (the server's, and its
/// principal's), and under `--max-waiters`. Dropping it gives back each
/// one it holds.
struct WaiterPlace {
    /// The job whose line it waits in.
    job: JobName,
    /// The server's quotas, once it has a place in the server's line.
    server: Option<Arc<Quotas>>,
    /// Its principal's load, once it has a place in the principal's line.
    principal: Option<Arc<PrincipalLoad>>,
    /// Whether it counts under its principal's `max_waiters` (only with
    /// `principal`).
    principal_counted: bool,
    /// Whether it counts under `--max-waiters` (only with `server`).
    counted: bool,
}

impl Drop for WaiterPlace {
    fn drop(&mut self) {
        if let Some(q) = &self.server {
            leave(&q.waiting, &self.job);
            if self.counted {
                q.waiters_total.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if let Some(load) = &self.principal {
            leave(&load.waiting, &self.job);
            if self.principal_counted {
                load.waiters.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl LeasesService {
    /// A service over `node`, checking requests against `limits` and
    /// `quotas`.
    pub fn new(
        node: Backend,
        limits: Limits,
        quotas: Arc<Quotas>,
        bindings: Arc<Bindings>,
        proofs: Arc<Proofs>,
        chaos: Arc<ChaosState>,
    ) -> Self {
        LeasesService {
            node,
            limits,
            quotas,
            bindings,
            proofs,
            chaos,
        }
    }

    /// Binds the grant to the connection `req` came on.
    fn bind<T>(&self, req: &Request<T>, job: &JobName, holder: &HolderId, token: Token) {
        if let Some(peer) = req.extensions().get::<Peer>() {
            self.bindings.bind(&peer.binds, job, holder, token);
        }
    }
}

/// A renewal of `token` refused because the chaos API paused its holder:
/// LEASE_LOST, as for a renewal that came too late.
fn paused_renewal(job: &JobName, token: Token) -> Error {
    Error::LeaseLost {
        job: job.to_string(),
        current_holder: None,
        current: token,
    }
}

/// The key set as `GetSigningKeys` answers it.
pub fn signing_keys(proofs: &Proofs) -> proto::GetSigningKeysResponse {
    proto::GetSigningKeysResponse {
        jwks: proofs.jwks().to_owned(),
        keys: proofs
            .keys()
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| proto::SigningKey {
                kid: k.kid.clone(),
                public_key: k.x.to_vec(),
                signing: i == 0,
            })
            .collect(),
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<proto::LeaseEvent, Status>> + Send>>;

/// The default `--max-waiters`.
pub const DEFAULT_MAX_WAITERS: usize = 10_000;

/// The default `--watch-stall-timeout`.
pub const DEFAULT_WATCH_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Hands a watch's events to its response stream, and closes a watch whose
/// client leaves them unread.
///
/// The backend folds the changes a slow watcher missed into the newest
/// state, so nothing piles up on the server for it. But a client that
/// reads nothing at all would still hold its watch, its task and its
/// place under `--max-watchers` for ever: when an event has waited
/// `stall` for room in the stream, the watch is closed. Its task and its
/// place are given up at once; the client is told why (RESOURCE_EXHAUSTED,
/// reason OVERLOADED, `limit` `--watch-stall-timeout`) as soon as it reads
/// the event still buffered for it, and is counted.
///
/// The channel holds two: one event, and always room for the status.
fn relay(
    mut events: mpsc::Receiver<Result<(crate::backend::EventKind, crate::lease::LeaseView)>>,
    watcher: Watcher,
    stall: Duration,
    metrics: Arc<RpcMetrics>,
    proofs: Arc<Proofs>,
) -> mpsc::Receiver<Result<proto::LeaseEvent, Status>> {
    let (tx, rx) = mpsc::channel(2);
    tokio::spawn(async move {
        // The place is the watch's for as long as this runs.
        let Watcher {
            place: _place,
            mut caller,
            job,
        } = watcher;
        let mut reloads = caller.reloads();
        loop {
            let ev = tokio::select! {
                ev = events.recv() => match ev {
                    Some(ev) => ev.map(Some),
                    None => return,
                },
                // A reload: the watch goes on only while the caller may
                // still read the job.
                Some(()) = reloaded(&mut reloads) => Ok(None),
                // The client went away (the response stream was dropped).
                _ = tx.closed() => return,
            };
            let still = caller.current().and_then(|c| {
                caller = c;
                caller.authorize(Action::Read, job.as_str())
            });
            if let Err(e) = still {
                let _ = tx.send(Err(status(e))).await;
                return;
            }
            let Some(ev) = ev.transpose() else {
                continue;
            };
            let ev = ev
                .map(|(kind, view)| proto::LeaseEvent {
                    lease: Some(lease(&view, &proofs)),
                    kind: convert::event_kind(kind) as i32,
                })
                .map_err(status);
            match tokio::time::timeout(stall, tx.reserve_many(2)).await {
                Ok(Ok(mut room)) => room.next().expect("two permits").send(ev),
                // The client went away.
                Ok(Err(_)) => return,
                Err(_) => {
                    metrics.refused("--watch-stall-timeout");
                    tracing::debug!(?stall, "closed a watch whose client read nothing");
                    let _ = tx.try_send(Err(status(Error::SlowWatcher { after: stall })));
                    return;
                }
            }
        }
    });
    rx
}
type RenewalStream = Pin<Box<dyn Stream<Item = Result<proto::KeepAliveResponse, Status>> + Send>>;

/// A `WatchLease` stream's place among the watchers, and whose it is.
struct Watcher {
    place: WatcherPlace,
    caller: Caller,
    job: crate::lease::JobName,
}

/// The next reload of the policy; never without one.
async fn reloaded(reloads: &mut Option<tokio::sync::watch::Receiver<()>>) -> Option<()> {
    match reloads {
        Some(r) => r.changed().await.ok(),
        None => std::future::pending().await,
    }
}

/// The most renewals one `KeepAliveRequest` may carry.
pub const MAX_KEEP_ALIVE_RENEWALS: usize = 1000;

#[tonic::async_trait]
impl proto::leases_server::Leases for LeasesService {
    async fn acquire(
        &self,
        req: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let (job, holder, ttl, wait, value) =
            convert::acquire_args(&self.limits, &caller, req.get_ref()).map_err(status)?;
        let slots = self.limits.slots(req.get_ref().slots).map_err(status)?;
        let ttl = self.node.check_ttl(ttl).map_err(status)?;
        // A holder the chaos API paused is heard only once its pause ends.
        if let Some(until) = self.chaos.paused_until(job.as_str(), &holder) {
            tokio::time::sleep_until(until.into()).await;
        }
        // Past its connection's Acquire rate: wait (bad input was refused
        // above, at once). The time paced is taken from the Acquire's own
        // wait, so that the call still answers within the wait it asked
        // for whenever the pacing fits in it.
        let mut wait = wait;
        let paced = Pacing::of(&req).acquire();
        if !paced.is_zero() {
            tokio::time::sleep(paced).await;
            wait = wait.saturating_sub(paced);
        }
        // A full line (or the caller's principal's full share of it): the
        // Acquire may still be granted at once (nothing waits ahead of a
        // free lease), but it does not join the line.
        let place = match wait.is_zero() {
            true => None,
            false => Some(self.quotas.waiter(&job, &caller)),
        };
        let wait = match place {
            Some(Err(_)) => Duration::ZERO,
            _ => wait,
        };
        if let (Some(Ok(_)), Some(admitted)) = (&place, req.extensions().get::<Admitted>()) {
            // In line: held by --max-waiters now, not by the budget of
            // calls in flight.
            admitted.leave_budget();
        }
        // The principal's own max_jobs, if the Acquire creates a job.
        let max_owned = caller.share().and_then(|(limits, _)| limits.max_jobs);
        let (outcome, counted) = match slots {
            None => (
                self.node
                    .acquire_as(
                        &job,
                        &holder,
                        ttl,
                        wait,
                        max_owned,
                        req.get_ref().preferred,
                        value,
                    )
                    .await,
                None,
            ),
            Some(n) => {
                let asked = counted::Counted {
                    job: &job,
                    slots: n,
                    holder: &holder,
                    ttl,
                    wait,
                    max_owned,
                    preferred: req.get_ref().preferred,
                    value,
                };
                match counted::acquire(&self.node, &self.limits, &caller, asked).await {
                    Ok(o) => (Ok(o.acquired), Some((o.slot, n))),
                    Err(e) => (Err(e), None),
                }
            }
        };
        let Acquired {
            acquired,
            fresh,
            lease: view,
        } = outcome.map_err(|e| status(self.quotas.exceeded(e)))?;
        // A counted grant is its slot's: the binding, the reply and its
        // give-back name the slot's job.
        let job = match counted {
            Some(_) => view.job.clone(),
            None => job,
        };
        if let (Some(Err(e)), false) = (place, acquired) {
            return Err(status(self.quotas.exceeded(e)));
        }
        let sent = self.limits.holder(&req.get_ref().holder).map_err(status)?;
        caller
            .check_acquired(acquired, &sent, &view)
            .map_err(status)?;
        if acquired && req.get_ref().bind_to_stream {
            self.bind(&req, &job, &holder, view.token);
        }
        self.chaos.delay(job.as_str()).await;
        let mut lease = convert::lease_for(&caller, &view, &self.proofs);
        if let (Some((slot, slots)), true) = (counted, acquired) {
            lease.slot = slot;
            lease.slots = slots;
        }
        let mut resp = Response::new(proto::AcquireResponse {
            acquired,
            lease: Some(lease),
        });
        if fresh {
            // Released at once if the reply never reaches the client.
            let (node, token) = (self.node.clone(), view.token);
            let guard = ReleaseIfDropped::new(async move {
                node.release_undelivered(&job, &holder, token).await
            });
            resp.extensions_mut().insert(Undelivered::new(guard));
        }
        Ok(resp)
    }

    async fn renew(
        &self,
        req: Request<proto::RenewRequest>,
    ) -> Result<Response<proto::RenewResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let (job, holder, token, ttl, value) =
            convert::renew_args(&self.limits, &caller, req.get_ref()).map_err(status)?;
        let ttl = self.node.check_ttl(ttl).map_err(status)?;
        self.chaos.delay(job.as_str()).await;
        if self.chaos.paused(job.as_str(), &holder) {
            // As if it came too late: the grant runs out at its deadline.
            return Err(status(paused_renewal(&job, token)));
        }
        let renewed = self
            .node
            .renew_with_value(&job, &holder, token, ttl, value)
            .await
            .map_err(|e| status(caller.refine(Action::Lease, e)))?;
        if let Some(peer) = req.extensions().get::<Peer>() {
            self.bindings.renewed(&peer.binds, &job, &holder, token);
        }
        Ok(Response::new(proto::RenewResponse {
            lease: Some(lease(&renewed.lease, &self.proofs)),
            successor_waiting: renewed.successor_waiting,
        }))
    }

    async fn release(
        &self,
        req: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let (job, holder, token) =
            convert::release_args(&self.limits, &caller, req.get_ref()).map_err(status)?;
        self.chaos.delay(job.as_str()).await;
        let released = match req.get_ref().give_back {
            true => self.node.give_back(&job, &holder, token).await,
            false => self.node.release(&job, &holder, token).await,
        }
        .map_err(|e| status(caller.refine(Action::Lease, e)))?;
        if released {
            self.bindings.unbind(&job, &holder, token);
        }
        if !released && caller.is_policed() {
            // A give-back answers `released: false` where a release fails
            // LEASE_LOST; when the lease is another principal's, both are
            // refused alike.
            let view = self.node.lease(&job).await.map_err(status)?;
            if let LeaseState::Held { holder: h, .. } = &view.state {
                if caller.held_by_another(h.as_str()) {
                    let lost = Error::LeaseLost {
                        job: job.to_string(),
                        current_holder: Some(h.as_str().to_owned()),
                        current: view.token,
                    };
                    return Err(status(caller.refine(Action::Lease, lost)));
                }
            }
        }
        Ok(Response::new(proto::ReleaseResponse { released }))
    }

    async fn transfer_lease(
        &self,
        req: Request<proto::TransferLeaseRequest>,
    ) -> Result<Response<proto::TransferLeaseResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let (job, holder, token, to, ttl) =
            convert::transfer_args(&self.limits, &caller, req.get_ref()).map_err(status)?;
        let ttl = match ttl {
            Some(t) => Some(self.node.check_ttl(t).map_err(status)?),
            None => None,
        };
        self.chaos.delay(job.as_str()).await;
        let view = self
            .node
            .transfer(&job, &holder, token, to.as_deref(), ttl)
            .await
            .map_err(|e| status(caller.refine(Action::Lease, e)))?;
        self.bindings.unbind(&job, &holder, token);
        Ok(Response::new(proto::TransferLeaseResponse {
            lease: Some(convert::lease_for(&caller, &view, &self.proofs)),
        }))
    }

    async fn get_lease(
        &self,
        req: Request<proto::GetLeaseRequest>,
    ) -> Result<Response<proto::Lease>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let job = convert::job_arg(&self.limits, &caller, Action::Read, &req.get_ref().job)
            .map_err(status)?;
        self.chaos.delay(job.as_str()).await;
        let view = self.node.lease(&job).await.map_err(status)?;
        Ok(Response::new(lease(&view, &self.proofs)))
    }

    async fn list_waiters(
        &self,
        req: Request<proto::ListWaitersRequest>,
    ) -> Result<Response<proto::ListWaitersResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        // A listing like the others: its answer counts against the
        // connection's listing rate, so that loops of long lines cannot
        // take the cores from other callers' renewals.
        let pacing = Pacing::of(&req);
        let r = req.get_ref();
        let job = convert::job_arg(&self.limits, &caller, Action::Read, &r.job).map_err(status)?;
        let limit = self.limits.limit(r.limit).map_err(status)?;
        let (line, waiting) = counted::waiters(&self.node, &job, limit)
            .await
            .map_err(status)?;
        let answer = proto::ListWaitersResponse {
            waiters: line
                .iter()
                .map(|w| {
                    let (principal, holder) = auth::unbind(w.holder.as_str());
                    proto::Waiter {
                        holder: holder.to_owned(),
                        principal: principal.unwrap_or_default().to_owned(),
                        preferred: w.preferred,
                    }
                })
                .collect(),
            waiting: u32::try_from(waiting).unwrap_or(u32::MAX),
        };
        Ok(Response::new(pacing.listed(answer).await))
    }

    async fn delete_job(
        &self,
        req: Request<proto::DeleteJobRequest>,
    ) -> Result<Response<proto::DeleteJobResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let job = convert::job_arg(&self.limits, &caller, Action::Admin, &req.get_ref().job)
            .map_err(status)?;
        let deleted = self.node.delete_job(&job).await.map_err(status)?;
        Ok(Response::new(proto::DeleteJobResponse { deleted }))
    }

    async fn list_leases(
        &self,
        req: Request<proto::ListLeasesRequest>,
    ) -> Result<Response<proto::ListLeasesResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let pacing = Pacing::of(&req);
        let r = req.into_inner();
        self.limits.job_prefix(&r.prefix).map_err(status)?;
        let limit = self.limits.page_size(r.page_size).map_err(status)?;
        if !caller.reads_something() {
            // A listing is reading: a principal with no `read` grant
            // anywhere is refused it (PERMISSION_DENIED, action read).
            caller.authorize(Action::Read, &r.prefix).map_err(status)?;
        }
        let after = page::leases_after(&r.prefix, &r.page_token).map_err(status)?;
        // Only the ranges the caller may read are scanned, so the page
        // token names a job it may read.
        let mut views = Vec::new();
        for range in caller.read_ranges(&r.prefix) {
            // A resume point before the range is its start: a listing
            // resumes within the range, or after it.
            let after = after.as_deref().filter(|a| *a >= range.as_str());
            let (node, after) = (self.node.clone(), after.map(str::to_owned));
            views.extend(
                bulk::run(async move { node.leases(&range, after.as_deref(), limit).await })
                    .await
                    .map_err(status)?,
            );
        }
        views.sort_by(|a, b| a.job.as_str().cmp(b.job.as_str()));
        views.truncate(limit);
        let next_page_token = match views.last() {
            Some(v) if views.len() == limit => page::leases_token(&r.prefix, v.job.as_str()),
            _ => String::new(),
        };
        let answer = proto::ListLeasesResponse {
            leases: views
                .iter()
                .filter(|v| caller.may_read(v.job.as_str()))
                .map(|v| lease(v, &self.proofs))
                .collect(),
            next_page_token,
        };
        Ok(Response::new(pacing.listed(answer).await))
    }

    async fn get_history(
        &self,
        req: Request<proto::GetHistoryRequest>,
    ) -> Result<Response<proto::GetHistoryResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let pacing = Pacing::of(&req);
        let r = req.into_inner();
        let job = convert::job_arg(&self.limits, &caller, Action::Read, &r.job).map_err(status)?;
        let limit = self.limits.page_size(r.page_size).map_err(status)?;
        let before = page::history_before(job.as_str(), &r.page_token).map_err(status)?;
        let node = self.node.clone();
        let (job, tenures) = bulk::run(async move {
            node.history(&job, before.map(crate::lease::Token), limit)
                .await
                .map(|t| (job, t))
        })
        .await
        .map_err(status)?;
        let next_page_token = match tenures.last() {
            Some(t) if tenures.len() == limit && t.token.0 > 1 => {
                page::history_token(job.as_str(), t.token.0)
            }
            _ => String::new(),
        };
        let chaos = match r.page_token.is_empty() {
            true => self.chaos.events(job.as_str()),
            false => Vec::new(),
        };
        let answer = proto::GetHistoryResponse {
            tenures: tenures.iter().map(convert::tenure).collect(),
            next_page_token,
            chaos: chaos.iter().map(convert::chaos_event).collect(),
        };
        Ok(layers::queued(pacing.listed(answer).await))
    }

    type WatchLeaseStream = EventStream;

    async fn watch_lease(
        &self,
        req: Request<proto::WatchLeaseRequest>,
    ) -> Result<Response<Self::WatchLeaseStream>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let job = convert::job_arg(&self.limits, &caller, Action::Read, &req.get_ref().job)
            .map_err(status)?;
        let place = self.quotas.watcher(&caller).map_err(status)?;
        let events = self.node.watch(job.clone());
        let stall = self.quotas.watch_stall_timeout;
        let metrics = self.quotas.metrics.clone();
        Ok(Response::new(Box::pin(ReceiverStream::new(relay(
            events,
            Watcher { place, caller, job },
            stall,
            metrics,
            self.proofs.clone(),
        )))))
    }

    async fn get_signing_keys(
        &self,
        _req: Request<proto::GetSigningKeysRequest>,
    ) -> Result<Response<proto::GetSigningKeysResponse>, Status> {
        Ok(Response::new(signing_keys(&self.proofs)))
    }

    type KeepAliveStream = RenewalStream;

    async fn keep_alive(
        &self,
        req: Request<Streaming<proto::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let mut caller = Caller::of(&req).map_err(status)?;
        let binds = req
            .extensions()
            .get::<Peer>()
            .map(|p| (self.bindings.clone(), p.binds.clone()));
        let mut inbound = req.into_inner();
        let node = self.node.clone();
        let limits = self.limits.clone();
        let chaos = self.chaos.clone();
        let (tx, rx) = mpsc::channel(16);
        // One task per stream answers its requests in order; each request
        // takes the node's lock once for all its renewals. In etcd mode
        // the stream's renewals share etcd leases from one message to the
        // next (`groups`).
        tokio::spawn(async move {
            let groups = node.renew_groups();
            loop {
                let msg = tokio::select! {
                    m = inbound.message() => m,
                    _ = node.closing() => {
                        let _ = tx.send(Err(status(Error::ShuttingDown))).await;
                        return;
                    }
                    _ = tx.closed() => return,
                };
                let msg = match msg {
                    Ok(Some(m)) => m,
                    // The client closed its side.
                    Ok(None) => return,
                    // A message too large or that does not decode (or a
                    // broken stream): every message before it is answered;
                    // end with why, and read nothing more.
                    Err(status) => {
                        let _ = tx.send(Err(wire::request_error(status))).await;
                        return;
                    }
                };
                // Each message under the policy in force now: after a
                // reload that took the grant, the stream ends.
                let reply = match caller.current() {
                    Ok(c) => {
                        caller = c;
                        let b = binds.as_ref();
                        keep_alive_batch(&node, &limits, &caller, msg, b, &chaos, &groups).await
                    }
                    Err(e) => Err(e),
                }
                .map_err(status);
                let end = reply.is_err();
                if tx.send(reply).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Answers one `KeepAliveRequest`: validates each entry on its own, renews
/// the valid ones in one node decision, and puts the results back in the
/// request's order.
///
/// With a policy, a message with an entry for a job the caller may not
/// `lease` is refused as a whole (PERMISSION_DENIED, nothing renewed), and
/// so is one that tried to renew a lease held by another principal (that
/// lease untouched: the rules refused it, as the holders differ).
/// Each lease renewed is bound to the stream's connection
/// ([`super::bound`]) when the message asks for it, and a binding of it
/// that waits unattached is bound there anyway.
async fn keep_alive_batch(
    node: &Backend,
    l: &Limits,
    caller: &Caller,
    req: proto::KeepAliveRequest,
    bind: Option<&(Arc<Bindings>, Arc<ConnBinds>)>,
    chaos: &ChaosState,
    groups: &RenewGroups,
) -> Result<proto::KeepAliveResponse> {
    use proto::keep_alive_result::Outcome;
    let req_bind = req.bind_to_stream;
    if req.renewals.len() > MAX_KEEP_ALIVE_RENEWALS {
        return Err(Error::invalid(
            "renewals",
            format!(
                "{} renewals in one message, the limit is {MAX_KEEP_ALIVE_RENEWALS}: \
                 split them across messages",
                req.renewals.len()
            ),
        ));
    }
    if caller.is_policed() {
        for r in &req.renewals {
            if let Ok(job) = l.job(&r.job) {
                caller.authorize(Action::Lease, job.as_str())?;
            }
        }
        // An entry that takes another principal's lease with its holder
        // string refuses the whole message before any of it is applied
        // (the rules refuse that entry in the decision too, but only
        // after the entries before it were renewed).
        for r in &req.renewals {
            let Ok(job) = l.job(&r.job) else { continue };
            let Some(stored) = node.holder_hint(&job) else {
                continue;
            };
            if caller.held_by_another(&stored) && auth::unbind(&stored).1 == r.holder {
                let lost = Error::LeaseLost {
                    job: job.to_string(),
                    current_holder: Some(stored),
                    current: crate::lease::Token(0),
                };
                return Err(caller.refine(Action::Lease, lost));
            }
        }
    }
    let mut results = Vec::with_capacity(req.renewals.len());
    let mut batch = Vec::with_capacity(req.renewals.len());
    // For each valid entry, its index in `results`.
    let mut slots = Vec::with_capacity(req.renewals.len());
    for r in req.renewals {
        let parsed = (|| {
            Ok::<_, Error>(Renewal {
                job: l.job(&r.job)?,
                holder: caller.bind(l.holder(&r.holder)?),
                token: l.token(r.token)?,
                ttl: node.check_ttl(l.ttl(duration("ttl", r.ttl)?)?)?,
            })
        })();
        match parsed {
            Ok(renewal) if chaos.paused(renewal.job.as_str(), &renewal.holder) => {
                results.push(proto::KeepAliveResult {
                    job: r.job,
                    outcome: Outcome::LeaseLost as i32,
                    message: paused_renewal(&renewal.job, renewal.token).to_string(),
                    ..Default::default()
                });
            }
            Ok(renewal) => {
                slots.push(results.len());
                batch.push(renewal);
                results.push(proto::KeepAliveResult {
                    job: r.job,
                    ..Default::default()
                });
            }
            Err(e) => {
                let field = match &e {
                    Error::InvalidArgument { field, .. } => field.to_string(),
                    _ => String::new(),
                };
                results.push(proto::KeepAliveResult {
                    job: r.job,
                    outcome: Outcome::InvalidArgument as i32,
                    lease: None,
                    field,
                    message: e.to_string(),
                    successor_waiting: false,
                });
            }
        }
    }
    if let Some(d) = chaos.longest_delay(batch.iter().map(|r| r.job.as_str())) {
        tokio::time::sleep(d).await;
    }
    let outcomes = node.renew_many_in(&batch, groups).await?;
    for ((slot, outcome), renewal) in slots.into_iter().zip(outcomes).zip(&batch) {
        let res = &mut results[slot];
        match outcome {
            Ok(renewed) => {
                match bind {
                    Some((bindings, conn)) if req_bind => {
                        bindings.bind(conn, &renewal.job, &renewal.holder, renewal.token)
                    }
                    Some((bindings, conn)) => {
                        bindings.renewed(conn, &renewal.job, &renewal.holder, renewal.token)
                    }
                    None => {}
                }
                res.outcome = Outcome::Renewed as i32;
                // KeepAlive's results leave the proof out: a fleet's renewals
                // stay small (the Acquire's answer and GetLease carry it).
                res.lease = Some(lease(&renewed.lease, &Proofs::none()));
                res.successor_waiting = renewed.successor_waiting;
            }
            Err((e, view)) => {
                let e = match caller.refine(Action::Lease, e) {
                    e @ Error::PermissionDenied { .. } => return Err(e),
                    e => e,
                };
                res.outcome = match e {
                    Error::UnknownToken { .. } => Outcome::UnknownToken,
                    _ => Outcome::LeaseLost,
                } as i32;
                res.lease = Some(convert::lease_for(caller, &view, &Proofs::none()));
                res.message = match e {
                    // Not the job's newest token, to a caller who may not
                    // see it.
                    Error::UnknownToken { job, token, .. } if !convert::may_see(caller, &view) => {
                        format!("token {token} was never issued for job {job:?}")
                    }
                    e => e.to_string(),
                };
            }
        }
    }
    Ok(proto::KeepAliveResponse {
        id: req.id,
        results,
    })
}
