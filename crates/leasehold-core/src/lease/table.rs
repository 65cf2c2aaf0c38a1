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
//!
//! This file holds the table and its decisions (restore, acquire, renew,
//! release, give back, the fence, delete) with the vocabulary they answer
//! in. The rest is split by what it is about:
//!
//! - `job.rs`: one job's state, lazy expiry ([`Job::settle`], the only
//!   place expiry is decided) and the grant;
//! - `line.rs`: the waiter line, first come first served;
//! - `views.rs`: the snapshots callers read ([`LeaseView`], [`JobStatus`],
//!   [`Leadership`]) and the listings and sweeps that make them.

mod holders;
mod job;
mod jobs;
mod line;
mod owners;
mod views;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lease::rules::{self, Faults, MayGrant};
use crate::lease::{HolderId, JobName, Published, Token};
use holders::Holders;
use job::{HandedTo, Holding, Job, Moment, Span};
use jobs::Jobs;
use owners::Owners;
pub use views::{JobStatus, Leadership, LeaseState, LeaseView, Vacancy};

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
    /// The principal that created the job (the one its first holder was
    /// bound to, [`HolderId::principal`]), whose `max_jobs` it counts
    /// against until it is deleted; `None` on a server without a policy.
    pub owner: Option<Arc<str>>,
    /// When the held token was granted, and with which TTL: what its proof
    /// states. Zero when released, and in records written before it was
    /// kept.
    pub issued: Issued,
    /// The held lease's published value (`Lease.value`); `None` when
    /// released, and when it has none.
    pub value: Published,
}

/// When a token was granted (wall clock) and the TTL it was granted with:
/// the grant's own facts, which its signed proof states and which a
/// renewal does not change. Kept with the lease on both backends, so that
/// every answer about one grant, before and after a restart, carries the
/// same proof. For people and signatures only: no rule reads it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Issued {
    /// Milliseconds since the Unix epoch; 0 when unknown.
    pub at_unix_ms: u64,
    /// The TTL at grant, in milliseconds.
    pub ttl_ms: u64,
}

impl Issued {
    /// A grant at `at_unix_ms` with `ttl`.
    pub fn new(at_unix_ms: u64, ttl: Duration) -> Issued {
        Issued {
            at_unix_ms,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// Identifies one waiting `Acquire` in a job's first-come-first-served queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub u64);

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
    /// It ran out, and the job was then deleted: written by older
    /// servers only (DeleteJob now removes the history), still read.
    Deleted,
    /// `leasehold restore` released it (its end was not recorded before).
    Restored,
    /// `leasehold recover` released it (its end was not recorded before).
    Recovered,
    /// It was bound to its holder's connection, and the client's end of
    /// that connection closed or reset (its process is gone).
    ConnectionClosed,
    /// Its holder handed it to a waiting successor (`TransferLease`).
    Transferred,
    /// The chaos API ended it on purpose (`Chaos.Expire`).
    Chaos,
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
        /// The value it was granted with.
        value: Published,
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
    /// Voluntary releases, and bound leases released as their
    /// connections closed.
    pub releases: u64,
    /// Leases handed to a waiting successor (`TransferLease`).
    pub transfers: u64,
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

/// Every job's lease, the waiters queued on it, and the rules.
#[derive(Debug, Default)]
pub struct LeaseTable {
    jobs: Jobs,
    next_waiter: u64,
    stats: Stats,
    faults: Faults,
    /// Every grant's token is above these (see [`Floors`]).
    floors: Floors,
    /// Each job's owner, and how many jobs each principal owns.
    owners: Owners,
    /// One copy of each holder's name, shared by its holdings.
    holders: Holders,
    /// The wall clock of the decision being taken, in milliseconds since
    /// the Unix epoch, as the caller set it ([`LeaseTable::set_wall_clock`]):
    /// grants record it in their [`Issued`].
    wall_unix_ms: u64,
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

    /// Sets the wall clock of the decisions that follow, in milliseconds
    /// since the Unix epoch: grants record it as when their token was
    /// issued ([`Issued`]). The table reads no clock; the caller sets this
    /// before each decision, as it passes `now`.
    pub fn set_wall_clock(&mut self, unix_ms: u64) {
        self.wall_unix_ms = unix_ms;
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
            job.owner = table.owners.add(rec.owner.as_deref());
            let below = rec.token < floor;
            job.token = rec.token.max(floor);
            job.stored_ttl = Span::of(rec.ttl);
            let (last, held) = match rec.holder {
                Some(h) if !below => (None, Some(h)),
                h => (h, None),
            };
            job.last_holder = last;
            job.holding = held.map(|holder| Holding {
                holder: table.holders.intern(&holder),
                issued: rec.issued,
                ttl: Span::of(rec.ttl),
                deadline: Moment::of(now + rec.ttl),
                // Nothing is given back across a restart.
                told_again: true,
                handed_to: HandedTo::NONE,
                // Not stored: a restored lease is nobody's preferred one.
                preferred: false,
            });
            if job.holding.is_some() {
                job.set_value(rec.value);
            }
            if job.holding.is_none() && rec.token != Token::NONE {
                job.vacancy = Vacancy::Released;
            }
            jobs.push((name, job));
        }
        // From (mostly) sorted records: the ordered index is built in one
        // go, its nodes full, and the hash table in order of position (see
        // `Jobs::from_sorted`).
        table.jobs = Jobs::from_sorted(jobs);
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
        self.owners = t.owners;
        self.holders = t.holders;
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
            Some(job) => {
                self.jobs.insert(c.name, job);
            }
            // A job the decision created is forgotten with its owner's
            // count (a job that was there keeps its owner: no decision
            // changes it).
            None => {
                if let Some(created) = self.jobs.remove(&c.name) {
                    self.owners.remove(created.owner);
                }
            }
        }
        self.stats = c.stats;
    }

    /// Asks for the lease on `job` for `holder`.
    ///
    /// Granted when the lease is free (or expired) and nobody is queued
    /// ahead of `waiter`, or when `holder` already holds it live. A grant to
    /// a free lease issues the next token; a live holder keeps its token and
    /// is extended. `waiter` is `Some` for a queued, waiting `Acquire`;
    /// `preferred` says whether the Acquire asks as a preferred candidate
    /// (a queued one was queued as such).
    pub fn acquire(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        ttl: Duration,
        now: Instant,
        waiter: Option<WaiterId>,
        preferred: bool,
    ) -> (Acquire, Effects) {
        self.acquire_with_value(name, holder, ttl, now, waiter, preferred, None)
    }

    /// [`LeaseTable::acquire`] by an `Acquire` that publishes `value`
    /// (`AcquireRequest.value`): with a grant, or replacing the live
    /// holder's own when it asks again (a change is persisted and
    /// watchers are told).
    #[allow(clippy::too_many_arguments)] // acquire's, and the value
    pub fn acquire_with_value(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        ttl: Duration,
        now: Instant,
        waiter: Option<WaiterId>,
        preferred: bool,
        value: Published,
    ) -> (Acquire, Effects) {
        let wall = self.wall_unix_ms;
        let stats = &mut self.stats;
        let faults = self.faults;
        let floor = self.floors.new_job();
        let owners = &mut self.owners;
        let job = self.jobs.get_or_insert_with(name, || {
            let mut job = Job::new(now, floor);
            job.owner = owners.add(holder.principal());
            job
        });
        let owners = &self.owners;
        let holders = &mut self.holders;
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
                h.ttl = Span::of(ttl);
                h.set_deadline(now + ttl);
                if waiter.is_none() || waiter != h.handed_to.take() {
                    h.told_again = true;
                }
                if Span::of(ttl) > job.stored_ttl {
                    job.stored_ttl = Span::of(ttl);
                    fx.persist = Some(job.record(owners));
                }
                if job.set_value(value) {
                    fx.persist = Some(job.record(owners));
                    fx.changed = true;
                }
                if let Some(id) = waiter {
                    fx.wake.extend(job.leave_queue(id));
                }
                return (Acquire::Granted(job.view(name, now)), fx);
            }
        }

        // Free, and our turn: nobody queued ahead of us.
        let mut preferred = preferred;
        if waiter.is_some() {
            preferred = job.pop_first().is_some_and(|w| w.preferred);
            fx.wake.extend(job.first_in_line());
        }
        job.grant(
            &holders.intern(holder),
            ttl,
            value,
            preferred,
            now,
            wall,
            stats,
            &mut fx,
        );
        fx.persist = Some(job.record(owners));
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
        self.renew_with_value(name, holder, token, ttl, now, None)
    }

    /// [`LeaseTable::renew`] that also replaces the lease's published
    /// value when `value` is `Some` (`RenewRequest.value`); a change is
    /// persisted and watchers are told.
    pub fn renew_with_value(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
        now: Instant,
        value: Option<Published>,
    ) -> Result<(LeaseView, Effects)> {
        let stats = &mut self.stats;
        let faults = self.faults;
        let owners = &self.owners;
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
                let sooner = now + ttl < h.deadline();
                h.ttl = Span::of(ttl);
                h.set_deadline(now + ttl);
                h.told_again = true;
                let mut fx = Effects::default();
                if sooner {
                    fx.wake.extend(job.first_in_line());
                }
                if Span::of(ttl) > job.stored_ttl {
                    job.stored_ttl = Span::of(ttl);
                    fx.persist = Some(job.record(owners));
                }
                if let Some(value) = value {
                    if job.set_value(value) {
                        fx.persist = Some(job.record(owners));
                        fx.changed = true;
                    }
                }
                let answered = rules::renewed_token(job.token, faults);
                if answered != job.token {
                    // The broken rule "renew-bumps-token".
                    job.token = answered;
                    fx.persist = Some(job.record(owners));
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
        self.release_as(name, holder, token, now, TenureEnd::Released)
    }

    /// [`LeaseTable::release`], with the tenure's end recorded as `how`
    /// (a release, or a bound lease whose connection closed).
    pub fn release_as(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        token: Token,
        now: Instant,
        how: TenureEnd,
    ) -> Result<Effects> {
        let wall = self.wall_unix_ms;
        let stats = &mut self.stats;
        let faults = self.faults;
        let owners = &self.owners;
        let holders = &mut self.holders;
        let Some(job) = self.jobs.get_mut(name) else {
            return Err(rules::unknown_or_lost(name, None, Token::NONE, token));
        };
        job.settle(now, stats, faults);
        let mut fx = Effects::default();
        match &job.holding {
            Some(h) if &h.holder == holder && job.token == token => {
                job.end_holding();
                job.vacancy = Vacancy::Released;
                job.vacant_from(now);
                stats.releases += 1;
                fx.history.push(HistoryEvent::Ended {
                    token,
                    how,
                    at: now,
                });
                // Hand over at once: the first waiter is granted in this
                // same decision, so one durable write covers both the
                // release and the grant, and the waiter only has to wake.
                if job.exhausted() {
                    // Nobody can be granted: wake the line to be told so.
                    fx.wake.extend(job.waiters().map(|w| w.id));
                } else if let Some(w) = job.pop_first() {
                    let ttl = w.ttl;
                    job.grant(
                        &holders.intern(&w.holder),
                        ttl,
                        w.value,
                        w.preferred,
                        now,
                        wall,
                        stats,
                        &mut fx,
                    );
                    if let Some(h) = &mut job.holding {
                        h.handed_to = HandedTo::to(w.id);
                    }
                    fx.wake.push(w.id);
                    fx.wake.extend(job.first_in_line());
                }
                fx.persist = Some(job.record(owners));
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

    /// Hands the live lease of `holder` with `token` to a waiting
    /// `Acquire`: the first in line whose holder is `to` (as its client
    /// named it), or the first in line. **The successor is granted the
    /// next token in the same decision as the tenure's end, so the job is
    /// never free in between**, for `ttl` (the holding's own when `None`),
    /// and is woken; its call then completes as a live holder's Acquire
    /// does. Fails with [`Error::LeaseLost`] (or `UnknownToken`) as
    /// [`LeaseTable::renew`] would, and with [`Error::NoSuccessor`] when
    /// nobody (or not `to`) waits; nothing changes then.
    pub fn transfer(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        token: Token,
        to: Option<&str>,
        ttl: Option<Duration>,
        now: Instant,
    ) -> Result<(LeaseView, Effects)> {
        let wall = self.wall_unix_ms;
        let stats = &mut self.stats;
        let faults = self.faults;
        let owners = &self.owners;
        let holders = &mut self.holders;
        let Some(job) = self.jobs.get_mut(name) else {
            return Err(rules::unknown_or_lost(name, None, Token::NONE, token));
        };
        job.settle(now, stats, faults);
        let held_ttl = match &job.holding {
            Some(h) if &h.holder == holder && job.token == token => h.ttl.get(),
            h => {
                return Err(rules::unknown_or_lost(
                    name,
                    h.as_ref().map(|h| h.holder.to_string()),
                    job.token,
                    token,
                ))
            }
        };
        if job.exhausted() {
            return Err(Error::TokensExhausted {
                job: name.to_string(),
            });
        }
        // The holder's own waiting Acquire (another call of the same
        // elector) is no successor: it would be granted what it holds.
        let Some(pos) = job
            .waiters()
            .position(|w| &w.holder != holder && to.is_none_or(|t| w.holder.unbound() == t))
        else {
            return Err(Error::NoSuccessor {
                job: name.to_string(),
                to: to.map(str::to_owned),
            });
        };
        let w = job.take_waiter(pos);
        let mut fx = Effects::default();
        job.end_holding();
        stats.transfers += 1;
        fx.history.push(HistoryEvent::Ended {
            token,
            how: TenureEnd::Transferred,
            at: now,
        });
        job.grant(
            &holders.intern(&w.holder),
            ttl.unwrap_or(held_ttl),
            w.value,
            w.preferred,
            now,
            wall,
            stats,
            &mut fx,
        );
        if let Some(h) = &mut job.holding {
            h.handed_to = HandedTo::to(w.id);
        }
        fx.wake.push(w.id);
        if pos == 0 {
            fx.wake.extend(job.first_in_line());
        }
        fx.persist = Some(job.record(owners));
        fx.changed = true;
        Ok((job.view(name, now), fx))
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
        let owner = job.owner;
        self.jobs.remove(name);
        self.owners.remove(owner);
        self.floors.new_jobs = self.floors.new_jobs.max(token);
        Ok(Some(token))
    }

    /// The end of `job`'s last tenure if it ran out and the history has
    /// not recorded that yet (nobody was granted the job since): its token
    /// and its deadline. A reader of the history shows it as ended.
    pub fn unrecorded_end(&self, name: &JobName, now: Instant) -> Option<(Token, Instant)> {
        let job = self.jobs.get(name)?;
        match &job.holding {
            Some(h) if h.deadline() <= now => Some((job.token, h.deadline())),
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

    /// The number of jobs `principal` created that are not deleted: what
    /// its `max_jobs` counts ([`rules::admit_new_job`]).
    pub fn owned_by(&self, principal: &str) -> usize {
        self.owners.owned(principal)
    }
}

/// One job's saved state; see [`LeaseTable::checkpoint`].
#[derive(Debug)]
pub struct Checkpoint {
    name: JobName,
    job: Option<Job>,
    stats: Stats,
}

#[cfg(test)]
mod tests;
