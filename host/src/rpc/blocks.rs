//! The recent canonical blocks as the chain's window holds them:
//! `eth_blockNumber`, `eth_getBlockByNumber`, `eth_getBlockByHash`. They read
//! the same window the streams come from, so answers agree with the
//! notifications just sent.

use alloy_primitives::{B256, U64};
use serde_json::Value;
use serde_json::value::RawValue;

use super::params::{parse_fixed, parse_quantity, positional, require_positional};
use super::{RpcError, result};
use crate::chain::Chain;

pub(super) fn block_number(chain: &Chain) -> Result<Box<RawValue>, RpcError> {
    let tip = chain.canonical().tip().map(|b| b.number());
    match tip {
        Some(number) => result(&U64::from(number)),
        None => Err(RpcError::generic("no block received yet")),
    }
}

/// A block selector: a number or a tag resolved to the tip.
fn block_selector(value: Option<&Value>) -> Result<Option<u64>, RpcError> {
    let bad = |v: &Value| {
        RpcError::invalid_params(format!(
            "invalid block number {v}: expected a hex quantity or latest, pending, safe, finalized, earliest"
        ))
    };
    match value {
        None => Err(RpcError::invalid_params("missing the block number")),
        Some(Value::String(tag)) => match tag.as_str() {
            "latest" | "pending" | "safe" | "finalized" => Ok(None),
            "earliest" => Ok(Some(0)),
            hex => parse_quantity(hex)
                .map(Some)
                .ok_or_else(|| bad(&Value::String(tag.clone()))),
        },
        Some(other) => Err(bad(other)),
    }
}

fn full_flag(params: &Value) -> Result<bool, RpcError> {
    match positional(params, 1) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(full)) => Ok(*full),
        Some(other) => Err(RpcError::invalid_params(format!(
            "the second parameter (full transactions) must be a boolean, got {other}"
        ))),
    }
}

pub(super) fn block_by_number(chain: &Chain, params: &Value) -> Result<Box<RawValue>, RpcError> {
    require_positional(params, "eth_getBlockByNumber")?;
    let selector = block_selector(positional(params, 0))?;
    let full = full_flag(params)?;
    let canonical = chain.canonical();
    let block = match selector {
        None => canonical.tip(),
        Some(number) => match canonical.by_number(number) {
            Some(block) => Some(block),
            None => match (canonical.oldest(), canonical.tip()) {
                (Some(oldest), Some(_)) if number < oldest.number() => {
                    return Err(RpcError::not_found(format!(
                        "block {number} is older than the recent blocks this server keeps (oldest: {})",
                        oldest.number()
                    )));
                }
                _ => None,
            },
        },
    };
    match block {
        Some(block) => Ok(block.block_json(full)),
        None => result(&Value::Null),
    }
}

pub(super) fn block_by_hash(chain: &Chain, params: &Value) -> Result<Box<RawValue>, RpcError> {
    require_positional(params, "eth_getBlockByHash")?;
    let hash: B256 = match positional(params, 0) {
        Some(Value::String(text)) => parse_fixed(text).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "invalid block hash \"{text}\": expected 0x and 64 hex digits"
            ))
        })?,
        _ => {
            return Err(RpcError::invalid_params(
                "eth_getBlockByHash takes the block hash (a string)",
            ));
        }
    };
    let full = full_flag(params)?;
    match chain.canonical().by_hash(&hash) {
        Some(block) => Ok(block.block_json(full)),
        None => result(&Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn block_selectors() {
        assert_eq!(block_selector(Some(&json!("latest"))), Ok(None));
        assert_eq!(block_selector(Some(&json!("earliest"))), Ok(Some(0)));
        assert_eq!(block_selector(Some(&json!("0x10"))), Ok(Some(16)));
        assert_eq!(
            block_selector(Some(&json!(16))).expect_err("number").code,
            -32602
        );
        assert_eq!(block_selector(None).expect_err("missing").code, -32602);
    }
}
