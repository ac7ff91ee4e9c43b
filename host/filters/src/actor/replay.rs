//! Resume replay (docs/src/architecture.md, The event log). A resuming
//! subscription reads the chain's log from its mark, one step per turn
//! between two commands, matched by an instance of its own that holds only
//! the subscriptions replaying, so live batches never wait for a whole
//! replay and never pay for it.
//!
//! A replay delivers while its connection's queue is at most half full (the
//! other half stays free for live frames): a replay larger than the queue
//! is paced by its reader, never a reason to close the connection. Once its
//! mark passes the log's head it takes live batches from the next position
//! on: those up to the head were replayed, and every later one reaches the
//! actor, since the pipeline appends a step before it checks for
//! subscribers and the subscription was counted before.
//!
//! A subscription waiting for a finality grade (docs/src/api.md, Finality)
//! replays for good: it reads the log behind the grade, told of each block
//! the step that added it as canonical once the grade reaches it, and
//! passing over removals, pending transactions and blocks a reorg
//! replaced. When nothing but the grade holds every replay back, the
//! actor sleeps until a command or the grade moves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chainsieve_filter_core::Matches;

use super::Actor;
use super::pairs::{self, Pair};
use super::record::{Feed, Record};
use crate::batch::EventBatch;
use crate::instance::Instance;
use chainsieve_eventlog::cursor::Mark;
use chainsieve_eventlog::{EventLog, Position, Step};
use chainsieve_fanout::Via;
use chainsieve_model::ChainEvent;

/// The JSON-RPC error code ending a replay that fell out of the log's
/// window: EIP-1474's "resource not found", as for a resume older than it.
const FELL_BEHIND: i64 = -32001;

/// Replayed notifications one actor sends per second at most, and in one
/// burst: a replay takes a bounded share of the machine, so live
/// subscribers keep their latency (docs/src/benchmarks.md, Resume).
const REPLAY_RATE: f64 = 50_000.0;
const REPLAY_BURST: f64 = 1_000.0;

/// Steps a replay may pass over in one turn (removals, pending batches,
/// replaced blocks cost a lookup each).
const SKIPS_PER_TURN: usize = 256;

/// What a turn of the replays came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turn {
    /// Some replay moved: take another turn soon.
    Moved,
    /// Every replay waits: on its reader's room, its gate, its history
    /// reader, a finality grade or the budget, until one lets go
    /// ([`super::wait`]).
    Waits,
}

/// Whether a replay at `next` is told of the step there now, passes over
/// it (a `fromBlock` replay's [`chainsieve_eventlog::cursor::AsOf`], or what a
/// subscription waiting for a grade is never told of), or waits for its
/// grade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Due {
    Now,
    Skip,
    Wait,
}

fn due(log: &EventLog, record: &Record, next: Mark) -> Due {
    // Paused inside a step it is being told of.
    if next.index > 0 {
        return Due::Now;
    }
    if record
        .as_of
        .as_ref()
        .is_some_and(|as_of| as_of.passes_over(next.position))
    {
        return Due::Skip;
    }
    let Some(grade) = record.finality else {
        return Due::Now;
    };
    if next.position > log.head() {
        return Due::Wait;
    }
    // Out of the window: the replay's own path ends it.
    let Some(step) = log.get(next.position) else {
        return Due::Now;
    };
    match &step.change {
        // A block a reorg replaced never becomes canonical again (a return
        // to it is a step of its own): passed over at once.
        ChainEvent::Added(block) if !log.is_canonical(block.number(), step.position) => Due::Skip,
        ChainEvent::Added(block) => match log.finality().height(grade) {
            Some(height) if block.number() <= height => Due::Now,
            _ => Due::Wait,
        },
        ChainEvent::Removed(_)
        | ChainEvent::Pending(_)
        | ChainEvent::Watch(_)
        | ChainEvent::Lifecycle(_) => Due::Skip,
    }
}

/// A token bucket over [`REPLAY_RATE`].
pub(super) struct Budget {
    tokens: f64,
    refilled: Instant,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            tokens: REPLAY_BURST,
            refilled: Instant::now(),
        }
    }
}

impl Budget {
    /// Takes one notification's worth; false when the bucket is empty.
    pub(super) fn take(&mut self) -> bool {
        let available = !self.is_empty();
        if available {
            self.tokens -= 1.0;
        }
        available
    }

    /// When the bucket next holds one notification's worth; `None` while
    /// it does.
    pub(super) fn refilled_at(&mut self) -> Option<Instant> {
        if !self.is_empty() {
            return None;
        }
        let missing = (1.0 - self.tokens) / REPLAY_RATE;
        Some(self.refilled + Duration::from_secs_f64(missing))
    }

    /// Adds what the time since the last look earned; true if that is less
    /// than one notification's worth.
    fn is_empty(&mut self) -> bool {
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * REPLAY_RATE;
        self.tokens = (self.tokens + earned).min(REPLAY_BURST);
        self.refilled = now;
        self.tokens < 1.0
    }
}

/// The subscriptions replaying and what matches for them.
#[derive(Default)]
pub(super) struct Replay {
    /// The subscriptions replaying, in the order they joined.
    pub(super) keys: Vec<u64>,
    /// Holds every replaying subscription; built when a step needs it,
    /// dropped after a failure or when the last replay catches up.
    instance: Option<Box<dyn Instance>>,
    /// The step matched last, for subscriptions paused inside it; stale
    /// once the replaying subscriptions change.
    last: Option<Arc<Matched>>,
    pub(super) budget: Budget,
}

/// One step as the replaying subscriptions match it.
struct Matched {
    position: Position,
    /// `None` when the step has no events of the actor's stream.
    batch: Option<EventBatch>,
    /// The replays' pairs, grouped by subscription, each in chain order.
    pairs: Vec<Pair>,
}

impl Replay {
    /// A subscription starts replaying.
    pub(super) fn join(&mut self, key: u64, params: &str) {
        self.keys.push(key);
        self.last = None;
        if let Some(instance) = &mut self.instance
            && !matches!(instance.subscribe(key, params), Ok(Ok(_)))
        {
            // Rebuilt with every replaying subscription at the next step.
            self.instance = None;
        }
    }

    /// A subscription stops replaying (caught up, or gone).
    pub(super) fn leave(&mut self, key: u64) {
        let before = self.keys.len();
        self.keys.retain(|k| *k != key);
        if self.keys.len() == before {
            return;
        }
        self.last = None;
        if self.keys.is_empty() {
            self.instance = None;
        } else if let Some(instance) = &mut self.instance
            && instance.unsubscribe(key).is_err()
        {
            self.instance = None;
        }
    }

    /// Drops the instance (after a failure or a swap); it is rebuilt, of the
    /// current component, at the next step.
    pub(super) fn reset(&mut self) {
        self.instance = None;
        self.last = None;
    }

    /// Forgets every replay (their subscriptions ended).
    pub(super) fn clear(&mut self) {
        self.keys.clear();
        self.reset();
    }
}

impl Actor {
    pub(super) fn replaying(&self) -> bool {
        !self.replay.keys.is_empty()
    }

    /// Moves the replays on by at most one step of the log.
    pub(super) fn replay_turn(&mut self) -> Turn {
        // Passing over may take a replay past the log's head: it joins the
        // live batches then, before any step is looked for.
        let skipped = self.pass_over();
        if self.join_live() {
            return Turn::Moved;
        }
        if self.replay.budget.is_empty() {
            return Turn::Waits;
        }
        let moved = self.history_turn() || skipped;
        let log = &self.log;
        let ready = |record: &Record| {
            let Feed::Replaying { next } = record.feed else {
                return None;
            };
            Some((next, due(log, record, next)))
        };
        let mut position = None;
        for record in self
            .replay
            .keys
            .iter()
            .filter_map(|key| self.subscriptions.get(key))
        {
            if record.feed == Feed::History {
                // Moved on by `history_turn`, above.
                continue;
            }
            let Some((next, due)) = ready(record) else {
                continue;
            };
            let room = record.announced() && record.sink.room_to_spare() > 0;
            if room && due == Due::Now {
                position = Some(position.map_or(next.position, |p: Position| p.min(next.position)));
            }
        }
        let Some(position) = position else {
            return if moved { Turn::Moved } else { Turn::Waits };
        };
        let Some(step) = self.log.get(position) else {
            self.end_fallen_behind(position);
            return Turn::Moved;
        };
        match self.matched(&step) {
            Some(matched) => self.deliver_replayed(&matched),
            // The call failed (counted); the step is lost to these
            // subscriptions, as a failed live batch is to live ones.
            None => self.advance_past(position),
        }
        Turn::Moved
    }

    /// Moves each replay past the steps it is not told of; true if any
    /// moved.
    fn pass_over(&mut self) -> bool {
        let mut moved = false;
        for key in &self.replay.keys {
            let Some(record) = self.subscriptions.get_mut(key) else {
                continue;
            };
            let Feed::Replaying { mut next } = record.feed else {
                continue;
            };
            for _ in 0..SKIPS_PER_TURN {
                if due(&self.log, record, next) != Due::Skip {
                    break;
                }
                next = Mark::step(next.position + 1);
                moved = true;
            }
            record.feed = Feed::Replaying { next };
        }
        moved
    }

    /// Moves every replay whose mark is past the log's head to the live
    /// batches; true if any did.
    fn join_live(&mut self) -> bool {
        let head = self.log.head();
        let mut caught_up = Vec::new();
        for key in &self.replay.keys {
            if let Some(record) = self.subscriptions.get_mut(key)
                && let Feed::Replaying { next } = record.feed
                && next.position > head
                && record.finality.is_none()
            {
                record.feed = Feed::Live {
                    after: next.position - 1,
                };
                caught_up.push(*key);
            }
        }
        for key in &caught_up {
            self.replay.leave(*key);
        }
        !caught_up.is_empty()
    }

    /// The step as the replaying subscriptions match it; `None` if the
    /// call failed.
    fn matched(&mut self, step: &Step) -> Option<Arc<Matched>> {
        if let Some(last) = &self.replay.last
            && last.position == step.position
        {
            return Some(last.clone());
        }
        let batch = EventBatch::stream_of(step, &self.chain, self.component.manifest.source);
        let pairs = match &batch {
            None => Vec::new(),
            Some(batch) => match self.replay_match(batch) {
                Ok(matches) => {
                    self.failures_in_a_row = 0;
                    pairs::delivery_order(&matches, batch).0
                }
                Err(error) => {
                    self.replay.instance = None;
                    self.failed(error.context(format!("replaying step {}", step.position)));
                    return None;
                }
            },
        };
        let matched = Arc::new(Matched {
            position: step.position,
            batch,
            pairs,
        });
        self.replay.last = Some(matched.clone());
        Some(matched)
    }

    /// Matches `batch` in the replays' instance, building it first if
    /// needed.
    pub(super) fn replay_match(&mut self, batch: &EventBatch) -> anyhow::Result<Matches> {
        if self.replay.instance.is_none() {
            let mut instance = self
                .instances
                .instantiate(&self.component)
                .context("building the replay instance")?;
            for key in &self.replay.keys {
                if let Some(record) = self.subscriptions.get(key) {
                    instance
                        .subscribe(*key, &record.params)
                        .with_context(|| format!("making subscription {} to replay", record.id))?
                        .map_err(|refusal| {
                            anyhow::anyhow!("the replay instance refused {}: {refusal}", record.id)
                        })?;
                }
            }
            self.replay.instance = Some(instance);
        }
        let instance = self
            .replay
            .instance
            .as_mut()
            .context("the replay instance was just built")?;
        instance.match_batch(
            &self.component.manifest.layout.of(batch),
            self.last_view.as_deref(),
        )
    }

    /// Delivers a matched step to each replay at it that has room, as far
    /// as the room goes.
    fn deliver_replayed(&mut self, matched: &Matched) {
        let mut sent = 0;
        for key in &self.replay.keys {
            let Some(record) = self.subscriptions.get_mut(key) else {
                continue;
            };
            let Feed::Replaying { next } = record.feed else {
                continue;
            };
            if next.position != matched.position || due(&self.log, record, next) != Due::Now {
                continue;
            }
            let Some(batch) = &matched.batch else {
                record.feed = Feed::Replaying {
                    next: Mark::step(matched.position + 1),
                };
                continue;
            };
            if !record.announced() {
                continue;
            }
            // The subscriber's pairs, in chain order (`pairs::delivery_order`):
            // what the room and the budget allow of them goes in one
            // hand-over, so in one write.
            let due: Vec<&Pair> = matched
                .pairs
                .iter()
                .filter(|pair| pair.key == *key && pair.event >= next.index)
                .collect();
            let allowed = allowance(&due, record.sink.room_to_spare(), || {
                self.replay.budget.take()
            });
            let paused_at = due.get(allowed).map(|pair| pair.event);
            if allowed > 0 {
                sent += record.notify_all(batch, due[..allowed].iter().copied(), Via::Socket);
            }
            record.feed = Feed::Replaying {
                next: match paused_at {
                    Some(index) => Mark {
                        position: matched.position,
                        index,
                    },
                    None => Mark::step(matched.position + 1),
                },
            };
        }
        self.metrics.notifications.inc_by(sent);
    }

    /// Moves every replay at `position` to the next step.
    fn advance_past(&mut self, position: Position) {
        for key in &self.replay.keys {
            if let Some(record) = self.subscriptions.get_mut(key)
                && matches!(record.feed, Feed::Replaying { next } if next.position == position)
            {
                record.feed = Feed::Replaying {
                    next: Mark::step(position + 1),
                };
            }
        }
    }

    /// Ends the replays at `position`: the log dropped that step before
    /// they read it (their readers were too slow for the window).
    fn end_fallen_behind(&mut self, position: Position) {
        let behind: Vec<u64> = self
            .replay
            .keys
            .iter()
            .copied()
            .filter(|key| {
                self.subscriptions.get(key).is_some_and(
                    |record| matches!(record.feed, Feed::Replaying { next } if next.position == position),
                )
            })
            .collect();
        let message = format!(
            "the replay fell behind {}: events were lost, subscribe again",
            self.log.window()
        );
        tracing::warn!(chain = %self.chain, topic = %self.topic(), position, "replays fell out of the log's window; ending them");
        self.end_replays(&behind, FELL_BEHIND, &message);
    }

    /// Ends the replaying subscriptions `keys` with an error notification
    /// of `code` saying `message`.
    pub(super) fn end_replays(&mut self, keys: &[u64], code: i64, message: &str) {
        let mut ended = Vec::with_capacity(keys.len());
        for key in keys {
            self.replay.leave(*key);
            if let Some(record) = self.subscriptions.remove(key) {
                tracing::warn!(chain = %self.chain, topic = %self.topic(), subscription = %record.id, code, message, "replay ended");
                self.with_instance(|instance| instance.unsubscribe(*key));
                ended.push(record);
            }
        }
        // Counted before the last frames go: whoever reads one finds the
        // subscription gone.
        self.count_subscribers();
        for record in ended {
            record.end_with(code, message);
        }
    }
}

/// How many of `due` (a subscriber's pairs, in chain order) go now: as
/// many as `room` allows while `take` grants budget, ending between two
/// events, as a paused replay resumes at an event.
pub(super) fn allowance(due: &[&Pair], room: usize, mut take: impl FnMut() -> bool) -> usize {
    let mut allowed = 0;
    while allowed < due.len().min(room) && take() {
        allowed += 1;
    }
    while allowed > 0 && allowed < due.len() && due[allowed].event == due[allowed - 1].event {
        allowed -= 1;
    }
    allowed
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A replay's hand-over goes as far as the room and the budget allow,
    /// and never stops inside an event's pairs.
    #[test]
    fn a_replay_goes_as_far_as_room_and_budget_allow_and_pauses_between_events() {
        let pairs: Vec<Pair> = [3, 4, 4, 5]
            .into_iter()
            .map(|event| Pair {
                event,
                key: 7,
                written: None,
            })
            .collect();
        let due: Vec<&Pair> = pairs.iter().collect();
        assert_eq!(allowance(&due, 10, || true), 4, "all of it");
        assert_eq!(allowance(&due, 3, || true), 3, "as far as the room");
        assert_eq!(allowance(&due, 2, || true), 1, "not through event 4");
        assert_eq!(allowance(&due, 0, || true), 0);
        let mut tokens = 1;
        let mut take = || std::mem::replace(&mut tokens, 0) > 0;
        assert_eq!(allowance(&due, 10, &mut take), 1, "as far as the budget");
    }

    /// A burst's worth goes at once; then the bucket refills at the rate.
    #[test]
    fn the_budget_allows_a_burst_then_the_rate() {
        let mut budget = Budget::default();
        let burst = (0..2 * REPLAY_BURST as usize)
            .take_while(|_| budget.take())
            .count();
        assert!(
            (REPLAY_BURST as usize..REPLAY_BURST as usize + 50).contains(&burst),
            "{burst}"
        );
        budget.refilled -= Duration::from_millis(10);
        assert!(
            !budget.is_empty(),
            "10 ms earn {} more",
            REPLAY_RATE / 100.0
        );
        assert!(budget.take());
    }
}
