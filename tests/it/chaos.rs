//! The chaos API on real server processes and both backends: `expire`
//! ends a grant now (the waiter is granted at once, the holder's renewal
//! is LEASE_LOST and its writes fenced, the history says "ended by
//! chaos"); `pause` refuses the holder's renewals until its grant runs
//! out at its deadline; `delay` holds every answer about the job;
//! `fence` fails the next N writes; `transfer` hands the lease to the
//! first waiter; `clear` ends it all. Each is counted on /metrics and
//! shown on the status page while in force. Refused without
//! `--enable-chaos`, and on a listener that is not loopback without a
//! policy's grant. `leasehold run` whose renewals are paused stops its
//! command (SIGTERM, then SIGKILL) before the lease can pass on.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, Place, ServerProcess};
use leasehold::client::{Client, ClientError};
use leasehold::proto::tenure::End;

const LONG: Duration = Duration::from_secs(60);

async fn client(p: &ServerProcess) -> Client {
    Client::connect(&p.url()).await.unwrap()
}

/// A waiting Acquire of `holder` on a connection of its own, and when it
/// returned.
fn wait_for(
    p: &ServerProcess,
    job: &str,
    holder: &str,
    ttl: Duration,
) -> tokio::task::JoinHandle<(leasehold::client::Acquired, Instant)> {
    let (url, job, holder) = (p.url(), job.to_owned(), holder.to_owned());
    tokio::spawn(async move {
        let c = Client::connect(&url).await.unwrap();
        let a = c.acquire(&job, &holder, ttl, LONG).await.unwrap();
        std::mem::forget(c);
        (a, Instant::now())
    })
}

async fn end_of(c: &Client, job: &str, token: u64) -> Option<End> {
    c.history(job, 100)
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.token == token)
        .and_then(|t| t.end)
}

fn chaos_count(metrics: &str, action: &str) -> f64 {
    common::metric(
        metrics,
        &format!("leasehold_chaos_actions_total{{action=\"{action}\"}}"),
    )
    .unwrap_or(0.0)
}

async fn every_action(place: Place) {
    let p = place.start(&["--enable-chaos"]);
    let c = client(&p).await;
    let chaos = c.chaos();

    // expire: the waiter is granted at once; the old holder is lost and
    // fenced; the history says so.
    let a = c.acquire("x", "a@1", LONG, Duration::ZERO).await.unwrap();
    let waiter = wait_for(&p, "x", "b@2", LONG);
    p.wait_for_waiters(1).await;
    let asked = Instant::now();
    let out = chaos.expire("x").await.unwrap();
    let (b, at) = waiter.await.unwrap();
    assert!(b.acquired && b.lease.token == a.lease.token + 1);
    assert!(
        at - asked < Duration::from_secs(10),
        "granted after {:?}",
        at - asked
    );
    // The answer shows the lease just after: free, or already the waiter's
    // (etcd grants it when the waiter's frontend sees the holder go).
    assert_ne!(out.lease.unwrap().holder.as_deref(), Some("a@1"));
    assert!(matches!(
        c.renew_lease("x", "a@1", a.lease.token, LONG).await,
        Err(ClientError::LeaseLost { .. })
    ));
    assert!(matches!(
        c.checked_write("x", a.lease.token, b"k", b"late".to_vec())
            .await,
        Err(ClientError::Fenced { .. })
    ));
    assert_eq!(end_of(&c, "x", a.lease.token).await, Some(End::Chaos));
    // Nobody holds it: nothing changes.
    let free = c
        .acquire("free", "f@1", LONG, Duration::ZERO)
        .await
        .unwrap();
    c.release("free", "f@1", free.lease.token).await.unwrap();
    assert_eq!(
        chaos.expire("free").await.unwrap().lease.unwrap().holder,
        None
    );

    // fence: the next 2 writes fail, whatever their token; the third lands.
    let t = b.lease.token;
    assert!(chaos
        .fence("x", 2)
        .await
        .unwrap()
        .in_force
        .contains("2 writes to fence"));
    for _ in 0..2 {
        assert!(matches!(
            c.checked_write("x", t, b"k", b"v".to_vec()).await,
            Err(ClientError::Fenced { .. })
        ));
    }
    assert_eq!(
        c.checked_write("x", t, b"k", b"v".to_vec()).await.unwrap(),
        1
    );

    // delay: every answer about the job waits; others do not.
    chaos.delay("x", Duration::from_millis(400)).await.unwrap();
    let t0 = Instant::now();
    c.get_lease("x").await.unwrap();
    c.renew_lease("x", "b@2", t, LONG).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t0.elapsed()
    );
    let (code, page) = common::admin_request(p.admin, "/api/job?name=x").await;
    assert_eq!(code, 200);
    assert!(page.contains("answers delayed by 400ms"), "{page}");
    chaos.clear(Some("x")).await.unwrap();
    let (_, page) = common::admin_request(p.admin, "/api/job?name=x").await;
    assert!(page.contains("\"chaos\":\"\""), "{page}");

    // pause: renewals refused as if late, the lease still the holder's
    // until its deadline; clear, and they are heard again.
    let out = chaos.pause("x", Duration::from_secs(600)).await.unwrap();
    assert!(out.in_force.contains("b@2 paused for"), "{}", out.in_force);
    assert!(matches!(
        c.renew_lease("x", "b@2", t, LONG).await,
        Err(ClientError::LeaseLost { .. })
    ));
    assert_eq!(
        c.get_lease("x").await.unwrap().token,
        t,
        "not ended by a pause"
    );
    chaos.clear(None).await.unwrap();
    c.renew_lease("x", "b@2", t, LONG).await.unwrap();

    // A paused grant runs out at its deadline and goes to the waiter.
    let short = common::ttl(Duration::from_secs(3));
    let g = c
        .acquire("short", "s@1", short, Duration::ZERO)
        .await
        .unwrap();
    let waiter = wait_for(&p, "short", "w@2", LONG);
    p.wait_for_waiters(1).await;
    let paused = Instant::now();
    chaos
        .pause("short", Duration::from_secs(600))
        .await
        .unwrap();
    assert!(c
        .renew_lease("short", "s@1", g.lease.token, short)
        .await
        .is_err());
    let (w, at) = waiter.await.unwrap();
    assert_eq!(w.lease.token, g.lease.token + 1);
    assert!(
        at - paused >= short / 2,
        "passed on after {:?}",
        at - paused
    );
    chaos.clear(None).await.unwrap();

    // transfer: to the first waiter; with nobody waiting, NoSuccessor.
    let waiter = wait_for(&p, "x", "c@3", LONG);
    p.wait_for_waiters(1).await;
    chaos.transfer("x").await.unwrap();
    let (n, _) = waiter.await.unwrap();
    assert_eq!(n.lease.token, t + 1);
    assert_eq!(end_of(&c, "x", t).await, Some(End::Transferred));
    assert!(matches!(
        chaos.transfer("x").await,
        Err(ClientError::NoSuccessor(_))
    ));

    // Bad input names the field and the limit, and changes nothing.
    for e in [
        chaos.pause("x", Duration::ZERO).await.unwrap_err(),
        chaos.delay("x", Duration::from_secs(61)).await.unwrap_err(),
        chaos.fence("x", 0).await.unwrap_err(),
    ] {
        assert!(matches!(e, ClientError::InvalidArgument { .. }), "{e:?}");
    }
    assert!(matches!(
        chaos.expire("").await,
        Err(ClientError::InvalidArgument { .. })
    ));

    // The job's history has every action taken on it, newest first.
    let events = chaos.events("x").await.unwrap();
    let actions: Vec<&str> = events.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        ["transfer", "clear", "pause", "clear", "delay", "fence", "expire"],
        "{events:?}"
    );
    assert!(events[6]
        .detail
        .contains(&format!("token {} expired", a.lease.token)));
    let out = Command::new(bin())
        .args(["history", "x", "--server", &p.url()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("chaos") && said.contains("fence: the next 2 fenced writes fail"),
        "{said}"
    );

    let (_, metrics) = common::admin_request(p.admin, "/metrics").await;
    for (action, n) in [
        ("expire", 1.0),
        ("fence", 1.0),
        ("delay", 1.0),
        ("pause", 2.0),
        ("transfer", 1.0),
    ] {
        assert_eq!(chaos_count(&metrics, action), n, "{action}: {metrics}");
    }
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chaos_action_on_a_real_server() {
    every_action(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chaos_action_on_a_real_server_on_etcd() {
    every_action(Place::etcd()).await;
}

/// Without `--enable-chaos` the service is not there (UNIMPLEMENTED), and
/// the CLI says how to turn it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_is_off_without_the_flag() {
    let place = Place::local();
    let p = place.start(&[]);
    let c = client(&p).await;
    let a = c.acquire("x", "a@1", LONG, Duration::ZERO).await.unwrap();
    match c.chaos().expire("x").await {
        Err(ClientError::Other(s)) => assert_eq!(s.code(), tonic::Code::Unimplemented),
        other => panic!("{other:?}"),
    }
    let out = Command::new(bin())
        .args(["chaos", "expire", "x", "--server", &p.url()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--enable-chaos"), "{err}");
    assert_eq!(c.get_lease("x").await.unwrap().token, a.lease.token);
    p.stop();
}

/// `leasehold serve` listening on every address, with `extra` flags.
fn remote_server(dir: &std::path::Path, extra: &[String]) -> ServerProcess {
    let mut cmd = Command::new(bin());
    cmd.args([
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--admin-listen",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(dir)
    .args(extra)
    .arg("--enable-chaos");
    let mut p = ServerProcess::spawn(cmd, dir);
    p.addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    p
}

/// On a listener that is not loopback: refused without a policy, and
/// with one, allowed only to a principal granted `chaos` (here `admin`,
/// which is granted everything), not to one with lease, write and read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_a_remote_listener_needs_a_grant() {
    let tmp = tempfile::tempdir().unwrap();
    let p = remote_server(
        &tmp.path().join("open"),
        &["--insecure-allow-remote".into()],
    );
    let c = client(&p).await;
    match c.chaos().expire("x").await {
        Err(ClientError::PermissionDenied { message, .. }) => {
            assert!(message.contains("policy"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    p.stop();

    use crate::security::{Setup, ADMIN, BILLING};
    let s = Setup::new();
    let p = remote_server(&s.dir.path().join("data"), &s.args());
    let billing = s.client(&p, Some(BILLING)).await;
    let admin = s.client(&p, Some(ADMIN)).await;
    let a = billing
        .acquire("billing/x", "b@1", LONG, Duration::ZERO)
        .await
        .unwrap();
    assert!(matches!(
        billing.chaos().expire("billing/x").await,
        Err(ClientError::PermissionDenied { .. })
    ));
    assert_eq!(
        billing.get_lease("billing/x").await.unwrap().token,
        a.lease.token
    );
    admin.chaos().expire("billing/x").await.unwrap();
    assert_eq!(billing.get_lease("billing/x").await.unwrap().holder, None);
    p.stop();
}

/// A `leasehold run` whose renewals are paused stops its command (which
/// ignores SIGTERM: SIGKILL, within the deadline) before the lease can
/// pass to the next runner: their commands never overlap.
async fn run_with_an_injected_loss(place: Place) {
    let p = place.start(&["--enable-chaos"]);
    let c = client(&p).await;
    let tmp = tempfile::tempdir().unwrap();
    let runner = |name: &str| {
        let pid_file = tmp.path().join(format!("{name}.pid"));
        let script = format!(
            "trap '' TERM; echo $$ > '{}'; while :; do sleep 0.05; done",
            pid_file.display()
        );
        let child = Command::new(bin())
            .args(["run", "--server", &p.url(), "--ttl", "4s", "--name", name])
            .args(["--no-handover", "runjob", "--", "sh", "-c", &script])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        (child, pid_file)
    };
    let (mut first, first_pid) = runner("first");
    let pid = common::eventually("the first command runs", || async {
        std::fs::read_to_string(&first_pid)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
    })
    .await;
    let token = c.get_lease("runjob").await.unwrap().token;
    let (mut second, second_pid) = runner("second");
    p.wait_for_waiters(1).await;

    c.chaos()
        .pause("runjob", Duration::from_secs(600))
        .await
        .unwrap();
    // The second command starts only once the first's lease ran out; by
    // then the first command is gone.
    common::eventually("the second command runs", || async {
        second_pid.exists().then_some(())
    })
    .await;
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(
        !alive,
        "the first command still ran when the second started"
    );
    assert!(c.get_lease("runjob").await.unwrap().token > token);
    let status = first.wait().unwrap();
    assert!(
        !status.success(),
        "the first runner lost its lease: {status:?}"
    );
    c.chaos().clear(None).await.unwrap();
    let _ = second.kill();
    let _ = second.wait();
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_an_injected_loss_stops_its_command_before_the_lease_passes() {
    run_with_an_injected_loss(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_an_injected_loss_stops_its_command_before_the_lease_passes_on_etcd() {
    run_with_an_injected_loss(Place::etcd()).await;
}

/// `leasehold chaos` takes `--server` like the other client commands, says
/// what it did and what is in force, and names a bad flag's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_drives_the_chaos_api() {
    let place = Place::local();
    let p = place.start(&["--enable-chaos"]);
    let c = client(&p).await;
    let a = c.acquire("x", "a@1", LONG, Duration::ZERO).await.unwrap();
    let url = p.url();
    let cli = |args: &[&str]| {
        Command::new(bin())
            .args(["chaos"])
            .args(args)
            .env("LEASEHOLD_SERVER", &url)
            .output()
            .unwrap()
    };
    let out = cli(&["fence", "x", "--writes", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("chaos fence x:") && said.contains("in force: 1 writes to fence"),
        "{said}"
    );
    assert!(matches!(
        c.checked_write("x", a.lease.token, b"k", b"v".to_vec())
            .await,
        Err(ClientError::Fenced { .. })
    ));
    let out = cli(&["delay", "x", "--by", "2m"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("by") && err.contains("60s"), "{err}");
    let out = cli(&["clear"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("every job"));
    let out = cli(&["expire", "x"]);
    assert!(out.status.success());
    assert_eq!(c.get_lease("x").await.unwrap().holder, None);
    p.stop();
}
