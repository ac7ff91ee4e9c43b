//! The bus between roles (docs/architecture.md, The bus): an `ingest`
//! publishes each chain's log steps to a NATS JetStream stream, an `edge`
//! consumes them into its own log. A step's position is its message's
//! stream sequence, so cursors mean the same on every edge.

pub mod codec;
