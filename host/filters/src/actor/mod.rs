//! One actor per (chain, topic): a dedicated thread that owns the topic's
//! component instance (one `Store`, called synchronously, which is cheaper
//! than async here) and its subscriptions. Batches and commands arrive on
//! one channel, so a subscription or a swap takes effect between two
//! batches, never in the middle of one.
//!
//! A trap, a timeout or a bad answer never takes the server down: the actor
//! rebuilds the instance and makes the subscriptions it keeps on record
//! again in it.
//! A component that fails [`DISABLE_AFTER`] calls in a row is disabled: its
//! subscriptions end with an error notification and new ones are refused
//! until a working component replaces it.
//!
//! A subscription that resumes first reads the chain's log from where it
//! left off ([`replay`]), a step at a time between live batches, then
//! joins the live ones with no gap and no duplicate.

mod component;
mod gate;
mod handle;
mod history;
pub mod pairs;
mod record;
mod replay;
mod wait;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chainsieve_eventlog::EventLog;
use chainsieve_fanout::Via;
use chainsieve_filter_core::params;
use chainsieve_runtime::metrics::ActorMetrics;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

use crate::batch::EventBatch;
use crate::engine::FilterComponent;
use crate::instance::{Instance, Instantiate};
use chainsieve_watchlists::views::View;
pub use component::DISABLE_AFTER;
pub use gate::Gate;
use gate::Wakeup;
use handle::Command;
pub use handle::{FilterHandle, FilterStatus, Start, Subscribe, SubscribeError};
use record::{Feed, Reading, Record};
use replay::Turn;
use wait::Woken;

struct Actor {
    chain: Arc<str>,
    /// What resuming subscriptions replay.
    log: Arc<EventLog>,
    /// Wakes an actor whose replays wait for a finality grade.
    finality: tokio::sync::watch::Receiver<chainsieve_eventlog::Finality>,
    /// Wakes an actor whose replays wait on their queues or gates.
    wakeup: Wakeup,
    /// Drives the wait for a command, or for replays to move.
    runtime: tokio::runtime::Handle,
    /// Makes the instances: the engine, or a test's stand-in.
    instances: Arc<dyn Instantiate>,
    component: FilterComponent,
    /// `None` after a failure until the next call rebuilds it.
    instance: Option<Box<dyn Instance>>,
    /// The replays' own instance, so a replay matches against only the
    /// subscriptions replaying.
    replay: replay::Replay,
    /// Looked up once per subscriber a batch reaches, in key order (the
    /// order of a batch's pairs), so ordered: keys are handed out rising,
    /// and a delivery to every subscriber walks the records where they lie
    /// side by side in the tree's nodes. In a hash map each lookup missed
    /// the cache twice at 10,000 subscriptions (its control bytes, then
    /// its slot): ~10% of the server's user time in the load benchmark
    /// (docs/src/benchmarks.md, One write per step).
    subscriptions: BTreeMap<u64, Record>,
    subscribers: Arc<AtomicUsize>,
    status: Arc<Mutex<FilterStatus>>,
    failures_in_a_row: u32,
    /// Set when the component kept failing; cleared by a swap.
    disabled: Option<String>,
    metrics: ActorMetrics,
    /// The newest view of the watchlists seen, from a live batch or a new
    /// subscription: what replays match as of (docs/src/watchlists.md,
    /// Where an edit applies).
    last_view: Option<Arc<View>>,
}

impl Actor {
    /// Takes commands until the handle is dropped or the actor retires;
    /// while subscriptions replay, one replay step goes between two
    /// commands, so live batches never wait for a whole replay.
    fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        loop {
            let command = if self.replaying() {
                let turn = self.guarded(Self::replay_turn).unwrap_or(Turn::Waits);
                match rx.try_recv() {
                    Ok(command) => command,
                    Err(TryRecvError::Disconnected) => return,
                    Err(TryRecvError::Empty) if turn == Turn::Moved => continue,
                    Err(TryRecvError::Empty) => match self.wait(&mut rx) {
                        Woken::Command(Some(command)) => command,
                        Woken::Again => continue,
                        Woken::Command(None) | Woken::Stopped => return,
                    },
                }
            } else {
                match rx.blocking_recv() {
                    Some(command) => command,
                    None => return,
                }
            };
            // An actor with batches waiting leaves the writes to the
            // connections' writers, on the other worker threads.
            let via = if rx.is_empty() {
                Via::Socket
            } else {
                Via::Queue
            };
            if let Some(Flow::Stop) = self.guarded(|actor| actor.handle(command, via)) {
                return;
            }
        }
    }

    /// Runs `work`, surviving a panic (a bug on the host side of a call):
    /// the instances are the only state it can leave half-changed, so they
    /// are dropped and rebuilt on next use, like after a trap. A subscriber
    /// waiting on a reply sees the filter unavailable.
    fn guarded<T>(&mut self, work: impl FnOnce(&mut Self) -> T) -> Option<T> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(self))) {
            Ok(value) => Some(value),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(chain = %self.chain, topic = %self.component.manifest.topic, panic = %what, "filter actor panicked; rebuilding the instance");
                self.instance = None;
                self.replay.reset();
                None
            }
        }
    }

    fn handle(&mut self, command: Command, via: Via) -> Flow {
        match command {
            Command::Batch(batch) => self.deliver(&batch, via),
            Command::Subscribe(request, reply) => {
                let outcome = self.subscribe(request);
                // The requester may have gone; nothing to undo then, its
                // session's cleanup unsubscribes.
                let _ = reply.send(outcome);
            }
            Command::Unsubscribe(key, ack) => {
                self.unsubscribe(key);
                let _ = ack.send(());
            }
            Command::Swap(component, reply) => {
                let _ = reply.send(self.swap(component));
            }
            Command::Retire(reason, ack) => {
                self.end_all(&reason);
                tracing::info!(chain = %self.chain, topic = %self.component.manifest.topic, %reason, "filter retired");
                let _ = ack.send(());
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    fn topic(&self) -> &str {
        &self.component.manifest.topic
    }

    fn subscribe(&mut self, request: Subscribe) -> Result<(), SubscribeError> {
        let Subscribe {
            key,
            id,
            params,
            sink,
            start,
            resume,
            finality,
            history,
            view,
        } = request;
        if let Some(view) = view {
            self.see_view(view);
        }
        if let Some(reason) = &self.disabled {
            return Err(SubscribeError::Unavailable(format!(
                "the {} filter is disabled: {reason}",
                self.topic()
            )));
        }
        let (feed, as_of) = match (&resume, finality) {
            _ if history.is_some() => (Feed::History, None),
            (None, None) => (Feed::Live { after: 0 }, None),
            (Some(from), _) => {
                let plan = self.log.start_of(from)?;
                (Feed::Replaying { next: plan.mark }, plan.as_of)
            }
            (None, Some(grade)) => (
                Feed::Replaying {
                    next: self.log.first_not_final(grade),
                },
                None,
            ),
        };
        let outcome = self
            .with_instance(|instance| instance.subscribe(key, &params))
            .ok_or_else(|| {
                SubscribeError::Unavailable(format!(
                    "the {} filter failed; try again",
                    self.topic()
                ))
            })?;
        let delivery = outcome.map_err(|refusal| {
            if refusal.starts_with(params::LIMIT_EXCEEDED) {
                SubscribeError::Limit(refusal)
            } else {
                SubscribeError::Params(refusal)
            }
        })?;
        let gate = match start {
            Start::Acknowledge(frame) => {
                // If the connection is already overflowing it is closing.
                let _ = sink.send(frame);
                None
            }
            Start::Gated(gate) => Some(gate),
            Start::Now => None,
        };
        if feed.replays() {
            self.replay.join(key, &params);
        }
        self.subscriptions.insert(
            key,
            Record {
                id,
                params,
                delivery,
                sink,
                gate,
                feed,
                finality,
                as_of,
                history: history.map(|feed| Box::new(Reading::new(feed))),
            },
        );
        self.count_subscribers();
        Ok(())
    }

    fn unsubscribe(&mut self, key: u64) {
        if let Some(record) = self.subscriptions.remove(&key) {
            self.count_subscribers();
            if record.feed.replays() {
                self.replay.leave(key);
            }
            self.with_instance(|instance| instance.unsubscribe(key));
        }
    }

    /// Keeps `view` for the replays if it is as new as the one kept.
    fn see_view(&mut self, view: Arc<View>) {
        if self
            .last_view
            .as_ref()
            .is_none_or(|kept| kept.edit() <= view.edit())
        {
            self.last_view = Some(view);
        }
    }

    fn count_subscribers(&self) {
        self.subscribers
            .store(self.subscriptions.len(), Ordering::Relaxed);
    }

    fn deliver(&mut self, batch: &EventBatch, via: Via) {
        if self.subscriptions.is_empty() {
            return;
        }
        let started = Instant::now();
        let layout = self.component.manifest.layout;
        if let Some(view) = batch.view() {
            self.see_view(view.clone());
        }
        let view = batch.view().map(|view| &**view);
        let matched = self.with_instance(|instance| instance.match_batch(&layout.of(batch), view));
        self.metrics
            .batch_seconds
            .observe(started.elapsed().as_secs_f64());
        let Some(matches) = matched else {
            return;
        };
        let (pairs, outside) = pairs::delivery_order(&matches, batch);
        if let Some(event) = outside.first() {
            tracing::warn!(chain = %self.chain, topic = %self.topic(), event, len = batch.len(), "filter returned an event index outside the batch");
        }
        let position = batch.position();
        // An actor behind on its batches lets the writers gather instead.
        let together = batch.together().filter(|_| via == Via::Socket);
        let mut held = Vec::new();
        let mut sent = 0;
        for pairs in pairs.chunk_by(|a, b| a.key == b.key) {
            if let Some(record) = self.subscriptions.get(&pairs[0].key)
                && record.announced()
                && matches!(record.feed, Feed::Live { after } if position > after)
            {
                let hold = together.is_some().then_some(&mut held);
                sent += record.notify_or_hold(batch, pairs.iter(), via, hold);
            }
        }
        if let Some(together) = together {
            together.keep(held);
        }
        self.metrics.notifications.inc_by(sent);
    }
}

/// Whether the actor keeps running after a command.
enum Flow {
    Continue,
    Stop,
}

#[cfg(test)]
mod tests;
