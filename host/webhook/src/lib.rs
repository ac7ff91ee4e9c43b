//! Webhooks: subscriptions delivered by HTTP POST instead of a socket,
//! with the same notifications, cursors and reorg undo, durable across
//! restarts (docs/src/api.md, Webhooks; docs/src/architecture.md,
//! Webhooks).
//!
//! - [`definition`] — what a webhook is and how far it got;
//! - [`store`] — where both persist (the embedded database; the bus's
//!   KV buckets on an edge), and what other processes change there;
//! - [`claim`] — who may deliver a webhook (this process; on the bus,
//!   the edge holding its lease); [`claimed`] — a webhook delivered while
//!   its claim holds;
//! - [`feed`] — how a webhook's subscription is opened (the RPC side's
//!   `eth_subscribe`, handed down by the wiring);
//! - [`worker`] — one webhook's delivery loop; [`body`] — a delivery's
//!   body; [`post`] — one POST and what its answer asks for; [`sign`] —
//!   its signature; [`target`] — where a webhook may deliver.
//!
//! [`Webhooks`] is the service the API calls: it holds every webhook of
//! the process (of the deployment, on the bus), one task per active one
//! claiming and delivering it.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_bus`],
//! [`chainsieve_config`], [`chainsieve_fanout`], [`chainsieve_runtime`],
//! [`chainsieve_usage`].

pub mod body;
pub mod bus;
pub mod claim;
mod claimed;
pub mod definition;
pub mod feed;
pub mod post;
pub mod sign;
pub mod store;
pub mod target;
mod worker;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use chainsieve_config::WebhooksConfig;
use chainsieve_fanout::Sink;
use chainsieve_runtime::tasks::{Part, Tasks};
use claim::{Claim, Claims};
use claimed::Opening;
use definition::Paused;
pub use definition::{Batching, Definition, Progress, State};
pub use feed::{FeedRefused, Feeds, Opened};
use post::Transport;
use store::{Change, Store};
use target::{Policy, Resolve};
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
    Refused(FeedRefused),
    /// The store failed: -32603.
    #[error("the webhooks database failed: {0:#}")]
    Store(anyhow::Error),
    /// Another process holds the webhook for longer than a call waits:
    /// -32002.
    #[error("{0}")]
    Busy(String),
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

/// How many webhooks the caller's key may hold: its plan's limit, and the
/// setting it comes from (for the refusal's message).
#[derive(Clone, Debug)]
pub struct Most {
    pub webhooks: usize,
    pub plan: Arc<str>,
    pub origin: String,
}

/// Every webhook of the process and its workers.
pub struct Webhooks {
    shared: Arc<Shared>,
    claims: Arc<dyn Claims>,
    policy: Policy,
    /// By id. Short critical sections only; each entry's own lock orders
    /// the calls and changes about it.
    hooks: Mutex<HashMap<String, Arc<Entry>>>,
    /// Resolves a target's name at creation.
    resolver: Arc<dyn Resolve>,
    /// Creations under way, by owner: counted with the owner's webhooks
    /// against its limit, so two at once cannot both pass it. A short
    /// critical section: nothing is awaited while it is held, so one
    /// receiver's slow name or a slow store delays no other creation.
    creating: Mutex<HashMap<String, usize>>,
    /// The workers: at shutdown the store is closed once they have all
    /// ended (their last writes are kept).
    workers: TaskTracker,
    /// The supervisor the workers report to (and take faults from).
    tasks: Tasks,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks").finish_non_exhaustive()
    }
}

/// A creation under way for `owner`, counted against its limit until
/// dropped.
struct Creating<'a> {
    webhooks: &'a Webhooks,
    owner: String,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        let mut creating = self
            .webhooks
            .creating
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = creating.get_mut(&self.owner) {
            *count -= 1;
            if *count == 0 {
                creating.remove(&self.owner);
            }
        }
    }
}

/// One webhook and the task claiming and delivering it here, if it is
/// active.
struct Entry {
    hook: Arc<Hook>,
    /// Held by whatever changes the webhook here (a call, a change from
    /// the store) across stopping its worker and starting the next.
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

/// Stops `worker`'s task, if one runs.
async fn stop(worker: &mut Option<Worker>) {
    if let Some(running) = worker.take() {
        running.stop().await;
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

/// What the service is built from.
pub struct Parts {
    pub config: WebhooksConfig,
    pub store: Arc<dyn Store>,
    pub feeds: Arc<dyn Feeds>,
    pub transport: Arc<dyn Transport>,
    pub claims: Arc<dyn Claims>,
    /// Resolves a target's name at creation ([`target::System`] but in
    /// tests).
    pub resolver: Arc<dyn Resolve>,
}

impl Webhooks {
    /// Loads every stored webhook, starts claiming the active ones, and
    /// follows what other processes change in the store; at shutdown, the
    /// workers stop, then the store closes, on `tasks`.
    pub async fn start(
        parts: Parts,
        tasks: &Tasks,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Arc<Self>> {
        let Parts {
            config,
            store,
            feeds,
            transport,
            claims,
            resolver,
        } = parts;
        let stored = store.load().await?;
        let changes = store.changes();
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
            claims,
            policy,
            hooks: Mutex::default(),
            resolver,
            creating: Mutex::default(),
            workers: TaskTracker::new(),
            tasks: tasks.clone(),
            shutdown: shutdown.clone(),
        });
        for (definition, progress) in stored {
            let active = definition.paused.is_none();
            let hook = Arc::new(Hook::new(definition, 0, progress));
            let worker = active.then(|| webhooks.spawn(&hook, None));
            let id = hook.definition().id.clone();
            webhooks.lock().insert(
                id,
                Arc::new(Entry {
                    hook,
                    worker: tokio::sync::Mutex::new(worker),
                }),
            );
        }
        let following = webhooks.clone();
        tasks.part("webhooks follower", Part::Service("webhooks"), async move {
            // The workers stop and the store closes however following
            // ended (a panic too): shutdown waits for the store's writer.
            let followed = AssertUnwindSafe(following.follow(changes))
                .catch_unwind()
                .await;
            following.workers.close();
            following.workers.wait().await;
            following.shared.store.close();
            followed.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        Ok(webhooks)
    }

    /// Applies the store's changes until shutdown; the store's feed ending
    /// before (the bus's watch gone) is an error.
    async fn follow(&self, mut changes: BoxStream<'static, Change>) -> anyhow::Result<()> {
        loop {
            let change = tokio::select! {
                () = self.shutdown.cancelled() => return Ok(()),
                change = changes.next() => change,
            };
            match change {
                Some(change) => self.apply(change).await,
                None => anyhow::bail!("the webhooks store's change feed ended"),
            }
        }
    }

    /// Brings this process in line with a change: a webhook new here is
    /// added, one paused or deleted stops delivering, one active gets a
    /// worker claiming it. What this process wrote itself comes back at a
    /// revision it has, and changes nothing.
    async fn apply(&self, change: Change) {
        match change {
            Change::Defined(definition, revision) => {
                let id = definition.id.clone();
                let entry = self.lock().get(&id).cloned();
                let entry = match entry {
                    Some(entry) => entry,
                    None => {
                        let entry = Arc::new(Entry {
                            hook: Arc::new(Hook::new(definition.clone(), 0, Progress::default())),
                            worker: tokio::sync::Mutex::new(None),
                        });
                        self.lock().entry(id).or_insert(entry).clone()
                    }
                };
                let mut worker = entry.worker.lock().await;
                if revision != 0 && revision <= entry.hook.revision() {
                    return;
                }
                let paused = definition.paused.is_some();
                entry.hook.set_definition(definition, revision);
                let running = worker.as_ref().is_some_and(|w| !w.done.is_finished());
                if paused && running {
                    stop(&mut worker).await;
                } else if !paused && !running {
                    *worker = Some(self.spawn(&entry.hook, None));
                }
            }
            Change::Progressed(id, progress) => {
                // Shown here; the process holding the claim writes it.
                let entry = self.lock().get(&id).cloned();
                if let Some(entry) = entry {
                    entry.hook.show_progress(progress);
                }
            }
            Change::Deleted(id) => {
                let entry = self.lock().remove(&id);
                if let Some(entry) = entry {
                    stop(&mut *entry.worker.lock().await).await;
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.hooks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts `hook`'s worker: after a panic it claims the webhook again
    /// and goes on from the cursor the store holds.
    fn spawn(&self, hook: &Arc<Hook>, opening: Option<Opening>) -> Worker {
        let stop = self.shutdown.child_token();
        let (hook, shared, claims, stopped) = (
            hook.clone(),
            self.shared.clone(),
            self.claims.clone(),
            stop.clone(),
        );
        let mut opening = opening;
        let name = format!("webhook {} worker", hook.definition().id);
        let done = self
            .tasks
            .restarting_on(&self.workers, stop.clone(), name, move || {
                claimed::deliver(
                    hook.clone(),
                    shared.clone(),
                    claims.clone(),
                    stopped.clone(),
                    opening.take(),
                )
            });
        Worker { stop, done }
    }

    /// Claims `id` for a call (waiting for another process to let go),
    /// or -32603 at shutdown.
    async fn claim(&self, id: &str) -> Result<Claim, WebhookError> {
        self.claims
            .claim(id, &self.shutdown)
            .await
            .ok_or_else(|| WebhookError::Store(anyhow::anyhow!("the server is shutting down")))
    }

    /// Opens `definition`'s subscription after `cursor` into a new queue.
    async fn open(
        &self,
        definition: &Definition,
        cursor: Option<String>,
        claim: Claim,
    ) -> Result<Opening, WebhookError> {
        let (sink, frames) = Sink::new(self.shared.config.queue);
        let opened = self
            .shared
            .feeds
            .open(definition, cursor.as_deref(), sink)
            .await
            .map_err(WebhookError::Refused)?;
        Ok(Opening {
            opened,
            frames,
            from: cursor,
            claim,
        })
    }

    /// Makes a webhook for `owner` (the digest of its key's secret,
    /// `chainsieve_keys::record::digest`), within `most`: checks
    /// its target and batching, claims it, opens its subscription (refused
    /// as `eth_subscribe` would refuse it), stores it and starts
    /// delivering. Answers its view and, this once, its secret.
    pub async fn create(
        &self,
        owner: &str,
        request: Create,
        most: Most,
    ) -> Result<Value, WebhookError> {
        let config = &self.shared.config;
        let _creating = self.reserve(owner, &most)?;
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
            id: chainsieve_fanout::new_id().to_string(),
            owner: owner.to_string(),
            chain: request.chain,
            url: request.url,
            subscribe: request.subscribe,
            batch,
            secret: sign::new_secret(),
            created_at: now_ms(),
            paused: None,
        };
        // Claimed before it is stored: no other process starts it first.
        let claim = self.claim(&definition.id).await?;
        let opening = self.open(&definition, None, claim).await?;
        // In the map (its worker slot locked) before it is stored: the
        // store's report of this very write finds it and waits, then
        // changes nothing.
        let id = definition.id.clone();
        let hook = Arc::new(Hook::new(definition.clone(), 0, Progress::default()));
        let entry = Arc::new(Entry {
            hook: hook.clone(),
            worker: tokio::sync::Mutex::new(None),
        });
        let mut worker = entry.worker.lock().await;
        self.lock().insert(id.clone(), entry.clone());
        match self
            .shared
            .store
            .put_definition(definition.clone(), 0)
            .await
        {
            Ok(revision) => hook.set_definition(definition.clone(), revision),
            Err(error) => {
                self.lock().remove(&id);
                opening.opened.close().await;
                return Err(WebhookError::Store(error));
            }
        }
        *worker = Some(self.spawn(&hook, Some(opening)));
        let mut view = definition::view(&definition, &Progress::default());
        view["secret"] = Value::String(definition.secret);
        Ok(view)
    }

    /// A place for one more of `owner`'s webhooks within `most`, held
    /// until the creation ends (made or not).
    fn reserve<'a>(&'a self, owner: &str, most: &Most) -> Result<Creating<'a>, WebhookError> {
        let mut creating = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
        let held = self
            .lock()
            .values()
            .filter(|entry| entry.hook.definition().owner == owner)
            .count();
        let under_way = creating.get(owner).copied().unwrap_or(0);
        if held + under_way >= most.webhooks {
            return Err(WebhookError::Limit(format!(
                "webhook limit reached: this API key has {held} webhooks{}, the most its plan \"{}\" allows ({}); delete one first",
                if under_way > 0 {
                    format!(" and {under_way} being made")
                } else {
                    String::new()
                },
                most.plan,
                most.origin
            )));
        }
        *creating.entry(owner.to_string()).or_default() += 1;
        Ok(Creating {
            webhooks: self,
            owner: owner.to_string(),
        })
    }

    /// Whether `url` may be delivered to: its scheme, and the addresses
    /// its host is or resolves to.
    async fn check_target(&self, url: &str) -> Result<(), WebhookError> {
        let parsed = self.policy.check_url(url).map_err(WebhookError::Invalid)?;
        if let (Some(url::Host::Domain(host)), Some(port)) =
            (parsed.host(), parsed.port_or_known_default())
        {
            self.policy
                .check_host(self.resolver.as_ref(), host, port)
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

    /// The webhook as the store holds it now: (definition, revision,
    /// progress); not found if it is gone.
    async fn fresh(&self, id: &str) -> Result<(Definition, u64, Progress), WebhookError> {
        self.shared
            .store
            .read(id.to_string())
            .await
            .map_err(WebhookError::Store)?
            .ok_or(WebhookError::NotFound)
    }

    /// Writes `definition` over revision `expected` and takes it here.
    async fn define(
        &self,
        hook: &Hook,
        definition: Definition,
        expected: u64,
    ) -> Result<(), WebhookError> {
        let revision = self
            .shared
            .store
            .put_definition(definition.clone(), expected)
            .await
            .map_err(WebhookError::Store)?;
        hook.set_definition(definition, revision);
        Ok(())
    }

    /// Stops delivering; the cursor stays where it is. Whichever process
    /// delivers it stops once it sees the change.
    pub async fn pause(&self, owner: &str, id: &str) -> Result<Value, WebhookError> {
        let entry = self.entry(owner, id)?;
        let mut worker = entry.worker.lock().await;
        // Written before the worker stops, which gives its claim back: no
        // other process may take it while it is still active.
        let (mut definition, revision, progress) = self.fresh(id).await?;
        if definition.paused.is_none() {
            definition.paused = Some(Paused {
                at: now_ms(),
                reason: "paused by its owner".into(),
            });
            self.define(&entry.hook, definition, revision).await?;
        }
        stop(&mut worker).await;
        entry.hook.show_progress(progress);
        Ok(view(&entry.hook))
    }

    /// Delivers again: from its cursor, or from where `subscribe` (the
    /// definition's params with a new options object) starts. Whatever
    /// delivers it is stopped first (paused, then claimed here); the
    /// subscription is opened before the answer, so a start the chain no
    /// longer holds is refused and the webhook stays as it was.
    pub async fn resume(
        &self,
        owner: &str,
        id: &str,
        subscribe: Option<Vec<Value>>,
    ) -> Result<Value, WebhookError> {
        let entry = self.entry(owner, id)?;
        let hook = &entry.hook;
        let mut worker = entry.worker.lock().await;
        stop(&mut worker).await;
        let (before, mut revision, _) = self.fresh(id).await?;
        if before.paused.is_none() {
            // Another process may deliver it: it lets go once it sees this.
            let mut pausing = before.clone();
            pausing.paused = Some(Paused {
                at: now_ms(),
                reason: "resuming".into(),
            });
            self.define(hook, pausing, revision).await?;
            revision = hook.revision();
        }
        // Bounded: the process delivering it lets go once it sees the
        // pause, or its lease expires.
        let wait = self.shared.config.lease() * 2;
        let claim = match tokio::time::timeout(wait, self.claim(id)).await {
            Ok(claim) => claim?,
            Err(_) => {
                self.restore(hook, &before, &mut worker).await;
                return Err(WebhookError::Busy(format!(
                    "another server still delivers webhook {id}; try again in a moment"
                )));
            }
        };
        let (mut definition, current, mut progress) = self.fresh(id).await?;
        revision = revision.max(current);
        definition.paused = None;
        if let Some(subscribe) = subscribe {
            definition.subscribe = subscribe;
            progress.cursor = None;
            progress.inflight = None;
        }
        progress.trouble = None;
        let opening = match self.open(&definition, progress.cursor.clone(), claim).await {
            Ok(opening) => opening,
            Err(refused) => {
                self.restore(hook, &before, &mut worker).await;
                return Err(refused);
            }
        };
        let stored = async {
            self.shared
                .store
                .put_progress(id.to_string(), progress.clone())
                .await
                .map_err(WebhookError::Store)?;
            self.define(hook, definition, revision).await
        };
        if let Err(error) = stored.await {
            opening.opened.close().await;
            self.restore(hook, &before, &mut worker).await;
            return Err(error);
        }
        *hook.progress() = progress;
        *worker = Some(self.spawn(hook, Some(opening)));
        Ok(view(hook))
    }

    /// Puts a webhook a resume could not finish back as it was: active
    /// again (claimed by whichever process) if it was, over whatever the
    /// store holds now.
    async fn restore(&self, hook: &Arc<Hook>, before: &Definition, worker: &mut Option<Worker>) {
        if before.paused.is_some() {
            return;
        }
        let written = async {
            let (_, revision, _) = self.fresh(&before.id).await?;
            self.define(hook, before.clone(), revision).await
        };
        match written.await {
            Ok(()) => *worker = Some(self.spawn(hook, None)),
            Err(error) => {
                tracing::error!(webhook = %before.id, %error, "cannot put a webhook back as it was after a failed resume");
            }
        }
    }

    /// Stops and forgets a webhook; whichever process delivers it stops
    /// once it sees the change.
    pub async fn delete(&self, owner: &str, id: &str) -> Result<(), WebhookError> {
        let entry = self.entry(owner, id)?;
        let mut worker = entry.worker.lock().await;
        // Deleted before the worker stops and gives its claim back.
        self.shared
            .store
            .delete(id.to_string())
            .await
            .map_err(WebhookError::Store)?;
        stop(&mut worker).await;
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
            let state = hook.state();
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

#[cfg(test)]
mod tests;
