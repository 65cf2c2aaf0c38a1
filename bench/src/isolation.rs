//! `leasehold-bench isolation`: whether one misbehaving client can hurt a
//! leader on the same server (issue 17), measured, never asserted.
//!
//! For each attack, on a fresh server: a leader takes a lease with a 2 s
//! TTL and renews it every ttl/3 on its own connection, first for
//! `--seconds` with nothing else running (the baseline), then for as long
//! again while one client attacks the server. Both windows report the
//! renewals' p50, p99 and max, the p99 under attack as a ratio of the
//! baseline's, and whether the leader lost its lease (a Renew refused, or
//! a token or holder that changed). Every ttl/3 the leader also makes one
//! small `CheckedWrite` on its connection, from a task of its own, as a
//! leader does (`--no-leader-writes` to leave it out); those are reported
//! apart: a renewal has a budget of calls in flight of its own, a write
//! does not.
//! The attacks:
//!
//! - `waiters`: 10,200 `Acquire{wait: 1h}` on jobs the attacker holds,
//!   over 11 connections (one job per connection);
//! - `silent`: 5,000 TCP connections that never speak (one that the
//!   server closes is opened again 100 ms later);
//! - `jobs`: 200,000 distinct jobs created as fast as one connection
//!   takes them (512 Acquires in flight);
//! - `watchers`: 40,000 `WatchLease` streams on the leader's own job, over
//!   41 connections;
//! - `writes`: 64 KiB `CheckedWrite`s of distinct keys into one job, 32 in
//!   flight on one connection, for the whole window (after `--write-keys`
//!   distinct keys the same keys are written again, to bound the disk).
//!
//! - the floods below gRPC of issue 41 (`pipelined`, `unread`,
//!   `settings`, `ping`, `slow-readers`) and the listing loops
//!   (`listings`): see `floods.rs`.
//!
//! Refusals (RESOURCE_EXHAUSTED: OVERLOADED or QUOTA_EXCEEDED) are what
//! the limits are for; they are counted by the flag the server names.
//!
//! For `waiters` and `watchers` the server's RSS is read before the
//! attack, at its peak, and after the attacker cancelled everything and
//! the server counted every call ended; then the same attack runs a
//! second time without the leader, to tell memory kept for reuse by the
//! allocator from memory that grows with every attack.
//!
//! `metrics`: the `/metrics` page of a server that knows 1,000,000 jobs
//! (created through gRPC, `Acquire` with the shortest TTL, 512 in flight
//! over 4 connections): its size and the time of `--scrapes` GETs, against
//! the same server while empty, and the latency of back-to-back renewals
//! on another connection while it is scraped, against the same without
//! scrapes.
//!
//! `leasehold-bench isolation --leasehold-bin target/release/leasehold --work-dir /tmp/lh-iso`
//! (`--seconds 5 --scale 0.1 --metrics-jobs 100000` for a quick look).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::client::{Client, ClientError};
use leasehold::proto as lh;
use leasehold::proto::fenced_store_client::FencedStoreClient;
use leasehold::proto::leases_client::LeasesClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};

use crate::proc::{cpu_seconds, rss_bytes, Server};
use crate::sys::Res;

#[path = "floods.rs"]
mod floods;

/// `leasehold-bench isolation`'s flags.
#[derive(clap::Args)]
pub struct IsolationArgs {
    /// The `leasehold` binary (a release build for meaningful numbers).
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory (the servers' data dirs go here, and are
    /// removed after each attack).
    #[arg(long)]
    work_dir: PathBuf,
    /// Seconds of each window: the baseline, then as long under attack.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// The leader's lease TTL in seconds; it renews every third of it.
    #[arg(long, default_value_t = 2.0)]
    ttl: f64,
    /// Multiplies the attackers' counts (waiters, connections, jobs,
    /// watchers): 0.1 for a quick look.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// What to run, comma separated: waiters, silent, jobs, watchers,
    /// writes, pipelined, unread, settings, ping, slow-readers, listings,
    /// metrics.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "waiters,silent,jobs,watchers,writes,pipelined,unread,settings,ping,slow-readers,listings,metrics"
    )]
    only: Vec<String>,
    /// The most distinct keys the write flood creates; after that it
    /// writes the same keys again (64 KiB each: 20,000 keys is 1.3 GB).
    #[arg(long, default_value_t = 20_000)]
    write_keys: usize,
    /// Jobs the server knows before `/metrics` is scraped.
    #[arg(long, default_value_t = 1_000_000)]
    metrics_jobs: usize,
    /// GETs of `/metrics`, each timed.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    scrapes: u64,
    /// The leader does not write (by default it makes one small
    /// `CheckedWrite` every ttl/3 from a task of its own, on its
    /// connection, as a leader does, and its outcomes are reported next to
    /// the renewals).
    #[arg(long)]
    no_leader_writes: bool,
    /// After a cancel, also ask the server's allocator to give back what
    /// it keeps free (`malloc_trim(0)`, called in the server through gdb)
    /// and read the RSS again: memory that then goes was free, memory that
    /// stays is still held. Needs gdb and leave to attach.
    #[arg(long)]
    malloc_trim_probe: bool,
    /// More flags for every `leasehold serve`, e.g.
    /// `--server-arg=--max-keys-per-job=10000` (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    server_arg: Vec<String>,
}

/// Progress lines, with the time since the program started.
macro_rules! say {
    ($t0:expr, $($a:tt)*) => {
        eprintln!("[{:6.1}s] {}", $t0.elapsed().as_secs_f64(), format!($($a)*))
    };
}

pub async fn run(a: IsolationArgs) -> Res<()> {
    raise_fd_limit();
    let t0 = Instant::now();
    let dir = a.work_dir.join(format!("isolation-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    let mut memory = Vec::new();
    let names = ["waiters", "silent", "jobs", "watchers", "writes"]
        .into_iter()
        .chain(floods::NAMES);
    for name in names {
        if !a.only.iter().any(|o| o == name) {
            continue;
        }
        let (row, mem) = attack_round(&a, &dir, name, t0).await?;
        print_row_progress(&row, t0);
        rows.push(row);
        memory.extend(mem);
    }
    let metrics = if a.only.iter().any(|o| o == "metrics") {
        Some(metrics_page(&a, &dir, t0).await?)
    } else {
        None
    };
    let _ = std::fs::remove_dir_all(&dir);
    print_report(&a, &rows, &memory, metrics.as_ref(), t0.elapsed());
    Ok(())
}

/// Lets this process (and the servers it starts) open as many files as
/// the hard limit allows: 5,000 connections need 5,000 descriptors.
pub(crate) fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

fn scaled(a: &IsolationArgs, n: usize) -> usize {
    ((n as f64 * a.scale).round() as usize).max(1)
}

fn start_server(a: &IsolationArgs, data: &Path) -> Res<Server> {
    let mut cmd = Command::new(&a.leasehold_bin);
    cmd.args(crate::proc::SERVE)
        .args(crate::proc::LONG_TTLS)
        // The /metrics part holds --metrics-jobs jobs and the leader's.
        .arg("--max-jobs")
        .arg((a.metrics_jobs + 100).max(1_000_000).to_string())
        .arg("--data-dir")
        .arg(data)
        .args(&a.server_arg)
        .env("RUST_LOG", "error");
    Server::spawn_command(cmd)
}

fn endpoint(url: &str) -> Res<Endpoint> {
    Ok(Endpoint::from_shared(url.to_owned())?.tcp_nodelay(true))
}

/// A connection of its own (each `connect` is one HTTP/2 connection).
async fn connection(url: &str) -> Res<Channel> {
    Ok(endpoint(url)?.connect().await?)
}

// ---- the leader ----

/// The leader: one lease, one connection, renewed every ttl/3.
struct Leader {
    client: Client,
    job: String,
    holder: String,
    token: u64,
    ttl: Duration,
    /// Why it lost its lease, the first time it did.
    lost: Option<String>,
    /// Whether it writes (one small `CheckedWrite` after each renewal).
    writes: bool,
}

/// One window of the leader's renewals.
#[derive(Debug, Clone, Default)]
struct Window {
    /// Every renewal's latency, failed ones included.
    lat: Vec<Duration>,
    /// When the slowest renewal began, from the start of the window.
    slowest_at: Duration,
    /// Renewals that failed without saying the lease was lost (a timeout,
    /// UNAVAILABLE).
    failed: u64,
    /// Why the lease was lost in this window, if it was.
    lost: Option<String>,
    /// The latency of each of the leader's fenced writes that was
    /// accepted (one small `CheckedWrite` every ttl/3).
    writes: Vec<Duration>,
    /// The leader's writes refused or failed, by reason.
    write_errors: BTreeMap<String, u64>,
}

impl Window {
    fn pct(&self, q: f64) -> Duration {
        pct(&self.lat, q)
    }
}

/// The nearest-rank percentile `q` (0..=1) of `v`.
fn pct(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

impl Leader {
    async fn start(url: &str, ttl: Duration, writes: bool) -> Res<Leader> {
        // Its own connection; a call that takes a whole TTL is a loss
        // anyway.
        let ch = endpoint(url)?.timeout(ttl).connect().await?;
        let client = Client::from_channel(ch);
        let (job, holder) = ("isolation/leader".to_owned(), "leader@bench".to_owned());
        let got = client.acquire(&job, &holder, ttl, Duration::ZERO).await?;
        if !got.acquired {
            return Err("the leader did not get its lease".into());
        }
        Ok(Leader {
            client,
            job,
            holder,
            token: got.lease.token,
            ttl,
            lost: None,
            writes,
        })
    }

    /// Renews every ttl/3 for `secs`, measuring each renewal; with
    /// `writes`, a task of its own writes every ttl/3 too, on the same
    /// connection, so that a slow write never holds up a renewal.
    async fn window(&mut self, secs: Duration) -> Window {
        let mut w = Window::default();
        let period = self.ttl / 3;
        let end = Instant::now() + secs;
        let token = Arc::new(AtomicU64::new(self.token));
        let writer = self.writes.then(|| {
            let (client, job, token) = (self.client.clone(), self.job.clone(), token.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors: BTreeMap<String, u64> = BTreeMap::new();
                let mut next = tokio::time::Instant::now() + period / 2;
                let mut n = 0u64;
                while Instant::now() < end {
                    tokio::time::sleep_until(next).await;
                    next += period;
                    n += 1;
                    let value = n.to_le_bytes().to_vec();
                    let t = Instant::now();
                    match client
                        .checked_write(&job, token.load(Ordering::Relaxed), b"heartbeat", value)
                        .await
                    {
                        Ok(_) => lat.push(t.elapsed()),
                        Err(e) => *errors.entry(error_label(&e)).or_default() += 1,
                    }
                    let now = tokio::time::Instant::now();
                    if next < now {
                        next = now + period / 4;
                    }
                }
                (lat, errors)
            })
        });
        let mut next = tokio::time::Instant::now() + period;
        let mut last_ok = Instant::now();
        let started = Instant::now();
        while Instant::now() < end {
            tokio::time::sleep_until(next).await;
            next += period;
            let t = Instant::now();
            let r = self
                .client
                .renew(&self.job, &self.holder, self.token, self.ttl)
                .await;
            let took = t.elapsed();
            if w.lat.iter().all(|l| *l < took) {
                w.slowest_at = t - started;
            }
            w.lat.push(took);
            let lost = match r {
                Ok(l) if l.token != self.token => {
                    Some(format!("token changed: {} to {}", self.token, l.token))
                }
                Ok(l) if l.holder.as_deref() != Some(self.holder.as_str()) => {
                    Some(format!("holder changed to {:?}", l.holder))
                }
                Ok(_) => {
                    last_ok = t;
                    None
                }
                Err(ClientError::LeaseLost { message, .. }) => {
                    Some(format!("renew refused, LEASE_LOST: {message}"))
                }
                Err(e) => {
                    w.failed += 1;
                    (t.duration_since(last_ok) >= self.ttl)
                        .then(|| format!("no renewal for a whole TTL; the last failure: {e}"))
                }
            };
            if let Some(why) = lost {
                w.lost.get_or_insert(why.clone());
                self.lost.get_or_insert(why);
                // A lost leader takes the lease again to keep measuring.
                if let Ok(got) = self
                    .client
                    .acquire(&self.job, &self.holder, self.ttl, Duration::ZERO)
                    .await
                {
                    if got.acquired {
                        self.token = got.lease.token;
                        token.store(self.token, Ordering::Relaxed);
                        last_ok = Instant::now();
                    }
                }
            }
            // No burst of catch-up renewals after a slow one.
            let now = tokio::time::Instant::now();
            if next < now {
                next = now + period / 4;
            }
        }
        if let Some(writer) = writer {
            match writer.await {
                Ok((lat, errors)) => (w.writes, w.write_errors) = (lat, errors),
                Err(e) => {
                    w.write_errors.insert(format!("writer task failed: {e}"), 1);
                }
            }
        }
        w
    }

    /// Whether the server still names this leader, with its token: None
    /// if it does, else what it said.
    async fn still_holds(&self) -> Option<String> {
        match self.client.get_lease(&self.job).await {
            Ok(l) if l.token == self.token && l.holder.as_deref() == Some(self.holder.as_str()) => {
                None
            }
            Ok(l) => Some(format!(
                "GetLease names {:?} with token {}",
                l.holder, l.token
            )),
            Err(e) => Some(format!("GetLease failed: {}", error_label(&e))),
        }
    }
}

/// What a client error was, with the flag of the limit that refused it.
fn error_label(e: &ClientError) -> String {
    match e {
        ClientError::Other(s) => status_label(s),
        ClientError::Unavailable(m) => format!("UNAVAILABLE or OVERLOADED{}", flag_in(m)),
        ClientError::Fenced { .. } => "FENCED".into(),
        ClientError::LeaseLost { .. } => "LEASE_LOST".into(),
        e => {
            let text = e.to_string();
            format!(
                "{}{}",
                text.chars().take(60).collect::<String>(),
                flag_in(&text)
            )
        }
    }
}

/// " --flag" when `message` names a flag, else "".
fn flag_in(message: &str) -> String {
    message
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',' || c == ':')
        .find(|w| w.starts_with("--"))
        .map(|f| format!(" {}", f.trim_end_matches(['.', ';'])))
        .unwrap_or_default()
}

// ---- what the attacker got, counted ----

/// Outcomes by label ("ok", "RESOURCE_EXHAUSTED --max-in-flight", ...).
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<String, u64>>>);

impl Tally {
    fn add(&self, label: &str) {
        *self
            .0
            .lock()
            .expect("tally lock")
            .entry(label.to_owned())
            .or_default() += 1;
    }

    fn status(&self, s: &tonic::Status) {
        self.add(&status_label(s));
    }

    fn get(&self, label: &str) -> u64 {
        self.0
            .lock()
            .expect("tally lock")
            .get(label)
            .copied()
            .unwrap_or(0)
    }

    fn total(&self) -> u64 {
        self.0.lock().expect("tally lock").values().sum()
    }

    fn summary(&self) -> String {
        let m = self.0.lock().expect("tally lock");
        if m.is_empty() {
            return "nothing".into();
        }
        m.iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A status's code and the flag its message names, if any: the limit
/// that refused it.
fn status_label(s: &tonic::Status) -> String {
    format!("{:?}{}", s.code(), flag_in(s.message()))
}

// ---- the admin port ----

/// The whole `/metrics` page (body only).
pub async fn scrape(admin: &str) -> Res<String> {
    let mut s = tokio::net::TcpStream::connect(admin).await?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    let out = String::from_utf8(out)?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .ok_or("no HTTP body")?;
    Ok(body)
}

/// The sum of the samples whose line starts with `prefix`.
fn sum_of(page: &str, prefix: &str) -> u64 {
    page.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

// ---- one attack, its baseline, its memory ----

/// One attack's figures.
struct Row {
    attack: &'static str,
    what: String,
    base: Window,
    under: Window,
    /// What a GetLease said at the end of the attack window, if it did
    /// not name the leader with its token.
    end_check: Option<String>,
    /// The attacker's outcomes.
    got: String,
    /// Server CPU seconds in the baseline window and under attack.
    cpu: (f64, f64),
    rss_before: u64,
    rss_peak: u64,
}

/// RSS before, at the peak and after a cancel.
struct Memory {
    what: String,
    cycle: usize,
    before: u64,
    peak: u64,
    after: u64,
    /// After `malloc_trim(0)` (`--malloc-trim-probe`).
    trimmed: Option<u64>,
}

/// A running attack: stop it with `stop`, then await `task` for its
/// outcomes (it cancels everything it opened before it returns).
struct Running {
    stop: watch::Sender<bool>,
    /// Set by `waiters` and `watchers` once all are in place.
    ready: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<Res<Tally>>,
}

/// Samples the server's RSS every 100 ms until told to stop; the peak.
fn rss_sampler(pid: u32) -> (watch::Sender<bool>, tokio::task::JoinHandle<u64>) {
    let (tx, mut rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let mut peak = rss_bytes(pid).unwrap_or(0);
        loop {
            tokio::select! {
                _ = rx.changed() => return peak.max(rss_bytes(pid).unwrap_or(0)),
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    peak = peak.max(rss_bytes(pid).unwrap_or(0));
                }
            }
        }
    });
    (tx, task)
}

fn describe(a: &IsolationArgs, name: &str) -> String {
    match name {
        "waiters" => format!(
            "{} waiting `Acquire{{wait: 1h}}` over {} connections",
            scaled(a, 10_200),
            waiter_conns(a)
        ),
        "silent" => format!("{} TCP connections that never speak", scaled(a, 5_000)),
        "jobs" => format!(
            "{} distinct jobs created by one connection",
            scaled(a, 200_000)
        ),
        "watchers" => format!(
            "{} `WatchLease` streams on the leader's job over {} connections",
            scaled(a, 40_000),
            watcher_conns(a)
        ),
        "writes" => "64 KiB `CheckedWrite`s of distinct keys into one job, 32 in flight".to_owned(),
        other => floods::describe(other, a.scale),
    }
}

fn waiter_conns(a: &IsolationArgs) -> usize {
    scaled(a, 10_200).div_ceil(1000)
}

fn watcher_conns(a: &IsolationArgs) -> usize {
    scaled(a, 40_000).div_ceil(1000) + 1
}

async fn start_attack(
    a: &IsolationArgs,
    name: &str,
    s: &Server,
    admin: &str,
    t0: Instant,
) -> Res<Running> {
    let (stop, rx) = watch::channel(false);
    let (ready_tx, ready) = watch::channel(false);
    let url = s.addr.clone();
    let admin = admin.to_owned();
    let task = match name {
        "waiters" => {
            let (n, conns) = (scaled(a, 10_200), waiter_conns(a));
            tokio::spawn(async move { waiters(&url, &admin, n, conns, rx, ready_tx, t0).await })
        }
        "silent" => {
            let n = scaled(a, 5_000);
            let addr = url.trim_start_matches("http://").to_owned();
            tokio::spawn(async move { silent(&addr, n, rx, t0).await })
        }
        "jobs" => {
            let n = scaled(a, 200_000);
            tokio::spawn(async move { jobs(&url, n, rx, t0).await })
        }
        "watchers" => {
            let (n, conns) = (scaled(a, 40_000), watcher_conns(a));
            tokio::spawn(async move { watchers(&url, n, conns, rx, ready_tx, t0).await })
        }
        "writes" => {
            let keys = a.write_keys;
            tokio::spawn(async move { writes(&url, keys, rx, t0).await })
        }
        other => floods::start(other, &url, a.scale, rx, ready_tx)
            .ok_or_else(|| format!("unknown attack {other}"))?,
    };
    Ok(Running { stop, ready, task })
}

async fn attack_round(
    a: &IsolationArgs,
    dir: &Path,
    name: &'static str,
    t0: Instant,
) -> Res<(Row, Vec<Memory>)> {
    let data = dir.join(name);
    let _ = std::fs::remove_dir_all(&data);
    let s = start_server(a, &data)?;
    let admin = s.admin.clone().ok_or("no admin address")?;
    let pid = s.pid();
    let secs = Duration::from_secs_f64(a.seconds);
    // The leader is another client than the attacker: its own thread and
    // runtime (and connection), so that the attacker's tasks in this
    // process never delay its calls; only the server and the cores they
    // share can.
    let (base_tx, base_rx) = tokio::sync::oneshot::channel::<Res<Window>>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, ttl, writes) = (
        s.addr.clone(),
        Duration::from_secs_f64(a.ttl),
        !a.no_leader_writes,
    );
    let leader_thread = std::thread::spawn(move || -> Res<(Window, Option<String>)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let mut leader = match Leader::start(&addr, ttl, writes).await {
                Ok(l) => l,
                Err(e) => {
                    let _ = base_tx.send(Err(e.to_string().into()));
                    return Err("the leader did not start".into());
                }
            };
            let _ = base_tx.send(Ok(leader.window(secs).await));
            go_rx.await?;
            let under = leader.window(secs).await;
            let end_check = leader.still_holds().await;
            Ok((under, end_check))
        })
    });
    say!(
        t0,
        "{name}: baseline, the leader alone for {:.0} s",
        a.seconds
    );
    let c0 = cpu_seconds(pid)?;
    let base = base_rx.await??;
    let c1 = cpu_seconds(pid)?;
    let rss_before = rss_bytes(pid)?;
    say!(
        t0,
        "{name}: baseline p50 {} p99 {} max {}; attack: {}",
        ms(base.pct(0.5)),
        ms(base.pct(0.99)),
        ms(base.pct(1.0)),
        describe(a, name)
    );
    let (sampler_stop, sampler) = rss_sampler(pid);
    let atk = start_attack(a, name, &s, &admin, t0).await?;
    let _ = go_tx.send(());
    let (under, end_check) = tokio::task::spawn_blocking(move || leader_thread.join())
        .await?
        .map_err(|_| "the leader's thread panicked")??;
    let c2 = cpu_seconds(pid)?;
    let _ = sampler_stop.send(true);
    let rss_peak = sampler.await?;
    let _ = atk.stop.send(true);
    let got = atk.task.await??;
    let mut mem = Vec::new();
    if name == "waiters" || name == "watchers" {
        let after = settled_rss(name, &admin, pid, &got, t0).await?;
        let trimmed = trim_probe(a, pid, t0)?;
        mem.push(Memory {
            what: describe(a, name),
            cycle: 1,
            before: rss_before,
            peak: rss_peak,
            after,
            trimmed,
        });
        // The same attack again, the leader idle: memory kept for reuse
        // stays flat, memory that is never given back grows.
        say!(
            t0,
            "{name}: the same attack again, to see whether RSS grows"
        );
        let before = rss_bytes(pid)?;
        let (sampler_stop, sampler) = rss_sampler(pid);
        let mut again = start_attack(a, name, &s, &admin, t0).await?;
        let in_place =
            tokio::time::timeout(Duration::from_secs(120), again.ready.wait_for(|r| *r)).await;
        if in_place.is_err() {
            say!(t0, "{name}: not all in place after 120 s; measuring anyway");
        }
        let _ = sampler_stop.send(true);
        let peak = sampler.await?;
        let _ = again.stop.send(true);
        let got2 = again.task.await??;
        let after = settled_rss(name, &admin, pid, &got2, t0).await?;
        let trimmed = trim_probe(a, pid, t0)?;
        mem.push(Memory {
            what: describe(a, name),
            cycle: 2,
            before,
            peak,
            after,
            trimmed,
        });
    }
    s.stop();
    let _ = std::fs::remove_dir_all(&data);
    Ok((
        Row {
            attack: name,
            what: describe(a, name),
            base,
            under,
            end_check,
            got: got.summary(),
            cpu: (c1 - c0, c2 - c1),
            rss_before,
            rss_peak,
        },
        mem,
    ))
}

/// After a cancel: waits until the server has ended every call the
/// attacker opened, then a little more, and reads the RSS.
async fn settled_rss(name: &str, admin: &str, pid: u32, got: &Tally, t0: Instant) -> Res<u64> {
    let cancelled = Instant::now();
    loop {
        let page = scrape(admin).await?;
        let done = match name {
            "waiters" => sum_of(&page, "leasehold_waiting_acquires ") == 0,
            // Every WatchLease call the server saw has ended (its
            // response code is counted when it ends).
            _ => {
                let started = page
                    .lines()
                    .find(|l| {
                        l.starts_with("leasehold_rpc_duration_seconds_count{method=\"WatchLease\"")
                    })
                    .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .unwrap_or(0.0) as u64;
                let ended = sum_of(&page, "leasehold_rpc_responses_total{method=\"WatchLease\"");
                ended >= started && started > 0
            }
        };
        if done {
            break;
        }
        if cancelled.elapsed() > Duration::from_secs(30) {
            say!(
                t0,
                "{name}: the server still counts calls 30 s after the cancel"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ended_after = cancelled.elapsed();
    // The server gives what its allocator keeps free back every 5 s
    // (`server::memory`): read after that.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let rss = rss_bytes(pid)?;
    say!(
        t0,
        "{name}: every call ended {:.2} s after the cancel ({}); RSS {} MiB",
        ended_after.as_secs_f64(),
        got.summary(),
        rss >> 20
    );
    Ok(rss)
}

/// With `--malloc-trim-probe`: the RSS after `malloc_trim(0)` in the
/// server.
fn trim_probe(a: &IsolationArgs, pid: u32, t0: Instant) -> Res<Option<u64>> {
    if !a.malloc_trim_probe {
        return Ok(None);
    }
    let out = Command::new("gdb")
        .args([
            "-p",
            &pid.to_string(),
            "-batch",
            "-ex",
            "call (int) malloc_trim(0)",
        ])
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "gdb could not call malloc_trim: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let rss = rss_bytes(pid)?;
    say!(t0, "after malloc_trim(0): RSS {} MiB", rss >> 20);
    Ok(Some(rss))
}

// ---- the attacks ----

/// Acquires that wait an hour, on jobs the attacker holds.
async fn waiters(
    url: &str,
    admin: &str,
    n: usize,
    conns: usize,
    mut stop: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
    t0: Instant,
) -> Res<Tally> {
    let mut chans = Vec::new();
    for k in 0..conns {
        let ch = connection(url).await?;
        let mut c = LeasesClient::new(ch.clone());
        let r = c
            .acquire(lh::AcquireRequest {
                job: format!("attack/line-{k}"),
                holder: "attacker@bench".into(),
                ttl: Some(dur(Duration::from_secs(24 * 3600))),
                wait: None,
                ..Default::default()
            })
            .await?
            .into_inner();
        if !r.acquired {
            return Err("the attacker did not get its job".into());
        }
        chans.push(ch);
    }
    let tally = Tally::default();
    let mut tasks = JoinSet::new();
    let start = Instant::now();
    for i in 0..n {
        let mut c = LeasesClient::new(chans[i % conns].clone());
        let tally = tally.clone();
        tasks.spawn(async move {
            let r = c
                .acquire(lh::AcquireRequest {
                    job: format!("attack/line-{}", i % conns),
                    holder: format!("waiter-{i}@bench"),
                    ttl: Some(dur(Duration::from_secs(60))),
                    wait: Some(dur(Duration::from_secs(3600))),
                    ..Default::default()
                })
                .await;
            match r {
                Ok(r) if r.get_ref().acquired => tally.add("granted"),
                Ok(_) => tally.add("not granted"),
                Err(s) => tally.status(&s),
            }
        });
    }
    // Progress: until all are in line or answered.
    let mut reported = false;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        if reported {
            continue;
        }
        let waiting = sum_of(&scrape(admin).await?, "leasehold_waiting_acquires ");
        if waiting + tally.total() >= n as u64 {
            say!(
                t0,
                "waiters: {waiting} in line after {:.2} s; answered: {}",
                start.elapsed().as_secs_f64(),
                tally.summary()
            );
            reported = true;
            let _ = ready.send(true);
        }
    }
    let waiting = sum_of(&scrape(admin).await?, "leasehold_waiting_acquires ");
    tally
        .0
        .lock()
        .expect("tally lock")
        .insert("still waiting at the end (then cancelled)".into(), waiting);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    drop(chans);
    Ok(tally)
}

/// TCP connections that never send a byte; each one the server closes is
/// opened again 100 ms later.
async fn silent(addr: &str, n: usize, stop: watch::Receiver<bool>, t0: Instant) -> Res<Tally> {
    let tally = Tally::default();
    let open = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..n {
        let (addr, tally, open, peak) =
            (addr.to_owned(), tally.clone(), open.clone(), peak.clone());
        let mut stop = stop.clone();
        tasks.spawn(async move {
            loop {
                let mut s = tokio::select! {
                    _ = stop.changed() => return,
                    c = tokio::net::TcpStream::connect(&addr) => match c {
                        Ok(s) => s,
                        Err(_) => {
                            tally.add("connect failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                tally.add("connected");
                let now = open.fetch_add(1, Ordering::Relaxed) + 1;
                peak.fetch_max(now, Ordering::Relaxed);
                let t = Instant::now();
                let mut buf = [0u8; 64];
                // The server's first bytes (its HTTP/2 SETTINGS) do not
                // count: it closes the connection or we stop.
                loop {
                    tokio::select! {
                        _ = stop.changed() => {
                            open.fetch_sub(1, Ordering::Relaxed);
                            return;
                        }
                        r = s.read(&mut buf) => match r {
                            Ok(0) | Err(_) => break,
                            Ok(_) => continue,
                        },
                    }
                }
                open.fetch_sub(1, Ordering::Relaxed);
                tally.add(if t.elapsed() < Duration::from_secs(1) {
                    "closed by the server within 1 s"
                } else {
                    "closed by the server after 1 s or more"
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let mut stop = stop;
    let start = Instant::now();
    let mut next = 2.0;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        if start.elapsed().as_secs_f64() >= next {
            next += 5.0;
            say!(
                t0,
                "silent: {} open now (peak {}); {}",
                open.load(Ordering::Relaxed),
                peak.load(Ordering::Relaxed),
                tally.summary()
            );
        }
    }
    while tasks.join_next().await.is_some() {}
    tally.add_n("the most open at once", peak.load(Ordering::Relaxed));
    Ok(tally)
}

impl Tally {
    fn add_n(&self, label: &str, n: u64) {
        *self
            .0
            .lock()
            .expect("tally lock")
            .entry(label.to_owned())
            .or_default() += n;
    }
}

/// Distinct jobs, as fast as one connection takes them, 512 in flight.
async fn jobs(url: &str, n: usize, mut stop: watch::Receiver<bool>, t0: Instant) -> Res<Tally> {
    let ch = connection(url).await?;
    let tally = Tally::default();
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..512 {
        let mut c = LeasesClient::new(ch.clone());
        let (tally, next, done) = (tally.clone(), next.clone(), done.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= n {
                    return;
                }
                let r = c
                    .acquire(lh::AcquireRequest {
                        job: format!("attack/job-{i:07}"),
                        holder: "attacker@bench".into(),
                        ttl: Some(dur(Duration::from_secs(60))),
                        wait: None,
                        ..Default::default()
                    })
                    .await;
                match r {
                    Ok(r) if r.get_ref().acquired => tally.add("ok"),
                    Ok(_) => tally.add("not granted"),
                    Err(s) => tally.status(&s),
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let mut next_report = 50_000u64.min(n as u64);
    let mut finished = None;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let d = done.load(Ordering::Relaxed);
        if d >= next_report && finished.is_none() {
            say!(
                t0,
                "jobs: {d} created in {:.1} s",
                start.elapsed().as_secs_f64()
            );
            next_report += 50_000;
        }
        if d >= n as u64 && finished.is_none() {
            finished = Some(start.elapsed());
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    match finished {
        Some(f) => tally.add_n(
            &format!(
                "ms to create them all ({:.0} jobs/s)",
                n as f64 / f.as_secs_f64()
            ),
            f.as_millis() as u64,
        ),
        None => tally.add_n(
            "created before the window ended (not all)",
            done.load(Ordering::Relaxed),
        ),
    }
    Ok(tally)
}

/// Watches of the leader's job, each held open until the stop.
async fn watchers(
    url: &str,
    n: usize,
    conns: usize,
    stop: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
    t0: Instant,
) -> Res<Tally> {
    let mut chans = Vec::new();
    for _ in 0..conns {
        chans.push(connection(url).await?);
    }
    let tally = Tally::default();
    let open = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    let start = Instant::now();
    for i in 0..n {
        let mut c = LeasesClient::new(chans[i % conns].clone());
        let (tally, open) = (tally.clone(), open.clone());
        let mut stop = stop.clone();
        tasks.spawn(async move {
            // A refused watch is asked for again, 100 ms later, until the
            // stop: the attacker wants them all.
            loop {
                let r = tokio::select! {
                    _ = stop.changed() => return,
                    r = c.watch_lease(lh::WatchLeaseRequest { job: "isolation/leader".into() }) => r,
                };
                let mut events = match r {
                    Ok(r) => r.into_inner(),
                    Err(s) => {
                        tally.status(&s);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let first = tokio::select! {
                    _ = stop.changed() => return,
                    m = events.message() => m,
                };
                match first {
                    Ok(Some(_)) => {
                        tally.add("opened");
                        open.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(None) => {
                        tally.add("ended before its first event");
                        continue;
                    }
                    Err(s) => {
                        tally.status(&s);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
                loop {
                    tokio::select! {
                        _ = stop.changed() => return,
                        m = events.message() => match m {
                            Ok(Some(_)) => tally.add("events after the first"),
                            Ok(None) | Err(_) => {
                                tally.add("ended by the server");
                                open.fetch_sub(1, Ordering::Relaxed);
                                break;
                            }
                        },
                    }
                }
            }
        });
    }
    let mut stop = stop;
    let mut reported = false;
    let mut next = 2.0;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let o = open.load(Ordering::Relaxed);
        if !reported && o >= n as u64 {
            say!(
                t0,
                "watchers: {o} open after {:.2} s; {}",
                start.elapsed().as_secs_f64(),
                tally.summary()
            );
            reported = true;
            let _ = ready.send(true);
        } else if !reported && start.elapsed().as_secs_f64() >= next {
            next += 5.0;
            say!(t0, "watchers: {o} open; {}", tally.summary());
        }
    }
    tally.add_n(
        "open at the end (then cancelled)",
        open.load(Ordering::Relaxed),
    );
    while tasks.join_next().await.is_some() {}
    drop(chans);
    Ok(tally)
}

/// 64 KiB fenced writes of distinct keys into one job, 32 in flight on one
/// connection, until the stop.
async fn writes(
    url: &str,
    max_keys: usize,
    stop: watch::Receiver<bool>,
    t0: Instant,
) -> Res<Tally> {
    let ch = connection(url).await?;
    let job = "attack/store";
    let token = attacker_lease(&ch, job).await?;
    let tally = Tally::default();
    let next = Arc::new(AtomicU64::new(0));
    let value = Arc::new(vec![0x5au8; 64 * 1024]);
    let mut tasks = JoinSet::new();
    for _ in 0..32 {
        let mut c = FencedStoreClient::new(ch.clone())
            .max_decoding_message_size(1 << 20)
            .max_encoding_message_size(1 << 20);
        let (tally, next, value) = (tally.clone(), next.clone(), value.clone());
        let mut stop = stop.clone();
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let req = lh::CheckedWriteRequest {
                    proof: Default::default(),
                    job: job.into(),
                    token,
                    key: format!("key-{:08}", i % max_keys.max(1)).into_bytes(),
                    value: value.as_ref().clone(),
                    delete: false,
                };
                let r = tokio::select! {
                    _ = stop.changed() => return,
                    r = c.checked_write(req) => r,
                };
                match r {
                    Ok(_) => tally.add("ok"),
                    Err(s) => {
                        tally.status(&s);
                        // A refusal is answered at once: do not spin.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        });
    }
    let mut stop = stop;
    let start = Instant::now();
    let mut next_report = 2.0;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        if start.elapsed().as_secs_f64() >= next_report {
            next_report += 2.0;
            say!(t0, "writes: {}", tally.summary());
        }
    }
    while tasks.join_next().await.is_some() {}
    let n = tally.get("ok");
    tally.add_n(
        &format!(
            "MiB written ({:.0} writes/s)",
            n as f64 / start.elapsed().as_secs_f64()
        ),
        n * 64 / 1024,
    );
    Ok(tally)
}

/// The attacker's lease on `job`, for a day: its token.
async fn attacker_lease(ch: &Channel, job: &str) -> Res<u64> {
    let r = LeasesClient::new(ch.clone())
        .acquire(lh::AcquireRequest {
            job: job.into(),
            holder: "attacker@bench".into(),
            ttl: Some(dur(Duration::from_secs(24 * 3600))),
            wait: None,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(r.lease.ok_or("no lease")?.token)
}

fn dur(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

// ---- /metrics with a million jobs ----

/// `/metrics` on a server that knows `--metrics-jobs` jobs.
struct MetricsPage {
    jobs: usize,
    create_secs: f64,
    rss_jobs: u64,
    empty: Scrapes,
    full: Scrapes,
    /// Series of `leasehold_job_leader` on the full page.
    job_series: usize,
    /// `leasehold_jobs` on the full page.
    jobs_gauge: u64,
    /// Back-to-back renewals without scrapes, and while scraped.
    renew_quiet: Vec<Duration>,
    renew_scraped: Vec<Duration>,
}

struct Scrapes {
    bytes: usize,
    times: Vec<Duration>,
}

async fn scrapes(admin: &str, n: u64) -> Res<(Scrapes, String)> {
    let mut times = Vec::new();
    let mut page = String::new();
    for _ in 0..n {
        let t = Instant::now();
        page = scrape(admin).await?;
        times.push(t.elapsed());
        // Scrapes are seconds apart in production; leave the server a
        // moment between them.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((
        Scrapes {
            bytes: page.len(),
            times,
        },
        page,
    ))
}

/// Renews back to back until `stop`; every latency.
async fn renew_loop(leader: &Leader, mut stop: watch::Receiver<bool>) -> Vec<Duration> {
    let mut lat = Vec::new();
    loop {
        let t = Instant::now();
        let r = tokio::select! {
            _ = stop.changed() => return lat,
            r = leader.client.renew(&leader.job, &leader.holder, leader.token, leader.ttl) => r,
        };
        lat.push(t.elapsed());
        if r.is_err() {
            return lat;
        }
    }
}

async fn metrics_page(a: &IsolationArgs, dir: &Path, t0: Instant) -> Res<MetricsPage> {
    let data = dir.join("metrics");
    let _ = std::fs::remove_dir_all(&data);
    let s = start_server(a, &data)?;
    let admin = s.admin.clone().ok_or("no admin address")?;
    let leader = Leader::start(&s.addr, Duration::from_secs(3600), false).await?;
    let (empty, _) = scrapes(&admin, a.scrapes).await?;
    say!(
        t0,
        "metrics: empty server, {} bytes, median {}",
        empty.bytes,
        ms(pct(&empty.times, 0.5))
    );

    let n = a.metrics_jobs;
    say!(t0, "metrics: creating {n} jobs (Acquire, 100 ms TTL)");
    let start = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..4 {
        let ch = connection(&s.addr).await?;
        for _ in 0..128 {
            let mut c = LeasesClient::new(ch.clone());
            let next = next.clone();
            tasks.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= n {
                        return Ok::<_, tonic::Status>(());
                    }
                    c.acquire(lh::AcquireRequest {
                        job: format!("metrics/job-{i:07}"),
                        holder: "metrics@bench".into(),
                        ttl: Some(dur(Duration::from_millis(100))),
                        wait: None,
                        ..Default::default()
                    })
                    .await?;
                    if i % 100_000 == 99_999 {
                        eprintln!("  {} jobs", i + 1);
                    }
                }
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let create_secs = start.elapsed().as_secs_f64();
    let rss_jobs = rss_bytes(s.pid())?;
    say!(
        t0,
        "metrics: {n} jobs in {create_secs:.1} s ({:.0}/s), RSS {} MiB",
        n as f64 / create_secs,
        rss_jobs >> 20
    );

    // Renewals back to back, without and then during the scrapes.
    let (stop, rx) = watch::channel(false);
    let quiet = {
        let l = &leader;
        let f = renew_loop(l, rx);
        tokio::pin!(f);
        tokio::select! {
            lat = &mut f => lat,
            _ = tokio::time::sleep(Duration::from_secs(3)) => {
                let _ = stop.send(true);
                f.await
            }
        }
    };
    let (stop, rx) = watch::channel(false);
    let (scraped, renew_scraped) = {
        let f = renew_loop(&leader, rx);
        tokio::pin!(f);
        let g = scrapes(&admin, a.scrapes);
        tokio::pin!(g);
        let mut lat = None;
        let r = loop {
            tokio::select! {
                l = &mut f, if lat.is_none() => lat = Some(l),
                r = &mut g => break r,
            }
        };
        let _ = stop.send(true);
        let lat = match lat {
            Some(l) => l,
            None => f.await,
        };
        (r?, lat)
    };
    let (full, page) = scraped;
    let job_series = page
        .lines()
        .filter(|l| l.starts_with("leasehold_job_leader{"))
        .count();
    let jobs_gauge = sum_of(&page, "leasehold_jobs ");
    say!(
        t0,
        "metrics: {} jobs: {} bytes, {} per-job series, median {} max {}",
        jobs_gauge,
        full.bytes,
        job_series,
        ms(pct(&full.times, 0.5)),
        ms(pct(&full.times, 1.0))
    );
    s.stop();
    let _ = std::fs::remove_dir_all(&data);
    Ok(MetricsPage {
        jobs: n,
        create_secs,
        rss_jobs,
        empty,
        full,
        job_series,
        jobs_gauge,
        renew_quiet: quiet,
        renew_scraped,
    })
}

// ---- the report ----

fn ms(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1e3)
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

fn print_row_progress(r: &Row, t0: Instant) {
    say!(
        t0,
        "{}: under attack p50 {} p99 {} max {} at {:.1} s ({:.2}x the baseline p99), {}; its writes: {}; attacker got: {}",
        r.attack,
        ms(r.under.pct(0.5)),
        ms(r.under.pct(0.99)),
        ms(r.under.pct(1.0)),
        r.under.slowest_at.as_secs_f64(),
        ratio(r.under.pct(0.99), r.base.pct(0.99)),
        lost_text(r),
        writes_text(&r.under),
        r.got
    );
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn lost_text(r: &Row) -> String {
    let mut t = match (&r.base.lost, &r.under.lost) {
        (None, None) if r.under.failed == 0 => "never lost its lease".to_owned(),
        (None, None) => format!(
            "kept its lease ({} renewals failed without LEASE_LOST)",
            r.under.failed
        ),
        (Some(b), None) => format!("**lost it in the baseline**: {b}"),
        (_, Some(u)) => format!("**LOST ITS LEASE**: {u}"),
    };
    if let Some(end) = &r.end_check {
        t.push_str(&format!(" (at the end of the attack, {end})"));
    }
    t
}

/// The leader's writes in a window: "30 ok, p99 1.2 ms" and refusals.
fn writes_text(w: &Window) -> String {
    let mut t = format!("{} ok", w.writes.len());
    if !w.writes.is_empty() {
        t.push_str(&format!(
            ", p50 {} p99 {}",
            ms(pct(&w.writes, 0.5)),
            ms(pct(&w.writes, 0.99))
        ));
    }
    for (why, n) in &w.write_errors {
        t.push_str(&format!(", **{n} {why}**"));
    }
    t
}

fn print_report(
    a: &IsolationArgs,
    rows: &[Row],
    memory: &[Memory],
    metrics: Option<&MetricsPage>,
    elapsed: Duration,
) {
    println!();
    println!(
        "Isolation: a leader with a {} s lease renews every ttl/3 for {} s alone, then {} s while one client attacks ({:.0} s in all; counts x{}).",
        a.ttl,
        a.seconds,
        a.seconds,
        elapsed.as_secs_f64(),
        a.scale
    );
    if !rows.is_empty() {
        println!();
        println!("| attack | renewals (baseline / attack) | baseline p50 / p99 / max | under attack p50 / p99 / max | p99 ÷ baseline | the leader | the leader's CheckedWrites (baseline / attack) | server CPU s (baseline / attack) | server RSS (before / peak) | what the attacker got |");
        println!("|---|---:|---:|---:|---:|---|---|---:|---:|---|");
        for r in rows {
            println!(
                "| {} | {} / {} | {} / {} / {} | {} / {} / {} (at {:.1} s) | {:.2}x | {} | {} / {} | {:.2} / {:.2} | {} / {} | {} |",
                r.what,
                r.base.lat.len(),
                r.under.lat.len(),
                ms(r.base.pct(0.5)),
                ms(r.base.pct(0.99)),
                ms(r.base.pct(1.0)),
                ms(r.under.pct(0.5)),
                ms(r.under.pct(0.99)),
                ms(r.under.pct(1.0)),
                r.under.slowest_at.as_secs_f64(),
                ratio(r.under.pct(0.99), r.base.pct(0.99)),
                lost_text(r),
                writes_text(&r.base),
                writes_text(&r.under),
                r.cpu.0,
                r.cpu.1,
                mib(r.rss_before),
                mib(r.rss_peak),
                r.got
            );
        }
    }
    if !memory.is_empty() {
        println!();
        println!("| held, then cancelled | cycle | RSS before | at the peak | after the cancel | after ÷ before | after `malloc_trim(0)` | that ÷ before |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for m in memory {
            let (trimmed, ratio) = match m.trimmed {
                Some(t) => (mib(t), format!("{:.2}x", t as f64 / m.before.max(1) as f64)),
                None => ("-".to_owned(), "-".to_owned()),
            };
            println!(
                "| {} | {} | {} | {} | {} | {:.2}x | {trimmed} | {ratio} |",
                m.what,
                m.cycle,
                mib(m.before),
                mib(m.peak),
                mib(m.after),
                m.after as f64 / m.before.max(1) as f64
            );
        }
    }
    if let Some(m) = metrics {
        println!();
        println!(
            "/metrics: {} jobs created through gRPC in {:.1} s ({:.0} Acquires/s), server RSS {}; {} GETs each.",
            m.jobs,
            m.create_secs,
            m.jobs as f64 / m.create_secs,
            mib(m.rss_jobs),
            a.scrapes
        );
        println!();
        println!("| server | page size | per-job series | first GET | GET median | GET max |");
        println!("|---|---:|---:|---:|---:|---:|");
        println!(
            "| empty | {} bytes | 0 | {} | {} | {} |",
            m.empty.bytes,
            ms(m.empty.times[0]),
            ms(pct(&m.empty.times, 0.5)),
            ms(pct(&m.empty.times, 1.0))
        );
        println!(
            "| {} jobs (`leasehold_jobs` {}) | {} bytes | {} | {} | {} | {} |",
            m.jobs,
            m.jobs_gauge,
            m.full.bytes,
            m.job_series,
            ms(m.full.times[0]),
            ms(pct(&m.full.times, 0.5)),
            ms(pct(&m.full.times, 1.0))
        );
        println!();
        println!("| back-to-back Renew on another connection | renewals | p50 | p99 | max |");
        println!("|---|---:|---:|---:|---:|");
        for (what, v) in [
            ("3 s without scrapes", &m.renew_quiet),
            ("while /metrics is scraped", &m.renew_scraped),
        ] {
            println!(
                "| {what} | {} | {} | {} | {} |",
                v.len(),
                ms(pct(v, 0.5)),
                ms(pct(v, 0.99)),
                ms(pct(v, 1.0))
            );
        }
    }
}
