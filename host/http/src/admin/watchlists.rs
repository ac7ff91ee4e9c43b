//! `GET /admin/keys/{id}/watchlists` and `GET
//! /admin/keys/{id}/watchlists/{name}`: a key's watchlists, and one with a
//! page of its addresses (docs/src/watchlists.md, Inspecting as an
//! operator).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::reply::json_error;
use crate::state::AppState;
use chainsieve_rpc::RpcError;
use chainsieve_watchlists::{DEFAULT_PAGE, WatchlistError, Watchlists, parse_address};

/// The watchlists and the owner (its secret's digest) of key `id`, or the
/// answer saying why not.
fn of_key<'a>(
    state: &'a AppState,
    id: &str,
) -> Result<(&'a Arc<Watchlists>, String), (StatusCode, RpcError)> {
    let Some(watchlists) = &state.watchlists else {
        return Err((
            StatusCode::NOT_FOUND,
            RpcError::invalid_request("watchlists are served by a server of role all"),
        ));
    };
    match state.keys.by_id(id) {
        Some(key) => Ok((watchlists, key.owner.to_string())),
        None => Err((
            StatusCode::NOT_FOUND,
            RpcError::not_found(format!("no key {id}")),
        )),
    }
}

/// `{"watchlists": [{name, size, created, updated}, …]}`, by name.
pub async fn list(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match of_key(&state, &id) {
        Ok((watchlists, owner)) => {
            Json(json!({"watchlists": watchlists.list(&owner)})).into_response()
        }
        Err((status, refused)) => json_error(status, refused),
    }
}

/// One watchlist and a page of its addresses: `?after=<address>&limit=<n>`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path((id, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let (watchlists, owner) = match of_key(&state, &id) {
        Ok(found) => found,
        Err((status, refused)) => return json_error(status, refused),
    };
    if let Some(unknown) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "after" | "limit"))
    {
        return invalid(format!(
            "unknown parameter \"{unknown}\" (expected after, limit)"
        ));
    }
    let after = match query
        .get("after")
        .map(|text| parse_address(text).ok_or(text))
    {
        None => None,
        Some(Ok(address)) => Some(address),
        Some(Err(text)) => {
            return invalid(format!("after: \"{text}\" is not 0x and 40 hex digits"));
        }
    };
    let limit = match query
        .get("limit")
        .map(|text| text.parse::<usize>().map_err(|_| text))
    {
        None => DEFAULT_PAGE,
        Some(Ok(limit)) => limit,
        Some(Err(text)) => return invalid(format!("limit: \"{text}\" is not a number")),
    };
    match watchlists.inspect(&owner, &name, after, limit) {
        Ok(inspection) => Json(inspection).into_response(),
        Err(WatchlistError::Invalid(message)) => invalid(message),
        Err(missing @ WatchlistError::NotFound(_)) => json_error(
            StatusCode::NOT_FOUND,
            RpcError::not_found(missing.to_string()),
        ),
        Err(other) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            RpcError::internal(other.to_string()),
        ),
    }
}

fn invalid(message: String) -> Response {
    json_error(StatusCode::BAD_REQUEST, RpcError::invalid_params(message))
}
