//! Blocks read by number, as the ingest fills a gap and a history stream
//! reads the past: the bodies (full transactions) in one batch, their
//! receipts (and so their logs) by block hash in a second, each block
//! verified ([`chainsieve_model::verify`]) before it is handed on.

use std::future::Future;
use std::sync::Arc;

use alloy_primitives::U64;
use serde_json::json;
use serde_json::value::RawValue;

use super::{Call, NodeError, decode};
use chainsieve_model::Block;
use chainsieve_model::verify;
use chainsieve_model::wire::{NodeBlock, NodeReceipts};

/// Blocks `bottom..=top`, verified, with their receipts, in two round trips of
/// `ask`; they stop at the first block the node does not have. A failed
/// call, a malformed answer or a block that fails verification fails the
/// whole range, saying which.
pub async fn by_number<F, Fut>(ask: F, bottom: u64, top: u64) -> Result<Vec<Arc<Block>>, String>
where
    F: Fn(Vec<Call>) -> Fut,
    Fut: Future<Output = Result<Vec<Box<RawValue>>, NodeError>>,
{
    let failed = |error: NodeError| error.to_string();
    let calls: Vec<Call> = (bottom..=top)
        .map(|n| Call::new("eth_getBlockByNumber", json!([U64::from(n), true])))
        .collect();
    let mut blocks = Vec::with_capacity(calls.len());
    for (number, raw) in (bottom..=top).zip(ask(calls).await.map_err(failed)?) {
        let Some(block): Option<NodeBlock> =
            decode("eth_getBlockByNumber", &raw).map_err(failed)?
        else {
            break;
        };
        if block.number() != number {
            return Err(format!(
                "asked for block {number}, answered block {}",
                block.number()
            ));
        }
        blocks.push(block);
    }
    if blocks.is_empty() {
        return Ok(Vec::new());
    }
    let receipt_calls: Vec<Call> = blocks
        .iter()
        .map(|b| Call::new("eth_getBlockReceipts", json!([b.hash()])))
        .collect();
    let receipts = ask(receipt_calls).await.map_err(failed)?;
    if receipts.len() != blocks.len() {
        return Err(format!(
            "{} answers to {} eth_getBlockReceipts calls",
            receipts.len(),
            blocks.len()
        ));
    }
    blocks
        .into_iter()
        .zip(receipts)
        .map(|(block, raw)| {
            let block = with_receipts(block, &raw).map_err(failed)?;
            verify::checked(block).map_err(|(block, error)| {
                format!("block {} failed verification: {error}", block.number())
            })
        })
        .collect()
}

/// `block` joined with `raw`, the node's `eth_getBlockReceipts` answer of
/// it: a `null` answer (receipts of a block the node just answered) is a
/// failure, not an empty block.
pub fn with_receipts(block: NodeBlock, raw: &RawValue) -> Result<Arc<Block>, NodeError> {
    let number = block.number();
    let receipts: Option<NodeReceipts> = decode("eth_getBlockReceipts", raw)?;
    let receipts = receipts.ok_or_else(|| NodeError::Decode {
        method: "eth_getBlockReceipts".into(),
        reason: format!("no receipts for block {number}, which it holds"),
    })?;
    block
        .with_receipts(receipts)
        .map_err(|error| NodeError::Decode {
            method: "eth_getBlockReceipts".into(),
            reason: format!("block {number}'s receipts: {error}"),
        })
}
