//! The `FencedStore` service: decode, call the node, encode.
//!
//! **Writes are paced per connection**: the bytes (keys and values) of one
//! connection's `CheckedWrite`s and `WriteStream` messages go at
//! `--max-write-rate-per-connection` a second, a second's worth at once
//! ([`Pacing::write`], charged as each write arrives; the handler sleeps
//! before the write is decided). A write over the rate is slowed, never
//! refused, and counts in `leasehold_writes_paced_total`. Without it, one
//! connection's flood of 64 KiB writes took every core and the leader's
//! renewals on another connection waited for one (BENCHMARKS.md,
//! "Isolation"). The handler reads no connection and carries no rate: the
//! pacing layer ([`super::pacing`]) hands it the call's [`Pacing`], as it
//! does to [`super::leases`] for Acquires, and the caller comes from the
//! auth layer, as everywhere.
//!
//! **With a policy, every write asks the store who holds the grant of its
//! token**: a `CheckedWrite`, and each write of a `WriteStream` message,
//! hands the backend a holder guard (`Caller::held_by_another`), asked of
//! the live grant's holder on the very state that write is decided on
//! (under the single node's state lock; on etcd, on the read its
//! transaction is compared against). A write carrying the token of
//! another principal's live grant is refused there with PERMISSION_DENIED,
//! whatever happened before the decision: a check made before it would
//! pass a write carrying the job's *next* token, which the other principal
//! may be granted between the check and the write (an etcd message's
//! writes are made one after the other, so such a window lasted up to
//! 1,000 round trips). The stream answers such a refusal as the unary call
//! does, with the same status and message, and ends there: every message
//! before it is answered first, the other writes of its message are
//! decided as usual (they may have been made: read them back), and nothing
//! after it is read. A stream message is also checked before its decision
//! (`Caller::check_write`, one read of each job's lease): refused there, as
//! a whole, when a write already carries another principal's live token,
//! with nothing of it written. That early check is a cheap refusal, not
//! what keeps the binding: the guard is.

use crate::server::chaos::ChaosState;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::backend::{Backend, Staged};
use crate::error::{Error, Result};
use crate::lease::Limits;
use crate::metrics::RpcMetrics;
use crate::proto;
use crate::server::auth::{Action, Caller};
use crate::server::grpc_status::status;
use crate::server::pacing::Pacing;
use crate::server::{bulk, convert, layers, page, wire};

/// The most writes one `WriteStreamRequest` may carry.
pub const MAX_STREAM_WRITES: usize = 1000;
/// The most messages of one stream decided but not yet answered; the
/// stream reads no further until the oldest is answered.
const MAX_PIPELINED: usize = 64;

type WriteResults = Pin<Box<dyn Stream<Item = Result<proto::WriteStreamResponse, Status>> + Send>>;

/// Serves `leasehold.v1.FencedStore`.
pub struct FencedStoreService {
    node: Backend,
    limits: Limits,
    metrics: Arc<RpcMetrics>,
    proofs: Arc<crate::proofs::Proofs>,
    chaos: Arc<ChaosState>,
}

impl FencedStoreService {
    /// A service over `node`, checking requests against `limits`,
    /// counting refusals over `--max-keys-per-job` in `metrics`.
    pub fn new(
        node: Backend,
        limits: Limits,
        metrics: Arc<RpcMetrics>,
        proofs: Arc<crate::proofs::Proofs>,
        chaos: Arc<ChaosState>,
    ) -> Self {
        FencedStoreService {
            node,
            limits,
            proofs,
            chaos,
            metrics,
        }
    }
}

/// Waits as long as the connection's write rate asks before a write of
/// `bytes` (keys and values).
async fn paced(pacing: &Pacing, bytes: u64) {
    let wait = pacing.write(bytes);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
}

/// The bytes a write puts: its key and its value.
fn write_bytes(w: &proto::CheckedWriteRequest) -> u64 {
    (w.key.len() + w.value.len()) as u64
}

/// Counts `e` in `metrics` when it is a refusal at a limit.
fn counted(metrics: &RpcMetrics, e: Error) -> Error {
    if let Error::QuotaExceeded { limit, .. } = &e {
        metrics.refused(limit);
    }
    e
}

#[tonic::async_trait]
impl proto::fenced_store_server::FencedStore for FencedStoreService {
    async fn checked_write(
        &self,
        req: Request<proto::CheckedWriteRequest>,
    ) -> Result<Response<proto::CheckedWriteResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let pacing = Pacing::of(&req);
        let bytes = write_bytes(req.get_ref());
        let (w, by_proof) =
            convert::write_args_with(&self.limits, &caller, req.into_inner(), Some(&self.proofs))
                .map_err(status)?;
        paced(&pacing, bytes).await;
        self.chaos.delay(w.job.as_str()).await;
        if let Some(e) = self.chaos.fence_write(w.job.as_str(), w.token) {
            return Err(status(counted(&self.metrics, e)));
        }
        // With a policy, the store also asks whose the live grant is, on
        // the state it decides the write on (no read of the lease first):
        // the caller's own principal's, or, for a write forwarded with a
        // proof, the principal the proof names.
        let guard = |holder: &str| match &by_proof {
            None => caller.held_by_another(holder),
            Some(p) => crate::server::auth::unbind(holder).0.unwrap_or_default() != p.as_str(),
        };
        let version = self
            .node
            .checked_write(
                &w.job,
                w.token,
                &w.key,
                w.value,
                caller.is_policed().then_some(&guard),
            )
            .await
            .map_err(|e| {
                status(match e {
                    Error::PermissionDenied { .. } => caller.refused_write(w.job.as_str()),
                    e => counted(&self.metrics, e),
                })
            })?;
        Ok(Response::new(proto::CheckedWriteResponse { version }))
    }

    type WriteStreamStream = WriteResults;

    async fn write_stream(
        &self,
        req: Request<Streaming<proto::WriteStreamRequest>>,
    ) -> Result<Response<Self::WriteStreamStream>, Status> {
        let mut caller = Caller::of(&req).map_err(status)?;
        let pacing = Pacing::of(&req);
        let mut inbound = req.into_inner();
        let node = self.node.clone();
        let limits = self.limits.clone();
        let metrics = self.metrics.clone();
        let chaos = self.chaos.clone();
        let (tx, rx) = mpsc::channel(16);
        // Pipelined: the reader decides each message as it arrives, in
        // order, taking the node's lock once for all its writes; the
        // replier waits for each message's sync, in the same order, and
        // answers. So a client that sends messages back to back gets them
        // into shared syncs, and every reply still waits for its writes.
        let (staged_tx, mut staged_rx) =
            mpsc::channel::<Result<(proto::WriteStreamResponse, u64), Status>>(MAX_PIPELINED);
        let reader_node = node.clone();
        tokio::spawn(async move {
            let node = reader_node;
            loop {
                let msg = tokio::select! {
                    m = inbound.message() => m,
                    _ = staged_tx.closed() => return,
                };
                let msg = match msg {
                    Ok(Some(m)) => m,
                    // The client closed its side: answer what was
                    // decided, then end.
                    Ok(None) => return,
                    // A message too large or that does not decode (or a
                    // broken stream): answer what was decided, then end
                    // with why, and read nothing more.
                    Err(status) => {
                        let _ = staged_tx.send(Err(wire::request_error(status))).await;
                        return;
                    }
                };
                let bytes = msg.writes.iter().map(write_bytes).sum();
                paced(&pacing, bytes).await;
                // Each message under the policy in force now: after a
                // reload that took the grant, the stream ends.
                let staged = match caller.current() {
                    Ok(c) => {
                        caller = c;
                        stage_batch(&node, &limits, &metrics, &caller, msg, &chaos).await
                    }
                    Err(e) => Err(e),
                }
                .map_err(status);
                let end = staged.is_err();
                if staged_tx.send(staged).await.is_err() || end {
                    return;
                }
            }
        });
        tokio::spawn(async move {
            loop {
                let staged = tokio::select! {
                    s = staged_rx.recv() => s,
                    _ = node.closing() => {
                        let _ = tx.send(Err(status(Error::ShuttingDown))).await;
                        return;
                    }
                    _ = tx.closed() => return,
                };
                let reply = match staged {
                    None => return,
                    Some(Ok((resp, seq))) => node.durable(seq).await.map(|()| resp).map_err(status),
                    Some(Err(status)) => Err(status),
                };
                let end = reply.is_err();
                if tx.send(reply).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn read(
        &self,
        req: Request<proto::ReadRequest>,
    ) -> Result<Response<proto::ReadResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let (job, key) =
            convert::read_args(&self.limits, &caller, req.into_inner()).map_err(status)?;
        self.chaos.delay(job.as_str()).await;
        let rec = self.node.read(&job, &key).await.map_err(status)?;
        Ok(layers::queued(match rec {
            Some(rec) => proto::ReadResponse {
                found: rec.value.is_some(),
                value: rec.value.unwrap_or_default(),
                token: rec.token.0,
                version: rec.version,
            },
            None => proto::ReadResponse::default(),
        }))
    }

    async fn list_keys(
        &self,
        req: Request<proto::ListKeysRequest>,
    ) -> Result<Response<proto::ListKeysResponse>, Status> {
        let caller = Caller::of(&req).map_err(status)?;
        let pacing = Pacing::of(&req);
        let r = req.into_inner();
        let l = &self.limits;
        let job = convert::job_arg(l, &caller, Action::Read, &r.job).map_err(status)?;
        self.chaos.delay(job.as_str()).await;
        l.key_prefix(&r.prefix).map_err(status)?;
        let limit = l.page_size(r.page_size).map_err(status)?;
        let after = page::keys_after(job.as_str(), &r.prefix, &r.page_token).map_err(status)?;
        let (node, prefix) = (self.node.clone(), r.prefix.clone());
        let list = bulk::run(async move {
            node.keys(&job, &prefix, after.as_deref(), limit)
                .await
                .map(|l| (job, l))
        })
        .await;
        let (job, list) = list.map_err(status)?;
        let next_page_token = match &list.resume_after {
            Some(k) => page::keys_token(job.as_str(), &r.prefix, k),
            None => Vec::new(),
        };
        let answer = proto::ListKeysResponse {
            keys: list
                .keys
                .into_iter()
                .map(|(key, m)| proto::KeyInfo {
                    key,
                    token: m.token.0,
                    version: m.version,
                    size: m.size,
                })
                .collect(),
            next_page_token,
        };
        Ok(layers::queued(pacing.listed(answer).await))
    }
}

/// With a policy: refuses the writes if any carries the token of a live
/// grant held by another principal (see `Caller::check_write`). One read
/// of the lease per job, before the decision: an early refusal only, the
/// store's guard deciding each write (see the module's docs).
async fn check_bound(node: &Backend, caller: &Caller, writes: &[convert::WriteArgs]) -> Result<()> {
    if !caller.is_policed() {
        return Ok(());
    }
    let mut seen: Vec<(&str, u64)> = Vec::new();
    for w in writes {
        if seen.contains(&(w.job.as_str(), w.token.0)) {
            continue;
        }
        seen.push((w.job.as_str(), w.token.0));
        let view = node.lease_for_check(&w.job).await?;
        caller.check_write(w.token.0, &view)?;
    }
    Ok(())
}

/// Decides one `WriteStreamRequest`: validates each write on its own, makes
/// the valid ones in one node decision, and puts the results back in the
/// request's order. Returns the answer and the sequence number it must
/// wait for before it is sent.
///
/// With a policy, a message with a write the caller may not make is
/// refused with PERMISSION_DENIED, worded as `CheckedWrite`'s refusal: as
/// a whole, before anything of it is written, when the caller has no
/// `write` grant on a write's job or a write carries the token of a grant
/// already another principal's; else when the store's guard refuses a
/// write in the decision, the other writes of the message being decided
/// as usual.
async fn stage_batch(
    node: &Backend,
    l: &Limits,
    metrics: &RpcMetrics,
    caller: &Caller,
    req: proto::WriteStreamRequest,
    chaos: &ChaosState,
) -> Result<(proto::WriteStreamResponse, u64)> {
    use proto::write_result::Outcome;
    if req.writes.len() > MAX_STREAM_WRITES {
        return Err(Error::invalid(
            "writes",
            format!(
                "{} writes in one message, the limit is {MAX_STREAM_WRITES}: \
                 split them across messages",
                req.writes.len()
            ),
        ));
    }
    let mut results = Vec::with_capacity(req.writes.len());
    let mut batch = Vec::with_capacity(req.writes.len());
    // For each valid write, its index in `results`.
    let mut slots = Vec::with_capacity(req.writes.len());
    for w in req.writes {
        match convert::write_args(l, caller, w) {
            Err(e @ Error::PermissionDenied { .. }) => return Err(e),
            Ok(args) if chaos.any() => match chaos.fence_write(args.job.as_str(), args.token) {
                Some(e) => results.push(proto::WriteResult {
                    outcome: Outcome::Fenced as i32,
                    current_token: args.token.0,
                    message: e.to_string(),
                    ..Default::default()
                }),
                None => {
                    slots.push(results.len());
                    batch.push(args);
                    results.push(proto::WriteResult::default());
                }
            },
            Ok(args) => {
                slots.push(results.len());
                batch.push(args);
                results.push(proto::WriteResult::default());
            }
            Err(e) => results.push(proto::WriteResult {
                outcome: Outcome::InvalidArgument as i32,
                field: match &e {
                    Error::InvalidArgument { field, .. } => field.to_string(),
                    _ => String::new(),
                },
                message: e.to_string(),
                ..Default::default()
            }),
        }
    }
    check_bound(node, caller, &batch).await?;
    // With a policy, the store also asks whose the live grant is, for each
    // write, on the state it decides that write on.
    let guard = |holder: &str| caller.held_by_another(holder);
    let Staged { outcomes, seq } = node
        .stage_writes(batch, caller.is_policed().then_some(&guard))
        .await?;
    // The job of the first write the guard refused.
    let mut denied = None;
    for (slot, outcome) in slots.into_iter().zip(outcomes) {
        let res = &mut results[slot];
        match outcome {
            Ok(version) => {
                res.outcome = Outcome::Written as i32;
                res.version = version;
            }
            Err(Error::PermissionDenied { job, .. }) => {
                denied.get_or_insert(job);
            }
            Err(e) => {
                let (outcome, current) = match &e {
                    Error::Fenced { current, .. } => (Outcome::Fenced, current.0),
                    Error::UnknownToken { current, .. } => (Outcome::UnknownToken, current.0),
                    Error::QuotaExceeded { limit, .. } => {
                        metrics.refused(limit);
                        (Outcome::QuotaExceeded, 0)
                    }
                    // The node refuses a write on its own only for these.
                    _ => return Err(e),
                };
                res.outcome = outcome as i32;
                res.current_token = current;
                res.message = e.to_string();
            }
        }
    }
    if let Some(job) = denied {
        // As `CheckedWrite` answers it; the stream ends here.
        return Err(caller.refused_write(&job));
    }
    Ok((
        proto::WriteStreamResponse {
            id: req.id,
            results,
        },
        seq,
    ))
}
