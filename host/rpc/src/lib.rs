//! JSON-RPC 2.0 over both transports: parsing requests (single or batch;
//! ids that are numbers, strings or null; `params` optional), writing
//! responses, and the method table shared by HTTP and WebSocket.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_chain`],
//! [`chainsieve_config`], [`chainsieve_eventlog`], [`chainsieve_fanout`],
//! [`chainsieve_filter_core`], [`chainsieve_filters`], [`chainsieve_history`],
//! [`chainsieve_ingest`], [`chainsieve_keys`], [`chainsieve_log_rules`],
//! [`chainsieve_model`], [`chainsieve_node`], [`chainsieve_price`],
//! [`chainsieve_usage`], [`chainsieve_watchlists`], [`chainsieve_webhook`].

mod blocks;
mod context;
mod devnet;
pub mod error;
mod forward;
mod history;
mod logs;
pub mod methods;
mod params;
pub mod rate_limit;
mod resume;
mod submit;
mod subscribe;
pub mod subscriptions;
mod token_price;
mod watchlists;
pub mod webhooks;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

pub use error::{RpcError, refused};

/// A request id as the client sent it (number, string or null), echoed
/// verbatim. `None` marks a notification, which gets no response.
pub type Id = Option<Box<RawValue>>;

/// One parsed call.
#[derive(Debug)]
pub struct Call {
    pub id: Id,
    pub method: String,
    /// Positional (`[]` when absent) or named parameters.
    pub params: Value,
}

impl Call {
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }
}

/// What a frame or body held.
#[derive(Debug)]
pub enum Incoming {
    Single(Result<Call, Failed>),
    Batch(Vec<Result<Call, Failed>>),
}

/// A request that could not be read; answered with `id` (or `null`).
#[derive(Debug)]
pub struct Failed {
    pub id: Id,
    pub error: RpcError,
}

/// Parses a body or frame. `Err` is a response to send as it is (a parse
/// error, an empty or oversized batch).
pub fn parse(bytes: &[u8], max_batch: usize) -> Result<Incoming, RpcError> {
    let raw: &RawValue = serde_json::from_slice(bytes).map_err(RpcError::parse)?;
    if !raw.get().starts_with('[') {
        return Ok(Incoming::Single(call(raw)));
    }
    let items: Vec<&RawValue> = serde_json::from_str(raw.get()).map_err(RpcError::parse)?;
    match items.len() {
        0 => Err(RpcError::invalid_request("empty batch")),
        n if n > max_batch => Err(RpcError::limit_exceeded(format!(
            "batch of {n} requests exceeds the limit of {max_batch} (limits.max_batch)"
        ))),
        _ => Ok(Incoming::Batch(items.into_iter().map(call).collect())),
    }
}

/// The envelope's fields, unparsed, so the id is echoed byte for byte
/// (a JSON number like 18446744073709551616 survives) and `"id": null` is
/// told apart from a missing id.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
}

/// `Some` for a present field, even when it is `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn call(raw: &RawValue) -> Result<Call, Failed> {
    let invalid = |id: Id, message: &str| {
        Err(Failed {
            id,
            error: RpcError::invalid_request(message),
        })
    };
    if !raw.get().starts_with('{') {
        return invalid(null_id(), "request must be a JSON object");
    }
    let Ok(envelope) = serde_json::from_str::<Envelope<'_>>(raw.get()) else {
        return invalid(null_id(), "request must be a JSON object");
    };
    let id: Id = match envelope.id {
        None => None,
        Some(id) if matches!(id.get().as_bytes()[0], b'"' | b'-' | b'0'..=b'9' | b'n') => {
            Some(id.to_owned())
        }
        Some(_) => return invalid(null_id(), "id must be a number, a string or null"),
    };
    let answer_id = id.clone().or_else(null_id);
    match envelope.jsonrpc.map(|v| v.get()) {
        Some("\"2.0\"") => {}
        Some(_) => return invalid(answer_id, "jsonrpc must be \"2.0\""),
        None => return invalid(answer_id, "missing \"jsonrpc\": \"2.0\""),
    }
    let method = match envelope
        .method
        .map(|m| serde_json::from_str::<String>(m.get()))
    {
        Some(Ok(method)) => method,
        Some(Err(_)) => return invalid(answer_id, "method must be a string"),
        None => return invalid(answer_id, "missing method"),
    };
    let params = match envelope
        .params
        .map(|p| serde_json::from_str::<Value>(p.get()))
    {
        None | Some(Ok(Value::Null)) => Value::Array(Vec::new()),
        Some(Ok(p @ (Value::Array(_) | Value::Object(_)))) => p,
        Some(_) => {
            return Err(Failed {
                id: answer_id,
                error: RpcError::invalid_params("params must be an array or an object"),
            });
        }
    };
    Ok(Call { id, method, params })
}

/// The id of a response to a request whose id could not be read.
pub fn null_id() -> Id {
    Some(RawValue::from_string("null".into()).expect("null is JSON"))
}

#[derive(Serialize)]
struct Success<'a> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    result: &'a RawValue,
}

#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    error: &'a RpcError,
}

/// Serializes a response; notifications (no id) get none.
pub fn response(id: &Id, outcome: &Result<Box<RawValue>, RpcError>) -> Option<String> {
    let id = id.as_deref()?;
    let text = match outcome {
        Ok(result) => serde_json::to_string(&Success {
            jsonrpc: "2.0",
            id,
            result,
        }),
        Err(error) => serde_json::to_string(&Failure {
            jsonrpc: "2.0",
            id,
            error,
        }),
    };
    Some(text.expect("responses serialize"))
}

/// An error response to a request whose id is unknown.
pub fn error_response(error: &RpcError) -> String {
    response(&null_id(), &Err(error.clone())).expect("a null id still answers")
}

/// Joins batch responses; `None` when every call was a notification.
pub fn batch_response(parts: Vec<String>) -> Option<String> {
    (!parts.is_empty()).then(|| format!("[{}]", parts.join(",")))
}

/// Serializes a result value.
pub fn result<T: Serialize>(value: &T) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(value)
        .map_err(|e| RpcError::internal(format!("serializing the result: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn single(text: &str) -> Result<Call, Failed> {
        match parse(text.as_bytes(), 10).expect("parses") {
            Incoming::Single(call) => call,
            Incoming::Batch(_) => panic!("not a batch"),
        }
    }

    fn answer(id: &Id, outcome: Result<Box<RawValue>, RpcError>) -> Value {
        serde_json::from_str(&response(id, &outcome).expect("has id")).expect("json")
    }

    #[test]
    fn ids_are_echoed_verbatim() {
        for id in ["0", "null", "\"abc\"", "18446744073709551616", "1.5"] {
            let call = single(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_chainId"}}"#
            ))
            .expect("valid");
            let text = response(&call.id, &result(&"0x1")).expect("not a notification");
            assert_eq!(
                text,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"0x1"}}"#)
            );
        }
    }

    #[test]
    fn missing_params_and_notifications() {
        let call = single(r#"{"jsonrpc":"2.0","method":"net_version"}"#).expect("valid");
        assert!(call.is_notification());
        assert_eq!(call.params, json!([]));
        assert!(response(&call.id, &result(&1)).is_none());
        let call =
            single(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}"#).expect("valid");
        assert_eq!(call.params, json!({"a": 1}));
    }

    #[test]
    fn invalid_requests_get_their_codes() {
        let failed = |text| single(text).expect_err("invalid");
        let f = failed(r#"{"jsonrpc":"1.0","id":3,"method":"m"}"#);
        assert_eq!(
            answer(&f.id, Err(f.error)),
            json!({"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"jsonrpc must be \"2.0\""}})
        );
        assert_eq!(failed(r#"{"id":1,"method":"m"}"#).error.code, -32600);
        assert_eq!(
            failed(r#"{"jsonrpc":"2.0","id":1}"#).error.message,
            "missing method"
        );
        assert_eq!(
            failed(r#"{"jsonrpc":"2.0","id":[1],"method":"m"}"#)
                .error
                .code,
            -32600
        );
        assert_eq!(
            failed(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":5}"#)
                .error
                .code,
            -32602
        );
        assert_eq!(failed("5").error.code, -32600);
        assert_eq!(parse(b"{", 10).expect_err("bad json").code, -32700);
        assert_eq!(parse(b"[]", 10).expect_err("empty").code, -32600);
        let too_big = parse(b"[1,2,3]", 2).expect_err("too big");
        assert_eq!(too_big.code, -32005);
        assert!(
            too_big.message.contains("(limits.max_batch)"),
            "{}",
            too_big.message
        );
    }

    #[test]
    fn batches_mix_calls_and_failures() {
        let Incoming::Batch(items) =
            parse(br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"x":1}]"#, 10).expect("batch")
        else {
            panic!("expected a batch")
        };
        assert!(items[0].is_ok() && items[1].is_err());
        assert_eq!(
            batch_response(vec!["1".into(), "2".into()]).as_deref(),
            Some("[1,2]")
        );
        assert_eq!(batch_response(vec![]), None);
    }
}
