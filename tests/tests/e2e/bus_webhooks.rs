//! Webhooks on the bus: an ingest reading anvil, two edges on a real
//! `nats-server`. A webhook made on one edge is known to the other (its
//! state and progress too), delivered by exactly one; paused on the other
//! edge, the one delivering it stops; resumed there, that edge takes it
//! over from the cursor; that edge shut down, the first takes it back.
//! Through all of it the receiver gets every head once, in order. (The
//! edge delivering it killed with `kill -9`: `host/tests/integration/
//! failover.rs`.)

use std::time::Duration;

use chainsieve_config::{BusConfig, Config, Role, WebhooksConfig};
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::nats::Nats;
use chainsieve_tests::receiver::{Delivery, Receiver, create, head_numbers};
use chainsieve_tests::{TIMEOUT, TestServer, WsClient};
use serde_json::{Value, json};

const KEY: &str = "bus-webhooks";

/// A config in `role` on `nats` whose webhooks may call the test's
/// receiver, its eth chain read from `anvil` (an edge reads the bus).
fn on_bus(role: Role, anvil: &Anvil, nats: &Nats) -> Config {
    Config {
        role,
        bus: BusConfig {
            urls: vec![nats.url()],
            ..BusConfig::default()
        },
        webhooks: WebhooksConfig {
            allow_http: true,
            allow_private_addresses: true,
            lease_ms: 1_000,
            retry_initial_ms: 50,
            retry_max_ms: 400,
            ..WebhooksConfig::default()
        },
        ..anvil.config(KEY)
    }
}

/// `webhook_get` of `id` on `ws`, until `done` holds of it.
async fn get_until(
    ws: &mut WsClient,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let view = ws.call("webhook_get", json!([id])).await.expect("call")["result"].clone();
        if done(&view) {
            return view;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {view}");
        // The other edge learns of changes through the bus's watch.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_edge_delivers_a_webhook_and_the_other_takes_over() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let nats = Nats::start().await.expect("nats-server");
    let _ingest = TestServer::live(on_bus(Role::Ingest, &anvil, &nats)).await;
    let first = TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await;
    let second = TestServer::live(on_bus(Role::Edge, &anvil, &nats)).await;
    let mut receiver = Receiver::start().await.expect("receiver");
    let mut on_first = WsClient::connect(&first.ws_url("eth", KEY))
        .await
        .expect("connect");
    let mut on_second = WsClient::connect(&second.ws_url("eth", KEY))
        .await
        .expect("connect");
    // A block in the edges' logs first: `fromBlock` needs one.
    let start = anvil.mine_served(&mut on_first).await;
    let (id, secret) = create(
        &mut on_first,
        &receiver.url(),
        json!(["newHeads", {"fromBlock": format!("{start:#x}")}]),
        Value::Null,
    )
    .await;
    let through = |number: u64| {
        let (id, secret) = (id.clone(), secret.clone());
        move |deliveries: &[Delivery]| head_numbers(deliveries, &id, &secret).contains(&number)
    };
    anvil.mine(2).await.expect("mine");
    receiver
        .wait_for("the first heads", through(start + 2))
        .await;

    // The other edge knows it, and what it delivered.
    let listed = on_second
        .call("webhook_list", json!([]))
        .await
        .expect("call");
    assert_eq!(listed["result"][0]["id"], id.as_str(), "{listed}");
    let last = head_numbers(&receiver.deliveries(), &id, &secret).len() as u64;
    get_until(
        &mut on_second,
        &id,
        "the other edge sees the progress",
        |view| view["notifications"].as_u64() == Some(last),
    )
    .await;

    // Paused on the other edge: the first stops. Resumed there: the
    // second claims it and goes on from the cursor.
    let paused = on_second
        .call("webhook_pause", json!([id]))
        .await
        .expect("call");
    assert_eq!(paused["result"]["state"], "paused", "{paused}");
    get_until(
        &mut on_first,
        &id,
        "the first edge sees the pause",
        |view| view["state"] == "paused",
    )
    .await;
    anvil.mine(2).await.expect("mined while paused");
    let resumed = on_second
        .call("webhook_resume", json!([id]))
        .await
        .expect("call");
    assert_eq!(resumed["result"]["state"], "active", "{resumed}");
    receiver
        .wait_for("the heads mined while paused", through(start + 4))
        .await;

    // The second edge goes: the first takes the webhook back.
    drop(on_second);
    second.stop().await;
    anvil.mine(2).await.expect("mine");
    receiver
        .wait_for("the heads after the handover", through(start + 6))
        .await;

    let got = head_numbers(&receiver.deliveries(), &id, &secret);
    assert_eq!(
        got,
        (start..=start + 6).collect::<Vec<_>>(),
        "every head once, in order, across the pause and both handovers"
    );
    // Its progress is written once the receiver has answered: the count
    // catches up with what the receiver got.
    let delivered = got.len() as u64;
    get_until(
        &mut on_first,
        &id,
        "active, every delivery counted",
        |view| view["state"] == "active" && view["notifications"].as_u64() == Some(delivered),
    )
    .await;
}
