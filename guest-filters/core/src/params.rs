//! Parsing `eth_subscribe` parameters with errors a client can act on. Each
//! message names the field and what was wrong; the host sends it back as
//! JSON-RPC error -32602, or -32005 when it starts with [`LIMIT_EXCEEDED`].

use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The cap on the addresses (or topics) one filter may name
/// (docs/src/api.md, Filter parameters), so a single subscription
/// cannot bloat an index; the host's `filters.max_values` overrides it.
pub const DEFAULT_MAX_FILTER_VALUES: usize = 1_000;

/// The environment variable through which the host passes
/// `filters.max_values` to every component (WASI environment: the
/// `chainsieve:filter@0.1.0` world has no configuration call).
pub const MAX_FILTER_VALUES_ENV: &str = "CHAINSIEVE_MAX_FILTER_VALUES";

/// The most values one filter may name: the host's setting, else the
/// default. Read once per instance.
pub fn max_filter_values() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var(MAX_FILTER_VALUES_ENV)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(DEFAULT_MAX_FILTER_VALUES)
    })
}

/// How a refusal message says that the parameters were well-formed but
/// exceeded a limit: the host answers such a refusal with JSON-RPC error
/// -32005 (limit exceeded) instead of -32602. The `subscribe` export can
/// only return a string, so the prefix is the contract.
pub const LIMIT_EXCEEDED: &str = "limit exceeded: ";

/// Why a subscription's parameters were refused; the message is for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamsError(String);

impl ParamsError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// Well-formed parameters over one of the filter's limits (the host
    /// answers -32005).
    pub fn limit(message: impl fmt::Display) -> Self {
        Self(format!("{LIMIT_EXCEEDED}{message}"))
    }

    /// Whether this is a limit (made by [`ParamsError::limit`]).
    pub fn is_limit(&self) -> bool {
        self.0.starts_with(LIMIT_EXCEEDED)
    }
}

impl fmt::Display for ParamsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParamsError {}

/// Parses the parameter array the host passes to `subscribe`.
pub fn array(params: &str) -> Result<Vec<Value>, ParamsError> {
    match serde_json::from_str(params) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(_) => Err(ParamsError::new(
            "subscription parameters must be a JSON array",
        )),
        Err(e) => Err(ParamsError::new(format!(
            "subscription parameters are not valid JSON: {e}"
        ))),
    }
}

/// Refuses more than `max` parameters after the topic name.
pub fn at_most(params: &[Value], max: usize, topic: &str) -> Result<(), ParamsError> {
    if params.len() > max {
        let allowed = match max {
            0 => "no parameters".to_string(),
            1 => "one parameter".to_string(),
            n => format!("{n} parameters"),
        };
        return Err(ParamsError::new(format!(
            "{topic} takes {allowed}, got {}",
            params.len()
        )));
    }
    Ok(())
}

/// The filter object of a subscription, refusing keys it does not know so a
/// misspelt field is an error rather than a silently wider filter.
pub fn object<'a>(value: &'a Value, known: &[&str]) -> Result<&'a Map<String, Value>, ParamsError> {
    let map = value.as_object().ok_or_else(|| {
        ParamsError::new(format!("filter must be an object, got {}", kind(value)))
    })?;
    if let Some(unknown) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ParamsError::new(format!(
            "unknown filter field \"{unknown}\" (expected one of: {})",
            known.join(", ")
        )));
    }
    Ok(map)
}

/// The one optional filter object most topics take (`[]`, `[null]` and
/// `[{}]` alike mean no constraint): its fields, none but `known`.
pub fn filter_object(
    params: &str,
    topic: &str,
    known: &[&str],
) -> Result<Map<String, Value>, ParamsError> {
    let items = array(params)?;
    at_most(&items, 1, topic)?;
    match items.first().filter(|v| !v.is_null()) {
        Some(filter) => object(filter, known).cloned(),
        None => Ok(Map::new()),
    }
}

/// Parses `0x` + 2·N hex digits, any case.
pub fn fixed_hex<const N: usize>(value: &Value, what: &str) -> Result<[u8; N], ParamsError> {
    let text = value.as_str().ok_or_else(|| {
        ParamsError::new(format!("{what} must be a hex string, got {}", kind(value)))
    })?;
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .ok_or_else(|| ParamsError::new(format!("{what} \"{text}\" must start with 0x")))?;
    let mut out = [0u8; N];
    if digits.len() != 2 * N {
        return Err(ParamsError::new(format!(
            "{what} \"{text}\" must have {} hex digits after 0x, has {}",
            2 * N,
            digits.len()
        )));
    }
    hex::decode_to_slice(digits, &mut out)
        .map_err(|_| ParamsError::new(format!("{what} \"{text}\" is not valid hex")))?;
    Ok(out)
}

/// A uint256 from a decimal string (up to 2^128) or `0x` hex (up to 64
/// digits), big-endian, so byte order is numeric order.
pub fn uint256(value: &Value, what: &str) -> Result<[u8; 32], ParamsError> {
    let bad = || {
        ParamsError::new(format!(
            "{what} must be a decimal or 0x-hex string of a uint256, got {value}"
        ))
    };
    let text = value.as_str().ok_or_else(bad)?;
    let mut out = [0u8; 32];
    if let Some(digits) = text.strip_prefix("0x") {
        if digits.is_empty() || digits.len() > 64 {
            return Err(bad());
        }
        let padded = format!("{digits:0>64}");
        hex::decode_to_slice(padded, &mut out).map_err(|_| bad())?;
    } else {
        let n: u128 = text.parse().map_err(|_| bad())?;
        out[16..].copy_from_slice(&n.to_be_bytes());
    }
    Ok(out)
}

/// An optional uint256 field ([`uint256`]); absent or `null` is zero.
pub fn optional_uint256(value: Option<&Value>, what: &str) -> Result<[u8; 32], ParamsError> {
    match value {
        None | Some(Value::Null) => Ok([0; 32]),
        Some(value) => uint256(value, what),
    }
}

/// The addresses a filter field names: listed, or the watchlist the
/// client named there (contract 0.3: the host hands the component
/// `{"watchlist": <number>}` in place of the client's name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddressSet {
    Listed(Vec<[u8; 20]>),
    Watchlist(u32),
}

impl AddressSet {
    /// The listed addresses; none for a watchlist.
    pub fn listed(&self) -> &[[u8; 20]] {
        match self {
            AddressSet::Listed(addresses) => addresses,
            AddressSet::Watchlist(_) => &[],
        }
    }

    /// The watchlist named, if one is.
    pub fn watchlist(&self) -> Option<u32> {
        match self {
            AddressSet::Listed(_) => None,
            AddressSet::Watchlist(number) => Some(*number),
        }
    }

    /// Whether it names no address and no watchlist (no constraint).
    pub fn is_empty(&self) -> bool {
        matches!(self, AddressSet::Listed(addresses) if addresses.is_empty())
    }
}

/// A field of addresses ([`hex_list`]) or a watchlist
/// (`{"watchlist": <number>}`).
pub fn address_set(value: Option<&Value>, what: &str) -> Result<AddressSet, ParamsError> {
    match value {
        Some(object @ Value::Object(_)) => watchlist(object, what).map(AddressSet::Watchlist),
        other => hex_list::<20>(other, what).map(AddressSet::Listed),
    }
}

/// The number of `{"watchlist": <number>}`, the only shape a watchlist
/// reaches a component in.
pub fn watchlist(value: &Value, what: &str) -> Result<u32, ParamsError> {
    let number = value.get("watchlist").and_then(Value::as_u64);
    match (value.as_object().map(Map::len), number) {
        (Some(1), Some(number)) => u32::try_from(number)
            .map_err(|_| ParamsError::new(format!("{what}: watchlist {number} is out of range"))),
        _ => Err(ParamsError::new(format!(
            "{what} must be a hex string, an array of them, or {{\"watchlist\": name}}"
        ))),
    }
}

/// A list field that may also be given as a single string (as geth allows
/// for `address`). Absent, `null` and `[]` all mean "no constraint" and
/// return an empty list.
pub fn hex_list<const N: usize>(
    value: Option<&Value>,
    what: &str,
) -> Result<Vec<[u8; N]>, ParamsError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(single @ Value::String(_)) => Ok(vec![fixed_hex(single, what)?]),
        Some(Value::Array(items)) => {
            if items.len() > max_filter_values() {
                return Err(too_many(what, items.len()));
            }
            items.iter().map(|item| fixed_hex(item, what)).collect()
        }
        Some(other) => Err(ParamsError::new(format!(
            "{what} must be a hex string or an array of them, got {}",
            kind(other)
        ))),
    }
}

/// The error for a filter naming more than [`max_filter_values`] values.
pub fn too_many(what: &str, count: usize) -> ParamsError {
    ParamsError::limit(format_args!(
        "too many values in {what}: {count} (at most {} per filter, filters.max_values)",
        max_filter_values()
    ))
}

/// A short name for a JSON value's type, for messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn addresses_parse_in_any_case() {
        let lower = fixed_hex::<20>(
            &json!("0xabcdef0123456789abcdef0123456789abcdef01"),
            "address",
        );
        let upper = fixed_hex::<20>(
            &json!("0xABCDEF0123456789ABCDEF0123456789ABCDEF01"),
            "address",
        );
        assert_eq!(lower, upper);
        assert_eq!(lower.expect("valid")[0], 0xab);
    }

    #[test]
    fn bad_hex_says_what_is_wrong() {
        let err = |v| {
            fixed_hex::<20>(&v, "fromAddress")
                .expect_err("invalid")
                .to_string()
        };
        assert!(
            err(json!("abcdef0123456789abcdef0123456789abcdef01")).contains("must start with 0x")
        );
        assert!(err(json!("0x1234")).contains("must have 40 hex digits after 0x, has 4"));
        assert!(err(json!("0xzzcdef0123456789abcdef0123456789abcdef01")).contains("not valid hex"));
        assert!(err(json!(12)).contains("fromAddress must be a hex string, got a number"));
    }

    #[test]
    fn lists_accept_a_single_string_and_treat_empty_as_no_constraint() {
        let one = hex_list::<4>(Some(&json!("0xa9059cbb")), "methodIds").expect("valid");
        assert_eq!(one, vec![[0xa9, 0x05, 0x9c, 0xbb]]);
        assert!(hex_list::<4>(None, "methodIds").expect("absent").is_empty());
        assert!(
            hex_list::<4>(Some(&Value::Null), "methodIds")
                .expect("null")
                .is_empty()
        );
        assert!(
            hex_list::<4>(Some(&json!([])), "methodIds")
                .expect("empty")
                .is_empty()
        );
        assert!(hex_list::<4>(Some(&json!({})), "methodIds").is_err());
    }

    #[test]
    fn amounts_are_decimal_or_hex_uint256() {
        let amount = |text: &str| uint256(&Value::String(text.into()), "minAmount");
        let mut thousand = [0u8; 32];
        thousand[30..].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(amount("1000"), Ok(thousand));
        assert_eq!(amount("0x3e8"), Ok(thousand));
        assert_eq!(amount(&format!("0x{}", "f".repeat(64))), Ok([0xff; 32]));
        for bad in [
            "",
            "0x",
            "-1",
            "1e3",
            "0xzz",
            &format!("0x{}", "1".repeat(65)),
        ] {
            let refused = amount(bad).expect_err(bad);
            assert!(
                refused.to_string().contains("minAmount must be"),
                "{refused}"
            );
        }
        assert!(uint256(&Value::Bool(true), "minAmount").is_err());
    }

    #[test]
    fn lists_are_capped() {
        let many: Vec<Value> = (0..=DEFAULT_MAX_FILTER_VALUES)
            .map(|i| json!(format!("0x{i:08x}")))
            .collect();
        let err = hex_list::<4>(Some(&Value::Array(many)), "methodIds").expect_err("over the cap");
        assert_eq!(
            err.to_string(),
            "limit exceeded: too many values in methodIds: 1001 (at most 1000 per filter, filters.max_values)"
        );
    }

    #[test]
    fn objects_refuse_unknown_fields() {
        let err =
            object(&json!({"fromAdress": []}), &["fromAddress", "toAddress"]).expect_err("typo");
        assert!(
            err.to_string()
                .contains("unknown filter field \"fromAdress\"")
        );
        assert!(
            object(&json!([]), &[])
                .expect_err("not an object")
                .to_string()
                .contains("an array")
        );
    }

    #[test]
    fn params_must_be_an_array() {
        assert_eq!(array("[1, true]").expect("array").len(), 2);
        assert!(array("{}").is_err());
        assert!(
            array("[")
                .expect_err("bad json")
                .to_string()
                .contains("not valid JSON")
        );
        assert!(
            at_most(&[json!(1), json!(2)], 1, "logs")
                .expect_err("two")
                .to_string()
                .contains("logs takes one parameter, got 2")
        );
    }
}
