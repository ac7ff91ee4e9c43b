//! Several nodes per chain: what reading a chain from three nodes costs
//! against one, and how quickly the chain gets past a node that dies.
//!
//! One anvil (no automining) behind `--nodes` fault-injecting proxies
//! ([`FaultyNode`], in this process), and chainsieve reading the proxies
//! in a child process (this binary, `--serve url,url,…`). Blocks of
//! `--txs` transfers are mined every `--interval-ms`; a client subscribed
//! to `newHeads` on chainsieve and another on anvil itself time each head.
//! Each run measures a chain of one node and a chain of three, in turn:
//! - **cost**: chainsieve's CPU time per block;
//! - **added latency**: from anvil's own `newHeads` notification to
//!   chainsieve's (p50, p99);
//! - **failover** (three nodes): the node blocks are fetched from first is
//!   killed (its port closed and its connections cut, as a `kill -9`
//!   looks from chainsieve); then, later, another is hung (connections
//!   open, nothing answered). For each, the time from the fault to the next
//!   head delivered, that head's added latency, and whether any block is
//!   missing or repeated.
//!
//! Run: `cargo bench -p chainsieve-tests --bench nodes -- --runs 3`

use std::collections::HashMap;
use std::time::{Duration, Instant};

use alloy_primitives::B256;
use anyhow::Context;
use chainsieve_config::SourceConfig;
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2};
use chainsieve_tests::bench::{self, quantiles, spread};
use chainsieve_tests::faulty::FaultyNode;
use chainsieve_tests::load::{self, CHAIN_ID, cpu_time};
use chainsieve_tests::{WsClient, quantity};
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// The server this binary runs (`--serve`) allocates as the binary does.
#[global_allocator]
static ALLOCATOR: chainsieve::Allocator = chainsieve::Allocator;

#[derive(Parser, Debug)]
struct Args {
    /// Blocks measured per chain (after a warm-up of a tenth as many).
    #[arg(long, default_value_t = 200)]
    blocks: u64,
    /// Transfers per block.
    #[arg(long, default_value_t = 20)]
    txs: usize,
    /// Time between blocks.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    #[command(flatten)]
    common: bench::Common,
}

/// One chain's figures.
struct Measured {
    cpu_per_block_us: f64,
    added: Histogram<u64>,
}

/// A fault and how the chain got past it.
struct Failover {
    /// From the fault to the next head delivered.
    next_head_ms: f64,
    /// That head's delay after anvil announced it.
    added_ms: f64,
}

struct Run {
    one: Measured,
    three: Measured,
    killed: Failover,
    hung: Failover,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(nodes) = &args.common.serve {
        let urls = nodes.split(',').map(str::to_string).collect();
        let config = load::chainsieve_config(SourceConfig::Nodes(urls));
        return bench::serve_child(load::unlimited(config)).await;
    }
    let runs = bench::each_run(args.common.runs, || run(&args), print).await?;
    if runs.len() > 1 {
        summarize(&runs);
    }
    Ok(())
}

async fn run(args: &Args) -> anyhow::Result<Run> {
    let (one, _) = chain(args, 1, false).await?;
    let (three, failovers) = chain(args, 3, true).await?;
    let [killed, hung] = failovers.context("the three-node chain's failovers")?;
    Ok(Run {
        one,
        three,
        killed,
        hung,
    })
}

/// A chain of `count` nodes over a fresh anvil: its cost and latency over
/// `args.blocks` blocks, then (with `faults`) a killed and a hung node.
async fn chain(
    args: &Args,
    count: usize,
    faults: bool,
) -> anyhow::Result<(Measured, Option<[Failover; 2]>)> {
    let anvil = Anvil::start_with(CHAIN_ID, 0, &["--no-mining"]).await?;
    let mut proxies = Vec::with_capacity(count);
    for _ in 0..count {
        proxies.push(FaultyNode::start(&anvil.ws_url()).await?);
    }
    let urls: Vec<String> = proxies.iter().map(FaultyNode::ws_url).collect();
    let (child, url) = bench::start_child(&[&urls.join(",")]).await?;
    let pid = child.id().context("chainsieve exited")?;
    let mut timer = Timer::start(&anvil, &url).await?;
    let interval = Duration::from_millis(args.interval_ms);
    for _ in 0..(args.blocks / 10).max(1) {
        timer.block(&anvil, args.txs, interval).await?;
    }
    timer.added.reset();
    let before = cpu_time(pid)?;
    for _ in 0..args.blocks {
        timer.block(&anvil, args.txs, interval).await?;
    }
    let cpu = cpu_time(pid)?.saturating_sub(before);
    let measured = Measured {
        cpu_per_block_us: cpu.total().as_secs_f64() * 1e6 / args.blocks as f64,
        added: timer.added.clone(),
    };
    let failovers = if faults {
        // The first node is asked for blocks first: kill it just after a
        // block, so the next one is the first without it.
        let killed = timer.after_fault(&anvil, args, proxies[0].kill()).await?;
        let hung = timer
            .after_fault(&anvil, args, async { proxies[1].stall() })
            .await?;
        Some([killed, hung])
    } else {
        None
    };
    timer.check_every_block_once()?;
    drop(child);
    Ok((measured, failovers))
}

/// Times heads: when anvil announced each block, and when chainsieve did.
struct Timer {
    node: WsClient,
    node_heads: String,
    server: WsClient,
    server_heads: String,
    /// When anvil announced each block.
    announced: HashMap<B256, Instant>,
    /// The block numbers chainsieve delivered, in order.
    delivered: Vec<u64>,
    /// chainsieve's delay after anvil, microseconds.
    added: Histogram<u64>,
    /// The last block mined.
    head: u64,
    /// Signed transfers from the dev account, by nonce.
    nonce: u64,
}

impl Timer {
    async fn start(anvil: &Anvil, url: &str) -> anyhow::Result<Self> {
        let mut node = WsClient::connect(&anvil.ws_url()).await?;
        let node_heads = node.subscribe(json!(["newHeads"])).await?;
        let mut server = WsClient::connect(url).await?;
        let server_heads = server.subscribe(json!(["newHeads"])).await?;
        Ok(Self {
            node,
            node_heads,
            server,
            server_heads,
            announced: HashMap::new(),
            delivered: Vec::new(),
            added: Histogram::new_with_bounds(1, 60_000_000, 3)?,
            head: anvil.block_number().await?,
            nonce: 0,
        })
    }

    /// Mines a block of `txs` transfers, times its heads, and paces the
    /// next `interval` after this one started.
    async fn block(&mut self, anvil: &Anvil, txs: usize, interval: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        self.mine(anvil, txs).await?;
        self.heads().await?;
        tokio::time::sleep_until((started + interval).into()).await;
        Ok(())
    }

    /// Sends `txs` transfers in one batch and mines them into a block.
    async fn mine(&mut self, anvil: &Anvil, txs: usize) -> anyhow::Result<()> {
        let batch: Vec<Value> = (0..txs)
            .map(|i| {
                let nonce = self.nonce + i as u64;
                json!({"jsonrpc": "2.0", "id": i, "method": "eth_sendTransaction",
                    "params": [{"from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x1", "nonce": format!("{nonce:#x}")}]})
            })
            .collect();
        self.nonce += txs as u64;
        let answers: Value = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}", anvil.port))
            .json(&batch)
            .send()
            .await?
            .json()
            .await?;
        anyhow::ensure!(
            answers
                .as_array()
                .is_some_and(|a| a.iter().all(|r| r["result"].is_string())),
            "anvil refused a transfer: {answers}"
        );
        anvil.mine(1).await?;
        self.head += 1;
        Ok(())
    }

    /// Reads both subscriptions until block `self.head` has come from each;
    /// answers when chainsieve delivered it and how long after anvil.
    async fn heads(&mut self) -> anyhow::Result<(Instant, Duration)> {
        let head = self.head;
        let mut node_done = false;
        // Each head chainsieve delivered meanwhile: its hash and when.
        let mut delivered: Vec<(B256, u64, Instant)> = Vec::new();
        while !node_done || delivered.last().is_none_or(|(_, n, _)| *n != head) {
            tokio::select! {
                params = self.node.next_notification_params(), if !node_done => {
                    let params = params?;
                    if params["subscription"] == self.node_heads.as_str() {
                        let result = &params["result"];
                        let hash: B256 = serde_json::from_value(result["hash"].clone())?;
                        self.announced.insert(hash, Instant::now());
                        node_done = quantity(&result["number"]) == head;
                    }
                }
                params = self.server.next_notification_params() => {
                    let params = params?;
                    if params["subscription"] == self.server_heads.as_str() {
                        let result = &params["result"];
                        let hash: B256 = serde_json::from_value(result["hash"].clone())?;
                        delivered.push((hash, quantity(&result["number"]), Instant::now()));
                    }
                }
            }
        }
        // Timed once both are in: the two sockets race.
        let mut last = (Instant::now(), Duration::ZERO);
        for (hash, number, at) in delivered {
            self.delivered.push(number);
            let added = self
                .announced
                .get(&hash)
                .map_or(Duration::ZERO, |announced| {
                    at.saturating_duration_since(*announced)
                });
            self.added.record(added.as_micros().max(1) as u64)?;
            last = (at, added);
        }
        Ok(last)
    }

    /// Runs `fault` just after a block, then mines the next: the time from
    /// the fault to its head, and the head's added latency.
    async fn after_fault(
        &mut self,
        anvil: &Anvil,
        args: &Args,
        fault: impl Future<Output = ()>,
    ) -> anyhow::Result<Failover> {
        let interval = Duration::from_millis(args.interval_ms);
        let faulted = Instant::now();
        fault.await;
        tokio::time::sleep(interval).await;
        self.mine(anvil, args.txs).await?;
        let (delivered, added) = self.heads().await?;
        let added_ms = added.as_secs_f64() * 1e3;
        // A few more blocks after it, paced as before.
        for _ in 0..5 {
            self.block(anvil, args.txs, interval).await?;
        }
        Ok(Failover {
            next_head_ms: delivered.duration_since(faulted).as_secs_f64() * 1e3,
            added_ms,
        })
    }

    /// Every block from the first delivered to the last, once, in order.
    fn check_every_block_once(&self) -> anyhow::Result<()> {
        let first = *self.delivered.first().context("heads delivered")?;
        let expected: Vec<u64> = (first..first + self.delivered.len() as u64).collect();
        anyhow::ensure!(
            self.delivered == expected,
            "heads missing or repeated: {:?}",
            self.delivered
        );
        Ok(())
    }
}

fn print(run: &Run) {
    for (name, chain) in [("1 node", &run.one), ("3 nodes", &run.three)] {
        println!(
            "{name}: {:.0} µs of CPU per block; added latency {}",
            chain.cpu_per_block_us,
            quantiles(&chain.added)
        );
    }
    println!(
        "3 nodes / 1 node CPU per block: {:.2}×",
        run.three.cpu_per_block_us / run.one.cpu_per_block_us
    );
    for (name, failover) in [("killed", &run.killed), ("hung", &run.hung)] {
        println!(
            "a node {name}: next head {:.1} ms after the fault (blocks every interval), its added latency {:.2} ms; no block missing or repeated",
            failover.next_head_ms, failover.added_ms
        );
    }
}

/// Quantile `q` of `h` (microseconds) in milliseconds.
fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

/// A summary line: its name, and the figure it takes of each run.
type Figure = (&'static str, fn(&Run) -> f64);

fn summarize(runs: &[Run]) {
    let figures: [Figure; 11] = [
        ("CPU per block, 1 node, µs", |r| r.one.cpu_per_block_us),
        ("CPU per block, 3 nodes, µs", |r| r.three.cpu_per_block_us),
        ("ratio 3/1", |r| {
            r.three.cpu_per_block_us / r.one.cpu_per_block_us
        }),
        ("added latency p50, 1 node, ms", |r| ms(&r.one.added, 0.5)),
        ("added latency p99, 1 node, ms", |r| ms(&r.one.added, 0.99)),
        ("added latency p50, 3 nodes, ms", |r| {
            ms(&r.three.added, 0.5)
        }),
        ("added latency p99, 3 nodes, ms", |r| {
            ms(&r.three.added, 0.99)
        }),
        ("killed: next head after, ms", |r| r.killed.next_head_ms),
        ("killed: its added latency, ms", |r| r.killed.added_ms),
        ("hung: next head after, ms", |r| r.hung.next_head_ms),
        ("hung: its added latency, ms", |r| r.hung.added_ms),
    ];
    println!("summary over {} runs: median (min–max)", runs.len());
    for (name, figure) in figures {
        println!("  {name}: {}", spread(runs.iter().map(figure).collect()));
    }
}
