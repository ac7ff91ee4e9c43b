//! Plans as the server applies them: each `[plans.<name>]` with the
//! server-wide values filled in, and what a plan (or a key's own narrower
//! grant) allows of chains and methods.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::sync::Arc;

use chainsieve_config::{Config, DEFAULT_PLAN, PlanConfig};

/// Methods every key may call, whatever its plan: what clients ask before
/// anything else (ethers and web3.py ask the chain id as they connect),
/// and which cost nothing.
const ALWAYS_ALLOWED: [&str; 3] = ["eth_chainId", "net_version", "web3_clientVersion"];

/// One plan, complete.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub name: Arc<str>,
    pub requests_per_second: NonZeroU32,
    pub max_connections: usize,
    pub max_subscriptions_per_connection: usize,
    pub max_webhooks: usize,
    pub max_history_streams: usize,
    pub max_watchlists: usize,
    pub max_watchlist_addresses: usize,
    /// `None`: every chain.
    pub chains: Option<BTreeSet<String>>,
    /// `None`: every method.
    pub methods: Option<Methods>,
    /// The plan as written, to say where a limit comes from.
    written: PlanConfig,
}

/// A plan's limits, to say where each comes from.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    RequestsPerSecond,
    Connections,
    SubscriptionsPerConnection,
    Webhooks,
    HistoryStreams,
    Watchlists,
    WatchlistAddresses,
}

impl Plan {
    /// The setting `limit` comes from: the plan's own, or the server-wide
    /// one it falls back to (for messages that tell an operator what to
    /// change).
    pub fn origin(&self, limit: Limit) -> String {
        let written = &self.written;
        let (field, set, server_wide) = match limit {
            Limit::RequestsPerSecond => (
                "requests_per_second",
                written.requests_per_second.is_some(),
                "limits.requests_per_second_per_key",
            ),
            Limit::Connections => (
                "max_connections",
                written.max_connections.is_some(),
                "limits.max_connections_per_key",
            ),
            Limit::SubscriptionsPerConnection => (
                "max_subscriptions_per_connection",
                written.max_subscriptions_per_connection.is_some(),
                "limits.max_subscriptions_per_connection",
            ),
            Limit::Webhooks => (
                "max_webhooks",
                written.max_webhooks.is_some(),
                "webhooks.max_per_key",
            ),
            Limit::HistoryStreams => (
                "max_history_streams",
                written.max_history_streams.is_some(),
                "history.max_streams_per_key",
            ),
            Limit::Watchlists => (
                "max_watchlists",
                written.max_watchlists.is_some(),
                "watchlists.max_per_key",
            ),
            Limit::WatchlistAddresses => (
                "max_watchlist_addresses",
                written.max_watchlist_addresses.is_some(),
                "watchlists.max_addresses",
            ),
        };
        if set {
            format!("plans.{}.{field}", self.name)
        } else {
            server_wide.to_string()
        }
    }
}

/// Methods allowed by namespace (`eth`) or by name (`eth_subscribe`).
#[derive(Debug, PartialEq, Eq)]
pub struct Methods(BTreeSet<String>);

impl Methods {
    pub fn new(names: &[String]) -> Self {
        Self(names.iter().cloned().collect())
    }

    /// Whether `method` is named, or its namespace (what precedes its
    /// first `_`) is.
    pub fn allows(&self, method: &str) -> bool {
        let namespace = method
            .split_once('_')
            .map_or(method, |(namespace, _)| namespace);
        self.0.contains(method) || self.0.contains(namespace)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

/// Whether `method` may be called under `methods` (`None`: any).
pub fn method_allowed(methods: Option<&Methods>, method: &str) -> bool {
    ALWAYS_ALLOWED.contains(&method) || methods.is_none_or(|methods| methods.allows(method))
}

/// Whether `chain` may be used under `chains` (`None`: any).
pub fn chain_allowed(chains: Option<&BTreeSet<String>>, chain: &str) -> bool {
    chains.is_none_or(|chains| chains.contains(chain))
}

/// The configured plans by name, `default` always among them.
#[derive(Clone, Debug)]
pub struct Plans {
    by_name: Arc<BTreeMap<String, Arc<Plan>>>,
    default: Arc<Plan>,
}

impl Plans {
    /// The plans of `config` (already validated).
    pub fn from_config(config: &Config) -> Self {
        let limits = &config.limits;
        let resolve = |name: &str, plan: &PlanConfig| Plan {
            name: name.into(),
            requests_per_second: plan
                .requests_per_second
                .and_then(NonZeroU32::new)
                .or(NonZeroU32::new(limits.requests_per_second_per_key))
                .unwrap_or(NonZeroU32::MIN),
            max_connections: plan
                .max_connections
                .unwrap_or(limits.max_connections_per_key),
            max_subscriptions_per_connection: plan
                .max_subscriptions_per_connection
                .unwrap_or(limits.max_subscriptions_per_connection),
            max_webhooks: plan.max_webhooks.unwrap_or(config.webhooks.max_per_key),
            max_history_streams: plan
                .max_history_streams
                .unwrap_or(config.history.max_streams_per_key),
            max_watchlists: plan.max_watchlists.unwrap_or(config.watchlists.max_per_key),
            max_watchlist_addresses: plan
                .max_watchlist_addresses
                .unwrap_or(config.watchlists.max_addresses),
            chains: plan
                .chains
                .as_ref()
                .map(|chains| chains.iter().cloned().collect()),
            methods: plan.methods.as_deref().map(Methods::new),
            written: plan.clone(),
        };
        let mut plans: BTreeMap<String, Arc<Plan>> = config
            .plans
            .iter()
            .map(|(name, plan)| (name.clone(), Arc::new(resolve(name, plan))))
            .collect();
        let default = plans
            .entry(DEFAULT_PLAN.to_string())
            .or_insert_with(|| Arc::new(resolve(DEFAULT_PLAN, &PlanConfig::default())))
            .clone();
        Self {
            by_name: Arc::new(plans),
            default,
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Plan>> {
        self.by_name.get(name)
    }

    /// The plan `default`.
    pub fn default_plan(&self) -> &Arc<Plan> {
        &self.default
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Plan>> {
        self.by_name.values()
    }

    /// The names, for a message that lists them.
    pub fn names(&self) -> String {
        let names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_fill_in_the_server_wide_limits_and_default_exists() {
        let mut config = Config::default();
        config.limits.requests_per_second_per_key = 7;
        config.webhooks.max_per_key = 3;
        config.plans.insert(
            "free".into(),
            PlanConfig {
                requests_per_second: Some(2),
                methods: Some(vec!["eth".into(), "token_price".into()]),
                ..PlanConfig::default()
            },
        );
        let plans = Plans::from_config(&config);
        let default = plans.get(DEFAULT_PLAN).expect("default exists");
        assert_eq!(default.requests_per_second.get(), 7);
        assert_eq!(default.max_webhooks, 3);
        assert_eq!(default.methods, None);
        let free = plans.get("free").expect("free");
        assert_eq!(free.requests_per_second.get(), 2);
        assert_eq!(free.max_webhooks, 3, "unset: the server-wide value");
        assert_eq!(plans.names(), "default, free");
        assert_eq!(
            free.origin(Limit::RequestsPerSecond),
            "plans.free.requests_per_second"
        );
        assert_eq!(free.origin(Limit::Webhooks), "webhooks.max_per_key");
    }

    #[test]
    fn methods_are_allowed_by_namespace_or_name() {
        let methods = Methods::new(&["eth".into(), "token_price".into()]);
        let allowed = |method| method_allowed(Some(&methods), method);
        assert!(allowed("eth_subscribe"));
        assert!(allowed("token_price"));
        assert!(!allowed("token_other"));
        assert!(!allowed("webhook_create"));
        assert!(allowed("net_version"), "always allowed");
        assert!(method_allowed(None, "webhook_create"));
        let chains: BTreeSet<String> = ["eth".into()].into();
        assert!(chain_allowed(Some(&chains), "eth"));
        assert!(!chain_allowed(Some(&chains), "bsc"));
        assert!(chain_allowed(None, "bsc"));
    }
}
