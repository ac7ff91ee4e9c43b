//! A JSON-RPC 2.0 client over one WebSocket to a node: calls, single or
//! batched, correlated by id, and `eth_subscription` notifications routed to
//! one queue. One task owns the socket; callers hold a cheap [`NodeClient`].
//!
//! Results are handed over as raw JSON text: the envelope is scanned
//! without building values, and each result is parsed once, by its caller,
//! straight into the type it needs.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// How long a call may wait for its answer before the connection is
/// considered dead.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Requests waiting for the socket task; a node that stops reading pushes
/// back on callers instead of growing memory.
const OUTGOING_QUEUE: usize = 256;

/// How long opening the WebSocket to a node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes read from the node's socket at a time. tungstenite zeroes its
/// whole read buffer before every read, a read that finds nothing too: at
/// its default (128 KiB) that was 6% of the CPU a forwarded call costs
/// (perf, the forwarding benchmark). A block of a few megabytes still
/// arrives in one message, in more reads.
const READ_BUFFER: usize = 16 << 10;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("connecting to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the node connection closed")]
    Closed,
    #[error("{method} got no answer within {}s", CALL_TIMEOUT.as_secs())]
    Timeout { method: String },
    /// The node answered with a JSON-RPC error; `data` as it sent it.
    #[error("{method}: node error {code}: {message}")]
    Rpc {
        method: String,
        code: i64,
        message: String,
        data: Option<Box<RawValue>>,
    },
    #[error("{method}: unexpected answer: {reason}")]
    Decode { method: String, reason: String },
}

/// A subscription notification: which subscription, and its `result`.
#[derive(Debug)]
pub struct Notification {
    pub subscription: String,
    pub result: Box<RawValue>,
}

/// One call of a batch.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Cow<'static, str>,
    pub params: serde_json::Value,
}

impl Call {
    pub fn new(method: &'static str, params: serde_json::Value) -> Self {
        Self {
            method: Cow::Borrowed(method),
            params,
        }
    }

    /// A call of a method named at run time (a client's, forwarded).
    pub fn named(method: String, params: serde_json::Value) -> Self {
        Self {
            method: Cow::Owned(method),
            params,
        }
    }
}

type Reply = Result<Box<RawValue>, ErrorObject>;

/// A frame to write and the ids it expects answers for.
struct Outgoing {
    text: String,
    replies: Vec<(u64, oneshot::Sender<Reply>)>,
}

/// A handle on one node connection. Dropping every handle closes it.
#[derive(Debug)]
pub struct NodeClient {
    /// Frames for the socket task; see [`OUTGOING_QUEUE`].
    outgoing: mpsc::Sender<Outgoing>,
    next_id: AtomicU64,
}

impl NodeClient {
    /// Opens the socket and starts its task. Notifications arrive on the
    /// returned receiver, which ends when the connection does.
    pub async fn connect(
        url: &str,
    ) -> Result<(NodeClient, mpsc::UnboundedReceiver<Notification>), NodeError> {
        let failed = |reason: String| NodeError::Connect {
            url: url.to_string(),
            reason,
        };
        // A node that takes the TCP connection but never answers the
        // upgrade (or a black-holed address) must not hold a caller forever.
        let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER);
        // Nagle off: a request written while the last is unacknowledged
        // would otherwise wait for the node's delayed ACK (40 ms on Linux;
        // measured: a block's fetch 45 ms late at the median).
        let connecting = tokio_tungstenite::connect_async_with_config(url, Some(config), true);
        let (socket, _) = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| failed(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
            .map_err(|e| failed(e.to_string()))?;
        let (outgoing, outgoing_rx) = mpsc::channel(OUTGOING_QUEUE);
        // Unbounded on purpose: the socket task must never wait on the
        // consumer, or a consumer awaiting a call would wait on itself. The
        // consumer drains it between calls; its backlog is what the node
        // sends while one block is being fetched.
        let (notify, notifications) = mpsc::unbounded_channel();
        tokio::spawn(drive(socket, outgoing_rx, notify));
        Ok((
            NodeClient {
                outgoing,
                next_id: AtomicU64::new(1),
            },
            notifications,
        ))
    }

    /// Whether the socket task has ended: calls would fail at once.
    pub fn is_closed(&self) -> bool {
        self.outgoing.is_closed()
    }

    /// Calls `method` and parses its result as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: serde_json::Value,
    ) -> Result<T, NodeError> {
        single(method, self.batch(&[Call::new(method, params)]).await?)
    }

    /// Sends `calls` as one JSON-RPC batch (one frame, one round trip) and
    /// returns their raw results in order. Any error answer fails the
    /// whole batch: callers retry or reconnect as a unit.
    pub async fn batch(&self, calls: &[Call]) -> Result<Vec<Box<RawValue>>, NodeError> {
        let mut requests = Vec::with_capacity(calls.len());
        let mut replies = Vec::with_capacity(calls.len());
        let mut waiting = Vec::with_capacity(calls.len());
        for call in calls {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            requests.push(serde_json::json!({
                "jsonrpc": "2.0", "id": id, "method": call.method, "params": call.params,
            }));
            let (tx, rx) = oneshot::channel();
            replies.push((id, tx));
            waiting.push(rx);
        }
        let text = if requests.len() == 1 {
            requests[0].to_string()
        } else {
            serde_json::Value::Array(requests).to_string()
        };
        self.outgoing
            .send(Outgoing { text, replies })
            .await
            .map_err(|_| NodeError::Closed)?;
        let answers = async {
            let mut results = Vec::with_capacity(waiting.len());
            for (call, rx) in calls.iter().zip(waiting) {
                match rx.await.map_err(|_| NodeError::Closed)? {
                    Ok(raw) => results.push(raw),
                    Err(ErrorObject {
                        code,
                        message,
                        data,
                    }) => {
                        return Err(NodeError::Rpc {
                            method: call.method.to_string(),
                            code,
                            message,
                            data,
                        });
                    }
                }
            }
            Ok(results)
        };
        tokio::time::timeout(CALL_TIMEOUT, answers)
            .await
            .map_err(|_| NodeError::Timeout {
                method: calls.first().map_or("batch", |c| &c.method).to_string(),
            })?
    }
}

/// Parses the result of a one-call batch.
pub fn single<T: DeserializeOwned>(
    method: &str,
    mut results: Vec<Box<RawValue>>,
) -> Result<T, NodeError> {
    let raw = results.pop().ok_or(NodeError::Closed)?;
    decode(method, &raw)
}

/// Parses one raw result.
pub fn decode<T: DeserializeOwned>(method: &str, raw: &RawValue) -> Result<T, NodeError> {
    serde_json::from_str(raw.get()).map_err(|e| NodeError::Decode {
        method: method.to_string(),
        reason: e.to_string(),
    })
}

/// What a node sends: an answer (`id` with `result` or `error`) or a
/// notification (`method` + `params`). Fields are borrowed from the frame.
#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(default)]
    id: Option<u64>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorObject>,
    #[serde(borrow, default)]
    params: Option<NotificationParams<'a>>,
}

#[derive(Deserialize)]
struct ErrorObject {
    code: i64,
    #[serde(default)]
    message: String,
    /// Kept as the node wrote it (a revert's data, byte for byte; an
    /// explicit `null` too).
    #[serde(default, deserialize_with = "present")]
    data: Option<Box<RawValue>>,
}

/// `Some` for a present field, even `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct NotificationParams<'a> {
    subscription: &'a str,
    #[serde(borrow)]
    result: &'a RawValue,
}

/// The socket task: writes queued frames, routes what comes back. Ends when
/// the socket fails or closes, or every handle is dropped; pending callers
/// then see [`NodeError::Closed`].
async fn drive<S>(
    socket: S,
    mut outgoing: mpsc::Receiver<Outgoing>,
    notify: mpsc::UnboundedSender<Notification>,
) where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + futures_util::Sink<Message>
        + Unpin,
{
    let (mut sink, mut stream) = socket.split();
    let mut pending: HashMap<u64, oneshot::Sender<Reply>> = HashMap::new();
    loop {
        tokio::select! {
            request = outgoing.recv() => {
                let Some(request) = request else { break };
                pending.extend(request.replies);
                if sink.send(Message::text(request.text)).await.is_err() {
                    break;
                }
            }
            frame = stream.next() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text.to_string(),
                    Some(Ok(Message::Binary(bytes))) => match String::from_utf8(bytes.to_vec()) {
                        Ok(text) => text,
                        Err(_) => {
                            tracing::warn!("node sent a binary frame that is not UTF-8; ignored");
                            continue;
                        }
                    },
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => continue,
                };
                route(&text, &mut pending, &notify);
            }
        }
    }
    let _ = sink.close().await;
}

/// Dispatches one frame: a single message or a batch of them.
fn route(
    text: &str,
    pending: &mut HashMap<u64, oneshot::Sender<Reply>>,
    notify: &mpsc::UnboundedSender<Notification>,
) {
    let messages: Vec<Incoming<'_>> = if text.trim_start().starts_with('[') {
        match serde_json::from_str(text) {
            Ok(messages) => messages,
            Err(error) => {
                tracing::warn!(%error, "node sent an unreadable batch; ignored");
                return;
            }
        }
    } else {
        match serde_json::from_str(text) {
            Ok(message) => vec![message],
            Err(error) => {
                tracing::warn!(%error, "node sent an unreadable message; ignored");
                return;
            }
        }
    };
    for message in messages {
        if let Some(params) = message.params {
            let _ = notify.send(Notification {
                subscription: params.subscription.to_string(),
                result: params.result.to_owned(),
            });
            continue;
        }
        let Some(reply) = message.id.and_then(|id| pending.remove(&id)) else {
            continue;
        };
        let answer = match (message.error, message.result) {
            (Some(error), _) => Err(error),
            (None, Some(result)) => Ok(result.to_owned()),
            // serde reads `"result": null` as an absent field.
            (None, None) => Ok(RawValue::NULL.to_owned()),
        };
        let _ = reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's error data is kept as written: a value, an explicit null,
    /// or nothing.
    #[test]
    fn error_data_is_kept_as_written() {
        let data = |text: &str| {
            serde_json::from_str::<ErrorObject>(text)
                .expect("an error object")
                .data
                .map(|raw| raw.get().to_string())
        };
        assert_eq!(
            data(r#"{"code":3,"message":"execution reverted","data":"0x00cafe"}"#).as_deref(),
            Some(r#""0x00cafe""#)
        );
        assert_eq!(
            data(r#"{"code":-32000,"message":"x","data":null}"#).as_deref(),
            Some("null")
        );
        assert_eq!(data(r#"{"code":-32000,"message":"x"}"#), None);
    }
}
