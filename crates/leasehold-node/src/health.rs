//! What the node tells of itself: the metrics snapshot (every job
//! counted, the ones shown picked while the table is walked in chunks, so
//! that no walk holds the state lock for long), group commit's sync
//! statistics, the store's token floor and last recovery, and whether
//! the store takes changes.

use tokio::sync::watch;

use leasehold_backend::{Picker, Snapshot, StoreHealth};
use leasehold_core::clock;
use leasehold_core::lease::JobName;

use super::{commit, Node};

/// Jobs walked under one hold of the state lock by a snapshot.
const SNAPSHOT_CHUNK: usize = 16_384;

impl Node {
    /// Counters and every job's leadership.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_showing(usize::MAX)
    }

    /// Counters and per-job leadership for metrics: every job counted, at
    /// most `max_jobs` of them picked to be shown
    /// ([`leasehold_backend::JobsShown::pick`], under the state lock: one
    /// pass, no copy of the others' names).
    pub fn snapshot_showing(&self, max_jobs: usize) -> Snapshot {
        let (store_failures, store_recoveries) = self.inner.recovery.counts();
        // The jobs are walked in chunks, each under the state lock on its
        // own: with a million jobs, one walk held it for up to half a
        // second, and every renewal waited. Expiries are counted as the
        // jobs are walked.
        let mut picker = Picker::new(max_jobs);
        let mut after: Option<JobName> = None;
        let st = loop {
            let mut st = self.lock();
            let now = clock::now();
            let mut n = 0;
            let mut last = None;
            for (job, leadership) in st
                .table
                .settle_leadership_after(after.as_ref(), now)
                .take(SNAPSHOT_CHUNK)
            {
                picker.offer(job, leadership);
                last = Some(job);
                n += 1;
            }
            if n < SNAPSHOT_CHUNK {
                break st;
            }
            after = last.cloned();
        };
        let jobs = picker.finish();
        Snapshot {
            stats: st.table.stats().clone(),
            jobs,
            waiters: st.wakers.len(),
            store_failures,
            store_recoveries,
            unreadable_jobs: 0,
        }
    }

    /// Group commit's syncs: how many, the changes they made durable, and
    /// the live histogram of their durations. Not part of [`Snapshot`],
    /// which both backends give (etcd syncs its own log; its metrics tell
    /// how).
    pub fn sync_stats(&self) -> commit::SyncStats {
        self.inner.commit.sync_stats()
    }

    /// The embedded store's token floor, and how its data dir was last
    /// recovered or restored, if it was.
    pub fn integrity(&self) -> (u64, Option<String>) {
        (
            self.inner.store.floors().every.0,
            self.inner.store.recovered(),
        )
    }

    /// Whether the store takes changes, as it changes: for gRPC health and
    /// `/healthz`.
    pub fn store_health(&self) -> watch::Receiver<StoreHealth> {
        self.inner.recovery.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use leasehold_core::lease::{Leadership, Limits};
    use leasehold_store::memory::MemoryStore;

    /// A snapshot walks the table in chunks, releasing the state lock
    /// between them, and still counts every job once and shows the led
    /// ones first.
    #[tokio::test]
    async fn a_snapshot_in_chunks_counts_every_job_once() {
        let node = Node::open(Arc::new(MemoryStore::new())).unwrap();
        let l = Limits::default();
        let n = SNAPSHOT_CHUNK * 2 + 7;
        let holder = l.holder("h").unwrap();
        let now = clock::now();
        {
            // Straight into the table: a grant through the store for each
            // of 30,000 jobs would only make the test slow.
            let mut st = node.lock();
            for i in 0..n {
                let job = l.job(&format!("j{i:06}")).unwrap();
                let ttl = if i % 1000 == 0 {
                    Duration::from_secs(60)
                } else {
                    Duration::from_millis(1)
                };
                let _ = st.table.acquire(&job, &holder, ttl, now, None, false);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
        let snap = node.snapshot_showing(10);
        assert_eq!(snap.jobs.total, n);
        assert_eq!(snap.jobs.led, n.div_ceil(1000));
        assert_eq!(snap.jobs.shown.len(), 10);
        assert!(snap
            .jobs
            .shown
            .iter()
            .all(|(_, l)| matches!(l, Leadership::Led { .. })));
        assert_eq!(snap.stats.expiries as usize, n - n.div_ceil(1000));
    }
}
