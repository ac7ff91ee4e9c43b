//! History on an edge from the chain's stream on the bus (docs/src/api.md,
//! History from the nodes): the steps older than the edge's own log are
//! read from the stream in order and folded into the chain as it stands
//! (an added block replaces the ones at and above its number, a removal
//! drops its block), and each block is handed on once the log's seam is
//! past it, so only settled blocks go out; then the log takes over as for
//! history from the nodes.

use std::ops::ControlFlow;
use std::sync::Arc;

use alloy_primitives::B256;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::reader::{drained, reorganised, seam, seam_at};
use crate::feed::{GONE, HistoryItem, UNAVAILABLE};
use chainsieve_bus::linear::Reader;
use chainsieve_bus::{ChainLog, codec};
use chainsieve_eventlog::{EventLog, Position, hash_tag};
use chainsieve_model::{Block, ChainEvent};

/// Blocks read before the first one asked for, so that a reorg the stream
/// went through there is folded in before it: deeper than any the
/// canonical tracker follows.
const LEAD: u64 = 128;

/// Blocks within the log's window are handed on only once this many
/// blocks above them were read (fewer in a window too short for it), so
/// a reorg whose steps straddle two reads is folded in first; below the
/// window, at once.
const HOLD: u64 = 8;

/// The oldest block the stream holds: the block of its first step that
/// adds or removes one (among its first 1,024).
pub async fn reach(stream: &ChainLog) -> anyhow::Result<Option<u64>> {
    let (first, last) = stream.bounds().await?;
    block_at_or_after(stream, first, last.min(first + 1_024)).await
}

/// Reads the chain's blocks from block `from` on, from `stream`, until
/// `log` holds the rest; `first`, the tag the first block's hash must have
/// (a resumed cursor's block).
pub(super) async fn read(
    stream: ChainLog,
    log: Arc<EventLog>,
    from: u64,
    first: Option<u64>,
    out: mpsc::Sender<HistoryItem>,
    stop: CancellationToken,
) {
    let failed = |reason: String| HistoryItem::Failed {
        code: UNAVAILABLE,
        reason: format!(
            "reading {}'s history from the bus failed: {reason}; resume from the last cursor",
            stream.chain()
        ),
    };
    let next = match start(&stream, from.saturating_sub(LEAD)).await {
        Ok(next) => next,
        Err(error) => {
            let _ = out.send(failed(format!("{error:#}"))).await;
            return;
        }
    };
    let mut fold = Fold {
        log: &log,
        from,
        first,
        out: &out,
        chain: Vec::new(),
        told: None,
        next,
        outcome: None,
    };
    loop {
        match stream.read(fold.next, &mut fold, &stop).await {
            Ok(Some(())) => {}
            // Stopped: the subscription ended.
            Ok(None) => return,
            Err(error) => {
                let _ = out.send(failed(format!("{error:#}"))).await;
                return;
            }
        }
        match fold.outcome.take() {
            Some(Outcome::Seam) => {
                // Handed over only once the actor has taken every block
                // before it (as history from the nodes does).
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = drained(&out) => {}
                }
                let next_block = fold.told.map_or(from, |(number, _)| number + 1);
                if let Some(item) = seam(&log, next_block, fold.told.map(|(_, hash)| hash)) {
                    let _ = out.send(item).await;
                    return;
                }
                // The log does not hold that block canonical yet: read on.
            }
            Some(Outcome::Done) | None => return,
        }
    }
}

/// The position to read from for blocks from `from`: the first step of
/// the stream whose block is at or above it (block numbers grow along the
/// stream, but for reorgs, which [`LEAD`] covers).
async fn start(stream: &ChainLog, from: u64) -> anyhow::Result<Position> {
    let (mut low, mut high) = stream.bounds().await?;
    while low < high {
        let middle = low + (high - low) / 2;
        match block_at_or_after(stream, middle, high).await? {
            Some(number) if number >= from => high = middle,
            _ => low = middle + 1,
        }
    }
    Ok(low)
}

/// The number of the first block a step at or after `position` (up to
/// `last`) adds or removes.
async fn block_at_or_after(
    stream: &ChainLog,
    position: Position,
    last: Position,
) -> anyhow::Result<Option<u64>> {
    for position in position..=last {
        if let Some(ChainEvent::Added(block) | ChainEvent::Removed(block)) =
            stream.step(position).await?
        {
            return Ok(Some(block.number()));
        }
    }
    Ok(None)
}

/// How a run of reading ended.
enum Outcome {
    /// The log's seam is reached.
    Seam,
    /// Failed (said on the feed), or the feed was dropped.
    Done,
}

/// The chain as the stream's steps make it, from where the reading began.
struct Fold<'a> {
    log: &'a EventLog,
    from: u64,
    first: Option<u64>,
    out: &'a mpsc::Sender<HistoryItem>,
    /// The canonical blocks read and not yet handed on, oldest first.
    chain: Vec<Arc<Block>>,
    /// The last block handed on: its number and hash.
    told: Option<(u64, B256)>,
    /// The next position to read.
    next: Position,
    outcome: Option<Outcome>,
}

impl Fold<'_> {
    fn take_step(&mut self, change: ChainEvent) {
        let block = match &change {
            ChainEvent::Added(block) | ChainEvent::Removed(block) => block,
            ChainEvent::Pending(_) | ChainEvent::Watch(_) | ChainEvent::Lifecycle(_) => return,
        };
        while self
            .chain
            .last()
            .is_some_and(|last| last.number() >= block.number())
        {
            self.chain.pop();
        }
        if let ChainEvent::Added(block) = change {
            self.chain.push(block);
        }
    }

    /// Hands on the blocks below the log's seam; whether the seam is
    /// reached, or the stream must end.
    async fn hand_on(&mut self) -> Option<Outcome> {
        let seam_at = seam_at(self.log)?;
        let (oldest, tip) = self.log.canonical_bounds()?;
        let top = self.chain.last().map_or(0, |block| block.number());
        // A short window holds fewer blocks above its seam: once the
        // stream is read to the log's tip, all below the seam are settled.
        let hold = HOLD.min(tip.saturating_sub(seam_at) + 1);
        let settled = self
            .chain
            .iter()
            .take_while(|block| {
                block.number() < seam_at
                    && (block.number() < oldest || block.number() + hold <= top)
            })
            .count();
        for block in self.chain.drain(..settled).collect::<Vec<_>>() {
            if block.number() < self.from {
                continue;
            }
            let linked = match self.told {
                Some((number, hash)) => block.number() == number + 1 && block.parent_hash() == hash,
                None => {
                    block.number() == self.from
                        && self.first.is_none_or(|tag| hash_tag(&block.hash) == tag)
                }
            };
            if !linked {
                let item = match self.told {
                    None if block.number() > self.from => HistoryItem::Failed {
                        code: GONE,
                        reason: format!(
                            "{}'s stream on the bus no longer holds block {}: subscribe again from a later block",
                            self.log.chain(),
                            self.from
                        ),
                    },
                    _ => reorganised(self.log.chain(), block.number()),
                };
                let _ = self.out.send(item).await;
                return Some(Outcome::Done);
            }
            self.told = Some((block.number(), block.hash));
            if self.out.send(HistoryItem::Block(block)).await.is_err() {
                return Some(Outcome::Done);
            }
        }
        let next_block = self.told.map_or(self.from, |(number, _)| number + 1);
        (next_block >= seam_at).then_some(Outcome::Seam)
    }
}

impl Reader for Fold<'_> {
    async fn take(&mut self, run: Vec<(u64, Bytes)>) -> anyhow::Result<ControlFlow<()>> {
        for (position, payload) in run {
            let change = codec::decode(&payload).map_err(|error| {
                anyhow::anyhow!("decoding {}'s step {position}: {error}", self.log.chain())
            })?;
            self.take_step(change);
            self.next = position + 1;
        }
        self.outcome = self.hand_on().await;
        Ok(match self.outcome {
            Some(_) => ControlFlow::Break(()),
            None => ControlFlow::Continue(()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks `numbers` of `branch`, each the child of the one before,
    /// the first a child of `parent`.
    fn branch(numbers: std::ops::RangeInclusive<u64>, branch: u8, parent: B256) -> Vec<Arc<Block>> {
        let mut parent = parent;
        numbers
            .map(|number| {
                let block = Arc::new(Block::fixture(number, branch, parent, &[]));
                parent = block.hash;
                block
            })
            .collect()
    }

    fn items(received: &mut mpsc::Receiver<HistoryItem>) -> Vec<(u64, u8)> {
        let mut blocks = Vec::new();
        while let Ok(item) = received.try_recv() {
            match item {
                HistoryItem::Block(block) => blocks.push((block.number(), block.hash.0[31])),
                other => panic!("only blocks, got {other:?}"),
            }
        }
        blocks
    }

    /// The stream's steps, a reorg among them, fold into the chain as it
    /// stands: the orphaned blocks never go out, the rest in order up to
    /// the log's seam, where the reading stops.
    #[tokio::test]
    async fn steps_fold_into_the_canonical_chain_up_to_the_seam() {
        let one = branch(1..=30, 1, B256::ZERO);
        // Blocks 9 and 10 of branch 1 were replaced by branch 2's.
        let two = branch(9..=10, 2, one[7].hash);
        // The edge's log holds blocks 21..=30 (of branch 1, built on
        // branch 2 below: only their numbers and links from 21 on matter).
        let log = EventLog::new("eth", 10, 64);
        let mut above = branch(11..=30, 1, two[1].hash);
        for block in &above[10..] {
            log.append(ChainEvent::Added(block.clone()));
        }
        let (out, mut received) = mpsc::channel(64);
        let mut fold = Fold {
            log: &log,
            from: 3,
            first: None,
            out: &out,
            chain: Vec::new(),
            told: None,
            next: 1,
            outcome: None,
        };
        let mut steps: Vec<ChainEvent> = one[..10].iter().cloned().map(ChainEvent::Added).collect();
        steps.push(ChainEvent::Removed(one[9].clone()));
        steps.push(ChainEvent::Removed(one[8].clone()));
        steps.extend(two.iter().cloned().map(ChainEvent::Added));
        steps.extend(above.drain(..10).map(ChainEvent::Added));
        for step in steps {
            fold.take_step(step);
        }
        // The seam is 5 blocks into the log's 10 (half of them): block 26.
        assert!(
            fold.hand_on().await.is_none(),
            "blocks 21..=25 not read yet"
        );
        let told = items(&mut received);
        let expected: Vec<(u64, u8)> = (3..=20)
            .map(|n| (n, if (9..=10).contains(&n) { 2 } else { 1 }))
            .collect();
        // Below the log's window, at once.
        assert_eq!(told, expected);
        for block in &log_blocks(&log, 21..=25) {
            fold.take_step(ChainEvent::Added(block.clone()));
        }
        // Within the window: once the stream is read to the log's tip.
        for block in &log_blocks(&log, 26..=30) {
            fold.take_step(ChainEvent::Added(block.clone()));
        }
        assert!(matches!(fold.hand_on().await, Some(Outcome::Seam)));
        assert_eq!(
            items(&mut received),
            (21..=25).map(|n| (n, 1)).collect::<Vec<_>>()
        );
    }

    fn log_blocks(log: &EventLog, numbers: std::ops::RangeInclusive<u64>) -> Vec<Arc<Block>> {
        numbers
            .map(|number| {
                let position = log.canonical_position(number).expect("in the log");
                match &log.get(position).expect("a step").change {
                    ChainEvent::Added(block) => block.clone(),
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }
}
