//! The load benchmark's engine (`cargo bench -p chainsieve-tests --bench
//! load`; a small run is in the test command): N WebSocket clients with M
//! subscriptions each, anvil mining transactions sent at a steady rate, and
//! what arrives measured: notifications per second, the latency of pending
//! transactions from send to receipt, the server's CPU time and memory.
//!
//! One [`Workload`] runs against anvil's own `eth_subscribe` (clients on the
//! node), against chainsieve (clients on chainsieve, anvil its upstream), so
//! the two are compared on the same stream, and against chainsieve's own
//! devnet, which takes the transactions itself: there the moment a
//! transaction is sent is the moment it is ingested, with no node between.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::Encodable2718;
use alloy_primitives::{Address, B256, TxKind, U256, keccak256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use anyhow::{Context, bail};
use chainsieve_config::{AuthConfig, ChainConfig, Config, LimitsConfig, SourceConfig};
use chainsieve_ingest::devnet::DevnetSettings;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::TIMEOUT;
use crate::anvil::{Anvil, ping_runtime};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The chain the benchmark's anvil runs.
pub const CHAIN_ID: u64 = 31337;

/// Anvil for the benchmark: a block a second (transactions stay pending a
/// while, as on a real chain) and a gas limit no load fills, so the base
/// fee never outgrows the transactions' fee cap.
pub const ANVIL_OPTIONS: &[&str] = &["--block-time", "1", "--gas-limit", "100000000000"];

/// Half the transactions call this contract (installed by `anvil_setCode`),
/// which logs `Ping()`: the `logs` subscriptions' events.
const EMITTER: Address = Address::new([0xe1; 20]);
/// No transaction touches it: a `logs` subscription that costs filtering and
/// delivers nothing.
const SILENT: Address = Address::new([0xde; 20]);
const SENDERS: u64 = 16;
/// Transactions the sender keeps on each connection to the node.
const DRIVER_CONNECTIONS: usize = 4;
/// Connections opened at once.
const CONNECTING: usize = 256;

/// chainsieve serving the benchmark's chain from `source`, clients using
/// the key `load`. A devnet source generates nothing of its own, so every
/// transaction is the workload's; its blocks come every second and hold any
/// load.
pub fn chainsieve_config(source: SourceConfig) -> Config {
    Config {
        chains: [(
            "eth".to_string(),
            ChainConfig {
                chain_id: Some(CHAIN_ID),
                source,
                ..Default::default()
            },
        )]
        .into(),
        auth: AuthConfig {
            keys: vec!["load".into()],
            ..Default::default()
        },
        devnet: DevnetSettings {
            block_time_ms: Some(1_000),
            pending_batches_per_block: 1,
            transactions_per_block: 0,
            gas_limit: Some(100_000_000_000),
            history_blocks: 0,
            ..DevnetSettings::default()
        },
        ..Config::default()
    }
}

/// `config` with the per-key limits raised past any benchmark's load: the
/// clients of a run share one key.
pub fn unlimited(config: Config) -> Config {
    Config {
        limits: LimitsConfig {
            max_connections_per_key: 1_000_000,
            requests_per_second_per_key: 10_000_000,
            ..config.limits
        },
        ..config
    }
}

/// What a subscription listens to; subscriptions cycle through these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pending,
    Heads,
    Logs,
    SilentLogs,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Pending, Kind::Heads, Kind::Logs, Kind::SilentLogs];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Pending => "newPendingTransactions",
            Kind::Heads => "newHeads",
            Kind::Logs => "logs (emitter)",
            Kind::SilentLogs => "logs (silent)",
        }
    }

    /// The subscription's `eth_subscribe` parameters.
    pub fn params(self) -> Value {
        match self {
            Kind::Pending => json!(["newPendingTransactions"]),
            Kind::Heads => json!(["newHeads"]),
            Kind::Logs => json!(["logs", {"address": EMITTER}]),
            Kind::SilentLogs => json!(["logs", {"address": SILENT}]),
        }
    }

    /// The kinds of connection `connection`'s `per_connection` subscriptions.
    fn of(connection: usize, per_connection: usize) -> Vec<Kind> {
        (0..per_connection)
            .map(|i| Kind::ALL[(connection * per_connection + i) % Kind::ALL.len()])
            .collect()
    }
}

/// The node's pending transactions in full: what chainsieve ingests (the
/// probe and the floor read it too).
pub fn full_pending() -> Value {
    json!(["newPendingTransactions", true])
}

/// How hard to push.
#[derive(Clone, Debug)]
pub struct Spec {
    pub connections: usize,
    pub subscriptions_per_connection: usize,
    /// Transactions sent per second.
    pub rate: u64,
    /// Sending before measuring starts.
    pub warmup: Duration,
    pub measure: Duration,
    /// Connections whose pending notifications are timed; the others only
    /// count (timing costs the client process CPU the servers need).
    pub timed_connections: usize,
}

impl Spec {
    /// Whether connection number `connection` is timed: every n-th, spread
    /// over the connection order, so a server that writes an event to its
    /// clients in the order they came (the floor does) does not time its
    /// earliest writes only.
    pub fn is_timed(&self, connection: usize) -> bool {
        if self.timed_connections == 0 {
            return false;
        }
        let stride = (self.connections / self.timed_connections).max(1);
        connection.is_multiple_of(stride) && connection / stride < self.timed_connections
    }

    /// Transactions the run sends.
    pub fn transactions(&self) -> usize {
        (self.rate as f64 * (self.warmup + self.measure).as_secs_f64()) as usize
    }
}

/// Signed transactions (EIP-1559, real signatures) from fixed keys, so every
/// run and both targets see the same stream.
pub struct Workload {
    senders: Vec<PrivateKeySigner>,
    frames: Vec<Utf8Bytes>,
    index: HashMap<B256, usize>,
}

impl Workload {
    pub fn new(count: usize) -> anyhow::Result<Self> {
        let senders = (0..SENDERS)
            .map(|i| PrivateKeySigner::from_bytes(&keccak256(format!("chainsieve-load-{i}"))))
            .collect::<Result<Vec<_>, _>>()
            .context("sender keys")?;
        let mut frames = Vec::with_capacity(count);
        let mut index = HashMap::with_capacity(count);
        for i in 0..count as u64 {
            let (to, gas) = if i % 2 == 0 {
                (EMITTER, 30_000)
            } else {
                (Address::from_word(keccak256(i.to_be_bytes())), 21_000)
            };
            let tx = TxEip1559 {
                chain_id: CHAIN_ID,
                nonce: i / SENDERS,
                gas_limit: gas,
                max_fee_per_gas: 100_000_000_000,
                max_priority_fee_per_gas: 1,
                to: TxKind::Call(to),
                value: U256::from(1),
                ..Default::default()
            };
            let signer = &senders[(i % SENDERS) as usize];
            let signature = signer
                .sign_hash_sync(&tx.signature_hash())
                .context("signing")?;
            let envelope = TxEnvelope::from(tx.into_signed(signature));
            index.insert(*envelope.tx_hash(), i as usize);
            let raw = alloy_primitives::hex::encode_prefixed(envelope.encoded_2718());
            frames.push(Utf8Bytes::from(
                json!({"jsonrpc": "2.0", "id": i, "method": "eth_sendRawTransaction", "params": [raw]})
                    .to_string(),
            ));
        }
        Ok(Self {
            senders,
            frames,
            index,
        })
    }

    /// A fresh node for a run: anvil with [`ANVIL_OPTIONS`], the senders
    /// funded and the log emitter installed.
    pub async fn start_node(&self) -> anyhow::Result<Anvil> {
        let anvil = Anvil::start_with(CHAIN_ID, 0, ANVIL_OPTIONS).await?;
        for sender in &self.senders {
            anvil
                .rpc(
                    "anvil_setBalance",
                    json!([sender.address(), "0xffffffffffffffffffffffffffffffff"]),
                )
                .await?;
        }
        anvil
            .rpc(
                "anvil_setCode",
                json!([EMITTER, format!("0x{}", ping_runtime())]),
            )
            .await?;
        Ok(anvil)
    }
}

/// What one run measured.
#[derive(Debug)]
pub struct Report {
    /// Transactions sent in the measured window, per second.
    pub sent_per_second: f64,
    /// Notifications received in the measured window, per kind, per second.
    pub per_second: [f64; 4],
    /// Pending-transaction latency from send to receipt, in microseconds.
    pub latency: Histogram<u64>,
    /// From the node's announcing the full transaction (what chainsieve
    /// ingests, seen by a probe subscribed on the node) to receipt; `None`
    /// when the clients are on the node itself.
    pub from_ingestion: Option<Histogram<u64>>,
    /// The server's CPU time in the window (`None` for an in-process server).
    pub cpu: Option<CpuTime>,
    /// The CPU time in the window of the other processes named to
    /// [`run`] (an ingest and `nats-server` behind an edge).
    pub others: Vec<(String, CpuTime)>,
    /// The server's resident memory growth from connecting and subscribing,
    /// per connection, and its peak resident memory.
    pub memory_per_connection: Option<f64>,
    pub peak_memory: Option<u64>,
    /// Connections the server closed, by close code and reason.
    pub closed: u64,
    pub close_reasons: Vec<(String, u64)>,
    /// Pending notifications missing after the run (every sent transaction
    /// is due on every pending subscription), waiting up to [`TIMEOUT`].
    pub missing_pending: u64,
    /// Notifications over the whole run, per kind.
    pub totals: [u64; 4],
    /// Transactions the node refused.
    pub refused: u64,
    /// When the run started, and each timed pending receipt: (when it was
    /// received, in nanoseconds since the start; its latency from send, in
    /// microseconds).
    pub started: Instant,
    pub pending_samples: Vec<(u64, u64)>,
}

impl Report {
    /// The pending latency from send of the receipts between `from` and
    /// `to` (say, while something else ran).
    pub fn latency_between(&self, from: Instant, to: Instant) -> anyhow::Result<Histogram<u64>> {
        let offset = |at: Instant| at.saturating_duration_since(self.started).as_nanos() as u64;
        let (from, to) = (offset(from), offset(to));
        let mut histogram = Histogram::new_with_bounds(1, 60_000_000, 3).context("histogram")?;
        for &(received, latency) in &self.pending_samples {
            if (from..to).contains(&received) {
                histogram.saturating_record(latency);
            }
        }
        Ok(histogram)
    }

    pub fn notifications_per_second(&self) -> f64 {
        self.per_second.iter().sum()
    }

    /// The server's CPU time per notification, in user space and in the
    /// kernel, in microseconds: what the README's floor arguments rest on.
    pub fn cpu_per_notification(&self, measure: Duration) -> Option<CpuTime> {
        let notifications = self.notifications_per_second() * measure.as_secs_f64();
        let cpu = self.cpu?;
        (notifications >= 1.0).then(|| CpuTime {
            user: cpu.user.div_f64(notifications),
            system: cpu.system.div_f64(notifications),
        })
    }

    /// Notifications per CPU-second of the server.
    pub fn per_cpu_second(&self, measure: Duration) -> Option<f64> {
        self.cpu.map(|cpu| {
            self.notifications_per_second() * measure.as_secs_f64()
                / cpu.total().as_secs_f64().max(1e-9)
        })
    }
}

/// State the clients and the sender share.
struct Shared {
    start: Instant,
    /// Nanoseconds after `start` each transaction was sent, plus one (zero:
    /// not yet).
    sent_at: Vec<AtomicU64>,
    /// Likewise, when the node announced it in full to the probe.
    ingested_at: Vec<AtomicU64>,
    /// (transaction, nanoseconds after `start`) of each pending notification
    /// a timed client received in the window; turned into latencies after
    /// the run, when every time is known.
    receipts: Mutex<Vec<(usize, u64)>>,
    sent: AtomicU64,
    counting: AtomicBool,
    counts: [AtomicU64; 4],
    /// Notifications over the whole run, per kind.
    totals: [AtomicU64; 4],
    closed: AtomicU64,
    close_reasons: Mutex<HashMap<String, u64>>,
    /// The node's answers to the sent transactions, and how many refused.
    answered: AtomicU64,
    refused: AtomicU64,
}

/// One run: connects the clients to `target_ws` and subscribes, sends the
/// workload to the node at `node_ws`, measures, and waits for every pending
/// notification. `server` is the target's process id, to read its CPU time
/// and memory (`None`: it runs in this process and is not measured);
/// `others` are processes whose CPU time is read over the same window.
pub async fn run(
    spec: &Spec,
    workload: Arc<Workload>,
    node_ws: &str,
    target_ws: &str,
    server: Option<u32>,
    others: &[(&str, u32)],
) -> anyhow::Result<Report> {
    let total = spec.transactions().min(workload.frames.len());
    let shared = Arc::new(Shared {
        start: Instant::now(),
        sent_at: (0..total).map(|_| AtomicU64::new(0)).collect(),
        ingested_at: (0..total).map(|_| AtomicU64::new(0)).collect(),
        receipts: Mutex::new(Vec::new()),
        sent: AtomicU64::new(0),
        counting: AtomicBool::new(false),
        counts: Default::default(),
        totals: Default::default(),
        closed: AtomicU64::new(0),
        close_reasons: Mutex::default(),
        answered: AtomicU64::new(0),
        refused: AtomicU64::new(0),
    });
    let memory_before = server.map(memory).transpose()?;
    let (clients, pending_subscriptions) = connect_all(spec, target_ws, &shared, &workload).await?;
    let probe = if node_ws == target_ws {
        None
    } else {
        let (mut socket, _) = connect(node_ws).await.context("connecting the probe")?;
        let request =
            json!({"jsonrpc": "2.0", "id": 0, "method": "eth_subscribe", "params": full_pending()});
        socket.send(Message::text(request.to_string())).await?;
        Some(tokio::spawn(probe(
            socket,
            shared.clone(),
            workload.clone(),
        )))
    };
    let memory_per_connection = match (server, memory_before) {
        (Some(pid), Some((before, _))) if spec.connections > 0 => {
            let (after, _) = memory(pid)?;
            Some(after.saturating_sub(before) as f64 / spec.connections as f64)
        }
        _ => None,
    };

    let sender = tokio::spawn(send(
        node_ws.to_string(),
        workload.clone(),
        total,
        spec.rate,
        shared.clone(),
    ));
    tokio::time::sleep(spec.warmup).await;
    let cpu_before = server.map(cpu_time).transpose()?;
    let others_before = others
        .iter()
        .map(|(_, pid)| cpu_time(*pid))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let sent_before = shared.sent.load(Ordering::Relaxed);
    let window = Instant::now();
    shared.counting.store(true, Ordering::Relaxed);
    tokio::time::sleep(spec.measure).await;
    shared.counting.store(false, Ordering::Relaxed);
    let elapsed = window.elapsed().as_secs_f64();
    let sent_in_window = shared.sent.load(Ordering::Relaxed) - sent_before;
    let cpu = match (server, cpu_before) {
        (Some(pid), Some(before)) => Some(cpu_time(pid)?.saturating_sub(before)),
        _ => None,
    };
    let others = others
        .iter()
        .zip(others_before)
        .map(|((name, pid), before)| Ok((name.to_string(), cpu_time(*pid)?.saturating_sub(before))))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let peak_memory = server.map(memory).transpose()?.map(|(_, peak)| peak);

    let sent = sender.await.context("the sender panicked")??;
    let expected = sent as u64 * pending_subscriptions;
    let deadline = Instant::now() + TIMEOUT;
    let pending = || shared.totals[Kind::Pending as usize].load(Ordering::Relaxed);
    while pending() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let missing_pending = expected.saturating_sub(pending());
    drop(clients);

    let receipts = std::mem::take(
        &mut *shared
            .receipts
            .lock()
            .map_err(|_| anyhow::anyhow!("a client panicked while timing"))?,
    );
    let latency = histogram(&receipts, &shared.sent_at)?;
    let pending_samples = receipts
        .iter()
        .filter_map(|&(tx, received)| {
            let at = shared.sent_at[tx].load(Ordering::Relaxed);
            (at > 0).then(|| (received, received.saturating_sub(at - 1) / 1_000))
        })
        .collect();
    let from_ingestion = match probe {
        Some(probe) => {
            probe.abort();
            Some(histogram(&receipts, &shared.ingested_at)?)
        }
        None => None,
    };
    Ok(Report {
        sent_per_second: sent_in_window as f64 / elapsed,
        per_second: std::array::from_fn(|i| {
            shared.counts[i].load(Ordering::Relaxed) as f64 / elapsed
        }),
        latency,
        from_ingestion,
        cpu,
        others,
        memory_per_connection,
        peak_memory,
        closed: shared.closed.load(Ordering::Relaxed),
        close_reasons: shared
            .close_reasons
            .lock()
            .map_err(|_| anyhow::anyhow!("a client panicked while closing"))?
            .drain()
            .collect(),
        missing_pending,
        totals: std::array::from_fn(|i| shared.totals[i].load(Ordering::Relaxed)),
        refused: shared.refused.load(Ordering::Relaxed),
        started: shared.start,
        pending_samples,
    })
}

/// Microseconds from each transaction's time in `since` to each receipt
/// (a receipt before it counts as zero).
fn histogram(receipts: &[(usize, u64)], since: &[AtomicU64]) -> anyhow::Result<Histogram<u64>> {
    // Up to a minute; `saturating_record` clamps beyond.
    let mut histogram = Histogram::new_with_bounds(1, 60_000_000, 3).context("histogram")?;
    for &(tx, received) in receipts {
        let at = since[tx].load(Ordering::Relaxed);
        if at > 0 {
            histogram.saturating_record(received.saturating_sub(at - 1) / 1_000);
        }
    }
    Ok(histogram)
}

/// Notes when the node announced each transaction in full: the moment a
/// server on that node ingests it.
async fn probe(mut socket: Socket, shared: Arc<Shared>, workload: Arc<Workload>) {
    while let Some(Ok(message)) = socket.next().await {
        if let Message::Text(text) = message
            && let Some(&tx) = field(&text, "\"hash\":\"")
                .and_then(|hash| hash.parse::<B256>().ok())
                .and_then(|hash| workload.index.get(&hash))
        {
            let now = shared.start.elapsed().as_nanos() as u64 + 1;
            let _ = shared.ingested_at[tx].compare_exchange(
                0,
                now,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
}

/// Opens every client, subscribes, and starts their readers; returns the
/// readers and the number of pending subscriptions.
async fn connect_all(
    spec: &Spec,
    url: &str,
    shared: &Arc<Shared>,
    workload: &Arc<Workload>,
) -> anyhow::Result<(JoinSet<()>, u64)> {
    let mut readers = JoinSet::new();
    let mut opening = JoinSet::new();
    let mut pending_subscriptions = 0;
    for connection in 0..spec.connections {
        let kinds = Kind::of(connection, spec.subscriptions_per_connection);
        pending_subscriptions += kinds.iter().filter(|k| **k == Kind::Pending).count() as u64;
        let url = url.to_string();
        opening.spawn(async move {
            let subscribed = subscribe(&url, &kinds).await;
            (connection, subscribed)
        });
        if opening.len() >= CONNECTING || connection + 1 == spec.connections {
            while let Some(opened) = opening.join_next().await {
                let (connection, subscribed) = opened.context("a client panicked")?;
                let (socket, ids) = subscribed
                    .with_context(|| format!("connecting and subscribing client {connection}"))?;
                let timed = spec.is_timed(connection);
                readers.spawn(listen(socket, ids, shared.clone(), workload.clone(), timed));
            }
        }
    }
    Ok((readers, pending_subscriptions))
}

/// Connects and makes `kinds`' subscriptions; returns the socket and the
/// kind of each subscription id.
async fn subscribe(url: &str, kinds: &[Kind]) -> anyhow::Result<(Socket, HashMap<String, Kind>)> {
    let (mut socket, _) = tokio::time::timeout(TIMEOUT, connect(url))
        .await
        .context("connecting took too long")?
        .with_context(|| format!("connecting to {url}"))?;
    for (id, kind) in kinds.iter().enumerate() {
        let request =
            json!({"jsonrpc": "2.0", "id": id, "method": "eth_subscribe", "params": kind.params()});
        socket.feed(Message::text(request.to_string())).await?;
    }
    socket.flush().await?;
    let mut ids = HashMap::new();
    while ids.len() < kinds.len() {
        let message = tokio::time::timeout(TIMEOUT, socket.next())
            .await
            .context("no subscription response in time")?
            .context("closed while subscribing")??;
        let Message::Text(text) = message else {
            continue;
        };
        let response: Value = serde_json::from_str(&text).context("a JSON response")?;
        let Some(request) = response["id"].as_u64() else {
            continue; // an early notification
        };
        let Some(id) = response["result"].as_str() else {
            bail!("subscription refused: {response}");
        };
        ids.insert(id.to_string(), kinds[request as usize]);
    }
    Ok((socket, ids))
}

/// Counts a client's notifications by kind (and times pending ones if
/// `timed`) until the socket ends.
async fn listen(
    mut socket: Socket,
    ids: HashMap<String, Kind>,
    shared: Arc<Shared>,
    workload: Arc<Workload>,
    timed: bool,
) {
    let mut reason = "connection lost without a close frame".to_string();
    while let Some(Ok(message)) = socket.next().await {
        let text = match message {
            Message::Text(text) => text,
            Message::Close(frame) => {
                if let Some(frame) = frame {
                    reason = format!("{} {}", u16::from(frame.code), frame.reason);
                }
                break;
            }
            _ => continue,
        };
        let Some(kind) = field(&text, "\"subscription\":\"").and_then(|id| ids.get(id)) else {
            continue;
        };
        shared.totals[*kind as usize].fetch_add(1, Ordering::Relaxed);
        if shared.counting.load(Ordering::Relaxed) {
            shared.counts[*kind as usize].fetch_add(1, Ordering::Relaxed);
        }
        if *kind != Kind::Pending || !timed || !shared.counting.load(Ordering::Relaxed) {
            continue;
        }
        let now = shared.start.elapsed().as_nanos() as u64;
        if let Some(&tx) = field(&text, "\"result\":\"")
            .and_then(|hash| hash.parse::<B256>().ok())
            .and_then(|hash| workload.index.get(&hash))
            && let Ok(mut receipts) = shared.receipts.lock()
        {
            receipts.push((tx, now));
        }
    }
    shared.closed.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut reasons) = shared.close_reasons.lock() {
        *reasons.entry(reason).or_default() += 1;
    }
}

/// Bytes a client reads from its socket at a time. tungstenite zeroes the
/// whole read buffer before every read: at its default (128 KiB) that was
/// 34% of the client process's CPU (perf, 1,000 clients at 262,000
/// notifications/s), CPU the server under test shares the machine with.
/// Notifications are a few hundred bytes; a larger one is still read, in
/// more reads.
const READ_BUFFER: usize = 4 << 10;

/// Opens a WebSocket without Nagle's algorithm, as real clients do (Node's
/// `ws`, under ethers and viem, disables it on every socket): the latency
/// measured is the server's, not a delayed-ACK wait in the client.
async fn connect(
    url: &str,
) -> Result<(Socket, tungstenite::handshake::client::Response), tungstenite::Error> {
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER);
    tokio_tungstenite::connect_async_with_config(url, Some(config), true).await
}

/// The string value after `key` in a JSON text (no escapes in ids and hex).
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let start = text.find(key)? + key.len();
    let len = text[start..].find('"')?;
    Some(&text[start..start + len])
}

/// Sends the first `total` transactions at `rate` per second over a few
/// connections to the node and waits for the answers (a node may drop a
/// request whose connection closes); returns how many were sent.
async fn send(
    url: String,
    workload: Arc<Workload>,
    total: usize,
    rate: u64,
    shared: Arc<Shared>,
) -> anyhow::Result<usize> {
    let mut sinks: Vec<SplitSink<Socket, Message>> = Vec::new();
    let mut answers = JoinSet::new();
    for _ in 0..DRIVER_CONNECTIONS {
        let (socket, _) = connect(&url)
            .await
            .with_context(|| format!("connecting the sender to {url}"))?;
        let (sink, stream) = socket.split();
        sinks.push(sink);
        answers.spawn(count_refusals(stream, shared.clone()));
    }
    // The schedule is kept by a thread of its own: std's sleep is the
    // kernel's high-resolution timer, where tokio's timer rounds to the
    // millisecond, which would lock the phase again (see `send_offset`).
    let (due, mut due_transactions) = tokio::sync::mpsc::unbounded_channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        for index in 0..total {
            let at = start + send_offset(index, rate);
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if due.send(()).is_err() {
                return;
            }
        }
    });
    let mut next = 0;
    while due_transactions.recv().await.is_some() {
        loop {
            let at = shared.start.elapsed().as_nanos() as u64 + 1;
            shared.sent_at[next].store(at, Ordering::Relaxed);
            sinks[next % DRIVER_CONNECTIONS]
                .feed(Message::Text(workload.frames[next].clone()))
                .await
                .context("sending a transaction")?;
            next += 1;
            shared.sent.fetch_add(1, Ordering::Relaxed);
            if due_transactions.try_recv().is_err() {
                break;
            }
        }
        for sink in &mut sinks {
            sink.flush().await.context("sending transactions")?;
        }
    }
    let deadline = Instant::now() + TIMEOUT;
    while shared.answered.load(Ordering::Relaxed) < next as u64 {
        if Instant::now() > deadline {
            bail!("the node did not answer every transaction in time");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(next)
}

/// When transaction `index` is sent, after the sender starts: at a point
/// of its own `1 / rate` slot, the points spread evenly by the golden
/// ratio's multiples. A fixed cadence phase-locks with the kernel's
/// scheduler tick (250 Hz here), and with tick-based CPU accounting the
/// tick is what splits the server's CPU time into user and kernel: at
/// 100 tx/s it sampled the same few points of every burst, and the user
/// share of one build ranged over 22–37% between runs.
fn send_offset(index: usize, rate: u64) -> Duration {
    const GOLDEN: f64 = 0.618_033_988_749_894_9;
    let within = (index as f64 * GOLDEN).fract();
    Duration::from_secs_f64((index as f64 + within) / rate as f64)
}

async fn count_refusals(mut answers: SplitStream<Socket>, shared: Arc<Shared>) {
    while let Some(Ok(message)) = answers.next().await {
        if let Message::Text(text) = message {
            if text.contains("\"error\"") {
                shared.refused.fetch_add(1, Ordering::Relaxed);
            }
            shared.answered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A process's CPU time, in user space and in the kernel (system calls,
/// and the softirqs that ran on its behalf, such as loopback's receive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// The user-space share of the total, from 0 to 1.
    pub fn user_share(&self) -> f64 {
        self.user.as_secs_f64() / self.total().as_secs_f64().max(1e-9)
    }

    pub fn saturating_sub(self, earlier: Self) -> Self {
        Self {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

impl std::ops::AddAssign for CpuTime {
    fn add_assign(&mut self, more: Self) {
        self.user += more.user;
        self.system += more.system;
    }
}

/// A process's CPU time so far.
pub fn cpu_time(pid: u32) -> anyhow::Result<CpuTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').context("stat format")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .context("stat field")?
            .parse()
            .context("stat number")
    };
    // utime and stime are fields 14 and 15 of the whole line; `rest`
    // starts at field 3.
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let time = |ticks: u64| Duration::from_nanos(ticks * 1_000_000_000 / per_second);
    Ok(CpuTime {
        user: time(ticks(11)?),
        system: time(ticks(12)?),
    })
}

/// A process's resident and peak resident memory, in bytes.
pub fn memory(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib = |name: &str| -> anyhow::Result<u64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .map(|n| n * 1024)
            .with_context(|| format!("{name} in /proc/{pid}/status"))
    };
    Ok((kib("VmRSS:")?, kib("VmHWM:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_found_in_notifications() {
        let text = r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xab","result":"0x12"}}"#;
        assert_eq!(field(text, "\"subscription\":\""), Some("0xab"));
        assert_eq!(field(text, "\"result\":\""), Some("0x12"));
        assert_eq!(field(text, "\"missing\":\""), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let pid = std::process::id();
        let (rss, peak) = memory(pid).expect("memory");
        assert!(rss > 0 && peak >= rss);
        cpu_time(pid).expect("cpu time");
    }

    /// Each transaction is sent within its own slot, so the rate holds,
    /// and the points within slots spread over the whole slot, so no
    /// sending phase repeats (it would lock with the kernel's tick).
    #[test]
    fn sends_keep_the_rate_at_points_spread_over_their_slots() {
        let rate = 100;
        let slot = Duration::from_millis(10);
        let mut tenths = [0; 10];
        for index in 0..1_000 {
            let offset = send_offset(index, rate);
            let start = slot * index as u32;
            assert!(
                offset >= start && offset < start + slot,
                "{index}: {offset:?}"
            );
            tenths[((offset - start).as_secs_f64() * 1_000.0) as usize] += 1;
        }
        assert!(
            tenths.iter().all(|&n| (90..=110).contains(&n)),
            "{tenths:?}"
        );
    }

    #[test]
    fn timed_connections_spread_over_the_connection_order() {
        let spec = |connections, timed_connections| Spec {
            connections,
            subscriptions_per_connection: 4,
            rate: 10,
            warmup: Duration::ZERO,
            measure: Duration::ZERO,
            timed_connections,
        };
        let timed = |spec: Spec| {
            (0..spec.connections)
                .filter(|&c| spec.is_timed(c))
                .collect::<Vec<_>>()
        };
        assert_eq!(timed(spec(10, 3)), [0, 3, 6]);
        assert_eq!(timed(spec(10_000, 100)).len(), 100);
        assert_eq!(timed(spec(10_000, 100))[99], 9_900);
        assert_eq!(timed(spec(8, 8)), (0..8).collect::<Vec<_>>());
        assert_eq!(timed(spec(8, 20)), (0..8).collect::<Vec<_>>());
        assert!(timed(spec(8, 0)).is_empty());
    }

    #[test]
    fn subscriptions_cycle_through_the_kinds() {
        assert_eq!(Kind::of(0, 2), [Kind::Pending, Kind::Heads]);
        assert_eq!(Kind::of(1, 2), [Kind::Logs, Kind::SilentLogs]);
        assert_eq!(Kind::of(3, 1), [Kind::SilentLogs]);
    }
}
