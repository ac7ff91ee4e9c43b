//! A signed transaction of any type, and the two shapes its RPC object takes:
//! geth's (`newPendingTransactions`, lookups) and BlockVision's (the bv
//! topics), by the rules docs/src/api.md fixes (Wire shapes).

use alloy_consensus::transaction::to_eip155_value;
use alloy_consensus::{Transaction as _, TxEnvelope};
use alloy_eips::eip2930::AccessList;
use alloy_eips::eip4844::DATA_GAS_PER_BLOB;
use alloy_eips::eip7702::SignedAuthorization;
use alloy_primitives::aliases::U8;
use alloy_primitives::{Address, B256, Bytes, U64, U128, U256};
use serde::{Deserialize, Serialize, Serializer};

/// How a transaction pays for gas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fees {
    /// Types 0 and 1 (and a chain's own types that state one price): a
    /// single gas price.
    GasPrice(u128),
    /// Types 2, 3 and 4: EIP-1559 fee caps.
    Dynamic {
        max_fee_per_gas: u128,
        max_priority_fee_per_gas: u128,
        /// The `gasPrice` the node stated where it saw the transaction
        /// (pending or mined): nodes differ on a pending one's (geth: the
        /// cap; anvil: the price at the current base fee), and what the
        /// node says, chainsieve says. `None` from the devnet: geth's rule.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stated_price: Option<u128>,
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
                ..
            } => max_fee_per_gas.min(base_fee.saturating_add(max_priority_fee_per_gas)),
        }
    }
}

/// What an EIP-4844 transaction adds: its bid for blob gas and the blobs it
/// carries, by versioned hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobFields {
    pub max_fee_per_blob_gas: u128,
    pub versioned_hashes: Vec<B256>,
}

/// One signed EIP-7702 authorization, in geth's JSON (`chainId`,
/// `address`, `nonce`, `yParity`, `r`, `s`). A type of the model's own:
/// alloy's flattens its fields, and a flattened struct does not read back
/// from MessagePack (the bus).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetCodeAuthorization {
    pub chain_id: U256,
    pub address: Address,
    pub nonce: U64,
    pub y_parity: U8,
    pub r: U256,
    pub s: U256,
}

impl SetCodeAuthorization {
    /// alloy's form, to recover its authority or rebuild its transaction.
    pub fn signed(&self) -> SignedAuthorization {
        let inner = alloy_eips::eip7702::Authorization {
            chain_id: self.chain_id,
            address: self.address,
            nonce: self.nonce.to(),
        };
        SignedAuthorization::new_unchecked(inner, self.y_parity.to(), self.r, self.s)
    }
}

impl From<&SignedAuthorization> for SetCodeAuthorization {
    fn from(signed: &SignedAuthorization) -> Self {
        Self {
            chain_id: signed.chain_id,
            address: signed.address,
            nonce: U64::from(signed.nonce),
            y_parity: U8::from(signed.y_parity()),
            r: signed.r(),
            s: signed.s(),
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
    /// `yParity` as the node stated it. Without one, types 1–4 show `v`
    /// as their parity (geth's rule) and other types show none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_parity: Option<bool>,
}

/// Members of a node's transaction object that this model has no field for
/// (a chain's own types: a deposit's `sourceHash` and `mint`, a fee
/// currency…), kept as the node's JSON text (`"a":1,"b":2`) and written back
/// as they came, so nothing the node says is lost.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OtherFields(Option<Box<str>>);

impl OtherFields {
    /// The members of `map`; none when it is empty.
    pub fn from_members(map: &serde_json::Map<String, serde_json::Value>) -> Self {
        if map.is_empty() {
            return Self(None);
        }
        let object = serde_json::to_string(map).expect("a JSON map serializes");
        // `{…}` less its braces.
        Self(Some(object[1..object.len() - 1].into()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The members' text length.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |members| members.len())
    }

    /// Adds the members to `object`, the text of a JSON object.
    fn append_to(&self, object: &mut String) {
        if let Some(members) = &self.0 {
            debug_assert!(object.ends_with('}'));
            object.pop();
            if !object.ends_with('{') {
                object.push(',');
            }
            object.push_str(members);
            object.push('}');
        }
    }
}

/// A signed transaction, independent of where it sits (pending or mined).
/// Its serde form is what a persisted log stores (docs/src/architecture.md,
/// The event log), not a wire shape: see [`Transaction::to_json`]. Fields
/// added since the first stored form default when absent, so older steps
/// still read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub hash: B256,
    /// EIP-2718 type: 0 legacy, 1 access list, 2 EIP-1559, 3 blob, 4
    /// set-code; a chain's own types keep their number.
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
    /// Present on typed transactions.
    pub access_list: Option<AccessList>,
    /// Present on blob transactions (type 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobFields>,
    /// Present on set-code transactions (type 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_list: Option<Vec<SetCodeAuthorization>>,
    pub signature: TxSignature,
    /// Whether geth's shape of it pending writes `"blockTimestamp": null`,
    /// as its source does: geth (and so the devnet) writes it, anvil leaves
    /// the member out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending_timestamp_null: bool,
    #[serde(default, skip_serializing_if = "OtherFields::is_empty")]
    pub other: OtherFields,
}

/// Whose rules a transaction's RPC object follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxShape {
    /// geth's: a pending transaction's block fields are `null`; every type
    /// carries `gasPrice` (a fee-capped type's cap while pending, the price
    /// it paid once mined); a mined one carries `blockTimestamp`.
    Geth,
    /// BlockVision's, for the bv topics: a pending transaction's block
    /// fields are `""`; fee-capped types carry no `gasPrice`; no
    /// `blockTimestamp`.
    Blockvision,
}

/// Where a transaction is, which decides its block fields on the wire.
#[derive(Clone, Copy, Debug)]
pub enum TxPosition {
    /// In the mempool.
    Pending,
    /// In a block.
    Mined {
        block_hash: B256,
        block_number: u64,
        index: u64,
        timestamp: u64,
        /// The block's base fee: what a fee-capped transaction paid follows
        /// from it.
        base_fee: Option<u64>,
    },
}

/// A block field of a transaction: `null`, `""` or a value.
#[derive(Debug)]
enum BlockField<T> {
    Null,
    Empty,
    Value(T),
}

impl<T> BlockField<T> {
    /// A pending transaction's block field in `shape`.
    fn pending(shape: TxShape) -> Self {
        match shape {
            TxShape::Geth => BlockField::Null,
            TxShape::Blockvision => BlockField::Empty,
        }
    }
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

/// A transaction in geth's RPC field order (`RPCTransaction`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TransactionJson<'a> {
    block_hash: BlockField<B256>,
    block_number: BlockField<U64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    block_timestamp: Option<BlockField<U64>>,
    from: Address,
    gas: U64,
    #[serde(skip_serializing_if = "Option::is_none")]
    gas_price: Option<U128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_fee_per_gas: Option<U128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_priority_fee_per_gas: Option<U128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_fee_per_blob_gas: Option<U128>,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    blob_versioned_hashes: Option<&'a [B256]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    authorization_list: Option<&'a [SetCodeAuthorization]>,
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
        let typed = tx_type != 0;
        let v = if typed {
            u64::from(signature.v())
        } else {
            u64::try_from(to_eip155_value(signature.v(), envelope.chain_id())).unwrap_or(u64::MAX)
        };
        let fees = match envelope.gas_price() {
            Some(price) => Fees::GasPrice(price),
            None => Fees::Dynamic {
                max_fee_per_gas: envelope.max_fee_per_gas(),
                max_priority_fee_per_gas: envelope.max_priority_fee_per_gas().unwrap_or_default(),
                stated_price: None,
            },
        };
        let blob = envelope.blob_versioned_hashes().map(|hashes| BlobFields {
            max_fee_per_blob_gas: envelope.max_fee_per_blob_gas().unwrap_or_default(),
            versioned_hashes: hashes.to_vec(),
        });
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
            access_list: typed.then(|| envelope.access_list().cloned().unwrap_or_default()),
            blob,
            authorization_list: envelope
                .authorization_list()
                .map(|list| list.iter().map(SetCodeAuthorization::from).collect()),
            signature: TxSignature {
                v,
                r: signature.r(),
                s: signature.s(),
                y_parity: typed.then(|| signature.v()),
            },
            pending_timestamp_null: true,
            other: OtherFields::default(),
        }
    }

    /// Heap bytes it keeps alive, roughly: a fixed size and its variable
    /// fields.
    pub fn approximate_bytes(&self) -> usize {
        256 + self.variable_bytes()
    }

    /// Heap bytes its variable fields hold, roughly.
    fn variable_bytes(&self) -> usize {
        let listed = self.access_list.as_ref().map_or(0, |list| {
            list.iter()
                .map(|item| 52 + 32 * item.storage_keys.len())
                .sum()
        });
        let blobs = self
            .blob
            .as_ref()
            .map_or(0, |b| 32 * b.versioned_hashes.len());
        let authorizations = self.authorization_list.as_ref().map_or(0, |list| {
            list.len() * std::mem::size_of::<SetCodeAuthorization>()
        });
        self.input.len() + listed + blobs + authorizations + self.other.len()
    }

    /// The blob gas it uses: [`DATA_GAS_PER_BLOB`] per blob it carries.
    pub fn blob_gas(&self) -> u64 {
        self.blob
            .as_ref()
            .map_or(0, |b| DATA_GAS_PER_BLOB * b.versioned_hashes.len() as u64)
    }

    /// The RPC object for this transaction at `position`, in `shape`;
    /// `removed` adds `"removed": true` (a mined transaction of an orphaned
    /// block).
    pub fn to_json(&self, shape: TxShape, position: TxPosition, removed: bool) -> String {
        let (block_hash, block_number, index, timestamp, paid) = match position {
            TxPosition::Pending => (
                BlockField::pending(shape),
                BlockField::pending(shape),
                BlockField::pending(shape),
                self.pending_timestamp_null.then_some(BlockField::Null),
                None,
            ),
            TxPosition::Mined {
                block_hash,
                block_number,
                index,
                timestamp,
                base_fee,
            } => (
                BlockField::Value(block_hash),
                BlockField::Value(U64::from(block_number)),
                BlockField::Value(U64::from(index)),
                Some(BlockField::Value(U64::from(timestamp))),
                base_fee,
            ),
        };
        let (gas_price, max_fee_per_gas, max_priority_fee_per_gas) = match self.fees {
            Fees::GasPrice(price) => (Some(price), None, None),
            Fees::Dynamic {
                max_fee_per_gas,
                max_priority_fee_per_gas,
                stated_price,
            } => {
                // The node's word; else geth's rule: the cap while pending
                // (or without a base fee), the price paid once mined.
                let price = stated_price.unwrap_or_else(|| {
                    paid.map_or(max_fee_per_gas, |base| {
                        self.fees.effective(u128::from(base))
                    })
                });
                (
                    (shape == TxShape::Geth).then_some(price),
                    Some(max_fee_per_gas),
                    Some(max_priority_fee_per_gas),
                )
            }
        };
        let y_parity = self.signature.y_parity.or_else(|| {
            (1..=4)
                .contains(&self.tx_type)
                .then_some(self.signature.v == 1)
        });
        let json = TransactionJson {
            block_hash,
            block_number,
            block_timestamp: timestamp.filter(|_| shape == TxShape::Geth),
            from: self.from,
            gas: U64::from(self.gas),
            gas_price: gas_price.map(U128::from),
            max_fee_per_gas: max_fee_per_gas.map(U128::from),
            max_priority_fee_per_gas: max_priority_fee_per_gas.map(U128::from),
            max_fee_per_blob_gas: self
                .blob
                .as_ref()
                .map(|b| U128::from(b.max_fee_per_blob_gas)),
            hash: self.hash,
            input: &self.input,
            nonce: U64::from(self.nonce),
            to: self.to,
            transaction_index: index,
            value: self.value,
            tx_type: U64::from(self.tx_type),
            access_list: self.access_list.as_ref(),
            chain_id: self.chain_id.map(U64::from),
            blob_versioned_hashes: self.blob.as_ref().map(|b| b.versioned_hashes.as_slice()),
            authorization_list: self.authorization_list.as_deref(),
            v: U64::from(self.signature.v),
            r: self.signature.r,
            s: self.signature.s,
            y_parity: y_parity.map(U64::from),
            removed,
        };
        let mut text =
            serde_json::to_string(&json).expect("transaction JSON has no fallible fields");
        self.other.append_to(&mut text);
        text
    }
}

#[cfg(any(test, feature = "test-utils"))]
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
            blob: None,
            authorization_list: None,
            signature: TxSignature {
                v: 27,
                r: U256::ZERO,
                s: U256::ZERO,
                y_parity: None,
            },
            pending_timestamp_null: false,
            other: OtherFields::default(),
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
                stated_price: None,
            },
            input: bytes!("a9059cbb"),
            access_list: Some(AccessList::default()),
            blob: None,
            authorization_list: None,
            signature: TxSignature {
                v: 1,
                r: U256::from(0xabc),
                s: U256::from(1),
                y_parity: Some(true),
            },
            pending_timestamp_null: false,
            other: OtherFields::default(),
        }
    }

    fn mined(base_fee: Option<u64>) -> TxPosition {
        TxPosition::Mined {
            block_hash: B256::repeat_byte(2),
            block_number: 16,
            index: 3,
            timestamp: 0x6553f100,
            base_fee,
        }
    }

    fn object(tx: &Transaction, shape: TxShape, position: TxPosition, removed: bool) -> Value {
        serde_json::from_str(&tx.to_json(shape, position, removed)).expect("json")
    }

    #[test]
    fn pending_transactions_in_both_shapes() {
        let tx = eip1559();
        let geth = object(&tx, TxShape::Geth, TxPosition::Pending, false);
        let bv = object(&tx, TxShape::Blockvision, TxPosition::Pending, false);
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
        assert_eq!(
            geth["gasPrice"],
            json!("0x6fc23ac00"),
            "the cap while pending"
        );
        assert!(bv.get("gasPrice").is_none(), "BlockVision: no gasPrice");
        assert_eq!(geth["yParity"], json!("0x1"));
        assert_eq!(geth["v"], json!("0x1"));
        assert_eq!(geth["r"], json!("0xabc"));
        assert_eq!(geth["accessList"], json!([]));
        for v in [&geth, &bv] {
            assert!(v.get("removed").is_none() && v.get("blockTimestamp").is_none());
        }
    }

    #[test]
    fn a_pending_timestamp_is_null_where_the_source_writes_it() {
        let anvil_like = eip1559();
        let geth_like = Transaction {
            pending_timestamp_null: true,
            ..eip1559()
        };
        let pending = |tx: &Transaction, shape| object(tx, shape, TxPosition::Pending, false);
        assert_eq!(
            pending(&geth_like, TxShape::Geth).get("blockTimestamp"),
            Some(&Value::Null)
        );
        assert!(
            pending(&anvil_like, TxShape::Geth)
                .get("blockTimestamp")
                .is_none()
        );
        assert!(
            pending(&geth_like, TxShape::Blockvision)
                .get("blockTimestamp")
                .is_none()
        );
    }

    /// The serde form (the persisted log's, and the bus's in MessagePack)
    /// reads back whole, every type's fields included.
    #[test]
    fn every_field_round_trips_through_json_and_message_pack() {
        let mut members = serde_json::Map::new();
        members.insert("sourceHash".into(), json!("0x01"));
        let full = Transaction {
            tx_type: 4,
            fees: Fees::Dynamic {
                max_fee_per_gas: 9,
                max_priority_fee_per_gas: 2,
                stated_price: Some(5),
            },
            blob: Some(BlobFields {
                max_fee_per_blob_gas: 3,
                versioned_hashes: vec![B256::repeat_byte(1)],
            }),
            authorization_list: Some(vec![SetCodeAuthorization {
                chain_id: U256::from(1),
                address: Address::repeat_byte(0xaa),
                nonce: U64::from(7),
                y_parity: U8::from(1),
                r: U256::from(2),
                s: U256::MAX,
            }]),
            pending_timestamp_null: true,
            other: OtherFields::from_members(&members),
            ..eip1559()
        };
        let json: Transaction =
            serde_json::from_str(&serde_json::to_string(&full).expect("json")).expect("reads");
        assert_eq!(json, full);
        let packed = rmp_serde::to_vec_named(&full).expect("packs");
        let unpacked: Transaction = rmp_serde::from_slice(&packed).expect("unpacks");
        assert_eq!(unpacked, full);
        // What the log's memory bound counts grows with every list.
        assert_eq!(
            full.variable_bytes() - eip1559().variable_bytes(),
            32 + std::mem::size_of::<SetCodeAuthorization>() + full.other.len()
        );
    }

    #[test]
    fn mined_fee_capped_transactions_show_the_price_paid_in_geths_shape() {
        let tx = eip1559();
        let geth = object(&tx, TxShape::Geth, mined(Some(7)), false);
        assert_eq!(geth["gasPrice"], json!("0x8"), "base fee 7 + tip 1");
        assert_eq!(geth["blockTimestamp"], json!("0x6553f100"));
        assert_eq!(geth["blockNumber"], json!("0x10"));
        let no_base_fee = object(&tx, TxShape::Geth, mined(None), false);
        assert_eq!(no_base_fee["gasPrice"], json!("0x6fc23ac00"));
        let stated = Transaction {
            fees: Fees::Dynamic {
                max_fee_per_gas: 30_000_000_000,
                max_priority_fee_per_gas: 1,
                stated_price: Some(5),
            },
            ..eip1559()
        };
        for position in [TxPosition::Pending, mined(Some(7))] {
            let v = object(&stated, TxShape::Geth, position, false);
            assert_eq!(v["gasPrice"], json!("0x5"), "the node's word wins");
        }
        let bv = object(&tx, TxShape::Blockvision, mined(Some(7)), true);
        assert!(bv.get("gasPrice").is_none() && bv.get("blockTimestamp").is_none());
        assert_eq!(bv["removed"], json!(true));
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
                y_parity: None,
            },
            ..eip1559()
        };
        for shape in [TxShape::Geth, TxShape::Blockvision] {
            let v = object(&tx, shape, mined(Some(3)), true);
            assert_eq!(v["gasPrice"], json!("0x7"));
            assert!(
                v.get("maxFeePerGas").is_none()
                    && v.get("yParity").is_none()
                    && v.get("accessList").is_none()
            );
            assert_eq!(v["v"], json!("0x25"));
            assert_eq!(v["transactionIndex"], json!("0x3"));
            assert_eq!(v["removed"], json!(true));
        }
    }

    #[test]
    fn blob_and_set_code_fields_and_unknown_members_are_written() {
        let authorization_json = json!({
            "chainId": "0x1",
            "address": "0x00000000000000000000000000000000000000aa",
            "nonce": "0x5",
            "yParity": "0x1",
            "r": "0x2",
            "s": "0x3",
        });
        let authorization: SetCodeAuthorization =
            serde_json::from_value(authorization_json.clone()).expect("authorization");
        let blob = Transaction {
            tx_type: 3,
            blob: Some(BlobFields {
                max_fee_per_blob_gas: 9,
                versioned_hashes: vec![B256::repeat_byte(1)],
            }),
            ..eip1559()
        };
        let set_code = Transaction {
            tx_type: 4,
            authorization_list: Some(vec![authorization]),
            ..eip1559()
        };
        let v = object(&blob, TxShape::Geth, TxPosition::Pending, false);
        assert_eq!(v["maxFeePerBlobGas"], json!("0x9"));
        assert_eq!(
            v["blobVersionedHashes"],
            json!([B256::repeat_byte(1).to_string()])
        );
        let v = object(&set_code, TxShape::Blockvision, TxPosition::Pending, false);
        assert_eq!(v["authorizationList"], json!([authorization_json]));

        let mut members = serde_json::Map::new();
        members.insert("sourceHash".into(), json!("0x01"));
        members.insert("isSystemTx".into(), json!(true));
        let deposit = Transaction {
            tx_type: 0x7e,
            fees: Fees::GasPrice(0),
            access_list: None,
            signature: TxSignature {
                v: 0,
                r: U256::ZERO,
                s: U256::ZERO,
                y_parity: None,
            },
            other: OtherFields::from_members(&members),
            ..eip1559()
        };
        let v = object(&deposit, TxShape::Geth, mined(Some(1)), true);
        assert_eq!(
            (&v["sourceHash"], &v["isSystemTx"], &v["removed"]),
            (&json!("0x01"), &json!(true), &json!(true))
        );
        assert!(v.get("yParity").is_none(), "not a type geth gives a parity");
        assert!(OtherFields::from_members(&serde_json::Map::new()).is_empty());
    }
}
