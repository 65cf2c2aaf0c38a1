//! What the etcd backend decides from what it read: pure functions of a
//! [`JobState`] (and, for `Acquire`, the job's [`Line`] of waiters).
//!
//! No I/O and no clock here (`now` is a parameter). Each decision is made
//! on a read that may be stale by the time it acts, so none of them is
//! final: the transaction built from it (see [`super::txn`]) re-checks in
//! etcd everything the decision relied on, and a failed comparison sends
//! the caller back to read and decide again.
//!
//! **The rules themselves are the core's** ([`leasehold_core::lease::rules`]),
//! the very functions the single node's lease table calls: who gets the
//! lease next ([`rules::may_grant`]), whether a write is admitted
//! ([`rules::admit_write`]), the next token, unknown or lost, a repeated
//! release, and the rules broken on purpose ([`Faults`]). This module only
//! feeds them what etcd holds, so the two backends cannot drift apart.
//!
//! A refusal of its own ([`Refused`]) is an enum, turned into the client's
//! error by [`Refused::error`].

use std::time::{Duration, Instant};

use super::keys::{HolderRec, Holding, JobState, TokenRec};
use super::queue::Line;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules::{self, MayGrant, WriteRefusal};
use leasehold_core::lease::{
    Faults, HolderId, Issued, JobName, LeaseState, LeaseView, Published, Token,
};

/// Why a decision of this module refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A queued `Acquire` whose waiter key is gone lost its place in line
    /// (its frontend's etcd session lease ran out): its turn may have
    /// passed, so it must ask again.
    LostPlace,
    /// The write's admission ([`rules::admit_write`]) refused it.
    Write(WriteRefusal),
}

impl Refused {
    /// The error the client is told; `token` is the request's, `current`
    /// the job's newest as read.
    pub fn error(self, job: &JobName, token: Token, current: Token) -> Error {
        match self {
            Refused::LostPlace => Error::Storage(
                "this waiting Acquire lost its place in line (its frontend's etcd \
                 session lease ran out); ask again"
                    .into(),
            ),
            Refused::Write(w) => w.error(job, token, current),
        }
    }
}

/// An `Acquire` by `holder`; `waiting` is the create revision of its
/// waiter key when it has queued.
///
/// Decided by the core's rule, [`rules::may_grant`]: the holder of the
/// live grant extends it (even from the line); a free lease goes to the
/// caller only if nobody is ahead (an `Acquire` that has not queued only
/// when nobody waits, a queued one only when it is first), and to nobody
/// once the job has issued its last token. A queued `Acquire` whose key
/// is gone lost its place: [`Refused::LostPlace`], unless the lease is
/// its holder's now (a transfer granted it, deleting the key).
pub fn acquire(
    st: &JobState,
    line: &Line,
    holder: &HolderId,
    waiting: Option<i64>,
) -> std::result::Result<MayGrant, Refused> {
    let live = st.holder.as_ref().map(|h| h.rec.holder.as_str());
    if let Some(rev) = waiting {
        if line.mine != Some(rev) && live != Some(holder.as_str()) {
            return Err(Refused::LostPlace);
        }
    }
    Ok(rules::may_grant(
        live,
        holder,
        st.token() == Token::LAST,
        line.first,
        waiting,
    ))
}

/// Whether the holder of the live grant in `st` is to be told that a
/// preferred candidate waits: one does (`line`), and the grant is not the
/// newest preferred one's (see `Keys::preferred_grant`).
pub fn successor_waiting(st: &JobState, line: &Line) -> bool {
    st.holder
        .as_ref()
        .is_some_and(|h| line.preferred > 0 && line.preferred_grant != h.rec.token.0)
}

/// The records a grant to `holder` puts: the holder key's, and the token
/// counter's with the next token.
///
/// After the last token, [`Error::TokensExhausted`]: the grant is refused,
/// never made with a token issued before ([`rules::next_token`]).
pub fn grant(
    job: &JobName,
    st: &JobState,
    floor: Token,
    holder: &HolderId,
    ttl: Duration,
    wall_unix_ms: u64,
    value: Published,
) -> Result<(HolderRec, TokenRec)> {
    let token = rules::next_token(job, st.token().max(floor))?;
    Ok((
        HolderRec {
            token,
            ttl,
            holder: holder.to_string(),
            issued: Issued::new(wall_unix_ms, ttl),
            value,
            sharing: Default::default(),
        },
        TokenRec {
            token,
            released: false,
            holder: holder.to_string(),
            // A new job is its first holder's principal's; an existing one
            // keeps its owner.
            owner: match &st.token {
                Some(t) => t.owner.clone(),
                None => holder.principal().map(str::to_owned),
            },
        },
    ))
}

/// How a live holding is extended for `ttl` from now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extend {
    /// The same TTL and value: keep its etcd lease alive.
    KeepAlive,
    /// A new TTL, or a new published value: move the holder key, with
    /// this record, to a new etcd lease of that TTL (an etcd lease's TTL
    /// cannot be changed, and the move's transaction compares the record
    /// it replaces, so a value is changed only on the live holding).
    Move(HolderRec),
}

/// See [`Extend`]. `value`: the published value to set (`None` keeps it).
///
/// A holding on a group's etcd lease is always moved to one of its own:
/// keeping the group's alive would renew every lease of the group, and
/// only the group's stream, renewing all of them, may do that (see
/// [`super::keys::Sharing`]).
pub fn extend(h: &Holding, ttl: Duration, value: Option<&Published>) -> Extend {
    let value = value.filter(|v| **v != h.rec.value);
    if h.rec.ttl == ttl && value.is_none() && !h.rec.sharing.shared {
        Extend::KeepAlive
    } else {
        Extend::Move(HolderRec {
            ttl,
            value: value.map_or_else(|| h.rec.value.clone(), Clone::clone),
            sharing: h.rec.sharing.moved_off(),
            ..h.rec.clone()
        })
    }
}

/// What an etcd keep-alive of a holding proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// The grant was live and is renewed.
    Live,
    /// The grant is gone (expired, released or replaced).
    Gone,
    /// The member that answered was behind the current raft term: it may
    /// be a deposed leader renewing in memory a lease the real leader is
    /// letting run out. Ask again.
    StaleTerm,
}

/// Whether a keep-alive answered in raft term `answered` renewed `h`,
/// given the holder key as a linearizable read made after it found it
/// (`reread`, `None` when absent) in term `current`.
///
/// etcd 3.4 before 3.4.25 lets a deposed leader that has not heard of the
/// new term renew in memory. Every leader of a later term restarts each
/// lease's full TTL when it takes over, so a renewal answered in the
/// current term is never undone.
pub fn keep_alive_proof(
    h: &Holding,
    reread: Option<&super::client::pb::KeyValue>,
    answered: u64,
    current: u64,
) -> Proof {
    match reread {
        Some(kv) if h.is_stored_as(kv) => {}
        _ => return Proof::Gone,
    }
    if answered >= current {
        Proof::Live
    } else {
        Proof::StaleTerm
    }
}

/// A `Renew` of (`holder`, `token`): the holding to extend, or why not.
pub fn renew<'a>(
    job: &JobName,
    st: &'a JobState,
    holder: &HolderId,
    token: Token,
) -> Result<&'a Holding> {
    match &st.holder {
        Some(h) if holds(h, holder, token) => Ok(h),
        _ => Err(lost(job, st, token)),
    }
}

/// What a `Release` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release<'a> {
    /// Delete this holding (and mark the token released).
    Delete(&'a Holding),
    /// It took effect already (a repeated release, or the lease ran out
    /// since): answered kindly, nothing changes.
    Done,
}

/// A `Release` of (`holder`, `token`).
pub fn release<'a>(
    job: &JobName,
    st: &'a JobState,
    holder: &HolderId,
    token: Token,
) -> Result<Release<'a>> {
    match &st.holder {
        Some(h) if holds(h, holder, token) => Ok(Release::Delete(h)),
        None if rules::released_already(false, st.token(), st.last_holder(), holder, token) => {
            Ok(Release::Done)
        }
        _ => Err(lost(job, st, token)),
    }
}

/// A `CheckedWrite` with `token` on a key whose stored token is
/// `key_token`, by a caller whose policy refuses the holders `guard`
/// refuses: admitted or not by the core's rule ([`rules::admit_write`]:
/// the guard, then the fence), and the live holding the write's
/// transaction compares. That is `None` only when the broken rule
/// "no-fence" admitted the write: then the transaction compares neither
/// the holding nor the key's token.
pub fn write<'a>(
    st: &'a JobState,
    token: Token,
    key_token: Option<Token>,
    guard: Option<&dyn Fn(&str) -> bool>,
    faults: Faults,
) -> std::result::Result<Option<&'a Holding>, Refused> {
    let live = st
        .holder
        .as_ref()
        .map(|h| (h.rec.token, h.rec.holder.as_str()));
    rules::admit_write(token, st.token(), live, key_token, guard, faults)
        .map_err(Refused::Write)?;
    if faults.skip_fence() {
        return Ok(None);
    }
    // The fence passes only a token that is the live holding's.
    Ok(Some(
        st.holder
            .as_ref()
            .expect("the fence passed: the lease is live"),
    ))
}

/// Refuses a TTL etcd cannot keep exactly: not whole seconds, or below
/// etcd's minimum lease TTL.
pub fn check_ttl(ttl: Duration, min_ttl: Duration) -> Result<Duration> {
    if ttl.subsec_nanos() != 0 || ttl < min_ttl {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{ttl:?} is not allowed: with the etcd store, TTLs are whole seconds \
                 and at least {min_ttl:?} (etcd's minimum lease TTL)"
            ),
        ));
    }
    Ok(ttl)
}

/// The job's lease as read; `remaining` (capped at the grant's TTL) for a
/// held lease, its deadline counted from `now`.
pub fn view(job: &JobName, st: &JobState, remaining: Duration, now: Instant) -> LeaseView {
    let state = match &st.holder {
        Some(h) => held(&h.rec, remaining, now),
        None => LeaseState::Free(st.vacancy()),
    };
    LeaseView {
        job: job.clone(),
        token: st.token(),
        state,
    }
}

/// A held lease with `remaining` left (capped at its TTL), from `now`.
pub fn held(rec: &HolderRec, remaining: Duration, now: Instant) -> LeaseState {
    let remaining = remaining.min(rec.ttl);
    LeaseState::Held {
        holder: HolderId::from_trusted(rec.holder.clone()),
        issued: rec.issued,
        ttl: rec.ttl,
        deadline: now + remaining,
        remaining,
        value: rec.value.clone(),
    }
}

/// The view right after a grant or an extension: held for the full TTL.
pub fn granted(job: &JobName, rec: &HolderRec, now: Instant) -> LeaseView {
    LeaseView {
        job: job.clone(),
        token: rec.token,
        state: held(rec, rec.ttl, now),
    }
}

fn holds(h: &Holding, holder: &HolderId, token: Token) -> bool {
    h.rec.holder == holder.as_str() && h.rec.token == token
}

/// Why (`token`) does not hold the lease: unknown or lost.
fn lost(job: &JobName, st: &JobState, token: Token) -> Error {
    rules::unknown_or_lost(
        job,
        st.holder.as_ref().map(|h| h.rec.holder.clone()),
        st.token(),
        token,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::pb;
    use leasehold_core::error::FenceCause;
    use leasehold_core::lease::{Limits, Vacancy};

    const TTL: Duration = Duration::from_secs(5);

    fn job() -> JobName {
        Limits::default().job("j").unwrap()
    }

    fn who(name: &str) -> HolderId {
        Limits::default().holder(name).unwrap()
    }

    /// A job whose newest token is `token` (last held by `last`), held by
    /// `holder` when given.
    fn state(token: u64, last: &str, released: bool, holder: Option<&str>) -> JobState {
        let holder = holder.map(|h| {
            let rec = HolderRec {
                issued: Default::default(),
                token: Token(token),
                ttl: TTL,
                holder: h.into(),
                sharing: Default::default(),
                value: None,
            };
            Holding {
                raw: rec.encode(),
                rec,
                lease: 100 + token as i64,
                version: 1,
            }
        });
        JobState {
            token: (token > 0).then(|| TokenRec {
                token: Token(token),
                released,
                holder: last.into(),
                owner: None,
            }),
            token_mod: 7,
            holder,
        }
    }

    fn line(first: Option<i64>, mine: Option<i64>) -> Line {
        Line {
            waiting: i64::from(first.is_some()),
            first,
            mine,
            ..Line::default()
        }
    }

    #[test]
    fn acquire_grants_a_free_lease_only_to_the_first_in_line() {
        let a = who("a");
        let never = JobState::default();
        // Nobody waits: an Acquire that did not queue gets it.
        assert_eq!(
            acquire(&never, &line(None, None), &a, None).unwrap(),
            MayGrant::Grant
        );
        // Somebody waits: a newcomer cannot jump the line.
        assert_eq!(
            acquire(&never, &line(Some(5), None), &a, None).unwrap(),
            MayGrant::Busy {
                first_in_line: false
            }
        );
        // Queued: granted only when first.
        assert_eq!(
            acquire(&never, &line(Some(5), Some(5)), &a, Some(5)).unwrap(),
            MayGrant::Grant
        );
        assert_eq!(
            acquire(&never, &line(Some(4), Some(5)), &a, Some(5)).unwrap(),
            MayGrant::Busy {
                first_in_line: false
            }
        );
        let released = state(3, "b", true, None);
        assert_eq!(
            acquire(&released, &line(None, None), &a, None).unwrap(),
            MayGrant::Grant
        );
    }

    #[test]
    fn acquire_by_the_holder_extends_and_by_others_is_busy() {
        let st = state(3, "a", false, Some("a"));
        assert_eq!(
            acquire(&st, &line(None, None), &who("a"), None).unwrap(),
            MayGrant::Extend
        );
        // Even from the line, the holder extends.
        assert_eq!(
            acquire(&st, &line(Some(2), Some(9)), &who("a"), Some(9)).unwrap(),
            MayGrant::Extend
        );
        assert_eq!(
            acquire(&st, &line(None, None), &who("b"), None).unwrap(),
            MayGrant::Busy {
                first_in_line: false
            }
        );
        // A waiter first in line is told so, while the lease is held.
        assert_eq!(
            acquire(&st, &line(Some(4), Some(4)), &who("b"), Some(4)).unwrap(),
            MayGrant::Busy {
                first_in_line: true
            }
        );
    }

    #[test]
    fn a_waiter_whose_key_is_gone_lost_its_place() {
        let st = JobState::default();
        for mine in [None, Some(6)] {
            assert_eq!(
                acquire(&st, &line(Some(5), mine), &who("a"), Some(5)),
                Err(Refused::LostPlace)
            );
        }
        // What the client is told (unchanged): retry later.
        assert!(matches!(
            Refused::LostPlace.error(&job(), Token::NONE, Token::NONE),
            Error::Storage(_)
        ));
    }

    #[test]
    fn a_free_job_past_its_last_token_is_exhausted_for_anyone_in_line() {
        let spent = state(u64::MAX, "b", true, None);
        for (first, mine, waiting) in [
            (None, None, None),
            (Some(5), None, None),
            (Some(4), Some(5), Some(5)),
        ] {
            assert_eq!(
                acquire(&spent, &line(first, mine), &who("a"), waiting).unwrap(),
                MayGrant::Exhausted
            );
        }
        // Its holder still extends.
        let held = state(u64::MAX, "a", false, Some("a"));
        assert_eq!(
            acquire(&held, &line(None, None), &who("a"), None).unwrap(),
            MayGrant::Extend
        );
    }

    #[test]
    fn a_grant_takes_the_next_token() {
        let (h, t) = grant(
            &job(),
            &state(3, "b", true, None),
            Token::NONE,
            &who("a"),
            TTL,
            1_700_000_000_000,
            None,
        )
        .unwrap();
        assert_eq!((h.token, h.ttl, h.holder.as_str()), (Token(4), TTL, "a"));
        assert_eq!(
            t,
            TokenRec {
                token: Token(4),
                released: false,
                holder: "a".into(),
                owner: None,
            }
        );
        assert_eq!(
            grant(
                &job(),
                &JobState::default(),
                Token::NONE,
                &who("a"),
                TTL,
                0,
                None
            )
            .unwrap()
            .0
            .token,
            Token(1)
        );
        // A new job starts above the new-job floor.
        assert_eq!(
            grant(
                &job(),
                &JobState::default(),
                Token(7),
                &who("a"),
                TTL,
                0,
                None
            )
            .unwrap()
            .0
            .token,
            Token(8)
        );
        // The last token is issued once; then a grant is refused.
        let last = state(u64::MAX - 1, "b", true, None);
        assert_eq!(
            grant(&job(), &last, Token::NONE, &who("a"), TTL, 0, None)
                .unwrap()
                .0
                .token,
            Token::LAST
        );
        let spent = state(u64::MAX, "b", true, None);
        assert!(matches!(
            grant(&job(), &spent, Token::NONE, &who("a"), TTL, 0, None),
            Err(Error::TokensExhausted { .. })
        ));
    }

    #[test]
    fn an_extension_keeps_alive_or_moves_for_a_new_ttl() {
        let st = state(3, "a", false, Some("a"));
        let h = st.holder.as_ref().unwrap();
        assert_eq!(extend(h, TTL, None), Extend::KeepAlive);
        let longer = Duration::from_secs(9);
        assert_eq!(
            extend(h, longer, None),
            Extend::Move(HolderRec {
                ttl: longer,
                ..h.rec.clone()
            })
        );
        // A new value moves it too; the same value (none) does not.
        assert_eq!(extend(h, TTL, Some(&None)), Extend::KeepAlive);
        let v: Published = Some(std::sync::Arc::from(&b"10.0.0.7:80"[..]));
        assert_eq!(
            extend(h, TTL, Some(&v)),
            Extend::Move(HolderRec {
                value: v.clone(),
                ..h.rec.clone()
            })
        );
    }

    #[test]
    fn a_keep_alive_counts_only_in_the_current_term_on_the_same_holding() {
        let st = state(3, "a", false, Some("a"));
        let h = st.holder.as_ref().unwrap();
        let same = pb::KeyValue {
            value: h.raw.clone(),
            lease: h.lease,
            ..Default::default()
        };
        assert_eq!(keep_alive_proof(h, Some(&same), 4, 4), Proof::Live);
        assert_eq!(keep_alive_proof(h, Some(&same), 5, 4), Proof::Live);
        assert_eq!(keep_alive_proof(h, Some(&same), 3, 4), Proof::StaleTerm);
        assert_eq!(keep_alive_proof(h, None, 4, 4), Proof::Gone);
        let moved = pb::KeyValue {
            lease: h.lease + 1,
            ..same.clone()
        };
        assert_eq!(keep_alive_proof(h, Some(&moved), 4, 4), Proof::Gone);
    }

    #[test]
    fn renew_needs_the_exact_holding_else_unknown_or_lost() {
        let st = state(3, "a", false, Some("a"));
        assert_eq!(renew(&job(), &st, &who("a"), Token(3)).unwrap().lease, 103);
        match renew(&job(), &st, &who("b"), Token(3)) {
            Err(Error::LeaseLost {
                current_holder,
                current,
                ..
            }) => assert_eq!((current_holder.as_deref(), current), (Some("a"), Token(3))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            renew(&job(), &st, &who("a"), Token(2)),
            Err(Error::LeaseLost { .. })
        ));
        assert!(matches!(
            renew(&job(), &st, &who("a"), Token(4)),
            Err(Error::UnknownToken { .. })
        ));
        let expired = state(3, "a", false, None);
        assert!(matches!(
            renew(&job(), &expired, &who("a"), Token(3)),
            Err(Error::LeaseLost {
                current_holder: None,
                ..
            })
        ));
    }

    #[test]
    fn release_deletes_the_holding_and_a_repeat_is_kind() {
        let a = who("a");
        let st = state(3, "a", false, Some("a"));
        assert_eq!(
            release(&job(), &st, &a, Token(3)).unwrap(),
            Release::Delete(st.holder.as_ref().unwrap())
        );
        // Released already, or ran out, by this holder and token.
        for released in [true, false] {
            let st = state(3, "a", released, None);
            assert_eq!(release(&job(), &st, &a, Token(3)).unwrap(), Release::Done);
        }
        // Not for somebody else, an older token, or a token never issued.
        let free = state(3, "a", true, None);
        assert!(matches!(
            release(&job(), &free, &who("b"), Token(3)),
            Err(Error::LeaseLost { .. })
        ));
        assert!(matches!(
            release(&job(), &free, &a, Token(2)),
            Err(Error::LeaseLost { .. })
        ));
        assert!(matches!(
            release(&job(), &free, &a, Token(4)),
            Err(Error::UnknownToken { .. })
        ));
        assert!(matches!(
            release(&job(), &st, &who("b"), Token(3)),
            Err(Error::LeaseLost { .. })
        ));
    }

    #[test]
    fn write_is_the_admission_and_returns_the_holding_to_compare() {
        let no = Faults::default();
        let st = state(3, "a", false, Some("a"));
        let w = |st, token, key, guard| write(st, Token(token), key, guard, no);
        assert_eq!(w(&st, 3, None, None).unwrap().unwrap().lease, 103);
        assert!(w(&st, 3, Some(Token(3)), None).is_ok());
        let why = |r: std::result::Result<Option<&Holding>, Refused>| match r {
            Err(Refused::Write(why)) => Some(why),
            _ => None,
        };
        assert_eq!(
            why(w(&st, 3, Some(Token(4)), None)),
            Some(WriteRefusal::Fenced(FenceCause::KeyNewer))
        );
        assert_eq!(
            why(w(&st, 2, None, None)),
            Some(WriteRefusal::Fenced(FenceCause::Superseded))
        );
        let expired = state(3, "a", false, None);
        assert_eq!(
            why(w(&expired, 3, None, None)),
            Some(WriteRefusal::Fenced(FenceCause::NotLive))
        );
        assert_eq!(why(w(&st, 4, None, None)), Some(WriteRefusal::UnknownToken));
        // The guard is asked about the live grant's holder, before the
        // fence: even a write the fence would refuse for the key.
        let not_a = |h: &str| h == "a";
        assert_eq!(
            why(w(&st, 3, Some(Token(4)), Some(&not_a))),
            Some(WriteRefusal::HeldByAnother)
        );
        // Not for a token that is not the live grant's.
        assert_eq!(
            why(w(&st, 2, None, Some(&not_a))),
            Some(WriteRefusal::Fenced(FenceCause::Superseded))
        );
        let not_b = |h: &str| h == "b";
        assert!(w(&st, 3, None, Some(&not_b)).is_ok());
        // The client's errors, as the single node words them.
        let e = Refused::Write(WriteRefusal::Fenced(FenceCause::Superseded)).error(
            &job(),
            Token(2),
            Token(3),
        );
        assert!(matches!(
            e,
            Error::Fenced {
                cause: FenceCause::Superseded,
                ..
            }
        ));
        assert!(matches!(
            Refused::Write(WriteRefusal::HeldByAnother).error(&job(), Token(3), Token(3)),
            Error::PermissionDenied { .. }
        ));
    }

    #[test]
    fn ttls_are_whole_seconds_at_least_the_minimum() {
        let min = Duration::from_secs(2);
        assert!(check_ttl(Duration::from_secs(2), min).is_ok());
        assert!(check_ttl(Duration::from_secs(30), min).is_ok());
        for bad in [
            Duration::from_secs(1),
            Duration::from_millis(2500),
            Duration::ZERO,
        ] {
            assert!(
                matches!(check_ttl(bad, min), Err(Error::InvalidArgument { ref field, .. }) if field == "ttl"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn views_show_the_holding_or_why_the_lease_is_free() {
        let now = Instant::now();
        let st = state(3, "a", false, Some("a"));
        let v = view(&job(), &st, Duration::from_secs(60), now);
        assert_eq!(v.token, Token(3));
        match v.state {
            LeaseState::Held {
                holder,
                ttl,
                remaining,
                deadline,
                ..
            } => {
                assert_eq!((holder.as_str(), ttl, remaining), ("a", TTL, TTL));
                assert_eq!(deadline, now + TTL);
            }
            other => panic!("{other:?}"),
        }
        let free = |released| view(&job(), &state(3, "a", released, None), TTL, now).state;
        assert_eq!(free(true), LeaseState::Free(Vacancy::Released));
        assert_eq!(free(false), LeaseState::Free(Vacancy::Expired));
        let never = view(&job(), &JobState::default(), TTL, now);
        assert_eq!(
            (never.token, never.state),
            (Token::NONE, LeaseState::Free(Vacancy::Never))
        );
        let g = granted(&job(), &st.holder.as_ref().unwrap().rec, now);
        assert_eq!(g.deadline(), Some(now + TTL));
    }
}
