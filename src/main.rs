//! The `leasehold` command: the server, client subcommands, and `run`, the
//! singleton runner.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Parser, Subcommand};
use tokio::net::TcpListener;

use leasehold::admin::serve_admin;
use leasehold::backend::Backend;
use leasehold::client::{process_holder, Client, ClientError, Elector, EventKind, Lease};
use leasehold::etcd::{self, EtcdNode};
use leasehold::lease::Limits;
use leasehold::metrics::RpcMetrics;
use leasehold::node::Node;
use leasehold::server;
use leasehold::store::repair;
use leasehold::store::sled::SledStore;

/// Exit code when a lease was not acquired or a key not found.
const EXIT_NOT_GRANTED: u8 = 3;
/// Exit code when the server said LEASE_LOST or FENCED.
const EXIT_NOT_LEADER: u8 = 4;
/// Exit code of `run` when the lease was lost and the command killed.
const EXIT_LEASE_LOST: u8 = 75;

#[derive(Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Per-job leader election with fencing tokens, and a store fenced by them.",
    after_help = "Exit codes: 0 ok, 1 error, 2 usage, 3 not acquired / not found, \
                  4 LEASE_LOST or FENCED, 75 `run` lost its lease."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server: on the embedded store (default), or as one of many
    /// stateless frontends on an etcd cluster (--store etcd).
    Serve(ServeArgs),
    /// Acquire a lease (optionally waiting for it).
    Acquire {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// Holder identity; default: NAME@<new uuid>.
        #[arg(long)]
        holder: Option<String>,
        /// Name for the default holder identity.
        #[arg(long, default_value = "cli")]
        name: String,
        /// Lease lifetime, e.g. 10s, 500ms, 1m.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        ttl: Duration,
        /// How long to wait for the lease to free up.
        #[arg(long, value_parser = parse_duration, default_value = "0s")]
        wait: Duration,
    },
    /// Renew a lease.
    Renew {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// The holder identity the lease was acquired with.
        #[arg(long)]
        holder: String,
        /// The token of the grant.
        #[arg(long)]
        token: u64,
        /// New lifetime, counted from now.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        ttl: Duration,
    },
    /// Release a lease.
    Release {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// The holder identity the lease was acquired with.
        #[arg(long)]
        holder: String,
        /// The token of the grant.
        #[arg(long)]
        token: u64,
    },
    /// Show a table of jobs: holder, token, time remaining.
    Status {
        #[command(flatten)]
        conn: Conn,
        /// Only jobs starting with this prefix.
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Print every change of a job's lease as it happens.
    Watch {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
    },
    /// Write a value, fenced by a token.
    Write {
        #[command(flatten)]
        conn: Conn,
        /// The job whose token fences the key.
        job: String,
        /// The key.
        key: String,
        /// The value; `-` reads standard input.
        #[arg(required_unless_present = "delete")]
        value: Option<String>,
        /// The writer's token (in `run`, $LEASEHOLD_TOKEN).
        #[arg(long, env = "LEASEHOLD_TOKEN")]
        token: u64,
        /// Delete the key instead.
        #[arg(long)]
        delete: bool,
    },
    /// Read a value; prints it to standard output.
    Read {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// The key.
        key: String,
        /// Print token and version to standard error too.
        #[arg(long)]
        meta: bool,
    },
    /// List a job's keys.
    Keys {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// Only keys starting with this prefix.
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Run CMD as the job's elected singleton.
    ///
    /// Waits for leadership, runs CMD with LEASEHOLD_TOKEN, LEASEHOLD_JOB,
    /// LEASEHOLD_HOLDER and LEASEHOLD_SERVER in its environment, renews at
    /// ttl/3, and kills CMD (its whole process group: SIGTERM, then SIGKILL
    /// after --kill-grace) as soon as the lease is lost. Releases the lease
    /// when CMD exits, and exits with CMD's status; with 75 if the lease was
    /// lost. SIGINT and SIGTERM are passed on to CMD.
    Run {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// Name for the holder identity (NAME@<uuid>).
        #[arg(long, default_value = "run")]
        name: String,
        /// Lease lifetime.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        ttl: Duration,
        /// Time between SIGTERM and SIGKILL when stopping CMD; default ttl/3.
        #[arg(long, value_parser = parse_duration)]
        kill_grace: Option<Duration>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Check a stopped server's data dir: read every file, print what it
    /// holds and every problem. Exits 0 only when it is healthy. Writes
    /// nothing: it reads a copy.
    Check {
        /// The data dir.
        #[arg(long, env = "LEASEHOLD_DATA_DIR")]
        data_dir: PathBuf,
    },
    /// Save a consistent backup of a running server's durable state.
    Backup {
        #[command(flatten)]
        conn: Conn,
        /// The backup file to write (written whole, then renamed into
        /// place: an interrupted backup leaves no file).
        #[arg(long)]
        out: PathBuf,
    },
    /// Replace a stopped server's data dir with a backup. Every lease is
    /// released and the token floor raised above every token that may have
    /// been issued since the backup; the old files are kept in a
    /// `replaced-<time>` folder inside the data dir.
    Restore {
        /// The data dir (created if missing).
        #[arg(long, env = "LEASEHOLD_DATA_DIR")]
        data_dir: PathBuf,
        /// The backup file.
        file: PathBuf,
        /// The token floor, if you know better than the rule (never below
        /// the highest token found).
        #[arg(long)]
        floor: Option<u64>,
    },
    /// Keep what a damaged data dir still holds: every readable record in a
    /// new store, every lease released, the token floor raised; the damaged
    /// files are kept in a `damaged-<time>` folder inside it.
    Recover {
        /// The data dir.
        #[arg(long, env = "LEASEHOLD_DATA_DIR")]
        data_dir: PathBuf,
        /// The token floor, if you know better than the rule (never below
        /// the highest token found).
        #[arg(long)]
        floor: Option<u64>,
    },
}

#[derive(Args)]
struct Conn {
    /// Server address.
    #[arg(
        long,
        env = "LEASEHOLD_SERVER",
        default_value = "http://127.0.0.1:50051"
    )]
    server: String,
}

/// Where the server keeps leases and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum StoreKind {
    /// The embedded store (sled) in --data-dir: one server.
    Sled,
    /// An etcd cluster (--etcd-endpoints): any number of stateless
    /// frontends.
    Etcd,
}

#[derive(Args)]
struct ServeArgs {
    /// Where leases and values live.
    #[arg(long, env = "LEASEHOLD_STORE", value_enum, default_value = "sled")]
    store: StoreKind,
    /// With --store etcd: the etcd members' client URLs, comma-separated.
    #[arg(
        long,
        env = "LEASEHOLD_ETCD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    etcd_endpoints: Vec<String>,
    /// With --store etcd: every key leasehold writes starts with this.
    /// Frontends that share a prefix serve the same jobs.
    #[arg(long, env = "LEASEHOLD_ETCD_PREFIX", default_value = "leasehold/")]
    etcd_prefix: String,
    /// With --store etcd: how long an operation waits for etcd before it
    /// fails with UNAVAILABLE.
    #[arg(long, env = "LEASEHOLD_ETCD_TIMEOUT", value_parser = parse_duration, default_value = "5s")]
    etcd_timeout: Duration,
    /// With --store etcd: TTL of this frontend's session lease, which its
    /// waiting Acquires' places in line are bound to (how long a dead
    /// frontend's waiters hold up the line). Whole seconds.
    #[arg(long, env = "LEASEHOLD_ETCD_SESSION_TTL", value_parser = parse_duration, default_value = "5s")]
    etcd_session_ttl: Duration,
    /// Address for the gRPC API.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Address for /metrics and /healthz.
    #[arg(long, env = "LEASEHOLD_ADMIN_LISTEN", default_value = "127.0.0.1:9464")]
    admin_listen: SocketAddr,
    /// Where the embedded store keeps its files (--store sled).
    #[arg(long, env = "LEASEHOLD_DATA_DIR", default_value = "./leasehold-data")]
    data_dir: PathBuf,
    /// Shortest lease TTL accepted; default 100ms on sled, etcd's minimum
    /// lease TTL (2s by default) on etcd.
    #[arg(long, env = "LEASEHOLD_MIN_TTL", value_parser = parse_duration)]
    min_ttl: Option<Duration>,
    /// Longest lease TTL accepted.
    #[arg(long, env = "LEASEHOLD_MAX_TTL", value_parser = parse_duration, default_value = "1h")]
    max_ttl: Duration,
    /// Longest an Acquire may wait.
    #[arg(long, env = "LEASEHOLD_MAX_WAIT", value_parser = parse_duration, default_value = "1h")]
    max_wait: Duration,
    /// Longest job or holder name, in bytes.
    #[arg(long, env = "LEASEHOLD_MAX_NAME_BYTES", default_value_t = 256)]
    max_name_bytes: usize,
    /// Longest key, in bytes.
    #[arg(long, env = "LEASEHOLD_MAX_KEY_BYTES", default_value_t = 1024)]
    max_key_bytes: usize,
    /// Largest value, in bytes.
    #[arg(long, env = "LEASEHOLD_MAX_VALUE_BYTES", default_value_t = 65536)]
    max_value_bytes: usize,
    /// How long in-flight calls may take to finish on shutdown.
    #[arg(long, env = "LEASEHOLD_DRAIN_TIMEOUT", value_parser = parse_duration, default_value = "10s")]
    drain_timeout: Duration,
    /// Connections open at once; more are closed on accept.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS", default_value_t = 4096)]
    max_connections: usize,
    /// Calls in flight at once (waiting Acquires included); more are
    /// answered RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_IN_FLIGHT", default_value_t = 10_000)]
    max_in_flight: usize,
    /// HTTP/2 streams open at once on one connection (watches included).
    #[arg(
        long,
        env = "LEASEHOLD_MAX_STREAMS_PER_CONNECTION",
        default_value_t = 1024
    )]
    max_streams_per_connection: u32,
    /// Ping idle connections this often; drop peers that do not answer.
    #[arg(long, env = "LEASEHOLD_KEEPALIVE", value_parser = parse_duration, default_value = "30s")]
    keepalive: Duration,
}

/// Parses `1500ms`, `10s`, `2m`, `1h`, or a combination like `1m30s`
/// (humantime's syntax), naming the input and the form expected.
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?}: {e}; expected a duration like 500ms, 10s, 2m, 1h or 1m30s"))
}

fn print_outcome(what: &str, o: &repair::Outcome) {
    println!(
        "{what}: {} job(s), {} value record(s); every lease released",
        o.jobs, o.values
    );
    println!(
        "highest token found {}{}; every next grant is above {}",
        o.highest,
        if o.proven {
            " (proven: manifest and log intact)"
        } else {
            " (not provable: the floor adds a margin of 2^32)"
        },
        o.floor
    );
    if let Some(k) = &o.kept {
        println!("the previous files are in {}", k.display());
    }
    for l in &o.lost {
        println!("lost or unreadable: {l}");
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                let default = if matches!(cli.command, Command::Serve(_)) {
                    "info"
                } else {
                    "warn"
                };
                tracing_subscriber::EnvFilter::new(default)
            }),
        )
        .with_writer(std::io::stderr)
        // Colours for a terminal only: a log file or a collector gets text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    match rt.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            match e.downcast_ref::<ClientError>() {
                Some(ClientError::LeaseLost { .. } | ClientError::Fenced { .. }) => {
                    ExitCode::from(EXIT_NOT_LEADER)
                }
                _ => ExitCode::FAILURE,
            }
        }
    }
}

async fn dispatch(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Serve(a) => serve(a).await.map(|()| ExitCode::SUCCESS),
        Command::Check { data_dir } => {
            let report = repair::check(&data_dir)?;
            print!("{report}");
            Ok(if report.inspection.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Backup { conn, out } => {
            let client = Client::connect(&conn.server).await?;
            let tmp = out.with_extension("partial");
            let mut f = tokio::fs::File::create(&tmp)
                .await
                .with_context(|| format!("cannot create {}", tmp.display()))?;
            let n = match client.backup_to(&mut f).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return Err(e.into());
                }
            };
            f.sync_all().await?;
            drop(f);
            // Verify before the file takes its name.
            let b = repair::read_backup(&tmp)?;
            tokio::fs::rename(&tmp, &out).await?;
            println!(
                "backup {}: {n} bytes, {} records, highest token {}",
                out.display(),
                b.records.len(),
                b.max_token
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Restore {
            data_dir,
            file,
            floor,
        } => {
            let o = repair::restore(&data_dir, &file, floor)?;
            print_outcome("restored", &o);
            Ok(ExitCode::SUCCESS)
        }
        Command::Recover { data_dir, floor } => {
            let o = repair::recover(&data_dir, floor)?;
            print_outcome("recovered", &o);
            Ok(ExitCode::SUCCESS)
        }
        Command::Acquire {
            conn,
            job,
            holder,
            name,
            ttl,
            wait,
        } => {
            let c = connect(&conn).await?;
            let holder = holder.unwrap_or_else(|| process_holder(&name));
            let a = c.acquire(&job, &holder, ttl, wait).await?;
            if a.acquired {
                println!("acquired job={job} holder={holder} token={}", a.lease.token);
                Ok(ExitCode::SUCCESS)
            } else {
                println!("busy {}", describe(&a.lease));
                Ok(ExitCode::from(EXIT_NOT_GRANTED))
            }
        }
        Command::Renew {
            conn,
            job,
            holder,
            token,
            ttl,
        } => {
            let l = connect(&conn)
                .await?
                .renew(&job, &holder, token, ttl)
                .await?;
            println!("renewed {}", describe(&l));
            Ok(ExitCode::SUCCESS)
        }
        Command::Release {
            conn,
            job,
            holder,
            token,
        } => {
            connect(&conn).await?.release(&job, &holder, token).await?;
            println!("released job={job} token={token}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { conn, prefix } => {
            let leases = connect(&conn).await?.list_leases(&prefix).await?;
            print_status(&leases);
            Ok(ExitCode::SUCCESS)
        }
        Command::Watch { conn, job } => {
            let mut events = connect(&conn).await?.watch(&job).await?;
            while let Some(ev) = events.message().await.map_err(ClientError::from)? {
                let kind = EventKind::try_from(ev.kind).unwrap_or(EventKind::Unspecified);
                let name = kind
                    .as_str_name()
                    .trim_start_matches("KIND_")
                    .to_lowercase();
                println!("{name} {}", describe(&ev.lease.unwrap_or_default().into()));
                std::io::stdout().flush()?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Write {
            conn,
            job,
            key,
            value,
            token,
            delete,
        } => {
            let c = connect(&conn).await?;
            let version = if delete {
                c.delete(&job, token, key.as_bytes()).await?
            } else {
                let value = match value.as_deref() {
                    Some("-") => {
                        let mut b = Vec::new();
                        std::io::stdin().read_to_end(&mut b)?;
                        b
                    }
                    Some(v) => v.as_bytes().to_vec(),
                    None => bail!("a value is required (or --delete)"),
                };
                c.checked_write(&job, token, key.as_bytes(), value).await?
            };
            println!("ok version={version}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Read {
            conn,
            job,
            key,
            meta,
        } => {
            let v = connect(&conn).await?.read(&job, key.as_bytes()).await?;
            if meta {
                eprintln!("found={} token={} version={}", v.found, v.token, v.version);
            }
            if !v.found {
                eprintln!("not found: job={job} key={key}");
                return Ok(ExitCode::from(EXIT_NOT_GRANTED));
            }
            std::io::stdout().write_all(&v.value)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Keys { conn, job, prefix } => {
            for k in connect(&conn)
                .await?
                .list_keys(&job, prefix.as_bytes())
                .await?
            {
                println!(
                    "{}\ttoken={}\tversion={}\tsize={}",
                    String::from_utf8_lossy(&k.key),
                    k.token,
                    k.version,
                    k.size
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            conn,
            job,
            name,
            ttl,
            kill_grace,
            cmd,
        } => {
            run_singleton(
                &conn.server,
                &job,
                &name,
                ttl,
                kill_grace.unwrap_or(ttl / 3),
                &cmd,
            )
            .await
        }
    }
}

async fn connect(conn: &Conn) -> anyhow::Result<Client> {
    Client::connect(&conn.server)
        .await
        .with_context(|| format!("cannot connect to {}", conn.server))
}

fn describe(l: &Lease) -> String {
    match &l.holder {
        Some(h) => format!(
            "job={} holder={h} token={} remaining={}",
            l.job,
            l.token,
            l.remaining.map_or("-".into(), |d| format!("{d:.3?}"))
        ),
        None => format!("job={} holder=- token={}", l.job, l.token),
    }
}

fn print_status(leases: &[Lease]) {
    let w = leases.iter().map(|l| l.job.len()).max().unwrap_or(3).max(3);
    let hw = leases
        .iter()
        .map(|l| l.holder.as_deref().map_or(1, str::len))
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:<w$}  {:<hw$}  {:>8}  REMAINING",
        "JOB", "HOLDER", "TOKEN"
    );
    for l in leases {
        println!(
            "{:<w$}  {:<hw$}  {:>8}  {}",
            l.job,
            l.holder.as_deref().unwrap_or("-"),
            l.token,
            l.remaining.map_or("-".into(), |d| format!("{d:.1?}"))
        );
    }
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let mut limits = Limits {
        min_ttl: a.min_ttl.unwrap_or(Duration::from_millis(100)),
        max_ttl: a.max_ttl,
        max_wait: a.max_wait,
        max_name_bytes: a.max_name_bytes,
        max_key_bytes: a.max_key_bytes,
        max_value_bytes: a.max_value_bytes,
    };
    limits.validate().context("bad limits")?;
    let (node, place): (Backend, String) = match a.store {
        StoreKind::Sled => {
            let store = SledStore::open(&a.data_dir).context("cannot open the store")?;
            let node = Node::open(Arc::new(store)).context("cannot load the store")?;
            #[cfg(feature = "fault-injection")]
            if let Ok(rules) = std::env::var("LEASEHOLD_BREAK") {
                node.break_rules(&rules).context("LEASEHOLD_BREAK")?;
            }
            (node.into(), format!("data_dir={}", a.data_dir.display()))
        }
        StoreKind::Etcd => {
            let config = etcd::Config {
                endpoints: a.etcd_endpoints.clone(),
                prefix: a.etcd_prefix.clone(),
                timeout: a.etcd_timeout,
                session_ttl: a.etcd_session_ttl,
            };
            let node = EtcdNode::open(config)
                .await
                .with_context(|| format!("cannot reach etcd at {}", a.etcd_endpoints.join(",")))?;
            // TTLs are whole seconds, at least etcd's minimum lease TTL.
            let min = node.min_ttl();
            limits.min_ttl = a.min_ttl.unwrap_or(min);
            for (flag, v) in [("--min-ttl", limits.min_ttl), ("--max-ttl", limits.max_ttl)] {
                if v.subsec_nanos() != 0 || v < min {
                    bail!(
                        "{flag} {v:?}: with --store etcd, TTLs are whole seconds and at least \
                         {min:?} (etcd's minimum lease TTL)"
                    );
                }
            }
            limits.validate().context("bad limits")?;
            (
                node.into(),
                format!(
                    "etcd={} prefix={:?} min_ttl={min:?}",
                    a.etcd_endpoints.join(","),
                    a.etcd_prefix
                ),
            )
        }
    };
    // Bind both listeners before serving, so that "listening" means it.
    let listener = TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))?;
    let admin = TcpListener::bind(a.admin_listen)
        .await
        .with_context(|| format!("cannot listen on {} (admin)", a.admin_listen))?;
    let addr = listener.local_addr()?;
    let admin_addr = admin.local_addr()?;
    let rpc = Arc::new(RpcMetrics::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let admin_task = tokio::spawn(serve_admin(admin, node.clone(), rpc.clone(), {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }));
    tracing::info!(%addr, %admin_addr, store = %place, "serving");
    // Handlers first: "listening" promises a graceful shutdown on SIGTERM.
    let shutdown = shutdown_signal()?;
    println!("leasehold listening on {addr} admin {admin_addr}");
    std::io::stdout().flush()?;
    for (flag, v) in [
        ("--max-connections", a.max_connections),
        ("--max-in-flight", a.max_in_flight),
        (
            "--max-streams-per-connection",
            a.max_streams_per_connection as usize,
        ),
    ] {
        if v == 0 {
            bail!("{flag} must be at least 1");
        }
    }
    let config = server::Config {
        limits,
        drain_timeout: a.drain_timeout,
        max_connections: a.max_connections,
        max_in_flight: a.max_in_flight,
        max_streams_per_connection: a.max_streams_per_connection,
        keepalive: a.keepalive,
    };
    server::run(listener, node, config, rpc, shutdown).await?;
    let _ = stop_tx.send(true);
    let _ = admin_task.await;
    Ok(())
}

/// Completes on SIGINT or SIGTERM (containers send SIGTERM).
///
/// The handlers are installed here, when called, not when the future is
/// first polled: a signal that arrives right after start-up must drain and
/// sync like any other, not kill the process.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("install the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

async fn run_singleton(
    server: &str,
    job: &str,
    name: &str,
    ttl: Duration,
    grace: Duration,
    cmd: &[String],
) -> anyhow::Result<ExitCode> {
    use tokio::signal::unix::{signal, SignalKind};
    let client = Client::connect(server)
        .await
        .with_context(|| format!("cannot connect to {server}"))?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut elector = Elector::start(client, job, name, ttl);
    let token = tokio::select! {
        t = elector.elected() => t,
        _ = term.recv() => { elector.resign().await; return Ok(ExitCode::from(143)) }
        _ = int.recv() => { elector.resign().await; return Ok(ExitCode::from(130)) }
    };
    eprintln!(
        "leasehold run: leading job={job} token={token} holder={}",
        elector.holder()
    );
    let mut child = tokio::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("LEASEHOLD_TOKEN", token.to_string())
        .env("LEASEHOLD_JOB", job)
        .env("LEASEHOLD_HOLDER", elector.holder())
        .env("LEASEHOLD_SERVER", server)
        // Its own process group, so that stopping it stops everything it
        // started.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {:?}", cmd[0]))?;
    let pgid = child.id().context("child exited at once")? as i32;

    let outcome = tokio::select! {
        status = child.wait() => {
            let status = status?;
            elector.resign().await;
            return Ok(exit_code_of(status));
        }
        _ = elector.lost() => {
            eprintln!("leasehold run: lease on {job} lost (token {token}); stopping the command");
            ExitCode::from(EXIT_LEASE_LOST)
        }
        _ = term.recv() => ExitCode::from(143),
        _ = int.recv() => ExitCode::from(130),
    };
    stop_group(pgid, &mut child, grace).await;
    elector.resign().await;
    Ok(outcome)
}

/// SIGTERM to the process group, then SIGKILL after `grace`.
async fn stop_group(pgid: i32, child: &mut tokio::process::Child, grace: Duration) {
    // SAFETY: kill(2) with a negative pid signals the process group we
    // created for the child; it has no memory-safety preconditions.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        // SAFETY: as above.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = child.wait().await;
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("5x")
            .unwrap_err()
            .contains("unknown time unit"));
        assert!(parse_duration("").is_err());
        // No silent wrap-around on a huge number.
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_duration("5124095576030432h").is_err());
    }
}
