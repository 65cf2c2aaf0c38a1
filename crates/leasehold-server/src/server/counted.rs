//! Counted leases (semaphores): an `Acquire` with `slots = N` (2 to
//! [`MAX_SLOTS`]) may be one of up to N holders of its job at once.
//!
//! A counted job is built from calls both backends already make, so its
//! rules are written once, here, above them:
//!
//! - **Slot k is a job of its own, `{job}#{k}`** ([`slot_job`]), with its
//!   own lease, token, history and fenced keys. The grant names it in
//!   `Lease.job`; its holder renews, releases, binds and writes with that
//!   name as with any lease, so a stale slot holder's writes are fenced
//!   by its slot's token exactly as a stale leader's are.
//! - **The job's own lease is the line's turn.** A counted Acquire first
//!   acquires `job` itself, waiting in its line, first come first served,
//!   as any Acquire waits. Only the turn's holder takes a free slot (with
//!   a grant that does not wait), then releases the turn, which hands it
//!   to the next in line at once. So a slot that frees goes to the first
//!   waiter, and nobody who arrives later takes it first: a newcomer
//!   queues for the turn behind everyone who waits. While it waits for a
//!   slot, the turn's holder watches every slot's job, wakes at the
//!   earliest slot deadline, and renews the turn every TTL/3; its call
//!   going away (cancelled, or its connection closed) releases the turn.
//! - **The count is fixed by the first counted grant**, under the job's
//!   fenced key [`SLOTS_KEY`], written with the turn's token: only the
//!   turn's live holder can write it, so two first Acquires naming
//!   different counts cannot both fix theirs. An Acquire naming another
//!   count is refused naming `slots`, and changes nothing.
//! - **A live holder of a slot that asks again is renewed in its slot**
//!   (never granted another slot), whether or not others wait.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::backend::{Acquired, Backend, ReleaseIfDropped, Waiting};
use crate::error::{Error, Result};
use crate::lease::{
    slot_job, HolderId, JobName, LeaseState, LeaseView, Limits, Published, Token, Vacancy,
    MAX_SLOTS, SLOTS_KEY,
};
use crate::server::auth::{Action, Caller};

/// How often the first waiter looks at the slots again when a deadline has
/// passed and no watch has told it of the slot's expiry yet.
const POLL: Duration = Duration::from_millis(250);

/// A counted Acquire: its job, count of slots and the usual fields.
pub struct Counted<'a> {
    /// The job (its own lease is the line's turn).
    pub job: &'a JobName,
    /// The count of slots, 2 to [`MAX_SLOTS`].
    pub slots: u32,
    /// Who asks.
    pub holder: &'a HolderId,
    /// The TTL of the slot's grant (and of the turn).
    pub ttl: Duration,
    /// How long to wait for a slot.
    pub wait: Duration,
    /// The caller's principal's `max_jobs`.
    pub max_owned: Option<usize>,
    /// Queued as a preferred candidate for the turn.
    pub preferred: bool,
    /// Published with the slot's grant.
    pub value: Published,
}

/// What a counted Acquire came to, and the slot when granted.
pub struct Outcome {
    /// As for any Acquire: the slot's grant, or (not acquired) the slot
    /// that frees soonest.
    pub acquired: Acquired,
    /// The slot granted (0 when not acquired).
    pub slot: u32,
}

/// Decides a counted Acquire (see the module docs).
pub async fn acquire(
    node: &Backend,
    limits: &Limits,
    caller: &Caller,
    req: Counted<'_>,
) -> Result<Outcome> {
    debug_assert!((2..=MAX_SLOTS).contains(&req.slots));
    let names = (0..req.slots)
        .map(|k| slot_job(limits, req.job, k))
        .collect::<Result<Vec<_>>>()?;
    for name in &names {
        caller.authorize(Action::Lease, name.as_str())?;
    }
    // A count already fixed is checked before anything changes.
    let fixed = count_of(node, req.job).await?;
    if let Some(n) = fixed {
        if n != req.slots {
            return Err(mismatch(req.job, n, req.slots));
        }
    }
    // A live holder of a slot asks again: renewed in its slot, never
    // granted a second one.
    for (k, name) in names.iter().enumerate() {
        let view = node.lease(name).await?;
        if view.holder() == Some(req.holder) {
            let renewed = node
                .renew_with_value(
                    name,
                    req.holder,
                    view.token,
                    req.ttl,
                    Some(req.value.clone()),
                )
                .await;
            if let Ok(r) = renewed {
                return Ok(Outcome {
                    acquired: Acquired {
                        acquired: true,
                        fresh: false,
                        lease: r.lease,
                    },
                    slot: k as u32,
                });
            }
        }
    }
    let give_up = Instant::now() + req.wait;
    loop {
        // The turn: waits in the job's own line.
        let wait = give_up.saturating_duration_since(Instant::now());
        let turn = node
            .acquire_as(
                req.job,
                req.holder,
                req.ttl,
                wait,
                req.max_owned,
                req.preferred,
                None,
            )
            .await?;
        if !turn.acquired {
            return Ok(busy(node, &names).await);
        }
        let token = turn.lease.token;
        let undo = {
            let (node, job, holder) = (node.clone(), req.job.clone(), req.holder.clone());
            ReleaseIfDropped::new(async move {
                let _ = node.release(&job, &holder, token).await;
            })
        };
        let r = with_turn(node, &req, &names, token, give_up).await;
        // A new slot grant is given back if this call goes away while the
        // turn is released (the handler guards it from then on).
        let granted = match &r {
            Ok(o) if o.acquired.fresh => {
                let (node, job, holder) = (
                    node.clone(),
                    o.acquired.lease.job.clone(),
                    req.holder.clone(),
                );
                let t = o.acquired.lease.token;
                Some(ReleaseIfDropped::new(async move {
                    node.release_undelivered(&job, &holder, t).await
                }))
            }
            _ => None,
        };
        let _ = node.release(req.job, req.holder, token).await;
        undo.disarm();
        if let Some(g) = granted {
            g.disarm();
        }
        match r {
            // The turn ran out while this frontend waited (it stalled):
            // queue for it again, with the wait that is left.
            Err(Error::LeaseLost { .. }) if Instant::now() < give_up => continue,
            Err(Error::LeaseLost { .. }) => return Ok(busy(node, &names).await),
            r => return r,
        }
    }
}

/// Holding the turn (`token`): fixes or checks the count, then takes the
/// first slot that is free, or waits for one until `give_up`.
async fn with_turn(
    node: &Backend,
    req: &Counted<'_>,
    names: &[JobName],
    token: Token,
    give_up: Instant,
) -> Result<Outcome> {
    match count_of(node, req.job).await? {
        Some(n) if n != req.slots => return Err(mismatch(req.job, n, req.slots)),
        Some(_) => {}
        None => {
            let text = req.slots.to_string().into_bytes();
            node.checked_write(req.job, token, SLOTS_KEY, Some(text), None)
                .await?;
        }
    }
    let mut changes = Changes::watch(node, names);
    let every = req.ttl / 3;
    let mut renew_at = Instant::now() + every;
    loop {
        let mut soonest: Option<Instant> = None;
        for (k, name) in names.iter().enumerate() {
            let a = node
                .acquire_as(
                    name,
                    req.holder,
                    req.ttl,
                    Duration::ZERO,
                    req.max_owned,
                    false,
                    req.value.clone(),
                )
                .await?;
            if a.acquired {
                return Ok(Outcome {
                    acquired: a,
                    slot: k as u32,
                });
            }
            if let Some(d) = a.lease.deadline() {
                soonest = Some(soonest.map_or(d, |s| s.min(d)));
            }
        }
        let now = Instant::now();
        if now >= give_up {
            return Ok(busy(node, names).await);
        }
        // Woken at the soonest slot deadline, when its expiry can be
        // granted. A deadline already passed whose slot was not granted
        // (etcd deletes an expired key a moment after its TTL) is told by
        // the slot's watch; until then it is asked again every POLL, never
        // in a loop.
        let soonest = soonest.filter(|d| *d > now).unwrap_or(now + POLL);
        let wake = give_up.min(renew_at).min(soonest);
        tokio::select! {
            _ = changes.next() => {}
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        if Instant::now() >= renew_at {
            node.renew(req.job, req.holder, token, req.ttl).await?;
            renew_at = Instant::now() + every;
        }
    }
}

/// The job's line as `ListWaiters` and the status page show it: for a
/// counted job, the Acquire that holds the line's turn is its first
/// waiter (whether it asked as a preferred candidate is not kept with the
/// turn: it is shown as not), ahead of those waiting for the turn.
pub async fn waiters(node: &Backend, job: &JobName, limit: usize) -> Result<(Vec<Waiting>, usize)> {
    let (mut line, mut waiting) = node.waiters(job, limit).await?;
    if count_of(node, job).await?.is_some() {
        if let Some(holder) = node.lease(job).await?.holder() {
            line.insert(
                0,
                Waiting {
                    holder: holder.clone(),
                    preferred: false,
                },
            );
            line.truncate(limit);
            waiting += 1;
        }
    }
    Ok((line, waiting))
}

/// The job's count of slots, if fixed ([`SLOTS_KEY`]).
pub async fn count_of(node: &Backend, job: &JobName) -> Result<Option<u32>> {
    count_under(node, job, SLOTS_KEY, "slots").await
}

/// A count kept as decimal text under `job`'s fenced key `key`, if any;
/// anything else there is bad input for `field`.
pub async fn count_under(
    node: &Backend,
    job: &JobName,
    key: &[u8],
    field: &'static str,
) -> Result<Option<u32>> {
    let Some(rec) = node.read(job, key).await? else {
        return Ok(None);
    };
    let Some(text) = rec.value else {
        return Ok(None);
    };
    std::str::from_utf8(&text)
        .ok()
        .and_then(|t| t.parse().ok())
        .map(Some)
        .ok_or_else(|| {
            Error::invalid(
                field,
                format!(
                    "job {:?} keeps something that is not a count under its key {:?} \
                     (written by a plain holder of the job): delete the job, or that key, \
                     to count it again",
                    job.as_str(),
                    String::from_utf8_lossy(key)
                ),
            )
        })
}

/// The counted job and slot whose job `name` is, when it is one: named
/// `{job}#{k}`, with `job` counted and `k` below its count.
pub async fn slot_of(
    node: &Backend,
    limits: &Limits,
    name: &JobName,
) -> Option<(JobName, u32, u32)> {
    let (base, k) = name.as_str().rsplit_once('#')?;
    let k: u32 = k.parse().ok()?;
    if k.to_string() != name.as_str()[base.len() + 1..] {
        return None;
    }
    let base = limits.job(base).ok()?;
    match count_of(node, &base).await {
        Ok(Some(n)) if k < n => Some((base, k, n)),
        _ => None,
    }
}

fn mismatch(job: &JobName, fixed: u32, asked: u32) -> Error {
    Error::invalid(
        "slots",
        format!(
            "job {:?} has {fixed} slots, fixed by its first counted grant; this Acquire asked \
             for {asked} (DeleteJob of the job, once it is free, forgets its count)",
            job.as_str()
        ),
    )
}

/// Not acquired: the answer shows the slot that frees soonest (a slot
/// that cannot be read is left out; with none, the first).
async fn busy(node: &Backend, names: &[JobName]) -> Outcome {
    let mut best: Option<LeaseView> = None;
    for name in names {
        if let Ok(v) = node.lease(name).await {
            let sooner = match (&best, v.deadline()) {
                (None, _) => true,
                (Some(b), Some(d)) => b.deadline().is_none_or(|bd| d < bd),
                (Some(_), None) => false,
            };
            if sooner {
                best = Some(v);
            }
        }
    }
    let lease = best.unwrap_or_else(|| LeaseView {
        job: names[0].clone(),
        token: Token::NONE,
        state: LeaseState::Free(Vacancy::Never),
    });
    Outcome {
        acquired: Acquired {
            acquired: false,
            fresh: false,
            lease,
        },
        slot: 0,
    }
}

/// The changes of every slot's job, as one stream of wake-ups: a task per
/// slot forwards its watch's events, and they all end with this value.
struct Changes {
    rx: mpsc::Receiver<()>,
    _tasks: JoinSet<()>,
}

impl Changes {
    fn watch(node: &Backend, names: &[JobName]) -> Changes {
        let (tx, rx) = mpsc::channel(1);
        let mut tasks = JoinSet::new();
        for name in names {
            let mut events = node.watch(name.clone());
            let tx = tx.clone();
            tasks.spawn(async move {
                while let Some(Ok(_)) = events.recv().await {
                    // A wake-up already pending covers this one.
                    let _ = tx.try_send(());
                }
            });
        }
        Changes { rx, _tasks: tasks }
    }

    /// The next change of any slot; pending for ever once every watch
    /// ended (then the deadlines and the turn's renewals wake us).
    async fn next(&mut self) {
        if self.rx.recv().await.is_none() {
            std::future::pending::<()>().await
        }
    }
}
