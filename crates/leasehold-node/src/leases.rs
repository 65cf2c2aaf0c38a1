//! The lease calls: `Acquire` (with its wait in line, [`Queued`]),
//! `Renew` and the batched renewal, `Release`, the give-back of a grant
//! whose caller went away, and `DeleteJob`. Each is decided under the
//! state lock ([`Node::decide`], or the lock itself for a batch or a
//! deletion) and answered once what it shows is durable.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::time::sleep_until;

use leasehold_backend::{Acquired, ReleaseIfDropped, RenewOutcome, Renewal, Renewed};
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules;
use leasehold_core::lease::{
    Acquire, Effects, HistoryEvent, HolderId, JobName, LeaseView, Published, TenureEnd, Token,
    WaiterId,
};

use super::Node;

/// Whether a renewal moved a live lease's deadline from `before` to the
/// earlier `after`.
fn earlier(after: Option<Instant>, before: Option<Instant>) -> bool {
    matches!((after, before), (Some(a), Some(b)) if a < b)
}

impl Node {
    /// Asks for the lease; waits up to `wait` for it to free up, first come
    /// first served. Returns whether it was granted, whether the grant is a
    /// new one (a new token) rather than the live holder's extension, and
    /// the lease.
    ///
    /// **A new grant whose call is dropped before it returns (the client
    /// cancelled while the grant was made durable) is released at once**,
    /// so that the next in line gets it instead of waiting out a TTL for a
    /// holder that never learned its token.
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

    /// [`Node::acquire`] by a holder whose principal may own at most
    /// `max_owned` jobs (its policy's `max_jobs`): a new job is refused
    /// when it owns that many ([`rules::admit_new_job`]), decided under
    /// the state lock with the count the table keeps, so it is exact.
    /// `preferred`: asks as a preferred candidate (queued ahead of the
    /// others; see `LeaseTable::enqueue`). `value`: published with the
    /// grant (`AcquireRequest.value`).
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
        self.check_open()?;
        let give_up = clock::now() + wait;
        let limits = self.inner.limits;
        let (res, seq, changed) = self.decide(job, |t, now| {
            if !t.contains(job) {
                if t.len() >= limits.max_jobs {
                    return (Err(limits.too_many_jobs()), Effects::default());
                }
                let owned = holder.principal().map_or(0, |p| t.owned_by(p));
                if let Err(e) = rules::admit_new_job(holder, owned, max_owned) {
                    return (Err(e), Effects::default());
                }
            }
            let (a, fx) =
                t.acquire_with_value(job, holder, ttl, now, None, preferred, value.clone());
            // A new token, not the live holder's extension (which may
            // change its value, and be told to watchers all the same).
            let granted = fx
                .history
                .iter()
                .any(|e| matches!(e, HistoryEvent::Granted { .. }));
            (Ok((a, granted)), fx)
        })?;
        let (res, granted) = res?;
        let busy = match res {
            Acquire::Granted(view) => {
                let fresh = changed && granted;
                let undo = self.release_if_dropped(fresh, job, holder, view.token);
                self.publish_when_durable(job, seq, changed).await?;
                undo.disarm();
                return Ok(Acquired {
                    acquired: true,
                    fresh,
                    lease: view,
                });
            }
            Acquire::Busy { view, .. } => view,
            Acquire::Exhausted(_) => {
                self.inner.commit.wait(seq).await?;
                return Err(Error::TokensExhausted {
                    job: job.to_string(),
                });
            }
        };
        if wait.is_zero() {
            self.inner.commit.wait(seq).await?;
            return Ok(Acquired {
                acquired: false,
                fresh: false,
                lease: busy,
            });
        }

        // Join the queue.
        let notify = Arc::new(Notify::new());
        let (id, generation) = {
            let mut st = self.lock();
            let id = st.table.enqueue_with_value(
                job,
                holder,
                ttl,
                clock::now(),
                preferred,
                value.clone(),
            );
            st.wakers.insert(id, notify.clone());
            (id, st.generation)
        };
        let mut queued = Queued {
            node: self,
            job,
            id,
            holder,
            joined: busy.token,
            answered: false,
        };
        let mut closing = self.inner.closing.subscribe();
        loop {
            if self.lock().generation != generation {
                return Err(Error::Storage(
                    "the store was reopened after a failure while this Acquire waited; ask again"
                        .into(),
                ));
            }
            let (res, seq, changed) = self.decide(job, |t, now| {
                t.acquire_with_value(job, holder, ttl, now, Some(id), preferred, value.clone())
            })?;
            match res {
                Acquire::Granted(view) => {
                    // A release may have handed the lease to us already
                    // (then this decision only extends it): new all the
                    // same, to its caller.
                    let fresh = changed || view.token > queued.joined;
                    let undo = self.release_if_dropped(fresh, job, holder, view.token);
                    queued.answered = true;
                    self.publish_when_durable(job, seq, changed).await?;
                    undo.disarm();
                    return Ok(Acquired {
                        acquired: true,
                        fresh,
                        lease: view,
                    });
                }
                Acquire::Exhausted(_) => {
                    self.inner.commit.wait(seq).await?;
                    return Err(Error::TokensExhausted {
                        job: job.to_string(),
                    });
                }
                Acquire::Busy {
                    view,
                    first_in_line,
                } => {
                    if clock::now() >= give_up {
                        self.inner.commit.wait(seq).await?;
                        return Ok(Acquired {
                            acquired: false,
                            fresh: false,
                            lease: view,
                        });
                    }
                    // Only the first in line watches the deadline; the rest
                    // are woken when they move up. Nobody polls.
                    let wake_at = match (first_in_line, view.deadline()) {
                        (true, Some(d)) => d.min(give_up),
                        _ => give_up,
                    };
                    tokio::select! {
                        _ = notify.notified() => {}
                        _ = sleep_until(wake_at.into()) => {}
                        _ = closing.wait_for(|c| *c) => return Err(Error::ShuttingDown),
                    }
                }
            }
        }
    }

    /// A guard that releases the grant of `token` to `holder` if it is
    /// dropped armed (its call was cancelled); unarmed unless `fresh`.
    fn release_if_dropped(
        &self,
        fresh: bool,
        job: &JobName,
        holder: &HolderId,
        token: Token,
    ) -> ReleaseIfDropped {
        if !fresh {
            return ReleaseIfDropped::unarmed();
        }
        let (node, job, holder) = (self.clone(), job.clone(), holder.clone());
        ReleaseIfDropped::new(async move { node.release_undelivered(&job, &holder, token).await })
    }

    /// Releases a grant whose holder never learned of it (its call was
    /// cancelled, or its reply could not be delivered): [`Node::give_back`],
    /// logged, errors included (nobody waits for it).
    pub async fn release_undelivered(&self, job: &JobName, holder: &HolderId, token: Token) {
        match self.give_back(job, holder, token).await {
            Ok(true) => tracing::info!(
                job = %job,
                token = token.0,
                "released a grant whose caller went away before it was told"
            ),
            Ok(false) => tracing::debug!(
                job = %job,
                token = token.0,
                "an undelivered grant was not given back: it ended, or its holder asked again"
            ),
            Err(e) => {
                tracing::debug!(job = %job, error = %e, "an undelivered grant was not released")
            }
        }
    }

    /// Gives back the grant of `token` to `holder`, whose caller may never
    /// have learned of it: released only while it is still that grant and
    /// its holder has not asked again since (see
    /// [`LeaseTable::give_back`](leasehold_core::lease::LeaseTable::give_back)).
    /// Returns whether it released.
    pub async fn give_back(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.check_open()?;
        let (released, seq, changed) = self.decide(job, |t, now| {
            let fx = t.give_back(job, holder, token, now);
            (fx.changed, fx)
        })?;
        self.publish_when_durable(job, seq, changed).await?;
        Ok(released)
    }

    /// Renews a live lease. Fails with [`Error::LeaseLost`] otherwise.
    pub async fn renew(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
    ) -> Result<Renewed> {
        self.renew_with_value(job, holder, token, ttl, None).await
    }

    /// [`Node::renew`] that also replaces the lease's published value when
    /// `value` is `Some` (`RenewRequest.value`): durable before the reply,
    /// and told to the job's watchers.
    pub async fn renew_with_value(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
        value: Option<Published>,
    ) -> Result<Renewed> {
        self.check_open()?;
        let (r, seq, changed) = self.decide(job, |t, now| {
            let before = t.view(job, now).deadline();
            match t.renew_with_value(job, holder, token, ttl, now, value) {
                Ok((view, fx)) => {
                    let renewed = Renewed {
                        successor_waiting: t.successor_waiting(job),
                        lease: view,
                    };
                    (Ok((earlier(renewed.lease.deadline(), before), renewed)), fx)
                }
                Err(e) => (Err(e), Effects::default()),
            }
        })?;
        let (earlier, renewed) = r?;
        if earlier {
            self.deadline_moved_earlier(job);
        }
        self.publish_when_durable(job, seq, changed).await?;
        Ok(renewed)
    }

    /// Renews many leases in one decision: the state lock is taken once,
    /// every renewal is decided at the same instant with the rules of
    /// [`Node::renew`], and the reply waits for one durability point that
    /// covers every change it shows. Each renewal succeeds or fails on its
    /// own. Fails as a whole only when the node is closing or the store
    /// fails.
    pub async fn renew_many(&self, batch: &[Renewal]) -> Result<Vec<RenewOutcome>> {
        self.check_open()?;
        let mut out = Vec::with_capacity(batch.len());
        let mut seq = 0;
        let mut moved_earlier = Vec::new();
        {
            let mut st = self.lock();
            let now = clock::now();
            for r in batch {
                let before = st.table.view(&r.job, now).deadline();
                match st.table.renew(&r.job, &r.holder, r.token, r.ttl, now) {
                    Ok((view, fx)) => {
                        if earlier(view.deadline(), before) {
                            moved_earlier.push(&r.job);
                        }
                        if let Some(rec) = &fx.persist {
                            self.inner.store.put_lease(&r.job, rec, &[], 0)?;
                            let s = self.inner.commit.stage();
                            st.table.set_stamp(&r.job, s);
                        }
                        st.wake(&fx.wake);
                        out.push(Ok(Renewed {
                            successor_waiting: st.table.successor_waiting(&r.job),
                            lease: view,
                        }));
                    }
                    Err(e) => out.push(Err((e, st.table.view(&r.job, now)))),
                }
                // What we show of the job must be durable: its last change.
                seq = seq.max(st.table.stamp(&r.job));
            }
        }
        for job in moved_earlier {
            self.deadline_moved_earlier(job);
        }
        self.inner.commit.wait(seq).await?;
        Ok(out)
    }

    /// Releases a lease; the first waiter is granted at once.
    pub async fn release(&self, job: &JobName, holder: &HolderId, token: Token) -> Result<bool> {
        self.end_holding(job, holder, token, TenureEnd::Released)
            .await
    }

    /// Ends the holding of (`holder`, `token`) now, its end recorded as
    /// `how`: `ConnectionClosed` for a lease bound to a connection whose
    /// client end closed, `Chaos` for the chaos API's expire. The first
    /// waiter is granted at once. Returns whether it ended one.
    pub async fn end_lease(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        how: TenureEnd,
    ) -> Result<bool> {
        self.end_holding(job, holder, token, how).await
    }

    /// Ends the holding of (`holder`, `token`), its end recorded as `how`;
    /// the first waiter is granted at once. Returns whether it ended one.
    async fn end_holding(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        how: TenureEnd,
    ) -> Result<bool> {
        self.check_open()?;
        let (r, seq, changed) = self.decide(job, |t, now| {
            match t.release_as(job, holder, token, now, how) {
                Ok(fx) => (Ok(()), fx),
                Err(e) => (Err(e), Effects::default()),
            }
        })?;
        r?;
        self.publish_when_durable(job, seq, changed).await?;
        Ok(changed)
    }

    /// Hands the live lease of (`holder`, `token`) to a waiting Acquire
    /// (`to`, or the first in line), granted the next token in the same
    /// durable change; see
    /// [`LeaseTable::transfer`](leasehold_core::lease::LeaseTable::transfer).
    /// Returns the successor's lease.
    pub async fn transfer(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        to: Option<&str>,
        ttl: Option<Duration>,
    ) -> Result<LeaseView> {
        self.check_open()?;
        let (r, seq, changed) = self.decide(job, |t, now| {
            match t.transfer(job, holder, token, to, ttl, now) {
                Ok((view, fx)) => (Ok(view), fx),
                Err(e) => (Err(e), Effects::default()),
            }
        })?;
        let view = r?;
        self.publish_when_durable(job, seq, changed).await?;
        Ok(view)
    }

    /// Deletes `job`, its keys and its history, if it has no live lease
    /// and nobody waits for it ([`Error::JobInUse`] otherwise); returns
    /// whether there was such a job. **A job created again under the name
    /// gets tokens above every token the deleted one issued**: the
    /// deletion and the raised new-job floor are one change in the store.
    pub async fn delete_job(&self, job: &JobName) -> Result<bool> {
        self.check_open()?;
        let seq = {
            let mut st = self.lock();
            let undo = st.table.checkpoint(job);
            let now = clock::now();
            let Some(token) = st.table.delete(job, now)? else {
                return Ok(false);
            };
            if let Err(e) = self.inner.store.delete_job(job, token) {
                match &e {
                    Error::NoSpace { .. } => {
                        st.table.rollback(undo);
                        self.inner.check_space();
                    }
                    _ => self.inner.fail(&mut st, None, &e),
                }
                return Err(e);
            }
            st.keys.remove(job);
            leasehold_backend::room::give_back_room(&mut st.keys);
            self.inner.commit.stage()
        };
        self.inner.commit.wait(seq).await?;
        tracing::info!(job = %job, "job deleted");
        Ok(true)
    }
}

/// Takes a waiting `Acquire` out of line however it ends: granted, timed
/// out, or dropped because the client went away.
struct Queued<'a> {
    node: &'a Node,
    job: &'a JobName,
    id: WaiterId,
    holder: &'a HolderId,
    /// The job's token when the waiter joined the line.
    joined: Token,
    /// Whether the Acquire has its answer (from here on, a guard of its
    /// own answers for a grant).
    answered: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut st = self.node.lock();
        st.wakers.remove(&self.id);
        // Room for ten thousand waiters is given back once they have gone.
        let (len, cap) = (st.wakers.len(), st.wakers.capacity());
        if cap > 1024 && len < cap / 4 {
            st.wakers.shrink_to(len * 2);
        }
        let fx = st.table.dequeue(self.job, self.id);
        st.wake(&fx.wake);
        if self.answered {
            return;
        }
        // Dropped unanswered (the call was cancelled): a release may have
        // handed the lease to this waiter in the meantime, and its caller
        // will never know. Give it back.
        let view = st.table.view(self.job, clock::now());
        if view.holder() == Some(self.holder) && view.token > self.joined {
            drop(st);
            let (node, job, holder) = (self.node.clone(), self.job.clone(), self.holder.clone());
            drop(ReleaseIfDropped::new(async move {
                node.release_undelivered(&job, &holder, view.token).await
            }));
        }
    }
}
