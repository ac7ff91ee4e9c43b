//! Forwarding benchmark: what a call chainsieve forwards to the chain's node
//! costs over calling the node directly, and whether forwarding slows the
//! subscriptions down.
//!
//! One anvil and one chainsieve reading it (in a child process, this binary
//! `--serve`), the load benchmark's clients subscribed to chainsieve while
//! signed transactions go to anvil at a fixed rate. The measured time has
//! three windows of equal length:
//! 1. quiet: only the subscriptions;
//! 2. direct: also `eth_getBalance` at `--calls` per second to anvil itself;
//! 3. forwarded: the same calls through chainsieve's URL, forwarded to anvil.
//!
//! The quiet window comes first; the other two are cut into `--slices`
//! taken in turn, so both see the machine alike.
//!
//! Prints each window's call latency (p50, p99, p999, from when each call
//! was due), the overhead of forwarding, the subscriptions' pending
//! latency (send to notification) in each window, and chainsieve's CPU time
//! per forwarded call.
//!
//! Run: `cargo bench -p chainsieve-tests --bench forward -- --runs 3`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chainsieve_config::SourceConfig;
use chainsieve_tests::anvil::DEV_ACCOUNT_2;
use chainsieve_tests::bench::{self, quantiles, spread};
use chainsieve_tests::calls::{self, Calls};
use chainsieve_tests::load::{self, CpuTime, Spec, Workload, cpu_time};
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::json;

/// The server this binary runs (`--serve`) allocates as the binary does.
#[global_allocator]
static ALLOCATOR: chainsieve::Allocator = chainsieve::Allocator;

#[derive(Parser, Debug)]
struct Args {
    /// Calls per second, direct and forwarded.
    #[arg(long, default_value_t = 1_000)]
    calls: u64,
    /// Seconds of each window (quiet, direct, forwarded).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Slices the direct and forwarded windows are cut into, taken in
    /// turn (direct, forwarded, direct, …), so a drift in the machine's
    /// speed during a run weighs on both alike.
    #[arg(long, default_value_t = 5)]
    slices: u32,
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Subscribed clients, each with the load benchmark's four
    /// subscriptions.
    #[arg(long, default_value_t = 100)]
    connections: usize,
    /// Transactions sent per second to the node, all three windows.
    #[arg(long, default_value_t = 100)]
    rate: u64,
    #[command(flatten)]
    common: bench::Common,
}

/// What one run measured.
struct Run {
    /// The calls direct to the node, then through chainsieve.
    calls: [Calls; 2],
    /// The subscriptions' pending latency in each window.
    subscriptions: [Histogram<u64>; 3],
    /// chainsieve's CPU time in each window.
    cpu: [CpuTime; 3],
    calls_per_window: u64,
}

impl Run {
    /// chainsieve's CPU per forwarded call: the forwarded window's CPU over
    /// the direct one's (the same subscriptions and transactions), per call.
    fn cpu_per_call_us(&self) -> f64 {
        let extra = self.cpu[2].total().as_secs_f64() - self.cpu[1].total().as_secs_f64();
        extra * 1e6 / self.calls_per_window.max(1) as f64
    }

    fn overhead_ms(&self, quantile: f64) -> f64 {
        let ms = |calls: &Calls| calls.latency.value_at_quantile(quantile) as f64 / 1e3;
        ms(&self.calls[1]) - ms(&self.calls[0])
    }
}

const WINDOWS: [&str; 3] = ["quiet", "direct", "forwarded"];
const CALLS: [&str; 2] = ["direct", "forwarded"];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(node) = &args.common.serve {
        let source = SourceConfig::node(node.clone());
        return bench::serve_child(load::unlimited(load::chainsieve_config(source))).await;
    }
    bench::raise_file_limit();
    let window = Duration::from_secs(args.seconds);
    let spec = Spec {
        connections: args.connections,
        subscriptions_per_connection: 4,
        rate: args.rate,
        warmup: Duration::from_secs(args.warmup),
        measure: window * 3,
        timed_connections: args.connections,
    };
    let workload = Arc::new(Workload::new(spec.transactions())?);
    let runs = bench::each_run(
        args.common.runs,
        || run(&args, &spec, &workload, window),
        |run| print(run, &args),
    )
    .await?;
    if runs.len() > 1 {
        summarize(&runs);
    }
    Ok(())
}

async fn run(
    args: &Args,
    spec: &Spec,
    workload: &Arc<Workload>,
    window: Duration,
) -> anyhow::Result<Run> {
    let anvil = workload.start_node().await?;
    let node = anvil.ws_url();
    let (child, url) = bench::start_child(&[&node]).await?;
    let pid = child.id().context("chainsieve exited")?;
    let load = tokio::spawn({
        let (spec, workload, node, url) =
            (spec.clone(), workload.clone(), node.clone(), url.clone());
        async move { load::run(&spec, workload, &node, &url, Some(pid), &[]).await }
    });
    // The load's measured time starts after its warm-up.
    tokio::time::sleep(spec.warmup).await;
    let params = json!([DEV_ACCOUNT_2, "latest"]);
    // Per window (quiet, direct, forwarded): its spans and chainsieve's CPU.
    let mut spans: [Vec<(Instant, Instant)>; 3] = Default::default();
    let mut cpu = [CpuTime::default(); 3];
    let mut calls: [Option<Calls>; 2] = [None, None];
    let slice = window / args.slices.max(1);
    let mut order = vec![0];
    for _ in 0..args.slices.max(1) {
        order.extend([1, 2]);
    }
    for kind in order {
        let (started, cpu_before) = (Instant::now(), cpu_time(pid)?);
        if kind == 0 {
            tokio::time::sleep(window).await;
        } else {
            let target = if kind == 1 { &node } else { &url };
            let ran = calls::run(target, "eth_getBalance", &params, args.calls, slice).await?;
            match &mut calls[kind - 1] {
                Some(all) => all.merge(ran)?,
                none => *none = Some(ran),
            }
        }
        spans[kind].push((started, Instant::now()));
        cpu[kind] += cpu_time(pid)?.saturating_sub(cpu_before);
    }
    let [Some(direct), Some(forwarded)] = calls else {
        anyhow::bail!("no calls ran");
    };
    let report = load.await.context("the load panicked")??;
    for (name, calls) in CALLS.iter().zip([&direct, &forwarded]) {
        anyhow::ensure!(
            calls.errors == 0,
            "{name}: {} calls failed, the first: {:?}",
            calls.errors,
            calls.first_error
        );
    }
    anyhow::ensure!(
        forwarded.results == direct.results,
        "the forwarded answers differ from the node's"
    );
    anyhow::ensure!(
        report.missing_pending == 0 && report.closed == 0,
        "the subscriptions lost {} pending notifications, {} connections closed",
        report.missing_pending,
        report.closed
    );
    let during = |kind: usize| -> anyhow::Result<Histogram<u64>> {
        let mut all = Histogram::new_with_bounds(1, 60_000_000, 3)?;
        for (from, to) in &spans[kind] {
            all.add(report.latency_between(*from, *to)?)?;
        }
        Ok(all)
    };
    Ok(Run {
        calls_per_window: direct.latency.len(),
        calls: [direct, forwarded],
        subscriptions: [during(0)?, during(1)?, during(2)?],
        cpu,
    })
}

fn print(run: &Run, args: &Args) {
    println!(
        "eth_getBalance at {}/s for {} s, over one WebSocket:",
        args.calls, args.seconds
    );
    println!(
        "  direct to anvil:      {}",
        quantiles(&run.calls[0].latency)
    );
    println!(
        "  through chainsieve:   {}",
        quantiles(&run.calls[1].latency)
    );
    println!(
        "  forwarding overhead:  p50 {:+.3} ms, p99 {:+.3} ms",
        run.overhead_ms(0.5),
        run.overhead_ms(0.99)
    );
    println!(
        "  chainsieve CPU per forwarded call: {:.1} µs",
        run.cpu_per_call_us()
    );
    println!(
        "subscriptions ({} clients × 4, {} tx/s), pending latency from send:",
        args.connections, args.rate
    );
    for (name, latency) in WINDOWS.iter().zip(&run.subscriptions) {
        println!("  {name:<10} {}", quantiles(latency));
    }
}

fn summarize(runs: &[Run]) {
    println!("summary of {} runs: median (min–max)", runs.len());
    let figure = |f: &dyn Fn(&Run) -> f64| spread(runs.iter().map(f).collect());
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e3;
    for (index, name) in CALLS.iter().enumerate() {
        println!(
            "  {name} call latency, ms: p50 {}, p99 {}",
            figure(&|r| ms(&r.calls[index].latency, 0.5)),
            figure(&|r| ms(&r.calls[index].latency, 0.99))
        );
    }
    println!(
        "  forwarding overhead, ms: p50 {}, p99 {}",
        figure(&|r| r.overhead_ms(0.5)),
        figure(&|r| r.overhead_ms(0.99))
    );
    println!(
        "  chainsieve CPU per forwarded call, µs {}",
        figure(&Run::cpu_per_call_us)
    );
    for (index, name) in WINDOWS.iter().enumerate() {
        println!(
            "  subscriptions' pending latency while {name}, ms: p50 {}, p99 {}",
            figure(&|r| ms(&r.subscriptions[index], 0.5)),
            figure(&|r| ms(&r.subscriptions[index], 0.99))
        );
    }
}
