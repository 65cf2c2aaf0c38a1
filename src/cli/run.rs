//! `leasehold run JOB -- CMD`: run any command as the job's elected
//! singleton, killed the moment the lease is lost.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use leasehold::client::{ClientError, Elector, ElectorOptions};

use crate::cli::client::{connect, Conn, AUTH_TOKEN_ENV};

use crate::cli::guard::{monotonic_ns, CHANNEL_FD};
use crate::EXIT_LEASE_LOST;
use std::io::Write as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

/// How `leasehold run` runs.
pub struct RunOptions {
    /// The lease's TTL.
    pub ttl: Duration,
    /// From SIGTERM to SIGKILL when the command is stopped.
    pub grace: Duration,
    /// Bind the lease to our connection (`bind_to_stream`).
    pub bind: bool,
    /// On SIGTERM or SIGINT, hand the lease to the next waiting runner.
    pub handover: bool,
    /// Campaign as a preferred candidate.
    pub preferred: bool,
    /// Give up (exit 3) when not leading within this long; zero: when the
    /// job is held now.
    pub wait: Option<Duration>,
    /// Published with the lease (`Lease.value`).
    pub value: Vec<u8>,
    /// A counted lease with this many slots (2 or more), else 0.
    pub slots: u32,
}

/// With `--no-wait`, how long a job found free is given to be granted to
/// us (another runner may take it in the same instant).
const NO_WAIT_GRANT: Duration = Duration::from_secs(2);

pub async fn run_singleton(
    conn: &Conn,
    job: &str,
    name: &str,
    opts: RunOptions,
    cmd: &[String],
) -> anyhow::Result<ExitCode> {
    use tokio::signal::unix::{signal, SignalKind};
    let RunOptions {
        ttl,
        grace,
        bind,
        handover,
        preferred,
        wait,
        value,
        slots,
    } = opts;
    let server = conn.server.as_str();
    let client = connect(conn).await?;
    // `--no-wait` gives up at once when someone holds the job. Best
    // effort: a principal with `lease` but not `read` may not look, and
    // then the short grant window below decides.
    if wait == Some(Duration::ZERO) && slots < 2 {
        if let Ok(now) = client.get_lease(job).await {
            if let Some(holder) = now.holder.as_deref() {
                eprintln!(
                    "leasehold run: job={job} is held by {holder} (token {}); not waiting (--no-wait)",
                    now.token
                );
                return Ok(ExitCode::from(crate::EXIT_NOT_GRANTED));
            }
        }
    }
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // Never yields on its own: its command must stop before a hand-over,
    // which a SIGTERM does.
    let options = ElectorOptions {
        bind_to_stream: bind,
        preferred,
        yield_to_preferred: false,
        value,
        slots,
    };
    let mut elector = Elector::start_with(client.clone(), job, name, ttl, options);
    // While it waits, say who holds the job: at start, and at each change.
    // A counted job's own lease is its line's turn, not a holder's.
    let watcher = match slots {
        0 | 1 => tokio::spawn(say_who_holds(client.clone(), job.to_owned())),
        n => {
            eprintln!("leasehold run: waiting for one of the {n} slots of job={job}");
            tokio::spawn(async {})
        }
    };
    let give_up = match wait {
        Some(Duration::ZERO) => Some(NO_WAIT_GRANT),
        other => other,
    };
    let deadline = async {
        match give_up {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let token = tokio::select! {
        t = elector.elected() => { watcher.abort(); t.context("campaign stopped")? }
        _ = deadline => {
            watcher.abort();
            let now = client.get_lease(job).await.ok();
            let held = now.as_ref().and_then(|l| l.holder.as_deref().map(|h| (h, l.token)));
            match held {
                Some((h, t)) => eprintln!("leasehold run: job={job} is still held by {h} (token {t}); gave up after {:?}", give_up.unwrap_or_default()),
                None => eprintln!("leasehold run: job={job}: not granted within {:?}; gave up", give_up.unwrap_or_default()),
            }
            elector.resign().await;
            return Ok(ExitCode::from(crate::EXIT_NOT_GRANTED));
        }
        _ = term.recv() => { watcher.abort(); elector.resign().await; return Ok(ExitCode::from(143)) }
        _ = int.recv() => { watcher.abort(); elector.resign().await; return Ok(ExitCode::from(130)) }
    };
    // A counted lease is its slot's: the command writes with that job.
    let lease_job = elector.lease_job().unwrap_or_else(|| job.to_owned());
    match elector.slot() {
        Some(slot) => eprintln!(
            "leasehold run: leading job={job} slot={slot} ({lease_job}) token={token} holder={}",
            elector.holder()
        ),
        None => eprintln!(
            "leasehold run: leading job={job} token={token} holder={}",
            elector.holder()
        ),
    }
    let mut deadlines = elector.deadline();
    // The command runs under the guard, which stops it at the lease's
    // deadline even if this process is paused, and at once if it dies.
    // The guard reads the deadlines from a pipe on its descriptor
    // CHANNEL_FD; stdin, stdout and stderr stay the command's.
    let (channel, mut to_guard) = channel().context("cannot make the guard's pipe")?;
    let mut command = tokio::process::Command::new(self_exe());
    command
        .arg("__guard")
        .arg("--grace")
        .arg(format!("{}ms", grace.as_millis()))
        .arg("--")
        .args(cmd)
        .env("LEASEHOLD_TOKEN", token.to_string())
        .env("LEASEHOLD_JOB", &lease_job)
        .env("LEASEHOLD_HOLDER", elector.holder())
        .env("LEASEHOLD_SERVER", server)
        // The command gets its fencing token, never our credentials; the
        // CA is no secret, and with it a `leasehold write --token
        // $LEASEHOLD_TOKEN` in the command reaches a TLS server.
        .env_remove(AUTH_TOKEN_ENV)
        .env_remove("LEASEHOLD_AUTH_TOKEN_FILE")
        .env_remove("LEASEHOLD_CERT")
        .env_remove("LEASEHOLD_KEY");
    if let Some(slot) = elector.slot() {
        command.env("LEASEHOLD_SLOT", slot.to_string());
    }
    if let Some(ca) = &conn.ca {
        command.env("LEASEHOLD_CA", ca);
    }
    let raw = channel.as_raw_fd();
    // SAFETY: between fork and exec, only dup2 and fcntl, which are
    // async-signal-safe. dup2 onto the same number would keep the
    // close-on-exec flag, so that case clears it instead.
    unsafe {
        command.pre_exec(move || {
            let ok = if raw == CHANNEL_FD {
                libc::fcntl(raw, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(raw, CHANNEL_FD) == CHANNEL_FD
            };
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut guard = command
        .spawn()
        .context("cannot start the command's guard")?;
    drop(channel);
    let mut told = 0u64;
    let mut tell = |line: &str| {
        // Non-blocking: a guard that does not read (stopped) loses a line
        // rather than stopping us; the next deadline follows.
        let _ = to_guard.write_all(format!("{line}\n").as_bytes());
    };
    // A deadline the guard cannot be told is one it acts on: with none,
    // the command is stopped before it starts.
    match *deadlines.borrow_and_update() {
        Some(d) => {
            told = monotonic_of(d);
            tell(&format!("D {told}"));
        }
        None => tell("S"),
    }

    let mut deadlines_open = true;
    let outcome = loop {
        tokio::select! {
            status = guard.wait() => {
                let status = status?;
                // The guard stops the command at `deadline - grace`: if
                // that has come, the deadline is what ended it.
                let grace_ns = grace.as_nanos() as u64;
                if monotonic_ns() >= told.saturating_sub(grace_ns) {
                    eprintln!("leasehold run: lease on {job} (token {token}) reached its deadline; the command was stopped");
                    elector.resign().await;
                    return Ok(ExitCode::from(EXIT_LEASE_LOST));
                }
                elector.resign().await;
                return Ok(exit_code_of(status));
            }
            changed = deadlines.changed(), if deadlines_open => {
                deadlines_open = changed.is_ok();
                let now = changed.ok().and_then(|()| *deadlines.borrow_and_update());
                if let Some(d) = now {
                    told = monotonic_of(d);
                    tell(&format!("D {told}"));
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
    tell("S");
    let stopped = guard.wait().await;
    // Stopped by a signal: hand over to the next runner, once our command
    // is gone (never before: two would run).
    let signalled = outcome == ExitCode::from(143) || outcome == ExitCode::from(130);
    // The command was told to stop by our SIGTERM or SIGINT: its own
    // status says how that went (0 when it finished cleanly, 143 when the
    // signal killed it). A lost lease keeps 75, whatever the command did.
    let outcome = match stopped {
        Ok(status) if signalled => exit_code_of(status),
        _ => outcome,
    };
    if handover && signalled && elector.role().token().is_some() {
        match elector.transfer(None).await {
            Ok(next) => eprintln!(
                "leasehold run: handed job={job} to {} (token {})",
                next.holder.as_deref().unwrap_or("?"),
                next.token
            ),
            Err(ClientError::NoSuccessor(_)) => {}
            Err(e) => eprintln!("leasehold run: hand-over failed ({e}); releasing"),
        }
    }
    elector.resign().await;
    Ok(outcome)
}

/// A pipe for the guard: the read end (close-on-exec, moved to
/// `CHANNEL_FD` in the guard) and the write end, non-blocking.
fn channel() -> std::io::Result<(OwnedFd, std::fs::File)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 just opened both, and nothing else owns them.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on the descriptor we own.
    if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((read, std::fs::File::from(write)))
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

/// Prints, to standard error, who holds `job` while `run` waits for it: the
/// state when the wait begins, then every change (from a `WatchLease`).
async fn say_who_holds(client: leasehold::client::Client, job: String) {
    let Ok(mut changes) = client.observe(&job).await else {
        return;
    };
    while let Some(Ok(c)) = changes.next().await {
        match c.lease.holder.as_deref() {
            Some(h) => eprintln!(
                "leasehold run: waiting for job={job}: held by {h} (token {}{})",
                c.lease.token,
                match std::str::from_utf8(&c.lease.value) {
                    Ok("") | Err(_) => String::new(),
                    Ok(v) => format!(", value {}", v.escape_debug()),
                }
            ),
            None => eprintln!("leasehold run: waiting for job={job}: free"),
        }
    }
}
