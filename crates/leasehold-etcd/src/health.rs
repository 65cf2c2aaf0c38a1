//! What a frontend tells of itself: its health (a probe each second asks
//! whether a majority of etcd answers and whether etcd raises its NOSPACE
//! alarm; a change refused for NOSPACE reports it at once), the metrics
//! snapshot, and the gauges of its waiters' shared watches and orphaned
//! keys. The calls only count into it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use leasehold_backend::{JobsShown, Snapshot, StoreHealth};

use super::client::{self, range_req};
use super::{closed, EtcdNode};

/// How often a frontend asks etcd whether a majority answers (health).
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The health of a frontend whose etcd is out of space.
pub(super) fn no_space_health() -> StoreHealth {
    StoreHealth::Unavailable {
        reason: format!(
            "{}: changes are refused; reads and renewals go on",
            client::NO_SPACE
        ),
    }
}

impl EtcdNode {
    /// Jobs whose waiters on this frontend share an etcd watch now.
    pub fn shared_waiter_watches(&self) -> usize {
        self.inner.job_watches.len()
    }

    /// Waiting `Acquire`s that joined a held job's line on another
    /// waiter's read, without reading the job themselves.
    pub fn joined_on_noted_reads(&self) -> u64 {
        self.inner.job_watches.joined_on_noted_reads()
    }

    /// Keys of departed waiters that this frontend still has to delete
    /// (their delete failed; the sweep tries again).
    pub fn orphaned_waiter_keys(&self) -> usize {
        self.inner.orphans.len()
    }

    /// Whether the frontend can take changes now, for gRPC health and
    /// `/healthz`: a majority of etcd answered the last probe, and etcd is
    /// not out of space.
    pub fn store_health(&self) -> tokio::sync::watch::Receiver<StoreHealth> {
        self.inner.health.subscribe()
    }

    /// Asks etcd for a linearizable read (which needs a majority to
    /// confirm its leader) every [`PROBE_EVERY`], bounded by the timeout,
    /// then for its alarms, and reports the answer as the backend's
    /// health: NOT_SERVING while no majority answers within
    /// `--etcd-timeout`, or while etcd reports its NOSPACE alarm (it
    /// refuses every change then), SERVING again as soon as neither holds.
    /// A change refused for NOSPACE reports it at once ([`EtcdNode::failed`]);
    /// only the probe ends it, once etcd no longer reports the alarm.
    pub(super) async fn probe_health(self) {
        let mut closing = self.inner.closing.subscribe();
        let probe = self.inner.keys.health_probe();
        loop {
            let r = self
                .inner
                .etcd
                .read_txn(vec![range_req(probe.clone(), Vec::new(), 1)])
                .await;
            let now = match r {
                Err(e) => Some(StoreHealth::Unavailable {
                    reason: format!("no majority of etcd answered: {e}"),
                }),
                Ok(_) => match self.inner.etcd.alarms().await {
                    Ok(alarms) if alarms.iter().any(|a| a.contains("NOSPACE")) => {
                        Some(no_space_health())
                    }
                    Ok(_) => Some(StoreHealth::Ok),
                    // Health as it was: the alarms are asked again in a
                    // second.
                    Err(e) => {
                        tracing::debug!(error = %e, "asking etcd for its alarms failed");
                        None
                    }
                },
            };
            if let Some(now) = now {
                self.set_health(now);
            }
            tokio::select! {
                _ = tokio::time::sleep(PROBE_EVERY) => {}
                _ = closed(&mut closing) => return,
            }
        }
    }

    /// Reports `now` as the backend's health, and logs a change: at WARN
    /// when the frontend stops serving, at INFO when it serves again.
    pub(super) fn set_health(&self, now: StoreHealth) {
        self.inner.health.send_if_modified(|h| {
            if *h == now {
                return false;
            }
            let was_full = *h == no_space_health();
            match &now {
                StoreHealth::Ok if was_full => tracing::info!(
                    "etcd has space again (no NOSPACE alarm): serving, changes are taken again"
                ),
                StoreHealth::Ok => tracing::info!("etcd answers again: serving"),
                full if *full == no_space_health() => tracing::warn!(
                    "{full}; not serving until an operator frees space in etcd (compact, \
                     defragment) and disarms the alarm"
                ),
                other => tracing::warn!(health = %other, "etcd does not answer: not serving"),
            }
            *h = now;
            true
        });
    }

    /// Per-job leadership from the mirror of etcd, the cluster-wide counts
    /// of grants, takeovers, expiries and releases it saw, and this
    /// frontend's own renew losses, fenced writes, waiters and etcd
    /// failures.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_showing(usize::MAX)
    }

    /// [`EtcdNode::snapshot`] with at most `max_jobs` jobs picked to be
    /// shown ([`JobsShown::pick`]); every job is counted.
    pub fn snapshot_showing(&self, max_jobs: usize) -> Snapshot {
        let (jobs, mut stats) = self.inner.mirror.snapshot();
        let jobs = JobsShown::pick(jobs.iter().map(|(j, l)| (j, *l)), max_jobs);
        let c = &self.inner.counters;
        stats.renewals = c.renewals.load(Ordering::Relaxed);
        stats.renew_losses = c.renew_losses.load(Ordering::Relaxed);
        stats.writes = c.writes.load(Ordering::Relaxed);
        stats.fenced_writes = c.fenced_writes.load(Ordering::Relaxed);
        Snapshot {
            stats,
            jobs,
            waiters: self.inner.waiters.load(Ordering::Acquire),
            store_failures: c.failures.load(Ordering::Relaxed),
            store_recoveries: 0,
            unreadable_jobs: c.unreadable_jobs.load(Ordering::Relaxed),
        }
    }
}
