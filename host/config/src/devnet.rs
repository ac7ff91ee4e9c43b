//! The `[devnet]` section of the config, read by the embedded devnet
//! (`chainsieve_ingest::devnet`, above this crate).

use serde::{Deserialize, Serialize};

use super::located::in_range;

/// The `[devnet]` section of the config. Every key is optional.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DevnetSettings {
    /// Everything generated follows from it (with the chain id): the same
    /// seed gives the same accounts, transactions and logs. Default 1.
    pub seed: u64,
    /// Time between blocks in milliseconds. Default (`None`): the chain's
    /// own cadence, Ethereum 12 s, BNB Chain 3 s, Polygon 2 s.
    pub block_time_ms: Option<u64>,
    /// Micro-batches of pending transactions announced between two blocks
    /// (0 is read as 1). Default 4.
    pub pending_batches_per_block: u32,
    /// Transactions per block, spread over the pending micro-batches and
    /// capped by what fits the chain's gas limit. Default 12.
    pub transactions_per_block: u32,
    /// Block gas limit. Default (`None`): the chain's own, Ethereum 30 M,
    /// BNB Chain 140 M, Polygon 45 M. Raise it for submitted loads beyond
    /// what real blocks carry.
    pub gas_limit: Option<u64>,
    /// Blocks between reorgs; 0 never reorganises. Default 0.
    pub reorg_every: u64,
    /// Blocks a reorg replaces (0 disables reorgs), at most one less than
    /// the canonical tracker's window (larger values are capped: the
    /// tracker could not follow them). Default 2.
    pub reorg_depth: u64,
    /// Unix timestamp (seconds) of block 0. Default (`None`): as long
    /// before the start as `history_blocks` take, so the last of them is
    /// now. Set it for block hashes that do not change between runs.
    pub genesis_timestamp: Option<u64>,
    /// Blocks generated back to back at startup, before the real-time
    /// cadence begins: a past for `token_price` history and block lookups
    /// to answer from right away. Default 300 (an hour of Ethereum).
    pub history_blocks: u64,
    /// What each chain's archive of its canonical blocks, for `fromBlock`
    /// beyond the log window, holds in memory, in MiB; the oldest blocks
    /// are let go first. With `data_dir` every block is on disk as
    /// well, up to `[history] max_blocks` back. Default 256.
    pub archive_memory_mib: usize,
}

impl Default for DevnetSettings {
    fn default() -> Self {
        Self {
            seed: 1,
            block_time_ms: None,
            pending_batches_per_block: 4,
            transactions_per_block: 12,
            gas_limit: None,
            reorg_every: 0,
            reorg_depth: 2,
            genesis_timestamp: None,
            history_blocks: 300,
            archive_memory_mib: 256,
        }
    }
}

impl DevnetSettings {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        in_range(
            "devnet.pending_batches_per_block",
            u64::from(self.pending_batches_per_block),
            0,
            1_000,
        )?;
        in_range(
            "devnet.transactions_per_block",
            u64::from(self.transactions_per_block),
            0,
            100_000,
        )?;
        if let Some(ms) = self.block_time_ms {
            in_range("devnet.block_time_ms", ms, 1, 3_600_000)?;
        }
        in_range(
            "devnet.archive_memory_mib",
            self.archive_memory_mib as u64,
            1,
            1 << 20,
        )?;
        in_range("devnet.history_blocks", self.history_blocks, 0, 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_from_toml_with_defaults() {
        let empty: DevnetSettings = toml::from_str("").expect("every key is optional");
        assert_eq!(empty, DevnetSettings::default());
        let set: DevnetSettings =
            toml::from_str("seed = 9\nblock_time_ms = 500\nreorg_every = 4").expect("valid");
        assert_eq!(
            set,
            DevnetSettings {
                seed: 9,
                block_time_ms: Some(500),
                reorg_every: 4,
                ..DevnetSettings::default()
            }
        );
        assert!(toml::from_str::<DevnetSettings>("sed = 1").is_err());
    }
}
