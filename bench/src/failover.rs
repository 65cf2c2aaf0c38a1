//! `leasehold-bench failover`: how long a job goes without a leader that
//! can write, when its leader's process dies and when it resigns.
//!
//! The program starts a server (the single node; with `--etcd`, a 3-member
//! etcd cluster on loopback and one leasehold frontend on it) and worker
//! processes: this binary in its hidden `failover-worker` mode. Each worker
//! connects, runs an [`Elector`] for the job with TTL T, and as soon as it
//! leads makes one CheckedWrite with its token; it reports on its stdout
//! the moment it was elected and the moment the write was acknowledged,
//! read from CLOCK_MONOTONIC, which every process on the machine shares, so
//! the bench compares them with its own readings.
//!
//! One run: a leader (which has written) and a standby whose Elector waits
//! in line (a waiting Acquire, given `SETTLE` and up to `JITTER` more to
//! reach the server). Then
//!
//! - `--kill`: the leader renews once more (one Renew with its own holder
//!   and token, so that the kill lands just after a renewal reached the
//!   server: the longest wait there is; `--phase random` kills at a random
//!   point of the Elector's renewal cycle instead), and the bench SIGKILLs
//!   its process. Measured: the kill to the standby's acknowledged write,
//!   and the end of the lease (the renewal's acknowledgement + T, no
//!   earlier than the server's end) to that write: the handover itself.
//! - `--resign`: the leader calls `Elector::resign` (which releases the
//!   lease). Measured: the call to the standby's acknowledged write.
//! - `--kill-bound`: as `--kill`, with every Elector's lease bound to its
//!   connection (`bind_to_stream`): the server releases it as soon as it
//!   sees the killed process's connection close, not at the TTL.
//! - `--stop-bound`: as `--kill-bound`, but the leader is SIGSTOPped (its
//!   connection goes silent, not closed): the lease must not be freed
//!   before its TTL. Measured as `--kill` is; the stopped worker is killed
//!   once the standby has written.
//! - `--transfer`: the leader calls `Elector::transfer` (TransferLease to
//!   the standby, waiting in line). Measured: the call to the standby's
//!   acknowledged write, next to `--resign` (release, then the waiter's
//!   grant) and `--kill` (a TTL's wait).
//!
//! The standby, now leading, is the next run's leader, and a fresh worker
//! is started as its standby: one process start per run.
//!
//! For the timeline of a slow run, each run also tells when a watcher of
//! the job saw the lease change, and on the single node how many syncs the
//! server ran meanwhile and the slowest one's bucket (its /metrics): a
//! slow disk and a slow handover look alike from the outside.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use leasehold::client::{Client, Elector, ElectorOptions, EventKind};

use crate::faults::{frontend, Cluster};
use crate::proc::Server;
use crate::sys::Res;

/// How long a new standby is given for its waiting Acquire to reach the
/// server. (For T up to 3 s that is also longer than T/10, so its Elector
/// confirms the grant with a Renew, as a standby that waited a while does.)
const SETTLE: Duration = Duration::from_millis(300);

/// Up to this much more than `SETTLE`, at random, before each run.
const JITTER: Duration = Duration::from_millis(500);

/// The goal for a kill: p50 and p99 within T + this.
const KILL_SLACK: Duration = Duration::from_millis(50);

/// The goal for a resign: p99 within this.
const RESIGN_GOAL: Duration = Duration::from_millis(10);

/// The goal for a transfer: p99 within this.
const TRANSFER_GOAL: Duration = Duration::from_millis(10);

/// The goal for a kill of a bound leader: p99 within this on the single
/// node...
const BOUND_GOAL: Duration = Duration::from_millis(50);

/// ... and in etcd mode.
const BOUND_GOAL_ETCD: Duration = Duration::from_millis(250);

#[derive(clap::Args)]
pub struct FailoverArgs {
    /// The release `leasehold` binary (the server, or the etcd frontend).
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory (the data dir, or etcd's data dirs).
    #[arg(long)]
    work_dir: PathBuf,
    /// Measure a SIGKILL of the leader's process.
    #[arg(long)]
    kill: bool,
    /// Measure a clean resign of the leader's Elector.
    #[arg(long)]
    resign: bool,
    /// Measure a SIGKILL of a leader whose lease is bound to its
    /// connection.
    #[arg(long)]
    kill_bound: bool,
    /// Measure a SIGSTOP of a leader whose lease is bound to its
    /// connection (silent, not closed: the TTL still holds).
    #[arg(long)]
    stop_bound: bool,
    /// Measure a transfer from the leader to the waiting standby.
    #[arg(long)]
    transfer: bool,
    /// Runs of each (mode, TTL).
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// The Electors' TTLs, e.g. `2s,10s` (etcd mode: whole seconds, 2 s
    /// or more).
    #[arg(long, default_value = "2s,10s", value_delimiter = ',', value_parser = parse_duration)]
    ttl: Vec<Duration>,
    /// etcd mode: a 3-member etcd cluster and one leasehold frontend,
    /// instead of the single node.
    #[arg(long)]
    etcd: bool,
    /// The `etcd` binary (Debian's etcd-server).
    #[arg(long, default_value = "etcd")]
    etcd_bin: PathBuf,
    /// When a leader is killed: `renewed` (just after a renewal reached
    /// the server: the lease's whole TTL is still to run) or `random` (at
    /// a random point of the Elector's renewal cycle).
    #[arg(long, value_enum, default_value_t = Phase::Renewed)]
    phase: Phase,
    /// The server's or frontend's log filter (`RUST_LOG`).
    #[arg(long, default_value = "warn")]
    server_log: String,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    Renewed,
    Random,
}

/// The worker: one Elector, driven over stdin, reporting on stdout.
#[derive(clap::Args)]
pub struct WorkerArgs {
    #[arg(long)]
    addr: String,
    #[arg(long)]
    job: String,
    #[arg(long)]
    name: String,
    #[arg(long)]
    ttl_ms: u64,
    /// Bind the Elector's lease to its connection.
    #[arg(long)]
    bind: bool,
}

/// `2s`, `10s`, `1500ms`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "s" => n,
        "ms" => n / 1000.0,
        _ => return Err(format!("bad duration {s:?} (use s or ms)")),
    };
    if secs.is_nan() || secs <= 0.0 || secs > 86_400.0 {
        return Err(format!("bad duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the
/// machine (std's `Instant` reads the same clock, but cannot be sent).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The worker's side. Lines out: `ready` (connected, campaigning);
/// `wrote TOKEN ELECTED_NS ACKED_NS` (led, and the first write was
/// acknowledged); `renewed SENT_NS ACKED_NS`; `resigned CALLED_NS
/// RETURNED_NS`; `transferred CALLED_NS RETURNED_NS`; `lost` (the Elector
/// stepped down unasked); `error ...`. Lines in: `renew`, `resign`,
/// `transfer`. Exits when stdin closes.
pub async fn worker(a: WorkerArgs) -> Res<()> {
    let ttl = Duration::from_millis(a.ttl_ms);
    let client = Client::connect(&a.addr).await?;
    // One call, so that the connection is up before the campaign starts.
    client.get_lease(&a.job).await?;
    let options = ElectorOptions {
        bind_to_stream: a.bind,
        ..ElectorOptions::default()
    };
    let mut elector = Elector::start_with(client.clone(), &a.job, &a.name, ttl, options);
    say("ready");
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let token = tokio::select! {
        t = elector.elected() => t?,
        // stdin closed (or a command before we lead): stop.
        _ = stdin.next_line() => return Ok(()),
    };
    let elected = mono_ns();
    let wrote = client
        .checked_write(&a.job, token, b"leader", a.name.clone().into_bytes())
        .await;
    let acked = mono_ns();
    match wrote {
        Ok(_) => say(&format!("wrote {token} {elected} {acked}")),
        Err(e) => say(&format!("error the first write with token {token}: {e}")),
    }
    let mut role = elector.watch();
    let mut leading = true;
    loop {
        tokio::select! {
            line = stdin.next_line() => match line?.as_deref() {
                None => return Ok(()),
                Some("renew") => {
                    let sent = mono_ns();
                    match client.renew(&a.job, elector.holder(), token, ttl).await {
                        Ok(_) => say(&format!("renewed {sent} {}", mono_ns())),
                        Err(e) => say(&format!("error renew: {e}")),
                    }
                }
                Some("resign") => {
                    let called = mono_ns();
                    elector.resign().await;
                    say(&format!("resigned {called} {}", mono_ns()));
                    while stdin.next_line().await?.is_some() {}
                    return Ok(());
                }
                Some("transfer") => {
                    let called = mono_ns();
                    match elector.transfer(None).await {
                        Ok(_) => say(&format!("transferred {called} {}", mono_ns())),
                        Err(e) => say(&format!("error transfer: {e}")),
                    }
                    elector.resign().await;
                    while stdin.next_line().await?.is_some() {}
                    return Ok(());
                }
                Some(other) => say(&format!("error unknown command {other:?}")),
            },
            r = role.changed(), if leading => {
                if r.is_err() || role.borrow_and_update().token() != Some(token) {
                    leading = false;
                    say("lost");
                }
            }
        }
    }
}

/// A worker process, as the bench sees it.
struct Worker {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

/// What a worker reported when it led and wrote.
struct Wrote {
    token: u64,
    elected: u64,
    acked: u64,
}

impl Worker {
    /// Starts a worker and waits until it campaigns.
    async fn spawn(addr: &str, job: &str, ttl: Duration, name: &str, bind: bool) -> Res<Worker> {
        // This very binary, even if a build has replaced the file since.
        let mut cmd = Command::new("/proc/self/exe");
        cmd.args([
            "failover-worker",
            "--addr",
            addr,
            "--job",
            job,
            "--name",
            name,
        ])
        .arg("--ttl-ms")
        .arg(ttl.as_millis().to_string())
        .args(bind.then_some("--bind"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe; nothing else runs between
        // fork and exec here. The worker goes when the bench goes.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut w = Worker {
            name: name.to_owned(),
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        };
        let line = w.line(Duration::from_secs(10)).await?;
        if line != "ready" {
            return Err(format!("worker {name}: {line}").into());
        }
        Ok(w)
    }

    /// The next line, within `within`.
    async fn line(&mut self, within: Duration) -> Res<String> {
        match tokio::time::timeout(within, self.lines.next_line()).await {
            Err(_) => Err(format!("worker {}: nothing for {within:?}", self.name).into()),
            Ok(Err(e)) => Err(e.into()),
            Ok(Ok(None)) => Err(format!("worker {}: exited", self.name).into()),
            Ok(Ok(Some(l))) => Ok(l),
        }
    }

    /// The next line that starts with `word`, its numbers after it.
    async fn expect(&mut self, word: &str, within: Duration) -> Res<Vec<u64>> {
        let line = self.line(within).await?;
        let mut f = line.split_whitespace();
        if f.next() != Some(word) {
            return Err(format!("worker {}: {line:?}, not {word}", self.name).into());
        }
        Ok(f.map(str::parse).collect::<Result<Vec<u64>, _>>()?)
    }

    async fn wrote(&mut self, within: Duration) -> Res<Wrote> {
        let v = self.expect("wrote", within).await?;
        Ok(Wrote {
            token: v[0],
            elected: v[1],
            acked: v[2],
        })
    }

    async fn send(&mut self, cmd: &str) -> Res<()> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        stdin.write_all(format!("{cmd}\n").as_bytes()).await?;
        stdin.flush().await?;
        Ok(())
    }

    /// SIGKILL; the moment just before it.
    fn kill(&self) -> u64 {
        self.signal(libc::SIGKILL)
    }

    /// `sig`; the moment just before it.
    fn signal(&self, sig: i32) -> u64 {
        let pid = self.child.id().unwrap_or(0) as i32;
        let at = mono_ns();
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(pid, sig) };
        at
    }

    /// Closes its stdin and waits for it to exit.
    async fn finish(mut self) {
        self.stdin = None;
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Kill,
    Resign,
    KillBound,
    StopBound,
    Transfer,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Kill => "kill",
            Mode::Resign => "resign",
            Mode::KillBound => "kill, bound",
            Mode::StopBound => "stop, bound",
            Mode::Transfer => "transfer",
        }
    }

    /// Whether the workers bind their leases.
    fn bound(self) -> bool {
        matches!(self, Mode::KillBound | Mode::StopBound)
    }
}

/// One run, in nanoseconds.
#[derive(Clone, Copy)]
struct Sample {
    /// The kill or the resign call to the next leader's acknowledged write.
    total: u64,
    /// ... to the first change a watcher of the job was told of (the
    /// lease expired or released, or already granted again).
    seen: Option<u64>,
    /// ... to the moment the next leader's Elector said it leads.
    elected: u64,
    /// Kill with `--phase renewed`: the lease's end to the write (the
    /// handover past the TTL).
    past_end: Option<i64>,
    /// Resign: the call to its return (the Release acknowledged).
    released: Option<u64>,
    /// The single node: the syncs (log write + fdatasync) the server ran
    /// during the run, and the upper bound of the slowest one's bucket, in
    /// seconds (from its /metrics histogram).
    syncs: Option<(u64, f64)>,
}

struct Row {
    backend: &'static str,
    mode: Mode,
    ttl: Duration,
    samples: Vec<Sample>,
}

/// Nearest rank.
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl Row {
    fn sorted(&self, f: impl Fn(&Sample) -> u64) -> Vec<u64> {
        let mut v: Vec<u64> = self.samples.iter().map(f).collect();
        v.sort_unstable();
        v
    }

    fn goal(&self) -> (String, bool) {
        let t = self.sorted(|s| s.total);
        let within = |goal: Duration| {
            (
                format!("p99 ≤ {} ms", goal.as_millis()),
                pct(&t, 0.99) <= goal.as_nanos() as u64,
            )
        };
        match self.mode {
            Mode::KillBound if self.backend.starts_with("etcd") => within(BOUND_GOAL_ETCD),
            Mode::KillBound => within(BOUND_GOAL),
            Mode::Transfer => within(TRANSFER_GOAL),
            // Silent, not closed: never freed before its TTL (less the
            // slack the kill's goal allows either way).
            Mode::StopBound => {
                let floor = self.ttl.saturating_sub(KILL_SLACK).as_nanos() as u64;
                (
                    format!("min ≥ T − {} ms", KILL_SLACK.as_millis()),
                    t.first().is_some_and(|&m| m >= floor),
                )
            }
            Mode::Kill => {
                let limit = (self.ttl + KILL_SLACK).as_nanos() as u64;
                (
                    format!("p50, p99 ≤ T + {} ms", KILL_SLACK.as_millis()),
                    pct(&t, 0.5) <= limit && pct(&t, 0.99) <= limit,
                )
            }
            Mode::Resign => (
                format!("p99 ≤ {} ms", RESIGN_GOAL.as_millis()),
                pct(&t, 0.99) <= RESIGN_GOAL.as_nanos() as u64,
            ),
        }
    }
}

pub async fn run(a: FailoverArgs) -> Res<()> {
    let mut modes = Vec::new();
    if a.kill {
        modes.push(Mode::Kill);
    }
    if a.resign {
        modes.push(Mode::Resign);
    }
    if a.kill_bound {
        modes.push(Mode::KillBound);
    }
    if a.stop_bound {
        modes.push(Mode::StopBound);
    }
    if a.transfer {
        modes.push(Mode::Transfer);
    }
    if modes.is_empty() {
        return Err(
            "say which to measure: --kill, --resign, --kill-bound, --stop-bound, --transfer".into(),
        );
    }
    if a.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    if a.etcd {
        if let Some(t) = a
            .ttl
            .iter()
            .find(|t| t.subsec_nanos() != 0 || t.as_secs() < 2)
        {
            return Err(
                format!("etcd mode: TTLs are whole seconds, 2 s or more (not {t:?})").into(),
            );
        }
    }
    let dir = a.work_dir.join(format!("failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // The server: kept alive (and stopped by drop) until the end.
    let mut _cluster = None;
    let (backend, server) = if a.etcd {
        let cluster = Cluster::start(&a.etcd_bin, &dir.join("etcd"))?;
        cluster.leader(Duration::from_secs(30)).await?;
        let f = frontend(&a.leasehold_bin, &cluster.endpoints_from(0), &a.server_log)?;
        _cluster = Some(cluster);
        ("etcd (3 members) + 1 frontend", f)
    } else {
        let mut cmd = std::process::Command::new(&a.leasehold_bin);
        cmd.args(crate::proc::SERVE)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .env("RUST_LOG", &a.server_log);
        ("single node", Server::spawn_command(cmd)?)
    };
    eprintln!(
        "failover: {backend} at {}, {} runs per (mode, TTL), kill phase {}",
        server.addr,
        a.runs,
        match a.phase {
            Phase::Renewed => "just after a renewal",
            Phase::Random => "random",
        }
    );
    let mut rng = crate::Rng::new(mono_ns());
    let mut rows = Vec::new();
    for &mode in &modes {
        for &ttl in &a.ttl {
            let row = series(
                &server.addr,
                server.admin.as_deref(),
                backend,
                mode,
                ttl,
                &a,
                &mut rng,
            )
            .await?;
            rows.push(row);
        }
    }
    drop(server);
    drop(_cluster);
    let _ = std::fs::remove_dir_all(&dir);
    println!();
    println!(
        "| backend | mode | T | runs | p50 | p90 | p99 | max | p50 / T | p99 / T | goal | watch saw it p50 / p99 | elected p50 / p99 | lease end → write p50 / p99 |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|");
    for r in &rows {
        let t = r.sorted(|s| s.total);
        let e = r.sorted(|s| s.elected);
        let seen = r.sorted(|s| s.seen.unwrap_or(u64::MAX));
        let tn = r.ttl.as_nanos() as f64;
        let (goal, met) = r.goal();
        let past: Vec<i64> = {
            let mut v: Vec<i64> = r.samples.iter().filter_map(|s| s.past_end).collect();
            v.sort_unstable();
            v
        };
        let past = if past.is_empty() {
            String::new()
        } else {
            let p = |q: f64| {
                let rank = ((q * past.len() as f64).ceil() as usize).clamp(1, past.len());
                past[rank - 1] as f64 / 1e6
            };
            format!("{:.1} / {:.1} ms", p(0.5), p(0.99))
        };
        println!(
            "| {} | {} | {} s | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.4} | {:.4} | {goal}: {} | {:.1} / {:.1} ms | {:.1} / {:.1} ms | {past} |",
            r.backend,
            r.mode.label(),
            r.ttl.as_secs_f64(),
            r.samples.len(),
            ms(pct(&t, 0.5)),
            ms(pct(&t, 0.9)),
            ms(pct(&t, 0.99)),
            ms(pct(&t, 1.0)),
            pct(&t, 0.5) as f64 / tn,
            pct(&t, 0.99) as f64 / tn,
            if met { "met" } else { "missed" },
            ms(pct(&seen, 0.5)),
            ms(pct(&seen, 0.99)),
            ms(pct(&e, 0.5)),
            ms(pct(&e, 0.99)),
        );
    }
    Ok(())
}

/// The runs of one (mode, TTL), on a job of their own.
async fn series(
    addr: &str,
    admin: Option<&str>,
    backend: &'static str,
    mode: Mode,
    ttl: Duration,
    a: &FailoverArgs,
    rng: &mut crate::Rng,
) -> Res<Row> {
    let job = format!(
        "failover-{}-{}-{}ms",
        std::process::id(),
        mode.label().replace(", ", "-"),
        ttl.as_millis()
    );
    let bind = mode.bound();
    // A handover takes at most about T; give it room.
    let within = ttl * 2 + Duration::from_secs(10);
    eprintln!("{} T = {:?}: {} runs", mode.label(), ttl, a.runs);
    let mut n = 0;
    let mut next_name = || {
        n += 1;
        format!("w{n}")
    };
    // The job's lease events, as a watcher sees them (when the lease was
    // seen to end, for the timeline).
    let events = Arc::new(Mutex::new(Vec::<(u64, EventKind)>::new()));
    let watcher = {
        let client = Client::connect(addr).await?;
        let mut stream = client.watch(&job).await?;
        let events = events.clone();
        tokio::spawn(async move {
            while let Ok(Some(e)) = stream.message().await {
                let kind = EventKind::try_from(e.kind).unwrap_or(EventKind::Unspecified);
                events.lock().unwrap().push((mono_ns(), kind));
            }
        })
    };
    let mut leader = Worker::spawn(addr, &job, ttl, &next_name(), bind).await?;
    let mut last_token = leader.wrote(within).await?.token;
    let mut standby = Worker::spawn(addr, &job, ttl, &next_name(), bind).await?;
    let mut samples = Vec::new();
    for run in 1..=a.runs {
        // The settle, and a random moment more, so that runs do not keep
        // one phase against anything periodic (etcd's lease checks).
        let jitter = Duration::from_micros(rng.below(JITTER.as_micros() as usize) as u64);
        tokio::time::sleep(SETTLE + jitter).await;
        let hist0 = sync_histogram(admin).await;
        let (from, lease_end, released) = match mode {
            Mode::Kill | Mode::KillBound | Mode::StopBound => match a.phase {
                Phase::Renewed => {
                    leader.send("renew").await?;
                    let v = leader.expect("renewed", within).await?;
                    let at = match mode {
                        Mode::StopBound => leader.signal(libc::SIGSTOP),
                        _ => leader.kill(),
                    };
                    (at, Some(v[1] + ttl.as_nanos() as u64), None)
                }
                Phase::Random => {
                    let cycle = (ttl / 3).as_micros() as usize;
                    tokio::time::sleep(Duration::from_micros(rng.below(cycle) as u64)).await;
                    let at = match mode {
                        Mode::StopBound => leader.signal(libc::SIGSTOP),
                        _ => leader.kill(),
                    };
                    (at, None, None)
                }
            },
            Mode::Transfer => {
                leader.send("transfer").await?;
                let v = leader.expect("transferred", within).await?;
                (v[0], None, Some(v[1].saturating_sub(v[0])))
            }
            Mode::Resign => {
                leader.send("resign").await?;
                let v = leader.expect("resigned", within).await?;
                (v[0], None, Some(v[1].saturating_sub(v[0])))
            }
        };
        let w = standby.wrote(within).await?;
        let syncs = syncs_between(&hist0, &sync_histogram(admin).await);
        if w.token <= last_token {
            return Err(format!(
                "run {run}: the new leader's token {} is not above {last_token}",
                w.token
            )
            .into());
        }
        last_token = w.token;
        let seen = events
            .lock()
            .unwrap()
            .iter()
            .find(|(t, k)| *t >= from && *k != EventKind::Current)
            .map(|(t, _)| *t);
        let s = Sample {
            total: w.acked.saturating_sub(from),
            seen: seen.map(|t| t.saturating_sub(from)),
            elected: w.elected.saturating_sub(from),
            past_end: lease_end.map(|e| w.acked as i64 - e as i64),
            released,
            syncs,
        };
        eprintln!(
            "  {run:>3}/{}: {} → write {:8.1} ms ({}watch saw the change {}, elected {:8.1}, write {:5.1}{}), token {}{}",
            a.runs,
            mode.label(),
            ms(s.total),
            s.released
                .map(|r| format!("released {:.1}, ", ms(r)))
                .unwrap_or_default(),
            s.seen
                .map(|t| format!("{:8.1}", ms(t)))
                .unwrap_or_else(|| "-".into()),
            ms(s.elected),
            ms(w.acked - w.elected),
            s.past_end
                .map(|p| format!(", {:+.1} ms past the lease's end", p as f64 / 1e6))
                .unwrap_or_default(),
            w.token,
            s.syncs
                .map(|(n, slowest)| format!(
                    ", {n} server syncs, the slowest ≤ {} ms",
                    slowest * 1000.0
                ))
                .unwrap_or_default()
        );
        samples.push(s);
        let old = std::mem::replace(&mut leader, standby);
        match mode {
            Mode::Kill | Mode::KillBound => {
                let mut old = old;
                let _ = old.child.wait().await;
            }
            Mode::StopBound => {
                let mut old = old;
                old.kill();
                let _ = old.child.wait().await;
            }
            Mode::Resign | Mode::Transfer => old.finish().await,
        }
        standby = Worker::spawn(addr, &job, ttl, &next_name(), bind).await?;
    }
    leader.finish().await;
    standby.finish().await;
    watcher.abort();
    Ok(Row {
        backend,
        mode,
        ttl,
        samples,
    })
}

/// The single node's sync-duration histogram (cumulative counts by upper
/// bound, in seconds); empty when there is none (etcd mode) or no answer.
async fn sync_histogram(admin: Option<&str>) -> Vec<(f64, u64)> {
    let Some(admin) = admin else {
        return Vec::new();
    };
    let Ok(page) = crate::isolation::scrape(admin).await else {
        return Vec::new();
    };
    page.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("leasehold_store_sync_duration_seconds_bucket{le=\"")?;
            let (le, n) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, n.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// The syncs between two scrapes, and the upper bound of the slowest's
/// bucket.
fn syncs_between(a: &[(f64, u64)], b: &[(f64, u64)]) -> Option<(u64, f64)> {
    if a.len() != b.len() || b.is_empty() {
        return None;
    }
    let total = b.last()?.1.saturating_sub(a.last()?.1);
    let slowest = a
        .iter()
        .zip(b)
        .find(|(x, y)| y.1.saturating_sub(x.1) == total)
        .map(|(_, y)| y.0)?;
    Some((total, slowest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("2m").is_err());
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn slowest_sync() {
        let a = [(0.001, 5), (0.01, 7), (0.1, 7), (f64::INFINITY, 7)];
        let b = [(0.001, 6), (0.01, 8), (0.1, 9), (f64::INFINITY, 9)];
        assert_eq!(syncs_between(&a, &b), Some((2, 0.1)));
        assert_eq!(syncs_between(&a, &a), Some((0, 0.001)));
        assert_eq!(syncs_between(&a, &[]), None);
    }

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=50).collect();
        assert_eq!(pct(&v, 0.5), 25);
        assert_eq!(pct(&v, 0.99), 50);
        assert_eq!(pct(&v, 0.9), 45);
    }
}
