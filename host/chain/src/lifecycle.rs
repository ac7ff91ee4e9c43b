//! The lifecycle tracker: where each transaction's life has come to, and
//! the [`Turn`]s each change of the chain makes of it (docs/src/api.md, A
//! transaction's life).
//!
//! Pure rules, the clock passed in. The pipeline asks it about every change
//! it takes (pending transactions, a block added or removed, a finality
//! mark, a drop) and logs the turns it answers as a step of their own right
//! after the change, so a replay, a restart or an edge tells the same turns
//! at the same places. Its state is a fold of its own turns: each turn is
//! followed as it is decided ([`Tracker::follow`]), so a tracker that follows
//! a log's turns (a restart, an edge, a new leader) stands where the one
//! that decided them stood.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::sync::Arc;

use alloy_primitives::{Address, B256};
use lru::LruCache;

use chainsieve_config::LifecycleConfig;
use chainsieve_model::lifecycle::{BlockRef, Outcome, Stage, Turn, TxBrief};
use chainsieve_model::{Block, Grade, Transaction};

/// The tracker's bounds, from `[lifecycle]` (docs/src/api.md, A
/// transaction's life).
#[derive(Clone, Copy, Debug)]
pub struct TrackerSettings {
    /// Pending transactions followed at most; past it the oldest is no
    /// longer followed (`[lifecycle] max_pending`).
    pub max_pending: NonZeroUsize,
    /// Blocks below the tip whose transactions are followed to `safe` and
    /// `finalized`: the log's window.
    pub keep_blocks: u64,
    /// How long a transaction is pending before the nodes are asked
    /// whether any still holds it, and again as long as one does
    /// (`[lifecycle] drop_after_secs`).
    pub drop_after_ms: u64,
}

impl TrackerSettings {
    /// The settings `[lifecycle]` gives a chain whose log keeps
    /// `keep_blocks` blocks.
    pub fn of(config: &LifecycleConfig, keep_blocks: u64) -> Self {
        Self {
            max_pending: NonZeroUsize::new(
                usize::try_from(config.max_pending).unwrap_or(usize::MAX),
            )
            .unwrap_or(NonZeroUsize::MIN),
            keep_blocks,
            drop_after_ms: config.drop_after_secs.saturating_mul(1_000),
        }
    }
}

impl Default for TrackerSettings {
    /// `[lifecycle]`'s defaults over a log of 128 blocks.
    fn default() -> Self {
        Self::of(&LifecycleConfig::default(), 128)
    }
}

/// A pending transaction followed.
#[derive(Debug)]
struct Waiting {
    brief: TxBrief,
    /// When the nodes are next asked whether they hold it (Unix ms).
    next_check_ms: u64,
}

/// A canonical block's transactions, followed until final.
#[derive(Debug)]
struct Mined {
    hash: B256,
    txs: Vec<(u32, TxBrief)>,
    /// Whether its transactions were told safe. A flag of the block, not a
    /// height: a reorg below a mark leaves the blocks it did not touch
    /// as told, and the new ones to tell.
    safe: bool,
}

/// Where each followed transaction's life has come to.
#[derive(Debug)]
pub struct Tracker {
    settings: TrackerSettings,
    /// Pending transactions, oldest first out when full.
    pending: LruCache<B256, Waiting>,
    /// The pending transaction holding each sender's nonce.
    by_nonce: HashMap<(Address, u64), B256>,
    /// Canonical blocks not yet final, by number.
    mined: BTreeMap<u64, Mined>,
    /// The block each transaction of `mined` is in.
    mined_in: HashMap<B256, u64>,
    /// Transactions whose life has ended (replaced, dropped, finalized): a
    /// node announcing one again late is not a new life. Bounded as
    /// `pending` is.
    settled: LruCache<B256, ()>,
}

impl Tracker {
    pub fn new(settings: TrackerSettings) -> Self {
        Self {
            settings,
            pending: LruCache::new(settings.max_pending),
            by_nonce: HashMap::new(),
            mined: BTreeMap::new(),
            mined_in: HashMap::new(),
            settled: LruCache::new(settings.max_pending),
        }
    }

    /// A tracker of the same settings that follows nothing yet: what a
    /// new ingest term starts from before following the log's tail.
    pub fn restarted(&self) -> Self {
        Self::new(self.settings)
    }

    /// Transactions announced pending at `now_ms` by `seen_by`: each one
    /// not followed yet is pending, after the turn of the transaction it
    /// replaces (the same sender and nonce), if any.
    pub fn pending(
        &mut self,
        txs: &[Arc<Transaction>],
        seen_by: Option<&Arc<str>>,
        now_ms: u64,
    ) -> Vec<Turn> {
        let mut turns = Vec::new();
        for tx in txs {
            if self.pending.contains(&tx.hash)
                || self.mined_in.contains_key(&tx.hash)
                || self.settled.contains(&tx.hash)
            {
                continue;
            }
            self.replaced_by(tx, &mut turns);
            self.decide(
                &mut turns,
                Turn {
                    tx: TxBrief::of(tx),
                    stage: Stage::Pending {
                        seen_ms: now_ms,
                        seen_by: seen_by.cloned(),
                        reorged_out: None,
                    },
                },
            );
        }
        turns
    }

    /// A block joined the canonical chain: each transaction is mined, after
    /// the turn of a pending one it replaces.
    ///
    /// Followed blocks at its height or above that are not it left the
    /// chain without a removal (a window that restarted from this block):
    /// their transactions are pending again first, newest block first, at
    /// `now_ms`.
    pub fn added(&mut self, block: &Block, now_ms: u64) -> Vec<Turn> {
        let mut turns = Vec::with_capacity(block.transactions.len());
        let stale: Vec<BlockRef> = self
            .mined
            .range(block.number()..)
            .rev()
            .map(|(number, mined)| BlockRef {
                number: *number,
                hash: mined.hash,
            })
            .filter(|old| old.hash != block.hash)
            .collect();
        for old in stale {
            self.unmine(old, now_ms, &mut turns);
        }
        let at = BlockRef::of(block);
        for (index, tx) in block.transactions.iter().enumerate() {
            self.replaced_by(tx, &mut turns);
            self.decide(
                &mut turns,
                Turn {
                    tx: TxBrief::of(tx),
                    stage: Stage::Mined {
                        block: at,
                        index: u32::try_from(index).unwrap_or(u32::MAX),
                        outcome: Outcome::of(block, index),
                    },
                },
            );
        }
        turns
    }

    /// A reorg took `block` away at `now_ms`: its transactions are pending
    /// again, last first (an undo, as the other topics' removals).
    pub fn removed(&mut self, block: &Block, now_ms: u64) -> Vec<Turn> {
        let mut turns = Vec::new();
        self.unmine(BlockRef::of(block), now_ms, &mut turns);
        turns
    }

    /// Adds the turns back to pending of block `at`'s transactions, last
    /// first, if it is followed.
    fn unmine(&mut self, at: BlockRef, now_ms: u64, turns: &mut Vec<Turn>) {
        let Some(mined) = self
            .mined
            .get(&at.number)
            .filter(|mined| mined.hash == at.hash)
        else {
            return;
        };
        let back: Vec<Turn> = mined
            .txs
            .iter()
            .rev()
            .map(|(_, brief)| Turn {
                tx: brief.clone(),
                stage: Stage::Pending {
                    seen_ms: now_ms,
                    seen_by: None,
                    reorged_out: Some(at),
                },
            })
            .collect();
        for turn in back {
            self.decide(turns, turn);
        }
    }

    /// The chain's `grade` reached block `height`: the transactions of the
    /// blocks at or below it not yet told so, block by block in order. A
    /// finalized block is safe first.
    pub fn finality(&mut self, grade: Grade, height: u64) -> Vec<Turn> {
        let mut turns = Vec::new();
        if grade == Grade::Finalized {
            turns = self.finality(Grade::Safe, height);
        }
        let passed: Vec<Turn> = self
            .mined
            .range(..=height)
            .filter(|(_, mined)| grade == Grade::Finalized || !mined.safe)
            .flat_map(|(number, mined)| {
                let block = BlockRef {
                    number: *number,
                    hash: mined.hash,
                };
                mined.txs.iter().map(move |(index, brief)| Turn {
                    tx: brief.clone(),
                    stage: match grade {
                        Grade::Safe => Stage::Safe {
                            block,
                            index: *index,
                        },
                        Grade::Finalized => Stage::Finalized {
                            block,
                            index: *index,
                        },
                    },
                })
            })
            .collect();
        for turn in passed {
            self.decide(&mut turns, turn);
        }
        turns
    }

    /// Transactions gone from every pool: those still pending are dropped.
    pub fn dropped(&mut self, hashes: &[B256]) -> Vec<Turn> {
        let mut turns = Vec::new();
        for hash in hashes {
            if let Some(waiting) = self.pending.peek(hash) {
                let tx = waiting.brief.clone();
                self.decide(
                    &mut turns,
                    Turn {
                        tx,
                        stage: Stage::Dropped,
                    },
                );
            }
        }
        turns
    }

    /// The pending transactions the nodes should be asked about at
    /// `now_ms`: pending `drop_after_ms` since they were seen or last
    /// asked. Each is asked again `drop_after_ms` later while pending.
    pub fn due(&mut self, now_ms: u64) -> Vec<B256> {
        let mut due = Vec::new();
        for (hash, waiting) in self.pending.iter_mut() {
            if waiting.next_check_ms <= now_ms {
                waiting.next_check_ms = now_ms.saturating_add(self.settings.drop_after_ms);
                due.push(*hash);
            }
        }
        due
    }

    /// How many pending transactions are followed.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Adds the turn of the pending transaction that `tx` replaces, if any.
    fn replaced_by(&mut self, tx: &Transaction, turns: &mut Vec<Turn>) {
        let Some(old) = self.by_nonce.get(&(tx.from, tx.nonce)).copied() else {
            return;
        };
        if old == tx.hash {
            return;
        }
        if let Some(waiting) = self.pending.peek(&old) {
            let turn = Turn {
                tx: waiting.brief.clone(),
                stage: Stage::Replaced { by: tx.hash },
            };
            self.decide(turns, turn);
        }
    }

    fn decide(&mut self, turns: &mut Vec<Turn>, turn: Turn) {
        self.follow(&turn);
        turns.push(turn);
    }

    /// Takes a turn into the state, as deciding it did.
    pub fn follow(&mut self, turn: &Turn) {
        let hash = turn.tx.hash;
        match &turn.stage {
            Stage::Pending {
                seen_ms,
                reorged_out,
                ..
            } => {
                if let Some(block) = reorged_out
                    && self
                        .mined
                        .get(&block.number)
                        .is_some_and(|mined| mined.hash == block.hash)
                {
                    self.forget_block(block.number);
                }
                let waiting = Waiting {
                    brief: turn.tx.clone(),
                    next_check_ms: seen_ms.saturating_add(self.settings.drop_after_ms),
                };
                if let Some((gone, waiting)) = self.pending.push(hash, waiting)
                    && gone != hash
                {
                    self.unpend(gone, &waiting.brief);
                }
                self.by_nonce.insert((turn.tx.from, turn.tx.nonce), hash);
            }
            Stage::Replaced { .. } | Stage::Dropped => {
                self.pending.pop(&hash);
                self.unpend(hash, &turn.tx);
                self.settled.put(hash, ());
            }
            Stage::Mined { block, index, .. } => {
                self.pending.pop(&hash);
                self.unpend(hash, &turn.tx);
                if self
                    .mined
                    .get(&block.number)
                    .is_some_and(|mined| mined.hash != block.hash)
                {
                    // A block replaced without its removal (a window that
                    // restarted from a block): the newer wins, and the
                    // older's transactions are no longer followed.
                    self.forget_block(block.number);
                }
                let mined = self.mined.entry(block.number).or_insert_with(|| Mined {
                    hash: block.hash,
                    txs: Vec::new(),
                    safe: false,
                });
                if mined.txs.iter().any(|(i, _)| i == index) {
                    // Followed already.
                    return;
                }
                mined.txs.push((*index, turn.tx.clone()));
                self.mined_in.insert(hash, block.number);
                let keep_from = block.number.saturating_sub(self.settings.keep_blocks);
                while let Some(oldest) = self.mined.first_key_value().map(|(n, _)| *n)
                    && oldest < keep_from
                {
                    self.forget_block(oldest);
                }
            }
            Stage::Safe { block, .. } => {
                if let Some(mined) = self
                    .mined
                    .get_mut(&block.number)
                    .filter(|mined| mined.hash == block.hash)
                {
                    mined.safe = true;
                }
            }
            Stage::Finalized { block, index } => {
                self.settled.put(hash, ());
                let last = self
                    .mined
                    .get(&block.number)
                    .and_then(|mined| mined.txs.last())
                    .map(|(last, _)| *last);
                if last == Some(*index) {
                    self.forget_block(block.number);
                }
            }
        }
    }

    /// Forgets a pending transaction's nonce, unless another holds it now.
    fn unpend(&mut self, hash: B256, brief: &TxBrief) {
        let key = (brief.from, brief.nonce);
        if self.by_nonce.get(&key) == Some(&hash) {
            self.by_nonce.remove(&key);
        }
    }

    fn forget_block(&mut self, number: u64) {
        if let Some(mined) = self.mined.remove(&number) {
            for (_, brief) in mined.txs {
                self.mined_in.remove(&brief.hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::Address;

    use super::*;

    const ALICE: Address = Address::repeat_byte(0xaa);

    fn settings() -> TrackerSettings {
        TrackerSettings {
            max_pending: NonZeroUsize::new(3).expect("not zero"),
            keep_blocks: 8,
            drop_after_ms: 1_000,
        }
    }

    /// A transaction of `from` with `nonce`, known by `hash`'s byte.
    fn tx(hash: u8, from: Address, nonce: u64) -> Arc<Transaction> {
        Arc::new(Transaction {
            from,
            nonce,
            ..Transaction::fixture(B256::repeat_byte(hash))
        })
    }

    fn block(number: u64, branch: u8, txs: &[&Arc<Transaction>]) -> Block {
        let mut block = Block::fixture(number, branch, B256::ZERO, &[]);
        block.transactions = txs.iter().map(|tx| Arc::clone(tx)).collect();
        block.gas_used = Some(vec![21_000; txs.len()].into());
        block
    }

    /// Each turn as (transaction hash byte, stage name).
    fn told(turns: &[Turn]) -> Vec<(u8, &'static str)> {
        turns
            .iter()
            .map(|turn| (turn.tx.hash.0[0], turn.stage.name()))
            .collect()
    }

    /// A tracker that follows `turns` from scratch.
    fn following(turns: &[Turn]) -> Tracker {
        let mut tracker = Tracker::new(settings());
        turns.iter().for_each(|turn| tracker.follow(turn));
        tracker
    }

    /// pending → replaced by a higher fee's transaction → that one mined →
    /// safe → finalized; each once, in order, and the replaced one is not
    /// told again when its replacement is mined.
    #[test]
    fn a_replacement_is_told_once_and_its_winner_followed_to_final() {
        let mut tracker = Tracker::new(settings());
        let (first, second) = (tx(1, ALICE, 0), tx(2, ALICE, 0));
        let node: Arc<str> = "a".into();
        let mut all = tracker.pending(std::slice::from_ref(&first), Some(&node), 10);
        assert_eq!(told(&all), [(1, "pending")]);
        let turns = tracker.pending(std::slice::from_ref(&second), Some(&node), 20);
        assert_eq!(told(&turns), [(1, "replaced"), (2, "pending")]);
        assert_eq!(
            turns[0].stage,
            Stage::Replaced {
                by: B256::repeat_byte(2)
            }
        );
        all.extend(turns);
        // Announced again by another node: nothing new.
        assert!(
            tracker
                .pending(std::slice::from_ref(&second), None, 30)
                .is_empty()
        );
        let mined = block(5, 0, &[&second]);
        let turns = tracker.added(&mined, 0);
        assert_eq!(told(&turns), [(2, "mined")]);
        let Stage::Mined { outcome, index, .. } = &turns[0].stage else {
            panic!("mined")
        };
        assert_eq!((*index, outcome.map(|o| o.gas_used)), (0, Some(21_000)));
        all.extend(turns);
        assert!(
            tracker.finality(Grade::Safe, 4).is_empty(),
            "below its block"
        );
        let turns = tracker.finality(Grade::Safe, 5);
        assert_eq!(told(&turns), [(2, "safe")]);
        all.extend(turns);
        assert!(tracker.finality(Grade::Safe, 6).is_empty(), "told once");
        let turns = tracker.finality(Grade::Finalized, 6);
        assert_eq!(told(&turns), [(2, "finalized")]);
        all.extend(turns);
        assert!(
            tracker.finality(Grade::Finalized, 7).is_empty(),
            "told once"
        );
        assert_eq!(tracker.pending_count(), 0);
        // A tracker that followed the log's turns stands where this one
        // does: the finalized transaction is forgotten by both.
        let mut restored = following(&all);
        assert_eq!(restored.pending_count(), 0);
        assert!(restored.mined.is_empty() && tracker.mined.is_empty());
        assert!(restored.finality(Grade::Finalized, 7).is_empty());
        // Followed twice (a new term over the same tail), the same.
        let mut twice = following(&all);
        all.iter().for_each(|turn| twice.follow(turn));
        assert!(twice.finality(Grade::Finalized, 7).is_empty());
        // A late announcement of an ended life is no new one.
        assert!(tracker.pending(&[first, second], None, 40).is_empty());
    }

    /// Mined, reorganised out (pending again, saying from which block),
    /// mined again on the other branch; a finalized block is safe first.
    #[test]
    fn a_reorg_turns_a_mined_transaction_back_to_pending() {
        let mut tracker = Tracker::new(settings());
        let (a, b) = (tx(1, ALICE, 0), tx(2, ALICE, 1));
        tracker.pending(&[a.clone(), b.clone()], None, 0);
        let old = block(3, 0, &[&a, &b]);
        assert_eq!(told(&tracker.added(&old, 0)), [(1, "mined"), (2, "mined")]);
        let turns = tracker.removed(&old, 50);
        // An undo: the last mined first.
        assert_eq!(told(&turns), [(2, "pending"), (1, "pending")]);
        assert_eq!(
            turns[0].stage,
            Stage::Pending {
                seen_ms: 50,
                seen_by: None,
                reorged_out: Some(BlockRef::of(&old)),
            }
        );
        assert!(tracker.removed(&old, 60).is_empty(), "once");
        let new = block(3, 1, &[&a]);
        assert_eq!(told(&tracker.added(&new, 0)), [(1, "mined")]);
        assert_eq!(
            told(&tracker.finality(Grade::Finalized, 3)),
            [(1, "safe"), (1, "finalized")]
        );
        assert_eq!(tracker.pending_count(), 1, "b waits for a block");
    }

    /// Dropped once asked about and gone from every pool; one mined
    /// meanwhile is not; the checks come `drop_after` apart.
    #[test]
    fn a_drop_is_told_only_of_a_transaction_still_pending() {
        let mut tracker = Tracker::new(settings());
        let (a, b) = (tx(1, ALICE, 0), tx(2, ALICE, 1));
        tracker.pending(&[a.clone(), b.clone()], None, 0);
        assert!(tracker.due(999).is_empty());
        let mut due = tracker.due(1_000);
        due.sort();
        assert_eq!(due, [a.hash, b.hash]);
        assert!(tracker.due(1_500).is_empty(), "asked again a period later");
        assert_eq!(tracker.due(2_000).len(), 2);
        tracker.added(&block(1, 0, &[&a]), 0);
        let turns = tracker.dropped(&[a.hash, b.hash]);
        assert_eq!(told(&turns), [(2, "dropped")]);
        assert!(tracker.dropped(&[b.hash]).is_empty(), "once");
        assert_eq!(tracker.pending_count(), 0);
    }

    /// A reorg below a mark: a block it brings is told safe at the next
    /// mark, though blocks above the old one were passed before; a block
    /// replaced without its removal takes its transactions out of the
    /// followed.
    #[test]
    fn a_block_a_reorg_brings_below_a_mark_is_told_at_the_next() {
        let mut tracker = Tracker::new(settings());
        let (a, b, c) = (tx(1, ALICE, 0), tx(2, ALICE, 1), tx(3, ALICE, 2));
        tracker.added(&block(1, 0, &[&a]), 0);
        assert_eq!(told(&tracker.finality(Grade::Safe, 3)), [(1, "safe")]);
        // Blocks 2 and 3 (empty) left; the new 2 holds b.
        tracker.added(&block(2, 1, &[&b]), 0);
        assert_eq!(told(&tracker.finality(Grade::Safe, 4)), [(2, "safe")]);
        let old = block(5, 0, &[&c]);
        tracker.added(&old, 0);
        let turns = tracker.added(&block(5, 1, &[]), 9);
        assert_eq!(told(&turns), [(3, "pending")], "replaced without a removal");
        let Stage::Pending { reorged_out, .. } = &turns[0].stage else {
            panic!("pending")
        };
        assert_eq!(*reorged_out, Some(BlockRef::of(&old)));
        assert!(!tracker.mined_in.contains_key(&c.hash));
    }

    /// Past `max_pending` the oldest is no longer followed; a transaction
    /// mined without being seen pending is still told mined; blocks older
    /// than `keep_blocks` are forgotten.
    #[test]
    fn what_is_followed_is_bounded() {
        let mut tracker = Tracker::new(settings());
        let txs: Vec<_> = (1..=4).map(|n| tx(n, ALICE, u64::from(n))).collect();
        tracker.pending(&txs, None, 0);
        assert_eq!(tracker.pending_count(), 3);
        assert!(tracker.dropped(&[txs[0].hash]).is_empty(), "not followed");
        assert!(!tracker.by_nonce.contains_key(&(ALICE, 1)));
        let unseen = tx(9, Address::repeat_byte(0xbb), 0);
        assert_eq!(
            told(&tracker.added(&block(1, 0, &[&unseen]), 0)),
            [(9, "mined")]
        );
        let later = tx(10, Address::repeat_byte(0xbb), 1);
        tracker.added(&block(20, 0, &[&later]), 0);
        assert_eq!(tracker.mined.len(), 1, "block 1 is past keep_blocks");
        assert_eq!(told(&tracker.finality(Grade::Safe, 20)), [(10, "safe")]);
    }
}
