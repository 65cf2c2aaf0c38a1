//! Tower layers in front of every handler.
//!
//! Cross-cutting concerns go here, once, instead of into each handler:
//! the RPC metrics and the cap on calls in flight. The caller's identity
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
