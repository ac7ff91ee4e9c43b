//! A node's JSON objects (blocks, transactions, logs) read straight into the
//! [`model`](crate) types, each parsed once.
//!
//! Nodes differ: BNB Chain and Polygon add system transactions (no
//! signature, or type `0x7f` on Polygon) and extra header fields, and new
//! transaction types appear. Nothing here refuses a block for that, and
//! nothing the node says is lost: every field of types 0–4 is read, absent
//! signature parts read as zero, an unknown type keeps its number, members
//! the model has no field for are kept as the node's text, and a block's
//! own members are kept for block lookups. A transaction or log that cannot be
//! read at all (a malformed object) is skipped alone, logged and counted
//! ([`skipped_objects`], exported on `/metrics`), rather than stopping the
//! chain.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_eips::eip2930::AccessList;
use alloy_primitives::{Address, B256, Bytes, U64, U128, U256};
use alloy_rpc_types_eth::Log;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use chainsieve_filter_core::Source;

use super::StreamEvent;
use super::{BlobFields, Block, Fees, OtherFields, SetCodeAuthorization, Transaction, TxSignature};

/// Transactions and logs skipped because they could not be read, by every
/// node source of the process.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Malformed transactions and logs skipped since the process started.
pub fn skipped_objects() -> u64 {
    SKIPPED.load(Ordering::Relaxed)
}

/// `eth_getBlockBy*` with full transactions, read member by member: the
/// header by alloy's RPC header type, each transaction kept as raw text and
/// read into [`NodeTransaction`] alone (so one bad object costs only
/// itself), and every other member kept as the node's text, which block
/// lookups answer with ([`Block::lookup`]).
#[derive(Debug)]
pub struct NodeBlock {
    pub header: alloy_rpc_types_eth::Header,
    transactions: Vec<Box<RawValue>>,
    /// The node's members but `transactions`, as a JSON object.
    lookup: Box<str>,
}

impl<'de> Deserialize<'de> for NodeBlock {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut members = BTreeMap::<String, Box<RawValue>>::deserialize(deserializer)?;
        // A block without its list is a truncated answer, not an empty
        // block: refused, so the block is asked for again.
        let list = members
            .remove("transactions")
            .ok_or_else(|| D::Error::missing_field("transactions"))?;
        let transactions = serde_json::from_str(list.get()).map_err(D::Error::custom)?;
        let lookup = serde_json::to_string(&members).map_err(D::Error::custom)?;
        let header = serde_json::from_str(&lookup).map_err(D::Error::custom)?;
        Ok(Self {
            header,
            transactions,
            lookup: lookup.into(),
        })
    }
}

/// A transaction object, pending or mined: every field of types 0–4 read
/// into the model, every other member kept as it came ([`OtherFields`]).
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
    #[serde(default)]
    max_fee_per_blob_gas: Option<U128>,
    /// `data` on a few old nodes.
    #[serde(alias = "data")]
    input: Bytes,
    #[serde(default)]
    access_list: Option<AccessList>,
    #[serde(default)]
    blob_versioned_hashes: Option<Vec<B256>>,
    #[serde(default)]
    authorization_list: Option<Vec<SetCodeAuthorization>>,
    #[serde(default)]
    v: Option<U64>,
    #[serde(default)]
    y_parity: Option<U64>,
    /// System transactions carry no signature.
    #[serde(default)]
    r: U256,
    #[serde(default)]
    s: U256,
    /// Where the transaction sits, and the price it paid: the wire shapes
    /// write these from the block (docs/src/api.md, Wire shapes), so they
    /// are read past here, not kept.
    #[serde(default, rename = "blockHash")]
    _block_hash: IgnoredAny,
    #[serde(default, rename = "blockNumber")]
    _block_number: IgnoredAny,
    /// Present (and `null`) on a pending one from geth.
    #[serde(default, deserialize_with = "present")]
    block_timestamp: Option<Option<U64>>,
    #[serde(default, rename = "transactionIndex")]
    _transaction_index: IgnoredAny,
    #[serde(default, rename = "removed")]
    _removed: IgnoredAny,
    /// Every member not named above.
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

/// The answer of `eth_getBlockReceipts`: each receipt's members, their
/// values as the node wrote them.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct NodeReceipts(Vec<BTreeMap<String, Box<RawValue>>>);

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
                stated_price: self.gas_price.map(|p| p.to()),
            },
            _ => Fees::GasPrice(self.gas_price.map_or(0, |p| p.to())),
        };
        let v = self.v.or(self.y_parity).map_or(0, |v| v.to());
        let blob = match (self.max_fee_per_blob_gas, self.blob_versioned_hashes) {
            (None, None) => None,
            (max_fee, hashes) => Some(BlobFields {
                max_fee_per_blob_gas: max_fee.map_or(0, |m| m.to()),
                versioned_hashes: hashes.unwrap_or_default(),
            }),
        };
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
            blob,
            authorization_list: self.authorization_list,
            signature: TxSignature {
                v,
                r: self.r,
                s: self.s,
                y_parity: self.y_parity.map(|parity| parity != U64::ZERO),
            },
            pending_timestamp_null: self.block_timestamp == Some(None),
            other: OtherFields::from_members(&self.other),
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

    pub fn number(&self) -> u64 {
        self.header.inner.number
    }

    /// Joins the block with its receipts (`eth_getBlockReceipts` by block
    /// hash): its logs are theirs, in order, and each receipt's other
    /// members are kept as the node wrote them ([`Block::receipts`]).
    pub fn with_receipts(self, receipts: NodeReceipts) -> Result<Arc<Block>, serde_json::Error> {
        let mut logs = Vec::new();
        let mut kept = Vec::with_capacity(receipts.0.len());
        for mut receipt in receipts.0 {
            if let Some(of_it) = receipt.remove("logs") {
                logs.extend(serde_json::from_str::<Vec<Box<RawValue>>>(of_it.get())?);
            }
            // Made again of the logs (`Block::receipt_json`).
            receipt.remove("logsBloom");
            kept.push(serde_json::to_string(&receipt)?.into_boxed_str());
        }
        let mut block = self.into_model(&logs);
        Arc::get_mut(&mut block)
            .expect("a block just made is not shared")
            .receipts = Some(kept.into());
        Ok(block)
    }

    /// Joins the block with its logs (kept raw for the same reason as the
    /// transactions).
    pub fn into_model(self, logs: &[Box<RawValue>]) -> Arc<Block> {
        let hash = self.header.hash;
        let number = self.header.inner.number;
        let transactions = readable::<NodeTransaction>(&self.transactions, "transaction", number)
            .map(|tx| Arc::new(tx.into_model()))
            .collect();
        let logs = readable::<NodeLog>(logs, "log", number)
            .enumerate()
            .map(|(i, log)| log.into_model(hash, number, i))
            .collect();
        Arc::new(Block {
            hash,
            header: self.header.inner,
            transactions,
            logs,
            lookup: Some(self.lookup),
            gas_used: None,
            receipts: None,
        })
    }
}

/// One event in its wire shape (a notification's `result`, or the node's
/// object) read as an event of `source`: a transaction (pending or mined),
/// a header, a log, or a lifecycle turn. A mined transaction or a log sits in a block of its
/// own holding just it, numbered and hashed as the object says; `removed`
/// is read where present. The component harness reads its event files so.
pub fn stream_event(source: Source, json: &str) -> Result<StreamEvent, serde_json::Error> {
    /// The block fields of a mined transaction or a log.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Placement {
        #[serde(default)]
        block_hash: Option<B256>,
        #[serde(default)]
        block_number: Option<U64>,
        #[serde(default)]
        removed: bool,
    }
    let alone = |placement: &Placement, transactions, logs| {
        Arc::new(Block {
            hash: placement.block_hash.unwrap_or_default(),
            header: alloy_consensus::Header {
                number: placement.block_number.map_or(0, |n| n.to()),
                ..Default::default()
            },
            transactions,
            logs,
            lookup: None,
            gas_used: None,
            receipts: None,
        })
    };
    Ok(match source {
        Source::PendingTransactions => StreamEvent::Pending(Arc::new(
            serde_json::from_str::<NodeTransaction>(json)?.into_model(),
        )),
        Source::MinedTransactions => {
            let placement: Placement = serde_json::from_str(json)?;
            let tx = serde_json::from_str::<NodeTransaction>(json)?.into_model();
            StreamEvent::Mined {
                block: alone(&placement, vec![Arc::new(tx)], Vec::new()),
                index: 0,
                removed: placement.removed,
            }
        }
        Source::Heads => {
            let header: alloy_rpc_types_eth::Header = serde_json::from_str(json)?;
            StreamEvent::Head(Arc::new(Block {
                hash: header.hash,
                header: header.inner,
                transactions: Vec::new(),
                logs: Vec::new(),
                lookup: None,
                gas_used: None,
                receipts: None,
            }))
        }
        Source::Logs => {
            let placement: Placement = serde_json::from_str(json)?;
            let log = serde_json::from_str::<NodeLog>(json)?;
            let hash = placement.block_hash.unwrap_or_default();
            let number = placement.block_number.map_or(0, |n| n.to());
            StreamEvent::Log {
                block: alone(
                    &placement,
                    Vec::new(),
                    vec![log.into_model(hash, number, 0)],
                ),
                index: 0,
                removed: placement.removed,
            }
        }
        Source::Lifecycle => StreamEvent::Turn {
            turns: Arc::new([crate::lifecycle::Turn::from_json(json)?]),
            index: 0,
        },
    })
}

/// Logs of `eth_getLogs` over a block range, each keeping its own block
/// fields; unreadable ones, or ones without a block, are skipped (logged,
/// counted).
pub fn read_logs(objects: &[Box<RawValue>]) -> Vec<Log> {
    readable::<NodeLog>(objects, "log", 0)
        .filter_map(|log| {
            let (hash, number) = (log.block_hash?, log.block_number?.to::<u64>());
            Some(log.into_model(hash, number, 0))
        })
        .collect()
}

/// A member that may be `null`: `Some(None)` when it is, `None` (by
/// `default`) when it is absent.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// Reads each object as `T`, skipping (logged, counted) those that fail.
pub fn readable<'a, T: serde::de::DeserializeOwned>(
    objects: &'a [Box<RawValue>],
    what: &'static str,
    block: u64,
) -> impl Iterator<Item = T> + 'a {
    objects
        .iter()
        .filter_map(move |raw| match serde_json::from_str(raw.get()) {
            Ok(value) => Some(value),
            Err(error) => {
                SKIPPED.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(block, %error, "skipping an unreadable {what}");
                None
            }
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn header() -> serde_json::Value {
        json!({
            "hash": "0x9f6c8d8e4a7f0c2a1c2f1d7d0f6b1a3c4e5d6f708192a3b4c5d6e7f8091a2b3c",
            "parentHash": "0x1111111111111111111111111111111111111111111111111111111111111111",
            "sha3Uncles": "0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347",
            "miner": "0x4838b106fce9647bdf1e7877bf73ce8b0bad5f97",
            "stateRoot": "0x2222222222222222222222222222222222222222222222222222222222222222",
            "transactionsRoot": "0x3333333333333333333333333333333333333333333333333333333333333333",
            "receiptsRoot": "0x4444444444444444444444444444444444444444444444444444444444444444",
            "logsBloom": format!("0x{}", "00".repeat(256)),
            "difficulty": "0x0",
            "number": "0x10",
            "gasLimit": "0x1c9c380",
            "gasUsed": "0x5208",
            "timestamp": "0x6553f100",
            "extraData": "0x",
            "mixHash": "0x5555555555555555555555555555555555555555555555555555555555555555",
            "nonce": "0x0000000000000000",
            "baseFeePerGas": "0x7",
            "size": "0x220",
            // A field this server does not know (BNB Chain, Polygon add some).
            "milliTimestamp": "0x18bce5a4000",
        })
    }

    fn tx(hash_byte: u8, extra: serde_json::Value) -> serde_json::Value {
        let mut tx = json!({
            "hash": format!("0x{}", format!("{hash_byte:02x}").repeat(32)),
            "nonce": "0x1",
            "from": "0x00000000000000000000000000000000000000aa",
            "to": "0x00000000000000000000000000000000000000bb",
            "value": "0xde0b6b3a7640000",
            "gas": "0x5208",
            "input": "0xa9059cbb",
            "blockHash": "0x9f6c8d8e4a7f0c2a1c2f1d7d0f6b1a3c4e5d6f708192a3b4c5d6e7f8091a2b3c",
            "blockNumber": "0x10",
            "transactionIndex": "0x0",
        });
        for (k, v) in extra.as_object().expect("object") {
            tx[k] = v.clone();
        }
        tx
    }

    fn raw(values: &[serde_json::Value]) -> Vec<Box<RawValue>> {
        values
            .iter()
            .map(|v| RawValue::from_string(v.to_string()).expect("JSON"))
            .collect()
    }

    #[test]
    fn blocks_keep_every_readable_transaction_whatever_its_type() {
        let mut block = header();
        block["transactions"] = json!([
            tx(
                1,
                json!({ "type": "0x0", "gasPrice": "0x3b9aca00", "v": "0x25", "r": "0x1", "s": "0x2", "chainId": "0x1" })
            ),
            tx(
                2,
                json!({ "type": "0x2", "chainId": "0x1", "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x1", "accessList": [], "v": "0x1", "yParity": "0x1", "r": "0x1", "s": "0x2" })
            ),
            // A blob transaction keeps its blob fields.
            tx(
                3,
                json!({ "type": "0x3", "chainId": "0x1", "maxFeePerGas": "0x2", "maxPriorityFeePerGas": "0x1", "maxFeePerBlobGas": "0x1", "blobVersionedHashes": [format!("0x01{}", "aa".repeat(31))], "accessList": [], "yParity": "0x0", "r": "0x1", "s": "0x2" })
            ),
            // A system transaction: no signature, no type field, gas price 0.
            tx(4, json!({ "gasPrice": "0x0" })),
            // A type this server has never heard of keeps its number.
            tx(
                5,
                json!({ "type": "0x7e", "sourceHash": "0x01", "mint": "0x0" })
            ),
            // Unreadable (no hash): skipped alone.
            json!({ "from": "0x00000000000000000000000000000000000000aa" }),
        ]);
        let logs = raw(&[
            json!({
                "address": "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48",
                "topics": ["0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"],
                "data": "0x01",
                "logIndex": "0x0",
                "transactionHash": format!("0x{}", "01".repeat(32)),
                "transactionIndex": "0x0",
                "removed": false,
            }),
            json!({ "address": "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", "topics": "not a list" }),
        ]);
        let skipped = skipped_objects();
        let node: NodeBlock = serde_json::from_value(block).expect("block reads");
        let block = node.into_model(&logs);
        assert!(skipped_objects() >= skipped + 2);

        assert_eq!(block.number(), 16);
        assert_eq!(block.header.base_fee_per_gas, Some(7));
        let types: Vec<u8> = block.transactions.iter().map(|t| t.tx_type).collect();
        assert_eq!(types, vec![0, 2, 3, 0, 0x7e]);
        assert_eq!(block.transactions[0].fees, Fees::GasPrice(1_000_000_000));
        assert_eq!(block.transactions[0].signature.v, 0x25);
        assert_eq!(
            block.transactions[1].fees,
            Fees::Dynamic {
                max_fee_per_gas: 2_000_000_000,
                max_priority_fee_per_gas: 1,
                stated_price: None,
            }
        );
        assert_eq!(block.transactions[1].signature.v, 1);
        assert_eq!(block.transactions[3].signature.r, U256::ZERO);
        assert_eq!(
            block.transactions[4].input.as_ref(),
            &[0xa9, 0x05, 0x9c, 0xbb]
        );
        let blob = block.transactions[2].blob.as_ref().expect("blob fields");
        assert_eq!(blob.max_fee_per_blob_gas, 1);
        assert_eq!(blob.versioned_hashes[0][0], 1);
        // Members of an unknown type come back as the node sent them; the
        // block fields are the wire shape's to write.
        let unknown: serde_json::Value = serde_json::from_str(&block.transactions[4].to_json(
            crate::TxShape::Geth,
            crate::TxPosition::Pending,
            false,
        ))
        .expect("json");
        assert_eq!(
            (&unknown["sourceHash"], &unknown["mint"]),
            (&json!("0x01"), &json!("0x0"))
        );
        assert!(
            block.transactions[0].other.is_empty(),
            "no member of type 0 is unknown"
        );
        // The block's own members answer lookups, the node's `size` with them.
        let lookup: serde_json::Value =
            serde_json::from_str(block.block_json(false).expect("lookup").get()).expect("json");
        assert_eq!(lookup["size"], json!("0x220"));
        assert_eq!(lookup["milliTimestamp"], json!("0x18bce5a4000"));
        assert_eq!(lookup["transactions"].as_array().map(Vec::len), Some(5));

        assert_eq!(block.logs.len(), 1, "the unreadable log is skipped");
        let log = &block.logs[0];
        assert_eq!(log.block_hash, Some(block.hash), "block fields filled in");
        assert_eq!(log.block_number, Some(16));
        assert_eq!(log.log_index, Some(0));
    }

    #[test]
    fn a_header_missing_a_required_field_is_an_error() {
        let mut block = header();
        block.as_object_mut().expect("object").remove("parentHash");
        block["transactions"] = json!([]);
        assert!(serde_json::from_value::<NodeBlock>(block).is_err());
        let truncated = header();
        let error = serde_json::from_value::<NodeBlock>(truncated).expect_err("no list");
        assert!(error.to_string().contains("transactions"), "{error}");
    }

    #[test]
    fn a_pending_timestamp_is_kept_as_the_node_writes_it() {
        let pending = |extra| {
            serde_json::from_value::<NodeTransaction>(tx(1, extra))
                .expect("reads")
                .into_model()
        };
        assert!(pending(json!({ "blockTimestamp": null })).pending_timestamp_null);
        assert!(!pending(json!({})).pending_timestamp_null);
        assert!(pending(json!({ "blockTimestamp": "0x5" })).other.is_empty());
    }
}
