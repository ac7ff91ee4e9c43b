//! The server's TCP sockets. Each accepted socket is shared (an `Arc`), so
//! that a WebSocket session's writer writes to it directly while its reader
//! reads through hyper's upgraded connection: the two halves share no lock
//! (docs/src/architecture.md, Fan-out). Nagle is off on every socket.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use chainsieve_fanout::Wire;

/// Accepts [`Socket`]s (axum's [`axum::serve::Listener`]).
pub struct Listener(TcpListener);

impl Listener {
    pub fn new(listener: TcpListener) -> Self {
        Self(listener)
    }
}

impl axum::serve::Listener for Listener {
    type Io = Socket;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Socket, SocketAddr) {
        // axum's accept loop: it retries connection errors, and backs off on
        // others (such as running out of descriptors).
        let (tcp, addr) = axum::serve::Listener::accept(&mut self.0).await;
        // No Nagle: the session writer already gathers what is queued into
        // one write, and Nagle would hold a lone notification back until
        // the peer acknowledges the last one (tens of ms with delayed ACKs;
        // the load benchmark's pending p99 fell from 20 to ~ms without it).
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not disable Nagle on a connection");
        }
        (Socket(Arc::new(tcp)), addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// An accepted TCP socket that several owners read and write through
/// `&TcpStream`'s readiness calls: hyper reads (and, before an upgrade,
/// writes) through one clone, a WebSocket session writes through another,
/// and its queue's senders through a third ([`Socket::wire`]).
/// A request's handler gets its connection's clone as
/// `ConnectInfo<Socket>`.
#[derive(Clone, Debug)]
pub struct Socket(Arc<TcpStream>);

impl Connected<IncomingStream<'_, Listener>> for Socket {
    fn connect_info(stream: IncomingStream<'_, Listener>) -> Self {
        stream.io().clone()
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            // A spurious readiness is cleared by the WouldBlock, and the
            // next poll registers for the real one.
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(read) => {
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }
}

impl Socket {
    /// The socket for a connection's queue to write to ([`Wire`]).
    pub fn wire(&self) -> Arc<dyn Wire> {
        self.0.clone()
    }

    /// Waits for the socket to be writable and makes one `write` attempt;
    /// a spurious readiness is cleared by its WouldBlock.
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match write(&self.0) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                written => return Poll::Ready(written),
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |tcp| tcp.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |tcp| tcp.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the kernel.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&*self.0).shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Two clones of one socket and its queue's wire: what they write and
    /// read arrive, and a shutdown through either clone ends the peer's
    /// stream.
    #[tokio::test]
    async fn clones_of_a_socket_read_and_write_it_independently() {
        let mut listener = Listener::new(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
        let addr = axum::serve::Listener::local_addr(&listener).expect("address");
        let (accepted, peer) = tokio::join!(
            axum::serve::Listener::accept(&mut listener),
            TcpStream::connect(addr)
        );
        let (socket, _) = accepted;
        let mut peer = peer.expect("connected");
        assert!(socket.0.nodelay().expect("nodelay"), "Nagle is off");
        let (mut reader, mut writer) = (socket.clone(), socket);
        writer.write_all(b"to the peer").await.expect("written");
        let mut got = [0u8; 11];
        peer.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"to the peer");
        peer.write_all(b"from the peer").await.expect("written");
        let mut got = [0u8; 13];
        reader.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"from the peer");
        let vectored = [io::IoSlice::new(b"two "), io::IoSlice::new(b"pieces")];
        let written = writer.write_vectored(&vectored).await.expect("written");
        let mut got = vec![0u8; written];
        peer.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, &b"two pieces"[..written]);
        let wire = writer.wire();
        assert_eq!(wire.try_write(b"from a sender").expect("taken"), 13);
        let mut got = [0u8; 13];
        peer.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"from a sender");
        writer.shutdown().await.expect("shut down");
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).await.expect("the end");
        assert!(rest.is_empty(), "nothing after the shutdown");
    }
}
