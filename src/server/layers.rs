//! Tower layers in front of every handler.
//!
//! Cross-cutting concerns go here, once, instead of into each handler:
//! today the RPC metrics and the cap on calls in flight; later the caller's identity from its TLS client
//! certificate, put into the request's extensions for the per-job access
//! rules to read (see ARCHITECTURE.md, "Where TLS and access rules go").

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::http;
use tower::{Layer, Service};

use crate::metrics::RpcMetrics;

/// Records each call's latency and status code in [`RpcMetrics`].
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
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let metrics = self.metrics.clone();
        let path = req.uri().path().to_owned();
        Box::pin(async move {
            let start = crate::clock::now();
            let res = inner.call(req).await;
            let code = match &res {
                // A status in the headers is a trailers-only error reply;
                // otherwise the call has succeeded so far.
                Ok(r) => r
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                Err(_) => 2,
            };
            metrics.record(&path, start.elapsed(), code);
            res
        })
    }
}

/// Caps the calls in flight across all connections. A call over the cap is
/// answered at once with RESOURCE_EXHAUSTED, naming the limit, instead of
/// queueing without bound. A streaming call counts until its response
/// starts; a waiting `Acquire` counts while it waits.
#[derive(Clone)]
pub struct InflightLimitLayer {
    inflight: Arc<AtomicUsize>,
    max: usize,
}

impl InflightLimitLayer {
    /// A cap of `max` calls in flight.
    pub fn new(max: usize) -> Self {
        InflightLimitLayer {
            inflight: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }
}

impl<S> Layer<S> for InflightLimitLayer {
    type Service = InflightLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        InflightLimit {
            inner,
            inflight: self.inflight.clone(),
            max: self.max,
        }
    }
}

/// The service made by [`InflightLimitLayer`].
#[derive(Clone)]
pub struct InflightLimit<S> {
    inner: S,
    inflight: Arc<AtomicUsize>,
    max: usize,
}

/// Gives a slot back when the call ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S, B, R> Service<http::Request<B>> for InflightLimit<S>
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

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let before = self.inflight.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self.inflight.clone());
        if before >= self.max {
            let status = tonic::Status::resource_exhausted(format!(
                "overloaded: {} calls in flight, the limit (--max-in-flight) is {}; retry with backoff",
                before, self.max
            ));
            return Box::pin(async move {
                drop(slot);
                Ok(status.into_http())
            });
        }
        let mut inner = take_ready(&mut self.inner);
        Box::pin(async move {
            let _slot = slot;
            inner.call(req).await
        })
    }
}

/// Takes the service that was polled ready, leaving a fresh clone behind
/// for the next call (tower's documented pattern for services that are
/// called from a future).
fn take_ready<S: Clone>(s: &mut S) -> S {
    let clone = s.clone();
    std::mem::replace(s, clone)
}
