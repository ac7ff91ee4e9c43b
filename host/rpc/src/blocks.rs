//! The recent canonical blocks as the chain's window holds them:
//! `eth_blockNumber`, `eth_getBlockByNumber`, `eth_getBlockByHash`,
//! `eth_getTransactionByHash`. They read
//! the same window the streams come from, so answers agree with the
//! notifications just sent. What the window does not hold a node chain asks
//! its node ([`Held::Elsewhere`]).

use alloy_primitives::{B256, U64};
use serde_json::Value;
use serde_json::value::RawValue;

use super::params::{fixed_param, parse_quantity, positional, require_positional};
use super::{RpcError, result};
use chainsieve_chain::Chain;
use chainsieve_model::{Block, TxShape};

/// The window's tip; before the first block arrives a node chain asks its
/// node, so a client that connects during startup is answered all the same.
pub(super) fn block_number(chain: &Chain) -> Result<Held, RpcError> {
    let tip = chain.canonical().tip().map(|b| b.number());
    Ok(match tip {
        Some(number) => Held::Answer(result(&U64::from(number))?),
        None => Held::Elsewhere(Err(RpcError::generic("no block received yet"))),
    })
}

/// What the window says of a block asked for.
pub(super) enum Held {
    /// The window's answer.
    Answer(Box<RawValue>),
    /// Not in the window (or a tag only the node can resolve: `pending`,
    /// `safe`, `finalized`); what a chain without a node answers instead.
    Elsewhere(Result<Box<RawValue>, RpcError>),
    /// Block `number`, older than the window (`full`: with its
    /// transactions): a devnet chain's archive answers it; elsewhere as
    /// [`Held::Elsewhere`].
    Older {
        number: u64,
        full: bool,
        fallback: Result<Box<RawValue>, RpcError>,
    },
    /// The block of hash `hash`, not in the window: a devnet chain's
    /// archive answers it; elsewhere as [`Held::Elsewhere`] (`null`).
    OlderByHash { hash: B256, full: bool },
    /// The mined transaction `hash`, not in the window, to be answered by
    /// `answer` (the transaction, or a devnet's receipt): as
    /// [`Held::OlderByHash`].
    OlderTransaction { hash: B256, answer: MinedAnswer },
    /// `eth_getLogs` over blocks older than the log: a devnet chain's
    /// archive answers it; elsewhere as [`Held::Elsewhere`].
    OlderLogs {
        filter: Box<chainsieve_log_rules::LogFilter>,
        blocks: LogReach,
        fallback: Result<Box<RawValue>, RpcError>,
    },
}

impl Held {
    /// What a chain without a node or an archive answers: the window's
    /// answer, or what stands in for the rest (`null` for a hash).
    pub(super) fn fallback(self) -> Result<Box<RawValue>, RpcError> {
        match self {
            Held::Answer(answer) => Ok(answer),
            Held::Elsewhere(fallback)
            | Held::Older { fallback, .. }
            | Held::OlderLogs { fallback, .. } => fallback,
            Held::OlderByHash { .. } | Held::OlderTransaction { .. } => result(&Value::Null),
        }
    }
}

/// `block` as a block answer (`full`: with its transactions), or `null`.
pub(super) fn block_or_null(block: Option<&Block>, full: bool) -> Result<Box<RawValue>, RpcError> {
    match block.and_then(|block| block.block_json(full)) {
        Some(answer) => Ok(answer),
        None => result(&Value::Null),
    }
}

/// The blocks an `eth_getLogs` older than the log asks about.
#[derive(Debug)]
pub(super) enum LogReach {
    /// `fromBlock..=toBlock`.
    Numbers(u64, u64),
    /// `blockHash`.
    Hash(B256),
}

/// A block selector: a number, or a tag.
#[derive(Debug, PartialEq, Eq)]
enum Selector {
    Number(u64),
    /// `latest`: the window's tip.
    Latest,
    /// `pending`, `safe`, `finalized`: the tip on a chain without a node.
    NodeTag,
}

fn block_selector(value: Option<&Value>) -> Result<Selector, RpcError> {
    let bad = |v: &Value| {
        RpcError::invalid_params(format!(
            "invalid block number {v}: expected a hex quantity or latest, pending, safe, finalized, earliest"
        ))
    };
    match value {
        None => Err(RpcError::invalid_params("missing the block number")),
        Some(Value::String(tag)) => match tag.as_str() {
            "latest" => Ok(Selector::Latest),
            "pending" | "safe" | "finalized" => Ok(Selector::NodeTag),
            "earliest" => Ok(Selector::Number(0)),
            hex => parse_quantity(hex)
                .map(Selector::Number)
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

pub(super) fn block_by_number(chain: &Chain, params: &Value) -> Result<Held, RpcError> {
    require_positional(params, "eth_getBlockByNumber")?;
    let selector = block_selector(positional(params, 0))?;
    let full = full_flag(params)?;
    let canonical = chain.canonical();
    Ok(match selector {
        Selector::Latest => match canonical.tip() {
            Some(block) => lookup(block, full),
            None => Held::Answer(result(&Value::Null)?),
        },
        Selector::NodeTag => {
            Held::Elsewhere(block_or_null(canonical.tip().map(AsRef::as_ref), full))
        }
        Selector::Number(number) => match canonical.by_number(number) {
            Some(block) => lookup(block, full),
            None => match (canonical.oldest(), canonical.tip()) {
                (Some(oldest), Some(_)) if number < oldest.number() => Held::Older {
                    number,
                    full,
                    fallback: Err(RpcError::not_found(format!(
                        "block {number} is older than the recent blocks this server keeps (oldest: {})",
                        oldest.number()
                    ))),
                },
                _ => Held::Elsewhere(result(&Value::Null)),
            },
        },
    })
}

pub(super) fn block_by_hash(chain: &Chain, params: &Value) -> Result<Held, RpcError> {
    let hash: B256 = fixed_param(params, 0, "eth_getBlockByHash", "the block hash")?;
    let full = full_flag(params)?;
    Ok(match chain.canonical().by_hash(&hash) {
        Some(block) => lookup(block, full),
        None => Held::OlderByHash { hash, full },
    })
}

/// The window's block as its source gave it, or the node's answer where the
/// window holds no lookup members for it (docs/src/api.md, Wire shapes).
fn lookup(block: &Block, full: bool) -> Held {
    match block.block_json(full) {
        Some(answer) => Held::Answer(answer),
        None => Held::Elsewhere(result(&Value::Null)),
    }
}

/// How a mined transaction is answered, from its block and its index in it.
pub(super) type MinedAnswer = fn(&Block, usize) -> Result<Box<RawValue>, RpcError>;

/// `method` of the transaction hash `params` names (`eth_getTransactionByHash`,
/// a devnet's `eth_getTransactionReceipt`), answered by `answer` while its
/// block is canonical and in the window (a pending one, or an older one, is
/// the node's or the archive's to answer).
pub(super) fn mined_transaction(
    chain: &Chain,
    params: &Value,
    method: &str,
    answer: MinedAnswer,
) -> Result<Held, RpcError> {
    let hash: B256 = fixed_param(params, 0, method, "the transaction hash")?;
    Ok(match chain.canonical().transaction(&hash) {
        Some((block, index)) => Held::Answer(answer(block, index)?),
        None => Held::OlderTransaction { hash, answer },
    })
}

/// `[hash]` of `eth_getTransactionReceipt`: the window's where its block
/// holds its receipts (a node's, or the devnet's made of the gas its
/// transactions used), else an older transaction's (the node's answer, or
/// the devnet archive's).
pub(super) fn receipt(chain: &Chain, params: &Value) -> Result<Held, RpcError> {
    let method = "eth_getTransactionReceipt";
    let hash: B256 = fixed_param(params, 0, method, "the transaction hash")?;
    Ok(match chain.canonical().transaction(&hash) {
        Some((block, index)) if block.receipts.is_some() || block.gas_used.is_some() => {
            Held::Answer(receipt_answer(block, index)?)
        }
        _ => Held::OlderTransaction {
            hash,
            answer: receipt_answer,
        },
    })
}

/// `block`'s transaction `index` as `eth_getTransactionReceipt` answers
/// it (`null` for a block without receipts).
fn receipt_answer(block: &Block, index: usize) -> Result<Box<RawValue>, RpcError> {
    match block.receipt_json(index, false) {
        Some(receipt) => {
            RawValue::from_string(receipt).map_err(|e| RpcError::internal(e.to_string()))
        }
        None => result(&Value::Null),
    }
}

/// `block`'s transaction `index` as `eth_getTransactionByHash` answers it.
pub(super) fn transaction_answer(block: &Block, index: usize) -> Result<Box<RawValue>, RpcError> {
    RawValue::from_string(block.transaction_json(index, TxShape::Geth, false))
        .map_err(|e| RpcError::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn block_selectors() {
        assert_eq!(block_selector(Some(&json!("latest"))), Ok(Selector::Latest));
        assert_eq!(
            block_selector(Some(&json!("finalized"))),
            Ok(Selector::NodeTag)
        );
        assert_eq!(
            block_selector(Some(&json!("earliest"))),
            Ok(Selector::Number(0))
        );
        assert_eq!(
            block_selector(Some(&json!("0x10"))),
            Ok(Selector::Number(16))
        );
        assert_eq!(
            block_selector(Some(&json!(16))).expect_err("number").code,
            -32602
        );
        assert_eq!(block_selector(None).expect_err("missing").code, -32602);
    }
}
