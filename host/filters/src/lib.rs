//! Filter components: the wasmtime engine ([`engine`]), one bindings
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
pub mod contract;
pub mod engine;
pub mod harness;
pub mod instance;
pub mod limits;
pub mod reach;
pub mod registry;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;

// One bindings module per contract version; the rest of the host talks to
// the version-independent types of `contract`.
mod v0_1_0;
mod v0_2_0;
mod v0_3_0;

pub use actor::{FilterHandle, FilterStatus, SubscribeError};
pub use contract::{Delivery, FilterManifest, Layout};
pub use engine::{FilterComponent, FilterEngine};
pub use registry::FilterRegistry;
