//! Cells, rounds and medians.
//!
//! A cell is one system under one workload at one concurrency, run for a
//! fixed time by N clients in closed loops. A group is the set of systems
//! compared on one workload at one concurrency: its cells run in rounds,
//! interleaved (A B C D, then D C B A, then A B C D...), so that every
//! system sees the same machine weather, and each figure is the median over
//! the rounds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sys::{Addrs, Conn, Res, Shared, Sys, Work};
use crate::Rng;

/// What one cell measured.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Items done per second (leases renewed, writes, ...).
    pub per_sec: f64,
    /// Latency of one operation (one round trip), microseconds.
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    /// Operations refused or failed.
    pub errors: u64,
    /// CPU microseconds per item of everything on the machine but the load
    /// generator (the system under test, all its processes): the machine's
    /// busy time minus the load generator's own, over the items done.
    pub server_cpu_us: f64,
    /// The load generator's own CPU microseconds per item (what the client
    /// library costs).
    pub client_cpu_us: f64,
}

/// The medians over the rounds of one system in one group.
#[derive(Debug, Clone)]
pub struct Row {
    pub sys: Sys,
    pub work: Work,
    pub clients: usize,
    pub median: Sample,
    pub rounds: Vec<Sample>,
}

fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i] as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Runs one cell: `clients` connections, a short warm-up, then `secs` of
/// closed-loop load.
pub async fn cell(
    sys: Sys,
    work: Work,
    clients: usize,
    dur: Duration,
    addrs: &Addrs,
    setup: &Shared,
) -> Res<Sample> {
    let mut conns = Vec::with_capacity(clients);
    for i in 0..clients {
        conns.push(Conn::open(sys, work, i, addrs).await?);
    }
    let warm = (dur / 5).min(Duration::from_millis(500));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (i, mut conn) in conns.into_iter().enumerate() {
        let (measuring, stop, setup) = (measuring.clone(), stop.clone(), setup.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15 ^ ((i as u64 + 1) * 7919));
            let mut lat = Vec::with_capacity(1 << 16);
            let (mut items, mut errors) = (0u64, 0u64);
            let mut first_error = None;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = conn.op(work, &mut rng, &setup).await;
                let us = t.elapsed().as_micros().min(u32::MAX as u128) as u32;
                if measuring.load(Ordering::Relaxed) {
                    match r {
                        Ok(n) => {
                            items += n;
                            lat.push(us);
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                } else if let Err(e) = r {
                    first_error.get_or_insert_with(|| e.to_string());
                    errors += 1;
                }
                if errors > 1000 {
                    break; // a broken system: stop hammering it
                }
            }
            (items, errors, lat, first_error)
        }));
    }
    tokio::time::sleep(warm).await;
    measuring.store(true, Ordering::Relaxed);
    let cpu0 = crate::proc::CpuMark::now();
    let t0 = Instant::now();
    tokio::time::sleep(dur).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let cpu = cpu0
        .zip(crate::proc::CpuMark::now())
        .map(|(a, b)| a.since(b));
    stop.store(true, Ordering::Relaxed);
    let (mut items, mut errors, mut lat) = (0, 0, Vec::new());
    let mut first_error = None;
    for t in tasks {
        let (i, e, l, fe) = t.await?;
        items += i;
        errors += e;
        lat.extend(l);
        if first_error.is_none() {
            first_error = fe;
        }
    }
    if let Some(e) = first_error {
        eprintln!(
            "  ! {} {work:?} x{clients}: {errors} errors, first: {e}",
            sys.label()
        );
    }
    lat.sort_unstable();
    let per_item = |s: f64| match items {
        0 => f64::NAN,
        n => s * 1e6 / n as f64,
    };
    let (server_cpu_us, client_cpu_us) = match cpu {
        Some((server, client)) => (per_item(server), per_item(client)),
        None => (f64::NAN, f64::NAN),
    };
    Ok(Sample {
        per_sec: items as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
        p999: percentile(&lat, 0.999),
        errors,
        server_cpu_us,
        client_cpu_us,
    })
}

/// One group: `systems` (each with its workload) at `clients`, `rounds`
/// interleaved rounds. Returns a row per system, with medians.
pub async fn group(
    systems: &[(Sys, Work)],
    clients: usize,
    rounds: usize,
    dur: Duration,
    addrs: &Addrs,
    setup: &Shared,
) -> Res<Vec<Row>> {
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); systems.len()];
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..systems.len()).collect()
        } else {
            (0..systems.len()).rev().collect()
        };
        for i in order {
            let (sys, work) = systems[i];
            let s = cell(sys, work, clients, dur, addrs, setup).await?;
            samples[i].push(s);
        }
    }
    Ok(systems
        .iter()
        .zip(samples)
        .map(|(&(sys, work), rounds)| {
            let m = |f: fn(&Sample) -> f64| median(rounds.iter().map(f).collect());
            Row {
                sys,
                work,
                clients,
                median: Sample {
                    per_sec: m(|s| s.per_sec),
                    p50: m(|s| s.p50),
                    p99: m(|s| s.p99),
                    p999: m(|s| s.p999),
                    errors: rounds.iter().map(|s| s.errors).sum(),
                    server_cpu_us: m(|s| s.server_cpu_us),
                    client_cpu_us: m(|s| s.client_cpu_us),
                },
                rounds,
            }
        })
        .collect())
}

/// The median fdatasync time of a small in-place write in `dir`,
/// microseconds: the disk weather before a group.
pub fn fsync_probe(dir: &std::path::Path) -> f64 {
    use std::os::unix::fs::FileExt;
    let path = dir.join("fsync-probe");
    let Ok(f) = crate::sys::preallocated(&path) else {
        return f64::NAN;
    };
    let mut v = Vec::new();
    for i in 0..15u64 {
        let t = Instant::now();
        if f.write_all_at(&[0u8; 128], i * 128).is_err() || f.sync_data().is_err() {
            return f64::NAN;
        }
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    median(v)
}
