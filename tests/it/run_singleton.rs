//! `leasehold run JOB -- CMD`, the singleton runner, through real processes:
//! the server and the runner are child processes, CMD is a shell.
//!
//! - When the runner can no longer renew (here: the server is frozen with
//!   SIGSTOP), it must kill CMD no later than one TTL after its last
//!   successful renewal, without hearing from the server, and exit 75.
//! - CMD's exit status becomes the runner's, and the lease is released.
//! - CMD does not start until the runner holds the lease, and then runs with
//!   the new token in `LEASEHOLD_TOKEN`.
//!
//! Every wait is bounded, so a failure cannot hang CI.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use leasehold::client::{process_holder, Client};

/// Bound for anything that should take well under a second: longer
/// than any stall of a loaded machine.
const STEP: Duration = common::PATIENCE;

/// A `leasehold run` process; on drop, it and the command's process group
/// are killed, so a failing test leaves nothing behind.
struct Runner {
    child: Child,
    /// The command's pid, which is also its process group.
    cmd_pid: Option<i32>,
}

impl Runner {
    fn start(url: &str, ttl: &str, job: &str, script: &str) -> Runner {
        Self::start_with_stderr(url, ttl, job, script, Stdio::inherit())
    }

    fn start_with_stderr(url: &str, ttl: &str, job: &str, script: &str, stderr: Stdio) -> Runner {
        let child = Command::new(common::bin())
            .args(["run", "--server", url, "--ttl", ttl, "--name", "r", job])
            .args(["--", "sh", "-c", script])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(stderr)
            .spawn()
            .expect("start leasehold run");
        Runner {
            child,
            cmd_pid: None,
        }
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "leasehold run did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Some(pgid) = self.cmd_pid {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The trimmed contents of `path`, once it exists and is not empty.
fn read_trimmed(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// Whether `pid` is gone: no such process, or a zombie not yet reaped.
fn is_dead(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // /proc/PID/stat is "pid (comm) STATE ..."; comm may hold spaces.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_kills_child_within_one_ttl_of_losing_the_lease() {
    // Long enough that a stall cannot cost the runner a renewal before the
    // server is frozen; the slack, for the test's own view of the kill,
    // is longer than a stall and far below a second TTL.
    const TTL: Duration = Duration::from_secs(10);
    const SLACK: Duration = Duration::from_secs(5);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (pidfile, tokfile) = (dir.path().join("pid"), dir.path().join("token"));
    let server = common::ServerProcess::start(&data, &[]);
    let script = format!(
        "echo $$ > '{}'; echo $LEASEHOLD_TOKEN > '{}'; exec sleep 600",
        pidfile.display(),
        tokfile.display()
    );
    let mut runner = Runner::start(&server.url(), "10s", "jobR", &script);

    // The command is running as leader with token 1.
    let deadline = Instant::now() + STEP;
    let pid = loop {
        if let (Some(pid), Some(tok)) = (read_trimmed(&pidfile), read_trimmed(&tokfile)) {
            assert_eq!(tok, "1", "LEASEHOLD_TOKEN of the first grant");
            break pid.parse::<i32>().unwrap();
        }
        assert!(
            runner.running(),
            "leasehold run exited before starting the command"
        );
        assert!(
            Instant::now() < deadline,
            "the command did not start within {STEP:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    runner.cmd_pid = Some(pid);
    assert!(!is_dead(pid), "the command should be running");

    // Freeze the server: from now on no renewal can succeed, and the runner
    // hears nothing. It must act on its own clock.
    server.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    let deadline = stopped + TTL + STEP;
    while !is_dead(pid) {
        assert!(
            Instant::now() < deadline,
            "the command was still alive {:?} after the server stopped",
            TTL + STEP
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = stopped.elapsed();
    println!("command killed {took:?} after SIGSTOP of the server (ttl {TTL:?})");
    assert!(
        took <= TTL + SLACK,
        "the command outlived the lease: killed {took:?} after the server froze; ttl {TTL:?}, slack {SLACK:?}"
    );
    // The runner exits 75 on its own, without hearing from the server.
    let status = runner.wait_exit(STEP);
    assert_eq!(
        status.code(),
        Some(75),
        "leasehold run exits 75 when it loses the lease: {status}"
    );

    // Thawed, the server lets the lease run out: the runner, which stepped
    // down early by its own conservative clock, neither renews nor comes
    // back, and no one else is granted the job. (The server may still see
    // the lease live for a moment: it counts the TTL from when it received
    // the last renewal, and may yet handle one sent before it froze.)
    server.signal(libc::SIGCONT);
    let client = Client::connect(&server.url()).await.unwrap();
    let deadline = Instant::now() + TTL + STEP;
    loop {
        let lease = client.get_lease("jobR").await.unwrap();
        assert_eq!(lease.token, 1, "never granted again: {lease:?}");
        if lease.holder.is_none() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lease never expired: {lease:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_passes_exit_code_and_releases() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(dir.path(), &[]);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut runner = Runner::start(&server.url(), "30s", "jobX", "exit 7");
    let status = runner.wait_exit(STEP);
    assert_eq!(status.code(), Some(7), "the command's exit code: {status}");
    let lease = client.get_lease("jobX").await.unwrap();
    assert_eq!(lease.holder, None, "released on exit: {lease:?}");
    assert_eq!(lease.token, 1, "granted once: {lease:?}");
}

/// A SIGTERM to the runner is passed to its command, and the runner exits
/// with the command's status: 0 from a command that traps the signal and
/// finishes cleanly (the quickstart's promise), 143 from one the signal
/// kills. Either way the lease is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_with_the_commands_status_after_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"), &[]);
    let client = Client::connect(&server.url()).await.unwrap();
    for (job, trap, want) in [("jobClean", true, 0), ("jobKilled", false, 143)] {
        let pidfile = dir.path().join(job);
        // The shell waits on a background sleep so that its trap runs as
        // soon as the signal comes.
        let handler = if trap { "trap 'exit 0' TERM; " } else { "" };
        let script = format!(
            "{handler}echo $$ > '{}'; sleep 600 & wait",
            pidfile.display()
        );
        let mut runner = Runner::start(&server.url(), "30s", job, &script);
        let pid = wait_pid(&mut runner, &pidfile);
        runner.cmd_pid = Some(pid);
        common::signal(runner.child.id(), libc::SIGTERM);
        let status = runner.wait_exit(STEP);
        assert_eq!(status.code(), Some(want), "{job}: {status}");
        let lease = client.get_lease(job).await.unwrap();
        assert_eq!(lease.holder, None, "{job}: released: {lease:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_for_leadership() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tokfile = dir.path().join("token");
    let server = common::ServerProcess::start(&data, &[]);
    let client = Client::connect(&server.url()).await.unwrap();

    // Someone else leads jobY.
    let me = process_holder("test");
    let held = client
        .acquire("jobY", &me, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert!(held.acquired);
    assert_eq!(held.lease.token, 1);

    let script = format!("echo $LEASEHOLD_TOKEN > '{}'", tokfile.display());
    let mut runner = Runner::start(&server.url(), "30s", "jobY", &script);
    // While we hold the lease, the command must not start: not once the
    // runner has asked for the lease and waits in line for it.
    server.wait_for_waiters(1).await;
    assert!(
        !tokfile.exists(),
        "the command ran while another holder led"
    );
    assert!(
        runner.running(),
        "leasehold run should be waiting for the lease"
    );

    // Hand over: the runner is granted token 2 and runs the command.
    client.release("jobY", &me, 1).await.unwrap();
    let status = runner.wait_exit(STEP);
    assert!(status.success(), "leasehold run: {status}");
    assert_eq!(
        read_trimmed(&tokfile).as_deref(),
        Some("2"),
        "LEASEHOLD_TOKEN after handover"
    );
    let lease = client.get_lease("jobY").await.unwrap();
    assert_eq!(
        (lease.holder, lease.token),
        (None, 2),
        "released after the command"
    );
}

/// Regression test for a bug in the Elector (`src/client/elector.rs`,
/// `Campaign::run`): it counts its conservative deadline from when the
/// *waiting* Acquire was sent, not from the grant, so a runner that waited
/// longer than its TTL for the lease steps down at once after being
/// elected; `leasehold run` then kills the command it just started and
/// exits 75, although the server granted it a full TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_a_lease_it_waited_longer_than_its_ttl_for() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (tokfile, errfile) = (dir.path().join("token"), dir.path().join("stderr"));
    let server = common::ServerProcess::start(&data, &[]);
    let client = Client::connect(&server.url()).await.unwrap();
    let me = process_holder("test");
    let held = client
        .acquire("jobW", &me, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert!(held.acquired);

    // A 10 s runner campaigns (with Acquire wait = 30 s) while we hold the
    // lease for longer than its TTL after its Acquire began to wait.
    // (Ten seconds, so that no stall of a loaded machine costs the runner
    // a renewal once it leads.)
    const TTL: Duration = Duration::from_secs(10);
    let script = format!("echo $LEASEHOLD_TOKEN > '{}'; sleep 12", tokfile.display());
    let stderr = std::fs::File::create(&errfile).unwrap();
    let mut runner =
        Runner::start_with_stderr(&server.url(), "10s", "jobW", &script, stderr.into());
    server.wait_for_waiters(1).await;
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    assert!(
        runner.running() && !tokfile.exists(),
        "the runner must still be waiting"
    );
    client.release("jobW", &me, 1).await.unwrap();

    // It leads with token 2, renewing, for the whole command (12 s > TTL).
    let status = runner.wait_exit(STEP);
    let log = std::fs::read_to_string(&errfile).unwrap();
    assert!(status.success(), "leasehold run: {status}; stderr:\n{log}");
    assert_eq!(read_trimmed(&tokfile).as_deref(), Some("2"));
    assert!(
        !log.contains("stepped down") && !log.contains("lost"),
        "the elector stepped down from a lease it had just been granted; stderr:\n{log}"
    );
}

/// Regression test for a bug in the Elector (`src/client/elector.rs`,
/// `Campaign::resign`): `resign` awaits the Release with no timeout, so when
/// the server cannot answer, `leasehold run` does not exit after SIGTERM: it
/// stops the command, then hangs until the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_on_sigterm_when_the_server_cannot_answer() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let pidfile = dir.path().join("pid");
    let server = common::ServerProcess::start(&data, &[]);
    let script = format!("echo $$ > '{}'; exec sleep 600", pidfile.display());
    // Ten seconds, so that no stall costs the runner its lease before the
    // SIGTERM (it would exit 75, not 143).
    let mut runner = Runner::start(&server.url(), "10s", "jobT", &script);
    let deadline = Instant::now() + STEP;
    let pid = loop {
        if let Some(pid) = read_trimmed(&pidfile) {
            break pid.parse::<i32>().unwrap();
        }
        assert!(
            runner.running(),
            "leasehold run exited before starting the command"
        );
        assert!(
            Instant::now() < deadline,
            "the command did not start within {STEP:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    runner.cmd_pid = Some(pid);

    server.signal(libc::SIGSTOP);
    common::signal(runner.child.id(), libc::SIGTERM);
    // Stopping the command takes at most the kill grace (ttl / 3), and a
    // Release is pointless once the TTL has passed: it must exit within
    // about a TTL, while the server is still frozen; allow TTL + patience.
    let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runner.wait_exit(Duration::from_secs(10) + STEP)
    }));
    server.signal(libc::SIGCONT);
    let status = status.unwrap_or_else(|_| panic!("leasehold run hung after SIGTERM"));
    assert_eq!(status.code(), Some(143), "{status}");
    assert!(is_dead(pid), "the command outlived the runner");
}

/// Two `leasehold acquire --holder worker` processes for one job are one
/// holder to the server: the second renews the first's grant. That is the
/// user's explicit choice, but the CLI says so; a fresh holder (the
/// default) or a new grant gets no warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_warns_when_it_renews_a_grant_it_did_not_know_it_held() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(dir.path(), &[]);
    let url = server.url();
    let acquire = |extra: &[&str]| {
        let out = Command::new(common::bin())
            .args(["acquire", "--server", &url, "--ttl", "30s", "cli/twice"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (out, err) = acquire(&["--holder", "worker"]);
    assert!(
        out.starts_with("acquired job=cli/twice holder=worker token=1"),
        "{out}"
    );
    assert!(!err.contains("warning"), "a new grant warned: {err}");
    let (out, err) = acquire(&["--holder", "worker"]);
    assert!(
        out.starts_with("acquired job=cli/twice holder=worker token=1"),
        "{out}"
    );
    assert!(
        err.contains("warning: job cli/twice was already held by holder worker with token 1"),
        "no warning on re-acquiring: {err}"
    );
    // Released, then taken again by hand: a new grant, no warning.
    let c = Client::connect(&url).await.unwrap();
    c.release("cli/twice", "worker", 1).await.unwrap();
    let (out, err) = acquire(&["--holder", "worker"]);
    assert!(
        out.starts_with("acquired job=cli/twice holder=worker token=2"),
        "{out}"
    );
    assert!(!err.contains("warning"), "a new grant warned: {err}");
}

/// Waits for `pidfile`, while the runner runs; returns the pid in it.
fn wait_pid(runner: &mut Runner, pidfile: &Path) -> i32 {
    let deadline = Instant::now() + STEP;
    loop {
        if let Some(pid) = read_trimmed(pidfile) {
            return pid.parse().unwrap();
        }
        assert!(
            runner.running(),
            "leasehold run exited before its command started"
        );
        assert!(
            Instant::now() < deadline,
            "the command did not start within {STEP:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A runner SIGKILLed takes its command with it, and everything the
/// command started: its guard stops the command's process group as soon as
/// the runner's pipe closes, long before the lease (10 s) could pass to
/// another runner. (Before the guard, the command was re-parented to PID
/// 1 and ran on beside the next leader's copy.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_runner_takes_its_command_and_its_children_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"), &[]);
    let (pidfile, childfile) = (dir.path().join("pid"), dir.path().join("child"));
    // The command starts a child of its own, then waits.
    let script = format!(
        "sleep 600 & echo $! > '{}'; echo $$ > '{}'; wait",
        childfile.display(),
        pidfile.display()
    );
    let mut runner = Runner::start(&server.url(), "10s", "jobK", &script);
    let pid = wait_pid(&mut runner, &pidfile);
    runner.cmd_pid = Some(pid);
    let child: i32 = read_trimmed(&childfile).unwrap().parse().unwrap();
    assert!(!is_dead(pid) && !is_dead(child));

    common::signal(runner.child.id(), libc::SIGKILL);
    let killed = Instant::now();
    while !(is_dead(pid) && is_dead(child)) {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the command (alive: {}) or its child (alive: {}) outlived its SIGKILLed runner by 5 s, \
             half the lease's TTL",
            !is_dead(pid),
            !is_dead(child)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "command and child gone {:?} after the runner's SIGKILL",
        killed.elapsed()
    );
}

/// A runner SIGSTOPped cannot act, and its command is stopped anyway by
/// the lease's deadline: its guard sends SIGTERM at `deadline - grace` and
/// SIGKILL at the deadline. A second runner waiting for the job is granted
/// it only after that, so at no moment do the two commands run together.
/// The first runner, continued, exits 75.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_runners_command_is_gone_before_the_next_one_starts() {
    const TTL: Duration = Duration::from_secs(3);
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"), &[]);
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    // The first command ignores SIGTERM: only the SIGKILL at the deadline
    // stops it.
    let script = |f: &Path| {
        format!(
            "trap '' TERM; echo $$ > '{}'; while :; do sleep 0.05; done",
            f.display()
        )
    };
    let mut a = Runner::start(&server.url(), "3s", "jobS", &script(&first));
    let pid_a = wait_pid(&mut a, &first);
    a.cmd_pid = Some(pid_a);
    let mut b = Runner::start(&server.url(), "3s", "jobS", &script(&second));
    server.wait_for_waiters(1).await;

    common::signal(a.child.id(), libc::SIGSTOP);
    let stopped = Instant::now();
    let pid_b = loop {
        let a_dead = is_dead(pid_a);
        if let Some(pid) = read_trimmed(&second) {
            assert!(
                a_dead,
                "the second command started while the stopped runner's command still ran"
            );
            break pid.parse::<i32>().unwrap();
        }
        assert!(
            a_dead || stopped.elapsed() < TTL + Duration::from_secs(1),
            "the stopped runner's command outlived its lease's deadline by a second"
        );
        assert!(
            stopped.elapsed() < TTL + STEP,
            "the second runner was never granted the job"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    b.cmd_pid = Some(pid_b);
    println!(
        "second command started {:?} after the first runner's SIGSTOP",
        stopped.elapsed()
    );

    common::signal(a.child.id(), libc::SIGCONT);
    let status = a.wait_exit(STEP);
    assert_eq!(
        status.code(),
        Some(75),
        "the stopped runner lost its lease: {status}"
    );
    assert!(b.running(), "the second runner leads on");
}

/// The command reads the runner's stdin and writes to its stdout, as if
/// it were run directly: the watchdog between them talks to the runner on
/// a descriptor of its own, which the command does not get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_has_the_runners_stdin_and_stdout_and_not_the_watchdogs_pipe() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"), &[]);
    let mut child = Command::new(common::bin())
        .args(["run", "--server", &server.url(), "--ttl", "10s", "jobIO"])
        .args([
            "--",
            "sh",
            "-c",
            "read line; echo \"got $line\"; ls /proc/self/fd",
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "leasehold run: {}", out.status);
    let out = String::from_utf8_lossy(&out.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("got hello"), "stdout: {out}");
    let fds: Vec<&str> = lines.collect();
    // The same as `ls` run here directly (this process may have inherited
    // descriptors of its own, cargo's jobserver): with the watchdog's
    // descriptor 3 inherited too, the directory `ls` reads would be
    // another number.
    let direct = Command::new("sh")
        .args(["-c", "ls /proc/self/fd"])
        .output()
        .unwrap();
    let direct = String::from_utf8_lossy(&direct.stdout);
    let direct: Vec<&str> = direct.lines().collect();
    assert_eq!(
        fds, direct,
        "the command's descriptors, and those of `ls` run directly"
    );
}

/// A `--kill-grace` over half the TTL is refused before anything starts,
/// naming the flag and the limit: the command would get SIGTERM at the
/// deadline minus the grace, before a renewal could move the deadline.
#[test]
fn a_kill_grace_over_half_the_ttl_is_refused_naming_the_limit() {
    let out = Command::new(common::bin())
        .args(["run", "--server", "http://127.0.0.1:9", "--ttl", "3s"])
        .args(["--kill-grace", "2s", "jobG", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(
        err.contains("--kill-grace 2s") && err.contains("at most 1.5s"),
        "the error names the flag and the limit: {err}"
    );
}

/// The watchdog started by hand, without the pipe `run` gives it on
/// descriptor 3, refuses to start the command, naming the descriptor.
#[test]
fn the_watchdog_without_its_channel_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut guard = Command::new(common::bin());
    guard
        .args(["__guard", "--grace", "1s", "--", "touch"])
        .arg(&marker)
        .stdin(Stdio::null());
    // Descriptor 3 closed whatever this process inherited there.
    // SAFETY: close(2) between fork and exec is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        guard.pre_exec(|| {
            libc::close(3);
            Ok(())
        });
    }
    let out = guard.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.contains("file descriptor 3"),
        "the error names the descriptor: {err}"
    );
    assert!(!marker.exists(), "the command ran");
}

/// `run --no-wait` gives up at once, exit 3, when the job is held, and
/// `--wait D` after D, naming the holder each time; neither runs its
/// command nor leaves anything waiting or held. With the job free,
/// `--no-wait` runs the command. (Cron on several machines: whichever
/// starts first runs the night's job, the others give up.)
async fn run_gives_up_with_exit_3_under_no_wait_and_wait(place: common::Place) {
    let dir = tempfile::tempdir().unwrap();
    let server = place.start(&[]);
    let client = Client::connect(&server.url()).await.unwrap();
    let held = client
        .acquire("nightly", "other", Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    let ran = dir.path().join("ran");
    let run = |flags: &[&str]| {
        Command::new(common::bin())
            .args(["run", "--server", &server.url(), "--ttl", "10s"])
            .args(flags)
            .args(["nightly", "--", "sh", "-c"])
            .arg(format!("touch '{}'", ran.display()))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for flags in [&["--no-wait"][..], &["--wait", "500ms"][..]] {
        let out = run(flags);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{flags:?}: {err}");
        assert!(err.contains("held by other (token 1)"), "{flags:?}: {err}");
        assert!(!ran.exists(), "{flags:?} ran the command");
        let l = client.get_lease("nightly").await.unwrap();
        assert_eq!((l.holder.as_deref(), l.token), (Some("other"), 1));
        server.wait_for_waiters(0).await;
    }
    client
        .release("nightly", "other", held.lease.token)
        .await
        .unwrap();
    let out = run(&["--no-wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ran.exists(), "the command did not run on a free job");
    // Both flags at once are refused.
    let out = run(&["--no-wait", "--wait", "1s"]);
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_gives_up_with_exit_3_under_no_wait_and_wait_on_the_single_node() {
    run_gives_up_with_exit_3_under_no_wait_and_wait(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_gives_up_with_exit_3_under_no_wait_and_wait_on_etcd() {
    run_gives_up_with_exit_3_under_no_wait_and_wait(common::Place::etcd()).await;
}

/// While `run` waits, it says who holds the job: at the start, and at each
/// change.
async fn run_says_who_holds_the_job_while_it_waits(place: common::Place) {
    let dir = tempfile::tempdir().unwrap();
    let server = place.start(&[]);
    let client = Client::connect(&server.url()).await.unwrap();
    let first = client
        .acquire("told", "first", Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    let log = dir.path().join("stderr");
    let file = std::fs::File::create(&log).unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > '{}'; exec sleep 600", pidfile.display());
    let mut runner = Runner::start_with_stderr(&server.url(), "10s", "told", &script, file.into());
    let said = |what: &'static str| {
        let log = log.clone();
        common::eventually_blocking(what, move || {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|s| s.contains(what))
        })
    };
    said("waiting for job=told: held by first (token 1)");
    // Handed to "second" (a transfer: no moment free), then released.
    let waiting = tokio::spawn({
        let c = client.clone();
        async move {
            let o = leasehold::client::AcquireOptions {
                value: b"10.0.0.2:80".to_vec(),
                ..Default::default()
            };
            c.acquire_with(
                "told",
                "second",
                Duration::from_secs(60),
                Duration::from_secs(60),
                o,
            )
            .await
            .unwrap()
        }
    });
    server.wait_for_waiters(2).await;
    client
        .transfer_lease("told", "first", first.lease.token, Some("second"), None)
        .await
        .unwrap();
    let second = waiting.await.unwrap();
    said("waiting for job=told: held by second (token 2, value 10.0.0.2:80)");
    client
        .release("told", "second", second.lease.token)
        .await
        .unwrap();
    let pid = wait_pid(&mut runner, &pidfile);
    runner.cmd_pid = Some(pid);
    said("leading job=told token=3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_says_who_holds_the_job_while_it_waits_on_the_single_node() {
    run_says_who_holds_the_job_while_it_waits(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_says_who_holds_the_job_while_it_waits_on_etcd() {
    run_says_who_holds_the_job_while_it_waits(common::Place::etcd()).await;
}
