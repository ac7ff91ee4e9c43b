//! chainsieve: Ethereum, BNB Chain and Polygon events as JSON-RPC 2.0, with
//! filter logic in WebAssembly components.
//!
//! Data flows one way:
//!
//! - [`ingest`] — sources (the embedded [`ingest::devnet`], nodes through [`ingest::upstream`])
//!   produce blocks and pending transactions; [`ingest::canonical`] orders
//!   them (reorgs become removals then additions) and [`ingest::events`]
//!   splits them into per-stream batches.
//! - [`chain`] — per chain, the hub that runs that pipeline and owns one
//!   filter actor per topic.
//! - [`filters`] — the wasmtime engine, the loaded components, and the actors
//!   that call them per batch and deliver the matches.
//! - [`fanout`] — per-connection bounded queues and the notification frame,
//!   built around a payload serialized once per event.
//! - [`server`], [`session`], [`rpc`] — axum routes and keys, one task pair
//!   per WebSocket, and the JSON-RPC envelope and methods.
//! - [`subscriptions`] — every live subscription by public id;
//!   [`connections`] — open WebSocket connections per key;
//!   [`rate_limit`] — requests per second per key.
//! - [`health`] — `/healthz` and `/readyz`; [`metrics`] — `/metrics`.
//! - [`admin`] — `/admin/filters`, what every chain runs, behind a token.
//! - [`config`] — the TOML configuration and its defaults.
//! - [`contracts`] — the Solidity ABI (ERC-20, Uniswap V2/V3) and the
//!   well-known tokens and DEX factories of each chain, below both the
//!   devnet and the price index.

#![deny(unsafe_code)]

pub mod admin;
pub mod chain;
pub mod config;
pub mod connections;
pub mod contracts;
pub mod fanout;
pub mod filters;
pub mod health;
pub mod ingest;
pub mod metrics;
pub mod price;
pub mod rate_limit;
pub mod rpc;
pub mod server;
pub mod session;
pub mod subscriptions;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::Config;
pub use server::AppState;

/// Runs a server on `listener` until `shutdown` is cancelled.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let state = AppState::start(&config, shutdown)?;
    server::serve(listener, state).await
}

/// Starts a server on `listener` in the background and returns its state
/// (tests and embedders use it to inspect what is running).
pub fn spawn(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> anyhow::Result<Arc<AppState>> {
    let state = AppState::start(&config, shutdown)?;
    let serving = state.clone();
    tokio::spawn(async move {
        if let Err(error) = server::serve(listener, serving).await {
            tracing::error!(error = format!("{error:#}"), "server stopped");
        }
    });
    Ok(state)
}
