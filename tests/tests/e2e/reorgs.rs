//! Devnet reorgs through the canonical tracker, as subscribers see them
//! (the devnet stepped block by block with `evm_mine`):
//! `newHeads` re-emits the new branch, `logs` re-sends orphaned logs with
//! `removed: true`, and `bvMinedTransactions` re-sends orphaned
//! transactions with `"removed": true` before they are re-mined; removals
//! undo deliveries exactly, last delivered first.

use std::collections::HashMap;

use chainsieve_config::Config;
use chainsieve_ingest::devnet::DevnetSettings;
use chainsieve_tests::{TestServer, WsClient, stepped_devnet};
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
            ..stepped_devnet()
        },
        ..Config::default()
    };
    let server = TestServer::started(config).await;
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
    // What was delivered and not yet removed, in delivery order: a removal
    // must take the top.
    let mut delivered_logs: Vec<String> = Vec::new();
    let mut delivered_txs: Vec<(String, String)> = Vec::new();
    let mut awaiting_remine: HashMap<String, String> = HashMap::new();
    // The checks that ran (a removal of a block mined before the
    // subscription is not checked against a delivery): the test goes on
    // until each kind has run, so it cannot pass without its case.
    let mut checked_parents = 0;
    let mut checked_log_removals = 0;
    let mut checked_tx_removals = 0;
    let mut checked_remines = 0;

    while reorgs < 2
        || checked_parents == 0
        || checked_log_removals == 0
        || checked_tx_removals == 0
        || checked_remines == 0
        || !awaiting_remine.is_empty()
    {
        // One block (or a reorg's branch), then what it was notified as, up
        // to a head at least; a branch's further heads come in the next
        // round, each subscription's notifications in their order.
        server.mine("bsc", "demo").await;
        let mut head_seen = false;
        while !head_seen {
            let (subscription, result) = ws.next_notification().await.expect("events keep coming");
            if subscription == heads {
                head_seen = true;
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
                        checked_parents += 1;
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
                    if first_log_block.is_some_and(|first| block >= first) {
                        assert_eq!(
                            delivered_logs.pop().as_ref(),
                            Some(&key),
                            "a removed log undoes the last delivered one: {result}"
                        );
                        checked_log_removals += 1;
                    }
                } else {
                    assert_eq!(result["removed"], json!(false));
                    first_log_block.get_or_insert(block);
                    assert!(
                        !delivered_logs.contains(&key),
                        "a log delivered twice: {result}"
                    );
                    delivered_logs.push(key);
                }
            } else if subscription == mined {
                let hash = result["hash"].as_str().expect("hash").to_string();
                let block = result["blockHash"]
                    .as_str()
                    .expect("block hash")
                    .to_string();
                let height = number(&result["blockNumber"]);
                if result["removed"] == json!(true) {
                    if first_tx_block.is_some_and(|first| height >= first) {
                        assert_eq!(
                            delivered_txs.pop(),
                            Some((hash.clone(), block.clone())),
                            "a removed transaction undoes the last delivered one"
                        );
                        checked_tx_removals += 1;
                    }
                    awaiting_remine.insert(hash, block);
                } else {
                    assert!(result.get("removed").is_none());
                    first_tx_block.get_or_insert(height);
                    if let Some(orphaned_in) = awaiting_remine.remove(&hash) {
                        assert_ne!(orphaned_in, block, "re-mined in a block of the new branch");
                        checked_remines += 1;
                    }
                    let delivered = (hash, block);
                    assert!(
                        !delivered_txs.contains(&delivered),
                        "a transaction delivered twice in one block"
                    );
                    delivered_txs.push(delivered);
                }
            }
        }
    }
    println!(
        "{reorgs} reorgs: {checked_parents} reorg heads, {checked_log_removals} log removals, \
         {checked_tx_removals} transaction removals and {checked_remines} re-minings checked"
    );
}
