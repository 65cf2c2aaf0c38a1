//! leasehold: per-job leader election with fencing tokens, and a small
//! key-value store fenced by them, over gRPC.
//!
//! This crate gathers the workspace's crates under one name:
//!
//! - [`client`] (`leasehold-client`): a typed client and the
//!   [`client::Elector`]. It depends on the contract alone; with
//!   `default-features = false` this crate is the client and nothing else.
//! - [`proto`] (`leasehold-proto`): the generated contract.
//! - [`lease`], [`error`], [`clock`] (`leasehold-core`): the pure rules and
//!   the one error type.
//! - with the `server` feature (the default): [`store`]
//!   (`leasehold-store`), [`node`] (`leasehold-node`, the single node),
//!   [`etcd`] (`leasehold-etcd`, the etcd frontend), and [`backend`],
//!   [`server`], [`admin`], [`metrics`] (`leasehold-server`, with the
//!   vocabulary both backends share, `leasehold-backend`, re-exported in
//!   [`backend`]), and the `leasehold` binary.
//!
//! ARCHITECTURE.md has the code map and the invariants; [`server`]'s docs
//! walk through a request.

pub use leasehold_client as client;
pub use leasehold_core::{clock, error, lease};
pub use leasehold_proto as proto;

#[cfg(feature = "server")]
pub use leasehold_etcd as etcd;
#[cfg(feature = "server")]
pub use leasehold_node as node;
#[cfg(feature = "server")]
pub use leasehold_server::{admin, backend, metrics, proofs, read_budget, server};
#[cfg(feature = "server")]
pub use leasehold_store as store;

pub use error::{Error, Result};

/// The README's Rust examples, compiled as doc tests so they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
