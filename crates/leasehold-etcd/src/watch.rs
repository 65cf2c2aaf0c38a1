//! `WatchLease` on etcd: the current lease first, then every change of
//! holder or token, from an etcd watch of the job's two keys.
//!
//! A watch task reads the job, sends its state, and watches the job range
//! from the revision it read, so nothing in between is missed. Each etcd
//! event is folded into the job's [`JobState`] with the same parse as every
//! read ([`Keys::event`]); what a watcher is told is the rule book's
//! [`classify`] of the last state it was sent against the newest (a
//! renewal, or a move of the holder key to a new etcd lease, is no event).
//! A consumer that falls behind gets the newest state, with what it missed
//! folded into it: events are computed when the consumer has room, not
//! queued. A broken etcd watch (a member gone, a compaction) is followed by
//! a fresh read, and a new watch from there; the change is folded into the
//! next event the same way.

use std::time::Duration;

use tokio::sync::mpsc;

use super::client::{pb, Watch, WatchRange};
use super::decide;
use super::keys::{BadRecord, JobState, Keys};
use super::{closed, EtcdNode};
use leasehold_backend::EventKind;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::rules::classify;
use leasehold_core::lease::{JobName, LeaseView};

/// One watcher's view of a job: the state folded from etcd's events, the
/// last view the watcher was sent, and the newest one not yet sent.
#[derive(Debug)]
pub struct Follow {
    job: JobName,
    st: JobState,
    revision: i64,
    sent: LeaseView,
    pending: Option<LeaseView>,
}

impl Follow {
    /// Follows `job` from `st`, read at `revision`, whose view the watcher
    /// was just sent.
    pub fn new(job: JobName, st: JobState, revision: i64, sent: LeaseView) -> Follow {
        Follow {
            job,
            st,
            revision,
            sent,
            pending: None,
        }
    }

    /// The newest revision the state reflects: an etcd watch from the next
    /// one misses nothing.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Folds the events of one watch response into the state; the new
    /// state waits to be sent. A record that does not decode ends the
    /// watch with an error naming the job.
    pub fn on_events(&mut self, keys: &Keys, events: &[pb::Event]) -> Result<(), BadRecord> {
        for ev in events {
            let Some(kv) = &ev.kv else { continue };
            if let Some((_, r)) = keys.event(ev) {
                self.st.apply(r?);
            }
            self.revision = self.revision.max(kv.mod_revision);
        }
        self.pending = Some(self.view());
        Ok(())
    }

    /// Replaces the state with a fresh read (after a broken watch); what
    /// changed meanwhile is folded into the next event.
    pub fn reset(&mut self, st: JobState, revision: i64) {
        self.st = st;
        self.revision = revision;
        self.pending = Some(self.view());
    }

    /// Whether a new state waits to be sent.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The event the waiting state makes for the watcher, if any, which
    /// then counts as sent. A state that makes no event (a renewal) is
    /// dropped.
    pub fn take(&mut self) -> Option<(EventKind, LeaseView)> {
        let view = self.pending.take()?;
        let kind = classify(&self.sent, &view)?;
        self.sent = view.clone();
        Some((kind, view))
    }

    /// The state as a view; a held lease shows its full TTL (an etcd
    /// event carries no time left).
    fn view(&self) -> LeaseView {
        let ttl = self
            .st
            .holder
            .as_ref()
            .map_or(Duration::ZERO, |h| h.rec.ttl);
        decide::view(&self.job, &self.st, ttl, leasehold_core::clock::now())
    }
}

impl EtcdNode {
    /// Watches `job`: the current lease first, then every change of holder
    /// or token, from an etcd watch. A consumer that falls behind gets the
    /// latest state, with what it missed folded into it.
    pub fn watch(&self, job: JobName) -> mpsc::Receiver<Result<(EventKind, LeaseView)>> {
        let (tx, rx) = mpsc::channel(4);
        let node = self.clone();
        tokio::spawn(async move { node.watch_task(job, tx).await });
        rx
    }

    async fn watch_task(self, job: JobName, tx: mpsc::Sender<Result<(EventKind, LeaseView)>>) {
        let mut closing = self.inner.closing.subscribe();
        let keys = &self.inner.keys;
        let first = async {
            let read = self.read_job(&job, None).await?;
            let view = self.view(&job, &read.job).await?;
            Ok::<_, Error>((read, view))
        };
        let (read, sent) = match first.await {
            Ok(v) => v,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        if tx
            .send(Ok((EventKind::Current, sent.clone())))
            .await
            .is_err()
        {
            return;
        }
        let mut follow = Follow::new(job.clone(), read.job, read.revision, sent);
        let range = WatchRange::all(keys.job_range(job.as_str()));
        let mut watch: Option<Watch> = None;
        loop {
            if watch.is_none() {
                match self.failed(
                    self.inner
                        .etcd
                        .watch(std::slice::from_ref(&range), follow.revision() + 1)
                        .await,
                ) {
                    Ok(w) => watch = Some(w),
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
            let w = watch.as_mut().expect("watch open");
            tokio::select! {
                _ = tx.closed() => return,
                _ = closed(&mut closing) => {
                    let _ = tx.try_send(Err(Error::ShuttingDown));
                    return;
                }
                permit = tx.reserve(), if follow.has_pending() => {
                    let Ok(permit) = permit else { return };
                    if let Some(ev) = follow.take() {
                        permit.send(Ok(ev));
                    }
                }
                r = w.next() => match r {
                    Ok(resp) => {
                        if let Err(bad) = follow.on_events(keys, &resp.events) {
                            let _ = tx.send(Err(bad.into())).await;
                            return;
                        }
                    }
                    Err(_) => {
                        // Read afresh and watch again from there; what was
                        // missed is folded into the next event.
                        watch = None;
                        match self.read_job(&job, None).await {
                            Ok(fresh) => follow.reset(fresh.job, fresh.revision),
                            Err(e) => {
                                let _ = tx.send(Err(e)).await;
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{HolderRec, TokenRec};
    use leasehold_core::lease::{LeaseState, Limits, Token, Vacancy};

    const TTL: Duration = Duration::from_secs(5);

    fn put(key: Vec<u8>, value: Vec<u8>, lease: i64, rev: i64) -> pb::Event {
        pb::Event {
            r#type: pb::event::EventType::Put as i32,
            kv: Some(pb::KeyValue {
                key,
                value,
                lease,
                mod_revision: rev,
                ..Default::default()
            }),
            prev_kv: None,
        }
    }

    fn delete(key: Vec<u8>, rev: i64) -> pb::Event {
        pb::Event {
            r#type: pb::event::EventType::Delete as i32,
            ..put(key, Vec::new(), 0, rev)
        }
    }

    /// The events of a grant of `token` to `holder` at revision `rev`.
    fn grant(k: &Keys, token: u64, holder: &str, ttl: Duration, rev: i64) -> Vec<pb::Event> {
        let t = TokenRec {
            token: Token(token),
            released: false,
            holder: holder.into(),
            owner: None,
        };
        vec![
            put(k.token("j"), t.encode(), 0, rev),
            holder_put(k, token, holder, ttl, rev),
        ]
    }

    fn holder_put(k: &Keys, token: u64, holder: &str, ttl: Duration, rev: i64) -> pb::Event {
        let h = HolderRec {
            issued: Default::default(),
            token: Token(token),
            ttl,
            holder: holder.into(),
            value: None,
            sharing: Default::default(),
        };
        put(k.holder("j"), h.encode(), 1000 + rev, rev)
    }

    fn release(k: &Keys, token: u64, holder: &str, rev: i64) -> Vec<pb::Event> {
        let t = TokenRec {
            token: Token(token),
            released: true,
            holder: holder.into(),
            owner: None,
        };
        vec![
            put(k.token("j"), t.encode(), 0, rev),
            delete(k.holder("j"), rev),
        ]
    }

    /// A watcher of a job never granted, at revision 1.
    fn fresh() -> Follow {
        let job = Limits::default().job("j").unwrap();
        let st = JobState::default();
        let sent = decide::view(&job, &st, Duration::ZERO, leasehold_core::clock::now());
        Follow::new(job, st, 1, sent)
    }

    fn holder_of(v: &LeaseView) -> Option<&str> {
        v.holder().map(|h| h.as_str())
    }

    #[test]
    fn grants_releases_and_expiries_are_events_and_renewals_are_not() {
        let k = Keys::new("lh/");
        let mut f = fresh();
        assert!(f.take().is_none(), "nothing new yet");

        f.on_events(&k, &grant(&k, 1, "a", TTL, 5)).unwrap();
        assert_eq!(f.revision(), 5);
        let (kind, v) = f.take().unwrap();
        assert_eq!(
            (kind, v.token, holder_of(&v)),
            (EventKind::Acquired, Token(1), Some("a"))
        );

        // A renewal with a new TTL moves the holder key: no event.
        f.on_events(&k, &[holder_put(&k, 1, "a", Duration::from_secs(9), 6)])
            .unwrap();
        assert!(f.has_pending());
        assert!(f.take().is_none());
        assert!(!f.has_pending());

        f.on_events(&k, &release(&k, 1, "a", 7)).unwrap();
        let (kind, v) = f.take().unwrap();
        assert_eq!(
            (kind, v.state),
            (EventKind::Released, LeaseState::Free(Vacancy::Released))
        );

        f.on_events(&k, &grant(&k, 2, "b", TTL, 8)).unwrap();
        assert_eq!(f.take().unwrap().0, EventKind::Acquired);
        // etcd deleting the holder key with its lease: an expiry.
        f.on_events(&k, &[delete(k.holder("j"), 9)]).unwrap();
        let (kind, v) = f.take().unwrap();
        assert_eq!((kind, v.token), (EventKind::Expired, Token(2)));
        assert_eq!(f.revision(), 9);
    }

    #[test]
    fn a_slow_watcher_gets_the_newest_state_with_what_it_missed_folded_in() {
        let k = Keys::new("lh/");
        let mut f = fresh();
        f.on_events(&k, &grant(&k, 1, "a", TTL, 5)).unwrap();
        f.on_events(&k, &release(&k, 1, "a", 6)).unwrap();
        f.on_events(&k, &grant(&k, 2, "b", TTL, 7)).unwrap();
        let (kind, v) = f.take().unwrap();
        assert_eq!(
            (kind, v.token, holder_of(&v)),
            (EventKind::Acquired, Token(2), Some("b"))
        );
        assert!(f.take().is_none());
        // Granted and released again before the watcher looked: the
        // release is what it is told.
        f.on_events(&k, &grant(&k, 3, "b", TTL, 8)).unwrap();
        f.on_events(&k, &release(&k, 3, "b", 9)).unwrap();
        let (kind, v) = f.take().unwrap();
        assert_eq!((kind, v.token), (EventKind::Released, Token(3)));
    }

    #[test]
    fn a_fresh_read_after_a_broken_watch_is_folded_into_the_next_event() {
        let k = Keys::new("lh/");
        let mut f = fresh();
        let mut st = JobState::default();
        for ev in grant(&k, 4, "c", TTL, 20) {
            st.apply(k.event(&ev).unwrap().1.unwrap());
        }
        f.reset(st, 20);
        assert_eq!(f.revision(), 20);
        let (kind, v) = f.take().unwrap();
        assert_eq!(
            (kind, v.token, holder_of(&v)),
            (EventKind::Acquired, Token(4), Some("c"))
        );
        // The same state read again is no event.
        let same = f.st.clone();
        f.reset(same, 21);
        assert!(f.take().is_none());
    }

    #[test]
    fn a_record_that_does_not_decode_ends_the_watch_naming_the_job() {
        let k = Keys::new("lh/");
        let mut f = fresh();
        let bad = f
            .on_events(&k, &[put(k.token("j"), b"nonsense".to_vec(), 0, 3)])
            .unwrap_err();
        assert_eq!((bad.job.as_str(), bad.what), ("j", "token record"));
        // Keys that are not the job's holder or token are no change.
        f.on_events(&k, &[put(k.value("j", b"k"), b"v".to_vec(), 0, 4)])
            .unwrap();
        assert!(f.take().is_none());
    }
}
