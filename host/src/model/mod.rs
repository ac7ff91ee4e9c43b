//! The chain data model every source produces and every consumer reads:
//! parsed once at ingestion, shared behind `Arc`s, serialized to the wire
//! shapes docs/src/api.md fixes (Wire shapes: geth's shapes, lowercase
//! addresses, canonical hex quantities).
//!
//! - [`events`]: what a source produces, the changes the canonical tracker
//!   orders it into, and one event of one stream.
//! - [`wire`]: the wire shapes read back into the model (a node's JSON, the
//!   harness's event files).

pub mod events;
pub mod wire;

pub use events::{ChainEvent, SourceEvent, StreamEvent};

use std::sync::Arc;

use alloy_consensus::transaction::to_eip155_value;
use alloy_consensus::{Header, Transaction as _, TxEnvelope};
use alloy_eips::eip2930::AccessList;
use alloy_primitives::{Address, B256, Bytes, U64, U128, U256};
use alloy_rpc_types_eth::Log;
use serde::{Deserialize, Serialize, Serializer};

/// How a transaction pays for gas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fees {
    /// Types 0 and 1: a single gas price.
    GasPrice(u128),
    /// Types 2, 3 and 4: EIP-1559 fee caps.
    Dynamic {
        max_fee_per_gas: u128,
        max_priority_fee_per_gas: u128,
    },
}

impl Fees {
    /// The price per gas paid in a block of `base_fee`.
    pub fn effective(&self, base_fee: u128) -> u128 {
        match *self {
            Fees::GasPrice(price) => price,
            Fees::Dynamic {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            } => max_fee_per_gas.min(base_fee + max_priority_fee_per_gas),
        }
    }
}

/// A transaction's signature as the RPC shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxSignature {
    /// For legacy transactions `v` carries the EIP-155 chain id; for typed
    /// ones it equals `yParity`.
    pub v: u64,
    pub r: U256,
    pub s: U256,
}

/// A signed transaction, independent of where it sits (pending or mined).
/// Its serde form is what a persisted log stores (docs/src/architecture.md,
/// The event log), not a wire shape: see [`Transaction::to_json`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub hash: B256,
    /// EIP-2718 type: 0 legacy, 1 access list, 2 EIP-1559, 3 blob, 4 set-code.
    pub tx_type: u8,
    pub chain_id: Option<u64>,
    pub nonce: u64,
    pub from: Address,
    /// `None` for a contract creation.
    pub to: Option<Address>,
    pub value: U256,
    /// The gas limit.
    pub gas: u64,
    pub fees: Fees,
    pub input: Bytes,
    /// Present for typed transactions.
    pub access_list: Option<AccessList>,
    pub signature: TxSignature,
}

/// A canonical (or orphaned) block with everything the streams need. Its
/// serde form is what a persisted log stores, not a wire shape.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Block {
    pub hash: B256,
    pub header: Header,
    pub transactions: Vec<Arc<Transaction>>,
    /// Every log of the block, in order, with its block fields filled in.
    pub logs: Vec<Log>,
}

impl Block {
    pub fn number(&self) -> u64 {
        self.header.number
    }

    pub fn parent_hash(&self) -> B256 {
        self.header.parent_hash
    }
}

/// Where a transaction is, which decides its block fields on the wire.
#[derive(Clone, Copy, Debug)]
pub enum TxPosition {
    /// In the mempool; geth shows `null` block fields.
    Pending,
    /// In the mempool, in BlockVision's shape: `""` block fields.
    PendingBlockvision,
    /// In a block.
    Mined {
        block_hash: B256,
        block_number: u64,
        index: u64,
    },
}

/// A block field of a transaction: `null`, `""` or a value.
#[derive(Debug)]
enum BlockField<T> {
    Null,
    Empty,
    Value(T),
}

impl<T: Serialize> Serialize for BlockField<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BlockField::Null => s.serialize_none(),
            BlockField::Empty => s.serialize_str(""),
            BlockField::Value(v) => v.serialize(s),
        }
    }
}

/// A transaction in geth's RPC field order. Typed transactions carry
/// `yParity` (ethers needs `v` or `yParity`); EIP-1559 ones carry fee caps
/// and no `gasPrice`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TransactionJson<'a> {
    block_hash: BlockField<B256>,
    block_number: BlockField<U64>,
    from: Address,
    gas: U64,
    #[serde(skip_serializing_if = "Option::is_none")]
    gas_price: Option<U128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_fee_per_gas: Option<U128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_priority_fee_per_gas: Option<U128>,
    hash: B256,
    input: &'a Bytes,
    nonce: U64,
    to: Option<Address>,
    transaction_index: BlockField<U64>,
    value: U256,
    #[serde(rename = "type")]
    tx_type: U64,
    #[serde(skip_serializing_if = "Option::is_none")]
    access_list: Option<&'a AccessList>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chain_id: Option<U64>,
    v: U64,
    r: U256,
    s: U256,
    #[serde(skip_serializing_if = "Option::is_none")]
    y_parity: Option<U64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    removed: bool,
}

impl Transaction {
    /// The transaction `envelope` holds, sent by `from` (the caller has
    /// recovered or knows the signer).
    pub fn from_envelope(envelope: &TxEnvelope, from: Address) -> Self {
        let tx_type = envelope.tx_type() as u8;
        let signature = envelope.signature();
        let v = if tx_type == 0 {
            u64::try_from(to_eip155_value(signature.v(), envelope.chain_id())).unwrap_or(u64::MAX)
        } else {
            u64::from(signature.v())
        };
        let fees = match envelope.gas_price() {
            Some(price) => Fees::GasPrice(price),
            None => Fees::Dynamic {
                max_fee_per_gas: envelope.max_fee_per_gas(),
                max_priority_fee_per_gas: envelope.max_priority_fee_per_gas().unwrap_or_default(),
            },
        };
        Self {
            hash: *envelope.tx_hash(),
            tx_type,
            chain_id: envelope.chain_id(),
            nonce: envelope.nonce(),
            from,
            to: envelope.to(),
            value: envelope.value(),
            gas: envelope.gas_limit(),
            fees,
            input: envelope.input().clone(),
            access_list: (tx_type != 0)
                .then(|| envelope.access_list().cloned().unwrap_or_default()),
            signature: TxSignature {
                v,
                r: signature.r(),
                s: signature.s(),
            },
        }
    }

    /// The RPC object for this transaction at `position`; `removed` adds
    /// `"removed": true` (a mined transaction of an orphaned block).
    pub fn to_json(&self, position: TxPosition, removed: bool) -> String {
        let (block_hash, block_number, index) = match position {
            TxPosition::Pending => (BlockField::Null, BlockField::Null, BlockField::Null),
            TxPosition::PendingBlockvision => {
                (BlockField::Empty, BlockField::Empty, BlockField::Empty)
            }
            TxPosition::Mined {
                block_hash,
                block_number,
                index,
            } => (
                BlockField::Value(block_hash),
                BlockField::Value(U64::from(block_number)),
                BlockField::Value(U64::from(index)),
            ),
        };
        let (gas_price, max_fee_per_gas, max_priority_fee_per_gas) = match self.fees {
            Fees::GasPrice(price) => (Some(U128::from(price)), None, None),
            Fees::Dynamic {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            } => (
                None,
                Some(U128::from(max_fee_per_gas)),
                Some(U128::from(max_priority_fee_per_gas)),
            ),
        };
        let typed = self.tx_type != 0;
        let json = TransactionJson {
            block_hash,
            block_number,
            from: self.from,
            gas: U64::from(self.gas),
            gas_price,
            max_fee_per_gas,
            max_priority_fee_per_gas,
            hash: self.hash,
            input: &self.input,
            nonce: U64::from(self.nonce),
            to: self.to,
            transaction_index: index,
            value: self.value,
            tx_type: U64::from(self.tx_type),
            access_list: self.access_list.as_ref().filter(|_| typed),
            chain_id: self.chain_id.map(U64::from),
            v: U64::from(self.signature.v),
            r: self.signature.r,
            s: self.signature.s,
            y_parity: typed.then(|| U64::from(self.signature.v)),
            removed,
        };
        serde_json::to_string(&json).expect("transaction JSON has no fallible fields")
    }
}

/// A header in geth's shape: every consensus field plus `hash`.
#[derive(Serialize)]
struct HeaderJson<'a> {
    hash: B256,
    #[serde(flatten)]
    header: &'a Header,
}

/// A block as `eth_getBlockByNumber` returns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BlockJson<'a, T> {
    #[serde(flatten)]
    header: HeaderJson<'a>,
    size: U64,
    transactions: T,
    uncles: [B256; 0],
    #[serde(skip_serializing_if = "Option::is_none")]
    withdrawals: Option<[(); 0]>,
}

impl Block {
    /// The header object sent to `newHeads` subscribers.
    pub fn header_json(&self) -> String {
        let json = HeaderJson {
            hash: self.hash,
            header: &self.header,
        };
        serde_json::to_string(&json).expect("header JSON has no fallible fields")
    }

    /// The block object of `eth_getBlockByNumber`/`ByHash`: transaction
    /// hashes, or full transactions when `full`.
    pub fn block_json(&self, full: bool) -> Box<serde_json::value::RawValue> {
        let header = HeaderJson {
            hash: self.hash,
            header: &self.header,
        };
        let size = U64::from(alloy_rlp::Encodable::length(&self.header));
        let withdrawals = self.header.withdrawals_root.map(|_| []);
        let text = if full {
            let txs: Vec<Box<serde_json::value::RawValue>> = (0..self.transactions.len())
                .map(|i| raw(self.transaction_json(i, false)))
                .collect();
            serde_json::to_string(&BlockJson {
                header,
                size,
                transactions: txs,
                uncles: [],
                withdrawals,
            })
        } else {
            let hashes: Vec<B256> = self.transactions.iter().map(|tx| tx.hash).collect();
            serde_json::to_string(&BlockJson {
                header,
                size,
                transactions: hashes,
                uncles: [],
                withdrawals,
            })
        };
        raw(text.expect("block JSON has no fallible fields"))
    }

    /// Transaction `index` of this block as a mined RPC object.
    pub fn transaction_json(&self, index: usize, removed: bool) -> String {
        let position = TxPosition::Mined {
            block_hash: self.hash,
            block_number: self.number(),
            index: index as u64,
        };
        self.transactions[index].to_json(position, removed)
    }

    /// Log `index` of this block, flagged `removed` when re-sent after a reorg.
    pub fn log_json(&self, index: usize, removed: bool) -> String {
        let log = &self.logs[index];
        let text = if removed {
            serde_json::to_string(&Log {
                removed: true,
                ..log.clone()
            })
        } else {
            serde_json::to_string(log)
        };
        text.expect("log JSON has no fallible fields")
    }
}

fn raw(json: String) -> Box<serde_json::value::RawValue> {
    serde_json::value::RawValue::from_string(json).expect("serde_json wrote valid JSON")
}

#[cfg(test)]
impl Transaction {
    /// A legacy transfer known by `hash` alone, for tests that track where
    /// transactions are rather than what they do.
    pub fn fixture(hash: B256) -> Self {
        Self {
            hash,
            tx_type: 0,
            chain_id: Some(1),
            nonce: 0,
            from: Address::ZERO,
            to: None,
            value: U256::ZERO,
            gas: 21_000,
            fees: Fees::GasPrice(1),
            input: Bytes::new(),
            access_list: None,
            signature: TxSignature {
                v: 27,
                r: U256::ZERO,
                s: U256::ZERO,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{address, b256, bytes};
    use serde_json::{Value, json};

    use super::*;

    fn eip1559() -> Transaction {
        Transaction {
            hash: b256!("0x1111111111111111111111111111111111111111111111111111111111111111"),
            tx_type: 2,
            chain_id: Some(1),
            nonce: 0,
            from: address!("0xAbCdEf0123456789aBcDeF0123456789AbCdEf01"),
            to: None,
            value: U256::ZERO,
            gas: 21_000,
            fees: Fees::Dynamic {
                max_fee_per_gas: 30_000_000_000,
                max_priority_fee_per_gas: 1,
            },
            input: bytes!("a9059cbb"),
            access_list: Some(AccessList::default()),
            signature: TxSignature {
                v: 1,
                r: U256::from(0xabc),
                s: U256::from(1),
            },
        }
    }

    #[test]
    fn pending_transactions_in_both_shapes() {
        let tx = eip1559();
        let geth: Value =
            serde_json::from_str(&tx.to_json(TxPosition::Pending, false)).expect("json");
        let bv: Value =
            serde_json::from_str(&tx.to_json(TxPosition::PendingBlockvision, false)).expect("json");
        for field in ["blockHash", "blockNumber", "transactionIndex"] {
            assert_eq!(geth[field], Value::Null, "{field}");
            assert_eq!(bv[field], json!(""), "{field}");
        }
        assert_eq!(
            geth["from"],
            json!("0xabcdef0123456789abcdef0123456789abcdef01")
        );
        assert_eq!(geth["to"], Value::Null);
        assert_eq!(geth["value"], json!("0x0"));
        assert_eq!(geth["gas"], json!("0x5208"));
        assert_eq!(geth["type"], json!("0x2"));
        assert_eq!(geth["maxFeePerGas"], json!("0x6fc23ac00"));
        assert_eq!(geth["maxPriorityFeePerGas"], json!("0x1"));
        assert!(geth.get("gasPrice").is_none());
        assert_eq!(geth["yParity"], json!("0x1"));
        assert_eq!(geth["r"], json!("0xabc"));
        assert_eq!(geth["accessList"], json!([]));
        assert!(geth.get("removed").is_none());
    }

    #[test]
    fn legacy_transactions_carry_gas_price_and_no_y_parity() {
        let tx = Transaction {
            tx_type: 0,
            fees: Fees::GasPrice(7),
            access_list: None,
            signature: TxSignature {
                v: 37,
                r: U256::from(1),
                s: U256::from(2),
            },
            ..eip1559()
        };
        let position = TxPosition::Mined {
            block_hash: B256::repeat_byte(2),
            block_number: 16,
            index: 3,
        };
        let v: Value = serde_json::from_str(&tx.to_json(position, true)).expect("json");
        assert_eq!(v["gasPrice"], json!("0x7"));
        assert!(
            v.get("maxFeePerGas").is_none()
                && v.get("yParity").is_none()
                && v.get("accessList").is_none()
        );
        assert_eq!(v["v"], json!("0x25"));
        assert_eq!(v["blockNumber"], json!("0x10"));
        assert_eq!(v["transactionIndex"], json!("0x3"));
        assert_eq!(v["removed"], json!(true));
    }
}
