//! Nodes that misbehave on command: [`FaultyNode`] is a JSON-RPC WebSocket
//! proxy in front of a real node (anvil) that relays every client
//! connection frame by frame and injects faults at any moment — it hangs,
//! lags blocks behind, drops or refuses connections, answers wrong block
//! bodies or short log lists, refuses methods — so the server's reading of
//! several nodes per chain can be tested against nodes that fail the way
//! real ones do.
//!
//! Each client connection gets its own upstream connection. Requests, single
//! or batched, are answered by id; subscriptions pass through. Faults are
//! shared by every connection and take effect on the next message. Nothing
//! waits on time: held head notifications are released when later heads
//! arrive.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use alloy_primitives::U256;
use anyhow::Context;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

/// The prefix of the ids of the proxy's own requests on an upstream
/// connection (its `newHeads` subscription and its look-ups); their answers
/// never reach the client.
const PRIVATE: &str = "chainsieve-faulty-node/";

/// How long a closing connection waits for the client's close frame before
/// it closes the TCP connection anyway.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The methods whose answers depend on the head a lagging node shows.
const LAGGED: [&str; 5] = [
    "eth_blockNumber",
    "eth_getBlockByNumber",
    "eth_getBlockByHash",
    "eth_getBlockReceipts",
    "eth_getLogs",
];

/// The faults in force, shared by every connection.
#[derive(Clone, Debug, Default)]
struct Faults {
    stalled: bool,
    lag: u64,
    corrupt_bodies: bool,
    corrupt_logs: bool,
    refused: BTreeSet<String>,
}

struct Shared {
    upstream: String,
    faults: watch::Sender<Faults>,
    /// Requests per method; a watch, so a test can wait for a count.
    requests: watch::Sender<HashMap<String, u64>>,
    /// Cancelled (and replaced) by [`FaultyNode::drop_connections`]: every
    /// connection open then closes.
    dropping: Mutex<CancellationToken>,
}

/// The accepting task while the node listens.
struct Listening {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// A fault-injecting proxy in front of one upstream node; everything stops
/// when it is dropped.
pub struct FaultyNode {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listening: Mutex<Option<Listening>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A listening socket on `addr` that may take a port its closed
/// connections still hold (TIME_WAIT), as a restarted node does.
fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let socket = TcpSocket::new_v4().context("a TCP socket")?;
    socket.set_reuseaddr(true).context("SO_REUSEADDR")?;
    socket
        .bind(addr)
        .with_context(|| format!("binding {addr}"))?;
    socket
        .listen(1024)
        .with_context(|| format!("listening on {addr}"))
}

impl FaultyNode {
    /// Listens on 127.0.0.1:0 and relays to `upstream` (ws URL).
    pub async fn start(upstream: &str) -> anyhow::Result<Self> {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let addr = listener.local_addr().context("the bound address")?;
        let (faults, _) = watch::channel(Faults::default());
        let node = Self {
            addr,
            shared: Arc::new(Shared {
                upstream: upstream.to_string(),
                faults,
                requests: watch::Sender::new(HashMap::new()),
                dropping: Mutex::new(CancellationToken::new()),
            }),
            listening: Mutex::new(None),
        };
        node.listen(listener);
        Ok(node)
    }

    fn listen(&self, listener: TcpListener) {
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, self.shared.clone(), stop.clone()));
        *lock(&self.listening) = Some(Listening { stop, task });
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// Relays faithfully again (clears stall, lag, corruption, refusals).
    /// Head notifications held by a lag are released, in order.
    pub fn heal(&self) {
        self.shared
            .faults
            .send_modify(|faults| *faults = Faults::default());
    }

    /// Stops relaying in both directions without closing anything: requests
    /// get no answer, subscriptions get no notifications (a hung node).
    /// Held messages are dropped, not replayed. (WebSocket pings are still
    /// answered: the connection itself stays up.)
    pub fn stall(&self) {
        self.shared
            .faults
            .send_modify(|faults| faults.stalled = true);
    }

    /// Appears `blocks` blocks behind the upstream (0: not behind).
    ///
    /// `newHeads` (and `logs`) notifications of block N are held until the
    /// upstream head reaches N + `blocks`; `eth_blockNumber` answers
    /// upstream head − `blocks`; `eth_getBlockByNumber` of
    /// `latest`/`pending`/`safe`/`finalized` answers the block at upstream
    /// head − `blocks`; `eth_getBlockByNumber(n)` and `eth_getBlockByHash`
    /// of a block above that answer `null`, as `eth_getBlockReceipts` of
    /// one does (anvil's answer for a block it does not have); `eth_getLogs` of such a
    /// `blockHash` answers what anvil answers for a block it does not have
    /// (error -32000 `unknown block`), and logs of such blocks are left out
    /// of range queries. Batches are handled element by element. The
    /// upstream head is asked of the upstream (`eth_blockNumber`) for each
    /// such request, on the client's own upstream connection.
    pub fn lag(&self, blocks: u64) {
        self.shared.faults.send_modify(|faults| faults.lag = blocks);
    }

    /// Closes every open client connection (a close frame, 1001, then the
    /// TCP close) and keeps listening.
    pub fn drop_connections(&self) {
        let dropping = std::mem::take(&mut *lock(&self.shared.dropping));
        dropping.cancel();
    }

    /// Closes every connection (abruptly, as a dying process: no close
    /// frame) and stops listening (connections are refused: the port is
    /// closed) until [`FaultyNode::revive`]. Returns once the port is closed
    /// and every connection is gone.
    pub async fn kill(&self) {
        let listening = lock(&self.listening).take();
        if let Some(Listening { stop, task }) = listening {
            stop.cancel();
            if let Err(error) = task.await
                && error.is_panic()
            {
                std::panic::resume_unwind(error.into_panic());
            }
        }
    }

    /// Listens again on the same port after [`FaultyNode::kill`] (nothing
    /// to do if listening).
    pub async fn revive(&self) -> anyhow::Result<()> {
        if lock(&self.listening).is_some() {
            return Ok(());
        }
        let listener = bind(self.addr)?;
        self.listen(listener);
        Ok(())
    }

    /// Answers block bodies wrongly: in every `eth_getBlockByHash` /
    /// `eth_getBlockByNumber` answer with full transactions, the first
    /// transaction's `value` has its lowest bit flipped (its `input`'s last
    /// nibble if it has no `value`). The JSON stays well-formed and the
    /// block hash and `transactionsRoot` unchanged, so only a check of the
    /// transactions root catches it. Blocks without transactions, or with
    /// transaction hashes only, pass unchanged.
    pub fn corrupt_bodies(&self, on: bool) {
        self.shared
            .faults
            .send_modify(|faults| faults.corrupt_bodies = on);
    }

    /// In every `eth_getLogs` answer with logs, drops the last log, and in
    /// every `eth_getBlockReceipts` answer with logs, the last receipt's
    /// last log (so only a check against the header's bloom / receipts
    /// catches it).
    pub fn corrupt_logs(&self, on: bool) {
        self.shared
            .faults
            .send_modify(|faults| faults.corrupt_logs = on);
    }

    /// Answers `method` with a JSON-RPC error {-32601, "the method <m> does
    /// not exist/is not available"} without asking upstream.
    pub fn refuse(&self, method: &str) {
        self.shared.faults.send_modify(|faults| {
            faults.refused.insert(method.to_string());
        });
    }

    /// How many requests (batch elements count one each) of `method`
    /// reached this proxy, answered or not.
    pub fn requests(&self, method: &str) -> u64 {
        self.shared
            .requests
            .borrow()
            .get(method)
            .copied()
            .unwrap_or(0)
    }

    /// Waits (within the tests' timeout) until `count` requests of `method`
    /// have reached this proxy.
    pub async fn requested(&self, method: &str, count: u64) -> anyhow::Result<()> {
        let mut counts = self.shared.requests.subscribe();
        let reached =
            |counts: &HashMap<String, u64>| counts.get(method).copied().unwrap_or(0) >= count;
        tokio::time::timeout(crate::TIMEOUT, counts.wait_for(reached))
            .await
            .with_context(|| {
                format!(
                    "{count} {method} requests in time (got {})",
                    self.requests(method)
                )
            })?
            .context("the proxy is gone")?;
        Ok(())
    }
}

impl Drop for FaultyNode {
    fn drop(&mut self) {
        // Aborting the accepting task drops its set of connections, which
        // aborts them all.
        if let Some(Listening { stop, task }) = lock(&self.listening).take() {
            stop.cancel();
            task.abort();
        }
        lock(&self.shared.dropping).cancel();
    }
}

/// Accepts connections until `stop`, then closes the port and aborts every
/// connection.
async fn serve(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => {
                if let Ok((tcp, _)) = accepted {
                    let dropping = lock(&shared.dropping).clone();
                    connections.spawn(relay(tcp, shared.clone(), dropping));
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

type Client = WebSocketStream<TcpStream>;
type Upstream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One client connection, relayed to its own upstream connection.
async fn relay(tcp: TcpStream, shared: Arc<Shared>, dropping: CancellationToken) {
    // Nagle off both ways, as a node's own socket: the proxy adds no
    // delayed-ACK waits of its own.
    let _ = tcp.set_nodelay(true);
    let Ok(mut client) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let connecting =
        tokio_tungstenite::connect_async_with_config(shared.upstream.as_str(), None, true);
    let upstream = match connecting.await {
        Ok((upstream, _)) => upstream,
        Err(_) => {
            close(&mut client, frame(CloseCode::Error, "upstream unreachable")).await;
            return;
        }
    };
    let faults = shared.faults.subscribe();
    let connection = Connection {
        shared,
        faults,
        client,
        upstream,
        pending: HashMap::new(),
        batches: Vec::new(),
        subscriptions: HashMap::new(),
        private_heads: None,
        head: 0,
        held: VecDeque::new(),
        waiting: None,
        lookups: 0,
    };
    connection.run(dropping).await;
}

fn frame(code: CloseCode, reason: &str) -> Option<CloseFrame> {
    Some(CloseFrame {
        code,
        reason: reason.into(),
    })
}

/// Sends a close frame and waits (a little) for the client's, then lets the
/// TCP connection close.
async fn close(client: &mut Client, frame: Option<CloseFrame>) {
    if client.close(frame).await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(message)) = client.next().await {
            if message.is_close() {
                break;
            }
        }
    })
    .await;
}

/// Why a connection ends.
enum End {
    /// [`FaultyNode::drop_connections`].
    Dropped,
    /// The client closed.
    ClientClosed,
    /// The upstream closed, with its close frame if it sent one.
    UpstreamClosed(Option<CloseFrame>),
    /// A socket failed.
    Broken,
}

/// The subscriptions whose notifications belong to a block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Feed {
    Heads,
    Logs,
}

/// What to do with the answer to a forwarded request.
struct Pending {
    method: String,
    /// An `eth_subscribe` to this feed.
    feed: Option<Feed>,
    /// Leave out logs of blocks above this (a lagging node's head).
    logs_limit: Option<u64>,
}

/// A batch in which some elements were answered by the proxy: the answer
/// the upstream sends for the others is merged back in request order.
struct Batch {
    slots: Vec<Slot>,
}

enum Slot {
    Local(Value),
    Forwarded(String),
}

/// A client message held while the upstream is asked for its head (and the
/// numbers of blocks it names), for a lag.
struct Waiting {
    lookup: u64,
    requests: Vec<Value>,
    batch: bool,
    original: Message,
}

/// The upstream as a lagging node sees it.
struct View {
    /// The head the client may see: upstream head − lag.
    limit: u64,
    /// Block hash (lowercase) → its number upstream, `None` if unknown.
    numbers: HashMap<String, Option<u64>>,
}

impl View {
    /// Whether the block `hash` exists upstream but above the lagging head.
    fn above(&self, hash: &str) -> bool {
        matches!(self.numbers.get(&hash.to_lowercase()), Some(Some(n)) if *n > self.limit)
    }
}

enum Decision {
    /// Answered by the proxy.
    Answer(Value),
    /// Sent upstream (`rewritten` if it differs from what the client sent);
    /// `pending` keyed by the request id, `None` for a notification.
    Forward {
        request: Value,
        rewritten: bool,
        pending: Option<(String, Pending)>,
    },
}

struct Connection {
    shared: Arc<Shared>,
    faults: watch::Receiver<Faults>,
    client: Client,
    upstream: Upstream,
    /// Forwarded requests awaiting their answers, by id (as JSON text).
    pending: HashMap<String, Pending>,
    batches: Vec<Batch>,
    /// The client's block-bound subscriptions, by subscription id.
    subscriptions: HashMap<String, Feed>,
    /// The proxy's own `newHeads` subscription (to know the upstream head).
    private_heads: Option<String>,
    /// The highest block the upstream is known to have.
    head: u64,
    /// Notifications held by a lag: (block number, message), in order.
    held: VecDeque<(u64, Message)>,
    /// The client message waiting on a look-up; the client is not read
    /// meanwhile, so requests stay in order.
    waiting: Option<Waiting>,
    lookups: u64,
}

fn private_id(suffix: &str) -> Value {
    json!(format!("{PRIVATE}{suffix}"))
}

/// The part after [`PRIVATE`] of a proxy's own request id.
fn private_suffix(id: Option<&Value>) -> Option<&str> {
    id?.as_str()?.strip_prefix(PRIVATE)
}

/// A `0x` quantity as a number.
fn quantity(value: &Value) -> Option<u64> {
    let text = value.as_str()?.strip_prefix("0x")?;
    u64::from_str_radix(text, 16).ok()
}

fn hex(number: u64) -> Value {
    json!(format!("{number:#x}"))
}

fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The bytes of a data frame; `None` for control frames.
fn data(message: &Message) -> Option<&[u8]> {
    match message {
        Message::Text(text) => Some(text.as_bytes()),
        Message::Binary(bytes) => Some(bytes),
        _ => None,
    }
}

/// Changes the first full transaction of a block; whether it did.
fn corrupt_body(block: &mut Value) -> bool {
    let Some(tx) = block
        .get_mut("transactions")
        .and_then(Value::as_array_mut)
        .and_then(|txs| txs.first_mut())
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    let value = tx
        .get("value")
        .and_then(Value::as_str)
        .and_then(|v| v.strip_prefix("0x"))
        .and_then(|v| U256::from_str_radix(v, 16).ok());
    if let Some(value) = value {
        tx.insert(
            "value".to_string(),
            json!(format!("{:#x}", value ^ U256::from(1))),
        );
        return true;
    }
    let Some(input) = tx.get("input").and_then(Value::as_str) else {
        return false;
    };
    let mut corrupted = input.to_string();
    if corrupted.len() <= 2 {
        corrupted.push_str("00");
    } else {
        let last = corrupted.pop();
        corrupted.push(if last == Some('0') { '1' } else { '0' });
    }
    tx.insert("input".to_string(), json!(corrupted));
    true
}

impl Connection {
    async fn run(mut self, dropping: CancellationToken) {
        // The proxy's own newHeads subscription: the upstream head, for a
        // lag, even when the client follows no heads.
        let subscribe = json!({
            "jsonrpc": "2.0", "id": private_id("heads"),
            "method": "eth_subscribe", "params": ["newHeads"],
        });
        let end = match self
            .send_upstream(Message::text(subscribe.to_string()))
            .await
        {
            Err(end) => end,
            Ok(()) => loop {
                let step = tokio::select! {
                    () = dropping.cancelled() => Err(End::Dropped),
                    changed = self.faults.changed() => match changed {
                        Ok(()) => self.release().await,
                        Err(_) => Err(End::Dropped),
                    },
                    message = self.client.next(), if self.waiting.is_none() => match message {
                        Some(Ok(message)) => self.on_client(message).await,
                        Some(Err(_)) | None => Err(End::ClientClosed),
                    },
                    message = self.upstream.next() => match message {
                        Some(Ok(message)) => self.on_upstream(message).await,
                        Some(Err(_)) | None => Err(End::UpstreamClosed(None)),
                    },
                };
                if let Err(end) = step {
                    break end;
                }
            },
        };
        match end {
            End::Dropped => {
                let _ = self.upstream.close(None).await;
                close(
                    &mut self.client,
                    frame(CloseCode::Away, "dropped by the faulty node"),
                )
                .await;
            }
            End::ClientClosed => {
                let _ = self.upstream.close(None).await;
                // Sends the reply to the client's close frame.
                let _ = self.client.close(None).await;
            }
            End::UpstreamClosed(upstream_frame) => {
                let reason = upstream_frame.or(frame(CloseCode::Error, "upstream connection lost"));
                close(&mut self.client, reason).await;
            }
            End::Broken => {}
        }
    }

    fn stalled(&self) -> bool {
        self.faults.borrow().stalled
    }

    async fn send_client(&mut self, message: Message) -> Result<(), End> {
        self.client.send(message).await.map_err(|_| End::Broken)
    }

    async fn send_upstream(&mut self, message: Message) -> Result<(), End> {
        self.upstream.send(message).await.map_err(|_| End::Broken)
    }

    async fn on_client(&mut self, message: Message) -> Result<(), End> {
        if message.is_close() {
            return Err(End::ClientClosed);
        }
        let Some(bytes) = data(&message) else {
            return Ok(());
        };
        let parsed = serde_json::from_slice::<Value>(bytes).ok();
        let (requests, batch) = match parsed {
            Some(Value::Array(requests)) => (requests, true),
            Some(request @ Value::Object(_)) => (vec![request], false),
            // Not JSON-RPC: the upstream answers it.
            _ => {
                if self.stalled() {
                    return Ok(());
                }
                return self.send_upstream(message).await;
            }
        };
        self.shared.requests.send_modify(|counts| {
            for method in requests.iter().filter_map(|r| r.get("method")?.as_str()) {
                *counts.entry(method.to_string()).or_default() += 1;
            }
        });
        let faults = self.faults.borrow().clone();
        if faults.stalled {
            return Ok(());
        }
        if faults.lag > 0 {
            let lagged = |request: &&Value| {
                request.get("id").is_some()
                    && request
                        .get("method")
                        .and_then(Value::as_str)
                        .is_some_and(|m| LAGGED.contains(&m) && !faults.refused.contains(m))
            };
            if requests.iter().any(|r| lagged(&r)) {
                let mut hashes = BTreeSet::new();
                for request in requests.iter().filter(lagged) {
                    let hash = match request["method"].as_str() {
                        Some("eth_getBlockByHash" | "eth_getBlockReceipts") => {
                            request.pointer("/params/0")
                        }
                        Some("eth_getLogs") => request.pointer("/params/0/blockHash"),
                        _ => None,
                    };
                    if let Some(hash) = hash.and_then(Value::as_str) {
                        hashes.insert(hash.to_lowercase());
                    }
                }
                return self.look_up(hashes, requests, batch, message).await;
            }
        }
        self.route(requests, batch, message, None, &faults).await
    }

    /// Asks the upstream for its head and the numbers of `hashes`, and holds
    /// the client's message until it answers.
    async fn look_up(
        &mut self,
        hashes: BTreeSet<String>,
        requests: Vec<Value>,
        batch: bool,
        original: Message,
    ) -> Result<(), End> {
        self.lookups += 1;
        let lookup = self.lookups;
        let mut calls = vec![json!({
            "jsonrpc": "2.0", "id": private_id(&format!("{lookup}/head")),
            "method": "eth_blockNumber", "params": [],
        })];
        for hash in hashes {
            calls.push(json!({
                "jsonrpc": "2.0", "id": private_id(&format!("{lookup}/block/{hash}")),
                "method": "eth_getBlockByHash", "params": [hash, false],
            }));
        }
        self.waiting = Some(Waiting {
            lookup,
            requests,
            batch,
            original,
        });
        self.send_upstream(Message::text(Value::Array(calls).to_string()))
            .await
    }

    /// The upstream answered a look-up: the held message goes on.
    async fn looked_up(&mut self, answers: Vec<Value>) -> Result<(), End> {
        let Some(waiting) = self.waiting.take() else {
            return Ok(());
        };
        let prefix = format!("{}/", waiting.lookup);
        let mut head = None;
        let mut numbers = HashMap::new();
        for answer in &answers {
            let Some(key) = private_suffix(answer.get("id")).and_then(|s| s.strip_prefix(&prefix))
            else {
                continue;
            };
            if key == "head" {
                head = quantity(&answer["result"]);
            } else if let Some(hash) = key.strip_prefix("block/") {
                numbers.insert(hash.to_string(), quantity(&answer["result"]["number"]));
            }
        }
        if let Some(head) = head {
            self.head = self.head.max(head);
        }
        let faults = self.faults.borrow().clone();
        if faults.stalled {
            // A hung node: the request is lost.
            return Ok(());
        }
        let view = head.filter(|_| faults.lag > 0).map(|head| View {
            limit: head.saturating_sub(faults.lag),
            numbers,
        });
        self.route(
            waiting.requests,
            waiting.batch,
            waiting.original,
            view.as_ref(),
            &faults,
        )
        .await?;
        self.release().await
    }

    /// Answers, rewrites or forwards one request.
    fn decide(&self, mut request: Value, view: Option<&View>, faults: &Faults) -> Decision {
        let method = request
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string);
        let (Some(method), Some(id)) = (method, request.get("id").cloned()) else {
            return Decision::Forward {
                request,
                rewritten: false,
                pending: None,
            };
        };
        if faults.refused.contains(&method) {
            let message = format!("the method {method} does not exist/is not available");
            return Decision::Answer(error(id, -32601, &message));
        }
        let mut pending = Pending {
            method: method.clone(),
            feed: None,
            logs_limit: None,
        };
        if method == "eth_subscribe" {
            pending.feed = match request.pointer("/params/0").and_then(Value::as_str) {
                Some("newHeads") => Some(Feed::Heads),
                Some("logs") => Some(Feed::Logs),
                _ => None,
            };
        }
        let mut rewritten = false;
        if let Some(view) = view {
            match method.as_str() {
                "eth_blockNumber" => return Decision::Answer(result(id, hex(view.limit))),
                "eth_getBlockByNumber" => {
                    if let Some(block) = request.pointer_mut("/params/0") {
                        match block.as_str() {
                            Some("latest" | "pending" | "safe" | "finalized") => {
                                *block = hex(view.limit);
                                rewritten = true;
                            }
                            _ => {
                                if quantity(block).is_some_and(|n| n > view.limit) {
                                    return Decision::Answer(result(id, Value::Null));
                                }
                            }
                        }
                    }
                }
                "eth_getBlockByHash" | "eth_getBlockReceipts" => {
                    let hash = request.pointer("/params/0").and_then(Value::as_str);
                    if hash.is_some_and(|hash| view.above(hash)) {
                        return Decision::Answer(result(id, Value::Null));
                    }
                }
                "eth_getLogs" => {
                    let hash = request
                        .pointer("/params/0/blockHash")
                        .and_then(Value::as_str);
                    if hash.is_some_and(|hash| view.above(hash)) {
                        // What anvil answers for a block it does not have.
                        return Decision::Answer(error(id, -32000, "unknown block"));
                    }
                    pending.logs_limit = Some(view.limit);
                }
                _ => {}
            }
        }
        Decision::Forward {
            request,
            rewritten,
            pending: Some((id.to_string(), pending)),
        }
    }

    /// Sends what the proxy answers to the client and the rest upstream.
    async fn route(
        &mut self,
        requests: Vec<Value>,
        batch: bool,
        original: Message,
        view: Option<&View>,
        faults: &Faults,
    ) -> Result<(), End> {
        let mut slots = Vec::new();
        let mut forwarded = Vec::new();
        let mut modified = false;
        for request in requests {
            match self.decide(request, view, faults) {
                Decision::Answer(answer) => {
                    modified = true;
                    slots.push(Slot::Local(answer));
                }
                Decision::Forward {
                    request,
                    rewritten,
                    pending,
                } => {
                    modified |= rewritten;
                    if let Some((key, pending)) = pending {
                        self.pending.insert(key.clone(), pending);
                        slots.push(Slot::Forwarded(key));
                    }
                    forwarded.push(request);
                }
            }
        }
        if !batch {
            return match (slots.pop(), forwarded.pop()) {
                (Some(Slot::Local(answer)), _) => {
                    self.send_client(Message::text(answer.to_string())).await
                }
                (_, Some(request)) if modified => {
                    self.send_upstream(Message::text(request.to_string())).await
                }
                _ => self.send_upstream(original).await,
            };
        }
        if !forwarded.is_empty() {
            let message = if modified {
                Message::text(Value::Array(forwarded).to_string())
            } else {
                original
            };
            self.send_upstream(message).await?;
        }
        let answered_upstream = slots.iter().any(|s| matches!(s, Slot::Forwarded(_)));
        let local = slots.iter().any(|s| matches!(s, Slot::Local(_)));
        if answered_upstream && local {
            self.batches.push(Batch { slots });
        } else if local {
            let answers: Vec<Value> = slots
                .into_iter()
                .filter_map(|slot| match slot {
                    Slot::Local(answer) => Some(answer),
                    Slot::Forwarded(_) => None,
                })
                .collect();
            self.send_client(Message::text(Value::Array(answers).to_string()))
                .await?;
        }
        Ok(())
    }

    async fn on_upstream(&mut self, message: Message) -> Result<(), End> {
        if let Message::Close(frame) = message {
            return Err(End::UpstreamClosed(frame));
        }
        let Some(bytes) = data(&message) else {
            return Ok(());
        };
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Array(answers)) => self.batch_answer(answers, message).await,
            Ok(notification @ Value::Object(_))
                if notification.get("method").and_then(Value::as_str)
                    == Some("eth_subscription") =>
            {
                self.notification(&notification, message).await
            }
            Ok(mut answer @ Value::Object(_)) => {
                if let Some(suffix) = private_suffix(answer.get("id")) {
                    if suffix == "heads" {
                        self.private_heads = answer["result"].as_str().map(str::to_string);
                    }
                    return Ok(());
                }
                let changed = match answer.get("id").map(Value::to_string) {
                    Some(key) => match self.pending.remove(&key) {
                        Some(pending) => self.apply(&pending, &mut answer),
                        None => false,
                    },
                    None => false,
                };
                if self.stalled() {
                    return Ok(());
                }
                let message = if changed {
                    Message::text(answer.to_string())
                } else {
                    message
                };
                self.send_client(message).await
            }
            _ => {
                if self.stalled() {
                    return Ok(());
                }
                self.send_client(message).await
            }
        }
    }

    /// Applies the faults to an answer (and notes a new subscription);
    /// whether it changed.
    fn apply(&mut self, pending: &Pending, answer: &mut Value) -> bool {
        if let Some(feed) = pending.feed
            && let Some(subscription) = answer.get("result").and_then(Value::as_str)
        {
            self.subscriptions.insert(subscription.to_string(), feed);
        }
        let (corrupt_bodies, corrupt_logs) = {
            let faults = self.faults.borrow();
            (faults.corrupt_bodies, faults.corrupt_logs)
        };
        let Some(result) = answer.get_mut("result") else {
            return false;
        };
        match pending.method.as_str() {
            "eth_getBlockByHash" | "eth_getBlockByNumber" if corrupt_bodies => corrupt_body(result),
            "eth_getLogs" => {
                let Some(logs) = result.as_array_mut() else {
                    return false;
                };
                let before = logs.len();
                if let Some(limit) = pending.logs_limit {
                    logs.retain(|log| quantity(&log["blockNumber"]).is_none_or(|n| n <= limit));
                }
                if corrupt_logs {
                    logs.pop();
                }
                logs.len() != before
            }
            "eth_getBlockReceipts" if corrupt_logs => {
                let Some(receipts) = result.as_array_mut() else {
                    return false;
                };
                let with_logs = receipts.iter_mut().rev().find_map(|receipt| {
                    receipt["logs"]
                        .as_array_mut()
                        .filter(|logs| !logs.is_empty())
                });
                with_logs.is_some_and(|logs| logs.pop().is_some())
            }
            _ => false,
        }
    }

    async fn batch_answer(&mut self, answers: Vec<Value>, message: Message) -> Result<(), End> {
        if answers
            .iter()
            .any(|answer| private_suffix(answer.get("id")).is_some())
        {
            return self.looked_up(answers).await;
        }
        let keys: Vec<String> = answers
            .iter()
            .filter_map(|answer| answer.get("id").map(Value::to_string))
            .collect();
        let batch = self
            .batches
            .iter()
            .position(|batch| {
                batch
                    .slots
                    .iter()
                    .any(|slot| matches!(slot, Slot::Forwarded(key) if keys.contains(key)))
            })
            .map(|index| self.batches.swap_remove(index));
        let mut changed = false;
        let mut answered = Vec::new();
        for mut answer in answers {
            let key = answer.get("id").map(Value::to_string);
            if let Some(pending) = key.as_ref().and_then(|key| self.pending.remove(key)) {
                changed |= self.apply(&pending, &mut answer);
            }
            answered.push((key, answer));
        }
        if self.stalled() {
            return Ok(());
        }
        let message = match batch {
            None if !changed => message,
            None => Message::text(
                Value::Array(answered.into_iter().map(|(_, answer)| answer).collect()).to_string(),
            ),
            Some(batch) => {
                let mut merged = Vec::new();
                for slot in batch.slots {
                    match slot {
                        Slot::Local(answer) => merged.push(answer),
                        Slot::Forwarded(key) => {
                            let index = answered
                                .iter()
                                .position(|(k, _)| k.as_deref() == Some(key.as_str()));
                            if let Some(index) = index {
                                merged.push(answered.remove(index).1);
                            }
                        }
                    }
                }
                merged.extend(answered.into_iter().map(|(_, answer)| answer));
                Message::text(Value::Array(merged).to_string())
            }
        };
        self.send_client(message).await
    }

    async fn notification(&mut self, notification: &Value, message: Message) -> Result<(), End> {
        let params = &notification["params"];
        let subscription = params["subscription"].as_str().unwrap_or_default();
        if self.private_heads.as_deref() == Some(subscription) {
            if let Some(number) = quantity(&params["result"]["number"]) {
                self.head = self.head.max(number);
            }
            return self.release().await;
        }
        let (stalled, lag) = {
            let faults = self.faults.borrow();
            (faults.stalled, faults.lag)
        };
        if stalled {
            return Ok(());
        }
        let block = match self.subscriptions.get(subscription) {
            Some(Feed::Heads) => {
                let number = quantity(&params["result"]["number"]);
                if let Some(number) = number {
                    self.head = self.head.max(number);
                }
                number
            }
            Some(Feed::Logs) => quantity(&params["result"]["blockNumber"]),
            None => None,
        };
        match block {
            Some(block) if lag > 0 => {
                self.held.push_back((block, message));
                self.release().await
            }
            _ => self.send_client(message).await,
        }
    }

    /// Sends the held notifications the upstream head now allows, in order
    /// (all of them without a lag; none, and forgets them, while stalled).
    async fn release(&mut self) -> Result<(), End> {
        let (stalled, lag) = {
            let faults = self.faults.borrow_and_update();
            (faults.stalled, faults.lag)
        };
        if stalled {
            self.held.clear();
            return Ok(());
        }
        while self
            .held
            .front()
            .is_some_and(|(block, _)| lag == 0 || block.saturating_add(lag) <= self.head)
        {
            if let Some((_, message)) = self.held.pop_front() {
                self.send_client(message).await?;
            }
        }
        Ok(())
    }
}
