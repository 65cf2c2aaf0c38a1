//! The etcd backend against a secured etcd: client TLS with a client
//! certificate (etcd's `--client-cert-auth`), and etcd's authentication
//! (`auth enable`, a user whose role may read and write leasehold's prefix
//! only). A real etcd, set up with the real `etcdctl`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use leasehold::client::Client;

use crate::common;
use crate::common::etcd::{etcd_bin, free_port, frontend_command};
use crate::common::pki::{self, Ca};
use crate::common::ServerProcess;

const NOW: Duration = Duration::ZERO;

/// One etcd member serving clients over TLS only, with a client
/// certificate required.
struct SecureEtcd {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
    /// How it was started, to start it again.
    cmd: Vec<std::ffi::OsString>,
}

impl SecureEtcd {
    /// Starts etcd with `cmd`, its output appended to `etcd.log` in `dir`.
    fn spawn(dir: &Path, cmd: &[std::ffi::OsString]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("etcd.log"))
            .unwrap();
        Command::new(etcd_bin())
            .args(cmd)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd")
    }

    /// The end of etcd's log, for a failure's message.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self._dir.path().join("etcd.log")).unwrap_or_default();
        let start = log.len().saturating_sub(2000);
        log.get(start..).unwrap_or(&log).to_owned()
    }

    /// Kills the member and starts it again on its data: etcd keeps its
    /// simple tokens in memory, so every token it gave is gone.
    fn restart(&mut self, f: &Files) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = SecureEtcd::spawn(self._dir.path(), &self.cmd);
        wait_healthy(self, f).unwrap();
    }
}

/// Waits until the member answers. Err when it exited first (a port taken
/// between `free_port` and etcd's bind is the usual cause), with its log.
fn wait_healthy(e: &mut SecureEtcd, f: &Files) -> Result<(), String> {
    let t = Instant::now();
    while !etcdctl(e, f, &["--user", "root:root-secret", "endpoint", "health"])
        .status
        .success()
        && !etcdctl(e, f, &["endpoint", "health"]).status.success()
    {
        if let Ok(Some(status)) = e.child.try_wait() {
            return Err(format!("etcd exited ({status}): {}", e.log_tail()));
        }
        assert!(
            t.elapsed() < common::PATIENCE,
            "etcd did not start: {}",
            e.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

impl Drop for SecureEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Files {
    ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn start(files_dir: &Path) -> (SecureEtcd, Files) {
    let ca = Ca::new("etcd test CA");
    let (server_cert, server_key) = ca.issue(&["127.0.0.1", "localhost"], false);
    let (client_cert, client_key) = ca.issue(&["leasehold-frontend"], true);
    let files = Files {
        ca: pki::write(files_dir, "etcd-ca.pem", &ca.pem()),
        client_cert: pki::write(files_dir, "etcd-client.pem", &client_cert),
        client_key: pki::write(files_dir, "etcd-client.key", &client_key),
    };
    let server_cert = pki::write(files_dir, "etcd-server.pem", &server_cert);
    let server_key = pki::write(files_dir, "etcd-server.key", &server_key);
    // A port free when asked may be taken before etcd binds it: a member
    // that exits at start is tried again on other ports.
    let mut attempt = 0;
    loop {
        match start_member(&files, &server_cert, &server_key) {
            Ok(e) => return (e, files),
            Err(why) if attempt < 2 => {
                eprintln!("etcd_secure: {why}; trying other ports");
                attempt += 1;
            }
            Err(why) => panic!("etcd did not start: {why}"),
        }
    }
}

/// One try at starting the member on fresh ports and a fresh data dir.
fn start_member(
    files: &Files,
    server_cert: &Path,
    server_key: &Path,
) -> Result<SecureEtcd, String> {
    let dir = tempfile::Builder::new()
        .prefix("leasehold-etcd-secure-")
        .tempdir()
        .unwrap();
    let (client, peer) = (free_port(), free_port());
    let url = format!("https://127.0.0.1:{client}");
    let mut cmd: Vec<std::ffi::OsString> = Vec::new();
    let mut arg = |a: &dyn AsRef<std::ffi::OsStr>| cmd.push(a.as_ref().to_owned());
    for a in ["--name", "s0", "--data-dir"] {
        arg(&a);
    }
    arg(&dir.path().join("s0"));
    for a in [
        "--listen-client-urls".to_owned(),
        url.clone(),
        "--advertise-client-urls".to_owned(),
        url.clone(),
        "--listen-peer-urls".to_owned(),
        format!("http://127.0.0.1:{peer}"),
        "--initial-advertise-peer-urls".to_owned(),
        format!("http://127.0.0.1:{peer}"),
        "--initial-cluster".to_owned(),
        format!("s0=http://127.0.0.1:{peer}"),
    ] {
        arg(&a);
    }
    arg(&"--cert-file");
    arg(&server_cert);
    arg(&"--key-file");
    arg(&server_key);
    arg(&"--trusted-ca-file");
    arg(&files.ca);
    for a in [
        "--client-cert-auth",
        "--auth-token",
        "simple",
        "--logger",
        "zap",
        "--log-level",
        "error",
    ] {
        arg(&a);
    }
    let child = SecureEtcd::spawn(dir.path(), &cmd);
    let mut e = SecureEtcd {
        child,
        url,
        _dir: dir,
        cmd,
    };
    wait_healthy(&mut e, files).map(|()| e)
}

/// Runs `etcdctl` (as root once auth is on) against the member.
fn etcdctl(e: &SecureEtcd, f: &Files, args: &[&str]) -> std::process::Output {
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", e.url))
        .arg(format!("--cacert={}", f.ca.display()))
        .arg(format!("--cert={}", f.client_cert.display()))
        .arg(format!("--key={}", f.client_key.display()))
        .args(args)
        .output()
        .expect("etcdctl (Debian's etcd-client)")
}

fn etcdctl_ok(e: &SecureEtcd, f: &Files, args: &[&str]) {
    let o = etcdctl(e, f, args);
    assert!(
        o.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `leasehold serve --store etcd` on the secured member, with `extra`
/// flags and the password in the environment.
fn frontend_cmd(e: &SecureEtcd, f: &Files, password: Option<&str>, extra: &[&str]) -> Command {
    let mut cmd = frontend_command(&e.url, "lh-secure/", &["--etcd-timeout", "5s"]);
    cmd.arg("--etcd-ca")
        .arg(&f.ca)
        .arg("--etcd-cert")
        .arg(&f.client_cert)
        .arg("--etcd-key")
        .arg(&f.client_key)
        .args(extra);
    cmd.env_remove("LEASEHOLD_ETCD_PASSWORD");
    if let Some(p) = password {
        cmd.env("LEASEHOLD_ETCD_PASSWORD", p);
    }
    cmd
}

/// What a frontend that cannot start says (it exits non-zero).
fn refused(mut cmd: Command) -> String {
    let o = cmd.output().unwrap();
    assert!(!o.status.success(), "the frontend started");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_uses_an_etcd_with_client_tls_and_authentication() {
    let files_dir = tempfile::tempdir().unwrap();
    let (mut e, f) = start(files_dir.path());
    etcdctl_ok(&e, &f, &["user", "add", "root:root-secret"]);
    etcdctl_ok(&e, &f, &["role", "add", "leasehold"]);
    etcdctl_ok(
        &e,
        &f,
        &[
            "role",
            "grant-permission",
            "leasehold",
            "--prefix=true",
            "readwrite",
            "lh-secure/",
        ],
    );
    etcdctl_ok(&e, &f, &["user", "add", "lh:lh-secret"]);
    etcdctl_ok(&e, &f, &["user", "grant-role", "lh", "leasehold"]);
    etcdctl_ok(&e, &f, &["auth", "enable"]);

    // A wrong password, and none: refused at start-up, saying why.
    let err = refused(frontend_cmd(&e, &f, Some("wrong"), &["--etcd-user", "lh"]));
    assert!(err.contains("etcd login as \"lh\""), "{err}");
    let err = refused(frontend_cmd(&e, &f, None, &["--etcd-user", "lh"]));
    assert!(err.contains("LEASEHOLD_ETCD_PASSWORD"), "{err}");
    // No user at all: etcd refuses every call, and the frontend says so.
    let err = refused(frontend_cmd(&e, &f, None, &[]));
    assert!(err.contains("cannot reach etcd"), "{err}");
    // Plain http to a TLS-only member: refused before any call.
    let mut plain = frontend_cmd(&e, &f, Some("lh-secret"), &["--etcd-user", "lh"]);
    plain.args(["--etcd-endpoints", &e.url.replacen("https", "http", 1)]);
    let err = refused(plain);
    assert!(err.contains("--etcd-endpoints"), "{err}");

    let fe = ServerProcess::spawn(
        frontend_cmd(&e, &f, Some("lh-secret"), &["--etcd-user", "lh"]),
        Path::new(""),
    );
    let c = Client::connect(&fe.url()).await.unwrap();
    // The lease must outlive every step below (an etcd restart, turning
    // authentication off and on): its expiry is not the point.
    let ttl = Duration::from_secs(30);
    let a = c.acquire("payroll", "w1", ttl, NOW).await.unwrap();
    assert!(a.acquired);
    let v = c
        .checked_write("payroll", a.lease.token, b"k", b"v1".to_vec())
        .await
        .unwrap();
    assert_eq!(c.read("payroll", b"k").await.unwrap().value, b"v1");
    // A restarted member has forgotten every token it gave: the frontend
    // logs in again by itself, and the lease and the value are still
    // there (an etcd lease outlives a restart shorter than its TTL).
    e.restart(&f);
    let r = c.renew("payroll", "w1", a.lease.token, ttl).await.unwrap();
    assert_eq!(r.token, a.lease.token);
    // Turning etcd's authentication off and on again drops every token it
    // gave, whatever etcd keeps across a restart: the next call is refused
    // for its token, and the frontend logs in again (without the old token,
    // which etcd would refuse even for a login).
    etcdctl_ok(&e, &f, &["--user", "root:root-secret", "auth", "disable"]);
    etcdctl_ok(&e, &f, &["auth", "enable"]);
    let r = c.renew("payroll", "w1", a.lease.token, ttl).await.unwrap();
    assert_eq!(r.token, a.lease.token);
    let v2 = c
        .checked_write("payroll", a.lease.token, b"k", b"v2".to_vec())
        .await
        .unwrap();
    assert!(v2 > v);
    c.release("payroll", "w1", a.lease.token).await.unwrap();
    // What leasehold wrote is where the role allows, under its prefix.
    let o = etcdctl(
        &e,
        &f,
        &[
            "--user",
            "root:root-secret",
            "get",
            "--prefix",
            "--keys-only",
            "lh-secure/",
        ],
    );
    assert!(o.status.success());
    assert!(!o.stdout.is_empty(), "no keys under the prefix");
    drop(fe);
    drop(e);
}
