//! Leadership as a metric: the Prometheus text exposition on the admin port.
//!
//! Per job: whether a leader is present, its token, and how long the job has
//! been without a leader. Counters for grants, takeovers, expiries,
//! releases, renew losses and fenced writes (split-brain attempts show up
//! here), a latency histogram per RPC, and group commit's syncs (how many,
//! how many changes each, how long). Hand-rolled: the format is a few
//! lines of text, and a metrics crate would pull more into the build than
//! this file holds.
//!
//! `/healthz` answers 200 `ok` while the store takes changes, and 503 with
//! the reason while it cannot (failed and not reopened yet, or a disk too
//! full for any change): the same condition as gRPC health's NOT_SERVING.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::backend::Backend;
use crate::lease::Leadership;
use crate::node::commit::{SyncStats, SYNC_BUCKETS};

/// The RPC methods with their own histogram; anything else is `other`.
const METHODS: &[&str] = &[
    "/leasehold.v1.Leases/Acquire",
    "/leasehold.v1.Leases/Renew",
    "/leasehold.v1.Leases/Release",
    "/leasehold.v1.Leases/GetLease",
    "/leasehold.v1.Leases/ListLeases",
    "/leasehold.v1.Leases/WatchLease",
    "/leasehold.v1.Leases/KeepAlive",
    "/leasehold.v1.FencedStore/CheckedWrite",
    "/leasehold.v1.FencedStore/WriteStream",
    "/leasehold.v1.FencedStore/Read",
    "/leasehold.v1.FencedStore/ListKeys",
    "other",
];

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

struct MethodStats {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
    codes: [AtomicU64; CODES],
}

impl MethodStats {
    fn new() -> MethodStats {
        MethodStats {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
            codes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Per-RPC latency and status counts, recorded by the server's tower layer.
pub struct RpcMetrics {
    methods: Vec<MethodStats>,
}

impl Default for RpcMetrics {
    fn default() -> Self {
        RpcMetrics {
            methods: METHODS.iter().map(|_| MethodStats::new()).collect(),
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
                .position(|m| *m == path)
                .unwrap_or(METHODS.len() - 1),
        )
    }

    /// Records that a call of `method` was answered (its response began)
    /// `elapsed` after it arrived: the latency histogram.
    pub fn answered(&self, method: RpcMethod, elapsed: Duration) {
        let m = &self.methods[method.0];
        let secs = elapsed.as_secs_f64();
        if let Some(b) = BUCKETS.iter().position(|b| secs <= *b) {
            m.buckets[b].fetch_add(1, Ordering::Relaxed);
        }
        m.count.fetch_add(1, Ordering::Relaxed);
        m.sum_nanos
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Records that a call of `method` ended with gRPC status `code`: for a
    /// stream, when it ends, with the status it ended with.
    pub fn ended(&self, method: RpcMethod, code: usize) {
        self.methods[method.0].codes[code.min(CODES - 1)].fetch_add(1, Ordering::Relaxed);
    }
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders every metric in the Prometheus text format.
pub fn render(node: &Backend, rpc: &RpcMetrics) -> String {
    let snap = node.snapshot();
    let mut out = String::with_capacity(256 + snap.jobs.len() * 160);
    let o = &mut out;

    let _ = writeln!(
        o,
        "# HELP leasehold_job_leader 1 if the job has a live leader, else 0."
    );
    let _ = writeln!(o, "# TYPE leasehold_job_leader gauge");
    for (job, l) in &snap.jobs {
        let led = matches!(l, Leadership::Led { .. }) as u8;
        let _ = writeln!(
            o,
            "leasehold_job_leader{{job=\"{}\"}} {led}",
            label(job.as_str())
        );
    }
    let _ = writeln!(
        o,
        "# HELP leasehold_job_token The job's newest fencing token."
    );
    let _ = writeln!(o, "# TYPE leasehold_job_token gauge");
    for (job, l) in &snap.jobs {
        let t = match l {
            Leadership::Led { token } | Leadership::Vacant { token, .. } => token.0,
        };
        let _ = writeln!(
            o,
            "leasehold_job_token{{job=\"{}\"}} {t}",
            label(job.as_str())
        );
    }
    let _ = writeln!(
        o,
        "# HELP leasehold_job_leaderless_seconds How long the job has been without a leader; 0 while led."
    );
    let _ = writeln!(o, "# TYPE leasehold_job_leaderless_seconds gauge");
    for (job, l) in &snap.jobs {
        let s = match l {
            Leadership::Led { .. } => 0.0,
            Leadership::Vacant { for_, .. } => for_.as_secs_f64(),
        };
        let _ = writeln!(
            o,
            "leasehold_job_leaderless_seconds{{job=\"{}\"}} {s:.3}",
            label(job.as_str())
        );
    }

    let s = &snap.stats;
    let mut counters = vec![
        ("grants", "Grants that issued a new token.", s.grants),
        (
            "takeovers",
            "Grants to a holder other than the previous one.",
            s.takeovers,
        ),
        (
            "expiries",
            "Leases that ran out without renewal or release.",
            s.expiries,
        ),
        ("releases", "Voluntary releases.", s.releases),
        (
            "renewals",
            "Renewals that extended a lease: Renew calls and KeepAlive stream entries.",
            s.renewals,
        ),
        (
            "renew_losses",
            "Renewals refused with LEASE_LOST.",
            s.renew_losses,
        ),
        (
            "writes",
            "Fenced-store writes and deletes that passed the fence: CheckedWrite calls and WriteStream entries.",
            s.writes,
        ),
        (
            "fenced_writes",
            "CheckedWrites refused with FENCED: writes by a stale leader.",
            s.fenced_writes,
        ),
        (
            "store_failures",
            "Store failures. Single node: each put, sync, settle or checkpoint whose error put the store out of service until it was reopened (the errors that follow from one are not counted again). etcd: calls to etcd that failed.",
            snap.store_failures,
        ),
        (
            "store_recoveries",
            "Times the store was reopened from stable storage after a failure.",
            snap.store_recoveries,
        ),
    ];
    if let Some(sync) = &snap.sync {
        counters.extend([
            (
                "store_syncs",
                "Durability barriers run (one log write and one fdatasync each), failed ones included.",
                sync.syncs,
            ),
            (
                "store_synced_changes",
                "Changes made durable by those syncs; per sync, the mean group-commit batch.",
                sync.changes,
            ),
        ]);
    }
    for (name, help, v) in counters {
        let _ = writeln!(o, "# HELP leasehold_{name}_total {help}");
        let _ = writeln!(o, "# TYPE leasehold_{name}_total counter");
        let _ = writeln!(o, "leasehold_{name}_total {v}");
    }
    if let Some(sync) = &snap.sync {
        render_sync(o, sync);
    }
    if let Some((floor, recovered)) = &snap.integrity {
        let _ = writeln!(
            o,
            "# HELP leasehold_store_token_floor Every grant's token is above this; raised by `leasehold recover` and `leasehold restore`."
        );
        let _ = writeln!(o, "# TYPE leasehold_store_token_floor gauge");
        let _ = writeln!(o, "leasehold_store_token_floor {floor}");
        let _ = writeln!(
            o,
            "# HELP leasehold_store_recovered 1 when the data dir was recovered (damaged, what was readable kept) or restored from a backup; what was lost is in the WARN line at start-up and in `leasehold check`."
        );
        let _ = writeln!(o, "# TYPE leasehold_store_recovered gauge");
        for how in ["recovered", "restored"] {
            let v = recovered.as_ref().is_some_and(|r| r.starts_with(how));
            let _ = writeln!(
                o,
                "leasehold_store_recovered{{how=\"{how}\"}} {}",
                u8::from(v)
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP leasehold_waiting_acquires Acquire calls waiting for a lease."
    );
    let _ = writeln!(o, "# TYPE leasehold_waiting_acquires gauge");
    let _ = writeln!(o, "leasehold_waiting_acquires {}", snap.waiters);

    let _ = writeln!(
        o,
        "# HELP leasehold_rpc_duration_seconds RPC latency, to the response headers."
    );
    let _ = writeln!(o, "# TYPE leasehold_rpc_duration_seconds histogram");
    for (path, m) in METHODS.iter().zip(&rpc.methods) {
        let method = label(path.rsplit('/').next().unwrap_or(path));
        histogram(
            o,
            "leasehold_rpc_duration_seconds",
            &format!("method=\"{method}\","),
            BUCKETS
                .iter()
                .zip(m.buckets.iter().map(|n| n.load(Ordering::Relaxed))),
            m.count.load(Ordering::Relaxed),
            m.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        );
    }
    let _ = writeln!(
        o,
        "# HELP leasehold_rpc_responses_total RPCs ended, by gRPC status code (a stream when it ends)."
    );
    let _ = writeln!(o, "# TYPE leasehold_rpc_responses_total counter");
    for (path, m) in METHODS.iter().zip(&rpc.methods) {
        let method = label(path.rsplit('/').next().unwrap_or(path));
        for (code, n) in m.codes.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(
                    o,
                    "leasehold_rpc_responses_total{{method=\"{method}\",code=\"{}\"}} {n}",
                    CODE_NAMES[code]
                );
            }
        }
    }
    out
}

/// How long group commit's syncs take (the counters are with the others).
fn render_sync(o: &mut String, s: &SyncStats) {
    let _ = writeln!(
        o,
        "# HELP leasehold_store_sync_duration_seconds Time of one sync: the log write and the fdatasync."
    );
    let _ = writeln!(o, "# TYPE leasehold_store_sync_duration_seconds histogram");
    histogram(
        o,
        "leasehold_store_sync_duration_seconds",
        "",
        SYNC_BUCKETS.iter().zip(s.buckets.iter().copied()),
        s.syncs,
        s.seconds,
    );
}

/// One histogram's samples: `buckets` are (upper bound, count in that
/// bucket alone), rendered cumulative; `labels` is empty or ends in a comma.
fn histogram<'a>(
    o: &mut String,
    name: &str,
    labels: &str,
    buckets: impl Iterator<Item = (&'a f64, u64)>,
    count: u64,
    sum: f64,
) {
    let mut cum = 0;
    for (b, n) in buckets {
        cum += n;
        let _ = writeln!(o, "{name}_bucket{{{labels}le=\"{b}\"}} {cum}");
    }
    let _ = writeln!(o, "{name}_bucket{{{labels}le=\"+Inf\"}} {count}");
    let labels = labels.trim_end_matches(',');
    if labels.is_empty() {
        let _ = writeln!(o, "{name}_sum {sum}");
        let _ = writeln!(o, "{name}_count {count}");
    } else {
        let _ = writeln!(o, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(o, "{name}_count{{{labels}}} {count}");
    }
}
