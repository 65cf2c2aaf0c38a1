//! Start-up and shutdown of the real `leasehold serve` process.

use crate::common;

use std::time::Duration;

use common::{serve_command, ServerProcess};
use leasehold::client::{Client, ClientError};

#[test]
fn a_data_dir_in_use_stops_start_up_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let first = ServerProcess::start(dir.path(), &[]);
    let out = serve_command(dir.path()).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "in use by process {} (a leasehold server)",
            first.pid()
        )),
        "{err}"
    );
}

#[test]
fn a_data_dir_that_cannot_be_opened_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let out = serve_command(&file).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot create data dir"), "{err}");
}

#[test]
fn bad_limits_stop_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = serve_command(dir.path())
        .args(["--min-ttl", "2s", "--max-ttl", "1s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_ttl"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_ends_waiters_and_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    let a = c
        .acquire("j", "a", Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    assert!(a.acquired);
    c.checked_write("j", 1, b"k", b"v".to_vec()).await.unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            c.acquire("j", "b", Duration::from_secs(60), Duration::from_secs(60))
                .await
        })
    };
    // Let the waiter reach the server before the signal.
    server.wait_for_waiters(1).await;
    let mut watch = c.watch("j").await.unwrap();
    watch.message().await.unwrap().unwrap(); // the current state
    server.signal(libc::SIGTERM);
    let end = tokio::time::timeout(common::PATIENCE, watch.message())
        .await
        .unwrap();
    assert!(
        matches!(&end, Err(s) if s.code() == tonic::Code::Unavailable),
        "a watch ends with UNAVAILABLE on shutdown: {end:?}"
    );
    let r = tokio::time::timeout(common::PATIENCE, waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(r, Err(ClientError::Unavailable(_))), "{r:?}");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "graceful exit: {status:?}");

    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    let l = c.get_lease("j").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.token),
        (Some("a"), 1),
        "held across the restart"
    );
    assert_eq!(c.read("j", b"k").await.unwrap().value, b"v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_port_serves_metrics_and_health() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    c.acquire(
        "bridge_health",
        "a",
        Duration::from_secs(60),
        Duration::ZERO,
    )
    .await
    .unwrap();
    // The streams have their own RPC lines, and what flows on them counts.
    let mut ka = c.keep_alive().await.unwrap();
    ka.renew(&[leasehold::client::KeepAliveRenewal::new(
        "bridge_health",
        "a",
        1,
        Duration::from_secs(60),
    )])
    .await
    .unwrap();
    let mut ws = c.write_stream().await.unwrap();
    ws.write(&[leasehold::client::StreamWrite::put(
        "bridge_health",
        1,
        b"k",
        b"v".to_vec(),
    )])
    .await
    .unwrap();
    let m = admin_get(server.admin, "/metrics").await;
    // Both streams are open: answered, so timed, but not ended, so not yet
    // counted by the status they end with.
    assert!(
        !m.contains("leasehold_rpc_responses_total{method=\"KeepAlive\""),
        "{m}"
    );
    for line in [
        "leasehold_rpc_duration_seconds_count{method=\"KeepAlive\"} 1",
        "leasehold_rpc_duration_seconds_count{method=\"WriteStream\"} 1",
        "leasehold_renewals_total 1",
        "leasehold_writes_total 1",
    ] {
        assert!(m.contains(line), "no {line} in\n{m}");
    }
    assert!(
        m.contains("leasehold_rpc_duration_seconds_count{method=\"other\"} 0"),
        "{m}"
    );
    assert!(
        m.contains("leasehold_job_leader{job=\"bridge_health\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("leasehold_job_token{job=\"bridge_health\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("leasehold_rpc_duration_seconds_count{method=\"Acquire\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("leasehold_rpc_responses_total{method=\"Acquire\",code=\"OK\"} 1"),
        "{m}"
    );
    assert_eq!(admin_get(server.admin, "/healthz").await, "ok\n");
}

/// A plain HTTP/1.0 GET, so the test needs no HTTP client crate.
async fn admin_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_owned()
}

/// sled opens a store whose files are corrupt, or gone, as an empty store.
/// Starting on that would issue tokens again; the server refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_lost_its_data_stops_start_up() {
    for damage in ["garbage", "deleted"] {
        let dir = tempfile::tempdir().unwrap();
        let mut server = ServerProcess::start(dir.path(), &[]);
        let c = Client::connect(&server.url()).await.unwrap();
        assert!(
            c.acquire("j", "a", Duration::from_secs(60), Duration::ZERO)
                .await
                .unwrap()
                .acquired
        );
        server.signal(libc::SIGTERM);
        assert!(server.child.wait().unwrap().success());
        let db = dir.path().join("db");
        match damage {
            "garbage" => {
                let len = std::fs::metadata(&db).unwrap().len() as usize;
                let noise: Vec<u8> = (0..len).map(|i| (i * 7919 % 251) as u8).collect();
                std::fs::write(&db, noise).unwrap();
            }
            _ => std::fs::remove_file(&db).unwrap(),
        }
        let out = serve_command(dir.path()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{damage}: started on a damaged store: {err}"
        );
        assert!(
            err.contains("/db:") && err.contains("refusing to start"),
            "{damage}: {err}"
        );
    }
}

/// A flag that is refused stops start-up before anything is opened or
/// bound: "listening" is printed only once every flag was accepted, and the
/// data dir is left untouched.
#[test]
fn a_bad_flag_stops_start_up_before_listening() {
    for (flag, value) in [
        ("--max-in-flight", "0"),
        ("--max-connections", "0"),
        ("--max-streams-per-connection", "0"),
        ("--max-in-flight-per-connection", "0"),
        ("--max-watchers", "0"),
        ("--max-waiters-per-job", "0"),
        ("--max-write-rate-per-connection", "0"),
        ("--max-write-rate-per-connection", "16MiB"),
        ("--max-acquire-rate-per-connection", "0"),
        ("--max-acquire-rate-per-connection", "fast"),
        ("--handshake-timeout", "0s"),
        ("--idle-timeout", "0s"),
        ("--idle-timeout", "soon"),
        ("--metrics-max-jobs", "many"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let out = serve_command(&data).args([flag, value]).output().unwrap();
        assert!(!out.status.success(), "{flag} {value} was accepted");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("listening"), "{flag}: {stdout}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(!data.exists(), "{flag}: the data dir was created");
    }
}
