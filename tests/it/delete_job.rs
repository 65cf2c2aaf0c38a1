//! Issue 17, bounded state: `DeleteJob`, the new-job token floor that keeps
//! a deleted job's tokens from coming back (across crashes and clean
//! restarts), and the limits `--max-jobs` and `--max-keys-per-job`. Each
//! test runs on both backends, against real server processes.

use crate::common;

use std::time::Duration;

use common::{Place, ServerProcess};
use leasehold::client::{Client, ClientError, StreamWrite, WriteOutcome};
use leasehold::proto;
use tonic::Code;

const TTL: Duration = Duration::from_secs(30);

async fn client(p: &ServerProcess) -> Client {
    Client::connect(&p.url()).await.unwrap()
}

/// Acquires and releases `job` until its token is `n`; returns the holder
/// that holds it at `n` (not released).
async fn token_up_to(c: &Client, job: &str, n: u64) -> String {
    loop {
        let holder = format!("h-{}", uuid::Uuid::new_v4());
        let a = c.acquire(job, &holder, TTL, Duration::ZERO).await.unwrap();
        assert!(a.acquired, "{a:?}");
        if a.lease.token >= n {
            assert_eq!(a.lease.token, n);
            return holder;
        }
        c.release(job, &holder, a.lease.token).await.unwrap();
    }
}

/// The reason and the limit a refusal names in its `ErrorInfo`.
fn reason(st: &tonic::Status) -> (String, String) {
    use tonic_types::StatusExt;
    let info = st
        .get_error_details()
        .error_info()
        .cloned()
        .unwrap_or_else(|| panic!("no ErrorInfo in {st:?}"));
    let limit = info.metadata.get("limit").cloned().unwrap_or_default();
    (info.reason, limit)
}

/// Acquire X to token 7, delete X (refused while held, nothing changed),
/// restart: X starts above 7, and a job that was not deleted keeps its own
/// counter. Once after a crash (SIGKILL: the log replays the deletion), once
/// after a clean stop (SIGTERM: the deletion is in the checkpoint).
async fn deleted_job_never_repeats_a_token(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let mut raw = proto::leases_client::LeasesClient::connect(p.url())
        .await
        .unwrap();
    let other = c.acquire("other", "o", TTL, Duration::ZERO).await.unwrap();
    assert_eq!(other.lease.token, 1);
    let holder = token_up_to(&c, "x", 7).await;
    c.checked_write("x", 7, b"k1", b"one".to_vec())
        .await
        .unwrap();
    c.checked_write("x", 7, b"k2", b"two".to_vec())
        .await
        .unwrap();
    c.delete("x", 7, b"k2").await.unwrap();

    // Held: refused, nothing changed.
    let st = raw
        .delete_job(proto::DeleteJobRequest { job: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::FailedPrecondition, "{st:?}");
    assert_eq!(reason(&st).0, "JOB_IN_USE");
    assert!(st.message().contains("held by"), "{}", st.message());
    assert!(matches!(
        c.delete_job("x").await,
        Err(ClientError::JobInUse(_))
    ));
    assert_eq!(c.get_lease("x").await.unwrap().token, 7);
    assert_eq!(c.read("x", b"k1").await.unwrap().value, b"one");
    // Bad input names the field.
    let st = raw
        .delete_job(proto::DeleteJobRequest { job: String::new() })
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::InvalidArgument, "{st:?}");

    c.release("x", &holder, 7).await.unwrap();
    assert!(c.delete_job("x").await.unwrap(), "deleted");
    assert!(!c.delete_job("x").await.unwrap(), "nothing left to delete");
    assert_eq!(c.get_lease("x").await.unwrap().token, 0);
    assert!(!c.read("x", b"k1").await.unwrap().found);
    assert!(c.list_keys("x", b"").await.unwrap().is_empty());
    assert!(c
        .list_leases("")
        .await
        .unwrap()
        .iter()
        .all(|l| l.job != "x"));

    // A crash: the deletion and the floor come back from the log.
    p.kill9();
    let p = place.start(&[]);
    let c = client(&p).await;
    assert_eq!(c.get_lease("x").await.unwrap().token, 0, "still deleted");
    assert!(!c.read("x", b"k1").await.unwrap().found);
    let a = c.acquire("x", "new", TTL, Duration::ZERO).await.unwrap();
    assert!(a.acquired);
    assert_eq!(a.lease.token, 8, "above every token the deleted job issued");
    c.release("other", "o", 1).await.unwrap();
    let a2 = c.acquire("other", "o2", TTL, Duration::ZERO).await.unwrap();
    assert_eq!(
        a2.lease.token, 2,
        "a job that was not deleted keeps its counter"
    );
    c.release("x", "new", 8).await.unwrap();
    assert!(c.delete_job("x").await.unwrap());

    // A clean stop: the same from the checkpoint.
    p.signal(libc::SIGTERM);
    let mut p = p;
    assert!(p.child.wait().unwrap().success());
    let p = place.start(&[]);
    let c = client(&p).await;
    let a = c.acquire("x", "again", TTL, Duration::ZERO).await.unwrap();
    assert_eq!(a.lease.token, 9);
    let a = c
        .acquire("brand-new", "n", TTL, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(a.lease.token, 9, "a new job starts above the floor too");
    drop(p);
    if let Place::Local(dir) = &place {
        let out = std::process::Command::new(common::bin())
            .arg("check")
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "`leasehold check` after deletions: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_job_never_repeats_a_token() {
    deleted_job_never_repeats_a_token(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_job_never_repeats_a_token_on_etcd() {
    deleted_job_never_repeats_a_token(Place::etcd()).await;
}

/// Over `--max-jobs` an Acquire of a new job, and over `--max-keys-per-job`
/// a write of a new key (unary and on a stream), are refused with
/// RESOURCE_EXHAUSTED, reason QUOTA_EXCEEDED naming the limit; nothing
/// changes; existing jobs and keys go on; a deleted key keeps its place
/// (its tombstone stays); `DeleteJob` gives the room back; a restart counts
/// the same.
async fn limits_on_jobs_and_keys(place: Place) {
    let flags = ["--max-jobs", "3", "--max-keys-per-job", "2"];
    let p = place.start(&flags);
    let c = client(&p).await;
    let mut raw = proto::leases_client::LeasesClient::connect(p.url())
        .await
        .unwrap();
    let mut store = proto::fenced_store_client::FencedStoreClient::connect(p.url())
        .await
        .unwrap();
    let quota = |st: tonic::Status, limit: &str| {
        assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
        assert_eq!(
            reason(&st),
            ("QUOTA_EXCEEDED".to_owned(), limit.to_owned()),
            "{st:?}"
        );
        assert!(st.message().contains(limit), "{}", st.message());
    };
    for j in ["a", "b", "c"] {
        assert!(
            c.acquire(j, "w", TTL, Duration::ZERO)
                .await
                .unwrap()
                .acquired
        );
    }
    let acquire_d = proto::AcquireRequest {
        job: "d".into(),
        holder: "w".into(),
        ttl: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        wait: None,
        bind_to_stream: false,
        preferred: false,
        value: Default::default(),
        slots: 0,
    };
    quota(
        raw.acquire(acquire_d.clone()).await.unwrap_err(),
        "--max-jobs",
    );
    match c.acquire("d", "w", TTL, Duration::ZERO).await {
        Err(ClientError::QuotaExceeded { limit, max, .. }) => {
            assert_eq!((limit.as_deref(), max), (Some("--max-jobs"), Some(3)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.get_lease("d").await.unwrap().token, 0, "nothing changed");
    assert_eq!(c.list_leases("").await.unwrap().len(), 3);
    // Existing jobs go on.
    assert!(
        c.acquire("a", "w", TTL, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );

    // Keys.
    let write = |key: &str| proto::CheckedWriteRequest {
        proof: Default::default(),
        job: "a".into(),
        token: 1,
        key: key.as_bytes().to_vec(),
        value: b"v".to_vec(),
        delete: false,
    };
    store.checked_write(write("k1")).await.unwrap();
    store.checked_write(write("k2")).await.unwrap();
    quota(
        store.checked_write(write("k3")).await.unwrap_err(),
        "--max-keys-per-job",
    );
    assert!(!c.read("a", b"k3").await.unwrap().found, "nothing written");
    // Existing keys go on; a deleted key keeps its place.
    store.checked_write(write("k1")).await.unwrap();
    c.delete("a", 1, b"k2").await.unwrap();
    quota(
        store.checked_write(write("k3")).await.unwrap_err(),
        "--max-keys-per-job",
    );
    store.checked_write(write("k2")).await.unwrap();
    let mut ws = c.write_stream().await.unwrap();
    let out = ws
        .write(&[
            StreamWrite::put("a", 1, b"k1", b"ok".to_vec()),
            StreamWrite::put("a", 1, b"k3", b"over".to_vec()),
        ])
        .await
        .unwrap();
    assert!(matches!(out[0], WriteOutcome::Written { .. }), "{out:?}");
    match &out[1] {
        WriteOutcome::QuotaExceeded { message } => {
            assert!(message.contains("--max-keys-per-job"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    drop(ws);
    assert!(!c.read("a", b"k3").await.unwrap().found);
    let (code, text) = common::admin_request(p.admin, "/metrics").await;
    assert_eq!(code, 200);
    let refused = |limit: &str| {
        common::metric(
            &text,
            &format!("leasehold_quota_exceeded_total{{limit=\"{limit}\"}}"),
        )
        .unwrap_or_else(|| panic!("no count for {limit} in /metrics"))
    };
    assert_eq!(refused("--max-jobs"), 2.0);
    assert_eq!(refused("--max-keys-per-job"), 3.0);

    // A restart counts the same (the single node counts from its store).
    p.kill9();
    let p = place.start(&flags);
    let c = client(&p).await;
    let mut raw = proto::leases_client::LeasesClient::connect(p.url())
        .await
        .unwrap();
    let mut store = proto::fenced_store_client::FencedStoreClient::connect(p.url())
        .await
        .unwrap();
    quota(
        raw.acquire(acquire_d.clone()).await.unwrap_err(),
        "--max-jobs",
    );
    // The lease of `a` is live again after the restart, with its token.
    quota(
        store.checked_write(write("k3")).await.unwrap_err(),
        "--max-keys-per-job",
    );

    // Deleting a job gives its room back.
    c.release("c", "w", 1).await.unwrap();
    assert!(c.delete_job("c").await.unwrap());
    let d = raw.acquire(acquire_d).await.unwrap().into_inner();
    assert!(d.acquired);
    assert_eq!(d.lease.unwrap().token, 2, "above the deleted job's token");
    c.release("a", "w", 1).await.unwrap();
    assert!(c.delete_job("a").await.unwrap());
    let a = c.acquire("a", "w", TTL, Duration::ZERO).await.unwrap();
    assert_eq!(a.lease.token, 2);
    for k in ["k1", "k2"] {
        c.checked_write("a", 2, k.as_bytes(), b"v".to_vec())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_on_jobs_and_keys_are_refused_and_nothing_changes() {
    limits_on_jobs_and_keys(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_on_jobs_and_keys_are_refused_and_nothing_changes_on_etcd() {
    limits_on_jobs_and_keys(Place::etcd()).await;
}
