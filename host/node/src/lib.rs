//! A node's JSON-RPC over WebSocket, for every part that asks a node
//! something: the node source of ingest, the price index's calls and
//! backfill, and the methods forwarded to the node.
//!
//! - [`client`]: the JSON-RPC client over one WebSocket (calls, batches,
//!   notifications).
//! - [`connection`]: a connection of its own for requests, opened on first
//!   use, reopened after a failure, multiplexed by id.
//! - [`pool`]: a chain's nodes, their health and which one a call goes to.
//! - [`health`]: one node's health, as its chain judges it.
//! - [`calls`]: read-only contract calls, as the price index makes them,
//!   whoever answers them.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_config`],
//! [`chainsieve_model`], [`chainsieve_runtime`].

pub mod blocks;
pub mod calls;
pub mod client;
pub mod connection;
pub mod health;
pub mod pool;

pub use calls::ChainCalls;
pub use client::{Call, NodeClient, NodeError, Notification, decode, single};
pub use connection::NodeConnection;
pub use health::{Health, NodeState, Rules};
pub use pool::{At, NodePool, PoolNode};
