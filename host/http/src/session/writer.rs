//! A session's writing half: it drains the connection's queue into the
//! socket. It encodes the WebSocket frames itself (a server's frames are
//! unmasked: a header, then the text), splicing each notification's
//! subscription id and shared notice straight into one write buffer, so a
//! notification is copied once on its way to the kernel (more if the
//! socket does not take it at once) and written in one system call with
//! whatever else was queued. That buffer is the worker thread's, not the
//! connection's (docs/src/architecture.md, Fan-out). While it waits on an empty
//! queue, senders write to the socket themselves; it is woken only for
//! what they queued, or for the rest of a write the socket took in part.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame;

use chainsieve_fanout::{Closing, Frame, Frames, Round, with_scratch};

/// Frames taken from the queue per wake: what queued up while the socket
/// was busy goes out in one write, and the bound lets other connections
/// run between two rounds of a long queue.
const COALESCE: usize = 64;

/// A connection's own buffer that grew past this (a burst to a peer that
/// did not read) is given back once written, so a quiet connection holds
/// little.
const KEEP_BUFFER: usize = 64 << 10;

/// Why the writer stopped.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// [`Closing`] was set; `unwritten` is the rest of a write broken off
    /// (the writer's, or a sender's), which must precede any close frame.
    Closing { unwritten: Vec<u8> },
    /// The socket failed, or every sender is gone.
    Gone,
}

/// Drains the outbound queue into `socket` until `closing` is set or the
/// connection fails. Every wait, including a write to a peer that stopped
/// reading, gives way to `closing`. It runs as a task of its own, so a
/// notification wakes only this loop, never the session's reader; and it
/// waits on the queue alone (the reader keeps the ping timer), so a wake
/// is one lock and one write.
pub(super) async fn write<W>(socket: &mut W, mut frames: Frames, closing: &Closing) -> Stop
where
    W: AsyncWrite + Unpin,
{
    // Reused between rounds; allocated only on a connection that is sent
    // to (`out`: only on one whose socket did not take a round whole).
    let mut batch = VecDeque::new();
    let mut out = Vec::new();
    loop {
        match frames.take(&mut batch, &mut out, COALESCE).await {
            Round::Frames => {}
            Round::Closing => return Stop::Closing { unwritten: out },
            Round::Gone => return Stop::Gone,
        }
        if out.is_empty() {
            let first =
                poll_fn(|cx| Poll::Ready(write_round(&mut *socket, cx, &mut batch, &mut out)));
            if first.await.is_err() {
                return Stop::Gone;
            }
        } else {
            // A sender's rest goes first, and the round after it.
            for frame in batch.drain(..) {
                frame.encode(&mut out);
            }
        }
        // A round takes the queue's buffer whole when it can (the two
        // change places): one a burst grew is given back here.
        if batch.capacity() > 2 * COALESCE {
            batch = VecDeque::new();
        }
        let mut written = 0;
        while written < out.len() {
            // The write is tried first; only a socket that is not
            // writable makes the writer wait, on it and on `closing`.
            let sent = poll_fn(
                |cx| match Pin::new(&mut *socket).poll_write(cx, &out[written..]) {
                    Poll::Ready(sent) => Poll::Ready(Some(sent)),
                    Poll::Pending => closing.poll_closed(cx).map(|()| None),
                },
            )
            .await;
            match sent {
                None => {
                    return Stop::Closing {
                        unwritten: out.split_off(written),
                    };
                }
                Some(Ok(0) | Err(_)) => return Stop::Gone,
                Some(Ok(sent)) => written += sent,
            }
        }
        out.clear();
        if out.capacity() > KEEP_BUFFER {
            out = Vec::new();
        }
    }
}

/// Encodes `batch`'s frames (leaving it empty) into the thread's buffer
/// ([`with_scratch`]) and makes one write attempt; appends to `out` what
/// the socket did not take (the connection's own buffer, allocated only
/// then). `Err` when the socket failed.
fn write_round<W: AsyncWrite + Unpin>(
    socket: &mut W,
    cx: &mut Context<'_>,
    batch: &mut VecDeque<Frame>,
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    with_scratch(|scratch| {
        for frame in batch.drain(..) {
            frame.encode(scratch);
        }
        // Every frame has a header, so the round is never empty and a
        // write of nothing means the socket is gone.
        let sent = match Pin::new(socket).poll_write(cx, scratch) {
            Poll::Ready(Ok(0) | Err(_)) => return Err(()),
            Poll::Ready(Ok(sent)) => sent,
            Poll::Pending => 0,
        };
        out.extend_from_slice(&scratch[sent..]);
        Ok(())
    })
}

/// Writes `unwritten` (the rest of a frame broken off) and
/// then the close frame that ends a connection.
pub(super) async fn close<W: AsyncWrite + Unpin>(
    socket: &mut W,
    mut unwritten: Vec<u8>,
    close: Option<CloseFrame>,
) -> std::io::Result<()> {
    frame::Frame::close(close)
        .format(&mut unwritten)
        .expect("writing to a Vec cannot fail");
    socket.write_all(&unwritten).await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures_util::StreamExt;
    use tokio::io::{AsyncReadExt, DuplexStream};
    use tokio_tungstenite::WebSocketStream;
    use tokio_tungstenite::tungstenite::protocol::Role;
    use tokio_tungstenite::tungstenite::{Bytes, Message};

    use super::*;
    use std::task::Waker;

    use chainsieve_fanout::{Notice, SendError, Sink, Wire};

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
        (counted, writes, websocket_client(client))
    }

    /// A WebSocket client reading `stream` (frames decoded by tungstenite).
    fn websocket_client(stream: DuplexStream) -> WebSocketStream<DuplexStream> {
        futures_util::FutureExt::now_or_never(WebSocketStream::from_raw_socket(
            stream,
            Role::Client,
            None,
        ))
        .expect("no handshake to wait for")
    }

    /// The server's end of a pipe written by the writer and, through
    /// `&self` ([`Wire`]), by the queue's senders, as a socket shared as
    /// `&TcpStream` is; the senders' writes counted.
    #[derive(Clone, Debug)]
    struct SharedPipe {
        inner: Arc<std::sync::Mutex<DuplexStream>>,
        wire_writes: Arc<AtomicUsize>,
    }

    impl SharedPipe {
        fn poll_write_now(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            let mut inner = self.inner.lock().expect("unpoisoned");
            Pin::new(&mut *inner).poll_write(cx, buf)
        }
    }

    impl Wire for SharedPipe {
        fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
            self.wire_writes.fetch_add(1, Ordering::Relaxed);
            match self.poll_write_now(&mut Context::from_waker(Waker::noop()), bytes) {
                Poll::Ready(written) => written,
                Poll::Pending => Err(std::io::ErrorKind::WouldBlock.into()),
            }
        }
    }

    impl AsyncWrite for SharedPipe {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.poll_write_now(cx, buf)
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    async fn next(client: &mut WebSocketStream<DuplexStream>) -> Message {
        tokio::time::timeout(Duration::from_secs(30), client.next())
            .await
            .expect("a frame in time")
            .expect("open")
            .expect("a well-formed frame")
    }

    /// Runs the writer on `socket` beside `checking`, closes the queue once
    /// `checking` is done, and expects the writer to stop at that close
    /// with nothing unwritten.
    async fn write_while(
        socket: &mut Counted,
        frames: Frames,
        sink: &Sink,
        checking: impl Future<Output = ()>,
    ) {
        let closing = sink.closing();
        let checked = async {
            checking.await;
            closing.close();
        };
        let (stop, ()) = tokio::join!(write(socket, frames, &closing), checked);
        assert_eq!(
            stop,
            Stop::Closing {
                unwritten: Vec::new()
            }
        );
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
            Frame::Ping,
        ];
        for frame in queued.iter().cloned() {
            sink.send(frame).expect("room");
        }
        let (mut socket, writes, mut client) = socket(1 << 20);
        let checking = async {
            for frame in &queued {
                let want = match frame {
                    Frame::Pong(payload) => Message::Pong(Bytes::copy_from_slice(payload)),
                    Frame::Ping => Message::Ping(Bytes::new()),
                    text => Message::Text(text.to_text().into()),
                };
                assert_eq!(next(&mut client).await, want);
            }
            assert_eq!(writes.load(Ordering::Relaxed), 1);
        };
        write_while(&mut socket, frames, &sink, checking).await;
    }

    /// A round the socket takes only in part arrives whole and in order:
    /// the rest waits in the connection's own buffer until the peer reads.
    #[tokio::test]
    async fn a_round_the_socket_takes_in_part_arrives_whole() {
        let (sink, frames) = Sink::new(8);
        let queued: Vec<String> = (0..4)
            .map(|n| format!("frame {n} {}", "z".repeat(100)))
            .collect();
        for text in &queued {
            sink.send(text.clone()).expect("room");
        }
        // Room for 16 bytes in flight: a write takes a part of the round.
        let (mut socket, writes, mut client) = socket(16);
        let checking = async {
            for text in &queued {
                assert_eq!(next(&mut client).await, Message::Text(text.as_str().into()));
            }
            assert!(
                writes.load(Ordering::Relaxed) > queued.len(),
                "written in parts"
            );
        };
        write_while(&mut socket, frames, &sink, checking).await;
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
        let closing = sink.closing();
        let writing = write(&mut socket, frames, &closing);
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

    /// Senders write to the socket while the writer waits on the empty
    /// queue; what the socket takes only in part, the writer finishes, and
    /// the frames queued meanwhile follow it, each whole and in order.
    #[tokio::test]
    async fn senders_and_the_writer_share_the_socket_in_order() {
        let (server, client) = tokio::io::duplex(64);
        let pipe = SharedPipe {
            inner: Arc::new(std::sync::Mutex::new(server)),
            wire_writes: Arc::new(AtomicUsize::new(0)),
        };
        let (sink, frames) = Sink::wired(8, Arc::new(pipe.clone()), None);
        let mut client = websocket_client(client);
        let closing = sink.closing();
        let mut socket = pipe.clone();
        let mut writing = std::pin::pin!(write(&mut socket, frames, &closing));
        assert!(
            futures_util::poll!(&mut writing).is_pending(),
            "the writer waits on the empty queue"
        );
        // 50 bytes a frame in a pipe of 64: the first is written whole by
        // its sender, the second in part, the rest queued.
        let texts: Vec<String> = (0..4)
            .map(|n| format!("frame {n} {}", "z".repeat(40)))
            .collect();
        for text in &texts {
            sink.send(text.clone()).expect("room");
        }
        assert_eq!(pipe.wire_writes.load(Ordering::Relaxed), 2);
        let checking = async {
            for text in &texts {
                assert_eq!(next(&mut client).await, Message::Text(text.as_str().into()));
            }
            closing.close();
        };
        let (stop, ()) = tokio::join!(writing, checking);
        assert_eq!(
            stop,
            Stop::Closing {
                unwritten: Vec::new()
            }
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
