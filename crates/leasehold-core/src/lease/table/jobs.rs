//! The table's jobs by name: an ordered index of names to slots, and the
//! jobs themselves in one dense vector of slots.
//!
//! A `BTreeMap<JobName, Job>` keeps each `Job` (144 bytes) inside its
//! nodes. Inserts one by one, as grants on a running server make them,
//! leave those nodes a third to a half empty, and the empty places are
//! `Job`-sized: a million held leases took about 160 MiB more on a running
//! server than after a restart, whose table is built in one go with full
//! nodes. Here the tree holds only each name and a 4-byte slot number, so
//! its empty places cost 28 bytes, not 168; the jobs sit packed in the
//! slot vector, and a deleted job's slot is reused by the next new one.
//! A lookup walks nodes a sixth the size (more of them in the cache), and
//! then reads one slot.
//!
//! **Every name in the index has exactly one live slot, and every live
//! slot exactly one name**: `insert` and `remove` are the only ways in and
//! out, and a unit test checks it through a churn of both.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::job::Job;
use crate::lease::JobName;

/// Jobs by name, in name order; see the module's docs.
#[derive(Debug, Default)]
pub(super) struct Jobs {
    index: BTreeMap<JobName, u32>,
    slots: Vec<Option<Job>>,
    /// Slots whose job was removed, to be reused.
    free: Vec<u32>,
}

impl Jobs {
    /// Built in one go from `jobs`, sorted by name (or mostly: a name
    /// given twice keeps its last job, as a map's inserts would).
    pub(super) fn from_sorted(jobs: Vec<(JobName, Job)>) -> Jobs {
        let mut slots = Vec::with_capacity(jobs.len());
        let index = BTreeMap::from_iter(jobs.into_iter().map(|(name, job)| {
            let slot = slot_number(slots.len());
            slots.push(Some(job));
            (name, slot)
        }));
        let mut jobs = Jobs {
            index,
            slots,
            free: Vec::new(),
        };
        if jobs.index.len() < jobs.slots.len() {
            // A name given twice: its earlier jobs have no name.
            let mut named = vec![false; jobs.slots.len()];
            for &i in jobs.index.values() {
                named[i as usize] = true;
            }
            for (i, named) in named.into_iter().enumerate() {
                if !named {
                    jobs.slots[i] = None;
                    jobs.free.push(slot_number(i));
                }
            }
        }
        jobs
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub(super) fn contains_key(&self, name: &JobName) -> bool {
        self.index.contains_key(name)
    }

    pub(super) fn get(&self, name: &JobName) -> Option<&Job> {
        self.index.get(name).map(|&i| self.slot(i))
    }

    pub(super) fn get_mut(&mut self, name: &JobName) -> Option<&mut Job> {
        let i = *self.index.get(name)?;
        Some(self.slot_mut(i))
    }

    /// `name`'s job, made by `make` if there is none (the name is cloned
    /// only then).
    pub(super) fn get_or_insert_with(
        &mut self,
        name: &JobName,
        make: impl FnOnce() -> Job,
    ) -> &mut Job {
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => self.put(name.clone(), make()),
        };
        self.slot_mut(i)
    }

    /// Sets `name`'s job, replacing the one it had.
    pub(super) fn insert(&mut self, name: JobName, job: Job) {
        match self.index.get(&name) {
            Some(&i) => *self.slot_mut(i) = job,
            None => {
                self.put(name, job);
            }
        }
    }

    pub(super) fn remove(&mut self, name: &JobName) -> Option<Job> {
        let i = self.index.remove(name)?;
        let job = self.slots[i as usize].take();
        if i as usize + 1 == self.slots.len() {
            self.slots.pop();
        } else {
            self.free.push(i);
        }
        job
    }

    /// The jobs from `start` on, in name order.
    pub(super) fn range<'a>(
        &'a self,
        start: Bound<&'a str>,
    ) -> impl Iterator<Item = (&'a JobName, &'a Job)> + 'a {
        self.index
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(name, &i)| (name, self.slot(i)))
    }

    /// Every job, in name order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&JobName, &Job)> + '_ {
        self.index.iter().map(|(name, &i)| (name, self.slot(i)))
    }

    /// Every job, in no order.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.slots.iter_mut().flatten()
    }

    /// `f` of each job after `after` (all, without one), in name order.
    pub(super) fn map_after<'a, T>(
        &'a mut self,
        after: Option<&JobName>,
        mut f: impl FnMut(&mut Job) -> T + 'a,
    ) -> impl Iterator<Item = (&'a JobName, T)> + 'a {
        let start = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        let slots = &mut self.slots;
        self.index
            .range::<JobName, _>((start, Bound::Unbounded))
            .map(move |(name, &i)| {
                let job = slots[i as usize].as_mut().expect(NAMED);
                (name, f(job))
            })
    }

    fn put(&mut self, name: JobName, job: Job) -> u32 {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(job);
                i
            }
            None => {
                self.slots.push(Some(job));
                slot_number(self.slots.len() - 1)
            }
        };
        self.index.insert(name, i);
        i
    }

    fn slot(&self, i: u32) -> &Job {
        self.slots[i as usize].as_ref().expect(NAMED)
    }

    fn slot_mut(&mut self, i: u32) -> &mut Job {
        self.slots[i as usize].as_mut().expect(NAMED)
    }

    /// Checks the invariant (tests).
    #[cfg(test)]
    pub(super) fn check(&self) {
        let mut named = vec![false; self.slots.len()];
        for &i in self.index.values() {
            assert!(
                self.slots[i as usize].is_some(),
                "slot {i} is named but empty"
            );
            assert!(!named[i as usize], "slot {i} has two names");
            named[i as usize] = true;
        }
        for &i in &self.free {
            assert!(
                self.slots[i as usize].is_none(),
                "free slot {i} holds a job"
            );
        }
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        assert_eq!(live, self.index.len(), "live slots without a name");
        assert_eq!(
            self.free.len() + live,
            self.slots.len(),
            "an empty slot that is not free"
        );
    }
}

impl std::ops::Index<&JobName> for Jobs {
    type Output = Job;

    /// `name`'s job; panics if there is none.
    fn index(&self, name: &JobName) -> &Job {
        self.get(name).expect("a job of that name")
    }
}

const NAMED: &str = "every named slot holds a job";

fn slot_number(i: usize) -> u32 {
    u32::try_from(i).expect("fewer than 2^32 jobs")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Token;
    use std::time::Instant;

    fn job(token: u64) -> Job {
        Job::new(Instant::now(), Token(token))
    }

    fn name(i: usize) -> JobName {
        JobName::from_trusted(format!("job-{i:04}"))
    }

    /// Inserts, replacements and removals in a mixed order keep one slot
    /// per name, reuse freed slots, and list in name order.
    #[test]
    fn churn_keeps_one_slot_per_name() {
        let mut jobs = Jobs::default();
        let mut model = BTreeMap::new();
        let mut x: u64 = 7;
        for step in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 33) as usize % 300;
            match (x >> 20) % 4 {
                0 => {
                    assert_eq!(
                        jobs.remove(&name(k)).map(|j| j.token),
                        model.remove(&name(k))
                    );
                }
                1 => {
                    jobs.insert(name(k), job(step));
                    model.insert(name(k), Token(step));
                }
                _ => {
                    let got = jobs.get_or_insert_with(&name(k), || job(step)).token;
                    assert_eq!(got, *model.entry(name(k)).or_insert(Token(step)));
                }
            }
            if step % 997 == 0 {
                jobs.check();
            }
        }
        jobs.check();
        assert!(
            jobs.slots.len() <= 300,
            "{} slots for 300 names",
            jobs.slots.len()
        );
        let listed: Vec<_> = jobs.iter().map(|(n, j)| (n.clone(), j.token)).collect();
        let want: Vec<_> = model.into_iter().collect();
        assert_eq!(listed, want);
        assert_eq!(jobs.len(), listed.len());
    }

    /// Built from sorted jobs with a name given twice, the last one wins
    /// and the other's slot is free.
    #[test]
    fn from_sorted_keeps_the_last_of_a_name() {
        let jobs = Jobs::from_sorted(vec![
            (name(1), job(1)),
            (name(2), job(2)),
            (name(2), job(3)),
        ]);
        jobs.check();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs.get(&name(2)).unwrap().token, Token(3));
        assert_eq!(jobs.free, vec![1]);
    }

    /// `range` starts where it is told, `map_after` after the name.
    #[test]
    fn ranges_start_where_told() {
        let mut jobs = Jobs::from_sorted((0..10).map(|i| (name(i), job(i as u64))).collect());
        let from: Vec<_> = jobs
            .range(Bound::Included("job-0007"))
            .map(|(_, j)| j.token.0)
            .collect();
        assert_eq!(from, vec![7, 8, 9]);
        let after: Vec<_> = jobs
            .map_after(Some(&name(7)), |j| j.token.0)
            .map(|(_, t)| t)
            .collect();
        assert_eq!(after, vec![8, 9]);
    }
}
