//! `leasehold-bench etcd-mode`: one and two leasehold frontends on a
//! 3-member etcd cluster, next to etcd's own requests doing the same work,
//! in one run.
//!
//! The program starts a 3-member etcd cluster on 127.0.0.1 and, for every
//! cell, two fresh frontends on it (`leasehold serve --store etcd`), both
//! given the etcd leader as their first endpoint (a frontend calls its
//! first endpoint first, and stays on the member it moved on to: fresh
//! frontends keep one cell's move out of the next); the load generator's
//! own etcd connections go to the leader too. Three kinds of work:
//!
//! - `renew`: a unary `Renew` of a held lease, against the load generator
//!   sending etcd the requests a frontend sends for one `Renew` (see
//!   `renew_one`, `extend` and `keep_alive` in
//!   crates/leasehold-etcd/src/lib.rs): a read-only transaction of
//!   the job's holder and token keys and a count of its waiters, one
//!   `LeaseKeepAlive` message for the grant's etcd lease, and a
//!   linearizable `Range` of the holder key, whose raft term proves the
//!   keep-alive.
//! - `write`: a unary fenced `CheckedWrite` of an existing key, against the
//!   frontend's two transactions for it (`checked_write` there, `txn::write`
//!   in txn.rs): a read-only transaction of the job's keys and the value
//!   key, then a transaction comparing the holder key's exact value, the
//!   stored token (`<=` ours) and the value key's mod revision, and putting
//!   the value. A comparison that fails (another client wrote the key in
//!   between) reads and tries again, on both sides.
//! - `fleet`: each client's own [`BATCH`] leases, the same every
//!   `KeepAlive` message (what an `ElectorSet` or a shard member sends):
//!   through a frontend, one etcd keep-alive of the stream's shared etcd
//!   lease a message; raw, etcd's `LeaseKeepAlive` for each of the
//!   client's etcd leases, pipelined.
//! - `keepalive`: leasehold's `KeepAlive` stream, [`BATCH`] renewals per
//!   message, against etcd's own `LeaseKeepAlive` stream renewing as many
//!   etcd leases per round trip (pipelined: etcd takes one lease per
//!   message). Here the raw side is what an etcd user's keep-alive costs,
//!   not the frontend's requests: a frontend renews each lease of a
//!   `KeepAlive` message as it renews one `Renew`.
//!
//! The raw side uses the frontend's own key layout and record encodings
//! (crates/leasehold-etcd/src/keys.rs), under another prefix, so
//! that etcd stores, reads and compares the same bytes: 1,000 jobs, each
//! with a holder key bound to its own etcd lease, a token key and one
//! value key, as the frontends have them after the set-up (each job
//! acquired, renewed once, and its key written once).
//!
//! Each client has its own connection (a tonic channel to its frontend,
//! or to the etcd leader) and runs one operation at a time, on jobs drawn
//! at random from 1,000. With two frontends, client `i` uses frontend
//! `i mod 2`. Every lease has a TTL of [`TTL`]: whole seconds, above
//! etcd's minimum, and longer than any run, since a job is renewed only
//! when a draw picks it, and not at all while other cells run.
//!
//! A cell opens its connections, warms up, then counts operations over
//! `--secs`, with the CPU time of the frontends it loads (to the
//! nanosecond, from their threads' schedstat), of the three etcd members
//! (likewise), of this process (getrusage), and of the whole machine
//! (`/proc/stat`), and the requests etcd served (gRPC messages received by
//! every member, by method, from their `/metrics`): the last check that
//! both sides send etcd what they are said to send, and which member they
//! went to. Rounds interleave the
//! cells of each work and client count (raw etcd, one frontend, two
//! frontends, then the other way round), and the medians of the rounds
//! are printed; the ratio against raw etcd is taken within each round,
//! seconds apart, and its median printed: the machine is shared.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::client::{Client, KeepAlive, KeepAliveRenewal};
use leasehold::etcd::client::pb;
use leasehold::etcd::client::pb::kv_client::KvClient;
use leasehold::etcd::client::pb::lease_client::LeaseClient;
use leasehold::etcd::client::{
    create_is, mod_is, put_op, range_req, ranges, value_below, value_is,
};
use leasehold::etcd::keys::{decode_value, encode_value, token_below, HolderRec, Keys, TokenRec};
use leasehold::lease::Token;
use leasehold::store::ValueRecord;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::faults::Cluster;
use crate::proc::{cpu_seconds_fine, machine_busy_seconds, Server};
use crate::sys::{channel, Res, BATCH, HOLDER, JOBS, VALUE_BYTES};
use crate::Rng;

#[derive(clap::Args)]
pub struct EtcdModeArgs {
    #[command(flatten)]
    bench: crate::proc::EtcdBench,
    /// Seconds measured per cell (after a warm-up of half a second).
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Rounds; each runs every cell once, in alternating order.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Client counts, comma-separated.
    #[arg(long, default_value = "16,64")]
    clients: String,
    /// One round of 1.5 s cells, for a quick look.
    #[arg(long)]
    quick: bool,
    /// The kinds of work measured, comma-separated: renew, write,
    /// keepalive (100 leases drawn at random from 1,000 every message),
    /// fleet (each client's own 100 leases, the same every message).
    #[arg(long, default_value = "renew,write,keepalive,fleet")]
    works: String,
    /// The frontends' log filter (`RUST_LOG`): at `warn`, a frontend that
    /// leaves a member it found stalled says so.
    #[arg(long, default_value = "warn")]
    frontend_log: String,
}

impl EtcdModeArgs {
    fn works(&self) -> Res<Vec<Work>> {
        self.works
            .split(',')
            .map(|w| match w.trim() {
                "renew" => Ok(Work::Renew),
                "write" => Ok(Work::Write),
                "keepalive" => Ok(Work::KeepAlive),
                "fleet" => Ok(Work::Fleet),
                other => Err(format!(
                    "--works: {other:?} is none of renew, write, keepalive, fleet"
                )
                .into()),
            })
            .collect()
    }
}

/// The TTL of every lease, leasehold's and raw etcd's.
const TTL: Duration = Duration::from_secs(3600);
/// The key each job's fenced writes go to.
const KEY: &[u8] = b"k";
/// The raw side's keys start with this (the frontends use `leasehold/`).
const RAW_PREFIX: &str = "rawbench/";
/// The raw side's token of every job (each job granted once).
const RAW_TOKEN: Token = Token(1);
/// Tries of a fenced write whose comparison failed, as the frontend's.
const MAX_TRIES: usize = 64;
/// Set-up tasks, each with its own connection.
const SETUP_TASKS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Work {
    Renew,
    Write,
    KeepAlive,
    Fleet,
}

impl Work {
    fn label(self) -> &'static str {
        match self {
            Work::Renew => "renew",
            Work::Write => "write",
            Work::KeepAlive => "keepalive",
            Work::Fleet => "fleet",
        }
    }
}

/// Raw etcd, or leasehold through this many frontends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum System {
    Raw,
    Frontends(usize),
}

impl System {
    fn label(self) -> String {
        match self {
            System::Raw => "raw etcd".into(),
            System::Frontends(1) => "1 frontend".into(),
            System::Frontends(n) => format!("{n} frontends"),
        }
    }
}

/// What both sides send etcd per operation, for the output.
fn sends(work: Work) -> (&'static str, &'static str) {
    match work {
        Work::Renew => (
            "one Txn that only reads (Range of the job's holder and token keys, count-only Range \
             of its waiters' prefix); one LeaseKeepAlive message for the grant's etcd lease (on \
             the frontend's one shared stream); one linearizable Range of the holder key, whose \
             raft term must not be older than the keep-alive's",
            "the same three requests with the same keys and values (under another prefix), the \
             keep-alive on the client's own LeaseKeepAlive stream",
        ),
        Work::Write => (
            "one Txn that only reads (Range of the job's holder and token keys, Range of the \
             value key); one Txn comparing the holder key's value (=), the value key's value \
             (< the token + 1: the stored token <= ours) and its mod revision (=), putting the \
             value record (17 + 64 bytes); read and Txn again when a comparison failed",
            "the same two transactions with the same compares and put, retried the same way",
        ),
        Work::KeepAlive => (
            "per KeepAlive message: one reading Txn per 127 of its jobs (their holder and \
             token keys, and one count of the preferred candidates waiting across them), a \
             LeaseKeepAlive message per lease, then one reading Txn per 128 of its leases \
             proving the keep-alives' raft term (renewals that need more, such as a holder's \
             first renewal or a new TTL, go as a Renew; a lease another stream moved onto its \
             group moves off first, at most three times a grant)",
            "one LeaseKeepAlive message per lease on the client's own stream, a message's worth \
             pipelined per round trip: an etcd user's keep-alive, with no read and no proof of \
             the term",
        ),
        Work::Fleet => (
            "per KeepAlive message renewing the client's same leases as its message before: one \
             LeaseKeepAlive of the etcd lease its stream's group shares, then one reading Txn \
             per 127 of its jobs (holder and token keys, one count of preferred candidates), \
             which also proves the \
             keep-alive's raft term (a cell's first messages take over the groups of the \
             stream before, in one Txn per 64 leases)",
            "one LeaseKeepAlive message per lease on the client's own stream, its leases \
             pipelined in one round trip: an etcd user's keep-alive, with no read and no proof \
             of the term",
        ),
    }
}

/// What every cell shares: the jobs, their tokens and leases, and where
/// to send.
struct Ctx {
    names: Vec<String>,
    /// leasehold's token of each job.
    lh_tokens: Vec<u64>,
    /// The raw side's etcd lease of each job.
    raw_leases: Vec<i64>,
    /// The raw side's key layout.
    keys: Keys,
    /// The etcd leader's client URL.
    leader: String,
    value: Vec<u8>,
}

type KaStream = (
    mpsc::Sender<pb::LeaseKeepAliveRequest>,
    tonic::Streaming<pb::LeaseKeepAliveResponse>,
);

/// One client's connection.
// One per client, made once: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Conn {
    Leasehold {
        client: Client,
        ka: Option<KeepAlive>,
    },
    Raw {
        kv: KvClient<Channel>,
        ka: Option<KaStream>,
    },
}

impl Conn {
    /// Client `i`'s connection to `sys` for `work`; leasehold's through
    /// the frontends at `urls`.
    async fn open(ctx: &Ctx, urls: &[String], sys: System, work: Work, i: usize) -> Res<Conn> {
        match sys {
            System::Frontends(n) => {
                let client = Client::from_channel(channel(&urls[i % n]).await?);
                let ka = match work {
                    Work::KeepAlive | Work::Fleet => Some(client.keep_alive().await?),
                    _ => None,
                };
                Ok(Conn::Leasehold { client, ka })
            }
            System::Raw => {
                let ch = channel(&ctx.leader).await?;
                let ka = match work {
                    Work::Renew | Work::KeepAlive | Work::Fleet => {
                        Some(keep_alive_stream(ch.clone(), ctx.raw_leases[i % JOBS]).await?)
                    }
                    Work::Write => None,
                };
                Ok(Conn::Raw {
                    kv: KvClient::new(ch),
                    ka,
                })
            }
        }
    }

    /// One operation of client `i`; the leases renewed or values written.
    async fn op(&mut self, work: Work, rng: &mut Rng, ctx: &Ctx, i: usize) -> Res<u64> {
        let j = rng.below(JOBS);
        // The fleet's client `i` holds jobs `own`: the same every message.
        let own = JOBS + i * BATCH..JOBS + (i + 1) * BATCH;
        match (self, work) {
            (Conn::Leasehold { client, .. }, Work::Renew) => {
                client
                    .renew(&ctx.names[j], HOLDER, ctx.lh_tokens[j], TTL)
                    .await?;
                Ok(1)
            }
            (Conn::Leasehold { client, .. }, Work::Write) => {
                client
                    .checked_write(&ctx.names[j], ctx.lh_tokens[j], KEY, ctx.value.clone())
                    .await?;
                Ok(1)
            }
            (Conn::Leasehold { ka: Some(ka), .. }, Work::KeepAlive) => {
                let jobs: Vec<usize> = (0..BATCH)
                    .map(|k| if k == 0 { j } else { rng.below(JOBS) })
                    .collect();
                lh_keep_alives(ka, ctx, jobs).await
            }
            (Conn::Leasehold { ka: Some(ka), .. }, Work::Fleet) => {
                lh_keep_alives(ka, ctx, own.collect()).await
            }
            (Conn::Raw { ka: Some(ka), .. }, Work::Fleet) => {
                let ids: Vec<i64> = own.map(|j| ctx.raw_leases[j]).collect();
                raw_keep_alives(ka, &ids).await
            }
            (Conn::Raw { kv, ka: Some(ka) }, Work::Renew) => {
                raw_renew(kv, ka, ctx, j).await?;
                Ok(1)
            }
            (Conn::Raw { kv, .. }, Work::Write) => {
                raw_write(kv, ctx, j).await?;
                Ok(1)
            }
            (Conn::Raw { ka: Some(ka), .. }, Work::KeepAlive) => {
                let ids: Vec<i64> = (0..BATCH)
                    .map(|k| ctx.raw_leases[if k == 0 { j } else { rng.below(JOBS) }])
                    .collect();
                raw_keep_alives(ka, &ids).await
            }
            (_, w) => Err(format!("no connection for {w:?}").into()),
        }
    }
}

/// One `KeepAlive` message renewing each of `jobs`; an error unless every
/// one was renewed.
async fn lh_keep_alives(ka: &mut KeepAlive, ctx: &Ctx, jobs: Vec<usize>) -> Res<u64> {
    let batch: Vec<KeepAliveRenewal> = jobs
        .into_iter()
        .map(|j| KeepAliveRenewal::new(&ctx.names[j], HOLDER, ctx.lh_tokens[j], TTL))
        .collect();
    let renewed = crate::sys::keep_alive_renewed(ka, &batch).await?;
    if renewed != batch.len() {
        return Err(format!("{renewed} of {} renewed", batch.len()).into());
    }
    Ok(batch.len() as u64)
}

/// etcd's keep-alive of each of `ids`, pipelined on one stream, every
/// answer read (so that the stream stays in step); the leases renewed.
async fn raw_keep_alives((tx, rx): &mut KaStream, ids: &[i64]) -> Res<u64> {
    for &id in ids {
        tx.send(pb::LeaseKeepAliveRequest { id }).await?;
    }
    let mut expired = 0;
    for _ in ids {
        let r = rx.message().await?.ok_or("etcd keep-alive stream ended")?;
        if r.ttl <= 0 {
            expired += 1;
        }
    }
    if expired > 0 {
        return Err(format!("{expired} of {} etcd leases gone", ids.len()).into());
    }
    Ok(ids.len() as u64)
}

/// A `LeaseKeepAlive` stream on `ch`. etcd (grpc-go) sends the response
/// headers with the first answer: ask first (a keep-alive of `first`),
/// then wait for the stream.
async fn keep_alive_stream(ch: Channel, first: i64) -> Res<KaStream> {
    let (tx, rx) = mpsc::channel(BATCH);
    tx.send(pb::LeaseKeepAliveRequest { id: first }).await?;
    let mut resp = LeaseClient::new(ch)
        .lease_keep_alive(ReceiverStream::new(rx))
        .await?
        .into_inner();
    resp.message()
        .await?
        .ok_or("etcd keep-alive stream ended")?;
    Ok((tx, resp))
}

/// A transaction of `reads` alone: they see one revision.
fn read_txn(reads: Vec<pb::RangeRequest>) -> pb::TxnRequest {
    pb::TxnRequest {
        compare: Vec::new(),
        success: reads
            .into_iter()
            .map(|r| pb::RequestOp {
                request: Some(pb::request_op::Request::RequestRange(r)),
            })
            .collect(),
        failure: Vec::new(),
    }
}

/// What a frontend sends for one `Renew` of job `j` with an unchanged TTL:
/// the job read with its line, a keep-alive of the grant's etcd lease,
/// and the holder key read again in a term not older than the keep-alive's.
async fn raw_renew(kv: &mut KvClient<Channel>, ka: &mut KaStream, ctx: &Ctx, j: usize) -> Res<()> {
    let (job, k) = (&ctx.names[j], &ctx.keys);
    let (js, je) = k.job_range(job);
    let (ws, we) = k.waiters_range(job);
    let mut waiting = range_req(ws, we, 0);
    waiting.count_only = true;
    let r = kv
        .txn(read_txn(vec![range_req(js, je, 0), waiting]))
        .await?
        .into_inner();
    let kvs = ranges(r)
        .into_iter()
        .next()
        .map(|r| r.kvs)
        .unwrap_or_default();
    let st = k.job(job, &kvs).map_err(|b| b.to_string())?;
    let h = match st.holder {
        Some(h) if h.rec.holder == HOLDER && h.rec.token == RAW_TOKEN && h.rec.ttl == TTL => h,
        other => return Err(format!("raw renew of {job}: not held ({other:?})").into()),
    };
    ka.0.send(pb::LeaseKeepAliveRequest { id: h.lease }).await?;
    let a =
        ka.1.message()
            .await?
            .ok_or("etcd keep-alive stream ended")?;
    if a.ttl <= 0 {
        return Err(format!("raw renew of {job}: its etcd lease is gone").into());
    }
    let term = a.header.map_or(0, |h| h.raft_term);
    let r = kv
        .range(range_req(k.holder(job), Vec::new(), 0))
        .await?
        .into_inner();
    let current = r.header.as_ref().map_or(0, |h| h.raft_term);
    match r.kvs.first() {
        Some(kv) if h.is_stored_as(kv) && term >= current => Ok(()),
        _ => Err(format!("raw renew of {job}: not proven (term {term}, now {current})").into()),
    }
}

/// What a frontend sends for one fenced write of job `j`'s key: the job's
/// keys and the value key read at one revision, then the transaction that
/// re-checks both and puts the value; again while a comparison fails.
async fn raw_write(kv: &mut KvClient<Channel>, ctx: &Ctx, j: usize) -> Res<()> {
    let (job, k) = (&ctx.names[j], &ctx.keys);
    let (js, je) = k.job_range(job);
    let vk = k.value(job, KEY);
    for _ in 0..MAX_TRIES {
        let r = kv
            .txn(read_txn(vec![
                range_req(js.clone(), je.clone(), 0),
                range_req(vk.clone(), Vec::new(), 0),
            ]))
            .await?
            .into_inner();
        let mut rs = ranges(r).into_iter();
        let st = k
            .job(job, &rs.next().map(|r| r.kvs).unwrap_or_default())
            .map_err(|b| b.to_string())?;
        let existing = match rs.next().and_then(|r| r.kvs.into_iter().next()) {
            Some(kv) => Some((decode_value(&kv.value)?, kv.mod_revision)),
            None => None,
        };
        // The fence: our token is the live holding's and the job's newest,
        // and the key's is not above it.
        let h = match &st.holder {
            Some(h) if h.rec.token == RAW_TOKEN && st.token() == RAW_TOKEN => h,
            _ => return Err(format!("raw write of {job}: fenced").into()),
        };
        if existing.as_ref().is_some_and(|(r, _)| r.token > RAW_TOKEN) {
            return Err(format!("raw write of {job}: fenced by the key's token").into());
        }
        let rec = ValueRecord {
            token: RAW_TOKEN,
            version: existing.as_ref().map_or(0, |(r, _)| r.version) + 1,
            value: Some(ctx.value.clone()),
        };
        let mut compare = vec![value_is(k.holder(job), h.raw.clone())];
        match existing.as_ref().map(|(_, rev)| *rev) {
            Some(rev) => {
                compare.push(value_below(vk.clone(), token_below(RAW_TOKEN)));
                compare.push(mod_is(vk.clone(), rev));
            }
            None => {
                // A new key is counted first (not in the measured cells:
                // the set-up writes every key).
                let (vs, ve) = k.values_range(job, b"", None);
                let mut count = range_req(vs, ve, 0);
                count.count_only = true;
                kv.range(count).await?;
                compare.push(create_is(vk.clone(), 0));
            }
        }
        let req = pb::TxnRequest {
            compare,
            success: vec![put_op(vk.clone(), encode_value(&rec), 0)],
            failure: Vec::new(),
        };
        if kv.txn(req).await?.into_inner().succeeded {
            return Ok(());
        }
    }
    Err(format!("raw write of {job}: the key kept changing").into())
}

/// A frontend on the cluster at `endpoints`, with the per-connection
/// limits that would cap a capacity bench lifted (as `Server::leasehold`;
/// and no connection's writes paced either).
fn frontend(bin: &Path, endpoints: &str, log: &str) -> Res<Server> {
    let mut cmd = Command::new(bin);
    cmd.args(crate::proc::SERVE)
        .args(crate::proc::LONG_TTLS)
        .args(crate::proc::NO_ACQUIRE_PACING)
        .args(["--store", "etcd", "--etcd-endpoints", endpoints])
        .args(["--max-write-rate-per-connection", "1000000000000"])
        .env("RUST_LOG", log);
    Server::spawn(cmd, 3)
}

/// Every job acquired through the frontend at `url`, renewed once (so its
/// holder key is past version 1, as after any first Renew) and, for the
/// first [`JOBS`], its key written once; each job's token. The fleet's
/// jobs (after the first [`JOBS`]) are then renewed once more over a
/// `KeepAlive` stream per client, [`BATCH`] at a time, which puts each
/// client's on one shared etcd lease, as a fleet's are after its first
/// messages.
///
/// The first [`JOBS`] Acquires go one at a time, as in the first runs of
/// this bench (each creates its job, comparing and putting the one
/// store-wide `meta` key; a frontend now takes its own new jobs in turn).
async fn setup_leasehold(url: &str, names: &Arc<Vec<String>>, value: &[u8]) -> Res<Vec<u64>> {
    let client = Client::from_channel(channel(url).await?);
    let mut tokens = vec![0; names.len()];
    for (i, name) in names.iter().enumerate().take(JOBS) {
        let a = client.acquire(name, HOLDER, TTL, Duration::ZERO).await?;
        if !a.acquired {
            return Err(format!("leasehold: {name} not acquired").into());
        }
        tokens[i] = a.lease.token;
    }
    let mut set = tokio::task::JoinSet::new();
    for t in 0..SETUP_TASKS {
        let client = Client::from_channel(channel(url).await?);
        let names = names.clone();
        set.spawn(async move {
            let mut out = Vec::new();
            for i in (JOBS + t..names.len()).step_by(SETUP_TASKS) {
                let a = client
                    .acquire(&names[i], HOLDER, TTL, Duration::ZERO)
                    .await?;
                if !a.acquired {
                    return Err(format!("leasehold: {} not acquired", names[i]).into());
                }
                out.push((i, a.lease.token));
            }
            Res::Ok(out)
        });
    }
    while let Some(done) = set.join_next().await {
        for (i, t) in done?? {
            tokens[i] = t;
        }
    }
    let tokens = Arc::new(tokens);
    let mut set = tokio::task::JoinSet::new();
    for t in 0..SETUP_TASKS {
        let client = Client::from_channel(channel(url).await?);
        let (names, tokens, value) = (names.clone(), tokens.clone(), value.to_vec());
        set.spawn(async move {
            for i in (t..names.len()).step_by(SETUP_TASKS) {
                client.renew(&names[i], HOLDER, tokens[i], TTL).await?;
                if i < JOBS {
                    client
                        .checked_write(&names[i], tokens[i], KEY, value.clone())
                        .await?;
                }
            }
            Res::Ok(())
        });
    }
    while let Some(done) = set.join_next().await {
        done??;
    }
    for block in names[JOBS..]
        .chunks(BATCH)
        .zip(tokens[JOBS..].chunks(BATCH))
    {
        let mut ka = client.keep_alive().await?;
        let batch: Vec<KeepAliveRenewal> = block
            .0
            .iter()
            .zip(block.1)
            .map(|(j, t)| KeepAliveRenewal::new(j, HOLDER, *t, TTL))
            .collect();
        for o in ka.renew(&batch).await? {
            if !o.is_renewed() {
                return Err(format!("leasehold: a fleet lease not renewed: {o:?}").into());
            }
        }
    }
    Ok(tokens.to_vec())
}

/// The same jobs for the raw side, written straight into etcd at `url`:
/// for each, an etcd lease, and in one transaction its token key, its
/// holder key bound to the lease, and its value key; each job's lease.
async fn setup_raw(
    url: &str,
    keys: &Keys,
    names: &Arc<Vec<String>>,
    value: &[u8],
) -> Res<Vec<i64>> {
    let mut set = tokio::task::JoinSet::new();
    for t in 0..SETUP_TASKS {
        let ch = channel(url).await?;
        let (names, keys, value) = (names.clone(), keys.clone(), value.to_vec());
        set.spawn(async move {
            let mut lease = LeaseClient::new(ch.clone());
            let mut kv = KvClient::new(ch);
            let mut out = Vec::new();
            for i in (t..names.len()).step_by(SETUP_TASKS) {
                let g = lease
                    .lease_grant(pb::LeaseGrantRequest {
                        ttl: TTL.as_secs() as i64,
                        id: 0,
                    })
                    .await?
                    .into_inner();
                if !g.error.is_empty() {
                    return Err(format!("etcd lease grant: {}", g.error).into());
                }
                let job = &names[i];
                let holder = HolderRec {
                    issued: Default::default(),
                    token: RAW_TOKEN,
                    ttl: TTL,
                    holder: HOLDER.into(),
                    value: None,
                    sharing: Default::default(),
                };
                let token = TokenRec {
                    token: RAW_TOKEN,
                    released: false,
                    holder: HOLDER.into(),
                    owner: None,
                };
                let rec = ValueRecord {
                    token: RAW_TOKEN,
                    version: 1,
                    value: Some(value.clone()),
                };
                kv.txn(pb::TxnRequest {
                    compare: Vec::new(),
                    success: vec![
                        put_op(keys.token(job), token.encode(), 0),
                        put_op(keys.holder(job), holder.encode(), g.id),
                        put_op(keys.value(job, KEY), encode_value(&rec), 0),
                    ],
                    failure: Vec::new(),
                })
                .await?;
                out.push((i, g.id));
            }
            Res::Ok(out)
        });
    }
    let mut leases = vec![0; names.len()];
    while let Some(done) = set.join_next().await {
        for (i, l) in done?? {
            leases[i] = l;
        }
    }
    Ok(leases)
}

/// This process's user and system CPU seconds so far (every thread,
/// exited ones included).
fn own_cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given; zeroes are a valid
    // rusage.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

fn sum_cpu(pids: &[u32]) -> f64 {
    pids.iter()
        .map(|p| cpu_seconds_fine(*p).unwrap_or(0.0))
        .sum()
}

/// The key under which [`etcd_requests`] counts the `LeaseKeepAlive`
/// streams opened, apart from the requests.
const NEW_KA_STREAMS: &str = "new LeaseKeepAlive streams";

/// gRPC messages each of `members` received
/// (`grpc_server_msg_received_total`), by method: a unary call is one, a
/// stream's every message one; and, under [`NEW_KA_STREAMS`], the
/// `LeaseKeepAlive` streams it saw opened (`grpc_server_started_total`): a
/// frontend opens one and keeps it, and opens another only when it gave
/// up on the one it had (and then moves on to the next member).
async fn etcd_requests(members: &[String]) -> Res<Vec<BTreeMap<String, u64>>> {
    let mut all = Vec::with_capacity(members.len());
    for url in members {
        let mut m = BTreeMap::new();
        let addr = url.trim_start_matches("http://");
        for l in crate::proc::http_get(addr, "/metrics").await?.lines() {
            let (rest, started) = match (
                l.strip_prefix("grpc_server_msg_received_total{"),
                l.strip_prefix("grpc_server_started_total{"),
            ) {
                (Some(rest), _) => (rest, false),
                (_, Some(rest)) => (rest, true),
                _ => continue,
            };
            let method = rest
                .split("grpc_method=\"")
                .nth(1)
                .and_then(|r| r.split('"').next());
            let key = match (method, started) {
                (Some(m), false) => m,
                (Some("LeaseKeepAlive"), true) => NEW_KA_STREAMS,
                _ => continue,
            };
            if let Some(count) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
                *m.entry(key.to_owned()).or_insert(0) += count as u64;
            }
        }
        all.push(m);
    }
    Ok(all)
}

/// The `LeaseKeepAlive` streams the members saw opened so far.
async fn ka_streams(members: &[String]) -> Res<u64> {
    Ok(etcd_requests(members)
        .await?
        .iter()
        .filter_map(|m| m.get(NEW_KA_STREAMS))
        .sum())
}

/// What the members received from `before` to `after`: by method, summed
/// over the members, and the messages other than `Status` (the frontends'
/// probes of every member) that went to member `leader` and to all.
/// The streams opened stay under [`NEW_KA_STREAMS`], out of the shares.
fn received(
    before: &[BTreeMap<String, u64>],
    after: &[BTreeMap<String, u64>],
    leader: usize,
) -> (BTreeMap<String, u64>, (u64, u64)) {
    let mut by = BTreeMap::new();
    let (mut at_leader, mut total) = (0, 0);
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        for (k, v) in a {
            let n = v.saturating_sub(b.get(k).copied().unwrap_or(0));
            if n == 0 {
                continue;
            }
            *by.entry(k.clone()).or_insert(0) += n;
            if k != "Status" && k != NEW_KA_STREAMS {
                total += n;
                if i == leader {
                    at_leader += n;
                }
            }
        }
    }
    (by, (at_leader, total))
}

/// One cell's figures.
#[derive(Debug, Clone, Default)]
struct Cell {
    /// Operations (renewals, writes) in the measured seconds.
    ops: u64,
    secs: f64,
    /// CPU seconds of the frontends the cell loads.
    frontends: f64,
    /// Of every frontend, loaded or idle.
    all_frontends: f64,
    /// Of the three etcd members.
    etcd: f64,
    /// Of this process.
    own: f64,
    /// The whole machine's busy CPU seconds.
    machine: f64,
    errors: u64,
    first_error: Option<String>,
    /// etcd's requests by method from just before to just after the
    /// measured seconds, and the operations done between the same moments.
    requests: BTreeMap<String, u64>,
    request_ops: f64,
    /// Of those requests (`Status` aside), the leader's and all.
    at_leader: (u64, u64),
}

impl Cell {
    fn per_sec(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }

    /// Microseconds of `cpu` seconds per operation.
    fn per_op(&self, cpu: f64) -> f64 {
        cpu / self.ops.max(1) as f64 * 1e6
    }

    /// Cores the machine ran outside this bench's processes.
    fn others(&self) -> f64 {
        (self.machine - self.all_frontends - self.etcd - self.own).max(0.0) / self.secs
    }

    /// Microseconds per operation of the frontends, etcd and the load
    /// generator together: on a machine they kept busy, what bounds the
    /// rate, whatever share of the cores other processes took.
    fn all_per_op(&self) -> f64 {
        self.per_op(self.frontends + self.etcd + self.own)
    }

    /// The share of etcd's requests (`Status` aside) the leader served.
    fn leader_share(&self) -> f64 {
        self.at_leader.0 as f64 / self.at_leader.1.max(1) as f64
    }

    /// `LeaseKeepAlive` streams opened while it was measured.
    fn new_streams(&self) -> u64 {
        self.requests.get(NEW_KA_STREAMS).copied().unwrap_or(0)
    }
}

/// The etcd members a cell measures.
struct Pids {
    etcd: Vec<u32>,
    members: Vec<String>,
    /// The leader's index in `members`.
    leader: usize,
}

/// Runs one cell: `clients` connections to `sys` doing `work` (leasehold's
/// through `fronts`), `warm` of warm-up, then `secs` measured.
#[allow(clippy::too_many_arguments)]
async fn cell(
    ctx: &Arc<Ctx>,
    fronts: &[Server],
    pids: &Pids,
    sys: System,
    work: Work,
    clients: usize,
    warm: Duration,
    secs: Duration,
    seed: u64,
) -> Res<Cell> {
    let urls: Vec<String> = fronts.iter().map(|f| f.addr.clone()).collect();
    let all: Vec<u32> = fronts.iter().map(Server::pid).collect();
    let mut conns = Vec::with_capacity(clients);
    for i in 0..clients {
        conns.push(Conn::open(ctx, &urls, sys, work, i).await?);
    }
    let count = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(clients);
    for (i, mut conn) in conns.into_iter().enumerate() {
        let (ctx, count, errors, first_error, stop) = (
            ctx.clone(),
            count.clone(),
            errors.clone(),
            first_error.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(i as u64 + 1));
            while !stop.load(Ordering::Relaxed) {
                match conn.op(work, &mut rng, &ctx, i).await {
                    Ok(n) => {
                        count.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        first_error
                            .lock()
                            .unwrap()
                            .get_or_insert_with(|| e.to_string());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(warm).await;
    let n = || count.load(Ordering::Relaxed) as f64;
    let used: Vec<u32> = match sys {
        System::Raw => Vec::new(),
        System::Frontends(k) => all[..k].to_vec(),
    };
    let r0a = n();
    let req0 = etcd_requests(&pids.members).await?;
    let r0b = n();
    let e0 = errors.load(Ordering::Relaxed);
    // CPU seconds so far: the loaded frontends', every frontend's, etcd's,
    // this process's, and the machine's busy time.
    let cpu = || -> Res<(f64, f64, f64, f64, f64)> {
        Ok((
            sum_cpu(&used),
            sum_cpu(&all),
            sum_cpu(&pids.etcd),
            own_cpu(),
            machine_busy_seconds()?,
        ))
    };
    let (fe0, all0, etcd0, own0, m0) = cpu()?;
    let n0 = count.load(Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(secs).await;
    let n1 = count.load(Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let (fe1, all1, etcd1, own1, m1) = cpu()?;
    let e1 = errors.load(Ordering::Relaxed);
    let r1a = n();
    let req1 = etcd_requests(&pids.members).await?;
    let r1b = n();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let abort = t.abort_handle();
        if tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
    let (requests, at_leader) = received(&req0, &req1, pids.leader);
    let first_error = first_error.lock().unwrap().clone();
    Ok(Cell {
        ops: n1 - n0,
        secs: elapsed,
        frontends: fe1 - fe0,
        all_frontends: all1 - all0,
        etcd: etcd1 - etcd0,
        own: own1 - own0,
        machine: m1 - m0,
        errors: e1 - e0,
        first_error,
        requests,
        // Each scrape's moment: the middle of the count before and after it.
        request_ops: (r1a + r1b) / 2.0 - (r0a + r0b) / 2.0,
        at_leader,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The command line, quoted for a POSIX shell where needed.
fn command_line() -> String {
    std::env::args()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@+".contains(c));
            match plain {
                true => a,
                false => format!("'{}'", a.replace('\'', "'\\''")),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub async fn run(a: EtcdModeArgs) -> Res<()> {
    let dir = a
        .bench
        .work_dir
        .join(format!("etcd-mode-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let r = measure(&a, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    r
}

async fn measure(a: &EtcdModeArgs, dir: &Path) -> Res<()> {
    let (secs, rounds, warm) = match a.quick {
        true => (1.5, 1, 0.3),
        false => (a.secs, a.rounds.max(1), 0.5),
    };
    let client_counts: Vec<usize> = a
        .clients
        .split(',')
        .map(|c| c.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--clients {:?}: {e}", a.clients))?;
    let started = Instant::now();
    let cluster = Cluster::start(&a.bench.etcd_bin, &dir.join("etcd"))?;
    let leader = cluster.leader(Duration::from_secs(30)).await?;
    let endpoints = cluster.endpoints_from(leader);
    let start_fronts = || {
        (0..2)
            .map(|_| frontend(&a.bench.leasehold_bin, &endpoints, &a.frontend_log))
            .collect::<Res<Vec<Server>>>()
    };
    let mut fronts = start_fronts()?;
    let pids = Pids {
        etcd: (0..3).map(|i| cluster.pid(i) as u32).collect(),
        members: (0..3).map(|i| cluster.endpoint(i)).collect(),
        leader,
    };
    let works = a.works()?;
    // The fleet's jobs, after the first JOBS: BATCH for each client.
    let fleet = match works.contains(&Work::Fleet) {
        true => client_counts.iter().max().copied().unwrap_or(0) * BATCH,
        false => 0,
    };
    eprintln!(
        "etcd leader m{leader}; setting up {} jobs on leasehold and on raw etcd ({:.0}s)",
        JOBS + fleet,
        started.elapsed().as_secs_f64()
    );
    let names: Arc<Vec<String>> =
        Arc::new((0..JOBS + fleet).map(|i| format!("em-{i:05}")).collect());
    let value = vec![b'v'; VALUE_BYTES];
    let keys = Keys::new(RAW_PREFIX);
    let lh_tokens = setup_leasehold(&fronts[0].addr, &names, &value).await?;
    let raw_leases = setup_raw(&cluster.endpoint(leader), &keys, &names, &value).await?;
    let ctx = Arc::new(Ctx {
        names: names.to_vec(),
        lh_tokens,
        raw_leases,
        keys,
        leader: cluster.endpoint(leader),
        value,
    });

    let systems = [System::Raw, System::Frontends(1), System::Frontends(2)];
    let mut cells: BTreeMap<(Work, usize, System), Vec<Cell>> = BTreeMap::new();
    let (warm, per_cell) = (Duration::from_secs_f64(warm), Duration::from_secs_f64(secs));
    let mut seed = 0u64;
    for round in 0..rounds {
        for &work in &works {
            for &clients in &client_counts {
                let order: Vec<System> = match round % 2 {
                    0 => systems.to_vec(),
                    _ => systems.iter().rev().copied().collect(),
                };
                for sys in order {
                    seed += 1;
                    // Fresh frontends for every cell, calling the leader
                    // first: a frontend that moved on to another member in
                    // one cell (see the "at the leader" column) stays there,
                    // and would carry that into the cells after it.
                    for f in std::mem::take(&mut fronts) {
                        f.stop();
                    }
                    let streams = ka_streams(&pids.members).await?;
                    fronts = start_fronts()?;
                    // Until both have opened their keep-alive stream (for
                    // their session lease, 1/3 of its TTL after the
                    // start), so that a stream opened while a cell is
                    // measured is one a frontend gave up on.
                    let until = Instant::now() + Duration::from_secs(5);
                    while ka_streams(&pids.members).await? < streams + 2 && Instant::now() < until {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    let c = cell(
                        &ctx, &fronts, &pids, sys, work, clients, warm, per_cell, seed,
                    )
                    .await?;
                    eprintln!(
                        "round {} {} x{clients} {}: {:.0}/s; CPU per op: frontends {:.1} us, etcd {:.1} us, \
                         load generator {:.1} us; other processes {:.2} cores; {:.0}% of etcd's \
                         requests at the leader; {} LeaseKeepAlive streams opened; {} errors \
                         ({:.0}s)",
                        round + 1,
                        work.label(),
                        sys.label(),
                        c.per_sec(),
                        c.per_op(c.frontends),
                        c.per_op(c.etcd),
                        c.per_op(c.own),
                        c.others(),
                        c.leader_share() * 100.0,
                        c.new_streams(),
                        c.errors,
                        started.elapsed().as_secs_f64()
                    );
                    cells.entry((work, clients, sys)).or_default().push(c);
                }
            }
        }
    }
    let leader_after = cluster.leader(Duration::from_secs(10)).await?;
    for f in fronts {
        f.stop();
    }
    drop(cluster);
    report(
        &cells,
        &works,
        &client_counts,
        &systems,
        rounds,
        secs,
        (leader, leader_after),
    );
    Ok(())
}

fn report(
    cells: &BTreeMap<(Work, usize, System), Vec<Cell>>,
    works: &[Work],
    client_counts: &[usize],
    systems: &[System],
    rounds: usize,
    secs: f64,
    (leader, leader_after): (usize, usize),
) {
    let get = |w: Work, c: usize, s: System| cells.get(&(w, c, s)).map_or(&[][..], Vec::as_slice);
    // The median over the rounds of `f(leasehold's cell, raw etcd's)`,
    // each pair from the same round.
    let per_round = |w: Work, c: usize, s: System, f: &dyn Fn(&Cell, &Cell) -> f64| {
        let raw = get(w, c, System::Raw);
        median(get(w, c, s).iter().zip(raw).map(|(x, r)| f(x, r)).collect())
    };
    // leasehold's ops/s over raw etcd's.
    let ratio = |w: Work, c: usize, s: System| {
        per_round(w, c, s, &|x, r| x.per_sec() / r.per_sec().max(1e-9))
    };
    // Raw etcd's CPU per op (everything) over leasehold's.
    let cpu_ratio = |w: Work, c: usize, s: System| {
        per_round(w, c, s, &|x, r| r.all_per_op() / x.all_per_op().max(1e-9))
    };
    println!("command: {}", command_line());
    println!();
    println!(
        "leasehold's etcd mode against etcd's own requests: 3 etcd members and up to 2 frontends \
         on 127.0.0.1, {} CPUs; {rounds} round(s) of {secs} s cells (after 0.5 s of warm-up; \
         0.3 s with --quick), alternating order; medians of the rounds. Every client has its \
         own connection and one operation at a time, on {JOBS} jobs drawn at random; with 2 \
         frontends, clients alternate between them. Two fresh frontends for every cell; they \
         and the raw clients call the etcd leader first (m{leader}; m{leader_after} at the \
         end). Leases of {} s. The frontends run with \
         --max-ttl 24h, and the per-connection paces lifted: \
         --max-acquire-rate-per-connection 1000000000 --max-write-rate-per-connection \
         1000000000000.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        TTL.as_secs()
    );
    println!();
    println!("What etcd is sent per operation:");
    println!();
    for &w in works {
        let (frontend, raw) = sends(w);
        println!("- {}: a frontend sends {frontend}.", w.label());
        println!("  Raw etcd: {raw}.");
    }
    println!();
    println!(
        "| work | clients | system | ops/s | each round | ÷ raw etcd | frontends' CPU per op | \
         etcd's CPU per op (3 members) | load generator's CPU per op | all three | machine busy \
         | other processes | errors |"
    );
    println!("|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &w in works {
        for &c in client_counts {
            for &s in systems {
                let v = get(w, c, s);
                if v.is_empty() {
                    continue;
                }
                let med = |f: &dyn Fn(&Cell) -> f64| median(v.iter().map(f).collect());
                let each = v
                    .iter()
                    .map(|x| format!("{:.0}", x.per_sec()))
                    .collect::<Vec<_>>()
                    .join(" / ");
                let (vs, fe) = match s {
                    System::Raw => ("".to_owned(), "".to_owned()),
                    _ => (
                        format!("{:.2}x", ratio(w, c, s)),
                        format!("{:.1} µs", med(&|x| x.per_op(x.frontends))),
                    ),
                };
                println!(
                    "| {} | {c} | {} | {:.0} | {each} | {vs} | {fe} | {:.1} µs | {:.1} µs | {:.1} µs | {:.2} cores | {:.2} cores | {} |",
                    w.label(),
                    s.label(),
                    med(&|x| x.per_sec()),
                    med(&|x| x.per_op(x.etcd)),
                    med(&|x| x.per_op(x.own)),
                    med(&|x| x.all_per_op()),
                    med(&|x| x.machine / x.secs),
                    med(&|x| x.others()),
                    v.iter().map(|x| x.errors).sum::<u64>(),
                );
            }
        }
    }
    println!();
    println!(
        "For `keepalive` and `fleet`, an operation is one lease renewed ({BATCH} per message or round trip). \
         CPU per op: each process's CPU time over the measured seconds divided by the operations; \
         the frontends' is summed over the frontends the cell loads. Machine busy: every core's \
         busy time (/proc/stat) per second; other processes: that, less the frontends', etcd's \
         and the load generator's (this machine is shared: a share taken by others in one cell \
         and not in another moves the ops/s ratio, not the CPU per op)."
    );
    println!();
    println!(
        "leasehold's ops/s ÷ raw etcd's (median of the per-round ratios; the goal is ≥ 0.8x), \
         and raw etcd's CPU per op ÷ leasehold's, all three processes' together (median of the \
         per-round ratios): the ops/s ratio the CPU cost alone predicts on a machine they kept \
         busy, whatever other processes took:"
    );
    println!();
    println!("| work | clients | 1 frontend | by CPU per op | 2 frontends | by CPU per op |");
    println!("|---|---:|---:|---:|---:|---:|");
    for &w in works {
        for &c in client_counts {
            let cell = |s: System| {
                if get(w, c, s).is_empty() {
                    return String::new();
                }
                let r = ratio(w, c, s);
                let verdict = if r >= 0.8 { "met" } else { "missed" };
                format!("{r:.2}x ({verdict})")
            };
            let by_cpu = |s: System| match get(w, c, s).is_empty() {
                true => String::new(),
                false => format!("{:.2}x", cpu_ratio(w, c, s)),
            };
            println!(
                "| {} | {c} | {} | {} | {} | {} |",
                w.label(),
                cell(System::Frontends(1)),
                by_cpu(System::Frontends(1)),
                cell(System::Frontends(2)),
                by_cpu(System::Frontends(2))
            );
        }
    }
    println!();
    println!(
        "etcd requests per operation, as etcd counted them (gRPC messages received by the 3 \
         members, by method, over every round's measured seconds; the frontends' own background \
         calls, about one health read and one session keep-alive a second each, and a Status \
         probe of every member, included; at the leader: the share of them, Status aside, that \
         went to the leader; and the LeaseKeepAlive streams opened meanwhile, over all rounds: \
         a raw client opens its own before the measured seconds, a frontend opens a new one only \
         when it gave up on its stream, and moves on to the next member as it does):"
    );
    println!();
    println!(
        "| work | clients | system | requests per op | at the leader | LeaseKeepAlive streams opened |"
    );
    println!("|---|---:|---|---|---:|---:|");
    for &w in works {
        for &c in client_counts {
            for &s in systems {
                let v = get(w, c, s);
                if v.is_empty() {
                    continue;
                }
                let ops: f64 = v.iter().map(|x| x.request_ops).sum();
                let mut by: BTreeMap<&str, u64> = BTreeMap::new();
                for x in v {
                    for (k, n) in x.requests.iter().filter(|(k, _)| *k != NEW_KA_STREAMS) {
                        *by.entry(k.as_str()).or_insert(0) += n;
                    }
                }
                let mut by: Vec<_> = by.into_iter().collect();
                by.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
                let text = by
                    .iter()
                    .map(|(k, n)| format!("{k} {:.2}", *n as f64 / ops.max(1.0)))
                    .collect::<Vec<_>>()
                    .join(", ");
                let (l, all) = v.iter().fold((0, 0), |(l, all), x| {
                    (l + x.at_leader.0, all + x.at_leader.1)
                });
                println!(
                    "| {} | {c} | {} | {text} | {:.1}% | {} |",
                    w.label(),
                    s.label(),
                    l as f64 * 100.0 / all.max(1) as f64,
                    v.iter().map(Cell::new_streams).sum::<u64>()
                );
            }
        }
    }
    let errors: Vec<String> = cells
        .iter()
        .filter_map(|((w, c, s), v)| {
            let n: u64 = v.iter().map(|x| x.errors).sum();
            let first = v.iter().find_map(|x| x.first_error.clone())?;
            Some(format!(
                "{} x{c} {}: {n} errors, the first: {first}",
                w.label(),
                s.label()
            ))
        })
        .collect();
    if !errors.is_empty() {
        println!();
        println!("Errors (in warm-up or measured seconds):");
        for e in errors {
            println!("- {e}");
        }
    }
}
