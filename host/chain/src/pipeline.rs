//! The seam between a chain's source and its consumers. The pipeline is fed
//! by any ordered stream of [`SourceEvent`]s — the devnet, a node, and next
//! a bus — and knows neither where they come from nor any socket: blocks go
//! through the canonical tracker into the window, every canonical change
//! goes to the price index and is appended to the chain's event log, and
//! once the source is synced each logged step is split into stream batches
//! and handed to the actors of that stream (docs/src/architecture.md, Data
//! flow).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_primitives::B256;

use chainsieve_filter_core::Source;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use chainsieve_eventlog::cursor::Cursor;
use chainsieve_eventlog::store::Persist;
use chainsieve_eventlog::{EventLog, Position, Step};
use chainsieve_fanout::Together;
use chainsieve_filters::FilterHandle;
use chainsieve_filters::batch::EventBatch;
use chainsieve_ingest::canonical::CanonicalChain;
use chainsieve_model::lifecycle::Turn;
use chainsieve_model::{ChainEvent, FinalMark, Grade, SourceEvent};
use chainsieve_price::Feed;
use chainsieve_runtime::metrics::Metrics;
use chainsieve_watchlists::views::View;
use chainsieve_watchlists::{Seq, Watchlists};

use crate::lifecycle::{Tracker, TrackerSettings};

/// What the pipeline writes and the chain's readers (RPC methods, the hot
/// swap, the probes) share with it.
#[derive(Debug)]
pub struct PipelineState {
    /// The recent canonical blocks. Written only by the pipeline; read by
    /// RPC methods. Never held across an await.
    window: RwLock<CanonicalChain>,
    /// One actor per topic. Replaced whole (copy on write) when a topic is
    /// added or removed; readers clone the `Arc` and never hold the lock.
    topics: RwLock<Arc<BTreeMap<String, FilterHandle>>>,
    /// Set once the source's past is in place: until then nothing is
    /// notified and the chain is not ready.
    synced: watch::Sender<bool>,
    /// Every canonical change, in order; written only by the pipeline.
    log: Arc<EventLog>,
    /// The last watchlist edit the pipeline placed in the log, and where:
    /// what an edit's answer reports for this chain.
    watch_points: watch::Sender<WatchPoint>,
    /// Where each transaction's life has come to. Only the pipeline takes
    /// it (a std mutex, as the pipeline is cloned for an ingest's terms but
    /// one chain has one tracker), never across an await; `/metrics` reads
    /// how many it follows.
    lifecycle: Mutex<Tracker>,
}

/// Where a chain placed a watchlist edit: every event after `after` is
/// matched against the watchlists as of `edit` (and the edits before it),
/// every event before against the set before (docs/src/watchlists.md,
/// Where an edit applies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchPoint {
    pub edit: Seq,
    /// The log's head cursor just after the edit's step; `None` for the
    /// edits in force when the chain started (they apply to everything it
    /// serves).
    pub after: Option<Cursor>,
}

impl PipelineState {
    /// A window of `window` blocks, the actors of `topics`, `log`, and a
    /// lifecycle tracker of `tracking`; the window starts from the
    /// canonical blocks the log holds (a restored log's, after a restart),
    /// the tracker from the turns it holds.
    pub fn new(
        window: usize,
        topics: BTreeMap<String, FilterHandle>,
        log: Arc<EventLog>,
        tracking: TrackerSettings,
    ) -> Self {
        let mut canonical = CanonicalChain::new(window);
        for block in log.canonical(window) {
            canonical.follow(&ChainEvent::Added(block));
        }
        let mut tracker = Tracker::new(tracking);
        for position in log.oldest()..=log.head() {
            if let Some(step) = log.get(position)
                && let ChainEvent::Lifecycle(turns) = &step.change
            {
                turns.iter().for_each(|turn| tracker.follow(turn));
            }
        }
        Self {
            lifecycle: Mutex::new(tracker),
            window: RwLock::new(canonical),
            topics: RwLock::new(Arc::new(topics)),
            synced: watch::Sender::new(false),
            log,
            watch_points: watch::Sender::new(WatchPoint {
                edit: 0,
                after: None,
            }),
        }
    }

    /// Where the chain placed the watchlist edits, as it places them.
    pub fn watch_points(&self) -> watch::Receiver<WatchPoint> {
        self.watch_points.subscribe()
    }

    /// The chain's event log.
    pub fn log(&self) -> &Arc<EventLog> {
        &self.log
    }

    /// Read access to the recent canonical blocks.
    pub fn window(&self) -> RwLockReadGuard<'_, CanonicalChain> {
        // A panic while holding the lock cannot leave the window half
        // updated in a way readers care about; keep serving.
        self.window
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The actors serving topics now.
    pub fn topics(&self) -> Arc<BTreeMap<String, FilterHandle>> {
        self.topics
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Serves `handle`'s topic from the next batch on.
    pub fn add_topic(&self, handle: FilterHandle) {
        self.update_topics(|topics| {
            topics.insert(handle.topic.to_string(), handle);
        });
    }

    /// Stops feeding `topic`; returns its actor for the caller to retire.
    pub fn remove_topic(&self, topic: &str) -> Option<FilterHandle> {
        let mut removed = None;
        self.update_topics(|topics| removed = topics.remove(topic));
        removed
    }

    fn update_topics(&self, change: impl FnOnce(&mut BTreeMap<String, FilterHandle>)) {
        let mut current = self
            .topics
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut next = (**current).clone();
        change(&mut next);
        *current = Arc::new(next);
    }

    /// Starts the lifecycle tracker afresh: a new ingest term follows the
    /// log's tail into it, as a restart does.
    pub fn restart_lifecycle(&self) {
        let mut tracker = self.lifecycle();
        *tracker = tracker.restarted();
    }

    /// The lifecycle tracker, to take a change or read.
    pub fn lifecycle(&self) -> MutexGuard<'_, Tracker> {
        // A poisoned tracker is still the latest state followed.
        self.lifecycle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the source's past is in place.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Watches [`PipelineState::is_synced`].
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }
}

/// Logged steps that may wait for the task persisting, archiving or
/// publishing them; past that the pipeline waits, and the source with it
/// (docs/src/operations.md, Queues).
pub const PERSIST_QUEUE: usize = 4_096;

/// One chain's pipeline; [`Pipeline::run`] drives it from a source.
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// The chain's name, for logs and cursors.
    chain: Arc<str>,
    state: Arc<PipelineState>,
    /// Canonical changes for the price indexer, in order (`None` where
    /// the index is kept from elsewhere: an edge's from the bus, an
    /// ingest's from what its publisher has published). Bounded: an
    /// indexer that falls [`chainsieve_price::FEED_QUEUE`] changes behind
    /// makes the pipeline wait, and the source with it.
    price: Option<mpsc::Sender<Feed>>,
    /// Logged steps for the task that persists, archives or publishes
    /// them. Bounded: a disk or bus that falls [`PERSIST_QUEUE`] steps
    /// behind makes the pipeline wait, never forget a step.
    persist: Option<mpsc::Sender<Persist>>,
    /// Events ingested per stream, in [`stream_slot`] order.
    ingested: [Counter; 5],
    /// The watchlists, where the role keeps them: each edit is placed in
    /// the log as a step, and every batch after it holds its view.
    watching: Option<Watching>,
    /// Where pending transactions due a check go, on a chain of nodes
    /// (docs/src/api.md, A transaction's life).
    drops: Option<DropChecks>,
}

/// The task asking a chain's nodes whether they still hold transactions
/// long pending: it answers a [`SourceEvent::Dropped`] of those none holds.
#[derive(Clone, Debug)]
pub struct DropChecks {
    /// Bounded ([`DROP_CHECK_QUEUE`]): a full queue leaves the hashes to
    /// the next round rather than holding the chain back.
    pub asks: mpsc::Sender<Vec<B256>>,
    /// How often the tracker is asked which are due.
    pub every: Duration,
}

impl DropChecks {
    /// How often to ask which are due when each is asked about
    /// `drop_after` after it was seen (and again as often): a few times
    /// as often keeps that.
    pub fn round(drop_after: Duration) -> Duration {
        (drop_after / 4).clamp(Duration::from_millis(100), Duration::from_secs(10))
    }
}

/// Rounds of hashes that may wait for the drop checker.
pub const DROP_CHECK_QUEUE: usize = 4;

/// The watchlists a pipeline places edits of, and the view its batches
/// hold now.
#[derive(Clone, Debug)]
struct Watching {
    lists: Arc<Watchlists>,
    current: Arc<View>,
}

/// A stream's place in [`Pipeline::ingested`].
fn stream_slot(source: Source) -> usize {
    match source {
        Source::PendingTransactions => 0,
        Source::MinedTransactions => 1,
        Source::Heads => 2,
        Source::Logs => 3,
        Source::Lifecycle => 4,
    }
}

impl Pipeline {
    pub fn new(
        chain: &str,
        state: Arc<PipelineState>,
        price: Option<mpsc::Sender<Feed>>,
        persist: Option<mpsc::Sender<Persist>>,
        metrics: &Metrics,
    ) -> Self {
        Self {
            chain: chain.into(),
            state,
            price,
            persist,
            ingested: [
                Source::PendingTransactions,
                Source::MinedTransactions,
                Source::Heads,
                Source::Logs,
                Source::Lifecycle,
            ]
            .map(|source| metrics.events(chain, source.name())),
            watching: None,
            drops: None,
        }
    }

    /// This pipeline, handing the pending transactions due a check to
    /// `drops`.
    pub fn checking_drops(self, drops: DropChecks) -> Self {
        Self {
            drops: Some(drops),
            ..self
        }
    }

    /// This pipeline, placing `lists`' edits in the log from the one in
    /// force now on.
    pub fn watching(self, lists: Arc<Watchlists>) -> Self {
        let edit = lists.index().seq();
        self.state
            .watch_points
            .send_replace(WatchPoint { edit, after: None });
        let current = Arc::new(lists.view(edit));
        Self {
            watching: Some(Watching { lists, current }),
            ..self
        }
    }

    /// What the pipeline writes.
    pub fn state(&self) -> &Arc<PipelineState> {
        &self.state
    }

    /// This pipeline, handing the steps it appends to `persist` (a writer
    /// or a publisher) instead.
    pub fn persisting_to(&self, persist: mpsc::Sender<Persist>) -> Self {
        Self {
            persist: Some(persist),
            ..self.clone()
        }
    }

    /// Takes `source`'s events in order until it ends or `shutdown`.
    pub async fn run(
        mut self,
        mut source: mpsc::Receiver<SourceEvent>,
        shutdown: CancellationToken,
    ) {
        let mut edits = self.watching.as_ref().map(|w| w.lists.edits());
        let mut checks = self
            .drops
            .as_ref()
            .map(|drops| tokio::time::interval(drops.every));
        loop {
            let event = tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                // An edit is placed between two source events, whatever
                // the source's pace.
                Some(edit) = next_edit(edits.as_mut()) => {
                    self.place_edit(edit).await;
                    continue;
                }
                Some(()) = next_check(checks.as_mut()) => {
                    self.ask_drops();
                    continue;
                }
                event = source.recv() => event,
            };
            let Some(event) = event else {
                // A source stops with the server too: news only otherwise.
                if !shutdown.is_cancelled() {
                    tracing::warn!(chain = %self.chain, "source stopped");
                }
                return;
            };
            self.apply(event).await;
        }
    }

    /// Takes one source event through, waiting for room in the actors'
    /// queues (which pushes back on the source).
    pub async fn apply(&mut self, event: SourceEvent) {
        if matches!(event, SourceEvent::Synced) {
            // Ready once the past answers `token_price` too; what the source
            // sends meanwhile waits (an indexer that stopped does not hold
            // the chain back).
            let (done, indexed) = oneshot::channel();
            if let Some(price) = &self.price
                && price.send(Feed::Flush(done)).await.is_ok()
            {
                let _ = indexed.await;
            }
            if !self.state.synced.send_replace(true) {
                let tip = self
                    .state
                    .window()
                    .tip()
                    .map(|block| (block.number(), block.hash));
                match tip {
                    Some((block, hash)) => {
                        tracing::info!(chain = %self.chain, block, %hash, position = self.state.log.head(), "chain ready: its past is in place");
                    }
                    None => {
                        tracing::info!(chain = %self.chain, "chain ready: no block yet, the first comes live");
                    }
                }
            }
            return;
        }
        let now_ms = unix_ms(SystemTime::now());
        match event {
            SourceEvent::Finality { safe, finalized } => {
                // Both grades' turns in one step.
                let mut turns = Vec::new();
                for (grade, mark) in [(Grade::Safe, safe), (Grade::Finalized, finalized)] {
                    if let Some(height) = self.finalize(grade, mark) {
                        turns.extend(self.state.lifecycle().finality(grade, height));
                    }
                }
                self.tell(turns).await;
            }
            SourceEvent::Logged { position, change } => {
                self.window().follow(&change);
                if let ChainEvent::Lifecycle(turns) = &change {
                    let mut tracker = self.state.lifecycle();
                    turns.iter().for_each(|turn| tracker.follow(turn));
                }
                self.take(Some(position), change).await;
            }
            SourceEvent::Pending { txs, seen_by } => {
                let turns = self
                    .state
                    .lifecycle()
                    .pending(&txs, seen_by.as_ref(), now_ms);
                self.take(None, ChainEvent::Pending(txs)).await;
                self.tell(turns).await;
            }
            SourceEvent::Dropped(hashes) => {
                let turns = self.state.lifecycle().dropped(&hashes);
                self.tell(turns).await;
            }
            SourceEvent::Block(block) => {
                for change in self.order(block) {
                    let turns = match &change {
                        ChainEvent::Added(block) => self.state.lifecycle().added(block, now_ms),
                        ChainEvent::Removed(block) => self.state.lifecycle().removed(block, now_ms),
                        _ => Vec::new(),
                    };
                    self.take(None, change).await;
                    self.tell(turns).await;
                }
            }
            SourceEvent::Synced => {}
        }
    }

    /// Logs `turns` as a step of their own (none when there are none).
    async fn tell(&mut self, turns: Vec<Turn>) {
        if !turns.is_empty() {
            self.take(None, ChainEvent::Lifecycle(turns.into())).await;
        }
    }

    /// Hands the pending transactions due a check to the drop checker: a
    /// place in its queue first, so a busy checker leaves them due for the
    /// next round.
    fn ask_drops(&self) {
        let Some(drops) = &self.drops else { return };
        let Ok(place) = drops.asks.try_reserve() else {
            tracing::debug!(chain = %self.chain, "the drop checker is busy; its hashes wait a round");
            return;
        };
        let due = self.state.lifecycle().due(unix_ms(SystemTime::now()));
        if !due.is_empty() {
            place.send(due);
        }
    }

    /// Places watchlist edit `edit` in the log, unless an edit at or after
    /// it already is.
    async fn place_edit(&mut self, edit: Seq) {
        if self
            .watching
            .as_ref()
            .is_some_and(|w| w.current.edit() < edit)
        {
            self.take(None, ChainEvent::Watch(edit)).await;
        }
    }

    /// Takes one canonical change to the price index and the log (at
    /// `position` if another log gave it one, else at the next, and then
    /// to the writer persisting or publishing it), and once
    /// the source is synced to the actors: the source's past is placed and
    /// logged, never notified.
    async fn take(&mut self, position: Option<Position>, change: ChainEvent) {
        let step = match position {
            Some(position) => self.state.log.append_at(position, change),
            None => self.state.log.append(change),
        };
        if let (ChainEvent::Watch(edit), Some(watching)) = (&step.change, &mut self.watching) {
            watching.current = Arc::new(watching.lists.view(*edit));
            self.state.watch_points.send_replace(WatchPoint {
                edit: *edit,
                after: self.state.log.head_cursor(),
            });
        }
        if let (Some(price), Some(feed)) = (&self.price, Feed::of(step.position, &step.change)) {
            // The indexer stops only at shutdown (or fails, its part then
            // reported): a closed queue is no reason to stop the chain.
            let _ = price.send(feed).await;
        }
        // A step another log numbered is kept there already.
        if let Some(persist) = self.persist.as_ref().filter(|_| position.is_none()) {
            // The writer stops only after the pipeline (or fails, and the
            // server stops).
            let _ = persist
                .send(Persist {
                    step: step.clone(),
                    oldest: self.state.log.oldest(),
                })
                .await;
        }
        if self.state.is_synced() {
            self.dispatch(&step).await;
        }
    }

    /// Raises `grade` to `mark` if the mark's block is the canonical one at
    /// its height (a node on another branch does not finalize this one's
    /// blocks); a mark older than the window is taken as it is. The height
    /// reached, if it rose.
    fn finalize(&self, grade: Grade, mark: Option<FinalMark>) -> Option<u64> {
        let mark = mark?;
        let canonical = mark.hash.is_none_or(|hash| {
            let window = self
                .state
                .window
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match window.by_number(mark.number) {
                Some(block) => block.hash == hash,
                None => window.oldest().is_some_and(|o| mark.number < o.number()),
            }
        });
        if canonical && self.state.log.raise_finality(grade, mark.number) {
            tracing::debug!(chain = %self.chain, ?grade, block = mark.number, "finality rose");
            return Some(mark.number);
        }
        None
    }

    fn window(&self) -> RwLockWriteGuard<'_, CanonicalChain> {
        self.state
            .window
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a block through the canonical tracker.
    fn order(&self, block: Arc<chainsieve_model::Block>) -> Vec<ChainEvent> {
        let mut window = self.window();
        match window.apply(block.clone()) {
            Ok(changes) => changes,
            Err(error) => {
                tracing::error!(chain = %self.chain, %error, "cannot place block; resynchronising from it");
                window.reset(block)
            }
        }
    }

    /// Hands the step's batches to the actors of their streams. An actor
    /// without subscribers is skipped: one that gains a resuming
    /// subscription reads what it skipped from the log (the subscriber
    /// count it raised first is seen here, as the append came after).
    ///
    /// When several actors take the step and none has batches waiting,
    /// they deliver it [`Together`]: a connection gets the step in one
    /// write once the last is done. The last batch is moved, not cloned,
    /// into its last actor, so that write is made on an actor's thread.
    async fn dispatch(&self, step: &Step) {
        let topics = self.state.topics();
        let mut deliveries: Vec<(EventBatch, Vec<&FilterHandle>)> =
            EventBatch::of_step(step, &self.chain)
                .into_iter()
                .map(|batch| {
                    let takers = topics
                        .values()
                        .filter(|filter| filter.source == batch.source && filter.has_subscribers())
                        .collect();
                    (batch, takers)
                })
                .collect();
        let mut takers = deliveries.iter().flat_map(|(_, takers)| takers);
        if takers.clone().count() > 1 && takers.all(|filter| filter.is_idle()) {
            let together = Arc::new(Together::default());
            for (batch, _) in &mut deliveries {
                batch.deliver_together(together.clone());
            }
        }
        for (batch, takers) in &mut deliveries {
            if let (Some(watching), false) = (&self.watching, takers.is_empty()) {
                batch.hold_view(watching.current.clone());
            }
        }
        for (batch, takers) in deliveries {
            self.ingested[stream_slot(batch.source)].inc_by(batch.len() as u64);
            let batch = Arc::new(batch);
            let Some((last, others)) = takers.split_last() else {
                continue;
            };
            for filter in others {
                self.hand(filter, batch.clone()).await;
            }
            self.hand(last, batch).await;
        }
    }

    async fn hand(&self, filter: &FilterHandle, batch: Arc<EventBatch>) {
        if !filter.send_batch(batch).await {
            tracing::error!(chain = %self.chain, topic = %filter.topic, "filter actor stopped");
        }
    }
}

/// The next round of drop checks; never, without a checker.
async fn next_check(checks: Option<&mut tokio::time::Interval>) -> Option<()> {
    match checks {
        Some(checks) => {
            checks.tick().await;
            Some(())
        }
        None => std::future::pending().await,
    }
}

/// Milliseconds since the Unix epoch at `now` (0 before it).
fn unix_ms(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// The next edit `edits` says was applied; never, without watchlists.
async fn next_edit(edits: Option<&mut watch::Receiver<Seq>>) -> Option<Seq> {
    match edits {
        Some(edits) => match edits.changed().await {
            Ok(()) => Some(*edits.borrow_and_update()),
            // The service is gone (the server stops): no more edits.
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use chainsieve_fanout::testing::Pipe;
    use chainsieve_fanout::{Frames, Sink};
    use chainsieve_filters::testing::{self, builtin, subscribe_all, to_everything};
    use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
    use chainsieve_model::Block;

    /// A built-in topic's actor with one subscriber to everything, and the
    /// subscriber's frames.
    async fn actor(topic: &str, log: &Arc<EventLog>) -> (FilterHandle, Frames) {
        let (engine, component) = builtin(topic);
        let metrics = Metrics::default().actor("eth", topic);
        let handle = FilterHandle::spawn(engine, component, log, metrics).expect("actor");
        let frames = subscribe_all(&handle, 1).await;
        (handle, frames)
    }

    /// A pipeline over `topics` writing `log`, and what its price indexer
    /// was handed (a stand-in indexer that answers flushes at once).
    fn pipeline(
        topics: BTreeMap<String, FilterHandle>,
        log: Arc<EventLog>,
    ) -> (
        Pipeline,
        Arc<PipelineState>,
        mpsc::UnboundedReceiver<ChainEvent>,
    ) {
        let state = Arc::new(PipelineState::new(
            128,
            topics,
            log,
            TrackerSettings::default(),
        ));
        let (price, mut feed) = mpsc::channel(chainsieve_price::FEED_QUEUE);
        let (changes, indexed) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(next) = feed.recv().await {
                match next {
                    Feed::Change { change, .. } => {
                        let _ = changes.send(change);
                    }
                    Feed::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        let pipeline = Pipeline::new("eth", state.clone(), Some(price), None, &Metrics::default());
        (pipeline, state, indexed)
    }

    /// The devnet's next `count` blocks (what it announces pending between
    /// them left out).
    fn blocks(devnet: &mut Devnet, count: usize) -> Vec<Arc<Block>> {
        std::iter::repeat_with(|| devnet.next_step())
            .flatten()
            .filter_map(|event| match event {
                SourceEvent::Block(block) => Some(block),
                SourceEvent::Pending { .. }
                | SourceEvent::Synced
                | SourceEvent::Logged { .. }
                | SourceEvent::Finality { .. }
                | SourceEvent::Dropped(_) => None,
            })
            .take(count)
            .collect()
    }

    /// The next notification's `params`: subscription, result, cursor.
    async fn next_params(frames: &mut Frames) -> Value {
        let frame = tokio::time::timeout(Duration::from_secs(30), frames.recv())
            .await
            .expect("a frame in time")
            .expect("the sink is open");
        let frame: Value = serde_json::from_str(&frame.to_text()).expect("JSON");
        frame["params"].clone()
    }

    async fn next_result(frames: &mut Frames) -> Value {
        next_params(frames).await["result"].clone()
    }

    fn devnet() -> Devnet {
        Devnet::new(1, &DevnetSettings::default())
    }

    /// A block's heads and logs reach a connection subscribed to both in
    /// one write, made once both actors are done with the block.
    #[tokio::test]
    async fn a_steps_topics_reach_a_connection_in_one_write() {
        let log = testing::log();
        let mut topics = BTreeMap::new();
        for topic in ["newHeads", "logs"] {
            let (engine, component) = builtin(topic);
            let metrics = Metrics::default().actor("eth", topic);
            let handle = FilterHandle::spawn(engine, component, &log, metrics).expect("actor");
            topics.insert(topic.to_string(), handle);
        }
        let pipe = Pipe::with_room(1 << 20);
        let (sink, mut frames) = Sink::wired(1_024, pipe.wire(), None);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let (mut taken, mut unwritten) = (std::collections::VecDeque::new(), Vec::new());
        let round = frames.poll_take(&mut cx, &mut taken, &mut unwritten, 8);
        assert!(round.is_pending(), "the writer waits");
        for (key, topic) in [(1, "newHeads"), (2, "logs")] {
            topics[topic]
                .subscribe(to_everything(key, sink.clone()))
                .await
                .expect("subscribed");
        }
        let (mut pipeline, _state, _indexed) = pipeline(topics, log);
        let mut devnet = devnet();
        pipeline.apply(SourceEvent::Block(devnet.genesis())).await;
        let logged = loop {
            let block = blocks(&mut devnet, 1).remove(0);
            if !block.logs.is_empty() {
                break block;
            }
            pipeline.apply(SourceEvent::Block(block)).await;
        };
        pipeline.apply(SourceEvent::Synced).await;
        pipeline.apply(SourceEvent::Block(logged.clone())).await;
        pipe.written().await;
        let taken = String::from_utf8_lossy(&pipe.taken()).into_owned();
        assert!(
            taken.contains(r#""subscription":"0x1""#),
            "the head: {taken}"
        );
        assert!(
            taken.matches(r#""subscription":"0x2""#).count() == logged.logs.len(),
            "every log: {taken}"
        );
        assert_eq!(pipe.writes(), 1, "in one write");
    }

    /// A watchlist edit is placed in the log as a step of its own between
    /// the source's events, wherever the source is, and the chain says
    /// where: the head cursor just after it, which the next block's events
    /// follow.
    #[tokio::test]
    async fn an_edit_is_placed_between_two_steps_and_its_point_told() {
        use chainsieve_runtime::queues::Queues;
        use chainsieve_runtime::tasks::Tasks;
        use chainsieve_watchlists::Most;
        use chainsieve_watchlists::store::EmbeddedWatchlists;

        let stop = CancellationToken::new();
        let tasks = Tasks::new(stop.clone());
        let store = Arc::new(EmbeddedWatchlists::open(None).expect("store"));
        let lists = Watchlists::start(store, &tasks, &Queues::default(), stop.clone())
            .await
            .expect("watchlists");
        let log = testing::log();
        let (pipeline, state, _indexed) = pipeline(BTreeMap::new(), log.clone());
        let mut points = state.watch_points();
        // Room for one: a send returns once the pipeline took the event
        // before.
        let (events, source) = mpsc::channel(1);
        tokio::spawn(pipeline.watching(lists.clone()).run(source, stop.clone()));
        let mut devnet = devnet();
        events
            .send(SourceEvent::Block(devnet.genesis()))
            .await
            .expect("open");
        events.send(SourceEvent::Synced).await.expect("open");
        let first = blocks(&mut devnet, 1).remove(0);
        events
            .send(SourceEvent::Block(first.clone()))
            .await
            .expect("open");
        // Two events that change nothing: once the second is in, the
        // block before the first was applied.
        let applied = || async {
            for _ in 0..2 {
                let nothing = SourceEvent::Finality {
                    safe: None,
                    finalized: None,
                };
                events.send(nothing).await.expect("open");
            }
        };
        applied().await;
        let most = Most {
            watchlists: 1,
            addresses: 10,
            plan: "default".into(),
            watchlists_origin: String::new(),
            addresses_origin: String::new(),
        };
        let made = lists
            .create("owner", "users", vec![[1; 20]], most)
            .await
            .expect("made");
        let point = points
            .wait_for(|point| point.edit >= made.edit)
            .await
            .expect("the pipeline runs")
            .clone();
        assert_eq!(point.edit, made.edit);
        let after = point.after.expect("a cursor");
        let position = after.position.expect("in the log");
        let step = log.get(position).expect("held");
        assert!(
            matches!(step.change, ChainEvent::Watch(edit) if edit == made.edit),
            "{step:?}"
        );
        // The cursor names the newest block before it.
        assert_eq!(after.block, Some(first.number()));
        let second = blocks(&mut devnet, 1).remove(0);
        events
            .send(SourceEvent::Block(second.clone()))
            .await
            .expect("open");
        applied().await;
        let placed = log.get(position + 1).expect("the next step");
        assert!(matches!(&placed.change, ChainEvent::Added(b) if b.hash == second.hash));
        stop.cancel();
    }

    /// A writer that does not keep up holds the pipeline back, and the
    /// source with it, at the persist queue's bound; once it reads on,
    /// every step comes, in order: the bound never drops one.
    #[tokio::test]
    async fn a_full_persist_queue_holds_the_source_back_and_loses_nothing() {
        let log = testing::log();
        let state = Arc::new(PipelineState::new(
            128,
            BTreeMap::new(),
            log,
            TrackerSettings::default(),
        ));
        let (persist, mut persisted) = mpsc::channel(2);
        let pipeline = Pipeline::new("eth", state, None, Some(persist), &Metrics::default());
        let (events, source) = mpsc::channel(1);
        let running = tokio::spawn(pipeline.run(source, CancellationToken::new()));
        let mut devnet = devnet();
        let mut sent = vec![devnet.genesis()];
        sent.extend(blocks(&mut devnet, 7));
        let mut blocks = sent.clone().into_iter();
        // Two steps fill the queue (the genesis, the next block), a third
        // waits in the pipeline (that block's lifecycle turns), the
        // third block in the source's queue: the fourth cannot be handed
        // over.
        for block in blocks.by_ref().take(3) {
            events.send(SourceEvent::Block(block)).await.expect("taken");
        }
        let held = events.try_send(SourceEvent::Block(blocks.next().expect("a fourth")));
        let Err(mpsc::error::TrySendError::Full(fourth)) = held else {
            panic!("the source is held back: {held:?}");
        };
        let feeding = tokio::spawn(async move {
            events.send(fourth).await.expect("taken");
            for block in blocks {
                events.send(SourceEvent::Block(block)).await.expect("taken");
            }
        });
        let mut numbers = Vec::new();
        while numbers.len() < sent.len() {
            let persisted = persisted.recv().await.expect("a step");
            if let ChainEvent::Added(block) = &persisted.step.change {
                numbers.push(block.number());
            }
        }
        feeding.await.expect("fed");
        let expected: Vec<u64> = sent.iter().map(|block| block.number()).collect();
        assert_eq!(numbers, expected, "every step, in order");
        running.abort();
    }

    /// What a source sends before `Synced` fills the window and the price
    /// index, and reaches no subscriber: the first head notified is the
    /// first one after the marker.
    #[tokio::test]
    async fn the_past_is_placed_but_never_notified() {
        let log = testing::log();
        let (heads, mut frames) = actor("newHeads", &log).await;
        let (mut pipeline, state, mut indexed) =
            pipeline(BTreeMap::from([("newHeads".to_string(), heads)]), log);
        let mut devnet = devnet();
        pipeline.apply(SourceEvent::Block(devnet.genesis())).await;
        for block in blocks(&mut devnet, 3) {
            pipeline.apply(SourceEvent::Block(block)).await;
        }
        assert!(!state.is_synced());
        assert_eq!(state.window().tip().map(|b| b.number()), Some(3));
        pipeline.apply(SourceEvent::Synced).await;
        assert!(state.is_synced() && *state.synced().borrow());
        let live = blocks(&mut devnet, 1).remove(0);
        pipeline.apply(SourceEvent::Block(live)).await;
        assert_eq!(next_result(&mut frames).await["number"], "0x4");
        let mut numbers = Vec::new();
        while numbers.len() < 5 {
            match indexed.recv().await {
                Some(ChainEvent::Added(block)) => numbers.push(block.number()),
                other => panic!("only blocks added, got {other:?}"),
            }
        }
        assert_eq!(
            numbers,
            vec![0, 1, 2, 3, 4],
            "the price index sees the past too"
        );
    }

    /// A topic added between two events gets the next batch; a removed one
    /// gets nothing more (its retirement is the next thing it says).
    #[tokio::test]
    async fn topics_added_and_removed_mid_stream() {
        let log = testing::log();
        let (mut pipeline, state, _indexed) = pipeline(BTreeMap::new(), log.clone());
        let mut devnet = devnet();
        pipeline.apply(SourceEvent::Synced).await;
        pipeline.apply(SourceEvent::Block(devnet.genesis())).await;
        let mut next = blocks(&mut devnet, 3).into_iter();
        pipeline
            .apply(SourceEvent::Block(next.next().expect("block 1")))
            .await;
        let (heads, mut frames) = actor("newHeads", &log).await;
        state.add_topic(heads);
        pipeline
            .apply(SourceEvent::Block(next.next().expect("block 2")))
            .await;
        assert_eq!(next_result(&mut frames).await["number"], "0x2");
        let removed = state.remove_topic("newHeads").expect("the topic");
        pipeline
            .apply(SourceEvent::Block(next.next().expect("block 3")))
            .await;
        removed.retire("gone".into()).await;
        let last = tokio::time::timeout(Duration::from_secs(30), frames.recv())
            .await
            .expect("in time")
            .expect("the ending frame")
            .to_text();
        assert!(
            last.contains("\"error\""),
            "block 3 never reached it: {last}"
        );
    }

    /// Through a reorg, a `logs` subscriber sees exactly what the tracker
    /// says, batch by batch: the orphaned logs removed (last delivered
    /// first), then the new branch's logs, each with the cursor of its
    /// place in the log.
    #[tokio::test]
    async fn reorgs_reach_subscribers_as_the_tracker_orders_them() {
        let log = testing::log();
        let (logs, mut frames) = actor("logs", &log).await;
        let (mut pipeline, _state, _indexed) =
            pipeline(BTreeMap::from([("logs".to_string(), logs)]), log);
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                reorg_every: 3,
                reorg_depth: 2,
                ..DevnetSettings::default()
            },
        );
        pipeline.apply(SourceEvent::Synced).await;
        let mut oracle = CanonicalChain::new(128);
        // Each change with transactions is followed by its lifecycle turns.
        let mut lives = Tracker::new(TrackerSettings::default());
        let oracle_log = testing::log();
        let mut expected = Vec::new();
        let mut removed = 0;
        for block in std::iter::once(devnet.genesis()).chain(blocks(&mut devnet, 12)) {
            for change in oracle.apply(block.clone()).expect("linked blocks") {
                let turns = match &change {
                    ChainEvent::Added(block) => lives.added(block, 0),
                    ChainEvent::Removed(block) => lives.removed(block, 0),
                    _ => Vec::new(),
                };
                let step = oracle_log.append(change);
                if !turns.is_empty() {
                    oracle_log.append(ChainEvent::Lifecycle(turns.into()));
                }
                for batch in EventBatch::of_step(&step, oracle_log.chain()) {
                    if batch.source == Source::Logs {
                        for index in 0..batch.len() {
                            let log: Value = serde_json::from_str(
                                batch
                                    .notice(index, chainsieve_filter_core::Payload::Full)
                                    .payload(),
                            )
                            .expect("JSON");
                            removed += usize::from(log["removed"] == true);
                            let cursor = batch.cursor(index).expect("a logged event");
                            expected.push((log, cursor.to_string()));
                        }
                    }
                }
            }
            pipeline.apply(SourceEvent::Block(block)).await;
        }
        assert!(removed > 0, "the devnet reorganised");
        for (result, cursor) in expected {
            let params = next_params(&mut frames).await;
            assert_eq!(params["result"], result);
            assert_eq!(params["cursor"], cursor.as_str());
        }
    }

    /// A pipeline fed another log's steps (an edge reading the bus) from
    /// the middle of that log on notifies exactly what the first one does,
    /// cursors included, through reorgs; its window and positions follow.
    #[tokio::test]
    async fn logged_steps_are_notified_as_their_log_numbered_them() {
        let (leader_log, follower_log) = (testing::log(), testing::log());
        let (logs, mut leader_frames) = actor("logs", &leader_log).await;
        let (mut leader, leader_state, _) = pipeline(
            BTreeMap::from([("logs".to_string(), logs)]),
            leader_log.clone(),
        );
        let (logs, mut follower_frames) = actor("logs", &follower_log).await;
        let (mut follower, follower_state, _) = pipeline(
            BTreeMap::from([("logs".to_string(), logs)]),
            follower_log.clone(),
        );
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                reorg_every: 3,
                reorg_depth: 2,
                ..DevnetSettings::default()
            },
        );
        let mut blocks = std::iter::once(devnet.genesis()).chain(blocks(&mut devnet, 14));
        for block in blocks.by_ref().take(3) {
            leader.apply(SourceEvent::Block(block)).await;
        }
        // The follower starts at the leader's next step.
        let start = leader_log.head();
        let mut forwarded = start;
        leader.apply(SourceEvent::Synced).await;
        follower.apply(SourceEvent::Synced).await;
        let mut removed = 0;
        for block in blocks {
            leader.apply(SourceEvent::Block(block)).await;
            while forwarded < leader_log.head() {
                forwarded += 1;
                let step = leader_log.get(forwarded).expect("held");
                removed += usize::from(matches!(step.change, ChainEvent::Removed(_)));
                follower
                    .apply(SourceEvent::Logged {
                        position: step.position,
                        change: step.change.clone(),
                    })
                    .await;
                assert_eq!(follower_log.get(forwarded).map(|s| s.tag), Some(step.tag));
            }
            let tip = |state: &PipelineState| state.window().tip().map(|b| b.hash);
            assert_eq!(tip(&follower_state), tip(&leader_state));
        }
        assert!(removed > 0, "the devnet reorganised");
        assert_eq!(follower_log.head(), leader_log.head());
        // Every log of every step after the marker, in both.
        let expected: usize = (start + 1..=leader_log.head())
            .filter_map(|position| leader_log.get(position))
            .map(|step| match &step.change {
                ChainEvent::Added(block) | ChainEvent::Removed(block) => block.logs.len(),
                ChainEvent::Pending(_) | ChainEvent::Watch(_) | ChainEvent::Lifecycle(_) => 0,
            })
            .sum();
        assert!(expected > 10, "{expected} notifications");
        for _ in 0..expected {
            let ours = next_params(&mut leader_frames).await;
            assert_eq!(next_params(&mut follower_frames).await, ours);
        }
        assert!(follower_frames.try_recv().is_none(), "nothing more");
    }
}
