//! The short way to write a filter that shapes its notifications: a
//! [`Transform`] is one subscription's parameters, read once, a test of one
//! event against them, and a function that writes a matching event's
//! payload. [`Transforms`] keeps the subscriptions (filed by address when a
//! transform names some, as the 0.1 SDK's rules are) and writes each
//! matching event's payload once, however many subscriptions it goes to.

use crate::{
    Delivery, Event, Filter, Manifest, Out, ParamsError, Reach, RuleSet, Source, SubscriptionId,
};

/// One subscription of a transforming filter.
pub trait Transform: Sized {
    /// The `eth_subscribe` event type served.
    const TOPIC: &'static str;
    const SOURCE: Source;
    /// The view read, naming the fields the transform reads.
    type Event<'a>: Event<'a>;

    /// Reads a subscription's parameters (the JSON array after the topic
    /// name). An error's message is what the client gets (-32602).
    fn subscribe(params: &str) -> Result<Self, ParamsError>;

    /// Whether `event` goes to this subscription.
    fn matches(&self, event: &Self::Event<'_>) -> bool;

    /// Writes the payload of an event some subscription matched: one JSON
    /// value, written once per event.
    fn write(event: &Self::Event<'_>, json: &mut String);

    /// The addresses this subscription is limited to, if it is: it then
    /// sees only events whose [`Transform::event_key`] is one of them.
    fn index(&self) -> Option<&[[u8; 20]]> {
        None
    }

    /// The address an event is filed under (e.g. a log's contract), for
    /// subscriptions that declare an [`Transform::index`].
    fn event_key(_event: &Self::Event<'_>) -> Option<[u8; 20]> {
        None
    }

    /// Which events this subscription can match ([`Filter::reach`]): the
    /// host asks about those alone. It must never leave out an event
    /// [`Transform::matches`] accepts. By default any event.
    fn reach(&self) -> Reach {
        Reach::Any
    }
}

/// The subscriptions of a [`Transform`]: a [`Filter`] to export with
/// [`crate::export_transform!`].
#[derive(Debug)]
pub struct Transforms<T> {
    rules: RuleSet<T>,
}

impl<T> Default for Transforms<T> {
    fn default() -> Self {
        Self {
            rules: RuleSet::default(),
        }
    }
}

impl<T: Transform> Filter for Transforms<T> {
    const MANIFEST: Manifest = Manifest {
        topic: T::TOPIC,
        source: T::SOURCE,
        delivery: Delivery::Written,
    };
    type Event<'a> = T::Event<'a>;

    fn subscribe(&mut self, id: SubscriptionId, params: &str) -> Result<Delivery, ParamsError> {
        self.rules.insert(id, T::subscribe(params)?, T::index);
        Ok(Delivery::Written)
    }

    fn unsubscribe(&mut self, id: SubscriptionId) {
        self.rules.remove(id, T::index);
    }

    fn reach(&self, id: SubscriptionId) -> Reach {
        self.rules.get(id).map_or(Reach::Any, T::reach)
    }

    fn matches(&self, event: &Self::Event<'_>, out: &mut Out<'_>) {
        let mut payload = None;
        for (id, rule) in self.rules.candidates(T::event_key(event)) {
            if rule.matches(event) {
                let written =
                    *payload.get_or_insert_with(|| out.write_with(|json| T::write(event, json)));
                out.send_written(id, written);
            }
        }
    }
}

/// Exports a [`Transform`] as the component's `chainsieve:filter@0.2.0`
/// world.
#[macro_export]
macro_rules! export_transform {
    ($transform:ty) => {
        $crate::export_filter!($crate::Transforms<$transform>);
    };
}

/// Makes `$name`, a filter over `$rules`, rules kept outside any contract
/// version (`chainsieve-transactions-filter`, `chainsieve-log-rules`,
/// `chainsieve-broadcast-rules`): a type with `subscribe(id, params,
/// topic)` answering a [`PayloadChoice`](crate::PayloadChoice),
/// `unsubscribe(id)`, `reach(id)` and `matches(event, emit)`, reading events as `$view`
/// (`TxView`, `LogView`) with the fields `$fields` (what the rules read),
/// or as `HeadView` (headers are whole). Matches go out with the
/// subscription's payload kind.
#[macro_export]
macro_rules! rules_filter {
    ($name:ident, $rules:ty, HeadView, $manifest:expr) => {
        $crate::rules_filter!(@filter $name, $rules, $crate::HeadView<'a>, $manifest);
    };
    ($name:ident, $rules:ty, $view:ident, $fields:expr, $manifest:expr) => {
        $crate::rules_filter!(@filter $name, $rules, $crate::$view<'a, { $fields }>, $manifest);
    };
    (@filter $name:ident, $rules:ty, $event:ty, $manifest:expr) => {
        /// The component's filter.
        #[derive(Debug, Default)]
        pub struct $name($rules);

        impl $name {
            /// The manifest's payload kind: rules send no written payload,
            /// so a manifest delivering `Written` does not build.
            const KIND: $crate::Payload = match <Self as $crate::Filter>::MANIFEST.delivery {
                $crate::Delivery::Kind(kind) => kind,
                $crate::Delivery::Written => {
                    panic!("rules_filter! rules send no written payloads: deliver a payload kind")
                }
            };
        }

        impl $crate::Filter for $name {
            const MANIFEST: $crate::Manifest = $manifest;
            type Event<'a> = $event;

            fn subscribe(
                &mut self,
                id: $crate::SubscriptionId,
                params: &str,
            ) -> Result<$crate::Delivery, $crate::ParamsError> {
                let chosen = self.0.subscribe(id, params, Self::MANIFEST.topic)?;
                Ok($crate::Delivery::Kind($crate::PayloadChoice::or_manifest(
                    chosen,
                    Self::KIND,
                )))
            }

            fn unsubscribe(&mut self, id: $crate::SubscriptionId) {
                self.0.unsubscribe(id)
            }

            fn reach(&self, id: $crate::SubscriptionId) -> $crate::Reach {
                self.0.reach(id)
            }

            #[inline(always)]
            fn matches(&self, event: &Self::Event<'_>, out: &mut $crate::Out<'_>) {
                self.0.matches(event, out)
            }
        }
    };
}
