//! `WatchLease`: a watcher's task, which sends the current lease and then
//! each change of holder or token, and the one deadline timer of each
//! watched job, which tells its watchers of an expiry. Decisions wake
//! them through [`Node::publish`].

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::sleep_until;

use leasehold_backend::EventKind;
use leasehold_core::clock;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules::classify;
use leasehold_core::lease::{JobName, LeaseView};

use super::Node;

impl Node {
    /// Watches `job`: the current lease first, then every change of holder
    /// or token. The channel is bounded: a consumer that falls behind gets
    /// the latest state, with the changes it missed folded into it. The
    /// stream ends when the receiver is dropped or the node closes.
    pub fn watch(&self, job: JobName) -> mpsc::Receiver<Result<(EventKind, LeaseView)>> {
        let (tx, rx) = mpsc::channel(4);
        let mut changes = {
            let mut w = self.inner.watchers.lock().expect("watchers lock");
            w.entry(job.clone())
                .or_insert_with(|| {
                    let s = watch::Sender::new(0);
                    self.watch_deadline(job.clone(), s.subscribe());
                    s
                })
                .subscribe()
        };
        let node = self.clone();
        tokio::spawn(async move {
            let mut closing = node.inner.closing.subscribe();
            let mut last = match node.lease(&job).await {
                Ok(v) => v,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            if tx
                .send(Ok((EventKind::Current, last.clone())))
                .await
                .is_err()
            {
                return;
            }
            loop {
                // Woken by a change, or by the job's one deadline timer
                // (`watch_deadline`) when the lease runs out: never a
                // timer per watcher, so that many watchers of one job do
                // not all wake, and read, at each of its deadlines.
                let mut shutting_down = false;
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = closing.wait_for(|c| *c) => shutting_down = true,
                    r = changes.changed() => if r.is_err() { return },
                }
                if shutting_down {
                    // Tell the watcher why, so it reconnects elsewhere.
                    let _ = tx.send(Err(Error::ShuttingDown)).await;
                    return;
                }
                let view = match node.lease(&job).await {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                if let Some(kind) = classify(&last, &view) {
                    if tx.send(Ok((kind, view.clone()))).await.is_err() {
                        return;
                    }
                }
                last = view;
            }
        });
        rx
    }

    /// The one timer of a watched job: it sleeps until the lease's
    /// deadline and, if the lease has run out by then (not renewed), tells
    /// the job's watchers, as a change does. Ends, taking the job's entry
    /// out of the watchers' map, once nobody else watches the job.
    fn watch_deadline(&self, job: JobName, mut rx: watch::Receiver<u64>) {
        let node = self.clone();
        tokio::spawn(async move {
            let mut closing = node.inner.closing.subscribe();
            loop {
                // Nobody else watches: leave, and take the entry out under
                // the lock that new watchers subscribe under.
                {
                    let mut w = node.inner.watchers.lock().expect("watchers lock");
                    match w.get(&job) {
                        Some(s) if s.receiver_count() > 1 => {}
                        Some(_) => {
                            w.remove(&job);
                            leasehold_backend::room::give_back_room(&mut *w);
                            return;
                        }
                        None => return,
                    }
                }
                let view = node.lease_now(&job);
                let Some(deadline) = view.deadline() else {
                    tokio::select! {
                        r = rx.changed() => if r.is_err() { return },
                        _ = closing.wait_for(|c| *c) => return,
                        // Watchers that leave are noticed within a minute.
                        _ = tokio::time::sleep(Duration::from_secs(60)) => {}
                    }
                    continue;
                };
                // At least once a minute, to notice that the watchers left.
                let wake = deadline.min(clock::now() + Duration::from_secs(60));
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    _ = closing.wait_for(|c| *c) => return,
                    _ = sleep_until(wake.into()) => {
                        if wake < deadline {
                            continue;
                        }
                        let now = node.lease_now(&job);
                        if now.deadline().is_none_or(|d| d <= clock::now()) || now.token != view.token {
                            let w = node.inner.watchers.lock().expect("watchers lock");
                            if let Some(s) = w.get(&job) {
                                s.send_modify(|n| *n += 1);
                            }
                        }
                    }
                }
            }
        });
    }

    /// After a renewal that moved a lease's deadline earlier (a shorter
    /// TTL): wakes the job's deadline timer, which sleeps until the
    /// deadline it read and would otherwise tell the watchers of the expiry
    /// only at the old, later one. The watchers wake too, and find nothing
    /// to tell; a renewal is not a change to them.
    pub(super) fn deadline_moved_earlier(&self, job: &JobName) {
        let w = self.inner.watchers.lock().expect("watchers lock");
        if let Some(s) = w.get(job) {
            s.send_modify(|n| *n += 1);
        }
    }

    pub(super) fn publish(&self, job: &JobName) {
        self.inner.changed(job);
        let mut w = self.inner.watchers.lock().expect("watchers lock");
        if let Some(s) = w.get(job) {
            if s.receiver_count() == 0 {
                w.remove(job);
            } else {
                s.send_modify(|n| *n += 1);
            }
        }
    }
}
