//! The `chainsieve` binary: parses the command line, sets up logging, and
//! runs the server until SIGINT or SIGTERM; or, as `chainsieve filter
//! test`, runs one filter component over an events file.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use chainsieve::Config;
use chainsieve_config::{LogFormat, LoggingConfig, Role};
use chainsieve_filters::harness::{Comparison, DEFAULT_BATCH, Harness, Match};
use clap::{Parser, Subcommand};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

#[global_allocator]
static ALLOCATOR: chainsieve::Allocator = chainsieve::Allocator;

/// Blockchain events as JSON-RPC 2.0: `eth_subscribe` over WebSocket and
/// `token_price` over HTTP, for Ethereum, BNB Chain and Polygon, with filter
/// logic in WebAssembly components.
///
/// With no config it runs the embedded devnet on all three chains and
/// accepts the API key `demo`. The config file (TOML; every key optional;
/// a few keys of each section shown):
///
///   listen = "127.0.0.1:8080"
///   role = "all"   (or "ingest", "edge": several servers on NATS JetStream)
///   data_dir = "…"   (what the server keeps across restarts; unset: in memory)
///   [auth]       keys = ["…"]   admin_token = "…"
///   [plans.<name>]  requests_per_second = …   max_connections = …   chains = […]
///   [chains.eth]      chain_id = 1    source = "devnet"   (or "ws://host:port")
///   [chains.bsc]      chain_id = 56   source = "devnet"
///   [chains.polygon]  chain_id = 137  source = "devnet"
///   [[chains.<name>.nodes]]  url = "wss://…"   (several; agreement = "quorum", quorum = 2)
///   [devnet]     seed = 1   block_time_ms = …   reorg_every = 0
///   [filters]    dir = "filters"   call_timeout_ms = 1000   memory_limit_mib = 256   max_values = 1000
///   [limits]     outbound_queue = 4096   max_batch = 1000   max_request_bytes = 1048576
///   [log]        window = "1h"   memory_mib = 256
///   [history]    max_blocks = 250000   max_streams = 32
///   [price]      max_node_calls = 64   node_calls_per_second = 200
///   [rpc]        allow = […]   deny = […]   timeout_ms = 10000
///   [webhooks]   max_per_key = 20   timeout_ms = 10000   allow_http = false
///   [watchlists] max_per_key = 20   max_addresses = 1000000
///   [lifecycle]  max_pending = 100000   drop_after_secs = 300
///   [usage]      enabled = true   flush_secs = 10   retention_days = 90
///   [bus]        urls = ["nats://127.0.0.1:4222"]   prefix = "chainsieve"   lease_ms = 3000
///   [logging]    level = "info"   format = "text"   (or "json")
///
/// Every key and its meaning: docs/src/configuration.md.
#[derive(Debug, Parser)]
#[command(version, verbatim_doc_comment)]
struct Args {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen address; overrides `listen` in the config.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// all (one process, the default), ingest (nodes to the bus) or edge
    /// (the bus to clients); overrides `role` in the config.
    #[arg(long, value_name = "ROLE")]
    role: Option<Role>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with filter components.
    #[command(subcommand)]
    Filter(FilterCommand),
}

#[derive(Debug, Subcommand)]
enum FilterCommand {
    /// Runs a component on the server's engine over an events file and
    /// prints which events match, one JSON line each:
    /// {"event": <0-based position in the file>, "subscription": <n>}.
    /// Subscription n is the n-th --params. With --expect the output must
    /// equal that file's lines (any order; payloads compared as JSON
    /// values): exit 1 and the differences if not.
    Test {
        /// The component (`.wasm`).
        #[arg(long, value_name = "FILE")]
        wasm: PathBuf,
        /// A subscription's parameters: the JSON array after the topic
        /// (`[]` for none). Repeat for several subscriptions.
        #[arg(long, value_name = "JSON", required = true)]
        params: Vec<String>,
        /// Events of the component's source, one JSON object per line, in
        /// the wire shapes notifications carry.
        #[arg(long, value_name = "FILE.jsonl")]
        events: PathBuf,
        /// The expected matches, in the output's form.
        #[arg(long, value_name = "FILE")]
        expect: Option<PathBuf>,
        /// Events per match-batch call.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_BATCH)]
        batch: usize,
    },
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    match args.command {
        Some(Command::Filter(FilterCommand::Test {
            wasm,
            params,
            events,
            expect,
            batch,
        })) => filter_test(&wasm, &params, &events, expect.as_deref(), batch),
        None => {
            serve(args)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `chainsieve filter test`.
fn filter_test(
    wasm: &Path,
    params: &[String],
    events: &Path,
    expect: Option<&Path>,
    batch: usize,
) -> anyhow::Result<ExitCode> {
    let mut harness = Harness::open(wasm)?.with_batch_size(batch);
    for (n, params) in params.iter().enumerate() {
        if let Err(refusal) = harness.subscribe(params)? {
            eprintln!("subscription {n} ({params}) refused: {refusal}");
            return Ok(ExitCode::from(2));
        }
    }
    let text =
        std::fs::read_to_string(events).with_context(|| format!("reading {}", events.display()))?;
    let matches = harness
        .run_jsonl(&text)
        .with_context(|| format!("running {} over {}", wasm.display(), events.display()))?;
    for m in &matches {
        println!("{}", serde_json::to_string(m)?);
    }
    eprintln!(
        "{} matches over {} events",
        matches.len(),
        text.lines().filter(|l| !l.trim().is_empty()).count()
    );
    let Some(expect) = expect else {
        return Ok(ExitCode::SUCCESS);
    };
    let expected: Vec<Match> = std::fs::read_to_string(expect)
        .with_context(|| format!("reading {}", expect.display()))?
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line)
                .with_context(|| format!("{} line {}: not a match", expect.display(), n + 1))
        })
        .collect::<anyhow::Result<_>>()?;
    let comparison = Comparison::of(&expected, &matches);
    if comparison.is_equal() {
        eprintln!("as expected ({})", expect.display());
        return Ok(ExitCode::SUCCESS);
    }
    let payload = |m: &Match| m.payload.as_deref().unwrap_or("none").to_owned();
    for (want, have) in &comparison.differing {
        eprintln!(
            "differs:    {{\"event\":{},\"subscription\":{}}}: expected {}, got {}",
            want.event,
            want.subscription,
            payload(want),
            payload(have)
        );
    }
    for missing in &comparison.missing {
        eprintln!("missing:    {}", serde_json::to_string(missing)?);
    }
    for extra in &comparison.unexpected {
        eprintln!("unexpected: {}", serde_json::to_string(extra)?);
    }
    Ok(ExitCode::FAILURE)
}

#[tokio::main]
async fn serve(args: Args) -> anyhow::Result<()> {
    let (mut config, text) = match &args.config {
        Some(path) => {
            let (config, text) = Config::from_file(path)?;
            (config, Some((path, text)))
        }
        None => (Config::default(), None),
    };
    init_logging(&config.logging);
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(role) = args.role {
        config.role = role;
    }
    // Checked here too, so what the file says wrong is named at its line.
    if let Some((path, text)) = &text {
        config.validate_file(path, text)?;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let address = listener.local_addr().context("reading the bound address")?;
    let keys = config.keys()?;
    let shutdown = CancellationToken::new();
    let state = chainsieve::app::start(&config, shutdown.clone()).await?;
    // Installed only now: until here a signal stops startup at once.
    let mut signals = Signals::install()?;
    announce(&address, &state, keys.first().map(String::as_str));
    let mut server = tokio::spawn(chainsieve_http::serve(listener, state));
    tokio::select! {
        () = signals.next() => {
            tracing::info!("shutting down: closing connections (a second signal stops at once)");
            shutdown.cancel();
            tokio::select! {
                stopped = server => stopped.context("joining the server task")?,
                () = signals.next() => {
                    tracing::warn!("second signal: stopping without waiting for connections and tasks");
                    Ok(())
                }
            }
        }
        // The server only stops by itself on an error.
        stopped = &mut server => stopped.context("joining the server task")?,
    }
}

/// Logs go to stderr (stdout carries the URLs), filtered by `RUST_LOG` or
/// else `log.level`, as text or JSON lines. A log line that cannot be
/// written (the collector behind stderr is gone) is dropped: reporting it
/// would itself write to stderr, and panic.
fn init_logging(log: &LoggingConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    // Colours only for a person at a terminal (and not against NO_COLOR):
    // a file, journald or a collector would keep the escape codes.
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .log_internal_errors(false);
    match log.format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
}

/// Prints where the server listens. Best effort: a closed stdout (the
/// output piped into `head`, say) must not stop the server.
fn announce(address: &SocketAddr, state: &chainsieve::AppState, key: Option<&str>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "chainsieve listening on http://{address}");
    // An ingest (no keys) serves only /healthz, /readyz and /metrics.
    let Some(key) = key else {
        let _ = writeln!(out, "  ingest: /healthz, /readyz, /metrics");
        let _ = out.flush();
        return;
    };
    for chain in state.chains.keys() {
        let _ = writeln!(out, "  {chain:<8} ws://{address}/{chain}/v1/{key}");
    }
    if key == chainsieve_config::DEMO_KEY {
        let _ = writeln!(
            out,
            "  (devnet with the demo key `demo`; configure [auth] keys for anything else)"
        );
    }
    let _ = out.flush();
}

/// SIGINT and SIGTERM, handled from before the server announces itself:
/// a signal sent the moment it says it listens stops it cleanly, instead
/// of killing it before its handlers exist.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// The next SIGINT or SIGTERM.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
