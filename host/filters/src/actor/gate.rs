//! A subscription's gate, and the wakeup an actor waits on while its
//! replays wait ([`super::wait`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Wakes an actor whose replays wait: notified by a connection's writer
/// that made room and by a gate that opened. One per actor; a wake that
/// comes before the actor waits is kept (a [`Notify`] permit), so none is
/// lost between the actor's look and its wait.
pub(super) type Wakeup = Arc<Notify>;

/// A subscription's gate: closed while the batch response telling the
/// client its id is not queued, so nothing is delivered to an id the client
/// cannot know yet; the session opens it right after queuing the response.
#[derive(Debug, Default)]
pub struct Gate {
    open: AtomicBool,
    /// The actor to wake when the gate opens, if one waits on it. A lock,
    /// not an atomic: the opener's take and the actor's registration must
    /// not cross (see [`Gate::wake_when_open`]).
    waiting: Mutex<Option<Wakeup>>,
}

impl Gate {
    /// A closed gate.
    pub fn closed() -> Arc<Self> {
        Arc::default()
    }

    /// Opens the gate and wakes the actor waiting on it.
    pub fn open(&self) {
        self.open.store(true, Ordering::Release);
        if let Some(wakeup) = lock(&self.waiting).take() {
            wakeup.notify_one();
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Has `wakeup` notified when the gate opens, or at once if it is
    /// open: an opener that took no waiter stored `open` before its look,
    /// so the look here after the registration sees it.
    pub(super) fn wake_when_open(&self, wakeup: &Wakeup) {
        *lock(&self.waiting) = Some(wakeup.clone());
        if self.is_open() {
            wakeup.notify_one();
        }
    }
}

fn lock(waiting: &Mutex<Option<Wakeup>>) -> std::sync::MutexGuard<'_, Option<Wakeup>> {
    // An `Option` is whole whatever a panic interrupted.
    waiting
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate wakes the actor registered on it when it opens, and one
    /// registered on an open gate at once.
    #[tokio::test]
    async fn a_gate_wakes_its_waiter_when_it_opens_or_at_once_when_open() {
        let gate = Gate::closed();
        let wakeup = Wakeup::default();
        gate.wake_when_open(&wakeup);
        let woken = wakeup.notified();
        tokio::pin!(woken);
        assert!(!woken.as_mut().enable(), "no wake while closed");
        gate.open();
        woken.await;
        assert!(gate.is_open());
        gate.wake_when_open(&wakeup);
        tokio::time::timeout(std::time::Duration::from_secs(5), wakeup.notified())
            .await
            .expect("an open gate wakes at once");
    }
}
