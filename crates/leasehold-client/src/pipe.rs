//! What the two batch streams of the client share: splitting a batch into
//! messages, and sending them pipelined on one stream with the answers
//! matched up in order.

use prost::Message;
use tokio::sync::mpsc;

use super::ClientError;

/// The most entries the client puts in one message (the server takes up
/// to 1000).
pub const MAX_PER_MESSAGE: usize = 1000;
/// The most encoded bytes the client puts in one message, unless a single
/// entry is larger: well under the server's default limit of about 66 KiB.
pub const MAX_MESSAGE_BYTES: usize = 48 * 1024;

/// Splits entries into messages of at most [`MAX_PER_MESSAGE`] entries and
/// about [`MAX_MESSAGE_BYTES`] bytes (a larger entry goes alone). An empty
/// batch is one empty message.
pub fn split<T: Message>(all: Vec<T>) -> Vec<Vec<T>> {
    let mut out = vec![Vec::new()];
    let mut bytes = 0;
    for e in all {
        // The entry, its tag and its length prefix.
        let len = e.encoded_len() + 4;
        let cur = out.last_mut().expect("one message at least");
        if !cur.is_empty() && (cur.len() == MAX_PER_MESSAGE || bytes + len > MAX_MESSAGE_BYTES) {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += len;
        out.last_mut().expect("one message at least").push(e);
    }
    out
}

/// One open batch stream: requests out, responses in, in the same order.
pub struct Pipe<Req, Resp> {
    tx: mpsc::Sender<Req>,
    rx: tonic::Streaming<Resp>,
    next_id: u64,
    /// The stream's name, for errors.
    name: &'static str,
}

/// A request or response that carries an id and a list of entries.
pub trait Batch {
    /// One entry.
    type Entry;
    /// A message with `id` and `entries`.
    fn new(id: u64, entries: Vec<Self::Entry>) -> Self;
    /// The message's id and entries.
    fn into_parts(self) -> (u64, Vec<Self::Entry>);
}

impl<Req: Batch, Resp: Batch> Pipe<Req, Resp>
where
    Req::Entry: Message,
{
    pub fn new(tx: mpsc::Sender<Req>, rx: tonic::Streaming<Resp>, name: &'static str) -> Self {
        Pipe {
            tx,
            rx,
            next_id: 0,
            name,
        }
    }

    /// Sends `batch` split into messages, all at once (pipelined), and
    /// returns every response entry, in order. An error means the stream
    /// is broken.
    pub async fn exchange(
        &mut self,
        batch: Vec<Req::Entry>,
    ) -> Result<Vec<Resp::Entry>, ClientError> {
        let mut sent = Vec::new();
        let mut total = 0;
        for chunk in split(batch) {
            self.next_id += 1;
            sent.push((self.next_id, chunk.len()));
            total += chunk.len();
            self.tx
                .send(Req::new(self.next_id, chunk))
                .await
                .map_err(|_| ClientError::Unavailable(format!("{} stream closed", self.name)))?;
        }
        let mut out = Vec::with_capacity(total);
        for (id, n) in sent {
            let resp =
                self.rx.message().await?.ok_or_else(|| {
                    ClientError::Unavailable(format!("{} stream ended", self.name))
                })?;
            let (got, entries) = resp.into_parts();
            if got != id || entries.len() != n {
                return Err(ClientError::Other(tonic::Status::internal(format!(
                    "{} response {got} with {} results does not answer request {id} with {n}",
                    self.name,
                    entries.len()
                ))));
            }
            out.extend(entries);
        }
        Ok(out)
    }
}
