//! The Elector: campaign for a job, renew at ttl/3, step down on loss.
//!
//! A background task owns the lease. It campaigns with a waiting `Acquire`
//! (so a release hands over at once), renews every `ttl / 3`, and reports
//! its role through a watch channel.
//!
//! It steps down **no later than its own conservative deadline**: the
//! instant the last successful grant or renewal was *sent*, plus the TTL.
//! The server counts the TTL from when it *received* that request, later,
//! so the elector always believes it has lost before the server can give
//! the lease away, even when the server cannot be reached to say so.
//! (What it cannot do is notice its own pause: a process stopped past its
//! deadline resumes believing it leads until its task runs. That is what
//! fencing tokens are for: carry the token into every write.)
//!
//! Each elector is its own holder, `name@uuid` with a UUID made for it, so
//! two electors for one job in one process compete like two processes.
//!
//! An error that asking again cannot fix (see
//! [`ClientError::stops_campaign`]: a TTL out of the server's range, a job
//! name it refuses, a caller its policy refuses) stops the campaign, and
//! [`Elector::elected`] returns it. Other errors are retried with jittered
//! exponential backoff (a campaign from 10-100 ms up to 1 s; a renewal
//! from `ttl / 10`, never waiting past half the time left to its
//! deadline), and their warnings are limited to one every 5 s, each with
//! the count of the ones suppressed since.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout_at, Instant};

use crate::clock::tokio_now;
use crate::retry::{campaign_backoff, renew_backoff, Warnings};

use super::{check_elector_args, elector_holder, AcquireOptions, Client, ClientError, Lease};

/// How an [`Elector`] campaigns ([`Elector::start_with`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElectorOptions {
    /// Bind each grant to the client's connection
    /// ([`AcquireOptions::bind_to_stream`]): when this process dies, its
    /// kernel closes the connection and the server hands the lease to the
    /// next waiter at once, instead of after the TTL. A pause or a
    /// partition still keeps the lease for its TTL. The trade: a
    /// connection cut by a proxy, or a reconnect, ends the leadership at
    /// once (the elector then sees LEASE_LOST on its next renewal and
    /// campaigns again; writes made with the old token are fenced).
    pub bind_to_stream: bool,
    /// Campaign as a preferred candidate: queued ahead of electors that
    /// are not, and a leader that is not preferred is told that we wait.
    pub preferred: bool,
    /// When a preferred candidate waits and we are not preferred, hand
    /// the lease to it at our next renewal (as [`Elector::transfer`] to
    /// the first in line), then campaign again behind it.
    pub yield_to_preferred: bool,
    /// Publish this with every grant ([`Lease::value`], at most 1024
    /// bytes): where followers and clients reach the leader, such as its
    /// address. Change it later with [`Elector::set_value`]. Advisory: the
    /// token fences, not the value.
    pub value: Vec<u8>,
    /// Campaign for a slot of a counted lease (a semaphore) with this
    /// many slots, 2 to 100 ([`AcquireOptions::slots`]): up to that many
    /// electors lead at once, each in its own slot, with its own token.
    /// While leading, [`Elector::lease_job`] names the slot's job, which
    /// the elector renews and which writes name. 0 or 1: an ordinary
    /// lease.
    pub slots: u32,
}

/// The grant we lead with: its token, the job it is on (a counted
/// lease's slot job, else the elector's job), and the slot.
type Granted = Arc<Mutex<Option<(u64, String, u32)>>>;

/// The value the elector publishes, and whether the server may not have
/// it yet (set since the last grant or renewal that carried it).
#[derive(Debug, Default)]
struct Publishing {
    value: Vec<u8>,
    unsent: bool,
}

/// A transfer asked of the campaign, and where its answer goes.
struct Transfer {
    to: Option<String>,
    reply: oneshot::Sender<Result<Lease, ClientError>>,
}

/// Where an elector leads: [`Elector::grant`].
#[derive(Clone)]
pub struct Grant {
    granted: Granted,
    role: watch::Receiver<Role>,
    job: String,
}

impl Grant {
    /// See [`Elector::lease_job`].
    pub fn lease_job(&self) -> Option<String> {
        self.leading().map(|(job, _)| job)
    }

    /// See [`Elector::slot`].
    pub fn slot(&self) -> Option<u32> {
        match self.leading() {
            Some((job, slot)) if job != self.job => Some(slot),
            _ => None,
        }
    }

    fn leading(&self) -> Option<(String, u32)> {
        let token = self.role.borrow().token()?;
        let granted = self.granted.lock().expect("elector grant");
        granted
            .as_ref()
            .filter(|(t, _, _)| *t == token)
            .map(|(_, job, slot)| (job.clone(), *slot))
    }
}

/// The elector's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not leading: campaigning, or stopped.
    Follower,
    /// Leading with this token.
    Leader {
        /// The fencing token to carry into every write.
        token: u64,
    },
}

impl Role {
    /// The token, when leading.
    pub fn token(self) -> Option<u64> {
        match self {
            Role::Leader { token } => Some(token),
            Role::Follower => None,
        }
    }
}

/// Campaigns for one job; see the module docs.
pub struct Elector {
    holder: String,
    role: watch::Receiver<Role>,
    deadline: watch::Receiver<Option<Instant>>,
    error: Arc<OnceLock<ClientError>>,
    stop: Option<oneshot::Sender<()>>,
    transfers: mpsc::Sender<Transfer>,
    task: Option<JoinHandle<()>>,
    proof: Arc<Mutex<Option<(u64, String)>>>,
    publishing: Arc<Mutex<Publishing>>,
    granted: Granted,
    /// For [`Elector::on_new_leader`]'s watch.
    client: Client,
    job: String,
    /// Campaigns for a slot of a counted lease.
    counted: bool,
    observer: Option<JoinHandle<()>>,
}

impl Elector {
    /// Starts campaigning for `job` as `name@<uuid>`, with a UUID made for
    /// this elector, and `ttl`.
    ///
    /// An empty job or name, or a zero TTL, is refused at once: the elector
    /// does not campaign, and [`Elector::elected`] returns the error.
    pub fn start(client: Client, job: &str, name: &str, ttl: Duration) -> Elector {
        Elector::start_with(client, job, name, ttl, ElectorOptions::default())
    }

    /// [`Elector::start`], with options (see [`ElectorOptions`]).
    pub fn start_with(
        client: Client,
        job: &str,
        name: &str,
        ttl: Duration,
        options: ElectorOptions,
    ) -> Elector {
        Elector::start_inner(client, job, name, ttl, options, false)
    }

    /// Campaigns until the first grant, leads, and once that leadership
    /// ends stays a follower: a [`crate::Lock`].
    pub(crate) fn start_inner(
        client: Client,
        job: &str,
        name: &str,
        ttl: Duration,
        options: ElectorOptions,
        once: bool,
    ) -> Elector {
        let holder = elector_holder(name);
        let (transfers, transfers_rx) = mpsc::channel(1);
        let (tx, role) = watch::channel(Role::Follower);
        let (deadline_tx, deadline) = watch::channel(None);
        let (stop_tx, stop_rx) = oneshot::channel();
        let error = Arc::new(OnceLock::new());
        let proof = Arc::new(Mutex::new(None));
        let granted: Granted = Arc::new(Mutex::new(None));
        let publishing = Arc::new(Mutex::new(Publishing {
            value: options.value.clone(),
            unsent: false,
        }));
        let counted = options.slots >= 2;
        let task = match check_elector_args(Some(job), name, ttl) {
            Err(e) => {
                let _ = error.set(e);
                None
            }
            Ok(()) => {
                let campaign = Campaign {
                    client: client.clone(),
                    once,
                    job: job.to_owned(),
                    holder: holder.clone(),
                    ttl,
                    role: tx,
                    deadline: deadline_tx,
                    error: error.clone(),
                    options,
                    proof: proof.clone(),
                    publishing: publishing.clone(),
                    granted: granted.clone(),
                };
                Some(tokio::spawn(campaign.run(stop_rx, transfers_rx)))
            }
        };
        Elector {
            holder,
            role,
            deadline,
            error,
            stop: Some(stop_tx),
            transfers,
            task,
            proof,
            publishing,
            granted,
            client,
            job: job.to_owned(),
            counted,
            observer: None,
        }
    }

    /// Calls `f(lease)` for every grant of the job, ours and others', in
    /// token order (`lease.holder` is set, and `lease.value` is what the
    /// new leader published): from a `WatchLease` kept open while the
    /// elector runs (opened again, from the state at that moment, when it
    /// breaks), each token reported once and never one lower than a token
    /// already reported. A grant that came and went while the watch was
    /// being opened again is not seen, and a change of value is no new
    /// leader ([`Client::observe`] sees those). Stops with
    /// [`Elector::resign`] or the elector's drop. A second call replaces
    /// the first's callback. A counted elector ([`ElectorOptions::slots`])
    /// reports nothing: a counted lease has several leaders at once, and
    /// the job's own lease is its line's turn (observe the slots' jobs).
    pub fn on_new_leader(&mut self, mut f: impl FnMut(&Lease) + Send + 'static) {
        if let Some(old) = self.observer.take() {
            old.abort();
        }
        if self.counted {
            tracing::warn!(job = %self.job, "on_new_leader of a counted elector reports nothing: observe the slots' jobs");
            return;
        }
        let client = self.client.clone();
        let job = self.job.clone();
        let ttl = Duration::from_secs(1);
        self.observer = Some(tokio::spawn(async move {
            let mut last = 0u64;
            let mut backoff = campaign_backoff(ttl);
            loop {
                if let Ok(mut changes) = client.observe(&job).await {
                    while let Some(Ok(change)) = changes.next().await {
                        backoff.reset();
                        let lease = &change.lease;
                        if lease.holder.is_some() && lease.token > last {
                            last = lease.token;
                            f(lease);
                        }
                    }
                }
                sleep(backoff.next()).await;
            }
        }));
    }

    /// The proof of our grant while we lead (`Lease.proof`: see
    /// [`crate::proof`]), for storage that leasehold does not own; `None`
    /// when we do not lead, or the server signs nothing.
    pub fn proof(&self) -> Option<String> {
        let token = self.role().token()?;
        let proof = self.proof.lock().expect("elector proof");
        proof
            .as_ref()
            .filter(|(t, _)| *t == token)
            .map(|(_, p)| p.clone())
    }

    /// Hands our lease to a waiting elector: `to` (its holder), or the
    /// first in line. The successor is granted the next token with no
    /// moment when the job is free. On success our leadership ends as a
    /// loss does (the role says [`Role::Follower`] before this returns),
    /// and the elector campaigns again, behind the successor; returns the
    /// successor's lease. [`ClientError::NoSuccessor`] when nobody (or not
    /// `to`) waits: we still lead. [`ClientError::LeaseLost`]: we had lost
    /// it already, and step down. [`ClientError::NotLeader`] when we do not
    /// lead (nothing is asked of the server).
    pub async fn transfer(&self, to: Option<&str>) -> Result<Lease, ClientError> {
        if self.role().token().is_none() {
            return Err(ClientError::NotLeader);
        }
        let (reply, answer) = oneshot::channel();
        let t = Transfer {
            to: to.map(str::to_owned),
            reply,
        };
        if self.transfers.send(t).await.is_err() {
            return Err(ClientError::NotLeader);
        }
        answer.await.unwrap_or(Err(ClientError::NotLeader))
    }

    /// Publishes `value` instead ([`ElectorOptions::value`]): sent with
    /// our next renewal while we lead, else with our next grant, and with
    /// every renewal until one has carried it; empty clears it. Watchers
    /// see the change (`KIND_VALUE_CHANGED`).
    pub fn set_value(&self, value: impl Into<Vec<u8>>) {
        let mut p = self.publishing.lock().expect("elector value");
        p.value = value.into();
        p.unsent = true;
    }

    /// The job's current lease, from the server: who leads (`holder`,
    /// `None` when nobody does), with which token, and the value the
    /// leader published ([`Lease::value`]), to route requests to it.
    /// Advisory: by the time it is used the leader may have changed; the
    /// token fences writes, not the value.
    pub async fn leader(&self) -> Result<Lease, ClientError> {
        self.client.get_lease(&self.job).await
    }

    /// The job our lease is on while we lead ([`Role::Leader`]): the
    /// elector's job, or for a counted lease ([`ElectorOptions::slots`])
    /// its slot's job, `{job}#{slot}`. Writes fenced by our token name it.
    /// `None` when we do not lead.
    pub fn lease_job(&self) -> Option<String> {
        self.grant().lease_job()
    }

    /// The slot we lead in, for a counted lease; `None` when we do not
    /// lead, or the lease is not counted.
    pub fn slot(&self) -> Option<u32> {
        self.grant().slot()
    }

    /// [`Elector::lease_job`] and [`Elector::slot`] for a task that does
    /// not own the elector (one that follows [`Elector::watch`]).
    pub fn grant(&self) -> Grant {
        Grant {
            granted: self.granted.clone(),
            role: self.role.clone(),
            job: self.job.clone(),
        }
    }

    /// Our holder identity: `name@uuid`, the UUID this elector's own.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The error that stopped the campaign, if one did (see
    /// [`ClientError::stops_campaign`]).
    pub fn error(&self) -> Option<ClientError> {
        self.error.get().cloned()
    }

    /// The role right now.
    pub fn role(&self) -> Role {
        *self.role.borrow()
    }

    /// A receiver that sees every change of role.
    pub fn watch(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// A receiver of our lease's conservative deadline while we lead (see
    /// the module docs): set before the role says we lead, moved on by
    /// each renewal, `None` once we step down. A supervisor that must stop
    /// work before anyone else can be granted the lease, even while this
    /// process is paused, reads it (`leasehold run` hands it to a watchdog
    /// process).
    pub fn deadline(&self) -> watch::Receiver<Option<Instant>> {
        self.deadline.clone()
    }

    /// Waits until we lead; returns the token. Returns the error that
    /// stopped the campaign instead, if one does (at once if one did).
    pub async fn elected(&mut self) -> Result<u64, ClientError> {
        loop {
            if let Some(t) = self.role.borrow_and_update().token() {
                return Ok(t);
            }
            if let Some(e) = self.error.get() {
                return Err(e.clone());
            }
            if self.role.changed().await.is_err() {
                // The campaign ended. It sets its error before it ends, so
                // that is checked next; without one it was stopped, and
                // nothing will change now.
                if let Some(e) = self.error.get() {
                    return Err(e.clone());
                }
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until we no longer lead with the current token.
    pub async fn lost(&mut self) {
        let Some(token) = self.role.borrow_and_update().token() else {
            return;
        };
        loop {
            if self.role.changed().await.is_err() {
                return;
            }
            if self.role.borrow_and_update().token() != Some(token) {
                return;
            }
        }
    }

    /// Stops campaigning, releases the lease if held, and waits for that.
    pub async fn resign(mut self) {
        if let Some(o) = self.observer.take() {
            o.abort();
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        // A campaign stopped while its Acquire was on its way gives back a
        // grant made in that instant: wait for that (it reads the lease
        // after 100 ms), so that a process that exits once resigned does
        // not leave the job held for a TTL.
        self.client.give_backs_settled(GIVE_BACK_WAIT).await;
    }
}

/// How long [`Elector::resign`] waits for a give-back.
const GIVE_BACK_WAIT: Duration = Duration::from_secs(1);

impl Drop for Elector {
    fn drop(&mut self) {
        // Without `resign`, stop renewing; the lease runs out on its own.
        if let Some(t) = self.task.take() {
            t.abort();
        }
        if let Some(o) = self.observer.take() {
            o.abort();
        }
    }
}

struct Campaign {
    client: Client,
    /// Lead once: after the first leadership ends, campaign no more.
    once: bool,
    job: String,
    holder: String,
    ttl: Duration,
    role: watch::Sender<Role>,
    /// Our deadline while we lead.
    deadline: watch::Sender<Option<Instant>>,
    /// Set, before the campaign ends, to an error that stopped it.
    error: Arc<OnceLock<ClientError>>,
    options: ElectorOptions,
    /// The proof of the grant we lead with, and its token.
    proof: Arc<Mutex<Option<(u64, String)>>>,
    /// The value we publish.
    publishing: Arc<Mutex<Publishing>>,
    /// The grant we lead with (shared with the [`Elector`]).
    granted: Granted,
}

impl Campaign {
    async fn run(self, mut stop: oneshot::Receiver<()>, mut transfers: mpsc::Receiver<Transfer>) {
        let mut backoff = campaign_backoff(self.ttl);
        let mut warnings = Warnings::new();
        // Wait for the lease in long polls; a release hands over at once.
        let campaign_wait = (self.ttl * 3).clamp(Duration::from_secs(1), Duration::from_secs(30));
        loop {
            let sent = tokio_now();
            // Bounded, so a server that stopped answering is asked again.
            let value = self.publishing.lock().expect("elector value").value.clone();
            let options = AcquireOptions {
                bind_to_stream: self.options.bind_to_stream,
                preferred: self.options.preferred,
                value: value.clone(),
                slots: self.options.slots,
            };
            let acquire =
                self.client
                    .acquire_with(&self.job, &self.holder, self.ttl, campaign_wait, options);
            tokio::pin!(acquire);
            let acquired = loop {
                tokio::select! {
                    _ = &mut stop => return,
                    Some(t) = transfers.recv() => {
                        let _ = t.reply.send(Err(ClientError::NotLeader));
                    }
                    r = timeout_at(sent + campaign_wait + self.ttl, &mut acquire) => break r,
                }
            };
            match acquired {
                Ok(Ok(a)) if a.acquired => {
                    backoff.reset();
                    self.carried(&value);
                    let token = a.lease.token;
                    *self.proof.lock().expect("elector proof") =
                        a.lease.proof.clone().map(|p| (token, p));
                    *self.granted.lock().expect("elector grant") =
                        Some((token, a.lease.job.clone(), a.lease.slot));
                    let Some(anchor) = self.anchor(token, sent).await else {
                        continue;
                    };
                    if self
                        .lead(token, anchor, &mut stop, &mut transfers, &mut warnings)
                        .await
                        || self.once
                    {
                        return;
                    }
                }
                Ok(Ok(_)) => backoff.reset(),
                Ok(Err(e)) if e.stops_campaign() => {
                    tracing::error!(job = %self.job, error = %e, "campaign refused; not campaigning again");
                    let _ = self.error.set(e);
                    return;
                }
                Ok(Err(e)) => {
                    if let Some(suppressed) = warnings.allow() {
                        tracing::warn!(job = %self.job, error = %e, suppressed, "campaign: acquire failed; retrying");
                    }
                    let wait = backoff.next();
                    tracing::debug!(job = %self.job, error = %e, ?wait, "campaign: acquire failed");
                    tokio::select! {
                        _ = &mut stop => return,
                        _ = sleep(wait) => {}
                    }
                }
                Err(_) => {
                    if let Some(suppressed) = warnings.allow() {
                        tracing::warn!(job = %self.job, suppressed, "campaign: acquire timed out");
                    }
                }
            }
        }
    }

    /// The instant our lease's TTL may be counted from: a moment at or
    /// before the server granted or last renewed it.
    ///
    /// For a grant that came back quickly, that is when the Acquire was
    /// sent. A waiting Acquire may have been granted long after it was sent
    /// (when the lease freed up), so counting from the send could put the
    /// deadline in the past; then a Renew, sent now, gives a fresh anchor.
    /// `None` when the lease cannot be confirmed.
    async fn anchor(&self, token: u64, sent: Instant) -> Option<Instant> {
        if tokio_now() < sent + self.ttl / 10 {
            return Some(sent);
        }
        let job = self.lease_job();
        let sent = tokio_now();
        match timeout_at(
            sent + self.ttl / 2,
            self.client.renew(&job, &self.holder, token, self.ttl),
        )
        .await
        {
            Ok(Ok(_)) => Some(sent),
            Ok(Err(e)) => {
                tracing::warn!(job = %self.job, token, error = %e, "granted, but the confirming renew failed");
                None
            }
            Err(_) => {
                tracing::warn!(job = %self.job, token, "granted, but the confirming renew timed out");
                None
            }
        }
    }

    /// Leads until the lease is lost (returns false) or we are told to stop
    /// (releases, returns true).
    async fn lead(
        &self,
        token: u64,
        sent: Instant,
        stop: &mut oneshot::Receiver<()>,
        transfers: &mut mpsc::Receiver<Transfer>,
        warnings: &mut Warnings,
    ) -> bool {
        let job = self.lease_job();
        let mut deadline = sent + self.ttl;
        self.deadline.send_replace(Some(deadline));
        self.role.send_replace(Role::Leader { token });
        tracing::info!(job = %self.job, token, "elected");
        let every = self.ttl / 3;
        let mut retry = renew_backoff(self.ttl);
        let mut next = sent + every;
        let mut handed: Option<(oneshot::Sender<_>, Lease)> = None;
        let mut yielded = false;
        loop {
            tokio::select! {
                _ = &mut *stop => return self.resign(token, deadline).await,
                _ = sleep_until(next.min(deadline)) => {}
                Some(t) = transfers.recv() => {
                    let r = timeout_at(
                        deadline,
                        self.client.transfer_lease(&job, &self.holder, token, t.to.as_deref(), None),
                    )
                    .await
                    .unwrap_or_else(|_| Err(ClientError::Unavailable("the transfer timed out at our deadline".into())));
                    match r {
                        Ok(lease) => {
                            tracing::info!(job = %self.job, token, to = ?lease.holder, "handed over");
                            handed = Some((t.reply, lease));
                            break;
                        }
                        // Still ours: nobody to hand it to, or the call
                        // failed before our deadline.
                        Err(e @ (ClientError::NoSuccessor(_) | ClientError::Unavailable(_)))
                            if tokio_now() < deadline =>
                        {
                            let _ = t.reply.send(Err(e));
                            continue;
                        }
                        Err(e) => {
                            let _ = t.reply.send(Err(e));
                            break;
                        }
                    }
                }
            }
            if tokio_now() >= deadline {
                break;
            }
            let sent = tokio_now();
            let value = {
                let p = self.publishing.lock().expect("elector value");
                p.unsent.then(|| p.value.clone())
            };
            let renew =
                self.client
                    .renew_with_value(&job, &self.holder, token, self.ttl, value.as_deref());
            let r = tokio::select! {
                _ = &mut *stop => return self.resign(token, deadline).await,
                r = timeout_at(deadline, renew) => r,
            };
            match r {
                Ok(Ok(renewed)) => {
                    if let Some(v) = &value {
                        self.carried(v);
                    }
                    deadline = sent + self.ttl;
                    self.deadline.send_replace(Some(deadline));
                    next = sent + every;
                    retry.reset();
                    if renewed.successor_waiting && self.options.yield_to_preferred {
                        // Our safe point: just renewed, nothing in flight.
                        let r = timeout_at(
                            deadline,
                            self.client
                                .transfer_lease(&job, &self.holder, token, None, None),
                        )
                        .await;
                        match r {
                            Ok(Ok(to)) => {
                                tracing::info!(job = %self.job, token, to = ?to.holder, "handed over to a preferred candidate");
                                yielded = true;
                                break;
                            }
                            Ok(Err(ClientError::LeaseLost { .. })) => break,
                            // It left, or the call failed: still ours; the
                            // next renewal says again.
                            Ok(Err(e)) => {
                                tracing::debug!(job = %self.job, token, error = %e, "hand-over to a preferred candidate failed")
                            }
                            Err(_) => break,
                        }
                    }
                }
                Ok(Err(ClientError::LeaseLost { message, .. })) => {
                    tracing::warn!(job = %self.job, token, %message, "lease lost");
                    break;
                }
                // Refused outright: step down now; the next Acquire says
                // whether to campaign again.
                Ok(Err(e)) if e.stops_campaign() => {
                    tracing::warn!(job = %self.job, token, error = %e, "renew refused");
                    break;
                }
                Ok(Err(e)) => {
                    if let Some(suppressed) = warnings.allow() {
                        tracing::warn!(job = %self.job, token, error = %e, suppressed, "renew failed; retrying");
                    }
                    let wait = retry.next_before(deadline);
                    tracing::debug!(job = %self.job, token, error = %e, ?wait, "renew failed");
                    next = tokio_now() + wait;
                }
                Err(_) => break, // the deadline passed while renewing
            }
        }
        self.deadline.send_replace(None);
        self.role.send_replace(Role::Follower);
        match handed {
            Some((reply, lease)) => {
                let _ = reply.send(Ok(lease));
            }
            None if yielded => {}
            None => tracing::warn!(job = %self.job, token, "stepped down"),
        }
        false
    }

    /// The job our grant is on: a counted lease's slot job (the grant's
    /// `Lease.job`), else ours.
    fn lease_job(&self) -> String {
        let granted = self.granted.lock().expect("elector grant");
        granted
            .as_ref()
            .map_or_else(|| self.job.clone(), |(_, job, _)| job.clone())
    }

    /// A grant or renewal carried `value`: the server has it, unless it
    /// was changed again meanwhile.
    fn carried(&self, value: &[u8]) {
        let mut p = self.publishing.lock().expect("elector value");
        if p.value == value {
            p.unsent = false;
        }
    }

    /// Steps down and releases. The release is bounded: past our deadline
    /// the lease runs out on its own, so a server that cannot answer does
    /// not hold up shutdown for longer than that (and at least a moment).
    async fn resign(&self, token: u64, deadline: Instant) -> bool {
        self.deadline.send_replace(None);
        self.role.send_replace(Role::Follower);
        let job = self.lease_job();
        let until = deadline.max(tokio_now() + Duration::from_millis(200));
        match timeout_at(until, self.client.release(&job, &self.holder, token)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(job = %self.job, error = %e, "release on resign failed"),
            Err(_) => {
                tracing::warn!(job = %self.job, "release on resign timed out; the lease will expire")
            }
        }
        true
    }
}
