//! Requests per second per API key: a token bucket per key (governor's
//! GCRA), holding one second's worth of requests. Every JSON-RPC call counts
//! once, a batch's calls each; a call over the rate is answered -32005 and
//! the connection stays open.

use std::num::NonZeroU32;
use std::sync::Arc;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::rpc::RpcError;

pub struct RateLimit {
    /// Buckets by key; keys come from the config, so the map stays small.
    limiter: DefaultKeyedRateLimiter<Arc<str>>,
    per_second: NonZeroU32,
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("per_second", &self.per_second)
            .finish_non_exhaustive()
    }
}

impl RateLimit {
    pub fn new(per_second: NonZeroU32) -> Self {
        Self {
            limiter: RateLimiter::keyed(Quota::per_second(per_second)),
            per_second,
        }
    }

    /// Takes one request from `key`'s bucket, or says why it cannot.
    pub fn check(&self, key: &Arc<str>) -> Result<(), RpcError> {
        self.limiter.check_key(key).map_err(|_| {
            RpcError::limit_exceeded(format!(
                "rate limit exceeded: this API key may make {} requests per second (limits.requests_per_second_per_key)",
                self.per_second
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_its_second_of_requests_then_waits() {
        let limit = RateLimit::new(NonZeroU32::new(3).expect("non-zero"));
        let (alice, bob): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        let allowed = (0..10).filter(|_| limit.check(&alice).is_ok()).count();
        // One second's worth; a refill during the loop would take 333 ms.
        assert_eq!(allowed, 3);
        let refused = limit.check(&alice).expect_err("over the rate");
        assert!(refused.message.contains("3 requests per second"));
        assert!(
            limit.check(&bob).is_ok(),
            "other keys have their own bucket"
        );
    }
}
