//! Real client libraries pointed at chainsieve unchanged. Every
//! notification they get carries a `cursor` member beside `subscription`
//! and `result` (checked on the same server first), which they ignore.

use alloy_primitives::{Address, keccak256};
use alloy_signer_local::PrivateKeySigner;
use chainsieve_config::Span;
use chainsieve_tests::scripts::{SCRIPT_TIMEOUT, run_script};
use chainsieve_tests::{TestServer, WsClient, hex_address, test_config};
use serde_json::{Value, json};

/// The test server, its eth chain keeping blocks for twice as long as a
/// script may run: a block a script reported is still served when the test
/// looks it up after the script, however slowly the script ran. Its
/// notifications carry cursors, as a raw client sees first.
async fn start_server() -> TestServer {
    let mut config = test_config();
    config.chains.get_mut("eth").expect("an eth chain").window =
        Some(Span::Time(SCRIPT_TIMEOUT * 2));
    let server = TestServer::started(config).await;
    let mut raw = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    raw.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let params = raw.next_notification_params().await.expect("a head");
    assert!(
        params["cursor"]
            .as_str()
            .is_some_and(|c| c.starts_with("eth:")),
        "notifications carry a cursor: {params}"
    );
    server
}

/// Runs a client script against `url` with the token to watch, and
/// returns the JSON report it prints last.
async fn run_client(script: &str, url: &str, token: Address) -> Value {
    run_script(script, &[url, &token.to_checksum(None)]).await
}

/// The server's own answer for block `number`.
async fn block(server: &TestServer, number: u64) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":[format!("{number:#x}"), false]});
    server.post("eth", "demo", &body.to_string()).await.1["result"].clone()
}

/// A client's report holds two pending transaction hashes and a
/// `Transfer` log of `token`, as the client decoded them.
fn assert_pending_hashes_and_transfer_log(report: &Value, token: Address) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ethers_v6_gets_blocks_pending_transactions_and_a_filtered_log_and_broadcasts() {
    let server = start_server().await;
    let token = chainsieve_ingest::devnet::known_tokens(1)[0].address;
    let report = run_client("ethers_client.mjs", &server.ws_url("eth", "demo"), token).await;

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
    assert_eq!(report["blockHash"], block(&server, blocks[1]).await["hash"]);

    assert_pending_hashes_and_transfer_log(&report, token);

    // The transaction ethers signed and broadcast came back among its
    // pending events (the script waits for it), from the key it used.
    let wallet =
        PrivateKeySigner::from_bytes(&keccak256("chainsieve ethers client")).expect("a valid key");
    assert_eq!(
        report["sent"]["from"],
        json!(wallet.address().to_checksum(None))
    );
    assert!(
        report["sent"]["hash"]
            .as_str()
            .is_some_and(|h| h.len() == 66 && h.starts_with("0x")),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viem_watches_blocks_pending_transactions_and_decodes_a_transfer() {
    let server = start_server().await;
    let token = chainsieve_ingest::devnet::known_tokens(1)[0].address;
    let report = run_client("viem_client.mjs", &server.ws_url("eth", "demo"), token).await;

    assert_eq!(report["chainId"], json!(1));
    let blocks = report["blocks"].as_array().expect("blocks");
    let numbers: Vec<u64> = blocks
        .iter()
        .map(|b| {
            b["number"]
                .as_str()
                .expect("number")
                .parse()
                .expect("decimal")
        })
        .collect();
    assert_eq!(numbers[1], numbers[0] + 1, "consecutive blocks");
    assert_eq!(
        report["blockHash"], blocks[1]["hash"],
        "getBlock agrees with the subscription"
    );
    assert_eq!(blocks[1]["hash"], block(&server, numbers[1]).await["hash"]);
    assert_eq!(report["pending"].as_array().expect("pending").len(), 2);

    // viem decoded the devnet's Transfer log with the ERC-20 ABI, and the
    // transaction is in the block it names.
    let transfer = &report["transfer"];
    let from: Address = transfer["from"]
        .as_str()
        .expect("from")
        .parse()
        .expect("address");
    // Senders are devnet accounts, or a pair paying out a swap.
    let pools: Vec<Address> = chainsieve_ingest::devnet::known_pools(1)
        .iter()
        .map(|p| p.address)
        .collect();
    assert!(
        server.devnet(1).accounts().contains(&from) || pools.contains(&from),
        "{transfer}"
    );
    assert!(
        transfer["value"]
            .as_str()
            .expect("value")
            .parse::<u128>()
            .expect("decimal")
            > 0
    );
    let number: u64 = transfer["blockNumber"]
        .as_str()
        .expect("number")
        .parse()
        .expect("decimal");
    let mined = block(&server, number).await;
    assert!(
        mined["transactions"]
            .as_array()
            .expect("hashes")
            .contains(&transfer["transactionHash"]),
        "{transfer}"
    );
}

/// web3.py (from PyPI) subscribes with `["newPendingTransactions", false]`
/// and binary frames, and decodes every result into its own types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web3_py_gets_heads_pending_hashes_and_a_filtered_log() {
    let server = start_server().await;
    let token = chainsieve_ingest::devnet::known_tokens(1)[0].address;
    let report = run_client("web3_client.py", &server.ws_url("eth", "demo"), token).await;

    assert_eq!(report["chainId"], json!(1));
    let heads = report["heads"].as_array().expect("heads");
    let numbers: Vec<u64> = heads
        .iter()
        .map(|h| h["number"].as_u64().expect("number"))
        .collect();
    assert_eq!(numbers[1], numbers[0] + 1, "consecutive heads");
    assert_eq!(heads[1]["hash"], block(&server, numbers[1]).await["hash"]);
    assert_eq!(report["blockHash"], heads[1]["hash"], "get_block agrees");

    assert_pending_hashes_and_transfer_log(&report, token);
}
