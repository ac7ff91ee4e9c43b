//! A chain's event log: every change the canonical tracker emits — a block
//! added, a block removed by a reorg, a batch of pending transactions — as
//! a step at a position, in order, over a bounded window
//! (docs/src/architecture.md, The event log).
//!
//! The pipeline appends; the filter actors get each live step's batches
//! from the pipeline and read older steps here when a subscription resumes.
//! A position means the same thing to every reader of the same log: it is
//! the step's place in the log, counted from 1, not anything of one
//! process's memory.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_model`].

pub mod cursor;
pub mod store;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use alloy_primitives::B256;

use tokio::sync::watch;

use chainsieve_model::{Block, ChainEvent, Grade};
pub use cursor::Position;
use cursor::{AsOf, Cursor, Mark, ReplayStart, ResumeError, ResumeFrom};

/// One change of the chain at its position.
#[derive(Debug)]
pub struct Step {
    pub position: Position,
    pub change: ChainEvent,
    /// Tells this step from a different one at the same position.
    pub tag: u64,
    /// What it holds, roughly, for the window's byte bound.
    bytes: usize,
}

impl Step {
    fn new(position: Position, change: ChainEvent) -> Self {
        Self {
            position,
            tag: tag(&change),
            bytes: approximate_bytes(&change),
            change,
        }
    }
}

/// The first eight bytes of the step's block hash (inverted for a
/// removal) or of its first pending transaction's hash; a watchlist
/// edit's number; for lifecycle turns, their first transaction's hash
/// with the number of turns added (a step of turns tells of the
/// transactions of the step before it).
pub fn tag(change: &ChainEvent) -> u64 {
    match change {
        ChainEvent::Added(block) => hash_tag(&block.hash),
        ChainEvent::Removed(block) => !hash_tag(&block.hash),
        ChainEvent::Pending(txs) => txs.first().map_or(0, |tx| hash_tag(&tx.hash)),
        ChainEvent::Watch(edit) => *edit,
        ChainEvent::Lifecycle(turns) => turns.first().map_or(0, |turn| {
            hash_tag(&turn.tx.hash).wrapping_add(turns.len() as u64)
        }),
    }
}

/// The tag of the step adding the block `hash`: its first eight bytes.
pub fn hash_tag(hash: &B256) -> u64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(&hash.0[..8]);
    u64::from_be_bytes(bytes)
}

/// Heap bytes a step keeps alive, roughly.
fn approximate_bytes(change: &ChainEvent) -> usize {
    match change {
        ChainEvent::Added(block) | ChainEvent::Removed(block) => block.approximate_bytes(),
        ChainEvent::Pending(txs) => 64 + txs.iter().map(|tx| tx.approximate_bytes()).sum::<usize>(),
        ChainEvent::Watch(_) => 64,
        ChainEvent::Lifecycle(turns) => {
            64 + turns
                .iter()
                .map(|turn| turn.approximate_bytes())
                .sum::<usize>()
        }
    }
}

/// One chain's log.
#[derive(Debug)]
pub struct EventLog {
    chain: Arc<str>,
    /// Blocks added that the window keeps (`[log] window`).
    max_blocks: usize,
    /// What the window's steps may hold (`[log] memory_mib`).
    max_bytes: usize,
    /// Written by the pipeline (append), read by resuming subscriptions;
    /// held only to push, pop or clone an `Arc`, never across a filter
    /// call or an await.
    steps: RwLock<Steps>,
    /// How far the chain is final: raised by the pipeline, watched by the
    /// actors whose subscriptions wait for a grade (docs/src/api.md,
    /// Finality).
    finality: watch::Sender<Finality>,
}

/// The highest block number each grade has reached, as far as known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Finality {
    pub safe: Option<u64>,
    pub finalized: Option<u64>,
}

impl Finality {
    pub fn height(&self, grade: Grade) -> Option<u64> {
        match grade {
            Grade::Safe => self.safe,
            Grade::Finalized => self.finalized,
        }
    }
}

#[derive(Debug, Default)]
struct Steps {
    held: VecDeque<Arc<Step>>,
    /// The position the next step gets.
    next: Position,
    /// `Added` steps held.
    blocks: usize,
    bytes: usize,
    /// Canonical block number → the position of the step that added it.
    added: BTreeMap<u64, Position>,
}

impl Steps {
    /// The oldest position held (the next one while empty).
    fn oldest(&self) -> Position {
        self.held.front().map_or(self.next, |step| step.position)
    }

    /// The step at `position`, if held.
    fn at(&self, position: Position) -> Option<&Arc<Step>> {
        let offset = usize::try_from(position.checked_sub(self.oldest())?).ok()?;
        self.held.get(offset)
    }

    /// The tag a step-end cursor at `position` carries, and the block it
    /// names: those of the newest step at or before it that added a block
    /// (a pending or removal step is in no block of its own), so history
    /// can place the cursor once the window has moved past it and check
    /// its block is still canonical; the step's own tag, and no block,
    /// when no such step is held.
    fn step_end_names(&self, position: Position) -> Option<(u64, Option<u64>)> {
        let step = self.at(position)?;
        let added = (self.oldest()..=position)
            .rev()
            .filter_map(|p| self.at(p))
            .find_map(|step| match &step.change {
                ChainEvent::Added(block) => Some((step.tag, Some(block.number()))),
                _ => None,
            });
        Some(added.unwrap_or((step.tag, None)))
    }
}

/// The chain as the log holds it canonical now, from block `number` on.
fn as_of(steps: &Steps, number: u64) -> AsOf {
    AsOf {
        until: steps.next - 1,
        added: steps.added.range(number..).map(|(_, p)| *p).collect(),
    }
}

impl EventLog {
    /// An empty log for `chain`, holding the steps of `blocks` blocks
    /// within `memory_mib` (`log.window` resolved at the chain's cadence,
    /// and `log.memory_mib`).
    pub fn new(chain: &str, blocks: usize, memory_mib: u64) -> Self {
        Self {
            chain: chain.into(),
            max_blocks: blocks.max(1),
            max_bytes: usize::try_from(memory_mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
            steps: RwLock::new(Steps {
                next: 1,
                ..Steps::default()
            }),
            finality: watch::Sender::new(Finality::default()),
        }
    }

    /// The chain this log is of (the URL prefix), as cursors name it.
    pub fn chain(&self) -> &Arc<str> {
        &self.chain
    }

    /// The log of `chain` holding `stored` (a persisted window, oldest
    /// first) within the bounds set now (as [`EventLog::new`]). A gap in
    /// the positions (only a damaged file has one) keeps what follows it.
    pub fn restored(
        chain: &str,
        blocks: usize,
        memory_mib: u64,
        stored: impl IntoIterator<Item = (Position, ChainEvent)>,
    ) -> Self {
        let log = Self::new(chain, blocks, memory_mib);
        for (position, change) in stored {
            log.append_at(position, change);
        }
        log
    }

    /// Continues a log that another process kept up to `head` and whose
    /// steps have all aged out: the next step appended gets `head + 1`, as
    /// the bus's stream numbers it. Steps held that do not end at `head`
    /// (an earlier term's) are let go.
    pub fn continue_after(&self, head: Position) {
        let mut steps = self.write();
        if steps.next != head + 1 {
            *steps = Steps {
                next: head + 1,
                ..Steps::default()
            };
        }
    }

    /// Appends `change` at the `position` another log gave it: an edge's
    /// log follows the ingest's, step by step, through the bus. A position
    /// other than the next one (steps the bus no longer held, or a stream
    /// started anew) starts the window afresh there.
    pub fn append_at(&self, position: Position, change: ChainEvent) -> Arc<Step> {
        let mut steps = self.write();
        if position != steps.next {
            *steps = Steps {
                next: position,
                ..Steps::default()
            };
        }
        self.push(&mut steps, Step::new(position, change))
    }

    /// Appends `change` at the next position, dropping the oldest steps
    /// past the window.
    pub fn append(&self, change: ChainEvent) -> Arc<Step> {
        let mut steps = self.write();
        let position = steps.next;
        self.push(&mut steps, Step::new(position, change))
    }

    fn push(&self, steps: &mut Steps, step: Step) -> Arc<Step> {
        let step = Arc::new(step);
        steps.next = step.position + 1;
        match &step.change {
            ChainEvent::Added(block) => {
                // What sat at or above it is no longer canonical.
                steps.added.split_off(&block.number());
                steps.added.insert(block.number(), step.position);
                steps.blocks += 1;
            }
            ChainEvent::Removed(block) => {
                steps.added.remove(&block.number());
            }
            ChainEvent::Pending(_) | ChainEvent::Watch(_) | ChainEvent::Lifecycle(_) => {}
        }
        steps.bytes += step.bytes;
        steps.held.push_back(step.clone());
        while steps.held.len() > 1
            && (steps.blocks > self.max_blocks || steps.bytes > self.max_bytes)
        {
            let Some(oldest) = steps.held.pop_front() else {
                break;
            };
            steps.bytes -= oldest.bytes;
            if let ChainEvent::Added(block) = &oldest.change {
                steps.blocks -= 1;
                if steps.added.get(&block.number()) == Some(&oldest.position) {
                    steps.added.remove(&block.number());
                }
            }
        }
        step
    }

    /// The last position appended (0 before any step).
    pub fn head(&self) -> Position {
        self.read().next - 1
    }

    /// The oldest position the window holds (the next one while empty).
    pub fn oldest(&self) -> Position {
        self.read().oldest()
    }

    /// The last `count` canonical blocks the window holds, oldest first:
    /// what a restarted chain's tracker starts from.
    pub fn canonical(&self, count: usize) -> Vec<Arc<Block>> {
        let steps = self.read();
        let mut blocks: Vec<Arc<Block>> = steps
            .added
            .values()
            .rev()
            .take(count)
            .filter_map(|position| match &steps.at(*position)?.change {
                ChainEvent::Added(block) => Some(block.clone()),
                _ => None,
            })
            .collect();
        blocks.reverse();
        blocks
    }

    /// The canonical blocks numbered `from..=to` that the window holds,
    /// oldest first.
    pub fn canonical_range(&self, from: u64, to: u64) -> Vec<Arc<Block>> {
        let steps = self.read();
        steps
            .added
            .range(from..=to)
            .filter_map(|(_, position)| match &steps.at(*position)?.change {
                ChainEvent::Added(block) => Some(block.clone()),
                _ => None,
            })
            .collect()
    }

    /// The oldest and newest canonical block numbers the window holds.
    pub fn canonical_bounds(&self) -> Option<(u64, u64)> {
        let steps = self.read();
        Some((
            *steps.added.keys().next()?,
            *steps.added.keys().next_back()?,
        ))
    }

    /// The position of the step that added the canonical block `number`,
    /// if the window holds it.
    pub fn canonical_position(&self, number: u64) -> Option<Position> {
        self.read().added.get(&number).copied()
    }

    /// The step at `position`, if the window still holds it.
    pub fn get(&self, position: Position) -> Option<Arc<Step>> {
        self.read().at(position).cloned()
    }

    /// The cursor of the end of the log as it is now (`chainsieve_headCursor`,
    /// docs/src/api.md): after every event of its newest step. A
    /// subscription resuming from it starts with the next step, as one made
    /// now does; a client that subscribes with it holds a cursor to resume
    /// from before its first notification. `None` while the log is empty.
    pub fn head_cursor(&self) -> Option<Cursor> {
        let steps = self.read();
        let position = steps.next - 1;
        let (tag, block) = steps.step_end_names(position)?;
        Some(Cursor {
            chain: self.chain.to_string(),
            position: Some(position),
            block,
            index: Cursor::STEP_END,
            tag,
        })
    }

    /// Where a subscription resuming `from` starts, or why it cannot.
    pub fn start_of(&self, from: &ResumeFrom) -> Result<ReplayStart, ResumeError> {
        let steps = self.read();
        match from {
            ResumeFrom::After(cursor) => self.after(&steps, cursor),
            ResumeFrom::Block(number) => self.block_start(&steps, *number),
        }
    }

    fn after(&self, steps: &Steps, cursor: &Cursor) -> Result<ReplayStart, ResumeError> {
        if *cursor.chain != *self.chain {
            return Err(ResumeError::OtherChain(format!(
                "the cursor {cursor} is of chain {}, but this connection serves {}",
                cursor.chain, self.chain
            )));
        }
        let Some(position) = cursor.position else {
            return self.after_history(steps, cursor);
        };
        if position < steps.oldest() {
            return Err(ResumeError::TooOld(format!(
                "the cursor {cursor} is older than {}",
                self.describe(steps)
            )));
        }
        let held = if cursor.is_step_end() {
            steps.step_end_names(position)
        } else {
            steps.at(position).map(|step| (step.tag, cursor.block))
        };
        if held == Some((cursor.tag, cursor.block)) {
            return Ok(ReplayStart::from(Mark {
                position,
                index: cursor.index.saturating_add(1),
            }));
        }
        match cursor.block {
            // Its block tells where it is, whatever became of its position
            // (a crash lost the step before it was on disk, and the restart
            // gave the position to another).
            Some(block) => self.after_block(steps, cursor, block),
            None if position > steps.next - 1 => Err(ResumeError::Unknown(format!(
                "the cursor {cursor} is past the end of {}'s log (its last step is {}): it comes from another log, or from one a restart did not keep",
                self.chain,
                steps.next - 1
            ))),
            None => Err(ResumeError::Unknown(format!(
                "the cursor {cursor} names a step {}'s log does not hold at that position: it comes from another log, or from one a restart did not keep",
                self.chain
            ))),
        }
    }

    /// After an event of the canonical block `block` (or, for a head
    /// cursor, after the block's step), found by the block: the replay of
    /// the log from there, removals included.
    fn after_block(
        &self,
        steps: &Steps,
        cursor: &Cursor,
        block: u64,
    ) -> Result<ReplayStart, ResumeError> {
        let tip = steps.added.last_key_value().map(|(number, _)| *number);
        let Some(position) = steps.added.get(&block) else {
            return Err(if tip.is_none_or(|tip| block > tip) {
                ResumeError::NotYet(format!(
                    "the cursor {cursor} names block {block}, which {}'s log has not reached again yet{}: try again in a moment",
                    self.chain,
                    tip.map(|tip| format!(" (its tip is block {tip})"))
                        .unwrap_or_default()
                ))
            } else {
                ResumeError::TooOld(format!(
                    "the cursor {cursor} names block {block}, which {} does not hold",
                    self.describe(steps)
                ))
            });
        };
        if steps
            .at(*position)
            .is_none_or(|step| step.tag != cursor.tag)
        {
            return Err(ResumeError::Unknown(format!(
                "the cursor {cursor} names a block that is no longer canonical on {}: subscribe again from a block",
                self.chain
            )));
        }
        Ok(ReplayStart::from(Mark {
            position: *position,
            index: cursor.index.saturating_add(1),
        }))
    }

    /// After an event of a block read from the nodes: the chain as it is
    /// canonical now from the next event on, if the window holds that
    /// very block.
    fn after_history(&self, steps: &Steps, cursor: &Cursor) -> Result<ReplayStart, ResumeError> {
        let block = cursor.block.unwrap_or_default();
        let start = self.after_block(steps, cursor, block)?;
        Ok(ReplayStart {
            as_of: Some(as_of(steps, block)),
            ..start
        })
    }

    /// The replay of the chain from block `number` as it is canonical now
    /// (see [`AsOf`]).
    fn block_start(&self, steps: &Steps, number: u64) -> Result<ReplayStart, ResumeError> {
        if let Some(position) = steps.added.get(&number) {
            return Ok(ReplayStart {
                mark: Mark::step(*position),
                as_of: Some(as_of(steps, number)),
            });
        }
        let tip = steps.added.last_key_value().map(|(n, _)| *n);
        match tip {
            // Nothing to replay yet: live from the next block on.
            Some(tip) if number == tip + 1 => Ok(ReplayStart::from(Mark::step(steps.next))),
            Some(tip) if number > tip => Err(ResumeError::Ahead(format!(
                "fromBlock {number} is past {}'s tip, block {tip}",
                self.chain
            ))),
            _ => Err(ResumeError::TooOld(format!(
                "fromBlock {number} is older than {}",
                self.describe(steps)
            ))),
        }
    }

    /// Raises `grade` to block `number` (a finalized block is safe too);
    /// never lowers it. True if it moved.
    pub fn raise_finality(&self, grade: Grade, number: u64) -> bool {
        self.finality.send_if_modified(|finality| {
            let before = *finality;
            let raise = |height: &mut Option<u64>| {
                *height = Some(height.map_or(number, |h| h.max(number)));
            };
            raise(&mut finality.safe);
            if grade == Grade::Finalized {
                raise(&mut finality.finalized);
            }
            *finality != before
        })
    }

    /// How far the chain is final now.
    pub fn finality(&self) -> Finality {
        *self.finality.borrow()
    }

    /// Wakes on every rise of [`EventLog::finality`].
    pub fn finality_changes(&self) -> watch::Receiver<Finality> {
        self.finality.subscribe()
    }

    /// Whether the step at `position` added the block the window holds as
    /// canonical at `number` (false for a block a reorg replaced).
    pub fn is_canonical(&self, number: u64, position: Position) -> bool {
        self.read().added.get(&number) == Some(&position)
    }

    /// Where a subscription waiting for `grade` starts: at the first
    /// canonical block past the grade's height, or, before any is known,
    /// at the next step.
    pub fn first_not_final(&self, grade: Grade) -> Mark {
        let steps = self.read();
        let position = self
            .finality()
            .height(grade)
            .and_then(|height| steps.added.range(height + 1..).next())
            .map_or(steps.next, |(_, position)| *position);
        Mark::step(position)
    }

    /// How far back the window reaches now, for refusals: "eth's log,
    /// which reaches back to block …".
    pub fn window(&self) -> String {
        self.describe(&self.read())
    }

    fn describe(&self, steps: &Steps) -> String {
        let bounds = format!(
            "it keeps the last {} blocks and at most {} MiB ([log] window, [log] memory_mib)",
            self.max_blocks,
            self.max_bytes >> 20
        );
        match (steps.held.front(), steps.added.first_key_value()) {
            (Some(first), Some((oldest, _))) => format!(
                "{}'s log, which reaches back to block {oldest} (position {}); {bounds}",
                self.chain, first.position
            ),
            (Some(first), None) => format!(
                "{}'s log, which reaches back to position {}; {bounds}",
                self.chain, first.position
            ),
            (None, _) => format!("{}'s log, which is empty; {bounds}", self.chain),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Steps> {
        // Every write leaves the steps whole between statements that can
        // panic; keep serving after one.
        self.steps
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Steps> {
        self.steps
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chainsieve_config::LogConfig;
    use chainsieve_ingest::canonical::CanonicalChain;
    use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
    use chainsieve_model::{Block, SourceEvent};

    /// A log of `blocks` blocks within the default memory.
    fn log_of(blocks: usize) -> EventLog {
        EventLog::new("eth", blocks, LogConfig::default().memory_mib)
    }

    /// The devnet's next `count` blocks.
    fn blocks(devnet: &mut Devnet, count: usize) -> Vec<Arc<Block>> {
        std::iter::once(devnet.genesis())
            .chain(
                std::iter::repeat_with(|| devnet.next_step())
                    .flatten()
                    .filter_map(|event| match event {
                        SourceEvent::Block(block) => Some(block),
                        _ => None,
                    }),
            )
            .take(count)
            .collect()
    }

    /// A log of `count` devnet blocks, each through the canonical tracker.
    fn filled(count: usize, log_blocks: usize) -> (EventLog, Vec<Arc<Block>>) {
        let log = log_of(log_blocks);
        let mut tracker = CanonicalChain::new(128);
        let mut devnet = Devnet::new(1, &DevnetSettings::default());
        let blocks = blocks(&mut devnet, count);
        for block in &blocks {
            for change in tracker.apply(block.clone()).expect("linked") {
                log.append(change);
            }
        }
        (log, blocks)
    }

    #[test]
    fn finality_only_rises_and_a_finalized_block_is_safe() {
        let (log, _) = filled(8, 64);
        let changes = log.finality_changes();
        assert_eq!(log.finality(), Finality::default());
        assert!(log.raise_finality(Grade::Safe, 5));
        assert!(log.raise_finality(Grade::Finalized, 3));
        assert!(!log.raise_finality(Grade::Safe, 4), "never lowered");
        assert_eq!(
            log.finality(),
            Finality {
                safe: Some(5),
                finalized: Some(3)
            }
        );
        assert!(log.raise_finality(Grade::Finalized, 6));
        assert_eq!(log.finality().height(Grade::Safe), Some(6));
        assert!(changes.has_changed().expect("the log lives"));
    }

    #[test]
    fn a_final_reader_starts_past_the_grade_and_tells_canonical_steps_apart() {
        let (log, blocks) = filled(8, 64);
        // Nothing known: from the next step.
        assert_eq!(log.first_not_final(Grade::Safe), Mark::step(log.head() + 1));
        log.raise_finality(Grade::Safe, 4);
        let start = log.first_not_final(Grade::Safe);
        let step = log.get(start.position).expect("held");
        let ChainEvent::Added(block) = &step.change else {
            panic!("a block's step");
        };
        assert_eq!(block.hash, blocks[5].hash);
        assert!(log.is_canonical(5, step.position));
        // A block of another branch at 8, then its removal.
        let orphan = Arc::new(Block::fixture(8, 9, blocks[7].hash, &[]));
        let added = log.append(ChainEvent::Added(orphan.clone()));
        assert!(log.is_canonical(8, added.position));
        log.append(ChainEvent::Removed(orphan));
        assert!(!log.is_canonical(8, added.position), "removed");
    }

    fn cursor(log: &EventLog, position: Position, index: u32) -> Cursor {
        let step = log.get(position).expect("held");
        Cursor {
            chain: "eth".into(),
            position: Some(position),
            block: step.change.block().map(|block| block.number()),
            index,
            tag: step.tag,
        }
    }

    #[test]
    fn the_head_cursor_resumes_with_the_next_step() {
        assert_eq!(log_of(4).head_cursor(), None, "an empty log");
        let (log, _) = filled(10, 4);
        let head = log.head_cursor().expect("a head");
        assert_eq!(head.to_string().parse::<Cursor>(), Ok(head.clone()));
        assert_eq!((head.position, head.block), (Some(10), Some(9)));
        assert!(head.is_step_end());
        let start = log.start_of(&ResumeFrom::After(head)).expect("resumes");
        assert_eq!(
            start.mark,
            Mark {
                position: 10,
                index: Cursor::STEP_END
            },
            "nothing of step 10 is due again"
        );
    }

    /// A crash lost the last steps before they were on disk and the
    /// restarted log gave their positions to others: a cursor of a block's
    /// event resumes by its block, one past the tip waits (-32002), a
    /// pending one is refused.
    #[test]
    fn a_cursor_whose_position_a_restart_reused_resumes_by_its_block() {
        let (before, blocks) = filled(10, 16);
        let event = cursor(&before, 9, 2);
        assert_eq!(event.block, Some(8));
        before.append(ChainEvent::Pending(Vec::new()));
        let pending = cursor(&before, 11, 0);
        // The restart: the same blocks, each one step further on.
        let after = log_of(16);
        after.append(ChainEvent::Pending(Vec::new()));
        for block in &blocks[..9] {
            after.append(ChainEvent::Added(block.clone()));
        }
        let start = after
            .start_of(&ResumeFrom::After(event.clone()))
            .expect("resumes by its block");
        assert_eq!(
            start.mark,
            Mark {
                position: 10,
                index: 3
            }
        );
        let ahead = Cursor {
            block: Some(9),
            tag: hash_tag(&blocks[9].hash),
            ..event.clone()
        };
        assert!(matches!(
            after.start_of(&ResumeFrom::After(ahead)),
            Err(ResumeError::NotYet(m)) if m.contains("block 9") && m.contains("tip is block 8")
        ));
        let elsewhere = Cursor { tag: 1, ..event };
        assert!(matches!(
            after.start_of(&ResumeFrom::After(elsewhere)),
            Err(ResumeError::Unknown(m)) if m.contains("no longer canonical")
        ));
        assert!(matches!(
            after.start_of(&ResumeFrom::After(pending)),
            Err(ResumeError::Unknown(_))
        ));
    }

    #[test]
    fn a_head_cursor_at_a_pending_step_names_the_block_before_it() {
        let (log, blocks) = filled(10, 4);
        log.append(ChainEvent::Pending(Vec::new()));
        let head = log.head_cursor().expect("a head");
        // Its block and tag are block 9's, so history places it once the
        // window has moved past (history::plan::start_at).
        assert_eq!((head.position, head.block), (Some(11), Some(9)));
        assert_eq!(head.tag, hash_tag(&blocks[9].hash));
        let start = log
            .start_of(&ResumeFrom::After(head.clone()))
            .expect("resumes");
        assert_eq!(
            start.mark,
            Mark {
                position: 11,
                index: Cursor::STEP_END
            },
            "with the next step"
        );
        let elsewhere = Cursor {
            block: Some(8),
            ..head
        };
        assert!(matches!(
            log.start_of(&ResumeFrom::After(elsewhere)),
            Err(ResumeError::Unknown(_))
        ));
    }

    #[test]
    fn positions_count_from_one_and_the_window_drops_the_oldest_blocks() {
        let (log, blocks) = filled(10, 4);
        assert_eq!(log.head(), 10);
        assert!(log.get(6).is_none(), "block 5's step is gone");
        let oldest = log.get(7).expect("the oldest step held");
        assert!(matches!(&oldest.change, ChainEvent::Added(b) if b.hash == blocks[6].hash));
        assert_eq!(log.get(10).map(|s| s.position), Some(10));
        assert!(log.get(11).is_none());
    }

    #[test]
    fn a_cursor_resumes_right_after_its_event() {
        let (log, _) = filled(10, 16);
        let from = ResumeFrom::After(cursor(&log, 5, 2));
        assert_eq!(
            log.start_of(&from),
            Ok(ReplayStart::from(Mark {
                position: 5,
                index: 3
            }))
        );
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let (log, _) = filled(10, 4);
        let too_old = log
            .start_of(&ResumeFrom::After(Cursor {
                chain: "eth".into(),
                position: Some(2),
                block: Some(1),
                index: 0,
                tag: 1,
            }))
            .expect_err("too old");
        assert!(
            matches!(&too_old, ResumeError::TooOld(m) if m.contains("reaches back to block 6 (position 7)") && m.contains("last 4 blocks")),
            "{too_old:?}"
        );
        let mut other = cursor(&log, 8, 0);
        other.tag ^= 1;
        assert!(matches!(
            log.start_of(&ResumeFrom::After(other)),
            Err(ResumeError::Unknown(_))
        ));
        // A pending step's cursor (no block) past the end: nothing tells
        // where it is. (One naming a block resumes by it, see above.)
        let mut ahead = cursor(&log, 8, 0);
        ahead.position = Some(11);
        ahead.block = None;
        assert!(matches!(
            log.start_of(&ResumeFrom::After(ahead)),
            Err(ResumeError::Unknown(m)) if m.contains("past the end")
        ));
        let mut bsc = cursor(&log, 8, 0);
        bsc.chain = "bsc".into();
        assert!(matches!(
            log.start_of(&ResumeFrom::After(bsc)),
            Err(ResumeError::OtherChain(m)) if m.contains("of chain bsc")
        ));
    }

    #[test]
    fn from_block_starts_at_the_step_that_added_the_canonical_block() {
        let (log, _) = filled(10, 4);
        let mark = |number| {
            log.start_of(&ResumeFrom::Block(number))
                .map(|plan| plan.mark)
        };
        assert_eq!(mark(8), Ok(Mark::step(9)));
        assert_eq!(
            mark(10),
            Ok(Mark::step(11)),
            "the next block: nothing to replay"
        );
        assert!(matches!(
            log.start_of(&ResumeFrom::Block(11)),
            Err(ResumeError::Ahead(m)) if m.contains("tip, block 9")
        ));
        assert!(matches!(
            log.start_of(&ResumeFrom::Block(5)),
            Err(ResumeError::TooOld(m)) if m.contains("reaches back to block 6")
        ));
    }

    #[test]
    fn a_reorg_moves_from_block_to_the_new_branch() {
        let log = log_of(64);
        let mut tracker = CanonicalChain::new(128);
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                reorg_every: 4,
                reorg_depth: 2,
                ..DevnetSettings::default()
            },
        );
        let mut removed = false;
        for block in blocks(&mut devnet, 12) {
            for change in tracker.apply(block).expect("linked") {
                removed |= matches!(change, ChainEvent::Removed(_));
                log.append(change);
            }
        }
        assert!(removed, "the devnet reorganised");
        for number in 0..=tracker.tip().expect("a tip").number() {
            let canonical = tracker.by_number(number).expect("in the window");
            let ReplayStart {
                mark: Mark { position, index },
                as_of,
            } = log
                .start_of(&ResumeFrom::Block(number))
                .expect("in the log");
            assert_eq!(index, 0);
            let step = log.get(position).expect("held");
            assert!(
                matches!(&step.change, ChainEvent::Added(b) if b.hash == canonical.hash),
                "block {number}"
            );
            // Told of exactly the canonical blocks from there, in order.
            let as_of = as_of.expect("a fromBlock plan");
            let told: Vec<B256> = (position..=log.head())
                .filter(|p| !as_of.passes_over(*p))
                .filter_map(|p| match &log.get(p).expect("held").change {
                    ChainEvent::Added(block) => Some(block.hash),
                    _ => None,
                })
                .collect();
            let canonical: Vec<B256> = (number..=tracker.tip().expect("a tip").number())
                .map(|n| tracker.by_number(n).expect("in the window").hash)
                .collect();
            assert_eq!(told, canonical, "from block {number}");
        }
    }

    #[test]
    fn a_restored_log_goes_on_where_it_stopped() {
        let (log, blocks) = filled(10, 4);
        let stored: Vec<(Position, ChainEvent)> = (log.oldest()..=log.head())
            .map(|p| (p, log.get(p).expect("held").change.clone()))
            .collect();
        let restored = EventLog::restored("eth", 4, LogConfig::default().memory_mib, stored);
        assert_eq!((restored.oldest(), restored.head()), (7, 10));
        let hashes = |blocks: Vec<Arc<Block>>| blocks.iter().map(|b| b.hash).collect::<Vec<_>>();
        assert_eq!(
            hashes(restored.canonical(2)),
            vec![blocks[8].hash, blocks[9].hash]
        );
        let from = ResumeFrom::After(cursor(&log, 8, 0));
        assert_eq!(restored.start_of(&from), log.start_of(&from));
        assert_eq!(
            restored.append(ChainEvent::Pending(Vec::new())).position,
            11
        );
    }

    /// A log continuing another's after its last position keeps what
    /// leads there and lets go of what does not; steps placed at a
    /// position other than the next restart the window there.
    #[test]
    fn a_log_continues_another_at_its_positions() {
        let (log, _) = filled(10, 4);
        log.continue_after(10);
        assert_eq!((log.oldest(), log.head()), (7, 10), "it leads there: kept");
        log.continue_after(20);
        assert_eq!((log.oldest(), log.head()), (21, 20), "let go");
        assert_eq!(log.append(ChainEvent::Pending(Vec::new())).position, 21);
        let step = log.append_at(30, ChainEvent::Pending(Vec::new()));
        assert_eq!((step.position, log.oldest(), log.head()), (30, 30, 30));
    }

    #[test]
    fn the_byte_bound_drops_steps_too() {
        let log = EventLog::new("eth", 1_024, 0);
        let mut devnet = Devnet::new(1, &DevnetSettings::default());
        for block in blocks(&mut devnet, 3) {
            log.append(ChainEvent::Added(block));
        }
        assert_eq!(log.head(), 3);
        assert!(log.get(2).is_none(), "only the newest step fits");
        assert!(log.get(3).is_some());
    }
}
