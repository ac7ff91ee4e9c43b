//! History from the nodes (docs/src/api.md, History from the nodes): a
//! `fromBlock` older than the log's window is read from the chain's node
//! (anvil), then the log and live follow with no gap and no duplicate, for
//! every mined topic (`transactionReceipts` with the node's receipts).

use std::collections::BTreeMap;

use chainsieve_config::{
    ChainConfig, Config, FiltersConfig, HistoryConfig, LogConfig, SourceConfig, Span,
};
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, deploy, ping_client, transfer_contract};
use chainsieve_tests::faulty::FaultyNode;
use chainsieve_tests::filters::{built, place};
use chainsieve_tests::{TestServer, WsClient, quantity};
use serde_json::{Value, json};

const KEY: &str = "history-test";

/// The log keeps this many blocks: the calls below go far past it.
const WINDOW: u64 = 16;

/// A config reading `anvil` whose log keeps [`WINDOW`] blocks.
fn config(anvil: &Anvil, history: HistoryConfig) -> Config {
    Config {
        log: LogConfig {
            window: Span::Blocks(WINDOW),
            ..LogConfig::default()
        },
        history,
        ..anvil.config(KEY)
    }
}

/// [`config`] with history ranges of at most `max_blocks`.
fn at_most(anvil: &Anvil, max_blocks: u64) -> Config {
    let history = HistoryConfig {
        max_blocks,
        ..HistoryConfig::default()
    };
    config(anvil, history)
}

/// The Ping contract and `calls` calls to it, a block each, reaching
/// further back than the window.
struct Past {
    /// A client whose `heads` subscription has seen the tip.
    setup: WsClient,
    heads: String,
    contract: String,
    /// The first call's block.
    from: u64,
    /// The last call's block.
    tip: u64,
}

impl Past {
    async fn made(server: &TestServer, anvil: &Anvil, calls: usize) -> Self {
        let (mut setup, heads, contract) = ping_client(&server.ws_url("eth", KEY), anvil).await;
        let from = anvil.block_number().await.expect("head") + 1;
        anvil.ping(&contract, calls).await;
        let tip = anvil.block_number().await.expect("head");
        setup.until_head(&heads, tip).await;
        Self {
            setup,
            heads,
            contract,
            from,
            tip,
        }
    }

    /// `eth_subscribe`'s params for the contract's logs from the first
    /// call's block.
    fn logs_from(&self) -> Value {
        json!(["logs", { "address": self.contract }, { "fromBlock": format!("{:#x}", self.from) }])
    }

    /// A client of [`Past::logs_from`].
    async fn follow(&self, server: &TestServer) -> WsClient {
        let mut client = WsClient::connect(&server.ws_url("eth", KEY))
            .await
            .expect("connect");
        client
            .subscribe(self.logs_from())
            .await
            .expect("from a block");
        client
    }
}

/// What a client of the mined topics from `from` on received, per topic.
#[derive(Default)]
struct Seen {
    heads: Vec<Value>,
    /// The cursor of each head.
    cursors: Vec<String>,
    logs: Vec<Value>,
    transactions: Vec<Value>,
    receipts: Vec<Value>,
    /// The custom topic's (the example `erc20Transfers`).
    transfers: Vec<Value>,
}

#[tokio::test]
async fn from_block_older_than_the_window_reads_the_nodes_then_goes_live() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let filters = tempfile::tempdir().expect("a filters directory");
    let example = "chainsieve_example_erc20_transfers.wasm";
    place(filters.path(), example, &built(example));
    let config = Config {
        filters: FiltersConfig {
            dir: filters.path().to_path_buf(),
            ..FiltersConfig::default()
        },
        // Five topics' streams at once, one more than the default.
        ..config(
            &anvil,
            HistoryConfig {
                max_streams_per_key: 5,
                ..HistoryConfig::default()
            },
        )
    };
    let server = TestServer::live(config).await;
    let (mut setup, heads, contract) = ping_client(&server.ws_url("eth", KEY), &anvil).await;
    let token = deploy(&mut setup, &heads, &anvil, &transfer_contract()).await;
    let from = anvil.block_number().await.expect("head") + 1;
    // Three windows of calls to two contracts, a block each, and some
    // empty blocks.
    for _ in 0..WINDOW {
        anvil.ping(&contract, 2).await;
        anvil.ping(&token, 1).await;
    }
    anvil.mine(5).await.expect("mine");
    let tip = anvil.block_number().await.expect("head");
    setup.until_head(&heads, tip).await;

    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let option = json!({ "fromBlock": format!("{from:#x}") });
    let on_heads = client
        .subscribe(json!(["newHeads", option]))
        .await
        .expect("heads from a block");
    let on_logs = client
        .subscribe(json!(["logs", { "address": contract }, option]))
        .await
        .expect("logs from a block");
    let on_txs = client
        .subscribe(json!(["bvMinedTransactions", { "toAddress": [contract] }, option]))
        .await
        .expect("transactions from a block");
    let on_transfers = client
        .subscribe(json!(["erc20Transfers", { "tokens": [token] }, option]))
        .await
        .expect("a custom topic from a block");
    let on_receipts = client
        .subscribe(json!(["transactionReceipts", { "toAddress": [contract] }, option]))
        .await
        .expect("receipts from a block");
    // More calls while the history is read: they come after, live.
    anvil.ping(&contract, 1).await;
    anvil.ping(&token, 1).await;
    let last = tip + 2;
    let calls = 2 * WINDOW as usize + 1;
    let transfers = WINDOW as usize + 1;
    let mut seen = Seen::default();
    while seen.heads.len() < (last - from + 1) as usize
        || seen.logs.len() < calls
        || seen.transactions.len() < calls
        || seen.transfers.len() < transfers
        || seen.receipts.len() < calls
    {
        let params = client.next_notification_params().await.expect("in time");
        let id = params["subscription"].as_str().expect("an id");
        let cursor = params["cursor"]
            .as_str()
            .unwrap_or_else(|| panic!("no cursor: {params}"))
            .to_string();
        let result = params["result"].clone();
        match id {
            id if id == on_heads => {
                seen.heads.push(result);
                seen.cursors.push(cursor);
            }
            id if id == on_logs => seen.logs.push(result),
            id if id == on_txs => seen.transactions.push(result),
            id if id == on_transfers => seen.transfers.push(result),
            id if id == on_receipts => seen.receipts.push(result),
            other => panic!("a notification of {other}"),
        }
    }
    // Heads: every block from `from` to the last, once, in order.
    let numbers: Vec<u64> = seen.heads.iter().map(|h| quantity(&h["number"])).collect();
    assert_eq!(numbers, (from..=last).collect::<Vec<_>>());
    for head in &seen.heads {
        let block = anvil.block(quantity(&head["number"])).await.expect("block");
        assert_eq!(head["hash"], block["hash"]);
    }
    // The old blocks' cursors name the block only; the log's a position.
    let hash = seen.heads[0]["hash"].as_str().expect("a hash");
    assert_eq!(seen.cursors[0], format!("eth:@{from}:0:{}", &hash[2..18]));
    let newest = seen.cursors.last().expect("a cursor");
    assert!(!newest.starts_with("eth:@"), "{newest}");
    // Logs, and the custom topic's: what eth_getLogs gives over the same
    // blocks.
    let node_logs = node_logs_of(&anvil, &contract, from, last).await;
    assert_eq!(Value::Array(seen.logs.clone()), node_logs);
    assert_eq!(
        Value::Array(seen.transfers.clone()),
        node_logs_of(&anvil, &token, from, last).await
    );
    // Transactions: the calls, in order.
    let hashes: Vec<&Value> = seen.transactions.iter().map(|tx| &tx["hash"]).collect();
    let node_hashes: Vec<&Value> = node_logs
        .as_array()
        .expect("logs")
        .iter()
        .map(|log| &log["transactionHash"])
        .collect();
    assert_eq!(hashes, node_hashes);
    // Receipts: the node's, of the same calls, read with their blocks
    // from the node (the window's blocks) and from the log.
    for (receipt, hash) in seen.receipts.iter().zip(&node_hashes) {
        let node = anvil
            .rpc("eth_getTransactionReceipt", json!([hash]))
            .await
            .expect("the node's receipt");
        assert_eq!(receipt, &json!([node]));
    }
    assert!(
        seen.transactions
            .iter()
            .all(|tx| tx["from"] == DEV_ACCOUNT.to_lowercase()),
        "{:?}",
        seen.transactions.first()
    );
}

#[tokio::test]
async fn from_block_further_back_than_the_limit_is_refused() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::live(at_most(&anvil, 20)).await;
    anvil.mine(40).await.expect("mine");
    let tip = anvil.block_number().await.expect("head");
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    client.until_head(&heads, tip).await;
    let refused = client
        .call("eth_subscribe", json!(["newHeads", { "fromBlock": "0x1" }]))
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(message.contains("[history] max_blocks"), "{message}");
    // Within the limit: served.
    let served = client
        .call(
            "eth_subscribe",
            json!(["newHeads", { "fromBlock": format!("{:#x}", tip - 18) }]),
        )
        .await
        .expect("answered");
    assert!(served["result"].is_string(), "{served}");
}

/// The logs of `contract` in blocks `from..=to`, as the node gives them.
async fn node_logs_of(anvil: &Anvil, contract: &str, from: u64, to: u64) -> Value {
    let range = json!([{ "fromBlock": format!("{from:#x}"), "toBlock": format!("{to:#x}"), "address": contract }]);
    anvil.rpc("eth_getLogs", range).await.expect("logs")
}

/// The next `count` notifications of `client`: (result, cursor).
async fn take(client: &mut WsClient, count: usize) -> Vec<(Value, String)> {
    let mut taken = Vec::with_capacity(count);
    while taken.len() < count {
        let params = client.next_notification_params().await.expect("in time");
        let cursor = params["cursor"].as_str().expect("a cursor").to_string();
        taken.push((params["result"].clone(), cursor));
    }
    taken
}

#[tokio::test]
async fn a_history_stream_cut_half_way_resumes_from_its_last_cursor() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::live(at_most(&anvil, 10_000)).await;
    let calls = 3 * WINDOW as usize;
    let past = Past::made(&server, &anvil, calls).await;

    let mut cut = past.follow(&server).await;
    let mut got = take(&mut cut, 10).await;
    drop(cut);
    let (_, last) = got.last().expect("ten").clone();
    assert!(
        last.starts_with("eth:@"),
        "a block read from the node: {last}"
    );

    let mut resumed = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    resumed
        .subscribe(json!(["logs", { "address": past.contract }, { "resumeFrom": last }]))
        .await
        .expect("resumed");
    got.extend(take(&mut resumed, calls - 10).await);
    let told: Vec<Value> = got.into_iter().map(|(log, _)| log).collect();
    assert_eq!(
        Value::Array(told),
        node_logs_of(&anvil, &past.contract, past.from, past.tip).await
    );
}

#[tokio::test]
async fn a_cursor_whose_block_was_reorganised_out_after_the_window_is_refused() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::live(at_most(&anvil, 10_000)).await;
    let mut past = Past::made(&server, &anvil, 2 * WINDOW as usize).await;
    let mut client = past.follow(&server).await;
    let (_, cursor) = take(&mut client, 4).await.pop().expect("four");
    drop(client);
    // Every block from the cursor's on replaced by an empty one.
    anvil
        .reorg(2 * WINDOW - 2)
        .await
        .expect("a reorg deeper than the window");
    let reorged = anvil.block(past.tip).await.expect("the new tip");
    loop {
        let (id, head) = past.setup.next_notification().await.expect("a head");
        if id == past.heads && head["hash"] == reorged["hash"] {
            break;
        }
    }
    let refused = past
        .setup
        .call(
            "eth_subscribe",
            json!(["logs", { "address": past.contract }, { "resumeFrom": cursor }]),
        )
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(message.contains("no longer canonical"), "{message}");
}

/// A key runs at most `[history] max_streams_per_key` history streams at
/// once (-32005 beyond), and a stream gives its place back when it is
/// cancelled or reaches the log. The nodes' budget (a call a second here)
/// keeps a stream reading for seconds.
#[tokio::test]
async fn history_streams_are_limited_per_key_and_give_their_place_back() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let history = HistoryConfig {
        max_streams_per_key: 1,
        calls_per_second_per_node: 1,
        ..HistoryConfig::default()
    };
    let server = TestServer::live(config(&anvil, history)).await;
    let calls = 3 * WINDOW as usize;
    let mut past = Past::made(&server, &anvil, calls).await;

    let params = past.logs_from();
    // One cancelled while it reads gives its place back at once.
    let cancelled = past
        .setup
        .subscribe(params.clone())
        .await
        .expect("a history stream");
    assert!(streams_metric(&server).await.ends_with(" 1"), "one running");
    let unsubscribed = past
        .setup
        .call("eth_unsubscribe", json!([cancelled]))
        .await
        .expect("answered");
    assert_eq!(unsubscribed["result"], true, "{unsubscribed}");
    assert!(
        streams_metric(&server).await.ends_with(" 0"),
        "none running"
    );
    let mut first = past.follow(&server).await;
    assert!(streams_metric(&server).await.ends_with(" 1"), "one running");
    let refused = past
        .setup
        .call("eth_subscribe", params.clone())
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32005, "{refused}");
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(message.contains("max_streams_per_key"), "{message}");
    // The first reaches the log: its place is free again.
    take(&mut first, calls).await;
    assert!(
        streams_metric(&server).await.ends_with(" 0"),
        "none running"
    );
    let again = past
        .setup
        .call("eth_subscribe", params)
        .await
        .expect("answered");
    assert!(again["result"].is_string(), "{again}");
}

/// The `chainsieve_history_streams` line of `/metrics`.
async fn streams_metric(server: &TestServer) -> String {
    let metrics = server.metrics().await;
    metrics
        .lines()
        .find(|line| line.starts_with("chainsieve_history_streams "))
        .unwrap_or_else(|| panic!("no history_streams in {metrics}"))
        .to_string()
}

/// While a history stream reads the nodes (slowed by its budget), calls go
/// on and the node reorganises near its tip: the subscriber's logs, each
/// removal undoing the log it names, come to exactly what `eth_getLogs`
/// gives at the end, each once, in chain order.
#[tokio::test]
async fn a_history_stream_meets_traffic_and_a_reorg_at_the_seam() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let history = HistoryConfig {
        // 100 blocks a second: the calls below land while it reads.
        calls_per_second_per_node: 200,
        ..HistoryConfig::default()
    };
    let server = TestServer::live(config(&anvil, history)).await;
    let past = Past::made(&server, &anvil, 10 * WINDOW as usize).await;
    let mut client = past.follow(&server).await;
    anvil.ping(&past.contract, 4).await;
    anvil.reorg(2).await.expect("a reorg at the tip");
    anvil.ping(&past.contract, 3).await;
    let tip = anvil.block_number().await.expect("head");
    let canonical = node_logs_of(&anvil, &past.contract, past.from, tip).await;
    let canonical = canonical.as_array().expect("logs");
    // Each log once; a removal takes back the last one told of.
    let key = |log: &Value| (log["blockHash"].clone(), log["logIndex"].clone());
    let mut told: Vec<Value> = Vec::new();
    while told.len() != canonical.len() || told.last().map(key) != canonical.last().map(key) {
        let (_, log) = client.next_notification().await.expect("a log in time");
        if log["removed"] == true {
            let undone = told.pop().expect("a removal of a log told of");
            assert_eq!(key(&undone), key(&log), "removals undo in reverse order");
        } else {
            assert!(
                !told.iter().any(|seen| key(seen) == key(&log)),
                "told twice: {log}"
            );
            told.push(log);
        }
    }
    assert_eq!(&told, canonical);
}

/// History goes to the next node when the first refuses to read blocks
/// (an error answer), and what comes is still exactly the node's logs.
#[tokio::test]
async fn history_reads_the_next_node_when_the_first_refuses() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let refusing = FaultyNode::start(&anvil.ws_url()).await.expect("a proxy");
    let config = Config {
        chains: BTreeMap::from([(
            "eth".to_string(),
            ChainConfig {
                chain_id: Some(1),
                source: SourceConfig::Nodes(vec![refusing.ws_url(), anvil.ws_url()]),
                ..Default::default()
            },
        )]),
        log: LogConfig {
            window: Span::Blocks(WINDOW),
            ..LogConfig::default()
        },
        ..anvil.config(KEY)
    };
    let server = TestServer::started(config).await;
    for node in 0..2 {
        server.node_state("eth", node, "live").await;
    }
    let calls = 3 * WINDOW as usize;
    let past = Past::made(&server, &anvil, calls).await;
    refusing.refuse("eth_getBlockByNumber");
    let mut client = past.follow(&server).await;
    let told: Vec<Value> = take(&mut client, calls)
        .await
        .into_iter()
        .map(|(log, _)| log)
        .collect();
    assert_eq!(
        Value::Array(told),
        node_logs_of(&anvil, &past.contract, past.from, past.tip).await
    );
    assert!(
        refusing.requests("eth_getBlockByNumber") > 0,
        "the first node was asked"
    );
}

/// At the scale: 2,000 blocks behind a 128-block window, calls to
/// two contracts every ten blocks, more calls while the history is read
/// and a reorg at the tip. Once each subscriber's removals have undone
/// what they name: the heads are the node's canonical blocks, each
/// contract's logs (and the custom topic's transfers) what `eth_getLogs`
/// gives, the mined transactions the blocks' own, each once, in order.
#[tokio::test]
async fn two_thousand_blocks_behind_a_128_block_window() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let filters = tempfile::tempdir().expect("a filters directory");
    let example = "chainsieve_example_erc20_transfers.wasm";
    place(filters.path(), example, &built(example));
    let config = Config {
        log: LogConfig {
            window: Span::Blocks(128),
            ..LogConfig::default()
        },
        filters: FiltersConfig {
            dir: filters.path().to_path_buf(),
            ..FiltersConfig::default()
        },
        // One stream for each of the five topics.
        history: HistoryConfig {
            max_streams_per_key: 5,
            ..HistoryConfig::default()
        },
        ..anvil.config(KEY)
    };
    let server = TestServer::started(config).await;
    server.wait_live("eth").await;
    let (mut setup, heads, ping) = ping_client(&server.ws_url("eth", KEY), &anvil).await;
    let token = deploy(&mut setup, &heads, &anvil, &transfer_contract()).await;
    let from = anvil.block_number().await.expect("head") + 1;
    for _ in 0..100 {
        anvil.ping(&ping, 1).await;
        anvil.ping(&token, 1).await;
        anvil.mine(18).await.expect("mine");
    }
    let tip = anvil.block_number().await.expect("head");
    assert_eq!(tip - from + 1, 2_000);
    setup.until_head(&heads, tip).await;

    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let option = json!({ "fromBlock": format!("{from:#x}") });
    let mut topics = BTreeMap::new();
    for (name, params) in [
        ("heads", json!(["newHeads", option])),
        ("ping", json!(["logs", { "address": ping }, option])),
        ("token", json!(["logs", { "address": token }, option])),
        (
            "mined",
            json!(["bvMinedTransactions", { "fromAddress": DEV_ACCOUNT }, option]),
        ),
        (
            "transfers",
            json!(["erc20Transfers", { "tokens": [token] }, option]),
        ),
    ] {
        let id = client.subscribe(params).await.expect("from a block");
        topics.insert(id, name);
    }
    anvil.ping(&ping, 2).await;
    anvil.ping(&token, 1).await;
    anvil.reorg(2).await.expect("a reorg at the tip");
    anvil.ping(&ping, 1).await;
    let last = anvil.block_number().await.expect("head");

    // What the node holds canonical at the end.
    let mut blocks = Vec::new();
    for number in from..=last {
        let block = anvil
            .rpc(
                "eth_getBlockByNumber",
                json!([format!("{number:#x}"), false]),
            )
            .await
            .expect("a block");
        blocks.push(block);
    }
    let expected_heads: Vec<Value> = blocks.iter().map(|b| b["hash"].clone()).collect();
    let expected_txs: Vec<Value> = blocks
        .iter()
        .flat_map(|b| b["transactions"].as_array().cloned().unwrap_or_default())
        .collect();
    let expected_ping = node_logs_of(&anvil, &ping, from, last).await;
    let expected_token = node_logs_of(&anvil, &token, from, last).await;

    // Heads: a head replaces the one of its number and those above it.
    let mut heads_told: BTreeMap<u64, Value> = BTreeMap::new();
    // Logs and transactions: a removal takes back the last one told of.
    let mut told: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let key = |item: &Value| {
        (
            item["blockHash"].clone(),
            item["logIndex"].clone(),
            item["hash"].clone(),
        )
    };
    let done = |heads: &BTreeMap<u64, Value>, told: &BTreeMap<&str, Vec<Value>>| {
        let hashes: Vec<Value> = heads.values().map(|h| h["hash"].clone()).collect();
        let mined: Vec<Value> = told
            .get("mined")
            .map(|txs| txs.iter().map(|tx| tx["hash"].clone()).collect())
            .unwrap_or_default();
        hashes == expected_heads
            && Some(&expected_ping) == told.get("ping").cloned().map(Value::Array).as_ref()
            && Some(&expected_token) == told.get("token").cloned().map(Value::Array).as_ref()
            && Some(&expected_token) == told.get("transfers").cloned().map(Value::Array).as_ref()
            && mined == expected_txs
    };
    while !done(&heads_told, &told) {
        let (id, item) = client
            .next_notification()
            .await
            .unwrap_or_else(|e| panic!("{e}: heads {heads_told:?}, told {told:?}"));
        let name = topics[&id];
        if name == "heads" {
            let number = quantity(&item["number"]);
            heads_told.split_off(&number);
            heads_told.insert(number, item);
            continue;
        }
        let list = told.entry(name).or_default();
        if item["removed"] == true {
            let undone = list.pop().expect("a removal of something told of");
            assert_eq!(key(&undone), key(&item), "removals undo in reverse order");
        } else {
            assert!(
                !list.iter().any(|seen| key(seen) == key(&item)),
                "told twice: {item}"
            );
            list.push(item);
        }
    }
    assert_eq!(
        heads_told.keys().copied().collect::<Vec<_>>(),
        (from..=last).collect::<Vec<_>>()
    );
}
