//! Issue 41, "Isolation, second pass", the status page's part: its job
//! list comes in pages bounded in jobs and bytes, each job exactly once
//! across them (both backends); a loop of page requests is slowed, then
//! refused with 429, each step on `/metrics`, while a leader keeps its
//! lease; an event subscriber past the cap, and a connection past the
//! admin port's caps, is answered 503, and `/healthz` still answers.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Place, ServerProcess};
use leasehold::client::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Jobs made for the paging test: long names, so that a page of the
/// default 1,000 jobs would be past the byte bound.
const JOBS: usize = 1_500;

fn long_name(i: usize) -> String {
    format!("paged/{i:05}/{}", "x".repeat(180))
}

/// The `next` cursor of a page, `None` for `null` (the names here need
/// no JSON escapes).
fn next_of(body: &str) -> Option<String> {
    let (_, tail) = body.rsplit_once("\"next\":").expect("a next cursor");
    let tail = tail.strip_suffix('}').expect("the cursor ends the page");
    match tail {
        "null" => None,
        s => Some(s.trim_matches('"').to_owned()),
    }
}

/// The job names of a page, in order.
fn names_of(body: &str) -> Vec<String> {
    body.split("{\"job\":\"")
        .skip(1)
        .map(|r| r.split_once('"').unwrap().0.to_owned())
        .collect()
}

fn encode(s: &str) -> String {
    s.replace('%', "%25").replace('/', "%2F")
}

async fn make_jobs(p: &ServerProcess, n: usize, name: impl Fn(usize) -> String) {
    let c = Client::connect(&p.url()).await.unwrap();
    for i in 0..n {
        c.acquire(&name(i), "maker", Duration::from_secs(600), Duration::ZERO)
            .await
            .unwrap();
    }
}

/// Walks the job list under `prefix`, `limit` per page (default when
/// `None`): every name, the pages' count and the largest page's bytes.
async fn walk(
    admin: SocketAddr,
    prefix: &str,
    limit: Option<usize>,
) -> (Vec<String>, usize, usize) {
    let mut names = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    let mut largest = 0;
    loop {
        let mut path = format!("/api/jobs?prefix={}", encode(prefix));
        if let Some(a) = &after {
            path += &format!("&after={}", encode(a));
        }
        if let Some(l) = limit {
            path += &format!("&limit={l}");
        }
        let (code, body) = common::admin_request(admin, &path).await;
        assert_eq!(code, 200, "{path}: {body}");
        pages += 1;
        largest = largest.max(body.len());
        names.extend(names_of(&body));
        after = next_of(&body);
        if after.is_none() {
            return (names, pages, largest);
        }
        assert!(pages < 10_000, "the cursor does not advance");
    }
}

async fn pages_list_every_job_once(place: Place) {
    // A budget large enough that the walks below are never refused.
    let p = place.start(&[
        "--max-acquire-rate-per-connection",
        "1000000",
        "--admin-read-burst",
        "1000000000",
    ]);
    make_jobs(&p, JOBS, long_name).await;
    // Jobs around the prefix that must not be listed.
    make_jobs(&p, 3, |i| format!("pagea{i}")).await;
    make_jobs(&p, 3, |i| format!("pag{i}")).await;
    let want: Vec<String> = (0..JOBS).map(long_name).collect();
    // The default page: bounded by bytes (256 KiB and the row that
    // crosses it) before it reaches 1,000 jobs.
    let (names, pages, largest) = walk(p.admin, "paged/", None).await;
    assert_eq!(names, want, "every job once, in order");
    assert!(pages >= 2, "{pages} pages");
    assert!(largest <= 256 * 1024 + 1024, "a page of {largest} bytes");
    // Small pages: every job once, and as many pages as they need.
    let (names, pages, _) = walk(p.admin, "paged/", Some(100)).await;
    assert_eq!(names, want);
    assert!(pages >= JOBS / 100, "{pages} pages");
    let unique: BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), JOBS);
    // Bad input names its field and the limit.
    for (path, field) in [
        ("/api/jobs?limit=0", "limit"),
        ("/api/jobs?limit=1001", "1000"),
        ("/api/jobs?limit=x", "limit"),
    ] {
        let (code, body) = common::admin_request(p.admin, path).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.contains(field), "{path}: {body}");
    }
    let long = "y".repeat(300);
    let (code, body) = common::admin_request(p.admin, &format!("/api/jobs?after={long}")).await;
    assert_eq!(code, 400, "{body}");
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_list_every_job_once_on_the_node() {
    pages_list_every_job_once(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_list_every_job_once_on_etcd() {
    pages_list_every_job_once(Place::etcd()).await;
}

/// A GET of `path` over HTTP/1.1 on its own connection: the status code
/// and the whole answer's text (headers and body).
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, text))
}

/// A metric's value on the server's `/metrics`.
async fn metric(p: &ServerProcess, name: &str) -> f64 {
    let (_, m) = common::admin_request(p.admin, "/metrics").await;
    common::metric(&m, name).unwrap_or(0.0)
}

/// 8 loops of `/api/jobs` (3,000 jobs, about 450 KB a walk) against a
/// budget of 256 KiB a second with a 1 MiB burst: the loops are slowed,
/// then refused with 429 naming the flag, both counted on `/metrics`;
/// meanwhile a leader renews every 500 ms and keeps its lease, its token
/// unchanged and every renewal accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_page_flood_is_slowed_then_refused_and_the_leader_keeps_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(
        dir.path(),
        &[
            "--max-acquire-rate-per-connection",
            "1000000",
            "--admin-read-rate",
            "262144",
            "--admin-read-burst",
            "1048576",
        ],
    );
    make_jobs(&p, 3_000, |i| format!("flood/{i:05}")).await;
    let leader = Client::connect(&p.url()).await.unwrap();
    let lease = Duration::from_secs(60);
    let a = leader
        .acquire("led", "leader", lease, Duration::ZERO)
        .await
        .unwrap();
    assert!(a.acquired);
    let token = a.lease.token;
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let refusal_text = Arc::new(std::sync::Mutex::new(String::new()));
    let mut loops = Vec::new();
    for _ in 0..8 {
        let (stop, refused, text, admin) =
            (stop.clone(), refused.clone(), refusal_text.clone(), p.admin);
        loops.push(tokio::spawn(async move {
            let mut after: Option<String> = None;
            while !stop.load(Ordering::Relaxed) {
                let path = match &after {
                    Some(a) => format!("/api/jobs?after={}", encode(a)),
                    None => "/api/jobs".to_owned(),
                };
                match get(admin, &path).await {
                    Ok((200, body)) => {
                        let body = body.split_once("\r\n\r\n").unwrap().1;
                        after = next_of(body);
                    }
                    Ok((429, t)) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        *text.lock().unwrap() = t;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok((code, t)) => panic!("{code}: {t}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }));
    }
    let t = Instant::now();
    let mut renewed = 0u32;
    let mut failed = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        match leader.renew("led", "leader", token, lease).await {
            Ok(l) if l.token == token => renewed += 1,
            Ok(l) => failed.push(format!("token changed: {l:?}")),
            Err(e) => failed.push(e.to_string()),
        }
        let met = refused.load(Ordering::Relaxed) > 0
            && metric(&p, "leasehold_admin_reads_refused_total").await > 0.0
            && metric(&p, "leasehold_admin_reads_slowed_total").await > 0.0;
        if met && t.elapsed() > Duration::from_secs(5) {
            break;
        }
        assert!(
            t.elapsed() < common::PATIENCE,
            "the flood was not both slowed and refused in {:?}",
            common::PATIENCE
        );
    }
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await.unwrap();
    }
    let text = refusal_text.lock().unwrap().clone();
    assert!(text.contains("--admin-read-rate"), "{text}");
    assert!(text.to_ascii_lowercase().contains("retry-after:"), "{text}");
    assert!(metric(&p, "leasehold_admin_reads_slowed_seconds_total").await > 0.0);
    assert!(failed.is_empty(), "renewals failed: {failed:?}");
    assert!(renewed > 0);
    let l = leader.get_lease("led").await.unwrap();
    assert_eq!(l.holder.as_deref(), Some("leader"), "{l:?}");
    assert_eq!(l.token, token);
    p.stop();
}

/// Opens an event stream on a connection of its own: the status code, and
/// the connection (held open while the stream is).
async fn subscribe(admin: SocketAddr, from: &str) -> (u16, String, tokio::net::TcpStream) {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut s = sock.connect(admin).await.unwrap();
    s.write_all(b"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(common::PATIENCE, s.read(&mut b)).await {
            Ok(Ok(1)) => head.push(b[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // A refusal's body follows its head.
    let mut body = String::new();
    if code != 200 {
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut body)).await;
    }
    (code, text + &body, s)
}

/// Past `--max-event-streams` (and past the cap per client), a subscriber
/// is answered 503 naming the limit, not closed without a word; a
/// connection past the admin port's caps is answered 503 too; `/healthz`
/// answers throughout, and a place freed is taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_subscribers_past_the_cap_are_answered_503() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(dir.path(), &["--max-event-streams", "6"]);
    let mut held = Vec::new();
    // The cap per client: 4 from 127.0.0.2, then 503.
    for _ in 0..4 {
        let (code, text, s) = subscribe(p.admin, "127.0.0.2").await;
        assert_eq!(code, 200, "{text}");
        held.push(s);
    }
    let (code, text, _) = subscribe(p.admin, "127.0.0.2").await;
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("per client"), "{text}");
    // The cap of all: 2 more from 127.0.0.3, then 503 for anyone.
    for _ in 0..2 {
        let (code, text, s) = subscribe(p.admin, "127.0.0.3").await;
        assert_eq!(code, 200, "{text}");
        held.push(s);
    }
    let (code, text, _) = subscribe(p.admin, "127.0.0.4").await;
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("--max-event-streams"), "{text}");
    assert!(
        text.contains("Retry-After") || text.contains("retry-after"),
        "{text}"
    );
    let (code, body) = common::admin_request(p.admin, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    assert_eq!(metric(&p, "leasehold_admin_event_streams").await, 6.0);
    assert_eq!(
        metric(&p, "leasehold_admin_event_streams_refused_total").await,
        2.0
    );
    // A stream closed gives its place back.
    drop(held.pop());
    common::eventually("a place given back", || async {
        let (code, _, s) = subscribe(p.admin, "127.0.0.4").await;
        (code == 200).then_some(s)
    })
    .await;
    drop(held);
    p.stop();
}

/// 1,000 subscribers from many addresses at once: each is answered (200
/// with a stream, or 503), none is closed without an answer, and
/// `/healthz` answers while they try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_subscribers_are_all_answered_and_healthz_answers() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(dir.path(), &["--handshake-timeout", "30s"]);
    let admin = p.admin;
    let tries: Vec<_> = (0..1_000)
        .map(|i| {
            let from = format!("127.0.{}.{}", 1 + i / 200, 1 + i % 200);
            tokio::spawn(async move {
                let (code, text, s) = subscribe(admin, &from).await;
                (code, text, s)
            })
        })
        .collect();
    let health = tokio::spawn(async move {
        let mut answered = 0;
        for _ in 0..20 {
            let (code, _) = common::admin_request(admin, "/healthz").await;
            assert_eq!(code, 200);
            answered += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        answered
    });
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    let mut held = Vec::new();
    for t in tries {
        let (code, text, s) = t.await.unwrap();
        assert!(code == 200 || code == 503, "no answer: {code} {text:?}");
        *codes.entry(code).or_default() += 1;
        held.push(s);
    }
    assert_eq!(health.await.unwrap(), 20);
    assert_eq!(
        codes.get(&200).copied().unwrap_or(0),
        leasehold::read_budget::DEFAULT_MAX_EVENT_STREAMS,
        "{codes:?}"
    );
    let (code, body) = common::admin_request(admin, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    drop(held);
    p.stop();
}

/// A connection past the admin port's cap per address is answered 503
/// before it is closed (not closed without a word), and another address
/// is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_admin_ports_cap_is_answered_503() {
    let dir = tempfile::tempdir().unwrap();
    let p = ServerProcess::start(dir.path(), &["--handshake-timeout", "1m"]);
    // The admin port's cap per address is 16: 16 silent connections.
    let mut held = Vec::new();
    for _ in 0..16 {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.5:0".parse().unwrap()).unwrap();
        held.push(sock.connect(p.admin).await.unwrap());
    }
    // Past it: answered, then closed.
    let (code, text, _) = subscribe(p.admin, "127.0.0.5").await;
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("too many connections"), "{text}");
    let (code, body) = common::admin_request(p.admin, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    drop(held);
    p.stop();
}
