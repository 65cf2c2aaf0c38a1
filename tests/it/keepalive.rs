//! The streamed renew path (`Leases.KeepAlive`) against the real server on
//! 127.0.0.1: per-lease results, LEASE_LOST with the current holder, many
//! leases on one stream, bad input in one entry, the stream-wide limits,
//! shutdown, and the Rust client's multi-lease use of it (`ElectorSet`).

use crate::common;

use std::time::Duration;

use common::TestServer;
use leasehold::client::{Client, ElectorSet, KeepAliveRenewal, RenewOutcome, Renewed, Role};
use leasehold::proto;
use leasehold::proto::keep_alive_result::Outcome;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic_types::StatusExt;

const TTL: Duration = Duration::from_secs(30);
/// The TTL of a fleet acquired one lease at a time before its first
/// renewal: on etcd, under load, its set-up alone may take longer than
/// [`TTL`].
const FLEET_TTL: Duration = Duration::from_secs(600);
const NOW: Duration = Duration::ZERO;

/// Acquires `n` jobs `{prefix}{i}` for `holder`, 32 at a time; returns their
/// tokens in order.
async fn acquire_many(c: &Client, prefix: &str, holder: &str, n: usize) -> Vec<u64> {
    acquire_many_for(c, prefix, holder, n, TTL).await
}

/// [`acquire_many`], each lease for `ttl`.
async fn acquire_many_for(
    c: &Client,
    prefix: &str,
    holder: &str,
    n: usize,
    ttl: Duration,
) -> Vec<u64> {
    let mut tokens = vec![0; n];
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        if set.len() == 32 {
            let (i, t) = set.join_next().await.unwrap().unwrap();
            tokens[i] = t;
        }
        let c = c.clone();
        let (job, holder) = (format!("{prefix}{i}"), holder.to_owned());
        set.spawn(async move {
            let a = c.acquire(&job, &holder, ttl, NOW).await.unwrap();
            assert!(a.acquired, "{job}");
            (i, a.lease.token)
        });
    }
    while let Some(r) = set.join_next().await {
        let (i, t) = r.unwrap();
        tokens[i] = t;
    }
    tokens
}

fn dur(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

fn raw_renewal(
    job: &str,
    holder: &str,
    token: u64,
    ttl: Option<Duration>,
) -> proto::KeepAliveRenewal {
    proto::KeepAliveRenewal {
        job: job.into(),
        holder: holder.into(),
        token,
        ttl: ttl.map(dur),
    }
}

/// A raw stream: a sender for requests and the response stream.
async fn raw_stream(
    s: &TestServer,
) -> (
    mpsc::Sender<proto::KeepAliveRequest>,
    tonic::Streaming<proto::KeepAliveResponse>,
) {
    let mut c = proto::leases_client::LeasesClient::connect(s.url())
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(16);
    let resp = c
        .keep_alive(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, resp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lease_gets_its_own_result_in_order() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let tokens = acquire_many(&c, "job-", "me@1", 3).await;
    let ttl = Duration::from_secs(12);
    let batch: Vec<_> = (0..3)
        .map(|i| KeepAliveRenewal::new(&format!("job-{i}"), "me@1", tokens[i], ttl))
        .collect();
    let mut ka = c.keep_alive().await.unwrap();
    for _ in 0..3 {
        let out = ka.renew(&batch).await.unwrap();
        assert_eq!(out.len(), 3);
        for (i, o) in out.iter().enumerate() {
            let RenewOutcome::Renewed(Renewed { lease: l, .. }) = o else {
                panic!("job-{i}: {o:?}")
            };
            assert_eq!(l.job, format!("job-{i}"));
            assert_eq!(l.holder.as_deref(), Some("me@1"));
            assert_eq!(l.token, tokens[i], "a renewal never changes the token");
            assert_eq!(l.ttl, Some(ttl));
            assert!(l.remaining.unwrap() <= ttl);
        }
    }
    // The server agrees: the TTL of every lease is the renewed one.
    for (i, token) in tokens.iter().enumerate() {
        let l = c.get_lease(&format!("job-{i}")).await.unwrap();
        assert_eq!(l.ttl, Some(ttl));
        assert_eq!(l.token, *token);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_reported_with_the_current_holder_and_the_rest_are_renewed() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let tokens = acquire_many(&c, "j", "me@1", 4).await;
    // j1 changes hands; j2 is released and free; j3 is asked for by a
    // holder that never had it.
    c.release("j1", "me@1", tokens[1]).await.unwrap();
    let other = c.acquire("j1", "other@2", TTL, NOW).await.unwrap();
    assert!(other.acquired);
    c.release("j2", "me@1", tokens[2]).await.unwrap();

    let mut ka = c.keep_alive().await.unwrap();
    let out = ka
        .renew(&[
            KeepAliveRenewal::new("j0", "me@1", tokens[0], TTL),
            KeepAliveRenewal::new("j1", "me@1", tokens[1], TTL),
            KeepAliveRenewal::new("j2", "me@1", tokens[2], TTL),
            KeepAliveRenewal::new("j3", "impostor@7", tokens[3], TTL),
            KeepAliveRenewal::new("j0", "me@1", tokens[0] + 5, TTL),
        ])
        .await
        .unwrap();
    assert!(out[0].is_renewed(), "{:?}", out[0]);
    let RenewOutcome::LeaseLost(l) = &out[1] else {
        panic!("{:?}", out[1])
    };
    assert_eq!(
        l.holder.as_deref(),
        Some("other@2"),
        "names the current holder"
    );
    assert_eq!(l.token, other.lease.token, "and its token");
    assert_eq!(l.token, tokens[1] + 1);
    let RenewOutcome::LeaseLost(l) = &out[2] else {
        panic!("{:?}", out[2])
    };
    assert_eq!(l.holder, None, "a released lease is free");
    assert_eq!(l.token, tokens[2], "and keeps its last token");
    let RenewOutcome::LeaseLost(l) = &out[3] else {
        panic!("{:?}", out[3])
    };
    assert_eq!(l.holder.as_deref(), Some("me@1"), "names the real holder");
    assert_eq!(l.token, tokens[3]);
    let RenewOutcome::UnknownToken(l) = &out[4] else {
        panic!("{:?}", out[4])
    };
    assert_eq!(l.token, tokens[0]);

    // Nothing was changed by the refused entries.
    let l = c.get_lease("j1").await.unwrap();
    assert_eq!(l.holder.as_deref(), Some("other@2"));
    assert_eq!(l.token, tokens[1] + 1);
    assert_eq!(c.get_lease("j2").await.unwrap().holder, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_carries_many_leases_split_across_messages() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let n = 1500;
    let holder = "fleet-worker@0b4d2c9e-long-enough-to-need-several-messages";
    let tokens = acquire_many_for(&c, "fleet/job-", holder, n, FLEET_TTL).await;
    let batch: Vec<_> = (0..n)
        .map(|i| KeepAliveRenewal::new(&format!("fleet/job-{i}"), holder, tokens[i], FLEET_TTL))
        .collect();
    let mut ka = c.keep_alive().await.unwrap();
    for _ in 0..2 {
        let out = ka.renew(&batch).await.unwrap();
        assert_eq!(out.len(), n);
        for (i, o) in out.iter().enumerate() {
            let RenewOutcome::Renewed(Renewed { lease: l, .. }) = o else {
                panic!("fleet/job-{i}: {o:?}")
            };
            assert_eq!(l.job, format!("fleet/job-{i}"));
            assert_eq!(l.token, tokens[i]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_in_one_entry_is_rejected_with_the_field_named() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let t = acquire_many(&c, "ok", "me@1", 1).await[0];
    let (tx, mut rx) = raw_stream(&s).await;
    let long = "x".repeat(300);
    tx.send(proto::KeepAliveRequest {
        id: 7,
        renewals: vec![
            raw_renewal("", "me@1", t, Some(TTL)),
            raw_renewal("ok0", "", t, Some(TTL)),
            raw_renewal("ok0", "me@1", 0, Some(TTL)),
            raw_renewal("ok0", "me@1", t, None),
            raw_renewal("ok0", "me@1", t, Some(Duration::from_millis(1))),
            raw_renewal(&long, "me@1", t, Some(TTL)),
            raw_renewal("ok0", "me@1", t, Some(Duration::from_secs(20))),
        ],
        bind_to_stream: false,
    })
    .await
    .unwrap();
    let resp = rx.message().await.unwrap().unwrap();
    assert_eq!(resp.id, 7, "the response carries the request's id");
    assert_eq!(resp.results.len(), 7);
    let fields: Vec<_> = resp.results[..6]
        .iter()
        .map(|r| {
            assert_eq!(r.outcome(), Outcome::InvalidArgument, "{r:?}");
            assert!(r.lease.is_none());
            assert!(r.message.contains(&r.field), "{r:?}");
            r.field.as_str()
        })
        .collect();
    assert_eq!(fields, ["job", "holder", "token", "ttl", "ttl", "job"]);
    // The server's own range: 100ms up on the single node, etcd's
    // shortest lease (2s) up in etcd mode.
    let m = &resp.results[4].message;
    assert!(
        m.contains("allowed range 100ms to") || m.contains("allowed range 2s to"),
        "names the limit: {m}"
    );
    assert!(resp.results[5].message.contains("256"), "names the limit");
    // The good entry in the same message went through.
    let last = &resp.results[6];
    assert_eq!(last.outcome(), Outcome::Renewed, "{last:?}");
    assert_eq!(last.job, "ok0");
    assert_eq!(
        c.get_lease("ok0").await.unwrap().ttl,
        Some(Duration::from_secs(20))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_answered_in_order_and_an_oversized_message_ends_the_stream() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let t = acquire_many(&c, "p", "me@1", 1).await[0];
    let (tx, mut rx) = raw_stream(&s).await;
    // Pipelined: three requests before reading any answer.
    for id in [1, 2, 3] {
        let renewals = if id == 2 {
            vec![]
        } else {
            vec![raw_renewal("p0", "me@1", t, Some(TTL))]
        };
        tx.send(proto::KeepAliveRequest {
            id,
            renewals,
            bind_to_stream: false,
        })
        .await
        .unwrap();
    }
    for id in [1, 2, 3] {
        let r = rx.message().await.unwrap().unwrap();
        assert_eq!(r.id, id);
        assert_eq!(r.results.len(), if id == 2 { 0 } else { 1 });
    }
    // More than 1000 renewals in one message: the stream ends, naming the
    // field.
    let renewals = (0..1001)
        .map(|_| raw_renewal("p0", "m", t, Some(TTL)))
        .collect();
    tx.send(proto::KeepAliveRequest {
        id: 4,
        renewals,
        bind_to_stream: false,
    })
    .await
    .unwrap();
    let st = rx.message().await.unwrap_err();
    assert_eq!(st.code(), Code::InvalidArgument);
    let d = st.get_error_details();
    assert_eq!(d.error_info().unwrap().metadata["field"], "renewals");
    assert!(st.message().contains("1000"), "{}", st.message());
    // The stream counts with the status it ended with, not the OK of its
    // opening.
    let m = s.metrics();
    let line = "leasehold_rpc_responses_total{method=\"KeepAlive\",code=\"INVALID_ARGUMENT\"} 1";
    assert!(m.contains(line), "no {line} in\n{m}");
    assert!(
        !m.contains("leasehold_rpc_responses_total{method=\"KeepAlive\",code=\"OK\"}"),
        "{m}"
    );
}

/// Asserts that `st` is INVALID_ARGUMENT with reason INVALID_ARGUMENT,
/// naming `field`, and that its message says each of `words`.
fn assert_invalid(st: &tonic::Status, field: &str, words: &[&str]) {
    assert_eq!(st.code(), Code::InvalidArgument, "{st:?}");
    let info = st.get_error_details().error_info().cloned().unwrap();
    assert_eq!(info.reason, "INVALID_ARGUMENT", "{st:?}");
    assert_eq!(
        info.metadata.get("field").map(String::as_str),
        Some(field),
        "{st:?}"
    );
    for w in words {
        assert!(st.message().contains(w), "{w:?} in {:?}", st.message());
    }
}

/// A message larger than the server decodes (300 renewals with long names)
/// ends the stream with INVALID_ARGUMENT naming `renewals` and the limit,
/// once the messages sent before it are answered; they were made, and
/// nothing from that message on. The RPC metrics count the stream with
/// that code, not as OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_too_large_ends_the_stream_after_the_answers_before_it() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let t = acquire_many(&c, "big", "me@1", 1).await[0];
    let (tx, mut rx) = raw_stream(&s).await;
    let secs = Duration::from_secs;
    for id in [1, 2] {
        tx.send(proto::KeepAliveRequest {
            id,
            renewals: vec![raw_renewal("big0", "me@1", t, Some(secs(10 * id)))],
            bind_to_stream: false,
        })
        .await
        .unwrap();
    }
    let long = "h".repeat(250);
    tx.send(proto::KeepAliveRequest {
        id: 3,
        renewals: (0..300)
            .map(|_| raw_renewal("big0", &long, t, Some(secs(30))))
            .collect(),
        bind_to_stream: false,
    })
    .await
    .unwrap();
    // The server may have ended the stream already (it refuses the
    // oversized message as it arrives): then this send finds it closed.
    let _ = tx
        .send(proto::KeepAliveRequest {
            id: 4,
            renewals: vec![raw_renewal("big0", "me@1", t, Some(secs(40)))],
            bind_to_stream: false,
        })
        .await;
    for id in [1, 2] {
        let r = rx.message().await.unwrap().expect("an answer");
        assert_eq!(r.id, id);
        assert_eq!(r.results[0].outcome(), Outcome::Renewed);
    }
    let st = rx.message().await.unwrap_err();
    let limit = leasehold::server::Config::default().max_message_bytes();
    assert_invalid(&st, "renewals", &[&format!("the limit is {limit} bytes")]);
    assert!(rx.message().await.unwrap().is_none(), "the stream ended");

    let l = c.get_lease("big0").await.unwrap();
    assert_eq!(l.ttl, Some(secs(20)), "renewed by 1 and 2, not by 4");
    let m = s.metrics();
    let line = "leasehold_rpc_responses_total{method=\"KeepAlive\",code=\"INVALID_ARGUMENT\"} 1";
    assert!(m.contains(line), "no {line} in\n{m}");
    assert!(
        !m.contains("leasehold_rpc_responses_total{method=\"KeepAlive\",code=\"OK\"}"),
        "{m}"
    );
}

/// A message that does not decode (a renewal's job is not UTF-8) ends the
/// stream with INVALID_ARGUMENT naming the field, after the answer to the
/// message before it; nothing from that message on is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_does_not_decode_ends_the_stream_naming_the_field() {
    use common::raw;
    use prost::Message;
    let s = TestServer::start().await;
    let c = s.client().await;
    let t = acquire_many(&c, "utf", "me@1", 1).await[0];
    let secs = Duration::from_secs;
    let msg = |id, renewals| {
        proto::KeepAliveRequest {
            id,
            renewals,
            bind_to_stream: false,
        }
        .encode_to_vec()
    };
    let msgs = vec![
        msg(1, vec![raw_renewal("utf0", "me@1", t, Some(secs(20)))]),
        raw::not_utf8(
            msg(
                2,
                vec![
                    raw_renewal("utf0", "me@1", t, Some(secs(30))),
                    raw_renewal("~BAD~", "me@1", t, Some(secs(30))),
                ],
            ),
            "~BAD~",
        ),
        msg(3, vec![raw_renewal("utf0", "me@1", t, Some(secs(40)))]),
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
    assert_eq!((r.id, r.results[0].outcome()), (1, Outcome::Renewed));
    let st = resp.message().await.unwrap_err();
    assert_invalid(&st, "renewals.job", &["UTF-8"]);
    assert!(resp.message().await.unwrap().is_none(), "the stream ended");

    let l = c.get_lease("utf0").await.unwrap();
    assert_eq!(l.ttl, Some(secs(20)), "renewed by 1 alone");
    let m = s.metrics();
    let line = "leasehold_rpc_responses_total{method=\"KeepAlive\",code=\"INVALID_ARGUMENT\"} 1";
    assert!(m.contains(line), "no {line} in\n{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_the_stream_with_shutting_down() {
    // A drain timeout far beyond the test's patience: a stop that waited
    // for it would fail the test, however slow the machine.
    let config = leasehold::server::Config {
        drain_timeout: 2 * common::PATIENCE,
        ..leasehold::server::Config::default()
    };
    let s = TestServer::with_config(tempfile::tempdir().unwrap(), config).await;
    let c = s.client().await;
    let t = acquire_many(&c, "s", "me@1", 1).await[0];
    let (tx, mut rx) = raw_stream(&s).await;
    tx.send(proto::KeepAliveRequest {
        id: 1,
        renewals: vec![raw_renewal("s0", "me@1", t, Some(TTL))],
        bind_to_stream: false,
    })
    .await
    .unwrap();
    assert_eq!(rx.message().await.unwrap().unwrap().results.len(), 1);
    let rpc = s.rpc.clone();
    let node = s.node.clone();
    let stopping = tokio::spawn(s.stop());
    let st = rx.message().await.unwrap_err();
    assert_eq!(st.code(), Code::Unavailable);
    assert_eq!(
        st.get_error_details().error_info().unwrap().reason,
        "SHUTTING_DOWN"
    );
    let m = leasehold::metrics::render(&node, &rpc);
    let line = "leasehold_rpc_responses_total{method=\"KeepAlive\",code=\"UNAVAILABLE\"} 1";
    assert!(m.contains(line), "no {line} in\n{m}");
    // The open stream does not hold up the drain.
    tokio::time::timeout(common::PATIENCE, stopping)
        .await
        .expect("the server stops without waiting for the drain timeout")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elector_set_leads_several_jobs_renewing_them_over_one_stream() {
    let s = TestServer::start().await;
    let c = s.client().await;
    // Long enough that a stall of a loaded machine does not outlast a
    // renewal period and the rest of the TTL (renewals every ttl / 3).
    let ttl = Duration::from_secs(6);
    let mut set = ElectorSet::start(c.clone(), "multi", ttl);
    let jobs = ["m-a", "m-b", "m-c"];
    let mut roles: Vec<_> = jobs.iter().map(|j| set.campaign(j)).collect();
    let mut tokens = Vec::new();
    for r in &mut roles {
        let role = *r.wait_for(|r| r.token().is_some()).await.unwrap();
        tokens.push(role.token().unwrap());
    }
    assert_eq!(set.leading().len(), 3);

    // Two rounds of renewals later, all three are still ours, with the
    // same tokens: renewed, never re-granted.
    let renewals = s.node.snapshot().stats.renewals;
    common::eventually("two rounds of renewals of the three jobs", || async {
        (s.node.snapshot().stats.renewals >= renewals + 6).then_some(())
    })
    .await;
    for (i, j) in jobs.iter().enumerate() {
        assert_eq!(set.role(j), Role::Leader { token: tokens[i] }, "{j}");
        let l = c.get_lease(j).await.unwrap();
        assert_eq!(l.holder.as_deref(), Some(set.holder()));
        assert_eq!(l.token, tokens[i]);
    }
    // m-b is taken away behind the set's back (released with its
    // identity): its next renewal reports LEASE_LOST for m-b alone, the set
    // steps down from it and campaigns again, and wins it back with a new
    // token, while m-a and m-c stay led with theirs.
    c.release("m-b", set.holder(), tokens[1]).await.unwrap();
    let back = *roles[1]
        .wait_for(|r| r.token().is_some_and(|t| t != tokens[1]))
        .await
        .unwrap();
    assert_eq!(back.token(), Some(tokens[1] + 1));
    assert_eq!(set.role("m-a"), Role::Leader { token: tokens[0] });
    assert_eq!(set.role("m-c"), Role::Leader { token: tokens[2] });
    assert!(s.node.snapshot().stats.renew_losses >= 1);

    set.resign().await;
    for j in jobs {
        assert_eq!(c.get_lease(j).await.unwrap().holder, None, "{j} released");
    }
}

/// A watcher's next event, waiting as long as a loaded machine may take.
async fn next(w: &mut tonic::Streaming<proto::LeaseEvent>) -> proto::LeaseEvent {
    tokio::time::timeout(common::PATIENCE, w.message())
        .await
        .expect("an event")
        .unwrap()
        .expect("the watch goes on")
}

/// A KeepAlive renewal that shortens a watched lease moves the expiry its
/// watchers hear of, as a unary Renew does: the job's deadline timer,
/// armed on the old (60 s) deadline, is armed again on the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_hears_of_the_expiry_of_a_lease_a_keep_alive_shortened() {
    const LONG: Duration = Duration::from_secs(60);
    let s = TestServer::start().await;
    let c = s.client().await;
    let a = c.acquire("ka/shortened", "me@1", LONG, NOW).await.unwrap();
    assert!(a.acquired);
    let mut w = c.watch("ka/shortened").await.unwrap();
    let ev = next(&mut w).await;
    assert_eq!(ev.kind, leasehold::client::EventKind::Current as i32);
    let ttl = common::ttl(Duration::from_millis(300));
    let mut ka = c.keep_alive().await.unwrap();
    let renewed = std::time::Instant::now();
    let out = ka
        .renew(&[KeepAliveRenewal::new(
            "ka/shortened",
            "me@1",
            a.lease.token,
            ttl,
        )])
        .await
        .unwrap();
    assert!(matches!(&out[..], [RenewOutcome::Renewed(_)]), "{out:?}");
    let ev = next(&mut w).await;
    let heard = renewed.elapsed();
    assert_eq!(
        ev.kind,
        leasehold::client::EventKind::Expired as i32,
        "{ev:?}"
    );
    assert!(
        heard >= ttl,
        "told of the expiry {heard:?} after a {ttl:?} renewal"
    );
    assert!(
        heard < LONG / 3,
        "told of the expiry {heard:?} after the renewal: at the old {LONG:?} deadline, not the renewed {ttl:?}"
    );
}
