//! What every role's wiring of a chain starts from ([`Parts`]), and what
//! the chain's source gives the RPC side ([`Origin`]).

use std::sync::Arc;

use alloy_primitives::B256;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use chainsieve_config::{ChainSpec, Config, NodesSpec};
use chainsieve_eventlog::store::Persist;
use chainsieve_history::archive::Archive;
use chainsieve_ingest::devnet::{Accounts, DevnetRequest, Submission};
use chainsieve_ingest::upstream::{self, UpstreamSettings};
use chainsieve_model::{SourceEvent, SourceState};
use chainsieve_node::{NodePool, Rules};
use chainsieve_price::PriceIndex;
use chainsieve_runtime::metrics::Metrics;
use chainsieve_runtime::tasks::{Part, Tasks};
use chainsieve_watchlists::Watchlists;

use crate::pipeline::{DROP_CHECK_QUEUE, DropChecks, Pipeline, PipelineState};

/// Source events that may wait for the pipeline; past that the source
/// waits.
pub(crate) const SOURCE_QUEUE: usize = 1_024;

/// Where a chain's data comes from, and what that source gives the RPC
/// side.
#[derive(Debug)]
pub enum Origin {
    /// The embedded devnet (role `all`).
    Devnet {
        /// The door for `eth_sendRawTransaction`.
        submissions: mpsc::Sender<Submission>,
        /// Nonces and balances, for the methods wallets call.
        ledger: Arc<Accounts>,
        /// The door for `evm_mine` (the next block, now) and
        /// `anvil_dropTransaction`.
        requests: mpsc::Sender<DevnetRequest>,
        /// Every canonical block generated, for history streams.
        archive: Arc<Archive>,
    },
    /// Nodes.
    Node {
        /// The state of this process's source reading them, published by
        /// the source (role `all`, or an ingest's terms); `None` on an
        /// edge, which reads the bus.
        status: Option<watch::Receiver<SourceState>>,
        /// The nodes forwarded methods go to, each over one multiplexed
        /// socket for every client, with their health.
        pool: Arc<NodePool>,
    },
    /// An edge's chain of no node: what the bus carries, nothing more.
    Bus,
}

/// What every role's wiring of one chain starts from.
pub(crate) struct Parts<'a> {
    pub(crate) spec: &'a ChainSpec,
    pub(crate) config: &'a Config,
    pub(crate) state: &'a Arc<PipelineState>,
    pub(crate) price: &'a Arc<PriceIndex>,
    pub(crate) metrics: &'a Arc<Metrics>,
    pub(crate) shutdown: &'a CancellationToken,
    pub(crate) tasks: &'a Tasks,
    /// Where the role keeps watchlists (role `all`): their edits are placed
    /// in the chain's log.
    pub(crate) watchlists: Option<&'a Arc<Watchlists>>,
}

impl Parts<'_> {
    /// The chain's pipeline, indexing prices into `price_feed` and
    /// handing its steps to `persist` where the role does.
    pub(crate) fn pipeline(
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
    pub(crate) fn node_settings(
        &self,
        nodes: &NodesSpec,
        resume_from: Vec<(u64, B256)>,
    ) -> UpstreamSettings {
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
    pub(crate) fn part(&self) -> Part {
        Part::Chain(self.spec.name.clone())
    }

    /// The name of this chain's task `what` (`eth pipeline`), as logs,
    /// `/readyz` and the fault hooks name it.
    pub(crate) fn task(&self, what: &str) -> String {
        format!("{} {what}", self.spec.name)
    }

    /// The chain's drop checker over `pool`, answering on `events` (the
    /// source's queue) until `until`; what the pipeline hands it work.
    pub(crate) fn drop_checks(
        &self,
        pool: &Arc<NodePool>,
        events: mpsc::Sender<SourceEvent>,
        until: CancellationToken,
    ) -> DropChecks {
        let (asks, asked) =
            self.metrics
                .queues
                .channel(&self.spec.name, "drop checks", DROP_CHECK_QUEUE);
        self.tasks.critical(
            self.task("drop checker"),
            self.part(),
            upstream::drops::check(pool.clone(), asked, events, until),
        );
        DropChecks {
            asks,
            every: DropChecks::round(self.config.lifecycle.drop_after()),
        }
    }

    /// The chain's nodes, if it reads any.
    pub(crate) fn pool(&self) -> Option<Arc<NodePool>> {
        let nodes = self.spec.source.nodes();
        (!nodes.is_empty()).then(|| Arc::new(NodePool::new(&self.spec.name, nodes, self.metrics)))
    }
}
