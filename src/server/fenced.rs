//! The `FencedStore` service: decode, call the node, encode.

use tonic::{Request, Response, Status};

use crate::backend::Backend;
use crate::lease::Limits;
use crate::proto;
use crate::server::convert;

/// Serves `leasehold.v1.FencedStore`.
pub struct FencedStoreService {
    node: Backend,
    limits: Limits,
}

impl FencedStoreService {
    /// A service over `node`, checking requests against `limits`.
    pub fn new(node: Backend, limits: Limits) -> Self {
        FencedStoreService { node, limits }
    }
}

#[tonic::async_trait]
impl proto::fenced_store_server::FencedStore for FencedStoreService {
    async fn checked_write(
        &self,
        req: Request<proto::CheckedWriteRequest>,
    ) -> Result<Response<proto::CheckedWriteResponse>, Status> {
        let w = convert::write_args(&self.limits, req.into_inner())?;
        let version = self
            .node
            .checked_write(&w.job, w.token, &w.key, w.value)
            .await?;
        Ok(Response::new(proto::CheckedWriteResponse { version }))
    }

    async fn read(
        &self,
        req: Request<proto::ReadRequest>,
    ) -> Result<Response<proto::ReadResponse>, Status> {
        let (job, key) = convert::read_args(&self.limits, req.into_inner())?;
        let rec = self.node.read(&job, &key).await?;
        Ok(Response::new(match rec {
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
        let r = req.into_inner();
        let l = &self.limits;
        let job = l.job(&r.job)?;
        l.key_prefix(&r.prefix)?;
        let limit = l.page_size(r.page_size)?;
        let after = (!r.page_token.is_empty()).then_some(r.page_token.as_slice());
        let list = self.node.keys(&job, &r.prefix, after, limit).await?;
        let next_page_token = match list.last() {
            Some((k, _)) if list.len() == limit => k.clone(),
            _ => Vec::new(),
        };
        Ok(Response::new(proto::ListKeysResponse {
            keys: list
                .into_iter()
                .map(|(key, rec)| proto::KeyInfo {
                    key,
                    token: rec.token.0,
                    version: rec.version,
                    size: rec.value.map_or(0, |v| v.len() as u32),
                })
                .collect(),
            next_page_token,
        }))
    }
}
