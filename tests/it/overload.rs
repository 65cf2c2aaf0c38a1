//! Overload and hostile clients: deadlines, the caps on calls in flight and
//! on connections, and watchers that stop reading.

use crate::common;

use std::time::{Duration, Instant};

use common::TestServer;
use leasehold::client::{Client, ClientError};
use leasehold::proto;
use leasehold::server::Config;
use tonic::Code;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_deadline_ends_a_waiting_acquire_and_frees_its_place() {
    let s = TestServer::start().await;
    let c = s.client().await;
    assert!(
        c.acquire("j", "a", TTL, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    let mut raw = proto::leases_client::LeasesClient::connect(s.url())
        .await
        .unwrap();
    let mut req = tonic::Request::new(proto::AcquireRequest {
        job: "j".into(),
        holder: "b".into(),
        ttl: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        wait: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
        bind_to_stream: false,
        preferred: false,
        value: Default::default(),
        slots: 0,
    });
    req.set_timeout(Duration::from_millis(300));
    let t = Instant::now();
    let err = raw.acquire(req).await.unwrap_err();
    let took = t.elapsed();
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{err:?}"
    );
    // Far below the 60 s wait the call asked for.
    assert!(
        took < common::PATIENCE,
        "the 300 ms deadline was not honoured: {took:?}"
    );
    // The server dropped the call, so the waiter left the queue.
    s.wait_for_waiters(0).await;
}

/// Calls over --max-in-flight are refused at once with OVERLOADED naming
/// the limit, and served again once the burst is over. Waiting Acquires
/// are not among them once they are in line (they count under
/// --max-waiters): two of them waiting leave the cap of two to other calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_the_in_flight_cap_are_refused_at_once_and_then_served_again() {
    let config = Config {
        max_in_flight: 2,
        ..Config::default()
    };
    let s = TestServer::with_config(tempfile::tempdir().unwrap(), config).await;
    let c = s.client().await;
    assert!(
        c.acquire("j", "a", TTL, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    let mut waiters = Vec::new();
    // c gives up while a still holds the lease: its wait is short, but
    // longer than a stall, as it must still wait in line when the cap is
    // tried.
    for (h, wait) in [("b", 60), ("c", 8)] {
        let c = c.clone();
        waiters.push(tokio::spawn(async move {
            c.acquire("j", h, TTL, Duration::from_secs(wait)).await
        }));
    }
    s.wait_for_waiters(2).await;
    let mut raw = proto::leases_client::LeasesClient::connect(s.url())
        .await
        .unwrap();
    raw.get_lease(proto::GetLeaseRequest { job: "j".into() })
        .await
        .expect("two waiters in line leave the cap of two to other calls");

    // A burst: 200 grants at once, each waiting for its sync, over four
    // connections. Some are refused at once; none waits for a place.
    let mut burst = Vec::new();
    for conn in 0..4 {
        let raw = proto::leases_client::LeasesClient::connect(s.url())
            .await
            .unwrap();
        for i in 0..50 {
            let mut raw = raw.clone();
            burst.push(tokio::spawn(async move {
                raw.acquire(proto::AcquireRequest {
                    job: format!("burst/{conn}/{i}"),
                    holder: "h".into(),
                    ttl: Some(prost_types::Duration {
                        seconds: 30,
                        nanos: 0,
                    }),
                    wait: None,
                    bind_to_stream: false,
                    preferred: false,
                    value: Default::default(),
                    slots: 0,
                })
                .await
            }));
        }
    }
    let (mut ok, mut refused) = (0, 0);
    for b in burst {
        match b.await.unwrap() {
            Ok(_) => ok += 1,
            Err(st) => {
                assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
                assert_eq!(
                    refusal(&st),
                    ("OVERLOADED".to_owned(), "--max-in-flight".to_owned())
                );
                assert!(st.message().contains('2'), "{}", st.message());
                refused += 1;
            }
        }
    }
    println!("burst of 200 over a cap of 2: {ok} served, {refused} refused");
    assert!(ok > 0 && refused > 0, "{ok} served, {refused} refused");
    // Served again after the burst.
    for i in 0..20 {
        raw.get_lease(proto::GetLeaseRequest {
            job: format!("burst/0/{i}"),
        })
        .await
        .unwrap();
    }
    // The waiters are served as before.
    let c_gave_up = waiters.pop().unwrap().await.unwrap().unwrap();
    assert!(!c_gave_up.acquired);
    c.release("j", "a", 1).await.unwrap();
    let b = waiters.pop().unwrap().await.unwrap().unwrap();
    assert!(b.acquired);
    assert_eq!(c.get_lease("j").await.unwrap().holder.as_deref(), Some("b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_and_room_comes_back() {
    let config = Config {
        max_connections: 2,
        ..Config::default()
    };
    let s = TestServer::with_config(tempfile::tempdir().unwrap(), config).await;
    let a = s.client().await;
    let b = s.client().await;
    a.get_lease("j").await.unwrap();
    b.get_lease("j").await.unwrap();
    // A third connection is closed on accept.
    let third = async {
        let c = Client::connect(&s.url()).await?;
        c.get_lease("j").await
    };
    match tokio::time::timeout(common::PATIENCE, third).await.unwrap() {
        Err(ClientError::Unavailable(_)) => {}
        other => panic!("a third connection: {other:?}"),
    }
    // The first two still work; closing one makes room.
    a.get_lease("j").await.unwrap();
    drop(b);
    let t = Instant::now();
    loop {
        let r = async { Client::connect(&s.url()).await?.get_lease("j").await }.await;
        if r.is_ok() {
            break;
        }
        assert!(
            t.elapsed() < common::PATIENCE,
            "no room after a close: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A watcher that stops reading costs bounded memory and blocks nobody:
/// while it sleeps, changes are folded into the latest state, and when it
/// reads again it catches up to that state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watcher_is_folded_not_buffered_and_blocks_nobody() {
    let s = TestServer::start().await;
    let c = s.client().await;
    // A consumer that reads slowly, as the server sees it: a tiny HTTP/2
    // window, so the transport itself buffers only a few events.
    let channel = tonic::transport::Endpoint::from_shared(s.url())
        .unwrap()
        .initial_stream_window_size(Some(1024))
        .initial_connection_window_size(Some(1024))
        .connect()
        .await
        .unwrap();
    let watcher = Client::from_channel(channel);
    let mut events = watcher.watch("hot").await.unwrap();
    assert_eq!(
        events.message().await.unwrap().unwrap().kind,
        proto::lease_event::Kind::Current as i32
    );

    // 1,000 changes while the watcher reads nothing.
    let changes = 500;
    let t = Instant::now();
    for i in 0..changes {
        let a = c.acquire("hot", "h", TTL, Duration::ZERO).await.unwrap();
        assert!(a.acquired, "change {i}");
        c.release("hot", "h", a.lease.token).await.unwrap();
    }
    println!(
        "{} changes with a stalled watcher took {:?}",
        changes * 2,
        t.elapsed()
    );

    // Now it reads: it must reach the final state (released, last token)
    // having received far fewer events than there were changes.
    let mut received = 0;
    loop {
        let ev = tokio::time::timeout(common::PATIENCE, events.message())
            .await
            .expect("the watcher catches up")
            .unwrap()
            .unwrap();
        received += 1;
        let l = ev.lease.unwrap();
        if l.token == changes as u64 && l.holder.is_empty() {
            break;
        }
    }
    println!(
        "the stalled watcher received {received} events for {} changes",
        changes * 2
    );
    assert!(
        received < 100,
        "changes were buffered, not folded: {received}"
    );
}

/// Issue 17, a watcher that cannot keep up: one that reads nothing while
/// changes go on is closed after `--watch-stall-timeout`, its place under
/// `--max-watchers` given back at once, and told why (RESOURCE_EXHAUSTED,
/// reason OVERLOADED, naming the limit) when it reads again; counted on
/// /metrics. A watch with nothing to tell is never closed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_reads_nothing_is_closed_with_a_status_and_its_place_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(
        dir.path(),
        &["--watch-stall-timeout", "1s", "--max-watchers", "1"],
    );
    let c = Client::connect(&p.url()).await.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(p.url())
        .unwrap()
        .initial_stream_window_size(Some(1024))
        .initial_connection_window_size(Some(1024))
        .connect()
        .await
        .unwrap();
    let stalled = Client::from_channel(channel);
    let mut events = stalled.watch("hot").await.unwrap();
    assert!(
        events.message().await.unwrap().is_some(),
        "the current lease"
    );

    // Changes for 3 s and more while the watcher reads nothing, until its
    // place is free, while it still has not read (a loaded server may
    // take longer than 3 s to see the stall).
    let t = Instant::now();
    let mut idle = loop {
        let a = c.acquire("hot", "h", TTL, Duration::ZERO).await.unwrap();
        c.release("hot", "h", a.lease.token).await.unwrap();
        if t.elapsed() < Duration::from_secs(3) {
            continue;
        }
        match c.watch("quiet").await {
            Ok(w) => break w,
            Err(ClientError::QuotaExceeded { .. }) => assert!(
                t.elapsed() < Duration::from_secs(3) + common::PATIENCE,
                "no room under --max-watchers 1: the stalled watch was not closed"
            ),
            Err(e) => panic!("{e:?}"),
        }
    };
    assert!(idle.message().await.unwrap().is_some());

    // It reads now: what was buffered for it, then why it was closed.
    let st = loop {
        match tokio::time::timeout(common::PATIENCE, events.message())
            .await
            .expect("the stalled watcher hears the end")
        {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("ended without a status"),
            Err(st) => break st,
        }
    };
    assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
    assert_eq!(
        refusal(&st),
        ("OVERLOADED".to_owned(), "--watch-stall-timeout".to_owned())
    );
    assert!(st.message().contains("read no event"), "{}", st.message());
    assert_eq!(
        scraped(
            p.admin,
            "leasehold_overloaded_total{limit=\"--watch-stall-timeout\"}"
        )
        .await,
        1.0
    );

    // A watch with nothing to tell stays open past the timeout.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = c.acquire("quiet", "q", TTL, Duration::ZERO).await.unwrap();
    let ev = tokio::time::timeout(common::PATIENCE, idle.message())
        .await
        .expect("the idle watch is told")
        .unwrap()
        .unwrap();
    assert_eq!(ev.lease.unwrap().token, a.lease.token);
}

/// The reason and the limit a refusal names in its `ErrorInfo`.
fn refusal(st: &tonic::Status) -> (String, String) {
    use tonic_types::StatusExt;
    let info = st
        .get_error_details()
        .error_info()
        .cloned()
        .unwrap_or_else(|| panic!("no ErrorInfo in {st:?}"));
    let limit = info.metadata.get("limit").cloned().unwrap_or_default();
    (info.reason, limit)
}

/// One connection's `Acquire`s of `job` that wait up to a minute, `n` of
/// them at once: each ends with its result.
fn flood(
    channel: &tonic::transport::Channel,
    job: &str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<proto::AcquireResponse, tonic::Status>>> {
    (0..n)
        .map(|i| {
            let mut raw = proto::leases_client::LeasesClient::new(channel.clone());
            let req = proto::AcquireRequest {
                job: job.into(),
                holder: format!("flood-{i}"),
                ttl: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                wait: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0,
                }),
                bind_to_stream: false,
                preferred: false,
                value: Default::default(),
                slots: 0,
            };
            tokio::spawn(async move { raw.acquire(req).await.map(|r| r.into_inner()) })
        })
        .collect()
}

/// The value of the series `series` (name and labels) on `/metrics`.
async fn scraped(admin: std::net::SocketAddr, series: &str) -> f64 {
    let (code, text) = common::admin_request(admin, "/metrics").await;
    assert_eq!(code, 200);
    common::metric(&text, series).unwrap_or_else(|| panic!("no {series} in /metrics"))
}

/// Waits until `n` calls of `calls` have ended, each refused with
/// RESOURCE_EXHAUSTED, and returns the reason and the limit each named.
async fn refusals(
    calls: &mut Vec<tokio::task::JoinHandle<Result<proto::AcquireResponse, tonic::Status>>>,
    n: usize,
) -> Vec<(String, String)> {
    let t = Instant::now();
    let mut limits = Vec::new();
    while limits.len() < n {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "only {} of {n} calls refused",
            limits.len()
        );
        let mut i = 0;
        while i < calls.len() {
            if calls[i].is_finished() {
                let st = calls.swap_remove(i).await.unwrap().unwrap_err();
                assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
                let (reason, limit) = refusal(&st);
                assert!(st.message().contains(&limit), "{}", st.message());
                limits.push((reason, limit));
            } else {
                i += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    limits
}

/// Issue 17, "renewals always get through": while one connection floods
/// the server with waiting Acquires, and then three together fill
/// `--max-waiters`, a leader renews its leases every 500 ms (unary Renew
/// for one job, a KeepAlive stream for another) and never loses either
/// nor sees a renewal refused. (The leases are long, 60 s: only a refusal,
/// not a stall of a loaded machine, can take them from the leader.) The flooding connection is refused OVERLOADED naming
/// --max-in-flight-per-connection; once the waiters fill --max-waiters the
/// refusals are QUOTA_EXCEEDED naming it; and other calls are served all
/// along: a waiting Acquire leaves the budget of calls in flight once it is
/// in line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_waiting_acquires_never_costs_a_leader_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(
        dir.path(),
        &[
            // Above the first burst (400 at once, each counted until it
            // is in line), below the waiters that end up in line (600).
            "--max-in-flight",
            "450",
            "--max-waiters",
            "600",
            "--max-in-flight-per-connection",
            "250",
            "--max-streams-per-connection",
            "2000",
        ],
    );
    let url = p.url();
    let ttl = Duration::from_secs(60);
    let leader = Client::connect(&url).await.unwrap();
    let unary = leader
        .acquire("led", "leader", ttl, Duration::ZERO)
        .await
        .unwrap();
    let streamed = leader
        .acquire("led-ka", "leader", ttl, Duration::ZERO)
        .await
        .unwrap();
    assert!(unary.acquired && streamed.acquired);
    // The flood waits for a job someone holds.
    let other = Client::connect(&url).await.unwrap();
    assert!(
        other
            .acquire("busy", "owner", Duration::from_secs(120), Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );

    // The leader renews both leases every 500 ms until told to stop, and
    // counts every renewal that fails.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let renewer = {
        let (u, s) = (unary.lease.token, streamed.lease.token);
        tokio::spawn(async move {
            let mut ka = leader.keep_alive().await.unwrap();
            let batch = [leasehold::client::KeepAliveRenewal::new(
                "led-ka", "leader", s, ttl,
            )];
            let (mut renewed, mut failed) = (0u32, Vec::new());
            while !*stop_rx.borrow() {
                match leader.renew("led", "leader", u, ttl).await {
                    Ok(l) if l.token == u => renewed += 1,
                    other => failed.push(format!("Renew: {other:?}")),
                }
                match ka.renew(&batch).await {
                    Ok(out) if matches!(out[0], leasehold::client::RenewOutcome::Renewed(_)) => {
                        renewed += 1
                    }
                    other => failed.push(format!("KeepAlive: {other:?}")),
                }
                let _ = tokio::time::timeout(Duration::from_millis(500), stop_rx.changed()).await;
            }
            (renewed, failed)
        })
    };

    // One connection asks for 400 waits: 250 wait, 150 are refused.
    let flooder = tonic::transport::Endpoint::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut first = flood(&flooder, "busy", 400);
    let limits = refusals(&mut first, 150).await;
    assert!(
        limits
            .iter()
            .all(|l| l == &("OVERLOADED".into(), "--max-in-flight-per-connection".into())),
        "{limits:?}"
    );
    // The connection's share of the budget waits (let in is not yet in
    // line).
    common::eventually("250 waits in line", || async {
        (scraped(p.admin, "leasehold_waiting_acquires").await == 250.0).then_some(())
    })
    .await;
    // Another connection is served.
    let bystander = Client::connect(&url).await.unwrap();
    assert_eq!(
        bystander.get_lease("busy").await.unwrap().holder.as_deref(),
        Some("owner")
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Two more connections, 250 waits each: 600 fit under --max-waiters
    // (more than --max-in-flight), the last 150 asked for are refused
    // naming it.
    let mut more = Vec::new();
    for _ in 0..2 {
        more.push(
            tonic::transport::Endpoint::from_shared(url.clone())
                .unwrap()
                .connect()
                .await
                .unwrap(),
        );
    }
    // Paced, a few at a time: a call counts under --max-in-flight until it
    // is in line, so each batch is in line (or refused) before the next.
    let mut second = Vec::new();
    for batch in 1..=10 {
        for c in &more {
            second.extend(flood(c, "busy", 25));
        }
        let second = &second;
        common::eventually("a batch of waits in line or refused", || async move {
            let waiting = scraped(p.admin, "leasehold_waiting_acquires").await;
            let ended = second.iter().filter(|c| c.is_finished()).count();
            (waiting as usize + ended >= 250 + 50 * batch).then_some(())
        })
        .await;
    }
    let limits = refusals(&mut second, 150).await;
    assert!(
        limits
            .iter()
            .all(|l| l == &("QUOTA_EXCEEDED".into(), "--max-waiters".into())),
        "{limits:?}"
    );
    common::eventually("600 waits in line", || async {
        (scraped(p.admin, "leasehold_waiting_acquires").await == 600.0).then_some(())
    })
    .await;
    // Ordinary calls are still served, on any connection.
    assert_eq!(
        bystander.get_lease("busy").await.unwrap().holder.as_deref(),
        Some("owner")
    );
    let free = bystander
        .acquire("free", "b", Duration::from_secs(10), Duration::ZERO)
        .await
        .unwrap();
    assert!(free.acquired);
    tokio::time::sleep(Duration::from_secs(6)).await;

    let _ = stop_tx.send(true);
    let (renewed, failed) = renewer.await.unwrap();
    assert!(failed.is_empty(), "renewals failed: {failed:?}");
    assert!(renewed > 0, "no renewal");
    assert_eq!(
        scraped(
            p.admin,
            "leasehold_overloaded_total{limit=\"--max-in-flight-per-connection\"}"
        )
        .await,
        150.0
    );
    assert_eq!(
        scraped(
            p.admin,
            "leasehold_quota_exceeded_total{limit=\"--max-waiters\"}"
        )
        .await,
        150.0
    );
    // The flood ends; the leader still holds both leases, same tokens.
    for c in first.iter().chain(&second) {
        c.abort();
    }
    drop((flooder, more));
    let t = Instant::now();
    let led = loop {
        match bystander.get_lease("led").await {
            Ok(l) => break l,
            Err(e) => {
                assert!(t.elapsed() < common::PATIENCE, "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(led.holder.as_deref(), Some("leader"));
    assert_eq!(led.token, unary.lease.token);
    let ka = bystander.get_lease("led-ka").await.unwrap();
    assert_eq!(ka.holder.as_deref(), Some("leader"));
    assert_eq!(ka.token, streamed.lease.token);
}

/// Reads from `s` until the server closes it (end of file or a reset), for
/// at most `limit`; whether it did.
async fn closed_by_server(s: &mut tokio::net::TcpStream, limit: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let t = Instant::now();
    while t.elapsed() < limit {
        match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    false
}

/// Issue 17, "connections that do not speak are closed": connections that
/// never send a byte, or only part of the HTTP/2 preface, fill
/// --max-connections, and are closed after --handshake-timeout; a normal
/// client that keeps trying gets in meanwhile (and a silent connection to
/// the admin port is closed too). The refusals at the cap are
/// logged as one summary line, not one line per connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_speak_are_closed_after_the_handshake_timeout() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let mut cmd = common::serve_command(&dir.path().join("data"));
    cmd.args(["--max-connections", "20", "--handshake-timeout", "1s"]);
    let p = common::ServerProcess::spawn_with_stderr(
        cmd,
        dir.path(),
        std::fs::File::create(&log).unwrap().into(),
    );
    let mut silent = Vec::new();
    // The admin port has the same deadline.
    silent.push(tokio::net::TcpStream::connect(p.admin).await.unwrap());
    for i in 0..20 {
        let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        if i % 2 == 1 {
            // Part of the preface, never the rest.
            s.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        }
        silent.push(s);
    }
    // At the cap: 30 more are refused on accept.
    for _ in 0..30 {
        let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        assert!(closed_by_server(&mut s, common::PATIENCE).await);
    }
    // A normal client keeps trying and gets in once the silent ones are
    // closed.
    let t = Instant::now();
    let lease = loop {
        let r = async { Client::connect(&p.url()).await?.get_lease("j").await }.await;
        match r {
            Ok(l) => break l,
            Err(e) => assert!(
                t.elapsed() < common::PATIENCE,
                "no room for a client that speaks: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(lease.token, 0);
    for s in &mut silent {
        assert!(
            closed_by_server(s, common::PATIENCE).await,
            "a silent connection stayed open"
        );
    }
    // One summary line for the refusals (the interval is 10 s).
    let t = Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.contains("--max-connections"))
            .map(str::to_owned)
            .collect();
        if !lines.is_empty() || t.elapsed() > Duration::from_secs(30) {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!lines.is_empty(), "no summary of the refusals in the log");
    assert!(
        lines.len() <= 2,
        "one line per refused connect, not a summary: {lines:?}"
    );
    assert!(
        lines[0].contains("refused")
            && lines[0].contains("connections over --max-connections (20)"),
        "{lines:?}"
    );
}

/// A TCP connection to `to` from the local address `from` (any of
/// 127.0.0.0/8 is this host's): another client address, on one machine.
pub(crate) async fn connect_from(
    from: &str,
    to: std::net::SocketAddr,
) -> std::io::Result<tokio::net::TcpStream> {
    let s = tokio::net::TcpSocket::new_v4()?;
    s.bind(format!("{from}:0").parse().unwrap())?;
    s.connect(to).await
}

/// Of `conns`, how many the server has closed: waits until `want` are
/// (for at most [`common::PATIENCE`]), then looks once more, so that one
/// closed past `want` is counted too.
pub(crate) async fn count_closed(conns: &mut [tokio::net::TcpStream], want: usize) -> usize {
    use tokio::io::AsyncReadExt;
    let t = Instant::now();
    let mut closed = vec![false; conns.len()];
    let mut reached = false;
    loop {
        for (s, c) in conns.iter_mut().zip(closed.iter_mut()) {
            let mut buf = [0u8; 64];
            if !*c {
                *c = matches!(
                    tokio::time::timeout(Duration::from_millis(5), s.read(&mut buf)).await,
                    Ok(Ok(0) | Err(_))
                );
            }
        }
        let n = closed.iter().filter(|c| **c).count();
        if reached || t.elapsed() > common::PATIENCE {
            return n;
        }
        reached = n >= want;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 33, "the admin port can be silenced by anyone who reaches it":
/// one client address gets at most 16 of the admin port's connections,
/// and a connection that sends one byte and goes silent, sends half a
/// request head, or makes a request and then idles is closed after
/// --handshake-timeout. Meanwhile `/healthz` answers the probe's address
/// every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_answers_probes_while_another_address_holds_connections() {
    use tokio::io::AsyncWriteExt;
    let probe = |admin| async move {
        let (code, body) = common::admin_request(admin, "/healthz").await;
        assert_eq!((code, body.as_str()), (200, "ok\n"));
    };
    // The cap: with a timeout that outlasts the test, 100 silent
    // connections from 127.0.0.2 leave 16 open.
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(dir.path(), &["--handshake-timeout", "10m"]);
    let mut held = Vec::new();
    for _ in 0..100 {
        let mut s = connect_from("127.0.0.2", p.admin).await.unwrap();
        let _ = s.write_all(b"G").await;
        held.push(s);
    }
    assert_eq!(
        count_closed(&mut held, 84).await,
        84,
        "not 16 open from one address"
    );
    probe(p.admin).await;
    drop((held, p));

    // The timeouts: each kind of silence is closed.
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(dir.path(), &["--handshake-timeout", "1s"]);
    let mut held = Vec::new();
    for i in 0..15 {
        let mut s = connect_from("127.0.0.2", p.admin).await.unwrap();
        let sent: &[u8] = match i % 3 {
            0 => b"G",
            1 => b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            _ => b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        };
        s.write_all(sent).await.unwrap();
        held.push(s);
    }
    probe(p.admin).await;
    for (i, s) in held.iter_mut().enumerate() {
        assert!(
            closed_by_server(s, common::PATIENCE).await,
            "silence of kind {} kept its admin connection open",
            i % 3
        );
    }
    probe(p.admin).await;
}

/// Without a policy, the admin pages answer whoever reaches them, but not a
/// web page of another site that reaches them by DNS rebinding: a request
/// whose `Host` names another host is refused (421) on every path, and
/// one to the address or to localhost is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_the_admin_port_serves_no_other_hosts_page() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(dir.path(), &[]);
    let admin = p.admin;
    let get = move |path: &'static str, host: String| async move {
        let mut s = tokio::net::TcpStream::connect(admin).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out.split_whitespace().nth(1).unwrap_or_default().to_owned()
    };
    for path in ["/", "/api/jobs", "/metrics", "/healthz"] {
        assert_eq!(
            get(path, "rebinding.example:9464".into()).await,
            "421",
            "{path}"
        );
        assert_eq!(get(path, p.admin.to_string()).await, "200", "{path}");
        assert_eq!(
            get(path, format!("localhost:{}", p.admin.port())).await,
            "200",
            "{path}"
        );
    }
}

/// Issue 33, "anyone can lock every client out of the gRPC port": one client
/// address gets at most --max-connections-per-address of the gRPC port's
/// connections, and a client at another address is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_grpc_connection() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(
        dir.path(),
        &[
            "--max-connections",
            "50",
            "--max-connections-per-address",
            "10",
            "--handshake-timeout",
            "10m",
        ],
    );
    let mut held = Vec::new();
    for _ in 0..60 {
        held.push(connect_from("127.0.0.2", p.addr).await.unwrap());
    }
    assert_eq!(
        count_closed(&mut held, 50).await,
        50,
        "not 10 open from one address"
    );
    let c = Client::connect(&p.url()).await.unwrap();
    assert_eq!(c.get_lease("j").await.unwrap().token, 0);
}

/// A connection with no call open for --idle-timeout is closed; one with
/// an open stream (a watch) is not, however long the stream is quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_and_one_with_an_open_stream_is_not() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(
        dir.path(),
        &["--handshake-timeout", "1s", "--idle-timeout", "2s"],
    );
    // The HTTP/2 preface and an empty SETTINGS frame: a connection that
    // has spoken, and then opens no stream.
    let mut idle = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    idle.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    // A watcher on its own connection.
    let watcher = Client::connect(&p.url()).await.unwrap();
    let mut events = watcher.watch("w").await.unwrap();
    assert_eq!(
        events.message().await.unwrap().unwrap().kind,
        proto::lease_event::Kind::Current as i32
    );
    assert!(
        closed_by_server(&mut idle, common::PATIENCE).await,
        "an idle connection stayed open"
    );
    // Past the idle timeout, the quiet watch still hears of a change.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = Client::connect(&p.url()).await.unwrap();
    assert!(
        c.acquire("w", "h", TTL, Duration::ZERO)
            .await
            .unwrap()
            .acquired
    );
    let ev = tokio::time::timeout(common::PATIENCE, events.message())
        .await
        .expect("the watch is still open")
        .unwrap()
        .unwrap();
    assert_eq!(ev.lease.unwrap().holder, "h");
}

/// Issue 17, "/metrics stays scrapeable": with more jobs than
/// --metrics-max-jobs, the page has that many jobs' series, those with a
/// live leader first and then the most recently changed; the totals count
/// every job, and a gauge counts the jobs left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_job_metrics_are_capped_and_the_totals_count_every_job() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(dir.path(), &["--metrics-max-jobs", "5"]);
    let c = Client::connect(&p.url()).await.unwrap();
    for i in 0..9 {
        let a = c
            .acquire(&format!("vacant-{i}"), "h", TTL, Duration::ZERO)
            .await
            .unwrap();
        c.release(&format!("vacant-{i}"), "h", a.lease.token)
            .await
            .unwrap();
        // Each is released at a distinct moment: the last ones are the
        // most recently changed.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..3 {
        assert!(
            c.acquire(&format!("led-{i}"), "h", TTL, Duration::ZERO)
                .await
                .unwrap()
                .acquired
        );
    }
    let (code, text) = common::admin_request(p.admin, "/metrics").await;
    assert_eq!(code, 200);
    let mut shown: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("leasehold_job_leader{job=\""))
        .map(|l| l.split('"').next().unwrap())
        .collect();
    shown.sort();
    assert_eq!(
        shown,
        ["led-0", "led-1", "led-2", "vacant-7", "vacant-8"],
        "{text}"
    );
    for family in ["leasehold_job_token{", "leasehold_job_leaderless_seconds{"] {
        assert_eq!(
            text.lines().filter(|l| l.starts_with(family)).count(),
            5,
            "{family}"
        );
    }
    for (name, want) in [
        ("leasehold_jobs", 12.0),
        ("leasehold_jobs_led", 3.0),
        ("leasehold_jobs_leaderless", 9.0),
        ("leasehold_metrics_jobs_omitted", 7.0),
    ] {
        assert_eq!(common::metric(&text, name), Some(want), "{name}");
    }
}

/// Issue 17, the limits on state: a watcher over --max-watchers and a
/// waiter over --max-waiters-per-job are refused with RESOURCE_EXHAUSTED,
/// reason QUOTA_EXCEEDED, naming the limit; nothing changes (the line and
/// the lease are as they were), and room comes back when a place is given
/// up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_and_waiters_over_their_quota_are_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(
        dir.path(),
        &["--max-watchers", "3", "--max-waiters-per-job", "2"],
    );
    let c = Client::connect(&p.url()).await.unwrap();
    let mut raw = proto::leases_client::LeasesClient::connect(p.url())
        .await
        .unwrap();
    let quota = |st: tonic::Status, limit: &str| {
        assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
        assert_eq!(
            refusal(&st),
            ("QUOTA_EXCEEDED".to_owned(), limit.to_owned()),
            "{st:?}"
        );
        assert!(st.message().contains(limit), "{}", st.message());
    };

    // Watchers.
    let mut watches = Vec::new();
    for i in 0..3 {
        watches.push(c.watch(&format!("w{i}")).await.unwrap());
    }
    let st = raw
        .watch_lease(proto::WatchLeaseRequest { job: "w3".into() })
        .await
        .unwrap_err();
    quota(st, "--max-watchers");
    drop(watches.pop());
    let t = Instant::now();
    while raw
        .watch_lease(proto::WatchLeaseRequest { job: "w3".into() })
        .await
        .is_err()
    {
        assert!(
            t.elapsed() < common::PATIENCE,
            "no room after a watch ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Waiters.
    let held = c.acquire("j", "a", TTL, Duration::ZERO).await.unwrap();
    assert!(held.acquired);
    let mut line = Vec::new();
    for h in ["b", "c"] {
        let c = c.clone();
        line.push(tokio::spawn(async move {
            c.acquire("j", h, TTL, Duration::from_secs(30)).await
        }));
        let t = Instant::now();
        while scraped(p.admin, "leasehold_waiting_acquires").await < line.len() as f64 {
            assert!(t.elapsed() < common::PATIENCE);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let st = raw
        .acquire(proto::AcquireRequest {
            job: "j".into(),
            holder: "d".into(),
            ttl: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
            wait: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
            bind_to_stream: false,
            preferred: false,
            value: Default::default(),
            slots: 0,
        })
        .await
        .unwrap_err();
    quota(st, "--max-waiters-per-job");
    // Nothing changed: the lease, the token and the line.
    let l = c.get_lease("j").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.token),
        (Some("a"), held.lease.token)
    );
    assert_eq!(scraped(p.admin, "leasehold_waiting_acquires").await, 2.0);
    c.release("j", "a", held.lease.token).await.unwrap();
    let b = line.remove(0).await.unwrap().unwrap();
    assert!(b.acquired, "the first in line is served first");
    assert_eq!(b.lease.holder.as_deref(), Some("b"));
    for (limit, n) in [("--max-watchers", 1.0), ("--max-waiters-per-job", 1.0)] {
        assert!(
            scraped(
                p.admin,
                &format!("leasehold_quota_exceeded_total{{limit=\"{limit}\"}}")
            )
            .await
                >= n,
            "{limit}"
        );
    }
}

/// Open streams count in their connection's share for as long as they are
/// open: one connection's watches beyond --max-in-flight-per-connection are
/// refused OVERLOADED, while another connection opens watches, and the
/// first connection's KeepAlive (a renewal, on its own budget) still
/// renews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_count_in_their_connections_share() {
    let dir = tempfile::tempdir().unwrap();
    let p = common::ServerProcess::start(dir.path(), &["--max-in-flight-per-connection", "20"]);
    let c = Client::connect(&p.url()).await.unwrap();
    let held = c.acquire("led", "me", TTL, Duration::ZERO).await.unwrap();
    let mut raw = proto::leases_client::LeasesClient::connect(p.url())
        .await
        .unwrap();
    let mut open = Vec::new();
    let mut refused = Vec::new();
    for i in 0..25 {
        match raw
            .watch_lease(proto::WatchLeaseRequest {
                job: format!("w{i}"),
            })
            .await
        {
            Ok(s) => open.push(s.into_inner()),
            Err(st) => refused.push(st),
        }
    }
    assert_eq!(open.len(), 20);
    assert_eq!(refused.len(), 5);
    for st in &refused {
        assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
        assert_eq!(
            refusal(st),
            (
                "OVERLOADED".to_owned(),
                "--max-in-flight-per-connection".to_owned()
            )
        );
    }
    // Another connection has a share of its own.
    let other = Client::connect(&p.url()).await.unwrap();
    let _watch = other.watch("w0").await.unwrap();
    // A renewal, over the connection full of watches: its own budget.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(proto::KeepAliveRequest {
        id: 1,
        renewals: vec![proto::KeepAliveRenewal {
            job: "led".into(),
            holder: "me".into(),
            token: held.lease.token,
            ttl: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
        }],
        bind_to_stream: false,
    })
    .await
    .unwrap();
    let mut answers = raw
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("a KeepAlive is admitted on a connection full of watches")
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    assert_eq!(
        answer.results[0].outcome(),
        proto::keep_alive_result::Outcome::Renewed,
        "{answer:?}"
    );
}

/// A connection's writes beyond --max-write-rate-per-connection (a
/// second's worth goes at once) wait, and are all made: slowed, never
/// refused. Unary writes and WriteStream messages alike. Another
/// connection has a rate of its own: its write does not wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_writes_over_its_rate_wait_and_none_is_refused() {
    const RATE: u64 = 256 * 1024;
    let config = Config {
        max_write_rate_per_connection: RATE,
        ..Config::default()
    };
    let s = TestServer::with_config(tempfile::tempdir().unwrap(), config).await;
    let flooder = s.client().await;
    let a = flooder
        .acquire("j", "a", TTL, Duration::ZERO)
        .await
        .unwrap();
    let token = a.lease.token;
    let value = vec![7u8; 32 * 1024];
    // 12 writes of 32 KiB: 384 KiB, over the 256 KiB a second may burst.
    for i in 0..12 {
        let key = format!("k{i}");
        flooder
            .checked_write("j", token, key.as_bytes(), value.clone())
            .await
            .expect("a write over the rate waits, and is made");
    }
    let paced = s.rpc.paced_writes();
    assert!(paced > 0, "writes past the burst waited");
    // Another connection: within its own burst, so it does not wait.
    let other = s.client().await;
    other
        .checked_write("j", token, b"other", value.clone())
        .await
        .unwrap();
    assert_eq!(s.rpc.paced_writes(), paced, "another connection's rate");
    // A WriteStream on the flooding connection: its messages wait too.
    let mut ws = flooder.write_stream().await.unwrap();
    for i in 0..4 {
        let out = ws
            .write(&[leasehold::client::StreamWrite::put(
                "j",
                token,
                format!("s{i}").as_bytes(),
                value.clone(),
            )])
            .await
            .unwrap();
        assert!(matches!(
            out[0],
            leasehold::client::WriteOutcome::Written { .. }
        ));
    }
    assert!(s.rpc.paced_writes() > paced, "stream messages waited");
    // Everything was written.
    for key in (0..12)
        .map(|i| format!("k{i}"))
        .chain((0..4).map(|i| format!("s{i}")))
    {
        let r = other.read("j", key.as_bytes()).await.unwrap();
        assert!(r.found && r.value == value, "{key} was written");
    }
    let text = s.metrics();
    assert!(common::metric(&text, "leasehold_writes_paced_total").unwrap() >= 2.0);
    assert!(common::metric(&text, "leasehold_write_pacing_seconds_total").unwrap() > 0.0);
}

/// A connection's Acquires beyond --max-acquire-rate-per-connection (a
/// second's worth goes at once) wait, and are all made: slowed, never
/// refused, new jobs or not. Its renewals are never slowed, and another
/// connection has a rate of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_acquires_over_its_rate_wait_and_none_is_refused() {
    const RATE: u64 = 20;
    let config = Config {
        max_acquire_rate_per_connection: RATE,
        ..Config::default()
    };
    let s = TestServer::with_config(tempfile::tempdir().unwrap(), config).await;
    let flooder = s.client().await;
    let held = flooder
        .acquire("held", "leader", TTL, Duration::ZERO)
        .await
        .unwrap();
    assert!(held.acquired);
    // 40 new jobs at once: twice the burst of 20.
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let c = flooder.clone();
            tokio::spawn(async move {
                c.acquire(&format!("new-{i}"), "flood", TTL, Duration::ZERO)
                    .await
            })
        })
        .collect();
    for t in tasks {
        let a = t
            .await
            .unwrap()
            .expect("an Acquire over the rate waits, and is made");
        assert!(a.acquired && a.lease.token >= 1);
    }
    let paced = s.rpc.paced_acquires();
    assert!(paced > 0, "Acquires past the burst waited");
    // Renewals on the same connection are not paced.
    for _ in 0..30 {
        flooder
            .renew("held", "leader", held.lease.token, TTL)
            .await
            .unwrap();
    }
    // Another connection: within its own burst, so it does not wait.
    let other = s.client().await;
    let a = other
        .acquire("other", "b", TTL, Duration::ZERO)
        .await
        .unwrap();
    assert!(a.acquired);
    assert_eq!(
        s.rpc.paced_acquires(),
        paced,
        "renewals and another connection's rate"
    );
    // Every job was created, once.
    for i in 0..40 {
        let l = other.get_lease(&format!("new-{i}")).await.unwrap();
        assert_eq!(l.holder.as_deref(), Some("flood"), "new-{i}");
    }
    let text = s.metrics();
    assert!(common::metric(&text, "leasehold_acquires_paced_total").unwrap() >= 1.0);
    assert!(common::metric(&text, "leasehold_acquire_pacing_seconds_total").unwrap() > 0.0);
}
