//! The etcd backend with real processes: a 3-member etcd cluster on
//! 127.0.0.1 and several `leasehold serve --store etcd` frontends.
//!
//! - one truth across frontends: a client that switches frontends between
//!   operations keeps every guarantee (tokens, fencing, FIFO waiters,
//!   watches, expiry on etcd's clock, TTL granularity);
//! - a frontend SIGKILLed mid-load: clients go on through another, no
//!   token repeats, nothing acknowledged is lost;
//! - the etcd leader SIGKILLed mid-load: a stall of a few seconds, then on,
//!   nothing acknowledged lost, no token issued twice;
//! - a majority SIGSTOPped: every operation fails with UNAVAILABLE, never
//!   a wrong answer, and all is as it was once the members resume;
//! - one etcd client: every lease keep-alive over one shared stream.
//!
//! The `api` tests also run against this backend (LEASEHOLD_TEST_BACKEND
//! =etcd): this file covers what only several processes can show.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::{fresh_prefix, frontend, EtcdCluster, MIN_TTL};
use common::ServerProcess;
use leasehold::client::{Client, ClientError, EventKind};
use leasehold::proto;
use tonic::transport::Endpoint;
use tonic::Code;
use tonic_types::StatusExt;

const LONG: Duration = Duration::from_secs(30);
const NOW: Duration = Duration::ZERO;

fn client_of(url: &str, timeout: Duration) -> Client {
    let ch = Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect_timeout(Duration::from_millis(500))
        .timeout(timeout)
        .connect_lazy();
    Client::from_channel(ch)
}

/// The frontend's `leasehold_waiting_acquires` gauge.
async fn waiting(f: &ServerProcess) -> u64 {
    let body = http_get(f.admin, "/metrics").await;
    body.lines()
        .find_map(|l| l.strip_prefix("leasehold_waiting_acquires "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the waiting gauge")
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

async fn wait_until_waiting(f: &ServerProcess, n: u64) {
    let t = Instant::now();
    while waiting(f).await < n {
        assert!(t.elapsed() < common::PATIENCE, "waiter never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontends_share_one_truth_and_a_client_may_switch_between_them() {
    let cluster = EtcdCluster::start(3);
    let prefix = fresh_prefix();
    let fs: Vec<ServerProcess> = (0..3)
        .map(|_| frontend(&cluster.endpoints_arg(), &prefix, &[]))
        .collect();
    let c: Vec<Client> = fs.iter().map(|f| client_of(&f.url(), LONG)).collect();

    // A grant through one frontend is what every other one sees.
    let a = c[0].acquire("j", "a", LONG, NOW).await.unwrap();
    assert!(a.acquired);
    assert_eq!(a.lease.token, 1);
    let l = c[1].get_lease("j").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("a"), 1));
    let busy = c[2].acquire("j", "x", LONG, NOW).await.unwrap();
    assert!(!busy.acquired);
    assert_eq!(busy.lease.holder.as_deref(), Some("a"));
    assert!(busy.lease.remaining.unwrap() <= LONG);

    // Writes, renewals and reads through different frontends.
    let mut events = c[1].watch("j").await.unwrap();
    let ev = events.message().await.unwrap().unwrap();
    assert_eq!(ev.kind, EventKind::Current as i32);
    assert_eq!(
        c[2].checked_write("j", 1, b"k", b"v1".to_vec())
            .await
            .unwrap(),
        1
    );
    assert_eq!(c[0].renew("j", "a", 1, LONG).await.unwrap().token, 1);
    let v = c[1].read("j", b"k").await.unwrap();
    assert_eq!((v.value.as_slice(), v.token, v.version), (&b"v1"[..], 1, 1));

    // Waiters on two frontends are served in the order they queued.
    let (c1, c2) = (c[1].clone(), c[2].clone());
    let b = tokio::spawn(async move { c1.acquire("j", "b", LONG, Duration::from_secs(20)).await });
    wait_until_waiting(&fs[1], 1).await;
    let cc = tokio::spawn(async move { c2.acquire("j", "c", LONG, Duration::from_secs(20)).await });
    wait_until_waiting(&fs[2], 1).await;
    // A newcomer that does not wait cannot jump the line.
    assert!(!c[0].acquire("j", "d", LONG, NOW).await.unwrap().acquired);

    let released = Instant::now();
    c[0].release("j", "a", 1).await.unwrap();
    let got = b.await.unwrap().unwrap();
    let handover = released.elapsed();
    assert!(got.acquired);
    assert_eq!(
        (got.lease.holder.as_deref(), got.lease.token),
        (Some("b"), 2)
    );
    println!("etcd: hand-over from a Release on one frontend to a waiter on another: {handover:?}");
    // A third of the 30 s TTL: longer than a stall, far from an expiry.
    assert!(handover < LONG / 3, "a watch, not a TTL: {handover:?}");

    // The watcher on yet another frontend saw the release and the grant
    // (folded into one event if it read late).
    let mut kinds = Vec::new();
    loop {
        let ev = tokio::time::timeout(common::PATIENCE, events.message())
            .await
            .expect("a watch event")
            .unwrap()
            .unwrap();
        kinds.push(ev.kind);
        let l = ev.lease.unwrap();
        if l.token == 2 && l.holder == "b" {
            assert_eq!(ev.kind, EventKind::Acquired as i32);
            break;
        }
    }

    // The old leader's write is fenced on every frontend, before b writes.
    for ci in &c {
        match ci.checked_write("j", 1, b"k", b"stale".to_vec()).await {
            Err(ClientError::Fenced { current_token, .. }) => assert_eq!(current_token, Some(2)),
            other => panic!("stale write: {other:?}"),
        }
    }
    assert_eq!(
        c[0].checked_write("j", 2, b"k", b"v2".to_vec())
            .await
            .unwrap(),
        2
    );

    // b hands over to c, who queued second.
    c[2].release("j", "b", 2).await.unwrap();
    let got = cc.await.unwrap().unwrap();
    assert_eq!(
        (got.lease.holder.as_deref(), got.lease.token),
        (Some("c"), 3)
    );
    assert_eq!(waiting(&fs[1]).await + waiting(&fs[2]).await, 0);

    // c stops renewing: etcd's lease runs out (never early), and the token
    // counter stays.
    c[1].renew("j", "c", 3, MIN_TTL).await.unwrap();
    let renewed = Instant::now();
    let next = c[0]
        .acquire("j", "e", LONG, Duration::from_secs(10))
        .await
        .unwrap();
    let took = renewed.elapsed();
    assert!(next.acquired);
    assert_eq!(next.lease.token, 4);
    assert!(
        took >= MIN_TTL,
        "taken over {took:?} after a {MIN_TTL:?} renewal"
    );
    println!("etcd: takeover {took:?} after a {MIN_TTL:?} renewal (etcd's expiry)");
    assert!(matches!(
        c[2].renew("j", "c", 3, MIN_TTL).await,
        Err(ClientError::LeaseLost {
            current_token: Some(4),
            ..
        })
    ));
    assert_eq!(c[2].read("j", b"k").await.unwrap().version, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_are_whole_seconds_at_least_etcds_minimum() {
    let cluster = EtcdCluster::start(1);
    let f = frontend(&cluster.endpoints_arg(), &fresh_prefix(), &[]);
    let mut raw = proto::leases_client::LeasesClient::connect(f.url())
        .await
        .unwrap();
    let ms = |ms: u64| prost_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    };
    for bad in [1500, 2500, 1000, 100] {
        let st = raw
            .acquire(proto::AcquireRequest {
                job: "j".into(),
                holder: "a".into(),
                ttl: Some(ms(bad)),
                wait: None,
                bind_to_stream: false,
                preferred: false,
                value: Default::default(),
                slots: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::InvalidArgument, "{bad} ms: {st:?}");
        let info = st.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.metadata["field"], "ttl");
        assert!(
            st.message().contains("2s"),
            "names the limit: {}",
            st.message()
        );
    }
    let ok = raw
        .acquire(proto::AcquireRequest {
            job: "j".into(),
            holder: "a".into(),
            ttl: Some(ms(3000)),
            wait: None,
            bind_to_stream: false,
            preferred: false,
            value: Default::default(),
            slots: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok.acquired);
    let st = raw
        .renew(proto::RenewRequest {
            job: "j".into(),
            holder: "a".into(),
            token: 1,
            ttl: Some(ms(2500)),
            value: Default::default(),
        })
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::InvalidArgument);
    // A renewal with another whole-second TTL moves the lease to it.
    let l = client_of(&f.url(), LONG)
        .renew("j", "a", 1, Duration::from_secs(7))
        .await
        .unwrap();
    assert_eq!((l.token, l.ttl), (1, Some(Duration::from_secs(7))));
    let l = client_of(&f.url(), LONG).get_lease("j").await.unwrap();
    assert!(l.remaining.unwrap() >= Duration::from_secs(5), "{l:?}");
    // Starting with a TTL limit etcd cannot keep is refused.
    let out = std::process::Command::new(common::bin())
        .args(["serve", "--store", "etcd", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0", "--min-ttl", "500ms"])
        .args(["--etcd-endpoints", &cluster.endpoints_arg()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--min-ttl") && err.contains("2s"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_streams_renew_each_lease_on_its_own() {
    use leasehold::client::{KeepAliveRenewal, RenewOutcome};
    let cluster = EtcdCluster::start(1);
    let prefix = fresh_prefix();
    let f0 = frontend(&cluster.endpoints_arg(), &prefix, &[]);
    let f1 = frontend(&cluster.endpoints_arg(), &prefix, &[]);
    let (c0, c1) = (client_of(&f0.url(), LONG), client_of(&f1.url(), LONG));
    // Longer than a stall, which must not let the leases run out between
    // the calls that renew them.
    let ttl = Duration::from_secs(10);
    for j in ["k0", "k1"] {
        assert!(c0.acquire(j, "me", ttl, NOW).await.unwrap().acquired);
    }
    assert!(
        c0.acquire("theirs", "other", LONG, NOW)
            .await
            .unwrap()
            .acquired
    );
    // Renewed over a stream to the other frontend, entry by entry.
    let batch = [
        KeepAliveRenewal::new("k0", "me", 1, ttl),
        KeepAliveRenewal::new("theirs", "me", 1, ttl),
        KeepAliveRenewal::new("k1", "me", 1, Duration::from_millis(4500)),
        KeepAliveRenewal::new("k1", "me", 7, ttl),
        KeepAliveRenewal::new("k1", "me", 1, Duration::from_secs(12)),
    ];
    let mut ka = c1.keep_alive().await.unwrap();
    let out = ka.renew(&batch).await.unwrap();
    assert_eq!(out.len(), 5);
    assert!(
        matches!(&out[0], RenewOutcome::Renewed(r) if r.lease.token == 1 && r.lease.ttl == Some(ttl))
    );
    assert!(
        matches!(&out[1], RenewOutcome::LeaseLost(l) if l.holder.as_deref() == Some("other")),
        "{:?}",
        out[1]
    );
    assert!(
        matches!(&out[2], RenewOutcome::InvalidArgument { field, message } if field == "ttl" && message.contains("2s")),
        "{:?}",
        out[2]
    );
    assert!(
        matches!(&out[3], RenewOutcome::UnknownToken(l) if l.token == 1),
        "{:?}",
        out[3]
    );
    assert!(
        matches!(&out[4], RenewOutcome::Renewed(r) if r.lease.ttl == Some(Duration::from_secs(12)))
    );
    // Kept alive past their first TTL by the stream alone.
    let t = Instant::now();
    while t.elapsed() < ttl + Duration::from_secs(1) {
        let out = ka.renew(&batch[..1]).await.unwrap();
        assert!(out[0].is_renewed(), "{out:?}");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let l = c0.get_lease("k0").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("me"), 1));
}

/// One etcd client sends every lease keep-alive over one `LeaseKeepAlive`
/// stream: concurrent keep-alives of several leases are each answered for
/// their own lease (each lease has its own TTL, and each answer carries
/// it), a lease that is gone answers as gone, and one stream served all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keep_alive_stream_serves_every_lease_of_a_client() {
    use leasehold::etcd::client::Etcd;
    let cluster = EtcdCluster::start(1);
    let etcd = Etcd::connect(&cluster.endpoints(), Duration::from_secs(5)).unwrap();
    let mut leases = Vec::new();
    for ttl in 10..14 {
        leases.push((etcd.grant(ttl).await.unwrap().0, ttl));
    }
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..10 {
        for &(id, ttl) in &leases {
            let etcd = etcd.clone();
            set.spawn(async move { (id, ttl, etcd.keep_alive(id).await) });
        }
    }
    let mut answered = 0;
    while let Some(done) = set.join_next().await {
        let (id, ttl, got) = done.unwrap();
        let (left, term) = got.unwrap().expect("a live lease");
        assert_eq!(left, ttl, "lease {id} answered with its own TTL");
        assert!(term > 0);
        answered += 1;
    }
    assert_eq!(answered, 40);
    assert_eq!(etcd.keep_alive_streams(), 1);

    // A revoked lease answers as gone, on the same stream; the others
    // live on.
    etcd.revoke(leases[0].0).await.unwrap();
    assert_eq!(etcd.keep_alive(leases[0].0).await.unwrap(), None);
    assert_eq!(
        etcd.keep_alive(leases[1].0)
            .await
            .unwrap()
            .map(|(ttl, _)| ttl),
        Some(11)
    );
    assert_eq!(etcd.keep_alive_streams(), 1);
}

// ---- Load with faults ----

/// What the clients saw: grants and acknowledged writes, and when each
/// operation succeeded.
#[derive(Default)]
struct Seen {
    grants: Vec<(String, u64, String)>,
    writes: Vec<(String, String, u64, String)>,
    ok_at: Vec<Instant>,
    unavailable: u64,
    /// Errors that are neither UNAVAILABLE nor the protocol's own answers
    /// to a lease that ran out (LEASE_LOST, FENCED): none may occur.
    other: Vec<String>,
}

/// Waits until the load has been granted `n` leases in all.
async fn wait_for_grants(seen: &Mutex<Seen>, n: usize) {
    common::eventually(&format!("{n} grants to the load"), || async {
        (seen.lock().unwrap().grants.len() >= n).then_some(())
    })
    .await
}

/// Workers that acquire (some waiting), write, renew and release a few
/// jobs through the frontends, moving to the next frontend whenever one
/// does not answer.
fn start_load(
    urls: Vec<String>,
    workers: usize,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Seen>>, Vec<tokio::task::JoinHandle<()>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let clients: Vec<Client> = urls
            .iter()
            .map(|u| client_of(u, Duration::from_secs(8)))
            .collect();
        let (seen, stop) = (seen.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut at = w % clients.len();
            let mut n = 0u64;
            let ttl = Duration::from_secs(3);
            let ok = |seen: &Mutex<Seen>| seen.lock().unwrap().ok_at.push(Instant::now());
            let fail = |seen: &Mutex<Seen>, e: &ClientError, at: &mut usize| {
                if e.is_retryable() {
                    seen.lock().unwrap().unavailable += 1;
                    *at = (*at + 1) % clients.len();
                } else if !matches!(
                    e,
                    ClientError::LeaseLost { .. } | ClientError::Fenced { .. }
                ) {
                    seen.lock().unwrap().other.push(e.to_string());
                }
            };
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let job = format!("job{}", n % 3);
                let holder = format!("w{w}.{n}");
                let wait = if n % 2 == 0 {
                    Duration::from_millis(800)
                } else {
                    NOW
                };
                let a = match clients[at].acquire(&job, &holder, ttl, wait).await {
                    Ok(a) => a,
                    Err(e) => {
                        fail(&seen, &e, &mut at);
                        continue;
                    }
                };
                ok(&seen);
                if !a.acquired {
                    continue;
                }
                let token = a.lease.token;
                seen.lock()
                    .unwrap()
                    .grants
                    .push((job.clone(), token, holder.clone()));
                for i in 0..3 {
                    let key = format!("k{}", (n + i) % 2);
                    let value = format!("{holder}.{i}");
                    // Through whichever frontend answers.
                    match clients[at]
                        .checked_write(&job, token, key.as_bytes(), value.clone().into_bytes())
                        .await
                    {
                        Ok(version) => {
                            ok(&seen);
                            seen.lock()
                                .unwrap()
                                .writes
                                .push((job.clone(), key, version, value));
                        }
                        Err(e) => fail(&seen, &e, &mut at),
                    }
                }
                match clients[at].renew(&job, &holder, token, ttl).await {
                    Ok(l) => {
                        ok(&seen);
                        assert_eq!(l.token, token, "a renewal keeps the token");
                    }
                    Err(e) => fail(&seen, &e, &mut at),
                }
                match clients[at].release(&job, &holder, token).await {
                    Ok(()) => ok(&seen),
                    Err(e) => fail(&seen, &e, &mut at),
                }
            }
        }));
    }
    (seen, tasks)
}

/// No token granted twice; every acknowledged write still readable (at
/// its version or a later one); no version acknowledged for two writes.
async fn check(seen: &Seen, reader: &Client) {
    let mut holders: HashMap<(&str, u64), HashSet<&str>> = HashMap::new();
    for (job, token, holder) in &seen.grants {
        holders.entry((job, *token)).or_default().insert(holder);
    }
    for ((job, token), hs) in &holders {
        assert_eq!(hs.len(), 1, "token {token} of {job} granted to {hs:?}");
    }
    let mut versions: HashMap<(&str, &str, u64), &str> = HashMap::new();
    let mut newest: HashMap<(&str, &str), u64> = HashMap::new();
    for (job, key, version, value) in &seen.writes {
        if let Some(other) = versions.insert((job, key, *version), value) {
            panic!("{job}/{key} version {version} acknowledged for {other} and {value}");
        }
        let n = newest.entry((job, key)).or_default();
        *n = (*n).max(*version);
    }
    for ((job, key), version) in &newest {
        let v = reader.read(job, key.as_bytes()).await.unwrap();
        assert!(
            v.version >= *version,
            "{job}/{key}: version {version} was acknowledged, the store has {}",
            v.version
        );
        if v.version == *version {
            assert_eq!(versions[&(*job, *key, *version)].as_bytes(), v.value);
        }
    }
}

/// The longest time between two successful operations in `[from, to]`.
fn longest_gap(ok_at: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut at: Vec<Instant> = ok_at
        .iter()
        .copied()
        .filter(|t| *t >= from && *t <= to)
        .collect();
    at.sort();
    at.insert(0, from);
    at.push(to);
    at.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_killed_mid_load_loses_nothing_and_repeats_no_token() {
    let cluster = EtcdCluster::start(3);
    let prefix = fresh_prefix();
    let mut fs: Vec<Option<ServerProcess>> = (0..3)
        .map(|_| Some(frontend(&cluster.endpoints_arg(), &prefix, &[])))
        .collect();
    let urls: Vec<String> = fs.iter().map(|f| f.as_ref().unwrap().url()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, tasks) = start_load(urls.clone(), 6, stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_for_grants(&seen, 1).await;
    let before = seen.lock().unwrap().grants.len();
    fs[0].take().unwrap().kill9();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    wait_for_grants(&seen, before + 1).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("workers finish")
            .unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let after = seen.grants.len() - before;
    let gap = longest_gap(&seen.ok_at, killed, Instant::now());
    println!(
        "etcd: frontend killed: {} grants ({before} before the kill, {after} after), {} writes, \
         {} unavailable, longest gap after the kill {gap:?}",
        seen.grants.len(),
        seen.writes.len(),
        seen.unavailable
    );
    assert!(before > 0 && after > 0, "load went on through the others");
    assert!(gap < Duration::from_secs(5), "{gap:?}");
    check(&seen, &client_of(&urls[1], LONG)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_leader_killed_mid_load_stalls_briefly_and_loses_nothing() {
    let mut cluster = EtcdCluster::start(3);
    let prefix = fresh_prefix();
    let fs: Vec<ServerProcess> = (0..2)
        .map(|_| frontend(&cluster.endpoints_arg(), &prefix, &[]))
        .collect();
    let urls: Vec<String> = fs.iter().map(|f| f.url()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, tasks) = start_load(urls.clone(), 6, stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_for_grants(&seen, 1).await;
    let leader = cluster.leader().expect("a leader");
    let before = seen.lock().unwrap().grants.len();
    cluster.kill(leader);
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    wait_for_grants(&seen, before + 1).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("workers finish")
            .unwrap();
    }
    let new_leader = cluster.leader();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let gap = longest_gap(&seen.ok_at, killed, Instant::now());
    println!(
        "etcd: leader m{leader} killed (new leader {new_leader:?}): stall {gap:?}; {} grants \
         ({before} before), {} writes, {} unavailable",
        seen.grants.len(),
        seen.writes.len(),
        seen.unavailable
    );
    assert!(new_leader.is_some_and(|l| l != leader));
    assert!(seen.grants.len() > before, "load went on");
    assert!(gap < Duration::from_secs(5), "stalled {gap:?}");
    check(&seen, &client_of(&urls[0], LONG)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_majority_fails_with_unavailable_never_a_wrong_answer() {
    let mut cluster = EtcdCluster::start(3);
    let f = frontend(
        &cluster.endpoints_arg(),
        &fresh_prefix(),
        &["--etcd-timeout", "2s"],
    );
    let c = client_of(&f.url(), LONG);
    assert!(c.acquire("j", "a", LONG, NOW).await.unwrap().acquired);
    assert_eq!(
        c.checked_write("j", 1, b"k", b"v".to_vec()).await.unwrap(),
        1
    );

    // Keep the leader, stop the other two: the leader alone cannot commit
    // nor confirm its reads.
    let leader = cluster.leader().unwrap();
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for i in &others {
        cluster.pause(*i);
    }
    let t = Instant::now();
    let mut leases = proto::leases_client::LeasesClient::connect(f.url())
        .await
        .unwrap();
    let mut store = proto::fenced_store_client::FencedStoreClient::connect(f.url())
        .await
        .unwrap();
    let d = |s: i64| {
        Some(prost_types::Duration {
            seconds: s,
            nanos: 0,
        })
    };
    let (mut l2, mut l3, mut l4, mut s2) = (
        leases.clone(),
        leases.clone(),
        leases.clone(),
        store.clone(),
    );
    let (acq, renew, get, rel, write, read) = tokio::join!(
        leases.acquire(proto::AcquireRequest {
            job: "other".into(),
            holder: "b".into(),
            ttl: d(30),
            wait: None,
            bind_to_stream: false,
            preferred: false,
            value: Default::default(),
            slots: 0,
        }),
        l2.renew(proto::RenewRequest {
            job: "j".into(),
            holder: "a".into(),
            token: 1,
            ttl: d(30),
            value: Default::default(),
        }),
        l3.get_lease(proto::GetLeaseRequest { job: "j".into() }),
        l4.release(proto::ReleaseRequest {
            job: "j".into(),
            holder: "a".into(),
            token: 1,
            give_back: false,
        }),
        store.checked_write(proto::CheckedWriteRequest {
            proof: Default::default(),
            job: "j".into(),
            token: 1,
            key: b"k".to_vec(),
            value: b"lost?".to_vec(),
            delete: false,
        }),
        s2.read(proto::ReadRequest {
            job: "j".into(),
            key: b"k".to_vec(),
        }),
    );
    let took = t.elapsed();
    let codes = [
        ("Acquire", acq.map(|_| ()).err()),
        ("Renew", renew.map(|_| ()).err()),
        ("GetLease", get.map(|_| ()).err()),
        ("Release", rel.map(|_| ()).err()),
        ("CheckedWrite", write.map(|_| ()).err()),
        ("Read", read.map(|_| ()).err()),
    ];
    for (what, st) in &codes {
        let st = st
            .as_ref()
            .unwrap_or_else(|| panic!("{what} answered without a majority"));
        assert_eq!(st.code(), Code::Unavailable, "{what}: {st:?}");
    }
    println!("etcd: majority stopped: every call UNAVAILABLE within {took:?}");
    // Each call's whole time in the frontend, retries and re-reads
    // included, stays within --etcd-timeout (2 s); the slack is the
    // network and the scheduler, not another attempt.
    assert!(took < Duration::from_secs(3), "{took:?}");
    // Health says so: NOT_SERVING while no majority answers.
    let health = |want: i32| {
        let url = f.url();
        async move {
            let channel = tonic::transport::Endpoint::from_shared(url)
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
            for _ in 0..200 {
                let r = h
                    .check(tonic_health::pb::HealthCheckRequest {
                        service: String::new(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                if r.status == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("health never became {want}");
        }
    };
    let not_serving = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    health(not_serving).await;
    let page = http_get(f.admin, "/healthz").await;
    assert!(
        page.contains(" 503 ") && page.contains("majority"),
        "{page}"
    );

    for i in &others {
        cluster.resume(*i);
    }
    cluster.wait_ready(Duration::from_secs(30));
    health(serving).await;
    let page = http_get(f.admin, "/healthz").await;
    assert!(page.contains(" 200 "), "{page}");
    // The outcome of a change that failed is unknown, so read it back: the
    // lease is a's with token 1 or released, and nothing else.
    let l = c.get_lease("j").await.unwrap();
    assert_eq!(l.token, 1, "{l:?}");
    assert!(matches!(l.holder.as_deref(), Some("a") | None), "{l:?}");
    let v = c.read("j", b"k").await.unwrap();
    assert!(
        (v.version, v.value.as_slice()) == (1, &b"v"[..])
            || (v.version, v.value.as_slice()) == (2, &b"lost?"[..]),
        "{v:?}"
    );
    let other = c.get_lease("other").await.unwrap();
    assert!(other.token <= 1, "{other:?}");
    // And it serves again. A member just resumed may still answer slowly
    // enough for the frontend to give a change in flight up on it: that
    // change answers UNAVAILABLE (its outcome unknown), and the client
    // asks again, as a client of the contract does.
    let mut tries = 0;
    let b = loop {
        match c.acquire("again", "b", LONG, NOW).await {
            Err(ClientError::Unavailable(e)) if tries < 10 => {
                eprintln!("after the majority's return: {e}; asking again");
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            r => break r.unwrap(),
        }
    };
    assert!(b.acquired);
}

/// Records leasehold cannot use, put in etcd by hand: a token record that
/// does not decode, and a holder key bound to no etcd lease (it would
/// never expire). Each is named in the error of a call on its job, at once
/// (not after the job "kept changing" for 64 tries), and `ListLeases`
/// skips the damaged job, counts it, and lists the others in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_leasehold_cannot_use_are_named_and_skipped() {
    use leasehold::etcd::client::{pb, put_op, Etcd};
    use leasehold::etcd::keys::{HolderRec, Keys};
    use leasehold::etcd::EtcdNode;
    use leasehold::lease::{Limits, Token};

    let cluster = EtcdCluster::start(1);
    let prefix = fresh_prefix();
    let endpoints = cluster.endpoints();
    let node = EtcdNode::open(common::etcd::frontend_config(endpoints.clone(), &prefix))
        .await
        .unwrap();
    let l = Limits::default();
    let ttl = Duration::from_secs(5);
    for j in ["a", "b", "d", "e"] {
        let got = node
            .acquire(&l.job(j).unwrap(), &l.holder("w").unwrap(), ttl, NOW)
            .await
            .unwrap();
        assert!(got.acquired);
    }
    let keys = Keys::new(&prefix);
    let etcd = Etcd::connect(&endpoints, Duration::from_secs(5)).unwrap();
    let put = |k: Vec<u8>, v: Vec<u8>| pb::TxnRequest {
        compare: vec![],
        success: vec![put_op(k, v, 0)],
        failure: vec![],
    };
    // "b": a token record that does not decode.
    assert!(
        etcd.txn(put(keys.token("b"), b"garbage".to_vec()))
            .await
            .unwrap()
            .succeeded
    );
    // "c": a holder key with no etcd lease.
    let rec = HolderRec {
        issued: Default::default(),
        token: Token(1),
        ttl,
        holder: "forever".into(),
        value: Default::default(),
        sharing: Default::default(),
    };
    assert!(
        etcd.txn(put(keys.holder("c"), rec.encode()))
            .await
            .unwrap()
            .succeeded
    );

    let job = |j: &str| l.job(j).unwrap();
    let t = Instant::now();
    let e = node
        .renew(&job("c"), &l.holder("forever").unwrap(), Token(1), ttl)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("without an etcd lease"), "{e}");
    let e = node
        .acquire(&job("c"), &l.holder("x").unwrap(), ttl, NOW)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("would never expire"), "{e}");
    let e = node.lease(&job("b")).await.unwrap_err();
    assert!(e.to_string().contains("token record of job \"b\""), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "named at once, not retried"
    );

    // Pages of two: "b" and "c" are skipped, "a", "d", "e" all listed.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = node.leases("", after.as_deref(), 2).await.unwrap();
        seen.extend(page.iter().map(|v| v.job.to_string()));
        if page.len() < 2 {
            break;
        }
        after = page.last().map(|v| v.job.to_string());
    }
    assert_eq!(seen, ["a", "d", "e"]);
    assert!(node.snapshot().unreadable_jobs >= 2, "counted");
}

/// A waiter whose call is gone while etcd cannot be reached: its key's
/// delete fails (etcd may yet apply it, or not: its outcome is unknown).
/// A key left behind would stay first in line for as long as its frontend
/// lives, so the job could never change hands. The frontend deletes it
/// again until etcd confirms it is gone (the count of such keys drops to
/// zero), well within the session TTL, and the next Acquire is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_waiter_whose_delete_failed_leaves_the_line_when_etcd_is_back() {
    use leasehold::lease::{Limits, Token};

    let InLine {
        mut cluster,
        a,
        b,
        job,
        waiter,
    } = one_in_line().await;
    let l = Limits::default();
    // Every member paused (each pause returns once the member has
    // stopped): the waiter goes, and no member can apply its key's delete,
    // whoever leads, so the delete fails.
    for i in 0..3 {
        cluster.pause(i);
    }
    assert!(
        !waiter.is_finished(),
        "the waiter left the line before it was aborted: {:?}",
        waiter.await
    );
    waiter.abort();
    let t = Instant::now();
    while b.orphaned_waiter_keys() == 0 {
        if t.elapsed() > LONG {
            // What the frontend says, to tell which way it went: a delete
            // answered (no waiter's key left), or one never sent.
            panic!(
                "the delete never failed, though every member is paused: the frontend \
                 counts {} waiters' keys in line",
                b.snapshot().waiters,
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..3 {
        cluster.resume(i);
    }
    cluster.wait_ready(LONG);
    a.release(&job, &l.holder("h").unwrap(), Token(1))
        .await
        .unwrap();
    // Within the session TTL (10 s), though the frontend lives on.
    granted_within(
        &a,
        &job,
        &l.holder("x").unwrap(),
        Duration::from_secs(8),
        "the line is still blocked by the departed waiter",
    )
    .await;
    assert_eq!(b.orphaned_waiter_keys(), 0);
}

/// A frontend's settings on `cluster`, under a fresh prefix, for the tests
/// of calls that fail while etcd has no majority: a call gives up after a
/// second; the session lease (which takes the waiters' keys with it) lives
/// ten.
fn quick_to_give_up(cluster: &EtcdCluster) -> leasehold::etcd::Config {
    leasehold::etcd::Config {
        timeout: Duration::from_secs(1),
        session_ttl: Duration::from_secs(10),
        ..common::etcd::frontend_config(cluster.endpoints(), &fresh_prefix())
    }
}

/// What [`one_in_line`] sets up.
struct InLine {
    cluster: EtcdCluster,
    a: leasehold::etcd::EtcdNode,
    b: leasehold::etcd::EtcdNode,
    job: leasehold::lease::JobName,
    waiter: tokio::task::JoinHandle<leasehold::Result<leasehold::backend::Acquired>>,
}

/// The TTL of [`one_in_line`]'s leases. The tests release the holder's
/// lease themselves, so it must outlive them: had it expired while the
/// waiter was in line (a slow setup, a loaded machine), the waiter would be
/// granted, and would leave no key to delete.
const IN_LINE_TTL: Duration = Duration::from_secs(120);

/// Two frontends `a` and `b` on a new 3-member cluster
/// ([`quick_to_give_up`]): `a` holds job "j" for "h", and `b`'s waiting
/// Acquire for "w" is in line.
async fn one_in_line() -> InLine {
    use leasehold::etcd::EtcdNode;
    let cluster = EtcdCluster::start(3);
    let config = quick_to_give_up(&cluster);
    let a = EtcdNode::open(config.clone()).await.unwrap();
    let b = EtcdNode::open(config).await.unwrap();
    let l = leasehold::lease::Limits::default();
    let job = l.job("j").unwrap();
    let h = l.holder("h").unwrap();
    assert!(
        a.acquire(&job, &h, IN_LINE_TTL, NOW)
            .await
            .unwrap()
            .acquired
    );
    let waiter = {
        let (b, job, w) = (b.clone(), job.clone(), l.holder("w").unwrap());
        tokio::spawn(async move { b.acquire(&job, &w, IN_LINE_TTL, LONG).await })
    };
    let t = Instant::now();
    while b.snapshot().waiters == 0 {
        assert!(t.elapsed() < LONG, "the waiter never got in line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    InLine {
        cluster,
        a,
        b,
        job,
        waiter,
    }
}

/// Pauses every member but the leader: no majority. Returns the paused.
fn lose_majority(cluster: &mut EtcdCluster) -> Vec<usize> {
    let leader = cluster.leader().unwrap();
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for i in &others {
        cluster.pause(*i);
    }
    others
}

/// Asks for `job` without waiting until it is granted to `holder`, failing
/// with `why` after `limit`; returns how long it took.
async fn granted_within(
    node: &leasehold::etcd::EtcdNode,
    job: &leasehold::lease::JobName,
    holder: &leasehold::lease::HolderId,
    limit: Duration,
    why: &str,
) -> Duration {
    let t = Instant::now();
    loop {
        let got = node
            .acquire(job, holder, Duration::from_secs(5), NOW)
            .await
            .unwrap();
        if got.acquired {
            return t.elapsed();
        }
        assert!(t.elapsed() < limit, "{why}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Held by the tests that load the machine hardest (ten thousand waiters)
/// or measure under load (a member's fault): on two cores, one of them
/// running beside the other would measure the other's load.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Successful calls in each second of `[from, to)`.
fn per_second(ok_at: &[Instant], from: Instant, to: Instant) -> Vec<usize> {
    let secs = (to - from).as_secs() as usize;
    let mut out = vec![0; secs];
    for t in ok_at {
        if *t >= from && *t < to {
            let i = (*t - from).as_secs() as usize;
            if i < secs {
                out[i] += 1;
            }
        }
    }
    out
}

/// One etcd member is harmed under a steady load through two frontends
/// whose first endpoint is that member (a frontend calls its first endpoint
/// first, so the fault lands where the load goes): a follower paused for
/// 20 s, the leader paused for 6 s, a follower killed for 10 s. The
/// frontends leave the member (a paused one within about half a second, see
/// `etcd/client/members.rs`), so the load goes on: the calls in flight to it
/// fail with UNAVAILABLE, never with a wrong answer, and nothing
/// acknowledged is lost. The per-second rates are printed next to the rate
/// before the fault; `leasehold-bench etcd-faults` measures them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_paused_or_killed_costs_one_attempt_not_the_whole_fault() {
    let _heavy = HEAVY.lock().await;
    let mut cluster = EtcdCluster::start(3);
    let prefix = fresh_prefix();
    let mut all = Seen::default();
    for (what, leader, kill, secs) in [
        ("a follower paused", false, false, 20),
        ("the leader paused", true, false, 6),
        ("a follower killed", false, true, 10),
    ] {
        cluster.wait_ready(LONG);
        let l = cluster.leader().expect("a leader");
        let target = if leader { l } else { (l + 1) % 3 };
        let endpoints: Vec<String> = (0..3).map(|k| cluster.endpoint((target + k) % 3)).collect();
        let fs: Vec<ServerProcess> = (0..2)
            .map(|_| frontend(&endpoints.join(","), &prefix, &["--etcd-timeout", "5s"]))
            .collect();
        let urls: Vec<String> = fs.iter().map(|f| f.url()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, tasks) = start_load(urls.clone(), 6, stop.clone());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let calm = Instant::now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let hit = Instant::now();
        if kill {
            cluster.kill(target);
        } else {
            cluster.pause(target);
        }
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let healed = Instant::now();
        if kill {
            cluster.restart(target);
        } else {
            cluster.resume(target);
        }
        stop.store(true, Ordering::SeqCst);
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("workers finish")
                .unwrap();
        }
        let seen = std::mem::take(&mut *seen.lock().unwrap());
        let gap = longest_gap(&seen.ok_at, hit, healed);
        println!(
            "etcd: successful calls per second: before {:?}; {what} (m{target}) {:?} \
             (longest gap {gap:?}); {} unavailable",
            per_second(&seen.ok_at, calm, hit),
            per_second(&seen.ok_at, hit, healed),
            seen.unavailable
        );
        assert!(seen.other.is_empty(), "{what}: errors: {:?}", seen.other);
        // Never the whole fault: a follower is left within an attempt
        // (2 s), the leader within an attempt and etcd's election.
        let bound = if leader { 5 } else { 2 };
        assert!(
            gap < Duration::from_secs(bound),
            "{what}: {gap:?} without a successful call"
        );
        all.grants.extend(seen.grants);
        all.writes.extend(seen.writes);
    }
    // Every phase's grants and writes, read through a frontend of its own.
    cluster.wait_ready(LONG);
    let f = frontend(&cluster.endpoints_arg(), &prefix, &[]);
    check(&all, &client_of(&f.url(), LONG)).await;
}

/// Ten thousand waiting Acquires on one frontend share one etcd watch (one
/// stream, not one each: a few thousand used to exhaust the connection's
/// streams), all get in line (the frontend keeps its calls to etcd within
/// what etcd accepts, and a waiter joining wakes no one), and once they are
/// all cancelled the job is granted through another frontend at once, and
/// no waiter key is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_share_one_watch_and_leave_no_trace_when_cancelled() {
    let _heavy = HEAVY.lock().await;
    use leasehold::etcd::EtcdNode;
    use leasehold::lease::{Limits, Token};

    const WAITERS: u64 = 10_000;
    let cluster = EtcdCluster::start(1);
    let prefix = fresh_prefix();
    let mut config = common::etcd::frontend_config(cluster.endpoints(), &prefix);
    // Ten thousand joins are thirty thousand calls to one etcd member,
    // while other tests run: what is tested is the line, not latency.
    config.timeout = Duration::from_secs(30);
    config.session_ttl = Duration::from_secs(10);
    let a = EtcdNode::open(config.clone()).await.unwrap();
    let b = EtcdNode::open(config).await.unwrap();
    let l = Limits::default();
    let job = l.job("popular").unwrap();
    let ttl = Duration::from_secs(30);
    let got = a
        .acquire(&job, &l.holder("h").unwrap(), ttl, NOW)
        .await
        .unwrap();
    assert!(got.acquired);
    let tasks: Vec<_> = (0..WAITERS)
        .map(|i| {
            let (b, job, w) = (b.clone(), job.clone(), l.holder(&format!("w{i}")).unwrap());
            tokio::spawn(async move { b.acquire(&job, &w, ttl, LONG).await })
        })
        .collect();
    let t = Instant::now();
    while b.snapshot().waiters < WAITERS as usize {
        if let Some(i) = tasks.iter().position(|t| t.is_finished()) {
            let mut tasks = tasks;
            let r = tasks.remove(i).await.unwrap().map(|_| ());
            panic!("a waiter ended while in line: {r:?}");
        }
        assert!(
            t.elapsed() < LONG,
            "{} of {WAITERS} in line",
            b.snapshot().waiters
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "etcd: {WAITERS} waiters in line in {:?}, {} shared watch",
        t.elapsed(),
        b.shared_waiter_watches()
    );
    assert_eq!(b.shared_waiter_watches(), 1);
    println!(
        "etcd: {} of {WAITERS} joined on another waiter's read",
        b.joined_on_noted_reads()
    );
    assert!(
        b.joined_on_noted_reads() > 0,
        "every waiter read the held job itself"
    );
    for t in &tasks {
        t.abort();
    }
    a.release(&job, &l.holder("h").unwrap(), Token(1))
        .await
        .unwrap();
    let took = granted_within(
        &a,
        &job,
        &l.holder("next").unwrap(),
        LONG,
        "the cancelled waiters still block the line",
    )
    .await;
    println!("etcd: granted {took:?} after the cancel");
    let t = Instant::now();
    while b.snapshot().waiters > 0 || b.shared_waiter_watches() > 0 {
        assert!(
            t.elapsed() < LONG,
            "waiters left behind: {}",
            b.snapshot().waiters
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A waiting `Acquire` that joins a held job's line on another waiter's
/// read (not reading the job itself) misses nothing that changed after that
/// read: here the holder releases while the second waiter joins, so the
/// read it joins on is often out of date already. The first waiter gets the
/// job; once it lets go, the second does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_joining_on_another_waiters_read_misses_no_release() {
    use leasehold::etcd::EtcdNode;
    use leasehold::lease::{Limits, Token};

    let cluster = EtcdCluster::start(1);
    let prefix = fresh_prefix();
    let config = common::etcd::frontend_config(cluster.endpoints(), &prefix);
    let a = EtcdNode::open(config.clone()).await.unwrap();
    let b = EtcdNode::open(config).await.unwrap();
    let l = Limits::default();
    let ttl = Duration::from_secs(30);
    let (h, w1, w2) = (
        l.holder("h").unwrap(),
        l.holder("w1").unwrap(),
        l.holder("w2").unwrap(),
    );
    for round in 0..20 {
        let job = l.job(&format!("race-{round}")).unwrap();
        assert!(a.acquire(&job, &h, ttl, NOW).await.unwrap().acquired);
        let first = {
            let (b, job, w1) = (b.clone(), job.clone(), w1.clone());
            tokio::spawn(async move { b.acquire(&job, &w1, ttl, LONG).await })
        };
        let t = Instant::now();
        while b.snapshot().waiters < 1 {
            assert!(t.elapsed() < LONG, "the first waiter never got in line");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let second = {
            let (b, job, w2) = (b.clone(), job.clone(), w2.clone());
            tokio::spawn(async move { b.acquire(&job, &w2, ttl, LONG).await })
        };
        a.release(&job, &h, Token(1)).await.unwrap();
        let got = tokio::time::timeout(LONG, first)
            .await
            .expect("the first waiter was not granted after the release")
            .unwrap()
            .unwrap();
        assert!(got.acquired);
        assert_eq!(got.lease.token, Token(2), "round {round}");
        assert!(
            !second.is_finished(),
            "round {round}: the second went early"
        );
        b.release(&job, &w1, Token(2)).await.unwrap();
        let got = tokio::time::timeout(LONG, second)
            .await
            .expect("the second waiter missed the first one's release")
            .unwrap()
            .unwrap();
        assert!(got.acquired);
        assert_eq!(got.lease.token, Token(3), "round {round}");
        b.release(&job, &w2, Token(3)).await.unwrap();
    }
    println!(
        "etcd: {} of 20 second waiters joined on the first one's read",
        b.joined_on_noted_reads()
    );
    assert!(
        b.joined_on_noted_reads() > 0,
        "no waiter joined on another's read: the race was not tried"
    );
}

/// A waiter sleeps through its own join (nothing wakes it when the put
/// succeeds), so a join that fails must wake it: here etcd has no majority
/// when the second waiter joins on the first one's read (it reads nothing
/// itself). It fails with the storage error within the timeout, and its
/// key, which etcd may or may not have put, does not block the line once
/// etcd is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_join_fails_is_told_and_leaves_no_key_in_line() {
    use leasehold::lease::{Limits, Token};

    let InLine {
        mut cluster,
        a,
        b,
        job,
        waiter: first,
    } = one_in_line().await;
    let (l, ttl) = (Limits::default(), IN_LINE_TTL);
    let h = l.holder("h").unwrap();
    let others = lose_majority(&mut cluster);
    let noted = b.joined_on_noted_reads();
    let t = Instant::now();
    let r = b.acquire(&job, &l.holder("w2").unwrap(), ttl, LONG).await;
    let took = t.elapsed();
    assert!(
        matches!(r, Err(leasehold::error::Error::Storage(_))),
        "a failed join must fail the call: {r:?}"
    );
    assert_eq!(
        b.joined_on_noted_reads(),
        noted + 1,
        "the second waiter read the job itself"
    );
    assert!(
        took < Duration::from_secs(5),
        "told {took:?} after the join, with a 1 s timeout"
    );
    for i in &others {
        cluster.resume(*i);
    }
    cluster.wait_ready(LONG);
    // The first waiter leaves, and its key goes, before the release: a
    // release hands the lease to the waiter whose key is first in line,
    // and a departed waiter granted so would hold it for its whole TTL.
    first.abort();
    let _ = first.await;
    common::eventually("b's waiters' keys to leave the line", || async {
        (b.snapshot().waiters == 0).then_some(())
    })
    .await;
    a.release(&job, &h, Token(1)).await.unwrap();
    granted_within(
        &a,
        &job,
        &l.holder("x").unwrap(),
        Duration::from_secs(8),
        "the line is still blocked by a waiter that never joined or left",
    )
    .await;
}

/// A waiter's join that etcd applies only after the waiter has left puts
/// no key in line. The frontend's join goes to a member that keeps it
/// unread (as a paused member's socket does) while the frontend, finding
/// the member stalled, gives the join up, fails the call and withdraws the
/// key through the other endpoint; then the member gets what it kept,
/// but the stream's reset (as a member resumed may read a request and run
/// it before the reset behind it), and runs the join. (Once, a CI run's
/// join after etcd's majority came back blocked the line for good: the
/// key's delete had been applied before the late put.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_etcd_applies_after_its_waiter_left_puts_no_key_in_line() {
    use leasehold::etcd::client::{pb, Etcd};
    use leasehold::etcd::keys::{prefix_end, Keys};
    use leasehold::etcd::EtcdNode;
    use leasehold::lease::Limits;

    let cluster = EtcdCluster::start(1);
    let proxy = HoldingProxy::to(&cluster.endpoint(0)).await;
    let prefix = fresh_prefix();
    // The session outlives the hold, which its keep-alives wait out too.
    let config = |endpoints| leasehold::etcd::Config {
        session_ttl: Duration::from_secs(10),
        ..common::etcd::frontend_config(endpoints, &prefix)
    };
    let a = EtcdNode::open(config(cluster.endpoints())).await.unwrap();
    // b calls the member through the proxy, and directly once the proxy
    // stalls.
    let b = EtcdNode::open(config(vec![proxy.url(), cluster.endpoint(0)]))
        .await
        .unwrap();
    let l = Limits::default();
    let job = l.job("j").unwrap();
    let got = a
        .acquire(&job, &l.holder("h").unwrap(), IN_LINE_TTL, NOW)
        .await;
    assert!(got.unwrap().acquired);
    let first = {
        let (b, job, w) = (b.clone(), job.clone(), l.holder("w").unwrap());
        tokio::spawn(async move { b.acquire(&job, &w, IN_LINE_TTL, LONG).await })
    };
    common::eventually("the first waiter in line", || async {
        (b.snapshot().waiters == 1).then_some(())
    })
    .await;
    proxy.hold();
    // Joined on the first waiter's read: the join is the call the member
    // keeps.
    let noted = b.joined_on_noted_reads();
    let r = b
        .acquire(&job, &l.holder("w2").unwrap(), IN_LINE_TTL, LONG)
        .await;
    assert!(
        matches!(r, Err(leasehold::error::Error::Storage(_))),
        "a join given up must fail the call: {r:?}"
    );
    assert_eq!(b.joined_on_noted_reads(), noted + 1);
    let etcd = Etcd::connect(&cluster.endpoints(), LONG).unwrap();
    let values = |start: Vec<u8>| {
        let etcd = etcd.clone();
        async move {
            let end = prefix_end(&start);
            let r = etcd
                .range(pb::RangeRequest {
                    key: start,
                    range_end: end,
                    ..Default::default()
                })
                .await
                .unwrap();
            r.kvs
                .into_iter()
                .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
                .collect::<Vec<_>>()
        }
    };
    let keys = Keys::new(&prefix);
    let guards = format!("{prefix}g/").into_bytes();
    common::eventually("the given-up join withdrawn", || async {
        let withdrawn = !values(guards.clone()).await.is_empty();
        (withdrawn && b.orphaned_waiter_keys() == 0).then_some(())
    })
    .await;
    proxy.release().await;
    let (line, _) = keys.waiters_range("j");
    assert_eq!(
        values(line).await,
        ["w"],
        "the line holds the first waiter, and nobody else"
    );
    assert!(!first.is_finished(), "the first waiter waits on");
    first.abort();
}

/// A TCP proxy to one etcd member that passes everything until held; then
/// it keeps what the frontend sends (the member hears nothing, as when
/// paused, and the connection stays open) until released, when the member
/// gets all of it but the resets of the calls held: each is then run,
/// though the frontend has given it up.
struct HoldingProxy {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<Held>>,
    changed: Arc<tokio::sync::Notify>,
}

/// What a [`HoldingProxy`] is doing.
#[derive(Default)]
struct Held {
    holding: bool,
    released: bool,
    /// The calls whose requests were held (by connection and stream) that
    /// the member has not answered yet.
    streams: HashSet<(usize, u32)>,
}

impl HoldingProxy {
    const DATA: u8 = 0;
    const HEADERS: u8 = 1;
    const RST_STREAM: u8 = 3;
    const END_STREAM: u8 = 1;

    async fn to(member: &str) -> HoldingProxy {
        let member = member.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(Held::default()));
        let changed = Arc::new(tokio::sync::Notify::new());
        let (st, ch) = (state.clone(), changed.clone());
        tokio::spawn(async move {
            let mut conn = 0;
            while let Ok((client, _)) = listener.accept().await {
                conn += 1;
                let server = tokio::net::TcpStream::connect(&member).await.unwrap();
                // As the frontend's own connections: a frame written
                // waits for no acknowledgement of the one before.
                for s in [&client, &server] {
                    s.set_nodelay(true).unwrap();
                }
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(Self::to_member(conn, cr, sw, st.clone(), ch.clone()));
                tokio::spawn(Self::from_member(conn, sr, cw, st.clone(), ch.clone()));
            }
        });
        HoldingProxy {
            addr,
            state,
            changed,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn hold(&self) {
        self.state.lock().unwrap().holding = true;
    }

    /// Lets the member have what was held, and waits until it has
    /// answered every call held.
    async fn release(&self) {
        self.state.lock().unwrap().released = true;
        self.changed.notify_waiters();
        let t = Instant::now();
        loop {
            let told = self.changed.notified();
            if self.state.lock().unwrap().streams.is_empty() {
                return;
            }
            assert!(
                t.elapsed() < LONG,
                "the member never answered the calls held"
            );
            let _ = tokio::time::timeout(Duration::from_millis(50), told).await;
        }
    }

    /// One HTTP/2 frame: its header (9 bytes) and payload.
    async fn frame(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<Vec<u8>> {
        use tokio::io::AsyncReadExt as _;
        let mut f = vec![0u8; 9];
        r.read_exact(&mut f).await.ok()?;
        let len = u32::from_be_bytes([0, f[0], f[1], f[2]]) as usize;
        f.resize(9 + len, 0);
        r.read_exact(&mut f[9..]).await.ok()?;
        Some(f)
    }

    fn stream(f: &[u8]) -> u32 {
        u32::from_be_bytes([f[5], f[6], f[7], f[8]]) & 0x7fff_ffff
    }

    async fn to_member(
        conn: usize,
        mut cr: tokio::net::tcp::OwnedReadHalf,
        mut sw: tokio::net::tcp::OwnedWriteHalf,
        state: Arc<Mutex<Held>>,
        changed: Arc<tokio::sync::Notify>,
    ) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut preface = [0u8; 24];
        if cr.read_exact(&mut preface).await.is_err() || sw.write_all(&preface).await.is_err() {
            return;
        }
        // Frames are read on their own task, so that none is cut in two
        // when the release comes.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(f) = Self::frame(&mut cr).await {
                if tx.send(f).is_err() {
                    return;
                }
            }
        });
        let mut kept = Vec::new();
        loop {
            let told = changed.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            let released = state.lock().unwrap().released;
            if released
                && !kept.is_empty()
                && sw.write_all(&std::mem::take(&mut kept)).await.is_err()
            {
                return;
            }
            let f = tokio::select! {
                f = rx.recv() => f,
                _ = &mut told => continue,
            };
            let Some(f) = f else {
                // The frontend closed the connection: what was held still
                // goes once released, and the member's side stays open
                // for its answers.
                if released {
                    std::future::pending::<()>().await;
                }
                told.await;
                continue;
            };
            let (kind, id) = (f[3], Self::stream(&f));
            let pass = {
                let mut st = state.lock().unwrap();
                if kind == Self::RST_STREAM && st.streams.contains(&(conn, id)) {
                    false
                } else if st.holding && !st.released {
                    // A call whose request ends here waits for its answer
                    // (the long-lived streams, watches and keep-alives,
                    // never end theirs).
                    let ends = kind == Self::DATA || kind == Self::HEADERS;
                    if ends && f[4] & Self::END_STREAM != 0 {
                        st.streams.insert((conn, id));
                    }
                    kept.extend_from_slice(&f);
                    false
                } else {
                    true
                }
            };
            if pass && sw.write_all(&f).await.is_err() {
                return;
            }
        }
    }

    async fn from_member(
        conn: usize,
        mut sr: tokio::net::tcp::OwnedReadHalf,
        mut cw: tokio::net::tcp::OwnedWriteHalf,
        state: Arc<Mutex<Held>>,
        changed: Arc<tokio::sync::Notify>,
    ) {
        use tokio::io::AsyncWriteExt as _;
        while let Some(f) = Self::frame(&mut sr).await {
            let (kind, flags, id) = (f[3], f[4], Self::stream(&f));
            let ends = kind == Self::RST_STREAM
                || ((kind == Self::DATA || kind == Self::HEADERS) && flags & Self::END_STREAM != 0);
            if ends && state.lock().unwrap().streams.remove(&(conn, id)) {
                changed.notify_waiters();
            }
            // The frontend may have gone: the member is still listened to.
            let _ = cw.write_all(&f).await;
        }
    }
}

/// Every new job's grant compares and puts the one store-wide `meta` key
/// (the count of jobs, the new-job floor), so jobs created at once through
/// one frontend race for it: each must still be created, none refused for
/// contention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_new_jobs_created_at_once_are_all_granted() {
    use leasehold::etcd::EtcdNode;
    use leasehold::lease::Limits;

    let cluster = EtcdCluster::start(1);
    let config = common::etcd::frontend_config(cluster.endpoints(), &fresh_prefix());
    let node = EtcdNode::open(config).await.unwrap();
    let tasks: Vec<_> = (0..64)
        .map(|c| {
            let node = node.clone();
            tokio::spawn(async move {
                let l = Limits::default();
                let h = l.holder(&format!("creator-{c}")).unwrap();
                let mut failed = Vec::new();
                for i in 0..10 {
                    let job = l.job(&format!("new-{c}-{i}")).unwrap();
                    match node.acquire(&job, &h, MIN_TTL * 10, NOW).await {
                        Ok(got) if got.acquired => {}
                        other => failed.push(format!("{job}: {other:?}")),
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = Vec::new();
    for t in tasks {
        failed.extend(t.await.unwrap());
    }
    assert!(
        failed.is_empty(),
        "{} of 640 not granted: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
}

/// With a policy, a fenced write carrying another principal's live token
/// is refused on the same read of the job its write would be decided on
/// (no read of the lease before it), and the holder's own goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_with_another_principals_live_token_is_refused() {
    use common::pki;
    let cluster = EtcdCluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let policy = pki::token_policy(&[
        ("billing", "billing-secret", &["shared/"]),
        ("ops", "ops-secret", &["shared/"]),
    ]);
    let path = pki::write(dir.path(), "policy.toml", &policy);
    let f = frontend(
        &cluster.endpoints_arg(),
        &fresh_prefix(),
        &["--policy", path.to_str().unwrap()],
    );
    let as_ = |secret: &str| {
        let security = leasehold::client::Security {
            token: Some(secret.to_owned()),
            ..Default::default()
        };
        let url = f.url();
        async move { Client::connect_with(&url, security).await.unwrap() }
    };
    let (billing, ops) = (as_("billing-secret").await, as_("ops-secret").await);
    billing.acquire("shared/w", "h", LONG, NOW).await.unwrap();
    let seen = ops.get_lease("shared/w").await.unwrap();
    assert_eq!(seen.principal.as_deref(), Some("billing"));
    match ops
        .checked_write("shared/w", seen.token, b"k", b"forged".to_vec())
        .await
        .unwrap_err()
    {
        ClientError::PermissionDenied { action, job, .. } => {
            assert_eq!(
                (action.as_deref(), job.as_deref()),
                (Some("write"), Some("shared/w"))
            );
        }
        other => panic!("expected PERMISSION_DENIED, got {other:?}"),
    }
    assert!(!billing.read("shared/w", b"k").await.unwrap().found);
    billing
        .checked_write("shared/w", seen.token, b"k", b"mine".to_vec())
        .await
        .unwrap();
    assert_eq!(billing.read("shared/w", b"k").await.unwrap().value, b"mine");
}

/// etcd's back end quota for the out-of-space tests: small, so that a few
/// large values fill it.
const SMALL_QUOTA: &[&str] = &["--quota-backend-bytes", "16777216"];

/// Runs `etcdctl` (API v3) on the cluster; panics unless it succeeds.
fn etcdctl(cluster: &EtcdCluster, args: &[&str]) -> String {
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(cluster.endpoints_arg())
        .args(args)
        .output()
        .expect("etcdctl runs");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Puts large values under `fill/` until etcd refuses a put for lack of
/// space (its NOSPACE alarm is raised then).
async fn fill_etcd(cluster: &EtcdCluster) {
    let etcd = leasehold::etcd::client::Etcd::connect(&cluster.endpoints(), LONG).unwrap();
    let value = vec![7u8; 1 << 20];
    for i in 0..200 {
        match etcd
            .put(format!("fill/{i}").into_bytes(), value.clone(), 0)
            .await
        {
            Ok(_) => {}
            Err(e) if e.to_string().contains("database space exceeded") => return,
            Err(e) => panic!("filling etcd: {e}"),
        }
    }
    panic!("etcd took 200 MiB under a 16 MiB quota");
}

/// What an operator does for an etcd out of space: deletes what filled
/// it, compacts, defragments every member, and disarms the alarm.
async fn free_etcd(cluster: &EtcdCluster) {
    use leasehold::etcd::client::{range_req, Etcd};
    etcdctl(cluster, &["del", "--prefix", "fill/"]);
    let etcd = Etcd::connect(&cluster.endpoints(), LONG).unwrap();
    let r = etcd
        .range(range_req(b"fill/".to_vec(), Vec::new(), 1))
        .await
        .unwrap();
    let revision = r.header.unwrap().revision.to_string();
    etcdctl(cluster, &["compact", &revision, "--physical"]);
    etcdctl(cluster, &["defrag"]);
    etcdctl(cluster, &["alarm", "disarm"]);
}

/// The frontend's gRPC health (the server's overall status).
async fn grpc_health(url: &str) -> i32 {
    let channel = Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

/// etcd out of space (its NOSPACE alarm) refuses every put, but still
/// takes lease keep-alives and transactions that only delete. A holder
/// that never renewed since its grant renews all the same, again and
/// again, and keeps its lease; and once space is back, a give-back of
/// that grant (a client whose Acquire was cancelled) does not end it: the
/// renewal told etcd that its holder asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_never_renewed_renews_while_etcd_is_out_of_space() {
    let cluster = EtcdCluster::start_with(3, SMALL_QUOTA);
    let f = frontend(&cluster.endpoints_arg(), &fresh_prefix(), &[]);
    let c = client_of(&f.url(), LONG);
    let a = c.acquire("j", "a", LONG, NOW).await.unwrap();
    assert!(a.acquired);
    let token = a.lease.token;

    fill_etcd(&cluster).await;
    for _ in 0..3 {
        let l = c.renew("j", "a", token, LONG).await.unwrap();
        assert_eq!((l.holder.as_deref(), l.token), (Some("a"), token));
    }
    let l = c.get_lease("j").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("a"), token));

    free_etcd(&cluster).await;
    common::eventually("etcd to take changes again", || {
        let c = &c;
        async move { c.acquire("other", "b", LONG, NOW).await.ok() }
    })
    .await;
    // The renewals happened while etcd took no puts; the grant is told
    // all the same, and a give-back keeps it.
    let mut leases = proto::leases_client::LeasesClient::connect(f.url())
        .await
        .unwrap();
    let r = leases
        .release(proto::ReleaseRequest {
            job: "j".into(),
            holder: "a".into(),
            token,
            give_back: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.released, "a renewed grant was given back");
    let l = c.get_lease("j").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("a"), token));
    c.renew("j", "a", token, LONG).await.unwrap();
}

/// While etcd is out of space (its NOSPACE alarm), the frontend says it
/// cannot take changes: gRPC health NOT_SERVING and `/healthz` 503 naming
/// the cause, and each change answers DISK_FULL (nothing applied), as the
/// single node answers a full disk. Once an operator frees space and
/// disarms the alarm, it serves again and changes go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_out_of_space_is_not_serving_and_changes_answer_disk_full() {
    let cluster = EtcdCluster::start_with(3, SMALL_QUOTA);
    let f = frontend(&cluster.endpoints_arg(), &fresh_prefix(), &[]);
    let c = client_of(&f.url(), LONG);
    let a = c.acquire("j", "a", LONG, NOW).await.unwrap();
    assert!(a.acquired);
    let token = a.lease.token;
    assert_eq!(
        c.checked_write("j", token, b"k", b"v1".to_vec())
            .await
            .unwrap(),
        1
    );
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    let not_serving = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;
    assert_eq!(grpc_health(&f.url()).await, serving);

    fill_etcd(&cluster).await;
    let mut store = proto::fenced_store_client::FencedStoreClient::connect(f.url())
        .await
        .unwrap();
    let st = store
        .checked_write(proto::CheckedWriteRequest {
            proof: Default::default(),
            job: "j".into(),
            token,
            key: b"k".to_vec(),
            value: b"v2".to_vec(),
            delete: false,
        })
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
    let info = st.get_error_details().error_info().cloned().unwrap();
    assert_eq!(info.reason, "DISK_FULL", "{st:?}");
    assert!(st.message().contains("out of space"), "{st:?}");
    let v = c.read("j", b"k").await.unwrap();
    assert_eq!((v.version, v.value.as_slice()), (1, &b"v1"[..]));

    common::eventually("health NOT_SERVING", || {
        let url = f.url();
        async move { (grpc_health(&url).await == not_serving).then_some(()) }
    })
    .await;
    let (code, body) = common::admin_request(f.admin, "/healthz").await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("NOSPACE") && body.contains("out of space"),
        "{body}"
    );
    // Reads go on.
    let l = c.get_lease("j").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("a"), token));

    free_etcd(&cluster).await;
    common::eventually("health SERVING", || {
        let url = f.url();
        async move { (grpc_health(&url).await == serving).then_some(()) }
    })
    .await;
    let (code, body) = common::admin_request(f.admin, "/healthz").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        c.checked_write("j", token, b"k", b"v2".to_vec())
            .await
            .unwrap(),
        2
    );
}

/// etcd out of space takes a keep-alive but no move: a lease that its
/// `KeepAlive` stream leaves out stays on the stream's shared etcd lease,
/// and still runs out on time, deleted by the frontend when its TTL ends
/// (never before); the stream's other leases are renewed throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_left_out_of_its_stream_runs_out_on_time_while_etcd_is_out_of_space() {
    use leasehold::client::KeepAliveRenewal;
    let cluster = EtcdCluster::start_with(1, SMALL_QUOTA);
    let f = frontend(&cluster.endpoints_arg(), &fresh_prefix(), &[]);
    let c = client_of(&f.url(), LONG);
    let ttl = Duration::from_secs(4);
    let jobs: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
    let mut batch = Vec::new();
    for j in &jobs {
        let t = c.acquire(j, "me", ttl, NOW).await.unwrap().lease.token;
        batch.push(KeepAliveRenewal::new(j, "me", t, ttl));
    }
    let mut ka = c.keep_alive().await.unwrap();
    let mut renew_all = async || {
        let out = ka.renew(&batch).await.unwrap();
        assert!(out.iter().all(|o| o.is_renewed()), "{out:?}");
    };
    for _ in 0..3 {
        renew_all().await;
    }
    fill_etcd(&cluster).await;
    renew_all().await;
    let last_n0 = Instant::now();
    renew_all().await;
    let mut gone_at = None;
    while last_n0.elapsed() < ttl + Duration::from_secs(6) {
        let out = ka.renew(&batch[1..]).await.unwrap();
        assert!(out.iter().all(|o| o.is_renewed()), "{out:?}");
        let l = c.get_lease("n0").await.unwrap();
        let answered = Instant::now();
        if l.holder.is_none() {
            assert!(
                answered >= last_n0 + ttl,
                "n0 ended {:?} after its last renewal was sent",
                answered - last_n0
            );
            gone_at.get_or_insert(answered - last_n0);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone = gone_at.expect("n0 ran out while etcd was out of space");
    assert!(
        gone < ttl + Duration::from_secs(3),
        "n0 ended {gone:?} after"
    );
    for j in &jobs[1..] {
        let l = c.get_lease(j).await.unwrap();
        assert_eq!(l.holder.as_deref(), Some("me"), "{j}");
    }
}
