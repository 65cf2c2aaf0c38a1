//! `leasehold-bench waiters`: what ten thousand waiting `Acquire`s cost a
//! server, the single node against an etcd frontend, in one run.
//!
//! For each server: one holder takes a job, then `--waiters` clients ask
//! for it with a long wait, over one HTTP/2 connection per 500 of them.
//! The program waits until the server's `leasehold_waiting_acquires` gauge
//! counts them all, and reports the server's RSS growth and CPU time from
//! the first call until then (the frontend's alone in etcd mode: etcd's
//! own cost is etcd's; to the nanosecond, from the threads' schedstat, with
//! user and system time apart in clock ticks, and the context switches),
//! the time they took, and the CPU time of 3 s of
//! waiting after that. Then every waiter is
//! cancelled; once the server counts none, the holder releases, and the
//! next `Acquire{wait: 0}`, through another connection, must be granted.
//! The time from the cancel to that grant is reported too, and, in etcd
//! mode, the requests etcd served (every member's, by method) per waiter
//! on the way into line and from the cancel to that grant.

use std::process::Command;
use std::time::{Duration, Instant};

use leasehold::client::Client;

use crate::faults::Cluster;
use crate::proc::{context_switches, cpu_seconds, cpu_seconds_fine, cpu_split, rss_bytes, Server};
use crate::sys::Res;

#[derive(clap::Args)]
pub struct WaiterArgs {
    #[command(flatten)]
    bench: crate::proc::EtcdBench,
    /// Waiting Acquires.
    #[arg(long, default_value_t = 10_000)]
    waiters: usize,
    /// Rounds, each the single node then an etcd frontend on a new
    /// cluster; the ratios are per round, and their median is printed.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

struct Cost {
    name: &'static str,
    in_line: Duration,
    rss_growth: u64,
    cpu: f64,
    /// The same, user and system apart.
    user: f64,
    system: f64,
    /// Context switches of the server's threads while they got in line.
    switches: u64,
    /// CPU seconds over 3 s of waiting, once all are in line.
    idle_cpu: f64,
    granted_after_cancel: Duration,
    /// etcd requests served (every member's, by method) while the waiters
    /// got in line, and from the cancel to the grant after it; empty for
    /// the single node.
    etcd_in_line: std::collections::BTreeMap<String, u64>,
    etcd_cancel: std::collections::BTreeMap<String, u64>,
}

pub async fn run(a: WaiterArgs) -> Res<()> {
    let dir = a
        .bench
        .work_dir
        .join(format!("waiters-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut costs = Vec::new();
    for round in 0..a.rounds {
        let dir = dir.join(format!("round-{round}"));
        {
            let mut cmd = Command::new(&a.bench.leasehold_bin);
            cmd.args(crate::proc::SERVE)
                .arg("--data-dir")
                .arg(dir.join("single"))
                .env("RUST_LOG", "error");
            let s = Server::spawn(cmd, 3)?;
            costs.push(
                measure(
                    "single node",
                    &s,
                    a.waiters,
                    Duration::from_millis(500),
                    &[],
                )
                .await?,
            );
            s.stop();
        }
        {
            let cluster = Cluster::start(&a.bench.etcd_bin, &dir.join("etcd"))?;
            cluster.leader(Duration::from_secs(30)).await?;
            let mut cmd = Command::new(&a.bench.leasehold_bin);
            cmd.args(crate::proc::SERVE)
                .args([
                    "--store",
                    "etcd",
                    "--etcd-endpoints",
                    &cluster.endpoints_from(0),
                ])
                .env("RUST_LOG", "error");
            let s = Server::spawn(cmd, 3)?;
            let members: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
            costs.push(
                measure(
                    "etcd frontend",
                    &s,
                    a.waiters,
                    Duration::from_secs(2),
                    &members,
                )
                .await?,
            );
            s.stop();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{} waiting Acquires on one server (RSS growth and CPU: the leasehold process's)",
        a.waiters
    );
    println!();
    println!("| round | server | all in line after | RSS growth | per waiter | CPU s to get in line | vs single node | user + system | context switches per waiter | CPU s over 3 s of waiting | RSS vs single node | granted after the cancel |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut ratios = (Vec::new(), Vec::new());
    for (round, pair) in costs.chunks(2).enumerate() {
        let base = (pair[0].cpu, pair[0].rss_growth.max(1));
        for c in pair {
            let (cpu, rss) = (
                c.cpu / base.0.max(1e-9),
                c.rss_growth as f64 / base.1 as f64,
            );
            if !c.etcd_in_line.is_empty() {
                ratios.0.push(cpu);
                ratios.1.push(rss);
            }
            println!(
                "| {} | {} | {:.2} s | {:.1} MiB | {:.1} KiB | {:.3} | {:.2}x | {:.2} + {:.2} | {:.2} | {:.3} | {:.2}x | {:.0} ms |",
                round + 1,
                c.name,
                c.in_line.as_secs_f64(),
                c.rss_growth as f64 / (1 << 20) as f64,
                c.rss_growth as f64 / 1024.0 / a.waiters as f64,
                c.cpu,
                cpu,
                c.user,
                c.system,
                c.switches as f64 / a.waiters as f64,
                c.idle_cpu,
                rss,
                c.granted_after_cancel.as_secs_f64() * 1e3
            );
        }
    }
    println!();
    println!(
        "etcd frontend against the single node, median of {} rounds: CPU to get in line {:.2}x, RSS growth {:.2}x",
        ratios.0.len(),
        median(&mut ratios.0),
        median(&mut ratios.1)
    );
    for c in costs.iter().filter(|c| !c.etcd_in_line.is_empty()) {
        println!();
        println!(
            "etcd requests served ({}, every member, by method): per waiter to get in line {}; from the cancel to the grant {}",
            c.name,
            per_waiter(&c.etcd_in_line, a.waiters),
            per_waiter(&c.etcd_cancel, a.waiters)
        );
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn channel(url: &str) -> Res<tonic::transport::Channel> {
    Ok(tonic::transport::Endpoint::from_shared(url.to_owned())?
        .timeout(Duration::from_secs(120))
        .connect_lazy())
}

/// The `leasehold_waiting_acquires` gauge.
async fn waiting(admin: &str) -> Res<u64> {
    crate::proc::http_get(admin, "/metrics")
        .await?
        .lines()
        .find_map(|l| l.strip_prefix("leasehold_waiting_acquires "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no leasehold_waiting_acquires gauge".into())
}

/// `Txn 0.012, Put 0.000, …`: requests per waiter, busiest first.
fn per_waiter(m: &std::collections::BTreeMap<String, u64>, n: usize) -> String {
    let mut v: Vec<_> = m.iter().filter(|(_, c)| **c > 0).collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter()
        .map(|(k, c)| format!("{k} {:.3}", **c as f64 / n as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// etcd's `grpc_server_started_total`, summed over `members` by method.
async fn etcd_requests(members: &[String]) -> Res<std::collections::BTreeMap<String, u64>> {
    let mut m = std::collections::BTreeMap::new();
    for url in members {
        let addr = url.trim_start_matches("http://");
        for l in crate::proc::http_get(addr, "/metrics").await?.lines() {
            let Some(rest) = l.strip_prefix("grpc_server_started_total{") else {
                continue;
            };
            let method = rest
                .split("grpc_method=\"")
                .nth(1)
                .and_then(|r| r.split('"').next());
            let count = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            if let (Some(method), Some(count)) = (method, count) {
                *m.entry(method.to_owned()).or_insert(0) += count as u64;
            }
        }
    }
    Ok(m)
}

/// What `after` counted beyond `before`, method by method.
fn since(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .collect()
}

async fn measure(
    name: &'static str,
    s: &Server,
    n: usize,
    ttl: Duration,
    etcd_members: &[String],
) -> Res<Cost> {
    let admin = s.admin.clone().ok_or("no admin address")?;
    let holder = Client::from_channel(channel(&s.addr)?);
    let job = "waiters";
    let held = holder
        .acquire(
            job,
            "holder",
            Duration::from_secs(60).max(ttl),
            Duration::ZERO,
        )
        .await?;
    if !held.acquired {
        return Err("the holder did not get the job".into());
    }
    let clients: Vec<Client> = (0..n.div_ceil(500))
        .map(|_| channel(&s.addr).map(Client::from_channel))
        .collect::<Res<_>>()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss0 = rss_bytes(s.pid())?;
    let etcd0 = etcd_requests(etcd_members).await?;
    let cpu0 = cpu_seconds_fine(s.pid())?;
    let split0 = cpu_split(s.pid())?;
    let switches0 = context_switches(s.pid())?;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let c = clients[i % clients.len()].clone();
        tasks.push(tokio::spawn(async move {
            c.acquire(
                "waiters",
                &format!("w{i}"),
                Duration::from_secs(60),
                Duration::from_secs(100),
            )
            .await
        }));
    }
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let w = waiting(&admin).await?;
        if w >= n as u64 {
            break;
        }
        if let Some(t) = tasks.iter_mut().find(|t| t.is_finished()) {
            let r = t.await?;
            return Err(
                format!("{name}: a waiter ended before the others got in line: {r:?}").into(),
            );
        }
        if Instant::now() > until {
            return Err(format!("{name}: {w} of {n} waiters in line after 120 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let in_line = start.elapsed();
    let cpu = cpu_seconds_fine(s.pid())? - cpu0;
    let split1 = cpu_split(s.pid())?;
    let switches = context_switches(s.pid())?.saturating_sub(switches0);
    let etcd1 = etcd_requests(etcd_members).await?;
    let rss_growth = rss_bytes(s.pid())?.saturating_sub(rss0);
    // While they wait: nothing polls, on either backend.
    let idle0 = cpu_seconds(s.pid())?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_cpu = cpu_seconds(s.pid())? - idle0;
    for t in &tasks {
        t.abort();
    }
    drop(clients);
    // Cancelled: the server has seen every waiter go.
    let etcd2 = etcd_requests(etcd_members).await?;
    let cancelled = Instant::now();
    while waiting(&admin).await? > 0 {
        if cancelled.elapsed() > Duration::from_secs(60) {
            return Err(format!("{name}: waiters still in line 60 s after the cancel").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.release(job, "holder", held.lease.token).await?;
    let other = Client::from_channel(channel(&s.addr)?);
    loop {
        let a = other
            .acquire(job, "next", Duration::from_secs(10), Duration::ZERO)
            .await?;
        if a.acquired {
            break;
        }
        if cancelled.elapsed() > Duration::from_secs(60) {
            return Err(format!("{name}: the job was not granted after the cancel").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let granted_after_cancel = cancelled.elapsed();
    let etcd3 = etcd_requests(etcd_members).await?;
    Ok(Cost {
        name,
        etcd_in_line: since(&etcd0, &etcd1),
        etcd_cancel: since(&etcd2, &etcd3),
        in_line,
        rss_growth,
        cpu,
        user: split1.0 - split0.0,
        system: split1.1 - split0.1,
        switches,
        idle_cpu,
        granted_after_cancel,
    })
}
