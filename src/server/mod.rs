//! The gRPC server: the only module (with the client) that names tonic.
//!
//! Handlers are thin: decode and validate the request into domain types
//! ([`convert`], [`crate::lease::Limits`]), call the [`Backend`] (the single node or etcd), encode the
//! answer. Errors cross into gRPC through one table ([`status`]).
//! Cross-cutting concerns are tower layers in front of every handler
//! ([`layers`]), and the bytes of a request before they are a message (too
//! many of them, or ones that do not decode) are refused in one place,
//! [`wire`], in the same terms as any other bad input. Health
//! (`grpc.health.v1`) and reflection (v1 and v1alpha) are plain extra
//! services, so grpcurl and load balancers work out of the box.

pub mod conn;
pub mod convert;
pub mod fenced;
pub mod layers;
pub mod leases;
pub mod page;
pub mod status;
pub mod wire;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic_health::ServingStatus;

use crate::backend::Backend;
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
    /// Calls in flight at once, across connections; more are answered
    /// RESOURCE_EXHAUSTED.
    pub max_in_flight: usize,
    /// HTTP/2 streams open at once on one connection (watches included).
    pub max_streams_per_connection: u32,
    /// How often an idle connection is pinged; a peer that does not answer
    /// within the same time is disconnected, which ends its watches and
    /// waits.
    pub keepalive: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Limits::default(),
            drain_timeout: Duration::from_secs(10),
            max_connections: 4096,
            max_in_flight: 10_000,
            max_streams_per_connection: 1024,
            keepalive: Duration::from_secs(30),
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
    reporter
        .set_serving::<proto::leases_server::LeasesServer<leases::LeasesService>>()
        .await;
    reporter
        .set_serving::<proto::fenced_store_server::FencedStoreServer<fenced::FencedStoreService>>()
        .await;

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(Error::serve)?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(Error::serve)?;

    let max = config.max_message_bytes();
    let wire = wire::WireLayer::new(
        wire::Schema::new(proto::FILE_DESCRIPTOR_SET, &config.limits)?,
        max,
    );
    let leases = proto::leases_server::LeasesServer::new(leases::LeasesService::new(
        node.clone(),
        config.limits.clone(),
    ))
    .max_decoding_message_size(max);
    let fenced = proto::fenced_store_server::FencedStoreServer::new(
        fenced::FencedStoreService::new(node.clone(), config.limits.clone()),
    )
    .max_decoding_message_size(max);

    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let closing_node = node.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: draining in-flight calls");
        reporter
            .set_service_status("", ServingStatus::NotServing)
            .await;
        reporter
            .set_not_serving::<proto::leases_server::LeasesServer<leases::LeasesService>>()
            .await;
        reporter
            .set_not_serving::<proto::fenced_store_server::FencedStoreServer<fenced::FencedStoreService>>()
            .await;
        closing_node.start_closing();
        let _ = signalled_tx.send(());
    };

    let incoming = conn::incoming(listener, config.max_connections);
    let serve = Server::builder()
        .max_concurrent_streams(config.max_streams_per_connection)
        .http2_keepalive_interval(Some(config.keepalive))
        .http2_keepalive_timeout(Some(config.keepalive))
        .layer(layers::RpcMetricsLayer::new(rpc_metrics))
        .layer(layers::InflightLimitLayer::new(config.max_in_flight))
        .layer(wire)
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(leases)
        .add_service(fenced)
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
