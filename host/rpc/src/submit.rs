//! `eth_sendRawTransaction` on devnet chains: the transaction is decoded,
//! checked against the chain, and its sender recovered from the signature
//! here, on the caller's task, so the devnet's own task only orders it.
//! A node chain forwards them to its node ([`super::forward`]).

use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{Signed, TxEip4844Variant, TxEnvelope};
use alloy_eips::eip2718::Decodable2718;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::params::{parse_bytes, require_positional};
use super::{RpcError, result};
use chainsieve_chain::Chain;
use chainsieve_ingest::devnet::{Submission, SubmissionRefused};

/// Submits a devnet chain's transaction through `submissions`.
pub(super) async fn send_raw_transaction(
    chain: &Chain,
    submissions: &mpsc::Sender<Submission>,
    params: &Value,
) -> Result<Box<RawValue>, RpcError> {
    let envelope = decode(params)?;
    match alloy_consensus::Transaction::chain_id(&envelope) {
        Some(id) if id == chain.chain_id => {}
        Some(id) => {
            return Err(RpcError::invalid_params(format!(
                "the transaction is signed for chain id {id}; {} is chain id {}",
                chain.name, chain.chain_id
            )));
        }
        None => {
            return Err(RpcError::invalid_params(
                "only replay-protected (EIP-155) transactions are accepted",
            ));
        }
    }
    let from = envelope
        .recover_signer()
        .map_err(|error| RpcError::invalid_params(format!("invalid signature: {error}")))?;
    let hash = *envelope.tx_hash();
    let (reply, answer) = oneshot::channel();
    let gone = || RpcError::internal(format!("the {} devnet is not running", chain.name));
    submissions
        .send(Submission {
            envelope,
            from,
            reply,
        })
        .await
        .map_err(|_| gone())?;
    match answer.await.map_err(|_| gone())? {
        Ok(()) => result(&hash),
        Err(refusal @ SubmissionRefused::PoolFull) => {
            Err(RpcError::limit_exceeded(refusal.to_string()))
        }
        Err(refusal) => Err(RpcError::generic(refusal.to_string())),
    }
}

/// The one parameter: a signed transaction, EIP-2718 encoded, as 0x-hex.
fn decode(params: &Value) -> Result<TxEnvelope, RpcError> {
    require_positional(params, "eth_sendRawTransaction")?;
    let text = match params.as_array().map(Vec::as_slice) {
        Some([Value::String(text)]) => text,
        _ => {
            return Err(RpcError::invalid_params(
                "eth_sendRawTransaction takes one parameter: the signed transaction as a 0x-prefixed hex string",
            ));
        }
    };
    let bytes = parse_bytes(text).ok_or_else(|| {
        RpcError::invalid_params(
            "the raw transaction must be a 0x-prefixed string of hex digit pairs",
        )
    })?;
    let envelope = TxEnvelope::decode_2718_exact(&bytes)
        .map_err(|error| RpcError::invalid_params(format!("invalid raw transaction: {error}")))?;
    Ok(without_sidecar(envelope))
}

/// A blob transaction as a block carries it: its blobs, commitments and
/// proofs (the network form's sidecar) dropped, its hash and signature
/// kept, so the block's size and transactions root are a real block's.
fn without_sidecar(envelope: TxEnvelope) -> TxEnvelope {
    match envelope {
        TxEnvelope::Eip4844(signed) => {
            let (variant, signature, hash) = signed.into_parts();
            let bare = TxEip4844Variant::TxEip4844(variant.tx().clone());
            TxEnvelope::Eip4844(Signed::new_unchecked(bare, signature, hash))
        }
        other => other,
    }
}
