//! Reconnection delays: exponential, capped, with jitter so that the
//! clients a server restart cut off do not all come back at once.

use std::time::Duration;

/// The delays between tries to open the socket again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay's upper bound.
    pub initial: Duration,
    /// The largest delay.
    pub maximum: Duration,
}

impl Default for Backoff {
    /// 250 ms first, 30 s at most: the JavaScript and Python packages'.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(250),
            maximum: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before try `attempt` (0 first): half the exponential bound
    /// plus `random` (in `[0, 1)`) of the other half ("equal jitter").
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let bound = self
            .initial
            .saturating_mul(1u32 << attempt.min(30))
            .min(self.maximum);
        bound / 2 + (bound / 2).mul_f64(random.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_maximum_with_half_of_each_random() {
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            maximum: Duration::from_millis(1_000),
        };
        assert_eq!(backoff.delay(0, 0.0), Duration::from_millis(50));
        assert_eq!(backoff.delay(0, 1.0), Duration::from_millis(100));
        assert_eq!(backoff.delay(2, 0.5), Duration::from_millis(300));
        assert_eq!(backoff.delay(10, 0.0), Duration::from_millis(500));
        assert_eq!(backoff.delay(u32::MAX, 1.0), Duration::from_millis(1_000));
    }
}
