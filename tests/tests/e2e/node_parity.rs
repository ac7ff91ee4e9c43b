//! What the node says, chainsieve says: every transaction type sent to
//! anvil at Ethereum's current fork, Osaka (legacy, EIP-2930, EIP-1559, a contract creation, logging calls,
//! an EIP-4844 blob transaction and an EIP-7702 set-code transaction, all
//! really signed), subscribed to on the node and on chainsieve side by
//! side, and the standard calls asked of both, compared field by field;
//! chainsieve's `transactionReceipts` of them against the node's
//! `eth_getTransactionReceipt`.
//! The node is stopped before chainsieve is asked, so its answers are
//! provably its window's, not forwarded.

use std::collections::BTreeMap;

use alloy_primitives::Bytes;
use alloy_signer_local::PrivateKeySigner;
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2, mined, ping_contract};
use chainsieve_tests::typed::{blob_transaction, set_code_transaction};
use chainsieve_tests::{TestServer, WsClient, quantity};
use serde_json::{Value, json};

const KEY: &str = "parity-test";
/// Anvil's second and third dev keys: the set-code authority, and the
/// sender of the transactions this test signs itself.
const AUTHORITY_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const SIGNER_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";

/// Members of anvil's `newHeads` beyond geth's header, which the issue lets
/// notifications leave out.
const ANVIL_HEAD_EXTRAS: [&str; 5] = [
    "size",
    "uncles",
    "transactions",
    "withdrawals",
    "totalDifficulty",
];

/// Where `ours` differs from `node`, member by member (long values cut).
fn differences(ours: &Value, node: &Value) -> Vec<String> {
    let cut = |v: Option<&Value>| {
        let text = v.map_or("(absent)".to_string(), Value::to_string);
        text.chars().take(90).collect::<String>()
    };
    match (ours, node) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter()
                .flat_map(|k| match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) if x == y => Vec::new(),
                    (Some(x @ (Value::Object(_) | Value::Array(_))), Some(y)) => differences(x, y)
                        .into_iter()
                        .map(|d| format!("{k}.{d}"))
                        .collect(),
                    (x, y) => vec![format!("{k}: ours {} node {}", cut(x), cut(y))],
                })
                .collect()
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .flat_map(|(i, (x, y))| {
                differences(x, y)
                    .into_iter()
                    .map(move |d| format!("[{i}] {d}"))
            })
            .collect(),
        (x, y) if x == y => Vec::new(),
        (x, y) => vec![format!("ours {} node {}", cut(Some(x)), cut(Some(y)))],
    }
}

/// Reads notifications until `done` says the collection is complete.
async fn collect(
    client: &mut WsClient,
    mut done: impl FnMut(&BTreeMap<String, Vec<Value>>) -> bool,
) -> BTreeMap<String, Vec<Value>> {
    let mut by_subscription: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    while !done(&by_subscription) {
        let (subscription, result) = client.next_notification().await.expect("a notification");
        by_subscription
            .entry(subscription)
            .or_default()
            .push(result);
    }
    by_subscription
}

/// The three subscriptions compared: full pending transactions, heads,
/// logs.
async fn subscribe_all(client: &mut WsClient) -> [String; 3] {
    [
        client
            .subscribe(json!(["newPendingTransactions", true]))
            .await
            .expect("pending"),
        client.subscribe(json!(["newHeads"])).await.expect("heads"),
        client.subscribe(json!(["logs", {}])).await.expect("logs"),
    ]
}

#[tokio::test]
async fn every_transaction_type_reads_as_the_node_gives_it() {
    let mut anvil = Anvil::start_with(1, 0, &["--hardfork", "osaka", "--no-mining"])
        .await
        .expect("anvil");
    let server = TestServer::started(anvil.config(KEY)).await;
    let mut node = WsClient::connect(&anvil.ws_url()).await.expect("node");
    let mut ours = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("chainsieve");

    // Block 1: the Ping contract the logging calls call.
    let heads = node.subscribe(json!(["newHeads"])).await.expect("heads");
    let deploy = anvil
        .send(json!({ "from": DEV_ACCOUNT, "data": ping_contract() }))
        .await
        .expect("deploy");
    anvil.mine(1).await.expect("mine");
    let (receipt, _) = mined(&mut node, &heads, &anvil, &deploy).await;
    let ping = receipt["contractAddress"]
        .as_str()
        .expect("contract")
        .to_string();
    let ours_ready = ours.subscribe(json!(["newHeads"])).await.expect("heads");
    anvil.mine(1).await.expect("mine");
    collect(&mut ours, |seen| {
        seen.get(&ours_ready).is_some_and(|h| !h.is_empty())
    })
    .await;

    let node_subs = subscribe_all(&mut node).await;
    let our_subs = subscribe_all(&mut ours).await;
    let our_receipts = ours
        .subscribe(json!(["transactionReceipts"]))
        .await
        .expect("receipts");

    // Block 3: every type, sent while nothing mines.
    let signer: PrivateKeySigner = SIGNER_KEY.parse().expect("key");
    let authority: PrivateKeySigner = AUTHORITY_KEY.parse().expect("key");
    let mut hashes = Vec::new();
    for tx in [
        json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x1", "gasPrice": "0x77359400", "type": "0x0" }),
        json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x2", "gasPrice": "0x77359400", "type": "0x1",
                "accessList": [{ "address": DEV_ACCOUNT_2, "storageKeys": [format!("0x{}01", "00".repeat(31))] }] }),
        json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x3" }),
        json!({ "from": DEV_ACCOUNT, "data": ping_contract() }),
        json!({ "from": DEV_ACCOUNT, "to": ping, "data": "0x" }),
        json!({ "from": DEV_ACCOUNT, "to": ping, "data": "0x" }),
    ] {
        hashes.push(anvil.send(tx).await.expect("sent"));
    }
    for raw in [
        blob_transaction(&signer, 1, 0, DEV_ACCOUNT.parse().expect("address")),
        set_code_transaction(&signer, &authority, 1, 1, ping.parse().expect("address")),
    ] {
        let hash = anvil
            .rpc("eth_sendRawTransaction", json!([Bytes::from(raw)]))
            .await
            .expect("raw transaction accepted");
        hashes.push(hash.as_str().expect("hash").to_string());
    }
    let sent = hashes.len();
    let pending_seen = |subscription: &str| {
        let subscription = subscription.to_string();
        move |seen: &BTreeMap<String, Vec<Value>>| {
            seen.get(&subscription).map_or(0, Vec::len) >= sent
        }
    };
    let node_pending = collect(&mut node, pending_seen(&node_subs[0])).await;
    let our_pending = collect(&mut ours, pending_seen(&our_subs[0])).await;
    anvil.mine(1).await.expect("mine");
    let block_seen = |subs: &[String; 3]| {
        let (heads, logs) = (subs[1].clone(), subs[2].clone());
        move |seen: &BTreeMap<String, Vec<Value>>| {
            seen.get(&heads).is_some_and(|h| !h.is_empty())
                && seen.get(&logs).map_or(0, Vec::len) >= 3
        }
    };
    let node_block = collect(&mut node, block_seen(&node_subs)).await;
    let ours_seen = block_seen(&our_subs);
    let our_block = collect(&mut ours, |seen| {
        ours_seen(seen) && seen.get(&our_receipts).map_or(0, Vec::len) >= sent
    })
    .await;

    // Notifications.
    let by_hash = |objects: &[Value]| -> BTreeMap<String, Value> {
        objects
            .iter()
            .map(|tx| (tx["hash"].as_str().expect("hash").to_string(), tx.clone()))
            .collect()
    };
    let node_txs = by_hash(&node_pending[&node_subs[0]]);
    let our_txs = by_hash(&our_pending[&our_subs[0]]);
    let types: Vec<&Value> = node_txs.values().map(|tx| &tx["type"]).collect();
    for t in ["0x0", "0x1", "0x2", "0x3", "0x4"] {
        assert!(types.contains(&&json!(t)), "type {t} sent: {types:?}");
    }
    for hash in &hashes {
        let (ours, node) = (&our_txs[hash], &node_txs[hash]);
        assert_eq!(
            differences(ours, node),
            Vec::<String>::new(),
            "pending {hash}"
        );
    }
    let mut node_head = node_block[&node_subs[1]][0].clone();
    for extra in ANVIL_HEAD_EXTRAS {
        node_head.as_object_mut().expect("object").remove(extra);
    }
    assert_eq!(
        differences(&our_block[&our_subs[1]][0], &node_head),
        Vec::<String>::new(),
        "newHeads"
    );
    assert_eq!(our_block[&our_subs[2]], node_block[&node_subs[2]], "logs");
    // Two calls to Ping, and the call to the account delegated to it.
    assert_eq!(our_block[&our_subs[2]].len(), 3);
    // Receipts of every type: the node's, member for member, one a
    // notification in the block's order.
    let mut node_receipts = Vec::new();
    for hash in &hashes {
        node_receipts.push(
            anvil
                .rpc("eth_getTransactionReceipt", json!([hash]))
                .await
                .expect("the node's receipt"),
        );
    }
    node_receipts.sort_by_key(|receipt| quantity(&receipt["transactionIndex"]));
    let receipts: Vec<Value> = our_block[&our_receipts]
        .iter()
        .map(|result| {
            let one = result.as_array().expect("an array of receipts");
            assert_eq!(one.len(), 1, "one receipt a notification");
            one[0].clone()
        })
        .collect();
    assert_eq!(receipts.len(), sent);
    for (ours, node) in receipts.iter().zip(&node_receipts) {
        assert_eq!(
            differences(ours, node),
            Vec::<String>::new(),
            "receipt of {}",
            node["transactionHash"]
        );
    }
    let receipt_types: Vec<&Value> = receipts.iter().map(|r| &r["type"]).collect();
    for t in ["0x0", "0x1", "0x2", "0x3", "0x4"] {
        assert!(receipt_types.contains(&&json!(t)), "a receipt of type {t}");
    }

    // Calls: the node's answers, then the node stopped, then chainsieve's.
    let block = node_head["number"].clone();
    let block_hash = node_head["hash"].clone();
    assert_eq!(quantity(&block), 3);
    let mut calls = vec![
        ("eth_getBlockByNumber", json!([block, false])),
        ("eth_getBlockByNumber", json!([block, true])),
        ("eth_getBlockByNumber", json!(["0x1", true])),
        ("eth_getBlockByHash", json!([block_hash, true])),
        ("eth_getBlockByHash", json!([block_hash, false])),
        ("eth_getLogs", json!([{ "blockHash": block_hash }])),
        (
            "eth_getLogs",
            json!([{ "fromBlock": "0x1", "toBlock": block }]),
        ),
    ];
    calls.extend(hashes.iter().flat_map(|hash| {
        [
            ("eth_getTransactionByHash", json!([hash])),
            ("eth_getTransactionReceipt", json!([hash])),
        ]
    }));
    let mut expected = Vec::new();
    for (method, params) in &calls {
        expected.push(
            anvil
                .rpc(method, params.clone())
                .await
                .expect("the node answers"),
        );
    }
    let full = &expected[1];
    assert_eq!(full["transactions"].as_array().map(Vec::len), Some(sent));
    anvil.stop().await.expect("node stopped");
    for ((method, params), expected) in calls.iter().zip(&expected) {
        let answer = ours.call(method, params.clone()).await.expect("answer");
        assert_eq!(
            differences(&answer["result"], expected),
            Vec::<String>::new(),
            "{method} {params}"
        );
    }
    // Gone, rather than left unread through the server's closing
    // handshake.
    drop((ours, node));
    server.stop().await;
}
