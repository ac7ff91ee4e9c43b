//! A node's JSON objects (blocks, transactions, logs) read straight into the
//! [`model`](crate::ingest::model) types, each parsed once.
//!
//! Nodes differ: BNB Chain and Polygon add system transactions (no
//! signature, or type `0x7f` on Polygon) and extra header fields, and new
//! transaction types appear. Nothing here refuses a block for that: every
//! field the filters and the wire shapes need is read, absent signature
//! parts read as zero, an unknown type keeps its number, and fields this
//! server does not serve are skipped.

use std::sync::Arc;

use alloy_eips::eip2930::AccessList;
use alloy_primitives::{Address, B256, Bytes, U64, U128, U256};
use alloy_rpc_types_eth::Log;
use serde::Deserialize;

use crate::ingest::model::{Block, Fees, Transaction, TxSignature};

/// `eth_getBlockBy*` with full transactions. The header fields are read by
/// alloy's RPC header type; `transactions` directly into [`NodeTransaction`].
#[derive(Debug, Deserialize)]
pub struct NodeBlock {
    pub transactions: Vec<NodeTransaction>,
    #[serde(flatten)]
    pub header: alloy_rpc_types_eth::Header,
}

/// A transaction object, pending or mined.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTransaction {
    hash: B256,
    /// Absent on some nodes for legacy transactions.
    #[serde(rename = "type", default)]
    tx_type: Option<U64>,
    #[serde(default)]
    chain_id: Option<U64>,
    nonce: U64,
    from: Address,
    #[serde(default)]
    to: Option<Address>,
    value: U256,
    gas: U64,
    #[serde(default)]
    gas_price: Option<U128>,
    #[serde(default)]
    max_fee_per_gas: Option<U128>,
    #[serde(default)]
    max_priority_fee_per_gas: Option<U128>,
    /// `data` on a few old nodes.
    #[serde(alias = "data")]
    input: Bytes,
    #[serde(default)]
    access_list: Option<AccessList>,
    #[serde(default)]
    v: Option<U64>,
    #[serde(default)]
    y_parity: Option<U64>,
    /// System transactions carry no signature.
    #[serde(default)]
    r: U256,
    #[serde(default)]
    s: U256,
}

/// A log object (`eth_getLogs`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeLog {
    address: Address,
    topics: Vec<B256>,
    data: Bytes,
    #[serde(default)]
    block_hash: Option<B256>,
    #[serde(default)]
    block_number: Option<U64>,
    #[serde(default)]
    block_timestamp: Option<U64>,
    #[serde(default)]
    transaction_hash: Option<B256>,
    #[serde(default)]
    transaction_index: Option<U64>,
    #[serde(default)]
    log_index: Option<U64>,
}

impl NodeTransaction {
    pub fn hash(&self) -> B256 {
        self.hash
    }

    pub fn into_model(self) -> Transaction {
        // EIP-2718 types are 0..=0x7f; anything else cannot be a real type.
        let tx_type = self
            .tx_type
            .map_or(0, |t| u8::try_from(t.to::<u64>()).unwrap_or(u8::MAX));
        let fees = match (self.max_fee_per_gas, self.max_priority_fee_per_gas) {
            (Some(max), Some(priority)) => Fees::Dynamic {
                max_fee_per_gas: max.to(),
                max_priority_fee_per_gas: priority.to(),
            },
            _ => Fees::GasPrice(self.gas_price.map_or(0, |p| p.to())),
        };
        let v = self.v.or(self.y_parity).map_or(0, |v| v.to());
        Transaction {
            hash: self.hash,
            tx_type,
            chain_id: self.chain_id.map(|c| c.to()),
            nonce: self.nonce.to(),
            from: self.from,
            to: self.to,
            value: self.value,
            gas: self.gas.to(),
            fees,
            input: self.input,
            access_list: self.access_list,
            signature: TxSignature {
                v,
                r: self.r,
                s: self.s,
            },
        }
    }
}

impl NodeLog {
    fn into_model(self, block_hash: B256, block_number: u64, position: usize) -> Log {
        Log {
            inner: alloy_primitives::Log::new_unchecked(self.address, self.topics, self.data),
            block_hash: Some(self.block_hash.unwrap_or(block_hash)),
            block_number: Some(self.block_number.map_or(block_number, |n| n.to())),
            block_timestamp: self.block_timestamp.map(|t| t.to()),
            transaction_hash: self.transaction_hash,
            transaction_index: self.transaction_index.map(|i| i.to()),
            log_index: Some(self.log_index.map_or(position as u64, |i| i.to())),
            removed: false,
        }
    }
}

impl NodeBlock {
    pub fn hash(&self) -> B256 {
        self.header.hash
    }

    /// Joins the block with its logs (from `eth_getLogs` by block hash).
    pub fn into_model(self, logs: Vec<NodeLog>) -> Arc<Block> {
        let hash = self.header.hash;
        let number = self.header.inner.number;
        Arc::new(Block {
            hash,
            header: self.header.inner,
            transactions: self
                .transactions
                .into_iter()
                .map(|tx| Arc::new(tx.into_model()))
                .collect(),
            logs: logs
                .into_iter()
                .enumerate()
                .map(|(i, log)| log.into_model(hash, number, i))
                .collect(),
        })
    }
}
