//! On-chain token prices from DEX pools (`token_price`).
//!
//! - [`backfill`]: history from a configured block, by `eth_getLogs`.
//! - [`calls`]: contract calls against the chain's source (node or devnet).
//! - [`dex`]: pool events decoded; the catalog's factories and base tokens as defaults.
//! - [`indexer`]: pool events of canonical blocks into the store; rollbacks.
//! - [`math`]: exact pool prices, liquidity weighting, decimal output.
//! - [`query`]: the `token_price` answer: pools at a time, routes.
//! - [`record`]: where the index's writes go (the store, or the bus first).
//! - [`store`]: the price history in an embedded database.
pub mod backfill;
pub mod dex;
pub mod indexer;
pub mod math;
pub mod query;
pub mod record;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::Address;
use anyhow::Context;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{ChainSpec, PriceConfig, Source};
use crate::node::{ChainCalls, NodePool};
pub use indexer::Feed;
use query::{PriceAnswer, PriceError};
use record::Recorder;
use store::PriceStore;

/// One chain's price index: its store, kept current by an indexer fed the
/// chain's canonical events (or, on a server that does not index the
/// chain itself, by the bus's price journal), and the tokens routes may
/// use.
#[derive(Debug)]
pub struct PriceIndex {
    store: Arc<PriceStore>,
    base_tokens: &'static [Address],
}

/// Who answers the index's contract calls.
pub enum Calls {
    /// The chain's node: over `eth_call`, and the backfill's `eth_getLogs`.
    Node(Arc<NodePool>),
    /// A chain that answers for its own contracts (the devnet); there is
    /// nothing to backfill from.
    Own(Arc<dyn ChainCalls>),
}

impl PriceIndex {
    /// Opens the chain's store: a file in `config.data_dir` for a node
    /// chain, if set; in memory otherwise (the devnet regenerates its
    /// history at every start).
    pub fn open(spec: &ChainSpec, config: &PriceConfig) -> anyhow::Result<Arc<Self>> {
        let store = match (&spec.source, &config.data_dir) {
            (Source::Nodes(_), Some(dir)) => {
                std::fs::create_dir_all(dir).with_context(|| {
                    format!("creating the price data directory {}", dir.display())
                })?;
                let path = dir.join(format!("{}.redb", spec.name));
                PriceStore::open(&path).with_context(|| {
                    format!(
                        "opening the price database {} (a file admits one server at a time)",
                        path.display()
                    )
                })?
            }
            (Source::Nodes(_), None) => {
                tracing::warn!(
                    chain = %spec.name,
                    "price history is kept in memory; set [price] data_dir to keep it across restarts"
                );
                PriceStore::in_memory()?
            }
            (Source::Devnet, _) => PriceStore::in_memory()?,
        };
        Ok(Arc::new(Self {
            store: Arc::new(store),
            base_tokens: dex::default_base_tokens(spec.chain_id),
        }))
    }

    /// The store, for what keeps it current.
    pub fn store(&self) -> &Arc<PriceStore> {
        &self.store
    }

    /// The chain's indexer, its contract calls answered by `calls`, and
    /// from `price_from_block` on a node chain its backfill, writing
    /// through `recorder`: the future that runs them
    /// until `shutdown` (and then for `drain`), and the sender that takes
    /// the chain's changes in canonical order. Unbounded so the pipeline
    /// never waits on the contract calls the indexer makes: the backlog is
    /// the blocks of a burst of new pools.
    pub fn indexing(
        &self,
        spec: &ChainSpec,
        calls: Calls,
        recorder: Arc<dyn Recorder>,
        shutdown: CancellationToken,
        drain: Duration,
    ) -> (
        impl Future<Output = ()> + Send + 'static,
        mpsc::UnboundedSender<Feed>,
    ) {
        let indexer = |calls: Arc<dyn ChainCalls>| {
            indexer::Indexer::new(
                spec.name.clone(),
                self.store.clone(),
                recorder.clone(),
                calls,
                dex::default_factories(spec.chain_id).to_vec(),
            )
        };
        let (calls, backfill): (Arc<dyn ChainCalls>, _) = match calls {
            Calls::Own(calls) => (calls, None),
            Calls::Node(node) => {
                let backfill = spec.price_from_block.map(|from| {
                    backfill::run(
                        spec.name.clone(),
                        node.clone(),
                        self.store.clone(),
                        indexer(node.clone()),
                        from,
                        shutdown.clone(),
                    )
                });
                (node, backfill)
            }
        };
        let (feed, fed) = mpsc::unbounded_channel();
        let live = indexer::run(indexer(calls), fed, shutdown, drain);
        let both = async move {
            tokio::join!(live, async move {
                if let Some(backfill) = backfill {
                    backfill.await;
                }
            });
        };
        (both, feed)
    }

    /// The newest indexed block, where a node source resumes so that
    /// blocks made while the server was down are indexed too.
    pub fn resume_from(&self) -> anyhow::Result<Option<(u64, alloy_primitives::B256)>> {
        self.store.tip_block()
    }

    /// `token_price`: `timestamp` in seconds or milliseconds.
    pub fn token_price(
        &self,
        timestamp: Option<u64>,
        token0: Address,
        token1: Address,
    ) -> Result<PriceAnswer, PriceError> {
        query::token_price(
            &self.store,
            self.base_tokens,
            timestamp.map(query::seconds),
            token0,
            token1,
        )
    }
}
