//! What one key used, counted where it happens: calls by method at each
//! call, notifications and their bytes as a connection's queue takes them,
//! webhook deliveries as a receiver accepts them, history blocks as a
//! stream hands them over. Every count goes to the stripe of the thread
//! making it, so connections on different threads never touch the same
//! cache line and no lock is shared across them (a thread's stripe is its
//! own unless more threads run than there are stripes); [`Meter::totals`]
//! sums the stripes when someone asks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};

use crossbeam_utils::CachePadded;

use super::Counts;

/// Stripes per meter: twice the cores, a power of two, so the runtime's
/// workers and the filter actors' threads mostly have one each.
static STRIPES: LazyLock<usize> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(4, |cores| cores.get());
    (cores * 2).next_power_of_two().min(64)
});

/// The next thread's stripe number.
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe number (taken modulo a meter's stripes).
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed);
}

/// Method names a key's stripe counts apart; more, and others, are
/// counted as [`OTHER_METHODS`] (clients choose the names: a flood of made
/// up ones must not grow the server's memory).
const DISTINCT_METHODS: usize = 256;

/// Where calls to a method not counted apart go.
pub const OTHER_METHODS: &str = "(other)";

/// One key's counts.
#[derive(Debug)]
pub struct Meter {
    stripes: Box<[CachePadded<Stripe>]>,
}

#[derive(Debug, Default)]
struct Stripe {
    notifications: AtomicU64,
    bytes: AtomicU64,
    webhook_deliveries: AtomicU64,
    webhook_notifications: AtomicU64,
    webhook_bytes: AtomicU64,
    history_blocks: AtomicU64,
    /// Calls by method, this thread's: locked by it at each call, and by
    /// [`Meter::totals`].
    calls: Mutex<HashMap<Box<str>, u64>>,
}

impl Default for Meter {
    fn default() -> Self {
        Self {
            stripes: (0..*STRIPES).map(|_| CachePadded::default()).collect(),
        }
    }
}

impl Meter {
    fn stripe(&self) -> &Stripe {
        let index = STRIPE.with(|stripe| *stripe) % self.stripes.len();
        &self.stripes[index]
    }

    /// One call of `method`.
    pub fn called(&self, method: &str) {
        let mut calls = self
            .stripe()
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = calls.get_mut(method) {
            *count += 1;
            return;
        }
        let plain = crate::config::is_plain_name(method);
        let name = if plain && calls.len() < DISTINCT_METHODS {
            method
        } else {
            OTHER_METHODS
        };
        *calls.entry(name.into()).or_default() += 1;
    }

    /// `notifications` notifications of `bytes` bytes (their text) taken
    /// for one of the key's connections.
    pub fn notified(&self, notifications: u64, bytes: u64) {
        let stripe = self.stripe();
        stripe
            .notifications
            .fetch_add(notifications, Ordering::Relaxed);
        stripe.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// One delivery of `notifications` notifications, a body of `bytes`,
    /// accepted by a webhook's receiver.
    pub fn webhook_delivered(&self, notifications: u64, bytes: u64) {
        let stripe = self.stripe();
        stripe.webhook_deliveries.fetch_add(1, Ordering::Relaxed);
        stripe
            .webhook_notifications
            .fetch_add(notifications, Ordering::Relaxed);
        stripe.webhook_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// `blocks` blocks a history stream handed to a subscription.
    pub fn replayed(&self, blocks: u64) {
        self.stripe()
            .history_blocks
            .fetch_add(blocks, Ordering::Relaxed);
    }

    /// Everything counted so far.
    pub fn totals(&self) -> Counts {
        let mut totals = Counts::default();
        for stripe in &self.stripes {
            let read = |count: &AtomicU64| count.load(Ordering::Relaxed);
            totals.notifications += read(&stripe.notifications);
            totals.bytes += read(&stripe.bytes);
            totals.webhook_deliveries += read(&stripe.webhook_deliveries);
            totals.webhook_notifications += read(&stripe.webhook_notifications);
            totals.webhook_bytes += read(&stripe.webhook_bytes);
            totals.history_blocks += read(&stripe.history_blocks);
            let calls = stripe.calls.lock().unwrap_or_else(PoisonError::into_inner);
            for (method, count) in calls.iter() {
                *totals.calls.entry(method.to_string()).or_default() += count;
            }
        }
        totals
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let meter = Arc::new(Meter::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let meter = meter.clone();
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        meter.called("eth_chainId");
                        meter.notified(2, 300);
                    }
                    meter.webhook_delivered(3, 900);
                    meter.replayed(5);
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("no panic");
        }
        let totals = meter.totals();
        assert_eq!(totals.calls.get("eth_chainId"), Some(&8_000));
        assert_eq!((totals.notifications, totals.bytes), (16_000, 2_400_000));
        assert_eq!(
            (
                totals.webhook_deliveries,
                totals.webhook_notifications,
                totals.webhook_bytes
            ),
            (8, 24, 7_200)
        );
        assert_eq!(totals.history_blocks, 40);
    }

    #[test]
    fn made_up_method_names_cannot_grow_the_counts() {
        let meter = Meter::default();
        for n in 0..1_000 {
            meter.called(&format!("made_up_{n}"));
        }
        meter.called("not a name {}");
        let totals = meter.totals();
        assert!(totals.calls.len() <= DISTINCT_METHODS * *STRIPES + 1);
        let counted: u64 = totals.calls.values().sum();
        assert_eq!(counted, 1_001, "every call counted, the rest together");
        assert!(totals.calls[OTHER_METHODS] >= 1);
    }
}
