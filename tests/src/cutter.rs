//! A TCP proxy between clients and a server that cuts every connection on
//! demand, as a network does: the client's socket is reset (no close
//! frame), and when the server is sending at that moment, after only part
//! of what it sent went through (a frame cut in the middle). The resuming
//! clients' tests put it in front of chainsieve.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How long a cut waits for the server to send something to cut in two.
const MID_FRAME_WAIT: Duration = Duration::from_millis(200);

/// The proxy; it stops (and resets what is open) when dropped.
pub struct Cutter {
    pub addr: SocketAddr,
    /// Bumped by each cut; every connection's task watches it.
    cuts: watch::Sender<u64>,
    /// Connections accepted so far, for a test to wait on a reconnection.
    accepted: watch::Sender<u64>,
    /// Cuts that left the client half a chunk of the server's bytes.
    mid_frame: Arc<AtomicU64>,
    /// Whether new connections wait (see [`Cutter::hold`]); the accepting
    /// task watches it.
    held: watch::Sender<bool>,
    /// Where new connections go (see [`Cutter::redirect`]); the accepting
    /// task reads it for each.
    upstream: watch::Sender<SocketAddr>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Cutter {
    /// Listens on `127.0.0.1:0` and passes each connection on to
    /// `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the cutter")?;
        let addr = listener.local_addr()?;
        let (cuts, watching) = watch::channel(0);
        let accepted = watch::Sender::new(0);
        let counted = accepted.clone();
        let mid_frame = Arc::new(AtomicU64::new(0));
        let halves = mid_frame.clone();
        let held = watch::Sender::new(false);
        let mut holding = held.subscribe();
        let upstream = watch::Sender::new(upstream);
        let going = upstream.subscribe();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                // A connection made while held waits, its handshake
                // unanswered, until the hold ends.
                if holding.wait_for(|held| !*held).await.is_err() {
                    return;
                }
                counted.send_modify(|accepted| *accepted += 1);
                let to = *going.borrow();
                tokio::spawn(pass(client, to, watching.clone(), halves.clone()));
            }
        });
        Ok(Self {
            addr,
            cuts,
            accepted,
            mid_frame,
            held,
            upstream,
            accepting,
        })
    }

    pub fn ws_url(&self, chain: &str, key: &str) -> String {
        format!("ws://{}/{chain}/v1/{key}", self.addr)
    }

    /// Cuts every connection open now; the next ones pass until the next
    /// cut.
    pub fn cut(&self) {
        self.cuts.send_modify(|cuts| *cuts += 1);
    }

    /// Keeps new connections waiting (counted as accepted once it ends)
    /// until the guard is dropped: what happens meanwhile, a client that
    /// was cut misses live.
    pub fn hold(&self) -> Hold<'_> {
        self.held.send_replace(true);
        Hold(self)
    }

    /// Sends the next connections to `upstream` (a server restarted on
    /// another port); the open ones stay where they are.
    pub fn redirect(&self, upstream: SocketAddr) {
        self.upstream.send_replace(upstream);
    }

    /// How many connections it has accepted so far.
    pub fn accepted(&self) -> u64 {
        *self.accepted.borrow()
    }

    /// How many connections were cut in the middle of what the server was
    /// sending.
    pub fn cut_mid_frame(&self) -> u64 {
        self.mid_frame.load(Ordering::SeqCst)
    }

    /// Waits (within [`crate::TIMEOUT`]) until it has accepted `count`
    /// connections.
    pub async fn until_accepted(&self, count: u64) {
        let mut accepted = self.accepted.subscribe();
        tokio::time::timeout(crate::TIMEOUT, accepted.wait_for(|a| *a >= count))
            .await
            .unwrap_or_else(|_| panic!("{count} connections accepted in time"))
            .expect("the cutter runs");
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.accepting.abort();
        self.cut();
    }
}

/// The guard of [`Cutter::hold`].
pub struct Hold<'a>(&'a Cutter);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.0.held.send_replace(false);
    }
}

/// Passes bytes both ways until a cut, then resets the client's socket
/// and drops the server's.
async fn pass(
    client: TcpStream,
    upstream: SocketAddr,
    mut cuts: watch::Receiver<u64>,
    mid_frame: Arc<AtomicU64>,
) {
    cuts.mark_unchanged();
    let Ok(server) = TcpStream::connect(upstream).await else {
        let _ = client.set_zero_linger();
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let mut up = [0u8; 16 * 1024];
    let mut down = [0u8; 16 * 1024];
    loop {
        tokio::select! {
            _ = cuts.changed() => break,
            read = from_client.read(&mut up) => match read {
                Ok(n) if n > 0 && to_server.write_all(&up[..n]).await.is_ok() => {}
                _ => break,
            },
            read = from_server.read(&mut down) => match read {
                Ok(n) if n > 0 && to_client.write_all(&down[..n]).await.is_ok() => {}
                _ => break,
            },
        }
    }
    // Half of what the server sends next, if it sends within a moment:
    // the client's last frame ends part way.
    if let Ok(Ok(n)) = tokio::time::timeout(MID_FRAME_WAIT, from_server.read(&mut down)).await
        && n > 1
        && to_client.write_all(&down[..n / 2]).await.is_ok()
    {
        mid_frame.fetch_add(1, Ordering::SeqCst);
    }
    if let Ok(client) = from_client.reunite(to_client) {
        let _ = client.set_zero_linger();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that answers each chunk with it in capitals.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = socket.read(&mut buffer).await {
                        let upper = buffer[..n].to_ascii_uppercase();
                        if n == 0 || socket.write_all(&upper).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn bytes_pass_both_ways_until_a_cut_resets_the_client() {
        let cutter = Cutter::start(echo().await).await.expect("cutter");
        let mut client = TcpStream::connect(cutter.addr).await.expect("connect");
        client.write_all(b"hello").await.expect("write");
        let mut got = [0u8; 5];
        client.read_exact(&mut got).await.expect("echoed");
        assert_eq!(&got, b"HELLO");
        cutter.until_accepted(1).await;
        cutter.cut();
        let mut rest = Vec::new();
        let ended = client.read_to_end(&mut rest).await;
        assert!(
            ended.is_err() || rest.is_empty(),
            "reset or ended: {ended:?}"
        );
        // The next connection passes again.
        let mut again = TcpStream::connect(cutter.addr).await.expect("connect");
        again.write_all(b"again").await.expect("write");
        let mut got = [0u8; 5];
        again.read_exact(&mut got).await.expect("echoed");
        assert_eq!(&got, b"AGAIN");
    }

    #[tokio::test]
    async fn a_connection_made_while_held_passes_once_the_hold_ends() {
        let cutter = Cutter::start(echo().await).await.expect("cutter");
        let held = cutter.hold();
        let mut client = TcpStream::connect(cutter.addr).await.expect("connect");
        client.write_all(b"held").await.expect("write");
        let mut got = [0u8; 4];
        let early = tokio::time::timeout(Duration::from_millis(100), client.read(&mut got)).await;
        assert!(early.is_err(), "no answer while held: {early:?}");
        assert_eq!(cutter.accepted(), 0);
        drop(held);
        cutter.until_accepted(1).await;
        client.read_exact(&mut got).await.expect("echoed");
        assert_eq!(&got, b"HELD");
    }

    #[tokio::test]
    async fn a_redirect_sends_the_next_connections_elsewhere() {
        let cutter = Cutter::start(echo().await).await.expect("cutter");
        let mut first = TcpStream::connect(cutter.addr).await.expect("connect");
        cutter.until_accepted(1).await;
        let other = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        cutter.redirect(other.local_addr().expect("addr"));
        let _second = TcpStream::connect(cutter.addr).await.expect("connect");
        tokio::time::timeout(crate::TIMEOUT, other.accept())
            .await
            .expect("the next connection reaches the new upstream")
            .expect("accepted");
        // The open one still reaches the first.
        first.write_all(b"old").await.expect("write");
        let mut got = [0u8; 3];
        first.read_exact(&mut got).await.expect("echoed");
        assert_eq!(&got, b"OLD");
    }
}
