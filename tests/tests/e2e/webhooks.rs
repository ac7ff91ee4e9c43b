//! Webhooks end to end: a real receiver over HTTP (`chainsieve_tests::
//! receiver`) checks every delivery's signature and records it; what it
//! gets, each delivery once by its id, is held to what a WebSocket
//! subscription of the same params gets from the same cursor on, reorg
//! removals included: for `logs` with a filter and a custom component,
//! through a receiver failing every way it can, and across a server
//! restart on a node chain (role `all`, the log and webhooks in a data
//! directory), and across a worker's restart after a panic. Then the
//! refusals.

use std::path::Path;
use std::time::Duration;

use chainsieve_config::{AuthConfig, Config, LogConfig, WebhooksConfig};
use chainsieve_filters::registry::BUILT_FILTERS_DIR;
use chainsieve_ingest::devnet::DevnetSettings;
use chainsieve_runtime::tasks::faults::Fault;
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::filters::watching;
use chainsieve_tests::receiver::{Answer, Delivery, Receiver, create, delivered, head_numbers};
use chainsieve_tests::{TestServer, WsClient, fast_devnet, hex_address};
use serde_json::{Value, json};

/// Lets webhooks reach the receiver on 127.0.0.1 over plain http, and
/// retry fast.
fn reachable() -> WebhooksConfig {
    WebhooksConfig {
        allow_http: true,
        allow_private_addresses: true,
        timeout_ms: 400,
        retry_initial_ms: 50,
        retry_max_ms: 400,
        ..WebhooksConfig::default()
    }
}

/// A notification's `result` and `cursor`: what a socket and a webhook
/// must agree on (their subscription ids differ).
fn event(params: &Value) -> Value {
    json!({"result": params["result"], "cursor": params["cursor"]})
}

/// Reads `ws`'s notifications of `subscription` until `done` holds of
/// them; each as `event`.
async fn read_until(
    ws: &mut WsClient,
    subscription: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    while !done(&events) {
        let params = ws
            .next_notification_params()
            .await
            .expect("a notification in time");
        if params["subscription"] == subscription {
            events.push(event(&params));
        }
    }
    events
}

/// The webhook's events up to and including `last`'s cursor, once it has
/// delivered that far.
async fn delivered_through(
    receiver: &mut Receiver,
    webhook: &str,
    secret: &str,
    last: &Value,
) -> Vec<Value> {
    let cursor = last["cursor"].clone();
    receiver
        .wait_for(&format!("{webhook} to deliver {cursor}"), |deliveries| {
            delivered(deliveries, webhook, secret)
                .iter()
                .any(|params| params["cursor"] == cursor)
        })
        .await;
    let events: Vec<Value> = delivered(&receiver.deliveries(), webhook, secret)
        .iter()
        .inspect(|params| assert_eq!(params["subscription"], webhook))
        .map(event)
        .collect();
    let end = events
        .iter()
        .position(|event| event["cursor"] == cursor)
        .expect("delivered");
    events[..=end].to_vec()
}

/// Waits until the webhook has delivered `control`'s last event, and
/// checks that it delivered `control`, in order, each once.
async fn assert_delivered(
    receiver: &mut Receiver,
    webhook: &str,
    secret: &str,
    control: &[Value],
    what: &str,
) {
    let got = delivered_through(receiver, webhook, secret, control.last().expect("some")).await;
    assert_eq!(got, control, "{what}");
}

/// The first notification of a new subscription of `params` on `ws`:
/// (subscription id, its cursor).
async fn first_cursor(ws: &mut WsClient, params: Value) -> (String, String) {
    let id = ws.subscribe(params).await.expect("subscribe");
    let first = read_until(ws, &id, |events| !events.is_empty()).await;
    let cursor = first[0]["cursor"].as_str().expect("a cursor").to_string();
    (id, cursor)
}

/// A socket following `newHeads` on the demo key and a `newHeads` webhook
/// to `receiver` from the socket's first cursor on: (the socket, its
/// subscription, the webhook's id, its secret).
async fn heads_hook(
    server: &TestServer,
    receiver: &Receiver,
) -> (WsClient, String, String, String) {
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let (heads, from) = first_cursor(&mut ws, json!(["newHeads"])).await;
    let (hook, secret) = create(
        &mut ws,
        &receiver.url(),
        json!(["newHeads", {"resumeFrom": from}]),
        Value::Null,
    )
    .await;
    (ws, heads, hook, secret)
}

/// A `logs` webhook with an address filter, in batches of five, and one of
/// a custom component (the example `erc20Transfers`, dropped in the
/// filters directory) get what a socket gets of the same params from the
/// same cursor on, in order, the devnet reorganising every three blocks:
/// removed logs included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logs_webhook_and_a_custom_one_get_what_a_socket_gets() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = "chainsieve_example_erc20_transfers.wasm";
    std::fs::copy(
        Path::new(BUILT_FILTERS_DIR).join(file),
        dir.path().join(file),
    )
    .expect("copy the example");
    let config = Config {
        devnet: DevnetSettings {
            reorg_every: 3,
            reorg_depth: 2,
            ..fast_devnet()
        },
        webhooks: reachable(),
        ..watching(dir.path())
    };
    let server = TestServer::started(config).await;
    let mut receiver = Receiver::start().await.expect("receiver");
    let usdc = hex_address(&chainsieve_ingest::devnet::known_tokens(1)[0].address);
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let transfers = json!(["erc20Transfers", {"tokens": [usdc]}]);
    let (logs_ws, logs_from) = first_cursor(&mut ws, json!(["logs", {"address": usdc}])).await;
    let (logs_hook, logs_secret) = create(
        &mut ws,
        &receiver.url(),
        json!(["logs", {"address": usdc}, {"resumeFrom": logs_from}]),
        json!({"maxEvents": 5}),
    )
    .await;
    let mut other = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let (transfers_ws, transfers_from) = first_cursor(&mut other, transfers).await;
    let (transfers_hook, transfers_secret) = create(
        &mut ws,
        &receiver.url(),
        json!(["erc20Transfers", {"tokens": [usdc]}, {"resumeFrom": transfers_from}]),
        Value::Null,
    )
    .await;

    let control = read_until(&mut ws, &logs_ws, |events| {
        events.len() >= 40 && events.iter().any(|e| e["result"]["removed"] == true)
    })
    .await;
    assert_delivered(
        &mut receiver,
        &logs_hook,
        &logs_secret,
        &control,
        "the logs webhook delivers what the socket got",
    )
    .await;
    let sizes: Vec<usize> = receiver
        .deliveries()
        .iter()
        .filter(|d| d.webhook == logs_hook)
        .map(|d| d.json["notifications"].as_array().expect("a batch").len())
        .collect();
    assert!(
        sizes.iter().all(|&n| (1..=5).contains(&n)),
        "batches of at most five: {sizes:?}"
    );

    let control = read_until(&mut other, &transfers_ws, |events| events.len() >= 20).await;
    assert_delivered(
        &mut receiver,
        &transfers_hook,
        &transfers_secret,
        &control,
        "the custom component's webhook delivers what the socket got",
    )
    .await;
    let body = &receiver
        .deliveries()
        .into_iter()
        .find(|d| d.webhook == transfers_hook)
        .expect("a delivery")
        .json;
    assert_eq!(
        (&body["chain"], &body["topic"]),
        (&json!("eth"), &json!("erc20Transfers"))
    );
    let view = ws
        .call("webhook_get", json!([logs_hook]))
        .await
        .expect("call");
    assert_eq!(view["result"]["state"], "active", "{view}");
    assert!(
        view["result"]["deliveries"].as_u64().expect("a count") >= 8,
        "{view}"
    );
    assert!(
        view["result"].get("secret").is_none(),
        "the secret is shown once"
    );
    let accepted = receiver
        .deliveries()
        .into_iter()
        .find(|d| d.webhook == logs_hook && d.accepted())
        .expect("an accepted delivery");
    the_docs_receivers_verify(&accepted, &logs_secret).await;
}

/// The Python and JavaScript receivers of docs/src/api.md (Verifying a
/// delivery), run as written on a real delivery: it verifies, and the
/// same with its body changed by one byte, or with another secret, does
/// not.
async fn the_docs_receivers_verify(delivery: &Delivery, secret: &str) {
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/api.md"))
        .expect("the API page");
    let section = &api[api.find("### Verifying a delivery").expect("the section")..];
    let block = |language: &str| {
        let start = section
            .find(&format!("```{language}\n"))
            .unwrap_or_else(|| panic!("a {language} example"))
            + language.len()
            + 4;
        let end = start + section[start..].find("```").expect("the block's end");
        section[start..end].to_string()
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let body = dir.path().join("body");
    std::fs::write(&body, &delivery.body).expect("write the body");
    let tampered = dir.path().join("tampered");
    let mut changed = delivery.body.to_vec();
    changed.push(b' ');
    std::fs::write(&tampered, changed).expect("write the body");
    let python = dir.path().join("verify.py");
    std::fs::write(
        &python,
        block("python")
            + r#"
import json, sys
headers = {"x-chainsieve-timestamp": sys.argv[1], "x-chainsieve-signature": sys.argv[2]}
read = lambda path: open(path, "rb").read()
print(json.dumps([verify(sys.argv[3], headers, read(sys.argv[4])),
                  verify(sys.argv[3], headers, read(sys.argv[5])),
                  verify("whsec_other", headers, read(sys.argv[4]))]))
"#,
    )
    .expect("write the script");
    let javascript = dir.path().join("verify.cjs");
    std::fs::write(
        &javascript,
        block("js")
            + r#"
const fs = require("node:fs");
const [timestamp, signature, secret, body, tampered] = process.argv.slice(2);
const headers = {"x-chainsieve-timestamp": timestamp, "x-chainsieve-signature": signature};
console.log(JSON.stringify([verify(secret, headers, fs.readFileSync(body)),
                            verify(secret, headers, fs.readFileSync(tampered)),
                            verify("whsec_other", headers, fs.readFileSync(body))]));
"#,
    )
    .expect("write the script");
    let (body, tampered) = (body.display().to_string(), tampered.display().to_string());
    let args = [
        delivery.timestamp.as_str(),
        delivery.signature.as_str(),
        secret,
        body.as_str(),
        tampered.as_str(),
    ];
    for script in [python, javascript] {
        let verdicts = chainsieve_tests::scripts::run_file(&script, &args).await;
        assert_eq!(
            verdicts,
            json!([true, false, false]),
            "{}",
            script.display()
        );
    }
}

/// The receiver answers 500, too late, closes the connection, answers 429
/// with `Retry-After: 1`, then 503, then is down for a while (longer than
/// the webhook's queue holds): after it is back, the deliveries, each once
/// by id, are what a socket got, in order; the 429's wait was honoured;
/// the webhook said `retrying` while it was down, and is active again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_to_a_receiver_failing_every_way() {
    let config = Config {
        devnet: fast_devnet(),
        webhooks: WebhooksConfig {
            queue: 8,
            ..reachable()
        },
        ..Config::default()
    };
    let server = TestServer::started(config).await;
    let mut receiver = Receiver::start().await.expect("receiver");
    receiver.script([
        Answer::Status(500),
        Answer::Late(Duration::from_millis(1_500)),
        Answer::Close,
        Answer::RetryAfter(1),
        Answer::Status(503),
    ]);
    let (mut ws, heads, hook, secret) = heads_hook(&server, &receiver).await;
    receiver
        .wait_for(
            "the scripted failures, then a delivery accepted",
            |deliveries| deliveries.len() > 5 && deliveries[5..].iter().any(|d| d.accepted()),
        )
        .await;
    let mut control = read_until(&mut ws, &heads, |events| events.len() >= 5).await;
    receiver.down();
    // Down while 30 blocks come: more than the webhook's queue holds.
    control.extend(read_until(&mut ws, &heads, |events| events.len() >= 30).await);
    let view = ws.call("webhook_get", json!([hook])).await.expect("call");
    assert_eq!(view["result"]["state"], "retrying", "{view}");
    let error = view["result"]["lastError"]
        .as_str()
        .expect("the last error");
    assert!(error.starts_with("could not connect"), "{error}");
    receiver.up().await.expect("up again");
    control.extend(read_until(&mut ws, &heads, |events| events.len() >= 10).await);
    assert_delivered(
        &mut receiver,
        &hook,
        &secret,
        &control,
        "every head once, in order",
    )
    .await;

    let deliveries = receiver.deliveries();
    let limited = deliveries
        .iter()
        .position(|d| matches!(d.answer, Answer::RetryAfter(_)))
        .expect("the 429");
    let waited = deliveries[limited + 1].at - deliveries[limited].at;
    assert!(
        waited >= Duration::from_secs(1),
        "Retry-After honoured: {waited:?}"
    );
    assert_eq!(
        deliveries[limited + 1].id,
        deliveries[limited].id,
        "the same delivery again"
    );
    let view = ws.call("webhook_get", json!([hook])).await.expect("call");
    assert_eq!(view["result"]["state"], "active", "{view}");
    assert!(
        view["result"]["failures"].as_u64().expect("a count") >= 6,
        "{view}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("chainsieve_webhooks{state=\"active\"} 1"),
        "{metrics}"
    );
}

/// A webhook's worker made to panic (the fault hooks) is started again by
/// its supervisor: it claims the webhook again and goes on from the
/// cursor the store holds, every head delivered once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_panics_goes_on_from_its_cursor() {
    let config = Config {
        devnet: fast_devnet(),
        webhooks: reachable(),
        ..Config::default()
    };
    let server = TestServer::started(config).await;
    let mut receiver = Receiver::start().await.expect("receiver");
    let (mut ws, heads, hook, secret) = heads_hook(&server, &receiver).await;
    let mut control = read_until(&mut ws, &heads, |events| events.len() >= 3).await;
    delivered_through(
        &mut receiver,
        &hook,
        &secret,
        control.last().expect("three"),
    )
    .await;
    server
        .state
        .tasks
        .inject(&format!("webhook {hook} worker"), Fault::Panic);
    control.extend(read_until(&mut ws, &heads, |events| events.len() >= 6).await);
    assert_delivered(
        &mut receiver,
        &hook,
        &secret,
        &control,
        "every head once, in order, across the worker's restart",
    )
    .await;
    let view = ws.call("webhook_get", json!([hook])).await.expect("call");
    assert_eq!(view["result"]["state"], "active", "{view}");
}

const KEY: &str = "webhook-test";

/// A server whose eth chain reads `anvil`, its log and webhooks kept in
/// `data_dir`.
async fn on_anvil(anvil: &Anvil, data_dir: &Path) -> TestServer {
    let config = Config {
        log: LogConfig {
            data_dir: Some(data_dir.to_path_buf()),
            ..LogConfig::default()
        },
        webhooks: reachable(),
        ..anvil.config(KEY)
    };
    let server = TestServer::started(config).await;
    server.wait_live("eth").await;
    server
}

/// The server restarts (role `all`, its data directory kept) while a
/// delivery is in flight: the new server delivers that batch again, under
/// the same id, then the blocks mined meanwhile; no other delivery comes
/// twice, and the heads are the chain's, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_delivers_again_only_the_batch_in_flight() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let data = tempfile::tempdir().expect("data dir");
    let server = on_anvil(&anvil, data.path()).await;
    let mut receiver = Receiver::start().await.expect("receiver");
    let mut ws = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    // A block in the server's log first: `fromBlock` is refused (-32002)
    // before the chain's first block.
    let start = anvil.mine_served(&mut ws).await;
    let (hook, secret) = create(
        &mut ws,
        &receiver.url(),
        json!(["newHeads", {"fromBlock": format!("{start:#x}")}]),
        Value::Null,
    )
    .await;
    anvil.mine(3).await.expect("mine");
    let (hook, secret) = (hook.as_str(), secret.as_str());
    let heads = |deliveries: &[Delivery]| head_numbers(deliveries, hook, secret);
    let wait_heads =
        |through: u64| move |deliveries: &[Delivery]| heads(deliveries).contains(&through);
    receiver.wait_for("four heads", wait_heads(start + 3)).await;
    // The next delivery is held until the server is gone.
    receiver.script([Answer::Late(Duration::from_secs(60))]);
    anvil.mine(1).await.expect("mine");
    receiver
        .wait_for("a delivery held in flight", |deliveries| {
            deliveries
                .last()
                .is_some_and(|d| matches!(d.answer, Answer::Late(_)))
        })
        .await;
    let before = receiver.deliveries();
    let in_flight = before.last().expect("held").id.clone();
    drop(ws);
    server.stop().await;
    anvil.mine(2).await.expect("mined while the server is down");
    let server = on_anvil(&anvil, data.path()).await;
    receiver.wait_for("every head", wait_heads(start + 6)).await;

    let after = &receiver.deliveries()[before.len()..];
    assert_eq!(
        after[0].id, in_flight,
        "the batch in flight first, under its id"
    );
    assert_eq!(
        after[0].body,
        before.last().expect("held").body,
        "the same batch"
    );
    for delivery in &after[1..] {
        assert!(
            before.iter().all(|earlier| earlier.id != delivery.id),
            "{} was delivered before the restart",
            delivery.id
        );
    }
    assert_eq!(
        heads(&receiver.deliveries()),
        (start..=start + 6).collect::<Vec<_>>(),
        "each head once, in order"
    );
    let mut ws = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let listed = ws.call("webhook_list", json!([])).await.expect("call");
    assert_eq!(listed["result"][0]["id"], hook, "{listed}");
    assert_eq!(listed["result"][0]["state"], "active", "{listed}");
}

/// What is refused, with the error `eth_subscribe` or the limit gives;
/// pause, resume and delete; another key's webhook is not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_limits_and_the_owners_controls() {
    let strict = Config {
        devnet: fast_devnet(),
        ..Config::default()
    };
    let server = TestServer::started(strict).await;
    let receiver = Receiver::start().await.expect("receiver");
    let call = |method: &str, params: Value| {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let server = &server;
        async move { server.post("eth", "demo", &body).await.1 }
    };
    let refused = call(
        "webhook_create",
        json!([{"url": receiver.url(), "subscribe": ["newHeads"]}]),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .expect("a message")
            .contains("allow_http"),
        "{refused}"
    );
    let https_loopback = format!("https://{}/hook", receiver.addr);
    let refused = call(
        "webhook_create",
        json!([{"url": https_loopback, "subscribe": ["newHeads"]}]),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("loopback") && message.contains("allow_private_addresses"),
        "{refused}"
    );
    let by_name = format!("https://localhost:{}/hook", receiver.addr.port());
    let refused = call(
        "webhook_create",
        json!([{"url": by_name, "subscribe": ["newHeads"]}]),
    )
    .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .expect("a message")
            .contains("localhost resolves to"),
        "a name is judged by what it resolves to: {refused}"
    );
    server.stop().await;

    let config = Config {
        devnet: fast_devnet(),
        auth: AuthConfig {
            keys: vec!["owner".into(), "stranger".into()],
            ..AuthConfig::default()
        },
        webhooks: WebhooksConfig {
            max_per_key: 2,
            ..reachable()
        },
        ..Config::default()
    };
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "owner"))
        .await
        .expect("connect");
    let url = receiver.url();
    for bad in [
        json!(["logs", {"address": "0x12"}]),
        json!(["noSuchTopic"]),
        json!(["newPendingTransactions", {"fromBlock": "0x1"}]),
    ] {
        let direct = ws.call("eth_subscribe", bad.clone()).await.expect("call");
        let hooked = ws
            .call("webhook_create", json!([{"url": url, "subscribe": bad}]))
            .await
            .expect("call");
        assert_eq!(
            hooked["error"], direct["error"],
            "refused as eth_subscribe refuses {bad}"
        );
    }
    for (request, says) in [
        (
            json!({"url": url, "subscribe": ["newHeads"], "batch": {"maxEvents": 0}}),
            "maxEvents",
        ),
        (
            json!({"url": url, "subscribe": ["newHeads"], "colour": "red"}),
            "colour",
        ),
        (json!({"url": url}), "subscribe"),
        (
            json!({"url": "ftp://example.com", "subscribe": ["newHeads"]}),
            "ftp://",
        ),
    ] {
        let refused = ws
            .call("webhook_create", json!([request]))
            .await
            .expect("call");
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .expect("a message")
                .contains(says),
            "{refused}"
        );
    }
    let (first, _) = create(&mut ws, &url, json!(["newHeads"]), Value::Null).await;
    create(&mut ws, &url, json!(["newHeads"]), Value::Null).await;
    let over = ws
        .call(
            "webhook_create",
            json!([{"url": url, "subscribe": ["newHeads"]}]),
        )
        .await
        .expect("call");
    assert_eq!(over["error"]["code"], -32005, "{over}");
    assert!(
        over["error"]["message"]
            .as_str()
            .expect("a message")
            .contains("webhooks.max_per_key"),
        "{over}"
    );

    // Another key sees none of them, and cannot touch them.
    let mut stranger = WsClient::connect(&server.ws_url("eth", "stranger"))
        .await
        .expect("connect");
    for method in [
        "webhook_get",
        "webhook_pause",
        "webhook_resume",
        "webhook_delete",
    ] {
        let answer = stranger.call(method, json!([first])).await.expect("call");
        assert_eq!(answer["error"]["code"], -32001, "{method}: {answer}");
    }
    let listed = stranger
        .call("webhook_list", json!([]))
        .await
        .expect("call");
    assert_eq!(listed["result"], json!([]));
    let paused = ws
        .call("webhook_pause", json!([first]))
        .await
        .expect("call");
    assert_eq!(paused["result"]["state"], "paused", "{paused}");
    assert_eq!(paused["result"]["pausedReason"], "paused by its owner");
    let refused = ws
        .call(
            "webhook_resume",
            json!([first, {"resumeFrom": "eth:1:0:0000000000000000"}]),
        )
        .await
        .expect("call");
    assert_eq!(
        refused["error"]["code"], -32001,
        "a start the log does not hold: {refused}"
    );
    let still = ws.call("webhook_get", json!([first])).await.expect("call");
    assert_eq!(
        still["result"]["state"], "paused",
        "a refused resume changes nothing: {still}"
    );
    let resumed = ws
        .call("webhook_resume", json!([first]))
        .await
        .expect("call");
    assert_eq!(resumed["result"]["state"], "active", "{resumed}");
    let deleted = ws
        .call("webhook_delete", json!([first]))
        .await
        .expect("call");
    assert_eq!(deleted["result"], true);
    let gone = ws.call("webhook_get", json!([first])).await.expect("call");
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
    let listed = ws.call("webhook_list", json!([])).await.expect("call");
    assert_eq!(listed["result"].as_array().expect("a list").len(), 1);
}
