//! The `[webhooks]` section: where a webhook may deliver, how hard it
//! retries, and what each key may hold (docs/src/api.md, Webhooks).

use serde::{Deserialize, Serialize};

use super::located::in_range;

/// Webhooks: subscriptions delivered by HTTP POST to a receiver's URL.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Whether a target may be plain `http://` (else only `https://`).
    /// Default false.
    pub allow_http: bool,
    /// Whether a target may be (or resolve to) a loopback, private,
    /// link-local or otherwise non-public address; checked at creation and
    /// on every address each connection resolves to. Default false.
    pub allow_private_addresses: bool,
    /// Webhooks one API key may hold; one more is refused (-32005).
    /// Default 20.
    pub max_per_key: usize,
    /// How long one POST may take, connecting included, in milliseconds;
    /// a timeout is retried. Default 10,000.
    pub timeout_ms: u64,
    /// The first retry's delay in milliseconds; each next one doubles, up
    /// to `retry_max_ms`, with jitter. Default 500.
    pub retry_initial_ms: u64,
    /// The longest delay between two tries in milliseconds (a receiver's
    /// `Retry-After` may ask for longer, up to an hour). Default 60,000.
    pub retry_max_ms: u64,
    /// How long a webhook may go without a delivery accepted before it is
    /// paused with the reason, in seconds; resuming continues from its
    /// cursor. Default 86,400 (a day).
    pub pause_after_secs: u64,
    /// Notifications a webhook may have waiting behind the one in flight;
    /// past it the webhook lets its subscription go and reads on from its
    /// cursor once it has caught up (nothing is skipped). Default 4,096.
    pub queue: usize,
    /// The largest `maxEvents` a webhook may ask for one delivery.
    /// Default 1,000.
    pub max_batch_events: usize,
    /// On the bus: how long an edge's hold on a webhook lasts without
    /// renewal, in milliseconds; another edge takes over at most this
    /// long after the one delivering it dies. Default 10,000.
    pub lease_ms: u64,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            allow_http: false,
            allow_private_addresses: false,
            max_per_key: 20,
            timeout_ms: 10_000,
            retry_initial_ms: 500,
            retry_max_ms: 60_000,
            pause_after_secs: 86_400,
            queue: 4_096,
            max_batch_events: 1_000,
            lease_ms: 10_000,
        }
    }
}

impl WebhooksConfig {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        in_range(
            "webhooks.max_per_key",
            self.max_per_key as u64,
            1,
            1_000_000,
        )?;
        in_range("webhooks.timeout_ms", self.timeout_ms, 100, 600_000)?;
        in_range(
            "webhooks.retry_initial_ms",
            self.retry_initial_ms,
            1,
            3_600_000,
        )?;
        in_range(
            "webhooks.retry_max_ms",
            self.retry_max_ms,
            self.retry_initial_ms,
            3_600_000,
        )?;
        in_range(
            "webhooks.pause_after_secs",
            self.pause_after_secs,
            1,
            31_536_000,
        )?;
        in_range("webhooks.queue", self.queue as u64, 2, 1 << 20)?;
        in_range(
            "webhooks.max_batch_events",
            self.max_batch_events as u64,
            1,
            100_000,
        )?;
        in_range("webhooks.lease_ms", self.lease_ms, 400, 600_000)
    }

    /// [`Self::lease_ms`] as a duration.
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.lease_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_each_bound_names_its_key() {
        WebhooksConfig::default().validate().expect("defaults");
        type Change = fn(&mut WebhooksConfig);
        let cases: [(Change, &str); 3] = [
            (|c| c.timeout_ms = 10, "webhooks.timeout_ms"),
            (|c| c.retry_max_ms = 1, "webhooks.retry_max_ms"),
            (|c| c.queue = 1, "webhooks.queue"),
        ];
        for (change, key) in cases {
            let mut config = WebhooksConfig::default();
            change(&mut config);
            let error = config.validate().expect_err(key).to_string();
            assert!(error.contains(key), "{error}");
        }
    }
}
