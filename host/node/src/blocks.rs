//! Blocks read by number, as the ingest fills a gap and a history stream
//! reads the past: the bodies (full transactions) in one batch, their logs
//! by block hash in a second (every node answers that, grouped by block),
//! each block verified ([`chainsieve_model::verify`]) before it is handed on.

use std::future::Future;
use std::sync::Arc;

use alloy_primitives::U64;
use serde_json::json;
use serde_json::value::RawValue;

use super::{Call, NodeError, decode};
use chainsieve_model::Block;
use chainsieve_model::verify;
use chainsieve_model::wire::NodeBlock;

/// Blocks `bottom..=top`, verified, with their logs, in two round trips of
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
    let log_calls: Vec<Call> = blocks
        .iter()
        .map(|b| Call::new("eth_getLogs", json!([{ "blockHash": b.hash() }])))
        .collect();
    let logs = ask(log_calls).await.map_err(failed)?;
    if logs.len() != blocks.len() {
        return Err(format!(
            "{} answers to {} eth_getLogs calls",
            logs.len(),
            blocks.len()
        ));
    }
    blocks
        .into_iter()
        .zip(logs)
        .map(|(block, raw)| {
            let logs: Vec<Box<RawValue>> = decode("eth_getLogs", &raw).map_err(failed)?;
            verify::checked(block.into_model(&logs)).map_err(|(block, error)| {
                format!("block {} failed verification: {error}", block.number())
            })
        })
        .collect()
}
