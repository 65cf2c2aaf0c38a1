//! Test harnesses: the real server, in process or as a child process, on
//! 127.0.0.1 with a port the OS picks and a temporary data dir; and real
//! etcd clusters for the etcd backend.
//!
//! `LEASEHOLD_TEST_BACKEND=etcd` runs [`TestServer`] as an etcd frontend
//! instead of on sled: on the cluster at `LEASEHOLD_TEST_ETCD_ENDPOINTS`
//! when set, otherwise on a 3-member cluster this test process starts once
//! (and kills when it exits), each server under a key prefix of its own.
//! Tests that depend on short TTLs take them from [`ttl`], which rounds up
//! to the backend's granularity.
//!
//! `LEASEHOLD_TEST_SECURE=1` starts every [`TestServer`] with TLS (a CA and
//! a server certificate the tests make, [`pki`]) and a policy that grants
//! one principal everything; the tests' clients ([`TestServer::client`],
//! [`channel`]) connect with that CA and the principal's bearer token.
#![allow(dead_code)] // each test binary uses part of this module

pub mod etcd;
pub mod pki;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use leasehold::backend::Backend;
use leasehold::client::{Client, Security};
use leasehold::lease::Limits;
use leasehold::metrics::RpcMetrics;
use leasehold::node::Node;
use leasehold::server;
use leasehold::store::sled::SledStore;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The `leasehold` binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_leasehold"))
}

/// Runs `leasehold ARGS[0] --server URL ARGS[1..]` (a subcommand, the
/// server, the rest) to its end: its exit code, standard output and
/// standard error.
pub fn cli(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(bin())
        .arg(args[0])
        .args(["--server", url])
        .args(&args[1..])
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// An example binary built by `cargo test` (examples are built with the
/// tests), next to the `leasehold` binary.
pub fn example(name: &str) -> PathBuf {
    let p = bin()
        .parent()
        .expect("binary dir")
        .join("examples")
        .join(name);
    assert!(p.exists(), "example {name} not built at {}", p.display());
    p
}

/// Whether the tests run against the etcd backend
/// (`LEASEHOLD_TEST_BACKEND=etcd`) rather than sled.
pub fn etcd_mode() -> bool {
    match std::env::var("LEASEHOLD_TEST_BACKEND").as_deref() {
        Ok("etcd") => true,
        Ok("sled") | Ok("") | Err(_) => false,
        Ok(other) => panic!("LEASEHOLD_TEST_BACKEND={other:?}: use sled or etcd"),
    }
}

/// Whether test servers run with TLS and a policy
/// (`LEASEHOLD_TEST_SECURE=1`).
pub fn secure_mode() -> bool {
    match std::env::var("LEASEHOLD_TEST_SECURE").as_deref() {
        Ok("1") => true,
        Ok("0") | Ok("") | Err(_) => false,
        Ok(other) => panic!("LEASEHOLD_TEST_SECURE={other:?}: use 1 or 0"),
    }
}

/// The certificates and policy of secure mode, made once per test process.
pub fn secured() -> &'static pki::Secured {
    static S: std::sync::OnceLock<pki::Secured> = std::sync::OnceLock::new();
    S.get_or_init(pki::secured)
}

/// How the tests' clients reach a server at `url`: with the CA and the
/// bearer token of secure mode when the url is `https://`.
pub fn security(url: &str) -> Security {
    if !url.starts_with("https://") {
        return Security::default();
    }
    Security {
        ca_pem: Some(secured().ca_pem.clone().into_bytes()),
        token: Some(pki::TEST_SECRET.to_owned()),
        ..Security::default()
    }
}

/// A channel with every call carrying secure mode's bearer token.
pub type Transport = tonic::service::interceptor::InterceptedService<
    tonic::transport::Channel,
    fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>,
>;

fn with_test_token(mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    let v = format!("Bearer {}", pki::TEST_SECRET).parse().unwrap();
    r.metadata_mut().insert("authorization", v);
    Ok(r)
}

fn no_token(r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    Ok(r)
}

/// A connection to `url` without credentials: TLS with secure mode's CA
/// for an `https://` url.
pub async fn plain_channel(url: &str) -> tonic::transport::Channel {
    let mut e = tonic::transport::Endpoint::from_shared(url.to_owned()).unwrap();
    if url.starts_with("https://") {
        e = e
            .tls_config(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(&secured().ca_pem)),
            )
            .unwrap();
    }
    e.connect().await.unwrap()
}

/// A connection to `url` for the generated clients: with secure mode's CA
/// and bearer token for an `https://` url.
pub async fn channel(url: &str) -> Transport {
    let f: fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> =
        if url.starts_with("https://") {
            with_test_token
        } else {
            no_token
        };
    tonic::service::interceptor::InterceptedService::new(plain_channel(url).await, f)
}

/// The shortest TTL the backend accepts: the server's default 100 ms on
/// sled, etcd's minimum lease TTL (2 s with etcd's defaults) on etcd.
pub fn min_ttl() -> Duration {
    if etcd_mode() {
        etcd::MIN_TTL
    } else {
        Limits::default().min_ttl
    }
}

/// A TTL of about `d` that the backend can keep: `d` itself on sled; on
/// etcd, whole seconds, at least etcd's minimum.
pub fn ttl(d: Duration) -> Duration {
    if etcd_mode() {
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        Duration::from_secs(secs).max(etcd::MIN_TTL)
    } else {
        d
    }
}

/// How much later than its TTL a lease may end on the backend: nothing on
/// sled (expiry is decided at every check); on etcd, up to a second or
/// so (etcd looks for expired leases every 500 ms, then revokes through
/// raft).
pub fn expiry_slack() -> Duration {
    if etcd_mode() {
        Duration::from_millis(1500)
    } else {
        Duration::ZERO
    }
}

/// How long a test waits for a state it expects before it gives up: far
/// longer than any stall of a loaded machine, so that only a state that
/// never comes fails the test. Waiting costs only the time the state takes.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(15);

/// Waits for a state, not for a time: calls `f` every few milliseconds
/// until it returns `Some`, and returns that. Panics naming `what` if
/// that has not happened within [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t = std::time::Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            t.elapsed() < PATIENCE,
            "waited {PATIENCE:?} for {what}, in vain"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a test without a runtime (one that drives child
/// processes from plain threads): blocks the thread between looks.
pub fn eventually_blocking<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t.elapsed() < PATIENCE,
            "waited {PATIENCE:?} for {what}, in vain"
        );
        std::thread::sleep(POLL);
    }
}

/// The real server, in this process, with its own runtime thread pool
/// shared with the test.
pub struct TestServer {
    pub addr: SocketAddr,
    /// Whether it serves TLS (its url is then `https://`).
    pub tls: bool,
    pub node: Backend,
    /// The RPC counters the server records, as `/metrics` renders them.
    pub rpc: Arc<RpcMetrics>,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::with_limits(Limits::default()).await
    }

    pub async fn with_limits(limits: Limits) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, limits).await
    }

    pub async fn start_in(dir: tempfile::TempDir, limits: Limits) -> TestServer {
        let config = server::Config {
            limits,
            drain_timeout: Duration::from_secs(2),
            ..server::Config::default()
        };
        Self::with_config(dir, config).await
    }

    pub async fn with_config(dir: tempfile::TempDir, mut config: server::Config) -> TestServer {
        let node: Backend = if etcd_mode() {
            let node = leasehold::etcd::EtcdNode::open(etcd::frontend_config(
                etcd::shared_endpoints(),
                &etcd::fresh_prefix(),
            ))
            .await
            .unwrap();
            config.limits.min_ttl = ttl(config.limits.min_ttl).max(node.min_ttl());
            node.into()
        } else {
            let store = SledStore::open(dir.path()).unwrap();
            Node::open(Arc::new(store)).unwrap().into()
        };
        Self::serve(node, dir, config).await
    }

    /// Serves `node` (made by the caller), with `dir` as its data dir.
    pub async fn serve(
        node: Backend,
        dir: tempfile::TempDir,
        config: server::Config,
    ) -> TestServer {
        let mut config = config;
        let rpc = Arc::new(RpcMetrics::default());
        if secure_mode() && config.tls.is_none() {
            let s = secured();
            config.tls = Some(
                server::tls::Tls::load(server::tls::TlsFiles {
                    cert: s.cert_file.clone(),
                    key: s.key_file.clone(),
                    client_ca: None,
                    client_cert_required: false,
                })
                .unwrap(),
            );
            config.auth =
                Some(server::auth::Auth::load(s.policy_file.clone(), rpc.clone()).unwrap());
        }
        let tls = config.tls.is_some();
        // Bind first, then serve: no sleep to wait for start-up.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let n = node.clone();
        let r = rpc.clone();
        let done = tokio::spawn(async move {
            server::run(listener, n, config, r, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        TestServer {
            addr,
            tls,
            node,
            rpc,
            dir,
            stop: Some(tx),
            done: Some(done),
        }
    }

    pub fn url(&self) -> String {
        if self.tls {
            format!("https://{}", self.addr)
        } else {
            format!("http://{}", self.addr)
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect_with(&self.url(), security(&self.url()))
            .await
            .unwrap()
    }

    /// Waits until exactly `n` Acquire calls wait in line on this server
    /// (all jobs), as its metrics gauge counts them.
    pub async fn wait_for_waiters(&self, n: usize) {
        eventually(&format!("{n} waiting Acquire calls"), || async {
            (self.node.snapshot().waiters == n).then_some(())
        })
        .await
    }

    /// What `GET /metrics` on the admin port would answer.
    pub fn metrics(&self) -> String {
        leasehold::metrics::render(&self.node, &self.rpc)
    }

    /// Shuts down gracefully and hands back the data dir.
    pub async fn stop(mut self) -> tempfile::TempDir {
        let _ = self.stop.take().unwrap().send(());
        self.done.take().unwrap().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// `leasehold serve` on `data_dir`, listening on ports the OS picks.
pub fn serve_command(data_dir: &Path) -> Command {
    let mut c = Command::new(bin());
    c.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(data_dir);
    c
}

/// The real server as a child process, for tests that kill or pause it.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub data_dir: PathBuf,
}

impl ServerProcess {
    /// Starts `leasehold serve` on `data_dir` with ports the OS picks, and
    /// waits for the line it prints once both listeners are bound.
    pub fn start(data_dir: &Path, extra: &[&str]) -> ServerProcess {
        let mut cmd = serve_command(data_dir);
        cmd.args(extra);
        Self::spawn(cmd, data_dir)
    }

    /// Starts `cmd` (a `leasehold serve` command) and waits for the line it
    /// prints once both listeners are bound.
    pub fn spawn(cmd: Command, data_dir: &Path) -> ServerProcess {
        Self::spawn_with_stderr(cmd, data_dir, Stdio::inherit())
    }

    /// [`ServerProcess::spawn`], with the server's log (warnings and
    /// errors) going to `stderr`.
    pub fn spawn_with_stderr(mut cmd: Command, data_dir: &Path, stderr: Stdio) -> ServerProcess {
        let mut child = cmd
            .env(
                "RUST_LOG",
                std::env::var("LEASEHOLD_TEST_SERVER_LOG").unwrap_or("warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start leasehold serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "leasehold listening on ADDR admin ADDR"
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(
            words.len() == 6 && words[1] == "listening",
            "unexpected start-up line {line:?}"
        );
        ServerProcess {
            child,
            addr: words[3].parse().unwrap(),
            admin: words[5].parse().unwrap(),
            data_dir: data_dir.to_owned(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits until this server has counted at least `n` renewals
    /// (`leasehold_renewals_total` on `/metrics`).
    pub async fn wait_for_renewals(&self, n: u64) {
        let admin = self.admin;
        eventually(&format!("{n} renewals"), || async move {
            let (_, m) = admin_request(admin, "/metrics").await;
            (metric(&m, "leasehold_renewals_total")? >= n as f64).then_some(())
        })
        .await
    }

    /// Waits until exactly `n` Acquire calls wait in line on this server
    /// (all jobs), as its `/metrics` gauge counts them.
    pub async fn wait_for_waiters(&self, n: usize) {
        let admin = self.admin;
        eventually(&format!("{n} waiting Acquire calls"), || async move {
            let (_, m) = admin_request(admin, "/metrics").await;
            (metric(&m, "leasehold_waiting_acquires") == Some(n as f64)).then_some(())
        })
        .await
    }

    /// Sends `sig` to the server; SIGSTOP returns once it has stopped
    /// ([`signal`]).
    pub fn signal(&self, sig: i32) {
        signal(self.pid() as u32, sig);
    }

    /// SIGKILL, and reap.
    pub fn kill9(mut self) {
        self.signal(libc::SIGKILL);
        self.child.wait().unwrap();
    }

    /// SIGTERM: a clean stop, which must exit 0 within 20 s.
    pub fn stop(mut self) {
        self.signal(libc::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the server exited with {status}");
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not stop within 20 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `sig` to every process of the group `pgid` leads.
pub fn signal_group(pgid: u32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let r = unsafe { libc::kill(-(pgid as i32), sig) };
    assert_eq!(r, 0, "kill(-{pgid}, {sig})");
}

/// Sends `sig` to a process. SIGSTOP returns only once every thread of
/// it has stopped ([`wait_stopped`]).
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig})");
    if sig == libc::SIGSTOP {
        wait_stopped(pid);
    }
}

/// Waits until every thread of process `pid` is stopped, as
/// `/proc/{pid}/task/*/stat` says (state `T`), or the process is gone.
/// kill(2) returns once SIGSTOP is sent, not once it has taken effect: the
/// process stops when one of its threads takes the signal, and on a loaded
/// machine that thread may wait for a CPU while another of its threads
/// answers one more call, or acknowledges one more proposal. A test that
/// pauses a process means "nothing from it from now on".
pub fn wait_stopped(pid: u32) {
    let tasks = format!("/proc/{pid}/task");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let Ok(dir) = std::fs::read_dir(&tasks) else {
            return; // gone
        };
        let states: Vec<char> = dir
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
            .filter_map(|stat| stat.rsplit_once(')')?.1.trim_start().chars().next())
            .collect();
        if states.iter().all(|s| matches!(s, 'T' | 't' | 'Z' | 'X')) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} did not stop within 30 s of SIGSTOP: its threads' states {states:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A plain HTTP/1.0 GET on the admin port, so the tests need no HTTP
/// client crate: the status code and the body.
pub async fn admin_request(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (code, body.to_owned())
}

/// The value of an unlabelled metric in a `/metrics` text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// gRPC with messages as raw bytes, over the real transport: for what the
/// typed client cannot send (invalid UTF-8 in a string field, hand-patched
/// messages).
pub mod raw {
    use bytes::{Buf, BufMut};
    use tokio_stream::Stream;
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    use tonic::codegen::http::uri::PathAndQuery;
    use tonic::{Request, Status, Streaming};

    /// Encodes and decodes messages as the bytes they are.
    #[derive(Debug, Default, Clone, Copy)]
    pub struct BytesCodec;

    impl Codec for BytesCodec {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = BytesCodec;
        type Decoder = BytesCodec;
        fn encoder(&mut self) -> Self::Encoder {
            BytesCodec
        }
        fn decoder(&mut self) -> Self::Decoder {
            BytesCodec
        }
    }

    impl Encoder for BytesCodec {
        type Item = Vec<u8>;
        type Error = Status;
        fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
            buf.put_slice(&item);
            Ok(())
        }
    }

    impl Decoder for BytesCodec {
        type Item = Vec<u8>;
        type Error = Status;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
            let mut v = vec![0; buf.remaining()];
            buf.copy_to_slice(&mut v);
            Ok(Some(v))
        }
    }

    async fn grpc(url: &str) -> tonic::client::Grpc<super::Transport> {
        let mut g = tonic::client::Grpc::new(super::channel(url).await);
        g.ready().await.unwrap();
        g
    }

    /// A unary call of `path` (`/leasehold.v1.Leases/Acquire`) with `msg`
    /// as the request message's bytes.
    pub async fn unary(url: &str, path: &'static str, msg: Vec<u8>) -> Result<Vec<u8>, Status> {
        grpc(url)
            .await
            .unary(
                Request::new(msg),
                PathAndQuery::from_static(path),
                BytesCodec,
            )
            .await
            .map(tonic::Response::into_inner)
    }

    /// A bidirectional stream of `path`, sending what `msgs` yields.
    pub async fn stream(
        url: &str,
        path: &'static str,
        msgs: impl Stream<Item = Vec<u8>> + Send + 'static,
    ) -> Result<Streaming<Vec<u8>>, Status> {
        grpc(url)
            .await
            .streaming(
                Request::new(msgs),
                PathAndQuery::from_static(path),
                BytesCodec,
            )
            .await
            .map(tonic::Response::into_inner)
    }

    /// `msg` with the one occurrence of `marker` overwritten by 0xFF bytes,
    /// which are never valid UTF-8: the lengths stay right, so the message
    /// is well-formed protobuf with a string that is not UTF-8.
    pub fn not_utf8(mut msg: Vec<u8>, marker: &str) -> Vec<u8> {
        let m = marker.as_bytes();
        let at: Vec<usize> = (0..=msg.len().saturating_sub(m.len()))
            .filter(|&i| &msg[i..i + m.len()] == m)
            .collect();
        assert_eq!(at.len(), 1, "{marker:?} occurs once in the message");
        msg[at[0]..at[0] + m.len()].fill(0xFF);
        msg
    }
}

/// Where a test's servers keep their state: a data dir, or a prefix on the
/// shared etcd cluster.
pub enum Place {
    Local(tempfile::TempDir),
    Etcd { endpoints: String, prefix: String },
}

impl Place {
    pub fn local() -> Place {
        Place::Local(tempfile::tempdir().unwrap())
    }

    pub fn etcd() -> Place {
        Place::Etcd {
            endpoints: etcd::shared_endpoints().join(","),
            prefix: etcd::fresh_prefix(),
        }
    }

    /// A server (or frontend) on this place, with `extra` flags.
    pub fn start(&self, extra: &[&str]) -> ServerProcess {
        match self {
            Place::Local(dir) => ServerProcess::start(dir.path(), extra),
            Place::Etcd { endpoints, prefix } => etcd::frontend(endpoints, prefix, extra),
        }
    }
}
