//! The end of a holding: `Release`, the release of a bound lease whose
//! connection closed (`end_lease`), the hand-over to a waiting
//! successor (`transfer`), and the give-back of a grant whose
//! caller may never have learned of it (`give_back`,
//! `release_undelivered`). One transaction compares the holder key, marks
//! the token released and records the tenure's end; then the etcd lease
//! is revoked.

use std::time::Duration;

use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules;
use leasehold_core::lease::{HolderId, JobName, LeaseView, TenureEnd, Token};
use leasehold_core::record::HistoryPut;

use super::client::{pb, ranges};
use super::decide::{self, Release};
use super::keys;
use super::queue::{self, Place};
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
        self.end_holding(job, holder, token, true, TenureEnd::Released)
            .await
    }

    /// Releases a lease; the first waiter (on any frontend) is woken by
    /// etcd's watch and takes it.
    pub async fn release(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.end_holding(job, holder, token, false, TenureEnd::Released)
            .await
    }

    /// Ends the holding of (`holder`, `token`) now, its end recorded as
    /// `how` (`ConnectionClosed` for a bound lease whose connection closed,
    /// `Chaos` for the chaos API's expire), as [`EtcdNode::release`] does;
    /// the first waiter is granted at once.
    pub async fn end_lease(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        how: TenureEnd,
    ) -> Result<bool> {
        self.end_holding(job, holder, token, false, how).await
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
        how: TenureEnd,
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
                        how,
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
                    // A group's etcd lease binds its other leases still.
                    if !h.rec.sharing.shared {
                        if let Err(e) = self.inner.etcd.revoke(h.lease).await {
                            tracing::debug!(error = %e, "revoke after release failed; the etcd lease runs out on its own");
                        }
                    }
                    return Ok(true);
                }
            }
            Err(contention("Release"))
        })
        .await
    }

    /// Hands the live lease of (`holder`, `token`) to a waiting Acquire on
    /// any frontend: the first waiter in line whose holder is `to` (as its
    /// client named it), or the first in line. One transaction compares
    /// the holder key, the token counter and the successor's waiter key,
    /// and puts the successor's grant (the next token, on a new etcd lease
    /// of `ttl`, the holding's own when `None`), deletes its waiter key and
    /// records the tenure's end and the grant: **the holder key is never
    /// absent in between**. The successor's Acquire, woken by its job's
    /// watch, finds the lease its own. Then the old etcd lease is revoked.
    pub async fn transfer(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        to: Option<&str>,
        ttl: Option<Duration>,
    ) -> Result<LeaseView> {
        if let Some(ttl) = ttl {
            self.check_ttl(ttl)?;
        }
        self.bounded("TransferLease", Duration::ZERO, async {
            self.check_open()?;
            for _ in 0..MAX_TRIES {
                let read = self.read_job(job, None).await?;
                let st = &read.job;
                let h = match decide::release(job, st, holder, token)? {
                    Release::Delete(h) => h,
                    // Released or ran out: no longer ours to hand over.
                    Release::Done => {
                        return Err(rules::unknown_or_lost(job, None, st.token(), token))
                    }
                };
                let ttl = ttl.unwrap_or(h.rec.ttl);
                let reads = queue::line_by_age(&self.inner.keys, job.as_str()).to_vec();
                let line = self.failed(self.inner.etcd.read_txn(reads).await)?;
                let line: Vec<pb::KeyValue> =
                    ranges(line).into_iter().flat_map(|r| r.kvs).collect();
                let successor = line.iter().find_map(|kv| {
                    let (who, value) = keys::decode_waiter(&kv.value)?;
                    let named = to.is_none_or(|t| who.unbound() == t);
                    (named && &who != holder)
                        .then(|| (who, value, kv.key.clone(), kv.create_revision))
                });
                let Some((next, value, key, rev)) = successor else {
                    return Err(Error::NoSuccessor {
                        job: job.to_string(),
                        to: to.map(str::to_owned),
                    });
                };
                let wall = clock::wall_unix_ms();
                let (holder_rec, token_rec) =
                    decide::grant(job, st, Token::NONE, &next, ttl, wall, value.clone())?;
                let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
                let mut req = txn::transfer(
                    &self.inner.keys,
                    job.as_str(),
                    st,
                    h,
                    &Place {
                        preferred: self.inner.keys.is_preferred_waiter(&key),
                        key,
                        rev,
                    },
                    &holder_rec,
                    &token_rec,
                    lease,
                );
                let keep = self.inner.limits.history_per_job as u64;
                if keep > 0 {
                    let now = wall;
                    let end = HistoryPut::End {
                        token,
                        how: TenureEnd::Transferred,
                        at_unix_ms: now,
                    };
                    req.success
                        .push(txn::history_put(&self.inner.keys, job, &end));
                    // The tenure's end is the one just put, not an expiry.
                    let mut ended = st.clone();
                    if let Some(t) = ended.token.as_mut() {
                        t.released = true;
                    }
                    req.success.extend(txn::grant_history(
                        &self.inner.keys,
                        job,
                        &ended,
                        holder_rec.token,
                        &next,
                        ttl,
                        &value,
                        keep,
                        now,
                        &[],
                    ));
                }
                let r = self.failed(self.inner.etcd.txn(req).await);
                let succeeded = matches!(&r, Ok(r) if r.succeeded);
                // The old holding's etcd lease, unless a group's (which
                // binds the group's other leases), or the successor's new
                // one when the transfer did not happen.
                let old = match succeeded {
                    true => (!h.rec.sharing.shared).then_some(h.lease),
                    false => Some(lease),
                };
                if let Some(old) = old {
                    if let Err(e) = self.inner.etcd.revoke(old).await {
                        tracing::debug!(error = %e, "revoke after a transfer failed; the etcd lease runs out on its own");
                    }
                }
                r?;
                if succeeded {
                    return Ok(decide::granted(job, &holder_rec, clock::now()));
                }
            }
            Err(contention("TransferLease"))
        })
        .await
    }
}
