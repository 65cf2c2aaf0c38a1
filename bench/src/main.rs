//! leasehold-bench: leasehold side by side with what users would pick
//! instead (PostgreSQL, etcd, Redis), in one run on one machine.
//!
//! `bench/compare.sh` installs and starts the peers and runs this program;
//! see BENCHMARKS.md. The program starts its own leasehold servers (so it
//! can read their CPU time and RSS, and restart them) and its own echo
//! server (the floor of a unary gRPC call).
//!
//! Every figure is reported with a ratio against a baseline measured in the
//! same run, seconds apart: these machines are shared and noisy.

mod auth;
mod etcd_mode;
mod failover;
mod faults;
mod fleet;
mod isolation;
mod page_flood;
mod proc;
mod proofs;
mod report;
mod run;
mod scale;
mod shards;
mod soak;
mod sys;
mod waiters;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use sys::{Addrs, Res, Sys, Work};

/// The echo service (the floor of a unary call).
pub mod echo {
    tonic::include_proto!("bench.echo");
}

/// The part of etcd's v3 API the bench uses: the etcd backend's own.
pub use leasehold::etcd::client::pb as etcd;

/// A small, fast, seeded random number generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

#[derive(Parser)]
#[command(
    name = "leasehold-bench",
    about = "leasehold against PostgreSQL, etcd and Redis"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every workload and writes the report and the chart.
    Run(RunArgs),
    /// Serves the echo service on 127.0.0.1 (started by `run` itself).
    EchoServe {
        /// The file `EchoSync` writes and fdatasyncs (created, preallocated).
        #[arg(long)]
        sync_file: std::path::PathBuf,
    },
    /// Loads one running leasehold server with one workload, for profiling
    /// (`perf record -p PID` or `valgrind --tool=callgrind` on the server).
    Load(LoadArgs),
    /// etcd mode while one etcd member is paused or killed: successful
    /// calls per second next to the same load without a fault.
    EtcdFaults(faults::FaultArgs),
    /// etcd mode's Renew, CheckedWrite and KeepAlive through one and two
    /// frontends, next to etcd's own requests doing the same work
    /// (bench/src/etcd_mode.rs).
    EtcdMode(etcd_mode::EtcdModeArgs),
    /// What ten thousand waiting Acquires cost a server: the single node
    /// against an etcd frontend.
    Waiters(waiters::WaiterArgs),
    /// What authentication costs: Renew and CheckedWrite, plain against
    /// TLS + bearer token + policy (bench/src/auth.rs).
    Auth(auth::AuthArgs),
    /// What signing grants' proofs costs: a grant's and a renewal's server
    /// CPU with and without signing (bench/src/proofs.rs).
    Proofs(proofs::ProofArgs),
    /// Whether one misbehaving client can hurt a leader on the same
    /// server: renew latency and lost leases under attack, memory given
    /// back after a cancel, /metrics with a million jobs
    /// (bench/src/isolation.rs).
    Isolation(isolation::IsolationArgs),
    /// The second isolation pass: the status page's JSON flooded, memory
    /// after churn (bench/src/page_flood.rs).
    Isolation2(page_flood::Isolation2Args),
    /// The single node's restart on a data dir of N held leases (written
    /// straight into the store): the time from start to listening, next to
    /// an empty data dir's, and that the leases are still held after it.
    Restart {
        /// The release `leasehold` binary.
        #[arg(long)]
        leasehold_bin: PathBuf,
        /// A scratch directory (the data dirs go here, removed after).
        #[arg(long)]
        work_dir: PathBuf,
        #[arg(long, default_value_t = 1_000_000)]
        jobs: usize,
    },
    /// Held leases on the single node, 1,000 to millions: start-up, RSS,
    /// and the latency of a Renew and of a KeepAlive message against the
    /// smallest count's (bench/src/scale.rs).
    Scale(scale::ScaleArgs),
    /// A running server's RSS after a million Acquires over gRPC
    /// (bench/src/scale.rs).
    LiveRss(scale::LiveArgs),
    /// Writes N held leases into a new data dir, as `scale` does, for
    /// profiling a server started on it.
    Seed {
        /// The data dir to create (replaced if it exists).
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long, default_value_t = 1_000_000)]
        leases: usize,
    },
    /// Failover time: a leader's process killed (SIGKILL), or its Elector
    /// resigning, to the next leader's first acknowledged CheckedWrite
    /// (bench/src/failover.rs).
    Failover(failover::FailoverArgs),
    /// Shard groups: a member SIGKILLed to all its shards owned again, and
    /// a member joining to balanced (bench/src/shards.rs).
    Shards(shards::ShardsArgs),
    /// Whether the data dir follows live data: churn with large values and
    /// DeleteJob against one server, the data dir's size over time
    /// (bench/src/soak.rs).
    Soak(soak::SoakArgs),
    /// One Elector driven over stdin (started by `failover` itself).
    #[command(hide = true)]
    FailoverWorker(failover::WorkerArgs),
}

#[derive(clap::Args)]
struct LoadArgs {
    /// The server, e.g. http://127.0.0.1:50051.
    #[arg(long)]
    leasehold: String,
    /// renew, write, write-stream, read, churn or stream; or echo and
    /// echo-sync, with --leasehold naming a `leasehold-bench echo-serve`.
    #[arg(long, default_value = "renew")]
    work: String,
    #[arg(long, default_value_t = 16)]
    clients: usize,
    #[arg(long, default_value_t = 10.0)]
    secs: f64,
}

#[derive(clap::Args)]
struct RunArgs {
    /// About two minutes instead of about fifteen: shorter cells, a smaller
    /// fleet, 100,000 instead of 1,000,000 leases.
    #[arg(long)]
    quick: bool,
    /// The release `leasehold` binary.
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory (leasehold's data dirs go here).
    #[arg(long)]
    work_dir: PathBuf,
    /// Where results.md and chart.png are written.
    #[arg(long)]
    out_dir: PathBuf,
    /// PostgreSQL connection string.
    #[arg(long)]
    postgres: Option<String>,
    /// etcd client URL, e.g. http://127.0.0.1:2379.
    #[arg(long)]
    etcd: Option<String>,
    /// Redis with appendonly yes and appendfsync always.
    #[arg(long)]
    redis_aof: Option<String>,
    /// Redis with its defaults (not durable).
    #[arg(long)]
    redis: Option<String>,
    /// The command line to print in the report.
    #[arg(long, default_value = "bench/compare.sh")]
    command_line: String,
}

/// Durations and sizes of a run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub cell: Duration,
    pub rounds: usize,
    pub fleet: fleet::Shape,
    pub million: usize,
    pub clients: [usize; 3],
}

fn main() -> Res<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match cli.command {
        Command::EchoServe { sync_file } => rt.block_on(echo_serve(sync_file)),
        Command::Run(a) => rt.block_on(run_all(a)),
        Command::Load(a) => rt.block_on(load(a)),
        Command::EtcdFaults(a) => rt.block_on(faults::run(a)),
        Command::EtcdMode(a) => rt.block_on(etcd_mode::run(a)),
        Command::Waiters(a) => rt.block_on(waiters::run(a)),
        Command::Auth(a) => rt.block_on(auth::run(a)),
        Command::Proofs(a) => rt.block_on(proofs::run(a)),
        Command::Isolation(a) => rt.block_on(isolation::run(a)),
        Command::Isolation2(a) => rt.block_on(page_flood::run(a)),
        Command::Restart {
            leasehold_bin,
            work_dir,
            jobs,
        } => rt.block_on(async {
            let m = fleet::million(&leasehold_bin, &work_dir, jobs).await?;
            println!(
                "restart with {} held leases: {:.2} s from start to listening (empty data dir {:.3} s); \
                 RSS {} MiB (empty {} MiB); {} of 1000 random leases renewed with their token after it",
                m.leases,
                m.startup.as_secs_f64(),
                m.startup_empty.as_secs_f64(),
                m.rss >> 20,
                m.rss_empty >> 20,
                m.renewed
            );
            Ok(())
        }),
        Command::Scale(a) => rt.block_on(scale::run(a)),
        Command::LiveRss(a) => rt.block_on(scale::live(a)),
        Command::Seed { data_dir, leases } => scale::seed(&data_dir, leases),
        Command::Failover(a) => rt.block_on(failover::run(a)),
        Command::Shards(a) => rt.block_on(shards::run(a)),
        Command::FailoverWorker(a) => rt.block_on(failover::worker(a)),
        Command::Soak(a) => rt.block_on(soak::run(a)),
    }
}

struct EchoService {
    /// The file of `EchoSync`, and the next offset in its cycle.
    sync: std::sync::Mutex<(std::fs::File, u64)>,
}

#[tonic::async_trait]
impl echo::echo_server::Echo for EchoService {
    async fn echo(
        &self,
        req: tonic::Request<echo::EchoMessage>,
    ) -> Result<tonic::Response<echo::EchoMessage>, tonic::Status> {
        Ok(tonic::Response::new(req.into_inner()))
    }

    /// The echo after one pwrite and one fdatasync of the payload, on the
    /// handler's own thread: the least a durable unary call can cost.
    async fn echo_sync(
        &self,
        req: tonic::Request<echo::EchoMessage>,
    ) -> Result<tonic::Response<echo::EchoMessage>, tonic::Status> {
        use std::os::unix::fs::FileExt;
        let m = req.into_inner();
        {
            let mut g = self.sync.lock().expect("sync file lock");
            let (f, off) = &mut *g;
            if *off + m.payload.len() as u64 > sys::FLOOR_FILE_BYTES {
                *off = 0;
            }
            f.write_all_at(&m.payload, *off)
                .and_then(|()| f.sync_data())
                .map_err(|e| tonic::Status::internal(e.to_string()))?;
            *off += m.payload.len() as u64;
        }
        Ok(tonic::Response::new(m))
    }
}

/// The echo server: the same tonic, the same TCP_NODELAY as leasehold, no
/// work. Prints "echo listening on ADDR" and serves until stdin closes.
async fn echo_serve(sync_file: std::path::PathBuf) -> Res<()> {
    use std::io::Write;
    use tokio_stream::StreamExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("echo listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
        if let Ok(s) = &s {
            let _ = s.set_nodelay(true);
        }
        s
    });
    tonic::transport::Server::builder()
        .add_service(echo::echo_server::EchoServer::new(EchoService {
            sync: std::sync::Mutex::new((sys::preallocated(&sync_file)?, 0)),
        }))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

async fn load(a: LoadArgs) -> Res<()> {
    let work = match a.work.as_str() {
        "renew" => Work::Renew,
        "write" => Work::Write,
        "read" => Work::Read,
        "churn" => Work::Churn,
        "stream" => Work::Stream,
        "write-stream" => Work::WriteStream,
        "echo" => Work::Echo,
        "echo-sync" => Work::EchoSync,
        w => return Err(format!("unknown workload {w}").into()),
    };
    // The echo workloads load a `leasehold-bench echo-serve` at that URL.
    let echo = matches!(work, Work::Echo | Work::EchoSync);
    let addrs = Addrs {
        echo: if echo {
            a.leasehold.clone()
        } else {
            String::new()
        },
        leasehold: a.leasehold,
        postgres: None,
        etcd: None,
        redis_aof: None,
        redis: None,
        fsync_file: PathBuf::new(),
        etcd_first_lease: None,
    };
    let setup = Arc::new(if echo {
        sys::Setup::default()
    } else {
        sys::setup(&addrs).await?
    });
    let s = run::cell(
        if echo { Sys::Echo } else { Sys::Leasehold },
        work,
        a.clients,
        Duration::from_secs_f64(a.secs),
        &addrs,
        &setup,
    )
    .await?;
    println!(
        "{work:?} x{}: {:.0}/s p50 {:.0} us p99 {:.0} us, {} errors; CPU per item: server {:.1} us, load generator {:.1} us",
        a.clients, s.per_sec, s.p50, s.p99, s.errors, s.server_cpu_us, s.client_cpu_us
    );
    Ok(())
}

async fn run_all(a: RunArgs) -> Res<()> {
    let plan = if a.quick {
        Plan {
            cell: Duration::from_millis(400),
            rounds: 3,
            fleet: fleet::Shape {
                leases: 10_000,
                holders: 100,
                ttl: Duration::from_secs(6),
                window: Duration::from_secs(4),
            },
            million: 100_000,
            clients: [1, 16, 64],
        }
    } else {
        Plan {
            cell: Duration::from_secs(3),
            rounds: 3,
            fleet: fleet::Shape {
                leases: 100_000,
                holders: 1_000,
                ttl: Duration::from_secs(30),
                window: Duration::from_secs(20),
            },
            million: 1_000_000,
            clients: [1, 16, 64],
        }
    };
    std::fs::create_dir_all(&a.work_dir)?;
    std::fs::create_dir_all(&a.out_dir)?;
    let started = std::time::Instant::now();

    let lh_data = a.work_dir.join("leasehold-data");
    let _ = std::fs::remove_dir_all(&lh_data);
    let server = proc::Server::leasehold(&a.leasehold_bin, &lh_data)?;
    let echo = proc::Server::echo(&lh_data.join("floor-echo-sync"))?;
    let addrs = Addrs {
        leasehold: server.addr.clone(),
        postgres: a.postgres.clone(),
        etcd: a.etcd.clone(),
        redis_aof: a.redis_aof.clone(),
        redis: a.redis.clone(),
        echo: echo.addr.clone(),
        fsync_file: lh_data.join("floor-probe"),
        etcd_first_lease: None,
    };
    eprintln!("setting up 1,000 jobs on every system...");
    let setup = Arc::new(sys::setup(&addrs).await?);
    let addrs = Addrs {
        etcd_first_lease: setup.etcd_leases.first().copied(),
        ..addrs
    };

    let peers = |work: Work| -> Vec<(Sys, Work)> {
        let mut v = vec![(Sys::Leasehold, work)];
        if a.postgres.is_some() {
            v.push((Sys::Postgres, work));
        }
        if a.etcd.is_some() {
            v.push((Sys::Etcd, work));
        }
        if a.redis_aof.is_some() {
            v.push((Sys::RedisAof, work));
        }
        if a.redis.is_some() {
            v.push((Sys::Redis, work));
        }
        v
    };
    let mut stream_systems = vec![(Sys::Leasehold, Work::Stream)];
    if a.etcd.is_some() {
        stream_systems.push((Sys::Etcd, Work::Stream));
    }
    if a.redis_aof.is_some() {
        stream_systems.push((Sys::RedisAof, Work::Stream));
        stream_systems.push((Sys::RedisAof, Work::Renew));
    }
    stream_systems.push((Sys::Leasehold, Work::Renew));

    let mut groups: Vec<report::Group> = Vec::new();
    let specs: Vec<(&str, Vec<(Sys, Work)>)> = vec![
        ("Renew", peers(Work::Renew)),
        ("Fenced write", {
            let mut v = peers(Work::Write);
            v.insert(1, (Sys::Leasehold, Work::WriteStream));
            v
        }),
        ("Streamed renew", stream_systems),
        (
            "leasehold Read and Acquire+Release",
            vec![(Sys::Leasehold, Work::Read), (Sys::Leasehold, Work::Churn)],
        ),
    ];
    for (name, systems) in &specs {
        for &clients in &plan.clients {
            let mut systems = systems.clone();
            if *name == "Fenced write" {
                // The ceiling of any unary call at this concurrency: the
                // same tonic, no work at all.
                systems.push((Sys::Echo, Work::Echo));
                if clients == 1 {
                    systems.push((Sys::Disk, Work::Fsync));
                    systems.push((Sys::Echo, Work::EchoSync));
                }
            }
            let probe = run::fsync_probe(&lh_data);
            eprintln!(
                "{name} x{clients} (fsync probe {:.0} us, {:.0}s elapsed)",
                probe,
                started.elapsed().as_secs_f64()
            );
            let rows =
                run::group(&systems, clients, plan.rounds, plan.cell, &addrs, &setup).await?;
            for r in &rows {
                eprintln!(
                    "  {:<28} {:?}: {:>10.0}/s p50 {:>7.0}us p99 {:>7.0}us, CPU per item: server {:.1}us, load generator {:.1}us",
                    r.sys.label(),
                    r.work,
                    r.median.per_sec,
                    r.median.p50,
                    r.median.p99,
                    r.median.server_cpu_us,
                    r.median.client_cpu_us
                );
            }
            groups.push(report::Group {
                name: name.to_string(),
                clients,
                fsync_probe_us: probe,
                rows,
            });
        }
    }
    let lh_rss_after_groups = proc::rss_bytes(server.pid())?;
    server.stop();
    drop(echo);

    // The fleet, on a fresh server, interleaved U S R then (quick: once).
    eprintln!(
        "fleet: {} leases, {} holders, ttl {:?}, renew every ttl/3 ({:.0}s elapsed)",
        plan.fleet.leases,
        plan.fleet.holders,
        plan.fleet.ttl,
        started.elapsed().as_secs_f64()
    );
    let fleet_data = a.work_dir.join("fleet-data");
    let _ = std::fs::remove_dir_all(&fleet_data);
    let fs = proc::Server::leasehold(&a.leasehold_bin, &fleet_data)?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_idle = proc::rss_bytes(fs.pid())?;
    let t = std::time::Instant::now();
    let held = fleet::setup_leasehold(&fs.addr, plan.fleet).await?;
    let fleet_acquire_secs = t.elapsed().as_secs_f64();
    let mut fleet_results = Vec::new();
    for how in [fleet::How::Stream, fleet::How::Unary] {
        let r = fleet::run_leasehold(&fs, &held, plan.fleet, how, rss_idle).await?;
        eprintln!(
            "  {}: {} renewals in {:.1}s, {:.3} CPU s per 1,000, RSS {} MiB",
            how.label(),
            r.renewals,
            r.secs,
            r.cpu_per_1000(),
            r.rss >> 20
        );
        fleet_results.push(r);
    }
    fs.stop();
    if let Some(url) = &a.redis_aof {
        let r = fleet::run_redis(url, plan.fleet).await?;
        eprintln!(
            "  {}: {} renewals in {:.1}s, {:.3} CPU s per 1,000, RSS {} MiB",
            r.how.label(),
            r.renewals,
            r.secs,
            r.cpu_per_1000(),
            r.rss >> 20
        );
        fleet_results.push(r);
    }

    eprintln!(
        "{} leases: write, restart, measure ({:.0}s elapsed)",
        plan.million,
        started.elapsed().as_secs_f64()
    );
    let million = fleet::million(&a.leasehold_bin, &a.work_dir, plan.million).await?;
    eprintln!(
        "  start-up {:?} (empty {:?}), RSS {} MiB (empty {} MiB), {} of 1000 renewed",
        million.startup,
        million.startup_empty,
        million.rss >> 20,
        million.rss_empty >> 20,
        million.renewed
    );

    let rep = report::Report {
        quick: a.quick,
        plan,
        command_line: a.command_line.clone(),
        elapsed: started.elapsed(),
        groups,
        fleet: fleet_results,
        fleet_acquire_secs,
        fleet_leases: plan.fleet.leases,
        million,
        lh_rss_after_groups,
    };
    let md = rep.markdown();
    std::fs::write(a.out_dir.join("results.md"), &md)?;
    println!("{md}");
    match report::chart(&rep, &a.out_dir.join("chart.png")) {
        Ok(()) => eprintln!("chart: {}", a.out_dir.join("chart.png").display()),
        Err(e) => eprintln!("no chart: {e}"),
    }
    Ok(())
}
