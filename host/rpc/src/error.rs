//! JSON-RPC errors with their EIP-1474 codes. Every message says what was
//! wrong, so a client can fix its request without reading server logs.

use serde::Serialize;
use serde_json::value::RawValue;

use chainsieve_keys::KeyRefused;

/// The error for a key that may not be used (as it is, or on this chain):
/// -32000 when it is not a key any more, -32004 when its plan or grant
/// leaves the chain out.
pub fn refused(refusal: &KeyRefused) -> RpcError {
    match refusal {
        KeyRefused::Unknown | KeyRefused::Revoked | KeyRefused::Expired => {
            RpcError::generic(refusal.to_string())
        }
        KeyRefused::NoPlan(_) | KeyRefused::Chain(_) => {
            RpcError::not_supported(refusal.to_string())
        }
    }
}

/// EIP-1474 error codes used by chainsieve.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const GENERIC: i64 = -32000;
    pub const NOT_FOUND: i64 = -32001;
    pub const UNAVAILABLE: i64 = -32002;
    pub const NOT_SUPPORTED: i64 = -32004;
    pub const LIMIT_EXCEEDED: i64 = -32005;
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    /// A node's `data`, passed on as it wrote it (a revert's reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<ErrorData>,
}

/// Raw JSON, compared by its text.
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct ErrorData(pub Box<RawValue>);

impl PartialEq for ErrorData {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for ErrorData {}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// A node's error answer, passed on unchanged.
    pub fn from_node(code: i64, message: String, data: Option<Box<RawValue>>) -> Self {
        Self {
            code,
            message,
            data: data.map(ErrorData),
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

    /// -32002: what the call needs (the chain's node) is unavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(code::UNAVAILABLE, message)
    }

    /// -32004: the method exists and is served, not to this caller (its
    /// key's plan leaves it out).
    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(code::NOT_SUPPORTED, message)
    }

    pub fn limit_exceeded(message: impl Into<String>) -> Self {
        Self::new(code::LIMIT_EXCEEDED, message)
    }
}
