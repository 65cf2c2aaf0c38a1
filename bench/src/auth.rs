//! What authentication costs: unary Renew and CheckedWrite against a
//! plain server, and against ones with TLS alone, TLS and a policy (every
//! call with a bearer token, every lease bound to its principal), and
//! mutual TLS and a policy (the principal is the client certificate's), in
//! the same run, on the same machine. Reports calls per second, the median latency, and the
//! server's CPU time per call (user + system, from /proc).
//!
//! `leasehold-bench auth --leasehold-bin target/release/leasehold --work-dir /tmp/lh-auth`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use leasehold::client::{Client, Security};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

use crate::proc::{self, Server};
use crate::sys::Res;

/// `leasehold-bench auth`'s flags.
#[derive(clap::Args)]
pub struct AuthArgs {
    /// The `leasehold` binary (a release build for meaningful numbers).
    #[arg(long)]
    leasehold_bin: PathBuf,
    /// A scratch directory: certificates, the policy, the data dirs.
    #[arg(long)]
    work_dir: PathBuf,
    /// Seconds per cell.
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Rounds of the three servers, one after the other (the spread
    /// between rounds is the noise).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Runs each server under valgrind's callgrind and reports the
    /// instructions the server executes per call instead of CPU time: a
    /// count that the machine's other load does not change (user space
    /// only: the kernel's share of a call is not in it).
    #[arg(long)]
    callgrind: bool,
    /// Calls per second in all, spread over the clients (0: as fast as they
    /// go). A fixed rate gives every server the same load, so that the
    /// server's CPU per call is compared at the same batching of syncs: a
    /// client slowed by its own TLS would otherwise hand the server fewer
    /// writes per sync, each then paying more of it.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Concurrent clients (one connection each).
    #[arg(long, default_value_t = 8)]
    clients: usize,
}

const SECRET: &str = "bench-secret";

struct Files {
    ca_pem: String,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    policy: PathBuf,
    /// A client certificate (and its key) that the policy names.
    client_pem: String,
    client_key: String,
}

/// The name the policy knows the bench's client certificate by.
const CLIENT_NAME: &str = "bench.client";

fn files(dir: &Path) -> Res<Files> {
    std::fs::create_dir_all(dir)?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, "bench CA");
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate()?)?;
    let mut s = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    s.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = s.signed_by(&key, &ca)?;
    let mut c = CertificateParams::new(vec![CLIENT_NAME.to_owned()])?;
    c.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate()?;
    let client = c.signed_by(&client_key, &ca)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, SECRET.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let policy = format!(
        "[[principal]]\nname = \"bench\"\ntoken_sha256 = [\"{hex}\"]\ncert_names = [\"{CLIENT_NAME}\"]\n\n\
         [[grant]]\nprincipal = \"bench\"\njobs = [\"\"]\nactions = [\"lease\", \"write\", \"read\"]\n"
    );
    let f = Files {
        ca_pem: ca.pem(),
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
        policy: dir.join("policy.toml"),
        client_pem: client.pem(),
        client_key: client_key.serialize_pem(),
    };
    std::fs::write(&f.ca, &f.ca_pem)?;
    std::fs::write(&f.cert, cert.pem())?;
    std::fs::write(&f.key, key.serialize_pem())?;
    std::fs::write(&f.policy, policy)?;
    Ok(f)
}

/// The servers compared, each against plain in its round.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    /// TLS, no policy.
    Tls,
    /// TLS and a policy; every call carries a bearer token (the goal's
    /// case).
    Token,
    /// Mutual TLS and a policy; the principal is the client certificate's
    /// name, and calls carry no token.
    Mutual,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Plain, Mode::Tls, Mode::Token, Mode::Mutual];

    fn label(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Tls => "TLS",
            Mode::Token => "TLS + bearer token + policy",
            Mode::Mutual => "mutual TLS + policy",
        }
    }

    fn tls(self) -> bool {
        self != Mode::Plain
    }

    fn policy(self) -> bool {
        matches!(self, Mode::Token | Mode::Mutual)
    }

    /// How the bench's clients connect to this server.
    fn security(self, f: &Files) -> Security {
        let ca = || Some(f.ca_pem.clone().into_bytes());
        match self {
            Mode::Plain => Security::default(),
            Mode::Tls => Security {
                ca_pem: ca(),
                ..Security::default()
            },
            Mode::Token => Security {
                ca_pem: ca(),
                token: Some(SECRET.to_owned()),
                ..Security::default()
            },
            Mode::Mutual => Security {
                ca_pem: ca(),
                cert_pem: Some(f.client_pem.clone().into_bytes()),
                key_pem: Some(f.client_key.clone().into_bytes()),
                ..Security::default()
            },
        }
    }
}

fn start(a: &AuthArgs, f: &Files, mode: Mode, data: &Path) -> Res<Server> {
    let mut cmd = if a.callgrind {
        // Instructions are counted only between `callgrind_control -i on`
        // and the dump, around each cell.
        let mut c = Command::new("valgrind");
        c.args(["--tool=callgrind", "--instr-atstart=no", "--quiet"])
            .arg(format!(
                "--callgrind-out-file={}/callgrind.%p",
                a.work_dir.display()
            ))
            .arg(&a.leasehold_bin);
        c
    } else {
        Command::new(&a.leasehold_bin)
    };
    cmd.args(proc::SERVE)
        .args(proc::LONG_TTLS)
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "warn");
    if mode.tls() {
        cmd.arg("--tls-cert")
            .arg(&f.cert)
            .arg("--tls-key")
            .arg(&f.key);
    }
    if mode == Mode::Mutual {
        cmd.arg("--tls-client-ca").arg(&f.ca);
    }
    if mode.policy() {
        cmd.arg("--policy").arg(&f.policy);
    }
    let mut s = Server::spawn_command(cmd)?;
    if mode.tls() {
        s.addr = s.addr.replacen("http://", "https://", 1);
    }
    Ok(s)
}

/// One cell's result.
struct Cell {
    calls: u64,
    secs: f64,
    p50: Duration,
    cpu: f64,
}

async fn cell(a: &AuthArgs, s: &Server, security: &Security, work: &str) -> Res<Cell> {
    let mut clients = Vec::new();
    for i in 0..a.clients {
        let c = Client::connect_with(&s.addr, security.clone()).await?;
        let job = format!("auth-bench/{work}/{i}");
        let got = c
            .acquire(&job, "bench", Duration::from_secs(3600), Duration::ZERO)
            .await?;
        clients.push((c, job, got.lease.token));
    }
    let until = Instant::now() + Duration::from_secs_f64(a.secs);
    if a.callgrind {
        callgrind(s, &["--zero"])?;
        callgrind(s, &["--instr=on"])?;
    }
    let cpu0 = proc::cpu_seconds(s.pid())?;
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let (rate, clients_n) = (a.rate, a.clients);
    for (c, job, token) in clients {
        let work = work.to_owned();
        let clients = clients_n;
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut n = 0u64;
            let mut pace = (rate > 0.0).then(|| {
                let mut i = tokio::time::interval(Duration::from_secs_f64(clients as f64 / rate));
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                i
            });
            while Instant::now() < until {
                if let Some(p) = pace.as_mut() {
                    p.tick().await;
                }
                let t = Instant::now();
                if work == "renew" {
                    c.renew(&job, "bench", token, Duration::from_secs(3600))
                        .await?;
                } else {
                    c.checked_write(&job, token, b"k", n.to_le_bytes().to_vec())
                        .await?;
                }
                lat.push(t.elapsed());
                n += 1;
            }
            Ok::<_, leasehold::client::ClientError>(lat)
        });
    }
    let mut lat = Vec::new();
    while let Some(r) = tasks.join_next().await {
        lat.extend(r??);
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut cpu = proc::cpu_seconds(s.pid())? - cpu0;
    if a.callgrind {
        // In callgrind mode the figure is instructions, not seconds.
        cpu = callgrind_instructions(a, s, &format!("{}-{work}", s.pid()))?;
        callgrind(s, &["--instr=off"])?;
    }
    lat.sort();
    Ok(Cell {
        calls: lat.len() as u64,
        secs,
        p50: lat.get(lat.len() / 2).copied().unwrap_or_default(),
        cpu,
    })
}

/// Runs both servers, both workloads, and prints a Markdown table.
pub async fn run(a: AuthArgs) -> Res<()> {
    let f = files(&a.work_dir)?;
    println!(
        "| round | work | server | calls/s | p50 | server CPU per call | vs plain |\n|---|---|---|---|---|---|---|"
    );
    for round in 1..=a.rounds {
        let mut plain = [0.0f64; 2];
        for mode in Mode::ALL {
            let data = a.work_dir.join(format!("data-{round}-{}", mode as u8));
            let _ = std::fs::remove_dir_all(&data);
            let s = start(&a, &f, mode, &data)?;
            let security = mode.security(&f);
            for (k, work) in ["renew", "write"].into_iter().enumerate() {
                let c = cell(&a, &s, &security, work).await?;
                let per = if a.callgrind {
                    c.cpu / c.calls.max(1) as f64
                } else {
                    c.cpu * 1e6 / c.calls.max(1) as f64
                };
                if mode == Mode::Plain {
                    plain[k] = per;
                }
                let unit = if a.callgrind { "instructions" } else { "µs" };
                println!(
                    "| {round} | {work} | {} | {:.0} | {:.0?} | {per:.1} {unit} | {:.2}x |",
                    mode.label(),
                    c.calls as f64 / c.secs,
                    c.p50,
                    per / plain[k].max(1e-9)
                );
            }
            s.stop();
            let _ = std::fs::remove_dir_all(&data);
        }
    }
    println!(
        "\n{} clients, one connection each, {:.0} s per cell; the server's CPU is user + system \
         time from /proc over the cell.",
        a.clients, a.secs
    );
    Ok(())
}

/// Runs `callgrind_control ARGS PID`.
fn callgrind(s: &Server, args: &[&str]) -> Res<()> {
    let st = Command::new("callgrind_control")
        .args(args)
        .arg(s.pid().to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    if !st.success() {
        return Err(format!("callgrind_control {args:?} failed").into());
    }
    Ok(())
}

/// Dumps the server's counts since the last zero and returns the total
/// instructions (the dump's `totals:` line). The dump stays in the work
/// dir as `callgrind-PID-WORK.out`, for `callgrind_annotate`.
fn callgrind_instructions(a: &AuthArgs, s: &Server, name: &str) -> Res<f64> {
    let before: Vec<_> = dumps(a, s)?;
    callgrind(s, &["--dump"])?;
    let t = Instant::now();
    loop {
        for p in dumps(a, s)? {
            if before.contains(&p) {
                continue;
            }
            let text = std::fs::read_to_string(&p)?;
            if let Some(v) = text
                .lines()
                .find_map(|l| l.strip_prefix("totals: "))
                .or_else(|| text.lines().find_map(|l| l.strip_prefix("summary: ")))
            {
                let ir: f64 = v.split_whitespace().next().unwrap_or("0").parse()?;
                // Kept for callgrind_annotate, named by its cell.
                let _ = std::fs::rename(&p, a.work_dir.join(format!("callgrind-{name}.out")));
                return Ok(ir);
            }
        }
        if t.elapsed() > Duration::from_secs(30) {
            return Err("no callgrind dump appeared".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn dumps(a: &AuthArgs, s: &Server) -> Res<Vec<PathBuf>> {
    let prefix = format!("callgrind.{}", s.pid());
    Ok(std::fs::read_dir(&a.work_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect())
}
