//! On-chain token prices from DEX pools (`token_price`).
//!
//! - [`calls`]: contract calls against the chain's source (node or devnet).
//! - [`dex`]: pool events, identifying calls, default factories and base tokens.
//! - [`indexer`]: pool events of canonical blocks into the store; rollbacks.
//! - [`math`]: exact pool prices, liquidity weighting, decimal output.
//! - [`query`]: the `token_price` answer: pools at a time, routes.
//! - [`store`]: the price history in an embedded database.
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

use crate::config::{ChainSpec, PriceConfig, SourceConfig};
use crate::ingest::ChainEvent;
use calls::{ChainCalls, DevnetCalls, NodeCalls};
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
    ) -> anyhow::Result<(Arc<Self>, mpsc::UnboundedSender<ChainEvent>)> {
        let (store, calls): (PriceStore, Arc<dyn ChainCalls>) = match &spec.source {
            SourceConfig::Devnet => (
                PriceStore::in_memory()?,
                Arc::new(DevnetCalls::new(spec.chain_id)),
            ),
            SourceConfig::Node(url) => {
                let store = match &config.data_dir {
                    Some(dir) => {
                        std::fs::create_dir_all(dir).with_context(|| {
                            format!("creating the price data directory {}", dir.display())
                        })?;
                        PriceStore::open(&dir.join(format!("{}.redb", spec.name)))?
                    }
                    None => {
                        tracing::warn!(
                            chain = %spec.name,
                            "price history is kept in memory; set [price] data_dir to keep it across restarts"
                        );
                        PriceStore::in_memory()?
                    }
                };
                (store, Arc::new(NodeCalls::new(url.clone())))
            }
        };
        let store = Arc::new(store);
        let indexer = indexer::Indexer::new(
            spec.name.clone(),
            store.clone(),
            calls,
            dex::default_factories(spec.chain_id).to_vec(),
        );
        let (events, rx) = mpsc::unbounded_channel();
        tokio::spawn(indexer::run(indexer, rx, shutdown.clone()));
        Ok((
            Arc::new(Self {
                store,
                base_tokens: dex::default_base_tokens(spec.chain_id),
            }),
            events,
        ))
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
