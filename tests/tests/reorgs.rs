//! Devnet reorgs through the canonical tracker, as subscribers see them:
//! `newHeads` re-emits the new branch, `logs` re-sends orphaned logs with
//! `removed: true` (newest block first), and `bvMinedTransactions` re-sends
//! orphaned transactions with `"removed": true` before they are re-mined.

use std::collections::{HashMap, HashSet};

use chainsieve::config::Config;
use chainsieve::ingest::devnet::DevnetSettings;
use chainsieve_tests::{TestServer, WsClient, fast_devnet};
use serde_json::{Value, json};

fn number(value: &Value) -> u64 {
    u64::from_str_radix(
        value.as_str().expect("a quantity").trim_start_matches("0x"),
        16,
    )
    .expect("hex")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reorgs_remove_then_re_emit() {
    let config = Config {
        devnet: DevnetSettings {
            reorg_every: 3,
            reorg_depth: 2,
            ..fast_devnet()
        },
        ..Config::default()
    };
    let server = TestServer::start(config).await.expect("server");
    let mut ws = WsClient::connect(&server.ws_url("bsc", "demo"))
        .await
        .expect("connect");
    let heads = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let logs = ws.subscribe(json!(["logs"])).await.expect("subscribe");
    let mined = ws
        .subscribe(json!(["bvMinedTransactions"]))
        .await
        .expect("subscribe");

    let mut head_hashes: HashMap<String, u64> = HashMap::new();
    let mut last_head: Option<u64> = None;
    let mut first_head: Option<u64> = None;
    let mut reorgs = 0;
    // Blocks from the first one a stream delivered on were mined after the
    // subscription; an older block's removal was never preceded by its
    // delivery.
    let mut first_log_block: Option<u64> = None;
    let mut first_tx_block: Option<u64> = None;
    let mut delivered_logs: HashSet<String> = HashSet::new();
    let mut removed_logs = 0;
    let mut previous_removed_block: Option<u64> = None;
    let mut delivered_txs: HashSet<(String, String)> = HashSet::new();
    let mut awaiting_remine: HashMap<String, String> = HashMap::new();
    let mut removed_txs = 0;

    while reorgs < 2 || removed_logs == 0 || removed_txs == 0 || !awaiting_remine.is_empty() {
        let (subscription, result) = ws.next_notification().await.expect("events keep coming");
        if subscription == heads {
            let n = number(&result["number"]);
            if let Some(last) = last_head
                && n <= last
            {
                reorgs += 1;
                let parent = result["parentHash"].as_str().expect("parent");
                if first_head.is_some_and(|first| n > first) {
                    assert_eq!(
                        head_hashes.get(parent),
                        Some(&(n - 1)),
                        "a reorg head's parent is an earlier head"
                    );
                }
            } else if let Some(last) = last_head {
                assert_eq!(n, last + 1, "heads ascend by one between reorgs");
            }
            last_head = Some(n);
            first_head.get_or_insert(n);
            head_hashes.insert(result["hash"].as_str().expect("hash").to_string(), n);
        } else if subscription == logs {
            let key = format!("{}:{}", result["blockHash"], result["logIndex"]);
            let block = number(&result["blockNumber"]);
            if result["removed"] == json!(true) {
                let was_delivered = delivered_logs.remove(&key);
                if first_log_block.is_some_and(|first| block >= first) {
                    assert!(
                        was_delivered,
                        "a removed log was delivered before, once: {result}"
                    );
                }
                if let Some(previous) = previous_removed_block {
                    assert!(block <= previous, "removed logs come newest block first");
                }
                previous_removed_block = Some(block);
                removed_logs += 1;
            } else {
                assert_eq!(result["removed"], json!(false));
                previous_removed_block = None;
                first_log_block.get_or_insert(block);
                assert!(
                    delivered_logs.insert(key),
                    "a log delivered twice: {result}"
                );
            }
        } else if subscription == mined {
            let hash = result["hash"].as_str().expect("hash").to_string();
            let block = result["blockHash"]
                .as_str()
                .expect("block hash")
                .to_string();
            let height = number(&result["blockNumber"]);
            if result["removed"] == json!(true) {
                let was_delivered = delivered_txs.remove(&(hash.clone(), block.clone()));
                if first_tx_block.is_some_and(|first| height >= first) {
                    assert!(was_delivered, "a removed transaction was delivered before");
                }
                awaiting_remine.insert(hash, block);
                removed_txs += 1;
            } else {
                assert!(result.get("removed").is_none());
                first_tx_block.get_or_insert(height);
                if let Some(orphaned_in) = awaiting_remine.remove(&hash) {
                    assert_ne!(orphaned_in, block, "re-mined in a block of the new branch");
                }
                assert!(
                    delivered_txs.insert((hash, block)),
                    "a transaction delivered twice in one block"
                );
            }
        }
    }
}
