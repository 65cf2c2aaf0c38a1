//! etcd mode: a `KeepAlive` stream's leases on one shared etcd lease (a
//! group, `crates/leasehold-etcd/src/groups.rs`), on a real etcd and real
//! frontend processes.
//!
//! What is shown: a stream that renews the same leases message after
//! message costs etcd one `LeaseKeepAlive` a message (etcd's own counter),
//! and sharing changes no lease's life: a lease the stream stops renewing,
//! released, renewed elsewhere, or left by a frontend SIGKILLed, runs out
//! exactly as on an etcd lease of its own: never before a TTL after its
//! last renewal was sent, and soon after.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::{fresh_prefix, frontend, EtcdCluster};
use leasehold::client::{Client, KeepAliveRenewal};
use leasehold::etcd::client::{range_req, Etcd};
use leasehold::etcd::keys::{HolderRec, Keys};
use tonic::transport::Endpoint;

const TTL: Duration = Duration::from_secs(4);
const NOW: Duration = Duration::ZERO;

fn client_of(url: &str) -> Client {
    let ch = Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(30))
        .connect_lazy();
    Client::from_channel(ch)
}

/// Each job's holder key as etcd has it: (etcd lease, record); `None`
/// when absent.
async fn holder_keys(etcd: &Etcd, keys: &Keys, jobs: &[String]) -> Vec<Option<(i64, HolderRec)>> {
    let mut out = Vec::new();
    for j in jobs {
        let r = etcd
            .range(range_req(keys.holder(j), Vec::new(), 0))
            .await
            .unwrap();
        out.push(
            r.kvs
                .first()
                .map(|kv| (kv.lease, HolderRec::decode(&kv.value).unwrap())),
        );
    }
    out
}

/// The `LeaseKeepAlive` messages etcd's member received so far
/// (`grpc_server_msg_received_total`).
async fn etcd_keep_alives(endpoint: &str) -> u64 {
    let addr = endpoint.trim_start_matches("http://").parse().unwrap();
    let (_, body) = common::admin_request(addr, "/metrics").await;
    body.lines()
        .filter(|l| {
            l.starts_with("grpc_server_msg_received_total")
                && l.contains("grpc_method=\"LeaseKeepAlive\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The frontend's counters from `/metrics`, by name.
async fn metrics(f: &common::ServerProcess) -> impl Fn(&str) -> u64 {
    let (_, body) = common::admin_request(f.admin, "/metrics").await;
    move |name: &str| {
        common::metric(&body, name).unwrap_or_else(|| panic!("{name} in /metrics")) as u64
    }
}

/// Polls `job` through `c` until it is free, and checks when: never
/// answered free before `sent + TTL` (`sent`: when its last renewal was
/// sent), and free within a few seconds after (etcd checks expiries every
/// half second, and rounds a lease moved off its group up to a whole
/// second).
async fn runs_out_on_time(c: &Client, job: &str, sent: Instant) {
    loop {
        let l = c.get_lease(job).await.unwrap();
        let answered = Instant::now();
        if l.holder.is_none() {
            assert!(
                answered >= sent + TTL,
                "{job} ran out {:?} after its last renewal was sent, before its TTL ({TTL:?})",
                answered - sent
            );
            return;
        }
        assert!(
            answered < sent + TTL + Duration::from_secs(6),
            "{job} still held {:?} after its last renewal was sent",
            answered - sent
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn batch(jobs: &[String], tokens: &[u64]) -> Vec<KeepAliveRenewal> {
    jobs.iter()
        .zip(tokens)
        .map(|(j, t)| KeepAliveRenewal::new(j, "me", *t, TTL))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_keeps_its_leases_alive_with_one_etcd_lease_and_each_still_runs_out_on_time() {
    let cluster = EtcdCluster::start(1);
    let prefix = fresh_prefix();
    let f = frontend(&cluster.endpoints_arg(), &prefix, &[]);
    let observer = frontend(&cluster.endpoints_arg(), &prefix, &[]);
    let (c, o) = (client_of(&f.url()), client_of(&observer.url()));
    let etcd = Etcd::connect(&cluster.endpoints(), Duration::from_secs(5)).unwrap();
    let keys = Keys::new(&prefix);

    let jobs: Vec<String> = (0..10).map(|i| format!("g{i}")).collect();
    let mut tokens = Vec::new();
    for j in &jobs {
        let a = c.acquire(j, "me", TTL, NOW).await.unwrap();
        assert!(a.acquired);
        tokens.push(a.lease.token);
    }
    let own: HashSet<i64> = holder_keys(&etcd, &keys, &jobs)
        .await
        .into_iter()
        .map(|h| h.unwrap().0)
        .collect();
    assert_eq!(own.len(), 10, "each grant on an etcd lease of its own");

    // The first renewal tells each grant; the second keeps each etcd lease
    // alive on its own, then moves them all onto one.
    let mut ka = c.keep_alive().await.unwrap();
    for _ in 0..2 {
        let out = ka.renew(&batch(&jobs, &tokens)).await.unwrap();
        assert!(out.iter().all(|o| o.is_renewed()), "{out:?}");
    }
    let held = holder_keys(&etcd, &keys, &jobs).await;
    let group: HashSet<i64> = held.iter().map(|h| h.as_ref().unwrap().0).collect();
    assert_eq!(
        group.len(),
        1,
        "one etcd lease for the stream's leases: {held:?}"
    );
    let group = *group.iter().next().unwrap();
    assert!(!own.contains(&group));
    assert!(held.iter().all(|h| h.as_ref().unwrap().1.sharing.shared));

    // From now on one etcd keep-alive a message, not one a lease (the
    // frontends' session keep-alives count too: a few a second each).
    let before = etcd_keep_alives(&cluster.endpoint(0)).await;
    for _ in 0..10 {
        let out = ka.renew(&batch(&jobs, &tokens)).await.unwrap();
        assert!(out.iter().all(|o| o.is_renewed()), "{out:?}");
    }
    let sent = etcd_keep_alives(&cluster.endpoint(0)).await - before;
    assert!(
        (10..50).contains(&sent),
        "{sent} LeaseKeepAlive messages for 10 messages of 10 renewals (100 without groups)"
    );

    let m = metrics(&f).await;
    assert!(
        m("leasehold_etcd_group_keep_alives_total") >= 10,
        "keep-alives"
    );
    assert_eq!(m("leasehold_etcd_group_joins_total"), 10, "joins");
    assert_eq!(m("leasehold_etcd_group_moves_off_total"), 0, "moves off");

    // g0 left out from here on: moved to an etcd lease of its own before
    // the group's is kept alive, it runs out a TTL after its last renewal,
    // while the others live on.
    let last_g0 = Instant::now();
    let out = ka.renew(&batch(&jobs, &tokens)).await.unwrap();
    assert!(out.iter().all(|o| o.is_renewed()));
    let stop = Arc::new(AtomicBool::new(false));
    let renewing = {
        let (jobs, tokens, stop) = (jobs[1..].to_vec(), tokens[1..].to_vec(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let out = ka.renew(&batch(&jobs, &tokens)).await.unwrap();
                assert!(out.iter().all(|o| o.is_renewed()), "{out:?}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            ka
        })
    };
    let g0 = common::eventually("g0 moved off the group's etcd lease", || async {
        let h = holder_keys(&etcd, &keys, &jobs[..1]).await[0].clone();
        h.filter(|(lease, _)| *lease != group)
    })
    .await;
    assert_eq!((g0.1.sharing.shared, g0.1.sharing.moved_off), (false, 1));
    assert_eq!(metrics(&f).await("leasehold_etcd_group_moves_off_total"), 1);
    runs_out_on_time(&o, "g0", last_g0).await;
    stop.store(true, Ordering::Relaxed);
    let mut ka = renewing.await.unwrap();

    // A unary Renew of a member moves it to its own etcd lease (renewing
    // it alone); a release of another does not end the group's etcd
    // lease: the stream's next messages renew every one still held.
    c.renew("g1", "me", tokens[1], TTL).await.unwrap();
    let g1 = holder_keys(&etcd, &keys, &jobs[1..2]).await[0]
        .clone()
        .unwrap();
    assert_ne!(g1.0, group);
    c.release("g2", "me", tokens[2]).await.unwrap();
    let rest: Vec<String> = jobs[1..].iter().filter(|j| *j != "g2").cloned().collect();
    let rest_tokens: Vec<u64> = rest
        .iter()
        .map(|j| tokens[jobs.iter().position(|x| x == j).unwrap()])
        .collect();
    for _ in 0..3 {
        let out = ka.renew(&batch(&rest, &rest_tokens)).await.unwrap();
        assert!(out.iter().all(|o| o.is_renewed()), "{out:?}");
    }
    let l = o.get_lease("g3").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("me"), tokens[3]));
    assert!(o.get_lease("g2").await.unwrap().holder.is_none());
    let held = holder_keys(&etcd, &keys, &rest).await;
    let leases: HashSet<i64> = held.iter().map(|h| h.as_ref().unwrap().0).collect();
    assert_eq!(leases.len(), 1, "g1 back in the group: {held:?}");

    // The frontend SIGKILLed after one more message: every lease it kept
    // alive runs out a TTL after that message was sent, not before.
    let last = Instant::now();
    let out = ka.renew(&batch(&rest, &rest_tokens)).await.unwrap();
    assert!(out.iter().all(|o| o.is_renewed()), "{out:?}");
    f.kill9();
    for j in &rest {
        runs_out_on_time(&o, j, last).await;
    }
}

/// Leases renewed on two streams in turn. When a stream renews every
/// lease of the other's group (a client whose stream was opened again),
/// it takes the group over in one transaction: every lease stays shared,
/// and none counts a move off. When it renews only some, each of those
/// moves to an etcd lease of its own, and after
/// `Sharing::MAX_MOVES_OFF` moves stays there instead of moving at every
/// renewal. Every renewal succeeds throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_renewed_on_two_streams_in_turn_are_taken_over_or_settle_on_their_own() {
    let cluster = EtcdCluster::start(1);
    let prefix = fresh_prefix();
    let f = frontend(&cluster.endpoints_arg(), &prefix, &[]);
    let c = client_of(&f.url());
    let etcd = Etcd::connect(&cluster.endpoints(), Duration::from_secs(5)).unwrap();
    let keys = Keys::new(&prefix);
    let jobs: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    let mut tokens = Vec::new();
    for j in &jobs {
        tokens.push(c.acquire(j, "me", TTL, NOW).await.unwrap().lease.token);
    }
    let mut a = c.keep_alive().await.unwrap();
    let mut b = c.keep_alive().await.unwrap();
    let mut groups = HashSet::new();
    for round in 0..8 {
        let ka = if round % 2 == 0 { &mut a } else { &mut b };
        let out = ka.renew(&batch(&jobs, &tokens)).await.unwrap();
        assert!(out.iter().all(|o| o.is_renewed()), "round {round}: {out:?}");
        if round >= 2 {
            let held = holder_keys(&etcd, &keys, &jobs).await;
            let leases: HashSet<i64> = held.iter().map(|h| h.as_ref().unwrap().0).collect();
            assert_eq!(leases.len(), 1, "round {round}: one group: {held:?}");
            for h in &held {
                let rec = &h.as_ref().unwrap().1;
                assert!(rec.sharing.shared && rec.sharing.moved_off == 0, "{rec:?}");
            }
            groups.extend(leases);
        }
    }
    assert_eq!(groups.len(), 2, "each stream's group, taken over in turn");

    // b renews t0..t2 only: they move off a's group, and then back into
    // it when a renews them, three times; after that they stay on their
    // own etcd leases. t3 and t4 stay in a's group.
    for round in 0..10 {
        let (ka, n) = if round % 2 == 0 {
            (&mut a, 5)
        } else {
            (&mut b, 3)
        };
        let out = ka.renew(&batch(&jobs[..n], &tokens[..n])).await.unwrap();
        assert!(out.iter().all(|o| o.is_renewed()), "round {round}: {out:?}");
    }
    let held = holder_keys(&etcd, &keys, &jobs).await;
    for h in &held[..3] {
        let rec = &h.as_ref().unwrap().1;
        assert_eq!(
            (rec.sharing.shared, rec.sharing.moved_off),
            (false, 3),
            "{held:?}"
        );
    }
    let own: HashSet<i64> = held[..3].iter().map(|h| h.as_ref().unwrap().0).collect();
    assert_eq!(own.len(), 3, "each on its own etcd lease: {held:?}");
    for h in &held[3..] {
        assert!(h.as_ref().unwrap().1.sharing.shared, "{held:?}");
    }
}

/// A `KeepAlive` renewal tells its holder when a preferred candidate
/// waits, on a group's lease as on its own: the batch's read counts the
/// preferred candidates once for all its jobs, and each job's only when
/// some wait. A plain waiter, or one for another job, tells nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_on_a_group_tells_its_holder_a_preferred_candidate_waits() {
    use leasehold::client::AcquireOptions;
    use leasehold::proto;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::ReceiverStream;

    let cluster = EtcdCluster::start(1);
    let prefix = fresh_prefix();
    let f = frontend(&cluster.endpoints_arg(), &prefix, &[]);
    let c = client_of(&f.url());
    let jobs = ["pa", "pb", "pc"];
    let mut tokens = Vec::new();
    for j in jobs {
        tokens.push(c.acquire(j, "me", TTL, NOW).await.unwrap().lease.token);
    }
    let mut raw = proto::leases_client::LeasesClient::connect(f.url())
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(4);
    let mut answers = raw
        .keep_alive(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut id = 0;
    // Whether each job's holder was told a preferred candidate waits.
    let mut renew = || {
        id += 1;
        let msg = proto::KeepAliveRequest {
            id,
            renewals: jobs
                .iter()
                .zip(&tokens)
                .map(|(j, t)| proto::KeepAliveRenewal {
                    job: (*j).into(),
                    holder: "me".into(),
                    token: *t,
                    ttl: Some(leasehold::proto::to_proto_duration(TTL)),
                })
                .collect(),
            bind_to_stream: false,
        };
        let tx = tx.clone();
        async move {
            tx.send(msg).await.unwrap();
        }
    };
    let mut told = async || -> Vec<bool> {
        let r = answers.message().await.unwrap().unwrap();
        r.results
            .iter()
            .map(|x| {
                assert_eq!(x.outcome(), proto::keep_alive_result::Outcome::Renewed);
                x.successor_waiting
            })
            .collect()
    };
    for _ in 0..3 {
        renew().await;
        assert_eq!(told().await, [false, false, false]);
    }
    // A plain waiter for pa, a preferred one for pb.
    let waiter = |job: &'static str, preferred: bool| {
        let url = f.url();
        tokio::spawn(async move {
            let c = client_of(&url);
            let opts = AcquireOptions {
                preferred,
                ..AcquireOptions::default()
            };
            let _ = c
                .acquire_with(job, "next", TTL, Duration::from_secs(30), opts)
                .await;
        })
    };
    let (w1, w2) = (waiter("pa", false), waiter("pb", true));
    let t = Instant::now();
    loop {
        renew().await;
        let now = told().await;
        if now[1] {
            assert_eq!(now, [false, true, false]);
            break;
        }
        assert!(t.elapsed() < common::PATIENCE, "never told: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = holder_keys(
        &Etcd::connect(&cluster.endpoints(), Duration::from_secs(5)).unwrap(),
        &Keys::new(&prefix),
        &jobs.map(String::from),
    )
    .await;
    assert!(
        held.iter().all(|h| h.as_ref().unwrap().1.sharing.shared),
        "{held:?}"
    );
    w1.abort();
    w2.abort();
}
