//! leasehold: per-job leader election with fencing tokens, and a small
//! key-value store fenced by them, over gRPC.
//!
//! # Code map
//!
//! - [`lease`]: the rules, pure. Leases, tokens, waiters, the fence. Takes
//!   `now` as an argument; no I/O, no async.
//! - [`store`]: durable storage behind a narrow trait; [`store::sled`] is the
//!   only module that names sled.
//! - [`node`]: the single-node coordinator. Owns the lease table behind one
//!   lock, stages changes in the store, group-commits them, and serves
//!   waiters and watchers.
//! - [`etcd`]: the scale-out backend: stateless frontends whose decisions
//!   are etcd transactions; the only module that speaks to etcd.
//! - [`backend`]: the seam the handlers call: the single node or etcd.
//! - [`server`]: gRPC (tonic). Decode and validate, call the node, encode.
//!   One error table, tower layers in front of every handler.
//! - [`client`]: a typed client and the [`client::Elector`].
//! - [`metrics`]: the Prometheus endpoint on the admin port.
//! - [`clock`]: the only place that reads a clock.
//! - [`error`]: the one error type.
//!
//! ARCHITECTURE.md walks through a request and lists the invariants.

#![warn(missing_docs)]

pub mod backend;
pub mod client;
pub mod clock;
pub mod error;
pub mod etcd;
pub mod lease;
pub mod metrics;
pub mod node;
pub mod server;
pub mod store;

/// Code generated from `proto/leasehold/v1/leasehold.proto`.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("leasehold.v1");

    /// The encoded file descriptor set, served by reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("leasehold_descriptor");
}

pub use error::{Error, Result};

/// The README's Rust examples, compiled as doc tests so they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
