//! The floods of issue 41 for `leasehold-bench isolation`: attacks below
//! gRPC, written as raw HTTP/2 frames on plain TCP, so that they do what a
//! well-behaved client library never would (pipeline past the stream
//! limit, flood SETTINGS or PING, hold a window at zero), and the
//! listing loops.
//!
//! - `pipelined`: small `GetLease` requests pipelined on 8 connections
//!   without waiting for any answer, far past the server's stream limit;
//!   a connection the server closes is opened again at once;
//! - `unread`: the same on 4 connections that never read a byte;
//! - `settings`: SETTINGS frames as fast as 8 connections take them;
//! - `ping`: PING frames the same way;
//! - `slow-readers`: 16 connections with a stream window of zero, each
//!   with 1,000 `Read`s of a 64 KiB value open;
//! - `listings`: 64 loops of `ListKeys` (pages of 1,000) and `GetHistory`
//!   over 8 connections, on a job with 10,000 keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::proto as lh;
use leasehold::proto::fenced_store_client::FencedStoreClient;
use leasehold::proto::leases_client::LeasesClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{attacker_lease, connection, Tally};
use crate::sys::Res;

/// The attacks this module runs, in the order `--only` lists them.
pub const NAMES: [&str; 6] = [
    "pipelined",
    "unread",
    "settings",
    "ping",
    "slow-readers",
    "listings",
];

/// What each attack does, for the report.
pub fn describe(name: &str, scale: f64) -> String {
    let n = |x: usize| ((x as f64 * scale).round() as usize).max(1);
    match name {
        "pipelined" => format!(
            "`GetLease` pipelined past the stream limit on {} connections, never waiting",
            n(8)
        ),
        "unread" => format!(
            "`GetLease` pipelined on {} connections that never read",
            n(4)
        ),
        "settings" => format!("SETTINGS frames as fast as {} connections go", n(8)),
        "ping" => format!("PING frames as fast as {} connections go", n(8)),
        "slow-readers" => format!(
            "{} connections with a window of 0, each with 1,000 `Read`s of 64 KiB open",
            n(16)
        ),
        _ => format!(
            "{} loops of `ListKeys` (1,000 a page) and `GetHistory` on a job of {} keys",
            n(64),
            n(10_000)
        ),
    }
}

/// Starts attack `name` against the server at `url` (`http://host:port`).
pub fn start(
    name: &str,
    url: &str,
    scale: f64,
    stop: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
) -> Option<tokio::task::JoinHandle<Res<Tally>>> {
    let n = |x: usize| ((x as f64 * scale).round() as usize).max(1);
    let url = url.to_owned();
    let addr = url.trim_start_matches("http://").to_owned();
    Some(match name {
        "pipelined" => {
            let conns = n(8);
            tokio::spawn(async move { pipelined(&addr, conns, true, stop, ready).await })
        }
        "unread" => {
            let conns = n(4);
            tokio::spawn(async move { pipelined(&addr, conns, false, stop, ready).await })
        }
        "settings" => {
            let conns = n(8);
            tokio::spawn(async move { frames(&addr, conns, Kind::Settings, stop, ready).await })
        }
        "ping" => {
            let conns = n(8);
            tokio::spawn(async move { frames(&addr, conns, Kind::Ping, stop, ready).await })
        }
        "slow-readers" => {
            let conns = n(16);
            tokio::spawn(async move { slow_readers(&url, &addr, conns, stop, ready).await })
        }
        "listings" => {
            let (loops, keys) = (n(64), n(10_000));
            tokio::spawn(async move { listings(&url, loops, keys, stop, ready).await })
        }
        _ => return None,
    })
}

// ---- HTTP/2 by hand ----

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const INITIAL_WINDOW_SIZE: u16 = 4;

fn frame(out: &mut Vec<u8>, ty: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(ty);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

fn settings_frame(out: &mut Vec<u8>, pairs: &[(u16, u32)]) {
    let mut p = Vec::new();
    for (id, v) in pairs {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(out, SETTINGS, 0, 0, &p);
}

/// An HPACK string, not Huffman-coded (every string here is under 127
/// bytes).
fn hstr(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// A gRPC request's header block, with no entry put into the dynamic
/// table, so that the same bytes open every stream.
fn request_headers(path: &str) -> Vec<u8> {
    let mut h = vec![0x83, 0x86]; // :method POST, :scheme http
    h.push(0x04); // :path, literal without indexing
    hstr(&mut h, path);
    h.push(0x01); // :authority
    hstr(&mut h, "bench");
    h.extend_from_slice(&[0x0f, 0x10]); // content-type (static 31)
    hstr(&mut h, "application/grpc");
    h.push(0x00); // te, a new name
    hstr(&mut h, "te");
    hstr(&mut h, "trailers");
    h
}

fn grpc_body(m: &impl prost::Message) -> Vec<u8> {
    let b = m.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(&b);
    out
}

/// Opens a connection and sends the preface and `settings`.
async fn open(addr: &str, settings: &[(u16, u32)]) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut hello = PREFACE.to_vec();
    settings_frame(&mut hello, settings);
    s.write_all(&hello).await?;
    Ok(s)
}

/// Reads and drops everything until the peer closes; returns the bytes
/// read.
async fn drain(mut r: tokio::net::tcp::OwnedReadHalf) -> u64 {
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    while let Ok(k) = r.read(&mut buf).await {
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    n
}

/// Reports progress every 2 s until `stop`; then waits for the tasks.
async fn report(
    what: &str,
    tally: &Tally,
    mut stop: watch::Receiver<bool>,
    tasks: &mut JoinSet<()>,
) {
    let t = Instant::now();
    let mut next = 2.0;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        if t.elapsed().as_secs_f64() >= next {
            next += 2.0;
            eprintln!("  {what}: {}", tally.summary());
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

/// Connections that pipeline `GetLease` requests without waiting; with
/// `read`, their answers are read (and dropped), else never.
async fn pipelined(
    addr: &str,
    conns: usize,
    read: bool,
    stop: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
) -> Res<Tally> {
    let tally = Tally::default();
    let sent = Arc::new(AtomicU64::new(0));
    let headers = request_headers("/leasehold.v1.Leases/GetLease");
    let body = grpc_body(&lh::GetLeaseRequest {
        job: "attack/pipelined".into(),
    });
    let mut tasks = JoinSet::new();
    for _ in 0..conns {
        let (addr, tally, sent) = (addr.to_owned(), tally.clone(), sent.clone());
        let (headers, body) = (headers.clone(), body.clone());
        tasks.spawn(async move {
            loop {
                let Ok(s) = open(&addr, &[]).await else {
                    tally.add("connect refused");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                tally.add("connections");
                let (r, mut w) = s.into_split();
                let reader = read.then(|| tokio::spawn(drain(r)));
                let mut id = 1u32;
                let mut batch = Vec::with_capacity(64 * 1024);
                'conn: loop {
                    batch.clear();
                    for _ in 0..256 {
                        frame(&mut batch, HEADERS, END_HEADERS, id, &headers);
                        frame(&mut batch, DATA, END_STREAM, id, &body);
                        id += 2;
                        if id > (1 << 31) - 600 {
                            break 'conn;
                        }
                    }
                    if w.write_all(&batch).await.is_err() {
                        break;
                    }
                    sent.fetch_add(256, Ordering::Relaxed);
                }
                tally.add("connections closed by the server");
                if let Some(r) = reader {
                    r.abort();
                }
            }
        });
    }
    let _ = ready.send(true);
    report("pipelined", &tally, stop, &mut tasks).await;
    tally.add_n("streams sent", sent.load(Ordering::Relaxed));
    Ok(tally)
}

#[derive(Clone, Copy)]
enum Kind {
    Settings,
    Ping,
}

/// Connections that send SETTINGS or PING frames as fast as they go, and
/// read (and drop) the answers.
async fn frames(
    addr: &str,
    conns: usize,
    kind: Kind,
    stop: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
) -> Res<Tally> {
    let tally = Tally::default();
    let sent = Arc::new(AtomicU64::new(0));
    let mut batch = Vec::new();
    for i in 0..512u64 {
        match kind {
            Kind::Settings => settings_frame(&mut batch, &[(INITIAL_WINDOW_SIZE, 65_535)]),
            Kind::Ping => frame(&mut batch, PING, 0, 0, &i.to_be_bytes()),
        }
    }
    let batch = Arc::new(batch);
    let mut tasks = JoinSet::new();
    for _ in 0..conns {
        let (addr, tally, sent, batch) =
            (addr.to_owned(), tally.clone(), sent.clone(), batch.clone());
        tasks.spawn(async move {
            loop {
                let Ok(s) = open(&addr, &[]).await else {
                    tally.add("connect refused");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                tally.add("connections");
                let (r, mut w) = s.into_split();
                let reader = tokio::spawn(drain(r));
                while w.write_all(&batch).await.is_ok() {
                    sent.fetch_add(512, Ordering::Relaxed);
                }
                tally.add("connections closed by the server");
                reader.abort();
            }
        });
    }
    let _ = ready.send(true);
    let what = match kind {
        Kind::Settings => "settings",
        Kind::Ping => "ping",
    };
    report(what, &tally, stop, &mut tasks).await;
    tally.add_n("frames sent", sent.load(Ordering::Relaxed));
    Ok(tally)
}

/// Takes a lease on `job` for a day and writes `value` under each of
/// `keys`, 64 writes in flight.
async fn fill(url: &str, job: &str, keys: usize, value: Vec<u8>) -> Res<()> {
    let ch = connection(url).await?;
    let token = attacker_lease(&ch, job).await?;
    let next = Arc::new(AtomicU64::new(0));
    let value = Arc::new(value);
    let mut tasks = JoinSet::new();
    for _ in 0..64 {
        let mut c = FencedStoreClient::new(ch.clone())
            .max_decoding_message_size(1 << 20)
            .max_encoding_message_size(1 << 20);
        let (next, value, job) = (next.clone(), value.clone(), job.to_owned());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= keys {
                    return Ok::<_, tonic::Status>(());
                }
                c.checked_write(lh::CheckedWriteRequest {
                    proof: Default::default(),
                    job: job.clone(),
                    token,
                    key: format!("key-{i:08}").into_bytes(),
                    value: value.as_ref().clone(),
                    delete: false,
                })
                .await?;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

/// Connections whose stream window is 0 (the server can send no byte of
/// any answer), each with 1,000 `Read`s of a 64 KiB value open.
async fn slow_readers(
    url: &str,
    addr: &str,
    conns: usize,
    stop: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
) -> Res<Tally> {
    let job = "attack/large";
    fill(url, job, 1, vec![0x5a; 64 * 1024]).await?;
    let tally = Tally::default();
    let headers = request_headers("/leasehold.v1.FencedStore/Read");
    let body = grpc_body(&lh::ReadRequest {
        job: job.into(),
        key: b"key-00000000".to_vec(),
    });
    let mut tasks = JoinSet::new();
    for _ in 0..conns {
        let (addr, tally) = (addr.to_owned(), tally.clone());
        let (headers, body) = (headers.clone(), body.clone());
        tasks.spawn(async move {
            loop {
                let Ok(s) = open(&addr, &[(INITIAL_WINDOW_SIZE, 0)]).await else {
                    tally.add("connect refused");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                tally.add("connections");
                let (r, mut w) = s.into_split();
                let reader = tokio::spawn(drain(r));
                let mut batch = Vec::new();
                let mut id = 1u32;
                for _ in 0..1000 {
                    frame(&mut batch, HEADERS, END_HEADERS, id, &headers);
                    frame(&mut batch, DATA, END_STREAM, id, &body);
                    id += 2;
                }
                if w.write_all(&batch).await.is_ok() {
                    tally.add_n("reads open", 1000);
                    // Hold them: the connection stays open, its window
                    // shut, until the server closes it.
                    let _ = reader.await;
                } else {
                    reader.abort();
                }
                tally.add("connections closed by the server");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let _ = ready.send(true);
    report("slow-readers", &tally, stop, &mut tasks).await;
    Ok(tally)
}

/// Loops of `ListKeys` (pages of 1,000, every page of the job) and
/// `GetHistory`, `loops` of them over 8 connections.
async fn listings(
    url: &str,
    loops: usize,
    keys: usize,
    stop: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
) -> Res<Tally> {
    let job = "attack/listed";
    fill(url, job, keys, vec![0x5a; 64]).await?;
    let tally = Tally::default();
    let mut chans = Vec::new();
    for _ in 0..8 {
        chans.push(connection(url).await?);
    }
    let mut tasks = JoinSet::new();
    for i in 0..loops {
        let ch = chans[i % chans.len()].clone();
        let tally = tally.clone();
        tasks.spawn(async move {
            let mut f = FencedStoreClient::new(ch.clone()).max_decoding_message_size(64 << 20);
            let mut l = LeasesClient::new(ch);
            let mut token = Vec::new();
            loop {
                let r = f
                    .list_keys(lh::ListKeysRequest {
                        job: job.into(),
                        prefix: Vec::new(),
                        page_size: 1000,
                        page_token: std::mem::take(&mut token),
                    })
                    .await;
                match r {
                    Ok(r) => {
                        tally.add("ListKeys ok");
                        token = r.into_inner().next_page_token;
                    }
                    Err(s) => {
                        tally.status(&s);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                let r = l
                    .get_history(lh::GetHistoryRequest {
                        job: job.into(),
                        page_size: 1000,
                        page_token: String::new(),
                    })
                    .await;
                match r {
                    Ok(_) => tally.add("GetHistory ok"),
                    Err(s) => {
                        tally.status(&s);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        });
    }
    let _ = ready.send(true);
    report("listings", &tally, stop, &mut tasks).await;
    Ok(tally)
}
