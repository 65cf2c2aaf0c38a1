//! Child processes the bench starts itself (the leasehold server, the echo
//! server), and what /proc says about a process: CPU time and RSS.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::sys::Res;

/// A child that printed "... listening on ADDR ..." when ready.
pub struct Server {
    pub child: Child,
    pub addr: String,
    /// The admin address (`host:port`), when the line names one.
    pub admin: Option<String>,
    /// From spawn to the "listening" line.
    pub startup: Duration,
}

/// `leasehold serve` on ports the OS picks: how every bench starts a
/// server (its data dir or store, and its own flags, follow).
pub const SERVE: [&str; 5] = [
    "serve",
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "127.0.0.1:0",
];

/// Leases of up to a day, which the benches hold for their whole run.
pub const LONG_TTLS: [&str; 2] = ["--max-ttl", "24h"];

/// No connection's Acquires paced, for a capacity bench (its set-up
/// acquires a million leases through one connection as fast as the server
/// goes); the isolation bench keeps the default.
pub const NO_ACQUIRE_PACING: [&str; 2] = ["--max-acquire-rate-per-connection", "1000000000"];

/// The binaries and the scratch directory of a bench that runs etcd.
#[derive(clap::Args)]
pub struct EtcdBench {
    /// The `leasehold` binary (a release build for meaningful numbers).
    #[arg(long)]
    pub leasehold_bin: PathBuf,
    /// The `etcd` binary (Debian's etcd-server).
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: PathBuf,
    /// A scratch directory (etcd's data dirs go here).
    #[arg(long)]
    pub work_dir: PathBuf,
}

impl Server {
    /// Starts `leasehold serve` on `data_dir`, for capacity ([`SERVE`],
    /// [`LONG_TTLS`], [`NO_ACQUIRE_PACING`]).
    pub fn leasehold(bin: &Path, data_dir: &Path) -> Res<Server> {
        let mut cmd = Command::new(bin);
        cmd.args(SERVE)
            .args(LONG_TTLS)
            .args(NO_ACQUIRE_PACING)
            .arg("--data-dir")
            .arg(data_dir)
            // A data dir seeded by the bench (`scale::seed`) has a store
            // and no signing key yet.
            .arg("--new-signing-key")
            .env("RUST_LOG", "warn");
        Server::spawn(cmd, 3)
    }

    /// Starts this bench binary as an echo server.
    pub fn echo(sync_file: &std::path::Path) -> Res<Server> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("echo-serve").arg("--sync-file").arg(sync_file);
        Server::spawn(cmd, 3)
    }

    /// Spawns `cmd`, a `leasehold serve` command line, and waits until it
    /// listens.
    pub fn spawn_command(cmd: Command) -> Res<Server> {
        Server::spawn(cmd, 3)
    }

    /// Spawns `cmd` and reads its first line; word `addr_word` is the
    /// address ("leasehold listening on ADDR admin ADDR").
    pub fn spawn(mut cmd: Command, addr_word: usize) -> Res<Server> {
        // The child goes when the bench goes, however it goes.
        // SAFETY: prctl is async-signal-safe; nothing else runs between
        // fork and exec here.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let t = Instant::now();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
        let startup = t.elapsed();
        let addr = line
            .split_whitespace()
            .nth(addr_word)
            .ok_or_else(|| format!("unexpected start-up line {line:?}"))?;
        let admin = line
            .split_whitespace()
            .nth(addr_word + 2)
            .map(str::to_owned);
        Ok(Server {
            addr: format!("http://{addr}"),
            admin,
            child,
            startup,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then wait (the server syncs and exits).
    pub fn stop(mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User plus system CPU seconds used by `pid` so far.
pub fn cpu_seconds(pid: u32) -> Res<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').ok_or("bad stat")? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// CPU seconds of `pid`'s live threads so far, to the nanosecond (the
/// scheduler's run time, from `/proc/PID/task/*/schedstat`, where `stat`
/// counts in clock ticks of 10 ms). A thread that has exited is not
/// counted: compare over a span in which the threads stay.
pub fn cpu_seconds_fine(pid: u32) -> Res<f64> {
    let mut ns = 0u64;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(stat) = std::fs::read_to_string(t?.path().join("schedstat")) else {
            continue; // the thread has just exited
        };
        ns += stat
            .split_whitespace()
            .next()
            .unwrap_or("0")
            .parse::<u64>()
            .unwrap_or(0);
    }
    Ok(ns as f64 / 1e9)
}

/// User and system CPU seconds of `pid` so far, apart.
pub fn cpu_split(pid: u32) -> Res<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').ok_or("bad stat")? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((f[11].parse::<f64>()? / hz, f[12].parse::<f64>()? / hz))
}

/// Context switches of every live thread of `pid` so far, voluntary and
/// not.
pub fn context_switches(pid: u32) -> Res<u64> {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(status) = std::fs::read_to_string(t?.path().join("status")) else {
            continue; // the thread has just exited
        };
        for l in status.lines() {
            if l.starts_with("voluntary_ctxt_switches:")
                || l.starts_with("nonvoluntary_ctxt_switches:")
            {
                n += l
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        }
    }
    Ok(n)
}

/// Resident set size of `pid`, bytes.
pub fn rss_bytes(pid: u32) -> Res<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS")?;
    let kb: u64 = line.split_whitespace().nth(1).ok_or("bad VmRSS")?.parse()?;
    Ok(kb * 1024)
}

/// CPU seconds the whole machine has been busy so far, all cores together
/// (user, nice, system, irq, softirq and steal time from `/proc/stat`).
pub fn machine_busy_seconds() -> Res<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().ok_or("empty /proc/stat")?;
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse::<f64>())
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let busy = f[0]
        + f[1]
        + f[2]
        + f.get(5).unwrap_or(&0.0)
        + f.get(6).unwrap_or(&0.0)
        + f.get(7).unwrap_or(&0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(busy / hz)
}

/// The machine's busy CPU and this process's own, read together: what a
/// cell subtracts to tell the system under test's CPU from the load
/// generator's.
#[derive(Debug, Clone, Copy)]
pub struct CpuMark {
    machine: f64,
    own: f64,
}

impl CpuMark {
    /// Now; `None` when `/proc` cannot be read.
    pub fn now() -> Option<CpuMark> {
        Some(CpuMark {
            machine: machine_busy_seconds().ok()?,
            own: cpu_seconds(std::process::id()).ok()?,
        })
    }

    /// CPU seconds since `self`: (everything but this process, this
    /// process). The first is the system under test (its every process,
    /// PostgreSQL's backends included) plus whatever else the machine ran.
    pub fn since(self, later: CpuMark) -> (f64, f64) {
        let own = later.own - self.own;
        ((later.machine - self.machine - own).max(0.0), own)
    }
}

/// The answer (headers and body) to an HTTP/1.0 `GET path` of `addr`.
pub async fn http_get(addr: &str, path: &str) -> Res<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}
