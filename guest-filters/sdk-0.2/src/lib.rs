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

pub use chainsieve_filter_core::projection::{
    ProjectedBatch, ProjectedWriter, log_fields, tx_fields,
};
pub use chainsieve_filter_core::{
    Broadcast, Delivery, Emit, HeadView, Key, KeyMap, KeySet, LayoutError, Matches, ParamsError,
    Payload, PayloadChoice, Reach, RuleSet, Source, SubscriptionId, SubscriptionIndex, keys,
    layout, params, projection, serde_json,
};
pub use transform::{Transform, Transforms};

use chainsieve_filter_core::projection::{ProjectedLog, ProjectedTx, source_of};

/// A transaction of a batch carrying the fields `F` (bits of
/// [`tx_fields`]); the 0.1 SDK's `TxView` methods.
pub type TxView<'a, const F: u32> = ProjectedTx<'a, F>;

/// A log of a batch carrying the fields `F` (bits of [`log_fields`]); the
/// 0.1 SDK's `LogView` methods.
pub type LogView<'a, const F: u32> = ProjectedLog<'a, F>;

/// Describes a component to the host; the fields it reads come from its
/// [`Filter::Event`] type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The `eth_subscribe` event type served.
    pub topic: &'static str,
    pub source: Source,
    /// What a subscription gets unless `subscribe` says otherwise.
    pub delivery: Delivery,
}

/// An event type a filter can consume: a view over one record of a
/// layout-2 batch, and the fields it reads.
pub trait Event<'a>: Sized {
    /// A stream whose batches hold the records this view reads (any of
    /// the same kind will do: pending and mined transactions).
    const KIND: Source;
    /// The fields read: what the manifest declares and batches carry.
    const FIELDS: u32;
    /// Reads every event of a batch of this kind, refusing one that
    /// carries other fields.
    fn all(bytes: &'a [u8]) -> Result<impl Iterator<Item = Self> + 'a, LayoutError>;
}

impl<'a, const F: u32> Event<'a> for TxView<'a, F> {
    const KIND: Source = Source::MinedTransactions;
    const FIELDS: u32 = F;
    fn all(bytes: &'a [u8]) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        ProjectedBatch::<F>::parse(bytes)?.transactions()
    }
}

impl<'a> Event<'a> for HeadView<'a> {
    const KIND: Source = Source::Heads;
    const FIELDS: u32 = 0;
    fn all(bytes: &'a [u8]) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        ProjectedBatch::<0>::parse(bytes)?.heads()
    }
}

impl<'a, const F: u32> Event<'a> for LogView<'a, F> {
    const KIND: Source = Source::Logs;
    const FIELDS: u32 = F;
    fn all(bytes: &'a [u8]) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        ProjectedBatch::<F>::parse(bytes)?.logs()
    }
}

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

/// A payload a filter wrote for the event at hand; send it to any number
/// of subscriptions, it crosses to the host once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written(u32);

/// Where a filter sends one event's matches.
#[derive(Debug)]
pub struct Out<'m> {
    matches: &'m mut Matches,
    event: u32,
    /// Reused for every payload written through [`Out::write_with`].
    scratch: &'m mut String,
}

impl Out<'_> {
    /// Sends the event to `id` with the subscription's payload kind.
    pub fn send(&mut self, id: SubscriptionId) {
        self.matches.push(self.event, id);
    }

    /// Keeps `json` (one JSON value) as a payload of this event.
    pub fn write(&mut self, json: &str) -> Written {
        Written(self.matches.write_payload(json.as_bytes()))
    }

    /// Keeps the payload `write` puts in the (emptied) buffer it is given.
    pub fn write_with(&mut self, write: impl FnOnce(&mut String)) -> Written {
        self.scratch.clear();
        write(self.scratch);
        Written(self.matches.write_payload(self.scratch.as_bytes()))
    }

    /// Sends the event to `id` with a payload written for it.
    pub fn send_written(&mut self, id: SubscriptionId, payload: Written) {
        self.matches.push_written(self.event, id, payload.0);
    }
}

/// Rules (version-independent, `chainsieve-filter-core`) send through an
/// `Out` directly; a list goes in one copy.
impl Emit for Out<'_> {
    #[inline(always)]
    fn emit(&mut self, id: SubscriptionId) {
        self.send(id);
    }

    fn emit_all(&mut self, ids: &[SubscriptionId]) {
        self.matches.push_all(self.event, ids);
    }
}

/// Runs `filter` over a layout-2 batch: the body of `match-batch`, and what
/// native tests and benchmarks call to exercise exactly the component's
/// path.
pub fn match_batch<F: Filter>(filter: &F, bytes: &[u8]) -> Result<Matches, LayoutError> {
    let source = source_of(bytes)?;
    if source != F::MANIFEST.source {
        return Err(LayoutError::WrongSource {
            expected: F::MANIFEST.source,
            found: source,
        });
    }
    let mut matches = Matches::default();
    let mut scratch = String::new();
    for (index, event) in <F::Event<'_> as Event<'_>>::all(bytes)?.enumerate() {
        let mut out = Out {
            matches: &mut matches,
            event: index as u32,
            scratch: &mut scratch,
        };
        filter.matches(&event, &mut out);
    }
    Ok(matches)
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

    pub fn manifest(m: Manifest, fields: u32) -> wit::Manifest {
        // The WIT flags' bits are the projection's (bit i, the i-th flag).
        let transactions =
            wit::TransactionFields::from_bits_truncate(fields.try_into().unwrap_or(u16::MAX));
        wit::Manifest {
            topic: m.topic.to_string(),
            source: match m.source {
                Source::PendingTransactions => wit::Source::PendingTransactions(transactions),
                Source::MinedTransactions => wit::Source::MinedTransactions(transactions),
                Source::Heads => wit::Source::Heads,
                Source::Logs => wit::Source::Logs(wit::LogFields::from_bits_truncate(
                    fields.try_into().unwrap_or(u8::MAX),
                )),
            },
            payload: delivery(m.delivery),
        }
    }

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

    pub fn delivery(d: Delivery) -> wit::Payload {
        match d {
            Delivery::Kind(Payload::Hash) => wit::Payload::Hash,
            Delivery::Kind(Payload::Full) => wit::Payload::Full,
            Delivery::Kind(Payload::FullBlockvision) => wit::Payload::FullBlockvision,
            Delivery::Written => wit::Payload::Written,
        }
    }

    pub fn matches(m: Matches) -> wit::Matches {
        wit::Matches {
            events: m.events,
            subscriptions: m.subscriptions,
            payloads: m.payloads,
            payload_bytes: m.payload_bytes,
            payload_ends: m.payload_ends,
        }
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
