//! Scenario tests with a hand-driven clock, and property tests of the
//! invariants against a reference model.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::error::FenceCause;
use crate::lease::model::{self, Op};
use crate::lease::Limits;

const TTL: Duration = Duration::from_secs(10);

fn job(s: &str) -> JobName {
    Limits::default().job(s).unwrap()
}
fn who(s: &str) -> HolderId {
    Limits::default().holder(s).unwrap()
}
fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn granted(a: &Acquire) -> Option<Token> {
    match a {
        Acquire::Granted(v) => Some(v.token),
        Acquire::Busy { .. } | Acquire::Exhausted(_) => None,
    }
}

#[test]
fn first_grant_is_token_one_and_persisted() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    t.set_wall_clock(1_764_892_800_123);
    let (a, fx) = t.acquire(&job("j"), &who("a"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token(1)));
    assert_eq!(
        fx.persist,
        Some(LeaseRecord {
            // When and with which TTL the token was issued: its proof's.
            issued: Issued::new(1_764_892_800_123, TTL),
            holder: Some(who("a")),
            token: Token(1),
            ttl: TTL,
            owner: None,
            value: None,
        })
    );
    assert!(fx.changed);
}

#[test]
fn second_holder_sees_holder_and_token() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None, false);
    let (a, fx) = t.acquire(&job("j"), &who("b"), TTL, t0 + ms(1), None, false);
    match a {
        Acquire::Busy { view, .. } => {
            assert_eq!(view.holder(), Some(&who("a")));
            assert_eq!(view.token, Token(1));
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(fx, Effects::default());
}

#[test]
fn renewal_keeps_token_and_extends_and_needs_no_flush() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None, false);
    let (v, fx) = t
        .renew(&job("j"), &who("a"), Token(1), TTL, t0 + ms(9_000))
        .unwrap();
    assert_eq!(v.token, Token(1));
    assert_eq!(v.deadline(), Some(t0 + ms(19_000)));
    assert_eq!(fx.persist, None, "same TTL: no write on the hot path");
    // Past the old deadline, still held.
    let (a, _) = t.acquire(&job("j"), &who("b"), TTL, t0 + ms(15_000), None, false);
    assert_eq!(granted(&a), None);
}

#[test]
fn renewal_with_longer_ttl_is_persisted() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None, false);
    let (_, fx) = t
        .renew(&job("j"), &who("a"), Token(1), TTL * 2, t0)
        .unwrap();
    assert_eq!(fx.persist.map(|r| r.ttl), Some(TTL * 2));
    let (_, fx) = t.renew(&job("j"), &who("a"), Token(1), TTL, t0).unwrap();
    assert_eq!(
        fx.persist, None,
        "shorter TTL: the stored longer one is safe"
    );
}

#[test]
fn renewal_that_moves_the_deadline_earlier_wakes_the_first_in_line() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL * 6, t0, None, false);
    let w1 = t.enqueue(&j, &who("b"), TTL, t0, false);
    let _w2 = t.enqueue(&j, &who("c"), TTL, t0, false);
    // A later deadline: the first in line's timer fires early and finds
    // the lease held; nobody needs waking.
    let (_, fx) = t
        .renew(&j, &who("a"), Token(1), TTL * 6, t0 + ms(1))
        .unwrap();
    assert_eq!(fx.wake, vec![]);
    // An earlier one: the first in line, asleep until the old deadline,
    // arms its timer again; the rest wait for it to move up.
    let (v, fx) = t
        .renew(&j, &who("a"), Token(1), ms(300), t0 + ms(2))
        .unwrap();
    assert_eq!(v.deadline(), Some(t0 + ms(302)));
    assert_eq!(fx.wake, vec![w1]);
    let (a, _) = t.acquire(&j, &who("b"), TTL, t0 + ms(302), Some(w1), false);
    assert_eq!(granted(&a), Some(Token(2)));
}

#[test]
fn expiry_then_regrant_bumps_token_even_for_same_holder() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None, false);
    let err = t
        .renew(&job("j"), &who("a"), Token(1), TTL, t0 + TTL)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::LeaseLost {
                current_holder: None,
                ..
            }
        ),
        "{err:?}"
    );
    let (a, _) = t.acquire(&job("j"), &who("a"), TTL, t0 + TTL, None, false);
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(t.stats().expiries, 1);
    assert_eq!(t.stats().takeovers, 0);
}

#[test]
fn takeover_after_expiry_is_token_plus_one() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None, false);
    let (a, _) = t.acquire(&job("j"), &who("b"), TTL, t0 + TTL - ms(1), None, false);
    assert_eq!(granted(&a), None, "one millisecond early is too early");
    let (a, _) = t.acquire(&job("j"), &who("b"), TTL, t0 + TTL, None, false);
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(t.stats().takeovers, 1);
}

#[test]
fn reacquire_by_live_holder_keeps_token() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None, false);
    let (a, fx) = t.acquire(&job("j"), &who("a"), TTL, t0 + ms(5), None, false);
    assert_eq!(granted(&a), Some(Token(1)));
    assert!(!fx.changed);
}

#[test]
fn release_hands_over_to_first_waiter_in_one_durable_step() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let w1 = t.enqueue(&j, &who("b"), TTL, t0, false);
    let w2 = t.enqueue(&j, &who("c"), TTL, t0, false);
    let fx = t.release(&j, &who("a"), Token(1), t0 + ms(1)).unwrap();
    assert_eq!(
        fx.wake,
        vec![w1, w2],
        "b was granted; c is now first in line"
    );
    assert_eq!(
        fx.persist,
        Some(LeaseRecord {
            issued: Issued::new(0, TTL),
            holder: Some(who("b")),
            token: Token(2),
            ttl: TTL,
            owner: None,
            value: None,
        }),
        "one record covers the release and the grant"
    );
    assert_eq!(t.view(&j, t0 + ms(1)).holder(), Some(&who("b")));
    // The woken waiter finds the lease is its own.
    let (a, fx) = t.acquire(&j, &who("b"), TTL, t0 + ms(2), Some(w1), false);
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(fx.persist, None);
    // Nobody jumps the queue: c is next, not a newcomer.
    let fx = t.release(&j, &who("b"), Token(2), t0 + ms(3)).unwrap();
    assert_eq!(fx.wake, vec![w2]);
    let (a, _) = t.acquire(&j, &who("z"), TTL, t0 + ms(4), None, false);
    assert_eq!(granted(&a), None);
}

#[test]
fn free_lease_goes_to_first_waiter_not_a_newcomer() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let w1 = t.enqueue(&j, &who("b"), TTL, t0, false);
    let w2 = t.enqueue(&j, &who("c"), TTL, t0, false);
    // a expires; the first waiter's timer wakes it.
    let (a, _) = t.acquire(&j, &who("z"), TTL, t0 + TTL, None, false);
    assert_eq!(
        granted(&a),
        None,
        "a newcomer that does not wait cannot jump the queue"
    );
    let (a, _) = t.acquire(&j, &who("c"), TTL, t0 + TTL, Some(w2), false);
    assert_eq!(granted(&a), None, "the second in line cannot go first");
    let (a, fx) = t.acquire(&j, &who("b"), TTL, t0 + TTL, Some(w1), false);
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(fx.wake, vec![w2], "the next in line arms its timer");
}

#[test]
fn release_is_idempotent_and_refuses_others() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    assert!(matches!(
        t.release(&j, &who("b"), Token(1), t0),
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(
        t.release(&j, &who("a"), Token(9), t0),
        Err(Error::UnknownToken { .. })
    ));
    let _ = t.release(&j, &who("a"), Token(1), t0).unwrap();
    assert_eq!(
        t.release(&j, &who("a"), Token(1), t0).unwrap(),
        Effects::default()
    );
    let (a, _) = t.acquire(&j, &who("a"), TTL, t0, None, false);
    assert_eq!(
        granted(&a),
        Some(Token(2)),
        "released then granted again: new token"
    );
}

#[test]
fn dequeue_of_first_wakes_next() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let w1 = t.enqueue(&j, &who("a"), TTL, t0, false);
    let w2 = t.enqueue(&j, &who("b"), TTL, t0, false);
    assert_eq!(t.dequeue(&j, w2).wake, vec![]);
    let w3 = t.enqueue(&j, &who("c"), TTL, t0, false);
    assert_eq!(t.dequeue(&j, w1).wake, vec![w3]);
}

#[test]
fn departures_anywhere_in_two_interleaved_lines_keep_both_in_order() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let names = [job("j"), job("k")];
    // Two jobs' lines take ids from one counter, so each line's ids have
    // gaps.
    let mut lines: [Vec<WaiterId>; 2] = [Vec::new(), Vec::new()];
    for i in 0..200 {
        let l = usize::from(i % 3 == 0);
        lines[l].push(t.enqueue(&names[l], &who(&format!("w{i}")), TTL, t0, false));
    }
    for l in 0..2 {
        let (name, other_first) = (&names[l], lines[1 - l][0]);
        let line = &mut lines[l];
        // Leave from the middle, the back, and the front.
        let picks: [fn(usize) -> usize; 5] = [|n| n / 2, |n| n - 1, |_| 0, |_| 7, |_| 7];
        for pick in picks {
            let pos = pick(line.len());
            let id = line.remove(pos);
            let expect = if pos == 0 { vec![line[0]] } else { vec![] };
            assert_eq!(
                t.dequeue(name, id).wake,
                expect,
                "only a new first is woken"
            );
            assert_eq!(t.dequeue(name, id).wake, vec![], "gone already: nothing");
        }
        // Another line's waiter is not in this one.
        assert_eq!(t.dequeue(name, other_first).wake, vec![]);
        // The rest leave in order of arrival, each waking the next.
        while line.len() > 1 {
            let id = line.remove(0);
            assert_eq!(t.dequeue(name, id).wake, vec![line[0]]);
        }
    }
}

#[test]
fn fence_rejects_paused_leader_before_successor_writes() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("bridge_health");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    t.check_write(&j, Token(1), None, t0 + ms(1)).unwrap();
    // a is paused past its TTL; b takes over and has not written anything.
    let (a, _) = t.acquire(&j, &who("b"), TTL, t0 + TTL, None, false);
    assert_eq!(granted(&a), Some(Token(2)));
    let err = t
        .check_write(&j, Token(1), Some(Token(1)), t0 + TTL + ms(1))
        .unwrap_err();
    assert_eq!(
        err,
        Error::Fenced {
            job: "bridge_health".into(),
            token: Token(1),
            current: Token(2),
            cause: FenceCause::Superseded
        }
    );
    assert!(err.to_string().contains("token 2") || err.to_string().contains("at token 2"));
    assert_eq!(t.stats().fenced_writes, 1);
}

#[test]
fn a_guard_refuses_the_live_holders_writes_before_the_fence() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let refuse_a = |h: &str| h == "a";
    // Even on a key a higher token wrote: the guard answers first.
    assert!(matches!(
        t.admit_write(&j, Token(1), Some(Token(2)), Some(&refuse_a), t0),
        Err(Error::PermissionDenied {
            action: "write",
            ..
        })
    ));
    // A refusal by the guard is not a fenced write.
    assert_eq!(t.stats().fenced_writes, 0);
    let refuse_b = |h: &str| h == "b";
    t.admit_write(&j, Token(1), None, Some(&refuse_b), t0)
        .unwrap();
    // Once the lease ran out, the fence answers: nobody holds it live.
    assert!(matches!(
        t.admit_write(&j, Token(1), None, Some(&refuse_a), t0 + TTL),
        Err(Error::Fenced {
            cause: FenceCause::NotLive,
            ..
        })
    ));
}

#[test]
fn fence_rejects_expired_and_released_and_unknown_tokens() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    assert!(matches!(
        t.check_write(&j, Token(1), None, t0),
        Err(Error::UnknownToken { .. })
    ));
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    assert!(matches!(
        t.check_write(&j, Token(2), None, t0),
        Err(Error::UnknownToken { .. })
    ));
    assert!(matches!(
        t.check_write(&j, Token(1), None, t0 + TTL),
        Err(Error::Fenced {
            cause: FenceCause::NotLive,
            ..
        })
    ));
    let _ = t.acquire(&j, &who("a"), TTL, t0 + TTL, None, false);
    assert!(matches!(
        t.check_write(&j, Token(2), Some(Token(3)), t0 + TTL),
        Err(Error::Fenced {
            cause: FenceCause::KeyNewer,
            ..
        })
    ));
    let _ = t.release(&j, &who("a"), Token(2), t0 + TTL).unwrap();
    assert!(matches!(
        t.check_write(&j, Token(2), None, t0 + TTL),
        Err(Error::Fenced {
            cause: FenceCause::NotLive,
            ..
        })
    ));
}

#[test]
fn restore_extends_from_startup_and_continues_tokens() {
    let t0 = Instant::now();
    let recs = vec![
        (
            job("held"),
            LeaseRecord {
                issued: Default::default(),
                holder: Some(who("a")),
                token: Token(7),
                ttl: TTL,
                owner: None,
                value: None,
            },
        ),
        (
            job("free"),
            LeaseRecord {
                issued: Default::default(),
                holder: None,
                token: Token(3),
                ttl: TTL,
                owner: None,
                value: None,
            },
        ),
    ];
    let mut t = LeaseTable::restore(recs, Floors::default(), t0);
    let (a, _) = t.acquire(&job("held"), &who("b"), TTL, t0 + TTL - ms(1), None, false);
    assert_eq!(
        granted(&a),
        None,
        "no takeover before a full TTL from start-up"
    );
    let _ = t
        .renew(&job("held"), &who("a"), Token(7), TTL, t0 + ms(5))
        .unwrap();
    let (a, _) = t.acquire(&job("free"), &who("b"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token(4)));
}

/// After a recovery or a restore, every grant is above the floor: on jobs
/// the store remembers, on jobs it lost, and a lease held below the floor
/// is not live again (its holder's token predates the floor).
#[test]
fn every_grant_is_above_the_floor() {
    let t0 = Instant::now();
    let floor = Token(1 << 32);
    let recs = vec![(
        job("kept"),
        LeaseRecord {
            issued: Default::default(),
            holder: Some(who("a")),
            token: Token(7),
            ttl: TTL,
            owner: None,
            value: None,
        },
    )];
    let mut t = LeaseTable::restore(
        recs,
        Floors {
            every: floor,
            new_jobs: Token::NONE,
        },
        t0,
    );
    assert!(t.renew(&job("kept"), &who("a"), Token(7), TTL, t0).is_err());
    let (a, _) = t.acquire(&job("kept"), &who("b"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token((1 << 32) + 1)));
    let (a, _) = t.acquire(&job("lost"), &who("b"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token((1 << 32) + 1)));
    let id = t.enqueue(&job("queued"), &who("c"), TTL, t0, false);
    let (a, _) = t.acquire(&job("queued"), &who("c"), TTL, t0, Some(id), false);
    assert_eq!(granted(&a), Some(Token((1 << 32) + 1)));
    t.reload(
        Vec::new(),
        Floors {
            every: Token(1 << 40),
            new_jobs: Token::NONE,
        },
        t0,
    );
    let (a, _) = t.acquire(&job("kept"), &who("b"), TTL, t0, None, false);
    assert_eq!(
        granted(&a),
        Some(Token((1 << 40) + 1)),
        "a reload keeps the new floor"
    );
}

/// A deleted job is forgotten, and created again above its old tokens;
/// other jobs keep their own counters; a held or waited-for job is not
/// deleted, and nothing changes.
#[test]
fn a_deleted_job_starts_again_above_its_old_tokens() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    for _ in 0..7 {
        let (a, _) = t.acquire(&job("x"), &who("a"), TTL, t0, None, false);
        let tok = granted(&a).unwrap();
        let _ = t.release(&job("x"), &who("a"), tok, t0).unwrap();
    }
    let (a, _) = t.acquire(&job("other"), &who("a"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token(1)));

    let err = t.delete(&job("other"), t0).unwrap_err();
    assert!(matches!(err, Error::JobInUse { .. }), "{err:?}");
    assert!(
        t.contains(&job("other")),
        "a refused delete changes nothing"
    );
    let (a, _) = t.acquire(&job("x"), &who("b"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token(8)));
    let id = t.enqueue(&job("x"), &who("c"), TTL, t0, false);
    assert!(
        matches!(
            t.delete(&job("x"), t0 + TTL * 2),
            Err(Error::JobInUse { .. })
        ),
        "an expired lease with a waiter in line is still in use"
    );
    let _ = t.dequeue(&job("x"), id);

    assert_eq!(t.delete(&job("x"), t0 + TTL * 2).unwrap(), Some(Token(8)));
    assert!(!t.contains(&job("x")));
    assert_eq!(
        t.delete(&job("x"), t0).unwrap(),
        None,
        "deleting twice is no error"
    );
    assert_eq!(t.floors().new_jobs, Token(8));
    let (a, _) = t.acquire(&job("x"), &who("a"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token(9)), "never a token issued before");
    let (a, _) = t.acquire(&job("brand-new"), &who("a"), TTL, t0, None, false);
    assert_eq!(
        granted(&a),
        Some(Token(9)),
        "a new job starts above the floor too"
    );
    let _ = t.release(&job("other"), &who("a"), Token(1), t0).unwrap();
    let (a, _) = t.acquire(&job("other"), &who("b"), TTL, t0, None, false);
    assert_eq!(
        granted(&a),
        Some(Token(2)),
        "a job that exists keeps its counter"
    );

    // After a restart, the floor comes from the store.
    let recs = vec![(
        job("other"),
        LeaseRecord {
            issued: Default::default(),
            holder: Some(who("b")),
            token: Token(2),
            ttl: TTL,
            owner: None,
            value: None,
        },
    )];
    let mut t = LeaseTable::restore(
        recs,
        Floors {
            every: Token::NONE,
            new_jobs: Token(8),
        },
        t0,
    );
    assert!(
        t.renew(&job("other"), &who("b"), Token(2), TTL, t0).is_ok(),
        "a live lease below the new-job floor stays live"
    );
    let (a, _) = t.acquire(&job("x"), &who("a"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token(9)));
}

/// The last token is issued once; then no grant is made, by an Acquire or
/// by a release handing over to a waiter, and nothing changes.
#[test]
fn the_last_token_is_issued_once_then_grants_are_refused() {
    let t0 = Instant::now();
    let recs = vec![(
        job("old"),
        LeaseRecord {
            issued: Default::default(),
            holder: None,
            token: Token(u64::MAX - 1),
            ttl: TTL,
            owner: None,
            value: None,
        },
    )];
    let mut t = LeaseTable::restore(recs, Floors::default(), t0);
    let (a, _) = t.acquire(&job("old"), &who("a"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token::LAST));
    let id = t.enqueue(&job("old"), &who("b"), TTL, t0, false);
    let fx = t.release(&job("old"), &who("a"), Token::LAST, t0).unwrap();
    assert!(fx.wake.contains(&id), "the line is told");
    let (a, fx) = t.acquire(&job("old"), &who("b"), TTL, t0, Some(id), false);
    assert!(matches!(a, Acquire::Exhausted(_)), "{a:?}");
    assert_eq!(fx.persist, None, "nothing changed");
    let (a, _) = t.acquire(&job("old"), &who("c"), TTL, t0, None, false);
    assert!(matches!(a, Acquire::Exhausted(_)), "{a:?}");
    assert_eq!(t.view(&job("old"), t0).token, Token::LAST);
}

#[test]
fn list_pages_by_prefix() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    for n in ["a/1", "a/2", "a/3", "b/1"] {
        let _ = t.acquire(&job(n), &who("h"), TTL, t0, None, false);
    }
    let p1 = t.list("a/", None, 2, t0);
    assert_eq!(
        p1.iter().map(|v| v.job.as_str()).collect::<Vec<_>>(),
        ["a/1", "a/2"]
    );
    let p2 = t.list("a/", Some("a/2"), 2, t0);
    assert_eq!(
        p2.iter().map(|v| v.job.as_str()).collect::<Vec<_>>(),
        ["a/3"]
    );
    assert_eq!(t.list("", None, 10, t0).len(), 4);
}

#[test]
fn leadership_reports_vacancy_time() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None, false);
    let l: Vec<_> = t.leadership(t0 + ms(1)).collect();
    assert_eq!(l[0].1, Leadership::Led { token: Token(1) });
    let l: Vec<_> = t.leadership(t0 + TTL + ms(500)).collect();
    assert_eq!(
        l[0].1,
        Leadership::Vacant {
            token: Token(1),
            for_: ms(500)
        }
    );
}

// ---- Properties against the reference model (crate::lease::model) ----

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3, 0u8..3, 100u64..3000).prop_map(|(job, holder, ttl_ms)| Op::Acquire {
            job,
            holder,
            ttl_ms
        }),
        (0u8..3, 0u8..3, -1i8..=1, 100u64..3000).prop_map(|(job, holder, token_delta, ttl_ms)| {
            Op::Renew {
                job,
                holder,
                token_delta,
                ttl_ms,
            }
        }),
        (0u8..3, 0u8..3, -1i8..=1).prop_map(|(job, holder, token_delta)| Op::Release {
            job,
            holder,
            token_delta
        }),
        (0u8..3, -1i8..=1).prop_map(|(job, token_delta)| Op::Write { job, token_delta }),
        (0u64..2000).prop_map(|ms| Op::Advance { ms }),
        Just(Op::Restart),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every decision matches the model, through restarts.
    #[test]
    fn table_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        if let Err(e) = model::check(&ops) {
            prop_assert!(false, "{}", e);
        }
    }

    /// The fuzz target's decoding gives valid scenarios the model accepts.
    #[test]
    fn decoded_bytes_match_model(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Err(e) = model::check(&model::from_bytes(&bytes)) {
            prop_assert!(false, "{}", e);
        }
    }
}

#[test]
fn settle_leadership_counts_expiries_and_reports_what_leadership_does() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("a"), &who("x"), TTL, t0, None, false);
    let _ = t.acquire(&job("b"), &who("y"), TTL * 3, t0, None, false);
    let now = t0 + TTL + ms(500);
    let want: Vec<_> = t.leadership(now).map(|(j, l)| (j.clone(), l)).collect();
    let got: Vec<_> = t
        .settle_leadership(now)
        .map(|(j, l)| (j.clone(), l))
        .collect();
    assert_eq!(got, want);
    assert_eq!(t.stats().expiries, 1, "a ran out, b did not");
    let again: Vec<_> = t
        .settle_leadership(now)
        .map(|(j, l)| (j.clone(), l))
        .collect();
    assert_eq!(again, want);
    assert_eq!(t.stats().expiries, 1, "counted once");
}

/// Every tenure's start and end reaches the history, each in the decision
/// that makes it durable: a grant with its token; a release; an expiry,
/// recorded at its deadline by the next grant (taken over by another
/// holder, or expired when the same holder comes back); a renewal adds
/// nothing.
#[test]
fn history_events_mark_every_tenure() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("h");
    let granted_to = |h: &str, n: u64| HistoryEvent::Granted {
        token: Token(n),
        holder: who(h),
        ttl: TTL,
        value: None,
    };
    let (_, fx) = t.acquire(&j, &who("a"), TTL, t0, None, false);
    assert_eq!(fx.history, vec![granted_to("a", 1)]);
    let (_, fx) = t.renew(&j, &who("a"), Token(1), TTL, t0 + ms(5)).unwrap();
    assert!(fx.history.is_empty(), "a renewal is not a tenure");
    // A release hands over to the first waiter in the same decision.
    let w = t.enqueue(&j, &who("b"), TTL, t0 + ms(6), false);
    let fx = t.release(&j, &who("a"), Token(1), t0 + ms(10)).unwrap();
    assert_eq!(
        fx.history,
        vec![
            HistoryEvent::Ended {
                token: Token(1),
                how: TenureEnd::Released,
                at: t0 + ms(10)
            },
            granted_to("b", 2)
        ]
    );
    let _ = w;
    // b's lease runs out at t0 + 10 ms + TTL; nobody knows until asked.
    let deadline = t0 + ms(10) + TTL;
    assert_eq!(t.unrecorded_end(&j, deadline - ms(1)), None);
    assert_eq!(t.unrecorded_end(&j, deadline), Some((Token(2), deadline)));
    let _ = t.view(&j, deadline + ms(1));
    assert_eq!(
        t.unrecorded_end(&j, deadline + ms(1)),
        Some((Token(2), deadline))
    );
    // Another holder takes it: b's tenure was taken over, at its deadline.
    let (_, fx) = t.acquire(&j, &who("c"), TTL, deadline + ms(50), None, false);
    assert_eq!(
        fx.history,
        vec![
            HistoryEvent::Ended {
                token: Token(2),
                how: TenureEnd::TakenOver,
                at: deadline
            },
            granted_to("c", 3)
        ]
    );
    assert_eq!(t.unrecorded_end(&j, deadline + ms(60)), None);
    // c runs out and comes back: expired, then a new tenure of c's.
    let later = deadline + ms(50) + TTL;
    let (_, fx) = t.acquire(&j, &who("c"), TTL, later + ms(1), None, false);
    assert_eq!(
        fx.history,
        vec![
            HistoryEvent::Ended {
                token: Token(3),
                how: TenureEnd::Expired,
                at: later
            },
            granted_to("c", 4)
        ]
    );
    // The live holder asking again extends: nothing new.
    let (_, fx) = t.acquire(&j, &who("c"), TTL, later + ms(2), None, false);
    assert!(fx.history.is_empty());
}

#[test]
fn a_give_back_ends_only_a_grant_its_holder_never_asked_for_again() {
    let mut t = LeaseTable::new();
    let j = job("j");
    let t0 = Instant::now();
    // Never asked again: given back, as a release (history included).
    let (a, _) = t.acquire(&j, &who("a"), TTL, t0, None, false);
    assert_eq!(granted(&a), Some(Token(1)));
    let fx = t.give_back(&j, &who("a"), Token(1), t0 + ms(1));
    assert!(fx.changed);
    assert!(fx.persist.is_some());
    assert_eq!(fx.history.len(), 1);
    assert_eq!(t.view(&j, t0 + ms(1)).holder(), None);
    // Asked again with a repeated Acquire (whose answer may have told it
    // that it leads): kept, and nothing changes.
    let (a, _) = t.acquire(&j, &who("a"), TTL, t0 + ms(2), None, false);
    assert_eq!(granted(&a), Some(Token(2)));
    let (a, _) = t.acquire(&j, &who("a"), TTL, t0 + ms(3), None, false);
    assert_eq!(granted(&a), Some(Token(2)), "a re-grant, same token");
    assert_eq!(
        t.give_back(&j, &who("a"), Token(2), t0 + ms(4)),
        Effects::default()
    );
    assert_eq!(t.view(&j, t0 + ms(4)).holder(), Some(&who("a")));
    // Asked again with a Renew: kept.
    let _ = t.release(&j, &who("a"), Token(2), t0 + ms(5)).unwrap();
    let (a, _) = t.acquire(&j, &who("a"), TTL, t0 + ms(6), None, false);
    assert_eq!(granted(&a), Some(Token(3)));
    let _ = t.renew(&j, &who("a"), Token(3), TTL, t0 + ms(7)).unwrap();
    assert_eq!(
        t.give_back(&j, &who("a"), Token(3), t0 + ms(8)),
        Effects::default()
    );
    assert_eq!(t.view(&j, t0 + ms(8)).holder(), Some(&who("a")));
    // Another holder's or another token's give-back changes nothing.
    for (h, tok) in [("b", 3), ("a", 2), ("a", 4)] {
        assert_eq!(
            t.give_back(&j, &who(h), Token(tok), t0 + ms(9)),
            Effects::default()
        );
    }
    assert_eq!(t.view(&j, t0 + ms(9)).holder(), Some(&who("a")));
    // A grant handed over to a waiter by a release, never asked for again:
    // given back, and handed on to the next in line.
    let wb = t.enqueue(&j, &who("b"), TTL, t0 + ms(10), false);
    let wc = t.enqueue(&j, &who("c"), TTL, t0 + ms(10), false);
    let fx = t.release(&j, &who("a"), Token(3), t0 + ms(11)).unwrap();
    assert_eq!(fx.wake, vec![wb, wc]);
    assert_eq!(t.view(&j, t0 + ms(11)).holder(), Some(&who("b")));
    // The woken waiter's own call completes: that is not asking again.
    let (a, _) = t.acquire(&j, &who("b"), TTL, t0 + ms(11), Some(wb), false);
    assert_eq!(granted(&a), Some(Token(4)));
    let fx = t.give_back(&j, &who("b"), Token(4), t0 + ms(12));
    assert!(fx.changed);
    assert_eq!(t.view(&j, t0 + ms(12)).holder(), Some(&who("c")));
    assert_eq!(t.view(&j, t0 + ms(12)).token, Token(5));
    // An expired grant: nothing to give back.
    let later = t0 + ms(12) + TTL + ms(1);
    assert_eq!(
        t.give_back(&j, &who("c"), Token(5), later),
        Effects::default()
    );
}

#[test]
fn a_restored_holding_is_never_given_back() {
    let t0 = Instant::now();
    let rec = LeaseRecord {
        issued: Default::default(),
        holder: Some(who("a")),
        token: Token(7),
        ttl: TTL,
        owner: None,
        value: None,
    };
    let mut t = LeaseTable::restore([(job("j"), rec)], Floors::default(), t0);
    assert_eq!(
        t.give_back(&job("j"), &who("a"), Token(7), t0 + ms(1)),
        Effects::default()
    );
    assert_eq!(t.view(&job("j"), t0 + ms(1)).holder(), Some(&who("a")));
}

/// A million held leases cost a million of these, in the table's slots:
/// the parts few jobs use (a line, fenced writes, an unrecorded expiry)
/// stay boxed.
#[test]
fn a_job_stays_small() {
    assert!(
        // With its two TTLs, its deadline and its vacancy's start in 8
        // bytes each, the waiter a release handed it to in 8, not 16, and
        // its holders behind thin pointers.
        std::mem::size_of::<Job>() <= 112,
        "a Job is {} bytes",
        std::mem::size_of::<Job>()
    );
    // A slot, empty or not, costs no more than its job.
    assert_eq!(
        std::mem::size_of::<Option<Job>>(),
        std::mem::size_of::<Job>()
    );
}

/// A holder's leases share one copy of its name, however many requests
/// brought it, through grants, hand-overs and a restart; names nobody
/// holds any more are swept.
#[test]
fn a_holders_leases_share_one_copy_of_its_name() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    for i in 0..10 {
        // A new copy of the name each time, as each request brings.
        let (a, _) = t.acquire(&job(&format!("j{i}")), &who("fleet"), TTL, t0, None, false);
        assert!(granted(&a).is_some());
    }
    let held = |t: &LeaseTable, i: usize| {
        t.jobs[&job(&format!("j{i}"))]
            .holding
            .as_ref()
            .unwrap()
            .holder
            .clone()
    };
    for i in 1..10 {
        assert!(held(&t, 0).same_copy(&held(&t, i)), "job j{i}");
    }
    // A hand-over to a waiter grants the table's copy too: fleet-2 holds
    // k, waits for j0, and is handed j0 by its release.
    let (a, _) = t.acquire(&job("k"), &who("fleet-2"), TTL, t0, None, false);
    assert!(granted(&a).is_some());
    t.enqueue(&job("j0"), &who("fleet-2"), TTL, t0, false);
    let fx = t.release(&job("j0"), &who("fleet"), Token(1), t0).unwrap();
    assert_eq!(fx.wake.len(), 1, "the waiter is handed the lease");
    let k = t.jobs[&job("k")].holding.as_ref().unwrap().holder.clone();
    assert_eq!(held(&t, 0), who("fleet-2"));
    assert!(held(&t, 0).same_copy(&k));
    // After a restart, the restored holdings share too.
    let records: Vec<_> = (0..10)
        .map(|i| {
            let name = job(&format!("r{i}"));
            let rec = LeaseRecord {
                holder: Some(who("restored")),
                token: Token(1),
                ttl: TTL,
                owner: None,
                issued: Issued::default(),
                value: None,
            };
            (name, rec)
        })
        .collect();
    let r = LeaseTable::restore(records, Floors::default(), t0);
    let first = r.jobs[&job("r0")].holding.as_ref().unwrap().holder.clone();
    for i in 1..10 {
        let h = &r.jobs[&job(&format!("r{i}"))]
            .holding
            .as_ref()
            .unwrap()
            .holder;
        assert!(first.same_copy(h), "restored r{i}");
    }
    // Names nobody holds are swept once the set has doubled: one job
    // held by 5,000 holders in turn keeps only the last.
    let mut t = LeaseTable::new();
    for i in 0..5000 {
        let j = job("s");
        let h = who(&format!("h{i}"));
        let (a, _) = t.acquire(&j, &h, TTL, t0, None, false);
        let _ = t.release(&j, &h, granted(&a).unwrap(), t0).unwrap();
    }
    assert!(t.holders.len() <= 2048, "{} names kept", t.holders.len());
}

fn bound(principal: &str, holder: &str) -> HolderId {
    who(holder).bound_to(principal)
}

#[test]
fn a_job_counts_against_the_principal_that_created_it_until_it_is_deleted() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let (a, fx) = t.acquire(&job("a1"), &bound("billing", "w"), TTL, t0, None, false);
    let token = granted(&a).unwrap();
    assert_eq!(fx.persist.unwrap().owner.as_deref(), Some("billing"));
    let _ = t.acquire(&job("a2"), &bound("billing", "w"), TTL, t0, None, false);
    let _ = t.acquire(&job("free"), &who("w"), TTL, t0, None, false);
    assert_eq!(t.owned_by("billing"), 2);
    assert_eq!(t.owned_by("ops"), 0);

    // Held by another principal, the job stays billing's, in its record too.
    let fx = t
        .release(&job("a1"), &bound("billing", "w"), token, t0)
        .unwrap();
    assert_eq!(fx.persist.unwrap().owner.as_deref(), Some("billing"));
    let (_, fx) = t.acquire(&job("a1"), &bound("ops", "x"), TTL, t0, None, false);
    assert_eq!(fx.persist.unwrap().owner.as_deref(), Some("billing"));
    assert_eq!((t.owned_by("billing"), t.owned_by("ops")), (2, 0));

    // A job a decision created and the store refused is forgotten with
    // its count; a job that was there keeps it.
    let c = t.checkpoint(&job("a3"));
    let _ = t.acquire(&job("a3"), &bound("billing", "w"), TTL, t0, None, false);
    assert_eq!(t.owned_by("billing"), 3);
    t.rollback(c);
    assert_eq!(t.owned_by("billing"), 2);
    let c = t.checkpoint(&job("a2"));
    let _ = t.acquire(&job("a2"), &bound("billing", "w"), TTL, t0, None, false);
    t.rollback(c);
    assert_eq!(t.owned_by("billing"), 2);

    // Deleted: the room comes back.
    let later = t0 + TTL + ms(1);
    assert!(t.delete(&job("a2"), later).unwrap().is_some());
    assert_eq!(t.owned_by("billing"), 1);

    // Restored from the records, the counts are the same.
    let records: Vec<_> = ["a1", "free"]
        .iter()
        .map(|j| (job(j), t.jobs[&job(j)].record(&t.owners)))
        .collect();
    let r = LeaseTable::restore(records, Floors::default(), later);
    assert_eq!((r.owned_by("billing"), r.owned_by("ops")), (1, 0));
    assert_eq!(r.len(), 2);
}

#[test]
fn a_principal_at_its_max_jobs_may_not_create_another() {
    let b = bound("billing", "w");
    assert!(rules::admit_new_job(&b, 1, Some(2)).is_ok());
    match rules::admit_new_job(&b, 2, Some(2)) {
        Err(Error::QuotaExceeded {
            limit: "max_jobs",
            max: 2,
            principal: Some(p),
        }) => assert_eq!(p, "billing"),
        other => panic!("{other:?}"),
    }
    // No limit of its own, or no principal: the server's --max-jobs only.
    assert!(rules::admit_new_job(&b, 5, None).is_ok());
    assert!(rules::admit_new_job(&who("w"), 5, Some(2)).is_ok());
}

#[test]
fn a_transfer_hands_the_lease_to_the_first_waiter_with_the_next_token_and_no_gap() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let w1 = t.enqueue(&j, &who("b"), ms(20_000), t0, false);
    let w2 = t.enqueue(&j, &who("c"), TTL, t0, false);
    let (view, fx) = t
        .transfer(&j, &who("a"), Token(1), None, None, t0 + ms(5))
        .unwrap();
    assert_eq!(view.holder(), Some(&who("b")));
    assert_eq!(view.token, Token(2));
    // The holding's own TTL when none is given, not the waiter's.
    assert_eq!(view.deadline(), Some(t0 + ms(5) + TTL));
    assert_eq!(fx.wake, vec![w1, w2], "b was granted; c is now first");
    assert!(fx.changed);
    assert_eq!(
        fx.history,
        vec![
            HistoryEvent::Ended {
                token: Token(1),
                how: TenureEnd::Transferred,
                at: t0 + ms(5)
            },
            HistoryEvent::Granted {
                token: Token(2),
                holder: who("b"),
                ttl: TTL,
                value: None,
            },
        ]
    );
    assert_eq!(fx.persist.unwrap().holder, Some(who("b")));
    // The woken waiter's call finds the lease its own, and its grant is
    // not "asked again" (it could still be given back).
    let (a, _) = t.acquire(&j, &who("b"), ms(20_000), t0 + ms(6), Some(w1), false);
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(t.stats().transfers, 1);
    // The old holder's token is stale now.
    assert!(matches!(
        t.renew(&j, &who("a"), Token(1), TTL, t0 + ms(7)),
        Err(Error::LeaseLost { .. })
    ));
}

#[test]
fn a_transfer_to_a_named_holder_passes_the_others_in_line_who_keep_their_places() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let w1 = t.enqueue(&j, &who("b"), TTL, t0, false);
    let w2 = t.enqueue(&j, &who("c"), TTL, t0, false);
    let (view, fx) = t
        .transfer(&j, &who("a"), Token(1), Some("c"), Some(ms(3_000)), t0)
        .unwrap();
    assert_eq!(view.holder(), Some(&who("c")));
    assert_eq!(view.deadline(), Some(t0 + ms(3_000)));
    assert_eq!(fx.wake, vec![w2], "b keeps its place, first in line");
    // b is next when c releases.
    let fx = t.release(&j, &who("c"), Token(2), t0 + ms(1)).unwrap();
    assert_eq!(fx.wake, vec![w1]);
    assert_eq!(t.view(&j, t0 + ms(1)).holder(), Some(&who("b")));
}

#[test]
fn a_transfer_with_no_successor_or_a_stale_token_changes_nothing() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let before = t.view(&j, t0);
    // Nobody waits.
    assert!(matches!(
        t.transfer(&j, &who("a"), Token(1), None, None, t0),
        Err(Error::NoSuccessor { to: None, .. })
    ));
    // The named holder does not wait; the one who does is not it; the
    // holder's own waiting call is no successor.
    let _w = t.enqueue(&j, &who("b"), TTL, t0, false);
    let _own = t.enqueue(&j, &who("a"), TTL, t0, false);
    assert!(matches!(
        t.transfer(&j, &who("a"), Token(1), Some("z"), None, t0),
        Err(Error::NoSuccessor { to: Some(_), .. })
    ));
    assert!(matches!(
        t.transfer(&j, &who("a"), Token(1), Some("a"), None, t0),
        Err(Error::NoSuccessor { .. })
    ));
    // A stale token, another holder, an unknown job.
    assert!(matches!(
        t.transfer(&j, &who("a"), Token(7), None, None, t0),
        Err(Error::UnknownToken { .. })
    ));
    assert!(matches!(
        t.transfer(&j, &who("b"), Token(1), None, None, t0),
        Err(Error::LeaseLost { .. })
    ));
    assert!(t
        .transfer(&job("other"), &who("a"), Token(1), None, None, t0)
        .is_err());
    assert_eq!(t.view(&j, t0), before);
    // Expired first: lost, though a waiter waits.
    assert!(matches!(
        t.transfer(&j, &who("a"), Token(1), None, None, t0 + TTL),
        Err(Error::LeaseLost { .. })
    ));
}

#[test]
fn two_transfers_at_once_hand_over_once() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let _ = t.enqueue(&j, &who("b"), TTL, t0, false);
    let _ = t.enqueue(&j, &who("c"), TTL, t0, false);
    assert!(t.transfer(&j, &who("a"), Token(1), None, None, t0).is_ok());
    assert!(matches!(
        t.transfer(&j, &who("a"), Token(1), Some("c"), None, t0),
        Err(Error::LeaseLost { .. })
    ));
    assert_eq!(t.view(&j, t0).holder(), Some(&who("b")));
    assert_eq!(t.view(&j, t0).token, Token(2));
}

#[test]
fn a_bound_lease_released_as_its_connection_closed_says_so_in_the_history() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let w = t.enqueue(&j, &who("b"), TTL, t0, false);
    let fx = t
        .release_as(
            &j,
            &who("a"),
            Token(1),
            t0 + ms(1),
            TenureEnd::ConnectionClosed,
        )
        .unwrap();
    assert_eq!(fx.wake, vec![w]);
    assert!(fx.history.contains(&HistoryEvent::Ended {
        token: Token(1),
        how: TenureEnd::ConnectionClosed,
        at: t0 + ms(1)
    }));
    assert_eq!(t.view(&j, t0 + ms(1)).token, Token(2));
}

#[test]
fn preferred_candidates_wait_ahead_of_the_others_first_come_first_served_in_each_class() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let b = t.enqueue(&j, &who("b"), TTL, t0, false);
    let c = t.enqueue(&j, &who("c"), TTL, t0, false);
    assert!(!t.successor_waiting(&j), "nobody preferred waits");
    let p = t.enqueue(&j, &who("p"), TTL, t0, true);
    let q = t.enqueue(&j, &who("q"), TTL, t0, true);
    assert!(t.successor_waiting(&j), "a preferred candidate waits");
    // The first preferred leaving wakes the next preferred, not b.
    assert_eq!(t.dequeue(&j, p).wake, vec![q]);
    // A release hands over to q, the only preferred left: a preferred
    // holder is told nothing, though a preferred candidate comes.
    let fx = t.release(&j, &who("a"), Token(1), t0).unwrap();
    assert_eq!(fx.wake, vec![q, b]);
    assert_eq!(t.view(&j, t0).holder(), Some(&who("q")));
    let r = t.enqueue(&j, &who("r"), TTL, t0, true);
    assert!(!t.successor_waiting(&j), "the holder is preferred itself");
    // Then r (preferred), then b and c in their order.
    let fx = t.release(&j, &who("q"), Token(2), t0).unwrap();
    assert_eq!(fx.wake, vec![r, b]);
    let fx = t.release(&j, &who("r"), Token(3), t0).unwrap();
    assert_eq!(fx.wake, vec![b, c]);
    assert_eq!(t.view(&j, t0).holder(), Some(&who("b")));
    assert_eq!(t.view(&j, t0).token, Token(4));
}

#[test]
fn a_transfer_to_the_first_in_line_hands_over_to_a_preferred_candidate() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    let _b = t.enqueue(&j, &who("b"), TTL, t0, false);
    let p = t.enqueue(&j, &who("p"), TTL, t0, true);
    let (view, fx) = t.transfer(&j, &who("a"), Token(1), None, None, t0).unwrap();
    assert_eq!(view.holder(), Some(&who("p")));
    assert_eq!(fx.wake[0], p);
    assert!(!t.successor_waiting(&j));
    // A preferred Acquire that is granted at once makes a preferred holder.
    let k = job("k");
    let _ = t.acquire(&k, &who("p"), TTL, t0, None, true);
    let _ = t.enqueue(&k, &who("q"), TTL, t0, true);
    assert!(!t.successor_waiting(&k));
}

#[test]
fn a_published_value_goes_with_its_holding() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let l = Limits::default();
    let j = job("j");
    let v = |s: &str| l.lease_value(s.as_bytes()).unwrap();
    let (a, fx) = t.acquire_with_value(&j, &who("a"), TTL, t0, None, false, v("a:1"));
    assert_eq!(granted(&a), Some(Token(1)));
    assert_eq!(fx.persist.unwrap().value, v("a:1"));
    assert!(matches!(&fx.history[0], HistoryEvent::Granted { value, .. } if *value == v("a:1")));
    let w = t.enqueue_with_value(&j, &who("b"), TTL, t0, false, v("b:2"));
    // A renewal without a value keeps it; with one, replaces it, durably,
    // and watchers are told; the same value again changes nothing.
    let (view, fx) = t
        .renew_with_value(&j, &who("a"), Token(1), TTL, t0, None)
        .unwrap();
    assert_eq!((view.value(), fx.changed), (Some(&b"a:1"[..]), false));
    let (view, fx) = t
        .renew_with_value(&j, &who("a"), Token(1), TTL, t0, Some(v("a:moved")))
        .unwrap();
    assert_eq!(view.value(), Some(&b"a:moved"[..]));
    assert!(fx.changed);
    assert_eq!(fx.persist.unwrap().value, v("a:moved"));
    let before = t.view(&j, t0);
    let (_, fx) = t
        .renew_with_value(&j, &who("a"), Token(1), TTL, t0, Some(v("a:moved")))
        .unwrap();
    assert!(!fx.changed && fx.persist.is_none());
    assert_eq!(
        rules::classify(&before, &t.view(&j, t0)),
        None,
        "the same value is no event"
    );
    // A release hands over to the waiter, with the waiter's own value.
    let fx = t.release(&j, &who("a"), Token(1), t0).unwrap();
    assert_eq!(fx.wake, vec![w]);
    let view = t.view(&j, t0);
    assert_eq!((view.token, view.value()), (Token(2), Some(&b"b:2"[..])));
    // Its end takes the value with it.
    let fx = t.release(&j, &who("b"), Token(2), t0).unwrap();
    assert_eq!(fx.persist.unwrap().value, None);
    assert_eq!(t.view(&j, t0).value(), None);
    // A value change is its own kind of event.
    let (_, _) = t.acquire_with_value(&j, &who("c"), TTL, t0, None, false, v("c"));
    let before = t.view(&j, t0);
    let _ = t.renew_with_value(&j, &who("c"), Token(3), TTL, t0, Some(None));
    assert_eq!(
        rules::classify(&before, &t.view(&j, t0)),
        Some(rules::EventKind::ValueChanged)
    );
}

#[test]
fn the_line_is_listed_in_order_preferred_first() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None, false);
    t.enqueue(&j, &who("b"), TTL, t0, false);
    t.enqueue(&j, &who("c"), TTL, t0, false);
    t.enqueue(&j, &who("p"), TTL, t0, true);
    let (line, waiting) = t.waiters_of(&j, 2);
    let names: Vec<(&str, bool)> = line.iter().map(|(h, p)| (h.as_str(), *p)).collect();
    assert_eq!((names, waiting), (vec![("p", true), ("b", false)], 3));
    assert_eq!(t.waiters_of(&job("nobody"), 10), (Vec::new(), 0));
}

/// A deadline or a vacancy's start kept in 8 bytes reads back as the same
/// instant, before the process's base as after it, and in the same order.
#[test]
fn a_moment_is_the_instant_it_was_made_of() {
    let now = Instant::now();
    let before = now.checked_sub(Duration::from_millis(1_500)).unwrap_or(now);
    let year = Duration::from_secs(365 * 86_400);
    for t in [now, before, now + Duration::from_nanos(1), now + year] {
        assert_eq!(Moment::of(t).get(), t);
    }
    assert!(Moment::of(before) < Moment::of(now));
    assert!(Moment::of(now) < Moment::of(now + Duration::from_nanos(1)));
}
