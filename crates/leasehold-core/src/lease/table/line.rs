//! The waiter line: the `Acquire`s waiting for a job, first come first
//! served. A job's line is sorted by id (ids only grow, waiters join at
//! the back), and gives back its room once it empties out.
//!
//! Apart from the table's decisions, which only ask who is first, take
//! the first out, or let one leave.

use std::time::{Duration, Instant};

use super::job::Job;
use super::{Effects, LeaseTable, WaiterId};
use crate::lease::{HolderId, JobName};

/// A waiting `Acquire`, queued first come, first served.
#[derive(Debug, Clone)]
pub(super) struct Waiter {
    pub(super) id: WaiterId,
    pub(super) holder: HolderId,
    pub(super) ttl: Duration,
}

impl Job {
    /// The waiters, first in line first.
    pub(super) fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.rare.iter().flat_map(|r| r.waiters.iter())
    }

    pub(super) fn waiting(&self) -> usize {
        self.rare.as_ref().map_or(0, |r| r.waiters.len())
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

    pub(super) fn first_in_line(&self) -> Option<WaiterId> {
        self.waiters().next().map(|w| w.id)
    }

    /// Takes the first waiter out of line.
    pub(super) fn pop_first(&mut self) -> Option<Waiter> {
        let w = self.rare.as_deref_mut()?.waiters.pop_front();
        self.shrink_line();
        w
    }

    /// Takes the waiter at `pos` in line out of it.
    pub(super) fn take_waiter(&mut self, pos: usize) -> Waiter {
        let w = self
            .rare
            .as_deref_mut()
            .and_then(|r| r.waiters.remove(pos))
            .expect("a waiter at pos");
        self.shrink_line();
        w
    }

    /// Removes `id` from the queue; returns the waiter to wake if the front
    /// changed.
    pub(super) fn leave_queue(&mut self, id: WaiterId) -> Option<WaiterId> {
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
}

impl LeaseTable {
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
}
