//! A typed client for leasehold, and the [`Elector`].
//!
//! It depends on the contract (`leasehold-proto`) alone: no server, no
//! store, no etcd. A test keeps it so (`scripts/crate-graph`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold_client::ClientError> {
//! use std::time::Duration;
//! use leasehold_client::{Client, Elector};
//!
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let mut elector = Elector::start(client.clone(), "bridge_health", "bridge", Duration::from_secs(10));
//! let token = elector.elected().await?; // or the error that stopped the campaign
//! // Lead: carry the token into every write, so a stale leader is fenced.
//! client.checked_write("bridge_health", token, b"status", b"ok".to_vec()).await?;
//! elector.resign().await;
//! # Ok(()) }
//! ```
//!
//! A server with TLS and a policy (`serve --tls-cert ... --policy ...`):
//! connect with its CA, and a bearer token or a client certificate (see
//! [`Security`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold_client::ClientError> {
//! use leasehold_client::{Client, Security};
//!
//! let security = Security {
//!     ca_pem: Some(std::fs::read("ca.pem").expect("the CA")),
//!     token: std::env::var("LEASEHOLD_AUTH_TOKEN").ok(),
//!     ..Security::default()
//! };
//! let client = Client::connect_with("https://leasehold.internal:50051", security).await?;
//! let lease = client.get_lease("billing/nightly").await?;
//! println!("held by {:?} (principal {:?})", lease.holder, lease.principal);
//! # Ok(()) }
//! ```

mod elector;
mod elector_set;
mod giveback;
mod lock;

/// The only place the client reads a clock: tokio's (monotonic) clock,
/// which its timers use.
pub mod chaos;
mod clock {
    /// Now, on tokio's clock.
    pub fn tokio_now() -> tokio::time::Instant {
        tokio::time::Instant::now()
    }
}
mod keepalive;
mod pipe;
mod retry;
mod shards;
mod transport;
mod writestream;

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_types::StatusExt;

use leasehold_proto as proto;
use leasehold_proto::admin_client::AdminClient;
use leasehold_proto::chaos_client::ChaosClient;
use leasehold_proto::fenced_store_client::FencedStoreClient;
use leasehold_proto::leases_client::LeasesClient;
use leasehold_proto::shards_client::ShardsClient;
use leasehold_proto::to_proto_duration;

pub use elector::{Elector, ElectorOptions, Grant, Role};
pub use elector_set::{ElectorSet, ElectorSetOptions};
pub use keepalive::{KeepAlive, KeepAliveRenewal, RenewOutcome};
/// Grants' proofs: verify one with [`proof::verify_for`] and the keys of
/// [`Client::signing_keys`] (the format: `docs/proofs.md`).
pub use leasehold_proto::proof;
pub use lock::{Lock, LockOptions, DEFAULT_LOCK_NAME};
pub use proto::lease_event::Kind as EventKind;
pub use shards::{Shard, ShardEvent, ShardMember, ShardOptions};
pub use writestream::{StreamWrite, WriteOutcome, WriteStream};

/// A holder identity for this process: `name@uuid`, with one UUID made the
/// first time it is asked for and kept for the life of the process. A
/// restarted process is therefore a new holder, never mistaken for the old.
///
/// For one-off calls (the CLI's `acquire`). An [`Elector`] or
/// [`ElectorSet`] never uses it: each makes a UUID of its own, so that two
/// electors in one process are two holders.
pub fn process_holder(name: &str) -> String {
    static ID: OnceLock<uuid::Uuid> = OnceLock::new();
    format!("{name}@{}", ID.get_or_init(uuid::Uuid::new_v4))
}

/// A fresh holder identity for one elector: `name@uuid`, with a UUID made
/// by this call. Two electors for one job in one process are then two
/// holders to the server: at most one leads, and each has its own tokens.
fn elector_holder(name: &str) -> String {
    format!("{name}@{}", uuid::Uuid::new_v4())
}

/// Checks what an elector can check before asking the server: a job, a
/// name and a TTL the server is sure to refuse.
fn check_elector_args(job: Option<&str>, name: &str, ttl: Duration) -> Result<(), ClientError> {
    let bad = |field: &str, message: &str| ClientError::InvalidArgument {
        field: Some(field.to_owned()),
        message: message.to_owned(),
    };
    if job.is_some_and(str::is_empty) {
        return Err(bad("job", "job must not be empty"));
    }
    if name.is_empty() {
        return Err(bad("holder", "name must not be empty"));
    }
    if ttl.is_zero() {
        return Err(bad("ttl", "ttl must be positive"));
    }
    Ok(())
}

/// An error from the server, decoded from its status and `ErrorInfo`
/// reason.
#[derive(Debug, Clone)]
pub enum ClientError {
    /// The lease is no longer ours (reason LEASE_LOST). Stop leading.
    LeaseLost {
        /// The server's message.
        message: String,
        /// The job's newest token, if the server said.
        current_token: Option<u64>,
    },
    /// The write was fenced (reason FENCED): we are not the live leader.
    Fenced {
        /// The server's message, naming the current token.
        message: String,
        /// The job's newest token, if the server said.
        current_token: Option<u64>,
    },
    /// The token was never issued for the job (reason UNKNOWN_TOKEN, status
    /// INVALID_ARGUMENT): zero, or above the job's newest. Bad input, not a
    /// fence; retrying the same call cannot help.
    UnknownToken {
        /// The server's message.
        message: String,
        /// The job's newest token, if the server said.
        current_token: Option<u64>,
    },
    /// Bad input (INVALID_ARGUMENT). Retrying the same call cannot help.
    InvalidArgument {
        /// The request field at fault, if the server named one.
        field: Option<String>,
        /// The server's message, naming the field and the limit.
        message: String,
    },
    /// The server's policy does not know the caller (reason
    /// UNAUTHENTICATED): no credentials, or a token or certificate of no
    /// principal. Retrying with the same credentials cannot help.
    Unauthenticated(String),
    /// The caller's principal may not do this (reason PERMISSION_DENIED):
    /// no grant for the action on the job, or the job's lease is another
    /// principal's. Retrying cannot help until the policy or the holder
    /// changes.
    PermissionDenied {
        /// The server's message.
        message: String,
        /// The action refused (`lease`, `write`, `read`, `admin`).
        action: Option<String>,
        /// The job.
        job: Option<String>,
    },
    /// A limit on state was reached (reason QUOTA_EXCEEDED): too many jobs,
    /// keys in a job, watchers, or waiters on a job. Nothing was changed;
    /// retrying helps only once the state shrinks.
    QuotaExceeded {
        /// The server's message.
        message: String,
        /// The flag that sets the limit (`--max-jobs`, ...), if said.
        limit: Option<String>,
        /// Its value, if said.
        max: Option<u64>,
    },
    /// `DeleteJob` on a job whose lease is live or that an Acquire waits for
    /// (reason JOB_IN_USE). Nothing was deleted.
    JobInUse(String),
    /// `TransferLease` found no successor waiting (reason NO_SUCCESSOR):
    /// nothing changed, the caller still leads.
    NoSuccessor(String),
    /// [`Elector::transfer`] while the elector does not lead: nothing was
    /// asked of the server.
    NotLeader,
    /// The server could not be reached or could not answer (UNAVAILABLE,
    /// DEADLINE_EXCEEDED, a transport failure). The outcome of a change is
    /// unknown; retrying can help.
    Unavailable(String),
    /// Any other status.
    Other(Status),
}

impl ClientError {
    /// Whether retrying the same call later can help.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ClientError::Unavailable(_))
    }

    /// Whether an elector stops campaigning on this error: the server
    /// refused the request itself (INVALID_ARGUMENT: a TTL out of range, a
    /// job name too long) or the caller (UNAUTHENTICATED,
    /// PERMISSION_DENIED), so asking again the same way cannot succeed.
    pub fn stops_campaign(&self) -> bool {
        matches!(
            self,
            ClientError::InvalidArgument { .. }
                | ClientError::UnknownToken { .. }
                | ClientError::Unauthenticated(_)
                | ClientError::PermissionDenied { .. }
        )
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::LeaseLost { message, .. } => write!(f, "{message} (LEASE_LOST)"),
            ClientError::Fenced { message, .. } => write!(f, "{message} (FENCED)"),
            ClientError::UnknownToken { message, .. } => write!(f, "{message} (UNKNOWN_TOKEN)"),
            ClientError::InvalidArgument { message, .. } => {
                write!(f, "{message} (INVALID_ARGUMENT)")
            }
            ClientError::Unauthenticated(m) => write!(f, "{m} (UNAUTHENTICATED)"),
            ClientError::PermissionDenied { message, .. } => {
                write!(f, "{message} (PERMISSION_DENIED)")
            }
            ClientError::QuotaExceeded { message, .. } => write!(f, "{message} (QUOTA_EXCEEDED)"),
            ClientError::JobInUse(m) => write!(f, "{m} (JOB_IN_USE)"),
            ClientError::NoSuccessor(m) => write!(f, "{m} (NO_SUCCESSOR)"),
            ClientError::NotLeader => f.write_str("the elector does not lead: nothing to transfer"),
            ClientError::Unavailable(m) => write!(f, "unavailable: {m}"),
            ClientError::Other(s) => write!(f, "{}: {}", s.code(), s.message()),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<Status> for ClientError {
    fn from(s: Status) -> Self {
        let info = s.get_error_details().error_info().cloned();
        let reason = info
            .as_ref()
            .and_then(|i| proto::ErrorReason::from_reason(&i.reason));
        let meta = |k: &str| info.as_ref().and_then(|i| i.metadata.get(k).cloned());
        let current_token = meta("current_token").and_then(|t| t.parse().ok());
        let message = s.message().to_owned();
        match (s.code(), reason) {
            (_, Some(proto::ErrorReason::LeaseLost)) => ClientError::LeaseLost {
                message,
                current_token,
            },
            (_, Some(proto::ErrorReason::Fenced)) => ClientError::Fenced {
                message,
                current_token,
            },
            (_, Some(proto::ErrorReason::Unauthenticated)) | (Code::Unauthenticated, None) => {
                ClientError::Unauthenticated(message)
            }
            (_, Some(proto::ErrorReason::PermissionDenied)) | (Code::PermissionDenied, None) => {
                ClientError::PermissionDenied {
                    message,
                    action: meta("action"),
                    job: meta("job"),
                }
            }
            (_, Some(proto::ErrorReason::QuotaExceeded)) => ClientError::QuotaExceeded {
                message,
                limit: meta("limit"),
                max: meta("max").and_then(|m| m.parse().ok()),
            },
            (_, Some(proto::ErrorReason::UnknownToken)) => ClientError::UnknownToken {
                message,
                current_token,
            },
            (_, Some(proto::ErrorReason::JobInUse)) => ClientError::JobInUse(message),
            (_, Some(proto::ErrorReason::NoSuccessor)) => ClientError::NoSuccessor(message),
            (
                _,
                Some(
                    proto::ErrorReason::DiskFull
                    | proto::ErrorReason::Overloaded
                    | proto::ErrorReason::Storage
                    | proto::ErrorReason::ShuttingDown,
                ),
            ) => ClientError::Unavailable(message),
            (Code::InvalidArgument, _) => ClientError::InvalidArgument {
                field: meta("field"),
                message,
            },
            (Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown, _) => {
                ClientError::Unavailable(if message.is_empty() {
                    s.code().to_string()
                } else {
                    message
                })
            }
            _ => ClientError::Other(s),
        }
    }
}

impl From<tonic::transport::Error> for ClientError {
    /// With the causes: "transport error" alone does not say whether the
    /// server refused the connection, spoke no TLS, or showed a
    /// certificate the CA did not sign.
    fn from(e: tonic::transport::Error) -> Self {
        let mut message = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            let c_text = c.to_string();
            if !message.contains(&c_text) {
                message = format!("{message}: {c_text}");
            }
            cause = c.source();
        }
        ClientError::Unavailable(message)
    }
}

/// A job's lease, as the server reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The job.
    pub job: String,
    /// The live holder, if any.
    pub holder: Option<String>,
    /// The newest token; 0 if never granted.
    pub token: u64,
    /// The TTL of the live grant.
    pub ttl: Option<Duration>,
    /// Time left when the server answered.
    pub remaining: Option<Duration>,
    /// The principal the live grant is bound to (servers with a policy).
    pub principal: Option<String>,
    /// The live grant's signed proof, for storage that leasehold does not
    /// own ([`proof::verify_for`]); `None` when free, or when the server
    /// signs nothing. KeepAlive's results leave it out.
    pub proof: Option<String>,
    /// The value the live holder published ([`AcquireOptions::value`],
    /// [`Client::renew_with_value`]): where to reach the leader, for
    /// routing. Empty when free or none. Advisory: the token fences, not
    /// the value.
    pub value: Vec<u8>,
    /// In the answer to a counted Acquire ([`AcquireOptions::slots`]): the
    /// slot granted, whose own job [`Lease::job`] names (`{job}#{slot}`).
    /// 0 elsewhere.
    pub slot: u32,
    /// In the answer to a counted Acquire: the job's count of slots; 0
    /// elsewhere.
    pub slots: u32,
}

/// One token's time as a job's leader, from [`Client::history`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    /// Its token.
    pub token: u64,
    /// Its holder.
    pub holder: String,
    /// The principal the grant was bound to (servers with a policy).
    pub principal: Option<String>,
    /// When it was granted, on the server's wall clock (for people only).
    pub granted_at: std::time::SystemTime,
    /// The TTL it was granted with.
    pub ttl: Duration,
    /// How it ended; `None` while it has not.
    pub end: Option<proto::tenure::End>,
    /// When it ended, on the server's wall clock.
    pub ended_at: Option<std::time::SystemTime>,
    /// The value it was granted with (a later change is not kept here).
    pub value: Vec<u8>,
}

impl Tenure {
    /// Whether it was the job's tenure at `t` (granted at or before `t`,
    /// not ended by then).
    pub fn covers(&self, t: std::time::SystemTime) -> bool {
        self.granted_at <= t && self.ended_at.is_none_or(|e| t < e)
    }
}

impl From<proto::Tenure> for Tenure {
    fn from(t: proto::Tenure) -> Self {
        let at = |ts: Option<prost_types::Timestamp>| {
            ts.map(|ts| {
                std::time::UNIX_EPOCH
                    + Duration::new(ts.seconds.max(0) as u64, ts.nanos.max(0) as u32)
            })
        };
        let end = match t.end() {
            proto::tenure::End::Unspecified => None,
            e => Some(e),
        };
        Tenure {
            token: t.token,
            holder: t.holder,
            principal: (!t.principal.is_empty()).then_some(t.principal),
            granted_at: at(t.granted_at).unwrap_or(std::time::UNIX_EPOCH),
            ttl: t
                .ttl
                .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
                .unwrap_or_default(),
            end,
            ended_at: at(t.ended_at),
            value: t.value,
        }
    }
}

impl From<proto::Lease> for Lease {
    fn from(l: proto::Lease) -> Self {
        let d = |d: Option<prost_types::Duration>| {
            d.map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
        };
        Lease {
            job: l.job,
            holder: (!l.holder.is_empty()).then_some(l.holder),
            token: l.token,
            ttl: d(l.ttl),
            remaining: d(l.remaining),
            principal: (!l.principal.is_empty()).then_some(l.principal),
            proof: (!l.proof.is_empty()).then_some(l.proof),
            value: l.value,
            slot: l.slot,
            slots: l.slots,
        }
    }
}

/// The answer to [`Client::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// Whether we hold the lease now.
    pub acquired: bool,
    /// Our lease when acquired, else the current holder's.
    pub lease: Lease,
}

/// Options of [`Client::acquire_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcquireOptions {
    /// Bind the grant to this client's connection: when the connection's
    /// client end closes or resets (the process died, or the client
    /// closed it), the server releases the lease at once and the next
    /// waiter is granted. Silence (a pause, a partition) keeps the TTL. The
    /// trade: a live leader whose connection is cut (a proxy, a reconnect)
    /// loses its lease at once, and its writes are then fenced.
    pub bind_to_stream: bool,
    /// Ask as a preferred candidate: queued ahead of the waiters that are
    /// not, and the live holder, if it is not preferred, is told
    /// ([`Renewed::successor_waiting`]) so that it can hand over.
    pub preferred: bool,
    /// Publish this with the grant ([`Lease::value`]), at most 1024
    /// bytes: where to reach the leader. A repeated Acquire by the live
    /// holder replaces it.
    pub value: Vec<u8>,
    /// A counted lease (a semaphore) when 2 or more: up to this many
    /// holders at once, each in a slot of its own, 2 to 100. The grant's
    /// [`Lease::job`] names the slot's job (`{job}#{slot}`): renew,
    /// release and write with that name. The count is fixed by the job's
    /// first counted grant; another is refused naming `slots`.
    pub slots: u32,
}

/// The line of a job, from [`Client::list_waiters`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiters {
    /// The waiters listed, first in line first.
    pub waiters: Vec<Waiter>,
    /// How many wait in all (may be more than listed).
    pub waiting: u32,
}

/// One Acquire waiting in a job's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The waiting holder.
    pub holder: String,
    /// The principal it asked as (servers with a policy).
    pub principal: Option<String>,
    /// It asked as a preferred candidate.
    pub preferred: bool,
}

/// The answer to [`Client::renew_lease`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewed {
    /// Our lease, renewed.
    pub lease: Lease,
    /// A preferred candidate waits for the job, and our grant is not a
    /// preferred one: hand over (transfer) when it suits.
    pub successor_waiting: bool,
}

/// A stored value, as [`Client::read`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// False when never written or deleted.
    pub found: bool,
    /// The value.
    pub value: Vec<u8>,
    /// The token of the write that stored it.
    pub token: u64,
    /// The key's version.
    pub version: u64,
}

/// How to reach a server with TLS and a policy. Every field is optional:
/// the default is plain HTTP/2 without credentials.
#[derive(Clone, Default)]
pub struct Security {
    /// The CA certificate(s) that signed the server's certificate (PEM).
    /// With it (or a client certificate) the connection is TLS.
    pub ca_pem: Option<Vec<u8>>,
    /// This client's certificate (PEM), for mutual TLS; needs `key_pem`.
    pub cert_pem: Option<Vec<u8>>,
    /// The private key of `cert_pem` (PEM).
    pub key_pem: Option<Vec<u8>>,
    /// A bearer secret of a principal in the server's policy, sent as
    /// `authorization: Bearer SECRET` on every call.
    pub token: Option<String>,
    /// The name the server's certificate must carry; default: the host of
    /// the address.
    pub server_name: Option<String>,
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Security")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("cert_pem", &self.cert_pem.is_some())
            .field("key_pem", &self.key_pem.is_some())
            .field("token", &self.token.as_ref().map(|_| "<secret>"))
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// Adds the bearer token, if any, to every call.
#[derive(Clone, Default)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerToken {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// The channel every call goes through: the connection plus the token.
type Transport = InterceptedService<Channel, BearerToken>;

/// A typed client. Cheap to clone: clones share one HTTP/2 connection.
///
/// Each unary call goes out in one write (one TLS record with TLS): the
/// connection holds what HTTP/2 writes until it flushes, and a flush waits
/// one turn of the scheduler, in which a call's body joins its headers.
/// The server then reads and decrypts a call once, not twice.
///
/// The connection needs no reconnect settings: tonic's channel has no
/// reconnect backoff, and after the connection breaks it connects again
/// on the next call, so an elector (whose own retries wait at most 1 s
/// while campaigning) leads again within about a second of the server
/// coming back.
#[derive(Clone)]
pub struct Client {
    leases: LeasesClient<Transport>,
    store: FencedStoreClient<Transport>,
    admin: AdminClient<Transport>,
    chaos: ChaosClient<Transport>,
    shards: ShardsClient<Transport>,
    /// Acquires and Renews on their way, and tokens told, per (job,
    /// holder): what a cancelled Acquire's give-back must respect.
    calls: giveback::Calls,
}

impl Client {
    /// Connects to `addr`, such as `http://127.0.0.1:50051` (the scheme may
    /// be left out).
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        Client::connect_with(addr, Security::default()).await
    }

    /// Connects to `addr` with TLS and credentials (see [`Security`]).
    /// With a CA or a client certificate the connection is TLS, and an
    /// address without a scheme or with `http://` is taken as `https://`.
    pub async fn connect_with(addr: &str, security: Security) -> Result<Client, ClientError> {
        let bad = |field: &str, message: String| ClientError::InvalidArgument {
            field: Some(field.into()),
            message,
        };
        let tls = security.ca_pem.is_some() || security.cert_pem.is_some();
        let rest = addr.split_once("://").map_or(addr, |(_, r)| r);
        // The channel connects through `transport::Connector`, which does
        // the TLS itself (see there); the calls carry the `https` origin.
        let mut endpoint = Endpoint::from_shared(format!("http://{rest}"))
            .map_err(|e| bad("server", format!("bad server address: {e}")))?
            .connect_timeout(Duration::from_secs(5));
        let tls = if tls {
            let origin = format!("https://{rest}")
                .parse()
                .map_err(|e| bad("server", format!("bad server address: {e}")))?;
            endpoint = endpoint.origin(origin);
            let identity = match (&security.cert_pem, &security.key_pem) {
                (Some(cert), Some(key)) => Some((&cert[..], &key[..])),
                (None, None) => None,
                _ => {
                    return Err(bad(
                        "cert",
                        "a client certificate needs its key, and a key its certificate".into(),
                    ))
                }
            };
            let tls = transport::Tls::new(
                security.ca_pem.as_deref(),
                identity,
                security.server_name.as_deref(),
            )
            .map_err(|(field, message)| bad(field, message))?;
            Some(tls)
        } else {
            if addr.starts_with("https://") {
                return Err(bad(
                    "ca",
                    "an https:// address needs the CA that signed the server's certificate".into(),
                ));
            }
            None
        };
        let token = match &security.token {
            None => None,
            Some(t) => Some(
                format!("Bearer {}", t.trim())
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| bad("token", "the bearer token must be printable ASCII".into()))?,
            ),
        };
        let channel = endpoint
            .connect_with_connector(transport::Connector { tls })
            .await?;
        Ok(Client::with_token(channel, BearerToken(token)))
    }

    /// A client over an existing channel.
    pub fn from_channel(channel: Channel) -> Client {
        Client::with_token(channel, BearerToken::default())
    }

    fn with_token(channel: Channel, token: BearerToken) -> Client {
        Client {
            leases: LeasesClient::with_interceptor(channel.clone(), token.clone()),
            store: FencedStoreClient::with_interceptor(channel.clone(), token.clone()),
            admin: AdminClient::with_interceptor(channel.clone(), token.clone()),
            chaos: ChaosClient::with_interceptor(channel.clone(), token.clone()),
            shards: ShardsClient::with_interceptor(channel, token),
            calls: giveback::Calls::default(),
        }
    }

    /// The chaos API of a server started with `--enable-chaos`, for tests
    /// of workers that must step down (see [`chaos`]).
    pub fn chaos(&self) -> chaos::Chaos {
        chaos::Chaos::new(self.chaos.clone(), self.leases.clone())
    }

    /// Streams a backup of the server's durable state into `out` (see the
    /// `Admin.Backup` RPC); returns the bytes written. An error mid-way
    /// leaves `out` incomplete: `leasehold restore` refuses such a file.
    pub async fn backup_to(
        &self,
        out: &mut (impl tokio::io::AsyncWrite + Unpin),
    ) -> Result<u64, ClientError> {
        use tokio::io::AsyncWriteExt as _;
        let mut stream = self
            .admin
            .clone()
            .backup(proto::BackupRequest {})
            .await?
            .into_inner();
        let mut n = 0;
        while let Some(chunk) = stream.message().await? {
            out.write_all(&chunk.data).await.map_err(|e| {
                ClientError::Other(Status::internal(format!("writing the backup: {e}")))
            })?;
            n += chunk.data.len() as u64;
        }
        Ok(n)
    }

    /// Asks for the lease on `job`; waits up to `wait` for it to free up.
    ///
    /// **A waiting Acquire that is cancelled (its future dropped) gives
    /// back a grant it may have been given meanwhile**, so that the job is
    /// not held for a whole TTL by a holder that never learned its token:
    /// the server releases a grant whose reply it could not deliver, and
    /// this client, for a reply that was on its way as the call was
    /// cancelled, asks whether the lease is now `holder`'s and gives it
    /// back. **A give-back never ends a lease a caller was told it holds**:
    /// not while another Acquire or Renew of this client for the job and
    /// holder started since or is on its way, not a token one of them was
    /// told, and not once the holder asked again from anywhere (the
    /// server's `give_back` release). Holders are unique per elector, so
    /// the lease is never someone else's.
    pub async fn acquire(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Acquired, ClientError> {
        self.acquire_with(job, holder, ttl, wait, AcquireOptions::default())
            .await
    }

    /// [`Client::acquire`], with options: `bind_to_stream` binds the grant
    /// to this client's connection (see [`AcquireOptions`]).
    pub async fn acquire_with(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
        wait: Duration,
        options: AcquireOptions,
    ) -> Result<Acquired, ClientError> {
        let asking = self.calls.start(job, holder);
        let mut leases = self.leases.clone();
        let call = leases.acquire(proto::AcquireRequest {
            job: job.into(),
            holder: holder.into(),
            ttl: Some(to_proto_duration(ttl)),
            wait: Some(to_proto_duration(wait)),
            bind_to_stream: options.bind_to_stream,
            preferred: options.preferred,
            value: options.value,
            slots: options.slots,
        });
        let (r, asking) = match wait.is_zero() {
            true => (call.await, asking),
            false => {
                let armed = asking.give_back_if_cancelled(self.leases.clone());
                let r = call.await;
                (r, armed.answered())
            }
        };
        let r = r?.into_inner();
        let lease: Lease = r.lease.unwrap_or_default().into();
        if r.acquired {
            asking.told(lease.token);
        }
        Ok(Acquired {
            acquired: r.acquired,
            lease,
        })
    }

    /// Renews our live lease.
    pub async fn renew(
        &self,
        job: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<Lease, ClientError> {
        Ok(self.renew_lease(job, holder, token, ttl).await?.lease)
    }

    /// [`Client::renew`], with whether a preferred candidate waits.
    pub async fn renew_lease(
        &self,
        job: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<Renewed, ClientError> {
        self.renew_with_value(job, holder, token, ttl, None).await
    }

    /// [`Client::renew_lease`] that also replaces the lease's published
    /// value ([`Lease::value`]) when `value` is given (empty clears it);
    /// `None` keeps it. Watchers see a change (`KIND_VALUE_CHANGED`).
    pub async fn renew_with_value(
        &self,
        job: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
        value: Option<&[u8]>,
    ) -> Result<Renewed, ClientError> {
        let asking = self.calls.start(job, holder);
        let r = self
            .leases
            .clone()
            .renew(proto::RenewRequest {
                job: job.into(),
                holder: holder.into(),
                token,
                ttl: Some(to_proto_duration(ttl)),
                value: value.map(<[u8]>::to_vec),
            })
            .await?
            .into_inner();
        let lease: Lease = r.lease.unwrap_or_default().into();
        asking.told(lease.token);
        Ok(Renewed {
            lease,
            successor_waiting: r.successor_waiting,
        })
    }

    /// Releases our lease.
    pub async fn release(&self, job: &str, holder: &str, token: u64) -> Result<(), ClientError> {
        self.leases
            .clone()
            .release(proto::ReleaseRequest {
                job: job.into(),
                holder: holder.into(),
                token,
                give_back: false,
            })
            .await?;
        self.calls.released(job, holder);
        Ok(())
    }

    /// Hands our live lease (`holder` with `token`) to a waiting Acquire:
    /// `to`, or the first waiter in line. The successor gets the next
    /// token with no moment when the job is free; returns its lease.
    /// [`ClientError::NoSuccessor`] when nobody (or not `to`) waits, and
    /// [`ClientError::LeaseLost`] when the lease is no longer ours: nothing
    /// changes then. `ttl`: the successor's, or the lease's own when `None`.
    pub async fn transfer_lease(
        &self,
        job: &str,
        holder: &str,
        token: u64,
        to: Option<&str>,
        ttl: Option<Duration>,
    ) -> Result<Lease, ClientError> {
        let r = self
            .leases
            .clone()
            .transfer_lease(proto::TransferLeaseRequest {
                job: job.into(),
                holder: holder.into(),
                token,
                to_holder: to.unwrap_or_default().into(),
                ttl: ttl.map(to_proto_duration),
            })
            .await?
            .into_inner();
        self.calls.released(job, holder);
        Ok(r.lease.unwrap_or_default().into())
    }

    /// The lease of `job`.
    pub async fn get_lease(&self, job: &str) -> Result<Lease, ClientError> {
        let r = self
            .leases
            .clone()
            .get_lease(proto::GetLeaseRequest { job: job.into() })
            .await?;
        Ok(r.into_inner().into())
    }

    /// The Acquires waiting for `job`, first in line first (preferred
    /// candidates, then the others, each first come, first served): at
    /// most `limit` (0: 100; at most 1000), and how many wait in all. An
    /// unknown job has an empty line.
    pub async fn list_waiters(&self, job: &str, limit: u32) -> Result<Waiters, ClientError> {
        let r = self
            .leases
            .clone()
            .list_waiters(proto::ListWaitersRequest {
                job: job.into(),
                limit,
            })
            .await?
            .into_inner();
        Ok(Waiters {
            waiters: r
                .waiters
                .into_iter()
                .map(|w| Waiter {
                    holder: w.holder,
                    principal: (!w.principal.is_empty()).then_some(w.principal),
                    preferred: w.preferred,
                })
                .collect(),
            waiting: r.waiting,
        })
    }

    /// Deletes a job and its keys, if its lease is not live and nobody
    /// waits for it ([`ClientError::JobInUse`] otherwise). Returns whether
    /// there was such a job. A job created again later gets tokens above
    /// its old ones.
    pub async fn delete_job(&self, job: &str) -> Result<bool, ClientError> {
        let r = self
            .leases
            .clone()
            .delete_job(proto::DeleteJobRequest { job: job.into() })
            .await?;
        Ok(r.into_inner().deleted)
    }

    /// A shard group: its count of shards, its live members and who owns
    /// each shard (`Shards.GetGroup`). A group never joined has 0 shards.
    pub async fn get_group(&self, group: &str) -> Result<proto::ShardGroup, ClientError> {
        Ok(self
            .shards
            .clone()
            .get_group(proto::GetGroupRequest {
                group: group.into(),
            })
            .await?
            .into_inner())
    }

    /// Every lease whose job starts with `prefix`, all pages.
    pub async fn list_leases(&self, prefix: &str) -> Result<Vec<Lease>, ClientError> {
        let mut out = Vec::new();
        let mut page_token = String::new();
        loop {
            let r = self
                .leases
                .clone()
                .list_leases(proto::ListLeasesRequest {
                    prefix: prefix.into(),
                    page_size: 1000,
                    page_token,
                })
                .await?
                .into_inner();
            out.extend(r.leases.into_iter().map(Lease::from));
            if r.next_page_token.is_empty() {
                return Ok(out);
            }
            page_token = r.next_page_token;
        }
    }

    /// The newest `max` tenures of `job`'s history of leaders (each
    /// token's time as leader), newest first, read page by page.
    pub async fn history(&self, job: &str, max: usize) -> Result<Vec<Tenure>, ClientError> {
        let mut out = Vec::new();
        let mut page_token = String::new();
        while out.len() < max {
            let r = self
                .leases
                .clone()
                .get_history(proto::GetHistoryRequest {
                    job: job.into(),
                    page_size: (max - out.len()).min(1000) as u32,
                    page_token,
                })
                .await?
                .into_inner();
            out.extend(r.tenures.into_iter().map(Tenure::from));
            if r.next_page_token.is_empty() {
                break;
            }
            page_token = r.next_page_token;
        }
        out.truncate(max);
        Ok(out)
    }

    /// Waits, for at most `bound`, until the give-backs of this client's
    /// cancelled waiting Acquires have finished (see `giveback.rs`).
    pub(crate) async fn give_backs_settled(&self, bound: Duration) {
        self.calls.settled(bound).await
    }

    /// Observes `job`'s lease: a stream of [`LeaseChange`]s, the current
    /// lease first ([`EventKind::Current`]), then every change of holder or
    /// token as it happens (acquired, released, expired; renewals send
    /// nothing). A watcher that falls behind gets the latest state, with
    /// the changes it missed folded in. The stream ends when dropped; a
    /// broken one yields its typed error ([`ClientError::Unavailable`],
    /// `QuotaExceeded` past `--max-watchers`, ...) and then ends: observe
    /// again to go on, from the state at that moment.
    ///
    /// ```no_run
    /// # async fn demo(client: leasehold_client::Client) -> Result<(), leasehold_client::ClientError> {
    /// let mut changes = client.observe("bridge_health").await?;
    /// while let Some(change) = changes.next().await {
    ///     let change = change?;
    ///     println!("{:?} {:?} {}", change.kind, change.lease.holder, change.lease.token);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn observe(&self, job: &str) -> Result<Observe, ClientError> {
        Ok(Observe {
            events: self.watch(job).await?,
            done: false,
        })
    }

    /// Watches `job`: the current lease, then every change of holder or
    /// token, as the contract's messages ([`Client::observe`] types them).
    pub async fn watch(
        &self,
        job: &str,
    ) -> Result<tonic::Streaming<proto::LeaseEvent>, ClientError> {
        Ok(self
            .leases
            .clone()
            .watch_lease(proto::WatchLeaseRequest { job: job.into() })
            .await?
            .into_inner())
    }

    /// Writes `value` under (job, key), fenced by `token`. Returns the new
    /// version.
    pub async fn checked_write(
        &self,
        job: &str,
        token: u64,
        key: &[u8],
        value: Vec<u8>,
    ) -> Result<u64, ClientError> {
        self.write(job, token, key, value, false).await
    }

    /// Deletes (job, key), fenced by `token`. Returns the new version.
    pub async fn delete(&self, job: &str, token: u64, key: &[u8]) -> Result<u64, ClientError> {
        self.write(job, token, key, Vec::new(), true).await
    }

    /// Writes (job, key) with a grant's proof instead of a token: the
    /// server verifies it with its own keys and fences the write by the
    /// proof's token, so a service that is not the holder can forward the
    /// holder's write. A proof that does not verify, or is for another
    /// job, is [`ClientError::InvalidArgument`]. Returns the new version.
    pub async fn checked_write_with_proof(
        &self,
        job: &str,
        proof: &str,
        key: &[u8],
        value: Vec<u8>,
    ) -> Result<u64, ClientError> {
        let r = self
            .store
            .clone()
            .checked_write(proto::CheckedWriteRequest {
                job: job.to_owned(),
                key: key.to_vec(),
                value,
                proof: proof.to_owned(),
                ..Default::default()
            })
            .await?;
        Ok(r.into_inner().version)
    }

    /// The public keys that verify grants' proofs (`GetSigningKeys`), the
    /// signing one first.
    pub async fn signing_keys(&self) -> Result<proof::KeySet, ClientError> {
        let r = self
            .leases
            .clone()
            .get_signing_keys(proto::GetSigningKeysRequest {})
            .await?
            .into_inner();
        proof::KeySet::from_response(&r)
            .map_err(|e| ClientError::Other(Status::data_loss(format!("GetSigningKeys: {e}"))))
    }

    async fn write(
        &self,
        job: &str,
        token: u64,
        key: &[u8],
        value: Vec<u8>,
        delete: bool,
    ) -> Result<u64, ClientError> {
        let r = self
            .store
            .clone()
            .checked_write(proto::CheckedWriteRequest {
                proof: Default::default(),
                job: job.into(),
                token,
                key: key.to_vec(),
                value,
                delete,
            })
            .await?;
        Ok(r.into_inner().version)
    }

    /// Reads (job, key).
    pub async fn read(&self, job: &str, key: &[u8]) -> Result<Value, ClientError> {
        let r = self
            .store
            .clone()
            .read(proto::ReadRequest {
                job: job.into(),
                key: key.to_vec(),
            })
            .await?
            .into_inner();
        Ok(Value {
            found: r.found,
            value: r.value,
            token: r.token,
            version: r.version,
        })
    }

    /// Every live key of `job` starting with `prefix`, all pages.
    pub async fn list_keys(
        &self,
        job: &str,
        prefix: &[u8],
    ) -> Result<Vec<proto::KeyInfo>, ClientError> {
        let mut out = Vec::new();
        let mut page_token = Vec::new();
        loop {
            let r = self
                .store
                .clone()
                .list_keys(proto::ListKeysRequest {
                    job: job.into(),
                    prefix: prefix.to_vec(),
                    page_size: 1000,
                    page_token,
                })
                .await?
                .into_inner();
            out.extend(r.keys);
            if r.next_page_token.is_empty() {
                return Ok(out);
            }
            page_token = r.next_page_token;
        }
    }
}

/// One change of a job's lease, from [`Client::observe`].
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseChange {
    /// What happened: [`EventKind::Current`] for the state when the
    /// observation began, then acquired, released or expired.
    pub kind: EventKind,
    /// The lease after the change: its holder (`None` when free) and the
    /// job's newest token.
    pub lease: Lease,
}

/// The stream of a job's lease changes ([`Client::observe`]). Also a
/// [`tokio_stream::Stream`].
pub struct Observe {
    events: tonic::Streaming<proto::LeaseEvent>,
    done: bool,
}

impl Observe {
    /// The next change; `None` once the stream has ended (after an error,
    /// or when the server closed it).
    pub async fn next(&mut self) -> Option<Result<LeaseChange, ClientError>> {
        use tokio_stream::Stream;
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl tokio_stream::Stream for Observe {
    type Item = Result<LeaseChange, ClientError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.done {
            return Poll::Ready(None);
        }
        match std::pin::Pin::new(&mut self.events).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(status))) => {
                self.done = true;
                Poll::Ready(Some(Err(ClientError::from(status))))
            }
            Poll::Ready(Some(Ok(event))) => {
                let kind = EventKind::try_from(event.kind).unwrap_or(EventKind::Unspecified);
                let lease = Lease::from(event.lease.unwrap_or_default());
                Poll::Ready(Some(Ok(LeaseChange { kind, lease })))
            }
        }
    }
}
