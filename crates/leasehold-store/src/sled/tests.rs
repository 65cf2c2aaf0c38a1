//! The embedded store's unit tests: where a put is on its way (pending,
//! logged, in sled) and what reads, checkpoints, deletions and reopens
//! make of it.

use super::*;
use crate::{decode_value, value_key, HistoryPut, ListBudget, Store, ValueRecord};
use leasehold_core::lease::{Limits, Token};

fn val(token: u64, version: u64, v: Option<&str>) -> ValueRecord {
    ValueRecord {
        token: Token(token),
        version,
        value: v.map(|s| s.as_bytes().to_vec()),
    }
}

/// A budget no test page reaches.
fn unlimited() -> ListBudget {
    ListBudget::new(usize::MAX, std::time::Duration::from_secs(3600))
}

fn keys(s: &SledStore, job: &JobName, after: Option<&[u8]>, limit: usize) -> Vec<String> {
    s.list_keys(job, b"k", after, limit, unlimited())
        .unwrap()
        .keys
        .into_iter()
        .map(|(k, m)| {
            let r = s.get_value(job, &k).unwrap().unwrap();
            assert_eq!((m.token, m.version), (r.token, r.version));
            assert_eq!(m.size as usize, r.value.as_ref().unwrap().len());
            format!(
                "{}={}",
                String::from_utf8(k).unwrap(),
                String::from_utf8(r.value.unwrap()).unwrap()
            )
        })
        .collect()
}

/// Values live in three places on their way (pending, logged but not in
/// sled, in sled); gets and lists see the newest, in key order.
#[test]
fn reads_see_every_put_wherever_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let job = Limits::default().job("j").unwrap();
    let other = Limits::default().job("j2").unwrap();
    for k in ["k1", "k3", "k5"] {
        s.put_value(&job, k.as_bytes(), &val(1, 1, Some("sled")))
            .unwrap();
    }
    s.put_value(&other, b"k0", &val(1, 1, Some("other")))
        .unwrap();
    s.sync().unwrap();
    s.checkpoint().unwrap();
    s.put_value(&job, b"k2", &val(1, 1, Some("logged")))
        .unwrap();
    s.put_value(&job, b"k3", &val(1, 2, Some("logged")))
        .unwrap();
    s.sync().unwrap();
    s.put_value(&job, b"k4", &val(1, 1, Some("pending")))
        .unwrap();
    s.put_value(&job, b"k5", &val(1, 2, None)).unwrap();
    assert_eq!(
        keys(&s, &job, None, 100),
        ["k1=sled", "k2=logged", "k3=logged", "k4=pending"]
    );
    assert_eq!(keys(&s, &job, Some(b"k2"), 2), ["k3=logged", "k4=pending"]);
    assert_eq!(s.get_value(&job, b"k5").unwrap(), Some(val(1, 2, None)));
    assert_eq!(
        s.get_value(&job, b"k3").unwrap().unwrap().version,
        2,
        "the logged put, not sled's"
    );
    s.sync().unwrap();
    s.checkpoint_if_due().unwrap();
    assert!(
        !s.pending().overlay.is_empty(),
        "logged puts wait for a checkpoint"
    );
    s.checkpoint().unwrap();
    assert!(s.pending().overlay.is_empty(), "everything is in sled");
    assert_eq!(
        keys(&s, &job, None, 100),
        ["k1=sled", "k2=logged", "k3=logged", "k4=pending"]
    );
}

/// Between checkpoints, a key written many times waits in memory as its
/// newest put only; the checkpoint gives sled that one, and a logged
/// lease is seen by `leases` before any checkpoint.
#[test]
fn the_first_read_of_every_lease_after_a_start_is_sled_and_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let l = Limits::default();
    let lease = |token| LeaseRecord {
        issued: Default::default(),
        holder: Some(l.holder("w").unwrap()),
        token: Token(token),
        ttl: std::time::Duration::from_secs(9),
        owner: None,
        value: Default::default(),
    };
    let (a, b, c) = (
        l.job("a").unwrap(),
        l.job("b").unwrap(),
        l.job("c").unwrap(),
    );
    {
        let s = SledStore::open(dir.path()).unwrap();
        s.put_lease(&a, &lease(1), &[], 0).unwrap();
        s.put_lease(&b, &lease(1), &[], 0).unwrap();
        s.sync().unwrap();
        s.checkpoint().unwrap();
        // Durable in the log only: replayed at the next start.
        s.put_lease(&b, &lease(2), &[], 0).unwrap();
        s.put_lease(&c, &lease(1), &[], 0).unwrap();
        s.sync().unwrap();
    }
    let all = vec![
        (a.clone(), lease(1)),
        (b.clone(), lease(2)),
        (c.clone(), lease(1)),
    ];
    let sorted = |mut v: Vec<(JobName, LeaseRecord)>| {
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    // A start that replayed the log: read from sled.
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(sorted(s.leases().unwrap()), all);
    drop(s);
    // A start with nothing to replay: what the inspection decoded, once.
    let s = SledStore::open(dir.path()).unwrap();
    assert!(s
        .with(|o| Ok(o.first_leases.lock().unwrap().is_some()))
        .unwrap());
    assert_eq!(sorted(s.leases().unwrap()), all);
    assert!(s
        .with(|o| Ok(o.first_leases.lock().unwrap().is_none()))
        .unwrap());
    // Later reads see later changes.
    s.put_lease(&a, &lease(2), &[], 0).unwrap();
    s.sync().unwrap();
    let now = sorted(s.leases().unwrap());
    assert_eq!(now[0], (a.clone(), lease(2)));
    // Changed between the start and the first read: not the inspection's.
    drop(s);
    let s = SledStore::open(dir.path()).unwrap();
    s.put_lease(&c, &lease(3), &[], 0).unwrap();
    s.sync().unwrap();
    assert_eq!(sorted(s.leases().unwrap())[2], (c.clone(), lease(3)));
    drop(s);
    // A reclaim reopens the store under a running table, which reads
    // nothing back: it keeps nothing decoded.
    let s = SledStore::open(dir.path()).unwrap();
    s.reclaim_now(0, 0).unwrap();
    assert_eq!(s.reclaims(), 1);
    assert!(s
        .with(|o| Ok(o.first_leases.lock().unwrap().is_none()))
        .unwrap());
    assert_eq!(sorted(s.leases().unwrap())[2], (c, lease(3)));
}

#[test]
fn logged_puts_reach_sled_once_per_key_at_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let l = Limits::default();
    let job = l.job("j").unwrap();
    for v in 1..=50u64 {
        s.put_value(&job, b"k", &val(1, v, Some(&format!("v{v}"))))
            .unwrap();
        s.sync().unwrap();
        s.checkpoint_if_due().unwrap();
    }
    let in_sled = |s: &SledStore| {
        s.with(|o| Ok(o.values.get(value_key(&job, b"k")).unwrap()))
            .unwrap()
            .map(|v| decode_value(&v).unwrap().version)
    };
    assert_eq!(in_sled(&s), None, "nothing applied before a checkpoint");
    assert_eq!(
        s.with(|o| Ok(o.logged.lock().unwrap().values.len()))
            .unwrap(),
        1,
        "fifty logged puts of one key wait as one"
    );
    let lease = LeaseRecord {
        issued: Default::default(),
        holder: Some(l.holder("w").unwrap()),
        token: Token(3),
        ttl: std::time::Duration::from_secs(9),
        owner: None,
        value: Default::default(),
    };
    s.put_lease(&job, &lease, &[], 0).unwrap();
    s.sync().unwrap();
    assert_eq!(s.leases().unwrap(), vec![(job.clone(), lease)]);
    s.put_value(&job, b"k", &val(1, 51, Some("pending")))
        .unwrap();
    s.checkpoint().unwrap();
    assert_eq!(
        in_sled(&s),
        Some(50),
        "the newest logged put, not the pending one"
    );
    assert_eq!(s.get_value(&job, b"k").unwrap().unwrap().version, 51);
    s.sync().unwrap();
    s.checkpoint().unwrap();
    assert_eq!(in_sled(&s), Some(51));
    assert!(s.pending().overlay.is_empty());
}

/// A deleted job's records are gone at once for reads, after a restart
/// that replays the log, and after a checkpoint (whose counts and
/// digest a restart checks); the new-job floor survives both; other
/// jobs are untouched.
#[test]
fn a_deleted_job_is_gone_and_its_floor_stays() {
    let dir = tempfile::tempdir().unwrap();
    let l = Limits::default();
    let (x, y) = (l.job("x").unwrap(), l.job("y").unwrap());
    let lease = |t| LeaseRecord {
        issued: Default::default(),
        holder: None,
        token: Token(t),
        ttl: std::time::Duration::from_secs(9),
        owner: None,
        value: Default::default(),
    };
    {
        let s = SledStore::open(dir.path()).unwrap();
        s.put_lease(&x, &lease(7), &[], 0).unwrap();
        s.put_lease(&y, &lease(2), &[], 0).unwrap();
        for i in 0..5 {
            s.put_value(&x, format!("k{i}").as_bytes(), &val(7, 1, Some("v")))
                .unwrap();
        }
        s.put_value(&x, b"gone", &val(7, 2, None)).unwrap();
        s.put_value(&y, b"k0", &val(2, 1, Some("y"))).unwrap();
        let grant = |t| HistoryPut::Grant {
            token: Token(t),
            holder: l.holder("h").unwrap(),
            at_unix_ms: 1,
            ttl: std::time::Duration::from_secs(9),
            value: Default::default(),
        };
        s.put_history(&x, &[grant(6)]).unwrap();
        s.put_history(&y, &[grant(2)]).unwrap();
        s.sync().unwrap();
        s.checkpoint().unwrap();
        // One more of each, only in the overlay and the log.
        s.put_value(&x, b"k9", &val(7, 1, Some("v"))).unwrap();
        s.put_history(&x, &[grant(7)]).unwrap();
        assert_eq!(s.history(&x, None, 10).unwrap().len(), 2);
        s.sync().unwrap();
        assert_eq!(
            s.delete_job(&x, Token(7)).unwrap(),
            7,
            "tombstones included"
        );
        assert_eq!(s.get_value(&x, b"k0").unwrap(), None);
        assert_eq!(s.get_value(&x, b"k9").unwrap(), None);
        assert!(keys(&s, &x, None, 100).is_empty());
        assert_eq!(s.count_keys(&x).unwrap(), 0);
        assert_eq!(s.count_keys(&y).unwrap(), 1);
        assert_eq!(s.history(&x, None, 10).unwrap(), vec![], "history too");
        assert_eq!(s.history(&y, None, 10).unwrap().len(), 1);
        s.sync().unwrap();
        assert_eq!(s.leases().unwrap(), vec![(y.clone(), lease(2))]);
        // No checkpoint: the restart replays the log.
    }
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(s.floors().new_jobs, Token(7));
    assert_eq!(
        s.floors().every,
        Token::NONE,
        "the every-job floor is not raised"
    );
    assert_eq!(s.leases().unwrap(), vec![(y.clone(), lease(2))]);
    assert_eq!(s.get_value(&x, b"k0").unwrap(), None);
    assert_eq!(keys(&s, &y, None, 100), vec!["k0=y"]);
    assert_eq!(s.history(&x, None, 10).unwrap(), vec![]);
    assert_eq!(s.history(&y, None, 10).unwrap().len(), 1);
    let c = s.last_checkpoint().unwrap();
    // y's value and its history's one record.
    assert_eq!((c.leases, c.values, c.new_job_floor), (1, 2, 7));
    assert!(c.max_token >= 7);
    drop(s);
    // The checkpointed state passes the start-up checks again.
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(s.floors().new_jobs, Token(7));
    assert_eq!(s.count_keys(&y).unwrap(), 1);
}

/// A read made without the caller's lock is confirmed from memory, or
/// made again when a checkpoint or a reopen may have changed where the
/// record lives.
#[test]
fn a_read_ahead_is_confirmed_or_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let job = Limits::default().job("j").unwrap();
    s.put_value(&job, b"k", &val(1, 1, Some("one"))).unwrap();
    s.sync().unwrap();
    s.checkpoint().unwrap();
    // Read from sled, nothing since: still good.
    let e = s.read_epoch();
    assert_eq!(s.get_value(&job, b"k").unwrap().unwrap().version, 1);
    assert_eq!(crate::recheck_value(&s, &job, b"k", e).unwrap(), None);
    assert_eq!(
        s.recheck_value_in_memory(&job, b"k", e).unwrap(),
        Some(None)
    );
    // A put since: the overlay's record.
    s.put_value(&job, b"k", &val(1, 2, Some("two"))).unwrap();
    assert_eq!(
        crate::recheck_value(&s, &job, b"k", e).unwrap(),
        Some(Some(val(1, 2, Some("two"))))
    );
    assert_eq!(
        s.recheck_value_in_memory(&job, b"k", e).unwrap(),
        Some(Some(Some(val(1, 2, Some("two")))))
    );
    // A checkpoint moved it to sled and out of the overlay: read again
    // (from memory alone the store cannot tell).
    s.sync().unwrap();
    s.checkpoint().unwrap();
    assert_eq!(s.recheck_value_in_memory(&job, b"k", e).unwrap(), None);
    assert_eq!(
        crate::recheck_value(&s, &job, b"k", e).unwrap(),
        Some(Some(val(1, 2, Some("two"))))
    );
    // A reopen, likewise.
    let e = s.read_epoch();
    s.reopen().unwrap();
    assert_eq!(
        crate::recheck_value(&s, &job, b"k", e).unwrap(),
        Some(Some(val(1, 2, Some("two"))))
    );
}

/// A reopen keeps exactly what was synced: logged puts come back from
/// the log, unsynced ones are gone.
#[test]
fn a_reopen_replays_the_log_and_drops_what_was_not_synced() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let l = Limits::default();
    let job = l.job("j").unwrap();
    let lease = LeaseRecord {
        issued: Default::default(),
        holder: Some(l.holder("w").unwrap()),
        token: Token(7),
        ttl: std::time::Duration::from_secs(9),
        owner: None,
        value: Default::default(),
    };
    s.put_lease(&job, &lease, &[], 0).unwrap();
    s.put_value(&job, b"k1", &val(7, 1, Some("synced")))
        .unwrap();
    s.sync().unwrap(); // logged; never applied to sled before the reopen
    s.put_value(&job, b"k2", &val(7, 1, Some("lost"))).unwrap();
    s.reopen().unwrap();
    assert_eq!(s.leases().unwrap(), vec![(job.clone(), lease)]);
    assert_eq!(
        s.get_value(&job, b"k1").unwrap(),
        Some(val(7, 1, Some("synced")))
    );
    assert_eq!(s.get_value(&job, b"k2").unwrap(), None);
    drop(s);
    // And again from a fresh process's point of view.
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(keys(&s, &job, None, 10), ["k1=synced"]);
}

/// A batch that does not fit in the log goes straight into sled, and a
/// log that passes half full is checkpointed: nothing is lost either way.
#[test]
fn a_full_log_checkpoints_into_sled() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let job = Limits::default().job("j").unwrap();
    let cap = s.with(|o| Ok(o.wal.lock().unwrap().capacity())).unwrap();
    let big = "x".repeat(60 * 1024);
    let mut n = 0u64;
    while n * 60 * 1024 < cap * 3 {
        n += 1;
        let k = format!("k{n:04}");
        s.put_value(&job, k.as_bytes(), &val(1, 1, Some(&big)))
            .unwrap();
        if n % 5 == 0 {
            s.sync().unwrap();
            s.checkpoint_if_due().unwrap();
        }
    }
    // Many at once: more than the whole log holds.
    for i in 0..(cap / (60 * 1024) + 2) {
        let k = format!("m{i:04}");
        s.put_value(&job, k.as_bytes(), &val(1, 1, Some(&big)))
            .unwrap();
    }
    s.sync().unwrap();
    let used = s.with(|o| Ok(o.wal.lock().unwrap().used())).unwrap();
    assert!(used * 2 <= cap, "the log was checkpointed: {used} of {cap}");
    drop(s);
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(
        s.list_keys(&job, b"", None, 10_000, unlimited())
            .unwrap()
            .keys
            .len() as u64,
        n + cap / (60 * 1024) + 2
    );
}

/// Every page of `job`'s keys under `k`, each of at most `limit` keys
/// within `budget()`, one after the other: the keys, and the pages.
fn all_pages(
    s: &SledStore,
    job: &JobName,
    limit: usize,
    budget: impl Fn() -> ListBudget,
) -> (Vec<String>, usize) {
    let (mut got, mut after, mut pages) = (Vec::new(), None::<Vec<u8>>, 0);
    loop {
        let page = s
            .list_keys(job, b"k", after.as_deref(), limit, budget())
            .unwrap();
        assert!(page.keys.len() <= limit);
        got.extend(
            page.keys
                .into_iter()
                .map(|(k, _)| String::from_utf8(k).unwrap()),
        );
        pages += 1;
        match page.resume_after {
            Some(k) => after = Some(k),
            None => return (got, pages),
        }
        assert!(pages < 10_000);
    }
}

/// Pages of keys within a small budget, token to token, over records in
/// sled and in the overlay (staged, not yet applied), with tombstones in
/// both and a deleted job's keys among them: every live key once, in
/// order; no deleted one.
#[test]
fn key_pages_within_a_budget_list_every_live_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let l = Limits::default();
    let (x, y) = (l.job("x").unwrap(), l.job("x2").unwrap());
    let s = SledStore::open(dir.path()).unwrap();
    let mut want = Vec::new();
    for i in 0..300 {
        let k = format!("k{i:03}");
        // Every third key deleted, every seventh left for the overlay.
        let v = (i % 3 != 0).then_some("v");
        if i % 7 != 0 {
            s.put_value(&x, k.as_bytes(), &val(1, 1, v)).unwrap();
        }
        if v.is_some() {
            want.push(k);
        }
    }
    s.put_value(&y, b"k000", &val(1, 1, Some("other job")))
        .unwrap();
    s.sync().unwrap();
    s.checkpoint().unwrap();
    for i in (0..300).step_by(7) {
        let v = (i % 3 != 0).then_some("v");
        s.put_value(&x, format!("k{i:03}").as_bytes(), &val(1, 1, v))
            .unwrap();
    }
    // And one live key in sled deleted in the overlay.
    s.put_value(&x, b"k001", &val(1, 2, None)).unwrap();
    want.retain(|k| k != "k001");
    let budget = || ListBudget::new(1000, std::time::Duration::from_secs(3600));
    let (got, pages) = all_pages(&s, &x, 1000, budget);
    assert_eq!(got, want);
    assert!(pages > 10, "a budget of 1,000 bytes: {pages} pages");
}

/// Pages over more staged changes than a page copies (its limit and
/// `LIST_OVERLAY_SLACK`), among keys in sled: each page stops where its
/// copy of the overlay ends, and the pages list every live key once.
#[test]
fn key_pages_over_a_large_overlay_list_every_live_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let z = Limits::default().job("z").unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    for i in (0..3000).step_by(2) {
        s.put_value(&z, format!("k{i:04}").as_bytes(), &val(1, 1, Some("v")))
            .unwrap();
    }
    s.sync().unwrap();
    s.checkpoint().unwrap();
    // Staged only: the odd keys, and every tenth even key deleted.
    for i in (1..3000).step_by(2) {
        s.put_value(&z, format!("k{i:04}").as_bytes(), &val(1, 1, Some("v")))
            .unwrap();
    }
    for i in (0..3000).step_by(20) {
        s.put_value(&z, format!("k{i:04}").as_bytes(), &val(1, 2, None))
            .unwrap();
    }
    let want: Vec<String> = (0..3000)
        .filter(|i| i % 20 != 0)
        .map(|i| format!("k{i:04}"))
        .collect();
    for limit in [10, 1000] {
        let (got, _) = all_pages(&s, &z, limit, unlimited);
        assert_eq!(got, want, "limit {limit}");
    }
}

/// A backup asked for while a reclaim of disk space copies the store waits
/// for the reclaim, then reads the rewritten store whole: neither is given
/// up. (Run during the copy, the backup's own checkpoint would move the
/// log and give the reclaim up, and the reclaim would end the backup or
/// hold its switch, and with it the whole store, until the backup's
/// reader was done.)
#[test]
fn a_backup_asked_for_during_a_reclaim_waits_for_it_and_neither_is_given_up() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(SledStore::open(dir.path()).unwrap());
    let job = Limits::default().job("j").unwrap();
    // Enough that the copy takes a while.
    let big = "x".repeat(32 * 1024);
    let n = 400;
    for i in 0..n {
        let k = format!("k{i:04}");
        s.put_value(&job, k.as_bytes(), &val(1, 1, Some(&big)))
            .unwrap();
        if i % 50 == 49 {
            s.sync().unwrap();
            s.checkpoint().unwrap();
        }
    }
    s.sync().unwrap();
    let reclaim = {
        let s = s.clone();
        std::thread::spawn(move || s.reclaim_now(0, 0))
    };
    // The copy is under way once its folder is in the data dir.
    while crate::datadir::leftovers(dir.path()).is_empty() && !reclaim.is_finished() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut out = Vec::new();
    s.backup(&mut out).expect("the backup");
    reclaim.join().unwrap().expect("the reclaim");
    assert_eq!(s.reclaims(), 1, "the reclaim was given up");
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().join("b.lhb");
    std::fs::write(&file, &out).unwrap();
    let b = crate::backup::read_backup(&file).unwrap();
    assert_eq!(b.records.len(), n, "every value in the backup");
}

/// A settle after churn rewrites a store whose sled took in more than
/// `CHURN_RATIO` times its live data (past the floor), keeping every live
/// record, and only once: the rewritten sled starts with no churn. With
/// reclaims off, or below the ratio, it does not.
#[test]
fn a_settle_after_churn_rewrites_the_store_once_and_keeps_what_is_live() {
    let big = "x".repeat(1024);
    // `n` values of 1 KiB written and kept, then a checkpoint.
    let keep = |s: &SledStore, job: &JobName, n: usize| {
        for i in 0..n {
            let k = format!("kept{i:03}");
            s.put_value(job, k.as_bytes(), &val(1, 1, Some(&big)))
                .unwrap();
        }
        s.sync().unwrap();
        s.checkpoint().unwrap();
    };
    let churn = |s: &SledStore, job: &JobName, kept: usize| {
        // 200 values of 1 KiB written and deleted, `kept` written and kept.
        for round in 0..2 {
            for i in 0..200 {
                let k = format!("gone{i:03}");
                let v = (round == 0).then_some(big.as_str());
                s.put_value(job, k.as_bytes(), &val(1, round + 1, v))
                    .unwrap();
            }
            s.sync().unwrap();
            s.checkpoint().unwrap();
        }
        keep(s, job, kept);
    };
    let job = Limits::default().job("j").unwrap();

    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    s.set_churn_floor(64 * 1024);
    churn(&s, &job, 10);
    s.settle().unwrap();
    assert_eq!(s.reclaims(), 1, "the churned store is rewritten");
    let kept = keys(&s, &job, None, 1000);
    assert_eq!(kept.len(), 10, "every live value kept: {kept:?}");
    assert!(kept.iter().all(|k| k.starts_with("kept")));
    s.settle().unwrap();
    assert_eq!(s.reclaims(), 1, "the rewritten sled has taken in no churn");
    drop(s);
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(
        keys(&s, &job, None, 1000).len(),
        10,
        "kept across a restart"
    );
    drop(s);

    // A reclaim of disk space in the middle of the churn does not count
    // as giving the memory back.
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    s.set_churn_floor(64 * 1024);
    churn(&s, &job, 0);
    s.reclaim_now(0, 0).unwrap();
    assert_eq!(s.reclaims(), 1);
    // After it, 10 KiB only: under the floor alone.
    keep(&s, &job, 10);
    s.settle().unwrap();
    assert_eq!(s.reclaims(), 2, "the churn before the reclaim counts too");
    drop(s);

    // Reclaims off: never rewritten.
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    s.set_churn_floor(64 * 1024);
    s.set_reclaim_ratio(0.0).unwrap();
    churn(&s, &job, 10);
    s.settle().unwrap();
    assert_eq!(s.reclaims(), 0, "reclaims are off");
    drop(s);

    // Live data past a quarter of the churn: not rewritten.
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    s.set_churn_floor(64 * 1024);
    churn(&s, &job, 150);
    s.settle().unwrap();
    assert_eq!(s.reclaims(), 0, "the churn is under 4 times the live data");
}

/// Adds `n` small held leases to `s`, numbered on from `next`, in name
/// order, with a checkpoint every 10,000 and at the end: many small
/// records, which take sled several times their own size.
fn grow_small_leases(s: &SledStore, next: &mut usize, n: usize) {
    let l = Limits::default();
    let lease = LeaseRecord {
        issued: Default::default(),
        holder: Some(l.holder("w@00000000-0000-4000-8000-000000000001").unwrap()),
        token: Token(1),
        ttl: std::time::Duration::from_secs(9),
        owner: None,
        value: Default::default(),
    };
    for _ in 0..n {
        let job = l.job(&format!("job-{next:07}")).unwrap();
        s.put_lease(&job, &lease, &[], 0).unwrap();
        *next += 1;
        if *next % 10_000 == 0 {
            s.sync().unwrap();
            s.checkpoint().unwrap();
        }
    }
    s.sync().unwrap();
    s.checkpoint().unwrap();
}

/// A store that a rewrite cannot bring under the reclaim ratio (many small
/// leases take sled several times their own size) is rewritten once: the
/// floor that rewrite leaves is kept in the data dir, so a restart does
/// not rewrite it again (each start of a million leases did, for 13 s).
#[test]
fn a_store_its_rewrite_cannot_shrink_is_not_rewritten_again_at_each_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open_reclaiming(dir.path(), MIN_RATIO).unwrap();
        grow_small_leases(&s, &mut 0, 60_000);
        s.reclaim_if_due().unwrap();
        assert_eq!(s.reclaims(), 1, "the grown store is rewritten once");
        assert!(s.reclaim_floor() > 0, "and cannot get under the ratio");
    }
    let floor = std::fs::read_to_string(dir.path().join(crate::datadir::RECLAIM_FLOOR_FILE))
        .expect("the floor is kept");
    let s = SledStore::open_reclaiming(dir.path(), MIN_RATIO).unwrap();
    assert_eq!(s.reclaims(), 0, "the start did not rewrite it again");
    assert_eq!(s.reclaim_floor().to_string(), floor.trim());
    assert_eq!(s.leases().unwrap().len(), 60_000);
}

/// A store its rewrite could not shrink (many small leases) and that then
/// only grows is not rewritten again when its size passes twice the
/// copy's: its floor grows with its live data.
#[test]
fn a_store_that_only_grows_after_a_rewrite_is_not_rewritten_at_each_doubling() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open_reclaiming(dir.path(), MIN_RATIO).unwrap();
    let mut next = 0;
    grow_small_leases(&s, &mut next, 60_000);
    s.reclaim_if_due().unwrap();
    assert_eq!(s.reclaims(), 1, "the grown store is rewritten once");
    let fixed = s.reclaim_floor();
    assert!(fixed > 0, "and cannot get under the ratio");
    // Grows past the fixed floor (twice the copy's size), which alone
    // would have rewritten it again.
    while store_bytes(dir.path()) <= fixed {
        assert!(next < 1_000_000, "the store never passed its floor");
        grow_small_leases(&s, &mut next, 20_000);
        // Not held back by the last rewrite's time (`BUSY_SHARE`).
        *s.reclaim.not_before.lock().unwrap() = None;
        s.reclaim_if_due().unwrap();
    }
    *s.reclaim.not_before.lock().unwrap() = None;
    s.reclaim_if_due().unwrap();
    assert_eq!(s.reclaims(), 1, "growth alone is not rewritten");
    assert_eq!(s.leases().unwrap().len(), next);
}

/// The grown floor: none without a rewrite that could not shrink the store,
/// twice a copy's size at the copy's bytes per live byte, and a tiny
/// store's copy (mostly sled's fixed files) taken as at most 8 of them.
#[test]
fn the_grown_floor_follows_the_live_data_within_bounds() {
    use super::reclaim::grown_floor;
    let (wal, mb) = (8 << 20, 1_000_000);
    assert_eq!(grown_floor(0.0, 100 * mb, wal), 0);
    let fixed = wal + crate::sled::reclaim::SLACK;
    assert_eq!(grown_floor(3.0, 100 * mb, wal), 2 * (300 * mb + fixed));
    assert_eq!(grown_floor(3.0, 200 * mb, wal), 2 * (600 * mb + fixed));
    assert_eq!(
        grown_floor(65.0, 100 * mb, wal),
        grown_floor(8.0, 100 * mb, wal)
    );
}

/// A checkpoint is due once `CHECKPOINT_KEYS` keys wait for sled, though
/// they fill little of the log; one due for its keys alone waits while a
/// backup reads sled.
#[test]
fn many_keys_make_a_checkpoint_due_before_the_log_fills() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let job = Limits::default().job("j").unwrap();
    let put = |i: usize| {
        s.put_value(&job, format!("k{i}").as_bytes(), &val(1, 1, Some("v")))
            .unwrap()
    };
    for i in 0..CHECKPOINT_KEYS - 1 {
        put(i);
    }
    s.sync().unwrap();
    let small = s
        .with(|o| {
            let wal = o.wal.lock().unwrap();
            Ok(wal.used() * 4 < wal.capacity())
        })
        .unwrap();
    assert!(small, "the keys fill under a quarter of the log");
    assert!(!s.checkpoint_due());
    s.checkpoint_if_due().unwrap();
    assert_eq!(
        s.with(|o| Ok(o.logged_keys())).unwrap(),
        CHECKPOINT_KEYS - 1
    );

    put(CHECKPOINT_KEYS);
    s.sync().unwrap();
    assert!(s.checkpoint_due());
    // A backup reading sled holds the gate: the checkpoint waits for it.
    s.with(|o| {
        let _backup = o.gate.read().unwrap();
        s.checkpoint_if_due().unwrap();
        assert_eq!(o.logged_keys(), CHECKPOINT_KEYS);
        Ok(())
    })
    .unwrap();
    s.checkpoint_if_due().unwrap();
    assert_eq!(s.with(|o| Ok(o.logged_keys())).unwrap(), 0);
    assert!(s.pending().overlay.is_empty(), "everything is in sled");
    assert!(!s.checkpoint_due());
    assert_eq!(
        s.get_value(&job, b"k7").unwrap(),
        Some(val(1, 1, Some("v")))
    );
}

/// Every file of `from`, into the new `to`.
fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_files(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A store large enough to be read on two threads at start comes back
/// whole, in name order; and a byte flipped anywhere in sled's file of it
/// is refused or harmless (every lease the same), whichever side of the
/// read meets it (much of the file is page versions replaced since,
/// where a flip is harmless).
#[test]
fn a_store_read_on_two_threads_comes_back_whole_and_damage_is_refused_or_harmless() {
    let n = 70_000;
    assert!(n as u64 >= super::scan::TWO_FROM);
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open_reclaiming(dir.path(), 0.0).unwrap();
        grow_small_leases(&s, &mut 0, n);
    }
    let whole = {
        let s = SledStore::open_reclaiming(dir.path(), 0.0).unwrap();
        s.leases().unwrap()
    };
    assert_eq!(whole.len(), n);
    assert!(whole.windows(2).all(|w| w[0].0 < w[1].0), "in name order");
    assert_eq!(whole[0].0.as_str(), "job-0000000");
    assert_eq!(whole[n - 1].0.as_str(), format!("job-{:07}", n - 1));
    let len = std::fs::metadata(dir.path().join("db")).unwrap().len();
    let (mut refused, mut harmless) = (0, 0);
    for i in 1..16 {
        let copy = tempfile::tempdir().unwrap();
        copy_files(dir.path(), copy.path());
        let db = copy.path().join("db");
        let mut b = std::fs::read(&db).unwrap();
        b[(len * i / 16) as usize] ^= 0x5a;
        std::fs::write(&db, b).unwrap();
        match SledStore::open_reclaiming(copy.path(), 0.0) {
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("sled") || e.contains("damaged"), "{e}");
                refused += 1;
            }
            Ok(s) => {
                assert_eq!(
                    s.leases().unwrap(),
                    whole,
                    "a start that goes on lost nothing"
                );
                harmless += 1;
            }
        }
    }
    eprintln!("{refused} refused, {harmless} harmless");
    // Most of the file is page versions that later ones replaced.
    assert!(refused > 0, "no damage was found in {harmless} starts");
}
