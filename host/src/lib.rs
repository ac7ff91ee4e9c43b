//! chainsieve: Ethereum, BNB Chain and Polygon events as JSON-RPC 2.0, with
//! filter logic in WebAssembly components.
//!
//! This crate is the server: its wiring and its upper floors. The floors
//! below are crates of their own under `host/`, each using only the ones
//! below it (docs/src/architecture.md, Crates); data flows one way, top to
//! bottom (docs/src/architecture.md, Data flow). Inside each crate, a test
//! (`host/tests/integration/layering.rs`) fails on any import cycle between
//! its files that leaves a module's own files, or between its modules.
//!
//! This crate's module:
//!
//! - [`app`] — the wiring: config in, filters loaded, chains started, the
//!   HTTP state built; shutdown passed down.
//!
//! The crates below it, top to bottom:
//!
//! - [`chainsieve_http`] — axum routes and keys, one task pair per
//!   WebSocket, `/admin/filters` and `/admin/keys`, `/healthz`, `/readyz`,
//!   `/metrics`, connections per key.
//! - [`chainsieve_rpc`] — the JSON-RPC envelope, errors and methods for
//!   both transports; live subscriptions by public id; requests per second
//!   per key; on a node chain, what it does not answer goes to the node, on
//!   a devnet chain what a wallet calls answers from the devnet's ledger.
//! - [`chainsieve_chain`] — per chain, the pipeline (any ordered stream of
//!   source events → canonical tracker → stream batches → filter actors),
//!   its wiring for each role (all, ingest, edge) and the hot swap of
//!   filter components (reload).
//! - [`chainsieve_filters`] — the wasmtime engine, one bindings module per
//!   filter contract version (0.1.0, 0.2.0), the loaded components, each
//!   subscription's reach (what a 0.2 component is asked about), and the
//!   actors that call them per batch and deliver the matches; its `batch`
//!   splits a log step into per-stream batches, each event with its cursor.
//! - [`chainsieve_history`] — a `fromBlock` older than the log, read for
//!   the subscription's actor until the log holds the rest: from the
//!   chain's nodes, a devnet chain's archive, or an edge's stream on the
//!   bus.
//! - [`chainsieve_uploads`] — where uploaded filter components are kept:
//!   the embedded database, or the bus's object store.
//! - [`chainsieve_webhook`] — subscriptions delivered by HTTP POST:
//!   definitions and cursors kept in the embedded database, one worker per
//!   webhook, signed deliveries retried in order; the RPC side opens their
//!   subscriptions.
//! - [`chainsieve_watchlists`] — named address sets a key edits while
//!   the server runs: one index of every watched address for matching,
//!   each edit numbered and committed whole to the embedded database.
//! - [`chainsieve_fanout`] — per-connection bounded queues and the
//!   notification frame, built around a payload serialized once per event.
//! - [`chainsieve_keys`] — API keys and their plans: the config's and those
//!   made by the admin API, stored as digests and followed as they change;
//!   places per key (connections, history streams).
//! - [`chainsieve_usage`] — what each key used: counted by its meter on the
//!   hot path, summed into hourly buckets by the ledger.
//! - [`chainsieve_price`] — `token_price`'s index of DEX pools and its
//!   store, and what it lacks read from the nodes.
//! - [`chainsieve_ingest`] — sources (the embedded devnet, nodes through
//!   `upstream`) produce blocks and pending transactions; `canonical`
//!   orders them (reorgs become removals then additions).
//! - [`chainsieve_eventlog`] — each chain's event log: every canonical
//!   change as a step at a position, over a bounded window that resuming
//!   subscriptions replay; cursors; its store.
//! - [`chainsieve_node`] — a node's JSON-RPC over WebSocket, for the node
//!   source, the price index, history and the methods forwarded to the
//!   node.
//! - [`chainsieve_bus`] — the roles' NATS JetStream bus: an ingest
//!   publishes each chain's log steps, an edge follows them into its own
//!   pipeline; the streams, buckets, object store and leases the features'
//!   bus backends (in their own crates) keep their state in.
//! - [`chainsieve_runtime`] — the supervisor every long-lived task is
//!   spawned on, the bounded queues between tasks watched for their depth,
//!   the metric handles, the clock and the embedded database's files.
//! - [`chainsieve_config`] — the TOML configuration and its defaults.
//! - [`chainsieve_contracts`] — the Solidity ABI (ERC-20, Uniswap V2/V3)
//!   and the well-known tokens and DEX factories of each chain.
//! - [`chainsieve_model`] — the chain data model everyone reads (blocks,
//!   transactions, logs, the events between the layers) and its wire
//!   shapes.

#![deny(unsafe_code)]

pub mod app;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use chainsieve_config::Config;
pub use chainsieve_http::AppState;
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
    chainsieve_http::serve(listener, state).await
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
        if let Err(error) = chainsieve_http::serve(listener, serving).await {
            tracing::error!(error = format!("{error:#}"), "server stopped");
        }
    });
    Ok(state)
}
