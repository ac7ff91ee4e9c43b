//! Helpers the devnet's unit tests share.

use std::sync::Arc;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_primitives::{Address, Bytes, Signature, TxKind, U256, keccak256};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_signer_local::PrivateKeySigner;

use super::workload::sign;
use super::{Devnet, DevnetSettings};
use chainsieve_model::SourceEvent;
use chainsieve_model::{Block, Fees, Transaction};

pub(super) fn settings() -> DevnetSettings {
    DevnetSettings {
        seed: 7,
        genesis_timestamp: Some(1_700_000_000),
        ..DevnetSettings::default()
    }
}

pub(super) fn quiet() -> DevnetSettings {
    DevnetSettings {
        transactions_per_block: 0,
        ..settings()
    }
}

/// The events of `steps` ticks, genesis first.
pub(super) fn stream(devnet: &mut Devnet, steps: usize) -> Vec<SourceEvent> {
    let mut events = vec![SourceEvent::Block(devnet.genesis())];
    for _ in 0..steps {
        events.extend(devnet.next_step());
    }
    events
}

/// The blocks and pending transactions of `steps` ticks.
pub(super) fn run_steps(
    devnet: &mut Devnet,
    steps: usize,
) -> (Vec<Arc<Block>>, Vec<Arc<Transaction>>) {
    let mut blocks = Vec::new();
    let mut pending = Vec::new();
    for event in stream(devnet, steps) {
        match event {
            SourceEvent::Block(b) => blocks.push(b),
            SourceEvent::Pending { txs, .. } => pending.extend(txs),
            SourceEvent::Synced
            | SourceEvent::Logged { .. }
            | SourceEvent::Finality { .. }
            | SourceEvent::Dropped(_) => {
                unreachable!("steps carry no marker")
            }
        }
    }
    (blocks, pending)
}

/// The nonces of a block's transactions, in order.
pub(super) fn nonces(block: &Block) -> Vec<u64> {
    block.transactions.iter().map(|t| t.nonce).collect()
}

/// A transaction from an outside key, signed for chain 1.
pub(super) fn outside(nonce: u64, gas_limit: u64, input: &[u8]) -> (TxEnvelope, Address) {
    let signer =
        PrivateKeySigner::from_bytes(&keccak256("an outside sender")).expect("a valid key");
    (
        signed_by(&signer, nonce, gas_limit, input),
        signer.address(),
    )
}

/// A call to a fixed address from `signer`, signed for chain 1.
pub(super) fn signed_by(
    signer: &PrivateKeySigner,
    nonce: u64,
    gas_limit: u64,
    input: &[u8],
) -> TxEnvelope {
    let tx = TxEip1559 {
        chain_id: 1,
        nonce,
        gas_limit,
        max_fee_per_gas: 30_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TxKind::Call(Address::repeat_byte(0x42)),
        value: U256::from(7),
        access_list: Default::default(),
        input: Bytes::copy_from_slice(input),
    };
    TxEnvelope::from(sign(signer, tx))
}

/// Rebuilds the signed envelope from the model's fields alone, so the
/// checks below prove the model carries everything a node would report:
/// the fields a type has pick the type, as a wallet's request does.
pub(super) fn envelope_of(tx: &Transaction) -> TxEnvelope {
    let chain_id = tx.chain_id.expect("devnet transactions name their chain");
    let parity = if tx.tx_type == 0 {
        tx.signature
            .v
            .checked_sub(chain_id * 2 + 35)
            .expect("EIP-155 v")
    } else {
        assert_eq!(tx.signature.y_parity, Some(tx.signature.v == 1));
        tx.signature.v
    };
    assert!(parity <= 1, "v {} of type {}", tx.signature.v, tx.tx_type);
    let signature = Signature::new(tx.signature.r, tx.signature.s, parity == 1);
    let mut request = TransactionRequest {
        to: Some(tx.to.map_or(TxKind::Create, TxKind::Call)),
        gas: Some(tx.gas),
        value: Some(tx.value),
        input: tx.input.clone().into(),
        nonce: Some(tx.nonce),
        chain_id: Some(chain_id),
        access_list: tx.access_list.clone(),
        blob_versioned_hashes: tx.blob.as_ref().map(|b| b.versioned_hashes.clone()),
        max_fee_per_blob_gas: tx.blob.as_ref().map(|b| b.max_fee_per_blob_gas),
        authorization_list: tx
            .authorization_list
            .as_ref()
            .map(|list| list.iter().map(|a| a.signed()).collect()),
        ..Default::default()
    };
    match tx.fees {
        Fees::GasPrice(price) => request.gas_price = Some(price),
        Fees::Dynamic {
            max_fee_per_gas,
            max_priority_fee_per_gas,
            ..
        } => {
            request.max_fee_per_gas = Some(max_fee_per_gas);
            request.max_priority_fee_per_gas = Some(max_priority_fee_per_gas);
        }
    }
    let unsigned = request
        .build_consensus_tx()
        .expect("a complete transaction");
    assert_eq!(unsigned.tx_type() as u8, tx.tx_type);
    TxEnvelope::from(unsigned.into_signed(signature))
}
