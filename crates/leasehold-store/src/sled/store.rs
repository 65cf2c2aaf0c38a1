//! The embedded store's [`Store`] methods: staging puts (a job's history
//! kept to its newest tenures), the sync that makes them durable, the
//! reads, the checkpoint calls, the backup (ended when a checkpoint must
//! not wait for it) and the reopen after a failure.
//!
//! Apart from the store's state (the parent module), which these methods
//! only drive: the trait's contract is in the crate's docs.

use std::sync::atomic::{AtomicBool, Ordering};

use super::open::{wait_until_unlocked, UNLOCK_WAIT};
use super::space::RESERVE;
use super::{no_panic, Open, Pending, SledStore, CHECKPOINT_KEYS, WAL_FILE};
use crate::wal::{self, Kind, Record};
use crate::{
    decode_history, decode_lease, decode_value, encode_history, encode_lease, encode_value,
    history_key, history_prefix, value_key, HistoryPut, KeyPage, KeyPager, ListBudget, Store,
    Tenure, ValueRecord,
};
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{Floors, JobName, LeaseRecord, Token};
use leasehold_core::record::trimmed_history;

/// How many of the staged changes past a page's limit a listing copies:
/// removals and tombstones among them take no place in the page.
const LIST_OVERLAY_SLACK: usize = 1024;

/// History changes as the value tree stores them: key, encoded record.
fn encoded_history(job: &JobName, history: &[HistoryPut]) -> Vec<(Vec<u8>, Vec<u8>)> {
    history
        .iter()
        .map(|h| {
            let (k, v) = encode_history(job, h);
            (k, encode_value(&v))
        })
        .collect()
}

/// An empty record value stands for a removal: a job's deletion removes
/// its records (no encoded lease or value record is empty).
const REMOVED: Vec<u8> = Vec::new();

impl SledStore {
    /// A checkpoint if `due` says so (holding the log, which it reads),
    /// then a reclaim of disk space if one is due.
    fn checkpoint_when(&self, due: impl FnOnce(&Open, &wal::Wal) -> bool) -> Result<()> {
        let checkpointed = self.write(|o| {
            let mut wal = o.wal.lock().expect("wal lock");
            if !due(o, &wal) {
                return Ok(false);
            }
            self.checkpoint_open(o, &mut wal)?;
            Ok(true)
        })?;
        if checkpointed {
            self.reclaim_if_due()?;
        }
        Ok(())
    }
}

impl Store for SledStore {
    fn leases(&self) -> Result<Vec<(JobName, LeaseRecord)>> {
        let decode = |k: &[u8], v: &[u8]| {
            let name = String::from_utf8(k.to_vec())
                .map_err(|_| Error::storage("corrupt job name in store"))?;
            Ok((JobName::from_trusted(name), decode_lease(v)?))
        };
        self.with(|o| {
            let first = o.first_leases.lock().expect("first leases lock").take();
            if let Some(first) = first {
                let logged = o.logged.lock().expect("logged lock");
                if logged.leases.is_empty() && self.pending().puts.is_empty() {
                    return Ok(first);
                }
            }
            // Logged lease records are newer than sled's; sled is written
            // only by checkpoints.
            let logged = o.logged.lock().expect("logged lock").leases.clone();
            let mut out = Vec::new();
            for kv in o.leases.iter() {
                let (k, v) = kv.map_err(Error::storage)?;
                if !logged.contains_key(k.as_ref()) {
                    out.push(decode(&k, &v)?);
                }
            }
            for (k, v) in logged.iter().filter(|(_, v)| !v.is_empty()) {
                out.push(decode(k, v)?);
            }
            Ok(out)
        })
    }

    fn recovered(&self) -> Option<String> {
        self.with(|o| Ok(o.ckpt.lock().expect("checkpoint lock").recovered.clone()))
            .unwrap_or(None)
    }

    fn floors(&self) -> Floors {
        let every = self
            .with(|o| Ok(Token(o.ckpt.lock().expect("checkpoint lock").floor)))
            .unwrap_or(Token::NONE);
        let new_jobs = self
            .with(|o| {
                let c = o.ckpt.lock().expect("checkpoint lock").new_job_floor;
                let l = o.logged.lock().expect("logged lock").new_job_floor;
                Ok(Token(c.max(l)))
            })
            .unwrap_or(Token::NONE);
        Floors { every, new_jobs }
    }

    fn count_keys(&self, job: &JobName) -> Result<usize> {
        Ok(self.value_keys(job)?.len())
    }

    fn delete_job(&self, job: &JobName, floor: Token) -> Result<usize> {
        let keys = self.value_keys(job)?;
        let history = self.keys_under(&history_prefix(job))?;
        self.ensure_space(
            64 + keys
                .iter()
                .chain(&history)
                .map(|k| k.len() + 16)
                .sum::<usize>(),
        )?;
        // One staging, under one hold of the pending lock: a sync logs
        // these puts in one batch, which a crash keeps whole or not at all.
        self.write(|_| {
            let mut p = self.pending();
            let n = keys.len();
            for k in keys.into_iter().chain(history) {
                p.push(Kind::Value, k, REMOVED);
            }
            p.push(Kind::Lease, job.as_str().as_bytes().to_vec(), REMOVED);
            p.push(Kind::Floor, Vec::new(), floor.0.to_le_bytes().to_vec());
            Ok(n)
        })
    }

    fn put_lease(
        &self,
        job: &JobName,
        record: &LeaseRecord,
        history: &[HistoryPut],
        keep: u64,
    ) -> Result<()> {
        if history.is_empty() || keep == 0 {
            self.ensure_space(job.as_str().len() + 64)?;
            return self.stage(
                Kind::Lease,
                job.as_str().as_bytes().to_vec(),
                encode_lease(record),
            );
        }
        let puts = encoded_history(job, history);
        // What a grant pushes out of the kept window: usually one tenure,
        // found by a range read (see `trimmed_history`).
        let mut trim = Vec::new();
        for h in history {
            if let HistoryPut::Grant { token, .. } = h {
                trim.extend(trimmed_history(job, *token, keep, |start, last| {
                    Ok(self.value_range(start, last)?.into_keys().collect())
                })?);
            }
        }
        let size: usize = puts
            .iter()
            .map(|(k, v)| k.len() + v.len() + 16)
            .sum::<usize>()
            + trim.iter().map(|k| k.len() + 16).sum::<usize>();
        self.ensure_space(job.as_str().len() + 64 + size)?;
        // One staging, under one hold of the pending lock: one batch of
        // the log, which a crash keeps whole or not at all.
        self.write(|_| {
            let mut p = self.pending();
            for k in trim {
                p.push(Kind::Value, k, REMOVED);
            }
            for (k, v) in puts {
                p.push(Kind::Value, k, v);
            }
            p.push(
                Kind::Lease,
                job.as_str().as_bytes().to_vec(),
                encode_lease(record),
            );
            Ok(())
        })
    }

    fn put_history(&self, job: &JobName, history: &[HistoryPut]) -> Result<()> {
        let puts = encoded_history(job, history);
        self.ensure_space(
            puts.iter()
                .map(|(k, v)| k.len() + v.len() + 16)
                .sum::<usize>()
                + 64,
        )?;
        self.write(|_| {
            let mut p = self.pending();
            for (k, v) in puts {
                p.push(Kind::Value, k, v);
            }
            Ok(())
        })
    }

    fn history(&self, job: &JobName, before: Option<Token>, limit: usize) -> Result<Vec<Tenure>> {
        let start = history_prefix(job);
        let last = match before {
            Some(t) if t.0 == 0 => return Ok(Vec::new()),
            Some(t) => history_key(job, Token(t.0 - 1), 1),
            None => history_key(job, Token(u64::MAX), 1),
        };
        let records = self
            .value_range(&start, &last)?
            .into_iter()
            .map(|(k, v)| Ok((k[start.len()..].to_vec(), decode_value(&v)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut tenures = decode_history(&records)?;
        tenures.reverse();
        tenures.truncate(limit);
        Ok(tenures)
    }

    fn get_value(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        let k = value_key(job, key);
        if let Some((_, v)) = self.pending().overlay.get(&k) {
            if v.is_empty() {
                return Ok(None);
            }
            return decode_value(v).map(Some);
        }
        // Not in the overlay: sled has it, because puts leave the overlay
        // only after they were applied to sled.
        self.with(|o| match o.values.get(&k).map_err(Error::storage)? {
            Some(v) => decode_value(&v).map(Some),
            None => Ok(None),
        })
    }

    fn put_value(&self, job: &JobName, key: &[u8], record: &ValueRecord) -> Result<()> {
        let size = job.as_str().len() + key.len() + record.value.as_ref().map_or(0, Vec::len);
        self.ensure_space(size + 64)?;
        self.stage(Kind::Value, value_key(job, key), encode_value(record))
    }

    fn list_keys(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        budget: ListBudget,
    ) -> Result<KeyPage> {
        use std::ops::Bound;
        let base = value_key(job, b"").len();
        let scan_prefix = value_key(job, prefix);
        let start = match after.map(|a| value_key(job, a)) {
            Some(a) if a >= scan_prefix => Bound::Excluded(a),
            _ => Bound::Included(scan_prefix.clone()),
        };
        // The overlay first, then sled: an entry that leaves the overlay in
        // between was applied to sled before it left. Only the part of the
        // overlay a page can reach is copied.
        let overlay: Vec<(Vec<u8>, Vec<u8>)> = self
            .pending()
            .overlay
            .range((start.clone(), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(&scan_prefix))
            .take(limit.saturating_add(LIST_OVERLAY_SLACK))
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect();
        let overlay_cut = overlay.last().map(|(k, _)| k.clone());
        let overlay_full = overlay.len() >= limit.saturating_add(LIST_OVERLAY_SLACK);
        let mut overlay = overlay.into_iter().peekable();
        let guard = self.open.read().expect("store lock");
        let o = guard
            .as_ref()
            .ok_or_else(|| Error::storage(self.failure("the store is not open")))?;
        let mut sled = o
            .values
            .range((start, Bound::Unbounded))
            .map(|kv| kv.map_err(Error::storage))
            .take_while(|kv| {
                kv.as_ref()
                    .map_or(true, |(k, _)| k.starts_with(&scan_prefix))
            })
            .peekable();
        let mut pager = KeyPager::new(limit, budget);
        loop {
            // Merge the two key-ordered runs; the overlay wins a tie.
            let from_sled = match (overlay.peek(), sled.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(Ok((ks, _)))) => {
                    // Past the copied part of a full overlay, what the
                    // overlay holds is unknown: the page stops there.
                    if overlay_full && overlay_cut.as_deref().is_some_and(|c| &ks[..] > c) {
                        break;
                    }
                    true
                }
                (None, Some(Err(_))) => true,
                (Some((ko, _)), Some(Ok((ks, _)))) => ks[..] < ko[..],
                (_, Some(Err(_))) => true,
            };
            let more = if from_sled {
                let (k, v) = sled.next().expect("peeked")?;
                pager.look_encoded(&k[base..], &v)?
            } else {
                let (k, v) = overlay.next().expect("peeked");
                if sled
                    .peek()
                    .is_some_and(|kv| kv.as_ref().is_ok_and(|(ks, _)| ks[..] == k[..]))
                {
                    sled.next();
                }
                match v.is_empty() {
                    // Removed (a deleted job's key): as if not there.
                    true => true,
                    false => pager.look_encoded(&k[base..], &v)?,
                }
            };
            if !more {
                break;
            }
        }
        let mut page = pager.finish();
        if page.resume_after.is_none() && overlay_full && overlay.peek().is_none() {
            // Stopped at the overlay's cut: resume after it.
            page.resume_after = overlay_cut.map(|k| k[base..].to_vec());
        }
        Ok(page)
    }

    fn sync(&self) -> Result<()> {
        self.write(|o| {
            let puts = std::mem::take(&mut self.pending().puts);
            if puts.is_empty() {
                return Ok(());
            }
            let mut wal = o.wal.lock().expect("wal lock");
            let logged = wal.append(puts.iter().map(|p| &p.record)).map_err(|e| {
                // The batch may be in the file all the same (a failed
                // fdatasync leaves it in the page cache): void at reopen.
                self.discard
                    .lock()
                    .expect("discard lock")
                    .get_or_insert((wal.generation(), wal.end()));
                Error::storage(format!("{}: {e}", wal.path().display()))
            })?;
            let mut done = o.logged.lock().expect("logged lock");
            done.add(puts);
            drop(done);
            if logged {
                return Ok(());
            }
            // Too big for the room left in the log: straight into sled,
            // after what is logged, in one checkpoint, which ends a backup
            // that holds it back.
            o.preempt.store(true, Ordering::Release);
            self.checkpoint_open(o, &mut wal)
        })?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn checkpoint_if_due(&self) -> Result<()> {
        self.checkpoint_when(|o, wal| {
            let log_half_full = wal.used() * 2 > wal.capacity();
            if !log_half_full && o.logged_keys() < CHECKPOINT_KEYS {
                return false;
            }
            // Not while a backup reads sled, as long as the log has room:
            // the flusher must not wait for a backup. Past three quarters,
            // or after BACKUP_HOLD, the backup is ended instead; a
            // checkpoint due for its keys alone waits for the backup.
            if o.gate.try_write().is_err() {
                if !log_half_full {
                    return false;
                }
                let now = leasehold_core::clock::now();
                let since = *o.held_since.lock().expect("held lock").get_or_insert(now);
                if wal.used() * 4 > wal.capacity() * 3
                    || now.saturating_duration_since(since) >= crate::BACKUP_HOLD
                {
                    o.preempt.store(true, Ordering::Release);
                } else {
                    return false;
                }
            }
            true
        })
    }

    fn settle(&self) -> Result<()> {
        // Nothing logged, or a backup reads sled: the next burst's
        // checkpoint will do.
        self.checkpoint_when(|o, wal| wal.used() > 0 && o.gate.try_write().is_ok())?;
        self.settle_memory().map(|_| ())
    }

    fn checkpoint_due(&self) -> bool {
        self.with(|o| {
            let wal = o.wal.lock().expect("wal lock");
            Ok(wal.used() * 2 > wal.capacity() || o.logged_keys() >= CHECKPOINT_KEYS)
        })
        .unwrap_or(false)
    }

    fn checkpoint(&self) -> Result<()> {
        self.write(|o| self.checkpoint_open(o, &mut o.wal.lock().expect("wal lock")))
    }

    fn nearly_full(&self) -> bool {
        self.free().map_or(true, |free| free < 2 * RESERVE)
    }

    fn backup(&self, out: &mut dyn std::io::Write) -> Result<()> {
        // Not during a reclaim of disk space: started after it, on the
        // rewritten store (see `reclaim_now`).
        let running = self.reclaim.running.lock().expect("reclaim lock");
        self.write(|o| self.checkpoint_open(o, &mut o.wal.lock().expect("wal lock")))?;
        self.with(|o| {
            let _gate = o.gate.read().expect("gate lock");
            // Holding the gate: a reclaim that starts from here on ends
            // this backup with its first checkpoint.
            drop(running);
            let mut out = Preemptible {
                out,
                preempt: &o.preempt,
            };
            let c = o.ckpt.lock().expect("checkpoint lock").clone();
            let records = [(Kind::Lease, &o.leases), (Kind::Value, &o.values)]
                .into_iter()
                .flat_map(|(kind, t)| {
                    t.iter().map(move |kv| {
                        let (k, v) = kv.map_err(Error::storage)?;
                        Ok(Record {
                            kind,
                            key: k.to_vec(),
                            value: v.to_vec(),
                        })
                    })
                });
            let keys = crate::datadir::signing_keys(&o.dir)?;
            crate::backup::write_backup(&c, records, keys.as_deref(), &mut out)
        })
    }

    fn needs_reopen(&self) -> bool {
        self.failed.lock().expect("failed lock").is_some()
    }

    fn check_space(&self) -> Result<()> {
        self.ensure_space(0)
    }

    fn read_epoch(&self) -> u64 {
        self.read_epoch.load(Ordering::Acquire)
    }

    fn recheck_value_in_memory(
        &self,
        job: &JobName,
        key: &[u8],
        epoch: u64,
    ) -> Result<Option<Option<Option<ValueRecord>>>> {
        if let Some((_, v)) = self.pending().overlay.get(&value_key(job, key)) {
            if v.is_empty() {
                return Ok(Some(Some(None)));
            }
            return decode_value(v).map(|r| Some(Some(Some(r))));
        }
        // Not in the overlay now, so not at the first read either (entries
        // leave it only at a checkpoint or a reopen, which move the epoch):
        // that read came from sled, and sled has not changed since.
        if self.read_epoch.load(Ordering::Acquire) == epoch {
            return Ok(Some(None));
        }
        // A checkpoint moved records: only sled can tell, and a read of
        // sled waits while a checkpoint's transaction applies.
        Ok(None)
    }

    fn reopen(&self) -> Result<()> {
        self.read_epoch.fetch_add(1, Ordering::AcqRel);
        let mut guard = self.open.write().expect("store lock");
        // Close first: the data dir's lock must be free to open it again,
        // and whatever sled still holds in memory must go. sled's own
        // close unwraps its final fsync (sled 0.34, `Log::drop`): on a disk
        // that fails syncs it panics, which must not unwind through our
        // lock (it would poison it, and the caller's).
        let old = guard.take();
        if let Err(e) = no_panic(move || {
            drop(old);
            Ok(())
        }) {
            tracing::warn!(error = %e, "sled failed while closing; opening it again");
        }
        // Puts that were not logged are lost; the log has the rest.
        *self.pending() = Pending::default();
        // sled's own threads may still be finishing the closed instance's
        // work (a log write, a file truncation), and hold its lock on the
        // data dir until they are done: wait for them, or the open below
        // takes our own past for another process.
        wait_until_unlocked(&self.dir.join("db"), UNLOCK_WAIT)?;
        // A reclaim that failed during its switch left it to finish.
        if let Some(done) = crate::datadir::finish_switch(&self.dir)? {
            tracing::warn!(dir = %self.dir.display(), "{done}");
        }
        let discard = *self.discard.lock().expect("discard lock");
        if let Some((generation, from)) = discard {
            let path = self.dir.join(WAL_FILE);
            wal::discard_after(&path, generation, from).map_err(|e| {
                Error::storage(format!(
                    "cannot void the changes whose sync failed in {}: {e}",
                    path.display()
                ))
            })?;
        }
        *guard = Some(no_panic(|| Open::checked(&self.dir))?);
        *self.discard.lock().expect("discard lock") = None;
        *self.failed.lock().expect("failed lock") = None;
        // Reads made during the reopen may have seen the discarded overlay.
        self.read_epoch.fetch_add(1, Ordering::AcqRel);
        tracing::info!(dir = %self.dir.display(), "store reopened");
        Ok(())
    }
}

/// A backup's output, ended as soon as a checkpoint must not wait for it.
struct Preemptible<'a> {
    out: &'a mut dyn std::io::Write,
    preempt: &'a AtomicBool,
}

impl Preemptible<'_> {
    fn ended(&self) -> std::io::Result<()> {
        if self.preempt.load(Ordering::Acquire) {
            return Err(std::io::Error::other(
                "the backup was ended: its reader was too slow, and the store needed the \
                 checkpoint the backup held back (the log three quarters full, or a checkpoint \
                 waiting 30 s); run it again from a reader that keeps up",
            ));
        }
        Ok(())
    }
}

impl std::io::Write for Preemptible<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        loop {
            self.ended()?;
            match self.out.write(b) {
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        loop {
            self.ended()?;
            match self.out.flush() {
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
                r => return r,
            }
        }
    }
}
