//! Everything upstream of the filters: the chain data model, the sources that
//! produce it (the embedded devnet, and real nodes through `upstream`), and the
//! canonical chain tracker that turns blocks into ordered [`ChainEvent`]s.

pub mod canonical;
pub mod devnet;
pub mod events;
pub mod model;
pub mod upstream;

pub use events::{ChainEvent, SourceEvent, StreamEvent};
