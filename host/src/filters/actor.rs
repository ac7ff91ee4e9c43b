//! One actor per (chain, topic): a dedicated thread that owns the topic's
//! component instance (one `Store`, called synchronously, which is cheaper
//! than async here) and its subscriptions. Batches and subscription
//! commands arrive on one channel, so a subscription takes effect between
//! two batches, never in the middle of one.
//!
//! A trap, a timeout or a bad answer never takes the server down: the actor
//! rebuilds the instance and replays the subscriptions it keeps on record.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use anyhow::Context;
use chainsieve_filter_sdk::{Payload, Source};
use tokio::sync::{mpsc, oneshot};

use super::engine::{FilterComponent, FilterEngine, FilterInstance};
use crate::fanout::Sink;
use crate::ingest::EventBatch;
use crate::rpc;

/// Batches (and commands) an actor may have waiting; a full queue makes the
/// chain wait, which pushes back on its source instead of buffering without
/// bound.
const QUEUE: usize = 256;

/// Why a subscription was not created.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubscribeError {
    /// The filter refused the parameters; the message is for the client.
    #[error("{0}")]
    Params(String),
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
    /// When set, the actor queues the `eth_subscribe` response itself, so
    /// it reaches the client before the subscription's first notification.
    pub ack: Option<rpc::Id>,
}

enum Command {
    Batch(Arc<EventBatch>),
    Subscribe(Subscribe, oneshot::Sender<Result<(), SubscribeError>>),
    /// Acknowledged once the subscription is gone from the actor: nothing
    /// is queued for it after that.
    Unsubscribe(u64, oneshot::Sender<()>),
}

/// The handle the chain and the sessions use to reach an actor.
#[derive(Clone, Debug)]
pub struct FilterHandle {
    pub topic: Arc<str>,
    pub source: Source,
    /// Where the component came from (for logs and the admin view).
    pub origin: Arc<str>,
    commands: mpsc::Sender<Command>,
    /// Live subscriptions; the chain skips batches when there are none.
    subscribers: Arc<AtomicUsize>,
}

impl FilterHandle {
    /// Instantiates `component` for `chain` and starts its actor thread.
    pub fn spawn(
        engine: Arc<FilterEngine>,
        component: FilterComponent,
        chain: &str,
    ) -> anyhow::Result<Self> {
        let instance = engine.instantiate(&component)?;
        let (commands, rx) = mpsc::channel(QUEUE);
        let subscribers = Arc::new(AtomicUsize::new(0));
        let handle = FilterHandle {
            topic: component.manifest.topic.clone().into(),
            source: component.manifest.source,
            origin: component.origin.clone().into(),
            commands,
            subscribers: subscribers.clone(),
        };
        let actor = Actor {
            chain: chain.to_string(),
            engine,
            component,
            instance: Some(instance),
            subscriptions: HashMap::new(),
            subscribers,
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
}

/// What the actor keeps of a subscription: enough to deliver to it and to
/// replay it into a rebuilt instance.
struct Record {
    id: Arc<str>,
    params: String,
    payload: Payload,
    sink: Sink,
}

struct Actor {
    chain: String,
    engine: Arc<FilterEngine>,
    component: FilterComponent,
    /// `None` after a failure until the rebuild succeeds.
    instance: Option<FilterInstance>,
    subscriptions: HashMap<u64, Record>,
    subscribers: Arc<AtomicUsize>,
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
            if let Err(panic) = handled {
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

    fn handle(&mut self, command: Command) {
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
        }
    }

    fn subscribe(&mut self, request: Subscribe) -> Result<(), SubscribeError> {
        let Subscribe {
            key,
            id,
            params,
            sink,
            ack,
        } = request;
        let outcome = self
            .with_instance(|instance| instance.subscribe(key, &params))
            .ok_or_else(|| {
                SubscribeError::Unavailable(format!(
                    "the {} filter failed; try again",
                    self.component.manifest.topic
                ))
            })?;
        let payload = outcome.map_err(SubscribeError::Params)?;
        if let Some(request_id) = ack {
            let result = rpc::result(&id).expect("a string serializes");
            if let Some(frame) = rpc::response(&request_id, &Ok(result)) {
                // If the connection is already overflowing it is closing.
                let _ = sink.send(frame);
            }
        }
        self.subscriptions.insert(
            key,
            Record {
                id,
                params,
                payload,
                sink,
            },
        );
        self.subscribers
            .store(self.subscriptions.len(), Ordering::Relaxed);
        Ok(())
    }

    fn unsubscribe(&mut self, key: u64) {
        if self.subscriptions.remove(&key).is_some() {
            self.subscribers
                .store(self.subscriptions.len(), Ordering::Relaxed);
            self.with_instance(|instance| instance.unsubscribe(key));
        }
    }

    fn deliver(&mut self, batch: &EventBatch) {
        if self.subscriptions.is_empty() {
            return;
        }
        let Some(matches) = self.with_instance(|instance| instance.match_batch(batch.encoded()))
        else {
            return;
        };
        for (event, key) in matches.pairs() {
            let event = event as usize;
            if event >= batch.len() {
                tracing::warn!(chain = %self.chain, topic = %self.component.manifest.topic, event, len = batch.len(), "filter returned an event index outside the batch");
                continue;
            }
            if let Some(record) = self.subscriptions.get(&key) {
                // Overflow closes that connection; a closed one unsubscribes.
                let _ = record
                    .sink
                    .notify(&record.id, batch.payload(event, record.payload));
            }
        }
    }

    /// Runs `call` on the instance; on failure logs it, rebuilds the
    /// instance with every subscription replayed, and returns `None`.
    fn with_instance<T>(
        &mut self,
        call: impl FnOnce(&mut FilterInstance) -> anyhow::Result<T>,
    ) -> Option<T> {
        if self.instance.is_none() {
            self.rebuild();
        }
        let instance = self.instance.as_mut()?;
        match call(instance) {
            Ok(value) => Some(value),
            Err(error) => {
                tracing::error!(chain = %self.chain, topic = %self.component.manifest.topic, origin = %self.component.origin, error = format!("{error:#}"), "filter call failed; rebuilding the instance");
                self.instance = None;
                self.rebuild();
                None
            }
        }
    }

    fn rebuild(&mut self) {
        let mut instance = match self.engine.instantiate(&self.component) {
            Ok(instance) => instance,
            Err(error) => {
                tracing::error!(chain = %self.chain, topic = %self.component.manifest.topic, error = format!("{error:#}"), "rebuilding the filter instance failed");
                return;
            }
        };
        let mut dropped = Vec::new();
        for (key, record) in &self.subscriptions {
            match instance.subscribe(*key, &record.params) {
                Ok(Ok(_)) => {}
                Ok(Err(refusal)) => {
                    tracing::warn!(chain = %self.chain, topic = %self.component.manifest.topic, subscription = %record.id, %refusal, "rebuilt filter refused a subscription on replay; dropping it");
                    dropped.push(*key);
                }
                Err(error) => {
                    tracing::error!(chain = %self.chain, topic = %self.component.manifest.topic, error = format!("{error:#}"), "replaying subscriptions failed");
                    return;
                }
            }
        }
        for key in dropped {
            self.subscriptions.remove(&key);
        }
        self.subscribers
            .store(self.subscriptions.len(), Ordering::Relaxed);
        self.instance = Some(instance);
    }
}
