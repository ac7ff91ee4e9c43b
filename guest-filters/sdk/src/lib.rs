//! The guest SDK for chainsieve filter components.
//!
//! Two ways to write a filter:
//!
//! - a [`Rule`]: one subscription's parameters and the test of an event
//!   against them (`subscribe(params)`, `matches(&event)`, optionally an
//!   address index); the SDK keeps the subscriptions. [`export_rule!`].
//! - a [`Filter`]: the type keeps every subscription itself, indexed as it
//!   likes (the built-ins do), and says which subscriptions an event goes to.
//!   [`export_filter!`].
//!
//! Either becomes a `chainsieve:filter@0.1.0` component when built for
//! `wasm32-wasip2`; built natively the same type is plain Rust, so its rules
//! are unit-tested and benchmarked without a runtime.
//!
//! What every contract version shares comes from `chainsieve-filter-core`,
//! re-exported here:
//! - [`layout`]: the packed batch format the host sends (shared with the host,
//!   which writes it).
//! - [`params`]: parsing helpers whose errors read well as JSON-RPC messages.
//! - [`SubscriptionIndex`]: key → subscriptions, the building block of indexed
//!   matching.
//!
//! This crate binds contract 0.1.0 only: each version's bindings live in a
//! crate of their own (docs/src/architecture.md, Filter contract v0.2).

pub mod rule;

pub use chainsieve_filter_core::*;
pub use rule::{Rule, Rules};

/// An event type a filter can consume: a view over one record of a
/// layout-1 batch.
pub trait Event<'a>: Sized {
    /// Reads every event of a batch of this kind.
    fn all(batch: &Batch<'a>) -> Result<impl Iterator<Item = Self> + 'a, LayoutError>;
}

impl<'a> Event<'a> for TxView<'a> {
    fn all(batch: &Batch<'a>) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        batch.transactions()
    }
}

impl<'a> Event<'a> for HeadView<'a> {
    fn all(batch: &Batch<'a>) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        batch.heads()
    }
}

impl<'a> Event<'a> for LogView<'a> {
    fn all(batch: &Batch<'a>) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        batch.logs()
    }
}

/// Describes a component to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The `eth_subscribe` event type served.
    pub topic: &'static str,
    pub source: Source,
    /// The payload a subscription gets unless `subscribe` picks another.
    pub payload: Payload,
}

/// The matching logic of one topic. One value lives in each component
/// instance and holds every subscription of that topic on one chain.
pub trait Filter: Default {
    const MANIFEST: Manifest;
    /// The view the filter matches on: [`TxView`], [`HeadView`] or [`LogView`].
    type Event<'a>: Event<'a>;

    /// Adds a subscription; `params` is the JSON array after the topic name.
    /// Returns the payload this subscription receives.
    fn subscribe(&mut self, id: SubscriptionId, params: &str) -> Result<Payload, ParamsError>;

    /// Removes a subscription; unknown ids are ignored.
    fn unsubscribe(&mut self, id: SubscriptionId);

    /// Calls `emit` once for every subscription `event` goes to.
    fn matches(&self, event: &Self::Event<'_>, emit: &mut impl FnMut(SubscriptionId));
}

/// Runs `filter` over a packed batch: the body of `match-batch`, and what
/// native tests and benchmarks call to exercise exactly the component's path.
pub fn match_batch<F: Filter>(filter: &F, bytes: &[u8]) -> Result<Matches, LayoutError> {
    let batch = Batch::parse(bytes)?;
    if batch.source() != F::MANIFEST.source {
        return Err(LayoutError::WrongSource {
            expected: F::MANIFEST.source,
            found: batch.source(),
        });
    }
    let mut out = Matches::default();
    for (index, event) in <F::Event<'_> as Event<'_>>::all(&batch)?.enumerate() {
        filter.matches(&event, &mut |id| {
            out.events.push(index as u32);
            out.subscriptions.push(id);
        });
    }
    Ok(out)
}

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/v0.1.0",
        world: "filter",
        pub_export_macro: true,
        export_macro_name: "__export_filter_world",
        default_bindings_module: "chainsieve_filter_sdk::bindings",
    });
}

/// Conversions used by [`export_filter!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    use super::bindings::chainsieve::filter::types as wit;
    use super::{Manifest, Matches, Payload, Source};

    pub fn manifest(m: Manifest) -> wit::Manifest {
        wit::Manifest {
            topic: m.topic.to_string(),
            source: match m.source {
                Source::PendingTransactions => wit::Source::PendingTransactions,
                Source::MinedTransactions => wit::Source::MinedTransactions,
                Source::Heads => wit::Source::Heads,
                Source::Logs => wit::Source::Logs,
                Source::Lifecycle => {
                    panic!(
                        "contract 0.1 has no lifecycle source: build the filter for contract 0.3"
                    )
                }
            },
            payload: payload(m.payload),
        }
    }

    pub fn payload(p: Payload) -> wit::Payload {
        match p {
            Payload::Hash => wit::Payload::Hash,
            Payload::Full => wit::Payload::Full,
            Payload::FullBlockvision => wit::Payload::FullBlockvision,
            Payload::Receipt => {
                panic!("contract 0.1 has no receipt payload: build the filter for contract 0.3")
            }
        }
    }

    pub fn matches(m: Matches) -> wit::Matches {
        wit::Matches {
            events: m.events,
            subscriptions: m.subscriptions,
        }
    }
}

/// Exports a [`Filter`] type as the component's `chainsieve:filter` world.
/// Expands to nothing outside wasm, so the crate also builds natively.
#[macro_export]
macro_rules! export_filter {
    ($filter:ty) => {
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
                    $crate::__private::manifest(<$filter as $crate::Filter>::MANIFEST)
                }

                fn subscribe(id: u64, params: String) -> Result<wit::Payload, String> {
                    STATE.with_borrow_mut(|f| f.subscribe(id, &params))
                        .map($crate::__private::payload)
                        .map_err(|e| e.to_string())
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
