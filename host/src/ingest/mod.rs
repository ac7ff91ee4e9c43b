//! The sources of chain data (the embedded devnet, and real nodes through
//! `upstream`), and the canonical chain tracker that turns their blocks
//! into ordered [`ChainEvent`](crate::model::ChainEvent)s.

pub mod canonical;
pub mod devnet;
pub mod upstream;
