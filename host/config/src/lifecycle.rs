//! `[lifecycle]`: how the chains follow transactions' lives for the
//! `transactionLifecycle` topic (docs/src/api.md, A transaction's life).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::located::in_range;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Pending transactions each chain follows at most; past it the oldest
    /// is no longer followed (no turn of it is told until it is mined).
    /// Default 100,000.
    pub max_pending: u64,
    /// Seconds a transaction is pending before a chain of nodes asks them
    /// whether any still holds it (and again as often while one does): one
    /// that none holds is dropped. Default 300.
    pub drop_after_secs: u64,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            max_pending: 100_000,
            drop_after_secs: 300,
        }
    }
}

impl LifecycleConfig {
    pub fn drop_after(&self) -> Duration {
        Duration::from_secs(self.drop_after_secs)
    }

    pub(super) fn validate(&self) -> anyhow::Result<()> {
        in_range("lifecycle.max_pending", self.max_pending, 1, 10_000_000)?;
        in_range("lifecycle.drop_after_secs", self.drop_after_secs, 1, 86_400)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_settings_are_checked() {
        LifecycleConfig::default().validate().expect("defaults");
        let error = LifecycleConfig {
            drop_after_secs: 0,
            ..LifecycleConfig::default()
        }
        .validate()
        .expect_err("zero");
        assert!(
            error
                .to_string()
                .contains("lifecycle.drop_after_secs must be between 1 and 86400"),
            "{error}"
        );
        assert_eq!(
            LifecycleConfig::default().drop_after(),
            Duration::from_secs(300)
        );
    }
}
