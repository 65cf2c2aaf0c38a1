//! A cap on open connections, and deadlines for connections that do not
//! speak.
//!
//! Each accepted connection holds a permit for as long as it is open. At
//! the cap, a new connection is accepted and closed at once (a client sees
//! the connection reset and can try another server or back off), so an
//! unbounded number of idle or hostile connections cannot exhaust file
//! descriptors or memory. A second, smaller cap counts the connections of
//! each client address (an IPv4 address, or an IPv6 /64, which one host
//! is commonly given whole), so that one host cannot take every place.
//! Refusals are counted and logged as one line per 10 s for each cap, not
//! one per connect (a flood of connects would flood the log).
//!
//! With a policy, a connection on which no call has authenticated yet
//! (health checks, reflection, a wrong token, or nothing at all) does not
//! keep its place against one that comes later: at the cap, the oldest
//! such connection is closed, and its place given to the new one. A client
//! with credentials authenticates on its first call, milliseconds after
//! its connect, and from then on keeps its place; connections without
//! credentials, however many and however busy with streams, cannot lock
//! it out.
//!
//! A connection must finish its TLS handshake (with TLS) and send its
//! first bytes (the 24-byte HTTP/2 client preface on the gRPC port) within
//! `--handshake-timeout` of its accept, or it is closed: a client that
//! connects and says nothing holds a permit for seconds, not forever. On
//! the gRPC port, a connection with no call open (no stream) for
//! `--idle-timeout` is closed too, as grpc-go's `MaxConnectionIdle` does:
//! pings do not keep it open, since the server's own keep-alive pings are
//! answered by every live client. A client reconnects on its next call.
//! The calls open on a connection are counted in its [`ConnLoad`], which
//! the admission layer ([`super::layers`]) keeps; the same load holds the
//! accounts of its Acquire and write rates ([`super::pacing`]).
//!
//! With TLS ([`super::tls`]) each connection's handshake runs in a task of
//! its own, with that deadline, so a slow or silent client delays nobody;
//! the connection reaches the server only once its handshake is done, with
//! its client certificate (if any) in its [`Peer`].

use std::collections::{HashMap, VecDeque};
use std::future::Future as _;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt as _};
use tonic::transport::server::Connected;

use super::auth::{self, CallerMemo};
use super::tls::{Port, Tls};
use crate::clock;

/// How often refused connections are summed up in the log.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The limits on a port's connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Connections open at once (`--max-connections`); more are closed on
    /// accept.
    pub max: usize,
    /// Connections open at once from one client address
    /// (`--max-connections-per-address`); more are closed on accept.
    pub max_per_address: usize,
    /// From accept to the TLS handshake done and the first
    /// `preface_bytes` read (`--handshake-timeout`).
    pub handshake_timeout: Duration,
    /// How many bytes a client must send within `handshake_timeout`: 24 for
    /// HTTP/2's client preface, 1 for an HTTP/1 request.
    pub preface_bytes: usize,
    /// A connection with no call open for this long is closed
    /// (`--idle-timeout`); `None` keeps idle connections open.
    pub idle_timeout: Option<Duration>,
    /// At the cap, close the oldest connection on which no call has
    /// authenticated to make room (with a policy), rather than refuse the
    /// new one.
    pub evict_anonymous: bool,
    /// Sent (best effort, never waited for) to a connection refused at a
    /// cap before it is closed: the admin port's HTTP 503.
    pub refusal: Option<&'static [u8]>,
}

/// The length of HTTP/2's client connection preface
/// (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`).
pub const HTTP2_PREFACE_BYTES: usize = 24;

/// The calls open on one connection, by budget, and when one last began or
/// ended: shared by the connection (its idle deadline) and the admission
/// layer (its share of the budget).
#[derive(Debug)]
pub struct ConnLoad {
    open: [AtomicUsize; 2],
    born: Instant,
    /// Nanoseconds after `born` when a call last began or ended.
    touched: AtomicU64,
    /// When the bytes written so far will have been paid for at the
    /// connection's write rate (see [`ConnLoad::pace_write`]).
    writes_paid_until: std::sync::Mutex<Instant>,
    /// The same for its Acquires (see [`ConnLoad::pace_acquire`]).
    acquires_paid_until: std::sync::Mutex<Instant>,
}

impl Default for ConnLoad {
    fn default() -> Self {
        let born = clock::now();
        ConnLoad {
            open: Default::default(),
            born,
            touched: AtomicU64::new(0),
            writes_paid_until: std::sync::Mutex::new(born),
            acquires_paid_until: std::sync::Mutex::new(born),
        }
    }
}

/// How far ahead of now a connection's writes (or Acquires) may be paid
/// for before they wait: a second's worth of the rate goes through at once.
const BURST: Duration = Duration::from_secs(1);

/// Charges `units` at `rate` a second to the time `paid` says the
/// connection has paid up to; returns how long the charge must wait. The
/// charge is made at once, so calls that arrive together queue behind each
/// other.
fn pace(paid: &std::sync::Mutex<Instant>, units: u64, rate: u64) -> Duration {
    let now = clock::now();
    let cost = Duration::from_secs_f64(units as f64 / rate.max(1) as f64);
    let mut paid = paid.lock().unwrap_or_else(|e| e.into_inner());
    *paid = (*paid).max(now) + cost;
    paid.saturating_duration_since(now + BURST)
}

impl ConnLoad {
    /// Charges `bytes` written to the connection's write rate
    /// (`--max-write-rate-per-connection`, bytes per second) and returns
    /// how long the write must wait first: nothing while the connection
    /// stays within the rate (a second's worth of burst included). A
    /// flood of writes on one connection is slowed to the rate, so it
    /// cannot take every core from the other connections' calls (a
    /// leader's renewals). The charge is made at once, so writes that
    /// arrive together queue behind each other.
    pub fn pace_write(&self, bytes: u64, rate: u64) -> Duration {
        pace(&self.writes_paid_until, bytes, rate)
    }

    /// Charges one `Acquire` to the connection's Acquire rate
    /// (`--max-acquire-rate-per-connection`, per second) and returns how
    /// long it must wait first, as [`ConnLoad::pace_write`] does for
    /// bytes. An Acquire that grants is a durable change (and the first of
    /// a job creates it); a flood of them on one connection (two hundred
    /// thousand new jobs as fast as it goes) would take the cores from
    /// the other connections' renewals. Renewals are never paced.
    pub fn pace_acquire(&self, rate: u64) -> Duration {
        pace(&self.acquires_paid_until, 1, rate)
    }

    /// Takes one of `max` places of budget `class` (0 or 1), or says no.
    pub fn try_open(&self, class: usize, max: usize) -> bool {
        self.touch();
        let before = self.open[class].fetch_add(1, Ordering::AcqRel);
        if before >= max {
            self.open[class].fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Gives back a place taken by [`ConnLoad::try_open`].
    pub fn close(&self, class: usize) {
        self.open[class].fetch_sub(1, Ordering::AcqRel);
        self.touch();
    }

    /// Calls open now, both budgets together.
    pub fn open(&self) -> usize {
        self.open.iter().map(|n| n.load(Ordering::Acquire)).sum()
    }

    fn touch(&self) {
        let nanos = clock::now().saturating_duration_since(self.born).as_nanos();
        self.touched
            .fetch_max(nanos.min(u64::MAX as u128) as u64, Ordering::AcqRel);
    }

    /// How long the connection has had no call open; `None` while one is.
    fn idle_for(&self) -> Option<Duration> {
        if self.open() > 0 {
            return None;
        }
        let last = self.born + Duration::from_nanos(self.touched.load(Ordering::Acquire));
        Some(clock::now().saturating_duration_since(last))
    }
}

/// A connection (plain TCP, or TLS over it) that holds one of the server's
/// connection permits.
pub struct Conn {
    stream: Io,
    peer: Peer,
    place: Arc<Place>,
    _address: Option<AddressPlace>,
    /// No call on it has authenticated yet, and the server may take its
    /// place ([`ConnLimits::evict_anonymous`]).
    evictable: bool,
    /// Until the preface is read: the deadline, and the bytes still to come.
    preface: Option<(Pin<Box<Sleep>>, usize)>,
    /// The idle timeout and its timer (re-armed while calls are open).
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    /// The TLS stream's last read was Pending: it holds no plaintext and
    /// no whole record, and waits for bytes from the socket.
    tls_idle: bool,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// Who is at the other end of a connection: put into every request's
/// extensions, where the auth layer reads the client certificate (as an
/// [`auth::Connection`]), admission the calls open on it, and the pacing
/// layer ([`super::pacing`]) its rates' accounts.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// The client's address.
    pub remote: Option<SocketAddr>,
    /// The client's certificate chain (its own first), verified against
    /// `--tls-client-ca` in the handshake; `None` without one.
    pub certs: Option<Arc<[CertificateDer<'static>]>>,
    /// The calls open on the connection.
    pub load: Arc<ConnLoad>,
    /// The caller its last call was authenticated as (see
    /// [`auth::CallerMemo`]).
    pub caller: Arc<CallerMemo>,
}

impl auth::Connection for Peer {
    fn client_cert(&self) -> Option<&CertificateDer<'static>> {
        self.certs.as_deref()?.first()
    }

    fn caller_memo(&self) -> &CallerMemo {
        &self.caller
    }

    fn remote_ip(&self) -> Option<IpAddr> {
        self.remote.map(|a| a.ip())
    }
}

impl Connected for Conn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl Conn {
    /// The connection's peer.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// Arms the deadlines of `limits`, counted from `deadline` (the
    /// handshake's, from the accept).
    fn with_deadlines(mut self, limits: &ConnLimits, deadline: tokio::time::Instant) -> Conn {
        self.evictable = limits.evict_anonymous;
        if limits.preface_bytes > 0 {
            self.preface = Some((
                Box::pin(tokio::time::sleep_until(deadline)),
                limits.preface_bytes,
            ));
        }
        self.idle = limits
            .idle_timeout
            .map(|d| (d, Box::pin(tokio::time::sleep(d))));
        self
    }

    /// Whether a deadline has passed: an error when the preface did not
    /// come in time, an end of file when the connection has been idle too
    /// long (hyper then closes it). Registers the timers' wake-ups.
    fn deadline(&mut self, cx: &mut Context<'_>) -> Option<io::Result<()>> {
        if self.evictable {
            if self.peer.caller.is_known() {
                self.evictable = false;
            } else if self.place.evicted(cx) {
                tracing::info!(
                    peer = ?self.peer.remote,
                    "closed: no call authenticated on it, and its place under --max-connections \
                     went to a newer connection"
                );
                return Some(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed to make room: no call authenticated",
                )));
            }
        }
        if let Some((sleep, _)) = &mut self.preface {
            if sleep.as_mut().poll(cx).is_ready() {
                tracing::info!(peer = ?self.peer.remote, "closed: nothing sent within --handshake-timeout");
                return Some(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no preface within --handshake-timeout",
                )));
            }
        }
        if let Some((idle, sleep)) = &mut self.idle {
            while sleep.as_mut().poll(cx).is_ready() {
                let now = clock::tokio_now();
                match self.peer.load.idle_for() {
                    None => sleep.as_mut().reset(now + *idle),
                    Some(d) if d >= *idle => {
                        tracing::debug!(peer = ?self.peer.remote, "closed: no call for --idle-timeout");
                        return Some(Ok(()));
                    }
                    Some(d) => sleep.as_mut().reset(now + (*idle - d)),
                }
            }
        }
        None
    }
}

macro_rules! both {
    ($s:expr, $x:ident => $e:expr) => {
        match $s {
            Io::Plain($x) => $e,
            Io::Tls($x) => $e,
        }
    };
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(r) = this.deadline(cx) {
            return Poll::Ready(r);
        }
        let before = buf.filled().len();
        let r = match &mut this.stream {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => {
                // HTTP/2 reads again each time its connection is polled,
                // mostly for nothing. Once the TLS stream has said Pending
                // and still wants bytes from the socket, nothing it holds
                // can become readable until the socket does: ask the
                // socket (a readiness check, which registers the wake-up),
                // not the TLS layer's whole read path. About a tenth of
                // the server's TLS work per call went on such reads.
                let (tcp, tls) = s.get_ref();
                if this.tls_idle && tls.wants_read() && tcp.poll_read_ready(cx).is_pending() {
                    return Poll::Pending;
                }
                let r = Pin::new(s).poll_read(cx, buf);
                this.tls_idle = r.is_pending();
                r
            }
        };
        if let (Poll::Ready(Ok(())), Some((_, left))) = (&r, &mut this.preface) {
            *left = left.saturating_sub(buf.filled().len() - before);
            if *left == 0 {
                this.preface = None;
            }
        }
        r
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        both!(&mut self.get_mut().stream, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        both!(&mut self.get_mut().stream, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        both!(&self.stream, s => s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(&mut self.get_mut().stream, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(&mut self.get_mut().stream, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// Accepts connections from `listener`, at most `limits.max` open at
/// once, with TCP_NODELAY set (every reply is a small message; Nagle's
/// algorithm would hold it for up to 40 ms), and the deadlines of
/// `limits`.
///
/// With `tls`, each connection first completes a TLS handshake with the
/// certificates loaded when it arrived (a reload never touches
/// connections already open), in a task of its own; one that fails or
/// does not finish within `limits.handshake_timeout` is closed and logged.
pub fn incoming(
    listener: TcpListener,
    limits: ConnLimits,
    tls: Option<(Arc<Tls>, Port)>,
) -> Pin<Box<dyn Stream<Item = io::Result<Conn>> + Send>> {
    match tls {
        None => Box::pin(
            plain(listener, limits)
                .map(move |c| c.map(|(c, deadline)| c.with_deadlines(&limits, deadline))),
        ),
        Some((tls, port)) => Box::pin(secured(listener, limits, tls, port)),
    }
}

fn secured(
    listener: TcpListener,
    limits: ConnLimits,
    tls: Arc<Tls>,
    port: Port,
) -> impl Stream<Item = io::Result<Conn>> {
    let (tx, rx) = mpsc::channel::<io::Result<Conn>>(64);
    let mut plain = Box::pin(plain(listener, limits));
    tokio::spawn(async move {
        loop {
            let conn = tokio::select! {
                c = plain.next() => c,
                _ = tx.closed() => return,
            };
            let (tcp, place, peer, deadline) = match conn {
                None => return,
                Some(Err(e)) => {
                    if tx.send(Err(e)).await.is_err() {
                        return;
                    }
                    continue;
                }
                Some(Ok((
                    Conn {
                        stream: Io::Plain(tcp),
                        place,
                        _address,
                        peer,
                        ..
                    },
                    deadline,
                ))) => (tcp, (place, _address), peer, deadline),
                Some(Ok(_)) => unreachable!("plain() yields plain connections"),
            };
            let acceptor = tls.acceptor(port);
            let tx = tx.clone();
            tokio::spawn(async move {
                let remote = peer.remote;
                match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let certs = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .map(|c| c.iter().map(|c| c.clone().into_owned()).collect());
                        let conn = Conn {
                            stream: Io::Tls(Box::new(stream)),
                            peer: Peer { certs, ..peer },
                            place: place.0,
                            _address: place.1,
                            evictable: false,
                            preface: None,
                            idle: None,
                            tls_idle: false,
                        };
                        let _ = tx.send(Ok(conn.with_deadlines(&limits, deadline))).await;
                    }
                    Ok(Err(e)) => {
                        tracing::info!(peer = ?remote, error = %e, ?port, "TLS handshake failed");
                    }
                    Err(_) => {
                        tracing::info!(
                            peer = ?remote,
                            ?port,
                            timeout = ?limits.handshake_timeout,
                            "TLS handshake not done within --handshake-timeout: closed"
                        );
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Accepted connections, each with its handshake deadline.
fn plain(
    listener: TcpListener,
    limits: ConnLimits,
) -> impl Stream<Item = io::Result<(Conn, tokio::time::Instant)>> + Send {
    let max = limits.max;
    let permits = Arc::new(Semaphore::new(max));
    let addresses = Arc::new(Addresses::default());
    let anonymous = Arc::new(Anonymous::default());
    let refused = Arc::new(Refused::default());
    tokio::spawn(log_refusals(Arc::downgrade(&refused), limits));
    TcpListenerStream::new(listener).filter_map(move |s| {
        let stream = match s {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        let remote = stream.peer_addr().ok();
        let address = match remote {
            Some(a) => match addresses.take(a.ip(), limits.max_per_address) {
                Some(place) => Some(place),
                None => {
                    refused.per_address.fetch_add(1, Ordering::Relaxed);
                    refuse(stream, limits.refusal);
                    return None; // dropped: closed at once
                }
            },
            None => None,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => match limits
                .evict_anonymous
                .then(|| anonymous.evict_oldest())
                .flatten()
            {
                Some(permit) => {
                    refused.evicted.fetch_add(1, Ordering::Relaxed);
                    permit
                }
                None => {
                    refused.total.fetch_add(1, Ordering::Relaxed);
                    refuse(stream, limits.refusal);
                    return None; // dropped: closed at once
                }
            },
        };
        let deadline = clock::tokio_now() + limits.handshake_timeout;
        let _ = stream.set_nodelay(true);
        let peer = Peer {
            remote,
            certs: None,
            load: Arc::default(),
            caller: Arc::default(),
        };
        let place = Arc::new(Place {
            permit: std::sync::Mutex::new(Some(permit)),
            evicted: AtomicBool::new(false),
            waker: std::sync::Mutex::new(None),
        });
        if limits.evict_anonymous {
            anonymous.push(&place, &peer.caller, max);
        }
        Some(Ok((
            Conn {
                stream: Io::Plain(stream),
                peer,
                place,
                _address: address,
                evictable: false,
                preface: None,
                idle: None,
                tls_idle: false,
            },
            deadline,
        )))
    })
}

/// A connection's place under `--max-connections`: its permit, which the
/// server takes back from a connection no call has authenticated on to
/// give it to a newer one ([`Anonymous`]).
struct Place {
    permit: std::sync::Mutex<Option<OwnedSemaphorePermit>>,
    evicted: AtomicBool,
    /// The connection's reader, woken when its place is taken.
    waker: std::sync::Mutex<Option<Waker>>,
}

impl Place {
    /// Whether the place was taken; if not, registers `cx` to be woken
    /// when it is.
    fn evicted(&self, cx: &Context<'_>) -> bool {
        if self.evicted.load(Ordering::Acquire) {
            return true;
        }
        {
            let mut w = self.waker.lock().unwrap_or_else(|e| e.into_inner());
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        // Set before the waker is taken: seen here, or woken.
        self.evicted.load(Ordering::Acquire)
    }
}

/// The connections accepted with a policy, oldest first, whose places may
/// be taken while no call on them has authenticated.
#[derive(Default)]
struct Anonymous(std::sync::Mutex<VecDeque<(Weak<Place>, Arc<CallerMemo>)>>);

impl Anonymous {
    fn push(&self, place: &Arc<Place>, caller: &Arc<CallerMemo>, max: usize) {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Closed and authenticated connections leave at the front, when
        // a place is wanted; a server below its cap wants none, so they
        // are also swept out here, now and then.
        if q.len() >= 2 * max + 64 {
            q.retain(|(p, c)| p.strong_count() > 0 && !c.is_known());
        }
        q.push_back((Arc::downgrade(place), caller.clone()));
    }

    /// Takes the place of the oldest open connection on which no call has
    /// authenticated, and tells it to close.
    fn evict_oldest(&self) -> Option<OwnedSemaphorePermit> {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((place, caller)) = q.pop_front() {
            let Some(place) = place.upgrade() else {
                continue;
            };
            if caller.is_known() {
                continue; // for good: it keeps its place
            }
            let permit = place
                .permit
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            place.evicted.store(true, Ordering::Release);
            if let Some(w) = place.waker.lock().unwrap_or_else(|e| e.into_inner()).take() {
                w.wake();
            }
            if permit.is_some() {
                return permit;
            }
        }
        None
    }
}

/// Answers a connection refused at a cap with `refusal`, if it has one:
/// written at once (a fresh socket's buffer always takes it), then the
/// write side closed, and what the client sends read and dropped for up
/// to a second, so that its request does not turn the close into a reset
/// that loses the answer. At most [`MAX_LINGERING`] wait so at once;
/// past that a refused connection is closed at once, as without one.
fn refuse(stream: tokio::net::TcpStream, refusal: Option<&'static [u8]>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    static LINGERING: AtomicUsize = AtomicUsize::new(0);
    let Some(r) = refusal else { return };
    let _ = stream.try_write(r);
    if LINGERING.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
        LINGERING.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    tokio::spawn(async move {
        let mut s = stream;
        let _ = s.shutdown().await;
        let mut buf = [0u8; 1024];
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while let Ok(1..) = s.read(&mut buf).await {}
        })
        .await;
        LINGERING.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Refused connections that wait at once for their client to read the
/// refusal ([`refuse`]).
const MAX_LINGERING: usize = 256;

/// The connections open from each client address, for
/// [`ConnLimits::max_per_address`].
#[derive(Default)]
struct Addresses(std::sync::Mutex<HashMap<IpAddr, usize>>);

/// One connection's place in its address's count, given back on drop.
struct AddressPlace {
    addresses: Arc<Addresses>,
    key: IpAddr,
}

impl Addresses {
    /// Takes a place for a connection from `ip`, unless `max` are open.
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<AddressPlace> {
        let key = address_key(ip);
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key).or_insert(0);
        if *n >= max {
            if *n == 0 {
                open.remove(&key);
            }
            return None;
        }
        *n += 1;
        Some(AddressPlace {
            addresses: self.clone(),
            key,
        })
    }
}

impl Drop for AddressPlace {
    fn drop(&mut self) {
        let mut open = self.addresses.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// What a client address counts as: an IPv4 address (an IPv4-mapped IPv6
/// one too), or an IPv6 address's /64, since a host commonly has a whole
/// /64 and could otherwise open each connection from an address of its
/// own.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// Connections refused at accept since the last log line, by cap, and
/// those closed to make room ([`Anonymous`]).
#[derive(Default)]
struct Refused {
    total: AtomicU64,
    per_address: AtomicU64,
    evicted: AtomicU64,
}

/// Every [`REFUSAL_LOG_INTERVAL`], logs how many connections were refused
/// at each cap since the last line, if any; ends with the listener.
async fn log_refusals(refused: std::sync::Weak<Refused>, limits: ConnLimits) {
    loop {
        tokio::time::sleep(REFUSAL_LOG_INTERVAL).await;
        let Some(refused) = refused.upgrade() else {
            return;
        };
        let secs = REFUSAL_LOG_INTERVAL.as_secs();
        let n = refused.total.swap(0, Ordering::Relaxed);
        if n > 0 {
            tracing::warn!(
                "refused {n} connections over --max-connections ({}) in the last {secs}s",
                limits.max
            );
        }
        let n = refused.evicted.swap(0, Ordering::Relaxed);
        if n > 0 {
            tracing::warn!(
                "closed {n} connections on which no call had authenticated, to make room at \
                 the connection cap ({}) in the last {secs}s",
                limits.max
            );
        }
        let n = refused.per_address.swap(0, Ordering::Relaxed);
        if n > 0 {
            tracing::warn!(
                "refused {n} connections over the cap per client address \
                 (--max-connections-per-address, {}) in the last {secs}s",
                limits.max_per_address
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_counts_as_itself_or_its_ipv6_slash_64() {
        let key = |s: &str| address_key(s.parse().unwrap()).to_string();
        assert_eq!(key("10.1.2.3"), "10.1.2.3");
        assert_eq!(key("::ffff:10.1.2.3"), "10.1.2.3");
        assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    }

    #[test]
    fn an_address_has_at_most_its_places_and_gets_them_back() {
        let a = Arc::new(Addresses::default());
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| a.take(ip, 3).unwrap()).collect();
        assert!(a.take(ip, 3).is_none());
        assert!(a.take(other, 3).is_some(), "another address has its own");
        drop(held);
        assert!(
            a.0.lock().unwrap().is_empty(),
            "nothing is kept for a gone address"
        );
        assert!(a.take(ip, 3).is_some());
    }
}
