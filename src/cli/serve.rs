//! `leasehold serve`: flags, the backend, both listeners, TLS and the
//! policy (reloaded on SIGHUP), and a graceful shutdown on SIGINT or
//! SIGTERM.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::net::TcpListener;

use leasehold::admin::{serve_admin, AdminOptions, AdminSecurity};
use leasehold::backend::{Backend, StateLimits};
use leasehold::etcd::{self, EtcdNode};
use leasehold::lease::Limits;
use leasehold::metrics::RpcMetrics;
use leasehold::node::Node;
use leasehold::proofs::Proofs;
use leasehold::read_budget::BudgetLimits;
use leasehold::server;
use leasehold::server::auth::Auth;
use leasehold::server::tls::{Tls, TlsFiles};
use leasehold::store::sled::SledStore;

use crate::cli::parse_duration;

/// Where the server keeps leases and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum StoreKind {
    /// The embedded store (sled) in --data-dir: one server.
    Sled,
    /// An etcd cluster (--etcd-endpoints): any number of stateless
    /// frontends.
    Etcd,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Where leases and values live.
    #[arg(long, env = "LEASEHOLD_STORE", value_enum, default_value = "sled")]
    store: StoreKind,
    /// With --store etcd: the etcd members' client URLs, comma-separated.
    #[arg(
        long,
        env = "LEASEHOLD_ETCD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    etcd_endpoints: Vec<String>,
    /// With --store etcd: every key leasehold writes starts with this.
    /// Frontends that share a prefix serve the same jobs.
    #[arg(long, env = "LEASEHOLD_ETCD_PREFIX", default_value = "leasehold/")]
    etcd_prefix: String,
    /// With --store etcd: how long an operation waits for etcd before it
    /// fails with UNAVAILABLE.
    #[arg(long, env = "LEASEHOLD_ETCD_TIMEOUT", value_parser = parse_duration, default_value = "5s")]
    etcd_timeout: Duration,
    /// With --store etcd: TTL of this frontend's session lease, which its
    /// waiting Acquires' places in line are bound to (how long a dead
    /// frontend's waiters hold up the line). Whole seconds.
    #[arg(long, env = "LEASEHOLD_ETCD_SESSION_TTL", value_parser = parse_duration, default_value = "5s")]
    etcd_session_ttl: Duration,
    /// With --store etcd: compact etcd's history this often, up to the
    /// revision read one period before, so that etcd's space follows live
    /// data. 0 never compacts (for an etcd that compacts itself).
    #[arg(long, env = "LEASEHOLD_ETCD_COMPACT_EVERY", value_parser = parse_duration, default_value = "5m")]
    etcd_compact_every: Duration,
    /// With --store etcd: the CA (PEM) that signed the etcd members'
    /// certificates; the endpoints are then https://.
    #[arg(long, env = "LEASEHOLD_ETCD_CA")]
    etcd_ca: Option<PathBuf>,
    /// With --store etcd: a client certificate (PEM) for members that ask
    /// for one (etcd's --client-cert-auth); with --etcd-key.
    #[arg(long, env = "LEASEHOLD_ETCD_CERT", requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// With --store etcd: the key (PEM) of --etcd-cert.
    #[arg(long, env = "LEASEHOLD_ETCD_KEY", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// With --store etcd: the etcd user to log in as (etcd's `auth
    /// enable`); its password comes from the LEASEHOLD_ETCD_PASSWORD
    /// environment variable, never from a flag.
    #[arg(long, env = "LEASEHOLD_ETCD_USER")]
    etcd_user: Option<String>,
    /// With --store etcd: record this frontend's shared settings (--min-ttl,
    /// --max-ttl, --history-per-job, --max-keys-per-job, whether --policy
    /// is given) under the prefix even when they differ from the ones the
    /// frontends there recorded. Without it, a frontend whose settings
    /// differ refuses to start, naming each one. For changing them: restart
    /// every frontend with the new settings, the first with this flag.
    #[arg(long, env = "LEASEHOLD_REPLACE_SHARED_SETTINGS")]
    replace_shared_settings: bool,
    /// Address for the gRPC API.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Address for /metrics and /healthz.
    #[arg(long, env = "LEASEHOLD_ADMIN_LISTEN", default_value = "127.0.0.1:9464")]
    admin_listen: SocketAddr,
    /// Where the embedded store keeps its files (--store sled).
    #[arg(long, env = "LEASEHOLD_DATA_DIR", default_value = "./leasehold-data")]
    data_dir: PathBuf,
    /// An Ed25519 private key (PKCS#8 PEM, as `openssl genpkey -algorithm
    /// ed25519` writes it) that signs grants' proofs. Repeat it to rotate:
    /// the first signs, all verify (GET /keys, GetSigningKeys). etcd
    /// frontends share theirs this way; without one they sign nothing. The
    /// single node also lists its data dir's own key, after these.
    #[arg(long = "signing-key", value_name = "FILE")]
    signing_keys: Vec<PathBuf>,
    /// Make a new signing key in a data dir whose key was made and is lost
    /// for good (without it, that start is refused). Proofs made under the
    /// lost key no longer verify.
    #[arg(long)]
    new_signing_key: bool,
    /// Sign nothing: grants carry no proof, the key set is empty, and a
    /// data dir's key is neither made nor read. For storage that needs no
    /// proof, or to measure what signing costs.
    #[arg(long, conflicts_with_all = ["signing_keys", "new_signing_key"])]
    no_signing: bool,
    /// Serve the chaos API (`leasehold chaos`, chaos.proto): users' tests
    /// make a worker lose its lease, stall or be fenced on purpose. For
    /// test and staging servers. On a listener that is not loopback, only
    /// callers a --policy grants the action `chaos` may use it.
    #[arg(long, env = "LEASEHOLD_ENABLE_CHAOS")]
    enable_chaos: bool,
    /// Shortest lease TTL accepted; default 100ms on sled, etcd's minimum
    /// lease TTL (2s by default) on etcd.
    #[arg(long, env = "LEASEHOLD_MIN_TTL", value_parser = parse_duration)]
    min_ttl: Option<Duration>,
    /// Longest lease TTL accepted.
    #[arg(long, env = "LEASEHOLD_MAX_TTL", value_parser = parse_duration, default_value = "1h")]
    max_ttl: Duration,
    /// Longest an Acquire may wait.
    #[arg(long, env = "LEASEHOLD_MAX_WAIT", value_parser = parse_duration, default_value = "1h")]
    max_wait: Duration,
    /// Longest job or holder name, in bytes.
    #[arg(long, env = "LEASEHOLD_MAX_NAME_BYTES", default_value_t = 256)]
    max_name_bytes: usize,
    /// Longest key, in bytes.
    #[arg(long, env = "LEASEHOLD_MAX_KEY_BYTES", default_value_t = 1024)]
    max_key_bytes: usize,
    /// Largest value, in bytes.
    #[arg(long, env = "LEASEHOLD_MAX_VALUE_BYTES", default_value_t = 65536)]
    max_value_bytes: usize,
    /// How long in-flight calls may take to finish on shutdown.
    #[arg(long, env = "LEASEHOLD_DRAIN_TIMEOUT", value_parser = parse_duration, default_value = "10s")]
    drain_timeout: Duration,
    /// Connections open at once; more are closed on accept.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS", default_value_t = 4096)]
    max_connections: usize,
    /// Connections open at once from one client address (an IPv6
    /// client's /64); more are closed on accept.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 256
    )]
    max_connections_per_address: usize,
    /// Calls in flight at once (waiting Acquires included); more are
    /// answered RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_IN_FLIGHT", default_value_t = 10_000)]
    max_in_flight: usize,
    /// Calls open at once on one connection (waiting Acquires, open
    /// streams), in each budget; more are answered OVERLOADED. Renewals
    /// (Renew, KeepAlive) have a budget of their own.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_IN_FLIGHT_PER_CONNECTION",
        default_value_t = 1_000
    )]
    max_in_flight_per_connection: usize,
    /// Bytes (keys and values) one connection's CheckedWrites and
    /// WriteStreams may write per second, a second's worth at once; more
    /// wait (the call is slowed, not refused), so that one client's flood
    /// of writes cannot take the cores from other callers' renewals.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_WRITE_RATE_PER_CONNECTION",
        default_value_t = leasehold::server::DEFAULT_MAX_WRITE_RATE_PER_CONNECTION
    )]
    max_write_rate_per_connection: u64,
    /// Bytes of listings' answers (ListKeys, GetHistory, ListWaiters and
    /// ListLeases pages) one connection may read per second, a second's worth at once;
    /// more wait (slowed, not refused), so that loops of listings cannot
    /// take the cores from other callers' renewals.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_LISTING_RATE_PER_CONNECTION",
        default_value_t = leasehold::server::DEFAULT_MAX_LISTING_RATE_PER_CONNECTION
    )]
    max_listing_rate_per_connection: u64,
    /// Acquires one connection may make per second, a second's worth at
    /// once; more wait (slowed, not refused), so that one client's flood of
    /// new jobs cannot take the cores from other callers' renewals.
    /// Renewals are never slowed.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_ACQUIRE_RATE_PER_CONNECTION",
        default_value_t = leasehold::server::DEFAULT_MAX_ACQUIRE_RATE_PER_CONNECTION
    )]
    max_acquire_rate_per_connection: u64,
    /// Frames that carry no call (SETTINGS, PING, RST_STREAM, PRIORITY,
    /// CONTINUATION) and streams the server has to refuse or reset, that
    /// one connection may cost per second, two seconds' worth at once.
    /// Over it the connection's bytes wait (slowed); after 2 s of that its
    /// new calls but renewals are refused (OVERLOADED); after 5 s it is
    /// sent away with GOAWAY ENHANCE_YOUR_CALM, and its address's next
    /// connections wait before they are read.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_FRAME_RATE_PER_CONNECTION",
        default_value_t = leasehold::server::frames::DEFAULT_MAX_FRAME_RATE
    )]
    max_frame_rate_per_connection: u32,
    /// Bytes of large answers (Read, ListKeys, GetHistory) held for
    /// clients that have not read them yet, all connections together; one
    /// connection may hold a sixteenth (at least 4 MiB). An answer over
    /// either is refused, OVERLOADED: a client that never reads cannot
    /// make the server hold more.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_QUEUED_RESPONSE_BYTES",
        default_value_t = leasehold::server::DEFAULT_MAX_QUEUED_RESPONSE_BYTES
    )]
    max_queued_response_bytes: usize,
    /// A connection that holds answers and reads no byte of them for this
    /// long is closed, giving their memory back.
    #[arg(long, env = "LEASEHOLD_RESPONSE_STALL_TIMEOUT", value_parser = parse_duration, default_value = "30s")]
    response_stall_timeout: Duration,
    /// A connection that has not finished its TLS handshake and sent the
    /// HTTP/2 preface (on the admin port: the first byte of a request) this
    /// long after it was accepted is closed.
    #[arg(long, env = "LEASEHOLD_HANDSHAKE_TIMEOUT", value_parser = parse_duration, default_value = "5s")]
    handshake_timeout: Duration,
    /// A connection with no call open (no stream) for this long is closed.
    #[arg(long, env = "LEASEHOLD_IDLE_TIMEOUT", value_parser = parse_duration, default_value = "5m")]
    idle_timeout: Duration,
    /// HTTP/2 streams open at once on one connection (watches included).
    #[arg(
        long,
        env = "LEASEHOLD_MAX_STREAMS_PER_CONNECTION",
        default_value_t = 1024
    )]
    max_streams_per_connection: u32,
    /// The most jobs with series of their own on /metrics: those with a
    /// live leader first, then the most recently changed. The totals cover
    /// every job; leasehold_metrics_jobs_omitted counts the rest.
    #[arg(long, env = "LEASEHOLD_METRICS_MAX_JOBS", default_value_t = 1_000)]
    metrics_max_jobs: usize,
    /// WatchLease streams open at once; more are refused with
    /// RESOURCE_EXHAUSTED, reason QUOTA_EXCEEDED. Each costs 13 to 18 KB
    /// of memory (its stream, its HTTP/2 buffers): 10,000 is at most about
    /// 180 MB.
    #[arg(long, env = "LEASEHOLD_MAX_WATCHERS", default_value_t = 10_000)]
    max_watchers: usize,
    /// Bytes a second of status page JSON (/api/jobs, /api/job) each client
    /// (address, or principal with a policy) may read; past its burst an
    /// answer is held back, then refused with 429.
    #[arg(long, env = "LEASEHOLD_ADMIN_READ_RATE", default_value_t = leasehold::read_budget::DEFAULT_RATE)]
    admin_read_rate: u64,
    /// Bytes a second of status page JSON all clients together may read;
    /// past four of their bursts, answers are held back, then refused.
    #[arg(long, env = "LEASEHOLD_ADMIN_READ_RATE_TOTAL", default_value_t = leasehold::read_budget::DEFAULT_TOTAL_RATE)]
    admin_read_rate_total: u64,
    /// Bytes of status page JSON a client may read at once before
    /// --admin-read-rate applies.
    #[arg(long, env = "LEASEHOLD_ADMIN_READ_BURST", default_value_t = leasehold::read_budget::DEFAULT_BURST)]
    admin_read_burst: u64,
    /// The status page's event streams (/api/events) open at once, on the
    /// whole admin port (4 per client); more are answered 503.
    #[arg(long, env = "LEASEHOLD_MAX_EVENT_STREAMS", default_value_t = leasehold::read_budget::DEFAULT_MAX_EVENT_STREAMS)]
    max_event_streams: usize,
    /// Acquires waiting on one job at once; one more is granted if the
    /// lease is free, else refused with QUOTA_EXCEEDED.
    #[arg(long, env = "LEASEHOLD_MAX_WAITERS_PER_JOB", default_value_t = 10_000)]
    max_waiters_per_job: usize,
    /// Acquires waiting at once, on all jobs: one more is granted if the
    /// lease is free, else refused with QUOTA_EXCEEDED. A waiting Acquire
    /// counts here, not under --max-in-flight, so waiters never crowd out
    /// other calls.
    #[arg(long, env = "LEASEHOLD_MAX_WAITERS", default_value_t = 10_000)]
    max_waiters: usize,
    /// A watch whose client has left an event unread this long is closed
    /// with RESOURCE_EXHAUSTED, reason OVERLOADED (the server never buffers
    /// for it: the changes it missed are folded into the newest state).
    #[arg(long, env = "LEASEHOLD_WATCH_STALL_TIMEOUT", value_parser = parse_duration, default_value = "30s")]
    watch_stall_timeout: Duration,
    /// Jobs at once; an Acquire that would create one more is refused with
    /// QUOTA_EXCEEDED. `leasehold delete-job` gives room back. With a
    /// policy, a principal's `max_jobs` limits the jobs it created.
    #[arg(long, env = "LEASEHOLD_MAX_JOBS", default_value_t = 1_000_000)]
    max_jobs: usize,
    /// Keys of one job's fenced store, deleted keys included (a delete
    /// keeps a tombstone); a write of one more key is refused with
    /// QUOTA_EXCEEDED. Deleting the job gives the room back.
    #[arg(long, env = "LEASEHOLD_MAX_KEYS_PER_JOB", default_value_t = 10_000)]
    max_keys_per_job: usize,
    /// Single node: rewrite the store, reclaiming its disk space, whenever
    /// the data dir grows past this many times its live data (plus the
    /// write-ahead log's fixed size and 4 MiB); checked at each checkpoint
    /// and at start-up. Also rewrite it, giving back memory, when it
    /// settles after a burst of churn more than 4 times its live data.
    /// 0 never does either.
    #[arg(long, env = "LEASEHOLD_RECLAIM_RATIO", default_value_t = leasehold::store::sled::DEFAULT_RATIO)]
    reclaim_ratio: f64,
    /// Tenures kept in each job's history of leaders (`leasehold history`,
    /// GetHistory): those of its newest tokens. 0 keeps none.
    #[arg(long, env = "LEASEHOLD_HISTORY_PER_JOB", default_value_t = 100)]
    history_per_job: usize,
    /// Ping idle connections this often; drop peers that do not answer.
    #[arg(long, env = "LEASEHOLD_KEEPALIVE", value_parser = parse_duration, default_value = "30s")]
    keepalive: Duration,
    /// TLS on both ports: the server's certificate chain (PEM). Needs
    /// --tls-key. Read again on SIGHUP, and when the file changes.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "LEASEHOLD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: clients' certificates must be signed by this CA (PEM).
    /// Without --policy every client must present one; with it, a client
    /// may present a bearer token instead.
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Who may do what (TOML: [[principal]], its optional
    /// [principal.limits], and [[grant]]; see README). Every lease is then
    /// bound to the principal that acquired it. Read again on SIGHUP.
    #[arg(long, env = "LEASEHOLD_POLICY")]
    policy: Option<PathBuf>,
    /// Serve on an address other than loopback anyway: without --policy
    /// (anyone who reaches the port may take or release any lease), or with
    /// a policy but without TLS (bearer tokens cross the network in clear
    /// text).
    #[arg(long, env = "LEASEHOLD_INSECURE_ALLOW_REMOTE")]
    insecure_allow_remote: bool,
}

pub async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let mut limits = Limits {
        min_ttl: a.min_ttl.unwrap_or(Duration::from_millis(100)),
        max_ttl: a.max_ttl,
        max_wait: a.max_wait,
        max_name_bytes: a.max_name_bytes,
        max_key_bytes: a.max_key_bytes,
        max_value_bytes: a.max_value_bytes,
    };
    limits.validate().context("bad limits")?;
    // Every flag is checked before anything is opened or bound: a start
    // that prints "listening" has accepted all of them.
    for (flag, v) in [
        ("--max-connections", a.max_connections),
        (
            "--max-connections-per-address",
            a.max_connections_per_address,
        ),
        ("--max-in-flight", a.max_in_flight),
        (
            "--max-in-flight-per-connection",
            a.max_in_flight_per_connection,
        ),
        ("--max-watchers", a.max_watchers),
        ("--max-waiters-per-job", a.max_waiters_per_job),
        ("--max-jobs", a.max_jobs),
        ("--max-waiters", a.max_waiters),
        ("--max-keys-per-job", a.max_keys_per_job),
        (
            "--max-write-rate-per-connection",
            a.max_write_rate_per_connection as usize,
        ),
        (
            "--max-acquire-rate-per-connection",
            a.max_acquire_rate_per_connection as usize,
        ),
        (
            "--max-listing-rate-per-connection",
            a.max_listing_rate_per_connection as usize,
        ),
        (
            "--max-streams-per-connection",
            a.max_streams_per_connection as usize,
        ),
        (
            "--max-frame-rate-per-connection",
            a.max_frame_rate_per_connection as usize,
        ),
        ("--max-queued-response-bytes", a.max_queued_response_bytes),
    ] {
        if v == 0 {
            bail!("{flag} must be at least 1");
        }
    }
    if let Err(why) = leasehold::store::sled::check_ratio(a.reclaim_ratio) {
        bail!("--reclaim-ratio {why}");
    }
    if !a.etcd_compact_every.is_zero() && a.etcd_compact_every < Duration::from_secs(1) {
        bail!(
            "--etcd-compact-every is {:?}: it must be 0 (never compact) or at least 1s",
            a.etcd_compact_every
        );
    }
    let budget = BudgetLimits {
        rate: a.admin_read_rate,
        burst: a.admin_read_burst,
        total_rate: a.admin_read_rate_total,
        max_event_streams: a.max_event_streams,
    };
    if let Err(e) = budget.validate() {
        bail!("{e}");
    }
    for (flag, v) in [
        ("--handshake-timeout", a.handshake_timeout),
        ("--idle-timeout", a.idle_timeout),
        ("--watch-stall-timeout", a.watch_stall_timeout),
        ("--response-stall-timeout", a.response_stall_timeout),
    ] {
        if v.is_zero() {
            bail!("{flag} must be above zero");
        }
    }
    if a.policy.is_some() && a.tls_cert.is_none() && !a.insecure_allow_remote {
        for (flag, addr) in [("--listen", a.listen), ("--admin-listen", a.admin_listen)] {
            if !addr.ip().is_loopback() {
                bail!(
                    "{flag} {addr} is not a loopback address, and there is a --policy but no \
                     --tls-cert: bearer tokens would cross the network in clear text, and anyone \
                     on the path could replay them. Give --tls-cert/--tls-key, or \
                     --insecure-allow-remote to serve it in clear text anyway"
                );
            }
        }
    }
    if a.policy.is_none() && !a.insecure_allow_remote {
        for (flag, addr) in [("--listen", a.listen), ("--admin-listen", a.admin_listen)] {
            if !addr.ip().is_loopback() {
                bail!(
                    "{flag} {addr} is not a loopback address, and there is no --policy: anyone \
                     who reaches it could take, release or write any job. Give a --policy \
                     (with --tls-cert/--tls-key), or --insecure-allow-remote to serve it \
                     open anyway"
                );
            }
        }
    }
    let rpc = Arc::new(RpcMetrics::default());
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => Some(
            Tls::load(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: a.tls_client_ca.clone(),
                client_cert_required: a.policy.is_none(),
            })
            .context("cannot load TLS")?,
        ),
        _ => None,
    };
    let auth = match &a.policy {
        Some(p) => Some(Auth::load(p.clone(), rpc.clone()).context("cannot load the policy")?),
        None => None,
    };
    let state_limits = StateLimits {
        max_jobs: a.max_jobs,
        max_keys_per_job: a.max_keys_per_job,
        history_per_job: a.history_per_job,
    };
    // A damaged or lost key refuses the start before the store opens, so
    // that the data dir is left as it was; a key is made only once the
    // store opened (a data dir the store refuses gets none).
    if matches!(a.store, StoreKind::Sled) && !a.no_signing {
        leasehold::proofs::precheck_data_dir(&a.data_dir, a.new_signing_key)
            .map_err(|e| anyhow::anyhow!(e))
            .context("cannot load the signing keys")?;
    }
    let (node, place): (Backend, String) = match a.store {
        StoreKind::Sled => {
            let store = SledStore::open_reclaiming(&a.data_dir, a.reclaim_ratio)
                .context("cannot open the store")?;
            let node =
                Node::open_with(Arc::new(store), state_limits).context("cannot load the store")?;
            // Reading a large store frees most of what it allocated (sled's
            // pages, each record's copy); give that back now rather than at
            // the first periodic look, seconds after the server listens.
            leasehold::server::memory::trim_if_slack();
            #[cfg(feature = "fault-injection")]
            if let Ok(rules) = std::env::var("LEASEHOLD_BREAK") {
                node.break_rules(&rules).context("LEASEHOLD_BREAK")?;
            }
            (node.into(), format!("data_dir={}", a.data_dir.display()))
        }
        StoreKind::Etcd => {
            let config = etcd::Config {
                endpoints: a.etcd_endpoints.clone(),
                prefix: a.etcd_prefix.clone(),
                timeout: a.etcd_timeout,
                session_ttl: a.etcd_session_ttl,
                compact_every: a.etcd_compact_every,
                security: etcd_security(&a)?,
                limits: state_limits,
            };
            let node = EtcdNode::open(config)
                .await
                .with_context(|| format!("cannot reach etcd at {}", a.etcd_endpoints.join(",")))?;
            #[cfg(feature = "fault-injection")]
            if let Ok(rules) = std::env::var("LEASEHOLD_BREAK") {
                node.break_rules(&rules).context("LEASEHOLD_BREAK")?;
            }
            // The bounds obey the backend's own TTL rule (whole seconds, at
            // least etcd's minimum lease TTL): the same check as each call's.
            let min = node.min_ttl();
            limits.min_ttl = a.min_ttl.unwrap_or(min);
            for (flag, v) in [("--min-ttl", limits.min_ttl), ("--max-ttl", limits.max_ttl)] {
                node.check_ttl(v)
                    .map_err(|e| anyhow::anyhow!("{flag} {v:?}: {e}"))?;
            }
            limits.validate().context("bad limits")?;
            let shared = etcd::SharedSettings {
                min_ttl: limits.min_ttl,
                max_ttl: limits.max_ttl,
                history_per_job: a.history_per_job,
                max_keys_per_job: a.max_keys_per_job,
                policy: a.policy.is_some(),
            };
            node.agree_on_settings(&shared, a.replace_shared_settings)
                .await
                .context("the frontends on this prefix disagree")?;
            (
                node.into(),
                format!(
                    "etcd={} prefix={:?} min_ttl={min:?}",
                    a.etcd_endpoints.join(","),
                    a.etcd_prefix
                ),
            )
        }
    };
    // The keys after the store: a data dir that cannot be opened says so
    // first, and the store's own refusals come before the key's.
    let proofs = Arc::new(if a.no_signing {
        Proofs::none()
    } else {
        Proofs::load(
            &a.signing_keys,
            matches!(a.store, StoreKind::Sled).then_some(a.data_dir.as_path()),
            a.new_signing_key,
        )
        .map_err(|e| anyhow::anyhow!(e))
        .context("cannot load the signing keys")?
    });
    if proofs.keys().keys.is_empty() && !a.no_signing {
        tracing::warn!("no --signing-key: grants carry no proof, and GetSigningKeys lists no key");
    }
    let chaos = Arc::new(leasehold::server::chaos::ChaosState::default());
    if a.enable_chaos {
        tracing::warn!(
            "--enable-chaos: the chaos API can end, stall and fence any job's lease on purpose; \
             for test and staging servers"
        );
    }
    // Bind both listeners before serving, so that "listening" means it.
    let listener = TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))?;
    let admin = TcpListener::bind(a.admin_listen)
        .await
        .with_context(|| format!("cannot listen on {} (admin)", a.admin_listen))?;
    let addr = listener.local_addr()?;
    let admin_addr = admin.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let security = AdminSecurity {
        tls: tls.clone(),
        auth: auth.clone(),
    };
    let options = AdminOptions {
        metrics_max_jobs: a.metrics_max_jobs,
        handshake_timeout: a.handshake_timeout,
        limits: limits.clone(),
        budget,
        proofs: proofs.clone(),
        chaos: chaos.clone(),
    };
    let admin_task = tokio::spawn(serve_admin(
        admin,
        node.clone(),
        rpc.clone(),
        security,
        options,
        {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        },
    ));
    tracing::info!(
        %addr,
        %admin_addr,
        store = %place,
        tls = tls.is_some(),
        mtls = a.tls_client_ca.is_some(),
        policy = ?a.policy,
        "serving"
    );
    if auth.is_some()
        && tls.is_none()
        && !(addr.ip().is_loopback() && admin_addr.ip().is_loopback())
    {
        tracing::warn!(
            %addr,
            %admin_addr,
            "--policy without --tls-cert on a non-loopback address: bearer tokens cross the \
             network in clear text, and anyone on the path can replay them"
        );
    }
    if auth.is_none() && a.insecure_allow_remote {
        tokio::spawn(warn_open(addr, admin_addr));
    }
    reload_on_sighup(tls.clone(), auth.clone())?;
    if let Some(tls) = &tls {
        tokio::spawn(reload_changed_certs(tls.clone()));
    }
    // Handlers first: "listening" promises a graceful shutdown on SIGTERM.
    let shutdown = shutdown_signal()?;
    println!("leasehold listening on {addr} admin {admin_addr}");
    std::io::stdout().flush()?;
    let config = server::Config {
        limits,
        drain_timeout: a.drain_timeout,
        max_connections: a.max_connections,
        max_connections_per_address: a.max_connections_per_address,
        max_in_flight: a.max_in_flight,
        max_in_flight_per_connection: a.max_in_flight_per_connection,
        max_write_rate_per_connection: a.max_write_rate_per_connection,
        max_listing_rate_per_connection: a.max_listing_rate_per_connection,
        max_acquire_rate_per_connection: a.max_acquire_rate_per_connection,
        max_frame_rate_per_connection: a.max_frame_rate_per_connection,
        max_queued_response_bytes: a.max_queued_response_bytes,
        response_stall_timeout: a.response_stall_timeout,
        handshake_timeout: a.handshake_timeout,
        idle_timeout: a.idle_timeout,
        max_streams_per_connection: a.max_streams_per_connection,
        max_watchers: a.max_watchers,
        max_waiters_per_job: a.max_waiters_per_job,
        watch_stall_timeout: a.watch_stall_timeout,
        max_waiters: a.max_waiters,
        keepalive: a.keepalive,
        tls,
        auth,
        proofs,
        enable_chaos: a.enable_chaos,
        chaos: chaos.clone(),
    };
    server::run(listener, node, config, rpc, shutdown).await?;
    let _ = stop_tx.send(true);
    let _ = admin_task.await;
    Ok(())
}

/// Logs at start-up and every hour that the server runs open on a
/// non-loopback address (`--insecure-allow-remote` without `--policy`).
async fn warn_open(addr: SocketAddr, admin: SocketAddr) {
    loop {
        tracing::warn!(
            %addr,
            %admin,
            "--insecure-allow-remote without --policy: anyone who reaches these ports may take, \
             release or write any job"
        );
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// On SIGHUP, reads the TLS files and the policy again. What fails to load
/// is logged and the one in use is kept.
fn reload_on_sighup(tls: Option<Arc<Tls>>, auth: Option<Arc<Auth>>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup()).context("install the SIGHUP handler")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            if let Some(tls) = &tls {
                match tls.reload() {
                    Ok(()) => tracing::info!("SIGHUP: TLS certificates reloaded"),
                    Err(e) => {
                        tracing::error!(error = %e, "SIGHUP: TLS not reloaded; the old certificates stay")
                    }
                }
            }
            if let Some(auth) = &auth {
                match auth.reload() {
                    Ok(()) => {
                        tracing::info!(policy = %auth.path().display(), "SIGHUP: policy reloaded")
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "SIGHUP: policy not reloaded; the old one stays")
                    }
                }
            }
        }
    });
    Ok(())
}

/// Reloads the TLS files when one changes on disk (checked every 5 s), as a
/// SIGHUP would: a certificate renewed by a tool that sends no signal.
async fn reload_changed_certs(tls: Arc<Tls>) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if tls.changed_on_disk() {
            match tls.reload() {
                Ok(()) => tracing::info!("TLS certificates changed on disk: reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "TLS files changed on disk but do not load; the old certificates stay")
                }
            }
        }
    }
}

/// Completes on SIGINT or SIGTERM (containers send SIGTERM).
///
/// The handlers are installed here, when called, not when the future is
/// first polled: a signal that arrives right after start-up must drain and
/// sync like any other, not kill the process.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("install the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

/// Whether an etcd endpoint (`http://host:port`, or `host:port`) is on
/// this machine: `localhost` or a loopback address.
fn is_loopback_endpoint(endpoint: &str) -> bool {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The etcd flags' TLS files and user, read; the password from
/// LEASEHOLD_ETCD_PASSWORD. A user over a clear-text endpoint off this
/// machine is refused, unless --insecure-allow-remote.
fn etcd_security(a: &ServeArgs) -> anyhow::Result<etcd::client::Security> {
    let read = |flag: &str, p: &PathBuf| {
        std::fs::read(p).with_context(|| format!("{flag} {}: cannot read it", p.display()))
    };
    let ca_pem = a
        .etcd_ca
        .as_ref()
        .map(|p| read("--etcd-ca", p))
        .transpose()?;
    let identity = match (&a.etcd_cert, &a.etcd_key) {
        (Some(c), Some(k)) => Some((read("--etcd-cert", c)?, read("--etcd-key", k)?)),
        _ => None,
    };
    let user = match &a.etcd_user {
        Some(u) => {
            if let Some(e) = a
                .etcd_endpoints
                .iter()
                .find(|e| !e.starts_with("https://") && !is_loopback_endpoint(e))
            {
                if !a.insecure_allow_remote {
                    bail!(
                        "--etcd-user {u:?} with the clear-text endpoint {e:?}: the password and \
                         the token etcd gives for it would cross the network readable by anyone \
                         on the path. Use https:// endpoints (--etcd-ca), or \
                         --insecure-allow-remote to send them in clear text anyway"
                    );
                }
                tracing::warn!(endpoint = %e, "--etcd-user over a clear-text endpoint");
            }
            let password = std::env::var("LEASEHOLD_ETCD_PASSWORD").map_err(|_| {
                anyhow::anyhow!(
                    "--etcd-user {u:?}: set its password in the LEASEHOLD_ETCD_PASSWORD \
                     environment variable (never on the command line, where ps shows it)"
                )
            })?;
            Some((u.clone(), password))
        }
        None => None,
    };
    Ok(etcd::client::Security {
        ca_pem,
        identity,
        user,
    })
}

#[cfg(test)]
mod tests {
    use super::is_loopback_endpoint;

    #[test]
    fn an_endpoint_is_loopback_only_on_this_machine() {
        for e in [
            "http://127.0.0.1:2379",
            "127.0.0.1:2379",
            "http://localhost:2379",
            "http://[::1]:2379",
            "http://127.0.0.2:2379/",
        ] {
            assert!(is_loopback_endpoint(e), "{e}");
        }
        for e in [
            "http://10.0.0.1:2379",
            "http://etcd-0.etcd:2379",
            "http://[2001:db8::1]:2379",
            "http://localhost.example.com:2379",
            "http://127.0.0.1.example.com:2379",
        ] {
            assert!(!is_loopback_endpoint(e), "{e}");
        }
    }
}
