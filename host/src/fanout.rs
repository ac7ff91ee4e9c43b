//! Delivery to connections. Each connection has a bounded queue of outbound
//! frames ([`Sink`]); the filter actors push notifications into it without
//! ever waiting. A connection whose queue is full is flagged and closed by
//! its session with a reason, so one slow reader never stalls the others.
//!
//! The flag is a child of the server's shutdown token: the session's writer
//! waits on that one per-connection token for both reasons to close, instead
//! of polling the shutdown token every connection shares (a contended lock
//! on every frame).

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The sending side of one connection's outbound queue.
#[derive(Clone, Debug)]
pub struct Sink {
    /// Bounded: its capacity is how far a reader may fall behind.
    frames: mpsc::Sender<String>,
    /// Cancelled when a frame did not fit (the session then closes the
    /// connection with 1008 instead of silently skipping events) or when
    /// the server shuts down (its parent).
    closing: CancellationToken,
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
    /// A queue of `capacity` frames whose closing signal also fires when
    /// `shutdown` is cancelled.
    pub fn new(capacity: usize, shutdown: &CancellationToken) -> (Self, mpsc::Receiver<String>) {
        let (frames, rx) = mpsc::channel(capacity.max(1));
        (
            Self {
                frames,
                closing: shutdown.child_token(),
            },
            rx,
        )
    }

    /// Queues a frame without waiting.
    pub fn send(&self, frame: String) -> Result<(), SendError> {
        match self.frames.try_send(frame) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.closing.cancel();
                Err(SendError::Overflow)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SendError::Closed),
        }
    }

    /// Queues an `eth_subscription` notification around an already
    /// serialized payload and its cursor.
    pub fn notify(
        &self,
        subscription: &str,
        payload: &str,
        cursor: Option<&str>,
    ) -> Result<(), SendError> {
        self.send(notification(subscription, payload, cursor))
    }

    /// Whether the queue is at most half full: a replay fills only that
    /// half, so live frames always find room (docs/architecture.md, The
    /// event log).
    pub fn has_room_to_spare(&self) -> bool {
        self.frames.capacity() * 2 >= self.frames.max_capacity()
    }

    /// Fires when a frame was dropped for lack of room, or at shutdown.
    pub fn closing(&self) -> &CancellationToken {
        &self.closing
    }
}

const PREFIX: &str = r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":""#;
const MIDDLE: &str = r#"","result":"#;
const CURSOR: &str = r#","cursor":""#;
const SUFFIX: &str = "}}";

/// Splices a subscription id, a serialized payload and the event's cursor
/// into a notification: payload and cursor are made once per event, only
/// this frame is per subscriber. A cursor is a log's (`chain:position:
/// index:tag`), so it needs no JSON escaping.
pub fn notification(subscription: &str, payload: &str, cursor: Option<&str>) -> String {
    let cursor_len = cursor.map_or(0, |c| CURSOR.len() + c.len() + 1);
    let mut frame = String::with_capacity(
        PREFIX.len()
            + subscription.len()
            + MIDDLE.len()
            + payload.len()
            + cursor_len
            + SUFFIX.len(),
    );
    frame.push_str(PREFIX);
    frame.push_str(subscription);
    frame.push_str(MIDDLE);
    frame.push_str(payload);
    if let Some(cursor) = cursor {
        frame.push_str(CURSOR);
        frame.push_str(cursor);
        frame.push('"');
    }
    frame.push_str(SUFFIX);
    frame
}

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

    #[test]
    fn shutdown_closes_every_sink() {
        let shutdown = CancellationToken::new();
        let (sink, _rx) = Sink::new(2, &shutdown);
        shutdown.cancel();
        assert!(sink.closing().is_cancelled());
    }

    #[test]
    fn notification_is_valid_json_in_the_subscription_shape() {
        let frame = notification(
            "0xabc",
            r#"{"number":"0x1"}"#,
            Some("eth:7:0:00000000000000ff"),
        );
        let v: Value = serde_json::from_str(&frame).expect("valid JSON");
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":{"number":"0x1"},"cursor":"eth:7:0:00000000000000ff"}})
        );
        let bare: Value =
            serde_json::from_str(&notification("0xabc", "\"0x1\"", None)).expect("valid JSON");
        assert_eq!(
            bare,
            json!({"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":"0x1"}})
        );
    }

    #[test]
    fn half_the_queue_is_spare_room() {
        let shutdown = CancellationToken::new();
        let (sink, _rx) = Sink::new(4, &shutdown);
        assert!(sink.has_room_to_spare());
        sink.send("a".into()).expect("room");
        sink.send("b".into()).expect("room");
        assert!(sink.has_room_to_spare(), "half full");
        sink.send("c".into()).expect("room");
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
        let shutdown = CancellationToken::new();
        let (sink, mut rx) = Sink::new(2, &shutdown);
        assert_eq!(sink.send("a".into()), Ok(()));
        assert_eq!(sink.send("b".into()), Ok(()));
        assert!(!sink.closing().is_cancelled());
        assert_eq!(sink.send("c".into()), Err(SendError::Overflow));
        assert!(sink.closing().is_cancelled());
        assert!(
            !shutdown.is_cancelled(),
            "one connection's overflow is its own"
        );
        assert_eq!(rx.try_recv().ok().as_deref(), Some("a"));
        drop(rx);
        assert_eq!(sink.send("d".into()), Err(SendError::Closed));
    }
}
