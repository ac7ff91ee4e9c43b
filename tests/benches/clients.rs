//! Clients benchmark: what the resuming packages add to the library they
//! wrap. chainsieve (a devnet generating `--rate` pending transactions a
//! second) serves one client process at a time, subscribed to
//! `newPendingTransactions`; each library runs plain and wrapped (viem's
//! `webSocket` and `resumingWebSocket`, ethers v6's `WebSocketProvider`
//! and `ResumingWebSocketProvider`, web3.py's `WebSocketProvider` and
//! `ResumingWebSocketProvider`, alloy's `WsConnect` and `ResumingConnect`).
//! Prints the client's CPU time per notification, the median of one-second
//! windows (a window with a collector's pause or the other core's noise
//! does not move it; the mean over them is printed beside), from the
//! nanoseconds its threads ran (/proc's schedstat: user and system
//! together, finer than the 10 ms ticks of /proc's stat), and the
//! wrapped/plain ratio of each run;
//! with `--runs 3`, their medians and spreads (docs/src/benchmarks.md,
//! Clients).
//!
//! Run: `cargo bench -p chainsieve-tests --bench clients -- --runs 3`
//!
//! The JavaScript and Python clients are `tests/js/client_cost.mjs` and
//! `tests/py/client_cost.py`; the alloy one is this binary (`--client`).

use std::time::Duration;

use anyhow::Context;
use chainsieve_config::SourceConfig;
use chainsieve_tests::bench::{self, spread};
use chainsieve_tests::load;
use chainsieve_tests::scripts::Conversation;
use clap::Parser;
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// Pending transactions the devnet generates a second.
    #[arg(long, default_value_t = 1_000)]
    rate: u32,
    /// One-second windows measured per client, after the warm-up.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    #[arg(long, default_value_t = 5)]
    warmup: u64,
    /// Libraries to run (repeatable): viem, ethers, web3py, alloy; all of
    /// them by default.
    #[arg(long)]
    library: Vec<String>,
    /// Internal: be the alloy client (`plain` or `resuming`) of `--url`.
    #[arg(long, hide = true)]
    client: Option<String>,
    #[arg(long, hide = true)]
    url: Option<String>,
    #[command(flatten)]
    common: bench::Common,
}

/// The libraries, each run plain then wrapped.
const LIBRARIES: [&str; 4] = ["viem", "ethers", "web3py", "alloy"];
const WRAPS: [&str; 2] = ["plain", "resuming"];

/// The devnet's blocks: four a second, the rate spread over them.
const BLOCK_TIME_MS: u64 = 250;

/// One library's run, plain and wrapped: the median of its one-second
/// windows' client CPU per notification (µs), the mean over all of them,
/// and notifications a second.
#[derive(Debug)]
struct Measured {
    library: &'static str,
    median_us: [f64; 2],
    mean_us: [f64; 2],
    per_second: [f64; 2],
}

/// One client's windows: CPU per notification of each (µs), and the
/// totals.
struct Windows {
    per_notification_us: Vec<f64>,
    cpu: Duration,
    notifications: u64,
}

impl Windows {
    fn median(&self) -> f64 {
        let mut sorted = self.per_notification_us.clone();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    }

    fn mean(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.notifications.max(1) as f64
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(wrap) = &args.client {
        let url = args.url.as_deref().context("--url")?;
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(alloy_client(wrap, url));
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(measure_all(args))
}

async fn measure_all(args: Args) -> anyhow::Result<()> {
    if args.common.serve.is_some() {
        return serve(&args).await;
    }
    let print = |run: &Vec<Measured>| {
        for m in run {
            println!(
                "  {:<7} plain {:>5.2} µs/notification (mean {:.2}, {:.0}/s), resuming {:>5.2} µs (mean {:.2}, {:.0}/s): ×{:.3}",
                m.library,
                m.median_us[0],
                m.mean_us[0],
                m.per_second[0],
                m.median_us[1],
                m.mean_us[1],
                m.per_second[1],
                m.median_us[1] / m.median_us[0],
            );
        }
    };
    let runs = bench::each_run(args.common.runs, || run(&args), print).await?;
    if runs.len() > 1 {
        println!("median (min–max) of {} runs:", runs.len());
        for (i, library) in libraries(&args).enumerate() {
            let of = |f: &dyn Fn(&Measured) -> f64| spread(runs.iter().map(|r| f(&r[i])).collect());
            println!(
                "  {library:<7} plain {} µs, resuming {} µs, ratio {}",
                of(&|m| m.median_us[0]),
                of(&|m| m.median_us[1]),
                of(&|m| m.median_us[1] / m.median_us[0]),
            );
        }
    }
    Ok(())
}

/// The libraries `--library` names, in [`LIBRARIES`]' order.
fn libraries(args: &Args) -> impl Iterator<Item = &'static str> + '_ {
    LIBRARIES
        .into_iter()
        .filter(|l| args.library.is_empty() || args.library.iter().any(|a| a == l))
}

/// One run: a fresh server, then each library's two clients in turn.
async fn run(args: &Args) -> anyhow::Result<Vec<Measured>> {
    let (_server, url) = bench::start_child(&["devnet"]).await?;
    let mut measured = Vec::new();
    for library in libraries(args) {
        let mut median_us = [0.0; 2];
        let mut mean_us = [0.0; 2];
        let mut per_second = [0.0; 2];
        for (i, wrap) in WRAPS.iter().enumerate() {
            let windows = measure(args, library, wrap, &url)
                .await
                .with_context(|| format!("{library} ({wrap})"))?;
            median_us[i] = windows.median();
            mean_us[i] = windows.mean();
            per_second[i] = windows.notifications as f64 / args.seconds as f64;
        }
        measured.push(Measured {
            library,
            median_us,
            mean_us,
            per_second,
        });
    }
    Ok(measured)
}

/// The client's one-second windows after the warm-up.
async fn measure(args: &Args, library: &str, wrap: &str, url: &str) -> anyhow::Result<Windows> {
    let mut client = match library {
        "alloy" => {
            let this = std::env::current_exe().context("this binary")?;
            Conversation::start_program(&this, &["--client", wrap, "--url", url])
        }
        "web3py" => Conversation::start("client_cost.py", &[library, wrap, url]),
        _ => Conversation::start("client_cost.mjs", &[library, wrap, url]),
    };
    anyhow::ensure!(client.next().await == json!({"ready": true}), "not ready");
    let pid = client.pid().context("a process")?;
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    let mut windows = Windows {
        per_notification_us: Vec::new(),
        cpu: Duration::ZERO,
        notifications: 0,
    };
    let (mut count_before, mut cpu_before) = (count(&mut client).await?, on_cpu(pid)?);
    let mut second = tokio::time::interval(Duration::from_secs(1));
    second.tick().await;
    for _ in 0..args.seconds {
        second.tick().await;
        let (count_after, cpu_after) = (count(&mut client).await?, on_cpu(pid)?);
        let (cpu, notifications) = (
            cpu_after.saturating_sub(cpu_before),
            count_after.saturating_sub(count_before),
        );
        anyhow::ensure!(notifications > 0, "no notification in a second");
        windows
            .per_notification_us
            .push(cpu.as_secs_f64() * 1e6 / notifications as f64);
        windows.cpu += cpu;
        windows.notifications += notifications;
        (count_before, cpu_before) = (count_after, cpu_after);
    }
    Ok(windows)
}

/// How long process `pid`'s threads have run: the first field of each
/// `/proc/<pid>/task/<tid>/schedstat`, in nanoseconds.
fn on_cpu(pid: u32) -> anyhow::Result<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).context("the process's threads")? {
        let stat = std::fs::read_to_string(task?.path().join("schedstat")).unwrap_or_default();
        total += stat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(Duration::from_nanos(total))
}

async fn count(client: &mut Conversation) -> anyhow::Result<u64> {
    client.say("count").await;
    client.next().await["count"].as_u64().context("a count")
}

/// The server child: a devnet of `--rate` pending transactions a second,
/// no history.
async fn serve(args: &Args) -> anyhow::Result<()> {
    let mut config = load::unlimited(load::chainsieve_config(SourceConfig::Devnet));
    config.devnet.block_time_ms = Some(BLOCK_TIME_MS);
    config.devnet.pending_batches_per_block = 4;
    config.devnet.transactions_per_block = (u64::from(args.rate) * BLOCK_TIME_MS / 1_000) as u32;
    bench::serve_child(config).await
}

/// The alloy client child: newPendingTransactions through alloy's
/// `WsConnect` (`plain`) or chainsieve-client's `ResumingConnect`; answers
/// "count" lines as the scripts do.
async fn alloy_client(wrap: &str, url: &str) -> anyhow::Result<()> {
    use alloy_provider::{Provider, ProviderBuilder, RootProvider, WsConnect};
    use futures_util::StreamExt;
    use tokio::io::AsyncBufReadExt;

    let provider: RootProvider = if wrap == "resuming" {
        ProviderBuilder::default()
            .connect_pubsub_with(chainsieve_client::ResumingConnect::new(url))
            .await?
    } else {
        ProviderBuilder::default()
            .connect_ws(WsConnect::new(url))
            .await?
    };
    // alloy's subscription channels hold 16 by default and its streams
    // skip what overflowed, without a word: the devnet announces 62 at a
    // time.
    let mut pending = provider
        .subscribe_pending_transactions()
        .channel_size(4_096)
        .await?
        .into_stream();
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = counted.clone();
    tokio::spawn(async move {
        while pending.next().await.is_some() {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    println!("{}", json!({"ready": true}));
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line == "count" {
            let count = counted.load(std::sync::atomic::Ordering::Relaxed);
            println!("{}", json!({ "count": count }));
        }
    }
    Ok(())
}
