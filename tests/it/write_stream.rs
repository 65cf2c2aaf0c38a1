//! Fenced writes over `FencedStore.WriteStream` against the real server on
//! 127.0.0.1: a result per write in order, the fence per write, bad input
//! in one write, the stream-wide limit, and acknowledged stream writes
//! surviving SIGKILL of the server process.

use crate::common;

use std::time::Duration;

use common::{ServerProcess, TestServer};
use leasehold::client::{Client, StreamWrite, WriteOutcome};
use leasehold::proto;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic_types::StatusExt;

const TTL: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_write_gets_its_own_result_in_order_and_stale_tokens_are_fenced() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let a = c.acquire("j", "a@1", TTL, Duration::ZERO).await.unwrap();
    let b = c.acquire("j2", "b@2", TTL, Duration::ZERO).await.unwrap();
    assert!(a.acquired && b.acquired);
    let (ta, tb) = (a.lease.token, b.lease.token);

    let mut ws = c.write_stream().await.unwrap();
    let out = ws
        .write(&[
            StreamWrite::put("j", ta, b"k", b"one".to_vec()),
            StreamWrite::put("j", ta, b"k", b"two".to_vec()),
            StreamWrite::put("j", ta + 1, b"k", b"never".to_vec()),
            StreamWrite::put("j", 0, b"k", b"never".to_vec()),
            StreamWrite::put("j", ta, b"", b"never".to_vec()),
            StreamWrite::put("j2", tb, b"k", b"other job".to_vec()),
            StreamWrite::delete("j", ta, b"gone"),
        ])
        .await
        .unwrap();
    assert_eq!(out.len(), 7);
    assert_eq!(out[0], WriteOutcome::Written { version: 1 });
    assert_eq!(
        out[1],
        WriteOutcome::Written { version: 2 },
        "a later write in a message sees the earlier one"
    );
    let WriteOutcome::UnknownToken { current_token, .. } = &out[2] else {
        panic!("{:?}", out[2])
    };
    assert_eq!(*current_token, ta);
    let WriteOutcome::InvalidArgument { field, .. } = &out[3] else {
        panic!("{:?}", out[3])
    };
    assert_eq!(field, "token");
    let WriteOutcome::InvalidArgument { field, message } = &out[4] else {
        panic!("{:?}", out[4])
    };
    assert_eq!(field, "key", "{message}");
    assert_eq!(out[5], WriteOutcome::Written { version: 1 });
    assert_eq!(out[6], WriteOutcome::Written { version: 1 });

    // The job changes hands: the old leader's next write on the same
    // stream is fenced, even before the new leader writes anything.
    c.release("j", "a@1", ta).await.unwrap();
    let n = c.acquire("j", "n@3", TTL, Duration::ZERO).await.unwrap();
    assert_eq!(n.lease.token, ta + 1);
    let out = ws
        .write(&[StreamWrite::put("j", ta, b"k", b"stale".to_vec())])
        .await
        .unwrap();
    let WriteOutcome::Fenced {
        current_token,
        message,
    } = &out[0]
    else {
        panic!("{:?}", out[0])
    };
    assert_eq!(*current_token, ta + 1, "{message}");
    let out = ws
        .write(&[StreamWrite::put("j", ta + 1, b"k", b"new".to_vec())])
        .await
        .unwrap();
    assert_eq!(out[0], WriteOutcome::Written { version: 3 });

    // What the refused writes would have changed is unchanged.
    let v = c.read("j", b"k").await.unwrap();
    assert_eq!(
        (v.value.as_slice(), v.version, v.token),
        (&b"new"[..], 3, ta + 1)
    );
    assert_eq!(c.read("j2", b"k").await.unwrap().value, b"other job");
    assert!(!c.read("j", b"gone").await.unwrap().found);
    // The split-brain attempt shows in the fenced-write count.
    assert_eq!(s.node.snapshot().stats.fenced_writes, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_limit_ends_the_stream_and_changes_nothing() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let t = c
        .acquire("j", "a@1", TTL, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    let mut raw = proto::fenced_store_client::FencedStoreClient::connect(s.url())
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(4);
    let mut resp = raw
        .write_stream(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let w = |i: usize| proto::CheckedWriteRequest {
        proof: Default::default(),
        job: "j".into(),
        token: t,
        key: format!("k{i}").into_bytes(),
        value: b"v".to_vec(),
        delete: false,
    };
    // Pipelined: requests sent back to back are decided in the order sent
    // (versions of one key go up by one) and answered in that order.
    for id in 1..=30u64 {
        tx.send(proto::WriteStreamRequest {
            id,
            writes: vec![w(5), w(id as usize + 100)],
        })
        .await
        .unwrap();
    }
    for id in 1..=30u64 {
        let r = resp.message().await.unwrap().unwrap();
        assert_eq!(r.id, id);
        assert_eq!(
            r.results[0].version, id,
            "k5 written once per message, in order"
        );
        assert_eq!(r.results[1].version, 1);
    }
    tx.send(proto::WriteStreamRequest {
        id: 7,
        writes: (0..1001).map(w).collect(),
    })
    .await
    .unwrap();
    let st = resp.message().await.unwrap_err();
    assert_eq!(st.code(), Code::InvalidArgument);
    assert!(st.message().contains("1000"), "{}", st.message());
    let info = st.get_error_details().error_info().cloned().unwrap();
    assert_eq!(
        info.metadata.get("field").map(String::as_str),
        Some("writes")
    );
    assert!(
        !c.read("j", b"k0").await.unwrap().found,
        "nothing of the refused message was written"
    );
    assert_eq!(c.read("j", b"k5").await.unwrap().version, 30);
    // The stream counts with the status it ended with, not the OK of its
    // opening.
    let m = s.metrics();
    let line = "leasehold_rpc_responses_total{method=\"WriteStream\",code=\"INVALID_ARGUMENT\"} 1";
    assert!(m.contains(line), "no {line} in\n{m}");
    assert!(
        !m.contains("leasehold_rpc_responses_total{method=\"WriteStream\",code=\"OK\"}"),
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

fn put(t: u64, key: &str, value: Vec<u8>) -> proto::CheckedWriteRequest {
    proto::CheckedWriteRequest {
        proof: Default::default(),
        job: "j".into(),
        token: t,
        key: key.into(),
        value,
        delete: false,
    }
}

/// The keys of job "j", as strings.
async fn keys(c: &Client) -> Vec<String> {
    c.list_keys("j", b"")
        .await
        .unwrap()
        .into_iter()
        .map(|k| String::from_utf8(k.key).unwrap())
        .collect()
}

/// A message larger than the server decodes (20 writes of 60,000 bytes)
/// ends the stream with INVALID_ARGUMENT naming `writes` and the limit,
/// once the messages sent before it are answered; they were made, and
/// nothing from that message on. The RPC metrics count the stream with
/// that code, not as OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_too_large_ends_the_stream_after_the_answers_before_it() {
    let s = TestServer::start().await;
    let c = s.client().await;
    let t = c
        .acquire("j", "a@1", TTL, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    let mut raw = proto::fenced_store_client::FencedStoreClient::connect(s.url())
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(8);
    let mut resp = raw
        .write_stream(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    // Pipelined: all sent before any answer is read.
    for id in 1..=3u64 {
        tx.send(proto::WriteStreamRequest {
            id,
            writes: vec![put(t, &format!("ok{id}"), b"v".to_vec())],
        })
        .await
        .unwrap();
    }
    tx.send(proto::WriteStreamRequest {
        id: 4,
        writes: (0..20)
            .map(|i| put(t, &format!("big{i}"), vec![0; 60_000]))
            .collect(),
    })
    .await
    .unwrap();
    // The server may have ended the stream already (it refuses the
    // oversized message as it arrives): then this send finds it closed.
    let _ = tx
        .send(proto::WriteStreamRequest {
            id: 5,
            writes: vec![put(t, "after", b"v".to_vec())],
        })
        .await;
    for id in 1..=3u64 {
        let r = resp.message().await.unwrap().expect("an answer");
        assert_eq!(r.id, id);
        assert_eq!(
            r.results[0].outcome(),
            proto::write_result::Outcome::Written
        );
    }
    let st = resp.message().await.unwrap_err();
    let limit = leasehold::server::Config::default().max_message_bytes();
    assert_invalid(&st, "writes", &[&format!("the limit is {limit} bytes")]);
    assert!(resp.message().await.unwrap().is_none(), "the stream ended");

    assert_eq!(keys(&c).await, ["ok1", "ok2", "ok3"]);
    let m = s.metrics();
    let line = "leasehold_rpc_responses_total{method=\"WriteStream\",code=\"INVALID_ARGUMENT\"} 1";
    assert!(m.contains(line), "no {line} in\n{m}");
    assert!(
        !m.contains("leasehold_rpc_responses_total{method=\"WriteStream\",code=\"OK\"}"),
        "{m}"
    );
}

/// A message that does not decode (a write's job is not UTF-8) ends the
/// stream with INVALID_ARGUMENT naming the field, after the answer to the
/// message before it; nothing from that message on is made. The RPC
/// metrics count the stream with that code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_does_not_decode_ends_the_stream_naming_the_field() {
    use common::raw;
    use prost::Message;
    let s = TestServer::start().await;
    let c = s.client().await;
    let t = c
        .acquire("j", "a@1", TTL, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    let msg = |id, writes| proto::WriteStreamRequest { id, writes }.encode_to_vec();
    let mut bad = put(t, "bad", b"v".to_vec());
    bad.job = "~BAD~".into();
    let msgs = vec![
        msg(1, vec![put(t, "ok", b"v".to_vec())]),
        raw::not_utf8(msg(2, vec![put(t, "fine", b"v".to_vec()), bad]), "~BAD~"),
        msg(3, vec![put(t, "after", b"v".to_vec())]),
    ];
    let mut resp = raw::stream(
        &s.url(),
        "/leasehold.v1.FencedStore/WriteStream",
        tokio_stream::iter(msgs),
    )
    .await
    .unwrap();
    let r = proto::WriteStreamResponse::decode(resp.message().await.unwrap().unwrap().as_slice())
        .unwrap();
    assert_eq!((r.id, r.results[0].version), (1, 1));
    let st = resp.message().await.unwrap_err();
    assert_invalid(&st, "writes.job", &["UTF-8"]);
    assert!(resp.message().await.unwrap().is_none(), "the stream ended");

    assert_eq!(keys(&c).await, ["ok"], "nothing of message 2 or 3");
    let m = s.metrics();
    let line = "leasehold_rpc_responses_total{method=\"WriteStream\",code=\"INVALID_ARGUMENT\"} 1";
    assert!(m.contains(line), "no {line} in\n{m}");
}

/// Every write the stream acknowledged is there after the server process is
/// killed with SIGKILL, mid-stream, and started again on the same data dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_stream_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    let t = c
        .acquire("j", "a@1", TTL, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    // Writers keep writing on their own streams until the kill; each
    // remembers the last version acknowledged for each of its keys, and
    // counts the batches acknowledged.
    let rounds: std::sync::Arc<[std::sync::atomic::AtomicU64; 4]> = Default::default();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let c = c.clone();
        let rounds = rounds.clone();
        tasks.push(tokio::spawn(async move {
            let mut ws = c.write_stream().await.unwrap();
            let mut acked = std::collections::HashMap::new();
            for round in 0u64.. {
                let batch: Vec<_> = (0..8)
                    .map(|k| {
                        StreamWrite::put(
                            "j",
                            t,
                            format!("w{w}/k{k}").as_bytes(),
                            round.to_le_bytes().to_vec(),
                        )
                    })
                    .collect();
                match ws.write(&batch).await {
                    Ok(out) => {
                        for (k, o) in out.iter().enumerate() {
                            let v = o.version().unwrap_or_else(|| panic!("{o:?}"));
                            acked.insert(format!("w{w}/k{k}"), (v, round));
                        }
                        rounds[w].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(_) => break,
                }
            }
            acked
        }));
    }
    // Killed mid-stream, once every writer has had a few batches
    // acknowledged.
    common::eventually("every writer to have batches acknowledged", || async {
        rounds
            .iter()
            .all(|r| r.load(std::sync::atomic::Ordering::Relaxed) >= 3)
            .then_some(())
    })
    .await;
    server.kill9();
    let mut acked = std::collections::HashMap::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    assert_eq!(acked.len(), 32, "every writer got writes acknowledged");

    let server = ServerProcess::start(dir.path(), &[]);
    let c = Client::connect(&server.url()).await.unwrap();
    for (key, (version, round)) in &acked {
        let v = c.read("j", key.as_bytes()).await.unwrap();
        // The write after the last acknowledged one may have landed too.
        assert!(
            v.version == *version || v.version == version + 1,
            "{key}: acknowledged version {version}, found {}",
            v.version
        );
        let found = u64::from_le_bytes(v.value.as_slice().try_into().unwrap());
        assert!(
            found == *round || found == round + 1,
            "{key}: {found} vs {round}"
        );
    }
    assert_eq!(c.get_lease("j").await.unwrap().token, t);
}
