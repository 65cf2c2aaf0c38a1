//! The gRPC server: the only module (with the client) that names tonic.
//!
//! Handlers are thin: decode and validate the request into domain types
//! ([`convert`], [`crate::lease::Limits`]), call the [`Backend`] (the single node or etcd), encode the
//! answer. Errors cross into gRPC through one table ([`grpc_status`]).
//! Cross-cutting concerns are tower layers in front of every handler
//! ([`layers`]), and the bytes of a request before they are a message (too
//! many of them, or ones that do not decode) are refused in one place,
//! [`wire`], in the same terms as any other bad input. Health
//! (`grpc.health.v1`) and reflection (v1 and v1alpha) are plain extra
//! services, so grpcurl and load balancers work out of the box.
//!
//! Health says whether the server takes changes: SERVING, or NOT_SERVING
//! while the store cannot take any (it failed and is not reopened yet, or
//! the disk is too full for even the smallest change) and from the moment
//! a shutdown begins. It is set for the whole server (`""`) and for each
//! service alike, and comes back by itself with the store. Reads and
//! renewals are served either way.
//!
//! # A request, end to end
//!
//! Take `CheckedWrite{job, token, key, value}`:
//!
//! 1. The tower layers ([`layers`]) time it, admit it and authenticate it;
//!    the wire guard ([`wire`]) reads the length prefix of each message as
//!    it arrives: one over the size limit is refused from at most the
//!    limit's worth of its bytes, one that does not decode is refused, both
//!    naming the field, with INVALID_ARGUMENT. Last, the pacing layer
//!    ([`pacing`]) hands the call its connection's pacing.
//! 2. The handler (`fenced.rs`) turns the message into domain values
//!    through [`convert`] and `Limits`, which check the caller's grant too.
//!    Bad input stops here, naming the field and the limit. Then it waits
//!    if its connection is over its write rate.
//! 3. The backend decides. On the single node (`leasehold-node`) the key's
//!    record is read before the state lock is taken, the core's
//!    `rules::admit_write` decides under it (the holder guard, then the
//!    fence), and the change is staged in the store; group commit
//!    (`leasehold-node`'s `commit`) makes it durable, one sync for many
//!    changes, before the handler is released. On etcd it is one
//!    transaction (`leasehold-etcd`).
//! 4. The handler answers with the key's new version; a domain error
//!    crosses into gRPC in one place ([`grpc_status`]), with an ErrorInfo
//!    reason (`FENCED`, `LEASE_LOST`, ...) that clients branch on.

pub mod auth;
pub mod backup;
pub mod bound;
pub mod bulk;
pub mod chaos;
pub mod conn;
pub mod convert;
pub mod counted;
pub mod fenced;
pub mod frames;
pub mod grpc_status;
pub mod layers;
pub mod leases;
pub mod memory;
pub mod pacing;
pub mod page;
pub mod shards;
pub mod tls;
pub mod wire;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::Server;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::backend::{Backend, StoreHealth};
use crate::error::{Error, Result};
use crate::lease::Limits;
use crate::metrics::RpcMetrics;
use crate::proto;

/// How the server serves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Limits on every request field.
    pub limits: Limits,
    /// How long in-flight calls may take to finish after a shutdown signal.
    pub drain_timeout: Duration,
    /// Connections open at once; more are closed on accept.
    pub max_connections: usize,
    /// Connections open at once from one client address (an IPv6
    /// client's /64); more are closed on accept.
    pub max_connections_per_address: usize,
    /// Calls in flight at once, across connections, in each budget
    /// (renewals have their own); more are answered RESOURCE_EXHAUSTED,
    /// reason OVERLOADED ([`layers::Admission`]). Also each principal's,
    /// unless its policy sets its own `max_in_flight`.
    pub max_in_flight: usize,
    /// Calls open at once on one connection, in each budget (streams for
    /// as long as they are open); more are answered OVERLOADED.
    pub max_in_flight_per_connection: usize,
    /// The bytes (keys and values) one connection's `CheckedWrite`s and
    /// `WriteStream`s may write per second, a second's worth at once; more
    /// wait ([`pacing::Pacing::write`]), so that a flood of writes on
    /// one connection cannot take the cores from everyone's renewals.
    pub max_write_rate_per_connection: u64,
    /// The bytes of listings' answers (`ListKeys`, `GetHistory`,
    /// `ListLeases` pages) one connection may read per second, a second's
    /// worth at once; more wait ([`pacing::Pacing::listing`]), so that
    /// loops of listings on one connection cannot take the cores from
    /// everyone's renewals.
    pub max_listing_rate_per_connection: u64,
    /// The `Acquire`s one connection may make per second, a second's worth
    /// at once; more wait ([`pacing::Pacing::acquire`]), so that a
    /// flood of new jobs on one connection cannot take the cores from
    /// everyone's renewals. Renewals are never paced.
    pub max_acquire_rate_per_connection: u64,
    /// The frames that carry no call (SETTINGS, PING, RST_STREAM, ...) and
    /// the streams refused, that one connection may cost per second, two
    /// seconds' worth at once; over it the connection is slowed, then its
    /// calls refused, then sent away ([`frames`]).
    pub max_frame_rate_per_connection: u32,
    /// Bytes of large answers (`Read`s, pages of keys and history) the
    /// server holds for clients that have not taken them yet, all
    /// connections together; one connection may hold a sixteenth (at least
    /// 4 MiB). An answer over either is refused, OVERLOADED.
    pub max_queued_response_bytes: usize,
    /// A connection that holds answers and takes no byte of them for this
    /// long is closed, which gives their bytes back.
    pub response_stall_timeout: Duration,
    /// From accept to the TLS handshake done and the HTTP/2 preface read;
    /// a connection that takes longer is closed.
    pub handshake_timeout: Duration,
    /// A connection with no call open for this long is closed.
    pub idle_timeout: Duration,
    /// HTTP/2 streams open at once on one connection (watches included).
    pub max_streams_per_connection: u32,
    /// `WatchLease` streams open at once; more are refused with
    /// QUOTA_EXCEEDED. Also each principal's, unless its policy sets its
    /// own `max_watchers`.
    pub max_watchers: usize,
    /// Acquires waiting on one job at once; one more is granted if the
    /// lease is free, else refused with QUOTA_EXCEEDED. Also each
    /// principal's, unless its policy sets its own `max_waiters_per_job`.
    pub max_waiters_per_job: usize,
    /// Acquires waiting at once, on all jobs; one more is granted if the
    /// lease is free, else refused with QUOTA_EXCEEDED. A waiting Acquire
    /// counts here instead of under `max_in_flight`.
    pub max_waiters: usize,
    /// A watch whose client leaves an event unread this long is closed
    /// with RESOURCE_EXHAUSTED, reason OVERLOADED.
    pub watch_stall_timeout: Duration,
    /// How often an idle connection is pinged; a peer that does not answer
    /// within the same time is disconnected, which ends its watches and
    /// waits.
    pub keepalive: Duration,
    /// TLS on the port (`--tls-cert`, `--tls-key`, `--tls-client-ca`).
    pub tls: Option<Arc<tls::Tls>>,
    /// The policy (`--policy`): who may do what, and leases bound to their
    /// principals. Without one, every caller may do everything.
    pub auth: Option<Arc<auth::Auth>>,
    /// The signing keys: grants' proofs, `GetSigningKeys`, and the check
    /// of `CheckedWriteRequest.proof`.
    pub proofs: Arc<crate::proofs::Proofs>,
    /// Serve the chaos API (`--enable-chaos`, `chaos.proto`).
    pub enable_chaos: bool,
    /// The chaos in force, shared with the status page.
    pub chaos: Arc<chaos::ChaosState>,
}

/// `--max-write-rate-per-connection`'s default: 16 MiB/s, 256 of the
/// largest values a second (the store holds small state).
pub const DEFAULT_MAX_WRITE_RATE_PER_CONNECTION: u64 = 16 << 20;

/// `--max-listing-rate-per-connection`'s default: 4 MiB/s, fifty pages of
/// a thousand keys of 64 bytes a second.
pub const DEFAULT_MAX_LISTING_RATE_PER_CONNECTION: u64 = 4 << 20;

/// `--max-acquire-rate-per-connection`'s default: 2,000 a second. An
/// elector makes one Acquire per campaign, and a process starting 2,000
/// electors on one connection gets them all at once.
pub const DEFAULT_MAX_ACQUIRE_RATE_PER_CONNECTION: u64 = 2_000;

/// Streams a connection may have refused or reset by the server (opened
/// past the stream limit, or malformed) before it is closed with GOAWAY
/// ENHANCE_YOUR_CALM. hyper's own default, set here because tonic passes
/// none and so turns the limit off: a client that pipelines requests past
/// the limit made the server refuse millions of streams, holding gigabytes
/// and stalling renewals on other connections for seconds.
pub const H2_MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// Streams a client may reset before the server has accepted them, at
/// once, before GOAWAY ENHANCE_YOUR_CALM (rapid reset): h2's default, set
/// here so that it is one on purpose.
pub const H2_MAX_PENDING_ACCEPT_RESETS: usize = 20;
/// The largest header list a request may have (SETTINGS_MAX_HEADER_LIST_SIZE).
pub const H2_MAX_HEADER_LIST_BYTES: u32 = 16 << 10;
/// The largest frame the server reads (HTTP/2's default).
pub const H2_MAX_FRAME_BYTES: u32 = 16 << 10;
/// Each stream's and each connection's flow-control window.
pub const H2_WINDOW_BYTES: u32 = 1 << 20;

/// The default of `--max-queued-response-bytes`: 256 MiB.
pub const DEFAULT_MAX_QUEUED_RESPONSE_BYTES: usize = 256 << 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Limits::default(),
            drain_timeout: Duration::from_secs(10),
            max_connections: 4096,
            max_connections_per_address: 256,
            max_in_flight: 10_000,
            max_in_flight_per_connection: 1_000,
            max_write_rate_per_connection: DEFAULT_MAX_WRITE_RATE_PER_CONNECTION,
            max_listing_rate_per_connection: DEFAULT_MAX_LISTING_RATE_PER_CONNECTION,
            max_acquire_rate_per_connection: DEFAULT_MAX_ACQUIRE_RATE_PER_CONNECTION,
            max_frame_rate_per_connection: frames::DEFAULT_MAX_FRAME_RATE,
            max_queued_response_bytes: DEFAULT_MAX_QUEUED_RESPONSE_BYTES,
            response_stall_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(300),
            max_streams_per_connection: 1024,
            max_watchers: 10_000,
            max_waiters_per_job: 10_000,
            watch_stall_timeout: leases::DEFAULT_WATCH_STALL_TIMEOUT,
            max_waiters: leases::DEFAULT_MAX_WAITERS,
            keepalive: Duration::from_secs(30),
            tls: None,
            auth: None,
            enable_chaos: false,
            chaos: Arc::default(),
            proofs: Arc::new(crate::proofs::Proofs::none()),
        }
    }
}

impl Config {
    /// The largest request message the server decodes: the largest value
    /// and key plus room for the other fields, a little above the largest
    /// valid `CheckedWrite`. A larger message is refused as it arrives
    /// ([`wire`]): at most this many of its bytes are read, to name the
    /// field at fault, and none of it is decoded.
    pub fn max_message_bytes(&self) -> usize {
        self.limits.max_value_bytes
            + self.limits.max_key_bytes
            + 2 * self.limits.max_name_bytes
            + 1024
    }
}

/// Serves the gRPC API on `listener` until `shutdown` completes, then drains
/// and closes the backend.
///
/// Shutdown marks health NOT_SERVING, ends waiting `Acquire`s and watches
/// with UNAVAILABLE, lets in-flight calls finish for up to
/// `config.drain_timeout`, and syncs the store.
pub async fn run(
    listener: TcpListener,
    node: impl Into<Backend>,
    config: Config,
    rpc_metrics: Arc<RpcMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let node: Backend = node.into();
    let (reporter, health) = tonic_health::server::health_reporter();
    let store_health = Some(node.store_health());
    let serving = store_health.as_ref().is_none_or(|h| h.borrow().is_ok());
    show_health(&reporter, serving).await;
    let (closing_tx, closing_rx) = watch::channel(false);
    let trim_task = tokio::spawn(memory::give_back(closing_rx.clone()));
    let health_task = tokio::spawn(report_health(reporter, store_health, closing_rx.clone()));

    // Reflection serves the contract, health, and google.rpc's Status and
    // error details: a generic client (grpcurl) decodes an error's
    // ErrorInfo by looking its type up here, and prints its reason by name.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1().map_err(Error::serve)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(Error::serve)?;

    let max = config.max_message_bytes();
    let wire = wire::WireLayer::new(
        wire::Schema::new(proto::FILE_DESCRIPTOR_SET, &config.limits)?,
        max,
    );
    let mut quotas = leases::Quotas::new(
        config.max_watchers,
        config.max_waiters_per_job,
        rpc_metrics.clone(),
    );
    quotas.watch_stall_timeout = config.watch_stall_timeout;
    quotas.max_waiters = config.max_waiters;
    let quotas = Arc::new(quotas);
    let bindings = bound::Bindings::new(node.clone(), closing_rx.clone(), config.limits.max_ttl);
    let leases = proto::leases_server::LeasesServer::new(leases::LeasesService::new(
        node.clone(),
        config.limits.clone(),
        quotas,
        bindings,
        config.proofs.clone(),
        config.chaos.clone(),
    ))
    .max_decoding_message_size(max);
    let fenced =
        proto::fenced_store_server::FencedStoreServer::new(fenced::FencedStoreService::new(
            node.clone(),
            config.limits.clone(),
            rpc_metrics.clone(),
            config.proofs.clone(),
            config.chaos.clone(),
        ))
        .max_decoding_message_size(max);

    let shards = proto::shards_server::ShardsServer::new(shards::ShardsService::new(
        node.clone(),
        config.limits.clone(),
        rpc_metrics.shards.clone(),
    ))
    .max_decoding_message_size(max);

    // Only with --enable-chaos; on a listener that is not loopback, only
    // by a policy's grant.
    let remote = !listener
        .local_addr()
        .map_err(Error::serve)?
        .ip()
        .is_loopback();
    let chaos = config.enable_chaos.then(|| {
        proto::chaos_server::ChaosServer::new(chaos::ChaosService::new(
            node.clone(),
            config.limits.clone(),
            config.chaos.clone(),
            rpc_metrics.clone(),
            config.proofs.clone(),
            remote,
        ))
        .max_decoding_message_size(4096)
    });

    // Its one request is empty.
    let admin = proto::admin_server::AdminServer::new(backup::AdminService::new(node.clone()))
        .max_decoding_message_size(1024);

    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let closing_node = node.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: draining in-flight calls");
        // NOT_SERVING is shown before the drain begins.
        let _ = closing_tx.send(true);
        let _ = health_task.await;
        let _ = trim_task.await;
        closing_node.start_closing();
        let _ = signalled_tx.send(());
    };

    let limits = conn::ConnLimits {
        max: config.max_connections,
        max_per_address: config.max_connections_per_address,
        handshake_timeout: config.handshake_timeout,
        preface_bytes: conn::HTTP2_PREFACE_BYTES,
        idle_timeout: Some(config.idle_timeout),
        evict_anonymous: config.auth.is_some(),
        frame_rate: Some(config.max_frame_rate_per_connection),
        response_stall_timeout: Some(config.response_stall_timeout),
        refusal: None,
    };
    let incoming = conn::incoming(
        listener,
        limits,
        config.tls.clone().map(|t| (t, tls::Port::Grpc)),
    );
    // A connection's share is taken before the credentials are read; a
    // principal's share and the server's budget once the caller is known.
    let admission = layers::Admission::new(
        config.max_in_flight,
        config.max_in_flight_per_connection,
        Arc::new(layers::ResponseQueue::new(config.max_queued_response_bytes)),
        rpc_metrics.clone(),
    );
    let pacing = pacing::layer(
        config.max_acquire_rate_per_connection,
        config.max_write_rate_per_connection,
        config.max_listing_rate_per_connection,
        rpc_metrics.clone(),
    );
    let serve = Server::builder()
        .max_concurrent_streams(config.max_streams_per_connection)
        .http2_max_local_error_reset_streams(Some(H2_MAX_LOCAL_ERROR_RESETS))
        .http2_max_pending_accept_reset_streams(Some(H2_MAX_PENDING_ACCEPT_RESETS))
        .http2_max_header_list_size(H2_MAX_HEADER_LIST_BYTES)
        .max_frame_size(H2_MAX_FRAME_BYTES)
        .initial_stream_window_size(H2_WINDOW_BYTES)
        .initial_connection_window_size(H2_WINDOW_BYTES)
        .http2_keepalive_interval(Some(config.keepalive))
        .http2_keepalive_timeout(Some(config.keepalive))
        .layer(layers::RpcMetricsLayer::new(rpc_metrics.clone()))
        .layer(admission.connections())
        .layer(auth::AuthLayer::<conn::Peer>::new(config.auth.clone()))
        .layer(admission.budgets())
        .layer(wire)
        .layer(pacing)
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(leases)
        .add_service(fenced)
        .add_service(shards)
        .add_service(admin)
        .add_optional_service(chaos)
        .serve_with_incoming_shutdown(incoming, signal);
    tokio::pin!(serve);
    let drain_timeout = config.drain_timeout;
    tokio::select! {
        r = &mut serve => r.map_err(Error::serve)?,
        _ = async {
            if signalled_rx.await.is_ok() {
                tokio::time::sleep(drain_timeout).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => tracing::warn!(?drain_timeout, "drain timed out; closing with calls in flight"),
    }
    node.close().await;
    tracing::info!("closed; bye");
    Ok(())
}

/// Shows `serving` for the whole server and for each service.
async fn show_health(reporter: &HealthReporter, serving: bool) {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    reporter.set_service_status("", status).await;
    reporter
        .set_service_status(
            <proto::leases_server::LeasesServer<leases::LeasesService> as tonic::server::NamedService>::NAME,
            status,
        )
        .await;
    reporter
        .set_service_status(
            <proto::fenced_store_server::FencedStoreServer<fenced::FencedStoreService> as tonic::server::NamedService>::NAME,
            status,
        )
        .await;
}

/// Keeps gRPC health in step with the store's health until a shutdown
/// begins (`closing`), then shows NOT_SERVING for good and returns.
async fn report_health(
    reporter: HealthReporter,
    mut store: Option<watch::Receiver<StoreHealth>>,
    mut closing: watch::Receiver<bool>,
) {
    loop {
        let shutting_down = *closing.borrow_and_update();
        let store_ok = store.as_mut().is_none_or(|h| h.borrow_and_update().is_ok());
        show_health(&reporter, store_ok && !shutting_down).await;
        if shutting_down {
            return;
        }
        tokio::select! {
            r = closing.changed() => if r.is_err() {
                // The server ended without a shutdown signal.
                return;
            },
            r = async {
                match store.as_mut() {
                    Some(h) => h.changed().await,
                    None => std::future::pending().await,
                }
            } => if r.is_err() {
                store = None;
            },
        }
    }
}
