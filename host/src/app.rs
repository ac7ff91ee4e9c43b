//! The wiring, at the top of the house: the config comes in, the filter
//! engine and components are loaded, every chain is started with its
//! pipeline and actors, the filters directory is watched, and the HTTP
//! side's state is built around them. Shutdown is passed down; nothing
//! below reaches back up here.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use chainsieve_bus::Bus;
use chainsieve_chain::uploads::Uploads;
use chainsieve_chain::{Chain, reload};
use chainsieve_config::{Config, Role};
use chainsieve_filters::{FilterEngine, FilterRegistry};
use chainsieve_history::limits::Streams;
use chainsieve_http::{AppState, Stats};
use chainsieve_keys::Keys;
use chainsieve_keys::bus::KvKeys;
use chainsieve_keys::plan::Plans;
use chainsieve_keys::store::{KeyStore, LocalStore as LocalKeys};
use chainsieve_rpc::rate_limit::RateLimit;
use chainsieve_rpc::subscriptions::Subscriptions;
use chainsieve_rpc::webhooks::Opener;
use chainsieve_runtime::metrics::Metrics;
use chainsieve_runtime::tasks::Tasks;
use chainsieve_uploads::bus::ObjectUploads;
use chainsieve_uploads::{LocalStore as LocalUploads, UploadStore};
use chainsieve_usage::Ledger;
use chainsieve_usage::bus::KvUsage;
use chainsieve_usage::ledger::{LocalStore as LocalUsage, UsageStore};
use chainsieve_webhook::bus::{KvStore as KvWebhooks, LeaseClaims, holder_name};
use chainsieve_webhook::claim::{Always, Claims};
use chainsieve_webhook::post::Poster;
use chainsieve_webhook::store::LocalStore;
use chainsieve_webhook::store::Store;
use chainsieve_webhook::{Parts, Webhooks};

/// Loads the filters and starts every chain; the server then serves the
/// returned state ([`chainsieve_http::serve`]).
pub async fn start(config: &Config, shutdown: CancellationToken) -> anyhow::Result<Arc<AppState>> {
    let specs = config.validate()?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    if let Some(dir) = config.data_dir() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the data directory {}", dir.display()))?;
    }
    let bus = match config.role {
        Role::All => None,
        role => Some(Bus::connect(&config.bus, &format!("chainsieve {}", role.name())).await?),
    };
    let engine = FilterEngine::new(&config.filters)?;
    let mut registry = FilterRegistry::load(&engine, &config.filters.dir)?;
    let upload_store = upload_store(config, bus.as_ref()).await?;
    // Followed from before the load: an upload made in between comes
    // again (the hot swap leaves one it serves alone).
    let upload_changes = match &upload_store {
        Some(store) => {
            let changes = store.changes();
            load_uploads(&engine, &mut registry, store.as_ref()).await?;
            changes
        }
        None => Box::pin(futures_util::stream::pending()),
    };
    let metrics = Arc::new(Metrics::default());
    // The chains' tasks stop with the server, or at once if a later chain
    // fails to start (nothing is left running behind an error).
    let chains_running = shutdown.child_token();
    let tasks = Tasks::new(chains_running.clone());
    let mut chains = BTreeMap::new();
    for spec in &specs {
        let started = Chain::start(
            spec,
            &registry,
            &engine,
            &metrics,
            config,
            bus.as_ref(),
            &chains_running,
            &tasks,
        )
        .await;
        match started {
            Ok(chain) => {
                chains.insert(spec.name.clone(), chain);
            }
            Err(error) => {
                chains_running.cancel();
                return Err(error.context(format!("starting chain {}", spec.name)));
            }
        }
    }
    let default_chain = config
        .default_chain()
        .context("no chains configured")?
        .to_string();
    let (filter_reloads, commands) = reload::spawn(
        registry,
        engine.clone(),
        config.filters.dir.clone(),
        // An ingest runs no filters.
        chains
            .values()
            .filter(|_| config.role != Role::Ingest)
            .cloned()
            .collect(),
        upload_changes,
        chains_running.clone(),
        &tasks,
    )
    .inspect_err(|_| chains_running.cancel())?;
    let uploads = upload_store.map(|store| Arc::new(Uploads::new(engine, store, commands)));
    let plans = Plans::from_config(config);
    let keys = start_keys(
        config,
        plans.clone(),
        chains.keys().cloned().collect(),
        bus.as_ref(),
        &tasks,
        &chains_running,
    )
    .await
    .inspect_err(|_| chains_running.cancel())?;
    let history = Arc::new(Streams::new(config.history.max_streams));
    let sessions = TaskTracker::new();
    let ledger = start_ledger(
        config,
        &keys,
        bus.as_ref(),
        &sessions,
        &tasks,
        &chains_running,
    )
    .await
    .inspect_err(|_| chains_running.cancel())?;
    let subscriptions = Arc::new(Subscriptions::default());
    let webhooks = match config.role {
        // An ingest serves no client.
        Role::Ingest => None,
        Role::All | Role::Edge => {
            let opener = Opener {
                chains: chains.clone(),
                history: history.clone(),
                keys: keys.clone(),
                subscriptions: subscriptions.clone(),
            };
            let started = start_webhooks(
                config,
                opener,
                bus.as_ref(),
                (&tasks, &metrics),
                &chains_running,
            );
            Some(started.await.inspect_err(|_| chains_running.cancel())?)
        }
    };
    Ok(Arc::new(AppState {
        role: config.role,
        chains,
        default_chain,
        keys,
        admin_token: config.auth.admin_token.clone(),
        subscriptions,
        history,
        connections: Arc::default(),
        metrics,
        rate: RateLimit::new(&plans),
        limits: config.limits.clone(),
        shutdown,
        sessions,
        ledger,
        tasks,
        stats: Stats::default(),
        filter_reloads,
        uploads,
        webhooks,
    }))
}

/// Where uploaded filter components are kept: on a server of role `all`
/// in `filters.redb` under the data directory (in memory without one), on an
/// edge in the bus's object store; an ingest runs no filters.
async fn upload_store(
    config: &Config,
    bus: Option<&Bus>,
) -> anyhow::Result<Option<Arc<dyn UploadStore>>> {
    Ok(match (config.role, bus) {
        (Role::Ingest, _) => None,
        (Role::Edge, Some(bus)) => Some(Arc::new(ObjectUploads::open(bus).await?)),
        _ => Some(Arc::new(LocalUploads::open(config.data_dir())?)),
    })
}

/// Serves the kept uploads from the start. One that no longer loads (a
/// host whose contract changed) is logged and left out: the built-in or
/// the directory's file of its topic serves.
async fn load_uploads(
    engine: &FilterEngine,
    registry: &mut FilterRegistry,
    store: &dyn UploadStore,
) -> anyhow::Result<()> {
    for (topic, bytes) in store.load().await.context("reading the uploaded filters")? {
        match engine.load(&reload::upload_origin(&topic), &bytes) {
            Ok(component) if component.manifest.topic == topic => registry.upload(component),
            Ok(component) => {
                tracing::error!(%topic, declared = %component.manifest.topic, "an upload declares another topic; not served")
            }
            Err(error) => {
                tracing::error!(%topic, error = format!("{error:#}"), "an upload no longer loads; not served")
            }
        }
    }
    Ok(())
}

/// The API keys: those of `[auth] keys` (or the demo key) and the managed
/// ones, kept on a server of role `all` in `keys.redb` under the data
/// directory (in memory without one), on the bus in its KV bucket (an
/// ingest serves no client: it keeps only the config's).
async fn start_keys(
    config: &Config,
    plans: Plans,
    served: Vec<String>,
    bus: Option<&Bus>,
    tasks: &Tasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<Arc<Keys>> {
    let metering = config.usage.enabled && config.role != Role::Ingest;
    let store: Arc<dyn KeyStore> = match (config.role, bus) {
        (Role::Edge, Some(bus)) => Arc::new(KvKeys::open(bus).await?),
        _ => Arc::new(LocalKeys::open(match config.role {
            Role::All => config.data_dir(),
            _ => None,
        })?),
    };
    Keys::start(
        plans,
        served,
        &config.keys()?,
        metering,
        store,
        tasks,
        shutdown.clone(),
    )
    .await
    .context("loading the API keys")
}

/// The usage ledger, flushing every key's meter to hourly buckets: on a
/// server of role `all` in `usage.redb` under the data directory (in memory
/// without one), on an edge in the bus's KV bucket; none on an ingest or
/// with `[usage] enabled = false`.
async fn start_ledger(
    config: &Config,
    keys: &Arc<Keys>,
    bus: Option<&Bus>,
    sessions: &TaskTracker,
    tasks: &Tasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Arc<Ledger>>> {
    if !config.usage.enabled || config.role == Role::Ingest {
        return Ok(None);
    }
    let retention = config.usage.retention();
    let store: Arc<dyn UsageStore> = match bus {
        Some(bus) => Arc::new(KvUsage::open(bus, retention, holder_name()).await?),
        None => Arc::new(LocalUsage::open(config.data_dir(), retention)?),
    };
    let keys = keys.clone();
    Ok(Some(Ledger::spawn(
        store,
        Box::new(move || keys.meters()),
        config.usage.flush_every(),
        sessions.clone(),
        tasks,
        shutdown.clone(),
    )))
}

/// The webhooks: on a server of role `all`, kept in `webhooks.redb` under
/// the data directory (in memory without one) and all delivered here; on an
/// edge, kept in the bus's buckets and each delivered by the edge holding
/// its lease. Their subscriptions are opened as `eth_subscribe` opens a
/// socket's.
async fn start_webhooks(
    config: &Config,
    opener: Opener,
    bus: Option<&Bus>,
    (tasks, metrics): (&Tasks, &Metrics),
    shutdown: &CancellationToken,
) -> anyhow::Result<Arc<Webhooks>> {
    let (store, claims): (Arc<dyn Store>, Arc<dyn Claims>) = match bus {
        None => (
            Arc::new(LocalStore::open(config.data_dir(), tasks, &metrics.queues)?),
            Arc::new(Always),
        ),
        Some(bus) => (
            Arc::new(KvWebhooks::open(bus).await?),
            Arc::new(
                LeaseClaims::open(
                    bus,
                    config.webhooks.lease(),
                    &holder_name(),
                    tasks.tracker(),
                )
                .await?,
            ),
        ),
    };
    let parts = Parts {
        config: config.webhooks.clone(),
        store,
        feeds: Arc::new(opener),
        transport: Arc::new(Poster::new(&config.webhooks)?),
        claims,
        resolver: Arc::new(chainsieve_webhook::target::System),
    };
    Webhooks::start(parts, tasks, shutdown.clone())
        .await
        .context("starting the webhooks")
}
