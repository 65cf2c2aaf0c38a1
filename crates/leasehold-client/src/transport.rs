//! The client's connection: TCP, then TLS when asked for, under a write
//! buffer that sends each unary call in one write.
//!
//! The HTTP/2 client writes a new call's HEADERS frame as soon as its
//! connection task runs, and its DATA frame on the next run: the stream
//! gets its flow-control window only once it is open, after the body was
//! first asked for. Written as they come, a call costs two writes, two
//! TCP segments and, over TLS, two records, each of which the server
//! decrypts and processes on its own. [`Coalesce`] holds what is written
//! until a flush, and lets a flush wait one turn of the scheduler first,
//! in which the call's body joins its headers: one write and one record.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tonic::codegen::http::Uri;

/// Bytes held at most before a write goes out without waiting for the
/// flush: a large value (a WriteStream's batch) is sent in pieces of this.
const HOLD_MAX: usize = 64 * 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The TLS settings of a connection: the client configuration and the
/// name the server's certificate must carry (`None`: the address's host).
#[derive(Clone)]
pub(crate) struct Tls {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl Tls {
    /// The settings for a server certified by `ca_pem`, with a client
    /// certificate if `identity` is given. Errors name what is wrong.
    pub(crate) fn new(
        ca_pem: Option<&[u8]>,
        identity: Option<(&[u8], &[u8])>,
        server_name: Option<&str>,
    ) -> Result<Tls, (&'static str, String)> {
        let mut roots = RootCertStore::empty();
        if let Some(pem) = ca_pem {
            let mut n = 0;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| ("ca", format!("bad CA certificate (PEM): {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| ("ca", format!("bad CA certificate: {e}")))?;
                n += 1;
            }
            if n == 0 {
                return Err(("ca", "the CA file holds no PEM certificate".into()));
            }
        }
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ("ca", format!("bad TLS settings: {e}")))?
            .with_root_certificates(roots);
        let mut config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| ("cert", format!("bad client certificate (PEM): {e}")))?;
                if chain.is_empty() {
                    return Err((
                        "cert",
                        "the certificate file holds no PEM certificate".into(),
                    ));
                }
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| ("key", format!("bad private key (PEM): {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| ("key", format!("the key does not fit the certificate: {e}")))?
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        let server_name = server_name
            .map(|n| {
                ServerName::try_from(n.to_owned())
                    .map_err(|e| ("server_name", format!("bad server name {n:?}: {e}")))
            })
            .transpose()?;
        Ok(Tls {
            config: Arc::new(config),
            server_name,
        })
    }
}

/// Connects to a `Uri`'s host and port: what tonic's channel calls to
/// (re)connect.
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) tls: Option<Tls>,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Coalesce<Stream>>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("the server address has no host")?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(match tls {
                Some(_) => 443,
                None => 80,
            });
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = match tls {
                None => Stream::Plain(tcp),
                Some(tls) => {
                    let name = match tls.server_name {
                        Some(n) => n,
                        None => ServerName::try_from(host)?,
                    };
                    let s = tokio_rustls::TlsConnector::from(tls.config)
                        .connect(name, tcp)
                        .await?;
                    if s.get_ref().1.alpn_protocol() != Some(b"h2") {
                        return Err("the server did not agree to HTTP/2 (ALPN h2)".into());
                    }
                    Stream::Tls(Box::new(s))
                }
            };
            Ok(TokioIo::new(Coalesce::new(stream)))
        })
    }
}

/// A connection's byte stream, plain or TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, b),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, b),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Holds writes until a flush, and lets each flush wait one turn of the
/// scheduler before it sends (see the module's doc). Reads pass through.
///
/// **Everything written is sent by the flush after it**: a flush that
/// waits has woken its own task first, so it is asked again, and the one
/// after a wait always sends. A shutdown sends what is held first.
pub(crate) struct Coalesce<T> {
    io: T,
    held: Vec<u8>,
    /// How much of `held` the stream below has taken.
    sent: usize,
    /// The current flush has already waited its turn.
    waited: bool,
}

impl<T> Coalesce<T> {
    pub(crate) fn new(io: T) -> Self {
        Coalesce {
            io,
            held: Vec::new(),
            sent: 0,
            waited: false,
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesce<T> {
    /// Writes everything held to the stream below.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.held.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.held[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.held.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Room for more, sending what is held first when it is full.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.held.len() >= HOLD_MAX {
            ready!(self.poll_send(cx))?;
        }
        Poll::Ready(Ok(HOLD_MAX - self.held.len()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesce<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let room = ready!(me.poll_room(cx))?;
        let n = room.min(b.len());
        me.held.extend_from_slice(&b[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let mut room = ready!(me.poll_room(cx))?;
        let mut n = 0;
        for b in bufs {
            let take = room.min(b.len());
            me.held.extend_from_slice(&b[..take]);
            n += take;
            room -= take;
            if room == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.held.is_empty() {
            me.waited = false;
            return Pin::new(&mut me.io).poll_flush(cx);
        }
        if !me.waited {
            // One turn for whatever the writer's other tasks are about to
            // add (a call's body after its headers).
            me.waited = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(me.poll_send(cx))?;
        me.waited = false;
        Pin::new(&mut me.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_send(cx))?;
        Pin::new(&mut me.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Writes held until a flush go out in one write; a flush waits one
    /// turn and then sends; a shutdown sends what is held.
    #[tokio::test]
    async fn held_writes_go_out_together_at_the_flush() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut c = Coalesce::new(a);
        c.write_all(b"headers").await.unwrap();
        c.write_all(b"+body").await.unwrap();
        let mut got = [0u8; 64];
        let none = tokio::time::timeout(std::time::Duration::from_millis(50), b.read(&mut got));
        assert!(none.await.is_err(), "nothing is sent before the flush");
        c.flush().await.unwrap();
        let n = b.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"headers+body", "in one write");
        // More than HOLD_MAX at once: sent in pieces, all of it.
        let big = vec![7u8; HOLD_MAX * 2 + 5];
        c.write_all(&big).await.unwrap();
        c.write_all(b"tail").await.unwrap();
        c.shutdown().await.unwrap();
        let mut rest = Vec::new();
        b.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest.len(), big.len() + 4);
        assert!(rest.ends_with(b"tail"));
    }
}
