//! `leasehold run JOB -- CMD`: run any command as the job's elected
//! singleton, killed the moment the lease is lost.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use leasehold::client::Elector;

use crate::cli::client::{connect, Conn, AUTH_TOKEN_ENV};

use crate::cli::guard::monotonic_ns;
use crate::EXIT_LEASE_LOST;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

pub async fn run_singleton(
    conn: &Conn,
    job: &str,
    name: &str,
    ttl: Duration,
    grace: Duration,
    cmd: &[String],
) -> anyhow::Result<ExitCode> {
    use tokio::signal::unix::{signal, SignalKind};
    let server = conn.server.as_str();
    let client = connect(conn).await?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut elector = Elector::start(client, job, name, ttl);
    let token = tokio::select! {
        t = elector.elected() => t.context("campaign stopped")?,
        _ = term.recv() => { elector.resign().await; return Ok(ExitCode::from(143)) }
        _ = int.recv() => { elector.resign().await; return Ok(ExitCode::from(130)) }
    };
    eprintln!(
        "leasehold run: leading job={job} token={token} holder={}",
        elector.holder()
    );
    let mut deadlines = elector.deadline();
    // The command runs under the guard, which stops it at the lease's
    // deadline even if this process is paused, and at once if it dies.
    let mut guard = tokio::process::Command::new(self_exe())
        .arg("__guard")
        .arg("--grace")
        .arg(format!("{}ms", grace.as_millis()))
        .arg("--")
        .args(cmd)
        .env("LEASEHOLD_TOKEN", token.to_string())
        .env("LEASEHOLD_JOB", job)
        .env("LEASEHOLD_HOLDER", elector.holder())
        .env("LEASEHOLD_SERVER", server)
        // The command gets its fencing token, never our credentials.
        .env_remove(AUTH_TOKEN_ENV)
        .env_remove("LEASEHOLD_AUTH_TOKEN_FILE")
        .env_remove("LEASEHOLD_CA")
        .env_remove("LEASEHOLD_CERT")
        .env_remove("LEASEHOLD_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the command's guard")?;
    let mut to_guard = guard.stdin.take().context("the guard's stdin")?;
    let mut from_guard = BufReader::new(guard.stdout.take().context("the guard's stdout")?).lines();
    let first = *deadlines.borrow_and_update();
    // A deadline the guard cannot be told is one it acts on: past it, or
    // with no deadline, the command is stopped.
    let line = first.map_or_else(|| "S".to_owned(), |d| format!("D {}", monotonic_of(d)));
    let _ = to_guard.write_all(format!("{line}\n").as_bytes()).await;

    let mut deadline_passed = false;
    let mut guard_out_open = true;
    let mut deadlines_open = true;
    let outcome = loop {
        tokio::select! {
            status = guard.wait() => {
                let status = status?;
                if deadline_passed {
                    eprintln!("leasehold run: lease on {job} (token {token}) reached its deadline; the command was stopped");
                    elector.resign().await;
                    return Ok(ExitCode::from(EXIT_LEASE_LOST));
                }
                elector.resign().await;
                return Ok(exit_code_of(status));
            }
            line = from_guard.next_line(), if guard_out_open => match line {
                Ok(Some(l)) if l == "T" => deadline_passed = true,
                Ok(Some(_)) => {}
                _ => guard_out_open = false,
            },
            changed = deadlines.changed(), if deadlines_open => {
                deadlines_open = changed.is_ok();
                let now = changed.ok().and_then(|()| *deadlines.borrow_and_update());
                if let Some(d) = now {
                    let _ = to_guard.write_all(format!("D {}\n", monotonic_of(d)).as_bytes()).await;
                }
            }
            _ = elector.lost() => {
                eprintln!("leasehold run: lease on {job} lost (token {token}); stopping the command");
                break ExitCode::from(EXIT_LEASE_LOST);
            }
            _ = term.recv() => break ExitCode::from(143),
            _ = int.recv() => break ExitCode::from(130),
        }
    };
    // Stop: the guard sends SIGTERM to the command's group, then SIGKILL
    // after the grace (never past the deadline), and exits when it is
    // gone.
    let _ = to_guard.write_all(b"S\n").await;
    let _ = guard.wait().await;
    elector.resign().await;
    Ok(outcome)
}

/// This binary, for the guard: `/proc/self/exe` names it even if the file
/// was replaced since (an upgrade while it runs).
fn self_exe() -> std::path::PathBuf {
    let proc = std::path::PathBuf::from("/proc/self/exe");
    if proc.exists() {
        proc
    } else {
        std::env::current_exe().unwrap_or(proc)
    }
}

/// `at` as CLOCK_MONOTONIC nanoseconds, the clock the guard reads.
fn monotonic_of(at: tokio::time::Instant) -> u64 {
    let now = tokio::time::Instant::now();
    let mono = monotonic_ns();
    match at.checked_duration_since(now) {
        Some(ahead) => mono.saturating_add(ahead.as_nanos() as u64),
        None => mono.saturating_sub(now.duration_since(at).as_nanos() as u64),
    }
}

pub(crate) fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}
