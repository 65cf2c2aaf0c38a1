//! The store-wide `meta` record: how many jobs there are (`--max-jobs`)
//! and the new-job floor. A frontend writes it at start-up when its
//! prefix has none; a grant that creates a job compares and puts it
//! (`acquire`); `DeleteJob` raises the floor in it, in the deletion's own
//! transaction, so that a job created again never repeats a token. Each
//! principal's count of the jobs it created (`max_jobs`) is put by the
//! same two transactions. Kept
//! apart so that the record and every writer of it but the grant read
//! together.

use std::time::Duration;

use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{JobName, Token};

use super::client::{self, range_req};
use super::keys::{self, Meta, MetaRec, Owned};
use super::{contention, txn, EtcdNode, MAX_TRIES};

impl EtcdNode {
    /// Reads the store-wide `meta` record.
    pub(super) async fn meta(&self) -> Result<Meta> {
        let r = self.failed(
            self.inner
                .etcd
                .range(range_req(self.inner.keys.meta(), Vec::new(), 0))
                .await,
        )?;
        match r.kvs.first() {
            Some(kv) => Ok(Meta {
                rec: MetaRec::decode(&kv.value)?,
                mod_revision: kv.mod_revision,
            }),
            None => Ok(Meta::default()),
        }
    }

    /// Reads `principal`'s count of the jobs it owns ([`keys::Keys::owned`]).
    pub(super) async fn owned(&self, principal: &str) -> Result<Owned> {
        let r = self.failed(
            self.inner
                .etcd
                .range(range_req(self.inner.keys.owned(principal), Vec::new(), 0))
                .await,
        )?;
        match r.kvs.first() {
            Some(kv) => Owned::decode(&kv.value, kv.mod_revision),
            None => Ok(Owned::default()),
        }
    }

    /// Writes the `meta` record if there is none yet (a prefix written by
    /// an older leasehold, or a new one): the job count, counted once from
    /// the token keys, and no floor.
    pub(super) async fn init_meta(&self) -> Result<()> {
        if self.meta().await?.mod_revision != 0 {
            return Ok(());
        }
        let k = &self.inner.keys;
        let (mut start, end) = k.all_jobs();
        let mut jobs = 0u64;
        let mut revision = 0;
        loop {
            let mut req = range_req(start.clone(), end.clone(), 10_000);
            req.keys_only = true;
            req.revision = revision;
            let r = self.failed(self.inner.etcd.range(req).await)?;
            revision = r.header.as_ref().map_or(0, |h| h.revision);
            jobs += r
                .kvs
                .iter()
                .filter(|kv| matches!(k.parse_job_key(&kv.key), Some((_, keys::JobKey::Token))))
                .count() as u64;
            match r.kvs.last() {
                Some(kv) if r.more => {
                    start = kv.key.clone();
                    start.push(0);
                }
                _ => break,
            }
        }
        let rec = MetaRec {
            new_job_floor: Token::NONE,
            jobs,
        };
        let req = client::pb::TxnRequest {
            compare: vec![client::create_is(k.meta(), 0)],
            success: vec![client::put_op(k.meta(), rec.encode(), 0)],
            failure: Vec::new(),
        };
        // Lost to another frontend's: theirs counted the same jobs.
        self.failed(self.inner.etcd.txn(req).await)?;
        Ok(())
    }

    /// Deletes `job`, its keys and its history, if its lease is not live
    /// and nobody waits for it; returns whether there was such a job. One
    /// transaction deletes the job's keys and raises the new-job floor to
    /// the job's newest token, comparing that the holder key is still
    /// absent and the token key and `meta` unchanged since they were read.
    pub async fn delete_job(&self, job: &JobName) -> Result<bool> {
        self.bounded("DeleteJob", Duration::ZERO, self.delete_job_unbounded(job))
            .await
    }

    /// The work of [`EtcdNode::delete_job`], which bounds it.
    async fn delete_job_unbounded(&self, job: &JobName) -> Result<bool> {
        self.check_open()?;
        let k = &self.inner.keys;
        for _ in 0..MAX_TRIES {
            let read = self.read_job(job, None).await?;
            let Some(t) = &read.job.token else {
                return Ok(false);
            };
            if let Some(h) = &read.job.holder {
                return Err(Error::JobInUse {
                    job: job.to_string(),
                    why: format!(
                        "its lease is held by {:?} with token {}",
                        h.rec.holder, h.rec.token
                    ),
                });
            }
            if read.line.waiting > 0 {
                return Err(Error::JobInUse {
                    job: job.to_string(),
                    why: format!("{} Acquire(s) wait for it", read.line.waiting),
                });
            }
            let meta = self.meta().await?;
            let rec = MetaRec {
                new_job_floor: meta.rec.new_job_floor.max(t.token),
                jobs: meta.rec.jobs.saturating_sub(1),
            };
            let mut req = txn::delete_job(k, job.as_str(), &read.job, &meta, &rec);
            // Its owner's room back.
            if let Some(owner) = &t.owner {
                let owned = self.owned(owner).await?;
                if owned.mod_revision != 0 {
                    let to = owned.jobs.saturating_sub(1);
                    txn::count_owned(k, &mut req, owner, owned, to);
                }
            }
            if self.failed(self.inner.etcd.txn(req).await)?.succeeded {
                tracing::info!(job = %job, "job deleted");
                return Ok(true);
            }
        }
        Err(contention("DeleteJob"))
    }
}
