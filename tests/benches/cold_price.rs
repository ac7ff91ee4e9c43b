//! `token_price` from the nodes: how long an answer takes when the index
//! does not hold it, and once it does.
//!
//! One anvil with real Uniswap V2 and V3 pools of a pair that traded, then
//! `--depth` empty blocks 12 s apart; chainsieve in a child process (this
//! binary, `--serve url`) started after all of it, so its index begins at
//! the tip and holds no state of the pools. A client asks:
//! - **now, cold**: the latest price, read from the nodes (the factories'
//!   pools, their state, the tokens);
//! - **now, warm**: the same again, from the store;
//! - **then, cold**: the price at `--times` times spread over the empty
//!   blocks, each a block search on the nodes and the pools' state there;
//! - **then, warm**: the same times again.
//!
//! Run: `cargo bench -p chainsieve-tests --bench cold_price -- --runs 3`

use std::time::{Duration, Instant};

use chainsieve_config::{LogConfig, PriceConfig, SourceConfig, Span};
use chainsieve_tests::WsClient;
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::bench::{self, spread};
use chainsieve_tests::dex::Session;
use chainsieve_tests::load;
use chainsieve_tests::uniswap::{Scene, scene};
use clap::Parser;
use serde_json::{Value, json};

/// The server this binary runs (`--serve`) allocates as the binary does.
#[global_allocator]
static ALLOCATOR: chainsieve::Allocator = chainsieve::Allocator;

#[derive(Parser, Debug)]
struct Args {
    /// Empty blocks between the trades and the server's start.
    #[arg(long, default_value_t = 2_000)]
    depth: u64,
    /// Times asked before the index began.
    #[arg(long, default_value_t = 20)]
    times: u64,
    #[command(flatten)]
    common: bench::Common,
}

struct Run {
    now_cold: Duration,
    now_warm: Duration,
    then_cold: Duration,
    then_warm: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(url) = &args.common.serve {
        let mut config = load::chainsieve_config(SourceConfig::node(url.clone()));
        for chain in config.chains.values_mut() {
            chain.chain_id = Some(1);
        }
        config.log = LogConfig {
            window: Span::Blocks(128),
            ..LogConfig::default()
        };
        // Each answer's own calls measured, not the chain's allowance.
        config.price = PriceConfig {
            node_calls_per_second: 1_000_000,
            ..PriceConfig::default()
        };
        return bench::serve_child(load::unlimited(config)).await;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let runs = bench::each_run(
        args.common.runs,
        || run(&args),
        |run| {
            println!(
                "  now: {:.2} ms cold, {:.3} ms warm; then ({} blocks back): {:.2} ms cold, {:.3} ms warm (medians of {})",
                ms(run.now_cold),
                ms(run.now_warm),
                args.depth,
                ms(run.then_cold),
                ms(run.then_warm),
                args.times
            );
        },
    )
    .await?;
    if runs.len() > 1 {
        let figure = |f: fn(&Run) -> Duration| spread(runs.iter().map(|r| ms(f(r))).collect());
        println!("summary, median (min–max) of {} runs, ms:", runs.len());
        println!("  now, cold: {}", figure(|r| r.now_cold));
        println!("  now, warm: {}", figure(|r| r.now_warm));
        println!("  then, cold: {}", figure(|r| r.then_cold));
        println!("  then, warm: {}", figure(|r| r.then_warm));
    }
    Ok(())
}

async fn run(args: &Args) -> anyhow::Result<Run> {
    // Ethereum's id: the pools' factories are its.
    let anvil = Anvil::start(1).await?;
    let session = Session { anvil: &anvil };
    let scene = scene(&session, args.depth).await;
    let (child, url) = bench::start_child(&[&anvil.ws_url()]).await?;
    let mut client = WsClient::connect(&url).await?;
    ready(&mut client, &anvil).await?;

    let started = Instant::now();
    let now = ask(&mut client, &scene, None).await?;
    let now_cold = started.elapsed();
    let started = Instant::now();
    anyhow::ensure!(
        ask(&mut client, &scene, None).await? == now,
        "the same answer"
    );
    let now_warm = started.elapsed();

    // Spread over the empty blocks, each in a gap of its own.
    let (_, from) = scene.first;
    let times: Vec<u64> = (0..args.times)
        .map(|k| from + 2_000 + k * (args.depth.saturating_sub(200) * 12 / args.times.max(1)))
        .collect();
    let mut cold = Vec::new();
    let mut answers = Vec::new();
    for &time in &times {
        let started = Instant::now();
        answers.push(ask(&mut client, &scene, Some(time)).await?);
        cold.push(started.elapsed());
    }
    let mut warm = Vec::new();
    for (&time, answer) in times.iter().zip(&answers) {
        let started = Instant::now();
        anyhow::ensure!(
            ask(&mut client, &scene, Some(time)).await? == *answer,
            "the same answer"
        );
        warm.push(started.elapsed());
    }
    drop(child);
    Ok(Run {
        now_cold,
        now_warm,
        then_cold: median(cold),
        then_warm: median(warm),
    })
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// Waits until the index has its first block: a pair of no pool is then
/// refused for that, not for an empty index. Between tries a block is
/// mined and its head awaited.
async fn ready(client: &mut WsClient, anvil: &Anvil) -> anyhow::Result<()> {
    let heads = client.subscribe(json!(["newHeads"])).await?;
    let nobody = json!([{"token0": format!("0x{}", "11".repeat(20)), "token1": format!("0x{}", "22".repeat(20))}]);
    for _ in 0..200 {
        let answer = client.call("token_price", nobody.clone()).await?;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        if !message.starts_with("no price data indexed") {
            client.call("eth_unsubscribe", json!([heads])).await?;
            return Ok(());
        }
        anvil.mine(1).await?;
        while client.next_notification().await?.0 != heads {}
    }
    anyhow::bail!("the index never took its first block")
}

/// The price's `result`, or why not.
async fn ask(
    client: &mut WsClient,
    scene: &Scene,
    timestamp: Option<u64>,
) -> anyhow::Result<Value> {
    let mut params = json!({"token0": scene.beta, "token1": scene.alpha});
    if let Some(t) = timestamp {
        params["timestamp"] = json!(t);
    }
    let answer = client.call("token_price", json!([params])).await?;
    anyhow::ensure!(answer["result"].is_object(), "token_price: {answer}");
    Ok(answer["result"].clone())
}
