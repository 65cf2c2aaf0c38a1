//! Tower layers in front of every handler.
//!
//! Cross-cutting concerns go here, once, instead of into each handler:
//! today the RPC metrics; later the caller's identity from its TLS client
//! certificate, put into the request's extensions for the per-job access
//! rules to read (see ARCHITECTURE.md, "Where TLS and access rules go").

use std::pin::Pin;
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
        // The clone that was polled ready serves this call; a fresh clone
        // stays behind for the next one (tower's documented pattern).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
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
