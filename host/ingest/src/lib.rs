//! The sources of chain data (the embedded devnet, and real nodes through
//! `upstream`), and the canonical chain tracker that turns their blocks
//! into ordered [`ChainEvent`](chainsieve_model::ChainEvent)s.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_config`],
//! [`chainsieve_contracts`], [`chainsieve_model`], [`chainsieve_node`].

pub mod canonical;
pub mod devnet;
pub mod upstream;
