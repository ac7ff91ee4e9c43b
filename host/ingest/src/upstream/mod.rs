//! Nodes as a chain's source: one node or several, any speaking Ethereum
//! JSON-RPC over WebSocket (geth, reth, erigon, bsc, bor, anvil), made
//! into one canonical chain (docs/src/nodes.md, Several nodes per chain).
//!
//! Each node is watched by a task of its own ([`watcher`]) that passes on
//! its heads and pending transactions. This module's one task decides:
//! every head updates the node's health and its vote, [`choice`] says
//! which block the chain should be at, and that block is fetched from a
//! node that has it, verified ([`fetch`]), and connected to what was
//! delivered by walking back by parent hash (a reorg) or forward by number
//! (a gap after a reconnect or a node switch), so the canonical tracker
//! downstream always receives linked blocks in ascending order: no gap, no
//! duplicate, whichever node serves them. A break deeper than the backfill
//! limit is logged and resynchronised from the head. Pending transactions
//! from every node are announced once.
//!
//! - `delivered`: what this source has already sent downstream.
//!
//! It talks to the nodes through [`chainsieve_node`]'s pool and reads their
//! JSON with [`chainsieve_model::wire`].

mod choice;
mod delivered;
pub mod drops;
mod fetch;
mod progress;
mod watcher;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::{B256, U64};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use choice::Choice;
use delivered::Delivered;
use fetch::{FETCH_TIMEOUT, Fetched};
use progress::{Progress, Verdict};
use watcher::{HeadRef, NodeEvent, Watched};

use chainsieve_model::wire::{self, NodeTransaction};
use chainsieve_model::{Block, FinalMark, SourceEvent, SourceState, Transaction};
use chainsieve_node::health::Health;
use chainsieve_node::{Call, NodePool, NodeState, Rules, decode};

/// Blocks fetched per round trip while filling a gap.
const GAP_CHUNK: u64 = 32;

/// How often the nodes' health is checked against the clock (a stall is
/// the absence of heads, so no event announces it).
const HEALTH_TICK: Duration = Duration::from_millis(250);

/// How long a node may take to say how far the chain is final; one that
/// is slower is passed over this time.
const FINALITY_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the nodes asked how far the chain is final may take before
/// one more is asked too.
const FINALITY_HEDGE: Duration = Duration::from_secs(1);

/// What the node watchers may have queued for the deciding task.
const EVENT_QUEUE: usize = 1_024;

/// Where and what to follow.
#[derive(Clone, Debug)]
pub struct UpstreamSettings {
    /// The chain's name, for logs.
    pub chain: String,
    /// The chain id the nodes must report.
    pub chain_id: u64,
    /// The most blocks fetched to connect a new head to the last one
    /// delivered (reorg depth or reconnect gap); past it, resynchronise.
    /// The chain's tracker window: deeper history could not be placed.
    pub backfill_limit: u64,
    /// The canonical blocks (number, hash; oldest first) processed before
    /// a restart: the first catch-up fills the gap from them, within the
    /// limit, and undoes those a reorg replaced meanwhile.
    pub resume_from: Vec<(u64, B256)>,
    /// Nodes that must have a block before it goes out.
    pub quorum: usize,
    pub rules: Rules,
}

/// Follows the chain's nodes until `shutdown`. State changes are logged
/// once, not per retry, and published on `status`.
pub async fn run(
    settings: UpstreamSettings,
    pool: Arc<NodePool>,
    out: mpsc::Sender<SourceEvent>,
    status: watch::Sender<SourceState>,
    shutdown: CancellationToken,
) {
    // Nodes have no past to replay before they are followed: what is
    // caught up on after a reconnect is delivered, as subscribers missed it.
    if out.send(SourceEvent::Synced).await.is_err() {
        return;
    }
    // A run starts knowing nothing of the nodes, as at startup: one
    // started again after a panic must not trust the last one's states.
    for node in pool.nodes() {
        *node.health() = Health::default();
    }
    pool.changed();
    let (announce, events) = mpsc::channel(EVENT_QUEUE);
    // The watchers are this task's: they end with it (dropping the set
    // aborts them, a panic's unwinding included), and a watcher's panic
    // is this task's, for its supervisor to start it again.
    let mut watchers = JoinSet::new();
    for (index, node) in pool.nodes().iter().enumerate() {
        let watched = Watched {
            node: index,
            name: node.spec.name.clone(),
            url: node.spec.url.clone(),
            chain: settings.chain.clone(),
            chain_id: settings.chain_id,
        };
        watchers.spawn(watcher::watch(
            watched,
            announce.clone(),
            shutdown.child_token(),
        ));
    }
    drop(announce);
    let mut delivered = Delivered::new(settings.backfill_limit);
    delivered.resume(&settings.resume_from);
    let nodes = pool.nodes().len();
    let mut choice = Choice::new(nodes);
    choice.seed(&settings.resume_from);
    let ingest = Ingest {
        settings: &settings,
        pool: &pool,
        out: &out,
        status: &status,
        choice,
        delivered,
        heads: vec![None; nodes],
        full_pending: vec![false; nodes],
        backlog: VecDeque::new(),
        finality: (None, None),
        progress: Progress::new(Instant::now()),
        obstacle: None,
    };
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = ingest.run(events) => {}
        Some(Err(ended)) = watchers.join_next() => {
            if ended.is_panic() {
                std::panic::resume_unwind(ended.into_panic());
            }
        }
    }
}

/// The receiver is gone: the server is stopping.
struct Stopping;

/// The deciding task's state.
struct Ingest<'a> {
    settings: &'a UpstreamSettings,
    pool: &'a NodePool,
    out: &'a mpsc::Sender<SourceEvent>,
    status: &'a watch::Sender<SourceState>,
    choice: Choice,
    delivered: Delivered,
    /// Each node's latest head, to restore its vote when it counts again.
    heads: Vec<Option<HeadRef>>,
    /// Whether each node sends whole pending transactions.
    full_pending: Vec<bool>,
    /// Events that arrived while a block was fetched, in order.
    backlog: VecDeque<NodeEvent>,
    /// The finality last sent downstream.
    finality: Finality,
    /// Whether the chain moves as its nodes do.
    progress: Progress,
    /// What last kept the chain from the block the nodes are at, if a
    /// delivery failed (else the votes did).
    obstacle: Option<String>,
}

/// A chain's `safe` and `finalized` blocks.
type Finality = (Option<FinalMark>, Option<FinalMark>);

impl Ingest<'_> {
    async fn run(mut self, mut events: mpsc::Receiver<NodeEvent>) {
        let mut tick = tokio::time::interval(HEALTH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let handled = match self.backlog.pop_front() {
                Some(event) => self.on_event(event).await,
                None => tokio::select! {
                    event = events.recv() => match event {
                        Some(event) => self.on_event(event).await,
                        None => return,
                    },
                    _ = tick.tick() => {
                        self.on_tip(Instant::now());
                        Ok(())
                    }
                },
            };
            if handled.is_err() || self.advance(&mut events).await.is_err() {
                return;
            }
        }
    }

    async fn on_event(&mut self, event: NodeEvent) -> Result<(), Stopping> {
        match event {
            NodeEvent::Up { node, full_pending } => {
                self.full_pending[node] = full_pending;
                tracing::info!(chain = %self.settings.chain, node = %self.pool.node(node).spec.name, full_pending, "node connected");
            }
            NodeEvent::Head { node, head } => self.on_head(node, head).await,
            NodeEvent::Pending { node, announced } => {
                self.flush_pending(node, announced).await?;
            }
            NodeEvent::Down { node, reason } => {
                let changed = self.pool.node(node).health().on_down(reason);
                self.changed(node, changed);
            }
        }
        Ok(())
    }

    async fn on_head(&mut self, node: usize, head: HeadRef) {
        let number = head.number.to::<u64>();
        // One node's vote needs no joining to another's; a head already
        // held is linked as far as its ancestry is.
        let alone = self.pool.nodes().len() == 1;
        if !alone && !self.choice.holds(&head.hash) {
            if self.choice.is_empty() {
                // A first start: the branches are joined within DEPTH of
                // the first head, as after a delivery.
                self.choice.delivered_up_to(number);
            }
            if !self.choice.links(number, &head.parent_hash) {
                self.link(node, head).await;
            }
        }
        self.choice.insert(head.hash, number, head.parent_hash);
        self.heads[node] = Some(head);
        let tip = self.delivered.tip();
        let others_count = self
            .pool
            .nodes()
            .iter()
            .enumerate()
            .any(|(i, n)| i != node && n.health().state().counts());
        let rules = self.settings.rules;
        let changed = self.pool.node(node).health().on_head(
            number,
            tip,
            others_count,
            &rules,
            Instant::now(),
        );
        self.changed(node, changed);
        if self.pool.node(node).health().state().counts() {
            self.choice.vote(node, Some(head.hash));
        }
    }

    /// Fetches from `node` the headers between `head` and the tree (the
    /// node skipped announcing them, or the chain restarted behind it), so
    /// its vote counts where it belongs: by number, a chunk per round
    /// trip, kept while they link; by hash where the node's branch moved
    /// under the walk. At most the backfill limit (or [`choice::DEPTH`])
    /// below the head, as far as a delivery could connect.
    async fn link(&mut self, node: usize, head: HeadRef) {
        let top = head.number.to::<u64>();
        let lowest = top.saturating_sub(self.settings.backfill_limit.max(choice::DEPTH));
        // The lowest header placed, as (its number, its parent's hash).
        let mut reached = (top, head.parent_hash);
        while !self.choice.links(reached.0, &reached.1) && reached.0 > lowest.max(1) {
            let below = reached.0 - 1;
            let bottom = below
                .saturating_sub(GAP_CHUNK - 1)
                .max(lowest)
                .max(self.choice.floor());
            let calls: Vec<Call> = (bottom..=below)
                .rev()
                .map(|n| Call::new("eth_getBlockByNumber", json!([U64::from(n), false])))
                .collect();
            let before = reached;
            if let Ok(answers) = self
                .pool
                .node(node)
                .batch_within(&calls, FETCH_TIMEOUT)
                .await
            {
                for answer in &answers {
                    let header = decode::<Option<HeadRef>>("eth_getBlockByNumber", answer);
                    let Ok(Some(header)) = header else { break };
                    if self.choice.links(reached.0, &reached.1) || !self.place(header, &mut reached)
                    {
                        break;
                    }
                }
            }
            if reached == before && !self.link_by_hash(node, &mut reached).await {
                // Unanswered, the vote counts where it can: nothing is lost.
                return;
            }
        }
    }

    /// One step of [`Self::link`] by hash: the parent `reached` names,
    /// placed; false if `node` did not give it.
    async fn link_by_hash(&mut self, node: usize, reached: &mut (u64, B256)) -> bool {
        let calls = [Call::new("eth_getBlockByHash", json!([reached.1, false]))];
        let answer = self
            .pool
            .node(node)
            .batch_within(&calls, FETCH_TIMEOUT)
            .await;
        let header = answer.ok().and_then(|raw| {
            let raw = raw.first()?;
            decode::<Option<HeadRef>>("eth_getBlockByHash", raw).ok()?
        });
        header.is_some_and(|header| self.place(header, reached))
    }

    /// Places `header` in the tree if it is the parent `reached` names,
    /// one below it; then it is the lowest reached.
    fn place(&mut self, header: HeadRef, reached: &mut (u64, B256)) -> bool {
        let number = header.number.to::<u64>();
        if header.hash != reached.1 || number.checked_add(1) != Some(reached.0) {
            return false;
        }
        self.choice.insert(header.hash, number, header.parent_hash);
        *reached = (number, header.parent_hash);
        true
    }

    /// The chain's tip may have moved, or time passed: nodes may now be
    /// lagging or stalled.
    fn on_tip(&mut self, now: Instant) {
        let rules = self.settings.rules;
        let tip = self.delivered.tip();
        if let Some(tip) = tip {
            for node in 0..self.heads.len() {
                let changed = self.pool.node(node).health().on_tip(tip, &rules, now);
                self.changed(node, changed);
            }
        }
        let heads: Vec<u64> = self
            .pool
            .nodes()
            .iter()
            .map(|node| node.health())
            .filter(|health| health.state().counts())
            .filter_map(|health| health.head())
            .collect();
        let quorum = self.settings.quorum;
        let chain = &self.settings.chain;
        let cause = || {
            self.obstacle.clone().unwrap_or_else(|| {
                format!(
                    "no block past it has the heads of {quorum} counting nodes on its branch (chains.{chain}.quorum = {quorum})"
                )
            })
        };
        match self.progress.check(tip, &heads, quorum, &rules, cause, now) {
            Some(Verdict::Stuck(reason)) => {
                tracing::warn!(%chain, %reason, "chain stuck");
                self.publish_status();
            }
            Some(Verdict::Moving) => {
                tracing::info!(%chain, tip, "chain moving again");
                self.publish_status();
            }
            None => {}
        }
    }

    /// A node's state changed (if `changed`): logged, its vote follows, and
    /// the chain's status.
    fn changed(&mut self, node: usize, changed: Option<NodeState>) {
        let Some(state) = changed else { return };
        self.pool.changed();
        let name = &self.pool.node(node).spec.name;
        let chain = &self.settings.chain;
        match state.reason() {
            None => tracing::info!(%chain, node = %name, state = state.name(), "node state"),
            Some(reason) => {
                tracing::warn!(%chain, node = %name, state = state.name(), %reason, "node state");
            }
        }
        let vote = state
            .counts()
            .then(|| self.heads[node].map(|h| h.hash))
            .flatten();
        self.choice.vote(node, vote);
        self.publish_status();
    }

    /// Publishes the chain's status: down with every node's reason when no
    /// node counts, stuck when the chain does not move as its nodes do,
    /// live otherwise.
    fn publish_status(&self) {
        let status = if self.pool.any_counts() {
            match self.progress.stuck() {
                Some(reason) => SourceState::Stuck {
                    reason: reason.to_string(),
                },
                None => SourceState::Live,
            }
        } else {
            let reasons: Vec<String> = self
                .pool
                .states()
                .into_iter()
                .map(|(name, state, _)| match state.reason() {
                    Some(reason) => format!("{name}: {} ({reason})", state.name()),
                    None => format!("{name}: {}", state.name()),
                })
                .collect();
            SourceState::Down {
                reason: reasons.join("; "),
            }
        };
        self.status.send_if_modified(|current| {
            let news = *current != status;
            *current = status;
            news
        });
    }

    /// Goes to the block the nodes agree on, as far as it can now.
    async fn advance(&mut self, events: &mut mpsc::Receiver<NodeEvent>) -> Result<(), Stopping> {
        loop {
            let Some(target) = self
                .choice
                .target(self.settings.quorum, |hash| self.delivered.contains(hash))
            else {
                return Ok(());
            };
            if self.delivered.contains(&target) {
                return Ok(());
            }
            let Some(served_by) = self.deliver(target, events).await? else {
                return Ok(());
            };
            self.follow_finality(served_by).await?;
        }
    }

    /// Asks the nodes how far the chain is final (their `safe` and
    /// `finalized` blocks) and sends it on if it moved. As many counting
    /// nodes as the quorum are asked and the lowest answer taken, so no
    /// single node's claim makes a block final early. A node that fails,
    /// or has not answered after [`FINALITY_HEDGE`], is joined by the next
    /// counting node, so one that hangs holds nothing back. A node that
    /// knows no such tags is passed over.
    async fn follow_finality(&mut self, served_by: usize) -> Result<(), Stopping> {
        // The node that just served a block first: it answers.
        let others = (0..self.heads.len())
            .filter(|&n| n != served_by && self.pool.node(n).health().state().counts());
        let mut candidates = std::iter::once(served_by)
            .chain(others)
            .collect::<Vec<usize>>()
            .into_iter();
        let calls = [
            Call::new("eth_getBlockByNumber", json!(["safe", false])),
            Call::new("eth_getBlockByNumber", json!(["finalized", false])),
        ];
        let pool = self.pool;
        let quorum = self.settings.quorum;
        let ask = |node: usize| pool.node(node).batch_within(&calls, FINALITY_TIMEOUT);
        let mut asking: FuturesUnordered<_> = candidates.by_ref().take(quorum).map(ask).collect();
        let mut answers = Vec::new();
        let mut hedge =
            tokio::time::interval_at(tokio::time::Instant::now() + FINALITY_HEDGE, FINALITY_HEDGE);
        while answers.len() < quorum {
            tokio::select! {
                answer = asking.next() => match answer {
                    Some(Ok(answer)) if answer.len() == 2 => answers.push(answer),
                    // Failed, or not an answer to the two calls.
                    Some(_) => asking.extend(candidates.next().map(ask)),
                    None => break,
                },
                _ = hedge.tick() => asking.extend(candidates.next().map(ask)),
            }
        }
        let mark = |raw: &serde_json::value::RawValue| {
            decode::<Option<HeadRef>>("eth_getBlockByNumber", raw)
                .ok()
                .flatten()
                .map(|head| FinalMark {
                    number: head.number.to(),
                    hash: Some(head.hash),
                })
        };
        // Per grade, the lowest mark; none if any node that answered knows
        // none.
        let lower = |a: Option<FinalMark>, b: Option<FinalMark>| match (a, b) {
            (Some(a), Some(b)) => Some(if b.number < a.number { b } else { a }),
            _ => None,
        };
        let mut lowest: Option<Finality> = None;
        let mut answered = 0;
        for answer in answers {
            let [safe, finalized] = answer.as_slice() else {
                continue;
            };
            answered += 1;
            let marks = (mark(safe), mark(finalized));
            lowest = Some(match lowest {
                None => marks,
                Some(low) => (lower(low.0, marks.0), lower(low.1, marks.1)),
            });
        }
        // Fewer answers than the quorum: no node's word alone makes a
        // block final.
        let Some(lowest) = lowest.filter(|_| answered >= self.settings.quorum) else {
            return Ok(());
        };
        // A node ahead of what was delivered names blocks not placed yet:
        // those marks wait for a later ask.
        let tip = self.delivered.tip_number();
        let placed = |mark: Option<FinalMark>| mark.filter(|m| m.number <= tip);
        let lowest = (placed(lowest.0), placed(lowest.1));
        if lowest == self.finality || lowest == (None, None) {
            return Ok(());
        }
        self.finality = lowest;
        let (safe, finalized) = lowest;
        self.out
            .send(SourceEvent::Finality { safe, finalized })
            .await
            .map_err(|_| Stopping)
    }

    /// The nodes to ask for `hash`: those whose head is on it, then those
    /// that count, then the rest but the down ones.
    fn order(&self, hash: &B256) -> Vec<usize> {
        let has = |node: usize| {
            self.heads[node].is_some_and(|head| self.choice.descends(&head.hash, hash))
        };
        let mut order: Vec<usize> = (0..self.heads.len()).collect();
        order.retain(|&n| !matches!(self.pool.node(n).health().state(), NodeState::Down { .. }));
        order.sort_by_key(|&n| (!has(n), !self.pool.node(n).health().state().counts()));
        order
    }

    /// Fetches `target` and the blocks between it and what was delivered,
    /// and sends them; the node that served it, or `None` if it could not
    /// now. Pending transactions
    /// announced while the target is fetched go out at once; other events
    /// wait in the backlog.
    async fn deliver(
        &mut self,
        target: B256,
        events: &mut mpsc::Receiver<NodeEvent>,
    ) -> Result<Option<usize>, Stopping> {
        let order = self.order(&target);
        let pool = self.pool;
        let fetch = fetch::by_hash(pool, &order, target);
        tokio::pin!(fetch);
        let fetched = loop {
            tokio::select! {
                biased;
                (fetched, aside) = &mut fetch => {
                    self.set_aside(aside);
                    break fetched;
                }
                event = events.recv() => match event {
                    None => return Err(Stopping),
                    Some(NodeEvent::Pending { node, announced }) if self.backlog.is_empty() => {
                        self.flush_pending(node, announced).await?;
                    }
                    Some(other) => self.backlog.push_back(other),
                },
            }
        };
        let (block, served_by) = match fetched {
            Fetched::Block(block, node) => {
                tracing::debug!(chain = %self.settings.chain, block = block.number(), node = %self.pool.node(node).spec.name, "block fetched");
                (block, node)
            }
            // Reorged away before it was asked for; the votes will move.
            Fetched::Missing => return Ok(None),
            Fetched::Failed(reasons) => {
                tracing::warn!(chain = %self.settings.chain, block = %target, %reasons, "no node served the block; retrying as the nodes move");
                self.obstacle = Some(format!("no node served block {target}: {reasons}"));
                return Ok(None);
            }
        };
        if !self.delivered.is_empty() && block.number() < self.delivered.bottom_number() {
            // Older than anything that could still link: stale.
            return Ok(None);
        }
        let (connected, aside) = self.connect(block, served_by, &order).await;
        self.set_aside(aside);
        let branch = match connected {
            Ok(branch) => branch,
            Err(reason) => {
                tracing::warn!(chain = %self.settings.chain, block = %target, %reason, "could not connect the block to the chain; retrying as the nodes move");
                self.obstacle = Some(format!("block {target} does not connect: {reason}"));
                return Ok(None);
            }
        };
        // A reorg: a mark the pipeline refused on the old branch may hold
        // on this one, so the next ask sends it again.
        if branch.last().is_some_and(|oldest| {
            !self.delivered.is_empty() && self.delivered.tip_hash() != Some(oldest.parent_hash())
        }) {
            self.finality = (None, None);
        }
        for block in branch.into_iter().rev() {
            self.delivered.push(&block);
            self.choice
                .insert(block.hash, block.number(), block.parent_hash());
            if self.out.send(SourceEvent::Block(block)).await.is_err() {
                return Err(Stopping);
            }
        }
        self.choice.delivered_up_to(self.delivered.tip_number());
        self.obstacle = None;
        self.on_tip(Instant::now());
        Ok(Some(served_by))
    }

    /// Sets aside the nodes a fetch found serving wrong blocks.
    fn set_aside(&mut self, aside: Vec<(usize, String)>) {
        for (node, reason) in aside {
            let changed = self.pool.node(node).health().on_excluded(reason);
            self.changed(node, changed);
        }
    }

    /// The blocks from `head` down to the first whose parent was delivered,
    /// newest first (only `head` when that is further than the limit), and
    /// the nodes found serving wrong blocks meanwhile.
    async fn connect(
        &self,
        head: Arc<Block>,
        served_by: usize,
        order: &[usize],
    ) -> (Result<Vec<Arc<Block>>, String>, Vec<(usize, String)>) {
        let mut aside = Vec::new();
        let branch = self.walk_back(head, served_by, order, &mut aside).await;
        (branch, aside)
    }

    async fn walk_back(
        &self,
        head: Arc<Block>,
        served_by: usize,
        order: &[usize],
        aside: &mut Vec<(usize, String)>,
    ) -> Result<Vec<Arc<Block>>, String> {
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
            if !reachable || branch.len() as u64 > self.settings.backfill_limit {
                let head = branch.swap_remove(0);
                tracing::error!(
                    chain = %self.settings.chain, head = head.number(), limit = self.settings.backfill_limit,
                    "the new head does not connect to the delivered blocks within the backfill limit (a deeper reorg or a longer outage); resynchronising from it"
                );
                return Ok(vec![head]);
            }
            let gap_bottom = self.delivered.tip_number().saturating_add(1);
            if oldest_number > gap_bottom {
                // A gap: the blocks below `oldest` by number from the node
                // that served the head, a chunk per round trip, kept while
                // they link.
                let top = oldest_number - 1;
                let bottom = top.saturating_sub(GAP_CHUNK - 1).max(gap_bottom);
                match fetch::range(self.pool, served_by, bottom, top).await {
                    Ok(fetched) => {
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
                    Err(reason) => {
                        tracing::debug!(chain = %self.settings.chain, %reason, "filling the gap by number failed; walking back by hash");
                    }
                }
            }
            // A reorg (or a gap that moved under us): walk back by hash.
            let (fetched, wrong) = fetch::by_hash(self.pool, order, parent).await;
            aside.extend(wrong);
            match fetched {
                Fetched::Block(block, _) => branch.push(block),
                Fetched::Missing => {
                    return Err(format!(
                        "no node has block {parent}, parent of block {oldest_number}"
                    ));
                }
                Fetched::Failed(reasons) => return Err(reasons),
            }
        }
    }

    /// Sends the pending transactions `node` announced, skipping those
    /// already announced (by any node) or already mined.
    async fn flush_pending(
        &mut self,
        node: usize,
        announced: Vec<Box<serde_json::value::RawValue>>,
    ) -> Result<(), Stopping> {
        let txs = match self.pending_transactions(node, announced).await {
            Ok(txs) => txs,
            Err(error) => {
                tracing::warn!(chain = %self.settings.chain, node = %self.pool.node(node).spec.name, %error, "pending transactions dropped");
                return Ok(());
            }
        };
        if txs.is_empty() {
            return Ok(());
        }
        self.out
            .send(SourceEvent::Pending {
                txs,
                seen_by: Some(self.pool.node(node).spec.name.as_str().into()),
            })
            .await
            .map_err(|_| Stopping)
    }

    async fn pending_transactions(
        &mut self,
        node: usize,
        announced: Vec<Box<serde_json::value::RawValue>>,
    ) -> Result<Vec<Arc<Transaction>>, chainsieve_node::NodeError> {
        let objects: Vec<NodeTransaction> = if self.full_pending[node] {
            wire::readable(&announced, "pending transaction", 0).collect()
        } else {
            let hashes: Vec<B256> = announced
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
            let answers = self
                .pool
                .node(node)
                .batch_within(&calls, FETCH_TIMEOUT)
                .await?;
            for raw in answers {
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

#[cfg(test)]
mod tests {
    use futures_util::{SinkExt, StreamExt};
    use serde_json::Value;
    use tokio::net::TcpListener;
    use tokio_tungstenite::tungstenite::Message;

    use super::*;
    use chainsieve_config::NodeSpec;

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
            // The source's subscription, and the pool's request connection.
            while let Ok((tcp, _)) = listener.accept().await {
                let after_catch_up = after_catch_up.clone();
                tokio::spawn(async move {
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
            }
        });
        url
    }

    fn settings() -> UpstreamSettings {
        UpstreamSettings {
            chain: "polygon".into(),
            chain_id: 137,
            backfill_limit: 16,
            resume_from: Vec::new(),
            quorum: 1,
            rules: Rules {
                lag_blocks: 3,
                stall_after: Duration::from_secs(6),
                rejoin_heads: 3,
            },
        }
    }

    /// A connection that goes quiet without closing is probed and, when
    /// the probe goes unanswered, dropped and reported.
    #[tokio::test(start_paused = true)]
    async fn a_silent_node_is_probed_and_dropped() {
        let url = scripted_node(Vec::new(), true).await;
        let (_events, mut watcher, shutdown) = follow(url).await;
        let down = watcher
            .wait_for(|s| matches!(s, SourceState::Down { .. }))
            .await
            .expect("status channel open")
            .clone();
        assert_eq!(
            down,
            SourceState::Down {
                reason: "scripted: down (eth_chainId got no answer within 30s)".into()
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
        watch::Receiver<SourceState>,
        CancellationToken,
    ) {
        let (out, mut events) = mpsc::channel(16);
        let (status, watcher) = watch::channel(SourceState::Connecting);
        let shutdown = CancellationToken::new();
        let specs = [NodeSpec::new("scripted", url)];
        let pool = Arc::new(NodePool::new("polygon", &specs, &Default::default()));
        tokio::spawn(run(settings(), pool, out, status, shutdown.clone()));
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
        // Notifications go to every connection (the source's subscription
        // reads them; the pool's request connection drops them).
        let (notes, _) = tokio::sync::broadcast::channel::<String>(16);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (notes, announced) = (notes.clone(), announced.clone());
                let mut heard = notes.subscribe();
                tokio::spawn(async move {
                    let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
                    loop {
                        let text = tokio::select! {
                            frame = ws.next() => match frame {
                                Some(Ok(Message::Text(text))) => text,
                                _ => return,
                            },
                            note = heard.recv() => {
                                let Ok(note) = note else { return };
                                ws.send(Message::text(note)).await.expect("notify");
                                continue;
                            }
                        };
                        let request: Value = serde_json::from_str(&text).expect("JSON");
                        let method =
                            request.as_array().map_or(&request, |batch| &batch[0])["method"]
                                .clone();
                        if method == "eth_getBlockByHash" {
                            // Withheld; a pending transaction arrives meanwhile.
                            let _ =
                                notes.send(notification("0xpending", json!(announced)).to_string());
                            continue;
                        }
                        let answered = Message::text(answer(&request).to_string());
                        ws.send(answered).await.expect("send");
                        if method == "eth_getBlockByNumber" {
                            let head = json!({
                                "hash": format!("0x{}", "dd".repeat(32)),
                                "parentHash": format!("0x{}", "de".repeat(32)),
                                "number": "0x5",
                            });
                            let _ = notes.send(notification("0xheads", head).to_string());
                        }
                    }
                });
            }
        });
        let (mut events, _watcher, shutdown) = follow(url).await;
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("the pending transaction in time")
            .expect("source running");
        let SourceEvent::Pending { txs, .. } = event else {
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
            let SourceEvent::Pending { txs, .. } = event else {
                panic!("only pending transactions were sent");
            };
            announced.extend(txs.iter().map(|tx| tx.hash.to_string()));
        }
        assert_eq!(announced, vec![a, b], "each once, in order");
        // The node has no block yet: connected, never down.
        assert_eq!(*watcher.borrow_and_update(), SourceState::Connecting);
        shutdown.cancel();
    }
}
