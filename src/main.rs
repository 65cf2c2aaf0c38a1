//! The `leasehold` command: the server, client subcommands, `run`, the
//! singleton runner, and the data dir's tools. Each lives in its own module
//! under `cli/`; this file only parses and dispatches.

mod cli;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use leasehold::client::ClientError;

use cli::client::{ClientCommand, Conn};
use cli::data::DataCommand;
use cli::health::HealthArgs;
use cli::parse_duration;
use cli::serve::ServeArgs;

/// Exit code when a lease was not acquired or a key not found.
pub(crate) const EXIT_NOT_GRANTED: u8 = 3;
/// Exit code when the server said LEASE_LOST or FENCED.
pub(crate) const EXIT_NOT_LEADER: u8 = 4;
/// Exit code of `run` when the lease was lost and the command killed.
pub(crate) const EXIT_LEASE_LOST: u8 = 75;

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
    Serve(Box<ServeArgs>),
    #[command(flatten)]
    Client(ClientCommand),
    /// Run CMD as the job's elected singleton.
    ///
    /// Waits for leadership, runs CMD with LEASEHOLD_TOKEN, LEASEHOLD_JOB,
    /// LEASEHOLD_HOLDER and LEASEHOLD_SERVER in its environment, renews at
    /// ttl/3, and kills CMD (its whole process group: SIGTERM, then SIGKILL
    /// after --kill-grace) as soon as the lease is lost. Releases the lease
    /// when CMD exits, and exits with CMD's status; with 75 if the lease was
    /// lost. SIGINT and SIGTERM are passed on to CMD. CMD never sees this
    /// command's credentials (LEASEHOLD_AUTH_TOKEN and the TLS files'
    /// variables are removed from its environment).
    ///
    /// CMD runs under a watchdog process that stops its group if this
    /// process dies, and by the lease's deadline (SIGTERM at deadline
    /// minus --kill-grace, SIGKILL at the deadline) if this process is
    /// paused. Whatever is left of CMD's group when it exits is killed.
    ///
    /// The lease is bound to this process's connection: if this process
    /// dies, the server hands the lease to the next waiting runner at once
    /// (after the watchdog has stopped CMD), not after the TTL. On SIGTERM
    /// or SIGINT while leading, CMD is stopped first, then the lease is
    /// handed to the next waiting runner (token + 1, no moment without a
    /// leader), or released when none waits.
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
        /// Time between SIGTERM and SIGKILL when stopping CMD; default
        /// ttl/3, at most ttl/2 (at a paused runner's deadline, CMD gets
        /// SIGTERM this long before it).
        #[arg(long, value_parser = parse_duration)]
        kill_grace: Option<Duration>,
        /// Do not bind the lease to this process's connection: if this
        /// process dies, the next runner waits out the TTL (a proxy that
        /// cuts connections then costs no leadership).
        #[arg(long)]
        no_bind: bool,
        /// On SIGTERM or SIGINT, release the lease instead of handing it
        /// to the next waiting runner.
        #[arg(long)]
        no_handover: bool,
        /// Campaign as a preferred candidate: queued ahead of runners that
        /// are not, and a leader that is not preferred is told that one
        /// waits (electors configured to yield then hand over; a runner
        /// hands over on SIGTERM, never on its own).
        #[arg(long)]
        preferred: bool,
        /// Give up, with exit status 3 and without running CMD, when this
        /// process does not lead within this long (default: wait for as
        /// long as it takes).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "no_wait")]
        wait: Option<Duration>,
        /// Give up, with exit status 3, when the job is held now: run CMD
        /// only if this process can lead at once (cron on several
        /// machines: whichever starts first runs it).
        #[arg(long)]
        no_wait: bool,
        /// Publish this with the lease while this process leads (at most
        /// 1024 bytes), such as the address where CMD serves: `status`,
        /// `watch` and every client's leader() show it, for routing to the
        /// leader. Advisory: the token fences, not the value.
        #[arg(long, value_name = "VALUE")]
        value: Option<String>,
        /// Run CMD in one of N slots of a counted lease (a semaphore, 2 to
        /// 100): up to N runners run it at once, the others wait in line,
        /// first come first served. CMD gets its slot's own job
        /// (`JOB#k`) in LEASEHOLD_JOB and the slot in LEASEHOLD_SLOT: write
        /// with them. The first counted runner fixes N for the job.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=100))]
        slots: Option<u32>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    #[command(flatten)]
    Data(DataCommand),
    Health(HealthArgs),
    /// The watchdog `run` starts its command under (`cli/guard.rs`); not
    /// for direct use.
    #[command(name = "__guard", hide = true)]
    Guard {
        /// Time between SIGTERM and SIGKILL.
        #[arg(long, value_parser = parse_duration)]
        grace: Duration,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Guard { grace, cmd } = &cli.command {
        // One thread, no runtime: see `cli/guard.rs`.
        return cli::guard::guard(*grace, cmd);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                let default = if matches!(cli.command, Command::Serve(_)) {
                    // h2 warns once for every connection it sends away (a
                    // rapid reset, too many refused streams): a flood of
                    // connections would flood the log. The server logs
                    // those itself, one line per address per 10 s
                    // (`server::conn`).
                    "info,h2=error"
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
        Command::Serve(a) => cli::serve::serve(*a).await.map(|()| ExitCode::SUCCESS),
        Command::Client(c) => c.run().await,
        Command::Data(d) => d.run().await,
        Command::Health(h) => cli::health::health(h).await,
        Command::Guard { .. } => unreachable!("the guard runs before the runtime starts"),
        Command::Run {
            conn,
            job,
            name,
            ttl,
            kill_grace,
            no_bind,
            no_handover,
            preferred,
            wait,
            no_wait,
            value,
            slots,
            cmd,
        } => {
            let grace = kill_grace.unwrap_or(ttl / 3);
            // The command gets SIGTERM at the deadline minus the grace;
            // renewals come every ttl/3, so a grace past half the TTL
            // would stop the command before a renewal could move the
            // deadline.
            if grace > ttl / 2 {
                anyhow::bail!(
                    "--kill-grace {grace:?} is more than half of --ttl {ttl:?}: the command gets \
                     SIGTERM at the lease's deadline minus the grace, and a renewal comes every \
                     third of the TTL; use at most {:?}",
                    ttl / 2
                );
            }
            if let Some(v) = value.as_deref().filter(|v| v.len() > 1024) {
                anyhow::bail!("--value is {} bytes, the limit is 1024 bytes", v.len());
            }
            let opts = cli::run::RunOptions {
                ttl,
                grace,
                bind: !no_bind,
                handover: !no_handover,
                preferred,
                wait: if no_wait { Some(Duration::ZERO) } else { wait },
                value: value.unwrap_or_default().into_bytes(),
                slots: slots.unwrap_or(0),
            };
            cli::run::run_singleton(&conn, &job, &name, opts, &cmd).await
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every subcommand's flags and arguments are well formed (unique
    /// ids, valid `requires`): clap checks this only when a subcommand is
    /// parsed, so a clash would otherwise show only when it is run.
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory as _;
        super::Cli::command().debug_assert();
    }
}
