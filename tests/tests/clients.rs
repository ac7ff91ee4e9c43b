//! Real client libraries pointed at chainsieve unchanged.

use std::path::PathBuf;
use std::time::Duration;

use chainsieve_tests::{TestServer, hex_address};
use serde_json::{Value, json};

/// `tests/js`, where the README's test command installs the npm packages.
fn js_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("js");
    assert!(
        dir.join("node_modules/ethers").exists(),
        "tests/js/node_modules is missing: run the README's test command (scripts/test.sh), which installs it"
    );
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ethers_v6_gets_blocks_pending_transactions_and_a_filtered_log() {
    let server = TestServer::default().await;
    let token = chainsieve::ingest::devnet::known_tokens(1)[0].address;
    let run = tokio::process::Command::new("node")
        .arg(js_dir().join("ethers_client.mjs"))
        .arg(server.ws_url("eth", "demo"))
        .arg(token.to_checksum(None))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("ethers finished")
        .expect("node runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "ethers client failed: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value =
        serde_json::from_str(stdout.lines().last().expect("a report line")).expect("JSON report");

    assert_eq!(report["chainId"], json!("1"));
    let blocks: Vec<u64> = report["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| b.as_u64().expect("number"))
        .collect();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[1], blocks[0] + 1, "consecutive block events");
    assert_eq!(report["blockNumber"], json!(blocks[1]));
    // ethers' getBlock agrees with the server's own answer.
    let body = json!({"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":[format!("{:#x}", blocks[1]), false]});
    let (_, answer) = server.post("eth", "demo", &body.to_string()).await;
    assert_eq!(report["blockHash"], answer["result"]["hash"]);

    let pending = report["pending"].as_array().expect("pending");
    assert_eq!(pending.len(), 2);
    assert!(pending.iter().all(|h| {
        h.as_str()
            .is_some_and(|h| h.len() == 66 && h.starts_with("0x"))
    }));

    let log = &report["log"];
    assert_eq!(
        log["address"].as_str().map(str::to_lowercase),
        Some(hex_address(&token))
    );
    assert_eq!(
        log["topics"][0],
        json!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef")
    );
    assert_eq!(log["removed"], json!(false));
}
