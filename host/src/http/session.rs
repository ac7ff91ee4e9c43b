//! One WebSocket connection. The reader answers requests in order; every
//! outbound frame (responses and notifications alike) goes through the
//! connection's bounded queue, so their order is kept and no producer ever
//! waits on this socket. The writer drains the queue, pings every interval, and
//! closes the connection with a reason when the queue overflows, a ping
//! went unanswered for a whole interval, or the server shuts down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, close_code};
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::AppState;
use crate::chain::Chain;
use crate::fanout::{SendError, Sink};
use crate::rpc::methods::{self, Connection, Context};
use crate::rpc::{RpcError, error_response};

/// Close code for a subscriber that fell too far behind, or stopped
/// answering pings (policy violation).
const CLOSE_TOO_SLOW: u16 = close_code::POLICY;

/// How long a close frame may take to reach a peer that is not reading.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection ends.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// The client closed or the socket failed: nothing more to send.
    Gone,
    /// The outbound queue overflowed.
    TooSlow,
    /// A ping went a whole interval without a pong.
    Unresponsive,
    /// The server is shutting down.
    Shutdown,
}

pub async fn serve(socket: WebSocket, state: Arc<AppState>, chain: Arc<Chain>, api_key: Arc<str>) {
    let (sink, frames) = Sink::new(state.limits.outbound_queue, &state.shutdown);
    let connection = Connection::new(sink);
    let (mut ws_tx, mut ws_rx) = socket.split();
    // Set by the reader on every pong, checked by the writer before the
    // next ping.
    let ponged = AtomicBool::new(true);
    let ctx = state.rpc_context(&chain, &api_key, Some(&connection));
    let writer = Writer {
        shutdown: state.shutdown.clone(),
        ping_interval: Duration::from_secs(state.limits.ping_interval_secs.max(1)),
    };
    let ending = tokio::select! {
        ending = read(&mut ws_rx, ctx, &ponged) => ending,
        ending = write(&mut ws_tx, frames, &connection.sink, &writer, &ponged) => ending,
    };
    // Cancel first: a peer that stopped reading may never take the close.
    for id in connection.take_owned() {
        state.subscriptions.remove(&id, &api_key).await;
    }
    let close = |code, reason: &str| {
        Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        }))
    };
    let frame = match ending {
        Ending::Gone => return,
        Ending::TooSlow => {
            state.stats.count_closed_too_slow();
            tracing::info!(chain = %chain.name, "closed a connection whose outbound queue overflowed");
            close(CLOSE_TOO_SLOW, "subscriber too slow: outbound queue full")
        }
        Ending::Unresponsive => {
            tracing::info!(chain = %chain.name, "closed a connection that did not answer a ping");
            close(CLOSE_TOO_SLOW, "no pong to the last ping")
        }
        Ending::Shutdown => close(close_code::AWAY, "server shutting down"),
    };
    // The closing handshake: send ours, then read (and drop) what the peer
    // still sends until its Close. Closing the socket with requests unread
    // would make the kernel reset the connection, and the peer could lose
    // our close frame, and with it the reason.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        if ws_tx.send(frame).await.is_ok() {
            while let Some(Ok(message)) = ws_rx.next().await {
                if matches!(message, Message::Close(_)) {
                    break;
                }
            }
        }
    })
    .await;
}

/// Answers requests until the client closes or the socket fails, or a
/// reply finds the outbound queue full.
async fn read(ws_rx: &mut SplitStream<WebSocket>, ctx: Context<'_>, ponged: &AtomicBool) -> Ending {
    let connection = ctx.connection.expect("sessions always have a connection");
    let limit = ctx.limits.max_request_bytes;
    while let Some(Ok(message)) = ws_rx.next().await {
        let bytes = match &message {
            Message::Text(text) => text.as_bytes(),
            Message::Binary(bytes) => bytes.as_ref(),
            Message::Close(_) => return Ending::Gone,
            // tungstenite answers pings itself.
            Message::Ping(_) => continue,
            Message::Pong(_) => {
                ponged.store(true, Ordering::Relaxed);
                continue;
            }
        };
        let reply = if bytes.len() > limit {
            Some(error_response(&RpcError::limit_exceeded(format!(
                "request of {} bytes exceeds the limit of {limit} bytes",
                bytes.len()
            ))))
        } else {
            methods::process(ctx, bytes).await
        };
        let queued = reply.map(|reply| connection.sink.send(reply));
        // Subscriptions made in a batch deliver only now, after the
        // response that tells the client their ids.
        connection.open_gates();
        match queued {
            // A client that sends faster than it reads overflows its queue
            // like a slow subscriber, and is closed the same way.
            Some(Err(SendError::Overflow)) => return Ending::TooSlow,
            Some(Err(SendError::Closed)) => return Ending::Gone,
            Some(Ok(())) | None => {}
        }
    }
    Ending::Gone
}

/// Frames taken from the queue per wake: what queued up while the socket
/// was busy goes out together, in writes of the WebSocket's write buffer
/// (one syscall for many frames instead of one each), and the bound lets
/// other connections run between two rounds of a long queue.
const COALESCE: usize = 64;

/// What the writer needs to know of the server.
struct Writer {
    /// Tells shutdown from overflow once the connection's closing fires.
    shutdown: CancellationToken,
    ping_interval: Duration,
}

/// Drains the outbound queue into `ws_tx` (the socket's sending half) until
/// the connection must end. Every wait, including a write to a peer that
/// stopped reading, gives way to overflow and shutdown.
async fn write<W>(
    ws_tx: &mut W,
    mut frames: mpsc::Receiver<String>,
    sink: &Sink,
    writer: &Writer,
    ponged: &AtomicBool,
) -> Ending
where
    W: futures_util::Sink<Message> + Unpin,
{
    // Registered once for the connection's life: a fresh wait per frame
    // costs two locks each time it is polled and dropped.
    let closing = sink.closing().cancelled();
    tokio::pin!(closing);
    let ending = || {
        if writer.shutdown.is_cancelled() {
            Ending::Shutdown
        } else {
            Ending::TooSlow
        }
    };
    // A ping every interval, busy or idle (resetting a timer per frame is
    // a timer-wheel update per frame); a late tick is not made up for, so
    // a long write never brings two pings back to back.
    let period = writer.ping_interval;
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Reused between writes; grows only on a connection that is sent to.
    let mut batch = Vec::new();
    loop {
        let ping_due = tokio::select! {
            biased;
            () = &mut closing => return ending(),
            received = frames.recv_many(&mut batch, COALESCE) => {
                if received == 0 {
                    return Ending::Gone;
                }
                false
            }
            _ = ping.tick() => {
                // The last ping's pong must have come by now.
                if !ponged.swap(false, Ordering::Relaxed) {
                    return Ending::Unresponsive;
                }
                true
            }
        };
        let written = async {
            if ping_due {
                ws_tx.feed(Message::Ping(Default::default())).await?;
            }
            for frame in batch.drain(..) {
                ws_tx.feed(Message::Text(frame.into())).await?;
            }
            ws_tx.flush().await
        };
        tokio::select! {
            biased;
            () = &mut closing => return ending(),
            sent = written => if sent.is_err() { return Ending::Gone },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Mutex};
    use std::task::{Context as TaskContext, Poll};

    use tokio::sync::Notify;

    use super::*;

    /// A socket's sending half: records what is written and counts
    /// flushes, or, stalled, never takes anything (a peer that stopped
    /// reading).
    #[derive(Clone, Default)]
    struct Peer {
        written: Arc<Mutex<Vec<Message>>>,
        flushes: Arc<AtomicUsize>,
        /// Woken at every flush.
        flushed: Arc<Notify>,
        stalled: bool,
    }

    impl Peer {
        fn written(&self) -> Vec<Message> {
            self.written.lock().expect("lock").clone()
        }
    }

    impl futures_util::Sink<Message> for Peer {
        type Error = Infallible;

        fn poll_ready(
            self: Pin<&mut Self>,
            _: &mut TaskContext<'_>,
        ) -> Poll<Result<(), Infallible>> {
            if self.stalled {
                Poll::Pending
            } else {
                Poll::Ready(Ok(()))
            }
        }

        fn start_send(self: Pin<&mut Self>, message: Message) -> Result<(), Infallible> {
            self.written.lock().expect("lock").push(message);
            Ok(())
        }

        fn poll_flush(
            self: Pin<&mut Self>,
            _: &mut TaskContext<'_>,
        ) -> Poll<Result<(), Infallible>> {
            if self.stalled {
                return Poll::Pending;
            }
            self.flushes.fetch_add(1, Ordering::Relaxed);
            self.flushed.notify_one();
            Poll::Ready(Ok(()))
        }

        fn poll_close(
            self: Pin<&mut Self>,
            _: &mut TaskContext<'_>,
        ) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
    }

    fn writer(shutdown: &CancellationToken, ping_interval: Duration) -> Writer {
        Writer {
            shutdown: shutdown.clone(),
            ping_interval,
        }
    }

    const HOUR: Duration = Duration::from_secs(3_600);

    /// Waits for the peer's next flush, for at most `within`.
    async fn flushed(peer: &Peer, within: Duration) {
        tokio::time::timeout(within, peer.flushed.notified())
            .await
            .expect("a flush in time");
    }

    /// What queued up while the socket was busy leaves in one write; the
    /// server's shutdown ends the writer with its own reason.
    #[tokio::test]
    async fn frames_queued_meanwhile_leave_in_one_flush() {
        let shutdown = CancellationToken::new();
        let (sink, frames) = Sink::new(8, &shutdown);
        for frame in ["a", "b", "c"] {
            sink.send(frame.into()).expect("room");
        }
        let peer = Peer::default();
        let ponged = AtomicBool::new(true);
        let mut socket = peer.clone();
        let writer = writer(&shutdown, HOUR);
        let writing = write(&mut socket, frames, &sink, &writer, &ponged);
        let checking = async {
            flushed(&peer, Duration::from_secs(30)).await;
            let texts: Vec<Message> = ["a", "b", "c"].map(|t| Message::Text(t.into())).into();
            assert_eq!(peer.written(), texts);
            assert_eq!(peer.flushes.load(Ordering::Relaxed), 1);
            shutdown.cancel();
        };
        let (ending, ()) = tokio::join!(writing, checking);
        assert_eq!(ending, Ending::Shutdown);
    }

    /// A peer that stops reading stalls only its own writer: its queue
    /// fills, the next frame overflows it, and the writer gives up the
    /// write it was stuck in to close the connection as too slow.
    #[tokio::test]
    async fn a_peer_that_stops_reading_is_closed_when_its_queue_overflows() {
        let shutdown = CancellationToken::new();
        let (sink, frames) = Sink::new(2, &shutdown);
        let mut socket = Peer {
            stalled: true,
            ..Peer::default()
        };
        let ponged = AtomicBool::new(true);
        let writer = writer(&shutdown, HOUR);
        let writing = write(&mut socket, frames, &sink, &writer, &ponged);
        let feeding = async {
            for n in 0.. {
                match sink.send(n.to_string()) {
                    Ok(()) => tokio::task::yield_now().await,
                    Err(SendError::Overflow) => return n,
                    Err(SendError::Closed) => panic!("the writer holds the queue"),
                }
            }
            unreachable!("the queue overflows")
        };
        let (ending, sent) = tokio::join!(writing, feeding);
        assert_eq!(ending, Ending::TooSlow);
        assert!(sent >= 2, "the queue's capacity went first ({sent})");
        assert!(
            !shutdown.is_cancelled(),
            "one connection's overflow is its own"
        );
    }

    /// A ping goes out every interval; a peer that has not answered the
    /// last one by the next is unresponsive. (Time is paused: the test
    /// runs at once.)
    #[tokio::test(start_paused = true)]
    async fn a_ping_unanswered_for_an_interval_ends_the_connection() {
        let shutdown = CancellationToken::new();
        let (sink, frames) = Sink::new(8, &shutdown);
        let peer = Peer::default();
        let ponged = AtomicBool::new(true);
        let mut socket = peer.clone();
        let period = Duration::from_secs(30);
        let writer = writer(&shutdown, period);
        let writing = write(&mut socket, frames, &sink, &writer, &ponged);
        let answering = async {
            // Answer three pings, then stop.
            for _ in 0..3 {
                flushed(&peer, 2 * period).await;
                ponged.store(true, Ordering::Relaxed);
            }
        };
        let started = tokio::time::Instant::now();
        let (ending, ()) = tokio::join!(writing, answering);
        assert_eq!(ending, Ending::Unresponsive);
        assert_eq!(peer.written(), vec![Message::Ping(Default::default()); 4]);
        assert_eq!(
            started.elapsed(),
            5 * period,
            "four pings, then one interval"
        );
    }
}
