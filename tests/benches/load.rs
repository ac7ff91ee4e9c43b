//! Load benchmark: N WebSocket clients × M subscriptions on loopback, anvil
//! mining a fixed rate of signed transactions, run once against anvil's own
//! `eth_subscribe` and once against chainsieve with that anvil as its
//! upstream. Prints notifications/s, pending-transaction latency (send to
//! receipt), CPU and memory of the serving process, and the ratio of
//! notifications per CPU-second.
//!
//! Run: `cargo bench -p chainsieve-tests --bench load -- --connections 1000`
//!
//! chainsieve runs in a child process (this binary, `--serve`), so its CPU
//! time and memory are its own, not the clients'.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chainsieve::config::{Config, LimitsConfig};
use chainsieve::ingest::upstream::UpstreamStatus;
use chainsieve_tests::load::{self, Kind, Report, Spec, Workload};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
struct Args {
    /// WebSocket clients.
    #[arg(long, default_value_t = 1_000)]
    connections: usize,
    /// Subscriptions per client, cycling newPendingTransactions, newHeads,
    /// logs of the emitting contract, logs of a silent one.
    #[arg(long, default_value_t = 4)]
    subscriptions: usize,
    /// Transactions sent per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Seconds measured, after the warm-up.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Clients whose pending notifications are timed.
    #[arg(long, default_value_t = 100)]
    timed: usize,
    #[arg(long, value_enum, default_value_t = Target::Both)]
    target: Target,
    /// Internal: serve chainsieve with this node as upstream and print its
    /// URL (the child process of a run).
    #[arg(long, hide = true)]
    serve: Option<String>,
    /// Passed by `cargo bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Target {
    Both,
    Anvil,
    Chainsieve,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(upstream) = args.serve {
        return serve(upstream).await;
    }
    raise_file_limit();
    let spec = Spec {
        connections: args.connections,
        subscriptions_per_connection: args.subscriptions,
        rate: args.rate,
        warmup: Duration::from_secs(args.warmup),
        measure: Duration::from_secs(args.seconds),
        timed_connections: args.timed,
    };
    eprintln!("signing {} transactions", spec.transactions());
    let workload = Arc::new(Workload::new(spec.transactions())?);
    let mut reports = Vec::new();
    for target in [Target::Anvil, Target::Chainsieve] {
        if args.target != Target::Both && args.target != target {
            continue;
        }
        let anvil = workload.start_node().await?;
        let node = anvil.ws_url();
        let report = match target {
            Target::Chainsieve => {
                let (child, url) = start_chainsieve(&node).await?;
                let pid = child.id().context("chainsieve exited")?;
                let report = load::run(&spec, workload.clone(), &node, &url, Some(pid)).await?;
                drop(child);
                report
            }
            _ => {
                let pid = anvil.pid().context("anvil exited")?;
                load::run(&spec, workload.clone(), &node, &node, Some(pid)).await?
            }
        };
        let name = format!("{target:?}").to_lowercase();
        print(&name, &spec, &report);
        reports.push((name, report));
    }
    if let [(_, anvil), (_, chainsieve)] = &reports[..]
        && let (Some(a), Some(c)) = (
            anvil.per_cpu_second(spec.measure),
            chainsieve.per_cpu_second(spec.measure),
        )
    {
        println!(
            "notifications per CPU-second: chainsieve {c:.0} / anvil {a:.0} = {:.1}×",
            c / a
        );
    }
    Ok(())
}

fn print(name: &str, spec: &Spec, report: &Report) {
    println!(
        "{name}: {} connections × {} subscriptions, {:.0} tx/s sent ({} refused)",
        spec.connections, spec.subscriptions_per_connection, report.sent_per_second, report.refused
    );
    for kind in Kind::ALL {
        println!(
            "  {:<24} {:>12.0} notifications/s",
            kind.name(),
            report.per_second[kind as usize]
        );
    }
    println!(
        "  total {:.0} notifications/s",
        report.notifications_per_second()
    );
    println!(
        "  pending latency from send: {}",
        quantiles(&report.latency)
    );
    if let Some(from_ingestion) = &report.from_ingestion {
        println!(
            "  pending latency from the node's full announcement (ingestion): {}",
            quantiles(from_ingestion)
        );
    }
    if let (Some(cpu), Some(per_cpu)) = (report.cpu, report.per_cpu_second(spec.measure)) {
        println!(
            "  server CPU {:.2} s in {} s ({:.0}% of a core), {per_cpu:.0} notifications per CPU-second",
            cpu.as_secs_f64(),
            spec.measure.as_secs(),
            cpu.as_secs_f64() / spec.measure.as_secs_f64() * 100.0
        );
    }
    if let (Some(per), Some(peak)) = (report.memory_per_connection, report.peak_memory) {
        println!(
            "  memory {:.1} KiB per connection (with its subscriptions), peak {:.0} MiB",
            per / 1024.0,
            peak as f64 / (1 << 20) as f64
        );
    }
    println!(
        "  {} connections closed by the server; {} pending notifications missing after the run",
        report.closed, report.missing_pending
    );
}

fn quantiles(h: &Histogram<u64>) -> String {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1_000.0;
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms ({} samples)",
        ms(0.5),
        ms(0.99),
        ms(0.999),
        h.len()
    )
}

/// Starts this binary as a chainsieve server on `upstream`; returns the
/// child (killed on drop) and its WebSocket URL once it is ready.
async fn start_chainsieve(upstream: &str) -> anyhow::Result<(Child, String)> {
    let mut child = Command::new(std::env::current_exe().context("this binary")?)
        .args(["--serve", upstream])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the chainsieve child")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let url = tokio::time::timeout(chainsieve_tests::TIMEOUT, async {
        BufReader::new(stdout).lines().next_line().await
    })
    .await
    .context("chainsieve did not start in time")??
    .context("chainsieve exited before serving")?;
    Ok((child, url))
}

/// The child: chainsieve with `upstream` as the only chain's source, limits
/// raised past the benchmark's load, until stdin closes.
async fn serve(upstream: String) -> anyhow::Result<()> {
    let config = Config {
        limits: LimitsConfig {
            max_connections_per_key: 1_000_000,
            requests_per_second_per_key: 10_000_000,
            ..Default::default()
        },
        ..load::chainsieve_config(upstream)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let state = chainsieve::spawn(listener, config, shutdown.clone())?;
    let deadline = tokio::time::Instant::now() + chainsieve_tests::TIMEOUT;
    while !state
        .chains
        .values()
        .all(|chain| chain.source_status() == UpstreamStatus::Live)
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the upstream did not come live"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("ws://{addr}/eth/v1/load");
    let _ = tokio::io::stdin().read_to_end(&mut Vec::new()).await;
    shutdown.cancel();
    Ok(())
}

/// Ten thousand clients need more descriptors than the usual soft limit;
/// children (anvil, chainsieve) inherit the raised one.
fn raise_file_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
