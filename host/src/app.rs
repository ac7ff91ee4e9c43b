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

use crate::bus::Bus;
use crate::bus::webhooks::holder_name;
use crate::chain::{Chain, reload};
use crate::config::{Config, Role};
use crate::filters::{FilterEngine, FilterRegistry};
use crate::history::limits::Streams;
use crate::http::{AppState, Stats};
use crate::keys::Keys;
use crate::keys::plan::Plans;
use crate::keys::store::{KeyStore, LocalStore as LocalKeys};
use crate::metrics::Metrics;
use crate::rpc::rate_limit::RateLimit;
use crate::rpc::subscriptions::Subscriptions;
use crate::rpc::webhooks::Opener;
use crate::usage::Ledger;
use crate::usage::ledger::{LocalStore as LocalUsage, UsageStore};
use crate::webhook::claim::{Always, Claims};
use crate::webhook::post::Poster;
use crate::webhook::store::LocalStore;
use crate::webhook::store::Store;
use crate::webhook::{Parts, Webhooks};

/// Loads the filters and starts every chain; the server then serves the
/// returned state ([`crate::http::serve`]).
pub async fn start(config: &Config, shutdown: CancellationToken) -> anyhow::Result<Arc<AppState>> {
    let specs = config.validate()?;
    let bus = match config.role {
        Role::All => None,
        role => Some(Bus::connect(&config.bus, &format!("chainsieve {}", role.name())).await?),
    };
    let engine = FilterEngine::new(&config.filters)?;
    let registry = FilterRegistry::load(&engine, &config.filters.dir)?;
    let metrics = Arc::new(Metrics::default());
    // The chains' tasks stop with the server, or at once if a later chain
    // fails to start (nothing is left running behind an error).
    let chains_running = shutdown.child_token();
    let tasks = TaskTracker::new();
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
    let filter_reloads = reload::spawn(
        registry,
        engine,
        config.filters.dir.clone(),
        // An ingest runs no filters.
        chains
            .values()
            .filter(|_| config.role != Role::Ingest)
            .cloned()
            .collect(),
        chains_running.clone(),
        &tasks,
    )
    .inspect_err(|_| chains_running.cancel())?;
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
            let started = start_webhooks(config, opener, bus.as_ref(), &tasks, &chains_running);
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
        webhooks,
    }))
}

/// The API keys: those of `[auth] keys` (or the demo key) and the managed
/// ones, kept on a server of role `all` in `keys.redb` under `[log]
/// data_dir` (in memory without one), on the bus in its KV bucket (an
/// ingest serves no client: it keeps only the config's).
async fn start_keys(
    config: &Config,
    plans: Plans,
    served: Vec<String>,
    bus: Option<&Bus>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<Arc<Keys>> {
    let metering = config.usage.enabled && config.role != Role::Ingest;
    let store: Arc<dyn KeyStore> = match (config.role, bus) {
        (Role::Edge, Some(bus)) => Arc::new(bus.keys().await?),
        _ => Arc::new(LocalKeys::open(match config.role {
            Role::All => config.log.data_dir.as_deref(),
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
/// server of role `all` in `usage.redb` under `[log] data_dir` (in memory
/// without one), on an edge in the bus's KV bucket; none on an ingest or
/// with `[usage] enabled = false`.
async fn start_ledger(
    config: &Config,
    keys: &Arc<Keys>,
    bus: Option<&Bus>,
    sessions: &TaskTracker,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Arc<Ledger>>> {
    if !config.usage.enabled || config.role == Role::Ingest {
        return Ok(None);
    }
    let retention = config.usage.retention();
    let store: Arc<dyn UsageStore> = match bus {
        Some(bus) => Arc::new(bus.usage(retention, holder_name()).await?),
        None => Arc::new(LocalUsage::open(config.log.data_dir.as_deref(), retention)?),
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
/// `[log] data_dir` (in memory without one) and all delivered here; on an
/// edge, kept in the bus's buckets and each delivered by the edge holding
/// its lease. Their subscriptions are opened as `eth_subscribe` opens a
/// socket's.
async fn start_webhooks(
    config: &Config,
    opener: Opener,
    bus: Option<&Bus>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<Arc<Webhooks>> {
    let (store, claims): (Arc<dyn Store>, Arc<dyn Claims>) = match bus {
        None => (
            Arc::new(LocalStore::open(config.log.data_dir.as_deref(), tasks)?),
            Arc::new(Always),
        ),
        Some(bus) => (
            Arc::new(bus.webhooks().await?),
            Arc::new(
                bus.webhook_claims(config.webhooks.lease(), &holder_name(), tasks)
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
    };
    Webhooks::start(parts, tasks, shutdown.clone())
        .await
        .context("starting the webhooks")
}
