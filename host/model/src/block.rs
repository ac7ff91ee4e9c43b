//! A block with everything the streams need, and its RPC objects: the
//! header `newHeads` sends, the block lookups answer, its transactions and
//! logs.

use std::sync::Arc;

use alloy_consensus::Header;
use alloy_primitives::{B256, Bloom, U64, U128, U256};
use alloy_rpc_types_eth::Log;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use super::{Transaction, TxPosition, TxShape};

/// A canonical (or orphaned) block. Its serde form is what a persisted log
/// stores, not a wire shape.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Block {
    pub hash: B256,
    pub header: Header,
    pub transactions: Vec<Arc<Transaction>>,
    /// Every log of the block, in order, with its block fields filled in.
    pub logs: Vec<Log>,
    /// The block's object as `eth_getBlockBy*` answers it, less its
    /// `transactions`: on a node chain the node's own members (its `size`,
    /// `totalDifficulty`, `withdrawals`, a chain's own fields), so an
    /// answer from the window is the node's; the devnet's otherwise. `None`
    /// where no source gave one (a step stored by an older chainsieve, the
    /// harness's events): the node answers lookups of that block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookup: Option<Box<str>>,
    /// The gas each transaction used, in order, where the source says it
    /// with the block: the devnet's, which answers receipts itself, from
    /// the window and from its archive (docs/src/api.md, Devnet
    /// transactions). `None` from a node, whose receipts are its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gas_used: Option<Box<[u64]>>,
    /// Each transaction's receipt, in order, as its node answered it
    /// (`eth_getBlockReceipts`), less its `logs` and `logsBloom`: those are
    /// the block's [`logs`](Self::logs) of it and the bloom they make, so a
    /// log is held once ([`Block::receipt_json`] puts them back). `None`
    /// from the devnet, whose receipts are made of
    /// [`gas_used`](Self::gas_used), and from a step stored by an older
    /// chainsieve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipts: Option<Box<[Box<str>]>>,
}

/// A header in geth's shape: every consensus field plus `hash`.
#[derive(Serialize)]
struct HeaderJson<'a> {
    hash: B256,
    #[serde(flatten)]
    header: &'a Header,
}

/// What the devnet's block lookups add to the header: an execution block's
/// members in geth's shape (no uncles, no withdrawals).
#[derive(Serialize)]
struct LookupJson<'a> {
    #[serde(flatten)]
    header: HeaderJson<'a>,
    size: U64,
    uncles: [B256; 0],
    #[serde(skip_serializing_if = "Option::is_none")]
    withdrawals: Option<[(); 0]>,
}

impl Block {
    pub fn number(&self) -> u64 {
        self.header.number
    }

    pub fn parent_hash(&self) -> B256 {
        self.header.parent_hash
    }

    /// Heap bytes it keeps alive, roughly: fixed sizes per header,
    /// transaction and log plus their variable data (its lookup members
    /// among it), for the memory bounds of what keeps blocks.
    pub fn approximate_bytes(&self) -> usize {
        768 + self.lookup.as_deref().map_or(0, str::len)
            + self.gas_used.as_deref().map_or(0, |gas| 8 * gas.len())
            + self
                .receipts
                .as_deref()
                .map_or(0, |receipts| receipts.iter().map(|r| 16 + r.len()).sum())
            + self
                .transactions
                .iter()
                .map(|tx| tx.approximate_bytes())
                .sum::<usize>()
            + self
                .logs
                .iter()
                .map(|log| 192 + 32 * log.topics().len() + log.data().data.len())
                .sum::<usize>()
    }

    /// The [`lookup`](Self::lookup) members of a block of the devnet's,
    /// whose whole RLP encoding is `size` bytes long.
    pub fn devnet_lookup(hash: B256, header: &Header, size: usize) -> Box<str> {
        let json = LookupJson {
            header: HeaderJson { hash, header },
            size: U64::from(size),
            uncles: [],
            withdrawals: header.withdrawals_root.map(|_| []),
        };
        serde_json::to_string(&json)
            .expect("block JSON has no fallible fields")
            .into()
    }

    /// The header object sent to `newHeads` subscribers.
    pub fn header_json(&self) -> String {
        let json = HeaderJson {
            hash: self.hash,
            header: &self.header,
        };
        serde_json::to_string(&json).expect("header JSON has no fallible fields")
    }

    /// The object of `eth_getBlockByNumber`/`ByHash`: transaction hashes,
    /// or full transactions when `full`; `None` without
    /// [`lookup`](Self::lookup) members, or where stored text (read back
    /// from a file or the bus) is not JSON.
    pub fn block_json(&self, full: bool) -> Option<Box<RawValue>> {
        let lookup = self.lookup.as_deref()?;
        let transactions = if full {
            let objects: Vec<Box<RawValue>> = (0..self.transactions.len())
                .map(|i| RawValue::from_string(self.transaction_json(i, TxShape::Geth, false)).ok())
                .collect::<Option<_>>()?;
            serde_json::to_string(&objects)
        } else {
            let hashes: Vec<B256> = self.transactions.iter().map(|tx| tx.hash).collect();
            serde_json::to_string(&hashes)
        }
        .expect("a list of hashes or objects serializes");
        // `{…}` with `"transactions":[…]` added before its brace.
        let members = lookup.strip_suffix('}')?;
        let separator = if members.ends_with('{') { "" } else { "," };
        RawValue::from_string(format!(
            "{members}{separator}\"transactions\":{transactions}}}"
        ))
        .ok()
    }

    /// The block's base fee per gas (0 before EIP-1559).
    pub fn base_fee(&self) -> u128 {
        u128::from(self.header.base_fee_per_gas.unwrap_or(0))
    }

    /// What a blob gas cost in this block (EIP-4844's price for its excess
    /// blob gas); `None` before blobs.
    pub fn blob_gas_price(&self) -> Option<u128> {
        self.header
            .excess_blob_gas
            .map(alloy_eips::eip4844::calc_blob_gasprice)
    }

    /// What transaction `index` paid for `gas_used` gas and its blobs.
    pub fn fee(&self, index: usize, gas_used: u64) -> U256 {
        let tx = &self.transactions[index];
        let blob_fee = U256::from(tx.blob_gas()) * U256::from(self.blob_gas_price().unwrap_or(0));
        U256::from(gas_used) * U256::from(tx.fees.effective(self.base_fee())) + blob_fee
    }

    /// Where transaction `index` of this block sits.
    pub fn position(&self, index: usize) -> TxPosition {
        TxPosition::Mined {
            block_hash: self.hash,
            block_number: self.number(),
            index: index as u64,
            timestamp: self.header.timestamp,
            base_fee: self.header.base_fee_per_gas,
        }
    }

    /// Transaction `index` of this block as a mined RPC object in `shape`.
    pub fn transaction_json(&self, index: usize, shape: TxShape, removed: bool) -> String {
        self.transactions[index].to_json(shape, self.position(index), removed)
    }

    /// Transaction `index`'s receipt as `eth_getTransactionReceipt`
    /// answers it, flagged `removed` when re-sent after a reorg: the node's
    /// with its logs put back, or the devnet's made of the gas its
    /// transactions used; `None` for a block with neither.
    pub fn receipt_json(&self, index: usize, removed: bool) -> Option<String> {
        let tx = self.transactions.get(index)?;
        // A block's logs are in transaction order: its own are one run.
        let of = |log: &Log| log.transaction_index.unwrap_or(u64::MAX);
        let first = self.logs.partition_point(|log| of(log) < index as u64);
        let last = self.logs.partition_point(|log| of(log) <= index as u64);
        let mut bloom = Bloom::default();
        let mut logs = Vec::with_capacity(last - first);
        for at in first..last {
            bloom.accrue_log(&self.logs[at].inner);
            logs.push(self.log_json(at, removed));
        }
        let logs = format!("[{}]", logs.join(","));
        let members = match (self.receipts.as_deref(), self.gas_used.as_deref()) {
            (Some(receipts), _) => receipts.get(index)?.strip_suffix('}')?.to_string(),
            (None, Some(gas)) => {
                let gas_used = *gas.get(index)?;
                let cumulative: u64 = gas[..=index].iter().sum();
                let mut receipt = json!({
                    "transactionHash": tx.hash,
                    "transactionIndex": U64::from(index),
                    "blockHash": self.hash,
                    "blockNumber": U64::from(self.number()),
                    "from": tx.from,
                    "to": tx.to,
                    "contractAddress": tx.to.is_none().then(|| tx.from.create(tx.nonce)),
                    "cumulativeGasUsed": U64::from(cumulative),
                    "gasUsed": U64::from(gas_used),
                    "effectiveGasPrice": U128::from(tx.fees.effective(self.base_fee())),
                    "status": "0x1",
                    "type": U64::from(tx.tx_type),
                });
                // geth's receipt of a blob transaction adds what its blobs cost.
                if tx.blob.is_some() {
                    receipt["blobGasUsed"] = json!(U64::from(tx.blob_gas()));
                    receipt["blobGasPrice"] = json!(U128::from(self.blob_gas_price().unwrap_or(0)));
                }
                let text = receipt.to_string();
                text.strip_suffix('}')?.to_string()
            }
            (None, None) => return None,
        };
        let bloom = serde_json::to_string(&bloom).expect("a bloom serializes");
        let separator = if members.ends_with('{') { "" } else { "," };
        let removed = if removed { ",\"removed\":true" } else { "" };
        Some(format!(
            "{members}{separator}\"logs\":{logs},\"logsBloom\":{bloom}{removed}}}"
        ))
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

#[cfg(any(test, feature = "test-utils"))]
impl Block {
    /// Block `number` of branch `branch` (its hash tells both), child of
    /// `parent`, holding [`Transaction::fixture`]s of `txs`: for tests of
    /// how blocks chain and reorganise.
    pub fn fixture(number: u64, branch: u8, parent: B256, txs: &[B256]) -> Self {
        let mut hash = [branch; 32];
        hash[..8].copy_from_slice(&number.to_be_bytes());
        Self {
            hash: B256::from(hash),
            header: Header {
                number,
                parent_hash: parent,
                ..Default::default()
            },
            transactions: txs
                .iter()
                .map(|hash| Arc::new(Transaction::fixture(*hash)))
                .collect(),
            logs: Vec::new(),
            lookup: None,
            gas_used: None,
            receipts: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn block(lookup: Option<Box<str>>) -> Block {
        let header = Header {
            number: 5,
            timestamp: 9,
            base_fee_per_gas: Some(2),
            ..Header::default()
        };
        Block {
            hash: B256::repeat_byte(7),
            header,
            transactions: vec![Arc::new(Transaction::fixture(B256::repeat_byte(1)))],
            logs: Vec::new(),
            lookup,
            gas_used: None,
            receipts: None,
        }
    }

    #[test]
    fn lookups_are_the_sources_members_and_the_transactions() {
        let node =
            r#"{"hash":"0x07","size":"0x37c","totalDifficulty":"0x0","milliTimestamp":"0x1"}"#;
        let block = block(Some(node.into()));
        let hashes: Value =
            serde_json::from_str(block.block_json(false).expect("lookup").get()).expect("json");
        assert_eq!(
            hashes,
            json!({
                "hash": "0x07", "size": "0x37c", "totalDifficulty": "0x0", "milliTimestamp": "0x1",
                "transactions": [B256::repeat_byte(1).to_string()],
            })
        );
        let full: Value =
            serde_json::from_str(block.block_json(true).expect("lookup").get()).expect("json");
        let tx = &full["transactions"][0];
        assert_eq!(
            (
                &tx["blockNumber"],
                &tx["blockTimestamp"],
                &tx["transactionIndex"]
            ),
            (&json!("0x5"), &json!("0x9"), &json!("0x0"))
        );
        assert!(self::block(None).block_json(false).is_none());
        assert!(
            self::block(Some("{\"hash\": damaged".into()))
                .block_json(true)
                .is_none(),
            "damaged stored text is no answer, not a panic"
        );
    }

    #[test]
    fn the_devnets_lookup_is_the_header_with_the_blocks_size() {
        let header = Header {
            withdrawals_root: Some(B256::ZERO),
            ..Header::default()
        };
        let lookup: Value =
            serde_json::from_str(&Block::devnet_lookup(B256::ZERO, &header, 0x37c)).expect("json");
        assert_eq!(lookup["size"], json!("0x37c"));
        assert_eq!(lookup["withdrawals"], json!([]));
        assert_eq!(lookup["uncles"], json!([]));
        assert_eq!(lookup["parentHash"], json!(B256::ZERO.to_string()));
    }
}
