//! History replay (docs/src/api.md, History from the nodes). A
//! subscription whose `fromBlock` is older than the log first takes the
//! blocks its history feed reads from the nodes: each is matched in the
//! replays' instance when its turn comes and delivered as the reader's
//! room and the replay budget allow, pausing between two events; at the
//! seam the subscription goes on as a replay of the log, of the chain as it
//! is canonical from the next block on.

use std::sync::Arc;

use super::record::{Current, Feed};
use super::replay::allowance;
use super::{Actor, pairs};
use crate::batch::EventBatch;
use chainsieve_fanout::Via;
use chainsieve_history::HistoryItem;
use chainsieve_model::Block;

impl Actor {
    /// Moves each history stream on by at most one block; true if any
    /// moved.
    pub(super) fn history_turn(&mut self) -> bool {
        let reading: Vec<u64> = self
            .replay
            .keys
            .iter()
            .copied()
            .filter(|key| {
                self.subscriptions
                    .get(key)
                    .is_some_and(|record| record.feed == Feed::History)
            })
            .collect();
        let mut moved = false;
        for key in reading {
            moved |= self.history_step(key);
        }
        moved
    }

    /// One block (or what the room allows of it) for subscription `key`;
    /// true if anything happened.
    fn history_step(&mut self, key: u64) -> bool {
        let Some(record) = self.subscriptions.get_mut(&key) else {
            return false;
        };
        if !record.announced() || record.sink.room_to_spare() == 0 {
            return false;
        }
        let Some(reading) = record.history.as_mut() else {
            return false;
        };
        if reading.current.is_none() {
            let Some(item) = reading.feed.try_next() else {
                return false;
            };
            match item {
                HistoryItem::Block(block) => return self.history_block(key, block),
                HistoryItem::Seam(mut plan) => {
                    // At a resumed cursor's own block: after its event.
                    if let Some(after) = reading.feed.after.take() {
                        plan.mark.index = after.saturating_add(1);
                    }
                    record.feed = super::Feed::Replaying { next: plan.mark };
                    record.as_of = plan.as_of;
                    record.history = None;
                    return true;
                }
                HistoryItem::Failed { code, reason } => {
                    self.end_replays(&[key], code, &reason);
                    return true;
                }
            }
        }
        self.deliver_history(key)
    }

    /// Matches `block` for subscription `key` and delivers what it may.
    fn history_block(&mut self, key: u64, block: Arc<Block>) -> bool {
        // After a cursor: the first block's events up to it went before.
        let after = self
            .subscriptions
            .get_mut(&key)
            .and_then(|record| record.history.as_mut())
            .and_then(|reading| reading.feed.after.take());
        let source = self.component.manifest.source;
        let Some(batch) = EventBatch::of_history(&block, &self.chain, source) else {
            // No event of this stream in the block.
            return true;
        };
        let pairs = match self.replay_match(&batch) {
            Ok(matches) => {
                self.failures_in_a_row = 0;
                let (pairs, _) = pairs::delivery_order(&matches, &batch);
                pairs
                    .into_iter()
                    .filter(|pair| pair.key == key && after.is_none_or(|after| pair.event > after))
                    .collect()
            }
            Err(error) => {
                self.replay.reset();
                self.failed(error.context(format!("matching history block {}", block.number())));
                // Lost to this subscription, as a failed live batch is.
                return true;
            }
        };
        if let Some(reading) = self
            .subscriptions
            .get_mut(&key)
            .and_then(|record| record.history.as_mut())
        {
            reading.current = Some(Current {
                block,
                batch,
                pairs,
                sent: 0,
            });
        }
        self.deliver_history(key)
    }

    /// Delivers what the room and the budget allow of the block being
    /// read, unless it waits for its finality grade.
    fn deliver_history(&mut self, key: u64) -> bool {
        let log = &self.log;
        let Some(record) = self.subscriptions.get_mut(&key) else {
            return false;
        };
        let Some(mut current) = record.history.as_mut().and_then(|r| r.current.take()) else {
            return false;
        };
        let waits = record.finality.is_some_and(|grade| {
            log.finality()
                .height(grade)
                .is_none_or(|height| current.block.number() > height)
        });
        let mut allowed = 0;
        if !waits {
            let due: Vec<&pairs::Pair> = current.pairs[current.sent..].iter().collect();
            let budget = &mut self.replay.budget;
            allowed = allowance(&due, record.sink.room_to_spare(), || budget.take());
            if allowed > 0 {
                let sent =
                    record.notify_all(&current.batch, due[..allowed].iter().copied(), Via::Socket);
                self.metrics.notifications.inc_by(sent);
            }
            current.sent += allowed;
        }
        let done = current.sent == current.pairs.len();
        if !done && let Some(reading) = record.history.as_mut() {
            reading.current = Some(current);
        }
        done || allowed > 0
    }
}
