//! The operator's service: `Admin.Backup`.
//!
//! A backup reads the whole store on a blocking thread and streams it in
//! chunks through a small channel, so a slow reader slows only its own
//! backup (and delays checkpoints, which wait for it; the log keeps
//! taking writes meanwhile).

use std::io;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::backend::Backend;
use crate::proto;
use crate::server::auth::{Action, Caller};
use crate::server::status::to_status;

/// The size of a backup chunk.
const CHUNK: usize = 256 * 1024;

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
            .authorize(Action::Admin, "")
            .map_err(|e| to_status(&e))?;
        let store =
            match &self.node {
                Backend::Local(n) => n.store(),
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
            let r = store
                .backup(&mut w)
                .and_then(|()| io::Write::flush(&mut w).map_err(crate::error::Error::storage));
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
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(proto::BackupChunk { data }))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the caller went away"))
    }
}
