//! `GET /admin/keys/{id}/usage`: what a key used, hour by hour
//! (docs/src/operations.md, Usage).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::keys::rfc3339;
use crate::reply::json_error;
use crate::state::AppState;
use chainsieve_rpc::RpcError;
use chainsieve_usage::ledger::check_range;
use chainsieve_usage::{Counts, HOUR};

/// `GET /admin/keys/{id}/usage?from=…&to=…`: the key's hourly buckets
/// (Unix seconds or RFC 3339 times; the last 24 hours by default), each
/// hour's counts and their total.
pub async fn usage(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(ledger) = &state.ledger else {
        return json_error(
            StatusCode::NOT_FOUND,
            RpcError::invalid_request(
                "usage is not counted on this server ([usage] enabled = false)",
            ),
        );
    };
    let Some(key) = state.keys.by_id(&id) else {
        return json_error(
            StatusCode::NOT_FOUND,
            RpcError::not_found(format!("no key {id}")),
        );
    };
    let Some(meter) = &key.meter else {
        return json_error(
            StatusCode::NOT_FOUND,
            RpcError::not_found(format!("no usage of key {id}")),
        );
    };
    let now = chainsieve_runtime::clock::unix_now();
    let time = |name: &str, default: u64| match query.get(name) {
        None => Ok(default),
        Some(text) => text.parse().ok().or_else(|| rfc3339(text)).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "{name}: \"{text}\" is neither Unix seconds nor an RFC 3339 time"
            ))
        }),
    };
    let range = time("from", now.saturating_sub(24 * HOUR)).and_then(|from| {
        let to = time("to", now)?;
        check_range(from, to).map_err(RpcError::invalid_params)?;
        Ok((from, to))
    });
    let (from, to) = match range {
        Ok(range) => range,
        Err(error) => return json_error(StatusCode::BAD_REQUEST, error),
    };
    match ledger.usage(&id, meter, from, to).await {
        Ok(hours) => {
            let mut total = Counts::default();
            let hours: Vec<Value> = hours
                .into_iter()
                .map(|(hour, counts)| {
                    total.add(&counts);
                    let mut bucket = serde_json::to_value(&counts).unwrap_or_default();
                    bucket["hour"] = hour.into();
                    bucket
                })
                .collect();
            axum::Json(json!({"id": id, "from": from, "to": to, "hours": hours, "total": total}))
                .into_response()
        }
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "reading a key's usage failed");
            json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                RpcError::internal(format!("{error:#}")),
            )
        }
    }
}
