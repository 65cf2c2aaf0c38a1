//! The table's jobs by name: the jobs in one dense vector of slots, each
//! with its name, found by a hash table of slot numbers, and listed in
//! name order by an ordered index of names to slot numbers.
//!
//! A `BTreeMap<JobName, Job>` keeps each `Job` (144 bytes) inside its
//! nodes. Inserts one by one, as grants on a running server make them,
//! leave those nodes a third to a half empty, and the empty places are
//! `Job`-sized: a million held leases took about 100 MiB more on a running
//! server than after a restart, whose table is built in one go with full
//! nodes. Here the ordered index holds only each name and a 4-byte slot
//! number, so its empty places cost 28 bytes, not 168; the jobs sit packed
//! in the slot vector, and a deleted job's slot is reused by the next new
//! one.
//!
//! A lookup by name (every renewal, grant and write) does not walk the
//! ordered index: among a million jobs that is six levels of nodes that
//! are not in the cache, a cache miss each. It hashes the name (SipHash
//! with this process's random keys, so a client cannot choose names that
//! collide) into a table of 8-byte entries, open addressing with linear
//! probing at most half full: 32 bits of the name's hash and its slot
//! number. An entry whose hash bits match is confirmed against the name
//! kept in its slot, so a lookup costs about two cache misses: the
//! entry and the slot. The hash table costs 8 to 16 bytes a job, and the
//! name in the slot 24 more. Once under a quarter of the slots are live
//! (most jobs deleted), both are packed and shrunk.
//!
//! **Every name in the ordered index and the hash table has exactly one
//! live slot, holding that name, and every live slot is in both**:
//! `put` and `remove` are the only ways in and out, and a unit test
//! checks it through a churn of both.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::ops::Bound;

use super::job::Job;
use crate::lease::JobName;

/// Jobs by name, in name order; see the module's docs.
#[derive(Debug, Default)]
pub(super) struct Jobs {
    index: BTreeMap<JobName, u32>,
    slots: Vec<Option<Slot>>,
    /// Slots whose job was removed, to be reused.
    free: Vec<u32>,
    hashed: Hashed,
}

#[derive(Debug)]
struct Slot {
    name: JobName,
    job: Job,
}

/// Tables of at least this many jobs are built on two threads.
const PARALLEL_FROM: usize = 65_536;

impl Jobs {
    /// Built from `jobs`, sorted by name or mostly: a name given twice
    /// keeps its last job, as a map's inserts would. The slots come in
    /// name order, the ordered index is built in one go, its nodes full,
    /// and the hash table without a lookup per job ([`Hashed::build`]).
    pub(super) fn from_sorted(mut jobs: Vec<(JobName, Job)>) -> Jobs {
        // A store's records come in key order: one pass checks it. A
        // stable sort keeps a name's jobs in their order otherwise.
        if !jobs.windows(2).all(|w| w[0].0 <= w[1].0) {
            jobs.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let mut slots: Vec<Option<Slot>> = Vec::with_capacity(jobs.len());
        for (name, job) in jobs {
            match slots.last_mut() {
                Some(Some(last)) if last.name == name => last.job = job,
                _ => slots.push(Some(Slot { name, job })),
            }
        }
        let index = || {
            BTreeMap::from_iter(
                slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| Some((s.as_ref()?.name.clone(), slot_number(i)))),
            )
        };
        // The two structures apart, on two threads for a large table (a
        // restart's): each is about a tenth of a million leases' start.
        let (index, hashed) = if slots.len() < PARALLEL_FROM {
            (index(), Hashed::build(&slots))
        } else {
            std::thread::scope(|s| {
                let hashed = std::thread::Builder::new()
                    .name("leasehold-index".into())
                    .spawn_scoped(s, || Hashed::build(&slots));
                let index = index();
                let hashed = match hashed.map(|h| h.join()) {
                    Ok(Ok(h)) => h,
                    Ok(Err(panic)) => std::panic::resume_unwind(panic),
                    Err(_) => Hashed::build(&slots),
                };
                (index, hashed)
            })
        };
        Jobs {
            hashed,
            index,
            slots,
            free: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub(super) fn contains_key(&self, name: &JobName) -> bool {
        self.find(name).is_some()
    }

    pub(super) fn get(&self, name: &JobName) -> Option<&Job> {
        self.find(name).map(|(_, i)| &self.slot(i).job)
    }

    pub(super) fn get_mut(&mut self, name: &JobName) -> Option<&mut Job> {
        let (_, i) = self.find(name)?;
        Some(&mut self.slot_mut(i).job)
    }

    /// `name`'s job, made by `make` if there is none (the name is cloned
    /// only then).
    pub(super) fn get_or_insert_with(
        &mut self,
        name: &JobName,
        make: impl FnOnce() -> Job,
    ) -> &mut Job {
        let i = match self.find(name) {
            Some((_, i)) => i,
            None => self.put(name.clone(), make()),
        };
        &mut self.slot_mut(i).job
    }

    /// Sets `name`'s job, replacing the one it had.
    pub(super) fn insert(&mut self, name: JobName, job: Job) {
        match self.find(&name) {
            Some((_, i)) => self.slot_mut(i).job = job,
            None => {
                self.put(name, job);
            }
        }
    }

    pub(super) fn remove(&mut self, name: &JobName) -> Option<Job> {
        let (at, i) = self.find(name)?;
        self.hashed.remove_at(at);
        self.index.remove(name);
        let slot = self.slots[i as usize].take();
        if i as usize + 1 == self.slots.len() {
            self.slots.pop();
        } else {
            self.free.push(i);
        }
        if self.slots.len() > SMALLEST && self.len() * 4 < self.slots.len() {
            self.compact();
        }
        slot.map(|s| s.job)
    }

    /// Packs the live slots at the front and gives back the room of the
    /// rest, the hash table's too: after most jobs were deleted, the table
    /// does not keep the room of its largest size. O(n log n), and only
    /// once the slots are under a quarter live, so amortised O(log n) a
    /// removal.
    fn compact(&mut self) {
        let live: Vec<Slot> = std::mem::take(&mut self.slots)
            .into_iter()
            .flatten()
            .collect();
        self.free = Vec::new();
        self.hashed = Hashed::with_capacity(live.len());
        self.slots = Vec::with_capacity(live.len());
        for slot in live {
            let i = slot_number(self.slots.len());
            self.hashed.insert(self.hashed.hash(&slot.name), i);
            *self.index.get_mut(&slot.name).expect(NAMED) = i;
            self.slots.push(Some(slot));
        }
    }

    /// The jobs from `start` on, in name order.
    pub(super) fn range<'a>(
        &'a self,
        start: Bound<&'a str>,
    ) -> impl Iterator<Item = (&'a JobName, &'a Job)> + 'a {
        self.index
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(name, &i)| (name, &self.slot(i).job))
    }

    /// Every job, in name order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&JobName, &Job)> + '_ {
        self.index
            .iter()
            .map(|(name, &i)| (name, &self.slot(i).job))
    }

    /// Every job, in no order.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.slots.iter_mut().flatten().map(|s| &mut s.job)
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
                let slot = slots[i as usize].as_mut().expect(NAMED);
                (name, f(&mut slot.job))
            })
    }

    /// The hash table's position of `name` and its slot.
    fn find(&self, name: &JobName) -> Option<(usize, u32)> {
        self.hashed.find(self.hashed.hash(name), name, &self.slots)
    }

    fn put(&mut self, name: JobName, job: Job) -> u32 {
        let slot = Slot {
            name: name.clone(),
            job,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                slot_number(self.slots.len() - 1)
            }
        };
        self.hashed.insert(self.hashed.hash(&name), i);
        self.index.insert(name, i);
        i
    }

    fn slot(&self, i: u32) -> &Slot {
        self.slots[i as usize].as_ref().expect(NAMED)
    }

    fn slot_mut(&mut self, i: u32) -> &mut Slot {
        self.slots[i as usize].as_mut().expect(NAMED)
    }

    /// Checks the invariant (tests).
    #[cfg(test)]
    pub(super) fn check(&self) {
        let mut named = vec![false; self.slots.len()];
        for (name, &i) in &self.index {
            let slot = self.slots[i as usize].as_ref();
            assert!(slot.is_some(), "slot {i} is named but empty");
            assert_eq!(&slot.unwrap().name, name, "slot {i} holds another name");
            assert!(!named[i as usize], "slot {i} has two names");
            named[i as usize] = true;
            assert_eq!(
                self.find(name).map(|(_, s)| s),
                Some(i),
                "{name} not hashed"
            );
        }
        for &i in &self.free {
            assert!(
                self.slots[i as usize].is_none(),
                "free slot {i} holds a job"
            );
        }
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        assert_eq!(live, self.index.len(), "live slots without a name");
        assert_eq!(self.hashed.len, live, "hash entries without a slot");
        assert!(self.hashed.len * 2 <= self.hashed.table.len().max(1));
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

/// The hash table: open addressing, linear probing, at most half full.
/// An entry is 32 bits of the name's hash (its position too: their low
/// bits) above the slot number; [`EMPTY`] is no entry (no slot number is
/// `u32::MAX`: there are fewer than 2^32 jobs).
#[derive(Debug, Default)]
struct Hashed {
    table: Vec<u64>,
    len: usize,
    keys: RandomState,
}

const EMPTY: u64 = u64::MAX;
const SMALLEST: usize = 16;

impl Hashed {
    fn with_capacity(n: usize) -> Hashed {
        let mut h = Hashed::default();
        if n > 0 {
            h.table = vec![EMPTY; (n * 2).next_power_of_two().max(SMALLEST)];
        }
        h
    }

    /// The table of `slots` (every one live, no name twice): each entry
    /// placed without a lookup, as no name is there twice.
    fn build(slots: &[Option<Slot>]) -> Hashed {
        let mut h = Hashed::with_capacity(slots.len());
        for (i, s) in slots.iter().enumerate() {
            let name = &s.as_ref().expect("every slot live").name;
            h.place((u64::from(h.hash(name)) << 32) | u64::from(slot_number(i)));
        }
        h.len = slots.len();
        h
    }

    /// 32 bits of `name`'s keyed hash.
    fn hash(&self, name: &JobName) -> u32 {
        (self.keys.hash_one(name.as_str()) >> 32) as u32
    }

    fn home(&self, h: u32) -> usize {
        h as usize & (self.table.len() - 1)
    }

    fn find(&self, h: u32, name: &JobName, slots: &[Option<Slot>]) -> Option<(usize, u32)> {
        if self.table.is_empty() {
            return None;
        }
        let mask = self.table.len() - 1;
        let mut at = self.home(h);
        loop {
            let e = self.table[at];
            if e == EMPTY {
                return None;
            }
            if (e >> 32) as u32 == h {
                let i = e as u32;
                if slots[i as usize].as_ref().is_some_and(|s| s.name == *name) {
                    return Some((at, i));
                }
            }
            at = (at + 1) & mask;
        }
    }

    /// Adds slot `i` under hash `h` (its name is not in the table).
    fn insert(&mut self, h: u32, i: u32) {
        if (self.len + 1) * 2 > self.table.len() {
            self.grow();
        }
        self.place((u64::from(h) << 32) | u64::from(i));
        self.len += 1;
    }

    fn place(&mut self, e: u64) {
        let mask = self.table.len() - 1;
        let mut at = self.home((e >> 32) as u32);
        while self.table[at] != EMPTY {
            at = (at + 1) & mask;
        }
        self.table[at] = e;
    }

    /// Twice the room; the entries placed again from their hash bits, with
    /// no name hashed again.
    fn grow(&mut self) {
        let room = (self.table.len() * 2).max(SMALLEST);
        let old = std::mem::replace(&mut self.table, vec![EMPTY; room]);
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            self.place(e);
        }
    }

    /// Takes out the entry at `at`, moving back the entries after it that
    /// its place would now cut off from their home (no tombstones).
    fn remove_at(&mut self, mut at: usize) {
        let mask = self.table.len() - 1;
        let mut next = at;
        loop {
            next = (next + 1) & mask;
            let e = self.table[next];
            if e == EMPTY {
                break;
            }
            let home = self.home((e >> 32) as u32);
            // Stays if its home is cyclically in (at, next].
            let stays = if at <= next {
                at < home && home <= next
            } else {
                at < home || home <= next
            };
            if !stays {
                self.table[at] = e;
                at = next;
            }
        }
        self.table[at] = EMPTY;
        self.len -= 1;
    }
}

const NAMED: &str = "every named slot holds a job";

fn slot_number(i: usize) -> u32 {
    u32::try_from(i)
        .ok()
        .filter(|&i| i != u32::MAX)
        .expect("fewer than 2^32 jobs")
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
        // Everything out again, in another order than it came: the hash
        // table's removals move the entries after them back.
        for k in (0..300).rev().step_by(2).chain((0..300).step_by(2)) {
            jobs.remove(&name(k));
            if k % 37 == 0 {
                jobs.check();
            }
        }
        jobs.check();
        assert!(jobs.is_empty());
        assert!(jobs.hashed.table.iter().all(|&e| e == EMPTY));
    }

    /// After most jobs are deleted, the slots and the hash table give
    /// their room back, and what is left is still found and listed.
    #[test]
    fn most_jobs_deleted_give_their_room_back() {
        let mut jobs = Jobs::default();
        for i in 0..10_000 {
            jobs.insert(name(i), job(i as u64));
        }
        let big = jobs.hashed.table.len();
        // Deleted from the front, so the slots' tail stays in use.
        for i in 0..9_990 {
            jobs.remove(&name(i));
        }
        jobs.check();
        assert!(
            jobs.slots.len() <= 4 * 10 + SMALLEST,
            "{} slots for 10 jobs",
            jobs.slots.len()
        );
        assert!(
            jobs.slots.capacity() < 1_000,
            "room for {} slots",
            jobs.slots.capacity()
        );
        assert!(
            jobs.hashed.table.len() * 100 < big,
            "{} hash entries for 10 jobs",
            jobs.hashed.table.len()
        );
        let left: Vec<_> = jobs.iter().map(|(_, j)| j.token.0).collect();
        assert_eq!(left, (9_990..10_000).collect::<Vec<_>>());
        for i in 9_990..10_000 {
            assert_eq!(jobs.get(&name(i)).map(|j| j.token.0), Some(i as u64));
        }
    }

    /// Many names in a small table: long probe runs, growth, and removals
    /// from the middle of runs, each name still found (and a name never
    /// put, not found).
    #[test]
    fn the_hash_table_finds_every_name_through_growth_and_removals() {
        let mut jobs = Jobs::default();
        for i in 0..5_000 {
            jobs.insert(name(i), job(i as u64));
        }
        jobs.check();
        for i in (0..5_000).filter(|i| i % 3 == 0) {
            assert_eq!(
                jobs.remove(&name(i)).map(|j| j.token),
                Some(Token(i as u64))
            );
        }
        jobs.check();
        for i in 0..5_000 {
            let want = (i % 3 != 0).then_some(Token(i as u64));
            assert_eq!(jobs.get(&name(i)).map(|j| j.token), want, "job-{i}");
        }
        assert!(jobs.get(&name(5_000)).is_none());
    }

    /// Built from sorted jobs with a name given twice, the last one wins.
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
        assert_eq!(
            jobs.slots.len(),
            2,
            "the second job replaced the first in its slot"
        );
    }

    /// Built from many jobs out of order, some given twice: every name
    /// is found, each with its last job, and the structures agree.
    #[test]
    fn from_unsorted_many_finds_every_name_with_its_last_job() {
        let mut input: Vec<(JobName, Job)> =
            (0..5_000).rev().map(|i| (name(i), job(i as u64))).collect();
        input.extend(
            (0..5_000)
                .step_by(7)
                .map(|i| (name(i), job(i as u64 + 100_000))),
        );
        let jobs = Jobs::from_sorted(input);
        jobs.check();
        assert_eq!(jobs.len(), 5_000);
        for i in 0..5_000 {
            let want = if i % 7 == 0 { i + 100_000 } else { i };
            assert_eq!(
                jobs.get(&name(i)).unwrap().token,
                Token(want as u64),
                "job-{i}"
            );
        }
        assert!(jobs.get(&name(5_000)).is_none());
    }

    /// A table large enough to be built on two threads: every name is
    /// found through both structures, each with its own job.
    #[test]
    fn a_large_table_built_on_two_threads_finds_every_name() {
        let n = PARALLEL_FROM + 10;
        let mut jobs = Jobs::from_sorted((0..n).map(|i| (name(i), job(i as u64))).collect());
        jobs.check();
        assert_eq!(jobs.len(), n);
        for i in (0..n).step_by(97).chain([n - 1]) {
            assert_eq!(jobs.get(&name(i)).unwrap().token, Token(i as u64));
            assert!(jobs.remove(&name(i)).is_some());
            assert!(jobs.get(&name(i)).is_none());
        }
        jobs.check();
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
