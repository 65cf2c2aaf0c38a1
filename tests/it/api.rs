//! The gRPC API against the real server on 127.0.0.1, one behaviour per
//! test: races, hand-over, waiting, watching, the fenced store, bad input,
//! health, reflection and metrics.
//!
//! Runs against either backend: `LEASEHOLD_TEST_BACKEND=etcd` runs every
//! test on an etcd frontend (see `common`), with short TTLs rounded up to
//! etcd's whole seconds by `common::ttl`.

use crate::common;

use std::time::{Duration, Instant};

use common::TestServer;
use leasehold::client::{ClientError, EventKind};
use leasehold::lease::Limits;
use leasehold::proto;
use tonic::Code;
use tonic_types::StatusExt;

const TTL: Duration = Duration::from_secs(30);
const NOW: Duration = Duration::ZERO;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_holders_race_exactly_one_wins_and_the_other_sees_it() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let holder = format!("w{i}@race");
            (
                holder.clone(),
                c.acquire("race", &holder, TTL, NOW).await.unwrap(),
            )
        }));
    }
    let mut winners = Vec::new();
    let mut seen = Vec::new();
    for t in tasks {
        let (holder, a) = t.await.unwrap();
        if a.acquired {
            assert_eq!(a.lease.holder.as_deref(), Some(holder.as_str()));
            winners.push(holder);
        } else {
            seen.push(a.lease);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one holder wins: {winners:?}");
    assert_eq!(seen.len(), 7);
    for l in seen {
        assert_eq!(
            l.holder.as_deref(),
            Some(winners[0].as_str()),
            "losers see the holder"
        );
        assert_eq!(l.token, 1, "and its token");
        assert!(l.remaining.unwrap() <= TTL);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_over_to_a_waiting_acquire_at_once() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let a = c.acquire("handover", "a@1", TTL, NOW).await.unwrap();
    assert!(a.acquired);
    let c2 = c.clone();
    let waiter = tokio::spawn(async move {
        let r = c2
            .acquire("handover", "b@1", TTL, Duration::from_secs(20))
            .await
            .unwrap();
        (r, Instant::now())
    });
    // Let the waiter queue up: it shows in the metrics gauge.
    s.wait_for_waiters(1).await;
    let released = Instant::now();
    c.release("handover", "a@1", 1).await.unwrap();
    let (r, granted) = waiter.await.unwrap();
    let handover = granted - released;
    println!("handover time from Release call to the waiter's grant: {handover:?} (ttl {TTL:?})");
    assert!(r.acquired);
    assert_eq!(r.lease.token, 2);
    assert_eq!(r.lease.holder.as_deref(), Some("b@1"));
    // The waiter asked to wait 20 s, less than a's 30 s TTL: granted at
    // all, it was granted by the release, not by expiry. And at once: a
    // third of the TTL leaves room for a stall of the machine, and none
    // for a wait on the TTL.
    assert!(handover < TTL / 3, "handover took {handover:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_first_come_first_served() {
    let s = TestServer::start().await;
    let c = s.client().await;
    assert!(c.acquire("fifo", "h0", TTL, NOW).await.unwrap().acquired);
    let mut waiters = Vec::new();
    for i in 1..=3 {
        let c2 = c.clone();
        let holder = format!("h{i}");
        waiters.push(tokio::spawn(async move {
            c2.acquire("fifo", &holder, TTL, Duration::from_secs(20))
                .await
                .unwrap()
        }));
        // Queue them in a known order.
        s.wait_for_waiters(i).await;
    }
    // A newcomer that does not wait cannot jump the queue, even once the
    // lease is free.
    c.release("fifo", "h0", 1).await.unwrap();
    let mut token = 1;
    for (i, w) in waiters.into_iter().enumerate() {
        let r = w.await.unwrap();
        token += 1;
        assert!(r.acquired);
        assert_eq!(
            r.lease.holder.as_deref(),
            Some(format!("h{}", i + 1).as_str())
        );
        assert_eq!(r.lease.token, token);
        let jump = c.acquire("fifo", "jumper", TTL, NOW).await.unwrap();
        assert!(!jump.acquired);
        c.release("fifo", &format!("h{}", i + 1), token)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_granted_when_the_lease_expires() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let ttl = common::ttl(Duration::from_millis(300));
    let t0 = Instant::now();
    assert!(c.acquire("exp", "a", ttl, NOW).await.unwrap().acquired);
    // b holds for long: a stall of the machine longer than the short TTL
    // must not hand the job to the next waiter.
    let r = c.acquire("exp", "b", TTL, common::PATIENCE).await.unwrap();
    let waited = t0.elapsed();
    assert!(r.acquired);
    assert_eq!(r.lease.token, 2, "granted again after expiry: token + 1");
    assert!(waited >= ttl, "no takeover before the TTL: {waited:?}");
    // A waiter that gives up gets the current lease.
    let r = c
        .acquire("exp", "c", TTL, Duration::from_millis(150))
        .await
        .unwrap();
    assert!(!r.acquired);
    assert_eq!(r.lease.holder.as_deref(), Some("b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_the_token_and_expiry_loses_the_lease() {
    let s = TestServer::start().await;
    let c = s.client().await;
    // Long while the lease must outlive the calls; short once its expiry
    // is the point.
    let ttl = common::ttl(Duration::from_millis(200));
    let a = c.acquire("renew", "a", TTL, NOW).await.unwrap();
    assert_eq!(a.lease.token, 1);
    let l = c.renew("renew", "a", 1, TTL).await.unwrap();
    assert_eq!(l.token, 1);
    let again = c.acquire("renew", "a", TTL, NOW).await.unwrap();
    assert!(again.acquired);
    assert_eq!(
        again.lease.token, 1,
        "re-acquire by the live holder keeps the token"
    );
    match c.renew("renew", "b", 1, TTL).await {
        Err(ClientError::LeaseLost { current_token, .. }) => assert_eq!(current_token, Some(1)),
        other => panic!("renew by another holder: {other:?}"),
    }
    // A renewal sets the TTL, shorter too: let it expire, then renewing
    // is LEASE_LOST.
    let l = c.renew("renew", "a", 1, ttl).await.unwrap();
    assert_eq!((l.token, l.ttl), (1, Some(ttl)));
    let mut events = c.watch("renew").await.unwrap();
    let first = events.message().await.unwrap().unwrap();
    assert_eq!(first.kind, EventKind::Current as i32);
    let current = first.lease.unwrap();
    assert_eq!(current.token, 1);
    if !current.holder.is_empty() {
        // Still live when the watch began: the watch tells of the expiry.
        assert_eq!(current.holder, "a");
        let ev = tokio::time::timeout(common::PATIENCE, events.message())
            .await
            .expect("an expiry event")
            .unwrap()
            .unwrap();
        assert_eq!(ev.kind, EventKind::Expired as i32);
    }
    match c.renew("renew", "a", 1, ttl).await {
        Err(ClientError::LeaseLost { .. }) => {}
        other => panic!("renew after expiry: {other:?}"),
    }
    let a = c.acquire("renew", "a", ttl, NOW).await.unwrap();
    assert_eq!(a.lease.token, 2, "granted again after expiry: new token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sends_current_then_each_change() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let mut w = c.watch("w").await.unwrap();
    let ev = w.message().await.unwrap().unwrap();
    assert_eq!(ev.kind, EventKind::Current as i32);
    assert_eq!(ev.lease.unwrap().token, 0);
    c.acquire("w", "a", TTL, NOW).await.unwrap();
    let ev = w.message().await.unwrap().unwrap();
    assert_eq!(ev.kind, EventKind::Acquired as i32);
    let l = ev.lease.unwrap();
    assert_eq!((l.holder.as_str(), l.token), ("a", 1));
    c.renew("w", "a", 1, TTL).await.unwrap(); // no event
    c.release("w", "a", 1).await.unwrap();
    let ev = w.message().await.unwrap().unwrap();
    assert_eq!(ev.kind, EventKind::Released as i32, "renewals send nothing");
    let l = ev.lease.unwrap();
    assert_eq!((l.holder.as_str(), l.token), ("", 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_leases_pages_in_job_order() {
    let s = TestServer::start().await;
    let c = s.client().await;
    for i in 0..250 {
        c.acquire(&format!("fleet/{i:03}"), "h", TTL, NOW)
            .await
            .unwrap();
    }
    c.acquire("other", "h", TTL, NOW).await.unwrap();
    let all = c.list_leases("fleet/").await.unwrap();
    assert_eq!(all.len(), 250);
    assert!(all.windows(2).all(|w| w[0].job < w[1].job));
    let mut raw = proto::leases_client::LeasesClient::new(common::channel(&s.url()).await);
    let p = raw
        .list_leases(proto::ListLeasesRequest {
            prefix: "fleet/".into(),
            page_size: 100,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.leases.len(), 100);
    assert_eq!(p.leases[99].job, "fleet/099");
    let p = raw
        .list_leases(proto::ListLeasesRequest {
            prefix: "fleet/".into(),
            page_size: 100,
            page_token: p.next_page_token,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.leases[0].job, "fleet/100", "the next page resumes after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_store_accepts_only_the_live_token() {
    let s = TestServer::start().await;
    let c = s.client().await;
    // Every lease here outlives the calls made with it, but for a's last
    // renewal: its expiry is the point.
    let ttl = common::ttl(Duration::from_millis(300));
    c.acquire("f", "a", TTL, NOW).await.unwrap();
    assert_eq!(
        c.checked_write("f", 1, b"k", b"v1".to_vec()).await.unwrap(),
        1
    );
    assert_eq!(
        c.checked_write("f", 1, b"k", b"v2".to_vec()).await.unwrap(),
        2
    );
    // a's lease expires; b takes over but has written nothing yet.
    c.renew("f", "a", 1, ttl).await.unwrap();
    let b = c.acquire("f", "b", TTL, common::PATIENCE).await.unwrap();
    assert!(b.acquired);
    assert_eq!(b.lease.token, 2);
    match c.checked_write("f", 1, b"k", b"stale".to_vec()).await {
        Err(ClientError::Fenced {
            message,
            current_token,
        }) => {
            assert_eq!(current_token, Some(2));
            assert!(
                message.contains("token 2") || message.contains("at token 2"),
                "{message}"
            );
        }
        other => panic!("stale write: {other:?}"),
    }
    let v = c.read("f", b"k").await.unwrap();
    assert_eq!((v.value.as_slice(), v.token, v.version), (&b"v2"[..], 1, 2));
    // A token never issued is bad input, not a fence.
    match c.checked_write("f", 3, b"k", b"x".to_vec()).await {
        Err(ClientError::UnknownToken { current_token, .. }) => {
            assert_eq!(current_token, Some(2))
        }
        other => panic!("unissued token: {other:?}"),
    }
    // The new leader writes, deletes, and the key stays fenced.
    assert_eq!(
        c.checked_write("f", 2, b"k", b"v3".to_vec()).await.unwrap(),
        3
    );
    assert_eq!(
        c.checked_write("f", 2, b"k2", b"x".to_vec()).await.unwrap(),
        1
    );
    assert_eq!(c.delete("f", 2, b"k").await.unwrap(), 4);
    let v = c.read("f", b"k").await.unwrap();
    assert!(!v.found);
    assert_eq!((v.token, v.version), (2, 4));
    let keys = c.list_keys("f", b"").await.unwrap();
    assert_eq!(
        keys.iter().map(|k| k.key.as_slice()).collect::<Vec<_>>(),
        [&b"k2"[..]]
    );
    // After b releases, even b's token is fenced: nobody leads.
    c.release("f", "b", 2).await.unwrap();
    assert!(matches!(
        c.checked_write("f", 2, b"k2", b"y".to_vec()).await,
        Err(ClientError::Fenced { .. })
    ));
    let m = leasehold::metrics::render(&s.node, &Default::default());
    assert!(m.contains("leasehold_fenced_writes_total 2"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_keys_pages_and_stays_within_the_job() {
    let s = TestServer::start().await;
    let c = s.client().await;
    c.acquire("a", "h", TTL, NOW).await.unwrap();
    c.acquire("ab", "h", TTL, NOW).await.unwrap();
    for i in 0..150 {
        c.checked_write("a", 1, format!("cfg/{i:03}").as_bytes(), vec![1])
            .await
            .unwrap();
    }
    c.checked_write("a", 1, b"other", vec![]).await.unwrap();
    c.checked_write("ab", 1, b"cfg/x", vec![]).await.unwrap();
    let keys = c.list_keys("a", b"cfg/").await.unwrap();
    assert_eq!(keys.len(), 150);
    assert_eq!(keys[0].key, b"cfg/000");
    assert_eq!(c.list_keys("a", b"").await.unwrap().len(), 151);
    assert_eq!(c.list_keys("ab", b"").await.unwrap().len(), 1);
}

/// Every bad input gets INVALID_ARGUMENT naming the field and the limit,
/// and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_names_field_and_limit_and_changes_nothing() {
    let s = TestServer::start().await;
    let c = s.client().await;
    c.acquire("j", "a", TTL, NOW).await.unwrap();
    c.checked_write("j", 1, b"k", b"v".to_vec()).await.unwrap();
    let before = (
        c.get_lease("j").await.unwrap(),
        c.read("j", b"k").await.unwrap(),
    );

    let mut leases = proto::leases_client::LeasesClient::new(common::channel(&s.url()).await);
    let mut store =
        proto::fenced_store_client::FencedStoreClient::new(common::channel(&s.url()).await);
    let d = |ms: u64| {
        Some(prost_types::Duration {
            seconds: (ms / 1000) as i64,
            nanos: ((ms % 1000) * 1_000_000) as i32,
        })
    };
    let long = "x".repeat(257);
    // A TTL the backend accepts, and the shortest it names in errors.
    let ok = common::ttl(Duration::from_secs(1)).as_millis() as u64;
    let min_ttl = format!("{:?}", common::min_ttl());
    let acq = |job: &str, holder: &str, ttl, wait| proto::AcquireRequest {
        job: job.into(),
        holder: holder.into(),
        ttl,
        wait,
        bind_to_stream: false,
        preferred: false,
        value: Default::default(),
        slots: 0,
    };
    let write = |job: &str, token, key: Vec<u8>, value: Vec<u8>| proto::CheckedWriteRequest {
        proof: Default::default(),
        job: job.into(),
        token,
        key,
        value,
        delete: false,
    };

    let cases: Vec<(&str, &str, tonic::Status)> = vec![
        (
            "job",
            "empty",
            leases.acquire(acq("", "b", d(ok), None)).await.unwrap_err(),
        ),
        (
            "job",
            "256",
            leases
                .acquire(acq(&long, "b", d(ok), None))
                .await
                .unwrap_err(),
        ),
        (
            "holder",
            "empty",
            leases.acquire(acq("j", "", d(ok), None)).await.unwrap_err(),
        ),
        (
            "holder",
            "256",
            leases
                .acquire(acq("j", &long, d(ok), None))
                .await
                .unwrap_err(),
        ),
        (
            "ttl",
            min_ttl.as_str(),
            leases
                .acquire(acq("j", "b", d(99), None))
                .await
                .unwrap_err(),
        ),
        (
            "ttl",
            "3600s",
            leases
                .acquire(acq("j", "b", d(3_600_001), None))
                .await
                .unwrap_err(),
        ),
        (
            "ttl",
            "required",
            leases.acquire(acq("j", "b", None, None)).await.unwrap_err(),
        ),
        (
            "wait",
            "3600s",
            leases
                .acquire(acq("j", "b", d(ok), d(3_600_001)))
                .await
                .unwrap_err(),
        ),
        (
            "wait",
            "non-negative",
            leases
                .acquire(acq(
                    "j",
                    "b",
                    d(ok),
                    Some(prost_types::Duration {
                        seconds: -1,
                        nanos: 0,
                    }),
                ))
                .await
                .unwrap_err(),
        ),
        (
            "token",
            "must not be 0",
            leases
                .renew(proto::RenewRequest {
                    job: "j".into(),
                    holder: "a".into(),
                    token: 0,
                    ttl: d(ok),
                    value: Default::default(),
                })
                .await
                .unwrap_err(),
        ),
        (
            "token",
            "must not be 0",
            leases
                .release(proto::ReleaseRequest {
                    job: "j".into(),
                    holder: "a".into(),
                    token: 0,
                    give_back: false,
                })
                .await
                .unwrap_err(),
        ),
        (
            "key",
            "empty",
            store
                .checked_write(write("j", 1, vec![], b"v".to_vec()))
                .await
                .unwrap_err(),
        ),
        (
            "key",
            "1024",
            store
                .checked_write(write("j", 1, vec![b'k'; 1025], b"v".to_vec()))
                .await
                .unwrap_err(),
        ),
        (
            "value",
            "65536",
            store
                .checked_write(write("j", 1, b"k".to_vec(), vec![0; 65537]))
                .await
                .unwrap_err(),
        ),
        (
            "token",
            "must not be 0",
            store
                .checked_write(write("j", 0, b"k".to_vec(), b"v".to_vec()))
                .await
                .unwrap_err(),
        ),
        (
            "page_size",
            "1000",
            leases
                .list_leases(proto::ListLeasesRequest {
                    prefix: String::new(),
                    page_size: 1001,
                    page_token: String::new(),
                })
                .await
                .unwrap_err(),
        ),
    ];
    for (field, limit, status) in cases {
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().contains(field) && status.message().contains(limit),
            "message names {field:?} and {limit:?}: {:?}",
            status.message()
        );
        let info = status.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, "INVALID_ARGUMENT");
        assert_eq!(info.metadata["field"], field);
    }

    // A token never issued: INVALID_ARGUMENT with its own reason.
    let st = store
        .checked_write(write("j", 9, b"k".to_vec(), b"v".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::InvalidArgument);
    assert_eq!(
        st.get_error_details().error_info().unwrap().reason,
        "UNKNOWN_TOKEN"
    );

    let after = (
        c.get_lease("j").await.unwrap(),
        c.read("j", b"k").await.unwrap(),
    );
    assert_eq!(before.0.holder, after.0.holder);
    assert_eq!(before.0.token, after.0.token);
    assert_eq!(before.1, after.1, "the value is untouched");
    assert_eq!(
        c.list_leases("").await.unwrap().len(),
        1,
        "no job was created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_configurable_and_oversized_messages_are_refused_at_decode() {
    let limits = Limits {
        max_value_bytes: 16,
        ..Limits::default()
    };
    let s = TestServer::with_limits(limits).await;
    let c = s.client().await;
    c.acquire("j", "a", TTL, NOW).await.unwrap();
    match c.checked_write("j", 1, b"k", vec![0; 17]).await {
        Err(ClientError::InvalidArgument { field, message }) => {
            assert_eq!(field.as_deref(), Some("value"));
            assert!(message.contains("16"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Far beyond the message limit: refused before the message is read,
    // with the same answer, naming the configured limit.
    let mut raw =
        proto::fenced_store_client::FencedStoreClient::new(common::channel(&s.url()).await);
    let st = raw
        .checked_write(proto::CheckedWriteRequest {
            proof: Default::default(),
            job: "j".into(),
            token: 1,
            key: b"k".to_vec(),
            value: vec![0; 1 << 20],
            delete: false,
        })
        .await
        .unwrap_err();
    assert_invalid(&st, "value", &["1048576 bytes", "the limit is 16 bytes"]);
    assert!(!c.read("j", b"k").await.unwrap().found);
}

/// Asserts that `st` is INVALID_ARGUMENT with reason INVALID_ARGUMENT,
/// naming `field` in its ErrorInfo and BadRequest, and that its message
/// says each of `words`.
fn assert_invalid(st: &tonic::Status, field: &str, words: &[&str]) {
    assert_eq!(st.code(), Code::InvalidArgument, "{field}: {st:?}");
    let d = st.get_error_details();
    let info = d
        .error_info()
        .unwrap_or_else(|| panic!("{field}: no ErrorInfo in {st:?}"));
    assert_eq!(info.reason, "INVALID_ARGUMENT", "{st:?}");
    assert_eq!(info.domain, "leasehold", "{st:?}");
    assert_eq!(
        info.metadata.get("field").map(String::as_str),
        Some(field),
        "{st:?}"
    );
    assert_eq!(d.bad_request().unwrap().field_violations[0].field, field);
    for w in words {
        assert!(st.message().contains(w), "{w:?} in {:?}", st.message());
    }
}

/// A field far over its limit gets the answer a field just over it gets,
/// INVALID_ARGUMENT naming the field and its limit, although the message
/// is larger than the server decodes: 70 KB, 1 MB and 20 MB values alike.
/// Nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_far_over_their_limit_are_named_with_the_limit_at_every_size() {
    let s = TestServer::start().await;
    let c = s.client().await;
    c.acquire("j", "a", TTL, NOW).await.unwrap();
    c.checked_write("j", 1, b"k", b"v".to_vec()).await.unwrap();
    let mut store =
        proto::fenced_store_client::FencedStoreClient::new(common::channel(&s.url()).await);
    let mut leases = proto::leases_client::LeasesClient::new(common::channel(&s.url()).await);
    let write = |key: Vec<u8>, value: Vec<u8>| proto::CheckedWriteRequest {
        proof: Default::default(),
        job: "j".into(),
        token: 1,
        key,
        value,
        delete: false,
    };
    for size in [65_537, 70_000, 1 << 20, 20 << 20] {
        let st = store
            .checked_write(write(b"k".to_vec(), vec![7; size]))
            .await
            .unwrap_err();
        let is = format!("is {size} bytes");
        assert_invalid(&st, "value", &[&is, "the limit is 65536 bytes"]);
    }
    // The other fields with a limit, far over it.
    let st = store
        .checked_write(write(vec![b'k'; 100_000], b"v".to_vec()))
        .await
        .unwrap_err();
    assert_invalid(&st, "key", &["is 100000 bytes", "the limit is 1024 bytes"]);
    let acquire = |job: String, holder: String| proto::AcquireRequest {
        job,
        holder,
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
    let st = leases
        .acquire(acquire("x".repeat(100_000), "b".into()))
        .await
        .unwrap_err();
    assert_invalid(&st, "job", &["is 100000 bytes", "the limit is 256 bytes"]);
    let st = leases
        .acquire(acquire("j2".into(), "h".repeat(1 << 20)))
        .await
        .unwrap_err();
    assert_invalid(
        &st,
        "holder",
        &["is 1048576 bytes", "the limit is 256 bytes"],
    );

    let v = c.read("j", b"k").await.unwrap();
    assert_eq!((v.value.as_slice(), v.version), (&b"v"[..], 1));
    let l = c.get_lease("j").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("a"), 1));
    assert_eq!(c.list_leases("").await.unwrap().len(), 1, "no job created");
    assert_eq!(c.list_keys("j", b"").await.unwrap().len(), 1, "no key");
}

/// A string field that is not UTF-8 does not decode. Every string field of
/// the unary requests gets INVALID_ARGUMENT naming it, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strings_that_are_not_utf8_are_refused_naming_the_field() {
    use common::raw;
    use prost::Message;
    let s = TestServer::start().await;
    let c = s.client().await;
    c.acquire("j", "a", TTL, NOW).await.unwrap();
    c.checked_write("j", 1, b"k", b"v".to_vec()).await.unwrap();
    // Overwritten with bytes that are never UTF-8 before sending.
    const BAD: &str = "~BAD~";
    let ttl = Some(prost_types::Duration {
        seconds: 30,
        nanos: 0,
    });
    let acquire = |job: &str, holder: &str| proto::AcquireRequest {
        job: job.into(),
        holder: holder.into(),
        ttl,
        wait: None,
        bind_to_stream: false,
        preferred: false,
        value: Default::default(),
        slots: 0,
    };
    let renew = |job: &str, holder: &str| proto::RenewRequest {
        job: job.into(),
        holder: holder.into(),
        token: 1,
        ttl,
        value: Default::default(),
    };
    let release = |job: &str, holder: &str| proto::ReleaseRequest {
        job: job.into(),
        holder: holder.into(),
        token: 1,
        give_back: false,
    };
    let cases: Vec<(&'static str, &str, Vec<u8>)> = vec![
        (
            "/leasehold.v1.Leases/Acquire",
            "job",
            acquire(BAD, "b").encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/Acquire",
            "holder",
            acquire("j", BAD).encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/Renew",
            "job",
            renew(BAD, "a").encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/Renew",
            "holder",
            renew("j", BAD).encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/Release",
            "job",
            release(BAD, "a").encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/Release",
            "holder",
            release("j", BAD).encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/GetLease",
            "job",
            proto::GetLeaseRequest { job: BAD.into() }.encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/WatchLease",
            "job",
            proto::WatchLeaseRequest { job: BAD.into() }.encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/ListLeases",
            "prefix",
            proto::ListLeasesRequest {
                prefix: BAD.into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/leasehold.v1.Leases/ListLeases",
            "page_token",
            proto::ListLeasesRequest {
                page_token: BAD.into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/leasehold.v1.FencedStore/CheckedWrite",
            "job",
            proto::CheckedWriteRequest {
                proof: Default::default(),
                job: BAD.into(),
                token: 1,
                key: b"k".to_vec(),
                value: b"x".to_vec(),
                delete: false,
            }
            .encode_to_vec(),
        ),
        (
            "/leasehold.v1.FencedStore/Read",
            "job",
            proto::ReadRequest {
                job: BAD.into(),
                key: b"k".to_vec(),
            }
            .encode_to_vec(),
        ),
        (
            "/leasehold.v1.FencedStore/ListKeys",
            "job",
            proto::ListKeysRequest {
                job: BAD.into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
    ];
    for (path, field, msg) in cases {
        let st = raw::unary(&s.url(), path, raw::not_utf8(msg, BAD))
            .await
            .unwrap_err();
        assert_invalid(&st, field, &[field, "UTF-8"]);
    }

    let l = c.get_lease("j").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.token),
        (Some("a"), 1),
        "not released"
    );
    let v = c.read("j", b"k").await.unwrap();
    assert_eq!((v.value.as_slice(), v.version), (&b"v"[..], 1));
    assert_eq!(c.list_leases("").await.unwrap().len(), 1, "no job created");
}

/// Page tokens page through a listing exactly, on both lists. A page token
/// this server did not issue for the listing (garbled, truncated, forged,
/// from the other list, or from another job or prefix) is refused with
/// INVALID_ARGUMENT naming `page_token`, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_tokens_the_server_did_not_issue_are_refused() {
    let s = TestServer::start().await;
    let c = s.client().await;
    for i in 0..5 {
        c.acquire(&format!("p/{i}"), "h", TTL, NOW).await.unwrap();
        c.checked_write("p/0", 1, format!("k/{i}").as_bytes(), vec![1])
            .await
            .unwrap();
    }
    c.acquire("q", "h", TTL, NOW).await.unwrap();
    c.checked_write("p/1", 1, b"k/0", vec![1]).await.unwrap();
    let mut leases = proto::leases_client::LeasesClient::new(common::channel(&s.url()).await);
    let mut store =
        proto::fenced_store_client::FencedStoreClient::new(common::channel(&s.url()).await);
    let list_leases = |prefix: &str, page_token: String| proto::ListLeasesRequest {
        prefix: prefix.into(),
        page_size: 2,
        page_token,
    };
    let list_keys = |job: &str, prefix: &[u8], page_token: Vec<u8>| proto::ListKeysRequest {
        job: job.into(),
        prefix: prefix.to_vec(),
        page_size: 2,
        page_token,
    };

    // Pages of two, token to token.
    let (mut jobs, mut lease_tokens, mut token) = (Vec::new(), Vec::new(), String::new());
    // How many the first page had: where its token resumes.
    let mut first_jobs = None;
    loop {
        let r = leases
            .list_leases(list_leases("p/", token))
            .await
            .unwrap()
            .into_inner();
        first_jobs.get_or_insert(r.leases.len());
        jobs.extend(r.leases.into_iter().map(|l| l.job));
        if r.next_page_token.is_empty() {
            break;
        }
        lease_tokens.push(r.next_page_token.clone());
        token = r.next_page_token;
    }
    assert_eq!(jobs, ["p/0", "p/1", "p/2", "p/3", "p/4"]);
    // Two tokens for five jobs in pages of two; more if a page was cut
    // short by its time budget (a loaded machine: `record::ListBudget`).
    assert!(lease_tokens.len() >= 2, "{lease_tokens:?}");
    let (mut keys, mut key_tokens, mut token) = (Vec::new(), Vec::new(), Vec::new());
    let mut first_keys = None;
    loop {
        let r = store
            .list_keys(list_keys("p/0", b"k/", token))
            .await
            .unwrap()
            .into_inner();
        first_keys.get_or_insert(r.keys.len());
        keys.extend(r.keys.into_iter().map(|k| k.key));
        if r.next_page_token.is_empty() {
            break;
        }
        key_tokens.push(r.next_page_token.clone());
        token = r.next_page_token;
    }
    let want: Vec<Vec<u8>> = (0..5).map(|i| format!("k/{i}").into_bytes()).collect();
    assert_eq!(keys, want);
    assert!(key_tokens.len() >= 2, "{key_tokens:?}");

    // One character changed, anywhere, is caught.
    let flip = |t: &[u8], at: usize| {
        let mut t = t.to_vec();
        t[at] = if t[at] == b'A' { b'B' } else { b'A' };
        t
    };
    let lease_token = lease_tokens[0].clone();
    let key_token = key_tokens[0].clone();
    let mut bad_lease_tokens = vec![
        "garbage".to_owned(),
        "p/1".to_owned(), // a job name, as earlier versions issued
        lease_token[..lease_token.len() - 1].to_owned(),
        format!("{lease_token}A"),
        String::from_utf8(key_token.clone()).unwrap(), // ListKeys'
    ];
    for at in 0..lease_token.len() {
        bad_lease_tokens.push(String::from_utf8(flip(lease_token.as_bytes(), at)).unwrap());
    }
    for t in bad_lease_tokens {
        let st = leases
            .list_leases(list_leases("p/", t.clone()))
            .await
            .expect_err(&t);
        assert_invalid(&st, "page_token", &["page_token"]);
    }
    // Bound to the listing it came from: another prefix refuses it.
    let st = leases
        .list_leases(list_leases("p", lease_token.clone()))
        .await
        .unwrap_err();
    assert_invalid(&st, "page_token", &[]);

    let mut bad_key_tokens = vec![
        b"garbage".to_vec(),
        b"k/1".to_vec(), // a key, as earlier versions issued
        vec![0xFF; 40],
        key_token[..key_token.len() - 1].to_vec(),
        lease_token.clone().into_bytes(), // ListLeases'
    ];
    for at in 0..key_token.len() {
        bad_key_tokens.push(flip(&key_token, at));
    }
    for t in bad_key_tokens {
        let st = store
            .list_keys(list_keys("p/0", b"k/", t.clone()))
            .await
            .expect_err(&format!("{t:?}"));
        assert_invalid(&st, "page_token", &["page_token"]);
    }
    // Another job, or another prefix, refuses it.
    for (job, prefix) in [("p/1", &b"k/"[..]), ("p/0", b"k"), ("p/0", b"")] {
        let st = store
            .list_keys(list_keys(job, prefix, key_token.clone()))
            .await
            .unwrap_err();
        assert_invalid(&st, "page_token", &[]);
    }

    // Nothing changed, and the tokens issued still resume where they did.
    let r = leases
        .list_leases(list_leases("p/", lease_token))
        .await
        .unwrap()
        .into_inner();
    // (A page may be cut short by its time budget on a loaded machine:
    // each token resumes after the page that issued it, whatever its size.)
    let resumed: Vec<_> = r.leases.iter().map(|l| l.job.clone()).collect();
    let from = first_jobs.unwrap();
    assert!(!resumed.is_empty() && resumed.len() <= 2, "{resumed:?}");
    assert_eq!(resumed, jobs[from..from + resumed.len()]);
    let r = store
        .list_keys(list_keys("p/0", b"k/", key_token))
        .await
        .unwrap()
        .into_inner();
    let resumed: Vec<_> = r.keys.iter().map(|k| k.key.clone()).collect();
    let from = first_keys.unwrap();
    assert!(!resumed.is_empty() && resumed.len() <= 2, "{resumed:?}");
    assert_eq!(resumed, keys[from..from + resumed.len()]);
    assert_eq!(c.list_leases("").await.unwrap().len(), 6);
    assert_eq!(c.list_keys("p/0", b"").await.unwrap().len(), 5);
}

/// A stream counts in the RPC metrics with the status it ended with, once
/// it ends: a WriteStream refused for a message too large and a KeepAlive
/// refused for a message that does not decode count INVALID_ARGUMENT,
/// after the answers to the messages before; a stream closed by its
/// client counts OK. Nothing after the refused message was made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_refused_mid_way_end_with_the_error_and_count_it() {
    use common::raw;
    use prost::Message;
    use tokio_stream::wrappers::ReceiverStream;
    let s = TestServer::start().await;
    let c = s.client().await;
    c.acquire("j", "a", TTL, NOW).await.unwrap();
    let limit = leasehold::server::Config::default()
        .max_message_bytes()
        .to_string();

    let mut store =
        proto::fenced_store_client::FencedStoreClient::new(common::channel(&s.url()).await);
    let write = |key: &str, value: Vec<u8>| proto::CheckedWriteRequest {
        proof: Default::default(),
        job: "j".into(),
        token: 1,
        key: key.into(),
        value,
        delete: false,
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut resp = store
        .write_stream(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    for (id, writes) in [
        (1, vec![write("before", b"1".to_vec())]),
        (
            2,
            (0..20)
                .map(|i| write(&format!("big{i}"), vec![0; 60_000]))
                .collect(),
        ),
        (3, vec![write("after", b"3".to_vec())]),
    ] {
        // The server may end the stream at the oversized message before
        // the one after it is sent: that send then fails, as it should.
        let _ = tx.send(proto::WriteStreamRequest { id, writes }).await;
    }
    let r = resp.message().await.unwrap().expect("the answer to id 1");
    assert_eq!((r.id, r.results[0].version), (1, 1));
    let st = resp.message().await.unwrap_err();
    assert_invalid(&st, "writes", &["writes", &limit]);
    assert!(resp.message().await.unwrap().is_none());

    let ttl = |secs| {
        Some(prost_types::Duration {
            seconds: secs,
            nanos: 0,
        })
    };
    let renewal = |holder: &str, secs| proto::KeepAliveRequest {
        id: secs as u64,
        renewals: vec![proto::KeepAliveRenewal {
            job: "j".into(),
            holder: holder.into(),
            token: 1,
            ttl: ttl(secs),
        }],
        bind_to_stream: false,
    };
    let msgs = vec![
        renewal("a", 20).encode_to_vec(),
        raw::not_utf8(renewal("~BAD~", 30).encode_to_vec(), "~BAD~"),
        renewal("a", 40).encode_to_vec(),
    ];
    let mut resp = raw::stream(
        &s.url(),
        "/leasehold.v1.Leases/KeepAlive",
        tokio_stream::iter(msgs),
    )
    .await
    .unwrap();
    let r = proto::KeepAliveResponse::decode(resp.message().await.unwrap().unwrap().as_slice())
        .unwrap();
    assert_eq!(r.id, 20);
    assert_eq!(
        r.results[0].outcome(),
        proto::keep_alive_result::Outcome::Renewed
    );
    let st = resp.message().await.unwrap_err();
    assert_invalid(&st, "renewals.holder", &["UTF-8"]);

    // A stream its client closes ends OK.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut resp = store
        .write_stream(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(proto::WriteStreamRequest {
        id: 1,
        writes: vec![write("closed", b"1".to_vec())],
    })
    .await
    .unwrap();
    drop(tx);
    assert_eq!(resp.message().await.unwrap().unwrap().id, 1);
    assert!(resp.message().await.unwrap().is_none());

    let m = s.metrics();
    for line in [
        "leasehold_rpc_responses_total{method=\"WriteStream\",code=\"INVALID_ARGUMENT\"} 1",
        "leasehold_rpc_responses_total{method=\"WriteStream\",code=\"OK\"} 1",
        "leasehold_rpc_responses_total{method=\"KeepAlive\",code=\"INVALID_ARGUMENT\"} 1",
    ] {
        assert!(m.contains(line), "no {line} in\n{m}");
    }
    assert!(
        !m.contains("leasehold_rpc_responses_total{method=\"KeepAlive\",code=\"OK\"}"),
        "{m}"
    );

    // The messages before the refused one were made, nothing after it.
    let keys: Vec<_> = c
        .list_keys("j", b"")
        .await
        .unwrap()
        .into_iter()
        .map(|k| String::from_utf8(k.key).unwrap())
        .collect();
    assert_eq!(keys, ["before", "closed"]);
    let l = c.get_lease("j").await.unwrap();
    assert_eq!(l.ttl, Some(Duration::from_secs(20)), "renewed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer() {
    let s = TestServer::start().await;
    // LEASEHOLD_TEST_SECURE=1 serves TLS (and a policy).
    assert_eq!(s.url().starts_with("https://"), common::secure_mode());
    // Health and reflection are open to anyone: no credentials.
    let channel = common::plain_channel(&s.url()).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in ["", "leasehold.v1.Leases", "leasehold.v1.FencedStore"] {
        let r = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    }

    use tonic_reflection::pb::v1::{
        server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        ServerReflectionRequest,
    };
    let mut refl = ServerReflectionClient::new(channel.clone());
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut resp = refl
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let msg = resp.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
        panic!("unexpected reflection reply {msg:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for want in [
        "leasehold.v1.Leases",
        "leasehold.v1.FencedStore",
        "grpc.health.v1.Health",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }

    use tonic_reflection::pb::v1alpha::{
        server_reflection_client::ServerReflectionClient as AlphaClient,
        server_reflection_request::MessageRequest as AlphaRequest,
        ServerReflectionRequest as AlphaReq,
    };
    let mut alpha = AlphaClient::new(channel);
    let mut resp = alpha
        .server_reflection_info(tokio_stream::iter(vec![AlphaReq {
            host: String::new(),
            message_request: Some(AlphaRequest::FileContainingSymbol(
                "leasehold.v1.Leases".into(),
            )),
        }]))
        .await
        .unwrap()
        .into_inner();
    assert!(resp
        .message()
        .await
        .unwrap()
        .unwrap()
        .message_response
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_leadership_per_job() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let ttl = common::ttl(Duration::from_millis(200));
    c.acquire("led", "a", TTL, NOW).await.unwrap();
    c.acquire("vacant", "a", ttl, NOW).await.unwrap();
    // Let it expire, and wait for the server to have seen the expiry (on
    // etcd, some time after the TTL); then leaderless for 300 ms at least.
    tokio::time::sleep(ttl).await;
    let render = || leasehold::metrics::render(&s.node, &Default::default());
    common::eventually("the expiry of vacant's lease in the metrics", || async {
        render()
            .contains("leasehold_job_leader{job=\"vacant\"} 0")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = render();
    assert!(m.contains("leasehold_job_leader{job=\"led\"} 1"), "{m}");
    assert!(m.contains("leasehold_job_leader{job=\"vacant\"} 0"), "{m}");
    assert!(m.contains("leasehold_job_token{job=\"vacant\"} 1"), "{m}");
    let line = m
        .lines()
        .find(|l| l.starts_with("leasehold_job_leaderless_seconds{job=\"vacant\"}"))
        .unwrap();
    let secs: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(secs >= 0.3, "{line}");
    assert!(m.contains("leasehold_expiries_total 1"), "{m}");
    assert!(m.contains("leasehold_grants_total 2"), "{m}");
}

/// One sample of a metric without labels, from the rendered text.
fn metric(m: &str, name: &str) -> f64 {
    let line = m
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} in\n{m}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Group commit shows on /metrics: one sync per write when writes come one
/// at a time, fewer syncs than writes when they come at once, none for a
/// fenced write or a read, and a duration histogram that counts every sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_group_commit_syncs_and_batches() {
    let s = TestServer::start().await;
    if common::etcd_mode() {
        // etcd syncs its own log: the frontend has no group commit.
        let m = leasehold::metrics::render(&s.node, &Default::default());
        assert!(!m.contains("leasehold_store_syncs_total"), "{m}");
        return;
    }
    let c = s.client().await;
    c.acquire("j", "a", TTL, NOW).await.unwrap();
    let render = || leasehold::metrics::render(&s.node, &Default::default());
    let counts = |m: &str| {
        (
            metric(m, "leasehold_store_syncs_total"),
            metric(m, "leasehold_store_synced_changes_total"),
        )
    };
    let (syncs0, changes0) = counts(&render());
    for i in 0..5u8 {
        c.checked_write("j", 1, b"k", vec![i]).await.unwrap();
    }
    let (syncs1, changes1) = counts(&render());
    assert_eq!((syncs1 - syncs0, changes1 - changes0), (5.0, 5.0));

    // Refused and read-only calls change nothing, so they sync nothing.
    assert!(c.checked_write("j", 7, b"k", vec![0]).await.is_err());
    c.read("j", b"k").await.unwrap();
    c.renew("j", "a", 1, TTL).await.unwrap();
    assert_eq!(counts(&render()), (syncs1, changes1));

    let mut tasks = Vec::new();
    for i in 0..32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.checked_write("j", 1, format!("k{i}").as_bytes(), vec![1])
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let m = render();
    let (syncs2, changes2) = counts(&m);
    assert_eq!(changes2 - changes1, 32.0);
    assert!(
        (1.0..=32.0).contains(&(syncs2 - syncs1)),
        "{} syncs for 32 writes",
        syncs2 - syncs1
    );
    assert_eq!(
        metric(&m, "leasehold_store_sync_duration_seconds_count"),
        syncs2
    );
    assert!(metric(&m, "leasehold_store_sync_duration_seconds_sum") > 0.0);
    let buckets: Vec<f64> = m
        .lines()
        .filter(|l| l.starts_with("leasehold_store_sync_duration_seconds_bucket"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(buckets.last(), Some(&syncs2));
}

/// Renewals and writes count alike whether they come as unary calls or as
/// entries on a stream; refused ones count only as losses and fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_renewals_and_writes_on_calls_and_streams() {
    use leasehold::client::{KeepAliveRenewal, RenewOutcome, StreamWrite, WriteOutcome};
    let s = TestServer::start().await;
    let c = s.client().await;
    for job in ["m1", "m2", "m3"] {
        assert!(c.acquire(job, "a", TTL, NOW).await.unwrap().acquired);
    }
    let render = || leasehold::metrics::render(&s.node, &Default::default());
    let counts = |m: &str| {
        [
            "leasehold_renewals_total",
            "leasehold_renew_losses_total",
            "leasehold_writes_total",
            "leasehold_fenced_writes_total",
        ]
        .map(|name| metric(m, name))
    };
    assert_eq!(counts(&render()), [0.0; 4]);

    c.renew("m1", "a", 1, TTL).await.unwrap();
    assert!(c.renew("m1", "b", 1, TTL).await.is_err());
    let mut ka = c.keep_alive().await.unwrap();
    let out = ka
        .renew(&[
            KeepAliveRenewal::new("m1", "a", 1, TTL),
            KeepAliveRenewal::new("m2", "a", 1, TTL),
            KeepAliveRenewal::new("m3", "b", 1, TTL),
        ])
        .await
        .unwrap();
    assert!(matches!(
        out.as_slice(),
        [
            RenewOutcome::Renewed(_),
            RenewOutcome::Renewed(_),
            RenewOutcome::LeaseLost(_)
        ]
    ));
    assert_eq!(counts(&render()), [3.0, 2.0, 0.0, 0.0]);

    c.checked_write("m1", 1, b"k", b"v".to_vec()).await.unwrap();
    c.delete("m1", 1, b"k").await.unwrap();
    c.release("m3", "a", 1).await.unwrap();
    assert!(matches!(
        c.checked_write("m3", 1, b"k", b"v".to_vec()).await,
        Err(ClientError::Fenced { .. })
    ));
    let mut ws = c.write_stream().await.unwrap();
    let out = ws
        .write(&[
            StreamWrite::put("m1", 1, b"k", b"w".to_vec()),
            StreamWrite::put("m2", 1, b"k", b"w".to_vec()),
            StreamWrite::put("m3", 1, b"k", b"w".to_vec()),
        ])
        .await
        .unwrap();
    assert!(matches!(
        out.as_slice(),
        [
            WriteOutcome::Written { .. },
            WriteOutcome::Written { .. },
            WriteOutcome::Fenced { .. }
        ]
    ));
    assert_eq!(counts(&render()), [3.0, 2.0, 4.0, 2.0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_goes_away_leaves_the_queue() {
    let s = TestServer::start().await;
    let c = s.client().await;
    assert!(c.acquire("gone", "a", TTL, NOW).await.unwrap().acquired);
    let c2 = c.clone();
    let waiter = tokio::spawn(async move {
        c2.acquire("gone", "ghost", TTL, Duration::from_secs(60))
            .await
    });
    s.wait_for_waiters(1).await;
    // The client gives up: the call is cancelled on the wire, and the
    // waiter leaves the queue.
    waiter.abort();
    s.wait_for_waiters(0).await;
    // So a release is not handed to the ghost, and a newcomer gets it.
    c.release("gone", "a", 1).await.unwrap();
    let l = c.get_lease("gone").await.unwrap();
    assert_eq!(l.holder, None);
    let r = c.acquire("gone", "b", TTL, NOW).await.unwrap();
    assert!(r.acquired);
    assert_eq!(r.lease.token, 2);
}

/// A job at its last token: the grant of that token is made once, and the
/// next is refused with TOKENS_EXHAUSTED, never issued twice; nothing
/// changes. On both backends (the record is put where each keeps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_token_is_issued_once_then_grants_are_refused() {
    use leasehold::backend::Backend;
    use leasehold::lease::{LeaseRecord, Token};
    use leasehold::node::Node;
    use leasehold::server;
    use leasehold::store::sled::SledStore;
    use leasehold::store::Store as _;
    use std::sync::Arc;
    let job = "nearly-spent";
    let dir = tempfile::tempdir().unwrap();
    let config = server::Config::default();
    let node: Backend = if common::etcd_mode() {
        use leasehold::etcd::client::{put_op, Etcd};
        use leasehold::etcd::keys::{Keys, TokenRec};
        let prefix = common::etcd::fresh_prefix();
        let endpoints = common::etcd::shared_endpoints();
        let etcd = Etcd::connect(&endpoints, Duration::from_secs(5)).unwrap();
        let rec = TokenRec {
            token: Token(u64::MAX - 1),
            released: true,
            holder: "old@1".into(),
            owner: None,
        };
        let req = leasehold::etcd::client::pb::TxnRequest {
            compare: vec![],
            success: vec![put_op(Keys::new(&prefix).token(job), rec.encode(), 0)],
            failure: vec![],
        };
        assert!(etcd.txn(req).await.unwrap().succeeded);
        leasehold::etcd::EtcdNode::open(common::etcd::frontend_config(endpoints, &prefix))
            .await
            .unwrap()
            .into()
    } else {
        let store = SledStore::open(dir.path()).unwrap();
        let l = Limits::default();
        store
            .put_lease(
                &l.job(job).unwrap(),
                &LeaseRecord {
                    issued: Default::default(),
                    holder: None,
                    token: Token(u64::MAX - 1),
                    ttl: Duration::from_secs(5),
                    owner: None,
                    value: Default::default(),
                },
                &[],
                0,
            )
            .unwrap();
        store.sync().unwrap();
        store.checkpoint().unwrap();
        Node::open(Arc::new(store)).unwrap().into()
    };
    let mut config = config;
    config.limits.min_ttl = common::min_ttl();
    let s = TestServer::serve(node, dir, config).await;
    let c = s.client().await;
    // Long enough to outlive the calls: a releases it.
    let ttl = common::ttl(TTL);
    let a = c.acquire(job, "a", ttl, Duration::ZERO).await.unwrap();
    assert!(a.acquired);
    assert_eq!(a.lease.token, u64::MAX, "the last token, once");
    c.release(job, "a", u64::MAX).await.unwrap();
    for (holder, wait) in [("b", Duration::ZERO), ("c", Duration::from_millis(300))] {
        let e = c.acquire(job, holder, ttl, wait).await.unwrap_err();
        let ClientError::Other(st) = &e else {
            panic!("{holder}: {e:?}")
        };
        assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
        assert_eq!(
            st.get_error_details().error_info().unwrap().reason,
            "TOKENS_EXHAUSTED"
        );
        assert!(st.message().contains("last token"), "{}", st.message());
    }
    let l = c.get_lease(job).await.unwrap();
    assert_eq!((l.holder, l.token), (None, u64::MAX), "nothing changed");
}

/// With a policy, a lease is bound to the principal that acquired it, on
/// either backend (the binding is stored as part of the holder): another
/// principal with the same grants, the holder string and the token can
/// neither renew, release, re-acquire nor write with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_bound_to_the_principal_that_acquired_it() {
    use leasehold::client::Security;
    use leasehold::server;
    use std::sync::Arc;
    let pki = common::pki::secured();
    let policy = format!(
        "[[principal]]\nname = \"a\"\ntoken_sha256 = [\"{}\"]\n\
         [[principal]]\nname = \"b\"\ntoken_sha256 = [\"{}\"]\n\
         [[grant]]\nprincipal = \"a\"\njobs = [\"bound/\"]\nactions = [\"lease\", \"write\", \"read\"]\n\
         [[grant]]\nprincipal = \"b\"\njobs = [\"bound/\"]\nactions = [\"lease\", \"write\", \"read\"]\n",
        common::pki::sha256_hex("secret-a"),
        common::pki::sha256_hex("secret-b"),
    );
    let policy = common::pki::write(pki.dir.path(), "two.toml", &policy);
    let config = server::Config {
        drain_timeout: Duration::from_secs(2),
        tls: Some(
            server::tls::Tls::load(server::tls::TlsFiles {
                cert: pki.cert_file.clone(),
                key: pki.key_file.clone(),
                client_ca: None,
                client_cert_required: false,
            })
            .unwrap(),
        ),
        auth: Some(
            server::auth::Auth::load(policy, Arc::new(leasehold::metrics::RpcMetrics::default()))
                .unwrap(),
        ),
        ..server::Config::default()
    };
    let s = TestServer::with_config(tempfile::tempdir().unwrap(), config).await;
    let url = s.url();
    let connect = |secret: &str| {
        leasehold::client::Client::connect_with(
            &url,
            Security {
                ca_pem: Some(pki.ca_pem.clone().into_bytes()),
                token: Some(secret.to_owned()),
                ..Security::default()
            },
        )
    };
    let a = connect("secret-a").await.unwrap();
    let b = connect("secret-b").await.unwrap();
    let ttl = common::ttl(Duration::from_secs(30));
    let got = a.acquire("bound/x", "h", ttl, NOW).await.unwrap();
    assert!(got.acquired);
    assert_eq!(got.lease.holder.as_deref(), Some("h"));
    assert_eq!(got.lease.principal.as_deref(), Some("a"));
    let token = got.lease.token;
    let denied =
        |e: ClientError| assert!(matches!(e, ClientError::PermissionDenied { .. }), "{e:?}");
    denied(b.renew("bound/x", "h", token, ttl).await.unwrap_err());
    denied(b.release("bound/x", "h", token).await.unwrap_err());
    denied(b.acquire("bound/x", "h", ttl, NOW).await.unwrap_err());
    denied(
        b.checked_write("bound/x", token, b"k", b"v".to_vec())
            .await
            .unwrap_err(),
    );
    // Nothing changed; the lease is still a's, and a uses it.
    let l = b.get_lease("bound/x").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.principal.as_deref(), l.token),
        (Some("h"), Some("a"), token)
    );
    assert!(!a.read("bound/x", b"k").await.unwrap().found);
    a.renew("bound/x", "h", token, ttl).await.unwrap();
    a.checked_write("bound/x", token, b"k", b"v".to_vec())
        .await
        .unwrap();
    a.release("bound/x", "h", token).await.unwrap();
    // Free again: b may take it, with the next token.
    let got = b.acquire("bound/x", "h", ttl, NOW).await.unwrap();
    assert!(got.acquired);
    assert_eq!(got.lease.principal.as_deref(), Some("b"));
    assert_eq!(got.lease.token, token + 1);
}

/// Many watchers of one job are all told of its expiry, by the job's one
/// deadline timer (not a timer each); renewals tell them nothing; and
/// once they have all gone, a new watcher is told of the next expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watchers_of_one_job_are_told_of_its_expiry_and_nothing_of_renewals() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let ttl = common::ttl(Duration::from_millis(300));
    // While a hundred watches open (an etcd watch each, which takes a
    // while on a busy machine) and renewals come, the lease is long: only
    // the grant whose expiry is the point is short.
    c.acquire("herd", "a", TTL, NOW).await.unwrap();
    let mut watchers = Vec::new();
    for _ in 0..100 {
        let mut w = c.watch("herd").await.unwrap();
        let first = w.message().await.unwrap().unwrap();
        assert_eq!(first.kind, EventKind::Current as i32);
        watchers.push(w);
    }
    // Two renewals: no event. The next event every watcher gets is the
    // release.
    for _ in 0..2 {
        c.renew("herd", "a", 1, TTL).await.unwrap();
    }
    c.release("herd", "a", 1).await.unwrap();
    for w in &mut watchers {
        let ev = next_event(w).await;
        assert_eq!(ev.kind, EventKind::Released as i32, "{ev:?}");
        assert_eq!(ev.lease.unwrap().token, 1);
    }
    // A short grant, watched by all: each is told of its expiry.
    let granted = c.acquire("herd", "b", ttl, NOW).await.unwrap();
    assert_eq!(granted.lease.token, 2);
    for w in &mut watchers {
        expect_grant_then_expiry(w, 2).await;
    }
    drop(watchers);
    // Another grant runs out with nobody watching (the timer leaves),
    // then a new watcher is told of the next expiry.
    c.acquire("herd", "c", ttl, NOW).await.unwrap();
    tokio::time::sleep(ttl).await;
    common::eventually("the unwatched grant to run out", || async {
        c.get_lease("herd")
            .await
            .unwrap()
            .holder
            .is_none()
            .then_some(())
    })
    .await;
    let mut w = c.watch("herd").await.unwrap();
    assert_eq!(next_event(&mut w).await.kind, EventKind::Current as i32);
    let granted = c.acquire("herd", "d", ttl, NOW).await.unwrap();
    assert_eq!(granted.lease.token, 4);
    expect_grant_then_expiry(&mut w, 4).await;
}

/// A watcher's next event, waiting as long as a loaded machine may take.
async fn next_event(w: &mut tonic::Streaming<proto::LeaseEvent>) -> proto::LeaseEvent {
    tokio::time::timeout(common::PATIENCE, w.message())
        .await
        .expect("an event")
        .unwrap()
        .expect("the watch goes on")
}

/// The events of a short grant of `token` to a watcher: Acquired, then
/// Expired. A watcher that fell behind for longer than the TTL is told of
/// the expiry alone (a watch folds the changes a slow reader missed into
/// the latest state), so the Acquired may be missing, but not the expiry.
async fn expect_grant_then_expiry(w: &mut tonic::Streaming<proto::LeaseEvent>, token: u64) {
    let mut ev = next_event(w).await;
    if ev.kind == EventKind::Acquired as i32 {
        assert_eq!(ev.lease.unwrap().token, token);
        ev = next_event(w).await;
    }
    assert_eq!(ev.kind, EventKind::Expired as i32, "{ev:?}");
    assert_eq!(ev.lease.unwrap().token, token);
}

/// A renewal that shortens a watched lease moves the expiry its watchers
/// hear of: the job's one deadline timer, armed on the old (60 s)
/// deadline when the watch began, is armed again on the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_hears_of_the_expiry_of_a_lease_a_renewal_shortened() {
    let s = TestServer::start().await;
    let c = s.client().await;
    const LONG: Duration = Duration::from_secs(60);
    let a = c.acquire("shortened", "a", LONG, NOW).await.unwrap();
    assert!(a.acquired);
    let mut w = c.watch("shortened").await.unwrap();
    let ev = next_event(&mut w).await;
    assert_eq!(ev.kind, EventKind::Current as i32);
    assert_eq!(ev.lease.unwrap().holder, "a");
    let ttl = common::ttl(Duration::from_millis(300));
    let renewed = Instant::now();
    let l = c.renew("shortened", "a", a.lease.token, ttl).await.unwrap();
    assert_eq!(l.ttl, Some(ttl));
    let ev = next_event(&mut w).await;
    let heard = renewed.elapsed();
    assert_eq!(ev.kind, EventKind::Expired as i32, "{ev:?}");
    assert_eq!(ev.lease.unwrap().token, a.lease.token);
    assert!(
        heard >= ttl,
        "told of the expiry {heard:?} after a {ttl:?} renewal"
    );
    // Not at the old deadline: a third of it is longer than any stall.
    assert!(
        heard < LONG / 3,
        "told of the expiry {heard:?} after the renewal: at the old {LONG:?} deadline, not the renewed {ttl:?}"
    );
}

/// A renewal that shortens a lease moves the moment the first waiter in
/// line is granted: its timer, armed on the old (60 s) deadline when it
/// joined the line, is armed again on the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_waiter_is_granted_at_the_deadline_a_renewal_shortened() {
    let s = TestServer::start().await;
    let c = s.client().await;
    const LONG: Duration = Duration::from_secs(60);
    let a = c.acquire("shortened-line", "a", LONG, NOW).await.unwrap();
    assert!(a.acquired);
    let waiter = {
        let c = s.client().await;
        tokio::spawn(async move {
            c.acquire("shortened-line", "b", TTL, common::PATIENCE)
                .await
                .unwrap()
        })
    };
    s.wait_for_waiters(1).await;
    let ttl = common::ttl(Duration::from_millis(300));
    let renewed = Instant::now();
    let l = c
        .renew("shortened-line", "a", a.lease.token, ttl)
        .await
        .unwrap();
    assert_eq!(l.ttl, Some(ttl));
    let b = waiter.await.unwrap();
    let granted = renewed.elapsed();
    assert!(b.acquired, "{b:?}");
    assert_eq!(b.lease.holder.as_deref(), Some("b"));
    assert_eq!(b.lease.token, a.lease.token + 1);
    assert!(
        granted >= ttl,
        "granted {granted:?} after a {ttl:?} renewal"
    );
    // Not at the old deadline: a third of it is longer than any stall.
    assert!(
        granted < LONG / 3,
        "granted {granted:?} after the renewal: at the old {LONG:?} deadline, not the renewed {ttl:?}"
    );
}

/// grpcurl, a generic client that knows nothing of leasehold, decodes an
/// error's details through the server's reflection: the ErrorInfo's reason
/// and metadata print by name, and so does the BadRequest's field, rather
/// than "google.rpc.ErrorInfo is not recognized". scripts/test installs
/// grpcurl and names it in LEASEHOLD_GRPCURL; without that variable the
/// test looks for `grpcurl` on the PATH, and says it skipped when there is
/// none.
#[test]
fn grpcurl_prints_the_error_details_by_name() {
    let grpcurl = match std::env::var_os("LEASEHOLD_GRPCURL") {
        Some(path) => std::path::PathBuf::from(path),
        None => match std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join("grpcurl"))
            .find(|p| p.is_file())
        {
            Some(p) => p,
            None => {
                eprintln!("skipped: no grpcurl (set LEASEHOLD_GRPCURL or put it on the PATH)");
                return;
            }
        },
    };
    assert!(
        grpcurl.is_file(),
        "LEASEHOLD_GRPCURL={grpcurl:?} is not a file"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"), &[]);
    let call = |method: &str, body: &str| {
        let out = std::process::Command::new(&grpcurl)
            .args(["-plaintext", "-d", body, &server.addr.to_string(), method])
            .output()
            .expect("run grpcurl");
        assert!(!out.status.success(), "{method} should fail: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
    };
    let renew = call(
        "leasehold.v1.Leases/Renew",
        r#"{"job":"j","holder":"h","token":"5","ttl":"10s"}"#,
    );
    for want in [
        "Code: InvalidArgument",
        r#""@type": "type.googleapis.com/google.rpc.ErrorInfo""#,
        r#""domain": "leasehold""#,
        r#""reason": "UNKNOWN_TOKEN""#,
        r#""current_token": "0""#,
    ] {
        assert!(renew.contains(want), "{want} in grpcurl's output:\n{renew}");
    }
    assert!(!renew.contains("not recognized"), "{renew}");
    let acquire = call(
        "leasehold.v1.Leases/Acquire",
        r#"{"job":"","holder":"h","ttl":"10s"}"#,
    );
    for want in [
        r#""reason": "INVALID_ARGUMENT""#,
        r#""field": "job""#,
        r#""@type": "type.googleapis.com/google.rpc.BadRequest""#,
        r#""description": "must not be empty""#,
    ] {
        assert!(
            acquire.contains(want),
            "{want} in grpcurl's output:\n{acquire}"
        );
    }
}

/// The CLI's habits: `status --prefix` filters as the positional prefix
/// does; `history` of a job never granted exits 3; a reader that goes
/// away (`leasehold status | head -1`) ends the command quietly, status 0,
/// not a panic (101).
async fn the_cli_filters_by_prefix_refuses_an_unknown_history_and_survives_a_closed_pipe(
    place: common::Place,
) {
    let server = place.start(&[]);
    let c = leasehold::client::Client::connect(&server.url())
        .await
        .unwrap();
    for job in ["billing/a", "billing/b", "ops/c"] {
        c.acquire(job, "h", Duration::from_secs(60), NOW)
            .await
            .unwrap();
    }
    let cli = |args: &[&str]| {
        std::process::Command::new(common::bin())
            .arg(args[0])
            .args(["--server", &server.url()])
            .args(&args[1..])
            .output()
            .unwrap()
    };
    for args in [
        &["status", "--prefix", "billing/"][..],
        &["status", "billing/"][..],
    ] {
        let out = cli(args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(
            text.contains("billing/a") && text.contains("billing/b"),
            "{text}"
        );
        assert!(!text.contains("ops/c"), "{args:?}: {text}");
    }
    let out = cli(&["history", "never-granted"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never granted"),
        "{out:?}"
    );
    assert!(cli(&["history", "ops/c"]).status.success());
    // Many lines, read one: the rest meet a closed pipe.
    for i in 0..2000 {
        c.acquire(&format!("many/{i:04}"), "h", Duration::from_secs(60), NOW)
            .await
            .unwrap();
    }
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; '{}' status --server {} | head -1 >/dev/null; echo status=$?",
            common::bin().display(),
            server.url()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "status=0",
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_filters_by_prefix_refuses_an_unknown_history_and_survives_a_closed_pipe_on_the_single_node(
) {
    the_cli_filters_by_prefix_refuses_an_unknown_history_and_survives_a_closed_pipe(
        common::Place::local(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_filters_by_prefix_refuses_an_unknown_history_and_survives_a_closed_pipe_on_etcd() {
    the_cli_filters_by_prefix_refuses_an_unknown_history_and_survives_a_closed_pipe(
        common::Place::etcd(),
    )
    .await;
}

/// `--output json` on status, history, read, keys, acquire and watch: one
/// JSON object (a list for status and keys; watch one object per line)
/// that a program can parse, with the same facts as the text.
async fn the_cli_prints_json_for_programs(place: common::Place) {
    let server = place.start(&[]);
    let url = server.url();
    let json = |args: &[&str]| -> (Option<i32>, serde_json::Value) {
        let out = std::process::Command::new(common::bin())
            .arg(args[0])
            .args(["--server", &url, "--output", "json"])
            .args(&args[1..])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let first = text.lines().next().unwrap_or("null").to_owned();
        let v = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"));
        (out.status.code(), v)
    };
    let (code, a) = json(&["acquire", "j", "--holder", "me", "--ttl", "30s"]);
    assert_eq!(code, Some(0));
    assert_eq!(a["acquired"], true);
    assert_eq!(a["lease"]["holder"], "me");
    assert_eq!(a["lease"]["token"], 1);
    let (code, busy) = json(&["acquire", "j", "--holder", "other"]);
    assert_eq!(
        (code, &busy["acquired"]),
        (Some(3), &serde_json::json!(false))
    );
    assert_eq!(busy["lease"]["holder"], "me");
    let c = leasehold::client::Client::connect(&url).await.unwrap();
    c.checked_write("j", 1, b"k", b"v".to_vec()).await.unwrap();
    c.checked_write("j", 1, b"bin", vec![0xff, 0x00])
        .await
        .unwrap();
    let (_, status) = json(&["status"]);
    assert_eq!(status[0]["job"], "j");
    assert_eq!(status[0]["token"], 1);
    let (_, history) = json(&["history", "j"]);
    assert_eq!(history["tenures"][0]["holder"], "me");
    assert_eq!(history["tenures"][0]["how"], "-");
    let (_, read) = json(&["read", "j", "k"]);
    assert_eq!(
        (&read["value"], &read["version"]),
        (&serde_json::json!("v"), &serde_json::json!(1))
    );
    let (_, bin) = json(&["read", "j", "bin"]);
    assert_eq!(bin["value_base64"], "/wA=");
    let (code, missing) = json(&["read", "j", "nope"]);
    assert_eq!(
        (code, &missing["found"]),
        (Some(3), &serde_json::json!(false))
    );
    let (_, keys) = json(&["keys", "j"]);
    assert_eq!(keys.as_array().map(Vec::len), Some(2));
    // watch: its first line is the current lease.
    let mut w = std::process::Command::new(common::bin())
        .args(["watch", "--server", &url, "--output", "json", "j"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(w.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = w.kill();
    let _ = w.wait();
    let ev: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (&ev["kind"], &ev["lease"]["holder"]),
        (&serde_json::json!("current"), &serde_json::json!("me"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_json_for_programs_on_the_single_node() {
    the_cli_prints_json_for_programs(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_json_for_programs_on_etcd() {
    the_cli_prints_json_for_programs(common::Place::etcd()).await;
}

/// A leader's published value, end to end through the Rust client: an
/// elector publishes it with its grant; a follower's `leader()`, an
/// observation and the on-new-leader callback see it; `set_value` goes
/// out with the next renewal, a change watchers see as VALUE_CHANGED with
/// the same token; the history keeps the grant's. A value over 1024 bytes
/// is refused naming `value`, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_value_is_seen_by_followers_observers_and_the_history() {
    use leasehold::client::{Elector, ElectorOptions};
    use std::sync::{Arc, Mutex};
    let s = TestServer::start().await;
    let c = s.client().await;
    let ttl = common::ttl(Duration::from_secs(3));
    let publish = |v: &str| ElectorOptions {
        value: v.as_bytes().to_vec(),
        ..ElectorOptions::default()
    };
    let mut a = Elector::start_with(c.clone(), "routed", "a", ttl, publish("10.0.0.1:80"));
    let t1 = a.elected().await.unwrap();
    let mut observe = c.observe("routed").await.unwrap();
    let first = observe.next().await.unwrap().unwrap();
    assert_eq!(first.lease.value, b"10.0.0.1:80");

    // A follower, waiting in line, reads the leader's value and hears of
    // every new leader with its own.
    let mut b = Elector::start_with(c.clone(), "routed", "b", ttl, publish("10.0.0.2:80"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    b.on_new_leader(move |l| log.lock().unwrap().push((l.token, l.value.clone())));
    s.wait_for_waiters(1).await;
    let leader = b.leader().await.unwrap();
    assert_eq!(
        (
            leader.holder.as_deref(),
            leader.token,
            leader.value.as_slice()
        ),
        (Some(a.holder()), t1, &b"10.0.0.1:80"[..])
    );

    // A bad value changes nothing.
    let big = vec![b'x'; 1025];
    let refused = c
        .renew_with_value("routed", a.holder(), t1, ttl, Some(&big))
        .await;
    match refused {
        Err(ClientError::InvalidArgument { field, message }) => {
            assert_eq!(field.as_deref(), Some("value"));
            assert!(message.contains("1024"), "{message}");
        }
        other => panic!("a 1025-byte value: {other:?}"),
    }
    assert_eq!(c.get_lease("routed").await.unwrap().value, b"10.0.0.1:80");

    // set_value: the next renewal carries it; watchers see the change.
    a.set_value("10.0.0.9:80");
    let changed = tokio::time::timeout(ttl * 3, observe.next())
        .await
        .expect("the change within a few renewals")
        .unwrap()
        .unwrap();
    assert_eq!(changed.kind, EventKind::ValueChanged);
    assert_eq!(
        (changed.lease.token, changed.lease.value.as_slice()),
        (t1, &b"10.0.0.9:80"[..])
    );

    // The hand-over: b leads with its own value, and says so.
    a.resign().await;
    let t2 = b.elected().await.unwrap();
    common::eventually("b's grant reported", || async {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(t, _)| *t == t2)
            .then_some(())
    })
    .await;
    assert_eq!(
        *seen.lock().unwrap(),
        [(t1, b"10.0.0.1:80".to_vec()), (t2, b"10.0.0.2:80".to_vec())],
        "each grant once, with the value its leader published (a change is no new leader)"
    );
    let h = c.history("routed", 10).await.unwrap();
    let values: Vec<(u64, &[u8])> = h.iter().map(|t| (t.token, t.value.as_slice())).collect();
    assert_eq!(values, [(t2, &b"10.0.0.2:80"[..]), (t1, b"10.0.0.1:80")]);
    b.resign().await;
    assert!(c.get_lease("routed").await.unwrap().value.is_empty());
}

/// `ListWaiters` over gRPC: the waiting holders in line order, the
/// preferred first, as their clients named them; `limit` lists the first
/// and counts them all, and over 1000 is refused naming `limit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_waiters_shows_the_line_in_order() {
    use leasehold::client::AcquireOptions;
    let s = TestServer::start().await;
    let c = s.client().await;
    assert!(c.acquire("lined", "a@1", TTL, NOW).await.unwrap().acquired);
    let wait = |holder: &'static str, preferred: bool| {
        let c = c.clone();
        tokio::spawn(async move {
            let o = AcquireOptions {
                preferred,
                ..Default::default()
            };
            c.acquire_with("lined", holder, TTL, Duration::from_secs(60), o)
                .await
        })
    };
    let _w1 = wait("w1@1", false);
    s.wait_for_waiters(1).await;
    let _w2 = wait("w2@1", false);
    s.wait_for_waiters(2).await;
    let _p = wait("p@1", true);
    s.wait_for_waiters(3).await;
    let line = common::eventually("three in line", || async {
        let w = c.list_waiters("lined", 0).await.unwrap();
        (w.waiters.len() == 3).then_some(w)
    })
    .await;
    let names: Vec<(&str, bool)> = line
        .waiters
        .iter()
        .map(|w| (w.holder.as_str(), w.preferred))
        .collect();
    assert_eq!(names, [("p@1", true), ("w1@1", false), ("w2@1", false)]);
    assert_eq!(line.waiting, 3);
    let first = c.list_waiters("lined", 1).await.unwrap();
    assert_eq!((first.waiters.len(), first.waiting), (1, 3));
    match c.list_waiters("lined", 1001).await {
        Err(ClientError::InvalidArgument { field, .. }) => {
            assert_eq!(field.as_deref(), Some("limit"))
        }
        other => panic!("limit 1001: {other:?}"),
    }
    let none = c.list_waiters("nobody-waits", 0).await.unwrap();
    assert_eq!((none.waiters.len(), none.waiting), (0, 0));
}

/// The CLI's side of a leader's value and its candidates: `acquire
/// --value` publishes, `status` shows it (text and JSON), `renew --value`
/// replaces it, `history` keeps the grant's; `waiters` lists the line in
/// order (text and JSON); a value over 1024 bytes is refused naming
/// `value`, and nothing changes.
async fn the_cli_publishes_a_leaders_value_and_lists_its_candidates(place: common::Place) {
    let server = place.start(&[]);
    let url = server.url();
    let cli = |args: &[&str]| common::cli(&url, args);
    let (code, _, err) = cli(&[
        "acquire",
        "routed",
        "--holder",
        "a",
        "--ttl",
        "60s",
        "--value",
        "10.0.0.1:80",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (_, text, _) = cli(&["status", "routed"]);
    assert!(text.lines().next().unwrap().ends_with("VALUE"), "{text}");
    assert!(text.contains("10.0.0.1:80"), "{text}");
    let big = "x".repeat(1025);
    let (code, _, err) = cli(&[
        "renew", "routed", "--holder", "a", "--token", "1", "--ttl", "60s", "--value", &big,
    ]);
    assert_ne!(code, Some(0));
    assert!(err.contains("value") && err.contains("1024"), "{err}");
    let (code, text, err) = cli(&[
        "renew",
        "routed",
        "--holder",
        "a",
        "--token",
        "1",
        "--ttl",
        "60s",
        "--value",
        "10.0.0.2:80",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(text.contains("value=10.0.0.2:80"), "{text}");
    let (_, text, _) = cli(&["status", "routed", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v[0]["value"], "10.0.0.2:80", "{text}");
    let (_, text, _) = cli(&["history", "routed", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(
        v["tenures"][0]["value"], "10.0.0.1:80",
        "the grant's value: {text}"
    );

    let mut waiting = Vec::new();
    for (holder, preferred) in [("w1", false), ("p", true)] {
        let c = leasehold::client::Client::connect(&url).await.unwrap();
        let holder = holder.to_owned();
        waiting.push(tokio::spawn(async move {
            let o = leasehold::client::AcquireOptions {
                preferred,
                ..Default::default()
            };
            c.acquire_with(
                "routed",
                &holder,
                Duration::from_secs(60),
                Duration::from_secs(60),
                o,
            )
            .await
        }));
        server.wait_for_waiters(waiting.len()).await;
    }
    let (code, text, err) = cli(&["waiters", "routed"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "job=routed waiting=2", "{text}");
    assert!(
        lines[1].contains("p") && lines[1].ends_with("preferred"),
        "{text}"
    );
    assert!(lines[2].trim_start().starts_with("2  w1"), "{text}");
    let (_, text, _) = cli(&["waiters", "routed", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["waiting"], 2);
    assert_eq!(v["waiters"][0]["holder"], "p");
    assert_eq!(v["waiters"][1]["holder"], "w1");
    for w in waiting {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_publishes_a_leaders_value_and_lists_its_candidates_on_the_single_node() {
    the_cli_publishes_a_leaders_value_and_lists_its_candidates(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_publishes_a_leaders_value_and_lists_its_candidates_on_etcd() {
    the_cli_publishes_a_leaders_value_and_lists_its_candidates(common::Place::etcd()).await;
}
