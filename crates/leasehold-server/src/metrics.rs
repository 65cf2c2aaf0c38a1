//! Leadership as a metric: `/metrics` on the admin port, through
//! prometheus-client, in the Prometheus text format (version 0.0.4).
//!
//! Per job: whether a leader is present, its token, and how long the job has
//! been without a leader. Counters for grants, takeovers, expiries,
//! releases, renew losses and fenced writes (split-brain attempts show up
//! here), a latency histogram per RPC, and group commit's syncs (how many,
//! how many changes each, how long).
//!
//! Where each comes from:
//! - [`RpcMetrics`], fed by the server's tower layer on every call: the
//!   per-RPC latency histograms and response counters. Every method's
//!   series exist from the start and a call reaches its own by index, so
//!   it costs a few relaxed atomic adds: no lock, no allocation, no map.
//! - [`Backend::snapshot`], taken at scrape time by a [`Collector`]:
//!   per-job leadership (at most `--metrics-max-jobs` jobs, picked in one
//!   pass by `leasehold-backend`'s `Picker`, with totals over all; the
//!   single node walks its table in chunks, each under the state lock on
//!   its own), the lease rules' counters, the store's failures and
//!   recoveries, and waiting acquires; then, on the single node, the
//!   store's integrity ([`Backend::integrity`]) and group commit's
//!   counters ([`Backend::sync_stats`]). All of it is state the backend
//!   keeps anyway: a renewal updates no metric of its own.
//! - group commit's sync-duration histogram, a prometheus-client
//!   `Histogram` that the running sync feeds once per sync (see
//!   `leasehold_node::commit`), reached through [`Backend::sync_stats`].
//!
//! [`registry`] puts them together; [`encode`] renders a registry.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, DescriptorEncoder, EncodeGaugeValue, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use prost::Message;

use crate::backend::Backend;
use crate::lease::{JobName, Leadership};
use crate::proto;

/// The `Content-Type` of what [`encode`] writes.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The RPC methods with their own series, as request paths
/// (`/leasehold.v1.Leases/Acquire`): every method of every service of a
/// `leasehold.*` package in the descriptor set, in its order, then
/// `other`, which any other path (health, reflection) counts under.
static METHODS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let set = prost_types::FileDescriptorSet::decode(proto::FILE_DESCRIPTOR_SET)
        .expect("the descriptor set built with the server decodes");
    let mut paths = Vec::new();
    for file in &set.file {
        let package = file.package();
        if package != "leasehold" && !package.starts_with("leasehold.") {
            continue;
        }
        for service in &file.service {
            for method in &service.method {
                paths.push(format!("/{package}.{}/{}", service.name(), method.name()));
            }
        }
    }
    paths.push("other".to_owned());
    paths
});

/// Histogram bucket upper bounds, in seconds.
const BUCKETS: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0,
];

/// gRPC status codes 0..=16, by their canonical names.
const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];
const CODES: usize = CODE_NAMES.len();

/// A latency histogram over [`BUCKETS`] kept in atomics alone, so that an
/// observation takes no lock (prometheus-client's `Histogram` takes a
/// mutex on each); prometheus-client encodes it.
#[derive(Debug, Default)]
struct Latency {
    /// Observations per bucket, not cumulative; the last one is `+Inf`'s
    /// own (slower than every bound).
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Latency {
    fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let b = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.buckets[b].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }
}

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        // The count is the buckets' total, so that it always equals the
        // `+Inf` bucket even while calls are being recorded.
        let buckets: [(f64, u64); BUCKETS.len() + 1] = std::array::from_fn(|i| {
            let bound = BUCKETS.get(i).copied().unwrap_or(f64::INFINITY);
            (bound, self.buckets[i].load(Ordering::Relaxed))
        });
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// One method's series.
#[derive(Debug, Default)]
struct MethodStats {
    latency: Latency,
    /// Calls ended, by status code.
    codes: [Counter; CODES],
}

/// Per-RPC latency and status counts, recorded by the server's tower layer.
///
/// Every method's series are made here, once; a call finds its own by the
/// index in its [`RpcMethod`].
#[derive(Debug)]
pub struct RpcMetrics {
    methods: Box<[MethodStats]>,
    /// Calls refused by the policy, by reason and action
    /// (`leasehold_auth_denied_total`).
    denied: [[Counter; DENIED_ACTIONS.len()]; DENIED_REASONS.len()],
    /// Chaos actions taken (`leasehold_chaos_actions_total`), by action.
    chaos: [Counter; CHAOS_ACTIONS.len()],
    /// Calls refused at a limit, by the limit's flag
    /// (`leasehold_overloaded_total`, `leasehold_quota_exceeded_total`).
    refused: [Counter; REFUSAL_LIMITS.len()],
    /// Writes that waited for their connection's write rate
    /// (`leasehold_writes_paced_total`), and how long, all together
    /// (`leasehold_write_pacing_seconds_total`).
    paced: Counter,
    paced_seconds: Counter<f64, AtomicU64>,
    /// Acquires that waited for their connection's Acquire rate
    /// (`leasehold_acquires_paced_total`), and how long
    /// (`leasehold_acquire_pacing_seconds_total`).
    paced_acquires: Counter,
    paced_acquires_seconds: Counter<f64, AtomicU64>,
    /// Listings that waited for their connection's listing rate
    /// (`leasehold_listings_paced_total`), and how long
    /// (`leasehold_listing_pacing_seconds_total`).
    paced_listings: Counter,
    paced_listings_seconds: Counter<f64, AtomicU64>,
    /// Shard groups as this server's `Join` streams see them.
    pub shards: Arc<crate::server::shards::ShardStats>,
}

/// The `limit` label values of `leasehold_overloaded_total` (the first
/// eight) and `leasehold_quota_exceeded_total` (the rest): the flags, and
/// the policy's fields for the limits a principal has of its own
/// (`[principal.limits]`), all principals together.
pub const REFUSAL_LIMITS: [&str; 17] = [
    "--max-in-flight",
    "--max-in-flight-per-connection",
    "max_in_flight",
    "--watch-stall-timeout",
    "--max-frame-rate-per-connection",
    "--max-queued-response-bytes",
    "max_frame_rate",
    "max_queued_response_kib",
    "--max-watchers",
    "--max-waiters-per-job",
    "max_watchers",
    "max_waiters_per_job",
    "--max-jobs",
    "--max-keys-per-job",
    "--max-waiters",
    "max_waiters",
    "max_jobs",
];
/// How many of [`REFUSAL_LIMITS`] are `leasehold_overloaded_total`'s.
const OVERLOAD_LIMITS: usize = 8;

/// The `reason` label values of `leasehold_auth_denied_total`:
/// `throttled` counts the calls refused unread from an address past its
/// failed authentications.
pub const DENIED_REASONS: [&str; 3] = ["unauthenticated", "throttled", "permission_denied"];
/// The `action` label values of `leasehold_auth_denied_total`: the
/// policy's actions, and `none` for a call refused before it named one.
pub const DENIED_ACTIONS: [&str; 6] = ["lease", "write", "read", "admin", "chaos", "none"];

/// The `action` label values of `leasehold_chaos_actions_total`.
pub const CHAOS_ACTIONS: [&str; 6] = ["expire", "pause", "delay", "fence", "transfer", "clear"];

impl Default for RpcMetrics {
    fn default() -> Self {
        RpcMetrics {
            methods: METHODS.iter().map(|_| MethodStats::default()).collect(),
            denied: Default::default(),
            chaos: Default::default(),
            refused: Default::default(),
            paced: Counter::default(),
            paced_seconds: Counter::default(),
            paced_acquires: Counter::default(),
            paced_acquires_seconds: Counter::default(),
            shards: Arc::default(),
            paced_listings: Counter::default(),
            paced_listings_seconds: Counter::default(),
        }
    }
}

/// The method a call counts under in [`RpcMetrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcMethod(usize);

impl RpcMetrics {
    /// The method a call of `path` (`/leasehold.v1.Leases/Acquire`)
    /// counts under: its own, or `other`.
    pub fn method(path: &str) -> RpcMethod {
        RpcMethod(
            METHODS
                .iter()
                .position(|m| m == path)
                .unwrap_or(METHODS.len() - 1),
        )
    }

    /// Records that a call of `method` was answered (its response began)
    /// `elapsed` after it arrived: the latency histogram.
    pub fn answered(&self, method: RpcMethod, elapsed: Duration) {
        self.methods[method.0].latency.observe(elapsed);
    }

    /// Records that a call of `method` ended with gRPC status `code`: for a
    /// stream, when it ends, with the status it ended with.
    pub fn ended(&self, method: RpcMethod, code: usize) {
        self.methods[method.0].codes[code.min(CODES - 1)].inc();
    }

    /// Counts a chaos action, one of [`CHAOS_ACTIONS`].
    pub fn chaos(&self, action: &str) {
        if let Some(i) = CHAOS_ACTIONS.iter().position(|x| *x == action) {
            self.chaos[i].inc();
        }
    }

    /// Counts a call refused by the policy. `reason` and `action` are
    /// values of [`DENIED_REASONS`] and [`DENIED_ACTIONS`] (another counts
    /// as the last of each).
    pub fn denied(&self, reason: &str, action: &str) {
        let r = DENIED_REASONS
            .iter()
            .position(|x| *x == reason)
            .unwrap_or(DENIED_REASONS.len() - 1);
        let a = DENIED_ACTIONS
            .iter()
            .position(|x| *x == action)
            .unwrap_or(DENIED_ACTIONS.len() - 1);
        self.denied[r][a].inc();
    }

    /// Counts a call refused at `limit`, one of [`REFUSAL_LIMITS`] (the
    /// flag named in its OVERLOADED or QUOTA_EXCEEDED status).
    pub fn refused(&self, limit: &str) {
        if let Some(i) = REFUSAL_LIMITS.iter().position(|x| *x == limit) {
            self.refused[i].inc();
        }
    }

    /// Counts a write that waited `wait` for its connection's write rate.
    pub fn paced(&self, wait: Duration) {
        self.paced.inc();
        self.paced_seconds.inc_by(wait.as_secs_f64());
    }

    /// Counts an Acquire that waited `wait` for its connection's Acquire
    /// rate.
    pub fn paced_acquire(&self, wait: Duration) {
        self.paced_acquires.inc();
        self.paced_acquires_seconds.inc_by(wait.as_secs_f64());
    }

    /// Counts a listing whose answer waited `wait` for its connection's
    /// listing rate.
    pub fn paced_listing(&self, wait: Duration) {
        self.paced_listings.inc();
        self.paced_listings_seconds.inc_by(wait.as_secs_f64());
    }

    /// Listings that waited for their connection's listing rate so far.
    pub fn paced_listings(&self) -> u64 {
        self.paced_listings.get()
    }

    /// Acquires that waited for their connection's Acquire rate so far.
    pub fn paced_acquires(&self) -> u64 {
        self.paced_acquires.get()
    }

    /// Writes that waited for their connection's write rate so far.
    pub fn paced_writes(&self) -> u64 {
        self.paced.get()
    }

    /// Calls refused at `limit` so far.
    pub fn refusals(&self, limit: &str) -> u64 {
        REFUSAL_LIMITS
            .iter()
            .position(|x| *x == limit)
            .map_or(0, |i| self.refused[i].get())
    }

    /// Each method's label value (`Acquire`, ..., `other`) and series.
    fn each(&self) -> impl Iterator<Item = (&'static str, &MethodStats)> {
        METHODS
            .iter()
            .map(|path| path.rsplit('/').next().unwrap_or(path))
            .zip(&self.methods)
    }
}

/// `leasehold_rpc_duration_seconds{method}`: every method, calls or not.
#[derive(Debug)]
struct RpcLatency(Arc<RpcMetrics>);

impl EncodeMetric for RpcLatency {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        for (method, m) in self.0.each() {
            m.latency
                .encode(encoder.encode_family(&[("method", method)])?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// `leasehold_rpc_responses_total{method,code}`: the codes that occurred.
#[derive(Debug)]
struct RpcResponses(Arc<RpcMetrics>);

impl EncodeMetric for RpcResponses {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        for (method, m) in self.0.each() {
            for (code, n) in CODE_NAMES.iter().zip(&m.codes) {
                if n.get() > 0 {
                    n.encode(encoder.encode_family(&[("method", method), ("code", code)])?)?;
                }
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// `leasehold_shards_owned{group,member}`, `leasehold_shard_moves_total{group}`
/// and `leasehold_shard_unowned_seconds_total{group}`: the shard groups
/// this server's `Join` streams see (`what` picks the family).
#[derive(Debug)]
struct Shards(Arc<RpcMetrics>, u8);

impl EncodeMetric for Shards {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        for (group, g) in self.0.shards.groups() {
            match self.1 {
                0 => {
                    for (member, n) in &g.owned {
                        ConstGauge::new(i64::from(*n)).encode(
                            encoder
                                .encode_family(&[("group", group.as_str()), ("member", member)])?,
                        )?;
                    }
                }
                1 => ConstCounter::new(g.moves)
                    .encode(encoder.encode_family(&[("group", group.as_str())])?)?,
                _ => ConstCounter::new(g.unowned_seconds)
                    .encode(encoder.encode_family(&[("group", group.as_str())])?)?,
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        match self.1 {
            0 => MetricType::Gauge,
            _ => MetricType::Counter,
        }
    }
}

/// `leasehold_auth_denied_total{reason,action}`: the pairs that occurred.
#[derive(Debug)]
struct AuthDenied(Arc<RpcMetrics>);

impl EncodeMetric for AuthDenied {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        for (reason, row) in DENIED_REASONS.iter().zip(&self.0.denied) {
            for (action, n) in DENIED_ACTIONS.iter().zip(row) {
                if n.get() > 0 {
                    n.encode(encoder.encode_family(&[("reason", *reason), ("action", *action)])?)?;
                }
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// `leasehold_chaos_actions_total{action}`: every action, taken or not.
#[derive(Debug)]
struct ChaosActions(Arc<RpcMetrics>);

impl EncodeMetric for ChaosActions {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        for (action, n) in CHAOS_ACTIONS.iter().zip(&self.0.chaos) {
            n.encode(encoder.encode_family(&[("action", *action)])?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// `leasehold_overloaded_total{limit}` (`quota: false`) or
/// `leasehold_quota_exceeded_total{limit}`: every limit, refusals or not.
#[derive(Debug)]
struct Refusals {
    rpc: Arc<RpcMetrics>,
    quota: bool,
}

impl EncodeMetric for Refusals {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        let range = if self.quota {
            OVERLOAD_LIMITS..REFUSAL_LIMITS.len()
        } else {
            0..OVERLOAD_LIMITS
        };
        for i in range {
            self.rpc.refused[i].encode(encoder.encode_family(&[("limit", REFUSAL_LIMITS[i])])?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// `leasehold_flood_steps_total{step}`: connections that reached each step
/// of the frame budget's ladder ([`crate::server::frames`]).
#[derive(Debug)]
struct FloodSteps;

impl EncodeMetric for FloodSteps {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        for (step, n) in crate::server::frames::STEPS.get() {
            ConstCounter::new(n).encode(encoder.encode_family(&[("step", step)])?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// The most jobs with series of their own on `/metrics`, unless set
/// (`--metrics-max-jobs`).
pub const DEFAULT_MAX_JOBS: usize = 1000;

/// Everything read from [`Backend::snapshot`], taken once per scrape, with
/// at most `max_jobs` jobs' own series.
struct SnapshotCollector {
    node: Backend,
    max_jobs: usize,
}

impl fmt::Debug for SnapshotCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SnapshotCollector")
    }
}

/// A counter's descriptor and its one sample. `name` without `_total`:
/// the encoder appends it.
fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    ConstCounter::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)
}

/// A gauge's descriptor and its one sample.
fn gauge(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: impl EncodeGaugeValue,
) -> fmt::Result {
    ConstGauge::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A gauge with a `job` label: one sample per job, `v` of its leadership.
fn job_gauge<V: EncodeGaugeValue>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    jobs: &[&(JobName, Leadership)],
    v: impl Fn(&Leadership) -> V,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (job, l) in jobs {
        ConstGauge::new(v(l)).encode(m.encode_family(&[("job", job.as_str())])?)?;
    }
    Ok(())
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let snap = self.node.snapshot_showing(self.max_jobs);
        let e = &mut e;
        let (total, led) = (snap.jobs.total, snap.jobs.led);
        let shown: Vec<&(JobName, Leadership)> = snap.jobs.shown.iter().collect();
        for (name, help, v) in [
            ("leasehold_jobs", "Jobs the server knows, all of them.", total),
            ("leasehold_jobs_led", "Jobs with a live leader.", led),
            (
                "leasehold_jobs_leaderless",
                "Jobs without a live leader.",
                total - led,
            ),
            (
                "leasehold_metrics_jobs_omitted",
                "Jobs left out of the per-job series (over --metrics-max-jobs): those with a live leader are shown first, then the most recently changed.",
                total - shown.len(),
            ),
        ] {
            gauge(e, name, help, v as u64)?;
        }
        job_gauge(
            e,
            "leasehold_job_leader",
            "1 if the job has a live leader, else 0.",
            &shown,
            |l| u32::from(matches!(l, Leadership::Led { .. })),
        )?;
        job_gauge(
            e,
            "leasehold_job_token",
            "The job's newest fencing token.",
            &shown,
            |l| match l {
                Leadership::Led { token } | Leadership::Vacant { token, .. } => token.0,
            },
        )?;
        job_gauge(
            e,
            "leasehold_job_leaderless_seconds",
            "How long the job has been without a leader; 0 while led.",
            &shown,
            |l| match l {
                Leadership::Led { .. } => 0.0,
                Leadership::Vacant { for_, .. } => for_.as_secs_f64(),
            },
        )?;

        let s = &snap.stats;
        for (name, help, v) in [
            ("leasehold_grants", "Grants that issued a new token.", s.grants),
            (
                "leasehold_takeovers",
                "Grants to a holder other than the previous one.",
                s.takeovers,
            ),
            (
                "leasehold_expiries",
                "Leases that ran out without renewal or release.",
                s.expiries,
            ),
            (
                "leasehold_releases",
                "Voluntary releases, and leases bound to a connection its client closed.",
                s.releases,
            ),
            (
                "leasehold_transfers",
                "Leases handed to a waiting successor (TransferLease).",
                s.transfers,
            ),
            (
                "leasehold_renewals",
                "Renewals that extended a lease: Renew calls and KeepAlive stream entries.",
                s.renewals,
            ),
            (
                "leasehold_renew_losses",
                "Renewals refused with LEASE_LOST.",
                s.renew_losses,
            ),
            (
                "leasehold_writes",
                "Fenced-store writes and deletes that passed the fence: CheckedWrite calls and WriteStream entries.",
                s.writes,
            ),
            (
                "leasehold_fenced_writes",
                "CheckedWrites refused with FENCED: writes by a stale leader.",
                s.fenced_writes,
            ),
            (
                "leasehold_store_failures",
                "Store failures. Single node: each put, sync or checkpoint whose error put the store out of service until it was reopened (the errors that follow from one are not counted again). etcd: calls to etcd that failed.",
                snap.store_failures,
            ),
            (
                "leasehold_store_recoveries",
                "Times the store was reopened from stable storage after a failure.",
                snap.store_recoveries,
            ),
            (
                "leasehold_unreadable_jobs",
                "Jobs a listing skipped because a record of theirs does not decode (etcd mode; each named in a WARN line).",
                snap.unreadable_jobs,
            ),
        ] {
            counter(e, name, help, v)?;
        }

        if let Some(sync) = &self.node.sync_stats() {
            counter(
                e,
                "leasehold_store_syncs",
                "Durability barriers run (one log write and one fdatasync each), failed ones included.",
                sync.syncs,
            )?;
            counter(
                e,
                "leasehold_store_synced_changes",
                "Changes made durable by those syncs; per sync, the mean group-commit batch.",
                sync.changes,
            )?;
            sync.duration.encode(e.encode_descriptor(
                "leasehold_store_sync_duration_seconds",
                "Time of one sync: the log write and the fdatasync.",
                None,
                MetricType::Histogram,
            )?)?;
        }

        if let Some(g) = self.node.group_stats() {
            for (name, help, v) in [
                (
                    "leasehold_etcd_group_keep_alives",
                    "etcd keep-alives of a KeepAlive stream's shared etcd lease that renewed the leases on it (etcd mode).",
                    g.keep_alives,
                ),
                (
                    "leasehold_etcd_group_joins",
                    "Leases moved onto a KeepAlive stream's shared etcd lease, joined or taken over from a stream before (etcd mode).",
                    g.joins,
                ),
                (
                    "leasehold_etcd_group_moves_off",
                    "Leases moved off a KeepAlive stream's shared etcd lease because the stream left them out of a message (etcd mode).",
                    g.moves_off,
                ),
            ] {
                counter(e, name, help, v)?;
            }
        }

        if let Some((floor, recovered)) = &self.node.integrity() {
            gauge(
                e,
                "leasehold_store_token_floor",
                "Every grant's token is above this; raised by `leasehold recover` and `leasehold restore`.",
                *floor,
            )?;
            let mut m = e.encode_descriptor(
                "leasehold_store_recovered",
                "1 when the data dir was recovered (damaged, what was readable kept) or restored from a backup; what was lost is in the WARN line at start-up and in `leasehold check`.",
                None,
                MetricType::Gauge,
            )?;
            for how in ["recovered", "restored"] {
                let v = recovered.as_ref().is_some_and(|r| r.starts_with(how));
                ConstGauge::new(u32::from(v)).encode(m.encode_family(&[("how", how)])?)?;
            }
        }

        gauge(
            e,
            "leasehold_waiting_acquires",
            "Acquire calls waiting for a lease.",
            snap.waiters,
        )
    }
}

/// Every metric of the server: `rpc`'s, and those of `node`'s snapshot,
/// taken at each scrape. Build it once and [`encode`] it per scrape.
/// At most `max_jobs` jobs have series of their own (see [`crate::backend::JobsShown::pick`]).
pub fn registry(node: Backend, rpc: Arc<RpcMetrics>, max_jobs: usize) -> Registry {
    let mut r = Registry::default();
    // `register` appends the full stop to these help texts.
    r.register(
        "leasehold_rpc_duration_seconds",
        "RPC latency, to the response headers",
        RpcLatency(rpc.clone()),
    );
    r.register(
        "leasehold_rpc_responses",
        "RPCs ended, by gRPC status code (a stream when it ends)",
        RpcResponses(rpc.clone()),
    );
    r.register(
        "leasehold_auth_denied",
        "Calls refused by the policy (--policy), by reason and action",
        AuthDenied(rpc.clone()),
    );
    r.register(
        "leasehold_chaos_actions",
        "Chaos API actions taken (serve --enable-chaos), by action",
        ChaosActions(rpc.clone()),
    );
    r.register(
        "leasehold_overloaded",
        "Calls refused with OVERLOADED, by the limit reached (its flag, or a principal's field)",
        Refusals {
            rpc: rpc.clone(),
            quota: false,
        },
    );
    r.register(
        "leasehold_writes_paced",
        "Writes (CheckedWrite, WriteStream messages) that waited for their connection's write rate (--max-write-rate-per-connection)",
        rpc.paced.clone(),
    );
    r.register(
        "leasehold_write_pacing_seconds",
        "Time writes waited for their connection's write rate, all together",
        rpc.paced_seconds.clone(),
    );
    r.register(
        "leasehold_acquires_paced",
        "Acquires that waited for their connection's Acquire rate (--max-acquire-rate-per-connection)",
        rpc.paced_acquires.clone(),
    );
    r.register(
        "leasehold_acquire_pacing_seconds",
        "Time Acquires waited for their connection's Acquire rate, all together",
        rpc.paced_acquires_seconds.clone(),
    );
    r.register(
        "leasehold_listings_paced",
        "Listings (ListKeys, GetHistory, ListWaiters, ListLeases pages) that waited for their connection's listing rate (--max-listing-rate-per-connection)",
        rpc.paced_listings.clone(),
    );
    r.register(
        "leasehold_listing_pacing_seconds",
        "Time listings waited for their connection's listing rate, all together",
        rpc.paced_listings_seconds.clone(),
    );
    r.register(
        "leasehold_flood_steps",
        "Connections over --max-frame-rate-per-connection, by the step they reached: slowed (their \
         bytes waited), refused (their calls were refused) and goaway (sent away)",
        FloodSteps,
    );
    r.register(
        "leasehold_quota_exceeded",
        "Calls refused with QUOTA_EXCEEDED, by the limit reached (its flag, or a principal's field)",
        Refusals {
            rpc: rpc.clone(),
            quota: true,
        },
    );
    r.register(
        "leasehold_shards_owned",
        "Shards each live member of a shard group owns, as this server's Join streams see the group",
        Shards(rpc.clone(), 0),
    );
    r.register(
        "leasehold_shard_moves",
        "Shards moved from one member to another by a handover (a revoke, then its release), by group",
        Shards(rpc.clone(), 1),
    );
    r.register(
        "leasehold_shard_unowned_seconds",
        "Shard-seconds without an owner, by group, as this server's Join streams saw the group",
        Shards(rpc, 2),
    );
    r.register_collector(Box::new(SnapshotCollector { node, max_jobs }));
    r
}

/// `registry`'s metrics in the Prometheus text format ([`CONTENT_TYPE`]).
pub fn encode(registry: &Registry) -> Result<String, fmt::Error> {
    let mut out = String::with_capacity(16 * 1024);
    prometheus_text::encode(&mut out, registry)?;
    Ok(out)
}

/// Renders every metric in the Prometheus text format: what `/metrics`
/// answers with the default [`DEFAULT_MAX_JOBS`].
pub fn render(node: &Backend, rpc: &Arc<RpcMetrics>) -> String {
    encode(&registry(node.clone(), rpc.clone(), DEFAULT_MAX_JOBS))
        .expect("writing to a String fails only if a metric refuses its encoder; none does")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::lease::{Limits, Token};
    use leasehold_node::Node;
    use leasehold_store::sled::SledStore;

    /// Every family `/metrics` shows for the single node: its name, type
    /// and label names (in order; `le` of histogram buckets aside).
    /// Dashboards and alerts name these: a change here is a breaking one.
    const FAMILIES: &[(&str, &str, &[&str])] = &[
        ("leasehold_job_leader", "gauge", &["job"]),
        ("leasehold_shards_owned", "gauge", &["group", "member"]),
        ("leasehold_shard_moves_total", "counter", &["group"]),
        (
            "leasehold_shard_unowned_seconds_total",
            "counter",
            &["group"],
        ),
        ("leasehold_job_token", "gauge", &["job"]),
        ("leasehold_job_leaderless_seconds", "gauge", &["job"]),
        ("leasehold_jobs", "gauge", &[]),
        ("leasehold_jobs_led", "gauge", &[]),
        ("leasehold_jobs_leaderless", "gauge", &[]),
        ("leasehold_metrics_jobs_omitted", "gauge", &[]),
        ("leasehold_grants_total", "counter", &[]),
        ("leasehold_takeovers_total", "counter", &[]),
        ("leasehold_expiries_total", "counter", &[]),
        ("leasehold_releases_total", "counter", &[]),
        ("leasehold_transfers_total", "counter", &[]),
        ("leasehold_renewals_total", "counter", &[]),
        ("leasehold_renew_losses_total", "counter", &[]),
        ("leasehold_writes_total", "counter", &[]),
        ("leasehold_fenced_writes_total", "counter", &[]),
        ("leasehold_store_failures_total", "counter", &[]),
        ("leasehold_store_recoveries_total", "counter", &[]),
        ("leasehold_unreadable_jobs_total", "counter", &[]),
        ("leasehold_store_syncs_total", "counter", &[]),
        ("leasehold_store_synced_changes_total", "counter", &[]),
        ("leasehold_store_sync_duration_seconds", "histogram", &[]),
        ("leasehold_store_token_floor", "gauge", &[]),
        ("leasehold_store_recovered", "gauge", &["how"]),
        ("leasehold_waiting_acquires", "gauge", &[]),
        ("leasehold_rpc_duration_seconds", "histogram", &["method"]),
        (
            "leasehold_rpc_responses_total",
            "counter",
            &["method", "code"],
        ),
        (
            "leasehold_auth_denied_total",
            "counter",
            &["reason", "action"],
        ),
        ("leasehold_chaos_actions_total", "counter", &["action"]),
        ("leasehold_overloaded_total", "counter", &["limit"]),
        ("leasehold_flood_steps_total", "counter", &["step"]),
        ("leasehold_quota_exceeded_total", "counter", &["limit"]),
        ("leasehold_writes_paced_total", "counter", &[]),
        ("leasehold_write_pacing_seconds_total", "counter", &[]),
        ("leasehold_acquires_paced_total", "counter", &[]),
        ("leasehold_acquire_pacing_seconds_total", "counter", &[]),
        ("leasehold_listings_paced_total", "counter", &[]),
        ("leasehold_listing_pacing_seconds_total", "counter", &[]),
    ];

    /// A sample line's name and label names, in order.
    fn parse_sample(line: &str) -> (&str, Vec<String>) {
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("not a number in {line:?}"));
        let Some((name, mut rest)) = series.split_once('{') else {
            return (series, Vec::new());
        };
        let mut labels = Vec::new();
        while let Some((key, after)) = rest.split_once("=\"") {
            labels.push(key.trim_start_matches(',').to_owned());
            // The value runs to the first quote not escaped.
            let mut escaped = false;
            let end = after
                .char_indices()
                .find(|&(_, c)| {
                    let quote = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    quote
                })
                .map(|(i, _)| i)
                .unwrap_or_else(|| panic!("unterminated label value in {line:?}"));
            rest = &after[end + 1..];
        }
        assert_eq!(rest, "}", "{line:?}");
        (name, labels)
    }

    /// Every RPC of every leasehold service has its own series, named by
    /// the method: none is counted under `other`, which only calls of
    /// other services (health, reflection) or of no method reach.
    #[test]
    fn every_leasehold_rpc_has_its_own_series() {
        let other = RpcMetrics::method("/leasehold.v1.Leases/NoSuchMethod");
        let labels: Vec<&str> = RpcMetrics::default().each().map(|(l, _)| l).collect();
        assert_eq!(labels.last(), Some(&"other"));
        assert_eq!(other.0, labels.len() - 1);
        assert_eq!(
            RpcMetrics::method("/grpc.health.v1.Health/Check"),
            other,
            "a call of another service counts as other"
        );

        // The proto files' own `rpc` lines, so that an RPC added there
        // and missing here fails.
        let protos = [
            include_str!("../../../proto/leasehold/v1/leasehold.proto"),
            include_str!("../../../proto/leasehold/v1/admin.proto"),
            include_str!("../../../proto/leasehold/v1/chaos.proto"),
        ];
        let mut paths = Vec::new();
        for proto in protos {
            let package = proto
                .lines()
                .find_map(|l| l.trim().strip_prefix("package "))
                .and_then(|p| p.strip_suffix(';'))
                .expect("a package line");
            let mut service = None;
            for line in proto.lines().map(str::trim) {
                if let Some(rest) = line.strip_prefix("service ") {
                    service = rest.split_whitespace().next();
                } else if let Some(rest) = line.strip_prefix("rpc ") {
                    let name = rest.split('(').next().unwrap().trim();
                    paths.push((format!("/{package}.{}/{name}", service.unwrap()), name));
                }
            }
        }
        for must in ["DeleteJob", "GetHistory", "Backup"] {
            assert!(paths.iter().any(|(_, n)| *n == must), "{must} not found");
        }
        let mut seen = Vec::new();
        for (path, name) in &paths {
            let m = RpcMetrics::method(path);
            assert_ne!(m, other, "{path} is counted under other");
            assert_eq!(labels[m.0], *name, "{path}'s series");
            assert!(!seen.contains(&m.0), "{path} shares a series");
            seen.push(m.0);
        }
        assert_eq!(
            labels.len(),
            paths.len() + 1,
            "a series for an RPC the protos no longer have: {labels:?}"
        );
    }

    /// Renders a snapshot of a node that has led a job, written, and
    /// answered a call, and checks the families, their types and their
    /// label names against [`FAMILIES`]: a renamed metric or label fails
    /// here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn metric_families_and_labels_are_the_documented_ones() {
        let dir = tempfile::tempdir().unwrap();
        let node = Node::open(Arc::new(SledStore::open(dir.path()).unwrap())).unwrap();
        let limits = Limits::default();
        let job = limits.job("j\"ob\\").unwrap();
        let holder = limits.holder("h").unwrap();
        let ttl = Duration::from_secs(10);
        let got = node
            .acquire(&job, &holder, ttl, Duration::ZERO)
            .await
            .unwrap();
        assert!(got.acquired);
        node.checked_write(&job, Token(1), b"k", Some(b"v".to_vec()), None)
            .await
            .unwrap();
        let rpc = Arc::new(RpcMetrics::default());
        let acquire = RpcMetrics::method("/leasehold.v1.Leases/Acquire");
        rpc.answered(acquire, Duration::from_micros(300));
        rpc.ended(acquire, 0);
        rpc.denied("permission_denied", "write");
        rpc.shards.record_for_test("g", "m", 2);

        let text = render(&node.into(), &rpc);
        // name -> (type, HELP seen, label-name lists of its samples)
        let mut got: BTreeMap<&str, (&str, bool, Vec<Vec<String>>)> = BTreeMap::new();
        for line in text.lines() {
            if let Some(help) = line.strip_prefix("# HELP ") {
                let (name, _) = help.split_once(' ').unwrap();
                got.entry(name).or_insert(("?", false, Vec::new())).1 = true;
            } else if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, ty) = t.split_once(' ').unwrap();
                got.entry(name).or_insert(("?", false, Vec::new())).0 = ty;
            } else {
                let (sample, mut labels) = parse_sample(line);
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .filter_map(|s| sample.strip_suffix(s))
                    .find(|f| got.get(f).is_some_and(|(ty, ..)| *ty == "histogram"))
                    .unwrap_or(sample);
                if sample.ends_with("_bucket") && family != sample {
                    assert_eq!(labels.pop().as_deref(), Some("le"), "{line}");
                }
                got.get_mut(family)
                    .unwrap_or_else(|| panic!("{line:?} has no # TYPE before it"))
                    .2
                    .push(labels);
            }
        }

        let want: Vec<&str> = FAMILIES.iter().map(|f| f.0).collect();
        let missing: Vec<&str> = want
            .iter()
            .filter(|n| !got.contains_key(*n))
            .copied()
            .collect();
        let unexpected: Vec<&str> = got.keys().filter(|n| !want.contains(n)).copied().collect();
        assert!(
            missing.is_empty() && unexpected.is_empty(),
            "the metric families changed: missing {missing:?}, unexpected {unexpected:?}"
        );
        for (name, ty, labels) in FAMILIES {
            let (got_ty, help, samples) = &got[name];
            assert_eq!(got_ty, ty, "{name}'s type");
            assert!(help, "{name} has no # HELP");
            assert!(!samples.is_empty(), "{name} has no sample in\n{text}");
            for l in samples {
                assert_eq!(l, labels, "{name}'s label names");
            }
        }
        assert!(
            text.contains("leasehold_job_leader{job=\"j\\\"ob\\\\\"} 1"),
            "job names are escaped: {text}"
        );
    }
}
