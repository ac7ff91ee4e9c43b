//! What a key used, and the hours it is summed in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Seconds in an hour bucket.
pub const HOUR: u64 = 3_600;

/// What a key used: since a server started (a meter's totals), or in one
/// hour.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Counts {
    /// JSON-RPC calls by method (each call of a batch counts).
    pub calls: BTreeMap<String, u64>,
    /// Notifications taken for the key's WebSockets.
    pub notifications: u64,
    /// Their text, in bytes.
    pub bytes: u64,
    /// Webhook POSTs a receiver accepted.
    pub webhook_deliveries: u64,
    /// The notifications in them.
    pub webhook_notifications: u64,
    /// Their bodies, in bytes.
    pub webhook_bytes: u64,
    /// Blocks history streams replayed to the key's subscriptions.
    pub history_blocks: u64,
}

impl Counts {
    /// Adds `other` to these.
    pub fn add(&mut self, other: &Counts) {
        for (method, count) in &other.calls {
            *self.calls.entry(method.clone()).or_default() += count;
        }
        self.notifications += other.notifications;
        self.bytes += other.bytes;
        self.webhook_deliveries += other.webhook_deliveries;
        self.webhook_notifications += other.webhook_notifications;
        self.webhook_bytes += other.webhook_bytes;
        self.history_blocks += other.history_blocks;
    }

    /// What was counted since `earlier` (counts only grow).
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            calls: self
                .calls
                .iter()
                .map(|(method, count)| {
                    let before = earlier.calls.get(method).copied().unwrap_or(0);
                    (method.clone(), count.saturating_sub(before))
                })
                .filter(|(_, count)| *count > 0)
                .collect(),
            notifications: self.notifications.saturating_sub(earlier.notifications),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            webhook_deliveries: self
                .webhook_deliveries
                .saturating_sub(earlier.webhook_deliveries),
            webhook_notifications: self
                .webhook_notifications
                .saturating_sub(earlier.webhook_notifications),
            webhook_bytes: self.webhook_bytes.saturating_sub(earlier.webhook_bytes),
            history_blocks: self.history_blocks.saturating_sub(earlier.history_blocks),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Counts::default()
    }
}

/// The start of the hour `unix` seconds fall in.
pub fn hour_of(unix: u64) -> u64 {
    unix - unix % HOUR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_and_subtract_field_by_field() {
        let mut earlier = Counts::default();
        earlier.calls.insert("eth_call".into(), 2);
        earlier.notifications = 5;
        let mut later = earlier.clone();
        later.add(&Counts {
            calls: BTreeMap::from([("eth_call".into(), 1), ("net_version".into(), 4)]),
            bytes: 10,
            history_blocks: 3,
            ..Counts::default()
        });
        let since = later.since(&earlier);
        assert_eq!(
            since.calls,
            BTreeMap::from([("eth_call".into(), 1), ("net_version".into(), 4)])
        );
        assert_eq!(
            (since.notifications, since.bytes, since.history_blocks),
            (0, 10, 3)
        );
        assert_eq!(since.calls.values().sum::<u64>(), 5);
        assert!(later.since(&later).is_empty());
        assert_eq!(hour_of(7_205), 7_200);
    }
}
