//! One node's health as its chain judges it (docs/src/nodes.md, Node
//! health): what it announced, and whether its heads count. The rules are
//! pure (time is passed in), so they are tested without sockets; the
//! ingest drives them and [`super::NodePool`] keeps the result for calls,
//! `/readyz` and `/metrics`.

use std::time::{Duration, Instant};

use chainsieve_config::NodesSpec;

/// Where a node stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Not connected yet, or connected with no head announced yet.
    Connecting,
    /// Its heads count.
    Live,
    /// More than `lag_blocks` behind the chain; its heads still count.
    Lagging { behind: u64 },
    /// No new head for the stall threshold while the chain went past it.
    Stalled,
    /// Its connection failed.
    Down { reason: String },
    /// It served a block that failed verification.
    Excluded { reason: String },
}

impl NodeState {
    /// Every state's name.
    pub const NAMES: [&str; 6] = [
        "connecting",
        "live",
        "lagging",
        "stalled",
        "down",
        "excluded",
    ];

    /// The state's name, as `/readyz` and the logs say it.
    pub fn name(&self) -> &'static str {
        match self {
            NodeState::Connecting => "connecting",
            NodeState::Live => "live",
            NodeState::Lagging { .. } => "lagging",
            NodeState::Stalled => "stalled",
            NodeState::Down { .. } => "down",
            NodeState::Excluded { .. } => "excluded",
        }
    }

    /// Whether its heads count toward the chain.
    pub fn counts(&self) -> bool {
        matches!(self, NodeState::Live | NodeState::Lagging { .. })
    }

    /// The reason a node is set aside, if it is.
    pub fn reason(&self) -> Option<String> {
        match self {
            NodeState::Lagging { behind } => Some(format!("{behind} blocks behind the chain")),
            NodeState::Stalled => Some("no new head while the chain went on".into()),
            NodeState::Down { reason } | NodeState::Excluded { reason } => Some(reason.clone()),
            NodeState::Connecting | NodeState::Live => None,
        }
    }
}

/// How many blocks a node's head at `head` is behind the chain's tip at
/// `tip`: negative when the node is ahead (the chain has not taken blocks
/// the node has), as `/readyz` and `/metrics` say it.
pub fn lag(tip: u64, head: u64) -> i64 {
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    if tip >= head {
        signed(tip - head)
    } else {
        -signed(head - tip)
    }
}

/// The thresholds a node is held to.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    pub lag_blocks: u64,
    pub stall_after: Duration,
    pub rejoin_heads: u32,
}

impl From<&NodesSpec> for Rules {
    fn from(spec: &NodesSpec) -> Self {
        Self {
            lag_blocks: spec.lag_blocks,
            stall_after: spec.stall_after,
            rejoin_heads: spec.rejoin_heads,
        }
    }
}

/// One node's record.
#[derive(Clone, Debug)]
pub struct Health {
    state: NodeState,
    /// The highest block number it announced.
    head: Option<u64>,
    /// When it last announced a new, higher head.
    advanced_at: Option<Instant>,
    /// Heads in a row at or past the chain's, while set aside.
    rejoining: u32,
    /// Whether it ever counted: a node that never did joins on its first
    /// head that is not behind, as every node does at startup.
    ever_counted: bool,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            state: NodeState::Connecting,
            head: None,
            advanced_at: None,
            rejoining: 0,
            ever_counted: false,
        }
    }
}

impl Health {
    pub fn state(&self) -> &NodeState {
        &self.state
    }

    pub fn head(&self) -> Option<u64> {
        self.head
    }

    /// A head `number` announced at `now`, the chain's tip being `tip`;
    /// `others_count`: whether another node's heads count. Answers the
    /// new state if it changed.
    pub fn on_head(
        &mut self,
        number: u64,
        tip: Option<u64>,
        others_count: bool,
        rules: &Rules,
        now: Instant,
    ) -> Option<NodeState> {
        if self.head.is_none_or(|head| number > head) {
            self.advanced_at = Some(now);
        }
        // A reorg to a shorter branch lowers the head, as the node says.
        self.head = Some(number);
        let tip = tip.unwrap_or(number);
        let behind = tip.saturating_sub(number);
        let next = if self.state.counts() {
            lag_state(behind, rules)
        } else {
            let caught_up = number >= tip;
            self.rejoining = if caught_up { self.rejoining + 1 } else { 0 };
            let fresh = !self.ever_counted && behind <= rules.lag_blocks;
            // With no node counting, the chain has nothing better.
            if fresh || !others_count || self.rejoining >= rules.rejoin_heads {
                lag_state(behind, rules)
            } else {
                return None;
            }
        };
        self.set(next)
    }

    /// The chain's tip moved to `tip` at `now`: a node that counts may now
    /// be lagging or stalled.
    pub fn on_tip(&mut self, tip: u64, rules: &Rules, now: Instant) -> Option<NodeState> {
        if !self.state.counts() {
            return None;
        }
        let head = self.head.unwrap_or(0);
        let quiet = self
            .advanced_at
            .is_some_and(|at| now.saturating_duration_since(at) >= rules.stall_after);
        if quiet && tip > head {
            return self.set(NodeState::Stalled);
        }
        self.set(lag_state(tip.saturating_sub(head), rules))
    }

    /// Its connection failed.
    pub fn on_down(&mut self, reason: String) -> Option<NodeState> {
        self.set(NodeState::Down { reason })
    }

    /// It served a block that failed verification.
    pub fn on_excluded(&mut self, reason: String) -> Option<NodeState> {
        self.set(NodeState::Excluded { reason })
    }

    fn set(&mut self, next: NodeState) -> Option<NodeState> {
        if next == self.state {
            return None;
        }
        if next.counts() {
            self.ever_counted = true;
        } else {
            self.rejoining = 0;
        }
        // A lag that only changes by a block is no news.
        let news = !matches!(
            (&self.state, &next),
            (NodeState::Lagging { .. }, NodeState::Lagging { .. })
        );
        self.state = next.clone();
        news.then_some(next)
    }
}

fn lag_state(behind: u64, rules: &Rules) -> NodeState {
    if behind > rules.lag_blocks {
        NodeState::Lagging { behind }
    } else {
        NodeState::Live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        lag_blocks: 3,
        stall_after: Duration::from_secs(3),
        rejoin_heads: 3,
    };

    #[test]
    fn a_new_node_counts_from_its_first_head_unless_it_is_behind() {
        let now = Instant::now();
        let mut fresh = Health::default();
        assert_eq!(
            fresh.on_head(10, Some(10), true, &RULES, now),
            Some(NodeState::Live)
        );
        let mut behind = Health::default();
        assert_eq!(behind.on_head(5, Some(10), true, &RULES, now), None);
        assert_eq!(behind.state(), &NodeState::Connecting);
        // Alone, it is all the chain has.
        assert_eq!(
            behind.on_head(5, Some(10), false, &RULES, now),
            Some(NodeState::Lagging { behind: 5 })
        );
    }

    #[test]
    fn lagging_comes_and_goes_with_the_distance() {
        let now = Instant::now();
        let mut node = Health::default();
        node.on_head(10, Some(10), true, &RULES, now);
        assert_eq!(
            node.on_tip(14, &RULES, now),
            Some(NodeState::Lagging { behind: 4 })
        );
        assert_eq!(node.on_tip(15, &RULES, now), None, "still lagging");
        assert_eq!(node.state(), &NodeState::Lagging { behind: 5 });
        assert!(node.state().counts());
        assert_eq!(
            node.on_head(13, Some(15), true, &RULES, now),
            Some(NodeState::Live)
        );
    }

    #[test]
    fn a_node_quiet_while_the_chain_goes_on_is_stalled_and_rejoins_after_heads_in_a_row() {
        let start = Instant::now();
        let mut node = Health::default();
        node.on_head(10, Some(10), true, &RULES, start);
        // A quiet chain stalls no one.
        let later = start + Duration::from_secs(10);
        assert_eq!(node.on_tip(10, &RULES, later), None);
        assert_eq!(
            node.on_tip(11, &RULES, later),
            Some(NodeState::Stalled),
            "{node:?}"
        );
        assert!(!node.state().counts());
        // Back: heads at or past the chain's, three in a row.
        assert_eq!(node.on_head(11, Some(11), true, &RULES, later), None);
        assert_eq!(
            node.on_head(11, Some(12), true, &RULES, later),
            None,
            "behind resets"
        );
        assert_eq!(node.on_head(12, Some(12), true, &RULES, later), None);
        assert_eq!(node.on_head(13, Some(13), true, &RULES, later), None);
        assert_eq!(
            node.on_head(14, Some(14), true, &RULES, later),
            Some(NodeState::Live)
        );
    }

    #[test]
    fn down_and_excluded_nodes_rejoin_the_same_way_or_at_once_when_alone() {
        let now = Instant::now();
        let mut node = Health::default();
        node.on_head(10, Some(10), true, &RULES, now);
        assert_eq!(
            node.on_excluded("a wrong body".into()),
            Some(NodeState::Excluded {
                reason: "a wrong body".into()
            })
        );
        assert_eq!(node.on_head(11, Some(11), true, &RULES, now), None);
        node.on_down("closed".into());
        assert_eq!(
            node.on_head(12, Some(11), false, &RULES, now),
            Some(NodeState::Live),
            "the only node"
        );
    }
}
