//! The tests' JSON-RPC WebSocket client. Its socket is read at all times
//! by a task of its own, as a client library's is: the server's pings are
//! answered while the test waits on something else, and its close (on
//! shutdown) is echoed at once, so a server stopping with an idle client
//! connected does not wait out its close timeout for the echo.

use std::collections::VecDeque;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{self, Bytes, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::TIMEOUT;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A JSON-RPC WebSocket client that keeps notifications it has not been
/// asked for yet.
pub struct WsClient {
    /// Frames to send, to the task that owns the socket; closed when the
    /// client is dropped, which closes the connection.
    outgoing: mpsc::UnboundedSender<Message>,
    /// Every frame received, in order, from that task; unbounded like a
    /// library's buffer: a test reads what it asked for, whenever it
    /// likes. Ends when the connection does.
    incoming: mpsc::UnboundedReceiver<Result<Message, tungstenite::Error>>,
    next_id: u64,
    notifications: VecDeque<Value>,
}

impl WsClient {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let (socket, _) = tokio_tungstenite::connect_async(url)
            .await
            .with_context(|| format!("connecting {url}"))?;
        let (outgoing, to_send) = mpsc::unbounded_channel();
        let (received, incoming) = mpsc::unbounded_channel();
        tokio::spawn(pump(socket, to_send, received));
        Ok(Self {
            outgoing,
            incoming,
            next_id: 1,
            notifications: VecDeque::new(),
        })
    }

    /// Sends raw text.
    pub async fn send_text(&mut self, text: &str) {
        self.send(Message::text(text));
    }

    pub async fn send_binary(&mut self, bytes: Vec<u8>) {
        self.send(Message::binary(bytes));
    }

    /// Hands `frame` to the socket's task. A connection that has ended
    /// drops it: the next read says how the connection ended.
    fn send(&self, frame: Message) {
        let _ = self.outgoing.send(frame);
    }

    /// The next JSON message that is not a notification.
    pub async fn next_response(&mut self) -> anyhow::Result<Value> {
        loop {
            let message = self.next_json().await?;
            if message.get("method").and_then(Value::as_str) == Some("eth_subscription") {
                self.notifications.push_back(message);
            } else {
                return Ok(message);
            }
        }
    }

    /// Notifications that arrived before the last response, kept for
    /// `next_notification`.
    pub fn buffered_notifications(&self) -> usize {
        self.notifications.len()
    }

    /// Forgets the notifications that arrived before the last response, so
    /// what is read next came after it.
    pub fn discard_buffered(&mut self) {
        self.notifications.clear();
    }

    /// The next text or binary message as JSON, within [`TIMEOUT`] (pings
    /// and pongs meanwhile do not extend it).
    async fn next_json(&mut self) -> anyhow::Result<Value> {
        Ok(serde_json::from_slice(&self.next_payload().await?)?)
    }

    /// The next text or binary message's bytes, unread, within
    /// [`TIMEOUT`]: for a benchmark's client, which reads one field of
    /// each and should cost the machine it shares no more than that.
    pub async fn next_payload(&mut self) -> anyhow::Result<Bytes> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let message = tokio::time::timeout_at(deadline, self.incoming.recv())
                .await
                .context("timed out waiting for a message")?
                .context("connection ended")??;
            match message {
                Message::Text(_) | Message::Binary(_) => return Ok(message.into_data()),
                Message::Close(frame) => bail!("connection closed: {frame:?}"),
                _ => continue,
            }
        }
    }

    /// Calls `method` and returns the whole response object.
    pub async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_text(&request.to_string()).await;
        let response = self.next_response().await?;
        if response["id"] != json!(id) {
            bail!("response {response} does not answer request {id}");
        }
        Ok(response)
    }

    /// Subscribes and returns the subscription id; fails on an error.
    pub async fn subscribe(&mut self, params: Value) -> anyhow::Result<String> {
        let response = self.call("eth_subscribe", params.clone()).await?;
        response["result"]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("eth_subscribe {params} failed: {response}"))
    }

    /// The next notification (of any subscription): (subscription, result).
    pub async fn next_notification(&mut self) -> anyhow::Result<(String, Value)> {
        let params = self.next_notification_params().await?;
        let subscription = params["subscription"]
            .as_str()
            .context("notification without subscription")?;
        Ok((subscription.to_string(), params["result"].clone()))
    }

    /// The `params` of the next notification: `subscription` and `result`,
    /// or `error` when the server ended the subscription.
    pub async fn next_notification_params(&mut self) -> anyhow::Result<Value> {
        let message = match self.notifications.pop_front() {
            Some(message) => message,
            None => {
                let message = self.next_json().await?;
                if message.get("method").and_then(Value::as_str) != Some("eth_subscription") {
                    bail!("unexpected non-notification {message}");
                }
                message
            }
        };
        Ok(message["params"].clone())
    }

    /// Reads notifications until the `newHeads` subscription `heads` tells
    /// of block `number`; the others received meanwhile are dropped.
    pub async fn until_head(&mut self, heads: &str, number: u64) {
        loop {
            let (subscription, head) = self.next_notification().await.expect("a head in time");
            if subscription == heads && crate::quantity(&head["number"]) == number {
                return;
            }
        }
    }

    /// Collects notifications until `done` has seen `count` for
    /// subscription `until`; returns every notification received meanwhile.
    pub async fn collect_until(
        &mut self,
        until: &str,
        count: usize,
    ) -> anyhow::Result<Vec<(String, Value)>> {
        let mut seen = 0;
        let mut all = Vec::new();
        while seen < count {
            let (subscription, result) = self.next_notification().await?;
            if subscription == until {
                seen += 1;
            }
            all.push((subscription, result));
        }
        Ok(all)
    }

    /// Hands the connection to a task that forwards the `params` of every
    /// notification, in order, until the connection ends.
    pub fn forward_notifications(mut self) -> mpsc::UnboundedReceiver<Value> {
        let (forward, notifications) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(params) = self.next_notification_params().await {
                if forward.send(params).is_err() {
                    return;
                }
            }
        });
        notifications
    }

    /// Waits for the server to close the connection; returns (code, reason).
    /// The socket's task has echoed the close already, as a client library
    /// does.
    pub async fn closed(&mut self) -> anyhow::Result<(u16, String)> {
        loop {
            let message = tokio::time::timeout(TIMEOUT, self.incoming.recv())
                .await
                .context("timed out waiting for the close")?;
            match message {
                Some(Ok(Message::Close(Some(frame)))) => {
                    return Ok((frame.code.into(), frame.reason.to_string()));
                }
                Some(Ok(Message::Close(None))) | None => bail!("closed without a close frame"),
                Some(Ok(_)) => continue,
                Some(Err(error)) => bail!("connection failed without a close frame: {error}"),
            }
        }
    }
}

/// Owns `socket` for its client: sends what `to_send` brings, and reads
/// at all times into `received`. Reading makes tungstenite queue the
/// answers to a ping and to a close, and a flush sends them. The client
/// dropped, it closes the connection.
async fn pump(
    mut socket: Socket,
    mut to_send: mpsc::UnboundedReceiver<Message>,
    received: mpsc::UnboundedSender<Result<Message, tungstenite::Error>>,
) {
    loop {
        tokio::select! {
            frame = to_send.recv() => {
                let Some(frame) = frame else {
                    let _ = socket.close(None).await;
                    return;
                };
                if let Err(error) = socket.send(frame).await {
                    let _ = received.send(Err(error));
                    return;
                }
            }
            message = socket.next() => {
                let Some(message) = message else { return };
                if let Ok(Message::Ping(_) | Message::Close(_)) = &message {
                    // The server may have gone already: nothing to answer.
                    let _ = socket.flush().await;
                }
                let ended = message.is_err();
                let _ = received.send(message);
                if ended {
                    return;
                }
            }
        }
    }
}
