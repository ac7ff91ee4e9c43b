//! Webhooks: subscriptions delivered by HTTP POST instead of a socket,
//! with the same notifications, cursors and reorg undo, durable across
//! restarts (docs/src/api.md, Webhooks; docs/src/architecture.md,
//! Webhooks).
//!
//! - [`definition`] — what a webhook is and how far it got;
//! - [`store`] — where both persist (the embedded database);
//! - [`feed`] — how a webhook's subscription is opened (the RPC side's
//!   `eth_subscribe`, handed down by the wiring);
//! - [`worker`] — one webhook's delivery loop; [`body`] — a delivery's
//!   body; [`post`] — one POST and what its answer asks for; [`sign`] —
//!   its signature; [`target`] — where a webhook may deliver.
//!
//! [`Webhooks`] is the service the API calls: it holds every webhook of
//! the process, one worker task per active one.

pub mod body;
pub mod definition;
pub mod feed;
pub mod post;
pub mod sign;
pub mod store;
pub mod target;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::WebhooksConfig;
use crate::fanout::Sink;
pub use definition::{Batching, Definition, Progress, State};
pub use feed::{Feeds, Opened, Refusal};
use post::Transport;
use store::Store;
use target::Policy;
use worker::{Hook, Shared, now_ms};

/// Why a webhook call was refused; the RPC side answers each with its
/// JSON-RPC error.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// No webhook of that id for the caller's key (another key's included).
    #[error("webhook not found")]
    NotFound,
    /// A bad input: -32602.
    #[error("{0}")]
    Invalid(String),
    /// Over a limit: -32005.
    #[error("{0}")]
    Limit(String),
    /// The subscription refused, as `eth_subscribe` would have.
    #[error(transparent)]
    Refused(Refusal),
    /// The store failed: -32603.
    #[error("the webhooks database failed: {0:#}")]
    Store(anyhow::Error),
}

/// What `webhook_create` asks for.
#[derive(Clone, Debug)]
pub struct Create {
    pub chain: String,
    pub url: String,
    /// `eth_subscribe`'s params.
    pub subscribe: Vec<Value>,
    pub batch: Batching,
}

/// Every webhook of the process and its workers.
pub struct Webhooks {
    shared: Arc<Shared>,
    policy: Policy,
    /// By id. Short critical sections only; each entry's own lock orders
    /// the calls about it.
    hooks: Mutex<HashMap<String, Arc<Entry>>>,
    /// Held across a create, so two at once cannot both pass a key's
    /// limit.
    creating: tokio::sync::Mutex<()>,
    /// The workers: at shutdown the store is closed once they have all
    /// ended (their last writes are kept).
    workers: TaskTracker,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks").finish_non_exhaustive()
    }
}

/// One webhook and its worker, if it runs.
struct Entry {
    hook: Arc<Hook>,
    /// Held by a call that changes the webhook (pause, resume, delete),
    /// across stopping its worker and starting the next.
    worker: tokio::sync::Mutex<Option<Worker>>,
}

struct Worker {
    stop: CancellationToken,
    done: JoinHandle<()>,
}

impl Worker {
    /// Stops it and waits until it has: nothing it does comes after.
    async fn stop(self) {
        self.stop.cancel();
        let _ = self.done.await;
    }
}

/// What `/metrics` reads of the webhooks in one state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateFigures {
    pub webhooks: u64,
    /// Notifications waiting to be delivered.
    pub backlog: u64,
    /// How long the oldest of them has waited.
    pub lag: Duration,
}

impl Webhooks {
    /// Loads every stored webhook and starts the active ones; at shutdown,
    /// the workers stop, then the store closes, on `tasks`.
    pub async fn start(
        config: WebhooksConfig,
        store: Arc<dyn Store>,
        feeds: Arc<dyn Feeds>,
        transport: Arc<dyn Transport>,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Arc<Self>> {
        let stored = store.load().await?;
        let policy = Policy {
            allow_http: config.allow_http,
            allow_private_addresses: config.allow_private_addresses,
        };
        let webhooks = Arc::new(Self {
            shared: Arc::new(Shared {
                feeds,
                store,
                transport,
                config,
                clock: now_ms,
                deliveries: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }),
            policy,
            hooks: Mutex::default(),
            creating: tokio::sync::Mutex::new(()),
            workers: TaskTracker::new(),
            shutdown: shutdown.clone(),
        });
        let (workers, shared) = (webhooks.workers.clone(), webhooks.shared.clone());
        tasks.spawn(async move {
            shutdown.cancelled().await;
            workers.close();
            workers.wait().await;
            shared.store.close();
        });
        for (definition, progress) in stored {
            let paused = definition.paused.is_some();
            let id = definition.id.clone();
            let entry = Arc::new(Entry {
                hook: Arc::new(Hook::new(definition, progress)),
                worker: tokio::sync::Mutex::new(None),
            });
            if !paused {
                *entry.worker.lock().await = Some(webhooks.spawn(&entry.hook, None));
            }
            webhooks.lock().insert(id, entry);
        }
        Ok(webhooks)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.hooks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn spawn(&self, hook: &Arc<Hook>, first: Option<(Opened, crate::fanout::Frames)>) -> Worker {
        let stop = self.shutdown.child_token();
        let done = self.workers.spawn(worker::run(
            hook.clone(),
            self.shared.clone(),
            stop.clone(),
            first,
        ));
        Worker { stop, done }
    }

    /// Makes a webhook for `owner` (see [`definition::owner_of`]): checks
    /// its target and batching, opens its subscription (refused as
    /// `eth_subscribe` would refuse it), stores it and starts delivering.
    /// Answers its view and, this once, its secret.
    pub async fn create(&self, owner: &str, request: Create) -> Result<Value, WebhookError> {
        let _creating = self.creating.lock().await;
        let config = &self.shared.config;
        let held = self
            .lock()
            .values()
            .filter(|entry| entry.hook.definition().owner == owner)
            .count();
        if held >= config.max_per_key {
            return Err(WebhookError::Limit(format!(
                "webhook limit reached: this API key has {held} webhooks (webhooks.max_per_key); delete one first"
            )));
        }
        self.check_target(&request.url).await?;
        let batch = request.batch;
        if !(1..=config.max_batch_events).contains(&batch.max_events) {
            return Err(WebhookError::Invalid(format!(
                "batch.maxEvents must be between 1 and {} (webhooks.max_batch_events), got {}",
                config.max_batch_events, batch.max_events
            )));
        }
        if batch.max_wait_ms > MAX_WAIT_MS {
            return Err(WebhookError::Invalid(format!(
                "batch.maxWaitMs must be at most {MAX_WAIT_MS}, got {}",
                batch.max_wait_ms
            )));
        }
        let definition = Definition {
            id: crate::fanout::new_id().to_string(),
            owner: owner.to_string(),
            chain: request.chain,
            url: request.url,
            subscribe: request.subscribe,
            batch,
            secret: sign::new_secret(),
            created_at: now_ms(),
            paused: None,
        };
        let (sink, frames) = Sink::new(config.queue);
        let opened = self
            .shared
            .feeds
            .open(&definition, None, sink)
            .await
            .map_err(WebhookError::Refused)?;
        if let Err(error) = self.shared.store.put_definition(definition.clone()).await {
            opened.close().await;
            return Err(WebhookError::Store(error));
        }
        let secret = definition.secret.clone();
        let id = definition.id.clone();
        let hook = Arc::new(Hook::new(definition, Progress::default()));
        let worker = self.spawn(&hook, Some((opened, frames)));
        let mut view = definition::view(&hook.definition(), &hook.progress());
        view["secret"] = Value::String(secret);
        self.lock().insert(
            id,
            Arc::new(Entry {
                hook,
                worker: tokio::sync::Mutex::new(Some(worker)),
            }),
        );
        Ok(view)
    }

    /// Whether `url` may be delivered to: its scheme, and the addresses
    /// its host is or resolves to.
    async fn check_target(&self, url: &str) -> Result<(), WebhookError> {
        let parsed = self.policy.check_url(url).map_err(WebhookError::Invalid)?;
        if let (Some(url::Host::Domain(host)), Some(port)) =
            (parsed.host(), parsed.port_or_known_default())
        {
            self.policy
                .check_host(host, port)
                .await
                .map_err(|why| WebhookError::Invalid(format!("url {url:?}: {why}")))?;
        }
        Ok(())
    }

    /// `owner`'s webhooks, oldest first.
    pub fn list(&self, owner: &str) -> Vec<Value> {
        let mut hooks: Vec<Arc<Hook>> = self
            .lock()
            .values()
            .filter(|entry| entry.hook.definition().owner == owner)
            .map(|entry| entry.hook.clone())
            .collect();
        hooks.sort_by_key(|hook| {
            let definition = hook.definition();
            (definition.created_at, definition.id.clone())
        });
        hooks.iter().map(|hook| view(hook)).collect()
    }

    /// One of `owner`'s webhooks.
    pub fn get(&self, owner: &str, id: &str) -> Result<Value, WebhookError> {
        Ok(view(&self.entry(owner, id)?.hook))
    }

    fn entry(&self, owner: &str, id: &str) -> Result<Arc<Entry>, WebhookError> {
        self.lock()
            .get(id)
            .filter(|entry| entry.hook.definition().owner == owner)
            .cloned()
            .ok_or(WebhookError::NotFound)
    }

    /// Stops delivering; the cursor stays where it is.
    pub async fn pause(&self, owner: &str, id: &str) -> Result<Value, WebhookError> {
        let entry = self.entry(owner, id)?;
        let mut worker = entry.worker.lock().await;
        if let Some(running) = worker.take() {
            running.stop().await;
        }
        if entry.hook.definition().paused.is_none() {
            entry
                .hook
                .pause(&*self.shared.store, now_ms(), "paused by its owner".into())
                .await;
        }
        Ok(view(&entry.hook))
    }

    /// Delivers again: from its cursor, or from where `subscribe` (the
    /// definition's params with a new options object) starts. The
    /// subscription is opened before the answer, so a start the chain no
    /// longer holds is refused here and the webhook stays as it was.
    pub async fn resume(
        &self,
        owner: &str,
        id: &str,
        subscribe: Option<Vec<Value>>,
    ) -> Result<Value, WebhookError> {
        let entry = self.entry(owner, id)?;
        let mut worker = entry.worker.lock().await;
        if let Some(running) = worker.take() {
            running.stop().await;
        }
        let hook = &entry.hook;
        let mut definition = hook.definition().clone();
        definition.paused = None;
        let cursor = match &subscribe {
            Some(subscribe) => {
                definition.subscribe = subscribe.clone();
                None
            }
            None => hook.progress().cursor.clone(),
        };
        let (sink, frames) = Sink::new(self.shared.config.queue);
        let opened = self
            .shared
            .feeds
            .open(&definition, cursor.as_deref(), sink)
            .await;
        let opened = match opened {
            Ok(opened) => opened,
            Err(refusal) => {
                // As it was: running again if it ran.
                if hook.definition().paused.is_none() {
                    *worker = Some(self.spawn(hook, None));
                }
                return Err(WebhookError::Refused(refusal));
            }
        };
        let mut progress = hook.progress().clone();
        progress.trouble = None;
        if subscribe.is_some() {
            progress.cursor = None;
            progress.inflight = None;
        }
        let stored = async {
            self.shared.store.put_definition(definition.clone()).await?;
            self.shared
                .store
                .put_progress(definition.id.clone(), progress.clone())
                .await
        };
        if let Err(error) = stored.await {
            opened.close().await;
            return Err(WebhookError::Store(error));
        }
        *hook.definition() = definition;
        *hook.progress() = progress;
        *worker = Some(self.spawn(hook, Some((opened, frames))));
        Ok(view(hook))
    }

    /// Stops and forgets a webhook.
    pub async fn delete(&self, owner: &str, id: &str) -> Result<(), WebhookError> {
        let entry = self.entry(owner, id)?;
        let mut worker = entry.worker.lock().await;
        if let Some(running) = worker.take() {
            running.stop().await;
        }
        self.shared
            .store
            .delete(id.to_string())
            .await
            .map_err(WebhookError::Store)?;
        self.lock().remove(id);
        Ok(())
    }

    /// Deliveries accepted and tries failed since the process started.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.shared.deliveries.load(Ordering::Relaxed),
            self.shared.failures.load(Ordering::Relaxed),
        )
    }

    /// The webhooks in each state, what they have waiting and for how
    /// long, for `/metrics`.
    pub fn states(&self) -> Vec<(State, StateFigures)> {
        let hooks: Vec<Arc<Hook>> = self
            .lock()
            .values()
            .map(|entry| entry.hook.clone())
            .collect();
        let mut figures: Vec<(State, StateFigures)> = State::ALL
            .into_iter()
            .map(|state| (state, StateFigures::default()))
            .collect();
        for hook in hooks {
            let state = State::of(&hook.definition(), &hook.progress());
            let (backlog, lag) = hook.waiting();
            if let Some((_, figures)) = figures.iter_mut().find(|(s, _)| *s == state) {
                figures.webhooks += 1;
                figures.backlog += backlog as u64;
                figures.lag = figures.lag.max(lag.unwrap_or_default());
            }
        }
        figures
    }
}

/// The longest a delivery may wait for more notifications.
pub const MAX_WAIT_MS: u64 = 60_000;

fn view(hook: &Hook) -> Value {
    let definition = hook.definition().clone();
    let progress = hook.progress().clone();
    definition::view(&definition, &progress)
}
