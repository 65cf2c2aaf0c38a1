//! The whole story of a paused leader, end to end, through real processes
//! over gRPC: the server and four `bridge_health` workers (the example in
//! `examples/bridge_health.rs`), driven over their stdin and stdout.
//!
//! 1. Four workers campaign for one job; exactly one is elected, token 1,
//!    and the server agrees.
//! 2. The leader writes `status = a` (version 1).
//! 3. The leader is frozen with SIGSTOP. It cannot notice its own pause, so
//!    it still believes it leads. Its lease runs out on the server and a
//!    follower is elected with token 2.
//! 4. The old leader is thawed with SIGCONT and at once tries `write b`, the
//!    work it had in flight, with token 1. The new leader has written
//!    *nothing* yet, so a store that only compared tokens per key would
//!    accept it. The fence compares with the job's current token instead:
//!    the write is rejected (FENCED, current 2), the old leader steps down,
//!    and the store still holds `a` from token 1.
//! 5. The new leader writes `c` (version 2), and every worker quits cleanly.
//!
//! Every wait is bounded; on a timeout the test panics with every line each
//! worker printed so far.

use crate::common;

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use leasehold::client::Client;

const JOB: &str = "bridge_health";
const WORKERS: usize = 4;
/// Generous bound for anything that should take well under a second.
const STEP: Duration = Duration::from_secs(10);
/// The workers' lease TTL. Each leader's lease must outlive the steps it
/// takes while it leads (renewed every third of it), however slow the
/// machine; only the frozen leader's lease runs out, which is the point.
const LEASE: Duration = Duration::from_secs(6);

/// One worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    holder: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SIGKILL works on a stopped process too; no-op once it exited.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workers, and every line each has printed, in one place.
struct Workers {
    procs: Vec<Worker>,
    /// (worker index, line), or `None` at end of output.
    rx: Receiver<(usize, Option<String>)>,
    /// Lines read but not yet consumed by an `expect`, in arrival order.
    pending: VecDeque<(usize, String)>,
    /// Every line each worker printed, for assertions and failure messages.
    seen: Vec<Vec<String>>,
    ended: Vec<bool>,
}

impl Workers {
    fn start(url: &str, n: usize) -> Workers {
        let (tx, rx) = mpsc::channel();
        let mut procs = Vec::new();
        for i in 0..n {
            let mut child = Command::new(common::example("bridge_health"))
                .args(["--server", url, "--job", JOB, "--ttl"])
                .arg(format!("{}s", LEASE.as_secs()))
                .args(["--name", &format!("w{i}")])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start bridge_health");
            let stdout = child.stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send((i, Some(line))).is_err() {
                        return;
                    }
                }
                let _ = tx.send((i, None));
            });
            let stdin = child.stdin.take().unwrap();
            procs.push(Worker {
                child,
                stdin,
                holder: String::new(),
            });
        }
        let mut w = Workers {
            procs,
            rx,
            pending: VecDeque::new(),
            seen: vec![Vec::new(); n],
            ended: vec![false; n],
        };
        // Start-up: each worker names its holder identity first.
        for i in 0..n {
            let line = w.expect(Some(i), |l| l.starts_with("holder "), STEP);
            w.procs[i].holder = line["holder ".len()..].to_owned();
        }
        w
    }

    /// Waits for a line from worker `from` (any worker if `None`) that
    /// satisfies `pred`, and consumes it together with the lines that worker
    /// printed before it. Lines are consumed in order per worker, like
    /// `expect(1)`: each line matches at most one call.
    fn expect_from(
        &mut self,
        from: Option<usize>,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> (usize, String) {
        let deadline = Instant::now() + timeout;
        loop {
            let wanted = |i: usize| from.is_none_or(|f| f == i);
            if let Some(pos) = self.pending.iter().position(|(i, l)| wanted(*i) && pred(l)) {
                let i = self.pending[pos].0;
                let mut k = 0;
                let mut found = None;
                self.pending.retain(|(j, l)| {
                    k += 1;
                    match (k - 1).cmp(&pos) {
                        std::cmp::Ordering::Less => *j != i,
                        std::cmp::Ordering::Equal => {
                            found = Some(l.clone());
                            false
                        }
                        std::cmp::Ordering::Greater => true,
                    }
                });
                return (i, found.unwrap());
            }
            if let Some(i) = from.filter(|&i| self.ended[i]) {
                panic!("worker {i} ended its output; lines: {}", self.dump());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(msg) => self.record(msg),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "timed out after {timeout:?} waiting for a line from {}; lines: {}",
                    from.map_or("any worker".into(), |i| format!("worker {i}")),
                    self.dump()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("every worker ended its output; lines: {}", self.dump())
                }
            }
        }
    }

    fn expect(
        &mut self,
        from: Option<usize>,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> String {
        self.expect_from(from, pred, timeout).1
    }

    fn record(&mut self, (i, line): (usize, Option<String>)) {
        match line {
            Some(l) => {
                self.seen[i].push(l.clone());
                self.pending.push_back((i, l));
            }
            None => {
                self.seen[i].push("<end of output>".into());
                self.ended[i] = true;
            }
        }
    }

    /// Waits until worker `i` has printed `line`, whether or not an earlier
    /// `expect` consumed it.
    fn has_printed(&mut self, i: usize, line: &str) {
        if !self.seen[i].iter().any(|l| l == line) {
            self.expect(Some(i), |l| l == line, STEP);
        }
    }

    /// Reads whatever has been printed so far, without waiting.
    fn drain(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            self.record(msg);
        }
    }

    fn send(&mut self, i: usize, cmd: &str) {
        let w = &mut self.procs[i];
        writeln!(w.stdin, "{cmd}")
            .and_then(|()| w.stdin.flush())
            .unwrap_or_else(|e| panic!("send {cmd:?} to worker {i}: {e}"));
    }

    fn signal(&self, i: usize, sig: i32) {
        common::signal(self.procs[i].child.id(), sig);
    }

    /// Sends worker `i` a command and returns its answer: the next line
    /// whose first word is `answer`.
    fn command(&mut self, i: usize, cmd: &str, answer: &str) -> String {
        self.send(i, cmd);
        self.expect(Some(i), |l| l.split(' ').next() == Some(answer), STEP)
    }

    fn wait_exit(&mut self, i: usize, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.procs[i].child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() >= deadline {
                self.drain();
                panic!(
                    "worker {i} did not exit within {timeout:?}; lines so far: {}",
                    self.dump()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn dump(&self) -> String {
        let mut s = String::new();
        for (i, lines) in self.seen.iter().enumerate() {
            s += &format!("\n  worker {i}: {lines:?}");
        }
        s
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_fenced_before_its_successor_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(dir.path(), &[]);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut w = Workers::start(&server.url(), WORKERS);

    // 1. Exactly one worker is elected, with token 1, and the server agrees.
    let (leader, line) = w.expect_from(None, |l| l.starts_with("elected"), STEP);
    assert_eq!(
        line,
        "elected token=1",
        "first election; lines: {}",
        w.dump()
    );
    let lease = client.get_lease(JOB).await.unwrap();
    assert_eq!(
        lease.holder.as_deref(),
        Some(w.procs[leader].holder.as_str())
    );
    assert_eq!(lease.token, 1);
    w.drain();
    for i in (0..WORKERS).filter(|&i| i != leader) {
        assert!(
            !w.seen[i].iter().any(|l| l.starts_with("elected")),
            "worker {i} was elected too while {leader} leads; lines: {}",
            w.dump()
        );
    }

    // 2. The leader writes.
    assert_eq!(w.command(leader, "write a", "write"), "write ok version=1");

    // 3. Freeze the leader. Its lease runs out and a follower is elected.
    w.signal(leader, libc::SIGSTOP);
    let stopped = Instant::now();
    let new_lease = loop {
        let l = client.get_lease(JOB).await.unwrap();
        if l.token >= 2 && l.holder.is_some() {
            break l;
        }
        assert!(
            stopped.elapsed() < LEASE + common::PATIENCE,
            "no new leader {:?} after SIGSTOP of the leader ({LEASE:?} lease); lease {l:?}; \
             lines: {}",
            LEASE + common::PATIENCE,
            w.dump()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("handover after SIGSTOP took {:?}", stopped.elapsed());
    assert_eq!(new_lease.token, 2, "{new_lease:?}");
    assert_ne!(
        new_lease.holder.as_deref(),
        Some(w.procs[leader].holder.as_str())
    );
    let (successor, line) = w.expect_from(None, |l| l.starts_with("elected"), STEP);
    assert_ne!(
        successor,
        leader,
        "the stopped leader printed; lines: {}",
        w.dump()
    );
    assert_eq!(line, "elected token=2", "lines: {}", w.dump());
    assert_eq!(
        new_lease.holder.as_deref(),
        Some(w.procs[successor].holder.as_str())
    );

    // 4. Thaw the old leader and at once let it finish its in-flight write,
    //    before the new leader has written anything.
    w.signal(leader, libc::SIGCONT);
    assert_eq!(
        w.command(leader, "write b", "write"),
        "write fenced current=2"
    );
    w.expect(Some(leader), |l| l == "stepped-down", STEP);
    w.has_printed(leader, "lost token=1");
    let v = client.read(JOB, b"status").await.unwrap();
    assert!(v.found);
    assert_eq!(
        (v.value.as_slice(), v.token, v.version),
        (&b"a"[..], 1, 1),
        "the stale write must not have landed"
    );
    // The fenced worker stays out of the way.
    let lease = client.get_lease(JOB).await.unwrap();
    assert_eq!(
        lease.holder.as_deref(),
        Some(w.procs[successor].holder.as_str())
    );
    assert_eq!(lease.token, 2);

    // 5. The new leader writes; everyone quits cleanly.
    assert_eq!(
        w.command(successor, "write c", "write"),
        "write ok version=2"
    );
    let v = client.read(JOB, b"status").await.unwrap();
    assert_eq!((v.value.as_slice(), v.token, v.version), (&b"c"[..], 2, 2));
    // The successor quits last: while it holds the lease, no follower's
    // waiting Acquire can be granted, so none is granted mid-quit.
    let order = (0..WORKERS).filter(|&i| i != successor).chain([successor]);
    for i in order {
        assert_eq!(w.command(i, "quit", "bye"), "bye");
        let status = w.wait_exit(i, STEP);
        assert!(
            status.success(),
            "worker {i} exited with {status}; lines: {}",
            w.dump()
        );
    }
    let lease = client.get_lease(JOB).await.unwrap();
    assert_eq!(
        lease.holder, None,
        "the successor released on quit: {lease:?}"
    );
    assert_eq!(
        lease.token, 2,
        "nobody was granted the lease after it: {lease:?}"
    );
}
