//! API keys and plans on a running server: made by the admin API, used
//! over HTTP and WebSocket, held to their plan (-32005 naming it),
//! re-planned, revoked (the open socket closed with 1008 "key revoked"),
//! kept across a restart with the data directory; on the bus, made on one
//! edge and used on another, revoked there, known to an edge started
//! later.

use std::collections::BTreeMap;
use std::time::Duration;

use chainsieve_config::{BusConfig, Config, PlanConfig, Role};
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::nats::Nats;
use chainsieve_tests::{TIMEOUT, TestServer, WsClient, test_config};
use reqwest::Method;
use serde_json::{Value, json};

const TOKEN: &str = "admin-token-for-keys-0123";
const CONFIGURED: &str = "configured-key";

/// `method` on `path` of `server`'s admin API with `token`; (status, body).
async fn admin(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request =
        reqwest::Client::new().request(method, format!("http://{}{path}", server.addr));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("admin request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// `method` on `/admin/keys/{id}` of `server`.
async fn on_key(
    server: &TestServer,
    method: reqwest::Method,
    id: &str,
    body: Option<Value>,
) -> (u16, Value) {
    admin(
        server,
        method,
        &format!("/admin/keys/{id}"),
        Some(TOKEN),
        body,
    )
    .await
}

/// `eth_chainId` over HTTP with `key`: (status, body).
async fn chain_id(server: &TestServer, chain: &str, key: &str) -> (u16, Value) {
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    server.post(chain, key, call).await
}

async fn create(server: &TestServer, body: Value) -> (String, String) {
    let (status, view) = admin(server, Method::POST, "/admin/keys", Some(TOKEN), Some(body)).await;
    assert_eq!(status, 201, "{view}");
    let secret = view["key"].as_str().expect("the secret, once").to_string();
    (view["id"].as_str().expect("id").to_string(), secret)
}

fn plans() -> BTreeMap<String, PlanConfig> {
    BTreeMap::from([
        (
            "free".to_string(),
            PlanConfig {
                requests_per_second: Some(5),
                max_connections: Some(1),
                chains: Some(vec!["eth".into()]),
                methods: Some(vec!["eth".into()]),
                ..PlanConfig::default()
            },
        ),
        (
            "pro".to_string(),
            PlanConfig {
                max_connections: Some(10),
                ..PlanConfig::default()
            },
        ),
    ])
}

fn config(data_dir: &std::path::Path) -> Config {
    let mut config = test_config();
    config
        .chains
        .retain(|name, _| name == "eth" || name == "bsc");
    config.auth.keys = vec![CONFIGURED.into()];
    config.auth.admin_token = Some(TOKEN.into());
    config.plans = plans();
    config.data_dir = Some(data_dir.to_path_buf());
    config.webhooks.allow_http = true;
    config.webhooks.allow_private_addresses = true;
    config
}

/// A batch of `calls` `eth_chainId` over HTTP: how many were answered
/// and the first refusal.
async fn batch(server: &TestServer, chain: &str, key: &str, calls: usize) -> (usize, Value) {
    let body: Vec<Value> = (0..calls)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId"}))
        .collect();
    let (status, answers) = server
        .post(chain, key, &Value::Array(body).to_string())
        .await;
    assert_eq!(status, 200, "{answers}");
    let answers = answers.as_array().expect("a batch answer").clone();
    let answered = answers.iter().filter(|a| a.get("result").is_some()).count();
    let refused = answers
        .iter()
        .find(|a| a.get("error").is_some())
        .map_or(Value::Null, |a| a["error"].clone());
    (answered, refused)
}

fn message(error: &Value) -> &str {
    error["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_made_held_to_their_plan_re_planned_revoked_and_kept() {
    // A data directory that is not there yet: the server makes it and
    // keeps each feature's database in it.
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("var/chainsieve");
    let server = TestServer::started(config(&data)).await;
    for file in ["keys.redb", "usage.redb", "webhooks.redb", "filters.redb"] {
        assert!(data.join(file).is_file(), "{file} in the data directory");
    }

    // The admin API wants the token.
    let (status, body) = admin(&server, Method::GET, "/admin/keys", None, None).await;
    assert_eq!(status, 401, "{body}");
    let wrong = Some("admin-token-for-keys-9999");
    let (status, body) = admin(&server, Method::POST, "/admin/keys", wrong, Some(json!({}))).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = admin(
        &server,
        Method::POST,
        "/admin/keys",
        Some(TOKEN),
        Some(json!({"plan": "gold"})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_i64()),
        (400, Some(-32602)),
        "{body}"
    );
    assert!(
        message(&body["error"]).contains("unknown plan \"gold\" (configured: default, free, pro)")
    );

    let (id, secret) = create(&server, json!({"name": "bots", "plan": "free"})).await;
    let (status, view) = on_key(&server, Method::GET, &id, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        (view["name"].as_str(), view["plan"].as_str()),
        (Some("bots"), Some("free"))
    );
    assert!(
        !view.to_string().contains(&secret),
        "the secret is shown once: {view}"
    );

    // Used over HTTP and WebSocket, within its plan.
    let (answered, _) = batch(&server, "eth", &secret, 1).await;
    assert_eq!(answered, 1);
    let mut socket = WsClient::connect(&server.ws_url("eth", &secret))
        .await
        .expect("connect");
    let heads = socket
        .subscribe(json!(["newHeads"]))
        .await
        .expect("subscribe");
    let (subscription, _) = socket.next_notification().await.expect("a head");
    assert_eq!(subscription, heads);

    // Its plan's limits, each answered naming the plan.
    let refused = WsClient::connect(&server.ws_url("eth", &secret)).await;
    let error = format!("{:#}", refused.err().expect("one connection on free"));
    assert!(error.contains("429"), "{error}");
    let (status, body) = server
        .post(
            "eth",
            &secret,
            r#"{"jsonrpc":"2.0","id":1,"method":"token_price","params":[]}"#,
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_i64()),
        (200, Some(-32004)),
        "{body}"
    );
    assert!(message(&body["error"]).contains("plan \"free\""), "{body}");
    let (status, body) = chain_id(&server, "bsc", &secret).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        message(&body["error"]).contains("may not use chain \"bsc\""),
        "{body}"
    );
    let (answered, refusal) = batch(&server, "eth", &secret, 20).await;
    assert!(answered <= 5, "{answered} answered at 5 a second");
    assert_eq!(refusal["code"], -32005, "{refusal}");
    assert!(
        message(&refusal).contains(
            "plan \"free\" allows 5 requests per second (plans.free.requests_per_second)"
        ),
        "{refusal}"
    );

    // Re-planned: the new plan counts at once, on the open socket too.
    let (status, view) = on_key(
        &server,
        Method::PATCH,
        &id,
        Some(json!({"plan": "pro", "name": null})),
    )
    .await;
    assert_eq!(
        (status, view["plan"].as_str(), &view["name"]),
        (200, Some("pro"), &Value::Null),
        "{view}"
    );
    let (answered, refusal) = batch(&server, "bsc", &secret, 20).await;
    assert_eq!(answered, 20, "{refusal}");
    let mut second = WsClient::connect(&server.ws_url("eth", &secret))
        .await
        .expect("pro allows more connections");
    second.call("eth_chainId", json!([])).await.expect("call");
    let price = socket.call("token_price", json!([])).await.expect("call");
    assert_ne!(
        price["error"]["code"], -32004,
        "pro allows every method: {price}"
    );

    // A webhook of the key, delivering.
    let mut receiver = chainsieve_tests::receiver::Receiver::start()
        .await
        .expect("receiver");
    let (webhook, _) = chainsieve_tests::receiver::create(
        &mut second,
        &receiver.url(),
        json!(["newHeads"]),
        Value::Null,
    )
    .await;
    receiver
        .wait_for("a delivery", |deliveries| {
            deliveries.iter().any(|d| d.webhook == webhook)
        })
        .await;

    // Revoked: its sockets close, its calls are refused, its webhook
    // pauses.
    let (status, view) = on_key(&server, Method::DELETE, &id, None).await;
    assert_eq!(status, 200, "{view}");
    assert!(view["revokedAt"].is_u64(), "{view}");
    assert_eq!(
        socket.closed().await.expect("closed"),
        (1008, "key revoked".to_string())
    );
    assert_eq!(
        second.closed().await.expect("closed"),
        (1008, "key revoked".to_string())
    );
    let (status, body) = chain_id(&server, "eth", &secret).await;
    assert_eq!(status, 401, "{body}");
    assert!(message(&body["error"]).contains("revoked"), "{body}");
    let (status, _) = on_key(&server, Method::PATCH, &id, Some(json!({"plan": "free"}))).await;
    assert_eq!(status, 409, "a revoked key stays revoked");
    let webhooks = server.state.webhooks.clone().expect("webhooks");
    let owner = chainsieve_keys::record::digest(&secret);
    let deadline = tokio::time::Instant::now() + chainsieve_tests::TIMEOUT;
    let view = loop {
        let view = webhooks.get(&owner, &webhook).expect("the webhook");
        if view["state"] == "paused" {
            break view;
        }
        assert!(tokio::time::Instant::now() < deadline, "{view}");
        // The next head makes its worker look at the key again.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        view["pausedReason"],
        format!("its API key {id} was revoked"),
        "{view}"
    );
    // The webhooks hold the keys (whose webhooks they are), and the keys
    // their database: let go before the restart below.
    drop(webhooks);

    // The config's key: listed, not managed here.
    let (_, listed) = admin(&server, Method::GET, "/admin/keys", Some(TOKEN), None).await;
    let configured = listed["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|key| key["source"] == "config")
        .expect("the configured key is listed")
        .clone();
    assert_eq!(configured["id"], "config-1");
    assert!(
        !listed.to_string().contains(CONFIGURED),
        "no secret listed: {listed}"
    );
    let (status, _) = on_key(&server, Method::DELETE, "config-1", None).await;
    assert_eq!(status, 409);
    let (status, _) = on_key(&server, Method::DELETE, "key_000000000000", None).await;
    assert_eq!(status, 404);

    // Restarted on the same data directory: keys and revocations kept.
    let (kept_id, kept) = create(&server, json!({"chains": ["bsc"]})).await;
    server.stop().await;
    let server = TestServer::started(config(&data)).await;
    let (answered, _) = batch(&server, "bsc", &kept, 1).await;
    assert_eq!(answered, 1, "a key made before the restart works after it");
    let (status, _) = chain_id(&server, "eth", &kept).await;
    assert_eq!(status, 403, "and keeps its grant: bsc only");
    let (status, _) = chain_id(&server, "eth", &secret).await;
    assert_eq!(status, 401, "a revoked key stays revoked");
    let (answered, _) = batch(&server, "eth", CONFIGURED, 1).await;
    assert_eq!(answered, 1, "the config's key works as before");
    let (_, view) = on_key(&server, Method::GET, &kept_id, None).await;
    assert_eq!(view["chains"], json!(["bsc"]));
    // The database holds digests, never a secret.
    let stored = std::fs::read(data.join("keys.redb")).expect("keys.redb");
    let stored = String::from_utf8_lossy(&stored);
    assert!(
        !stored.contains(&kept) && !stored.contains(&secret),
        "no secret in keys.redb"
    );
}

/// An edge on the bus, with the admin API on.
async fn edge(anvil: &Anvil, nats: &Nats, role: Role) -> TestServer {
    let mut config = Config {
        role,
        bus: BusConfig {
            urls: vec![nats.url()],
            ..BusConfig::default()
        },
        ..anvil.config(CONFIGURED)
    };
    config.auth.admin_token = Some(TOKEN.into());
    config.plans = plans();
    config.usage.flush_secs = 1;
    let server = TestServer::started(config).await;
    if role == Role::Ingest {
        server.wait_live("eth").await;
    }
    server
}

/// Until `key` gets `status` for `eth_chainId` on `server` (the change
/// comes through the bus's watch).
async fn until_status(server: &TestServer, key: &str, status: u16) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let (now, body) = chain_id(server, "eth", key).await;
        if now == status {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {now}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_made_on_one_edge_is_used_and_revoked_on_every_edge() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let nats = Nats::start().await.expect("nats-server");
    let _ingest = edge(&anvil, &nats, Role::Ingest).await;
    let first = edge(&anvil, &nats, Role::Edge).await;
    let second = edge(&anvil, &nats, Role::Edge).await;

    let (id, secret) = create(&first, json!({"plan": "free"})).await;
    until_status(&second, &secret, 200).await;
    let mut socket = WsClient::connect(&second.ws_url("eth", &secret))
        .await
        .expect("the other edge accepts the key");
    let answer = socket.call("token_price", json!([])).await.expect("call");
    assert_eq!(
        answer["error"]["code"], -32004,
        "its plan there too: {answer}"
    );

    // An edge started later knows it, and its plan, from the start.
    let later = edge(&anvil, &nats, Role::Edge).await;
    let (status, view) = on_key(&later, Method::GET, &id, None).await;
    assert_eq!(
        (status, view["plan"].as_str()),
        (200, Some("free")),
        "{view}"
    );
    let (status, _) = chain_id(&later, "eth", &secret).await;
    assert_eq!(status, 200);

    // Its usage, asked of the edge it never called: the other edges'
    // hourly buckets summed (each edge writes its own every second).
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let total = usage_total(&first, &id).await;
        if total["calls"] == json!({"eth_chainId": 2}) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{total}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Revoked on the first edge: the socket on the second closes.
    let (status, _) = on_key(&first, Method::DELETE, &id, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        socket.closed().await.expect("closed"),
        (1008, "key revoked".to_string())
    );
    until_status(&later, &secret, 401).await;
}

/// The text a `newHeads` subscriber reads on `ws` (as raw frames) until
/// the answer to `eth_unsubscribe`: how many notifications, their bytes,
/// and the last head's number.
async fn read_until_unsubscribed(ws: &mut WsClient, subscription: &str, until: u64) -> (u64, u64) {
    let (mut count, mut bytes, mut unsubscribing) = (0, 0, false);
    loop {
        let payload = ws.next_payload().await.expect("a frame");
        let frame: Value = serde_json::from_slice(&payload).expect("JSON");
        if frame["method"] == "eth_subscription" {
            assert_eq!(frame["params"]["subscription"], subscription);
            count += 1;
            bytes += payload.len() as u64;
            let number = chainsieve_tests::quantity(&frame["params"]["result"]["number"]);
            if number >= until && !unsubscribing {
                unsubscribing = true;
                ws.send_text(
                    &json!({"jsonrpc": "2.0", "id": 99, "method": "eth_unsubscribe", "params": [subscription]})
                        .to_string(),
                )
                .await;
            }
        } else {
            assert_eq!(
                (frame["id"].as_u64(), &frame["result"]),
                (Some(99), &json!(true)),
                "{frame}"
            );
            return (count, bytes);
        }
    }
}

/// `GET /admin/keys/{id}/usage` on `server`: the total.
async fn usage_total(server: &TestServer, id: &str) -> Value {
    let (status, usage) = admin(
        server,
        Method::GET,
        &format!("/admin/keys/{id}/usage"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 200, "{usage}");
    usage["total"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_what_a_key_sent_and_received_and_is_kept() {
    use chainsieve_config::{LogConfig, Span, WebhooksConfig};
    use chainsieve_tests::receiver::{Receiver, create as create_webhook};
    let dir = tempfile::tempdir().expect("temp dir");
    let config = {
        let mut config = config(dir.path());
        config.chains.retain(|name, _| name == "eth");
        config.devnet = chainsieve_tests::stepped_devnet();
        config.devnet.history_blocks = 20;
        config.log = LogConfig {
            window: Span::Blocks(8),
            ..config.log
        };
        config.webhooks = WebhooksConfig {
            allow_http: true,
            allow_private_addresses: true,
            ..WebhooksConfig::default()
        };
        config.usage.flush_secs = 1;
        config
    };
    let server = TestServer::started(config.clone()).await;
    let (id, secret) = create(&server, json!({"name": "metered"})).await;

    // Calls over HTTP: each call of a batch counts.
    batch(&server, "eth", &secret, 5).await;
    for _ in 0..2 {
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#;
        assert_eq!(server.post("eth", &secret, call).await.0, 200);
    }
    // A subscription replaying history, then live heads.
    let mut ws = WsClient::connect(&server.ws_url("eth", &secret))
        .await
        .expect("connect");
    let heads = ws
        .subscribe(json!(["newHeads", {"fromBlock": "0x1"}]))
        .await
        .expect("subscribe");
    server.mine("eth", &secret).await;
    server.mine("eth", &secret).await;
    let (notifications, bytes) = read_until_unsubscribed(&mut ws, &heads, 22).await;
    assert_eq!(notifications, 22, "blocks 1 to 22");
    // A webhook's deliveries.
    let mut receiver = Receiver::start().await.expect("receiver");
    let (webhook, webhook_secret) =
        create_webhook(&mut ws, &receiver.url(), json!(["newHeads"]), Value::Null).await;
    server.mine("eth", &secret).await;
    receiver
        .wait_for("a delivery", |deliveries| {
            chainsieve_tests::receiver::head_numbers(deliveries, &webhook, &webhook_secret)
                .contains(&23)
        })
        .await;
    let deleted = ws
        .call("webhook_delete", json!([webhook]))
        .await
        .expect("call");
    assert_eq!(deleted["result"], true, "{deleted}");
    let delivered: Vec<_> = receiver
        .deliveries()
        .into_iter()
        .filter(|delivery| delivery.webhook == webhook && delivery.accepted())
        .collect();

    let total = usage_total(&server, &id).await;
    assert_eq!(
        total["calls"],
        json!({"eth_chainId": 5, "eth_blockNumber": 2, "evm_mine": 3, "eth_subscribe": 1,
               "eth_unsubscribe": 1, "webhook_create": 1, "webhook_delete": 1}),
        "{total}"
    );
    assert_eq!(
        (total["notifications"].as_u64(), total["bytes"].as_u64()),
        (Some(notifications), Some(bytes))
    );
    assert_eq!(
        total["webhookDeliveries"].as_u64(),
        Some(delivered.len() as u64),
        "{total}"
    );
    let webhook_bytes: usize = delivered.iter().map(|delivery| delivery.body.len()).sum();
    assert_eq!(
        total["webhookBytes"].as_u64(),
        Some(webhook_bytes as u64),
        "{total}"
    );
    let replayed = total["historyBlocks"].as_u64().expect("history blocks");
    assert!(
        replayed > 0 && replayed < notifications,
        "the blocks older than the log's window came from the archive: {total}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(&format!(
            "chainsieve_key_calls_total{{key=\"{id}\",name=\"metered\",method=\"eth_chainId\"}} 5"
        )),
        "{metrics}"
    );
    assert!(!metrics.contains(&secret), "no secret in /metrics");

    // Restarted on the same data directory: the hours are kept.
    drop(ws);
    server.stop().await;
    let server = TestServer::started(config).await;
    assert_eq!(
        usage_total(&server, &id).await,
        total,
        "kept across the restart"
    );
    let (status, body) = admin(
        &server,
        Method::GET,
        &format!("/admin/keys/{id}/usage?from=2030-01-01T00:00:00Z&to=1"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_i64()),
        (400, Some(-32602)),
        "{body}"
    );
}
