//! What callers read of the lease table: a lease at a given `now`
//! ([`LeaseView`]), a job as an operator's page shows it ([`JobStatus`]),
//! each job's leadership for metrics ([`Leadership`]), the listings in
//! name order, and the sweeps that settle expiry for a metrics scrape.
//!
//! Apart from the decisions because nothing here changes a lease: a sweep
//! only applies the lazy expiry that any decision would.

use std::ops::Bound;
use std::time::{Duration, Instant};

use super::job::Job;
use super::{Issued, LeaseTable, Stats};
use crate::lease::{HolderId, JobName, Published, Token};

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
        /// When its token was granted, and with which TTL.
        issued: Issued,
        /// The TTL of the last grant or renewal.
        ttl: Duration,
        /// When it expires, on the server's monotonic clock.
        deadline: Instant,
        /// Time left at the snapshot's `now`.
        remaining: Duration,
        /// The value its holder published (`Lease.value`).
        value: Published,
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

    /// The published value of the live holding.
    pub fn value(&self) -> Option<&[u8]> {
        match &self.state {
            LeaseState::Held { value, .. } => value.as_deref(),
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

impl Job {
    fn leadership(&self, now: Instant) -> Leadership {
        match &self.holding {
            Some(h) if h.deadline() > now => Leadership::Led { token: self.token },
            Some(h) => Leadership::Vacant {
                token: self.token,
                for_: now - h.deadline(),
            },
            None => Leadership::Vacant {
                token: self.token,
                for_: now.saturating_duration_since(self.vacant_since()),
            },
        }
    }

    pub(super) fn view(&self, job: &JobName, now: Instant) -> LeaseView {
        let state = match &self.holding {
            Some(h) if h.deadline() > now => LeaseState::Held {
                holder: h.holder.clone(),
                issued: h.issued,
                ttl: h.ttl.get(),
                deadline: h.deadline(),
                remaining: h.deadline() - now,
                value: self.value(),
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
}

impl LeaseTable {
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
            .range(start)
            .take_while(move |(name, _)| name.as_str().starts_with(prefix))
            .take(limit)
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
        self.jobs.map_after(after, move |job| {
            job.settle(now, stats, faults);
            job.leadership(now)
        })
    }
}
