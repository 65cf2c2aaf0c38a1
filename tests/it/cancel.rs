//! A waiting `Acquire` cancelled at the instant the lease is released: the
//! server may grant it, but a grant whose caller never receives it is
//! released at once (the clients issue, "a cancelled waiting Acquire can
//! still be granted"): by the server when it could not deliver the reply,
//! by the Rust client when the reply was on its way as the call was
//! cancelled. On real server processes, both backends.

use crate::common;

use std::time::Duration;

use common::Place;
use leasehold::client::Client;

/// Far longer than the test waits for a cancelled grant's release: a job
/// that became free only by expiry fails the test.
const TTL: Duration = Duration::from_secs(300);
const ROUNDS: usize = 100;

/// Per round: A holds job `r{i}`; B waits for it on its own connection;
/// then A releases and B's call is cancelled at the same instant (give or
/// take up to a millisecond either way). Afterwards the job must never stay
/// held by B unless B's call returned the grant to B.
async fn cancel_at_release(place: Place) {
    let p = place.start(&[]);
    let a = Client::connect(&p.url()).await.unwrap();
    let mut granted_and_told = 0;
    let mut released_for_b = 0;
    for i in 0..ROUNDS {
        let job = format!("r{i}");
        let held = a.acquire(&job, "a", TTL, Duration::ZERO).await.unwrap();
        assert!(held.acquired);
        let b = Client::connect(&p.url()).await.unwrap();
        let (told_tx, mut told_rx) = tokio::sync::oneshot::channel();
        let j = job.clone();
        let waiter = tokio::spawn(async move {
            if let Ok(r) = b.acquire(&j, "b", TTL, Duration::from_secs(20)).await {
                let _ = told_tx.send(r);
            }
        });
        // B is in line once its Acquire reached the server.
        p.wait_for_waiters(1).await;
        let skew = Duration::from_micros((i as u64 * 137) % 1000);
        let release = a.release(&job, "a", held.lease.token);
        let cancel = async {
            if i % 2 == 0 {
                tokio::time::sleep(skew).await;
            }
            waiter.abort();
        };
        let (r, ()) = tokio::join!(
            async {
                if i % 2 == 1 {
                    tokio::time::sleep(skew).await;
                }
                release.await
            },
            cancel
        );
        r.unwrap();
        // B's task ended one way or the other: told, or cancelled.
        let _ = waiter.await;
        let told = told_rx.try_recv().ok();
        if told.as_ref().is_some_and(|t| t.acquired) {
            granted_and_told += 1;
            continue;
        }
        // B was not told of a grant: the job must be (or soon be) free,
        // long before B's lease (if B was granted) could run out.
        let what = format!(
            "round {i}: job free again, though it may be held by B, whose Acquire was \
             cancelled and never told it"
        );
        let l = common::eventually(&what, || async {
            let l = a.get_lease(&job).await.unwrap();
            l.holder.is_none().then_some(l)
        })
        .await;
        if l.token > held.lease.token {
            released_for_b += 1;
        }
    }
    println!(
        "{ROUNDS} rounds: {granted_and_told} grants reached B before the cancel, \
         {released_for_b} grants to a cancelled B released at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_cancelled_waiter_is_released_at_once() {
    cancel_at_release(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_cancelled_waiter_is_released_at_once_on_etcd() {
    cancel_at_release(Place::etcd()).await;
}
