//! The watchdog of `leasehold run`: a small process of its own that starts
//! the command and stops it when the runner cannot.
//!
//! A runner that is SIGKILLed cannot stop its command, and one that is
//! SIGSTOPped cannot act at all; either way the command would run on
//! after the lease passed to another runner, which starts its own copy.
//! So the runner does not start the command itself. It starts this guard
//! (`leasehold __guard`, the same binary), which starts the command in a
//! process group of its own and watches two things:
//!
//! - **Its file descriptor 3 ([`CHANNEL_FD`]), a pipe that only the
//!   runner holds** (stdin, stdout and stderr are the runner's, and the
//!   command's, as before). The runner writes
//!   the lease's deadline there (`D <ns>`: CLOCK_MONOTONIC nanoseconds,
//!   the clock every process on the machine shares), again after every
//!   renewal, and `S` to stop the command. End of file means the runner
//!   is gone: the command's group is killed at once (SIGKILL, no grace),
//!   since the runner's lease, bound to its connection, is handed to the
//!   next runner as soon as the server sees that connection close. The
//!   runner's pipe and its socket close together as it dies; the guard's
//!   SIGKILL takes microseconds, the hand-over a network round trip, a
//!   sync and the next runner's start of its own guard and command.
//! - **The deadline itself.** The guard sends SIGTERM to the command's
//!   group at `deadline - grace` and SIGKILL at the deadline, whatever the
//!   runner does. The deadline is the elector's conservative one (the
//!   last renewal's send plus the TTL), which the server's comes after, so
//!   **nothing of the command runs once the lease can be granted
//!   elsewhere**, even when the runner is paused.
//!
//! A stop is SIGTERM to the group, then SIGKILL after the grace (never
//! later than the deadline); once the command's first process has exited,
//! whatever is left of its group is killed. The guard exits with the
//! command's status (75 if it never started it: a deadline already past,
//! or a stop before the command started); the runner knows the deadline
//! it sent, so it knows when that was what stopped the command.
//! It ignores SIGINT, SIGTERM and SIGHUP (a terminal's Ctrl-C reaches the
//! runner, which says `S`), and the command gets SIGKILL if the guard
//! itself dies (`PR_SET_PDEATHSIG`; the guard is one thread, so that
//! signal is sent exactly when it exits).

use std::os::unix::process::CommandExt as _;
use std::process::ExitCode;
use std::time::Duration;

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_MONOTONIC
    // always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The runner's end of the channel in the guard: the read end of a pipe.
pub const CHANNEL_FD: i32 = 3;

/// What the runner said last, read from the channel.
#[derive(Default)]
struct Input {
    buf: Vec<u8>,
    deadline: Option<u64>,
    stop: bool,
    eof: bool,
    bad: Option<String>,
}

impl Input {
    /// Reads what the channel has (it is ready), and applies every whole
    /// line.
    fn read(&mut self) {
        let mut chunk = [0u8; 512];
        // SAFETY: read(2) into a buffer of the length given.
        let n = unsafe { libc::read(CHANNEL_FD, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n <= 0 {
            if n == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                self.eof = true;
            }
            return;
        }
        self.buf.extend_from_slice(&chunk[..n as usize]);
        while let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=i).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim();
            match line.split_once(' ') {
                _ if line == "S" => self.stop = true,
                Some(("D", ns)) => match ns.parse() {
                    Ok(ns) => self.deadline = Some(ns),
                    Err(_) => self.bad = Some(line.to_owned()),
                },
                _ => self.bad = Some(line.to_owned()),
            }
        }
    }
}

/// Waits up to `timeout` for the channel (if `channel`) or the command
/// (`pidfd`, if the kernel gives one) to be ready; returns whether the
/// channel is.
fn wait(channel: bool, pidfd: Option<i32>, timeout: Duration) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: if channel { CHANNEL_FD } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: pidfd.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as i32;
    // SAFETY: poll(2) on an array of two pollfds we own; a negative fd is
    // ignored.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    n > 0 && fds[0].revents != 0
}

fn signal_group(pgid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals the process group we
    // created for the command.
    unsafe { libc::kill(-pgid, sig) };
}

/// Runs the guard (see the module docs); `cmd` is the command and its
/// arguments, started with the guard's own environment.
pub fn guard(grace: Duration, cmd: &[String]) -> ExitCode {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: ignoring a signal has no preconditions.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    // The channel must be open, and the command must not inherit it (it
    // would hold the pipe open, or read the runner's lines).
    // SAFETY: fcntl(2) on a descriptor number; it fails if none is open.
    if unsafe { libc::fcntl(CHANNEL_FD, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        eprintln!(
            "leasehold: `__guard` runs under `leasehold run`, which hands it the lease's deadline \
             on file descriptor {CHANNEL_FD}; that descriptor is not open"
        );
        return ExitCode::from(2);
    }
    let grace_ns = grace.as_nanos().min(u64::MAX as u128) as u64;
    // The first deadline comes before the command starts: it never runs
    // without one.
    let mut input = Input::default();
    while input.deadline.is_none() && !input.eof && !input.stop {
        if wait(true, None, Duration::from_secs(60)) {
            input.read();
            input.stop |= input.bad.is_some();
        }
    }
    let first = input.deadline.unwrap_or(0);
    if input.stop || input.eof || monotonic_ns() >= first.saturating_sub(grace_ns) {
        return ExitCode::from(crate::EXIT_LEASE_LOST);
    }
    let mut command = std::process::Command::new(&cmd[0]);
    command.args(&cmd[1..]).process_group(0);
    // The signals the guard ignores are set back for the command.
    // SAFETY: between fork and exec, only async-signal-safe calls: prctl
    // and signal.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leasehold run: cannot start {:?}: {e}", cmd[0]);
            return ExitCode::from(127);
        }
    };
    let pgid = child.id() as i32;
    // SAFETY: pidfd_open(2) on our own child; -1 if the kernel has none.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pgid, 0) } as i32;
    let pidfd = (pidfd >= 0).then_some(pidfd);

    // When SIGTERM went to the group, and the latest SIGKILL may come.
    let mut termed = false;
    let mut kill_at = u64::MAX;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        let now = monotonic_ns();
        let deadline = input.deadline.unwrap_or(0);
        if input.stop {
            kill_at = kill_at.min(now.saturating_add(grace_ns));
        }
        // The runner is gone: its lease, bound to its connection, may be
        // granted elsewhere within milliseconds, so no grace.
        if input.eof {
            kill_at = kill_at.min(now);
        }
        if !termed && (input.stop || input.eof || now >= deadline.saturating_sub(grace_ns)) {
            signal_group(pgid, libc::SIGTERM);
            termed = true;
        }
        if termed {
            kill_at = kill_at.min(deadline);
        }
        if now >= kill_at {
            signal_group(pgid, libc::SIGKILL);
        }
        // Sleep until the next thing to do, the channel, or the command.
        let next = if termed {
            kill_at
        } else {
            deadline.saturating_sub(grace_ns)
        };
        let mut timeout = Duration::from_nanos(next.saturating_sub(now));
        if pidfd.is_none() || now >= kill_at {
            timeout = timeout.min(Duration::from_millis(10));
        }
        if wait(!input.eof, pidfd, timeout) {
            input.read();
            if let Some(bad) = input.bad.take() {
                eprintln!(
                    "leasehold run: the guard got {bad:?} from the runner; stopping the command"
                );
                input.stop = true;
            }
        }
    };
    // Nothing of the command outlives it: the rest of its group goes.
    signal_group(pgid, libc::SIGKILL);
    if let Some(fd) = pidfd {
        // SAFETY: closing the pidfd we opened.
        unsafe { libc::close(fd) };
    }
    super::run::exit_code_of(status)
}
