//! `bridge_health`: a worker that leads a job with the [`Elector`] and makes
//! fenced writes. The canonical example of using leasehold from Rust.
//!
//! ```text
//! bridge_health --server http://127.0.0.1:50051 --job bridge_health --name w1 --ttl 1s
//! ```
//!
//! Run several: at most one leads at a time. Each prints one line per event
//! on standard output:
//!
//! - `holder <id>` once at start,
//! - `elected token=<N>` when it becomes leader,
//! - `lost token=<N>` when it stops being leader,
//!
//! and obeys commands on standard input, one per line:
//!
//! - `write <value>` writes key `status` = value, fenced by the token it last
//!   led with, and prints `write ok version=<V>`, `write fenced current=<T>`
//!   or `write error <message>`. A fenced worker steps down (resigns and
//!   stops campaigning) and prints `stepped-down`.
//! - `quit`, or the end of input, resigns (releasing the lease if held),
//!   prints `bye` and exits 0.
//!
//! # Why every write carries the token
//!
//! The Elector steps down on its own before the server can give the lease
//! away, as long as the process is running. What no process can do is notice
//! its *own* pause: a GC pause, a SIGSTOP, a VM migration. A leader paused
//! past its TTL resumes believing it still leads, with work already in
//! flight, while the server has legitimately elected a successor with a
//! higher token.
//!
//! So the worker never asks "am I leader?" before writing; that answer could
//! be stale by the time the write lands. It sends its token *with* the write
//! instead, and the store accepts the write only if that token is the job's
//! current, live token. The stale leader's write is rejected (FENCED) even
//! when its successor has not written anything yet. A fenced write is the
//! authoritative "you are not the leader": the worker stops at once.
//!
//! To model work that was in flight across a pause, `write` uses the token
//! this worker *last* led with, even if it has since noticed losing the
//! lease: the fence, not the worker, decides.

use std::io::Write as _;
use std::time::Duration;

use clap::Parser;
use tokio::io::{AsyncBufReadExt as _, BufReader};

use leasehold::client::{Client, ClientError, Elector, Role};

/// The key every write goes to.
const KEY: &[u8] = b"status";

#[derive(Parser)]
#[command(about = "A worker that leads a job and makes fenced writes.")]
struct Args {
    /// Server address.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    server: String,
    /// The job to lead.
    #[arg(long, default_value = "bridge_health")]
    job: String,
    /// Name for the holder identity (NAME@<uuid>).
    #[arg(long, default_value = "bridge")]
    name: String,
    /// Lease lifetime, like 1s or 500ms.
    #[arg(long, value_parser = parse_ttl, default_value = "10s")]
    ttl: Duration,
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    let parse = |n: &str| n.parse::<u64>().map_err(|e| format!("{s:?}: {e}"));
    match s.strip_suffix("ms") {
        Some(ms) => parse(ms).map(Duration::from_millis),
        None => match s.strip_suffix('s') {
            Some(secs) => parse(secs).map(Duration::from_secs),
            None => Err(format!("{s:?}: expected a duration like 1s or 500ms")),
        },
    }
}

/// Prints one line and flushes it, so a reader sees each event at once.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let client = Client::connect(&args.server).await?;

    // Campaign in the background; `roles` sees every change of role.
    let elector = Elector::start(client.clone(), &args.job, &args.name, args.ttl);
    let mut roles = elector.watch();
    say(&format!("holder {}", elector.holder()));
    let mut worker = Worker {
        client,
        job: args.job,
        elector: Some(elector),
        leading: None,
        last_token: None,
    };

    let mut campaigning = true;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            changed = roles.changed(), if campaigning => match changed {
                Ok(()) => worker.observe(*roles.borrow_and_update()),
                Err(_) => {
                    // The campaign ended: resigned, or stopped on an error
                    // that asking again cannot fix.
                    campaigning = false;
                    if let Some(e) = worker.elector.as_ref().and_then(Elector::error) {
                        say(&format!("error campaign stopped: {e}"));
                    }
                }
            },
            line = lines.next_line() => {
                // End of input counts as `quit`.
                let line = line.ok().flatten().unwrap_or_else(|| "quit".into());
                match line.split_once(' ').unwrap_or((&line, "")) {
                    ("write", value) => worker.write(value).await,
                    ("quit", _) => {
                        worker.step_down().await;
                        say("bye");
                        return Ok(());
                    }
                    ("", _) => {}
                    (other, _) => say(&format!("error unknown command {other:?}")),
                }
            }
        }
    }
}

struct Worker {
    client: Client,
    job: String,
    /// `None` once resigned.
    elector: Option<Elector>,
    /// The token we lead with now, as far as we know.
    leading: Option<u64>,
    /// The token we last led with, kept after losing the lease.
    last_token: Option<u64>,
}

impl Worker {
    /// Reports a change of role, remembering the token we lead with.
    fn observe(&mut self, role: Role) {
        if role.token() == self.leading {
            return;
        }
        if let Some(old) = self.leading.take() {
            say(&format!("lost token={old}"));
        }
        if let Some(token) = role.token() {
            say(&format!("elected token={token}"));
            self.leading = Some(token);
            self.last_token = Some(token);
        }
    }

    /// Writes `status` = `value`, fenced by the token we last led with.
    async fn write(&mut self, value: &str) {
        let Some(token) = self.last_token else {
            say("write error never-led");
            return;
        };
        // No "am I still leader?" check first: it could be stale by the time
        // the write lands. The token goes with the write, and the server
        // decides.
        let value = value.as_bytes().to_vec();
        match self
            .client
            .checked_write(&self.job, token, KEY, value)
            .await
        {
            Ok(version) => say(&format!("write ok version={version}")),
            Err(ClientError::Fenced { current_token, .. }) => {
                let current = current_token.map_or("?".into(), |t| t.to_string());
                say(&format!("write fenced current={current}"));
                // Someone else leads: stop acting as leader at once.
                self.step_down().await;
                say("stepped-down");
            }
            Err(e) => say(&format!("write error {e}")),
        }
    }

    /// Stops campaigning and releases the lease if we still hold it.
    async fn step_down(&mut self) {
        if let Some(elector) = self.elector.take() {
            elector.resign().await;
        }
        self.observe(Role::Follower);
    }
}
