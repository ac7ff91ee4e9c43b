//! `eth_getLogs` from the chain's event log, so the answer agrees with the
//! notifications sent: a devnet chain's history as far back as the log
//! holds it; on a node chain, a range of block numbers (or a block hash)
//! the log holds, and anything else (tags included) from the node
//! ([`Held::Elsewhere`]). geth's filter rules: the `logs` topic's own
//! ([`LogFilter`]; docs/src/api.md, Logs).

use alloy_primitives::B256;
use chainsieve_filter_core::LogRead;
use chainsieve_log_rules::LogFilter;
use serde_json::Value;
use serde_json::value::RawValue;

use std::sync::Arc;

use super::blocks::{Held, LogReach as Reach};
use super::params::{fixed_value, parse_quantity, positional, require_positional};
use super::{RpcError, result};
use chainsieve_chain::Chain;
use chainsieve_model::Block;

/// The most logs one call answers.
const MAX_LOGS: usize = 10_000;

/// A log as geth's filter rules read it.
struct Read<'a>(&'a alloy_primitives::Log);

impl<'a> LogRead<'a> for Read<'a> {
    fn address(&self) -> &'a [u8; 20] {
        &self.0.address.0.0
    }

    fn topic_count(&self) -> usize {
        self.0.topics().len()
    }

    fn topic(&self, i: usize) -> Option<&'a [u8; 32]> {
        self.0.topics().get(i).map(|topic| &topic.0)
    }
}

pub(super) fn get_logs(chain: &Chain, params: &Value) -> Result<Held, RpcError> {
    require_positional(params, "eth_getLogs")?;
    let Some(Value::Object(query)) = positional(params, 0) else {
        return Err(RpcError::invalid_params(
            "eth_getLogs takes a filter object",
        ));
    };
    let filter = LogFilter::new(query.get("address"), query.get("topics")).map_err(|refusal| {
        if refusal.is_limit() {
            RpcError::limit_exceeded(refusal.to_string())
        } else {
            RpcError::invalid_params(refusal.to_string())
        }
    })?;
    // The log, not the window: the pipeline appends to the log just after
    // it moves the window.
    let Some((oldest, tip)) = chain.log().canonical_bounds() else {
        return Err(RpcError::generic("no block received yet"));
    };
    let node = chain.node().is_some();
    let elsewhere = |fallback| Ok(Held::Elsewhere(fallback));
    let (from, to) = match query.get("blockHash") {
        Some(value) => {
            if query.contains_key("fromBlock") || query.contains_key("toBlock") {
                return Err(RpcError::invalid_params(
                    "blockHash cannot be given with fromBlock or toBlock",
                ));
            }
            let hash: B256 = fixed_value(value, "blockHash")?;
            let number = chain.canonical().by_hash(&hash).map(|b| b.number());
            let held = number
                .and_then(|n| chain.log().canonical_range(n, n).pop())
                .filter(|block| block.hash == hash);
            match held {
                Some(block) => (block.number(), block.number()),
                None => {
                    return Ok(Held::OlderLogs {
                        filter: Box::new(filter),
                        blocks: Reach::Hash(hash),
                        fallback: result(&Value::Array(Vec::new())),
                    });
                }
            }
        }
        None => {
            // On a node chain the node resolves the tags: its latest block
            // may be ahead of the log (a client that just read a receipt
            // from the node must find its logs).
            let bound = |key: &str| -> Result<Option<u64>, RpcError> {
                match query.get(key) {
                    None | Some(Value::Null) => Ok((!node).then_some(tip)),
                    Some(Value::String(tag)) => match tag.as_str() {
                        "latest" | "pending" | "safe" | "finalized" => Ok((!node).then_some(tip)),
                        "earliest" => Ok(Some(0)),
                        number => parse_quantity(number).map(Some).ok_or_else(|| {
                            RpcError::invalid_params(format!("invalid {key} \"{number}\""))
                        }),
                    },
                    Some(other) => Err(RpcError::invalid_params(format!("invalid {key} {other}"))),
                }
            };
            match (bound("fromBlock")?, bound("toBlock")?) {
                (Some(from), Some(to)) => (from, to),
                // A tag only the node resolves.
                _ => return elsewhere(result(&Value::Array(Vec::new()))),
            }
        }
    };
    if from > to {
        return Err(RpcError::invalid_params(format!(
            "fromBlock {from} is after toBlock {to}"
        )));
    }
    if from < oldest || (node && to > tip) {
        let fallback = Err(RpcError::not_found(format!(
            "the range reaches block {from}, older than the history this server keeps (oldest: {oldest})"
        )));
        return Ok(Held::OlderLogs {
            filter: Box::new(filter),
            blocks: Reach::Numbers(from, to),
            fallback,
        });
    }
    let blocks = chain.log().canonical_range(from, to);
    // A node chain answers from the log only what it holds whole.
    if node && (blocks.len() as u64) < to.min(tip) - from + 1 {
        return elsewhere(result(&Value::Array(Vec::new())));
    }
    match matching(&blocks, &filter) {
        Ok(answer) => Ok(Held::Answer(answer)),
        // The node has its own limits.
        Err(limited) if node => elsewhere(Err(limited)),
        Err(refused) => Err(refused),
    }
}

/// The logs of `blocks` that `filter` matches, as the answer; -32005
/// past [`MAX_LOGS`].
pub(super) fn matching(
    blocks: &[Arc<Block>],
    filter: &LogFilter,
) -> Result<Box<RawValue>, RpcError> {
    let mut found = Vec::new();
    for block in blocks {
        for (index, log) in block.logs.iter().enumerate() {
            if filter.matches(&Read(&log.inner)) {
                if found.len() == MAX_LOGS {
                    return Err(RpcError::limit_exceeded(format!(
                        "more than {MAX_LOGS} logs match (a fixed limit); ask for a narrower block range"
                    )));
                }
                found.push(
                    RawValue::from_string(block.log_json(index, false))
                        .map_err(|e| RpcError::internal(e.to_string()))?,
                );
            }
        }
    }
    result(&found)
}
