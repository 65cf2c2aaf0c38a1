//! The give-back of a cancelled waiting `Acquire`: a grant made as the call
//! was cancelled, whose reply was on its way, is released so that the job
//! is not held for a TTL by a holder that never learned its token.
//!
//! Its caller never saw the reply, so the give-back reads the lease and
//! releases it if it is the holder's. That is only safe if nothing told a
//! caller of this client that the holder leads with that token:
//!
//! - **No call of this client for the (job, holder) started after the
//!   cancelled one, and none is on its way** ([`Asking`] counts them): a
//!   retry may have been granted the lease, and been told.
//! - **The token is above every token a call of this client was told** for
//!   the pair: an earlier grant or renewal told its caller that it leads.
//! - **The release is a give-back** (`ReleaseRequest.give_back`): the server
//!   keeps the lease if the holder asked again since the grant (an Acquire
//!   or Renew from anywhere, racing with the give-back), whose answer may
//!   have told it that it leads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_proto as proto;
use leasehold_proto::leases_client::LeasesClient;

use crate::Transport;

/// How long a give-back waits before it reads the lease: a grant made as
/// the call was cancelled is made durable before it is sent.
const SETTLE: Duration = Duration::from_millis(100);

/// One (job, holder) pair's calls through this client.
#[derive(Debug, Default)]
struct Pair {
    /// The number of the newest call started (see [`Calls::next`]).
    newest: u64,
    /// Calls started and not ended.
    in_flight: u32,
    /// The highest token a call was told the holder holds; 0 for none.
    told: u64,
}

/// Every pair with a call on its way or a token told, shared by the clones
/// of one client. A pair leaves when it has neither (a release through
/// this client forgets what was told).
#[derive(Debug, Clone)]
pub(crate) struct Calls {
    pairs: Arc<Mutex<HashMap<(String, String), Pair>>>,
    next: Arc<AtomicU64>,
    /// Give-backs started and not finished: an elector's `resign` waits
    /// for them, so that a process that exits once it has resigned does
    /// not leave behind a grant its cancelled campaign was given.
    pending: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Default for Calls {
    fn default() -> Self {
        Calls {
            pairs: Arc::default(),
            next: Arc::default(),
            pending: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

/// One give-back in flight, counted in [`Calls::pending`] until dropped.
struct Pending(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Pair>> {
        self.pairs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no give-back is in flight, for at most `bound`.
    pub(crate) async fn settled(&self, bound: Duration) {
        let mut rx = self.pending.subscribe();
        let _ = tokio::time::timeout(bound, rx.wait_for(|n| *n == 0)).await;
    }

    /// An Acquire or Renew of (`job`, `holder`) starts.
    pub(crate) fn start(&self, job: &str, holder: &str) -> Asking {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let key = (job.to_owned(), holder.to_owned());
        let mut pairs = self.lock();
        let p = pairs.entry(key.clone()).or_default();
        p.newest = n;
        p.in_flight += 1;
        Asking {
            calls: self.clone(),
            key,
            n,
        }
    }

    /// The holder released the pair's lease: nothing told is live now.
    pub(crate) fn released(&self, job: &str, holder: &str) {
        let key = (job.to_owned(), holder.to_owned());
        let mut pairs = self.lock();
        if let Some(p) = pairs.get_mut(&key) {
            p.told = 0;
            if p.in_flight == 0 {
                pairs.remove(&key);
            }
        }
    }

    /// Whether the give-back of call `n` may release `token`: see the
    /// module docs.
    fn may_give_back(&self, key: &(String, String), n: u64, token: u64) -> bool {
        match self.lock().get(key) {
            None => true,
            Some(p) => p.newest == n && p.in_flight == 0 && token > p.told,
        }
    }
}

/// One call on its way; ends when dropped, answered or cancelled.
pub(crate) struct Asking {
    calls: Calls,
    key: (String, String),
    n: u64,
}

impl Asking {
    /// The call told its caller that the holder leads with `token`.
    pub(crate) fn told(&self, token: u64) {
        if let Some(p) = self.calls.lock().get_mut(&self.key) {
            p.told = p.told.max(token);
        }
    }

    /// Arms the give-back of this call, a waiting Acquire: dropped armed
    /// (the call was cancelled), it releases a grant its caller never saw.
    pub(crate) fn give_back_if_cancelled(self, leases: LeasesClient<Transport>) -> GiveBack {
        GiveBack {
            leases: Some(leases),
            asking: Some(self),
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        let mut pairs = self.calls.lock();
        if let Some(p) = pairs.get_mut(&self.key) {
            p.in_flight -= 1;
            if p.in_flight == 0 && p.told == 0 {
                pairs.remove(&self.key);
            }
        }
    }
}

/// A waiting Acquire's call, with its give-back armed until
/// [`GiveBack::answered`].
pub(crate) struct GiveBack {
    leases: Option<LeasesClient<Transport>>,
    asking: Option<Asking>,
}

impl GiveBack {
    /// The call was answered: nothing to give back. Returns the call.
    pub(crate) fn answered(mut self) -> Asking {
        self.leases = None;
        self.asking
            .take()
            .expect("the call is there until answered")
    }
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        let (Some(mut leases), Some(asking)) = (self.leases.take(), self.asking.take()) else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (calls, key, n) = (asking.calls.clone(), asking.key.clone(), asking.n);
        // The cancelled call has ended.
        drop(asking);
        calls.pending.send_modify(|n| *n += 1);
        let pending = Pending(calls.pending.clone());
        rt.spawn(async move {
            let _pending = pending;
            tokio::time::sleep(SETTLE).await;
            let (job, holder) = key.clone();
            let Ok(l) = leases
                .get_lease(proto::GetLeaseRequest { job: job.clone() })
                .await
            else {
                return;
            };
            let l = l.into_inner();
            if l.holder != holder || !calls.may_give_back(&key, n, l.token) {
                return;
            }
            let _ = leases
                .release(proto::ReleaseRequest {
                    job,
                    holder,
                    token: l.token,
                    give_back: true,
                })
                .await;
        });
    }
}
