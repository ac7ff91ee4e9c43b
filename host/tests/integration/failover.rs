//! Several `chainsieve` processes on a real NATS JetStream, each killed in
//! turn (`kill -9`) mid-stream, the bus restarted, the node reorganised
//! (while no ingest leads, and under a leader):
//! clients see every log exactly once, in order, on every edge, with the
//! same cursors; a client of a killed edge resumes on another with its
//! last cursor and misses nothing (docs/src/architecture.md, The bus); the
//! edge delivering a webhook killed, another takes it over from its
//! cursor (docs/src/architecture.md, Webhooks).

use std::path::Path;
use std::time::Instant;

use chainsieve_tests::WsClient;
use chainsieve_tests::anvil::{Anvil, deploy_ping};
use chainsieve_tests::nats::Nats;
use chainsieve_tests::process::{ServerProcess, anvil_config};
use chainsieve_tests::receiver::{Delivery, Receiver, create, head_numbers};
use serde_json::{Value, json};

const KEY: &str = "failover-test";

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_chainsieve"))
}

/// The config of a server in `role` reading `anvil` (the ingest) through
/// `nats`; a lease of one second.
fn config(role: &str, anvil: &Anvil, nats: &Nats) -> String {
    let sections = format!(
        r#"
[bus]
urls = ["{bus}"]
lease_ms = 1000
[webhooks]
allow_http = true
allow_private_addresses = true
lease_ms = 1000
"#,
        bus = nats.url(),
    );
    anvil_config(anvil, KEY, &format!(r#"role = "{role}""#), &sections)
}

async fn start(role: &str, anvil: &Anvil, nats: &Nats) -> ServerProcess {
    ServerProcess::start(binary(), &config(role, anvil, nats))
        .await
        .expect("the server starts")
}

async fn edge(anvil: &Anvil, nats: &Nats) -> ServerProcess {
    let mut edge = start("edge", anvil, nats).await;
    edge.logged("chain ready").await.expect("the edge is ready");
    edge
}

/// A client of every log on `edge`, resuming after `cursor` if given.
async fn logs_client(edge: &ServerProcess, cursor: Option<&Value>) -> (WsClient, String) {
    let mut client = WsClient::connect(&edge.ws_url("eth", KEY))
        .await
        .expect("connect");
    let mut params = vec![json!("logs"), json!({})];
    if let Some(cursor) = cursor {
        params.push(json!({ "resumeFrom": cursor }));
    }
    let id = client.subscribe(Value::Array(params)).await.expect("logs");
    (client, id)
}

/// The next `count` notifications on `client`: (result, cursor).
async fn next(client: &mut WsClient, count: usize) -> Vec<(Value, Value)> {
    let mut got = Vec::new();
    for _ in 0..count {
        let params = client.next_notification_params().await.expect("a log");
        got.push((params["result"].clone(), params["cursor"].clone()));
    }
    got
}

/// Logs of transactions mined (not removed), as the control expects them.
fn mined(hashes: Vec<String>) -> impl Iterator<Item = (String, bool)> {
    hashes.into_iter().map(|hash| (hash, false))
}

fn hashes_and_removed(logs: &[(Value, Value)]) -> Vec<(String, bool)> {
    logs.iter()
        .map(|(log, _)| {
            (
                log["transactionHash"].as_str().expect("a hash").to_string(),
                log["removed"] == true,
            )
        })
        .collect()
}

/// Each failure in turn, with clients reading as a bot would: a control
/// client that never moves, and a mover that starts on the edge that dies.
/// Each phase waits for the control to receive what it caused, so every
/// block reaches the log before the next failure (a block the node
/// replaces before any ingest read it was never served, so it cannot come
/// back removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_an_edge_and_the_bus_fail_and_clients_miss_nothing() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let mut nats = Nats::start().await.expect("nats-server");
    let mut leader = start("ingest", &anvil, &nats).await;
    leader
        .logged("leading")
        .await
        .expect("the first ingest leads");
    let mut standby = start("ingest", &anvil, &nats).await;
    standby
        .logged("standing by")
        .await
        .expect("the second stands by");
    let readiness = standby.readiness().await.expect("/readyz");
    assert_eq!(
        readiness["chains"]["eth"]["state"], "standby",
        "{readiness}"
    );
    let mut doomed_edge = edge(&anvil, &nats).await;
    let surviving_edge = edge(&anvil, &nats).await;
    let (mut control, _) = logs_client(&surviving_edge, None).await;
    let (mut mover, _) = logs_client(&doomed_edge, None).await;
    let mut deployer = WsClient::connect(&surviving_edge.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = deployer
        .subscribe(json!(["newHeads"]))
        .await
        .expect("heads");
    let contract = deploy_ping(&mut deployer, &heads, &anvil).await;
    drop(deployer);

    // What the control must receive: each log's hash, and whether it
    // comes removed.
    let pinged = anvil.ping(&contract, 2).await;
    let served = pinged[1].clone();
    let mut expected: Vec<(String, bool)> = mined(pinged).collect();
    let mut seen = next(&mut control, 2).await;

    // The leader dies, and while no ingest leads the node replaces the
    // last block it served: the standby takes over, resumes from the log's
    // tail, publishes that block's removal, then catches up on the blocks
    // mined meanwhile.
    leader.kill().await.expect("kill -9 the leader");
    let killed = Instant::now();
    anvil.reorg(1).await.expect("anvil_reorg");
    expected.push((served, true));
    expected.extend(mined(anvil.ping(&contract, 2).await));
    standby
        .logged("leading")
        .await
        .expect("the standby takes over");
    let takeover = killed.elapsed();
    expected.extend(mined(anvil.ping(&contract, 1).await));
    seen.extend(next(&mut control, 4).await);
    let mut moved = next(&mut mover, seen.len()).await;

    // The mover's edge dies: it resumes on the other with its last cursor.
    doomed_edge.kill().await.expect("kill -9 an edge");
    drop(mover);
    expected.extend(mined(anvil.ping(&contract, 1).await));
    let last = moved.last().expect("the mover read").1.clone();
    let (mut mover, _) = logs_client(&surviving_edge, Some(&last)).await;
    seen.extend(next(&mut control, 1).await);

    // The bus dies and restarts on its storage: everyone reconnects.
    nats.restart().await.expect("nats-server restarts");
    let pinged = anvil.ping(&contract, 2).await;
    let orphaned = pinged[1].clone();
    expected.extend(mined(pinged));
    seen.extend(next(&mut control, 2).await);

    // The node reorganises under the leader: the last log comes back
    // removed.
    anvil.reorg(1).await.expect("anvil_reorg");
    expected.push((orphaned, true));
    let pinged = anvil.ping(&contract, 1).await;
    expected.extend(mined(pinged));
    seen.extend(next(&mut control, 2).await);

    assert_eq!(
        hashes_and_removed(&seen),
        expected,
        "every log once, in order"
    );
    moved.extend(next(&mut mover, seen.len() - moved.len()).await);
    assert_eq!(
        moved, seen,
        "the mover missed nothing; its cursors are the control's"
    );
    eprintln!("the standby took over {takeover:?} after the leader was killed");
}

/// The edge delivering a webhook is killed (`kill -9`): another edge takes
/// it over once its lease expires, from the cursor; the receiver gets every
/// head once, in order (a batch in flight at the kill comes again under
/// the same id, which the receiver's count of each head once discounts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_delivering_a_webhook_is_killed_and_another_takes_it_over() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let nats = Nats::start().await.expect("nats-server");
    let mut ingest = start("ingest", &anvil, &nats).await;
    ingest.logged("leading").await.expect("the ingest leads");
    let mut first = edge(&anvil, &nats).await;
    let mut second = edge(&anvil, &nats).await;
    let mut receiver = Receiver::start().await.expect("receiver");
    let mut client = WsClient::connect(&first.ws_url("eth", KEY))
        .await
        .expect("connect");
    // A block in the edges' logs first: `fromBlock` needs one.
    let start = anvil.mine_served(&mut client).await;
    let (id, secret) = create(
        &mut client,
        &receiver.url(),
        json!(["newHeads", {"fromBlock": format!("{start:#x}")}]),
        Value::Null,
    )
    .await;
    first
        .logged("delivering")
        .await
        .expect("the edge that made it delivers it");
    let numbers = |deliveries: &[Delivery]| head_numbers(deliveries, &id, &secret);
    let through = |last: u64| move |deliveries: &[Delivery]| numbers(deliveries).contains(&last);
    anvil.mine(2).await.expect("mine");
    receiver
        .wait_for("the first heads", through(start + 2))
        .await;

    drop(client);
    first.kill().await.expect("kill -9 the edge delivering it");
    let killed = Instant::now();
    anvil.mine(2).await.expect("mined while nobody delivers");
    second
        .logged("delivering")
        .await
        .expect("the other edge takes it over");
    let takeover = killed.elapsed();
    receiver
        .wait_for("the heads after the kill", through(start + 4))
        .await;
    assert_eq!(
        numbers(&receiver.deliveries()),
        (start..=start + 4).collect::<Vec<_>>(),
        "every head once, in order"
    );
    eprintln!("another edge took the webhook over {takeover:?} after the kill");
}
