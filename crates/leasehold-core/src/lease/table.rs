//! The lease table: the single node's leases, tokens, waiters and fences,
//! as a pure state machine. Its decisions are the rule book's
//! ([`rules`]): who gets the lease next ([`rules::may_grant`]), whether a
//! write is admitted ([`rules::admit_write`]), the broken rules
//! ([`Faults`]); the etcd backend calls the same functions.
//!
//! Nothing here reads a clock, touches storage or awaits: every method takes
//! `now` and returns a decision plus [`Effects`] for the caller to carry out
//! (persist a record, wake a waiter, tell watchers). That keeps the rules
//! testable with a hand-driven clock and lets the same table sit behind any
//! storage.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lease::rules::{self, Faults, MayGrant};
use crate::lease::{HolderId, JobName, Token};

/// The durable part of a job's lease: what the store keeps.
///
/// Expiry instants are never stored: monotonic instants mean nothing after a
/// restart. A held record is restored as live for its full `ttl`, counted
/// from start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The holder, or `None` once released.
    pub holder: Option<HolderId>,
    /// The newest token issued for the job. Never goes down.
    pub token: Token,
    /// The TTL to restore a held lease with: the longest TTL granted or
    /// renewed since the record was last written.
    pub ttl: Duration,
}

/// Identifies one waiting `Acquire` in a job's first-come-first-served queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub u64);

/// Why a job has no leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vacancy {
    /// Never granted since this server started (or ever).
    Never,
    /// The holder released it.
    Released,
    /// The holder stopped renewing and the TTL ran out.
    Expired,
}

/// A snapshot of one job's lease at a given `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// The job.
    pub job: JobName,
    /// The newest token; `Token::NONE` if never granted.
    pub token: Token,
    /// The live holding, or why there is none.
    pub state: LeaseState,
}

/// Whether a job is led right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// Held and not expired.
    Held {
        /// Who holds it.
        holder: HolderId,
        /// The TTL of the last grant or renewal.
        ttl: Duration,
        /// When it expires, on the server's monotonic clock.
        deadline: Instant,
        /// Time left at the snapshot's `now`.
        remaining: Duration,
    },
    /// Nobody leads.
    Free(Vacancy),
}

impl LeaseView {
    /// The holder, if the lease is live.
    pub fn holder(&self) -> Option<&HolderId> {
        match &self.state {
            LeaseState::Held { holder, .. } => Some(holder),
            LeaseState::Free(_) => None,
        }
    }

    /// The expiry deadline, if the lease is live.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.state {
            LeaseState::Held { deadline, .. } => Some(*deadline),
            LeaseState::Free(_) => None,
        }
    }
}

/// What the caller must do after a decision.
#[derive(Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Effects {
    /// Write this record to the store and make it durable before replying.
    pub persist: Option<LeaseRecord>,
    /// Wake these waiters: each was granted the lease, or is now first in
    /// line, or first in line behind a deadline a renewal moved earlier,
    /// and must arm its timer on the lease's deadline.
    pub wake: Vec<WaiterId>,
    /// The holder or token changed: tell the job's watchers (after the
    /// change is durable).
    pub changed: bool,
    /// What the job's history of leaders gains: store it in the same
    /// durable change as `persist`, never apart from it.
    pub history: Vec<HistoryEvent>,
}

/// How a tenure (one token's time as leader) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenureEnd {
    /// Its holder released it.
    Released,
    /// It ran out, and was next granted to the same holder (a new token)
    /// or to nobody yet.
    Expired,
    /// It ran out, and another holder was granted the job.
    TakenOver,
    /// It ran out, and the job was then deleted.
    Deleted,
    /// `leasehold restore` released it (its end was not recorded before).
    Restored,
    /// `leasehold recover` released it (its end was not recorded before).
    Recovered,
}

/// A change to a job's history of leaders, for the caller to keep.
///
/// Instants are on the monotonic clock, as everywhere in the rules; the
/// caller turns them into wall-clock times for people to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryEvent {
    /// A new token was granted: a tenure begins.
    Granted {
        /// Its token.
        token: Token,
        /// Its holder.
        holder: HolderId,
        /// The TTL it was granted with.
        ttl: Duration,
    },
    /// The tenure of `token` ended, at `at`.
    Ended {
        /// The tenure's token.
        token: Token,
        /// How.
        how: TenureEnd,
        /// When: the release, or the deadline that passed.
        at: Instant,
    },
}

/// The answer to an `Acquire`.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The caller holds the lease.
    Granted(LeaseView),
    /// Not granted, and never will be: the job has issued its last token
    /// ([`Error::TokensExhausted`]).
    Exhausted(LeaseView),
    /// Not granted.
    Busy {
        /// The lease as it is.
        view: LeaseView,
        /// Whether the asking waiter is first in line. Only the first waiter
        /// needs a timer on the lease's deadline; the others are woken when
        /// they move up.
        first_in_line: bool,
    },
}

/// Counters kept by the rules, exported as metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Grants that issued a new token.
    pub grants: u64,
    /// Grants to a holder other than the previous one.
    pub takeovers: u64,
    /// Leases that ran out without being renewed or released.
    pub expiries: u64,
    /// Voluntary releases.
    pub releases: u64,
    /// Renewals that extended a lease (unary or on a stream).
    pub renewals: u64,
    /// Renewals refused with LEASE_LOST.
    pub renew_losses: u64,
    /// Fenced-store writes (and deletes) that passed the fence, unary or
    /// on a stream.
    pub writes: u64,
    /// `CheckedWrite`s refused with FENCED.
    pub fenced_writes: u64,
}

#[derive(Debug, Clone)]
struct Holding {
    holder: HolderId,
    ttl: Duration,
    deadline: Instant,
    /// Whether the holder asked again since the grant (a repeated
    /// `Acquire`, or a `Renew`): an answer telling it that it leads may
    /// have reached it, so [`LeaseTable::give_back`] leaves the grant be.
    told_again: bool,
    /// The waiter a release handed the lease to: its own call's completion
    /// is not the holder asking again.
    handed_to: Option<WaiterId>,
}

#[derive(Debug, Clone)]
struct Job {
    /// The newest token issued. Never goes down.
    token: Token,
    holding: Option<Holding>,
    /// The holder of the newest token once its holding has ended (released
    /// or expired), so that a late, repeated release is answered kindly and
    /// takeovers are counted. `None` while held: the holding names it
    /// ([`Job::last_holder`]), and a million held leases keep one copy of
    /// each holder, not two.
    last_holder: Option<HolderId>,
    /// The TTL in the stored record of the current holding.
    stored_ttl: Duration,
    /// Since when the job has had no leader, and why.
    vacant_since: Instant,
    vacancy: Vacancy,
    /// An opaque number the caller attaches to the job's last change (its
    /// durability sequence number).
    stamp: u64,
    /// What few jobs have: `None` when it is all empty. Boxed, so that a
    /// plain held lease does not carry its room (a `Job` is 168 bytes with
    /// it boxed, 240 without).
    rare: Option<Box<Rare>>,
}

/// The parts of a [`Job`] that most jobs do not use at any one time.
#[derive(Debug, Clone, Default)]
struct Rare {
    waiters: VecDeque<Waiter>,
    /// The token and deadline of a holding that ran out and whose end is
    /// not in the history yet: the next grant (or the job's deletion)
    /// records it, in its own durable change.
    expired_unrecorded: Option<(Token, Instant)>,
    /// Writes refused as fenced (stale tokens: split-brain attempts), and
    /// when the last one was.
    fenced: u64,
    last_fenced: Option<Instant>,
}

/// One job as an operator's page shows it ([`LeaseTable::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    /// The lease.
    pub view: LeaseView,
    /// How long it has had no leader; `None` while led.
    pub vacant_for: Option<Duration>,
    /// Acquires waiting for it.
    pub waiters: usize,
    /// Writes refused as fenced since the server started.
    pub fenced: u64,
    /// How long ago the last one was.
    pub fenced_ago: Option<Duration>,
}

impl Job {
    /// A job never seen before: its first grant gets `floor` + 1.
    fn new(now: Instant, floor: Token) -> Job {
        Job {
            token: floor,
            holding: None,
            last_holder: None,
            stored_ttl: Duration::ZERO,
            vacant_since: now,
            vacancy: Vacancy::Never,
            stamp: 0,
            rare: None,
        }
    }

    /// The rare parts, made when first needed.
    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Drops the rare parts once they are all empty again.
    fn tidy(&mut self) {
        if self.rare.as_deref().is_some_and(|r| {
            r.waiters.is_empty()
                && r.expired_unrecorded.is_none()
                && r.fenced == 0
                && r.last_fenced.is_none()
        }) {
            self.rare = None;
        }
    }

    /// The waiters, first in line first.
    fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.rare.iter().flat_map(|r| r.waiters.iter())
    }

    fn waiting(&self) -> usize {
        self.rare.as_ref().map_or(0, |r| r.waiters.len())
    }

    fn expired_unrecorded(&self) -> Option<(Token, Instant)> {
        self.rare.as_ref().and_then(|r| r.expired_unrecorded)
    }

    /// The holder of the newest token: the live holding's, or the last
    /// one's after it ended.
    fn last_holder(&self) -> Option<&HolderId> {
        match &self.holding {
            Some(h) => Some(&h.holder),
            None => self.last_holder.as_ref(),
        }
    }

    /// Ends the holding, keeping its holder as the last one.
    fn end_holding(&mut self) {
        if let Some(h) = self.holding.take() {
            self.last_holder = Some(h.holder);
        }
    }

    /// Lazy expiry: a lease whose deadline has passed is free. This is the
    /// only place expiry is decided, and every rule calls it first.
    fn settle(&mut self, now: Instant, stats: &mut Stats, faults: Faults) {
        if let Some(h) = &self.holding {
            // How long a lease lasts is a rule ([`rules::lasts`]): the
            // broken rule "early-expiry" lets it run out at half its TTL.
            let cut = h.ttl - rules::lasts(h.ttl, faults);
            if h.deadline <= now || h.deadline - cut <= now {
                self.vacant_since = h.deadline;
                self.vacancy = Vacancy::Expired;
                let end = (self.token, h.deadline);
                self.rare().expired_unrecorded = Some(end);
                self.end_holding();
                stats.expiries += 1;
            }
        }
    }

    fn leadership(&self, now: Instant) -> Leadership {
        match &self.holding {
            Some(h) if h.deadline > now => Leadership::Led { token: self.token },
            Some(h) => Leadership::Vacant {
                token: self.token,
                for_: now - h.deadline,
            },
            None => Leadership::Vacant {
                token: self.token,
                for_: now.saturating_duration_since(self.vacant_since),
            },
        }
    }

    fn view(&self, job: &JobName, now: Instant) -> LeaseView {
        let state = match &self.holding {
            Some(h) if h.deadline > now => LeaseState::Held {
                holder: h.holder.clone(),
                ttl: h.ttl,
                deadline: h.deadline,
                remaining: h.deadline - now,
            },
            Some(_) => LeaseState::Free(Vacancy::Expired),
            None => LeaseState::Free(self.vacancy),
        };
        LeaseView {
            job: job.clone(),
            token: self.token,
            state,
        }
    }

    fn record(&self) -> LeaseRecord {
        LeaseRecord {
            holder: self.holding.as_ref().map(|h| h.holder.clone()),
            token: self.token,
            ttl: self.stored_ttl,
        }
    }

    /// Whether the job has issued its last token, so it can never be
    /// granted again.
    fn exhausted(&self) -> bool {
        self.token == Token::LAST
    }

    /// Gives back most of the line's room once it has emptied out: a job
    /// ten thousand Acquires waited on would otherwise keep room for ten
    /// thousand for as long as it lives.
    fn shrink_line(&mut self) {
        if let Some(r) = self.rare.as_deref_mut() {
            let (len, cap) = (r.waiters.len(), r.waiters.capacity());
            if cap > 64 && len < cap / 4 {
                r.waiters.shrink_to(len * 2);
            }
        }
        self.tidy();
    }

    fn first_in_line(&self) -> Option<WaiterId> {
        self.waiters().next().map(|w| w.id)
    }

    /// Takes the first waiter out of line.
    fn pop_first(&mut self) -> Option<Waiter> {
        let w = self.rare.as_deref_mut()?.waiters.pop_front();
        self.shrink_line();
        w
    }

    /// Removes `id` from the queue; returns the waiter to wake if the front
    /// changed.
    fn leave_queue(&mut self, id: WaiterId) -> Option<WaiterId> {
        // Ids only grow and waiters only join at the back: the line is
        // sorted by id (ten thousand departures used to scan it each).
        let line = &mut self.rare.as_deref_mut()?.waiters;
        let pos = line.binary_search_by_key(&id, |w| w.id).ok()?;
        line.remove(pos);
        self.shrink_line();
        if pos == 0 {
            self.first_in_line()
        } else {
            None
        }
    }

    /// Grants the free lease to `holder` with the next token. The caller
    /// checked that there is one ([`Job::exhausted`]). The history gains
    /// the end of an expired tenure not recorded yet, and the grant.
    fn grant(
        &mut self,
        holder: &HolderId,
        ttl: Duration,
        now: Instant,
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
        });
        stats.grants += 1;
        if self.last_holder.as_ref().is_some_and(|h| h != holder) {
            stats.takeovers += 1;
        }
        self.last_holder = None; // the holding names it
        self.holding = Some(Holding {
            holder: holder.clone(),
            ttl,
            deadline: now + ttl,
            told_again: false,
            handed_to: None,
        });
        self.stored_ttl = ttl;
    }
}

/// A waiting `Acquire`, queued first come, first served.
#[derive(Debug, Clone)]
struct Waiter {
    id: WaiterId,
    holder: HolderId,
    ttl: Duration,
}

/// Every job's lease, the waiters queued on it, and the rules.
#[derive(Debug, Default)]
pub struct LeaseTable {
    jobs: BTreeMap<JobName, Job>,
    next_waiter: u64,
    stats: Stats,
    faults: Faults,
    /// Every grant's token is above these (see [`Floors`]).
    floors: Floors,
}

/// The tokens below which no grant goes, kept by the store.
///
/// Two floors, because they apply to different jobs:
/// - **`every`: every grant on every job is above it.** A data dir that was
///   recovered or restored from a backup raises it above every token that
///   may have been issued before (see `store::sled`): records may be
///   missing, so no job's own token can be trusted.
/// - **`new_jobs`: the first grant of a job the table does not know is
///   above it.** `DeleteJob` raises it to the deleted job's newest token,
///   so a job created again under the same name never repeats a token.
///   Jobs that exist keep their own counter: a deletion never moves them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Floors {
    /// Every job's grants are above it.
    pub every: Token,
    /// A new job's grants are above it (and above `every`).
    pub new_jobs: Token,
}

impl Floors {
    /// The floor of a job the table does not know yet.
    fn new_job(self) -> Token {
        self.every.max(self.new_jobs)
    }
}

impl LeaseTable {
    /// An empty table.
    pub fn new() -> LeaseTable {
        LeaseTable::default()
    }

    /// Rebuilds the table from stored records after a (re)start.
    ///
    /// **Every lease that was held is live again for its full TTL, counted
    /// from `now`**: the server cannot know how long it was down, so it
    /// extends and never shortens. Its holder can renew it with its token.
    ///
    /// **Every grant from now on gets a token above `floors.every`**, on
    /// every job, jobs never seen before included: a store recovered or
    /// restored from a backup raises it above every token that may have
    /// been issued before (see `store::sled`). A record below that floor
    /// predates it: its lease, if any, is not live again. **A job not in
    /// `records` starts above `floors.new_jobs` too** (see [`Floors`]).
    pub fn restore(
        records: impl IntoIterator<Item = (JobName, LeaseRecord)>,
        floors: Floors,
        now: Instant,
    ) -> Self {
        let mut table = LeaseTable {
            floors,
            ..LeaseTable::default()
        };
        let floor = floors.every;
        let records = records.into_iter();
        let mut jobs = Vec::with_capacity(records.size_hint().0);
        for (name, rec) in records {
            let mut job = Job::new(now, floor);
            let below = rec.token < floor;
            job.token = rec.token.max(floor);
            job.stored_ttl = rec.ttl;
            let (last, held) = match rec.holder {
                Some(h) if !below => (None, Some(h)),
                h => (h, None),
            };
            job.last_holder = last;
            job.holding = held.map(|holder| Holding {
                holder,
                ttl: rec.ttl,
                deadline: now + rec.ttl,
                // Nothing is given back across a restart.
                told_again: true,
                handed_to: None,
            });
            if job.holding.is_none() && rec.token != Token::NONE {
                job.vacancy = Vacancy::Released;
            }
            jobs.push((name, job));
        }
        // Built in one go from (mostly) sorted records: no search per
        // insert, and the tree's nodes full, where inserts one by one leave
        // them a third empty (a million held leases, start-up and RSS: 1.40
        // s and 681 MiB one by one, 1.35 s and 522 MiB in one go).
        table.jobs = BTreeMap::from_iter(jobs);
        table
    }

    /// Breaks rules on purpose; see [`Faults`]. (`ack_before_sync` is the
    /// caller's to carry out: the table makes nothing durable.)
    #[cfg(feature = "fault-injection")]
    pub fn break_rules(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// Replaces every job with the stored records, as [`LeaseTable::restore`]
    /// does, keeping the counters. Used after the store was reopened from
    /// stable storage: whatever was not durable is forgotten, held leases
    /// are live for a full TTL from `now`. Queued waiters are dropped; their
    /// callers must ask again.
    pub fn reload(
        &mut self,
        records: impl IntoIterator<Item = (JobName, LeaseRecord)>,
        floors: Floors,
        now: Instant,
    ) {
        let t = LeaseTable::restore(records, floors, now);
        self.jobs = t.jobs;
        self.floors = t.floors;
    }

    /// Saves one job's state, to undo a decision whose change could not be
    /// stored (the disk is full). Costs a copy of the job, so callers take
    /// one only when a store failure is likely.
    pub fn checkpoint(&self, name: &JobName) -> Checkpoint {
        Checkpoint {
            name: name.clone(),
            job: self.jobs.get(name).cloned(),
            stats: self.stats.clone(),
        }
    }

    /// Undoes everything since `c` was taken (for its job).
    pub fn rollback(&mut self, c: Checkpoint) {
        match c.job {
            Some(job) => self.jobs.insert(c.name, job),
            None => self.jobs.remove(&c.name),
        };
        self.stats = c.stats;
    }

    /// Asks for the lease on `job` for `holder`.
    ///
    /// Granted when the lease is free (or expired) and nobody is queued
    /// ahead of `waiter`, or when `holder` already holds it live. A grant to
    /// a free lease issues the next token; a live holder keeps its token and
    /// is extended. `waiter` is `Some` for a queued, waiting `Acquire`.
    pub fn acquire(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        ttl: Duration,
        now: Instant,
        waiter: Option<WaiterId>,
    ) -> (Acquire, Effects) {
        let stats = &mut self.stats;
        let faults = self.faults;
        let floor = self.floors.new_job();
        let job = self
            .jobs
            .entry(name.clone())
            .or_insert_with(|| Job::new(now, floor));
        job.settle(now, stats, faults);
        let mut fx = Effects::default();

        let live = job.holding.as_ref().map(|h| h.holder.as_str());
        match rules::may_grant(live, holder, job.exhausted(), job.first_in_line(), waiter) {
            MayGrant::Busy { first_in_line } => {
                return (
                    Acquire::Busy {
                        view: job.view(name, now),
                        first_in_line,
                    },
                    fx,
                )
            }
            // Free, but no token left: refused, whoever is in line.
            MayGrant::Exhausted => return (Acquire::Exhausted(job.view(name, now)), fx),
            MayGrant::Grant => {}
            MayGrant::Extend => {
                let h = job.holding.as_mut().expect("may_grant: the asker holds it");
                // The live holder asks again: extend, same token.
                h.ttl = ttl;
                h.deadline = now + ttl;
                if waiter.is_none() || waiter != h.handed_to.take() {
                    h.told_again = true;
                }
                if ttl > job.stored_ttl {
                    job.stored_ttl = ttl;
                    fx.persist = Some(job.record());
                }
                if let Some(id) = waiter {
                    fx.wake.extend(job.leave_queue(id));
                }
                return (Acquire::Granted(job.view(name, now)), fx);
            }
        }

        // Free, and our turn: nobody queued ahead of us.
        if waiter.is_some() {
            job.pop_first();
            fx.wake.extend(job.first_in_line());
        }
        job.grant(holder, ttl, now, stats, &mut fx);
        fx.persist = Some(job.record());
        fx.changed = true;
        (Acquire::Granted(job.view(name, now)), fx)
    }

    /// Extends a live lease held by `holder` with `token` by `ttl` from
    /// `now`. The token never changes on a renewal. A renewal that moves
    /// the deadline earlier (a shorter TTL) wakes the first waiter in line,
    /// whose timer sleeps until the old one.
    ///
    /// A renewal is persisted only when it raises the TTL above the stored
    /// one: a restart restores the stored TTL from start-up, which is never
    /// shorter than what the holder was promised.
    pub fn renew(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
        now: Instant,
    ) -> Result<(LeaseView, Effects)> {
        let stats = &mut self.stats;
        let faults = self.faults;
        let Some(job) = self.jobs.get_mut(name) else {
            stats.renew_losses += 1;
            return Err(rules::unknown_or_lost(name, None, Token::NONE, token));
        };
        job.settle(now, stats, faults);
        match &mut job.holding {
            Some(h) if &h.holder == holder && job.token == token => {
                // A shorter TTL may move the deadline earlier: the first
                // waiter in line sleeps until the deadline it read, and
                // must arm its timer again on the new one.
                let sooner = now + ttl < h.deadline;
                h.ttl = ttl;
                h.deadline = now + ttl;
                h.told_again = true;
                let mut fx = Effects::default();
                if sooner {
                    fx.wake.extend(job.first_in_line());
                }
                if ttl > job.stored_ttl {
                    job.stored_ttl = ttl;
                    fx.persist = Some(job.record());
                }
                let answered = rules::renewed_token(job.token, faults);
                if answered != job.token {
                    // The broken rule "renew-bumps-token".
                    job.token = answered;
                    fx.persist = Some(job.record());
                }
                stats.renewals += 1;
                Ok((job.view(name, now), fx))
            }
            h => {
                let current_holder = h.as_ref().map(|h| h.holder.to_string());
                stats.renew_losses += 1;
                Err(rules::unknown_or_lost(
                    name,
                    current_holder,
                    job.token,
                    token,
                ))
            }
        }
    }

    /// Steps `holder` down. The lease is free at once; if an `Acquire` is
    /// waiting, the first in line is granted in the same step (the next
    /// token) and woken. Releasing a lease this holder and token already gave up
    /// (released or expired) succeeds and changes nothing.
    pub fn release(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        token: Token,
        now: Instant,
    ) -> Result<Effects> {
        let stats = &mut self.stats;
        let faults = self.faults;
        let Some(job) = self.jobs.get_mut(name) else {
            return Err(rules::unknown_or_lost(name, None, Token::NONE, token));
        };
        job.settle(now, stats, faults);
        let mut fx = Effects::default();
        match &job.holding {
            Some(h) if &h.holder == holder && job.token == token => {
                job.end_holding();
                job.vacancy = Vacancy::Released;
                job.vacant_since = now;
                stats.releases += 1;
                fx.history.push(HistoryEvent::Ended {
                    token,
                    how: TenureEnd::Released,
                    at: now,
                });
                // Hand over at once: the first waiter is granted in this
                // same decision, so one durable write covers both the
                // release and the grant, and the waiter only has to wake.
                if job.exhausted() {
                    // Nobody can be granted: wake the line to be told so.
                    fx.wake.extend(job.waiters().map(|w| w.id));
                } else if let Some(w) = job.pop_first() {
                    job.grant(&w.holder, w.ttl, now, stats, &mut fx);
                    if let Some(h) = &mut job.holding {
                        h.handed_to = Some(w.id);
                    }
                    fx.wake.push(w.id);
                    fx.wake.extend(job.first_in_line());
                }
                fx.persist = Some(job.record());
                fx.changed = true;
                Ok(fx)
            }
            None if rules::released_already(
                false,
                job.token,
                job.last_holder().map(|h| h.as_str()),
                holder,
                token,
            ) =>
            {
                Ok(fx)
            }
            h => Err(rules::unknown_or_lost(
                name,
                h.as_ref().map(|h| h.holder.to_string()),
                job.token,
                token,
            )),
        }
    }

    /// Gives back the grant of `token` to `holder` whose caller was never
    /// told of it (its call was cancelled, or its reply was not delivered):
    /// releases it as [`LeaseTable::release`] does, hand-over included,
    /// but only while it is still that grant and **its holder has not
    /// asked again since** (a repeated `Acquire` or a `Renew`). An answer
    /// to that later call may have told the holder that it leads, and then
    /// only its own release or the TTL may end the lease: a give-back
    /// racing with the holder's retry must never take over early.
    /// Changes nothing otherwise; `Effects::changed` says whether it
    /// released.
    pub fn give_back(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        token: Token,
        now: Instant,
    ) -> Effects {
        let untold = self.jobs.get(name).is_some_and(|job| {
            job.token == token
                && job
                    .holding
                    .as_ref()
                    .is_some_and(|h| &h.holder == holder && !h.told_again)
        });
        match untold {
            true => self.release(name, holder, token, now).unwrap_or_default(),
            false => Effects::default(),
        }
    }

    /// The fence: may a writer with `token` write a key whose highest token
    /// so far is `key_token`?
    ///
    /// Only if `token` is the job's newest token, its lease is live now, and
    /// no higher token has written the key. Checking against the job's
    /// newest token, not only the key's, is what rejects a paused leader
    /// that wakes up after a takeover even before the new leader has
    /// written anything.
    pub fn check_write(
        &mut self,
        name: &JobName,
        token: Token,
        key_token: Option<Token>,
        now: Instant,
    ) -> Result<()> {
        self.admit_write(name, token, key_token, None, now)
    }

    /// [`LeaseTable::check_write`] for a caller with a holder guard: the
    /// write is admitted by [`rules::admit_write`], the guard first (a
    /// write with the live grant's token is refused when `guard` refuses
    /// that grant's holder), then the fence.
    pub fn admit_write(
        &mut self,
        name: &JobName,
        token: Token,
        key_token: Option<Token>,
        guard: Option<&dyn Fn(&str) -> bool>,
        now: Instant,
    ) -> Result<()> {
        let stats = &mut self.stats;
        let faults = self.faults;
        let job = self.jobs.get_mut(name);
        let (current, live) = match job {
            Some(job) => {
                job.settle(now, stats, faults);
                let live = job.holding.as_ref().map(|h| (job.token, h.holder.as_str()));
                (job.token, live)
            }
            None => (Token::NONE, None),
        };
        let r = rules::admit_write(token, current, live, key_token, guard, faults)
            .map_err(|why| why.error(name, token, current));
        match &r {
            Ok(()) => stats.writes += 1,
            Err(Error::Fenced { .. }) => {
                stats.fenced_writes += 1;
                if let Some(job) = self.jobs.get_mut(name) {
                    let r = job.rare();
                    r.fenced += 1;
                    r.last_fenced = Some(now);
                }
            }
            Err(_) => {}
        }
        r
    }

    /// Up to `limit` jobs starting with `prefix` (after `after`), in name
    /// order, as an operator's page shows them.
    pub fn status(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Instant,
    ) -> Vec<JobStatus> {
        self.listed(prefix, after, limit)
            .map(|(name, job)| JobStatus {
                view: job.view(name, now),
                vacant_for: match job.leadership(now) {
                    Leadership::Led { .. } => None,
                    Leadership::Vacant { for_, .. } => Some(for_),
                },
                waiters: job.waiting(),
                fenced: job.rare.as_ref().map_or(0, |r| r.fenced),
                fenced_ago: job
                    .rare
                    .as_ref()
                    .and_then(|r| r.last_fenced)
                    .map(|t| now.saturating_duration_since(t)),
            })
            .collect()
    }

    /// The lease of `job` at `now`; a job never seen has token 0 and no
    /// holder.
    pub fn view(&self, name: &JobName, now: Instant) -> LeaseView {
        match self.jobs.get(name) {
            Some(job) => job.view(name, now),
            None => LeaseView {
                job: name.clone(),
                token: Token::NONE,
                state: LeaseState::Free(Vacancy::Never),
            },
        }
    }

    /// Up to `limit` leases whose job starts with `prefix`, after job
    /// `after`, in name order.
    pub fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Instant,
    ) -> Vec<LeaseView> {
        self.listed(prefix, after, limit)
            .map(|(name, job)| job.view(name, now))
            .collect()
    }

    /// Up to `limit` jobs starting with `prefix`, after job `after`, in
    /// name order.
    fn listed<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> impl Iterator<Item = (&'a JobName, &'a Job)> + 'a {
        let start = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Included(prefix),
        };
        self.jobs
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(move |(name, _)| name.as_str().starts_with(prefix))
            .take(limit)
    }

    /// Queues a waiting `Acquire` by `holder` for `ttl` on `job`, last in
    /// line.
    pub fn enqueue(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        ttl: Duration,
        now: Instant,
    ) -> WaiterId {
        self.next_waiter += 1;
        let id = WaiterId(self.next_waiter);
        let floor = self.floors.new_job();
        self.jobs
            .entry(name.clone())
            .or_insert_with(|| Job::new(now, floor))
            .rare()
            .waiters
            .push_back(Waiter {
                id,
                holder: holder.clone(),
                ttl,
            });
        id
    }

    /// Takes a waiter out of line (it gave up or was cancelled). Wakes the
    /// new first in line, so that it arms its timer.
    pub fn dequeue(&mut self, name: &JobName, id: WaiterId) -> Effects {
        let wake = self.jobs.get_mut(name).and_then(|j| j.leave_queue(id));
        Effects {
            wake: wake.into_iter().collect(),
            ..Effects::default()
        }
    }

    /// Attaches an opaque stamp to the job's latest change.
    pub fn set_stamp(&mut self, name: &JobName, stamp: u64) {
        if let Some(job) = self.jobs.get_mut(name) {
            job.stamp = stamp;
        }
    }

    /// The stamp of the job's latest change; 0 if none.
    pub fn stamp(&self, name: &JobName) -> u64 {
        self.jobs.get(name).map_or(0, |j| j.stamp)
    }

    /// Applies lazy expiry to every job at `now`, so that the expiry
    /// counter is current when metrics are read. Nothing depends on it for
    /// correctness.
    pub fn settle_all(&mut self, now: Instant) {
        for job in self.jobs.values_mut() {
            job.settle(now, &mut self.stats, self.faults);
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Every job with its live holding at `now` and, when it has none, how
    /// long it has been without a leader.
    pub fn leadership(&self, now: Instant) -> impl Iterator<Item = (&JobName, Leadership)> + '_ {
        self.jobs
            .iter()
            .map(move |(name, job)| (name, job.leadership(now)))
    }

    /// [`LeaseTable::settle_all`] and then [`LeaseTable::leadership`], in
    /// one pass over the jobs: what a metrics scrape needs, walking a
    /// million jobs once instead of twice while the caller holds its lock.
    pub fn settle_leadership(
        &mut self,
        now: Instant,
    ) -> impl Iterator<Item = (&JobName, Leadership)> + '_ {
        self.settle_leadership_after(None, now)
    }

    /// [`LeaseTable::settle_leadership`], of the jobs after `after` in name
    /// order only: a caller can walk the table in chunks.
    pub fn settle_leadership_after(
        &mut self,
        after: Option<&JobName>,
        now: Instant,
    ) -> impl Iterator<Item = (&JobName, Leadership)> + '_ {
        let (stats, faults) = (&mut self.stats, self.faults);
        let start = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        self.jobs
            .range_mut::<JobName, _>((start, Bound::Unbounded))
            .map(move |(name, job)| {
                job.settle(now, stats, faults);
                (name, job.leadership(now))
            })
    }

    /// Forgets a job that has no live lease and nobody waiting for it, and
    /// raises the new-job floor to its newest token, so that the job, if
    /// created again, never repeats a token ([`Floors`]). Returns the
    /// deleted job's newest token, `None` when the table did not know it
    /// (nothing to do). The caller must make the new floor durable, in the
    /// same change as the deletion.
    pub fn delete(&mut self, name: &JobName, now: Instant) -> Result<Option<Token>> {
        let Some(job) = self.jobs.get_mut(name) else {
            return Ok(None);
        };
        job.settle(now, &mut self.stats, self.faults);
        if let Some(h) = &job.holding {
            return Err(Error::JobInUse {
                job: name.to_string(),
                why: format!(
                    "its lease is held by {:?} with token {}",
                    h.holder.as_str(),
                    job.token
                ),
            });
        }
        if job.waiting() > 0 {
            return Err(Error::JobInUse {
                job: name.to_string(),
                why: format!("{} Acquire(s) wait for it", job.waiting()),
            });
        }
        let token = job.token;
        self.jobs.remove(name);
        self.floors.new_jobs = self.floors.new_jobs.max(token);
        Ok(Some(token))
    }

    /// The end of `job`'s last tenure if it ran out and the history has
    /// not recorded that yet (nobody was granted the job since): its token
    /// and its deadline. A reader of the history shows it as ended; a
    /// deletion records it ([`TenureEnd::Deleted`]).
    pub fn unrecorded_end(&self, name: &JobName, now: Instant) -> Option<(Token, Instant)> {
        let job = self.jobs.get(name)?;
        match &job.holding {
            Some(h) if h.deadline <= now => Some((job.token, h.deadline)),
            Some(_) => None,
            None => job.expired_unrecorded(),
        }
    }

    /// The floors in force ([`Floors`]).
    pub fn floors(&self) -> Floors {
        self.floors
    }

    /// Whether the table knows `name` (it was granted, or is waited for).
    pub fn contains(&self, name: &JobName) -> bool {
        self.jobs.contains_key(name)
    }

    /// The number of jobs known.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether no job is known.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// One job's saved state; see [`LeaseTable::checkpoint`].
#[derive(Debug)]
pub struct Checkpoint {
    name: JobName,
    job: Option<Job>,
    stats: Stats,
}

/// A job's leadership, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// A live leader holds `token`.
    Led {
        /// Its token.
        token: Token,
    },
    /// No leader for `for_`.
    Vacant {
        /// The newest token.
        token: Token,
        /// How long the job has been without a leader.
        for_: Duration,
    },
}

#[cfg(test)]
mod tests;
