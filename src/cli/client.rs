//! The client subcommands: one call each, printed for people and scripts.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};

use leasehold::client::{process_holder, Client, ClientError, EventKind, Lease, Security, Tenure};

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
    /// Connect with TLS, trusting this CA certificate (PEM) for the
    /// server's certificate.
    #[arg(long, env = "LEASEHOLD_CA")]
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; needs --key.
    #[arg(long, env = "LEASEHOLD_CERT", requires = "client_key")]
    pub cert: Option<PathBuf>,
    /// The private key of --cert (PEM). (Its id is not `key`, which the
    /// subcommands' KEY argument has.)
    #[arg(
        id = "client_key",
        long = "key",
        env = "LEASEHOLD_KEY",
        requires = "cert"
    )]
    pub key: Option<PathBuf>,
    /// A file holding the bearer secret of a principal (sent as
    /// `authorization: Bearer SECRET`). The secret may come from the
    /// LEASEHOLD_AUTH_TOKEN environment variable instead; it is never
    /// taken as a flag's value, which other users could read from the
    /// process list.
    #[arg(long, env = "LEASEHOLD_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
}

/// The environment variable that may hold the bearer secret.
pub const AUTH_TOKEN_ENV: &str = "LEASEHOLD_AUTH_TOKEN";

impl Conn {
    /// The TLS files and the bearer secret, read.
    pub fn security(&self) -> anyhow::Result<Security> {
        let read = |flag: &str, p: &Option<PathBuf>| -> anyhow::Result<Option<Vec<u8>>> {
            p.as_ref()
                .map(|p| std::fs::read(p).with_context(|| format!("{flag} {}", p.display())))
                .transpose()
        };
        let token = match (&self.auth_token_file, std::env::var(AUTH_TOKEN_ENV)) {
            (Some(p), _) => {
                let t = std::fs::read_to_string(p)
                    .with_context(|| format!("--auth-token-file {}", p.display()))?;
                let t = t.trim().to_owned();
                if t.is_empty() {
                    bail!("--auth-token-file {}: the file is empty", p.display());
                }
                Some(t)
            }
            (None, Ok(t)) if !t.trim().is_empty() => Some(t.trim().to_owned()),
            _ => None,
        };
        Ok(Security {
            ca_pem: read("--ca", &self.ca)?,
            cert_pem: read("--cert", &self.cert)?,
            key_pem: read("--key", &self.key)?,
            token,
            server_name: None,
        })
    }
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
        /// Publish this with the grant (at most 1024 bytes): where to reach
        /// the leader. Advisory: the token fences, not the value.
        #[arg(long, value_name = "VALUE")]
        value: Option<String>,
        /// A slot of a counted lease (a semaphore) with N slots, 2 to 100:
        /// the grant is the slot's own job, JOB#k (printed as `job=`):
        /// renew, release and write with it.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=100))]
        slots: Option<u32>,
        /// Output: text for people, or json (one object; watch: one per
        /// line) for programs.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
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
        /// Publish this instead (empty clears it); without it the value
        /// is kept.
        #[arg(long, value_name = "VALUE")]
        value: Option<String>,
    },
    /// List the holders waiting for a job, first in line first (the
    /// order a release hands the lease over in), with their principals.
    Waiters {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// At most this many (the server's limit: 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Output: text for people, or json (one object) for programs.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Show a shard group: its count of shards, its live members with
    /// the shards each owns, and each shard's owner and token.
    Shards {
        #[command(flatten)]
        conn: Conn,
        /// The group.
        group: String,
        /// Output: text for people, or json (one object) for programs.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Join a shard group as a member and print its assignment as it
    /// changes, one line per event (`assigned SHARD token=T job=J`,
    /// `revoked ...`, `lost ...`), acknowledging each revoke once printed.
    /// Leaves on SIGTERM or SIGINT (its shards go to the other members
    /// at once).
    Join {
        #[command(flatten)]
        conn: Conn,
        /// The group.
        group: String,
        /// The group's count of shards (fixed by its first member), 1 to
        /// 1024.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
        shards: u32,
        /// The member's name; its identity is NAME@<new uuid>.
        #[arg(long, default_value = "member")]
        name: String,
        /// The TTL of its holdings, renewed every TTL/3.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        ttl: Duration,
        /// How long it has to acknowledge a revoke; default the TTL.
        #[arg(long, value_parser = parse_duration)]
        revoke_timeout: Option<Duration>,
        /// Output: text for people, or json (one object per line).
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
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
    /// Hand a live lease to a waiting Acquire (TransferLease): `--to`, or
    /// the first waiter in line. The successor gets the next token with
    /// no moment when the job is free; prints its lease.
    Transfer {
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
        /// The waiting holder to hand it to; the first in line if not given.
        #[arg(long)]
        to: Option<String>,
        /// The successor's lifetime; the lease's own if not given.
        #[arg(long, value_parser = parse_duration)]
        ttl: Option<Duration>,
    },
    /// Delete a job and its keys, when its lease is not live and nobody
    /// waits for it. A job created again later gets tokens above its old
    /// ones. With a policy, needs action `admin`.
    DeleteJob {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
    },
    /// Show a table of jobs: holder, token, time remaining.
    Status {
        #[command(flatten)]
        conn: Conn,
        /// Only jobs starting with this prefix.
        #[arg(default_value = "")]
        prefix: String,
        /// The same, as a flag (`status --prefix billing/`).
        #[arg(long = "prefix", value_name = "PREFIX", conflicts_with = "prefix")]
        prefix_flag: Option<String>,
        /// Output: text for people, or json (one object; watch: one per
        /// line) for programs.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Show a job's history of leaders, newest first: each token's
    /// holder, when it was granted and how it ended (wall-clock times, UTC).
    /// Exits 3 for a job that was never granted (or was deleted).
    History {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// Which token led at this instant (RFC 3339, e.g.
        /// 2026-12-01T03:12:00Z), or "none": a gap. Exits 0 when a token
        /// led, 3 when none did (or the instant is older than the history
        /// kept).
        #[arg(long, value_parser = parse_instant)]
        at: Option<std::time::SystemTime>,
        /// At most this many tenures (the table), newest first.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Output: text for people, or json (one object) for programs.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Print every change of a job's lease as it happens.
    Watch {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// Output: text for people, or json (one object; watch: one per
        /// line) for programs.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
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
        /// Output: text for people, or json (one object; watch: one per
        /// line) for programs.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
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
        /// Output: text for people, or json (one object; watch: one per
        /// line) for programs.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// The chaos API of a server started with --enable-chaos: make a
    /// worker lose its lease, stall, or be fenced, on purpose, to test
    /// that it steps down.
    #[command(subcommand)]
    Chaos(ChaosCommand),
    /// Print the server's signing keys, as a JWKS (what GET /keys serves).
    SigningKeys {
        #[command(flatten)]
        conn: Conn,
    },
    /// Verify a grant's proof with the server's signing keys (or a JWKS
    /// file), and print what it states. Exits 1, saying why, if it is
    /// refused. A proof proves that the token was issued, not that the
    /// lease is still live.
    VerifyProof {
        #[command(flatten)]
        conn: Conn,
        /// The proof (`Lease.proof`); `-` reads it from standard input.
        proof: String,
        /// The keys as a JWKS file, instead of asking the server.
        #[arg(long, value_name = "FILE")]
        jwks: Option<std::path::PathBuf>,
        /// The job the proof must be for.
        #[arg(long)]
        job: Option<String>,
        /// The token the proof must state.
        #[arg(long)]
        token: Option<u64>,
    },
}

/// `leasehold chaos ...`.
#[derive(clap::Subcommand)]
pub enum ChaosCommand {
    /// End JOB's live grant now: its holder's next renewal gets LEASE_LOST,
    /// its writes are fenced, and the first waiter is granted at once.
    Expire {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
    },
    /// Pause JOB's holder: its renewals are refused as if late, so its
    /// grant runs out at its deadline; its Acquires wait for the pause.
    Pause {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// How long, e.g. 10s (at most 1h).
        #[arg(long = "for", value_parser = parse_duration)]
        duration: Duration,
    },
    /// Delay every answer about JOB, until cleared.
    Delay {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// By how much, e.g. 200ms (at most 60s).
        #[arg(long, value_parser = parse_duration)]
        by: Duration,
    },
    /// Fail JOB's next N fenced writes as FENCED.
    Fence {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
        /// How many writes.
        #[arg(long)]
        writes: u32,
    },
    /// Hand JOB's lease to its first waiter now (a forced failover).
    Transfer {
        #[command(flatten)]
        conn: Conn,
        /// The job.
        job: String,
    },
    /// Clear the chaos in force on JOB, or on every job.
    Clear {
        #[command(flatten)]
        conn: Conn,
        /// The job; every job when left out.
        job: Option<String>,
    },
}

impl ChaosCommand {
    async fn run(self) -> anyhow::Result<ExitCode> {
        let (action, conn, job) = match &self {
            ChaosCommand::Expire { conn, job } => ("expire", conn, Some(job)),
            ChaosCommand::Pause { conn, job, .. } => ("pause", conn, Some(job)),
            ChaosCommand::Delay { conn, job, .. } => ("delay", conn, Some(job)),
            ChaosCommand::Fence { conn, job, .. } => ("fence", conn, Some(job)),
            ChaosCommand::Transfer { conn, job } => ("transfer", conn, Some(job)),
            ChaosCommand::Clear { conn, job } => ("clear", conn, job.as_ref()),
        };
        let chaos = connect(conn).await?.chaos();
        let out = match &self {
            ChaosCommand::Expire { job, .. } => chaos.expire(job).await,
            ChaosCommand::Pause { job, duration, .. } => chaos.pause(job, *duration).await,
            ChaosCommand::Delay { job, by, .. } => chaos.delay(job, *by).await,
            ChaosCommand::Fence { job, writes, .. } => chaos.fence(job, *writes).await,
            ChaosCommand::Transfer { job, .. } => chaos.transfer(job).await,
            ChaosCommand::Clear { job, .. } => chaos.clear(job.as_deref()).await,
        };
        let out = match out {
            Err(ClientError::Other(s)) if s.code() == tonic::Code::Unimplemented => {
                anyhow::bail!(
                    "{}: the server runs without the chaos API (start it with --enable-chaos)",
                    conn.server
                )
            }
            r => r?,
        };
        let lease = out.lease.as_ref().map(describe).unwrap_or_default();
        match job {
            Some(j) => outln!("chaos {action} {j}: {lease}"),
            None => outln!("chaos clear: every job"),
        }
        if !out.in_force.is_empty() {
            outln!("in force: {}", out.in_force);
        }
        Ok(ExitCode::SUCCESS)
    }
}

impl ClientCommand {
    /// Runs the subcommand.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let server = self.server().map(str::to_owned);
        match self.run_inner().await {
            Ok(code) => Ok(code),
            Err(e) => match server {
                Some(s) => match connection_hint(&s, &e).await {
                    Some(hint) => Err(e.context(hint)),
                    None => Err(e),
                },
                None => Err(e),
            },
        }
    }

    /// The server address the command talks to, if it talks to one.
    fn server(&self) -> Option<&str> {
        use ClientCommand as C;
        match self {
            C::Acquire { conn, .. }
            | C::Renew { conn, .. }
            | C::Release { conn, .. }
            | C::Status { conn, .. }
            | C::History { conn, .. }
            | C::Watch { conn, .. }
            | C::Write { conn, .. }
            | C::Read { conn, .. }
            | C::Keys { conn, .. } => Some(conn.server.as_str()),
            _ => None,
        }
    }

    async fn run_inner(self) -> anyhow::Result<ExitCode> {
        match self {
            ClientCommand::Acquire {
                conn,
                job,
                holder,
                name,
                ttl,
                wait,
                value,
                slots,
                output,
            } => {
                let c = connect(&conn).await?;
                // A holder string given by hand may be another process's
                // too. Read the lease first (best effort: a caller may
                // lack `read`), so that re-acquiring a grant this process
                // did not know it held is said out loud.
                let before = match &holder {
                    Some(_) => c.get_lease(&job).await.ok(),
                    None => None,
                };
                let holder = holder.unwrap_or_else(|| process_holder(&name));
                let options = leasehold::client::AcquireOptions {
                    value: value.unwrap_or_default().into_bytes(),
                    slots: slots.unwrap_or(0),
                    ..Default::default()
                };
                let a = c.acquire_with(&job, &holder, ttl, wait, options).await?;
                let code = match a.acquired {
                    true => ExitCode::SUCCESS,
                    false => ExitCode::from(EXIT_NOT_GRANTED),
                };
                if output == Output::Json {
                    outln!(
                        "{}",
                        serde_json::json!({"acquired": a.acquired, "lease": lease_json(&a.lease)})
                    );
                    return Ok(code);
                }
                if a.acquired {
                    if let Some(b) = before.filter(|b| {
                        b.holder.as_deref() == Some(holder.as_str()) && b.token == a.lease.token
                    }) {
                        eprintln!(
                            "warning: job {job} was already held by holder {holder} with token {}: \
                             this renewed that grant, it did not make a new one. Another process \
                             using the same --holder may believe it leads with this token too; \
                             give each process its own holder (the default, NAME@<uuid>, is unique)",
                            b.token
                        );
                    }
                    // A counted grant is its slot's own job.
                    let slot = match a.lease.slots {
                        0 => String::new(),
                        n => format!(" slot={} slots={n}", a.lease.slot),
                    };
                    outln!(
                        "acquired job={} holder={holder} token={}{slot}{}",
                        a.lease.job,
                        a.lease.token,
                        match a.lease.value.is_empty() {
                            true => String::new(),
                            false => format!(" value={}", value_text(&a.lease.value)),
                        }
                    );
                    Ok(ExitCode::SUCCESS)
                } else {
                    outln!("busy {}", describe(&a.lease));
                    Ok(ExitCode::from(EXIT_NOT_GRANTED))
                }
            }
            ClientCommand::Renew {
                conn,
                job,
                holder,
                token,
                ttl,
                value,
            } => {
                let l = connect(&conn)
                    .await?
                    .renew_with_value(
                        &job,
                        &holder,
                        token,
                        ttl,
                        value.as_deref().map(str::as_bytes),
                    )
                    .await?
                    .lease;
                outln!("renewed {}", describe(&l));
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Waiters {
                conn,
                job,
                limit,
                output,
            } => {
                let w = connect(&conn).await?.list_waiters(&job, limit).await?;
                match output {
                    Output::Json => outln!(
                        "{}",
                        serde_json::json!({
                            "job": job,
                            "waiting": w.waiting,
                            "waiters": w.waiters.iter().map(|w| serde_json::json!({
                                "holder": w.holder,
                                "principal": w.principal,
                                "preferred": w.preferred,
                            })).collect::<Vec<_>>(),
                        })
                    ),
                    Output::Text => {
                        outln!("job={job} waiting={}", w.waiting);
                        for (i, x) in w.waiters.iter().enumerate() {
                            outln!(
                                "{:>4}  {}{}{}",
                                i + 1,
                                x.holder,
                                x.principal
                                    .as_ref()
                                    .map_or(String::new(), |p| format!(" principal={p}")),
                                if x.preferred { " preferred" } else { "" },
                            );
                        }
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Shards {
                conn,
                group,
                output,
            } => {
                let g = connect(&conn).await?.get_group(&group).await?;
                match output {
                    Output::Json => outln!(
                        "{}",
                        serde_json::json!({
                            "group": g.group,
                            "shards": g.shards,
                            "members": g.members.iter().map(|m| serde_json::json!({
                                "member": m.member,
                                "shards": m.shards,
                            })).collect::<Vec<_>>(),
                            "owners": g.owners.iter().map(|o| serde_json::json!({
                                "shard": o.shard,
                                "job": o.job,
                                "member": o.member,
                                "token": o.token,
                            })).collect::<Vec<_>>(),
                        })
                    ),
                    Output::Text => {
                        let unowned = g.owners.iter().filter(|o| o.member.is_empty()).count();
                        outln!(
                            "group={} shards={} members={} unowned={unowned}",
                            g.group,
                            g.shards,
                            g.members.len()
                        );
                        for m in &g.members {
                            let list: Vec<String> = m.shards.iter().map(u32::to_string).collect();
                            outln!(
                                "member {} owns={} shards={}",
                                m.member,
                                m.shards.len(),
                                list.join(",")
                            );
                        }
                        for o in &g.owners {
                            let owner = if o.member.is_empty() { "-" } else { &o.member };
                            outln!("{:>6}  {:<40} token={}", o.shard, owner, o.token);
                        }
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Join {
                conn,
                group,
                shards,
                name,
                ttl,
                revoke_timeout,
                output,
            } => {
                let client = connect(&conn).await?;
                let options = leasehold_client::ShardOptions {
                    ttl,
                    revoke_timeout,
                };
                let mut member =
                    leasehold_client::ShardMember::join(&client, &group, &name, shards, options)
                        .await?;
                let show = |what: &str, s: &leasehold_client::Shard| match output {
                    Output::Json => serde_json::json!({
                        "event": what,
                        "shard": s.shard,
                        "token": s.token,
                        "job": s.job,
                    })
                    .to_string(),
                    Output::Text => format!("{what} {} token={} job={}", s.shard, s.token, s.job),
                };
                match output {
                    Output::Json => outln!(
                        "{}",
                        serde_json::json!({"event": "joined", "member": member.member(), "shards": shards})
                    ),
                    Output::Text => outln!(
                        "joined {} member={} shards={shards}",
                        group,
                        member.member()
                    ),
                }
                use tokio::signal::unix::{signal, SignalKind};
                let mut term = signal(SignalKind::terminate())?;
                let mut int = signal(SignalKind::interrupt())?;
                let stop = async move {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                };
                tokio::pin!(stop);
                loop {
                    let e = tokio::select! {
                        e = member.next() => e,
                        _ = &mut stop => break,
                    };
                    match e {
                        Some(Ok(leasehold_client::ShardEvent::Assigned(s))) => {
                            outln!("{}", show("assigned", &s))
                        }
                        Some(Ok(leasehold_client::ShardEvent::Revoked(s))) => {
                            outln!("{}", show("revoked", &s));
                            member.release(s.shard);
                        }
                        Some(Ok(leasehold_client::ShardEvent::Lost(s))) => {
                            outln!("{}", show("lost", &s))
                        }
                        Some(Err(e)) => return Err(e.into()),
                        None => break,
                    }
                }
                member.leave().await;
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Release {
                conn,
                job,
                holder,
                token,
            } => {
                connect(&conn).await?.release(&job, &holder, token).await?;
                outln!("released job={job} token={token}");
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Transfer {
                conn,
                job,
                holder,
                token,
                to,
                ttl,
            } => {
                let l = connect(&conn)
                    .await?
                    .transfer_lease(&job, &holder, token, to.as_deref(), ttl)
                    .await?;
                outln!("transferred {}", describe(&l));
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::DeleteJob { conn, job } => {
                if connect(&conn).await?.delete_job(&job).await? {
                    outln!("deleted job={job}");
                } else {
                    outln!("no such job: {job}");
                }
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Status {
                conn,
                prefix,
                prefix_flag,
                output,
            } => {
                let prefix = prefix_flag.unwrap_or(prefix);
                let leases = connect(&conn).await?.list_leases(&prefix).await?;
                match output {
                    Output::Text => print_status(&leases),
                    Output::Json => outln!(
                        "{}",
                        serde_json::Value::Array(leases.iter().map(lease_json).collect())
                    ),
                }
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::History {
                conn,
                job,
                at: None,
                limit,
                output,
            } => {
                let client = connect(&conn).await?;
                let tenures = client.history(&job, limit).await?;
                if tenures.is_empty() {
                    // Every job that was ever granted has a tenure: none is
                    // a job this server does not know (or one deleted).
                    eprintln!("no history: job {job:?} was never granted (or was deleted)");
                    return Ok(ExitCode::from(EXIT_NOT_GRANTED));
                }
                if output == Output::Json {
                    let chaos = client.chaos().events(&job).await.unwrap_or_default();
                    outln!(
                        "{}",
                        serde_json::json!({
                            "job": job,
                            "tenures": tenures.iter().map(tenure_json).collect::<Vec<_>>(),
                            "chaos": chaos.iter().map(|e| serde_json::json!({
                                "at": rfc3339(e.at), "action": e.action, "detail": e.detail,
                            })).collect::<Vec<_>>(),
                        })
                    );
                    return Ok(ExitCode::SUCCESS);
                }
                print_history(&tenures);
                // The chaos API's actions, on a server that has it.
                if let Ok(events) = client.chaos().events(&job).await {
                    for e in events.iter().rev() {
                        outln!("chaos {} {}: {}", rfc3339(e.at), e.action, e.detail);
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::History {
                conn,
                job,
                at: Some(at),
                ..
            } => {
                // Every tenure kept: the answer may be the oldest.
                let tenures = connect(&conn).await?.history(&job, usize::MAX).await?;
                let (found, said) = history_at(&tenures, at);
                outln!("{said}");
                Ok(match found {
                    true => ExitCode::SUCCESS,
                    false => ExitCode::from(EXIT_NOT_GRANTED),
                })
            }
            ClientCommand::Watch { conn, job, output } => {
                let mut events = connect(&conn).await?.watch(&job).await?;
                while let Some(ev) = events.message().await.map_err(ClientError::from)? {
                    let kind = EventKind::try_from(ev.kind).unwrap_or(EventKind::Unspecified);
                    let name = kind
                        .as_str_name()
                        .trim_start_matches("KIND_")
                        .to_lowercase();
                    let lease: Lease = ev.lease.unwrap_or_default().into();
                    match output {
                        Output::Text => outln!("{name} {}", describe(&lease)),
                        Output::Json => outln!(
                            "{}",
                            serde_json::json!({"kind": name, "lease": lease_json(&lease)})
                        ),
                    }
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
                outln!("ok version={version}");
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Read {
                conn,
                job,
                key,
                meta,
                output,
            } => {
                let v = connect(&conn).await?.read(&job, key.as_bytes()).await?;
                if output == Output::Json {
                    // A value that is not UTF-8 comes as base64.
                    let value = match std::str::from_utf8(&v.value) {
                        Ok(text) => serde_json::json!({"value": text}),
                        Err(_) => {
                            use base64::Engine as _;
                            let b = base64::engine::general_purpose::STANDARD.encode(&v.value);
                            serde_json::json!({"value_base64": b})
                        }
                    };
                    let mut out = serde_json::json!({
                        "job": job, "key": key, "found": v.found, "token": v.token, "version": v.version,
                    });
                    if v.found {
                        out.as_object_mut()
                            .expect("an object")
                            .extend(value.as_object().expect("an object").clone());
                    }
                    outln!("{out}");
                    return Ok(match v.found {
                        true => ExitCode::SUCCESS,
                        false => ExitCode::from(EXIT_NOT_GRANTED),
                    });
                }
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
            ClientCommand::Chaos(c) => c.run().await,
            ClientCommand::SigningKeys { conn } => {
                let keys = connect(&conn).await?.signing_keys().await?;
                outln!("{}", keys.to_jwks());
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::VerifyProof {
                conn,
                proof,
                jwks,
                job,
                token,
            } => {
                use leasehold::client::proof;
                let proof = match proof.as_str() {
                    "-" => std::io::read_to_string(std::io::stdin())?.trim().to_owned(),
                    _ => proof,
                };
                let keys = match &jwks {
                    Some(f) => {
                        let text = std::fs::read_to_string(f)
                            .with_context(|| format!("cannot read {}", f.display()))?;
                        proof::KeySet::from_jwks(&text)
                            .map_err(|e| anyhow::anyhow!("{}: {}", f.display(), e.message))?
                    }
                    None => connect(&conn).await?.signing_keys().await?,
                };
                let verdict = match &job {
                    Some(j) => proof::verify_for(&proof, &keys, j, token),
                    None => proof::verify(&proof, &keys).and_then(|c| match token {
                        Some(t) => proof::verify_for(&proof, &keys, &c.job, Some(t)),
                        None => Ok(c),
                    }),
                };
                match verdict {
                    Ok(c) => {
                        outln!(
                            "verified job={:?} token={} holder={:?} principal={:?} issued_at={} ttl={}ms kid={}",
                            c.job,
                            c.token,
                            c.holder,
                            c.principal,
                            rfc3339(UNIX_EPOCH + Duration::from_secs(c.issued_at)),
                            c.ttl_ms,
                            c.kid
                        );
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(e) => {
                        outln!("refused ({}): {}", e.kind.as_str(), e.message);
                        Ok(ExitCode::FAILURE)
                    }
                }
            }
            ClientCommand::Keys {
                conn,
                job,
                prefix,
                output,
            } => {
                let keys = connect(&conn)
                    .await?
                    .list_keys(&job, prefix.as_bytes())
                    .await?;
                if output == Output::Json {
                    let keys: Vec<_> = keys
                        .iter()
                        .map(|k| {
                            serde_json::json!({
                                "key": String::from_utf8_lossy(&k.key),
                                "token": k.token,
                                "version": k.version,
                                "size": k.size,
                            })
                        })
                        .collect();
                    outln!("{}", serde_json::Value::Array(keys));
                    return Ok(ExitCode::SUCCESS);
                }
                for k in keys {
                    outln!(
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
    Client::connect_with(&conn.server, conn.security()?)
        .await
        .with_context(|| format!("cannot connect to {}", conn.server))
}

/// An RFC 3339 instant.
fn parse_instant(s: &str) -> Result<std::time::SystemTime, String> {
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| format!("{e}: expected RFC 3339, e.g. 2026-12-01T03:12:00Z"))
}

fn rfc3339(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn end_name(t: &Tenure) -> &'static str {
    use leasehold::proto::tenure::End;
    match t.end {
        None => "-",
        Some(End::Released) => "released",
        Some(End::Expired) => "expired",
        Some(End::TakenOver) => "taken over",
        Some(End::Deleted) => "deleted",
        Some(End::Restored) => "restored",
        Some(End::Recovered) => "recovered",
        Some(End::ConnectionClosed) => "connection closed",
        Some(End::Transferred) => "transferred",
        Some(End::Chaos) => "ended by chaos",
        Some(End::Unspecified) => "?",
    }
}

fn print_history(tenures: &[Tenure]) {
    let w = tenures
        .iter()
        .map(|t| t.holder.len())
        .max()
        .unwrap_or(0)
        .max(6);
    outln!(
        "{:<8} {:<w$} {:<24} {:>8} {:<24} HOW",
        "TOKEN",
        "HOLDER",
        "GRANTED",
        "TTL",
        "ENDED"
    );
    for t in tenures {
        outln!(
            "{:<8} {:<w$} {:<24} {:>8} {:<24} {}{}{}",
            t.token,
            t.holder,
            rfc3339(t.granted_at),
            format!("{:?}", t.ttl),
            t.ended_at.map_or("-".into(), rfc3339),
            end_name(t),
            t.principal
                .as_ref()
                .map_or(String::new(), |p| format!(" (principal {p})")),
            match t.value.is_empty() {
                true => String::new(),
                false => format!(" value={}", value_text(&t.value)),
            },
        );
    }
    if let Some(note) = disorder_note(tenures) {
        outln!("{note}");
    }
}

/// The tokens (newer, older) whose wall-clock times go backwards: history
/// is in token order, which is the order of the grants; times come from
/// the wall clock of whichever server recorded them, which can jump, and
/// frontends' clocks can differ.
fn disordered(tenures: &[Tenure]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = tenures
        .windows(2)
        .filter(|w| w[0].granted_at < w[1].granted_at)
        .map(|w| (w[0].token, w[1].token))
        .collect();
    out.extend(
        tenures
            .iter()
            .filter(|t| t.ended_at.is_some_and(|e| e < t.granted_at))
            .map(|t| (t.token, t.token)),
    );
    out
}

/// A line that says where the history's times disagree with its token
/// order, if they do.
fn disorder_note(tenures: &[Tenure]) -> Option<String> {
    let d = disordered(tenures);
    if d.is_empty() {
        return None;
    }
    let list: Vec<String> = d
        .iter()
        .map(|(a, b)| match a == b {
            true => format!("token {a} ended before it was granted"),
            false => format!("token {a} was granted before token {b}"),
        })
        .collect();
    Some(format!(
        "note: the times disagree with the order of the tokens ({}): a wall-clock jump, or \
         servers whose clocks differ; the order of the tokens is the true one",
        list.join("; ")
    ))
}

/// Which tenure of `tenures` (newest first) covers `at`: whether one did,
/// and the sentence that says so.
fn history_at(tenures: &[Tenure], at: std::time::SystemTime) -> (bool, String) {
    let when = rfc3339(at);
    // An answer that rests on times that disagree is no answer: say so,
    // with what the times would say.
    if let Some(note) = disorder_note(tenures) {
        let covering: Vec<String> = tenures
            .iter()
            .filter(|t| t.covers(at))
            .map(|t| t.token.to_string())
            .collect();
        return (
            false,
            format!(
                "uncertain: the times would say {} at {when}, but {note}",
                match covering.len() {
                    0 => "no token led".to_owned(),
                    1 => format!("token {} led", covering[0]),
                    _ => format!("tokens {} all led", covering.join(", ")),
                },
                note = note.trim_start_matches("note: "),
            ),
        );
    }
    if let Some(t) = tenures.iter().find(|t| t.covers(at)) {
        return (
            true,
            format!(
                "token {} led at {when}: holder {}, granted {}, {}",
                t.token,
                t.holder,
                rfc3339(t.granted_at),
                match t.ended_at {
                    Some(e) => format!("ended {} ({})", rfc3339(e), end_name(t)),
                    None => "not ended".into(),
                }
            ),
        );
    }
    // The newest tenure granted before `at`, and the oldest after it.
    let before = tenures.iter().find(|t| t.granted_at <= at);
    let after = tenures.iter().rev().find(|t| t.granted_at > at);
    let said = match (before, after) {
        (_, _) if tenures.is_empty() => format!("none: the job has no history (at {when})"),
        (None, Some(oldest)) => format!(
            "none known: {when} is before the oldest tenure kept (token {}, granted {})",
            oldest.token,
            rfc3339(oldest.granted_at)
        ),
        (Some(b), a) => format!(
            "none: no token led at {when}; token {} ended {} ({}){}",
            b.token,
            b.ended_at.map_or("-".into(), rfc3339),
            end_name(b),
            a.map_or(", and none was granted since".into(), |a| format!(
                ", and token {} was granted {}",
                a.token,
                rfc3339(a.granted_at)
            )),
        ),
        (None, None) => format!("none (at {when})"),
    };
    (false, said)
}

/// How a command prints (`--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Lines and tables for people.
    Text,
    /// JSON for programs.
    Json,
}

/// A lease as `--output json` prints it.
fn lease_json(l: &Lease) -> serde_json::Value {
    let mut j = serde_json::json!({
        "job": l.job,
        "holder": l.holder,
        "token": l.token,
        "ttl_ms": l.ttl.map(|d| d.as_millis() as u64),
        "remaining_ms": l.remaining.map(|d| d.as_millis() as u64),
        "principal": l.principal,
        "proof": l.proof,
        "value": value_json(&l.value),
    });
    // A counted grant's slot (the answer to `acquire --slots`).
    if l.slots > 0 {
        j["slot"] = l.slot.into();
        j["slots"] = l.slots.into();
    }
    j
}

/// A published value for programs: its text when it is UTF-8, else its
/// bytes in base64 (`{"base64": ...}`); `null` when there is none.
fn value_json(v: &[u8]) -> serde_json::Value {
    use base64::Engine as _;
    match std::str::from_utf8(v) {
        _ if v.is_empty() => serde_json::Value::Null,
        Ok(s) => s.into(),
        Err(_) => {
            serde_json::json!({"base64": base64::engine::general_purpose::STANDARD.encode(v)})
        }
    }
}

/// A published value for people: its text, escaped, or `0x` and hex for
/// bytes that are not UTF-8.
fn value_text(v: &[u8]) -> String {
    match std::str::from_utf8(v) {
        Ok(s) => s.escape_debug().to_string(),
        Err(_) => v.iter().fold("0x".to_owned(), |mut s, b| {
            use std::fmt::Write as _;
            let _ = write!(s, "{b:02x}");
            s
        }),
    }
}

/// A tenure as `history --output json` prints it.
fn tenure_json(t: &Tenure) -> serde_json::Value {
    serde_json::json!({
        "token": t.token,
        "holder": t.holder,
        "principal": t.principal,
        "granted_at": rfc3339(t.granted_at),
        "ttl_ms": t.ttl.as_millis() as u64,
        "ended_at": t.ended_at.map(rfc3339),
        "how": end_name(t),
        "value": value_json(&t.value),
    })
}

fn describe(l: &Lease) -> String {
    match &l.holder {
        Some(h) => format!(
            "job={} holder={h} token={} remaining={}{}{}",
            l.job,
            l.token,
            l.remaining.map_or("-".into(), |d| format!("{d:.3?}")),
            l.principal
                .as_ref()
                .map_or(String::new(), |p| format!(" principal={p}")),
            match l.value.is_empty() {
                true => String::new(),
                false => format!(" value={}", value_text(&l.value)),
            }
        ),
        None => format!("job={} holder=- token={}", l.job, l.token),
    }
}

/// The leases as a table; with a PRINCIPAL column when the server has a
/// policy, so that look-alike holder strings of two principals are told
/// apart.
fn print_status(leases: &[Lease]) {
    outln!("{}", status_table(leases).trim_end_matches('\n'));
}

fn status_table(leases: &[Lease]) -> String {
    use std::fmt::Write as _;
    let width = |f: &dyn Fn(&Lease) -> usize, title: &str| {
        leases.iter().map(f).max().unwrap_or(0).max(title.len())
    };
    let w = width(&|l| l.job.len(), "JOB");
    let hw = width(&|l| l.holder.as_deref().map_or(1, str::len), "HOLDER");
    let policed = leases.iter().any(|l| l.principal.is_some());
    let pw = width(&|l| l.principal.as_deref().map_or(1, str::len), "PRINCIPAL");
    let mut out = String::new();
    let principal = |p: &str| match policed {
        true => format!("{p:<pw$}  "),
        false => String::new(),
    };
    let valued = leases.iter().any(|l| !l.value.is_empty());
    let _ = writeln!(
        out,
        "{:<w$}  {}{:<hw$}  {:>8}  {}",
        "JOB",
        principal("PRINCIPAL"),
        "HOLDER",
        "TOKEN",
        if valued {
            "REMAINING  VALUE"
        } else {
            "REMAINING"
        }
    );
    for l in leases {
        let remaining = l.remaining.map_or("-".into(), |d| format!("{d:.1?}"));
        let line = match valued {
            true => format!(
                "{remaining:<9}  {}",
                match l.value.is_empty() {
                    true => "-".to_owned(),
                    false => value_text(&l.value),
                }
            ),
            false => remaining,
        };
        let _ = writeln!(
            out,
            "{:<w$}  {}{:<hw$}  {:>8}  {}",
            l.job,
            principal(l.principal.as_deref().unwrap_or("-")),
            l.holder.as_deref().unwrap_or("-"),
            l.token,
            line
        );
    }
    out
}

/// What the usual connection mistakes look like, said plainly: a TLS port
/// asked in plaintext, a plain port asked over TLS, a certificate the CA
/// did not sign or that names another host.
async fn connection_hint(server: &str, e: &anyhow::Error) -> Option<String> {
    let text = format!("{e:#}");
    let tls = server.starts_with("https://");
    let transport = matches!(
        e.downcast_ref::<ClientError>(),
        Some(ClientError::Unavailable(_) | ClientError::Other(_))
    ) || text.contains("h2 protocol error");
    if !tls && transport && speaks_tls(server).await {
        return Some(format!(
            "{server} serves TLS, not plaintext: use https:// and --ca with the CA that signed \
             its certificate"
        ));
    }
    if tls && (text.contains("InvalidContentType") || text.contains("corrupt message")) {
        return Some(format!(
            "{server} does not speak TLS: use http:// (or start the server with --tls-cert)"
        ));
    }
    if tls && text.contains("UnknownIssuer") {
        return Some(format!(
            "{server} showed a certificate that the --ca file did not sign: give the CA that \
             signed the server's certificate"
        ));
    }
    if tls && text.contains("NotValidForName") {
        return Some(format!(
            "{server} showed a certificate for another name: connect by a name (or IP) the \
             certificate carries"
        ));
    }
    None
}

/// Whether the server at a plaintext address answers like a TLS server:
/// sent HTTP/2's preface, a TLS server answers with an alert record (its
/// first byte 0x15), a gRPC server with a SETTINGS frame.
async fn speaks_tls(server: &str) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Some(addr) = server
        .strip_prefix("http://")
        .map(|a| a.trim_end_matches('/'))
    else {
        return false;
    };
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .ok()?;
        let mut first = [0u8; 1];
        s.read_exact(&mut first).await.ok()?;
        Some(first[0] == 0x15)
    };
    tokio::time::timeout(Duration::from_secs(2), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shows_the_principal_when_the_server_has_a_policy() {
        let l = |job: &str, principal: Option<&str>| Lease {
            proof: Default::default(),
            job: job.into(),
            holder: Some("worker".into()),
            token: 3,
            ttl: None,
            remaining: None,
            principal: principal.map(Into::into),
            value: Default::default(),
            slot: 0,
            slots: 0,
        };
        let open = status_table(&[l("a", None)]);
        assert!(open.starts_with("JOB  HOLDER"), "{open}");
        let t = status_table(&[l("a", Some("billing")), l("b", Some("ops"))]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("JOB  PRINCIPAL  HOLDER"), "{t}");
        assert!(lines[1].starts_with("a    billing    worker"), "{t}");
        assert!(lines[2].starts_with("b    ops        worker"), "{t}");
    }
}
