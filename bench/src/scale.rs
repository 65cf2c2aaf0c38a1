//! `leasehold-bench scale`: what held leases cost the single node as their
//! number grows, and whether a renewal stays as fast.
//!
//! For each count N (`--leases`, default 1,000, 10,000, 100,000 and
//! 1,000,000; add 10,000,000 by hand, it needs about 10 GiB of memory):
//! N held leases are written straight into a fresh sled data dir (one
//! holder, token 1, a one-hour TTL), and the release server is started on
//! it. Reported:
//!
//! - start-up: from spawn to the "listening" line (the restore of every
//!   lease included), at a restart (the server is started once, stopped
//!   and started again: the first start on a data dir written outside a
//!   server also does sled's first recovery of it, shown apart); the
//!   server's RSS once it listens, and once start-up's garbage is given
//!   back, with the bytes per lease over an empty data dir's RSS;
//! - the latency of a unary `Renew` of a random one of the N leases, from
//!   4 connections at 500 renewals a second each (2,000 a second: a light
//!   load, so that the figure is the call's own time, not a queue's);
//! - the latency of a `KeepAlive` message of 100 renewals of random
//!   leases, from 4 streams at 50 messages a second each;
//! - p99 of both against the same at the first (smallest) N, the baseline.
//!   The smallest N is measured again at the end, so that a drift of the
//!   machine's load over the run shows.
//!
//! Then the flatness comparison (`--flat`, default 1,000 against
//! 1,000,000): both servers up at once, measured in turns of 1 s, the
//! order swapped every round, so that the machine's load falls on both
//! alike; the p99 of each kind of call, many leases against few.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::proc::{rss_bytes, Server};
use crate::sys::Res;

#[derive(clap::Args)]
pub struct ScaleArgs {
    /// The release `leasehold` binary.
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory (the data dirs go here, removed after).
    #[arg(long)]
    work_dir: PathBuf,
    /// Lease counts, comma-separated; the first is the baseline.
    #[arg(
        long,
        default_value = "1000,10000,100000,1000000",
        value_delimiter = ','
    )]
    leases: Vec<usize>,
    /// Seconds of each latency measurement.
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Two counts, for the flatness comparison: both servers run at once
    /// and are measured in turns (`--flat-rounds` of 1 s each, the order
    /// swapped every round); `none` to skip it.
    #[arg(long, default_value = "1000,1000000")]
    flat: String,
    #[arg(long, default_value_t = 10)]
    flat_rounds: usize,
}

/// The holder of every lease written.
pub const HOLDER: &str = "scale@00000000-0000-4000-8000-00000000000a";
/// Their TTL: longer than any run.
pub const TTL: Duration = Duration::from_secs(3600);

/// The name of the `i`th lease written by [`seed`].
pub fn job_name(i: usize) -> String {
    format!("scale-{i:08}")
}

/// Writes `n` held leases (holder [`HOLDER`], token 1, [`TTL`]) straight
/// into a new sled store at `dir`, as the server persists them (synced in
/// groups, checkpointed into sled whenever the log is half full, and once
/// at the end, as a clean shutdown does), printing progress every million.
///
/// Without the checkpoints, every lease would wait in the log, and the
/// server's start-up would apply all of them in one transaction: a state no
/// running server leaves (it checkpoints when the log is half full), which
/// made start-up several times slower and its memory peak ten times
/// higher.
pub fn seed(dir: &Path, n: usize) -> Res<()> {
    use leasehold::lease::{LeaseRecord, Limits, Token};
    use leasehold::store::Store;
    let _ = std::fs::remove_dir_all(dir);
    let store = leasehold::store::sled::SledStore::open(dir)?;
    let limits = Limits {
        max_ttl: Duration::from_secs(24 * 3600),
        ..Limits::default()
    };
    let h = limits.holder(HOLDER)?;
    let t = Instant::now();
    for i in 0..n {
        let job = limits.job(&job_name(i))?;
        store.put_lease(
            &job,
            &LeaseRecord {
                issued: Default::default(),
                holder: Some(h.clone()),
                token: Token(1),
                ttl: TTL,
                owner: None,
                value: None,
            },
            &[],
            0,
        )?;
        if (i + 1) % 10_000 == 0 {
            store.sync()?;
            store.checkpoint_if_due()?;
        }
        if (i + 1) % 1_000_000 == 0 {
            eprintln!(
                "  written {} of {n} leases in {:.0} s",
                i + 1,
                t.elapsed().as_secs_f64()
            );
        }
    }
    store.sync()?;
    store.checkpoint()?;
    Ok(())
}

/// One count's figures.
struct Cell {
    leases: usize,
    /// From spawn to listening, at a restart (the second start).
    startup: Duration,
    /// The same at the first start on the written data dir.
    first_start: Duration,
    /// Half a second after it listens.
    rss: u64,
    /// After the latency phases, once start-up's garbage is given back.
    settled: u64,
    renew: Lat,
    keep_alive: Lat,
}

/// p50, p99 and the slowest of some calls.
#[derive(Clone, Copy)]
struct Lat {
    calls: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Lat {
    fn of(mut v: Vec<Duration>) -> Res<Lat> {
        if v.is_empty() {
            return Err("no calls were made".into());
        }
        v.sort();
        let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
        Ok(Lat {
            calls: v.len(),
            p50: at(0.50),
            p99: at(0.99),
            max: *v.last().expect("not empty"),
        })
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

pub async fn run(a: ScaleArgs) -> Res<()> {
    if a.leases.is_empty() {
        return Err("--leases: give at least one count".into());
    }
    let dir = a.work_dir.join(format!("scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let secs = Duration::from_secs_f64(a.secs);

    // The empty server's RSS, for the bytes per lease.
    let empty = dir.join("empty");
    let s = Server::leasehold(&a.leasehold_bin, &empty)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (startup_empty, rss_empty) = (s.startup, rss_bytes(s.pid())?);
    s.stop();

    let mut order = a.leases.clone();
    if a.leases.len() > 1 {
        order.push(a.leases[0]);
    }
    let mut cells = Vec::new();
    for n in order {
        eprintln!("{n} leases: writing them");
        let data = dir.join(format!("n{n}"));
        seed(&data, n)?;
        eprintln!("{n} leases: starting the server, stopping it, starting it again");
        // The first start on a data dir written outside a server does
        // sled's first recovery of it; a restart is what operators see.
        let first = Server::leasehold(&a.leasehold_bin, &data)?;
        let first_start = first.startup;
        first.stop();
        let s = Server::leasehold(&a.leasehold_bin, &data)?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss = rss_bytes(s.pid())?;
        eprintln!("{n} leases: renewing");
        let renew = renewals(&s.addr, n, secs).await?;
        let keep_alive = keep_alives(&s.addr, n, secs).await?;
        // The server gives back what its start-up freed within
        // `memory::EVERY` (5 s); the latency phases took longer.
        let settled = rss_bytes(s.pid())?;
        let startup = s.startup;
        s.stop();
        let _ = std::fs::remove_dir_all(&data);
        cells.push(Cell {
            leases: n,
            startup,
            first_start,
            rss,
            settled,
            renew,
            keep_alive,
        });
    }

    println!(
        "Held leases on the single node: start-up, memory, and a renewal's latency \
         (Renew: 4 connections x 500/s; KeepAlive: 4 streams x 50 messages/s of 100 renewals; {} s each)",
        a.secs
    );
    println!();
    println!(
        "Empty data dir: start-up {:.3} s, RSS {:.1} MiB.",
        startup_empty.as_secs_f64(),
        rss_empty as f64 / (1 << 20) as f64
    );
    println!();
    println!("| leases | restart | first start | RSS after start | RSS settled | bytes per lease (settled) | Renew p50 | Renew p99 | Renew max | p99 vs baseline | KeepAlive p50 | KeepAlive p99 | KeepAlive max | p99 vs baseline |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let base = (cells[0].renew.p99, cells[0].keep_alive.p99);
    for c in &cells {
        println!(
            "| {} | {:.2} s | {:.2} s | {:.1} MiB | {:.1} MiB | {:.0} | {} | {} | {} | {:.2}x | {} | {} | {} | {:.2}x |",
            c.leases,
            c.startup.as_secs_f64(),
            c.first_start.as_secs_f64(),
            c.rss as f64 / (1 << 20) as f64,
            c.settled as f64 / (1 << 20) as f64,
            c.settled.saturating_sub(rss_empty) as f64 / c.leases as f64,
            ms(c.renew.p50),
            ms(c.renew.p99),
            ms(c.renew.max),
            c.renew.p99.as_secs_f64() / base.0.as_secs_f64().max(1e-9),
            ms(c.keep_alive.p50),
            ms(c.keep_alive.p99),
            ms(c.keep_alive.max),
            c.keep_alive.p99.as_secs_f64() / base.1.as_secs_f64().max(1e-9),
        );
    }
    println!();
    println!(
        "Calls measured per row: {} Renews and {} KeepAlive messages (first row).",
        cells[0].renew.calls, cells[0].keep_alive.calls
    );
    if a.flat != "none" {
        flat(&a, &dir).await?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Renew and KeepAlive latency with few leases held against many, both
/// servers up at once and measured in turns, so that the machine's load
/// falls on both alike.
async fn flat(a: &ScaleArgs, dir: &Path) -> Res<()> {
    let counts: Vec<usize> = a
        .flat
        .split(',')
        .map(|c| c.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--flat: two counts, comma-separated ({e})"))?;
    let [few, many] = counts[..] else {
        return Err("--flat: two counts, comma-separated".into());
    };
    let mut servers = Vec::new();
    for n in [few, many] {
        let data = dir.join(format!("flat{n}"));
        seed(&data, n)?;
        Server::leasehold(&a.leasehold_bin, &data)?.stop();
        servers.push((n, Server::leasehold(&a.leasehold_bin, &data)?));
    }
    let slice = Duration::from_secs(1);
    let mut samples = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
    for round in 0..a.flat_rounds {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (n, s) = &servers[i];
            samples[i]
                .0
                .extend(renewal_samples(&s.addr, *n, slice).await?);
            samples[i]
                .1
                .extend(keep_alive_samples(&s.addr, *n, slice).await?);
        }
    }
    for (_, s) in servers {
        s.stop();
    }
    let [(r0, k0), (r1, k1)] = samples;
    let (r0, k0, r1, k1) = (Lat::of(r0)?, Lat::of(k0)?, Lat::of(r1)?, Lat::of(k1)?);
    println!();
    println!(
        "Flat under scale: {few} against {many} held leases, both servers up at once, measured in turns \
         ({} rounds of 1 s each per kind, the order swapped every round; same loads as above)",
        a.flat_rounds
    );
    println!();
    println!("| call | {few} held: p50 | p99 | {many} held: p50 | p99 | p99 ratio (goal ≤ 1.5x) | calls each |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (what, x, y) in [
        ("Renew", r0, r1),
        ("KeepAlive message (100 renewals)", k0, k1),
    ] {
        println!(
            "| {what} | {} | {} | {} | {} | {:.2}x | {} / {} |",
            ms(x.p50),
            ms(x.p99),
            ms(y.p50),
            ms(y.p99),
            y.p99.as_secs_f64() / x.p99.as_secs_f64().max(1e-9),
            x.calls,
            y.calls
        );
    }
    Ok(())
}

/// Unary renewals of random leases of the `n`, 4 connections at 500 a
/// second each, for `secs`; every one must be granted.
async fn renewals(addr: &str, n: usize, secs: Duration) -> Res<Lat> {
    Lat::of(renewal_samples(addr, n, secs).await?)
}

async fn renewal_samples(addr: &str, n: usize, secs: Duration) -> Res<Vec<Duration>> {
    let mut tasks = Vec::new();
    for c in 0..4u64 {
        let client = leasehold::client::Client::connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            let (mut rng, mut pace) = (crate::Rng::new(7 + c), Pace::new(2, secs));
            while let Some(keep) = pace.next().await {
                let job = job_name(rng.below(n));
                let t = Instant::now();
                let l = client.renew(&job, HOLDER, 1, TTL).await?;
                if l.token != 1 {
                    return Err(format!("{job}: renewed with token {}", l.token).into());
                }
                pace.took(keep, t.elapsed());
            }
            Ok(pace.samples)
        }));
    }
    gather(tasks).await
}

/// A client's calls, one every so many milliseconds for half a second of
/// warm-up and then `secs`; the times of those after the warm-up.
struct Pace {
    tick: tokio::time::Interval,
    warm: Instant,
    end: Instant,
    samples: Vec<Duration>,
}

impl Pace {
    fn new(every_ms: u64, secs: Duration) -> Pace {
        let mut tick = tokio::time::interval(Duration::from_millis(every_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let warm = Instant::now() + Duration::from_millis(500);
        Pace {
            tick,
            warm,
            end: warm + secs,
            samples: Vec::new(),
        }
    }

    /// Waits for the next call's turn; `None` once the time is up, else
    /// whether the call is to be kept.
    async fn next(&mut self) -> Option<bool> {
        if Instant::now() >= self.end {
            return None;
        }
        self.tick.tick().await;
        Some(Instant::now() >= self.warm)
    }

    fn took(&mut self, keep: bool, took: Duration) {
        if keep {
            self.samples.push(took);
        }
    }
}

/// Every client's samples, once they have all finished.
async fn gather(tasks: Vec<tokio::task::JoinHandle<Res<Vec<Duration>>>>) -> Res<Vec<Duration>> {
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// `KeepAlive` messages of 100 renewals of random leases, 4 streams at 50
/// a second each, for `secs`; every renewal must succeed.
async fn keep_alives(addr: &str, n: usize, secs: Duration) -> Res<Lat> {
    Lat::of(keep_alive_samples(addr, n, secs).await?)
}

async fn keep_alive_samples(addr: &str, n: usize, secs: Duration) -> Res<Vec<Duration>> {
    let mut tasks = Vec::new();
    for c in 0..4u64 {
        let client = leasehold::client::Client::connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut ka = client.keep_alive().await?;
            let (mut rng, mut pace) = (crate::Rng::new(70 + c), Pace::new(20, secs));
            while let Some(keep) = pace.next().await {
                let batch: Vec<_> = (0..100)
                    .map(|_| {
                        leasehold::client::KeepAliveRenewal::new(
                            &job_name(rng.below(n)),
                            HOLDER,
                            1,
                            TTL,
                        )
                    })
                    .collect();
                let t = Instant::now();
                let out = ka.renew(&batch).await?;
                if let Some(i) = out.iter().position(|o| !o.is_renewed()) {
                    return Err(format!("{}: not renewed", batch[i].job).into());
                }
                pace.took(keep, t.elapsed());
            }
            Ok(pace.samples)
        }));
    }
    gather(tasks).await
}

/// `leasehold-bench live-rss`: a running server's memory after a million
/// Acquires over gRPC, as users see it (not after a restart).
#[derive(clap::Args)]
pub struct LiveArgs {
    /// The release `leasehold` binary.
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory (the data dir goes here, removed after).
    #[arg(long)]
    work_dir: PathBuf,
    /// How many leases to acquire.
    #[arg(long, default_value_t = 1_000_000)]
    leases: usize,
    /// Over this many connections, each with a task of Acquires in turn.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Then keep the server up this many seconds more, its pid printed, to
    /// look at it (gdb, /proc/PID/smaps).
    #[arg(long, default_value_t = 0)]
    hold_secs: u64,
}

/// Starts an empty server, acquires `--leases` leases (one holder per
/// connection, TTL one hour) over `--connections` connections, and prints
/// the server's RSS before, just after the last grant, and 10 s later
/// (once the allocator gave back what it will), with the bytes per lease
/// over the empty server's.
pub async fn live(a: LiveArgs) -> Res<()> {
    let dir = a.work_dir.join(format!("live-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let s = Server::leasehold(&a.leasehold_bin, &dir.join("data"))?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let empty = rss_bytes(s.pid())?;
    let url = s.addr.clone();
    let per = a.leases.div_ceil(a.connections);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..a.connections {
        let url = url.clone();
        let n = per.min(a.leases.saturating_sub(c * per));
        tasks.spawn(async move {
            let client = leasehold::client::Client::connect(&url).await?;
            let holder = format!("live-{c}@00000000-0000-4000-8000-{c:012}");
            for i in 0..n {
                let job = job_name(c * per + i);
                let got = client.acquire(&job, &holder, TTL, Duration::ZERO).await?;
                if !got.acquired {
                    return Err(format!("{job} was not granted").into());
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(n)
        });
    }
    let mut done = 0;
    while let Some(r) = tasks.join_next().await {
        done += r.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    }
    let took = started.elapsed();
    let after = rss_bytes(s.pid())?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let settled = rss_bytes(s.pid())?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "live-rss: {done} leases acquired over {} connections in {:.1} s ({:.0}/s)",
        a.connections,
        took.as_secs_f64(),
        done as f64 / took.as_secs_f64()
    );
    println!(
        "| leases | RSS empty | RSS after the last grant | RSS 10 s later | bytes per lease (10 s later, over empty) |\n|---:|---:|---:|---:|---:|\n| {done} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.0} |",
        mib(empty),
        mib(after),
        mib(settled),
        settled.saturating_sub(empty) as f64 / done.max(1) as f64
    );
    if a.hold_secs > 0 {
        println!(
            "live-rss: the server (pid {}) stays up {} s",
            s.pid(),
            a.hold_secs
        );
        tokio::time::sleep(Duration::from_secs(a.hold_secs)).await;
    }
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
