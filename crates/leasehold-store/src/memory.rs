//! A [`Store`] in memory, for tests and for anything that wants the
//! single node's rules without a disk.
//!
//! **"Durable" here means "kept for as long as the process lives"**: a
//! change is durable once a [`Store::sync`] covers it, and a
//! [`Store::reopen`] keeps exactly those changes and drops the rest, as a
//! crash would. Nothing survives the process; a server on it forgets every
//! token at exit, so it must never serve clients that rely on tokens
//! across restarts.
//!
//! Otherwise it keeps the contract of [`Store`] as the embedded store
//! does: changes are visible at once, a reopen keeps a prefix of them in
//! order, each change is atomic, a failed sync puts the store out of
//! service until a reopen, history is trimmed to the `keep` newest
//! tenures, and a deleted job's floor stays. Its records are those of
//! sled, under the same keys (`leasehold_core::record`), so reads in key
//! order and the history's layout are the same.
//!
//! It has no checkpoints, no disk and no read cache: the provided methods
//! of [`Store`] keep their defaults, and [`Store::backup`] refuses.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{Floors, JobName, LeaseRecord, Token};

use crate::{
    decode_history, encode_history, history_key, history_prefix, value_key, HistoryPut, KeyPage,
    KeyPager, ListBudget, Store, Tenure, ValueMeta, ValueRecord,
};
use leasehold_core::record::trimmed_history;

/// Everything the store holds at one point of its log.
#[derive(Clone, Default)]
struct Records {
    leases: BTreeMap<String, LeaseRecord>,
    /// Value and history records, under their store keys.
    values: BTreeMap<Vec<u8>, ValueRecord>,
    new_job_floor: Token,
}

/// One record's change; a staged change is a list of them, applied whole.
#[derive(Clone)]
enum Put {
    Lease(String, Option<LeaseRecord>),
    Value(Vec<u8>, Option<ValueRecord>),
    NewJobFloor(Token),
}

impl Records {
    fn apply(&mut self, puts: &[Put]) {
        for p in puts {
            match p {
                Put::Lease(job, Some(r)) => {
                    self.leases.insert(job.clone(), r.clone());
                }
                Put::Lease(job, None) => {
                    self.leases.remove(job);
                }
                Put::Value(k, Some(r)) => {
                    self.values.insert(k.clone(), r.clone());
                }
                Put::Value(k, None) => {
                    self.values.remove(k);
                }
                Put::NewJobFloor(t) => self.new_job_floor = self.new_job_floor.max(*t),
            }
        }
    }

    /// The value records from `start` up to and including `last`.
    fn range(&self, start: &[u8], last: &[u8]) -> impl Iterator<Item = (&Vec<u8>, &ValueRecord)> {
        self.values
            .range::<[u8], _>((Bound::Included(start), Bound::Included(last)))
    }

    /// Every store key of `job`'s values, tombstones included.
    fn value_keys(&self, job: &JobName) -> Vec<Vec<u8>> {
        self.keys_under(&value_key(job, b""))
    }

    /// Every store key that starts with `prefix`.
    fn keys_under(&self, prefix: &[u8]) -> Vec<Vec<u8>> {
        self.values
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[derive(Default)]
struct Inner {
    /// Every staged change applied: what reads see.
    visible: Records,
    /// Every change a sync covered: what a reopen keeps.
    durable: Records,
    /// The changes staged since the last sync, in order.
    pending: Vec<Vec<Put>>,
    /// Set by a failed sync: changes and syncs fail until a reopen.
    failed: Option<String>,
    /// The next sync fails (see [`MemoryStore::fail_next_sync`]).
    fail_next_sync: bool,
    syncs: u64,
}

/// The in-memory store. See the module docs for what it keeps, and for
/// how long.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// Every grant's token is above it ([`Floors::every`]).
    floor: Token,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// An empty store whose grants all get tokens above `floor`, as after
    /// the recovery or restore of a data dir.
    pub fn with_floor(floor: Token) -> MemoryStore {
        MemoryStore {
            floor,
            ..MemoryStore::default()
        }
    }

    /// Makes the next [`Store::sync`] fail, as a disk's fdatasync can: the
    /// changes it would have covered are not durable, and the store
    /// refuses changes and syncs until [`Store::reopen`], which drops them.
    pub fn fail_next_sync(&self) {
        self.lock().fail_next_sync = true;
    }

    /// How many syncs made changes durable.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("memory store lock")
    }

    /// Stages one change, made from what reads see now, whole.
    fn stage(&self, change: impl FnOnce(&Records) -> Vec<Put>) -> Result<()> {
        let mut g = self.lock();
        if let Some(why) = &g.failed {
            return Err(out_of_service(why));
        }
        let puts = change(&g.visible);
        g.visible.apply(&puts);
        g.pending.push(puts);
        Ok(())
    }
}

fn out_of_service(why: &str) -> Error {
    Error::storage(format!(
        "the store is out of service until it is reopened: {why}"
    ))
}

/// The history records of `history`, as changes.
fn history_puts(job: &JobName, history: &[HistoryPut]) -> Vec<Put> {
    history
        .iter()
        .map(|h| {
            let (k, v) = encode_history(job, h);
            Put::Value(k, Some(v))
        })
        .collect()
}

impl Store for MemoryStore {
    fn put_lease(
        &self,
        job: &JobName,
        record: &LeaseRecord,
        history: &[HistoryPut],
        keep: u64,
    ) -> Result<()> {
        self.stage(|r| {
            let mut puts = Vec::new();
            if !history.is_empty() && keep > 0 {
                for h in history {
                    if let HistoryPut::Grant { token, .. } = h {
                        let keys = |start: &[u8], last: &[u8]| {
                            Ok::<_, Infallible>(
                                r.range(start, last).map(|(k, _)| k.clone()).collect(),
                            )
                        };
                        let Ok(out) = trimmed_history(job, *token, keep, keys);
                        puts.extend(out.into_iter().map(|k| Put::Value(k, None)));
                    }
                }
                puts.extend(history_puts(job, history));
            }
            puts.push(Put::Lease(job.as_str().to_owned(), Some(record.clone())));
            puts
        })
    }

    fn put_history(&self, job: &JobName, history: &[HistoryPut]) -> Result<()> {
        self.stage(|_| history_puts(job, history))
    }

    fn put_value(&self, job: &JobName, key: &[u8], record: &ValueRecord) -> Result<()> {
        self.stage(|_| vec![Put::Value(value_key(job, key), Some(record.clone()))])
    }

    fn delete_job(&self, job: &JobName, floor: Token) -> Result<usize> {
        let mut removed = 0;
        self.stage(|r| {
            let keys = r.value_keys(job);
            removed = keys.len();
            let history = r.keys_under(&history_prefix(job));
            let mut puts: Vec<Put> = (keys.into_iter().chain(history))
                .map(|k| Put::Value(k, None))
                .collect();
            puts.push(Put::Lease(job.as_str().to_owned(), None));
            puts.push(Put::NewJobFloor(floor));
            puts
        })?;
        Ok(removed)
    }

    fn sync(&self) -> Result<()> {
        let mut g = self.lock();
        if let Some(why) = &g.failed {
            return Err(out_of_service(why));
        }
        if std::mem::take(&mut g.fail_next_sync) {
            let why = "a sync failed (injected)".to_owned();
            g.failed = Some(why.clone());
            return Err(Error::storage(why));
        }
        let g = &mut *g;
        for puts in g.pending.drain(..) {
            g.durable.apply(&puts);
        }
        g.syncs += 1;
        Ok(())
    }

    fn reopen(&self) -> Result<()> {
        let mut g = self.lock();
        g.pending.clear();
        g.visible = g.durable.clone();
        g.failed = None;
        Ok(())
    }

    fn needs_reopen(&self) -> bool {
        self.lock().failed.is_some()
    }

    fn leases(&self) -> Result<Vec<(JobName, LeaseRecord)>> {
        Ok(self
            .lock()
            .visible
            .leases
            .iter()
            .map(|(j, r)| (JobName::from_trusted(j.clone()), r.clone()))
            .collect())
    }

    fn floors(&self) -> Floors {
        // As the embedded store: the new-job floor a sync made durable.
        Floors {
            every: self.floor,
            new_jobs: self.lock().durable.new_job_floor,
        }
    }

    fn get_value(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        Ok(self
            .lock()
            .visible
            .values
            .get(&value_key(job, key))
            .cloned())
    }

    fn list_keys(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        budget: ListBudget,
    ) -> Result<KeyPage> {
        let base = value_key(job, b"").len();
        let scan_prefix = value_key(job, prefix);
        let start = match after.map(|a| value_key(job, a)) {
            Some(a) if a >= scan_prefix => Bound::Excluded(a),
            _ => Bound::Included(scan_prefix.clone()),
        };
        let mut pager = KeyPager::new(limit, budget);
        let g = self.lock();
        let range = g.visible.values.range((start, Bound::Unbounded));
        for (k, r) in range.take_while(|(k, _)| k.starts_with(&scan_prefix)) {
            let meta = r.value.as_ref().map(|v| ValueMeta {
                token: r.token,
                version: r.version,
                size: v.len() as u32,
            });
            let len = k.len() + 18 + r.value.as_ref().map_or(0, Vec::len);
            if !pager.look(&k[base..], meta, len) {
                break;
            }
        }
        Ok(pager.finish())
    }

    fn history(&self, job: &JobName, before: Option<Token>, limit: usize) -> Result<Vec<Tenure>> {
        let start = history_prefix(job);
        let last = match before {
            Some(t) if t.0 == 0 => return Ok(Vec::new()),
            Some(t) => history_key(job, Token(t.0 - 1), 1),
            None => history_key(job, Token(u64::MAX), 1),
        };
        let records: Vec<(Vec<u8>, ValueRecord)> = self
            .lock()
            .visible
            .range(&start, &last)
            .map(|(k, r)| (k[start.len()..].to_vec(), r.clone()))
            .collect();
        let mut tenures = decode_history(&records)?;
        tenures.reverse();
        tenures.truncate(limit);
        Ok(tenures)
    }

    fn count_keys(&self, job: &JobName) -> Result<usize> {
        Ok(self.lock().visible.value_keys(job).len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::lease::{Limits, TenureEnd};
    use std::time::Duration;

    fn job(name: &str) -> JobName {
        Limits::default().job(name).unwrap()
    }

    fn lease(token: u64) -> LeaseRecord {
        LeaseRecord {
            issued: Default::default(),
            holder: None,
            token: Token(token),
            ttl: Duration::from_secs(5),
            owner: None,
            value: Default::default(),
        }
    }

    fn val(token: u64, version: u64, v: Option<&str>) -> ValueRecord {
        ValueRecord {
            token: Token(token),
            version,
            value: v.map(|v| v.as_bytes().to_vec()),
        }
    }

    fn grant(token: u64) -> HistoryPut {
        HistoryPut::Grant {
            token: Token(token),
            holder: Limits::default().holder("h").unwrap(),
            at_unix_ms: token * 1000,
            ttl: Duration::from_secs(5),
            value: Default::default(),
        }
    }

    /// Changes are read at once; a reopen keeps what a sync covered, in
    /// order, and drops the rest.
    #[test]
    fn a_reopen_keeps_what_was_synced_and_drops_the_rest() {
        let s = MemoryStore::new();
        let a = job("a");
        s.put_lease(&a, &lease(1), &[], 0).unwrap();
        s.put_value(&a, b"k", &val(1, 1, Some("one"))).unwrap();
        s.sync().unwrap();
        s.put_lease(&a, &lease(2), &[], 0).unwrap();
        s.put_value(&a, b"k", &val(2, 2, Some("two"))).unwrap();
        assert_eq!(s.get_value(&a, b"k").unwrap(), Some(val(2, 2, Some("two"))));
        assert_eq!(s.leases().unwrap()[0].1.token, Token(2));
        s.reopen().unwrap();
        assert_eq!(s.get_value(&a, b"k").unwrap(), Some(val(1, 1, Some("one"))));
        assert_eq!(s.leases().unwrap(), vec![(a, lease(1))]);
        assert_eq!(s.syncs(), 1);
    }

    /// A failed sync makes nothing durable, and the store refuses changes
    /// and syncs until a reopen, which drops what the sync would have
    /// covered.
    #[test]
    fn a_failed_sync_refuses_everything_until_a_reopen() {
        let s = MemoryStore::new();
        let a = job("a");
        s.put_value(&a, b"k", &val(1, 1, Some("one"))).unwrap();
        s.fail_next_sync();
        s.sync().unwrap_err();
        assert!(s.needs_reopen());
        s.put_value(&a, b"x", &val(1, 1, Some("x"))).unwrap_err();
        s.sync().unwrap_err();
        s.reopen().unwrap();
        assert!(!s.needs_reopen());
        assert_eq!(s.get_value(&a, b"k").unwrap(), None);
        s.put_value(&a, b"k", &val(1, 1, Some("again"))).unwrap();
        s.sync().unwrap();
        s.reopen().unwrap();
        assert_eq!(
            s.get_value(&a, b"k").unwrap(),
            Some(val(1, 1, Some("again")))
        );
    }

    /// Listing skips tombstones and other jobs and pages by key; counting
    /// includes tombstones; a deletion removes the job's values and lease,
    /// keeps its history, and raises the new-job floor once synced.
    #[test]
    fn keys_list_count_and_a_deletion() {
        let s = MemoryStore::new();
        let (a, b) = (job("a"), job("b"));
        for k in ["p1", "p2", "q1", "p3"] {
            s.put_value(&a, k.as_bytes(), &val(1, 1, Some(k))).unwrap();
        }
        s.put_value(&a, b"p2", &val(1, 2, None)).unwrap();
        s.put_value(&b, b"p9", &val(1, 1, Some("b"))).unwrap();
        let keys = |after: Option<&[u8]>, limit| -> Vec<String> {
            s.list_keys(&a, b"p", after, limit, ListBudget::default())
                .unwrap()
                .keys
                .into_iter()
                .map(|(k, _)| String::from_utf8(k).unwrap())
                .collect()
        };
        assert_eq!(keys(None, 10), ["p1", "p3"]);
        assert_eq!(keys(Some(b"p1"), 10), ["p3"]);
        assert_eq!(keys(None, 1), ["p1"]);
        assert_eq!(s.count_keys(&a).unwrap(), 4);
        s.put_lease(&a, &lease(7), &[grant(7)], 10).unwrap();
        assert_eq!(s.delete_job(&a, Token(7)).unwrap(), 4);
        assert_eq!(s.count_keys(&a).unwrap(), 0);
        assert!(s.leases().unwrap().is_empty());
        assert!(
            s.history(&a, None, 10).unwrap().is_empty(),
            "history goes too"
        );
        assert_eq!(s.count_keys(&b).unwrap(), 1);
        assert_eq!(s.floors().new_jobs, Token::NONE, "not synced yet");
        s.sync().unwrap();
        assert_eq!(s.floors().new_jobs, Token(7));
        s.delete_job(&b, Token(3)).unwrap();
        s.sync().unwrap();
        assert_eq!(s.floors().new_jobs, Token(7), "a floor never goes down");
    }

    /// History: newest first, paged by token, and a grant trims the
    /// tenures beyond the `keep` newest.
    #[test]
    fn history_is_kept_for_the_newest_tenures() {
        let s = MemoryStore::new();
        let a = job("a");
        for t in 1..=5 {
            let end = HistoryPut::End {
                token: Token(t - 1),
                how: TenureEnd::Released,
                at_unix_ms: t * 1000,
            };
            let history = match t {
                1 => vec![grant(t)],
                _ => vec![end, grant(t)],
            };
            s.put_lease(&a, &lease(t), &history, 3).unwrap();
        }
        let h = s.history(&a, None, 10).unwrap();
        let tokens: Vec<u64> = h.iter().map(|t| t.token.0).collect();
        assert_eq!(tokens, [5, 4, 3]);
        assert_eq!(h[0].end, None);
        assert_eq!(h[1].end, Some((TenureEnd::Released, 5000)));
        let before: Vec<u64> = s
            .history(&a, Some(Token(5)), 1)
            .unwrap()
            .iter()
            .map(|t| t.token.0)
            .collect();
        assert_eq!(before, [4]);
        assert!(s.history(&a, Some(Token(0)), 10).unwrap().is_empty());
    }
}
