//! History on an edge (docs/src/api.md, History from the nodes): an edge
//! of no node serves a `fromBlock` older than its own log from the chain's
//! stream on the bus, then its log, then live; older than the stream
//! reaches, -32001 naming where it reaches; an edge with a node reads that
//! from the node.

use std::collections::BTreeMap;

use chainsieve_config::{BusConfig, Config, LogConfig, Role, SourceConfig, Span};
use chainsieve_tests::anvil::{Anvil, ping_client};
use chainsieve_tests::nats::Nats;
use chainsieve_tests::{TestServer, WsClient, chained_numbers, quantity};
use serde_json::{Value, json};

const KEY: &str = "bus-history-test";

fn bus(nats: &Nats) -> BusConfig {
    BusConfig {
        urls: vec![nats.url()],
        ..BusConfig::default()
    }
}

fn window(blocks: u64) -> LogConfig {
    LogConfig {
        window: Span::Blocks(blocks),
        ..LogConfig::default()
    }
}

/// An edge on `nats` serving `config`'s chains with a log of 16 blocks.
async fn edge_of(nats: &Nats, config: Config) -> TestServer {
    TestServer::started(Config {
        role: Role::Edge,
        bus: bus(nats),
        log: window(16),
        ..config
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_reads_history_from_the_stream_then_its_log() {
    let anvil = Anvil::start(1).await.expect("anvil");
    // Blocks from before the ingest: its log (and so the stream) begins
    // with the last 8 of them.
    anvil.mine(30).await.expect("mine");
    let nats = Nats::start().await.expect("nats");
    let ingest = TestServer::started(Config {
        role: Role::Ingest,
        bus: bus(&nats),
        log: window(8),
        ..anvil.config(KEY)
    })
    .await;
    ingest.wait_live("eth").await;
    // Of no node: its chain's source is the bus alone.
    let mut no_node = anvil.config(KEY);
    for chain in no_node.chains.values_mut() {
        chain.source = SourceConfig::Devnet;
    }
    let edge = edge_of(&nats, no_node).await;
    let url = edge.ws_url("eth", KEY);

    // Calls a block each, far past the edge's window of 16.
    let (mut setup, heads, ping) = ping_client(&url, &anvil).await;
    let from = anvil.block_number().await.expect("head") + 1;
    anvil.ping(&ping, 60).await;
    let tip = anvil.block_number().await.expect("head");
    setup.until_head(&heads, tip).await;

    let mut client = WsClient::connect(&url).await.expect("connect");
    let option = json!({ "fromBlock": format!("{from:#x}") });
    let head_id = client
        .subscribe(json!(["newHeads", option]))
        .await
        .expect("heads from the stream");
    let log_id = client
        .subscribe(json!(["logs", { "address": ping }, option]))
        .await
        .expect("logs from the stream");
    // Live calls while it reads.
    anvil.ping(&ping, 3).await;
    let last = tip + 3;
    let mut seen: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let count = |seen: &BTreeMap<String, Vec<Value>>, id: &str| seen.get(id).map_or(0, Vec::len);
    while count(&seen, &head_id) < (last - from + 1) as usize
        || count(&seen, &log_id) < (last - from + 1) as usize
    {
        let (id, result) = client.next_notification().await.expect("in time");
        seen.entry(id).or_default().push(result);
    }
    assert_eq!(
        chained_numbers(&seen[&head_id]),
        (from..=last).collect::<Vec<_>>()
    );
    let range = json!([{ "fromBlock": format!("{from:#x}"), "toBlock": format!("{last:#x}"), "address": ping }]);
    let node_logs = anvil.rpc("eth_getLogs", range).await.expect("logs");
    assert_eq!(Value::Array(seen[&log_id].clone()), node_logs);

    // Older than the stream reaches: refused, naming its reach.
    let refused = client
        .call("eth_subscribe", json!(["newHeads", { "fromBlock": "0x2" }]))
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("stream on the bus reaches back to block") && message.contains("no node"),
        "{message}"
    );
    let reach: u64 = message
        .split("reaches back to block ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("names a block: {message}"));
    assert!((20..from).contains(&reach), "reaches back to {reach}");

    // An edge with a node reads what the stream no longer holds from it.
    let with_node = edge_of(&nats, anvil.config(KEY)).await;
    let mut client = WsClient::connect(&with_node.ws_url("eth", KEY))
        .await
        .expect("connect");
    let old = client
        .subscribe(json!(["newHeads", { "fromBlock": "0x2" }]))
        .await
        .expect("older than the stream, from the node");
    let mut numbers = Vec::new();
    while numbers.len() < (last - 1) as usize {
        let (id, head) = client.next_notification().await.expect("in time");
        assert_eq!(id, old);
        numbers.push(quantity(&head["number"]));
    }
    assert_eq!(numbers, (2..=last).collect::<Vec<_>>());
}
