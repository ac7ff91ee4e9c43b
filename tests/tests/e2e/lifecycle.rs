//! `transactionLifecycle` over a real node (anvil, automine off): a
//! transaction replaced by a higher fee, one dropped from the pool
//! (`anvil_dropTransaction`, found by the drop checker), the replacement
//! mined, reorganised out (pending again, saying from which block), mined
//! again, then safe and finalized: each turn once, in order, by sender and
//! by hash; a resume by cursor gives the rest as it came; refusals.

use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2};
use chainsieve_tests::{TestServer, WsClient, quantity};
use serde_json::{Value, json};

const KEY: &str = "lifecycle-test";

/// Reads `client` until subscription `id` has `count` notifications in
/// `got` (other subscriptions' go to theirs).
async fn read_until(
    client: &mut WsClient,
    got: &mut std::collections::BTreeMap<String, Vec<Value>>,
    id: &str,
    count: usize,
) {
    while got.get(id).map_or(0, Vec::len) < count {
        let params = client
            .next_notification_params()
            .await
            .expect("a notification");
        let of = params["subscription"].as_str().expect("an id").to_string();
        got.entry(of).or_default().push(params);
    }
}

/// Each turn as (transaction hash, stage).
fn turns(params: &[Value]) -> Vec<(String, String)> {
    params
        .iter()
        .map(|p| {
            (
                p["result"]["transactionHash"]
                    .as_str()
                    .expect("a hash")
                    .to_string(),
                p["result"]["stage"].as_str().expect("a stage").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_life_is_told_once_in_order() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let mut config = anvil.config(KEY);
    config.lifecycle.drop_after_secs = 1;
    let server = TestServer::started(config).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("ws");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    anvil.mine(1).await.expect("a first block");
    client.until_head(&heads, 1).await;
    anvil.automine(false).await.expect("automine off");
    let by_sender = client
        .subscribe(json!(["transactionLifecycle", {"fromAddress": [DEV_ACCOUNT]}]))
        .await
        .expect("by sender");
    let mut got = std::collections::BTreeMap::new();

    // Sent, then replaced by the same nonce at twice the fee.
    let nonce = quantity(
        &anvil
            .rpc("eth_getTransactionCount", json!([DEV_ACCOUNT, "latest"]))
            .await
            .expect("nonce"),
    );
    let transfer = |fee: &str, nonce: u64| {
        json!({"from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x1", "gas": "0x5208",
            "gasPrice": fee, "nonce": format!("{nonce:#x}")})
    };
    let first = anvil
        .send(transfer("0x77359400", nonce))
        .await
        .expect("sent");
    read_until(&mut client, &mut got, &by_sender, 1).await;
    let pending = &got[&by_sender][0]["result"];
    assert_eq!(pending["stage"], "pending", "{pending}");
    assert_eq!(pending["from"], DEV_ACCOUNT.to_lowercase());
    assert_eq!(quantity(&pending["nonce"]), nonce);
    assert!(pending["seenBy"].is_string(), "the node named: {pending}");
    assert!(
        quantity(&pending["seenAt"]) > 1_600_000_000_000,
        "{pending}"
    );
    let second = anvil
        .send(transfer("0xee6b2800", nonce))
        .await
        .expect("a replacement");
    read_until(&mut client, &mut got, &by_sender, 3).await;
    assert_eq!(got[&by_sender][1]["result"]["replacedBy"], second.as_str());

    // A later nonce, dropped from the node's pool: the checker finds it
    // gone (a second after it was seen).
    let third = anvil
        .send(transfer("0x77359400", nonce + 1))
        .await
        .expect("sent");
    let by_hash = client
        .subscribe(json!(["transactionLifecycle", {"transactionHashes": [second]}]))
        .await
        .expect("by hash");
    read_until(&mut client, &mut got, &by_sender, 4).await;
    anvil
        .rpc("anvil_dropTransaction", json!([third]))
        .await
        .expect("dropped");
    read_until(&mut client, &mut got, &by_sender, 5).await;

    // Mined; the block reorganised away (pending again); mined again.
    anvil.mine(1).await.expect("mined");
    read_until(&mut client, &mut got, &by_sender, 6).await;
    let mined = got[&by_sender][5]["result"].clone();
    let receipt = anvil
        .rpc("eth_getTransactionReceipt", json!([second]))
        .await
        .expect("the node's receipt");
    for member in [
        "blockHash",
        "blockNumber",
        "transactionIndex",
        "status",
        "gasUsed",
        "effectiveGasPrice",
    ] {
        assert_eq!(mined[member], receipt[member], "{member}: {mined}");
    }
    let raw = anvil
        .rpc("eth_getRawTransactionByHash", json!([second]))
        .await
        .expect("the raw transaction");
    anvil.reorg(1).await.expect("reorg");
    read_until(&mut client, &mut got, &by_sender, 7).await;
    let back = &got[&by_sender][6]["result"];
    assert_eq!(
        back["reorgedOut"]["blockHash"], mined["blockHash"],
        "{back}"
    );
    // anvil may have taken it back into its pool itself ("already known").
    anvil
        .answer("eth_sendRawTransaction", json!([raw]))
        .await
        .expect("an answer");
    anvil.mine(1).await.expect("mined again");
    read_until(&mut client, &mut got, &by_sender, 8).await;
    let remined = got[&by_sender][7]["result"].clone();
    assert_ne!(remined["blockHash"], mined["blockHash"], "{remined}");

    // anvil's safe and finalized blocks are 32 and 64 below its head.
    anvil.mine(64).await.expect("mined on");
    read_until(&mut client, &mut got, &by_sender, 10).await;
    for (at, stage) in [(8, "safe"), (9, "finalized")] {
        assert_eq!(
            got[&by_sender][at]["result"]["blockHash"], remined["blockHash"],
            "{stage}"
        );
    }
    let life = |hash: &str, stage: &str| (hash.to_string(), stage.to_string());
    assert_eq!(
        turns(&got[&by_sender]),
        [
            life(&first, "pending"),
            life(&first, "replaced"),
            life(&second, "pending"),
            life(&third, "pending"),
            life(&third, "dropped"),
            life(&second, "mined"),
            life(&second, "pending"),
            life(&second, "mined"),
            life(&second, "safe"),
            life(&second, "finalized"),
        ],
        "each turn once, in order"
    );
    // By hash: that transaction's turns since the subscription.
    read_until(&mut client, &mut got, &by_hash, 5).await;
    assert_eq!(
        turns(&got[&by_hash]),
        turns(&got[&by_sender][5..]),
        "by hash"
    );

    // Resumed after the first turn: the rest as they came, cursors too.
    let cursor = got[&by_sender][0]["cursor"].clone();
    let mut again = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("ws");
    let resumed = again
        .subscribe(json!([
            "transactionLifecycle",
            {"fromAddress": [DEV_ACCOUNT]},
            {"resumeFrom": cursor}
        ]))
        .await
        .expect("resumed");
    let mut replayed = std::collections::BTreeMap::new();
    read_until(&mut again, &mut replayed, &resumed, 9).await;
    let strip = |params: &[Value]| -> Vec<(Value, Value)> {
        params
            .iter()
            .map(|p| (p["result"].clone(), p["cursor"].clone()))
            .collect()
    };
    assert_eq!(
        strip(&replayed[&resumed]),
        strip(&got[&by_sender][1..]),
        "resumed"
    );
    server.stop().await;
}

/// Refusals: `fromBlock` and `finality` (a turn is in no block of its
/// own, and tells its own finality), a bad hash, an unknown member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lifecycle_subscriptions_are_refused() {
    let server = TestServer::started(chainsieve_tests::test_config()).await;
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("ws");
    for (params, says) in [
        (
            json!(["transactionLifecycle", {}, {"fromBlock": "0x1"}]),
            "this topic's events are in no block",
        ),
        (
            json!(["transactionLifecycle", {}, {"finality": "safe"}]),
            "a lifecycle turn tells its own finality",
        ),
        (
            json!(["transactionLifecycle", {"transactionHashes": ["0x12"]}]),
            "transactionHashes \"0x12\" must have 64 hex digits",
        ),
        (
            json!(["transactionLifecycle", {"hash": "0x12"}]),
            "unknown filter field \"hash\"",
        ),
    ] {
        let refused = client.call("eth_subscribe", params).await.expect("answer");
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let message = refused["error"]["message"].as_str().expect("a message");
        assert!(message.contains(says), "{says:?} in {refused}");
    }
    server.stop().await;
}
