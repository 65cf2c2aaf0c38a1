//! The admin port: an axum router with `GET /metrics` (Prometheus text,
//! see [`crate::metrics`]), `GET /healthz`, and the status page (`GET /`
//! and what it reads, see [`crate::status_page`]). HTTP/1.1, on its own
//! listener, so that a scrape never competes with the gRPC port's limits;
//! over TLS with the gRPC port's certificates when it has them.
//!
//! With a policy, `/metrics` answers only a caller with the `admin`
//! action (a bearer token or a client certificate, as on the gRPC port):
//! it names every job. `/healthz` stays open, like gRPC health.

use std::future::Future;
use std::sync::Arc;

use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::serve::IncomingStream;
use axum::Router;
use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt as _};

use prometheus_client::registry::Registry;

use crate::backend::Backend;
use crate::lease::Limits;
use crate::metrics::{self, RpcMetrics};
use crate::server::auth::{self, Auth};
use crate::server::conn::{self, Conn, Peer};
use crate::server::tls::{Port, Tls};
use crate::status_page::{self, StatusState};

/// Connections open at once on the admin port.
const MAX_ADMIN_CONNECTIONS: usize = 256;

#[derive(Clone)]
struct Admin {
    node: Backend,
    /// Every metric, made once; encoded at each scrape.
    registry: Arc<Registry>,
    /// The policy, if any: `/metrics` needs `admin`.
    auth: Option<Arc<Auth>>,
}

/// The admin pages, as a router (for tests, or to nest elsewhere).
/// At most `metrics_max_jobs` jobs get series of their own on `/metrics`.
pub fn router(
    node: Backend,
    rpc: Arc<RpcMetrics>,
    auth: Option<Arc<Auth>>,
    metrics_max_jobs: usize,
    limits: Limits,
) -> Router {
    let status = Router::new()
        .route("/", get(status_page::page))
        .route("/api/jobs", get(status_page::jobs))
        .route("/api/job", get(status_page::job))
        .route("/api/events", get(status_page::events))
        .with_state(StatusState {
            node: node.clone(),
            auth: auth.clone(),
            limits,
        });
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(|| async { (StatusCode::NOT_FOUND, "try /, /metrics or /healthz\n") })
        .with_state(Admin {
            registry: Arc::new(metrics::registry(node.clone(), rpc, metrics_max_jobs)),
            node,
            auth,
        })
        .merge(status)
}

/// How the admin port is secured: TLS with the gRPC port's certificates,
/// and the policy.
#[derive(Clone, Default)]
pub struct AdminSecurity {
    /// TLS, if the server has it.
    pub tls: Option<Arc<Tls>>,
    /// The policy, if the server has one.
    pub auth: Option<Arc<Auth>>,
}

/// The admin port's limits.
#[derive(Debug, Clone)]
pub struct AdminOptions {
    /// The most jobs with series of their own on `/metrics`
    /// (`--metrics-max-jobs`).
    pub metrics_max_jobs: usize,
    /// From accept to the TLS handshake done and the first byte of a
    /// request (`--handshake-timeout`, as on the gRPC port).
    pub handshake_timeout: std::time::Duration,
    /// Input limits (the status page's job names).
    pub limits: Limits,
}

/// Serves the admin pages on `listener` until `shutdown`.
pub async fn serve_admin(
    listener: TcpListener,
    node: Backend,
    rpc: Arc<RpcMetrics>,
    security: AdminSecurity,
    options: AdminOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let addr = listener.local_addr().ok();
    let limits = conn::ConnLimits {
        max: MAX_ADMIN_CONNECTIONS,
        handshake_timeout: options.handshake_timeout,
        // The first byte of a request.
        preface_bytes: 1,
        // Scrapers keep their connection between scrapes.
        idle_timeout: None,
    };
    let incoming = conn::incoming(listener, limits, security.tls.map(|t| (t, Port::Admin)));
    let listener = AdminListener { incoming, addr };
    let app = router(
        node,
        rpc,
        security.auth,
        options.metrics_max_jobs,
        options.limits,
    )
    .into_make_service_with_connect_info::<Peer>();
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::warn!(error = %e, "the admin port stopped");
    }
}

/// The admin port's connections, plain or TLS, from [`conn::incoming`].
struct AdminListener {
    incoming: std::pin::Pin<Box<dyn Stream<Item = std::io::Result<Conn>> + Send>>,
    addr: Option<std::net::SocketAddr>,
}

impl axum::serve::Listener for AdminListener {
    type Io = Conn;
    type Addr = Peer;

    async fn accept(&mut self) -> (Conn, Peer) {
        loop {
            match self.incoming.next().await {
                Some(Ok(c)) => {
                    let peer = c.peer().clone();
                    return (c, peer);
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "admin port: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Peer> {
        Ok(Peer {
            remote: self.addr,
            ..Peer::default()
        })
    }
}

impl Connected<IncomingStream<'_, AdminListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, AdminListener>) -> Peer {
        stream.remote_addr().clone()
    }
}

async fn metrics(
    State(a): State<Admin>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
) -> impl IntoResponse {
    if let Err(e) = auth::admin_check(a.auth.as_ref(), &headers, Some(&peer)) {
        let code = match e {
            crate::error::Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            _ => StatusCode::FORBIDDEN,
        };
        return (code, auth::describe(&e)).into_response();
    }
    // Off the async workers: with a million jobs the walk and the encoding
    // take a few hundred milliseconds of CPU, which would hold up every
    // connection queued on the worker running it (renewals included).
    let registry = a.registry.clone();
    let encoded = match tokio::task::spawn_blocking(move || metrics::encode(&registry)).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "the metrics task failed");
            Err(std::fmt::Error)
        }
    };
    match encoded {
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

/// 200 `ok` while the backend can take changes; 503 with the reason while
/// it cannot (see [`Backend::store_health`]).
async fn healthz(State(a): State<Admin>) -> impl IntoResponse {
    let h = a.node.store_health();
    let h = h.borrow();
    if h.is_ok() {
        (StatusCode::OK, "ok\n".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", *h))
    }
}
