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

use crate::config::{ChainSpec, PriceConfig, SourceConfig};
use crate::ingest::ChainEvent;
use calls::{ChainCalls, DevnetCalls, NodeConnection};
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
                        open_shared(&dir.join(format!("{}.redb", spec.name)))?
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
                    tokio::spawn(backfill::run(
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
        tokio::spawn(indexer::run(indexer, rx, shutdown.clone()));
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

/// Opens the database at `path`, or shares the one already open in this
/// process (a database file admits one opener; a server restarted in the
/// same process, as tests do, may start before the old one let go).
fn open_shared(path: &std::path::Path) -> anyhow::Result<Arc<PriceStore>> {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::{Mutex, OnceLock, Weak};
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<PriceStore>>>> = OnceLock::new();
    let mut open = OPEN
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| anyhow::anyhow!("price database registry poisoned"))?;
    let key = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(store) = open.get(&key).and_then(Weak::upgrade) {
        return Ok(store);
    }
    let store = Arc::new(PriceStore::open(path)?);
    open.insert(key, Arc::downgrade(&store));
    Ok(store)
}
