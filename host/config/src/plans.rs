//! The `[plans.<name>]` sections: what an API key on each plan may do
//! (docs/src/operations.md, Keys and plans). A plan's unset limits are the
//! server-wide ones (`[limits]`, `[webhooks] max_per_key`, `[history]
//! max_streams_per_key`); the plan `default`, which every key without a
//! plan and every key of `[auth] keys` has, exists even when not written.

use std::collections::BTreeMap;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use super::located::in_range;

/// The plan of keys that name none, and of the config's keys.
pub const DEFAULT_PLAN: &str = "default";

/// One plan as written; `None` takes the server-wide value.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PlanConfig {
    /// JSON-RPC calls per second a key may make (a burst of one second's
    /// worth), on each server it calls. Default
    /// `limits.requests_per_second_per_key`.
    pub requests_per_second: Option<u32>,
    /// Open WebSocket connections a key may hold on each server. Default
    /// `limits.max_connections_per_key`.
    pub max_connections: Option<usize>,
    /// Live subscriptions one of its connections may hold. Default
    /// `limits.max_subscriptions_per_connection`.
    pub max_subscriptions_per_connection: Option<usize>,
    /// Webhooks a key may hold. Default `webhooks.max_per_key`.
    pub max_webhooks: Option<usize>,
    /// History streams a key may run at once on each server. Default
    /// `history.max_streams_per_key`.
    pub max_history_streams: Option<usize>,
    /// Watchlists a key may hold. Default `watchlists.max_per_key`.
    pub max_watchlists: Option<usize>,
    /// Addresses each of its watchlists may hold. Default
    /// `watchlists.max_addresses`.
    pub max_watchlist_addresses: Option<usize>,
    /// The chains a key may use; unset: every chain served.
    pub chains: Option<Vec<String>>,
    /// The methods a key may call: namespaces (`eth`, `token`, `webhook`,
    /// …) or whole names (`eth_subscribe`); unset: every method.
    pub methods: Option<Vec<String>>,
}

/// Whether `name` may name a plan, a method or a namespace: letters,
/// digits, `_` and `-`, 1 to 64 of them.
pub fn is_plain_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks every plan: names, ranges, and chains against those served.
pub(super) fn validate<'a>(
    plans: &BTreeMap<String, PlanConfig>,
    chains: impl Iterator<Item = &'a str> + Clone,
) -> anyhow::Result<()> {
    for (name, plan) in plans {
        if !is_plain_name(name) {
            bail!(
                "plans.{name}: a plan's name is 1 to 64 letters, digits, '_' or '-' (it appears in URLs and messages)"
            );
        }
        let key = |field: &str| format!("plans.{name}.{field}");
        if let Some(rate) = plan.requests_per_second {
            in_range(&key("requests_per_second"), u64::from(rate), 1, 10_000_000)?;
        }
        for (field, value, high) in [
            ("max_connections", plan.max_connections, 10_000_000),
            (
                "max_subscriptions_per_connection",
                plan.max_subscriptions_per_connection,
                1_000_000,
            ),
            ("max_webhooks", plan.max_webhooks, 1_000_000),
            ("max_history_streams", plan.max_history_streams, 100_000),
            ("max_watchlists", plan.max_watchlists, 100_000),
            (
                "max_watchlist_addresses",
                plan.max_watchlist_addresses,
                100_000_000,
            ),
        ] {
            if let Some(value) = value {
                in_range(&key(field), value as u64, 1, high)?;
            }
        }
        if let Some(allowed) = &plan.chains {
            check_chains(&key("chains"), allowed, chains.clone())?;
        }
        if let Some(methods) = &plan.methods {
            check_methods(&key("methods"), methods)?;
        }
    }
    Ok(())
}

/// Checks that `allowed` names only served chains (and some).
pub fn check_chains<'a>(
    what: &str,
    allowed: &[String],
    mut served: impl Iterator<Item = &'a str> + Clone,
) -> anyhow::Result<()> {
    if allowed.is_empty() {
        bail!("{what} is empty: name at least one chain, or leave it out for every chain");
    }
    if let Some(unknown) = allowed
        .iter()
        .find(|chain| !served.clone().any(|served| served == chain.as_str()))
    {
        let served: Vec<&str> = served.by_ref().collect();
        bail!(
            "{what} names \"{unknown}\", which is not served (served: {})",
            served.join(", ")
        );
    }
    Ok(())
}

/// Checks that `methods` are namespaces or method names (and some).
pub fn check_methods(what: &str, methods: &[String]) -> anyhow::Result<()> {
    if methods.is_empty() {
        bail!(
            "{what} is empty: name at least one method or namespace, or leave it out for every method"
        );
    }
    if let Some(bad) = methods.iter().find(|method| !is_plain_name(method)) {
        bail!(
            "{what} names \"{bad}\": a namespace (eth) or a method (eth_subscribe) is 1 to 64 letters, digits, '_' or '-'"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(toml: &str) -> anyhow::Result<()> {
        let plans: BTreeMap<String, PlanConfig> = toml::from_str(toml)?;
        validate(&plans, ["eth", "bsc"].into_iter())
    }

    #[test]
    fn plans_are_checked_field_by_field() {
        check(
            "[free]\nrequests_per_second = 5\nmax_connections = 2\nchains = [\"eth\"]\nmethods = [\"eth\", \"token_price\"]\n[pro]",
        )
        .expect("valid plans");
        for (toml, expected) in [
            ("[\"a b\"]", "plans.a b: a plan's name"),
            (
                "[free]\nrequests_per_second = 0",
                "plans.free.requests_per_second must be between 1",
            ),
            (
                "[free]\nmax_webhooks = 0",
                "plans.free.max_webhooks must be between 1",
            ),
            (
                "[free]\nchains = [\"base\"]",
                "plans.free.chains names \"base\", which is not served (served: eth, bsc)",
            ),
            ("[free]\nchains = []", "plans.free.chains is empty"),
            ("[free]\nmethods = []", "plans.free.methods is empty"),
            (
                "[free]\nmethods = [\"eth subscribe\"]",
                "plans.free.methods names \"eth subscribe\"",
            ),
            ("[free]\nrate = 1", "unknown field `rate`"),
        ] {
            let error = format!("{:#}", check(toml).expect_err(toml));
            assert!(error.contains(expected), "{toml}: {error}");
        }
    }
}
