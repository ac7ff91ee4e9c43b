//! On-chain token prices from DEX pools (`token_price`).
//!
//! - [`backfill`]: history from a configured block, by `eth_getLogs`.
//! - [`cold`]: what the index does not hold, read from the nodes: the
//!   block of an old time, a pair's pools and their state at a block.
//! - [`dex`]: pool events decoded; the catalog's factories and base tokens as defaults.
//! - [`indexer`]: pool events of canonical blocks into the store; rollbacks.
//! - [`math`]: exact pool prices, liquidity weighting, decimal output.
//! - [`query`]: the `token_price` answer: pools at a time, routes.
//! - [`record`]: where the index's writes go (the store, or the bus first).
//! - [`store`]: the price history in an embedded database.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_bus`],
//! [`chainsieve_config`], [`chainsieve_contracts`], [`chainsieve_eventlog`],
//! [`chainsieve_model`], [`chainsieve_node`].
pub mod backfill;
pub mod cold;
pub mod dex;
pub mod from_log;
pub mod indexer;
pub mod journal;
pub mod math;
pub mod query;
pub mod record;
pub mod store;

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::Address;
use anyhow::Context;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use chainsieve_config::{ChainSpec, PriceConfig, SourceSpec};
use chainsieve_contracts::catalog::Factory;
use chainsieve_node::{ChainCalls, NodePool};
use cold::{ColdRead, Header};
/// Canonical changes that may wait for a chain's price indexer; past that
/// the pipeline waits, and the source with it (docs/src/operations.md,
/// Queues).
pub const FEED_QUEUE: usize = 4_096;

pub use indexer::Feed;
use query::{PriceAnswer, PriceError, Reach};
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
    /// The factories whose pools count.
    factories: &'static [Factory],
    /// Where the backfill starts (`price_from_block`), if it runs.
    backfill_from: Option<u64>,
    /// Node calls one `token_price` may make (`[price] max_node_calls`).
    max_node_calls: u32,
    /// Node calls all of them may make a second (`[price]
    /// node_calls_per_second`).
    node_budget: DefaultDirectRateLimiter,
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
    /// Opens the chain's store: a file in `dir` (the data directory, or an
    /// earlier file's `[price] data_dir`) for a node chain, if set; in
    /// memory otherwise (the devnet regenerates its history at every
    /// start).
    pub fn open(
        spec: &ChainSpec,
        config: &PriceConfig,
        dir: Option<&Path>,
    ) -> anyhow::Result<Arc<Self>> {
        let store = match (&spec.source, dir) {
            (SourceSpec::Nodes(_), Some(dir)) => {
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
            (SourceSpec::Nodes(_), None) => {
                tracing::warn!(
                    chain = %spec.name,
                    "price history is kept in memory; set data_dir to keep it across restarts"
                );
                PriceStore::in_memory()?
            }
            (SourceSpec::Devnet, _) => PriceStore::in_memory()?,
        };
        Ok(Arc::new(Self {
            store: Arc::new(store),
            base_tokens: dex::default_base_tokens(spec.chain_id),
            factories: dex::default_factories(spec.chain_id),
            backfill_from: spec.price_from_block,
            max_node_calls: config.max_node_calls,
            node_budget: RateLimiter::direct(Quota::per_second(
                NonZeroU32::new(config.node_calls_per_second).unwrap_or(NonZeroU32::MIN),
            )),
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
        mpsc::Sender<Feed>,
    ) {
        let indexer = |calls: Arc<dyn ChainCalls>| {
            indexer::Indexer::new(
                spec.name.clone(),
                self.store.clone(),
                recorder.clone(),
                calls,
                self.factories.to_vec(),
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
        let (feed, fed) = mpsc::channel(FEED_QUEUE);
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

    /// `token_price`: `timestamp` in seconds or milliseconds. With the
    /// chain's `nodes`, what the index does not hold is read from them
    /// (the block of a time before the index began, the pools of a pair
    /// it has no state of); without, the store's answer stands.
    pub async fn token_price(
        &self,
        timestamp: Option<u64>,
        token0: Address,
        token1: Address,
        nodes: Option<&NodePool>,
    ) -> Result<PriceAnswer, PriceError> {
        let timestamp = timestamp.map(query::seconds);
        let Some(nodes) = nodes else {
            return query::token_price(&self.store, self.base_tokens, timestamp, token0, token1);
        };
        let store = &*self.store;
        let Some((tip, _)) = store.tip()? else {
            return Err(query::nothing_indexed());
        };
        let covered = self.covered()?;
        let mut cold = ColdRead::new(
            nodes,
            store,
            self.factories,
            &self.node_budget,
            self.max_node_calls,
        );
        let latest = self.stored_header(tip)?;
        let at = match timestamp {
            None => latest,
            Some(time) => match store.block_from(covered)? {
                Some((_, from)) if time >= from => {
                    let at = store.block_at(time)?.map_or(tip, |(block, _)| block);
                    self.stored_header(at)?
                }
                // Before the chain's first block: out of range.
                _ => (self.block_before_the_index(&mut cold, time).await?).unwrap_or(latest),
            },
        };
        if let Some(answer) = self.priced(&mut cold, at, covered, token0, token1).await? {
            return Ok(answer);
        }
        // Nothing priced the pair then (its pools did not exist yet, or
        // held nothing): out of range, so its latest price, as the
        // answer's timestamp says (docs/src/api.md, token_price).
        if at.number != latest.number
            && let Some(answer) = self
                .priced(&mut cold, latest, covered, token0, token1)
                .await?
        {
            return Ok(answer);
        }
        Err(PriceError::NotFound(format!(
            "no pool of a trusted factory prices {token0:#x} against {token1:#x}, directly or through a base token (asked at block {} and at the latest, {})",
            at.number, latest.number
        )))
    }

    /// The pair's price at block `at` from the index, what it lacks of the
    /// pools' state then read from the nodes; `None` if nothing prices it
    /// then.
    async fn priced(
        &self,
        cold: &mut ColdRead<'_>,
        at: Header,
        covered: u64,
        token0: Address,
        token1: Address,
    ) -> Result<Option<PriceAnswer>, PriceError> {
        let store = &*self.store;
        let reach = Reach {
            block: at.number,
            covered: Some(covered),
        };
        let ask = || query::at_block(store, self.base_tokens, reach, token0, token1);
        if let Some(answer) = ask()? {
            return Ok(Some(answer));
        }
        let known = |a, b| Ok(query::priced_directly(store, reach, a, b)?);
        cold.learn(at, token1, token0, self.base_tokens, known)
            .await?;
        ask()
    }

    /// The first block from which the index holds every pool event: where
    /// the live index began, or the backfill's start once it is done.
    fn covered(&self) -> anyhow::Result<u64> {
        let live = self.store.live_from()?.unwrap_or(u64::MAX);
        let backfilled = match (self.backfill_from, self.store.backfill()?) {
            (Some(from), Some((next, end))) if next > end => from,
            _ => u64::MAX,
        };
        Ok(live.min(backfilled))
    }

    /// Block `number` as the store records it.
    fn stored_header(&self, number: u64) -> Result<Header, PriceError> {
        let (Some(hash), Some(timestamp)) = (
            self.store.block_hash(number)?,
            self.store.block_time(number)?,
        ) else {
            return Err(PriceError::Unavailable(format!(
                "block {number} left the index meanwhile (a reorg): ask again"
            )));
        };
        Ok(Header {
            number,
            hash,
            timestamp,
        })
    }

    /// The block of `time`, before the index began: between the newest
    /// recorded block at or before it (else the chain's first) and the
    /// next recorded one, searched on the nodes; the two blocks found
    /// around it are recorded, so the same time is not searched again.
    /// `None` for a time before the chain's first block.
    async fn block_before_the_index(
        &self,
        cold: &mut ColdRead<'_>,
        time: u64,
    ) -> Result<Option<Header>, PriceError> {
        let store = &*self.store;
        let below = store.block_at(time)?;
        let above = store.block_from(below.map_or(0, |(number, _)| number + 1))?;
        let below = below
            .map(|(number, _)| self.stored_header(number))
            .transpose()?;
        let above = above
            .map(|(number, _)| self.stored_header(number))
            .transpose()?;
        let low = match below {
            Some(low) => low,
            None => {
                let first = cold.header(0).await?;
                if first.timestamp > time {
                    return Ok(None);
                }
                first
            }
        };
        let Some(high) = above else {
            return Ok(Some(low));
        };
        if high.number == low.number + 1 {
            return Ok(Some(low));
        }
        let found = cold.block_at_time(time, low, high).await?;
        let next = cold.header(found.number + 1).await?;
        for header in [found, next] {
            store.write_unless_replaced(&store::BlockUpdate {
                number: header.number,
                hash: header.hash,
                timestamp: header.timestamp,
                ..store::BlockUpdate::default()
            })?;
        }
        Ok(Some(found))
    }
}
