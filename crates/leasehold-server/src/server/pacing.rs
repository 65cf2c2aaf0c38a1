//! Pacing per connection: how long a call must wait before its Acquire or
//! its writes, so that one connection's flood cannot take the cores from
//! the other connections' calls (a leader's renewals).
//!
//! The rates are per connection (`--max-acquire-rate-per-connection`,
//! `--max-write-rate-per-connection`, a second's worth at once), and each
//! connection's accounts are in its [`ConnLoad`]. The pacing [`layer`]
//! puts a [`Pacing`] into every request's extensions from the
//! connection's [`Peer`]; a handler takes it with [`Pacing::of`] and asks
//! it how long to wait ([`Pacing::acquire`], [`Pacing::write`]), which
//! also counts the paced time in the metrics
//! (`leasehold_acquires_paced_total`, `leasehold_writes_paced_total`). The
//! handler does the waiting, where it fits the call: an Acquire takes the
//! time paced from its own wait.
//!
//! So no handler reads the connection's [`Peer`] or carries a rate: the
//! layer is the one place that turns a connection into its pacing, as
//! the auth layer ([`super::auth`]) is for its caller. Renewals are never
//! paced: no renewal handler asks.

use std::sync::Arc;
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::http;
use tower::util::MapRequestLayer;

use super::conn::{ConnLoad, Peer};
use crate::metrics::RpcMetrics;

/// The server's rates, and where paced time is counted.
#[derive(Debug)]
struct Rates {
    /// Acquires a second per connection.
    acquire: u64,
    /// Bytes (keys and values) written a second per connection.
    write: u64,
    /// Bytes of listings' answers a second per connection.
    listing: u64,
    metrics: Arc<RpcMetrics>,
}

/// A call's pacing: its connection's load, the rates, and the metrics it
/// counts paced time in. Put into each request's extensions by
/// [`layer`]; without one (a request that came on no connection of
/// the server's) it never asks a call to wait.
#[derive(Clone, Debug, Default)]
pub struct Pacing(Option<(Arc<ConnLoad>, Arc<Rates>)>);

impl Pacing {
    /// The pacing of `req`'s connection.
    pub fn of<T>(req: &tonic::Request<T>) -> Pacing {
        req.extensions()
            .get::<Pacing>()
            .cloned()
            .unwrap_or_default()
    }

    /// Charges one Acquire to the connection's Acquire rate and returns how
    /// long it must wait first ([`ConnLoad::pace_acquire`]); a wait is
    /// counted in `leasehold_acquires_paced_total`.
    pub fn acquire(&self) -> Duration {
        let Some((load, rates)) = &self.0 else {
            return Duration::ZERO;
        };
        let wait = load.pace_acquire(rates.acquire);
        if !wait.is_zero() {
            rates.metrics.paced_acquire(wait);
        }
        wait
    }

    /// Charges `bytes` (keys and values) to the connection's write rate and
    /// returns how long the write must wait first
    /// ([`ConnLoad::pace_write`]); a wait is counted in
    /// `leasehold_writes_paced_total`.
    pub fn write(&self, bytes: u64) -> Duration {
        let Some((load, rates)) = &self.0 else {
            return Duration::ZERO;
        };
        let wait = load.pace_write(bytes, rates.write);
        if !wait.is_zero() {
            rates.metrics.paced(wait);
        }
        wait
    }

    /// Charges a listing's answer of `bytes` to the connection's listing
    /// rate and returns how long it must wait before it is sent
    /// ([`ConnLoad::pace_listing`]); a wait is counted in
    /// `leasehold_listings_paced_total`.
    pub fn listing(&self, bytes: u64) -> Duration {
        let Some((load, rates)) = &self.0 else {
            return Duration::ZERO;
        };
        let wait = load.pace_listing(bytes, rates.listing);
        if !wait.is_zero() {
            rates.metrics.paced_listing(wait);
        }
        wait
    }

    /// Charges a listing's answer `msg` by its encoded size, waits as long
    /// as [`Pacing::listing`] says, and hands it back to be sent.
    pub async fn listed<T: prost::Message>(&self, msg: T) -> T {
        let wait = self.listing(msg.encoded_len() as u64);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        msg
    }
}

/// The layer that puts each call's [`Pacing`] into its extensions, from
/// its connection's [`Peer`]: `acquire_rate` Acquires, `write_rate` bytes
/// written and `listing_rate` bytes of listings a second per connection,
/// paced time counted in `metrics`.
pub fn layer(
    acquire_rate: u64,
    write_rate: u64,
    listing_rate: u64,
    metrics: Arc<RpcMetrics>,
) -> MapRequestLayer<impl Fn(http::Request<Body>) -> http::Request<Body> + Clone + Send + Sync> {
    let rates = Arc::new(Rates {
        acquire: acquire_rate,
        write: write_rate,
        listing: listing_rate,
        metrics,
    });
    MapRequestLayer::new(move |mut req: http::Request<Body>| {
        if let Some(peer) = req.extensions().get::<Peer>() {
            let pacing = Pacing(Some((peer.load.clone(), rates.clone())));
            req.extensions_mut().insert(pacing);
        }
        req
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use tower::{Layer as _, ServiceExt as _};

    /// A request on `peer`'s connection as the handler sees it, through a
    /// layer pacing 1 Acquire and 1000 bytes a second.
    async fn request_on(peer: Option<Peer>) -> tonic::Request<Body> {
        let mut req = http::Request::new(Body::empty());
        if let Some(peer) = peer {
            req.extensions_mut().insert(peer);
        }
        let svc = layer(1, 1000, 2000, Arc::default()).layer(tower::service_fn(
            |req: http::Request<Body>| async move { Ok::<_, std::convert::Infallible>(req) },
        ));
        tonic::Request::from_http(svc.oneshot(req).await.unwrap())
    }

    #[tokio::test]
    async fn a_call_is_paced_by_its_connections_rates_and_counted() {
        let req = request_on(Some(Peer::default())).await;
        let pacing = Pacing::of(&req);
        let metrics = pacing.0.as_ref().unwrap().1.metrics.clone();
        // A second's worth goes at once: one Acquire at 1 a second, then
        // the next waits; 1000 bytes at 1000 a second, then more wait.
        assert_eq!(pacing.acquire(), Duration::ZERO);
        assert!(pacing.acquire() > Duration::ZERO);
        assert_eq!(metrics.paced_acquires(), 1);
        assert_eq!(pacing.write(1000), Duration::ZERO);
        assert!(pacing.write(500) > Duration::ZERO);
        assert_eq!(metrics.paced_writes(), 1);
        assert_eq!(pacing.listing(2000), Duration::ZERO);
        assert!(pacing.listing(100) > Duration::ZERO);
        assert_eq!(metrics.paced_listings(), 1);
        // Another call on the same connection shares its accounts.
        assert!(Pacing::of(&req).acquire() > Duration::ZERO);
    }

    #[tokio::test]
    async fn a_call_on_no_connection_is_never_paced() {
        let pacing = Pacing::of(&request_on(None).await);
        for _ in 0..3 {
            assert_eq!(pacing.acquire(), Duration::ZERO);
            assert_eq!(pacing.write(u64::MAX), Duration::ZERO);
        }
    }
}
