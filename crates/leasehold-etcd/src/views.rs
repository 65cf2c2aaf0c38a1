//! Reads of jobs, which change nothing: one job's records and line of
//! waiters at one revision (`read_job`, which every decision starts
//! from), a lease as shown with what etcd says it has left (`GetLease`),
//! a page of leases after a cursor (`ListLeases`), and the status page's
//! rows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold_backend::{Statuses, Waiting};
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{JobName, LeaseView};

use super::client::{range_req, ranges};
use super::keys::{self, Holding, JobState};
use super::queue::{self, Line};
use super::{decide, EtcdNode, Read};

impl EtcdNode {
    /// The Acquires waiting for `job`, first in line first (`ListWaiters`):
    /// the preferred candidates' keys, then the others', each class by
    /// create revision (its place in line), at one revision; at most
    /// `limit`, and how many wait in all.
    pub async fn waiters(&self, job: &JobName, limit: usize) -> Result<(Vec<Waiting>, usize)> {
        self.bounded("ListWaiters", Duration::ZERO, async {
            self.check_open()?;
            let reads = queue::line_by_age(&self.inner.keys, job.as_str()).map(|mut r| {
                r.limit = limit as i64;
                r
            });
            let answers = self.failed(self.inner.etcd.read_txn(reads.to_vec()).await)?;
            let classes = ranges(answers);
            let waiting = classes.iter().map(|r| r.count.max(0) as usize).sum();
            let line = classes
                .into_iter()
                .zip([true, false])
                .flat_map(|(r, preferred)| r.kvs.into_iter().map(move |kv| (kv, preferred)))
                .filter_map(|(kv, preferred)| {
                    let (holder, _) = keys::decode_waiter(&kv.value)?;
                    Some(Waiting { holder, preferred })
                })
                .take(limit)
                .collect();
            Ok((line, waiting))
        })
        .await
    }

    /// Reads the job's keys, how many wait in its line and (when given) our
    /// own waiter key, at one revision.
    /// Calls that need no waiter key of their own share one read
    /// ([`reads`](super::reads)).
    pub(super) async fn read_job(&self, job: &JobName, mine: Option<&[u8]>) -> Result<Read> {
        match mine {
            None => self.read_job_shared(job).await,
            Some(_) => {
                self.read_job_noting(job, mine, &AtomicBool::new(false))
                    .await
            }
        }
    }

    /// [`EtcdNode::read_job`], on its own, setting `sent` when it is sent.
    pub(super) async fn read_job_noting(
        &self,
        job: &JobName,
        mine: Option<&[u8]>,
        sent: &AtomicBool,
    ) -> Result<Read> {
        let k = &self.inner.keys;
        let (js, je) = k.job_range(job.as_str());
        let mut reads = vec![range_req(js, je, 0)];
        reads.extend(queue::line_reads(k, job.as_str(), mine));
        let r = self.failed(self.inner.etcd.read_txn_noting(reads, sent).await)?;
        let revision = r.header.as_ref().map_or(0, |h| h.revision);
        let mut rs = ranges(r).into_iter();
        let kvs = rs.next().map(|r| r.kvs).unwrap_or_default();
        Ok(Read {
            revision,
            job: k.job(job.as_str(), &kvs)?,
            line: Line::from_ranges(rs),
        })
    }

    /// `read`'s line with its first waiter, read at `read`'s revision (see
    /// [`queue::first_read`]).
    pub(super) async fn first_in_line(&self, job: &JobName, read: &Read) -> Result<Line> {
        let req = queue::first_read(&self.inner.keys, job.as_str(), &read.line, read.revision);
        let r = self.failed(self.inner.etcd.range(req).await)?;
        Ok(read.line.with_first(r))
    }

    /// How long the holding has left, from etcd (whole seconds).
    /// Shared with the callers that ask at once ([`reads`](super::reads)).
    async fn remaining(&self, h: &Holding) -> Result<Duration> {
        let (etcd, id) = (self.inner.etcd.clone(), h.lease);
        let left = self
            .inner
            .ttls
            .get(&id, move |sent| async move {
                etcd.time_to_live_noting(id, &sent).await
            })
            .await;
        let left = self.failed(left)?;
        Ok(Duration::from_secs(left.unwrap_or(0).max(0) as u64))
    }

    /// The job's lease as read, with `remaining` from etcd when held.
    pub(super) async fn view(&self, job: &JobName, st: &JobState) -> Result<LeaseView> {
        let remaining = match &st.holder {
            Some(h) => self.remaining(h).await?,
            None => Duration::ZERO,
        };
        Ok(decide::view(job, st, remaining, clock::now()))
    }

    /// Who holds `job` (the holder as stored), as this frontend's mirror
    /// last saw it: for an early refusal only, with no read of etcd.
    pub fn holder_hint(&self, job: &JobName) -> Option<String> {
        self.inner.mirror.holder(job.as_str())
    }

    /// The lease of `job`.
    pub async fn lease(&self, job: &JobName) -> Result<LeaseView> {
        self.bounded("GetLease", Duration::ZERO, self.lease_unbounded(job))
            .await
    }

    /// The work of [`EtcdNode::lease`], which bounds it.
    async fn lease_unbounded(&self, job: &JobName) -> Result<LeaseView> {
        let read = self.read_job(job, None).await?;
        self.view(job, &read.job).await
    }

    /// Up to `limit` leases of jobs starting with `prefix`, after `after`,
    /// in job order, read at one revision.
    ///
    /// A job whose record does not decode fails the whole listing, with an
    /// error naming that job.
    pub async fn leases(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LeaseView>> {
        self.bounded(
            "ListLeases",
            Duration::ZERO,
            self.leases_unbounded(prefix, after, limit),
        )
        .await
    }

    /// The work of [`EtcdNode::leases`], which bounds it.
    async fn leases_unbounded(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LeaseView>> {
        let k = &self.inner.keys;
        let mut jobs: Vec<(JobName, JobState)> = Vec::new();
        let mut from = after.map(str::to_owned);
        // A job with a record that does not decode is skipped, named in a
        // WARN line and counted, so one damaged job does not hide the
        // others; the scan goes on until `limit` readable jobs are found,
        // so a full page still means there may be more.
        loop {
            let (start, end) = k.jobs_range(prefix, from.as_deref());
            // Each job has at most two keys: twice what is still wanted
            // holds that many whole jobs.
            let want = 2 * (limit - jobs.len()).max(1) as i64;
            let r = self.failed(self.inner.etcd.range(range_req(start, end, want)).await)?;
            let parsed = k.jobs(&r.kvs);
            let n = parsed.len();
            let mut last = None;
            for (i, (name, st)) in parsed.into_iter().enumerate() {
                // The last job of a range that went on may be cut off (its
                // holder key in, its token key out): the next round reads
                // it whole.
                if r.more && i + 1 == n && n > 1 {
                    break;
                }
                last = Some(name.clone());
                match st {
                    Ok(st) if st.token.is_some() => jobs.push((JobName::from_trusted(name), st)),
                    Ok(_) => {}
                    Err(bad) => {
                        self.inner
                            .counters
                            .unreadable_jobs
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(job = %bad.job, "ListLeases skipped a job: {bad}");
                    }
                }
                if jobs.len() == limit {
                    break;
                }
            }
            if jobs.len() >= limit || !r.more || last.is_none() {
                break;
            }
            from = last;
        }
        let mut set = tokio::task::JoinSet::new();
        for (i, (_, st)) in jobs.iter().enumerate() {
            if let Some(h) = &st.holder {
                let etcd = self.inner.etcd.clone();
                let lease = h.lease;
                set.spawn(async move { (i, etcd.time_to_live(lease).await) });
            }
        }
        let mut remaining = vec![Duration::ZERO; jobs.len()];
        while let Some(done) = set.join_next().await {
            let (i, left) = done.map_err(|e| Error::Storage(format!("lookup task failed: {e}")))?;
            remaining[i] = Duration::from_secs(self.failed(left)?.unwrap_or(0).max(0) as u64);
        }
        let now = clock::now();
        Ok(jobs
            .iter()
            .zip(remaining)
            .map(|((job, st), left)| decide::view(job, st, left, now))
            .collect())
    }

    /// Up to `limit` jobs starting with `prefix` (after `after`) for the
    /// status page: each lease as listed, and its leaderless time from the
    /// metrics mirror. Waiters and fenced writes are not counted across
    /// frontends: zero here (the page says they are not known).
    pub async fn status(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Statuses> {
        self.bounded(
            "status",
            Duration::ZERO,
            self.status_unbounded(prefix, after, limit),
        )
        .await
    }

    /// The work of [`EtcdNode::status`], which bounds it.
    async fn status_unbounded(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Statuses> {
        let views = self.leases_unbounded(prefix, after, limit).await?;
        let names: Vec<&str> = views.iter().map(|v| v.job.as_str()).collect();
        let vacant = self.inner.mirror.vacant_for(&names);
        let jobs = views
            .iter()
            .zip(vacant)
            .map(|(v, vacant_for)| leasehold_core::lease::JobStatus {
                vacant_for: match v.holder() {
                    Some(_) => None,
                    None => Some(vacant_for.unwrap_or_default()),
                },
                view: v.clone(),
                waiters: 0,
                fenced: 0,
                fenced_ago: None,
            })
            .collect();
        Ok(Statuses {
            jobs,
            counted: false,
        })
    }

    /// The jobs whose leadership changes from now on, as this frontend's
    /// mirror of etcd sees them.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<JobName> {
        self.inner.mirror.changes()
    }
}
