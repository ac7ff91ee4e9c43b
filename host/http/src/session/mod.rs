//! One WebSocket connection. The reader answers requests side by side; every
//! outbound frame (responses and notifications alike) goes through the
//! connection's bounded queue, or straight to the socket under its lock
//! while the writer waits on it empty, so their order is kept and no
//! producer ever waits on this socket. The [`writer`] drains the queue; the reader keeps
//! the [`heartbeat`]; the connection is closed with a reason when the
//! queue overflows, a ping went unanswered for a whole interval, its API
//! key is revoked or expires, or the server shuts down.

mod heartbeat;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::socket::Socket;
use super::upgrade::Reader;
use crate::state::AppState;
use chainsieve_chain::Chain;
use chainsieve_fanout::{Frame, SendError, Sink};
use chainsieve_keys::{Ended, Key};
use chainsieve_rpc::RpcError;
use chainsieve_rpc::methods::{self, Connection, Context, Reply};
use heartbeat::{Heartbeat, Unanswered};
use writer::Stop;

/// Close code for a subscriber that fell too far behind, or stopped
/// answering pings (policy violation).
const CLOSE_TOO_SLOW: CloseCode = CloseCode::Policy;

/// How long a close frame may take to reach a peer that is not reading.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection ends.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// The client closed (its close frame, to echo).
    Closed(Option<CloseFrame>),
    /// The socket failed: nothing more to send.
    Gone,
    /// The outbound queue overflowed.
    TooSlow,
    /// A ping went a whole interval without a pong.
    Unresponsive,
    /// The API key was revoked, or expired.
    KeyEnded(Ended),
    /// The server is shutting down.
    Shutdown,
}

pub async fn serve(
    mut reader: Reader,
    socket: Socket,
    state: Arc<AppState>,
    chain: Arc<Chain>,
    key: Arc<Key>,
) {
    let (sink, frames) = Sink::wired(
        state.limits.outbound_queue,
        socket.wire(),
        key.meter.clone(),
    );
    let closing = sink.closing();
    let connection = Connection::new(sink);
    let heartbeat = Heartbeat::new(Duration::from_secs(state.limits.ping_interval_secs.max(1)));
    let mut writing = tokio::spawn({
        let (mut socket, closing) = (socket.clone(), closing.clone());
        async move { writer::write(&mut socket, frames, &closing).await }
    });
    let ctx = state.rpc_context(&chain, &key, Some(&connection));
    let (read_ending, writer_stop) = tokio::select! {
        ending = read(&mut reader, ctx, heartbeat) => (Some(ending), None),
        ended = key.ended() => (Some(Ending::KeyEnded(ended)), None),
        () = state.shutdown.cancelled() => (Some(Ending::Shutdown), None),
        stop = &mut writing => (None, Some(stop.ok())),
    };
    let stop = match writer_stop {
        Some(stop) => stop,
        None => {
            // Stops the writer, at a frame's end or mid-write.
            closing.close();
            writing.await.ok()
        }
    };
    let (ending, unwritten) = settle(read_ending, stop);
    // Cancel first: a peer that stopped reading may never take the close.
    for id in connection.take_owned() {
        state.subscriptions.remove(&id, &key.id).await;
    }
    let close = |code, reason: &str| {
        Some(CloseFrame {
            code,
            reason: reason.into(),
        })
    };
    let frame = match ending {
        Ending::Gone => return,
        Ending::Closed(theirs) => {
            // Echo the client's close, and the connection is over.
            let echo = theirs.map(|frame| CloseFrame {
                code: frame.code,
                reason: "".into(),
            });
            let mut socket = socket;
            let _ =
                tokio::time::timeout(CLOSE_TIMEOUT, writer::close(&mut socket, unwritten, echo))
                    .await;
            return;
        }
        Ending::TooSlow => {
            state.stats.count_closed_too_slow();
            tracing::info!(chain = %chain.name, "closed a connection whose outbound queue overflowed");
            close(CLOSE_TOO_SLOW, "subscriber too slow: outbound queue full")
        }
        Ending::Unresponsive => {
            tracing::info!(chain = %chain.name, "closed a connection that did not answer a ping");
            close(CLOSE_TOO_SLOW, "no pong to the last ping")
        }
        Ending::KeyEnded(Ended::Revoked) => close(CloseCode::Policy, "key revoked"),
        Ending::KeyEnded(Ended::Expired) => close(CloseCode::Policy, "key expired"),
        Ending::Shutdown => close(CloseCode::Away, "server shutting down"),
    };
    // The closing handshake: send ours, then read (and drop) what the peer
    // still sends until its Close. Closing the socket with requests unread
    // would make the kernel reset the connection, and the peer could lose
    // our close frame, and with it the reason.
    let mut socket = socket;
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        if writer::close(&mut socket, unwritten, frame).await.is_ok() {
            while let Some(Ok(message)) = reader.next().await {
                if matches!(message, Message::Close(_)) {
                    break;
                }
            }
        }
    })
    .await;
}

/// Why the connection ends, from how the reader ended (`None`: it was
/// still reading) and how the writer stopped (`None`: it panicked), and
/// the rest of a write the writer broke off.
fn settle(reader: Option<Ending>, writer: Option<Stop>) -> (Ending, Vec<u8>) {
    match (reader, writer) {
        (Some(Ending::Gone), _) | (_, None | Some(Stop::Gone)) => (Ending::Gone, Vec::new()),
        (Some(ending), Some(Stop::Closing { unwritten })) => (ending, unwritten),
        // Only an overflow sets `closing` before the session does.
        (None, Some(Stop::Closing { unwritten })) => (Ending::TooSlow, unwritten),
    }
}

/// Requests answered at once on one connection, at most; past them the
/// reader waits for an answer before it reads the next frame.
const MAX_IN_FLIGHT: usize = 64;

/// Answers requests until the client closes or the socket fails, a
/// reply finds the outbound queue full, or a ping went unanswered for an
/// interval while the reader was reading. Requests are answered side by
/// side, each as soon as it can be, as a node does: a call forwarded to a
/// slow node delays no other request, and the reader goes on taking pings
/// and pongs, so a client that is waiting is never taken for an
/// unresponsive one. Clients match responses by id. Requests answered
/// without waiting (all but forwarded calls) are answered in the order
/// they came. Pings go out on the heartbeat's schedule, ahead of what is
/// queued.
async fn read(reader: &mut Reader, ctx: Context<'_>, mut heartbeat: Heartbeat) -> Ending {
    let connection = ctx.connection.expect("sessions always have a connection");
    let limit = ctx.limits.max_request_bytes;
    // Boxed: the set keeps a stub task as large as one of its futures for
    // the connection's life, and a request's future holds any method's
    // state (~5 KiB; 15 KiB before the node's connect was boxed): unboxed,
    // that was most of an idle connection's memory (docs/src/benchmarks.md,
    // Memory per connection).
    let mut answering: FuturesUnordered<BoxFuture<'_, Reply>> = FuturesUnordered::new();
    let ending = loop {
        // Past that many in flight the reader waits for an answer first.
        let reading = answering.len() < MAX_IN_FLIGHT;
        let next = tokio::select! {
            biased;
            Some(reply) = answering.next() => match queue(reply, &connection.sink) {
                Some(ending) => return ending,
                None => continue,
            },
            // Before the ping's tick: a pong already read is heard first.
            next = reader.next(), if reading => next,
            due = heartbeat.next_ping() => match due {
                // A reader that has stopped reading cannot have seen the
                // pong: not taken for unresponsive.
                Err(Unanswered) if reading => {
                    return Ending::Unresponsive;
                }
                Ok(()) | Err(Unanswered) => match ending(connection.sink.ping()) {
                    Some(ending) => return ending,
                    None => continue,
                },
            },
        };
        let bytes = match next {
            Some(Ok(Message::Text(text))) => text.into(),
            Some(Ok(Message::Binary(bytes))) => bytes,
            Some(Ok(Message::Close(frame))) => break Ending::Closed(frame),
            Some(Ok(control)) => match take_control(&control, &connection.sink, &mut heartbeat) {
                Some(ending) => return ending,
                None => continue,
            },
            Some(Err(_)) | None => break Ending::Gone,
        };
        answering.push(Box::pin(async move {
            if bytes.len() > limit {
                methods::refuse(RpcError::limit_exceeded(format!(
                    "request of {} bytes exceeds the limit of {limit} bytes (limits.max_request_bytes)",
                    bytes.len()
                )))
            } else {
                methods::process(ctx, &bytes).await
            }
        }));
    };
    // Answer what was asked; then the session ends.
    while let Some(reply) = answering.next().await {
        if let Some(ending) = queue(reply, &connection.sink) {
            return ending;
        }
    }
    ending
}

/// Queues a reply; `Some` when the session must end.
fn queue(reply: Reply, sink: &Sink) -> Option<Ending> {
    ending(reply.queue(sink))
}

/// How a refused frame ends the session.
fn ending(queued: Result<(), SendError>) -> Option<Ending> {
    match queued {
        // A client that sends faster than it reads overflows its queue
        // like a slow subscriber, and is closed the same way.
        Err(SendError::Overflow) => Some(Ending::TooSlow),
        Err(SendError::Closed) => Some(Ending::Gone),
        Ok(()) => None,
    }
}

/// Takes a control frame: a ping is answered (in order with the rest of
/// what is queued), a pong noted; `Some` when the session must end.
fn take_control(frame: &Message, sink: &Sink, heartbeat: &mut Heartbeat) -> Option<Ending> {
    match frame {
        Message::Ping(payload) => ending(sink.send(Frame::Pong(payload.as_ref().into()))),
        Message::Pong(_) => {
            heartbeat.answered();
            None
        }
        // Only ever written, never read; data frames are not control.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Who ended first decides the reason; a broken-off write is kept for
    /// the close frame to follow, and a failed socket sends nothing more.
    #[test]
    fn the_first_to_end_gives_the_reason() {
        let cut = || {
            Some(Stop::Closing {
                unwritten: b"rest".to_vec(),
            })
        };
        assert_eq!(
            settle(Some(Ending::Shutdown), cut()),
            (Ending::Shutdown, b"rest".to_vec())
        );
        assert_eq!(settle(None, cut()), (Ending::TooSlow, b"rest".to_vec()));
        assert_eq!(
            settle(Some(Ending::Unresponsive), cut()),
            (Ending::Unresponsive, b"rest".to_vec())
        );
        assert_eq!(
            settle(Some(Ending::Gone), cut()),
            (Ending::Gone, Vec::new())
        );
        assert_eq!(
            settle(Some(Ending::TooSlow), Some(Stop::Gone)),
            (Ending::Gone, Vec::new())
        );
        assert_eq!(
            settle(Some(Ending::Shutdown), None),
            (Ending::Gone, Vec::new())
        );
    }
}
