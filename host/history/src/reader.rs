//! One history stream's reader: blocks by number from the chain's nodes,
//! a batch at a time, each linked to the one before, until the log holds
//! the next block.

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::B256;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::blocks::{Blocks, Reading};
use crate::feed::{GONE, HistoryItem, UNAVAILABLE};
use chainsieve_eventlog::cursor::ResumeFrom;
use chainsieve_eventlog::{EventLog, hash_tag};
use chainsieve_model::{Block, ChainEvent};

/// Blocks read per round trip (bodies in one batch, logs in a second).
pub const CHUNK: u64 = 32;

/// Rounds over the nodes a batch gets before the stream fails.
const ATTEMPTS: u32 = 3;

/// How far inside the log's window the log takes over, at most (half the
/// window, for a short one).
const SEAM_MARGIN: u64 = 128;

/// How often a reader at the seam looks whether the actor has taken every
/// block before it.
const DRAINED_POLL: Duration = Duration::from_millis(5);

/// The wait before a failed batch is tried again, doubled each time.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Reads from block `from` on into `out` until the log holds the next
/// block, `out` is dropped or `stop`. With `first`, the tag the first
/// block's hash must have (a resumed cursor's block, checked again as it
/// is read).
pub(super) async fn read(
    source: Reading,
    from: u64,
    first: Option<u64>,
    out: mpsc::Sender<HistoryItem>,
    stop: CancellationToken,
) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = stream(&source, from, first, &out) => {}
    }
}

async fn stream(source: &Reading, from: u64, first: Option<u64>, out: &mpsc::Sender<HistoryItem>) {
    let log = &*source.log;
    let chain = log.chain();
    let mut next = from;
    let mut parent: Option<B256> = None;
    loop {
        let seam_at = seam_at(log);
        if seam_at.is_some_and(|at| next >= at) {
            // Handed over only once the actor has taken every block before
            // it, so the plan is made when it is used, not a queue earlier
            // (the window moves meanwhile).
            drained(out).await;
            if let Some(item) = seam(log, next, parent) {
                let _ = out.send(item).await;
                return;
            }
        }
        // Up to where the log takes over: no further.
        let top = match seam_at {
            Some(at) if at > next => (next + CHUNK - 1).min(at - 1),
            _ => next + CHUNK - 1,
        };
        let read = match batch(&source.blocks, chain, next, top).await {
            Ok(read) => read,
            Err(reason) => {
                let reason = format!(
                    "reading block {next} of {chain} failed: {reason}; resume from the last cursor"
                );
                let _ = out
                    .send(HistoryItem::Failed {
                        code: UNAVAILABLE,
                        reason,
                    })
                    .await;
                return;
            }
        };
        for block in read {
            let linked = match parent {
                Some(parent) => block.parent_hash() == parent,
                None => first.is_none_or(|tag| hash_tag(&block.hash) == tag),
            };
            if !linked {
                let _ = out.send(reorganised(chain, block.number())).await;
                return;
            }
            parent = Some(block.hash);
            next = block.number() + 1;
            if out.send(HistoryItem::Block(block)).await.is_err() {
                return;
            }
        }
    }
}

/// Blocks `bottom..=top` (at least one) from where the chain holds them,
/// each source tried [`ATTEMPTS`] times.
async fn batch(
    blocks: &Blocks,
    chain: &str,
    bottom: u64,
    top: u64,
) -> Result<Vec<Arc<Block>>, String> {
    let mut wait = RETRY_AFTER;
    let mut attempt = 1;
    loop {
        let reasons = match blocks.read(bottom, top).await {
            Ok(read) => return Ok(read),
            Err(reasons) => reasons,
        };
        if attempt >= ATTEMPTS {
            return Err(reasons);
        }
        tracing::debug!(%chain, bottom, top, %reasons, attempt, "history batch failed; trying again");
        tokio::time::sleep(wait).await;
        wait *= 2;
        attempt += 1;
    }
}

/// Returns once the actor has taken every item queued on `out`.
pub(super) async fn drained(out: &mpsc::Sender<HistoryItem>) {
    while out.capacity() < out.max_capacity() {
        tokio::time::sleep(DRAINED_POLL).await;
    }
}

/// Where the log takes over: this far inside its window, so the window
/// can move on a little before the replay reads the first step.
pub(super) fn seam_at(log: &EventLog) -> Option<u64> {
    let (oldest, tip) = log.canonical_bounds()?;
    let held = tip - oldest + 1;
    Some(oldest + (held / 2).min(SEAM_MARGIN))
}

/// The seam, if the log holds block `next` canonical: the chain as it is
/// canonical now from there, when the block's parent is the last block
/// read.
pub(super) fn seam(log: &EventLog, next: u64, parent: Option<B256>) -> Option<HistoryItem> {
    let plan = log.start_of(&ResumeFrom::Block(next)).ok()?;
    // Not logged yet, or dropped from the window meanwhile: read on from
    // the nodes.
    let step = log.get(plan.mark.position)?;
    let ChainEvent::Added(block) = &step.change else {
        return None;
    };
    Some(
        if parent.is_none_or(|parent| block.parent_hash() == parent) {
            HistoryItem::Seam(plan)
        } else {
            reorganised(log.chain(), next)
        },
    )
}

pub(super) fn reorganised(chain: &str, number: u64) -> HistoryItem {
    HistoryItem::Failed {
        code: GONE,
        reason: format!(
            "{chain} reorganised below block {number} while its history was read: subscribe again from a block"
        ),
    }
}
