//! A secured etcd: TLS to its members (with a client certificate when it
//! asks for one) and etcd's own authentication, a user name and password
//! exchanged for a token that goes with every call.
//!
//! Every call goes through an [`EtcdChannel`], which adds the current token
//! to it. etcd's tokens expire (five minutes by default, `--auth-token-ttl`)
//! and are dropped by a restarted member: a call refused for its token
//! logs in again (`Login::renew`) and is sent again. Only a refusal for
//! the token itself is retried this way, never a refusal of the user's
//! permissions; etcd checks the token before it applies anything, so
//! sending a change again after such a refusal cannot apply it twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};
use tower::Service;

use super::pb;
use leasehold_core::error::{Error, Result};

/// How a frontend proves itself to etcd; all empty for a plain etcd.
#[derive(Clone, Default)]
pub struct Security {
    /// PEM of the CA that signed the members' certificates: calls go over
    /// TLS (`https://` endpoints).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM of a client certificate and its key, for members that require
    /// one (`--client-cert-auth`).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// etcd's user name and password (etcd's `auth enable`).
    pub user: Option<(String, String)>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Security")
            .field("tls", &self.ca_pem.is_some())
            .field("client_certificate", &self.identity.is_some())
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl Security {
    /// `endpoint` set up for TLS when a CA is given; an `https://` endpoint
    /// without one, or an `http://` one with one, is refused.
    pub(crate) fn endpoint(&self, e: &str, ep: Endpoint) -> Result<Endpoint> {
        let https = e.starts_with("https://");
        match (&self.ca_pem, https) {
            (None, false) => Ok(ep),
            (None, true) => Err(Error::invalid(
                "--etcd-ca",
                format!(
                    "the etcd endpoint {e:?} is https: give the CA that signed its certificate"
                ),
            )),
            (Some(_), false) => Err(Error::invalid(
                "--etcd-endpoints",
                format!("{e:?} is not https://, but --etcd-ca asks for TLS"),
            )),
            (Some(ca), true) => {
                let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
                if let Some((cert, key)) = &self.identity {
                    tls = tls.identity(Identity::from_pem(cert, key));
                }
                ep.tls_config(tls)
                    .map_err(|err| Error::invalid("--etcd-ca", format!("{e}: {err}")))
            }
        }
    }
}

/// The token of the last login, shared by every channel of a client.
#[derive(Default)]
pub(crate) struct Token {
    value: RwLock<Option<http::HeaderValue>>,
    /// Bumped at every login: a call refused for its token logs in again
    /// only if nobody did since it was sent.
    generation: AtomicU64,
}

impl Token {
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// A channel to one member that sends the current token with every call.
#[derive(Clone)]
pub struct EtcdChannel {
    inner: Channel,
    token: Arc<Token>,
}

impl EtcdChannel {
    pub(crate) fn new(inner: Channel, token: Arc<Token>) -> EtcdChannel {
        EtcdChannel { inner, token }
    }
}

impl Service<http::Request<Body>> for EtcdChannel {
    type Response = http::Response<Body>;
    type Error = <Channel as Service<http::Request<Body>>>::Error;
    type Future = <Channel as Service<http::Request<Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        Service::<http::Request<Body>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        if let Some(t) = self
            .token
            .value
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            req.headers_mut().insert("token", t.clone());
        }
        self.inner.call(req)
    }
}

/// Whether etcd refused a call for its token (missing, expired, or from
/// before a member restarted), which a new login cures.
pub(crate) fn token_refused(s: &Status) -> bool {
    s.code() == Code::Unauthenticated
        || (s.code() == Code::InvalidArgument && s.message().contains("user name is empty"))
}

/// Logs in with the user name and password, and keeps the token.
pub(crate) struct Login {
    pub(crate) user: String,
    pub(crate) password: String,
    pub(crate) token: Arc<Token>,
    /// One login at a time.
    lock: tokio::sync::Mutex<()>,
}

impl Login {
    pub(crate) fn new(user: String, password: String, token: Arc<Token>) -> Login {
        Login {
            user,
            password,
            token,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Logs in through `ch` unless somebody did since `seen` (a
    /// [`Token::generation`]).
    pub(crate) async fn renew(
        &self,
        ch: EtcdChannel,
        seen: u64,
    ) -> std::result::Result<(), Status> {
        let _one = self.lock.lock().await;
        if self.token.generation() != seen {
            return Ok(());
        }
        // Without the old token: etcd refuses any call that carries one it
        // no longer knows, a login included.
        let mut c = pb::auth_client::AuthClient::new(ch.inner);
        let r = c
            .authenticate(pb::AuthenticateRequest {
                name: self.user.clone(),
                password: self.password.clone(),
            })
            .await?
            .into_inner();
        let v = http::HeaderValue::from_str(&r.token)
            .map_err(|_| Status::internal("etcd sent a token that is not a header value"))?;
        *self.token.value.write().unwrap_or_else(|e| e.into_inner()) = Some(v);
        let n = self.token.generation.fetch_add(1, Ordering::AcqRel);
        if n > 0 {
            tracing::info!(user = %self.user, "etcd: logged in again (etcd refused the token)");
        }
        Ok(())
    }
}
