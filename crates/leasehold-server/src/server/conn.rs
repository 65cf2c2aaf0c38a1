//! A cap on open connections.
//!
//! Each accepted connection holds a permit for as long as it is open. At
//! the cap, a new connection is accepted and closed at once (a client sees
//! the connection reset and can try another server or back off), so an
//! unbounded number of idle or hostile connections cannot exhaust file
//! descriptors or memory.
//!
//! With TLS ([`super::tls`]) each connection's handshake runs in a task of
//! its own, with a deadline, so a slow or silent client delays nobody; the
//! connection reaches the server only once its handshake is done, with
//! its client certificate (if any) in its [`Peer`].

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt as _};
use tonic::transport::server::Connected;

use super::tls::{Port, Tls};

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection (plain TCP, or TLS over it) that holds one of the server's
/// connection permits.
pub struct Conn {
    stream: Io,
    peer: Peer,
    _permit: OwnedSemaphorePermit,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// Who is at the other end of a connection: put into every request's
/// extensions, where the policy ([`super::auth`]) reads the client
/// certificate.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// The client's address.
    pub remote: Option<SocketAddr>,
    /// The client's certificate chain (its own first), verified against
    /// `--tls-client-ca` in the handshake; `None` without one.
    pub certs: Option<Arc<[CertificateDer<'static>]>>,
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
        both!(&mut self.get_mut().stream, s => Pin::new(s).poll_read(cx, buf))
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

/// Accepts connections from `listener`, at most `max` open at once, with
/// TCP_NODELAY set (every reply is a small message; Nagle's algorithm would
/// hold it for up to 40 ms).
///
/// With `tls`, each connection first completes a TLS handshake with the
/// certificates loaded when it arrived (a reload never touches
/// connections already open), in a task of its own; one that fails or
/// takes longer than 10 s is closed and logged.
pub fn incoming(
    listener: TcpListener,
    max: usize,
    tls: Option<(Arc<Tls>, Port)>,
) -> Pin<Box<dyn Stream<Item = io::Result<Conn>> + Send>> {
    match tls {
        None => Box::pin(plain(listener, max)),
        Some((tls, port)) => Box::pin(secured(listener, max, tls, port)),
    }
}

fn secured(
    listener: TcpListener,
    max: usize,
    tls: Arc<Tls>,
    port: Port,
) -> impl Stream<Item = io::Result<Conn>> {
    let (tx, rx) = mpsc::channel::<io::Result<Conn>>(64);
    let mut plain = Box::pin(plain(listener, max));
    tokio::spawn(async move {
        loop {
            let conn = tokio::select! {
                c = plain.next() => c,
                _ = tx.closed() => return,
            };
            let (tcp, permit) = match conn {
                None => return,
                Some(Err(e)) => {
                    if tx.send(Err(e)).await.is_err() {
                        return;
                    }
                    continue;
                }
                Some(Ok(Conn {
                    stream: Io::Plain(tcp),
                    _permit,
                    ..
                })) => (tcp, _permit),
                Some(Ok(_)) => unreachable!("plain() yields plain connections"),
            };
            let acceptor = tls.acceptor(port);
            let tx = tx.clone();
            tokio::spawn(async move {
                let remote = tcp.peer_addr().ok();
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let certs = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .map(|c| c.iter().map(|c| c.clone().into_owned()).collect());
                        let _ = tx
                            .send(Ok(Conn {
                                stream: Io::Tls(Box::new(stream)),
                                peer: Peer { remote, certs },
                                _permit: permit,
                            }))
                            .await;
                    }
                    Ok(Err(e)) => {
                        tracing::info!(peer = ?remote, error = %e, ?port, "TLS handshake failed");
                    }
                    Err(_) => {
                        tracing::info!(peer = ?remote, ?port, "TLS handshake timed out after 10s");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

fn plain(listener: TcpListener, max: usize) -> impl Stream<Item = io::Result<Conn>> + Send {
    let permits = Arc::new(Semaphore::new(max));
    TcpListenerStream::new(listener).filter_map(move |s| {
        let stream = match s {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let _ = stream.set_nodelay(true);
                let peer = Peer {
                    remote: stream.peer_addr().ok(),
                    certs: None,
                };
                Some(Ok(Conn {
                    stream: Io::Plain(stream),
                    peer,
                    _permit: permit,
                }))
            }
            Err(_) => {
                tracing::warn!(
                    peer = ?stream.peer_addr().ok(),
                    max,
                    "connection refused: at --max-connections"
                );
                None // dropped: closed at once
            }
        }
    })
}
