//! What a devnet chain answers for the methods a wallet calls around
//! `eth_sendRawTransaction`, so ethers' `sendTransaction` then `wait()`
//! works with no node (docs/src/api.md, Devnet transactions): nonces and
//! balances from the devnet's ledger, receipts from its blocks (the window,
//! then its archive: `methods.rs` routes them), fees from the window's
//! base fees, gas for transfers. The devnet runs no
//! contract code: `eth_call`, and gas estimates of contract calls, say so.

use std::sync::Arc;

use alloy_primitives::{Address, B256, U64, U128};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::params::{
    fixed_param, fixed_value, parse_bytes, parse_quantity, positional, require_positional,
};
use super::{Call, RpcError, result};
use chainsieve_chain::Chain;
use chainsieve_ingest::devnet::{
    Accounts, DevnetRequest, intrinsic, known_pools, known_tokens, typical_tip,
};
use chainsieve_model::Block;

/// The most blocks `eth_feeHistory` reports.
const FEE_HISTORY_BLOCKS: usize = 1_024;

/// Answers `call` on a devnet chain; a method it does not know is -32601.
pub(super) fn answer(
    chain: &Chain,
    ledger: &Accounts,
    call: &Call,
) -> Result<Box<RawValue>, RpcError> {
    let params = &call.params;
    match call.method.as_str() {
        "eth_getTransactionCount" => transaction_count(ledger, params),
        "eth_getBalance" => balance(ledger, params),
        // The chain's typical tip, suggested (the devnet takes any).
        "eth_gasPrice" => result(&U128::from(
            tip(chain)?.base_fee() + typical_tip(chain.chain_id),
        )),
        "eth_maxPriorityFeePerGas" => result(&U128::from(typical_tip(chain.chain_id))),
        "eth_feeHistory" => fee_history(chain, params),
        "eth_estimateGas" => estimate_gas(chain, params),
        "eth_call" => Err(runs_no_code(chain, "eth_call")),
        other => Err(RpcError::method_not_found(other)),
    }
}

/// `evm_mine` (anvil's and hardhat's): the devnet mines its next block now,
/// after the block's pending batches, and answers `"0x0"` once the block
/// has been sent on to the chain's pipeline. With a long `block_time_ms`,
/// a test (or a client's) steps the chain block by block this way.
pub(super) async fn mine(
    chain: &Chain,
    requests: &mpsc::Sender<DevnetRequest>,
    params: &Value,
) -> Result<Box<RawValue>, RpcError> {
    let none = match params {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        _ => false,
    };
    if !none {
        return Err(RpcError::invalid_params(
            "evm_mine on the devnet takes no parameters (it mines the next block now)",
        ));
    }
    let (request, mined) = oneshot::channel();
    requests
        .send(DevnetRequest::Mine(request))
        .await
        .map_err(|_| stopped(chain))?;
    mined.await.map_err(|_| stopped(chain))?;
    result(&"0x0")
}

/// `anvil_dropTransaction` (anvil's): the devnet drops a pending
/// transaction sent to it, and its sender's later ones, which it held up;
/// answers `null` (as anvil) once the drop is on its way to subscribers
/// (docs/src/api.md, A transaction's life).
pub(super) async fn drop_transaction(
    chain: &Chain,
    requests: &mpsc::Sender<DevnetRequest>,
    params: &Value,
) -> Result<Box<RawValue>, RpcError> {
    let hash: B256 = fixed_param(params, 0, "anvil_dropTransaction", "transaction hash")?;
    let (reply, dropped) = oneshot::channel();
    requests
        .send(DevnetRequest::Drop { hash, reply })
        .await
        .map_err(|_| stopped(chain))?;
    match dropped.await.map_err(|_| stopped(chain))? {
        Ok(_) => result(&Value::Null),
        Err(refused) => Err(RpcError::generic(refused.to_string())),
    }
}

fn stopped(chain: &Chain) -> RpcError {
    RpcError::internal(format!("the {} devnet has stopped", chain.name))
}

fn runs_no_code(chain: &Chain, what: &str) -> RpcError {
    RpcError::method_not_found_msg(&format!(
        "{what}: the {} devnet runs no contract code; to call contracts, give the chain a node \
         ([chains.{}] source = \"ws://…\")",
        chain.name, chain.name
    ))
}

fn tip(chain: &Chain) -> Result<Arc<Block>, RpcError> {
    chain
        .canonical()
        .tip()
        .cloned()
        .ok_or_else(|| RpcError::generic("no block received yet"))
}

/// `[address, block]`: every block but `pending` reads the latest count
/// (the devnet keeps no state per block).
fn transaction_count(ledger: &Accounts, params: &Value) -> Result<Box<RawValue>, RpcError> {
    let address: Address = fixed_param(params, 0, "eth_getTransactionCount", "the address")?;
    let pending = match positional(params, 1) {
        None | Some(Value::Null) => false,
        Some(Value::String(tag)) => match tag.as_str() {
            "pending" => true,
            "latest" | "safe" | "finalized" | "earliest" => false,
            number if parse_quantity(number).is_some() => false,
            _ => return Err(RpcError::invalid_params(format!("invalid block \"{tag}\""))),
        },
        Some(other) => return Err(RpcError::invalid_params(format!("invalid block {other}"))),
    };
    result(&U64::from(ledger.nonce(address, pending)))
}

/// `[address, block]`: the latest balance whatever the block (the devnet
/// keeps no state per block).
fn balance(ledger: &Accounts, params: &Value) -> Result<Box<RawValue>, RpcError> {
    let address: Address = fixed_param(params, 0, "eth_getBalance", "the address")?;
    result(&ledger.balance(address))
}

/// `[blockCount, newestBlock, rewardPercentiles?]` over the window.
fn fee_history(chain: &Chain, params: &Value) -> Result<Box<RawValue>, RpcError> {
    require_positional(params, "eth_feeHistory")?;
    let count = match positional(params, 0) {
        Some(Value::String(text)) => parse_quantity(text),
        Some(Value::Number(n)) => n.as_u64(),
        _ => None,
    }
    .ok_or_else(|| RpcError::invalid_params("eth_feeHistory takes a block count first"))?;
    match positional(params, 1) {
        Some(Value::String(tag)) if tag == "latest" || tag == "pending" => {}
        _ => {
            return Err(RpcError::invalid_params(
                "the devnet answers eth_feeHistory up to the latest block: give \"latest\"",
            ));
        }
    }
    let percentiles = match positional(params, 2) {
        None | Some(Value::Null) => 0,
        Some(Value::Array(list)) => list.len(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "the reward percentiles must be an array",
            ));
        }
    };
    let canonical = chain.canonical();
    let blocks: Vec<&Arc<Block>> = canonical.blocks().collect();
    let count = usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(FEE_HISTORY_BLOCKS)
        .min(blocks.len());
    let Some(tip) = blocks.last() else {
        return Err(RpcError::generic("no block received yet"));
    };
    let chosen = &blocks[blocks.len() - count..];
    let mut base_fees: Vec<U128> = chosen.iter().map(|b| U128::from(b.base_fee())).collect();
    // The next block's: the devnet's base fee does not move.
    base_fees.push(U128::from(tip.base_fee()));
    let ratios: Vec<f64> = chosen
        .iter()
        .map(|b| b.header.gas_used as f64 / b.header.gas_limit.max(1) as f64)
        .collect();
    let oldest = chosen.first().map_or(tip.number() + 1, |b| b.number());
    let mut answer = json!({
        "oldestBlock": U64::from(oldest),
        "baseFeePerGas": base_fees,
        "gasUsedRatio": ratios,
    });
    if percentiles > 0 {
        let reward = U128::from(typical_tip(chain.chain_id));
        answer["reward"] = json!(vec![vec![reward; percentiles]; count]);
    }
    result(&answer)
}

/// The intrinsic gas of a call to an account without code; a contract call
/// or creation is refused (no code runs here).
fn estimate_gas(chain: &Chain, params: &Value) -> Result<Box<RawValue>, RpcError> {
    require_positional(params, "eth_estimateGas")?;
    let Some(Value::Object(tx)) = positional(params, 0) else {
        return Err(RpcError::invalid_params(
            "eth_estimateGas takes a transaction object",
        ));
    };
    let to: Option<Address> = match tx.get("to") {
        None | Some(Value::Null) => None,
        Some(value) => Some(fixed_value(value, "\"to\" address")?),
    };
    let Some(to) = to else {
        return Err(runs_no_code(
            chain,
            "eth_estimateGas of a contract creation",
        ));
    };
    let contract = known_tokens(chain.chain_id).iter().any(|t| t.address == to)
        || known_pools(chain.chain_id).iter().any(|p| p.address == to);
    if contract {
        return Err(runs_no_code(chain, "eth_estimateGas of a contract call"));
    }
    let data = match tx.get("input").or_else(|| tx.get("data")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => parse_bytes(text).ok_or_else(|| {
            RpcError::invalid_params("the call data must be 0x-prefixed hex digit pairs")
        })?,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "invalid call data {other}"
            )));
        }
    };
    result(&U64::from(intrinsic(&data, false, None)))
}
