//! The methods chainsieve answers, for both transports: the subscription
//! methods, `token_price`, and what real clients send around them
//! (`eth_chainId`, `net_version`, `eth_blockNumber`, `eth_getBlockBy*`, …),
//! and `eth_sendRawTransaction` on devnet chains ([`super::submit`]).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, B256, U64};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Call, Incoming, RpcError, batch_response, error_response, parse, response, result};
use crate::chain::Chain;
use crate::fanout::Sink;
use crate::filters::SubscribeError;
use crate::filters::actor::{Start, Subscribe};
use crate::price::query::PriceError;
use crate::server::AppState;
use crate::subscriptions::{self, OwnedIds};

/// What `web3_clientVersion` answers.
pub const CLIENT_VERSION: &str = concat!("chainsieve/v", env!("CARGO_PKG_VERSION"));

/// A WebSocket connection as the methods see it.
#[derive(Debug)]
pub struct Connection {
    pub sink: Sink,
    /// The subscriptions this connection made, cancelled when it closes;
    /// shared with the registry so a cancel over HTTP updates it too.
    pub owned: Arc<OwnedIds>,
    /// Gates of subscriptions made in the batch being answered; opened by
    /// [`Connection::open_gates`] once its response is queued. Touched only
    /// by the connection's reader.
    gates: Mutex<Vec<Arc<AtomicBool>>>,
}

impl Connection {
    pub fn new(sink: Sink) -> Self {
        Self {
            sink,
            owned: Arc::default(),
            gates: Mutex::default(),
        }
    }

    /// Lets subscriptions made in the last batch deliver: its response,
    /// with their ids, is now queued ahead of their notifications.
    pub fn open_gates(&self) {
        let gates = std::mem::take(
            &mut *self
                .gates
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for gate in gates {
            gate.store(true, Ordering::Release);
        }
    }

    fn owned(&self) -> std::sync::MutexGuard<'_, HashSet<Arc<str>>> {
        self.owned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes every subscription id the connection still owns.
    pub fn take_owned(&self) -> Vec<Arc<str>> {
        self.owned().drain().collect()
    }
}

/// Who is calling, over what.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    pub app: &'a AppState,
    pub chain: &'a Arc<Chain>,
    pub api_key: &'a Arc<str>,
    /// `None` over HTTP.
    pub connection: Option<&'a Connection>,
}

/// The result of one call.
enum Outcome {
    Reply(Result<Box<RawValue>, RpcError>),
    /// The response was already queued (by the filter actor, so it precedes
    /// the first notification).
    Sent,
}

/// Answers a body or frame; `None` when nothing is to be sent back.
pub async fn process(ctx: Context<'_>, bytes: &[u8]) -> Option<String> {
    match parse(bytes, ctx.app.limits.max_batch) {
        Err(error) => Some(error_response(&error)),
        Ok(Incoming::Single(Err(failed))) => response(&failed.id, &Err(failed.error)),
        Ok(Incoming::Single(Ok(call))) => match handle(ctx, &call, false).await {
            Outcome::Reply(outcome) => response(&call.id, &outcome),
            Outcome::Sent => None,
        },
        Ok(Incoming::Batch(items)) => {
            let mut parts = Vec::with_capacity(items.len());
            for item in items {
                let part = match item {
                    Err(failed) => response(&failed.id, &Err(failed.error)),
                    Ok(call) => match handle(ctx, &call, true).await {
                        Outcome::Reply(outcome) => response(&call.id, &outcome),
                        Outcome::Sent => None,
                    },
                };
                parts.extend(part);
            }
            batch_response(parts)
        }
    }
}

async fn handle(ctx: Context<'_>, call: &Call, in_batch: bool) -> Outcome {
    let reply = |outcome| Outcome::Reply(outcome);
    if let Err(limited) = ctx.app.rate.check(ctx.api_key) {
        return reply(Err(limited));
    }
    match call.method.as_str() {
        "eth_subscribe" => match ctx.connection {
            None => reply(Err(RpcError::method_not_found_msg(
                "notifications not supported",
            ))),
            Some(connection) => subscribe(ctx, connection, call, in_batch).await,
        },
        "eth_unsubscribe" => reply(unsubscribe(ctx, &call.params).await),
        "eth_chainId" => reply(result(&U64::from(ctx.chain.chain_id))),
        "net_version" => reply(result(&ctx.chain.chain_id.to_string())),
        "net_listening" => reply(result(&true)),
        "eth_syncing" => reply(result(&false)),
        "web3_clientVersion" => reply(result(&CLIENT_VERSION)),
        "eth_blockNumber" => reply(block_number(ctx.chain)),
        "eth_getBlockByNumber" => reply(block_by_number(ctx.chain, &call.params)),
        "eth_getBlockByHash" => reply(block_by_hash(ctx.chain, &call.params)),
        "token_price" => reply(token_price(ctx.chain, &call.params)),
        "eth_sendRawTransaction" => {
            reply(super::submit::send_raw_transaction(ctx.chain, &call.params).await)
        }
        other => reply(Err(RpcError::method_not_found(other))),
    }
}

/// Positional parameter `i`, if any.
fn positional(params: &Value, i: usize) -> Option<&Value> {
    params.as_array().and_then(|items| items.get(i))
}

pub(super) fn require_positional(params: &Value, method: &str) -> Result<(), RpcError> {
    if params.is_array() {
        Ok(())
    } else {
        Err(RpcError::invalid_params(format!(
            "{method} takes positional parameters (an array)"
        )))
    }
}

async fn subscribe(
    ctx: Context<'_>,
    connection: &Connection,
    call: &Call,
    in_batch: bool,
) -> Outcome {
    let request = || -> Result<(String, String), RpcError> {
        require_positional(&call.params, "eth_subscribe")?;
        let topic = match positional(&call.params, 0) {
            Some(Value::String(topic)) => topic.clone(),
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "the first parameter must be the subscription type (a string), got {other}"
                )));
            }
            None => return Err(RpcError::invalid_params("missing the subscription type")),
        };
        let rest = call
            .params
            .as_array()
            .map(|items| items[1..].to_vec())
            .unwrap_or_default();
        Ok((topic, Value::Array(rest).to_string()))
    };
    let (topic, params) = match request() {
        Ok(parts) => parts,
        Err(error) => return Outcome::Reply(Err(error)),
    };
    let Some(filter) = ctx.chain.filter(&topic) else {
        let filters = ctx.chain.filters();
        let available: Vec<&str> = filters.keys().map(String::as_str).collect();
        return Outcome::Reply(Err(RpcError::invalid_params(format!(
            "unknown subscription type \"{topic}\" (available: {})",
            available.join(", ")
        ))));
    };
    let limit = ctx.app.limits.max_subscriptions_per_connection;
    if connection.owned().len() >= limit {
        return Outcome::Reply(Err(RpcError::limit_exceeded(format!(
            "subscription limit reached: this connection has {limit} subscriptions (limits.max_subscriptions_per_connection); unsubscribe one first"
        ))));
    }
    let id = subscriptions::new_id();
    let key = ctx.app.subscriptions.next_key();
    // Register before the actor can deliver, so a close racing with this
    // call still finds and cancels it.
    connection.owned().insert(id.clone());
    ctx.app.subscriptions.insert(
        id.clone(),
        key,
        ctx.api_key.clone(),
        filter.clone(),
        &connection.owned,
    );
    let start = match &call.id {
        None => Start::Now,
        Some(_) if in_batch => {
            let gate = Arc::new(AtomicBool::new(false));
            connection
                .gates
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(gate.clone());
            Start::Gated(gate)
        }
        Some(request_id) => Start::Acknowledge(Some(request_id.clone())),
    };
    let acked = matches!(start, Start::Acknowledge(_));
    let request = Subscribe {
        key,
        id: id.clone(),
        params,
        sink: connection.sink.clone(),
        start,
    };
    match filter.subscribe(request).await {
        Ok(()) if acked => Outcome::Sent,
        Ok(()) => Outcome::Reply(result(&id)),
        Err(error) => {
            connection.owned().remove(&id);
            ctx.app.subscriptions.remove(&id, ctx.api_key).await;
            Outcome::Reply(Err(match error {
                SubscribeError::Params(message) => RpcError::invalid_params(message),
                SubscribeError::Limit(message) => RpcError::limit_exceeded(message),
                SubscribeError::Unavailable(message) => RpcError::internal(message),
            }))
        }
    }
}

async fn unsubscribe(ctx: Context<'_>, params: &Value) -> Result<Box<RawValue>, RpcError> {
    require_positional(params, "eth_unsubscribe")?;
    let Some(Value::String(id)) = positional(params, 0) else {
        return Err(RpcError::invalid_params(
            "eth_unsubscribe takes the subscription id (a string)",
        ));
    };
    // Over a WebSocket only the connection's own subscriptions; over HTTP
    // any subscription of the same API key.
    let allowed = match ctx.connection {
        Some(connection) => connection.owned().remove(id.as_str()),
        None => true,
    };
    if allowed && ctx.app.subscriptions.remove(id, ctx.api_key).await {
        result(&true)
    } else {
        Err(RpcError::generic("subscription not found"))
    }
}

fn block_number(chain: &Chain) -> Result<Box<RawValue>, RpcError> {
    let tip = chain.canonical().tip().map(|b| b.number());
    match tip {
        Some(number) => result(&U64::from(number)),
        None => Err(RpcError::generic("no block received yet")),
    }
}

/// A block selector: a number or a tag resolved to the tip.
fn block_selector(value: Option<&Value>) -> Result<Option<u64>, RpcError> {
    let bad = |v: &Value| {
        RpcError::invalid_params(format!(
            "invalid block number {v}: expected a hex quantity or latest, pending, safe, finalized, earliest"
        ))
    };
    match value {
        None => Err(RpcError::invalid_params("missing the block number")),
        Some(Value::String(tag)) => match tag.as_str() {
            "latest" | "pending" | "safe" | "finalized" => Ok(None),
            "earliest" => Ok(Some(0)),
            hex => parse_quantity(hex)
                .map(Some)
                .ok_or_else(|| bad(&Value::String(tag.clone()))),
        },
        Some(other) => Err(bad(other)),
    }
}

/// A canonical hex quantity (`0x0`, `0x1a`), as EIP-1474 requires.
fn parse_quantity(text: &str) -> Option<u64> {
    let digits = text.strip_prefix("0x")?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

fn full_flag(params: &Value) -> Result<bool, RpcError> {
    match positional(params, 1) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(full)) => Ok(*full),
        Some(other) => Err(RpcError::invalid_params(format!(
            "the second parameter (full transactions) must be a boolean, got {other}"
        ))),
    }
}

fn block_by_number(chain: &Chain, params: &Value) -> Result<Box<RawValue>, RpcError> {
    require_positional(params, "eth_getBlockByNumber")?;
    let selector = block_selector(positional(params, 0))?;
    let full = full_flag(params)?;
    let canonical = chain.canonical();
    let block = match selector {
        None => canonical.tip(),
        Some(number) => match canonical.by_number(number) {
            Some(block) => Some(block),
            None => match (canonical.oldest(), canonical.tip()) {
                (Some(oldest), Some(_)) if number < oldest.number() => {
                    return Err(RpcError::not_found(format!(
                        "block {number} is older than the recent blocks this server keeps (oldest: {})",
                        oldest.number()
                    )));
                }
                _ => None,
            },
        },
    };
    match block {
        Some(block) => Ok(block.block_json(full)),
        None => result(&Value::Null),
    }
}

fn block_by_hash(chain: &Chain, params: &Value) -> Result<Box<RawValue>, RpcError> {
    require_positional(params, "eth_getBlockByHash")?;
    let hash: B256 = match positional(params, 0) {
        Some(Value::String(text)) => parse_fixed(text).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "invalid block hash \"{text}\": expected 0x and 64 hex digits"
            ))
        })?,
        _ => {
            return Err(RpcError::invalid_params(
                "eth_getBlockByHash takes the block hash (a string)",
            ));
        }
    };
    let full = full_flag(params)?;
    match chain.canonical().by_hash(&hash) {
        Some(block) => Ok(block.block_json(full)),
        None => result(&Value::Null),
    }
}

/// `0x` + exactly 2·N hex digits, any case.
fn parse_fixed<T: std::str::FromStr>(text: &str) -> Option<T> {
    let digits = text.strip_prefix("0x")?;
    (digits.len() == 2 * std::mem::size_of::<T>() && digits.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// `token_price`: validates the request, then asks the chain's price index.
fn token_price(chain: &Chain, params: &Value) -> Result<Box<RawValue>, RpcError> {
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
    match chain.price.token_price(timestamp, token0, token1) {
        Ok(answer) => result(&answer),
        Err(PriceError::NotFound(reason)) => {
            Err(RpcError::not_found(format!("{reason} on {}", chain.name)))
        }
        Err(PriceError::Store(error)) => {
            tracing::error!(chain = %chain.name, error = format!("{error:#}"), "token_price");
            Err(RpcError::internal("the price index could not be read"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_must_be_canonical() {
        assert_eq!(parse_quantity("0x0"), Some(0));
        assert_eq!(parse_quantity("0x1a"), Some(26));
        assert_eq!(parse_quantity("0x01"), None);
        assert_eq!(parse_quantity("0x"), None);
        assert_eq!(parse_quantity("26"), None);
        assert_eq!(parse_quantity("0xzz"), None);
    }

    #[test]
    fn fixed_hex_values_need_exact_length() {
        assert!(parse_fixed::<Address>("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2").is_some());
        assert!(parse_fixed::<Address>("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc").is_none());
        assert!(parse_fixed::<Address>("C02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2").is_none());
        assert!(parse_fixed::<B256>(&format!("0x{}", "ab".repeat(32))).is_some());
    }

    #[test]
    fn block_selectors() {
        use serde_json::json;
        assert_eq!(block_selector(Some(&json!("latest"))), Ok(None));
        assert_eq!(block_selector(Some(&json!("earliest"))), Ok(Some(0)));
        assert_eq!(block_selector(Some(&json!("0x10"))), Ok(Some(16)));
        assert_eq!(
            block_selector(Some(&json!(16))).expect_err("number").code,
            -32602
        );
        assert_eq!(block_selector(None).expect_err("missing").code, -32602);
    }
}
