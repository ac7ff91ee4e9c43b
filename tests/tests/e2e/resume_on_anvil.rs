//! Resume with a real node upstream (anvil): a client away while the node
//! reorganises (`anvil_reorg`) comes back with its cursors and gets the
//! orphaned logs and transactions as removed, then the new branch; with
//! the log persisted (`data_dir`), cursors from before a server
//! restart resume after it, the blocks mined while it was down included.

use std::collections::BTreeMap;

use chainsieve_config::{Config, LogConfig};
use chainsieve_tests::anvil::{Anvil, deploy_ping, ping_client};
use chainsieve_tests::{TestServer, WsClient, quantity};
use serde_json::{Value, json};

const KEY: &str = "resume-test";

/// A config whose eth chain reads `anvil`, its log kept in `data_dir`.
fn config(anvil: &Anvil, data_dir: &std::path::Path) -> Config {
    Config {
        log: LogConfig {
            data_dir: Some(data_dir.to_path_buf()),
            ..LogConfig::default()
        },
        ..anvil.config(KEY)
    }
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
    let server = TestServer::live(config(&anvil, data.path())).await;
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
    let server = TestServer::live(config(&anvil, data.path())).await;
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
    let server = TestServer::started(anvil.config(KEY)).await;
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

/// A quorum chain restarted behind two nodes that forked while it was
/// down (the log on disk): both nodes' heads are walked down to the
/// restored blocks, so the blocks up to the fork point get both votes and
/// go out, in order, to a client resuming by cursor, and nothing past it
/// does. A chain that then stays put while its nodes are far past it is
/// not live: `/readyz` and `/metrics` say it is stuck and why, and each
/// node's lag is negative (it is ahead of the chain).
#[tokio::test]
async fn a_quorum_chain_restarted_behind_forked_nodes_reaches_their_fork_point_and_says_it_is_stuck()
 {
    use chainsieve_config::{Agreement, ChainConfig, SourceConfig, Span};
    use chainsieve_model::SourceState;
    use chainsieve_tests::anvil::DEV_ACCOUNT;

    // BNB Chain's id: its 0.45 s cadence makes the stall threshold short.
    let a = Anvil::start_with(56, 0, &["--no-mining"])
        .await
        .expect("anvil");
    let data = tempfile::tempdir().expect("data dir");
    let config = |nodes: Vec<String>, quorum: Option<u64>| Config {
        chains: BTreeMap::from([(
            "eth".to_string(),
            ChainConfig {
                chain_id: Some(56),
                source: SourceConfig::Nodes(nodes),
                agreement: if quorum.is_some() {
                    Agreement::Quorum
                } else {
                    Agreement::First
                },
                quorum,
                window: Some(Span::Blocks(150)),
                ..Default::default()
            },
        )]),
        log: LogConfig {
            data_dir: Some(data.path().to_path_buf()),
            ..LogConfig::default()
        },
        ..a.config(KEY)
    };
    // The first run: one node, the chain to block 67.
    let first = TestServer::started(config(vec![a.ws_url()], None)).await;
    first.wait_live("eth").await;
    let mut client = WsClient::connect(&first.ws_url("eth", KEY))
        .await
        .expect("connect");
    client.subscribe(json!(["newHeads"])).await.expect("heads");
    a.mine(67).await.expect("mine");
    let cursor = loop {
        let params = client.next_notification_params().await.expect("a head");
        if quantity(&params["result"]["number"]) == 67 {
            break params["cursor"].clone();
        }
    };
    drop(client);
    first.stop().await;

    // Meanwhile: both nodes share blocks to 86, then each mines its own
    // 127 (B's hold a transaction, A's none).
    a.mine(19).await.expect("mine");
    let parent = format!("http://127.0.0.1:{}", a.port);
    let b = Anvil::start_with(56, 0, &["--no-mining", "--fork-url", &parent])
        .await
        .expect("a forked anvil");
    a.mine(127).await.expect("mine");
    b.send(json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT, "value": "0x1" }))
        .await
        .expect("a transaction");
    b.mine(127).await.expect("mine");
    let hash = |block: Value| block["hash"].clone();
    assert_eq!(
        hash(a.block(86).await.expect("a block")),
        hash(b.block(86).await.expect("a block"))
    );
    assert_ne!(
        hash(a.block(87).await.expect("a block")),
        hash(b.block(87).await.expect("a block"))
    );

    let server = TestServer::started(config(vec![a.ws_url(), b.ws_url()], Some(2))).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let resumed = client
        .subscribe(json!(["newHeads", { "resumeFrom": cursor }]))
        .await
        .expect("resumed");
    let mut numbers = Vec::new();
    while numbers.last() != Some(&86) {
        let (id, head) = client.next_notification().await.expect("a head");
        assert_eq!(id, resumed);
        numbers.push(quantity(&head["number"]));
    }
    assert_eq!(
        numbers,
        (68..=86).collect::<Vec<_>>(),
        "each block once, in order"
    );

    let stuck = server
        .upstream_status("eth", |status| matches!(status, SourceState::Stuck { .. }))
        .await;
    let SourceState::Stuck { reason } = stuck else {
        unreachable!()
    };
    assert!(
        reason.contains("block 86") && reason.contains("chains.eth.quorum"),
        "{reason}"
    );
    let (status, tip) = server
        .post(
            "eth",
            KEY,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
        )
        .await;
    assert_eq!(
        (status, &tip["result"]),
        (200, &json!("0x56")),
        "nothing past the fork"
    );
    let response = reqwest::get(format!("http://{}/readyz", server.addr))
        .await
        .expect("/readyz");
    assert_eq!(response.status(), 503);
    let readiness: Value = response.json().await.expect("its JSON");
    let chain = &readiness["chains"]["eth"];
    assert_eq!(chain["state"], "stuck", "{readiness}");
    assert_eq!(chain["reason"], json!(reason));
    assert_eq!(chain["head"], 86);
    for node in chain["nodes"].as_array().expect("nodes") {
        assert_eq!(
            (&node["state"], &node["lag"]),
            (&json!("live"), &json!(-127)),
            "{node}"
        );
    }
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("chainsieve_source_live{chain=\"eth\"} 0"),
        "{metrics}"
    );
    let lags: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("chainsieve_node_head_lag_blocks{"))
        .collect();
    assert_eq!(lags.len(), 2, "{metrics}");
    assert!(lags.iter().all(|line| line.ends_with(" -127")), "{lags:?}");
}

/// What the log says of the event log's file: a new one has nothing to
/// restore (no "head 0"), a restarted one names the blocks it restored.
#[tokio::test]
async fn the_event_log_file_is_announced_as_new_then_as_restored() {
    // The log is opened as the server starts, on this test's thread (the
    // runtime is current-thread).
    let (kept, _scope) = chainsieve_tests::logs::kept("chainsieve_chain=info");
    let anvil = Anvil::start(1).await.expect("anvil");
    let data = tempfile::tempdir().expect("data dir");

    let first = TestServer::live(config(&anvil, data.path())).await;
    let mut client = WsClient::connect(&first.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    anvil.mine(1).await.expect("mine");
    client.until_head(&heads, 1).await;
    drop(client);
    first.stop().await;
    let logged = kept.said();
    assert!(
        logged.contains("event log: nothing to restore, a new file"),
        "{logged}"
    );
    assert!(!logged.contains("head=0"), "{logged}");

    let _again = TestServer::live(config(&anvil, data.path())).await;
    let logged = kept.said();
    assert!(logged.contains("event log restored: blocks"), "{logged}");
}
