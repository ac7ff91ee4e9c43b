//! Delivery to connections. Each connection has a bounded queue of outbound
//! frames ([`Sink`]); the filter actors push notifications into it without
//! ever waiting. A connection whose queue is full is flagged ([`Closing`])
//! and closed by its session with a reason, so one slow reader never
//! stalls the others.
//!
//! A notification is queued as its parts, not as text: the subscription id
//! and the event's [`Notice`] (payload and cursor, made once per event and
//! shared by every subscriber). The session's writer splices them into its
//! socket's write buffer, so a notification costs each subscriber two
//! reference counts and no allocation (docs/architecture.md, Fan-out).

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::sync::mpsc;

/// One outbound frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Text made whole: a response, a subscription's last frame.
    Text(String),
    /// An `eth_subscription` notification, spliced when it is written.
    Notification {
        subscription: Arc<str>,
        notice: Notice,
    },
    /// The answer to a client's ping, with its payload; queued with the
    /// rest, so one queue is all the writer waits on.
    Pong(Box<[u8]>),
}

impl Frame {
    /// The frame's payload, in the pieces written one after the other.
    pub fn pieces(&self) -> [&[u8]; 3] {
        match self {
            Self::Text(text) => [text.as_bytes(), b"", b""],
            Self::Notification {
                subscription,
                notice,
            } => [
                PREFIX.as_bytes(),
                subscription.as_bytes(),
                notice.0.rest.as_bytes(),
            ],
            Self::Pong(payload) => [payload, b"", b""],
        }
    }

    /// Whether it is a text frame (every frame but a pong).
    pub fn is_text(&self) -> bool {
        !matches!(self, Self::Pong(_))
    }

    /// The payload's length in bytes.
    pub fn len(&self) -> usize {
        self.pieces().iter().map(|piece| piece.len()).sum()
    }

    /// Whether the payload is empty (a pong's may be).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload in one string (a pong's lossily).
    pub fn to_text(&self) -> String {
        String::from_utf8_lossy(&self.pieces().concat()).into_owned()
    }
}

impl From<String> for Frame {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

/// What follows the subscription id in each notification of one event:
/// `","result":<payload>,"cursor":"<cursor>"}}`. Made once per event and
/// payload kind; cloning it is a reference count.
///
/// One pointer, not a fat `Arc<str>` and a length: every slot of every
/// connection's queue is as large as the largest frame (32 bytes), and the
/// queue allocates its first 32 slots up front, idle or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice(Arc<NoticeText>);

#[derive(Debug, PartialEq, Eq)]
struct NoticeText {
    rest: Box<str>,
    payload_len: usize,
}

impl Notice {
    /// The notice of a serialized payload and its event's cursor. A cursor
    /// is a log's (`chain:position:index:tag`), so it needs no JSON
    /// escaping.
    pub fn new(payload: &str, cursor: Option<&str>) -> Self {
        let mut rest = String::with_capacity(
            MIDDLE.len()
                + payload.len()
                + cursor.map_or(0, |c| CURSOR.len() + c.len() + 1)
                + SUFFIX.len(),
        );
        rest.push_str(MIDDLE);
        rest.push_str(payload);
        if let Some(cursor) = cursor {
            rest.push_str(CURSOR);
            rest.push_str(cursor);
            rest.push('"');
        }
        rest.push_str(SUFFIX);
        Self(Arc::new(NoticeText {
            rest: rest.into(),
            payload_len: payload.len(),
        }))
    }

    /// The serialized payload.
    pub fn payload(&self) -> &str {
        &self.0.rest[MIDDLE.len()..MIDDLE.len() + self.0.payload_len]
    }
}

/// The sending side of one connection's outbound queue.
#[derive(Clone, Debug)]
pub struct Sink {
    /// Bounded: its capacity is how far a reader may fall behind.
    frames: mpsc::Sender<Frame>,
    /// Set when a frame did not fit: the session then closes the
    /// connection with 1008 instead of silently skipping events.
    closing: Closing,
}

/// Tells a connection's writer to stop: set by a send that found the queue
/// full, or by the session (the client left, the server shuts down). The
/// writer polls it on every round, so it is an atomic flag and a waker
/// rather than a cancellation token (whose every poll takes two locks).
#[derive(Clone, Debug, Default)]
pub struct Closing(Arc<ClosingState>);

#[derive(Debug, Default)]
struct ClosingState {
    closed: AtomicBool,
    /// The writer's, woken once by [`Closing::close`].
    writer: AtomicWaker,
}

impl Closing {
    pub fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.writer.wake();
    }

    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Acquire)
    }

    /// Ready once closed; a pending poll wakes `cx` at the close.
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_closed() {
            return Poll::Ready(());
        }
        self.0.writer.register(cx.waker());
        // A close between the check and the registration woke no one.
        if self.is_closed() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Completes once closed. Only one task may wait at a time (the
    /// connection's writer).
    pub async fn closed(&self) {
        poll_fn(|cx| self.poll_closed(cx)).await
    }
}

/// Why a frame was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The reader fell `capacity` frames behind; the connection is closing.
    Overflow,
    /// The connection is gone.
    Closed,
}

impl Sink {
    /// A queue of `capacity` frames.
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<Frame>) {
        let (frames, rx) = mpsc::channel(capacity.max(1));
        (
            Self {
                frames,
                closing: Closing::default(),
            },
            rx,
        )
    }

    /// Queues a frame without waiting.
    pub fn send(&self, frame: impl Into<Frame>) -> Result<(), SendError> {
        match self.frames.try_send(frame.into()) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.closing.close();
                Err(SendError::Overflow)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SendError::Closed),
        }
    }

    /// Queues an `eth_subscription` notification of `notice` to
    /// `subscription`.
    pub fn notify(&self, subscription: &Arc<str>, notice: &Notice) -> Result<(), SendError> {
        self.send(Frame::Notification {
            subscription: subscription.clone(),
            notice: notice.clone(),
        })
    }

    /// Whether the queue is at most half full: a replay fills only that
    /// half, so live frames always find room (docs/architecture.md, The
    /// event log).
    pub fn has_room_to_spare(&self) -> bool {
        self.frames.capacity() * 2 >= self.frames.max_capacity()
    }

    /// Set when a frame was dropped for lack of room, or by the session.
    pub fn closing(&self) -> &Closing {
        &self.closing
    }
}

const PREFIX: &str = r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":""#;
const MIDDLE: &str = r#"","result":"#;
const CURSOR: &str = r#","cursor":""#;
const SUFFIX: &str = "}}";

/// The last frame of a subscription the server ended (its filter was
/// removed or disabled): an `eth_subscription` carrying a JSON-RPC error
/// instead of a result, so the client learns why the stream stopped.
pub fn ended(subscription: &str, code: i64, message: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "method": "eth_subscription",
        "params": {
            "subscription": subscription,
            "error": {"code": code, "message": message},
        },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A close wakes the task waiting on it, whether it came before or
    /// after the wait began.
    #[tokio::test]
    async fn a_close_wakes_the_writer_waiting_on_it() {
        let closing = Closing::default();
        let waiting = tokio::spawn({
            let closing = closing.clone();
            async move { closing.closed().await }
        });
        tokio::task::yield_now().await;
        closing.close();
        tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
            .await
            .expect("woken in time")
            .expect("no panic");
        assert!(closing.is_closed());
        closing.closed().await;
    }

    #[test]
    fn a_queue_slot_is_four_words() {
        assert_eq!(std::mem::size_of::<Frame>(), 32);
    }

    #[test]
    fn notification_is_valid_json_in_the_subscription_shape() {
        let notice = Notice::new(r#"{"number":"0x1"}"#, Some("eth:7:0:00000000000000ff"));
        assert_eq!(notice.payload(), r#"{"number":"0x1"}"#);
        let frame = Frame::Notification {
            subscription: "0xabc".into(),
            notice,
        };
        let v: Value = serde_json::from_str(&frame.to_text()).expect("valid JSON");
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":{"number":"0x1"},"cursor":"eth:7:0:00000000000000ff"}})
        );
        assert_eq!(frame.len(), frame.to_text().len());
        let bare = Frame::Notification {
            subscription: "0xabc".into(),
            notice: Notice::new("\"0x1\"", None),
        };
        let bare: Value = serde_json::from_str(&bare.to_text()).expect("valid JSON");
        assert_eq!(
            bare,
            json!({"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":"0x1"}})
        );
    }

    #[test]
    fn half_the_queue_is_spare_room() {
        let (sink, _rx) = Sink::new(4);
        assert!(sink.has_room_to_spare());
        sink.send("a".to_string()).expect("room");
        sink.send("b".to_string()).expect("room");
        assert!(sink.has_room_to_spare(), "half full");
        sink.send("c".to_string()).expect("room");
        assert!(!sink.has_room_to_spare());
    }

    #[test]
    fn an_ended_subscription_gets_an_error_in_the_subscription_shape() {
        let frame = ended("0xabc", -32000, "the \"x\" filter was removed");
        let v: Value = serde_json::from_str(&frame).expect("valid JSON");
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","error":{"code":-32000,"message":"the \"x\" filter was removed"}}})
        );
    }

    #[test]
    fn a_full_queue_flags_overflow_instead_of_waiting() {
        let (sink, mut rx) = Sink::new(2);
        assert_eq!(sink.send("a".to_string()), Ok(()));
        assert_eq!(sink.send("b".to_string()), Ok(()));
        assert!(!sink.closing().is_closed());
        assert_eq!(sink.send("c".to_string()), Err(SendError::Overflow));
        assert!(sink.closing().is_closed());
        assert_eq!(rx.try_recv().ok(), Some(Frame::Text("a".into())));
        drop(rx);
        assert_eq!(sink.send("d".to_string()), Err(SendError::Closed));
    }
}
