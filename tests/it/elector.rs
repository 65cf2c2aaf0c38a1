//! The Rust Elector against the real server.

use crate::common;

use std::time::{Duration, Instant};

use common::{ServerProcess, TestServer};
use leasehold::client::{Client, Elector, Role};

async fn wait_role(e: &Elector, want: impl Fn(Role) -> bool, within: Duration) -> Role {
    let mut rx = e.watch();
    let r = tokio::time::timeout(within, rx.wait_for(|r| want(*r)))
        .await
        .unwrap_or_else(|_| panic!("role not reached within {within:?}; now {:?}", e.role()))
        .map(|r| *r);
    r.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_electors_leads_and_resign_hands_over_at_once() {
    let s = TestServer::start().await;
    let ttl = Duration::from_secs(10);
    let a = Elector::start(s.client().await, "job", "a", ttl);
    let b = Elector::start(s.client().await, "job", "b", ttl);
    // Both share this process's UUID, with different names.
    assert_ne!(a.holder(), b.holder());
    let first = tokio::select! {
        r = wait_role(&a, |r| r.token().is_some(), Duration::from_secs(5)) => (r, 'a'),
        r = wait_role(&b, |r| r.token().is_some(), Duration::from_secs(5)) => (r, 'b'),
    };
    assert_eq!(first.0, Role::Leader { token: 1 });
    let (leader, follower) = if first.1 == 'a' { (a, b) } else { (b, a) };
    // Give the follower time to be queued, then check nobody else leads.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(follower.role(), Role::Follower);
    let lease = s.client().await.get_lease("job").await.unwrap();
    assert_eq!(lease.holder.as_deref(), Some(leader.holder()));

    let t = Instant::now();
    leader.resign().await;
    let r = wait_role(&follower, |r| r.token().is_some(), Duration::from_secs(5)).await;
    let handover = t.elapsed();
    println!("elector hand-over after resign: {handover:?} (ttl {ttl:?})");
    assert_eq!(r, Role::Leader { token: 2 });
    assert!(
        handover < ttl / 4,
        "hand-over came from the release, not expiry: {handover:?}"
    );
    follower.resign().await;
    let lease = s.client().await.get_lease("job").await.unwrap();
    assert_eq!(
        (lease.holder, lease.token),
        (None, 2),
        "resign released the lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elector_steps_down_by_its_own_deadline_when_the_server_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]);
    let ttl = Duration::from_millis(900);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut e = Elector::start(client, "paused", "e", ttl);
    let token = tokio::time::timeout(Duration::from_secs(5), e.elected())
        .await
        .unwrap();
    assert_eq!(token, 1);
    // Let a renewal or two succeed, then freeze the server.
    tokio::time::sleep(ttl).await;
    server.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    wait_role(&e, |r| r == Role::Follower, ttl * 3).await;
    let after = stopped.elapsed();
    println!("elector stepped down {after:?} after the server froze (ttl {ttl:?})");
    // Its deadline is the send time of its last successful renewal plus the
    // TTL, and that renewal was sent before the freeze.
    assert!(
        after <= ttl + Duration::from_millis(300),
        "stepped down late: {after:?}"
    );
    server.signal(libc::SIGCONT);
    drop(e);
}
