//! What the devnet knows that its blocks do not carry, for the methods a
//! wallet calls around `eth_sendRawTransaction` (docs/architecture.md,
//! Devnet transactions): each sender's nonces, mined and pending, and the
//! gas each recent transaction used. The devnet's task writes it; RPC
//! methods read it. A mutex, held for a map lookup or update only.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use alloy_primitives::{Address, B256};

use super::block::Generated;
use crate::ingest::model::{Block, Transaction};

/// Where a mined transaction is and the gas it used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mined {
    pub block: B256,
    pub index: usize,
    pub gas_used: u64,
    pub cumulative_gas_used: u64,
}

#[derive(Debug)]
pub struct Ledger {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per sender: the nonce after its last mined transaction, and after
    /// its last announced one.
    nonces: HashMap<Address, (u64, u64)>,
    /// The transactions of the blocks in `blocks`.
    mined: HashMap<B256, Mined>,
    /// Blocks remembered, oldest first, with their transactions' hashes.
    blocks: VecDeque<(B256, Vec<B256>)>,
    /// How many blocks' transactions are remembered.
    keep: usize,
}

impl Ledger {
    /// A ledger remembering the gas of the last `keep` blocks.
    pub fn new(keep: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                keep: keep.max(1),
                ..Inner::default()
            }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `address`'s transaction count: mined, or with what is pending too.
    pub fn nonce(&self, address: Address, pending: bool) -> u64 {
        let (mined, announced) = self
            .inner()
            .nonces
            .get(&address)
            .copied()
            .unwrap_or_default();
        if pending { announced.max(mined) } else { mined }
    }

    /// Where `hash` was mined, if in a remembered block (the caller checks
    /// the block is still canonical).
    pub fn mined(&self, hash: &B256) -> Option<Mined> {
        self.inner().mined.get(hash).copied()
    }

    /// Transactions announced pending.
    pub(super) fn announced(&self, txs: &[std::sync::Arc<Transaction>]) {
        let mut inner = self.inner();
        for tx in txs {
            let entry = inner.nonces.entry(tx.from).or_default();
            entry.1 = entry.1.max(tx.nonce + 1);
        }
    }

    /// A block built from `content`.
    pub(super) fn built(&self, block: &Block, content: &[Generated]) {
        let mut inner = self.inner();
        let mut cumulative = 0;
        let mut hashes = Vec::with_capacity(content.len());
        for (index, generated) in content.iter().enumerate() {
            let tx = &generated.tx;
            cumulative += generated.gas_used;
            let entry = inner.nonces.entry(tx.from).or_default();
            entry.0 = entry.0.max(tx.nonce + 1);
            inner.mined.insert(
                tx.hash,
                Mined {
                    block: block.hash,
                    index,
                    gas_used: generated.gas_used,
                    cumulative_gas_used: cumulative,
                },
            );
            hashes.push(tx.hash);
        }
        inner.blocks.push_back((block.hash, hashes));
        while inner.blocks.len() > inner.keep {
            let Some((old, hashes)) = inner.blocks.pop_front() else {
                break;
            };
            for hash in hashes {
                // Unless a reorg mined it again in a newer block.
                if inner.mined.get(&hash).is_some_and(|m| m.block == old) {
                    inner.mined.remove(&hash);
                }
            }
        }
    }
}
