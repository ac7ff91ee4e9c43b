//! Real nodes as upstreams: three anvil processes (chain ids 1, 56, 137)
//! feed chainsieve, and real WebSocket clients check every event type, the
//! reorg guarantees and reconnects with backfill.

use chainsieve_config::{Config, SourceConfig, Span};
use chainsieve_model::SourceState;
use chainsieve_tests::anvil::{
    Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2, deploy_ping, mined, ping_contract, ping_topic,
};
use chainsieve_tests::{TestServer, WsClient, of, reading};
use serde_json::{Value, json};

const KEY: &str = "upstream-test";

/// A config whose chains read the given nodes.
fn config(nodes: &[(&str, &Anvil)]) -> Config {
    let chains = nodes
        .iter()
        .map(|(name, anvil)| (*name, anvil.chain_id, SourceConfig::node(anvil.ws_url())));
    reading(KEY, chains)
}

fn hash_of(tx: &Value) -> String {
    tx["hash"].as_str().expect("transaction hash").to_string()
}

fn number(value: &Value) -> u64 {
    let text = value.as_str().expect("hex quantity");
    u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("hex")
}

/// Every event type on every chain, from real signed transactions: a
/// legacy transfer, an EIP-1559 transfer, a contract deployment and a call
/// that emits a log, each seen pending and then mined.
#[tokio::test]
async fn every_event_type_on_three_nodes() {
    let (eth, bsc, polygon) =
        tokio::try_join!(Anvil::start(1), Anvil::start(56), Anvil::start(137))
            .expect("three anvils");
    let server = TestServer::started(config(&[
        ("eth", &eth),
        ("bsc", &bsc),
        ("polygon", &polygon),
    ]))
    .await;
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
    // Transactions go to the node, whose refusal comes back unchanged.
    let refused = client
        .call("eth_sendRawTransaction", json!(["0x00"]))
        .await
        .expect("answered");
    let direct = anvil
        .answer("eth_sendRawTransaction", json!(["0x00"]))
        .await
        .expect("anvil answers");
    assert_eq!(refused["error"], direct["error"], "{refused}");
    assert!(refused["error"].is_object(), "{refused}");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");

    // Deploy the log-emitting contract (mined at once: automine).
    let deploy = anvil
        .send(json!({ "from": DEV_ACCOUNT, "data": ping_contract() }))
        .await
        .expect("deploy");
    let (receipt, _) = mined(&mut client, &heads, anvil, &deploy).await;
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

/// Reorgs of depth 1, 3 and 10 (`anvil_reorg` replaces the last blocks
/// with empty ones; anvil itself sends no removed logs): subscribers get
/// the orphaned logs with `removed: true` and the orphaned transactions
/// with `"removed": true`, each in the exact reverse of their delivery
/// (a block holding two is built on purpose), then every header of the
/// new branch in ascending order.
#[tokio::test]
async fn reorgs_remove_and_reemit_exactly() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::started(config(&[("eth", &anvil)])).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let contract = deploy_ping(&mut client, &heads, &anvil).await;
    let logs = client
        .subscribe(json!(["logs", { "address": contract }]))
        .await
        .expect("logs");
    let orphans = client
        .subscribe(json!(["bvMinedTransactions", { "toAddress": [contract] }]))
        .await
        .expect("mined");
    for depth in [1u64, 3, 10] {
        // `depth` blocks: the first holds two calls (two logs in one block,
        // on purpose), each other one call (automine), each call one log.
        let call = json!({ "from": DEV_ACCOUNT, "to": contract, "data": "0x" });
        let mut calls = Vec::new();
        anvil.automine(false).await.expect("automine off");
        for _ in 0..2 {
            calls.push(anvil.send(call.clone()).await.expect("call"));
        }
        anvil.mine(1).await.expect("mine both calls in one block");
        anvil.automine(true).await.expect("automine on");
        for _ in 1..depth {
            calls.push(anvil.send(call.clone()).await.expect("call"));
        }
        let count = calls.len();
        let (receipt, mut before) =
            mined(&mut client, &heads, &anvil, calls.last().expect("calls")).await;
        let tip = number(&receipt["blockNumber"]);
        while of(&before, &logs).len() < count || of(&before, &orphans).len() < count {
            before.push(client.next_notification().await.expect("log or tx"));
        }
        let old_logs: Vec<Value> = of(&before, &logs).into_iter().cloned().collect();
        let old_txs: Vec<Value> = of(&before, &orphans).into_iter().cloned().collect();
        assert_eq!(old_txs.iter().map(hash_of).collect::<Vec<_>>(), calls);

        anvil.reorg(depth).await.expect("anvil_reorg");
        // One more block on the new branch, so the change is seen whether
        // or not anvil announces the replaced blocks.
        anvil.mine(1).await.expect("mine");
        let new_tip = tip + 1;
        let mut after = Vec::new();
        while of(&after, &heads)
            .last()
            .is_none_or(|h| number(&h["number"]) != new_tip)
            || of(&after, &logs).len() < count
            || of(&after, &orphans).len() < count
        {
            after.push(client.next_notification().await.expect("reorg events"));
        }

        let mut expected_logs: Vec<Value> = old_logs.iter().rev().cloned().collect();
        for log in &mut expected_logs {
            log["removed"] = json!(true);
        }
        let removed_logs: Vec<Value> = of(&after, &logs).into_iter().cloned().collect();
        assert_eq!(
            removed_logs, expected_logs,
            "depth {depth}: removed logs, the exact reverse of their delivery"
        );
        let removed_txs: Vec<&Value> = of(&after, &orphans);
        assert_eq!(
            removed_txs.iter().map(|tx| hash_of(tx)).collect::<Vec<_>>(),
            calls.iter().rev().cloned().collect::<Vec<_>>(),
            "depth {depth}: removed transactions, the exact reverse of their delivery"
        );
        assert!(removed_txs.iter().all(|tx| tx["removed"] == true));
        let new_heads = of(&after, &heads);
        let numbers: Vec<u64> = new_heads.iter().map(|h| number(&h["number"])).collect();
        assert_eq!(
            numbers,
            (tip - depth + 1..=new_tip).collect::<Vec<_>>(),
            "depth {depth}: the new branch's headers in order"
        );
        for head in new_heads {
            let node = anvil.block(number(&head["number"])).await.expect("block");
            assert_eq!(
                head["hash"], node["hash"],
                "depth {depth}: new branch hashes"
            );
        }
    }
}

/// A node killed mid-stream and restarted on the same chain, with blocks
/// mined while it was unreachable: every block reaches subscribers once,
/// in order, and the other chain never stops.
#[tokio::test]
async fn reconnect_backfills_without_gap_or_duplicate() {
    let (mut eth, bsc) = tokio::try_join!(Anvil::start(1), Anvil::start(56)).expect("anvils");
    let server = TestServer::started(config(&[("eth", &eth), ("bsc", &bsc)])).await;
    let mut eth_client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect eth");
    let mut bsc_client = WsClient::connect(&server.ws_url("bsc", KEY))
        .await
        .expect("connect bsc");
    let _eth_heads = eth_client
        .subscribe(json!(["newHeads"]))
        .await
        .expect("heads");
    let bsc_heads = bsc_client
        .subscribe(json!(["newHeads"]))
        .await
        .expect("heads");

    eth.mine(3).await.expect("mine");
    let first = eth_client.next_notification().await.expect("head").1;
    let start = number(&first["number"]);
    let mut eth_seen = vec![start];
    while eth_seen.last() != Some(&3) {
        eth_seen.push(number(
            &eth_client.next_notification().await.expect("head").1["number"],
        ));
    }

    eth.restart(4)
        .await
        .expect("restart with 4 blocks mined meanwhile");
    // BNB Chain keeps flowing whatever happens to Ethereum's node.
    bsc.mine(2).await.expect("mine bsc");
    // (The node's head at connect time, block 0, may come first.)
    let mut bsc_seen = Vec::new();
    while bsc_seen.last() != Some(&2) {
        let (sub, head) = bsc_client.next_notification().await.expect("bsc head");
        assert_eq!(sub, bsc_heads);
        bsc_seen.push(number(&head["number"]));
    }
    assert!(bsc_seen == [1, 2] || bsc_seen == [0, 1, 2], "{bsc_seen:?}");

    eth.mine(2).await.expect("mine after restart");
    while eth_seen.last() != Some(&9) {
        eth_seen.push(number(
            &eth_client.next_notification().await.expect("head").1["number"],
        ));
    }
    assert_eq!(
        eth_seen,
        (start..=9).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    for n in 1..=9 {
        let node = eth.block(n).await.expect("block");
        assert!(!node.is_null(), "block {n} survived the restart");
    }
}

/// A server reading the node at `url` as Ethereum.
async fn eth_server(url: String, window: Option<u64>) -> TestServer {
    let mut config = reading(KEY, [("eth", 1, SourceConfig::node(url))]);
    config.chains.get_mut("eth").expect("eth").window = window.map(Span::Blocks);
    TestServer::started(config).await
}

/// A node on another chain than configured is refused, with a reason that
/// names both chain ids.
#[tokio::test]
async fn a_node_on_the_wrong_chain_is_refused() {
    let bsc = Anvil::start(56).await.expect("anvil");
    let server = eth_server(bsc.ws_url(), None).await;
    let seen = server
        .upstream_status("eth", |s| matches!(s, SourceState::Down { .. }))
        .await;
    // The node is named by its host and port.
    let node = bsc.ws_url().trim_start_matches("ws://").to_string();
    assert_eq!(
        seen,
        SourceState::Down {
            reason: format!(
                "{node}: down (the node reports chain id 56, but this chain is configured with 1)"
            )
        }
    );
}

/// A reorg deeper than the chain's window cannot be connected: the source
/// resynchronises from the new head and keeps following.
#[tokio::test]
async fn a_reorg_deeper_than_the_window_resynchronises() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = eth_server(anvil.ws_url(), Some(4)).await;
    // Following before anything is mined, so the window holds 5..=8.
    server.wait_live("eth").await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    // Live is published before the source's catch-up asks for the latest
    // block: one block first, and the rest once it has arrived (the
    // catch-up is behind then), so the source links every block from 1 up
    // rather than starting from wherever the catch-up found the node.
    let mut seen = Vec::new();
    anvil.mine(1).await.expect("mine");
    heads_until(&mut client, &heads, 1, &mut seen).await;
    anvil.mine(7).await.expect("mine");
    heads_until(&mut client, &heads, 8, &mut seen).await;
    // (The catch-up may have delivered genesis to this subscription too.)
    let from = seen[0];
    assert!(
        from <= 1 && seen == (from..=8).collect::<Vec<_>>(),
        "{seen:?}"
    );
    anvil.reorg(6).await.expect("reorg deeper than the window");
    anvil.mine(2).await.expect("mine");
    let mut after = Vec::new();
    while after
        .last()
        .is_none_or(|h: &Value| number(&h["number"]) != 10)
    {
        after.push(client.next_notification().await.expect("head").1);
    }
    let numbers: Vec<u64> = after.iter().map(|h| number(&h["number"])).collect();
    // Anvil announces the replacement blocks from height 3. Heads below
    // the window (5..=8) cannot be told from stale announcements and are
    // passed over; block 5' does not connect within the window, so the
    // source resynchronises from it and follows the new branch.
    assert_eq!(
        numbers,
        (5..=10).collect::<Vec<_>>(),
        "resynchronised from the new branch"
    );
    for head in &after {
        let node = anvil.block(number(&head["number"])).await.expect("block");
        assert_eq!(head["hash"], node["hash"]);
    }
}

/// Reads heads of `heads` into `seen` until block `last` arrives.
async fn heads_until(client: &mut WsClient, heads: &str, last: u64, seen: &mut Vec<u64>) {
    while seen.last() != Some(&last) {
        let (sub, head) = client.next_notification().await.expect("head");
        assert_eq!(sub, heads);
        seen.push(number(&head["number"]));
    }
}

/// An unreachable node is reported with the URL and the reason, the server
/// runs on, and the chain goes live once the node appears.
#[tokio::test]
async fn an_unreachable_node_is_reported_and_joined_when_it_appears() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("ws://127.0.0.1:{port}");
    let server = eth_server(url.clone(), None).await;
    let down = server
        .upstream_status("eth", |s| matches!(s, SourceState::Down { .. }))
        .await;
    let SourceState::Down { reason } = down else {
        unreachable!("waited for Down");
    };
    assert!(
        reason.starts_with(&format!("127.0.0.1:{port}: down (connecting to {url}: ")),
        "{reason}"
    );
    // The server answers meanwhile.
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let chain_id = client
        .call("eth_chainId", json!([]))
        .await
        .expect("chainId");
    assert_eq!(chain_id["result"], "0x1");
    // The node comes up on that port: the chain goes live.
    let _anvil = Anvil::start_on(1, port).await.expect("anvil on the port");
    server.wait_live("eth").await;
}
