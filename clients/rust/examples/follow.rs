use alloy_provider::{Provider, ProviderBuilder};
use chainsieve_client::ResumingConnect;
use futures_util::StreamExt;
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or("ws://127.0.0.1:8080/eth/v1/demo".into());
    let connect = ResumingConnect::new(url).on_error(|refused| eprintln!("{refused}"));
    let provider = ProviderBuilder::new().connect_pubsub_with(connect).await?;
    let usdt = json!({"toAddress": ["0xdac17f958d2ee523a2206206994597c13d831ec7"]});
    let mut transactions = provider
        .subscribe::<_, Value>(("bvMinedTransactions", usdt))
        .await?
        .into_stream();
    tokio::spawn(async move {
        while let Some(tx) = transactions.next().await {
            println!("transaction {}", tx["hash"]);
        }
    });
    let mut heads = provider.subscribe_blocks().await?.into_stream();
    while let Some(head) = heads.next().await {
        println!("block {} {}", head.number, head.hash);
    }
    Ok(())
}
