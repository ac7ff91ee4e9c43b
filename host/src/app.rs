//! The wiring, at the top of the house: the config comes in, the filter
//! engine and components are loaded, every chain is started with its
//! pipeline and actors, the filters directory is watched, and the HTTP
//! side's state is built around them. Shutdown is passed down; nothing
//! below reaches back up here. Where each feature keeps its state is
//! decided once, in [`stores`].

mod stores;

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
use chainsieve_keys::plan::Plans;
use chainsieve_rpc::rate_limit::RateLimit;
use chainsieve_rpc::subscriptions::Subscriptions;
use chainsieve_rpc::webhooks::Opener;
use chainsieve_runtime::metrics::Metrics;
use chainsieve_runtime::tasks::Tasks;
use chainsieve_uploads::UploadStore;
use chainsieve_usage::Ledger;
use chainsieve_usage::ledger::UsageStore;
use chainsieve_watchlists::Watchlists;
use chainsieve_webhook::claim::Claims;
use chainsieve_webhook::post::Poster;
use chainsieve_webhook::store::Store as WebhookStore;
use chainsieve_webhook::{Parts, Webhooks};

use stores::Stores;

/// The data directory's subdirectory of kept filter compilations.
const COMPILED_DIR: &str = "compiled";

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
    // With a data directory, compilations outlive the process: a restart
    // reads them instead of compiling every component again.
    let engine = match config.data_dir() {
        Some(dir) => FilterEngine::keeping_compiled(&config.filters, &dir.join(COMPILED_DIR))?,
        None => FilterEngine::new(&config.filters)?,
    };
    let mut registry = FilterRegistry::load(&engine, &config.filters.dir)?;
    let metrics = Arc::new(Metrics::default());
    // The chains' tasks stop with the server, or at once if anything
    // after them fails to start: the guard cancels them unless this
    // function returns the running server (nothing is left running behind
    // an error, whichever step fails).
    let chains_running = shutdown.child_token();
    let stop_on_error = chains_running.clone().drop_guard();
    let tasks = Tasks::new(chains_running.clone());
    let stores = Stores::open(config, bus.as_ref(), &tasks, &metrics).await?;
    // Followed from before the load: an upload made in between comes
    // again (the hot swap leaves one it serves alone).
    let upload_changes = match &stores.uploads {
        Some(store) => {
            let changes = store.changes();
            load_uploads(&engine, &mut registry, store.as_ref()).await?;
            changes
        }
        None => Box::pin(futures_util::stream::pending()),
    };
    // Before the chains: their pipelines place its edits.
    let watchlists = match &stores.watchlists {
        None => None,
        Some(store) => Some(
            Watchlists::start(
                store.clone(),
                &tasks,
                &metrics.queues,
                chains_running.clone(),
            )
            .await
            .context("loading the watchlists")?,
        ),
    };
    let mut chains = BTreeMap::new();
    for spec in &specs {
        let chain = Chain::start(
            spec,
            &registry,
            &engine,
            &metrics,
            config,
            bus.as_ref(),
            &chains_running,
            &tasks,
            watchlists.as_ref(),
        )
        .await
        .with_context(|| format!("starting chain {}", spec.name))?;
        chains.insert(spec.name.clone(), chain);
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
    )?;
    let uploads = stores
        .uploads
        .map(|store| Arc::new(Uploads::new(engine, store, commands)));
    let plans = Plans::from_config(config);
    let keys = Keys::start(
        plans.clone(),
        chains.keys().cloned().collect(),
        &config.keys()?,
        config.usage.enabled && config.role != Role::Ingest,
        stores.keys,
        &tasks,
        chains_running.clone(),
    )
    .await
    .context("loading the API keys")?;
    let history_streams = Arc::new(Streams::new(config.history.max_streams));
    let sessions = TaskTracker::new();
    let ledger = stores
        .usage
        .map(|store| start_ledger(config, store, &keys, &sessions, &tasks, &chains_running));
    let subscriptions = Arc::new(Subscriptions::default());
    let webhooks = match stores.webhooks {
        // An ingest serves no client.
        None => None,
        Some(kept) => {
            let opener = Opener {
                chains: chains.clone(),
                history_streams: history_streams.clone(),
                keys: keys.clone(),
                subscriptions: subscriptions.clone(),
                watchlists: watchlists.clone(),
            };
            Some(start_webhooks(config, opener, kept, &tasks, &chains_running).await?)
        }
    };
    stop_on_error.disarm();
    Ok(Arc::new(AppState {
        role: config.role,
        chains,
        default_chain,
        keys,
        admin_token: config.auth.admin_token.clone(),
        subscriptions,
        history_streams,
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
        watchlists,
    }))
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

/// The usage ledger, flushing every key's meter to hourly buckets in
/// `store`.
fn start_ledger(
    config: &Config,
    store: Arc<dyn UsageStore>,
    keys: &Arc<Keys>,
    sessions: &TaskTracker,
    tasks: &Tasks,
    shutdown: &CancellationToken,
) -> Arc<Ledger> {
    let keys = keys.clone();
    Ledger::spawn(
        store,
        Box::new(move || keys.meters()),
        config.usage.flush_every(),
        sessions.clone(),
        tasks,
        shutdown.clone(),
    )
}

/// The webhooks, kept in `store` and delivered where `claims` says (all
/// here on a server of role `all`; on an edge, each by the edge holding
/// its lease). Their subscriptions are opened as `eth_subscribe` opens a
/// socket's.
async fn start_webhooks(
    config: &Config,
    opener: Opener,
    (store, claims): (Arc<dyn WebhookStore>, Arc<dyn Claims>),
    tasks: &Tasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<Arc<Webhooks>> {
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
