//! The admin port: an axum router with `GET /metrics` (Prometheus text,
//! see [`crate::metrics`]) and `GET /healthz`. Plain HTTP/1.1, on its own
//! listener, so that a scrape never competes with the gRPC port's limits.

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use prometheus_client::registry::Registry;

use crate::backend::Backend;
use crate::metrics::{self, RpcMetrics};

#[derive(Clone)]
struct Admin {
    node: Backend,
    /// Every metric, made once; encoded at each scrape.
    registry: Arc<Registry>,
}

/// The admin pages, as a router (for tests, or to nest elsewhere).
pub fn router(node: Backend, rpc: Arc<RpcMetrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(|| async { (StatusCode::NOT_FOUND, "try /metrics or /healthz\n") })
        .with_state(Admin {
            registry: Arc::new(metrics::registry(node.clone(), rpc)),
            node,
        })
}

/// Serves the admin pages on `listener` until `shutdown`.
pub async fn serve_admin(
    listener: TcpListener,
    node: Backend,
    rpc: Arc<RpcMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    if let Err(e) = axum::serve(listener, router(node, rpc))
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::warn!(error = %e, "the admin port stopped");
    }
}

async fn metrics(State(a): State<Admin>) -> impl IntoResponse {
    match metrics::encode(&a.registry) {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "could not encode the metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "could not encode the metrics\n",
            )
                .into_response()
        }
    }
}

/// 200 `ok` while the store can take changes; 503 with the reason while it
/// cannot (failed and not reopened yet, or the disk too full).
async fn healthz(State(a): State<Admin>) -> impl IntoResponse {
    match a.node.store_health() {
        Some(h) if !h.borrow().is_ok() => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", *h.borrow()),
        ),
        _ => (StatusCode::OK, "ok\n".to_owned()),
    }
}
