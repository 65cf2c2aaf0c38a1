//! What the node shows of its leases, each once durable: one lease
//! (`GetLease`, and `lease_now` for checks that are never shown), a page
//! of leases after a cursor (`ListLeases`), the status page's rows and
//! its feed of changes, and a job's history of leaders (`GetHistory`).

use leasehold_backend::{Statuses, Waiting};
use leasehold_core::clock;
use leasehold_core::error::Result;
use leasehold_core::lease::{HistoryEvent, JobName, LeaseState, LeaseView, TenureEnd, Token};
use leasehold_store::{HistoryPut, Tenure};

use super::{history_put, Node};

impl Node {
    /// Up to `limit` tenures of `job`'s history with a token below
    /// `before` (all when `None`), newest first, each durable. The newest
    /// may be open (its holder leads, or led when the server last
    /// started); one that ran out unrecorded shows as expired at its
    /// deadline.
    pub async fn history(
        &self,
        job: &JobName,
        before: Option<Token>,
        limit: usize,
    ) -> Result<Vec<Tenure>> {
        // What the table knows of a tenure that ran out, first: a tenure
        // read from the store after this is at least as new.
        let end = {
            let st = self.lock();
            let now = clock::now();
            st.table.unrecorded_end(job, now).map(|(token, at)| {
                let e = HistoryEvent::Ended {
                    token,
                    how: TenureEnd::Expired,
                    at,
                };
                (token, history_put(&e, now, clock::wall_unix_ms()))
            })
        };
        let mut tenures = self.inner.store.history(job, before, limit)?;
        // What was read may be staged and not durable yet: wait until
        // everything staged by now is. (A decision stages its records and
        // takes its number under the lock: once the lock is had, every
        // record this read saw has its number.)
        let seq = {
            let _st = self.lock();
            self.inner.commit.staged()
        };
        self.inner.commit.wait(seq).await?;
        if let Some((
            token,
            HistoryPut::End {
                how, at_unix_ms, ..
            },
        )) = end
        {
            if let Some(t) = tenures
                .iter_mut()
                .find(|t| t.token == token && t.end.is_none())
            {
                t.end = Some((how, at_unix_ms));
            }
        }
        Ok(tenures)
    }

    /// Up to `limit` jobs starting with `prefix` (after `after`), as the
    /// status page shows them: each lease with its leaderless time, its
    /// waiters and its fenced writes, once what it shows is durable.
    pub async fn status(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Statuses> {
        let (rows, seq) = {
            let st = self.lock();
            let rows = st.table.status(prefix, after, limit, clock::now());
            (rows, self.inner.commit.staged())
        };
        self.inner.commit.wait(seq).await?;
        Ok(Statuses {
            jobs: rows,
            counted: true,
        })
    }

    /// The jobs whose leadership changes from now on (or that refuse a
    /// fenced write), as they change. A receiver that falls more than
    /// [`CHANGES_BUFFERED`](leasehold_backend::CHANGES_BUFFERED) behind is
    /// told it lagged, and reads afresh.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<JobName> {
        self.inner.changes.subscribe()
    }

    /// Who holds `job` (the holder as stored) as decided now: for an
    /// early refusal only.
    pub fn holder_hint(&self, job: &JobName) -> Option<String> {
        match self.lease_now(job).state {
            LeaseState::Held { holder, .. } => Some(holder.as_str().to_owned()),
            LeaseState::Free(_) => None,
        }
    }

    /// The lease of `job` as decided now, durable or not: for checks made
    /// before a decision that re-checks what matters under the lock (never
    /// shown to a client).
    pub fn lease_now(&self, job: &JobName) -> LeaseView {
        self.lock().table.view(job, clock::now())
    }

    /// The lease of `job`, once the change it shows is durable.
    pub async fn lease(&self, job: &JobName) -> Result<LeaseView> {
        let (view, seq) = {
            let st = self.lock();
            // A job the table does not know may have just been deleted:
            // wait for everything staged, its deletion included.
            let seq = match st.table.contains(job) {
                true => st.table.stamp(job),
                false => self.inner.commit.staged(),
            };
            (st.table.view(job, clock::now()), seq)
        };
        self.inner.commit.wait(seq).await?;
        Ok(view)
    }

    /// The Acquires waiting for `job`, first in line first (`ListWaiters`):
    /// at most `limit`, and how many wait in all. The line lives in memory
    /// only, so there is nothing to wait for.
    pub fn waiters(&self, job: &JobName, limit: usize) -> (Vec<Waiting>, usize) {
        let (line, waiting) = self.lock().table.waiters_of(job, limit);
        let line = line
            .into_iter()
            .map(|(holder, preferred)| Waiting { holder, preferred })
            .collect();
        (line, waiting)
    }

    /// Up to `limit` leases of jobs starting with `prefix`, after `after`.
    pub async fn leases(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LeaseView>> {
        let (views, seq) = {
            let st = self.lock();
            let views = st.table.list(prefix, after, limit, clock::now());
            (views, self.inner.commit.staged())
        };
        self.inner.commit.wait(seq).await?;
        Ok(views)
    }
}
