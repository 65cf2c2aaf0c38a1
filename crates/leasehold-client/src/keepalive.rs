//! The streamed renew path: many renewals per message over one long-lived
//! `KeepAlive` stream, with a result per lease.
//!
//! ```no_run
//! # async fn demo(client: leasehold_client::Client) -> Result<(), leasehold_client::ClientError> {
//! use std::time::Duration;
//! use leasehold_client::{KeepAliveRenewal, RenewOutcome};
//!
//! let mut stream = client.keep_alive().await?;
//! let ttl = Duration::from_secs(10);
//! let batch = vec![
//!     KeepAliveRenewal::new("job-a", "me@1", 4, ttl),
//!     KeepAliveRenewal::new("job-b", "me@1", 9, ttl),
//! ];
//! for outcome in stream.renew(&batch).await? {
//!     if let RenewOutcome::LeaseLost(current) = outcome {
//!         println!("lost {}: now {:?} with token {}", current.job, current.holder, current.token);
//!     }
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use leasehold_proto as proto;
use leasehold_proto::keep_alive_result::Outcome;
use leasehold_proto::to_proto_duration;

use super::pipe::{Batch, Pipe};
use super::{Client, ClientError, Lease, Renewed};

/// One lease to renew on a [`KeepAlive`] stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepAliveRenewal {
    /// The job.
    pub job: String,
    /// The holder the lease was granted to.
    pub holder: String,
    /// The token of the grant.
    pub token: u64,
    /// The new lifetime, counted from when the server handles it.
    pub ttl: Duration,
}

impl KeepAliveRenewal {
    /// A renewal of `job` held by `holder` with `token`, for `ttl`.
    pub fn new(job: &str, holder: &str, token: u64, ttl: Duration) -> Self {
        KeepAliveRenewal {
            job: job.to_owned(),
            holder: holder.to_owned(),
            token,
            ttl,
        }
    }

    fn to_proto(&self) -> proto::KeepAliveRenewal {
        proto::KeepAliveRenewal {
            job: self.job.clone(),
            holder: self.holder.clone(),
            token: self.token,
            ttl: Some(to_proto_duration(self.ttl)),
        }
    }
}

/// The outcome of one renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewOutcome {
    /// Renewed: our lease, with the new TTL, and whether a preferred
    /// candidate waits for the job ([`Renewed::successor_waiting`], as a
    /// unary renewal says).
    Renewed(Renewed),
    /// Not ours any more: the job's current lease (holder `None` when free).
    /// Stop the leader's work.
    LeaseLost(Lease),
    /// The token was never issued for the job: the job's current lease.
    UnknownToken(Lease),
    /// The entry was malformed; nothing changed for it.
    InvalidArgument {
        /// The field at fault: `job`, `holder`, `token` or `ttl`.
        field: String,
        /// What is wrong, naming the limit.
        message: String,
    },
}

impl RenewOutcome {
    /// Whether the lease was renewed.
    pub fn is_renewed(&self) -> bool {
        matches!(self, RenewOutcome::Renewed(_))
    }

    fn from_proto(r: proto::KeepAliveResult) -> Result<Self, ClientError> {
        let lease = || Lease::from(r.lease.clone().unwrap_or_default());
        Ok(match r.outcome() {
            Outcome::Renewed => RenewOutcome::Renewed(Renewed {
                lease: lease(),
                successor_waiting: r.successor_waiting,
            }),
            Outcome::LeaseLost => RenewOutcome::LeaseLost(lease()),
            Outcome::UnknownToken => RenewOutcome::UnknownToken(lease()),
            Outcome::InvalidArgument => RenewOutcome::InvalidArgument {
                field: r.field,
                message: r.message,
            },
            Outcome::Unspecified => {
                return Err(ClientError::Other(tonic::Status::internal(format!(
                    "keep-alive result for job {:?} has no outcome",
                    r.job
                ))))
            }
        })
    }
}

/// One open `KeepAlive` stream. Calls to [`KeepAlive::renew`] are answered
/// in order over the same stream; open one per task that renews.
pub struct KeepAlive {
    pipe: Pipe<proto::KeepAliveRequest, proto::KeepAliveResponse>,
}

impl Batch for proto::KeepAliveRequest {
    type Entry = proto::KeepAliveRenewal;
    fn new(id: u64, renewals: Vec<Self::Entry>) -> Self {
        proto::KeepAliveRequest {
            id,
            renewals,
            bind_to_stream: false,
        }
    }
    fn into_parts(self) -> (u64, Vec<Self::Entry>) {
        (self.id, self.renewals)
    }
}

impl Batch for proto::KeepAliveResponse {
    type Entry = proto::KeepAliveResult;
    fn new(id: u64, results: Vec<Self::Entry>) -> Self {
        proto::KeepAliveResponse { id, results }
    }
    fn into_parts(self) -> (u64, Vec<Self::Entry>) {
        (self.id, self.results)
    }
}

impl Client {
    /// Opens a `KeepAlive` stream: renew many leases per message.
    pub async fn keep_alive(&self) -> Result<KeepAlive, ClientError> {
        self.keep_alive_with(false).await
    }

    /// [`Client::keep_alive`]; with `bind_to_stream`, every lease it renews
    /// is bound to this client's connection (`KeepAliveRequest.bind_to_stream`):
    /// released at once when the connection's client end closes or resets,
    /// not when it goes silent (see [`crate::AcquireOptions`]).
    pub async fn keep_alive_with(&self, bind_to_stream: bool) -> Result<KeepAlive, ClientError> {
        use tokio_stream::StreamExt as _;
        let (tx, rx) = mpsc::channel(64);
        let requests = ReceiverStream::new(rx).map(move |mut r: proto::KeepAliveRequest| {
            r.bind_to_stream = bind_to_stream;
            r
        });
        let responses = self.leases.clone().keep_alive(requests).await?.into_inner();
        Ok(KeepAlive {
            pipe: Pipe::new(tx, responses, "keep-alive"),
        })
    }
}

impl KeepAlive {
    /// Renews every lease in `batch`; returns one outcome per renewal, in
    /// the same order. Large batches are split across several messages,
    /// sent at once (pipelined). An error means the stream is broken:
    /// open a new one.
    pub async fn renew(
        &mut self,
        batch: &[KeepAliveRenewal],
    ) -> Result<Vec<RenewOutcome>, ClientError> {
        let results = self
            .pipe
            .exchange(batch.iter().map(KeepAliveRenewal::to_proto).collect())
            .await?;
        results.into_iter().map(RenewOutcome::from_proto).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::pipe::{split, MAX_MESSAGE_BYTES};
    use super::*;
    use prost::Message;

    #[test]
    fn split_respects_count_and_size() {
        let r = |n: usize| proto::KeepAliveRenewal {
            job: "j".repeat(n),
            holder: "h@1".into(),
            token: 1,
            ttl: Some(to_proto_duration(Duration::from_secs(1))),
        };
        assert_eq!(split(Vec::<proto::KeepAliveRenewal>::new()).len(), 1);
        let small = split((0..2500).map(|_| r(5)).collect());
        assert_eq!(
            small.iter().map(Vec::len).collect::<Vec<_>>(),
            [1000, 1000, 500]
        );
        let big = split((0..400).map(|_| r(250)).collect());
        assert!(big.len() > 1);
        for m in &big {
            let bytes: usize = m.iter().map(|r| r.encoded_len() + 4).sum();
            assert!(bytes <= MAX_MESSAGE_BYTES, "{bytes}");
        }
        assert_eq!(big.iter().map(Vec::len).sum::<usize>(), 400);
    }
}
