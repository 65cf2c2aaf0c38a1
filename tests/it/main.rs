//! The integration tests, one binary (one link per build): the real server
//! over real gRPC on 127.0.0.1, in process or as a child process, with real
//! signals where the behaviour depends on them. `tests/torture.rs` is the
//! one apart (its own harness).
//!
//! Run one group with a filter: `cargo test --test it -- integrity::`.

#[path = "../common/mod.rs"]
mod common;

mod api;
mod attacks;
mod bridge_health;
mod cancel;
mod checkpoint;
mod conformance;
mod crash;
mod delete_job;
mod elector;
mod etcd;
mod etcd_secure;
mod etcd_settings;
mod faults;
mod give_back;
mod health_probe;
mod history;
mod integrity;
mod keepalive;
mod large_values;
mod lifecycle;
mod overload;
mod rolling_restart;
mod run_singleton;
mod security;
mod tools;
mod write_stream;
