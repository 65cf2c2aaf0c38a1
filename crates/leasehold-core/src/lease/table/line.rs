//! The waiter line: the `Acquire`s waiting for a job, first come first
//! served within each class: **preferred candidates ahead of the others**
//! (`AcquireRequest.preferred`). Each class is sorted by id (ids only
//! grow, waiters join at the back of their class), and the line gives
//! back its room once it empties out.
//!
//! Apart from the table's decisions, which only ask who is first, take
//! the first out, or let one leave.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::job::Job;
use super::{Effects, LeaseTable, WaiterId};
use crate::lease::{HolderId, JobName, Published};

/// A waiting `Acquire`, queued first come, first served in its class.
#[derive(Debug, Clone)]
pub(super) struct Waiter {
    pub(super) id: WaiterId,
    pub(super) holder: HolderId,
    pub(super) ttl: Duration,
    /// A preferred candidate: queued ahead of the others.
    pub(super) preferred: bool,
    /// The value its Acquire publishes with the grant.
    pub(super) value: Published,
}

impl Job {
    /// The waiters, first in line first: the preferred, then the others.
    pub(super) fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.rare
            .iter()
            .flat_map(|r| r.preferred.iter().chain(r.waiters.iter()))
    }

    pub(super) fn waiting(&self) -> usize {
        self.rare
            .as_ref()
            .map_or(0, |r| r.preferred.len() + r.waiters.len())
    }

    /// Whether a preferred candidate waits.
    pub(super) fn preferred_waiting(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| !r.preferred.is_empty())
    }

    /// Gives back most of the line's room once it has emptied out: a job
    /// ten thousand Acquires waited on would otherwise keep room for ten
    /// thousand for as long as it lives.
    fn shrink_line(&mut self) {
        if let Some(r) = self.rare.as_deref_mut() {
            shrink(&mut r.waiters);
            shrink(&mut r.preferred);
        }
        self.tidy();
    }

    pub(super) fn first_in_line(&self) -> Option<WaiterId> {
        self.waiters().next().map(|w| w.id)
    }

    /// Takes the first waiter out of line.
    pub(super) fn pop_first(&mut self) -> Option<Waiter> {
        let r = self.rare.as_deref_mut()?;
        let w = r.preferred.pop_front().or_else(|| r.waiters.pop_front());
        self.shrink_line();
        w
    }

    /// Takes the waiter at `pos` in line (counted as [`Job::waiters`]
    /// lists them) out of it.
    pub(super) fn take_waiter(&mut self, pos: usize) -> Waiter {
        let r = self.rare.as_deref_mut().expect("a waiter at pos");
        let w = match pos.checked_sub(r.preferred.len()) {
            None => r.preferred.remove(pos),
            Some(p) => r.waiters.remove(p),
        }
        .expect("a waiter at pos");
        self.shrink_line();
        w
    }

    /// Removes `id` from the queue; returns the waiter to wake if the front
    /// changed.
    pub(super) fn leave_queue(&mut self, id: WaiterId) -> Option<WaiterId> {
        // Ids only grow and waiters only join at the back of their class:
        // each class is sorted by id (ten thousand departures used to
        // scan the line each).
        let r = self.rare.as_deref_mut()?;
        let front = match r.preferred.binary_search_by_key(&id, |w| w.id) {
            Ok(pos) => {
                r.preferred.remove(pos);
                pos == 0
            }
            Err(_) => {
                let pos = r.waiters.binary_search_by_key(&id, |w| w.id).ok()?;
                r.waiters.remove(pos);
                pos == 0 && r.preferred.is_empty()
            }
        };
        self.shrink_line();
        if front {
            self.first_in_line()
        } else {
            None
        }
    }
}

fn shrink(line: &mut VecDeque<Waiter>) {
    let (len, cap) = (line.len(), line.capacity());
    if cap > 64 && len < cap / 4 {
        line.shrink_to(len * 2);
    }
}

impl LeaseTable {
    /// Queues a waiting `Acquire` by `holder` for `ttl` on `job`, last in
    /// line among the waiters of its class (`preferred` or not).
    pub fn enqueue(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        ttl: Duration,
        now: Instant,
        preferred: bool,
    ) -> WaiterId {
        self.enqueue_with_value(name, holder, ttl, now, preferred, None)
    }

    /// [`LeaseTable::enqueue`] for an `Acquire` that publishes `value`
    /// with its grant (`AcquireRequest.value`).
    pub fn enqueue_with_value(
        &mut self,
        name: &JobName,
        holder: &HolderId,
        ttl: Duration,
        now: Instant,
        preferred: bool,
        value: Published,
    ) -> WaiterId {
        self.next_waiter += 1;
        let id = WaiterId(self.next_waiter);
        let floor = self.floors.new_job();
        let rare = self
            .jobs
            .get_or_insert_with(name, || Job::new(now, floor))
            .rare();
        let class = match preferred {
            true => &mut rare.preferred,
            false => &mut rare.waiters,
        };
        class.push_back(Waiter {
            id,
            holder: holder.clone(),
            ttl,
            preferred,
            value,
        });
        id
    }

    /// The waiters for `name`, first in line first: who, and whether a
    /// preferred candidate (`ListWaiters`); at most `limit` of them, and
    /// how many wait in all.
    pub fn waiters_of(&self, name: &JobName, limit: usize) -> (Vec<(HolderId, bool)>, usize) {
        match self.jobs.get(name) {
            None => (Vec::new(), 0),
            Some(job) => (
                job.waiters()
                    .take(limit)
                    .map(|w| (w.holder.clone(), w.preferred))
                    .collect(),
                job.waiting(),
            ),
        }
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

    /// Whether a preferred candidate waits for `name` while its live
    /// grant is not a preferred one's: the holder is told
    /// (`successor_waiting`), to hand over when it suits it.
    pub fn successor_waiting(&self, name: &JobName) -> bool {
        self.jobs.get(name).is_some_and(|j| {
            j.holding.as_ref().is_some_and(|h| !h.preferred) && j.preferred_waiting()
        })
    }
}
