//! Shards (`leasehold.v1.Shards`): the N shards of a group spread over its
//! live members, one owner per shard, balanced, moved by handover.
//!
//! A group is built from calls both backends already make, so its rules
//! are written once, here, above them, as counted leases are:
//!
//! - **Shard k is a job of its own, `{group}/{k}`** ([`shard_job`]), with
//!   its own lease, token, history and fenced keys. Its owner holds its
//!   lease under the member's identity, so a stale owner's writes are
//!   fenced by the shard's token exactly as a stale leader's are.
//! - **A member is the live lease of `{group}/member/{member}`**
//!   ([`member_job`]), held for as long as its `Join` stream lives and
//!   renewed by each message the member sends. The lease's value is the
//!   stream's own nonce: a Join under the same member on another stream
//!   replaces it, and the older stream, seeing another nonce, ends and
//!   frees nothing.
//! - **The count is fixed by the group's first member**, under the
//!   group's own job, fenced key [`SHARDS_KEY`], written while holding
//!   that job's lease (briefly, and never told to anyone): another count
//!   is refused naming `shards`, and changes nothing.
//! - **Each stream's agent decides for its own member only**, from one
//!   read of the group's jobs ([`View`]) and the same [`plan`] every agent
//!   computes: each live member gets ⌊N/M⌋ or ⌈N/M⌉ shards, the larger
//!   counts going to the members that own most already, and each keeps
//!   the shards it owns up to its count, so a join or a leave moves as
//!   few shards as it can. A member short of its count takes the shards
//!   the plan gives it: at once when free, else by **waiting in the
//!   shard's line**. An owner gives a shard up only to a member waiting
//!   for it: it sends REVOKED, and on the member's acknowledgement (or at
//!   the revoke's deadline) releases the lease, which grants the first
//!   waiter the next token in the same decision. So a move leaves no
//!   moment without an owner, and a member that never waits (a stale
//!   plan, a member that only looks joined) takes nothing away.
//! - **A stream that ends frees its member's shards at once** (each
//!   release hands the shard to its first waiter), unless the server is
//!   shutting down: a member that joins again under the same identity
//!   takes them back. A member that goes silent renews nothing, and its
//!   shards run out with their TTL.
//!
//! Every agent wakes on each change of the group's jobs (the backends'
//! change feed), at the soonest deadline of a holding that is not its
//! own (an expiry the feed may not show), and at least every [`RESYNC`].

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc};
use tokio::task::AbortHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::backend::{Acquired, Backend, RenewGroups, Renewal};
use crate::error::{Error, Result};
use crate::lease::{HolderId, JobName, LeaseState, Limits, TenureEnd, Token};
use crate::proto;
use crate::proto::join_response::Kind;
use crate::server::auth::{unbind, Action, Caller};
use crate::server::convert::{duration, rename};
use crate::server::counted;
use crate::server::grpc_status::status;
use crate::server::wire;

/// The most shards a group may have (`JoinRequest.shards`).
pub const MAX_SHARDS: u32 = 1024;

/// The fenced key, under a group's own job, that keeps its count of
/// shards (decimal text).
pub const SHARDS_KEY: &[u8] = b"shards";

/// The longest group name: room is left for `/member/` and a member.
pub const MAX_GROUP_BYTES: usize = 200;

/// How often an agent reads its group again when nothing woke it.
pub const RESYNC: Duration = Duration::from_secs(1);

/// How often an owner looks again for the waiter of a shard the plan
/// gives away, until one queues.
const WAITER_POLL: Duration = Duration::from_millis(20);

/// How long a Join stream may take to send its first message.
const FIRST_MESSAGE: Duration = Duration::from_secs(10);

/// How long the first member waits for the group's job to fix the count.
const FIX_WAIT: Duration = Duration::from_secs(10);

/// The job of shard `k` of `group`: `{group}/{k}`.
pub fn shard_job(group: &JobName, k: u32) -> JobName {
    JobName::from_trusted(format!("{group}/{k}"))
}

/// The job whose live lease shows `member` (as its client names it) in
/// `group`: `{group}/member/{member}`.
pub fn member_job(group: &JobName, member: &str) -> JobName {
    JobName::from_trusted(format!("{group}/member/{member}"))
}

fn member_prefix(group: &JobName) -> String {
    format!("{group}/member/")
}

/// A group as one read shows it.
#[derive(Debug, Default)]
pub struct View {
    /// The live members (their holders), in order.
    pub members: Vec<HolderId>,
    /// The member job of each live member, by holder: its token and value.
    member_leases: HashMap<HolderId, (Token, Option<Vec<u8>>)>,
    /// Each shard's newest token and live holder, with its deadline.
    pub shards: Vec<(Token, Option<(HolderId, Instant)>)>,
    /// The member jobs' deadlines (for the soonest expiry).
    member_deadlines: Vec<Instant>,
}

impl View {
    /// Reads `group`'s jobs (its shards `0..n` and its members).
    pub async fn read(node: &Backend, group: &JobName, n: u32) -> Result<View> {
        let prefix = format!("{group}/");
        let members = member_prefix(group);
        let mut view = View {
            shards: vec![(Token::NONE, None); n as usize],
            ..View::default()
        };
        let mut after: Option<String> = None;
        loop {
            let page = node.leases(&prefix, after.as_deref(), 1000).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.job.as_str().to_owned());
            let full = page.len() == 1000;
            for l in page {
                let name = l.job.as_str();
                if let Some(rest) = name.strip_prefix(&members) {
                    if rest.is_empty() {
                        continue;
                    }
                    if let LeaseState::Held {
                        holder,
                        deadline,
                        value,
                        ..
                    } = &l.state
                    {
                        view.members.push(holder.clone());
                        view.member_deadlines.push(*deadline);
                        view.member_leases.insert(
                            holder.clone(),
                            (l.token, value.as_deref().map(<[u8]>::to_vec)),
                        );
                    }
                } else if let Some(k) = shard_of(&name[prefix.len()..], n) {
                    view.shards[k as usize] = (
                        l.token,
                        match &l.state {
                            LeaseState::Held {
                                holder, deadline, ..
                            } => Some((holder.clone(), *deadline)),
                            LeaseState::Free(_) => None,
                        },
                    );
                }
            }
            if !full {
                break;
            }
        }
        view.members.sort();
        view.members.dedup();
        Ok(view)
    }

    /// The owner of shard `k`, if any.
    pub fn owner(&self, k: usize) -> Option<&HolderId> {
        self.shards[k].1.as_ref().map(|(h, _)| h)
    }

    /// The soonest deadline of a holding not `me`'s.
    fn soonest_other(&self, me: &HolderId) -> Option<Instant> {
        self.shards
            .iter()
            .filter_map(|(_, o)| o.as_ref())
            .filter(|(h, _)| h != me)
            .map(|(_, d)| *d)
            .chain(self.member_deadlines.iter().copied())
            .min()
    }
}

/// The shard a name (after `{group}/`) is, if it is one below `n`: a
/// number written as Rust writes it (no sign, no leading zero).
fn shard_of(rest: &str, n: u32) -> Option<u32> {
    let k: u32 = rest.parse().ok()?;
    (k < n && k.to_string() == rest).then_some(k)
}

/// Who should own each of the `n` shards: the index in `members` (in
/// order) of each shard's member in the balanced assignment closest to
/// `owners`, the shards' owners now. Each member gets ⌊n/m⌋ or ⌈n/m⌉;
/// the ⌈⌉ go to those owning most now (then in member order); each keeps
/// its lowest shards up to its count; the rest (free shards first, then
/// those given up) go to the members short of their count, in order.
pub fn plan(n: usize, members: &[HolderId], owners: &[Option<&HolderId>]) -> Vec<Option<usize>> {
    let m = members.len();
    let mut desired = vec![None; n];
    if m == 0 {
        return desired;
    }
    let index = |h: &HolderId| members.binary_search(h).ok();
    let mut counts = vec![0usize; m];
    for o in owners.iter().flatten() {
        if let Some(i) = index(o) {
            counts[i] += 1;
        }
    }
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(counts[i]), i));
    let mut quota = vec![n / m; m];
    for &i in order.iter().take(n % m) {
        quota[i] += 1;
    }
    let mut kept = vec![0usize; m];
    let mut given_up = Vec::new();
    let mut free = Vec::new();
    for (k, o) in owners.iter().enumerate() {
        match o.and_then(index) {
            Some(i) if kept[i] < quota[i] => {
                desired[k] = Some(i);
                kept[i] += 1;
            }
            Some(_) => given_up.push(k),
            None => free.push(k),
        }
    }
    let mut pool = free.into_iter().chain(given_up);
    for i in 0..m {
        for _ in kept[i]..quota[i] {
            if let Some(k) = pool.next() {
                desired[k] = Some(i);
            }
        }
    }
    desired
}

/// Per-group figures for `/metrics`, as this server's agents see them.
#[derive(Debug, Default)]
pub struct ShardStats {
    groups: Mutex<BTreeMap<String, GroupStats>>,
}

/// One group's figures.
#[derive(Debug, Clone, Default)]
pub struct GroupStats {
    /// Shards per live member (as its client names it).
    pub owned: BTreeMap<String, u32>,
    /// Shards moved by a handover (a revoke and its release).
    pub moves: u64,
    /// Shard-seconds without an owner.
    pub unowned_seconds: f64,
    unowned_now: u32,
    seen: Option<Instant>,
    agents: usize,
}

impl ShardStats {
    /// A copy of every group's figures.
    pub fn groups(&self) -> Vec<(String, GroupStats)> {
        let g = self.groups.lock().expect("shard stats lock");
        g.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Records that `member` of `group` owns `owned` shards (for tests of
    /// `/metrics`).
    #[doc(hidden)]
    pub fn record_for_test(&self, group: &str, member: &str, owned: u32) {
        let mut g = self.groups.lock().expect("shard stats lock");
        let s = g.entry(group.to_owned()).or_default();
        s.owned.insert(member.to_owned(), owned);
        s.moves += 1;
    }

    fn with<T>(&self, group: &JobName, f: impl FnOnce(&mut GroupStats) -> T) -> T {
        let mut g = self.groups.lock().expect("shard stats lock");
        f(g.entry(group.as_str().to_owned()).or_default())
    }

    fn saw(&self, group: &JobName, view: &View) {
        self.with(group, |s| {
            let now = Instant::now();
            if let Some(seen) = s.seen {
                s.unowned_seconds += f64::from(s.unowned_now) * (now - seen).as_secs_f64();
            }
            s.seen = Some(now);
            s.unowned_now = view.shards.iter().filter(|(_, o)| o.is_none()).count() as u32;
            s.owned = view
                .members
                .iter()
                .map(|m| {
                    let n = view
                        .shards
                        .iter()
                        .filter(|(_, o)| o.as_ref().map(|(h, _)| h) == Some(m));
                    (unbind(m.as_str()).1.to_owned(), n.count() as u32)
                })
                .collect();
        });
    }
}

/// Serves `leasehold.v1.Shards`.
pub struct ShardsService {
    node: Backend,
    limits: Limits,
    stats: Arc<ShardStats>,
}

impl ShardsService {
    /// The service over `node`, counting into `stats`.
    pub fn new(node: Backend, limits: Limits, stats: Arc<ShardStats>) -> ShardsService {
        ShardsService {
            node,
            limits,
            stats,
        }
    }
}

type JoinStream = Pin<Box<dyn Stream<Item = Result<proto::JoinResponse, Status>> + Send>>;

#[tonic::async_trait]
impl proto::shards_server::Shards for ShardsService {
    type JoinStream = JoinStream;

    async fn join(
        &self,
        req: Request<Streaming<proto::JoinRequest>>,
    ) -> Result<Response<JoinStream>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let mut inbound = req.into_inner();
        // A stream that never says what it joins holds a place in its
        // connection's calls for no one: it is refused after a while.
        let first = match tokio::time::timeout(FIRST_MESSAGE, inbound.message()).await {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => {
                return Err(status(Error::invalid(
                    "group",
                    "is required: the stream ended before its first message",
                )))
            }
            Ok(Err(s)) => return Err(wire::request_error(s)),
            Err(_) => {
                let why = format!("is required: no first message within {FIRST_MESSAGE:?}");
                return Err(status(Error::invalid("group", why)));
            }
        };
        let spec = Spec::parse(&self.limits, &self.node, &caller, &first).map_err(status)?;
        let agent = Agent::join(self.node.clone(), self.stats.clone(), spec)
            .await
            .map_err(status)?;
        let (tx, rx) = mpsc::channel(64);
        let _ = tx
            .send(Ok(proto::JoinResponse {
                kind: Kind::Joined as i32,
                shards: agent.n,
                ..Default::default()
            }))
            .await;
        tokio::spawn(agent.run(inbound, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_group(
        &self,
        req: Request<proto::GetGroupRequest>,
    ) -> Result<Response<proto::ShardGroup>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let group = group_arg(&self.limits, &req.get_ref().group).map_err(status)?;
        caller
            .authorize(Action::Read, group.as_str())
            .map_err(status)?;
        group_view(&self.node, &group)
            .await
            .map(Response::new)
            .map_err(status)
    }
}

/// A group, as GetGroup, `leasehold shards` and the status page show it.
pub async fn group_view(node: &Backend, group: &JobName) -> Result<proto::ShardGroup> {
    let n = count_of(node, group).await?.unwrap_or(0);
    let view = View::read(node, group, n).await?;
    let shown = |h: &HolderId| unbind(h.as_str()).1.to_owned();
    let members = view
        .members
        .iter()
        .map(|m| proto::ShardGroupMember {
            member: shown(m),
            shards: (0..n)
                .filter(|&k| view.owner(k as usize) == Some(m))
                .collect(),
        })
        .collect();
    let owners = (0..n)
        .map(|k| proto::ShardOwner {
            shard: k,
            job: shard_job(group, k).to_string(),
            member: view.owner(k as usize).map(shown).unwrap_or_default(),
            token: view.shards[k as usize].0 .0,
        })
        .collect();
    Ok(proto::ShardGroup {
        group: group.to_string(),
        shards: n,
        members,
        owners,
    })
}

/// The group's count of shards, if fixed ([`SHARDS_KEY`]).
pub async fn count_of(node: &Backend, group: &JobName) -> Result<Option<u32>> {
    counted::count_under(node, group, SHARDS_KEY, "shards").await
}

/// The group whose shard's job `name` is, with the shard and the count,
/// when it is one.
pub async fn shard_of_job(
    node: &Backend,
    limits: &Limits,
    name: &JobName,
) -> Option<(JobName, u32, u32)> {
    let (group, k) = name.as_str().rsplit_once('/')?;
    let group = limits.job(group).ok()?;
    let n = count_of(node, &group).await.ok()??;
    shard_of(k, n).map(|k| (group, k, n))
}

fn group_arg(limits: &Limits, group: &str) -> Result<JobName> {
    let g = limits.job(group).map_err(|e| rename(e, "group"))?;
    if group.len() > MAX_GROUP_BYTES {
        return Err(Error::invalid(
            "group",
            format!(
                "is {} bytes, the limit is {MAX_GROUP_BYTES} bytes (room is left for its \
                 shards' and members' job names)",
                group.len()
            ),
        ));
    }
    Ok(g)
}

/// A validated first `JoinRequest`.
struct Spec {
    group: JobName,
    n: u32,
    holder: HolderId,
    member_job: JobName,
    ttl: Duration,
    revoke_timeout: Duration,
}

impl Spec {
    fn parse(l: &Limits, node: &Backend, caller: &Caller, r: &proto::JoinRequest) -> Result<Spec> {
        let group = group_arg(l, &r.group)?;
        let holder = l.holder(&r.member).map_err(|e| rename(e, "member"))?;
        if r.shards == 0 || r.shards > MAX_SHARDS {
            return Err(Error::invalid(
                "shards",
                format!(
                    "{} is outside the allowed range 1 to {MAX_SHARDS}",
                    r.shards
                ),
            ));
        }
        let ttl = l.ttl(duration("ttl", r.ttl)?)?;
        let ttl = node.check_ttl(ttl)?;
        let revoke_timeout = match duration("revoke_timeout", r.revoke_timeout)? {
            None => ttl,
            Some(d) if d > l.max_ttl => {
                return Err(Error::invalid(
                    "revoke_timeout",
                    format!("{d:?} is above the limit of {:?} (--max-ttl)", l.max_ttl),
                ))
            }
            Some(d) => d,
        };
        if !r.released.is_empty() {
            return Err(Error::invalid(
                "released",
                "must be empty in the first message: nothing is owned yet",
            ));
        }
        let member_job = member_job(&group, &r.member);
        if member_job.as_str().len() > l.max_name_bytes {
            return Err(Error::invalid(
                "member",
                format!(
                    "the member's job {:?} is {} bytes, over the limit of {} bytes: a member's \
                     name and its group's must fit in one job name",
                    member_job.as_str(),
                    member_job.as_str().len(),
                    l.max_name_bytes
                ),
            ));
        }
        caller.authorize(Action::Lease, member_job.as_str())?;
        for k in 0..r.shards {
            caller.authorize(Action::Lease, shard_job(&group, k).as_str())?;
        }
        caller.authorize(Action::Lease, group.as_str())?;
        Ok(Spec {
            group,
            n: r.shards,
            holder: caller.bind(holder),
            member_job,
            ttl,
            revoke_timeout,
        })
    }
}

/// Why an agent stopped deciding.
enum Stop {
    /// Another stream joined under the same member.
    Replaced,
    /// The backend refused, for good (a member job held by another).
    Failed(Error),
}

/// One Join stream's side: decides for its member only.
struct Agent {
    node: Backend,
    stats: Arc<ShardStats>,
    group: JobName,
    n: u32,
    holder: HolderId,
    member_job: JobName,
    ttl: Duration,
    revoke_timeout: Duration,
    /// This stream's value on the member's job.
    nonce: Arc<[u8]>,
    /// The member job's token while this member is live.
    member_token: Option<Token>,
    jobs: Vec<JobName>,
    /// The shards told ASSIGNED, with their tokens.
    owned: BTreeMap<u32, Token>,
    /// The shards told REVOKED, with the deadline of the acknowledgement.
    revoking: BTreeMap<u32, Instant>,
    /// The shards this member waits for in their lines.
    waits: HashMap<u32, AbortHandle>,
    /// When the member last sent a message (renewing its holdings).
    heard: Instant,
    /// When to look again for a waiter of a shard given away.
    poll_at: Option<Instant>,
    /// What its shards' renewals share from one to the next (in etcd
    /// mode, etcd leases).
    renew_groups: RenewGroups,
}

type Out = mpsc::Sender<Result<proto::JoinResponse, Status>>;

impl Agent {
    /// Checks or fixes the group's count, then makes the member live.
    async fn join(node: Backend, stats: Arc<ShardStats>, spec: Spec) -> Result<Agent> {
        fix_count(&node, &spec.group, spec.n).await?;
        let nonce: Arc<[u8]> = Arc::from(nonce().as_slice());
        let a = node
            .acquire_as(
                &spec.member_job,
                &spec.holder,
                spec.ttl,
                Duration::ZERO,
                None,
                false,
                Some(nonce.clone()),
            )
            .await?;
        if !a.acquired {
            return Err(Error::invalid(
                "member",
                format!(
                    "the member's job {:?} is held by another holder: choose another member name",
                    spec.member_job.as_str()
                ),
            ));
        }
        // A member that joins again replaces its older stream: the value
        // is renewed to this stream's nonce.
        let token = a.lease.token;
        if !a.fresh {
            node.renew_with_value(
                &spec.member_job,
                &spec.holder,
                token,
                spec.ttl,
                Some(Some(nonce.clone())),
            )
            .await?;
        }
        stats.with(&spec.group, |s| s.agents += 1);
        let jobs = (0..spec.n).map(|k| shard_job(&spec.group, k)).collect();
        Ok(Agent {
            renew_groups: node.renew_groups(),
            node,
            stats,
            n: spec.n,
            group: spec.group,
            holder: spec.holder,
            member_job: spec.member_job,
            ttl: spec.ttl,
            revoke_timeout: spec.revoke_timeout,
            nonce,
            member_token: Some(token),
            jobs,
            owned: BTreeMap::new(),
            revoking: BTreeMap::new(),
            waits: HashMap::new(),
            heard: Instant::now(),
            poll_at: None,
        })
    }

    async fn run(mut self, mut inbound: Streaming<proto::JoinRequest>, tx: Out) {
        let mut changes = self.node.changes();
        let (granted_tx, mut granted_rx) = mpsc::channel::<(u32, Result<Acquired>)>(64);
        let prefix = format!("{}/", self.group);
        let mut dirty = true;
        let mut wake = Instant::now();
        let ending = loop {
            if dirty {
                dirty = false;
                match self.reconcile(&tx, &granted_tx).await {
                    Ok(w) => wake = w,
                    Err(Stop::Replaced) => break Some(replaced(&self.member_job)),
                    Err(Stop::Failed(e)) => break Some(status(e)),
                }
            }
            let next = self
                .revoking
                .values()
                .copied()
                .chain(self.poll_at)
                .fold(wake, Instant::min);
            tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(m)) => {
                        self.heard = Instant::now();
                        if let Err(e) = self.acknowledged(&tx, &m.released).await {
                            break Some(status(e));
                        }
                        self.renew(&tx).await;
                        dirty = true;
                    }
                    Ok(None) => {
                        self.leave(TenureEnd::Released).await;
                        break None;
                    }
                    Err(s) => {
                        self.leave(TenureEnd::ConnectionClosed).await;
                        break Some(wire::request_error(s));
                    }
                },
                r = changes.recv() => {
                    let mut r = r;
                    // A burst of changes (a member's shards released at
                    // once) is one read of the group, not one per change.
                    loop {
                        match r {
                            Ok(job) => dirty |= job.as_str().starts_with(&prefix),
                            Err(broadcast::error::RecvError::Lagged(_)) => dirty = true,
                            Err(broadcast::error::RecvError::Closed) => {
                                changes = self.node.changes();
                                break;
                            }
                        }
                        match changes.try_recv() {
                            Ok(job) => r = Ok(job),
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                r = Err(broadcast::error::RecvError::Lagged(n))
                            }
                            Err(_) => break,
                        }
                    }
                }
                Some((k, r)) = granted_rx.recv() => {
                    self.waits.remove(&k);
                    if let Ok(a) = r {
                        if a.acquired {
                            self.assigned(&tx, k, a.lease.token).await;
                        }
                    }
                    dirty = true;
                }
                _ = tokio::time::sleep_until(next.into()) => {
                    if let Err(e) = self.deadlines(&tx).await {
                        break Some(status(e));
                    }
                    dirty = true;
                }
                _ = tx.closed() => {
                    self.leave(TenureEnd::ConnectionClosed).await;
                    break None;
                }
                _ = self.node.closing() => break Some(status(Error::ShuttingDown)),
            }
        };
        for (_, w) in self.waits.drain() {
            w.abort();
        }
        // A group no stream of this server is a member of any more is
        // forgotten, so that groups come and go without a trace.
        {
            let mut g = self.stats.groups.lock().expect("shard stats lock");
            if let Some(s) = g.get_mut(self.group.as_str()) {
                s.agents = s.agents.saturating_sub(1);
                if s.agents == 0 {
                    g.remove(self.group.as_str());
                }
            }
        }
        if let Some(s) = ending {
            let _ = tx.send(Err(s)).await;
        }
    }

    /// Reads the group and acts on the plan for this member; returns when
    /// to look again at the latest.
    async fn reconcile(
        &mut self,
        tx: &Out,
        granted: &mpsc::Sender<(u32, Result<Acquired>)>,
    ) -> std::result::Result<Instant, Stop> {
        let now = Instant::now();
        let retry = now + WAITER_POLL.max(Duration::from_millis(100));
        let view = match View::read(&self.node, &self.group, self.n).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(group = %self.group, error = %e, "shards: reading the group failed; trying again");
                return Ok(retry);
            }
        };
        let silent = now.saturating_duration_since(self.heard) > self.ttl * 2 / 3;
        // This member, as the group's read shows it.
        let mut view = view;
        match view.member_leases.get(&self.holder) {
            Some((token, value)) => {
                if value.as_deref() != Some(&self.nonce[..]) {
                    return Err(Stop::Replaced);
                }
                self.member_token = Some(*token);
            }
            None if silent => self.member_token = None,
            None => {
                // Its lease ran out (the member was silent): live again.
                match self
                    .node
                    .acquire_as(
                        &self.member_job,
                        &self.holder,
                        self.ttl,
                        Duration::ZERO,
                        None,
                        false,
                        Some(self.nonce.clone()),
                    )
                    .await
                {
                    Ok(a) if a.acquired => {
                        self.member_token = Some(a.lease.token);
                        if let Err(i) = view.members.binary_search(&self.holder) {
                            view.members.insert(i, self.holder.clone());
                        }
                    }
                    Ok(_) => {
                        return Err(Stop::Failed(Error::invalid(
                            "member",
                            format!(
                                "the member's job {:?} is held by another holder",
                                self.member_job.as_str()
                            ),
                        )))
                    }
                    Err(_) => return Ok(retry),
                }
            }
        }
        self.stats.saw(&self.group, &view);
        // Holdings this member no longer has.
        let lost: Vec<u32> = self
            .owned
            .iter()
            .filter(|(k, t)| {
                let (token, owner) = &view.shards[**k as usize];
                owner.as_ref().map(|(h, _)| h) != Some(&self.holder) || token != *t
            })
            .map(|(k, _)| *k)
            .collect();
        for k in lost {
            self.lost(tx, k).await;
        }
        // Holdings this member has and was not told of (granted to a wait
        // that was dropped, or held before this stream).
        for k in 0..self.n {
            let (token, owner) = &view.shards[k as usize];
            if owner.as_ref().map(|(h, _)| h) == Some(&self.holder) && !self.owned.contains_key(&k)
            {
                self.assigned(tx, k, *token).await;
            }
        }
        let owners: Vec<Option<&HolderId>> = (0..self.n as usize).map(|k| view.owner(k)).collect();
        let desired = plan(self.n as usize, &view.members, &owners);
        let me = view.members.binary_search(&self.holder).ok();
        let live = me.is_some() && !silent;
        self.poll_at = None;
        let mut short = false;
        let (mut give, mut free) = (Vec::new(), Vec::new());
        for k in 0..self.n {
            let mine = live && desired[k as usize] == me;
            let owner = view.owner(k as usize);
            // A wait is dropped only when the plan no longer gives this
            // member its shard: a wait dropped as it is granted gives the
            // grant back (a new token for nothing).
            if !mine {
                if let Some(w) = self.waits.remove(&k) {
                    w.abort();
                }
            }
            if owner == Some(&self.holder) {
                // A silent member is not revoked: it could not answer, and
                // its holdings run out with their TTL.
                if !mine && !silent && !self.revoking.contains_key(&k) {
                    give.push(k);
                }
                continue;
            }
            if !mine || self.waits.contains_key(&k) {
                continue;
            }
            if owner.is_none() {
                free.push(k);
            } else {
                self.wait_for(k, granted);
            }
        }
        // The backend's calls for many shards at once, not one after
        // another (on etcd each is a round trip or more).
        if !give.is_empty() {
            let waiting = self
                .each(&give, |node, job, _, _| async move {
                    node.waiters(&job, 1).await.map(|(_, n)| n > 0)
                })
                .await;
            for (k, w) in give.into_iter().zip(waiting) {
                self.give_up(tx, k, matches!(w, Ok(true))).await;
            }
        }
        if !free.is_empty() {
            let ttl = self.ttl;
            let taken = self
                .each(&free, move |node, job, holder, _| async move {
                    node.acquire_as(&job, &holder, ttl, Duration::ZERO, None, false, None)
                        .await
                })
                .await;
            for (k, a) in free.into_iter().zip(taken) {
                match a {
                    Ok(a) if a.acquired => self.assigned(tx, k, a.lease.token).await,
                    _ => short = true,
                }
            }
        }
        let mut next = now + RESYNC;
        if short {
            next = next.min(retry);
        }
        if let Some(d) = view.soonest_other(&self.holder) {
            next = next.min(d.max(now) + Duration::from_millis(5));
        }
        if !silent {
            next = next.min(self.heard + self.ttl * 2 / 3 + Duration::from_millis(1));
        }
        Ok(next)
    }

    /// Waits in shard `k`'s line (until the plan says otherwise).
    fn wait_for(&mut self, k: u32, granted: &mpsc::Sender<(u32, Result<Acquired>)>) {
        let (node, job, holder, ttl) = (
            self.node.clone(),
            self.jobs[k as usize].clone(),
            self.holder.clone(),
            self.ttl,
        );
        let granted = granted.clone();
        let task = tokio::spawn(async move {
            let r = node
                .acquire_as(&job, &holder, ttl, RESYNC * 600, None, false, None)
                .await;
            let _ = granted.send((k, r)).await;
        });
        self.waits.insert(k, task.abort_handle());
    }

    /// The plan gives shard `k` to another member: revoked once a member
    /// waits for it (`waiting`: a handover, never a gap).
    async fn give_up(&mut self, tx: &Out, k: u32, waiting: bool) {
        if !waiting {
            let at = Instant::now() + WAITER_POLL;
            self.poll_at = Some(self.poll_at.map_or(at, |p| p.min(at)));
            return;
        }
        let deadline = Instant::now() + self.revoke_timeout;
        self.revoking.insert(k, deadline);
        let token = self.owned.get(&k).copied().unwrap_or(Token::NONE);
        let _ = tx
            .send(Ok(proto::JoinResponse {
                kind: Kind::Revoked as i32,
                shard: k,
                token: token.0,
                job: self.jobs[k as usize].to_string(),
                deadline: Some(proto_duration(self.revoke_timeout)),
                ..Default::default()
            }))
            .await;
    }

    /// `f(node, job, holder, shard)` for each of `shards`, all at once;
    /// the results in their order.
    async fn each<T, F, Fut>(&self, shards: &[u32], f: F) -> Vec<Result<T>>
    where
        T: Send + 'static,
        F: Fn(Backend, JobName, HolderId, u32) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        let mut set = tokio::task::JoinSet::new();
        for (i, &k) in shards.iter().enumerate() {
            let fut = f(
                self.node.clone(),
                self.jobs[k as usize].clone(),
                self.holder.clone(),
                k,
            );
            set.spawn(async move { (i, fut.await) });
        }
        let mut out: Vec<Option<Result<T>>> = (0..shards.len()).map(|_| None).collect();
        while let Some(r) = set.join_next().await {
            if let Ok((i, r)) = r {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Storage("a shard's call panicked".into()))))
            .collect()
    }

    /// The member let go of `released` (acknowledging their revokes).
    async fn acknowledged(&mut self, tx: &Out, released: &[u32]) -> Result<()> {
        if let Some(k) = released.iter().find(|&&k| k >= self.n) {
            return Err(Error::invalid(
                "released",
                format!(
                    "shard {k} is outside the group's shards 0 to {}",
                    self.n - 1
                ),
            ));
        }
        let done: Vec<u32> = released
            .iter()
            .copied()
            .filter(|k| self.revoking.remove(k).is_some())
            .collect();
        self.hand_over(tx, &done, false).await;
        Ok(())
    }

    /// Revokes whose deadline passed: their shards move anyway.
    async fn deadlines(&mut self, tx: &Out) -> Result<()> {
        let now = Instant::now();
        let due: Vec<u32> = self
            .revoking
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in &due {
            self.revoking.remove(k);
        }
        self.hand_over(tx, &due, true).await;
        Ok(())
    }

    /// Releases each of `shards`, which grants its first waiter the next
    /// token in the same decision. `late`: the member never acknowledged,
    /// and is told LOST.
    async fn hand_over(&mut self, tx: &Out, shards: &[u32], late: bool) {
        let held: Vec<(u32, Token)> = shards
            .iter()
            .filter_map(|k| self.owned.remove(k).map(|t| (*k, t)))
            .collect();
        if held.is_empty() {
            return;
        }
        self.end_all(&held, TenureEnd::Released).await;
        self.stats
            .with(&self.group, |s| s.moves += held.len() as u64);
        if late {
            for (k, t) in held {
                self.send(tx, Kind::Lost, k, t).await;
            }
        }
    }

    /// Ends the holdings `held` (shard, token), all at once.
    async fn end_all(&self, held: &[(u32, Token)], how: TenureEnd) {
        let shards: Vec<u32> = held.iter().map(|(k, _)| *k).collect();
        let tokens: HashMap<u32, Token> = held.iter().copied().collect();
        let _ = self
            .each(&shards, |node, job, holder, k| {
                let t = tokens[&k];
                async move { node.end_lease(&job, &holder, t, how).await }
            })
            .await;
    }

    /// Renews the member's holdings (each message the member sends).
    async fn renew(&mut self, tx: &Out) {
        if let Some(t) = self.member_token {
            if self
                .node
                .renew(&self.member_job, &self.holder, t, self.ttl)
                .await
                .is_err()
            {
                self.member_token = None;
            }
        }
        // One batch for all of them, as a KeepAlive message renews many
        // leases (on etcd: their jobs read together, one proof for all),
        // so that a member of many shards renews in one round trip.
        let owned: Vec<(u32, Token)> = self.owned.iter().map(|(k, t)| (*k, *t)).collect();
        let batch: Vec<Renewal> = owned
            .iter()
            .map(|(k, t)| Renewal {
                job: self.jobs[*k as usize].clone(),
                holder: self.holder.clone(),
                token: *t,
                ttl: self.ttl,
            })
            .collect();
        match self.node.renew_many_in(&batch, &self.renew_groups).await {
            Ok(outcomes) => {
                for ((k, _), o) in owned.into_iter().zip(outcomes) {
                    match o {
                        Ok(_) => {}
                        Err((Error::LeaseLost { .. }, _)) => self.lost(tx, k).await,
                        Err((e, _)) => {
                            tracing::warn!(job = %self.jobs[k as usize], error = %e, "shards: a renewal failed")
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(group = %self.group, error = %e, "shards: renewing failed"),
        }
    }

    async fn assigned(&mut self, tx: &Out, k: u32, token: Token) {
        if self.owned.insert(k, token) != Some(token) {
            self.send(tx, Kind::Assigned, k, token).await;
        }
    }

    async fn lost(&mut self, tx: &Out, k: u32) {
        self.revoking.remove(&k);
        if let Some(t) = self.owned.remove(&k) {
            self.send(tx, Kind::Lost, k, t).await;
        }
    }

    async fn send(&self, tx: &Out, kind: Kind, k: u32, token: Token) {
        let _ = tx
            .send(Ok(proto::JoinResponse {
                kind: kind as i32,
                shard: k,
                token: token.0,
                job: self.jobs[k as usize].to_string(),
                ..Default::default()
            }))
            .await;
    }

    /// The stream ended: the member's holdings end at once (each shard
    /// going to its first waiter), unless the server is shutting down or
    /// another stream took the member over.
    async fn leave(&mut self, how: TenureEnd) {
        for (_, w) in self.waits.drain() {
            w.abort();
        }
        if closing(&self.node).await {
            return;
        }
        if let Ok(v) = self.node.lease(&self.member_job).await {
            if v.value() != Some(&self.nonce[..]) {
                return;
            }
        }
        let held: Vec<(u32, Token)> = std::mem::take(&mut self.owned).into_iter().collect();
        self.end_all(&held, how).await;
        if let Some(t) = self.member_token {
            let _ = self
                .node
                .end_lease(&self.member_job, &self.holder, t, how)
                .await;
        }
        self.stats.with(&self.group, |s| {
            s.owned.remove(unbind(self.holder.as_str()).1);
        });
    }
}

/// Whether the backend is closing (a shutdown began).
async fn closing(node: &Backend) -> bool {
    tokio::select! {
        biased;
        _ = node.closing() => true,
        _ = std::future::ready(()) => false,
    }
}

/// 16 random bytes: a stream's nonce.
fn nonce() -> [u8; 16] {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .expect("the system's random source works");
    b
}

fn replaced(member_job: &JobName) -> Status {
    status(Error::LeaseLost {
        job: member_job.to_string(),
        current_holder: None,
        current: Token::NONE,
    })
}

fn proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// Checks the group's count against `n`, fixing it to `n` when the group
/// has none (holding the group's own job for the write).
async fn fix_count(node: &Backend, group: &JobName, n: u32) -> Result<()> {
    if let Some(c) = count_of(node, group).await? {
        return check(group, c, n);
    }
    let hex: String = nonce().iter().map(|b| format!("{b:02x}")).collect();
    let holder = HolderId::from_trusted(format!("leasehold-shards@{hex}"));
    let a = node
        .acquire(group, &holder, Duration::from_secs(10), FIX_WAIT)
        .await?;
    if !a.acquired {
        return Err(Error::invalid(
            "group",
            format!(
                "the group's own job {:?} is held by another holder, so its count of shards \
                 cannot be fixed: a group's name must not be a job in use",
                group.as_str()
            ),
        ));
    }
    let token = a.lease.token;
    let r = async {
        match count_of(node, group).await? {
            Some(c) => check(group, c, n),
            None => node
                .checked_write(
                    group,
                    token,
                    SHARDS_KEY,
                    Some(n.to_string().into_bytes()),
                    None,
                )
                .await
                .map(|_| ()),
        }
    }
    .await;
    let _ = node.release(group, &holder, token).await;
    r
}

fn check(group: &JobName, fixed: u32, asked: u32) -> Result<()> {
    if fixed == asked {
        return Ok(());
    }
    Err(Error::invalid(
        "shards",
        format!(
            "group {:?} has {fixed} shards, fixed by its first member; this Join asked for \
             {asked} (DeleteJob of the group's job, once no member is left, forgets its count)",
            group.as_str()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> HolderId {
        HolderId::from_trusted(s.to_owned())
    }

    fn counts(d: &[Option<usize>], m: usize) -> Vec<usize> {
        let mut c = vec![0; m];
        for i in d.iter().flatten() {
            c[*i] += 1;
        }
        c
    }

    #[test]
    fn every_member_gets_its_share_and_a_join_moves_as_few_as_it_can() {
        let members = vec![h("a"), h("b"), h("c")];
        // Nobody owns anything: 64 over 3 is 22, 21, 21.
        let none = vec![None; 64];
        let d = plan(64, &members, &none);
        assert_eq!(counts(&d, 3), vec![22, 21, 21]);
        assert!(d.iter().all(Option::is_some));
        // A fourth member joins a balanced group: only 16 shards move.
        let owners: Vec<Option<&HolderId>> = d.iter().map(|i| i.map(|i| &members[i])).collect();
        let four = vec![h("a"), h("b"), h("c"), h("d")];
        let d4 = plan(64, &four, &owners);
        assert_eq!(counts(&d4, 4), vec![16, 16, 16, 16]);
        let moved = (0..64)
            .filter(|&k| owners[k] != d4[k].map(|i| &four[i]))
            .count();
        assert_eq!(moved, 16);
        // A member leaves: only its shards move.
        let owners4: Vec<Option<&HolderId>> = d4.iter().map(|i| i.map(|i| &four[i])).collect();
        let left: Vec<Option<&HolderId>> = owners4
            .iter()
            .map(|o| o.filter(|h| h.as_str() != "b"))
            .collect();
        let three = vec![h("a"), h("c"), h("d")];
        let d3 = plan(64, &three, &left);
        let c3 = counts(&d3, 3);
        assert!(c3.iter().all(|&c| c == 21 || c == 22), "{c3:?}");
        let moved = (0..64)
            .filter(|&k| left[k].is_some() && left[k] != d3[k].map(|i| &three[i]))
            .count();
        assert_eq!(moved, 0, "a leave moves only the leaver's shards");
    }

    #[test]
    fn the_larger_counts_go_to_those_that_own_most() {
        let members = vec![h("a"), h("b")];
        // b owns 3 of 5, a owns 2: b keeps its 3 (the ceiling), nothing moves.
        let (a, b) = (&members[0], &members[1]);
        let owners = vec![Some(b), Some(a), Some(b), Some(a), Some(b)];
        let d = plan(5, &members, &owners);
        assert_eq!(d, vec![Some(1), Some(0), Some(1), Some(0), Some(1)]);
        // Shards of a non-member go to members, free ones first.
        let x = h("x");
        let owners = vec![Some(&x), None, Some(a), None];
        let d = plan(4, &members, &owners);
        assert_eq!(counts(&d, 2), vec![2, 2]);
        assert_eq!(d[2], Some(0));
    }

    #[test]
    fn shard_names_are_exact_numbers_below_the_count() {
        assert_eq!(shard_of("0", 4), Some(0));
        assert_eq!(shard_of("3", 4), Some(3));
        assert_eq!(shard_of("4", 4), None);
        assert_eq!(shard_of("03", 4), None);
        assert_eq!(shard_of("+1", 4), None);
        assert_eq!(shard_of("member", 4), None);
    }
}
