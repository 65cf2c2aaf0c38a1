//! The policy: its file format, its loading and reloading, the principals
//! it names (by bearer token or certificate) and what each is granted.
//!
//! [`Policy`] is one loaded file, never changed once loaded; [`Auth`] is
//! the policy in force, swapped whole by a reload, with each principal's
//! counters ([`PrincipalLoad`]) kept by name across reloads. Who a call
//! is, and what it may do, is [`super::caller`]'s; this module only
//! answers lookups (a token's or a certificate's principal, a grant).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio_rustls::rustls::pki_types::CertificateDer;

use crate::error::{Error, Result};
use crate::lease::JobName;
use crate::metrics::RpcMetrics;

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Acquire, Renew, Release, TransferLease, KeepAlive.
    Lease,
    /// CheckedWrite, WriteStream.
    Write,
    /// GetLease, ListLeases, WatchLease, Read, ListKeys.
    Read,
    /// Everything on every job, backups and the admin port.
    Admin,
    /// The chaos API on the job (`serve --enable-chaos`).
    Chaos,
}

impl Action {
    /// The action's name in the policy file.
    pub fn name(self) -> &'static str {
        match self {
            Action::Lease => "lease",
            Action::Write => "write",
            Action::Read => "read",
            Action::Admin => "admin",
            Action::Chaos => "chaos",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }

    fn parse(s: &str) -> Option<Action> {
        [
            Action::Lease,
            Action::Write,
            Action::Read,
            Action::Admin,
            Action::Chaos,
        ]
        .into_iter()
        .find(|a| a.name() == s)
    }
}

/// A loaded policy.
#[derive(Default)]
pub struct Policy {
    principals: Vec<Principal>,
    /// What looks like a mistake but is allowed, logged when the policy is
    /// loaded: a grant prefix that ends inside a name.
    pub warnings: Vec<String>,
    /// Secrets already proven, and whose they are (an index into
    /// `principals`): a client sends the same token with every call, and
    /// its SHA-256 was a third of what a policy adds to a call. Only
    /// secrets that matched are kept (garbage cannot fill it), at most
    /// [`PROVEN_MAX`], and a reload starts a new policy with none.
    proven: std::sync::Mutex<HashMap<Box<[u8]>, usize>>,
}

/// Proven secrets kept at most; past it the set starts again.
const PROVEN_MAX: usize = 4096;

/// Its principals, without their token hashes or the secrets proven: a
/// policy may be logged.
impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("principals", &self.principals)
            .finish_non_exhaustive()
    }
}

/// One `[[principal]]` of a policy, with its grants.
pub(super) struct Principal {
    pub(super) name: Arc<str>,
    /// The names a client certificate may present to be this principal
    /// ([`Policy::by_cert`]).
    cert_names: Vec<String>,
    tokens: Vec<[u8; 32]>,
    /// (job prefix, actions as bits).
    grants: Vec<(String, u8)>,
    admin: bool,
    pub(super) limits: PrincipalLimits,
    /// What it has open; the same counters across reloads ([`Auth`]).
    pub(super) load: Arc<PrincipalLoad>,
}

/// How many tokens, not their hashes.
impl std::fmt::Debug for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principal")
            .field("name", &self.name)
            .field("cert_names", &self.cert_names)
            .field("tokens", &self.tokens.len())
            .field("grants", &self.grants)
            .field("admin", &self.admin)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A principal's own limits, from its `[principal.limits]`: each `None`
/// (left out) is the server's flag of the same name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrincipalLimits {
    /// Its calls in flight at once across all its connections, in each
    /// budget, counted as `--max-in-flight` counts them
    /// ([`crate::server::layers`]).
    pub max_in_flight: Option<usize>,
    /// Its `WatchLease` streams open at once (`--max-watchers`).
    pub max_watchers: Option<usize>,
    /// Its Acquires waiting on one job at once (`--max-waiters-per-job`).
    pub max_waiters_per_job: Option<usize>,
    /// Its Acquires waiting at once, on every job (`--max-waiters`).
    pub max_waiters: Option<usize>,
    /// The jobs it created and nobody deleted (`--max-jobs`). A job counts
    /// against the principal whose Acquire created it, whoever holds it
    /// later, until `DeleteJob` deletes it.
    pub max_jobs: Option<usize>,
    /// Frames that carry no call (and streams refused) a second across all
    /// its connections, as `--max-frame-rate-per-connection` counts them
    /// for each ([`crate::server::frames`]); left out, each connection has
    /// its own budget alone.
    pub max_frame_rate: Option<usize>,
    /// KiB of large answers held for all its connections until they read
    /// them ([`crate::server::layers::Queued`]); left out, a quarter of
    /// `--max-queued-response-bytes`.
    pub max_queued_response_kib: Option<usize>,
}

/// What one principal has open on this server, counted against its
/// [`PrincipalLimits`]: by admission ([`crate::server::layers`]) and by the quotas
/// ([`crate::server::leases::Quotas`]). Kept by the principal's name across
/// reloads, so that a reload's new limits apply to what is already open.
#[derive(Debug, Default)]
pub struct PrincipalLoad {
    /// Calls in flight, by budget (the index of `layers::budget`).
    pub in_flight: [AtomicUsize; 2],
    /// Open `WatchLease` streams.
    pub watchers: AtomicUsize,
    /// Acquires waiting, by job.
    pub waiting: Mutex<HashMap<JobName, usize>>,
    /// Acquires waiting, on every job.
    pub waiters: AtomicUsize,
    /// Bytes of large answers held for its connections.
    pub queued: AtomicUsize,
    /// Its frame budget across its connections (with `max_frame_rate`).
    pub frames: Mutex<Option<crate::server::frames::Meter>>,
    /// The budget is empty: its connections' reads ask it before reading.
    pub frames_over: std::sync::atomic::AtomicBool,
}

/// The largest value a principal's limit may have: far beyond what one
/// server can hold open, so a larger one is a typo.
pub const MAX_PRINCIPAL_LIMIT: i64 = 10_000_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    principal: Vec<PrincipalEntry>,
    #[serde(default)]
    grant: Vec<GrantEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrincipalEntry {
    name: toml::Spanned<String>,
    #[serde(default)]
    cert_names: Vec<toml::Spanned<String>>,
    #[serde(default)]
    token_sha256: Vec<toml::Spanned<String>>,
    #[serde(default)]
    limits: LimitsEntry,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsEntry {
    max_in_flight: Option<toml::Spanned<i64>>,
    max_watchers: Option<toml::Spanned<i64>>,
    max_waiters_per_job: Option<toml::Spanned<i64>>,
    max_waiters: Option<toml::Spanned<i64>>,
    max_jobs: Option<toml::Spanned<i64>>,
    max_frame_rate: Option<toml::Spanned<i64>>,
    max_queued_response_kib: Option<toml::Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantEntry {
    principal: toml::Spanned<String>,
    jobs: Vec<toml::Spanned<String>>,
    actions: Vec<toml::Spanned<String>>,
}

impl Policy {
    /// Reads and parses the policy file at `path`. An error names the file
    /// and the line at fault.
    pub fn load(path: &Path) -> Result<Policy> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::invalid("--policy", format!("{}: {e}", path.display())))?;
        Policy::parse(&text)
            .map_err(|e| Error::invalid("--policy", format!("{}: {e}", path.display())))
    }

    /// Parses a policy. An error names the line at fault.
    pub fn parse(text: &str) -> std::result::Result<Policy, String> {
        let line = |span: std::ops::Range<usize>| {
            1 + text[..span.start.min(text.len())]
                .bytes()
                .filter(|b| *b == b'\n')
                .count()
        };
        let at = |s: &toml::Spanned<String>, why: String| format!("line {}: {why}", line(s.span()));
        let file: PolicyFile = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => format!("line {}: {}", line(span), e.message()),
            None => e.message().to_owned(),
        })?;
        let mut principals: Vec<Principal> = Vec::new();
        let mut tokens_seen: HashMap<[u8; 32], String> = HashMap::new();
        let mut cert_names_seen: HashMap<String, String> = HashMap::new();
        for p in file.principal {
            let name = p.name.get_ref();
            if name.is_empty() || name.len() > 128 || name.chars().any(|c| c.is_control()) {
                return Err(at(
                    &p.name,
                    format!(
                        "principal name {name:?} must be 1 to 128 bytes, no control characters"
                    ),
                ));
            }
            if principals.iter().any(|q| &*q.name == name.as_str()) {
                return Err(at(&p.name, format!("principal {name:?} is defined twice")));
            }
            let mut cert_names = Vec::new();
            for c in &p.cert_names {
                let n = c.get_ref();
                if n.is_empty() || n.chars().any(|c| c.is_control()) {
                    return Err(at(
                        c,
                        format!(
                            "cert_names: {n:?} must be a non-empty name without control characters"
                        ),
                    ));
                }
                // DNS names compare ignoring ASCII case: one name listed
                // for two principals, in any case, would make a
                // certificate's principal depend on the file's order.
                if let Some(other) = cert_names_seen.insert(n.to_ascii_lowercase(), name.clone()) {
                    if other != *name {
                        return Err(at(
                            c,
                            format!(
                                "cert_names: {n:?} is also principal {other:?}'s: a \
                                 certificate name must name one principal"
                            ),
                        ));
                    }
                }
                cert_names.push(n.clone());
            }
            let mut tokens = Vec::new();
            for t in &p.token_sha256 {
                let h = hex32(t.get_ref()).ok_or_else(|| {
                    at(
                        t,
                        "token_sha256: must be 64 hex digits (the SHA-256 of the secret, e.g. \
                         `printf %s SECRET | sha256sum`)"
                            .to_owned(),
                    )
                })?;
                if let Some(other) = tokens_seen.insert(h, name.clone()) {
                    return Err(at(
                        t,
                        format!("token_sha256: the same token is also {other:?}'s"),
                    ));
                }
                tokens.push(h);
            }
            let limit = |field: &str, flag: &str, v: &Option<toml::Spanned<i64>>| {
                let Some(v) = v else { return Ok(None) };
                let n = *v.get_ref();
                if !(1..=MAX_PRINCIPAL_LIMIT).contains(&n) {
                    return Err(format!(
                        "line {}: principal {name:?}: limits.{field} = {n}: must be 1 to \
                         {MAX_PRINCIPAL_LIMIT} (leave it out for the server's {flag})",
                        line(v.span())
                    ));
                }
                Ok(Some(n as usize))
            };
            let l = &p.limits;
            let limits = PrincipalLimits {
                max_in_flight: limit("max_in_flight", "--max-in-flight", &l.max_in_flight)?,
                max_watchers: limit("max_watchers", "--max-watchers", &l.max_watchers)?,
                max_waiters_per_job: limit(
                    "max_waiters_per_job",
                    "--max-waiters-per-job",
                    &l.max_waiters_per_job,
                )?,
                max_waiters: limit("max_waiters", "--max-waiters", &l.max_waiters)?,
                max_jobs: limit("max_jobs", "--max-jobs", &l.max_jobs)?,
                max_frame_rate: limit(
                    "max_frame_rate",
                    "--max-frame-rate-per-connection on each connection alone",
                    &l.max_frame_rate,
                )?,
                max_queued_response_kib: limit(
                    "max_queued_response_kib",
                    "quarter of --max-queued-response-bytes",
                    &l.max_queued_response_kib,
                )?,
            };
            principals.push(Principal {
                name: name.as_str().into(),
                cert_names,
                tokens,
                grants: Vec::new(),
                admin: false,
                limits,
                load: Arc::default(),
            });
        }
        let mut warnings = Vec::new();
        for g in file.grant {
            let who = g.principal.get_ref();
            let Some(p) = principals.iter_mut().find(|p| &*p.name == who.as_str()) else {
                return Err(at(
                    &g.principal,
                    format!("grant for principal {who:?}, which no [[principal]] defines"),
                ));
            };
            let mut bits = 0;
            for a in &g.actions {
                let action = Action::parse(a.get_ref()).ok_or_else(|| {
                    at(
                        a,
                        format!(
                            "unknown action {:?}: the actions are lease, write, read, admin, chaos",
                            a.get_ref()
                        ),
                    )
                })?;
                if action == Action::Admin && g.jobs.iter().any(|j| !j.get_ref().is_empty()) {
                    return Err(at(
                        a,
                        "admin is for every job: its grant's jobs must be [\"\"]".to_owned(),
                    ));
                }
                bits |= action.bit();
            }
            if g.jobs.is_empty() {
                return Err(at(
                    &g.principal,
                    "grant with jobs = []: list job-name prefixes, or [\"\"] for every job"
                        .to_owned(),
                ));
            }
            if bits & Action::Admin.bit() != 0 {
                p.admin = true;
            }
            for j in g.jobs {
                let prefix = j.get_ref();
                if prefix.chars().last().is_some_and(|c| c.is_alphanumeric()) {
                    warnings.push(format!(
                        "line {}: principal {who:?}: the prefix {prefix:?} also covers jobs \
                         such as \"{prefix}-prod/x\"; end it with a separator (\"{prefix}/\") \
                         unless that is meant",
                        line(j.span())
                    ));
                }
                p.grants.push((j.into_inner(), bits));
            }
        }
        Ok(Policy {
            principals,
            proven: Default::default(),
            warnings,
        })
    }

    /// Logs the policy's [`Policy::warnings`].
    fn warn(&self, path: &Path) {
        for w in &self.warnings {
            tracing::warn!(policy = %path.display(), "{w}");
        }
    }

    /// The principal of a bearer secret proven before under this policy,
    /// found without hashing it.
    pub(super) fn proven(&self, secret: &[u8]) -> Option<&Principal> {
        let proven = self.proven.lock().unwrap_or_else(|e| e.into_inner());
        proven.get(secret).map(|&i| &self.principals[i])
    }

    /// The principal a bearer secret belongs to: a secret proven before,
    /// else the first sight's check, where every stored hash is compared,
    /// each in constant time.
    pub(super) fn by_token(&self, secret: &[u8]) -> Option<&Principal> {
        if let Some(p) = self.proven(secret) {
            return Some(p);
        }
        let proven = || self.proven.lock().unwrap_or_else(|e| e.into_inner());
        let digest = ring::digest::digest(&ring::digest::SHA256, secret);
        let mut found = None;
        for (i, p) in self.principals.iter().enumerate() {
            for t in &p.tokens {
                if constant_time_eq(t, digest.as_ref()) {
                    found = Some(i);
                }
            }
        }
        let i = found?;
        let mut cache = proven();
        if cache.len() >= PROVEN_MAX {
            cache.clear();
        }
        cache.insert(secret.into(), i);
        Some(&self.principals[i])
    }

    /// The principal a (verified) client certificate names, or why it
    /// names none.
    ///
    /// A certificate with a subject alternative name extension is named by
    /// its SANs only: a DNS name equal to one of a principal's
    /// `cert_names` (ignoring ASCII case, as DNS does), or a URI equal to
    /// one (a SPIFFE ID, say). A wildcard SAN is a name like any other:
    /// `*.workers.internal` names only a principal that lists
    /// `*.workers.internal` itself. The subject's common name counts only
    /// in a certificate without SANs, compared exactly. A certificate whose
    /// names match two principals names neither: which principal a
    /// certificate is must never depend on the order of the file.
    pub(super) fn by_cert(
        &self,
        cert: &CertificateDer<'_>,
    ) -> std::result::Result<&Principal, String> {
        let names = CertNames::of(cert);
        let mut found = self
            .principals
            .iter()
            .filter(|p| p.cert_names.iter().any(|n| names.matches(n)));
        let first = found.next().ok_or_else(|| {
            format!(
                "the client certificate ({}) names no principal",
                names.describe()
            )
        })?;
        if let Some(second) = found.next() {
            return Err(format!(
                "the client certificate ({}) names two principals, {:?} and {:?}, and is \
                 refused",
                names.describe(),
                &*first.name,
                &*second.name
            ));
        }
        Ok(first)
    }

    /// Whether `principal` may do `action` on `job`.
    pub(super) fn allows(&self, principal: &str, action: Action, job: &str) -> bool {
        let Some(p) = self.principal(principal) else {
            return false;
        };
        p.admin
            || p.grants
                .iter()
                .any(|(prefix, bits)| bits & action.bit() != 0 && job.starts_with(prefix.as_str()))
    }

    /// Whether `principal` may read any job at all (a `read` grant on
    /// some prefix, or `admin`).
    pub(super) fn reads_something(&self, principal: &str) -> bool {
        self.principal(principal).is_some_and(|p| {
            p.admin
                || p.grants
                    .iter()
                    .any(|(_, bits)| bits & Action::Read.bit() != 0)
        })
    }

    /// The job-name prefixes a listing of `prefix` must scan to see every
    /// job `principal` may read there, and no other (see
    /// [`super::Caller::read_ranges`]).
    pub(super) fn read_ranges(&self, principal: &str, prefix: &str) -> Vec<String> {
        let Some(p) = self.principal(principal) else {
            return Vec::new();
        };
        if p.admin {
            return vec![prefix.to_owned()];
        }
        let mut ranges: Vec<String> = p
            .grants
            .iter()
            .filter(|(_, bits)| bits & Action::Read.bit() != 0)
            .filter_map(|(g, _)| {
                if g.starts_with(prefix) {
                    Some(g.clone())
                } else if prefix.starts_with(g.as_str()) {
                    Some(prefix.to_owned())
                } else {
                    None
                }
            })
            .collect();
        ranges.sort();
        ranges.dedup();
        // A range inside another is scanned with it: what is left is
        // disjoint, and in order.
        let all = ranges.clone();
        ranges.retain(|r| !all.iter().any(|o| o != r && r.starts_with(o.as_str())));
        ranges
    }

    fn principal(&self, name: &str) -> Option<&Principal> {
        self.principals.iter().find(|p| &*p.name == name)
    }
}

/// The names a client certificate presents: its subject alternative names
/// (DNS and URI), whether it has the extension at all, and its subject's
/// common names.
#[derive(Debug, Default)]
struct CertNames {
    dns: Vec<String>,
    uris: Vec<String>,
    has_san: bool,
    common_names: Vec<String>,
}

impl CertNames {
    fn of(cert: &CertificateDer<'_>) -> CertNames {
        let (common_names, has_san) = subject_and_san(cert.as_ref());
        let mut names = CertNames {
            has_san,
            common_names,
            ..CertNames::default()
        };
        if let Ok(ee) = webpki::EndEntityCert::try_from(cert) {
            names.dns = ee.valid_dns_names().map(str::to_owned).collect();
            names.uris = ee.valid_uri_names().map(str::to_owned).collect();
        }
        names
    }

    /// Whether the certificate presents `name` (see [`Policy::by_cert`]).
    fn matches(&self, name: &str) -> bool {
        if self.has_san {
            self.dns.iter().any(|d| d.eq_ignore_ascii_case(name))
                || self.uris.iter().any(|u| u == name)
        } else {
            self.common_names.iter().any(|cn| cn == name)
        }
    }

    /// The names, for an error.
    fn describe(&self) -> String {
        let quoted = |v: &[String]| {
            v.iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if self.has_san {
            let mut all = self.dns.clone();
            all.extend(self.uris.iter().cloned());
            if all.is_empty() {
                "SANs with no DNS name or URI".to_owned()
            } else {
                format!("SANs {}", quoted(&all))
            }
        } else if self.common_names.is_empty() {
            "no SAN and no common name".to_owned()
        } else {
            format!("no SAN; common name {}", quoted(&self.common_names))
        }
    }
}

/// One DER element: (tag, contents, the rest after it).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, b) = b.split_first()?;
    let (len, b) = if first < 0x80 {
        (first as usize, b)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n].iter().fold(0usize, |l, x| (l << 8) | *x as usize);
        (len, &b[n..])
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// The common names (OID 2.5.4.3) in a DER certificate's subject (empty
/// when it has none), and whether it has a subject alternative name
/// extension (OID 2.5.29.17). A certificate that does not parse has
/// neither. A certificate reaches here only after the handshake verified
/// it.
fn subject_and_san(der: &[u8]) -> (Vec<String>, bool) {
    let fields = (|| {
        let (_, cert, _) = tlv(der)?;
        let (_, mut tbs, _) = tlv(cert)?;
        // [0] version, if present; then serial, signature, issuer,
        // validity, subject, subject public key info, and the optional
        // [1] issuer and [2] subject unique IDs and [3] extensions.
        if tbs.first() == Some(&0xa0) {
            tbs = tlv(tbs)?.2;
        }
        for _ in 0..4 {
            tbs = tlv(tbs)?.2;
        }
        let (_, subject, rest) = tlv(tbs)?;
        let mut rest = tlv(rest)?.2;
        let mut extensions: &[u8] = &[];
        while let Some((tag, body, after)) = tlv(rest) {
            rest = after;
            if tag == 0xa3 {
                extensions = tlv(body)?.1;
            }
        }
        Some((subject, extensions))
    })();
    let Some((subject, mut extensions)) = fields else {
        return (Vec::new(), false);
    };
    let mut has_san = false;
    while let Some((_, ext, rest)) = tlv(extensions) {
        extensions = rest;
        if let Some((0x06, &[0x55, 0x1d, 0x11], _)) = tlv(ext) {
            has_san = true;
        }
    }
    let mut out = Vec::new();
    let mut rdns = subject;
    while let Some((_, set, rest)) = tlv(rdns) {
        rdns = rest;
        let mut atvs = set;
        while let Some((_, atv, rest)) = tlv(atvs) {
            atvs = rest;
            let Some((0x06, oid, value)) = tlv(atv) else {
                continue;
            };
            // UTF8String, PrintableString, IA5String.
            if let (&[0x55, 0x04, 0x03], Some((0x0c | 0x13 | 0x16, v, _))) = (oid, tlv(value)) {
                if let Ok(s) = std::str::from_utf8(v) {
                    out.push(s.to_owned());
                }
            }
        }
    }
    (out, has_san)
}

/// Whether `a` and `b` are equal, in a time that depends on their length
/// only (every byte is compared; no early exit).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |d, (x, y)| d | std::hint::black_box(x ^ y));
    std::hint::black_box(diff) == 0
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The policy in force, and what refusals are counted and logged in.
pub struct Auth {
    path: PathBuf,
    pub(super) policy: RwLock<Arc<Policy>>,
    pub(super) metrics: Arc<RpcMetrics>,
    /// When each principal's last refusal was logged.
    logged: Mutex<HashMap<String, Instant>>,
    /// Each principal's [`PrincipalLoad`], by name, for as long as a
    /// policy or a call uses it: a reloaded policy's principal counts on
    /// where the one of the same name counted.
    loads: Mutex<HashMap<Arc<str>, Arc<PrincipalLoad>>>,
    /// Told of each reload, for the streams open across it.
    reloaded: tokio::sync::watch::Sender<()>,
    /// Failed authentications by client address, in the current window of
    /// each ([`Auth::throttle`]).
    failures: Mutex<HashMap<std::net::IpAddr, (Instant, u32)>>,
}

/// Failed authentications an address may have in [`FAILURE_WINDOW`];
/// past them, its calls with credentials not proven before are refused
/// unread until the window ends.
pub const MAX_FAILURES: u32 = 20;

/// The window [`MAX_FAILURES`] counts in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(10);

/// The file and the policy in force (itself without secrets).
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let policy = self
            .policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        f.debug_struct("Auth")
            .field("path", &self.path)
            .field("policy", &policy)
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// Loads the policy at `path`; refusals count in `metrics`.
    pub fn load(path: PathBuf, metrics: Arc<RpcMetrics>) -> Result<Arc<Auth>> {
        let mut policy = Policy::load(&path)?;
        policy.warn(&path);
        let auth = Auth {
            path,
            policy: RwLock::new(Arc::default()),
            metrics,
            logged: Mutex::new(HashMap::new()),
            loads: Mutex::new(HashMap::new()),
            reloaded: tokio::sync::watch::Sender::new(()),
            failures: Mutex::new(HashMap::new()),
        };
        auth.adopt(&mut policy);
        *auth.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        Ok(Arc::new(auth))
    }

    /// Reads the policy file again; on an error the policy in use stays.
    /// New calls are held to the new one's grants and limits, and so is
    /// each message of a stream already open ([`super::Caller::current`]),
    /// which is ended when its grant is gone.
    pub fn reload(&self) -> Result<()> {
        let mut policy = Policy::load(&self.path)?;
        policy.warn(&self.path);
        self.adopt(&mut policy);
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        self.reloaded.send_replace(());
        Ok(())
    }

    /// Changes at each reload: what a stream open across one waits on, to
    /// look at its caller again under the new policy.
    pub fn reloads(&self) -> tokio::sync::watch::Receiver<()> {
        self.reloaded.subscribe()
    }

    /// Gives each principal of `policy` the counters its name had (a
    /// principal new to the server starts from zero), and forgets the
    /// counters nothing uses any more.
    fn adopt(&self, policy: &mut Policy) {
        let mut loads = self.loads.lock().unwrap_or_else(|e| e.into_inner());
        loads.retain(|_, load| Arc::strong_count(load) > 1);
        for p in &mut policy.principals {
            p.load = loads.entry(p.name.clone()).or_default().clone();
        }
    }

    /// The policy file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Refuses a call from an address past [`MAX_FAILURES`] failed
    /// authentications in its window, before its credentials are read.
    pub(super) fn throttle(&self, remote: Option<std::net::IpAddr>) -> Result<()> {
        let Some(ip) = remote else { return Ok(()) };
        let now = crate::clock::now();
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match failures.get(&ip) {
            Some((since, n))
                if *n >= MAX_FAILURES && now.duration_since(*since) < FAILURE_WINDOW =>
            {
                let left = FAILURE_WINDOW.saturating_sub(now.duration_since(*since));
                drop(failures);
                self.metrics.denied("throttled", "none");
                self.log(
                    "",
                    &format!(
                        "{ip}: over {MAX_FAILURES} failed authentications in {FAILURE_WINDOW:?}"
                    ),
                );
                Err(Error::Unauthenticated(format!(
                    "more than {MAX_FAILURES} failed authentications from {ip} within \
                     {FAILURE_WINDOW:?}: credentials not seen before are refused unread for \
                     {:.1}s more",
                    left.as_secs_f64()
                )))
            }
            _ => Ok(()),
        }
    }

    /// Counts a failed authentication from `remote`.
    pub(super) fn failed(&self, remote: Option<std::net::IpAddr>) {
        let Some(ip) = remote else { return };
        let now = crate::clock::now();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= 10_000 {
            failures.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
        }
        let entry = failures.entry(ip).or_insert((now, 0));
        if now.duration_since(entry.0) >= FAILURE_WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }

    /// Logs a refusal, at most once a second per principal.
    pub(super) fn log(&self, principal: &str, what: &str) {
        let now = crate::clock::now();
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        if logged.len() > 10_000 {
            logged.retain(|_, t| now.duration_since(*t) < Duration::from_secs(1));
        }
        match logged.get(principal) {
            Some(t) if now.duration_since(*t) < Duration::from_secs(1) => {}
            _ => {
                logged.insert(principal.to_owned(), now);
                tracing::warn!(principal, "refused: {what}");
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;

    pub(in crate::server::auth) const POLICY: &str = r#"
[[principal]]
name = "billing"
cert_names = ["billing.workers.internal"]
token_sha256 = ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]

[[grant]]
principal = "billing"
jobs = ["billing/"]
actions = ["lease", "read"]
"#;

    #[test]
    fn a_proven_secret_is_kept_and_a_wrong_one_is_not() {
        let p = Policy::parse(POLICY).unwrap();
        for _ in 0..3 {
            assert_eq!(&*p.by_token(b"test").unwrap().name, "billing");
            assert!(p.by_token(b"tess").is_none());
        }
        let proven = p.proven.lock().unwrap();
        assert_eq!(proven.len(), 1, "only the secret that matched is kept");
        assert!(proven.contains_key(&b"test"[..]));
        drop(proven);
        // A reloaded policy starts with none: a token it no longer has is
        // refused at once.
        let reloaded = Policy::parse(&POLICY.replace(
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "0000000000000000000000000000000000000000000000000000000000000000",
        ))
        .unwrap();
        assert!(reloaded.by_token(b"test").is_none());
    }

    #[test]
    fn debug_shows_no_token_hash_nor_a_proven_secret() {
        let p = Policy::parse(POLICY).unwrap();
        assert!(p.by_token(b"test").is_some());
        let shown = format!("{p:?} {p:#?}");
        assert!(
            shown.contains("billing") && shown.contains("tokens: 1"),
            "{shown}"
        );
        assert!(
            !shown.contains("9f86") && !shown.contains("159, 134"),
            "{shown}"
        );
        assert!(
            !shown.contains("test\"") && !shown.contains("116, 101, 115, 116"),
            "{shown}"
        );
    }

    #[test]
    fn a_listing_scans_only_what_its_principal_may_read() {
        let p = Policy::parse(
            r#"
[[principal]]
name = "b"
[[principal]]
name = "root"
[[grant]]
principal = "b"
jobs = ["billing/", "billing/eu/", "shared/", "x"]
actions = ["read"]
[[grant]]
principal = "b"
jobs = ["ops/"]
actions = ["lease", "write"]
[[grant]]
principal = "root"
jobs = [""]
actions = ["admin"]
"#,
        )
        .unwrap();
        assert_eq!(p.read_ranges("b", ""), ["billing/", "shared/", "x"]);
        assert_eq!(p.read_ranges("b", "billing/eu/1"), ["billing/eu/1"]);
        assert_eq!(p.read_ranges("b", "s"), ["shared/"]);
        assert!(
            p.read_ranges("b", "ops/").is_empty(),
            "lease and write do not read"
        );
        assert!(p.read_ranges("nobody", "").is_empty());
        assert_eq!(p.read_ranges("root", "ops/"), ["ops/"]);
    }

    #[test]
    fn an_empty_job_list_is_refused_and_a_prefix_ending_in_a_name_is_warned_of() {
        let e = Policy::parse(&POLICY.replace(r#"jobs = ["billing/"]"#, "jobs = []")).unwrap_err();
        assert!(e.starts_with("line 8:") && e.contains("jobs = []"), "{e}");
        let p = Policy::parse(&POLICY.replace(r#"jobs = ["billing/"]"#, r#"jobs = ["billing"]"#))
            .unwrap();
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        assert!(
            p.warnings[0].contains("\"billing-prod/x\""),
            "{:?}",
            p.warnings
        );
        assert!(Policy::parse(POLICY).unwrap().warnings.is_empty());
        let every = "[[principal]]\nname = \"a\"\n[[grant]]\nprincipal = \"a\"\njobs = [\"\"]\nactions = [\"admin\"]\n";
        assert!(Policy::parse(every).unwrap().warnings.is_empty());
    }

    #[test]
    fn tokens_and_grants() {
        let p = Policy::parse(POLICY).unwrap();
        // sha256("test")
        assert_eq!(&*p.by_token(b"test").unwrap().name, "billing");
        assert!(p.by_token(b"tess").is_none());
        assert!(p.allows("billing", Action::Lease, "billing/x"));
        assert!(p.allows("billing", Action::Read, "billing/"));
        assert!(!p.allows("billing", Action::Write, "billing/x"));
        assert!(!p.allows("billing", Action::Lease, "ops/x"));
        assert!(!p.allows("nobody", Action::Read, "billing/x"));
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            (
                POLICY.replace("\"read\"]", "\"fly\"]"),
                10,
                "unknown action",
            ),
            (
                POLICY.replace("principal = \"billing\"", "principal = \"b\""),
                8,
                "no [[principal]]",
            ),
            (POLICY.replace("9f86", "zz86"), 5, "64 hex digits"),
            (POLICY.replace("jobs = [", "jobz = ["), 9, "unknown field"),
            (POLICY.replace("\"lease\",", "\"admin\","), 10, "every job"),
            ("[[principal]\nname = 1".to_owned(), 1, ""),
        ];
        for (text, line, words) in cases {
            let e = Policy::parse(&text).unwrap_err();
            assert!(e.starts_with(&format!("line {line}:")), "{e}");
            assert!(e.contains(words), "{e}");
        }
    }

    const LIMITED: &str = r#"
[[principal]]
name = "billing"
token_sha256 = ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]

[principal.limits]
max_in_flight = 50
max_waiters_per_job = 3

[[principal]]
name = "ops"
limits = { max_watchers = 7, max_jobs = 2 }
"#;

    fn limits_of(p: &Policy, name: &str) -> PrincipalLimits {
        p.principals
            .iter()
            .find(|q| &*q.name == name)
            .unwrap()
            .limits
    }

    #[test]
    fn a_principals_limits_are_its_own_and_default_to_the_servers() {
        let p = Policy::parse(LIMITED).unwrap();
        assert_eq!(
            limits_of(&p, "billing"),
            PrincipalLimits {
                max_in_flight: Some(50),
                max_watchers: None,
                max_waiters_per_job: Some(3),
                max_waiters: None,
                max_jobs: None,
                max_frame_rate: None,
                max_queued_response_kib: None,
            }
        );
        assert_eq!(
            limits_of(&p, "ops"),
            PrincipalLimits {
                max_watchers: Some(7),
                max_jobs: Some(2),
                ..PrincipalLimits::default()
            }
        );
        let p = Policy::parse(POLICY).unwrap();
        assert_eq!(limits_of(&p, "billing"), PrincipalLimits::default());
    }

    #[test]
    fn a_bad_limit_is_refused_naming_the_line_and_the_field() {
        let cases = [
            (
                "max_in_flight = 50",
                "max_in_flight = 0",
                7,
                "limits.max_in_flight = 0: must be 1 to",
            ),
            (
                "max_in_flight = 50",
                "max_in_flight = -5",
                7,
                "limits.max_in_flight = -5",
            ),
            (
                "max_waiters_per_job = 3",
                "max_waiters_per_job = 99999999999",
                8,
                "limits.max_waiters_per_job = 99999999999: must be 1 to 10000000",
            ),
            (
                "max_watchers = 7",
                "max_watchers = 0",
                12,
                "principal \"ops\": limits.max_watchers",
            ),
            (
                "max_jobs = 2",
                "max_jobs = 0",
                12,
                "principal \"ops\": limits.max_jobs = 0: must be 1 to 10000000 (leave it out \
                 for the server's --max-jobs)",
            ),
            (
                "max_in_flight = 50",
                "max_in_flight = \"50\"",
                7,
                "invalid type",
            ),
            (
                "max_in_flight = 50",
                "max_in_fligth = 50",
                7,
                "unknown field `max_in_fligth`",
            ),
        ];
        for (from, to, line, words) in cases {
            let text = LIMITED.replace(from, to);
            assert_ne!(text, LIMITED);
            let e = Policy::parse(&text).unwrap_err();
            assert!(e.starts_with(&format!("line {line}:")), "{e}");
            assert!(e.contains(words), "{e}");
        }
    }

    #[test]
    fn a_reload_keeps_each_principals_counters_by_name() {
        let auth = Auth {
            path: PathBuf::new(),
            policy: RwLock::default(),
            metrics: Arc::default(),
            logged: Mutex::default(),
            loads: Mutex::default(),
            reloaded: tokio::sync::watch::Sender::new(()),
            failures: Mutex::default(),
        };
        let mut first = Policy::parse(LIMITED).unwrap();
        auth.adopt(&mut first);
        let load = first.principals[0].load.clone();
        load.watchers
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut second =
            Policy::parse(&LIMITED.replace("max_in_flight = 50", "max_in_flight = 60")).unwrap();
        auth.adopt(&mut second);
        assert!(Arc::ptr_eq(&second.principals[0].load, &load));
        assert_eq!(limits_of(&second, "billing").max_in_flight, Some(60));
        // Renamed: counted afresh; the old name's counters go once
        // nothing uses them.
        drop((first, load));
        let mut third =
            Policy::parse(&LIMITED.replace("name = \"billing\"", "name = \"b2\"")).unwrap();
        auth.adopt(&mut third);
        assert!(!Arc::ptr_eq(
            &third.principals[0].load,
            &second.principals[0].load
        ));
        drop(second);
        auth.adopt(&mut Policy::parse(LIMITED).unwrap());
        let loads = auth.loads.lock().unwrap();
        assert!(loads.contains_key("b2") && loads.contains_key("billing"));
        assert_eq!(
            loads["billing"]
                .watchers
                .load(std::sync::atomic::Ordering::Acquire),
            0,
            "billing, forgotten in between, starts again from zero"
        );
    }

    #[test]
    fn common_names_are_read_from_the_subject() {
        // A certificate with subject CN=billing worker, O=x (made by
        // openssl; the signature does not matter here), and no SAN.
        let pem = include_str!("../testdata/cn_only.pem");
        let der = tokio_rustls::rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap();
        assert_eq!(
            subject_and_san(der.as_ref()),
            (vec!["billing worker".to_owned()], false)
        );
        assert_eq!(subject_and_san(b"\x30\x03\x02\x01"), (Vec::new(), false));
        let p = Policy::parse("[[principal]]\nname = \"b\"\ncert_names = [\"billing worker\"]\n")
            .unwrap();
        assert_eq!(&*p.by_cert(&der).unwrap().name, "b");
        // A common name is compared exactly.
        let p = Policy::parse("[[principal]]\nname = \"b\"\ncert_names = [\"Billing Worker\"]\n")
            .unwrap();
        let e = p.by_cert(&der).unwrap_err();
        assert!(e.contains("no SAN; common name \"billing worker\""), "{e}");
    }

    /// A self-signed certificate with subject alternative names `sans` (a
    /// URI when it has `://`, else a DNS name) and common name `cn`: only
    /// its names matter here.
    fn cert(sans: &[&str], cn: &str) -> CertificateDer<'static> {
        use rcgen::string::Ia5String;
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        for s in sans {
            let n = Ia5String::try_from(*s).unwrap();
            p.subject_alt_names.push(if s.contains("://") {
                rcgen::SanType::URI(n)
            } else {
                rcgen::SanType::DnsName(n)
            });
        }
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().clone()
    }

    const NAMED: &str = r#"
[[principal]]
name = "ops"
cert_names = ["ops.workers.internal"]

[[principal]]
name = "billing"
cert_names = ["billing.workers.internal", "spiffe://example.org/billing"]

[[principal]]
name = "fleet"
cert_names = ["*.fleet.internal"]
"#;

    fn cert_principal(p: &Policy, sans: &[&str], cn: &str) -> std::result::Result<String, String> {
        p.by_cert(&cert(sans, cn)).map(|p| p.name.to_string())
    }

    #[test]
    fn a_certificate_is_named_by_its_sans_exactly_and_by_its_cn_only_without_sans() {
        let p = Policy::parse(NAMED).unwrap();
        let named = |sans: &[&str], cn: &str| cert_principal(&p, sans, cn);
        assert_eq!(
            named(&["billing.workers.internal"], "x").unwrap(),
            "billing"
        );
        assert_eq!(
            named(&["Billing.Workers.Internal"], "x").unwrap(),
            "billing",
            "DNS ignores case"
        );
        assert_eq!(
            named(&["spiffe://example.org/billing"], "x").unwrap(),
            "billing"
        );
        assert!(
            named(&["spiffe://example.org/Billing"], "x").is_err(),
            "a URI is exact"
        );
        // A wildcard SAN is not a pattern over the principals' names...
        let e = named(&["*.workers.internal"], "x").unwrap_err();
        assert!(e.contains("names no principal"), "{e}");
        assert!(e.contains("\"*.workers.internal\""), "{e}");
        // ...it names only the principal that lists the wildcard itself,
        // and a name it would cover names nobody.
        assert_eq!(named(&["*.fleet.internal"], "x").unwrap(), "fleet");
        assert!(named(&["a.fleet.internal"], "x").is_err());
        // With SANs, the common name is not read: CN=ops with another SAN
        // is not ops.
        let e = named(&["nobody.elsewhere.internal"], "ops.workers.internal").unwrap_err();
        assert!(e.contains("names no principal"), "{e}");
        // Without SANs, it is, exactly.
        assert_eq!(named(&[], "ops.workers.internal").unwrap(), "ops");
        assert!(named(&[], "OPS.workers.internal").is_err());
        // Names of two principals: neither, whatever the order.
        for sans in [
            ["ops.workers.internal", "billing.workers.internal"],
            ["billing.workers.internal", "ops.workers.internal"],
        ] {
            let e = named(&sans, "x").unwrap_err();
            assert!(
                e.contains("names two principals, \"ops\" and \"billing\""),
                "{e}"
            );
        }
    }

    #[test]
    fn a_certificate_name_listed_for_two_principals_is_refused_at_load() {
        let e = Policy::parse(&format!(
            "{NAMED}\n[[principal]]\nname = \"admin\"\ncert_names = [\"OPS.workers.internal\"]\n"
        ))
        .unwrap_err();
        assert!(e.starts_with("line 16:"), "{e}");
        assert!(
            e.contains("\"OPS.workers.internal\" is also principal \"ops\"'s"),
            "{e}"
        );
        // Twice for one principal is harmless.
        Policy::parse(&NAMED.replace(
            "[\"ops.workers.internal\"]",
            "[\"ops.workers.internal\", \"ops.workers.internal\"]",
        ))
        .unwrap();
    }

    #[test]
    fn equal_bytes_in_constant_time() {
        assert!(constant_time_eq(b"ab", b"ab"));
        assert!(!constant_time_eq(b"ab", b"ac"));
        assert!(!constant_time_eq(b"ab", b"abc"));
    }
}
