//! What a node source has already sent downstream: the recent canonical
//! blocks (to connect a new head to them) and the transactions already
//! announced or mined (so none is announced as pending twice, or after it
//! was mined).

use std::collections::VecDeque;
use std::num::NonZeroUsize;

use alloy_primitives::B256;
use lru::LruCache;

use chainsieve_model::Block;

/// Transaction hashes remembered; older ones may be announced again, which
/// only a transaction pending for hours could hit.
const SEEN_TRANSACTIONS: NonZeroUsize = NonZeroUsize::new(1 << 17).expect("non-zero");

#[derive(Debug)]
pub struct Delivered {
    /// (number, hash) of the delivered canonical blocks, oldest first.
    blocks: VecDeque<(u64, B256)>,
    /// Blocks remembered: a new head is connected within this depth.
    depth: usize,
    /// Transactions announced as pending or seen mined.
    seen: LruCache<B256, ()>,
}

impl Delivered {
    pub fn new(depth: u64) -> Self {
        Self {
            blocks: VecDeque::new(),
            depth: usize::try_from(depth).unwrap_or(usize::MAX).max(1),
            seen: LruCache::new(SEEN_TRANSACTIONS),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    pub fn contains(&self, hash: &B256) -> bool {
        self.blocks.iter().rev().any(|(_, h)| h == hash)
    }

    /// The number of the oldest block still recorded (0 before any).
    pub fn bottom_number(&self) -> u64 {
        self.blocks.front().map_or(0, |(n, _)| *n)
    }

    /// The hash of the last delivered block.
    pub fn tip_hash(&self) -> Option<alloy_primitives::B256> {
        self.blocks.back().map(|(_, hash)| *hash)
    }

    /// The number of the last delivered block, if any.
    pub fn tip(&self) -> Option<u64> {
        self.blocks.back().map(|(n, _)| *n)
    }

    /// The number of the last delivered block (0 before any).
    pub fn tip_number(&self) -> u64 {
        self.blocks.back().map_or(0, |(n, _)| *n)
    }

    /// Records `block` as the new tip: blocks at or above its height were
    /// replaced by a reorg, and a block that links to nothing held (a
    /// resynchronisation) starts the record afresh, so the record is always
    /// one linked chain.
    pub fn push(&mut self, block: &Block) {
        while self
            .blocks
            .back()
            .is_some_and(|(n, _)| *n >= block.number())
        {
            self.blocks.pop_back();
        }
        if self
            .blocks
            .back()
            .is_some_and(|(_, tip)| *tip != block.parent_hash())
        {
            self.blocks.clear();
        }
        self.blocks.push_back((block.number(), block.hash));
        if self.blocks.len() > self.depth {
            self.blocks.pop_front();
        }
        for tx in &block.transactions {
            self.seen.put(tx.hash, ());
        }
    }

    /// Starts from the linked blocks (number, hash; oldest first)
    /// delivered before a restart.
    pub fn resume(&mut self, blocks: &[(u64, B256)]) {
        self.blocks.clear();
        let skip = blocks.len().saturating_sub(self.depth);
        self.blocks.extend(blocks.iter().skip(skip).copied());
    }

    /// Whether a pending `hash` is worth fetching.
    pub fn is_new_pending(&self, hash: &B256) -> bool {
        !self.seen.contains(hash)
    }

    /// Marks a pending transaction announced; false if it already was, or
    /// was mined.
    pub fn take_pending(&mut self, hash: B256) -> bool {
        self.seen.put(hash, ()).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(number: u64, branch: u8, parent: B256, txs: &[B256]) -> Block {
        Block::fixture(number, branch, parent, txs)
    }

    #[test]
    fn keeps_one_linked_chain() {
        let mut d = Delivered::new(3);
        let b1 = block(1, 0, B256::ZERO, &[]);
        let b2 = block(2, 0, b1.hash, &[]);
        let b3 = block(3, 0, b2.hash, &[]);
        let b4 = block(4, 0, b3.hash, &[]);
        for b in [&b1, &b2, &b3, &b4] {
            d.push(b);
        }
        assert!(!d.contains(&b1.hash), "older than the depth");
        assert_eq!((d.bottom_number(), d.tip_number()), (2, 4));
        // A reorg replacing 3 and 4.
        let c3 = block(3, 1, b2.hash, &[]);
        d.push(&c3);
        assert!(d.contains(&c3.hash) && !d.contains(&b3.hash) && !d.contains(&b4.hash));
        assert_eq!(d.tip_number(), 3);
        // A block linking to nothing held starts afresh.
        let far = block(40, 2, B256::repeat_byte(9), &[]);
        d.push(&far);
        assert!(!d.contains(&b2.hash) && d.contains(&far.hash));
        assert_eq!(d.bottom_number(), 40);
    }

    #[test]
    fn a_pending_transaction_is_announced_once_and_never_after_it_was_mined() {
        let mut d = Delivered::new(8);
        let (a, b) = (B256::repeat_byte(1), B256::repeat_byte(2));
        assert!(d.is_new_pending(&a));
        assert!(d.take_pending(a));
        assert!(!d.take_pending(a), "announced twice");
        d.push(&block(1, 0, B256::ZERO, &[b]));
        assert!(!d.is_new_pending(&b));
        assert!(!d.take_pending(b), "already mined");
    }
}
