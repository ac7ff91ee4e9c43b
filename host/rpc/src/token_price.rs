//! `token_price`: validates the request, then asks the chain's price index
//! (docs/src/api.md, token_price).

use alloy_primitives::Address;
use serde_json::Value;
use serde_json::value::RawValue;

use super::params::parse_fixed;
use super::{RpcError, result};
use chainsieve_chain::Chain;
use chainsieve_price::query::PriceError;

/// `token_price`: validates the request, then asks the chain's price index.
pub(super) async fn token_price(chain: &Chain, params: &Value) -> Result<Box<RawValue>, RpcError> {
    let object = match params {
        Value::Object(_) => params,
        Value::Array(items) if items.len() == 1 && items[0].is_object() => &items[0],
        _ => {
            return Err(RpcError::invalid_params(
                "token_price takes an object {timestamp?, token0, token1}",
            ));
        }
    };
    let map = object.as_object().expect("checked above");
    if let Some(unknown) = map
        .keys()
        .find(|k| !["timestamp", "token0", "token1"].contains(&k.as_str()))
    {
        return Err(RpcError::invalid_params(format!(
            "unknown token_price parameter \"{unknown}\" (expected timestamp, token0, token1)"
        )));
    }
    let token = |name: &str| -> Result<Address, RpcError> {
        match map.get(name) {
            Some(Value::String(text)) => parse_fixed::<Address>(text).ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "{name} \"{text}\" is not an address (0x and 40 hex digits)"
                ))
            }),
            Some(other) => Err(RpcError::invalid_params(format!(
                "{name} must be an address string, got {other}"
            ))),
            None => Err(RpcError::invalid_params(format!("missing {name}"))),
        }
    };
    let (token0, token1) = (token("token0")?, token("token1")?);
    if token0 == token1 {
        return Err(RpcError::invalid_params(
            "token0 and token1 are the same token",
        ));
    }
    let timestamp = match map.get("timestamp") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "timestamp must be a non-negative whole number of seconds (or milliseconds), got {other}"
            )));
        }
    };
    match chain
        .price
        .token_price(timestamp, token0, token1, chain.node().map(|pool| &**pool))
        .await
    {
        Ok(answer) => result(&answer),
        Err(PriceError::NotFound(reason) | PriceError::NoState(reason)) => {
            Err(RpcError::not_found(format!("{reason} on {}", chain.name)))
        }
        Err(PriceError::Unavailable(reason)) => {
            Err(RpcError::unavailable(format!("{reason} on {}", chain.name)))
        }
        Err(PriceError::TooCostly(reason)) => Err(RpcError::limit_exceeded(format!(
            "{reason} on {}",
            chain.name
        ))),
        Err(PriceError::Store(error)) => {
            tracing::error!(chain = %chain.name, error = format!("{error:#}"), "token_price");
            Err(RpcError::internal("the price index could not be read"))
        }
    }
}
