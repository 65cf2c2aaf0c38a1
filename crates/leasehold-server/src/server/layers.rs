//! Tower layers in front of every handler.
//!
//! Cross-cutting concerns go here, once, instead of into each handler:
//! the RPC metrics and admission (the caps on calls in flight per
//! connection, per principal and in all, with budgets of their own for
//! renewals: [`Admission`]). The caller's identity is a layer too, with
//! the policy it serves: [`super::auth::AuthLayer`], between admission's
//! two layers; and so is pacing, last: the [`super::pacing::layer`]
//! hands each call its connection's pacing, so that no handler reads the
//! connection. The layers are composed in [`super::run`].
//!
//! # Admission
//!
//! A call is admitted or refused before anything of its message is read,
//! by the method in its path, the connection it came on (each
//! connection's [`ConnLoad`] in its [`Peer`], see [`super::conn`]) and,
//! with a policy, its principal (the `Caller`'s
//! [`PrincipalLoad`]). In order: the RPC
//! metrics; the connection's share, before the credentials are read (so a
//! flood from one connection costs no hashing); the `AuthLayer`; then the
//! principal's share and the server's budget; then the wire guard
//! ([`super::wire`]); then pacing ([`super::pacing`]), which admits or
//! refuses nothing.
//!
//! - **Two budgets.** Renewals (unary `Renew`, and `KeepAlive` streams)
//!   draw on a budget of their own; every other call (Acquire, waiting or
//!   not, reads, writes, watches, health) on the other. The budget is
//!   chosen from the method alone, in one function ([`budget`]), for every
//!   share. Each admits at most `--max-in-flight` calls at once across
//!   connections, counted until the response starts (a waiting Acquire for
//!   as long as it waits).
//! - **A share per connection**: at most `--max-in-flight-per-connection`
//!   calls open in each budget on one connection, a stream for as long as
//!   it is open; so one connection never holds the whole budget.
//! - **A share per principal**: with a policy, at most its `max_in_flight`
//!   (`[principal.limits]`, else `--max-in-flight`) in each budget, across
//!   all its connections. It is checked before the server's budget: a call
//!   refused for its principal never holds a place there, so principals
//!   whose limits add up to at most `--max-in-flight` never crowd one
//!   another out (health and reflection, open to anyone, count in the
//!   server's budget alone). A principal's counts are kept under its name
//!   across policy reloads; a call is held to the limits of the policy in
//!   force when it arrived.
//! - A refused call gets RESOURCE_EXHAUSTED at once, reason OVERLOADED,
//!   with the limit in its message and in the ErrorInfo (`limit`, `max`;
//!   a principal's limit is named by its field, with `principal`), and
//!   counts in `leasehold_overloaded_total{limit}`. Nothing of it ran.
//! - **Waiters leave the budget.** A waiting `Acquire` holds its place in
//!   the server's budget only until it joins a line (the handler gives it
//!   up, [`Admitted::leave_budget`]); from then on it holds one of
//!   `--max-waiters` instead. Its connection's share and its principal's
//!   still count it. Before this, 10,000 waiters on 11 connections filled
//!   `--max-in-flight` and every other client was refused for as long as
//!   they waited (BENCHMARKS.md, "Isolation").
//! - **A new grant whose reply is dropped undelivered is released**: the
//!   outermost layer ([`Undelivered`]) gives back a grant whose reply was
//!   dropped before its trailers.
//!
//! What admission leaves to the handlers: the quotas on state held by open
//! calls (watchers, waiters per job, [`super::leases`]), the wait the
//! pacing layer's [`Pacing`](super::pacing::Pacing) asks of an Acquire
//! ([`super::leases`]) or a write ([`super::fenced`]) over its
//! connection's rate, and, in the backends, the limits on stored state
//! (`StateLimits`).
//!
//! **A live lease's renewal is never refused for other callers' load**:
//! only when its own connection has `--max-in-flight-per-connection`
//! renewals open, its own principal its `max_in_flight` renewals in
//! flight, or renewals alone fill `--max-in-flight`. Renewals are never
//! paced.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tonic::body::Body;
use tonic::codegen::http;
use tower::{Layer, Service};

use super::auth::{Caller, PrincipalLoad};
use super::conn::{ConnLoad, Peer};
use super::grpc_status::to_status;
use crate::backend::ReleaseIfDropped;
use crate::error::Error;
use crate::metrics::{RpcMethod, RpcMetrics};

/// Records each call's latency (until its response begins) and the status
/// code it ends with in [`RpcMetrics`].
#[derive(Clone)]
pub struct RpcMetricsLayer {
    metrics: Arc<RpcMetrics>,
}

impl RpcMetricsLayer {
    /// A layer recording into `metrics`.
    pub fn new(metrics: Arc<RpcMetrics>) -> Self {
        RpcMetricsLayer { metrics }
    }
}

impl<S> Layer<S> for RpcMetricsLayer {
    type Service = RpcMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcMetricsService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service made by [`RpcMetricsLayer`].
#[derive(Clone)]
pub struct RpcMetricsService<S> {
    inner: S,
    metrics: Arc<RpcMetrics>,
}

impl<S, B, R> Service<http::Request<B>> for RpcMetricsService<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    R: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
    R::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let metrics = self.metrics.clone();
        let method = RpcMetrics::method(req.uri().path());
        Box::pin(async move {
            let start = crate::clock::now();
            let res = inner.call(req).await;
            metrics.answered(method, start.elapsed());
            let resp = match res {
                Ok(resp) => resp,
                Err(e) => {
                    metrics.ended(method, UNKNOWN);
                    return Err(e);
                }
            };
            let (mut parts, body) = resp.into_parts();
            let undelivered = parts.extensions.remove::<Undelivered>();
            let body = match grpc_status(&parts.headers) {
                // A trailers-only reply: the call ended with its headers.
                Some(code) => {
                    metrics.ended(method, code);
                    Body::new(body)
                }
                // The call goes on (a stream may for hours) and ends with
                // the status in its trailers.
                None => Body::new(Ending {
                    body,
                    end: Some((metrics, method)),
                    undelivered,
                }),
            };
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

/// gRPC's UNKNOWN: a call that ended without a status.
const UNKNOWN: usize = 2;
/// gRPC's CANCELLED: a call whose client went away before its end.
const CANCELLED: usize = 1;

/// The gRPC status code in `headers` (or trailers), if there is one.
fn grpc_status(headers: &http::HeaderMap) -> Option<usize> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// A response body that records the status its call ends with: the code
/// in its trailers, or CANCELLED when it is dropped before them (the
/// client reset the stream or went away). So a stream that ends with an
/// error counts with that error, not as the OK its headers implied.
struct Ending<B> {
    body: B,
    end: Option<(Arc<RpcMetrics>, RpcMethod)>,
    /// What to undo if the reply is never sent whole.
    undelivered: Option<Undelivered>,
}

impl<B> Ending<B> {
    fn ended(&mut self, code: usize) {
        if let Some((metrics, method)) = self.end.take() {
            metrics.ended(method, code);
        }
    }
}

/// A change the client has not been told of yet, to undo if its reply is
/// never delivered: a new grant, released at once when the call's reply
/// is dropped before its trailers were sent (the client cancelled, or went
/// away), so that the job does not stay held for a TTL by a holder that
/// never learned its token. A handler puts it in its response's
/// extensions; the outermost layer ([`RpcMetricsLayer`]) keeps it with the
/// response body.
#[derive(Clone)]
pub struct Undelivered(Arc<std::sync::Mutex<Option<ReleaseIfDropped>>>);

impl Undelivered {
    /// Undoes with `guard` unless the reply is delivered.
    pub fn new(guard: ReleaseIfDropped) -> Undelivered {
        Undelivered(Arc::new(std::sync::Mutex::new(Some(guard))))
    }

    /// The reply went out whole: nothing to undo.
    fn delivered(self) {
        if let Some(g) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
            g.disarm();
        }
    }
}

impl<B> http_body::Body for Ending<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        let frame = match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(frame) => frame,
        };
        match &frame {
            Some(Ok(f)) => {
                if let Some(trailers) = f.trailers_ref() {
                    self.ended(grpc_status(trailers).unwrap_or(UNKNOWN));
                    if let Some(u) = self.undelivered.take() {
                        u.delivered();
                    }
                }
            }
            Some(Err(_)) | None => self.ended(UNKNOWN),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl<B> Drop for Ending<B> {
    fn drop(&mut self) {
        self.ended(CANCELLED);
    }
}

/// The two budgets of calls in flight. A renewal of a lease (unary
/// `Renew`, and a `KeepAlive` stream) draws on a budget of its own, so no
/// amount of other calls (waiting Acquires, watches, reads) can crowd it
/// out.
pub const CALLS: usize = 0;
/// The renewals' budget (see [`CALLS`]).
pub const RENEWALS: usize = 1;

/// The budget a call of `path` draws on.
pub fn budget(path: &str) -> usize {
    match path {
        "/leasehold.v1.Leases/Renew" | "/leasehold.v1.Leases/KeepAlive" => RENEWALS,
        _ => CALLS,
    }
}

/// Admission: caps the calls in flight, per connection, per principal and
/// across all calls, with renewals on budgets of their own. Two layers,
/// on either side of [`super::auth::AuthLayer`]:
///
/// - [`Admission::connections`], before the credentials are read: one
///   connection may have at most `per_connection`
///   (`--max-in-flight-per-connection`) calls open in each budget, a
///   stream for as long as it is open, so that no one connection takes
///   the whole budget from the others; a refused call costs no hashing.
/// - [`Admission::budgets`], once the caller is known: with a policy, a
///   principal may have at most its `max_in_flight` (its
///   `[principal.limits]`, else `max`) calls in flight in each budget
///   across all its connections; then each budget (renewals; everything
///   else) admits at most `max` (`--max-in-flight`) calls at once
///   altogether. Both count a call until its response starts: a waiting
///   `Acquire` while it waits, a stream only until it is opened. The
///   principal's share is checked first, so that a call refused there
///   never holds a place in the server's budget: a principal's flood
///   costs the others nothing beyond its own `max_in_flight`.
///
/// A call over a cap is answered at once with RESOURCE_EXHAUSTED, reason
/// OVERLOADED, naming the limit (the flag, or the principal and its
/// field) and counted in `leasehold_overloaded_total{limit}`, instead of
/// queueing without bound. So a renewal is refused only when its own
/// connection has `per_connection` renewals open, its own principal has
/// its `max_in_flight` renewals in flight, or renewals alone fill `max`.
#[derive(Clone)]
pub struct Admission {
    shared: Arc<Budgets>,
}

struct Budgets {
    inflight: [AtomicUsize; 2],
    max: usize,
    per_connection: usize,
    metrics: Arc<RpcMetrics>,
    queue: Arc<ResponseQueue>,
}

impl Admission {
    /// Caps of `max` calls in flight per budget, `per_connection` of them
    /// on one connection, refusals counted in `metrics`.
    pub fn new(
        max: usize,
        per_connection: usize,
        queue: Arc<ResponseQueue>,
        metrics: Arc<RpcMetrics>,
    ) -> Self {
        Admission {
            shared: Arc::new(Budgets {
                inflight: Default::default(),
                max,
                per_connection,
                metrics,
                queue,
            }),
        }
    }

    /// The layer of each connection's share: in front of the credentials.
    pub fn connections(&self) -> ConnShareLayer {
        ConnShareLayer {
            shared: self.shared.clone(),
        }
    }

    /// The layer of each principal's share and the server's budgets:
    /// behind the credentials, which it reads from the request's
    /// [`Caller`].
    pub fn budgets(&self) -> BudgetLayer {
        BudgetLayer {
            shared: self.shared.clone(),
        }
    }
}

/// Takes one of `max` places counted by `n`, or says no (and takes none).
pub fn try_take(n: &AtomicUsize, max: usize) -> bool {
    let before = n.fetch_add(1, Ordering::AcqRel);
    if before >= max {
        n.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    true
}

/// The layer made by [`Admission::connections`].
#[derive(Clone)]
pub struct ConnShareLayer {
    shared: Arc<Budgets>,
}

impl<S> Layer<S> for ConnShareLayer {
    type Service = ConnShare<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ConnShare {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`ConnShareLayer`].
#[derive(Clone)]
pub struct ConnShare<S> {
    inner: S,
    shared: Arc<Budgets>,
}

/// The layer made by [`Admission::budgets`].
#[derive(Clone)]
pub struct BudgetLayer {
    shared: Arc<Budgets>,
}

impl<S> Layer<S> for BudgetLayer {
    type Service = Budget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Budget {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`BudgetLayer`].
#[derive(Clone)]
pub struct Budget<S> {
    inner: S,
    shared: Arc<Budgets>,
}

/// Gives a place in the server's budget back when the response starts,
/// or the call ends without one.
struct Slot(Arc<Budgets>, usize);

/// A call's place in the server's budget of calls in flight, in the
/// request's extensions. A waiting `Acquire` gives it up as soon as it
/// joins a line ([`Admitted::leave_budget`]): from then on it holds a place
/// under `--max-waiters` instead, so that waiters, however many
/// connections they come on, never crowd out other calls (reads, writes,
/// Acquires that do not wait). Its connection's and its principal's shares
/// still count it.
#[derive(Clone)]
pub struct Admitted(Arc<std::sync::Mutex<Option<Slot>>>);

impl Admitted {
    /// Gives the call's place in the server's budget back now.
    pub fn leave_budget(&self) {
        drop(self.0.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.inflight[self.1].fetch_sub(1, Ordering::AcqRel);
    }
}

/// Gives a place in the principal's budget back, as [`Slot`] does.
struct PrincipalSlot(Arc<PrincipalLoad>, usize);

impl Drop for PrincipalSlot {
    fn drop(&mut self) {
        self.0.in_flight[self.1].fetch_sub(1, Ordering::AcqRel);
    }
}

/// Gives a place in the connection's budget back when the call ends: the
/// response body is done or dropped.
struct ConnSlot(Arc<ConnLoad>, usize);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.close(self.1);
    }
}

impl Budgets {
    /// Admits a call on `budget` from `caller`'s principal (if the server
    /// has a policy) and into the server's budget, or names the limit it
    /// is over.
    fn admit(
        self: &Arc<Self>,
        budget: usize,
        caller: Option<&Caller>,
    ) -> Result<(Option<PrincipalSlot>, Slot), Error> {
        let mut mine = None;
        if let Some((caller, (limits, load))) = caller.and_then(|c| Some((c, c.share()?))) {
            let max = limits.max_in_flight.unwrap_or(self.max);
            if !try_take(&load.in_flight[budget], max) {
                return Err(caller.over_limit("max_in_flight", max, false));
            }
            mine = Some(PrincipalSlot(load.clone(), budget));
        }
        let before = self.inflight[budget].fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self.clone(), budget);
        if before >= self.max {
            return Err(Error::Overloaded {
                limit: "--max-in-flight",
                max: self.max,
                principal: None,
            });
        }
        Ok((mine, slot))
    }

    /// Counts a refusal, and the status that answers it.
    fn refuse(&self, e: Error) -> tonic::Status {
        if let Error::Overloaded { limit, .. } = &e {
            self.metrics.refused(limit);
        }
        to_status(&e)
    }
}

impl<S, B, R> Service<http::Request<B>> for ConnShare<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    R: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
    R::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let budget = budget(req.uri().path());
        let conn = match req.extensions().get::<Peer>() {
            Some(peer) => {
                if let Some((rate, principal)) = peer.load.refusing().filter(|_| budget != RENEWALS)
                {
                    let refused = self.shared.refuse(Error::Overloaded {
                        limit: if principal {
                            "max_frame_rate"
                        } else {
                            "--max-frame-rate-per-connection"
                        },
                        max: rate as usize,
                        principal: principal.then(|| peer.caller.principal()).flatten(),
                    });
                    return Box::pin(async move { Ok(refused.into_http()) });
                }
                if !peer.load.try_open(budget, self.shared.per_connection) {
                    let refused = self.shared.refuse(Error::Overloaded {
                        limit: "--max-in-flight-per-connection",
                        max: self.shared.per_connection,
                        principal: None,
                    });
                    return Box::pin(async move { Ok(refused.into_http()) });
                }
                Some(ConnSlot(peer.load.clone(), budget))
            }
            None => None,
        };
        let mut inner = take_ready(&mut self.inner);
        let shared = self.shared.clone();
        Box::pin(async move {
            let resp = inner.call(req).await?;
            let (mut parts, body) = resp.into_parts();
            let mut queued = None;
            let principal = parts
                .extensions
                .remove::<PrincipalQueued>()
                .and_then(|p| p.0.lock().unwrap_or_else(|e| e.into_inner()).take());
            if let (Some(Queued(n)), Some(ConnSlot(load, _))) =
                (parts.extensions.remove::<Queued>(), &conn)
            {
                match shared.queue.take(load, n) {
                    Ok(slot) => queued = Some((slot, principal)),
                    Err(e) => return Ok(shared.refuse(e).into_http()),
                }
            }
            Ok(http::Response::from_parts(
                parts,
                Body::new(Held {
                    body,
                    _conn: conn,
                    _queued: queued,
                }),
            ))
        })
    }
}

impl<S, B, R> Service<http::Request<B>> for Budget<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let admitted = self
            .shared
            .admit(budget(req.uri().path()), req.extensions().get::<Caller>());
        let (principal, slot) = match admitted {
            Ok(slots) => slots,
            Err(e) => {
                let refused = self.shared.refuse(e);
                return Box::pin(async move { Ok(refused.into_http()) });
            }
        };
        // Only an Acquire may wait, and give its place up early: every
        // other call (renewals above all) keeps its place in the future.
        if req.uri().path() != "/leasehold.v1.Leases/Acquire" {
            let caller = req.extensions().get::<Caller>().cloned();
            let shared = self.shared.clone();
            let mut inner = take_ready(&mut self.inner);
            return Box::pin(async move {
                let mut resp = inner.call(req).await?;
                drop((principal, slot));
                if let (Some(caller), Some(&Queued(n))) =
                    (caller, resp.extensions().get::<Queued>())
                {
                    // The principal's share of the answers held; the
                    // connection's and the server's are taken outside.
                    match shared.queue.take_for(&caller, n) {
                        Ok(Some(held)) => {
                            resp.extensions_mut().insert(PrincipalQueued(Arc::new(
                                std::sync::Mutex::new(Some(held)),
                            )));
                        }
                        Ok(None) => {}
                        Err(e) => return Ok(shared.refuse(e).into_http()),
                    }
                }
                Ok(resp)
            });
        }
        let admitted = Admitted(Arc::new(std::sync::Mutex::new(Some(slot))));
        req.extensions_mut().insert(admitted.clone());
        let mut inner = take_ready(&mut self.inner);
        Box::pin(async move {
            let resp = inner.call(req).await;
            drop(principal);
            admitted.leave_budget();
            resp
        })
    }
}

/// A response body that holds its call's place in the connection's budget
/// (and the bytes it queues, [`Queued`]) until it is done or dropped.
struct Held<B> {
    body: B,
    _conn: Option<ConnSlot>,
    _queued: Option<(QueuedSlot, Option<PrincipalQueuedSlot>)>,
}

/// The size of a large answer (a `Read`'s value, a page of keys or of
/// history), which a handler puts in its response's extensions
/// ([`queued`]): until the client has taken it, it is memory the server
/// holds for that client. [`ConnShare`] counts it against the connection's
/// share and the server's cap of such bytes (`--max-queued-response-bytes`)
/// and refuses the answer, OVERLOADED, when either is full; the
/// transport closes a connection that takes none of its answers' bytes for
/// `--response-stall-timeout` ([`super::conn`]), which gives them back.
#[derive(Clone, Copy, Debug)]
pub struct Queued(pub usize);

/// `msg` as a response that counts as [`Queued`].
pub fn queued<T: prost::Message>(msg: T) -> tonic::Response<T> {
    let n = msg.encoded_len();
    let mut r = tonic::Response::new(msg);
    r.extensions_mut().insert(Queued(n));
    r
}

/// The server's cap on bytes queued for clients, and what is queued.
#[derive(Debug)]
pub struct ResponseQueue {
    max: usize,
    per_connection: usize,
    used: AtomicUsize,
}

/// The share of [`ResponseQueue`] one connection may hold: a sixteenth,
/// at least 4 MiB (a 64 KiB value sixty-four times over).
pub fn per_connection_queue(max: usize) -> usize {
    (max / 16).max(4 << 20).min(max)
}

impl ResponseQueue {
    /// A cap of `max` bytes.
    pub fn new(max: usize) -> Self {
        ResponseQueue {
            max,
            per_connection: per_connection_queue(max),
            used: AtomicUsize::new(0),
        }
    }

    /// Bytes queued now, all connections together.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Counts `n` bytes against `caller`'s principal, with a policy: its
    /// `max_queued_response_kib`, else a quarter of the server's cap.
    fn take_for(&self, caller: &Caller, n: usize) -> Result<Option<PrincipalQueuedSlot>, Error> {
        let Some((limits, load)) = caller.share() else {
            return Ok(None);
        };
        let (max, field) = match limits.max_queued_response_kib {
            Some(kib) => (kib.saturating_mul(1024), true),
            None => ((self.max / 4).max(self.per_connection), false),
        };
        let before = load.queued.fetch_add(n, Ordering::AcqRel);
        if before + n > max && before > 0 {
            load.queued.fetch_sub(n, Ordering::AcqRel);
            return Err(if field {
                caller.over_limit("max_queued_response_kib", max / 1024, false)
            } else {
                Error::Overloaded {
                    limit: "--max-queued-response-bytes",
                    max,
                    principal: caller.principal().map(str::to_owned),
                }
            });
        }
        Ok(Some(PrincipalQueuedSlot(load.clone(), n)))
    }

    fn take(self: &Arc<Self>, load: &Arc<ConnLoad>, n: usize) -> Result<QueuedSlot, Error> {
        if !load.queue(n, self.per_connection) {
            return Err(Error::Overloaded {
                limit: "--max-queued-response-bytes",
                max: self.per_connection,
                principal: None,
            });
        }
        let before = self.used.fetch_add(n, Ordering::AcqRel);
        if before + n > self.max {
            self.used.fetch_sub(n, Ordering::AcqRel);
            load.unqueue(n);
            return Err(Error::Overloaded {
                limit: "--max-queued-response-bytes",
                max: self.max,
                principal: None,
            });
        }
        Ok(QueuedSlot(self.clone(), load.clone(), n))
    }
}

/// Bytes counted against a principal's `max_queued_response_kib`, put in
/// a response's extensions by [`Budget`] for [`ConnShare`] to keep with its
/// body.
#[derive(Clone)]
struct PrincipalQueued(Arc<std::sync::Mutex<Option<PrincipalQueuedSlot>>>);

/// Bytes counted in a principal's load, given back on drop.
struct PrincipalQueuedSlot(Arc<PrincipalLoad>, usize);

impl Drop for PrincipalQueuedSlot {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(self.1, Ordering::AcqRel);
    }
}

/// Bytes counted in a [`ResponseQueue`] and a connection's share, given
/// back on drop.
struct QueuedSlot(Arc<ResponseQueue>, Arc<ConnLoad>, usize);

impl Drop for QueuedSlot {
    fn drop(&mut self) {
        self.0.used.fetch_sub(self.2, Ordering::AcqRel);
        self.1.unqueue(self.2);
    }
}

impl<B> http_body::Body for Held<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = &frame {
            // Done: the place comes back now, not when hyper drops us.
            self._conn = None;
            self._queued = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Takes the service that was polled ready, leaving a fresh clone behind
/// for the next call (tower's documented pattern for services that are
/// called from a future).
fn take_ready<S: Clone>(s: &mut S) -> S {
    let clone = s.clone();
    std::mem::replace(s, clone)
}
