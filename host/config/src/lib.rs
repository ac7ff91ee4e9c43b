//! The TOML configuration (`chainsieve --config FILE`). Every key is
//! optional; [`Config::default`] is what runs with no file at all: the
//! devnet on Ethereum, BNB Chain and Polygon, and the demo key.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_filter_core`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use chainsieve_filter_core::params;
use serde::{Deserialize, Serialize};

mod bus;
mod devnet;
mod lifecycle;
mod located;
mod nodes;
mod plans;
mod rpc;
mod span;
mod usage;
mod watchlists;
mod webhooks;
pub use bus::{BusConfig, Role};
pub use devnet::DevnetSettings;
pub use lifecycle::LifecycleConfig;
use located::in_range;
pub use nodes::{
    Agreement, ChainConfig, MIN_STALL, NodeConfig, NodeSpec, NodesSpec, SourceConfig, SourceSpec,
};
pub use plans::{DEFAULT_PLAN, PlanConfig, check_chains, check_methods, is_plain_name};
pub use rpc::RpcConfig;
use span::duration_text;
pub use span::{Span, cadence};
pub use usage::UsageConfig;
pub use watchlists::WatchlistsConfig;
pub use webhooks::WebhooksConfig;

/// How far back a chain keeps its recent blocks by default
/// (`chains.<name>.window`): a quarter of an hour on every chain (75
/// blocks of Ethereum, 450 of Polygon, 2,000 of BNB Chain); deeper reorgs
/// resynchronise.
pub const DEFAULT_WINDOW: Span = Span::Time(Duration::from_secs(15 * 60));

/// How far back each chain's event log reaches by default (`log.window`):
/// an hour on every chain (300 blocks of Ethereum, 1,800 of Polygon, 8,000
/// of BNB Chain), within `log.memory_mib`.
pub const DEFAULT_LOG_WINDOW: Span = Span::Time(Duration::from_secs(60 * 60));

/// The key that works when no keys are configured and every chain runs on
/// the devnet. Never accepted when any chain reads a real node.
pub const DEMO_KEY: &str = "demo";

/// The chain served at `/v1/<key>` without a prefix.
pub const DEFAULT_CHAIN: &str = "eth";

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// What this process does: `all` (default), or `ingest` or `edge` on
    /// the bus (`[bus]`).
    pub role: Role,
    /// Address of the one listener serving every chain.
    pub listen: SocketAddr,
    /// The one directory for what the server keeps across restarts
    /// (docs/src/configuration.md, The data directory): each node chain's
    /// event log and price history, each devnet chain's archive, the
    /// filter compilations (so a restart does not compile again), and on a
    /// server of role `all` its keys, usage, webhooks, uploaded filters
    /// and watchlists, a file each. Created when missing. Unset: all of it in memory.
    /// `[log] data_dir` is its earlier name.
    pub data_dir: Option<PathBuf>,
    pub auth: AuthConfig,
    pub filters: FiltersConfig,
    /// Chains by URL prefix (`/eth/v1/<key>`); absent: eth, bsc and polygon
    /// on the devnet.
    pub chains: BTreeMap<String, ChainConfig>,
    pub devnet: DevnetSettings,
    pub limits: LimitsConfig,
    /// What API keys on each plan may do (`[plans.<name>]`); the plan
    /// `default` exists even when not written.
    pub plans: BTreeMap<String, PlanConfig>,
    pub price: PriceConfig,
    pub log: LogConfig,
    pub history: HistoryConfig,
    pub bus: BusConfig,
    /// What node-fed chains forward to their node.
    pub rpc: RpcConfig,
    pub webhooks: WebhooksConfig,
    pub watchlists: WatchlistsConfig,
    /// Following transactions' lives.
    pub lifecycle: LifecycleConfig,
    /// Counting what each key used.
    pub usage: UsageConfig,
    pub logging: LoggingConfig,
}

/// Each chain's event log: the window a resuming subscription reaches back
/// into (docs/src/architecture.md, The event log).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// How far back each chain's log reaches, with every step in it
    /// (pending batches, removals): blocks added, or a span of time each
    /// chain turns into blocks at its cadence. `blocks` is the key's
    /// earlier name.
    #[serde(alias = "blocks")]
    pub window: Span,
    /// The most memory, roughly, one chain's window holds; past it the
    /// oldest steps go first, whatever `blocks` says.
    pub memory_mib: u64,
    /// The earlier name of the top-level `data_dir`, read as it with a
    /// warning ([`Config::warnings`]).
    pub data_dir: Option<PathBuf>,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            window: DEFAULT_LOG_WINDOW,
            memory_mib: 256,
            data_dir: None,
        }
    }
}

/// History from the nodes: `fromBlock` older than a chain's log window
/// (docs/src/api.md, History from the nodes).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// How far behind the chain's tip a `fromBlock` may be; further back is
    /// refused (-32001). The default reaches a month of Ethereum and a day
    /// of BNB Chain.
    pub max_blocks: u64,
    /// History streams reading the nodes at once on the server; one more
    /// is refused (-32005) until one reaches the log.
    pub max_streams: usize,
    /// The same, per API key.
    pub max_streams_per_key: usize,
    /// Calls a second the history streams of a chain may make of each of
    /// its nodes, together (a block costs two); what is left is live
    /// ingest's and the forwarded calls'. Lower it for a hosted node billed
    /// per call.
    pub calls_per_second_per_node: u32,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            max_blocks: 250_000,
            max_streams: 32,
            max_streams_per_key: 4,
            calls_per_second_per_node: 10_000,
        }
    }
}

impl HistoryConfig {
    fn validate(&self) -> anyhow::Result<()> {
        in_range("history.max_blocks", self.max_blocks, 1, 100_000_000)?;
        in_range("history.max_streams", self.max_streams as u64, 1, 100_000)?;
        in_range(
            "history.max_streams_per_key",
            self.max_streams_per_key as u64,
            1,
            100_000,
        )?;
        in_range(
            "history.calls_per_second_per_node",
            u64::from(self.calls_per_second_per_node),
            1,
            1_000_000,
        )
    }
}

/// What the server logs, and how. `RUST_LOG`, when set, overrides `level`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LoggingConfig {
    /// A `tracing` filter: `info`, `warn`, `chainsieve=debug,info`, …
    pub level: String,
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

impl LogConfig {
    fn validate(&self) -> anyhow::Result<()> {
        in_range("log.memory_mib", self.memory_mib, 1, 1 << 20)
    }
}

impl LoggingConfig {
    fn validate(&self) -> anyhow::Result<()> {
        tracing_subscriber::EnvFilter::try_new(&self.level)
            .with_context(|| format!("logging.level {:?} is not a tracing filter", self.level))?;
        Ok(())
    }
}

/// Log lines for people (`text`) or for collectors (`json`, one object a
/// line with the event's fields).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for Config {
    fn default() -> Self {
        let chains = [("eth", 1), ("bsc", 56), ("polygon", 137)]
            .into_iter()
            .map(|(name, chain_id)| {
                (
                    name.to_string(),
                    ChainConfig {
                        chain_id: Some(chain_id),
                        ..Default::default()
                    },
                )
            })
            .collect();
        Self {
            role: Role::All,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: None,
            auth: AuthConfig::default(),
            filters: FiltersConfig::default(),
            chains,
            devnet: DevnetSettings::default(),
            limits: LimitsConfig::default(),
            plans: BTreeMap::new(),
            price: PriceConfig::default(),
            log: LogConfig::default(),
            history: HistoryConfig::default(),
            bus: BusConfig::default(),
            rpc: RpcConfig::default(),
            webhooks: WebhooksConfig::default(),
            watchlists: WatchlistsConfig::default(),
            lifecycle: LifecycleConfig::default(),
            usage: UsageConfig::default(),
            logging: LoggingConfig::default(),
        }
    }
}

/// The error for keys an earlier version read elsewhere, if `text` has
/// any: `[log]` configured logging before it configured the event log.
fn moved_keys(text: &str) -> Option<anyhow::Error> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let log = table.get("log")?.as_table()?;
    let moved = ["level", "format"]
        .into_iter()
        .find(|key| log.contains_key(*key))?;
    Some(anyhow::anyhow!(
        "[log] {moved} moved to [logging] {moved}: [log] now configures the event log (blocks, memory_mib)"
    ))
}

/// Where `token_price` keeps its history, and what it may ask the nodes.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PriceConfig {
    /// Node calls one `token_price` may make for what the index does not
    /// hold (the block of an old time, a pair's pools and their state);
    /// past it, -32005. Default 64.
    pub max_node_calls: u32,
    /// Node calls all `token_price` requests of a chain may make a second
    /// together; past it, -32005 until the next second's. Default 200.
    pub node_calls_per_second: u32,
    /// Where node chains keep their `token_price` history instead of the
    /// top-level `data_dir` (the earlier setting, read with a warning:
    /// [`Config::warnings`]).
    pub data_dir: Option<PathBuf>,
}

impl Default for PriceConfig {
    fn default() -> Self {
        Self {
            max_node_calls: 64,
            node_calls_per_second: 200,
            data_dir: None,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// API keys accepted in the URL path. None configured and every chain
    /// on the devnet: the key `demo` works.
    pub keys: Vec<String>,
    /// The bearer token of the admin endpoints (`GET /admin/filters`).
    /// Unset: they answer 404.
    pub admin_token: Option<String>,
}

impl AuthConfig {
    fn validate(&self) -> anyhow::Result<()> {
        if self
            .admin_token
            .as_ref()
            .is_some_and(|token| token.len() < 16)
        {
            bail!("auth.admin_token must be at least 16 characters");
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct FiltersConfig {
    /// Extra filter components (`*.wasm`), loaded at startup; a topic here
    /// replaces the built-in one. A missing directory is no error.
    pub dir: PathBuf,
    /// The longest one call into a filter may run before it is interrupted.
    pub call_timeout_ms: u64,
    /// The most linear memory one filter instance may grow to.
    pub memory_limit_mib: u64,
    /// The most values (addresses, topics, selectors) one subscription's
    /// filter may name; passed to every component (see
    /// `chainsieve_filter_core::params::max_filter_values`).
    pub max_values: u64,
    /// The longest payload a 0.2 component may write for one match; a
    /// longer one is a bad answer (docs/src/architecture.md, Filter contract
    /// v0.2).
    pub max_payload_bytes: u64,
}

impl Default for FiltersConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("filters"),
            call_timeout_ms: 1_000,
            memory_limit_mib: 256,
            max_values: params::DEFAULT_MAX_FILTER_VALUES as u64,
            max_payload_bytes: 64 << 10,
        }
    }
}

impl FiltersConfig {
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    fn validate(&self) -> anyhow::Result<()> {
        in_range(
            "filters.call_timeout_ms",
            self.call_timeout_ms,
            1,
            3_600_000,
        )?;
        in_range("filters.memory_limit_mib", self.memory_limit_mib, 1, 4_096)?;
        in_range("filters.max_values", self.max_values, 1, 1_000_000)?;
        in_range(
            "filters.max_payload_bytes",
            self.max_payload_bytes,
            2,
            16 << 20,
        )
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Frames a connection may have waiting to be written; a subscriber
    /// that falls this far behind is closed (code 1008) rather than
    /// slowing anyone else.
    pub outbound_queue: usize,
    /// Requests in one JSON-RPC batch.
    pub max_batch: usize,
    /// Bytes in one HTTP body or WebSocket frame.
    pub max_request_bytes: usize,
    /// Seconds between server pings on a WebSocket (busy or idle).
    pub ping_interval_secs: u64,
    /// Live subscriptions one WebSocket connection may hold.
    pub max_subscriptions_per_connection: usize,
    /// Open WebSocket connections one API key may hold.
    pub max_connections_per_key: usize,
    /// JSON-RPC calls per second one API key may make (over HTTP and every
    /// connection together); a burst of one second's worth is allowed.
    pub requests_per_second_per_key: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            outbound_queue: 4_096,
            max_batch: 1_000,
            max_request_bytes: 1 << 20,
            ping_interval_secs: 30,
            max_subscriptions_per_connection: 1_024,
            max_connections_per_key: 1_000,
            requests_per_second_per_key: 1_000,
        }
    }
}

impl LimitsConfig {
    fn validate(&self) -> anyhow::Result<()> {
        in_range(
            "limits.outbound_queue",
            self.outbound_queue as u64,
            1,
            1 << 20,
        )?;
        in_range("limits.max_batch", self.max_batch as u64, 1, 100_000)?;
        in_range(
            "limits.max_request_bytes",
            self.max_request_bytes as u64,
            1_024,
            1 << 30,
        )?;
        in_range(
            "limits.ping_interval_secs",
            self.ping_interval_secs,
            1,
            86_400,
        )?;
        in_range(
            "limits.max_subscriptions_per_connection",
            self.max_subscriptions_per_connection as u64,
            1,
            1_000_000,
        )?;
        in_range(
            "limits.max_connections_per_key",
            self.max_connections_per_key as u64,
            1,
            10_000_000,
        )?;
        in_range(
            "limits.requests_per_second_per_key",
            u64::from(self.requests_per_second_per_key),
            1,
            10_000_000,
        )
    }
}

/// The blocks `span` (the value of `key`) holds at `block_time`, between 1
/// and `most`.
fn blocks_in(key: &str, span: Span, block_time: Duration, most: u64) -> anyhow::Result<usize> {
    let blocks = span.blocks(block_time);
    if !(1..=most).contains(&blocks) {
        return Err(located::invalid(
            key,
            format!(
                "{key} must hold between 1 and {most} blocks, got {span} ({blocks} blocks of {})",
                duration_text(block_time)
            ),
        ));
    }
    Ok(usize::try_from(blocks).unwrap_or(usize::MAX))
}

/// A chain as the server runs it: config with defaults resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainSpec {
    pub name: String,
    pub chain_id: u64,
    pub source: SourceSpec,
    /// How often the chain makes a block: the devnet's setting, else the
    /// chain's [`cadence`].
    pub block_time: Duration,
    /// Recent blocks kept (`chains.<name>.window` at `block_time`).
    pub window: usize,
    /// Blocks the event log keeps (`log.window` at `block_time`).
    pub log_blocks: usize,
    pub price_from_block: Option<u64>,
}

impl Config {
    /// Reads the file at `path`; its text is kept for
    /// [`Config::validate_file`].
    pub fn from_file(path: &Path) -> anyhow::Result<(Self, String)> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        let config =
            Self::from_toml(&text).with_context(|| format!("in config {}", path.display()))?;
        Ok((config, text))
    }

    /// [`Config::validate`] of a config read from `path` (whose text is
    /// `text`): an error names the file, and the line of the key refused.
    pub fn validate_file(&self, path: &Path, text: &str) -> anyhow::Result<Vec<ChainSpec>> {
        self.validate()
            .map_err(|error| located::locate(error, path, text))
    }

    /// The server's data directory: `data_dir`, or `[log] data_dir`, its
    /// earlier name.
    pub fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref().or(self.log.data_dir.as_deref())
    }

    /// Where node chains keep their `token_price` history: `[price]
    /// data_dir` where an earlier file sets it, the data directory
    /// otherwise.
    pub fn price_dir(&self) -> Option<&Path> {
        self.price.data_dir.as_deref().or(self.data_dir())
    }

    /// What the file says in an earlier way that still works, one line
    /// each, for the start to log.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(dir) = &self.log.data_dir {
            warnings.push(format!(
                "[log] data_dir is read as data_dir, the server's one data directory (it holds the keys, usage, webhooks, uploaded filters and devnet archives too): write data_dir = {:?} at the top of the file instead",
                dir.display().to_string()
            ));
        }
        if let Some(dir) = &self.price.data_dir {
            warnings.push(format!(
                "[price] data_dir keeps token_price history in {} apart from the data directory: write data_dir at the top of the file instead, which holds it with everything else the server keeps",
                dir.display()
            ));
        }
        warnings
    }

    /// Reads `text`; what it says is checked by [`Config::validate`] once
    /// the command line has had its say.
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        toml::from_str(text)
            .map_err(|error| moved_keys(text).unwrap_or_else(|| anyhow::Error::new(error)))
            .context("parsing TOML")
    }

    /// Checks everything a server needs before anything starts (called
    /// once, by `chainsieve::app::start`, after the command line's overrides):
    /// each section checks its own keys, then what spans sections (chains
    /// against the role and the devnet, keys against the sources). An
    /// out-of-range value is refused here, naming the key and the range,
    /// rather than overflowing or panicking later. Answers the chains as
    /// they will run.
    pub fn validate(&self) -> anyhow::Result<Vec<ChainSpec>> {
        if self.data_dir.is_some() && self.log.data_dir.is_some() {
            return Err(located::invalid(
                "log.data_dir",
                "log.data_dir is the earlier name of data_dir: set data_dir alone",
            ));
        }
        let specs = self.chain_specs()?;
        self.keys()?;
        self.auth.validate()?;
        self.filters.validate()?;
        self.limits.validate()?;
        plans::validate(&self.plans, specs.iter().map(|spec| spec.name.as_str()))?;
        self.log.validate()?;
        self.history.validate()?;
        in_range(
            "price.max_node_calls",
            u64::from(self.price.max_node_calls),
            1,
            10_000,
        )?;
        in_range(
            "price.node_calls_per_second",
            u64::from(self.price.node_calls_per_second),
            1,
            1_000_000,
        )?;
        self.devnet.validate()?;
        self.rpc.validate()?;
        self.webhooks.validate()?;
        self.watchlists.validate()?;
        self.lifecycle.validate()?;
        self.usage.validate()?;
        self.logging.validate()?;
        if self.role != Role::All {
            self.bus.validate()?;
        }
        if self.role == Role::Ingest
            && let Some(spec) = specs.iter().find(|s| s.source == SourceSpec::Devnet)
        {
            bail!(
                "role ingest reads nodes, but chain {}'s source is the devnet (which generates its history afresh at every start, so it cannot continue a log on the bus): set chains.{}.source to a node's ws:// URL",
                spec.name,
                spec.name
            );
        }
        if self.devnet.reorg_every > 0 {
            for spec in specs.iter().filter(|s| s.source == SourceSpec::Devnet) {
                // The tracker must hold the reorg's common ancestor.
                let most = (spec.window as u64).saturating_sub(1);
                if self.devnet.reorg_depth > most {
                    bail!(
                        "devnet.reorg_depth {} is deeper than chain {}'s window of {} blocks allows (at most {most})",
                        self.devnet.reorg_depth,
                        spec.name,
                        spec.window
                    );
                }
            }
        }
        Ok(specs)
    }

    /// The chains with defaults resolved, validated.
    pub fn chain_specs(&self) -> anyhow::Result<Vec<ChainSpec>> {
        if self.chains.is_empty() {
            bail!("no chains configured");
        }
        self.chains
            .iter()
            .map(|(name, chain)| {
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
                    bail!("chain name \"{name}\" must be lowercase letters, digits or '-' (it is a URL prefix)");
                }
                if name == "v1" {
                    bail!("chain name \"v1\" would clash with the default chain's URL /v1/<key>");
                }
                let known = match name.as_str() {
                    "eth" => Some(1),
                    "bsc" => Some(56),
                    "polygon" => Some(137),
                    _ => None,
                };
                let chain_id = chain.chain_id.or(known).ok_or_else(|| {
                    located::invalid(
                        format!("chains.{name}.chain_id"),
                        format!("chains.{name}.chain_id is missing: chain \"{name}\" needs a chain_id (only eth, bsc and polygon have known ones)"),
                    )
                })?;
                let on_devnet = chain.source == SourceConfig::Devnet && chain.nodes.is_empty();
                let block_time = match self.devnet.block_time_ms {
                    Some(ms) if on_devnet => Duration::from_millis(ms.max(1)),
                    _ => cadence(chain_id),
                };
                let source = nodes::source(name, chain, block_time)?;
                let window = blocks_in(
                    &format!("chains.{name}.window"),
                    chain.window.unwrap_or(DEFAULT_WINDOW),
                    block_time,
                    1_000_000,
                )?;
                let log_blocks = blocks_in("log.window", self.log.window, block_time, 10_000_000)
                    .with_context(|| format!("the event log's window on chain {name}"))?;
                Ok(ChainSpec {
                    name: name.clone(),
                    chain_id,
                    source,
                    block_time,
                    window,
                    log_blocks,
                    price_from_block: chain.price_from_block,
                })
            })
            .collect()
    }

    /// The accepted API keys: the configured ones, or the demo key when
    /// none are configured and one process runs every chain on the devnet.
    pub fn keys(&self) -> anyhow::Result<Vec<String>> {
        // An ingest serves no client: only its probes and metrics.
        if !self.auth.keys.is_empty() || self.role == Role::Ingest {
            if self
                .auth
                .keys
                .iter()
                .any(|k| k.is_empty() || k.contains('/'))
            {
                bail!("API keys must be non-empty and contain no '/'");
            }
            return Ok(self.auth.keys.clone());
        }
        if self.role == Role::All
            && self
                .chains
                .values()
                .all(|c| c.source == SourceConfig::Devnet && c.nodes.is_empty())
        {
            Ok(vec![DEMO_KEY.to_string()])
        } else {
            bail!(
                "[auth] keys must be set: the demo key only works when one process (role all) runs every chain on the devnet"
            )
        }
    }

    /// The chain served at `/v1/<key>`: eth if configured, else the first.
    pub fn default_chain(&self) -> Option<&str> {
        self.chains
            .get_key_value(DEFAULT_CHAIN)
            .or_else(|| self.chains.iter().next())
            .map(|(k, _)| k.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads and checks `text`, as a server's start does.
    fn load(text: &str) -> anyhow::Result<Config> {
        let config = Config::from_toml(text)?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn no_config_is_three_devnet_chains_and_the_demo_key() {
        let config = load("").expect("empty config");
        assert_eq!(config, Config::default());
        let specs = config.chain_specs().expect("valid");
        let ids: Vec<_> = specs
            .iter()
            .map(|s| (s.name.as_str(), s.chain_id))
            .collect();
        assert_eq!(ids, vec![("bsc", 56), ("eth", 1), ("polygon", 137)]);
        assert_eq!(config.keys().expect("demo"), vec!["demo"]);
        assert_eq!(config.default_chain(), Some("eth"));
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn one_data_directory_its_earlier_names_read_with_a_warning() {
        let config = load(r#"data_dir = "/var/lib/chainsieve""#).expect("valid");
        assert_eq!(config.data_dir(), Some(Path::new("/var/lib/chainsieve")));
        assert_eq!(config.price_dir(), config.data_dir());
        assert!(config.warnings().is_empty());
        let none = load("").expect("valid");
        assert_eq!((none.data_dir(), none.price_dir()), (None, None));

        let earlier = load("[log]\ndata_dir = \"old\"\n[price]\ndata_dir = \"prices\"")
            .expect("the earlier keys still work");
        assert_eq!(earlier.data_dir(), Some(Path::new("old")));
        assert_eq!(earlier.price_dir(), Some(Path::new("prices")));
        let warnings = earlier.warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("[log] data_dir is read as data_dir")
                && warnings[0].contains(r#"write data_dir = "old" at the top"#),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[1].starts_with("[price] data_dir keeps token_price history in prices"),
            "{}",
            warnings[1]
        );

        // Both names at once: refused at the earlier one's line.
        let text = "data_dir = \"a\"\n[log]\ndata_dir = \"b\"\n";
        let both = Config::from_toml(text).expect("parses");
        let error = both
            .validate_file(Path::new("chainsieve.toml"), text)
            .expect_err("two data directories");
        assert_eq!(
            format!("{error:#}"),
            "in config chainsieve.toml:3 (log.data_dir): log.data_dir is the earlier name of data_dir: set data_dir alone"
        );
    }

    #[test]
    fn full_example_parses() {
        let config = load(
            r#"
            listen = "0.0.0.0:9000"
            [auth]
            keys = ["k1", "k2"]
            [filters]
            dir = "/etc/chainsieve/filters"
            [chains.eth]
            chain_id = 1
            source = "ws://127.0.0.1:8546"
            [chains.base]
            chain_id = 8453
            source = "devnet"
            [devnet]
            seed = 7
            block_time_ms = 250
            [limits]
            outbound_queue = 16
            "#,
        )
        .expect("valid config");
        assert_eq!(
            config.chains["eth"].source,
            SourceConfig::node("ws://127.0.0.1:8546")
        );
        assert_eq!(config.keys().expect("keys"), vec!["k1", "k2"]);
        assert_eq!(config.limits.outbound_queue, 16);
        assert_eq!(config.limits.max_batch, 1_000);
        assert_eq!(config.devnet.seed, 7);
        assert_eq!(config.chain_specs().expect("valid")[0].chain_id, 8453);
    }

    #[test]
    fn mistakes_are_explained() {
        let err = |toml: &str| format!("{:#}", load(toml).expect_err("invalid"));
        assert!(
            err("[chains.eth]\nsource = \"http://x\"")
                .contains("must be \"devnet\", a ws:// or wss:// URL, or a list of them")
        );
        assert!(
            err("[chains.base]\nsource = \"devnet\"").contains("chain \"base\" needs a chain_id")
        );
        assert!(err("[chains.Eth]\nchain_id = 1").contains("lowercase"));
        assert!(err("[chains.eth]\nsource = \"ws://node:8546\"").contains("demo key only works"));
        assert!(err("listen = 5").contains("listen"));
        assert!(err("[auth]\nkeyz = []").contains("unknown field"));
        // A node's HTTP endpoint was once read and never used.
        assert!(err("[chains.eth]\nhttp = \"http://node:8545\"").contains("unknown field `http`"));
    }

    /// The roles on the bus: an edge needs keys (it serves node data), an
    /// ingest needs node sources, and `[bus]` is read.
    #[test]
    fn roles_on_the_bus() {
        let node = "[chains.eth]\nsource = \"ws://node:8546\"\n";
        let config = load(&format!(
            "role = \"edge\"\n[auth]\nkeys = [\"k\"]\n[bus]\nurls = [\"nats://10.0.0.1:4222\"]\nprefix = \"prod\"\n{node}"
        ))
        .expect("an edge");
        assert_eq!(
            (config.role, config.bus.prefix.as_str()),
            (Role::Edge, "prod")
        );
        let err = |toml: &str| format!("{:#}", load(toml).expect_err("invalid"));
        assert!(err("role = \"edge\"").contains("demo key only works when one process"));
        assert!(
            err("role = \"ingest\"\n[auth]\nkeys = [\"k\"]")
                .contains("role ingest reads nodes, but chain bsc's source is the devnet")
        );
        assert!(
            err(&format!(
                "role = \"edge\"\n[auth]\nkeys = [\"k\"]\n[bus]\nlease_ms = 1\n{node}"
            ))
            .contains("bus.lease_ms must be between 100 and 600000")
        );
        assert!(err("role = \"spare\"").contains("role"));
        // An ingest serves no client: it needs no keys.
        let ingest = "role = \"ingest\"\n[chains.eth]\nsource = \"ws://node:8546\"\n";
        load(ingest).expect("an ingest without [auth] keys");
    }

    /// Numbers the server could not run with are refused up front, naming
    /// the key and the range, instead of overflowing or panicking later.
    #[test]
    fn numbers_out_of_range_are_refused() {
        let err = |toml: &str| format!("{:#}", load(toml).expect_err("invalid"));
        for (toml, expected) in [
            (
                "[limits]\nping_interval_secs = 18446744073709551615",
                "limits.ping_interval_secs must be between 1 and 86400, got 18446744073709551615",
            ),
            (
                "[limits]\noutbound_queue = 0",
                "limits.outbound_queue must be between 1 and 1048576, got 0",
            ),
            (
                "[limits]\noutbound_queue = 4611686018427387904",
                "limits.outbound_queue must be between 1 and 1048576",
            ),
            (
                "[limits]\nmax_batch = 0",
                "limits.max_batch must be between 1",
            ),
            (
                "[devnet]\npending_batches_per_block = 4294967295",
                "devnet.pending_batches_per_block must be between 0 and 1000",
            ),
            (
                "[devnet]\nblock_time_ms = 0",
                "devnet.block_time_ms must be between 1",
            ),
            (
                "[limits]\nrequests_per_second_per_key = 0",
                "limits.requests_per_second_per_key must be between 1",
            ),
            (
                "[limits]\nmax_subscriptions_per_connection = 0",
                "limits.max_subscriptions_per_connection must be between 1",
            ),
            (
                "[limits]\nmax_connections_per_key = 0",
                "limits.max_connections_per_key must be between 1",
            ),
            (
                "[filters]\ncall_timeout_ms = 0",
                "filters.call_timeout_ms must be between 1 and 3600000, got 0",
            ),
            (
                "[filters]\nmemory_limit_mib = 5000",
                "filters.memory_limit_mib must be between 1 and 4096, got 5000",
            ),
            (
                "[filters]\nmax_values = 0",
                "filters.max_values must be between 1 and 1000000, got 0",
            ),
            (
                "[logging]\nlevel = \"chainsieve=loud\"",
                "logging.level \"chainsieve=loud\" is not a tracing filter",
            ),
            (
                "[log]\nlevel = \"debug\"",
                "[log] level moved to [logging] level",
            ),
            (
                "[log]\nblocks = 0",
                "the event log's window on chain bsc: log.window must hold between 1 and 10000000 blocks, got 0",
            ),
            (
                "[log]\nwindow = \"2000h\"",
                "the event log's window on chain bsc: log.window must hold between 1 and 10000000 blocks, got \"2000h\" (16000000 blocks of 450ms)",
            ),
            ("[log]\nmemory_mib = 0", "log.memory_mib must be between 1"),
            (
                "[auth]\nadmin_token = \"short\"",
                "auth.admin_token must be at least 16 characters",
            ),
            (
                "[chains.eth]\nwindow = 0",
                "chains.eth.window must hold between 1 and 1000000 blocks, got 0",
            ),
            (
                "[devnet]\nreorg_every = 5\nreorg_depth = 8\n[chains.eth]\nwindow = 8",
                "devnet.reorg_depth 8 is deeper than chain eth's window of 8 blocks allows (at most 7)",
            ),
        ] {
            let message = err(toml);
            assert!(message.contains(expected), "{toml}: {message}");
        }
        // The edges themselves are fine.
        load("[limits]\noutbound_queue = 1\nping_interval_secs = 86400").expect("valid edges");
        let logged = load(
            "[logging]\nlevel = \"chainsieve=debug,warn\"\nformat = \"json\"\n[log]\nblocks = 64",
        )
        .expect("a filter, a format and a window");
        assert_eq!(logged.logging.format, LogFormat::Json);
        assert_eq!(
            logged.log.window,
            Span::Blocks(64),
            "the key's earlier name"
        );
        let specs = load("[chains.eth]\nwindow = \"1m\"\n[chains.bsc]\n[log]\nwindow = \"2m\"")
            .expect("durations")
            .validate()
            .expect("valid");
        let blocks: Vec<(u64, usize, usize)> = specs
            .iter()
            .map(|s| (s.block_time.as_millis() as u64, s.window, s.log_blocks))
            .collect();
        // bsc: the default quarter of an hour, and two minutes of log;
        // eth: a minute or two is fewer than a duration's least.
        assert_eq!(blocks, vec![(450, 2_000, 267), (12_000, 64, 64)]);
        assert!(load("[logging]\nformat = \"xml\"").is_err());
    }
}
