//! The ElectorSet: one process campaigning for several jobs, renewing every
//! lease it holds together over one `KeepAlive` stream.
//!
//! Each job gets its own campaign (a waiting `Acquire`, so a release hands
//! over at once), exactly like [`super::Elector`]. Once held, a lease joins
//! the set's one renewer, which every `ttl / 3` sends a single message
//! carrying a renewal for every held lease and reads a result per lease:
//! a worker leading a hundred jobs sends one message per period instead of a
//! hundred calls.
//!
//! The step-down rule is the Elector's: a lease is given up no later than
//! the instant its last successful grant or renewal was *sent*, plus the
//! TTL, whether or not the server can be reached to say so. A `LEASE_LOST`
//! result steps down that job alone, and its campaign starts again.
//!
//! The set is one holder, `name@uuid` with a UUID made for it: two sets (or
//! a set and an [`super::Elector`]) in one process are different holders.
//! A job's campaign refused with an error asking again cannot fix (see
//! [`ClientError::stops_campaign`]) stops; [`ElectorSet::error`] has it.
//!
//! ```no_run
//! # async fn demo(client: leasehold_client::Client) {
//! use std::time::Duration;
//! use leasehold_client::ElectorSet;
//!
//! let mut set = ElectorSet::start(client, "sync-worker", Duration::from_secs(10));
//! let mut roles: Vec<_> = ["sync_eu", "sync_us", "sync_ap"]
//!     .iter()
//!     .map(|job| set.campaign(job))
//!     .collect();
//! // ... lead the jobs whose role is Leader, carrying each job's token ...
//! set.resign().await; // releases every lease held
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout_at, Instant};

use crate::clock::tokio_now;
use crate::retry::{campaign_backoff, renew_backoff, Warnings};

use super::keepalive::{KeepAlive, KeepAliveRenewal, RenewOutcome};
use super::{check_elector_args, elector_holder, AcquireOptions, Client, ClientError, Role};

/// How an [`ElectorSet`] campaigns ([`ElectorSet::start_with`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ElectorSetOptions {
    /// Bind every lease to the client's connection: its campaigns'
    /// Acquires and its KeepAlive stream ask for it (see
    /// [`crate::ElectorOptions::bind_to_stream`] for what it trades).
    pub bind_to_stream: bool,
    /// Campaign as a preferred candidate for every job (see
    /// [`crate::ElectorOptions::preferred`]). The set never yields on its
    /// own: hand a job over with [`Client::transfer_lease`].
    pub preferred: bool,
}

/// Campaigns for several jobs and renews the leases it holds over one
/// stream; see the module docs.
pub struct ElectorSet {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    roles: HashMap<String, watch::Receiver<Role>>,
    tasks: Vec<JoinHandle<()>>,
}

struct Shared {
    client: Client,
    name: String,
    holder: String,
    ttl: Duration,
    options: ElectorSetOptions,
    held: Mutex<HashMap<String, Held>>,
    /// The error that stopped each job's campaign, if one did.
    errors: Mutex<HashMap<String, ClientError>>,
}

struct Held {
    token: u64,
    /// Our conservative deadline: when the last successful grant or renewal
    /// was sent, plus the TTL.
    deadline: Instant,
    role: watch::Sender<Role>,
    /// Tells the job's campaign that the lease is gone.
    lost: Arc<Notify>,
}

impl Shared {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().expect("elector set lock")
    }

    fn errors(&self) -> std::sync::MutexGuard<'_, HashMap<String, ClientError>> {
        self.errors.lock().expect("elector set errors lock")
    }

    /// Steps down from `job` if we still hold it with `token`.
    fn step_down(&self, job: &str, token: u64, why: &str) {
        let mut held = self.held();
        if held.get(job).is_some_and(|h| h.token == token) {
            let h = held.remove(job).expect("present");
            tracing::warn!(job, token, why, "stepped down");
            h.role.send_replace(Role::Follower);
            h.lost.notify_one();
        }
    }
}

impl ElectorSet {
    /// A set that campaigns as `name@<uuid>`, with a UUID made for this
    /// set, and `ttl` for every lease. Add jobs with
    /// [`ElectorSet::campaign`].
    pub fn start(client: Client, name: &str, ttl: Duration) -> ElectorSet {
        ElectorSet::start_with(client, name, ttl, ElectorSetOptions::default())
    }

    /// [`ElectorSet::start`], with options (see [`ElectorSetOptions`]).
    pub fn start_with(
        client: Client,
        name: &str,
        ttl: Duration,
        options: ElectorSetOptions,
    ) -> ElectorSet {
        let shared = Arc::new(Shared {
            client,
            name: name.to_owned(),
            holder: elector_holder(name),
            ttl,
            options,
            held: Mutex::new(HashMap::new()),
            errors: Mutex::new(HashMap::new()),
        });
        let (stop, stop_rx) = watch::channel(false);
        let renewer = tokio::spawn(renew_loop(shared.clone(), stop_rx));
        ElectorSet {
            shared,
            stop,
            roles: HashMap::new(),
            tasks: vec![renewer],
        }
    }

    /// Our holder identity: `name@uuid`.
    pub fn holder(&self) -> &str {
        &self.shared.holder
    }

    /// Starts campaigning for `job` (once; asking again returns the same
    /// role). Returns a receiver that sees every change of its role; it
    /// sees the sender closed if the campaign stops on an error
    /// ([`ElectorSet::error`]). An empty job or name, or a zero TTL, stops
    /// it at once.
    pub fn campaign(&mut self, job: &str) -> watch::Receiver<Role> {
        if let Some(r) = self.roles.get(job) {
            return r.clone();
        }
        let (tx, rx) = watch::channel(Role::Follower);
        self.roles.insert(job.to_owned(), rx.clone());
        if let Err(e) = check_elector_args(Some(job), &self.shared.name, self.shared.ttl) {
            self.shared.errors().insert(job.to_owned(), e);
            return rx;
        }
        let task = tokio::spawn(campaign(
            self.shared.clone(),
            job.to_owned(),
            tx,
            self.stop.subscribe(),
        ));
        self.tasks.push(task);
        rx
    }

    /// The error that stopped `job`'s campaign, if one did.
    pub fn error(&self, job: &str) -> Option<ClientError> {
        self.shared.errors().get(job).cloned()
    }

    /// The role for `job` right now (Follower for a job never campaigned for).
    pub fn role(&self, job: &str) -> Role {
        self.roles.get(job).map_or(Role::Follower, |r| *r.borrow())
    }

    /// Every job we lead right now, with its token, ordered by job.
    pub fn leading(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self
            .shared
            .held()
            .iter()
            .map(|(j, h)| (j.clone(), h.token))
            .collect();
        v.sort();
        v
    }

    /// Stops every campaign and the renewer, releases every lease held, and
    /// waits for that. Each release is bounded by its lease's deadline (past
    /// it the lease runs out on its own).
    pub async fn resign(mut self) {
        self.stop.send_replace(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        let held: Vec<(String, Held)> = self.shared.held().drain().collect();
        let releases = held.into_iter().map(|(job, h)| {
            h.role.send_replace(Role::Follower);
            let client = self.shared.client.clone();
            let holder = self.shared.holder.clone();
            async move {
                let until = h.deadline.max(tokio_now() + Duration::from_millis(200));
                match timeout_at(until, client.release(&job, &holder, h.token)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(job, error = %e, "release on resign failed"),
                    Err(_) => tracing::warn!(job, "release on resign timed out"),
                }
            }
        });
        let handles: Vec<_> = releases.map(tokio::spawn).collect();
        for h in handles {
            let _ = h.await;
        }
        // Campaigns stopped with their Acquires on the way give back what
        // they were granted in that instant (see [`Elector::resign`]).
        self.shared
            .client
            .give_backs_settled(Duration::from_secs(1))
            .await;
    }
}

impl Drop for ElectorSet {
    fn drop(&mut self) {
        // Without `resign`, stop renewing; the leases run out on their own.
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Campaigns for one job until stopped: acquire (waiting), hand the lease
/// to the renewer, wait until it is lost, start again.
async fn campaign(
    shared: Arc<Shared>,
    job: String,
    role: watch::Sender<Role>,
    mut stop: watch::Receiver<bool>,
) {
    let ttl = shared.ttl;
    let mut backoff = campaign_backoff(ttl);
    let mut warnings = Warnings::new();
    let campaign_wait = (ttl * 3).clamp(Duration::from_secs(1), Duration::from_secs(30));
    let lost = Arc::new(Notify::new());
    loop {
        let sent = tokio_now();
        let acquired = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = timeout_at(
                sent + campaign_wait + ttl,
                shared.client.acquire_with(&job, &shared.holder, ttl, campaign_wait, AcquireOptions {
                    bind_to_stream: shared.options.bind_to_stream,
                    preferred: shared.options.preferred,
                    value: Vec::new(),
                    slots: 0,
                }),
            ) => r,
        };
        match acquired {
            Ok(Ok(a)) if a.acquired => {
                backoff.reset();
                let token = a.lease.token;
                let Some(anchor) = anchor(&shared, &job, token, sent).await else {
                    continue;
                };
                if anchor + ttl <= tokio_now() {
                    continue;
                }
                shared.held().insert(
                    job.clone(),
                    Held {
                        token,
                        deadline: anchor + ttl,
                        role: role.clone(),
                        lost: lost.clone(),
                    },
                );
                role.send_replace(Role::Leader { token });
                tracing::info!(job, token, "elected");
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = lost.notified() => {}
                }
            }
            Ok(Ok(_)) => backoff.reset(),
            Ok(Err(e)) if e.stops_campaign() => {
                tracing::error!(job, error = %e, "campaign refused; not campaigning again");
                shared.errors().insert(job, e);
                return;
            }
            Ok(Err(e)) => {
                if let Some(suppressed) = warnings.allow() {
                    tracing::warn!(job, error = %e, suppressed, "campaign: acquire failed; retrying");
                }
                let wait = backoff.next();
                tracing::debug!(job, error = %e, ?wait, "campaign: acquire failed");
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = sleep(wait) => {}
                }
            }
            Err(_) => {
                if let Some(suppressed) = warnings.allow() {
                    tracing::warn!(job, suppressed, "campaign: acquire timed out");
                }
            }
        }
    }
}

/// The instant a fresh grant's TTL may be counted from (see the Elector):
/// when the Acquire was sent if it came back quickly, else when a
/// confirming renewal was sent. `None` when it cannot be confirmed.
async fn anchor(shared: &Shared, job: &str, token: u64, sent: Instant) -> Option<Instant> {
    let ttl = shared.ttl;
    if tokio_now() < sent + ttl / 10 {
        return Some(sent);
    }
    let sent = tokio_now();
    match timeout_at(
        sent + ttl / 2,
        shared.client.renew(job, &shared.holder, token, ttl),
    )
    .await
    {
        Ok(Ok(_)) => Some(sent),
        _ => None,
    }
}

/// Renews every held lease every `ttl / 3` in one message, and steps down
/// from any lease whose deadline passes or whose renewal is refused.
async fn renew_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ttl = shared.ttl;
    let every = ttl / 3;
    let mut retry = renew_backoff(ttl);
    let mut warnings = Warnings::new();
    let mut stream: Option<KeepAlive> = None;
    let mut next = tokio_now() + every;
    loop {
        let earliest = shared.held().values().map(|h| h.deadline).min();
        let wake = earliest.map_or(next, |d| d.min(next));
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = sleep_until(wake) => {}
        }
        // Our own deadlines first: no server answer can extend them.
        let now = tokio_now();
        let expired: Vec<(String, u64)> = shared
            .held()
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(j, h)| (j.clone(), h.token))
            .collect();
        for (job, token) in expired {
            shared.step_down(&job, token, "deadline passed without a renewal");
        }
        if now < next {
            continue;
        }
        let batch: Vec<KeepAliveRenewal> = shared
            .held()
            .iter()
            .map(|(j, h)| KeepAliveRenewal::new(j, &shared.holder, h.token, ttl))
            .collect();
        if batch.is_empty() {
            next = now + every;
            continue;
        }
        let Some(earliest) = shared.held().values().map(|h| h.deadline).min() else {
            continue;
        };
        let sent = tokio_now();
        let result = timeout_at(earliest.max(sent + Duration::from_millis(10)), async {
            if stream.is_none() {
                stream = Some(
                    shared
                        .client
                        .keep_alive_with(shared.options.bind_to_stream)
                        .await?,
                );
            }
            stream.as_mut().expect("opened").renew(&batch).await
        });
        let result = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = result => r,
        };
        match result {
            Ok(Ok(outcomes)) => {
                for (r, outcome) in batch.iter().zip(outcomes) {
                    match outcome {
                        RenewOutcome::Renewed(_) => {
                            if let Some(h) = shared.held().get_mut(&r.job) {
                                if h.token == r.token {
                                    h.deadline = sent + ttl;
                                }
                            }
                        }
                        other => {
                            tracing::warn!(job = %r.job, token = r.token, outcome = ?other, "lease lost");
                            shared.step_down(&r.job, r.token, "renewal refused");
                        }
                    }
                }
                next = sent + every;
                retry.reset();
            }
            Ok(Err(e)) => {
                if let Some(suppressed) = warnings.allow() {
                    tracing::warn!(error = %e, suppressed, "keep-alive failed; retrying");
                }
                stream = None;
                next = tokio_now() + retry.next_before(earliest);
            }
            Err(_) => {
                if let Some(suppressed) = warnings.allow() {
                    tracing::warn!(suppressed, "keep-alive timed out; retrying");
                }
                stream = None;
                next = tokio_now() + retry.next_before(earliest);
            }
        }
    }
}
