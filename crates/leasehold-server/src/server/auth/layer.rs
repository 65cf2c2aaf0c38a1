//! The tower layer that authenticates every gRPC call ([`AuthLayer`]),
//! and the same check for the admin port ([`admin_check`]).

use std::borrow::Cow;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::http;
use tower::{Layer, Service};

use super::caller::Connection;
use super::policy::{Action, Auth};
use crate::error::{Error, Result};
use crate::server::grpc_status::to_status;

/// Paths open to anyone: health and reflection.
fn is_open(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.") || path.starts_with("/grpc.reflection.")
}

/// Authenticates every call (see the module docs): puts the
/// [`Caller`](super::Caller) into its extensions, or answers
/// UNAUTHENTICATED. Without a policy it lets every call through with an
/// open [`Caller`](super::Caller). A handler finds no caller only on a
/// call that did not pass here, and refuses it.
///
/// `C` is the type of the connection's state that the server puts into
/// every request's extensions, read as a [`Connection`].
pub struct AuthLayer<C> {
    auth: Option<Arc<Auth>>,
    conn: PhantomData<fn() -> C>,
}

impl<C> AuthLayer<C> {
    /// A layer checking against `auth`'s policy, if there is one.
    pub fn new(auth: Option<Arc<Auth>>) -> Self {
        AuthLayer {
            auth,
            conn: PhantomData,
        }
    }
}

impl<C> Clone for AuthLayer<C> {
    fn clone(&self) -> Self {
        AuthLayer::new(self.auth.clone())
    }
}

impl<S, C> Layer<S> for AuthLayer<C> {
    type Service = AuthService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            auth: self.auth.clone(),
            conn: PhantomData,
        }
    }
}

/// The service made by [`AuthLayer`].
pub struct AuthService<S, C> {
    inner: S,
    auth: Option<Arc<Auth>>,
    conn: PhantomData<fn() -> C>,
}

impl<S: Clone, C> Clone for AuthService<S, C> {
    fn clone(&self) -> Self {
        AuthService {
            inner: self.inner.clone(),
            auth: self.auth.clone(),
            conn: PhantomData,
        }
    }
}

impl<S, C, B, R> Service<http::Request<B>> for AuthService<S, C>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    C: Connection + Send + Sync + 'static,
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
        if self.auth.is_none() {
            req.extensions_mut().insert(super::Caller::open());
        } else if let Some(auth) = self.auth.as_ref().filter(|_| !is_open(req.uri().path())) {
            let conn = req.extensions().get::<C>();
            match auth.authenticate(req.headers(), conn) {
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

/// For the admin port: whether the request, on connection `conn`, may see
/// `/metrics` (the `admin` action). `Ok` without a policy.
pub fn admin_check(
    auth: Option<&Arc<Auth>>,
    headers: &http::HeaderMap,
    conn: Option<&impl Connection>,
) -> Result<()> {
    let Some(auth) = auth else { return Ok(()) };
    auth.authenticate(headers, conn)?
        .authorize(Action::Admin, "")
}

/// A short description of a denial for the admin port's answer.
pub fn describe(e: &Error) -> Cow<'static, str> {
    Cow::Owned(format!("{e}\n"))
}
