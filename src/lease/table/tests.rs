//! Scenario tests with a hand-driven clock, and property tests of the
//! invariants against a reference model.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
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
        Acquire::Busy { .. } => None,
    }
}

#[test]
fn first_grant_is_token_one_and_persisted() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let (a, fx) = t.acquire(&job("j"), &who("a"), TTL, t0, None);
    assert_eq!(granted(&a), Some(Token(1)));
    assert_eq!(
        fx.persist,
        Some(LeaseRecord {
            holder: Some(who("a")),
            token: Token(1),
            ttl: TTL
        })
    );
    assert!(fx.changed);
}

#[test]
fn second_holder_sees_holder_and_token() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None);
    let (a, fx) = t.acquire(&job("j"), &who("b"), TTL, t0 + ms(1), None);
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
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None);
    let (v, fx) = t
        .renew(&job("j"), &who("a"), Token(1), TTL, t0 + ms(9_000))
        .unwrap();
    assert_eq!(v.token, Token(1));
    assert_eq!(v.deadline(), Some(t0 + ms(19_000)));
    assert_eq!(fx.persist, None, "same TTL: no write on the hot path");
    // Past the old deadline, still held.
    let (a, _) = t.acquire(&job("j"), &who("b"), TTL, t0 + ms(15_000), None);
    assert_eq!(granted(&a), None);
}

#[test]
fn renewal_with_longer_ttl_is_persisted() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None);
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
fn expiry_then_regrant_bumps_token_even_for_same_holder() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None);
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
    let (a, _) = t.acquire(&job("j"), &who("a"), TTL, t0 + TTL, None);
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(t.stats().expiries, 1);
    assert_eq!(t.stats().takeovers, 0);
}

#[test]
fn takeover_after_expiry_is_token_plus_one() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None);
    let (a, _) = t.acquire(&job("j"), &who("b"), TTL, t0 + TTL - ms(1), None);
    assert_eq!(granted(&a), None, "one millisecond early is too early");
    let (a, _) = t.acquire(&job("j"), &who("b"), TTL, t0 + TTL, None);
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(t.stats().takeovers, 1);
}

#[test]
fn reacquire_by_live_holder_keeps_token() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None);
    let (a, fx) = t.acquire(&job("j"), &who("a"), TTL, t0 + ms(5), None);
    assert_eq!(granted(&a), Some(Token(1)));
    assert!(!fx.changed);
}

#[test]
fn release_hands_over_to_first_waiter_in_one_durable_step() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None);
    let w1 = t.enqueue(&j, &who("b"), TTL, t0);
    let w2 = t.enqueue(&j, &who("c"), TTL, t0);
    let fx = t.release(&j, &who("a"), Token(1), t0 + ms(1)).unwrap();
    assert_eq!(
        fx.wake,
        vec![w1, w2],
        "b was granted; c is now first in line"
    );
    assert_eq!(
        fx.persist,
        Some(LeaseRecord {
            holder: Some(who("b")),
            token: Token(2),
            ttl: TTL
        }),
        "one record covers the release and the grant"
    );
    assert_eq!(t.view(&j, t0 + ms(1)).holder(), Some(&who("b")));
    // The woken waiter finds the lease is its own.
    let (a, fx) = t.acquire(&j, &who("b"), TTL, t0 + ms(2), Some(w1));
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(fx.persist, None);
    // Nobody jumps the queue: c is next, not a newcomer.
    let fx = t.release(&j, &who("b"), Token(2), t0 + ms(3)).unwrap();
    assert_eq!(fx.wake, vec![w2]);
    let (a, _) = t.acquire(&j, &who("z"), TTL, t0 + ms(4), None);
    assert_eq!(granted(&a), None);
}

#[test]
fn free_lease_goes_to_first_waiter_not_a_newcomer() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None);
    let w1 = t.enqueue(&j, &who("b"), TTL, t0);
    let w2 = t.enqueue(&j, &who("c"), TTL, t0);
    // a expires; the first waiter's timer wakes it.
    let (a, _) = t.acquire(&j, &who("z"), TTL, t0 + TTL, None);
    assert_eq!(
        granted(&a),
        None,
        "a newcomer that does not wait cannot jump the queue"
    );
    let (a, _) = t.acquire(&j, &who("c"), TTL, t0 + TTL, Some(w2));
    assert_eq!(granted(&a), None, "the second in line cannot go first");
    let (a, fx) = t.acquire(&j, &who("b"), TTL, t0 + TTL, Some(w1));
    assert_eq!(granted(&a), Some(Token(2)));
    assert_eq!(fx.wake, vec![w2], "the next in line arms its timer");
}

#[test]
fn release_is_idempotent_and_refuses_others() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None);
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
    let (a, _) = t.acquire(&j, &who("a"), TTL, t0, None);
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
    let w1 = t.enqueue(&j, &who("a"), TTL, t0);
    let w2 = t.enqueue(&j, &who("b"), TTL, t0);
    assert_eq!(t.dequeue(&j, w2).wake, vec![]);
    let w3 = t.enqueue(&j, &who("c"), TTL, t0);
    assert_eq!(t.dequeue(&j, w1).wake, vec![w3]);
}

#[test]
fn fence_rejects_paused_leader_before_successor_writes() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("bridge_health");
    let _ = t.acquire(&j, &who("a"), TTL, t0, None);
    t.check_write(&j, Token(1), None, t0 + ms(1)).unwrap();
    // a is paused past its TTL; b takes over and has not written anything.
    let (a, _) = t.acquire(&j, &who("b"), TTL, t0 + TTL, None);
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
fn fence_rejects_expired_and_released_and_unknown_tokens() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    let j = job("j");
    assert!(matches!(
        t.check_write(&j, Token(1), None, t0),
        Err(Error::UnknownToken { .. })
    ));
    let _ = t.acquire(&j, &who("a"), TTL, t0, None);
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
    let _ = t.acquire(&j, &who("a"), TTL, t0 + TTL, None);
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
                holder: Some(who("a")),
                token: Token(7),
                ttl: TTL,
            },
        ),
        (
            job("free"),
            LeaseRecord {
                holder: None,
                token: Token(3),
                ttl: TTL,
            },
        ),
    ];
    let mut t = LeaseTable::restore(recs, t0);
    let (a, _) = t.acquire(&job("held"), &who("b"), TTL, t0 + TTL - ms(1), None);
    assert_eq!(
        granted(&a),
        None,
        "no takeover before a full TTL from start-up"
    );
    let _ = t
        .renew(&job("held"), &who("a"), Token(7), TTL, t0 + ms(5))
        .unwrap();
    let (a, _) = t.acquire(&job("free"), &who("b"), TTL, t0, None);
    assert_eq!(granted(&a), Some(Token(4)));
}

#[test]
fn list_pages_by_prefix() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new();
    for n in ["a/1", "a/2", "a/3", "b/1"] {
        let _ = t.acquire(&job(n), &who("h"), TTL, t0, None);
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
    let _ = t.acquire(&job("j"), &who("a"), TTL, t0, None);
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

// ---- Properties against a reference model ----

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        job: u8,
        holder: u8,
        ttl_ms: u64,
    },
    Renew {
        job: u8,
        holder: u8,
        token_delta: i8,
        ttl_ms: u64,
    },
    Release {
        job: u8,
        holder: u8,
        token_delta: i8,
    },
    Write {
        job: u8,
        token_delta: i8,
    },
    Advance {
        ms: u64,
    },
    Restart,
}

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

/// The simplest model of what a job's lease promises.
#[derive(Debug, Default, Clone)]
struct Model {
    token: u64,
    holder: Option<(u8, Instant)>, // holder and deadline
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every decision matches the model, through restarts.
    #[test]
    fn table_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut table = LeaseTable::new();
        let mut model: HashMap<u8, Model> = HashMap::new();
        let mut stored: HashMap<u8, LeaseRecord> = HashMap::new();
        let holder = |h: u8| who(&format!("h{h}"));
        let name = |j: u8| job(&format!("j{j}"));

        for op in ops {
            match op {
                Op::Acquire { job: j, holder: h, ttl_ms } => {
                    let ttl = ms(ttl_ms);
                    let m = model.entry(j).or_default();
                    let live = m.holder.filter(|(_, d)| *d > now);
                    let expect = match live {
                        Some((lh, _)) if lh == h => Some(m.token),
                        Some(_) => None,
                        None => Some(m.token + 1),
                    };
                    let (a, fx) = table.acquire(&name(j), &holder(h), ttl, now, None);
                    prop_assert_eq!(granted(&a).map(|t| t.0), expect);
                    if expect.is_some() {
                        m.token = expect.unwrap();
                        m.holder = Some((h, now + ttl));
                    }
                    if let Some(r) = fx.persist { stored.insert(j, r); }
                }
                Op::Renew { job: j, holder: h, token_delta, ttl_ms } => {
                    let ttl = ms(ttl_ms);
                    let m = model.entry(j).or_default();
                    let token = (m.token as i64 + token_delta as i64).max(1) as u64;
                    let ok = matches!(m.holder, Some((lh, d)) if lh == h && d > now) && token == m.token;
                    let r = table.renew(&name(j), &holder(h), Token(token), ttl, now);
                    prop_assert_eq!(r.is_ok(), ok, "renew {:?}", r);
                    if let Ok((v, fx)) = r {
                        prop_assert_eq!(v.token.0, m.token);
                        m.holder = Some((h, now + ttl));
                        if let Some(r) = fx.persist { stored.insert(j, r); }
                    }
                }
                Op::Release { job: j, holder: h, token_delta } => {
                    let m = model.entry(j).or_default();
                    let token = (m.token as i64 + token_delta as i64).max(1) as u64;
                    let live_ours = matches!(m.holder, Some((lh, d)) if lh == h && d > now) && token == m.token;
                    let r = table.release(&name(j), &holder(h), Token(token), now);
                    if live_ours {
                        let fx = r.expect("release by the live holder succeeds");
                        m.holder = None;
                        if let Some(r) = fx.persist { stored.insert(j, r); }
                    } else if let Ok(fx) = r {
                        prop_assert_eq!(fx, Effects::default(), "a refused or repeated release changes nothing");
                    }
                }
                Op::Write { job: j, token_delta } => {
                    let m = model.entry(j).or_default();
                    let token = (m.token as i64 + token_delta as i64).max(1) as u64;
                    let live = m.holder.is_some_and(|(_, d)| d > now);
                    let ok = token == m.token && live;
                    let r = table.check_write(&name(j), Token(token), None, now);
                    prop_assert_eq!(r.is_ok(), ok, "write {:?} model {:?}", r, m);
                    if token > m.token {
                        let unknown = matches!(r, Err(Error::UnknownToken { .. }));
                        prop_assert!(unknown);
                    }
                }
                Op::Advance { ms: d } => now += ms(d),
                Op::Restart => {
                    // Only what was persisted survives. Every held lease is
                    // live for its stored TTL from start-up; tokens go on.
                    table = LeaseTable::restore(stored.iter().map(|(j, r)| (name(*j), r.clone())), now);
                    for (j, m) in model.iter_mut() {
                        let Some(r) = stored.get(j) else {
                            prop_assert_eq!(m.token, 0, "a granted job was never stored");
                            continue;
                        };
                        prop_assert_eq!(r.token.0, m.token, "the newest token is always stored");
                        let had = m.holder.filter(|(_, d)| *d > now);
                        match (&r.holder, had) {
                            (Some(h), Some((mh, d))) => {
                                prop_assert_eq!(h, &holder(mh));
                                prop_assert!(now + r.ttl >= d, "a restart never shortens a lease");
                                m.holder = Some((mh, now + r.ttl));
                            }
                            (Some(h), None) => {
                                // Expired before the restart: live again, which
                                // is conservative (no early takeover).
                                let mh = (0..3).find(|x| &holder(*x) == h).unwrap();
                                m.holder = Some((mh, now + r.ttl));
                            }
                            (None, Some(_)) => prop_assert!(false, "a live lease was not stored"),
                            (None, None) => m.holder = None,
                        }
                    }
                }
            }
        }
    }
}
