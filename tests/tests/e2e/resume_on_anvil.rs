//! Resume with a real node upstream (anvil): a client away while the node
//! reorganises (`anvil_reorg`) comes back with its cursors and gets the
//! orphaned logs and transactions as removed, then the new branch; with
//! the log persisted (`[log] data_dir`), cursors from before a server
//! restart resume after it, the blocks mined while it was down included.

use std::collections::BTreeMap;

use chainsieve::config::{Config, LogConfig};
use chainsieve_tests::anvil::{Anvil, deploy_ping, ping_client};
use chainsieve_tests::{TestServer, WsClient, quantity};
use serde_json::{Value, json};

const KEY: &str = "resume-test";

/// A server whose eth chain reads `anvil`, its log kept in `data_dir`.
async fn server(anvil: &Anvil, data_dir: &std::path::Path) -> TestServer {
    let config = Config {
        log: LogConfig {
            data_dir: Some(data_dir.to_path_buf()),
            ..LogConfig::default()
        },
        ..anvil.config(KEY)
    };
    let server = TestServer::start(config).await.expect("server starts");
    server.wait_live("eth").await;
    server
}

/// The three topics a client follows: (name, params after the topic).
fn topics(contract: &str) -> [(&'static str, Value); 3] {
    [
        ("newHeads", json!([])),
        ("logs", json!([{ "address": contract }])),
        ("bvMinedTransactions", json!([{ "toAddress": [contract] }])),
    ]
}

/// A client of the three topics, resuming from `cursors` (topic → cursor)
/// where it has one; returns it and subscription id → topic.
async fn follow(
    server: &TestServer,
    contract: &str,
    cursors: &BTreeMap<&'static str, String>,
) -> (WsClient, BTreeMap<String, &'static str>) {
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let mut ids = BTreeMap::new();
    for (topic, params) in topics(contract) {
        let mut call = vec![json!(topic)];
        call.extend(params.as_array().expect("params").iter().cloned());
        if let Some(cursor) = cursors.get(topic) {
            call.push(json!({ "resumeFrom": cursor }));
        }
        let id = client
            .subscribe(Value::Array(call))
            .await
            .expect("subscribe");
        ids.insert(id, topic);
    }
    (client, ids)
}

/// Reads `client` until `done` holds for what it received (topic → the
/// `params` of each notification, in order), recording each topic's last
/// cursor in `cursors`.
async fn read_until(
    client: &mut WsClient,
    ids: &BTreeMap<String, &'static str>,
    cursors: &mut BTreeMap<&'static str, String>,
    done: impl Fn(&BTreeMap<&'static str, Vec<Value>>) -> bool,
) -> BTreeMap<&'static str, Vec<Value>> {
    let mut got: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
    while !done(&got) {
        let params = client
            .next_notification_params()
            .await
            .expect("notifications");
        let topic = ids[params["subscription"].as_str().expect("an id")];
        let cursor = params["cursor"].as_str().expect("a cursor").to_string();
        cursors.insert(topic, cursor);
        got.entry(topic).or_default().push(params);
    }
    got
}

fn results<'a>(got: &'a BTreeMap<&str, Vec<Value>>, topic: &str) -> Vec<&'a Value> {
    got.get(topic)
        .map(|all| all.iter().map(|params| &params["result"]).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn resume_across_a_node_reorg_and_a_server_restart() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let data = tempfile::tempdir().expect("data dir");
    let server = server(&anvil, data.path()).await;
    let mut cursors: BTreeMap<&'static str, String> = BTreeMap::new();

    // A contract, and three calls the client sees: three blocks, each one
    // transaction and one log.
    let mut setup = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let setup_heads = setup.subscribe(json!(["newHeads"])).await.expect("heads");
    let contract = deploy_ping(&mut setup, &setup_heads, &anvil).await;
    let (mut client, ids) = follow(&server, &contract, &cursors).await;
    let calls = anvil.ping(&contract, 3).await;
    let got = read_until(&mut client, &ids, &mut cursors, |got| {
        let logs = results(got, "logs");
        logs.len() == 3
            && results(got, "bvMinedTransactions").len() == 3
            && results(got, "newHeads")
                .last()
                .is_some_and(|head| head["number"] == logs[2]["blockNumber"])
    })
    .await;
    let tip = quantity(&results(&got, "logs")[2]["blockNumber"]);
    let delivered_logs: Vec<Value> = results(&got, "logs").into_iter().cloned().collect();
    // Away: the socket dies, then the node replaces the last two blocks
    // (calls 2 and 3) with empty ones and mines one more.
    drop(client);
    anvil.reorg(2).await.expect("anvil_reorg");
    anvil.mine(1).await.expect("mine");
    setup.until_head(&setup_heads, tip + 1).await;

    let (mut client, ids) = follow(&server, &contract, &cursors).await;
    let back = read_until(&mut client, &ids, &mut cursors, |got| {
        results(got, "logs").len() == 2
            && results(got, "bvMinedTransactions").len() == 2
            && results(got, "newHeads")
                .last()
                .is_some_and(|head| quantity(&head["number"]) == tip + 1)
    })
    .await;
    let mut expected_logs: Vec<Value> = delivered_logs[1..].iter().rev().cloned().collect();
    for log in &mut expected_logs {
        log["removed"] = json!(true);
    }
    assert_eq!(
        results(&back, "logs"),
        expected_logs.iter().collect::<Vec<_>>(),
        "the orphaned logs, removed, last delivered first"
    );
    let removed_txs: Vec<&Value> = results(&back, "bvMinedTransactions");
    assert_eq!(
        removed_txs
            .iter()
            .map(|tx| tx["hash"].clone())
            .collect::<Vec<_>>(),
        vec![json!(calls[2]), json!(calls[1])]
    );
    assert!(removed_txs.iter().all(|tx| tx["removed"] == true));
    let heads: Vec<u64> = results(&back, "newHeads")
        .iter()
        .map(|head| quantity(&head["number"]))
        .collect();
    assert_eq!(heads, vec![tip - 1, tip, tip + 1], "the new branch's heads");

    // The server stops; two more calls are mined meanwhile; a new server
    // on the same data directory takes the same cursors.
    drop(client);
    drop(setup);
    server.stop().await;
    let later = anvil.ping(&contract, 2).await;
    let server = self::server(&anvil, data.path()).await;
    let (mut client, ids) = follow(&server, &contract, &cursors).await;
    let after = read_until(&mut client, &ids, &mut cursors, |got| {
        results(got, "logs").len() == 2
            && results(got, "bvMinedTransactions").len() == 2
            && results(got, "newHeads").len() == 2
    })
    .await;
    assert_eq!(
        results(&after, "bvMinedTransactions")
            .iter()
            .map(|tx| tx["hash"].clone())
            .collect::<Vec<_>>(),
        later.iter().map(|hash| json!(hash)).collect::<Vec<_>>(),
        "the calls mined while the server was down, once each"
    );
    let heads: Vec<u64> = results(&after, "newHeads")
        .iter()
        .map(|head| quantity(&head["number"]))
        .collect();
    assert_eq!(
        heads,
        vec![tip + 2, tip + 3],
        "every head after the last seen"
    );
    assert!(
        results(&after, "logs")
            .iter()
            .all(|log| log["removed"] != true)
    );
}

/// `fromBlock` gives the chain as it is canonical when the subscription is
/// made: after a reorg, the logs `eth_getLogs` gives for the same blocks
/// (none of the replaced branch, no removal), then the live ones.
#[tokio::test]
async fn from_block_gives_the_chain_as_it_is_canonical_then_live() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::start(anvil.config(KEY))
        .await
        .expect("server starts");
    server.wait_live("eth").await;
    let (mut setup, heads, contract) = ping_client(&server.ws_url("eth", KEY), &anvil).await;
    let from = anvil.block_number().await.expect("head") + 1;
    anvil.ping(&contract, 3).await;
    // The last two calls' blocks replaced by empty ones, then one more call.
    anvil.reorg(2).await.expect("anvil_reorg");
    anvil.ping(&contract, 1).await;
    let tip = anvil.block_number().await.expect("head");
    setup.until_head(&heads, tip).await;
    let canonical = anvil
        .rpc(
            "eth_getLogs",
            json!([{ "fromBlock": format!("{from:#x}"), "toBlock": format!("{tip:#x}"), "address": contract }]),
        )
        .await
        .expect("the node's logs");
    let canonical = canonical.as_array().expect("logs").clone();
    assert_eq!(canonical.len(), 2, "the first call's and the last's");

    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let logs = client
        .subscribe(json!(["logs", { "address": contract }, { "fromBlock": format!("{from:#x}") }]))
        .await
        .expect("from a block");
    let mut told = Vec::new();
    while told.len() < canonical.len() {
        let (id, log) = client.next_notification().await.expect("a log");
        assert_eq!(id, logs);
        told.push(log);
    }
    assert_eq!(told, canonical);
    anvil.ping(&contract, 1).await;
    let (_, live) = client.next_notification().await.expect("the live log");
    assert_eq!(quantity(&live["blockNumber"]), tip + 1, "{live}");
    assert_eq!(live["removed"], false);
}
