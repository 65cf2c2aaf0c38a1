//! Each job's history of leaders (`GetHistory`, `leasehold history`):
//! grants, releases, expiries, takeovers, a deletion; the history across
//! SIGKILL and a restart; trimming to `--history-per-job` and paging;
//! `leasehold history --at` at, between and outside tenures. Both
//! backends, against real server processes.

use crate::common;

use std::process::Command;
use std::time::{Duration, SystemTime};

use common::{Place, ServerProcess};
use leasehold::client::{Client, Tenure};
use leasehold::proto::{self, tenure::End};
use tonic::Code;

const LONG: Duration = Duration::from_secs(30);

/// A TTL the place keeps that a test can wait out: 300 ms on the single
/// node, etcd's minimum lease TTL (2 s) on etcd; and how much later than
/// it the lease is surely gone.
fn short(place: &Place) -> (Duration, Duration) {
    match place {
        Place::Local(_) => (Duration::from_millis(300), Duration::from_millis(50)),
        Place::Etcd { .. } => (common::etcd::MIN_TTL, Duration::from_millis(1500)),
    }
}

/// Waits until `job`'s lease has run out, as the server sees it: some
/// time after its TTL on etcd, later still on a loaded machine.
async fn run_out(c: &Client, job: &str) {
    common::eventually(&format!("{job}'s lease to run out"), || async {
        c.get_lease(job)
            .await
            .unwrap()
            .holder
            .is_none()
            .then_some(())
    })
    .await
}

async fn client(p: &ServerProcess) -> Client {
    Client::connect(&p.url()).await.unwrap()
}

fn ends(h: &[Tenure]) -> Vec<(u64, &str, Option<End>)> {
    h.iter()
        .map(|t| (t.token, t.holder.as_str(), t.end))
        .collect()
}

/// Every way a tenure ends, in order, then a SIGKILL and a restart: the
/// history read back is the same.
async fn history_records_every_tenure(place: Place) {
    let (ttl, slack) = short(&place);
    let p = place.start(&[]);
    let c = client(&p).await;
    assert!(
        c.history("j", 10).await.unwrap().is_empty(),
        "never granted"
    );

    // Times are kept in whole milliseconds.
    let t0 = SystemTime::now() - Duration::from_millis(1);
    // 1: granted, renewed, released.
    let a = c.acquire("j", "a", LONG, Duration::ZERO).await.unwrap();
    assert_eq!(a.lease.token, 1);
    c.renew("j", "a", 1, LONG).await.unwrap();
    c.release("j", "a", 1).await.unwrap();
    // 2: b lets it run out; 3: c takes over.
    assert_eq!(
        c.acquire("j", "b", ttl, Duration::ZERO)
            .await
            .unwrap()
            .lease
            .token,
        2
    );
    tokio::time::sleep(ttl).await;
    run_out(&c, "j").await;
    assert_eq!(
        c.acquire("j", "c", ttl, Duration::ZERO)
            .await
            .unwrap()
            .lease
            .token,
        3
    );
    // 3 runs out and c comes back: 4.
    tokio::time::sleep(ttl).await;
    run_out(&c, "j").await;
    assert_eq!(
        c.acquire("j", "c", LONG, Duration::ZERO)
            .await
            .unwrap()
            .lease
            .token,
        4
    );

    let h = c.history("j", 10).await.unwrap();
    assert_eq!(
        ends(&h),
        vec![
            (4, "c", None),
            (3, "c", Some(End::Expired)),
            (2, "b", Some(End::TakenOver)),
            (1, "a", Some(End::Released)),
        ],
        "{h:#?}"
    );
    let now = SystemTime::now();
    for (i, t) in h.iter().enumerate() {
        assert!(t0 <= t.granted_at && t.granted_at <= now, "{t:?}");
        if let Some(e) = t.ended_at {
            assert!(t.granted_at <= e && e <= now, "{t:?}");
        }
        // Tenures do not overlap: each began once the one before ended.
        if let Some(older) = h.get(i + 1) {
            assert!(older.ended_at.unwrap() <= t.granted_at, "{older:?} {t:?}");
        }
    }
    assert_eq!(h[0].ttl, LONG);
    assert_eq!(h[1].ttl, ttl);
    // An expiry is dated at the deadline (single node) or when a frontend
    // saw it (etcd): at least one TTL after its grant, never before.
    let lived = h[2]
        .ended_at
        .unwrap()
        .duration_since(h[2].granted_at)
        .unwrap();
    assert!(lived >= ttl - Duration::from_millis(5), "{lived:?}");
    // Not much later on the single node, where it is the deadline; on etcd,
    // as late as a loaded machine may see it.
    let late = match place {
        Place::Local(_) => slack + Duration::from_secs(1),
        Place::Etcd { .. } => slack + common::PATIENCE,
    };
    assert!(lived <= ttl + late, "{lived:?}");

    // A lease that ran out with nobody granted since shows as expired.
    c.acquire("k", "d", ttl, Duration::ZERO).await.unwrap();
    tokio::time::sleep(ttl).await;
    let hk = common::eventually("k's tenure to end", || async {
        let hk = c.history("k", 10).await.unwrap();
        hk.iter().all(|t| t.end.is_some()).then_some(hk)
    })
    .await;
    assert_eq!(ends(&hk), vec![(1, "d", Some(End::Expired))]);

    // SIGKILL: every tenure a client was told of survives, as it was.
    p.kill9();
    let p = place.start(&[]);
    let c = client(&p).await;
    let after = c.history("j", 10).await.unwrap();
    assert_eq!(after, h, "the history after SIGKILL");
    // The holder of 4 keeps leading after the restart; its release ends 4.
    c.release("j", "c", 4).await.unwrap();
    let h = c.history("j", 1).await.unwrap();
    assert_eq!(ends(&h), vec![(4, "c", Some(End::Released))]);

    // A tenure that ran out, then the job deleted: its history goes with
    // it, and is not brought back by a restart (on etcd, by a frontend
    // that saw the expiry late); the job created again starts a new one,
    // above the deleted job's tokens.
    c.acquire("gone", "e", ttl, Duration::ZERO).await.unwrap();
    tokio::time::sleep(ttl).await;
    run_out(&c, "gone").await;
    assert_eq!(c.history("gone", 10).await.unwrap().len(), 1);
    assert!(c.delete_job("gone").await.unwrap());
    assert_eq!(c.history("gone", 10).await.unwrap(), vec![]);
    p.kill9();
    let p = place.start(&[]);
    let c = client(&p).await;
    assert_eq!(
        c.history("gone", 10).await.unwrap(),
        vec![],
        "after SIGKILL"
    );
    let again = c.acquire("gone", "f", LONG, Duration::ZERO).await.unwrap();
    assert_eq!(again.lease.token, 2);
    let hg = c.history("gone", 10).await.unwrap();
    assert_eq!(hg.iter().map(|t| t.token).collect::<Vec<_>>(), vec![2]);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_records_every_tenure_and_survives_sigkill() {
    history_records_every_tenure(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_records_every_tenure_and_survives_sigkill_on_etcd() {
    history_records_every_tenure(Place::etcd()).await;
}

/// `--history-per-job 3` keeps the three newest tenures; pages of one
/// walk them newest first, and a page token made for another job, or
/// garbled, is refused naming `page_token`.
async fn trimmed_and_paged(place: Place) {
    let p = place.start(&["--history-per-job", "3"]);
    let c = client(&p).await;
    for n in 1..=10u64 {
        let a = c.acquire("t", "h", LONG, Duration::ZERO).await.unwrap();
        assert_eq!(a.lease.token, n);
        c.release("t", "h", n).await.unwrap();
    }
    let h = c.history("t", 100).await.unwrap();
    assert_eq!(
        h.iter().map(|t| t.token).collect::<Vec<_>>(),
        vec![10, 9, 8]
    );
    assert!(h.iter().all(|t| t.end == Some(End::Released)));

    let mut raw = proto::leases_client::LeasesClient::connect(p.url())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut page_token = String::new();
    loop {
        let r = raw
            .get_history(proto::GetHistoryRequest {
                job: "t".into(),
                page_size: 1,
                page_token: page_token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        seen.extend(r.tenures.iter().map(|t| t.token));
        if r.next_page_token.is_empty() {
            break;
        }
        page_token = r.next_page_token;
        assert!(seen.len() <= 3, "{seen:?}");
    }
    assert_eq!(seen, vec![10, 9, 8]);
    // Bad input names its field, and changes nothing.
    let first = raw
        .get_history(proto::GetHistoryRequest {
            job: "t".into(),
            page_size: 1,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    for (job, page_size, page_token, field) in [
        ("other", 1, first.next_page_token.clone(), "page_token"),
        ("t", 1, "garbage".to_string(), "page_token"),
        ("t", 5000, String::new(), "page_size"),
        ("", 1, String::new(), "job"),
    ] {
        let st = raw
            .get_history(proto::GetHistoryRequest {
                job: job.into(),
                page_size,
                page_token,
            })
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::InvalidArgument, "{st:?}");
        assert!(st.message().contains(field), "{field}: {}", st.message());
    }
    assert_eq!(c.history("t", 100).await.unwrap(), h);

    // The trimmed history survives a restart as it is.
    p.kill9();
    let p = place.start(&["--history-per-job", "3"]);
    let c = client(&p).await;
    assert_eq!(c.history("t", 100).await.unwrap(), h);
    // Without history: nothing more is recorded. (In etcd mode a changed
    // setting that every frontend on the prefix shares is replaced on
    // purpose.)
    p.stop();
    let p = place.start(&["--history-per-job", "0", "--replace-shared-settings"]);
    let c = client(&p).await;
    c.acquire("t", "h", LONG, Duration::ZERO).await.unwrap();
    assert_eq!(
        c.history("t", 100)
            .await
            .unwrap()
            .iter()
            .map(|t| t.token)
            .collect::<Vec<_>>(),
        vec![10, 9, 8]
    );
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_trimmed_and_paged() {
    trimmed_and_paged(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_trimmed_and_paged_on_etcd() {
    trimmed_and_paged(Place::etcd()).await;
}

/// `leasehold history JOB` prints the table; `--at` names the token that
/// led at an instant inside a tenure (exit 0), and says "none" between
/// tenures, before the history and after the last one ended (exit 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_history_answers_which_token_led_at_an_instant() {
    let place = Place::local();
    let p = place.start(&[]);
    let c = client(&p).await;
    c.acquire("post", "first", LONG, Duration::ZERO)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.release("post", "first", 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.acquire("post", "second", LONG, Duration::ZERO)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.release("post", "second", 2).await.unwrap();
    let h = c.history("post", 10).await.unwrap();
    let (second, first) = (&h[0], &h[1]);

    let cli = |args: &[&str]| {
        let out = Command::new(common::bin())
            .arg("history")
            .arg("--server")
            .arg(p.url())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = cli(&["post"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("TOKEN"), "{out}");
    assert!(
        lines[1].starts_with("2 ") && lines[1].contains("second"),
        "{out}"
    );
    assert!(lines[1].ends_with("released"), "{out}");
    assert!(
        lines[2].starts_with("1 ") && lines[2].contains("first"),
        "{out}"
    );

    let at = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();
    let ms = Duration::from_millis;
    // Inside each tenure.
    let (code, out, _) = cli(&["post", "--at", &at(first.granted_at + ms(10))]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("token 1 led at"), "{out}");
    assert!(out.contains("holder first"), "{out}");
    let (code, out, _) = cli(&["post", "--at", &at(second.granted_at + ms(10))]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("token 2 led at"), "{out}");
    // Between them: a gap.
    let gap = first.ended_at.unwrap() + ms(20);
    assert!(gap < second.granted_at);
    let (code, out, _) = cli(&["post", "--at", &at(gap)]);
    assert_eq!(code, Some(3));
    assert!(out.starts_with("none: no token led at"), "{out}");
    assert!(
        out.contains("token 1 ended") && out.contains("token 2 was granted"),
        "{out}"
    );
    // Before the oldest tenure kept, and after the last one ended.
    let (code, out, _) = cli(&["post", "--at", &at(first.granted_at - ms(1000))]);
    assert_eq!(code, Some(3));
    assert!(out.starts_with("none known:"), "{out}");
    let (code, out, _) = cli(&["post", "--at", &at(second.ended_at.unwrap() + ms(10))]);
    assert_eq!(code, Some(3));
    assert!(out.contains("none was granted since"), "{out}");
    // A malformed instant is refused before anything is asked.
    let (code, _, err) = cli(&["post", "--at", "yesterday"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("RFC 3339"), "{err}");
    p.stop();
}

/// The status page's data on both backends: every job with its lease, a
/// job with its history and keys, and bad input refused naming the field.
/// (The page itself is tested in a browser: tests/browser.)
async fn status_page_data(place: Place) {
    let p = place.start(&[]);
    let c = client(&p).await;
    c.acquire("page/a", "first", LONG, Duration::ZERO)
        .await
        .unwrap();
    c.release("page/a", "first", 1).await.unwrap();
    c.acquire("page/a", "second", LONG, Duration::ZERO)
        .await
        .unwrap();
    c.checked_write("page/a", 2, b"state", b"v".to_vec())
        .await
        .unwrap();
    c.acquire("page/b", "other", LONG, Duration::ZERO)
        .await
        .unwrap();
    let (code, body) = common::admin_request(p.admin, "/").await;
    assert_eq!(code, 200);
    assert!(body.contains("<title>leasehold</title>"), "{body}");
    let (code, body) = common::admin_request(p.admin, "/api/jobs?prefix=page%2F").await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(r#""job":"page/a","holder":"second""#),
        "{body}"
    );
    assert!(
        body.contains(r#""job":"page/b","holder":"other""#),
        "{body}"
    );
    let counted = matches!(place, Place::Local(_));
    assert!(body.contains(&format!(r#""counted":{counted}"#)), "{body}");
    let (code, body) = common::admin_request(p.admin, "/api/job?name=page%2Fa").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""token":2,"holder":"second""#), "{body}");
    assert!(body.contains(r#""token":1,"holder":"first""#), "{body}");
    assert!(body.contains(r#""end":"released""#), "{body}");
    assert!(
        body.contains(r#""key":"state","version":1,"token":2"#),
        "{body}"
    );
    // A leader's value, and who waits behind it, in line order.
    let o = leasehold::client::AcquireOptions {
        value: b"10.0.0.3:80".to_vec(),
        ..Default::default()
    };
    c.acquire_with("page/c", "valued", LONG, Duration::ZERO, o)
        .await
        .unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            c.acquire("page/c", "candidate", LONG, Duration::from_secs(30))
                .await
        })
    };
    let body = common::eventually("the candidate on the job's page", || async {
        let (code, body) = common::admin_request(p.admin, "/api/job?name=page%2Fc").await;
        assert_eq!(code, 200, "{body}");
        body.contains(r#""waiting":1"#).then_some(body)
    })
    .await;
    assert!(
        body.contains(r#""holder":"valued","principal":"","value":"10.0.0.3:80""#),
        "{body}"
    );
    assert!(
        body.contains(r#""candidates":[{"holder":"candidate","principal":"","preferred":false}]"#),
        "{body}"
    );
    waiter.abort();
    let (code, body) = common::admin_request(p.admin, "/api/job?name=").await;
    assert_eq!(code, 400);
    assert!(body.contains("job"), "{body}");
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_data_on_the_single_node() {
    status_page_data(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_data_on_etcd() {
    status_page_data(Place::etcd()).await;
}

/// DeleteJob takes the job's history with it: a job deleted and created
/// again gets tokens above the store's new-job floor (raised by any
/// deleted job), far above its old ones, and a history that starts there;
/// a job never deleted keeps its own.
async fn deleted_with_the_job(place: Place) {
    let p = place.start(&["--history-per-job", "5"]);
    let c = client(&p).await;
    let rounds = |job: &'static str, n: u64| {
        let c = &c;
        async move {
            for _ in 0..n {
                let a = c.acquire(job, "h", LONG, Duration::ZERO).await.unwrap();
                c.release(job, "h", a.lease.token).await.unwrap();
            }
        }
    };
    rounds("small", 3).await;
    rounds("big", 10).await;
    rounds("kept", 2).await;
    assert!(c.delete_job("small").await.unwrap());
    assert!(c.delete_job("big").await.unwrap());
    assert_eq!(c.history("big", 100).await.unwrap(), vec![]);
    let a = c
        .acquire("small", "again", LONG, Duration::ZERO)
        .await
        .unwrap();
    assert!(a.lease.token > 10, "above the floor: {}", a.lease.token);
    let tokens = |job: &'static str| {
        let c = &c;
        async move {
            let h = c.history(job, 100).await.unwrap();
            h.iter().map(|t| t.token).collect::<Vec<u64>>()
        }
    };
    assert_eq!(tokens("small").await, [a.lease.token], "a new history");
    assert_eq!(tokens("kept").await, [2, 1], "another job's is kept");
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_goes_with_a_deleted_job() {
    deleted_with_the_job(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_goes_with_a_deleted_job_on_etcd() {
    deleted_with_the_job(Place::etcd()).await;
}
