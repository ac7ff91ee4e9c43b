//! Reorgs: the devnet keeps its last blocks and now and then re-mines
//! them on a new branch.

use std::sync::Arc;

use super::Devnet;
use super::block::Generated;
use chainsieve_model::Block;

/// The deepest reorg the devnet makes (deeper settings are capped): real
/// chains reorganise a few blocks at most.
pub(super) const MAX_REORG_DEPTH: usize = 127;

impl Devnet {
    /// The configured reorg depth, capped at [`MAX_REORG_DEPTH`].
    pub(super) fn reorg_depth(&self) -> usize {
        usize::try_from(self.settings.reorg_depth)
            .unwrap_or(usize::MAX)
            .min(MAX_REORG_DEPTH)
    }

    /// Drops the last `depth` blocks for a new branch that re-mines their
    /// transactions in the same order (so nonces stay consistent), then
    /// extends it with `content`: the contents of its `depth + 1` blocks.
    pub(super) fn reorganise(
        &mut self,
        depth: usize,
        content: Arc<Vec<Generated>>,
    ) -> Vec<Arc<Vec<Generated>>> {
        self.reorgs += 1;
        let mut contents: Vec<Arc<Vec<Generated>>> = (0..depth)
            .map(|_| {
                let (block, content) = self.recent.pop_back().expect("more than depth blocks");
                self.ledger.orphaned(&block, &content);
                content
            })
            .collect();
        contents.reverse();
        contents.push(content);
        contents
    }

    /// Marks the end of the past: a later reorg replaces only blocks mined
    /// from here on, never history that was not delivered as live, and the
    /// reorg cadence starts over.
    pub fn go_live(&mut self) {
        while self.recent.len() > 1 {
            self.recent.pop_front();
        }
        self.blocks_since_reorg = 0;
    }

    pub(super) fn remember(&mut self, block: Arc<Block>, content: Arc<Vec<Generated>>) {
        self.ledger.built(&block, &content);
        self.recent.push_back((block, content));
        // A reorg of depth d needs the d blocks it replaces and their parent.
        let keep = self.reorg_depth() + 1;
        while self.recent.len() > keep {
            self.recent.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::DevnetSettings;
    use super::super::testing::settings;
    use super::*;
    use crate::canonical::CanonicalChain;
    use chainsieve_model::ChainEvent;
    use chainsieve_model::SourceEvent;

    /// Feeds the devnet through the canonical tracker and checks each reorg.
    fn check_reorgs(chain_id: u64, every: u64, depth: u64, steps: usize) -> usize {
        let mut devnet = Devnet::new(
            chain_id,
            &DevnetSettings {
                reorg_every: every,
                reorg_depth: depth,
                ..settings()
            },
        );
        let mut chain = CanonicalChain::new(MAX_REORG_DEPTH + 1);
        chain.apply(devnet.genesis()).expect("genesis");
        let mut seen = HashSet::from([devnet.genesis().hash]);
        let mut reorgs = 0;
        for _ in 0..steps {
            let blocks: Vec<Arc<Block>> = devnet
                .next_step()
                .into_iter()
                .filter_map(|e| match e {
                    SourceEvent::Block(b) => Some(b),
                    SourceEvent::Pending { .. }
                    | SourceEvent::Synced
                    | SourceEvent::Logged { .. }
                    | SourceEvent::Finality { .. }
                    | SourceEvent::Dropped(_) => None,
                })
                .collect();
            let Some(first) = blocks.first() else {
                continue;
            };
            for block in &blocks {
                assert!(seen.insert(block.hash), "no block hash repeats");
            }
            let tip = chain.tip().expect("a tip").clone();
            let forked = first.parent_hash() != tip.hash;
            if forked {
                reorgs += 1;
                assert_eq!(blocks.len() as u64, depth + 1);
                let ancestor = chain
                    .by_hash(&first.parent_hash())
                    .expect("the branch starts on an earlier canonical block");
                assert_eq!(ancestor.number(), tip.number() - depth);
                let heights: Vec<u64> = blocks.iter().map(|b| b.number()).collect();
                assert_eq!(
                    heights,
                    (tip.number() - depth + 1..=tip.number() + 1).collect::<Vec<_>>()
                );
                for (replacement, height) in blocks.iter().zip(ancestor.number() + 1..=tip.number())
                {
                    let orphan = chain.by_number(height).expect("the orphaned block");
                    assert_ne!(orphan.hash, replacement.hash);
                    let txs = |b: &Block| b.transactions.iter().map(|t| t.hash).collect::<Vec<_>>();
                    assert_eq!(
                        txs(orphan),
                        txs(replacement),
                        "orphaned transactions re-mined"
                    );
                    let logs =
                        |b: &Block| b.logs.iter().map(|l| l.inner.clone()).collect::<Vec<_>>();
                    assert_eq!(logs(orphan), logs(replacement));
                }
            } else {
                assert_eq!(blocks.len(), 1);
            }
            let mut removed = 0;
            for block in blocks {
                for event in chain.apply(block).expect("the tracker places every block") {
                    if let ChainEvent::Removed(_) = event {
                        removed += 1;
                    }
                }
            }
            assert_eq!(removed, if forked { depth } else { 0 });
        }
        reorgs
    }

    /// Once live, a reorg never replaces a block of the past (which was
    /// never delivered as live, so it cannot be undone).
    #[test]
    fn reorgs_after_going_live_replace_only_live_blocks() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                reorg_every: 1,
                reorg_depth: 2,
                ..settings()
            },
        );
        let blocks = |devnet: &mut Devnet| -> Vec<Arc<Block>> {
            devnet
                .next_step()
                .into_iter()
                .filter_map(|e| match e {
                    SourceEvent::Block(b) => Some(b),
                    SourceEvent::Pending { .. }
                    | SourceEvent::Synced
                    | SourceEvent::Logged { .. }
                    | SourceEvent::Finality { .. }
                    | SourceEvent::Dropped(_) => None,
                })
                .collect()
        };
        for _ in 0..30 {
            blocks(&mut devnet);
        }
        devnet.go_live();
        let live_from = devnet.tip().number();
        let reorgs_before = devnet.reorgs;
        for _ in 0..60 {
            if let Some(first) = blocks(&mut devnet).first() {
                assert!(
                    first.number() > live_from,
                    "block {} replaces the past (live from {live_from})",
                    first.number()
                );
            }
        }
        assert!(
            devnet.reorgs > reorgs_before,
            "the devnet reorganised once live"
        );
    }

    #[test]
    fn reorgs_replace_the_last_blocks_and_remine_their_transactions() {
        // Every 5 blocks, depth 2: a reorg each 25 steps.
        assert!(check_reorgs(56, 5, 2, 80) >= 3);
        // Reorgs more often than their depth: branches overlap earlier ones.
        assert!(check_reorgs(1, 1, 3, 60) >= 8);
        assert!(check_reorgs(137, 2, 2, 60) >= 5);
        // Off by default.
        assert_eq!(check_reorgs(1, 0, 2, 60), 0);
        // Deeper than the tracker can follow: capped.
        let deep = DevnetSettings {
            reorg_depth: u64::MAX,
            ..settings()
        };
        assert_eq!(Devnet::new(1, &deep).reorg_depth(), MAX_REORG_DEPTH);
    }
}
