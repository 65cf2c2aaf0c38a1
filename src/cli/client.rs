//! The client subcommands: one call each, printed for people and scripts.

use std::io::{Read as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};

use leasehold::client::{process_holder, Client, ClientError, EventKind, Lease};

use crate::cli::parse_duration;
use crate::EXIT_NOT_GRANTED;

#[derive(Args)]
pub struct Conn {
    /// Server address.
    #[arg(
        long,
        env = "LEASEHOLD_SERVER",
        default_value = "http://127.0.0.1:50051"
    )]
    pub server: String,
}

/// Calls on a running server.
#[derive(Subcommand)]
pub enum ClientCommand {
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
}

impl ClientCommand {
    /// Runs the subcommand.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ClientCommand::Acquire {
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
            ClientCommand::Renew {
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
            ClientCommand::Release {
                conn,
                job,
                holder,
                token,
            } => {
                connect(&conn).await?.release(&job, &holder, token).await?;
                println!("released job={job} token={token}");
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Status { conn, prefix } => {
                let leases = connect(&conn).await?.list_leases(&prefix).await?;
                print_status(&leases);
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Watch { conn, job } => {
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
            ClientCommand::Write {
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
            ClientCommand::Read {
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
            ClientCommand::Keys { conn, job, prefix } => {
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
        }
    }
}

pub async fn connect(conn: &Conn) -> anyhow::Result<Client> {
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
