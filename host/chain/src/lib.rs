//! One served chain: its source, its [`pipeline`] (the canonical window,
//! the price index feed, and one filter actor per topic), and the doors the
//! RPC side uses. How the parts are wired depends on the process's role,
//! one file each: [`all`] (a devnet or a node, one process), [`ingest`]
//! (a node to the bus, term by term under a lease), [`edge`] (the bus to
//! clients). The set of actors changes at run time when the filters
//! directory does ([`reload`]).
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_bus`],
//! [`chainsieve_config`], [`chainsieve_eventlog`], [`chainsieve_fanout`],
//! [`chainsieve_filter_core`], [`chainsieve_filters`], [`chainsieve_history`],
//! [`chainsieve_ingest`], [`chainsieve_model`], [`chainsieve_node`],
//! [`chainsieve_price`], [`chainsieve_runtime`], [`chainsieve_uploads`],
//! [`chainsieve_watchlists`].

pub mod all;
mod continued;
pub mod edge;
pub mod ingest;
pub mod lifecycle;
mod parts;
pub mod pipeline;
pub mod reload;
pub mod uploads;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLockReadGuard};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use chainsieve_bus::{Bus, ChainLog};
use chainsieve_config::{ChainSpec, Config, HistoryConfig, Role, RpcConfig};
use chainsieve_eventlog::EventLog;
use chainsieve_filters::{FilterEngine, FilterHandle, FilterRegistry};
use chainsieve_history::Blocks;
use chainsieve_history::limits::Budget;
use chainsieve_ingest::canonical::CanonicalChain;
use chainsieve_ingest::devnet::{Accounts, DevnetRequest, Submission};
use chainsieve_model::SourceState;
use chainsieve_node::NodePool;
use chainsieve_price::PriceIndex;
use chainsieve_runtime::metrics::Metrics;
use chainsieve_runtime::tasks::Tasks;
use chainsieve_watchlists::Watchlists;
use lifecycle::TrackerSettings;
use parts::Parts;
use pipeline::PipelineState;
pub use pipeline::WatchPoint;

pub use parts::Origin;

#[derive(Debug)]
pub struct Chain {
    /// The URL prefix (`eth`, `bsc`, `polygon`, …).
    pub name: String,
    pub chain_id: u64,
    /// The window, the actors and readiness, shared with the pipeline that
    /// writes them.
    state: Arc<PipelineState>,
    /// What the chain's source gives the RPC side.
    origin: Origin,
    /// An edge's chain on the bus: its log's steps, read for history older
    /// than the edge's own log.
    stream: Option<ChainLog>,
    /// `token_price`'s index of this chain's pools.
    pub price: Arc<PriceIndex>,
    /// Which methods are forwarded, and how long they may take.
    pub rpc: RpcConfig,
    /// How far back `fromBlock` reads from the nodes.
    pub history: HistoryConfig,
    /// The calls a second this chain's history streams may make of its
    /// nodes together (`[history] calls_per_second_per_node`: each batch
    /// goes to one node).
    history_budget: Arc<Budget>,
    /// For the actors of topics added at run time.
    pub metrics: Arc<Metrics>,
}

impl Chain {
    /// Starts the chain's filter actors, its source and its pipeline (on
    /// `tasks`), as `config.role` says (one file per role: [`all`],
    /// [`ingest`], [`edge`]). They stop when `shutdown` is cancelled.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        spec: &ChainSpec,
        registry: &FilterRegistry,
        engine: &Arc<FilterEngine>,
        metrics: &Arc<Metrics>,
        config: &Config,
        bus: Option<&Bus>,
        shutdown: &CancellationToken,
        tasks: &Tasks,
        watchlists: Option<&Arc<Watchlists>>,
    ) -> anyhow::Result<Arc<Chain>> {
        let role = config.role;
        let (log, persist) = match role {
            Role::All => {
                all::event_log(spec, &config.log, config.data_dir(), tasks, &metrics.queues)?
            }
            // The bus keeps the log between processes.
            Role::Ingest | Role::Edge => (
                Arc::new(EventLog::new(
                    &spec.name,
                    spec.log_blocks,
                    config.log.memory_mib,
                )),
                None,
            ),
        };
        let topics = match role {
            // An ingest runs no filters.
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
        let price = PriceIndex::open(spec, &config.price, config.price_dir())?;
        let tracking = TrackerSettings::of(&config.lifecycle, spec.log_blocks as u64);
        let state = Arc::new(PipelineState::new(spec.window, topics, log, tracking));
        let parts = Parts {
            spec,
            config,
            state: &state,
            price: &price,
            metrics,
            shutdown,
            tasks,
            watchlists,
        };
        let (origin, stream) = match (role, bus) {
            (Role::All, _) => (all::start(&parts, persist)?, None),
            (Role::Ingest, Some(bus)) => (ingest::start(&parts, bus).await?, None),
            (Role::Edge, Some(bus)) => {
                let (origin, stream) = edge::start(&parts, bus).await?;
                (origin, Some(stream))
            }
            (role, None) => anyhow::bail!("role {} needs the bus", role.name()),
        };
        // Every batch goes to one node: a node's share is the whole budget.
        let history_budget = Arc::new(Budget::new(
            NonZeroU32::new(config.history.calls_per_second_per_node).unwrap_or(NonZeroU32::MIN),
        ));
        Ok(Arc::new(Chain {
            name: spec.name.clone(),
            chain_id: spec.chain_id,
            state,
            origin,
            stream,
            price,
            rpc: config.rpc.clone(),
            history: config.history.clone(),
            history_budget,
            metrics: metrics.clone(),
        }))
    }

    /// A devnet chain's door for `eth_sendRawTransaction` (`None` on a
    /// node chain, whose transactions go to the node).
    pub fn submissions(&self) -> Option<&mpsc::Sender<Submission>> {
        match &self.origin {
            Origin::Devnet { submissions, .. } => Some(submissions),
            Origin::Node { .. } | Origin::Bus => None,
        }
    }

    /// A devnet chain's nonces and balances, for the methods wallets call
    /// (its receipts are its blocks').
    pub fn ledger(&self) -> Option<&Arc<Accounts>> {
        match &self.origin {
            Origin::Devnet { ledger, .. } => Some(ledger),
            Origin::Node { .. } | Origin::Bus => None,
        }
    }

    /// A devnet chain's door for `evm_mine` and `anvil_dropTransaction`.
    pub fn requests(&self) -> Option<&mpsc::Sender<DevnetRequest>> {
        match &self.origin {
            Origin::Devnet { requests, .. } => Some(requests),
            Origin::Node { .. } | Origin::Bus => None,
        }
    }

    /// What holds the chain's canonical blocks beyond its log window, for
    /// history streams: its nodes, or the devnet's archive; `None` on an
    /// edge's chain of no node.
    pub fn history_blocks(&self) -> Option<Blocks> {
        match &self.origin {
            Origin::Node { pool, .. } => Some(Blocks::Nodes {
                pool: pool.clone(),
                budget: self.history_budget.clone(),
            }),
            Origin::Devnet { archive, .. } => Some(Blocks::Archive(archive.clone())),
            Origin::Bus => None,
        }
    }

    /// An edge's chain on the bus, for history older than its log.
    pub fn stream(&self) -> Option<&ChainLog> {
        self.stream.as_ref()
    }

    /// A node chain's nodes, for the methods forwarded to them.
    pub fn node(&self) -> Option<&Arc<NodePool>> {
        match &self.origin {
            Origin::Node { pool, .. } => Some(pool),
            Origin::Devnet { .. } | Origin::Bus => None,
        }
    }

    /// The state of the node source this process runs for the chain, if
    /// it runs one.
    pub fn node_status(&self) -> Option<watch::Receiver<SourceState>> {
        match &self.origin {
            Origin::Node { status, .. } => status.clone(),
            Origin::Devnet { .. } | Origin::Bus => None,
        }
    }

    /// The state of the chain's source: the devnet (and an edge's bus) is
    /// always live.
    pub fn source_status(&self) -> SourceState {
        self.node_status()
            .map_or(SourceState::Live, |status| status.borrow().clone())
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

    /// Where the chain placed the watchlist edits, as it places them.
    pub fn watch_points(&self) -> watch::Receiver<WatchPoint> {
        self.state.watch_points()
    }

    /// How many pending transactions the lifecycle tracker follows (at
    /// most `[lifecycle] max_pending`).
    pub fn lifecycle_pending(&self) -> usize {
        self.state.lifecycle().pending_count()
    }
}
