//! The watchlist methods (docs/src/watchlists.md, Methods), over both
//! transports: `watchlist_create`, `watchlist_add`, `watchlist_remove`,
//! `watchlist_clear`, `watchlist_delete`, `watchlist_list`,
//! `watchlist_get`. Each API key sees only its own watchlists; another
//! key's is "not found". An edit is all or nothing: one malformed address,
//! or a watchlist that would pass its plan's size, changes nothing.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;

use super::context::Context;
use super::params::{positional, require_positional};
use super::{Call, RpcError, result};
use chainsieve_chain::Chain;
use chainsieve_keys::plan::{Limit, Plan};
use chainsieve_watchlists::{
    Address, Applied, DEFAULT_PAGE, MAX_PAGE, Most, Seq, WatchlistError, parse_address,
};

pub(super) fn is_watchlist_method(method: &str) -> bool {
    method.starts_with("watchlist_")
}

/// Answers a `watchlist_*` call.
pub(super) async fn call(
    ctx: Context<'_>,
    plan: &Plan,
    call: &Call,
) -> Result<Box<RawValue>, RpcError> {
    let Some(watchlists) = ctx.watchlists else {
        return Err(RpcError::method_not_found_msg(
            "watchlists are served by a server of role all",
        ));
    };
    let owner = ctx.key.owner.to_string();
    let method = call.method.as_str();
    let params = &call.params;
    let most = || Most {
        watchlists: plan.max_watchlists,
        addresses: plan.max_watchlist_addresses,
        plan: plan.name.clone(),
        watchlists_origin: plan.origin(Limit::Watchlists),
        addresses_origin: plan.origin(Limit::WatchlistAddresses),
    };
    let lists = watchlists.clone();
    // A change runs to its end even if its caller goes (a WebSocket closed
    // midway): the caller learns its outcome or nothing, never half of it.
    // Its answer says where each chain placed it.
    let chains = ctx.chains;
    let to_the_end = |work: tokio::task::JoinHandle<Result<Applied, WatchlistError>>| async move {
        let applied = work
            .await
            .map_err(|failed| RpcError::internal(format!("the watchlist call failed: {failed}")))?
            .map_err(error)?;
        let applies_after = points(chains, applied.edit).await;
        result(&Edited {
            applied,
            applies_after,
        })
    };
    match method {
        "watchlist_create" => {
            let name = name_param(params, method, 2)?;
            let addresses = match positional(params, 1) {
                None | Some(Value::Null) => Vec::new(),
                Some(list) => addresses(list, method)?,
            };
            let most = most();
            to_the_end(tokio::spawn(async move {
                lists.create(&owner, &name, addresses, most).await
            }))
            .await
        }
        "watchlist_add" | "watchlist_remove" => {
            let name = name_param(params, method, 2)?;
            let list = positional(params, 1).ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "{method} takes the watchlist's name and an array of addresses"
                ))
            })?;
            let addresses = addresses(list, method)?;
            let adding = method == "watchlist_add";
            let most = most();
            to_the_end(tokio::spawn(async move {
                match adding {
                    true => lists.add(&owner, &name, addresses, most).await,
                    false => lists.remove(&owner, &name, addresses).await,
                }
            }))
            .await
        }
        "watchlist_clear" | "watchlist_delete" => {
            let name = name_param(params, method, 1)?;
            let clearing = method == "watchlist_clear";
            to_the_end(tokio::spawn(async move {
                match clearing {
                    true => lists.clear(&owner, &name).await,
                    false => lists.delete(&owner, &name).await,
                }
            }))
            .await
        }
        "watchlist_list" => {
            if params.as_array().is_some_and(|items| !items.is_empty()) || params.is_object() {
                return Err(RpcError::invalid_params(
                    "watchlist_list takes no parameters",
                ));
            }
            result(&watchlists.list(&owner))
        }
        "watchlist_get" => {
            let name = name_param(params, method, 2)?;
            let (after, limit) = page_options(positional(params, 1))?;
            result(
                &watchlists
                    .inspect(&owner, &name, after, limit)
                    .map_err(error)?,
            )
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

/// How long an edit's answer waits for a chain to place it.
const POINT_WAIT: Duration = Duration::from_secs(5);

/// What an edit answers: what it did, and where it applies on each chain.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Edited {
    #[serde(flatten)]
    applied: Applied,
    /// Per chain, the cursor after which its events are matched against
    /// the edited set (docs/src/watchlists.md, Where an edit applies);
    /// `null` for a chain that did not place it within [`POINT_WAIT`].
    applies_after: BTreeMap<String, Option<String>>,
}

/// Where each chain placed edit `edit` (or a later one, which includes it).
async fn points(
    chains: &BTreeMap<String, Arc<Chain>>,
    edit: Seq,
) -> BTreeMap<String, Option<String>> {
    let placed = chains.iter().map(|(name, chain)| {
        let mut points = chain.watch_points();
        async move {
            let point = tokio::time::timeout(POINT_WAIT, points.wait_for(|p| p.edit >= edit)).await;
            let after = match point {
                Ok(Ok(point)) => point.after.as_ref().map(ToString::to_string),
                _ => None,
            };
            (name.clone(), after)
        }
    });
    futures_util::future::join_all(placed)
        .await
        .into_iter()
        .collect()
}

/// The JSON-RPC error of a refused watchlist call.
fn error(error: WatchlistError) -> RpcError {
    match error {
        not_found @ WatchlistError::NotFound(_) => RpcError::not_found(not_found.to_string()),
        exists @ WatchlistError::Exists(_) => RpcError::invalid_params(exists.to_string()),
        WatchlistError::Invalid(message) => RpcError::invalid_params(message),
        WatchlistError::Limit(message) => RpcError::limit_exceeded(message),
        store @ WatchlistError::Store(_) => RpcError::internal(store.to_string()),
        stopped @ WatchlistError::Stopped => RpcError::unavailable(stopped.to_string()),
    }
}

/// The watchlist's name, the first of at most `most` positional
/// parameters.
fn name_param(params: &Value, method: &str, most: usize) -> Result<String, RpcError> {
    require_positional(params, method)?;
    if params.as_array().is_some_and(|items| items.len() > most) {
        return Err(RpcError::invalid_params(format!(
            "{method} takes at most {most} parameters"
        )));
    }
    match positional(params, 0) {
        Some(Value::String(name)) => Ok(name.clone()),
        Some(other) => Err(RpcError::invalid_params(format!(
            "{method}'s first parameter is the watchlist's name (a string), got {other}"
        ))),
        None => Err(RpcError::invalid_params(format!(
            "{method} takes the watchlist's name"
        ))),
    }
}

/// An array of `0x` addresses (any case), every one checked before any is
/// used.
fn addresses(list: &Value, method: &str) -> Result<Vec<Address>, RpcError> {
    let Value::Array(items) = list else {
        return Err(RpcError::invalid_params(format!(
            "{method}'s second parameter is an array of addresses, got {list}"
        )));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_str().and_then(parse_address).ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "{method}: address {i} is not 0x and 40 hex digits: {item}; nothing was changed"
                ))
            })
        })
        .collect()
}

/// `watchlist_get`'s page: `{"after": address, "limit": n}`, both optional.
fn page_options(options: Option<&Value>) -> Result<(Option<Address>, usize), RpcError> {
    let Some(options) = options.filter(|o| !o.is_null()) else {
        return Ok((None, DEFAULT_PAGE));
    };
    let Value::Object(map) = options else {
        return Err(RpcError::invalid_params(format!(
            "watchlist_get's second parameter is {{\"after\", \"limit\"}}, got {options}"
        )));
    };
    if let Some(unknown) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "after" | "limit"))
    {
        return Err(RpcError::invalid_params(format!(
            "unknown watchlist_get option \"{unknown}\" (expected after, limit)"
        )));
    }
    let after = match map.get("after") {
        None | Some(Value::Null) => None,
        Some(value) => Some(value.as_str().and_then(parse_address).ok_or_else(|| {
            RpcError::invalid_params(format!("watchlist_get: after is not an address: {value}"))
        })?),
    };
    let limit = match map.get("limit") {
        None | Some(Value::Null) => DEFAULT_PAGE,
        Some(value) => value
            .as_u64()
            .filter(|n| (1..=MAX_PAGE as u64).contains(n))
            .ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "watchlist_get: limit is a number from 1 to {MAX_PAGE}, got {value}"
                ))
            })? as usize,
    };
    Ok((after, limit))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn addresses_are_checked_whole() {
        let good = json!([
            "0x00000000000000000000000000000000000000aA",
            "0x1111111111111111111111111111111111111111"
        ]);
        let parsed = addresses(&good, "watchlist_add").expect("good");
        assert_eq!(parsed[0][19], 0xaa);
        let bad = json!(["0x1111111111111111111111111111111111111111", "0x12"]);
        let refused = addresses(&bad, "watchlist_add").expect_err("short");
        assert_eq!(refused.code, crate::error::code::INVALID_PARAMS);
        assert!(
            refused
                .message
                .contains("address 1 is not 0x and 40 hex digits: \"0x12\""),
            "{}",
            refused.message
        );
        assert!(addresses(&json!("0x11"), "watchlist_add").is_err());
        assert!(
            parse_address("1111111111111111111111111111111111111111").is_none(),
            "no 0x"
        );
        assert!(parse_address("0x111111111111111111111111111111111111111g").is_none());
    }

    #[test]
    fn page_options_are_checked() {
        assert_eq!(page_options(None).expect("none"), (None, DEFAULT_PAGE));
        let (after, limit) = page_options(Some(
            &json!({"after": "0x1111111111111111111111111111111111111111", "limit": 5}),
        ))
        .expect("both");
        assert_eq!((after, limit), (Some([0x11; 20]), 5));
        for bad in [
            json!({"limit": 0}),
            json!({"limit": 10_001}),
            json!({"after": 1}),
            json!({"from": 1}),
            json!(3),
        ] {
            assert!(page_options(Some(&bad)).is_err(), "{bad}");
        }
    }
}
