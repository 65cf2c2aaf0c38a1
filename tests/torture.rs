//! The torture harness: the real server under random faults, and a checker
//! of the recorded history, in the spirit of Jepsen.
//!
//! The harness starts `leasehold serve` as a child process on a fixed port
//! and several worker processes (this same binary, re-run with `--worker`)
//! that do random `Acquire` (with and without wait), `Renew`, `Release`,
//! `TransferLease` (to the first waiter, who may be on any worker),
//! `CheckedWrite` (with live and with stale tokens) and `Read` on a few
//! jobs and keys, with short TTLs. Meanwhile a nemesis SIGKILLs and restarts
//! the server, SIGSTOPs and SIGCONTs it, and SIGSTOPs and SIGCONTs workers.
//! Every operation is recorded with its invoke and complete times on the
//! machine's monotonic clock (shared by all processes) and its outcome: ok,
//! failed (the server said no, so nothing happened) or unknown (a timeout
//! or a lost connection: it may or may not have happened).
//!
//! The checker then verifies, over the whole history:
//! 1. token uniqueness: no (job, token) granted to two holders, and grants
//!    ordered by token in real time;
//! 2. no early takeover: a grant to B never completes before A's last
//!    acknowledged grant or renewal (invoke time + TTL) has run out, unless
//!    A released first; restarts included. Nor is A's own renewal refused
//!    as lost when it completed before then;
//! 3. no stale write: no accepted write with token T was invoked after a
//!    grant of a higher token had completed;
//! 4. no lost write: per key, a read never returns a version older than a
//!    write that completed before the read began (final reads after a last
//!    SIGKILL included), never two writes with one version, and never a
//!    value nobody wrote;
//! 5. one owner per token: no two holders had writes accepted with one
//!    (job, token).
//!
//! `--shards` runs the same checker over a shard group instead: every
//! worker is a member of the group `torture` (16 shards, the Rust
//! `ShardMember`), and while it owns a shard it writes to the shard's job
//! with the shard's token. Each assignment it is told of is recorded as a
//! grant, invoked when the member asked to join and complete when told. A
//! second nemesis churns the members: SIGKILL and a new member, a member
//! that leaves (its stdin closed) and a new one, SIGSTOP for up to 3 s.
//! So checks 1, 3 and 5 are the fence rule per shard: no shard write
//! accepted from a stale owner, nor from two owners in one token. The run
//! also reports the group's unowned shard-seconds, polled from `GetGroup`
//! every 100 ms.
//!
//! Usage (cargo runs it with no arguments, for the default bounded run):
//!
//! ```text
//! cargo test --test torture -- [--duration SECS] [--workers N] [--seed N]
//!                              [--server-bin PATH] [--break RULES] [--expect-violations]
//!                              [--server-arg ARG]... [--etcd] [--shards]
//! ```
//!
//! `--server-arg` passes one more argument to every `leasehold serve` the
//! harness starts (repeat it for several). `--etcd` runs the same workers
//! and checker against the etcd backend: a 3-member etcd cluster on
//! 127.0.0.1 (Debian's etcd-server) and two `--store etcd` frontends;
//! workers switch frontends when one does not answer, TTLs are whole
//! seconds, and the nemesis SIGKILLs and restarts, or SIGSTOPs and
//! SIGCONTs, a frontend or an etcd member (one at a time, so a majority
//! stays up) instead of the single server.
//!
//! `--break` runs a server built with `--features fault-injection` that
//! breaks rules on purpose (`no-fence`, `early-expiry`, `renew-bumps-token`,
//! `ack-before-sync`); with `--expect-violations` the run succeeds only if
//! the checker finds violations, which shows that it catches real bugs.
//! With `--etcd` too, every frontend breaks the rule (the rules, and their
//! switches, are the core's, the same for both backends); pass the
//! fault-injection build as `--server-bin`.
//!
//! On etcd, `early-expiry` revokes a holding's etcd lease half its TTL
//! after its last grant or renewal through the frontend (etcd keeps a
//! lease at least its minimum TTL, so a shorter etcd lease would not do),
//! and `ack-before-sync` answers a grant or a write before its etcd
//! transaction has committed (sent in the background): a race with another
//! frontend, or a SIGKILL, then shows a token granted twice or a lost
//! write.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::client::{
    Client, ClientError, KeepAlive, KeepAliveRenewal, RenewOutcome, Shard, ShardMember,
    ShardOptions, StreamWrite, WriteOutcome,
};

mod common;

const JOBS: usize = 3;
const KEYS: usize = 3;
const OP_TIMEOUT: Duration = Duration::from_millis(1500);
/// The servers' log filter: errors, and the decisions that end a grant on
/// the server's own initiative (give-backs), shown with any violation.
const SERVER_LOG: &str = "error,leasehold_server::node=info,leasehold_server::etcd=info";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--worker") {
        let id: usize = args[i + 1].parse().expect("worker id");
        let addrs: Vec<SocketAddr> = args[i + 2]
            .split(',')
            .map(|a| a.parse().expect("worker addr"))
            .collect();
        let seed: u64 = args[i + 3].parse().expect("worker seed");
        let etcd = args.get(i + 4).is_some_and(|m| m == "etcd");
        if args.iter().any(|a| a == "shards") {
            shard_worker(id, &addrs, seed, etcd);
        } else {
            worker(id, &addrs, seed, etcd);
        }
        return;
    }
    let opts = Opts::parse(&args);
    let code = run(&opts);
    std::process::exit(code);
}

struct Opts {
    duration: Duration,
    workers: usize,
    seed: u64,
    server_bin: PathBuf,
    break_rules: Option<String>,
    expect_violations: bool,
    server_args: Vec<String>,
    etcd: bool,
    shards: bool,
}

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut o = Opts {
            duration: Duration::from_secs(150),
            workers: 5,
            seed: mono_ns(),
            server_bin: PathBuf::from(env!("CARGO_BIN_EXE_leasehold")),
            break_rules: None,
            expect_violations: false,
            server_args: Vec::new(),
            etcd: false,
            shards: false,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || {
                it.next()
                    .cloned()
                    .unwrap_or_else(|| panic!("{a} needs a value"))
            };
            match a.as_str() {
                "--duration" => {
                    o.duration = Duration::from_secs(val().parse().expect("--duration SECS"))
                }
                "--workers" => o.workers = val().parse().expect("--workers N"),
                "--seed" => o.seed = val().parse().expect("--seed N"),
                "--server-bin" => o.server_bin = PathBuf::from(val()),
                "--break" => o.break_rules = Some(val()),
                "--expect-violations" => o.expect_violations = true,
                "--server-arg" => o.server_args.push(val()),
                "--etcd" => o.etcd = true,
                "--shards" => o.shards = true,
                // Flags cargo's test runner passes; nothing to do.
                _ => {}
            }
        }
        o
    }
}

/// Nanoseconds on CLOCK_MONOTONIC: one clock for every process here.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// xorshift64*: reproducible randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }
}

// ---- The history ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Renew,
    Release,
    /// TransferLease to the first waiter in line.
    Transfer,
    Write,
    Read,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    Fail(String),
    Unknown,
}

/// One operation, as one line of a worker's output.
#[derive(Debug, Clone)]
struct Op {
    worker: usize,
    kind: Kind,
    job: String,
    holder: String,
    /// The token sent (Renew, Release, Write) or granted (Acquire).
    token: u64,
    ttl_ms: u64,
    key: String,
    /// The value written, or read.
    value: String,
    invoke: u64,
    complete: u64,
    outcome: Outcome,
    /// Acquire: granted. Read: found.
    flag: bool,
    /// Write: the new version. Read: the version read.
    version: u64,
}

impl Op {
    fn line(&self) -> String {
        let kind = match self.kind {
            Kind::Acquire => "acquire",
            Kind::Renew => "renew",
            Kind::Release => "release",
            Kind::Transfer => "transfer",
            Kind::Write => "write",
            Kind::Read => "read",
        };
        let outcome = match &self.outcome {
            Outcome::Ok => "ok".to_owned(),
            Outcome::Fail(r) => format!("fail:{r}"),
            Outcome::Unknown => "unknown".to_owned(),
        };
        let dash = |s: &str| {
            if s.is_empty() {
                "-".to_owned()
            } else {
                s.to_owned()
            }
        };
        format!(
            "OP {} {kind} {} {} {} {} {} {} {} {} {outcome} {} {}",
            self.worker,
            self.job,
            dash(&self.holder),
            self.token,
            self.ttl_ms,
            dash(&self.key),
            dash(&self.value),
            self.invoke,
            self.complete,
            self.flag as u8,
            self.version
        )
    }

    fn parse(line: &str) -> Option<Op> {
        let w: Vec<&str> = line.split(' ').collect();
        if w.len() != 14 || w[0] != "OP" {
            return None;
        }
        let undash = |s: &str| {
            if s == "-" {
                String::new()
            } else {
                s.to_owned()
            }
        };
        Some(Op {
            worker: w[1].parse().ok()?,
            kind: match w[2] {
                "acquire" => Kind::Acquire,
                "renew" => Kind::Renew,
                "release" => Kind::Release,
                "transfer" => Kind::Transfer,
                "write" => Kind::Write,
                "read" => Kind::Read,
                _ => return None,
            },
            job: w[3].to_owned(),
            holder: undash(w[4]),
            token: w[5].parse().ok()?,
            ttl_ms: w[6].parse().ok()?,
            key: undash(w[7]),
            value: undash(w[8]),
            invoke: w[9].parse().ok()?,
            complete: w[10].parse().ok()?,
            outcome: match w[11] {
                "ok" => Outcome::Ok,
                "unknown" => Outcome::Unknown,
                f => Outcome::Fail(f.strip_prefix("fail:")?.to_owned()),
            },
            flag: w[12] == "1",
            version: w[13].parse().ok()?,
        })
    }
}

fn outcome_of(e: &ClientError) -> Outcome {
    match e {
        ClientError::LeaseLost { .. } => Outcome::Fail("LEASE_LOST".into()),
        ClientError::Fenced { .. } => Outcome::Fail("FENCED".into()),
        ClientError::InvalidArgument { .. } | ClientError::UnknownToken { .. } => {
            Outcome::Fail("INVALID".into())
        }
        // Refused by a policy: nothing changed (the torture servers have none).
        ClientError::Unauthenticated(_) => Outcome::Fail("UNAUTHENTICATED".into()),
        ClientError::PermissionDenied { .. } => Outcome::Fail("PERMISSION_DENIED".into()),
        // Over a limit on state: nothing changed.
        ClientError::QuotaExceeded { .. } => Outcome::Fail("QUOTA_EXCEEDED".into()),
        ClientError::JobInUse(_) => Outcome::Fail("JOB_IN_USE".into()),
        ClientError::NoSuccessor(_) => Outcome::Fail("NO_SUCCESSOR".into()),
        ClientError::NotLeader => Outcome::Fail("NOT_LEADER".into()),
        // The change may or may not have happened.
        ClientError::Unavailable(_) | ClientError::Other(_) => Outcome::Unknown,
    }
}

/// One renewal over the worker's `KeepAlive` stream to this frontend
/// (opened when there is none, dropped after an error), its outcome as a
/// unary `Renew` would give it: the token the server says we hold. A
/// stream that lives across renewals is what puts its leases on a shared
/// etcd lease in etcd mode.
async fn stream_renew(
    ka: &mut Option<KeepAlive>,
    c: &Client,
    job: &str,
    holder: &str,
    token: u64,
    ttl: Duration,
) -> Result<u64, ClientError> {
    if ka.is_none() {
        *ka = Some(c.keep_alive().await?);
    }
    let stream = ka.as_mut().expect("opened");
    let out = match stream
        .renew(&[KeepAliveRenewal::new(job, holder, token, ttl)])
        .await
    {
        Ok(out) => out,
        Err(e) => {
            *ka = None;
            return Err(e);
        }
    };
    match out.into_iter().next() {
        Some(RenewOutcome::Renewed(r)) => Ok(r.lease.token),
        Some(RenewOutcome::LeaseLost(l)) => Err(ClientError::LeaseLost {
            message: format!("{job}: lost (KeepAlive)"),
            current_token: Some(l.token),
        }),
        Some(RenewOutcome::UnknownToken(_)) => Err(ClientError::UnknownToken {
            message: format!("{job}: token {token} unknown (KeepAlive)"),
            current_token: None,
        }),
        Some(RenewOutcome::InvalidArgument { field, message }) => {
            Err(ClientError::InvalidArgument {
                field: Some(field),
                message,
            })
        }
        None => Err(ClientError::Other(tonic::Status::internal(
            "an empty KeepAlive answer",
        ))),
    }
}

/// One write over a fresh `WriteStream`, its outcome as a unary
/// `CheckedWrite` would give it.
async fn stream_write(
    c: &Client,
    job: &str,
    token: u64,
    key: &[u8],
    value: Vec<u8>,
) -> Result<u64, ClientError> {
    let mut ws = c.write_stream().await?;
    let out = ws
        .write(&[StreamWrite::put(job, token, key, value)])
        .await?;
    match out.into_iter().next() {
        Some(WriteOutcome::Written { version }) => Ok(version),
        Some(WriteOutcome::Fenced {
            current_token,
            message,
        }) => Err(ClientError::Fenced {
            message,
            current_token: Some(current_token),
        }),
        Some(WriteOutcome::UnknownToken { message, .. }) => Err(ClientError::InvalidArgument {
            field: Some("token".into()),
            message,
        }),
        Some(WriteOutcome::InvalidArgument { field, message }) => {
            Err(ClientError::InvalidArgument {
                field: Some(field),
                message,
            })
        }
        Some(WriteOutcome::QuotaExceeded { message }) => Err(ClientError::QuotaExceeded {
            message,
            limit: Some("--max-keys-per-job".into()),
            max: None,
        }),
        None => Err(ClientError::Unavailable("no result".into())),
    }
}

// ---- A worker process ----

/// `addrs`: the servers to use, moving to the next one after an operation
/// whose outcome is unknown. `etcd`: TTLs in whole seconds (2 or 3 s).
fn worker(id: usize, addrs: &[SocketAddr], seed: u64, etcd: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The harness closes our stdin to say "finish".
    let done = Arc::new(AtomicBool::new(false));
    {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut sink = String::new();
            while std::io::stdin()
                .read_line(&mut sink)
                .map(|n| n > 0)
                .unwrap_or(false)
            {}
            done.store(true, Ordering::SeqCst);
        });
    }
    rt.block_on(async move {
        let clients: Vec<Client> = addrs
            .iter()
            .map(|addr| {
                let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                    .unwrap()
                    .connect_timeout(Duration::from_millis(500))
                    .timeout(OP_TIMEOUT)
                    .connect_lazy();
                Client::from_channel(channel)
            })
            .collect();
        let mut at = 0;
        let mut rng = Rng(seed | 1);
        let holder = format!("w{id}@{seed:x}");
        let mut held: Option<(String, u64, u64)> = None; // job, token, ttl_ms
        let mut promised_at = 0u64; // when the last grant or renewal was invoked
        let mut old_tokens: Vec<(String, u64)> = Vec::new();
        // The worker's KeepAlive stream to each frontend, once opened.
        let mut streams: Vec<Option<KeepAlive>> = (0..clients.len()).map(|_| None).collect();
        let mut n = 0u64;
        let out = std::io::stdout();
        while !done.load(Ordering::SeqCst) {
            let c = &clients[at];
            n += 1;
            let job = format!("job{}", rng.below(JOBS as u64));
            let key = format!("k{}", rng.below(KEYS as u64));
            let mut op = Op {
                worker: id,
                kind: Kind::Read,
                job: job.clone(),
                holder: holder.clone(),
                token: 0,
                ttl_ms: 0,
                key: String::new(),
                value: String::new(),
                invoke: 0,
                complete: 0,
                outcome: Outcome::Ok,
                flag: false,
                version: 0,
            };
            let roll = rng.below(100);
            match (&held, roll) {
                (None, 0..=54) => {
                    let ttl_ms = if etcd {
                        1000 * rng.range(2, 4)
                    } else {
                        rng.range(300, 900)
                    };
                    let wait = if rng.below(2) == 0 {
                        0
                    } else {
                        rng.range(50, 1200)
                    };
                    op.kind = Kind::Acquire;
                    op.ttl_ms = ttl_ms;
                    op.invoke = mono_ns();
                    let r = c
                        .acquire(
                            &job,
                            &holder,
                            Duration::from_millis(ttl_ms),
                            Duration::from_millis(wait),
                        )
                        .await;
                    op.complete = mono_ns();
                    match r {
                        Ok(a) => {
                            op.flag = a.acquired;
                            op.token = a.lease.token;
                            if a.acquired {
                                held = Some((job.clone(), a.lease.token, ttl_ms));
                                promised_at = op.invoke;
                            }
                        }
                        Err(e) => op.outcome = outcome_of(&e),
                    }
                }
                (Some((hj, token, ttl_ms)), 0..=19) => {
                    op.kind = Kind::Renew;
                    op.job = hj.clone();
                    op.token = *token;
                    op.ttl_ms = *ttl_ms;
                    // etcd's TTLs are seconds: fewer of its workers' ops wait.
                    if roll < if etcd { 1 } else { 4 } {
                        // A late renewal, well inside the TTL of the last
                        // promise: the lease must still be there (check 2).
                        let at = promised_at + *ttl_ms * rng.range(55, 80) * 10_000;
                        let now = mono_ns();
                        if at > now {
                            tokio::time::sleep(Duration::from_nanos(at - now)).await;
                        }
                    }
                    op.invoke = mono_ns();
                    let ttl = Duration::from_millis(*ttl_ms);
                    // Every other worker renews over its KeepAlive stream
                    // to this frontend.
                    let r = if id % 2 == 0 {
                        c.renew(hj, &holder, *token, ttl).await.map(|l| l.token)
                    } else {
                        stream_renew(&mut streams[at], c, hj, &holder, *token, ttl).await
                    };
                    op.complete = mono_ns();
                    match r {
                        Ok(t) => {
                            op.version = t; // the token the server says we hold
                            promised_at = op.invoke;
                        }
                        Err(e) => {
                            op.outcome = outcome_of(&e);
                            if op.outcome != Outcome::Unknown {
                                old_tokens.push((hj.clone(), *token));
                                held = None;
                            }
                        }
                    }
                }
                (Some((hj, token, _)), 20..=23) => {
                    // A hand-over to whoever waits first (often nobody).
                    op.kind = Kind::Transfer;
                    op.job = hj.clone();
                    op.token = *token;
                    op.invoke = mono_ns();
                    let r = c.transfer_lease(hj, &holder, *token, None, None).await;
                    op.complete = mono_ns();
                    match r {
                        Ok(next) => {
                            op.version = next.token;
                            old_tokens.push((hj.clone(), *token));
                            held = None;
                        }
                        // Nobody waits: still ours.
                        Err(ClientError::NoSuccessor(_)) => {
                            op.outcome = Outcome::Fail("NO_SUCCESSOR".into())
                        }
                        Err(e) => {
                            op.outcome = outcome_of(&e);
                            old_tokens.push((hj.clone(), *token));
                            held = None;
                        }
                    }
                }
                (Some((hj, token, _)), 24..=29) => {
                    op.kind = Kind::Release;
                    op.job = hj.clone();
                    op.token = *token;
                    old_tokens.push((hj.clone(), *token));
                    op.invoke = mono_ns();
                    let r = c.release(hj, &holder, *token).await;
                    op.complete = mono_ns();
                    if let Err(e) = r {
                        op.outcome = outcome_of(&e);
                    }
                    held = None;
                }
                (Some((hj, token, _)), 30..=69) => {
                    // A write with our live token, or now and then with a
                    // stale one (a paused leader's work in flight).
                    let (wj, wt) = match old_tokens.last() {
                        Some(old) if rng.below(5) == 0 => old.clone(),
                        _ => (hj.clone(), *token),
                    };
                    op.kind = Kind::Write;
                    op.job = wj.clone();
                    op.token = wt;
                    op.key = key.clone();
                    op.value = format!("w{id}.{seed:x}.{n}");
                    op.invoke = mono_ns();
                    let value = op.value.clone().into_bytes();
                    // Half the writes go over a WriteStream, opened for the
                    // write: the same rules, checked by the same checker.
                    let r = if rng.below(2) == 0 {
                        c.checked_write(&wj, wt, key.as_bytes(), value).await
                    } else {
                        stream_write(c, &wj, wt, key.as_bytes(), value).await
                    };
                    op.complete = mono_ns();
                    match r {
                        Ok(v) => op.version = v,
                        Err(e) => {
                            op.outcome = outcome_of(&e);
                            if op.outcome == Outcome::Fail("FENCED".into())
                                && wj == *hj
                                && wt == *token
                            {
                                old_tokens.push((hj.clone(), *token));
                                held = None;
                            }
                        }
                    }
                }
                _ => {
                    op.kind = Kind::Read;
                    op.holder.clear();
                    op.key = key.clone();
                    op.invoke = mono_ns();
                    let r = c.read(&job, key.as_bytes()).await;
                    op.complete = mono_ns();
                    match r {
                        Ok(v) => {
                            op.flag = v.found;
                            op.version = v.version;
                            op.token = v.token;
                            op.value = String::from_utf8_lossy(&v.value).into_owned();
                        }
                        Err(e) => op.outcome = outcome_of(&e),
                    }
                }
            }
            if op.outcome == Outcome::Unknown {
                at = (at + 1) % clients.len();
            }
            let _ = writeln!(out.lock(), "{}", op.line());
            tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
        }
    });
}

// ---- A shard member process (--shards) ----

/// The group the `--shards` workers join, and its count of shards.
const GROUP: &str = "torture";
const GROUP_SHARDS: u32 = 16;

/// A member of [`GROUP`] until its stdin closes (then it leaves): while it
/// owns a shard, it writes to the shard's job with the shard's token, and
/// records each assignment it is told of as a grant and each write.
fn shard_worker(id: usize, addrs: &[SocketAddr], seed: u64, etcd: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    std::thread::spawn(move || {
        let mut sink = String::new();
        while std::io::stdin()
            .read_line(&mut sink)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        let _ = done_tx.send(true);
    });
    let addrs = addrs.to_vec();
    rt.block_on(async move {
        let ttl = Duration::from_secs(if etcd { 2 } else { 1 });
        let mut at = id % addrs.len();
        while !*done_rx.borrow() {
            // No per-call timeout: the Join stream lives as long as the
            // membership. The writes have their own.
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", addrs[at]))
                .unwrap()
                .connect_timeout(Duration::from_millis(500))
                .connect_lazy();
            let c = Client::from_channel(channel);
            let options = ShardOptions {
                ttl,
                revoke_timeout: Some(ttl),
            };
            // A grant to this member is made after it asked to join and
            // before it is told: its interval (the checker's real-time
            // order of grants must not take the moment it was told, late
            // after a pause, for the moment it was made).
            let asked = mono_ns();
            let member = match ShardMember::join(
                &c,
                GROUP,
                &format!("w{id}"),
                GROUP_SHARDS,
                options,
            )
            .await
            {
                Ok(m) => m,
                Err(_) => {
                    at = (at + 1) % addrs.len();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let holder = member.member().to_owned();
            let seq = Arc::new(std::sync::atomic::AtomicU64::new(seed << 20));
            let work = |s: Shard| {
                let (c, holder, seq) = (c.clone(), holder.clone(), seq.clone());
                async move {
                    let told = mono_ns();
                    let grant = Op {
                        worker: id,
                        kind: Kind::Acquire,
                        job: s.job.clone(),
                        holder: holder.clone(),
                        token: s.token,
                        ttl_ms: 0,
                        key: String::new(),
                        value: String::new(),
                        invoke: asked,
                        complete: told,
                        outcome: Outcome::Ok,
                        flag: true,
                        version: 0,
                    };
                    println!("{}", grant.line());
                    loop {
                        let n = seq.fetch_add(1, Ordering::SeqCst);
                        let key = format!("k{}", n % KEYS as u64);
                        let value = format!("w{id}-{n}");
                        let mut op = Op {
                            kind: Kind::Write,
                            key: key.clone(),
                            value: value.clone(),
                            flag: false,
                            invoke: mono_ns(),
                            ..grant.clone()
                        };
                        let r = tokio::time::timeout(
                            OP_TIMEOUT,
                            c.checked_write(&s.job, s.token, key.as_bytes(), value.into_bytes()),
                        )
                        .await;
                        op.complete = mono_ns();
                        match r {
                            Ok(Ok(v)) => op.version = v,
                            Ok(Err(e)) => op.outcome = outcome_of(&e),
                            Err(_) => op.outcome = Outcome::Unknown,
                        }
                        println!("{}", op.line());
                        tokio::time::sleep(Duration::from_millis(10 + n % 40)).await;
                    }
                }
            };
            let mut done = done_rx.clone();
            let stop = async move {
                let _ = done.wait_for(|d| *d).await;
            };
            if member.run(work, stop).await.is_err() {
                at = (at + 1) % addrs.len();
            }
        }
    });
}

// ---- The harness ----

struct Server {
    bin: PathBuf,
    data: PathBuf,
    addr: SocketAddr,
    break_rules: Option<String>,
    /// More arguments for `leasehold serve` (--server-arg, or the etcd
    /// frontend's flags).
    args: Vec<String>,
    child: Option<Child>,
}

impl Server {
    fn start(&mut self) {
        for attempt in 0..50 {
            let mut cmd = Command::new(&self.bin);
            cmd.args([
                "serve",
                "--listen",
                &self.addr.to_string(),
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(&self.data)
            .args(&self.args)
            .env("RUST_LOG", SERVER_LOG)
            .stdout(Stdio::piped())
            .stderr(self.log_file());
            if let Some(r) = &self.break_rules {
                cmd.env("LEASEHOLD_BREAK", r);
            }
            let mut child = cmd.spawn().expect("start the server");
            let mut line = String::new();
            let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
            if line.contains("listening") {
                self.child = Some(child);
                return;
            }
            // The port may still be held for a moment after a kill.
            let status = child.wait().unwrap();
            eprintln!("server did not start (attempt {attempt}, {status}); retrying");
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the server failed to start 50 times: is the data dir still readable after SIGKILL?"
        );
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Every run of this server appends its log here.
    fn log_path(&self) -> PathBuf {
        self.data
            .with_file_name(format!("server-{}.log", self.addr.port()))
    }

    fn log_file(&self) -> Stdio {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null())
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) };
}

struct Workers {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Counts of the etcd-mode nemesis's faults.
#[derive(Default)]
struct EtcdFaults {
    member_kills: u64,
    member_pauses: u64,
}

/// One fault of the etcd-mode nemesis: a frontend SIGKILLed and
/// restarted, or paused; or an etcd member SIGKILLed and restarted, or
/// paused. One at a time, so a majority of etcd stays up.
fn etcd_fault(
    rng: &mut Rng,
    frontends: &mut [Server],
    cluster: &mut common::etcd::EtcdCluster,
    kills: &mut u64,
    pauses: &mut u64,
    faults: &mut EtcdFaults,
) {
    let roll = rng.below(100);
    if roll < 50 {
        let f = &mut frontends[rng.below(frontends.len() as u64) as usize];
        if roll < 25 {
            f.kill9();
            f.start();
            *kills += 1;
        } else {
            let pid = f.pid();
            signal(pid, libc::SIGSTOP);
            std::thread::sleep(Duration::from_millis(rng.range(100, 1000)));
            signal(pid, libc::SIGCONT);
            *pauses += 1;
        }
        return;
    }
    let m = rng.below(3) as usize;
    if roll < 75 {
        cluster.kill(m);
        std::thread::sleep(Duration::from_millis(rng.range(200, 1500)));
        cluster.restart(m);
        faults.member_kills += 1;
    } else {
        cluster.pause(m);
        std::thread::sleep(Duration::from_millis(rng.range(200, 1500)));
        cluster.resume(m);
        faults.member_pauses += 1;
    }
    cluster.wait_ready(Duration::from_secs(30));
}

fn run(o: &Opts) -> i32 {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = o.etcd.then(|| common::etcd::EtcdCluster::start(3));
    println!(
        "torture: {} workers, {:?}, seed {}, server {}{}{}",
        o.workers,
        o.duration,
        o.seed,
        o.server_bin.display(),
        o.break_rules
            .as_ref()
            .map(|r| format!(", BREAKING {r}"))
            .unwrap_or_default(),
        cluster
            .as_ref()
            .map(|c| format!(", etcd: 2 frontends on {}", c.endpoints_arg()))
            .unwrap_or_default()
    );
    let mut servers: Vec<Server> = Vec::new();
    for _ in 0..if o.etcd { 2 } else { 1 } {
        let mut args = o.server_args.clone();
        if let Some(c) = &cluster {
            args.extend(
                [
                    "--store",
                    "etcd",
                    "--etcd-endpoints",
                    &c.endpoints_arg(),
                    "--etcd-prefix",
                    "torture/",
                    "--etcd-session-ttl",
                    "2s",
                ]
                .map(String::from),
            );
        }
        let mut server = Server {
            bin: o.server_bin.clone(),
            data: dir.path().join("data"),
            addr: free_addr(),
            break_rules: o.break_rules.clone(),
            args,
            child: None,
        };
        server.start();
        servers.push(server);
    }
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let addr_list = addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");

    let history: Arc<Mutex<Vec<Op>>> = Arc::default();
    let me = std::env::current_exe().unwrap();
    let mut w = Workers {
        children: Vec::new(),
        stdins: Vec::new(),
        readers: Vec::new(),
    };
    let mut rng = Rng(o.seed | 1);
    let spawn = {
        let (me, addr_list, history) = (me.clone(), addr_list.clone(), history.clone());
        let (etcd, shards) = (o.etcd, o.shards);
        move |id: usize, seed: u64| -> (Child, Option<ChildStdin>, std::thread::JoinHandle<()>) {
            let mut child = Command::new(&me)
                .args(["--worker", &id.to_string(), &addr_list, &seed.to_string()])
                .args(etcd.then_some("etcd"))
                .args(shards.then_some("shards"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let out = child.stdout.take().unwrap();
            let h = history.clone();
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Some(op) = Op::parse(&line) {
                        h.lock().unwrap().push(op);
                    }
                }
            });
            let stdin = child.stdin.take();
            (child, stdin, reader)
        }
    };
    for id in 0..o.workers {
        let (child, stdin, reader) = spawn(id, rng.next());
        w.readers.push(reader);
        w.stdins.push(stdin);
        w.children.push(child);
    }

    // The nemeses: one for the server, one for the workers, at once.
    let stop = Arc::new(AtomicBool::new(false));
    let worker_pauses = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let churn = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let pauser = {
        let (stop, count, churn) = (stop.clone(), worker_pauses.clone(), churn.clone());
        let mut rng = Rng(rng.next() | 1);
        let shards = o.shards;
        let mut next_id = o.workers;
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(rng.range(200, 1000)));
                let i = rng.below(w.children.len() as u64) as usize;
                let roll = rng.below(100);
                if shards && roll >= 40 {
                    // A member killed, or one that leaves; a new one joins.
                    if roll < 70 {
                        let _ = w.children[i].kill();
                    } else {
                        drop(w.stdins[i].take());
                    }
                    wait_or_kill(&mut w.children[i], Duration::from_secs(10));
                    let (child, stdin, reader) = spawn(next_id, rng.next());
                    next_id += 1;
                    w.children[i] = child;
                    w.stdins[i] = stdin;
                    w.readers.push(reader);
                    churn.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let pid = w.children[i].id() as i32;
                signal(pid, libc::SIGSTOP);
                let most = if shards { 3000 } else { 2000 };
                std::thread::sleep(Duration::from_millis(rng.range(300, most)));
                signal(pid, libc::SIGCONT);
                count.fetch_add(1, Ordering::SeqCst);
            }
            w
        })
    };
    // The group's unowned shard-seconds, from GetGroup every 100 ms.
    let unowned = o.shards.then(|| {
        let (stop, addr) = (stop.clone(), addrs[0]);
        std::thread::spawn(move || -> (f64, u32) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                    .unwrap()
                    .timeout(Duration::from_millis(500))
                    .connect_lazy();
                let c = Client::from_channel(channel);
                let (mut seconds, mut most) = (0.0, 0u32);
                let mut last: Option<(std::time::Instant, u32)> = None;
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(g) = c.get_group(GROUP).await {
                        let now = std::time::Instant::now();
                        let n = if g.shards == 0 {
                            0
                        } else {
                            g.owners.iter().filter(|o| o.member.is_empty()).count() as u32
                        };
                        if let Some((t, m)) = last {
                            seconds += f64::from(m) * (now - t).as_secs_f64();
                        }
                        most = most.max(n);
                        last = Some((now, n));
                    } else {
                        last = None;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                (seconds, most)
            })
        })
    });
    let (mut kills, mut server_pauses) = (0u64, 0u64);
    let mut etcd_faults = EtcdFaults::default();
    let start = std::time::Instant::now();
    let mut next_report = Duration::from_secs(15);
    // A single server that breaks a rule on purpose is faulted less often:
    // each restart gives every lease a fresh TTL and leaves calls unknown,
    // which hides an early expiry (one run of 20 s caught none at the full
    // pace). On etcd, frontend kills are what expose ack-before-sync.
    let pace = if o.break_rules.is_some() && cluster.is_none() {
        (1000, 3000)
    } else {
        (100, 700)
    };
    while start.elapsed() < o.duration {
        std::thread::sleep(Duration::from_millis(rng.range(pace.0, pace.1)));
        if let Some(c) = &mut cluster {
            etcd_fault(
                &mut rng,
                &mut servers,
                c,
                &mut kills,
                &mut server_pauses,
                &mut etcd_faults,
            );
        } else if rng.below(100) < 55 {
            let server = &mut servers[0];
            server.kill9();
            server.start();
            kills += 1;
        } else {
            let pid = servers[0].pid();
            signal(pid, libc::SIGSTOP);
            std::thread::sleep(Duration::from_millis(rng.range(100, 1000)));
            signal(pid, libc::SIGCONT);
            server_pauses += 1;
        }
        if start.elapsed() >= next_report {
            println!(
                "torture: {:>4.0?} {} ops, {kills} kills, {server_pauses} server pauses, {} worker pauses{}",
                start.elapsed(),
                history.lock().unwrap().len(),
                worker_pauses.load(Ordering::SeqCst),
                etcd_summary(&cluster, &etcd_faults)
            );
            next_report += Duration::from_secs(15);
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut w = pauser.join().unwrap();
    let unowned = unowned.map(|u| u.join().unwrap());
    let worker_pauses = worker_pauses.load(Ordering::SeqCst);
    let churn = churn.load(Ordering::SeqCst);

    // Stop the workers, then crash the server once more and read every key.
    for s in &mut w.stdins {
        drop(s.take());
    }
    for c in &mut w.children {
        wait_or_kill(c, Duration::from_secs(10));
    }
    for r in w.readers.drain(..) {
        let _ = r.join();
    }
    for server in &mut servers {
        server.kill9();
        server.start();
        kills += 1;
    }
    let finals = if o.shards {
        Vec::new()
    } else {
        final_reads(addrs[0])
    };
    for server in &mut servers {
        server.kill9();
    }

    let mut ops = std::mem::take(&mut *history.lock().unwrap());
    ops.extend(finals);
    let violations = check(&ops);
    let ok = ops.iter().filter(|o| o.outcome == Outcome::Ok).count();
    let unknown = ops.iter().filter(|o| o.outcome == Outcome::Unknown).count();
    let grants = ops
        .iter()
        .filter(|o| o.kind == Kind::Acquire && o.flag)
        .count();
    let accepted = ops
        .iter()
        .filter(|o| o.kind == Kind::Write && o.outcome == Outcome::Ok)
        .count();
    let fenced = ops
        .iter()
        .filter(|o| o.outcome == Outcome::Fail("FENCED".into()))
        .count();
    let handed = ops
        .iter()
        .filter(|o| o.kind == Kind::Transfer && o.outcome == Outcome::Ok)
        .count();
    println!(
        "torture: {} ops ({ok} ok, {unknown} unknown), {grants} grants ({handed} by transfer), \
         {accepted} accepted writes, {fenced} fenced; {kills} kills, {server_pauses} server pauses, {worker_pauses} worker pauses{}; \
         {} violations",
        ops.len(),
        etcd_summary(&cluster, &etcd_faults),
        violations.len()
    );
    if let Some((seconds, most)) = unowned {
        println!(
            "torture: shards: {churn} members killed or left and replaced; {seconds:.1} unowned \
             shard-seconds over the run (at most {most} of {GROUP_SHARDS} unowned at once)"
        );
    }
    for v in violations.iter().take(20) {
        println!("VIOLATION {v}");
    }
    if !violations.is_empty() && !o.expect_violations {
        // What the servers said: give-backs, errors (monotonic times are
        // not in the log; its wall-clock times order the lines).
        for s in &servers {
            let log = std::fs::read_to_string(s.log_path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            println!(
                "torture: the log of the server on port {} ({} lines, the last 60):",
                s.addr.port(),
                lines.len()
            );
            for l in &lines[lines.len().saturating_sub(60)..] {
                println!("  {l}");
            }
        }
    }
    let passed = if o.expect_violations {
        !violations.is_empty()
    } else {
        violations.is_empty() && grants > 0 && accepted > 0
    };
    if o.expect_violations {
        println!(
            "torture: the checker {} the broken rule",
            if passed { "caught" } else { "did NOT catch" }
        );
    }
    println!("torture: {} passed, {} failed", passed as u8, !passed as u8);
    if passed {
        0
    } else {
        1
    }
}

fn etcd_summary(cluster: &Option<common::etcd::EtcdCluster>, f: &EtcdFaults) -> String {
    match cluster {
        Some(_) => format!(
            " (kills and server pauses are of frontends), {} etcd member kills, {} etcd member pauses",
            f.member_kills, f.member_pauses
        ),
        None => String::new(),
    }
}

fn wait_or_kill(c: &mut Child, d: Duration) {
    let t = std::time::Instant::now();
    while t.elapsed() < d {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

fn final_reads(addr: SocketAddr) -> Vec<Op> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = Client::connect(&format!("http://{addr}")).await.unwrap();
        let mut out = Vec::new();
        for j in 0..JOBS {
            for k in 0..KEYS {
                let (job, key) = (format!("job{j}"), format!("k{k}"));
                let invoke = mono_ns();
                let v = c.read(&job, key.as_bytes()).await.expect("final read");
                out.push(Op {
                    worker: usize::MAX,
                    kind: Kind::Read,
                    job,
                    holder: String::new(),
                    token: v.token,
                    ttl_ms: 0,
                    key,
                    value: String::from_utf8_lossy(&v.value).into_owned(),
                    invoke,
                    complete: mono_ns(),
                    outcome: Outcome::Ok,
                    flag: v.found,
                    version: v.version,
                });
            }
        }
        out
    })
}

// ---- The checker ----

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Every violation of the four properties in `ops`; see the module docs.
fn check(ops: &[Op]) -> Vec<String> {
    let mut v = Vec::new();
    let ok = |o: &&Op| o.outcome == Outcome::Ok;
    let grants: Vec<&Op> = ops
        .iter()
        .filter(ok)
        .filter(|o| o.kind == Kind::Acquire && o.flag)
        .collect();

    // 1. Token uniqueness, and real-time order of grants.
    let mut holders: HashMap<(&str, u64), HashSet<&str>> = HashMap::new();
    for g in &grants {
        holders
            .entry((&g.job, g.token))
            .or_default()
            .insert(&g.holder);
    }
    for ((job, token), hs) in &holders {
        if hs.len() > 1 {
            v.push(format!(
                "token {token} of {job} was granted to {} holders: {hs:?}",
                hs.len()
            ));
        }
    }
    let mut by_job: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for g in &grants {
        by_job.entry(&g.job).or_default().push(g);
    }
    for (job, gs) in &by_job {
        for a in gs {
            for b in gs {
                if a.complete < b.invoke && a.token > b.token {
                    v.push(format!(
                        "{job}: grant of token {} completed at {:.1} ms, before a later grant of older token {} was invoked at {:.1} ms",
                        a.token,
                        ms(a.complete),
                        b.token,
                        ms(b.invoke)
                    ));
                }
            }
        }
    }
    // A renewal never changes the token.
    for r in ops.iter().filter(ok).filter(|o| o.kind == Kind::Renew) {
        if r.version != r.token {
            v.push(format!(
                "{}: renewal of token {} by {} answered token {}",
                r.job, r.token, r.holder, r.version
            ));
        }
    }

    // A transfer hands over the next token, never another.
    for t in ops.iter().filter(ok).filter(|o| o.kind == Kind::Transfer) {
        if t.version != t.token + 1 {
            v.push(format!(
                "{}: transfer of token {} by {} granted token {}, not the next",
                t.job, t.token, t.holder, t.version
            ));
        }
    }

    // 5. One owner per token: writes accepted with one (job, token) came
    // from one holder.
    let mut writers: BTreeMap<(&str, u64), HashSet<&str>> = BTreeMap::new();
    for w in ops
        .iter()
        .filter(ok)
        .filter(|o| o.kind == Kind::Write && !o.holder.is_empty())
    {
        writers
            .entry((&w.job, w.token))
            .or_default()
            .insert(&w.holder);
    }
    for ((job, token), hs) in &writers {
        if hs.len() > 1 {
            v.push(format!(
                "{job}: writes with token {token} were accepted from {} holders: {hs:?}",
                hs.len()
            ));
        }
    }

    // 2. No early takeover.
    let promises: Vec<&Op> = ops
        .iter()
        .filter(ok)
        .filter(|o| (o.kind == Kind::Acquire && o.flag) || o.kind == Kind::Renew)
        .collect();
    // A transfer that did not fail ended the holding as a release does.
    let releases: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            matches!(o.kind, Kind::Release | Kind::Transfer)
                && !matches!(o.outcome, Outcome::Fail(_))
        })
        .collect();
    for g in &grants {
        for p in promises
            .iter()
            .filter(|p| p.job == g.job && p.holder != g.holder && p.token < g.token)
        {
            let until = p.invoke + p.ttl_ms * 1_000_000;
            if p.invoke < g.complete && g.complete < until {
                let released = releases.iter().any(|r| {
                    r.job == p.job
                        && r.holder == p.holder
                        && r.token == p.token
                        && r.invoke < g.complete
                });
                if !released {
                    v.push(format!(
                        "{}: {} was granted token {} at {:.1} ms while {}'s lease (token {}, invoked {:.1} ms + {} ms) ran until {:.1} ms",
                        g.job,
                        g.holder,
                        g.token,
                        ms(g.complete),
                        p.holder,
                        p.token,
                        ms(p.invoke),
                        p.ttl_ms,
                        ms(until)
                    ));
                }
            }
        }
    }

    // 2b. No early expiry seen by the holder: a renewal that completed
    // before the holder's last promise ran out is never refused as lost,
    // unless the holder may have released first. The server's deadline
    // counts from its receipt of the promise, which is after its invoke, so
    // such a renewal reached the server before the deadline.
    for r in ops
        .iter()
        .filter(|o| o.kind == Kind::Renew && o.outcome == Outcome::Fail("LEASE_LOST".into()))
    {
        let promised = promises.iter().find(|p| {
            p.job == r.job
                && p.holder == r.holder
                && p.token == r.token
                && p.invoke < r.invoke
                && r.complete < p.invoke + p.ttl_ms * 1_000_000
        });
        let Some(p) = promised else { continue };
        let released = releases.iter().any(|x| {
            x.job == r.job && x.holder == r.holder && x.token == r.token && x.invoke < r.complete
        });
        if !released {
            v.push(format!(
                "{}: {}'s renewal of token {} was refused as lost at {:.1} ms, while its lease (invoked {:.1} ms + {} ms) ran until {:.1} ms",
                r.job,
                r.holder,
                r.token,
                ms(r.complete),
                ms(p.invoke),
                p.ttl_ms,
                ms(p.invoke + p.ttl_ms * 1_000_000)
            ));
        }
    }

    // 3. No stale write accepted.
    for w in ops.iter().filter(ok).filter(|o| o.kind == Kind::Write) {
        if let Some(g) = by_job.get(w.job.as_str()).and_then(|gs| {
            gs.iter()
                .find(|g| g.token > w.token && g.complete < w.invoke)
        }) {
            v.push(format!(
                "{}: write with token {} invoked at {:.1} ms was accepted after token {} was granted at {:.1} ms",
                w.job,
                w.token,
                ms(w.invoke),
                g.token,
                ms(g.complete)
            ));
        }
    }

    // 4. No lost write; linearizable reads per key.
    let mut writes: HashMap<(&str, &str), Vec<&Op>> = HashMap::new();
    let mut written: HashSet<&str> = HashSet::new();
    for w in ops
        .iter()
        .filter(|o| o.kind == Kind::Write && !matches!(o.outcome, Outcome::Fail(_)))
    {
        written.insert(&w.value);
        if w.outcome == Outcome::Ok {
            writes.entry((&w.job, &w.key)).or_default().push(w);
        }
    }
    for ((job, key), ws) in &mut writes {
        let mut versions: HashMap<u64, &str> = HashMap::new();
        for w in ws.iter() {
            if let Some(other) = versions.insert(w.version, &w.value) {
                v.push(format!(
                    "{job}/{key}: version {} acknowledged for two writes ({other}, {})",
                    w.version, w.value
                ));
            }
        }
        ws.sort_by_key(|w| w.complete);
    }
    for r in ops.iter().filter(ok).filter(|o| o.kind == Kind::Read) {
        let Some(ws) = writes.get(&(r.job.as_str(), r.key.as_str())) else {
            if r.flag && !written.contains(r.value.as_str()) {
                v.push(format!(
                    "{}/{}: read a value nobody wrote: {}",
                    r.job, r.key, r.value
                ));
            }
            continue;
        };
        // The newest write acknowledged before the read began.
        let before = ws.partition_point(|w| w.complete < r.invoke);
        if let Some(newest) = ws[..before].iter().max_by_key(|w| w.version) {
            if r.version < newest.version {
                v.push(format!(
                    "{}/{}: read at {:.1} ms saw version {} but version {} ({}) was acknowledged at {:.1} ms{}",
                    r.job,
                    r.key,
                    ms(r.invoke),
                    r.version,
                    newest.version,
                    newest.value,
                    ms(newest.complete),
                    if r.worker == usize::MAX { " (lost across a crash)" } else { "" }
                ));
            }
        }
        if let Some(w) = ws.iter().find(|w| w.version == r.version) {
            if r.value != w.value {
                v.push(format!(
                    "{}/{}: version {} reads {} but was written as {}",
                    r.job, r.key, r.version, r.value, w.value
                ));
            }
        }
        if r.flag && !written.contains(r.value.as_str()) {
            v.push(format!(
                "{}/{}: read a value nobody wrote: {}",
                r.job, r.key, r.value
            ));
        }
    }
    v
}
