//! Webhooks benchmark: what a thousand webhooks deliver, and how much later
//! than the same notifications reach WebSocket subscribers.
//!
//! chainsieve in a child process (this binary `--serve`) runs one devnet
//! chain stepped by this binary: a block every `--block-ms`, made with
//! `evm_mine`, each with the devnet's workload (12 transactions and their
//! logs). `--webhooks` webhooks, half `newHeads`, half `logs` (every log),
//! deliver to a receiver in this process (keep-alive HTTP/1.1 on
//! loopback); `--sockets` WebSocket clients each subscribe to the same two
//! topics. A notification's latency is from the moment its block was asked
//! for (`evm_mine` sent) to its arrival: a webhook's POST, a socket's frame.
//!
//! Prints, per run: webhook deliveries and notifications per second, the
//! latency of both (p50, p99, p999) and the difference of their p99s,
//! and chainsieve's CPU per webhook notification; with `--runs` > 1, each
//! figure's median and spread.
//!
//! Run: `cargo bench -p chainsieve-tests --bench webhooks -- --runs 3`
//! (`--durable`: the webhooks kept on disk, each progress write committed)

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use chainsieve_config::{Config, DevnetSettings, LogConfig, SourceConfig, WebhooksConfig};
use chainsieve_tests::bench::{self, quantiles, spread};
use chainsieve_tests::load::{self, cpu_time};
use chainsieve_tests::receiver::Receiver;
use chainsieve_tests::{WsClient, quantity};
use clap::Parser;
use hdrhistogram::Histogram;
use serde::Deserialize;
use serde_json::{Value, json};

/// The server this binary runs (`--serve`) allocates as the binary does.
#[global_allocator]
static ALLOCATOR: chainsieve::Allocator = chainsieve::Allocator;

#[derive(Parser, Debug)]
struct Args {
    /// Webhooks, half on newHeads, half on logs.
    #[arg(long, default_value_t = 1_000)]
    webhooks: usize,
    /// WebSocket clients, each subscribed to newHeads and logs.
    #[arg(long, default_value_t = 100)]
    sockets: usize,
    /// Milliseconds between blocks (BNB Chain's cadence by default).
    #[arg(long, default_value_t = 450)]
    block_ms: u64,
    /// Seconds measured, after the warmup.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Keep the webhooks in `webhooks.redb` in a temporary data directory
    /// (each progress write committed to disk), as a server that must
    /// survive restarts does; otherwise in memory.
    #[arg(long)]
    durable: bool,
    #[command(flatten)]
    common: bench::Common,
}

/// The load benchmark's server (one chain, `eth`, key `load`, no per-key
/// limits) on a devnet that makes a block only when asked, with its own
/// workload; webhooks to loopback allowed, kept in `data_dir` if given.
fn config(data_dir: Option<PathBuf>) -> Config {
    let config = load::unlimited(load::chainsieve_config(SourceConfig::Devnet));
    Config {
        log: LogConfig {
            data_dir,
            ..LogConfig::default()
        },
        devnet: DevnetSettings {
            block_time_ms: Some(3_600_000),
            history_blocks: 0,
            ..DevnetSettings::default()
        },
        webhooks: WebhooksConfig {
            allow_http: true,
            allow_private_addresses: true,
            max_per_key: 1_000_000,
            ..WebhooksConfig::default()
        },
        ..config
    }
}

/// What one run measured.
struct Run {
    webhook: Histogram<u64>,
    socket: Histogram<u64>,
    deliveries: u64,
    notifications: u64,
    seconds: f64,
    /// chainsieve's CPU over the measured window, per webhook
    /// notification, in microseconds (the sockets' share included).
    cpu_us: f64,
}

impl Run {
    fn per_second(&self) -> (f64, f64) {
        (
            self.deliveries as f64 / self.seconds,
            self.notifications as f64 / self.seconds,
        )
    }

    /// The webhooks' p99 less the sockets', in milliseconds.
    fn p99_gap_ms(&self) -> f64 {
        (self.webhook.value_at_quantile(0.99) as f64 - self.socket.value_at_quantile(0.99) as f64)
            / 1_000.0
    }
}

/// When each block was asked for, by number.
type Asked = Arc<Mutex<HashMap<u64, Instant>>>;

/// What the benchmark reads of a notification's `result`: the block it
/// tells of (a head's `number`, a log's `blockNumber`). Typed, borrowed
/// and the rest skipped, so the clients and the receiver, which share the
/// server's two cores, spend little on reading.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, alias = "blockNumber")]
    number: Option<&'a str>,
}

impl Block<'_> {
    fn block(&self) -> Option<u64> {
        u64::from_str_radix(self.number?.strip_prefix("0x")?, 16).ok()
    }
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow)]
    result: Block<'a>,
}

/// A socket's notification frame.
#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(borrow)]
    params: Params<'a>,
}

/// A webhook delivery's body.
#[derive(Deserialize)]
struct Delivery<'a> {
    #[serde(borrow)]
    notifications: Vec<Params<'a>>,
}

/// Records `block`'s latency at `at` if it was asked for after `from`.
fn record(
    histogram: &Mutex<Histogram<u64>>,
    asked: &Asked,
    from: Instant,
    block: u64,
    at: Instant,
) {
    let Some(&sent) = asked.lock().expect("lock").get(&block) else {
        return;
    };
    if sent >= from {
        let micros =
            u64::try_from(at.saturating_duration_since(sent).as_micros()).unwrap_or(u64::MAX);
        let _ = histogram.lock().expect("lock").record(micros.max(1));
    }
}

async fn run(args: &Args) -> anyhow::Result<Run> {
    let data = tempfile::tempdir()?;
    let serve = match args.durable {
        true => format!("devnet:{}", data.path().display()),
        false => "devnet".to_string(),
    };
    let (child, ws_url) = bench::start_child(&[serve.as_str()]).await?;
    let pid = child.id().context("the child's pid")?;
    let http_url = ws_url.replacen("ws://", "http://", 1);
    let (receiver, mut bodies) = Receiver::streaming().await?;
    let mut control = WsClient::connect(&ws_url).await?;
    for n in 0..args.webhooks {
        let topic = if n % 2 == 0 {
            json!(["newHeads"])
        } else {
            json!(["logs"])
        };
        let created = control
            .call(
                "webhook_create",
                json!([{"url": receiver.url(), "subscribe": topic}]),
            )
            .await?;
        anyhow::ensure!(
            created["result"]["id"].is_string(),
            "webhook_create answered {created}"
        );
    }
    let asked: Asked = Arc::default();
    let new_histogram = || Mutex::new(Histogram::<u64>::new(3).expect("a histogram"));
    let (webhook, socket) = (Arc::new(new_histogram()), Arc::new(new_histogram()));
    let start = Instant::now();
    let from = start + Duration::from_secs(args.warmup);
    let counted = Arc::new(Mutex::new((0u64, 0u64)));
    let reading = {
        let (asked, webhook, counted) = (asked.clone(), webhook.clone(), counted.clone());
        tokio::spawn(async move {
            while let Some((at, body)) = bodies.recv().await {
                let Ok(delivery) = serde_json::from_slice::<Delivery>(&body) else {
                    continue;
                };
                let mut counts = counted.lock().expect("lock");
                if at >= from {
                    counts.0 += 1;
                    counts.1 += delivery.notifications.len() as u64;
                }
                drop(counts);
                for params in &delivery.notifications {
                    if let Some(block) = params.result.block() {
                        record(&webhook, &asked, from, block, at);
                    }
                }
            }
        })
    };
    let mut sockets = Vec::with_capacity(args.sockets);
    for _ in 0..args.sockets {
        let mut client = WsClient::connect(&ws_url).await?;
        client.subscribe(json!(["newHeads"])).await?;
        client.subscribe(json!(["logs"])).await?;
        let (asked, socket) = (asked.clone(), socket.clone());
        sockets.push(tokio::spawn(async move {
            while let Ok(payload) = client.next_payload().await {
                let at = Instant::now();
                let Ok(frame) = serde_json::from_slice::<Frame>(&payload) else {
                    continue;
                };
                if let Some(block) = frame.params.result.block() {
                    record(&socket, &asked, from, block, at);
                }
            }
        }));
    }
    let http = reqwest::Client::new();
    let mut number = quantity(&control.call("eth_blockNumber", json!([])).await?["result"]);
    let end = from + Duration::from_secs(args.seconds);
    let mut tick = tokio::time::interval(Duration::from_millis(args.block_ms));
    let mut cpu_from = None;
    while Instant::now() < end {
        tick.tick().await;
        if cpu_from.is_none() && Instant::now() >= from {
            cpu_from = Some(cpu_time(pid)?);
        }
        number += 1;
        asked.lock().expect("lock").insert(number, Instant::now());
        let mined: Value = http
            .post(&http_url)
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"evm_mine"}"#)
            .send()
            .await?
            .json()
            .await?;
        anyhow::ensure!(mined["result"] == "0x0", "evm_mine answered {mined}");
    }
    let cpu = cpu_time(pid)?.saturating_sub(cpu_from.context("a measured window")?);
    // What is in flight arrives; then the clients stop.
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(child);
    for socket in sockets {
        socket.abort();
    }
    drop(receiver);
    reading.abort();
    let (deliveries, notifications) = *counted.lock().expect("lock");
    let take =
        |h: Arc<Mutex<Histogram<u64>>>| Arc::try_unwrap(h).map(|h| h.into_inner().expect("lock"));
    let webhook = take(webhook).unwrap_or_else(|shared| shared.lock().expect("lock").clone());
    let socket = take(socket).unwrap_or_else(|shared| shared.lock().expect("lock").clone());
    Ok(Run {
        webhook,
        socket,
        deliveries,
        notifications,
        seconds: args.seconds as f64,
        cpu_us: cpu.total().as_secs_f64() * 1e6 / notifications.max(1) as f64,
    })
}

fn print(run: &Run) {
    let (deliveries, notifications) = run.per_second();
    println!("  webhooks: {deliveries:.0} deliveries/s, {notifications:.0} notifications/s");
    println!("  webhook latency: {}", quantiles(&run.webhook));
    println!("  socket latency:  {}", quantiles(&run.socket));
    println!("  p99 webhook - socket: {:.2} ms", run.p99_gap_ms());
    println!(
        "  chainsieve CPU per webhook notification: {:.2} µs",
        run.cpu_us
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    bench::raise_file_limit();
    if args.common.serve.is_some() {
        let data_dir = args
            .common
            .serve
            .as_deref()
            .and_then(|serve| serve.strip_prefix("devnet:"))
            .map(PathBuf::from);
        return bench::serve_child(config(data_dir)).await;
    }
    println!(
        "{} webhooks (half newHeads, half logs, kept {}), {} sockets (newHeads + logs), a block every {} ms, {} s measured",
        args.webhooks,
        if args.durable { "on disk" } else { "in memory" },
        args.sockets,
        args.block_ms,
        args.seconds
    );
    let runs = bench::each_run(args.common.runs, || run(&args), print).await?;
    if runs.len() > 1 {
        let figure = |f: &dyn Fn(&Run) -> f64| spread(runs.iter().map(f).collect());
        let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1_000.0;
        println!("median (min–max) of {} runs:", runs.len());
        println!(
            "  webhook notifications/s: {}",
            figure(&|r| r.per_second().1)
        );
        println!("  webhook deliveries/s: {}", figure(&|r| r.per_second().0));
        println!("  webhook p50 ms: {}", figure(&|r| ms(&r.webhook, 0.5)));
        println!("  webhook p99 ms: {}", figure(&|r| ms(&r.webhook, 0.99)));
        println!("  socket p50 ms: {}", figure(&|r| ms(&r.socket, 0.5)));
        println!("  socket p99 ms: {}", figure(&|r| ms(&r.socket, 0.99)));
        println!("  p99 webhook - socket ms: {}", figure(&|r| r.p99_gap_ms()));
        println!(
            "  CPU per webhook notification µs: {}",
            figure(&|r| r.cpu_us)
        );
    }
    Ok(())
}
