//! One served chain: its source, its [`pipeline`] (the canonical window,
//! the price index feed, and one filter actor per topic), and the doors the
//! RPC side uses. How the parts are wired depends on the process's role,
//! one file each: [`all`] (a devnet or a node, one process), [`ingest`]
//! (a node to the bus, term by term under a lease), [`edge`] (the bus to
//! clients). The set of actors changes at run time when the filters
//! directory does ([`reload`]).

pub mod all;
mod continued;
pub mod edge;
pub mod ingest;
pub mod pipeline;
pub mod reload;
pub mod uploads;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLockReadGuard};

use alloy_primitives::B256;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::filters::{FilterEngine, FilterHandle, FilterRegistry};
use crate::history::Blocks;
use crate::history::archive::Archive;
use crate::history::limits::Budget;
use chainsieve_bus::{Bus, ChainLog};
use chainsieve_config::{ChainSpec, Config, HistoryConfig, NodesSpec, Role, RpcConfig};
use chainsieve_eventlog::EventLog;
use chainsieve_eventlog::store::Persist;
use chainsieve_ingest::canonical::CanonicalChain;
use chainsieve_ingest::devnet::{Ledger, MineRequest, Submission};
use chainsieve_ingest::upstream::{UpstreamSettings, UpstreamStatus};
use chainsieve_node::{NodePool, Rules};
use chainsieve_price::PriceIndex;
use chainsieve_runtime::metrics::Metrics;
use chainsieve_runtime::tasks::{Part, Tasks};
use pipeline::{Pipeline, PipelineState};

/// Source events that may wait for the pipeline; past that the source
/// waits.
const SOURCE_QUEUE: usize = 1_024;

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

/// Where a chain's data comes from, and what that source gives the RPC
/// side.
#[derive(Debug)]
pub enum Origin {
    /// The embedded devnet (role `all`).
    Devnet {
        /// The door for `eth_sendRawTransaction`.
        submissions: mpsc::Sender<Submission>,
        /// Nonces and balances, for the methods wallets call.
        ledger: Arc<Ledger>,
        /// The door for `evm_mine`: the next block, now.
        miner: mpsc::Sender<MineRequest>,
        /// Every canonical block generated, for history streams.
        archive: Arc<Archive>,
    },
    /// Nodes.
    Node {
        /// The state of this process's source reading them, published by
        /// the source (role `all`, or an ingest's terms); `None` on an
        /// edge, which reads the bus.
        status: Option<watch::Receiver<UpstreamStatus>>,
        /// The nodes forwarded methods go to, each over one multiplexed
        /// socket for every client, with their health.
        pool: Arc<NodePool>,
    },
    /// An edge's chain of no node: what the bus carries, nothing more.
    Bus,
}

/// What every role's wiring of one chain starts from.
struct Parts<'a> {
    spec: &'a ChainSpec,
    config: &'a Config,
    state: &'a Arc<PipelineState>,
    price: &'a Arc<PriceIndex>,
    metrics: &'a Arc<Metrics>,
    shutdown: &'a CancellationToken,
    tasks: &'a Tasks,
}

impl Parts<'_> {
    /// The chain's pipeline, indexing prices into `price_feed` and
    /// handing its steps to `persist` where the role does.
    fn pipeline(
        &self,
        price_feed: Option<mpsc::Sender<chainsieve_price::Feed>>,
        persist: Option<mpsc::Sender<Persist>>,
    ) -> Pipeline {
        Pipeline::new(
            &self.spec.name,
            self.state.clone(),
            price_feed,
            persist,
            self.metrics,
        )
    }

    /// What the node source of this chain (reading `nodes`) follows,
    /// resuming from `resume_from`.
    fn node_settings(&self, nodes: &NodesSpec, resume_from: Vec<(u64, B256)>) -> UpstreamSettings {
        UpstreamSettings {
            chain: self.spec.name.clone(),
            chain_id: self.spec.chain_id,
            backfill_limit: self.spec.window as u64,
            resume_from,
            quorum: nodes.quorum,
            rules: Rules::from(nodes),
        }
    }

    /// The part of the server this chain is, for its supervised tasks.
    fn part(&self) -> Part {
        Part::Chain(self.spec.name.clone())
    }

    /// The name of this chain's task `what` (`eth pipeline`), as logs,
    /// `/readyz` and the fault hooks name it.
    fn task(&self, what: &str) -> String {
        format!("{} {what}", self.spec.name)
    }

    /// The chain's nodes, if it reads any.
    fn pool(&self) -> Option<Arc<NodePool>> {
        let nodes = self.spec.source.nodes();
        (!nodes.is_empty()).then(|| Arc::new(NodePool::new(&self.spec.name, nodes, self.metrics)))
    }
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
        let state = Arc::new(PipelineState::new(spec.window, topics, log));
        let parts = Parts {
            spec,
            config,
            state: &state,
            price: &price,
            metrics,
            shutdown,
            tasks,
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
    pub fn ledger(&self) -> Option<&Arc<Ledger>> {
        match &self.origin {
            Origin::Devnet { ledger, .. } => Some(ledger),
            Origin::Node { .. } | Origin::Bus => None,
        }
    }

    /// A devnet chain's door for `evm_mine`.
    pub fn miner(&self) -> Option<&mpsc::Sender<MineRequest>> {
        match &self.origin {
            Origin::Devnet { miner, .. } => Some(miner),
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
    pub fn node_status(&self) -> Option<watch::Receiver<UpstreamStatus>> {
        match &self.origin {
            Origin::Node { status, .. } => status.clone(),
            Origin::Devnet { .. } | Origin::Bus => None,
        }
    }

    /// The state of the chain's source: the devnet (and an edge's bus) is
    /// always live.
    pub fn source_status(&self) -> UpstreamStatus {
        self.node_status()
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
