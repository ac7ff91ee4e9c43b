//! Checks that a block read from a node is self-consistent before it enters
//! the log: its header hashes to its hash, its transactions (re-encoded from
//! the model's fields) hash to their hashes and to the header's transactions
//! root, and its logs are the block's and match the header's logs bloom.
//!
//! A node that answers with a truncated, mixed-up or tampered block (or a
//! reader that lost a field) is caught here, not by subscribers. What the
//! header commits to but the model does not hold (receipts, withdrawals,
//! state) is not checked: see [`verify`].

use std::sync::Arc;

use alloy_consensus::proofs::ordered_trie_root_encoded;
use alloy_eips::eip2930::AccessList;
use alloy_primitives::{Address, B256, Bloom, BloomInput, TxKind, keccak256};
use alloy_rlp::{BufMut, Encodable};

use super::{Block, Fees, SetCodeAuthorization, Transaction};

/// What is wrong with a block, or why it could not be checked whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The header's fields do not hash to the block's hash: a field was
    /// lost or changed on the way (or the hash is another block's).
    #[error("the header hashes to {computed}, the block says {expected}")]
    HeaderHash { expected: B256, computed: B256 },
    /// A transaction of a type the model encodes lacks a field its type
    /// needs (say a type-2 transaction without fee caps).
    #[error("transaction {index} of type {tx_type} has no {field}")]
    TransactionIncomplete {
        index: usize,
        tx_type: u8,
        field: &'static str,
    },
    /// A transaction's fields do not hash to its hash: one of them is not
    /// what was signed and mined.
    #[error("transaction {index} encodes to hash {computed}, it says {expected}")]
    TransactionHash {
        index: usize,
        expected: B256,
        computed: B256,
    },
    /// Every transaction is itself, but the list is not the header's:
    /// transactions missing, added or out of order.
    #[error("{count} transactions have root {computed}, the header says {expected}")]
    TransactionsRoot {
        expected: B256,
        computed: B256,
        count: usize,
    },
    /// A log says it is of another block (or says of none).
    #[error("log {index} is of block {found_hash:?} number {found_number:?}, not this one")]
    LogBlock {
        index: usize,
        found_hash: Option<B256>,
        found_number: Option<u64>,
    },
    /// Log indexes are not 0, 1, 2… in order.
    #[error("log {index} says it is log {found}")]
    LogIndex { index: usize, found: u64 },
    /// A log names a transaction the block does not have at that index.
    #[error(
        "log {index} names transaction {transaction_index} ({transaction_hash:?}), which the block does not hold"
    )]
    LogTransaction {
        index: usize,
        transaction_index: u64,
        transaction_hash: Option<B256>,
    },
    /// A log's address or topic is not in the header's bloom: the log is
    /// not the block's.
    #[error("log {index}'s {member} is not in the header's logs bloom")]
    LogNotInBloom { index: usize, member: LogMember },
    /// The receipts are not one for each transaction, in order: receipt
    /// `index` is of another transaction (`found`), or of none.
    #[error("receipt {index} is of transaction {found:?}, not the block's transaction {index}")]
    ReceiptTransaction { index: usize, found: Option<B256> },
    /// The header's bloom has bits no log sets: logs are missing.
    #[error("the header's logs bloom has {missing_bits} bits that no log of the {count} sets")]
    LogsMissing { missing_bits: u32, count: usize },
    /// Every check that could be made passed, but transaction `index` is
    /// of a kind the model cannot encode (a chain's own type such as an L2
    /// deposit, or an unsigned system transaction), so the transactions
    /// root, and the bloom for that transaction's logs, were not checked.
    /// Not evidence of a wrong block.
    #[error("transaction {index} of type {tx_type} cannot be checked: {reason}")]
    Unverifiable {
        index: usize,
        tx_type: u8,
        reason: &'static str,
    },
}

/// The part of a log the bloom is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogMember {
    Address(Address),
    Topic { position: usize, topic: B256 },
}

impl std::fmt::Display for LogMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogMember::Address(address) => write!(f, "address {address}"),
            LogMember::Topic { position, topic } => write!(f, "topic {position} ({topic})"),
        }
    }
}

/// The block if it passes verification (or cannot be verified: a
/// transaction type the model does not encode), else why not.
pub fn checked(block: Arc<Block>) -> Result<Arc<Block>, (Arc<Block>, VerifyError)> {
    match verify(&block) {
        Ok(()) | Err(VerifyError::Unverifiable { .. }) => Ok(block),
        Err(error) => Err((block, error)),
    }
}

/// Checks `block` against its own header: the header hash, every
/// transaction's hash and the transactions root, and its logs (block
/// fields, order, the logs bloom both ways). `Err(Unverifiable)` means every
/// other check passed; any other error means the block is wrong.
///
/// Not checked, for want of the data in the model: receipts' root (a
/// node chain's receipts are checked to be the transactions', in order),
/// withdrawals (kept as the node's text), senders (`from`: a signature
/// recovery per transaction would cost far more than the rest together),
/// and state.
pub fn verify(block: &Block) -> Result<(), VerifyError> {
    let computed = block.header.hash_slow();
    if computed != block.hash {
        return Err(VerifyError::HeaderHash {
            expected: block.hash,
            computed,
        });
    }
    let skipped = transactions(block)?;
    logs(block, &skipped)?;
    receipts(block)?;
    match skipped.first() {
        Some(&(index, reason)) => Err(VerifyError::Unverifiable {
            index,
            tx_type: block.transactions[index].tx_type,
            reason,
        }),
        None => Ok(()),
    }
}

/// Checks that a node's receipts are one for each transaction, in order.
fn receipts(block: &Block) -> Result<(), VerifyError> {
    #[derive(serde::Deserialize)]
    struct Of {
        #[serde(rename = "transactionHash")]
        hash: Option<B256>,
    }
    let Some(receipts) = block.receipts.as_deref() else {
        return Ok(());
    };
    for index in 0..receipts.len().max(block.transactions.len()) {
        let found = receipts
            .get(index)
            .and_then(|receipt| serde_json::from_str::<Of>(receipt).ok())
            .and_then(|of| of.hash);
        if found.is_none() || found != block.transactions.get(index).map(|tx| tx.hash) {
            return Err(VerifyError::ReceiptTransaction { index, found });
        }
    }
    Ok(())
}

/// Checks each transaction's hash and then the root over all of them;
/// returns the transactions it could not encode, with why (then no root).
/// One of [`verify`]'s checks, public so that it can be measured alone.
pub fn transactions(block: &Block) -> Result<Vec<(usize, &'static str)>, VerifyError> {
    let txs = &block.transactions;
    // Every encoding in one buffer, `ends` marking where each stops: no
    // allocation per transaction, and the trie reads the slices in place.
    let mut buffer = Vec::with_capacity(txs.iter().map(|tx| tx.input.len() + 160).sum());
    let mut ends = Vec::with_capacity(txs.len());
    let mut skipped = Vec::new();
    for (index, tx) in txs.iter().enumerate() {
        let start = buffer.len();
        match encode_2718(tx, &mut buffer) {
            Ok(()) => {
                let computed = keccak256(&buffer[start..]);
                if computed != tx.hash {
                    return Err(VerifyError::TransactionHash {
                        index,
                        expected: tx.hash,
                        computed,
                    });
                }
            }
            Err(Unencodable::Unverifiable(reason)) => {
                buffer.truncate(start);
                skipped.push((index, reason));
            }
            Err(Unencodable::Missing(field)) => {
                return Err(VerifyError::TransactionIncomplete {
                    index,
                    tx_type: tx.tx_type,
                    field,
                });
            }
        }
        ends.push(buffer.len());
    }
    if skipped.is_empty() {
        let encodings: Vec<&[u8]> = ends
            .iter()
            .scan(0, |start, &end| {
                let slice = &buffer[*start..end];
                *start = end;
                Some(slice)
            })
            .collect();
        let computed = ordered_trie_root_encoded(&encodings);
        let expected = block.header.transactions_root;
        if computed != expected {
            return Err(VerifyError::TransactionsRoot {
                expected,
                computed,
                count: txs.len(),
            });
        }
    }
    Ok(skipped)
}

/// Checks the logs' block fields and order, and that their addresses and
/// topics make up the header's bloom exactly; the logs of `skipped`
/// transactions are left out of the bloom (a chain may keep them out of
/// it), and then only inclusion is checked. One of [`verify`]'s checks,
/// public so that it can be measured alone.
pub fn logs(block: &Block, skipped: &[(usize, &'static str)]) -> Result<(), VerifyError> {
    let header_bloom = &block.header.logs_bloom;
    let mut computed = Bloom::ZERO;
    for (index, log) in block.logs.iter().enumerate() {
        if log.block_hash != Some(block.hash) || log.block_number != Some(block.number()) {
            return Err(VerifyError::LogBlock {
                index,
                found_hash: log.block_hash,
                found_number: log.block_number,
            });
        }
        if let Some(found) = log.log_index.filter(|&i| i != index as u64) {
            return Err(VerifyError::LogIndex { index, found });
        }
        if let Some(transaction_index) = log.transaction_index {
            let tx = usize::try_from(transaction_index)
                .ok()
                .and_then(|i| block.transactions.get(i));
            let named = tx.is_some_and(|tx| log.transaction_hash.is_none_or(|h| h == tx.hash));
            if !named {
                return Err(VerifyError::LogTransaction {
                    index,
                    transaction_index,
                    transaction_hash: log.transaction_hash,
                });
            }
            if skipped.iter().any(|&(i, _)| i as u64 == transaction_index) {
                continue;
            }
        }
        let members = std::iter::once(LogMember::Address(log.address())).chain(
            log.topics()
                .iter()
                .enumerate()
                .map(|(position, &topic)| LogMember::Topic { position, topic }),
        );
        for member in members {
            // One hash per member gives its three bits, tested and set.
            let hash = keccak256(match &member {
                LogMember::Address(address) => address.as_slice(),
                LogMember::Topic { topic, .. } => topic.as_slice(),
            });
            if !header_bloom.contains_input(BloomInput::Hash(hash)) {
                return Err(VerifyError::LogNotInBloom { index, member });
            }
            computed.m3_2048_hashed(&hash);
        }
    }
    if skipped.is_empty() && computed != *header_bloom {
        let missing_bits = (header_bloom.data().iter().zip(computed.data()))
            .map(|(header, logs)| (header & !logs).count_ones())
            .sum();
        return Err(VerifyError::LogsMissing {
            missing_bits,
            count: block.logs.len(),
        });
    }
    Ok(())
}

/// Why a transaction has no encoding here.
enum Unencodable {
    /// Not a wrong transaction: one this module cannot encode.
    Unverifiable(&'static str),
    /// A field its type needs is absent.
    Missing(&'static str),
}

/// Appends `tx`'s EIP-2718 encoding (what its hash and the transactions
/// trie are over) to `out`, from the model's fields alone.
fn encode_2718(tx: &Transaction, out: &mut Vec<u8>) -> Result<(), Unencodable> {
    if tx.tx_type > 4 {
        return Err(Unencodable::Unverifiable("not a type this server encodes"));
    }
    let signature = &tx.signature;
    if signature.r.is_zero() && signature.s.is_zero() {
        // System transactions as some nodes list them (Polygon's state
        // syncs): not signed, and not always in the transactions root.
        return Err(Unencodable::Unverifiable("it carries no signature"));
    }
    let to = TxKind::from(tx.to);
    let (nonce, gas, value, input) = (&tx.nonce, &tx.gas, &tx.value, &tx.input);
    let (r, s) = (&signature.r, &signature.s);
    if tx.tx_type == 0 {
        let price = &gas_price(tx)?;
        let v = &signature.v;
        let fields: &[&dyn Encodable] = &[nonce, price, gas, &to, value, input, v, r, s];
        rlp_list(out, &[fields]);
        return Ok(());
    }
    let chain_id = &tx.chain_id.ok_or(Unencodable::Missing("chainId"))?;
    // Some nodes leave an empty list out.
    let empty = AccessList::default();
    let access_list = tx.access_list.as_ref().unwrap_or(&empty);
    // geth's rule where the node states no parity: `v` is the parity.
    let parity = &signature.y_parity.unwrap_or(signature.v == 1);
    let signed: &[&dyn Encodable] = &[parity, r, s];
    out.push(tx.tx_type);
    if tx.tx_type == 1 {
        let price = &gas_price(tx)?;
        let fields: &[&dyn Encodable] =
            &[chain_id, nonce, price, gas, &to, value, input, access_list];
        rlp_list(out, &[fields, signed]);
        return Ok(());
    }
    let Fees::Dynamic {
        max_fee_per_gas,
        max_priority_fee_per_gas,
        ..
    } = &tx.fees
    else {
        return Err(Unencodable::Missing("maxFeePerGas"));
    };
    let fields: &[&dyn Encodable] = &[
        chain_id,
        nonce,
        max_priority_fee_per_gas,
        max_fee_per_gas,
        gas,
        &to,
        value,
        input,
        access_list,
    ];
    if tx.tx_type == 2 {
        rlp_list(out, &[fields, signed]);
        return Ok(());
    }
    // Types 3 and 4 cannot create a contract.
    if tx.to.is_none() {
        return Err(Unencodable::Missing("to"));
    }
    if tx.tx_type == 3 {
        let blob = tx
            .blob
            .as_ref()
            .ok_or(Unencodable::Missing("blobVersionedHashes"))?;
        let blobs: &[&dyn Encodable] = &[&blob.max_fee_per_blob_gas, &blob.versioned_hashes];
        rlp_list(out, &[fields, blobs, signed]);
    } else {
        let list = tx
            .authorization_list
            .as_deref()
            .ok_or(Unencodable::Missing("authorizationList"))?;
        rlp_list(out, &[fields, &[&Authorizations(list)], signed]);
    }
    Ok(())
}

/// The single gas price of a type 0 or 1 transaction (the node's stated
/// price where it also gave caps).
fn gas_price(tx: &Transaction) -> Result<u128, Unencodable> {
    match tx.fees {
        Fees::GasPrice(price)
        | Fees::Dynamic {
            stated_price: Some(price),
            ..
        } => Ok(price),
        Fees::Dynamic { .. } => Err(Unencodable::Missing("gasPrice")),
    }
}

/// Appends the RLP list of the fields of `parts`, in order (parts, so a
/// type's fields are shared without collecting them).
fn rlp_list(out: &mut Vec<u8>, parts: &[&[&dyn Encodable]]) {
    let fields = || parts.iter().flat_map(|part| part.iter());
    let payload_length = fields().map(|field| field.length()).sum();
    alloy_rlp::Header {
        list: true,
        payload_length,
    }
    .encode(out);
    for field in fields() {
        field.encode(out);
    }
}

/// An EIP-7702 authorization list encoded straight from the model's
/// entries, without collecting alloy's.
struct Authorizations<'a>(&'a [SetCodeAuthorization]);

impl Authorizations<'_> {
    fn payload_length(&self) -> usize {
        self.0.iter().map(|a| a.signed().length()).sum()
    }
}

impl Encodable for Authorizations<'_> {
    fn encode(&self, out: &mut dyn BufMut) {
        alloy_rlp::Header {
            list: true,
            payload_length: self.payload_length(),
        }
        .encode(out);
        for authorization in self.0 {
            authorization.signed().encode(out);
        }
    }

    fn length(&self) -> usize {
        let payload = self.payload_length();
        payload + alloy_rlp::length_of_length(payload)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use alloy_consensus::proofs::calculate_transaction_root;
    use alloy_consensus::{Header, SignableTransaction, TxEnvelope, TxLegacy};
    use alloy_primitives::{Bytes, U256};
    use alloy_signer::SignerSync;
    use alloy_signer_local::PrivateKeySigner;
    use serde::Deserialize;
    use serde_json::json;
    use serde_json::value::RawValue;

    use super::*;
    use crate::TxSignature;
    use crate::lifecycle::Outcome;
    use crate::wire::NodeBlock;

    /// An anvil (`--hardfork osaka`) block of transactions of types 0, 1
    /// and 2 and a creation whose constructor logs twice, with its
    /// `eth_getLogs` and `eth_getBlockReceipts`: made by starting anvil
    /// 1.7.1 with `--no-mining`, sending the four from its first dev
    /// account by `eth_sendTransaction`, and `evm_mine`.
    #[derive(Deserialize)]
    struct Fixture {
        block: Box<RawValue>,
        logs: Vec<Box<RawValue>>,
        receipts: Box<RawValue>,
    }

    fn fixture() -> Fixture {
        serde_json::from_str(include_str!("fixtures/anvil_osaka_block.json")).expect("JSON")
    }

    fn anvil_block() -> Block {
        let fixture = fixture();
        let node: NodeBlock = serde_json::from_str(fixture.block.get()).expect("a node block");
        Arc::unwrap_or_clone(node.into_model(&fixture.logs))
    }

    /// Read with its receipts, the block has the logs `eth_getLogs` gives,
    /// and gives back each receipt as the node did, field for field (its
    /// logs and bloom made again), also once stored; re-sent after a
    /// reorg, a receipt and its logs say `removed`.
    #[test]
    fn a_real_anvil_blocks_receipts_come_back_as_the_node_gave_them() {
        let fixture = fixture();
        let node: NodeBlock = serde_json::from_str(fixture.block.get()).expect("a node block");
        let receipts = serde_json::from_str(fixture.receipts.get()).expect("receipts");
        let block = node.with_receipts(receipts).expect("joins");
        verify(&block).expect("verifies");
        assert_eq!(block.logs, anvil_block().logs, "the logs are eth_getLogs'");
        let expected: Vec<serde_json::Value> =
            serde_json::from_str(fixture.receipts.get()).expect("receipts");
        let stored: Block =
            serde_json::from_str(&serde_json::to_string(&*block).expect("json")).expect("reads");
        let packed: Block =
            rmp_serde::from_slice(&rmp_serde::to_vec_named(&*block).expect("packs"))
                .expect("unpacks");
        for held in [&*block, &stored, &packed] {
            for (index, receipt) in expected.iter().enumerate() {
                let made = held.receipt_json(index, false).expect("a receipt");
                let made: serde_json::Value = serde_json::from_str(&made).expect("JSON");
                assert_eq!(&made, receipt, "receipt {index}");
            }
        }
        let removed: serde_json::Value =
            serde_json::from_str(&block.receipt_json(3, true).expect("a receipt")).expect("JSON");
        assert_eq!(removed["removed"], true);
        assert_eq!(removed["logs"][1]["removed"], true);
        assert_eq!(removed["logs"].as_array().map(Vec::len), Some(2));
        assert_eq!(block.receipt_json(4, false), None, "no such transaction");
        // A lifecycle turn's outcome is the receipt's.
        for (index, receipt) in expected.iter().enumerate() {
            let outcome = Outcome::of(&block, index).expect("an outcome");
            let hex = |value: u128| format!("{value:#x}");
            assert_eq!(
                (
                    json!(if outcome.success { "0x1" } else { "0x0" }),
                    json!(hex(outcome.gas_used.into())),
                    json!(hex(outcome.effective_gas_price)),
                ),
                (
                    receipt["status"].clone(),
                    receipt["gasUsed"].clone(),
                    receipt["effectiveGasPrice"].clone()
                ),
                "outcome {index}"
            );
        }
        assert_eq!(Outcome::of(&block, 4), None);

        // Receipts of other transactions, or one short, are the node's lie.
        let mut swapped = (*block).clone();
        swapped.receipts.as_mut().expect("receipts").swap(0, 1);
        assert_eq!(
            verify(&swapped),
            Err(VerifyError::ReceiptTransaction {
                index: 0,
                found: Some(block.transactions[1].hash)
            })
        );
        let mut short = (*block).clone();
        let kept = short.receipts.as_deref().expect("receipts")[..3].to_vec();
        short.receipts = Some(kept.into());
        assert_eq!(
            verify(&short),
            Err(VerifyError::ReceiptTransaction {
                index: 3,
                found: None
            })
        );
    }

    #[test]
    fn a_real_anvil_osaka_block_verifies_through_the_reader_and_the_store() {
        let block = anvil_block();
        let types: Vec<u8> = block.transactions.iter().map(|tx| tx.tx_type).collect();
        assert_eq!(types, [0, 1, 2, 2]);
        assert_eq!(block.logs.len(), 2);
        // The post-London fields the hash covers came through the reader.
        let h = &block.header;
        assert!(h.base_fee_per_gas.is_some() && h.withdrawals_root.is_some());
        assert!(h.blob_gas_used.is_some() && h.excess_blob_gas.is_some());
        assert!(h.parent_beacon_block_root.is_some() && h.requests_hash.is_some());
        verify(&block).expect("anvil's block verifies");
        // And through the persisted log's JSON and the bus's MessagePack.
        let stored: Block =
            serde_json::from_str(&serde_json::to_string(&block).expect("json")).expect("reads");
        verify(&stored).expect("a stored block verifies");
        let packed = rmp_serde::to_vec_named(&block).expect("packs");
        let unpacked: Block = rmp_serde::from_slice(&packed).expect("unpacks");
        verify(&unpacked).expect("a block from the bus verifies");

        // A header field a lossy reader would drop.
        let mut lossy = block.clone();
        lossy.header.requests_hash = None;
        assert!(matches!(
            verify(&lossy),
            Err(VerifyError::HeaderHash { expected, .. }) if expected == block.hash
        ));
    }

    #[test]
    fn a_pre_eip155_legacy_transaction_verifies() {
        let signer = PrivateKeySigner::from_bytes(&keccak256("pre-155")).expect("a valid key");
        let tx = TxLegacy {
            chain_id: None,
            nonce: 3,
            gas_price: 20_000_000_000,
            gas_limit: 21_000,
            to: TxKind::Call(Address::repeat_byte(0x42)),
            value: U256::from(5),
            input: Bytes::new(),
        };
        let signature = signer.sign_hash_sync(&tx.signature_hash()).expect("signs");
        let envelope = TxEnvelope::from(tx.into_signed(signature));
        let model = Transaction::from_envelope(&envelope, signer.address());
        assert!(matches!(model.signature.v, 27 | 28));
        let header = Header {
            number: 1,
            transactions_root: calculate_transaction_root(&[envelope]),
            ..Header::default()
        };
        let block = Block {
            hash: header.hash_slow(),
            header,
            transactions: vec![Arc::new(model)],
            logs: Vec::new(),
            lookup: None,
            gas_used: None,
            receipts: None,
        };
        verify(&block).expect("a pre-155 transaction verifies");
    }

    #[test]
    fn what_cannot_be_encoded_is_unverifiable_not_wrong() {
        let block = anvil_block();
        // An L2 deposit (a type of its own) and an unsigned system
        // transaction, with a log each that the bloom does not hold.
        let deposit = Transaction {
            tx_type: 0x7e,
            ..Transaction::fixture(B256::repeat_byte(0x7e))
        };
        let system = Transaction {
            signature: TxSignature {
                v: 0,
                r: U256::ZERO,
                s: U256::ZERO,
                y_parity: None,
            },
            ..Transaction::fixture(B256::repeat_byte(0x5b))
        };
        for (tx, reason) in [
            (deposit, "not a type this server encodes"),
            (system, "it carries no signature"),
        ] {
            let mut with = block.clone();
            let mut log = with.logs[0].clone();
            log.transaction_index = Some(with.transactions.len() as u64);
            log.transaction_hash = Some(tx.hash);
            log.log_index = Some(with.logs.len() as u64);
            log.inner.address = Address::repeat_byte(0x99);
            with.transactions.push(Arc::new(tx.clone()));
            with.logs.push(log);
            assert_eq!(
                verify(&with),
                Err(VerifyError::Unverifiable {
                    index: 4,
                    tx_type: tx.tx_type,
                    reason
                })
            );
            // The checks it could make still find what is wrong.
            Arc::make_mut(&mut with.transactions[0]).nonce += 1;
            assert!(matches!(
                verify(&with),
                Err(VerifyError::TransactionHash { index: 0, .. })
            ));
        }
    }

    #[test]
    fn a_typed_transaction_without_its_fields_is_wrong() {
        let mut block = anvil_block();
        let tx = Arc::make_mut(&mut block.transactions[2]);
        tx.fees = Fees::GasPrice(1);
        assert_eq!(
            verify(&block),
            Err(VerifyError::TransactionIncomplete {
                index: 2,
                tx_type: 2,
                field: "maxFeePerGas"
            })
        );
    }
}
