//! Watchlists over the real server's sockets: made, filled, inspected,
//! emptied and removed over HTTP and WebSocket; every refusal a JSON-RPC
//! error naming what was wrong (and the setting, for a limit), the
//! connection kept; what a key made survives a restart on its data
//! directory, and another key never sees it.

use chainsieve_config::{AuthConfig, Config, PlanConfig, WatchlistsConfig};
use chainsieve_tests::{TestServer, WsClient, fast_devnet};
use serde_json::{Value, json};

fn address(n: u32) -> String {
    format!("0x{n:040x}")
}

fn addresses(range: std::ops::Range<u32>) -> Value {
    range.map(address).collect()
}

fn config(data_dir: &std::path::Path) -> Config {
    Config {
        devnet: fast_devnet(),
        data_dir: Some(data_dir.to_path_buf()),
        auth: AuthConfig {
            keys: vec!["owner".into(), "stranger".into()],
            admin_token: Some(TOKEN.into()),
        },
        watchlists: WatchlistsConfig {
            max_per_key: 2,
            max_addresses: 50,
        },
        ..Config::default()
    }
}

const TOKEN: &str = "admin-token-for-watchlists";

/// `GET path` of the admin API: (status, body).
async fn admin(server: &TestServer, path: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("http://{}{path}", server.addr))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("admin request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

async fn call(server: &TestServer, key: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    server.post("eth", key, &body).await.1
}

/// Where each chain placed an edit: the position of the cursor after
/// which it applies, by chain (every chain served has one).
fn points(answer: &Value) -> std::collections::BTreeMap<String, u64> {
    let points = answer["result"]["appliesAfter"]
        .as_object()
        .expect("appliesAfter");
    let positions: std::collections::BTreeMap<String, u64> = points
        .iter()
        .map(|(chain, cursor)| {
            let cursor = cursor.as_str().expect("a cursor");
            let rest = cursor
                .strip_prefix(&format!("{chain}:"))
                .expect("of its chain");
            let position = rest.split('@').next().expect("a position");
            (chain.clone(), position.parse().expect("a number"))
        })
        .collect();
    let chains: Vec<&str> = positions.keys().map(String::as_str).collect();
    assert_eq!(chains, ["bsc", "eth", "polygon"], "{answer}");
    positions
}

fn error(answer: &Value, code: i64, says: &str) {
    assert_eq!(answer["error"]["code"], code, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(message.contains(says), "{says:?} in {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchlist_is_edited_inspected_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let server = TestServer::started(config(dir.path())).await;
    let made = call(
        &server,
        "owner",
        "watchlist_create",
        json!(["users", addresses(0..10)]),
    )
    .await;
    assert_eq!(made["result"]["size"], 10, "{made}");
    assert_eq!(made["result"]["added"], 10, "{made}");
    let first_edit = made["result"]["edit"].as_u64().expect("an edit number");
    let first_points = points(&made);

    // Over a socket, with a repeat and an address already in: each counted once.
    let mut socket = WsClient::connect(&server.ws_url("eth", "owner"))
        .await
        .expect("ws");
    let mut more = addresses(8..20);
    more.as_array_mut()
        .expect("array")
        .push(json!(address(19).to_uppercase().replace("0X", "0x")));
    let added = socket
        .call("watchlist_add", json!(["users", more]))
        .await
        .expect("add");
    assert_eq!(added["result"]["size"], 20, "{added}");
    assert_eq!(added["result"]["added"], 10, "{added}");
    assert!(
        added["result"]["edit"].as_u64() > Some(first_edit),
        "{added}"
    );
    // Each chain placed it in its log after the first edit.
    for (chain, position) in points(&added) {
        assert!(position > first_points[&chain], "{chain}: {added}");
    }

    // Refusals, each on the same connection, none changing anything.
    let bad = socket
        .call("watchlist_add", json!(["users", [address(30), "0x1234"]]))
        .await
        .expect("answer");
    error(
        &bad,
        -32602,
        "address 1 is not 0x and 40 hex digits: \"0x1234\"; nothing was changed",
    );
    let over = socket
        .call("watchlist_add", json!(["users", addresses(100..131)]))
        .await
        .expect("answer");
    error(&over, -32005, "would hold 51 addresses");
    error(&over, -32005, "watchlists.max_addresses");
    let unknown = socket
        .call("watchlist_remove", json!(["nobody", [address(1)]]))
        .await
        .expect("answer");
    error(&unknown, -32001, "no watchlist named \"nobody\"");
    let twice = socket
        .call("watchlist_create", json!(["users"]))
        .await
        .expect("answer");
    error(&twice, -32602, "already has a watchlist named \"users\"");
    let named = socket
        .call("watchlist_create", json!(["two words"]))
        .await
        .expect("answer");
    error(&named, -32602, "1 to 64 letters");
    let shape = socket
        .call("watchlist_add", json!({"name": "users"}))
        .await
        .expect("answer");
    error(&shape, -32602, "positional parameters");
    let got = socket
        .call("watchlist_get", json!(["users", {"limit": 0}]))
        .await
        .expect("answer");
    error(&got, -32602, "limit is a number from 1 to 10000");
    socket
        .call("watchlist_create", json!(["second"]))
        .await
        .expect("second");
    let third = socket
        .call("watchlist_create", json!(["third"]))
        .await
        .expect("answer");
    error(&third, -32005, "has 2 watchlists");
    error(&third, -32005, "watchlists.max_per_key");
    assert_eq!(
        socket
            .call("watchlist_get", json!(["users"]))
            .await
            .expect("get")["result"]["size"],
        20,
        "nothing refused changed it"
    );

    let removed = call(
        &server,
        "owner",
        "watchlist_remove",
        json!(["users", addresses(0..5)]),
    )
    .await;
    assert_eq!(removed["result"]["removed"], 5, "{removed}");
    // The index keeps the edits' changes for views before them only until
    // the chains have placed them and their batches before are done.
    server
        .until_metric("chainsieve_watchlist_edits_total", 4.0)
        .await;
    server
        .until_metric("chainsieve_watchlist_unsettled", 0.0)
        .await;
    // Pages walk the addresses in order.
    let page = call(
        &server,
        "owner",
        "watchlist_get",
        json!(["users", {"limit": 10}]),
    )
    .await;
    assert_eq!(page["result"]["addresses"], addresses(5..15), "{page}");
    assert_eq!(page["result"]["next"], json!(address(14)), "{page}");
    let rest = call(
        &server,
        "owner",
        "watchlist_get",
        json!(["users", {"after": address(14)}]),
    )
    .await;
    assert_eq!(rest["result"]["addresses"], addresses(15..20), "{rest}");
    assert_eq!(rest["result"]["next"], Value::Null, "{rest}");

    // Another key: sees none, edits none.
    let theirs = call(&server, "stranger", "watchlist_list", json!([])).await;
    assert_eq!(theirs["result"], json!([]), "{theirs}");
    let foreign = call(
        &server,
        "stranger",
        "watchlist_add",
        json!(["users", [address(1)]]),
    )
    .await;
    error(&foreign, -32001, "no watchlist named \"users\"");
    server.stop().await;

    let server = TestServer::started(config(dir.path())).await;
    let list = call(&server, "owner", "watchlist_list", json!([])).await;
    let names: Vec<(&str, u64)> = list["result"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|w| {
            (
                w["name"].as_str().expect("name"),
                w["size"].as_u64().expect("size"),
            )
        })
        .collect();
    assert_eq!(names, vec![("second", 0), ("users", 15)], "{list}");
    let page = call(&server, "owner", "watchlist_get", json!(["users"])).await;
    assert_eq!(page["result"]["addresses"], addresses(5..20), "{page}");
    // What /metrics says of them.
    server.until_metric("chainsieve_watchlists", 2.0).await;
    server
        .until_metric("chainsieve_watchlist_addresses", 15.0)
        .await;
    // The operator sees the same, by the key's id (the first of `[auth] keys`).
    let (status, listed) = admin(&server, "/admin/keys/config-1/watchlists").await;
    assert_eq!(
        (status, &listed["watchlists"]),
        (200, &list["result"]),
        "{listed}"
    );
    let (status, page) = admin(
        &server,
        &format!(
            "/admin/keys/config-1/watchlists/users?limit=2&after={}",
            address(5)
        ),
    )
    .await;
    assert_eq!(
        (status, &page["addresses"]),
        (200, &addresses(6..8)),
        "{page}"
    );
    assert_eq!(page["next"], json!(address(7)), "{page}");
    let (status, none) = admin(&server, "/admin/keys/config-2/watchlists/users").await;
    assert_eq!(
        (status, &none["error"]["code"]),
        (404, &json!(-32001)),
        "{none}"
    );
    let (status, bad) = admin(&server, "/admin/keys/config-1/watchlists/users?limit=0").await;
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!(-32602)),
        "{bad}"
    );
    let (status, nobody) = admin(&server, "/admin/keys/nobody/watchlists").await;
    assert_eq!(status, 404, "{nobody}");
    let cleared = call(&server, "owner", "watchlist_clear", json!(["users"])).await;
    assert_eq!(
        (
            cleared["result"]["size"].as_u64(),
            cleared["result"]["removed"].as_u64()
        ),
        (Some(0), Some(15)),
        "{cleared}"
    );
    let deleted = call(&server, "owner", "watchlist_delete", json!(["users"])).await;
    assert!(
        deleted["result"]["edit"].as_u64() > added["result"]["edit"].as_u64(),
        "{deleted}"
    );
    let gone = call(&server, "owner", "watchlist_get", json!(["users"])).await;
    error(&gone, -32001, "no watchlist named \"users\"");
    server.stop().await;
}

/// A plan's own limit wins over the server-wide one, and is the setting
/// the refusal names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plans_limit_is_named() {
    let dir = tempfile::tempdir().expect("dir");
    let mut config = config(dir.path());
    config.plans.insert(
        "default".into(),
        PlanConfig {
            max_watchlist_addresses: Some(3),
            ..PlanConfig::default()
        },
    );
    let server = TestServer::started(config).await;
    let over = call(
        &server,
        "owner",
        "watchlist_create",
        json!(["users", addresses(0..4)]),
    )
    .await;
    error(
        &over,
        -32005,
        "plan \"default\" allows (3, plans.default.max_watchlist_addresses)",
    );
    let listed = call(&server, "owner", "watchlist_list", json!([])).await;
    assert_eq!(listed["result"], json!([]), "nothing made: {listed}");
    server.stop().await;
}
