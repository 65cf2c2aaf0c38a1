//! `leasehold-bench shards`: how fast a shard group heals and balances.
//!
//! The program starts a server (the single node; with `--etcd`, a 3-member
//! etcd cluster on loopback and one frontend) and, for each run, member
//! processes: `leasehold join GROUP --shards N`, a fresh
//! group per run. The bench reads each member's events (`assigned`,
//! `revoked`, `lost`) as it prints them, and keeps who owns what.
//!
//! One run, with N shards (64) over M members (4):
//!
//! - **join**: M-1 members join and settle (every shard owned, balanced);
//!   then the M-th member joins. Measured: from its `joined` line to the
//!   moment it owns ⌊N/M⌋ shards (each moved by a handover: a revoke, its
//!   acknowledgement, the release that grants the waiter).
//! - **kill**: one member (at random) is SIGKILLed. Measured: from the
//!   kill to the moment the others have been told `assigned` for every one
//!   of its shards. The goal is the crash-failover goal (a bound leader's
//!   SIGKILL to its successor's write: 50 ms on the single node, 250 ms on
//!   etcd) plus the time to send the assignments.
//!
//! The members' TTL is long (60 s): a kill is healed by the closed
//! connection, never by a TTL.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::faults::{frontend, Cluster};
use crate::proc::Server;
use crate::sys::Res;

/// The crash-failover goals (bench/src/failover.rs): a bound leader's
/// SIGKILL to its successor's write, p99.
const KILL_GOAL: Duration = Duration::from_millis(50);
const KILL_GOAL_ETCD: Duration = Duration::from_millis(250);

#[derive(clap::Args)]
pub struct ShardsArgs {
    /// The release `leasehold` binary (the server and the members).
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory (the data dir, or etcd's data dirs).
    #[arg(long)]
    work_dir: PathBuf,
    /// Runs (each: a join, then a kill).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Shards per group.
    #[arg(long, default_value_t = 64)]
    shards: u32,
    /// Members per group.
    #[arg(long, default_value_t = 4)]
    members: usize,
    /// Run on etcd: a 3-member cluster on loopback and one frontend.
    #[arg(long)]
    etcd: bool,
    /// The `etcd` binary (Debian's etcd-server).
    #[arg(long, default_value = "etcd")]
    etcd_bin: PathBuf,
}

/// What the members own, as their events say, with the time of the last
/// event.
#[derive(Default)]
struct Owners {
    owned: BTreeMap<usize, BTreeSet<u32>>,
    last_assigned: BTreeMap<usize, Instant>,
    joined: BTreeMap<usize, Instant>,
}

struct Member {
    child: Child,
}

fn spawn(
    bin: &PathBuf,
    url: &str,
    group: &str,
    shards: u32,
    id: usize,
    owners: &Arc<Mutex<Owners>>,
) -> Res<Member> {
    let mut child = Command::new(bin)
        .args(["join", group, "--server", url, "--ttl", "60s"])
        .args(["--shards", &shards.to_string(), "--name", &format!("m{id}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let owners = owners.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let now = Instant::now();
            // "assigned 3 token=2 job=g/3", "joined g member=m shards=64"
            let mut words = line.split_whitespace();
            let event = words.next();
            let shard: u32 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
            let mut o = owners.lock().unwrap();
            match event {
                Some("joined") => {
                    o.joined.insert(id, now);
                    o.owned.entry(id).or_default();
                }
                Some("assigned") => {
                    o.owned.entry(id).or_default().insert(shard);
                    o.last_assigned.insert(id, now);
                }
                Some("revoked") | Some("lost") => {
                    o.owned.entry(id).or_default().remove(&shard);
                }
                _ => {}
            }
        }
    });
    Ok(Member { child })
}

/// Waits until `pred` holds of the owners (polling every millisecond).
async fn until(owners: &Arc<Mutex<Owners>>, what: &str, pred: impl Fn(&Owners) -> bool) -> Res<()> {
    let t = Instant::now();
    loop {
        if pred(&owners.lock().unwrap()) {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err(format!("waited 60 s for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn balanced(o: &Owners, live: &[usize], n: u32) -> bool {
    let m = live.len() as u32;
    let mut total = 0;
    for id in live {
        let c = o.owned.get(id).map_or(0, BTreeSet::len) as u32;
        if c != n / m && c != n.div_ceil(m) {
            return false;
        }
        total += c;
    }
    total == n
}

pub async fn run(a: ShardsArgs) -> Res<()> {
    if a.members < 2 || a.shards == 0 {
        return Err("--members must be at least 2, --shards at least 1".into());
    }
    let dir = a.work_dir.join(format!("shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut _cluster = None;
    let (backend, server) = if a.etcd {
        let cluster = Cluster::start(&a.etcd_bin, &dir.join("etcd"))?;
        cluster.leader(Duration::from_secs(30)).await?;
        let f = frontend(&a.leasehold_bin, &cluster.endpoints_from(0), "warn")?;
        _cluster = Some(cluster);
        ("etcd (3 members) + 1 frontend", f)
    } else {
        let mut cmd = std::process::Command::new(&a.leasehold_bin);
        cmd.args(crate::proc::SERVE)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .env("RUST_LOG", "warn");
        ("single node", Server::spawn_command(cmd)?)
    };
    let url = server.addr.clone();
    eprintln!(
        "shards: {backend} at {}, {} shards over {} members, {} runs",
        server.addr, a.shards, a.members, a.runs
    );
    let (mut joins, mut kills) = (Vec::new(), Vec::new());
    let mut seed = std::process::id() as u64;
    for run in 0..a.runs {
        let group = format!("bench{run}");
        let owners: Arc<Mutex<Owners>> = Arc::default();
        let mut members = Vec::new();
        for id in 0..a.members - 1 {
            members.push(spawn(
                &a.leasehold_bin,
                &url,
                &group,
                a.shards,
                id,
                &owners,
            )?);
            let live: Vec<usize> = (0..=id).collect();
            until(&owners, "the first members to settle", |o| {
                balanced(o, &live, a.shards)
            })
            .await?;
        }
        let last = a.members - 1;
        members.push(spawn(
            &a.leasehold_bin,
            &url,
            &group,
            a.shards,
            last,
            &owners,
        )?);
        let live: Vec<usize> = (0..a.members).collect();
        until(&owners, "the group to balance after a join", |o| {
            balanced(o, &live, a.shards)
        })
        .await?;
        {
            let o = owners.lock().unwrap();
            let joined = o.joined[&last];
            let done = o.last_assigned[&last];
            joins.push(done.saturating_duration_since(joined));
        }
        // Kill one at random.
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let victim = (seed >> 33) as usize % a.members;
        let lost: BTreeSet<u32> = owners.lock().unwrap().owned[&victim].clone();
        let killed = Instant::now();
        members[victim].child.start_kill()?;
        let others: Vec<usize> = (0..a.members).filter(|i| *i != victim).collect();
        until(
            &owners,
            "the killed member's shards to be owned again",
            |o| {
                lost.iter().all(|k| {
                    others
                        .iter()
                        .any(|i| o.owned.get(i).is_some_and(|s| s.contains(k)))
                })
            },
        )
        .await?;
        let healed = {
            let o = owners.lock().unwrap();
            others
                .iter()
                .filter_map(|i| o.last_assigned.get(i))
                .max()
                .copied()
                .unwrap_or(killed)
        };
        kills.push(healed.saturating_duration_since(killed));
        eprintln!(
            "shards: run {run}: join {:.1} ms, kill of m{victim} ({} shards) {:.1} ms",
            joins[run].as_secs_f64() * 1e3,
            lost.len(),
            kills[run].as_secs_f64() * 1e3
        );
        for mut m in members {
            let _ = m.child.start_kill();
            let _ = m.child.wait().await;
        }
    }
    let goal = if a.etcd { KILL_GOAL_ETCD } else { KILL_GOAL };
    println!(
        "| backend | what | shards / members | runs | p50 | p90 | p99 | max | goal |\n|---|---|---|---|---:|---:|---:|---:|---|"
    );
    for (what, v, goal) in [
        (
            "a member joins → balanced",
            &mut joins,
            "(measured)".to_owned(),
        ),
        (
            "SIGKILL of a member → all its shards owned again",
            &mut kills,
            format!(
                "crash failover ({} ms) + sending the assignments",
                goal.as_millis()
            ),
        ),
    ] {
        v.sort();
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        let pct = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        println!(
            "| {backend} | {what} | {} / {} | {} | {} | {} | {} | {} | {goal} |",
            a.shards,
            a.members,
            v.len(),
            ms(pct(0.5)),
            ms(pct(0.9)),
            ms(pct(0.99)),
            ms(*v.last().unwrap()),
        );
    }
    server.stop();
    Ok(())
}
