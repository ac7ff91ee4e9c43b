//! Requests per second per API key: a token bucket per key (governor's
//! GCRA), holding one second's worth of its plan's rate. Every JSON-RPC
//! call counts once, a batch's calls each; a call over the rate is answered
//! -32005 and the connection stays open. Buckets are per server: on the
//! bus each edge holds its own (docs/src/operations.md, Keys and plans).

use std::collections::HashMap;
use std::sync::Arc;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::RpcError;
use chainsieve_keys::plan::{Limit, Plan, Plans};

pub struct RateLimit {
    /// One keyed limiter per plan (a quota is the limiter's), buckets by
    /// key id: a key moved to another plan starts a bucket there.
    by_plan: HashMap<Arc<str>, DefaultKeyedRateLimiter<Arc<str>>>,
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("plans", &self.by_plan.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl RateLimit {
    pub fn new(plans: &Plans) -> Self {
        Self {
            by_plan: plans
                .iter()
                .map(|plan| {
                    let quota = Quota::per_second(plan.requests_per_second);
                    (plan.name.clone(), RateLimiter::keyed(quota))
                })
                .collect(),
        }
    }

    /// Takes one request from the bucket of key `id` on `plan`, or says why
    /// it cannot.
    pub fn check(&self, id: &Arc<str>, plan: &Plan) -> Result<(), RpcError> {
        let Some(limiter) = self.by_plan.get(&plan.name) else {
            // Plans are the config's, fixed at start.
            return Ok(());
        };
        limiter.check_key(id).map_err(|_| {
            RpcError::limit_exceeded(format!(
                "rate limit exceeded: this API key's plan \"{}\" allows {} requests per second ({})",
                plan.name,
                plan.requests_per_second,
                plan.origin(Limit::RequestsPerSecond)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chainsieve_config::{Config, PlanConfig};

    #[test]
    fn a_key_gets_its_plans_second_of_requests_then_waits() {
        let mut config = Config::default();
        config.limits.requests_per_second_per_key = 3;
        config.plans.insert(
            "pro".into(),
            PlanConfig {
                requests_per_second: Some(5),
                ..PlanConfig::default()
            },
        );
        let plans = Plans::from_config(&config);
        let (default, pro) = (
            plans.get("default").expect("default"),
            plans.get("pro").expect("pro"),
        );
        let limit = RateLimit::new(&plans);
        let (alice, bob): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        let allowed = (0..10)
            .filter(|_| limit.check(&alice, default).is_ok())
            .count();
        // One second's worth; a refill during the loop would take 333 ms.
        assert_eq!(allowed, 3);
        let refused = limit.check(&alice, default).expect_err("over the rate");
        assert!(
            refused
                .message
                .contains("plan \"default\" allows 3 requests per second")
                && refused
                    .message
                    .contains("limits.requests_per_second_per_key"),
            "{}",
            refused.message
        );
        assert!(
            limit.check(&bob, default).is_ok(),
            "other keys have their own bucket"
        );
        let on_pro = (0..10).filter(|_| limit.check(&alice, pro).is_ok()).count();
        assert_eq!(on_pro, 5, "re-planned: the new plan's bucket");
        let refused = limit.check(&alice, pro).expect_err("over the rate");
        assert!(refused.message.contains("plans.pro.requests_per_second"));
    }
}
