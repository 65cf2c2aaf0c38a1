//! Counted leases (semaphores), `AcquireRequest.slots`, over real gRPC on
//! both backends: slots held at once with tokens of their own, the line
//! first come first served across slots, the count fixed by the first
//! counted grant, fencing per slot, a cancelled wait that gives up its
//! turn, and `leasehold run --slots` with a runner SIGKILLed.

use crate::common;

use std::time::Duration;

use leasehold::client::{AcquireOptions, Acquired, Client, ClientError};

const LONG: Duration = Duration::from_secs(60);

fn counted(slots: u32) -> AcquireOptions {
    AcquireOptions {
        slots,
        ..AcquireOptions::default()
    }
}

async fn acquire(c: &Client, job: &str, holder: &str, slots: u32, wait: Duration) -> Acquired {
    c.acquire_with(job, holder, LONG, wait, counted(slots))
        .await
        .unwrap()
}

/// A waiting counted Acquire, on a connection of its own.
fn waiter(url: &str, job: &str, holder: &str) -> tokio::task::JoinHandle<Acquired> {
    let (url, job, holder) = (url.to_owned(), job.to_owned(), holder.to_owned());
    tokio::spawn(async move {
        let c = Client::connect(&url).await.unwrap();
        acquire(&c, &job, &holder, 2, common::PATIENCE).await
    })
}

/// Two holders at once, each in its own slot with its own token; a live
/// holder asking again keeps its slot; two waiters are served in the
/// order they came, each in the slot that freed; a released slot's old
/// token is fenced on that slot's job, and the new holder's passes; the
/// slot's history names both; another count, or one over the limit, is
/// refused naming `slots` and changes nothing; the status page shows the
/// slots.
async fn slots_are_held_at_once_and_go_to_the_line_in_order(place: common::Place) {
    let server = place.start(&[]);
    let url = server.url();
    let c = Client::connect(&url).await.unwrap();
    let job = "nightly";

    let a = acquire(&c, job, "a", 2, Duration::ZERO).await;
    let b = acquire(&c, job, "b", 2, Duration::ZERO).await;
    assert!(a.acquired && b.acquired);
    let mut held = [
        (a.lease.job.as_str(), a.lease.slot),
        (b.lease.job.as_str(), b.lease.slot),
    ];
    held.sort();
    assert_eq!(held, [("nightly#0", 0), ("nightly#1", 1)]);
    assert_eq!((a.lease.token, b.lease.token), (1, 1), "a token per slot");
    assert_eq!((a.lease.slots, b.lease.slots), (2, 2));
    // Asking again keeps the slot and its token.
    let again = acquire(&c, job, "a", 2, Duration::ZERO).await;
    assert!(again.acquired);
    assert_eq!(
        (again.lease.job.as_str(), again.lease.token),
        (a.lease.job.as_str(), 1)
    );
    // Full: a third is not granted, and is shown a slot's holder.
    let busy = acquire(&c, job, "c", 2, Duration::ZERO).await;
    assert!(!busy.acquired);
    assert!(busy.lease.job.starts_with("nightly#"), "{:?}", busy.lease);

    // Two waiters: w1 holds the line's turn, w2 waits behind it.
    let w1 = waiter(&url, job, "w1");
    common::eventually("w1 to hold the line's turn", || async {
        let l = c.get_lease(job).await.ok()?;
        (l.holder.as_deref() == Some("w1")).then_some(())
    })
    .await;
    let w2 = waiter(&url, job, "w2");
    // The line as ListWaiters tells it: w1, which holds the turn, first.
    common::eventually("w2 to wait behind w1", || async {
        let w = c.list_waiters(job, 0).await.ok()?;
        let line: Vec<&str> = w.waiters.iter().map(|w| w.holder.as_str()).collect();
        (line == ["w1", "w2"] && w.waiting == 2).then_some(())
    })
    .await;

    // b's slot frees: the first waiter gets it, with that slot's next
    // token; then a's goes to the second.
    c.release(&b.lease.job, "b", 1).await.unwrap();
    let g1 = w1.await.unwrap();
    assert!(g1.acquired);
    assert_eq!(
        (g1.lease.job.as_str(), g1.lease.token),
        (b.lease.job.as_str(), 2)
    );
    c.release(&a.lease.job, "a", 1).await.unwrap();
    let g2 = w2.await.unwrap();
    assert!(g2.acquired);
    assert_eq!(
        (g2.lease.job.as_str(), g2.lease.token),
        (a.lease.job.as_str(), 2)
    );

    // Fenced per slot: b's old token on its slot's job is refused; the
    // slot's new holder writes.
    let stale = c
        .checked_write(&b.lease.job, 1, b"progress", b"late".to_vec())
        .await;
    assert!(
        matches!(
            stale,
            Err(ClientError::Fenced {
                current_token: Some(2),
                ..
            })
        ),
        "{stale:?}"
    );
    c.checked_write(&g1.lease.job, 2, b"progress", b"w1".to_vec())
        .await
        .unwrap();
    let history = c.history(&b.lease.job, 10).await.unwrap();
    let tenures: Vec<(u64, &str)> = history
        .iter()
        .map(|t| (t.token, t.holder.as_str()))
        .collect();
    assert_eq!(tenures, [(2, "w1"), (1, "b")]);

    // Another count is refused, naming `slots` and the job's count, and
    // changes nothing.
    let e = c
        .acquire_with(job, "d", LONG, Duration::ZERO, counted(3))
        .await
        .unwrap_err();
    match &e {
        ClientError::InvalidArgument { field, message } => {
            assert_eq!(field.as_deref(), Some("slots"), "{e}");
            assert!(message.contains("has 2 slots"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let e = c
        .acquire_with(job, "d", LONG, Duration::ZERO, counted(101))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::InvalidArgument { field: Some(f), message } if f == "slots" && message.contains("100")),
        "{e:?}"
    );
    for (slot, holder) in [(&g1.lease.job, "w1"), (&g2.lease.job, "w2")] {
        let l = c.get_lease(slot).await.unwrap();
        assert_eq!((l.holder.as_deref(), l.token), (Some(holder), 2));
    }
    let count = c.read(job, b"slots").await.unwrap();
    assert_eq!((count.found, count.value), (true, b"2".to_vec()));

    // The status page shows the counted job's slots, and a slot's job its
    // counted job.
    let (code, body) = common::admin_request(server.admin, "/api/job?name=nightly").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""slots":2"#), "{body}");
    let (code, body) = common::admin_request(server.admin, "/api/job?name=nightly%231").await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(r#""slot_of":{"job":"nightly","slot":1,"slots":2}"#),
        "{body}"
    );
    assert!(body.contains(r#""token":2,"holder":"w1""#), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_held_at_once_and_go_to_the_line_in_order_on_the_single_node() {
    slots_are_held_at_once_and_go_to_the_line_in_order(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_held_at_once_and_go_to_the_line_in_order_on_etcd() {
    slots_are_held_at_once_and_go_to_the_line_in_order(common::Place::etcd()).await;
}

/// A waiter that holds the line's turn and goes away (its call is
/// cancelled) gives the turn up at once: the next waiter gets the slot
/// that frees, long before the turn's TTL would have run out.
async fn a_cancelled_wait_gives_up_its_turn(place: common::Place) {
    let server = place.start(&[]);
    let url = server.url();
    let c = Client::connect(&url).await.unwrap();
    let job = "turns";
    let a = acquire(&c, job, "a", 2, Duration::ZERO).await;
    assert!(acquire(&c, job, "b", 2, Duration::ZERO).await.acquired);
    // The first waiter asks with a TTL far longer than the test's patience:
    // its turn, if kept, would hold up the line for all of it.
    let gone = {
        let url = url.clone();
        tokio::spawn(async move {
            let c = Client::connect(&url).await.unwrap();
            c.acquire_with(
                job,
                "gone",
                Duration::from_secs(600),
                common::PATIENCE,
                counted(2),
            )
            .await
        })
    };
    common::eventually("the first waiter to hold the turn", || async {
        let l = c.get_lease(job).await.ok()?;
        (l.holder.as_deref() == Some("gone")).then_some(())
    })
    .await;
    let next = waiter(&url, job, "next");
    common::eventually("the next to wait behind it", || async {
        let w = c.list_waiters(job, 0).await.ok()?;
        (w.waiting == 2).then_some(())
    })
    .await;
    gone.abort();
    common::eventually("the turn to pass to the next waiter", || async {
        let l = c.get_lease(job).await.ok()?;
        (l.holder.as_deref() == Some("next")).then_some(())
    })
    .await;
    c.release(&a.lease.job, "a", a.lease.token).await.unwrap();
    let g = next.await.unwrap();
    assert!(g.acquired);
    assert_eq!(g.lease.job, a.lease.job);
    // Nobody holds the turn once the line is empty, and nobody is listed.
    let l = c.get_lease(job).await.unwrap();
    assert_eq!(l.holder, None, "{l:?}");
    let w = c.list_waiters(job, 0).await.unwrap();
    assert_eq!((w.waiters.len(), w.waiting), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_gives_up_its_turn_on_the_single_node() {
    a_cancelled_wait_gives_up_its_turn(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_gives_up_its_turn_on_etcd() {
    a_cancelled_wait_gives_up_its_turn(common::Place::etcd()).await;
}

/// `leasehold run --slots 2`, three runners: two run their commands at
/// once, each told its slot's job, slot and token; the third waits. A
/// leading runner SIGKILLed (its lease is bound to its connection) hands
/// its slot to the third at once, with that slot's next token.
async fn run_with_slots_runs_n_at_once(place: common::Place) {
    let server = place.start(&[]);
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let runner = |i: usize| {
        let out = dir.path().join(format!("runner{i}"));
        std::process::Command::new(common::bin())
            .args(["run", "--server", &url, "--slots", "2", "--ttl", "60s"])
            .args(["--name", &format!("r{i}"), "batch", "--", "sh", "-c"])
            .arg(format!(
                "echo \"$LEASEHOLD_JOB $LEASEHOLD_SLOT $LEASEHOLD_TOKEN\" > {}.tmp && mv {0}.tmp {0} && exec sleep 600",
                out.display()
            ))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let said = |i: usize| std::fs::read_to_string(dir.path().join(format!("runner{i}"))).ok();
    let mut first = runner(0);
    let second = runner(1);
    let (s0, s1) = common::eventually("two runners to lead", || async {
        Some((said(0)?, said(1)?))
    })
    .await;
    let mut slots = [s0.trim().to_owned(), s1.trim().to_owned()];
    slots.sort();
    assert_eq!(slots, ["batch#0 0 1", "batch#1 1 1"]);
    let third = runner(2);
    let c = Client::connect(&url).await.unwrap();
    common::eventually("the third runner to wait in line", || async {
        let l = c.get_lease("batch").await.ok()?;
        l.holder.is_some().then_some(())
    })
    .await;
    assert_eq!(said(2), None, "a third runs while two slots are held");
    let killed = s0.split_whitespace().next().unwrap().to_owned();
    first.kill().unwrap();
    first.wait().unwrap();
    let s2 = common::eventually("the third runner to lead", || async { said(2) }).await;
    let slot = killed.rsplit('#').next().unwrap();
    assert_eq!(s2.trim(), format!("{killed} {slot} 2"));
    for mut p in [second, third] {
        // SAFETY: a signal to our own child, which we have not reaped.
        unsafe { libc::kill(p.id() as i32, libc::SIGTERM) };
        p.wait().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_slots_runs_n_at_once_on_the_single_node() {
    run_with_slots_runs_n_at_once(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_slots_runs_n_at_once_on_etcd() {
    run_with_slots_runs_n_at_once(common::Place::etcd()).await;
}

/// `leasehold acquire --slots`: the grant names its slot's job and slot,
/// in text and JSON; a count outside 2 to 100 is refused before anything
/// is sent, naming the flag; another count than the job's, by the
/// server, naming `slots`.
async fn the_cli_acquires_a_slot(place: common::Place) {
    let server = place.start(&[]);
    let url = server.url();
    let cli = |args: &[&str]| common::cli(&url, args);
    let (code, text, err) = cli(&[
        "acquire", "cron", "--slots", "3", "--holder", "a", "--ttl", "60s",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        text.trim(),
        "acquired job=cron#0 holder=a token=1 slot=0 slots=3"
    );
    let (code, text, err) = cli(&[
        "acquire", "cron", "--slots", "3", "--holder", "b", "--ttl", "60s", "--output", "json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(
        (
            &v["lease"]["job"],
            &v["lease"]["slot"],
            &v["lease"]["slots"]
        ),
        (&"cron#1".into(), &1.into(), &3.into()),
        "{text}"
    );
    for bad in ["1", "101"] {
        let (code, _, err) = cli(&["acquire", "cron", "--slots", bad]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("--slots") && err.contains("2..=100"), "{err}");
    }
    let (code, _, err) = cli(&["acquire", "cron", "--slots", "2", "--holder", "c"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("slots") && err.contains("has 3 slots"),
        "{err}"
    );
    let (_, text, _) = cli(&["status", "cron"]);
    assert_eq!(
        text.lines().count(),
        4,
        "the job and its two held slots: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_acquires_a_slot_on_the_single_node() {
    the_cli_acquires_a_slot(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_acquires_a_slot_on_etcd() {
    the_cli_acquires_a_slot(common::Place::etcd()).await;
}

/// The Rust client: three electors with `slots = 2`: two lead at once,
/// each on its slot's job with a token of its own; the third waits, and
/// leads in the slot the first resigns, with that slot's next token; the
/// first's token is then fenced on that slot's job. A counted lock's job
/// is its slot's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn electors_and_locks_lead_in_slots() {
    use leasehold::client::{Elector, ElectorOptions, LockOptions};
    let place = common::Place::local();
    let server = place.start(&[]);
    let c = Client::connect(&server.url()).await.unwrap();
    let options = || ElectorOptions {
        slots: 2,
        ..ElectorOptions::default()
    };
    let ttl = Duration::from_secs(10);
    let mut a = Elector::start_with(c.clone(), "pool", "a", ttl, options());
    let mut b = Elector::start_with(c.clone(), "pool", "b", ttl, options());
    let ta = a.elected().await.unwrap();
    let tb = b.elected().await.unwrap();
    let (ja, jb) = (a.lease_job().unwrap(), b.lease_job().unwrap());
    let mut both = [(ja.as_str(), a.slot()), (jb.as_str(), b.slot())];
    both.sort();
    assert_eq!(both, [("pool#0", Some(0)), ("pool#1", Some(1))]);
    assert_eq!((ta, tb), (1, 1));
    let mut third = Elector::start_with(c.clone(), "pool", "c", ttl, options());
    common::eventually("the third elector to hold the line's turn", || async {
        let l = c.get_lease("pool").await.ok()?;
        (l.holder.as_deref() == Some(third.holder())).then_some(())
    })
    .await;
    assert_eq!(third.role().token(), None, "three lead in two slots");
    a.resign().await;
    let tc = third.elected().await.unwrap();
    assert_eq!((third.lease_job().as_deref(), tc), (Some(ja.as_str()), 2));
    let stale = c.checked_write(&ja, ta, b"k", b"late".to_vec()).await;
    assert!(
        matches!(stale, Err(ClientError::Fenced { .. })),
        "{stale:?}"
    );
    c.checked_write(&ja, tc, b"k", b"c".to_vec()).await.unwrap();
    // Renewed on the slot's job: still held after several TTL/3 rounds.
    tokio::time::sleep(ttl / 2).await;
    assert_eq!(
        c.get_lease(&ja).await.unwrap().holder.as_deref(),
        Some(third.holder())
    );
    b.resign().await;
    third.resign().await;

    let lock = c
        .lock_with(
            "pool",
            ttl,
            LockOptions {
                slots: 2,
                ..LockOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(lock.job().starts_with("pool#"), "{}", lock.job());
    c.checked_write(lock.job(), lock.token(), b"k", b"lock".to_vec())
        .await
        .unwrap();
    lock.release().await;
}
