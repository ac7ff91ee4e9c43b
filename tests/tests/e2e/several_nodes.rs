//! Several nodes per chain (docs/src/nodes.md, Several nodes per chain):
//! a chain reads three nodes, each a [`FaultyNode`] in front of one real
//! anvil, while a second chain reads the same anvil directly. One after
//! another a node is killed, stalls, lags, serves corrupt blocks, and comes
//! back; the subscribers of the three-node chain see exactly what those of
//! the healthy single-node chain see, every topic, in order.

use std::collections::BTreeMap;

use chainsieve_config::{Agreement, Config, SourceConfig};
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, deploy_ping};
use chainsieve_tests::faulty::FaultyNode;
use chainsieve_tests::{TestServer, WsClient, quantity, reading};
use serde_json::{Value, json};

const KEY: &str = "several-nodes-test";

/// `eth` reads `nodes`; `direct` reads `anvil` itself.
fn config(anvil: &Anvil, nodes: &[&FaultyNode]) -> Config {
    let urls = nodes.iter().map(|n| n.ws_url()).collect();
    reading(
        KEY,
        [
            ("eth", anvil.chain_id, SourceConfig::Nodes(urls)),
            ("direct", anvil.chain_id, SourceConfig::node(anvil.ws_url())),
        ],
    )
}

/// `N` nodes, each a proxy in front of `node`.
async fn proxies<const N: usize>(node: &Anvil) -> [FaultyNode; N] {
    let upstream = node.ws_url();
    let started = futures_util::future::try_join_all((0..N).map(|_| FaultyNode::start(&upstream)))
        .await
        .expect("the proxies start");
    started
        .try_into()
        .unwrap_or_else(|_| unreachable!("{N} proxies were started"))
}

/// One client's subscriptions to every mined topic, and what they got.
struct Watcher {
    client: WsClient,
    /// Subscription id → topic.
    topics: BTreeMap<String, &'static str>,
    /// What each topic received, in order.
    seen: BTreeMap<&'static str, Vec<Value>>,
}

impl Watcher {
    async fn start(server: &TestServer, chain: &str, contract: &str) -> Self {
        let mut client = WsClient::connect(&server.ws_url(chain, KEY))
            .await
            .expect("connect");
        let mut topics = BTreeMap::new();
        for (topic, params) in [
            ("newHeads", json!(["newHeads"])),
            ("logs", json!(["logs", { "address": contract }])),
            (
                "bvMinedTransactions",
                json!(["bvMinedTransactions", { "fromAddress": [DEV_ACCOUNT] }]),
            ),
        ] {
            let id = client.subscribe(params).await.expect("subscribed");
            topics.insert(id, topic);
        }
        Self {
            client,
            topics,
            seen: BTreeMap::new(),
        }
    }

    /// Reads until block `number` has arrived on every topic (each block of
    /// this test after the deployment holds one call: a transaction and a
    /// log; topics are not ordered with one another).
    async fn through(&mut self, number: u64) {
        let newest = |seen: &BTreeMap<&str, Vec<Value>>, topic: &str, field: &str| {
            seen.get(topic)
                .and_then(|events| events.last())
                .map_or(0, |event| quantity(&event[field]))
        };
        while newest(&self.seen, "newHeads", "number") < number
            || newest(&self.seen, "logs", "blockNumber") < number
            || newest(&self.seen, "bvMinedTransactions", "blockNumber") < number
        {
            let (id, result) = self.client.next_notification().await.expect("in time");
            let topic = self.topics[&id];
            self.seen.entry(topic).or_default().push(result);
        }
    }
}

/// The contract's calls, each a block of its own ([`Anvil::ping`]): a
/// transaction and a log. It counts the blocks.
struct Caller<'a> {
    anvil: &'a Anvil,
    contract: String,
    /// The last block mined.
    head: u64,
}

impl Caller<'_> {
    /// `count` calls, without waiting for their blocks.
    async fn call(&mut self, count: usize) {
        self.anvil.ping(&self.contract, count).await;
        self.head += count as u64;
    }

    /// `count` calls, then both chains' subscribers read through the last.
    async fn calls(&mut self, count: usize, both: &mut [&mut Watcher]) {
        self.call(count).await;
        for watcher in both.iter_mut() {
            watcher.through(self.head).await;
        }
    }
}

/// Calls, a block at a time, until node `index` of `eth` counts again (a
/// node set aside rejoins after heads in a row at the chain's tip).
async fn until_live(
    server: &TestServer,
    caller: &mut Caller<'_>,
    index: usize,
    both: &mut [&mut Watcher],
) {
    let pool = server.state.chains["eth"].node().expect("nodes");
    for _ in 0..200 {
        if pool.states()[index].1.name() == "live" {
            return;
        }
        caller.calls(1, both).await;
    }
    panic!("node {index} never rejoined: {:?}", pool.states());
}

/// What `/readyz` says of each of `chain`'s nodes: (name, state).
async fn node_states(server: &TestServer, chain: &str) -> Vec<(String, String)> {
    let ready: Value = reqwest::get(format!("http://{}/readyz", server.addr))
        .await
        .expect("readyz")
        .json()
        .await
        .expect("JSON");
    ready["chains"][chain]["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("{ready}"))
        .iter()
        .map(|node| {
            let text = |key: &str| node[key].as_str().unwrap_or_default().to_string();
            (text("name"), text("state"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_of_three_nodes_see_what_one_healthy_node_gives_while_nodes_fail() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let [a, b, c] = proxies(&anvil).await;
    let server = TestServer::started(config(&anvil, &[&a, &b, &c])).await;
    server.wait_live("eth").await;
    server.wait_live("direct").await;
    let mut setup = WsClient::connect(&server.ws_url("direct", KEY))
        .await
        .expect("connect");
    let heads = setup.subscribe(json!(["newHeads"])).await.expect("heads");
    let mut on_eth = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let eth_heads = on_eth.subscribe(json!(["newHeads"])).await.expect("heads");
    let contract = deploy_ping(&mut setup, &heads, &anvil).await;
    // Both chains at the deployment's block before the watchers start.
    let deployed = anvil.block_number().await.expect("head");
    on_eth.until_head(&eth_heads, deployed).await;
    let mut eth = Watcher::start(&server, "eth", &contract).await;
    let mut direct = Watcher::start(&server, "direct", &contract).await;
    let mut both = [&mut eth, &mut direct];
    let mut caller = Caller {
        anvil: &anvil,
        contract: contract.clone(),
        head: deployed,
    };

    caller.calls(2, &mut both).await;

    // Killed: the port closes under the connections.
    a.kill().await;
    server.node_state("eth", 0, "down").await;
    caller.calls(3, &mut both).await;
    a.revive().await.expect("revive");
    until_live(&server, &mut caller, 0, &mut both).await;

    // Hung: connections open, nothing answered.
    b.stall();
    caller.calls(3, &mut both).await;
    b.heal();
    caller.calls(2, &mut both).await;

    // Five blocks behind.
    c.lag(5);
    caller.calls(7, &mut both).await;
    c.heal();
    caller.calls(2, &mut both).await;

    // Corrupt bodies from one node while the other two are a block
    // behind: the corrupt node alone has block `x` when it is due. It is
    // caught and excluded, and `x` comes from the others once they have it
    // (when `x + 1` is mined).
    a.corrupt_bodies(true);
    b.lag(1);
    c.lag(1);
    caller.call(1).await;
    server.node_state("eth", 0, "excluded").await;
    caller.call(1).await;
    direct.through(caller.head).await;
    eth.through(caller.head - 1).await;
    a.corrupt_bodies(false);
    b.heal();
    c.heal();
    let mut both = [&mut eth, &mut direct];
    until_live(&server, &mut caller, 0, &mut both).await;
    caller.calls(2, &mut both).await;
    let states = node_states(&server, "eth").await;
    assert!(
        states.iter().all(|(_, state)| state == "live"),
        "{states:?}"
    );

    for topic in ["newHeads", "logs", "bvMinedTransactions"] {
        let (three, one) = (&eth.seen[topic], &direct.seen[topic]);
        assert!(!one.is_empty(), "{topic}");
        let numbers = |seen: &[Value]| -> Vec<String> {
            seen.iter()
                .map(|v| {
                    format!(
                        "{}{}",
                        v["number"]
                            .as_str()
                            .or(v["blockNumber"].as_str())
                            .unwrap_or("?"),
                        if v["removed"] == true { "r" } else { "" }
                    )
                })
                .collect()
        };
        assert_eq!(numbers(three), numbers(one), "{topic}");
        for (got, expected) in three.iter().zip(one) {
            assert_eq!(got, expected, "{topic}");
        }
    }
}

/// Two anvils with the same chain id sharing their blocks up to a fork
/// point: two nodes (proxies) in front of `majority`, one on `minority`.
struct Fork {
    majority: Anvil,
    minority: Anvil,
    /// The two nodes on `majority` (distinct URLs for one anvil).
    a: FaultyNode,
    b: FaultyNode,
    /// The Ping contract, deployed before the fork: on both branches.
    contract: String,
}

impl Fork {
    async fn start() -> Self {
        let majority = Anvil::start_with(1, 0, &["--no-mining"])
            .await
            .expect("anvil");
        let deploy = majority
            .send(json!({ "from": DEV_ACCOUNT, "data": chainsieve_tests::anvil::ping_contract() }))
            .await
            .expect("deploy");
        majority.mine(1).await.expect("mine");
        let receipt = majority
            .rpc("eth_getTransactionReceipt", json!([deploy]))
            .await
            .expect("receipt");
        let contract = receipt["contractAddress"]
            .as_str()
            .expect("a contract")
            .to_string();
        let parent = format!("http://127.0.0.1:{}", majority.port);
        let minority = Anvil::start_with(1, 0, &["--no-mining", "--fork-url", &parent])
            .await
            .expect("forked anvil");
        let [a, b] = proxies(&majority).await;
        Self {
            majority,
            minority,
            a,
            b,
            contract,
        }
    }

    /// A config of one chain, `eth`, reading the three nodes under
    /// `agreement` and `quorum`.
    fn config(&self, agreement: Agreement, quorum: Option<u64>) -> Config {
        let urls = vec![self.a.ws_url(), self.b.ws_url(), self.minority.ws_url()];
        let mut config = reading(KEY, [("eth", 1, SourceConfig::Nodes(urls))]);
        let eth = config.chains.get_mut("eth").expect("eth");
        eth.agreement = agreement;
        eth.quorum = quorum;
        config
    }

    /// Runs the fork under `agreement` and answers what a subscriber saw:
    /// (newHeads, logs, bvMinedTransactions), and the hashes of the
    /// minority's block and the majority's blocks.
    async fn run(&self, agreement: Agreement, quorum: Option<u64>) -> Seen {
        let server = TestServer::started(self.config(agreement, quorum)).await;
        server.nodes_live("eth", 3).await;
        let mut client = WsClient::connect(&server.ws_url("eth", KEY))
            .await
            .expect("connect");
        let mut subscriptions = BTreeMap::new();
        for (topic, params) in [
            ("newHeads", json!(["newHeads"])),
            ("logs", json!(["logs", { "address": self.contract }])),
            (
                "bvMinedTransactions",
                json!(["bvMinedTransactions", { "fromAddress": [DEV_ACCOUNT] }]),
            ),
        ] {
            let id = client.subscribe(params).await.expect("subscribed");
            subscriptions.insert(id, topic);
        }
        let mut seen = Seen::default();
        // The minority's block first, with a transaction and a log.
        let call = json!({ "from": DEV_ACCOUNT, "to": self.contract, "data": "0x" });
        self.minority.send(call).await.expect("call");
        self.minority.mine(1).await.expect("mine");
        let head = self.minority.block_number().await.expect("head");
        seen.minority = hash(&self.minority.block(head).await.expect("block"));
        if quorum.is_none() {
            seen.read(&mut client, &subscriptions, &seen.minority.clone())
                .await;
        }
        // The majority's block at the same height, empty; then one more on
        // each branch.
        self.majority.mine(1).await.expect("mine");
        let one = hash(&self.majority.block(head).await.expect("block"));
        seen.read(&mut client, &subscriptions, &one).await;
        self.minority.mine(1).await.expect("mine");
        self.majority.mine(1).await.expect("mine");
        let two = hash(&self.majority.block(head + 1).await.expect("block"));
        seen.read(&mut client, &subscriptions, &two).await;
        seen.majority = vec![one, two];
        seen
    }
}

fn hash(block: &Value) -> String {
    block["hash"].as_str().expect("a hash").to_string()
}

/// What one subscriber saw, by topic.
#[derive(Debug, Default)]
struct Seen {
    heads: Vec<String>,
    logs: Vec<Value>,
    mined: Vec<Value>,
    minority: String,
    majority: Vec<String>,
}

impl Seen {
    /// Reads until the head `until` arrives.
    async fn read(&mut self, client: &mut WsClient, topics: &BTreeMap<String, &str>, until: &str) {
        loop {
            let (id, result) = client.next_notification().await.expect("in time");
            match topics[&id] {
                "newHeads" => {
                    let head = hash(&result);
                    self.heads.push(head.clone());
                    if head == until {
                        return;
                    }
                }
                "logs" => self.logs.push(result),
                _ => self.mined.push(result),
            }
        }
    }
}

/// With `first`, the minority node's block goes out as soon as it is
/// announced; once both other nodes build on another block at that
/// height, it is removed (its log and transaction once each, as removed)
/// and the majority's branch goes out; the minority's next block never
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_first_a_minority_fork_goes_out_and_is_undone_once() {
    let fork = Fork::start().await;
    let seen = fork.run(Agreement::First, None).await;
    let mut expected = vec![seen.minority.clone()];
    expected.extend(seen.majority.iter().cloned());
    assert_eq!(seen.heads, expected, "{seen:#?}");
    let removed: Vec<bool> = seen.logs.iter().map(|l| l["removed"] == true).collect();
    assert_eq!(removed, [false, true], "{seen:#?}");
    assert_eq!(seen.logs[0]["blockHash"], seen.minority);
    assert_eq!(seen.logs[1]["blockHash"], seen.minority);
    let removed: Vec<bool> = seen.mined.iter().map(|t| t["removed"] == true).collect();
    assert_eq!(removed, [false, true], "{seen:#?}");
}

/// With a quorum of 2 of 3, the minority node's blocks are outvoted: never
/// delivered, so nothing is ever removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_quorum_a_minority_fork_is_never_delivered() {
    let fork = Fork::start().await;
    let seen = fork.run(Agreement::Quorum, Some(2)).await;
    assert_eq!(seen.heads, seen.majority, "{seen:#?}");
    assert!(seen.logs.is_empty() && seen.mined.is_empty(), "{seen:#?}");
}

/// Makes node 0 of `eth`, `behind`, lag five blocks behind the others
/// and waits until the chain's tip is out on `client`'s `heads` and the
/// node is lagging; answers the tip.
async fn lagging(
    server: &TestServer,
    anvil: &Anvil,
    behind: &FaultyNode,
    client: &mut WsClient,
    heads: &str,
) -> u64 {
    behind.lag(5);
    anvil.mine(6).await.expect("mine");
    let head = anvil.block_number().await.expect("head");
    client.until_head(heads, head).await;
    server.node_state("eth", 0, "lagging").await;
    head
}

/// Forwarded calls on three nodes: a read naming a block goes to a node
/// that holds it (never to one behind it, though that one comes first in
/// the configuration); a signed transaction reaches every node and is
/// answered once; reads at the tip keep being answered while any node is
/// up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_to_a_node_that_can_answer_them() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let [behind, a, b] = proxies(&anvil).await;
    let server = TestServer::started(config(&anvil, &[&behind, &a, &b])).await;
    server.nodes_live("eth", 3).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");

    let head = lagging(&server, &anvil, &behind, &mut client, &heads).await;
    for at in [
        json!(format!("{head:#x}")),
        json!("latest"),
        json!({ "blockNumber": format!("{head:#x}") }),
    ] {
        let balance = client
            .call("eth_getBalance", json!([DEV_ACCOUNT, at]))
            .await
            .expect("answered");
        assert!(balance["result"].is_string(), "{at}: {balance}");
    }
    assert_eq!(
        behind.requests("eth_getBalance"),
        0,
        "never asked the node behind"
    );
    // A block every node holds: the first configured answers.
    client
        .call("eth_getBalance", json!([DEV_ACCOUNT, "0x1"]))
        .await
        .expect("answered");
    assert_eq!(behind.requests("eth_getBalance"), 1);
    behind.heal();

    // A signed transaction goes to every node; the client gets one answer.
    let signed = anvil
        .rpc(
            "eth_signTransaction",
            json!([{ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT, "value": "0x1", "gas": "0x5208" }]),
        )
        .await
        .expect("signed");
    let sent = client
        .call("eth_sendRawTransaction", json!([signed]))
        .await
        .expect("answered");
    assert!(sent["result"].is_string(), "{sent}");
    for node in [&behind, &a, &b] {
        node.requested("eth_sendRawTransaction", 1)
            .await
            .expect("sent to every node");
        assert_eq!(node.requests("eth_sendRawTransaction"), 1, "once");
    }

    // The two nodes at the tip die while the third lags, before the
    // ingest notices: a read at the tip is answered by the third (its own
    // latest); a read naming the tip's number is not (its `null` would
    // deny a block the chain has).
    let head = lagging(&server, &anvil, &behind, &mut client, &heads).await;
    a.kill().await;
    b.kill().await;
    let asked = behind.requests("eth_getBalance");
    let answered = client
        .call("eth_getBalance", json!([DEV_ACCOUNT, "latest"]))
        .await
        .expect("answered");
    assert!(answered["result"].is_string(), "{answered}");
    assert_eq!(behind.requests("eth_getBalance"), asked + 1);
    let denied = client
        .call("eth_getBalance", json!([DEV_ACCOUNT, format!("{head:#x}")]))
        .await
        .expect("answered");
    assert_eq!(denied["error"]["code"], -32002, "{denied}");
    assert_eq!(behind.requests("eth_getBalance"), asked + 1);
    behind.kill().await;
    let none = client
        .call("eth_getBalance", json!([DEV_ACCOUNT, "latest"]))
        .await
        .expect("answered");
    assert_eq!(none["error"]["code"], -32002, "{none}");
}

/// When every node serves a block failing the same check, the check is
/// taken to be wrong, not the nodes: the block goes out, counted in
/// `chainsieve_unverified_blocks_total`, and no node is set aside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_every_node_serves_the_same_wrong_way_goes_out_counted() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let [a, b] = proxies(&anvil).await;
    let server = TestServer::started(config(&anvil, &[&a, &b])).await;
    server.nodes_live("eth", 2).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    a.corrupt_bodies(true);
    b.corrupt_bodies(true);
    let sent = anvil
        .send(json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT, "value": "0x1" }))
        .await
        .expect("sent");
    // Its block, the first after genesis (anvil answers before it is
    // mined, so its head is waited for, not asked).
    client.until_head(&heads, 1).await;
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("chainsieve_unverified_blocks_total{chain=\"eth\"} 1"),
        "{metrics}"
    );
    // Each node's state, lag and request times, named by host and port.
    for node in [&a, &b] {
        let name = node.ws_url().trim_start_matches("ws://").to_string();
        for line in [
            format!("chainsieve_node_state{{chain=\"eth\",node=\"{name}\",state=\"live\"}} 1"),
            format!("chainsieve_node_state{{chain=\"eth\",node=\"{name}\",state=\"down\"}} 0"),
            format!("chainsieve_node_head_lag_blocks{{chain=\"eth\",node=\"{name}\"}} "),
            format!("chainsieve_node_request_seconds_count{{chain=\"eth\",node=\"{name}\"}}"),
        ] {
            assert!(metrics.contains(&line), "{line} in {metrics}");
        }
    }
    let states = node_states(&server, "eth").await;
    assert!(
        states.iter().all(|(_, state)| state == "live"),
        "{states:?}"
    );
    // What went out is what the nodes served: the changed value.
    let tx = client
        .call("eth_getTransactionByHash", json!([sent]))
        .await
        .expect("answered");
    assert_eq!(tx["result"]["value"], "0x0", "{tx}");
}

/// Hedging: with `rpc.hedge_after_ms`, a read the first node sits on is
/// asked of the next, and its answer comes back long before the first
/// node's share of the timeout (a minute here: without the hedge the call
/// would outlast the client's wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_read_is_answered_by_the_next_node_when_the_first_sits_on_it() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let [hung, other] = proxies(&anvil).await;
    let mut config = config(&anvil, &[&hung, &other]);
    config.rpc.timeout_ms = 120_000;
    config.rpc.hedge_after_ms = Some(200);
    let server = TestServer::started(config).await;
    server.nodes_live("eth", 2).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    hung.stall();
    let balance = client
        .call("eth_getBalance", json!([DEV_ACCOUNT, "0x0"]))
        .await
        .expect("answered before the client gives up");
    let direct = anvil
        .rpc("eth_getBalance", json!([DEV_ACCOUNT, "0x0"]))
        .await
        .expect("anvil");
    assert_eq!(balance["result"], direct, "{balance}");
    assert_eq!(hung.requests("eth_getBalance"), 1, "asked first");
    assert_eq!(other.requests("eth_getBalance"), 1, "then hedged");
}

/// Finality from several nodes: with a quorum of two of three, a node that
/// knows no `safe`/`finalized` tags (it refuses them) is passed over and
/// the marks come from the other two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finality_comes_from_the_nodes_that_know_it() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let [a, b, c] = proxies(&anvil).await;
    let mut config = config(&anvil, &[&a, &b, &c]);
    let eth = config.chains.get_mut("eth").expect("eth");
    eth.agreement = Agreement::Quorum;
    eth.quorum = Some(2);
    let server = TestServer::started(config).await;
    server.nodes_live("eth", 3).await;
    a.refuse("eth_getBlockByNumber");
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let finals = client
        .subscribe(json!(["newHeads", { "finality": "finalized" }]))
        .await
        .expect("finalized heads");
    // Anvil's finalized block is 64 below its head.
    anvil.mine(70).await.expect("mine");
    let mut number = 0;
    while number < 6 {
        let (id, head) = client.next_notification().await.expect("a final head");
        assert_eq!(id, finals);
        number = quantity(&head["number"]);
    }
    assert_eq!(number, 6, "never past the nodes' finalized block");
    assert!(
        a.requests("eth_getBlockByNumber") > 0,
        "the first node asked"
    );
}

/// A pending transaction every node announces goes out once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_transaction_every_node_announces_goes_out_once() {
    let anvil = Anvil::start_with(1, 0, &["--no-mining"])
        .await
        .expect("anvil");
    let [a, b, c] = proxies(&anvil).await;
    let server = TestServer::started(config(&anvil, &[&a, &b, &c])).await;
    server.nodes_live("eth", 3).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let pending = client
        .subscribe(json!(["newPendingTransactions"]))
        .await
        .expect("pending");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let mut sent = Vec::new();
    for value in 1..=3 {
        let tx = json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT, "value": format!("{value:#x}") });
        sent.push(json!(anvil.send(tx).await.expect("sent")));
    }
    // Each announced by three nodes; then a block mines them, and its head
    // comes after every announcement the nodes made before it.
    let mut announced = Vec::new();
    while announced.len() < sent.len() {
        let (id, result) = client.next_notification().await.expect("in time");
        if id == pending {
            announced.push(result);
        }
    }
    anvil.mine(1).await.expect("mine");
    loop {
        let (id, result) = client.next_notification().await.expect("in time");
        if id == heads {
            break;
        }
        assert_ne!(id, pending, "announced again: {result}");
    }
    assert_eq!(announced, sent, "each once, in order");
}
