//! A session's keepalive: a ping every interval, busy or idle, and a
//! client that has not answered one by the next is taken for gone. It
//! lives in the reader, which sees the pongs, so the writer waits on its
//! queue alone and a notification never polls a timer; the ping itself
//! goes out ahead of the queued frames, so a reader slow to drain a long
//! queue still gets it in time.

use std::time::Duration;

use tokio::time::{Interval, MissedTickBehavior};

/// The ping schedule and whether the last ping was answered.
pub(super) struct Heartbeat {
    ticks: Interval,
    answered: bool,
}

/// A ping went a whole interval without a pong.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Unanswered;

impl Heartbeat {
    /// The first ping is due one `interval` from now.
    pub(super) fn new(interval: Duration) -> Self {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        // A late tick is not made up for: a busy reader never sends two
        // pings back to back.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            ticks,
            answered: true,
        }
    }

    /// A pong came.
    pub(super) fn answered(&mut self) {
        self.answered = true;
    }

    /// Waits until the next ping is due; `Err` if the last one was never
    /// answered. Cancel-safe: a wait dropped early loses no tick.
    pub(super) async fn next_ping(&mut self) -> Result<(), Unanswered> {
        self.ticks.tick().await;
        if std::mem::replace(&mut self.answered, false) {
            Ok(())
        } else {
            Err(Unanswered)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pings are due every interval while answered; the first one left
    /// unanswered ends it one interval later. (Time is paused: the test
    /// runs at once.)
    #[tokio::test(start_paused = true)]
    async fn a_ping_unanswered_for_an_interval_ends_the_heartbeat() {
        let period = Duration::from_secs(10);
        let mut heartbeat = Heartbeat::new(period);
        let started = tokio::time::Instant::now();
        for ping in 1..=4 {
            assert_eq!(heartbeat.next_ping().await, Ok(()));
            assert_eq!(started.elapsed(), ping * period);
            if ping < 4 {
                heartbeat.answered();
            }
        }
        assert_eq!(heartbeat.next_ping().await, Err(Unanswered));
        assert_eq!(
            started.elapsed(),
            5 * period,
            "four pings, then one interval"
        );
    }
}
