//! leasehold's pure core: the lease rules and the one error type.
//!
//! - [`lease`]: leases, tokens, waiters, the fence, and the rule book both
//!   backends call ([`lease::rules`]). Takes `now` as an argument; no I/O,
//!   no async.
//! - [`error`]: the one error type; each variant says whether a retry can
//!   help.
//! - [`clock`]: the only place that reads a clock.
//! - [`record`]: the records both backends store (lease, value, history)
//!   and their byte encodings.
//!
//! This crate depends on nothing but std: the compiler keeps the rules free
//! of tokio, sled and tonic.

#![warn(missing_docs)]

pub mod clock;
pub mod error;
pub mod lease;
pub mod record;

pub use error::{Error, Result};
