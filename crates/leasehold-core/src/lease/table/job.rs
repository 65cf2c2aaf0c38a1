//! One job's state in the lease table: the newest token, the holding, the
//! last holder, and the parts few jobs use (boxed, so that a plain held
//! lease stays small). Its own steps are here: lazy expiry
//! ([`Job::settle`], which every rule calls first), the grant of the next
//! token, and the record the store keeps.
//!
//! Apart from the table's decisions because these steps are the same
//! whichever decision takes them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::line::Waiter;
use super::owners::Owners;
use super::views::Vacancy;
use super::{Effects, HistoryEvent, Issued, LeaseRecord, Stats, TenureEnd, WaiterId};
use crate::lease::rules::{self, Faults};
use crate::lease::{HolderId, Published, Token};

/// A duration in 8 bytes (nanoseconds), where a `Duration` takes 16: a
/// held lease keeps two, and a million leases are a million `Job`s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Span(u64);

impl Span {
    pub(super) fn of(d: Duration) -> Span {
        Span(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(super) fn get(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

/// An `Instant` in 8 bytes (signed nanoseconds from a base taken once per
/// process), where an `Instant` takes 16: a held lease keeps a deadline
/// and a job the start of its vacancy. Exact for any instant within 292
/// years of the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Moment(i64);

impl Moment {
    fn base() -> Instant {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *BASE.get_or_init(Instant::now)
    }

    pub(super) fn of(t: Instant) -> Moment {
        let base = Moment::base();
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        match t.checked_duration_since(base) {
            Some(after) => Moment(nanos(after)),
            None => Moment(-nanos(base - t)),
        }
    }

    pub(super) fn get(self) -> Instant {
        let base = Moment::base();
        let d = Duration::from_nanos(self.0.unsigned_abs());
        if self.0 >= 0 {
            base + d
        } else {
            // Only an instant that existed (before the base) is negative.
            base.checked_sub(d).unwrap_or(base)
        }
    }
}

/// The waiter a release handed the lease to, if any, in 8 bytes (an
/// `Option<WaiterId>` takes 16; waiter ids never reach `u64::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HandedTo(u64);

impl HandedTo {
    pub(super) const NONE: HandedTo = HandedTo(u64::MAX);

    pub(super) fn to(id: WaiterId) -> HandedTo {
        HandedTo(id.0)
    }

    /// The waiter, leaving none.
    pub(super) fn take(&mut self) -> Option<WaiterId> {
        let id = std::mem::replace(self, HandedTo::NONE);
        (id != HandedTo::NONE).then_some(WaiterId(id.0))
    }
}

#[derive(Debug, Clone)]
pub(super) struct Holding {
    pub(super) holder: HolderId,
    /// When the token was granted, and with which TTL (its proof's facts).
    pub(super) issued: Issued,
    pub(super) ttl: Span,
    pub(super) deadline: Moment,
    /// Whether the holder asked again since the grant (a repeated
    /// `Acquire`, or a `Renew`): an answer telling it that it leads may
    /// have reached it, so [`LeaseTable::give_back`] leaves the grant be.
    pub(super) told_again: bool,
    /// The waiter a release handed the lease to: its own call's completion
    /// is not the holder asking again.
    pub(super) handed_to: HandedTo,
    /// Granted to a preferred candidate (`AcquireRequest.preferred`).
    pub(super) preferred: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Job {
    /// The newest token issued. Never goes down.
    pub(super) token: Token,
    pub(super) holding: Option<Holding>,
    /// The holder of the newest token once its holding has ended (released
    /// or expired), so that a late, repeated release is answered kindly and
    /// takeovers are counted. `None` while held: the holding names it
    /// ([`Job::last_holder`]), and a million held leases keep one copy of
    /// each holder, not two.
    pub(super) last_holder: Option<HolderId>,
    /// The TTL in the stored record of the current holding.
    pub(super) stored_ttl: Span,
    /// Since when the job has had no leader, and why.
    vacant_since: Moment,
    pub(super) vacancy: Vacancy,
    /// An opaque number the caller attaches to the job's last change (its
    /// durability sequence number).
    pub(super) stamp: u64,
    /// The principal that created the job, by its number in the table's
    /// [`Owners`]; 0 for none.
    pub(super) owner: u32,
    /// What few jobs have: `None` when it is all empty. Boxed, so that a
    /// plain held lease does not carry its room (a `Job` is 184 bytes with
    /// it boxed, 256 without; 16 of them the grant's `Issued`).
    pub(super) rare: Option<Box<Rare>>,
}

/// The parts of a [`Job`] that most jobs do not use at any one time.
#[derive(Debug, Clone, Default)]
pub(super) struct Rare {
    /// The waiters that are not preferred, first in line first.
    pub(super) waiters: VecDeque<Waiter>,
    /// The preferred waiters, ahead of the others.
    pub(super) preferred: VecDeque<Waiter>,
    /// The token and deadline of a holding that ran out and whose end is
    /// not in the history yet: the next grant (or the job's deletion)
    /// records it, in its own durable change.
    pub(super) expired_unrecorded: Option<(Token, Instant)>,
    /// Writes refused as fenced (stale tokens: split-brain attempts), and
    /// when the last one was.
    pub(super) fenced: u64,
    pub(super) last_fenced: Option<Instant>,
    /// The live holding's published value (`Lease.value`): few leases
    /// have one, so it lives here, and goes with the holding.
    pub(super) value: Published,
}

impl Holding {
    /// When the lease runs out, unless renewed.
    pub(super) fn deadline(&self) -> Instant {
        self.deadline.get()
    }

    pub(super) fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Moment::of(deadline);
    }
}

impl Job {
    /// Since when the job has had no leader (while it has none).
    pub(super) fn vacant_since(&self) -> Instant {
        self.vacant_since.get()
    }

    /// The job has had no leader since `now`.
    pub(super) fn vacant_from(&mut self, now: Instant) {
        self.vacant_since = Moment::of(now);
    }

    /// A job never seen before: its first grant gets `floor` + 1.
    pub(super) fn new(now: Instant, floor: Token) -> Job {
        Job {
            token: floor,
            holding: None,
            last_holder: None,
            stored_ttl: Span::default(),
            vacant_since: Moment::of(now),
            vacancy: Vacancy::Never,
            stamp: 0,
            owner: 0,
            rare: None,
        }
    }

    /// The rare parts, made when first needed.
    pub(super) fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Drops the rare parts once they are all empty again.
    pub(super) fn tidy(&mut self) {
        if self.rare.as_deref().is_some_and(|r| {
            r.waiters.is_empty()
                && r.preferred.is_empty()
                && r.expired_unrecorded.is_none()
                && r.fenced == 0
                && r.last_fenced.is_none()
                && r.value.is_none()
        }) {
            self.rare = None;
        }
    }

    pub(super) fn expired_unrecorded(&self) -> Option<(Token, Instant)> {
        self.rare.as_ref().and_then(|r| r.expired_unrecorded)
    }

    /// The holder of the newest token: the live holding's, or the last
    /// one's after it ended.
    pub(super) fn last_holder(&self) -> Option<&HolderId> {
        match &self.holding {
            Some(h) => Some(&h.holder),
            None => self.last_holder.as_ref(),
        }
    }

    /// Ends the holding, keeping its holder as the last one. Its value
    /// goes with it.
    pub(super) fn end_holding(&mut self) {
        if let Some(h) = self.holding.take() {
            self.last_holder = Some(h.holder);
        }
        self.set_value(None);
    }

    /// The live holding's published value.
    pub(super) fn value(&self) -> Published {
        self.rare.as_ref().and_then(|r| r.value.clone())
    }

    /// Sets the published value; whether it changed.
    pub(super) fn set_value(&mut self, value: Published) -> bool {
        if self.rare.as_ref().and_then(|r| r.value.as_ref()) == value.as_ref() {
            return false;
        }
        self.rare().value = value;
        self.tidy();
        true
    }

    /// Lazy expiry: a lease whose deadline has passed is free. This is the
    /// only place expiry is decided, and every rule calls it first.
    pub(super) fn settle(&mut self, now: Instant, stats: &mut Stats, faults: Faults) {
        if let Some(h) = &self.holding {
            // How long a lease lasts is a rule ([`rules::lasts`]): the
            // broken rule "early-expiry" lets it run out at half its TTL.
            let ttl = h.ttl.get();
            let cut = ttl - rules::lasts(ttl, faults);
            let deadline = h.deadline();
            if deadline <= now || deadline - cut <= now {
                self.vacant_since = h.deadline;
                self.vacancy = Vacancy::Expired;
                let end = (self.token, deadline);
                self.rare().expired_unrecorded = Some(end);
                self.end_holding();
                stats.expiries += 1;
            }
        }
    }

    pub(super) fn record(&self, owners: &Owners) -> LeaseRecord {
        LeaseRecord {
            holder: self.holding.as_ref().map(|h| h.holder.clone()),
            token: self.token,
            ttl: self.stored_ttl.get(),
            owner: owners.name(self.owner),
            issued: self
                .holding
                .as_ref()
                .map_or_else(Issued::default, |h| h.issued),
            value: self.value(),
        }
    }

    /// Whether the job has issued its last token, so it can never be
    /// granted again.
    pub(super) fn exhausted(&self) -> bool {
        self.token == Token::LAST
    }

    /// Grants the free lease to `holder` with the next token. The caller
    /// checked that there is one ([`Job::exhausted`]). The history gains
    /// the end of an expired tenure not recorded yet, and the grant.
    #[allow(clippy::too_many_arguments)] // the grant's parts, its two clocks, and its outputs
    pub(super) fn grant(
        &mut self,
        holder: &HolderId,
        ttl: Duration,
        value: Published,
        preferred: bool,
        now: Instant,
        wall_unix_ms: u64,
        stats: &mut Stats,
        fx: &mut Effects,
    ) {
        debug_assert!(self.holding.is_none());
        if let Some((token, at)) = self
            .rare
            .as_deref_mut()
            .and_then(|r| r.expired_unrecorded.take())
        {
            self.tidy();
            let how = match &self.last_holder {
                Some(h) if h != holder => TenureEnd::TakenOver,
                _ => TenureEnd::Expired,
            };
            fx.history.push(HistoryEvent::Ended { token, how, at });
        }
        self.token = self.token.next().expect("checked: a next token exists");
        fx.history.push(HistoryEvent::Granted {
            token: self.token,
            holder: holder.clone(),
            ttl,
            value: value.clone(),
        });
        stats.grants += 1;
        if self.last_holder.as_ref().is_some_and(|h| h != holder) {
            stats.takeovers += 1;
        }
        self.last_holder = None; // the holding names it
        self.holding = Some(Holding {
            holder: holder.clone(),
            issued: Issued::new(wall_unix_ms, ttl),
            ttl: Span::of(ttl),
            deadline: Moment::of(now + ttl),
            told_again: false,
            handed_to: HandedTo::NONE,
            preferred,
        });
        self.stored_ttl = Span::of(ttl);
        self.set_value(value);
    }
}
