//! The end of a holding: `Release`, and the give-back of a grant whose
//! caller may never have learned of it (`give_back`,
//! `release_undelivered`). One transaction compares the holder key, marks
//! the token released and records the tenure's end; then the etcd lease
//! is revoked.

use std::time::Duration;

use leasehold_core::clock;
use leasehold_core::error::Result;
use leasehold_core::lease::{HolderId, JobName, TenureEnd, Token};
use leasehold_core::record::HistoryPut;

use super::decide::{self, Release};
use super::{contention, txn, EtcdNode, MAX_TRIES};

impl EtcdNode {
    /// Releases a grant whose holder never learned of it (its call was
    /// cancelled, or its reply could not be delivered). A no-op when the
    /// lease is no longer that grant.
    pub async fn release_undelivered(&self, job: &JobName, holder: &HolderId, token: Token) {
        let r = self.give_back(job, holder, token).await;
        match r {
            Ok(false) => tracing::debug!(
                job = %job,
                token = token.0,
                "an undelivered grant was not given back: it ended, or its holder asked again"
            ),
            Ok(true) => tracing::info!(
                job = %job,
                token = token.0,
                "released a grant whose caller went away before it was told"
            ),
            Err(e) => {
                tracing::debug!(job = %job, error = %e, "an undelivered grant was not released")
            }
        }
    }

    /// Releases the grant of `token` to `holder` if its holder key was
    /// never put again since the grant: its transaction compares the key's
    /// version with 1, which the holder's first repeated Acquire or Renew
    /// moves past (see `Node::give_back` for the rule). Returns whether it
    /// did.
    pub async fn give_back(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.end_holding(job, holder, token, true).await
    }

    /// Releases a lease; the first waiter (on any frontend) is woken by
    /// etcd's watch and takes it.
    pub async fn release(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.end_holding(job, holder, token, false).await
    }

    /// Ends the holding of (`holder`, `token`) and marks its token
    /// released; with `untold_only`, only a holding whose holder key is
    /// still at version 1 (a give-back), and nothing else is an error.
    /// Returns whether it ended one. Refused once the frontend is closing,
    /// and bounded as one "Release" call.
    async fn end_holding(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        untold_only: bool,
    ) -> Result<bool> {
        self.bounded("Release", Duration::ZERO, async {
            self.check_open()?;
            for _ in 0..MAX_TRIES {
                let read = self.read_job(job, None).await?;
                let release = decide::release(job, &read.job, holder, token);
                let (h, mut req) = match (release, untold_only) {
                    (Ok(Release::Delete(h)), false) => (
                        h,
                        txn::release(&self.inner.keys, job.as_str(), &read.job, h, holder, token),
                    ),
                    (Ok(Release::Delete(h)), true) if h.version == 1 => (
                        h,
                        txn::give_back(&self.inner.keys, job.as_str(), &read.job, h, holder, token),
                    ),
                    (Err(e), false) => return Err(e),
                    _ => return Ok(false),
                };
                if self.inner.limits.history_per_job > 0 {
                    let end = HistoryPut::End {
                        token,
                        how: TenureEnd::Released,
                        at_unix_ms: clock::wall_unix_ms(),
                    };
                    req.success
                        .push(txn::history_put(&self.inner.keys, job, &end));
                }
                let r = self.failed(self.inner.etcd.txn(req).await)?;
                // A give-back that finds the grant told (its untold key gone,
                // which a renewal may do without touching the holder key) is
                // over: reading the job again would find it unchanged.
                if !r.succeeded && untold_only && txn::untold_gone(&r, token) {
                    return Ok(false);
                }
                if r.succeeded {
                    if let Err(e) = self.inner.etcd.revoke(h.lease).await {
                        tracing::debug!(error = %e, "revoke after release failed; the etcd lease runs out on its own");
                    }
                    return Ok(true);
                }
            }
            Err(contention("Release"))
        })
        .await
    }
}
