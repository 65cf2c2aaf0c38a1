//! The admin port: an axum router with `GET /metrics` (Prometheus text,
//! see [`crate::metrics`]), `GET /healthz`, and the status page (`GET /`
//! and what it reads, see [`crate::status_page`]). HTTP/1.1, on its own
//! listener, so that a scrape never competes with the gRPC port's limits;
//! over TLS with the gRPC port's certificates when it has them.
//!
//! With a policy, `/metrics` answers only a caller with the `admin`
//! action (a bearer token or a client certificate, as on the gRPC port):
//! it names every job. `/healthz` stays open, like gRPC health, but says
//! why the store cannot take changes only to such a caller. Without a
//! policy, a request whose `Host` is a name other than `localhost` is
//! refused (DNS rebinding).
//!
//! Whoever reaches the port must not be able to silence it, since
//! `/healthz` is what a liveness probe restarts the server on: at most
//! [`MAX_ADMIN_CONNECTIONS`] connections, [`MAX_ADMIN_CONNECTIONS_PER_ADDRESS`]
//! of them from one client address (see [`conn`]), and each must send its
//! first byte within `--handshake-timeout` of its accept and then every
//! request's whole head within `--handshake-timeout` of the accept or of
//! the previous response (hyper's header-read timeout), or it is closed.
//! A connection that sends a byte and goes silent, or trickles its head,
//! or idles between requests, holds its place for seconds, not forever.

use std::future::Future;
use std::sync::Arc;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio_stream::StreamExt as _;
use tower::ServiceExt as _;

use prometheus_client::registry::Registry;

use crate::backend::Backend;
use crate::lease::Limits;
use crate::metrics::{self, RpcMetrics};
use crate::proofs::Proofs;
use crate::read_budget::{BudgetLimits, ReadBudget};
use crate::server::auth::{self, Auth};
use crate::server::conn::{self, Peer};
use crate::server::tls::{Port, Tls};
use crate::status_page::{self, StatusState};

/// Connections open at once on the admin port: more than the status
/// page's event streams ([`crate::read_budget::DEFAULT_MAX_EVENT_STREAMS`])
/// by far, so that a crowd of subscribers, each answered 503 past that
/// cap, leaves room for `/healthz`.
pub const MAX_ADMIN_CONNECTIONS: usize = 1024;

/// Connections open at once on the admin port from one client address (an
/// IPv6 client's /64): a scraper and a probe need one or two each.
pub const MAX_ADMIN_CONNECTIONS_PER_ADDRESS: usize = 16;

#[derive(Clone)]
struct Admin {
    node: Backend,
    /// Every metric, made once; encoded at each scrape.
    registry: Arc<Registry>,
    /// The policy, if any: `/metrics` needs `admin`.
    auth: Option<Arc<Auth>>,
}

/// The admin pages, as a router (for tests, or to nest elsewhere), with
/// `options` (at most `metrics_max_jobs` jobs get series of their own on
/// `/metrics`) and the status page's readers' `budget`.
pub fn router(
    node: Backend,
    rpc: Arc<RpcMetrics>,
    auth: Option<Arc<Auth>>,
    options: AdminOptions,
    budget: Arc<ReadBudget>,
) -> Router {
    let AdminOptions {
        metrics_max_jobs,
        limits,
        proofs,
        chaos,
        ..
    } = options;
    let mut registry = metrics::registry(node.clone(), rpc, metrics_max_jobs);
    budget.register(&mut registry);
    let status = Router::new()
        .route("/", get(status_page::page))
        .route("/api/jobs", get(status_page::jobs))
        .route("/api/job", get(status_page::job))
        .route("/api/events", get(status_page::events))
        .with_state(StatusState {
            node: node.clone(),
            auth: auth.clone(),
            limits,
            budget,
            chaos,
        });
    let open = auth.is_none();
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "try /, /metrics, /healthz or /keys\n",
            )
        })
        .with_state(Admin {
            registry: Arc::new(registry),
            node,
            auth,
        })
        .merge(status)
        .merge(Router::new().route("/keys", get(keys)).with_state(proofs));
    match open {
        true => router.layer(axum::middleware::from_fn(address_hosts_only)),
        false => router,
    }
}

/// Without a policy, the admin pages answer anyone who reaches them; a web
/// page elsewhere must not be one of those, by DNS rebinding (its own
/// name, resolved to this address, so that the browser lets it read the
/// answer). Such a request names the attacker's host in `Host`: only an
/// address, or `localhost`, is served (or no `Host`, as HTTP/1.0 allows).
async fn address_hosts_only(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("?"));
    match host {
        Some(h) if !is_address_or_localhost(h) => (
            StatusCode::MISDIRECTED_REQUEST,
            "without a --policy the admin port answers only requests to an address or to \
             localhost (Host), so that no other site's page can read it\n",
        )
            .into_response(),
        _ => next.run(req).await,
    }
}

/// Whether a `Host` value (with or without a port) is an IP address or
/// `localhost`.
fn is_address_or_localhost(host: &str) -> bool {
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split_once(']').is_some_and(|(a, port)| {
            a.parse::<std::net::Ipv6Addr>().is_ok()
                && (port.is_empty() || port.strip_prefix(':').is_some())
        });
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
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
    /// What the status page's readers may cost (`--admin-read-rate`,
    /// `--admin-read-burst`, `--max-event-streams`).
    pub budget: BudgetLimits,
    /// The signing keys, served at `/keys`.
    pub proofs: Arc<Proofs>,
    /// The chaos in force, shown on the status page.
    pub chaos: Arc<crate::server::chaos::ChaosState>,
}

/// `GET /keys`: the public keys that verify grants' proofs, as a JWKS
/// (RFC 7517). Public, like any JWKS: it needs no grant.
async fn keys(State(proofs): State<Arc<Proofs>>) -> axum::response::Response {
    (
        [
            (header::CONTENT_TYPE, "application/jwk-set+json"),
            (header::CACHE_CONTROL, "max-age=60"),
        ],
        proofs.jwks().to_owned(),
    )
        .into_response()
}

/// Serves the admin pages on `listener` until `shutdown`, then lets the
/// requests in progress finish.
pub async fn serve_admin(
    listener: TcpListener,
    node: Backend,
    rpc: Arc<RpcMetrics>,
    security: AdminSecurity,
    options: AdminOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let limits = conn::ConnLimits {
        max: MAX_ADMIN_CONNECTIONS,
        max_per_address: MAX_ADMIN_CONNECTIONS_PER_ADDRESS,
        handshake_timeout: options.handshake_timeout,
        // The first byte of a request.
        preface_bytes: 1,
        // hyper's header-read timeout, below, closes idle connections.
        idle_timeout: None,
        evict_anonymous: false,
        // HTTP/1: no frames.
        frame_rate: None,
        response_stall_timeout: None,
        // A client over a cap is told so, in HTTP, before the close.
        refusal: Some(REFUSAL),
    };
    let mut incoming = conn::incoming(listener, limits, security.tls.map(|t| (t, Port::Admin)));
    let budget = ReadBudget::new(options.budget);
    let handshake_timeout = options.handshake_timeout;
    let app = router(node, rpc, security.auth, options, budget);
    // Each connection's task holds a receiver: the sender's `closed()` is
    // the last of them ending.
    let (closing, open) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let next = tokio::select! {
            c = incoming.next() => c,
            () = &mut shutdown => break,
        };
        match next {
            Some(Ok(c)) => {
                tokio::spawn(serve_connection(
                    c,
                    app.clone(),
                    handshake_timeout,
                    open.clone(),
                ));
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "admin port: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            None => break,
        }
    }
    drop((incoming, open));
    let _ = closing.send(());
    // A response that never ends (an open event stream whose feed outlives
    // the shutdown) must not hold the process: the requests in progress
    // get a few seconds.
    let _ = tokio::time::timeout(ADMIN_DRAIN, closing.closed()).await;
}

/// What a connection over [`MAX_ADMIN_CONNECTIONS`] or
/// [`MAX_ADMIN_CONNECTIONS_PER_ADDRESS`] is sent before it is closed.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: 69\r\n\r\n\
too many connections to the admin port (or from this address); retry\n";

/// How long the admin port's requests in progress may take at shutdown.
const ADMIN_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves one admin connection, HTTP/1.1, until it closes; on `closing`
/// news, ends it gracefully (after the request in progress).
async fn serve_connection(
    c: conn::Conn,
    app: Router,
    header_read_timeout: std::time::Duration,
    mut closing: tokio::sync::watch::Receiver<()>,
) {
    let peer = c.peer().clone();
    let remote = peer.remote;
    let service =
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer.clone()));
            app.clone().oneshot(req)
        });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(c), service);
    let mut conn = std::pin::pin!(conn);
    let ended = tokio::select! {
        r = conn.as_mut() => Some(r),
        _ = closing.changed() => None,
    };
    let r = match ended {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = r {
        tracing::debug!(peer = ?remote, error = %e, "admin port: connection ended");
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

/// 200 `ok` while the backend can take changes; 503 while it cannot, with
/// the reason (see [`Backend::store_health`]) for whom may see
/// `/metrics` (everyone without a policy): the store's error names paths
/// and addresses that are not for anyone who reaches the port.
async fn healthz(
    State(a): State<Admin>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let reason = {
        let h = a.node.store_health();
        let h = h.borrow();
        if h.is_ok() {
            return (StatusCode::OK, "ok\n".to_owned());
        }
        h.to_string()
    };
    let text = match auth::admin_check(a.auth.as_ref(), &headers, Some(&peer)) {
        Ok(()) => reason,
        Err(_) => "the store cannot take changes (the reason is for `admin` callers, and in \
                   the server's log)"
            .to_owned(),
    };
    (StatusCode::SERVICE_UNAVAILABLE, format!("{text}\n"))
}

#[cfg(test)]
mod tests {
    use super::is_address_or_localhost;

    #[test]
    fn the_refusal_is_one_whole_http_answer() {
        let text = std::str::from_utf8(super::REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap();
        assert_eq!(len.parse::<usize>().unwrap(), body.len());
    }

    #[test]
    fn only_addresses_and_localhost_are_hosts_without_a_policy() {
        for ok in [
            "127.0.0.1:9464",
            "127.0.0.1",
            "10.1.2.3:80",
            "[::1]:9464",
            "localhost:9464",
            "LOCALHOST",
        ] {
            assert!(is_address_or_localhost(ok), "{ok}");
        }
        for bad in [
            "evil.example:9464",
            "x",
            "127.0.0.1.evil.example",
            "localhost.evil.example:1",
            "[::1",
            "",
        ] {
            assert!(!is_address_or_localhost(bad), "{bad}");
        }
    }
}
