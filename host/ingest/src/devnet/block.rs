//! Building blocks: a [`BlockTemplate`] of the chain's constants, and
//! [`BlockJob`]s that chain built blocks on a parent, on or off the
//! devnet's task.

use std::sync::Arc;

use alloy_consensus::proofs::{calculate_receipt_root, calculate_transaction_root};
use alloy_consensus::{
    BlockBody, EMPTY_OMMER_ROOT_HASH, EMPTY_ROOT_HASH, Eip658Value, Header, Receipt,
    ReceiptEnvelope, ReceiptWithBloom, TxEnvelope,
};
use alloy_eips::eip4895::Withdrawals;
use alloy_primitives::{Address, B256, Bytes, Log as PrimitiveLog, U256, keccak256, logs_bloom};
use alloy_rpc_types_eth::Log;

use chainsieve_model::{Block, Transaction};

/// A generated transaction with everything its block needs.
#[derive(Clone, Debug)]
pub(super) struct Generated {
    pub(super) tx: Arc<Transaction>,
    pub(super) envelope: TxEnvelope,
    pub(super) gas_used: u64,
    pub(super) logs: Vec<PrimitiveLog>,
}

/// Blocks to build, chained on `parent`. Hashing a block's tries takes
/// milliseconds (~11 ms for 5,000 transactions), so [`run`](super::run)
/// builds them off the devnet's task, which meanwhile keeps announcing what
/// is submitted.
pub(super) struct BlockJob {
    pub(super) template: BlockTemplate,
    pub(super) parent: Arc<Block>,
    pub(super) contents: Vec<Arc<Vec<Generated>>>,
}

/// Built blocks, oldest first, each with its content.
pub(super) type Built = Vec<(Arc<Block>, Arc<Vec<Generated>>)>;

impl BlockJob {
    pub(super) fn run(self) -> Built {
        let mut parent = self.parent;
        self.contents
            .into_iter()
            .map(|content| {
                let block = self.template.build(Some(&parent), &content);
                parent = block.clone();
                (block, content)
            })
            .collect()
    }
}

/// The chain's constants and current branch: all a block's build reads.
#[derive(Clone, Copy)]
pub(super) struct BlockTemplate {
    pub(super) chain_id: u64,
    pub(super) seed: u64,
    /// Reorgs so far: part of every block's identity.
    pub(super) branch: u64,
    pub(super) validator: Address,
    pub(super) gas_limit: u64,
    pub(super) base_fee: u64,
    pub(super) genesis_timestamp: u64,
    pub(super) block_ms: u64,
}

impl BlockTemplate {
    /// The timestamp of block `number` (see [`block_offset`]).
    fn timestamp(&self, number: u64) -> u64 {
        self.genesis_timestamp
            .saturating_add(block_offset(number, self.block_ms))
    }

    pub(super) fn build(&self, parent: Option<&Block>, content: &[Generated]) -> Arc<Block> {
        let number = parent.map_or(0, |p| p.number() + 1);
        let branch = self.branch;
        let mut cumulative = 0;
        let receipts: Vec<ReceiptEnvelope> = content
            .iter()
            .map(|g| {
                cumulative += g.gas_used;
                let receipt = Receipt {
                    status: Eip658Value::Eip658(true),
                    cumulative_gas_used: cumulative,
                    logs: g.logs.clone(),
                };
                let with_bloom = ReceiptWithBloom::new(receipt, logs_bloom(&g.logs));
                ReceiptEnvelope::from_typed(g.envelope.tx_type(), with_bloom)
            })
            .collect();
        let envelopes: Vec<&TxEnvelope> = content.iter().map(|g| &g.envelope).collect();
        let label = keccak256(format!(
            "chainsieve devnet {} {} {number} {branch}",
            self.seed, self.chain_id
        ));
        let header = Header {
            parent_hash: parent.map_or(B256::ZERO, |p| p.hash),
            ommers_hash: EMPTY_OMMER_ROOT_HASH,
            beneficiary: self.validator,
            // There is no state to commit to; a stable stand-in.
            state_root: keccak256(label),
            transactions_root: calculate_transaction_root(&envelopes),
            receipts_root: calculate_receipt_root(&receipts),
            logs_bloom: logs_bloom(content.iter().flat_map(|g| &g.logs)),
            difficulty: U256::ZERO,
            number,
            gas_limit: self.gas_limit,
            gas_used: cumulative,
            timestamp: self.timestamp(number),
            // At most 31 bytes: within the 32 consensus allows.
            extra_data: Bytes::from(format!("chainsieve/{branch}").into_bytes()),
            mix_hash: label,
            nonce: Default::default(),
            base_fee_per_gas: Some(self.base_fee),
            withdrawals_root: Some(EMPTY_ROOT_HASH),
            blob_gas_used: Some(content.iter().map(|g| g.tx.blob_gas()).sum()),
            excess_blob_gas: Some(0),
            parent_beacon_block_root: Some(B256::ZERO),
            // Later forks' fields (requests, access lists, slots) stay unset.
            ..Header::default()
        };
        let hash = header.hash_slow();
        let size = alloy_consensus::Block::rlp_length_for(
            &header,
            &BlockBody {
                transactions: envelopes,
                ommers: Vec::new(),
                withdrawals: Some(Withdrawals::default()),
            },
        );
        let timestamp = header.timestamp;
        let logs = content
            .iter()
            .enumerate()
            .flat_map(|(tx_index, g)| g.logs.iter().map(move |log| (tx_index, g.tx.hash, log)))
            .enumerate()
            .map(|(log_index, (tx_index, tx_hash, log))| Log {
                inner: log.clone(),
                block_hash: Some(hash),
                block_number: Some(number),
                block_timestamp: Some(timestamp),
                transaction_hash: Some(tx_hash),
                transaction_index: Some(tx_index as u64),
                log_index: Some(log_index as u64),
                removed: false,
            })
            .collect();
        Arc::new(Block {
            hash,
            lookup: Some(Block::devnet_lookup(hash, &header, size)),
            header,
            transactions: content.iter().map(|g| g.tx.clone()).collect(),
            logs,
            gas_used: Some(content.iter().map(|g| g.gas_used).collect()),
            receipts: None,
        })
    }
}

/// Whole seconds from genesis to block `number` at `block_ms` per block. A
/// header counts seconds, so at sub-second cadences consecutive blocks may
/// share one, as on BNB Chain since its blocks went under a second.
pub(super) fn block_offset(number: u64, block_ms: u64) -> u64 {
    u64::try_from(u128::from(number) * u128::from(block_ms) / 1_000).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{envelope_of, run_steps, settings, stream};
    use super::super::{Devnet, DevnetSettings};
    use super::*;
    use chainsieve_model::SourceEvent;

    #[test]
    fn cadence_and_timestamps() {
        let at = |chain, block_time_ms| {
            let mut devnet = Devnet::new(
                chain,
                &DevnetSettings {
                    block_time_ms,
                    ..settings()
                },
            );
            let (blocks, _) = run_steps(&mut devnet, 25);
            (
                devnet.block_time(),
                blocks
                    .iter()
                    .map(|b| b.header.timestamp - 1_700_000_000)
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            at(1, None),
            (Duration::from_secs(12), vec![0, 12, 24, 36, 48, 60])
        );
        assert_eq!(
            at(56, None),
            (Duration::from_millis(450), vec![0, 0, 0, 1, 1, 2])
        );
        assert_eq!(at(137, None).0, Duration::from_secs(2));
        assert_eq!(at(1, Some(1_500)).1, vec![0, 1, 3, 4, 6, 7]);
        assert_eq!(at(1, Some(150)).1, vec![0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn blocks_chain_with_real_roots_and_logs() {
        let mut devnet = Devnet::new(1, &settings());
        let (blocks, _) = run_steps(&mut devnet, 50);
        assert_eq!(blocks.len(), 11);
        assert_eq!(
            devnet.genesis().hash,
            blocks[0].hash,
            "genesis stays block 0"
        );
        assert_eq!(blocks[0].number(), 0);
        for pair in blocks.windows(2) {
            assert_eq!(pair[1].parent_hash(), pair[0].hash);
            assert_eq!(pair[1].number(), pair[0].number() + 1);
            assert!(pair[1].header.timestamp > pair[0].header.timestamp);
        }
        for block in &blocks {
            let h = &block.header;
            assert_eq!(block.hash, h.hash_slow());
            let envelopes: Vec<TxEnvelope> = block
                .transactions
                .iter()
                .map(|tx| envelope_of(tx))
                .collect();
            assert_eq!(h.transactions_root, calculate_transaction_root(&envelopes));
            let blob_gas: u64 = block.transactions.iter().map(|tx| tx.blob_gas()).sum();
            assert_eq!(h.blob_gas_used, Some(blob_gas));
            // The lookup's size is the whole block's encoding.
            let lookup: serde_json::Value =
                serde_json::from_str(block.lookup.as_deref().expect("lookup")).expect("json");
            let body = BlockBody {
                transactions: envelopes,
                ommers: Vec::new(),
                withdrawals: Some(Withdrawals::default()),
            };
            let mut encoded = Vec::new();
            alloy_consensus::Block::rlp_encode_from_parts(h, &body, &mut encoded);
            assert_eq!(
                lookup["size"],
                serde_json::json!(format!("{:#x}", encoded.len()))
            );
            assert_eq!(lookup["hash"], serde_json::json!(block.hash.to_string()));
            if block.transactions.is_empty() {
                assert_eq!(h.receipts_root, EMPTY_ROOT_HASH);
            } else {
                assert_ne!(h.receipts_root, EMPTY_ROOT_HASH);
            }
            let logs: Vec<_> = block.logs.iter().map(|l| l.inner.clone()).collect();
            assert_eq!(h.logs_bloom, logs_bloom(&logs));
            assert!(h.gas_used <= h.gas_limit);
            assert_eq!(
                h.gas_used == 0,
                block.transactions.is_empty(),
                "gas used follows the transactions"
            );
            assert_eq!(h.withdrawals_root, Some(EMPTY_ROOT_HASH));
            assert_eq!(h.base_fee_per_gas, Some(500_000_000));
            for (i, log) in block.logs.iter().enumerate() {
                let tx_index = log.transaction_index.expect("index") as usize;
                assert_eq!(
                    (log.block_hash, log.block_number, log.log_index, log.removed),
                    (
                        Some(block.hash),
                        Some(block.number()),
                        Some(i as u64),
                        false
                    )
                );
                assert_eq!(
                    log.transaction_hash,
                    Some(block.transactions[tx_index].hash)
                );
            }
        }
    }

    #[test]
    fn empty_blocks_when_no_transactions() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                transactions_per_block: 0,
                ..settings()
            },
        );
        let events = stream(&mut devnet, 10);
        assert_eq!(
            events.len(),
            3,
            "genesis and two blocks, no pending batches"
        );
        for event in events {
            let SourceEvent::Block(block) = event else {
                panic!("only blocks");
            };
            assert!(block.transactions.is_empty());
            assert_eq!(block.header.transactions_root, EMPTY_ROOT_HASH);
            assert_eq!(block.header.receipts_root, EMPTY_ROOT_HASH);
        }
    }

    #[test]
    fn blocks_never_overflow_the_gas_limit() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                transactions_per_block: 400,
                pending_batches_per_block: 1,
                ..settings()
            },
        );
        let (blocks, _) = run_steps(&mut devnet, 4);
        let block = &blocks[1];
        assert!(block.transactions.len() > 100);
        let limits: u64 = block.transactions.iter().map(|t| t.gas).sum();
        assert!(limits <= block.header.gas_limit);
    }
}
