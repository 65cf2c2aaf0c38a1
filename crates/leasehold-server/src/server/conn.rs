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
use super::bound::ConnBinds;
use super::frames::{self, Step};
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
    /// The budget of frames that carry no call, per connection and second
    /// (`--max-frame-rate-per-connection`, [`super::frames`]): HTTP/2
    /// ports only.
    pub frame_rate: Option<u32>,
    /// A connection that holds answers ([`super::layers::Queued`]) and
    /// takes none of their bytes for this long is closed
    /// (`--response-stall-timeout`); `None` on the admin port.
    pub response_stall_timeout: Option<Duration>,
    /// Sent (best effort, never waited for) to a connection refused at a
    /// cap before it is closed: the admin port's HTTP 503.
    pub refusal: Option<&'static [u8]>,
}

/// In [`ConnLoad::refusing`]: the budget is the principal's.
const PRINCIPALS_BUDGET: u64 = 1 << 63;

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
    /// The same for its listings' answers (see [`ConnLoad::pace_listing`]).
    listings_paid_until: std::sync::Mutex<Instant>,
    /// Over its frame budget long enough that its new calls are refused
    /// ([`super::frames::Step::Refused`]): the budget, with
    /// [`PRINCIPALS_BUDGET`] set when it is its principal's; or 0.
    refusing: AtomicU64,
    /// Bytes of large answers held for the client ([`super::layers::Queued`]).
    queued: AtomicUsize,
    /// Nanoseconds after `born` when the server last wrote to it, or when
    /// it last began to hold answers, whichever is later.
    progress: AtomicU64,
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
            listings_paid_until: std::sync::Mutex::new(born),
            refusing: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            progress: AtomicU64::new(0),
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

    /// Charges a listing's answer of `bytes` (a page of `ListKeys`,
    /// `GetHistory` or `ListLeases`) to the connection's listing rate
    /// (`--max-listing-rate-per-connection`, bytes per second) and returns
    /// how long the answer must wait first, as [`ConnLoad::pace_write`]
    /// does for writes: loops of listings on one connection are slowed to
    /// the rate, so that their pages cannot take the cores from the other
    /// connections' renewals.
    pub fn pace_listing(&self, bytes: u64, rate: u64) -> Duration {
        pace(&self.listings_paid_until, bytes, rate)
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

    /// Whether the connection's new calls (but renewals) are refused: it
    /// has been over its frame budget for [`super::frames::REFUSE_AFTER`].
    /// Returns the budget it is over (frames a second), and whether it is
    /// its principal's (`max_frame_rate`) rather than the connection's.
    pub fn refusing(&self) -> Option<(u64, bool)> {
        let r = self.refusing.load(Ordering::Relaxed);
        (r > 0).then_some((r & !PRINCIPALS_BUDGET, r & PRINCIPALS_BUDGET != 0))
    }

    /// Counts `n` more bytes of answers held for the client, unless that
    /// would make more than `max`.
    pub fn queue(&self, n: usize, max: usize) -> bool {
        let before = self.queued.fetch_add(n, Ordering::AcqRel);
        if before + n > max && before > 0 {
            self.queued.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        if before == 0 {
            self.made_progress();
        }
        true
    }

    /// Gives back bytes counted by [`ConnLoad::queue`].
    pub fn unqueue(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes of answers held for the client now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    fn made_progress(&self) {
        let nanos = clock::now().saturating_duration_since(self.born).as_nanos();
        self.progress
            .store(nanos.min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// How long the connection has held answers without taking a byte;
    /// `None` while it holds none.
    fn stalled_for(&self) -> Option<Duration> {
        if self.queued() == 0 {
            return None;
        }
        let last = self.born + Duration::from_nanos(self.progress.load(Ordering::Relaxed));
        Some(clock::now().saturating_duration_since(last))
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
    /// The response stall timeout and its timer, armed while it holds
    /// answers.
    stall: Option<(Duration, Option<Pin<Box<Sleep>>>)>,
    /// The TLS stream's last read was Pending: it holds no plaintext and
    /// no whole record, and waits for bytes from the socket.
    tls_idle: bool,
    /// Its frame budget, on an HTTP/2 port.
    frames: Option<Box<FrameGuard>>,
    _binds: EndBinds,
}

/// A connection's frame budget ([`super::frames`]) and what enforces it.
struct FrameGuard {
    /// The client's frames, after its preface.
    client: frames::Cursor,
    /// The server's frames.
    server: frames::Cursor,
    meter: frames::Meter,
    /// The budget, frames a second.
    rate: u32,
    /// The principal's budget across its connections (its
    /// `max_frame_rate`), once a call has authenticated, and when it was
    /// last looked up.
    principal: Option<(u32, Arc<auth::PrincipalLoad>)>,
    principal_at: Option<Instant>,
    /// Reads wait until then.
    pause: Option<Pin<Box<Sleep>>>,
    /// The highest stream the client opened.
    last_stream: u32,
    /// The GOAWAY being sent, and how much of it is out.
    goaway: Option<([u8; 17], usize)>,
    /// When the connection reached the last step, for a client whose
    /// connection cannot take a GOAWAY (it reads nothing).
    goaway_since: Option<Instant>,
    address: Option<Arc<Addresses>>,
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
    /// The leases bound to the connection, and whether its client closed
    /// it ([`super::bound`]).
    pub binds: Arc<ConnBinds>,
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
        self.stall = limits.response_stall_timeout.map(|d| (d, None));
        if let Some(rate) = limits.frame_rate {
            let now = clock::now();
            let addresses = self._address.as_ref().map(|a| a.addresses.clone());
            let mut pause = None;
            if let (Some(a), Some(remote)) = (&addresses, self.peer.remote) {
                // An address whose connections were sent away for floods
                // waits before each new one is read: a reconnect loop is
                // slowed.
                let strikes = a.strikes(remote.ip(), now);
                if strikes > 0 {
                    frames::STEPS.slowed.fetch_add(1, Ordering::Relaxed);
                    let wait = (frames::PENALTY_PER_STRIKE * strikes).min(frames::MAX_PENALTY);
                    pause = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
            self.frames = Some(Box::new(FrameGuard {
                client: frames::Cursor::new(limits.preface_bytes),
                server: frames::Cursor::new(0),
                meter: frames::Meter::new(rate, now),
                rate,
                principal: None,
                principal_at: None,
                pause,
                last_stream: 0,
                goaway: None,
                goaway_since: None,
                address: addresses,
            }));
        }
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
        if let Some((timeout, sleep)) = &mut self.stall {
            match self.peer.load.stalled_for() {
                None => *sleep = None,
                Some(d) if d >= *timeout => {
                    tracing::info!(
                        peer = ?self.peer.remote,
                        held = self.peer.load.queued(),
                        "closed: took no byte of its answers for --response-stall-timeout"
                    );
                    return Some(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "took no byte of its answers within --response-stall-timeout",
                    )));
                }
                Some(d) => {
                    let at = clock::tokio_now() + (*timeout - d);
                    let s = sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                    if s.deadline() != at {
                        s.as_mut().reset(at);
                    }
                    let _ = s.as_mut().poll(cx);
                }
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
        if let Some(g) = this.frames.as_deref_mut() {
            if let Some(r) = g.before_read(&mut this.stream, &this.peer, cx) {
                return r;
            }
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
        match &r {
            // The end of the stream from the client (it had room to read
            // into): the client closed its end.
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                this.peer.binds.peer_closed()
            }
            Poll::Ready(Err(e)) if closed_by_peer(e) => this.peer.binds.peer_closed(),
            _ => {}
        }
        if let (Poll::Ready(Ok(())), Some(g)) = (&r, this.frames.as_deref_mut()) {
            g.read(&buf.filled()[before..], &this.peer);
        }
        if let (Poll::Ready(Ok(())), Some((_, left))) = (&r, &mut this.preface) {
            *left = left.saturating_sub(buf.filled().len() - before);
            if *left == 0 {
                this.preface = None;
            }
        }
        r
    }
}

/// Whether an error of the socket (not one of ours: those are returned
/// before the socket is read) says that the client closed or reset the
/// connection. A timeout is silence, not a close.
fn closed_by_peer(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            // TLS: the TCP connection ended without a close_notify.
            | io::ErrorKind::UnexpectedEof
    )
}

/// Ends a connection's bindings when the connection is dropped
/// ([`ConnBinds::ended`]; harmless before any call was made on it).
struct EndBinds(Arc<ConnBinds>);

impl Drop for EndBinds {
    fn drop(&mut self) {
        self.0.ended();
    }
}

impl FrameGuard {
    /// Before a read: whether the connection must wait, or is closed.
    fn before_read(
        &mut self,
        io: &mut Io,
        peer: &Peer,
        cx: &mut Context<'_>,
    ) -> Option<Poll<io::Result<()>>> {
        if self.goaway.is_some() {
            return Some(match self.send_goaway(io, cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(_) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "sent away: over --max-frame-rate-per-connection",
                ))),
            });
        }
        if let Some(p) = &mut self.pause {
            if p.as_mut().poll(cx).is_pending() {
                return Some(Poll::Pending);
            }
            self.pause = None;
        }
        let now = clock::now();
        let (mut step, mut wait) = self.meter.step(now, &frames::STEPS);
        let mut refusing = u64::from(self.rate);
        if let Some((_, load)) = &self.principal {
            if load.frames_over.load(Ordering::Relaxed) {
                let mut m = load.frames.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(m) = m.as_mut() {
                    let (s, w) = m.step(now, &frames::STEPS);
                    if s > step {
                        refusing = m.rate() as u64 | PRINCIPALS_BUDGET;
                    }
                    step = step.max(s);
                    wait = wait.max(w);
                    load.frames_over.store(m.empty(), Ordering::Relaxed);
                }
            }
        }
        let refusing = if step >= Step::Refused { refusing } else { 0 };
        peer.load.refusing.store(refusing, Ordering::Relaxed);
        if step == Step::Goaway {
            let since = *self.goaway_since.get_or_insert(now);
            if self.server.at_boundary() {
                self.strike(peer, "over --max-frame-rate-per-connection: sent away");
                self.goaway = Some((
                    frames::goaway(self.last_stream, frames::ENHANCE_YOUR_CALM),
                    0,
                ));
                return self.before_read(io, peer, cx);
            }
            if now.saturating_duration_since(since) > frames::GOAWAY_GRACE {
                // It reads nothing, so the server's last frame never went
                // out whole: no GOAWAY can follow it.
                self.strike(peer, "over --max-frame-rate-per-connection: closed");
                return Some(Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed: over --max-frame-rate-per-connection",
                ))));
            }
        }
        if wait.is_zero() {
            return None;
        }
        let mut pause = Box::pin(tokio::time::sleep(wait));
        if pause.as_mut().poll(cx).is_ready() {
            return None;
        }
        self.pause = Some(pause);
        Some(Poll::Pending)
    }

    /// Follows the client's bytes just read, and charges them.
    fn read(&mut self, bytes: &[u8], peer: &Peer) {
        let (mut cost, mut last, mut goaway) = (0.0, self.last_stream, false);
        self.client.follow(bytes, |f| {
            cost += frames::client_cost(&f);
            if f.kind == frames::HEADERS {
                last = last.max(f.stream);
            }
            goaway |= f.kind == frames::GOAWAY;
        });
        self.last_stream = last;
        if goaway {
            // A client closing its connection says GOAWAY, then closes its
            // socket; the server may end the connection on the GOAWAY,
            // before it reads that close.
            peer.binds.peer_closed();
        }
        let now = clock::now();
        self.meter.charge(cost, now);
        if cost > 0.0 {
            self.charge_principal(cost, now, peer);
        }
    }

    /// Charges the connection's principal too, if its policy gives it a
    /// budget across its connections (looked up again at most once a
    /// second, so that a reload applies).
    fn charge_principal(&mut self, cost: f64, now: Instant, peer: &Peer) {
        if self
            .principal_at
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1))
        {
            self.principal_at = Some(now);
            self.principal = peer
                .caller
                .frame_budget()
                .map(|(rate, load)| (rate.min(u32::MAX as usize) as u32, load));
        }
        let Some((rate, load)) = &self.principal else {
            return;
        };
        let mut m = load.frames.lock().unwrap_or_else(|e| e.into_inner());
        let m = m.get_or_insert_with(|| frames::Meter::new(*rate, now));
        m.set_rate(*rate);
        m.charge(cost, now);
        load.frames_over.store(m.empty(), Ordering::Relaxed);
    }

    /// Follows the server's bytes just written, and charges the client for
    /// the streams refused; a GOAWAY that blames the client (h2's own, for
    /// too many streams refused or reset) counts against its address.
    fn wrote(&mut self, bufs: &[io::IoSlice<'_>], mut n: usize, peer: &Peer) {
        let (mut cost, mut blamed) = (0.0, false);
        for b in bufs {
            if n == 0 {
                break;
            }
            let k = n.min(b.len());
            self.server.follow(&b[..k], |f| {
                cost += frames::server_cost(&f);
                blamed |= frames::is_goaway_for_cause(&f);
            });
            n -= k;
        }
        self.meter.charge(cost, clock::now());
        if blamed && self.goaway.is_none() {
            frames::STEPS.goaway.fetch_add(1, Ordering::Relaxed);
            self.strike(
                peer,
                "sent away by HTTP/2 (GOAWAY): too many streams refused or reset",
            );
        }
    }

    /// Writes what is left of the GOAWAY, then flushes.
    fn send_goaway(&mut self, io: &mut Io, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some((frame, sent)) = &mut self.goaway else {
            return Poll::Ready(Ok(()));
        };
        while *sent < frame.len() {
            match both!(io, s => Pin::new(s).poll_write(cx, &frame[*sent..])) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(k)) => *sent += k,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        both!(io, s => Pin::new(s).poll_flush(cx))
    }

    /// Counts a connection sent away against its address.
    fn strike(&self, peer: &Peer, why: &'static str) {
        if let (Some(a), Some(remote)) = (&self.address, peer.remote) {
            a.strike(remote.ip(), clock::now(), why);
        }
    }
}

impl Conn {
    /// After the server wrote `n` bytes of `bufs`.
    fn wrote(&mut self, bufs: &[io::IoSlice<'_>], n: usize) {
        if n > 0 && self.stall.is_some() && self.peer.load.queued() > 0 {
            self.peer.load.made_progress();
        }
        if let Some(g) = self.frames.as_deref_mut() {
            g.wrote(bufs, n, &self.peer);
        }
    }

    /// Before the server writes: once a GOAWAY of the frame budget's has
    /// begun, it goes out whole and nothing follows it.
    fn may_write(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<usize>>> {
        let g = self.frames.as_deref_mut()?;
        g.goaway.as_ref()?;
        Some(match g.send_goaway(&mut self.stream, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into())),
        })
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(r) = this.may_write(cx) {
            return r;
        }
        let r = both!(&mut this.stream, s => Pin::new(s).poll_write(cx, buf));
        match &r {
            Poll::Ready(Ok(n)) => this.wrote(&[io::IoSlice::new(buf)], *n),
            Poll::Ready(Err(e)) if closed_by_peer(e) => this.peer.binds.peer_closed(),
            _ => {}
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(r) = this.may_write(cx) {
            return r;
        }
        let r = both!(&mut this.stream, s => Pin::new(s).poll_write_vectored(cx, bufs));
        match &r {
            Poll::Ready(Ok(n)) => this.wrote(bufs, *n),
            Poll::Ready(Err(e)) if closed_by_peer(e) => this.peer.binds.peer_closed(),
            _ => {}
        }
        r
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
                            _binds: EndBinds(peer.binds.clone()),
                            stream: Io::Tls(Box::new(stream)),
                            peer: Peer { certs, ..peer },
                            place: place.0,
                            _address: place.1,
                            evictable: false,
                            preface: None,
                            idle: None,
                            tls_idle: false,
                            frames: None,
                            stall: None,
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
            binds: Arc::default(),
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
                _binds: EndBinds(peer.binds.clone()),
                stream: Io::Plain(stream),
                peer,
                place,
                _address: address,
                evictable: false,
                preface: None,
                idle: None,
                tls_idle: false,
                frames: None,
                stall: None,
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
/// [`ConnLimits::max_per_address`], and the addresses whose connections
/// were sent away for floods ([`super::frames`]).
#[derive(Default)]
struct Addresses(
    std::sync::Mutex<HashMap<IpAddr, usize>>,
    std::sync::Mutex<HashMap<IpAddr, Strikes>>,
);

/// The times an address's connections were sent away.
struct Strikes {
    n: u32,
    last: Instant,
    /// When one was last logged, and how many since.
    logged: Option<Instant>,
    unlogged: u64,
}

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

impl Addresses {
    /// How many times `ip`'s connections were sent away in the
    /// [`frames::STRIKE_MEMORY`] before `now`.
    fn strikes(&self, ip: IpAddr, now: Instant) -> u32 {
        let s = self.1.lock().unwrap_or_else(|e| e.into_inner());
        s.get(&address_key(ip))
            .filter(|s| now.saturating_duration_since(s.last) < frames::STRIKE_MEMORY)
            .map_or(0, |s| s.n)
    }

    /// Counts a connection of `ip`'s sent away (`why`), and logs it: at
    /// most one line per address per [`REFUSAL_LOG_INTERVAL`], with the
    /// number left out since the last.
    fn strike(&self, ip: IpAddr, now: Instant, why: &'static str) {
        let key = address_key(ip);
        let mut all = self.1.lock().unwrap_or_else(|e| e.into_inner());
        if all.len() >= 4096 {
            all.retain(|_, s| now.saturating_duration_since(s.last) < frames::STRIKE_MEMORY);
        }
        let s = all.entry(key).or_insert(Strikes {
            n: 0,
            last: now,
            logged: None,
            unlogged: 0,
        });
        if now.saturating_duration_since(s.last) >= frames::STRIKE_MEMORY {
            s.n = 0;
        }
        s.n = s.n.saturating_add(1);
        s.last = now;
        s.unlogged += 1;
        if s.logged
            .is_none_or(|t| now.saturating_duration_since(t) >= REFUSAL_LOG_INTERVAL)
        {
            tracing::warn!(
                address = %key,
                connections = s.unlogged,
                "{why} ({} connection(s) of this address since the last line)",
                s.unlogged
            );
            s.logged = Some(now);
            s.unlogged = 0;
        }
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
