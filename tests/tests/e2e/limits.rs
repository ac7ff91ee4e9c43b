//! Per-connection and per-key limits answer -32005 naming the limit (or,
//! before a WebSocket exists, HTTP 429 with that error), and the probes
//! `/healthz` and `/readyz` say what orchestrators need.

use std::time::{Duration, Instant};

use chainsieve_config::{ChainConfig, SourceConfig};
use chainsieve_tests::{TestServer, WsClient, sample, test_config};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_at_most_its_subscriptions() {
    let config =
        chainsieve_tests::with_limits(|limits| limits.max_subscriptions_per_connection = 3);
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            ws.subscribe(json!(["newHeads"]))
                .await
                .expect("within the limit"),
        );
    }
    let refused = ws
        .call("eth_subscribe", json!(["newHeads"]))
        .await
        .expect("call");
    assert_limit(
        &refused,
        &["3 subscriptions", "limits.max_subscriptions_per_connection"],
    );
    // Another connection has its own allowance; this one gets room back
    // by unsubscribing.
    let mut other = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    other
        .subscribe(json!(["newHeads"]))
        .await
        .expect("own allowance");
    let done = ws
        .call("eth_unsubscribe", json!([ids[0]]))
        .await
        .expect("call");
    assert_eq!(done["result"], json!(true));
    ws.subscribe(json!(["newHeads"])).await.expect("room again");
}

/// The caps on the values one filter names (docs/src/api.md, Filter
/// parameters): over them is a limit (-32005, naming it), not a malformed request, and the connection serves
/// on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_names_at_most_a_thousand_values() {
    let server = TestServer::default().await;
    let mut ws = WsClient::connect(&server.ws_url("polygon", "demo"))
        .await
        .expect("connect");
    let addresses = |n: usize| -> Vec<String> { (0..n).map(|i| format!("0x{i:040x}")).collect() };
    let over = [
        (
            json!(["bvPendingTransactions", {"fromAddress": addresses(600), "toAddress": addresses(401)}]),
            "fromAddress and toAddress: 1001",
        ),
        (
            json!(["logs", {"address": addresses(1001)}]),
            "address: 1001",
        ),
        (
            json!(["logs", {"topics": [null, addresses(1001).iter().map(|a| format!("{a:0<66}")).collect::<Vec<_>>()]}]),
            "topics[1]: 1001",
        ),
    ];
    for (params, what) in over {
        let refused = ws.call("eth_subscribe", params).await.expect("call");
        assert_limit(&refused, &[what, "at most 1000"]);
    }
    ws.subscribe(json!(["bvPendingTransactions", {"fromAddress": addresses(1000)}]))
        .await
        .expect("exactly at the cap");
}

/// `filters.max_values` reaches the components (through their WASI
/// environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filter_value_cap_is_a_setting() {
    let mut config = test_config();
    config.filters.max_values = 2;
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let three = ["0x01", "0x02", "0x03"].map(|n| format!("{n:0<42}"));
    let refused = ws
        .call("eth_subscribe", json!(["logs", {"address": three}]))
        .await
        .expect("call");
    assert_limit(
        &refused,
        &["address: 3 (at most 2 per filter, filters.max_values)"],
    );
    ws.subscribe(json!(["logs", {"address": &three[..2]}]))
        .await
        .expect("within the cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_holds_at_most_its_connections() {
    let config = chainsieve_tests::with_limits(|limits| limits.max_connections_per_key = 2);
    let server = TestServer::started(config).await;
    let url = server.ws_url("bsc", "demo");
    let first = WsClient::connect(&url).await.expect("first");
    let _second = WsClient::connect(&url).await.expect("second");
    let refused = tokio_tungstenite::connect_async(&url)
        .await
        .expect_err("a third is refused");
    let tokio_tungstenite::tungstenite::Error::Http(response) = refused else {
        panic!("an HTTP answer, got {refused}");
    };
    assert_eq!(response.status().as_u16(), 429);
    let body: Value =
        serde_json::from_slice(response.body().as_deref().expect("a body")).expect("JSON");
    assert_limit(&body, &["limits.max_connections_per_key"]);
    drop(first);
    // The place comes back once the server has seen the close; until then
    // each attempt is answered 429 at once.
    let deadline = std::time::Instant::now() + chainsieve_tests::TIMEOUT;
    while let Err(error) = WsClient::connect(&url).await {
        assert!(
            std::time::Instant::now() < deadline,
            "a place came back: {error:#}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_readiness() {
    let server = TestServer::started(test_config()).await;
    let client = reqwest::Client::new();
    let get = |path: &str| {
        let url = format!("http://{}{path}", server.addr);
        let client = client.clone();
        async move {
            let response = client.get(url).send().await.expect("request");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.expect("JSON"))
        }
    };
    assert_eq!(get("/healthz").await, (200, json!({"status": "ok"})));
    let (status, ready) = get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["chains"]["polygon"]["state"], json!("live"));

    // A chain whose node cannot be reached is not ready, and says why.
    let unreachable = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        listener.local_addr().expect("addr").port()
    };
    let mut config = test_config();
    config.auth.keys = vec!["key".into()];
    config.chains.insert(
        "eth".into(),
        ChainConfig {
            chain_id: Some(1),
            source: SourceConfig::node(format!("ws://127.0.0.1:{unreachable}")),
            ..ChainConfig::default()
        },
    );
    let down = TestServer::started(config).await;
    let url = format!("http://{}/readyz", down.addr);
    let response = client.get(url).send().await.expect("request");
    assert_eq!(response.status().as_u16(), 503);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["ready"], json!(false));
    assert!(
        matches!(
            body["chains"]["eth"]["state"].as_str(),
            Some("connecting" | "down")
        ),
        "{body}"
    );
    assert_eq!(body["chains"]["bsc"]["state"], json!("live"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_makes_at_most_its_requests_per_second() {
    let config = chainsieve_tests::with_limits(|limits| limits.requests_per_second_per_key = 10);
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let batch: Vec<Value> = (0..100)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "eth_chainId"}))
        .collect();
    let batch = Value::Array(batch).to_string();
    // One second's burst, then one call per 100 ms of refill: at most this
    // many calls can be answered in `elapsed` from a full bucket (the
    // bucket is untouched before the batch; the calls fall within the
    // time measured around them).
    let most = |elapsed: Duration| 10 + elapsed.as_millis().div_ceil(100) as usize;
    let started = Instant::now();
    ws.send_text(&batch).await;
    let replies = ws.next_response().await.expect("the batch response");
    let batch_time = started.elapsed();
    let (answered, limited) = tally(&replies);
    assert_eq!(answered + limited.len(), 100);
    assert!(
        (10..=most(batch_time)).contains(&answered),
        "{answered} answered in {batch_time:?}"
    );
    assert_limit(
        limited[0],
        &[
            "10 requests per second",
            "limits.requests_per_second_per_key",
        ],
    );
    // The bucket is the key's, over HTTP too: the same batch there gets
    // only what refilled since (a bucket of its own would answer 10 more).
    let (status, body) = server.post("eth", "demo", &batch).await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200, "{body}");
    let (answered_http, limited_http) = tally(&body);
    assert_eq!(answered_http + limited_http.len(), 100);
    assert!(
        answered + answered_http <= most(elapsed),
        "{answered} + {answered_http} answered in {elapsed:?}"
    );
    assert_limit(
        limited_http.first().expect("refused over HTTP"),
        &["limits.requests_per_second_per_key"],
    );
    // The socket stays open.
    assert!(ws.call("eth_chainId", json!([])).await.is_ok());
}

/// How many replies of an `eth_chainId` batch were answered, and the
/// replies refused with -32005.
fn tally(replies: &Value) -> (usize, Vec<&Value>) {
    let replies = replies.as_array().expect("a batch");
    let answered = replies
        .iter()
        .filter(|r| r["result"] == json!("0x1"))
        .count();
    let limited = replies
        .iter()
        .filter(|r| r["error"]["code"] == json!(-32005))
        .collect();
    (answered, limited)
}

/// `answer` is error -32005 and its message says each of `phrases`.
fn assert_limit(answer: &Value, phrases: &[&str]) {
    assert_eq!(answer["error"]["code"], json!(-32005), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    for phrase in phrases {
        assert!(message.contains(phrase), "{phrase:?} not in {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_happened() {
    let server = TestServer::started(test_config()).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let heads = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    // Three heads: the actor counts a batch's notifications once all are
    // queued, so a head may arrive before its own count; the third arrives
    // after the first two batches were counted.
    for _ in 0..3 {
        let (id, _) = ws.next_notification().await.expect("a head");
        assert_eq!(id, heads);
    }
    let page = server.metrics().await;
    let value =
        |series: &str| sample(&page, series).unwrap_or_else(|| panic!("no {series} in\n{page}"));
    let eth_heads = r#"{chain="eth",topic="newHeads"}"#;
    assert!(value(&format!("chainsieve_notifications_sent_total{eth_heads}")) >= 2.0);
    assert!(value(&format!("chainsieve_filter_batch_seconds_count{eth_heads}")) >= 2.0);
    assert_eq!(value(&format!("chainsieve_subscriptions{eth_heads}")), 1.0);
    assert_eq!(
        value(r#"chainsieve_subscriptions{chain="bsc",topic="newHeads"}"#),
        0.0
    );
    assert!(value(r#"chainsieve_events_ingested_total{chain="eth",stream="heads"}"#) >= 2.0);
    assert_eq!(value(r#"chainsieve_connections{chain="eth"}"#), 1.0);
    assert_eq!(value(r#"chainsieve_source_live{chain="polygon"}"#), 1.0);
    assert_eq!(
        value(r#"chainsieve_filter_disabled{chain="eth",topic="logs"}"#),
        0.0
    );
    assert_eq!(value("chainsieve_closed_too_slow_total"), 0.0);
    // Devnet chains read no node: nothing malformed to skip.
    assert_eq!(value("chainsieve_upstream_objects_skipped_total"), 0.0);
    // Every queue between tasks shows its bound and what waits in it.
    let eth_source = r#"{part="eth",queue="source"}"#;
    assert_eq!(
        value(&format!("chainsieve_queue_capacity{eth_source}")),
        1024.0
    );
    assert!(value(&format!("chainsieve_queue_depth{eth_source}")) <= 1024.0);
    for queue in ["price feed", "archive", "submissions", "devnet requests"] {
        let labels = format!(r#"{{part="eth",queue="{queue}"}}"#);
        assert!(
            value(&format!("chainsieve_queue_capacity{labels}")) > 0.0,
            "{queue}"
        );
    }
    assert_eq!(
        value(r#"chainsieve_queue_capacity{part="webhooks",queue="database writes"}"#),
        1024.0
    );
    // Every supervised task is up.
    assert_eq!(
        value(r#"chainsieve_task_down{part="eth",task="eth pipeline"}"#),
        0.0
    );
    assert_eq!(
        value(r#"chainsieve_task_restarts_total{part="usage",task="usage flush"}"#),
        0.0
    );

    // The page as a scraper asks for it: the text format for one that
    // asks for nothing in particular, which Prometheus' own checker
    // passes (help text for every family); OpenMetrics for one that
    // asks for it first, as Prometheus does.
    let get = |accept: Option<&'static str>| {
        let request = reqwest::Client::new().get(format!("http://{}/metrics", server.addr));
        let request = match accept {
            Some(accept) => request.header("accept", accept),
            None => request,
        };
        async move {
            let response = request.send().await.expect("/metrics");
            let kind = response.headers()["content-type"]
                .to_str()
                .expect("a content type")
                .to_string();
            (kind, response.text().await.expect("the page"))
        }
    };
    let (kind, text) = get(None).await;
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    assert_eq!(promtool_check(&text), "", "promtool check metrics");
    assert!(text.contains("# TYPE chainsieve_events_ingested_total counter"));
    let (kind, open) = get(Some(
        "application/openmetrics-text;version=1.0.0;q=0.6,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    ))
    .await;
    assert!(
        kind.starts_with("application/openmetrics-text; version=1.0.0"),
        "{kind}"
    );
    assert!(open.ends_with("# EOF\n"), "{open}");
}

/// What `promtool check metrics` (Prometheus' own checker, installed by
/// the test command) says of `page`: nothing when it passes.
fn promtool_check(page: &str) -> String {
    use std::io::Write as _;
    let mut check = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus) is installed");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("the page written");
    let said = check.wait_with_output().expect("promtool ran");
    let words = format!(
        "{}{}",
        String::from_utf8_lossy(&said.stdout),
        String::from_utf8_lossy(&said.stderr)
    );
    if said.status.success() {
        words
    } else {
        format!("failed: {words}")
    }
}

/// The request limits name their settings, over HTTP as over WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_limits_name_their_settings() {
    let config = chainsieve_tests::with_limits(|limits| {
        limits.max_batch = 2;
        limits.max_request_bytes = 1_024;
    });
    let server = TestServer::started(config).await;
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    let (status, body) = server
        .post("eth", "demo", &format!("[{call},{call},{call}]"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_limit(&body, &["batch of 3 requests", "(limits.max_batch)"]);
    let oversized = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":["{}"]}}"#,
        "a".repeat(2_048)
    );
    let (status, body) = server.post("eth", "demo", &oversized).await;
    assert_eq!(status, 413, "{body}");
    assert_limit(
        &body,
        &["limit of 1024 bytes", "(limits.max_request_bytes)"],
    );
}
