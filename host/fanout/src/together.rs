//! One step's notifications to a connection in one write, across topics.
//!
//! A block is three streams (heads, mined transactions, logs), each matched
//! by its own topics' actors on their own threads; a connection subscribed
//! to several of them got a write from each. The chain hands every batch of
//! such a step one [`Together`]: each actor queues its frames held
//! ([`super::Sink::hold_all`]) and keeps the [`Held`] connections here, and
//! when the last batch is let go (the last actor done with the step) the
//! connections are released, each writing all the step's frames at once
//! (docs/src/architecture.md, Fan-out). The step waits for its slowest
//! topic's call, so the chain groups only actors with nothing waiting.

use std::sync::{Mutex, PoisonError};

use super::queue::Held;

/// The connections one step's actors held frames on; dropped, it releases
/// them.
#[derive(Debug, Default)]
pub struct Together {
    /// Added to by each actor once, after its batch; taken by the drop.
    held: Mutex<Vec<Held>>,
}

impl Together {
    /// Keeps an actor's holds until the step's last batch is let go.
    pub fn keep(&self, held: Vec<Held>) {
        if held.is_empty() {
            return;
        }
        // Pushing cannot panic halfway; a poisoned list is still whole.
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(held);
    }
}
