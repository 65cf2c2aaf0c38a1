//! Renewals: `Renew` and the batched `KeepAlive`, and the extension of a
//! live holding they share with its holder's repeated `Acquire`: an etcd
//! keep-alive that counts only when confirmed in the current raft term,
//! or a move to a new etcd lease when the TTL or the published value
//! changes; and the broken rule "renew-bumps-token". A `KeepAlive`
//! message reads its jobs together and proves its plain renewals' terms
//! with one read (`renew_each`); a stream's renewals share etcd leases,
//! one a group (`renew_many_in`, module `groups`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use leasehold_backend::{RenewOutcome, Renewal, Renewed};
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules::{self, Faults};
use leasehold_core::lease::{HolderId, JobName, LeaseState, LeaseView, Published, Token, Vacancy};

use super::client::{pb, range_req, ranges};
use super::decide::{self, Extend, Proof};
use super::groups::{RenewGroups, Touched};
use super::health::no_space_health;
use super::keys::{self, Holding, JobState};
use super::queue::{self, Line};
use super::{contention, is_no_space, txn, EtcdNode, Read, MAX_TRIES};

impl EtcdNode {
    /// Extends our live holding for `ttl` from now: an etcd keep-alive, or
    /// a move to a new etcd lease when the TTL or the published value
    /// (`value`, `None` to keep it) changes. `None` when the holding is
    /// gone (read again).
    pub(super) async fn extend(
        &self,
        job: &JobName,
        h: &Holding,
        ttl: Duration,
        value: Option<&Published>,
    ) -> Result<Option<LeaseView>> {
        let rec = match decide::extend(h, ttl, value) {
            Extend::KeepAlive => {
                // The first time the holder asks again, the grant is marked
                // told (see `txn::told_again`) before it is extended, so
                // that no give-back ends it after this answer.
                //
                // A renewal must never need a write: etcd out of space (its
                // NOSPACE alarm) refuses every put, but still takes
                // keep-alives and transactions that only delete. So when
                // the marking is refused for NOSPACE, the grant is marked
                // by deleting its untold key alone, which etcd takes. That
                // is enough: a give-back compares both the holder key's
                // version (1) and the untold key (still the grant's token),
                // so after either mark none can end the grant, on any
                // frontend, even once etcd takes writes again. (Skipping
                // the mark and keeping the lease alive anyway would not
                // be: a give-back made after the alarm is disarmed would
                // find version 1 and release a lease whose holder was just
                // told it is renewed.) While the version stays 1, each
                // renewal tries the put again, and the first after the
                // alarm makes it.
                if h.version == 1 {
                    let k = &self.inner.keys;
                    let told = match self
                        .inner
                        .etcd
                        .txn(txn::told_again(k, job.as_str(), h))
                        .await
                    {
                        Err(e) if is_no_space(&e) => {
                            self.set_health(no_space_health());
                            let req = txn::told_again_by_deletion(k, job.as_str(), h);
                            self.failed(self.inner.etcd.txn(req).await)?
                        }
                        r => self.failed(r)?,
                    };
                    if !told.succeeded {
                        return Ok(None);
                    }
                }
                let live = self.keep_alive(job, h).await?;
                if live {
                    self.expire_early(h.lease, ttl);
                }
                return Ok(live.then(|| decide::granted(job, &h.rec, clock::now())));
            }
            Extend::Move(rec) => rec,
        };
        let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
        let req = txn::move_holding(&self.inner.keys, job.as_str(), h, &rec, lease);
        if !self.failed(self.inner.etcd.txn(req).await)?.succeeded {
            self.revoke_later(lease);
            return Ok(None);
        }
        self.revoke_own(h);
        self.expire_early(lease, ttl);
        Ok(Some(decide::granted(job, &rec, clock::now())))
    }

    /// Keeps the holding's etcd lease alive, and confirms it: `false` when
    /// the holding is gone.
    ///
    /// etcd's lessor renews in memory on the member that thinks it leads,
    /// so the keep-alive counts only if the member that answered was in
    /// the current raft term: the term of a linearizable read made after
    /// it, which also checks that the holder key is still this holding
    /// (see [`decide::keep_alive_proof`]). An answer from an older term
    /// is asked again, on a new keep-alive stream.
    async fn keep_alive(&self, job: &JobName, h: &Holding) -> Result<bool> {
        let hk = self.inner.keys.holder(job.as_str());
        for _ in 0..3 {
            let Some((_, term)) = self.failed(self.inner.etcd.keep_alive(h.lease).await)? else {
                return Ok(false);
            };
            let r = self.failed(
                self.inner
                    .etcd
                    .range(range_req(hk.clone(), Vec::new(), 0))
                    .await,
            )?;
            let current = r.header.as_ref().map_or(0, |h| h.raft_term);
            match decide::keep_alive_proof(h, r.kvs.first(), term, current) {
                Proof::Live => return Ok(true),
                Proof::Gone => return Ok(false),
                Proof::StaleTerm => {
                    tracing::debug!(
                        term,
                        current,
                        "keep-alive answered in an older raft term; again"
                    );
                    self.inner.etcd.reopen_keep_alives();
                }
            }
        }
        Err(Error::Storage(
            "etcd keep-alive kept being answered by a member in an older raft term".into(),
        ))
    }

    /// The broken rule "renew-bumps-token": moves the holding `h` to a new
    /// etcd lease for `ttl` with the token `bumped`, and the job's token
    /// counter with it. `None` when the holding is gone (read again).
    async fn bump(
        &self,
        job: &JobName,
        st: &JobState,
        h: &Holding,
        ttl: Duration,
        bumped: Token,
    ) -> Result<Option<LeaseView>> {
        let rec = keys::HolderRec {
            token: bumped,
            ttl,
            holder: h.rec.holder.clone(),
            issued: h.rec.issued,
            value: h.rec.value.clone(),
            sharing: h.rec.sharing.moved_off(),
        };
        let token_rec = keys::TokenRec {
            token: bumped,
            released: false,
            holder: h.rec.holder.clone(),
            owner: st.token.as_ref().and_then(|t| t.owner.clone()),
        };
        let (lease, _) = self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
        let req = txn::bump_token(&self.inner.keys, job.as_str(), h, &rec, &token_rec, lease);
        if !self.failed(self.inner.etcd.txn(req).await)?.succeeded {
            self.revoke_later(lease);
            return Ok(None);
        }
        self.revoke_own(h);
        self.expire_early(lease, ttl);
        Ok(Some(decide::granted(job, &rec, clock::now())))
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

    /// [`EtcdNode::renew`] that also replaces the lease's published value
    /// when `value` is `Some` (`RenewRequest.value`): the holder key is
    /// put again with it, which its watchers see.
    pub async fn renew_with_value(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
        value: Option<Published>,
    ) -> Result<Renewed> {
        self.bounded(
            "Renew",
            Duration::ZERO,
            self.renew_unbounded(job, holder, token, ttl, value),
        )
        .await
    }

    /// The work of [`EtcdNode::renew_with_value`], which bounds it.
    async fn renew_unbounded(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
        value: Option<Published>,
    ) -> Result<Renewed> {
        self.check_open()?;
        self.check_ttl(ttl)?;
        self.renew_one(job, holder, token, ttl, value.as_ref())
            .await?
            .map_err(|(e, _)| e)
    }

    async fn renew_one(
        &self,
        job: &JobName,
        holder: &HolderId,
        token: Token,
        ttl: Duration,
        value: Option<&Published>,
    ) -> Result<RenewOutcome> {
        let c = &self.inner.counters;
        for _ in 0..MAX_TRIES {
            let read = self.read_job(job, None).await?;
            match decide::renew(job, &read.job, holder, token) {
                Ok(h) => {
                    let answered = rules::renewed_token(h.rec.token, self.faults());
                    let done = match answered == h.rec.token {
                        true => self.extend(job, h, ttl, value).await?,
                        false => self.bump(job, &read.job, h, ttl, answered).await?,
                    };
                    if let Some(view) = done {
                        c.renewals.fetch_add(1, Ordering::Relaxed);
                        return Ok(Ok(Renewed {
                            successor_waiting: decide::successor_waiting(&read.job, &read.line),
                            lease: view,
                        }));
                    }
                }
                Err(lost) => {
                    c.renew_losses.fetch_add(1, Ordering::Relaxed);
                    let view = self.view(job, &read.job).await?;
                    return Ok(Err((lost, view)));
                }
            }
        }
        Err(contention("Renew"))
    }

    /// Renews many leases, each on its own (concurrently). Fails as a whole
    /// only when the frontend is closing or etcd fails.
    pub async fn renew_many(&self, batch: &[Renewal]) -> Result<Vec<RenewOutcome>> {
        self.bounded(
            "KeepAlive",
            Duration::ZERO,
            self.renew_many_unbounded(batch, None),
        )
        .await
    }

    /// [`EtcdNode::renew_many`] for one stream's messages, in turn: its
    /// plain renewals share etcd leases, one a group (module
    /// `groups`), so that a message that renews the same
    /// leases as the one before costs etcd one keep-alive a group, not
    /// one a lease. Every renewal's answer is what `renew_many`'s would
    /// be.
    pub async fn renew_many_in(
        &self,
        batch: &[Renewal],
        groups: &RenewGroups,
    ) -> Result<Vec<RenewOutcome>> {
        self.bounded(
            "KeepAlive",
            Duration::ZERO,
            self.renew_many_unbounded(batch, Some(groups)),
        )
        .await
    }

    /// The work of [`EtcdNode::renew_many`] and
    /// [`EtcdNode::renew_many_in`], which bound it.
    ///
    /// With groups: the members each group has in `batch` are renewed by
    /// one keep-alive of the group's etcd lease, after the members it
    /// leaves out were moved off it; the batch's read, made after every
    /// keep-alive was answered, proves them. The rest go as without, and
    /// those of them renewed by a keep-alive of their own etcd lease then
    /// join a group.
    async fn renew_many_unbounded(
        &self,
        batch: &[Renewal],
        groups: Option<&RenewGroups>,
    ) -> Result<Vec<RenewOutcome>> {
        self.check_open()?;
        // A broken rule works lease by lease: no groups then.
        let groups = groups.filter(|_| self.faults() == Faults::default());
        let mut out: Vec<Option<RenewOutcome>> = vec![None; batch.len()];
        let touched = match groups {
            Some(g) => self.keep_groups_alive(g, g.touched(batch)).await?,
            None => Vec::new(),
        };
        // Every entry's job, read together: a few transactions, not one
        // each.
        let reads = self.read_jobs(batch).await?;
        let proven = match groups {
            Some(g) => self.prove_groups(g, batch, touched, &reads, &mut out),
            None => HashMap::new(),
        };
        let mut proven = proven;
        let mut rest: Vec<(usize, Read)> = reads
            .into_iter()
            .enumerate()
            .filter(|(i, _)| out[*i].is_none())
            .map(|(i, (read, _))| (i, read))
            .collect();
        if let Some(g) = groups {
            rest = self
                .take_over_groups(g, batch, rest, &mut out, &mut proven)
                .await?;
        }
        let joiners = self.renew_each(batch, rest, &mut out).await?;
        if let Some(g) = groups {
            self.join_groups(g, batch, joiners, proven).await;
        }
        let out: Vec<RenewOutcome> = out.into_iter().flatten().collect();
        assert_eq!(out.len(), batch.len(), "every renewal answered");
        Ok(out)
    }

    /// Moves off each touched group the members its batch leaves out,
    /// then keeps the groups alive, all at once: each group with the time
    /// its keep-alive was sent, and the raft term of the answer (`None`
    /// when etcd no longer has the lease).
    ///
    /// A member left out goes to an etcd lease of its own that lasts until
    /// the group's would (whole seconds, rounded up: etcd's unit), so
    /// that the keep-alive renews only the leases renewed. A move whose
    /// outcome is unknown fails the whole batch, before any keep-alive:
    /// the member may still be on the group's lease.
    async fn keep_groups_alive(
        &self,
        groups: &RenewGroups,
        touched: Vec<Touched>,
    ) -> Result<Vec<(Touched, Instant, Option<u64>)>> {
        let mut set = tokio::task::JoinSet::new();
        for t in &touched {
            let left = (t.kept + t.ttl).saturating_duration_since(Instant::now());
            let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            let until = t.kept + t.ttl;
            for (job, h) in t.absent.iter().cloned() {
                let node = self.clone();
                set.spawn(async move {
                    let r = match secs {
                        // The group's lease has run out, or is about to:
                        // so has the member's holding.
                        0 => Ok(()),
                        s => node.move_off(&job, &h, s).await,
                    };
                    (job, h, until, r)
                });
            }
        }
        while let Some(done) = set.join_next().await {
            let (job, h, until, r) =
                done.map_err(|e| Error::Storage(format!("move task failed: {e}")))?;
            match r {
                Ok(()) => {}
                // etcd out of space took nothing, and takes no move (a
                // put); it takes keep-alives and deletes. The member stays
                // on the group's lease, kept alive with it, and is deleted
                // when its own TTL runs out, as etcd's expiry would (should
                // this frontend stop first, with the group's lease: at
                // most one TTL later).
                Err(e) if is_no_space(&e) => {
                    self.set_health(no_space_health());
                    self.expire_at(job.clone(), h, until);
                }
                Err(e) => return Err(e),
            }
            groups.leave(&job);
        }
        let mut set = tokio::task::JoinSet::new();
        for t in touched {
            let node = self.clone();
            set.spawn(async move {
                let sent = Instant::now();
                let answer = node.inner.etcd.keep_alive(t.lease).await;
                (t, sent, answer)
            });
        }
        let mut kept = Vec::new();
        while let Some(done) = set.join_next().await {
            let (t, sent, answer) =
                done.map_err(|e| Error::Storage(format!("keep-alive task failed: {e}")))?;
            let term = self.failed(answer)?.map(|(_, term)| term);
            if term.is_none() {
                groups.gone(t.lease);
            }
            kept.push((t, sent, term));
        }
        Ok(kept)
    }

    /// Deletes `job`'s holder key at `until` if it is still exactly `h`:
    /// the expiry of a member its group's stream stopped renewing while
    /// etcd, out of space, refused to move it to an etcd lease of its own.
    fn expire_at(&self, job: JobName, h: Holding, until: Instant) {
        let node = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until.into()).await;
            let req = txn::expire_holding(&node.inner.keys, job.as_str(), &h);
            if let Err(e) = node.inner.etcd.txn(req).await {
                tracing::warn!(error = %e, %job, "could not end a lease left out of its group; it runs out with the group's etcd lease");
            }
        });
    }

    /// Moves `job`'s holding `h` off its group's etcd lease to one of its
    /// own of `secs`, if it is still exactly `h`.
    async fn move_off(&self, job: &JobName, h: &Holding, secs: u64) -> Result<()> {
        let rec = keys::HolderRec {
            sharing: h.rec.sharing.moved_off(),
            ..h.rec.clone()
        };
        let (lease, _) = self.failed(self.inner.etcd.grant(secs as i64).await)?;
        let req = txn::move_holding(&self.inner.keys, job.as_str(), h, &rec, lease);
        match self.failed(self.inner.etcd.txn(req).await) {
            Ok(r) if r.succeeded => {}
            // Not there any more: released, expired or moved already.
            Ok(_) => self.revoke_later(lease),
            Err(e) => {
                self.revoke_later(lease);
                return Err(e);
            }
        }
        self.inner
            .counters
            .group_moves_off
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Answers the members that the keep-alives of their groups renewed:
    /// the batch's read (made after every keep-alive was answered) finds
    /// the holder key as the group put it, in a raft term no newer than
    /// the keep-alive's answer. The rest are left to be renewed one by
    /// one, and leave their groups. Returns the groups proven kept alive,
    /// by TTL: (etcd lease, when its keep-alive was sent).
    fn prove_groups(
        &self,
        groups: &RenewGroups,
        batch: &[Renewal],
        touched: Vec<(Touched, Instant, Option<u64>)>,
        reads: &[(Read, u64)],
        out: &mut [Option<RenewOutcome>],
    ) -> HashMap<Duration, (i64, Instant)> {
        let c = &self.inner.counters;
        let now = clock::now();
        let mut proven = HashMap::new();
        let mut stale = false;
        for (t, sent, term) in touched {
            let Some(term) = term else { continue };
            let mut live = 0;
            // Whether the keep-alive was answered in the term of every
            // read after it: then the group's etcd lease is good for
            // joins, even when none of its members was still on it.
            let mut in_term = true;
            for (i, member) in &t.present {
                let (r, (read, current)) = (&batch[*i], &reads[*i]);
                in_term &= term >= *current;
                let proof = match decide::renew(&r.job, &read.job, &r.holder, r.token) {
                    Ok(h) if h.lease == member.lease && h.raw == member.raw => {
                        match term >= *current {
                            true => Proof::Live,
                            false => Proof::StaleTerm,
                        }
                    }
                    _ => Proof::Gone,
                };
                match proof {
                    Proof::Live => {
                        live += 1;
                        c.renewals.fetch_add(1, Ordering::Relaxed);
                        out[*i] = Some(Ok(Renewed {
                            successor_waiting: decide::successor_waiting(&read.job, &read.line),
                            lease: decide::granted(&r.job, &member.rec, now),
                        }));
                    }
                    Proof::StaleTerm => {
                        stale = true;
                        groups.leave(&r.job);
                    }
                    Proof::Gone => groups.leave(&r.job),
                }
            }
            if live > 0 {
                groups.kept(t.lease, sent);
                c.group_keep_alives.fetch_add(1, Ordering::Relaxed);
            }
            if in_term {
                proven.insert(t.ttl, (t.lease, sent));
            }
        }
        if stale {
            tracing::debug!(
                "a group's keep-alive answered in an older raft term; renewing one by one"
            );
            self.inner.etcd.reopen_keep_alives();
        }
        proven
    }

    /// Renews together, by moving them onto this stream's group, the
    /// leases of `rest` that sit on another stream's group (a stream that
    /// ended, or another frontend's) when the batch renews **every** lease
    /// on that group's etcd lease (etcd lists them): the case of a client
    /// whose stream was opened again, or whose frontend restarted. A
    /// transaction of up to 64 moves compares each holder key unchanged
    /// on the old lease. The old etcd lease is left to run out with
    /// nothing on it, so that no etcd lease is ever kept alive by a
    /// stream other than the one that put its keys there. Returns what is
    /// left to renew one by one: a group the batch renews only part of is
    /// left too, and each of its leases moves to an etcd lease of its own
    /// as any other renewal of a shared holding does.
    async fn take_over_groups(
        &self,
        groups: &RenewGroups,
        batch: &[Renewal],
        rest: Vec<(usize, Read)>,
        out: &mut [Option<RenewOutcome>],
        proven: &mut HashMap<Duration, (i64, Instant)>,
    ) -> Result<Vec<(usize, Read)>> {
        let mut by_lease: HashMap<i64, Vec<usize>> = HashMap::new();
        for (n, (i, read)) in rest.iter().enumerate() {
            let r = &batch[*i];
            match decide::renew(&r.job, &read.job, &r.holder, r.token) {
                Ok(h) if h.rec.sharing.shared && h.rec.ttl == r.ttl && !groups.owns(h.lease) => {
                    by_lease.entry(h.lease).or_default().push(n)
                }
                _ => {}
            }
        }
        if by_lease.is_empty() {
            return Ok(rest);
        }
        let k = &self.inner.keys;
        let mut taken: HashSet<usize> = HashSet::new();
        for (old, members) in by_lease {
            let Some(on_it) = self.failed(self.inner.etcd.lease_keys(old).await)? else {
                continue;
            };
            let renewed: HashSet<Vec<u8>> = members
                .iter()
                .map(|n| k.holder(batch[rest[*n].0].job.as_str()))
                .collect();
            if on_it.len() != members.len() || !on_it.iter().all(|key| renewed.contains(key)) {
                continue;
            }
            let ttl = batch[rest[members[0]].0].ttl;
            let (lease, kept) = match proven.get(&ttl) {
                Some(p) => *p,
                None => {
                    let asked = Instant::now();
                    let (lease, _) =
                        self.failed(self.inner.etcd.grant(ttl.as_secs() as i64).await)?;
                    proven.insert(ttl, (lease, asked));
                    (lease, asked)
                }
            };
            let mut confirm = Vec::new();
            for chunk in members.chunks(MAX_MOVES_PER_TXN) {
                let mut req = pb::TxnRequest::default();
                let mut moved = Vec::new();
                for n in chunk {
                    let (i, read) = &rest[*n];
                    let r = &batch[*i];
                    let h = decide::renew(&r.job, &read.job, &r.holder, r.token)
                        .expect("checked above");
                    let one = txn::move_holding(k, r.job.as_str(), h, &h.rec, lease);
                    req.compare.extend(one.compare);
                    req.success.extend(one.success);
                    let waiting = decide::successor_waiting(&read.job, &read.line);
                    moved.push((*n, h.clone(), waiting));
                }
                // Counted on the group before the move is sent, as a
                // join is (see `join_groups`).
                for (n, h, _) in &moved {
                    let on_group = Holding {
                        lease,
                        version: h.version + 1,
                        ..h.clone()
                    };
                    groups.join(lease, ttl, kept, batch[rest[*n].0].job.clone(), on_group);
                }
                let done = self.failed(self.inner.etcd.txn(req).await);
                let now = clock::now();
                for (n, h, waiting) in moved {
                    let r = &batch[rest[n].0];
                    match &done {
                        Ok(t) if t.succeeded => {
                            self.inner.counters.renewals.fetch_add(1, Ordering::Relaxed);
                            out[rest[n].0] = Some(Ok(Renewed {
                                successor_waiting: waiting,
                                lease: decide::granted(&r.job, &h.rec, now),
                            }));
                            taken.insert(n);
                        }
                        // Not moved (changed meanwhile, or etcd out of
                        // space): renewed one by one below.
                        Ok(_) => groups.leave(&r.job),
                        Err(e) if is_no_space(e) => groups.leave(&r.job),
                        // Perhaps moved: left counted on the group.
                        Err(_) => {}
                    }
                }
                match done {
                    Ok(t) if t.succeeded => {
                        self.inner
                            .counters
                            .group_joins
                            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        confirm.extend(chunk.iter().map(|n| {
                            let h = decide::renew(
                                &batch[rest[*n].0].job,
                                &rest[*n].1.job,
                                &batch[rest[*n].0].holder,
                                batch[rest[*n].0].token,
                            )
                            .expect("checked above");
                            let on_group = Holding {
                                lease,
                                version: h.version + 1,
                                ..h.clone()
                            };
                            (batch[rest[*n].0].job.clone(), on_group)
                        }));
                    }
                    Ok(_) => {}
                    Err(e) if is_no_space(&e) => self.set_health(no_space_health()),
                    Err(e) => return Err(e),
                }
            }
            self.confirm_moves(groups, lease, ttl, confirm).await;
        }
        Ok(rest
            .into_iter()
            .enumerate()
            .filter(|(n, _)| !taken.contains(n))
            .map(|(_, r)| r)
            .collect())
    }

    /// Puts each of `joiners` (renewed just now by a keep-alive of its own
    /// etcd lease, proven) on a group's etcd lease for its TTL: the one
    /// proven kept alive in this batch, or a new one. Each move is one
    /// transaction that compares the holding unchanged; a failed one
    /// leaves the lease on its own, still renewed. Nothing here changes
    /// an answer.
    async fn join_groups(
        &self,
        groups: &RenewGroups,
        batch: &[Renewal],
        joiners: Vec<(usize, Holding)>,
        proven: HashMap<Duration, (i64, Instant)>,
    ) {
        let mut by_ttl: HashMap<Duration, Vec<(usize, Holding)>> = HashMap::new();
        for (i, h) in joiners {
            if h.rec.sharing.may_join() && !h.rec.sharing.shared {
                by_ttl.entry(batch[i].ttl).or_default().push((i, h));
            }
        }
        for (ttl, joiners) in by_ttl {
            let (lease, kept, new) = match proven.get(&ttl) {
                Some((lease, kept)) => (*lease, *kept, false),
                None => {
                    let asked = Instant::now();
                    match self.inner.etcd.grant(ttl.as_secs() as i64).await {
                        Ok((lease, _)) => (lease, asked, true),
                        Err(e) => {
                            tracing::debug!(error = %e, "a group's etcd lease was not granted");
                            continue;
                        }
                    }
                }
            };
            // Each counted on the group before its move is sent, so that
            // a move cut short (the call's deadline, the frontend closing)
            // is still known: a batch that leaves it out moves it off, and
            // one that finds it elsewhere lets it go.
            let mut set = tokio::task::JoinSet::new();
            for (i, h) in joiners {
                let job = batch[i].job.clone();
                let rec = keys::HolderRec {
                    sharing: h.rec.sharing.joined(),
                    ..h.rec.clone()
                };
                let raw = rec.encode();
                let on_group = Holding {
                    rec,
                    raw,
                    lease,
                    version: h.version + 1,
                };
                groups.join(lease, ttl, kept, job.clone(), on_group.clone());
                let node = self.clone();
                set.spawn(async move {
                    let req =
                        txn::move_holding(&node.inner.keys, job.as_str(), &h, &on_group.rec, lease);
                    let r = node.inner.etcd.txn(req).await;
                    (job, h, on_group, r)
                });
            }
            let mut joined = Vec::new();
            while let Some(done) = set.join_next().await {
                let Ok((job, was, on_group, r)) = done else {
                    continue;
                };
                match r {
                    // Not moved: changed meanwhile, or etcd out of space.
                    Ok(r) if !r.succeeded => groups.leave(&job),
                    Err(e) if is_no_space(&e) => groups.leave(&job),
                    Ok(_) => {
                        self.revoke_later(was.lease);
                        joined.push((job, on_group));
                    }
                    // Perhaps applied: left counted on the group.
                    Err(e) => {
                        tracing::debug!(error = %e, %job, "joining a group: outcome unknown");
                        joined.push((job, on_group));
                    }
                }
            }
            self.inner
                .counters
                .group_joins
                .fetch_add(joined.len() as u64, Ordering::Relaxed);
            if new && joined.is_empty() {
                self.revoke_later(lease);
            }
            self.confirm_moves(groups, lease, ttl, joined).await;
        }
    }

    /// After leases were moved onto the group's etcd lease `lease`: keeps
    /// it alive once more, proven by a read of the moved holder keys after
    /// it, so that it lasts a TTL from **after** the moves.
    ///
    /// The group's lease was kept alive (or granted) before the moves, at
    /// the start of the batch. A renewal of a moved lease by another path
    /// in between (a `Renew`, another stream: a keep-alive of its old
    /// etcd lease leaves its holder key as it was, so the move's
    /// comparison cannot see it) promised it a TTL from later than that;
    /// without this, the move would have cut that promise short. What the
    /// keep-alive does not prove (an answer from an older raft term, an
    /// error) goes to an etcd lease of its own for a whole TTL from now,
    /// before the group's could run out: it was kept alive moments ago.
    async fn confirm_moves(
        &self,
        groups: &RenewGroups,
        lease: i64,
        ttl: Duration,
        moved: Vec<(JobName, Holding)>,
    ) {
        if moved.is_empty() {
            return;
        }
        let sent = Instant::now();
        let term = match self.inner.etcd.keep_alive(lease).await {
            Ok(Some((_, term))) => Some(term),
            _ => None,
        };
        let mut unproven = Vec::new();
        for chunk in moved.chunks(MAX_READS_PER_TXN) {
            let read = match term {
                Some(_) => {
                    let reads = chunk
                        .iter()
                        .map(|(job, _)| {
                            range_req(self.inner.keys.holder(job.as_str()), Vec::new(), 0)
                        })
                        .collect();
                    self.inner.etcd.read_txn(reads).await.ok()
                }
                None => None,
            };
            let Some(r) = read else {
                unproven.extend(chunk.iter().cloned());
                continue;
            };
            let current = r.header.as_ref().map_or(0, |h| h.raft_term);
            for ((job, h), rr) in chunk.iter().zip(ranges(r)) {
                match rr.kvs.first() {
                    // Not on the group's lease: not moved, or moved since.
                    Some(kv) if !h.is_stored_as(kv) => groups.leave(job),
                    None => groups.leave(job),
                    Some(_) if term.is_some_and(|t| t >= current) => {}
                    Some(_) => unproven.push((job.clone(), h.clone())),
                }
            }
        }
        if unproven.len() < moved.len() {
            groups.kept(lease, sent);
        }
        for (job, h) in unproven {
            tracing::debug!(%job, "a move onto a group was not confirmed; moving it to its own etcd lease");
            let rec = keys::HolderRec {
                sharing: h.rec.sharing.moved_off(),
                ..h.rec.clone()
            };
            let own = match self.inner.etcd.grant(ttl.as_secs() as i64).await {
                Ok((own, _)) => own,
                Err(e) => {
                    tracing::warn!(error = %e, %job, "could not move a lease off an unconfirmed group");
                    continue;
                }
            };
            let req = txn::move_holding(&self.inner.keys, job.as_str(), &h, &rec, own);
            match self.inner.etcd.txn(req).await {
                Ok(r) if r.succeeded => groups.leave(&job),
                Ok(_) => {
                    self.revoke_later(own);
                    groups.leave(&job);
                }
                Err(e) => {
                    self.revoke_later(own);
                    tracing::warn!(error = %e, %job, "could not move a lease off an unconfirmed group");
                }
            }
        }
    }

    /// Renews each of `todo` (index in `batch`, its job as read) as
    /// [`EtcdNode::renew_many`] does: the plain ones by a keep-alive of
    /// their own etcd lease and one shared term-proving read, the rest one
    /// by one as a `Renew`. Returns the plain ones renewed, with their
    /// holdings.
    ///
    /// Most renewals of a fleet only keep their grant's etcd lease alive
    /// (same TTL, asked again since the grant, no rule broken on purpose):
    /// those are kept alive together and share **one term-proving read**
    /// of all their holder keys, made after every keep-alive was answered,
    /// where a `Renew` makes one each ([`EtcdNode::keep_alive`] says why a
    /// keep-alive needs one). That read proves each of them exactly as its
    /// own would: it is linearizable, made after the keep-alive, and shows
    /// the holder key unchanged in a term no newer than the keep-alive's.
    /// Everything else, and a renewal the shared read does not prove (its
    /// holding moved, or a keep-alive answered in an older term), goes
    /// the way of a `Renew`, one by one.
    async fn renew_each(
        &self,
        batch: &[Renewal],
        todo: Vec<(usize, Read)>,
        out: &mut [Option<RenewOutcome>],
    ) -> Result<Vec<(usize, Holding)>> {
        let mut set = tokio::task::JoinSet::new();
        for (i, read) in todo {
            let (node, r) = (self.clone(), batch[i].clone());
            set.spawn(async move { (i, node.plan_renewal(&r, read).await) });
        }
        let mut kept = Vec::new();
        while let Some(done) = set.join_next().await {
            let (i, r) = done.map_err(|e| Error::Storage(format!("renewal task failed: {e}")))?;
            match r? {
                Planned::Done(o) => out[i] = Some(o),
                Planned::KeepAlive(h, successor_waiting) => kept.push((i, h, successor_waiting)),
            }
        }
        // Every keep-alive, concurrently (one stream carries them all).
        let mut set = tokio::task::JoinSet::new();
        for (i, h, successor_waiting) in kept {
            let node = self.clone();
            set.spawn(async move {
                let answer = node.inner.etcd.keep_alive(h.lease).await;
                (i, h, successor_waiting, answer)
            });
        }
        let mut answered = Vec::new();
        let mut again = Vec::new();
        while let Some(done) = set.join_next().await {
            let (i, h, successor_waiting, answer) =
                done.map_err(|e| Error::Storage(format!("keep-alive task failed: {e}")))?;
            match self.failed(answer)? {
                Some((_, term)) => answered.push((i, h, successor_waiting, term)),
                // The etcd lease is gone: a Renew says what became of it.
                None => again.push(i),
            }
        }
        // One read proves them all, in as few transactions as etcd takes.
        let c = &self.inner.counters;
        let now = clock::now();
        let mut stale = false;
        let mut renewed = Vec::new();
        for chunk in answered.chunks(MAX_READS_PER_TXN) {
            let reads = chunk
                .iter()
                .map(|(i, _, _, _)| {
                    let hk = self.inner.keys.holder(batch[*i].job.as_str());
                    range_req(hk, Vec::new(), 0)
                })
                .collect();
            let r = self.failed(self.inner.etcd.read_txn(reads).await)?;
            let current = r.header.as_ref().map_or(0, |h| h.raft_term);
            for ((i, h, successor_waiting, term), rr) in chunk.iter().zip(ranges(r)) {
                let r = &batch[*i];
                match decide::keep_alive_proof(h, rr.kvs.first(), *term, current) {
                    Proof::Live => {
                        self.expire_early(h.lease, r.ttl);
                        c.renewals.fetch_add(1, Ordering::Relaxed);
                        out[*i] = Some(Ok(Renewed {
                            successor_waiting: *successor_waiting,
                            lease: decide::granted(&r.job, &h.rec, now),
                        }));
                        renewed.push((*i, h.clone()));
                    }
                    Proof::Gone => again.push(*i),
                    Proof::StaleTerm => {
                        stale = true;
                        again.push(*i);
                    }
                }
            }
        }
        if stale {
            tracing::debug!("keep-alive answered in an older raft term; renewing one by one");
            self.inner.etcd.reopen_keep_alives();
        }
        // The rest, one by one, as a Renew would be.
        let mut set = tokio::task::JoinSet::new();
        for i in again {
            let (node, r) = (self.clone(), batch[i].clone());
            set.spawn(async move {
                let o = node
                    .renew_one(&r.job, &r.holder, r.token, r.ttl, None)
                    .await;
                (i, o)
            });
        }
        while let Some(done) = set.join_next().await {
            let (i, r) = done.map_err(|e| Error::Storage(format!("renewal task failed: {e}")))?;
            out[i] = Some(r?);
        }
        Ok(renewed)
    }

    /// What one renewal of a batch needs: only its etcd lease kept alive
    /// (the holding, and whether a preferred candidate waits), or it is
    /// decided already (refused, or renewed one by one as a `Renew`).
    async fn plan_renewal(&self, r: &Renewal, read: Read) -> Result<Planned> {
        if let Err(e) = self.check_ttl(r.ttl) {
            return Ok(Planned::Done(Err((
                e,
                LeaseView {
                    job: r.job.clone(),
                    token: Token::NONE,
                    state: LeaseState::Free(Vacancy::Never),
                },
            ))));
        }
        let h = match decide::renew(&r.job, &read.job, &r.holder, r.token) {
            Ok(h) => h,
            Err(lost) => {
                self.inner
                    .counters
                    .renew_losses
                    .fetch_add(1, Ordering::Relaxed);
                let view = self.view(&r.job, &read.job).await?;
                return Ok(Planned::Done(Err((lost, view))));
            }
        };
        let plain = h.version > 1
            && decide::extend(h, r.ttl, None) == Extend::KeepAlive
            && rules::renewed_token(h.rec.token, self.faults()) == h.rec.token;
        if plain {
            let waiting = decide::successor_waiting(&read.job, &read.line);
            return Ok(Planned::KeepAlive(h.clone(), waiting));
        }
        let o = self
            .renew_one(&r.job, &r.holder, r.token, r.ttl, None)
            .await?;
        Ok(Planned::Done(o))
    }
}

/// The most reads one transaction carries (etcd's default
/// `--max-txn-ops`).
const MAX_READS_PER_TXN: usize = 128;

/// The most holder keys one transaction moves: two comparisons each,
/// within etcd's default `--max-txn-ops` (128).
const MAX_MOVES_PER_TXN: usize = 64;

/// The jobs one reading transaction of a batch carries: each job's keys,
/// and one count of the preferred candidates waiting across them all.
const JOBS_PER_READ: usize = MAX_READS_PER_TXN - 1;

impl EtcdNode {
    /// The jobs of `batch`'s entries, in order, as a renewal needs them:
    /// [`JOBS_PER_READ`] jobs a transaction, the transactions at once. The
    /// jobs of one transaction are read at one revision; each transaction
    /// is linearizable, as `read_job`'s is. Each with the raft term of
    /// its transaction.
    ///
    /// A renewal needs of a job's line only whether a preferred candidate
    /// waits (`decide::successor_waiting`): each read's `line` counts the
    /// preferred candidates alone, and the grant of the newest one.
    async fn read_jobs(&self, batch: &[Renewal]) -> Result<Vec<(Read, u64)>> {
        let mut set = tokio::task::JoinSet::new();
        for (n, chunk) in batch.chunks(JOBS_PER_READ).enumerate() {
            let node = self.clone();
            let jobs: Vec<JobName> = chunk.iter().map(|r| r.job.clone()).collect();
            set.spawn(async move { (n, node.read_some_jobs(&jobs).await) });
        }
        let mut chunks: Vec<Option<Vec<(Read, u64)>>> = (0..set.len()).map(|_| None).collect();
        while let Some(done) = set.join_next().await {
            let (n, r) = done.map_err(|e| Error::Storage(format!("read task failed: {e}")))?;
            chunks[n] = Some(r?);
        }
        Ok(chunks.into_iter().flatten().flatten().collect())
    }

    /// `jobs`, read in one transaction, each with the raft term of the
    /// read: each job's keys, and one count of the preferred candidates
    /// waiting for any job whose name sorts from the first of `jobs` to
    /// the last. Rarely does one wait; when some do, a second read gets
    /// each job's own ([`EtcdNode::read_preferred`]).
    async fn read_some_jobs(&self, jobs: &[JobName]) -> Result<Vec<(Read, u64)>> {
        let k = &self.inner.keys;
        let (Some(lo), Some(hi)) = (jobs.iter().min(), jobs.iter().max()) else {
            return Ok(Vec::new());
        };
        let mut reads = Vec::with_capacity(jobs.len() + 1);
        for job in jobs {
            let (js, je) = k.job_range(job.as_str());
            reads.push(range_req(js, je, 0));
        }
        let mut preferred = range_req(
            k.line_range(lo.as_str(), true).0,
            k.line_range(hi.as_str(), true).1,
            0,
        );
        preferred.count_only = true;
        reads.push(preferred);
        let r = self.failed(self.inner.etcd.read_txn(reads).await)?;
        let revision = r.header.as_ref().map_or(0, |h| h.revision);
        let term = r.header.as_ref().map_or(0, |h| h.raft_term);
        let mut rs = ranges(r);
        let preferred = rs.pop().map_or(0, |r| r.count);
        let lines = match preferred {
            0 => vec![Line::from_ranges(std::iter::empty()); jobs.len()],
            _ => self.read_preferred(jobs).await?,
        };
        jobs.iter()
            .zip(rs)
            .zip(lines)
            .map(|((job, r), line)| {
                let read = Read {
                    revision,
                    job: k.job(job.as_str(), &r.kvs)?,
                    line,
                };
                Ok((read, term))
            })
            .collect()
    }

    /// Each of `jobs`' preferred candidates counted, and its newest
    /// preferred grant (the first two of [`queue::line_reads`]), 64 jobs
    /// a transaction.
    async fn read_preferred(&self, jobs: &[JobName]) -> Result<Vec<Line>> {
        let k = &self.inner.keys;
        let mut lines = Vec::with_capacity(jobs.len());
        for chunk in jobs.chunks(MAX_READS_PER_TXN / 2) {
            let reads = chunk
                .iter()
                .flat_map(|job| queue::line_reads(k, job.as_str(), None).into_iter().take(2))
                .collect();
            let r = self.failed(self.inner.etcd.read_txn(reads).await)?;
            let mut rs = ranges(r).into_iter();
            for _ in chunk {
                lines.push(Line::from_ranges(rs.by_ref().take(2)));
            }
        }
        Ok(lines)
    }
}

/// See [`EtcdNode::plan_renewal`].
enum Planned {
    Done(RenewOutcome),
    KeepAlive(Holding, bool),
}
