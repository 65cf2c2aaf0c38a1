//! The fenced key-value store on etcd: `CheckedWrite` and `WriteStream`
//! (each write one transaction that compares the holder key, the key's
//! stored token and its revision), and the linearizable reads of a job's
//! keys (`Read`, `ListKeys`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use leasehold_backend::{HolderGuard, Staged, Write};
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules::WriteRefusal;
use leasehold_core::lease::{JobName, Token};
use leasehold_core::record::{KeyPage, KeyPager, ListBudget, ValueRecord};

use super::client::{range_req, ranges};
use super::decide::{self, Refused};
use super::keys::{decode_value, decode_value_meta};
use super::{contention, txn, EtcdNode, MAX_TRIES};

/// The most keys one read of a listing asks etcd for: at most 64 values of
/// 64 KiB, 4 MiB, in one answer.
const LIST_CHUNK: usize = 64;

impl EtcdNode {
    /// Many writes, made one after the other, each its own transaction
    /// bounded on its own, and durable when this returns (the sequence
    /// number is 0). Each is decided as [`EtcdNode::checked_write`]
    /// decides one, `guard` (if any) asked on the very read its
    /// transaction is made against. A write refused by the guard, the
    /// fence or a quota is that write's outcome; any other error fails
    /// the batch, writes before it made.
    pub async fn stage_writes(
        &self,
        batch: Vec<Write>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<Staged> {
        let mut outcomes = Vec::with_capacity(batch.len());
        for w in batch {
            outcomes.push(
                match self
                    .bounded(
                        "WriteStream",
                        Duration::ZERO,
                        self.checked_write_unbounded(&w.job, w.token, &w.key, w.value, guard),
                    )
                    .await
                {
                    Ok(v) => Ok(v),
                    Err(
                        e @ (Error::Fenced { .. }
                        | Error::UnknownToken { .. }
                        | Error::QuotaExceeded { .. }
                        | Error::PermissionDenied { .. }),
                    ) => Err(e),
                    Err(e) => return Err(e),
                },
            );
        }
        Ok(Staged { outcomes, seq: 0 })
    }

    /// Stores `value` (or deletes, when `None`) under (job, key), if the
    /// core's `rules::admit_write` admits it: `guard` (if any) lets the
    /// live grant's holder be written for, then `token` passes the fence,
    /// both decided on the one read the write is made against, in the
    /// single node's order. Returns the key's new version.
    pub async fn checked_write(
        &self,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<u64> {
        self.bounded(
            "CheckedWrite",
            Duration::ZERO,
            self.checked_write_unbounded(job, token, key, value, guard),
        )
        .await
    }

    /// The work of [`EtcdNode::checked_write`], which bounds it.
    async fn checked_write_unbounded(
        &self,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<u64> {
        self.check_open()?;
        let k = &self.inner.keys;
        let (js, je) = k.job_range(job.as_str());
        let vk = k.value(job.as_str(), key);
        for _ in 0..MAX_TRIES {
            let r = self.failed(
                self.inner
                    .etcd
                    .read_txn(vec![
                        range_req(js.clone(), je.clone(), 0),
                        range_req(vk.clone(), Vec::new(), 0),
                    ])
                    .await,
            )?;
            let mut rs = ranges(r).into_iter();
            let st = k.job(job.as_str(), &rs.next().map(|r| r.kvs).unwrap_or_default())?;
            let existing = match rs.next().and_then(|r| r.kvs.into_iter().next()) {
                Some(kv) => Some((decode_value(&kv.value)?, kv.mod_revision)),
                None => None,
            };
            let key_token = existing.as_ref().map(|(r, _)| r.token);
            let guard = guard.map(|g| g as &dyn Fn(&str) -> bool);
            let h = match decide::write(&st, token, key_token, guard, self.faults()) {
                Ok(h) => h,
                Err(r) => {
                    if matches!(r, Refused::Write(WriteRefusal::Fenced(_))) {
                        self.inner
                            .counters
                            .fenced_writes
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(r.error(job, token, st.token()));
                }
            };
            // Admitted: `h` is the live grant, with this token (`None`
            // only under the broken rule "no-fence").
            let rec = ValueRecord {
                token,
                version: existing.as_ref().map_or(0, |(r, _)| r.version) + 1,
                value: value.clone(),
            };
            let stored_at = existing.as_ref().map(|(_, rev)| *rev);
            if stored_at.is_none() {
                // A new key: counted (tombstones included) before the
                // write. Parallel writes of new keys can pass the count
                // together, so a job can go over by as many.
                let (vs, ve) = k.values_range(job.as_str(), b"", None);
                let mut req = range_req(vs, ve, 0);
                req.count_only = true;
                let n = self.failed(self.inner.etcd.range(req).await)?.count;
                if n >= self.inner.limits.max_keys_per_job as i64 {
                    return Err(self.inner.limits.too_many_keys());
                }
            }
            let req = txn::write(k, job.as_str(), h, &vk, stored_at, &rec);
            if self.faults().ack_before_sync() {
                // The broken rule "ack-before-sync": answered before the
                // transaction has committed.
                self.commit_later(req);
                return Ok(rec.version);
            }
            if self.failed(self.inner.etcd.txn(req).await)?.succeeded {
                self.inner.counters.writes.fetch_add(1, Ordering::Relaxed);
                return Ok(rec.version);
            }
        }
        Err(contention("CheckedWrite"))
    }

    /// The record under (job, key): a linearizable read.
    pub async fn read(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        self.bounded("Read", Duration::ZERO, self.read_unbounded(job, key))
            .await
    }

    /// The work of [`EtcdNode::read`], which bounds it.
    async fn read_unbounded(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        let vk = self.inner.keys.value(job.as_str(), key);
        let r = self.failed(self.inner.etcd.range(range_req(vk, Vec::new(), 0)).await)?;
        r.kvs.first().map(|kv| decode_value(&kv.value)).transpose()
    }

    /// One page of `job`'s live keys starting with `prefix`, after
    /// `after`: at most `limit`, within a [`ListBudget`] of its own
    /// (deleted keys are looked at, and skipped).
    pub async fn keys(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<KeyPage> {
        self.bounded(
            "ListKeys",
            Duration::ZERO,
            self.keys_unbounded(job, prefix, after, limit),
        )
        .await
    }

    /// The work of [`EtcdNode::keys`], which bounds it. The range is read
    /// in chunks of at most [`LIST_CHUNK`] keys at one revision, so that
    /// no answer of etcd's is much larger than the page's budget.
    async fn keys_unbounded(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<KeyPage> {
        let k = &self.inner.keys;
        let (mut start, end) = k.values_range(job.as_str(), prefix, after);
        let mut pager = KeyPager::new(limit, ListBudget::default());
        let mut revision = 0;
        loop {
            let mut req = range_req(start.clone(), end.clone(), LIST_CHUNK.min(limit) as i64);
            req.revision = revision;
            let r = self.failed(self.inner.etcd.range(req).await)?;
            if revision == 0 {
                revision = r.header.as_ref().map_or(0, |h| h.revision);
            }
            for kv in &r.kvs {
                let user = k.value_user_key(job.as_str(), &kv.key).unwrap_or_default();
                let meta = decode_value_meta(&kv.value)?;
                if !pager.look(user, meta, kv.key.len() + kv.value.len()) {
                    return Ok(pager.finish());
                }
            }
            match r.kvs.last() {
                Some(last) if r.more => {
                    start = last.key.clone();
                    start.push(0);
                }
                _ => return Ok(pager.finish()),
            }
        }
    }
}
