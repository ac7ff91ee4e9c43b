//! The methods chainsieve does not answer itself, on a node-fed chain: sent
//! to the chain's node over one pooled connection, as the client wrote them
//! (with the server's own id), and the node's answer handed back unchanged:
//! its result, or its error with code, message and `data` (a revert's data
//! byte for byte). Which methods go is the `[rpc]` policy's to say
//! (docs/src/architecture.md, Forwarding). Which node answers is the
//! chain's pool's (docs/src/nodes.md, Calls): a read goes to a node that
//! holds the block it names, a signed transaction to every node.

use alloy_primitives::B256;
use serde_json::Value;
use serde_json::value::RawValue;

use super::params::{parse_fixed, parse_quantity, positional};
use super::{Call, RpcError};
use chainsieve_chain::Chain;
use chainsieve_node::{self as node, At, NodeError};

/// Where each method that names a block takes it: the position of its
/// block parameter.
const BLOCK_PARAMETER: [(&str, usize); 12] = [
    ("eth_getBalance", 1),
    ("eth_getCode", 1),
    ("eth_getTransactionCount", 1),
    ("eth_getStorageAt", 2),
    ("eth_call", 1),
    ("eth_estimateGas", 1),
    ("eth_createAccessList", 1),
    ("eth_getProof", 2),
    ("eth_getBlockByNumber", 0),
    ("eth_getBlockReceipts", 0),
    ("eth_getBlockTransactionCountByNumber", 0),
    ("eth_getTransactionByBlockNumberAndIndex", 0),
];

/// The block `params` name for `method`, which decides the nodes that can
/// answer: a number, `latest` or `pending` (the chain's tip), a
/// `{"blockNumber"}` or a `{"blockHash"}` the window holds. Any node may
/// answer the rest (no block named, `earliest`, `safe`, `finalized`, an
/// unknown hash).
fn named_block(chain: &Chain, method: &str, params: &Value) -> At {
    let Some((_, at)) = BLOCK_PARAMETER.iter().find(|(m, _)| *m == method) else {
        return At::Any;
    };
    let tip = || chain.canonical().tip().map(|b| b.number());
    let by_hash = |hash: &Value| {
        let hash: B256 = parse_fixed(hash.as_str()?)?;
        chain.canonical().by_hash(&hash).map(|b| b.number())
    };
    let block = match positional(params, *at) {
        Some(Value::String(tag)) if tag == "latest" || tag == "pending" => {
            return tip().map_or(At::Any, At::Tip);
        }
        Some(Value::String(text)) => parse_quantity(text),
        Some(Value::Object(selector)) => {
            match (selector.get("blockNumber"), selector.get("blockHash")) {
                (Some(Value::String(number)), _) => parse_quantity(number),
                (_, Some(hash)) => by_hash(hash),
                _ => None,
            }
        }
        _ => None,
    };
    block.map_or(At::Any, At::Block)
}

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
    let answered = if method == "eth_sendRawTransaction" {
        nodes.broadcast(&request, timeout).await
    } else {
        let at = named_block(chain, method, &call.params);
        nodes
            .batch_at(&request, at, timeout, chain.rpc.hedge_after())
            .await
    };
    match answered {
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
