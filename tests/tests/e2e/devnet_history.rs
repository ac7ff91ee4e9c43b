//! A devnet chain keeps its whole generated history (docs/src/api.md,
//! History from the nodes): `fromBlock` and cursors older than the log's
//! window replay the chain as it is canonical now, across the reorgs it
//! went through, then go live; the archive's memory bound and its file.

use std::collections::BTreeMap;

use chainsieve_config::{ChainConfig, Config, LogConfig, Span};
use chainsieve_ingest::devnet::DevnetSettings;
use chainsieve_tests::{TestServer, WsClient, chained_numbers, fast_devnet, quantity, test_config};
use serde_json::{Value, json};

/// The log keeps this many blocks.
const WINDOW: u64 = 8;

fn config(devnet: DevnetSettings) -> Config {
    Config {
        devnet,
        log: LogConfig {
            window: Span::Blocks(WINDOW),
            ..LogConfig::default()
        },
        ..test_config()
    }
}

/// [`config`] serving only the devnet chain `name` (of id `chain_id`):
/// its generated past is all the server makes at startup.
fn one_chain(devnet: DevnetSettings, name: &str, chain_id: u64) -> Config {
    Config {
        chains: BTreeMap::from([(
            name.to_string(),
            ChainConfig {
                chain_id: Some(chain_id),
                ..ChainConfig::default()
            },
        )]),
        ..config(devnet)
    }
}

/// What a `newHeads` subscriber holds canonical after each head: a head
/// replaces the one of its number and those above it (a reorg's new
/// branch).
#[derive(Default)]
struct Canonical {
    heads: BTreeMap<u64, (Value, String)>,
}

impl Canonical {
    fn take(&mut self, params: &Value) -> u64 {
        let number = quantity(&params["result"]["number"]);
        self.heads.split_off(&number);
        let cursor = params["cursor"].as_str().expect("a cursor").to_string();
        self.heads
            .insert(number, (params["result"].clone(), cursor));
        number
    }

    fn hash(&self, number: u64) -> &Value {
        &self.heads[&number].0["hash"]
    }
}

/// Heads of `subscription` on `ws` until one numbered `until` or more;
/// the others' notifications are dropped.
async fn heads_until(ws: &mut WsClient, subscription: &str, until: u64) -> Vec<Value> {
    let mut heads = Vec::new();
    loop {
        let params = ws.next_notification_params().await.expect("heads");
        if params["subscription"] != subscription {
            continue;
        }
        assert!(
            params["result"]["number"].is_string(),
            "a head, not {params}"
        );
        let number = quantity(&params["result"]["number"]);
        heads.push(params);
        if number >= until {
            return heads;
        }
    }
}

/// The block numbers of `heads`' notifications.
fn numbers_of(heads: &[Value]) -> Vec<u64> {
    heads
        .iter()
        .map(|params| quantity(&params["result"]["number"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_block_and_cursors_past_the_window_replay_the_chain_as_it_is_now() {
    let server = TestServer::started(config(DevnetSettings {
        reorg_every: 5,
        reorg_depth: 3,
        ..fast_devnet()
    }))
    .await;
    let url = server.ws_url("eth", "demo");
    let mut control = WsClient::connect(&url).await.expect("connect");
    control
        .subscribe(json!(["newHeads"]))
        .await
        .expect("subscribe");
    let mut seen = Canonical::default();
    let mut first = None;
    // Reorgs every five blocks, and the window left far behind.
    while seen.heads.keys().last().is_none_or(|tip| *tip < 40) {
        let params = control.next_notification_params().await.expect("a head");
        let number = seen.take(&params);
        first.get_or_insert(number);
    }
    let first = first.expect("a first head");
    let tip = *seen.heads.keys().last().expect("a tip");

    let mut replay = WsClient::connect(&url).await.expect("connect");
    let from = replay
        .subscribe(json!(["newHeads", {"fromBlock": format!("{first:#x}")}]))
        .await
        .expect("a fromBlock past the window is served");
    let heads = heads_until(&mut replay, &from, tip + 5).await;
    // Blocks at most three below the tip may still be reorganised.
    let settled = tip - 3;
    let numbers = numbers_of(&heads);
    assert_eq!(
        numbers[..=usize::try_from(settled - first).expect("small")],
        (first..=settled).collect::<Vec<_>>(),
        "each block once, in order, none of the orphaned ones"
    );
    let mut replayed = Canonical::default();
    for params in &heads {
        replayed.take(params);
    }
    for number in first..=settled {
        assert_eq!(replayed.hash(number), seen.hash(number), "block {number}");
    }
    for pair in heads.windows(2) {
        let (a, b) = (&pair[0]["result"], &pair[1]["result"]);
        if quantity(&b["number"]) == quantity(&a["number"]) + 1 {
            assert_eq!(b["parentHash"], a["hash"], "linked at {}", b["number"]);
        }
    }

    // A cursor of a block long out of the window resumes right after it.
    let (_, cursor) = &seen.heads[&(first + 1)];
    let mut resumed = WsClient::connect(&url).await.expect("connect");
    let again = resumed
        .subscribe(json!(["newHeads", {"resumeFrom": cursor}]))
        .await
        .expect("a canonical cursor past the window resumes");
    let heads = heads_until(&mut resumed, &again, first + 6).await;
    let numbers = numbers_of(&heads);
    assert_eq!(numbers, (first + 2..=first + 6).collect::<Vec<_>>());
    for params in &heads {
        let number = quantity(&params["result"]["number"]);
        assert_eq!(&params["result"]["hash"], seen.hash(number));
    }
}

/// Generated back to back at startup, so the archive's bound is met at
/// once.
const PAST: u64 = 300;

fn with_a_past(archive_memory_mib: usize) -> DevnetSettings {
    DevnetSettings {
        history_blocks: PAST,
        archive_memory_mib,
        ..fast_devnet()
    }
}

/// Without a data directory the archive holds what its memory bound
/// allows; older blocks are refused, naming where its history begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_bound_lets_the_oldest_go_and_says_so() {
    // No new block meanwhile: what is held stays put. (The past ends now,
    // not at a fixed genesis hours of blocks ago, which the devnet would
    // first catch up on.)
    let still = DevnetSettings {
        block_time_ms: Some(3_600_000),
        genesis_timestamp: None,
        ..with_a_past(1)
    };
    let server = TestServer::started(one_chain(still, "bsc", 56)).await;
    let mut ws = WsClient::connect(&server.ws_url("bsc", "demo"))
        .await
        .expect("connect");
    let answer = ws
        .call("eth_subscribe", json!(["logs", {"fromBlock": "0x1"}]))
        .await
        .expect("answered");
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("bsc's devnet holds its history from block")
            && message.contains("not block 1")
            && message.contains("archive_memory_mib"),
        "{message}"
    );
    let held: u64 = message
        .split("from block ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("names its oldest block: {message}"));
    assert!(held > 1 && held + WINDOW < PAST, "held from {held}");
    // Block lookups older than the window, the same: the archive answers
    // what it holds; older, -32001.
    let lookup = |number: u64| json!([format!("{number:#x}"), false]);
    let gone = ws
        .call("eth_getBlockByNumber", lookup(1))
        .await
        .expect("answered");
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
    let kept = ws
        .call("eth_getBlockByNumber", lookup(held))
        .await
        .expect("answered");
    assert_eq!(
        kept["result"]["number"],
        json!(format!("{held:#x}")),
        "{kept}"
    );
    // From there it is served, and the connection went on.
    let from = ws
        .subscribe(json!(["newHeads", {"fromBlock": format!("{held:#x}")}]))
        .await
        .expect("served from the oldest held");
    let heads = heads_until(&mut ws, &from, held + 2).await;
    assert_eq!(quantity(&heads[0]["result"]["number"]), held);
}

/// With a data directory every generated block is held: `fromBlock 1`
/// replays the whole past from the file, then goes live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_data_directory_the_whole_past_is_held() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = one_chain(with_a_past(1), "polygon", 137);
    config.data_dir = Some(dir.path().to_path_buf());
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("polygon", "demo"))
        .await
        .expect("connect");
    let from = ws
        .subscribe(json!(["newHeads", {"fromBlock": "0x1"}]))
        .await
        .expect("served");
    let heads: Vec<Value> = heads_until(&mut ws, &from, PAST + 3)
        .await
        .into_iter()
        .map(|params| params["result"].clone())
        .collect();
    assert_eq!(chained_numbers(&heads), (1..=PAST + 3).collect::<Vec<_>>());
    assert!(
        dir.path().join("polygon.devnet.redb").exists(),
        "the archive's file"
    );
}
