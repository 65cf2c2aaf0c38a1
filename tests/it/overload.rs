//! Overload and hostile clients: deadlines, the caps on calls in flight and
//! on connections, and watchers that stop reading.

use crate::common;

use std::time::{Duration, Instant};

use common::TestServer;
use leasehold::client::{Client, ClientError};
use leasehold::proto;
use leasehold::server::Config;
use tonic::Code;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_deadline_ends_a_waiting_acquire_and_frees_its_place() {
    let s = TestServer::start().await;
    let c = s.client().await;
    assert!(
        c.acquire("j", "a", TTL, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    let mut raw = proto::leases_client::LeasesClient::connect(s.url())
        .await
        .unwrap();
    let mut req = tonic::Request::new(proto::AcquireRequest {
        job: "j".into(),
        holder: "b".into(),
        ttl: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        wait: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
    });
    req.set_timeout(Duration::from_millis(300));
    let t = Instant::now();
    let err = raw.acquire(req).await.unwrap_err();
    let took = t.elapsed();
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{err:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the 300 ms deadline was not honoured: {took:?}"
    );
    // The server dropped the call, so the waiter left the queue.
    let t = Instant::now();
    while s.node.snapshot().waiters != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the timed-out waiter stayed queued"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_the_in_flight_cap_are_refused_at_once_and_then_served_again() {
    let config = Config {
        max_in_flight: 2,
        ..Config::default()
    };
    let s = TestServer::with_config(tempfile::tempdir().unwrap(), config).await;
    let c = s.client().await;
    assert!(
        c.acquire("j", "a", TTL, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    let mut waiters = Vec::new();
    for (h, wait) in [("b", 20), ("c", 1)] {
        let c = c.clone();
        waiters.push(tokio::spawn(async move {
            c.acquire("j", h, TTL, Duration::from_secs(wait)).await
        }));
    }
    let t = Instant::now();
    while s.node.snapshot().waiters < 2 {
        assert!(t.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut raw = proto::leases_client::LeasesClient::connect(s.url())
        .await
        .unwrap();
    let st = raw
        .get_lease(proto::GetLeaseRequest { job: "j".into() })
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
    assert!(
        st.message().contains("--max-in-flight") && st.message().contains('2'),
        "{}",
        st.message()
    );
    // When c gives up waiting, its place in the cap comes back.
    let c_gave_up = waiters.pop().unwrap().await.unwrap().unwrap();
    assert!(!c_gave_up.acquired);
    c.release("j", "a", 1).await.unwrap();
    let b = waiters.pop().unwrap().await.unwrap().unwrap();
    assert!(b.acquired);
    assert_eq!(c.get_lease("j").await.unwrap().holder.as_deref(), Some("b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_and_room_comes_back() {
    let config = Config {
        max_connections: 2,
        ..Config::default()
    };
    let s = TestServer::with_config(tempfile::tempdir().unwrap(), config).await;
    let a = s.client().await;
    let b = s.client().await;
    a.get_lease("j").await.unwrap();
    b.get_lease("j").await.unwrap();
    // A third connection is closed on accept.
    let third = async {
        let c = Client::connect(&s.url()).await?;
        c.get_lease("j").await
    };
    match tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .unwrap()
    {
        Err(ClientError::Unavailable(_)) => {}
        other => panic!("a third connection: {other:?}"),
    }
    // The first two still work; closing one makes room.
    a.get_lease("j").await.unwrap();
    drop(b);
    let t = Instant::now();
    loop {
        let r = async { Client::connect(&s.url()).await?.get_lease("j").await }.await;
        if r.is_ok() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no room after a close: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A watcher that stops reading costs bounded memory and blocks nobody:
/// while it sleeps, changes are folded into the latest state, and when it
/// reads again it catches up to that state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watcher_is_folded_not_buffered_and_blocks_nobody() {
    let s = TestServer::start().await;
    let c = s.client().await;
    // A consumer that reads slowly, as the server sees it: a tiny HTTP/2
    // window, so the transport itself buffers only a few events.
    let channel = tonic::transport::Endpoint::from_shared(s.url())
        .unwrap()
        .initial_stream_window_size(Some(1024))
        .initial_connection_window_size(Some(1024))
        .connect()
        .await
        .unwrap();
    let watcher = Client::from_channel(channel);
    let mut events = watcher.watch("hot").await.unwrap();
    assert_eq!(
        events.message().await.unwrap().unwrap().kind,
        proto::lease_event::Kind::Current as i32
    );

    // 1,000 changes while the watcher reads nothing.
    let changes = 500;
    let t = Instant::now();
    for i in 0..changes {
        let a = c.acquire("hot", "h", TTL, Duration::ZERO).await.unwrap();
        assert!(a.acquired, "change {i}");
        c.release("hot", "h", a.lease.token).await.unwrap();
    }
    println!(
        "{} changes with a stalled watcher took {:?}",
        changes * 2,
        t.elapsed()
    );

    // Now it reads: it must reach the final state (released, last token)
    // having received far fewer events than there were changes.
    let mut received = 0;
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.message())
            .await
            .expect("the watcher catches up")
            .unwrap()
            .unwrap();
        received += 1;
        let l = ev.lease.unwrap();
        if l.token == changes as u64 && l.holder.is_empty() {
            break;
        }
    }
    println!(
        "the stalled watcher received {received} events for {} changes",
        changes * 2
    );
    assert!(
        received < 100,
        "changes were buffered, not folded: {received}"
    );
}
