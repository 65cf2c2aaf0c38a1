//! Who is calling: a [`Caller`], found from a bearer token or a client
//! certificate ([`Auth::authenticate`]), kept on its connection for the
//! next call ([`CallerMemo`]), and asked by the handlers' conversions what
//! it may do, and whose a lease is.

use std::sync::{Arc, Mutex};

use tokio_rustls::rustls::pki_types::CertificateDer;
use tonic::codegen::http;

use super::policy::{Action, Auth, Policy, PrincipalLimits, PrincipalLoad};
use crate::error::{Error, Result};
use crate::lease::{HolderId, LeaseState, LeaseView, BIND};

/// What authentication reads of the connection a call came on: the client
/// certificate its handshake verified, and the [`CallerMemo`] it keeps
/// between calls. The connection's own state (`server/conn.rs`) implements
/// it, so that the dependency points one way: the transport knows this
/// trait and the memo, and nothing here knows the transport.
pub trait Connection {
    /// The client's own certificate (the first of the chain the handshake
    /// verified); `None` without one, or without TLS.
    fn client_cert(&self) -> Option<&CertificateDer<'static>>;

    /// Where the connection keeps the caller its last call was
    /// authenticated as.
    fn caller_memo(&self) -> &CallerMemo;

    /// The client's address, which failed authentications are counted
    /// against; `None` if not known.
    fn remote_ip(&self) -> Option<std::net::IpAddr>;
}

impl Auth {
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
        conn: Option<&impl Connection>,
    ) -> Result<Caller> {
        let header = headers.get(http::header::AUTHORIZATION);
        let memo = conn.map(|c| c.caller_memo());
        let policy = {
            let current = self.policy.read().unwrap_or_else(|e| e.into_inner());
            if let Some(caller) = memo.and_then(|m| m.get(&current, header)) {
                return Ok(caller);
            }
            current.clone()
        };
        let credential;
        let remote = conn.and_then(|c| c.remote_ip());
        let principal = match header {
            Some(v) => {
                credential = Credential::Token(v.clone());
                let secret = bearer(v.as_bytes()).ok_or_else(|| {
                    self.unauthenticated("the authorization header is not `Bearer SECRET`")
                })?;
                // A secret proven before costs a lookup; any other a
                // SHA-256 of up to 16 KiB, which an address past its
                // failures is not given.
                match policy.proven(secret) {
                    Some(p) => p,
                    None => {
                        self.throttle(remote)?;
                        policy.by_token(secret).ok_or_else(|| {
                            self.failed(remote);
                            self.unauthenticated("the bearer token matches no principal")
                        })?
                    }
                }
            }
            None => {
                let cert = conn.and_then(|c| c.client_cert()).ok_or_else(|| {
                    self.unauthenticated(
                        "no credentials: send a bearer token (authorization: Bearer SECRET) \
                             or a client certificate",
                    )
                })?;
                credential = Credential::Cert(cert.clone());
                self.throttle(remote)?;
                policy.by_cert(cert).map_err(|why| {
                    self.failed(remote);
                    self.unauthenticated(why)
                })?
            }
        };
        let caller = Caller(Some(Arc::new(Known {
            principal: principal.name.clone(),
            limits: principal.limits,
            load: principal.load.clone(),
            policy,
            auth: self.clone(),
            credential,
        })));
        if let Some(m) = memo {
            m.set(header, &caller);
        }
        Ok(caller)
    }

    fn unauthenticated(&self, why: impl Into<String>) -> Error {
        let why = why.into();
        self.metrics.denied("unauthenticated", "none");
        self.log("", &why);
        Error::Unauthenticated(why)
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
    /// The kept caller's principal, if any.
    pub fn principal(&self) -> Option<String> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        memo.as_ref()?.1.principal().map(str::to_owned)
    }

    /// The kept caller's principal's budget of frames across its
    /// connections (its `max_frame_rate`) and its load, if it has one.
    pub fn frame_budget(&self) -> Option<(usize, Arc<PrincipalLoad>)> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (_, caller) = memo.as_ref()?;
        let (limits, load) = caller.share()?;
        Some((limits.max_frame_rate?, load.clone()))
    }

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

    /// Whether a call on the connection has been authenticated (under
    /// any policy): a connection without one may be closed to make room
    /// for another at `--max-connections` (`server/conn.rs`).
    pub fn is_known(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    fn set(&self, header: Option<&http::HeaderValue>, caller: &Caller) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((header.cloned(), caller.clone()));
    }
}

/// Who is calling: put into each request's extensions by
/// [`AuthLayer`](super::AuthLayer).
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
    /// What the caller was found by, to look it up again after a reload
    /// ([`Caller::current`]).
    credential: Credential,
}

/// What a caller was authenticated by.
#[derive(Clone)]
enum Credential {
    /// The `authorization` header.
    Token(http::HeaderValue),
    /// The client certificate.
    Cert(CertificateDer<'static>),
}

impl Caller {
    /// A caller on a server without a policy: allowed everything.
    pub fn open() -> Caller {
        Caller(None)
    }

    /// The caller of `req`: the one [`AuthLayer`](super::AuthLayer) put
    /// there (an open one on a server without a policy). A call that did
    /// not pass the layer has none, and is refused: it fails closed.
    pub fn of<T>(req: &tonic::Request<T>) -> Result<Caller> {
        req.extensions().get::<Caller>().cloned().ok_or_else(|| {
            tracing::error!("a call reached its handler without passing authentication");
            Error::Unauthenticated("the call was not authenticated".to_owned())
        })
    }

    /// The caller as the policy in force now knows it, for a stream that
    /// outlives a reload: itself while the policy is still the one it was
    /// found under (a read lock and a comparison); after a reload, its
    /// credentials looked up again, and its principal's new grants and
    /// limits. UNAUTHENTICATED when they name no principal any more, or
    /// another one.
    pub fn current(&self) -> Result<Caller> {
        let Some(k) = &self.0 else {
            return Ok(self.clone());
        };
        let now = {
            let now = k.auth.policy.read().unwrap_or_else(|e| e.into_inner());
            if Arc::ptr_eq(&now, &k.policy) {
                return Ok(self.clone());
            }
            now.clone()
        };
        let principal = match &k.credential {
            Credential::Token(v) => bearer(v.as_bytes()).and_then(|s| now.by_token(s)),
            Credential::Cert(c) => now.by_cert(c).ok(),
        };
        match principal {
            Some(p) if p.name == k.principal => Ok(Caller(Some(Arc::new(Known {
                principal: p.name.clone(),
                limits: p.limits,
                load: p.load.clone(),
                policy: now,
                auth: k.auth.clone(),
                credential: k.credential.clone(),
            })))),
            _ => Err(k.auth.unauthenticated(format!(
                "the policy was reloaded, and these credentials no longer name principal {:?}",
                &*k.principal
            ))),
        }
    }

    /// Changes when the policy is reloaded, for a stream to look at its
    /// caller again ([`Caller::current`]) while it has nothing else to do;
    /// `None` without a policy.
    pub fn reloads(&self) -> Option<tokio::sync::watch::Receiver<()>> {
        self.0.as_ref().map(|k| k.auth.reloads())
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
        self.0
            .as_ref()
            .is_none_or(|k| k.policy.reads_something(&k.principal))
    }

    /// The job-name prefixes a listing of `prefix` must scan to find every
    /// job the caller may read there, and no other: `prefix` itself for a
    /// caller allowed everything (no policy, or `admin`), else its `read`
    /// grants narrowed to `prefix`, disjoint and in order; none when it may
    /// read nothing there. A listing that scans only these costs what the
    /// caller can see, and learns nothing of the other jobs: not their
    /// names (in a page token), nor whether any exist (from an empty page).
    pub fn read_ranges(&self, prefix: &str) -> Vec<String> {
        match &self.0 {
            None => vec![prefix.to_owned()],
            Some(k) => k.policy.read_ranges(&k.principal, prefix),
        }
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
            Some(k) => holder.bound_to(&k.principal),
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
    /// principal. An early refusal only (a `WriteStream` message's, as a
    /// whole): the token may become another principal's live grant after
    /// this check, so the write itself is decided with
    /// [`Caller::held_by_another`] as the store's guard.
    pub fn check_write(&self, token: u64, view: &LeaseView) -> Result<()> {
        if self.0.is_none() || view.token.0 != token {
            return Ok(());
        }
        if let LeaseState::Held { holder, .. } = &view.state {
            if self.held_by_another(holder.as_str()) {
                return Err(self.refused_write(view.job.as_str()));
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
    pub fn refused_write(&self, job: &str) -> Error {
        self.denied(
            Action::Write,
            job,
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

#[cfg(test)]
mod tests {
    use super::super::policy::tests::POLICY;
    use super::*;

    #[test]
    fn a_call_that_did_not_pass_authentication_is_refused() {
        let req = tonic::Request::new(());
        assert!(matches!(Caller::of(&req), Err(Error::Unauthenticated(_))));
        let mut req = tonic::Request::new(());
        req.extensions_mut().insert(Caller::open());
        assert!(Caller::of(&req).unwrap().principal().is_none());
    }

    /// A connection without a client certificate.
    #[derive(Debug, Default)]
    struct Plain(CallerMemo);

    impl Connection for Plain {
        fn client_cert(&self) -> Option<&CertificateDer<'static>> {
            None
        }

        fn caller_memo(&self) -> &CallerMemo {
            &self.0
        }

        fn remote_ip(&self) -> Option<std::net::IpAddr> {
            Some(std::net::Ipv4Addr::new(10, 0, 0, 1).into())
        }
    }

    #[test]
    fn an_address_past_its_failures_is_refused_unread_but_a_proven_secret_is_not() {
        use super::super::policy::MAX_FAILURES;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, POLICY).unwrap();
        let auth = Auth::load(path, Arc::default()).unwrap();
        let header = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        // "test" is billing's secret; proven once.
        assert!(auth
            .authenticate(&header("Bearer test"), Some(&Plain::default()))
            .is_ok());
        for _ in 0..MAX_FAILURES {
            let e = auth.authenticate(&header("Bearer wrong"), Some(&Plain::default()));
            assert!(e
                .err()
                .unwrap()
                .to_string()
                .contains("matches no principal"));
        }
        let e = auth.authenticate(&header("Bearer wrong"), Some(&Plain::default()));
        let e = e.err().unwrap().to_string();
        assert!(e.contains("failed authentications from 10.0.0.1"), "{e}");
        // A new connection from the same address with the proven secret is
        // served without the hash.
        assert!(auth
            .authenticate(&header("Bearer test"), Some(&Plain::default()))
            .is_ok());
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
        let peer = Plain::default();
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
        let other = auth.authenticate(&good, Some(&Plain::default())).unwrap();
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
    }
}
