//! The rules broken on purpose (`LEASEHOLD_BREAK`, a fault-injection
//! build only): which are broken, and the two this backend carries out
//! itself, "early-expiry" (an etcd lease revoked at half its TTL) and
//! "ack-before-sync" (a transaction sent after its change was answered).
//! Without a broken rule nothing here does anything.

use std::time::Duration;

use tokio::time::{sleep_until, Instant};

#[cfg(feature = "fault-injection")]
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules;
use leasehold_core::lease::Faults;

use super::client;
use super::EtcdNode;

impl EtcdNode {
    /// The rules broken on purpose, if any (a fault-injection build).
    pub(super) fn faults(&self) -> Faults {
        self.inner.faults.get().copied().unwrap_or_default()
    }

    /// The broken rule "early-expiry": the holding bound to the etcd lease
    /// `lease`, just granted or renewed for `ttl`, runs out when the core's
    /// rule says it lasts ([`rules::lasts`]: half its TTL) unless it is
    /// renewed again through this frontend before: its etcd lease is then
    /// revoked, which deletes the holder key and wakes the waiters, as etcd
    /// does at its TTL. (etcd keeps a lease at least its minimum TTL, 2 s
    /// by default, so a shorter etcd lease could not break the rule for
    /// the TTLs etcd accepts.) Nothing without the broken rule.
    pub(super) fn expire_early(&self, lease: i64, ttl: Duration) {
        let lasts = rules::lasts(ttl, self.faults());
        if lasts >= ttl {
            return;
        }
        let deadline = Instant::now() + lasts;
        self.inner
            .early
            .lock()
            .expect("early expiries")
            .insert(lease, deadline);
        let node = self.clone();
        tokio::spawn(async move {
            sleep_until(deadline).await;
            let due = {
                let mut early = node.inner.early.lock().expect("early expiries");
                let due = early.get(&lease).is_some_and(|d| *d <= Instant::now());
                if due {
                    early.remove(&lease);
                }
                due
            };
            if due {
                tracing::info!(lease, "early-expiry: revoking a lease at half its TTL");
                node.revoke_later(lease);
            }
        });
    }

    /// The broken rule "ack-before-sync": sends a transaction whose change
    /// the caller has already answered, and forgets it.
    pub(super) fn commit_later(&self, req: client::pb::TxnRequest) {
        let etcd = self.inner.etcd.clone();
        tokio::spawn(async move {
            if let Err(e) = etcd.txn(req).await {
                tracing::debug!(error = %e, "an answered change's transaction failed");
            }
        });
    }

    /// Breaks rules on purpose, from a list such as
    /// `no-fence,early-expiry,renew-bumps-token,ack-before-sync` (parsed
    /// by the core, [`Faults::parse`], as the single node's is), so that
    /// the torture test can show its checker catches real bugs on this
    /// backend too. Each is the core's rule broken by the same switch as
    /// on the single node (the fence, a lease's length, a renewal's
    /// token); "ack-before-sync" answers a grant or a write before its
    /// etcd transaction has committed (sent in the background, its outcome
    /// ignored): what the single node's answer before its sync is to a
    /// crash, that is to a race with another frontend or to a SIGKILL of
    /// this one.
    #[cfg(feature = "fault-injection")]
    pub fn break_rules(&self, list: &str) -> Result<()> {
        let f = Faults::parse(list)?;
        if self.inner.faults.set(f).is_err() {
            return Err(Error::invalid(
                "LEASEHOLD_BREAK",
                "rules are broken already",
            ));
        }
        tracing::warn!(
            rules = list,
            "BREAKING LEASE RULES ON PURPOSE (fault-injection build)"
        );
        Ok(())
    }
}
