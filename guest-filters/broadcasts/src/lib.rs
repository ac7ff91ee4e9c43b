//! The broadcast topics' rules (geth's semantics): `newHeads` sends every
//! canonical header to every subscription, `newPendingTransactions` every
//! pending transaction, as its hash or, subscribed with `true`, as the full
//! transaction. Nothing to index: matching an event emits the subscription
//! list.
//!
//! Like the other built-ins' rules they depend on `chainsieve-filter-core`
//! only, so each SDK's `rules_filter!` makes a component of them for its
//! contract version. Neither reads any field of an event: a 0.2 build's
//! batches carry no fields ([`READS`]).

use chainsieve_filter_core::params::{self, ParamsError};
use chainsieve_filter_core::serde_json::Value;
use chainsieve_filter_core::{Broadcast, Emit, Payload, Reach, SubscriptionId};

/// The fields the rules read: none (the host makes the payloads).
pub const READS: u32 = 0;

/// The subscriptions of `newHeads`.
#[derive(Debug, Default)]
pub struct HeadRules {
    subscriptions: Broadcast,
}

impl HeadRules {
    /// Adds subscription `id`; `newHeads` takes no parameters, though some
    /// clients send an empty object (geth ignores it too).
    pub fn subscribe(
        &mut self,
        id: SubscriptionId,
        params: &str,
        topic: &str,
    ) -> Result<(), ParamsError> {
        let items = params::array(params)?;
        let extra = items
            .iter()
            .filter(|v| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()));
        if extra.count() > 0 {
            return Err(ParamsError::new(format!("{topic} takes no parameters")));
        }
        self.subscriptions.insert(id);
        Ok(())
    }

    pub fn unsubscribe(&mut self, id: SubscriptionId) {
        self.subscriptions.remove(id);
    }

    /// Every header goes to every subscription: the host delivers them
    /// without asking a 0.2 component.
    pub fn reach(&self, _id: SubscriptionId) -> Reach {
        Reach::Every
    }

    /// Every header goes to every subscription.
    #[inline(always)]
    pub fn matches<E>(&self, _head: &E, emit: &mut impl Emit) {
        self.subscriptions.emit_all(emit);
    }
}

/// The subscriptions of `newPendingTransactions`.
#[derive(Debug, Default)]
pub struct PendingRules {
    subscriptions: Broadcast,
}

impl PendingRules {
    /// Adds subscription `id`: an optional boolean chooses full
    /// transactions over hashes.
    pub fn subscribe(
        &mut self,
        id: SubscriptionId,
        params: &str,
        topic: &str,
    ) -> Result<Payload, ParamsError> {
        let items = params::array(params)?;
        params::at_most(&items, 1, topic)?;
        let payload = match items.first() {
            None | Some(Value::Null) | Some(Value::Bool(false)) => Payload::Hash,
            Some(Value::Bool(true)) => Payload::Full,
            Some(other) => {
                return Err(ParamsError::new(format!(
                    "{topic} takes an optional boolean (full transactions), got {}",
                    params::kind(other)
                )));
            }
        };
        self.subscriptions.insert(id);
        Ok(payload)
    }

    pub fn unsubscribe(&mut self, id: SubscriptionId) {
        self.subscriptions.remove(id);
    }

    /// Every transaction goes to every subscription: the host delivers them
    /// without asking a 0.2 component.
    pub fn reach(&self, _id: SubscriptionId) -> Reach {
        Reach::Every
    }

    /// Every transaction goes to every subscription.
    #[inline(always)]
    pub fn matches<E>(&self, _tx: &E, emit: &mut impl Emit) {
        self.subscriptions.emit_all(emit);
    }
}

#[cfg(test)]
mod tests {
    use chainsieve_filter_sdk::layout::{BatchWriter, HeadFields};
    use chainsieve_filter_sdk::{Filter, Manifest, Source, match_batch};

    use super::*;

    chainsieve_filter_sdk::rules_filter!(
        Heads,
        crate::HeadRules,
        HeadView,
        Manifest {
            topic: "newHeads",
            source: Source::Heads,
            payload: Payload::Full,
        }
    );

    chainsieve_filter_sdk::rules_filter!(
        Pending,
        crate::PendingRules,
        TxView,
        Manifest {
            topic: "newPendingTransactions",
            source: Source::PendingTransactions,
            payload: Payload::Hash,
        }
    );

    #[test]
    fn every_header_reaches_every_subscription() {
        let mut f = Heads::default();
        f.subscribe(1, "[]").expect("no params");
        f.subscribe(2, "[{}]").expect("empty object tolerated");
        let err = f
            .subscribe(3, r#"[{"includeTransactions":true}]"#)
            .expect_err("a parameter");
        assert_eq!(err.to_string(), "newHeads takes no parameters");
        let mut w = BatchWriter::new(Source::Heads, 2);
        for number in [10, 11] {
            w.push_head(&HeadFields::numbered(number));
        }
        let m = match_batch(&f, &w.finish()).expect("heads batch");
        assert_eq!(
            m.pairs().collect::<Vec<_>>(),
            vec![(0, 1), (0, 2), (1, 1), (1, 2)]
        );
        f.unsubscribe(1);
        assert_eq!(f.0.subscriptions.ids(), [2]);
    }

    #[test]
    fn the_boolean_chooses_the_payload() {
        let mut f = Pending::default();
        assert_eq!(f.subscribe(1, "[]"), Ok(Payload::Hash));
        assert_eq!(f.subscribe(2, "[false]"), Ok(Payload::Hash));
        assert_eq!(f.subscribe(3, "[true]"), Ok(Payload::Full));
        assert_eq!(f.subscribe(6, "[null]"), Ok(Payload::Hash));
        let err = f.subscribe(4, r#"["yes"]"#).expect_err("not a boolean");
        assert!(err.to_string().contains("optional boolean"), "{err}");
        assert!(f.subscribe(5, "[true, 1]").is_err());
        assert_eq!(f.0.subscriptions.ids(), [1, 2, 3, 6]);
        f.unsubscribe(2);
        assert_eq!(f.0.subscriptions.ids(), [1, 3, 6]);
    }
}
