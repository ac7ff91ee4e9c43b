//! The transaction types wallets build themselves, really signed: an
//! EIP-4844 blob transaction in its network form (with a sidecar) and an
//! EIP-7702 set-code transaction, as raw bytes for `eth_sendRawTransaction`.

use alloy_consensus::{
    SignableTransaction, Signed, TxEip4844, TxEip4844Variant, TxEip4844WithSidecar, TxEip7702,
    TxEnvelope,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip4844::{Blob, BlobTransactionSidecar, Bytes48};
use alloy_eips::eip7594::BlobTransactionSidecarVariant;
use alloy_eips::eip7702::Authorization;
use alloy_primitives::{Address, Bytes, Signature, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use chainsieve_ingest::devnet::{EMPTY_BLOB_COMMITMENT, empty_blob_hash};

fn sign<T: SignableTransaction<Signature>>(signer: &PrivateKeySigner, tx: T) -> Signed<T> {
    let signature = signer.sign_hash_sync(&tx.signature_hash()).expect("signs");
    tx.into_signed(signature)
}

/// The KZG commitment (and proof) of the blob of zeros, the devnet's own:
/// the point at infinity, so a sidecar of that blob verifies.
fn infinity() -> Bytes48 {
    Bytes48::from(EMPTY_BLOB_COMMITMENT)
}

/// A blob transaction from `signer` to `to` carrying one blob of zeros,
/// with its sidecar (blob, commitment, proof): what a rollup sends.
pub fn blob_transaction(
    signer: &PrivateKeySigner,
    chain_id: u64,
    nonce: u64,
    to: Address,
) -> Vec<u8> {
    let tx = TxEip4844 {
        chain_id,
        nonce,
        gas_limit: 50_000,
        max_fee_per_gas: 20_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to,
        value: U256::from(3),
        access_list: Default::default(),
        blob_versioned_hashes: vec![empty_blob_hash()],
        max_fee_per_blob_gas: 10,
        input: Bytes::from_static(&[0xde, 0xad]),
    };
    let sidecar = BlobTransactionSidecar {
        blobs: vec![Blob::ZERO],
        commitments: vec![infinity()],
        proofs: vec![infinity()],
    };
    let with_sidecar =
        TxEip4844Variant::TxEip4844WithSidecar(TxEip4844WithSidecar::from_tx_and_sidecar(
            tx,
            BlobTransactionSidecarVariant::Eip4844(sidecar),
        ));
    TxEnvelope::from(sign(signer, with_sidecar)).encoded_2718()
}

/// A set-code transaction from `signer` in which `authority` delegates its
/// account to `delegate` (its first authorization: nonce 0), calling it.
pub fn set_code_transaction(
    signer: &PrivateKeySigner,
    authority: &PrivateKeySigner,
    chain_id: u64,
    nonce: u64,
    delegate: Address,
) -> Vec<u8> {
    let authorization = Authorization {
        chain_id: U256::from(chain_id),
        address: delegate,
        nonce: 0,
    };
    let signature = authority
        .sign_hash_sync(&authorization.signature_hash())
        .expect("signs");
    let tx = TxEip7702 {
        chain_id,
        nonce,
        gas_limit: 100_000,
        max_fee_per_gas: 20_000_000_000,
        max_priority_fee_per_gas: 2_000_000_000,
        to: authority.address(),
        value: U256::ZERO,
        access_list: Default::default(),
        authorization_list: vec![authorization.into_signed(signature)],
        input: Bytes::new(),
    };
    TxEnvelope::from(sign(signer, tx)).encoded_2718()
}
