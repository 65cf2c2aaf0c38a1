//! A cap on open connections.
//!
//! Each accepted connection holds a permit for as long as it is open. At
//! the cap, a new connection is accepted and closed at once (a client sees
//! the connection reset and can try another server or back off), so an
//! unbounded number of idle or hostile connections cannot exhaust file
//! descriptors or memory.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// A TCP connection that holds one of the server's connection permits.
pub struct Conn {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Accepts connections from `listener`, at most `max` open at once, with
/// TCP_NODELAY set (every reply is a small message; Nagle's algorithm would
/// hold it for up to 40 ms).
pub fn incoming(listener: TcpListener, max: usize) -> impl Stream<Item = io::Result<Conn>> {
    let permits = Arc::new(Semaphore::new(max));
    TcpListenerStream::new(listener).filter_map(move |s| {
        let stream = match s {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let _ = stream.set_nodelay(true);
                Some(Ok(Conn {
                    stream,
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
