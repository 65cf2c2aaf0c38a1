//! Leadership that moves in milliseconds, on real server processes and
//! both backends: a lease bound to its connection is released when the
//! client's end closes (a SIGKILLed leader), not when it goes silent (a
//! SIGSTOPped one) nor when a stream ends with an error on a live
//! connection; `TransferLease` hands a lease to a named or the first
//! waiter, refuses with NO_SUCCESSOR or LEASE_LOST and changes nothing,
//! and hands over once when two transfers (or a transfer and the expiry)
//! race; a leader behind a dropped route (a network namespace) keeps its
//! lease for the TTL; `leasehold run` hands over on SIGTERM; a preferred candidate
//! waits ahead of the others and the holder is told of it. Each tenure's
//! end is checked in the history.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Place, ServerProcess};
use leasehold::client::{
    AcquireOptions, Client, ClientError, Elector, ElectorOptions, KeepAliveRenewal, RenewOutcome,
    Role,
};
use leasehold::proto;
use leasehold::proto::tenure::End;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Far longer than any step waits: a lease that moved by expiry fails.
const LONG: Duration = Duration::from_secs(60);

/// A client on a connection of its own.
async fn client(p: &ServerProcess) -> Client {
    Client::connect(&p.url()).await.unwrap()
}

/// How the tenure of `token` ended.
async fn end_of(c: &Client, job: &str, token: u64) -> Option<End> {
    c.history(job, 100)
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.token == token)
        .and_then(|t| t.end)
}

/// A waiting Acquire of `holder`, on its own connection, and when it
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
        // Keep the connection (and any binding) until the test is done.
        std::mem::forget(c);
        (a, Instant::now())
    })
}

/// A `leasehold run` process, killed (with its command) if a test fails.
struct Runner {
    child: Child,
    /// A file its command creates when it starts: the runner leads, and
    /// knows it.
    started: tempfile::TempPath,
}

impl Runner {
    fn id(&self) -> u32 {
        self.child.id()
    }

    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait()
    }

    /// Waits until its command has started.
    async fn leads(&self) {
        common::eventually("the runner's command starts", || async {
            std::fs::metadata(&self.started).is_ok().then_some(())
        })
        .await
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `leasehold run` leading `job` with `extra` flags, its command a sleep
/// that first marks it started.
fn runner(p: &ServerProcess, job: &str, ttl: &str, extra: &[&str]) -> Runner {
    runner_via(Command::new(common::bin()), &p.url(), job, ttl, extra)
}

/// [`runner`] run by `cmd` (this binary, or a wrapper of it), on `url`.
fn runner_via(mut cmd: Command, url: &str, job: &str, ttl: &str, extra: &[&str]) -> Runner {
    let started = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    std::fs::remove_file(&started).unwrap();
    let script = format!("touch '{}'; exec sleep 1000", started.display());
    let child = cmd
        .args(["run", "--server", url, "--ttl", ttl, "--name", "r"])
        .args(extra)
        .args([job, "--", "sh", "-c", &script])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("start leasehold run");
    Runner { child, started }
}

async fn held_by_runner(c: &Client, job: &str) -> u64 {
    common::eventually("the runner leads", || async {
        let l = c.get_lease(job).await.unwrap();
        l.holder
            .as_deref()
            .is_some_and(|h| h.starts_with("r@"))
            .then_some(l.token)
    })
    .await
}

/// A SIGKILLed leader whose lease is bound (`leasehold run`'s default)
/// is replaced by the waiter as soon as the server sees its connection
/// close: long before the TTL, with the next token; its history says
/// `connection closed`.
async fn killed_bound_leader_hands_over_at_once(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let ttl = Duration::from_secs(30);
    let mut r = runner(&p, "killed", "30s", &[]);
    let token = held_by_runner(&c, "killed").await;
    r.leads().await;
    let waiter = wait_for(&p, "killed", "next", ttl);
    p.wait_for_waiters(1).await;
    let killed = Instant::now();
    common::signal(r.id(), libc::SIGKILL);
    let _ = r.wait();
    let (a, at) = waiter.await.unwrap();
    assert!(a.acquired);
    assert_eq!(a.lease.token, token + 1);
    let took = at - killed;
    println!("bound leader SIGKILLed: the waiter was granted after {took:?}");
    assert!(
        took < ttl / 2,
        "granted after {took:?}: by expiry, not by the close"
    );
    assert_eq!(
        end_of(&c, "killed", token).await,
        Some(End::ConnectionClosed)
    );
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_bound_leader_hands_over_at_once() {
    killed_bound_leader_hands_over_at_once(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_bound_leader_hands_over_at_once_on_etcd() {
    killed_bound_leader_hands_over_at_once(Place::etcd()).await;
}

/// The runner's lease on `job` (`token`, TTL 4 s), whose connection went
/// silent at `since`, is still its own 1.5 s later, then passes to the
/// waiter by expiry (at least 2 s after `since`: its last renewal, every
/// third of the TTL, came before); the history says so. Returns how long
/// after `since` it passed.
async fn kept_for_the_ttl(
    c: &Client,
    job: &str,
    token: u64,
    since: Instant,
    waiter: tokio::task::JoinHandle<(leasehold::client::Acquired, Instant)>,
) -> Duration {
    tokio::time::sleep_until((since + Duration::from_millis(1500)).into()).await;
    let l = c.get_lease(job).await.unwrap();
    assert_eq!(l.token, token, "the silent leader's lease was taken early");
    assert!(l.holder.as_deref().is_some_and(|h| h.starts_with("r@")));
    let (a, at) = waiter.await.unwrap();
    assert_eq!(a.lease.token, token + 1);
    let took = at - since;
    assert!(took >= Duration::from_secs(2), "taken after {took:?}");
    assert_eq!(end_of(c, job, token).await, Some(End::TakenOver));
    took
}

/// A SIGSTOPped leader's connection is silent, not closed: its bound
/// lease is kept for the TTL, then taken over by expiry.
async fn stopped_bound_leader_keeps_its_lease_for_the_ttl(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let r = runner(&p, "stopped", "4s", &[]);
    let token = held_by_runner(&c, "stopped").await;
    r.leads().await;
    let waiter = wait_for(&p, "stopped", "next", Duration::from_secs(4));
    p.wait_for_waiters(1).await;
    common::signal(r.id(), libc::SIGSTOP);
    common::wait_stopped(r.id());
    kept_for_the_ttl(&c, "stopped", token, Instant::now(), waiter).await;
    common::signal(r.id(), libc::SIGCONT);
    drop(r);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_bound_leader_keeps_its_lease_for_the_ttl() {
    stopped_bound_leader_keeps_its_lease_for_the_ttl(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_bound_leader_keeps_its_lease_for_the_ttl_on_etcd() {
    stopped_bound_leader_keeps_its_lease_for_the_ttl(Place::etcd()).await;
}

/// A KeepAlive stream that binds, then ends with an error status (a
/// message over the limit) while its connection lives on, frees
/// nothing; closing the connection then does.
async fn an_error_status_on_a_live_connection_keeps_the_lease(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let ttl = Duration::from_secs(30);
    let channel = common::plain_channel(&p.url()).await;
    let mine = Client::from_channel(channel.clone());
    let a = mine
        .acquire("errs", "me", ttl, Duration::ZERO)
        .await
        .unwrap();
    assert!(a.acquired);
    let token = a.lease.token;
    let renewal = |n: usize| proto::KeepAliveRequest {
        id: n as u64,
        renewals: (0..n)
            .map(|_| proto::KeepAliveRenewal {
                job: "errs".into(),
                holder: "me".into(),
                token,
                ttl: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
            })
            .collect(),
        bind_to_stream: true,
    };
    let mut raw = proto::leases_client::LeasesClient::new(channel.clone());
    let (tx, rx) = mpsc::channel(4);
    let mut answers = raw
        .keep_alive(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(renewal(1)).await.unwrap();
    let first = answers.message().await.unwrap().unwrap();
    assert_eq!(
        first.results[0].outcome,
        proto::keep_alive_result::Outcome::Renewed as i32
    );
    // Over the limit of renewals in one message: the stream ends.
    tx.send(renewal(1001)).await.unwrap();
    let end = answers.message().await.unwrap_err();
    assert_eq!(end.code(), tonic::Code::InvalidArgument);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let l = c.get_lease("errs").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("me"), token));
    // Now the connection closes: the lease goes with it.
    drop((mine, raw, answers, tx, channel));
    common::eventually("the bound lease is released", || async {
        c.get_lease("errs")
            .await
            .unwrap()
            .holder
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(end_of(&c, "errs", token).await, Some(End::ConnectionClosed));
    // An Acquire that does not ask to be bound is not: its client closing
    // leaves the lease to its TTL.
    let other = client(&p).await;
    let a = other
        .acquire("unbound", "me", ttl, Duration::ZERO)
        .await
        .unwrap();
    let bound = client(&p).await;
    let b = bound
        .acquire_with(
            "bound",
            "me",
            ttl,
            Duration::ZERO,
            AcquireOptions {
                bind_to_stream: true,
                ..AcquireOptions::default()
            },
        )
        .await
        .unwrap();
    drop((other, bound));
    common::eventually("the bound one is released", || async {
        c.get_lease("bound")
            .await
            .unwrap()
            .holder
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        end_of(&c, "bound", b.lease.token).await,
        Some(End::ConnectionClosed)
    );
    let l = c.get_lease("unbound").await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("me"), a.lease.token));
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_status_on_a_live_connection_keeps_a_bound_lease() {
    an_error_status_on_a_live_connection_keeps_the_lease(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_status_on_a_live_connection_keeps_a_bound_lease_on_etcd() {
    an_error_status_on_a_live_connection_keeps_the_lease(Place::etcd()).await;
}

/// TransferLease: to a named waiter, to the first, to nobody, with a
/// stale token, two at once; each tenure's end in the history.
async fn transfers(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let ttl = Duration::from_secs(30);
    let job = "moves";
    let a = c.acquire(job, "a", ttl, Duration::ZERO).await.unwrap();
    let t1 = a.lease.token;
    let b = wait_for(&p, job, "b", ttl);
    p.wait_for_waiters(1).await;
    let cc = wait_for(&p, job, "c", ttl);
    p.wait_for_waiters(2).await;

    // To a named waiter, passing the first in line.
    let sent = Instant::now();
    let next = c
        .transfer_lease(job, "a", t1, Some("c"), None)
        .await
        .unwrap();
    assert_eq!((next.holder.as_deref(), next.token), (Some("c"), t1 + 1));
    let (granted, at) = cc.await.unwrap();
    assert!(granted.acquired);
    assert_eq!(granted.lease.token, t1 + 1);
    println!(
        "transfer to a named waiter: its Acquire returned {:?} after the call",
        at - sent
    );
    assert_eq!(end_of(&c, job, t1).await, Some(End::Transferred));
    // The old holder's token is stale now, for everything.
    match c.renew(job, "a", t1, ttl).await {
        Err(ClientError::LeaseLost { .. }) => {}
        other => panic!("renew with the transferred token: {other:?}"),
    }
    match c.transfer_lease(job, "a", t1, None, None).await {
        Err(ClientError::LeaseLost { .. }) => {}
        other => panic!("transfer with a stale token: {other:?}"),
    }
    match c.checked_write(job, t1, b"k", b"stale".to_vec()).await {
        Err(ClientError::Fenced { .. }) => {}
        other => panic!("write with the transferred token: {other:?}"),
    }

    // To the first in line: b, still waiting.
    let next = c
        .transfer_lease(job, "c", t1 + 1, None, None)
        .await
        .unwrap();
    assert_eq!((next.holder.as_deref(), next.token), (Some("b"), t1 + 2));
    let (granted, _) = b.await.unwrap();
    assert_eq!(granted.lease.token, t1 + 2);

    // Nobody waits, or not the one named: nothing changes.
    match c.transfer_lease(job, "b", t1 + 2, None, None).await {
        Err(ClientError::NoSuccessor(_)) => {}
        other => panic!("transfer with nobody waiting: {other:?}"),
    }
    let d = wait_for(&p, job, "d", ttl);
    p.wait_for_waiters(1).await;
    match c.transfer_lease(job, "b", t1 + 2, Some("zz"), None).await {
        Err(ClientError::NoSuccessor(_)) => {}
        other => panic!("transfer to a holder that does not wait: {other:?}"),
    }
    let l = c.get_lease(job).await.unwrap();
    assert_eq!((l.holder.as_deref(), l.token), (Some("b"), t1 + 2));
    c.renew(job, "b", t1 + 2, ttl).await.unwrap();

    // Two transfers at once: one hands over, the other finds the lease
    // gone.
    let e = wait_for(&p, job, "e", ttl);
    p.wait_for_waiters(2).await;
    let c2 = client(&p).await;
    let (x, y) = tokio::join!(
        c.transfer_lease(job, "b", t1 + 2, None, None),
        c2.transfer_lease(job, "b", t1 + 2, Some("e"), None)
    );
    let won = [&x, &y].iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "two transfers of one grant: {x:?} and {y:?}");
    for r in [&x, &y] {
        assert!(
            matches!(r, Ok(_) | Err(ClientError::LeaseLost { .. })),
            "the loser is told LEASE_LOST: {r:?}"
        );
    }
    let l = c.get_lease(job).await.unwrap();
    assert_eq!(l.token, t1 + 3);
    assert_eq!(end_of(&c, job, t1 + 1).await, Some(End::Transferred));
    assert_eq!(end_of(&c, job, t1 + 2).await, Some(End::Transferred));
    // The one not handed the lease still waits; hand it over too.
    let winner = l.holder.clone().unwrap();
    let next = c
        .transfer_lease(job, &winner, t1 + 3, None, None)
        .await
        .unwrap();
    assert_eq!(next.token, t1 + 4);
    let (d, e) = (d.await.unwrap().0, e.await.unwrap().0);
    let mut tokens = [d.lease.token, e.lease.token];
    tokens.sort();
    assert_eq!(tokens, [t1 + 3, t1 + 4]);

    // Bad input names its field and changes nothing.
    match c
        .transfer_lease(job, &winner, t1 + 4, Some(&"x".repeat(300)), None)
        .await
    {
        Err(ClientError::InvalidArgument { field, .. }) => {
            assert_eq!(field.as_deref(), Some("to_holder"))
        }
        other => panic!("a successor name too long: {other:?}"),
    }
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_to_a_named_or_the_first_waiter_and_refusals() {
    transfers(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_to_a_named_or_the_first_waiter_and_refusals_on_etcd() {
    transfers(Place::etcd()).await;
}

/// A transfer racing the lease's expiry: the waiter is granted the next
/// token exactly once, by the transfer or by the expiry, and the history
/// says which.
async fn transfer_at_expiry(place: Place, ttl: Duration) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let mut outcomes = (0, 0);
    for i in 0..4 {
        let job = format!("race{i}");
        let a = c.acquire(&job, "a", ttl, Duration::ZERO).await.unwrap();
        let granted_at = Instant::now();
        let w = wait_for(&p, &job, "w", Duration::from_secs(30));
        p.wait_for_waiters(1).await;
        // Aim at the deadline, a little before or after.
        let aim = ttl + Duration::from_millis(40 * i) - Duration::from_millis(60);
        tokio::time::sleep_until((granted_at + aim).into()).await;
        let r = c.transfer_lease(&job, "a", a.lease.token, None, None).await;
        let (got, _) = w.await.unwrap();
        assert_eq!(got.lease.token, a.lease.token + 1);
        let end = end_of(&c, &job, a.lease.token).await;
        match r {
            Ok(l) => {
                assert_eq!(l.token, a.lease.token + 1);
                assert_eq!(end, Some(End::Transferred));
                outcomes.0 += 1;
            }
            Err(ClientError::LeaseLost { .. }) => {
                assert_eq!(end, Some(End::TakenOver));
                outcomes.1 += 1;
            }
            Err(e) => panic!("transfer at expiry: {e}"),
        }
        let l = c.get_lease(&job).await.unwrap();
        assert_eq!(l.token, a.lease.token + 1, "one grant, not two");
    }
    println!(
        "transfers at expiry: {} handed over, {} expired first",
        outcomes.0, outcomes.1
    );
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_racing_the_expiry_grants_once() {
    transfer_at_expiry(Place::local(), Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_racing_the_expiry_grants_once_on_etcd() {
    transfer_at_expiry(Place::etcd(), Duration::from_secs(2)).await;
}

/// The Rust Elector: a bound elector in a process of its own... here two
/// electors; `transfer` hands over, the role changes before it returns,
/// and the elector campaigns again behind its successor.
async fn elector_transfer(place: Place) {
    let p = place.start(&[]);
    let ttl = Duration::from_secs(6);
    let opts = ElectorOptions {
        bind_to_stream: true,
        ..ElectorOptions::default()
    };
    let mut first = Elector::start_with(client(&p).await, "el", "one", ttl, opts.clone());
    let t1 = first.elected().await.unwrap();
    match first.transfer(None).await {
        Err(ClientError::NoSuccessor(_)) => {}
        other => panic!("transfer with nobody waiting: {other:?}"),
    }
    assert_eq!(first.role(), Role::Leader { token: t1 });
    let mut second = Elector::start_with(client(&p).await, "el", "two", ttl, opts);
    p.wait_for_waiters(1).await;
    let next = first.transfer(None).await.unwrap();
    assert_eq!(next.token, t1 + 1);
    assert_eq!(next.holder.as_deref(), Some(second.holder()));
    assert_eq!(first.role(), Role::Follower);
    assert_eq!(second.elected().await.unwrap(), t1 + 1);
    match first.transfer(None).await {
        Err(ClientError::NotLeader) => {}
        other => panic!("transfer by a follower: {other:?}"),
    }
    // The first campaigns again, behind the second: hand it back.
    p.wait_for_waiters(1).await;
    let back = second.transfer(Some(first.holder())).await.unwrap();
    assert_eq!(back.token, t1 + 2);
    assert_eq!(first.elected().await.unwrap(), t1 + 2);
    second.resign().await;
    first.resign().await;
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elector_hands_over_and_campaigns_again() {
    elector_transfer(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elector_hands_over_and_campaigns_again_on_etcd() {
    elector_transfer(Place::etcd()).await;
}

/// `leasehold run` hands over on SIGTERM: its command is stopped, then
/// the waiting runner is granted the next token by a transfer.
async fn run_hands_over_on_sigterm(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let mut a = runner(&p, "deploy", "30s", &[]);
    let token = held_by_runner(&c, "deploy").await;
    a.leads().await;
    let mut b = runner(&p, "deploy", "30s", &["--no-handover"]);
    p.wait_for_waiters(1).await;
    common::signal(a.id(), libc::SIGTERM);
    let status = a.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let l = c.get_lease("deploy").await.unwrap();
    assert_eq!(l.token, token + 1);
    assert!(l.holder.as_deref().is_some_and(|h| h.starts_with("r@")));
    assert_eq!(end_of(&c, "deploy", token).await, Some(End::Transferred));
    // With --no-handover, a release instead (which the next runner
    // is granted from).
    // (Once b knows that it leads: a SIGTERM before that stops its
    // campaign, whose grant is given back or released with its
    // connection instead.)
    b.leads().await;
    let d = runner(&p, "deploy", "30s", &[]);
    p.wait_for_waiters(1).await;
    common::signal(b.id(), libc::SIGTERM);
    assert_eq!(b.wait().unwrap().code(), Some(143));
    assert_eq!(end_of(&c, "deploy", token + 1).await, Some(End::Released));
    drop(d);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_hands_over_on_sigterm_to_the_next_runner() {
    run_hands_over_on_sigterm(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_hands_over_on_sigterm_to_the_next_runner_on_etcd() {
    run_hands_over_on_sigterm(Place::etcd()).await;
}

/// A preferred candidate waits ahead of the others, and the holder that
/// is not preferred is told so in its renewals; an elector configured to
/// yield hands over at its next renewal, and a preferred leader is told
/// nothing.
async fn preferred_leader(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let ttl = Duration::from_secs(30);
    let job = "pref";
    let a = c.acquire(job, "a", ttl, Duration::ZERO).await.unwrap();
    let t1 = a.lease.token;
    let b = wait_for(&p, job, "b", ttl);
    p.wait_for_waiters(1).await;
    assert!(
        !c.renew_lease(job, "a", t1, ttl)
            .await
            .unwrap()
            .successor_waiting
    );
    // A KeepAlive stream's renewals say the same as unary ones.
    let mut ka = c.keep_alive().await.unwrap();
    let mut streamed = async |holder: &str, token: u64| -> bool {
        let batch = [KeepAliveRenewal::new(job, holder, token, ttl)];
        match &ka.renew(&batch).await.unwrap()[..] {
            [RenewOutcome::Renewed(r)] => r.successor_waiting,
            out => panic!("{out:?}"),
        }
    };
    assert!(!streamed("a", t1).await, "a plain waiter is no successor");
    // A preferred candidate comes after b, and is served before it.
    let (url, j) = (p.url(), job.to_owned());
    let pref = tokio::spawn(async move {
        let c = Client::connect(&url).await.unwrap();
        let opts = AcquireOptions {
            preferred: true,
            ..AcquireOptions::default()
        };
        let a = c.acquire_with(&j, "p", ttl, LONG, opts).await.unwrap();
        std::mem::forget(c);
        a
    });
    p.wait_for_waiters(2).await;
    let r = c.renew_lease(job, "a", t1, ttl).await.unwrap();
    assert!(
        r.successor_waiting,
        "the holder is told a preferred candidate waits"
    );
    assert!(
        streamed("a", t1).await,
        "and told so on a KeepAlive stream too"
    );
    c.release(job, "a", t1).await.unwrap();
    let got = pref.await.unwrap();
    assert!(got.acquired);
    assert_eq!(
        got.lease.token,
        t1 + 1,
        "the preferred candidate was served before b"
    );
    // A preferred holder is told nothing, whoever waits.
    let r = c.renew_lease(job, "p", t1 + 1, ttl).await.unwrap();
    assert!(!r.successor_waiting);
    assert!(!streamed("p", t1 + 1).await);
    c.release(job, "p", t1 + 1).await.unwrap();
    assert_eq!(b.await.unwrap().0.lease.token, t1 + 2);

    // Electors: one that yields hands over to a preferred one at its
    // next renewal (every ttl/3).
    let ettl = Duration::from_secs(3);
    let yielding = ElectorOptions {
        yield_to_preferred: true,
        ..ElectorOptions::default()
    };
    let mut plain = Elector::start_with(client(&p).await, "el-pref", "plain", ettl, yielding);
    let t = plain.elected().await.unwrap();
    let preferred = ElectorOptions {
        preferred: true,
        ..ElectorOptions::default()
    };
    let mut chosen = Elector::start_with(client(&p).await, "el-pref", "chosen", ettl, preferred);
    assert_eq!(chosen.elected().await.unwrap(), t + 1);
    assert_eq!(end_of(&c, "el-pref", t).await, Some(End::Transferred));
    // The one that yielded campaigns again, behind it, and is not handed
    // the lease back.
    p.wait_for_waiters(1).await;
    tokio::time::sleep(ettl).await;
    assert_eq!(chosen.role(), Role::Leader { token: t + 1 });
    assert_eq!(plain.role(), Role::Follower);
    chosen.resign().await;
    assert_eq!(plain.elected().await.unwrap(), t + 2);
    plain.resign().await;
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_candidate_is_served_first_and_the_holder_told() {
    preferred_leader(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_candidate_is_served_first_and_the_holder_told_on_etcd() {
    preferred_leader(Place::etcd()).await;
}

/// A network namespace joined to this one by a veth pair, for a client
/// whose route can be dropped: removed on drop. `None` where namespaces
/// cannot be made (not root, or a sandbox that forbids them).
struct Netns {
    name: String,
    host_if: String,
    host_ip: String,
}

impl Netns {
    fn make() -> Option<Netns> {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 16;
        let id = (std::process::id() % 4000) * 16 + k;
        let n = Netns {
            name: format!("lh{id}"),
            host_if: format!("lhh{id}"),
            host_ip: format!("10.{}.{}.1", 200 + k, id % 250),
        };
        let peer_if = format!("lhn{id}");
        let peer_ip = format!("10.{}.{}.2", 200 + k, id % 250);
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let ns = n.name.as_str();
        let ok = ip(&["netns", "add", ns])
            && ip(&[
                "link", "add", &n.host_if, "type", "veth", "peer", "name", &peer_if,
            ])
            && ip(&["link", "set", &peer_if, "netns", ns])
            && ip(&[
                "addr",
                "add",
                &format!("{}/30", n.host_ip),
                "dev",
                &n.host_if,
            ])
            && ip(&["link", "set", &n.host_if, "up"])
            && ip(&[
                "netns",
                "exec",
                ns,
                "ip",
                "addr",
                "add",
                &format!("{peer_ip}/30"),
                "dev",
                &peer_if,
            ])
            && ip(&["netns", "exec", ns, "ip", "link", "set", &peer_if, "up"])
            && ip(&["netns", "exec", ns, "ip", "link", "set", "lo", "up"]);
        ok.then_some(n)
    }

    /// Drops the route: the host's end of the pair goes down, and packets
    /// between the namespaces stop, with no FIN and no RST.
    fn drop_route(&self) {
        let s = Command::new("ip")
            .args(["link", "set", &self.host_if, "down"])
            .status()
            .unwrap();
        assert!(s.success());
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// A TCP relay on `listen` to `to`, both ways, until the test ends.
async fn relay(listen: &str, to: std::net::SocketAddr) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind(listen).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut a, _)) = l.accept().await {
            tokio::spawn(async move {
                if let Ok(mut b) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                }
            });
        }
    });
    addr
}

/// A bound leader whose route is dropped (a real partition, made in a
/// network namespace): its connection goes silent, not closed, and its
/// lease is kept for the TTL, then taken over by expiry.
async fn partitioned_bound_leader_keeps_its_lease(place: Place) {
    let Some(ns) = Netns::make() else {
        println!("SKIPPED: no network namespace can be made here (needs root and `ip netns`)");
        return;
    };
    let p = place.start(&[]);
    let c = client(&p).await;
    let server: std::net::SocketAddr = p.url().trim_start_matches("http://").parse().unwrap();
    let hop = relay(&format!("{}:0", ns.host_ip), server).await;
    let mut in_ns = Command::new("ip");
    in_ns.args(["netns", "exec", &ns.name]).arg(common::bin());
    let r = runner_via(in_ns, &format!("http://{hop}"), "cut", "4s", &[]);
    let token = held_by_runner(&c, "cut").await;
    r.leads().await;
    let waiter = wait_for(&p, "cut", "next", Duration::from_secs(4));
    p.wait_for_waiters(1).await;
    ns.drop_route();
    let took = kept_for_the_ttl(&c, "cut", token, Instant::now(), waiter).await;
    println!("route dropped: the lease passed on after {took:?} (TTL 4 s)");
    drop(r);
    drop(ns);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_bound_leader_keeps_its_lease_for_the_ttl() {
    partitioned_bound_leader_keeps_its_lease(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_bound_leader_keeps_its_lease_for_the_ttl_on_etcd() {
    partitioned_bound_leader_keeps_its_lease(Place::etcd()).await;
}

/// A bound leader with a long TTL is idle between its renewals, longer
/// than the server's `--idle-timeout`: the server closes its connection,
/// which releases nothing, and the binding waits for the holder's next
/// renewal, on its new connection, and is bound there: that connection's
/// close then releases the lease.
async fn idle_closed_binding_follows_the_renewal(place: Place) {
    let p = place.start(&["--idle-timeout", "1s"]);
    let c = client(&p).await;
    let ttl = Duration::from_secs(30);
    let mine = client(&p).await;
    let opts = AcquireOptions {
        bind_to_stream: true,
        ..AcquireOptions::default()
    };
    let a = mine
        .acquire_with("idle", "me", ttl, Duration::ZERO, opts)
        .await
        .unwrap();
    let token = a.lease.token;
    // Idle past the timeout: the server closes the connection.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let l = c.get_lease("idle").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.token),
        (Some("me"), token),
        "a close by the server released it"
    );
    // The renewal reconnects, and the binding follows it.
    mine.renew("idle", "me", token, ttl).await.unwrap();
    drop(mine);
    common::eventually("the bound lease is released", || async {
        c.get_lease("idle")
            .await
            .unwrap()
            .holder
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(end_of(&c, "idle", token).await, Some(End::ConnectionClosed));
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_whose_connection_the_server_closed_follows_the_next_renewal() {
    idle_closed_binding_follows_the_renewal(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_whose_connection_the_server_closed_follows_the_next_renewal_on_etcd() {
    idle_closed_binding_follows_the_renewal(Place::etcd()).await;
}

/// `leasehold transfer`: hands over and prints the successor's lease;
/// with nobody waiting, says NO_SUCCESSOR and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_transfers_and_says_when_nobody_waits() {
    // The place outlives the server: its data dir goes with it.
    let place = Place::local();
    let p = place.start(&[]);
    let c = client(&p).await;
    let ttl = Duration::from_secs(30);
    let a = c.acquire("cli", "a", ttl, Duration::ZERO).await.unwrap();
    let cli = |args: &[&str]| {
        let out = Command::new(common::bin())
            .args(["transfer", "--server", &p.url(), "cli", "--holder"])
            .args(args)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let token = a.lease.token.to_string();
    let (code, _, err) = cli(&["a", "--token", &token]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("NO_SUCCESSOR"), "{err}");
    let waiter = wait_for(&p, "cli", "next", ttl);
    p.wait_for_waiters(1).await;
    let (code, out, err) = cli(&["a", "--token", &token, "--to", "next"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("holder=next") && out.contains(&format!("token={}", a.lease.token + 1)),
        "{out}"
    );
    assert_eq!(waiter.await.unwrap().0.lease.token, a.lease.token + 1);
    // The old token is stale now: LEASE_LOST, exit 4 as for any lost lease.
    let (code, _, err) = cli(&["a", "--token", &token]);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("LEASE_LOST"), "{err}");
    p.stop();
}

/// A lease acquired unbound, then renewed over a KeepAlive stream that
/// asks to bind, is bound to the stream's connection; an ElectorSet with
/// `bind_to_stream` binds every lease it holds.
async fn keep_alive_binds(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    let ttl = Duration::from_secs(30);
    let a = c.acquire("ka", "me", ttl, Duration::ZERO).await.unwrap();
    let renewer = client(&p).await;
    let mut ka = renewer.keep_alive_with(true).await.unwrap();
    let out = ka
        .renew(&[leasehold::client::KeepAliveRenewal::new(
            "ka",
            "me",
            a.lease.token,
            ttl,
        )])
        .await
        .unwrap();
    assert!(out[0].is_renewed());
    drop((ka, renewer));
    common::eventually(
        "the lease renewed on a binding stream is released",
        || async {
            c.get_lease("ka")
                .await
                .unwrap()
                .holder
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        end_of(&c, "ka", a.lease.token).await,
        Some(End::ConnectionClosed)
    );

    let opts = leasehold::client::ElectorSetOptions {
        bind_to_stream: true,
        ..Default::default()
    };
    let mut set = leasehold::client::ElectorSet::start_with(client(&p).await, "set", ttl, opts);
    let mut roles: Vec<_> = ["s1", "s2"].iter().map(|j| set.campaign(j)).collect();
    for r in &mut roles {
        r.wait_for(|r| r.token().is_some()).await.unwrap();
    }
    let led = set.leading();
    drop(set);
    for (job, token) in led {
        common::eventually(
            "the set's lease is released with its connection",
            || async {
                c.get_lease(&job)
                    .await
                    .unwrap()
                    .holder
                    .is_none()
                    .then_some(())
            },
        )
        .await;
        assert_eq!(end_of(&c, &job, token).await, Some(End::ConnectionClosed));
    }
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_stream_and_an_elector_set_bind_their_leases() {
    keep_alive_binds(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_stream_and_an_elector_set_bind_their_leases_on_etcd() {
    keep_alive_binds(Place::etcd()).await;
}
