//! Filters uploaded through the admin API (`PUT /admin/filters/<topic>`):
//! checked as a file of the filters directory is, refused with the same
//! reasons, served at once with the hot swap's guarantees, winning over
//! the directory, kept across a restart, removed; on the bus, uploaded on
//! one edge and served to the subscribers of another exactly once across
//! the swap, and by an edge started later.

use std::collections::BTreeSet;
use std::path::Path;

use chainsieve_config::{BusConfig, Config, Role};
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::filters::{evil_filter, origin, place, wait_for_filters, watching};
use chainsieve_tests::nats::Nats;
use chainsieve_tests::{TestServer, WsClient, quantity};
use reqwest::Method;
use serde_json::{Value, json};

const TOKEN: &str = "admin-token-for-uploads-0123";

/// `method` on `/admin/filters/{topic}` of `server`, with `token` and
/// `body`: (status, answer).
async fn filters(
    server: &TestServer,
    method: Method,
    topic: &str,
    token: Option<&str>,
    body: Vec<u8>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(
            method,
            format!("http://{}/admin/filters/{topic}", server.addr),
        )
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("admin request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The even-only `newHeads`: a real component, distinguishable by what it
/// delivers.
fn even_heads() -> Vec<u8> {
    evil_filter(&json!({"topic": "newHeads", "source": "heads", "only_even": true}))
}

/// Until `chain` of `server` serves `newHeads` from `wanted` (an origin's
/// start).
async fn served_from(server: &TestServer, chain: &str, wanted: &str) {
    wait_for_filters(&server.state, |state| {
        origin(state, chain, "newHeads").is_some_and(|o| o.starts_with(wanted))
    })
    .await
    .unwrap_or_else(|error| panic!("{chain} serves newHeads from {wanted}: {error:#}"));
}

/// Reads heads of `subscription` on `ws` into `seen` until the even-only
/// component has visibly served (an even head right after the one two
/// below it).
async fn until_even_only(ws: &mut WsClient, subscription: &str, seen: &mut Vec<u64>) {
    loop {
        let (id, head) = ws.next_notification().await.expect("a head");
        assert_eq!(id, subscription);
        let next = quantity(&head["number"]);
        let served = seen.last().is_some_and(|&last| next == last + 2);
        seen.push(next);
        if served {
            return;
        }
    }
}

/// The numbers of the next `count` heads on `ws`.
async fn first_heads(ws: &mut WsClient, count: usize) -> Vec<u64> {
    let mut seen = Vec::new();
    while seen.len() < count {
        let (_, head) = ws.next_notification().await.expect("a head");
        seen.push(quantity(&head["number"]));
    }
    seen
}

/// Every head once, in order: increasing, and the blocks missing are odd
/// ones (the even-only component's turn).
fn exactly_once(seen: &[u64]) {
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let got: BTreeSet<u64> = seen.iter().copied().collect();
    let (first, last) = (seen[0], seen[seen.len() - 1]);
    assert!(
        (first..=last)
            .filter(|n| !got.contains(n))
            .all(|n| n % 2 == 1),
        "only odd heads are missing: {seen:?}"
    );
}

fn server_config(filters_dir: &Path, data_dir: &Path) -> Config {
    let mut config = watching(filters_dir);
    config.chains.retain(|name, _| name == "eth");
    config.auth.admin_token = Some(TOKEN.into());
    config.data_dir = Some(data_dir.to_path_buf());
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_checked_served_over_the_directory_kept_and_removed() {
    let (filters_dir, data_dir) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    let config = server_config(filters_dir.path(), data_dir.path());
    let server = TestServer::started(config.clone()).await;

    // Only with the token.
    let (status, _) = filters(&server, Method::PUT, "newHeads", None, even_heads()).await;
    assert_eq!(status, 401);
    let wrong = Some("admin-token-for-uploads-9999");
    let (status, _) = filters(&server, Method::PUT, "newHeads", wrong, even_heads()).await;
    assert_eq!(status, 401);

    // Refused with the reason a file of the directory gets.
    let junk = b"not a component".to_vec();
    let (status, refused) =
        filters(&server, Method::PUT, "newHeads", Some(TOKEN), junk.clone()).await;
    assert_eq!(
        (status, refused["error"]["code"].as_i64()),
        (400, Some(-32602)),
        "{refused}"
    );
    let upload_reason = refused["error"]["message"]
        .as_str()
        .expect("why")
        .to_string();
    place(filters_dir.path(), "junk.wasm", &junk);
    let file = filters_dir.path().join("junk.wasm");
    wait_for_filters(&server.state, |state| {
        state
            .filter_reloads
            .borrow()
            .rejected
            .iter()
            .any(|r| r.file == file)
    })
    .await
    .expect("the file refused");
    let file_reason = server.state.filter_reloads.borrow().rejected[0]
        .reason
        .clone();
    let after_origin = |reason: &str| reason.split_once(": ").map(|(_, why)| why.to_string());
    assert!(
        upload_reason.starts_with("compiling uploaded newHeads: "),
        "{upload_reason}"
    );
    assert_eq!(
        after_origin(&upload_reason),
        after_origin(&file_reason),
        "the same refusal: {upload_reason} / {file_reason}"
    );
    std::fs::remove_file(&file).expect("remove");
    let (status, refused) = filters(&server, Method::PUT, "logs", Some(TOKEN), even_heads()).await;
    assert_eq!(status, 400);
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("declares topic newHeads, not logs")),
        "{refused}"
    );

    // Accepted: served at once, to a live subscription, exactly once.
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let heads = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let mut seen = first_heads(&mut ws, 2).await;
    let (status, accepted) =
        filters(&server, Method::PUT, "newHeads", Some(TOKEN), even_heads()).await;
    assert_eq!(status, 200, "{accepted}");
    assert_eq!(accepted["origin"], "uploaded newHeads");
    assert_eq!(accepted["refused"], json!([]));
    assert_eq!(
        origin(&server.state, "eth", "newHeads").as_deref(),
        Some("uploaded newHeads"),
        "served once the PUT is answered"
    );
    until_even_only(&mut ws, &heads, &mut seen).await;
    exactly_once(&seen);

    // The upload wins over a file of its topic, which is listed as not
    // served, saying why.
    place(
        filters_dir.path(),
        "heads.wasm",
        &evil_filter(&json!({"topic": "newHeads", "source": "heads"})),
    );
    let file = filters_dir.path().join("heads.wasm");
    wait_for_filters(&server.state, |state| {
        state
            .filter_reloads
            .borrow()
            .rejected
            .iter()
            .any(|r| r.file == file && r.reason.contains("served by its upload"))
    })
    .await
    .expect("the file is not served");
    assert_eq!(
        origin(&server.state, "eth", "newHeads").as_deref(),
        Some("uploaded newHeads")
    );
    std::fs::remove_file(&file).expect("remove");

    // Kept across a restart with the data directory.
    drop(ws);
    server.stop().await;
    let server = TestServer::started(config).await;
    assert_eq!(
        origin(&server.state, "eth", "newHeads").as_deref(),
        Some("uploaded newHeads")
    );

    // Removed: the built-in serves again.
    let (status, removed) =
        filters(&server, Method::DELETE, "newHeads", Some(TOKEN), Vec::new()).await;
    assert_eq!(
        (status, &removed["removed"]),
        (200, &json!(true)),
        "{removed}"
    );
    assert!(origin(&server.state, "eth", "newHeads").is_some_and(|o| o.starts_with("built-in")));
    let (status, _) = filters(&server, Method::DELETE, "newHeads", Some(TOKEN), Vec::new()).await;
    assert_eq!(status, 404, "nothing left to remove");
}

async fn on_bus(role: Role, anvil: &Anvil, nats: &Nats) -> TestServer {
    let mut config = Config {
        role,
        bus: BusConfig {
            urls: vec![nats.url()],
            ..BusConfig::default()
        },
        ..anvil.config("uploads")
    };
    config.auth.admin_token = Some(TOKEN.into());
    let server = TestServer::started(config).await;
    if role == Role::Ingest {
        server.wait_live("eth").await;
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_uploaded_on_one_edge_serves_every_edge() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let nats = Nats::start().await.expect("nats-server");
    let _ingest = on_bus(Role::Ingest, &anvil, &nats).await;
    let first = on_bus(Role::Edge, &anvil, &nats).await;
    let second = on_bus(Role::Edge, &anvil, &nats).await;

    let mut ws = WsClient::connect(&second.ws_url("eth", "uploads"))
        .await
        .expect("connect");
    let heads = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    anvil.mine(2).await.expect("mine");
    let mut seen = first_heads(&mut ws, 2).await;
    let (status, accepted) =
        filters(&first, Method::PUT, "newHeads", Some(TOKEN), even_heads()).await;
    assert_eq!(status, 200, "{accepted}");
    served_from(&second, "eth", "uploaded newHeads").await;
    // Four blocks: two even ones, the second right after the first.
    anvil.mine(4).await.expect("mine");
    until_even_only(&mut ws, &heads, &mut seen).await;
    exactly_once(&seen);

    // An edge started later serves it from the start.
    let later = on_bus(Role::Edge, &anvil, &nats).await;
    assert_eq!(
        origin(&later.state, "eth", "newHeads").as_deref(),
        Some("uploaded newHeads")
    );

    // Removed on the first edge: the second falls back to the built-in.
    let (status, _) = filters(&first, Method::DELETE, "newHeads", Some(TOKEN), Vec::new()).await;
    assert_eq!(status, 200);
    served_from(&second, "eth", "built-in").await;
    anvil.mine(2).await.expect("mine");
    let (_, head) = ws.next_notification().await.expect("a head");
    seen.push(quantity(&head["number"]));
    assert_eq!(
        seen.len(),
        BTreeSet::from_iter(seen.iter()).len(),
        "{seen:?}"
    );
    drop((ws, heads));
}
