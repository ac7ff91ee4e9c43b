//! Which source serves a replay (docs/src/api.md, History from the nodes):
//! a `fromBlock` older than the chain's log window, or a cursor whose block
//! has left it and is still canonical, is read from an edge's stream on the
//! bus as far as it reaches, then from the chain's nodes or a devnet
//! chain's archive; anything else is the log's. [`start_at`] is the rule on
//! the window alone (pure, tested below); [`plan`] asks the sources what
//! they hold and starts the stream.

use std::sync::Arc;

use chainsieve_bus::ChainLog;
use chainsieve_eventlog::cursor::{Cursor, Position, ResumeFrom};
use chainsieve_eventlog::{EventLog, hash_tag};

use crate::blocks::{Blocks, Reading};
use crate::feed::{GONE, HistoryFeed, StartAt, UNAVAILABLE};
use crate::limits::Admitted;
use crate::reader::CHUNK;
use crate::stream;

/// EIP-1474's "limit exceeded": no place left among the history streams.
const LIMIT_EXCEEDED: i64 = -32005;

/// What a chain holds for a replay, as [`plan`] reads it.
pub struct Sources<'a> {
    /// The chain's name, in cursors and in the reasons given.
    pub chain: &'a str,
    /// Where the stream hands over.
    pub log: &'a Arc<EventLog>,
    /// An edge's chain on the bus.
    pub stream: Option<&'a ChainLog>,
    /// The nodes, or a devnet chain's archive; `None` on an edge of no node.
    pub blocks: Option<Blocks>,
    /// `[history] max_blocks`: how far back from the tip a stream may start.
    pub max_blocks: u64,
}

/// Why a replay cannot be served; each is one JSON-RPC error ([`Self::code`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{chain} has not received its first block yet: resume in a moment")]
    NoBlockYet { chain: String },
    #[error(
        "block {start} is {} blocks behind {chain}'s tip (block {tip}); this server reads at most {max} blocks back from the nodes ([history] max_blocks)",
        tip - start
    )]
    TooFarBack {
        chain: String,
        start: u64,
        tip: u64,
        max: u64,
    },
    #[error("{chain}'s stream on the bus could not be read: {reason}")]
    StreamUnreadable { chain: String, reason: String },
    #[error(
        "{chain}'s stream on the bus reaches back to {} (bus.max_age_secs), not block {start}, and this edge has no node to read older blocks from",
        reach.map_or_else(|| "no block".to_string(), |block| format!("block {block}"))
    )]
    BeyondTheStream {
        chain: String,
        reach: Option<u64>,
        start: u64,
    },
    #[error(
        "{chain}'s devnet holds its history from block {held} on, not block {start} (it keeps [devnet] archive_memory_mib in memory; with data_dir, every block up to [history] max_blocks back)"
    )]
    BeyondTheArchive {
        chain: String,
        held: u64,
        start: u64,
    },
    #[error("{0}")]
    NodesFailed(String),
    #[error(
        "the nodes could not say whether block {block} of the cursor {cursor} is still canonical: {reason}"
    )]
    Unconfirmed {
        cursor: String,
        block: u64,
        reason: String,
    },
    #[error(
        "the cursor {cursor} names a block that is no longer canonical: block {block} was reorganised out; subscribe again from a block"
    )]
    Reorganised { cursor: String, block: u64 },
    #[error(
        "the nodes do not hold block {block} of the cursor {cursor}, so cannot say whether it is still canonical"
    )]
    NotHeld { cursor: String, block: u64 },
    /// The key's or the server's places among the streams are taken.
    #[error("{0}")]
    NoPlace(String),
}

impl Refused {
    /// The EIP-1474 code the subscriber gets.
    pub fn code(&self) -> i64 {
        match self {
            Refused::NoBlockYet { .. }
            | Refused::StreamUnreadable { .. }
            | Refused::NodesFailed(_)
            | Refused::Unconfirmed { .. }
            | Refused::NotHeld { .. } => UNAVAILABLE,
            Refused::TooFarBack { .. }
            | Refused::BeyondTheStream { .. }
            | Refused::BeyondTheArchive { .. }
            | Refused::Reorganised { .. } => GONE,
            Refused::NoPlace(_) => LIMIT_EXCEEDED,
        }
    }
}

/// Where a replay of `asked` on the chain `chain` starts reading history,
/// given the log's canonical blocks (`oldest`, `tip`) and its oldest
/// position: `None` when the log serves it. A block this close to the
/// window's edge (within one read of it) may leave the window before the
/// actor reads the log, so it is read as history, which hands over to the
/// log at once if it is still there.
pub fn start_at(
    asked: &ResumeFrom,
    chain: &str,
    (oldest, tip): (u64, u64),
    oldest_position: Position,
    max_blocks: u64,
) -> Result<Option<StartAt>, Refused> {
    let edge = oldest.saturating_add(CHUNK);
    let from = match asked {
        ResumeFrom::Block(number) if *number < edge && *number <= tip => StartAt::Block(*number),
        ResumeFrom::After(cursor)
            if cursor.chain == chain
                && cursor
                    .position
                    .is_none_or(|position| position < oldest_position) =>
        {
            match cursor.block {
                Some(block) if block < oldest => StartAt::After {
                    block,
                    index: cursor.index,
                    tag: cursor.tag,
                },
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    let start = from.block();
    if tip.saturating_sub(start) > max_blocks {
        return Err(Refused::TooFarBack {
            chain: chain.to_string(),
            start,
            tip,
            max: max_blocks,
        });
    }
    Ok(Some(from))
}

/// The history stream a replay of `asked` reads, admitted by `admit`
/// (its place among `[history] max_streams`), or `None` when the log
/// serves it or the chain holds nothing beyond the log (the log's refusal
/// then stands). A cursor resumes only if its block is still canonical.
pub async fn plan(
    sources: Sources<'_>,
    asked: &ResumeFrom,
    admit: impl FnOnce() -> Result<Admitted, String>,
) -> Result<Option<HistoryFeed>, Refused> {
    let Sources {
        chain,
        log,
        stream,
        blocks,
        max_blocks,
    } = sources;
    if blocks.is_none() && stream.is_none() {
        return Ok(None);
    }
    let bounds = log.canonical_bounds().ok_or_else(|| Refused::NoBlockYet {
        chain: chain.to_string(),
    })?;
    let Some(from) = start_at(asked, chain, bounds, log.oldest(), max_blocks)? else {
        return Ok(None);
    };
    let start = from.block();
    let admit = || admit().map_err(Refused::NoPlace);
    // An edge reads its chain's stream on the bus as far as it reaches,
    // then the nodes.
    if let Some(stream) = stream {
        let reach = stream::reach(stream)
            .await
            .map_err(|error| Refused::StreamUnreadable {
                chain: chain.to_string(),
                reason: format!("{error:#}"),
            })?;
        match (reach, &blocks) {
            (Some(reach), _) if start >= reach => {
                return Ok(Some(crate::start_on_bus(
                    stream.clone(),
                    log.clone(),
                    from,
                    admit()?,
                )));
            }
            (reach, None) => {
                return Err(Refused::BeyondTheStream {
                    chain: chain.to_string(),
                    reach,
                    start,
                });
            }
            (_, Some(_)) => {}
        }
    }
    let Some(blocks) = blocks else {
        return Ok(None);
    };
    if let Some(held) = blocks.oldest().await.map_err(Refused::NodesFailed)?
        && start < held
    {
        return Err(Refused::BeyondTheArchive {
            chain: chain.to_string(),
            held,
            start,
        });
    }
    if let (ResumeFrom::After(cursor), StartAt::After { block, .. }) = (asked, from) {
        still_canonical(&blocks, cursor, block).await?;
    }
    let source = Reading {
        blocks,
        log: log.clone(),
    };
    Ok(Some(crate::start(source, from, admit()?)))
}

/// Whether the block `cursor` names (number `block`) is still the one
/// canonical there.
async fn still_canonical(blocks: &Blocks, cursor: &Cursor, block: u64) -> Result<(), Refused> {
    let hash = blocks
        .hash_of(block)
        .await
        .map_err(|reason| Refused::Unconfirmed {
            cursor: cursor.to_string(),
            block,
            reason,
        })?;
    match hash {
        Some(hash) if hash_tag(&hash) == cursor.tag => Ok(()),
        Some(_) => Err(Refused::Reorganised {
            cursor: cursor.to_string(),
            block,
        }),
        None => Err(Refused::NotHeld {
            cursor: cursor.to_string(),
            block,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(chain: &str, position: Option<u64>, block: Option<u64>) -> ResumeFrom {
        ResumeFrom::After(Cursor {
            chain: chain.into(),
            position,
            block,
            index: 3,
            tag: 0xab,
        })
    }

    /// The window holds blocks 1,000..=1,100 from position 500 on.
    fn at(asked: &ResumeFrom) -> Result<Option<StartAt>, Refused> {
        start_at(asked, "eth", (1_000, 1_100), 500, 10_000)
    }

    #[test]
    fn a_block_before_the_window_or_near_its_edge_is_history() {
        assert_eq!(at(&ResumeFrom::Block(10)), Ok(Some(StartAt::Block(10))));
        let near = 1_000 + CHUNK - 1;
        assert_eq!(at(&ResumeFrom::Block(near)), Ok(Some(StartAt::Block(near))));
    }

    #[test]
    fn a_block_well_inside_the_window_or_past_the_tip_is_the_logs() {
        assert_eq!(at(&ResumeFrom::Block(1_000 + CHUNK)), Ok(None));
        // A window narrower than one read: a block past the tip is the
        // log's to refuse or wait for.
        let narrow = start_at(
            &ResumeFrom::Block(1_005),
            "eth",
            (1_000, 1_004),
            500,
            10_000,
        );
        assert_eq!(narrow, Ok(None));
    }

    #[test]
    fn a_cursor_that_left_the_window_resumes_after_its_event() {
        assert_eq!(
            at(&cursor("eth", Some(499), Some(990))),
            Ok(Some(StartAt::After {
                block: 990,
                index: 3,
                tag: 0xab
            }))
        );
        // One of history (no position) too.
        assert!(matches!(
            at(&cursor("eth", None, Some(990))),
            Ok(Some(StartAt::After { block: 990, .. }))
        ));
    }

    #[test]
    fn a_cursor_the_log_still_holds_or_of_another_chain_is_the_logs() {
        assert_eq!(at(&cursor("eth", Some(500), Some(1_000))), Ok(None));
        assert_eq!(at(&cursor("bsc", Some(1), Some(990))), Ok(None));
        // No block number (a pending batch's, or an old cursor's): the
        // log's refusal stands.
        assert_eq!(at(&cursor("eth", Some(1), None)), Ok(None));
        // Its block still in the window though its position is not.
        assert_eq!(at(&cursor("eth", Some(1), Some(1_000))), Ok(None));
    }

    #[test]
    fn past_max_blocks_is_refused_with_the_setting() {
        let refused = start_at(&ResumeFrom::Block(10), "eth", (1_000, 1_100), 500, 1_000)
            .expect_err("too far back");
        assert_eq!(
            refused,
            Refused::TooFarBack {
                chain: "eth".into(),
                start: 10,
                tip: 1_100,
                max: 1_000
            }
        );
        assert_eq!(refused.code(), GONE);
        let message = refused.to_string();
        assert!(
            message.contains("1090 blocks behind") && message.contains("[history] max_blocks"),
            "{message}"
        );
        // Exactly max_blocks back is served.
        assert!(
            start_at(&ResumeFrom::Block(100), "eth", (1_000, 1_100), 500, 1_000,)
                .expect("at the bound")
                .is_some()
        );
    }

    #[test]
    fn each_refusal_has_its_code() {
        let cursor = "eth:1:2:ab".to_string();
        assert_eq!(
            Refused::NoBlockYet {
                chain: "eth".into()
            }
            .code(),
            UNAVAILABLE
        );
        assert_eq!(Refused::NoPlace("full".into()).code(), LIMIT_EXCEEDED);
        assert_eq!(
            Refused::Reorganised {
                cursor: cursor.clone(),
                block: 1
            }
            .code(),
            GONE
        );
        assert_eq!(Refused::NotHeld { cursor, block: 1 }.code(), UNAVAILABLE);
        let beyond = Refused::BeyondTheStream {
            chain: "eth".into(),
            reach: None,
            start: 5,
        };
        assert_eq!(beyond.code(), GONE);
        assert!(
            beyond.to_string().contains("reaches back to no block"),
            "{beyond}"
        );
    }
}
