//! The integration tests, one binary (one link per build): the real server
//! over real gRPC on 127.0.0.1, in process or as a child process, with real
//! signals where the behaviour depends on them. `tests/torture.rs` is the
//! one apart (its own harness).
//!
//! Run one group with a filter: `cargo test --test it -- integrity::`.
//!
//! Some of the groups, by what they show:
//!
//! - `conformance`: the same scenarios at the `Backend` boundary (no gRPC)
//!   on the node over `MemoryStore`, the node over sled, and etcd.
//! - `integrity`: every file of a data dir damaged every way, on real
//!   processes; `tools`: restore and recover SIGKILLed at every rename,
//!   sync, unlink, mkdir and write (strace), a foreign backup, each tool on
//!   a live dir, a stalled or killed backup, history across both.
//! - `crash`, `write_stream`: the server SIGKILLed under load; nothing
//!   acknowledged lost, no token repeated. `faults`: the system calls
//!   traced (request, `fdatasync`, reply), every `fdatasync` failed, a
//!   small tmpfs filled, the wall clock moved with libfaketime.
//! - `attacks`, `overload`: each flood of the isolation issue while a
//!   leader renews a 2 s lease and never loses it; the limits and budgets.
//!   `floods`: the floods below gRPC, in raw HTTP/2 frames (requests
//!   pipelined past the stream limit, on both backends; a PING flood;
//!   slow readers of large values): each sent away or capped, the
//!   server's memory bounded, the leader's lease kept.
//! - `security`: every attack the policy and TLS must stop, on a real
//!   server process, with certificates made by the tests
//!   (`common/pki.rs`, rcgen); `attack_script`: all of them, one after
//!   another, against one server, its victims' state unchanged after each.
//! - `etcd`: a real 3-member etcd cluster on 127.0.0.1 and several
//!   frontend processes: one truth across frontends, a frontend or a
//!   member killed or paused under load, a majority stopped, 10,000
//!   waiters. `etcd_secure`: etcd with client TLS, client certificates and
//!   auth on; `etcd_settings`: frontends whose shared settings differ.
//! - `delete_job`, `history`, `cancel`, `give_back`: the new-job floor,
//!   the history, a cancelled waiting Acquire and its give-back, each on
//!   both backends.
//! - `rolling_restart`: two `leasehold run` workers restarted in turn with
//!   SIGTERM, never a leaderless poll of `/metrics`; `health_probe`:
//!   `leasehold health` on both ports, as in the image.
//! - `reclaim`: disk space follows live data: churn with large values and
//!   DeleteJob stays within 4x its live data (and outgrows it with reclaim
//!   off); a start's reclaim SIGKILLed at each of its renames; an etcd
//!   frontend compacting etcd's history.
//! - `api`: the whole API; the test command runs it again with
//!   `LEASEHOLD_TEST_BACKEND=etcd` (every test server an etcd frontend) and
//!   with `LEASEHOLD_TEST_SECURE=1` (TLS and a policy everywhere).

#[path = "../common/mod.rs"]
mod common;

mod api;
mod attack_script;
mod attacks;
mod bridge_health;
mod cancel;
mod chaos;
mod checkpoint;
mod conformance;
mod counted;
mod crash;
mod delete_job;
mod elector;
mod etcd;
mod etcd_groups;
mod etcd_secure;
mod etcd_settings;
mod faults;
mod floods;
mod give_back;
mod handover;
mod health_probe;
mod history;
mod integrity;
mod keepalive;
mod large_values;
mod lifecycle;
mod lock_observe;
mod overload;
mod proofs;
mod reclaim;
mod rolling_restart;
mod run_singleton;
mod security;
mod shards;
mod status_flood;
mod tools;
mod write_stream;
