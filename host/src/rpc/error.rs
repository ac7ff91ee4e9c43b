//! JSON-RPC errors with their EIP-1474 codes. Every message says what was
//! wrong, so a client can fix its request without reading server logs.

use serde::Serialize;

/// EIP-1474 error codes used by chainsieve.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const GENERIC: i64 = -32000;
    pub const NOT_FOUND: i64 = -32001;
    pub const LIMIT_EXCEEDED: i64 = -32005;
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn parse(detail: impl std::fmt::Display) -> Self {
        Self::new(code::PARSE_ERROR, format!("parse error: {detail}"))
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_REQUEST, message)
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            code::METHOD_NOT_FOUND,
            format!("the method {method} does not exist/is not available"),
        )
    }

    /// -32601 with a message of its own: the method exists, not here.
    pub fn method_not_found_msg(message: &str) -> Self {
        Self::new(code::METHOD_NOT_FOUND, message)
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(code::INTERNAL, message)
    }

    pub fn generic(message: impl Into<String>) -> Self {
        Self::new(code::GENERIC, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(code::NOT_FOUND, message)
    }

    pub fn limit_exceeded(message: impl Into<String>) -> Self {
        Self::new(code::LIMIT_EXCEEDED, message)
    }
}
