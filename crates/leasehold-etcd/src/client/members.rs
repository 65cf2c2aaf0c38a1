//! Which etcd member a frontend calls, and how it leaves one that stalls.
//!
//! A frontend keeps one channel per member and sends every call to the
//! current member. It moves on to the next when a call to it fails or gets
//! no answer within an attempt, so a killed member costs the calls in
//! flight to it and nothing after.
//!
//! A paused member (SIGSTOP, a long GC pause, a partition that drops
//! packets) fails nothing: its connection stays open and calls to it just
//! wait. Waiting for an attempt to run out (seconds) would stop the
//! frontend for that long, and a shorter attempt would fail slow calls of a
//! busy, healthy cluster. So a prober tells the two apart. Every
//! [`PROBE_EVERY`] it asks every member for its status, which a member
//! answers from memory, without raft. The current member is taken for
//! stalled when it leaves its probe unanswered for [`STALL`] while another
//! answers the same probe in under [`QUICK`]: a busy cluster is slow
//! everywhere, a paused member is silent while its peers are quick. The
//! frontend then moves to the member that answered first,
//! and every call in flight to the stalled one gives up at once
//! ([`Members::stalled`]): reads and other idempotent calls are sent again
//! to the new member, a change is reported UNAVAILABLE (its outcome
//! unknown, as for any lost reply), and the keep-alive stream reopens.
//!
//! A call in flight when etcd's leader is lost gets no answer at all: the
//! members drop the proposals and reads that waited for the old leader,
//! and the caller would wait out its attempt. So the prober also follows
//! the raft term the members report: once it grows (a new leader was
//! elected), every call in flight gives up in the same way and is sent
//! again, to a cluster that has a leader.
//!
//! Moving on from a member that failed a call skips the members that left
//! their last probe unanswered, so a frontend does not come back to a
//! paused or dead member while another answers.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::EtcdChannel;
use tokio::sync::watch;
use tokio::time::Instant;

use super::pb;
use super::pb::maintenance_client::MaintenanceClient;

/// How often the current member is probed.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(100);

/// How long the current member may leave a probe unanswered, while another
/// answers quickly, before it is taken for stalled.
pub(crate) const STALL: Duration = Duration::from_millis(300);

/// How quickly the other member must answer for the silence of the current
/// one to count.
pub(crate) const QUICK: Duration = Duration::from_millis(100);

/// One channel per member, and which one calls go to now.
pub(crate) struct Members {
    channels: Vec<EtcdChannel>,
    current: AtomicUsize,
    /// Per member, bumped each time it is found stalled.
    stalls: Vec<watch::Sender<u64>>,
    /// Per member, whether it left its last probe unanswered.
    silent: Vec<AtomicBool>,
    /// The highest raft term a probe saw.
    term: watch::Sender<u64>,
}

impl Members {
    /// The members behind `channels`, calling the first one first, with a
    /// prober when there is more than one (it stops with the last
    /// reference to them).
    pub(crate) fn new(channels: Vec<EtcdChannel>) -> Arc<Members> {
        let stalls = channels.iter().map(|_| watch::Sender::new(0)).collect();
        let silent = channels.iter().map(|_| AtomicBool::new(false)).collect();
        let members = Arc::new(Members {
            channels,
            current: AtomicUsize::new(0),
            stalls,
            silent,
            term: watch::Sender::new(0),
        });
        if members.channels.len() > 1 {
            tokio::spawn(probe(Arc::downgrade(&members)));
        }
        members
    }

    /// The member to call now, and its channel.
    pub(crate) fn pick(&self) -> (usize, EtcdChannel) {
        let i = self.current.load(Ordering::Acquire) % self.channels.len();
        (i, self.channels[i].clone())
    }

    /// Moves on from `member`, unless another call did already: to the
    /// next member that answered its last probe, else simply the next.
    pub(crate) fn failed(&self, member: usize) {
        let n = self.channels.len();
        let next = (1..n)
            .map(|k| (member + k) % n)
            .find(|&i| !self.silent[i].load(Ordering::Relaxed))
            .unwrap_or((member + 1) % n);
        self.move_on(member, next);
    }

    fn move_on(&self, from: usize, to: usize) -> bool {
        let moved = self
            .current
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            && self.channels.len() > 1;
        if moved {
            tracing::debug!(from, to, "etcd: moving on to another member");
        }
        moved
    }

    /// Completes when `member` is found stalled, or etcd elects a new
    /// leader, after this call: whoever waits on it for an answer should
    /// stop waiting.
    pub(crate) fn stalled(&self, member: usize) -> impl Future<Output = ()> + Send + 'static {
        let mut stall = self.stalls[member].subscribe();
        let mut term = self.term.subscribe();
        async move {
            tokio::select! {
                Ok(()) = stall.changed() => {}
                Ok(()) = term.changed() => {}
                else => std::future::pending::<()>().await,
            }
        }
    }

    /// `member` left a probe unanswered while `other` answered: calls go to
    /// `other` from now on, and those in flight to `member` give up.
    fn found_stalled(&self, member: usize, other: usize) {
        if self.move_on(member, other) {
            tracing::warn!(
                member,
                to = other,
                "etcd: a member left a status probe unanswered for {STALL:?} while another \
                 answered at once; calls in flight to it are given up and go to the other"
            );
        }
        self.stalls[member].send_modify(|n| *n += 1);
    }
}

/// The prober (see the module's documentation). Ends once the members
/// are dropped.
async fn probe(members: Weak<Members>) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(m) = members.upgrade() else { return };
        let (current, _) = m.pick();
        let mut probes = tokio::task::JoinSet::new();
        for (i, ch) in m.channels.iter().enumerate() {
            let ch = ch.clone();
            probes.spawn(async move { (i, status(ch, STALL).await) });
        }
        let mut answers = vec![None; m.channels.len()];
        while let Some(r) = probes.join_next().await {
            if let Ok((i, a)) = r {
                answers[i] = a;
            }
        }
        for (i, a) in answers.iter().enumerate() {
            m.silent[i].store(a.is_none(), Ordering::Relaxed);
        }
        let term = answers.iter().flatten().map(|(_, t)| *t).max().unwrap_or(0);
        let was = *m.term.borrow();
        if term > was {
            // The first term seen is no news: kept without waking anyone.
            if was == 0 {
                m.term.send_if_modified(|t| {
                    *t = term;
                    false
                });
            } else {
                tracing::info!(term, "etcd: a new leader; calls in flight are sent again");
                m.term.send_replace(term);
            }
        }
        let answers: Vec<Option<Duration>> =
            answers.iter().map(|a| a.map(|(took, _)| took)).collect();
        if answers[current].is_none() {
            let quickest = answers
                .iter()
                .enumerate()
                .filter_map(|(i, a)| a.map(|took| (took, i)))
                .min();
            if let Some((took, other)) = quickest {
                if took < QUICK {
                    m.found_stalled(current, other);
                }
            }
        }
    }
}

/// How long the member behind `ch` took to answer a status request, and
/// the raft term it is in; `None` when it failed or did not answer within
/// `within`.
async fn status(ch: EtcdChannel, within: Duration) -> Option<(Duration, u64)> {
    let start = Instant::now();
    let mut c = MaintenanceClient::new(ch);
    match tokio::time::timeout(within, c.status(pb::StatusRequest {})).await {
        Ok(Ok(r)) => Some((start.elapsed(), r.into_inner().raft_term)),
        _ => None,
    }
}
