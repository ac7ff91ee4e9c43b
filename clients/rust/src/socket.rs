//! The connection's task: the one owner of the socket and of the
//! [`Session`]. It reads alloy's requests and the server's frames, hands
//! each to the session and writes what comes out; when the socket drops
//! (a reset, the server restarting, a heartbeat missed) it opens another
//! after a backoff with jitter and tells the session, which makes every
//! subscription again. alloy never sees the drop, so its own reconnection
//! (which subscribes again from "now") never runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use alloy_pubsub::ConnectionInterface;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::session::{Output, Session};
use crate::{Options, Status};

pub(crate) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens the socket, within `timeout`.
pub(crate) async fn open(url: &str, timeout: Duration) -> Result<Socket, String> {
    match tokio::time::timeout(timeout, tokio_tungstenite::connect_async(url)).await {
        Ok(Ok((socket, _))) => Ok(socket),
        Ok(Err(error)) => Err(format!("connecting to {url}: {error}")),
        Err(_) => Err(format!("connecting to {url}: no handshake in {timeout:?}")),
    }
}

/// The task's state besides the session: the socket, if open, and when
/// to try again if not.
struct Connection {
    url: String,
    options: Arc<Options>,
    status: Arc<Status>,
    socket: Option<Socket>,
    /// Tries since the socket dropped.
    attempt: u32,
    /// When to try opening it, while it is closed.
    reopen_at: Option<Instant>,
    /// The last frame read: a socket silent for a ping interval and its
    /// timeout is dead.
    heard: Instant,
}

impl Connection {
    fn dropped(&mut self, why: &str) {
        if self.socket.take().is_some() {
            tracing::info!(url = %self.url, why, "chainsieve-client: connection lost; reconnecting");
        }
        self.reopen_at = Some(Instant::now() + self.options.backoff.delay(0, rand::random()));
        self.attempt = 0;
    }

    async fn reopen(&mut self, session: &mut Session, out: &mut Output) {
        match open(&self.url, self.options.connect_timeout).await {
            Ok(socket) => {
                self.socket = Some(socket);
                self.reopen_at = None;
                self.heard = Instant::now();
                self.status.reconnections.fetch_add(1, Ordering::Relaxed);
                session.reconnected(out);
            }
            Err(error) => {
                tracing::info!(url = %self.url, %error, "chainsieve-client: reconnecting");
                self.attempt = self.attempt.saturating_add(1);
                let delay = self.options.backoff.delay(self.attempt, rand::random());
                self.reopen_at = Some(Instant::now() + delay);
            }
        }
    }

    /// Writes what the session has for the server; a failed write drops
    /// the socket (what was in flight goes again on the next one).
    async fn write(&mut self, texts: Vec<String>) {
        let Some(socket) = &mut self.socket else {
            return;
        };
        for text in texts {
            if let Err(error) = socket.feed(Message::text(text)).await {
                self.dropped(&error.to_string());
                return;
            }
        }
        if let Err(error) = socket.flush().await {
            self.dropped(&error.to_string());
        }
    }
}

/// Runs until alloy drops its client (its frontend closes).
pub(crate) async fn run(
    url: String,
    socket: Socket,
    mut interface: ConnectionInterface,
    options: Arc<Options>,
    status: Arc<Status>,
) {
    let mut session = Session::new(options.clone());
    let mut connection = Connection {
        url,
        options: options.clone(),
        status: status.clone(),
        socket: Some(socket),
        attempt: 0,
        reopen_at: None,
        heard: Instant::now(),
    };
    let beat = options
        .heartbeat
        .map_or(Duration::from_secs(3600), |h| h.interval);
    let mut heartbeat = tokio::time::interval_at(Instant::now() + beat, beat);
    let mut out = Output::default();
    loop {
        let retry_at = session.next_retry().map(Instant::from_std);
        // In order: no random draw per frame; the application's requests
        // are few, the frames many.
        tokio::select! {
            biased;
            request = interface.recv_from_frontend() => match request {
                Some(request) => session.on_request(request.get(), &mut out),
                None => {
                    if let Some(mut socket) = connection.socket.take() {
                        let _ = socket.close(None).await;
                    }
                    return;
                }
            },
            frame = next_frame(&mut connection.socket) => {
                let now = Instant::now();
                connection.heard = now;
                match frame {
                    Some(Ok(Message::Text(text))) => {
                        session.on_message(text.as_str(), now.into_std(), &mut out);
                    }
                    Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                        Ok(text) => session.on_message(text, now.into_std(), &mut out),
                        Err(_) => tracing::warn!("chainsieve-client: a binary frame that is no text"),
                    },
                    Some(Ok(Message::Close(_))) | None => connection.dropped("closed"),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => connection.dropped(&error.to_string()),
                }
            }
            () = at(connection.reopen_at) => {
                connection.reopen(&mut session, &mut out).await;
            }
            () = at(retry_at) => {
                session.retry_due(std::time::Instant::now(), &mut out);
            }
            _ = heartbeat.tick(), if options.heartbeat.is_some() && connection.socket.is_some() => {
                let timeout = options.heartbeat.map_or(Duration::ZERO, |h| h.timeout);
                if connection.heard.elapsed() > beat + timeout {
                    connection.dropped("no frame within the heartbeat's interval and timeout");
                } else if let Some(socket) = &mut connection.socket
                    && let Err(error) = socket.send(Message::Ping(Default::default())).await
                {
                    connection.dropped(&error.to_string());
                }
            }
        }
        for item in out.to_alloy.drain(..) {
            if interface.send_to_frontend(item).is_err() {
                return;
            }
        }
        for refusal in out.refusals.drain(..) {
            (options.on_error)(refusal);
        }
        if !out.to_server.is_empty() {
            let texts = std::mem::take(&mut out.to_server);
            connection.write(texts).await;
        }
        status
            .subscriptions
            .store(session.subscription_count(), Ordering::Relaxed);
    }
}

/// Once `deadline` has passed; never without one (a timer is made only
/// when there is one: the loop turns once per frame).
async fn at(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The socket's next frame; never, while there is none.
async fn next_frame(
    socket: &mut Option<Socket>,
) -> Option<Result<Message, tokio_tungstenite::tungstenite::Error>> {
    match socket {
        Some(socket) => socket.next().await,
        None => std::future::pending().await,
    }
}
