//! Storage faults and bad environments, with the real server process:
//! a full disk (while serving, and at start-up), the sync system call that
//! acknowledgement waits for, a sync that fails (the store fails, and is
//! reopened), and a wall clock that jumps.
//!
//! These tests need root (to mount a small tmpfs, and to ptrace) plus the
//! `strace` and `faketime` tools; `scripts/test` installs the tools, and CI
//! runs as root. They fail, rather than skip, when something is missing.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ServerProcess;
use leasehold::client::{Client, ClientError};

const HOUR: Duration = Duration::from_secs(3600);

/// A tmpfs of `mib` MiB, unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(mib: u32) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk with a file until the file system refuses more.
    fn fill(&self) -> PathBuf {
        self.fill_leaving(0)
    }

    /// Fills the disk with a file until no more than `left` bytes are free.
    fn fill_leaving(&self, left: u64) -> PathBuf {
        use std::io::Write;
        let p = self.path().join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while self.free() > left && f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        p
    }

    /// Bytes free on the disk.
    fn free(&self) -> u64 {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(self.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: statvfs is plain old data; all-zero is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid NUL-terminated path and a writable statvfs.
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0);
        st.f_bavail as u64 * st.f_frsize as u64
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_serving_reads_and_recovers() {
    let disk = SmallDisk::mount(16);
    let data = disk.path().join("data");
    let mut server = ServerProcess::start(&data, &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    assert!(
        c.acquire("j", "a", HOUR, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    assert_eq!(
        c.checked_write("j", 1, b"k", b"before".to_vec())
            .await
            .unwrap(),
        1
    );

    let filler = disk.fill();

    // Every change is refused, clearly, and changes nothing.
    for r in [
        c.checked_write("j", 1, b"k", b"during".to_vec())
            .await
            .map(drop),
        c.checked_write("j", 1, b"new", b"x".to_vec())
            .await
            .map(drop),
        c.acquire("other", "b", HOUR, Duration::ZERO)
            .await
            .map(drop),
        c.release("j", "a", 1).await,
    ] {
        match r {
            Err(ClientError::Unavailable(m)) => assert!(m.contains("disk full"), "{m}"),
            other => panic!("a change on a full disk: {other:?}"),
        }
    }
    let mut raw = leasehold::proto::fenced_store_client::FencedStoreClient::connect(server.url())
        .await
        .unwrap();
    let st = raw
        .checked_write(leasehold::proto::CheckedWriteRequest {
            proof: Default::default(),
            job: "j".into(),
            token: 1,
            key: b"k".to_vec(),
            value: b"x".to_vec(),
            delete: false,
        })
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::ResourceExhausted);

    // Reads and renewals go on.
    let v = c.read("j", b"k").await.unwrap();
    assert_eq!((v.value.as_slice(), v.version), (&b"before"[..], 1));
    assert!(!c.read("j", b"new").await.unwrap().found);
    let l = c.get_lease("j").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.token),
        (Some("a"), 1),
        "the release changed nothing"
    );
    assert_eq!(
        c.get_lease("other").await.unwrap().token,
        0,
        "the acquire changed nothing"
    );
    c.renew("j", "a", 1, HOUR).await.unwrap();

    // Space returns: writes work again, without a restart.
    std::fs::remove_file(filler).unwrap();
    assert_eq!(
        c.checked_write("j", 1, b"k", b"after".to_vec())
            .await
            .unwrap(),
        2
    );
    let b = c.acquire("other", "b", HOUR, Duration::ZERO).await.unwrap();
    assert_eq!((b.acquired, b.lease.token), (true, 1));

    // Nothing acknowledged was lost, nothing is corrupt.
    server.signal(libc::SIGKILL);
    server.child.wait().unwrap();
    drop(server);
    let server = ServerProcess::start(&data, &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    let v = c.read("j", b"k").await.unwrap();
    assert_eq!((v.value.as_slice(), v.version), (&b"after"[..], 2));
    assert_eq!(c.get_lease("other").await.unwrap().token, 1);
    let m = admin_metrics(&server).await;
    assert!(
        m.contains("leasehold_store_failures_total 0"),
        "the store itself never failed: {m}"
    );
}

/// A data dir on a disk with about 1 MiB free: the server starts, says at once
/// that no change can be made (a warning naming the free and the needed
/// bytes), reports NOT_SERVING on gRPC health and 503 on `/healthz`, serves
/// reads and renewals, and refuses changes with DISK_FULL. Once space is
/// freed, health comes back and changes are made, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_on_a_full_disk_is_unhealthy_until_space_returns() {
    let disk = SmallDisk::mount(16);
    let data = disk.path().join("data");
    let mut server = ServerProcess::start(&data, &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    assert!(
        c.acquire("j", "a", HOUR, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    c.checked_write("j", 1, b"k", b"before".to_vec())
        .await
        .unwrap();
    server.signal(libc::SIGTERM);
    assert!(server.child.wait().unwrap().success());
    drop(server);

    // 3 MiB free: sled's open takes a 2 MiB segment of it, and a change
    // needs 4 MiB free beyond its own size.
    let filler = disk.fill_leaving(3 << 20);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr");
    let server = std::panic::catch_unwind(|| {
        ServerProcess::spawn_with_stderr(
            common::serve_command(&data),
            &data,
            std::fs::File::create(&log).unwrap().into(),
        )
    })
    .unwrap_or_else(|_| {
        panic!(
            "the server did not start on a full disk:\n{}",
            std::fs::read_to_string(&log).unwrap()
        )
    });
    // Said at start-up, before the server listens.
    let text = std::fs::read_to_string(&log).unwrap();
    let warning = text
        .lines()
        .find(|l| l.contains("WARN") && l.contains("full disk"))
        .unwrap_or_else(|| panic!("no warning of the full disk at start-up in:\n{text}"));
    let field = |name: &str| -> u64 {
        let at = warning
            .find(&format!("{name}="))
            .unwrap_or_else(|| panic!("{warning}"))
            + name.len()
            + 1;
        let digits: String = warning[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap_or_else(|_| panic!("{warning}"))
    };
    let (free, needed) = (field("free"), field("needed"));
    assert!(free < needed && free <= 3 << 20, "{warning}");

    let c = Client::connect(&server.url()).await.unwrap();
    assert_eq!(grpc_health(&server, "").await, NOT_SERVING);
    assert_eq!(
        grpc_health(&server, "leasehold.v1.FencedStore").await,
        NOT_SERVING
    );
    let (code, body) = common::admin_request(server.admin, "/healthz").await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("disk full") && body.contains("bytes are free"),
        "{body}"
    );
    // The probe (`leasehold health`) says so, and names the reason; with
    // --alive (a liveness check) it passes: a restart cannot free space.
    let admin = server.admin.to_string();
    let probe = |args: &[&str]| {
        std::process::Command::new(common::bin())
            .arg("health")
            .args(args)
            .env_remove("LEASEHOLD_TLS_CERT")
            .output()
            .unwrap()
    };
    let out = probe(&["--admin-listen", &admin]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("disk full"),
        "{out:?}"
    );
    assert!(probe(&["--admin-listen", &admin, "--alive"])
        .status
        .success());
    let grpc = server.addr.to_string();
    let out = probe(&["--grpc", "--listen", &grpc]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NOT_SERVING"),
        "{out:?}"
    );

    // Reads and renewals work; changes are refused, clearly.
    let v = c.read("j", b"k").await.unwrap();
    assert_eq!((v.value.as_slice(), v.version), (&b"before"[..], 1));
    c.renew("j", "a", 1, HOUR).await.unwrap();
    match c.checked_write("j", 1, b"k", b"during".to_vec()).await {
        Err(ClientError::Unavailable(m)) => assert!(m.contains("disk full"), "{m}"),
        other => panic!("a change on a full disk: {other:?}"),
    }

    // Space returns: health comes back, and changes are made.
    std::fs::remove_file(filler).unwrap();
    wait_for("gRPC health SERVING once space returns", || async {
        grpc_health(&server, "").await == SERVING
    })
    .await;
    assert_eq!(
        common::admin_request(server.admin, "/healthz").await,
        (200, "ok\n".to_owned())
    );
    assert_eq!(
        c.checked_write("j", 1, b"k", b"after".to_vec())
            .await
            .unwrap(),
        2
    );
    let m = admin_metrics(&server).await;
    assert!(
        m.contains("leasehold_store_failures_total 0"),
        "a full disk is not a store failure: {m}"
    );
}

/// Every fdatasync fails (strace injects EIO) for a while: the write whose
/// sync failed gets UNAVAILABLE, the store fails, and health says so
/// (NOT_SERVING, `/healthz` 503 with the reason) for as long as the reopen
/// fails too, several times in a row. Once syncs work again the store is
/// reopened, health comes back, and reads work at once, with no write
/// needed first. The write whose sync failed was answered as discarded,
/// and it is: not applied, also after a restart, which finds a data dir
/// that `check` calls healthy. The failure is counted once, the recovery
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_is_unhealthy_until_reopened_and_reads_work_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    assert!(
        c.acquire("j", "a", HOUR, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    let mut durable = (
        b"v0".to_vec(),
        c.checked_write("j", 1, b"k", b"v0".to_vec()).await.unwrap(),
    );
    assert_eq!(grpc_health(&server, "").await, SERVING);

    let (mut strace, injected) = inject(
        &server,
        &["-e", "trace=fdatasync", "-e", "inject=fdatasync:error=EIO"],
    );
    // Write until a sync fails (strace attaches thread by thread). Its
    // record may have reached the log (the page cache) before the
    // fdatasync failed: the reopen voids it.
    let started = Instant::now();
    let failed = loop {
        assert!(
            started.elapsed() < WAIT,
            "no write failed while every fdatasync did"
        );
        let value = format!("v{}", durable.1).into_bytes();
        match c.checked_write("j", 1, b"k", value.clone()).await {
            Ok(version) => durable = (value, version),
            Err(ClientError::Unavailable(_)) => break value,
            Err(e) => panic!("{e:?}"),
        }
    };
    // The sync failed, and then reopens did, three times: the store stays
    // failed, and must not wedge.
    wait_for("reopens that fail too", || async { injected.so_far() >= 4 }).await;
    wait_for(
        "gRPC health NOT_SERVING while the store is failed",
        || async { grpc_health(&server, "").await == NOT_SERVING },
    )
    .await;
    assert_eq!(
        grpc_health(&server, "leasehold.v1.Leases").await,
        NOT_SERVING
    );
    let (code, body) = common::admin_request(server.admin, "/healthz").await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("refuses changes") && body.contains("Input/output error"),
        "{body}"
    );
    match c.checked_write("j", 1, b"other", b"x".to_vec()).await {
        Err(ClientError::Unavailable(_)) => {}
        other => panic!("a change while the store is failed: {other:?}"),
    }

    // Syncs work again: the next reopen succeeds.
    common::signal(strace.id(), libc::SIGINT);
    strace.wait().unwrap();
    wait_for("gRPC health SERVING once the store is reopened", || async {
        grpc_health(&server, "").await == SERVING
    })
    .await;
    assert_eq!(
        common::admin_request(server.admin, "/healthz").await,
        (200, "ok\n".to_owned())
    );
    // Reads work at once, with no write in between: of a key, of a job
    // never seen, of the leases.
    let v = c.read("j", b"k").await.unwrap();
    assert_eq!(
        (v.value.clone(), v.version),
        durable,
        "the write answered as discarded ({}) was applied",
        String::from_utf8_lossy(&failed)
    );
    assert!(!c.read("j", b"other").await.unwrap().found);
    assert!(!c.read("never-seen", b"k").await.unwrap().found);
    assert_eq!(c.list_leases("").await.unwrap().len(), 1);
    let l = c.get_lease("j").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("a"), 1));
    let m = admin_metrics(&server).await;
    assert_eq!(
        (
            common::metric(&m, "leasehold_store_failures_total"),
            common::metric(&m, "leasehold_store_recoveries_total")
        ),
        (Some(1.0), Some(1.0)),
        "{m}"
    );
    assert_eq!(
        c.checked_write("j", 1, b"k", b"after".to_vec())
            .await
            .unwrap(),
        v.version + 1
    );
    // A restart finds the same, healthy.
    server.kill9();
    let check = Command::new(common::bin())
        .args(["check", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    let v = c.read("j", b"k").await.unwrap();
    assert_eq!(v.value, b"after");
}

/// How long a test waits for a condition before it fails.
const WAIT: Duration = Duration::from_secs(20);

/// Polls `cond` until it holds, failing the test after [`WAIT`].
async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !cond().await {
        assert!(started.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

/// The gRPC health (`grpc.health.v1`) of `service` ("" for the server).
async fn grpc_health(server: &ServerProcess, service: &str) -> i32 {
    let channel = tonic::transport::Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    h.check(tonic_health::pb::HealthCheckRequest {
        service: service.to_owned(),
    })
    .await
    .unwrap()
    .into_inner()
    .status
}

/// strace shows the reply to a `CheckedWrite` leaves the server only after
/// an fdatasync of the write-ahead log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reply_to_a_write_follows_an_fdatasync_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    c.acquire("j", "a", HOUR, Duration::ZERO).await.unwrap();
    c.read("j", b"k").await.unwrap(); // the connection is warm

    let trace = dir.path().join("strace.txt");
    let mut strace = Command::new("strace")
        .args(["-f", "-ttt", "-yy", "-xx", "-s", "16"])
        .args([
            "-e",
            "trace=fdatasync,fsync,write,writev,sendto,sendmsg,read,recvfrom",
        ])
        .arg("-o")
        .arg(&trace)
        .arg("-p")
        .arg(server.pid().to_string())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace is needed (scripts/test installs it)");
    // strace reports each thread it attaches to; wait for the first.
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(strace.stderr.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("attached"), "strace: {line}");
    }
    assert_eq!(
        c.checked_write("j", 1, b"k", b"traced".to_vec())
            .await
            .unwrap(),
        1
    );
    common::signal(strace.id(), libc::SIGINT);
    strace.wait().unwrap();

    let text = std::fs::read_to_string(&trace).unwrap();
    let port = format!(":{}->", server.addr.port());
    // (time, what) for the events that matter.
    let mut events = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(_pid), Some(t)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(t) = t.parse::<f64>() else { continue };
        let call = &line[line.find(t.to_string().as_str()).unwrap_or(0)..];
        // With -xx, paths are hex too: "/wal" is \x2f\x77\x61\x6c.
        if call.contains("fdatasync(")
            && call.contains("\\x2f\\x77\\x61\\x6c>")
            && call.trim_end().ends_with("= 0")
        {
            events.push((t, "sync"));
        } else if call.contains(&port) && (call.contains("recvfrom(") || call.contains("read(")) {
            events.push((t, "request"));
        } else if call.contains(&port)
            && (call.contains("writev(") || call.contains("write(") || call.contains("sendto("))
            && first_frame_type(call) == Some(1)
        {
            // A HEADERS frame: the start of a response.
            events.push((t, "reply"));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let kinds: Vec<&str> = events.iter().map(|e| e.1).collect();
    let req = kinds
        .iter()
        .position(|k| *k == "request")
        .expect("the request was read");
    let reply = kinds
        .iter()
        .position(|k| *k == "reply")
        .expect("a reply was written");
    let sync = kinds[req..reply].iter().position(|k| *k == "sync");
    assert!(
        sync.is_some(),
        "no fdatasync of the log between the request and the reply: {kinds:?}\n{text}"
    );
    println!("syscalls: {kinds:?}");
}

/// The frame type of the first HTTP/2 frame in a write traced with `-xx`.
fn first_frame_type(call: &str) -> Option<u8> {
    let start = call.find("\"\\x")? + 1;
    let bytes: Vec<u8> = call[start..]
        .split("\\x")
        .skip(1)
        .take(4)
        .filter_map(|h| u8::from_str_radix(h.get(..2)?, 16).ok())
        .collect();
    bytes.get(3).copied()
}

/// Jumps of the wall clock, a day forward and back, change no lease timing:
/// expiry runs on the monotonic clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_jumps_change_no_lease_timing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("faketime");
    let mut child = faked_wall_clock(&dir.path().join("data"), &spec)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.split_whitespace().nth(3).unwrap().to_owned()
    };
    let c = Client::connect(&addr).await.unwrap();
    // "j" is short: its expiry is timed. "long" must outlive the calls
    // that look at it, however slow the machine.
    let ttl = Duration::from_millis(1500);
    let long = Duration::from_secs(60);
    let t0 = Instant::now();
    assert!(
        c.acquire("j", "a", ttl, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    assert!(
        c.acquire("long", "a", long, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );

    std::fs::write(&spec, "+1d").unwrap();
    let l = c.get_lease("long").await.unwrap();
    assert_eq!(
        l.holder.as_deref(),
        Some("a"),
        "a day forward does not expire the lease"
    );
    std::fs::write(&spec, "-1d").unwrap();
    let l = c.get_lease("long").await.unwrap();
    assert_eq!(l.holder.as_deref(), Some("a"));
    assert!(
        l.remaining.unwrap() <= long,
        "a day back does not extend it: {:?}",
        l.remaining
    );

    // "j" expires one TTL after the grant: not sooner (a day forward did
    // not end it), and not a day later (a day back did not extend it);
    // within the test's patience, which a slow machine may need.
    let b = c.acquire("j", "b", ttl, common::PATIENCE).await.unwrap();
    let took = t0.elapsed();
    assert!(b.acquired);
    assert!(took >= ttl, "expired early: {took:?}");
    assert!(took < ttl + common::PATIENCE, "expired late: {took:?}");
    let _ = child.kill();
    let _ = child.wait();
}

async fn admin_metrics(server: &ServerProcess) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(server.admin).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    buf
}

/// A start on a completely full disk says that only space is missing (not
/// damage, no restore or recover), changes nothing, and starts once space
/// is back, with everything there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_on_a_full_disk_asks_for_space_not_a_restore() {
    let disk = SmallDisk::mount(64);
    let dir = disk.path().join("data");
    let server = ServerProcess::start(&dir, &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    c.acquire("j", "a", HOUR, Duration::ZERO).await.unwrap();
    c.checked_write("j", 1, b"k", b"kept".to_vec())
        .await
        .unwrap();
    let mut server = server;
    server.signal(libc::SIGTERM);
    assert!(server.child.wait().unwrap().success());
    let filler = disk.fill();
    let out = common::serve_command(&dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started on a full disk");
    assert!(
        err.contains("free some space") && err.contains("nothing in the data dir is damaged"),
        "{err}"
    );
    std::fs::remove_file(filler).unwrap();
    let server = ServerProcess::start(&dir, &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    assert_eq!(c.read("j", b"k").await.unwrap().value, b"kept");
}

/// `check` reads a copy of the data dir: with too little room for it in
/// TMPDIR it says how much it needs and where, before copying anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_how_much_room_its_copy_needs() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    c.acquire("j", "a", HOUR, Duration::ZERO).await.unwrap();
    drop(server);
    let small = SmallDisk::mount(2);
    let out = Command::new(common::bin())
        .args(["check", "--data-dir"])
        .arg(dir.path())
        .env("TMPDIR", small.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("MiB in") && err.contains("TMPDIR"), "{err}");
    assert_eq!(std::fs::read_dir(small.path()).unwrap().count(), 0);
}

/// History is in token order; its times come from the wall clock, which
/// can jump back. `leasehold history` says where the times disagree with
/// the tokens' order, and `--at` says that its answer rests on them
/// (exit 3) instead of naming a token that did not lead then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_says_when_its_times_go_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("faketime");
    let cmd = faked_wall_clock(&dir.path().join("data"), &spec);
    let server = ServerProcess::spawn(cmd, dir.path());
    let c = Client::connect(&server.url()).await.unwrap();
    c.acquire("post", "first", HOUR, Duration::ZERO)
        .await
        .unwrap();
    c.release("post", "first", 1).await.unwrap();
    // The wall clock goes back three hours.
    std::fs::write(&spec, "-3h").unwrap();
    c.acquire("post", "second", HOUR, Duration::ZERO)
        .await
        .unwrap();
    c.release("post", "second", 2).await.unwrap();
    let h = c.history("post", 10).await.unwrap();
    assert_eq!((h[0].token, h[1].token), (2, 1), "token order");
    assert!(h[0].granted_at < h[1].granted_at, "the clock went back");
    let cli = |args: &[&str]| {
        let out = Command::new(common::bin())
            .args(["history", "--server", &server.url(), "post"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = cli(&[]);
    assert_eq!(code, Some(0));
    assert!(out.contains("token 2 was granted before token 1"), "{out}");
    let inside_first =
        humantime::format_rfc3339_millis(h[1].granted_at + Duration::from_millis(1)).to_string();
    let (code, out) = cli(&["--at", &inside_first]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.starts_with("uncertain"), "{out}");
}

/// `leasehold serve` on `data` whose wall clock (only: not the monotonic
/// one) is offset by what the file `spec` says, read at every call
/// (libfaketime; `spec` starts at "+0").
fn faked_wall_clock(data: &Path, spec: &Path) -> Command {
    let lib = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("libfaketime is needed (scripts/test installs faketime)");
    std::fs::write(spec, "+0").unwrap();
    let mut c = common::serve_command(data);
    c.env("LD_PRELOAD", lib)
        .env("FAKETIME_TIMESTAMP_FILE", spec)
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("RUST_LOG", "warn");
    c
}

/// Every sync of sled's own file fails with EIO for a while (strace
/// injects it there only): a checkpoint fails, and sled, closed for the
/// reopen, unwraps its own failed `fsync` and panics (sled 0.34's
/// `Log::drop`). The store fails and is reopened like after any other I/O
/// error, no lock of the server's is poisoned, and once syncs work again
/// the server heals by itself: health SERVING, writes and reads work, on
/// the same process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_write_errors_inside_sled_heals_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    c.acquire("j", "a", HOUR, Duration::ZERO).await.unwrap();
    let mut version = c.checked_write("j", 1, b"k", b"v0".to_vec()).await.unwrap();
    let db = dir.path().join("db");
    let (mut strace, injected) = inject(
        &server,
        &[
            "-e",
            "trace=fsync,fdatasync",
            "-e",
            "inject=fsync,fdatasync:error=EIO",
            "-P",
            db.to_str().unwrap(),
        ],
    );
    // Changes of 64 KiB (the log fills, and checkpoints write to sled)
    // until sled's writes have failed several times over (a checkpoint's,
    // the reopens'), each change refused or of unknown outcome.
    let mut i = 0;
    wait_for("a burst of failed writes to sled", || {
        i += 1;
        let c = &c;
        let injected = injected.clone();
        let key = format!("k{}", i % 64).into_bytes();
        async move {
            let _ = c.checked_write("j", 1, &key, vec![1; 64 * 1024]).await;
            injected.so_far() >= 5
        }
    })
    .await;
    common::signal(strace.id(), libc::SIGINT);
    strace.wait().unwrap();
    wait_for("gRPC health SERVING again", || async {
        grpc_health(&server, "").await == SERVING
    })
    .await;
    // The same process serves, and changes work.
    let mut server = server;
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server died"
    );
    let v = c.read("j", b"k").await.unwrap();
    version = version.max(v.version);
    assert_eq!(
        c.checked_write("j", 1, b"k", b"after".to_vec())
            .await
            .unwrap(),
        version + 1
    );
    assert_eq!(c.read("j", b"k").await.unwrap().value, b"after");
    let l = c.get_lease("j").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("a"), 1));
}

/// strace attached to `server` (every thread) with `args` (its `-e
/// trace=`, `-e inject=`, `-P` filters), once attached; and the count of
/// the calls it has failed, which strace reports on its standard error.
pub(crate) fn inject(server: &ServerProcess, args: &[&str]) -> (std::process::Child, Injected) {
    let mut strace = Command::new("strace")
        .arg("-f")
        .args(args)
        .arg("-p")
        .arg(server.pid().to_string())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace is needed (scripts/test installs it)");
    let injected = Injected::default();
    let (attached_tx, attached) = std::sync::mpsc::channel();
    std::thread::spawn({
        use std::io::BufRead;
        let stderr = std::io::BufReader::new(strace.stderr.take().unwrap());
        let injected = injected.clone();
        move || {
            for line in stderr.lines().map_while(Result::ok) {
                if line.contains("attached") {
                    let _ = attached_tx.send(());
                }
                if line.contains("(INJECTED)") {
                    injected.count.fetch_add(1, Ordering::SeqCst);
                }
            }
            injected.ended.store(true, Ordering::SeqCst);
        }
    });
    attached.recv().expect("strace attaches");
    (strace, injected)
}

/// The calls strace has failed, as read from its standard error by a
/// thread of [`inject`]'s.
#[derive(Clone, Default)]
pub(crate) struct Injected {
    count: Arc<AtomicUsize>,
    /// strace's standard error has ended: every line it wrote is counted.
    ended: Arc<AtomicBool>,
}

impl Injected {
    /// The calls failed so far, as far as the reader has got.
    pub(crate) fn so_far(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Every call strace failed, once it has exited and the reader has
    /// read its last line: an exited strace's count may still be on its
    /// way in the pipe.
    pub(crate) fn total(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.ended.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "strace's output did not end within 30 s (has it exited?)"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        self.so_far()
    }
}
