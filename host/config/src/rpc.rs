//! The `[rpc]` section: which methods a node-fed chain forwards to its
//! node, and how long a forwarded call may take (docs/src/architecture.md,
//! Forwarding).

use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Serialize};

/// Namespaces forwarded by default: the standard ones.
const FORWARDED_NAMESPACES: [&str; 3] = ["eth_", "net_", "web3_"];

/// Methods that act with the node's own keys or accounts (geth's, anvil's):
/// never forwarded unless `allow` names them.
const NODE_WALLET: [&str; 6] = [
    "eth_sendTransaction*",
    "eth_sendUnsignedTransaction",
    "eth_sign*",
    "eth_accounts",
    "eth_requestAccounts",
    "eth_resend",
];

/// Whether `method` opens or closes a subscription on the node (geth
/// treats any `<namespace>_subscribe` so): never forwarded, since the
/// shared connection would carry its notifications to nobody.
fn subscribes(method: &str) -> bool {
    method.ends_with("_subscribe") || method.ends_with("_unsubscribe")
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RpcConfig {
    /// Methods forwarded beyond the defaults: a name (`anvil_mine`) or a
    /// namespace (`debug_*`). Default none.
    pub allow: Vec<String>,
    /// Methods refused although the defaults forward them (same forms).
    /// Default none.
    pub deny: Vec<String>,
    /// How long a forwarded call may wait for the node, in milliseconds;
    /// then the client gets -32002. Default 10,000.
    pub timeout_ms: u64,
    /// On a chain of several nodes: a read not answered after this many
    /// milliseconds is asked of a second node too, and the first answer
    /// wins. Unset: no hedging.
    pub hedge_after_ms: Option<u64>,
}

impl Default for RpcConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            timeout_ms: 10_000,
            hedge_after_ms: None,
        }
    }
}

impl RpcConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    pub fn hedge_after(&self) -> Option<Duration> {
        self.hedge_after_ms.map(Duration::from_millis)
    }

    /// Whether `method` goes to the node: never a subscription, then
    /// `deny`, then `allow`, then the standard namespaces less the
    /// node-wallet methods.
    pub fn forwards(&self, method: &str) -> bool {
        let listed = |patterns: &[String]| patterns.iter().any(|p| matches(p, method));
        if subscribes(method) || listed(&self.deny) {
            return false;
        }
        listed(&self.allow)
            || (FORWARDED_NAMESPACES.iter().any(|n| method.starts_with(n))
                && !NODE_WALLET.iter().any(|p| matches(p, method)))
    }

    pub(super) fn validate(&self) -> anyhow::Result<()> {
        for pattern in self.allow.iter().chain(&self.deny) {
            let name = pattern.strip_suffix('*').unwrap_or(pattern);
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && (name.len() == pattern.len() || name.ends_with('_'));
            if !valid {
                bail!(
                    "rpc.allow and rpc.deny take method names (`anvil_mine`) or namespaces (`debug_*`), got {pattern:?}"
                );
            }
        }
        super::located::in_range("rpc.timeout_ms", self.timeout_ms, 100, 600_000)?;
        if let Some(hedge) = self.hedge_after_ms {
            super::located::in_range("rpc.hedge_after_ms", hedge, 1, self.timeout_ms)?;
        }
        Ok(())
    }
}

/// Whether `pattern` (a name, or a prefix ending in `*`) names `method`.
fn matches(pattern: &str, method: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => method.starts_with(prefix),
        None => pattern == method,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(allow: &[&str], deny: &[&str]) -> RpcConfig {
        RpcConfig {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
            ..RpcConfig::default()
        }
    }

    #[test]
    fn the_default_policy_forwards_the_standard_namespaces_but_the_wallet() {
        let policy = RpcConfig::default();
        for method in [
            "eth_call",
            "eth_getBalance",
            "eth_estimateGas",
            "net_peerCount",
            "web3_sha3",
        ] {
            assert!(policy.forwards(method), "{method}");
        }
        assert!(policy.forwards("eth_sendRawTransaction"));
        assert!(policy.forwards("eth_sendRawTransactionSync"));
        for method in [
            "eth_sendTransaction",
            "eth_sendTransactionSync",
            "eth_sendUnsignedTransaction",
            "eth_sign",
            "eth_signTypedData_v4",
            "eth_accounts",
            "eth_requestAccounts",
            "eth_resend",
            "eth_subscribe",
            "eth_x_subscribe",
            "eth_unsubscribe",
            "debug_traceTransaction",
            "admin_peers",
            "anvil_mine",
            "txpool_content",
            "ethx_call",
        ] {
            assert!(!policy.forwards(method), "{method}");
        }
    }

    #[test]
    fn allow_opens_and_deny_closes() {
        let policy = config(&["debug_*", "anvil_mine", "eth_accounts"], &["eth_call"]);
        assert!(policy.forwards("debug_traceTransaction"));
        assert!(policy.forwards("anvil_mine"));
        assert!(!policy.forwards("anvil_reorg"));
        assert!(policy.forwards("eth_accounts"));
        assert!(!policy.forwards("eth_call"));
        let both = config(&["debug_*"], &["debug_*"]);
        assert!(!both.forwards("debug_traceCall"), "deny wins");
        let subscribing = config(&["eth_*", "debug_*"], &[]);
        assert!(
            !subscribing.forwards("debug_subscribe"),
            "never a subscription"
        );
    }

    #[test]
    fn patterns_and_timeouts_are_checked() {
        for bad in ["", "*", "debug*", "eth call", "a.b"] {
            assert!(config(&[bad], &[]).validate().is_err(), "{bad:?}");
        }
        assert!(
            config(&["debug_*", "anvil_mine"], &["eth_call"])
                .validate()
                .is_ok()
        );
        let slow = RpcConfig {
            timeout_ms: 50,
            ..RpcConfig::default()
        };
        assert!(slow.validate().is_err());
    }
}
