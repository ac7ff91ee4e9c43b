//! One served chain: its source, its [`pipeline`] (the canonical window,
//! the price index feed, and one filter actor per topic), and the doors the
//! RPC side uses. The set of actors changes at run time when the filters
//! directory does ([`reload`]).

pub mod lead;
pub mod pipeline;
pub mod reload;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLockReadGuard};

use alloy_primitives::B256;
use anyhow::Context;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bus::prices::PriceJournal;
use crate::bus::{self, Bus, ChainLog};
use crate::config::{ChainSpec, Config, LogConfig, Role, RpcConfig, SourceConfig};
use crate::filters::{FilterEngine, FilterHandle, FilterRegistry};
use crate::ingest::SourceEvent;
use crate::ingest::canonical::CanonicalChain;
use crate::ingest::devnet::{self, Devnet, Ledger, Submission};
use crate::ingest::upstream::{self, NodeConnection, UpstreamSettings, UpstreamStatus};
use crate::log::EventLog;
use crate::log::store::{self, LogStore, Persist};
use crate::metrics::Metrics;
use crate::price::PriceIndex;
use crate::price::indexer::DRAIN;
use crate::price::record::InStore;
use crate::price::store::PriceStore;
use lead::Leader;
use pipeline::{Pipeline, PipelineState};

/// Source events that may wait for the pipeline; past that the source
/// waits.
const SOURCE_QUEUE: usize = 1_024;

/// Submitted transactions that may wait for the devnet; past that the
/// submitting requests wait.
const SUBMISSION_QUEUE: usize = 4_096;

#[derive(Debug)]
pub struct Chain {
    /// The URL prefix (`eth`, `bsc`, `polygon`, …).
    pub name: String,
    pub chain_id: u64,
    /// The window, the actors and readiness, shared with the pipeline that
    /// writes them.
    state: Arc<PipelineState>,
    /// A node source's state (`None` for the devnet, which is always live);
    /// the source publishes, readers see the latest.
    pub upstream: Option<watch::Receiver<UpstreamStatus>>,
    /// A devnet chain's door for `eth_sendRawTransaction` (`None` on a
    /// node chain, whose transactions go to the node).
    pub submissions: Option<mpsc::Sender<Submission>>,
    /// A devnet chain's nonces and gas, for the methods wallets call.
    pub ledger: Option<Arc<Ledger>>,
    /// `token_price`'s index of this chain's pools.
    pub price: Arc<PriceIndex>,
    /// A node chain's connection for the methods forwarded to its node
    /// (`None` on the devnet); one multiplexed socket for every client.
    pub node: Option<NodeConnection>,
    /// Which methods are forwarded, and how long they may take.
    pub rpc: RpcConfig,
    /// For the actors of topics added at run time.
    pub metrics: Arc<Metrics>,
}

impl Chain {
    /// Starts the chain's filter actors, its source and its pipeline (on
    /// `tasks`), as `config.role` says: the source is the node or the
    /// devnet, or for an edge the chain's log on `bus`; an ingest runs no
    /// actors and publishes its log to `bus`. They stop when `shutdown` is
    /// cancelled.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        spec: &ChainSpec,
        registry: &FilterRegistry,
        engine: &Arc<FilterEngine>,
        metrics: &Arc<Metrics>,
        config: &Config,
        bus: Option<&Bus>,
        shutdown: &CancellationToken,
        tasks: &TaskTracker,
    ) -> anyhow::Result<Arc<Chain>> {
        let role = config.role;
        let (log, persist) = match role {
            Role::All => event_log(spec, &config.log, tasks)?,
            // The bus keeps the log between processes.
            Role::Ingest | Role::Edge => (Arc::new(EventLog::new(&spec.name, &config.log)), None),
        };
        let topics = match role {
            Role::Ingest => BTreeMap::new(),
            Role::All | Role::Edge => registry
                .active()
                .into_iter()
                .map(|(topic, component)| {
                    let counted = metrics.actor(&spec.name, &topic);
                    let handle = FilterHandle::spawn(engine.clone(), component, &log, counted)?;
                    Ok((topic, handle))
                })
                .collect::<anyhow::Result<_>>()?,
        };
        let price = PriceIndex::open(spec, &config.price)?;
        // The one-process server indexes prices from its pipeline; an
        // ingest from what it publishes, an edge not at all (it applies
        // the bus's price journal).
        let price_feed = (role == Role::All).then(|| {
            let recorder = Arc::new(InStore(price.store().clone()));
            let (indexing, feed) = price.indexing(spec, recorder, shutdown.clone(), DRAIN);
            tasks.spawn(indexing);
            feed
        });
        let state = Arc::new(PipelineState::new(spec.window, topics, log));
        let (events, source) = mpsc::channel(SOURCE_QUEUE);
        let pipeline = Pipeline::new(&spec.name, state.clone(), price_feed, persist, metrics);
        let mut upstream = None;
        let mut submissions = None;
        let mut ledger = None;
        let mut leader = None;
        match (role, bus, &spec.source) {
            (Role::Edge, Some(bus), _) => {
                let on_bus = bus.log(&spec.name).await?;
                let prices = bus.prices(&spec.name).await?;
                tasks.spawn(follow_bus(
                    on_bus,
                    prices,
                    price.store().clone(),
                    config.log.blocks,
                    events,
                    shutdown.clone(),
                ));
            }
            (Role::Ingest, Some(bus), SourceConfig::Node(url)) => {
                let (status, watcher) = watch::channel(UpstreamStatus::Connecting);
                upstream = Some(watcher);
                let holder = format!(
                    "ingest pid {} #{:08x}",
                    std::process::id(),
                    rand::random::<u32>()
                );
                leader = Some(Leader {
                    spec: spec.clone(),
                    pipeline: pipeline.clone(),
                    on_bus: bus.log(&spec.name).await?,
                    leases: bus.leases(&holder).await?,
                    blocks: config.log.blocks,
                    settings: node_settings(spec, url, Vec::new()),
                    status,
                    price: price.clone(),
                    prices: bus.prices(&spec.name).await?,
                });
            }
            (Role::All, _, SourceConfig::Devnet) => {
                let devnet = Devnet::new(spec.chain_id, &config.devnet);
                let kept = devnet.ledger();
                kept.keep(spec.window);
                ledger = Some(kept);
                let (submit, submitted) = mpsc::channel(SUBMISSION_QUEUE);
                submissions = Some(submit);
                tasks.spawn(devnet::run(devnet, events, submitted, shutdown.clone()));
            }
            (Role::All, _, SourceConfig::Node(url)) => {
                let settings = node_settings(spec, url, resume_from(&state, &price)?);
                let (status, watcher) = watch::channel(UpstreamStatus::Connecting);
                upstream = Some(watcher);
                tasks.spawn(upstream::run(settings, events, status, shutdown.clone()));
            }
            (role, _, source) => {
                anyhow::bail!(
                    "role {} cannot serve chain {} from {source:?}",
                    role.name(),
                    spec.name
                )
            }
        }
        match leader {
            // A leader runs a pipeline of its own per term.
            Some(leader) => tasks.spawn(leader.run(shutdown.clone())),
            None => tasks.spawn(pipeline.run(source, shutdown.clone())),
        };
        let node = match &spec.source {
            SourceConfig::Node(url) => Some(NodeConnection::new(url.clone())),
            SourceConfig::Devnet => None,
        };
        Ok(Arc::new(Chain {
            name: spec.name.clone(),
            chain_id: spec.chain_id,
            state,
            upstream,
            submissions,
            ledger,
            price,
            node,
            rpc: config.rpc.clone(),
            metrics: metrics.clone(),
        }))
    }

    /// The state of the chain's source: the devnet is always live.
    pub fn source_status(&self) -> UpstreamStatus {
        self.upstream
            .as_ref()
            .map_or(UpstreamStatus::Live, |status| status.borrow().clone())
    }

    /// Whether the source's past (the devnet's history) is in place.
    pub fn is_synced(&self) -> bool {
        self.state.is_synced()
    }

    /// Watches [`Chain::is_synced`].
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.state.synced()
    }

    /// The actors serving this chain's topics now.
    pub fn filters(&self) -> Arc<BTreeMap<String, FilterHandle>> {
        self.state.topics()
    }

    /// The actor serving `topic`.
    pub fn filter(&self, topic: &str) -> Option<FilterHandle> {
        self.filters().get(topic).cloned()
    }

    /// Read access to the recent canonical blocks.
    pub fn canonical(&self) -> RwLockReadGuard<'_, CanonicalChain> {
        self.state.window()
    }

    /// The chain's event log.
    pub fn log(&self) -> &Arc<EventLog> {
        self.state.log()
    }
}

/// The chain's event log: for a node chain with `[log] data_dir`, restored
/// from its file, with a task (on `tasks`) persisting the steps the
/// pipeline sends; otherwise in memory only.
fn event_log(
    spec: &ChainSpec,
    config: &LogConfig,
    tasks: &TaskTracker,
) -> anyhow::Result<(Arc<EventLog>, Option<mpsc::UnboundedSender<Persist>>)> {
    let dir = match (&spec.source, &config.data_dir) {
        (SourceConfig::Node(_), Some(dir)) => dir,
        _ => return Ok((Arc::new(EventLog::new(&spec.name, config)), None)),
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the log data directory {}", dir.display()))?;
    let path = dir.join(format!("{}.log.redb", spec.name));
    let store = LogStore::open(&path).with_context(|| {
        format!(
            "opening the log database {} (a file admits one server at a time)",
            path.display()
        )
    })?;
    let stored = store
        .load()
        .with_context(|| format!("reading the log database {}", path.display()))?;
    let log = Arc::new(EventLog::restored(&spec.name, config, stored));
    tracing::info!(chain = %spec.name, oldest = log.oldest(), head = log.head(), "event log restored");
    let (persist, steps) = mpsc::unbounded_channel();
    tasks.spawn(store::write(store, log.chain().clone(), steps));
    Ok((log, Some(persist)))
}

/// An edge's chain from the bus: its price journal applied to `store`,
/// then (ready once `token_price` answers what the journal held at the
/// start) its log followed into the pipeline behind `events` while the
/// journal is followed on, until `shutdown`. A store that cannot take the
/// journal keeps the chain from ever reporting ready.
async fn follow_bus(
    on_bus: ChainLog,
    prices: PriceJournal,
    store: Arc<PriceStore>,
    blocks: usize,
    events: mpsc::Sender<SourceEvent>,
    shutdown: CancellationToken,
) {
    let refused = |error: anyhow::Error| {
        tracing::error!(chain = %on_bus.chain(), error = format!("{error:#}"), "the price database cannot take the bus's price journal");
    };
    match prices.catch_up(&store, &shutdown).await {
        Ok(Some(())) => {}
        Ok(None) => return,
        Err(error) => return refused(error),
    }
    let (followed, ()) = tokio::join!(
        prices.follow(store, shutdown.clone()),
        bus::follow::follow(on_bus.clone(), blocks, events, shutdown.clone()),
    );
    if let Err(error) = followed {
        refused(error);
    }
}

/// What a node source of `spec` at `url` follows, resuming from
/// `resume_from`.
fn node_settings(spec: &ChainSpec, url: &str, resume_from: Vec<(u64, B256)>) -> UpstreamSettings {
    UpstreamSettings {
        chain: spec.name.clone(),
        url: url.to_string(),
        chain_id: spec.chain_id,
        backfill_limit: spec.window as u64,
        resume_from,
    }
}

/// Where a node source picks up after a restart: the canonical blocks a
/// restored log holds (so a reorg that happened meanwhile connects to
/// them and is undone), else the price index's last block.
fn resume_from(state: &PipelineState, price: &PriceIndex) -> anyhow::Result<Vec<(u64, B256)>> {
    let window: Vec<_> = state
        .window()
        .blocks()
        .map(|block| (block.number(), block.hash))
        .collect();
    if !window.is_empty() {
        return Ok(window);
    }
    Ok(price.resume_from()?.into_iter().collect())
}
