//! The backends' conformance: the same scenarios, at the `Backend`
//! boundary (no gRPC), against each backend:
//!
//! - `memory`: the single node on the in-memory store;
//! - `sled`: the single node on the embedded store, in a temporary data dir;
//! - `etcd`: a frontend on the shared etcd cluster of this test process
//!   (`common::etcd::shared_endpoints`), under a key prefix of its own.
//!
//! Each scenario is one function taking a [`Backend`]; the macro at the
//! end makes one test of it per backend (`conformance::<backend>::<name>`).
//! What passes on all three is what a client may rely on whichever backend
//! serves it: tokens and their steps, expiry, handover to the first waiter,
//! fencing, refusals, deletion, history, the views, batched renewals and
//! writes (`renew_many`, `stage_writes` then `durable`, with a holder
//! guard asked for each write), watches, the give-back of a grant
//! nobody was told of, and a principal's own count of the jobs it created. TTLs are whole seconds on etcd (its granularity),
//! shorter on the single node.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::backend::{Backend, EventKind, Renewal, Write};
use leasehold::error::{Error, FenceCause};
use leasehold::lease::{
    HolderId, JobName, LeaseState, LeaseView, Limits, TenureEnd, Token, Vacancy,
};
use leasehold::node::Node;
use leasehold::store::memory::MemoryStore;
use leasehold::store::sled::SledStore;

/// A TTL no scenario outlives: a lease granted with it is live throughout.
const LONG: Duration = Duration::from_secs(40);
/// Another such TTL, to tell a renewal's from the grant's.
const LONGER: Duration = Duration::from_secs(60);
/// Don't wait in line.
const NOW: Duration = Duration::ZERO;

/// A backend under test, with what it needs kept alive.
struct Under {
    backend: Backend,
    _dir: Option<tempfile::TempDir>,
}

impl Under {
    fn node(node: Node, dir: Option<tempfile::TempDir>) -> Under {
        Under {
            backend: node.into(),
            _dir: dir,
        }
    }

    async fn memory() -> Under {
        Under::node(Node::open(Arc::new(MemoryStore::new())).unwrap(), None)
    }

    async fn sled() -> Under {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        Under::node(Node::open(Arc::new(store)).unwrap(), Some(dir))
    }

    async fn etcd() -> Under {
        let config = common::etcd::frontend_config(
            common::etcd::shared_endpoints(),
            &common::etcd::fresh_prefix(),
        );
        Under {
            backend: leasehold::etcd::EtcdNode::open(config)
                .await
                .unwrap()
                .into(),
            _dir: None,
        }
    }

    async fn close(self) {
        self.backend.close().await;
    }
}

fn job(name: &str) -> JobName {
    Limits::default().job(name).unwrap()
}

fn holder(name: &str) -> HolderId {
    Limits::default().holder(name).unwrap()
}

/// A TTL that runs out soon on `b`: etcd's shortest lease (whole
/// seconds), a second on the single node.
fn short_ttl(b: &Backend) -> Duration {
    match b {
        Backend::Local(_) => Duration::from_secs(1),
        Backend::Etcd(n) => n.min_ttl().max(Duration::from_secs(1)),
    }
}

/// The TTL of a live lease's last grant or renewal.
fn ttl_of(v: &LeaseView) -> Option<Duration> {
    match v.state {
        LeaseState::Held { ttl, .. } => Some(ttl),
        LeaseState::Free(_) => None,
    }
}

/// Waits until `job`'s lease has run out (etcd's clock decides there).
async fn expired(b: &Backend, job: &JobName) -> LeaseView {
    common::eventually("the lease to run out", || async {
        let v = b.lease(job).await.unwrap();
        v.holder().is_none().then_some(v)
    })
    .await
}

/// Waits until `n` Acquires wait in line on `b` (this frontend's, on etcd:
/// their places are in etcd by then).
async fn waiting(b: &Backend, n: usize) {
    common::eventually(&format!("{n} waiters"), || async {
        (b.snapshot().waiters == n).then_some(())
    })
    .await
}

async fn write(
    b: &Backend,
    j: &JobName,
    t: Token,
    key: &str,
    v: Option<&str>,
) -> Result<u64, Error> {
    b.checked_write(j, t, key.as_bytes(), v.map(|v| v.as_bytes().to_vec()), None)
        .await
}

// ---- The scenarios ----

/// A new job's first grant gets token 1; a renewal keeps it (and sets the
/// TTL), and the holder's Acquire again extends the lease without a new
/// token.
async fn grant_and_renewal_keep_the_token(b: Backend) {
    let (j, a) = (job("renew"), holder("a"));
    let g = b.acquire(&j, &a, LONG, NOW).await.unwrap();
    assert!(g.acquired && g.fresh, "{g:?}");
    assert_eq!(g.lease.token, Token(1));
    assert_eq!(g.lease.holder(), Some(&a));
    assert_eq!(ttl_of(&g.lease), Some(LONG));

    let r = b.renew(&j, &a, Token(1), LONGER).await.unwrap().lease;
    assert_eq!(r.token, Token(1));
    assert_eq!(r.holder(), Some(&a));
    assert_eq!(ttl_of(&r), Some(LONGER), "the renewal's TTL");

    let again = b.acquire(&j, &a, LONG, NOW).await.unwrap();
    assert!(again.acquired, "{again:?}");
    assert!(!again.fresh, "the holder's own lease, extended");
    assert_eq!(again.lease.token, Token(1));

    let v = b.lease(&j).await.unwrap();
    assert_eq!((v.token, v.holder()), (Token(1), Some(&a)));
}

/// A lease that runs out keeps its token until the next grant, which
/// gets the token after it, to its old holder as to anyone else.
async fn expiry_then_a_new_grant_bumps_the_token_by_one(b: Backend) {
    let (j, a, c) = (job("expiry"), holder("a"), holder("c"));
    let short = short_ttl(&b);
    let first = b.acquire(&j, &a, short, NOW).await.unwrap();
    assert!(first.acquired);
    let t = first.lease.token;

    let v = expired(&b, &j).await;
    assert_eq!(v.token, t, "expiry issues no token");
    assert!(
        matches!(v.state, LeaseState::Free(Vacancy::Expired)),
        "{v:?}"
    );
    assert!(matches!(
        b.renew(&j, &a, t, LONG).await,
        Err(Error::LeaseLost { .. })
    ));

    let again = b.acquire(&j, &a, short, NOW).await.unwrap();
    assert!(again.acquired && again.fresh, "{again:?}");
    assert_eq!(
        again.lease.token,
        Token(t.0 + 1),
        "granted again after expiry"
    );

    expired(&b, &j).await;
    let other = b.acquire(&j, &c, LONG, NOW).await.unwrap();
    assert!(other.acquired && other.fresh, "{other:?}");
    assert_eq!(other.lease.token, Token(t.0 + 2));
    assert_eq!(other.lease.holder(), Some(&c));
}

/// A release hands the lease to the first waiter at once (long before the
/// released TTL would have run out), with the next token; the waiters
/// behind it keep their order.
async fn release_hands_over_to_the_first_waiter_at_once(b: Backend) {
    let j = job("handover");
    let (a, w1, w2) = (holder("a"), holder("w1"), holder("w2"));
    let g = b.acquire(&j, &a, LONGER, NOW).await.unwrap();
    let t = g.lease.token;

    let busy = b.acquire(&j, &w1, LONG, NOW).await.unwrap();
    assert!(!busy.acquired, "{busy:?}");
    assert_eq!((busy.lease.token, busy.lease.holder()), (t, Some(&a)));

    let wait = |h: HolderId| {
        let (b, j) = (b.clone(), j.clone());
        tokio::spawn(async move { b.acquire(&j, &h, LONG, common::PATIENCE).await })
    };
    let first = wait(w1.clone());
    waiting(&b, 1).await;
    let second = wait(w2.clone());
    waiting(&b, 2).await;

    let released = Instant::now();
    assert!(b.release(&j, &a, t).await.unwrap());
    let g1 = first.await.unwrap().unwrap();
    assert!(
        released.elapsed() < LONGER / 3,
        "handed over after {:?}",
        released.elapsed()
    );
    assert!(g1.acquired && g1.fresh, "{g1:?}");
    assert_eq!(
        (g1.lease.token, g1.lease.holder()),
        (Token(t.0 + 1), Some(&w1))
    );
    assert!(!second.is_finished(), "the second waiter still waits");
    let v = b.lease(&j).await.unwrap();
    assert_eq!(v.holder(), Some(&w1));

    assert!(b.release(&j, &w1, Token(t.0 + 1)).await.unwrap());
    let g2 = second.await.unwrap().unwrap();
    assert!(g2.acquired && g2.fresh, "{g2:?}");
    assert_eq!(
        (g2.lease.token, g2.lease.holder()),
        (Token(t.0 + 2), Some(&w2))
    );
    waiting(&b, 0).await;
}

/// Fenced writes: the live token is accepted (each write a new version);
/// a token never issued is unknown; an old token is fenced as superseded;
/// the newest token is fenced once its lease has run out, before anyone
/// else writes. A refused write changes nothing.
async fn checked_writes_are_fenced_by_the_live_token(b: Backend) {
    let j = job("fence");
    let (a, c, d) = (holder("a"), holder("c"), holder("d"));
    let t1 = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    assert_eq!(write(&b, &j, t1, "k", Some("one")).await, Ok(1));
    assert_eq!(write(&b, &j, t1, "k", Some("two")).await, Ok(2));
    let r = b.read(&j, b"k").await.unwrap().unwrap();
    assert_eq!((r.token, r.version), (t1, 2));
    assert_eq!(r.value.as_deref(), Some(&b"two"[..]));
    assert!(
        matches!(
            write(&b, &j, Token(t1.0 + 5), "k", Some("x")).await,
            Err(Error::UnknownToken { .. })
        ),
        "a token never issued"
    );

    assert!(b.release(&j, &a, t1).await.unwrap());
    let t2 = b.acquire(&j, &c, LONG, NOW).await.unwrap().lease.token;
    assert_eq!(t2, Token(t1.0 + 1));
    match write(&b, &j, t1, "k", Some("stale")).await {
        Err(Error::Fenced {
            token,
            current,
            cause: FenceCause::Superseded,
            ..
        }) => assert_eq!((token, current), (t1, t2)),
        other => panic!("an old token's write: {other:?}"),
    }
    assert_eq!(b.read(&j, b"k").await.unwrap().unwrap().version, 2);
    assert_eq!(write(&b, &j, t2, "k", Some("three")).await, Ok(3));
    assert_eq!(write(&b, &j, t2, "gone", Some("x")).await, Ok(1));
    assert_eq!(write(&b, &j, t2, "gone", None).await, Ok(2), "a deletion");

    assert!(b.release(&j, &c, t2).await.unwrap());
    let t3 = b
        .acquire(&j, &d, short_ttl(&b), NOW)
        .await
        .unwrap()
        .lease
        .token;
    expired(&b, &j).await;
    match write(&b, &j, t3, "k", Some("late")).await {
        Err(Error::Fenced {
            token,
            current,
            cause: FenceCause::NotLive,
            ..
        }) => assert_eq!((token, current), (t3, t3)),
        other => panic!("the newest token after its lease ran out: {other:?}"),
    }
    let r = b.read(&j, b"k").await.unwrap().unwrap();
    assert_eq!((r.token, r.version), (t2, 3));
    assert_eq!(r.value.as_deref(), Some(&b"three"[..]));
    let keys: Vec<Vec<u8>> = b
        .keys(&j, b"", None, 10)
        .await
        .unwrap()
        .keys
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, [b"k".to_vec()], "the deleted key is not listed");
}

/// Renew and Release by anyone but the holder are refused with the lease
/// as it is; the lease does not change.
async fn renew_by_a_non_holder_is_refused(b: Backend) {
    let j = job("not-yours");
    let (a, x) = (holder("a"), holder("x"));
    let t = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    match b.renew(&j, &x, t, LONGER).await {
        Err(Error::LeaseLost {
            current_holder,
            current,
            ..
        }) => {
            assert_eq!(current_holder.as_deref(), Some("a"));
            assert_eq!(current, t);
        }
        other => panic!("a renewal by a non-holder: {other:?}"),
    }
    assert!(matches!(
        b.release(&j, &x, t).await,
        Err(Error::LeaseLost { .. })
    ));
    let v = b.lease(&j).await.unwrap();
    assert_eq!((v.token, v.holder()), (t, Some(&a)));
    assert_eq!(ttl_of(&v), Some(LONG), "the refused renewal set nothing");
}

/// A job in use is not deleted; a free one is, with its keys, once; a job
/// created again under its name gets tokens above the old ones, so that a
/// leader from before the deletion stays fenced.
async fn delete_job_forgets_the_job_and_never_reuses_a_token(b: Backend) {
    let j = job("delete-me");
    let a = holder("a");
    let t = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    assert_eq!(write(&b, &j, t, "k", Some("v")).await, Ok(1));
    assert!(matches!(
        b.delete_job(&j).await,
        Err(Error::JobInUse { .. })
    ));
    assert!(b.read(&j, b"k").await.unwrap().is_some(), "nothing deleted");

    assert!(b.release(&j, &a, t).await.unwrap());
    assert_eq!(b.delete_job(&j).await, Ok(true));
    assert_eq!(b.delete_job(&j).await, Ok(false), "nothing left to delete");
    assert_eq!(b.read(&j, b"k").await.unwrap(), None);
    assert!(b.keys(&j, b"", None, 10).await.unwrap().keys.is_empty());
    assert_eq!(b.lease(&j).await.unwrap().holder(), None);

    let again = b.acquire(&j, &a, LONG, NOW).await.unwrap();
    assert!(again.acquired, "{again:?}");
    assert!(again.lease.token > t, "{:?} after {t:?}", again.lease.token);
    assert!(matches!(
        write(&b, &j, t, "k", Some("stale")).await,
        Err(Error::Fenced { .. })
    ));
    assert_eq!(b.read(&j, b"k").await.unwrap(), None);
}

/// The history of a job: one row per tenure, newest first, with its
/// holder and how it ended; paged by token and by count.
async fn history_has_a_row_per_tenure(b: Backend) {
    let j = job("history");
    let (a, c) = (holder("a"), holder("c"));
    let t1 = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    assert!(b.release(&j, &a, t1).await.unwrap());
    let t2 = b.acquire(&j, &c, LONG, NOW).await.unwrap().lease.token;

    let h = b.history(&j, None, 10).await.unwrap();
    let rows: Vec<(Token, &str)> = h.iter().map(|t| (t.token, t.holder.as_str())).collect();
    assert_eq!(rows, [(t2, "c"), (t1, "a")]);
    assert_eq!(h[0].end, None, "the live tenure is open");
    assert!(
        matches!(h[1].end, Some((TenureEnd::Released, _))),
        "{:?}",
        h[1].end
    );
    assert_eq!(h[0].ttl, LONG);

    let older = b.history(&j, Some(t2), 10).await.unwrap();
    assert_eq!(older.iter().map(|t| t.token).collect::<Vec<_>>(), [t1]);
    let newest = b.history(&j, None, 1).await.unwrap();
    assert_eq!(newest.iter().map(|t| t.token).collect::<Vec<_>>(), [t2]);
    assert!(b.history(&job("never"), None, 10).await.unwrap().is_empty());
}

/// The views: one job's lease, a page of leases by prefix, and the status
/// rows, each with the holder, the token and why a free lease is free.
async fn lease_and_status_views_show_the_leases(b: Backend) {
    let unknown = b.lease(&job("views/none")).await.unwrap();
    assert_eq!((unknown.token, unknown.holder()), (Token::NONE, None));

    let (ja, jb, other) = (job("views/a"), job("views/b"), job("viewsx"));
    let (a, c) = (holder("a"), holder("c"));
    let ta = b.acquire(&ja, &a, LONG, NOW).await.unwrap().lease.token;
    let tb = b.acquire(&jb, &c, LONG, NOW).await.unwrap().lease.token;
    assert!(b.release(&jb, &c, tb).await.unwrap());
    b.acquire(&other, &c, LONG, NOW).await.unwrap();

    let page = b.leases("views/", None, 10).await.unwrap();
    let names: Vec<&str> = page.iter().map(|v| v.job.as_str()).collect();
    assert_eq!(names, ["views/a", "views/b"], "in name order, by prefix");
    assert_eq!((page[0].token, page[0].holder()), (ta, Some(&a)));
    assert_eq!(ttl_of(&page[0]), Some(LONG));
    assert_eq!((page[1].token, page[1].holder()), (tb, None));
    assert!(
        matches!(page[1].state, LeaseState::Free(Vacancy::Released)),
        "{:?}",
        page[1].state
    );
    let after = b.leases("views/", Some("views/a"), 10).await.unwrap();
    assert_eq!(
        after.iter().map(|v| v.job.as_str()).collect::<Vec<_>>(),
        ["views/b"]
    );
    let one = b.leases("views/", None, 1).await.unwrap();
    assert_eq!(
        one.iter().map(|v| v.job.as_str()).collect::<Vec<_>>(),
        ["views/a"]
    );

    let s = b.status("views/", None, 10).await.unwrap();
    let rows: Vec<(&str, Option<&HolderId>, Token)> = s
        .jobs
        .iter()
        .map(|r| (r.view.job.as_str(), r.view.holder(), r.view.token))
        .collect();
    assert_eq!(rows, [("views/a", Some(&a), ta), ("views/b", None, tb)]);
    assert_eq!(s.jobs[0].vacant_for, None, "led");
    assert!(s.jobs[1].vacant_for.is_some(), "not led");
    if s.counted {
        assert_eq!(s.jobs[0].waiters, 0);
    }
    let s = b.status("views/", Some("views/a"), 10).await.unwrap();
    assert_eq!(s.jobs.len(), 1);
    assert_eq!(s.jobs[0].view.job, jb);
}

/// A batch of renewals is decided renewal by renewal, in order, each as
/// `renew` alone would decide it: one refused renewal does not fail the
/// others, and a refusal carries the job's lease as it is.
async fn renew_many_decides_each_renewal_on_its_own(b: Backend) {
    let (mine, theirs, gone) = (job("many-mine"), job("many-theirs"), job("many-gone"));
    let (a, c) = (holder("a"), holder("c"));
    let t_mine = b.acquire(&mine, &a, LONG, NOW).await.unwrap().lease.token;
    let t_theirs = b.acquire(&theirs, &c, LONG, NOW).await.unwrap().lease.token;
    let t_gone = b.acquire(&gone, &a, LONG, NOW).await.unwrap().lease.token;
    assert!(b.release(&gone, &a, t_gone).await.unwrap());
    let renewal = |job: &JobName, token: Token| Renewal {
        job: job.clone(),
        holder: a.clone(),
        token,
        ttl: LONGER,
    };
    let batch = [
        renewal(&mine, t_mine),
        renewal(&theirs, t_theirs),
        renewal(&gone, t_gone),
        renewal(&mine, Token(t_mine.0 + 7)),
        renewal(&mine, t_mine),
    ];
    let out = b.renew_many(&batch).await.unwrap();
    assert_eq!(out.len(), batch.len(), "one outcome per renewal, in order");
    for i in [0, 4] {
        let v = &out[i].as_ref().expect("the holder's own renewal").lease;
        assert_eq!((v.token, v.holder()), (t_mine, Some(&a)), "renewal {i}");
        assert_eq!(ttl_of(v), Some(LONGER), "renewal {i}");
    }
    match &out[1] {
        Err((Error::LeaseLost { .. }, v)) => {
            assert_eq!((v.token, v.holder()), (t_theirs, Some(&c)))
        }
        other => panic!("a renewal of another holder's lease: {other:?}"),
    }
    match &out[2] {
        Err((Error::LeaseLost { .. }, v)) => {
            assert!(v.holder().is_none(), "{v:?}");
            assert_eq!(v.token, t_gone);
        }
        other => panic!("a renewal of a released lease: {other:?}"),
    }
    let Err((e, v)) = &out[3] else {
        panic!("a renewal with a token never issued: {:?}", out[3]);
    };
    assert_eq!(v.token, t_mine, "the job's lease as it is");
    // What `renew` alone answers for each, now: the same kind of outcome.
    for (i, r) in batch.iter().enumerate() {
        let alone = b.renew(&r.job, &r.holder, r.token, r.ttl).await;
        match (&out[i], &alone) {
            (Ok(_), Ok(_)) => {}
            (Err((e, _)), Err(f)) => assert_eq!(
                std::mem::discriminant(e),
                std::mem::discriminant(f),
                "renewal {i}: {e:?} in the batch, {f:?} alone"
            ),
            (x, y) => panic!("renewal {i}: {x:?} in the batch, {y:?} alone"),
        }
    }
    assert!(
        matches!(e, Error::LeaseLost { .. } | Error::UnknownToken { .. }),
        "{e:?}"
    );
    assert_eq!(b.lease(&theirs).await.unwrap().holder(), Some(&c));
}

/// Staged writes are decided in order, each with `checked_write`'s rules
/// (a refused one does not stop the rest), and once `durable` has
/// returned for the batch's sequence number they are read back as made.
async fn staged_writes_are_decided_in_order_and_durable(b: Backend) {
    let j = job("staged");
    let (a, c) = (holder("a"), holder("c"));
    let t1 = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    assert!(b.release(&j, &a, t1).await.unwrap());
    let t2 = b.acquire(&j, &c, LONG, NOW).await.unwrap().lease.token;
    let w = |token: Token, key: &str, value: Option<&str>| Write {
        job: j.clone(),
        token,
        key: key.as_bytes().to_vec(),
        value: value.map(|v| v.as_bytes().to_vec()),
    };
    let staged = b
        .stage_writes(
            vec![
                w(t2, "k", Some("one")),
                w(t1, "k", Some("stale")),
                w(t2, "k", Some("two")),
                w(Token(t2.0 + 9), "k", Some("unknown")),
                w(t2, "other", Some("x")),
                w(t2, "other", None),
            ],
            None,
        )
        .await
        .unwrap();
    b.durable(staged.seq).await.unwrap();
    let o = &staged.outcomes;
    assert_eq!(o.len(), 6, "one outcome per write, in order: {o:?}");
    assert_eq!(o[0], Ok(1));
    assert!(
        matches!(
            &o[1],
            Err(Error::Fenced {
                cause: FenceCause::Superseded,
                ..
            })
        ),
        "the old token's write: {:?}",
        o[1]
    );
    assert_eq!(o[2], Ok(2), "after a refused write, the next is made");
    assert!(
        matches!(&o[3], Err(Error::UnknownToken { .. })),
        "a token never issued: {:?}",
        o[3]
    );
    assert_eq!((&o[4], &o[5]), (&Ok(1), &Ok(2)), "a write, then its delete");
    let r = b.read(&j, b"k").await.unwrap().unwrap();
    assert_eq!((r.token, r.version), (t2, 2));
    assert_eq!(r.value.as_deref(), Some(&b"two"[..]));
    let gone = b.read(&j, b"other").await.unwrap().unwrap();
    assert_eq!((gone.version, gone.value), (2, None), "a tombstone");
    // An empty batch is no error and needs no wait.
    let none = b.stage_writes(Vec::new(), None).await.unwrap();
    assert!(none.outcomes.is_empty());
    b.durable(none.seq).await.unwrap();
}

/// A batch's holder guard is asked for each write, on the state that
/// write is decided on: a write carrying the live token of a grant whose
/// holder the guard refuses is refused with PermissionDenied, and the
/// other writes are decided as usual; a token that is not the live
/// grant's meets the fence alone; once the grant is another holder's, the
/// same guard lets its token write.
async fn staged_writes_ask_the_guard_of_each_write(b: Backend) {
    let (j, mine) = (job("guarded"), job("guarded-mine"));
    let (me, them) = (holder("me"), holder("them"));
    let guard = |h: &str| h == "them";
    let t = b.acquire(&j, &them, LONG, NOW).await.unwrap().lease.token;
    let m = b.acquire(&mine, &me, LONG, NOW).await.unwrap().lease.token;
    let w = |j: &JobName, token: Token, key: &str, value: &str| Write {
        job: j.clone(),
        token,
        key: key.as_bytes().to_vec(),
        value: Some(value.as_bytes().to_vec()),
    };
    let staged = b
        .stage_writes(
            vec![
                w(&j, t, "k", "forged"),
                w(&mine, m, "k", "one"),
                w(&j, Token(t.0 + 1), "k", "next"),
                w(&j, t, "other", "forged"),
                w(&mine, m, "k", "two"),
            ],
            Some(&guard),
        )
        .await
        .unwrap();
    b.durable(staged.seq).await.unwrap();
    let o = &staged.outcomes;
    let denied = |o: &Result<u64, Error>| match o {
        Err(Error::PermissionDenied { action, job, .. }) => {
            (*action, &job[..]) == ("write", "guarded")
        }
        _ => false,
    };
    // Refused for the live token of a refused holder, whatever the key;
    // a token not the live grant's meets the fence alone; the rest made.
    assert!(
        matches!(&o[..], [a, Ok(1), Err(Error::UnknownToken { .. }), d, Ok(2)]
            if denied(a) && denied(d)),
        "one outcome per write, in order: {o:?}"
    );
    assert_eq!(b.read(&j, b"k").await.unwrap(), None, "nothing written");
    assert_eq!(b.read(&j, b"other").await.unwrap(), None, "nothing written");
    let r = b.read(&mine, b"k").await.unwrap().unwrap();
    assert_eq!((r.token, r.version), (m, 2));

    // The next grant is a holder's the guard accepts: asked of the holder
    // as it is when the write is decided, the guard lets its token write.
    assert!(b.release(&j, &them, t).await.unwrap());
    let next = b.acquire(&j, &me, LONG, NOW).await.unwrap().lease.token;
    assert_eq!(next, Token(t.0 + 1));
    let staged = b
        .stage_writes(vec![w(&j, next, "k", "mine")], Some(&guard))
        .await
        .unwrap();
    b.durable(staged.seq).await.unwrap();
    assert_eq!(staged.outcomes, [Ok(1)]);
}

/// A watch starts with the job's current lease, then tells each grant,
/// release and expiry in order, and nothing of a renewal.
async fn watch_tells_changes_in_order_and_nothing_of_renewals(b: Backend) {
    let j = job("watched");
    let (a, c) = (holder("a"), holder("c"));
    let t0 = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    let mut rx = b.watch(j.clone());
    let mut next = async || {
        tokio::time::timeout(LONG, rx.recv())
            .await
            .expect("an event within the patience of the test")
            .expect("the watch goes on")
            .unwrap()
    };
    let (kind, v) = next().await;
    assert_eq!(kind, EventKind::Current);
    assert_eq!((v.token, v.holder()), (t0, Some(&a)));

    b.renew(&j, &a, t0, LONGER).await.unwrap();
    assert!(b.release(&j, &a, t0).await.unwrap());
    let (kind, v) = next().await;
    assert_eq!(kind, EventKind::Released, "the renewal is no event: {v:?}");
    assert_eq!(v.token, t0);

    let t1 = b
        .acquire(&j, &c, short_ttl(&b), NOW)
        .await
        .unwrap()
        .lease
        .token;
    let (kind, v) = next().await;
    assert_eq!(kind, EventKind::Acquired);
    assert_eq!((v.token, v.holder()), (t1, Some(&c)));
    let (kind, v) = next().await;
    assert_eq!(kind, EventKind::Expired);
    assert_eq!(v.token, t1);
}

/// A give-back releases a grant whose caller was never told of it, and
/// hands over to the first waiter; once the holder has asked again (a
/// Renew or a repeated Acquire), or for another token, it changes nothing.
async fn give_back_releases_only_a_grant_not_asked_for_since(b: Backend) {
    let j = job("give-back");
    let (a, w) = (holder("a"), holder("w"));
    let t1 = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    let waiter = {
        let (b, j, w) = (b.clone(), j.clone(), w.clone());
        tokio::spawn(async move { b.acquire(&j, &w, LONG, LONG).await })
    };
    waiting(&b, 1).await;
    assert!(b.give_back(&j, &a, t1).await.unwrap(), "an untold grant");
    let handed = waiter.await.unwrap().unwrap();
    assert!(handed.acquired, "{handed:?}");
    assert_eq!(
        (handed.lease.token, handed.lease.holder()),
        (Token(t1.0 + 1), Some(&w))
    );
    let t2 = handed.lease.token;
    assert!(
        !b.give_back(&j, &a, t1).await.unwrap(),
        "a grant already given back"
    );
    assert!(
        !b.give_back(&j, &w, Token(t2.0 + 3)).await.unwrap(),
        "another token"
    );
    b.renew(&j, &w, t2, LONG).await.unwrap();
    assert!(
        !b.give_back(&j, &w, t2).await.unwrap(),
        "the holder renewed since: it may have been told that it leads"
    );
    let v = b.lease(&j).await.unwrap();
    assert_eq!((v.token, v.holder()), (t2, Some(&w)));

    assert!(b.release(&j, &w, t2).await.unwrap());
    let t3 = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    let again = b.acquire(&j, &a, LONG, NOW).await.unwrap();
    assert_eq!(again.lease.token, t3);
    assert!(
        !b.give_back(&j, &a, t3).await.unwrap(),
        "the holder asked again since"
    );
    assert_eq!(b.lease(&j).await.unwrap().holder(), Some(&a));
}

/// A holder bound to `principal`, as a server with a policy stores it.
fn bound(principal: &str, name: &str) -> HolderId {
    holder(name).bound_to(principal)
}

/// A principal's own `max_jobs`: a new job is refused at it, naming the
/// principal and the limit, and nothing is created; jobs that exist are
/// granted (its own, and another principal's); another principal and an
/// unbound holder are not held to it; a deleted job's room comes back.
async fn a_principals_max_jobs_counts_the_jobs_it_created(b: Backend) {
    let (billing, ops) = (bound("billing", "w"), bound("ops", "w"));
    let max = Some(2);
    for j in ["b1", "b2"] {
        let a = b
            .acquire_as(&job(j), &billing, LONG, NOW, max, false, None)
            .await
            .unwrap();
        assert!(a.acquired, "{a:?}");
    }
    let refused = b
        .acquire_as(&job("b3"), &billing, LONG, NOW, max, false, None)
        .await;
    match refused {
        Err(Error::QuotaExceeded {
            limit: "max_jobs",
            max: 2,
            principal: Some(p),
        }) => assert_eq!(p, "billing"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.lease(&job("b3")).await.unwrap().token, Token::NONE);
    // Jobs that exist: billing's own, and one ops created and released.
    let again = b
        .acquire_as(&job("b1"), &billing, LONG, NOW, max, false, None)
        .await;
    assert!(again.unwrap().acquired);
    let o = b
        .acquire_as(&job("o1"), &ops, LONG, NOW, max, false, None)
        .await
        .unwrap();
    assert!(b.release(&job("o1"), &ops, o.lease.token).await.unwrap());
    let taken = b
        .acquire_as(&job("o1"), &billing, LONG, NOW, max, false, None)
        .await;
    assert!(taken.unwrap().acquired);
    // ops created one (o1), and creates its second; an unbound holder
    // counts against nobody.
    let o2 = b
        .acquire_as(&job("o2"), &ops, LONG, NOW, max, false, None)
        .await
        .unwrap();
    assert!(o2.acquired);
    let free = b
        .acquire_as(&job("free"), &holder("w"), LONG, NOW, max, false, None)
        .await;
    assert!(free.unwrap().acquired);

    // Deleted: its room comes back, once.
    let t = b.lease(&job("b2")).await.unwrap().token;
    assert!(b.release(&job("b2"), &billing, t).await.unwrap());
    assert_eq!(b.delete_job(&job("b2")).await, Ok(true));
    let a = b
        .acquire_as(&job("b3"), &billing, LONG, NOW, max, false, None)
        .await;
    assert!(a.unwrap().acquired);
    let refused = b
        .acquire_as(&job("b4"), &billing, LONG, NOW, max, false, None)
        .await;
    assert!(
        matches!(refused, Err(Error::QuotaExceeded { .. })),
        "{refused:?}"
    );
}

/// A published value (`Lease.value`): kept with the grant, in every view,
/// the watch and the history; a renewal without one keeps it, with one
/// replaces it (an event of its own); a waiter's own goes with its grant,
/// by a release and by a transfer; a renewal on a KeepAlive keeps it; it
/// ends with the holding.
async fn a_published_value_goes_with_its_grant(b: Backend) {
    let j = job("valued");
    let (a, w1, w2) = (holder("a"), holder("w1"), holder("w2"));
    let v = |s: &str| Limits::default().lease_value(s.as_bytes()).unwrap();
    let g = b
        .acquire_as(&j, &a, LONG, NOW, None, false, v("a:1"))
        .await
        .unwrap();
    let t = g.lease.token;
    assert_eq!(g.lease.value(), Some(&b"a:1"[..]));
    assert_eq!(b.lease(&j).await.unwrap().value(), Some(&b"a:1"[..]));
    let mut rx = b.watch(j.clone());
    let mut next = async || {
        tokio::time::timeout(LONG, rx.recv())
            .await
            .expect("an event within the patience of the test")
            .expect("the watch goes on")
            .unwrap()
    };
    let (kind, seen) = next().await;
    assert_eq!(
        (kind, seen.value()),
        (EventKind::Current, Some(&b"a:1"[..]))
    );

    // Kept by a renewal without one, and by one on a KeepAlive.
    let r = b.renew_with_value(&j, &a, t, LONG, None).await.unwrap();
    assert_eq!(r.lease.value(), Some(&b"a:1"[..]));
    let out = b
        .renew_many(&[Renewal {
            job: j.clone(),
            holder: a.clone(),
            token: t,
            ttl: LONG,
        }])
        .await
        .unwrap();
    assert_eq!(out[0].as_ref().unwrap().lease.value(), Some(&b"a:1"[..]));
    // Replaced by one with a value: watchers are told, same holder and token.
    let r = b
        .renew_with_value(&j, &a, t, LONG, Some(v("a:2")))
        .await
        .unwrap();
    assert_eq!((r.lease.token, r.lease.value()), (t, Some(&b"a:2"[..])));
    let (kind, seen) = next().await;
    assert_eq!(
        (kind, seen.token, seen.holder(), seen.value()),
        (EventKind::ValueChanged, t, Some(&a), Some(&b"a:2"[..]))
    );
    assert_eq!(b.lease(&j).await.unwrap().value(), Some(&b"a:2"[..]));

    // Waiters publish their own: a release hands over with the first's,
    // a transfer with the second's.
    let wait = |h: HolderId, value: &str| {
        let (b, j, value) = (b.clone(), j.clone(), v(value));
        tokio::spawn(async move {
            b.acquire_as(&j, &h, LONG, common::PATIENCE, None, false, value)
                .await
        })
    };
    let first = wait(w1.clone(), "w1");
    waiting(&b, 1).await;
    let second = wait(w2.clone(), "w2");
    waiting(&b, 2).await;
    assert!(b.release(&j, &a, t).await.unwrap());
    let g1 = first.await.unwrap().unwrap();
    assert_eq!(
        (g1.lease.holder(), g1.lease.value()),
        (Some(&w1), Some(&b"w1"[..]))
    );
    let t1 = g1.lease.token;
    let to = b.transfer(&j, &w1, t1, None, None).await.unwrap();
    assert_eq!((to.holder(), to.value()), (Some(&w2), Some(&b"w2"[..])));
    let g2 = second.await.unwrap().unwrap();
    assert_eq!(g2.lease.value(), Some(&b"w2"[..]));
    // A repeated Acquire by the holder replaces it; none clears it.
    let again = b
        .acquire_as(&j, &w2, LONG, NOW, None, false, None)
        .await
        .unwrap();
    assert!(again.acquired && !again.fresh, "{again:?}");
    assert_eq!(again.lease.value(), None);

    // The history keeps each grant's value; the holding's end takes it.
    let h = b.history(&j, None, 10).await.unwrap();
    let values: Vec<(Token, &[u8])> = h.iter().map(|t| (t.token, t.value.as_slice())).collect();
    assert_eq!(
        values,
        [(g2.lease.token, &b"w2"[..]), (t1, b"w1"), (t, b"a:1")]
    );
    assert!(b.release(&j, &w2, g2.lease.token).await.unwrap());
    assert_eq!(b.lease(&j).await.unwrap().value(), None);
}

/// The line as `ListWaiters` shows it: the preferred candidates first,
/// then the others, each first come, first served, with the principals
/// they asked as; a limit lists the first ones and counts them all; a job
/// nobody waits for has an empty line.
async fn waiters_are_listed_in_line_order(b: Backend) {
    let j = job("line");
    let a = holder("a");
    let t = b.acquire(&j, &a, LONG, NOW).await.unwrap().lease.token;
    let wait = |h: HolderId, preferred: bool| {
        let (b, j) = (b.clone(), j.clone());
        tokio::spawn(async move {
            b.acquire_as(&j, &h, LONG, common::PATIENCE, None, preferred, None)
                .await
        })
    };
    let (w1, w2, p) = (bound("ops", "w1"), holder("w2"), holder("p"));
    let first = wait(w1.clone(), false);
    waiting(&b, 1).await;
    let second = wait(w2.clone(), false);
    waiting(&b, 2).await;
    let third = wait(p.clone(), true);
    waiting(&b, 3).await;
    let line = common::eventually("the line in etcd", || async {
        let (line, n) = b.waiters(&j, 10).await.unwrap();
        (line.len() == 3).then_some((line, n))
    })
    .await;
    let shown: Vec<(&str, Option<&str>, bool)> = line
        .0
        .iter()
        .map(|w| (w.holder.unbound(), w.holder.principal(), w.preferred))
        .collect();
    assert_eq!(
        (shown, line.1),
        (
            vec![
                ("p", None, true),
                ("w1", Some("ops"), false),
                ("w2", None, false)
            ],
            3
        )
    );
    let (two, n) = b.waiters(&j, 2).await.unwrap();
    assert_eq!((two.len(), n), (2, 3));
    assert_eq!(
        b.waiters(&job("nobody"), 10).await.unwrap(),
        (Vec::new(), 0)
    );
    // The release hands over in that order.
    assert!(b.release(&j, &a, t).await.unwrap());
    let g = third.await.unwrap().unwrap();
    assert_eq!(g.lease.holder(), Some(&p));
    assert!(b.release(&j, &p, g.lease.token).await.unwrap());
    let g = first.await.unwrap().unwrap();
    assert_eq!(g.lease.holder(), Some(&w1));
    assert!(b.release(&j, &w1, g.lease.token).await.unwrap());
    let g = second.await.unwrap().unwrap();
    assert!(b.release(&j, &w2, g.lease.token).await.unwrap());
    assert_eq!(b.waiters(&j, 10).await.unwrap(), (Vec::new(), 0));
}

/// One test per scenario and backend: `conformance::<backend>::<scenario>`.
macro_rules! conformance {
    ($($scenario:ident),* $(,)?) => {
        conformance!(@backend memory; $($scenario),*);
        conformance!(@backend sled; $($scenario),*);
        conformance!(@backend etcd; $($scenario),*);
    };
    (@backend $backend:ident; $($scenario:ident),*) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    let under = super::Under::$backend().await;
                    super::$scenario(under.backend.clone()).await;
                    under.close().await;
                }
            )*
        }
    };
}

conformance!(
    grant_and_renewal_keep_the_token,
    expiry_then_a_new_grant_bumps_the_token_by_one,
    release_hands_over_to_the_first_waiter_at_once,
    checked_writes_are_fenced_by_the_live_token,
    renew_by_a_non_holder_is_refused,
    delete_job_forgets_the_job_and_never_reuses_a_token,
    history_has_a_row_per_tenure,
    lease_and_status_views_show_the_leases,
    renew_many_decides_each_renewal_on_its_own,
    staged_writes_are_decided_in_order_and_durable,
    staged_writes_ask_the_guard_of_each_write,
    watch_tells_changes_in_order_and_nothing_of_renewals,
    give_back_releases_only_a_grant_not_asked_for_since,
    a_principals_max_jobs_counts_the_jobs_it_created,
    a_published_value_goes_with_its_grant,
    waiters_are_listed_in_line_order,
);
