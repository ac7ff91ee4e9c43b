//! The `chainsieve` binary: parses the command line, sets up logging, and
//! runs the server until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use chainsieve::Config;
use clap::Parser;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// Blockchain events as JSON-RPC 2.0: `eth_subscribe` over WebSocket and
/// `token_price` over HTTP, for Ethereum, BNB Chain and Polygon, with filter
/// logic in WebAssembly components.
///
/// With no config it runs the embedded devnet on all three chains and
/// accepts the API key `demo`. The config file (TOML; every key optional):
///
///   listen = "127.0.0.1:8080"
///   [auth]     keys = ["…"]
///   [filters]  dir = "filters"   call_timeout_ms = 1000   memory_limit_mib = 256
///   [chains.eth]      chain_id = 1    source = "devnet"   (or "ws://host:port")
///   [chains.bsc]      chain_id = 56   source = "devnet"
///   [chains.polygon]  chain_id = 137  source = "devnet"
///   [devnet]   seed = 1   block_time_ms = …   reorg_every = 0
///   [limits]   outbound_queue = 4096   max_batch = 1000   max_request_bytes = 1048576
///
/// See README.md for every key and its meaning.
#[derive(Debug, Parser)]
#[command(version, verbatim_doc_comment)]
struct Args {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen address; overrides `listen` in the config.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let address = listener.local_addr().context("reading the bound address")?;
    let keys = config.keys()?;
    let shutdown = CancellationToken::new();
    let state = chainsieve::AppState::start(&config, shutdown.clone())?;
    println!("chainsieve listening on http://{address}");
    for chain in state.chains.keys() {
        println!("  {chain:<8} ws://{address}/{chain}/v1/{}", keys[0]);
    }
    if keys[0] == chainsieve::config::DEMO_KEY {
        println!("  (devnet with the demo key `demo`; configure [auth] keys for anything else)");
    }
    let mut server = tokio::spawn(chainsieve::server::serve(listener, state));
    tokio::select! {
        signal = wait_for_signal() => {
            signal?;
            tracing::info!("shutting down: closing connections");
            shutdown.cancel();
            server.await.context("joining the server task")?
        }
        // The server only stops by itself on an error.
        stopped = &mut server => stopped.context("joining the server task")?,
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for SIGINT"),
        _ = term.recv() => Ok(()),
    }
}
