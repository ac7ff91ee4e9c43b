//! Watches a chainsieve subscription and prints each notification.
//!
//! ```sh
//! cargo run --release                      # the server, in one terminal
//! cargo run --example watch -- ws://127.0.0.1:8080/eth/v1/demo '["logs", {"address": "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"}]'
//! ```
//!
//! The second argument is the `eth_subscribe` parameter array (default
//! `["newHeads"]`). Any JSON-RPC WebSocket client works the same way; this
//! one uses nothing but tokio-tungstenite.

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "ws://127.0.0.1:8080/eth/v1/demo".into());
    let params: serde_json::Value =
        serde_json::from_str(&args.next().unwrap_or_else(|| r#"["newHeads"]"#.into()))
            .context("parsing the parameter array")?;
    let (mut socket, _) = tokio_tungstenite::connect_async(&url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let request =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": params});
    socket
        .send(Message::text(request.to_string()))
        .await
        .context("subscribing")?;
    while let Some(message) = socket.next().await {
        match message.context("reading")? {
            Message::Text(text) => println!("{text}"),
            Message::Close(frame) => bail!("closed by the server: {frame:?}"),
            _ => {}
        }
    }
    Ok(())
}
