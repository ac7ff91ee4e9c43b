//! What history may take (docs/src/api.md, History from the nodes): how
//! many streams run at once, on the server and per API key, and how many
//! calls a second they may make of a chain's nodes together, so that live
//! ingest and forwarded calls keep the capacity they need.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use chainsieve_keys::per_key::{PerKey, Place};
use chainsieve_keys::plan::{Limit, Plan};

/// The history streams running on the server.
#[derive(Debug)]
pub struct Streams {
    /// `[history] max_streams`.
    max: usize,
    /// Streams running, all keys.
    total: Arc<AtomicUsize>,
    /// Streams running, by key.
    by_key: Arc<PerKey>,
}

/// A running stream's place, given back when dropped (the stream ended,
/// or reached the log).
#[derive(Debug)]
pub struct Admitted {
    total: Arc<AtomicUsize>,
    _of_key: Place,
}

impl Streams {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            total: Arc::default(),
            by_key: Arc::default(),
        }
    }

    /// A place for one more stream of key `key` on `plan`, or why there is
    /// none (for a -32005).
    pub fn admit(&self, key: &Arc<str>, plan: &Plan) -> Result<Admitted, String> {
        let of_key = self
            .by_key
            .open(key, plan.max_history_streams)
            .ok_or_else(|| {
                format!(
                    "this API key has {} history streams running, the most its plan \"{}\" allows ({}); try again when one has caught up",
                    plan.max_history_streams,
                    plan.name,
                    plan.origin(Limit::HistoryStreams)
                )
            })?;
        self.total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |total| {
                (total < self.max).then_some(total + 1)
            })
            .map_err(|total| {
                format!(
                    "{total} history streams are running on this server, its limit ([history] max_streams); try again when one has caught up"
                )
            })?;
        Ok(Admitted {
            total: self.total.clone(),
            _of_key: of_key,
        })
    }

    /// How many streams run now.
    pub fn running(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.total.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The calls a second a chain's history streams may make of its nodes
/// together: `[history] calls_per_second_per_node` times the nodes, one
/// second's worth at most in a burst.
#[derive(Debug)]
pub struct Budget {
    limiter: DefaultDirectRateLimiter,
    per_second: NonZeroU32,
}

impl Budget {
    pub fn new(per_second: NonZeroU32) -> Self {
        Self {
            limiter: RateLimiter::direct(Quota::per_second(per_second)),
            per_second,
        }
    }

    /// Waits until `calls` more calls are within the budget (a batch
    /// larger than a second's worth waits for a whole second's).
    pub async fn take(&self, calls: u32) {
        let calls = NonZeroU32::new(calls.min(self.per_second.get())).unwrap_or(NonZeroU32::MIN);
        // The count was capped at the capacity, so it always fits.
        let _ = self.limiter.until_n_ready(calls).await;
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    #[test]
    fn streams_are_admitted_up_to_each_limit_and_given_back() {
        let mut config = chainsieve_config::Config::default();
        config.history.max_streams_per_key = 2;
        let plans = chainsieve_keys::plan::Plans::from_config(&config);
        let plan = plans.get("default").expect("default plan");
        let streams = Arc::new(Streams::new(3));
        let (alice, bob): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        let first = streams.admit(&alice, plan).expect("one");
        let _second = streams.admit(&alice, plan).expect("two");
        let refused = streams
            .admit(&alice, plan)
            .expect_err("a third for one key");
        assert!(
            refused.contains("plan \"default\" allows (history.max_streams_per_key)"),
            "{refused}"
        );
        let _third = streams.admit(&bob, plan).expect("another key");
        let refused = streams.admit(&bob, plan).expect_err("the server is full");
        assert!(refused.contains("[history] max_streams)"), "{refused}");
        drop(first);
        assert_eq!(streams.running(), 2);
        streams.admit(&alice, plan).expect("a place given back");
    }

    #[test]
    fn the_budget_lets_a_second_s_worth_through_then_waits() {
        let budget = Budget::new(NonZeroU32::new(10).expect("non-zero"));
        assert!(
            budget.take(10).now_or_never().is_some(),
            "a second's worth at once"
        );
        // Ten more take a second to earn.
        assert!(budget.take(10).now_or_never().is_none(), "then it waits");
    }
}
