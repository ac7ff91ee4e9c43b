//! `transactionLifecycle` over a real node (anvil, automine off): a
//! transaction replaced by a higher fee, one dropped from the pool
//! (`anvil_dropTransaction`, found by the drop checker), the replacement
//! mined, reorganised out (pending again, saying from which block), mined
//! again, then safe and finalized: each turn once, in order, by sender and
//! by hash; a resume by cursor gives the rest as it came; the devnet's
//! replacements and drops; refusals.

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::Encodable2718;
use alloy_primitives::{Address, TxKind, U256, hex, keccak256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2};
use chainsieve_tests::receiver::{Receiver, create, delivered};
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

/// On a devnet that reorganises every three blocks (two deep), every
/// transaction's turns follow the life's rules, each once: pending, then
/// mined; a reorg's `pending` names the block it was mined in, and the
/// next turn is its mining again; `safe` then `finalized` of the block it
/// was last mined in, which is the canonical one (its receipt's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_devnet_reorgs_each_life_keeps_the_rules() {
    let mut config = chainsieve_tests::test_config();
    config.devnet = chainsieve_ingest::devnet::DevnetSettings {
        reorg_every: 3,
        reorg_depth: 2,
        ..chainsieve_tests::stepped_devnet()
    };
    let server = TestServer::started(config).await;
    let mut client = WsClient::connect(&server.ws_url("bsc", "demo"))
        .await
        .expect("ws");
    let every = client
        .subscribe(json!(["transactionLifecycle"]))
        .await
        .expect("every turn");
    for _ in 0..15 {
        server.mine("bsc", "demo").await;
    }
    // Until a turn finalizes a block mined after the third reorg.
    let mut got = std::collections::BTreeMap::new();
    while !got.get(&every).is_some_and(|turns: &Vec<Value>| {
        turns.iter().any(|p| {
            p["result"]["stage"] == "finalized" && quantity(&p["result"]["blockNumber"]) >= 10
        })
    }) {
        let count = got.get(&every).map_or(0, Vec::len) + 1;
        read_until(&mut client, &mut got, &every, count).await;
    }
    let mut lives: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for params in &got[&every] {
        let turn = params["result"].clone();
        let hash = turn["transactionHash"]
            .as_str()
            .expect("a hash")
            .to_string();
        lives.entry(hash).or_default().push(turn);
    }
    let mut reorged = 0;
    let mut finalized = 0;
    for (hash, turns) in &lives {
        let mut last: Option<&Value> = None;
        for turn in turns {
            let stage = turn["stage"].as_str().expect("a stage");
            let before = last.map(|t| t["stage"].as_str().expect("a stage"));
            let fits = match (before, stage) {
                (None, "pending" | "mined") => true,
                (Some("pending"), "mined") => true,
                (Some("mined"), "pending") => {
                    reorged += 1;
                    turn["reorgedOut"]["blockHash"] == last.expect("mined")["blockHash"]
                }
                (Some("mined"), "safe") | (Some("safe"), "finalized") => {
                    turn["blockHash"] == last.expect("a block")["blockHash"]
                }
                _ => false,
            };
            assert!(fits, "{hash}: {before:?} then {turn}");
            last = Some(turn);
        }
        if last.is_some_and(|t| t["stage"] == "finalized") {
            finalized += 1;
            let receipt = client
                .call("eth_getTransactionReceipt", json!([hash]))
                .await
                .expect("an answer");
            assert_eq!(
                receipt["result"]["blockHash"],
                last.expect("finalized")["blockHash"],
                "{hash} finalized in the canonical block"
            );
        }
    }
    assert!(reorged > 0, "the devnet reorganised mined transactions");
    assert!(finalized > 0, "some were finalized");
    server.stop().await;
}

/// A restart on the data directory stands where the last run stood: a
/// transaction seen pending before is replaced after (the tracker follows
/// the turns the log kept), and a resume from a cursor of before tells the
/// turns after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_where_each_life_stands() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let data = tempfile::tempdir().expect("data dir");
    let mut config = anvil.config(KEY);
    config.data_dir = Some(data.path().to_path_buf());
    let server = TestServer::started(config.clone()).await;
    server.wait_live("eth").await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("ws");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    anvil.mine(1).await.expect("a first block");
    client.until_head(&heads, 1).await;
    anvil.automine(false).await.expect("automine off");
    let filter = json!({"fromAddress": [DEV_ACCOUNT]});
    let life = client
        .subscribe(json!(["transactionLifecycle", filter]))
        .await
        .expect("by sender");
    let transfer = |fee: &str| {
        json!({"from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x1", "gas": "0x5208",
            "gasPrice": fee, "nonce": "0x0"})
    };
    let first = anvil.send(transfer("0x77359400")).await.expect("sent");
    let mut got = std::collections::BTreeMap::new();
    read_until(&mut client, &mut got, &life, 1).await;
    let cursor = got[&life][0]["cursor"].clone();
    drop(client);
    server.stop().await;

    let server = TestServer::started(config).await;
    server.wait_live("eth").await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("ws");
    let resumed = client
        .subscribe(json!(["transactionLifecycle", filter, {"resumeFrom": cursor}]))
        .await
        .expect("resumed");
    let second = anvil
        .send(transfer("0xee6b2800"))
        .await
        .expect("a replacement");
    anvil.mine(1).await.expect("mined");
    let mut after = std::collections::BTreeMap::new();
    read_until(&mut client, &mut after, &resumed, 3).await;
    let life = |hash: &str, stage: &str| (hash.to_string(), stage.to_string());
    assert_eq!(
        turns(&after[&resumed]),
        [
            life(&first, "replaced"),
            life(&second, "pending"),
            life(&second, "mined"),
        ],
        "the replaced one was known from before the restart"
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

/// A transfer of 5 wei from `signer`, EIP-1559 at `max_fee` (a tenth of
/// it the tip), signed for BNB Chain's devnet.
fn bsc_transfer(signer: &PrivateKeySigner, nonce: u64, max_fee: u128) -> String {
    let tx = TxEip1559 {
        chain_id: 56,
        nonce,
        gas_limit: 21_000,
        max_fee_per_gas: max_fee,
        max_priority_fee_per_gas: max_fee / 10,
        to: TxKind::Call(Address::repeat_byte(0x42)),
        value: U256::from(5),
        ..Default::default()
    };
    let signature = signer
        .sign_hash_sync(&tx.signature_hash())
        .expect("signing");
    let envelope: TxEnvelope = tx.into_signed(signature).into();
    hex::encode_prefixed(envelope.encoded_2718())
}

/// The devnet tells every turn too, stepped block by block on BNB Chain
/// (safe one block below the head, finalized two): a replacement by a
/// higher fee (a lower bump refused with geth's message), a drop asked
/// with `anvil_dropTransaction` (told at once, the devnet being the only
/// pool), the replacement mined, safe, finalized. A webhook of the same
/// filter delivers the same turns with the same cursors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_devnet_replaces_drops_mines_and_finalizes() {
    let mut config = chainsieve_tests::test_config();
    config.devnet = chainsieve_tests::stepped_devnet();
    // The receiver listens on 127.0.0.1, over plain http.
    config.webhooks.allow_http = true;
    config.webhooks.allow_private_addresses = true;
    let mut receiver = Receiver::start().await.expect("receiver");
    let server = TestServer::started(config).await;
    let signer =
        PrivateKeySigner::from_bytes(&keccak256("lifecycle on the devnet")).expect("a key");
    let from = chainsieve_tests::hex_address(&signer.address());
    let mut client = WsClient::connect(&server.ws_url("bsc", "demo"))
        .await
        .expect("ws");
    let filter = json!(["transactionLifecycle", {"fromAddress": [from]}]);
    let life = client.subscribe(filter.clone()).await.expect("by sender");
    let (hook, secret) = create(&mut client, &receiver.url(), filter, Value::Null).await;
    let mut got = std::collections::BTreeMap::new();
    let send = async |client: &mut WsClient, raw: String| {
        client
            .call("eth_sendRawTransaction", json!([raw]))
            .await
            .expect("an answer")
    };
    let gwei = 1_000_000_000u128;
    let first = send(&mut client, bsc_transfer(&signer, 0, 100 * gwei)).await;
    let first = first["result"].as_str().expect("a hash").to_string();
    let low = send(&mut client, bsc_transfer(&signer, 0, 105 * gwei)).await;
    assert_eq!(low["error"]["code"], -32000, "{low}");
    assert!(
        low["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("replacement transaction underpriced")),
        "{low}"
    );
    let second = send(&mut client, bsc_transfer(&signer, 0, 200 * gwei)).await;
    let second = second["result"].as_str().expect("a hash").to_string();
    let third = send(&mut client, bsc_transfer(&signer, 1, 100 * gwei)).await;
    let third = third["result"].as_str().expect("a hash").to_string();
    read_until(&mut client, &mut got, &life, 4).await;
    let dropped = client
        .call("anvil_dropTransaction", json!([third]))
        .await
        .expect("an answer");
    assert_eq!(dropped["result"], Value::Null, "{dropped}");
    read_until(&mut client, &mut got, &life, 5).await;
    let again = client
        .call("anvil_dropTransaction", json!([third]))
        .await
        .expect("an answer");
    assert_eq!(again["error"]["code"], -32000, "{again}");
    let malformed = client
        .call("anvil_dropTransaction", json!(["0x12"]))
        .await
        .expect("an answer");
    assert_eq!(malformed["error"]["code"], -32602, "{malformed}");
    for _ in 0..3 {
        server.mine("bsc", "demo").await;
    }
    read_until(&mut client, &mut got, &life, 8).await;
    let stage = |hash: &str, stage: &str| (hash.to_string(), stage.to_string());
    assert_eq!(
        turns(&got[&life]),
        [
            stage(&first, "pending"),
            stage(&first, "replaced"),
            stage(&second, "pending"),
            stage(&third, "pending"),
            stage(&third, "dropped"),
            stage(&second, "mined"),
            stage(&second, "safe"),
            stage(&second, "finalized"),
        ]
    );
    let mined = &got[&life][5]["result"];
    assert_eq!(
        (&mined["status"], &mined["gasUsed"]),
        (&json!("0x1"), &json!("0x5208")),
        "{mined}"
    );
    // The webhook's: the same turns, the same cursors.
    let event = |params: &Value| json!([params["result"], params["cursor"]]);
    let told: Vec<Value> = got[&life].iter().map(event).collect();
    let last = told.last().expect("turns")[1].clone();
    receiver
        .wait_for("the webhook's last turn", |deliveries| {
            delivered(deliveries, &hook, &secret)
                .iter()
                .any(|params| params["cursor"] == last)
        })
        .await;
    let hooked: Vec<Value> = delivered(&receiver.deliveries(), &hook, &secret)
        .iter()
        .map(event)
        .collect();
    assert_eq!(hooked, told, "the webhook's turns");
    // The dropped nonce is the sender's next again.
    let count = client
        .call("eth_getTransactionCount", json!([from, "pending"]))
        .await
        .expect("an answer");
    assert_eq!(count["result"], "0x1", "{count}");
    server.stop().await;
}
