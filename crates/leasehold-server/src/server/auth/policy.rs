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
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

use crate::error::{Error, Result};
use crate::lease::JobName;
use crate::metrics::RpcMetrics;

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

/// One `[[principal]]` of a policy, with its grants.
#[derive(Debug)]
pub(super) struct Principal {
    pub(super) name: Arc<str>,
    /// Each `cert_names` entry, and its form as a DNS name if it is one.
    cert_names: Vec<(String, Option<ServerName<'static>>)>,
    tokens: Vec<[u8; 32]>,
    /// (job prefix, actions as bits).
    grants: Vec<(String, u8)>,
    admin: bool,
    pub(super) limits: PrincipalLimits,
    /// What it has open; the same counters across reloads ([`Auth`]).
    pub(super) load: Arc<PrincipalLoad>,
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
    pub(super) fn by_token(&self, secret: &[u8]) -> Option<&Principal> {
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
    pub(super) fn by_cert(&self, cert: &CertificateDer<'_>) -> Option<&Principal> {
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

    fn principal(&self, name: &str) -> Option<&Principal> {
        self.principals.iter().find(|p| &*p.name == name)
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
    pub(super) policy: RwLock<Arc<Policy>>,
    pub(super) metrics: Arc<RpcMetrics>,
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
        let pem = include_str!("../testdata/cn_only.pem");
        let der = tokio_rustls::rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap();
        assert_eq!(common_names(der.as_ref()), ["billing worker"]);
        assert!(common_names(b"\x30\x03\x02\x01").is_empty());
        let p = Policy::parse("[[principal]]\nname = \"b\"\ncert_names = [\"Billing Worker\"]\n")
            .unwrap();
        assert_eq!(&*p.by_cert(&der).unwrap().name, "b");
    }

    #[test]
    fn equal_bytes_in_constant_time() {
        assert!(constant_time_eq(b"ab", b"ab"));
        assert!(!constant_time_eq(b"ab", b"ac"));
        assert!(!constant_time_eq(b"ab", b"abc"));
    }
}
