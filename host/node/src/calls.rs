//! Read-only contract calls at the latest block, as the price index makes
//! them (identify a pool, read a token): the chain's nodes answer them over
//! `eth_call`; a chain without one (the devnet) answers for its own
//! contracts with an implementation of its own.

use alloy_primitives::{Address, Bytes};
use futures_util::future::BoxFuture;
use serde_json::json;

use super::{NodeError, NodePool};

/// Runs a read-only call at the latest block.
pub trait ChainCalls: Send + Sync {
    /// The call's return data; `None` when it reverts (or `to` has no code).
    fn call(&self, to: Address, data: Bytes) -> BoxFuture<'_, anyhow::Result<Option<Bytes>>>;
}

impl ChainCalls for NodePool {
    fn call(&self, to: Address, data: Bytes) -> BoxFuture<'_, anyhow::Result<Option<Bytes>>> {
        Box::pin(async move {
            match NodePool::call::<Bytes>(
                self,
                "eth_call",
                json!([{ "to": to, "data": data }, "latest"]),
            )
            .await
            {
                Ok(result) => Ok(Some(result)),
                // The contract refused: not a pool or token of the kind asked.
                Err(NodeError::Rpc { .. }) => Ok(None),
                Err(other) => Err(other.into()),
            }
        })
    }
}
