//! What each API key used (docs/src/operations.md, Usage): counted on the
//! hot path by each key's [`Meter`] without a lock shared across
//! connections, summed into hourly buckets by the [`ledger`] every
//! `[usage] flush_secs`, and kept by a [`ledger::UsageStore`]: the
//! embedded database on a server of role `all`, the bus's KV bucket on the
//! edges (each edge's buckets apart, summed when read).
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_bus`],
//! [`chainsieve_config`], [`chainsieve_runtime`].

pub mod bus;
mod counts;
pub mod ledger;
pub mod meter;

pub use counts::{Counts, HOUR, hour_of};
pub use ledger::Ledger;
pub use meter::Meter;
