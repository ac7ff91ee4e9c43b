//! `GET /admin/filters`: what every chain runs for every topic (the
//! component, its hash and contract version, when it loaded, its live
//! subscriptions, failures, whether it is disabled) and the files of the
//! filters directory that are not served, with the reason.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::http::AppState;

pub async fn filters(State(state): State<Arc<AppState>>) -> Response {
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
