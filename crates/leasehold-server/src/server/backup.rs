//! The operator's service: `Admin.Backup`.
//!
//! A backup reads the whole store on a blocking thread and streams it in
//! chunks through a small channel, so a slow reader slows only its own
//! backup. It delays checkpoints meanwhile (the log keeps taking writes),
//! but only for so long: once a checkpoint is needed, the store ends the
//! backup with an error (see `Store::backup`). The channel is never waited
//! on for more than `SEND_WAIT` at a time, so the store can look.

use std::io;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::backend::Backend;
use crate::proto;
use crate::server::auth::{Action, Caller};
use crate::server::grpc_status::to_status;

/// The size of a backup chunk.
const CHUNK: usize = 256 * 1024;

/// How long a send to a slow reader waits before the store is asked
/// whether the backup must end.
const SEND_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The `Admin` service.
pub struct AdminService {
    node: Backend,
}

impl AdminService {
    /// Serves `node`.
    pub fn new(node: Backend) -> Self {
        AdminService { node }
    }
}

#[tonic::async_trait]
impl proto::admin_server::Admin for AdminService {
    type BackupStream = ReceiverStream<Result<proto::BackupChunk, Status>>;

    async fn backup(
        &self,
        req: Request<proto::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        Caller::of(&req)
            .and_then(|c| c.authorize(Action::Admin, ""))
            .map_err(|e| to_status(&e))?;
        let node =
            match &self.node {
                Backend::Local(n) => n.clone(),
                Backend::Etcd(_) => return Err(Status::unimplemented(
                    "backup is for the embedded store; back up etcd with `etcdctl snapshot save`",
                )),
            };
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let mut w = Chunks {
                tx: tx.clone(),
                buf: Vec::with_capacity(CHUNK),
            };
            let r = node.backup(&mut w).and_then(|()| {
                // What is left goes at the reader's pace: no checkpoint
                // waits for it any more.
                loop {
                    match io::Write::flush(&mut w) {
                        Err(e) if e.kind() == io::ErrorKind::TimedOut => continue,
                        r => return r.map_err(crate::error::Error::storage),
                    }
                }
            });
            if let Err(e) = r {
                if !tx.is_closed() {
                    tracing::warn!(error = %e, "backup failed");
                }
                let _ = tx.blocking_send(Err(to_status(&e)));
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Sends what is written to it as chunks; fails once the caller is gone.
struct Chunks {
    tx: mpsc::Sender<Result<proto::BackupChunk, Status>>,
    buf: Vec<u8>,
}

impl io::Write for Chunks {
    /// Takes `b` whole once the buffer has room; `TimedOut` (nothing
    /// taken) when the reader has not made room within [`SEND_WAIT`].
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    /// Sends the buffer; `TimedOut` (the buffer kept) when the reader has
    /// not taken the chunks before it within [`SEND_WAIT`].
    fn flush(&mut self) -> io::Result<()> {
        use tokio::sync::mpsc::error::TrySendError;
        if self.buf.is_empty() {
            return Ok(());
        }
        let waited = std::time::Instant::now();
        loop {
            match self.tx.try_reserve() {
                Ok(permit) => {
                    let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
                    permit.send(Ok(proto::BackupChunk { data }));
                    return Ok(());
                }
                Err(TrySendError::Closed(())) => {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the caller went away",
                    ))
                }
                Err(TrySendError::Full(())) if waited.elapsed() >= SEND_WAIT => {
                    return Err(io::ErrorKind::TimedOut.into())
                }
                Err(TrySendError::Full(())) => {
                    std::thread::sleep(std::time::Duration::from_millis(2))
                }
            }
        }
    }
}
