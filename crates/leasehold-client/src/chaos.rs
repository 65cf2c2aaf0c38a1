//! A test helper over the chaos API (`chaos.proto`) of a server started
//! with `--enable-chaos`: make a worker lose its lease, stall, or be
//! fenced, on purpose, and check that it steps down.
//!
//! ```no_run
//! # async fn t() -> Result<(), leasehold_client::ClientError> {
//! use std::time::Duration;
//! use leasehold_client::{Client, ClientError, Elector, Role};
//!
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let mut elector = Elector::start(client.clone(), "sync", "worker", Duration::from_secs(3));
//! let token = elector.elected().await?;
//! client.checked_write("sync", token, b"k", b"1".to_vec()).await?;
//!
//! client.chaos().expire("sync").await?; // the lease is gone, now
//! elector.lost().await; // the elector reports the loss
//! assert_eq!(elector.role(), Role::Follower);
//! // and the old leader's next write is fenced
//! let late = client.checked_write("sync", token, b"k", b"2".to_vec()).await;
//! assert!(matches!(late, Err(ClientError::Fenced { .. })));
//! client.chaos().clear(None).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use leasehold_proto as proto;
use leasehold_proto::chaos_client::ChaosClient;
use leasehold_proto::leases_client::LeasesClient;
use leasehold_proto::to_proto_duration;

use crate::{ClientError, Lease, Transport};

/// What a chaos action left: the job's lease, and what is in force on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChaosOutcome {
    /// The job's lease after the action (`None` for a clear of every job).
    pub lease: Option<Lease>,
    /// What is in force on the job, for people; empty when nothing is.
    pub in_force: String,
}

impl From<proto::ChaosResponse> for ChaosOutcome {
    fn from(r: proto::ChaosResponse) -> Self {
        ChaosOutcome {
            lease: r.lease.map(Lease::from),
            in_force: r.in_force,
        }
    }
}

/// One chaos action in a job's history ([`Chaos::events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChaosEvent {
    /// When, on the server's wall clock.
    pub at: std::time::SystemTime,
    /// `expire`, `pause`, `delay`, `fence`, `transfer` or `clear`.
    pub action: String,
    /// What it did, for people.
    pub detail: String,
}

impl From<proto::ChaosEvent> for ChaosEvent {
    fn from(e: proto::ChaosEvent) -> Self {
        let at = e.at.unwrap_or_default();
        ChaosEvent {
            at: std::time::UNIX_EPOCH
                + Duration::new(at.seconds.max(0) as u64, at.nanos.max(0) as u32),
            action: e.action,
            detail: e.detail,
        }
    }
}

/// The chaos API, over a [`crate::Client`]'s connection
/// ([`crate::Client::chaos`]). A server without `--enable-chaos` answers
/// every call with `ClientError::Other` (UNIMPLEMENTED).
#[derive(Clone)]
pub struct Chaos {
    inner: ChaosClient<Transport>,
    leases: LeasesClient<Transport>,
}

impl Chaos {
    pub(crate) fn new(inner: ChaosClient<Transport>, leases: LeasesClient<Transport>) -> Chaos {
        Chaos { inner, leases }
    }

    /// The chaos actions this server took on `job`, newest first (the
    /// last 32, from `GetHistory`; kept in the server's memory).
    pub async fn events(&self, job: &str) -> Result<Vec<ChaosEvent>, ClientError> {
        let r = self
            .leases
            .clone()
            .get_history(proto::GetHistoryRequest {
                job: job.into(),
                page_size: 1,
                page_token: String::new(),
            })
            .await?;
        Ok(r.into_inner()
            .chaos
            .into_iter()
            .map(ChaosEvent::from)
            .collect())
    }

    /// Ends `job`'s live grant now: the holder's next renewal gets
    /// LEASE_LOST, its writes are fenced, and the first waiter is granted
    /// at once (history: ended by chaos).
    pub async fn expire(&self, job: &str) -> Result<ChaosOutcome, ClientError> {
        let r = self
            .inner
            .clone()
            .expire(proto::ChaosJobRequest { job: job.into() })
            .await?;
        Ok(r.into_inner().into())
    }

    /// Pauses `job`'s holder for `duration`: its renewals are refused
    /// (LEASE_LOST) as if they came too late, so its grant runs out at its
    /// deadline and goes to the first waiter; its Acquires are held until
    /// the pause ends.
    pub async fn pause(&self, job: &str, duration: Duration) -> Result<ChaosOutcome, ClientError> {
        let r = self
            .inner
            .clone()
            .pause(proto::ChaosPauseRequest {
                job: job.into(),
                duration: Some(to_proto_duration(duration)),
            })
            .await?;
        Ok(r.into_inner().into())
    }

    /// Delays every answer about `job` by `by`, until cleared.
    pub async fn delay(&self, job: &str, by: Duration) -> Result<ChaosOutcome, ClientError> {
        let r = self
            .inner
            .clone()
            .delay(proto::ChaosDelayRequest {
                job: job.into(),
                by: Some(to_proto_duration(by)),
            })
            .await?;
        Ok(r.into_inner().into())
    }

    /// Fails `job`'s next `writes` fenced writes as FENCED.
    pub async fn fence(&self, job: &str, writes: u32) -> Result<ChaosOutcome, ClientError> {
        let r = self
            .inner
            .clone()
            .fence(proto::ChaosFenceRequest {
                job: job.into(),
                writes,
            })
            .await?;
        Ok(r.into_inner().into())
    }

    /// Hands `job`'s lease to its first waiter now, as a forced failover.
    /// [`ClientError::NoSuccessor`] when nobody waits.
    pub async fn transfer(&self, job: &str) -> Result<ChaosOutcome, ClientError> {
        let r = self
            .inner
            .clone()
            .transfer(proto::ChaosJobRequest { job: job.into() })
            .await?;
        Ok(r.into_inner().into())
    }

    /// Clears the chaos in force on `job`, or on every job with `None`.
    pub async fn clear(&self, job: Option<&str>) -> Result<ChaosOutcome, ClientError> {
        let r = self
            .inner
            .clone()
            .clear(proto::ChaosClearRequest {
                job: job.unwrap_or_default().into(),
            })
            .await?;
        Ok(r.into_inner().into())
    }
}
