//! The systems under test and one operation of each workload on each.
//!
//! Every system is set up once (1,000 jobs held by one holder, each with its
//! token or epoch), then each client opens its own connection and runs one
//! operation at a time in a closed loop.

use std::sync::Arc;
use std::time::Duration;

use leasehold::proto as lh;
use leasehold::proto::fenced_store_client::FencedStoreClient;
use leasehold::proto::leases_client::LeasesClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::etcd;
use crate::Rng;

/// Sends `batch` as one message on `ka`; returns how many were renewed.
pub async fn keep_alive_renewed(
    ka: &mut leasehold::client::KeepAlive,
    batch: &[leasehold::client::KeepAliveRenewal],
) -> Res<usize> {
    Ok(ka
        .renew(batch)
        .await?
        .iter()
        .filter(|o| o.is_renewed())
        .count())
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Res<T> = Result<T, BoxError>;

/// Jobs (and keys) the workloads choose from, at random.
pub const JOBS: usize = 1000;
/// Renewals per message on the streamed paths.
pub const BATCH: usize = 100;
/// The TTL of every lease in the workloads: longer than any run, since
/// a job is renewed only when the random draw picks it (and not at all
/// while other groups run). Renewals never raise it, so on leasehold they
/// need no sync (the restart rule holds).
pub const TTL: Duration = Duration::from_secs(3600);
/// The size of a fenced write's value.
pub const VALUE_BYTES: usize = 64;
/// The holder of every workload lease.
pub const HOLDER: &str = "bench@00000000-0000-4000-8000-000000000001";

/// What a client does in a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Renew a random held lease, one call per renewal.
    Renew,
    /// A fenced write of a random job's key.
    Write,
    /// Read a random key (leasehold only).
    Read,
    /// Acquire a random free job, release it at once (leasehold only).
    Churn,
    /// Renew [`BATCH`] random leases per round trip over a stream (or a
    /// pipeline, for the peers).
    Stream,
    /// A fenced write of a random job's key over a `WriteStream`, one
    /// write per message (leasehold only).
    WriteStream,
    /// A unary gRPC echo of a CheckedWrite-sized message (the floor).
    Echo,
    /// The same echo, whose handler does one pwrite and one fdatasync of
    /// the message before replying (the floor of a durable call).
    EchoSync,
    /// fdatasync of a CheckedWrite-sized write to a file (the floor).
    Fsync,
}

/// Which system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sys {
    Leasehold,
    Postgres,
    Etcd,
    RedisAof,
    Redis,
    Echo,
    Disk,
}

impl Sys {
    pub fn label(self) -> &'static str {
        match self {
            Sys::Leasehold => "leasehold",
            Sys::Postgres => "PostgreSQL",
            Sys::Etcd => "etcd",
            Sys::RedisAof => "Redis AOF always",
            Sys::Redis => "Redis default (not durable)",
            Sys::Echo => "tonic echo",
            Sys::Disk => "fdatasync",
        }
    }
}

/// Where the systems listen.
#[derive(Debug, Clone)]
pub struct Addrs {
    pub leasehold: String,
    pub postgres: Option<String>,
    pub etcd: Option<String>,
    pub redis_aof: Option<String>,
    pub redis: Option<String>,
    pub echo: String,
    /// A file on the same file system as leasehold's data, for the floor.
    pub fsync_file: std::path::PathBuf,
    /// An etcd lease id to open keep-alive streams with (set up first).
    pub etcd_first_lease: Option<i64>,
}

/// What setup learned: each job's token (or epoch, or etcd lease id).
#[derive(Debug, Default)]
pub struct Setup {
    pub lh_tokens: Vec<u64>,
    pub pg_epochs: Vec<i64>,
    pub etcd_leases: Vec<i64>,
    pub redis_aof_epochs: Vec<i64>,
    pub redis_epochs: Vec<i64>,
}

fn job(i: usize) -> String {
    format!("bench-{i:04}")
}

fn value() -> Vec<u8> {
    vec![b'v'; VALUE_BYTES]
}

fn dur(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

pub async fn channel(addr: &str) -> Res<Channel> {
    Ok(Endpoint::from_shared(addr.to_owned())?
        .tcp_nodelay(true)
        .connect()
        .await?)
}

// ---- PostgreSQL: the twenty lines of SQL a team writes instead ----

pub const PG_SCHEMA: &str = "
DROP TABLE IF EXISTS leadership;
DROP TABLE IF EXISTS status;
CREATE TABLE leadership (job_name text PRIMARY KEY, owner text, expires_at timestamptz, epoch bigint);
CREATE TABLE status (resource text PRIMARY KEY, epoch bigint, value bytea);
";

/// Acquire-or-renew in one statement: take the row if it is ours or
/// expired; the epoch goes up unless it is already ours and live.
pub const PG_ACQUIRE_OR_RENEW: &str = "
INSERT INTO leadership AS l (job_name, owner, expires_at, epoch)
VALUES ($1, $2, now() + make_interval(secs => $3), 1)
ON CONFLICT (job_name) DO UPDATE
  SET owner = EXCLUDED.owner,
      expires_at = EXCLUDED.expires_at,
      epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at >= now()
                   THEN l.epoch ELSE l.epoch + 1 END
  WHERE l.owner = EXCLUDED.owner OR l.expires_at < now()
RETURNING epoch";

/// The fenced write: an upsert that only moves forward in epochs.
pub const PG_FENCED_WRITE: &str = "
INSERT INTO status AS s (resource, epoch, value) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE
  SET epoch = EXCLUDED.epoch, value = EXCLUDED.value
  WHERE s.epoch <= EXCLUDED.epoch";

// ---- Redis: a Lua script each ----

/// KEYS: lease key, epoch key. ARGV: me, ttl ms. Returns the epoch, or -1
/// when someone else holds it.
pub const REDIS_ACQUIRE_OR_RENEW: &str = r#"
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2]))
elseif not owner then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return redis.call('INCR', KEYS[2])
end
return -1
"#;

/// KEYS: epoch key, lease key, data key. ARGV: token, value. Sets only
/// with the job's current epoch while its lease is live.
pub const REDIS_CHECKED_SET: &str = r#"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur ~= tonumber(ARGV[1]) or redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
redis.call('SET', KEYS[3], ARGV[2])
return 1
"#;

fn redis_keys(i: usize) -> (String, String, String) {
    (
        format!("lease:{}", job(i)),
        format!("epoch:{}", job(i)),
        format!("data:{}:k", job(i)),
    )
}

// ---- etcd keys ----

fn etcd_lease_key(i: usize) -> Vec<u8> {
    format!("/lh/lease/{}", job(i)).into_bytes()
}
fn etcd_token_key(i: usize) -> Vec<u8> {
    format!("/lh/token/{}", job(i)).into_bytes()
}
fn etcd_data_key(i: usize) -> Vec<u8> {
    format!("/lh/data/{}/k", job(i)).into_bytes()
}

async fn pg_connect(url: &str) -> Res<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

async fn redis_connect(url: &str) -> Res<redis::aio::MultiplexedConnection> {
    let c = redis::Client::open(url)?;
    Ok(c.get_multiplexed_async_connection().await?)
}

/// Sets up every system once: 1,000 jobs held by [`HOLDER`].
pub async fn setup(a: &Addrs) -> Res<Setup> {
    let mut s = Setup::default();
    // leasehold
    let ch = channel(&a.leasehold).await?;
    let mut leases = LeasesClient::new(ch);
    for i in 0..JOBS {
        let r = leases
            .acquire(lh::AcquireRequest {
                job: job(i),
                holder: HOLDER.into(),
                ttl: Some(dur(TTL)),
                wait: None,
                ..Default::default()
            })
            .await?
            .into_inner();
        if !r.acquired {
            return Err(format!("leasehold: {} not acquired", job(i)).into());
        }
        s.lh_tokens.push(r.lease.unwrap_or_default().token);
    }
    // PostgreSQL
    if let Some(url) = &a.postgres {
        let c = pg_connect(url).await?;
        c.batch_execute(PG_SCHEMA).await?;
        let st = c.prepare(PG_ACQUIRE_OR_RENEW).await?;
        let ttl = TTL.as_secs_f64();
        for i in 0..JOBS {
            let row = c.query_one(&st, &[&job(i), &HOLDER, &ttl]).await?;
            s.pg_epochs.push(row.get(0));
        }
    }
    // etcd: one etcd lease per job, the job's key attached to it, and a
    // token key the fenced write compares.
    if let Some(url) = &a.etcd {
        let ch = channel(url).await?;
        let mut lease = etcd::lease_client::LeaseClient::new(ch.clone());
        let mut kv = etcd::kv_client::KvClient::new(ch);
        for i in 0..JOBS {
            let g = lease
                .lease_grant(etcd::LeaseGrantRequest {
                    ttl: TTL.as_secs() as i64,
                    id: 0,
                })
                .await?
                .into_inner();
            kv.put(etcd::PutRequest {
                key: etcd_lease_key(i),
                value: HOLDER.into(),
                lease: g.id,
            })
            .await?;
            kv.put(etcd::PutRequest {
                key: etcd_token_key(i),
                value: b"1".to_vec(),
                lease: 0,
            })
            .await?;
            s.etcd_leases.push(g.id);
        }
    }
    // Redis, both ways
    for (url, epochs) in [
        (&a.redis_aof, &mut s.redis_aof_epochs),
        (&a.redis, &mut s.redis_epochs),
    ] {
        let Some(url) = url else { continue };
        let mut c = redis_connect(url).await?;
        redis::cmd("FLUSHALL").query_async::<()>(&mut c).await?;
        let script = redis::Script::new(REDIS_ACQUIRE_OR_RENEW);
        for i in 0..JOBS {
            let (l, e, _) = redis_keys(i);
            let epoch: i64 = script
                .key(l)
                .key(e)
                .arg(HOLDER)
                .arg(TTL.as_millis() as u64)
                .invoke_async(&mut c)
                .await?;
            epochs.push(epoch);
        }
    }
    Ok(s)
}

type KaStream<Req, Resp> = (mpsc::Sender<Req>, tonic::Streaming<Resp>);

/// One client's connection to one system.
// One per client, made once: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Conn {
    Leasehold {
        leases: LeasesClient<Channel>,
        store: FencedStoreClient<Channel>,
        ka: Option<KaStream<lh::KeepAliveRequest, lh::KeepAliveResponse>>,
        ws: Option<KaStream<lh::WriteStreamRequest, lh::WriteStreamResponse>>,
        holder: String,
        value: Vec<u8>,
    },
    Postgres {
        c: tokio_postgres::Client,
        renew: tokio_postgres::Statement,
        write: tokio_postgres::Statement,
        value: Vec<u8>,
    },
    Etcd {
        kv: etcd::kv_client::KvClient<Channel>,
        ka: Option<KaStream<etcd::LeaseKeepAliveRequest, etcd::LeaseKeepAliveResponse>>,
        value: Vec<u8>,
    },
    Redis {
        c: redis::aio::MultiplexedConnection,
        renew: redis::Script,
        write: redis::Script,
        aof: bool,
        value: Vec<u8>,
    },
    Echo {
        c: crate::echo::echo_client::EchoClient<Channel>,
        payload: Vec<u8>,
    },
    Disk {
        f: std::fs::File,
        payload: Vec<u8>,
        off: u64,
    },
}

/// The write workload's fenced write of job `j`'s key on leasehold.
fn lh_write(j: usize, s: &Setup, value: &[u8]) -> lh::CheckedWriteRequest {
    lh::CheckedWriteRequest {
        proof: Default::default(),
        job: job(j),
        token: s.lh_tokens[j],
        key: b"k".to_vec(),
        value: value.to_vec(),
        delete: false,
    }
}

/// The region the floor's writes cycle through.
pub const FLOOR_FILE_BYTES: u64 = 1 << 20;

/// A file of [`FLOOR_FILE_BYTES`], written and synced once, so that each
/// later write overwrites in place and its fdatasync has no size change
/// (no journal commit) to carry: the way sled's log, PostgreSQL's WAL and
/// etcd's WAL are preallocated.
pub fn preallocated(path: &std::path::Path) -> Res<std::fs::File> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    if f.metadata()?.len() < FLOOR_FILE_BYTES {
        f.write_all(&vec![0u8; FLOOR_FILE_BYTES as usize])?;
        f.sync_all()?;
    }
    Ok(f)
}

/// The size of a CheckedWrite request of the write workload, for the floor.
pub fn write_request_bytes() -> usize {
    use prost::Message;
    lh::CheckedWriteRequest {
        proof: Default::default(),
        job: job(JOBS - 1),
        token: 1,
        key: b"k".to_vec(),
        value: value(),
        delete: false,
    }
    .encoded_len()
}

impl Conn {
    /// Opens client `i`'s connection to `sys` for `work`.
    pub async fn open(sys: Sys, work: Work, i: usize, a: &Addrs) -> Res<Conn> {
        let need = |o: &Option<String>| {
            o.clone()
                .ok_or_else(|| BoxError::from(format!("{} is not running", sys.label())))
        };
        Ok(match sys {
            Sys::Leasehold => {
                let ch = channel(&a.leasehold).await?;
                let mut leases = LeasesClient::new(ch.clone());
                let ka = if work == Work::Stream {
                    let (tx, rx) = mpsc::channel(4);
                    let resp = leases.keep_alive(ReceiverStream::new(rx)).await?;
                    Some((tx, resp.into_inner()))
                } else {
                    None
                };
                let mut store = FencedStoreClient::new(ch);
                let ws = if work == Work::WriteStream {
                    let (tx, rx) = mpsc::channel(4);
                    let resp = store.write_stream(ReceiverStream::new(rx)).await?;
                    Some((tx, resp.into_inner()))
                } else {
                    None
                };
                Conn::Leasehold {
                    leases,
                    store,
                    ka,
                    ws,
                    holder: format!("churn-{i}@bench"),
                    value: value(),
                }
            }
            Sys::Postgres => {
                let c = pg_connect(&need(&a.postgres)?).await?;
                let renew = c.prepare(PG_ACQUIRE_OR_RENEW).await?;
                let write = c.prepare(PG_FENCED_WRITE).await?;
                Conn::Postgres {
                    c,
                    renew,
                    write,
                    value: value(),
                }
            }
            Sys::Etcd => {
                let ch = channel(&need(&a.etcd)?).await?;
                let ka = if work == Work::Stream {
                    let mut lease = etcd::lease_client::LeaseClient::new(ch.clone());
                    let (tx, rx) = mpsc::channel(BATCH);
                    // etcd (grpc-go) sends the response headers with the
                    // first answer: ask first, then wait for the stream.
                    let setup = a.etcd_first_lease.ok_or("etcd was not set up")?;
                    tx.send(etcd::LeaseKeepAliveRequest { id: setup }).await?;
                    let mut resp = lease
                        .lease_keep_alive(ReceiverStream::new(rx))
                        .await?
                        .into_inner();
                    resp.message().await?.ok_or("etcd keep-alive ended")?;
                    Some((tx, resp))
                } else {
                    None
                };
                Conn::Etcd {
                    kv: etcd::kv_client::KvClient::new(ch),
                    ka,
                    value: value(),
                }
            }
            Sys::RedisAof | Sys::Redis => {
                let url = if sys == Sys::RedisAof {
                    need(&a.redis_aof)?
                } else {
                    need(&a.redis)?
                };
                Conn::Redis {
                    c: redis_connect(&url).await?,
                    renew: redis::Script::new(REDIS_ACQUIRE_OR_RENEW),
                    write: redis::Script::new(REDIS_CHECKED_SET),
                    aof: sys == Sys::RedisAof,
                    value: value(),
                }
            }
            Sys::Echo => Conn::Echo {
                c: crate::echo::echo_client::EchoClient::new(channel(&a.echo).await?),
                payload: vec![b'e'; write_request_bytes()],
            },
            Sys::Disk => Conn::Disk {
                f: preallocated(&a.fsync_file)?,
                payload: vec![b'd'; write_request_bytes()],
                off: 0,
            },
        })
    }

    /// Runs one operation; returns how many items it did (leases renewed,
    /// writes...), or an error for a refused one.
    pub async fn op(&mut self, work: Work, rng: &mut Rng, s: &Setup) -> Res<u64> {
        let j = rng.below(JOBS);
        match (self, work) {
            (Conn::Leasehold { leases, .. }, Work::Renew) => {
                leases
                    .renew(lh::RenewRequest {
                        job: job(j),
                        holder: HOLDER.into(),
                        token: s.lh_tokens[j],
                        ttl: Some(dur(TTL)),
                        value: None,
                    })
                    .await?;
                Ok(1)
            }
            (Conn::Leasehold { store, value, .. }, Work::Write) => {
                store.checked_write(lh_write(j, s, value)).await?;
                Ok(1)
            }
            (
                Conn::Leasehold {
                    ws: Some((tx, rx)),
                    value,
                    ..
                },
                Work::WriteStream,
            ) => {
                tx.send(lh::WriteStreamRequest {
                    id: 0,
                    writes: vec![lh_write(j, s, value)],
                })
                .await?;
                let r = rx.message().await?.ok_or("write stream ended")?;
                match r.results.first().map(|r| r.outcome()) {
                    Some(lh::write_result::Outcome::Written) => Ok(1),
                    other => Err(format!("write stream: {other:?}").into()),
                }
            }
            (Conn::Leasehold { store, .. }, Work::Read) => {
                store
                    .read(lh::ReadRequest {
                        job: job(j),
                        key: b"k".to_vec(),
                    })
                    .await?;
                Ok(1)
            }
            (Conn::Leasehold { leases, holder, .. }, Work::Churn) => {
                let name = format!("churn-{j:04}");
                let a = leases
                    .acquire(lh::AcquireRequest {
                        job: name.clone(),
                        holder: holder.clone(),
                        ttl: Some(dur(TTL)),
                        wait: None,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                if a.acquired {
                    leases
                        .release(lh::ReleaseRequest {
                            job: name,
                            holder: holder.clone(),
                            token: a.lease.unwrap_or_default().token,
                            give_back: false,
                        })
                        .await?;
                }
                Ok(1)
            }
            (
                Conn::Leasehold {
                    ka: Some((tx, rx)), ..
                },
                Work::Stream,
            ) => {
                let renewals = (0..BATCH)
                    .map(|k| {
                        let j = if k == 0 { j } else { rng.below(JOBS) };
                        lh::KeepAliveRenewal {
                            job: job(j),
                            holder: HOLDER.into(),
                            token: s.lh_tokens[j],
                            ttl: Some(dur(TTL)),
                        }
                    })
                    .collect();
                tx.send(lh::KeepAliveRequest {
                    id: 0,
                    renewals,
                    bind_to_stream: false,
                })
                .await?;
                let r = rx.message().await?.ok_or("keep-alive stream ended")?;
                let ok = r
                    .results
                    .iter()
                    .filter(|r| r.outcome() == lh::keep_alive_result::Outcome::Renewed)
                    .count();
                if ok != BATCH {
                    return Err(format!("{} of {BATCH} renewed", ok).into());
                }
                Ok(BATCH as u64)
            }
            (Conn::Postgres { c, renew, .. }, Work::Renew) => {
                let ttl = TTL.as_secs_f64();
                let rows = c.query(&*renew, &[&job(j), &HOLDER, &ttl]).await?;
                match rows.first().map(|r| r.get::<_, i64>(0)) {
                    Some(e) if e == s.pg_epochs[j] => Ok(1),
                    other => Err(format!("postgres renew: epoch {other:?}").into()),
                }
            }
            (
                Conn::Postgres {
                    c, write, value, ..
                },
                Work::Write,
            ) => {
                let resource = format!("{}/k", job(j));
                let n = c
                    .execute(&*write, &[&resource, &s.pg_epochs[j], &*value])
                    .await?;
                if n != 1 {
                    return Err("postgres fenced write refused".into());
                }
                Ok(1)
            }
            (Conn::Etcd { kv, .. }, Work::Renew) => {
                let r = kv
                    .txn(etcd::TxnRequest {
                        compare: vec![etcd::Compare {
                            result: etcd::compare::CompareResult::Equal as i32,
                            target: etcd::compare::CompareTarget::Value as i32,
                            key: etcd_lease_key(j),
                            target_union: Some(etcd::compare::TargetUnion::Value(HOLDER.into())),
                            range_end: Vec::new(),
                        }],
                        success: vec![etcd::RequestOp {
                            request: Some(etcd::request_op::Request::RequestPut(
                                etcd::PutRequest {
                                    key: etcd_lease_key(j),
                                    value: HOLDER.into(),
                                    lease: s.etcd_leases[j],
                                },
                            )),
                        }],
                        failure: vec![],
                    })
                    .await?
                    .into_inner();
                if !r.succeeded {
                    return Err("etcd renew txn failed".into());
                }
                Ok(1)
            }
            (Conn::Etcd { kv, value, .. }, Work::Write) => {
                let r = kv
                    .txn(etcd::TxnRequest {
                        compare: vec![etcd::Compare {
                            result: etcd::compare::CompareResult::Equal as i32,
                            target: etcd::compare::CompareTarget::Value as i32,
                            key: etcd_token_key(j),
                            target_union: Some(etcd::compare::TargetUnion::Value(b"1".to_vec())),
                            range_end: Vec::new(),
                        }],
                        success: vec![etcd::RequestOp {
                            request: Some(etcd::request_op::Request::RequestPut(
                                etcd::PutRequest {
                                    key: etcd_data_key(j),
                                    value: value.clone(),
                                    lease: 0,
                                },
                            )),
                        }],
                        failure: vec![],
                    })
                    .await?
                    .into_inner();
                if !r.succeeded {
                    return Err("etcd fenced write txn failed".into());
                }
                Ok(1)
            }
            (
                Conn::Etcd {
                    ka: Some((tx, rx)), ..
                },
                Work::Stream,
            ) => {
                // etcd's LeaseKeepAlive carries one lease per message:
                // pipeline a batch of them, then read the answers.
                for k in 0..BATCH {
                    let j = if k == 0 { j } else { rng.below(JOBS) };
                    tx.send(etcd::LeaseKeepAliveRequest {
                        id: s.etcd_leases[j],
                    })
                    .await?;
                }
                for _ in 0..BATCH {
                    let r = rx.message().await?.ok_or("etcd keep-alive ended")?;
                    if r.ttl <= 0 {
                        return Err("etcd lease expired".into());
                    }
                }
                Ok(BATCH as u64)
            }
            (Conn::Redis { c, renew, aof, .. }, Work::Renew) => {
                let (l, e, _) = redis_keys(j);
                let epoch: i64 = renew
                    .key(l)
                    .key(e)
                    .arg(HOLDER)
                    .arg(TTL.as_millis() as u64)
                    .invoke_async(c)
                    .await?;
                let want = if *aof {
                    s.redis_aof_epochs[j]
                } else {
                    s.redis_epochs[j]
                };
                if epoch != want {
                    return Err(format!("redis renew: epoch {epoch}").into());
                }
                Ok(1)
            }
            (
                Conn::Redis {
                    c,
                    write,
                    aof,
                    value,
                    ..
                },
                Work::Write,
            ) => {
                let (l, e, d) = redis_keys(j);
                let token = if *aof {
                    s.redis_aof_epochs[j]
                } else {
                    s.redis_epochs[j]
                };
                let ok: i64 = write
                    .key(e)
                    .key(l)
                    .key(d)
                    .arg(token)
                    .arg(&value[..])
                    .invoke_async(c)
                    .await?;
                if ok != 1 {
                    return Err("redis checked set refused".into());
                }
                Ok(1)
            }
            (Conn::Redis { c, renew, .. }, Work::Stream) => {
                // Redis's answer to a stream: a pipeline of BATCH scripts
                // in one round trip (with AOF always, one fsync for all).
                let mut pipe = redis::pipe();
                for k in 0..BATCH {
                    let j = if k == 0 { j } else { rng.below(JOBS) };
                    let (l, e, _) = redis_keys(j);
                    pipe.invoke_script(renew.key(l).key(e).arg(HOLDER).arg(TTL.as_millis() as u64));
                }
                let epochs: Vec<i64> = pipe.query_async(c).await?;
                if epochs.iter().any(|e| *e < 0) || epochs.len() != BATCH {
                    return Err("redis pipelined renew refused".into());
                }
                Ok(BATCH as u64)
            }
            (Conn::Echo { c, payload }, Work::EchoSync) => {
                c.echo_sync(crate::echo::EchoMessage {
                    payload: payload.clone(),
                })
                .await?;
                Ok(1)
            }
            (Conn::Echo { c, payload }, _) => {
                c.echo(crate::echo::EchoMessage {
                    payload: payload.clone(),
                })
                .await?;
                Ok(1)
            }
            (Conn::Disk { f, payload, off }, _) => {
                use std::os::unix::fs::FileExt;
                f.write_all_at(payload, *off)?;
                *off = (*off + payload.len() as u64) % (FLOOR_FILE_BYTES - payload.len() as u64);
                f.sync_data()?;
                Ok(1)
            }
            (_, w) => Err(format!("workload {w:?} is not defined for this system").into()),
        }
    }
}

/// Shared by every client of a cell.
pub type Shared = Arc<Setup>;
