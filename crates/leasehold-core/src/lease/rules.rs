//! The rule book: the decisions both backends make, as pure functions.
//!
//! The single node decides in [`LeaseTable`](super::LeaseTable); the etcd
//! backend decides from what it read from etcd, then lets a transaction
//! re-check it. Both ask these functions, so the rules cannot drift
//! apart: the table's property tests against the model (`model.rs`)
//! exercise them, and the tests below check each one against a plain
//! statement of the rule.

use crate::error::{Error, FenceCause, Result};
use crate::lease::{HolderId, JobName, LeaseState, LeaseView, Token, Vacancy};

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
    if token > current || token == Token::NONE {
        return Err(Error::UnknownToken {
            job: job.to_string(),
            token: token.0,
            current,
        });
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
    Err(Error::Fenced {
        job: job.to_string(),
        token,
        current,
        cause,
    })
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
}

/// What kind of event, if any, leads from `last` to `now` for a watcher. A
/// renewal (same holder, same token, still held) is no event.
pub fn classify(last: &LeaseView, now: &LeaseView) -> Option<EventKind> {
    let same = last.token == now.token && last.holder() == now.holder();
    match &now.state {
        LeaseState::Held { .. } if !same => Some(EventKind::Acquired),
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
