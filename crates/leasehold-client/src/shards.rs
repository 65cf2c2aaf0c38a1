//! [`ShardMember`]: a member of a shard group (`Shards.Join`).
//!
//! The server spreads the group's N shards over its live members and
//! streams this member's part: [`ShardEvent::Assigned`] with each shard's
//! fencing token, [`ShardEvent::Revoked`] when a shard is to move (stop
//! its work, then [`ShardMember::release`] it), [`ShardEvent::Lost`] when
//! a holding ended without a revoke. [`ShardMember::run`] does the
//! bookkeeping: it runs a task per owned shard and, on a revoke, cancels
//! the task and waits for it to end **before** acknowledging.
//!
//! The member renews its holdings every TTL/3 from a task of its own. If
//! the stream breaks (the server restarts, the connection is cut), every
//! shard is reported [`ShardEvent::Lost`] at once, so that no work runs
//! unowned, and the member joins again under the same identity: the
//! shards still its own are assigned again, with their tokens.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use crate::{elector_holder, proto, to_proto_duration, Client, ClientError};
use proto::join_response::Kind;

/// One shard of a group, as its member owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The shard, 0 to N-1.
    pub shard: u32,
    /// Its job, `{group}/{shard}`: write under it with [`Shard::token`].
    pub job: String,
    /// Its fencing token while this member owns it.
    pub token: u64,
}

/// What the server tells a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardEvent {
    /// The member owns the shard, with its token.
    Assigned(Shard),
    /// The shard is to move: stop its work, then [`ShardMember::release`]
    /// it within the revoke's deadline. Until then it is still owned.
    Revoked(Shard),
    /// The member no longer owns the shard (it ran out, a revoke's
    /// deadline passed, or the stream broke): stop its work.
    Lost(Shard),
}

/// How a member joins.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    /// The TTL of its holdings; renewed every TTL/3. Default 10 s.
    pub ttl: Duration,
    /// How long it has to acknowledge a revoke; default the TTL.
    pub revoke_timeout: Option<Duration>,
}

impl Default for ShardOptions {
    fn default() -> ShardOptions {
        ShardOptions {
            ttl: Duration::from_secs(10),
            revoke_timeout: None,
        }
    }
}

/// A member of a shard group (see the module docs).
pub struct ShardMember {
    member: String,
    shards: u32,
    events: mpsc::Receiver<Result<ShardEvent, ClientError>>,
    acks: mpsc::UnboundedSender<u32>,
    task: tokio::task::JoinHandle<()>,
}

impl ShardMember {
    /// Joins `group` (of `shards` shards) as a new member named `name`
    /// (its identity is `name@uuid`, made here). Fails as the server
    /// refuses: INVALID_ARGUMENT naming `shards` when the group has
    /// another count, or the field at fault.
    pub async fn join(
        client: &Client,
        group: &str,
        name: &str,
        shards: u32,
        options: ShardOptions,
    ) -> Result<ShardMember, ClientError> {
        let member = elector_holder(name);
        let first = proto::JoinRequest {
            group: group.into(),
            member: member.clone(),
            shards,
            ttl: Some(to_proto_duration(options.ttl)),
            revoke_timeout: options.revoke_timeout.map(to_proto_duration),
            released: Vec::new(),
        };
        let (acks, acks_rx) = mpsc::unbounded_channel();
        let (tx, events) = mpsc::channel(256);
        let stream = open(client, first.clone()).await;
        let (out, inbound) = match stream {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        let session = Session {
            client: client.clone(),
            first,
            ttl: options.ttl,
            owned: BTreeMap::new(),
            tx,
        };
        let task = tokio::spawn(session.run(out, inbound, acks_rx));
        Ok(ShardMember {
            member,
            shards,
            events,
            acks,
            task,
        })
    }

    /// This member's identity (`name@uuid`): the holder of its shards.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// The group's count of shards.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The next event; an error ends the membership (the server refused
    /// it: another stream joined as this member, or a policy took its
    /// grant). `None` once it left.
    pub async fn next(&mut self) -> Option<Result<ShardEvent, ClientError>> {
        self.events.recv().await
    }

    /// Acknowledges a revoke: the shard's work has stopped, and it may
    /// move.
    pub fn release(&self, shard: u32) {
        let _ = self.acks.send(shard);
    }

    /// Leaves the group: every shard goes to the members waiting for it at
    /// once. (Dropping the member does the same.)
    pub async fn leave(self) {
        let ShardMember { acks, task, .. } = self;
        drop(acks);
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }

    /// Runs `work` for each shard while this member owns it, until the
    /// membership ends (an error) or `stop` resolves (then it leaves). On a
    /// revoke or a loss, the shard's task is cancelled and awaited before
    /// the revoke is acknowledged, so no shard's work runs on once it has
    /// moved.
    pub async fn run<F, Fut>(
        mut self,
        mut work: F,
        stop: impl Future<Output = ()>,
    ) -> Result<(), ClientError>
    where
        F: FnMut(Shard) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut tasks: BTreeMap<u32, tokio::task::JoinHandle<()>> = BTreeMap::new();
        tokio::pin!(stop);
        let r = loop {
            tokio::select! {
                e = self.next() => match e {
                    Some(Ok(ShardEvent::Assigned(s))) => {
                        if let Some(t) = tasks.remove(&s.shard) {
                            t.abort();
                            let _ = t.await;
                        }
                        let k = s.shard;
                        tasks.insert(k, tokio::spawn(work(s)));
                    }
                    Some(Ok(ShardEvent::Revoked(s))) => {
                        if let Some(t) = tasks.remove(&s.shard) {
                            t.abort();
                            let _ = t.await;
                        }
                        self.release(s.shard);
                    }
                    Some(Ok(ShardEvent::Lost(s))) => {
                        if let Some(t) = tasks.remove(&s.shard) {
                            t.abort();
                            let _ = t.await;
                        }
                    }
                    Some(Err(e)) => break Err(e),
                    None => break Ok(()),
                },
                _ = &mut stop => break Ok(()),
            }
        };
        for (_, t) in tasks {
            t.abort();
            let _ = t.await;
        }
        self.leave().await;
        r
    }
}

type Inbound = tonic::Streaming<proto::JoinResponse>;
type Outbound = mpsc::Sender<proto::JoinRequest>;

/// Opens a Join stream: sends `first`, then whatever goes into the
/// returned sender.
async fn open(
    client: &Client,
    first: proto::JoinRequest,
) -> Result<(Outbound, Inbound), ClientError> {
    let (out, rx) = mpsc::channel::<proto::JoinRequest>(16);
    out.send(first)
        .await
        .map_err(|_| ClientError::Unavailable("the member's stream closed".into()))?;
    let mut shards = client.shards.clone();
    let mut inbound = shards
        .join(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    // The first answer is JOINED (or the refusal).
    match inbound.next().await {
        Some(Ok(m)) if m.kind == Kind::Joined as i32 => Ok((out, inbound)),
        Some(Ok(_)) => Err(ClientError::Unavailable(
            "the server answered a Join with something other than JOINED".into(),
        )),
        Some(Err(s)) => Err(s.into()),
        None => Err(ClientError::Unavailable(
            "the server ended the Join stream".into(),
        )),
    }
}

/// The task behind a [`ShardMember`].
struct Session {
    client: Client,
    first: proto::JoinRequest,
    ttl: Duration,
    owned: BTreeMap<u32, Shard>,
    tx: mpsc::Sender<Result<ShardEvent, ClientError>>,
}

impl Session {
    async fn run(
        mut self,
        mut out: Outbound,
        mut inbound: Inbound,
        mut acks: mpsc::UnboundedReceiver<u32>,
    ) {
        let every = self.ttl / 3;
        loop {
            let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            let broke = loop {
                tokio::select! {
                    m = inbound.next() => match m {
                        Some(Ok(m)) => self.told(m).await,
                        Some(Err(s)) => break Some(ClientError::from(s)),
                        None => break Some(ClientError::Unavailable("the server ended the Join stream".into())),
                    },
                    a = acks.recv() => match a {
                        Some(k) => {
                            let mut released = vec![k];
                            while let Ok(k) = acks.try_recv() {
                                released.push(k);
                            }
                            for k in &released {
                                self.owned.remove(k);
                            }
                            let msg = proto::JoinRequest { released, ..Default::default() };
                            if out.send(msg).await.is_err() {
                                break Some(ClientError::Unavailable("the Join stream closed".into()));
                            }
                        }
                        // The member left: closing our side frees its shards.
                        None => {
                            drop(out);
                            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                                while let Some(Ok(_)) = inbound.next().await {}
                            }).await;
                            return;
                        }
                    },
                    _ = beat.tick() => {
                        if out.send(proto::JoinRequest::default()).await.is_err() {
                            break Some(ClientError::Unavailable("the Join stream closed".into()));
                        }
                    }
                }
            };
            // Stop every shard's work: it may have moved while the stream
            // was down.
            for (_, s) in std::mem::take(&mut self.owned) {
                let _ = self.tx.send(Ok(ShardEvent::Lost(s))).await;
            }
            let e = broke.expect("the loop breaks with an error");
            if !e.is_retryable() {
                let _ = self.tx.send(Err(e)).await;
                return;
            }
            // Join again under the same identity, until the member leaves.
            let mut backoff = Duration::from_millis(100);
            loop {
                if self.tx.is_closed() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                match open(&self.client, self.first.clone()).await {
                    Ok((o, i)) => {
                        out = o;
                        inbound = i;
                        break;
                    }
                    Err(e) if e.is_retryable() => continue,
                    Err(e) => {
                        let _ = self.tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        }
    }

    async fn told(&mut self, m: proto::JoinResponse) {
        let shard = Shard {
            shard: m.shard,
            job: m.job,
            token: m.token,
        };
        let event = match Kind::try_from(m.kind) {
            Ok(Kind::Assigned) => {
                if self.owned.get(&shard.shard) == Some(&shard) {
                    return;
                }
                self.owned.insert(shard.shard, shard.clone());
                ShardEvent::Assigned(shard)
            }
            Ok(Kind::Revoked) => ShardEvent::Revoked(shard),
            Ok(Kind::Lost) => {
                if self.owned.remove(&shard.shard).is_none() {
                    return;
                }
                ShardEvent::Lost(shard)
            }
            _ => return,
        };
        let _ = self.tx.send(Ok(event)).await;
    }
}
