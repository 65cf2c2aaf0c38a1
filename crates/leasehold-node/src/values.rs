//! The fenced key-value store: `CheckedWrite` and the staged writes of a
//! `WriteStream` (admitted by the core's rule under the state lock, with
//! the key's record read before the lock and confirmed under it), and
//! the reads of a job's keys, each once what it read is durable.

use std::sync::MutexGuard;

use leasehold_backend::{HolderGuard, Staged, Write};
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{JobName, Token};
use leasehold_store::{recheck_value, KeyPage, ListBudget, ValueRecord};

use super::{Node, State};

/// A key's record read before the state lock was taken, with the store's
/// read epoch from before the read.
struct ReadAhead {
    epoch: u64,
    record: Option<ValueRecord>,
}

impl Node {
    /// Stores `value` (or deletes, when `None`) under (job, key), if the
    /// core's `rules::admit_write` admits it: `guard` (if any) lets the
    /// live grant's holder be written for, then `token` passes the fence.
    /// Returns the key's new version once durable.
    pub async fn checked_write(
        &self,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<u64> {
        self.check_open()?;
        let (outcome, seq) = {
            let (mut st, mut existing) = self.lock_with_records(&[(job, key)])?;
            let existing = existing.pop().expect("one record for one key");
            let guard = guard.map(|g| g as &dyn Fn(&str) -> bool);
            self.write_one(&mut st, job, token, key, value, existing, guard)?
        };
        self.inner.commit.wait(seq).await?;
        outcome
    }

    /// The state lock, and the records of `keys` as they are under it.
    /// Each is read before the lock is taken ([`Node::read_ahead`]); under
    /// it the store confirms it from memory. If a checkpoint moved records
    /// meanwhile, only a read of the store can tell, and a read of sled
    /// waits while a checkpoint applies: then the lock is let go and the
    /// keys are read again, a few times, before the read is made under the
    /// lock. **No decision waits for the disk, or for a checkpoint, under
    /// the state lock**: a 64 KiB write flood's checkpoints used to stall
    /// the leaders' renewals for tens of milliseconds that way.
    fn lock_with_records(
        &self,
        keys: &[(&JobName, &[u8])],
    ) -> Result<(MutexGuard<'_, State>, Vec<Option<ValueRecord>>)> {
        const TRIES: usize = 3;
        for attempt in 1.. {
            let pre = keys
                .iter()
                .map(|(job, key)| self.read_ahead(job, key))
                .collect::<Result<Vec<_>>>()?;
            let st = self.lock();
            let mut out = Vec::with_capacity(keys.len());
            for ((job, key), pre) in keys.iter().zip(pre) {
                let store = &self.inner.store;
                let now = match store.recheck_value_in_memory(job, key, pre.epoch)? {
                    Some(now) => now,
                    None if attempt < TRIES => break,
                    None => recheck_value(&**store, job, key, pre.epoch)?,
                };
                out.push(match now {
                    None => pre.record,
                    Some(now) => now,
                });
            }
            if out.len() == keys.len() {
                return Ok((st, out));
            }
        }
        unreachable!("the last try reads under the lock")
    }

    /// Many writes in one decision: the state lock is taken once, and the
    /// writes are made in order with the rules of [`Node::checked_write`],
    /// `guard` (if any) asked for each of them on the state it is decided
    /// on, each on its own (a fenced or guarded one does not stop the
    /// others). Returns each write's new version or why it was refused
    /// (`Fenced`, `UnknownToken`, `QuotaExceeded`, `PermissionDenied`),
    /// and the sequence number to pass to
    /// [`Node::durable`] before any of it is shown. Not waiting here lets a
    /// stream decide its next message, in order, while earlier ones wait
    /// for their sync. Fails as a whole when the node is closing or the
    /// store refuses or fails; writes before that one may have been made.
    pub fn stage_writes(
        &self,
        batch: Vec<Write>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<Staged> {
        self.check_open()?;
        let guard = guard.map(|g| g as &dyn Fn(&str) -> bool);
        let mut out = Vec::with_capacity(batch.len());
        let mut last = 0;
        let keys: Vec<(&JobName, &[u8])> = batch.iter().map(|w| (&w.job, &w.key[..])).collect();
        let epoch = self.inner.store.read_epoch();
        let (mut st, existing) = self.lock_with_records(&keys)?;
        drop(keys);
        // A key written earlier in the batch: its record is the one just
        // staged, which the store has in memory.
        let mut written = std::collections::HashSet::new();
        for (w, existing) in batch.into_iter().zip(existing) {
            let existing = match written.contains(&(w.job.clone(), w.key.clone())) {
                false => existing,
                true => match recheck_value(&*self.inner.store, &w.job, &w.key, epoch)? {
                    Some(now) => now,
                    None => existing,
                },
            };
            written.insert((w.job.clone(), w.key.clone()));
            let (outcome, seq) =
                self.write_one(&mut st, &w.job, w.token, &w.key, w.value, existing, guard)?;
            last = last.max(seq);
            out.push(outcome);
        }
        Ok(Staged {
            outcomes: out,
            seq: last,
        })
    }

    /// Waits until every change up to sequence number `seq` is durable
    /// (at once for 0).
    pub async fn durable(&self, seq: u64) -> Result<()> {
        if seq == 0 {
            return Ok(());
        }
        self.inner.commit.wait(seq).await
    }

    /// One write, under the state lock: its admission (the core's rule,
    /// [`LeaseTable::admit_write`](leasehold_core::lease::LeaseTable::admit_write):
    /// `guard` if any, then the fence), then the store. The
    /// outer error is the store's (the whole call fails), the inner one
    /// the admission's (this write is refused). Returns the new version or
    /// the refusal, and the sequence number to wait for before showing it:
    /// a refusal names the job's current token, which must be durable too.
    ///
    /// `existing` is the key's record as it is under the lock (see
    /// [`Node::lock_with_records`]).
    #[allow(clippy::too_many_arguments)] // one write's parts, and its guard
    fn write_one(
        &self,
        st: &mut State,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        existing: Option<ValueRecord>,
        guard: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<(Result<u64>, u64)> {
        let key_token = existing.as_ref().map(|r| r.token);
        if let Err(e) = st
            .table
            .admit_write(job, token, key_token, guard, clock::now())
        {
            if matches!(e, Error::Fenced { .. }) {
                self.inner.changed(job);
            }
            return Ok((Err(e), st.table.stamp(job)));
        }
        // A new key counts against the job's limit; a deleted key keeps its
        // tombstone (and its place) until the job is deleted.
        let keys = match existing {
            Some(_) => None,
            None => {
                let n = match st.keys.get(job) {
                    Some(n) => *n,
                    None => self.inner.store.count_keys(job)?,
                };
                if n >= self.inner.limits.max_keys_per_job {
                    return Ok((Err(self.inner.limits.too_many_keys()), st.table.stamp(job)));
                }
                Some(n + 1)
            }
        };
        let version = existing.map_or(0, |r| r.version) + 1;
        let rec = ValueRecord {
            token,
            version,
            value,
        };
        if let Err(e) = self.inner.store.put_value(job, key, &rec) {
            match e {
                Error::NoSpace { .. } => self.inner.check_space(),
                _ => self.inner.fail(st, None, &e),
            }
            return Err(e);
        }
        if let Some(n) = keys {
            st.keys.insert(job.clone(), n);
        }
        Ok((Ok(version), self.inner.commit.stage()))
    }

    /// The sequence number a read made just before must wait for. Reads
    /// run without the state lock (a read from disk must not stall every
    /// decision); a put is staged and numbered under the lock, so taking
    /// it after the read means every put the read may have seen is
    /// numbered by now, at or below what this returns.
    fn staged_after_read(&self) -> u64 {
        let _st = self.lock();
        self.inner.commit.staged()
    }

    /// Reads the key's record without the state lock, for
    /// [`Node::write_one`] to confirm under it.
    fn read_ahead(&self, job: &JobName, key: &[u8]) -> Result<ReadAhead> {
        let epoch = self.inner.store.read_epoch();
        let record = self.inner.store.get_value(job, key)?;
        Ok(ReadAhead { epoch, record })
    }

    /// The record under (job, key), once everything staged before the read
    /// is durable: reads are linearizable.
    pub async fn read(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        let rec = self.inner.store.get_value(job, key)?;
        let seq = self.staged_after_read();
        self.inner.commit.wait(seq).await?;
        Ok(rec)
    }

    /// One page of `job`'s live keys starting with `prefix`, after
    /// `after`: at most `limit`, within a [`ListBudget`] of its own.
    pub async fn keys(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<KeyPage> {
        let list = self
            .inner
            .store
            .list_keys(job, prefix, after, limit, ListBudget::default())?;
        let seq = self.staged_after_read();
        self.inner.commit.wait(seq).await?;
        Ok(list)
    }
}
