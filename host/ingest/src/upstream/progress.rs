//! Whether the chain moves as its nodes do (docs/src/nodes.md, Node
//! health): a chain whose delivered tip stays put for the stall threshold
//! while as many nodes as the quorum are past it is stuck, whatever each
//! node's own state, and is not reported live. The rule is pure (time is
//! passed in), as [`chainsieve_node::health`]'s are.

use std::time::Instant;

use chainsieve_node::Rules;

/// The chain's progress against its nodes' heads.
#[derive(Debug)]
pub struct Progress {
    /// The delivered tip last seen, and since when.
    tip: Option<u64>,
    moved_at: Instant,
    /// Why the chain is stuck, while it is.
    stuck: Option<String>,
}

/// A change of [`Progress`]'s verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Stuck, for this reason.
    Stuck(String),
    /// Moving again.
    Moving,
}

impl Progress {
    pub fn new(now: Instant) -> Self {
        Self {
            tip: None,
            moved_at: now,
            stuck: None,
        }
    }

    /// Why the chain is stuck, if it is.
    pub fn stuck(&self) -> Option<&str> {
        self.stuck.as_deref()
    }

    /// The chain's delivered tip is `tip` (`None` before any) at `now`,
    /// the counting nodes' heads are `heads`; `cause` says what kept the
    /// chain from going further, as far as the caller knows (asked only
    /// when the chain turns stuck). Answers the verdict if it changed.
    pub fn check(
        &mut self,
        tip: Option<u64>,
        heads: &[u64],
        quorum: usize,
        rules: &Rules,
        cause: impl FnOnce() -> String,
        now: Instant,
    ) -> Option<Verdict> {
        if tip != self.tip {
            self.tip = tip;
            self.moved_at = now;
        }
        let reach = reach(heads, quorum);
        let ahead = reach.is_some_and(|reach| tip.is_none_or(|tip| reach > tip));
        let stuck = ahead && now.saturating_duration_since(self.moved_at) >= rules.stall_after;
        // Only the change of verdict is news: the reason is the one it
        // turned stuck with.
        match (self.stuck.is_some(), stuck) {
            (false, true) => {
                let at =
                    tip.map_or_else(|| "no block yet".to_string(), |tip| format!("block {tip}"));
                let reason = format!(
                    "the chain has stayed at {at} for {} s or more while {} of its nodes are at block {} or past it: {}",
                    rules.stall_after.as_secs(),
                    quorum.min(heads.len()),
                    reach.unwrap_or_default(),
                    cause()
                );
                self.stuck = Some(reason.clone());
                Some(Verdict::Stuck(reason))
            }
            (true, false) => {
                self.stuck = None;
                Some(Verdict::Moving)
            }
            _ => None,
        }
    }
}

/// The highest block `quorum` of `heads` have reached (all of them, if
/// fewer).
fn reach(heads: &[u64], quorum: usize) -> Option<u64> {
    let mut heads = heads.to_vec();
    heads.sort_unstable_by(|a, b| b.cmp(a));
    let index = quorum.clamp(1, heads.len().max(1)) - 1;
    heads.get(index).copied()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const RULES: Rules = Rules {
        lag_blocks: 5,
        stall_after: Duration::from_secs(3),
        rejoin_heads: 3,
    };

    #[test]
    fn a_tip_that_stays_while_a_quorum_of_nodes_goes_on_is_stuck_once() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut progress = Progress::new(start);
        let cause = "no block above it has 2 nodes' votes";
        let check = |progress: &mut Progress, tip: u64, heads: &[u64], secs| {
            progress.check(Some(tip), heads, 2, &RULES, || cause.to_string(), at(secs))
        };
        assert_eq!(check(&mut progress, 86, &[213, 213], 0), None);
        assert_eq!(check(&mut progress, 86, &[213, 213], 2), None);
        let Some(Verdict::Stuck(reason)) = check(&mut progress, 86, &[213, 214], 3) else {
            panic!("stuck after the stall threshold")
        };
        assert!(
            reason.contains("block 86") && reason.contains("213") && reason.contains(cause),
            "{reason}"
        );
        assert_eq!(check(&mut progress, 86, &[215, 216], 9), None, "said once");
        assert!(progress.stuck().is_some());
        assert_eq!(
            check(&mut progress, 87, &[215, 216], 10),
            Some(Verdict::Moving)
        );
        assert_eq!(progress.stuck(), None);
    }

    #[test]
    fn a_chain_at_its_nodes_heads_or_past_one_node_alone_is_not_stuck() {
        let start = Instant::now();
        let later = start + Duration::from_secs(60);
        let mut progress = Progress::new(start);
        progress.check(Some(100), &[100, 100], 2, &RULES, String::new, start);
        assert_eq!(
            progress.check(Some(100), &[100, 100], 2, &RULES, String::new, later),
            None
        );
        // One node ahead, the quorum two: the chain is where two nodes are.
        assert_eq!(
            progress.check(Some(100), &[300, 100], 2, &RULES, String::new, later),
            None
        );
        // No node counts: the nodes' states say why.
        assert_eq!(
            progress.check(Some(100), &[], 2, &RULES, String::new, later),
            None
        );
    }

    #[test]
    fn a_chain_that_never_delivered_while_its_nodes_have_blocks_is_stuck() {
        let start = Instant::now();
        let mut progress = Progress::new(start);
        let verdict = progress.check(
            None,
            &[213],
            1,
            &RULES,
            || "cause".to_string(),
            start + RULES.stall_after,
        );
        assert!(matches!(verdict, Some(Verdict::Stuck(reason)) if reason.contains("no block yet")));
    }
}
