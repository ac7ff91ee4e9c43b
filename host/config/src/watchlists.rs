//! The `[watchlists]` section: how many watchlists a key may hold and how
//! large each may grow (docs/src/watchlists.md).

use serde::{Deserialize, Serialize};

use super::located::in_range;

/// Watchlists: named address sets a key edits while its subscriptions
/// match against them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct WatchlistsConfig {
    /// Watchlists one API key may hold; one more is refused (-32005).
    /// Default 20.
    pub max_per_key: usize,
    /// Addresses one watchlist may hold; an edit that would pass it is
    /// refused whole (-32005). Default 1,000,000.
    pub max_addresses: usize,
}

impl Default for WatchlistsConfig {
    fn default() -> Self {
        Self {
            max_per_key: 20,
            max_addresses: 1_000_000,
        }
    }
}

impl WatchlistsConfig {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        in_range(
            "watchlists.max_per_key",
            self.max_per_key as u64,
            1,
            100_000,
        )?;
        in_range(
            "watchlists.max_addresses",
            self.max_addresses as u64,
            1,
            100_000_000,
        )?;
        Ok(())
    }
}
