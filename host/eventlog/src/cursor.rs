//! The cursor every notification carries, and what a client may resume
//! from (docs/src/architecture.md, The event log).
//!
//! A cursor names one event of one step of one chain's log:
//! `<chain>:<position>@<block>:<index>:<tag>`, e.g.
//! `eth:1042@19000123:3:9c0f2a41d8e7b655`. Clients treat it as opaque. The
//! tag (8 bytes of the block's hash) tells the step at that position from
//! another one (a log rebuilt at a restart without a data directory), so a
//! cursor never resumes at the wrong place silently; the block number
//! (block steps only; pending batches have none) places the event on the
//! chain once the log no longer holds its step. An event of a block read
//! from the nodes, older than the log (history), has no position:
//! `eth:@19000123:3:9c0f2a41d8e7b655`.

use std::fmt;

/// A step's place in its chain's log: 1 for the first step, one more for
/// each next.
pub type Position = u64;

/// One event: the `index`-th event of its stream's batch at `position`
/// of the log, or of block `block` read from the nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub chain: String,
    /// `None` for a block read from the nodes (history).
    pub position: Option<Position>,
    /// The number of the step's block; `None` for a batch of pending
    /// transactions (and in cursors written before numbers were).
    pub block: Option<u64>,
    pub index: u32,
    pub tag: u64,
}

impl Cursor {
    /// The index of a cursor after a whole step rather than after one
    /// stream's event in it: the head cursor's ([`crate::EventLog::head_cursor`]).
    pub const STEP_END: u32 = u32::MAX;

    /// Whether it names the end of a step, which every stream of the log
    /// resumes from (a block's step included for the pending streams), not
    /// an event of one stream.
    pub fn is_step_end(&self) -> bool {
        self.index == Self::STEP_END
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.chain)?;
        if let Some(position) = self.position {
            write!(f, "{position}")?;
        }
        if let Some(block) = self.block {
            write!(f, "@{block}")?;
        }
        write!(f, ":{}:{:016x}", self.index, self.tag)
    }
}

/// Why a `resumeFrom` string is not a cursor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "resumeFrom {text:?} is not a chainsieve cursor ({reason}); pass the \"cursor\" of the last notification received"
)]
pub struct MalformedCursor {
    text: String,
    reason: &'static str,
}

impl std::str::FromStr for Cursor {
    type Err = MalformedCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let malformed = |reason| MalformedCursor {
            text: text.chars().take(120).collect(),
            reason,
        };
        // From the right: a chain name is a URL prefix and may hold anything
        // but a slash.
        let mut parts = text.rsplitn(4, ':');
        let (Some(tag), Some(index), Some(position), Some(chain)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed("expected four parts separated by ':'"));
        };
        if chain.is_empty() {
            return Err(malformed("no chain"));
        }
        let (position, block) = match position.split_once('@') {
            Some((position, block)) => (
                position,
                Some(
                    block
                        .parse::<u64>()
                        .map_err(|_| malformed("the block number is not an integer"))?,
                ),
            ),
            None => (position, None),
        };
        let position = match (position, block) {
            // History: a block's, with no place in the log.
            ("", Some(_)) => None,
            _ => Some(
                position
                    .parse::<Position>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| malformed("the position is not a positive integer"))?,
            ),
        };
        let index = index
            .parse()
            .map_err(|_| malformed("the event index is not an integer"))?;
        if tag.len() != 16 {
            return Err(malformed("the tag is not 16 hex digits"));
        }
        let tag =
            u64::from_str_radix(tag, 16).map_err(|_| malformed("the tag is not 16 hex digits"))?;
        Ok(Cursor {
            chain: chain.to_string(),
            position,
            block,
            index,
            tag,
        })
    }
}

/// Where a resuming subscription starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeFrom {
    /// Right after the event a notification's cursor names.
    After(Cursor),
    /// At the start of the canonical block of this number.
    Block(u64),
}

/// The next event a replay delivers: event `index` of step `position`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark {
    pub position: Position,
    pub index: u32,
}

impl Mark {
    /// The start of step `position`.
    pub fn step(position: Position) -> Self {
        Self { position, index: 0 }
    }
}

/// Where a replay starts, and which logged steps it passes over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayStart {
    /// The first event due.
    pub mark: Mark,
    /// For `fromBlock`: the chain as it stood when the replay began.
    pub as_of: Option<AsOf>,
}

impl ReplayStart {
    /// Every step from `mark` on.
    pub fn from(mark: Mark) -> Self {
        Self { mark, as_of: None }
    }
}

/// The chain as it was canonical when a `fromBlock` replay began
/// (docs/src/api.md, The options object): of the steps logged by then, the replay
/// tells of those that added a block still canonical at that moment and
/// passes over the rest (blocks a reorg had already replaced, and their
/// removals), so it gives what `eth_getLogs` over the same blocks gave
/// then. Every later step it tells of, removals included, as live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsOf {
    /// The log's last position when the replay began.
    pub until: Position,
    /// The positions of the steps that added the canonical blocks then,
    /// ascending.
    pub added: Vec<Position>,
}

impl AsOf {
    /// Whether the step at `position` is passed over.
    pub fn passes_over(&self, position: Position) -> bool {
        position <= self.until && self.added.binary_search(&position).is_err()
    }
}

/// Why a resume cannot start; never a silent start from now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// A cursor of another chain's log.
    #[error("{0}")]
    OtherChain(String),
    /// Older than the log's window: the message names the window.
    #[error("{0}")]
    TooOld(String),
    /// A step this log does not hold (another log's, or lost at a restart).
    #[error("{0}")]
    Unknown(String),
    /// A block past the chain's tip.
    #[error("{0}")]
    Ahead(String),
    /// A cursor naming a block the chain has not reached again yet (it is
    /// catching up after a restart): try again in a moment.
    #[error("{0}")]
    NotYet(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_writes() {
        let mut cursor = Cursor {
            chain: "polygon-amoy:test".into(),
            position: Some(1_042),
            block: Some(19_000_123),
            index: 3,
            tag: 0x9c0f_2a41_d8e7_b655,
        };
        let text = cursor.to_string();
        assert_eq!(text, "polygon-amoy:test:1042@19000123:3:9c0f2a41d8e7b655");
        assert_eq!(text.parse::<Cursor>(), Ok(cursor.clone()));
        // A block read from the nodes has no place in the log.
        cursor.position = None;
        let text = cursor.to_string();
        assert_eq!(text, "polygon-amoy:test:@19000123:3:9c0f2a41d8e7b655");
        assert_eq!(text.parse::<Cursor>(), Ok(cursor.clone()));
        // A batch of pending transactions is in no block.
        cursor.position = Some(1_042);
        cursor.block = None;
        let text = cursor.to_string();
        assert_eq!(text, "polygon-amoy:test:1042:3:9c0f2a41d8e7b655");
        assert_eq!(text.parse::<Cursor>(), Ok(cursor));
    }

    #[test]
    fn malformed_cursors_say_what_is_wrong() {
        for (text, reason) in [
            ("", "four parts"),
            ("eth:12:0", "four parts"),
            (":12:0:9c0f2a41d8e7b655", "no chain"),
            ("eth:0:0:9c0f2a41d8e7b655", "position"),
            ("eth:x:0:9c0f2a41d8e7b655", "position"),
            ("eth::0:9c0f2a41d8e7b655", "position"),
            ("eth:12@x:0:9c0f2a41d8e7b655", "block number"),
            ("eth:12:-1:9c0f2a41d8e7b655", "event index"),
            ("eth:12:0:9c0f", "16 hex digits"),
            ("eth:12:0:9c0f2a41d8e7b65z", "16 hex digits"),
        ] {
            let error = text.parse::<Cursor>().expect_err(text).to_string();
            assert!(error.contains(reason), "{text}: {error}");
            assert!(error.contains("not a chainsieve cursor"), "{error}");
        }
    }

    #[test]
    fn as_of_passes_over_what_was_not_canonical_then_only() {
        let as_of = AsOf {
            until: 8,
            added: vec![3, 4, 7, 8],
        };
        let passed: Vec<Position> = (3..=10).filter(|p| as_of.passes_over(*p)).collect();
        assert_eq!(passed, vec![5, 6], "later steps are all told of");
    }

    #[test]
    fn marks_order_by_position_then_index() {
        let a = Mark {
            position: 4,
            index: 9,
        };
        assert!(a < Mark::step(5));
        assert!(Mark::step(4) < a);
    }
}
