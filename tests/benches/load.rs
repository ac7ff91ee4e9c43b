//! Load benchmark: N WebSocket clients × M subscriptions on loopback, a
//! steady rate of signed transactions, run against anvil's own
//! `eth_subscribe` (anvil mining them), against chainsieve with that anvil as
//! its upstream, and against chainsieve's devnet taking the transactions
//! itself (`eth_sendRawTransaction`), where sending is ingesting. Prints
//! notifications/s, pending-transaction latency (send to receipt), CPU and
//! memory of the serving process, and the ratio of notifications per
//! CPU-second against anvil. The target `floor` is the least a program
//! can do to deliver the same notifications (`chainsieve_tests::floor`):
//! each target's CPU per notification is also printed as a multiple of the
//! floor's in the same run. The target `unmetered` (asked by name) is
//! chainsieve over anvil with usage metering off (`[usage] enabled =
//! false`): with `--target chainsieve --target unmetered`, the run prints
//! what metering costs.
//!
//! Run: `cargo bench -p chainsieve-tests --bench load -- --connections 1000`
//!
//! chainsieve runs in a child process (this binary, `--serve`;
//! `chainsieve_tests::bench`), so its CPU time and memory are its own, not
//! the clients'.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chainsieve_config::SourceConfig;
use chainsieve_tests::bench::{self, quantiles, spread};
use chainsieve_tests::floor::Floor;
use chainsieve_tests::load::{self, CpuTime, Kind, Report, Spec, Workload};
use chainsieve_tests::nats::Nats;
use clap::{Parser, ValueEnum};
use tokio::process::Child;

/// The server this binary runs (`--serve`) allocates as the binary does.
#[global_allocator]
static ALLOCATOR: chainsieve::Allocator = chainsieve::Allocator;

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
    /// Targets to run (repeatable); `all` runs every one but `unmetered`.
    #[arg(long, value_enum, default_values_t = [Target::All])]
    target: Vec<Target>,
    /// Blocks of history before the run. Devnet: generated at start, 50
    /// transactions each (and as many a second live), into the event log.
    /// Chainsieve: mined on anvil (empty) before chainsieve starts, so all
    /// but the live ones are older than its log: history from the node.
    #[arg(long, default_value_t = 0)]
    history_blocks: u64,
    /// Devnet and chainsieve: halfway into the measured window, one more
    /// client subscribes to every log from the start of the history
    /// (`fromBlock`) and times its replay up to the tip; the pending
    /// latency while it ran is printed beside the latency before it.
    #[arg(long)]
    replay: bool,
    /// Runs of every target, in turn; with more than one, a summary gives
    /// each figure's median and spread (min–max).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Bus: edges following the ingest's stream; the clients connect to
    /// the first, the others follow with no clients (what more edges cost
    /// the ingest and `nats-server`).
    #[arg(long, default_value_t = 1)]
    edges: usize,
    /// Internal: serve chainsieve from this source (`devnet` or a node's
    /// URL) and print its URL (the child process of a run).
    #[arg(long, hide = true)]
    serve: Option<String>,
    /// Internal: the child's role (`all`, `ingest`, `edge`).
    #[arg(long, hide = true, default_value = "all")]
    role: String,
    /// Internal: the child's NATS server, for the ingest and edge roles.
    #[arg(long, hide = true)]
    bus: Option<String>,
    /// Internal: the child counts no usage.
    #[arg(long, hide = true)]
    unmetered: bool,
    /// Internal: the child is the floor, reading the node it serves.
    #[arg(long, hide = true)]
    floor: bool,
    /// Passed by `cargo bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Target {
    /// Every target below, in turn.
    All,
    /// Clients on anvil's own `eth_subscribe`.
    Anvil,
    /// Clients on the floor, anvil its upstream: one write per socket per
    /// batch of the node's announcements, nothing else.
    Floor,
    /// Clients on chainsieve, anvil its upstream.
    Chainsieve,
    /// The same with usage metering off (`[usage] enabled = false`).
    Unmetered,
    /// Clients on chainsieve, transactions sent to its devnet.
    Devnet,
    /// Clients on a chainsieve edge; anvil the upstream of an ingest,
    /// NATS JetStream between them.
    Bus,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(upstream) = &args.serve {
        return serve(upstream, &args).await;
    }
    bench::raise_file_limit();
    let spec = Spec {
        connections: args.connections,
        subscriptions_per_connection: args.subscriptions,
        rate: args.rate,
        warmup: Duration::from_secs(args.warmup),
        measure: Duration::from_secs(args.seconds),
        timed_connections: args.timed,
    };
    println!("machine: {}", bench::machine());
    eprintln!("signing {} transactions", spec.transactions());
    let workload = Arc::new(Workload::new(spec.transactions())?);
    let mut runs = Vec::new();
    for run in 1..=args.runs.max(1) {
        if args.runs > 1 {
            println!("run {run} of {}", args.runs);
        }
        let mut reports = Vec::new();
        for target in [
            Target::Anvil,
            Target::Floor,
            Target::Chainsieve,
            Target::Unmetered,
            Target::Bus,
            Target::Devnet,
        ] {
            let all = args.target.contains(&Target::All) && target != Target::Unmetered;
            if all || args.target.contains(&target) {
                let report = run_target(target, &args, &spec, &workload).await?;
                print(target, &spec, &report);
                reports.push((target, report));
            }
        }
        print_ratios(&reports, &spec);
        runs.push(reports);
    }
    if runs.len() > 1 {
        summarize(&runs, &spec);
    }
    Ok(())
}

/// One run of one target.
async fn run_target(
    target: Target,
    args: &Args,
    spec: &Spec,
    workload: &Arc<Workload>,
) -> anyhow::Result<Report> {
    Ok(match target {
        Target::Devnet => {
            let (child, url) = start_chainsieve(&["devnet"], args.history_blocks).await?;
            let pid = child.id().context("chainsieve exited")?;
            let (resident, _) = load::memory(pid)?;
            println!(
                "devnet server with {} history blocks: {:.1} MiB resident before clients",
                args.history_blocks,
                resident as f64 / (1 << 20) as f64
            );
            with_replay(
                args,
                spec,
                &url,
                load::run(spec, workload.clone(), &url, &url, Some(pid), &[]),
            )
            .await?
        }
        Target::Chainsieve | Target::Unmetered | Target::Floor => {
            let anvil = workload.start_node().await?;
            anvil.mine(args.history_blocks).await?;
            let node = anvil.ws_url();
            let mut serve = vec![node.as_str()];
            match target {
                Target::Unmetered => serve.push("--unmetered"),
                Target::Floor => serve.push("--floor"),
                _ => {}
            }
            let (child, url) = start_chainsieve(&serve, 0).await?;
            let pid = child.id().context("chainsieve exited")?;
            with_replay(
                args,
                spec,
                &url,
                load::run(spec, workload.clone(), &node, &url, Some(pid), &[]),
            )
            .await?
        }
        Target::Bus => {
            let anvil = workload.start_node().await?;
            let node = anvil.ws_url();
            let nats = Nats::start().await?;
            let bus = nats.url();
            let (ingest, _) =
                start_chainsieve(&[&node, "--role", "ingest", "--bus", &bus], 0).await?;
            let mut edges = Vec::new();
            for _ in 0..args.edges.max(1) {
                edges.push(start_chainsieve(&[&node, "--role", "edge", "--bus", &bus], 0).await?);
            }
            let (edge, url) = &edges[0];
            let pid = |child: &Child| child.id().context("a child exited");
            let others = [("ingest", pid(&ingest)?), ("nats-server", nats.pid()?)];
            load::run(
                spec,
                workload.clone(),
                &node,
                url,
                Some(pid(edge)?),
                &others,
            )
            .await?
        }
        Target::Anvil | Target::All => {
            let anvil = workload.start_node().await?;
            let node = anvil.ws_url();
            let pid = anvil.pid().context("anvil exited")?;
            load::run(spec, workload.clone(), &node, &node, Some(pid), &[]).await?
        }
    })
}

/// The targets measured against a reference (anvil, the floor).
const MEASURED: [Target; 5] = [
    Target::Floor,
    Target::Chainsieve,
    Target::Unmetered,
    Target::Bus,
    Target::Devnet,
];

/// Notifications per CPU-second of `wanted` in one run's reports.
fn per_cpu(reports: &[(Target, Report)], spec: &Spec, wanted: Target) -> Option<f64> {
    reports
        .iter()
        .find(|(target, _)| *target == wanted)
        .and_then(|(_, report)| report.per_cpu_second(spec.measure))
}

/// A ratio of each target's figure against a reference's, within one run.
type Ratios = fn(&[(Target, Report)], &Spec) -> Vec<(Target, f64)>;

/// Each target's notifications per CPU-second against anvil's, within one
/// run.
fn ratios(reports: &[(Target, Report)], spec: &Spec) -> Vec<(Target, f64)> {
    let Some(anvil) = per_cpu(reports, spec, Target::Anvil) else {
        return Vec::new();
    };
    MEASURED
        .into_iter()
        .filter_map(|target| per_cpu(reports, spec, target).map(|ours| (target, ours / anvil)))
        .collect()
}

/// Each target's CPU per notification as a multiple of the floor's, within
/// one run: the figure the project steers by.
fn over_floor(reports: &[(Target, Report)], spec: &Spec) -> Vec<(Target, f64)> {
    let Some(floor) = per_cpu(reports, spec, Target::Floor) else {
        return Vec::new();
    };
    MEASURED
        .into_iter()
        .filter(|&target| target != Target::Floor)
        .filter_map(|target| per_cpu(reports, spec, target).map(|ours| (target, floor / ours)))
        .collect()
}

/// `a`'s notifications per CPU-second against `b`'s, within one run.
fn ratio(reports: &[(Target, Report)], spec: &Spec, a: Target, b: Target) -> Option<f64> {
    Some(per_cpu(reports, spec, a)? / per_cpu(reports, spec, b)?)
}

/// One ratio between two targets, within one run.
type Pair = fn(&[(Target, Report)], &Spec) -> Option<f64>;

/// Chainsieve's notifications per CPU-second metered against unmetered.
fn metering_ratio(reports: &[(Target, Report)], spec: &Spec) -> Option<f64> {
    ratio(reports, spec, Target::Chainsieve, Target::Unmetered)
}

/// The devnet's CPU per notification against the node path's (chainsieve
/// over anvil).
fn devnet_ratio(reports: &[(Target, Report)], spec: &Spec) -> Option<f64> {
    ratio(reports, spec, Target::Chainsieve, Target::Devnet)
}

fn print_ratios(reports: &[(Target, Report)], spec: &Spec) {
    for (target, ratio) in ratios(reports, spec) {
        println!(
            "notifications per CPU-second: {} / anvil = {ratio:.1}×",
            name(target)
        );
    }
    for (target, ratio) in over_floor(reports, spec) {
        println!(
            "CPU per notification: {} / floor = {ratio:.2}×",
            name(target)
        );
    }
    if let Some(ratio) = metering_ratio(reports, spec) {
        println!("notifications per CPU-second: chainsieve / unmetered = {ratio:.3}×");
    }
    if let Some(ratio) = devnet_ratio(reports, spec) {
        println!("CPU per notification: devnet / chainsieve = {ratio:.2}×");
    }
}

/// Medians and spreads over the runs, per target.
fn summarize(runs: &[Vec<(Target, Report)>], spec: &Spec) {
    println!("summary of {} runs: median (min–max)", runs.len());
    let pairs: [(&str, Pair); 2] = [
        ("per CPU-second, metered / unmetered", metering_ratio),
        ("CPU per notification, devnet / chainsieve", devnet_ratio),
    ];
    for (label, pair) in pairs {
        let each: Vec<f64> = runs.iter().filter_map(|run| pair(run, spec)).collect();
        if !each.is_empty() {
            println!("  {label}, same run {}", spread(each));
        }
    }
    let targets: Vec<Target> = runs[0].iter().map(|(target, _)| *target).collect();
    for target in targets {
        let reports: Vec<&Report> = runs
            .iter()
            .flat_map(|run| run.iter())
            .filter(|(t, _)| *t == target)
            .map(|(_, report)| report)
            .collect();
        let figure = |f: &dyn Fn(&Report) -> Option<f64>| {
            spread(reports.iter().filter_map(|report| f(report)).collect())
        };
        let ms =
            |q: f64| move |report: &Report| Some(report.latency.value_at_quantile(q) as f64 / 1e3);
        println!("  {}:", name(target));
        println!(
            "    notifications/s {}",
            figure(&|r| Some(r.notifications_per_second()))
        );
        println!(
            "    server CPU, % of a core {}",
            figure(&|r| r
                .cpu
                .map(|cpu| cpu.total().as_secs_f64() / spec.measure.as_secs_f64() * 100.0))
        );
        println!(
            "    user-space share of the server's CPU, % {}",
            figure(&|r| r.cpu.map(|cpu| cpu.user_share() * 100.0))
        );
        println!(
            "    notifications per CPU-second {}",
            figure(&|r| r.per_cpu_second(spec.measure))
        );
        let each = |part: fn(CpuTime) -> Duration| {
            figure(&move |r| {
                r.cpu_per_notification(spec.measure)
                    .map(|each| micros(part(each)))
            })
        };
        println!(
            "    server CPU per notification, µs: user {}, kernel {}",
            each(|each| each.user),
            each(|each| each.system)
        );
        println!(
            "    pending latency from send, ms: p50 {}, p99 {}, p999 {}",
            figure(&ms(0.5)),
            figure(&ms(0.99)),
            figure(&ms(0.999))
        );
        println!(
            "    memory per connection, KiB {}",
            figure(&|r| r.memory_per_connection.map(|m| m / 1024.0))
        );
        let of_target = |each: Ratios| {
            let ratios: Vec<f64> = runs
                .iter()
                .flat_map(|run| each(run, spec))
                .filter(|(t, _)| *t == target)
                .map(|(_, ratio)| ratio)
                .collect();
            (!ratios.is_empty()).then(|| spread(ratios))
        };
        if let Some(ratio) = of_target(ratios) {
            println!("    per CPU-second against anvil, same run {ratio}");
        }
        if let Some(ratio) = of_target(over_floor) {
            println!("    CPU per notification against the floor, same run {ratio}");
        }
    }
}

fn name(target: Target) -> String {
    format!("{target:?}").to_lowercase()
}

fn print(target: Target, spec: &Spec, report: &Report) {
    println!(
        "{}: {} connections × {} subscriptions, {:.0} tx/s sent ({} refused)",
        name(target),
        spec.connections,
        spec.subscriptions_per_connection,
        report.sent_per_second,
        report.refused
    );
    if target == Target::Devnet {
        println!("  (the devnet runs no contract code: the emitter logs nothing there)");
    }
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
            "  server CPU {:.2} s in {} s ({:.0}% of a core, {:.0}% of it in user space), {per_cpu:.0} notifications per CPU-second",
            cpu.total().as_secs_f64(),
            spec.measure.as_secs(),
            cpu.total().as_secs_f64() / spec.measure.as_secs_f64() * 100.0,
            cpu.user_share() * 100.0
        );
    }
    if let Some(each) = report.cpu_per_notification(spec.measure) {
        println!(
            "  server CPU per notification: {:.2} µs in user space, {:.2} µs in the kernel",
            micros(each.user),
            micros(each.system)
        );
    }
    for (process, cpu) in &report.others {
        println!(
            "  {process} CPU {:.2} s ({:.0}% of a core), {:.1} µs per notification delivered",
            cpu.total().as_secs_f64(),
            cpu.total().as_secs_f64() / spec.measure.as_secs_f64() * 100.0,
            cpu.total().as_secs_f64() * 1e6
                / (report.notifications_per_second() * spec.measure.as_secs_f64()).max(1.0)
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
    for (reason, count) in &report.close_reasons {
        println!("    {count} closed: {reason}");
    }
}

/// `run`, and with `--replay` the replay of the history beside it; prints
/// the pending latency while the replay ran and before it (after the
/// warm-up), and their p99s' ratio.
async fn with_replay(
    args: &Args,
    spec: &Spec,
    url: &str,
    run: impl std::future::Future<Output = anyhow::Result<Report>>,
) -> anyhow::Result<Report> {
    let started = std::time::Instant::now();
    let replay = args.replay.then(|| {
        tokio::spawn(replay(
            url.to_string(),
            args.history_blocks,
            spec.warmup + spec.measure / 2,
        ))
    });
    let report = run.await?;
    if let Some(replay) = replay {
        let (from, to) = replay.await.context("the replay client panicked")??;
        let during = report.latency_between(from, to)?;
        let before = report.latency_between(started + spec.warmup, from)?;
        println!(
            "  pending latency from send while the replay ran: {}",
            quantiles(&during)
        );
        println!("  and before it, after the warm-up: {}", quantiles(&before));
        println!(
            "  p99 while the replay ran / before it: {:.2}",
            during.value_at_quantile(0.99) as f64 / before.value_at_quantile(0.99).max(1) as f64
        );
    }
    Ok(report)
}

/// After `delay`, subscribes to every log from the start of the devnet's
/// `history` blocks and prints how long the replay took to reach the block
/// that was the tip when it subscribed; returns when it started and ended.
async fn replay(
    url: String,
    history: u64,
    delay: Duration,
) -> anyhow::Result<(std::time::Instant, std::time::Instant)> {
    tokio::time::sleep(delay).await;
    let mut client = chainsieve_tests::WsClient::connect(&url).await?;
    let tip = client
        .call("eth_blockNumber", serde_json::json!([]))
        .await?;
    let tip = chainsieve_tests::quantity(&tip["result"]);
    let from = tip.saturating_sub(history.saturating_sub(1));
    let started = std::time::Instant::now();
    client
        .subscribe(serde_json::json!(["logs", {"fromBlock": format!("{from:#x}")}]))
        .await?;
    let mut replayed = 0u64;
    loop {
        let (_, log) = client.next_notification().await?;
        replayed += 1;
        if chainsieve_tests::quantity(&log["blockNumber"]) >= tip {
            break;
        }
    }
    let ended = std::time::Instant::now();
    let took = ended - started;
    println!(
        "  replay: blocks {from}..={tip} ({} blocks, {replayed} log notifications) reached the tip in {:.0} ms ({:.0} notifications/s)",
        tip - from + 1,
        took.as_secs_f64() * 1_000.0,
        replayed as f64 / took.as_secs_f64()
    );
    Ok((started, ended))
}

/// Starts this binary as a chainsieve server reading `serve[0]` (`devnet`
/// or a node's URL; a devnet with `history` blocks), the rest of `serve`
/// its options (`--role`, `--bus`); returns the child (killed on drop) and
/// its WebSocket URL once it is ready.
async fn start_chainsieve(serve: &[&str], history: u64) -> anyhow::Result<(Child, String)> {
    let history = history.to_string();
    let args: Vec<&str> = serve
        .iter()
        .copied()
        .chain(["--history-blocks", &history])
        .collect();
    bench::start_child(&args).await
}

/// The child: chainsieve with `source` as the only chain's source (a
/// devnet with `args.history_blocks` blocks of 50 transactions) in
/// `args.role` on `args.bus`, limits raised past the benchmark's load,
/// until stdin closes.
async fn serve(source: &str, args: &Args) -> anyhow::Result<()> {
    if args.floor {
        let floor = Floor::start(source)?;
        bench::serve_until_stdin_closes(&floor.url()).await;
        return Ok(());
    }
    let history = args.history_blocks;
    let source = if source == "devnet" {
        SourceConfig::Devnet
    } else {
        SourceConfig::node(source.to_string())
    };
    let mut config = load::unlimited(load::chainsieve_config(source));
    config.role = args.role.parse()?;
    if let Some(bus) = &args.bus {
        config.bus.urls = vec![bus.clone()];
    }
    config.usage.enabled = !args.unmetered;
    if history > 0 {
        config.devnet.history_blocks = history;
        config.devnet.transactions_per_block = 50;
    }
    bench::serve_child(config).await
}

/// A duration in microseconds.
fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
