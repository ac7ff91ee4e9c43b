//! The guest SDK for `chainsieve:filter@0.2.0` components: filters that
//! read only the fields they declare, and may write their notifications'
//! payloads themselves (docs/src/architecture.md, Filter contract v0.2).
//!
//! Two ways to write one, as with the 0.1 SDK:
//!
//! - a [`Transform`]: one subscription's parameters, the test of an event
//!   against them, and a function that writes a matching event's payload
//!   (once per event, however many subscriptions it goes to); the SDK keeps
//!   the subscriptions. [`export_transform!`].
//! - a [`Filter`]: the type keeps every subscription itself and sends each
//!   event through an [`Out`], with a written payload or the subscription's
//!   payload kind. [`export_filter!`].
//!
//! ```
//! use chainsieve_filter_sdk_0_2::decode::{decimal, erc20_transfer, hex_address};
//! use chainsieve_filter_sdk_0_2::{log_fields, params, LogView, ParamsError, Source, Transform, export_transform};
//!
//! const READ: u32 = log_fields::ADDRESS | log_fields::TOPICS | log_fields::DATA;
//!
//! struct Transfers;
//!
//! impl Transform for Transfers {
//!     const TOPIC: &'static str = "transfers";
//!     const SOURCE: Source = Source::Logs;
//!     type Event<'a> = LogView<'a, READ>;
//!
//!     fn subscribe(params: &str) -> Result<Self, ParamsError> {
//!         params::at_most(&params::array(params)?, 0, "transfers")?;
//!         Ok(Self)
//!     }
//!
//!     fn matches(&self, log: &LogView<'_, READ>) -> bool {
//!         erc20_transfer(log).is_some()
//!     }
//!
//!     fn write(log: &LogView<'_, READ>, json: &mut String) {
//!         if let Some(t) = erc20_transfer(log) {
//!             json.push_str(&format!(r#"{{"token":"{}","amount":"{}"}}"#, hex_address(&t.token), decimal(&t.amount)));
//!         }
//!     }
//! }
//!
//! export_transform!(Transfers);
//! ```
//!
//! The view a filter reads says which fields it reads: [`TxView`] and
//! [`LogView`] take the field bits ([`tx_fields`], [`log_fields`]) as a
//! parameter, the manifest declares exactly those, the host's batches
//! carry only those, and reading any other field does not compile. The
//! views' methods are the 0.1 SDK's.
//!
//! [`decode`] reads ERC-20 transfers and Uniswap V2/V3 swaps, with amounts
//! as decimal strings. Built natively the same types are plain Rust, so
//! filters are unit-tested without a runtime ([`match_batch`]).
//!
//! This crate binds contract 0.2.0 only: each version's bindings live in a
//! crate of their own (the 0.1 one is `chainsieve-filter-sdk`).

pub mod decode;
pub mod transform;

pub use chainsieve_filter_core::component::{
    Event, LogView, Manifest, Out, TxView, Written, each_event,
};
pub use chainsieve_filter_core::projection::{
    ProjectedBatch, ProjectedWriter, log_fields, tx_fields,
};
pub use chainsieve_filter_core::{
    Broadcast, Delivery, Emit, HeadView, Key, KeyMap, KeySet, LayoutError, Matches, ParamsError,
    Payload, PayloadChoice, Reach, RuleSet, Source, SubscriptionId, SubscriptionIndex, keys,
    layout, params, projection, serde_json,
};
pub use transform::{Transform, Transforms};

/// The matching logic of one topic. One value lives in each component
/// instance and holds every subscription of that topic on one chain.
pub trait Filter: Default {
    const MANIFEST: Manifest;
    /// The view the filter matches on, naming the fields it reads.
    type Event<'a>: Event<'a>;

    /// Adds a subscription; `params` is the JSON array after the topic name.
    /// Returns what this subscription receives.
    fn subscribe(&mut self, id: SubscriptionId, params: &str) -> Result<Delivery, ParamsError>;

    /// Removes a subscription; unknown ids are ignored.
    fn unsubscribe(&mut self, id: SubscriptionId);

    /// Which events subscription `id` (just accepted) can match: the host
    /// asks about those alone, and delivers [`Reach::Every`] itself. It
    /// must never leave out an event [`Filter::matches`] would send to
    /// `id`. By default [`Reach::Any`]: asked about every event.
    fn reach(&self, _id: SubscriptionId) -> Reach {
        Reach::Any
    }

    /// Sends `event` through `out` to every subscription it goes to.
    fn matches(&self, event: &Self::Event<'_>, out: &mut Out<'_>);
}

/// Runs `filter` over a layout-2 batch: the body of `match-batch`, and what
/// native tests and benchmarks call to exercise exactly the component's
/// path.
pub fn match_batch<F: Filter>(filter: &F, bytes: &[u8]) -> Result<Matches, LayoutError> {
    each_event::<F::Event<'_>>(bytes, F::MANIFEST.source, |_, event, out| {
        filter.matches(event, out)
    })
}

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/v0.2.0",
        world: "filter",
        pub_export_macro: true,
        export_macro_name: "__export_filter_world",
        default_bindings_module: "chainsieve_filter_sdk_0_2::bindings",
    });
}

/// Conversions used by [`export_filter!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    use super::bindings::chainsieve::filter::types as wit;
    use super::{Delivery, Key, Manifest, Matches, Payload, Reach, Source};

    chainsieve_filter_core::__projected_conversions!(
        panic!("contract 0.2 has no receipt payload: build the filter for contract 0.3"),
        |_transactions| panic!(
            "contract 0.2 has no lifecycle source: build the filter for contract 0.3"
        )
    );

    pub fn subscription(delivery: Delivery, reach: Reach) -> wit::Subscription {
        wit::Subscription {
            payload: self::delivery(delivery),
            reach: match reach {
                Reach::Every => wit::Reach::Every,
                // A 0.2 component is never given a watchlist (the host
                // refuses them before it subscribes); were a rule to name
                // one, the component is asked about every event.
                Reach::Keys(keys) => keys
                    .iter()
                    .map(key)
                    .collect::<Option<_>>()
                    .map_or(wit::Reach::Any, wit::Reach::Keyed),
                Reach::Any => wit::Reach::Any,
            },
        }
    }

    /// The key as 0.2 says it; `None` for one it cannot (a watchlist's).
    fn key(k: &Key) -> Option<wit::Key> {
        Some(match k {
            Key::Sender(a) => wit::Key::Sender(a.to_vec()),
            Key::Receiver(a) => wit::Key::Receiver(a.to_vec()),
            Key::Selector(s) => wit::Key::Selector(s.to_vec()),
            Key::Emitter(a) => wit::Key::Emitter(a.to_vec()),
            Key::Topic(position, t) => wit::Key::Topic((*position, t.to_vec())),
            Key::Watched(..) => return None,
        })
    }
}

/// Exports a [`Filter`] type as the component's `chainsieve:filter@0.2.0`
/// world. Expands to nothing outside wasm, so the crate also builds
/// natively; a view that does not read the manifest's source fails to
/// compile.
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

                fn match_batch(batch: Vec<u8>) -> Result<wit::Matches, String> {
                    STATE.with_borrow(|f| $crate::match_batch(f, &batch))
                        .map($crate::__private::matches)
                        .map_err(|e| e.to_string())
                }
            }

            $crate::bindings::__export_filter_world!(Component with_types_in $crate::bindings);
        };
    };
}
