//! The methods chainsieve does not answer itself, on a node-fed chain: sent
//! to the chain's node over one pooled connection, as the client wrote them
//! (with the server's own id), and the node's answer handed back unchanged:
//! its result, or its error with code, message and `data` (a revert's data
//! byte for byte). Which methods go is the `[rpc]` policy's to say
//! (docs/src/architecture.md, Forwarding).

use serde_json::value::RawValue;

use super::{Call, RpcError};
use crate::chain::Chain;
use crate::node::{self, NodeError};

/// Forwards `call` to `chain`'s node, or says why not.
pub(super) async fn forward(chain: &Chain, call: &Call) -> Result<Box<RawValue>, RpcError> {
    let method = call.method.as_str();
    let Some(nodes) = chain.node() else {
        return Err(RpcError::method_not_found(method));
    };
    if !chain.rpc.forwards(method) {
        return Err(RpcError::method_not_found_msg(&format!(
            "the method {method} is not served: this server forwards the eth_*, net_* and web3_* methods \
             to the node, except the node-wallet ones and subscriptions (eth_subscribe is served \
             here, over WebSocket), and what [rpc] allow names"
        )));
    }
    let request = [node::Call::named(method.to_string(), call.params.clone())];
    let timeout = chain.rpc.timeout();
    match nodes.batch_at(&request, None, timeout).await {
        Ok(mut results) => results
            .pop()
            .ok_or_else(|| RpcError::internal(format!("{}'s node answered nothing", chain.name))),
        Err(NodeError::Rpc {
            code,
            message,
            data,
            ..
        }) => Err(RpcError::from_node(code, message, data)),
        Err(NodeError::Timeout { .. }) => Err(RpcError::unavailable(format!(
            "{}'s node did not answer {method} within {} ms",
            chain.name,
            timeout.as_millis()
        ))),
        Err(other) => Err(RpcError::unavailable(format!(
            "{}'s node is unavailable: {other}",
            chain.name
        ))),
    }
}
