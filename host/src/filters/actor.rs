//! One actor per (chain, topic): a dedicated thread that owns the topic's
//! component instance (one `Store`, called synchronously, which is cheaper
//! than async here) and its subscriptions. Batches and commands arrive on
//! one channel, so a subscription or a swap takes effect between two
//! batches, never in the middle of one.
//!
//! A trap, a timeout or a bad answer never takes the server down: the actor
//! rebuilds the instance and replays the subscriptions it keeps on record.
//! A component that fails [`DISABLE_AFTER`] calls in a row is disabled: its
//! subscriptions end with an error notification and new ones are refused
//! until a working component replaces it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Instant, SystemTime};

use anyhow::Context;
use chainsieve_filter_sdk::{Payload, Source, params};
use tokio::sync::{mpsc, oneshot};

use super::engine::FilterComponent;
use super::instance::{Instance, Instantiate};
use crate::fanout::{self, Sink};
use crate::ingest::EventBatch;
use crate::metrics::ActorMetrics;

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
    /// Instantiates `component` for `chain` and starts its actor thread.
    pub fn spawn(
        instances: Arc<dyn Instantiate>,
        component: FilterComponent,
        chain: &str,
        metrics: ActorMetrics,
    ) -> anyhow::Result<Self> {
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
            chain: chain.to_string(),
            instances,
            component,
            instance: Some(instance),
            subscriptions: HashMap::new(),
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
        let (ack, done) = oneshot::channel();
        match self.commands.try_send(Command::Unsubscribe(key, ack)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(command)) => {
                let commands = self.commands.clone();
                tokio::spawn(async move {
                    let _ = commands.send(command).await;
                });
            }
            // A stopped actor has no subscriptions left to remove.
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
        let _ = done.await;
    }

    /// Replaces the component between two batches, every live subscription
    /// replayed into the new one. On `Err` (it fails to instantiate, refuses
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
/// replay it into a rebuilt or swapped instance.
struct Record {
    id: Arc<str>,
    params: String,
    payload: Payload,
    sink: Sink,
    /// Closed until the session queued the batch response carrying the id.
    gate: Option<Arc<AtomicBool>>,
}

impl Record {
    /// Sends the subscription's last frame: why it ended.
    fn end(&self, message: &str) {
        let _ = self.sink.send(fanout::ended(&self.id, ENDED, message));
    }
}

/// A fresh instance with every subscription replayed into it, and what
/// each said.
struct Replayed {
    instance: Box<dyn Instance>,
    outcomes: Vec<(u64, Result<Payload, String>)>,
}

struct Actor {
    chain: String,
    /// Makes the instances: the engine, or a test's stand-in.
    instances: Arc<dyn Instantiate>,
    component: FilterComponent,
    /// `None` after a failure until the next call rebuilds it.
    instance: Option<Box<dyn Instance>>,
    subscriptions: HashMap<u64, Record>,
    subscribers: Arc<AtomicUsize>,
    status: Arc<Mutex<FilterStatus>>,
    failures_in_a_row: u32,
    /// Set when the component kept failing; cleared by a swap.
    disabled: Option<String>,
    metrics: ActorMetrics,
}

impl Actor {
    fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        while let Some(command) = rx.blocking_recv() {
            // A panic (a bug on the host side of a call) must not end the
            // actor silently: the instance is the only state a command can
            // leave half-changed, so it is dropped and rebuilt on next use,
            // like after a trap. A subscriber waiting on a reply sees the
            // filter unavailable.
            let handled =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handle(command)));
            match handled {
                Ok(Flow::Continue) => {}
                Ok(Flow::Stop) => return,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    tracing::error!(chain = %self.chain, topic = %self.component.manifest.topic, panic = %what, "filter actor panicked; rebuilding the instance");
                    self.instance = None;
                }
            }
        }
    }

    fn handle(&mut self, command: Command) -> Flow {
        match command {
            Command::Batch(batch) => self.deliver(&batch),
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
        } = request;
        if let Some(reason) = &self.disabled {
            return Err(SubscribeError::Unavailable(format!(
                "the {} filter is disabled: {reason}",
                self.topic()
            )));
        }
        let outcome = self
            .with_instance(|instance| instance.subscribe(key, &params))
            .ok_or_else(|| {
                SubscribeError::Unavailable(format!(
                    "the {} filter failed; try again",
                    self.topic()
                ))
            })?;
        let payload = outcome.map_err(|refusal| {
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
        self.subscriptions.insert(
            key,
            Record {
                id,
                params,
                payload,
                sink,
                gate,
            },
        );
        self.count_subscribers();
        Ok(())
    }

    fn unsubscribe(&mut self, key: u64) {
        if self.subscriptions.remove(&key).is_some() {
            self.count_subscribers();
            self.with_instance(|instance| instance.unsubscribe(key));
        }
    }

    fn count_subscribers(&self) {
        self.subscribers
            .store(self.subscriptions.len(), Ordering::Relaxed);
    }

    fn deliver(&mut self, batch: &EventBatch) {
        if self.subscriptions.is_empty() {
            return;
        }
        let started = Instant::now();
        let matched = self.with_instance(|instance| instance.match_batch(batch.encoded()));
        self.metrics
            .batch_seconds
            .observe(started.elapsed().as_secs_f64());
        let Some(matches) = matched else {
            return;
        };
        let mut sent = 0;
        for (event, key) in matches.pairs() {
            let event = event as usize;
            if event >= batch.len() {
                tracing::warn!(chain = %self.chain, topic = %self.topic(), event, len = batch.len(), "filter returned an event index outside the batch");
                continue;
            }
            if let Some(record) = self.subscriptions.get(&key)
                && record
                    .gate
                    .as_ref()
                    .is_none_or(|open| open.load(Ordering::Acquire))
            {
                // Overflow closes that connection; a closed one unsubscribes.
                if record
                    .sink
                    .notify(&record.id, batch.payload(event, record.payload))
                    .is_ok()
                {
                    sent += 1;
                }
            }
        }
        self.metrics.notifications.inc_by(sent);
    }

    /// Instantiates `component` and replays every subscription into it.
    /// `Err` when it cannot be instantiated or a call fails.
    fn replay(&self, component: &FilterComponent) -> anyhow::Result<Replayed> {
        let mut instance = self.instances.instantiate(component)?;
        let mut outcomes = Vec::with_capacity(self.subscriptions.len());
        for (key, record) in &self.subscriptions {
            let outcome = instance
                .subscribe(*key, &record.params)
                .with_context(|| format!("replaying subscription {}", record.id))?;
            outcomes.push((*key, outcome));
        }
        Ok(Replayed { instance, outcomes })
    }

    /// Builds a fresh instance of the current component after a failure.
    /// A subscription it now refuses (only a component whose answers change
    /// between instances would) ends with the reason instead of vanishing.
    fn rebuild(&mut self) -> anyhow::Result<()> {
        let Replayed { instance, outcomes } = self.replay(&self.component)?;
        for (key, outcome) in outcomes {
            if let Err(refusal) = outcome
                && let Some(record) = self.subscriptions.remove(&key)
            {
                tracing::warn!(chain = %self.chain, topic = %self.topic(), subscription = %record.id, %refusal, "rebuilt filter refused a subscription on replay; ending it");
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
        let Replayed { instance, outcomes } =
            self.replay(&component).map_err(|e| format!("{e:#}"))?;
        if let Some((key, Err(refusal))) = outcomes.iter().find(|(_, o)| o.is_err()) {
            let id = self.subscriptions.get(key).map(|r| r.id.clone());
            return Err(format!(
                "it refuses live subscription {}: {refusal}",
                id.as_deref().unwrap_or("?")
            ));
        }
        for (key, outcome) in outcomes {
            if let (Ok(payload), Some(record)) = (outcome, self.subscriptions.get_mut(&key)) {
                record.payload = payload;
            }
        }
        tracing::info!(chain = %self.chain, topic = %self.topic(), from = %self.component.origin, to = %component.origin, hash = %component.hash, subscriptions = self.subscriptions.len(), "filter swapped");
        *lock(&self.status) = FilterStatus::of(&component);
        self.component = component;
        self.instance = Some(instance);
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
        for (_, record) in self.subscriptions.drain() {
            record.end(message);
        }
        self.count_subscribers();
    }
}

/// Whether the actor keeps running after a command.
enum Flow {
    Continue,
    Stop,
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use chainsieve_filter_sdk::Matches;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::filters::testing::{builtin, subscribe_all};
    use crate::ingest::StreamEvent;
    use crate::ingest::devnet::{Devnet, DevnetSettings};
    use crate::ingest::model::Block;
    use crate::metrics::Metrics;

    /// What the stand-ins do, shared with the test that scripts them.
    #[derive(Default)]
    struct Script {
        /// The outcomes of the next `match_batch` calls, in order: an
        /// error message, or `None` for a normal answer. Empty: normal.
        batches: VecDeque<Option<String>>,
        /// Every subscription is refused with this, while set.
        refuse: Option<String>,
        /// Instances made so far.
        made: usize,
        /// Every subscription an instance took: (instance, key), the first
        /// instance being 1.
        subscribed: Vec<(usize, u64)>,
    }

    /// Makes stand-in instances that follow one script.
    #[derive(Clone, Default)]
    struct StandIns(Arc<Mutex<Script>>);

    impl StandIns {
        fn script(&self) -> std::sync::MutexGuard<'_, Script> {
            self.0.lock().expect("script lock")
        }
    }

    impl Instantiate for StandIns {
        fn instantiate(&self, _: &FilterComponent) -> anyhow::Result<Box<dyn Instance>> {
            let mut script = self.script();
            script.made += 1;
            Ok(Box::new(StandIn {
                script: self.clone(),
                number: script.made,
                keys: Vec::new(),
            }))
        }
    }

    /// Matches the first event of every batch to every subscription, or
    /// fails as scripted (a trap, a deadline: to the actor both are a
    /// failed call).
    struct StandIn {
        script: StandIns,
        /// Which instance this is, from 1.
        number: usize,
        keys: Vec<u64>,
    }

    impl Instance for StandIn {
        fn subscribe(&mut self, key: u64, _: &str) -> anyhow::Result<Result<Payload, String>> {
            let mut script = self.script.script();
            if let Some(refusal) = &script.refuse {
                return Ok(Err(refusal.clone()));
            }
            script.subscribed.push((self.number, key));
            self.keys.push(key);
            Ok(Ok(Payload::Hash))
        }

        fn unsubscribe(&mut self, key: u64) -> anyhow::Result<()> {
            self.keys.retain(|k| *k != key);
            Ok(())
        }

        fn match_batch(&mut self, _: &[u8]) -> anyhow::Result<Matches> {
            if let Some(Some(error)) = self.script.script().batches.pop_front() {
                anyhow::bail!(error);
            }
            Ok(Matches {
                events: vec![0; self.keys.len()],
                subscriptions: self.keys.clone(),
            })
        }
    }

    struct Harness {
        stand_ins: StandIns,
        handle: FilterHandle,
        component: FilterComponent,
        frames: mpsc::Receiver<String>,
        heads: Vec<Arc<Block>>,
        shutdown: CancellationToken,
    }

    /// A newHeads actor on stand-ins, with subscription 1 to everything.
    async fn harness() -> Harness {
        let (_, component) = builtin("newHeads");
        let stand_ins = StandIns::default();
        let metrics = Metrics::default().actor("eth", "newHeads");
        let handle = FilterHandle::spawn(
            Arc::new(stand_ins.clone()),
            component.clone(),
            "eth",
            metrics,
        )
        .expect("actor");
        let shutdown = CancellationToken::new();
        let frames = subscribe_all(&handle, 1, &shutdown).await;
        let mut devnet = Devnet::new(1, &DevnetSettings::default());
        let heads = std::iter::once(devnet.genesis())
            .chain(
                std::iter::repeat_with(|| devnet.next_step())
                    .flatten()
                    .filter_map(|event| match event {
                        crate::ingest::SourceEvent::Block(block) => Some(block),
                        _ => None,
                    }),
            )
            .take(8)
            .collect();
        Harness {
            stand_ins,
            handle,
            component,
            frames,
            heads,
            shutdown,
        }
    }

    impl Harness {
        /// Hands head `n` to the actor.
        async fn send(&self, n: usize) {
            let batch = EventBatch::new(
                Source::Heads,
                vec![StreamEvent::Head(self.heads[n].clone())],
            );
            assert!(
                self.handle.send_batch(Arc::new(batch)).await,
                "actor running"
            );
        }

        /// The next frame the subscriber gets.
        async fn next(&mut self) -> String {
            tokio::time::timeout(Duration::from_secs(30), self.frames.recv())
                .await
                .expect("a frame in time")
                .expect("the sink is open")
        }

        /// The notification for head `n`.
        fn head(&self, n: usize) -> String {
            fanout::notification("0x1", &format!("\"{}\"", self.heads[n].hash))
        }

        fn other_component(&self) -> FilterComponent {
            let mut other = self.component.clone();
            other.origin = "a replacement".into();
            other.hash = "0x02".into();
            other
        }
    }

    impl Drop for Harness {
        fn drop(&mut self) {
            self.shutdown.cancel();
        }
    }

    /// A failed call (a trap) loses that batch only: the next call builds a
    /// fresh instance, replays every subscription into it, and delivers.
    #[tokio::test]
    async fn a_trap_rebuilds_the_instance_and_replays_its_subscriptions() {
        let mut h = harness().await;
        h.stand_ins.script().batches = VecDeque::from([Some("wasm trap: unreachable".into())]);
        h.send(1).await;
        h.send(2).await;
        assert_eq!(h.next().await, h.head(2), "head 1 went to the failed call");
        {
            let script = h.stand_ins.script();
            assert_eq!(script.made, 2, "rebuilt once");
            assert_eq!(
                script.subscribed,
                vec![(1, 1), (2, 1)],
                "subscription 1 replayed into it"
            );
        }
        let status = h.handle.status();
        assert_eq!((status.failures, status.disabled), (1, None));
    }

    /// Three failed calls in a row (here a trap, a deadline, a trap) disable
    /// the component: its subscriptions end with the reason, new ones are
    /// refused until a working component replaces it.
    #[tokio::test]
    async fn three_failures_in_a_row_disable_the_component() {
        let mut h = harness().await;
        h.stand_ins.script().batches = VecDeque::from([
            Some("wasm trap: unreachable".into()),
            Some("the call ran past its deadline of 1000 ms".into()),
            Some("wasm trap: out of bounds".into()),
        ]);
        for n in 1..=3 {
            h.send(n).await;
        }
        let ended: serde_json::Value = serde_json::from_str(&h.next().await).expect("JSON");
        let message = ended["params"]["error"]["message"]
            .as_str()
            .expect("an error");
        assert!(
            message.contains("disabled") && message.contains("3 calls in a row failed"),
            "{message}"
        );
        let refused = subscribe_all_refused(&h).await;
        assert!(matches!(refused, SubscribeError::Unavailable(m) if m.contains("disabled")));
        let status = h.handle.status();
        assert_eq!(status.failures, 3);
        assert!(
            status
                .disabled
                .is_some_and(|reason| reason.contains("out of bounds"))
        );

        // A working replacement brings the topic back.
        h.handle.swap(h.other_component()).await.expect("swapped");
        assert_eq!(h.handle.status().disabled, None);
    }

    async fn subscribe_all_refused(h: &Harness) -> SubscribeError {
        let (sink, _frames) = fanout::Sink::new(8, &h.shutdown);
        h.handle
            .subscribe(Subscribe {
                key: 2,
                id: "0x2".into(),
                params: "[]".into(),
                sink,
                start: Start::Now,
            })
            .await
            .expect_err("refused")
    }

    /// Only failures in a row count: one success between them starts over.
    #[tokio::test]
    async fn a_success_between_failures_starts_the_count_over() {
        let mut h = harness().await;
        let trap = || Some("wasm trap: unreachable".to_string());
        h.stand_ins.script().batches = VecDeque::from([trap(), trap(), None, trap(), trap()]);
        for n in 1..=6 {
            h.send(n).await;
        }
        assert_eq!(h.next().await, h.head(3));
        assert_eq!(h.next().await, h.head(6));
        let status = h.handle.status();
        assert_eq!((status.failures, status.disabled), (4, None));
    }

    /// A swap replays every live subscription into the new component; if it
    /// refuses one, the swap is refused and the old component keeps serving.
    #[tokio::test]
    async fn a_swap_replays_or_is_refused_and_the_old_component_serves_on() {
        let mut h = harness().await;
        h.stand_ins.script().refuse = Some("no such filter field".into());
        let refused = h
            .handle
            .swap(h.other_component())
            .await
            .expect_err("refused");
        assert!(
            refused.contains("refuses live subscription 0x1"),
            "{refused}"
        );
        h.stand_ins.script().refuse = None;
        assert_eq!(h.handle.status().origin, h.component.origin);
        h.send(1).await;
        assert_eq!(h.next().await, h.head(1), "the old instance serves on");

        h.handle.swap(h.other_component()).await.expect("swapped");
        {
            let script = h.stand_ins.script();
            assert_eq!(script.made, 3, "the refused one, then the new one");
            assert_eq!(script.subscribed, vec![(1, 1), (3, 1)], "replayed");
        }
        assert_eq!(h.handle.status().origin, "a replacement");
        h.send(2).await;
        assert_eq!(h.next().await, h.head(2), "the new instance serves");

        // A component of another stream is refused before the actor.
        let mut logs = h.other_component();
        logs.manifest.source = Source::Logs;
        assert!(h.handle.swap(logs).await.is_err());
    }
}
