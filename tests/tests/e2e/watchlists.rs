//! Watchlists over the real server's sockets: made, filled, inspected,
//! emptied and removed over HTTP and WebSocket; every refusal a JSON-RPC
//! error naming what was wrong (and the setting, for a limit), the
//! connection kept; what a key made survives a restart on its data
//! directory, and another key never sees it.

use chainsieve_config::{AuthConfig, Config, PlanConfig, WatchlistsConfig};
use chainsieve_tests::receiver::{Receiver, create, delivered};
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

/// A webhook naming a watchlist matches nothing once the watchlist is
/// deleted; reopened after a restart, its subscription is refused, and the
/// webhook says why (`failing`, its last error naming the watchlist)
/// rather than the server failing to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_whose_watchlist_is_gone_says_so_after_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let config = || Config {
        webhooks: chainsieve_config::WebhooksConfig {
            allow_http: true,
            allow_private_addresses: true,
            ..Default::default()
        },
        ..self::config(dir.path())
    };
    let receiver = Receiver::start().await.expect("receiver");
    let server = TestServer::started(config()).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "owner"))
        .await
        .expect("ws");
    let made = ws
        .call("watchlist_create", json!(["users", [address(1)]]))
        .await
        .expect("made");
    assert_eq!(made["result"]["size"], 1, "{made}");
    let (hook, _) = create(
        &mut ws,
        &receiver.url(),
        json!(["bvMinedTransactions", {"fromAddress": {"watchlist": "users"}}]),
        Value::Null,
    )
    .await;
    let deleted = ws
        .call("watchlist_delete", json!(["users"]))
        .await
        .expect("deleted");
    assert!(deleted["result"]["edit"].is_u64(), "{deleted}");
    drop(ws);
    server.stop().await;

    let server = TestServer::started(config()).await;
    server
        .until_metric("chainsieve_webhooks{state=\"failing\"}", 1.0)
        .await;
    let view = call(&server, "owner", "webhook_get", json!([hook])).await;
    assert_eq!(view["result"]["state"], "failing", "{view}");
    let error = view["result"]["lastError"].as_str().expect("an error");
    assert!(error.contains("unknown watchlist \"users\""), "{view}");
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

/// The position of a cursor (`<chain>:<position>@…`).
fn position_of(cursor: &str) -> u64 {
    let rest = cursor.split_once(':').expect("a chain").1;
    rest.split('@')
        .next()
        .expect("a position")
        .parse()
        .expect("a number")
}

/// Reads the next notification into `seen`: (subscription, params).
async fn next_into(ws: &mut WsClient, seen: &mut Vec<(String, Value)>) {
    let params = ws.next_notification_params().await.expect("a notification");
    let id = params["subscription"].as_str().expect("an id").to_string();
    seen.push((id, params));
}

/// The position of `subscription`'s last notification in `seen` (0: none).
fn latest(seen: &[(String, Value)], subscription: &str) -> u64 {
    seen.iter()
        .filter(|(id, _)| id == subscription)
        .map(|(_, p)| position_of(p["cursor"].as_str().expect("a cursor")))
        .max()
        .unwrap_or(0)
}

/// Mines blocks until `control` has had a transaction at `position` or
/// after, reading every notification on the way (each block holds some).
async fn mine_past(
    server: &TestServer,
    ws: &mut WsClient,
    seen: &mut Vec<(String, Value)>,
    control: &str,
    position: u64,
) {
    while latest(seen, control) < position {
        let before = latest(seen, control);
        server.mine("eth", "demo").await;
        while latest(seen, control) == before {
            next_into(ws, seen).await;
        }
    }
}

/// How many addresses the set holds besides the members.
const FILLER: u32 = 1_000_000;

/// Filler address `n`: in no block of the devnet (its first byte 0xfe).
fn filler(n: u32) -> String {
    format!("0xfe{n:038x}")
}

/// One stream matched against the watchlist `"set"`: a control
/// subscription to every event of its kind, the watched one's params
/// (naming the set), and the address in a notification's result the set is
/// about.
struct Case {
    control: Value,
    watched: Value,
    member: fn(&Value) -> Option<String>,
    /// Other watchlists the watched params name, made first: (name,
    /// addresses).
    fixed: Vec<(&'static str, Vec<String>)>,
}

/// A subscription naming a watchlist gets, of every event of the control,
/// those whose member is in the watchlist as it stood at the event's place
/// in the chain: edits made while it runs apply from the cursor each
/// answers, never before, and none restarts it. A webhook of the same
/// params delivers the same. A replay by cursor matches as of the set when
/// it is read.
///
/// The set holds a million addresses besides the members ([`filler`]),
/// and each edit while the chain moves adds or removes ten thousand of
/// them with the members it changes: none of them is ever on the chain,
/// so what matches is the members' doing alone, at the cost of a set that
/// large.
async fn matches_the_set_at_each_events_place(case: Case) {
    let server = TestServer::started(Config {
        devnet: chainsieve_tests::stepped_devnet(),
        webhooks: chainsieve_config::WebhooksConfig {
            allow_http: true,
            allow_private_addresses: true,
            ..Default::default()
        },
        watchlists: WatchlistsConfig {
            max_addresses: 1_100_000,
            ..WatchlistsConfig::default()
        },
        ..Config::default()
    })
    .await;
    let mut receiver = Receiver::start().await.expect("receiver");
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("ws");
    for (name, addresses) in &case.fixed {
        let made = ws
            .call("watchlist_create", json!([name, addresses]))
            .await
            .expect("made");
        assert_eq!(made["result"]["size"], addresses.len(), "{made}");
    }
    let control = ws.subscribe(case.control.clone()).await.expect("control");
    let mut seen: Vec<(String, Value)> = Vec::new();
    for _ in 0..5 {
        server.mine("eth", "demo").await;
    }
    let mut members: Vec<String> = Vec::new();
    let collected = ws.collect_until(&control, 30).await.expect("events");
    for (_, event) in &collected {
        if let Some(member) = (case.member)(event).filter(|m| !members.contains(m)) {
            members.push(member);
        }
    }
    assert!(members.len() >= 4, "{members:?}");
    let (first, second) = members.split_at(members.len() / 2);
    let edit = |method: &str, members: &[String], filler: std::ops::Range<u32>| {
        let addresses: Vec<String> = members
            .iter()
            .cloned()
            .chain(filler.map(self::filler))
            .collect();
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": ["set", addresses]})
            .to_string()
    };
    let point = |answer: &Value| -> u64 {
        position_of(
            answer["result"]["appliesAfter"]["eth"]
                .as_str()
                .unwrap_or_else(|| panic!("a point: {answer}")),
        )
    };
    let made = server
        .post("eth", "demo", &edit("watchlist_create", first, 0..0))
        .await
        .1;
    let mut edits = vec![(point(&made), first.to_vec())];
    // A million more, 20,000 an edit (a request's limit is 1 MiB).
    for chunk in (0..FILLER).step_by(20_000) {
        let filled = server
            .post(
                "eth",
                "demo",
                &edit("watchlist_add", &[], chunk..chunk + 20_000),
            )
            .await
            .1;
        assert_eq!(filled["result"]["added"], 20_000, "{filled}");
    }
    let watched = ws
        .subscribe(case.watched.clone())
        .await
        .expect("a watchlist in the filter");
    // The stepped devnet mines only when told: the webhook starts where
    // the subscription did.
    let (hook, secret) = create(&mut ws, &receiver.url(), case.watched.clone(), Value::Null).await;
    let start = edits[0].0;
    mine_past(&server, &mut ws, &mut seen, &control, start + 3).await;
    let added = server
        .post(
            "eth",
            "demo",
            &edit("watchlist_add", second, FILLER..FILLER + 10_000),
        )
        .await
        .1;
    assert_eq!(
        added["result"]["size"].as_u64(),
        Some(u64::from(FILLER) + 10_000 + members.len() as u64),
        "{added}"
    );
    edits.push((point(&added), members.clone()));
    mine_past(&server, &mut ws, &mut seen, &control, edits[1].0 + 3).await;
    let removed = server
        .post("eth", "demo", &edit("watchlist_remove", first, 0..10_000))
        .await
        .1;
    edits.push((point(&removed), second.to_vec()));
    mine_past(&server, &mut ws, &mut seen, &control, edits[2].0 + 3).await;
    // Everyone, then one block more: every notification before it is in.
    let everyone = server
        .post("eth", "demo", &edit("watchlist_add", first, 0..0))
        .await
        .1;
    let end = point(&everyone);
    mine_past(&server, &mut ws, &mut seen, &control, end + 1).await;
    while latest(&seen, &watched) <= end {
        next_into(&mut ws, &mut seen).await;
    }
    let in_range = |params: &Value| {
        let cursor = params["cursor"].as_str().expect("cursor");
        let position = position_of(cursor);
        (position > start && position < end).then(|| {
            let member = (case.member)(&params["result"]).expect("a member");
            (position, cursor.to_string(), member)
        })
    };
    let of = |sub: &str| -> Vec<(u64, String, String)> {
        seen.iter()
            .filter(|(id, _)| id == sub)
            .filter_map(|(_, p)| in_range(p))
            .collect()
    };
    let set_at = |position: u64| {
        edits
            .iter()
            .rev()
            .find(|(after, _)| *after < position)
            .map(|(_, set)| set.clone())
            .unwrap_or_default()
    };
    let expected: Vec<(u64, String, String)> = of(&control)
        .into_iter()
        .filter(|(position, _, member)| set_at(*position).contains(member))
        .collect();
    let got = of(&watched);
    assert!(expected.len() > 10, "{expected:?}");
    assert_eq!(got, expected, "the set in force at each event's place");
    // Each edit changed what came: some of the second half came only after
    // its add, and the first half stopped after its removal.
    assert!(
        got.iter()
            .any(|(p, _, member)| *p > edits[1].0 && second.contains(member))
    );
    assert!(
        !got.iter()
            .any(|(p, _, member)| *p > edits[2].0 && *p < end && first.contains(member))
    );
    // The webhook delivered the same, up to the socket's last in range.
    let last = got.last().expect("some").1.clone();
    receiver
        .wait_for(&format!("{hook} to deliver {last}"), |deliveries| {
            delivered(deliveries, &hook, &secret)
                .iter()
                .any(|params| params["cursor"] == last.as_str())
        })
        .await;
    let hooked: Vec<(u64, String, String)> = delivered(&receiver.deliveries(), &hook, &secret)
        .iter()
        .filter_map(in_range)
        .collect();
    assert_eq!(hooked, got, "the webhook matches as the socket does");
    // A replay matches as of the set when it is read: resumed from the
    // watched subscription's first notification, it gets the events after
    // it of every member the set holds now (all those found at the start),
    // whatever the set held at their place.
    let (_, from_cursor, _) = got[0].clone();
    let mut again = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("ws");
    let mut resumed_params = case.watched.clone();
    resumed_params
        .as_array_mut()
        .expect("params")
        .push(json!({"resumeFrom": from_cursor}));
    let resumed = again.subscribe(resumed_params).await.expect("resumed");
    let mut replayed = Vec::new();
    while latest(&replayed, &resumed) < end {
        next_into(&mut again, &mut replayed).await;
    }
    let replayed: Vec<String> = replayed
        .iter()
        .map(|(_, p)| p["cursor"].as_str().expect("cursor").to_string())
        .filter(|cursor| position_of(cursor) < end)
        .collect();
    let everything_after: Vec<String> = of(&control)
        .into_iter()
        .skip_while(|(_, cursor, _)| *cursor != from_cursor)
        .skip(1)
        .filter(|(_, _, member)| members.contains(member))
        .map(|(_, cursor, _)| cursor)
        .collect();
    assert_eq!(replayed, everything_after);
    server.stop().await;
}

/// `bvMinedTransactions` by sender; and the refusals of a filter naming a
/// watchlist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_by_sender_match_the_set_at_each_events_place() {
    {
        let server = TestServer::started(chainsieve_tests::test_config()).await;
        let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
            .await
            .expect("ws");
        let made = ws
            .call("watchlist_create", json!(["set"]))
            .await
            .expect("made");
        assert_eq!(made["result"]["size"], 0, "{made}");
        // Refused: a name the key has none of, a number in place of a name
        // (no key reaches another's by guessing), a topic whose filter is
        // of a contract before watchlists, and a call's filter.
        for (method, params, says) in [
            (
                "eth_subscribe",
                json!(["bvMinedTransactions", {"toAddress": {"watchlist": "nobody"}}]),
                "unknown watchlist \"nobody\"",
            ),
            (
                "eth_subscribe",
                json!(["bvMinedTransactions", {"toAddress": {"watchlist": 1}}]),
                "a watchlist is named",
            ),
            (
                "eth_subscribe",
                json!(["newPendingTransactions", {"watchlist": "set"}]),
                "the newPendingTransactions filter (chainsieve:filter@0.2.0) takes no watchlists",
            ),
            (
                "eth_getLogs",
                json!([{"address": {"watchlist": "set"}}]),
                "not in a call's",
            ),
        ] {
            let refused = ws.call(method, params).await.expect("an answer");
            error(&refused, -32602, says);
        }
        server.stop().await;
    }
    matches_the_set_at_each_events_place(Case {
        control: json!(["bvMinedTransactions", {}]),
        watched: json!(["bvMinedTransactions", {"fromAddress": {"watchlist": "set"}}]),
        member: |tx| tx["from"].as_str().map(str::to_lowercase),
        fixed: Vec::new(),
    })
    .await;
}

/// ERC-20 `Transfer` logs by recipient (a watchlist at topic 2, matched
/// padded), of the tokens in a second watchlist (at `address`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_by_recipient_match_the_set_at_each_events_place() {
    const TRANSFER: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    let tokens: Vec<String> = chainsieve_ingest::devnet::known_tokens(1)
        .iter()
        .map(|token| chainsieve_tests::hex_address(&token.address))
        .collect();
    matches_the_set_at_each_events_place(Case {
        control: json!(["logs", {"address": tokens, "topics": [TRANSFER]}]),
        watched: json!(["logs", {
            "address": {"watchlist": "tokens"},
            "topics": [TRANSFER, null, {"watchlist": "set"}],
        }]),
        member: |log| {
            let topic = log["topics"][2].as_str()?;
            Some(format!("0x{}", &topic[26..]))
        },
        fixed: vec![("tokens", tokens)],
    })
    .await;
}
