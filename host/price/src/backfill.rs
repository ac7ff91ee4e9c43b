//! Fills a node chain's price history from a configured block up to where
//! the index starts, by `eth_getLogs` over block ranges: only the pool
//! events, so a year of history costs a fraction of replaying blocks.
//!
//! The range adapts: halved when the node refuses it (too many results or
//! too wide), doubled again after successes. Progress is stored, so a
//! restart continues where it stopped, and logged every chunk.

use std::collections::BTreeMap;
use std::sync::Arc;

use alloy_consensus::Header;
use alloy_primitives::{B256, U64};
use alloy_sol_types::SolEvent;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use super::indexer::Indexer;
use super::store::{PriceStore, PriceWrite};
use chainsieve_contracts::abi::{
    IUniswapV2Factory, IUniswapV2Pair, IUniswapV3Factory, IUniswapV3Pool,
};
use chainsieve_model::Block;
use chainsieve_model::wire::read_logs;
use chainsieve_node::{Call, NodeError, NodePool, decode};

/// Block ranges asked for at first, and at most.
const FIRST_SPAN: u64 = 1_000;
const MAX_SPAN: u64 = 10_000;

/// The header fields a backfilled block (and a block read for a cold
/// price) needs: its time and identity.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct HeaderFields {
    pub(super) hash: B256,
    pub(super) parent_hash: B256,
    pub(super) number: U64,
    pub(super) timestamp: U64,
}

/// Backfills `from..` up to the first indexed block (or the node's head at
/// the start when nothing is indexed yet). Ends early on shutdown; a node
/// error is logged and ends the run (the next start resumes).
pub async fn run(
    chain: String,
    node: Arc<NodePool>,
    store: Arc<PriceStore>,
    mut indexer: Indexer,
    from: u64,
    shutdown: CancellationToken,
) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        result = fill(&chain, &node, &store, &mut indexer, from) => {
            if let Err(error) = result {
                tracing::warn!(%chain, error = format!("{error:#}"), "price backfill stopped; it resumes at the next start (an ingest's, at its next term)");
            }
        }
    }
}

async fn fill(
    chain: &str,
    node: &NodePool,
    store: &PriceStore,
    indexer: &mut Indexer,
    from: u64,
) -> anyhow::Result<()> {
    // The end is fixed by the first run (and kept with the progress): the
    // first block indexed then, or the node's head if none was.
    let (mut next, end) = match store.backfill()? {
        Some((next, end)) => (next.max(from), end),
        None => match store.first_block()? {
            Some(first) => (from, first.saturating_sub(1)),
            None => (
                from,
                node.call::<U64>("eth_blockNumber", json!([])).await?.to(),
            ),
        },
    };
    if next > end {
        return Ok(());
    }
    tracing::info!(%chain, from = next, to = end, "price backfill starting");
    let topics = [
        IUniswapV2Pair::Sync::SIGNATURE_HASH,
        IUniswapV3Pool::Swap::SIGNATURE_HASH,
        IUniswapV2Factory::PairCreated::SIGNATURE_HASH,
        IUniswapV3Factory::PoolCreated::SIGNATURE_HASH,
    ];
    let mut span = FIRST_SPAN;
    while next <= end {
        let to = next.saturating_add(span - 1).min(end);
        let raw: Vec<Box<RawValue>> = match node
            .call(
                "eth_getLogs",
                json!([{ "fromBlock": U64::from(next), "toBlock": U64::from(to), "topics": [topics] }]),
            )
            .await
        {
            Ok(raw) => raw,
            Err(NodeError::Rpc { message, .. }) if span > 1 => {
                span /= 2;
                tracing::debug!(%chain, span, %message, "eth_getLogs refused the range; halving it");
                continue;
            }
            Err(other) => return Err(other.into()),
        };
        let mut by_block: BTreeMap<u64, Vec<_>> = BTreeMap::new();
        for log in read_logs(&raw) {
            by_block
                .entry(log.block_number.unwrap_or_default())
                .or_default()
                .push(log);
        }
        let headers = headers(node, by_block.keys().copied()).await?;
        for ((number, logs), header) in by_block.into_iter().zip(headers) {
            anyhow::ensure!(
                header.number.to::<u64>() == number,
                "the node answered block {} for block {number}",
                header.number
            );
            let block = Block {
                hash: header.hash,
                header: Header {
                    number,
                    parent_hash: header.parent_hash,
                    timestamp: header.timestamp.to(),
                    ..Default::default()
                },
                transactions: Vec::new(),
                logs,
                lookup: None,
                gas_used: None,
                receipts: None,
            };
            indexer.add(&block, None).await?;
        }
        indexer
            .record(PriceWrite::Backfilled { next: to + 1, end })
            .await?;
        tracing::info!(
            %chain, block = to, of = end,
            percent = (to - from + 1) * 100 / (end - from + 1).max(1),
            "price backfill"
        );
        next = to + 1;
        span = (span * 2).min(MAX_SPAN);
    }
    Ok(())
}

/// The headers of `numbers`, in one batched round trip.
async fn headers(
    node: &NodePool,
    numbers: impl Iterator<Item = u64>,
) -> anyhow::Result<Vec<HeaderFields>> {
    let calls: Vec<Call> = numbers
        .map(|n| Call::new("eth_getBlockByNumber", json!([U64::from(n), false])))
        .collect();
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    node.batch(&calls)
        .await?
        .iter()
        .map(|raw| Ok(decode::<HeaderFields>("eth_getBlockByNumber", raw)?))
        .collect()
}
