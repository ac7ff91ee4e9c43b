//! `GET /admin/filters`: what every chain runs for every topic (the
//! component, its hash and contract version, when it loaded, its live
//! subscriptions, failures, whether it is disabled) and the files of the
//! filters directory that are not served, with the reason.
//! `PUT /admin/filters/{topic}` uploads a component (its bytes the body),
//! `DELETE` removes the upload (docs/src/filters.md, Uploading a filter).

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::reply::json_error;
use crate::state::AppState;
use chainsieve_chain::uploads::UploadError;
use chainsieve_rpc::RpcError;

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

/// `PUT /admin/filters/{topic}`: the component in the body, checked as a
/// file of the filters directory would be, kept and served on every chain
/// (on the bus, every edge).
pub async fn upload(
    State(state): State<Arc<AppState>>,
    Path(topic): Path<String>,
    body: Bytes,
) -> Response {
    let Some(uploads) = &state.uploads else {
        return off();
    };
    match uploads.put(&topic, body.to_vec()).await {
        Ok(accepted) => {
            let refused: Vec<Value> = accepted
                .refused
                .iter()
                .map(|r| json!({"reason": r.reason}))
                .collect();
            axum::Json(json!({
                "topic": topic,
                "hash": accepted.hash,
                "version": accepted.version,
                "origin": chainsieve_chain::reload::upload_origin(&topic),
                "refused": refused,
            }))
            .into_response()
        }
        Err(error) => refusal(error),
    }
}

/// `DELETE /admin/filters/{topic}`: the upload removed; the directory's
/// file or the built-in of the topic serves again, or its subscriptions
/// end.
pub async fn remove(State(state): State<Arc<AppState>>, Path(topic): Path<String>) -> Response {
    let Some(uploads) = &state.uploads else {
        return off();
    };
    match uploads.remove(&topic).await {
        Ok(()) => axum::Json(json!({"topic": topic, "removed": true})).into_response(),
        Err(error) => refusal(error),
    }
}

fn off() -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        RpcError::invalid_request("this server serves no filters"),
    )
}

fn refusal(error: UploadError) -> Response {
    let message = error.to_string();
    let (status, error) = match error {
        UploadError::Invalid(_) => (StatusCode::BAD_REQUEST, RpcError::invalid_params(message)),
        UploadError::NotFound(_) => (StatusCode::NOT_FOUND, RpcError::not_found(message)),
        UploadError::Failed(_) => {
            tracing::error!(error = %message, "an upload failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                RpcError::internal(message),
            )
        }
    };
    json_error(status, error)
}
