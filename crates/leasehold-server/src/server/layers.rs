//! Tower layers in front of every handler.
//!
//! Cross-cutting concerns go here, once, instead of into each handler:
//! the RPC metrics and admission (the caps on calls in flight, with a
//! budget of their own for renewals). The caller's identity
//! is a layer too, with the policy it serves: [`super::auth::AuthLayer`]
//! (see ARCHITECTURE.md, "TLS and access rules").

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tonic::body::Body;
use tonic::codegen::http;
use tower::{Layer, Service};

use super::conn::{ConnLoad, Peer};
use super::status::to_status;
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
            let (parts, body) = resp.into_parts();
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
}

impl<B> Ending<B> {
    fn ended(&mut self, code: usize) {
        if let Some((metrics, method)) = self.end.take() {
            metrics.ended(method, code);
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
const CALLS: usize = 0;
const RENEWALS: usize = 1;

/// The budget a call of `path` draws on.
fn budget(path: &str) -> usize {
    match path {
        "/leasehold.v1.Leases/Renew" | "/leasehold.v1.Leases/KeepAlive" => RENEWALS,
        _ => CALLS,
    }
}

/// Admission: caps the calls in flight, across all connections and per
/// connection, with renewals on a budget of their own.
///
/// - Each budget (renewals; everything else) admits at most `max`
///   (`--max-in-flight`) calls at once across all connections. A call
///   counts until its response starts: a waiting `Acquire` while it waits,
///   a stream only until it is opened.
/// - One connection may have at most `per_connection`
///   (`--max-in-flight-per-connection`) calls open in each budget, a
///   stream for as long as it is open, so that no one connection takes
///   the whole budget from the others. The connection is the unit of
///   fairness even with a policy: admission runs before the credentials
///   are read, so a refused call costs no hashing.
///
/// A call over a cap is answered at once with RESOURCE_EXHAUSTED, reason
/// OVERLOADED, naming the limit's flag (and counted in
/// `leasehold_overloaded_total{limit}`), instead of queueing without
/// bound. So a renewal is refused only when its own connection has
/// `per_connection` renewals open, or renewals alone fill `max`.
#[derive(Clone)]
pub struct InflightLimitLayer {
    shared: Arc<Admission>,
}

struct Admission {
    inflight: [AtomicUsize; 2],
    max: usize,
    per_connection: usize,
    metrics: Arc<RpcMetrics>,
}

impl InflightLimitLayer {
    /// A cap of `max` calls in flight per budget, `per_connection` of them
    /// on one connection, refusals counted in `metrics`.
    pub fn new(max: usize, per_connection: usize, metrics: Arc<RpcMetrics>) -> Self {
        InflightLimitLayer {
            shared: Arc::new(Admission {
                inflight: Default::default(),
                max,
                per_connection,
                metrics,
            }),
        }
    }
}

impl<S> Layer<S> for InflightLimitLayer {
    type Service = InflightLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        InflightLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`InflightLimitLayer`].
#[derive(Clone)]
pub struct InflightLimit<S> {
    inner: S,
    shared: Arc<Admission>,
}

/// Gives a place in the global budget back when the response starts, or
/// the call ends without one.
struct Slot(Arc<Admission>, usize);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.inflight[self.1].fetch_sub(1, Ordering::AcqRel);
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

impl Admission {
    /// Admits a call on `budget` from a connection with `load`, or names
    /// the limit it is over.
    fn admit(
        self: &Arc<Self>,
        budget: usize,
        load: Option<&Arc<ConnLoad>>,
    ) -> Result<(Slot, Option<ConnSlot>), Error> {
        let conn = match load {
            Some(load) => {
                if !load.try_open(budget, self.per_connection) {
                    return Err(Error::Overloaded {
                        limit: "--max-in-flight-per-connection",
                        max: self.per_connection,
                    });
                }
                Some(ConnSlot(load.clone(), budget))
            }
            None => None,
        };
        let before = self.inflight[budget].fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self.clone(), budget);
        if before >= self.max {
            return Err(Error::Overloaded {
                limit: "--max-in-flight",
                max: self.max,
            });
        }
        Ok((slot, conn))
    }
}

impl<S, B, R> Service<http::Request<B>> for InflightLimit<S>
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
        let load = req.extensions().get::<Peer>().map(|p| p.load.clone());
        let (slot, conn) = match self.shared.admit(budget(req.uri().path()), load.as_ref()) {
            Ok(admitted) => admitted,
            Err(e) => {
                if let Error::Overloaded { limit, .. } = &e {
                    self.shared.metrics.refused(limit);
                }
                let status = to_status(&e);
                return Box::pin(async move { Ok(status.into_http()) });
            }
        };
        let mut inner = take_ready(&mut self.inner);
        Box::pin(async move {
            let resp = inner.call(req).await;
            drop(slot);
            let resp = resp?;
            let (parts, body) = resp.into_parts();
            Ok(http::Response::from_parts(
                parts,
                Body::new(Held { body, _conn: conn }),
            ))
        })
    }
}

/// A response body that holds its call's place in the connection's budget
/// until it is done or dropped.
struct Held<B> {
    body: B,
    _conn: Option<ConnSlot>,
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
