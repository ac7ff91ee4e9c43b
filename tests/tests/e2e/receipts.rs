//! `transactionReceipts` over a real node (anvil): every receipt is the
//! node's own `eth_getTransactionReceipt`, member for member, for each
//! transaction type anvil mines here (0, 1, 2), a creation, a call that
//! logs and one that reverts; several receipts of one block come in order,
//! one a notification; geth's `transactionHashes` and the transaction
//! filters' members (a watchlist) each narrow it; a reorg sends the
//! orphaned receipts again as removed, in undo order; a resume by cursor
//! and a replay from a block give the same as the live stream.

use std::collections::BTreeMap;

use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2, deploy, ping_contract};
use chainsieve_tests::{TestServer, WsClient};
use serde_json::{Value, json};

const KEY: &str = "receipts-test";

/// A contract whose every call reverts (`REVERT(0, 0)`): 5 bytes of
/// runtime, deployed by copying them.
const REVERTING: &str = "0x600580600b6000396000f360006000fd";

/// Reads `client` until each subscription of `wanted` has had its count of
/// notifications: subscription → their params, in order.
async fn read(
    client: &mut WsClient,
    wanted: &[(&str, usize)],
    got: &mut BTreeMap<String, Vec<Value>>,
) {
    let short = |got: &BTreeMap<String, Vec<Value>>| {
        wanted
            .iter()
            .any(|(id, count)| got.get(*id).map_or(0, Vec::len) < *count)
    };
    while short(got) {
        let params = client
            .next_notification_params()
            .await
            .expect("a notification");
        let id = params["subscription"].as_str().expect("an id").to_string();
        got.entry(id).or_default().push(params);
    }
}

/// The one receipt a notification carries.
fn receipt(params: &Value) -> &Value {
    let result = params["result"].as_array().expect("an array of receipts");
    assert_eq!(result.len(), 1, "one receipt a notification: {params}");
    &result[0]
}

/// The receipts `got` has of subscription `id`, in order.
fn picked(got: &BTreeMap<String, Vec<Value>>, id: &str) -> Vec<Value> {
    got[id].iter().map(|p| receipt(p).clone()).collect()
}

/// `receipt` as it comes again once its block left the chain.
fn as_removed(receipt: &Value) -> Value {
    let mut removed = receipt.clone();
    removed["removed"] = json!(true);
    for log in removed["logs"].as_array_mut().expect("logs") {
        log["removed"] = json!(true);
    }
    removed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_are_the_nodes_removed_on_a_reorg_and_resumed() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::started(anvil.config(KEY)).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("ws");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let ping = deploy(&mut client, &heads, &anvil, &ping_contract()).await;
    let reverting = deploy(&mut client, &heads, &anvil, REVERTING).await;
    let made = client
        .call("watchlist_create", json!(["second", [DEV_ACCOUNT_2]]))
        .await
        .expect("made");
    assert_eq!(made["result"]["size"], 1, "{made}");

    // One block of seven transactions, sent before it is mined.
    anvil.automine(false).await.expect("automine off");
    let fee = json!("0x77359400");
    let sent = [
        json!({"from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x1", "gasPrice": fee}),
        json!({"from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x2", "gasPrice": fee,
            "accessList": [{"address": DEV_ACCOUNT_2, "storageKeys": [format!("0x{:064x}", 1)]}]}),
        json!({"from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x3",
            "maxFeePerGas": fee, "maxPriorityFeePerGas": "0x1"}),
        json!({"from": DEV_ACCOUNT, "to": ping}),
        json!({"from": DEV_ACCOUNT, "to": reverting, "gas": "0x10000"}),
        json!({"from": DEV_ACCOUNT, "data": ping_contract()}),
        json!({"from": DEV_ACCOUNT_2, "to": DEV_ACCOUNT, "value": "0x4"}),
    ];
    let mut hashes = Vec::new();
    for tx in sent {
        hashes.push(anvil.send(tx).await.expect("sent"));
    }
    let every = client
        .subscribe(json!(["transactionReceipts"]))
        .await
        .expect("every receipt");
    let by_hash = client
        .subscribe(json!(["transactionReceipts", {"transactionHashes": [hashes[1], hashes[4]]}]))
        .await
        .expect("by hash");
    let by_sender = client
        .subscribe(json!(["transactionReceipts", {"fromAddress": {"watchlist": "second"}}]))
        .await
        .expect("by a watchlist");
    let mut got = BTreeMap::new();
    anvil.mine(1).await.expect("mined");
    read(
        &mut client,
        &[(&every, 7), (&by_hash, 2), (&by_sender, 1)],
        &mut got,
    )
    .await;

    // Member for member the node's, in the block's order.
    let mut node = Vec::new();
    for hash in &hashes {
        node.push(
            anvil
                .rpc("eth_getTransactionReceipt", json!([hash]))
                .await
                .expect("the node's receipt"),
        );
    }
    assert_eq!(picked(&got, &every), node, "the node's receipts");
    let types: Vec<&str> = node.iter().filter_map(|r| r["type"].as_str()).collect();
    assert_eq!(types, ["0x0", "0x1", "0x2", "0x2", "0x2", "0x2", "0x2"]);
    let statuses: Vec<&str> = node.iter().filter_map(|r| r["status"].as_str()).collect();
    assert_eq!(statuses, ["0x1", "0x1", "0x1", "0x1", "0x0", "0x1", "0x1"]);
    assert_eq!(
        node[3]["logs"].as_array().map(Vec::len),
        Some(1),
        "the ping"
    );
    assert!(node[5]["contractAddress"].is_string(), "the creation");
    assert_eq!(picked(&got, &by_hash), [node[1].clone(), node[4].clone()]);
    assert_eq!(picked(&got, &by_sender), [node[6].clone()]);

    // The block leaves the chain: its receipts again, removed, last first.
    anvil.reorg(1).await.expect("reorg");
    read(
        &mut client,
        &[(&every, 14), (&by_hash, 4), (&by_sender, 2)],
        &mut got,
    )
    .await;
    let undone: Vec<Value> = node.iter().rev().map(as_removed).collect();
    assert_eq!(picked(&got, &every)[7..], undone[..], "undone in reverse");
    assert_eq!(
        picked(&got, &by_hash)[2..],
        [as_removed(&node[4]), as_removed(&node[1])]
    );
    assert_eq!(picked(&got, &by_sender)[1..], [as_removed(&node[6])]);

    // Resumed after the first receipt: the rest, as they came.
    let cursor = got[&every][0]["cursor"].clone();
    let mut again = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("ws");
    let resumed = again
        .subscribe(json!(["transactionReceipts", {"resumeFrom": cursor}]))
        .await
        .expect("resumed");
    let mut replayed = BTreeMap::new();
    read(&mut again, &[(&resumed, 13)], &mut replayed).await;
    let strip = |params: &[Value]| -> Vec<(Value, Value)> {
        params
            .iter()
            .map(|p| (p["result"].clone(), p["cursor"].clone()))
            .collect()
    };
    assert_eq!(strip(&replayed[&resumed]), strip(&got[&every][1..]));

    // From a block: the canonical chain's receipts, the deployments'.
    let history = again
        .subscribe(json!(["transactionReceipts", {}, {"fromBlock": "0x1"}]))
        .await
        .expect("from a block");
    let mut past = BTreeMap::new();
    read(&mut again, &[(&history, 2)], &mut past).await;
    for params in &past[&history] {
        let receipt = receipt(params);
        let hash = &receipt["transactionHash"];
        let direct = anvil
            .rpc("eth_getTransactionReceipt", json!([hash]))
            .await
            .expect("the node's receipt");
        assert_eq!(receipt, &direct);
    }
    server.stop().await;
}

/// Refusals: a hash list past geth's 200, a malformed hash, an unknown
/// member; each a JSON-RPC error naming what was wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_receipt_filters_are_refused() {
    let server = TestServer::started(chainsieve_tests::test_config()).await;
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("ws");
    let many: Vec<String> = (0..201u32).map(|i| format!("0x{i:064x}")).collect();
    for (params, code, says) in [
        (
            json!(["transactionReceipts", {"transactionHashes": many}]),
            -32005,
            "too many values in transactionHashes: 201 (at most 200",
        ),
        (
            json!(["transactionReceipts", {"transactionHashes": ["0x12"]}]),
            -32602,
            "transactionHashes \"0x12\" must have 64 hex digits",
        ),
        (
            json!(["transactionReceipts", {"hashes": []}]),
            -32602,
            "unknown filter field \"hashes\"",
        ),
    ] {
        let refused = client.call("eth_subscribe", params).await.expect("answer");
        assert_eq!(refused["error"]["code"], code, "{refused}");
        let message = refused["error"]["message"].as_str().expect("a message");
        assert!(message.contains(says), "{says:?} in {refused}");
    }
    server.stop().await;
}
