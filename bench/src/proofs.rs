//! What signing grants costs: the same workloads against a single node
//! that signs (its data dir's key) and one started with `--no-signing`, in
//! the same run. Two workloads:
//!
//! - **grant**: each client acquires its job and releases it, again and
//!   again: every Acquire is a new grant with a new token, so every proof
//!   is signed (a cache miss);
//! - **renew**: unary Renew of a held lease: the proof is the cached one.
//!
//! Reports calls per second and the server's CPU time per call (user +
//! system, from /proc), with the signing server's as a ratio of the
//! other's; and, in this process, what one Ed25519 signature of a proof
//! costs, against a cache lookup.
//!
//! `leasehold-bench proofs --leasehold-bin target/release/leasehold --work-dir /tmp/lh-proofs`

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use leasehold::client::Client;
use leasehold::proto::proof::{Claims, Signer};

use crate::proc::{self, Server};
use crate::sys::Res;

/// `leasehold-bench proofs`'s flags.
#[derive(clap::Args)]
pub struct ProofArgs {
    /// The `leasehold` binary (a release build for meaningful numbers).
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory for the data dirs.
    #[arg(long)]
    work_dir: PathBuf,
    /// Seconds per cell.
    #[arg(long, default_value_t = 4.0)]
    secs: f64,
    /// Rounds of both servers, one after the other (the spread between
    /// rounds is the noise).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Concurrent clients (one connection each).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Calls per second in all, spread over the clients (0: as fast as they
    /// go). A fixed rate gives both servers the same load, so that the
    /// server's CPU per call is compared at the same batching: a client
    /// slowed by the larger answers would otherwise hand the server fewer
    /// calls per wake-up, each then paying more.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
}

struct Cell {
    calls: u64,
    secs: f64,
    cpu: f64,
}

async fn cell(a: &ProofArgs, s: &Server, work: &'static str) -> Res<Cell> {
    let mut clients = Vec::new();
    for i in 0..a.clients {
        let c = Client::connect(&s.addr).await?;
        let job = format!("proof-bench/{work}/{i}");
        let token = match work {
            "renew" => {
                let got = c
                    .acquire(&job, "bench", Duration::from_secs(3600), Duration::ZERO)
                    .await?;
                got.lease.token
            }
            _ => 0,
        };
        clients.push((c, job, token));
    }
    let until = Instant::now() + Duration::from_secs_f64(a.secs);
    let cpu0 = proc::cpu_seconds(s.pid())?;
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let (rate, clients_n) = (a.rate, a.clients);
    for (c, job, token) in clients {
        tasks.spawn(async move {
            let mut n = 0u64;
            let mut pace = (rate > 0.0).then(|| {
                let mut i = tokio::time::interval(Duration::from_secs_f64(clients_n as f64 / rate));
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                i
            });
            while Instant::now() < until {
                if let Some(p) = pace.as_mut() {
                    p.tick().await;
                }
                if work == "renew" {
                    c.renew(&job, "bench", token, Duration::from_secs(3600))
                        .await?;
                } else {
                    let got = c
                        .acquire(&job, "bench", Duration::from_secs(60), Duration::ZERO)
                        .await?;
                    if got.lease.token == 0 {
                        return Err("not granted".into());
                    }
                    c.release(&job, "bench", got.lease.token).await?;
                }
                n += 1;
            }
            Ok::<u64, Box<dyn std::error::Error + Send + Sync>>(n)
        });
    }
    let mut calls = 0;
    while let Some(r) = tasks.join_next().await {
        calls += r??;
    }
    Ok(Cell {
        calls,
        secs: t0.elapsed().as_secs_f64(),
        cpu: proc::cpu_seconds(s.pid())? - cpu0,
    })
}

/// One proof's signature, and a cache's lookup, timed in this process.
fn in_process() -> Res<(f64, f64)> {
    let signer = Signer::from_pem(&Signer::generate_pem()?)?;
    let claims = |token| Claims {
        job: "proof-bench/grant/0".into(),
        token,
        principal: String::new(),
        holder: "bench@0b3f5a4e-7d2c-4c1e-9a57-2f9e7d1c6b80".into(),
        issued_at: 1_764_892_800,
        ttl_ms: 60_000,
        kid: String::new(),
    };
    let n = 20_000u64;
    let t = Instant::now();
    let mut len = 0;
    for i in 1..=n {
        len += signer.sign(&claims(i)).len();
    }
    let sign = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let mut cache = std::collections::HashMap::new();
    for i in 0..1000u64 {
        cache.insert(
            format!("proof-bench/{i}"),
            std::sync::Arc::<str>::from(signer.sign(&claims(i + 1))),
        );
    }
    let t = Instant::now();
    for i in 0..n {
        len += cache
            .get(format!("proof-bench/{}", i % 1000).as_str())
            .map_or(0, |p| p.len());
    }
    let hit = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    std::hint::black_box(len);
    Ok((sign, hit))
}

pub async fn run(a: ProofArgs) -> Res<()> {
    let (sign, hit) = in_process()?;
    println!("in process: one proof signed in {sign:.1} µs; a cached one found in {hit:.2} µs\n");
    println!(
        "| round | work | server | calls/s | server CPU per call | signing vs not |\n|---|---|---|---|---|---|"
    );
    for round in 1..=a.rounds {
        let mut plain = [0.0f64; 2];
        for signing in [false, true] {
            let data = a.work_dir.join(format!("data-{round}-{signing}"));
            let _ = std::fs::remove_dir_all(&data);
            let mut cmd = Command::new(&a.leasehold_bin);
            cmd.args(proc::SERVE)
                .args(proc::NO_ACQUIRE_PACING)
                .arg("--data-dir")
                .arg(&data)
                .env("RUST_LOG", "warn");
            if !signing {
                cmd.arg("--no-signing");
            }
            let s = Server::spawn_command(cmd)?;
            for (k, work) in ["grant", "renew"].into_iter().enumerate() {
                let c = cell(&a, &s, work).await?;
                let per = c.cpu * 1e6 / c.calls.max(1) as f64;
                if !signing {
                    plain[k] = per;
                }
                println!(
                    "| {round} | {work} | {} | {:.0} | {per:.1} µs | {:.2}x |",
                    if signing { "signing" } else { "--no-signing" },
                    c.calls as f64 / c.secs,
                    per / plain[k].max(1e-9)
                );
            }
            s.stop();
            let _ = std::fs::remove_dir_all(&data);
        }
    }
    println!(
        "\n{} clients, one connection each, {:.0} s per cell. A grant call is an Acquire and its \
         Release (one signature); a renew call returns the cached proof. The server's CPU is user \
         + system time from /proc over the cell.",
        a.clients, a.secs
    );
    Ok(())
}
