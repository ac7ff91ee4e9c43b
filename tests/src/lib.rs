//! Test harness: a real chainsieve server on `127.0.0.1:0` fed by a fast,
//! seeded devnet, and a WebSocket client that waits on events with timeouts
//! (never sleeps).

pub mod anvil;
pub mod applications;
pub mod bench;
pub mod book;
pub mod calls;
pub mod control;
pub mod cutter;
pub mod dex;
pub mod faulty;
pub mod filters;
pub mod floor;
pub mod load;
pub mod logs;
pub mod nats;
pub mod process;
pub mod receiver;
pub mod scripts;
pub mod typed;
pub mod uniswap;
mod ws;

pub use ws::WsClient;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chainsieve_config::{AuthConfig, ChainConfig, Config, Role, SourceConfig};
use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
use chainsieve_model::SourceState;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// How long any single expected event may take before a test fails.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The value of the sample `series` (`name{labels}`) in a Prometheus text
/// page.
pub fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.split(' ').next()?.parse().ok())
}

/// Devnet settings for tests: fast blocks, fixed seed and genesis time.
pub fn fast_devnet() -> DevnetSettings {
    DevnetSettings {
        seed: 42,
        block_time_ms: Some(150),
        genesis_timestamp: Some(1_700_000_000),
        // Tests start at block 0; the price tests ask for a past.
        history_blocks: 0,
        ..DevnetSettings::default()
    }
}

/// The default config (three devnet chains, demo key) with a fast devnet.
pub fn test_config() -> Config {
    Config {
        devnet: fast_devnet(),
        ..Config::default()
    }
}

/// A config whose chains are `chains` (name, chain id, source), accepting
/// the API key `key`: where every node test's config starts.
pub fn reading<'a>(
    key: &str,
    chains: impl IntoIterator<Item = (&'a str, u64, SourceConfig)>,
) -> Config {
    let chains = chains.into_iter().map(|(name, chain_id, source)| {
        let chain = ChainConfig {
            chain_id: Some(chain_id),
            source,
            ..ChainConfig::default()
        };
        (name.to_string(), chain)
    });
    Config {
        chains: chains.collect(),
        auth: AuthConfig {
            keys: vec![key.to_string()],
            ..AuthConfig::default()
        },
        ..Config::default()
    }
}

/// [`test_config`] with `limits` changed by `change`.
pub fn with_limits(change: impl FnOnce(&mut chainsieve_config::LimitsConfig)) -> Config {
    let mut config = test_config();
    change(&mut config.limits);
    config
}

/// A JSON-RPC quantity (`"0x1a"`) as a number.
pub fn quantity(value: &Value) -> u64 {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{value} is not a quantity"));
    u64::from_str_radix(text.trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("{text} is not a quantity: {e}"))
}

/// The block numbers of `heads` (`newHeads` results), each checked to be
/// the child of the one before.
pub fn chained_numbers(heads: &[Value]) -> Vec<u64> {
    for pair in heads.windows(2) {
        assert_eq!(
            pair[1]["parentHash"], pair[0]["hash"],
            "block {} is the child of the one before",
            pair[1]["number"]
        );
    }
    heads.iter().map(|head| quantity(&head["number"])).collect()
}

/// A running server; shut down when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub state: Arc<chainsieve::AppState>,
    pub config: Config,
    shutdown: CancellationToken,
    /// The serving task: it ends once every session and background task has
    /// (see [`TestServer::stop`]).
    serving: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        logs::global();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding 127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let state = chainsieve::app::start(&config, shutdown.clone()).await?;
        let serving = tokio::spawn(chainsieve_http::serve(listener, state.clone()));
        // Built before waiting, so a failed wait still shuts it down.
        let server = Self {
            addr,
            state,
            config,
            shutdown,
            serving: Some(serving),
        };
        // Every chain's past in place first, as a client waiting for
        // /readyz would: tests then see only live events. (An ingest
        // standing by has no past in place: its tests wait for it to
        // lead.)
        let chains = server.state.chains.iter();
        for (name, chain) in chains.filter(|_| server.config.role != Role::Ingest) {
            let mut synced = chain.synced();
            tokio::time::timeout(TIMEOUT, synced.wait_for(|synced| *synced))
                .await
                .with_context(|| format!("{name} synced in time"))?
                .with_context(|| format!("{name} running"))?;
        }
        Ok(server)
    }

    /// [`TestServer::start`] for a test: panics with the reason if the
    /// server does not start. Every test file starts its servers here.
    pub async fn started(config: Config) -> Self {
        Self::start(config)
            .await
            .unwrap_or_else(|error| panic!("the server starts: {error:#}"))
    }

    /// [`TestServer::started`], returning once every chain it reads from
    /// nodes is live: what a node announces from then on reaches the
    /// subscribers. An edge reads no node (the bus is its source) and is
    /// returned started; an ingest standing by never goes live, so its tests
    /// use [`TestServer::started`].
    pub async fn live(config: Config) -> Self {
        let server = Self::started(config).await;
        if server.config.role != Role::Edge {
            let chains = server.config.chains.iter();
            for (name, _) in chains.filter(|(_, c)| matches!(c.source, SourceConfig::Nodes(_))) {
                server.wait_live(name).await;
            }
        }
        server
    }

    pub async fn default() -> Self {
        Self::started(test_config()).await
    }

    pub fn ws_url(&self, chain: &str, key: &str) -> String {
        format!("ws://{}/{chain}/v1/{key}", self.addr)
    }

    pub fn http_url(&self, chain: &str, key: &str) -> String {
        format!("http://{}/{chain}/v1/{key}", self.addr)
    }

    /// The devnet generator this server runs for `chain_id` (same settings),
    /// to predict accounts and contracts.
    pub fn devnet(&self, chain_id: u64) -> Devnet {
        Devnet::new(chain_id, &self.config.devnet)
    }

    /// The first status of `chain`'s node source that `accept` takes,
    /// within [`TIMEOUT`]. Panics on a devnet chain (it has no node).
    pub async fn upstream_status(
        &self,
        chain: &str,
        accept: impl Fn(&SourceState) -> bool,
    ) -> SourceState {
        let mut status = self.state.chains[chain]
            .node_status()
            .expect("a node source reports its status");
        tokio::time::timeout(TIMEOUT, status.wait_for(accept))
            .await
            .expect("the status came in time")
            .expect("status channel open")
            .clone()
    }

    /// Waits until node `index` of `chain` is in state `state` (`live`,
    /// `down`, …, as `/readyz` names them), within [`TIMEOUT`].
    pub async fn node_state(&self, chain: &str, index: usize, state: &str) {
        let pool = self.state.chains[chain].node().expect("a node chain");
        let mut changes = pool.changes();
        let reached = || pool.states()[index].1.name() == state;
        tokio::time::timeout(TIMEOUT, changes.wait_for(|_| reached()))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{chain}'s node {index} {state} in time: {:?}",
                    pool.states()
                )
            })
            .expect("the pool lives");
    }

    /// Waits until each of `chain`'s first `count` nodes is live (counts
    /// toward agreement).
    pub async fn nodes_live(&self, chain: &str, count: usize) {
        for node in 0..count {
            self.node_state(chain, node, "live").await;
        }
    }

    /// `GET /readyz`: its status code and body.
    pub async fn readyz(&self) -> (u16, Value) {
        let response = reqwest::get(format!("http://{}/readyz", self.addr))
            .await
            .expect("readyz");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON body"))
    }

    /// `GET /metrics`: the page's text.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("http://{}/metrics", self.addr))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("the page's text")
    }

    /// Waits (within [`TIMEOUT`], reading `/metrics` every 10 ms) until the
    /// sample `series` (`name{labels}`) is `value`.
    pub async fn until_metric(&self, series: &str, value: f64) {
        let reached = async {
            while sample(&self.metrics().await, series) != Some(value) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(TIMEOUT, reached)
            .await
            .unwrap_or_else(|_| panic!("{series} reached {value} in time"));
    }

    /// Waits until `chain`'s node source is subscribed and following: what
    /// the node announces from then on reaches the subscribers (synced
    /// alone does not say so for a node chain, which has no past to place).
    pub async fn wait_live(&self, chain: &str) {
        self.upstream_status(chain, |s| *s == SourceState::Live)
            .await;
    }

    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Shuts down and returns once the server has let go of everything (its
    /// price databases among them), as a process exiting would.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(serving) = self.serving.take() {
            tokio::time::timeout(TIMEOUT, serving)
                .await
                .expect("the server stops in time")
                .expect("the serving task does not panic")
                .expect("the server stops cleanly");
        }
        // Dropping `self` lets go of the last handle on the server's state.
    }

    /// Waits, within [`TIMEOUT`], for the server to stop by itself (a
    /// critical task failed) and answers what serving it ended with.
    pub async fn stopped(mut self) -> anyhow::Result<()> {
        let serving = self.serving.take().expect("serving");
        tokio::time::timeout(TIMEOUT, serving)
            .await
            .expect("the server stops in time")
            .expect("the serving task does not panic")
    }

    /// Waits, within [`TIMEOUT`], until `done` holds of the supervisor's
    /// tasks (their standings change as they stop and start again).
    pub async fn tasks_until(&self, done: impl Fn(&chainsieve_runtime::tasks::Tasks) -> bool) {
        let tasks = &self.state.tasks;
        let mut changes = tasks.changes();
        tokio::time::timeout(TIMEOUT, changes.wait_for(|()| done(tasks)))
            .await
            .unwrap_or_else(|_| panic!("the tasks as expected in time: {:?}", tasks.standings()))
            .expect("the supervisor lives");
    }

    /// POSTs a JSON body and returns (status, parsed body or Null).
    pub async fn post(&self, chain: &str, key: &str, body: &str) -> (u16, Value) {
        let response = reqwest::Client::new()
            .post(self.http_url(chain, key))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("HTTP request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("HTTP body");
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).expect("JSON body")
        };
        (status, value)
    }

    /// Mines `chain`'s next block now (`evm_mine` over HTTP with `key`), as
    /// a test that steps a devnet block by block does: with a long block
    /// time, only the blocks it asks for come.
    pub async fn mine(&self, chain: &str, key: &str) {
        let (status, answer) = self
            .post(
                chain,
                key,
                r#"{"jsonrpc":"2.0","id":1,"method":"evm_mine"}"#,
            )
            .await;
        assert_eq!(
            (status, &answer["result"]),
            (200, &json!("0x0")),
            "{answer}"
        );
    }
}

/// A devnet whose blocks come only when a test mines them
/// ([`TestServer::mine`]): an hour between blocks otherwise.
pub fn stepped_devnet() -> DevnetSettings {
    DevnetSettings {
        block_time_ms: Some(3_600_000),
        ..fast_devnet()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Lowercase `0x` hex of an address.
pub fn hex_address(address: &alloy_primitives::Address) -> String {
    format!("{address:#x}")
}

/// Notifications of `subscription` among `all`, in order.
pub fn of<'a>(all: &'a [(String, Value)], subscription: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|(s, _)| s == subscription)
        .map(|(_, v)| v)
        .collect()
}

/// Checks a filtered subscription against an unfiltered control made after
/// it on the same connection (so every event the control saw was offered to
/// the filtered one too): among the events the control saw, the filtered
/// subscription got exactly those satisfying `matches`, in order, each
/// identified by `key`. Returns how many that was.
pub fn assert_exact_filter(
    all: &[(String, Value)],
    filtered: &str,
    control: &str,
    key: impl Fn(&Value) -> String,
    matches: impl Fn(&Value) -> bool,
) -> usize {
    let control_events = of(all, control);
    let seen: std::collections::HashSet<String> = control_events.iter().map(|v| key(v)).collect();
    let expected: Vec<String> = control_events
        .iter()
        .filter(|v| matches(v))
        .map(|v| key(v))
        .collect();
    let got: Vec<String> = of(all, filtered)
        .into_iter()
        .map(&key)
        .filter(|k| seen.contains(k))
        .collect();
    assert_eq!(
        got, expected,
        "the filtered subscription must get exactly the matching events"
    );
    for event in of(all, filtered) {
        assert!(
            matches(event),
            "a notification that does not match the filter: {event}"
        );
    }
    expected.len()
}
