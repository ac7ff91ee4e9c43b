//! On-chain token prices from DEX pools (`token_price`).
//!
//! - [`backfill`]: history from a configured block, by `eth_getLogs`.
//! - [`calls`]: contract calls against the chain's source (node or devnet).
//! - [`dex`]: pool events decoded; the catalog's factories and base tokens as defaults.
//! - [`indexer`]: pool events of canonical blocks into the store; rollbacks.
//! - [`math`]: exact pool prices, liquidity weighting, decimal output.
//! - [`query`]: the `token_price` answer: pools at a time, routes.
//! - [`store`]: the price history in an embedded database.
pub mod backfill;
pub mod calls;
pub mod dex;
pub mod indexer;
pub mod math;
pub mod query;
pub mod store;

use std::sync::Arc;

use alloy_primitives::Address;
use anyhow::Context;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{ChainSpec, PriceConfig, SourceConfig};
use calls::{ChainCalls, DevnetCalls, NodeConnection};
pub use indexer::Feed;
use query::{PriceAnswer, PriceError};
use store::PriceStore;

/// One chain's price index: its store, kept current by an indexer task
/// fed the chain's canonical events, and the tokens routes may use.
#[derive(Debug)]
pub struct PriceIndex {
    store: Arc<PriceStore>,
    base_tokens: &'static [Address],
}

impl PriceIndex {
    /// Opens the chain's store and starts its indexer; the returned sender
    /// takes the chain's events in canonical order. Unbounded so the hub
    /// never waits on contract calls the indexer makes: the backlog is the
    /// blocks of a burst of new pools.
    pub fn start(
        spec: &ChainSpec,
        config: &PriceConfig,
        shutdown: &CancellationToken,
        tasks: &TaskTracker,
    ) -> anyhow::Result<(Arc<Self>, mpsc::UnboundedSender<Feed>)> {
        let (store, calls): (Arc<PriceStore>, Arc<dyn ChainCalls>) = match &spec.source {
            SourceConfig::Devnet => (
                Arc::new(PriceStore::in_memory()?),
                Arc::new(DevnetCalls::new(spec.chain_id)),
            ),
            SourceConfig::Node(url) => {
                let store = match &config.data_dir {
                    Some(dir) => {
                        std::fs::create_dir_all(dir).with_context(|| {
                            format!("creating the price data directory {}", dir.display())
                        })?;
                        let path = dir.join(format!("{}.redb", spec.name));
                        Arc::new(PriceStore::open(&path).with_context(|| {
                            format!(
                                "opening the price database {} (a file admits one server at a time)",
                                path.display()
                            )
                        })?)
                    }
                    None => {
                        tracing::warn!(
                            chain = %spec.name,
                            "price history is kept in memory; set [price] data_dir to keep it across restarts"
                        );
                        Arc::new(PriceStore::in_memory()?)
                    }
                };
                let node = Arc::new(NodeConnection::new(url.clone()));
                if let Some(from) = spec.price_from_block {
                    let indexer = indexer::Indexer::new(
                        spec.name.clone(),
                        store.clone(),
                        node.clone(),
                        dex::default_factories(spec.chain_id).to_vec(),
                    );
                    tasks.spawn(backfill::run(
                        spec.name.clone(),
                        node.clone(),
                        store.clone(),
                        indexer,
                        from,
                        shutdown.clone(),
                    ));
                }
                (store, node)
            }
        };
        let indexer = indexer::Indexer::new(
            spec.name.clone(),
            store.clone(),
            calls,
            dex::default_factories(spec.chain_id).to_vec(),
        );
        let (events, rx) = mpsc::unbounded_channel();
        tasks.spawn(indexer::run(indexer, rx, shutdown.clone()));
        Ok((
            Arc::new(Self {
                store,
                base_tokens: dex::default_base_tokens(spec.chain_id),
            }),
            events,
        ))
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
