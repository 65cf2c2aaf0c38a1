//! The fleet workload (many leases, many holders, each renewing at ttl/3:
//! server CPU per 1,000 renewals and RSS) and the million-lease restart.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::proto as lh;
use leasehold::proto::leases_client::LeasesClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::proc::{cpu_seconds, rss_bytes, Server};
use crate::sys::{channel, Res, REDIS_ACQUIRE_OR_RENEW};

/// The shape of a fleet.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub leases: usize,
    pub holders: usize,
    pub ttl: Duration,
    /// How long CPU is measured, after one warm-up period.
    pub window: Duration,
}

/// How the fleet renews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// leasehold, one unary Renew per lease.
    Unary,
    /// leasehold, one KeepAlive message per holder per period.
    Stream,
    /// Redis, one acquire-or-renew script per lease.
    Redis,
}

impl How {
    pub fn label(self) -> &'static str {
        match self {
            How::Unary => "leasehold unary Renew",
            How::Stream => "leasehold KeepAlive stream",
            How::Redis => "Redis AOF always, Lua renew",
        }
    }
}

#[derive(Debug, Clone)]
pub struct FleetResult {
    pub how: How,
    pub renewals: u64,
    pub secs: f64,
    pub cpu_secs: f64,
    pub rss: u64,
    /// RSS of the same server before the fleet was set up.
    pub rss_idle: u64,
}

impl FleetResult {
    pub fn cpu_per_1000(&self) -> f64 {
        self.cpu_secs / (self.renewals as f64 / 1000.0)
    }
}

const CONNS: usize = 32;

fn fleet_job(h: usize, i: usize) -> String {
    format!("fleet-{h:04}-{i:04}")
}
fn fleet_holder(h: usize) -> String {
    format!("fleet-{h:04}@bench")
}

fn dur(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// Acquires the fleet's leases on leasehold, 64 at a time; returns each
/// holder's (job, token) list.
pub async fn setup_leasehold(addr: &str, shape: Shape) -> Res<Vec<Vec<(String, u64)>>> {
    let per = shape.leases / shape.holders;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(LeasesClient::new(channel(addr).await?));
    }
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..64 {
        let mut c = clients[t % clients.len()].clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                if n >= per * shape.holders {
                    return Ok::<_, crate::sys::BoxError>(got);
                }
                let (h, i) = (n / per, n % per);
                let r = c
                    .acquire(lh::AcquireRequest {
                        job: fleet_job(h, i),
                        holder: fleet_holder(h),
                        ttl: Some(dur(shape.ttl)),
                        wait: None,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                if !r.acquired {
                    return Err(format!("{} not acquired", fleet_job(h, i)).into());
                }
                got.push((h, i, r.lease.unwrap_or_default().token));
            }
        }));
    }
    let mut held = vec![vec![(String::new(), 0); per]; shape.holders];
    for t in tasks {
        for (h, i, token) in t.await?? {
            held[h][i] = (fleet_job(h, i), token);
        }
    }
    Ok(held)
}

/// Runs the fleet against leasehold (unary or stream) at `server`.
pub async fn run_leasehold(
    server: &Server,
    held: &[Vec<(String, u64)>],
    shape: Shape,
    how: How,
    rss_idle: u64,
) -> Res<FleetResult> {
    let mut chans = Vec::new();
    for _ in 0..CONNS {
        chans.push(channel(&server.addr).await?);
    }
    let period = shape.ttl / 3;
    let count = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for (h, leases) in held.iter().enumerate() {
        let mut client = LeasesClient::new(chans[h % CONNS].clone());
        let leases = leases.clone();
        let holder = fleet_holder(h);
        let (count, measuring, stop) = (count.clone(), measuring.clone(), stop.clone());
        let offset = period.mul_f64(h as f64 / held.len() as f64);
        tasks.push(tokio::spawn(async move {
            let mut stream = None;
            if how == How::Stream {
                let (tx, rx) = mpsc::channel::<lh::KeepAliveRequest>(2);
                let resp = client.keep_alive(ReceiverStream::new(rx)).await?;
                stream = Some((tx, resp.into_inner()));
            }
            let mut next = start + offset;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep_until(next).await;
                next += period;
                let mut done = 0u64;
                match &mut stream {
                    None => {
                        for (job, token) in &leases {
                            client
                                .renew(lh::RenewRequest {
                                    job: job.clone(),
                                    holder: holder.clone(),
                                    token: *token,
                                    ttl: Some(dur(shape.ttl)),
                                    value: None,
                                })
                                .await?;
                            done += 1;
                        }
                    }
                    Some((tx, rx)) => {
                        let renewals = leases
                            .iter()
                            .map(|(job, token)| lh::KeepAliveRenewal {
                                job: job.clone(),
                                holder: holder.clone(),
                                token: *token,
                                ttl: Some(dur(shape.ttl)),
                            })
                            .collect();
                        tx.send(lh::KeepAliveRequest {
                            id: 0,
                            renewals,
                            bind_to_stream: false,
                        })
                        .await?;
                        let r = rx.message().await?.ok_or("stream ended")?;
                        done = r
                            .results
                            .iter()
                            .filter(|r| r.outcome() == lh::keep_alive_result::Outcome::Renewed)
                            .count() as u64;
                        if done != leases.len() as u64 {
                            return Err("fleet renewal refused".into());
                        }
                    }
                }
                if measuring.load(Ordering::Relaxed) {
                    count.fetch_add(done, Ordering::Relaxed);
                }
            }
            Ok::<_, crate::sys::BoxError>(())
        }));
    }
    measure(
        server.pid(),
        how,
        period,
        shape.window,
        count,
        measuring,
        stop,
        tasks,
        rss_idle,
    )
    .await
}

/// Runs the fleet against Redis at `url` (its pid from INFO).
pub async fn run_redis(url: &str, shape: Shape) -> Res<FleetResult> {
    let client = redis::Client::open(url)?;
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        conns.push(client.get_multiplexed_async_connection().await?);
    }
    let mut c = conns[0].clone();
    let info: String = redis::cmd("INFO").arg("server").query_async(&mut c).await?;
    let pid: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .ok_or("no process_id in INFO")?
        .trim()
        .parse()?;
    redis::cmd("FLUSHALL").query_async::<()>(&mut c).await?;
    let rss_idle = rss_bytes(pid)?;
    let per = shape.leases / shape.holders;
    let script = redis::Script::new(REDIS_ACQUIRE_OR_RENEW);
    let ttl_ms = shape.ttl.as_millis() as u64;
    for h in 0..shape.holders {
        let mut pipe = redis::pipe();
        for i in 0..per {
            pipe.invoke_script(
                script
                    .key(format!("lease:{}", fleet_job(h, i)))
                    .key(format!("epoch:{}", fleet_job(h, i)))
                    .arg(fleet_holder(h))
                    .arg(ttl_ms),
            );
        }
        let _: Vec<i64> = pipe.query_async(&mut c).await?;
    }
    let period = shape.ttl / 3;
    let count = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for h in 0..shape.holders {
        let mut c = conns[h % CONNS].clone();
        let script = script.clone();
        let (count, measuring, stop) = (count.clone(), measuring.clone(), stop.clone());
        let offset = period.mul_f64(h as f64 / shape.holders as f64);
        tasks.push(tokio::spawn(async move {
            let mut next = start + offset;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep_until(next).await;
                next += period;
                for i in 0..per {
                    let e: i64 = script
                        .key(format!("lease:{}", fleet_job(h, i)))
                        .key(format!("epoch:{}", fleet_job(h, i)))
                        .arg(fleet_holder(h))
                        .arg(ttl_ms)
                        .invoke_async(&mut c)
                        .await?;
                    if e < 0 {
                        return Err("redis fleet renewal refused".into());
                    }
                }
                if measuring.load(Ordering::Relaxed) {
                    count.fetch_add(per as u64, Ordering::Relaxed);
                }
            }
            Ok::<_, crate::sys::BoxError>(())
        }));
    }
    let r = measure(
        pid,
        How::Redis,
        period,
        shape.window,
        count,
        measuring,
        stop,
        tasks,
        rss_idle,
    )
    .await;
    redis::cmd("FLUSHALL").query_async::<()>(&mut c).await?;
    r
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    pid: u32,
    how: How,
    period: Duration,
    window: Duration,
    count: Arc<AtomicU64>,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Res<()>>>,
    rss_idle: u64,
) -> Res<FleetResult> {
    // One full period first: every holder has renewed once.
    tokio::time::sleep(period).await;
    let cpu0 = cpu_seconds(pid)?;
    let t0 = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(window).await;
    measuring.store(false, Ordering::Relaxed);
    let cpu1 = cpu_seconds(pid)?;
    let secs = t0.elapsed().as_secs_f64();
    let rss = rss_bytes(pid)?;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
        if let Ok(Err(e)) = t.await {
            return Err(e);
        }
    }
    Ok(FleetResult {
        how,
        renewals: count.load(Ordering::Relaxed),
        secs,
        cpu_secs: cpu1 - cpu0,
        rss,
        rss_idle,
    })
}

/// The million-lease restart: `n` held leases written straight into a
/// store, then the server started on it.
#[derive(Debug, Clone)]
pub struct MillionResult {
    pub leases: usize,
    pub startup: Duration,
    pub rss: u64,
    pub startup_empty: Duration,
    pub rss_empty: u64,
    /// Of 1,000 random leases renewed after the restart, how many were
    /// still held (all of them, when restore works).
    pub renewed: usize,
}

pub async fn million(
    bin: &std::path::Path,
    work: &std::path::Path,
    n: usize,
) -> Res<MillionResult> {
    use crate::scale::{job_name, seed, HOLDER, TTL};
    let dir = work.join("million-data");
    let empty = work.join("empty-data");
    let _ = std::fs::remove_dir_all(&empty);
    let (holder, ttl) = (HOLDER, TTL);
    seed(&dir, n)?;
    // Baseline: the same binary on an empty data dir.
    let s = Server::leasehold(bin, &empty)?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (startup_empty, rss_empty) = (s.startup, rss_bytes(s.pid())?);
    s.stop();

    // A restart: the first start on a data dir written outside a server
    // also does sled's first recovery of it (see `scale`).
    Server::leasehold(bin, &dir)?.stop();
    let s = Server::leasehold(bin, &dir)?;
    let startup = s.startup;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss = rss_bytes(s.pid())?;
    // Prove they are held: renew 1,000 random ones with their token.
    let client = leasehold::client::Client::connect(&s.addr).await?;
    let mut ka = client.keep_alive().await?;
    let mut rng = crate::Rng::new(42);
    let batch: Vec<_> = (0..1000)
        .map(|_| leasehold::client::KeepAliveRenewal::new(&job_name(rng.below(n)), holder, 1, ttl))
        .collect();
    let renewed = crate::sys::keep_alive_renewed(&mut ka, &batch).await?;
    drop(ka);
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
    Ok(MillionResult {
        leases: n,
        startup,
        rss,
        startup_empty,
        rss_empty,
        renewed,
    })
}
