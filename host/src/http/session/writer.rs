//! A session's writing half: it drains the connection's queue into the
//! socket. It encodes the WebSocket frames itself (a server's frames are
//! unmasked: a header, then the text), splicing each notification's
//! subscription id and shared notice straight into one write buffer, so a
//! notification is copied once on its way to the kernel and written in
//! one system call with whatever else was queued (docs/architecture.md,
//! Fan-out).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_tungstenite::tungstenite::Bytes;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame;

use crate::fanout::{Closing, Frame};

/// Frames taken from the queue per wake: what queued up while the socket
/// was busy goes out in one write, and the bound lets other connections
/// run between two rounds of a long queue.
const COALESCE: usize = 64;

/// A write buffer that grew past this (a burst to one connection) is given
/// back once written, so a quiet connection holds little.
const KEEP_BUFFER: usize = 64 << 10;

/// Why the writer stopped.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// [`Closing`] was set; `unwritten` is the rest of a write it broke
    /// off, which must precede any close frame.
    Closing { unwritten: Vec<u8> },
    /// The socket failed, or every sender is gone.
    Gone,
    /// A ping went a whole interval without a pong.
    Unresponsive,
}

/// Drains the outbound queue into `socket` until `closing` is set or the
/// connection fails. Every wait,
/// including a write to a peer that stopped reading, gives way to
/// `closing`. It runs as a task of its own, so a notification wakes only
/// this loop, never the session's reader.
pub(super) async fn write<W>(
    socket: &mut W,
    mut frames: mpsc::Receiver<Frame>,
    closing: &Closing,
    ping_interval: Duration,
    ponged: &AtomicBool,
) -> Stop
where
    W: AsyncWrite + Unpin,
{
    // A ping every interval, busy or idle (resetting a timer per frame is
    // a timer-wheel update per frame); a late tick is not made up for, so
    // a long write never brings two pings back to back.
    let mut ping =
        tokio::time::interval_at(tokio::time::Instant::now() + ping_interval, ping_interval);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Reused between rounds; allocated only on a connection that is sent
    // to.
    let mut batch = Vec::new();
    let mut out = Vec::new();
    loop {
        tokio::select! {
            biased;
            () = closing.closed() => return Stop::Closing { unwritten: Vec::new() },
            received = frames.recv_many(&mut batch, COALESCE) => {
                if received == 0 {
                    return Stop::Gone;
                }
            }
            _ = ping.tick() => {
                // The last ping's pong must have come by now.
                if !ponged.swap(false, Ordering::Relaxed) {
                    return Stop::Unresponsive;
                }
                control(frame::Frame::ping(Bytes::new()), &mut out);
            }
        }
        for frame in batch.drain(..) {
            encode(&frame, &mut out);
        }
        let mut written = 0;
        while written < out.len() {
            tokio::select! {
                biased;
                () = closing.closed() => {
                    return Stop::Closing { unwritten: out.split_off(written) };
                }
                sent = socket.write(&out[written..]) => match sent {
                    Ok(0) | Err(_) => return Stop::Gone,
                    Ok(sent) => written += sent,
                },
            }
        }
        out.clear();
        if out.capacity() > KEEP_BUFFER {
            out = Vec::new();
        }
    }
}

/// Writes `unwritten` (the rest of a frame the writer broke off) and
/// then the close frame that ends a connection.
pub(super) async fn close<W: AsyncWrite + Unpin>(
    socket: &mut W,
    mut unwritten: Vec<u8>,
    close: Option<CloseFrame>,
) -> std::io::Result<()> {
    control(frame::Frame::close(close), &mut unwritten);
    socket.write_all(&unwritten).await
}

/// Appends `frame` as one final, unmasked frame: the header (RFC 6455,
/// 5.2) is written here, as tungstenite's general `FrameHeader::format`
/// took 2.5% of the server's CPU in the load benchmark's profile.
fn encode(frame: &Frame, out: &mut Vec<u8>) {
    const FIN: u8 = 0x80;
    const TEXT: u8 = 0x1;
    const PONG: u8 = 0xA;
    let len = frame.len();
    out.reserve(10 + len);
    out.push(FIN | if frame.is_text() { TEXT } else { PONG });
    match u16::try_from(len) {
        Ok(short) if short < 126 => out.push(short as u8),
        Ok(medium) => {
            out.push(126);
            out.extend_from_slice(&medium.to_be_bytes());
        }
        Err(_) => {
            out.push(127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    for piece in frame.pieces() {
        out.extend_from_slice(piece);
    }
}

/// Appends a control frame (ping, pong, close).
fn control(frame: frame::Frame, out: &mut Vec<u8>) {
    frame.format(out).expect("writing to a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Poll};

    use futures_util::StreamExt;
    use tokio::io::{AsyncReadExt, DuplexStream};
    use tokio_tungstenite::WebSocketStream;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::Role;

    use super::*;
    use crate::fanout::{Notice, SendError, Sink};

    /// The server's end of a loopback pipe, counting its writes.
    struct Counted {
        inner: DuplexStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncWrite for Counted {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let written = Pin::new(&mut self.inner).poll_write(cx, buf);
            if matches!(written, Poll::Ready(Ok(_))) {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            written
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// A socket of `capacity` bytes in flight, the server's end counting
    /// its writes, and a WebSocket client reading the other end (frames
    /// decoded by tungstenite, as a client would).
    fn socket(capacity: usize) -> (Counted, Arc<AtomicUsize>, WebSocketStream<DuplexStream>) {
        let (server, client) = tokio::io::duplex(capacity);
        let writes = Arc::new(AtomicUsize::new(0));
        let counted = Counted {
            inner: server,
            writes: writes.clone(),
        };
        let client = futures_util::FutureExt::now_or_never(WebSocketStream::from_raw_socket(
            client,
            Role::Client,
            None,
        ))
        .expect("no handshake to wait for");
        (counted, writes, client)
    }

    const HOUR: Duration = Duration::from_secs(3_600);

    async fn next(client: &mut WebSocketStream<DuplexStream>) -> Message {
        tokio::time::timeout(Duration::from_secs(30), client.next())
            .await
            .expect("a frame in time")
            .expect("open")
            .expect("a well-formed frame")
    }

    /// What queued up while the socket was busy leaves in one write, each
    /// frame whole (a notification spliced from its parts, a pong as a
    /// pong); a close stops the writer between two writes.
    #[tokio::test]
    async fn frames_queued_meanwhile_leave_in_one_write() {
        let (sink, frames) = Sink::new(8);
        let notification = Frame::Notification {
            subscription: "0xab".into(),
            notice: Notice::new("\"0x1\"", Some("eth:1:0:00000000000000ff")),
        };
        // Lengths of each size the header has: 7 bits, 16, and 64.
        let queued = [
            Frame::Text("a".into()),
            notification,
            Frame::Text("x".repeat(300)),
            Frame::Text("y".repeat(70_000)),
            Frame::Pong(b"hi".as_slice().into()),
        ];
        for frame in queued.iter().cloned() {
            sink.send(frame).expect("room");
        }
        let (mut socket, writes, mut client) = socket(1 << 20);
        let ponged = AtomicBool::new(true);
        let writing = write(&mut socket, frames, sink.closing(), HOUR, &ponged);
        let checking = async {
            for frame in &queued {
                let want = match frame {
                    Frame::Pong(payload) => Message::Pong(Bytes::copy_from_slice(payload)),
                    text => Message::Text(text.to_text().into()),
                };
                assert_eq!(next(&mut client).await, want);
            }
            assert_eq!(writes.load(Ordering::Relaxed), 1);
            sink.closing().close();
        };
        let (stop, ()) = tokio::join!(writing, checking);
        assert_eq!(
            stop,
            Stop::Closing {
                unwritten: Vec::new()
            }
        );
    }

    /// A peer that stops reading stalls only its own writer: its queue
    /// fills, the next frame overflows it, and the writer gives up the
    /// write it was stuck in, handing back what it had not written so the
    /// close frame can follow a whole frame.
    #[tokio::test]
    async fn a_peer_that_stops_reading_is_closed_when_its_queue_overflows() {
        let (sink, frames) = Sink::new(2);
        // Room for part of a frame in flight, and nobody reads it.
        let (mut socket, _, _client) = socket(16);
        let ponged = AtomicBool::new(true);
        let writing = write(&mut socket, frames, sink.closing(), HOUR, &ponged);
        let feeding = async {
            for n in 0.. {
                match sink.send(format!("frame {n} of a peer that stopped reading")) {
                    Ok(()) => tokio::task::yield_now().await,
                    Err(SendError::Overflow) => return n,
                    Err(SendError::Closed) => panic!("the writer holds the queue"),
                }
            }
            unreachable!("the queue overflows")
        };
        let (stop, sent) = tokio::join!(writing, feeding);
        let Stop::Closing { unwritten } = stop else {
            panic!("stopped by the overflow, not {stop:?}");
        };
        assert!(!unwritten.is_empty(), "the write was broken off");
        assert!(sent >= 2, "the queue's capacity went first ({sent})");
    }

    /// A ping goes out every interval; a peer that has not answered the
    /// last one by the next is unresponsive. (Time is paused: the test
    /// runs at once.)
    #[tokio::test(start_paused = true)]
    async fn a_ping_unanswered_for_an_interval_ends_the_connection() {
        let (sink, frames) = Sink::new(8);
        let (mut socket, _, mut client) = socket(1 << 16);
        let ponged = AtomicBool::new(true);
        // Shorter than `next`'s timeout, which runs on the same paused clock.
        let period = Duration::from_secs(10);
        let writing = write(&mut socket, frames, sink.closing(), period, &ponged);
        let answering = async {
            // Answer three pings, then stop (the fourth is never answered).
            for answered in 0..4 {
                assert!(matches!(next(&mut client).await, Message::Ping(_)));
                if answered < 3 {
                    ponged.store(true, Ordering::Relaxed);
                }
            }
        };
        let started = tokio::time::Instant::now();
        let (stop, ()) = tokio::join!(writing, answering);
        assert_eq!(stop, Stop::Unresponsive);
        assert_eq!(
            started.elapsed(),
            5 * period,
            "four pings, then one interval"
        );
    }

    /// The close frame follows the rest of a broken-off frame.
    #[tokio::test]
    async fn a_close_follows_what_was_left_unwritten() {
        let (mut server, mut client) = tokio::io::duplex(1 << 10);
        let reason = CloseFrame {
            code: 1008.into(),
            reason: "too slow".into(),
        };
        close(&mut server, b"rest".to_vec(), Some(reason))
            .await
            .expect("written");
        drop(server);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("read");
        assert_eq!(&got[..4], b"rest");
        // FIN + close opcode, a 10-byte payload: the code, then the reason.
        assert_eq!(&got[4..8], &[0x88, 10, 0x03, 0xF0]);
        assert_eq!(&got[8..], b"too slow");
    }
}
