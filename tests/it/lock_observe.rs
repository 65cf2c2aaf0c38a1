//! The Rust client's lock, observation and on-new-leader callback, on a
//! real server process: the capabilities every client has in its own
//! idiom (clients/README.md, "Capabilities"). A `Lock` guard waits, renews
//! past its TTL, releases on `release` and on drop, and reports a loss
//! (the chaos API's `expire`), after which its token is fenced; a lock
//! that times out leaves nothing held. `Client::observe` streams the
//! current lease and each change, and ends with the typed error when the
//! server stops. `Elector::on_new_leader` reports every grant in token
//! order, its own included.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ServerProcess;
use leasehold::client::{Client, ClientError, Elector, EventKind, LockOptions};

const TTL: Duration = Duration::from_millis(900);
const LONG: Duration = Duration::from_secs(30);

async fn client(p: &ServerProcess) -> Client {
    Client::connect(&p.url()).await.unwrap()
}

async fn holder_of(c: &Client, job: &str) -> Option<String> {
    c.get_lease(job).await.unwrap().holder
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waits_renews_releases_and_reports_its_loss() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(&dir.path().join("data"), &["--enable-chaos"]);
    let c = client(&p).await;

    // Held past several TTLs: it renews.
    let first = c.lock("reports", TTL).await.unwrap();
    assert_eq!(first.token(), 1);
    tokio::time::sleep(TTL * 3).await;
    assert!(first.is_held());
    first.check().unwrap();
    assert_eq!(
        holder_of(&c, "reports").await.as_deref(),
        Some(first.holder())
    );
    assert_eq!(
        c.checked_write("reports", 1, b"k", b"a".to_vec())
            .await
            .unwrap(),
        1
    );

    // A second lock waits for the first; a release hands over at once.
    let c2 = c.clone();
    let second = tokio::spawn(async move { c2.lock("reports", TTL).await });
    p.wait_for_waiters(1).await;
    assert!(!second.is_finished());
    first.release().await;
    let mut second = tokio::time::timeout(LONG, second)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.token(), 2);

    // A loss: the lock says so, and its token's writes are fenced.
    c.chaos().expire("reports").await.unwrap();
    tokio::time::timeout(LONG, second.lost())
        .await
        .expect("the loss is reported");
    assert!(!second.is_held());
    assert!(matches!(second.check(), Err(ClientError::LeaseLost { .. })));
    let third = c.lock("reports", TTL).await.unwrap();
    assert_eq!(third.token(), 3, "the lost lock does not campaign again");
    let fenced = c.checked_write("reports", 2, b"k", b"b".to_vec()).await;
    assert!(
        matches!(fenced, Err(ClientError::Fenced { .. })),
        "{fenced:?}"
    );

    // Dropped: released in the background.
    drop(third);
    common::eventually("the dropped lock is released", || async {
        holder_of(&c, "reports").await.is_none().then_some(())
    })
    .await;
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_that_times_out_leaves_nothing_held() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(&dir.path().join("data"), &[]);
    let c = client(&p).await;
    let held = c.lock("busy", Duration::from_secs(30)).await.unwrap();
    let options = LockOptions {
        name: "late".into(),
        timeout: Some(Duration::from_millis(300)),
        ..LockOptions::default()
    };
    let late = c.lock_with("busy", Duration::from_secs(30), options).await;
    let Err(ClientError::Unavailable(message)) = late else {
        panic!("a timed-out lock: {:?}", late.map(|l| l.token()));
    };
    assert!(message.contains("not acquired within"), "{message}");
    // The holder is still the first, and once it goes nobody is left
    // holding the job (the timed-out wait did not queue a grant).
    assert_eq!(holder_of(&c, "busy").await.as_deref(), Some(held.holder()));
    held.release().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(holder_of(&c, "busy").await, None);
    assert_eq!(c.get_lease("busy").await.unwrap().token, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_streams_each_change_and_ends_with_the_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(&dir.path().join("data"), &[]);
    let c = client(&p).await;
    let mut changes = c.observe("watched").await.unwrap();
    let first = changes.next().await.unwrap().unwrap();
    assert_eq!(first.kind, EventKind::Current);
    assert_eq!((first.lease.holder, first.lease.token), (None, 0));

    c.acquire("watched", "a", Duration::from_millis(500), Duration::ZERO)
        .await
        .unwrap();
    let acquired = changes.next().await.unwrap().unwrap();
    assert_eq!(acquired.kind, EventKind::Acquired);
    assert_eq!(
        (acquired.lease.holder.as_deref(), acquired.lease.token),
        (Some("a"), 1)
    );
    // Not renewed: it expires.
    let expired = changes.next().await.unwrap().unwrap();
    assert_eq!(expired.kind, EventKind::Expired);
    assert_eq!(expired.lease.holder, None);

    c.acquire("watched", "b", LONG, Duration::ZERO)
        .await
        .unwrap();
    let b = changes.next().await.unwrap().unwrap();
    assert_eq!((b.lease.holder.as_deref(), b.lease.token), (Some("b"), 2));
    c.release("watched", "b", 2).await.unwrap();
    let released = changes.next().await.unwrap().unwrap();
    assert_eq!(released.kind, EventKind::Released);

    // The server stops: the stream ends with a typed error, then ends.
    p.stop();
    let end = tokio::time::timeout(LONG, changes.next()).await.unwrap();
    assert!(
        matches!(end, Some(Err(ClientError::Unavailable(_)))),
        "{end:?}"
    );
    assert!(changes.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_new_leader_reports_every_grant_in_token_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(&dir.path().join("data"), &[]);
    let c = client(&p).await;
    // Another holder leads first.
    c.acquire("led", "other", LONG, Duration::ZERO)
        .await
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::<(String, u64)>::new()));
    let mut e = Elector::start(c.clone(), "led", "watcher", TTL);
    let log = seen.clone();
    e.on_new_leader(move |l| {
        log.lock()
            .unwrap()
            .push((l.holder.clone().unwrap_or_default(), l.token))
    });
    let report = |n: usize| {
        let seen = seen.clone();
        async move {
            common::eventually(&format!("{n} reports"), || async {
                let s = seen.lock().unwrap().clone();
                (s.len() >= n).then_some(s)
            })
            .await
        }
    };
    assert_eq!(report(1).await, vec![("other".to_string(), 1)]);
    // Released: the elector is granted token 2, and reports itself.
    c.release("led", "other", 1).await.unwrap();
    assert_eq!(e.elected().await.unwrap(), 2);
    let s = report(2).await;
    assert_eq!(s[1], (e.holder().to_string(), 2));
    // Lost to the other holder (its lease expired while it was stopped:
    // here, resigned), then granted to "other" again: token 3.
    let holder = e.holder().to_string();
    e.resign().await;
    let mut e2 = Elector::start(c.clone(), "led", "watcher2", TTL);
    let log2 = seen.clone();
    e2.on_new_leader(move |l| {
        log2.lock()
            .unwrap()
            .push((l.holder.clone().unwrap_or_default(), l.token))
    });
    assert_eq!(e2.elected().await.unwrap(), 3);
    let s = report(3).await;
    assert_eq!(s[2], (e2.holder().to_string(), 3));
    let tokens: Vec<u64> = s.iter().map(|(_, t)| *t).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "token order: {s:?}");
    assert!(s.iter().any(|(h, _)| *h == holder));
    e2.resign().await;
}

/// An ElectorSet whose server is frozen (SIGSTOP) steps down from each
/// job by that job's own deadline (the send time of its last successful
/// renewal, plus the TTL), though no renewal answer ever comes, and the
/// KeepAlive stream is stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elector_set_steps_down_from_each_job_by_its_own_deadline_when_the_server_is_frozen() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(&dir.path().join("data"), &[]);
    let c = client(&p).await;
    let ttl = Duration::from_secs(2);
    let mut set = leasehold::client::ElectorSet::start(c.clone(), "frozen", ttl);
    let mut roles = Vec::new();
    for job in ["f-a", "f-b", "f-c"] {
        let mut role = set.campaign(job);
        role.wait_for(|r| r.token().is_some()).await.unwrap();
        roles.push(role);
    }
    let frozen = tokio::time::Instant::now();
    p.signal(libc::SIGSTOP);
    let mut took = Vec::new();
    for role in &mut roles {
        tokio::time::timeout(ttl * 5, role.wait_for(|r| r.token().is_none()))
            .await
            .expect("stepped down")
            .unwrap();
        took.push(frozen.elapsed());
    }
    p.signal(libc::SIGCONT);
    // Each by its deadline: no later than a TTL after the freeze (its last
    // renewal was sent before it), with room for a loaded machine to wake
    // the task up.
    for t in &took {
        assert!(
            *t <= ttl + Duration::from_secs(1),
            "stepped down {t:?} after the freeze"
        );
    }
    assert!(set.leading().is_empty());
    set.resign().await;
}

/// An Elector resigned while its waiting Acquire is being granted has
/// given that grant back by the time `resign` returns: a process that
/// exits once it has resigned (as `leasehold run` and the conformance
/// worker do) leaves the job free, not held for a TTL by a holder that
/// never learned its token. The leader's release and the resign race, 20
/// rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigned_elector_has_given_back_a_grant_made_as_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(&dir.path().join("data"), &[]);
    let c = client(&p).await;
    for round in 0..20 {
        let a = c
            .acquire("race", "leader", LONG, Duration::ZERO)
            .await
            .unwrap();
        let e = Elector::start(client(&p).await, "race", "waiter", LONG);
        let holder = e.holder().to_owned();
        p.wait_for_waiters(1).await;
        let (released, ()) = tokio::join!(c.release("race", "leader", a.lease.token), e.resign());
        released.unwrap();
        let l = c.get_lease("race").await.unwrap();
        assert_ne!(
            l.holder.as_deref(),
            Some(holder.as_str()),
            "round {round}: {l:?}"
        );
        if let Some(h) = l.holder {
            panic!("round {round}: held by {h}");
        }
    }
}

/// A leader's published value is part of its durable grant: after the
/// server is SIGKILLed and started again on its data dir, the restored
/// lease still carries it, and so does the history's tenure; its
/// replacement by a renewal is durable before the reply too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_value_survives_a_crash() {
    use leasehold::client::AcquireOptions;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let p = ServerProcess::start(&data, &[]);
    let c = client(&p).await;
    let o = AcquireOptions {
        value: b"10.0.0.1:80".to_vec(),
        ..Default::default()
    };
    let g = c
        .acquire_with("durable", "a@1", LONG, Duration::ZERO, o)
        .await
        .unwrap();
    assert!(g.acquired);
    c.acquire_with("other", "b@1", LONG, Duration::ZERO, Default::default())
        .await
        .unwrap();
    let r = c
        .renew_with_value("other", "b@1", 1, LONG, Some(b"10.0.0.2:80"))
        .await
        .unwrap();
    assert_eq!(r.lease.value, b"10.0.0.2:80");
    p.kill9();

    let p = ServerProcess::start(&data, &[]);
    let c = client(&p).await;
    let l = c.get_lease("durable").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.token, l.value.as_slice()),
        (Some("a@1"), 1, &b"10.0.0.1:80"[..])
    );
    assert_eq!(c.get_lease("other").await.unwrap().value, b"10.0.0.2:80");
    let h = c.history("durable", 10).await.unwrap();
    assert_eq!(h[0].value, b"10.0.0.1:80");
    p.stop();
}
