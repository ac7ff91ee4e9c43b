//! Filter components: the wasmtime engine ([`engine`]) and the
//! compilations it keeps in a data directory for the next start
//! (`compiled`), one bindings
//! module per contract version translating into the version-independent
//! [`contract`] types, what an instance may use ([`limits`]), which events
//! each subscription can match, so a 0.2 component is asked about those
//! alone ([`reach`]), the set of
//! loaded components ([`registry`]), the actor that owns one instance per
//! (chain, topic) and supervises it ([`actor`]) through the [`instance`]
//! traits; [`harness`] runs one component alone, for filter authors and
//! tests. The watcher that swaps components on every chain is the chain's
//! (`reload`, in `chainsieve-chain`).
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_config`],
//! [`chainsieve_eventlog`], [`chainsieve_fanout`], [`chainsieve_filter_core`],
//! [`chainsieve_history`], [`chainsieve_model`], [`chainsieve_runtime`],
//! [`chainsieve_watchlists`].

pub mod actor;
pub mod batch;
mod compiled;
pub mod contract;
pub mod engine;
pub mod harness;
pub mod instance;
pub mod limits;
pub mod reach;
pub mod registry;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;

/// The conversions of every contract version from 0.2 on, whose WIT types
/// of the same names have the same shape: expanded inside each version's
/// bindings module (with its `wit` types in scope), beside the `key`
/// conversion each writes itself, as keys differ between versions.
macro_rules! projected_conversions {
    // The payloads the version adds to 0.2's, each with its delivery; the
    // sources it adds, each with its stream (of `fields`, the flags).
    (
        payloads: [$($payload:pat => $delivery:expr),* $(,)?],
        sources: [$($source:pat => $stream:expr),* $(,)?] $(,)?
    ) => {
        pub(super) fn manifest(m: wit::Manifest) -> FilterManifest {
            // A `flags` of at most 32 flags is one word, bit i the i-th
            // flag: the bits `chainsieve_filter_core::projection` numbers
            // fields with.
            let (source, fields) = match m.source {
                wit::Source::PendingTransactions(fields) => {
                    (Source::PendingTransactions, fields.as_array()[0])
                }
                wit::Source::MinedTransactions(fields) => {
                    (Source::MinedTransactions, fields.as_array()[0])
                }
                wit::Source::Heads => (Source::Heads, 0),
                wit::Source::Logs(fields) => (Source::Logs, fields.as_array()[0]),
                $($source => $stream,)*
            };
            FilterManifest {
                topic: m.topic,
                source,
                delivery: delivery(m.payload),
                layout: Layout::Projected(fields & projection::all_fields(source)),
            }
        }

        /// What a subscription receives and can match, as the component
        /// answered it; a key of the wrong length is a bad answer.
        pub(super) fn subscription(s: wit::Subscription) -> anyhow::Result<(Delivery, Reach)> {
            let reach = match s.reach {
                wit::Reach::Every => Reach::Every,
                wit::Reach::Any => Reach::Any,
                wit::Reach::Keyed(keys) => {
                    Reach::Keys(keys.into_iter().map(key).collect::<Result<_, _>>()?)
                }
            };
            Ok((delivery(s.payload), reach))
        }

        /// A key's bytes, of the length its field has.
        fn sized<const N: usize>(what: &str, bytes: Vec<u8>) -> anyhow::Result<[u8; N]> {
            match <[u8; N]>::try_from(bytes) {
                Ok(value) => Ok(value),
                Err(bytes) => anyhow::bail!(
                    "the filter answered a {what} key of {} bytes ({N} expected)",
                    bytes.len()
                ),
            }
        }

        pub(super) fn delivery(p: wit::Payload) -> Delivery {
            match p {
                wit::Payload::Hash => Delivery::Kind(Payload::Hash),
                wit::Payload::Full => Delivery::Kind(Payload::Full),
                wit::Payload::FullBlockvision => Delivery::Kind(Payload::FullBlockvision),
                wit::Payload::Written => Delivery::Written,
                $($payload => $delivery,)*
            }
        }

        pub(super) fn matches(m: wit::Matches) -> Matches {
            Matches {
                events: m.events,
                subscriptions: m.subscriptions,
                payloads: m.payloads,
                payload_bytes: m.payload_bytes,
                payload_ends: m.payload_ends,
            }
        }
    };
}

// One bindings module per contract version; the rest of the host talks to
// the version-independent types of `contract`.
mod v0_1_0;
mod v0_2_0;
mod v0_3_0;

pub use actor::{FilterHandle, FilterStatus, SubscribeError};
pub use contract::{Delivery, FilterManifest, Layout};
pub use engine::{FilterComponent, FilterEngine};
pub use registry::FilterRegistry;
