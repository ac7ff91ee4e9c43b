//! Which block a chain of several nodes goes to (docs/src/nodes.md, How
//! nodes agree): the headers the nodes announced, as a tree by parent
//! hash, and each counting node's vote, its latest head. From the roots
//! down, the walk takes the child with the most votes in its subtree (a
//! tie keeps the branch already delivered, then the one seen first) for
//! as long as that child has at least `quorum` votes. With a quorum of 1
//! (`first`) that is any node's newest block, unless more nodes build on
//! another branch; with a quorum of k, the highest block k nodes have.
//!
//! The tree holds the heights from [`DEPTH`] below the delivered tip up,
//! the delivered blocks among them (those restored after a restart too,
//! [`Choice::seed`]), so every node's head is linked down to a block
//! they share; a fork deeper than that shows as two roots, and they
//! compete the same way. A header is placed only if it can be one: not its own parent, one
//! above a parent held, and no lower than the tree; so no node's answer
//! can make a walk loop or empty the tree.

use std::collections::HashMap;

use alloy_primitives::B256;

/// Heights the tree holds below the delivered tip.
pub const DEPTH: u64 = 128;

#[derive(Debug)]
struct Header {
    number: u64,
    parent: B256,
    /// Order first seen, for ties.
    seen: u64,
}

#[derive(Debug, Default)]
pub struct Choice {
    headers: HashMap<B256, Header>,
    children: HashMap<B256, Vec<B256>>,
    /// Each node's latest head, if its heads count.
    votes: Vec<Option<B256>>,
    seen: u64,
    /// The lowest height held: [`DEPTH`] below the delivered tip.
    floor: u64,
}

impl Choice {
    pub fn new(nodes: usize) -> Self {
        Self {
            votes: vec![None; nodes],
            ..Self::default()
        }
    }

    /// The parent of `hash`, if held.
    #[cfg(test)]
    fn parent(&self, hash: &B256) -> Option<B256> {
        self.headers.get(hash).map(|h| h.parent)
    }

    /// Whether `ancestor` is `hash` or below it in the tree.
    pub fn descends(&self, hash: &B256, ancestor: &B256) -> bool {
        self.ancestry(*hash).any(|at| at == *ancestor)
    }

    /// `hash` and its ancestors held, newest first; heights only fall (a
    /// placed header is one above its parent), so it ends.
    fn ancestry(&self, hash: B256) -> impl Iterator<Item = B256> + '_ {
        std::iter::successors(
            self.headers.contains_key(&hash).then_some(hash),
            move |at| {
                let header = self.headers.get(at)?;
                let parent = self.headers.get(&header.parent)?;
                (parent.number < header.number).then_some(header.parent)
            },
        )
    }

    /// Whether a header at `number` with parent `parent` links to the
    /// tree, or lies at its floor (nothing lower is held to link to). An
    /// empty tree links nothing above its floor: a head taken alone could
    /// never join another node's branch, and no block would get the
    /// votes of both.
    pub fn links(&self, number: u64, parent: &B256) -> bool {
        self.headers.contains_key(parent) || number <= self.floor.saturating_add(1)
    }

    /// Whether `hash` is held.
    pub fn holds(&self, hash: &B256) -> bool {
        self.headers.contains_key(hash)
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// Places the blocks delivered before a restart (linked, oldest
    /// first), so the nodes' heads link down to them as to blocks
    /// delivered since; the oldest is a root.
    pub fn seed(&mut self, blocks: &[(u64, B256)]) {
        let Some(&(tip, _)) = blocks.last() else {
            return;
        };
        self.delivered_up_to(tip);
        let mut parent = B256::ZERO;
        for &(number, hash) in blocks {
            self.insert(hash, number, parent);
            parent = hash;
        }
    }

    /// The lowest height held.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Adds a header, unless it cannot be one (see the module's doc).
    pub fn insert(&mut self, hash: B256, number: u64, parent: B256) {
        let misplaced = self
            .headers
            .get(&parent)
            .is_some_and(|held| held.number.checked_add(1) != Some(number));
        if self.headers.contains_key(&hash) || number < self.floor || parent == hash || misplaced {
            return;
        }
        self.seen += 1;
        self.headers.insert(
            hash,
            Header {
                number,
                parent,
                seen: self.seen,
            },
        );
        self.children.entry(parent).or_default().push(hash);
    }

    /// The delivered tip is at `tip`: heights below [`DEPTH`] under it are
    /// let go.
    pub fn delivered_up_to(&mut self, tip: u64) {
        let floor = tip.saturating_sub(DEPTH);
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        let old: Vec<B256> = self
            .headers
            .iter()
            .filter(|(_, h)| h.number < floor)
            .map(|(hash, _)| *hash)
            .collect();
        for hash in old {
            if let Some(header) = self.headers.remove(&hash) {
                self.children.remove(&header.parent);
            }
        }
    }

    /// Node `node`'s vote: its latest head, or `None` when its heads do not
    /// count.
    pub fn vote(&mut self, node: usize, head: Option<B256>) {
        self.votes[node] = head;
    }

    /// The block the chain should be at: see the module's doc. `delivered`
    /// says whether a block was delivered (and is still canonical).
    pub fn target(&self, quorum: usize, delivered: impl Fn(&B256) -> bool) -> Option<B256> {
        let weights = self.weights();
        let weight = |hash: &B256| weights.get(hash).copied().unwrap_or(0);
        let best = |candidates: &mut dyn Iterator<Item = &B256>| -> Option<B256> {
            candidates
                .filter(|hash| self.headers.contains_key(*hash))
                .max_by_key(|hash| {
                    let seen = self.headers.get(*hash).map_or(u64::MAX, |h| h.seen);
                    (weight(hash), delivered(hash), std::cmp::Reverse(seen))
                })
                .copied()
                .filter(|hash| weight(hash) >= quorum)
        };
        let mut roots = self
            .headers
            .iter()
            .filter(|(_, h)| !self.headers.contains_key(&h.parent))
            .map(|(hash, _)| hash);
        let mut at = best(&mut roots)?;
        while let Some(next) = self
            .children
            .get(&at)
            .and_then(|children| best(&mut children.iter()))
        {
            at = next;
        }
        Some(at)
    }

    /// Votes in each header's subtree.
    fn weights(&self) -> HashMap<B256, usize> {
        let mut weights = HashMap::new();
        for vote in self.votes.iter().flatten() {
            for at in self.ancestry(*vote) {
                *weights.entry(at).or_default() += 1;
            }
        }
        weights
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(branch: u8, number: u64) -> B256 {
        let mut bytes = [branch; 32];
        bytes[..8].copy_from_slice(&number.to_be_bytes());
        B256::from(bytes)
    }

    /// Blocks 1..=top of `branch` on top of `base` (block `from - 1`).
    fn chain(choice: &mut Choice, branch: u8, base: B256, from: u64, top: u64) {
        let mut parent = base;
        for n in from..=top {
            choice.insert(hash(branch, n), n, parent);
            parent = hash(branch, n);
        }
    }

    #[test]
    fn first_goes_to_any_nodes_newest_block() {
        let mut choice = Choice::new(3);
        chain(&mut choice, 0, B256::ZERO, 1, 5);
        choice.vote(0, Some(hash(0, 5)));
        choice.vote(1, Some(hash(0, 4)));
        assert_eq!(choice.target(1, |_| false), Some(hash(0, 5)));
        assert_eq!(choice.target(2, |_| false), Some(hash(0, 4)));
        assert_eq!(choice.target(3, |_| false), None);
    }

    #[test]
    fn a_minority_fork_goes_out_first_and_is_replaced_when_most_nodes_build_elsewhere() {
        let mut choice = Choice::new(3);
        chain(&mut choice, 0, B256::ZERO, 1, 4);
        for node in 0..3 {
            choice.vote(node, Some(hash(0, 4)));
        }
        // Node 0 announces its own block 5 first.
        chain(&mut choice, 1, hash(0, 4), 5, 5);
        choice.vote(0, Some(hash(1, 5)));
        assert_eq!(choice.target(1, |_| false), Some(hash(1, 5)));
        assert_eq!(choice.target(2, |_| false), Some(hash(0, 4)), "outvoted");
        // Node 1 announces another block 5: a tie keeps what went out.
        chain(&mut choice, 2, hash(0, 4), 5, 5);
        choice.vote(1, Some(hash(2, 5)));
        let delivered = |h: &B256| *h == hash(1, 5);
        assert_eq!(choice.target(1, delivered), Some(hash(1, 5)));
        // Node 2 joins node 1: most nodes build there.
        choice.vote(2, Some(hash(2, 5)));
        assert_eq!(choice.target(1, delivered), Some(hash(2, 5)));
        assert_eq!(choice.target(2, delivered), Some(hash(2, 5)));
        // Node 0 extends its fork: still two against one.
        chain(&mut choice, 1, hash(1, 5), 6, 6);
        choice.vote(0, Some(hash(1, 6)));
        assert_eq!(choice.target(1, delivered), Some(hash(2, 5)));
    }

    #[test]
    fn a_node_that_stops_counting_takes_its_vote_along() {
        let mut choice = Choice::new(2);
        chain(&mut choice, 0, B256::ZERO, 1, 3);
        chain(&mut choice, 1, hash(0, 2), 3, 3);
        choice.vote(0, Some(hash(0, 3)));
        choice.vote(1, Some(hash(1, 3)));
        let delivered = |h: &B256| *h == hash(0, 3);
        assert_eq!(choice.target(1, delivered), Some(hash(0, 3)));
        choice.vote(0, None);
        assert_eq!(choice.target(1, delivered), Some(hash(1, 3)));
    }

    #[test]
    fn unlinked_heads_compete_as_roots_and_old_heights_are_let_go() {
        let mut choice = Choice::new(3);
        chain(&mut choice, 0, B256::ZERO, 1, 3);
        choice.vote(0, Some(hash(0, 3)));
        // Two nodes on a branch whose start was never seen.
        chain(&mut choice, 7, B256::repeat_byte(0xee), 10, 11);
        assert!(!choice.links(10, &B256::repeat_byte(0xee)));
        choice.vote(1, Some(hash(7, 11)));
        let delivered = |h: &B256| h[31] == 0;
        assert_eq!(choice.target(1, delivered), Some(hash(0, 3)), "a tie");
        choice.vote(2, Some(hash(7, 10)));
        assert_eq!(choice.target(1, delivered), Some(hash(7, 11)));
        assert_eq!(choice.target(2, delivered), Some(hash(7, 10)));
        chain(&mut choice, 7, hash(7, 11), 12, 12 + DEPTH);
        choice.delivered_up_to(12 + DEPTH);
        assert!(choice.parent(&hash(7, 11)).is_none() && choice.parent(&hash(7, 12)).is_some());
        assert!(choice.links(5, &B256::ZERO), "below the tree");
    }

    /// After a restart the restored blocks are the tree's trunk: two
    /// nodes that forked above it, their branches walked down to it, agree
    /// on the blocks up to the fork and on nothing past it. An empty tree
    /// links no head above its floor (one taken alone would stay a root
    /// of its own and no block would get both votes).
    #[test]
    fn restored_blocks_join_the_branches_of_nodes_that_forked_since() {
        let mut choice = Choice::new(2);
        assert!(
            !choice.links(213, &hash(0, 212)),
            "an empty tree links nothing"
        );
        let restored: Vec<(u64, B256)> = (0..=67).map(|n| (n, hash(0, n))).collect();
        choice.seed(&restored);
        assert!(choice.holds(&hash(0, 67)) && choice.links(68, &hash(0, 67)));
        chain(&mut choice, 0, hash(0, 67), 68, 86);
        chain(&mut choice, 1, hash(0, 86), 87, 213);
        chain(&mut choice, 2, hash(0, 86), 87, 213);
        choice.vote(0, Some(hash(1, 213)));
        choice.vote(1, Some(hash(2, 213)));
        assert_eq!(choice.target(2, |h| *h == hash(0, 67)), Some(hash(0, 86)));
        assert_eq!(
            choice.target(1, |_| false),
            Some(hash(1, 213)),
            "a tie: seen first"
        );
    }

    #[test]
    fn headers_that_cannot_be_are_not_placed_and_no_walk_loops() {
        let mut choice = Choice::new(2);
        chain(&mut choice, 0, B256::ZERO, 1, 3);
        // Its own parent; a child two heights above its parent.
        choice.insert(hash(5, 9), 9, hash(5, 9));
        choice.insert(hash(6, 5), 5, hash(0, 3));
        assert!(choice.parent(&hash(5, 9)).is_none() && choice.parent(&hash(6, 5)).is_none());
        // A cycle through a parent placed after its child: walks end.
        choice.insert(hash(7, 20), 20, hash(8, 21));
        choice.insert(hash(8, 21), 21, hash(7, 20));
        choice.vote(0, Some(hash(7, 20)));
        choice.vote(1, Some(hash(8, 21)));
        assert_eq!(
            choice.target(1, |_| false),
            None,
            "no root leads to the cycle"
        );
        assert!(choice.descends(&hash(8, 21), &hash(7, 20)));
        assert!(!choice.descends(&hash(7, 20), &hash(8, 21)));
        // A head far above the rest empties nothing: the tree's floor
        // follows what was delivered.
        choice.insert(hash(9, 1_000_000), 1_000_000, B256::repeat_byte(3));
        assert!(choice.parent(&hash(0, 1)).is_some());
    }
}
