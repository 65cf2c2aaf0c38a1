//! Compacting etcd's history, so that etcd's space follows live data.
//!
//! etcd keeps every revision of every key until it is compacted. Every
//! grant, write, release and DeleteJob is a new revision, so under churn
//! etcd's database grows with the bytes written, not with what is live,
//! until its quota's NOSPACE alarm stops every change. So each frontend,
//! every `--etcd-compact-every` (5 minutes by default; 0 turns it off, for
//! an etcd compacted by its own `--auto-compaction-retention` or by its
//! operator), reads etcd's current revision and compacts up to the
//! revision it read one period before. History younger than one period
//! is always kept: a watch or a read made within it never finds its
//! revision compacted (and one that does, after a longer stall, is read
//! again, as after any broken watch). Several frontends compacting is
//! harmless: etcd refuses a revision already compacted, which is not an
//! error here.
//!
//! Compaction frees space inside etcd's database for it to use again; the
//! file itself shrinks only when an operator defragments it (`etcdctl
//! defrag`).

use std::time::Duration;

use crate::{closed, EtcdNode};

/// `--etcd-compact-every` unless set.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(300);

impl EtcdNode {
    /// The compaction loop (see the module's docs), until the frontend
    /// closes.
    pub(super) async fn compact_history(self, every: Duration) {
        let mut closing = self.inner.closing.subscribe();
        let probe = self.inner.keys.health_probe();
        let mut last: Option<i64> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = closed(&mut closing) => return,
            }
            let now = match self.inner.etcd.revision(probe.clone()).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(error = %e, "reading etcd's revision to compact failed");
                    continue;
                }
            };
            if let Some(upto) = last.filter(|r| *r > 0) {
                match self.inner.etcd.compact(upto).await {
                    Ok(()) => tracing::info!(
                        revision = upto,
                        "compacted etcd's history up to the revision read one period ago"
                    ),
                    Err(e) => tracing::warn!(
                        error = %e,
                        revision = upto,
                        "compacting etcd's history failed; trying again next period"
                    ),
                }
            }
            last = Some(now);
        }
    }
}
