//! One actor per (chain, topic): a dedicated thread that owns the topic's
//! component instance (one `Store`, called synchronously, which is cheaper
//! than async here) and its subscriptions. Batches and commands arrive on
//! one channel, so a subscription or a swap takes effect between two
//! batches, never in the middle of one.
//!
//! A trap, a timeout or a bad answer never takes the server down: the actor
//! rebuilds the instance and makes the subscriptions it keeps on record
//! again in it.
//! A component that fails [`DISABLE_AFTER`] calls in a row is disabled: its
//! subscriptions end with an error notification and new ones are refused
//! until a working component replaces it.
//!
//! A subscription that resumes first reads the chain's log from where it
//! left off ([`replay`]), a step at a time between live batches, then
//! joins the live ones with no gap and no duplicate.

mod history;
pub mod pairs;
mod replay;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use chainsieve_filter_core::{Source, params};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

use super::contract::Delivery;
use super::engine::FilterComponent;
use super::instance::{Instance, Instantiate};
use crate::batch::EventBatch;
use chainsieve_eventlog::cursor::{AsOf, Mark, ResumeError, ResumeFrom};
use chainsieve_eventlog::{EventLog, Position};
use chainsieve_fanout::{self as fanout, Held, Notice, Sink, Via};
use chainsieve_history::HistoryFeed;
use chainsieve_model::Grade;
use chainsieve_runtime::metrics::ActorMetrics;
use pairs::Pair;
use replay::Turn;

/// Batches (and commands) an actor may have waiting; a full queue makes the
/// chain wait, which pushes back on its source instead of buffering without
/// bound.
const QUEUE: usize = 256;

/// Failed calls in a row after which a component is disabled: one failure
/// may be bad luck (a deadline hit under load), three are the component.
pub const DISABLE_AFTER: u32 = 3;

/// The JSON-RPC error code of the notification that ends a subscription
/// whose filter was removed or disabled.
const ENDED: i64 = -32000;

/// How long an actor whose every replay waits (for its reader to make
/// room, or for its batch response to be queued) waits for a command
/// before looking again.
const REPLAY_WAIT: Duration = Duration::from_millis(2);

/// Why a subscription was not created.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubscribeError {
    /// The filter refused the parameters; the message is for the client.
    #[error("{0}")]
    Params(String),
    /// The parameters were well-formed but over one of the filter's limits
    /// (the refusal began with [`params::LIMIT_EXCEEDED`]).
    #[error("{0}")]
    Limit(String),
    /// The filter is not working; the message is for the client.
    #[error("{0}")]
    Unavailable(String),
    /// The subscription cannot resume from where it asked to.
    #[error(transparent)]
    Resume(#[from] ResumeError),
}

/// A subscription request, answered on `reply`.
#[derive(Debug)]
pub struct Subscribe {
    /// The host's key for the subscription inside the component.
    pub key: u64,
    /// The public id (`0x` + 32 hex digits) spliced into notifications.
    pub id: Arc<str>,
    /// The JSON array of parameters after the topic name.
    pub params: String,
    pub sink: Sink,
    pub start: Start,
    /// Replay the log from here before the live events.
    pub resume: Option<ResumeFrom>,
    /// Tell of a block only once it is this final, never of a removal
    /// (docs/src/api.md, Finality): the subscription reads the log, behind
    /// the grade, and never joins the live batches.
    pub finality: Option<Grade>,
    /// Blocks older than the log, read from the nodes, before the log
    /// (docs/src/api.md, History from the nodes); `resume` is then unused.
    pub history: Option<HistoryFeed>,
}

/// How a new subscription's first notification is ordered after the
/// `eth_subscribe` response.
#[derive(Debug)]
pub enum Start {
    /// The actor queues this frame (the response, written by the RPC side)
    /// once the subscription is made, then notifications follow.
    Acknowledge(String),
    /// The response travels in a batch the session queues later: nothing
    /// is delivered until the session opens the gate, right after queuing
    /// it. (Events before that go to a subscription the client cannot
    /// know of yet.)
    Gated(Arc<AtomicBool>),
    /// No response is due (a JSON-RPC notification subscribed).
    Now,
}

enum Command {
    Batch(Arc<EventBatch>),
    Subscribe(Subscribe, oneshot::Sender<Result<(), SubscribeError>>),
    /// Acknowledged once the subscription is gone from the actor: nothing
    /// is queued for it after that.
    Unsubscribe(u64, oneshot::Sender<()>),
    /// Replace the component; answered with the reason if the old one stays.
    Swap(FilterComponent, oneshot::Sender<Result<(), String>>),
    /// End every subscription with the reason and stop.
    Retire(String, oneshot::Sender<()>),
}

/// What an actor runs, for the admin view; written by the actor.
#[derive(Clone, Debug)]
pub struct FilterStatus {
    pub origin: String,
    pub hash: String,
    pub version: String,
    pub loaded_at: SystemTime,
    /// Calls that trapped, timed out or answered wrongly since it loaded.
    pub failures: u64,
    /// Why it is disabled, if it is.
    pub disabled: Option<String>,
}

impl FilterStatus {
    fn of(component: &FilterComponent) -> Self {
        Self {
            origin: component.origin.clone(),
            hash: component.hash.clone(),
            version: component.version.clone(),
            loaded_at: component.loaded_at,
            failures: 0,
            disabled: None,
        }
    }
}

/// The handle the chain and the sessions use to reach an actor.
#[derive(Clone, Debug)]
pub struct FilterHandle {
    pub topic: Arc<str>,
    /// Fixed for the actor's life: a swap to another source is refused.
    pub source: Source,
    commands: mpsc::Sender<Command>,
    /// Live subscriptions; the chain skips batches when there are none.
    subscribers: Arc<AtomicUsize>,
    /// Written by the actor on load, swap, failure and disable; read by the
    /// admin view. Held only to copy in or out.
    status: Arc<Mutex<FilterStatus>>,
}

impl FilterHandle {
    /// Instantiates `component` for the chain of `log` and starts its actor
    /// thread. Called inside the tokio runtime, whose timers the actor uses
    /// while replays wait.
    pub fn spawn(
        instances: Arc<dyn Instantiate>,
        component: FilterComponent,
        log: &Arc<EventLog>,
        metrics: ActorMetrics,
    ) -> anyhow::Result<Self> {
        let chain = log.chain().clone();
        let runtime = tokio::runtime::Handle::try_current()
            .context("filter actors start inside the tokio runtime")?;
        let instance = instances.instantiate(&component)?;
        let (commands, rx) = mpsc::channel(QUEUE);
        let subscribers = Arc::new(AtomicUsize::new(0));
        let status = Arc::new(Mutex::new(FilterStatus::of(&component)));
        let handle = FilterHandle {
            topic: component.manifest.topic.clone().into(),
            source: component.manifest.source,
            commands,
            subscribers: subscribers.clone(),
            status: status.clone(),
        };
        let actor = Actor {
            chain: chain.clone(),
            log: log.clone(),
            finality: log.finality_changes(),
            runtime,
            instances,
            component,
            instance: Some(instance),
            replay: replay::Replay::default(),
            subscriptions: BTreeMap::new(),
            subscribers,
            status,
            failures_in_a_row: 0,
            disabled: None,
            metrics,
        };
        thread::Builder::new()
            .name(format!("filter-{chain}-{}", handle.topic))
            .spawn(move || actor.run(rx))
            .with_context(|| format!("starting the {} filter thread for {chain}", handle.topic))?;
        Ok(handle)
    }

    pub fn has_subscribers(&self) -> bool {
        self.subscribers.load(Ordering::Relaxed) > 0
    }

    /// Whether nothing waits in the actor's queue (it may be busy with the
    /// last command it took).
    pub fn is_idle(&self) -> bool {
        self.commands.capacity() == self.commands.max_capacity()
    }

    pub fn subscriber_count(&self) -> usize {
        self.subscribers.load(Ordering::Relaxed)
    }

    pub fn status(&self) -> FilterStatus {
        lock(&self.status).clone()
    }

    /// Hands a batch to the actor, waiting for room. False if it has stopped.
    pub async fn send_batch(&self, batch: Arc<EventBatch>) -> bool {
        self.commands.send(Command::Batch(batch)).await.is_ok()
    }

    pub async fn subscribe(&self, request: Subscribe) -> Result<(), SubscribeError> {
        let (reply, answer) = oneshot::channel();
        let stopped =
            || SubscribeError::Unavailable(format!("the {} filter is not running", self.topic));
        self.commands
            .send(Command::Subscribe(request, reply))
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Removes subscription `key` and returns once the actor has: the
    /// caller can then answer `true` knowing no notification for it
    /// follows. The command is handed over without an await point, so a
    /// caller cancelled midway (a closed connection) still unsubscribes.
    pub async fn unsubscribe(&self, key: u64) {
        if let Some(done) = self.end(key) {
            let _ = done.await;
        }
    }

    /// Asks the actor to end subscription `key` without waiting for it
    /// (a guard's drop cannot wait): the receiver tells when it has.
    /// `None` from a stopped actor, which has no subscriptions left.
    pub fn end(&self, key: u64) -> Option<oneshot::Receiver<()>> {
        let (ack, done) = oneshot::channel();
        match self.commands.try_send(Command::Unsubscribe(key, ack)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(command)) => {
                let commands = self.commands.clone();
                // Outside a runtime (a drop at shutdown) no actor runs
                // either.
                let runtime = tokio::runtime::Handle::try_current().ok()?;
                runtime.spawn(async move {
                    let _ = commands.send(command).await;
                });
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return None,
        }
        Some(done)
    }

    /// Replaces the component between two batches, every live subscription
    /// made again in the new one. On `Err` (it fails to instantiate, refuses
    /// a live subscription, or consumes another source) the old component
    /// keeps serving.
    pub async fn swap(&self, component: FilterComponent) -> Result<(), String> {
        if component.manifest.source != self.source {
            return Err(format!(
                "it consumes {:?} but the live {} topic consumes {:?}; a topic's source changes only with a restart",
                component.manifest.source, self.topic, self.source
            ));
        }
        let (reply, answer) = oneshot::channel();
        let stopped = || format!("the {} filter is not running", self.topic);
        self.commands
            .send(Command::Swap(component, reply))
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Ends every subscription with `reason` (an error notification) and
    /// stops the actor once it has.
    pub async fn retire(&self, reason: String) {
        let (ack, done) = oneshot::channel();
        if self
            .commands
            .send(Command::Retire(reason, ack))
            .await
            .is_ok()
        {
            let _ = done.await;
        }
    }
}

fn lock(status: &Mutex<FilterStatus>) -> std::sync::MutexGuard<'_, FilterStatus> {
    // A status is plain data; a panic while it was held cannot break it.
    status
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the actor keeps of a subscription: enough to deliver to it and to
/// make it again in a rebuilt or swapped instance.
struct Record {
    id: Arc<str>,
    params: String,
    delivery: Delivery,
    sink: Sink,
    /// Closed until the session queued the batch response carrying the id.
    gate: Option<Arc<AtomicBool>>,
    feed: Feed,
    /// The grade a block must reach before it is told of.
    finality: Option<Grade>,
    /// For a `fromBlock` replay: the logged steps it passes over.
    as_of: Option<AsOf>,
    /// Blocks older than the log, while [`Feed::History`]. Boxed: a
    /// reading carries a whole batch, and every live delivery looks records
    /// up, so a small one is a cache line or two.
    history: Option<Box<history::Reading>>,
}

/// Where a subscription's notifications come from now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Feed {
    /// Live batches past this position (the ones up to it were replayed).
    Live { after: Position },
    /// The log, until the replay catches up; the next event due.
    Replaying { next: Mark },
    /// Blocks read from the nodes, older than the log, until the log holds
    /// the rest ([`Record::history`]).
    History,
}

impl Feed {
    /// Whether the subscription is in the replays' instance.
    fn replays(self) -> bool {
        !matches!(self, Feed::Live { .. })
    }
}

impl Record {
    /// Sends the subscription's last frame: why it ended.
    fn end(&self, message: &str) {
        self.end_with(ENDED, message);
    }

    fn end_with(&self, code: i64, message: &str) {
        let _ = self.sink.send(fanout::ended(&self.id, code, message));
    }

    /// Whether its batch response has been queued (always, outside a batch).
    fn announced(&self) -> bool {
        self.gate
            .as_ref()
            .is_none_or(|open| open.load(Ordering::Acquire))
    }

    /// The notice of `pair`: the payload the component wrote for it, or
    /// else the subscription's kind.
    fn notice<'a>(&self, batch: &'a EventBatch, pair: &'a Pair) -> Option<&'a Notice> {
        match (&pair.written, self.delivery) {
            (Some(written), _) => Some(written),
            (None, Delivery::Kind(kind)) => Some(batch.notice(pair.event as usize, kind)),
            // `contract::check_written` refuses such an answer.
            (None, Delivery::Written) => None,
        }
    }

    /// Sends the events of `pairs` (all of this subscription), back to
    /// back; how many were sent: all, or none if the connection is gone or
    /// overflowed.
    fn notify_all<'a>(
        &self,
        batch: &EventBatch,
        pairs: impl Iterator<Item = &'a Pair> + Clone,
        via: Via,
    ) -> u64 {
        self.notify_or_hold(batch, pairs, via, None)
    }

    /// [`Self::notify_all`], or with `held` the same held for the step's
    /// one write (a new hold on the connection is pushed to `held`).
    fn notify_or_hold<'a>(
        &self,
        batch: &EventBatch,
        pairs: impl Iterator<Item = &'a Pair> + Clone,
        via: Via,
        held: Option<&mut Vec<Held>>,
    ) -> u64 {
        let notices = pairs.filter_map(|pair| self.notice(batch, pair));
        let sent = match held {
            Some(held) => self.sink.hold_all(&self.id, notices, held),
            None => self.sink.notify_all(&self.id, notices, via),
        };
        sent.map_or(0, |sent| sent as u64)
    }
}

/// A fresh instance with every subscription made again in it, and what
/// each said.
struct Resubscribed {
    instance: Box<dyn Instance>,
    outcomes: Vec<(u64, Result<Delivery, String>)>,
}

struct Actor {
    chain: Arc<str>,
    /// What resuming subscriptions replay.
    log: Arc<EventLog>,
    /// Wakes an actor whose every replay waits for a finality grade.
    finality: tokio::sync::watch::Receiver<chainsieve_eventlog::Finality>,
    /// Drives the wait for a command, with a timeout, while replays wait.
    runtime: tokio::runtime::Handle,
    /// Makes the instances: the engine, or a test's stand-in.
    instances: Arc<dyn Instantiate>,
    component: FilterComponent,
    /// `None` after a failure until the next call rebuilds it.
    instance: Option<Box<dyn Instance>>,
    /// The replays' own instance, so a replay matches against only the
    /// subscriptions replaying.
    replay: replay::Replay,
    /// Looked up once per subscriber a batch reaches, in key order (the
    /// order of a batch's pairs), so ordered: keys are handed out rising,
    /// and a delivery to every subscriber walks the records where they lie
    /// side by side in the tree's nodes. In a hash map each lookup missed
    /// the cache twice at 10,000 subscriptions (its control bytes, then
    /// its slot): ~10% of the server's user time in the load benchmark
    /// (docs/src/benchmarks.md, One write per step).
    subscriptions: BTreeMap<u64, Record>,
    subscribers: Arc<AtomicUsize>,
    status: Arc<Mutex<FilterStatus>>,
    failures_in_a_row: u32,
    /// Set when the component kept failing; cleared by a swap.
    disabled: Option<String>,
    metrics: ActorMetrics,
}

impl Actor {
    /// Takes commands until the handle is dropped or the actor retires;
    /// while subscriptions replay, one replay step goes between two
    /// commands, so live batches never wait for a whole replay.
    fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        loop {
            let command = if self.replaying() {
                let turn = self.guarded(Self::replay_turn).unwrap_or(Turn::Blocked);
                match rx.try_recv() {
                    Ok(command) => command,
                    Err(TryRecvError::Disconnected) => return,
                    Err(TryRecvError::Empty) if turn == Turn::Moved => continue,
                    // Every replay waits: on its reader or its gate (look
                    // again shortly), or on a finality grade (until it
                    // moves).
                    Err(TryRecvError::Empty) => {
                        let finality = &mut self.finality;
                        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            self.runtime.block_on(async {
                                if turn == Turn::Final {
                                    tokio::select! {
                                        command = rx.recv() => Ok(command),
                                        _ = finality.changed() => Err(()),
                                    }
                                } else {
                                    tokio::time::timeout(REPLAY_WAIT, rx.recv())
                                        .await
                                        .map_err(drop)
                                }
                            })
                        }));
                        match waited {
                            Ok(Ok(Some(command))) => command,
                            Ok(Err(())) => continue,
                            // The handles are gone, or the runtime's timers
                            // are (it is shutting down).
                            Ok(Ok(None)) | Err(_) => return,
                        }
                    }
                }
            } else {
                match rx.blocking_recv() {
                    Some(command) => command,
                    None => return,
                }
            };
            // An actor with batches waiting leaves the writes to the
            // connections' writers, on the other worker threads.
            let via = if rx.is_empty() {
                Via::Socket
            } else {
                Via::Queue
            };
            if let Some(Flow::Stop) = self.guarded(|actor| actor.handle(command, via)) {
                return;
            }
        }
    }

    /// Runs `work`, surviving a panic (a bug on the host side of a call):
    /// the instances are the only state it can leave half-changed, so they
    /// are dropped and rebuilt on next use, like after a trap. A subscriber
    /// waiting on a reply sees the filter unavailable.
    fn guarded<T>(&mut self, work: impl FnOnce(&mut Self) -> T) -> Option<T> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(self))) {
            Ok(value) => Some(value),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(chain = %self.chain, topic = %self.component.manifest.topic, panic = %what, "filter actor panicked; rebuilding the instance");
                self.instance = None;
                self.replay.reset();
                None
            }
        }
    }

    fn handle(&mut self, command: Command, via: Via) -> Flow {
        match command {
            Command::Batch(batch) => self.deliver(&batch, via),
            Command::Subscribe(request, reply) => {
                let outcome = self.subscribe(request);
                // The requester may have gone; nothing to undo then, its
                // session's cleanup unsubscribes.
                let _ = reply.send(outcome);
            }
            Command::Unsubscribe(key, ack) => {
                self.unsubscribe(key);
                let _ = ack.send(());
            }
            Command::Swap(component, reply) => {
                let _ = reply.send(self.swap(component));
            }
            Command::Retire(reason, ack) => {
                self.end_all(&reason);
                tracing::info!(chain = %self.chain, topic = %self.component.manifest.topic, %reason, "filter retired");
                let _ = ack.send(());
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    fn topic(&self) -> &str {
        &self.component.manifest.topic
    }

    fn subscribe(&mut self, request: Subscribe) -> Result<(), SubscribeError> {
        let Subscribe {
            key,
            id,
            params,
            sink,
            start,
            resume,
            finality,
            history,
        } = request;
        if let Some(reason) = &self.disabled {
            return Err(SubscribeError::Unavailable(format!(
                "the {} filter is disabled: {reason}",
                self.topic()
            )));
        }
        let (feed, as_of) = match (&resume, finality) {
            _ if history.is_some() => (Feed::History, None),
            (None, None) => (Feed::Live { after: 0 }, None),
            (Some(from), _) => {
                let plan = self.log.start_of(from)?;
                (Feed::Replaying { next: plan.mark }, plan.as_of)
            }
            (None, Some(grade)) => (
                Feed::Replaying {
                    next: self.log.first_not_final(grade),
                },
                None,
            ),
        };
        let outcome = self
            .with_instance(|instance| instance.subscribe(key, &params))
            .ok_or_else(|| {
                SubscribeError::Unavailable(format!(
                    "the {} filter failed; try again",
                    self.topic()
                ))
            })?;
        let delivery = outcome.map_err(|refusal| {
            if refusal.starts_with(params::LIMIT_EXCEEDED) {
                SubscribeError::Limit(refusal)
            } else {
                SubscribeError::Params(refusal)
            }
        })?;
        let gate = match start {
            Start::Acknowledge(frame) => {
                // If the connection is already overflowing it is closing.
                let _ = sink.send(frame);
                None
            }
            Start::Gated(gate) => Some(gate),
            Start::Now => None,
        };
        if feed.replays() {
            self.replay.join(key, &params);
        }
        self.subscriptions.insert(
            key,
            Record {
                id,
                params,
                delivery,
                sink,
                gate,
                feed,
                finality,
                as_of,
                history: history.map(|feed| Box::new(history::Reading::new(feed))),
            },
        );
        self.count_subscribers();
        Ok(())
    }

    fn unsubscribe(&mut self, key: u64) {
        if let Some(record) = self.subscriptions.remove(&key) {
            self.count_subscribers();
            if record.feed.replays() {
                self.replay.leave(key);
            }
            self.with_instance(|instance| instance.unsubscribe(key));
        }
    }

    fn count_subscribers(&self) {
        self.subscribers
            .store(self.subscriptions.len(), Ordering::Relaxed);
    }

    fn deliver(&mut self, batch: &EventBatch, via: Via) {
        if self.subscriptions.is_empty() {
            return;
        }
        let started = Instant::now();
        let layout = self.component.manifest.layout;
        let matched = self.with_instance(|instance| instance.match_batch(&layout.of(batch)));
        self.metrics
            .batch_seconds
            .observe(started.elapsed().as_secs_f64());
        let Some(matches) = matched else {
            return;
        };
        let (pairs, outside) = pairs::delivery_order(&matches, batch);
        if let Some(event) = outside.first() {
            tracing::warn!(chain = %self.chain, topic = %self.topic(), event, len = batch.len(), "filter returned an event index outside the batch");
        }
        let position = batch.position();
        // An actor behind on its batches lets the writers gather instead.
        let together = batch.together().filter(|_| via == Via::Socket);
        let mut held = Vec::new();
        let mut sent = 0;
        for pairs in pairs.chunk_by(|a, b| a.key == b.key) {
            if let Some(record) = self.subscriptions.get(&pairs[0].key)
                && record.announced()
                && matches!(record.feed, Feed::Live { after } if position > after)
            {
                let hold = together.is_some().then_some(&mut held);
                sent += record.notify_or_hold(batch, pairs.iter(), via, hold);
            }
        }
        if let Some(together) = together {
            together.keep(held);
        }
        self.metrics.notifications.inc_by(sent);
    }

    /// Instantiates `component` and makes every subscription again in it.
    /// `Err` when it cannot be instantiated or a call fails.
    fn resubscribed(&self, component: &FilterComponent) -> anyhow::Result<Resubscribed> {
        let mut instance = self.instances.instantiate(component)?;
        let mut outcomes = Vec::with_capacity(self.subscriptions.len());
        for (key, record) in &self.subscriptions {
            let outcome = instance
                .subscribe(*key, &record.params)
                .with_context(|| format!("making subscription {} again", record.id))?;
            outcomes.push((*key, outcome));
        }
        Ok(Resubscribed { instance, outcomes })
    }

    /// Builds a fresh instance of the current component after a failure.
    /// A subscription it now refuses (only a component whose answers change
    /// between instances would) ends with the reason instead of vanishing.
    fn rebuild(&mut self) -> anyhow::Result<()> {
        let Resubscribed { instance, outcomes } = self.resubscribed(&self.component)?;
        for (key, outcome) in outcomes {
            if let Err(refusal) = outcome
                && let Some(record) = self.subscriptions.remove(&key)
            {
                self.replay.leave(key);
                tracing::warn!(chain = %self.chain, topic = %self.topic(), subscription = %record.id, %refusal, "rebuilt filter refused a subscription made again; ending it");
                record.end(&format!(
                    "the {} filter was restarted and refused this subscription: {refusal}",
                    self.topic()
                ));
            }
        }
        self.count_subscribers();
        self.instance = Some(instance);
        Ok(())
    }

    fn swap(&mut self, component: FilterComponent) -> Result<(), String> {
        let Resubscribed { instance, outcomes } = self
            .resubscribed(&component)
            .map_err(|e| format!("{e:#}"))?;
        if let Some((key, Err(refusal))) = outcomes.iter().find(|(_, o)| o.is_err()) {
            let id = self.subscriptions.get(key).map(|r| r.id.clone());
            return Err(format!(
                "it refuses live subscription {}: {refusal}",
                id.as_deref().unwrap_or("?")
            ));
        }
        for (key, outcome) in outcomes {
            if let (Ok(delivery), Some(record)) = (outcome, self.subscriptions.get_mut(&key)) {
                record.delivery = delivery;
            }
        }
        tracing::info!(chain = %self.chain, topic = %self.topic(), from = %self.component.origin, to = %component.origin, hash = %component.hash, subscriptions = self.subscriptions.len(), "filter swapped");
        *lock(&self.status) = FilterStatus::of(&component);
        self.component = component;
        self.instance = Some(instance);
        // Replays go on in an instance of the new component.
        self.replay.reset();
        self.failures_in_a_row = 0;
        self.disabled = None;
        Ok(())
    }

    /// Runs `call` on the instance, rebuilding it first if a failure left
    /// none; on failure logs and counts it and returns `None`.
    fn with_instance<T>(
        &mut self,
        call: impl FnOnce(&mut dyn Instance) -> anyhow::Result<T>,
    ) -> Option<T> {
        if self.disabled.is_some() {
            return None;
        }
        if self.instance.is_none()
            && let Err(error) = self.rebuild()
        {
            self.failed(error.context("rebuilding the instance"));
            return None;
        }
        let instance = self.instance.as_mut()?;
        match call(instance.as_mut()) {
            Ok(value) => {
                self.failures_in_a_row = 0;
                Some(value)
            }
            Err(error) => {
                self.instance = None;
                self.failed(error);
                None
            }
        }
    }

    fn failed(&mut self, error: anyhow::Error) {
        self.failures_in_a_row += 1;
        lock(&self.status).failures += 1;
        tracing::error!(chain = %self.chain, topic = %self.topic(), origin = %self.component.origin, failures_in_a_row = self.failures_in_a_row, error = format!("{error:#}"), "filter call failed; the instance will be rebuilt");
        if self.failures_in_a_row >= DISABLE_AFTER {
            let reason = format!("{DISABLE_AFTER} calls in a row failed, the last with: {error:#}");
            tracing::error!(chain = %self.chain, topic = %self.topic(), origin = %self.component.origin, %reason, "filter disabled; its subscriptions end and new ones are refused until a working component replaces it");
            self.end_all(&format!(
                "the {} filter was disabled: {reason}",
                self.topic()
            ));
            self.instance = None;
            lock(&self.status).disabled = Some(reason.clone());
            self.disabled = Some(reason);
        }
    }

    /// Ends every subscription with an error notification saying why.
    fn end_all(&mut self, message: &str) {
        for record in std::mem::take(&mut self.subscriptions).into_values() {
            record.end(message);
        }
        self.replay.clear();
        self.count_subscribers();
    }
}

/// Whether the actor keeps running after a command.
enum Flow {
    Continue,
    Stop,
}

#[cfg(test)]
mod tests;
