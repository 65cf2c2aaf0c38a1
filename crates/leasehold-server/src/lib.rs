//! leasehold's server: everything that runs in `leasehold serve`.
//!
//! - [`node`]: the single-node coordinator. Owns the lease table behind one
//!   lock, stages changes in the store, group-commits them, and serves
//!   waiters and watchers.
//! - [`etcd`]: the scale-out backend: stateless frontends whose decisions
//!   are etcd transactions; the only module that speaks to etcd.
//! - [`backend`]: the seam the handlers call: the single node or etcd.
//! - [`server`]: gRPC (tonic). Decode and validate, call the node, encode.
//!   One error table, tower layers in front of every handler.
//! - [`metrics`]: the Prometheus text; [`admin`]: the admin port (axum),
//!   with `/metrics` and `/healthz`.
//!
//! The rules come from `leasehold-core`, durability from
//! `leasehold-store`, the contract from `leasehold-proto`; they are
//! re-exported here under the names the server's modules use.

#![warn(missing_docs)]

pub mod admin;
pub mod backend;
pub mod etcd;
pub mod metrics;
pub mod node;
pub mod server;
pub mod status_page;

pub use leasehold_core::{error, lease, record};
pub use leasehold_proto as proto;
pub use leasehold_store as store;

/// The only place the server reads a clock: the core's monotonic clock,
/// and tokio's (the same clock) for timers.
pub mod clock {
    pub use leasehold_core::clock::*;

    /// The current instant on tokio's clock (the same monotonic clock), for
    /// timers.
    pub fn tokio_now() -> tokio::time::Instant {
        tokio::time::Instant::now()
    }
}
