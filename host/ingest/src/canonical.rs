//! The canonical chain tracker: the last N blocks of one chain, and the
//! ordering rules of a reorg. Every source (devnet or node) feeds blocks
//! through it, so subscribers see the same guarantees from both.
//!
//! A block whose parent is the tip extends the chain. A block whose parent
//! is an older block in the window starts a reorg: the blocks above that
//! ancestor are emitted as [`ChainEvent::Removed`], newest first, then the new
//! block as [`ChainEvent::Added`]. The RPC methods read the same window
//! (`eth_getBlockByNumber` and friends), so they agree with the streams.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use alloy_primitives::B256;

use chainsieve_model::Block;
use chainsieve_model::ChainEvent;

/// Why a block could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackError {
    /// The parent is neither the tip nor in the window: either ancestors are
    /// missing (the source must fetch them first) or the reorg is deeper than
    /// the window.
    #[error(
        "block {number} ({hash}) has parent {parent}, which is not among the last {window} blocks"
    )]
    UnknownParent {
        number: u64,
        hash: B256,
        parent: B256,
        window: usize,
    },
}

/// The recent canonical blocks of one chain, oldest first.
#[derive(Debug)]
pub struct CanonicalChain {
    window: usize,
    blocks: VecDeque<Arc<Block>>,
    /// Where each held transaction is (block number, index), so
    /// `eth_getTransactionByHash` answers without scanning the window. Kept
    /// with `blocks`: every block in or out goes through [`Self::hold`] and
    /// [`Self::release`].
    transactions: HashMap<B256, (u64, usize)>,
}

impl CanonicalChain {
    pub fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            blocks: VecDeque::new(),
            transactions: HashMap::new(),
        }
    }

    /// A mined transaction in the window: its block and its index there.
    pub fn transaction(&self, hash: &B256) -> Option<(&Arc<Block>, usize)> {
        let &(number, index) = self.transactions.get(hash)?;
        let block = self.by_number(number)?;
        (block.transactions.get(index)?.hash == *hash).then_some((block, index))
    }

    pub fn tip(&self) -> Option<&Arc<Block>> {
        self.blocks.back()
    }

    pub fn by_hash(&self, hash: &B256) -> Option<&Arc<Block>> {
        self.blocks.iter().rev().find(|b| b.hash == *hash)
    }

    pub fn by_number(&self, number: u64) -> Option<&Arc<Block>> {
        let first = self.blocks.front()?.number();
        let block = self
            .blocks
            .get(usize::try_from(number.checked_sub(first)?).ok()?)?;
        (block.number() == number).then_some(block)
    }

    /// The oldest block still held.
    pub fn oldest(&self) -> Option<&Arc<Block>> {
        self.blocks.front()
    }

    /// The blocks held, oldest first.
    pub fn blocks(&self) -> impl Iterator<Item = &Arc<Block>> {
        self.blocks.iter()
    }

    /// Places `block` and returns the events subscribers must see, in order.
    /// A block already in the window yields nothing.
    pub fn apply(&mut self, block: Arc<Block>) -> Result<Vec<ChainEvent>, TrackError> {
        if self.by_hash(&block.hash).is_some() {
            return Ok(Vec::new());
        }
        let Some(tip) = self.blocks.back() else {
            return Ok(self.push(block));
        };
        if block.parent_hash() == tip.hash {
            return Ok(self.push(block));
        }
        let Some(ancestor) = self
            .blocks
            .iter()
            .rposition(|b| b.hash == block.parent_hash())
        else {
            return Err(TrackError::UnknownParent {
                number: block.number(),
                hash: block.hash,
                parent: block.parent_hash(),
                window: self.window,
            });
        };
        let mut events: Vec<ChainEvent> = Vec::new();
        while self.blocks.len() > ancestor + 1 {
            let orphan = self.blocks.pop_back().expect("len > ancestor + 1 > 0");
            self.release(&orphan);
            events.push(ChainEvent::Removed(orphan));
        }
        events.extend(self.push(block));
        Ok(events)
    }

    /// Follows a change another tracker made: an edge's window follows the
    /// ingest's log, an ingest's the log's tail at the start of a term, and
    /// a restarted chain's the log it restored. An added block becomes the
    /// tip: one already held drops what this window holds after it (an
    /// ingest's blocks of a term whose last steps were never published),
    /// one that does not connect restarts the window from it, as that
    /// tracker's did. A removed block leaves the tip.
    pub fn follow(&mut self, change: &ChainEvent) {
        match change {
            ChainEvent::Added(block) => {
                if let Some(at) = self.blocks.iter().rposition(|b| b.hash == block.hash) {
                    for dropped in self.blocks.split_off(at + 1) {
                        self.release(&dropped);
                    }
                } else if self.apply(block.clone()).is_err() {
                    self.reset(block.clone());
                }
            }
            ChainEvent::Removed(block) => {
                if self.tip().is_some_and(|tip| tip.hash == block.hash) {
                    self.blocks.pop_back();
                    self.release(block);
                }
            }
            ChainEvent::Pending(_) | ChainEvent::Watch(_) | ChainEvent::Lifecycle(_) => {}
        }
    }

    /// Forgets everything and restarts from `block` (after a reorg deeper
    /// than the window, or a gap too large to backfill).
    pub fn reset(&mut self, block: Arc<Block>) -> Vec<ChainEvent> {
        self.blocks.clear();
        self.transactions.clear();
        self.push(block)
    }

    fn push(&mut self, block: Arc<Block>) -> Vec<ChainEvent> {
        self.hold(&block);
        self.blocks.push_back(block.clone());
        if self.blocks.len() > self.window
            && let Some(oldest) = self.blocks.pop_front()
        {
            self.release(&oldest);
        }
        vec![ChainEvent::Added(block)]
    }

    fn hold(&mut self, block: &Block) {
        let number = block.number();
        for (index, tx) in block.transactions.iter().enumerate() {
            self.transactions.insert(tx.hash, (number, index));
        }
    }

    /// Forgets `block`'s transactions, unless a block held since placed
    /// one of them elsewhere.
    fn release(&mut self, block: &Block) {
        let number = block.number();
        for (index, tx) in block.transactions.iter().enumerate() {
            if self.transactions.get(&tx.hash) == Some(&(number, index)) {
                self.transactions.remove(&tx.hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block at `number` on branch `branch`, child of `parent`.
    fn block(number: u64, branch: u8, parent: B256) -> Arc<Block> {
        block_with(number, branch, parent, &[])
    }

    /// The same, holding transactions `txs`.
    fn block_with(number: u64, branch: u8, parent: B256, txs: &[B256]) -> Arc<Block> {
        Arc::new(Block::fixture(number, branch, parent, txs))
    }

    fn chain(len: u64, window: usize) -> (CanonicalChain, Vec<Arc<Block>>) {
        let mut c = CanonicalChain::new(window);
        let mut blocks = Vec::new();
        let mut parent = B256::ZERO;
        for n in 0..len {
            let b = block(n, 1, parent);
            parent = b.hash;
            c.apply(b.clone()).expect("extends");
            blocks.push(b);
        }
        (c, blocks)
    }

    fn describe(events: &[ChainEvent]) -> Vec<(char, u64, u8)> {
        events
            .iter()
            .map(|e| match e {
                ChainEvent::Added(b) => ('+', b.number(), b.hash[31]),
                ChainEvent::Removed(b) => ('-', b.number(), b.hash[31]),
                ChainEvent::Pending(_) => ('p', 0, 0),
                ChainEvent::Watch(edit) => ('w', *edit, 0),
                ChainEvent::Lifecycle(turns) => ('l', turns.len() as u64, 0),
            })
            .collect()
    }

    #[test]
    fn extends_and_keeps_a_window() {
        let (c, blocks) = chain(10, 4);
        assert_eq!(c.tip().map(|b| b.number()), Some(9));
        assert_eq!(c.oldest().map(|b| b.number()), Some(6));
        assert!(c.by_number(5).is_none());
        assert_eq!(c.by_number(7).map(|b| b.hash), Some(blocks[7].hash));
        assert_eq!(c.by_hash(&blocks[8].hash).map(|b| b.number()), Some(8));
    }

    #[test]
    fn reorg_removes_newest_first_then_adds() {
        let (mut c, blocks) = chain(6, 16);
        // A branch forking after block 2: 3', then 4', 5', 6'.
        let b3 = block(3, 2, blocks[2].hash);
        assert_eq!(
            describe(&c.apply(b3.clone()).expect("reorg")),
            vec![('-', 5, 1), ('-', 4, 1), ('-', 3, 1), ('+', 3, 2)]
        );
        let b4 = block(4, 2, b3.hash);
        assert_eq!(describe(&c.apply(b4).expect("extends")), vec![('+', 4, 2)]);
        assert_eq!(c.by_number(3).map(|b| b.hash), Some(b3.hash));
    }

    #[test]
    fn duplicates_are_ignored_and_unknown_parents_reported() {
        let (mut c, blocks) = chain(3, 16);
        assert!(c.apply(blocks[1].clone()).expect("known").is_empty());
        let stray = block(9, 3, B256::repeat_byte(0xee));
        assert!(matches!(
            c.apply(stray.clone()),
            Err(TrackError::UnknownParent { number: 9, .. })
        ));
        assert_eq!(describe(&c.reset(stray)), vec![('+', 9, 3)]);
        assert_eq!(c.oldest().map(|b| b.number()), Some(9));
    }

    /// A window following another tracker's changes holds what that
    /// tracker holds after each of them: a reorg's removals leave the tip
    /// one by one, a block that does not connect restarts it.
    #[test]
    fn a_follower_holds_what_the_leader_holds() {
        let (mut leader, blocks) = chain(6, 16);
        let mut follower = CanonicalChain::new(16);
        for block in &blocks {
            follower.follow(&ChainEvent::Added(block.clone()));
        }
        let held = |c: &CanonicalChain| c.blocks().map(|b| b.hash).collect::<Vec<_>>();
        let b3 = block(3, 2, blocks[2].hash);
        let stray = block(9, 3, B256::repeat_byte(0xee));
        let changes = [
            leader.apply(b3.clone()).expect("reorg"),
            leader.apply(block(4, 2, b3.hash)).expect("extends"),
            leader.reset(stray),
        ];
        for change in changes.iter().flatten() {
            follower.follow(change);
            if let ChainEvent::Removed(block) = change {
                assert_eq!(follower.tip().map(|b| b.hash), Some(block.parent_hash()));
            }
        }
        assert_eq!(held(&follower), held(&leader));
        follower.follow(&ChainEvent::Removed(blocks[0].clone()));
        assert_eq!(held(&follower), held(&leader), "only the tip leaves");
    }

    /// A window that ran ahead of the log it follows (an ingest whose
    /// last blocks were never published) is cut back to each block the log
    /// adds, then extended from there: the node's next blocks come out as
    /// changes again.
    #[test]
    fn a_follower_ahead_of_the_log_is_cut_back() {
        let (mut ahead, blocks) = chain(8, 16);
        for block in &blocks[..5] {
            ahead.follow(&ChainEvent::Added(block.clone()));
        }
        assert_eq!(ahead.tip().map(|b| b.number()), Some(4));
        assert_eq!(ahead.blocks().count(), 5);
        assert_eq!(
            describe(&ahead.apply(blocks[5].clone()).expect("extends")),
            vec![('+', 5, 1)]
        );
    }

    #[test]
    fn reorg_deeper_than_the_window_is_refused() {
        let (mut c, blocks) = chain(10, 3);
        let fork = block(2, 2, blocks[1].hash);
        assert!(c.apply(fork).is_err());
        assert_eq!(c.tip().map(|b| b.number()), Some(9));
    }

    /// A transaction is found while its block is canonical and in the
    /// window: a reorg moves it to the block of the new branch that holds
    /// it again, or forgets it; a block leaving the window forgets its own.
    #[test]
    fn transactions_are_found_where_the_window_holds_them() {
        let (a, b, c) = (
            B256::repeat_byte(0xa),
            B256::repeat_byte(0xb),
            B256::repeat_byte(0xc),
        );
        let mut chain = CanonicalChain::new(3);
        let one = block_with(1, 1, B256::ZERO, &[a]);
        let two = block_with(2, 1, one.hash, &[b, c]);
        chain.apply(one.clone()).expect("first");
        chain.apply(two.clone()).expect("extends");
        let at = |chain: &CanonicalChain, hash| {
            chain
                .transaction(&hash)
                .map(|(block, index)| (block.hash, index))
        };
        assert_eq!(at(&chain, c), Some((two.hash, 1)));
        // Block 2 is orphaned; its replacement holds only `c`, first.
        let two_again = block_with(2, 2, one.hash, &[c]);
        chain.apply(two_again.clone()).expect("reorg");
        assert_eq!(at(&chain, b), None, "orphaned with its block");
        assert_eq!(at(&chain, c), Some((two_again.hash, 0)), "mined again");
        // Two more blocks push block 1 out of a window of three.
        let three = block_with(3, 2, two_again.hash, &[]);
        chain.apply(three.clone()).expect("extends");
        assert_eq!(at(&chain, a), Some((one.hash, 0)));
        chain
            .apply(block_with(4, 2, three.hash, &[]))
            .expect("extends");
        assert_eq!(at(&chain, a), None, "out of the window");
        // A follower cut back forgets what it cut.
        chain.follow(&ChainEvent::Added(two_again.clone()));
        assert_eq!(at(&chain, c), Some((two_again.hash, 0)));
        chain.follow(&ChainEvent::Removed(two_again));
        assert_eq!(at(&chain, c), None);
    }
}
