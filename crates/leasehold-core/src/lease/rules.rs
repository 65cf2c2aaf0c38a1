//! The rule book: the decisions both backends make, as pure functions.
//!
//! The single node decides in [`LeaseTable`](super::LeaseTable); the etcd
//! backend decides from what it read from etcd, then lets a transaction
//! re-check it. **Both ask these functions, and only these, so the rules
//! cannot drift apart**: who gets the lease next ([`may_grant`]), whether
//! a write is admitted ([`admit_write`]: the holder guard, then the
//! fence), whether a principal may create one more job
//! ([`admit_new_job`]), the next token, a refused renewal, a repeated release, and how
//! long a lease lasts and what token a renewal answers. The table's
//! property tests against the model (`model.rs`) exercise them, and the
//! tests below check each one against a plain statement of the rule.
//!
//! The rules broken on purpose for the torture checker's self-test
//! ([`Faults`]) are switched here too, so one switch breaks both backends
//! the same way.

use std::time::Duration;

use crate::error::{Error, FenceCause, Result};
use crate::lease::{HolderId, JobName, LeaseState, LeaseView, Token, Vacancy};

/// Rules broken on purpose, to show that the torture checker catches real
/// bugs (`LEASEHOLD_BREAK`). All false unless set by a build with the
/// `fault-injection` feature; never in a release.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// `no-fence`: admit any write whose token was issued, live or not,
    /// whatever the key's token ([`admit_write`]).
    pub skip_fence: bool,
    /// `early-expiry`: let a lease run out at half its TTL ([`lasts`]).
    pub early_expiry: bool,
    /// `renew-bumps-token`: give a renewal a new token
    /// ([`renewed_token`]).
    pub renew_bumps_token: bool,
    /// `ack-before-sync`: answer a change before it is durable. Each
    /// backend carries this one out itself: the single node before its
    /// group commit's sync, the etcd backend before etcd's transaction
    /// has committed.
    pub ack_before_sync: bool,
}

/// The rules ask through these, which are constant `false` unless the crate
/// is built with the `fault-injection` feature: in a production build the
/// compiler removes every broken-rule branch.
impl Faults {
    /// Whether the `skip_fence` rule is broken (only ever in a fault-injection build).
    pub fn skip_fence(&self) -> bool {
        cfg!(feature = "fault-injection") && self.skip_fence
    }
    /// Whether the `early_expiry` rule is broken (only ever in a fault-injection build).
    pub fn early_expiry(&self) -> bool {
        cfg!(feature = "fault-injection") && self.early_expiry
    }
    /// Whether the `renew_bumps_token` rule is broken (only ever in a fault-injection build).
    pub fn renew_bumps_token(&self) -> bool {
        cfg!(feature = "fault-injection") && self.renew_bumps_token
    }
    /// Whether the `ack_before_sync` rule is broken (only ever in a fault-injection build).
    pub fn ack_before_sync(&self) -> bool {
        cfg!(feature = "fault-injection") && self.ack_before_sync
    }

    /// The rules to break, from a list such as
    /// `no-fence,early-expiry,renew-bumps-token,ack-before-sync` (the
    /// value of `LEASEHOLD_BREAK`), the same for both backends.
    #[cfg(feature = "fault-injection")]
    pub fn parse(list: &str) -> Result<Faults> {
        let mut f = Faults::default();
        for rule in list.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            match rule {
                "no-fence" => f.skip_fence = true,
                "early-expiry" => f.early_expiry = true,
                "renew-bumps-token" => f.renew_bumps_token = true,
                "ack-before-sync" => f.ack_before_sync = true,
                other => {
                    return Err(Error::invalid(
                        "LEASEHOLD_BREAK",
                        format!("unknown rule {other:?}"),
                    ))
                }
            }
        }
        Ok(f)
    }
}

/// What an `Acquire` may do, by the rule of who gets the lease next: the
/// one decision both backends make for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MayGrant {
    /// The asker holds the live lease: extend it; the token stays.
    Extend,
    /// The lease is free and it is the asker's turn: grant it, with the
    /// next token.
    Grant,
    /// The lease is free, but the job has issued its last token: refused
    /// ([`Error::TokensExhausted`]), whoever is in line.
    Exhausted,
    /// Not the asker's turn: somebody else holds the lease, or waiters are
    /// ahead of the asker.
    Busy {
        /// Whether the asker is the first waiting in line (only the first
        /// needs a timer on the lease's deadline; the others are woken
        /// when they move up).
        first_in_line: bool,
    },
}

/// Who gets the lease next: an `Acquire` by `asker`, on a job whose live
/// lease (if any) is held by `live_holder`, and whose first waiter in line
/// is `first`. `waiter` is the asker's own place in line when it queued
/// (`None` for an `Acquire` that has not); `exhausted` says the job has
/// issued its last token.
///
/// - **The holder itself** extends its live lease (even from the line).
/// - **Anybody else is refused while the lease is live.**
/// - **Once it is free (released, or expired: the caller has applied
///   expiry at its `now`), first come, first served**: an `Acquire` that
///   has not queued gets it only when nobody waits, a queued one only when
///   it is first in line.
pub fn may_grant<W: PartialEq>(
    live_holder: Option<&str>,
    asker: &HolderId,
    exhausted: bool,
    first: Option<W>,
    waiter: Option<W>,
) -> MayGrant {
    match live_holder {
        Some(h) if h == asker.as_str() => MayGrant::Extend,
        Some(_) => MayGrant::Busy {
            first_in_line: waiter.is_some() && first == waiter,
        },
        None if exhausted => MayGrant::Exhausted,
        None if first == waiter => MayGrant::Grant,
        None => MayGrant::Busy {
            first_in_line: false,
        },
    }
}

/// Why a write is refused ([`admit_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRefusal {
    /// The writer's token is the live grant's, but the caller's policy
    /// refuses writes for that grant's holder (its guard).
    HeldByAnother,
    /// The token was never issued for the job: zero, or above its newest.
    UnknownToken,
    /// The fence refused it, for this reason.
    Fenced(FenceCause),
}

impl WriteRefusal {
    /// The error the client is told, for a write with `token` on `job`
    /// whose newest token is `current`.
    pub fn error(self, job: &JobName, token: Token, current: Token) -> Error {
        match self {
            WriteRefusal::HeldByAnother => held_by_another(job),
            WriteRefusal::UnknownToken => Error::UnknownToken {
                job: job.to_string(),
                token: token.0,
                current,
            },
            WriteRefusal::Fenced(cause) => Error::Fenced {
                job: job.to_string(),
                token,
                current,
                cause,
            },
        }
    }
}

/// Whether `holder` may create a job (its `Acquire` names a job that does
/// not exist): not when the principal it is bound to already owns
/// `max_owned` jobs, its own `max_jobs` (`owned` counts the jobs it
/// created and nobody deleted, [`HolderId::principal`]). A holder bound
/// to no principal, or a principal without a `max_jobs` of its own, is
/// held only to the server's `--max-jobs`, which each backend checks
/// against its own count.
pub fn admit_new_job(holder: &HolderId, owned: usize, max_owned: Option<usize>) -> Result<()> {
    match (holder.principal(), max_owned) {
        (Some(p), Some(max)) if owned >= max => Err(Error::QuotaExceeded {
            limit: "max_jobs",
            max,
            principal: Some(p.to_owned()),
        }),
        _ => Ok(()),
    }
}

/// The refusal of a write whose holder guard refused the live grant's
/// holder ([`WriteRefusal::HeldByAnother`]).
pub fn held_by_another(job: &JobName) -> Error {
    Error::PermissionDenied {
        action: "write",
        job: job.to_string(),
        why: "the job's lease is held by another principal",
    }
}

/// Whether a write with `token` is admitted, on a job whose newest token is
/// `current`, whose live grant (if any) has token and holder `live`, on a
/// key whose highest token so far is `key_token`; `guard` (a caller's
/// policy, if any) says whether a holder is one it must not write for.
///
/// In this order, the same on both backends:
/// 1. **the guard**: a write carrying the live grant's token is refused
///    ([`WriteRefusal::HeldByAnother`]) when the guard refuses that grant's
///    holder, whatever the key;
/// 2. **the fence** ([`fence`]): the token must be the job's newest, live,
///    and not below the key's.
///
/// A write with any other token meets the fence alone: the guard is
/// about who holds the live grant, and tells nothing to a writer whose
/// token is not it.
pub fn admit_write(
    token: Token,
    current: Token,
    live: Option<(Token, &str)>,
    key_token: Option<Token>,
    guard: Option<&dyn Fn(&str) -> bool>,
    faults: Faults,
) -> std::result::Result<(), WriteRefusal> {
    if let (Some((live_token, holder)), Some(refuse)) = (live, guard) {
        if live_token == token && refuse(holder) {
            return Err(WriteRefusal::HeldByAnother);
        }
    }
    match fence_check(token, current, live.map(|(t, _)| t), key_token) {
        // The broken rule "no-fence" admits any token that was issued.
        Err(WriteRefusal::Fenced(_)) if faults.skip_fence() => Ok(()),
        r => r,
    }
}

/// How long a lease granted or renewed for `ttl` lasts: `ttl`, or half of
/// it under the broken rule "early-expiry".
pub fn lasts(ttl: Duration, faults: Faults) -> Duration {
    match faults.early_expiry() {
        true => ttl / 2,
        false => ttl,
    }
}

/// The token a renewal of the lease of `token` answers: the same, always,
/// but under the broken rule "renew-bumps-token" (then the next one).
pub fn renewed_token(token: Token, faults: Faults) -> Token {
    match faults.renew_bumps_token() {
        true => token.next().unwrap_or(Token::LAST),
        false => token,
    }
}

/// The fence: may a writer with `token` write a key whose highest token so
/// far is `key_token`, on a job whose newest token is `current` and whose
/// live lease (if any) has token `live`?
///
/// Only if `token` is the job's newest, its lease is live, and no higher
/// token has written the key. A token above `current` (or zero) was never
/// issued: [`Error::UnknownToken`]. Checking against the job's newest
/// token, not only the key's, is what refuses a paused leader that wakes up
/// after a takeover, even before the new leader has written anything.
pub fn fence(
    job: &JobName,
    token: Token,
    current: Token,
    live: Option<Token>,
    key_token: Option<Token>,
) -> Result<()> {
    fence_check(token, current, live, key_token).map_err(|r| r.error(job, token, current))
}

/// [`fence`], with the reason as a [`WriteRefusal`].
fn fence_check(
    token: Token,
    current: Token,
    live: Option<Token>,
    key_token: Option<Token>,
) -> std::result::Result<(), WriteRefusal> {
    if token > current || token == Token::NONE {
        return Err(WriteRefusal::UnknownToken);
    }
    let cause = if token < current {
        FenceCause::Superseded
    } else if live != Some(token) {
        FenceCause::NotLive
    } else if key_token.is_some_and(|k| k > token) {
        FenceCause::KeyNewer
    } else {
        return Ok(());
    };
    Err(WriteRefusal::Fenced(cause))
}

/// The token of the next grant on a job whose newest token is `current`,
/// or [`Error::TokensExhausted`] after the last one: a grant is refused
/// rather than repeat a token.
pub fn next_token(job: &JobName, current: Token) -> Result<Token> {
    current.next().ok_or_else(|| Error::TokensExhausted {
        job: job.to_string(),
    })
}

/// Why a `Renew` or `Release` with `token` is refused when the caller does
/// not hold the live lease: a token never issued is
/// [`Error::UnknownToken`], any other is [`Error::LeaseLost`] (naming the
/// holder now, if any).
pub fn unknown_or_lost(
    job: &JobName,
    current_holder: Option<String>,
    current: Token,
    token: Token,
) -> Error {
    if token > current {
        Error::UnknownToken {
            job: job.to_string(),
            token: token.0,
            current,
        }
    } else {
        Error::LeaseLost {
            job: job.to_string(),
            current_holder,
            current,
        }
    }
}

/// Whether a `Release` by `holder` with `token` repeats one that already
/// took effect (or comes after the lease ran out): nobody holds the lease,
/// the token is still the job's newest, and `holder` had it last. Such a
/// release is answered kindly and changes nothing.
pub fn released_already(
    held: bool,
    current: Token,
    last_holder: Option<&str>,
    holder: &HolderId,
    token: Token,
) -> bool {
    !held && current == token && last_holder == Some(holder.as_str())
}

/// What a watcher is told about a change of a job's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The state when the watch began.
    Current,
    /// A grant to a new holder, or a new token.
    Acquired,
    /// The holder released it.
    Released,
    /// It ran out.
    Expired,
    /// The holder changed its published value (same holder, same token).
    ValueChanged,
}

/// What kind of event, if any, leads from `last` to `now` for a watcher. A
/// renewal (same holder, same token, still held) is no event.
pub fn classify(last: &LeaseView, now: &LeaseView) -> Option<EventKind> {
    let same = last.token == now.token && last.holder() == now.holder();
    match &now.state {
        LeaseState::Held { .. } if !same => Some(EventKind::Acquired),
        LeaseState::Held { .. } if last.value() != now.value() => Some(EventKind::ValueChanged),
        LeaseState::Held { .. } => None,
        LeaseState::Free(_) if same => None,
        LeaseState::Free(Vacancy::Expired) => Some(EventKind::Expired),
        LeaseState::Free(_) => Some(EventKind::Released),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::lease::Limits;

    proptest! {
        /// The fence, against the rule as the docs state it: a write
        /// passes exactly when its token is the newest issued, live, and
        /// not below the key's; a token never issued is unknown; every
        /// refusal names the job's newest token.
        #[test]
        fn the_fence_is_the_documented_rule(
            token in 0u64..6, current in 0u64..6,
            live in proptest::option::of(0u64..6), key in proptest::option::of(0u64..6),
        ) {
            let job = Limits::default().job("j").unwrap();
            let r = fence(&job, Token(token), Token(current), live.map(Token), key.map(Token));
            let issued = token >= 1 && token <= current;
            let ok = issued && token == current && live == Some(token) && key.is_none_or(|k| k <= token);
            prop_assert_eq!(r.is_ok(), ok);
            match r {
                Err(Error::UnknownToken { current: c, .. }) => {
                    prop_assert!(!issued);
                    prop_assert_eq!(c, Token(current));
                }
                Err(Error::Fenced { cause, current: c, .. }) => {
                    prop_assert!(issued);
                    prop_assert_eq!(c, Token(current));
                    let expect = if token < current {
                        FenceCause::Superseded
                    } else if live != Some(token) {
                        FenceCause::NotLive
                    } else {
                        FenceCause::KeyNewer
                    };
                    prop_assert_eq!(cause, expect);
                }
                Err(e) => prop_assert!(false, "unexpected {e:?}"),
                Ok(()) => {}
            }
        }

        /// A refused renewal or release is unknown exactly when its token
        /// was never issued.
        #[test]
        fn unknown_or_lost_splits_on_issued(token in 1u64..6, current in 0u64..6) {
            let job = Limits::default().job("j").unwrap();
            let e = unknown_or_lost(&job, None, Token(current), Token(token));
            prop_assert_eq!(matches!(e, Error::UnknownToken { .. }), token > current);
        }
    }

    fn holder(name: &str) -> HolderId {
        Limits::default().holder(name).unwrap()
    }

    /// `may_grant` with no line at all.
    fn alone(live: Option<&str>, asker: &str) -> MayGrant {
        may_grant::<u64>(live, &holder(asker), false, None, None)
    }

    #[test]
    fn the_holder_extends_its_live_lease() {
        assert_eq!(alone(Some("a"), "a"), MayGrant::Extend);
        // From the line too, and even ahead of waiters.
        assert_eq!(
            may_grant(Some("a"), &holder("a"), false, Some(1), Some(2)),
            MayGrant::Extend
        );
        // And when the job has no token left: it keeps the one it has.
        assert_eq!(
            may_grant::<u64>(Some("a"), &holder("a"), true, None, None),
            MayGrant::Extend
        );
    }

    #[test]
    fn anybody_else_is_refused_while_the_lease_is_live() {
        let busy = |first_in_line| MayGrant::Busy { first_in_line };
        assert_eq!(alone(Some("a"), "b"), busy(false));
        assert_eq!(
            may_grant(Some("a"), &holder("b"), false, Some(1), Some(1)),
            busy(true)
        );
        assert_eq!(
            may_grant(Some("a"), &holder("b"), false, Some(1), Some(2)),
            busy(false)
        );
        assert_eq!(
            may_grant(Some("a"), &holder("b"), false, Some(1), None),
            busy(false)
        );
    }

    #[test]
    fn anybody_gets_a_free_lease_when_nobody_waits() {
        // Free: released, or expired (the caller applied expiry at `now`).
        assert_eq!(alone(None, "a"), MayGrant::Grant);
        assert_eq!(alone(None, "b"), MayGrant::Grant);
    }

    #[test]
    fn a_free_lease_goes_first_come_first_served() {
        let b = holder("b");
        // The first in line gets it; the second and a newcomer wait.
        assert_eq!(
            may_grant(None, &b, false, Some(1), Some(1)),
            MayGrant::Grant
        );
        assert_eq!(
            may_grant(None, &b, false, Some(1), Some(2)),
            MayGrant::Busy {
                first_in_line: false
            }
        );
        assert_eq!(
            may_grant(None, &b, false, Some(1), None),
            MayGrant::Busy {
                first_in_line: false
            }
        );
        // A queued asker whose place the caller no longer finds is not
        // first either.
        assert_eq!(
            may_grant(None, &b, false, None, Some(2)),
            MayGrant::Busy {
                first_in_line: false
            }
        );
    }

    #[test]
    fn a_free_lease_past_its_last_token_goes_to_nobody() {
        for (first, waiter) in [(None, None), (Some(1), Some(1)), (Some(1), Some(2))] {
            assert_eq!(
                may_grant(None, &holder("a"), true, first, waiter),
                MayGrant::Exhausted
            );
        }
    }

    /// `admit_write` without broken rules.
    fn admit(
        token: u64,
        current: u64,
        live: Option<(u64, &str)>,
        key: Option<u64>,
        guard: Option<&dyn Fn(&str) -> bool>,
    ) -> std::result::Result<(), WriteRefusal> {
        admit_write(
            Token(token),
            Token(current),
            live.map(|(t, h)| (Token(t), h)),
            key.map(Token),
            guard,
            Faults::default(),
        )
    }

    #[test]
    fn a_write_is_admitted_with_the_live_newest_token() {
        assert_eq!(admit(3, 3, Some((3, "a")), None, None), Ok(()));
        assert_eq!(admit(3, 3, Some((3, "a")), Some(3), None), Ok(()));
        assert_eq!(admit(3, 3, Some((3, "a")), Some(1), None), Ok(()));
        let refuse_b = |h: &str| h == "b";
        assert_eq!(admit(3, 3, Some((3, "a")), None, Some(&refuse_b)), Ok(()));
    }

    #[test]
    fn each_refusal_of_a_write_has_its_reason() {
        use FenceCause::*;
        let refuse_a = |h: &str| h == "a";
        type Guard<'a> = Option<&'a dyn Fn(&str) -> bool>;
        let cases: [(_, Guard, _); 7] = [
            // The guard refuses the live grant's holder.
            (
                (3, 3, Some((3, "a")), None),
                Some(&refuse_a),
                WriteRefusal::HeldByAnother,
            ),
            // Never issued: zero, or above the newest.
            (
                (0, 3, Some((3, "a")), None),
                None,
                WriteRefusal::UnknownToken,
            ),
            (
                (4, 3, Some((3, "a")), None),
                None,
                WriteRefusal::UnknownToken,
            ),
            // A newer grant exists.
            (
                (2, 3, Some((3, "a")), None),
                None,
                WriteRefusal::Fenced(Superseded),
            ),
            // The newest, but it expired or was released.
            ((3, 3, None, None), None, WriteRefusal::Fenced(NotLive)),
            // A higher token wrote the key.
            (
                (3, 3, Some((3, "a")), Some(4)),
                None,
                WriteRefusal::Fenced(KeyNewer),
            ),
            // The guard is not asked about a token that is not live.
            (
                (2, 3, Some((3, "a")), None),
                Some(&refuse_a),
                WriteRefusal::Fenced(Superseded),
            ),
        ];
        for ((token, current, live, key), guard, why) in cases {
            assert_eq!(
                admit(token, current, live, key, guard),
                Err(why),
                "{token} {current} {live:?} {key:?}"
            );
        }
    }

    #[test]
    fn the_guard_comes_before_the_fence() {
        // A write with the live grant's token, on a key a higher token
        // wrote, by a caller whose policy refuses that grant's holder:
        // refused by the guard, as the single node always answered.
        let refuse_a = |h: &str| h == "a";
        assert_eq!(
            admit(3, 3, Some((3, "a")), Some(4), Some(&refuse_a)),
            Err(WriteRefusal::HeldByAnother)
        );
    }

    #[test]
    fn a_refusal_is_told_as_the_error_clients_know() {
        let job = Limits::default().job("j").unwrap();
        assert!(matches!(
            WriteRefusal::HeldByAnother.error(&job, Token(3), Token(3)),
            Error::PermissionDenied {
                action: "write",
                ..
            }
        ));
        assert_eq!(
            WriteRefusal::UnknownToken.error(&job, Token(9), Token(3)),
            Error::UnknownToken {
                job: "j".into(),
                token: 9,
                current: Token(3)
            }
        );
        assert_eq!(
            WriteRefusal::Fenced(FenceCause::NotLive).error(&job, Token(3), Token(3)),
            Error::Fenced {
                job: "j".into(),
                token: Token(3),
                current: Token(3),
                cause: FenceCause::NotLive
            }
        );
    }

    #[test]
    fn unbroken_a_lease_lasts_its_ttl_and_a_renewal_keeps_its_token() {
        let f = Faults::default();
        assert_eq!(lasts(Duration::from_secs(3), f), Duration::from_secs(3));
        assert_eq!(renewed_token(Token(7), f), Token(7));
        assert!(!f.skip_fence() && !f.early_expiry() && !f.renew_bumps_token());
    }

    /// The rules broken on purpose, one switch for both backends. Without
    /// the `fault-injection` feature, setting them changes nothing.
    #[test]
    fn broken_rules_break_only_in_a_fault_injection_build() {
        let f = Faults {
            skip_fence: true,
            early_expiry: true,
            renew_bumps_token: true,
            ack_before_sync: true,
        };
        let on = cfg!(feature = "fault-injection");
        let stale = admit_write(Token(2), Token(3), Some((Token(3), "a")), None, None, f);
        assert_eq!(stale.is_ok(), on);
        // Never a token that was not issued.
        let unknown = admit_write(Token(4), Token(3), None, None, None, f);
        assert_eq!(unknown, Err(WriteRefusal::UnknownToken));
        let ttl = Duration::from_secs(4);
        assert_eq!(lasts(ttl, f), if on { ttl / 2 } else { ttl });
        assert_eq!(renewed_token(Token(7), f), Token(if on { 8 } else { 7 }));
        assert_eq!(f.ack_before_sync(), on);
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn break_lists_parse_the_same_for_both_backends() {
        let f =
            Faults::parse(" no-fence, early-expiry,renew-bumps-token,ack-before-sync ").unwrap();
        assert!(f.skip_fence && f.early_expiry && f.renew_bumps_token && f.ack_before_sync);
        assert_eq!(Faults::parse("").unwrap(), Faults::default());
        assert!(matches!(
            Faults::parse("no-fence,bogus"),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn the_last_token_is_issued_once() {
        let job = Limits::default().job("j").unwrap();
        assert_eq!(next_token(&job, Token(7)).unwrap(), Token(8));
        assert_eq!(next_token(&job, Token(u64::MAX - 1)).unwrap(), Token::LAST);
        assert!(matches!(
            next_token(&job, Token::LAST),
            Err(Error::TokensExhausted { .. })
        ));
    }

    #[test]
    fn a_repeated_release_is_kind_only_to_the_last_holder() {
        let l = Limits::default();
        let a = l.holder("a").unwrap();
        assert!(released_already(false, Token(3), Some("a"), &a, Token(3)));
        assert!(!released_already(true, Token(3), Some("a"), &a, Token(3)));
        assert!(!released_already(false, Token(4), Some("a"), &a, Token(3)));
        assert!(!released_already(false, Token(3), Some("b"), &a, Token(3)));
        assert!(!released_already(false, Token(3), None, &a, Token(3)));
    }
}
