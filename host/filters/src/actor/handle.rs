//! The actor's public face: the handle the chain and the sessions hold,
//! the requests they send it, and what it reports of itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::SystemTime;

use anyhow::Context;
use chainsieve_eventlog::EventLog;
use chainsieve_eventlog::cursor::{ResumeError, ResumeFrom};
use chainsieve_fanout::Sink;
use chainsieve_filter_core::Source;
use chainsieve_history::HistoryFeed;
use chainsieve_model::Grade;
use chainsieve_runtime::metrics::ActorMetrics;
use tokio::sync::{mpsc, oneshot};

use chainsieve_watchlists::views::View;

use super::gate::{Gate, Wakeup};
use super::{Actor, replay};
use crate::batch::EventBatch;
use crate::engine::FilterComponent;
use crate::instance::Instantiate;

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
    /// The parameters were well-formed but over one of the filter's limits
    /// (the refusal began with
    /// [`chainsieve_filter_core::params::LIMIT_EXCEEDED`]).
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
    /// The watchlists as the subscription found them, when its parameters
    /// name one: what its replay matches as of until a live batch brings a
    /// newer view (docs/src/watchlists.md, Where an edit applies).
    pub view: Option<Arc<View>>,
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
    Gated(Arc<Gate>),
    /// No response is due (a JSON-RPC notification subscribed).
    Now,
}

pub(super) enum Command {
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
    pub(super) fn of(component: &FilterComponent) -> Self {
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
            wakeup: Wakeup::default(),
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
            last_view: None,
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

pub(super) fn lock(status: &Mutex<FilterStatus>) -> std::sync::MutexGuard<'_, FilterStatus> {
    // A status is plain data; a panic while it was held cannot break it.
    status
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
