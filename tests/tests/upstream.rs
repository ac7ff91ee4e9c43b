//! Real nodes as upstreams: three anvil processes (chain ids 1, 56, 137)
//! feed chainsieve, and real WebSocket clients check every event type, the
//! reorg guarantees and reconnects with backfill.

use std::collections::BTreeMap;

use alloy_primitives::keccak256;
use chainsieve::config::{AuthConfig, ChainConfig, Config, SourceConfig};
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2};
use chainsieve_tests::{TestServer, WsClient, of};
use serde_json::{Value, json};

const KEY: &str = "upstream-test";

/// A server whose chains read the given nodes.
async fn server(nodes: &[(&str, &Anvil)]) -> TestServer {
    let chains: BTreeMap<String, ChainConfig> = nodes
        .iter()
        .map(|(name, anvil)| {
            (
                name.to_string(),
                ChainConfig {
                    chain_id: Some(anvil.chain_id),
                    source: SourceConfig::Node(anvil.ws_url()),
                    ..Default::default()
                },
            )
        })
        .collect();
    TestServer::start(Config {
        chains,
        auth: AuthConfig {
            keys: vec![KEY.to_string()],
        },
        ..Config::default()
    })
    .await
    .expect("server starts")
}

/// The topic of the log the test contract emits on every call.
fn ping_topic() -> String {
    keccak256("Ping()").to_string()
}

/// Init code of a contract whose runtime emits `Ping()` (LOG1, no data)
/// on every call: `CODECOPY` the 39-byte runtime and `RETURN` it.
fn ping_contract() -> String {
    let runtime = format!("7f{}60006000a100", &ping_topic()[2..]);
    assert_eq!(runtime.len(), 39 * 2);
    format!("0x6027600c60003960276000f3{runtime}")
}

fn hash_of(tx: &Value) -> String {
    tx["hash"].as_str().expect("transaction hash").to_string()
}

fn number(value: &Value) -> u64 {
    let text = value.as_str().expect("hex quantity");
    u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("hex")
}

/// The receipt of `hash` once its block has arrived on the `newHeads`
/// subscription `heads` (so everything before it was processed too).
/// Anvil answers `eth_sendTransaction` before its automine block exists,
/// so the receipt is looked up again after each head.
async fn mined(client: &mut WsClient, heads: &str, anvil: &Anvil, hash: &str) -> Value {
    let mut newest = 0;
    loop {
        let receipt = anvil
            .rpc("eth_getTransactionReceipt", json!([hash]))
            .await
            .expect("receipt");
        if !receipt.is_null() && newest >= number(&receipt["blockNumber"]) {
            return receipt;
        }
        loop {
            let (sub, head) = client.next_notification().await.expect("a head");
            if sub == heads {
                newest = number(&head["number"]);
                break;
            }
        }
    }
}

/// Every event type on every chain, from real signed transactions: a
/// legacy transfer, an EIP-1559 transfer, a contract deployment and a call
/// that emits a log, each seen pending and then mined.
#[tokio::test]
async fn every_event_type_on_three_nodes() {
    let (eth, bsc, polygon) =
        tokio::try_join!(Anvil::start(1), Anvil::start(56), Anvil::start(137))
            .expect("three anvils");
    let server = server(&[("eth", &eth), ("bsc", &bsc), ("polygon", &polygon)]).await;
    for (name, anvil) in [("eth", &eth), ("bsc", &bsc), ("polygon", &polygon)] {
        check_chain(&server, name, anvil).await;
    }
}

async fn check_chain(server: &TestServer, name: &str, anvil: &Anvil) {
    let mut client = WsClient::connect(&server.ws_url(name, KEY))
        .await
        .expect("connect");
    let chain_id = client
        .call("eth_chainId", json!([]))
        .await
        .expect("chainId");
    assert_eq!(number(&chain_id["result"]), anvil.chain_id, "{name}");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");

    // Deploy the log-emitting contract (mined at once: automine).
    let deploy = anvil
        .send(json!({ "from": DEV_ACCOUNT, "data": ping_contract() }))
        .await
        .expect("deploy");
    let receipt = mined(&mut client, &heads, anvil, &deploy).await;
    let contract = receipt["contractAddress"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: contract address in {receipt}"))
        .to_string();
    let deploy_block = number(&receipt["blockNumber"]);

    let pending_full = client
        .subscribe(json!(["bvPendingTransactions", { "fromAddress": [DEV_ACCOUNT] }]))
        .await
        .expect("bvPending");
    let pending_hashes = client
        .subscribe(json!(["newPendingTransactions"]))
        .await
        .expect("newPending");
    let mined_from = client
        .subscribe(json!(["bvMinedTransactions", { "fromAddress": [DEV_ACCOUNT] }]))
        .await
        .expect("bvMined from");
    let mined_call = client
        .subscribe(json!(["bvMinedTransactions", { "toAddress": [contract], "methodIds": ["0x12345678"] }]))
        .await
        .expect("bvMined call");
    let mined_none = client
        .subscribe(json!(["bvMinedTransactions", { "fromAddress": [DEV_ACCOUNT_2] }]))
        .await
        .expect("bvMined none");
    let logs = client
        .subscribe(json!(["logs", { "address": contract, "topics": [ping_topic()] }]))
        .await
        .expect("logs");

    // Three transactions wait in the mempool, then one block mines them.
    anvil.automine(false).await.expect("automine off");
    let legacy = anvil
        .send(json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x1", "gasPrice": "0x77359400", "type": "0x0" }))
        .await
        .expect("legacy");
    let eip1559 = anvil
        .send(json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x2", "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x1" }))
        .await
        .expect("1559");
    let call = anvil
        .send(json!({ "from": DEV_ACCOUNT, "to": contract, "data": "0x12345678" }))
        .await
        .expect("call");
    let sent = [legacy.clone(), eip1559.clone(), call.clone()];
    // Three pending on each pending subscription before anything is mined.
    let seen = client
        .collect_until(&pending_full, 3)
        .await
        .expect("pending");
    anvil.mine(1).await.expect("mine");
    anvil.automine(true).await.expect("automine on");
    let mined_block = anvil.block_number().await.expect("number");
    let mut all = seen;
    all.extend(client.collect_until(&heads, 1).await.expect("head"));
    // The logs and the mined transactions of that block follow its head
    // on their own topics; collect until the log arrives.
    while of(&all, &logs).is_empty()
        || of(&all, &mined_call).is_empty()
        || of(&all, &mined_from).len() < 3
    {
        all.push(client.next_notification().await.expect("notification"));
    }
    // And every pending hash on the hash subscription (it may trail).
    while of(&all, &pending_hashes).len() < 3 {
        all.push(client.next_notification().await.expect("pending hash"));
    }

    let pending: Vec<&Value> = of(&all, &pending_full);
    assert_eq!(
        pending.iter().map(|tx| hash_of(tx)).collect::<Vec<_>>(),
        sent,
        "{name}: bvPendingTransactions in order"
    );
    assert_eq!(pending[0]["type"], "0x0");
    assert!(pending[0]["gasPrice"].is_string() && pending[0].get("maxFeePerGas").is_none());
    assert_eq!(pending[1]["type"], "0x2");
    assert!(pending[1]["maxFeePerGas"].is_string() && pending[1].get("gasPrice").is_none());
    for tx in &pending {
        assert_eq!(
            tx["blockHash"], "",
            "{name}: pending bv block fields are empty"
        );
        assert_eq!(tx["from"], DEV_ACCOUNT);
    }
    let hashes: Vec<&Value> = of(&all, &pending_hashes);
    assert_eq!(
        hashes,
        sent.iter()
            .map(|h| Value::from(h.as_str()))
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );

    let node_block = anvil.block(mined_block).await.expect("block");
    let head = of(&all, &heads)[0];
    assert_eq!(
        head["hash"], node_block["hash"],
        "{name}: head is the node's block"
    );
    assert_eq!(head["number"], node_block["number"]);
    assert_eq!(head["parentHash"], node_block["parentHash"]);
    assert_eq!(head["stateRoot"], node_block["stateRoot"]);

    let mined: Vec<&Value> = of(&all, &mined_from);
    assert_eq!(
        mined.iter().map(|tx| hash_of(tx)).collect::<Vec<_>>(),
        sent,
        "{name}: bvMinedTransactions fromAddress"
    );
    for tx in &mined {
        assert_eq!(tx["blockHash"], node_block["hash"]);
        assert_eq!(number(&tx["blockNumber"]), mined_block);
    }
    let calls = of(&all, &mined_call);
    assert_eq!(
        calls.len(),
        1,
        "{name}: toAddress + methodIds match only the call"
    );
    assert_eq!(calls[0]["hash"], call.as_str());
    assert!(
        of(&all, &mined_none).is_empty(),
        "{name}: a filter on an idle sender gets nothing"
    );

    let log = of(&all, &logs);
    assert_eq!(log.len(), 1, "{name}: one Ping log");
    assert_eq!(log[0]["address"], contract.as_str());
    assert_eq!(log[0]["topics"], json!([ping_topic()]));
    assert_eq!(log[0]["transactionHash"], call.as_str());
    assert_eq!(log[0]["blockHash"], node_block["hash"]);
    assert_eq!(log[0]["removed"], false);

    // The deployment was mined before the subscriptions; the block methods
    // serve it from the window: `to` is null for a creation.
    let deploy_tx = client
        .call(
            "eth_getBlockByNumber",
            json!([format!("{deploy_block:#x}"), true]),
        )
        .await
        .expect("deploy block");
    let creation = deploy_tx["result"]["transactions"]
        .as_array()
        .expect("transactions")
        .iter()
        .find(|tx| tx["hash"] == deploy.as_str())
        .expect("deployment in its block");
    assert_eq!(creation["to"], Value::Null);
}
