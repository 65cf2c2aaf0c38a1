//! `Acquire`: a grant, the live holder's extension, or a place in the
//! line of waiters and a sleep on the job's shared watch until the lease
//! frees up, first come, first served across every frontend; and the
//! grant's one transaction, with a new job's count and floor and the
//! history the grant records and trims.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use leasehold_backend::{Acquired, ReleaseIfDropped};
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules::{self, MayGrant};
use leasehold_core::lease::{HolderId, JobName, LeaseView, Published, Token};

use super::keys::JobState;
use super::queue::{self, Line, Place, Waiting};
use super::{closed, contention, decide, txn, EtcdNode, Read, MAX_TRIES};

/// The waiter's join's error, if it fails (see [`Waiting::failure`]).
async fn join_failure(waiting: Option<&Waiting>) -> Error {
    match waiting {
        Some(w) => w.failure().await,
        None => std::future::pending().await,
    }
}

impl EtcdNode {
    /// Asks for the lease; waits up to `wait` for it to free up, first come
    /// first served across every frontend. Returns whether it was granted,
    /// whether the grant is a new one rather than the live holder's
    /// extension, and the lease. A grant whose call is dropped while its
    /// transaction is in flight is released (if it was made), so that the
    /// next in line gets it.
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

    /// [`EtcdNode::acquire`] by a holder whose principal may own at most
    /// `max_owned` jobs (its policy's `max_jobs`): a new job is refused
    /// when it owns that many ([`rules::admit_new_job`]). The count is a
    /// key per principal that the creating grant compares and puts, so it
    /// is exact across frontends. `preferred`: asks as a preferred
    /// candidate (its waiter key under `p/`, ahead of the others).
    /// `value`: published with the grant (kept in the holder record, and
    /// in the waiter key, so that a transfer grants it too).
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
        self.bounded(
            "Acquire",
            wait,
            self.acquire_unbounded(job, holder, ttl, wait, max_owned, preferred, value),
        )
        .await
    }

    /// The work of [`EtcdNode::acquire_as`], which bounds it.
    #[allow(clippy::too_many_arguments)]
    async fn acquire_unbounded(
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
        self.check_ttl(ttl)?;
        let give_up = Instant::now() + wait;
        let mut waiting: Option<Waiting> = None;
        let mut watch: Option<Arc<queue::JobWatch>> = None;
        let mut closing = self.inner.closing.subscribe();
        let mut tries = 0;
        // A held job's newest read, when other waiters of this frontend
        // watch it and nothing changed since ([`queue::JobWatches::busy_read`]).
        let mut noted = match wait.is_zero() {
            true => None,
            false => self.inner.job_watches.busy_read(job.as_str()),
        };
        loop {
            if let Some(w) = waiting.as_mut() {
                // Woken: our place in line, now that it matters.
                self.failed(w.placed().await.map(|_| ()))?;
            }
            let mut read = match noted.take() {
                Some((w, revision, st)) => {
                    watch = Some(w);
                    Read {
                        revision,
                        job: st,
                        line: Line::default(),
                    }
                }
                None => {
                    self.read_job(job, waiting.as_ref().map(|w| w.place.key.as_slice()))
                        .await?
                }
            };
            if read.job.holder.is_none() && read.line.waiting > 0 {
                read.line = match self.first_in_line(job, &read).await {
                    Ok(line) => line,
                    // etcd compacted the read's revision in between: read
                    // the job again.
                    Err(Error::Storage(m)) if m.contains("compacted") && tries < MAX_TRIES => {
                        tries += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
            }
            let rev = waiting.as_ref().map(|w| w.place.rev);
            let step = decide::acquire(&read.job, &read.line, holder, rev)
                .map_err(|r| r.error(job, Token::NONE, read.job.token()))?;
            if step == MayGrant::Exhausted {
                return Err(Error::TokensExhausted {
                    job: job.to_string(),
                });
            }
            // Our key gone and the lease ours: a transfer granted it to us
            // (its transaction deleted the key). A grant made for us, as
            // our own grant transaction would have made it: untold until
            // we ask again, given back if this call goes away. (With
            // another TTL than ours, it is extended to ours below.)
            if let (MayGrant::Extend, Some(h)) = (step, read.job.holder.as_ref()) {
                if rev.is_some()
                    && read.line.mine != rev
                    && h.rec.ttl == ttl
                    && h.rec.value == value
                {
                    if let Some(mut w) = waiting.take() {
                        w.granted = true;
                    }
                    return Ok(Acquired {
                        acquired: true,
                        fresh: true,
                        lease: decide::granted(job, &h.rec, clock::now()),
                    });
                }
            }
            let place = waiting.as_ref().map(|w| &w.place);
            if !matches!(step, MayGrant::Busy { .. }) {
                tries += 1;
                if tries > MAX_TRIES {
                    return Err(contention("Acquire"));
                }
                let done = match (step, &read.job.holder) {
                    (MayGrant::Extend, Some(h)) => self.extend(job, h, ttl, Some(&value)).await?,
                    _ => {
                        let how = (max_owned, preferred, &value);
                        self.grant(job, holder, ttl, &read.job, place, how).await?
                    }
                };
                if let Some(view) = done {
                    if let Some(mut w) = waiting.take() {
                        // A grant deleted our key in its transaction; an
                        // extension leaves it to the drop.
                        w.granted = step == MayGrant::Grant;
                    }
                    return Ok(Acquired {
                        acquired: true,
                        fresh: step == MayGrant::Grant,
                        lease: view,
                    });
                }
                continue; // the job changed since the read: read again
            }
            // Busy.
            if Instant::now() >= give_up {
                return Ok(Acquired {
                    acquired: false,
                    fresh: false,
                    lease: self.view(job, &read.job).await?,
                });
            }
            if waiting.is_none() {
                // In line now. Not read again: the watch below starts
                // from this read's revision, so whatever changed since (a
                // release, an expiry, a waiter ahead leaving) wakes us at
                // once, and a join changes nothing for anyone. (Reading
                // again here cost ten thousand waiters joining at once ten
                // thousand more reads.)
                waiting = Some(self.enqueue(job, holder, preferred, &value)?);
            }
            // The job's shared watch; a new one when the one running started
            // after our read (read again first).
            let fits = watch.as_ref().is_some_and(|w| w.starts_by(read.revision));
            if !fits {
                watch = self
                    .inner
                    .job_watches
                    .watch(self, job.as_str(), read.revision);
                if watch.is_none() {
                    continue;
                }
            }
            let w = watch.clone().expect("watch open");
            w.note_read(read.revision, &read.job);
            tokio::select! {
                changed = w.changed_after(read.revision) => if !changed {
                    // It broke: read afresh and share a new one.
                    watch = None;
                },
                _ = sleep_until(give_up) => {}
                _ = closed(&mut closing) => return Err(Error::ShuttingDown),
                // Our join failed (nothing wakes us when it succeeds).
                e = join_failure(waiting.as_ref()) => return self.failed(Err(e)),
            }
        }
    }

    /// Grants the free lease to `holder` with the next token, in one
    /// transaction; `None` when the job changed since `st` was read.
    /// `how`: the holder's principal's `max_jobs`, whether it asked as a
    /// preferred candidate, and the value it publishes.
    async fn grant(
        &self,
        job: &JobName,
        holder: &HolderId,
        ttl: Duration,
        st: &JobState,
        place: Option<&Place>,
        how: (Option<usize>, bool, &Published),
    ) -> Result<Option<LeaseView>> {
        let (max_owned, preferred, value) = how;
        // A new job: counted and above the new-job floor, both in `meta`,
        // which the grant compares and puts. This frontend's new jobs take
        // their turn at it: all at once, each grant's comparison would fail
        // but one, and the losers try again (64 creating at once through
        // one frontend had one in ten refused after 64 tries).
        let _turn = match st.token {
            Some(_) => None,
            None => Some(self.inner.new_jobs.lock().await),
        };
        let meta = match st.token {
            Some(_) => None,
            None => {
                let m = self.meta().await?;
                if m.rec.jobs >= self.inner.limits.max_jobs as u64 {
                    return Err(self.inner.limits.too_many_jobs());
                }
                Some(m)
            }
        };
        // A new job is its first holder's principal's, counted in that
        // principal's key, compared and put by the grant too.
        let owned = match (st.token.is_none(), holder.principal()) {
            (true, Some(p)) => {
                let owned = self.owned(p).await?;
                rules::admit_new_job(holder, owned.jobs as usize, max_owned)?;
                Some((p, owned))
            }
            _ => None,
        };
        let floor = meta.map_or(Token::NONE, |m| m.rec.new_job_floor);
        // Refused before anything is created in etcd.
        let wall = clock::wall_unix_ms();
        let (holder_rec, token_rec) =
            decide::grant(job, st, floor, holder, ttl, wall, value.clone())?;
        let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
        let mut req = txn::grant(
            &self.inner.keys,
            job.as_str(),
            st,
            place,
            &holder_rec,
            &token_rec,
            lease,
        );
        if let Some(m) = meta {
            txn::count_new_job(&self.inner.keys, &mut req, &m);
        }
        if place.map_or(preferred, |p| p.preferred) {
            req.success.push(txn::preferred_grant(
                &self.inner.keys,
                job.as_str(),
                holder_rec.token,
            ));
        }
        if let Some((p, owned)) = owned {
            txn::count_owned(&self.inner.keys, &mut req, p, owned, owned.jobs + 1);
        }
        let keep = self.inner.limits.history_per_job as u64;
        // A job created: tenures of an earlier life, if any (DeleteJob
        // removes them now; older servers kept them), are kept, the newest
        // `keep - 1` of them (one read, at creation only).
        let older_out = match st.token {
            None if keep > 0 => self.history_past(job, keep - 1).await?,
            _ => Vec::new(),
        };
        req.success.extend(txn::grant_history(
            &self.inner.keys,
            job,
            st,
            holder_rec.token,
            holder,
            ttl,
            value,
            keep,
            wall,
            &older_out,
        ));
        if self.faults().ack_before_sync() {
            // The broken rule "ack-before-sync": the grant is answered
            // before its transaction has committed, or even been sent.
            self.commit_later(req);
            self.expire_early(lease, ttl);
            return Ok(Some(decide::granted(job, &holder_rec, clock::now())));
        }
        // On an unknown outcome the etcd lease is left to run out: the
        // grant may have happened, and its holder may yet learn of it by
        // asking again. But a call dropped meanwhile (its client went away)
        // never will: then the grant, if it was made, is released.
        let undo = {
            let (node, job, holder) = (self.clone(), job.clone(), holder.clone());
            let token = holder_rec.token;
            ReleaseIfDropped::new(
                async move { node.release_undelivered(&job, &holder, token).await },
            )
        };
        let done = self.failed(self.inner.etcd.txn(req).await);
        undo.disarm();
        if !done?.succeeded {
            self.revoke_later(lease);
            return Ok(None);
        }
        self.expire_early(lease, ttl);
        Ok(Some(decide::granted(job, &holder_rec, clock::now())))
    }
}
