//! Several servers on a real NATS JetStream server (`nats-server` with file
//! storage on loopback): a chain's log published once by an ingest
//! reading a real node (anvil), followed by edges that serve clients the
//! same notifications with the same cursors, so a client resumes on any
//! edge; and each chain's price history, indexed once by the leading
//! ingest, is the same on every edge and outlives the leader.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use alloy_primitives::Address;
use chainsieve_bus::linear::AppendError;
use chainsieve_bus::{Bus, codec};
use chainsieve_config::{BusConfig, Config, LogConfig, Role};
use chainsieve_eventlog::EventLog;
use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
use chainsieve_model::ChainEvent;
use chainsieve_model::SourceEvent;
use chainsieve_price::journal::PriceJournal;
use chainsieve_price::record::Recorder;
use chainsieve_price::store::{PriceStore, PriceWrite, Token};
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2, deploy_ping};
use chainsieve_tests::dex::{Fixture, Session, compile, price_of, price_when};
use chainsieve_tests::nats::{Nats, NatsCluster};
use chainsieve_tests::{TIMEOUT, TestServer, WsClient, quantity};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const KEY: &str = "bus-test";

fn bus_config(nats: &Nats) -> BusConfig {
    BusConfig {
        urls: vec![nats.url()],
        ..BusConfig::default()
    }
}

/// A connection to the bus on `nats`, as a server makes it.
async fn connected(nats: &Nats) -> Bus {
    Bus::connect(&bus_config(nats), "test")
        .await
        .expect("connect")
}

/// A config in `role` on `nats`, its eth chain read from `anvil` (an edge
/// reads it from the bus instead). An ingest started alone leads
/// ([`TestServer::live`]); one started beside a leader stands by
/// ([`TestServer::started`]).
fn on_bus(role: Role, anvil: &Anvil, nats: &Nats) -> Config {
    Config {
        role,
        bus: bus_config(nats),
        ..anvil.config(KEY)
    }
}

/// A client of `newHeads` and every log on `edge`, resuming from `cursor`
/// (the logs subscription) if given; returns it and its two ids.
async fn subscriber(edge: &TestServer, cursor: Option<&str>) -> (WsClient, String, String) {
    let mut client = WsClient::connect(&edge.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let mut params = vec![json!("logs"), json!({})];
    if let Some(cursor) = cursor {
        params.push(json!({ "resumeFrom": cursor }));
    }
    let logs = client.subscribe(Value::Array(params)).await.expect("logs");
    (client, heads, logs)
}

/// The next `count` notifications of subscription `id` on `client` (others
/// read meanwhile are kept aside in `other`), as (result, cursor).
async fn take(
    client: &mut WsClient,
    id: &str,
    count: usize,
    other: &mut Vec<(Value, Value)>,
) -> Vec<(Value, Value)> {
    let mut got = Vec::new();
    while got.len() < count {
        let params = client.next_notification_params().await.expect("notified");
        let pair = (params["result"].clone(), params["cursor"].clone());
        if params["subscription"] == id {
            got.push(pair);
        } else {
            other.push(pair);
        }
    }
    got
}

/// Finality reaches the edges through the bus: a subscription waiting for
/// `finalized` on an edge gets the logs once anvil's finalized block (64
/// below its head) has passed them, with the cursors the plain subscriber
/// got for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finality_reaches_the_edges() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let nats = Nats::start().await.expect("nats-server");
    let _ingest = TestServer::live(on_bus(Role::Ingest, &anvil, &nats)).await;
    let edge = TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await;
    let (mut plain, heads, logs) = subscriber(&edge, None).await;
    let mut waiting = WsClient::connect(&edge.ws_url("eth", KEY))
        .await
        .expect("connect");
    let finals = waiting
        .subscribe(json!(["logs", {}, { "finality": "finalized" }]))
        .await
        .expect("a finality subscription on an edge");
    let contract = deploy_ping(&mut plain, &heads, &anvil).await;
    anvil.ping(&contract, 2).await;
    let seen = take(&mut plain, &logs, 2, &mut Vec::new()).await;
    anvil.mine(64).await.expect("mine");
    let told = take(&mut waiting, &finals, 2, &mut Vec::new()).await;
    assert_eq!(told, seen, "the same logs, the same cursors");
}

/// One ingest reading anvil, two edges. Clients on both edges get the same
/// heads and logs with the same cursors, through a node reorg (the
/// orphaned logs come as removed, then the new branch); a client that
/// leaves one edge resumes on the other with its last cursor and misses
/// nothing.
#[tokio::test]
async fn edges_serve_one_log_and_a_client_resumes_on_another_edge() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let nats = Nats::start().await.expect("nats-server");
    let ingest = TestServer::live(on_bus(Role::Ingest, &anvil, &nats)).await;
    let (status, body) = ingest
        .post(
            "eth",
            KEY,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
        )
        .await;
    assert_eq!(status, 404, "an ingest serves no client: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("connect to an edge")),
        "{body}"
    );
    let (a, b) = (
        TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await,
        TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await,
    );
    let (mut on_a, heads_a, logs_a) = subscriber(&a, None).await;
    let (mut on_b, heads_b, logs_b) = subscriber(&b, None).await;
    let (mut leaving, _, leaving_logs) = subscriber(&a, None).await;

    let (mut deployer, deployer_heads, _) = subscriber(&b, None).await;
    let contract = deploy_ping(&mut deployer, &deployer_heads, &anvil).await;
    for _ in 0..3 {
        anvil.ping(&contract, 1).await;
    }
    // The client leaving reads the first two logs, then goes.
    let mut aside = Vec::new();
    let before = take(&mut leaving, &leaving_logs, 2, &mut aside).await;
    let cursor = before[1].1.as_str().expect("a cursor").to_string();
    drop(leaving);
    anvil.reorg(2).await.expect("anvil_reorg");
    anvil.ping(&contract, 1).await;

    // 3 logs, the 2 orphaned ones removed, 1 on the new branch.
    let (mut heads_on_a, mut heads_on_b) = (Vec::new(), Vec::new());
    let logs_on_a = take(&mut on_a, &logs_a, 6, &mut heads_on_a).await;
    let logs_on_b = take(&mut on_b, &logs_b, 6, &mut heads_on_b).await;
    assert_eq!(logs_on_a, logs_on_b, "the same logs, the same cursors");
    let removed: Vec<bool> = logs_on_a
        .iter()
        .map(|(log, _)| log["removed"] == true)
        .collect();
    assert_eq!(removed, [false, false, false, true, true, false]);
    assert_eq!(
        logs_on_a[3].0["transactionHash"],
        logs_on_a[2].0["transactionHash"]
    );
    let heads = heads_on_a.len().min(heads_on_b.len());
    assert!(heads >= 4, "heads arrived too: {heads}");
    assert_eq!(heads_on_a[..heads], heads_on_b[..heads]);
    let _ = (heads_a, heads_b);

    // Resumed on the other edge: exactly the rest.
    let (mut back, _, back_logs) = subscriber(&b, Some(&cursor)).await;
    let rest = take(&mut back, &back_logs, 4, &mut Vec::new()).await;
    let mut union = before;
    union.extend(rest);
    assert_eq!(union, logs_on_a);
}

/// The publishing rules against a real JetStream: steps land at their
/// positions; a retry of a step already taken is a duplicate, not a
/// second copy; a different step at a taken position is refused (another
/// writer leads); the tail reads back what a window of N blocks holds.
#[tokio::test]
async fn the_stream_is_one_linear_log() {
    let nats = Nats::start().await.expect("nats-server");
    let bus = connected(&nats).await;
    let on_bus = bus.log("eth").await.expect("the stream");
    let log = EventLog::new("eth", 1_024, LogConfig::default().memory_mib);
    let mut devnet = Devnet::new(1, &DevnetSettings::default());
    let mut steps = vec![log.append(ChainEvent::Added(devnet.genesis()))];
    while steps.len() < 12 {
        for event in devnet.next_step() {
            let change = match event {
                SourceEvent::Block(block) => ChainEvent::Added(block),
                SourceEvent::Pending { txs, .. } => ChainEvent::Pending(txs),
                SourceEvent::Synced
                | SourceEvent::Logged { .. }
                | SourceEvent::Finality { .. }
                | SourceEvent::Dropped(_) => {
                    continue;
                }
            };
            steps.push(log.append(change));
        }
    }
    for step in &steps {
        on_bus.append(step).await.expect("published");
    }
    let last = steps.last().expect("steps");
    on_bus.append(last).await.expect("a retry is a duplicate");
    // Another writer's step at the same position.
    let other = EventLog::new("eth", 1_024, LogConfig::default().memory_mib);
    other.continue_after(last.position - 1);
    let rival = other.append(ChainEvent::Pending(Vec::new()));
    assert!(matches!(
        on_bus.append(&rival).await,
        Err(AppendError::Fenced { sequence, .. }) if sequence == last.position
    ));

    let tail = on_bus.tail(2).await.expect("the tail");
    assert_eq!(tail.head, last.position);
    let added: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, step)| matches!(step.change, ChainEvent::Added(_)))
        .map(|(index, _)| index)
        .collect();
    let from = added[added.len() - 2];
    let positions: Vec<u64> = tail.steps.iter().map(|(position, _)| *position).collect();
    let expected: Vec<u64> = steps[from..].iter().map(|step| step.position).collect();
    assert_eq!(positions, expected, "back to the second newest block");
    for ((_, change), step) in tail.steps.iter().zip(&steps[from..]) {
        assert_eq!(
            serde_json::to_string(change).expect("json"),
            serde_json::to_string(&step.change).expect("json")
        );
    }
}

/// `token_price` on several servers: the leading ingest indexes a real
/// pair's trades and writes them to the price journal; an edge started
/// later answers the history from before it started as soon as it is
/// ready; when the leader stops, the standby (its store kept from the
/// journal) leads and indexes on, through a reorg that undoes a trade; the
/// edges answer alike throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prices_are_the_same_on_every_edge_and_outlive_the_leader() {
    let code = compile().await;
    let anvil = Anvil::start(1).await.expect("anvil");
    let nats = Nats::start().await.expect("nats-server");
    let session = Session { anvil: &anvil };
    let fixture = Fixture::deploy(&session, &code).await;
    let t0 = fixture.t0;
    let ask = |timestamp: Option<u64>| {
        let mut params = json!({ "token0": fixture.beta, "token1": fixture.alpha });
        if let Some(t) = timestamp {
            params["timestamp"] = json!(t);
        }
        params
    };
    let priced =
        |price: &'static str| move |answer: &Value| answer["result"]["token0Price"] == price;

    let leader = TestServer::live(on_bus(Role::Ingest, &anvil, &nats)).await;
    let first = TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await;
    let (mut on_first, first_heads) = price_client(&first).await;
    let trade1 = session
        .send(Some(fixture.pair), fixture.reserves(2_000), Some(t0 + 100))
        .await;
    let block1 = session.block_of(&trade1).await;
    price_when(
        &mut on_first,
        &first_heads,
        &anvil,
        ask(None),
        priced("2000"),
    )
    .await;

    // A late edge has the history once it is ready.
    let second = TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await;
    let (mut on_second, second_heads) = price_client(&second).await;
    let then = on_second
        .call("token_price", ask(Some(t0 + 150)))
        .await
        .expect("token_price");
    assert_eq!(price_of(&then, "token0Price"), "2000", "{then}");
    assert_eq!(then["result"]["blockNumbers"], json!([block1]));

    // The standby takes over when the leader stops, and indexes on.
    let standby = TestServer::started(on_bus(Role::Ingest, &anvil, &nats)).await;
    leader.stop().await;
    standby.wait_live("eth").await;
    let trade2 = session
        .send(Some(fixture.pair), fixture.reserves(2_500), Some(t0 + 200))
        .await;
    let block2 = session.block_of(&trade2).await;
    for (client, heads) in [
        (&mut on_first, &first_heads),
        (&mut on_second, &second_heads),
    ] {
        price_when(client, heads, &anvil, ask(None), priced("2500")).await;
    }
    let both = async |params: Value, on_first: &mut WsClient, on_second: &mut WsClient| {
        let a = on_first
            .call("token_price", params.clone())
            .await
            .expect("first");
        let b = on_second.call("token_price", params).await.expect("second");
        assert_eq!(a["result"], b["result"], "both edges answer alike: {a}");
        a
    };
    let between = both(ask(Some(t0 + 150)), &mut on_first, &mut on_second).await;
    assert_eq!(price_of(&between, "token0Price"), "2000", "{between}");
    let after = both(ask(Some(t0 + 250)), &mut on_first, &mut on_second).await;
    assert_eq!(after["result"]["blockNumbers"], json!([block2]), "{after}");

    // A reorg that undoes trade 2: the new leader rolls it back.
    let latest = anvil.block_number().await.expect("block number");
    anvil.reorg(latest - block2 + 1).await.expect("anvil_reorg");
    for (client, heads) in [
        (&mut on_first, &first_heads),
        (&mut on_second, &second_heads),
    ] {
        price_when(client, heads, &anvil, ask(None), priced("2000")).await;
    }
    let now = both(ask(None), &mut on_first, &mut on_second).await;
    assert_eq!(now["result"]["blockNumbers"], json!([block1]), "{now}");
    standby.stop().await;
}

/// A client of `edge` with a `newHeads` subscription, for `price_when`.
async fn price_client(edge: &TestServer) -> (WsClient, String) {
    let mut client = WsClient::connect(&edge.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    (client, heads)
}

/// The lease on a chain: a holder whose term ends gives it back and a
/// waiting standby takes it; a holder whose renewal finds a write it did
/// not make (another holder's, after an expiry it missed) gives up.
#[tokio::test]
async fn a_lease_is_given_back_and_given_up() {
    let nats = Nats::start().await.expect("nats-server");
    let config = BusConfig {
        lease_ms: 2_000,
        ..bus_config(&nats)
    };
    let bus = Bus::connect(&config, "test").await.expect("connect");
    let first = bus.leases("first").await.expect("the bucket");
    let second = bus.leases("second").await.expect("the bucket");
    let running = CancellationToken::new();
    let held = first.acquire("eth", &running).await.expect("a free lease");
    let first_term = CancellationToken::new();
    let keeping = tokio::spawn(held.keep(first_term.clone()));
    let waiting = tokio::spawn({
        let running = running.clone();
        async move { second.acquire("eth", &running).await }
    });
    first_term.cancel();
    keeping.await.expect("the holder gives the lease back");
    let taken = tokio::time::timeout(TIMEOUT, waiting)
        .await
        .expect("the standby takes over in time")
        .expect("no panic")
        .expect("the lease");

    // Another holder's write: the renewal that finds it gives up.
    let lost = CancellationToken::new();
    tokio::spawn(taken.keep(lost.clone()));
    let client = async_nats::connect(nats.url()).await.expect("a client");
    let leases = async_nats::jetstream::new(client)
        .get_key_value("chainsieve-leases")
        .await
        .expect("the bucket");
    leases
        .put("eth", "an intruder".into())
        .await
        .expect("written");
    tokio::time::timeout(TIMEOUT, lost.cancelled())
        .await
        .expect("the holder gave up in time");
}

/// The bus on a JetStream cluster of three servers, each stream and the
/// leases kept on all three (`[bus] replicas = 3`): the server leading the
/// chain's stream is killed (`kill -9`) mid-stream; the ingest and the edge
/// carry on through the other two, and a client misses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_loses_a_server_and_clients_miss_nothing() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let mut cluster = NatsCluster::start(3).await.expect("a NATS cluster");
    let bus = BusConfig {
        urls: cluster.urls(),
        replicas: 3,
        ..BusConfig::default()
    };
    let config = |role| Config {
        role,
        bus: bus.clone(),
        ..anvil.config(KEY)
    };
    let ingest = TestServer::started(config(Role::Ingest)).await;
    ingest.wait_live("eth").await;
    let edge = TestServer::started(config(Role::Edge)).await;
    let (mut client, _, logs) = subscriber(&edge, None).await;
    let (mut deployer, deployer_heads, _) = subscriber(&edge, None).await;
    let contract = deploy_ping(&mut deployer, &deployer_heads, &anvil).await;
    drop(deployer);
    let mut sent = anvil.ping(&contract, 2).await;
    let mut aside = Vec::new();
    let mut got = take(&mut client, &logs, 2, &mut aside).await;

    let observer = async_nats::connect(cluster.urls().as_slice())
        .await
        .expect("a client");
    let stream = async_nats::jetstream::new(observer)
        .get_stream("chainsieve-eth")
        .await
        .expect("the chain's stream")
        .info()
        .await
        .expect("its state")
        .clone();
    let cluster_info = stream.cluster.expect("a clustered stream");
    assert_eq!(cluster_info.replicas.len(), 2, "two more copies");
    let leader = cluster_info.leader.expect("a stream leader");
    let index: usize = leader
        .trim_start_matches("node")
        .parse()
        .expect("a node name");
    cluster
        .kill(index)
        .await
        .expect("kill -9 the stream's leader");

    sent.extend(anvil.ping(&contract, 3).await);
    got.extend(take(&mut client, &logs, 3, &mut aside).await);
    let hashes: Vec<(String, bool)> = got
        .iter()
        .map(|(log, _)| {
            (
                log["transactionHash"].as_str().expect("a hash").to_string(),
                log["removed"] == true,
            )
        })
        .collect();
    let expected: Vec<(String, bool)> = sent.into_iter().map(|hash| (hash, false)).collect();
    assert_eq!(hashes, expected, "every log once, in order");
}

/// A `newHeads` notification as a client got it.
struct Head {
    at: SystemTime,
    number: u64,
    hash: String,
    cursor: Value,
}

/// A client of `newHeads` on an edge, read by a task of its own that notes
/// when each head arrives, so the time is the client's even while the test
/// waits on something else.
struct HeadWatch {
    arrivals: mpsc::UnboundedReceiver<(SystemTime, Value)>,
    heads: Vec<Head>,
}

impl HeadWatch {
    async fn start(edge: &TestServer) -> Self {
        let mut client = WsClient::connect(&edge.ws_url("eth", KEY))
            .await
            .expect("connect");
        client.subscribe(json!(["newHeads"])).await.expect("heads");
        let (arrived, arrivals) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(params) = client.next_notification_params().await {
                if arrived.send((SystemTime::now(), params)).is_err() {
                    return;
                }
            }
        });
        Self {
            arrivals,
            heads: Vec::new(),
        }
    }

    /// Reads heads until one numbered `number` or more has come.
    async fn through(&mut self, number: u64) {
        let reading = async {
            while self.heads.last().is_none_or(|head| head.number < number) {
                let (at, params) = self.arrivals.recv().await.expect("the client reads on");
                let head = &params["result"];
                self.heads.push(Head {
                    at,
                    number: quantity(&head["number"]),
                    hash: head["hash"].as_str().expect("a hash").to_string(),
                    cursor: params["cursor"].clone(),
                });
            }
        };
        tokio::time::timeout(2 * TIMEOUT, reading)
            .await
            .unwrap_or_else(|_| panic!("heads through {number} in time: {}", self.heads.len()));
    }

    /// The first head that came after `time`.
    fn first_after(&self, time: SystemTime) -> &Head {
        self.heads
            .iter()
            .find(|head| head.at > time)
            .expect("a head after that")
    }
}

/// The index of a cluster's server from its name in JetStream's answers
/// (`node<index>`, as [`NatsCluster`] names them).
fn server_index(name: &str) -> usize {
    name.trim_start_matches("node")
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a server of the cluster"))
}

/// The server leading `stream`; `None` while it has no leader (or does not
/// answer in the context's time).
async fn leader_of(jetstream: &async_nats::jetstream::Context, stream: &str) -> Option<usize> {
    let mut stream = jetstream.get_stream(stream).await.ok()?;
    let info = stream.info().await.ok()?;
    let leader = info.cluster.as_ref()?.leader.as_deref()?;
    Some(server_index(leader))
}

/// Moves the leadership of `stream` to server `to`: its leader steps down
/// (asked to prefer `to`), until `to` leads.
async fn lead_on(jetstream: &async_nats::jetstream::Context, stream: &str, to: usize) {
    let moving = async {
        loop {
            match leader_of(jetstream, stream).await {
                Some(leader) if leader == to => return,
                Some(_) => {
                    let request = json!({ "placement": { "preferred": format!("node{to}") } });
                    let _: Result<Value, _> = jetstream
                        .request(format!("STREAM.LEADER.STEPDOWN.{stream}"), &request)
                        .await;
                }
                None => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(TIMEOUT, moving)
        .await
        .unwrap_or_else(|_| panic!("node{to} leads {stream} in time"));
}

/// The time from `from` to `to`, in seconds (negative if `to` came first).
fn seconds(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(gap) => gap.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

/// What the killed server leads, and who is connected through it.
#[derive(Clone, Copy, Debug)]
enum Killed {
    /// The chain's stream and its price journal, with the leading ingest
    /// and one edge connected through it; the leases and the cluster's
    /// metadata (which places consumers) are led elsewhere.
    StreamLeader,
    /// All that, the leases and the metadata too: the worst case.
    Everything,
}

/// The bus on a three-server cluster (`[bus] replicas = 3`), a node mining
/// a block a second, an ingest leading and one standing by, two edges with
/// a `newHeads` client each. The server leading the chain's stream is
/// killed (`kill -9`) mid-stream: each client gets every head once, in
/// order, the same on both edges. The gaps are printed, never asserted
/// (speed is checked by benchmarks): from the kill to each client's next
/// head, from the kill to the stream's first step, and from the stream's
/// first block after the kill to each client's head of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_deliver_soon_after_the_stream_leader_is_killed() {
    kill_a_leader_and_measure(Killed::StreamLeader).await;
}

/// As [`edges_deliver_soon_after_the_stream_leader_is_killed`], the killed
/// server leading the leases and the cluster's metadata too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_deliver_soon_after_the_leader_of_everything_is_killed() {
    kill_a_leader_and_measure(Killed::Everything).await;
}

async fn kill_a_leader_and_measure(killed: Killed) {
    let anvil = Anvil::start_with(1, 0, &["--block-time", "1"])
        .await
        .expect("anvil");
    let mut cluster = NatsCluster::start(3).await.expect("a NATS cluster");
    let bus = BusConfig {
        urls: cluster.urls(),
        replicas: 3,
        ..BusConfig::default()
    };
    // The streams and the leases first, so their leaders move before any
    // ingest holds a lease. A cluster that just elected its metadata
    // leader may not answer the first requests in time.
    let maker = Bus::connect(&bus, "test").await.expect("connect");
    let make = async || -> anyhow::Result<()> {
        maker.log("eth").await?;
        PriceJournal::open(&maker, "eth").await?;
        maker.leases("test").await?;
        Ok(())
    };
    tokio::time::timeout(2 * TIMEOUT, async {
        while let Err(error) = make().await {
            eprintln!("making the streams again: {error:#}");
        }
    })
    .await
    .expect("the streams made in time");
    let client = async_nats::connect(cluster.urls().as_slice())
        .await
        .expect("a client");
    let mut observer = async_nats::jetstream::new(client);
    observer.set_timeout(Duration::from_secs(1));
    let meta = cluster.meta_leader(0).expect("a metadata leader");
    let (x, leases) = match killed {
        Killed::StreamLeader => ((meta + 1) % 3, meta),
        Killed::Everything => (meta, meta),
    };
    let streams = [
        ("chainsieve-eth", x),
        ("chainsieve-eth-prices", x),
        ("KV_chainsieve-leases", leases),
    ];
    for (stream, to) in streams {
        lead_on(&observer, stream, to).await;
    }

    let through = |server: usize| BusConfig {
        urls: vec![cluster.servers[server].url()],
        ..bus.clone()
    };
    let config = |role, bus: BusConfig| Config {
        role,
        bus,
        ..anvil.config(KEY)
    };
    let ingest = TestServer::started(config(Role::Ingest, through(x))).await;
    ingest.wait_live("eth").await;
    let _standby = TestServer::started(config(Role::Ingest, bus.clone())).await;
    let edges = [
        TestServer::started(config(Role::Edge, through(x))).await,
        TestServer::started(config(Role::Edge, through((x + 1) % 3))).await,
    ];
    let mut watches = [
        HeadWatch::start(&edges[0]).await,
        HeadWatch::start(&edges[1]).await,
    ];
    let now = anvil.block_number().await.expect("block number");
    for watch in &mut watches {
        watch.through(now + 3).await;
    }
    for (stream, to) in streams {
        assert_eq!(
            leader_of(&observer, stream).await,
            Some(to),
            "node{to} still leads {stream}"
        );
    }
    assert_eq!(
        cluster.meta_leader(0),
        Some(meta),
        "the same metadata leader"
    );
    let last_before = observer
        .get_stream("chainsieve-eth")
        .await
        .expect("the stream")
        .info()
        .await
        .expect("its state")
        .state
        .last_sequence;

    eprintln!("killing node{x} ({killed:?}; metadata led by node{meta}, leases by node{leases})");
    let killed_at = SystemTime::now();
    cluster.kill(x).await.expect("kill -9 the leader");
    let at_kill = anvil.block_number().await.expect("block number");
    for watch in &mut watches {
        watch.through(at_kill + 15).await;
    }

    // Every head once, in order, the same on both edges.
    for watch in &watches {
        let numbers: Vec<u64> = watch.heads.iter().map(|head| head.number).collect();
        assert!(
            numbers.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "every head once, in order: {numbers:?}"
        );
    }
    let same = |head: &Head| (head.number, head.hash.clone(), head.cursor.clone());
    let on_first: Vec<_> = watches[0].heads.iter().map(same).collect();
    let on_second: Vec<_> = watches[1].heads.iter().map(same).collect();
    let common = on_first
        .iter()
        .position(|head| Some(head) == on_second.first())
        .expect("the second edge's first head on the first");
    let length = (on_first.len() - common).min(on_second.len());
    assert_eq!(
        on_first[common..common + length],
        on_second[..length],
        "the same heads, the same cursors"
    );

    // The stream's first step after the kill, and its first block.
    let stream = tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Ok(stream) = observer.get_stream("chainsieve-eth").await {
                return stream;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the stream answers");
    let (mut first_step, mut first_block) = (None, None);
    let mut sequence = last_before + 1;
    while first_block.is_none() {
        let message = stream
            .get_raw_message(sequence)
            .await
            .expect("a step after the kill");
        let nanos = u64::try_from(message.time.unix_timestamp_nanos()).expect("after 1970");
        let stored = SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos);
        if stored > killed_at {
            first_step.get_or_insert(stored);
            let change: ChainEvent = codec::decode(&message.payload).expect("a step");
            if let ChainEvent::Added(block) = change {
                first_block = Some((block.number(), stored));
            }
        }
        sequence += 1;
    }
    let (first_step, (number, stored)) = (
        first_step.expect("a step after the kill"),
        first_block.expect("a block after the kill"),
    );
    eprintln!(
        "killed node{x} ({killed:?}): the stream took its first step {:.2}s after the kill, \
         its first block ({number}) {:.2}s after",
        seconds(killed_at, first_step),
        seconds(killed_at, stored),
    );
    for (index, watch) in watches.iter().enumerate() {
        let next = watch.first_after(killed_at);
        let of_block = watch
            .heads
            .iter()
            .find(|head| head.number == number)
            .expect("the client got that block");
        eprintln!(
            "edge {index}: the next head ({}) {:.2}s after the kill; block {number} {:.2}s after the stream held it",
            next.number,
            seconds(killed_at, next.at),
            seconds(stored, of_block.at),
        );
    }
}

/// The price journal's rules against a real JetStream: a leader's writes
/// land in order and in its store; a second store following the journal
/// holds the same; a recorder whose sequence another took is fenced out
/// (its term ends, its store untouched, and it records nothing more); a
/// database another history wrote, or one ahead of the journal, is
/// refused with the reason.
#[tokio::test]
async fn the_price_journal_is_one_linear_log() {
    let nats = Nats::start().await.expect("nats-server");
    let bus = connected(&nats).await;
    let journal = PriceJournal::open(&bus, "eth").await.expect("the journal");
    let token = |byte: u8| PriceWrite::Token {
        address: Address::repeat_byte(byte),
        token: Token {
            name: format!("Token {byte}"),
            decimals: 18,
        },
    };
    let never = CancellationToken::new();

    let leader = Arc::new(PriceStore::in_memory().expect("store"));
    let rival = Arc::new(PriceStore::in_memory().expect("store"));
    let leader_term = CancellationToken::new();
    let rival_term = CancellationToken::new();
    let recorder = journal
        .recorder(leader.clone(), leader_term.clone())
        .expect("a recorder");
    // Made now, it too would write at sequence 1.
    let fenced = journal
        .recorder(rival.clone(), rival_term.clone())
        .expect("a recorder");
    for byte in 1..=3 {
        recorder.record(token(byte)).await.expect("recorded");
    }
    assert_eq!(leader.journaled().expect("journaled"), 3);
    assert!(
        leader
            .token(Address::repeat_byte(2))
            .expect("read")
            .is_some()
    );
    let refused = fenced.record(token(9)).await.expect_err("fenced");
    assert!(
        format!("{refused:#}").contains("another ingest writes it"),
        "{refused:#}"
    );
    assert!(rival_term.is_cancelled(), "a fenced write ends the term");
    assert!(rival.is_empty().expect("read"), "its store is untouched");
    assert!(fenced.record(token(10)).await.is_err(), "nothing more");
    assert!(!leader_term.is_cancelled());

    // Another server's store follows the journal to the same writes.
    let follower = Arc::new(PriceStore::in_memory().expect("store"));
    journal
        .catch_up(&follower, &never)
        .await
        .expect("caught up")
        .expect("not shut down");
    assert_eq!(follower.journaled().expect("journaled"), 3);
    for byte in 1..=3 {
        assert_eq!(
            follower.token(Address::repeat_byte(byte)).expect("read"),
            leader.token(Address::repeat_byte(byte)).expect("read")
        );
    }

    // A database of role `all`'s history, and one ahead of the journal.
    let local = Arc::new(PriceStore::in_memory().expect("store"));
    local.write(&token(1)).expect("written");
    let refused = journal.catch_up(&local, &never).await.expect_err("refused");
    assert!(format!("{refused:#}").contains("role `all`"), "{refused:#}");
    let ahead = Arc::new(PriceStore::in_memory().expect("store"));
    ahead.write_journaled(&[(7, token(1))]).expect("written");
    let refused = journal.catch_up(&ahead, &never).await.expect_err("refused");
    assert!(
        format!("{refused:#}").contains("holds 7 journal writes"),
        "{refused:#}"
    );
}

/// Every built-in topic through the bus: one ingest leading, one standing
/// by, two edges; a client on each edge subscribes to each topic, and a
/// batch of transactions waits in the node's mempool, then is mined. Both
/// edges deliver, on every topic, the same notifications with the same
/// cursors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_topic_is_the_same_on_both_edges() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let nats = Nats::start().await.expect("nats-server");
    let _leader = TestServer::live(on_bus(Role::Ingest, &anvil, &nats)).await;
    let _standby = TestServer::started(on_bus(Role::Ingest, &anvil, &nats)).await;
    let edges = [
        TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await,
        TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await,
    ];
    let (mut deployer, deployer_heads, _) = subscriber(&edges[1], None).await;
    let contract = deploy_ping(&mut deployer, &deployer_heads, &anvil).await;
    drop(deployer);
    // Each topic, and what the batch brings it.
    let topics = [
        (json!(["newPendingTransactions"]), 2),
        (json!(["newPendingTransactions", true]), 2),
        (
            json!(["bvPendingTransactions", { "fromAddress": [DEV_ACCOUNT] }]),
            2,
        ),
        (
            json!(["bvMinedTransactions", { "fromAddress": [DEV_ACCOUNT] }]),
            2,
        ),
        (json!(["newHeads"]), 1),
        (json!(["logs", { "address": contract }]), 1),
        // Seen pending, then mined: the ingest's turns, told alike.
        (
            json!(["transactionLifecycle", { "fromAddress": [DEV_ACCOUNT] }]),
            4,
        ),
    ];
    let mut clients = Vec::new();
    for edge in &edges {
        let mut client = WsClient::connect(&edge.ws_url("eth", KEY))
            .await
            .expect("connect");
        let mut ids = Vec::new();
        for (params, _) in &topics {
            ids.push(client.subscribe(params.clone()).await.expect("subscribed"));
        }
        clients.push((client, ids));
    }

    anvil.automine(false).await.expect("automine off");
    anvil
        .send(json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x1" }))
        .await
        .expect("a transfer");
    anvil.ping(&contract, 1).await;
    anvil.mine(1).await.expect("mine");
    anvil.automine(true).await.expect("automine on");

    let mut delivered = Vec::new();
    for (client, ids) in &mut clients {
        let mut by_topic = vec![Vec::new(); topics.len()];
        while by_topic
            .iter()
            .zip(&topics)
            .any(|(got, (_, count))| got.len() < *count)
        {
            let params = client.next_notification_params().await.expect("notified");
            let topic = ids
                .iter()
                .position(|id| params["subscription"] == *id)
                .expect("a subscription of this client");
            by_topic[topic].push((params["result"].clone(), params["cursor"].clone()));
        }
        for (got, (params, count)) in by_topic.iter().zip(&topics) {
            assert_eq!(got.len(), *count, "{params}: {got:?}");
        }
        delivered.push(by_topic);
    }
    for (topic, (params, _)) in topics.iter().enumerate() {
        assert_eq!(
            delivered[0][topic], delivered[1][topic],
            "{params}: the same notifications, the same cursors"
        );
    }
}

/// Servers started at the same instant on a fresh three-server cluster
/// (`[bus] replicas = 3`), as a compose file or a rollout starts them:
/// two ingests and two edges each create the same streams, buckets and
/// object store at once, and every one of them starts and is ready. Three
/// rounds, each on objects of its own (a fresh prefix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_started_together_on_a_fresh_cluster_all_start() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let cluster = NatsCluster::start(3).await.expect("a NATS cluster");
    for round in 0..3 {
        let bus = BusConfig {
            urls: cluster.urls(),
            replicas: 3,
            prefix: format!("together{round}"),
            ..BusConfig::default()
        };
        let config = |role| Config {
            role,
            bus: bus.clone(),
            ..anvil.config(KEY)
        };
        let roles = [Role::Ingest, Role::Edge, Role::Ingest, Role::Edge];
        let started =
            futures_util::future::join_all(roles.map(|role| TestServer::start(config(role)))).await;
        let servers: Vec<TestServer> = started
            .into_iter()
            .map(|server| server.unwrap_or_else(|error| panic!("round {round}: {error:#}")))
            .collect();
        // One ingest leads; then every edge and the leader are ready.
        let mut statuses: Vec<(usize, _)> = servers
            .iter()
            .enumerate()
            .filter(|(_, server)| server.config.role == Role::Ingest)
            .filter_map(|(index, server)| Some((index, server.state.chains["eth"].node_status()?)))
            .collect();
        let leader = tokio::time::timeout(TIMEOUT, async {
            loop {
                for (index, status) in &mut statuses {
                    if *status.borrow_and_update() == chainsieve_model::SourceState::Live {
                        return *index;
                    }
                }
                let changed = statuses
                    .iter_mut()
                    .map(|(_, status)| Box::pin(status.changed()));
                let _ = futures_util::future::select_all(changed).await;
            }
        })
        .await
        .expect("an ingest leads");
        for (index, server) in servers.iter().enumerate() {
            if server.config.role == Role::Edge || index == leader {
                let ready = reqwest::get(format!("http://{}/readyz", server.addr))
                    .await
                    .expect("/readyz");
                assert_eq!(ready.status(), 200, "round {round}: server {index}");
            }
        }
        for server in servers {
            server.stop().await;
        }
    }
}
