//! leasehold's server: everything that runs in `leasehold serve` in front
//! of a backend.
//!
//! - [`backend`]: the seam the handlers call: [`backend::Backend`], the
//!   single node (`leasehold-node`) or an etcd frontend
//!   (`leasehold-etcd`). It only dispatches; the vocabulary both backends
//!   speak (`leasehold-backend`) is re-exported there.
//! - [`server`]: gRPC (tonic). Decode and validate, call the backend,
//!   encode. One error table, tower layers in front of every handler,
//!   authentication and the policy (`server::auth`).
//! - [`metrics`]: the Prometheus text; [`admin`]: the admin port (axum),
//!   with `/metrics` and `/healthz`; [`status_page`]: the status page it
//!   serves.
//!
//! The rules come from `leasehold-core`, the contract from
//! `leasehold-proto`; they are re-exported here under the names the
//! server's modules use.

#![warn(missing_docs)]

pub mod admin;
pub mod backend;
pub mod metrics;
pub mod proofs;
pub mod read_budget;
pub mod server;
pub mod status_page;

pub use leasehold_core::{error, lease, record};
pub use leasehold_proto as proto;

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
