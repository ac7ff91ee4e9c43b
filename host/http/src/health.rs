//! Probes for orchestrators: `/healthz` answers while the process serves;
//! `/readyz` answers 200 only when every chain's source is live (the
//! devnet once its history is in place; a node source once subscribed; an
//! edge once the log's tail is in place), else 503 with each chain's state
//! (a standby ingest's: `standby`; a node chain whose tip stays put while
//! its nodes go on: `stuck`, with the reason) and no supervised task of
//! it or of the server's services is in trouble (a chain's or service's
//! `restarting` or `failed`, with the reason; docs/src/operations.md,
//! Supervision). A chain this process reads nodes for gives its head and
//! lists each node's state, head and lag behind the chain, negative for a
//! node ahead of it (docs/src/nodes.md, Node health).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::state::AppState;
use chainsieve_model::SourceState;
use chainsieve_node::health::lag;
use chainsieve_runtime::tasks::{Part, trouble_among};

pub async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let standings = state.tasks.standings();
    let trouble_of = |part: &Part| standings.get(part).and_then(trouble_among);
    let mut chains = Map::new();
    let mut ready = true;
    for (name, chain) in &state.chains {
        let status = chain.source_status();
        let synced = chain.is_synced();
        ready &= synced && status == SourceState::Live;
        let mut entry = match status {
            SourceState::Live if !synced => json!({"state": "syncing"}),
            SourceState::Live => json!({"state": "live"}),
            SourceState::Connecting => json!({"state": "connecting"}),
            SourceState::Down { reason } => json!({"state": "down", "reason": reason}),
            SourceState::Stuck { reason } => json!({"state": "stuck", "reason": reason}),
            SourceState::Standby => json!({"state": "standby"}),
        };
        if let Some(trouble) = trouble_of(&Part::Chain(name.clone())) {
            ready = false;
            entry["state"] = json!(trouble.state());
            entry["reason"] = json!(trouble.reason());
        }
        if let (Some(pool), Some(_)) = (chain.node(), chain.node_status()) {
            let tip = chain.canonical().tip().map(|b| b.number());
            let nodes: Vec<Value> = pool
                .states()
                .into_iter()
                .map(|(name, state, head)| {
                    let mut node = json!({"name": name, "state": state.name(), "head": head});
                    if let (Some(tip), Some(head)) = (tip, head) {
                        node["lag"] = json!(lag(tip, head));
                    }
                    if let Some(reason) = state.reason() {
                        node["reason"] = json!(reason);
                    }
                    node
                })
                .collect();
            entry["head"] = json!(tip);
            entry["nodes"] = Value::Array(nodes);
        }
        chains.insert(name.clone(), entry);
    }
    let mut parts = Map::new();
    for part in standings.keys() {
        let Part::Service(service) = part else {
            continue;
        };
        let entry = match trouble_of(part) {
            Some(trouble) => {
                ready = false;
                json!({"state": trouble.state(), "reason": trouble.reason()})
            }
            None => json!({"state": "ready"}),
        };
        parts.insert(service.to_string(), entry);
    }
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        Json(json!({
            "ready": ready,
            "chains": Value::Object(chains),
            "parts": Value::Object(parts),
        })),
    )
        .into_response()
}
