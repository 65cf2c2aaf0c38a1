//! A rolling restart of `leasehold run` workers leaves the job leaderless
//! for no TTL: three workers for one job, restarted one after the other
//! with SIGTERM, through real processes.
//!
//! The sequence (README, "Rolling restarts"): SIGTERM the leader's runner;
//! it stops its command and hands the lease to the waiting peer
//! (TransferLease: the peer's Acquire is granted the next token in the
//! same decision); the peer starts its command. The restarted worker queues behind the new leader
//! (its Acquire waits: `leasehold_waiting_acquires` is 1 again) before the
//! next worker is stopped.
//!
//! The job's leader and leaderless time are read from the server's
//! `/metrics` (`leasehold_job_leader{job}`,
//! `leasehold_job_leaderless_seconds{job}`), polled back to back through
//! the whole roll. As the handover is one decision, no poll may find the
//! job without a leader. The most leaderless time read plus the longest
//! interval between two polls, a bound on any vacancy, is printed: it
//! stays far under 100 ms, but a loaded machine may pause the poller for
//! longer, so it is not asserted.

use crate::common::{self, ServerProcess};

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOB: &str = "roll";
/// Long, so that a takeover by expiry instead of a handover would show
/// as a gap of seconds.
const TTL: &str = "10s";
const STEP: Duration = common::PATIENCE;

/// A `leasehold run` worker whose command logs `start NANOS TOKEN` and,
/// on SIGTERM, `stop NANOS` to `log`.
struct Worker {
    child: Child,
}

impl Worker {
    fn start(url: &str, name: &str, log: &Path) -> Worker {
        let script = format!(
            "l='{}'; echo \"start $(date +%s%N) $LEASEHOLD_TOKEN\" >> \"$l\"; \
             trap 'echo \"stop $(date +%s%N)\" >> \"$l\"; exit 0' TERM; \
             sleep 600 & wait",
            log.display()
        );
        let child = Command::new(common::bin())
            .args(["run", "--server", url, "--ttl", TTL, "--name", name, JOB])
            .args(["--", "sh", "-c", &script])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start leasehold run");
        Worker { child }
    }

    /// SIGTERM, and its exit status: its command's, 0 (the command traps
    /// the signal and exits cleanly), after it released.
    fn terminate(mut self) -> Option<i32> {
        common::signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + STEP;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            assert!(Instant::now() < deadline, "the worker did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Worker {
    /// SIGTERM, so that the runner stops its command too; SIGKILL if it
    /// does not exit.
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + STEP;
            while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `(start, stop)` lines of a worker's log: nanoseconds since the
/// epoch, and the token of each start.
fn events(log: &Path) -> (Vec<(u128, u64)>, Vec<u128>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (mut starts, mut stops) = (vec![], vec![]);
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["start", t, tok] => starts.push((t.parse().unwrap(), tok.parse().unwrap())),
            ["stop", t] => stops.push(t.parse().unwrap()),
            _ => {}
        }
    }
    (starts, stops)
}

/// The value of a series with a `job` label in a `/metrics` text.
fn job_metric(text: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{job=\"{JOB}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

async fn metrics(admin: SocketAddr) -> String {
    let (code, body) = common::admin_request(admin, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    body
}

/// Waits until `f` holds of the metrics.
async fn wait_metrics(admin: SocketAddr, what: &str, f: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + STEP;
    loop {
        if f(&metrics(admin).await) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: not within {STEP:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the job's command has started with `token` (from any log).
async fn wait_started(logs: &[&Path], token: u64) -> u128 {
    let deadline = Instant::now() + STEP;
    loop {
        for log in logs {
            if let Some((t, _)) = events(log).0.into_iter().find(|(_, k)| *k == token) {
                return t;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no command started with token {token}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the poller has polled `n` more times after now.
async fn wait_for_polls(polls: &AtomicU64, n: u64) {
    let from = polls.load(Ordering::SeqCst);
    common::eventually(&format!("{n} more polls of /metrics"), || async {
        (polls.load(Ordering::SeqCst) >= from + n).then_some(())
    })
    .await
}

/// What the poller saw: the most leaderless time read, the longest
/// interval between two polls, the polls, and those that saw no leader.
#[derive(Debug, Default)]
struct Seen {
    max_leaderless: Duration,
    max_interval: Duration,
    polls: u64,
    vacant_polls: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_leaves_the_job_leaderless_under_100ms() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&dir.path().join("data"), &[]);
    let (url, admin) = (server.url(), server.admin);
    let waiting =
        |n: f64| move |m: &str| common::metric(m, "leasehold_waiting_acquires") == Some(n);
    let log = |i: usize| dir.path().join(format!("w{i}.log"));

    // Three workers: a leads (token 1); b, then c, wait for the lease.
    let names = ["a", "b", "c"];
    let mut line: std::collections::VecDeque<(usize, Worker, std::path::PathBuf)> =
        Default::default();
    for (i, name) in names.iter().enumerate() {
        let l = log(i);
        line.push_back((i, Worker::start(&url, name, &l), l));
        match i {
            0 => {
                wait_started(&[&log(0)], 1).await;
            }
            _ => wait_metrics(admin, "the worker waits", waiting(i as f64)).await,
        }
    }

    // Poll the job's leaderless time through the whole roll.
    let done = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicU64::new(0));
    let poller = tokio::spawn({
        let (done, polls) = (done.clone(), polls.clone());
        async move {
            let mut seen = Seen::default();
            let mut last = Instant::now();
            while !done.load(Ordering::Relaxed) {
                let m = metrics(admin).await;
                let now = Instant::now();
                seen.max_interval = seen.max_interval.max(now - last);
                last = now;
                seen.polls += 1;
                polls.fetch_add(1, Ordering::SeqCst);
                let leaderless = job_metric(&m, "leasehold_job_leaderless_seconds")
                    .expect("the job's leaderless series");
                seen.max_leaderless = seen.max_leaderless.max(Duration::from_secs_f64(leaderless));
                if job_metric(&m, "leasehold_job_leader") != Some(1.0) {
                    seen.vacant_polls += 1;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            seen
        }
    });
    wait_for_polls(&polls, 20).await;

    // Restart each in turn: the leader is stopped, the first in line
    // leads with the next token, and the stopped one, restarted, waits at
    // the back.
    let (mut gaps, mut sigterm_to_start) = (Vec::new(), Vec::new());
    for (round, next_log) in (0..names.len()).zip(names.len()..) {
        let token = round as u64 + 2;
        let (i, leader, leader_log) = line.pop_front().unwrap();
        let next = line.front().unwrap().2.clone();
        let sent = Instant::now();
        assert_eq!(leader.terminate(), Some(0));
        let started = wait_started(&[&next], token).await;
        sigterm_to_start.push(sent.elapsed());
        let stopped = *events(&leader_log)
            .1
            .last()
            .expect("the old command's stop");
        gaps.push(Duration::from_nanos((started - stopped) as u64));
        let l = log(next_log);
        line.push_back((i, Worker::start(&url, names[i], &l), l));
        wait_metrics(admin, "the restarted worker waits", waiting(2.0)).await;
        wait_for_polls(&polls, 20).await;
    }

    done.store(true, Ordering::Relaxed);
    let seen = poller.await.unwrap();
    println!(
        "rolling restart of three workers: {} polls of /metrics, {} without a leader; most \
         leaderless time read {:?}, longest interval between polls {:?}; command gaps (old \
         command's exit to new one's start) {gaps:?}, the longest {:?}; SIGTERM to the new \
         command's start {sigterm_to_start:?}",
        seen.polls,
        seen.vacant_polls,
        seen.max_leaderless,
        seen.max_interval,
        gaps.iter().max().unwrap(),
    );
    assert!(seen.polls > 50, "too few polls: {seen:?}");
    assert_eq!(
        (seen.vacant_polls, seen.max_leaderless),
        (0, Duration::ZERO),
        "polls found the job without a leader: {seen:?}"
    );

    // Handed over three times by transfer, never taken over by expiry.
    let m = metrics(admin).await;
    assert_eq!(job_metric(&m, "leasehold_job_token"), Some(4.0), "{m}");
    assert_eq!(common::metric(&m, "leasehold_transfers_total"), Some(3.0));
    assert_eq!(common::metric(&m, "leasehold_releases_total"), Some(0.0));
    assert_eq!(common::metric(&m, "leasehold_expiries_total"), Some(0.0));
    drop(line);
}
