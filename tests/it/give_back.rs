//! Giving back a grant whose caller may never have learned of it (a
//! cancelled Acquire), and the rule that makes it safe: **a give-back never
//! ends a lease its holder was told it holds**. A repeated Acquire or a
//! Renew may have told the holder that it leads; after one, only its own
//! release or the TTL ends the lease, or another holder could take over
//! before the TTL it was promised. On real server processes, both
//! backends.

use crate::common;

use std::time::Duration;

use common::Place;
use leasehold::client::Client;
use leasehold::proto;

const TTL: Duration = Duration::from_secs(30);

async fn give_back(
    leases: &mut proto::leases_client::LeasesClient<common::Transport>,
    job: &str,
    holder: &str,
    token: u64,
) -> bool {
    leases
        .release(proto::ReleaseRequest {
            job: job.into(),
            holder: holder.into(),
            token,
            give_back: true,
        })
        .await
        .unwrap_or_else(|e| panic!("a give-back does not fail: {e}"))
        .into_inner()
        .released
}

/// `ReleaseRequest.give_back` releases a grant nobody asked for again, and
/// keeps one that was: asked again by a repeated Acquire, or by a Renew.
async fn only_a_grant_never_asked_for_again(place: Place) {
    let p = place.start(&[]);
    let c = Client::connect(&p.url()).await.unwrap();
    let mut raw = proto::leases_client::LeasesClient::new(common::channel(&p.url()).await);

    // Granted, never asked again: given back, and the job is free.
    let a = c.acquire("j", "a", TTL, Duration::ZERO).await.unwrap();
    assert!(a.acquired);
    assert!(give_back(&mut raw, "j", "a", a.lease.token).await);
    assert_eq!(c.get_lease("j").await.unwrap().holder, None);

    // Asked again with a repeated Acquire: kept.
    let a = c.acquire("j", "a", TTL, Duration::ZERO).await.unwrap();
    let again = c.acquire("j", "a", TTL, Duration::ZERO).await.unwrap();
    assert_eq!(again.lease.token, a.lease.token, "a re-grant");
    assert!(!give_back(&mut raw, "j", "a", a.lease.token).await);
    let l = c.get_lease("j").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("a"), a.lease.token));

    // Asked again with a Renew: kept.
    c.release("j", "a", a.lease.token).await.unwrap();
    let a = c.acquire("j", "a", TTL, Duration::ZERO).await.unwrap();
    c.renew("j", "a", a.lease.token, TTL).await.unwrap();
    assert!(!give_back(&mut raw, "j", "a", a.lease.token).await);
    assert_eq!(c.get_lease("j").await.unwrap().holder.as_deref(), Some("a"));

    // Another holder's, or another token's: nothing changes, no error.
    assert!(!give_back(&mut raw, "j", "b", a.lease.token).await);
    assert!(!give_back(&mut raw, "j", "a", a.lease.token + 1).await);
    assert!(!give_back(&mut raw, "never-granted", "a", 1).await);
    assert_eq!(c.get_lease("j").await.unwrap().holder.as_deref(), Some("a"));

    // A plain release says whether it ended the holding.
    let r = |token| proto::ReleaseRequest {
        job: "j".into(),
        holder: "a".into(),
        token,
        give_back: false,
    };
    let first = raw.release(r(a.lease.token)).await.unwrap().into_inner();
    assert!(first.released);
    let repeated = raw.release(r(a.lease.token)).await.unwrap().into_inner();
    assert!(!repeated.released, "a repeated release changes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_ends_only_a_grant_never_asked_for_again() {
    only_a_grant_never_asked_for_again(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_ends_only_a_grant_never_asked_for_again_on_etcd() {
    only_a_grant_never_asked_for_again(Place::etcd()).await;
}

/// Per round: B holds the job and A waits for it; B releases as A's call
/// is cancelled, and A asks again at once on the same client (a retry, as
/// an elector does). When the retry is granted, A was told that it leads:
/// its lease must still be A's, same token, after any give-back of the
/// cancelled call has had time to run (the Rust client's waits 100 ms).
async fn a_retry_keeps_what_it_was_told(place: Place) {
    const ROUNDS: usize = 20;
    let p = place.start(&[]);
    let a = Client::connect(&p.url()).await.unwrap();
    let b = Client::connect(&p.url()).await.unwrap();
    let mut retried = 0;
    for i in 0..ROUNDS {
        let job = format!("r{i}");
        let held = b.acquire(&job, "b", TTL, Duration::ZERO).await.unwrap();
        assert!(held.acquired);
        let waiting = {
            let (a, job) = (a.clone(), job.clone());
            tokio::spawn(async move { a.acquire(&job, "a", TTL, Duration::from_secs(20)).await })
        };
        // A is in line once its Acquire reached the server.
        p.wait_for_waiters(1).await;
        let skew = Duration::from_micros((i as u64 * 137) % 1000);
        let (r, ()) = tokio::join!(b.release(&job, "b", held.lease.token), async {
            tokio::time::sleep(skew).await;
            waiting.abort();
        });
        r.unwrap();
        let _ = waiting.await;
        let retry = a.acquire(&job, "a", TTL, Duration::from_secs(5)).await;
        let retry = retry.unwrap();
        assert!(
            retry.acquired,
            "round {i}: B released; A's retry is granted"
        );
        retried += 1;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let l = a.get_lease(&job).await.unwrap();
        assert_eq!(
            (l.holder.as_deref(), l.token),
            (Some("a"), retry.lease.token),
            "round {i}: A was told it holds token {}, and its lease ended early",
            retry.lease.token
        );
        a.release(&job, "a", retry.lease.token).await.unwrap();
    }
    assert_eq!(retried, ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_cancelled_acquire_keeps_its_grant() {
    a_retry_keeps_what_it_was_told(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_cancelled_acquire_keeps_its_grant_on_etcd() {
    a_retry_keeps_what_it_was_told(Place::etcd()).await;
}
