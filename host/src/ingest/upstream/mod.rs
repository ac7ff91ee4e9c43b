//! A node as a chain's source: any node speaking Ethereum JSON-RPC over
//! WebSocket (geth, reth, erigon, bsc, bor, anvil).
//!
//! One session per connection: check `eth_chainId`, subscribe to heads and
//! pending transactions, catch up from the last block delivered to the
//! node's head, then follow. For every head the full block and its logs are
//! fetched in one batched round trip. A head whose parent was not delivered
//! is connected by walking back by parent hash (a reorg) or forward by
//! number (a gap after a reconnect), so the canonical tracker downstream
//! always receives linked blocks in ascending order: no gap, no duplicate.
//! A break deeper than the backfill limit is logged and resynchronised
//! from the head.
//!
//! - `delivered`: what this source has already sent downstream.
//!
//! It talks to the node through [`crate::node`]'s client and reads its
//! JSON with [`crate::model::wire`].

mod delivered;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{B256, U64};
use backon::{BackoffBuilder, ExponentialBuilder};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use delivered::Delivered;

use crate::model::wire::{self, NodeBlock, NodeTransaction};
use crate::model::{Block, SourceEvent};
use crate::node::{Call, NodeClient, NodeError, Notification, decode};

/// How long the node may stay silent before it is asked whether it is
/// still there (it fails the session if it does not answer in time).
const IDLE_PROBE: Duration = Duration::from_secs(30);

/// Blocks fetched per round trip while filling a gap.
const GAP_CHUNK: u64 = 32;

/// The first delay before reconnecting; it doubles (with jitter) per
/// failed attempt up to [`MAX_RETRY`].
const MIN_RETRY: Duration = Duration::from_millis(250);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Where and what to follow.
#[derive(Clone, Debug)]
pub struct UpstreamSettings {
    /// The chain's name, for logs.
    pub chain: String,
    pub url: String,
    /// The chain id the node must report.
    pub chain_id: u64,
    /// The most blocks fetched to connect a new head to the last one
    /// delivered (reorg depth or reconnect gap); past it, resynchronise.
    /// The chain's tracker window: deeper history could not be placed.
    pub backfill_limit: u64,
    /// The canonical blocks (number, hash; oldest first) processed before
    /// a restart: the first catch-up fills the gap from them, within the
    /// limit, and undoes those a reorg replaced meanwhile.
    pub resume_from: Vec<(u64, B256)>,
}

/// Where a node source stands; the latest value is kept for readiness
/// checks and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamStatus {
    /// Not connected yet.
    Connecting,
    /// Subscribed and following the node.
    Live,
    /// The last session failed; retrying with backoff.
    Down { reason: String },
    /// An ingest waiting for the chain's lease: another ingest leads and
    /// reads the node (docs/src/architecture.md, The bus).
    Standby,
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("the node reports chain id {found}, but this chain is configured with {expected}")]
    WrongChain { expected: u64, found: u64 },
    /// The receiver is gone: the server is stopping.
    #[error("the server is stopping")]
    Stopping,
}

/// Follows the node until `shutdown`, reconnecting with backoff. State
/// changes are logged once, not per retry, and published on `status`.
pub async fn run(
    settings: UpstreamSettings,
    out: mpsc::Sender<SourceEvent>,
    status: watch::Sender<UpstreamStatus>,
    shutdown: CancellationToken,
) {
    // A node has no past to replay before it is followed: what it catches
    // up on after a reconnect is delivered, as subscribers missed it.
    if out.send(SourceEvent::Synced).await.is_err() {
        return;
    }
    let mut delivered = Delivered::new(settings.backfill_limit);
    delivered.resume(&settings.resume_from);
    let mut retries = retry_delays();
    let mut down_since: Option<String> = None;
    loop {
        let mut live = false;
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            result = session(&settings, &mut delivered, &out, &status, &mut live) => result,
        };
        let error = match result {
            Err(SessionError::Stopping) => return,
            Err(error) => error,
        };
        if live {
            retries = retry_delays();
        }
        let reason = error.to_string();
        if down_since.as_deref() != Some(reason.as_str()) || live {
            tracing::warn!(chain = %settings.chain, url = %settings.url, %reason, "upstream down; reconnecting");
            status.send_replace(UpstreamStatus::Down {
                reason: reason.clone(),
            });
            down_since = Some(reason);
        } else {
            tracing::debug!(chain = %settings.chain, %reason, "upstream still down");
        }
        let delay = retries.next().unwrap_or(MAX_RETRY);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

fn retry_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(MIN_RETRY)
        .with_max_delay(MAX_RETRY)
        .with_jitter()
        .without_max_times()
        .build()
}

/// The subscriptions of one session.
struct Subscriptions {
    heads: String,
    pending: String,
    /// The node sends full transactions; otherwise only hashes.
    full_pending: bool,
}

/// One connection, from connect to failure. Sets `live` once subscribed.
async fn session(
    settings: &UpstreamSettings,
    delivered: &mut Delivered,
    out: &mpsc::Sender<SourceEvent>,
    status: &watch::Sender<UpstreamStatus>,
    live: &mut bool,
) -> Result<std::convert::Infallible, SessionError> {
    let (client, mut notifications) = NodeClient::connect(&settings.url).await?;
    let found: U64 = client.call("eth_chainId", json!([])).await?;
    if found.to::<u64>() != settings.chain_id {
        return Err(SessionError::WrongChain {
            expected: settings.chain_id,
            found: found.to(),
        });
    }
    let subs = subscribe(&client).await?;
    *live = true;
    status.send_replace(UpstreamStatus::Live);
    tracing::info!(
        chain = %settings.chain, url = %settings.url,
        full_pending = subs.full_pending, "upstream live"
    );
    let mut follower = Follower {
        client: &client,
        delivered,
        out,
        limit: settings.backfill_limit,
        chain: &settings.chain,
    };
    // Catch up now rather than at the next head: after a reconnect the gap
    // is filled before anything new is followed.
    let latest: Option<NodeBlock> = client
        .call("eth_getBlockByNumber", json!(["latest", true]))
        .await?;
    if let Some(latest) = latest {
        let logs = follower.logs_of(latest.hash()).await?;
        follower.head(latest.into_model(&logs)).await?;
    }
    loop {
        let first = match tokio::time::timeout(IDLE_PROBE, notifications.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) => return Err(NodeError::Closed.into()),
            // A connection that died without closing looks just like a
            // quiet node: ask something, and fail if nothing answers.
            Err(_) => {
                client.call::<U64>("eth_chainId", json!([])).await?;
                continue;
            }
        };
        // Take everything already queued: pending transactions go down as
        // one batch, in order with the heads between them. Heads that
        // arrive while a block is fetched wait in `backlog`.
        let mut pending = Vec::new();
        let mut backlog = VecDeque::new();
        let mut next = Some(first);
        while let Some(notification) = next.take() {
            if notification.subscription == subs.heads {
                follower.flush_pending(&mut pending, &subs).await?;
                let head: HeadRef = decode("newHeads", &notification.result)?;
                follower
                    .head_by_hash(head, &mut notifications, &subs, &mut backlog)
                    .await?;
            } else if notification.subscription == subs.pending {
                pending.push(notification.result);
            }
            next = backlog
                .pop_front()
                .or_else(|| notifications.try_recv().ok());
        }
        follower.flush_pending(&mut pending, &subs).await?;
    }
}

/// Subscribes to heads and pending transactions, full objects if the node
/// offers them, hashes otherwise.
async fn subscribe(client: &NodeClient) -> Result<Subscriptions, SessionError> {
    let heads: String = client.call("eth_subscribe", json!(["newHeads"])).await?;
    let (pending, full_pending) = match client
        .call::<String>("eth_subscribe", json!(["newPendingTransactions", true]))
        .await
    {
        Ok(id) => (id, true),
        Err(NodeError::Rpc { .. }) => (
            client
                .call("eth_subscribe", json!(["newPendingTransactions"]))
                .await?,
            false,
        ),
        Err(other) => return Err(other.into()),
    };
    Ok(Subscriptions {
        heads,
        pending,
        full_pending,
    })
}

/// The part of a `newHeads` notification needed to fetch the block.
#[derive(Deserialize)]
struct HeadRef {
    hash: B256,
    number: U64,
}

/// Turns heads and pending transactions into linked source events.
struct Follower<'a> {
    client: &'a NodeClient,
    delivered: &'a mut Delivered,
    out: &'a mpsc::Sender<SourceEvent>,
    limit: u64,
    chain: &'a str,
}

impl Follower<'_> {
    /// Fetches the block of `head` and delivers it with any missing
    /// ancestors. While the block is fetched (a large block takes the node
    /// tens of milliseconds), pending transactions that arrive are
    /// forwarded at once instead of waiting behind it; other notifications
    /// are kept in `backlog`, in order.
    async fn head_by_hash(
        &mut self,
        head: HeadRef,
        notifications: &mut mpsc::UnboundedReceiver<Notification>,
        subs: &Subscriptions,
        backlog: &mut VecDeque<Notification>,
    ) -> Result<(), SessionError> {
        let (hash, number) = (head.hash, head.number.to::<u64>());
        if self.delivered.contains(&hash) || self.is_stale(number) {
            return Ok(());
        }
        let fetch = block_by_hash(self.client, hash);
        tokio::pin!(fetch);
        let block = loop {
            tokio::select! {
                biased;
                block = &mut fetch => break block?,
                notification = notifications.recv() => {
                    // Pending transactions up to the next head go down as
                    // one batch; behind a head they keep their place.
                    let mut next = Some(notification.ok_or(NodeError::Closed)?);
                    let mut pending = Vec::new();
                    while let Some(notification) = next.take() {
                        if notification.subscription == subs.pending && backlog.is_empty() {
                            pending.push(notification.result);
                        } else {
                            backlog.push_back(notification);
                        }
                        next = notifications.try_recv().ok();
                    }
                    self.flush_pending(&mut pending, subs).await?;
                }
            }
        };
        match block {
            Some(block) => self.head(block).await,
            // Reorged away before we asked; the next head supersedes it.
            None => Ok(()),
        }
    }

    async fn logs_of(&self, hash: B256) -> Result<Vec<Box<RawValue>>, NodeError> {
        self.client
            .call("eth_getLogs", json!([{ "blockHash": hash }]))
            .await
    }

    /// A head below every delivered block was announced before the block
    /// this session caught up to (the node queues heads while the latest
    /// block is fetched); delivering it would repeat blocks. A real reorg
    /// that deep (and shorter) shows with the node's next head.
    fn is_stale(&self, number: u64) -> bool {
        !self.delivered.is_empty() && number < self.delivered.bottom_number()
    }

    /// Connects `head` to what was delivered and sends the missing blocks
    /// in ascending order.
    async fn head(&mut self, head: Arc<Block>) -> Result<(), SessionError> {
        if self.delivered.contains(&head.hash) {
            return Ok(());
        }
        let branch = self.connect(head).await?;
        for block in branch.into_iter().rev() {
            self.delivered.push(&block);
            if self.out.send(SourceEvent::Block(block)).await.is_err() {
                return Err(SessionError::Stopping);
            }
        }
        Ok(())
    }

    /// The blocks from `head` down to the first whose parent was delivered,
    /// newest first; only `head` when that is further than the limit.
    async fn connect(&self, head: Arc<Block>) -> Result<Vec<Arc<Block>>, NodeError> {
        let mut branch = vec![head];
        loop {
            let oldest = branch.last().expect("branch starts with the head");
            let (parent, oldest_number) = (oldest.parent_hash(), oldest.number());
            if self.delivered.is_empty() || self.delivered.contains(&parent) {
                return Ok(branch);
            }
            // The parent can only be among the delivered blocks if its
            // height is; below them, or past the limit, nothing will link.
            let reachable = oldest_number > self.delivered.bottom_number();
            if !reachable || branch.len() as u64 > self.limit {
                let head = branch.swap_remove(0);
                tracing::error!(
                    chain = %self.chain, head = head.number(), limit = self.limit,
                    "the new head does not connect to the delivered blocks within the backfill limit (a deeper reorg or a longer outage); resynchronising from it"
                );
                return Ok(vec![head]);
            }
            let tip = self.delivered.tip_number();
            let gap_bottom = tip.saturating_add(1);
            if oldest_number > gap_bottom {
                // A gap: fetch the blocks below `oldest` by number, a chunk
                // per round trip, and keep them while they link.
                let top = oldest_number - 1;
                let bottom = top.saturating_sub(GAP_CHUNK - 1).max(gap_bottom);
                let fetched = self.blocks_by_number(bottom, top).await?;
                let before = branch.len();
                for block in fetched.into_iter().rev() {
                    let expected = branch.last().expect("non-empty").parent_hash();
                    if block.hash != expected {
                        break;
                    }
                    branch.push(block);
                }
                if branch.len() > before {
                    continue;
                }
            }
            // A reorg (or a gap that moved under us): walk back by hash.
            match block_by_hash(self.client, parent).await? {
                Some(block) => branch.push(block),
                None => {
                    return Err(NodeError::Decode {
                        method: "eth_getBlockByHash".into(),
                        reason: format!(
                            "the node does not have block {parent}, parent of block {oldest_number}"
                        ),
                    });
                }
            }
        }
    }

    /// Blocks `bottom..=top` with their logs, in two round trips.
    async fn blocks_by_number(&self, bottom: u64, top: u64) -> Result<Vec<Arc<Block>>, NodeError> {
        let calls: Vec<Call> = (bottom..=top)
            .map(|n| Call::new("eth_getBlockByNumber", json!([U64::from(n), true])))
            .collect();
        let mut blocks = Vec::with_capacity(calls.len());
        for raw in self.client.batch(&calls).await? {
            let Some(block): Option<NodeBlock> = decode("eth_getBlockByNumber", &raw)? else {
                break;
            };
            blocks.push(block);
        }
        if blocks.is_empty() {
            return Ok(Vec::new());
        }
        let log_calls: Vec<Call> = blocks
            .iter()
            .map(|b| Call::new("eth_getLogs", json!([{ "blockHash": b.hash() }])))
            .collect();
        let logs = self.client.batch(&log_calls).await?;
        blocks
            .into_iter()
            .zip(logs)
            .map(|(block, raw)| {
                let logs: Vec<Box<RawValue>> = decode("eth_getLogs", &raw)?;
                Ok(block.into_model(&logs))
            })
            .collect()
    }

    /// Sends the queued pending transactions as one batch, skipping those
    /// already announced or already mined.
    async fn flush_pending(
        &mut self,
        queued: &mut Vec<Box<serde_json::value::RawValue>>,
        subs: &Subscriptions,
    ) -> Result<(), SessionError> {
        if queued.is_empty() {
            return Ok(());
        }
        let txs = match self
            .pending_transactions(std::mem::take(queued), subs)
            .await
        {
            Ok(txs) => txs,
            Err(error) => {
                tracing::warn!(chain = %self.chain, %error, "pending transactions dropped");
                return Ok(());
            }
        };
        if txs.is_empty() {
            return Ok(());
        }
        self.out
            .send(SourceEvent::Pending(txs))
            .await
            .map_err(|_| SessionError::Stopping)
    }

    async fn pending_transactions(
        &mut self,
        queued: Vec<Box<serde_json::value::RawValue>>,
        subs: &Subscriptions,
    ) -> Result<Vec<Arc<crate::model::Transaction>>, NodeError> {
        let objects: Vec<NodeTransaction> = if subs.full_pending {
            wire::readable(&queued, "pending transaction", 0).collect()
        } else {
            let hashes: Vec<B256> = queued
                .iter()
                .map(|raw| decode("newPendingTransactions", raw))
                .collect::<Result<Vec<B256>, _>>()?
                .into_iter()
                .filter(|hash| self.delivered.is_new_pending(hash))
                .collect();
            if hashes.is_empty() {
                return Ok(Vec::new());
            }
            let calls: Vec<Call> = hashes
                .iter()
                .map(|h| Call::new("eth_getTransactionByHash", json!([h])))
                .collect();
            let mut objects = Vec::with_capacity(calls.len());
            for raw in self.client.batch(&calls).await? {
                // Mined or dropped since it was announced.
                if let Some(tx) =
                    decode::<Option<NodeTransaction>>("eth_getTransactionByHash", &raw)?
                {
                    objects.push(tx);
                }
            }
            objects
        };
        Ok(objects
            .into_iter()
            .filter(|tx| self.delivered.take_pending(tx.hash()))
            .map(|tx| Arc::new(tx.into_model()))
            .collect())
    }
}

/// Fetches the block `hash` with its logs; `None` if the node no longer has
/// it.
async fn block_by_hash(client: &NodeClient, hash: B256) -> Result<Option<Arc<Block>>, NodeError> {
    let results = client
        .batch(&[
            Call::new("eth_getBlockByHash", json!([hash, true])),
            Call::new("eth_getLogs", json!([{ "blockHash": hash }])),
        ])
        .await?;
    let block: Option<NodeBlock> = decode("eth_getBlockByHash", &results[0])?;
    let logs: Vec<Box<RawValue>> = decode("eth_getLogs", &results[1])?;
    Ok(block.map(|b| b.into_model(&logs)))
}

#[cfg(test)]
mod tests {
    use futures_util::{SinkExt, StreamExt};
    use serde_json::Value;
    use tokio::net::TcpListener;
    use tokio_tungstenite::tungstenite::Message;

    use super::*;

    fn pending_tx(hash: &str) -> Value {
        json!({
            "hash": hash, "type": "0x0", "nonce": "0x0", "gasPrice": "0x1", "gas": "0x5208",
            "from": "0x00000000000000000000000000000000000000aa",
            "to": "0x00000000000000000000000000000000000000bb",
            "value": "0x0", "input": "0x", "v": "0x1b", "r": "0x1", "s": "0x1",
            "blockHash": null, "blockNumber": null, "transactionIndex": null,
        })
    }

    /// Answers one request (or batch) the way a node that refuses full
    /// pending transactions would.
    fn answer(request: &Value) -> Value {
        if let Some(batch) = request.as_array() {
            return Value::Array(batch.iter().map(answer).collect());
        }
        let id = request["id"].clone();
        let params = &request["params"];
        let result = match request["method"].as_str().expect("method") {
            "eth_chainId" => json!("0x89"),
            "eth_subscribe" if params[0] == "newHeads" => json!("0xheads"),
            "eth_subscribe" if params.get(1) == Some(&json!(true)) => {
                return json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32602, "message": "full transactions not supported" } });
            }
            "eth_subscribe" => json!("0xpending"),
            "eth_getBlockByNumber" => Value::Null,
            "eth_getTransactionByHash" => pending_tx(params[0].as_str().expect("hash")),
            other => panic!("unexpected {other}"),
        };
        json!({ "jsonrpc": "2.0", "id": id, "result": result })
    }

    /// A scripted node on a free port: answers with [`answer`], and after
    /// the catch-up (`eth_getBlockByNumber`) sends `after_catch_up`
    /// notifications, then answers nothing more when `then_silent`.
    async fn scripted_node(after_catch_up: Vec<Value>, then_silent: bool) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("ws://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
            let mut silent = false;
            while let Some(Ok(Message::Text(text))) = ws.next().await {
                if silent {
                    continue;
                }
                let request: Value = serde_json::from_str(&text).expect("JSON");
                ws.send(Message::text(answer(&request).to_string()))
                    .await
                    .expect("send");
                if request["method"] == "eth_getBlockByNumber" {
                    for note in &after_catch_up {
                        ws.send(Message::text(note.to_string()))
                            .await
                            .expect("notify");
                    }
                    silent = then_silent;
                }
            }
        });
        url
    }

    fn settings(url: String) -> UpstreamSettings {
        UpstreamSettings {
            chain: "polygon".into(),
            url,
            chain_id: 137,
            backfill_limit: 16,
            resume_from: Vec::new(),
        }
    }

    /// A connection that goes quiet without closing is probed and, when
    /// the probe goes unanswered, dropped and reported.
    #[tokio::test(start_paused = true)]
    async fn a_silent_node_is_probed_and_dropped() {
        let url = scripted_node(Vec::new(), true).await;
        let (_events, mut watcher, shutdown) = follow(url).await;
        let down = watcher
            .wait_for(|s| matches!(s, UpstreamStatus::Down { .. }))
            .await
            .expect("status channel open")
            .clone();
        assert_eq!(
            down,
            UpstreamStatus::Down {
                reason: "eth_chainId got no answer within 30s".into()
            }
        );
        shutdown.cancel();
    }

    /// A node's `eth_subscription` notification.
    fn notification(subscription: &str, result: Value) -> Value {
        json!({ "jsonrpc": "2.0", "method": "eth_subscription", "params": { "subscription": subscription, "result": result } })
    }

    /// Follows the node at `url` as the source does: its events, its
    /// status, and the token that stops it.
    async fn follow(
        url: String,
    ) -> (
        mpsc::Receiver<SourceEvent>,
        watch::Receiver<UpstreamStatus>,
        CancellationToken,
    ) {
        let (out, mut events) = mpsc::channel(16);
        let (status, watcher) = watch::channel(UpstreamStatus::Connecting);
        let shutdown = CancellationToken::new();
        tokio::spawn(run(settings(url), out, status, shutdown.clone()));
        let first = tokio::time::timeout(Duration::from_secs(30), events.recv()).await;
        assert!(
            matches!(first, Ok(Some(SourceEvent::Synced))),
            "a node source has no past: it is synced before it connects"
        );
        (events, watcher, shutdown)
    }

    /// A pending transaction announced while a block is being fetched is
    /// forwarded at once: the node here never answers the block, so the
    /// transaction only arrives if it does not wait behind it.
    #[tokio::test]
    async fn pending_transactions_do_not_wait_behind_a_block_fetch() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("ws://{}", listener.local_addr().expect("addr"));
        let tx = format!("0x{}", "cc".repeat(32));
        let announced = tx.clone();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
            while let Some(Ok(Message::Text(text))) = ws.next().await {
                let request: Value = serde_json::from_str(&text).expect("JSON");
                let method =
                    request.as_array().map_or(&request, |batch| &batch[0])["method"].clone();
                if method == "eth_getBlockByHash" {
                    // Withheld; a pending transaction arrives meanwhile.
                    let note = notification("0xpending", json!(announced));
                    ws.send(Message::text(note.to_string()))
                        .await
                        .expect("notify");
                    continue;
                }
                let answered = Message::text(answer(&request).to_string());
                ws.send(answered).await.expect("send");
                if method == "eth_getBlockByNumber" {
                    let head = json!({ "hash": format!("0x{}", "dd".repeat(32)), "number": "0x5" });
                    let note = notification("0xheads", head).to_string();
                    ws.send(Message::text(note)).await.expect("notify");
                }
            }
        });
        let (mut events, _watcher, shutdown) = follow(url).await;
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("the pending transaction in time")
            .expect("source running");
        let SourceEvent::Pending(txs) = event else {
            panic!("the block was never answered; only the transaction can come");
        };
        assert_eq!(txs.len(), 1);
        assert_eq!(txs[0].hash.to_string(), tx);
        shutdown.cancel();
    }

    /// A node that offers only pending hashes: the source falls back to
    /// fetching the transactions (batched), and announces each once.
    #[tokio::test]
    async fn pending_hashes_are_fetched_and_deduplicated() {
        let (a, b) = (
            format!("0x{}", "aa".repeat(32)),
            format!("0x{}", "bb".repeat(32)),
        );
        // a, then a again, then b.
        let notes = [&a, &a, &b]
            .iter()
            .map(|hash| notification("0xpending", json!(hash)))
            .collect();
        let url = scripted_node(notes, false).await;
        let (mut events, mut watcher, shutdown) = follow(url).await;
        let mut announced = Vec::new();
        while announced.len() < 2 {
            let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
                .await
                .expect("pending in time")
                .expect("source running");
            let SourceEvent::Pending(txs) = event else {
                panic!("only pending transactions were sent");
            };
            announced.extend(txs.iter().map(|tx| tx.hash.to_string()));
        }
        assert_eq!(announced, vec![a, b], "each once, in order");
        assert_eq!(*watcher.borrow_and_update(), UpstreamStatus::Live);
        shutdown.cancel();
    }
}
