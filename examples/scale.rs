//! Many leases and many watchers: server memory and latency, as ratios
//! against the same server empty, measured in the same run.
//!
//! ```text
//! cargo build --release && cargo run --release --example scale -- \
//!     [--server-bin target/release/leasehold] [--jobs 100000] [--watchers 10000]
//! ```
//!
//! Starts `leasehold serve` as a child process on 127.0.0.1, then:
//! 1. measures Renew and GetLease latency on the empty server (the baseline),
//! 2. holds `--jobs` leases (1,000 holders), and reads the server's RSS,
//! 3. opens `--watchers` WatchLease streams over several connections, and
//!    reads the RSS again,
//! 4. measures latency again, and how long a change takes to reach a watcher.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::client::Client;
use tokio::task::JoinSet;

struct Args {
    server_bin: String,
    jobs: usize,
    watchers: usize,
}

fn args() -> Args {
    let mut a = Args {
        server_bin: "target/release/leasehold".into(),
        jobs: 100_000,
        watchers: 10_000,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut it = v.iter();
    while let Some(k) = it.next() {
        let val = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--server-bin" => a.server_bin = val.clone(),
            "--jobs" => a.jobs = val.parse().expect("--jobs N"),
            "--watchers" => a.watchers = val.parse().expect("--watchers N"),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

async fn latency(c: &Client, holder: &str, token: u64, n: usize) -> (Duration, Duration, Duration) {
    let mut renew = Vec::with_capacity(n);
    let mut get = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        c.renew("probe", holder, token, Duration::from_secs(600))
            .await
            .unwrap();
        renew.push(t.elapsed());
        let t = Instant::now();
        c.get_lease("probe").await.unwrap();
        get.push(t.elapsed());
    }
    (
        pct(&mut renew, 0.5),
        pct(&mut renew, 0.99),
        pct(&mut get, 0.5),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Command::new(&a.server_bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--max-connections", "100000", "--max-in-flight", "100000"])
        .arg("--data-dir")
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {}: {e} (build it with cargo build --release)",
                a.server_bin
            )
        });
    let pid = server.id();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = format!("http://{}", line.split_whitespace().nth(3).unwrap());
    let c = Client::connect(&url).await.unwrap();
    let probe = c
        .acquire("probe", "probe", Duration::from_secs(600), Duration::ZERO)
        .await
        .unwrap();

    let rss0 = rss_kib(pid);
    let base = latency(&c, "probe", probe.lease.token, 2000).await;

    // Hold the leases: 16 connections, 1,000 holders.
    let t = Instant::now();
    let mut set = JoinSet::new();
    for w in 0..16 {
        let c = Client::connect(&url).await.unwrap();
        let jobs = a.jobs;
        set.spawn(async move {
            for i in (w..jobs).step_by(16) {
                let holder = format!("holder-{}", i % 1000);
                let r = c
                    .acquire(
                        &format!("fleet/{i:07}"),
                        &holder,
                        Duration::from_secs(600),
                        Duration::ZERO,
                    )
                    .await
                    .unwrap();
                assert!(r.acquired);
            }
        });
    }
    while set.join_next().await.is_some() {}
    let grant_time = t.elapsed();
    let rss_jobs = rss_kib(pid);

    // The watchers: up to 1,000 streams per connection.
    let t = Instant::now();
    let mut streams = Vec::with_capacity(a.watchers);
    let mut conn = c.clone();
    for i in 0..a.watchers {
        if i % 1000 == 0 {
            conn = Client::connect(&url).await.unwrap();
        }
        let mut s = conn
            .watch(&format!("fleet/{:07}", i % a.jobs.max(1)))
            .await
            .unwrap();
        s.message().await.unwrap().unwrap(); // the current state
        streams.push(s);
    }
    let watch_time = t.elapsed();
    let rss_watch = rss_kib(pid);
    let loaded = latency(&c, "probe", probe.lease.token, 2000).await;

    // A change reaching its watcher: release a watched job, time the event.
    let mut notify = Vec::new();
    for (i, stream) in streams.iter_mut().take(200).enumerate() {
        let job = format!("fleet/{i:07}");
        let holder = format!("holder-{}", i % 1000);
        let t = Instant::now();
        c.release(&job, &holder, 1).await.unwrap();
        stream.message().await.unwrap().unwrap();
        notify.push(t.elapsed());
    }

    let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1e3);
    let ratio = |x: Duration, y: Duration| x.as_secs_f64() / y.as_secs_f64();
    println!("| what | figure |");
    println!("|---|---|");
    println!("| server RSS, empty | {} MiB |", rss0 / 1024);
    println!(
        "| server RSS, {} leases held | {} MiB ({:.0} bytes/lease over empty) |",
        a.jobs,
        rss_jobs / 1024,
        (rss_jobs.saturating_sub(rss0) * 1024) as f64 / a.jobs.max(1) as f64
    );
    println!(
        "| server RSS, + {} watchers | {} MiB ({:.0} bytes/watcher) |",
        a.watchers,
        rss_watch / 1024,
        (rss_watch.saturating_sub(rss_jobs) * 1024) as f64 / a.watchers.max(1) as f64
    );
    println!(
        "| granting {} leases (16 clients) | {:.1} s ({:.0}/s) |",
        a.jobs,
        grant_time.as_secs_f64(),
        a.jobs as f64 / grant_time.as_secs_f64()
    );
    println!(
        "| opening {} watchers | {:.1} s |",
        a.watchers,
        watch_time.as_secs_f64()
    );
    println!(
        "| Renew p50, empty -> loaded | {} -> {} ({:.2}x) |",
        ms(base.0),
        ms(loaded.0),
        ratio(loaded.0, base.0)
    );
    println!(
        "| Renew p99, empty -> loaded | {} -> {} ({:.2}x) |",
        ms(base.1),
        ms(loaded.1),
        ratio(loaded.1, base.1)
    );
    println!(
        "| GetLease p50, empty -> loaded | {} -> {} ({:.2}x) |",
        ms(base.2),
        ms(loaded.2),
        ratio(loaded.2, base.2)
    );
    println!(
        "| Release to watcher event, p50 / p99 | {} / {} ({:.2}x Renew p50, loaded) |",
        ms(pct(&mut notify, 0.5)),
        ms(pct(&mut notify, 0.99)),
        ratio(pct(&mut notify, 0.5), loaded.0)
    );
    drop(streams);
    let _ = server.kill();
    let _ = server.wait();
}
