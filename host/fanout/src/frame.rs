//! What a connection's queue holds: the frames, and a notification's
//! shared [`Notice`], spliced with the subscription id only when written.

use std::sync::Arc;

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
    /// The session's keepalive ping (no payload), asked for by its reader
    /// and put ahead of the queued frames ([`super::Sink::ping`]).
    Ping,
}

impl Frame {
    /// Appends the frame as one final, unmasked WebSocket frame (a
    /// server's): its header, then its payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        header(self.opcode(), self.len(), out);
        self.write_payload(out);
    }

    /// Appends the frame's payload to `out`.
    pub fn write_payload(&self, out: &mut Vec<u8>) {
        match self {
            Self::Text(text) => out.extend_from_slice(text.as_bytes()),
            Self::Notification {
                subscription,
                notice,
            } => notice.write_payload(subscription, out),
            Self::Pong(payload) => out.extend_from_slice(payload),
            Self::Ping => {}
        }
    }

    /// The frame's WebSocket opcode (RFC 6455, 5.2).
    pub fn opcode(&self) -> u8 {
        match self {
            Self::Text(_) | Self::Notification { .. } => TEXT,
            Self::Ping => 0x9,
            Self::Pong(_) => 0xA,
        }
    }

    /// The payload's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Self::Text(text) => text.len(),
            Self::Notification {
                subscription,
                notice,
            } => notice.len_to(subscription),
            Self::Pong(payload) => payload.len(),
            Self::Ping => 0,
        }
    }

    /// Whether the payload is empty (a ping's is).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload in one string (a pong's lossily).
    pub fn to_text(&self) -> String {
        let mut payload = Vec::with_capacity(self.len());
        self.write_payload(&mut payload);
        String::from_utf8_lossy(&payload).into_owned()
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
/// connection's queue is as large as the largest frame (32 bytes).
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

    /// The event's cursor, if it has one.
    pub fn cursor(&self) -> Option<&str> {
        let after = &self.0.rest[MIDDLE.len() + self.0.payload_len..];
        let cursor = after.strip_prefix(CURSOR)?;
        cursor.split_once('"').map(|(cursor, _)| cursor)
    }

    /// Appends the notification's `params` object to `subscription`
    /// (`{"subscription":…,"result":…,"cursor":…}`): what a webhook
    /// delivers of each notification, spliced as a frame is.
    pub fn write_params(&self, subscription: &str, out: &mut Vec<u8>) {
        let rest = self.0.rest.as_bytes();
        out.extend_from_slice(&PREFIX.as_bytes()[PARAMS_AT..]);
        out.extend_from_slice(subscription.as_bytes());
        // The notification's closing brace is the envelope's.
        out.extend_from_slice(&rest[..rest.len() - 1]);
    }

    /// Appends the notification of this notice to `subscription` as one
    /// frame, as [`Frame::encode`] would, without making the frame.
    pub fn encode_to(&self, subscription: &str, out: &mut Vec<u8>) {
        header(TEXT, self.len_to(subscription), out);
        self.write_payload(subscription, out);
    }

    fn write_payload(&self, subscription: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(PREFIX.as_bytes());
        out.extend_from_slice(subscription.as_bytes());
        out.extend_from_slice(self.0.rest.as_bytes());
    }

    /// The length of the notification's text to `subscription`.
    pub fn len_to(&self, subscription: &str) -> usize {
        PREFIX.len() + subscription.len() + self.0.rest.len()
    }
}

/// The text frame's opcode (RFC 6455, 5.2).
const TEXT: u8 = 0x1;

/// Appends a final, unmasked frame's header (RFC 6455, 5.2), written here
/// as tungstenite's general `FrameHeader::format` took 2.5% of the
/// server's CPU in the load benchmark's profile.
fn header(opcode: u8, len: usize, out: &mut Vec<u8>) {
    const FIN: u8 = 0x80;
    out.reserve(10 + len);
    out.push(FIN | opcode);
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
}

const PREFIX: &str = r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":""#;
/// Where the `params` object begins in [`PREFIX`].
const PARAMS_AT: usize = PREFIX.len() - r#"{"subscription":""#.len();
const MIDDLE: &str = r#"","result":"#;
const CURSOR: &str = r#","cursor":""#;
const SUFFIX: &str = "}}";

/// A new public subscription id (a webhook's too): `0x` + 32 random hex
/// digits.
pub fn new_id() -> Arc<str> {
    format!("0x{:032x}", rand::random::<u128>()).into()
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
    fn ids_are_0x_and_32_hex_digits_and_unique() {
        let a = new_id();
        let b = new_id();
        assert_eq!(a.len(), 34);
        assert!(
            a.starts_with("0x")
                && a[2..]
                    .bytes()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
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

    /// A webhook's notification is the frame's `params`, and its cursor
    /// is read back from the notice.
    #[test]
    fn params_are_the_notification_params_and_the_cursor_reads_back() {
        let notice = Notice::new(r#"{"a":"x\"}"}"#, Some("eth:7:0:00000000000000ff"));
        assert_eq!(notice.cursor(), Some("eth:7:0:00000000000000ff"));
        let mut params = Vec::new();
        notice.write_params("0xabc", &mut params);
        let frame = Frame::Notification {
            subscription: "0xabc".into(),
            notice,
        };
        let whole: Value = serde_json::from_str(&frame.to_text()).expect("valid JSON");
        let params: Value = serde_json::from_slice(&params).expect("valid JSON");
        assert_eq!(params, whole["params"]);
        assert_eq!(Notice::new("1", None).cursor(), None);
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
}
