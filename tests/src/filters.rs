//! Filter components for tests: the evil guest patched into any topic, a
//! filters directory written the way an operator should (atomically), and
//! a wait for the server to have applied a change.

use std::path::Path;

use anyhow::{Context, bail};
use chainsieve::AppState;
use chainsieve_config::{Config, FiltersConfig};
use chainsieve_evil_filter::{CONFIG_LEN, CONFIG_MARKER};
use chainsieve_filters::registry::BUILT_FILTERS_DIR;
use serde_json::Value;

use crate::TIMEOUT;

/// The test config (fast devnet) with `dir` as the filters directory.
pub fn watching(dir: &Path) -> Config {
    Config {
        filters: FiltersConfig {
            dir: dir.to_path_buf(),
            ..FiltersConfig::default()
        },
        devnet: crate::fast_devnet(),
        ..Config::default()
    }
}

/// A built component of `target/filters` (built-ins and examples).
pub fn built(file: &str) -> Vec<u8> {
    read(&Path::new(BUILT_FILTERS_DIR).join(file))
}

/// A test-only component of `target/test-filters` (never where an
/// operator copies filters from), built by this crate's `build.rs`.
pub fn test_filter(file: &str) -> Vec<u8> {
    read(&Path::new(env!("CHAINSIEVE_TEST_FILTERS_DIR")).join(file))
}

/// The contract 0.1 builds of the built-ins' rules, by topic: tested
/// beside the 0.2 built-ins (test-only components).
pub const V0_1_BUILDS: &[(&str, &str)] = &[
    (
        "bvPendingTransactions",
        "chainsieve_bv_pending_transactions.wasm",
    ),
    (
        "bvMinedTransactions",
        "chainsieve_bv_mined_transactions.wasm",
    ),
    (
        "newPendingTransactions",
        "chainsieve_new_pending_transactions_filter.wasm",
    ),
    ("newHeads", "chainsieve_new_heads_filter.wasm"),
    ("logs", "chainsieve_logs_filter.wasm"),
];

/// The contract 0.1 build of built-in `topic`: (file, bytes).
pub fn v0_1_build(topic: &str) -> (&'static str, Vec<u8>) {
    let (_, file) = V0_1_BUILDS
        .iter()
        .find(|(t, _)| *t == topic)
        .unwrap_or_else(|| panic!("no 0.1 build of {topic}"));
    (file, test_filter(file))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The evil guest with `config` (its JSON configuration, e.g.
/// `{"topic": "newHeads", "source": "heads", "only_even": true}`) patched
/// in: a real component declaring whatever the test needs.
pub fn evil_filter(config: &Value) -> Vec<u8> {
    let mut bytes = test_filter("chainsieve_evil_filter.wasm");
    let json = config.to_string();
    assert!(json.len() <= CONFIG_LEN, "evil config too long: {json}");
    let at = bytes
        .windows(CONFIG_MARKER.len())
        .position(|w| w == CONFIG_MARKER)
        .expect("the evil guest carries its config marker")
        + CONFIG_MARKER.len();
    let slot = &mut bytes[at..at + CONFIG_LEN];
    slot.fill(b' ');
    slot[..json.len()].copy_from_slice(json.as_bytes());
    bytes
}

/// Puts `bytes` at `dir/name` in one step (written beside it, then
/// renamed), as an operator should, so the server never reads half a file.
pub fn place(dir: &Path, name: &str, bytes: &[u8]) {
    let staging = dir.join(format!(".{name}.partial"));
    std::fs::write(&staging, bytes).expect("write the staged component");
    std::fs::rename(&staging, dir.join(name)).expect("rename into place");
}

/// Waits until `condition` holds of the server, re-checking after each
/// scan of its filters directory.
pub async fn wait_for_filters(
    state: &AppState,
    condition: impl Fn(&AppState) -> bool,
) -> anyhow::Result<()> {
    let mut reloads = state.filter_reloads.clone();
    let waiting = async {
        loop {
            if condition(state) {
                return Ok(());
            }
            reloads
                .changed()
                .await
                .context("the filter watcher stopped")?;
        }
    };
    match tokio::time::timeout(TIMEOUT, waiting).await {
        Ok(result) => result,
        Err(_) => bail!("the server did not apply the filter change within {TIMEOUT:?}"),
    }
}

/// Waits until every chain of the default config serves `topic` from the
/// file at `path`.
pub async fn wait_until_served(state: &AppState, topic: &str, path: &Path) -> anyhow::Result<()> {
    let path = path.display().to_string();
    wait_for_filters(state, |state| {
        ["eth", "bsc", "polygon"]
            .iter()
            .all(|chain| origin(state, chain, topic).as_deref() == Some(&path))
    })
    .await
}

/// What `chain` serves `topic` from (`built-in …` or a path), if anything.
pub fn origin(state: &AppState, chain: &str, topic: &str) -> Option<String> {
    state.chains[chain]
        .filter(topic)
        .map(|handle| handle.status().origin)
}

/// The payload the decoded-transfers example (contract 0.2) writes for
/// `log`, an ERC-20 `Transfer` of `token` in the node's JSON shape:
/// derived here from that JSON, to hold the component's decoding to.
pub fn decoded_transfer(token: &str, log: &serde_json::Value) -> serde_json::Value {
    let address =
        |topic: &serde_json::Value| format!("0x{}", &topic.as_str().expect("a topic")[26..]);
    let data = log["data"].as_str().expect("data");
    let amount = alloy_primitives::U256::from_str_radix(&data[2..], 16).expect("a uint256");
    serde_json::json!({
        "token": token,
        "from": address(&log["topics"][1]),
        "to": address(&log["topics"][2]),
        "amount": amount.to_string(),
        "blockNumber": log["blockNumber"],
        "transactionHash": log["transactionHash"],
        "logIndex": log["logIndex"],
        "removed": false,
    })
}
