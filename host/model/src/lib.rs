//! The chain data model every source produces and every consumer reads:
//! parsed once at ingestion, shared behind `Arc`s, serialized to the wire
//! shapes docs/src/api.md fixes (Wire shapes: geth's shapes, lowercase
//! addresses, canonical hex quantities).
//!
//! - [`transaction`]: a transaction of any type, every field a node gives,
//!   and its two RPC shapes (geth's, BlockVision's).
//! - [`block`]: a block, its header, logs and lookup members.
//! - [`events`]: what a source produces, the changes the canonical tracker
//!   orders it into, and one event of one stream.
//! - [`lifecycle`]: the turns of a transaction's life the lifecycle topic
//!   tells.
//! - [`verify`]: a block checked against its own header (hashes, the
//!   transactions root, the logs bloom) before it enters the log.
//! - [`wire`]: the wire shapes read back into the model (a node's JSON, the
//!   harness's event files).
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_filter_core`].

pub mod block;
pub mod events;
pub mod lifecycle;
pub mod transaction;
pub mod verify;
pub mod wire;

pub use block::Block;
pub use events::{ChainEvent, FinalMark, Grade, SourceEvent, SourceState, StreamEvent};
pub use transaction::{
    BlobFields, Fees, OtherFields, SetCodeAuthorization, Transaction, TxPosition, TxShape,
    TxSignature,
};
