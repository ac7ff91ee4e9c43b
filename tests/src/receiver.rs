//! A webhook receiver: a real HTTP server on 127.0.0.1 that records every
//! delivery and checks its signature as docs/src/api.md tells a receiver
//! to (HMAC-SHA256 over `<timestamp>.<body>`), and answers as the test
//! scripts it: a status (with `Retry-After`), an answer slower than the
//! server's timeout, a connection closed without an answer, or nobody
//! listening at all. A streaming receiver (a benchmark's) keeps nothing
//! and hands each body on as it comes.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::Value;
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::{TIMEOUT, WsClient};

/// How the receiver answers one request.
#[derive(Clone, Debug)]
pub enum Answer {
    Status(u16),
    /// 429 with `Retry-After: <seconds>`.
    RetryAfter(u64),
    /// 200, after this long.
    Late(Duration),
    /// The connection closed, no answer.
    Close,
}

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub webhook: String,
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: Bytes,
    pub json: Value,
    pub at: Instant,
    /// How it was answered.
    pub answer: Answer,
}

impl Delivery {
    /// Whether its signature is `secret`'s over its timestamp and body,
    /// and the timestamp is within five minutes.
    pub fn signed_by(&self, secret: &str) -> bool {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let Ok(timestamp) = self.timestamp.parse::<u64>() else {
            return false;
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key");
        mac.update(self.timestamp.as_bytes());
        mac.update(b".");
        mac.update(&self.body);
        let expected = format!(
            "v1={}",
            alloy_primitives::hex::encode(mac.finalize().into_bytes())
        );
        now.abs_diff(timestamp) <= 300 && expected == self.signature
    }

    /// Whether it was answered 2xx.
    pub fn accepted(&self) -> bool {
        matches!(self.answer, Answer::Status(200..=299) | Answer::Late(_))
    }
}

#[derive(Default)]
struct Shared {
    deliveries: Mutex<Vec<Delivery>>,
    /// Answers for the next requests, first first; then 200.
    script: Mutex<VecDeque<Answer>>,
    /// Where a streaming receiver hands each body as it comes (a
    /// benchmark's): none is kept.
    stream: Option<mpsc::UnboundedSender<(Instant, Bytes)>>,
}

/// The receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    /// Bumped at each request.
    arrived: watch::Receiver<usize>,
    arrivals: watch::Sender<usize>,
    /// Cancelled to take the receiver down: its listener and every
    /// connection close.
    up: CancellationToken,
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Self> {
        Self::with(Shared::default()).await
    }

    /// A receiver that keeps nothing and answers 200 to every request,
    /// handing each body, with when it came, to the returned channel.
    pub async fn streaming() -> anyhow::Result<(Self, mpsc::UnboundedReceiver<(Instant, Bytes)>)> {
        let (stream, bodies) = mpsc::unbounded_channel();
        let receiver = Self::with(Shared {
            stream: Some(stream),
            ..Shared::default()
        })
        .await?;
        Ok((receiver, bodies))
    }

    async fn with(shared: Shared) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the receiver")?;
        let addr = listener.local_addr()?;
        let (arrivals, arrived) = watch::channel(0);
        let receiver = Self {
            addr,
            shared: Arc::new(shared),
            arrived,
            arrivals,
            up: CancellationToken::new(),
        };
        receiver.serve(listener);
        Ok(receiver)
    }

    /// `http://127.0.0.1:<port>/hook`.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn serve(&self, listener: TcpListener) {
        let shared = self.shared.clone();
        let arrivals = self.arrivals.clone();
        let up = self.up.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = up.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                let arrivals = arrivals.clone();
                let up = up.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        answer(shared.clone(), arrivals.clone(), request)
                    });
                    let connection = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    tokio::select! {
                        _ = connection => {}
                        () = up.cancelled() => {}
                    }
                });
            }
        });
    }

    /// Answers the next requests so, then 200.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.shared.script.lock().expect("lock").extend(answers);
    }

    /// Takes the receiver down: the port refuses connections, and open
    /// ones close.
    pub fn down(&mut self) {
        self.up.cancel();
    }

    /// Listens again on the same port.
    pub async fn up(&mut self) -> anyhow::Result<()> {
        let listener = TcpListener::bind(self.addr)
            .await
            .context("binding the receiver again")?;
        self.up = CancellationToken::new();
        self.serve(listener);
        Ok(())
    }

    /// Every request so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.deliveries.lock().expect("lock").clone()
    }

    /// Waits until `done` holds of the requests so far.
    pub async fn wait_for(&mut self, what: &str, mut done: impl FnMut(&[Delivery]) -> bool) {
        let waited = tokio::time::timeout(TIMEOUT * 2, async {
            loop {
                if done(&self.deliveries()) {
                    return;
                }
                if self.arrived.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(waited.is_ok(), "the receiver waited in vain for {what}");
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.up.cancel();
    }
}

/// Closes the connection without an answer (hyper drops it on a service
/// error).
#[derive(Debug)]
struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("closed by the test")
    }
}

impl std::error::Error for Closed {}

async fn answer(
    shared: Arc<Shared>,
    arrivals: watch::Sender<usize>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Closed> {
    let respond = |status: u16| {
        Response::builder()
            .status(StatusCode::from_u16(status).expect("a status"))
            .body(Full::new(Bytes::from_static(b"recorded")))
            .expect("a response")
    };
    let (head, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Err(Closed),
    };
    // A benchmark's receiver reads nothing but the body: it shares the
    // machine with the server it measures.
    if let Some(stream) = &shared.stream {
        let _ = stream.send((Instant::now(), body));
        return Ok(respond(200));
    }
    let header = |name: &str| {
        head.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (webhook, id, timestamp, signature) = (
        header("x-chainsieve-webhook"),
        header("x-chainsieve-delivery"),
        header("x-chainsieve-timestamp"),
        header("x-chainsieve-signature"),
    );
    let answer = shared
        .script
        .lock()
        .expect("lock")
        .pop_front()
        .unwrap_or(Answer::Status(200));
    shared.deliveries.lock().expect("lock").push(Delivery {
        webhook,
        id,
        timestamp,
        signature,
        json: serde_json::from_slice(&body).unwrap_or(Value::Null),
        body,
        at: Instant::now(),
        answer: answer.clone(),
    });
    arrivals.send_modify(|count| *count += 1);
    match answer {
        Answer::Status(status) => Ok(respond(status)),
        Answer::RetryAfter(seconds) => {
            let mut response = respond(429);
            response.headers_mut().insert(
                "retry-after",
                seconds.to_string().parse().expect("a header value"),
            );
            Ok(response)
        }
        Answer::Late(delay) => {
            tokio::time::sleep(delay).await;
            Ok(respond(200))
        }
        Answer::Close => Err(Closed),
    }
}

/// The notifications of `webhook`'s deliveries, each delivery once (by
/// its id, the first time it came), in the order they came; every one of
/// them checked to carry `secret`'s signature, and every try of one id to
/// carry the same body.
pub fn delivered(deliveries: &[Delivery], webhook: &str, secret: &str) -> Vec<Value> {
    let mut seen: Vec<(&str, &Bytes)> = Vec::new();
    let mut notifications = Vec::new();
    for delivery in deliveries.iter().filter(|d| d.webhook == webhook) {
        assert!(
            delivery.signed_by(secret),
            "delivery {} carries a valid signature",
            delivery.id
        );
        assert_eq!(delivery.json["delivery"], delivery.id.as_str());
        if let Some((_, body)) = seen.iter().find(|(id, _)| *id == delivery.id) {
            assert_eq!(
                *body, &delivery.body,
                "every try of {} is the same",
                delivery.id
            );
            continue;
        }
        seen.push((&delivery.id, &delivery.body));
        let batch = delivery.json["notifications"]
            .as_array()
            .expect("notifications");
        assert_eq!(
            batch.last().map(|last| &last["cursor"]),
            Some(&Value::String(delivery.id.clone())),
            "a delivery's id is its last cursor"
        );
        notifications.extend(batch.iter().cloned());
    }
    notifications
}

/// Makes a webhook over `ws` to `url` of `subscribe` (`eth_subscribe`'s
/// params), batched as `batch` (`Null`: the default); (id, secret).
pub async fn create(
    ws: &mut WsClient,
    url: &str,
    subscribe: Value,
    batch: Value,
) -> (String, String) {
    let mut request = serde_json::json!({"url": url, "subscribe": subscribe});
    if !batch.is_null() {
        request["batch"] = batch;
    }
    let created = ws
        .call("webhook_create", serde_json::json!([request]))
        .await
        .expect("call");
    let text = |key: &str| {
        created["result"][key]
            .as_str()
            .unwrap_or_else(|| panic!("webhook_create answered {created}"))
            .to_string()
    };
    (text("id"), text("secret"))
}

/// The block numbers of a `newHeads` webhook's deliveries, each once,
/// checked to chain.
pub fn head_numbers(deliveries: &[Delivery], webhook: &str, secret: &str) -> Vec<u64> {
    let heads: Vec<Value> = delivered(deliveries, webhook, secret)
        .into_iter()
        .map(|params| params["result"].clone())
        .collect();
    crate::chained_numbers(&heads)
}
