//! The guest SDK for `chainsieve:filter@0.3.0` components
//! (docs/src/architecture.md, Filter contract v0.3): the 0.2 contract's
//! filters, whose subscriptions may name a watchlist wherever they name
//! addresses. The host hands a subscription's watchlist on as
//! `{"watchlist": <number>}` ([`params::address_set`]), a filter's
//! [`Reach`] names it with [`Key::Watched`], and each event comes with the
//! watchlists its fields are in, of those the subscriptions named
//! ([`Filter::matches`]'s `watched`).
//!
//! [`rules_filter!`] makes a filter of rules kept outside any contract
//! version that match through the host's memberships
//! (`chainsieve-transactions-filter`); [`export_filter!`] exports one.
//! Built natively, [`match_batch`] runs a filter as the component would.
//!
//! This crate binds contract 0.3.0 only: each version's bindings live in a
//! crate of their own.

pub use chainsieve_filter_core::component::{
    Event, LogView, Manifest, Out, TxView, Written, each_event,
};
pub use chainsieve_filter_core::projection::{
    ProjectedBatch, ProjectedWriter, log_fields, tx_fields,
};
pub use chainsieve_filter_core::{
    Delivery, Emit, HeadView, Key, LayoutError, Matches, Memberships, ParamsError, Payload,
    PayloadChoice, Reach, Source, SubscriptionId, WatchedField, layout, params, projection,
    serde_json,
};

/// The watchlists one event's fields are in: (event, field, watchlist)
/// entries, of the watchlists some subscription named.
pub type Watched<'a> = &'a [(u32, WatchedField, u32)];

/// The matching logic of one topic. One value lives in each component
/// instance and holds every subscription of that topic on one chain.
pub trait Filter: Default {
    const MANIFEST: Manifest;
    /// The view the filter matches on, naming the fields it reads.
    type Event<'a>: Event<'a>;

    /// Adds a subscription; `params` is the JSON array after the topic name.
    fn subscribe(&mut self, id: SubscriptionId, params: &str) -> Result<Delivery, ParamsError>;

    /// Removes a subscription; unknown ids are ignored.
    fn unsubscribe(&mut self, id: SubscriptionId);

    /// Which events subscription `id` (just accepted) can match; it must
    /// never leave out an event [`Filter::matches`] would send to `id`.
    fn reach(&self, _id: SubscriptionId) -> Reach {
        Reach::Any
    }

    /// Sends `event` through `out` to every subscription it goes to;
    /// `watched` says which watchlists its fields are in.
    fn matches(&self, event: &Self::Event<'_>, watched: Watched<'_>, out: &mut Out<'_>);
}

/// Runs `filter` over a layout-2 batch with its memberships: the body of
/// `match-batch`, and what native tests call.
pub fn match_batch<F: Filter>(
    filter: &F,
    bytes: &[u8],
    memberships: &Memberships,
) -> Result<Matches, LayoutError> {
    let mut walk = memberships.walk();
    each_event::<F::Event<'_>>(bytes, F::MANIFEST.source, |index, event, out| {
        filter.matches(event, walk.of(index), out)
    })
}

#[doc(hidden)]
// The generated export of `match-batch` takes the batch and the three
// membership columns as eight words.
#[allow(clippy::too_many_arguments)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/v0.3.0",
        world: "filter",
        pub_export_macro: true,
        export_macro_name: "__export_filter_world",
        default_bindings_module: "chainsieve_filter_sdk_0_3::bindings",
    });
}

/// Conversions used by [`export_filter!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    use super::bindings::chainsieve::filter::types as wit;
    use super::{
        Delivery, Key, Manifest, Matches, Memberships, Payload, Reach, Source, WatchedField,
    };

    chainsieve_filter_core::__projected_conversions!(wit::Payload::Receipt, |transactions| {
        wit::Source::Lifecycle(transactions)
    });

    pub fn subscription(delivery: Delivery, reach: Reach) -> wit::Subscription {
        wit::Subscription {
            payload: self::delivery(delivery),
            reach: match reach {
                Reach::Every => wit::Reach::Every,
                Reach::Keys(keys) => wit::Reach::Keyed(keys.iter().map(key).collect()),
                Reach::Any => wit::Reach::Any,
            },
        }
    }

    fn key(k: &Key) -> wit::Key {
        match k {
            Key::Sender(a) => wit::Key::Sender(a.to_vec()),
            Key::Receiver(a) => wit::Key::Receiver(a.to_vec()),
            Key::Selector(s) => wit::Key::Selector(s.to_vec()),
            Key::Emitter(a) => wit::Key::Emitter(a.to_vec()),
            Key::Topic(position, t) => wit::Key::Topic((*position, t.to_vec())),
            Key::Watched(field, list) => wit::Key::Watched((watched_field(*field), *list)),
        }
    }

    fn watched_field(field: WatchedField) -> wit::WatchedField {
        match field {
            WatchedField::Sender => wit::WatchedField::Sender,
            WatchedField::Receiver => wit::WatchedField::Receiver,
            WatchedField::Emitter => wit::WatchedField::Emitter,
            WatchedField::Topic(0) => wit::WatchedField::Topic0,
            WatchedField::Topic(1) => wit::WatchedField::Topic1,
            WatchedField::Topic(2) => wit::WatchedField::Topic2,
            WatchedField::Topic(_) => wit::WatchedField::Topic3,
        }
    }

    /// The host's memberships, as the SDK walks them.
    pub fn memberships(m: wit::Memberships) -> Memberships {
        let mut memberships = Memberships::default();
        let fields = m.fields.into_iter().map(|field| match field {
            wit::WatchedField::Sender => WatchedField::Sender,
            wit::WatchedField::Receiver => WatchedField::Receiver,
            wit::WatchedField::Emitter => WatchedField::Emitter,
            wit::WatchedField::Topic0 => WatchedField::Topic(0),
            wit::WatchedField::Topic1 => WatchedField::Topic(1),
            wit::WatchedField::Topic2 => WatchedField::Topic(2),
            wit::WatchedField::Topic3 => WatchedField::Topic(3),
        });
        for ((event, field), list) in m.events.into_iter().zip(fields).zip(m.watchlists) {
            memberships.push(event, field, list);
        }
        memberships
    }
}

/// Makes `$name`, a filter over `$rules`: rules kept outside any contract
/// version with `subscribe(id, params, topic)` answering a
/// [`PayloadChoice`], `unsubscribe(id)`, `reach(id)` and
/// `matches_watched(event, watched, emit)`, reading events as `$view`
/// with the fields `$fields`. Matches go out with the subscription's
/// payload kind.
#[macro_export]
macro_rules! rules_filter {
    ($name:ident, $rules:ty, $view:ident, $fields:expr, $manifest:expr) => {
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
            type Event<'a> = $crate::$view<'a, { $fields }>;

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
            fn matches(
                &self,
                event: &Self::Event<'_>,
                watched: $crate::Watched<'_>,
                out: &mut $crate::Out<'_>,
            ) {
                self.0.matches_watched(event, watched, out)
            }
        }
    };
}

/// Exports a [`Filter`] type as the component's `chainsieve:filter@0.3.0`
/// world. Expands to nothing outside wasm, so the crate also builds
/// natively.
#[macro_export]
macro_rules! export_filter {
    ($filter:ty) => {
        const _: () = assert!(
            <<$filter as $crate::Filter>::Event<'static> as $crate::Event<'static>>::KIND
                .same_kind(<$filter as $crate::Filter>::MANIFEST.source),
            "the filter's view does not read the records of its manifest's source"
        );

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::bindings::chainsieve::filter::types as wit;
            use $crate::Filter as _;

            std::thread_local! {
                static STATE: std::cell::RefCell<$filter> = std::cell::RefCell::new(Default::default());
            }

            struct Component;

            impl $crate::bindings::Guest for Component {
                fn manifest() -> wit::Manifest {
                    $crate::__private::manifest(
                        <$filter as $crate::Filter>::MANIFEST,
                        <<$filter as $crate::Filter>::Event<'static> as $crate::Event<'static>>::FIELDS,
                    )
                }

                fn subscribe(id: u64, params: String) -> Result<wit::Subscription, String> {
                    STATE.with_borrow_mut(|f| {
                        let delivery = f.subscribe(id, &params).map_err(|e| e.to_string())?;
                        Ok($crate::__private::subscription(delivery, f.reach(id)))
                    })
                }

                fn unsubscribe(id: u64) {
                    STATE.with_borrow_mut(|f| f.unsubscribe(id))
                }

                fn match_batch(
                    batch: Vec<u8>,
                    memberships: wit::Memberships,
                ) -> Result<wit::Matches, String> {
                    let memberships = $crate::__private::memberships(memberships);
                    STATE.with_borrow(|f| $crate::match_batch(f, &batch, &memberships))
                        .map($crate::__private::matches)
                        .map_err(|e| e.to_string())
                }
            }

            $crate::bindings::__export_filter_world!(Component with_types_in $crate::bindings);
        };
    };
}
