//! Real etcd clusters on 127.0.0.1 for the etcd backend's tests, and
//! leasehold frontends on them.
//!
//! Each member is an `etcd` process (Debian's etcd-server) with its own
//! data dir under one temporary dir, on ports the OS picked. Readiness is
//! polled with etcd's Status call, with a deadline; no sleeps.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use leasehold::etcd::client::Etcd;

use super::{bin, ServerProcess};

/// etcd's minimum lease TTL with its default election timeout (1 s):
/// 1.5 election timeouts, rounded up to whole seconds. The backend learns
/// it from etcd at start-up; tests check it matches.
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// The `etcd` binary: `LEASEHOLD_TEST_ETCD_BIN`, or `etcd` on the PATH.
pub fn etcd_bin() -> PathBuf {
    std::env::var_os("LEASEHOLD_TEST_ETCD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| "etcd".into())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
    stopped: bool,
}

/// A running etcd cluster. Dropping it kills every member and removes
/// their data.
pub struct EtcdCluster {
    dir: PathBuf,
    owned_dir: Option<tempfile::TempDir>,
    members: Vec<Member>,
    initial: String,
    token: String,
    /// Flags every member is started (and restarted) with, after ours.
    extra: Vec<String>,
}

impl EtcdCluster {
    /// Starts `n` members and waits until they have elected a leader.
    pub fn start(n: usize) -> EtcdCluster {
        EtcdCluster::start_with(n, &[])
    }

    /// [`EtcdCluster::start`], each member with the etcd flags `extra` too
    /// (e.g. `--quota-backend-bytes`).
    ///
    /// A member that exits at start, most likely because a port that
    /// [`free_port`] found free was taken before etcd bound it, has the
    /// whole cluster started again on other ports, up to three times.
    pub fn start_with(n: usize, extra: &[&str]) -> EtcdCluster {
        let mut why = String::new();
        for _ in 0..3 {
            let mut c = EtcdCluster::spawned(n, extra);
            match c.started(Duration::from_secs(30)) {
                Ok(()) => return c,
                Err(e) => why = e,
            }
        }
        panic!("etcd did not start, three times; the last time: {why}");
    }

    /// `n` members started, not yet ready.
    fn spawned(n: usize, extra: &[&str]) -> EtcdCluster {
        let tmp = tempfile::Builder::new()
            .prefix("leasehold-etcd-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_owned();
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                child: None,
                stopped: false,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = EtcdCluster {
            dir,
            owned_dir: Some(tmp),
            members,
            initial,
            token: format!("lh-{}", uuid::Uuid::new_v4().simple()),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for i in 0..n {
            c.spawn(i, "new");
        }
        c
    }

    /// Waits, as [`EtcdCluster::wait_ready`] does, until every member knows
    /// the same leader; fails with the member's log if one has exited.
    fn started(&mut self, within: Duration) -> Result<(), String> {
        let t = Instant::now();
        loop {
            for i in 0..self.members.len() {
                let exited = match self.members[i].child.as_mut() {
                    Some(c) => c.try_wait().ok().flatten(),
                    None => None,
                };
                if let Some(status) = exited {
                    let log = std::fs::read_to_string(
                        self.dir.join(format!("{}.log", self.members[i].name)),
                    )
                    .unwrap_or_default();
                    let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                    return Err(format!(
                        "member {i} exited ({status}); its log ends: {tail}"
                    ));
                }
            }
            if self.agree_on_a_leader() {
                return Ok(());
            }
            if t.elapsed() > within {
                return Err(format!(
                    "not ready within {within:?}; logs in {}",
                    self.dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn spawn(&mut self, i: usize, state: &str) {
        let m = &self.members[i];
        let data = self.dir.join(&m.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", m.name)))
            .unwrap();
        let mut cmd = Command::new(etcd_bin());
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&data)
            .arg("--listen-client-urls")
            .arg(format!("http://127.0.0.1:{}", m.client))
            .arg("--advertise-client-urls")
            .arg(format!("http://127.0.0.1:{}", m.client))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{}", m.peer))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{}", m.peer))
            .arg("--initial-cluster")
            .arg(&self.initial)
            .arg("--initial-cluster-state")
            .arg(state)
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .args(["--logger", "zap", "--log-level", "warn"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {:?}: {e} (is etcd-server installed?)", etcd_bin()));
        let m = &mut self.members[i];
        m.child = Some(child);
        m.stopped = false;
    }

    /// Whether every running member answers and knows the same leader.
    fn agree_on_a_leader(&self) -> bool {
        let leaders: Vec<u64> = self
            .running()
            .into_iter()
            .filter_map(|i| self.status(i).map(|(_, l)| l))
            .collect();
        !leaders.is_empty()
            && leaders.len() == self.running().len()
            && leaders.iter().all(|l| *l != 0 && *l == leaders[0])
    }

    /// Waits until every running member knows the same leader.
    pub fn wait_ready(&self, within: Duration) {
        let t = Instant::now();
        loop {
            if self.agree_on_a_leader() {
                return;
            }
            assert!(
                t.elapsed() < within,
                "etcd cluster not ready within {within:?}; logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn running(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|i| self.members[*i].child.is_some() && !self.members[*i].stopped)
            .collect()
    }

    /// (member id, leader id) as member `i` reports them.
    pub fn status(&self, i: usize) -> Option<(u64, u64)> {
        let ep = self.endpoint(i);
        // A thread and runtime of its own: callers may be inside a runtime.
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(Etcd::status(&ep, Duration::from_millis(500)))
                    .ok()
            })
            .join()
            .unwrap()
        })
    }

    /// The index of the member that leads, as the running members see it.
    pub fn leader(&self) -> Option<usize> {
        let ids: Vec<(usize, u64, u64)> = self
            .running()
            .into_iter()
            .filter_map(|i| self.status(i).map(|(id, l)| (i, id, l)))
            .collect();
        let leader = ids.first()?.2;
        ids.iter()
            .find(|(_, id, _)| *id == leader)
            .map(|(i, _, _)| *i)
    }

    /// Member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client)
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// The endpoints as one `--etcd-endpoints` value.
    pub fn endpoints_arg(&self) -> String {
        self.endpoints().join(",")
    }

    /// The process id of member `i`.
    pub fn pid(&self, i: usize) -> u32 {
        self.members[i].child.as_ref().expect("running").id()
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        self.spawn(i, "existing");
    }

    /// SIGSTOPs member `i`; returns once it has stopped.
    pub fn pause(&mut self, i: usize) {
        super::signal(self.pid(i), libc::SIGSTOP);
        self.members[i].stopped = true;
    }

    /// SIGCONTs member `i`.
    pub fn resume(&mut self, i: usize) {
        super::signal(self.pid(i), libc::SIGCONT);
        self.members[i].stopped = false;
    }

    /// Where the members keep their data and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn shutdown(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                if m.stopped {
                    // SAFETY: kill(2) on our own child.
                    unsafe { libc::kill(c.id() as i32, libc::SIGCONT) };
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.shutdown();
        drop(self.owned_dir.take());
    }
}

/// Makes `cmd`'s process get SIGKILL when the thread that started it
/// ends: a test that panics or is killed leaves no etcd behind.
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; nothing else runs in the child
    // before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// The cluster shared by every [`super::TestServer`] of this test process
/// in etcd mode: `LEASEHOLD_TEST_ETCD_ENDPOINTS` when set, else a
/// 3-member cluster started once, by a thread that lives as long as the
/// process, and torn down (processes and data) when the process exits.
pub fn shared_endpoints() -> Vec<String> {
    static SHARED: OnceLock<Vec<String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if let Ok(eps) = std::env::var("LEASEHOLD_TEST_ETCD_ENDPOINTS") {
                return eps.split(',').map(str::to_owned).collect();
            }
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let c = EtcdCluster::start(3);
                let _ = tx.send(c.endpoints());
                *SHARED_CLUSTER.lock().unwrap() = Some(c);
                // SAFETY: registers a plain extern "C" function.
                unsafe { libc::atexit(tear_down_shared) };
                // Live as long as the process: the members die with this
                // thread (PR_SET_PDEATHSIG) if the process is killed.
                loop {
                    std::thread::park();
                }
            });
            rx.recv().expect("the shared etcd cluster started")
        })
        .clone()
}

static SHARED_CLUSTER: Mutex<Option<EtcdCluster>> = Mutex::new(None);

extern "C" fn tear_down_shared() {
    if let Ok(mut c) = SHARED_CLUSTER.lock() {
        drop(c.take());
    }
}

/// A key prefix no other server in this process uses.
pub fn fresh_prefix() -> String {
    format!("test-{}/", uuid::Uuid::new_v4().simple())
}

/// A frontend's configuration for tests: short session TTL, so that a
/// killed frontend's waiters leave the line soon.
pub fn frontend_config(endpoints: Vec<String>, prefix: &str) -> leasehold::etcd::Config {
    leasehold::etcd::Config {
        endpoints,
        prefix: prefix.to_owned(),
        timeout: Duration::from_secs(5),
        session_ttl: MIN_TTL,
        security: Default::default(),
        limits: Default::default(),
        compact_every: Default::default(),
    }
}

/// `leasehold serve --store etcd` on `endpoints` under `prefix`, as a
/// child process, with ports the OS picks.
pub fn frontend(endpoints: &str, prefix: &str, extra: &[&str]) -> ServerProcess {
    ServerProcess::spawn(frontend_command(endpoints, prefix, extra), Path::new(""))
}

/// The command line of [`frontend`], not started.
pub fn frontend_command(endpoints: &str, prefix: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--store",
        "etcd",
        "--etcd-endpoints",
        endpoints,
        "--etcd-prefix",
        prefix,
        "--etcd-session-ttl",
        "2s",
    ])
    .args(extra);
    cmd
}
