//! History from the nodes: how fast a `fromBlock` far behind the log's
//! window is replayed from a local node, and what bounds it.
//!
//! One anvil holding `--blocks` blocks of one Ping call each (a
//! transaction and a log), and chainsieve in a child process (this binary,
//! `--serve url`) reading it, its log keeping 128 blocks. A client
//! subscribes to the contract's `logs` from the first call's block and
//! reads until the last. Measured:
//! - **blocks a second** from the subscribe to the last notification;
//! - chainsieve's **CPU per block** meanwhile;
//! - **the node alone**: the same blocks read by this process from anvil
//!   the way chainsieve reads them (32 bodies a batch, then their
//!   receipts),
//!   with nothing else: what the node's answers cost, the bound below
//!   chainsieve's own work;
//! - **how the logs are read**: the same blocks' logs alone, 32 blocks a
//!   round trip, three ways: `eth_getLogs` by block hash (a call per
//!   block), one `eth_getLogs` over the range, and `eth_getBlockReceipts`
//!   per block (what chainsieve does).
//!
//! Run: `cargo bench -p chainsieve-tests --bench history -- --runs 3`

use std::time::{Duration, Instant};

use anyhow::Context;
use chainsieve_config::{HistoryConfig, LogConfig, SourceConfig, Span};
use chainsieve_node::{Call, NodeConnection, blocks};
use chainsieve_tests::WsClient;
use chainsieve_tests::anvil::{Anvil, ping_contract};
use chainsieve_tests::bench::{self, spread};
use chainsieve_tests::dex::Session;
use chainsieve_tests::load::{self, CHAIN_ID, cpu_time};
use clap::Parser;
use serde_json::json;

/// The server this binary runs (`--serve`) allocates as the binary does.
#[global_allocator]
static ALLOCATOR: chainsieve::Allocator = chainsieve::Allocator;

#[derive(Parser, Debug)]
struct Args {
    /// Blocks of history, one call each.
    #[arg(long, default_value_t = 10_000)]
    blocks: usize,
    #[command(flatten)]
    common: bench::Common,
}

/// The blocks read per batch, as chainsieve's history reader does.
const CHUNK: u64 = chainsieve_history::CHUNK;

struct Run {
    blocks_per_second: f64,
    cpu_per_block_us: f64,
    node_alone_blocks_per_second: f64,
    /// Blocks a second whose logs are read, each way of [`LOGS_BY`].
    logs_blocks_per_second: [f64; 3],
}

/// The ways of reading a range's logs, in [`Run::logs_blocks_per_second`]
/// order.
const LOGS_BY: [&str; 3] = [
    "eth_getLogs by block hash",
    "eth_getLogs over the range",
    "eth_getBlockReceipts",
];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(url) = &args.common.serve {
        let mut config = load::chainsieve_config(SourceConfig::node(url.clone()));
        config.log = LogConfig {
            window: Span::Blocks(128),
            ..LogConfig::default()
        };
        config.history = HistoryConfig {
            max_blocks: 100_000_000,
            calls_per_second_per_node: 1_000_000,
            ..HistoryConfig::default()
        };
        return bench::serve_child(load::unlimited(config)).await;
    }
    let runs = bench::each_run(
        args.common.runs,
        || run(&args),
        |run| {
            println!(
                "  {} blocks: {:.0} blocks/s to the subscriber, {:.1} µs of chainsieve CPU per block; the node alone {:.0} blocks/s",
                args.blocks, run.blocks_per_second, run.cpu_per_block_us, run.node_alone_blocks_per_second
            );
            for (way, rate) in LOGS_BY.iter().zip(run.logs_blocks_per_second) {
                println!("    logs alone, {way}: {rate:.0} blocks/s");
            }
        },
    )
    .await?;
    if runs.len() > 1 {
        let figure = |f: fn(&Run) -> f64| spread(runs.iter().map(f).collect());
        println!("summary, median (min–max) of {} runs:", runs.len());
        println!(
            "  blocks/s to the subscriber: {}",
            figure(|r| r.blocks_per_second)
        );
        println!(
            "  chainsieve CPU per block, µs: {}",
            figure(|r| r.cpu_per_block_us)
        );
        println!(
            "  the node alone, blocks/s: {}",
            figure(|r| r.node_alone_blocks_per_second)
        );
        for (index, way) in LOGS_BY.iter().enumerate() {
            let rates = runs
                .iter()
                .map(|r| r.logs_blocks_per_second[index])
                .collect();
            println!("  logs alone, {way}, blocks/s: {}", spread(rates));
        }
    }
    Ok(())
}

async fn run(args: &Args) -> anyhow::Result<Run> {
    let anvil = Anvil::start(CHAIN_ID).await?;
    let session = Session { anvil: &anvil };
    let code = alloy_primitives::hex::decode(ping_contract()).context("the Ping code")?;
    let deployed = session.send(None, code, None).await;
    let contract = deployed["contractAddress"]
        .as_str()
        .context("the contract's address")?
        .to_string();
    let first = anvil.block_number().await? + 1;
    anvil.ping(&contract, args.blocks).await;
    let last = anvil.block_number().await?;

    let (child, url) = bench::start_child(&[&anvil.ws_url()]).await?;
    let pid = child.id().context("chainsieve exited")?;
    let mut client = WsClient::connect(&url).await?;
    let before = cpu_time(pid)?;
    let started = Instant::now();
    client
        .subscribe(json!(["logs", { "address": contract }, { "fromBlock": format!("{first:#x}") }]))
        .await?;
    for _ in first..=last {
        client.next_notification().await?;
    }
    let took = started.elapsed();
    let cpu = cpu_time(pid)?.saturating_sub(before);
    let blocks = (last - first + 1) as f64;
    drop(child);
    let alone = node_alone(&anvil, first, last).await?;
    let mut logs_blocks_per_second = [0.0; 3];
    for (way, rate) in logs_blocks_per_second.iter_mut().enumerate() {
        *rate = blocks / logs_alone(&anvil, first, last, way).await?.as_secs_f64();
    }
    Ok(Run {
        blocks_per_second: blocks / took.as_secs_f64(),
        cpu_per_block_us: cpu.total().as_secs_f64() * 1e6 / blocks,
        node_alone_blocks_per_second: blocks / alone.as_secs_f64(),
        logs_blocks_per_second,
    })
}

/// How long reading blocks `first..=last` from `anvil` takes as the
/// history reader reads them, with nothing else.
async fn node_alone(anvil: &Anvil, first: u64, last: u64) -> anyhow::Result<Duration> {
    let node = NodeConnection::new(anvil.ws_url());
    let started = Instant::now();
    let mut next = first;
    while next <= last {
        let top = (next + CHUNK - 1).min(last);
        let read = blocks::by_number(
            |calls: Vec<Call>| {
                let node = &node;
                async move { node.batch(&calls).await }
            },
            next,
            top,
        )
        .await
        .map_err(|reason| anyhow::anyhow!(reason))?;
        anyhow::ensure!(!read.is_empty(), "anvil has no block {next}");
        next += read.len() as u64;
    }
    Ok(started.elapsed())
}

/// How long reading the logs of blocks `first..=last` from `anvil` takes,
/// [`CHUNK`] blocks a round trip, the way `LOGS_BY[way]` says; every log
/// is counted, so the ways are checked to agree.
async fn logs_alone(anvil: &Anvil, first: u64, last: u64, way: usize) -> anyhow::Result<Duration> {
    let node = NodeConnection::new(anvil.ws_url());
    // The block hashes, read beforehand (chainsieve has them from the
    // bodies).
    let mut hashes = Vec::new();
    let mut next = first;
    while next <= last {
        let top = (next + CHUNK - 1).min(last);
        let calls: Vec<Call> = (next..=top)
            .map(|n| Call::new("eth_getBlockByNumber", json!([format!("{n:#x}"), false])))
            .collect();
        for raw in node.batch(&calls).await? {
            let block: serde_json::Value = serde_json::from_str(raw.get())?;
            hashes.push(block["hash"].clone());
        }
        next = top + 1;
    }
    let started = Instant::now();
    let mut logs = 0;
    let mut next = first;
    for chunk in hashes.chunks(CHUNK as usize) {
        let top = next + chunk.len() as u64 - 1;
        let calls: Vec<Call> = match way {
            0 => chunk
                .iter()
                .map(|hash| Call::new("eth_getLogs", json!([{ "blockHash": hash }])))
                .collect(),
            1 => vec![Call::new(
                "eth_getLogs",
                json!([{ "fromBlock": format!("{next:#x}"), "toBlock": format!("{top:#x}") }]),
            )],
            _ => chunk
                .iter()
                .map(|hash| Call::new("eth_getBlockReceipts", json!([hash])))
                .collect(),
        };
        for raw in node.batch(&calls).await? {
            let answer: Vec<serde_json::Value> = serde_json::from_str(raw.get())?;
            logs += match way {
                2 => answer
                    .iter()
                    .map(|receipt| receipt["logs"].as_array().map_or(0, Vec::len))
                    .sum(),
                _ => answer.len(),
            };
        }
        next = top + 1;
    }
    let took = started.elapsed();
    anyhow::ensure!(
        logs as u64 == last - first + 1,
        "{}: {logs} logs of {} blocks of one log each",
        LOGS_BY[way],
        last - first + 1
    );
    Ok(took)
}
