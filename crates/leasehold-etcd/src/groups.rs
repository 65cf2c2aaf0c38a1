//! Etcd leases shared by the leases one `KeepAlive` stream renews together.
//!
//! A fleet's holder renews every lease it holds in one `KeepAlive`
//! message, every third of their TTL. Each lease on an etcd lease of its
//! own costs etcd one `LeaseKeepAlive` per renewal, and the frontend a
//! request and its answer: more than everything else a renewal costs
//! together. So a stream's plain renewals (same TTL, asked again since
//! the grant) that were renewed together are moved, once, onto one etcd
//! lease of their stream's, a **group**, and after that one keep-alive of
//! the group renews them all.
//!
//! What makes that safe is when the group's etcd lease is kept alive:
//!
//! - **Only by its own stream, only in a message that renews every lease
//!   of the group.** A member the message leaves out is first moved to an
//!   etcd lease of its own that runs out when the group's would have
//!   (whole seconds, rounded up), so that no lease outlives its last
//!   renewal because another was renewed.
//! - A holder key on a group's etcd lease says so (`keys::Sharing`).
//!   Every other renewal of it (a `Renew`, another stream, another
//!   frontend) moves it to an etcd lease of its own first
//!   ([`decide::extend`](super::decide::extend)), and a release or a
//!   hand-over does not revoke a group's etcd lease.
//! - A member is renewed by the group's keep-alive only when a
//!   linearizable read made after it finds its holder key unchanged, on
//!   the group's lease, in a raft term no newer than the keep-alive's
//!   answer: the proof a lease of its own gets (`renew.rs`).
//! - A lease joins a group only after its own keep-alive was proven in
//!   this message, and the group's etcd lease was kept alive (proven) or
//!   granted in this same message, after the message arrived: on the
//!   group's lease it lasts at least its TTL from the renewal.
//! - **After any move onto a group's etcd lease, that lease is kept alive
//!   once more and proven by a read.** Another path may have renewed the
//!   moved lease in between (a keep-alive of its old etcd lease leaves
//!   its holder key as it was, so the move's comparison cannot see it):
//!   a frontend paused in the middle of a message, say, that resumes
//!   after its client renewed elsewhere. Without it the move would cut
//!   that renewal short; the torture run found exactly that, a lease
//!   ended 160 ms after a renewal. What that keep-alive does not prove
//!   goes to an etcd lease of its own for a whole TTL.
//!
//! When the stream ends its groups are forgotten, not revoked: their
//! leases run out a TTL after their last renewal, as each lease would
//! have. So is a group the stream has not renewed for twice its TTL,
//! so that a long-lived stream keeps state for what it renews now, not
//! for every lease it ever renewed. A stream that renews **every** lease on another stream's group
//! (the client's stream opened again, or its frontend restarted: etcd
//! lists the keys on an etcd lease) takes them over, moving them onto its
//! own group in one transaction a 64, each comparing its holder key
//! unchanged; the old etcd lease runs out empty, so that **no etcd lease
//! is kept alive by any stream but the one that put keys on it**. A
//! stream that renews only some of another's group moves each to an etcd
//! lease of its own, as any other renewal does. A grant moved off a group
//! [`Sharing::MAX_MOVES_OFF`](super::keys::Sharing) times stays on its
//! own etcd lease until it ends: a client that renews its leases in
//! changing company (at random, on several streams) would otherwise pay
//! a move at every renewal.
//!
//! Out of space (etcd's NOSPACE alarm), etcd takes keep-alives and
//! deletes but no put, so a member left out cannot be moved: it stays on
//! the group's lease, and the frontend deletes its holder key when its
//! own TTL runs out, as etcd's expiry would. Should the frontend stop
//! first, the member runs out with the group's lease, at most one TTL
//! late. Joins wait until etcd takes writes again.
//!
//! This module keeps each stream's groups; `renew.rs` does the work.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use leasehold_backend::Renewal;
use leasehold_core::lease::JobName;

use super::keys::Holding;

/// The groups of one `KeepAlive` stream (or one shards member's
/// renewals): made empty for the stream, passed to each of its
/// `renew_many_in` calls, dropped with it. Calls on one value are
/// expected one at a time, as a stream's messages are answered.
#[derive(Debug, Default)]
pub struct RenewGroups {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// By etcd lease.
    groups: HashMap<i64, Group>,
    /// Each member's group.
    of_job: HashMap<JobName, i64>,
}

impl State {
    /// Forgets the groups not kept alive for twice their TTL: their etcd
    /// leases ran out, and their leases with them. A stream's state stays
    /// the size of what it renews, not of every lease it ever renewed.
    fn forget_dead(&mut self, now: Instant) {
        let State { groups, of_job } = self;
        groups.retain(|_, g| {
            let live = now < g.kept + g.ttl * 2;
            if !live {
                for job in g.members.keys() {
                    of_job.remove(job);
                }
            }
            live
        });
    }
}

#[derive(Debug)]
struct Group {
    ttl: Duration,
    /// When its last proven keep-alive (or its grant) was sent: its etcd
    /// lease runs at least until `ttl` after.
    kept: Instant,
    /// Each member's holding as this stream put it on the group's lease.
    members: HashMap<JobName, Holding>,
}

/// A group with a renewal in a batch.
#[derive(Debug)]
pub(super) struct Touched {
    /// The group's etcd lease.
    pub lease: i64,
    /// The TTL of every member.
    pub ttl: Duration,
    /// See `Group::kept`.
    pub kept: Instant,
    /// The members the batch renews: (index in the batch, holding).
    pub present: Vec<(usize, Holding)>,
    /// The members it leaves out.
    pub absent: Vec<(JobName, Holding)>,
}

impl RenewGroups {
    /// The groups `batch` renews a member of, each with what it leaves
    /// out. A renewal counts as its group's when its holder, token and TTL
    /// are the member's; a job twice in `batch` counts once.
    pub(super) fn touched(&self, batch: &[Renewal]) -> Vec<Touched> {
        let mut st = self.state.lock().expect("renew groups");
        st.forget_dead(Instant::now());
        let mut touched: HashMap<i64, Touched> = HashMap::new();
        let mut seen: HashSet<&JobName> = HashSet::new();
        for (i, r) in batch.iter().enumerate() {
            let Some((lease, g)) = st
                .of_job
                .get(&r.job)
                .and_then(|l| Some((*l, st.groups.get(l)?)))
            else {
                continue;
            };
            let h = &g.members[&r.job];
            let same =
                g.ttl == r.ttl && h.rec.holder == r.holder.as_str() && h.rec.token == r.token;
            if same && seen.insert(&r.job) {
                touched
                    .entry(lease)
                    .or_insert_with(|| Touched {
                        lease,
                        ttl: g.ttl,
                        kept: g.kept,
                        present: Vec::new(),
                        absent: Vec::new(),
                    })
                    .present
                    .push((i, h.clone()));
            }
        }
        for t in touched.values_mut() {
            let g = &st.groups[&t.lease];
            let present: HashSet<&JobName> =
                t.present.iter().map(|(i, _)| &batch[*i].job).collect();
            t.absent = g
                .members
                .iter()
                .filter(|(job, _)| !present.contains(job))
                .map(|(job, h)| (job.clone(), h.clone()))
                .collect();
        }
        touched.into_values().collect()
    }

    /// `job` is no longer on the group's lease (moved off, or gone), or
    /// may no longer be counted on it.
    pub(super) fn leave(&self, job: &JobName) {
        let mut st = self.state.lock().expect("renew groups");
        let State { groups, of_job } = &mut *st;
        if let Some(lease) = of_job.remove(job) {
            if let Some(g) = groups.get_mut(&lease) {
                g.members.remove(job);
                if g.members.is_empty() {
                    groups.remove(&lease);
                }
            }
        }
    }

    /// The group's etcd lease is gone: so is every member's holding.
    pub(super) fn gone(&self, lease: i64) {
        let mut st = self.state.lock().expect("renew groups");
        if let Some(g) = st.groups.remove(&lease) {
            for job in g.members.keys() {
                st.of_job.remove(job);
            }
        }
    }

    /// The group's keep-alive sent at `at` was proven.
    pub(super) fn kept(&self, lease: i64, at: Instant) {
        let mut st = self.state.lock().expect("renew groups");
        if let Some(g) = st.groups.get_mut(&lease) {
            g.kept = g.kept.max(at);
        }
    }

    /// `job`'s holding `h` is (or may be) on the group's etcd lease
    /// `lease`, which lasts at least `ttl` from `kept`.
    pub(super) fn join(&self, lease: i64, ttl: Duration, kept: Instant, job: JobName, h: Holding) {
        let mut st = self.state.lock().expect("renew groups");
        let State { groups, of_job } = &mut *st;
        if let Some(old) = of_job.insert(job.clone(), lease) {
            if old != lease {
                if let Some(g) = groups.get_mut(&old) {
                    g.members.remove(&job);
                    if g.members.is_empty() {
                        groups.remove(&old);
                    }
                }
            }
        }
        // A lease joins only a group kept alive (proven) or granted at
        // `kept`: the group's etcd lease lasts at least `ttl` from then.
        let g = groups.entry(lease).or_insert_with(|| Group {
            ttl,
            kept,
            members: HashMap::new(),
        });
        g.kept = g.kept.max(kept);
        g.members.insert(job, h);
    }

    /// Whether `lease` is one of this stream's groups' etcd leases.
    pub(super) fn owns(&self, lease: i64) -> bool {
        self.state
            .lock()
            .expect("renew groups")
            .groups
            .contains_key(&lease)
    }

    /// How many leases are on this stream's groups' etcd leases, and in
    /// how many groups.
    pub fn sizes(&self) -> (usize, usize) {
        let st = self.state.lock().expect("renew groups");
        (st.of_job.len(), st.groups.len())
    }
}

/// What the frontend's groups did since it started (`/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Keep-alives of a group's etcd lease that renewed its members.
    pub keep_alives: u64,
    /// Leases moved onto a group's etcd lease (joined, or taken over from
    /// another stream's group).
    pub joins: u64,
    /// Leases moved off a group's etcd lease because its stream left them
    /// out of a message.
    pub moves_off: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{HolderRec, Sharing};
    use leasehold_core::lease::{HolderId, Limits, Token};

    fn holding(token: u64, lease: i64) -> Holding {
        let rec = HolderRec {
            token: Token(token),
            ttl: Duration::from_secs(5),
            holder: "me".into(),
            issued: Default::default(),
            value: None,
            sharing: Sharing::default().joined(),
        };
        Holding {
            raw: rec.encode(),
            rec,
            lease,
            version: 2,
        }
    }

    fn renewal(job: &str, token: u64) -> Renewal {
        let l = Limits::default();
        Renewal {
            job: l.job(job).unwrap(),
            holder: HolderId::from_trusted("me".into()),
            token: Token(token),
            ttl: Duration::from_secs(5),
        }
    }

    /// A batch touches the groups it renews a member of, each with the
    /// members it leaves out; a group not kept alive for twice its TTL is
    /// forgotten, with its members.
    #[test]
    fn a_batch_touches_its_groups_and_dead_groups_are_forgotten() {
        let g = RenewGroups::default();
        let ttl = Duration::from_secs(5);
        let now = Instant::now();
        let job = |j: &str| Limits::default().job(j).unwrap();
        g.join(7, ttl, now, job("a"), holding(1, 7));
        g.join(7, ttl, now, job("b"), holding(2, 7));
        g.join(8, ttl, now, job("c"), holding(3, 8));
        assert_eq!(g.sizes(), (3, 2));

        let t = g.touched(&[renewal("a", 1), renewal("x", 9)]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].lease, 7);
        assert_eq!(t[0].present.len(), 1);
        let absent: Vec<&str> = t[0].absent.iter().map(|(j, _)| j.as_str()).collect();
        assert_eq!(absent, ["b"]);
        // Another token is another grant: not the member.
        assert!(g.touched(&[renewal("c", 4)]).is_empty());

        g.leave(&job("b"));
        assert_eq!(g.sizes(), (2, 2));
        {
            let mut st = g.state.lock().unwrap();
            st.forget_dead(now + ttl * 2 - Duration::from_millis(1));
            assert_eq!((st.of_job.len(), st.groups.len()), (2, 2));
            st.forget_dead(now + ttl * 2);
            assert_eq!((st.of_job.len(), st.groups.len()), (0, 0));
        }
    }
}
