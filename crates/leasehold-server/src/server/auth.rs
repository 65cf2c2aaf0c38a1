//! Who may do what: principals, their credentials, and their grants.
//!
//! A policy (`serve --policy FILE`, TOML) names **principals**, each known
//! by client-certificate names (a DNS subject alternative name, or the
//! subject's common name, of a certificate that `--tls-client-ca`
//! verified) and/or bearer tokens (kept
//! as the SHA-256 of the secret), and **grants**: a principal may do a set
//! of actions on the jobs whose names start with a prefix.
//!
//! ```toml
//! [[principal]]
//! name = "billing"
//! cert_names = ["billing.workers.internal"]
//! token_sha256 = ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
//!
//! [principal.limits]         # optional: this principal's own limits
//! max_in_flight = 50         # its calls in flight, all its connections together
//! max_watchers = 100         # its open WatchLease streams
//! max_waiters_per_job = 10   # its Acquires waiting on one job
//!
//! [[grant]]
//! principal = "billing"
//! jobs = ["billing/"]        # job-name prefixes; "" is every job
//! actions = ["lease", "write", "read"]
//! ```
//!
//! | action | calls |
//! |---|---|
//! | `lease` | Acquire, Renew, Release, KeepAlive |
//! | `write` | CheckedWrite, WriteStream |
//! | `read` | GetLease, ListLeases, WatchLease, Read, ListKeys |
//! | `admin` | all of the above on every job, DeleteJob, `Admin.Backup`, the admin port's `/metrics` |
//!
//! **Credentials are checked in one place**: [`AuthLayer`], in front of
//! every handler, finds the caller's principal from its bearer token
//! (`authorization: Bearer SECRET`) or else its client certificate, and
//! puts a [`Caller`] into the request's extensions; a call with neither,
//! or a token no principal has, is refused there with UNAUTHENTICATED.
//! Health and reflection are open to anyone. The per-job check needs the
//! job's name from the decoded message, so it is [`Caller::authorize`],
//! which the request conversions (`server/convert.rs`) call as they
//! validate each request; no handler looks at credentials.
//!
//! **A lease is bound to its principal**: with a policy, the holder the
//! lease rules see is the principal's name and the client's holder string
//! together ([`Caller::bind`]). The rules compare holders on every Renew,
//! Release, Acquire and KeepAlive, so another principal cannot act on the
//! lease even with the right holder string and token, in the same
//! decision (no check-then-act window), and the binding is stored with
//! the lease by both backends as part of its holder. A fenced write names
//! no holder, so its binding is checked against the job's lease before the
//! write ([`Caller::check_write`]): refused when the live grant of that
//! very token belongs to another principal. Since a token is never issued
//! twice, and the write is still refused unless that token is live when it
//! is decided, the check cannot be raced.
//!
//! **A principal's limits** (`[principal.limits]`, or inline as
//! `limits = { max_in_flight = 50 }`) hold it to a share of the server:
//! each field left out is the server's flag of the same name
//! (`--max-in-flight`, `--max-watchers`, `--max-waiters-per-job`), and a
//! value must be 1 to [`MAX_PRINCIPAL_LIMIT`]. `max_in_flight` counts as
//! `--max-in-flight` does, across all the principal's connections, with
//! renewals (Renew, KeepAlive) on a budget of their own, so a principal
//! at its limit still renews its leases. Admission checks it
//! (`server/layers.rs`), and the quotas the other two
//! (`server/leases.rs`), in both cases before the server's own limit, so
//! that a call refused for its principal takes nothing from the others.
//! Over one: RESOURCE_EXHAUSTED, reason OVERLOADED (`max_in_flight`) or
//! QUOTA_EXCEEDED, the message naming the principal and the limit
//! (`principal "billing": max_in_flight 50`), `limit`, `max` and
//! `principal` in the ErrorInfo; counted in `leasehold_overloaded_total`
//! or `leasehold_quota_exceeded_total` with the field as its `limit`, and
//! logged at most once a second per principal. What a principal has open
//! is counted under its name ([`PrincipalLoad`]) across reloads.
//!
//! The policy is read again on SIGHUP; one that does not load keeps the
//! one in use. A call is held to the grants and limits of the policy in
//! force when it arrived. Every refusal counts in
//! `leasehold_auth_denied_total` and is logged, at most once a second per
//! principal.
//!
//! # How a call is authenticated
//!
//! [`AuthLayer`] sits after the RPC metrics and the connection's share of
//! admission, before the principal's share and the wire guard
//! ([`super::layers`]). A bearer token is hashed (SHA-256) and compared in
//! constant time with every stored hash the first time a secret is seen;
//! a secret that matched is kept in the policy's memory, so later calls
//! skip the hash. Else the client certificate that the handshake verified
//! (in the connection's [`Peer`], see [`super::tls`]) is matched by a DNS
//! name it is valid for (webpki). A connection keeps the [`Caller`] its
//! last call was authenticated as, with the exact `authorization` bytes it
//! came with (or none, for a certificate), in its `Peer` ([`CallerMemo`]):
//! the next call with the same bytes under the same policy (the same
//! `Arc`) is that caller again, with no lookup. Only a caller that was
//! found is kept, so a wrong token is looked up and refused every time;
//! after a reload the next call is authenticated afresh. The `Caller`
//! holds the policy as it was when the call arrived.
//!
//! The admin port (`/metrics`, the status page) has no tower layer in
//! front: its handlers call [`Auth::authenticate`] (through
//! [`admin_check`] for `/metrics`) on the connection's `Peer` and headers,
//! the same code. No gRPC handler reads a token or a certificate; the two
//! that read the connection's `Peer` (`leases.rs`, `fenced.rs`) take only
//! its `load`, for pacing.
//!
//! # Per-job rules and the binding
//!
//! The conversions every handler goes through (`job_arg` and the `*_args`
//! functions of `server/convert.rs`, and once per message on the streams)
//! call [`Caller::authorize`]. A refusal is PERMISSION_DENIED (reason,
//! action and job in its ErrorInfo). Listings are filtered by
//! [`Caller::may_read`].
//!
//! [`Caller::bind`] makes the holder the rules see `principal` + U+001F +
//! `holder`. A validated holder has no control characters, so no client
//! can forge it, and both backends store it as any holder (no record
//! format changed). A mismatch is LEASE_LOST in the decision, which
//! [`Caller::refine`] reports as PERMISSION_DENIED when the lease is
//! another principal's; `convert::lease` splits the holder back into
//! `holder` and `principal`. A write's holder guard is asked by the core's
//! `rules::admit_write` before the fence, on both backends: a write with
//! another principal's live token is PERMISSION_DENIED even when a higher
//! token already wrote the key.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tonic::codegen::http;
use tower::{Layer, Service};

use crate::error::{Error, Result};
use crate::lease::{HolderId, JobName, LeaseState, LeaseView};
use crate::metrics::RpcMetrics;
use crate::server::conn::Peer;
use crate::server::grpc_status::to_status;

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Acquire, Renew, Release, KeepAlive.
    Lease,
    /// CheckedWrite, WriteStream.
    Write,
    /// GetLease, ListLeases, WatchLease, Read, ListKeys.
    Read,
    /// Everything on every job, backups and the admin port.
    Admin,
}

impl Action {
    /// The action's name in the policy file.
    pub fn name(self) -> &'static str {
        match self {
            Action::Lease => "lease",
            Action::Write => "write",
            Action::Read => "read",
            Action::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }

    fn parse(s: &str) -> Option<Action> {
        [Action::Lease, Action::Write, Action::Read, Action::Admin]
            .into_iter()
            .find(|a| a.name() == s)
    }
}

/// A loaded policy.
#[derive(Debug, Default)]
pub struct Policy {
    principals: Vec<Principal>,
    /// Secrets already proven, and whose they are (an index into
    /// `principals`): a client sends the same token with every call, and
    /// its SHA-256 was a third of what a policy adds to a call. Only
    /// secrets that matched are kept (garbage cannot fill it), at most
    /// [`PROVEN_MAX`], and a reload starts a new policy with none.
    proven: std::sync::Mutex<HashMap<Box<[u8]>, usize>>,
}

/// Proven secrets kept at most; past it the set starts again.
const PROVEN_MAX: usize = 4096;

#[derive(Debug)]
struct Principal {
    name: Arc<str>,
    /// Each `cert_names` entry, and its form as a DNS name if it is one.
    cert_names: Vec<(String, Option<ServerName<'static>>)>,
    tokens: Vec<[u8; 32]>,
    /// (job prefix, actions as bits).
    grants: Vec<(String, u8)>,
    admin: bool,
    limits: PrincipalLimits,
    /// What it has open; the same counters across reloads ([`Auth`]).
    load: Arc<PrincipalLoad>,
}

/// A principal's own limits, from its `[principal.limits]`: each `None`
/// (left out) is the server's flag of the same name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrincipalLimits {
    /// Its calls in flight at once across all its connections, in each
    /// budget, counted as `--max-in-flight` counts them
    /// ([`super::layers`]).
    pub max_in_flight: Option<usize>,
    /// Its `WatchLease` streams open at once (`--max-watchers`).
    pub max_watchers: Option<usize>,
    /// Its Acquires waiting on one job at once (`--max-waiters-per-job`).
    pub max_waiters_per_job: Option<usize>,
}

/// What one principal has open on this server, counted against its
/// [`PrincipalLimits`]: by admission ([`super::layers`]) and by the quotas
/// ([`super::leases::Quotas`]). Kept by the principal's name across
/// reloads, so that a reload's new limits apply to what is already open.
#[derive(Debug, Default)]
pub struct PrincipalLoad {
    /// Calls in flight, by budget (the index of `layers::budget`).
    pub in_flight: [AtomicUsize; 2],
    /// Open `WatchLease` streams.
    pub watchers: AtomicUsize,
    /// Acquires waiting, by job.
    pub waiting: Mutex<HashMap<JobName, usize>>,
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
                let dns = ServerName::try_from(n.as_str())
                    .ok()
                    .filter(|s| matches!(s, ServerName::DnsName(_)))
                    .map(|s| s.to_owned());
                cert_names.push((n.clone(), dns));
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
                            "unknown action {:?}: the actions are lease, write, read, admin",
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
            if bits & Action::Admin.bit() != 0 {
                p.admin = true;
            }
            for j in g.jobs {
                p.grants.push((j.into_inner(), bits));
            }
        }
        Ok(Policy {
            principals,
            proven: Default::default(),
        })
    }

    /// The principal a bearer secret belongs to: a secret proven before,
    /// else the first sight's check, where every stored hash is compared,
    /// each in constant time.
    fn by_token(&self, secret: &[u8]) -> Option<&Principal> {
        let proven = || self.proven.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&i) = proven().get(secret) {
            return Some(&self.principals[i]);
        }
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

    /// The principal a (verified) client certificate names: the first
    /// whose `cert_names` has a DNS name the certificate is valid for (its
    /// subject alternative names, wildcards as TLS reads them), or its
    /// subject's common name (compared ignoring ASCII case).
    fn by_cert(&self, cert: &CertificateDer<'_>) -> Option<&Principal> {
        let ee = webpki::EndEntityCert::try_from(cert).ok();
        let cns = common_names(cert.as_ref());
        self.principals.iter().find(|p| {
            p.cert_names.iter().any(|(name, dns)| {
                dns.as_ref()
                    .zip(ee.as_ref())
                    .is_some_and(|(d, ee)| ee.verify_is_valid_for_subject_name(d).is_ok())
                    || cns.iter().any(|cn| cn.eq_ignore_ascii_case(name))
            })
        })
    }

    fn allows(&self, principal: &str, action: Action, job: &str) -> bool {
        let Some(p) = self.principals.iter().find(|p| &*p.name == principal) else {
            return false;
        };
        p.admin
            || p.grants
                .iter()
                .any(|(prefix, bits)| bits & action.bit() != 0 && job.starts_with(prefix.as_str()))
    }
}

/// The common names (OID 2.5.4.3) in a DER certificate's subject; empty
/// when it has none or does not parse. A certificate reaches here only
/// after the handshake verified it.
fn common_names(der: &[u8]) -> Vec<String> {
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
    let subject = (|| {
        let (_, cert, _) = tlv(der)?;
        let (_, mut tbs, _) = tlv(cert)?;
        // [0] version, if present; then serial, signature, issuer,
        // validity, subject.
        if tbs.first() == Some(&0xa0) {
            tbs = tlv(tbs)?.2;
        }
        for _ in 0..4 {
            tbs = tlv(tbs)?.2;
        }
        Some(tlv(tbs)?.1)
    })();
    let mut out = Vec::new();
    let mut rdns = subject.unwrap_or_default();
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
    out
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
#[derive(Debug)]
pub struct Auth {
    path: PathBuf,
    policy: RwLock<Arc<Policy>>,
    metrics: Arc<RpcMetrics>,
    /// When each principal's last refusal was logged.
    logged: Mutex<HashMap<String, Instant>>,
    /// Each principal's [`PrincipalLoad`], by name, for as long as a
    /// policy or a call uses it: a reloaded policy's principal counts on
    /// where the one of the same name counted.
    loads: Mutex<HashMap<Arc<str>, Arc<PrincipalLoad>>>,
}

impl Auth {
    /// Loads the policy at `path`; refusals count in `metrics`.
    pub fn load(path: PathBuf, metrics: Arc<RpcMetrics>) -> Result<Arc<Auth>> {
        let mut policy = Policy::load(&path)?;
        let auth = Auth {
            path,
            policy: RwLock::new(Arc::default()),
            metrics,
            logged: Mutex::new(HashMap::new()),
            loads: Mutex::new(HashMap::new()),
        };
        auth.adopt(&mut policy);
        *auth.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        Ok(Arc::new(auth))
    }

    /// Reads the policy file again; on an error the policy in use stays.
    /// Calls in progress keep the policy they began with; new calls are
    /// held to the new one's grants and limits.
    pub fn reload(&self) -> Result<()> {
        let mut policy = Policy::load(&self.path)?;
        self.adopt(&mut policy);
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        Ok(())
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

    /// Finds the caller's principal from the request's `authorization`
    /// header (a bearer token) or else its client certificate.
    ///
    /// A connection's calls carry the same credentials, call after call:
    /// the caller found for the last one is kept on the connection
    /// ([`CallerMemo`]) and is the answer again for the same credentials
    /// under the same policy, without the lookup (or, for a client
    /// certificate, without reading the certificate again).
    pub fn authenticate(
        self: &Arc<Self>,
        headers: &http::HeaderMap,
        peer: Option<&Peer>,
    ) -> Result<Caller> {
        let header = headers.get(http::header::AUTHORIZATION);
        let memo = peer.map(|p| &*p.caller);
        let policy = {
            let current = self.policy.read().unwrap_or_else(|e| e.into_inner());
            if let Some(caller) = memo.and_then(|m| m.get(&current, header)) {
                return Ok(caller);
            }
            current.clone()
        };
        let principal = match header {
            Some(v) => {
                let secret = bearer(v.as_bytes()).ok_or_else(|| {
                    self.unauthenticated("the authorization header is not `Bearer SECRET`")
                })?;
                policy
                    .by_token(secret)
                    .ok_or_else(|| self.unauthenticated("the bearer token matches no principal"))?
            }
            None => {
                let cert = peer
                    .and_then(|p| p.certs.as_ref())
                    .and_then(|c| c.first())
                    .ok_or_else(|| {
                        self.unauthenticated(
                            "no credentials: send a bearer token (authorization: Bearer SECRET) \
                             or a client certificate",
                        )
                    })?;
                policy.by_cert(cert).ok_or_else(|| {
                    self.unauthenticated("the client certificate names no principal")
                })?
            }
        };
        let caller = Caller(Some(Arc::new(Known {
            principal: principal.name.clone(),
            limits: principal.limits,
            load: principal.load.clone(),
            policy,
            auth: self.clone(),
        })));
        if let Some(m) = memo {
            m.set(header, &caller);
        }
        Ok(caller)
    }

    fn unauthenticated(&self, why: &'static str) -> Error {
        self.metrics.denied("unauthenticated", "none");
        self.log("", why);
        Error::Unauthenticated(why.to_owned())
    }

    /// Logs a refusal, at most once a second per principal.
    fn log(&self, principal: &str, what: &str) {
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

/// The caller a connection's last call was authenticated as, and by what:
/// the exact `authorization` header it sent, or none (its client
/// certificate, which a connection cannot change). Only a caller that was
/// found is kept, so a wrong token is looked up (and refused) every time.
/// It answers only for the policy it was found under: after a reload the
/// next call is authenticated afresh, and replaces it.
#[derive(Default)]
pub struct CallerMemo(Mutex<Option<(Option<http::HeaderValue>, Caller)>>);

impl std::fmt::Debug for CallerMemo {
    /// The principal only: the header holds a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let principal = memo
            .as_ref()
            .and_then(|(_, c)| c.principal().map(str::to_owned));
        f.debug_tuple("CallerMemo").field(&principal).finish()
    }
}

impl CallerMemo {
    /// The kept caller, if it was found for exactly `header` under
    /// `policy`.
    fn get(&self, policy: &Arc<Policy>, header: Option<&http::HeaderValue>) -> Option<Caller> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (kept_header, caller) = memo.as_ref()?;
        let known = caller.0.as_ref()?;
        let same = match (kept_header, header) {
            (Some(a), Some(b)) => a.as_bytes() == b.as_bytes(),
            (None, None) => true,
            _ => false,
        };
        (same && Arc::ptr_eq(&known.policy, policy)).then(|| caller.clone())
    }

    fn set(&self, header: Option<&http::HeaderValue>, caller: &Caller) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((header.cloned(), caller.clone()));
    }
}

/// Who is calling: put into each request's extensions by [`AuthLayer`].
/// Without a policy, anyone ([`Caller::open`]), and nothing is bound.
#[derive(Clone, Default)]
pub struct Caller(Option<Arc<Known>>);

struct Known {
    principal: Arc<str>,
    /// The principal's limits in the policy as it was when the call
    /// arrived, and what it has open now.
    limits: PrincipalLimits,
    load: Arc<PrincipalLoad>,
    /// The policy as it was when the call arrived.
    policy: Arc<Policy>,
    auth: Arc<Auth>,
}

/// Separates the principal from the client's holder string in a bound
/// holder. A control character, which no validated holder contains.
const BIND: char = '\u{1f}';

impl Caller {
    /// A caller on a server without a policy: allowed everything.
    pub fn open() -> Caller {
        Caller(None)
    }

    /// The caller of `req`: the one [`AuthLayer`] put there, or an open
    /// caller on a server without a policy (where no layer puts one).
    pub fn of<T>(req: &tonic::Request<T>) -> Caller {
        req.extensions()
            .get::<Caller>()
            .cloned()
            .unwrap_or_default()
    }

    /// The caller's principal, if the server has a policy.
    pub fn principal(&self) -> Option<&str> {
        self.0.as_ref().map(|k| &*k.principal)
    }

    /// Whether the caller may do `action` on `job`. A refusal is counted
    /// and logged, and says nothing of the job.
    pub fn authorize(&self, action: Action, job: &str) -> Result<()> {
        let Some(k) = &self.0 else { return Ok(()) };
        if k.policy.allows(&k.principal, action, job) {
            return Ok(());
        }
        Err(self.denied(
            action,
            job,
            "the policy grants it no such action on this job",
        ))
    }

    /// Whether the caller may read any job at all (a `read` grant on some
    /// prefix, or `admin`): what the status page asks of it.
    pub fn reads_something(&self) -> bool {
        self.0.as_ref().is_none_or(|k| {
            k.policy
                .principals
                .iter()
                .find(|p| *p.name == *k.principal)
                .is_some_and(|p| {
                    p.admin
                        || p.grants
                            .iter()
                            .any(|(_, bits)| bits & Action::Read.bit() != 0)
                })
        })
    }

    /// Whether the caller may read `job` (for filtering listings; not
    /// counted as a refusal).
    pub fn may_read(&self, job: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|k| k.policy.allows(&k.principal, Action::Read, job))
    }

    fn denied(&self, action: Action, job: &str, why: &'static str) -> Error {
        if let Some(k) = &self.0 {
            k.auth.metrics.denied("permission_denied", action.name());
            k.auth.log(
                &k.principal,
                &format!("{} on job {job:?}: {why}", action.name()),
            );
        }
        Error::PermissionDenied {
            action: action.name(),
            job: job.to_owned(),
            why,
        }
    }

    /// The holder the lease rules see for the client's `holder`: bound to
    /// the caller's principal when the server has a policy.
    pub fn bind(&self, holder: HolderId) -> HolderId {
        match &self.0 {
            None => holder,
            Some(k) => {
                // Not `format!`: this runs on every call with a policy.
                let mut s = String::with_capacity(
                    k.principal.len() + BIND.len_utf8() + holder.as_str().len(),
                );
                s.push_str(&k.principal);
                s.push(BIND);
                s.push_str(holder.as_str());
                HolderId::from_trusted(s)
            }
        }
    }

    /// Turns a decision's error into what this caller is told: a lease
    /// lost to another principal is PERMISSION_DENIED (naming neither its
    /// holder nor its token), and a holder named in an error is shown as
    /// its client sent it.
    pub fn refine(&self, action: Action, e: Error) -> Error {
        match e {
            Error::LeaseLost {
                job,
                current_holder: Some(h),
                current,
            } => {
                let (principal, holder) = unbind(&h);
                if self.0.is_some() && principal.is_some() && principal != self.principal() {
                    return self.denied(action, &job, "the lease is held by another principal");
                }
                Error::LeaseLost {
                    job,
                    current_holder: Some(holder.to_owned()),
                    current,
                }
            }
            e => e,
        }
    }

    /// After an `Acquire` that did not get the lease: refused when the
    /// lease is held under the very holder string the caller sent, by
    /// another principal (a hijack attempt, not a competitor).
    pub fn check_acquired(
        &self,
        acquired: bool,
        holder: &HolderId,
        view: &LeaseView,
    ) -> Result<()> {
        if acquired || self.0.is_none() {
            return Ok(());
        }
        if let LeaseState::Held { holder: h, .. } = &view.state {
            let (principal, raw) = unbind(h.as_str());
            if principal.is_some() && principal != self.principal() && raw == holder.as_str() {
                return Err(self.denied(
                    Action::Lease,
                    view.job.as_str(),
                    "the lease is held by another principal",
                ));
            }
        }
        Ok(())
    }

    /// Before a fenced write with `token` on the job of `view` (its lease
    /// now): refused when the live grant of that token belongs to another
    /// principal.
    pub fn check_write(&self, token: u64, view: &LeaseView) -> Result<()> {
        if self.0.is_none() || view.token.0 != token {
            return Ok(());
        }
        if let LeaseState::Held { holder, .. } = &view.state {
            if self.held_by_another(holder.as_str()) {
                return Err(self.refused_write(&view.job));
            }
        }
        Ok(())
    }

    /// Whether a grant held as `holder` (bound, as stored) is another
    /// principal's: a write with its token is refused to this caller. The
    /// [`crate::backend::HolderGuard`] of a fenced write.
    pub fn held_by_another(&self, holder: &str) -> bool {
        let (principal, _) = unbind(holder);
        self.0.is_some() && principal.is_some() && principal != self.principal()
    }

    /// The refusal of a write to `job`, whose live grant is another
    /// principal's: counted and logged.
    pub fn refused_write(&self, job: &JobName) -> Error {
        self.denied(
            Action::Write,
            job.as_str(),
            "the job's lease is held by another principal",
        )
    }

    /// Whether the server has a policy.
    pub fn is_policed(&self) -> bool {
        self.0.is_some()
    }

    /// The caller's principal's own limits (from the policy as it was when
    /// the call arrived) and what the principal has open now; `None`
    /// without a policy.
    pub fn share(&self) -> Option<(&PrincipalLimits, &Arc<PrincipalLoad>)> {
        self.0.as_ref().map(|k| (&k.limits, &k.load))
    }

    /// The refusal of a call at its principal's own `limit` (the policy's
    /// field) of `max`: QUOTA_EXCEEDED when `quota`, else OVERLOADED.
    /// Logged at most once a second per principal; counting it in the
    /// metrics is the refuser's.
    pub fn over_limit(&self, limit: &'static str, max: usize, quota: bool) -> Error {
        let principal = self.principal().map(str::to_owned);
        if let Some(k) = &self.0 {
            k.auth
                .log(&k.principal, &format!("at its limit: {limit} {max}"));
        }
        match quota {
            true => Error::QuotaExceeded {
                limit,
                max,
                principal,
            },
            false => Error::Overloaded {
                limit,
                max,
                principal,
            },
        }
    }
}

/// A stored holder as (principal, the client's holder string).
pub fn unbind(stored: &str) -> (Option<&str>, &str) {
    match stored.split_once(BIND) {
        Some((p, h)) => (Some(p), h),
        None => (None, stored),
    }
}

/// The secret of an `authorization` header's value `Bearer SECRET` (the
/// scheme's name in any case, as HTTP allows).
fn bearer(v: &[u8]) -> Option<&[u8]> {
    let (scheme, secret) = v.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then_some(secret)
        .filter(|s| !s.is_empty())
}

/// Paths open to anyone: health and reflection.
fn is_open(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.") || path.starts_with("/grpc.reflection.")
}

/// Authenticates every call (see the module docs): puts the [`Caller`]
/// into its extensions, or answers UNAUTHENTICATED.
/// Without a policy it lets every call through, and the handlers see an
/// open [`Caller`].
#[derive(Clone)]
pub struct AuthLayer {
    auth: Option<Arc<Auth>>,
}

impl AuthLayer {
    /// A layer checking against `auth`'s policy, if there is one.
    pub fn new(auth: Option<Arc<Auth>>) -> Self {
        AuthLayer { auth }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

/// The service made by [`AuthLayer`].
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    auth: Option<Arc<Auth>>,
}

impl<S, B, R> Service<http::Request<B>> for AuthService<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if let Some(auth) = self.auth.as_ref().filter(|_| !is_open(req.uri().path())) {
            let peer = req.extensions().get::<Peer>();
            match auth.authenticate(req.headers(), peer) {
                Ok(caller) => {
                    req.extensions_mut().insert(caller);
                }
                Err(e) => {
                    let status = to_status(&e);
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            }
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(inner.call(req))
    }
}

/// For the admin port: whether the request may see `/metrics` (the
/// `admin` action). `None` without a policy.
pub fn admin_check(
    auth: Option<&Arc<Auth>>,
    headers: &http::HeaderMap,
    peer: Option<&Peer>,
) -> Result<()> {
    let Some(auth) = auth else { return Ok(()) };
    auth.authenticate(headers, peer)?
        .authorize(Action::Admin, "")
}

/// A short description of a denial for the admin port's answer.
pub fn describe(e: &Error) -> Cow<'static, str> {
    Cow::Owned(format!("{e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;

    const POLICY: &str = r#"
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
limits = { max_watchers = 7 }
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
            }
        );
        assert_eq!(
            limits_of(&p, "ops"),
            PrincipalLimits {
                max_watchers: Some(7),
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
    fn a_connection_keeps_its_caller_for_the_same_credentials_under_the_same_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, POLICY).unwrap();
        let auth = Auth::load(path.clone(), Arc::default()).unwrap();
        let header = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        let known = |c: &Caller| c.0.clone().unwrap();
        let (good, wrong) = (header("Bearer test"), header("Bearer tess"));
        let peer = Peer::default();
        let first = auth.authenticate(&good, Some(&peer)).unwrap();
        let again = auth.authenticate(&good, Some(&peer)).unwrap();
        assert!(Arc::ptr_eq(&known(&first), &known(&again)), "kept");
        // Other credentials on the same connection are looked up, and a
        // wrong token stays refused, every time.
        for _ in 0..2 {
            assert!(matches!(
                auth.authenticate(&wrong, Some(&peer)),
                Err(Error::Unauthenticated(_))
            ));
            assert!(matches!(
                auth.authenticate(&http::HeaderMap::new(), Some(&peer)),
                Err(Error::Unauthenticated(_))
            ));
        }
        // Another connection has its own.
        let other = auth.authenticate(&good, Some(&Peer::default())).unwrap();
        assert!(!Arc::ptr_eq(&known(&first), &known(&other)));
        // After a reload that drops the token, the kept caller is not
        // taken for the new policy's.
        std::fs::write(
            &path,
            POLICY.replace(
                "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                "0000000000000000000000000000000000000000000000000000000000000000",
            ),
        )
        .unwrap();
        auth.reload().unwrap();
        assert!(matches!(
            auth.authenticate(&good, Some(&peer)),
            Err(Error::Unauthenticated(_))
        ));
        // And the debug form shows the principal, never the secret.
        std::fs::write(&path, POLICY).unwrap();
        auth.reload().unwrap();
        auth.authenticate(&good, Some(&peer)).unwrap();
        let shown = format!("{peer:?}");
        assert!(
            shown.contains("billing") && !shown.contains("test"),
            "{shown}"
        );
    }

    #[test]
    fn a_reload_keeps_each_principals_counters_by_name() {
        let auth = Auth {
            path: PathBuf::new(),
            policy: RwLock::default(),
            metrics: Arc::default(),
            logged: Mutex::default(),
            loads: Mutex::default(),
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
        // openssl; the signature does not matter here).
        let pem = include_str!("testdata/cn_only.pem");
        let der = tokio_rustls::rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap();
        assert_eq!(common_names(der.as_ref()), ["billing worker"]);
        assert!(common_names(b"\x30\x03\x02\x01").is_empty());
        let p = Policy::parse("[[principal]]\nname = \"b\"\ncert_names = [\"Billing Worker\"]\n")
            .unwrap();
        assert_eq!(&*p.by_cert(&der).unwrap().name, "b");
    }

    #[test]
    fn bearer_secrets() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bear"), None);
    }

    #[test]
    fn a_bound_holder_splits_back() {
        assert_eq!(unbind("p\u{1f}h@1"), (Some("p"), "h@1"));
        assert_eq!(unbind("h@1"), (None, "h@1"));
        assert!(constant_time_eq(b"ab", b"ab"));
        assert!(!constant_time_eq(b"ab", b"ac"));
        assert!(!constant_time_eq(b"ab", b"abc"));
    }
}
