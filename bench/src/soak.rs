//! `leasehold-bench soak`: does the data dir follow live data under churn?
//!
//! One `leasehold serve` on a data dir of its own, and the churn of issue
//! 41: `--writers` tasks each hold a job and write values of 1 to 64 KiB
//! (uniform) into `--keys` keys of it, over and over, while one more task
//! loops Acquire, three such writes, Release, DeleteJob on jobs of its
//! own (`--churn-jobs` names, taken in turn). For `--seconds` the data
//! dir's size on disk (allocated blocks, as `du` counts them) is sampled
//! every `--every` seconds next to the live data: the bytes of every key
//! and value a read would return, which the bench knows exactly because it
//! wrote them. Then the load stops, the server idles `--idle` seconds, and
//! is restarted; the size is read after each.
//!
//! The server's own flags come with `--server-arg` (repeatable): the
//! baseline is the same binary with `--server-arg=--reclaim-ratio=0`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::client::Client;

use crate::proc::Server;
use crate::sys::Res;
use crate::Rng;

/// `leasehold-bench soak`'s flags.
#[derive(clap::Args)]
pub struct SoakArgs {
    /// The `leasehold` binary (a release build for meaningful numbers).
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory (the data dir goes here, removed after).
    #[arg(long)]
    work_dir: PathBuf,
    /// Seconds of churn.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Seconds between two samples of the data dir's size.
    #[arg(long, default_value_t = 30)]
    every: u64,
    /// Seconds the server idles after the churn, before the restart.
    #[arg(long, default_value_t = 30)]
    idle: u64,
    /// Writer tasks, each with a job of its own.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Keys each writer writes into.
    #[arg(long, default_value_t = 50)]
    keys: usize,
    /// The job names the delete loop takes in turn.
    #[arg(long, default_value_t = 64)]
    churn_jobs: usize,
    /// More flags for `leasehold serve`, e.g.
    /// `--server-arg=--reclaim-ratio=0` (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    server_arg: Vec<String>,
}

/// Values are 1 to 64 KiB.
const MAX_VALUE: usize = 64 * 1024;

/// What the load has done so far.
#[derive(Default)]
struct Tally {
    /// Bytes of keys and values written, deleted jobs' included.
    written: AtomicU64,
    writes: AtomicU64,
    deletes: AtomicU64,
    /// (writer, key) -> bytes of the key and its current value.
    live: Mutex<HashMap<(usize, usize), u64>>,
}

impl Tally {
    fn live_bytes(&self) -> u64 {
        self.live.lock().expect("live lock").values().sum()
    }
}

pub async fn run(a: SoakArgs) -> Res<()> {
    let t0 = Instant::now();
    let dir = a.work_dir.join(format!("soak-{}", std::process::id()));
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    let server = start(&a, &data)?;
    let start_size = du(&data);
    eprintln!(
        "[{:6.1}s] server {} on {}; data dir {:.1} MB; flags {:?}",
        t0.elapsed().as_secs_f64(),
        server.pid(),
        data.display(),
        mb(start_size),
        a.server_arg
    );
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..a.writers {
        let (url, tally, stop, keys) = (server.addr.clone(), tally.clone(), stop.clone(), a.keys);
        tasks.spawn(async move { writer(&url, w, keys, &tally, &stop).await });
    }
    {
        let (url, tally, stop, jobs) = (
            server.addr.clone(),
            tally.clone(),
            stop.clone(),
            a.churn_jobs,
        );
        tasks.spawn(async move { deleter(&url, jobs, &tally, &stop).await });
    }
    let mut rows = vec![Row::at("start", 0.0, &tally, start_size)];
    let end = t0 + Duration::from_secs(a.seconds);
    loop {
        let next = (Instant::now() + Duration::from_secs(a.every)).min(end);
        tokio::time::sleep_until(next.into()).await;
        if let Some(r) = tasks.try_join_next() {
            r??;
            return Err("a load task ended early".into());
        }
        let row = Row::at("churn", t0.elapsed().as_secs_f64(), &tally, du(&data));
        row.print();
        rows.push(row);
        if Instant::now() >= end {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let row = Row::at("stopped", t0.elapsed().as_secs_f64(), &tally, du(&data));
    row.print();
    rows.push(row);
    tokio::time::sleep(Duration::from_secs(a.idle)).await;
    let row = Row::at("idle", t0.elapsed().as_secs_f64(), &tally, du(&data));
    row.print();
    rows.push(row);
    server.stop();
    let restarted = start(&a, &data)?;
    let row = Row::at("restarted", t0.elapsed().as_secs_f64(), &tally, du(&data));
    row.print();
    rows.push(row);
    // The live data, read back through the restarted server: what the
    // ratio divides by is what the server holds.
    let client = Client::connect(&restarted.addr).await?;
    let mut read_back = 0u64;
    for w in 0..a.writers {
        let job = format!("soak-writer-{w}");
        for k in 0..a.keys {
            let key = format!("key-{k:03}");
            if let Ok(v) = client.read(&job, key.as_bytes()).await {
                read_back += (key.len() + v.value.len()) as u64;
            }
        }
    }
    restarted.stop();
    let _ = std::fs::remove_dir_all(&dir);
    let last = rows.last().expect("rows");
    println!();
    println!(
        "soak: {} s of churn, {} writers x {} keys of 1 to 64 KiB, one delete loop over {} jobs; \
         server flags {:?}",
        a.seconds, a.writers, a.keys, a.churn_jobs, a.server_arg
    );
    println!(
        "| when | s | written MB | writes | jobs deleted | data dir MB | live MB | dir / live |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let ratio = match r.live {
            0 => String::new(),
            _ => format!("{:.1}", r.ratio()),
        };
        println!(
            "| {} | {:.0} | {:.0} | {} | {} | {:.1} | {:.2} | {ratio} |",
            r.what,
            r.secs,
            mb(r.written),
            r.writes,
            r.deletes,
            mb(r.dir),
            mb(r.live),
        );
    }
    println!(
        "live data read back after the restart: {:.2} MB (the bench's own count: {:.2} MB)",
        mb(read_back),
        mb(last.live)
    );
    println!(
        "final: data dir {:.1} MB for {:.2} MB of live data, {:.1}x; peak {:.1} MB",
        mb(last.dir),
        mb(read_back),
        last.dir as f64 / read_back.max(1) as f64,
        mb(rows.iter().map(|r| r.dir).max().unwrap_or(0))
    );
    Ok(())
}

struct Row {
    what: &'static str,
    secs: f64,
    written: u64,
    writes: u64,
    deletes: u64,
    dir: u64,
    live: u64,
}

impl Row {
    fn at(what: &'static str, secs: f64, t: &Tally, dir: u64) -> Row {
        Row {
            what,
            secs,
            written: t.written.load(Ordering::Relaxed),
            writes: t.writes.load(Ordering::Relaxed),
            deletes: t.deletes.load(Ordering::Relaxed),
            dir,
            live: t.live_bytes(),
        }
    }

    fn ratio(&self) -> f64 {
        self.dir as f64 / self.live.max(1) as f64
    }

    fn print(&self) {
        eprintln!(
            "[{:6.1}s] {}: written {:.0} MB ({} writes, {} jobs deleted), data dir {:.1} MB, \
             live {:.2} MB, {:.1}x",
            self.secs,
            self.what,
            mb(self.written),
            self.writes,
            self.deletes,
            mb(self.dir),
            mb(self.live),
            self.ratio()
        );
    }
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

fn start(a: &SoakArgs, data: &Path) -> Res<Server> {
    let mut cmd = Command::new(&a.leasehold_bin);
    cmd.args(crate::proc::SERVE)
        .args(crate::proc::LONG_TTLS)
        .args(crate::proc::NO_ACQUIRE_PACING)
        .arg("--data-dir")
        .arg(data)
        .args(&a.server_arg)
        .env("RUST_LOG", "info");
    Server::spawn_command(cmd)
}

/// Bytes allocated on disk under `dir` (`du`'s count).
pub fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

fn value(rng: &mut Rng) -> Vec<u8> {
    let n = 1024 + rng.below(MAX_VALUE - 1024 + 1);
    let b = rng.below(256) as u8;
    vec![b; n]
}

async fn writer(
    url: &str,
    w: usize,
    keys: usize,
    t: &Tally,
    stop: &std::sync::atomic::AtomicBool,
) -> Res<()> {
    let client = Client::connect(url).await?;
    let job = format!("soak-writer-{w}");
    let got = client
        .acquire(&job, "soak", Duration::from_secs(86_400), Duration::ZERO)
        .await?;
    if !got.acquired {
        return Err(format!("{job} is held by another").into());
    }
    let token = got.lease.token;
    let mut rng = Rng::new(0x5eed + w as u64);
    while !stop.load(Ordering::Relaxed) {
        let k = rng.below(keys);
        let key = format!("key-{k:03}");
        let v = value(&mut rng);
        let n = (key.len() + v.len()) as u64;
        client.checked_write(&job, token, key.as_bytes(), v).await?;
        t.live.lock().expect("live lock").insert((w, k), n);
        t.written.fetch_add(n, Ordering::Relaxed);
        t.writes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

async fn deleter(
    url: &str,
    jobs: usize,
    t: &Tally,
    stop: &std::sync::atomic::AtomicBool,
) -> Res<()> {
    let client = Client::connect(url).await?;
    let mut rng = Rng::new(0xde1e7e);
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let job = format!("soak-churn-{}", n % jobs.max(1));
        n += 1;
        let got = client
            .acquire(&job, "soak-churn", Duration::from_secs(60), Duration::ZERO)
            .await?;
        if !got.acquired {
            return Err(format!("{job} is held by another").into());
        }
        let token = got.lease.token;
        for k in 0..3 {
            let key = format!("key-{k}");
            let v = value(&mut rng);
            let b = (key.len() + v.len()) as u64;
            client.checked_write(&job, token, key.as_bytes(), v).await?;
            t.written.fetch_add(b, Ordering::Relaxed);
            t.writes.fetch_add(1, Ordering::Relaxed);
        }
        client.release(&job, "soak-churn", token).await?;
        client.delete_job(&job).await?;
        t.deletes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
