//! Keeps a chain's price store in step with its canonical chain: every
//! added block's pool events become pool states (and new pools), every
//! removed block is rolled back.
//!
//! A pool counts only if a trusted factory made it: pools announced by a
//! trusted factory's `PairCreated`/`PoolCreated` are taken as they are; a
//! pool first seen by its `Sync`/`Swap` is asked for its tokens and
//! factory, and the factory is asked whether that pool is its pool for the
//! pair, so a contract that merely claims a trusted factory sets no price.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, Bytes, U256};
use alloy_sol_types::SolCall;
use anyhow::Context;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::dex::{self, PoolEvent};
use super::record::Recorder;
use super::store::{BlockUpdate, Pool, PoolKind, PriceStore, PriceWrite, Token};
use chainsieve_contracts::abi::{
    IERC20, IPool, IUniswapV2Factory, IUniswapV3Factory, IUniswapV3Pool,
};
use chainsieve_contracts::catalog::Factory;
use chainsieve_eventlog::Position;
use chainsieve_model::Block;
use chainsieve_model::ChainEvent;
use chainsieve_node::ChainCalls;

pub struct Indexer {
    chain: String,
    /// Read to know what is indexed already; written through `recorder`.
    store: Arc<PriceStore>,
    recorder: Arc<dyn Recorder>,
    calls: Arc<dyn ChainCalls>,
    factories: Vec<Factory>,
    /// Pools (and tokens) already found wanting, so they are not asked
    /// again on every event.
    rejected: HashSet<Address>,
}

impl Indexer {
    pub fn new(
        chain: String,
        store: Arc<PriceStore>,
        recorder: Arc<dyn Recorder>,
        calls: Arc<dyn ChainCalls>,
        factories: Vec<Factory>,
    ) -> Self {
        Self {
            chain,
            store,
            recorder,
            calls,
            factories,
            rejected: HashSet::new(),
        }
    }

    /// Indexes the canonical change at log `position`.
    pub async fn apply(&mut self, position: Position, event: &ChainEvent) -> anyhow::Result<()> {
        match event {
            ChainEvent::Added(block) => self.add(block, Some(position)).await,
            ChainEvent::Removed(block) => {
                self.record(PriceWrite::RollBack {
                    number: block.number(),
                    position,
                })
                .await
            }
            ChainEvent::Pending(_) | ChainEvent::Watch(_) | ChainEvent::Lifecycle(_) => Ok(()),
        }
    }

    /// Indexes the pool events of a canonical block (a whole block at log
    /// `position`, or a backfilled one carrying only its header fields and
    /// logs).
    pub async fn add(&mut self, block: &Block, position: Option<Position>) -> anyhow::Result<()> {
        let mut learned: HashMap<Address, Pool> = HashMap::new();
        let mut states = HashMap::new();
        let mut order = Vec::new();
        for log in &block.logs {
            match dex::decode(log) {
                Some(PoolEvent::Created {
                    factory,
                    pool,
                    kind,
                    token0,
                    token1,
                }) => {
                    let usable = self.trusted(factory, kind)
                        && self.tokens_readable(&[token0, token1]).await?;
                    if usable {
                        learned.insert(
                            pool,
                            Pool {
                                address: pool,
                                kind,
                                token0,
                                token1,
                                factory,
                            },
                        );
                    }
                }
                Some(PoolEvent::State { pool, state }) => {
                    let kind = match state {
                        super::store::PoolState::V2 { .. } => PoolKind::V2,
                        super::store::PoolState::V3 { .. } => PoolKind::V3,
                    };
                    let known = match learned.get(&pool) {
                        Some(p) => Some(*p),
                        None => self.store.pool(pool)?,
                    };
                    let pool_record = match known {
                        Some(p) => Some(p),
                        None => self.identify(pool, kind).await?,
                    };
                    let Some(record) = pool_record.filter(|p| p.kind == kind) else {
                        continue;
                    };
                    learned.entry(pool).or_insert(record);
                    if states.insert(pool, state).is_none() {
                        order.push(pool);
                    }
                }
                None => {}
            }
        }
        let update = BlockUpdate {
            number: block.number(),
            hash: block.hash,
            timestamp: block.header.timestamp,
            pools: learned.into_values().collect(),
            states: order.into_iter().map(|p| (p, states[&p])).collect(),
        };
        self.record(PriceWrite::Block { update, position }).await
    }

    /// Hands `write` to the recorder.
    pub async fn record(&self, write: PriceWrite) -> anyhow::Result<()> {
        self.recorder.record(write).await
    }

    fn trusted(&self, factory: Address, kind: PoolKind) -> bool {
        self.factories
            .iter()
            .any(|f| f.address == factory && f.kind == kind)
    }

    /// A pool first seen by its state event: its tokens and factory, and
    /// the factory's confirmation; `None` (remembered) when any of it
    /// fails.
    async fn identify(&mut self, pool: Address, kind: PoolKind) -> anyhow::Result<Option<Pool>> {
        if self.rejected.contains(&pool) {
            return Ok(None);
        }
        let found = self.ask_pool(pool, kind).await?;
        if found.is_none() {
            tracing::debug!(chain = %self.chain, %pool, "ignoring a pool no trusted factory made");
            self.rejected.insert(pool);
        }
        Ok(found)
    }

    async fn ask_pool(&mut self, pool: Address, kind: PoolKind) -> anyhow::Result<Option<Pool>> {
        let (Some(token0), Some(token1), Some(factory)) = (
            self.ask::<IPool::token0Call>(pool, IPool::token0Call {})
                .await?,
            self.ask::<IPool::token1Call>(pool, IPool::token1Call {})
                .await?,
            self.ask::<IPool::factoryCall>(pool, IPool::factoryCall {})
                .await?,
        ) else {
            return Ok(None);
        };
        if !self.trusted(factory, kind) {
            return Ok(None);
        }
        let confirmed = match kind {
            PoolKind::V2 => {
                self.ask::<IUniswapV2Factory::getPairCall>(
                    factory,
                    IUniswapV2Factory::getPairCall {
                        tokenA: token0,
                        tokenB: token1,
                    },
                )
                .await?
            }
            PoolKind::V3 => {
                let Some(fee) = self
                    .ask::<IUniswapV3Pool::feeCall>(pool, IUniswapV3Pool::feeCall {})
                    .await?
                else {
                    return Ok(None);
                };
                self.ask::<IUniswapV3Factory::getPoolCall>(
                    factory,
                    IUniswapV3Factory::getPoolCall {
                        tokenA: token0,
                        tokenB: token1,
                        fee,
                    },
                )
                .await?
            }
        };
        if confirmed != Some(pool) || !self.tokens_readable(&[token0, token1]).await? {
            return Ok(None);
        }
        Ok(Some(Pool {
            address: pool,
            kind,
            token0,
            token1,
            factory,
        }))
    }

    /// Makes sure both tokens' metadata is stored; false if a token cannot
    /// be read (no `decimals()`, or one above 255).
    async fn tokens_readable(&mut self, tokens: &[Address]) -> anyhow::Result<bool> {
        for &token in tokens {
            if self.store.token(token)?.is_some() {
                continue;
            }
            if self.rejected.contains(&token) {
                return Ok(false);
            }
            let Some(decimals) = self.decimals(token).await? else {
                tracing::debug!(chain = %self.chain, %token, "ignoring a token without readable decimals");
                self.rejected.insert(token);
                return Ok(false);
            };
            let name = self.name(token).await?;
            self.record(PriceWrite::Token {
                address: token,
                token: Token { name, decimals },
            })
            .await?;
        }
        Ok(true)
    }

    /// `decimals()`, refusing a value above 255 rather than wrapping it.
    async fn decimals(&self, token: Address) -> anyhow::Result<Option<u8>> {
        let Some(raw) = self
            .calls
            .call(token, IERC20::decimalsCall {}.abi_encode().into())
            .await?
        else {
            return Ok(None);
        };
        let word: Option<U256> = (raw.len() >= 32).then(|| U256::from_be_slice(&raw[..32]));
        Ok(word.and_then(|w| u8::try_from(w).ok()))
    }

    /// `name()` as a string, or in the bytes32 form some old tokens use;
    /// empty when neither reads.
    async fn name(&self, token: Address) -> anyhow::Result<String> {
        let Some(raw) = self
            .calls
            .call(token, IERC20::nameCall {}.abi_encode().into())
            .await?
        else {
            return Ok(String::new());
        };
        Ok(name_of(&raw))
    }

    async fn ask<C: SolCall>(&self, to: Address, call: C) -> anyhow::Result<Option<C::Return>> {
        let data: Bytes = call.abi_encode().into();
        let Some(raw) = self.calls.call(to, data).await? else {
            return Ok(None);
        };
        Ok(C::abi_decode_returns(&raw).ok())
    }
}

/// A token's `name()` answer: a string, or in the bytes32 form some old
/// tokens use.
pub(super) fn name_of(raw: &[u8]) -> String {
    IERC20::nameCall::abi_decode_returns(raw).unwrap_or_else(|_| bytes32_text(raw))
}

/// A bytes32 name (MKR, SAI): the text before the first zero byte.
fn bytes32_text(raw: &[u8]) -> String {
    let word = raw.get(..32).unwrap_or(raw);
    let end = word.iter().position(|&b| b == 0).unwrap_or(word.len());
    String::from_utf8_lossy(&word[..end]).into_owned()
}

/// How long a server's only indexer may go on after shutdown with what it
/// was handed (see [`run`]).
pub const DRAIN: Duration = Duration::from_secs(10);

/// What the pipeline sends the indexer, in canonical order.
#[derive(Debug)]
pub enum Feed {
    /// The canonical change at log `position`, to index.
    Change {
        position: Position,
        change: ChainEvent,
    },
    /// Answered once everything sent before it is indexed: the chain is
    /// ready only when its past answers `token_price`.
    Flush(oneshot::Sender<()>),
}

impl Feed {
    /// The change at log `position` for the indexer; `None` for pending
    /// transactions and watchlist edits, which set no price.
    pub fn of(position: Position, change: &ChainEvent) -> Option<Self> {
        change.block().is_some().then(|| Self::Change {
            position,
            change: change.clone(),
        })
    }
}

/// Feeds `feed` (from the chain's pipeline) to `indexer` until `shutdown`,
/// and then for at most `drain`. A failure is logged and the event
/// skipped: prices may then lag, the chain's streams never do.
pub async fn run(
    mut indexer: Indexer,
    mut feed: mpsc::Receiver<Feed>,
    shutdown: CancellationToken,
    drain: Duration,
) {
    // What was handed over before shutdown is still indexed (the pipeline
    // stops at shutdown and closes the channel): a store left half way
    // through a reorg would have the next start resume from an orphaned
    // block. Past `drain` after shutdown the indexer stops wherever it is,
    // in the middle of a call to a node that stopped answering too; the
    // blocks not indexed are fetched again on the next start (it resumes
    // from the newest indexed block). A leading ingest's term drains
    // nothing: the next leader indexes on from the journal's last write.
    let drained = async {
        shutdown.cancelled().await;
        tokio::time::sleep(drain).await;
    };
    tokio::pin!(drained);
    let stopped = |indexer: &Indexer| {
        tracing::warn!(chain = %indexer.chain, "stopped before indexing every block handed over");
    };
    loop {
        let next = tokio::select! {
            biased;
            () = &mut drained => return stopped(&indexer),
            next = feed.recv() => next,
        };
        let event = match next {
            None => return,
            Some(Feed::Flush(done)) => {
                let _ = done.send(());
                continue;
            }
            Some(Feed::Change { position, change }) => (position, change),
        };
        let applied = tokio::select! {
            biased;
            () = &mut drained => return stopped(&indexer),
            applied = indexer.apply(event.0, &event.1) => applied,
        };
        if let Err(error) = applied.context("indexing pool events") {
            tracing::warn!(chain = %indexer.chain, error = format!("{error:#}"), "price index");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dex::default_factories;
    use crate::query::token_price;
    use crate::record::InStore;
    use chainsieve_ingest::devnet::{
        Devnet, DevnetCalls, DevnetSettings, known_pools, known_tokens,
    };

    /// At shutdown the indexer still indexes what it was handed, and stops
    /// once the pipeline (the sender) has.
    #[tokio::test]
    async fn shutdown_indexes_what_was_handed_over() {
        let mut devnet = Devnet::new(1, &DevnetSettings::default());
        let store = Arc::new(PriceStore::in_memory().expect("store"));
        let indexer = Indexer::new(
            "eth".into(),
            store.clone(),
            Arc::new(InStore(store.clone())),
            Arc::new(DevnetCalls::new(1)),
            default_factories(1).to_vec(),
        );
        let (events, handed) = mpsc::channel(1_024);
        let mut last = devnet.genesis();
        let mut position = 0;
        let mut added = |block| {
            position += 1;
            Feed::Change {
                position,
                change: ChainEvent::Added(block),
            }
        };
        events.try_send(added(last.clone())).expect("room");
        for _ in 0..40 {
            for event in devnet.next_step() {
                if let chainsieve_model::SourceEvent::Block(block) = event {
                    last = block.clone();
                    events.try_send(added(block)).expect("room");
                }
            }
        }
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        drop(events);
        tokio::time::timeout(DRAIN, run(indexer, handed, shutdown, DRAIN))
            .await
            .expect("stops once drained");
        assert_eq!(
            store.tip_block().expect("tip"),
            Some((last.number(), last.hash))
        );
    }

    #[test]
    fn bytes32_names_are_read() {
        let mut raw = [0u8; 32];
        raw[..5].copy_from_slice(b"Maker");
        assert_eq!(bytes32_text(&raw), "Maker");
    }

    /// The devnet's swaps, indexed through the same path as a node's,
    /// price its pairs: every known pool is learned from its `Sync` (and
    /// confirmed by its factory), with the tokens' real names.
    #[tokio::test]
    async fn devnet_blocks_price_its_pairs() {
        let settings = DevnetSettings {
            seed: 3,
            transactions_per_block: 40,
            genesis_timestamp: Some(1_700_000_000),
            ..DevnetSettings::default()
        };
        let mut devnet = Devnet::new(1, &settings);
        let store = Arc::new(PriceStore::in_memory().expect("store"));
        let mut indexer = Indexer::new(
            "eth".into(),
            store.clone(),
            Arc::new(InStore(store.clone())),
            Arc::new(DevnetCalls::new(1)),
            default_factories(1).to_vec(),
        );
        indexer
            .apply(1, &ChainEvent::Added(devnet.genesis()))
            .await
            .expect("genesis");
        for position in 2..42 {
            for event in devnet.next_step() {
                if let chainsieve_model::SourceEvent::Block(block) = event {
                    indexer
                        .apply(position, &ChainEvent::Added(block))
                        .await
                        .expect("block");
                }
            }
        }
        let pools = known_pools(1);
        assert!(pools.len() > 1, "the devnet trades in several pools");
        for pool in &pools {
            let learned = store.pools_of(pool.token0, pool.token1).expect("pools");
            assert_eq!(learned.len(), 1, "{}'s pool is learned", pool.dex);
            assert_eq!(learned[0].factory, pool.factory);
        }
        let pool = pools[0];
        let answer = token_price(&store, &[], None, pool.token0, pool.token1).expect("price");
        let token0 = known_tokens(1)
            .iter()
            .find(|t| t.address == pool.token0)
            .expect("known token");
        assert_eq!(answer.token0_name, token0.name);
        assert!(!answer.block_numbers.is_empty());
    }
}
