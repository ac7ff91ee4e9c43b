//! A refused request's answer: its JSON-RPC error as the body of an HTTP
//! status.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use chainsieve_rpc::{RpcError, error_response};

/// `error` as the JSON body of a `status` response.
pub(crate) fn json_error(status: StatusCode, error: RpcError) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        error_response(&error),
    )
        .into_response()
}
