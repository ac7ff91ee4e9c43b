//! Admin endpoints, behind `Authorization: Bearer <auth.admin_token>`:
//! `GET /admin/filters` lists what every chain runs for every topic (the
//! component, its hash and contract version, when it loaded, its live
//! subscriptions, failures, whether it is disabled) and the files of the
//! filters directory that are not served, with the reason.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use super::{AppState, json_error};
use crate::rpc::RpcError;

pub async fn filters(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Some(refusal) = refusal(&state, &headers) {
        return refusal;
    }
    let mut filters = Vec::new();
    for (chain_name, chain) in &state.chains {
        for (topic, handle) in chain.filters().iter() {
            let status = handle.status();
            filters.push(json!({
                "chain": chain_name,
                "topic": topic,
                "source": handle.source.name(),
                "origin": status.origin,
                "hash": status.hash,
                "version": status.version,
                "loadedAt": status
                    .loaded_at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| since.as_secs()),
                "subscriptions": handle.subscriber_count(),
                "failures": status.failures,
                "disabled": status.disabled,
            }));
        }
    }
    let report = state.filter_reloads.borrow().clone();
    let rejected: Vec<Value> = report
        .rejected
        .iter()
        .map(|r| json!({"file": r.file.display().to_string(), "reason": r.reason}))
        .collect();
    axum::Json(json!({
        "filters": filters,
        "rejected": rejected,
        "scans": report.scans,
    }))
    .into_response()
}

/// The answer to a request that may not see the admin view: 404 (off)
/// without a configured token, 401 for a missing or wrong one.
fn refusal(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    let Some(token) = &state.admin_token else {
        return Some(json_error(
            StatusCode::NOT_FOUND,
            RpcError::invalid_request("the admin endpoints are off; set auth.admin_token"),
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    // Compared in constant time: the token guards the whole server.
    let matches = given.is_some_and(|given| bool::from(given.as_bytes().ct_eq(token.as_bytes())));
    (!matches).then(|| {
        json_error(
            StatusCode::UNAUTHORIZED,
            RpcError::invalid_request("missing or wrong admin token (Authorization: Bearer …)"),
        )
    })
}
