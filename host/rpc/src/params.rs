//! Reading positional parameters and the hex values every method takes,
//! with the messages a client needs to fix its call.

use serde_json::Value;

use super::RpcError;

/// Positional parameter `i`, if any.
pub(super) fn positional(params: &Value, i: usize) -> Option<&Value> {
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

/// A canonical hex quantity (`0x0`, `0x1a`), as EIP-1474 requires.
pub(super) fn parse_quantity(text: &str) -> Option<u64> {
    let digits = text.strip_prefix("0x")?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// `0x` + exactly 2·N hex digits, any case.
pub(super) fn parse_fixed<T: std::str::FromStr>(text: &str) -> Option<T> {
    let digits = text.strip_prefix("0x")?;
    (digits.len() == 2 * std::mem::size_of::<T>() && digits.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// `0x` + hex digit pairs, any number of them.
pub(super) fn parse_bytes(text: &str) -> Option<Vec<u8>> {
    alloy_primitives::hex::decode(text.strip_prefix("0x")?).ok()
}

/// A fixed-size hex value (a hash, an address) named `what` in the
/// errors.
pub(super) fn fixed_value<T: std::str::FromStr>(value: &Value, what: &str) -> Result<T, RpcError> {
    match value {
        Value::String(text) => parse_fixed(text).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "invalid {what} \"{text}\": expected 0x and {} hex digits",
                2 * std::mem::size_of::<T>()
            ))
        }),
        other => Err(RpcError::invalid_params(format!("invalid {what} {other}"))),
    }
}

/// Positional parameter `i` of `method`, a fixed-size hex value named
/// `what` in the errors (`the block hash`, `the address`).
pub(super) fn fixed_param<T: std::str::FromStr>(
    params: &Value,
    i: usize,
    method: &str,
    what: &str,
) -> Result<T, RpcError> {
    require_positional(params, method)?;
    match positional(params, i) {
        Some(value @ Value::String(_)) => fixed_value(value, what),
        _ => Err(RpcError::invalid_params(format!(
            "{method} takes {what} (a string)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{Address, B256};

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
}
