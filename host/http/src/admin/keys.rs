//! `/admin/keys`: `POST` makes a key (its secret in the answer, this once),
//! `GET` lists them; `/admin/keys/{id}`: `GET` one, `PATCH` changes its
//! name, plan, chains, methods or expiry, `DELETE` revokes it
//! (docs/src/operations.md, Keys and plans). Bodies are JSON objects;
//! errors are JSON-RPC error objects with an HTTP status.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::reply::json_error;
use crate::state::AppState;
use chainsieve_keys::manage::{Create, KeyError, Update};
use chainsieve_rpc::RpcError;

/// The fields a body may have.
const FIELDS: &str = "name, plan, chains, methods, expiresAt";

pub async fn list(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(json!({ "keys": state.keys.list() })).into_response()
}

pub async fn get(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    answer(StatusCode::OK, state.keys.view(&id))
}

pub async fn create(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let request = fields(&body).and_then(|mut fields| {
        let create = Create {
            name: take(&mut fields, "name")?.flatten(),
            plan: take(&mut fields, "plan")?.flatten(),
            chains: take(&mut fields, "chains")?.flatten(),
            methods: take(&mut fields, "methods")?.flatten(),
            expires_at: expiry(&mut fields)?.flatten(),
        };
        no_others(&fields)?;
        Ok(create)
    });
    match request {
        Ok(request) => answer(StatusCode::CREATED, state.keys.create(request).await),
        Err(error) => json_error(StatusCode::BAD_REQUEST, error),
    }
}

pub async fn update(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let request = fields(&body).and_then(|mut fields| {
        let plan = take::<String>(&mut fields, "plan")?;
        if matches!(plan, Some(None)) {
            return Err(RpcError::invalid_params(
                "plan cannot be null: every key has a plan",
            ));
        }
        let update = Update {
            name: take(&mut fields, "name")?,
            plan: plan.flatten(),
            chains: take(&mut fields, "chains")?,
            methods: take(&mut fields, "methods")?,
            expires_at: expiry(&mut fields)?,
        };
        no_others(&fields)?;
        Ok(update)
    });
    match request {
        Ok(request) => answer(StatusCode::OK, state.keys.update(&id, request).await),
        Err(error) => json_error(StatusCode::BAD_REQUEST, error),
    }
}

pub async fn revoke(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    answer(StatusCode::OK, state.keys.revoke(&id).await)
}

fn answer(status: StatusCode, outcome: Result<Value, KeyError>) -> Response {
    match outcome {
        Ok(view) => (status, axum::Json(view)).into_response(),
        Err(error) => {
            let message = error.to_string();
            let (status, error) = match error {
                KeyError::Invalid(_) => {
                    (StatusCode::BAD_REQUEST, RpcError::invalid_params(message))
                }
                KeyError::NotFound(_) => (StatusCode::NOT_FOUND, RpcError::not_found(message)),
                KeyError::Fixed(_) => (StatusCode::CONFLICT, RpcError::invalid_request(message)),
                KeyError::Conflict(_) => (StatusCode::CONFLICT, RpcError::generic(message)),
                KeyError::Failed(_) => {
                    tracing::error!(error = %message, "an admin request about keys failed");
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        RpcError::internal(message),
                    )
                }
            };
            json_error(status, error)
        }
    }
}

/// The body as a JSON object (an empty body is an empty object).
fn fields(body: &[u8]) -> Result<Map<String, Value>, RpcError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body).map_err(RpcError::parse)? {
        Value::Object(fields) => Ok(fields),
        _ => Err(RpcError::invalid_request(format!(
            "the body must be a JSON object with any of: {FIELDS}"
        ))),
    }
}

/// Field `name`, if given: `Some(None)` if it is `null`.
fn take<T: DeserializeOwned>(
    fields: &mut Map<String, Value>,
    name: &str,
) -> Result<Option<Option<T>>, RpcError> {
    match fields.remove(name) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(value) => serde_json::from_value(value)
            .map(|value| Some(Some(value)))
            .map_err(|error| RpcError::invalid_params(format!("{name}: {error}"))),
    }
}

/// `expiresAt`: Unix seconds, or an RFC 3339 time.
fn expiry(fields: &mut Map<String, Value>) -> Result<Option<Option<u64>>, RpcError> {
    match fields.remove("expiresAt") {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::Number(seconds)) => {
            seconds.as_u64().map(|at| Some(Some(at))).ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "expiresAt: {seconds} is not a whole number of Unix seconds"
                ))
            })
        }
        Some(Value::String(text)) => rfc3339(&text).map(|at| Some(Some(at))).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "expiresAt: \"{text}\" is not an RFC 3339 time (2027-01-31T00:00:00Z)"
            ))
        }),
        Some(other) => Err(RpcError::invalid_params(format!(
            "expiresAt: {other} is neither Unix seconds nor an RFC 3339 time"
        ))),
    }
}

/// An RFC 3339 time as Unix seconds.
pub(super) fn rfc3339(text: &str) -> Option<u64> {
    humantime::parse_rfc3339_weak(text)
        .ok()
        .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|since| since.as_secs())
}

fn no_others(fields: &Map<String, Value>) -> Result<(), RpcError> {
    match fields.keys().next() {
        Some(unknown) => Err(RpcError::invalid_params(format!(
            "unknown field \"{unknown}\" (expected any of: {FIELDS})"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(body: &str) -> Map<String, Value> {
        fields(body.as_bytes()).expect("an object")
    }

    #[test]
    fn fields_are_read_with_null_clearing_and_the_reason_for_a_bad_one() {
        let mut body =
            parsed(r#"{"name": null, "chains": ["eth"], "expiresAt": "2027-01-31T00:00:00Z"}"#);
        assert_eq!(take::<String>(&mut body, "name").expect("ok"), Some(None));
        assert_eq!(
            take::<Vec<String>>(&mut body, "chains").expect("ok"),
            Some(Some(vec!["eth".to_string()]))
        );
        assert_eq!(take::<String>(&mut body, "plan").expect("ok"), None);
        assert_eq!(expiry(&mut body).expect("ok"), Some(Some(1_801_353_600)));
        no_others(&body).expect("all read");

        let mut body = parsed(r#"{"chains": "eth", "expiresAt": -1, "plann": "x"}"#);
        let error = take::<Vec<String>>(&mut body, "chains").expect_err("not a list");
        assert!(
            error.message.starts_with("chains: invalid type"),
            "{}",
            error.message
        );
        let error = expiry(&mut body).expect_err("negative");
        assert!(error.message.contains("Unix seconds"), "{}", error.message);
        let error = no_others(&body).expect_err("unknown");
        assert!(
            error.message.contains("unknown field \"plann\""),
            "{}",
            error.message
        );
        assert_eq!(fields(b"[1]").expect_err("not an object").code, -32600);
        assert_eq!(fields(b"{").expect_err("not JSON").code, -32700);
        assert!(fields(b" ").expect("empty").is_empty());
    }
}
