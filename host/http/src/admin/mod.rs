//! Admin endpoints, behind `Authorization: Bearer <auth.admin_token>`
//! (docs/src/operations.md): [`filters`] — what every chain runs;
//! [`keys`] — API keys made, listed, re-planned and revoked while the
//! server runs; [`usage`] — what each used, hour by hour.

mod filters;
mod keys;
mod usage;
mod watchlists;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, put};
use subtle::ConstantTimeEq;

use crate::reply::json_error;
use crate::state::AppState;
use chainsieve_chain::uploads::MAX_UPLOAD_BYTES;
use chainsieve_rpc::RpcError;

/// The admin routes, each behind the token.
pub fn routes(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/admin/filters", get(filters::filters))
        .route(
            "/admin/filters/{topic}",
            put(filters::upload)
                .delete(filters::remove)
                .layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES)),
        )
        .route("/admin/keys", get(keys::list).post(keys::create))
        .route(
            "/admin/keys/{id}",
            get(keys::get).patch(keys::update).delete(keys::revoke),
        )
        .route("/admin/keys/{id}/usage", get(usage::usage))
        .route("/admin/keys/{id}/watchlists", get(watchlists::list))
        .route("/admin/keys/{id}/watchlists/{name}", get(watchlists::get))
        .route_layer(middleware::from_fn_with_state(state, guard))
}

/// Lets a request through only with the admin token.
async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    match refusal(&state, request.headers()) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
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
