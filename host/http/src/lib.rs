//! The HTTP side: one axum listener for every chain. `/{chain}/v1/{key}`
//! (and `/v1/{key}` for the default chain) answers JSON-RPC over HTTP POST
//! and upgrades to a WebSocket on GET. Unknown keys get HTTP 401 with a
//! JSON-RPC error body and no upgrade.
//!
//! - [`socket`] — accepted sockets, shared by a session's two halves;
//!   [`upgrade`] — the WebSocket handshake; [`session`] — one WebSocket
//!   connection;
//! - [`admin`] — `/admin/filters`; [`health`] — `/healthz`, `/readyz`;
//!   [`metrics`] — `/metrics`;
//! - [`connections`] — open WebSocket connections per key.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_chain`],
//! [`chainsieve_config`], [`chainsieve_fanout`], [`chainsieve_history`],
//! [`chainsieve_keys`], [`chainsieve_model`], [`chainsieve_node`],
//! [`chainsieve_rpc`], [`chainsieve_runtime`], [`chainsieve_usage`],
//! [`chainsieve_watchlists`], [`chainsieve_webhook`].

pub mod admin;
mod exposition;
pub mod health;
pub mod metrics;
mod reply;
pub mod session;
pub mod socket;
mod state;
pub mod upgrade;

use std::future::IntoFuture as _;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use chainsieve_chain::Chain;
use chainsieve_config::Role;
use chainsieve_keys::plan::{Limit, Plan};
use chainsieve_keys::{Key, KeyRefused};
use chainsieve_rpc::methods::{self};
use chainsieve_rpc::{RpcError, refused};
use socket::{Listener, Socket};
use upgrade::WebSocketRequest;

use reply::json_error;
pub use state::{AppState, Stats};

/// The routes.
pub fn router(state: Arc<AppState>) -> Router {
    let probes = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::metrics));
    let (routes, unknown) = match state.role {
        Role::Ingest => (
            probes,
            "this server is an ingest: it serves no clients; connect to an edge",
        ),
        Role::All | Role::Edge => (
            probes
                .route("/v1/{key}", get(ws_default).post(http_default))
                .merge(admin::routes(state.clone()))
                .route("/{chain}/v1/{key}", get(ws_chain).post(http_chain)),
            "unknown path; use /{chain}/v1/{key} or /v1/{key}",
        ),
    };
    routes
        .fallback(move || async move {
            json_error(StatusCode::NOT_FOUND, RpcError::invalid_request(unknown))
        })
        .with_state(state)
}

/// Serves `state` on `listener` until `shutdown` is cancelled or a
/// critical task fails, then waits for every WebSocket session to close
/// (each within its close timeout) and every background task to end; a
/// critical task's failure is then the error answered.
pub async fn serve(listener: TcpListener, state: Arc<AppState>) -> anyhow::Result<()> {
    let shutdown = state.shutdown.clone();
    let sessions = state.sessions.clone();
    let tasks = state.tasks.clone();
    // Each request carries its connection's socket, for a WebSocket
    // session to write to.
    let app = router(state).into_make_service_with_connect_info::<Socket>();
    // A critical task's failure stops the server as a signal does, and
    // is what `serve` answers once everything has stopped.
    let failure = {
        let (tasks, shutdown) = (tasks.clone(), shutdown.clone());
        async move {
            tokio::select! {
                () = shutdown.cancelled() => None,
                reason = tasks.failed() => {
                    shutdown.cancel();
                    Some(reason)
                }
            }
        }
    };
    let served = axum::serve(Listener::new(listener), app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .into_future();
    let (served, failure) = tokio::join!(served, failure);
    let served = served.context("serving HTTP");
    sessions.close();
    sessions.wait().await;
    tasks.close();
    tasks.wait().await;
    match failure {
        Some(reason) => Err(anyhow::anyhow!("{reason}")),
        None => served,
    }
}

/// Who calls, on what: an authorized request's chain, key and its plan.
struct Caller {
    chain: Arc<Chain>,
    key: Arc<Key>,
    plan: Arc<Plan>,
}

/// Resolves the chain and checks the key; the error is the HTTP answer.
fn authorize(
    state: &AppState,
    chain: &str,
    secret: &str,
) -> Result<Caller, (StatusCode, RpcError)> {
    let Some(chain) = state.chains.get(chain) else {
        let known: Vec<&str> = state.chains.keys().map(String::as_str).collect();
        return Err((
            StatusCode::NOT_FOUND,
            RpcError::invalid_request(format!(
                "unknown chain \"{chain}\" (served: {})",
                known.join(", ")
            )),
        ));
    };
    let refusal = |refusal: KeyRefused| {
        let status = match refusal {
            KeyRefused::Unknown | KeyRefused::Revoked | KeyRefused::Expired => {
                StatusCode::UNAUTHORIZED
            }
            KeyRefused::NoPlan(_) | KeyRefused::Chain(_) => StatusCode::FORBIDDEN,
        };
        (status, refused(&refusal))
    };
    let key = state.keys.find(secret).map_err(refusal)?;
    let (_, plan) = key.admit(&chain.name).map_err(refusal)?;
    Ok(Caller {
        chain: chain.clone(),
        key,
        plan,
    })
}

async fn http_default(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    let chain = state.default_chain.clone();
    http(state, &chain, &key, body).await
}

async fn http_chain(
    State(state): State<Arc<AppState>>,
    Path((chain, key)): Path<(String, String)>,
    body: Body,
) -> Response {
    http(state, &chain, &key, body).await
}

async fn http(state: Arc<AppState>, chain: &str, key: &str, body: Body) -> Response {
    let Caller { chain, key, .. } = match authorize(&state, chain, key) {
        Ok(found) => found,
        Err((status, error)) => return json_error(status, error),
    };
    let limit = state.limits.max_request_bytes;
    let bytes = match to_bytes(body, limit).await {
        Ok(bytes) => bytes,
        Err(error) if is_length_limit(&error) => {
            return json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                RpcError::limit_exceeded(format!(
                    "request body exceeds the limit of {limit} bytes (limits.max_request_bytes)"
                )),
            );
        }
        Err(error) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                RpcError::invalid_request(format!("the request body could not be read: {error}")),
            );
        }
    };
    let ctx = state.rpc_context(&chain, &key, None);
    match methods::process(ctx, &bytes).await.response {
        Some(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

/// Whether reading a body failed on the size limit (rather than, say, a
/// connection that broke mid-body).
fn is_length_limit(error: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

async fn ws_default(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    ws: WebSocketRequest,
) -> Response {
    let chain = state.default_chain.clone();
    upgrade(state, &chain, &key, ws)
}

async fn ws_chain(
    State(state): State<Arc<AppState>>,
    Path((chain, key)): Path<(String, String)>,
    ws: WebSocketRequest,
) -> Response {
    upgrade(state, &chain, &key, ws)
}

/// Bytes read from a WebSocket at a time.
const READ_BUFFER: usize = 512;

fn upgrade(state: Arc<AppState>, chain: &str, key: &str, ws: WebSocketRequest) -> Response {
    let Caller { chain, key, plan } = match authorize(&state, chain, key) {
        Ok(found) => found,
        Err((status, error)) => return json_error(status, error),
    };
    let limit = plan.max_connections;
    let Some(permit) = state.connections.open(&key.id, limit) else {
        return json_error(
            StatusCode::TOO_MANY_REQUESTS,
            RpcError::limit_exceeded(format!(
                "connection limit reached: this API key has {limit} open WebSocket connections, the most its plan \"{}\" allows ({})",
                plan.name,
                plan.origin(Limit::Connections)
            )),
        );
    };
    // Frames up to the transport limit are read, so that a frame over the
    // request limit is answered with -32005 instead of a dropped socket.
    let transport_limit = state
        .limits
        .max_request_bytes
        .saturating_mul(4)
        .max(16 << 20);
    // tungstenite's default 128 KiB read buffer per socket would be most
    // of an idle connection's memory (measured with the load benchmark:
    // 140 KiB per connection with it, 10.7 with 4 KiB, 7.4 with 512 B);
    // JSON-RPC requests are small, and a larger frame is still read, in
    // more chunks.
    let config = WebSocketConfig::default()
        .max_message_size(Some(transport_limit))
        .max_frame_size(Some(transport_limit))
        .read_buffer_size(READ_BUFFER);
    ws.accept(config, move |reader, socket| {
        let sessions = state.sessions.clone();
        sessions.track_future(async move {
            let open = state.metrics.connections(&chain.name);
            open.inc();
            session::serve(reader, socket, state, chain, key).await;
            open.dec();
            drop(permit);
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn body_errors_tell_the_size_limit_from_a_broken_body() {
        let too_big = to_bytes(Body::from(vec![0u8; 16]), 8)
            .await
            .expect_err("over the limit");
        assert!(is_length_limit(&too_big));
        let broken = Body::from_stream(futures_util::stream::iter([
            Ok(axum::body::Bytes::from_static(b"{")),
            Err(std::io::Error::other("connection reset")),
        ]));
        let broken = to_bytes(broken, 1_024).await.expect_err("a broken body");
        assert!(!is_length_limit(&broken));
    }
}
