//! The seam between the gRPC handlers and where decisions are made.
//!
//! [`Backend`] offers the coordinator's methods and passes each call to
//! the single-node [`Node`] (sled, one process serialises everything) or
//! to an [`EtcdNode`] (a stateless frontend; etcd's transactions decide).
//! The handlers, the metrics and the CLI hold a `Backend` and do not know
//! which one it is. The single-node path pays one `match` per call.
//!
//! **`Backend` only dispatches.** Each backend bounds its own calls (etcd
//! by `--etcd-timeout`), counts its own failures and decides its own
//! outcomes; the types they speak are `leasehold-backend`'s, re-exported
//! here.
//!
//! The seam is here, at the coordinator's level, and not under the
//! `Store` trait, because a replicated engine must make the decisions
//! itself, inside its transactions, with expiry on its clock: `Store` is
//! the narrow seam for single-node engines (`SledStore`, `MemoryStore`),
//! `Backend` the one for a replicated engine.

use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::error::Result;
use crate::lease::{HolderId, JobName, LeaseView, Published, TenureEnd, Token};
use crate::record::{KeyPage, Tenure, ValueRecord};
use leasehold_etcd::EtcdNode;
use leasehold_node::commit::SyncStats;
use leasehold_node::Node;

pub use leasehold_backend::{
    held_by_another, Acquired, EventKind, HolderGuard, JobsShown, Picker, ReleaseIfDropped,
    RenewOutcome, Renewal, Renewed, Snapshot, Staged, StateLimits, Statuses, StoreHealth, Waiting,
    Write, CHANGES_BUFFERED,
};

/// Where decisions are made: one process on sled, or etcd.
#[derive(Clone)]
pub enum Backend {
    /// The single-node coordinator on the embedded store.
    Local(Node),
    /// A stateless frontend on an etcd cluster.
    Etcd(EtcdNode),
}

impl From<Node> for Backend {
    fn from(n: Node) -> Backend {
        Backend::Local(n)
    }
}

impl From<EtcdNode> for Backend {
    fn from(n: EtcdNode) -> Backend {
        Backend::Etcd(n)
    }
}

// Every etcd arm below is boxed (`Box::pin(...).await`): an `async fn`'s
// future is as large as its largest arm, and etcd mode's futures are
// kilobytes that a call on the single node would otherwise copy around.
impl Backend {
    /// Refuses a TTL this backend cannot keep exactly, with
    /// INVALID_ARGUMENT naming `ttl` (etcd: not whole seconds, or below
    /// etcd's minimum lease TTL). The range of the server's limits is
    /// checked before this.
    pub fn check_ttl(&self, ttl: Duration) -> Result<Duration> {
        match self {
            Backend::Local(_) => Ok(ttl),
            Backend::Etcd(n) => n.check_ttl(ttl),
        }
    }

    /// See [`Node::acquire`].
    pub async fn acquire(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Acquired> {
        self.acquire_as(job, holder, ttl, wait, None, false, None)
            .await
    }

    /// [`Backend::acquire`] by a holder whose principal may own at most
    /// `max_owned` jobs (its policy's `max_jobs`), publishing `value`
    /// with the grant; see [`Node::acquire_as`].
    #[allow(clippy::too_many_arguments)] // the request's fields
    pub async fn acquire_as(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        wait: Duration,
        max_owned: Option<usize>,
        preferred: bool,
        value: Published,
    ) -> Result<Acquired> {
        match self {
            Backend::Local(n) => {
                n.acquire_as(job, holder, ttl, wait, max_owned, preferred, value)
                    .await
            }
            Backend::Etcd(n) => {
                Box::pin(n.acquire_as(job, holder, ttl, wait, max_owned, preferred, value)).await
            }
        }
    }

    /// The Acquires waiting for `job`, first in line first; see
    /// [`Node::waiters`].
    pub async fn waiters(&self, job: &JobName, limit: usize) -> Result<(Vec<Waiting>, usize)> {
        match self {
            Backend::Local(n) => Ok(n.waiters(job, limit)),
            Backend::Etcd(n) => Box::pin(n.waiters(job, limit)).await,
        }
    }

    /// See [`Node::renew_with_value`].
    pub async fn renew_with_value(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
        value: Option<Published>,
    ) -> Result<Renewed> {
        match self {
            Backend::Local(n) => n.renew_with_value(job, holder, token, ttl, value).await,
            Backend::Etcd(n) => Box::pin(n.renew_with_value(job, holder, token, ttl, value)).await,
        }
    }

    /// Releases a grant whose holder never learned of it; see
    /// [`Node::release_undelivered`].
    pub async fn release_undelivered(&self, job: &JobName, holder: &HolderId, token: Token) {
        match self {
            Backend::Local(n) => n.release_undelivered(job, holder, token).await,
            Backend::Etcd(n) => Box::pin(n.release_undelivered(job, holder, token)).await,
        }
    }

    /// See [`Node::give_back`].
    pub async fn give_back(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        match self {
            Backend::Local(n) => n.give_back(job, holder, token).await,
            Backend::Etcd(n) => Box::pin(n.give_back(job, holder, token)).await,
        }
    }

    /// See [`Node::renew`].
    pub async fn renew(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
    ) -> Result<Renewed> {
        match self {
            Backend::Local(n) => n.renew(job, holder, token, ttl).await,
            Backend::Etcd(n) => Box::pin(n.renew(job, holder, token, ttl)).await,
        }
    }

    /// See [`Node::renew_many`].
    pub async fn renew_many(&self, batch: &[Renewal]) -> Result<Vec<RenewOutcome>> {
        match self {
            Backend::Local(n) => n.renew_many(batch).await,
            Backend::Etcd(n) => Box::pin(n.renew_many(batch)).await,
        }
    }

    /// What one stream's renewals share from one message to the next
    /// ([`Backend::renew_many_in`]).
    pub fn renew_groups(&self) -> RenewGroups {
        RenewGroups(match self {
            Backend::Local(_) => None,
            Backend::Etcd(_) => Some(leasehold_etcd::RenewGroups::default()),
        })
    }

    /// [`Backend::renew_many`] for one stream's messages, in turn: in etcd
    /// mode its renewals share etcd leases (`EtcdNode::renew_many_in`);
    /// the single node has nothing to share.
    pub async fn renew_many_in(
        &self,
        batch: &[Renewal],
        groups: &RenewGroups,
    ) -> Result<Vec<RenewOutcome>> {
        match (self, &groups.0) {
            (Backend::Etcd(n), Some(g)) => Box::pin(n.renew_many_in(batch, g)).await,
            _ => self.renew_many(batch).await,
        }
    }

    /// See [`Node::release`].
    pub async fn release(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        match self {
            Backend::Local(n) => n.release(job, holder, token).await,
            Backend::Etcd(n) => Box::pin(n.release(job, holder, token)).await,
        }
    }

    /// See [`Node::end_lease`].
    pub async fn end_lease(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        how: TenureEnd,
    ) -> Result<bool> {
        match self {
            Backend::Local(n) => n.end_lease(job, holder, token, how).await,
            Backend::Etcd(n) => Box::pin(n.end_lease(job, holder, token, how)).await,
        }
    }

    /// See [`Node::transfer`].
    pub async fn transfer(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        to: Option<&str>,
        ttl: Option<Duration>,
    ) -> Result<LeaseView> {
        match self {
            Backend::Local(n) => n.transfer(job, holder, token, to, ttl).await,
            Backend::Etcd(n) => Box::pin(n.transfer(job, holder, token, to, ttl)).await,
        }
    }

    /// See [`Node::lease`].
    pub async fn lease(&self, job: &JobName) -> Result<LeaseView> {
        match self {
            Backend::Local(n) => n.lease(job).await,
            Backend::Etcd(n) => Box::pin(n.lease(job)).await,
        }
    }

    /// See [`Node::status`]. [`Statuses::counted`] says whether waiters
    /// and fenced writes are counted (the single node) or not known (etcd
    /// mode: they are not gathered across frontends).
    pub async fn status(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Statuses> {
        match self {
            Backend::Local(n) => n.status(prefix, after, limit).await,
            Backend::Etcd(n) => Box::pin(n.status(prefix, after, limit)).await,
        }
    }

    /// See [`Node::changes`].
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<JobName> {
        match self {
            Backend::Local(n) => n.changes(),
            Backend::Etcd(n) => n.changes(),
        }
    }

    /// See [`Node::history`].
    pub async fn history(
        &self,
        job: &JobName,
        before: Option<Token>,
        limit: usize,
    ) -> Result<Vec<Tenure>> {
        match self {
            Backend::Local(n) => n.history(job, before, limit).await,
            Backend::Etcd(n) => Box::pin(n.history(job, before, limit)).await,
        }
    }

    /// Deletes a job that has no live lease and nobody waiting, with its
    /// keys; a job created again later gets tokens above its old ones.
    pub async fn delete_job(&self, job: &JobName) -> Result<bool> {
        match self {
            Backend::Local(n) => n.delete_job(job).await,
            Backend::Etcd(n) => Box::pin(n.delete_job(job)).await,
        }
    }

    /// Who holds `job` (the holder as stored), as far as this server
    /// knows without a read: the single node's table, an etcd frontend's
    /// mirror. For an early refusal only; the rules decide.
    pub fn holder_hint(&self, job: &JobName) -> Option<String> {
        match self {
            Backend::Local(n) => n.holder_hint(job),
            Backend::Etcd(n) => n.holder_hint(job),
        }
    }

    /// The lease of `job` for a check made before a decision (see
    /// [`Node::lease_now`]): the single node's as decided now, without
    /// waiting for it to be durable; etcd's as read.
    pub async fn lease_for_check(&self, job: &JobName) -> Result<LeaseView> {
        match self {
            Backend::Local(n) => Ok(n.lease_now(job)),
            Backend::Etcd(n) => Box::pin(n.lease(job)).await,
        }
    }

    /// See [`Node::leases`].
    pub async fn leases(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LeaseView>> {
        match self {
            Backend::Local(n) => n.leases(prefix, after, limit).await,
            Backend::Etcd(n) => Box::pin(n.leases(prefix, after, limit)).await,
        }
    }

    /// See [`Node::watch`].
    pub fn watch(&self, job: JobName) -> mpsc::Receiver<Result<(EventKind, LeaseView)>> {
        match self {
            Backend::Local(n) => n.watch(job),
            Backend::Etcd(n) => n.watch(job),
        }
    }

    /// See [`Node::checked_write`].
    pub async fn checked_write(
        &self,
        job: &JobName,
        token: Token,
        key: &[u8],
        value: Option<Vec<u8>>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<u64> {
        match self {
            Backend::Local(n) => n.checked_write(job, token, key, value, guard).await,
            Backend::Etcd(n) => Box::pin(n.checked_write(job, token, key, value, guard)).await,
        }
    }

    /// See [`Node::stage_writes`] and [`EtcdNode::stage_writes`] (on etcd,
    /// the writes are made one after the other, each its own transaction,
    /// and are durable when this returns). `guard`, as for
    /// [`Backend::checked_write`], is asked for each write.
    pub async fn stage_writes(
        &self,
        batch: Vec<Write>,
        guard: Option<HolderGuard<'_>>,
    ) -> Result<Staged> {
        match self {
            Backend::Local(n) => n.stage_writes(batch, guard),
            Backend::Etcd(n) => Box::pin(n.stage_writes(batch, guard)).await,
        }
    }

    /// See [`Node::durable`].
    pub async fn durable(&self, seq: u64) -> Result<()> {
        match self {
            Backend::Local(n) => n.durable(seq).await,
            Backend::Etcd(_) => Ok(()),
        }
    }

    /// See [`Node::read`].
    pub async fn read(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        match self {
            Backend::Local(n) => n.read(job, key).await,
            Backend::Etcd(n) => Box::pin(n.read(job, key)).await,
        }
    }

    /// See [`Node::keys`].
    pub async fn keys(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<KeyPage> {
        match self {
            Backend::Local(n) => n.keys(job, prefix, after, limit).await,
            Backend::Etcd(n) => Box::pin(n.keys(job, prefix, after, limit)).await,
        }
    }

    /// Counters and per-job leadership, for metrics. On etcd, per-job
    /// leadership and the grant, takeover, expiry and release counters
    /// describe the whole cluster; the rest is this frontend's.
    pub fn snapshot(&self) -> Snapshot {
        match self {
            Backend::Local(n) => n.snapshot(),
            Backend::Etcd(n) => n.snapshot(),
        }
    }

    /// [`Backend::snapshot`] with at most `max_jobs` jobs' leadership
    /// (every job counted): what `/metrics` renders.
    pub fn snapshot_showing(&self, max_jobs: usize) -> Snapshot {
        match self {
            Backend::Local(n) => n.snapshot_showing(max_jobs),
            Backend::Etcd(n) => n.snapshot_showing(max_jobs),
        }
    }

    /// Group commit's syncs, on a backend that runs them (not etcd: it
    /// syncs its own log, and its metrics tell how).
    pub fn sync_stats(&self) -> Option<SyncStats> {
        match self {
            Backend::Local(n) => Some(n.sync_stats()),
            Backend::Etcd(_) => None,
        }
    }

    /// What the etcd frontend's `KeepAlive` groups did (not the single
    /// node: it has none).
    pub fn group_stats(&self) -> Option<leasehold_etcd::GroupStats> {
        match self {
            Backend::Local(_) => None,
            Backend::Etcd(n) => Some(n.group_stats()),
        }
    }

    /// The embedded store's token floor, and how its data dir was last
    /// recovered or restored, if it was (not etcd).
    pub fn integrity(&self) -> Option<(u64, Option<String>)> {
        match self {
            Backend::Local(n) => Some(n.integrity()),
            Backend::Etcd(_) => None,
        }
    }

    /// Whether the backend takes changes, as it changes: the single node's
    /// store (failed and not reopened yet, or the disk too full; see
    /// [`leasehold_node::recovery`]), or etcd as a frontend sees it (no
    /// majority answers, or its NOSPACE alarm is raised).
    pub fn store_health(&self) -> watch::Receiver<StoreHealth> {
        match self {
            Backend::Local(n) => n.store_health(),
            Backend::Etcd(n) => n.store_health(),
        }
    }

    /// Resolves once the backend starts closing.
    pub async fn closing(&self) {
        match self {
            Backend::Local(n) => n.closing().await,
            Backend::Etcd(n) => Box::pin(n.closing()).await,
        }
    }

    /// Refuses new changes; ends waiting `Acquire`s and watches.
    pub fn start_closing(&self) {
        match self {
            Backend::Local(n) => n.start_closing(),
            Backend::Etcd(n) => n.start_closing(),
        }
    }

    /// Closes: the single node syncs its store; an etcd frontend revokes
    /// its session lease.
    pub async fn close(&self) {
        match self {
            Backend::Local(n) => n.close(),
            Backend::Etcd(n) => Box::pin(n.close()).await,
        }
    }
}

/// What one stream's renewals share from one message to the next: in etcd
/// mode, its groups of leases on one etcd lease each; nothing on the
/// single node. Made by [`Backend::renew_groups`].
#[derive(Debug)]
pub struct RenewGroups(Option<leasehold_etcd::RenewGroups>);

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::lease::Limits;

    /// A call on the single node carries a future its own size, not etcd
    /// mode's: each etcd arm is boxed. Unboxed, `checked_write`'s future
    /// was 7 KB and `renew`'s 8 KB, copied at every call: boxing them cut
    /// a unary `Renew`'s instructions by 9% (callgrind).
    #[test]
    fn a_local_call_does_not_carry_etcd_modes_future() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _in = rt.enter();
        let store = std::sync::Arc::new(leasehold_store::memory::MemoryStore::new());
        let b = Backend::Local(Node::open(store).unwrap());
        let job = Limits::default().job("j").unwrap();
        let holder = Limits::default().holder("h").unwrap();
        let ttl = Duration::from_secs(5);
        let sizes = [
            (
                "checked_write",
                std::mem::size_of_val(&b.checked_write(&job, Token(1), b"k", None, None)),
            ),
            (
                "renew",
                std::mem::size_of_val(&b.renew(&job, &holder, Token(1), ttl)),
            ),
            (
                "acquire",
                std::mem::size_of_val(&b.acquire(&job, &holder, ttl, Duration::ZERO)),
            ),
            ("read", std::mem::size_of_val(&b.read(&job, b"k"))),
            (
                "release",
                std::mem::size_of_val(&b.release(&job, &holder, Token(1))),
            ),
        ];
        for (call, size) in sizes {
            assert!(size <= 2048, "{call}'s future is {size} bytes");
        }
    }
}
