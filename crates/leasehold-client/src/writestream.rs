//! Fenced writes over one long-lived `WriteStream`: a message per write
//! costs far less than a unary call, and the writes of one message share
//! one sync.
//!
//! ```no_run
//! # async fn demo(client: leasehold_client::Client) -> Result<(), leasehold_client::ClientError> {
//! use leasehold_client::{StreamWrite, WriteOutcome};
//!
//! let token = 7; // from our grant of "reconcile"
//! let mut stream = client.write_stream().await?;
//! let out = stream
//!     .write(&[
//!         StreamWrite::put("reconcile", token, b"cursor", b"42".to_vec()),
//!         StreamWrite::delete("reconcile", token, b"pending"),
//!     ])
//!     .await?;
//! if out.iter().any(|o| matches!(o, WriteOutcome::Fenced { .. })) {
//!     // Not the leader any more: stop.
//! }
//! # Ok(()) }
//! ```

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::pipe::{Batch, Pipe};
use super::{Client, ClientError};
use leasehold_proto as proto;
use leasehold_proto::write_result::Outcome;

/// One write on a [`WriteStream`]: the fields of `CheckedWrite`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamWrite {
    /// The job whose token fences the key.
    pub job: String,
    /// The writer's token, from its grant.
    pub token: u64,
    /// The key.
    pub key: Vec<u8>,
    /// The value, or `None` to delete the key.
    pub value: Option<Vec<u8>>,
}

impl StreamWrite {
    /// Stores `value` under (`job`, `key`) with `token`.
    pub fn put(job: &str, token: u64, key: &[u8], value: Vec<u8>) -> Self {
        StreamWrite {
            job: job.to_owned(),
            token,
            key: key.to_vec(),
            value: Some(value),
        }
    }

    /// Deletes (`job`, `key`) with `token`.
    pub fn delete(job: &str, token: u64, key: &[u8]) -> Self {
        StreamWrite {
            job: job.to_owned(),
            token,
            key: key.to_vec(),
            value: None,
        }
    }

    fn to_proto(&self) -> proto::CheckedWriteRequest {
        proto::CheckedWriteRequest {
            proof: Default::default(),
            job: self.job.clone(),
            token: self.token,
            key: self.key.clone(),
            value: self.value.clone().unwrap_or_default(),
            delete: self.value.is_none(),
        }
    }
}

/// The outcome of one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Stored durably, with the key's new version.
    Written {
        /// The key's new version.
        version: u64,
    },
    /// The token is not the job's live token: the writer is not the leader
    /// and must stop. Nothing was written.
    Fenced {
        /// The job's newest token.
        current_token: u64,
        /// Why, in words.
        message: String,
    },
    /// The token was never issued for the job. Nothing was written.
    UnknownToken {
        /// The job's newest token.
        current_token: u64,
        /// Why, in words.
        message: String,
    },
    /// The write would add a key to a job at its limit of keys
    /// (`--max-keys-per-job`). Nothing was written.
    QuotaExceeded {
        /// Why, naming the limit.
        message: String,
    },
    /// The write was malformed. Nothing was written.
    InvalidArgument {
        /// The field at fault: `job`, `token`, `key` or `value`.
        field: String,
        /// What is wrong, naming the limit.
        message: String,
    },
}

impl WriteOutcome {
    /// The new version, if the write was made.
    pub fn version(&self) -> Option<u64> {
        match self {
            WriteOutcome::Written { version } => Some(*version),
            _ => None,
        }
    }

    fn from_proto(r: proto::WriteResult) -> Result<Self, ClientError> {
        Ok(match r.outcome() {
            Outcome::Written => WriteOutcome::Written { version: r.version },
            Outcome::Fenced => WriteOutcome::Fenced {
                current_token: r.current_token,
                message: r.message,
            },
            Outcome::UnknownToken => WriteOutcome::UnknownToken {
                current_token: r.current_token,
                message: r.message,
            },
            Outcome::QuotaExceeded => WriteOutcome::QuotaExceeded { message: r.message },
            Outcome::InvalidArgument => WriteOutcome::InvalidArgument {
                field: r.field,
                message: r.message,
            },
            Outcome::Unspecified => {
                return Err(ClientError::Other(tonic::Status::internal(
                    "write result has no outcome",
                )))
            }
        })
    }
}

/// One open `WriteStream`. Calls to [`WriteStream::write`] are answered in
/// order over the same stream; open one per task that writes.
pub struct WriteStream {
    pipe: Pipe<proto::WriteStreamRequest, proto::WriteStreamResponse>,
}

impl Batch for proto::WriteStreamRequest {
    type Entry = proto::CheckedWriteRequest;
    fn new(id: u64, writes: Vec<Self::Entry>) -> Self {
        proto::WriteStreamRequest { id, writes }
    }
    fn into_parts(self) -> (u64, Vec<Self::Entry>) {
        (self.id, self.writes)
    }
}

impl Batch for proto::WriteStreamResponse {
    type Entry = proto::WriteResult;
    fn new(id: u64, results: Vec<Self::Entry>) -> Self {
        proto::WriteStreamResponse { id, results }
    }
    fn into_parts(self) -> (u64, Vec<Self::Entry>) {
        (self.id, self.results)
    }
}

impl Client {
    /// Opens a `WriteStream`: fenced writes, one or many per message.
    pub async fn write_stream(&self) -> Result<WriteStream, ClientError> {
        let (tx, rx) = mpsc::channel(64);
        let responses = self
            .store
            .clone()
            .write_stream(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(WriteStream {
            pipe: Pipe::new(tx, responses, "write"),
        })
    }
}

impl WriteStream {
    /// Makes every write in `batch`, in order; returns one outcome per
    /// write, in the same order, once the written ones are durable. Large
    /// batches are split across several messages, sent at once
    /// (pipelined). An error means the stream is broken, and the writes it
    /// did not answer may or may not have been made: open a new stream and
    /// read them back.
    pub async fn write(&mut self, batch: &[StreamWrite]) -> Result<Vec<WriteOutcome>, ClientError> {
        let results = self
            .pipe
            .exchange(batch.iter().map(StreamWrite::to_proto).collect())
            .await?;
        results.into_iter().map(WriteOutcome::from_proto).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::pipe::split;
    use super::*;

    #[test]
    fn split_respects_count_and_size() {
        let w = |n: usize| StreamWrite::put("j", 1, b"k", vec![0; n]).to_proto();
        assert_eq!(split(Vec::<proto::CheckedWriteRequest>::new()).len(), 1);
        let small = split((0..2500).map(|_| w(1)).collect());
        assert_eq!(
            small.iter().map(Vec::len).collect::<Vec<_>>(),
            [1000, 1000, 500]
        );
        let big = split(vec![w(60 * 1024), w(10), w(60 * 1024)]);
        assert_eq!(big.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 1]);
    }
}
