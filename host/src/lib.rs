//! chainsieve: Ethereum, BNB Chain and Polygon events as JSON-RPC 2.0, with
//! filter logic in WebAssembly components.
//!
//! Data flows one way, top to bottom (docs/src/architecture.md, Data flow); no
//! module reaches up to the layer that wires it, and a test
//! (`tests/layering.rs`) fails on any import cycle between the files of
//! this crate that leaves a module's own files:
//!
//! - [`app`] — the wiring: config in, filters loaded, chains started, the
//!   HTTP state built; shutdown passed down.
//! - [`http`] — axum routes and keys, one task pair per WebSocket
//!   ([`http::session`]), `/admin/filters` and `/admin/keys`,
//!   `/healthz`, `/readyz`, `/metrics`, connections per key.
//! - [`rpc`] — the JSON-RPC envelope, errors and methods for both
//!   transports; live subscriptions by public id; requests per second per
//!   key; on a node chain, what it does not answer goes to the node, on a
//!   devnet chain what a wallet calls answers from the devnet's ledger.
//! - [`chain`] — per chain, the [`chain::pipeline`] (any ordered stream of
//!   source events → canonical tracker → stream batches → filter actors),
//!   its wiring for each role ([`chain::all`], [`chain::ingest`],
//!   [`chain::edge`]) and the hot swap of filter components
//!   ([`chain::reload`]).
//! - [`filters`] — the wasmtime engine, one bindings module per filter
//!   contract version (0.1.0, 0.2.0), the loaded components, each
//!   subscription's reach (what a 0.2 component is asked about), and the
//!   actors that call them per batch and deliver the matches;
//!   [`filters::batch`] splits a log step into per-stream batches, each
//!   event with its cursor.
//! - [`fanout`] — per-connection bounded queues and the notification frame,
//!   built around a payload serialized once per event.
//! - [`ingest`] — sources (the embedded [`ingest::devnet`], nodes through
//!   [`ingest::upstream`]) produce blocks and pending transactions;
//!   [`ingest::canonical`] orders them (reorgs become removals then
//!   additions).
//! - [`webhook`] — subscriptions delivered by HTTP POST: definitions and
//!   cursors kept in the embedded database, one worker per webhook, signed
//!   deliveries retried in order; the RPC side opens their subscriptions.
//! - [`history`] — a `fromBlock` older than the log, read for the
//!   subscription's actor until the log holds the rest: from the chain's
//!   nodes, a devnet chain's archive, or an edge's stream on the bus.
//! - [`node`] — a node's JSON-RPC over WebSocket, for the node source, the
//!   price index, history and the methods forwarded to the node.
//! - [`bus`] — the roles' NATS JetStream bus: an ingest publishes each
//!   chain's log steps and its price index's writes, an edge follows both
//!   into its own pipeline and price store.
//! - [`eventlog`] — each chain's event log: every canonical change as a
//!   step at a position, over a bounded window that resuming subscriptions
//!   replay; cursors; its store.
//! - [`price`] — `token_price`'s index of DEX pools and its store, and
//!   what it lacks read from the nodes.
//! - [`contracts`] — the Solidity ABI (ERC-20, Uniswap V2/V3) and the
//!   well-known tokens and DEX factories of each chain, below both the
//!   devnet and the price index.
//! - [`model`] — the chain data model everyone reads (blocks,
//!   transactions, logs, the events between the layers) and its wire
//!   shapes.
//! - [`keys`] — API keys and their plans: the config's and those made by
//!   the admin API, stored as digests (the embedded database, or the
//!   bus's KV bucket on the edges) and followed as they change.
//! - [`usage`] — what each key used: counted by its meter on the hot path,
//!   summed into hourly buckets (the embedded database, or the bus's KV
//!   bucket) by the ledger.
//! - [`queues`] — the bounded queues between long-lived tasks, watched
//!   for their depth.
//! - [`tasks`] — the supervisor every long-lived task is spawned on: run
//!   again with backoff, its part reported not ready, or the server
//!   stopped with the reason, as the task's kind says.
//! - [`config`] — the TOML configuration and its defaults; [`metrics`] — the
//!   metric handles the pipeline counts with; [`per_key`] — places per API
//!   key (connections, history streams); [`clock`] — Unix seconds;
//!   [`embedded`] — the embedded database's files.

#![deny(unsafe_code)]

pub mod app;
pub mod bus;
pub mod chain;
pub mod clock;
pub mod config;
pub mod contracts;
pub mod embedded;
pub mod eventlog;
pub mod fanout;
pub mod filters;
pub mod history;
pub mod http;
pub mod ingest;
pub mod keys;
pub mod metrics;
pub mod model;
pub mod node;
pub mod per_key;
pub mod price;
pub mod queues;
pub mod rpc;
pub mod tasks;
pub mod usage;
pub mod webhook;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::Config;
pub use http::AppState;
/// The allocator the `chainsieve` binary runs on, for every binary that
/// serves as it does (the benchmarks' servers):
/// `#[global_allocator] static ALLOCATOR: chainsieve::Allocator = chainsieve::Allocator;`
pub use mimalloc::MiMalloc as Allocator;

/// Runs a server on `listener` until `shutdown` is cancelled.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let state = app::start(&config, shutdown).await?;
    http::serve(listener, state).await
}

/// Starts a server on `listener` in the background and returns its state
/// (tests and embedders use it to inspect what is running).
pub async fn spawn(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> anyhow::Result<Arc<AppState>> {
    let state = app::start(&config, shutdown).await?;
    let serving = state.clone();
    tokio::spawn(async move {
        if let Err(error) = http::serve(listener, serving).await {
            tracing::error!(error = format!("{error:#}"), "server stopped");
        }
    });
    Ok(state)
}
