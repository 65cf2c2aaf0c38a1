//! The chaos API (`proto/leasehold/v1/chaos.proto`): users' own tests make
//! a worker lose its lease, stall, or be fenced, on purpose, without
//! killing a server.
//!
//! Off unless `serve --enable-chaos`: the `Chaos` service is then not
//! served at all (UNIMPLEMENTED). On a listener that is not loopback, a
//! call needs a policy that grants the action `chaos` on the job.
//!
//! Two kinds of action:
//! - **Once, through the backend**, the same on both: `expire` ends the
//!   live grant now (history `END_CHAOS`; waiters served at once), and
//!   `transfer` hands the lease to the first waiter (`TransferLease` on the
//!   holder's behalf).
//! - **In force until cleared or over**, kept here, in front of either
//!   backend, in memory (each etcd frontend its own; a restart clears
//!   them): `pause` (the holder's renewals are refused as if they came too
//!   late, so its grant runs out at its deadline and goes to the waiters;
//!   its Acquires on the job are held until the pause ends), `delay` (every
//!   answer about the job waits), `fence` (the next N fenced writes are
//!   refused as FENCED).
//!
//! Each action is logged at WARN, counted on /metrics
//! (`leasehold_chaos_actions_total{action}`), and what is in force is on
//! the status page. A server without chaos pays one relaxed atomic load
//! per call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use crate::backend::Backend;
use crate::error::{Error, FenceCause, Result};
use crate::lease::{HolderId, JobName, LeaseState, LeaseView, Limits, TenureEnd, Token};
use crate::metrics::RpcMetrics;
use crate::proofs::Proofs;
use crate::proto;
use crate::server::auth::{Action, Caller};
use crate::server::convert;
use crate::server::grpc_status::status;

/// The longest pause.
pub const MAX_PAUSE: Duration = Duration::from_secs(3600);
/// The longest delay.
pub const MAX_DELAY: Duration = Duration::from_secs(60);
/// The most writes one `fence` fails.
pub const MAX_FENCED_WRITES: u32 = 1_000_000;

/// What is in force on one job.
#[derive(Debug, Default, Clone)]
struct InForce {
    /// The holder whose renewals are refused, and until when.
    paused: Option<(HolderId, Instant)>,
    /// Every answer about the job waits this long.
    delay: Option<Duration>,
    /// Fenced writes still to fail.
    fence: u32,
}

impl InForce {
    fn is_empty(&self, now: Instant) -> bool {
        self.paused.as_ref().is_none_or(|(_, until)| *until <= now)
            && self.delay.is_none()
            && self.fence == 0
    }

    fn describe(&self, now: Instant) -> String {
        let mut parts = Vec::new();
        if let Some((h, until)) = &self.paused {
            if *until > now {
                let (_, holder) = crate::server::auth::unbind(h.as_str());
                parts.push(format!("{holder} paused for {:.1?}", *until - now));
            }
        }
        if let Some(d) = self.delay {
            parts.push(format!("answers delayed by {d:?}"));
        }
        if self.fence > 0 {
            parts.push(format!("{} writes to fence", self.fence));
        }
        parts.join(", ")
    }
}

/// The chaos actions kept per job for its history.
pub const EVENTS_PER_JOB: usize = 32;

/// The jobs whose chaos actions are kept; past it, the job with the oldest
/// newest action is forgotten.
const EVENT_JOBS: usize = 4096;

/// One chaos action, for the job's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The action.
    pub action: &'static str,
    /// What it did.
    pub detail: String,
}

/// The chaos in force, shared by the handlers, and the actions taken.
#[derive(Debug, Default)]
pub struct ChaosState {
    /// Whether any job has chaos in force: the handlers' fast path.
    any: AtomicBool,
    jobs: Mutex<HashMap<String, InForce>>,
    /// Per job, its newest actions, oldest first.
    events: Mutex<HashMap<String, std::collections::VecDeque<Event>>>,
}

impl ChaosState {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, InForce>) -> T) -> T {
        let mut jobs = self.jobs.lock().expect("chaos lock");
        let t = f(&mut jobs);
        let now = Instant::now();
        jobs.retain(|_, c| !c.is_empty(now));
        self.any.store(!jobs.is_empty(), Ordering::Relaxed);
        t
    }

    /// Records an action on `job` for its history.
    pub fn record(&self, job: &str, action: &'static str, detail: String) {
        let mut events = self.events.lock().expect("chaos events lock");
        if !events.contains_key(job) && events.len() >= EVENT_JOBS {
            let oldest = events
                .iter()
                .min_by_key(|(_, e)| e.back().map_or(0, |e| e.at_unix_ms))
                .map(|(j, _)| j.clone());
            if let Some(j) = oldest {
                events.remove(&j);
            }
        }
        let list = events.entry(job.to_owned()).or_default();
        if list.len() == EVENTS_PER_JOB {
            list.pop_front();
        }
        list.push_back(Event {
            at_unix_ms: crate::clock::wall_unix_ms(),
            action,
            detail,
        });
    }

    /// The actions taken on `job`, newest first.
    pub fn events(&self, job: &str) -> Vec<Event> {
        let events = self.events.lock().expect("chaos events lock");
        events
            .get(job)
            .map(|l| l.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether any job has chaos in force.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Whether `holder`'s renewals of `job` are paused.
    pub fn paused(&self, job: &str, holder: &HolderId) -> bool {
        self.paused_until(job, holder).is_some()
    }

    /// Until when `holder` is paused on `job`, if it is.
    pub fn paused_until(&self, job: &str, holder: &HolderId) -> Option<Instant> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let now = Instant::now();
        let jobs = self.jobs.lock().expect("chaos lock");
        match jobs.get(job).and_then(|c| c.paused.as_ref()) {
            Some((h, until)) if h == holder && *until > now => Some(*until),
            _ => None,
        }
    }

    /// Waits out the delay in force on `job`, if any.
    pub async fn delay(&self, job: &str) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let d = self
            .jobs
            .lock()
            .expect("chaos lock")
            .get(job)
            .and_then(|c| c.delay);
        if let Some(d) = d {
            tokio::time::sleep(d).await;
        }
    }

    /// The longest delay in force on any of `jobs`.
    pub fn longest_delay<'a>(&self, jobs: impl Iterator<Item = &'a str>) -> Option<Duration> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let map = self.jobs.lock().expect("chaos lock");
        jobs.filter_map(|j| map.get(j).and_then(|c| c.delay)).max()
    }

    /// Takes one of the writes to fence on `job`: the write's refusal, if
    /// it is to fail.
    pub fn fence_write(&self, job: &str, token: Token) -> Option<Error> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let fenced = self.with(|jobs| match jobs.get_mut(job) {
            Some(c) if c.fence > 0 => {
                c.fence -= 1;
                true
            }
            _ => false,
        });
        fenced.then(|| Error::Fenced {
            job: job.to_owned(),
            token,
            current: token,
            cause: FenceCause::NotLive,
        })
    }

    /// What is in force on `job`, for people; empty when nothing is.
    pub fn in_force(&self, job: &str) -> String {
        if !self.any.load(Ordering::Relaxed) {
            return String::new();
        }
        let now = Instant::now();
        let jobs = self.jobs.lock().expect("chaos lock");
        jobs.get(job).map(|c| c.describe(now)).unwrap_or_default()
    }
}

/// The `Chaos` service.
pub struct ChaosService {
    node: Backend,
    limits: Limits,
    state: Arc<ChaosState>,
    metrics: Arc<RpcMetrics>,
    proofs: Arc<Proofs>,
    /// The gRPC listener is not loopback: a call needs a policy's grant.
    remote: bool,
}

impl ChaosService {
    /// Chaos on `node`, kept in `state`.
    pub fn new(
        node: Backend,
        limits: Limits,
        state: Arc<ChaosState>,
        metrics: Arc<RpcMetrics>,
        proofs: Arc<Proofs>,
        remote: bool,
    ) -> Self {
        ChaosService {
            node,
            limits,
            state,
            metrics,
            proofs,
            remote,
        }
    }

    /// The job, if the caller may cause chaos on it.
    fn job<T>(&self, req: &Request<T>, job: &str) -> Result<JobName> {
        let job = self.limits.job(job)?;
        self.permit(req, job.as_str())?;
        Ok(job)
    }

    /// Whether the caller may cause chaos on `job` ("" for every job): on a
    /// listener that is not loopback only by a policy's grant.
    fn permit<T>(&self, req: &Request<T>, job: &str) -> Result<()> {
        let caller = Caller::of(req)?;
        if self.remote && !caller.is_policed() {
            return Err(Error::PermissionDenied {
                action: Action::Chaos.name(),
                job: job.to_owned(),
                why: "chaos on a listener that is not loopback needs a policy that grants the \
                      action chaos (--policy)",
            });
        }
        caller.authorize(Action::Chaos, job)
    }

    fn done(&self, action: &'static str, job: &JobName, what: String) {
        self.metrics.chaos(action);
        tracing::warn!(job = %job, action, "chaos: {what}");
        self.state.record(job.as_str(), action, what);
    }

    async fn answer(&self, job: &JobName) -> Result<proto::ChaosResponse> {
        let view = self.node.lease(job).await?;
        Ok(proto::ChaosResponse {
            lease: Some(convert::lease(&view, &self.proofs)),
            in_force: self.state.in_force(job.as_str()),
        })
    }
}

/// The live holder and token of `view`.
fn held(view: &LeaseView) -> Option<(HolderId, Token)> {
    match &view.state {
        LeaseState::Held { holder, .. } => Some((holder.clone(), view.token)),
        LeaseState::Free(_) => None,
    }
}

fn positive(
    field: &'static str,
    d: Option<prost_types::Duration>,
    max: Duration,
) -> Result<Duration> {
    let d = convert::duration(field, d)?.unwrap_or_default();
    if d.is_zero() || d > max {
        return Err(Error::invalid(
            field,
            format!("{d:?} is out of range: above 0, at most {max:?}"),
        ));
    }
    Ok(d)
}

#[tonic::async_trait]
impl proto::chaos_server::Chaos for ChaosService {
    async fn expire(
        &self,
        req: Request<proto::ChaosJobRequest>,
    ) -> std::result::Result<Response<proto::ChaosResponse>, Status> {
        let run = async {
            let job = self.job(&req, &req.get_ref().job)?;
            let view = self.node.lease(&job).await?;
            if let Some((holder, token)) = held(&view) {
                self.node
                    .end_lease(&job, &holder, token, TenureEnd::Chaos)
                    .await?;
                self.done("expire", &job, format!("token {token} expired on purpose"));
            }
            self.answer(&job).await
        };
        run.await.map(Response::new).map_err(status)
    }

    async fn pause(
        &self,
        req: Request<proto::ChaosPauseRequest>,
    ) -> std::result::Result<Response<proto::ChaosResponse>, Status> {
        let run = async {
            let r = req.get_ref();
            let job = self.job(&req, &r.job)?;
            let d = positive("duration", r.duration, MAX_PAUSE)?;
            let view = self.node.lease(&job).await?;
            if let Some((holder, token)) = held(&view) {
                let until = Instant::now() + d;
                self.state.with(|jobs| {
                    jobs.entry(job.to_string()).or_default().paused = Some((holder.clone(), until))
                });
                self.done(
                    "pause",
                    &job,
                    format!("holder {holder} (token {token}) paused for {d:?}"),
                );
            }
            self.answer(&job).await
        };
        run.await.map(Response::new).map_err(status)
    }

    async fn delay(
        &self,
        req: Request<proto::ChaosDelayRequest>,
    ) -> std::result::Result<Response<proto::ChaosResponse>, Status> {
        let run = async {
            let r = req.get_ref();
            let job = self.job(&req, &r.job)?;
            let d = positive("by", r.by, MAX_DELAY)?;
            self.state
                .with(|jobs| jobs.entry(job.to_string()).or_default().delay = Some(d));
            self.done("delay", &job, format!("every answer delayed by {d:?}"));
            self.answer(&job).await
        };
        run.await.map(Response::new).map_err(status)
    }

    async fn fence(
        &self,
        req: Request<proto::ChaosFenceRequest>,
    ) -> std::result::Result<Response<proto::ChaosResponse>, Status> {
        let run = async {
            let r = req.get_ref();
            let job = self.job(&req, &r.job)?;
            if r.writes == 0 || r.writes > MAX_FENCED_WRITES {
                return Err(Error::invalid(
                    "writes",
                    format!("{} is out of range: 1 to {MAX_FENCED_WRITES}", r.writes),
                ));
            }
            let n = r.writes;
            self.state
                .with(|jobs| jobs.entry(job.to_string()).or_default().fence = n);
            self.done("fence", &job, format!("the next {n} fenced writes fail"));
            self.answer(&job).await
        };
        run.await.map(Response::new).map_err(status)
    }

    async fn transfer(
        &self,
        req: Request<proto::ChaosJobRequest>,
    ) -> std::result::Result<Response<proto::ChaosResponse>, Status> {
        let run = async {
            let job = self.job(&req, &req.get_ref().job)?;
            let view = self.node.lease(&job).await?;
            let Some((holder, token)) = held(&view) else {
                return Err(Error::NoSuccessor {
                    job: job.to_string(),
                    to: None,
                });
            };
            let next = self.node.transfer(&job, &holder, token, None, None).await?;
            self.done(
                "transfer",
                &job,
                format!(
                    "token {token} handed to the first waiter (token {})",
                    next.token
                ),
            );
            self.answer(&job).await
        };
        run.await.map(Response::new).map_err(status)
    }

    async fn clear(
        &self,
        req: Request<proto::ChaosClearRequest>,
    ) -> std::result::Result<Response<proto::ChaosResponse>, Status> {
        let run = async {
            let r = req.get_ref();
            if r.job.is_empty() {
                // Every job: the grant must cover every job.
                self.permit(&req, "")?;
                let cleared: Vec<String> = self
                    .state
                    .with(|jobs| jobs.drain().map(|(j, _)| j).collect());
                for job in &cleared {
                    self.state
                        .record(job, "clear", "cleared (on every job)".to_owned());
                }
                self.metrics.chaos("clear");
                tracing::warn!(jobs = cleared.len(), "chaos: cleared on every job");
                return Ok(proto::ChaosResponse::default());
            }
            let job = self.job(&req, &r.job)?;
            self.state.with(|jobs| jobs.remove(job.as_str()));
            self.done("clear", &job, "cleared".into());
            self.answer(&job).await
        };
        run.await.map(Response::new).map_err(status)
    }
}
