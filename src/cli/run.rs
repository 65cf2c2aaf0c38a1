//! `leasehold run JOB -- CMD`: run any command as the job's elected
//! singleton, killed the moment the lease is lost.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use leasehold::client::Elector;

use crate::cli::client::{connect, Conn, AUTH_TOKEN_ENV};

use crate::EXIT_LEASE_LOST;

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
    let mut child = tokio::process::Command::new(&cmd[0])
        .args(&cmd[1..])
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
