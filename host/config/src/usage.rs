//! The `[usage]` section: whether each key's usage is counted, how often
//! it is written to the hourly buckets, and how long they are kept
//! (docs/src/operations.md, Usage).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::located::in_range;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct UsageConfig {
    /// Whether keys' usage is counted (calls, notifications, webhook
    /// deliveries, history blocks). Default true.
    pub enabled: bool,
    /// Seconds between two writes of the counts to the hourly buckets;
    /// on the bus, how far another edge's counts may lag. Default 10.
    pub flush_secs: u64,
    /// Days the hourly buckets are kept. Default 90.
    pub retention_days: u64,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            flush_secs: 10,
            retention_days: 90,
        }
    }
}

impl UsageConfig {
    pub fn flush_every(&self) -> Duration {
        Duration::from_secs(self.flush_secs)
    }

    pub fn retention(&self) -> Duration {
        Duration::from_secs(self.retention_days * 86_400)
    }

    pub(super) fn validate(&self) -> anyhow::Result<()> {
        in_range("usage.flush_secs", self.flush_secs, 1, 3_600)?;
        in_range("usage.retention_days", self.retention_days, 1, 3_660)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_settings_are_checked() {
        UsageConfig::default().validate().expect("defaults");
        let error = UsageConfig {
            flush_secs: 0,
            ..UsageConfig::default()
        }
        .validate()
        .expect_err("zero");
        assert!(
            error
                .to_string()
                .contains("usage.flush_secs must be between 1 and 3600")
        );
        assert_eq!(
            UsageConfig::default().retention(),
            Duration::from_secs(90 * 86_400)
        );
    }
}
