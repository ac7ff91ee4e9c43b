//! How an actor waits while every replay waits. A replay is held back by
//! its connection's queue (half full: [`Sink::room_to_spare`]), by its
//! gate (its batch response not queued yet), by its history reader (the
//! next block not read yet), by a finality grade, or by the replay budget.
//! Each of them wakes the actor when it lets go: the queue's writer and the
//! gate through the actor's one [`super::gate::Wakeup`], the reader's channel and the
//! grade's watch by being waited on, the budget by a timer set to its
//! refill. Nothing is polled: an actor whose replays wait costs nothing
//! until one can move or a command comes.

use std::collections::BTreeMap;
use std::task::Poll;
use std::time::Instant;

use tokio::sync::mpsc;

use super::Actor;
use super::record::{Feed, Record};

/// What ended a wait.
pub(super) enum Woken<C> {
    /// A command came (`None`: every handle is gone).
    Command(Option<C>),
    /// Something a replay waited on let go: take another turn.
    Again,
    /// The runtime's timers are gone (it is shutting down).
    Stopped,
}

impl Actor {
    /// Waits for a command or for something holding a replay back to let
    /// go. Every replay waiting on its queue or its gate has the actor's
    /// wakeup registered there first, so a room made or a gate opened from
    /// then on ends the wait.
    pub(super) fn wait<C>(&mut self, rx: &mut mpsc::Receiver<C>) -> Woken<C> {
        for key in &self.replay.keys {
            let Some(record) = self.subscriptions.get(key) else {
                continue;
            };
            match record.gate.as_ref().filter(|gate| !gate.is_open()) {
                Some(gate) => gate.wake_when_open(&self.wakeup),
                None if record.sink.room_to_spare() == 0 => {
                    record.sink.wake_when_room(&self.wakeup);
                }
                None => {}
            }
        }
        // With the budget spent nothing moves before it refills: the
        // readers' next blocks wait too.
        let refill = self.replay.budget.refilled_at();
        let Actor {
            runtime,
            finality,
            wakeup,
            subscriptions,
            replay,
            ..
        } = self;
        // Each history stream whose next block is all it waits for.
        let readers: Vec<u64> = replay
            .keys
            .iter()
            .copied()
            .filter(|_| refill.is_none())
            .filter(|key| {
                subscriptions.get(key).is_some_and(|record| {
                    record.feed == Feed::History
                        && record.announced()
                        && record.sink.room_to_spare() > 0
                })
            })
            .collect();
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(async {
                tokio::select! {
                    command = rx.recv() => Woken::Command(command),
                    () = wakeup.notified() => Woken::Again,
                    Ok(()) = finality.changed() => Woken::Again,
                    () = read(subscriptions, &readers) => Woken::Again,
                    () = refilled(refill) => Woken::Again,
                }
            })
        }));
        waited.unwrap_or(Woken::Stopped)
    }
}

/// Returns once one of the history streams of `readers` has its next
/// item (or has stopped); never, with none.
async fn read(subscriptions: &mut BTreeMap<u64, Record>, readers: &[u64]) {
    std::future::poll_fn(|cx| {
        let ready = readers.iter().any(|key| {
            subscriptions
                .get_mut(key)
                .and_then(|record| record.history.as_mut())
                .is_some_and(|reading| reading.poll_ready(cx).is_ready())
        });
        if ready {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}

/// Returns at `at`; never, without one.
async fn refilled(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
