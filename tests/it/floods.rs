//! Issue 41, the floods below gRPC, each against a real server process by
//! a client that writes raw HTTP/2 frames on plain TCP (no client library
//! would pipeline past the stream limit, flood PING, or hold its window
//! at zero), while a leader on a connection of its own renews and must
//! never lose its lease ([`super::attacks`]'s leader): requests pipelined
//! past the stream limit, a PING flood, and slow readers of large values.
//! Each asserts the step the server must take (a GOAWAY, a refusal, a
//! closed connection) and that its memory stays under the cap it was
//! given; the latencies are the bench's (`leasehold-bench isolation`).

use crate::attacks::leader_holds_through;
use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{admin_request, Place, ServerProcess};
use leasehold::proto;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const INITIAL_WINDOW_SIZE: u16 = 4;
const ENHANCE_YOUR_CALM: u32 = 0xb;

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

fn hstr(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// One gRPC call to `path` with `msg`, as a HEADERS and a DATA frame on
/// `stream`; the header block puts nothing into HPACK's table, so the same
/// bytes open every stream.
fn call(out: &mut Vec<u8>, stream: u32, path: &str, msg: &[u8]) {
    let mut h = vec![0x83, 0x86, 0x04]; // POST, http, :path
    hstr(&mut h, path);
    h.push(0x01); // :authority
    hstr(&mut h, "test");
    h.extend_from_slice(&[0x0f, 0x10]); // content-type
    hstr(&mut h, "application/grpc");
    h.push(0x00);
    hstr(&mut h, "te");
    hstr(&mut h, "trailers");
    frame(out, HEADERS, END_HEADERS, stream, &h);
    let mut body = vec![0];
    body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    body.extend_from_slice(msg);
    frame(out, DATA, END_STREAM, stream, &body);
}

/// Reads the server's frames until it closes the connection; returns the
/// error code of its GOAWAY, if it sent one.
async fn goaway_of(mut r: tokio::net::tcp::OwnedReadHalf) -> Option<u32> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut at = 0;
    let mut code = None;
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return code,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        while buf.len() >= at + 9 {
            let len = u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]) as usize;
            if buf.len() < at + 9 + len {
                break;
            }
            if buf[at + 3] == GOAWAY && len >= 8 {
                let p = &buf[at + 9..];
                code = Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            }
            at += 9 + len;
        }
        buf.drain(..at);
        at = 0;
    }
}

/// The server's resident memory, in bytes.
fn rss(p: &ServerProcess) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{}/statm", p.pid())).unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Samples the server's RSS every 100 ms until the flag is set; the task
/// returns the peak.
fn peak_rss(p: &ServerProcess) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
    let (stop, pid, mut peak) = (Arc::new(AtomicBool::new(false)), p.pid(), rss(p));
    let s = stop.clone();
    let task = tokio::spawn(async move {
        while !s.load(Ordering::Relaxed) {
            let m = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
            let pages: u64 = m
                .split_whitespace()
                .nth(1)
                .and_then(|x| x.parse().ok())
                .unwrap_or(0);
            peak = peak.max(pages * 4096);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak
    });
    (stop, task)
}

/// [`leader_holds_through`] while the server's RSS is sampled; returns
/// the peak.
async fn peak_while_led<F>(p: &ServerProcess, met: impl Fn() -> bool, attack: F) -> u64
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (stop, sampler) = peak_rss(p);
    leader_holds_through(p, met, attack).await;
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap()
}

/// A counter on `/metrics` with one label, 0 when absent.
async fn counter(p: &ServerProcess, series: &str) -> f64 {
    let (_, m) = admin_request(p.admin, "/metrics").await;
    m.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Requests pipelined past the stream limit, on 4 connections that never
/// wait for an answer, opened again as soon as the server closes them:
/// each is sent away with GOAWAY ENHANCE_YOUR_CALM, and the server's
/// memory stays flat (it once grew by gigabytes), while the leader keeps
/// its lease.
async fn pipelined_flood(place: Place) {
    let p = place.start(&[]);
    let base = rss(&p);
    let sent_away = Arc::new(AtomicU64::new(0));
    let met = {
        let n = sent_away.clone();
        move || n.load(Ordering::Relaxed) >= 8
    };
    let attack = {
        let (sent_away, p) = (sent_away.clone(), Arc::new((p.addr, p.admin)));
        async move {
            let msg = proto::GetLeaseRequest {
                job: "flood".into(),
            }
            .encode_to_vec();
            let mut conns = Vec::new();
            for _ in 0..4 {
                let (sent_away, p) = (sent_away.clone(), p.clone());
                let msg = msg.clone();
                conns.push(tokio::spawn(async move {
                    loop {
                        let Ok(s) = TcpStream::connect(p.0).await else {
                            continue;
                        };
                        let (r, mut w) = s.into_split();
                        let goaway = tokio::spawn(goaway_of(r));
                        let mut hello = PREFACE.to_vec();
                        frame(&mut hello, SETTINGS, 0, 0, &[]);
                        let _ = w.write_all(&hello).await;
                        let mut stream = 1u32;
                        loop {
                            let mut batch = Vec::new();
                            for _ in 0..256 {
                                call(&mut batch, stream, "/leasehold.v1.Leases/GetLease", &msg);
                                stream += 2;
                            }
                            if w.write_all(&batch).await.is_err() || goaway.is_finished() {
                                break;
                            }
                        }
                        drop(w);
                        if goaway.await.unwrap() == Some(ENHANCE_YOUR_CALM) {
                            sent_away.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            for c in conns {
                let _ = c.await;
            }
        }
    };
    let peak = peak_while_led(&p, met, attack).await;
    println!(
        "pipelined: {} connections sent away; RSS {} MiB before, {} MiB at the peak",
        sent_away.load(Ordering::Relaxed),
        base >> 20,
        peak >> 20
    );
    assert!(
        peak < base + (256 << 20),
        "RSS grew from {base} to {peak} bytes"
    );
    assert!(
        counter(&p, "leasehold_flood_steps_total{step=\"goaway\"}").await >= 8.0,
        "the server counts the connections it sent away"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_pipelined_past_the_stream_limit_are_sent_away_and_cost_a_leader_nothing() {
    pipelined_flood(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_requests_pipelined_past_the_stream_limit_are_sent_away_and_cost_a_leader_nothing()
{
    pipelined_flood(Place::etcd()).await;
}

/// A PING flood on one connection, with a call now and then: it is
/// slowed, then its calls are refused (OVERLOADED, naming
/// `--max-frame-rate-per-connection`), then it is sent away with GOAWAY
/// ENHANCE_YOUR_CALM; every step is counted on `/metrics`; the leader
/// keeps its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_is_slowed_then_refused_then_sent_away() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(dir.path(), &["--max-frame-rate-per-connection", "200"]);
    let done = Arc::new(AtomicBool::new(false));
    let met = {
        let d = done.clone();
        move || d.load(Ordering::Relaxed)
    };
    let addr = p.addr;
    let attack = {
        let done = done.clone();
        async move {
            let s = TcpStream::connect(addr).await.unwrap();
            let (r, mut w) = s.into_split();
            let goaway = tokio::spawn(goaway_of(r));
            let mut hello = PREFACE.to_vec();
            frame(&mut hello, SETTINGS, 0, 0, &[]);
            w.write_all(&hello).await.unwrap();
            let msg = proto::GetLeaseRequest {
                job: "flood".into(),
            }
            .encode_to_vec();
            let mut stream = 1u32;
            loop {
                let mut batch = Vec::new();
                for i in 0..200u64 {
                    frame(&mut batch, PING, 0, 0, &i.to_be_bytes());
                }
                call(&mut batch, stream, "/leasehold.v1.Leases/GetLease", &msg);
                stream += 2;
                if w.write_all(&batch).await.is_err() || goaway.is_finished() {
                    break;
                }
            }
            drop(w);
            assert_eq!(goaway.await.unwrap(), Some(ENHANCE_YOUR_CALM));
            done.store(true, Ordering::Relaxed);
        }
    };
    leader_holds_through(&p, met, attack).await;
    for step in ["slowed", "refused", "goaway"] {
        let n = counter(
            &p,
            &format!("leasehold_flood_steps_total{{step=\"{step}\"}}"),
        )
        .await;
        assert!(n >= 1.0, "step {step} counted {n} times");
    }
    let refused = counter(
        &p,
        "leasehold_overloaded_total{limit=\"--max-frame-rate-per-connection\"}",
    )
    .await;
    assert!(refused >= 1.0, "no call refused on the flooding connection");
}

/// Connections whose window is 0 (the server may send no byte of any
/// answer), each with 1,000 `Read`s of a 64 KiB value open: the server
/// holds at most `--max-queued-response-bytes` of answers (the rest are
/// refused, OVERLOADED), closes the connections that hold answers once
/// stalled for `--response-stall-timeout`, which gives their memory back,
/// and then answers another reader; the leader keeps its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_of_large_values_hold_at_most_the_cap_and_are_closed_when_stalled() {
    let dir = tempfile::tempdir().unwrap();
    let cap: u64 = 32 << 20;
    let p = ServerProcess::start(
        dir.path(),
        &[
            "--max-queued-response-bytes",
            &cap.to_string(),
            "--response-stall-timeout",
            "3s",
        ],
    );
    let writer = leasehold::client::Client::connect(&p.url()).await.unwrap();
    let got = writer
        .acquire("large", "writer", Duration::from_secs(600), Duration::ZERO)
        .await
        .unwrap();
    writer
        .checked_write("large", got.lease.token, b"v", vec![0x5a; 64 * 1024])
        .await
        .unwrap();
    let base = rss(&p);
    let closed = Arc::new(AtomicU64::new(0));
    let met = {
        let c = closed.clone();
        // A connection whose reads were all refused holds nothing and
        // stays open; those that hold answers are closed once stalled.
        move || c.load(Ordering::Relaxed) >= 1
    };
    let addr = p.addr;
    let attack = {
        let closed = closed.clone();
        async move {
            let msg = proto::ReadRequest {
                job: "large".into(),
                key: b"v".to_vec(),
            }
            .encode_to_vec();
            let mut conns = Vec::new();
            for _ in 0..16 {
                let (closed, msg) = (closed.clone(), msg.clone());
                conns.push(tokio::spawn(async move {
                    let mut s = TcpStream::connect(addr).await.unwrap();
                    let mut hello = PREFACE.to_vec();
                    let mut settings = Vec::new();
                    settings.extend_from_slice(&INITIAL_WINDOW_SIZE.to_be_bytes());
                    settings.extend_from_slice(&0u32.to_be_bytes());
                    frame(&mut hello, SETTINGS, 0, 0, &settings);
                    for i in 0..1000u32 {
                        call(
                            &mut hello,
                            1 + 2 * i,
                            "/leasehold.v1.FencedStore/Read",
                            &msg,
                        );
                    }
                    s.write_all(&hello).await.unwrap();
                    let (r, _w) = s.into_split();
                    goaway_of(r).await;
                    closed.fetch_add(1, Ordering::Relaxed);
                }));
            }
            for c in conns {
                let _ = c.await;
            }
        }
    };
    let peak = peak_while_led(&p, met, attack).await;
    println!(
        "slow readers: {} stalled connections closed; RSS {} MiB before, {} MiB at the peak \
         (cap {} MiB)",
        closed.load(Ordering::Relaxed),
        base >> 20,
        peak >> 20,
        cap >> 20
    );
    // 16,000 answers of 64 KiB would be a gigabyte; the cap, and what
    // the server holds per call besides (16,000 streams' state), is far
    // below.
    assert!(
        peak < base + 4 * cap,
        "RSS grew from {base} to {peak} bytes with a cap of {cap}"
    );
    let refused = counter(
        &p,
        "leasehold_overloaded_total{limit=\"--max-queued-response-bytes\"}",
    )
    .await;
    assert!(refused >= 1.0, "no answer refused at the cap");
    // Their memory comes back as the stalled connections are closed:
    // another reader is answered.
    let writer = &writer;
    let v = common::eventually(
        "a read answered once the stalled readers are closed",
        || async move { writer.read("large", b"v").await.ok() },
    )
    .await;
    assert_eq!(v.value.len(), 64 * 1024);
}

/// A listing page costs what it returns: on a job of 80 values of 60 KiB
/// (4.8 MB) and deleted keys, a ListKeys of page size 1,000 reads at most
/// its 4 MiB budget, so the first page stops early with a token, and the
/// pages, token to token, list every live key once, in order, with each
/// value's size and none of the deleted ones.
async fn pages_bounded_in_bytes(place: Place) {
    let p = place.start(&[]);
    let c = leasehold::client::Client::connect(&p.url()).await.unwrap();
    let g = c
        .acquire("big", "w", Duration::from_secs(600), Duration::ZERO)
        .await
        .unwrap();
    let t = g.lease.token;
    let size = 60 << 10;
    for i in 0..80 {
        let k = format!("v/{i:03}");
        c.checked_write("big", t, k.as_bytes(), vec![i as u8; size])
            .await
            .unwrap();
        let gone = format!("v/{i:03}-gone");
        c.checked_write("big", t, gone.as_bytes(), vec![1; size])
            .await
            .unwrap();
        c.delete("big", t, gone.as_bytes()).await.unwrap();
    }
    let mut store =
        proto::fenced_store_client::FencedStoreClient::new(common::channel(&p.url()).await);
    let (mut keys, mut pages, mut token) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let r = store
            .list_keys(proto::ListKeysRequest {
                job: "big".into(),
                prefix: b"v/".to_vec(),
                page_size: 1000,
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        pages.push(r.keys.len());
        for k in r.keys {
            assert_eq!(k.size as usize, size, "{k:?}");
            keys.push(String::from_utf8(k.key).unwrap());
        }
        if r.next_page_token.is_empty() {
            break;
        }
        token = r.next_page_token;
        assert!(pages.len() < 100, "the pages never end: {pages:?}");
    }
    let want: Vec<String> = (0..80).map(|i| format!("v/{i:03}")).collect();
    assert_eq!(keys, want, "pages {pages:?}");
    // The record that crosses the line is the page's last.
    let budget = leasehold::store::LIST_PAGE_BYTES / size + 1;
    assert!(
        pages[0] <= budget,
        "the first page read past 4 MiB: {pages:?}"
    );
    assert!(pages.len() >= 2, "{pages:?}");
    // The client library follows the tokens the same way.
    assert_eq!(c.list_keys("big", b"v/").await.unwrap().len(), 80);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_page_reads_at_most_its_budget() {
    pages_bounded_in_bytes(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_a_listing_page_reads_at_most_its_budget() {
    pages_bounded_in_bytes(Place::etcd()).await;
}

/// Listings on one connection are paced to
/// `--max-listing-rate-per-connection` (here 8 KiB/s, a second's worth at
/// once): an answer of about 24 KiB waits for the rate and is still sent
/// whole, the wait is counted, and a small listing on another connection,
/// within its own rate, does not wait.
async fn listings_paced_per_connection(place: Place) {
    let p = place.start(&["--max-listing-rate-per-connection", "8192"]);
    let c = leasehold::client::Client::connect(&p.url()).await.unwrap();
    let g = c
        .acquire("many", "w", Duration::from_secs(600), Duration::ZERO)
        .await
        .unwrap();
    for i in 0..400 {
        let k = format!("key/{i:05}/{}", "x".repeat(40));
        c.checked_write("many", g.lease.token, k.as_bytes(), vec![1])
            .await
            .unwrap();
    }
    // A line of candidates, each with a long name: a ListWaiters answer
    // of about 4 KiB.
    let waiters = leasehold::client::Client::connect(&p.url()).await.unwrap();
    let mut line = Vec::new();
    for i in 0..16 {
        let (w, holder) = (waiters.clone(), format!("{i:02}{}", "w".repeat(240)));
        line.push(tokio::spawn(async move {
            w.acquire(
                "many",
                &holder,
                Duration::from_secs(600),
                Duration::from_secs(600),
            )
            .await
        }));
    }
    p.wait_for_waiters(16).await;
    assert_eq!(counter(&p, "leasehold_listings_paced_total").await, 0.0);
    assert_eq!(c.list_keys("many", b"key/").await.unwrap().len(), 400);
    let paced = counter(&p, "leasehold_listings_paced_total").await;
    assert!(paced >= 1.0, "no listing was paced");
    // ListWaiters is a listing too: with the connection's rate spent, its
    // answer waits, and is sent whole.
    assert_eq!(c.list_waiters("many", 0).await.unwrap().waiters.len(), 16);
    let paced = counter(&p, "leasehold_listings_paced_total").await;
    assert!(paced >= 2.0, "the line was not paced");
    for w in line {
        w.abort();
    }
    assert!(counter(&p, "leasehold_listing_pacing_seconds_total").await > 0.5);
    let other = leasehold::client::Client::connect(&p.url()).await.unwrap();
    assert_eq!(
        other.list_keys("many", b"key/0000").await.unwrap().len(),
        10
    );
    assert_eq!(counter(&p, "leasehold_listings_paced_total").await, paced);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_are_paced_per_connection() {
    listings_paced_per_connection(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_listings_are_paced_per_connection() {
    listings_paced_per_connection(Place::etcd()).await;
}
