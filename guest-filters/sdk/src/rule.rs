//! The short way to write a filter: a [`Rule`] is one subscription's
//! parameters, read once, and a test of one event against them. [`Rules`]
//! keeps the subscriptions and implements [`Filter`] over them, so an author
//! writes only `subscribe(params)` and `matches(&event)`.
//!
//! A rule that names addresses (a token, a contract) can say so through
//! [`Rule::index`] and [`Rule::event_key`]: its subscriptions are then filed
//! by address and an event meets only those filed under its own, so the
//! cost per event stays flat as subscriptions grow. Without an index every
//! event is tested against every subscription, which is fine for a few
//! hundred.

use crate::{Event, Filter, Manifest, ParamsError, Payload, RuleSet, SubscriptionId};

/// One subscription of a filter, and the test of an event against it.
pub trait Rule: Sized {
    const MANIFEST: Manifest;
    /// The view the rule reads: [`crate::TxView`], [`crate::HeadView`] or
    /// [`crate::LogView`].
    type Event<'a>: Event<'a>;

    /// Reads a subscription's parameters (the JSON array after the topic
    /// name). An error's message is what the client gets (-32602).
    fn subscribe(params: &str) -> Result<Self, ParamsError>;

    /// Whether `event` goes to this subscription.
    fn matches(&self, event: &Self::Event<'_>) -> bool;

    /// The addresses this subscription is limited to, if it is: it then
    /// sees only events whose [`Rule::event_key`] is one of them.
    fn index(&self) -> Option<&[[u8; 20]]> {
        None
    }

    /// The address an event is filed under (e.g. a log's contract), for
    /// subscriptions that declare an [`Rule::index`].
    fn event_key(_event: &Self::Event<'_>) -> Option<[u8; 20]> {
        None
    }
}

/// The subscriptions of a [`Rule`]: a [`Filter`] to export with
/// [`crate::export_rule!`].
#[derive(Debug)]
pub struct Rules<R> {
    rules: RuleSet<R>,
}

impl<R> Default for Rules<R> {
    fn default() -> Self {
        Self {
            rules: RuleSet::default(),
        }
    }
}

impl<R: Rule> Filter for Rules<R> {
    const MANIFEST: Manifest = R::MANIFEST;
    type Event<'a> = R::Event<'a>;

    fn subscribe(&mut self, id: SubscriptionId, params: &str) -> Result<Payload, ParamsError> {
        self.rules.insert(id, R::subscribe(params)?, R::index);
        Ok(R::MANIFEST.payload)
    }

    fn unsubscribe(&mut self, id: SubscriptionId) {
        self.rules.remove(id, R::index);
    }

    fn matches(&self, event: &Self::Event<'_>, emit: &mut impl FnMut(SubscriptionId)) {
        for (id, rule) in self.rules.candidates(R::event_key(event)) {
            if rule.matches(event) {
                emit(id);
            }
        }
    }
}

/// Exports a [`Rule`] as the component's `chainsieve:filter` world.
#[macro_export]
macro_rules! export_rule {
    ($rule:ty) => {
        $crate::export_filter!($crate::Rules<$rule>);
    };
}

/// Makes `$name`, a filter over `$rules`, rules kept outside any contract
/// version (`chainsieve-transactions-filter`, `chainsieve-log-rules`,
/// `chainsieve-broadcast-rules`): a type with `subscribe(id, params,
/// topic)` answering a [`PayloadChoice`](crate::PayloadChoice),
/// `unsubscribe(id)` and `matches(event, emit)`, reading events as `$view`
/// (`TxView`, `HeadView`, `LogView`). So one crate of rules serves a
/// component of each version.
#[macro_export]
macro_rules! rules_filter {
    ($name:ident, $rules:ty, $view:ident, $manifest:expr) => {
        /// The component's filter.
        #[derive(Debug, Default)]
        pub struct $name($rules);

        impl $crate::Filter for $name {
            const MANIFEST: $crate::Manifest = $manifest;
            type Event<'a> = $crate::$view<'a>;

            fn subscribe(
                &mut self,
                id: $crate::SubscriptionId,
                params: &str,
            ) -> Result<$crate::Payload, $crate::ParamsError> {
                let chosen = self.0.subscribe(id, params, Self::MANIFEST.topic)?;
                Ok($crate::PayloadChoice::or_manifest(
                    chosen,
                    Self::MANIFEST.payload,
                ))
            }

            fn unsubscribe(&mut self, id: $crate::SubscriptionId) {
                self.0.unsubscribe(id)
            }

            #[inline(always)]
            fn matches(
                &self,
                event: &Self::Event<'_>,
                emit: &mut impl FnMut($crate::SubscriptionId),
            ) {
                self.0.matches(event, emit)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{BatchWriter, HeadFields};
    use crate::{HeadView, Source, match_batch, params};

    /// Heads whose number is a multiple of `every`, optionally only those
    /// mined by one of `miners` (indexed).
    #[derive(Debug)]
    struct EveryNth {
        every: u64,
        miners: Option<Vec<[u8; 20]>>,
    }

    impl Rule for EveryNth {
        const MANIFEST: Manifest = Manifest {
            topic: "everyNth",
            source: Source::Heads,
            payload: Payload::Full,
        };
        type Event<'a> = HeadView<'a>;

        fn subscribe(params: &str) -> Result<Self, ParamsError> {
            let items = params::array(params)?;
            params::at_most(&items, 2, "everyNth")?;
            let every = items
                .first()
                .and_then(|v| v.as_u64())
                .filter(|&n| n > 0)
                .ok_or_else(|| ParamsError::new("everyNth takes a positive number"))?;
            let miners = items
                .get(1)
                .map(|v| params::hex_list::<20>(Some(v), "miners"))
                .transpose()?;
            Ok(Self { every, miners })
        }

        fn matches(&self, head: &HeadView<'_>) -> bool {
            head.number().is_multiple_of(self.every)
        }

        fn index(&self) -> Option<&[[u8; 20]]> {
            self.miners.as_deref()
        }

        fn event_key(head: &HeadView<'_>) -> Option<[u8; 20]> {
            Some(*head.miner())
        }
    }

    fn heads(miners: &[[u8; 20]]) -> Vec<u8> {
        let mut w = BatchWriter::new(Source::Heads, miners.len());
        for (number, miner) in miners.iter().enumerate() {
            w.push_head(&HeadFields {
                miner,
                ..HeadFields::numbered(number as u64)
            });
        }
        w.finish()
    }

    #[test]
    fn rules_keep_subscriptions_and_use_the_index() {
        let (a, b) = ([0xaa; 20], [0xbb; 20]);
        let mut rules = Rules::<EveryNth>::default();
        assert_eq!(rules.subscribe(1, "[2]"), Ok(Payload::Full));
        let only_a = format!("[3, [\"0x{}\"]]", "aa".repeat(20));
        rules.subscribe(2, &only_a).expect("valid");
        let batch = heads(&[a, b, a, a, b, a, a]);
        let pairs: Vec<_> = match_batch(&rules, &batch)
            .expect("heads")
            .pairs()
            .collect();
        // 1: even numbers; 2: multiples of 3 mined by a (0, 3, 6).
        assert_eq!(
            pairs,
            vec![(0, 2), (0, 1), (2, 1), (3, 2), (4, 1), (6, 2), (6, 1)]
        );
        rules.unsubscribe(2);
        rules.unsubscribe(1);
        assert!(match_batch(&rules, &batch).expect("heads").is_empty());
    }

    #[test]
    fn a_refusal_keeps_nothing() {
        let mut rules = Rules::<EveryNth>::default();
        let error = rules.subscribe(1, "[0]").expect_err("refused");
        assert_eq!(error.to_string(), "everyNth takes a positive number");
        assert!(
            match_batch(&rules, &heads(&[[0; 20]]))
                .expect("heads")
                .is_empty()
        );
    }
}
