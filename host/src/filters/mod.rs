//! Filter components: the wasmtime engine and the v0.1.0 bindings
//! ([`engine`]) and what an instance may use ([`limits`]), the set of
//! loaded components ([`registry`]), the actor that owns one instance per
//! (chain, topic) and supervises it ([`actor`]) through the [`instance`]
//! traits; [`harness`] runs one component alone, for filter authors and
//! tests. The watcher that swaps components on every chain is the chain's
//! ([`crate::chain::reload`]).

pub mod actor;
pub mod engine;
pub mod harness;
pub mod instance;
pub mod limits;
pub mod registry;
#[cfg(test)]
pub(crate) mod testing;

/// Host bindings for `chainsieve:filter@0.1.0`. A future 0.2.0 gets its own
/// module beside this one; the rest of the host talks to [`engine`]'s
/// version-independent types.
mod v0_1_0 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "filter",
    });
}

pub use actor::{FilterHandle, FilterStatus, SubscribeError};
pub use engine::{FilterComponent, FilterEngine, FilterManifest};
pub use registry::FilterRegistry;
