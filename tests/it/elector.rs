//! The Rust Elector against the real server.

use crate::common;

use std::time::{Duration, Instant};

use common::{ServerProcess, TestServer};
use leasehold::client::{Client, ClientError, Elector, ElectorSet, Role};
use leasehold::lease::Limits;

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
    // Long: a hand-over by expiry would take a TTL, one by the release a
    // round trip, and a stall of the machine is far shorter than ttl / 4.
    let ttl = Duration::from_secs(60);
    let a = Elector::start(s.client().await, "job", "a", ttl);
    let b = Elector::start(s.client().await, "job", "b", ttl);
    assert_ne!(a.holder(), b.holder());
    let first = tokio::select! {
        r = wait_role(&a, |r| r.token().is_some(), common::PATIENCE) => (r, 'a'),
        r = wait_role(&b, |r| r.token().is_some(), common::PATIENCE) => (r, 'b'),
    };
    assert_eq!(first.0, Role::Leader { token: 1 });
    let (leader, follower) = if first.1 == 'a' { (a, b) } else { (b, a) };
    // Once the follower is queued, nobody else leads.
    s.wait_for_waiters(1).await;
    assert_eq!(follower.role(), Role::Follower);
    let lease = s.client().await.get_lease("job").await.unwrap();
    assert_eq!(lease.holder.as_deref(), Some(leader.holder()));

    let t = Instant::now();
    leader.resign().await;
    let r = wait_role(&follower, |r| r.token().is_some(), common::PATIENCE).await;
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
    // Long enough that "late" (half a TTL more) is longer than a stall of
    // a loaded machine.
    let ttl = Duration::from_secs(10);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut e = Elector::start(client, "paused", "e", ttl);
    let token = tokio::time::timeout(common::PATIENCE, e.elected())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(token, 1);
    // Once a renewal has succeeded, freeze the server.
    server.wait_for_renewals(1).await;
    server.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    wait_role(&e, |r| r == Role::Follower, common::PATIENCE).await;
    let after = stopped.elapsed();
    println!("elector stepped down {after:?} after the server froze (ttl {ttl:?})");
    // Its deadline is the send time of its last successful renewal plus the
    // TTL, and that renewal was sent before the freeze.
    assert!(after <= ttl + ttl / 2, "stepped down late: {after:?}");
    server.signal(libc::SIGCONT);
    drop(e);
}

/// Two electors with the same name for the same job in one process are two
/// holders: one leads at a time, the other's writes are fenced, and the
/// other takes over with a higher token when the leader stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_electors_with_one_name_in_one_process_are_two_holders() {
    let s = TestServer::start().await;
    let client = s.client().await;
    let ttl = Duration::from_secs(10);
    let a = Elector::start(client.clone(), "twin", "worker", ttl);
    let b = Elector::start(client.clone(), "twin", "worker", ttl);
    assert_ne!(a.holder(), b.holder(), "one identity per elector");
    assert!(a.holder().starts_with("worker@") && b.holder().starts_with("worker@"));
    let first = tokio::select! {
        r = wait_role(&a, |r| r.token().is_some(), common::PATIENCE) => (r, 'a'),
        r = wait_role(&b, |r| r.token().is_some(), common::PATIENCE) => (r, 'b'),
    };
    assert_eq!(first.0, Role::Leader { token: 1 });
    let (leader, mut follower) = if first.1 == 'a' { (a, b) } else { (b, a) };
    // Exactly one leads, for a while: the follower is queued, not a second
    // leader with the same token.
    for _ in 0..10 {
        assert_eq!(leader.role(), Role::Leader { token: 1 });
        assert_eq!(follower.role(), Role::Follower);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let lease = client.get_lease("twin").await.unwrap();
    assert_eq!(lease.holder.as_deref(), Some(leader.holder()));
    assert_eq!(
        client
            .checked_write("twin", 1, b"k", b"a".to_vec())
            .await
            .unwrap(),
        1
    );

    leader.resign().await;
    let token = tokio::time::timeout(common::PATIENCE, follower.elected())
        .await
        .expect("the follower takes over")
        .unwrap();
    assert!(token > 1, "a higher token: {token}");
    // The old leader's token is fenced now; the new one writes.
    match client.checked_write("twin", 1, b"k", b"old".to_vec()).await {
        Err(ClientError::Fenced { current_token, .. }) => assert_eq!(current_token, Some(token)),
        other => panic!("the old leader's write was not fenced: {other:?}"),
    }
    client
        .checked_write("twin", token, b"k", b"b".to_vec())
        .await
        .unwrap();
    let lease = client.get_lease("twin").await.unwrap();
    assert_eq!(lease.holder.as_deref(), Some(follower.holder()));
    follower.resign().await;
}

/// Two ElectorSets with one name in one process are two holders too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_elector_sets_with_one_name_are_two_holders() {
    let s = TestServer::start().await;
    let ttl = Duration::from_secs(10);
    let mut a = ElectorSet::start(s.client().await, "sets", ttl);
    let mut b = ElectorSet::start(s.client().await, "sets", ttl);
    assert_ne!(a.holder(), b.holder());
    let mut ra = a.campaign("shared");
    let mut rb = b.campaign("shared");
    let first = tokio::time::timeout(common::PATIENCE, async {
        tokio::select! {
            r = ra.wait_for(|r| r.token().is_some()) => *r.unwrap(),
            r = rb.wait_for(|r| r.token().is_some()) => *r.unwrap(),
        }
    })
    .await
    .unwrap();
    assert_eq!(first, Role::Leader { token: 1 });
    // Once the other is queued, exactly one leads.
    s.wait_for_waiters(1).await;
    assert_eq!(
        a.leading().len() + b.leading().len(),
        1,
        "exactly one leads"
    );
    let (leader, mut follower) = if a.leading().is_empty() {
        (b, a)
    } else {
        (a, b)
    };
    leader.resign().await;
    let mut rf = follower.campaign("shared");
    let r = tokio::time::timeout(common::PATIENCE, rf.wait_for(|r| r.token().is_some()))
        .await
        .unwrap()
        .map(|r| *r)
        .unwrap();
    assert_eq!(r, Role::Leader { token: 2 });
    follower.resign().await;
}

/// Errors that asking again cannot fix stop the campaign, and `elected`
/// returns them: checked up front, or refused by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elector_stops_on_an_error_retrying_cannot_fix() {
    let limits = Limits {
        max_ttl: Duration::from_secs(10),
        max_name_bytes: 64,
        ..Limits::default()
    };
    let s = TestServer::with_limits(limits).await;
    let client = s.client().await;
    let within = common::PATIENCE;
    let field_of = |r: Result<Result<u64, ClientError>, _>| match r {
        Ok(Err(ClientError::InvalidArgument { field, .. })) => field,
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    };

    // Up front, without asking the server.
    let mut e = Elector::start(client.clone(), "", "n", Duration::from_secs(1));
    assert_eq!(
        field_of(tokio::time::timeout(within, e.elected()).await).as_deref(),
        Some("job")
    );
    let mut e = Elector::start(client.clone(), "j", "", Duration::from_secs(1));
    assert_eq!(
        field_of(tokio::time::timeout(within, e.elected()).await).as_deref(),
        Some("holder")
    );
    let mut e = Elector::start(client.clone(), "j", "n", Duration::ZERO);
    assert_eq!(
        field_of(tokio::time::timeout(within, e.elected()).await).as_deref(),
        Some("ttl")
    );
    assert!(e.error().is_some());

    // Refused by the server: a TTL over --max-ttl, a job over
    // --max-name-bytes.
    let mut e = Elector::start(client.clone(), "long-ttl", "n", Duration::from_secs(20));
    assert_eq!(
        field_of(tokio::time::timeout(within, e.elected()).await).as_deref(),
        Some("ttl")
    );
    assert_eq!(e.role(), Role::Follower);
    e.resign().await;
    let long_job = "j".repeat(65);
    let mut e = Elector::start(client.clone(), &long_job, "n", Duration::from_secs(1));
    assert_eq!(
        field_of(tokio::time::timeout(within, e.elected()).await).as_deref(),
        Some("job")
    );
    assert_eq!(
        client.list_leases("").await.unwrap().len(),
        0,
        "nothing was acquired"
    );

    // An ElectorSet's campaign stops the same way.
    let mut set = ElectorSet::start(client.clone(), "n", Duration::from_secs(20));
    let mut role = set.campaign("set-long-ttl");
    tokio::time::timeout(within, role.changed())
        .await
        .expect("the campaign ends")
        .expect_err("its role sender is closed");
    assert!(matches!(
        set.error("set-long-ttl"),
        Some(ClientError::InvalidArgument { .. })
    ));
    set.resign().await;
}

/// Counts the client's warnings, and its failed attempts (one debug event
/// each), on this thread.
#[derive(Clone, Default)]
struct ClientEvents {
    warnings: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    attempts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ClientEvents {
    fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        use std::sync::atomic::Ordering::Relaxed;
        let m = e.metadata();
        if !m.target().starts_with("leasehold_client") {
            return;
        }
        match *m.level() {
            tracing::Level::WARN => self.warnings.fetch_add(1, Relaxed),
            tracing::Level::DEBUG if m.name().contains("elector") => {
                self.attempts.fetch_add(1, Relaxed)
            }
            _ => 0,
        };
    }
}

/// The server killed under a leader for 5 s: the elector retries with
/// backoff (a bounded number of attempts, and of warnings), steps down by
/// its deadline, and leads again soon after the server is back on the same
/// port and data dir (tonic's channel reconnects on the next call).
#[tokio::test(flavor = "current_thread")]
async fn an_elector_backs_off_through_an_outage_and_leads_again_when_the_server_is_back() {
    use std::sync::atomic::Ordering::Relaxed;
    use tracing_subscriber::layer::SubscriberExt;
    let events = ClientEvents::default();
    // The elector's task runs on this thread (a current-thread runtime).
    let _log =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]);
    let addr = server.addr;
    let ttl = Duration::from_secs(2);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut e = Elector::start(client, "outage", "e", ttl);
    let first = tokio::time::timeout(common::PATIENCE, e.elected())
        .await
        .unwrap()
        .unwrap();
    server.kill9();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (warnings, attempts) = (events.warnings.load(Relaxed), events.attempts.load(Relaxed));
    // Its deadline (2 s) passed long ago; its task may not have run yet
    // on a stalled machine.
    wait_role(&e, |r| r == Role::Follower, common::PATIENCE).await;
    println!("5 s outage: {attempts} failed attempts, {warnings} warnings");
    // Backoff: renewals from ttl/10 within the deadline, then a campaign
    // from 100 ms up to 1 s; warnings one every 5 s (plus the step-down).
    assert!(attempts <= 25, "{attempts} attempts in a 5 s outage");
    assert!(warnings <= 4, "{warnings} warnings in a 5 s outage");

    let mut cmd = std::process::Command::new(common::bin());
    cmd.args([
        "serve",
        "--listen",
        &addr.to_string(),
        "--admin-listen",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(dir.path());
    let back = ServerProcess::spawn(cmd, dir.path());
    let t = Instant::now();
    let token = tokio::time::timeout(common::PATIENCE, e.elected())
        .await
        .expect("leads again after the server is back")
        .unwrap();
    println!("re-elected {:?} after the server was back", t.elapsed());
    assert!(token >= first);
    drop(e);
    drop(back);
}
