//! What one key used, counted where it happens: calls by method at each
//! call, notifications and their bytes as a connection's queue takes them,
//! webhook deliveries as a receiver accepts them, history blocks as a
//! stream hands them over. No lock is shared across connections:
//!
//! - a connection counts its notifications itself ([`Counted`]), beside
//!   its queue, under the lock its sender already holds (a plain add, the
//!   hottest count of all: the load benchmark measured 5% of the server's
//!   CPU for a thread-striped atomic add per delivery, and ~4% of its user
//!   time for a tally of its own, a cache line apart from the queue); the
//!   meter reads the live connections' counts and keeps what closed
//!   connections counted;
//! - every other count goes to the stripe of the thread making it, so
//!   threads never touch the same cache line (a thread's stripe is its own
//!   unless more threads run than there are stripes).
//!
//! [`Meter::totals`] sums them when someone asks.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

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

/// A thread's stripe number before it has drawn one.
const UNDRAWN: usize = usize::MAX;

thread_local! {
    /// This thread's stripe number (masked to a meter's stripes), drawn at
    /// its first count: a const initializer, so reading it costs no check
    /// of a lazy one.
    static STRIPE: Cell<usize> = const { Cell::new(UNDRAWN) };
}

/// This thread's stripe number.
fn stripe_number() -> usize {
    STRIPE.with(|stripe| match stripe.get() {
        UNDRAWN => {
            let drawn = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
            stripe.set(drawn);
            drawn
        }
        drawn => drawn,
    })
}

/// Method names a key's stripe counts apart; more, and others, are
/// counted as [`OTHER_METHODS`] (clients choose the names: a flood of made
/// up ones must not grow the server's memory).
const DISTINCT_METHODS: usize = 256;

/// Where calls to a method not counted apart go.
pub const OTHER_METHODS: &str = "(other)";

/// A live connection's notification counts, as the meter reads them.
pub trait Counted: Send + Sync + std::fmt::Debug {
    /// The notifications counted so far, and their bytes.
    fn counts(&self) -> (u64, u64);
}

/// One key's counts.
#[derive(Debug)]
pub struct Meter {
    stripes: Box<[CachePadded<Stripe>]>,
    /// The stripes' count less one (a power of two less one): a thread's
    /// stripe is its number masked, not divided.
    mask: usize,
    /// The key's open connections, by number; a closed one's counts move
    /// to a stripe under this lock, so a reader holding it counts each
    /// once. Taken at a connection's open and close, and by readers.
    live: Mutex<HashMap<u64, Arc<dyn Counted>>>,
    /// The next connection's number.
    next: AtomicU64,
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
            mask: *STRIPES - 1,
            live: Mutex::default(),
            next: AtomicU64::new(0),
        }
    }
}

impl Meter {
    fn stripe(&self) -> &Stripe {
        &self.stripes[stripe_number() & self.mask]
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
        let plain = chainsieve_config::is_plain_name(method);
        let name = if plain && calls.len() < DISTINCT_METHODS {
            method
        } else {
            OTHER_METHODS
        };
        *calls.entry(name.into()).or_default() += 1;
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<dyn Counted>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the counts of a connection of the key opening now; its
    /// number, for [`Meter::detach`].
    pub fn attach(&self, connection: Arc<dyn Counted>) -> u64 {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        self.live().insert(number, connection);
        number
    }

    /// Keeps what connection `number` counted as it closes; it must count
    /// nothing more.
    pub fn detach(&self, number: u64) {
        let mut live = self.live();
        if let Some(connection) = live.remove(&number) {
            let (notifications, bytes) = connection.counts();
            let stripe = self.stripe();
            stripe
                .notifications
                .fetch_add(notifications, Ordering::Relaxed);
            stripe.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
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
        let live = self.live();
        for connection in live.values() {
            let (notifications, bytes) = connection.counts();
            totals.notifications += notifications;
            totals.bytes += bytes;
        }
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

/// A connection's counts, on their own (the queue keeps its own).
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Tally {
    notifications: AtomicU64,
    bytes: AtomicU64,
}

#[cfg(test)]
impl Tally {
    pub fn add(&self, notifications: u64, bytes: u64) {
        self.notifications
            .fetch_add(notifications, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
impl Counted for Tally {
    fn counts(&self) -> (u64, u64) {
        (
            self.notifications.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// A [`Tally`] attached to `meter`, and its number.
#[cfg(test)]
pub fn attached(meter: &Meter) -> (u64, Arc<Tally>) {
    let tally = Arc::new(Tally::default());
    (meter.attach(tally.clone()), tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let meter = Arc::new(Meter::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let meter = meter.clone();
                std::thread::spawn(move || {
                    let (number, tally) = attached(&meter);
                    for _ in 0..1_000 {
                        meter.called("eth_chainId");
                        tally.add(2, 300);
                    }
                    meter.detach(number);
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

    /// An open connection's counts are read as they are; a closed one's
    /// are kept, each counted once.
    #[test]
    fn open_and_closed_connections_count_once() {
        let meter = Meter::default();
        let (first, tally) = attached(&meter);
        tally.add(1, 10);
        let (_, open) = attached(&meter);
        open.add(2, 20);
        assert_eq!(
            (meter.totals().notifications, meter.totals().bytes),
            (3, 30)
        );
        meter.detach(first);
        meter.detach(first);
        assert_eq!(
            (meter.totals().notifications, meter.totals().bytes),
            (3, 30)
        );
        open.add(1, 5);
        assert_eq!(meter.totals().notifications, 4);
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
