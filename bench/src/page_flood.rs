//! `leasehold-bench isolation2`: the second isolation pass (issue 41),
//! measured, never asserted. Each attack runs on a fresh server.
//!
//! - `page-json`: 60,000 jobs are created (held, 1 h), then a leader takes
//!   a lease with a 2 s TTL and renews it every ttl/3 on its own
//!   connection: first for `--seconds` alone (the baseline), then for as
//!   long again while 64 loops GET the status page's `/api/jobs`, each
//!   following the page's cursor (`next`) and starting again at the end
//!   (a server without pages answers the whole list each time). The
//!   report: the renewals' p50, p99 and max in both windows, the p99 as a
//!   ratio of the baseline's, whether the lease was lost, the server's RSS
//!   before and at its peak, the answers by status and the bytes served a
//!   second, and the budget's counters from `/metrics`. With
//!   `--spread-addresses` each loop comes from an address of its own
//!   (127.0.0.2 on), so that no per-address budget holds them together.
//! - `churn-memory`: the server's RSS at start; after 200,000 jobs are
//!   acquired, released and deleted (256 calls in flight over 4
//!   connections); after `--idle` seconds idle; then after another
//!   200,000 are acquired (all held at once), released and deleted, and
//!   again after `--idle` seconds idle.
//!
//! `leasehold-bench isolation2 --leasehold-bin target/release/leasehold --work-dir /tmp/lh-iso2`

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::client::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Endpoint;

use crate::proc::{rss_bytes, Server};
use crate::sys::Res;

/// `leasehold-bench isolation2`'s flags.
#[derive(clap::Args)]
pub struct Isolation2Args {
    /// The `leasehold` binary (a release build for meaningful numbers).
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory (the servers' data dirs go here, and are
    /// removed after each attack).
    #[arg(long)]
    work_dir: PathBuf,
    /// What to run, comma separated: page-json, churn-memory.
    #[arg(long, value_delimiter = ',', default_value = "page-json,churn-memory")]
    only: Vec<String>,
    /// Runs of each attack, each on a fresh server.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Seconds of each window of `page-json`: the baseline, then as long
    /// under attack.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Jobs the server holds before `page-json`'s flood.
    #[arg(long, default_value_t = 60_000)]
    page_jobs: usize,
    /// Loops of `/api/jobs` at once.
    #[arg(long, default_value_t = 64)]
    loops: usize,
    /// Each loop from an address of its own (127.0.0.2 on).
    #[arg(long)]
    spread_addresses: bool,
    /// Jobs of each `churn-memory` round.
    #[arg(long, default_value_t = 200_000)]
    churn_jobs: usize,
    /// Seconds idle before `churn-memory` reads the RSS.
    #[arg(long, default_value_t = 60)]
    idle: u64,
    /// More flags for every `leasehold serve` (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    server_arg: Vec<String>,
}

macro_rules! say {
    ($t0:expr, $($a:tt)*) => {
        eprintln!("[{:6.1}s] {}", $t0.elapsed().as_secs_f64(), format!($($a)*))
    };
}

pub async fn run(a: Isolation2Args) -> Res<()> {
    crate::isolation::raise_fd_limit();
    let t0 = Instant::now();
    let dir = a
        .work_dir
        .join(format!("isolation2-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut pages = Vec::new();
    let mut churns = Vec::new();
    for run in 0..a.runs {
        if a.only.iter().any(|o| o == "page-json") {
            let r = page_json(&a, &dir.join(format!("page-{run}")), t0).await?;
            say!(t0, "page-json run {}: {}", run + 1, r.line());
            pages.push(r);
        }
        if a.only.iter().any(|o| o == "churn-memory") {
            let r = churn_memory(&a, &dir.join(format!("churn-{run}")), t0).await?;
            say!(t0, "churn-memory run {}: {}", run + 1, r.line());
            churns.push(r);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !pages.is_empty() {
        println!(
            "page-json: {} jobs, {} loops of /api/jobs{}",
            a.page_jobs,
            a.loops,
            if a.spread_addresses {
                ", one address each"
            } else {
                ", one address"
            }
        );
        println!("| run | renew p50 / p99 / max, baseline | under attack | p99 ratio | lease lost | RSS before → peak | answers | served | slowed / refused (metrics) |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for (i, r) in pages.iter().enumerate() {
            println!("| {} | {} |", i + 1, r.line().replace("; ", " | "));
        }
    }
    if !churns.is_empty() {
        println!(
            "churn-memory: {} jobs a round, {} s idle",
            a.churn_jobs, a.idle
        );
        println!(
            "| run | RSS start | after round 1 | idle | after round 2 (held) | idle | jobs left |"
        );
        println!("|---|---|---|---|---|---|---|");
        for (i, r) in churns.iter().enumerate() {
            println!("| {} | {} |", i + 1, r.line().replace("; ", " | "));
        }
    }
    Ok(())
}

fn start_server(a: &Isolation2Args, data: &Path) -> Res<Server> {
    std::fs::create_dir_all(data)?;
    let mut cmd = Command::new(&a.leasehold_bin);
    cmd.args(crate::proc::SERVE)
        .args(crate::proc::LONG_TTLS)
        .args(crate::proc::NO_ACQUIRE_PACING)
        .args(["--max-jobs", "1000000"])
        .arg("--data-dir")
        .arg(data)
        .args(&a.server_arg)
        .env("RUST_LOG", "error");
    Server::spawn_command(cmd)
}

async fn client(url: &str, timeout: Option<Duration>) -> Res<Client> {
    let mut e = Endpoint::from_shared(url.to_owned())?.tcp_nodelay(true);
    if let Some(t) = timeout {
        e = e.timeout(t);
    }
    Ok(Client::from_channel(e.connect().await?))
}

/// Runs `f(i)` for `i` in `0..n`, `in_flight` at once over `conns`
/// connections; the count of calls that failed.
async fn each<F, Fut>(url: &str, n: usize, conns: usize, in_flight: usize, f: F) -> Res<u64>
where
    F: Fn(Client, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let mut clients = Vec::new();
    for _ in 0..conns {
        clients.push(client(url, None).await?);
    }
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let f = Arc::new(f);
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..in_flight {
        let (c, next, failed, f) = (
            clients[k % conns].clone(),
            next.clone(),
            failed.clone(),
            f.clone(),
        );
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= n {
                    return;
                }
                if !f(c.clone(), i).await {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(failed.load(Ordering::Relaxed))
}

// ---- page-json ----

struct PageRow {
    base: Vec<Duration>,
    attack: Vec<Duration>,
    lost: Option<String>,
    rss_before: u64,
    rss_peak: u64,
    answers: BTreeMap<u16, u64>,
    bytes: u64,
    secs: f64,
    slowed: f64,
    refused: f64,
}

impl PageRow {
    fn line(&self) -> String {
        format!(
            "{}; {}; {:.2}x; {}; {} → {} MiB; {}; {:.1} MiB/s; {:.0} / {:.0}",
            triple(&self.base),
            triple(&self.attack),
            pct(&self.attack, 0.99).as_secs_f64() / pct(&self.base, 0.99).as_secs_f64().max(1e-6),
            self.lost.as_deref().unwrap_or("no"),
            self.rss_before >> 20,
            self.rss_peak >> 20,
            self.answers
                .iter()
                .map(|(c, n)| format!(
                    "{n}×{}",
                    if *c == 0 {
                        "closed".to_owned()
                    } else {
                        c.to_string()
                    }
                ))
                .collect::<Vec<_>>()
                .join(", "),
            self.bytes as f64 / self.secs / (1 << 20) as f64,
            self.slowed,
            self.refused,
        )
    }
}

fn triple(v: &[Duration]) -> String {
    format!(
        "{} / {} / {} ms",
        ms(pct(v, 0.5)),
        ms(pct(v, 0.99)),
        ms(pct(v, 1.0))
    )
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn pct(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
}

/// The leader: renews every ttl/3 until `stop`; each latency, and why it
/// lost its lease if it did.
async fn renew_window(
    c: &Client,
    token: u64,
    ttl: Duration,
    secs: Duration,
) -> (Vec<Duration>, Option<String>) {
    let mut lat = Vec::new();
    let end = Instant::now() + secs;
    let mut next = tokio::time::Instant::now() + ttl / 3;
    while Instant::now() < end {
        tokio::time::sleep_until(next).await;
        next += ttl / 3;
        let t = Instant::now();
        let r = c
            .renew("isolation/leader", "leader@bench", token, ttl)
            .await;
        lat.push(t.elapsed());
        match r {
            Ok(l) if l.token == token => {}
            Ok(l) => return (lat, Some(format!("token changed to {}", l.token))),
            Err(e) => return (lat, Some(e.to_string())),
        }
        let now = tokio::time::Instant::now();
        if next < now {
            next = now;
        }
    }
    (lat, None)
}

/// One GET of `path` (HTTP/1.1, its own connection, from `from` if
/// given): the status (0 when closed without an answer) and the body's
/// length and text.
async fn get(admin: SocketAddr, from: Option<std::net::IpAddr>, path: &str) -> (u16, String) {
    let conn = async {
        let sock = tokio::net::TcpSocket::new_v4()?;
        if let Some(ip) = from {
            sock.bind(SocketAddr::new(ip, 0))?;
        }
        let mut s = sock.connect(admin).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        std::io::Result::Ok(out)
    };
    match conn.await {
        Ok(out) if !out.is_empty() => {
            let text = String::from_utf8_lossy(&out).into_owned();
            let code = text
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let body = text
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_owned())
                .unwrap_or_default();
            (code, body)
        }
        _ => (0, String::new()),
    }
}

/// The page's `next` cursor, if it has one (an older server's answer has
/// none: the loop starts again).
fn next_of(body: &str) -> Option<String> {
    let (_, tail) = body.rsplit_once("\"next\":\"")?;
    let (name, _) = tail.rsplit_once("\"}")?;
    Some(name.to_owned())
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

async fn page_json(a: &Isolation2Args, data: &Path, t0: Instant) -> Res<PageRow> {
    let server = start_server(a, data)?;
    let pid = server.pid();
    let admin: SocketAddr = server.admin.clone().ok_or("no admin address")?.parse()?;
    say!(t0, "page-json: creating {} jobs", a.page_jobs);
    let failed = each(&server.addr, a.page_jobs, 4, 256, |c, i| async move {
        c.acquire(
            &format!("page/{i:06}"),
            "holder@bench",
            Duration::from_secs(3600),
            Duration::ZERO,
        )
        .await
        .is_ok_and(|g| g.acquired)
    })
    .await?;
    if failed > 0 {
        return Err(format!("{failed} of the jobs were not created").into());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = rss_bytes(pid)?;
    let ttl = Duration::from_secs(2);
    let leader = client(&server.addr, Some(ttl)).await?;
    let got = leader
        .acquire("isolation/leader", "leader@bench", ttl, Duration::ZERO)
        .await?;
    let token = got.lease.token;
    let secs = Duration::from_secs_f64(a.seconds);
    say!(t0, "page-json: baseline, {secs:?}");
    let (base, lost_base) = renew_window(&leader, token, ttl, secs).await;
    say!(t0, "page-json: {} loops of /api/jobs, {secs:?}", a.loops);
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(Mutex::new(BTreeMap::<u16, u64>::new()));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut loops = Vec::new();
    for k in 0..a.loops {
        let from = a
            .spread_addresses
            .then(|| std::net::IpAddr::from([127, 0, 1 + (k / 250) as u8, 2 + (k % 250) as u8]));
        let (stop, answers, bytes) = (stop.clone(), answers.clone(), bytes.clone());
        loops.push(tokio::spawn(async move {
            let mut after: Option<String> = None;
            while !stop.load(Ordering::Relaxed) {
                let path = match &after {
                    Some(c) => format!("/api/jobs?after={}", encode(c)),
                    None => "/api/jobs".to_owned(),
                };
                let (code, body) = get(admin, from, &path).await;
                *answers.lock().unwrap().entry(code).or_default() += 1;
                bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                match code {
                    200 => after = next_of(&body),
                    // Refused: a client that respects Retry-After would
                    // wait longer; a flood comes back soon.
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }));
    }
    let peak = Arc::new(AtomicU64::new(rss_before));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(r) = rss_bytes(pid) {
                    peak.fetch_max(r, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let t = Instant::now();
    let (attack, lost_attack) = if lost_base.is_none() {
        renew_window(&leader, token, ttl, secs).await
    } else {
        (Vec::new(), None)
    };
    let took = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        let _ = l.await;
    }
    let _ = sampler.await;
    let (_, metrics) = get(admin, None, "/metrics").await;
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    let row = PageRow {
        base,
        attack,
        lost: lost_base.or(lost_attack),
        rss_before,
        rss_peak: peak.load(Ordering::Relaxed),
        answers: answers.lock().unwrap().clone(),
        bytes: bytes.load(Ordering::Relaxed),
        secs: took,
        slowed: value("leasehold_admin_reads_slowed_total"),
        refused: value("leasehold_admin_reads_refused_total"),
    };
    server.stop();
    let _ = std::fs::remove_dir_all(data);
    Ok(row)
}

// ---- churn-memory ----

struct ChurnRow {
    start: u64,
    after1: u64,
    idle1: u64,
    after2: u64,
    idle2: u64,
    jobs_left: f64,
}

impl ChurnRow {
    fn line(&self) -> String {
        format!(
            "{:.1} MiB; {:.1} MiB; {:.1} MiB; {:.1} MiB; {:.1} MiB; {:.0}",
            mib(self.start),
            mib(self.after1),
            mib(self.idle1),
            mib(self.after2),
            mib(self.idle2),
            self.jobs_left
        )
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

async fn churn_memory(a: &Isolation2Args, data: &Path, t0: Instant) -> Res<ChurnRow> {
    let server = start_server(a, data)?;
    let pid = server.pid();
    let admin: SocketAddr = server.admin.clone().ok_or("no admin address")?.parse()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = rss_bytes(pid)?;
    let n = a.churn_jobs;
    let ttl = Duration::from_secs(3600);
    say!(t0, "churn-memory: {n} jobs acquired, released, deleted");
    let failed = each(&server.addr, n, 4, 256, move |c, i| async move {
        let job = format!("churn/a/{i:07}");
        let Ok(g) = c.acquire(&job, "churn@bench", ttl, Duration::ZERO).await else {
            return false;
        };
        c.release(&job, "churn@bench", g.lease.token).await.is_ok()
            && c.delete_job(&job).await.is_ok()
    })
    .await?;
    if failed > 0 {
        say!(t0, "churn-memory: {failed} jobs failed");
    }
    let after1 = rss_bytes(pid)?;
    say!(t0, "churn-memory: {} s idle", a.idle);
    tokio::time::sleep(Duration::from_secs(a.idle)).await;
    let idle1 = rss_bytes(pid)?;
    say!(
        t0,
        "churn-memory: {n} jobs held at once, then released and deleted"
    );
    let tokens = Arc::new(Mutex::new(vec![0u64; n]));
    let t = tokens.clone();
    each(&server.addr, n, 4, 256, move |c, i| {
        let t = t.clone();
        async move {
            let job = format!("churn/b/{i:07}");
            match c.acquire(&job, "churn@bench", ttl, Duration::ZERO).await {
                Ok(g) => {
                    t.lock().unwrap()[i] = g.lease.token;
                    true
                }
                Err(_) => false,
            }
        }
    })
    .await?;
    let t = tokens.clone();
    each(&server.addr, n, 4, 256, move |c, i| {
        let token = t.lock().unwrap()[i];
        async move {
            let job = format!("churn/b/{i:07}");
            c.release(&job, "churn@bench", token).await.is_ok() && c.delete_job(&job).await.is_ok()
        }
    })
    .await?;
    let after2 = rss_bytes(pid)?;
    say!(t0, "churn-memory: {} s idle", a.idle);
    tokio::time::sleep(Duration::from_secs(a.idle)).await;
    let idle2 = rss_bytes(pid)?;
    let (_, metrics) = get(admin, None, "/metrics").await;
    let jobs_left = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("leasehold_jobs ")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(f64::NAN);
    server.stop();
    let _ = std::fs::remove_dir_all(data);
    Ok(ChurnRow {
        start,
        after1,
        idle1,
        after2,
        idle2,
        jobs_left,
    })
}
