//! The `Leases` service: decode, call the node, encode.

use std::pin::Pin;

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::lease::Limits;
use crate::node::Node;
use crate::proto;
use crate::server::convert::{self, duration, lease};

/// Serves `leasehold.v1.Leases`.
pub struct LeasesService {
    node: Node,
    limits: Limits,
}

impl LeasesService {
    /// A service over `node`, checking requests against `limits`.
    pub fn new(node: Node, limits: Limits) -> Self {
        LeasesService { node, limits }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<proto::LeaseEvent, Status>> + Send>>;

#[tonic::async_trait]
impl proto::leases_server::Leases for LeasesService {
    async fn acquire(
        &self,
        req: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        let r = req.into_inner();
        let l = &self.limits;
        let job = l.job(&r.job)?;
        let holder = l.holder(&r.holder)?;
        let ttl = l.ttl(duration("ttl", r.ttl)?)?;
        let wait = l.wait(duration("wait", r.wait)?)?;
        let (acquired, view) = self.node.acquire(&job, &holder, ttl, wait).await?;
        Ok(Response::new(proto::AcquireResponse {
            acquired,
            lease: Some(lease(&view)),
        }))
    }

    async fn renew(
        &self,
        req: Request<proto::RenewRequest>,
    ) -> Result<Response<proto::RenewResponse>, Status> {
        let r = req.into_inner();
        let l = &self.limits;
        let job = l.job(&r.job)?;
        let holder = l.holder(&r.holder)?;
        let token = l.token(r.token)?;
        let ttl = l.ttl(duration("ttl", r.ttl)?)?;
        let view = self.node.renew(&job, &holder, token, ttl).await?;
        Ok(Response::new(proto::RenewResponse {
            lease: Some(lease(&view)),
        }))
    }

    async fn release(
        &self,
        req: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        let r = req.into_inner();
        let l = &self.limits;
        let job = l.job(&r.job)?;
        let holder = l.holder(&r.holder)?;
        let token = l.token(r.token)?;
        self.node.release(&job, &holder, token).await?;
        Ok(Response::new(proto::ReleaseResponse {}))
    }

    async fn get_lease(
        &self,
        req: Request<proto::GetLeaseRequest>,
    ) -> Result<Response<proto::Lease>, Status> {
        let job = self.limits.job(&req.get_ref().job)?;
        let view = self.node.lease(&job).await?;
        Ok(Response::new(lease(&view)))
    }

    async fn list_leases(
        &self,
        req: Request<proto::ListLeasesRequest>,
    ) -> Result<Response<proto::ListLeasesResponse>, Status> {
        let r = req.into_inner();
        self.limits.job_prefix(&r.prefix)?;
        let limit = self.limits.page_size(r.page_size)?;
        let after = (!r.page_token.is_empty()).then_some(r.page_token.as_str());
        let views = self.node.leases(&r.prefix, after, limit).await?;
        let next_page_token = match views.last() {
            Some(v) if views.len() == limit => v.job.to_string(),
            _ => String::new(),
        };
        Ok(Response::new(proto::ListLeasesResponse {
            leases: views.iter().map(lease).collect(),
            next_page_token,
        }))
    }

    type WatchLeaseStream = EventStream;

    async fn watch_lease(
        &self,
        req: Request<proto::WatchLeaseRequest>,
    ) -> Result<Response<Self::WatchLeaseStream>, Status> {
        let job = self.limits.job(&req.get_ref().job)?;
        let events = ReceiverStream::new(self.node.watch(job)).map(|r| {
            r.map(|(kind, view)| proto::LeaseEvent {
                lease: Some(lease(&view)),
                kind: convert::event_kind(kind) as i32,
            })
            .map_err(Status::from)
        });
        Ok(Response::new(Box::pin(events)))
    }
}
