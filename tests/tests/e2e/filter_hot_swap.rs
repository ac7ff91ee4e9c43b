//! Hot swap: components added to, changed in or removed from the filters
//! directory of a running server take effect without a restart, and a live
//! subscription sees every event exactly once across a swap.

use std::collections::BTreeSet;

use chainsieve_tests::filters::{
    evil_filter, origin, place, wait_for_filters, wait_until_served, watching,
};
use chainsieve_tests::{TestServer, WsClient};
use serde_json::{Value, json};

fn number(head: &Value) -> u64 {
    chainsieve_tests::quantity(&head["number"])
}

/// A server watching a fresh filters directory (removed when dropped).
async fn server_watching() -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = watching(dir.path());
    (dir, TestServer::started(config).await)
}

/// A client with a live `newHeads` subscription on eth, its id, and the
/// first `count` heads.
async fn live_heads(server: &TestServer, count: usize) -> (WsClient, String, Vec<u64>) {
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let subscription = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let seen = heads(&mut ws, &subscription, count).await;
    (ws, subscription, seen)
}

/// Reads `count` heads of `subscription` (the only one on `ws`).
async fn heads(ws: &mut WsClient, subscription: &str, count: usize) -> Vec<u64> {
    let mut numbers = Vec::new();
    while numbers.len() < count {
        let (id, head) = ws.next_notification().await.expect("a head");
        assert_eq!(id, subscription);
        numbers.push(number(&head));
    }
    numbers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_under_a_live_stream_delivers_every_event_exactly_once() {
    let (dir, server) = server_watching().await;
    let (mut ws, subscription, mut seen) = live_heads(&server, 3).await;

    // A newHeads that passes even blocks only replaces the built-in...
    let file = dir.path().join("newHeads.wasm");
    place(
        dir.path(),
        "newHeads.wasm",
        &evil_filter(&json!({"topic": "newHeads", "source": "heads", "only_even": true})),
    );
    wait_until_served(&server.state, "newHeads", &file)
        .await
        .expect("swapped in");
    // Heads the built-in passed before the swap may still be queued on the
    // socket: read until the even-only component has visibly served, an
    // even head right after the one two below it (the odd block between
    // dropped), before taking it away again.
    tokio::time::timeout(chainsieve_tests::TIMEOUT, async {
        loop {
            let next = heads(&mut ws, &subscription, 1).await[0];
            let served = seen.last().is_some_and(|&last| next == last + 2);
            seen.push(next);
            if served {
                break;
            }
        }
    })
    .await
    .expect("the even-only component served a block in time");

    // ...and removing it falls back to the built-in, again live.
    std::fs::remove_file(&file).expect("remove");
    wait_for_filters(&server.state, |state| {
        origin(state, "eth", "newHeads").is_some_and(|o| o.starts_with("built-in"))
    })
    .await
    .expect("fell back");
    let mut odd_after_fallback = 0;
    while odd_after_fallback < 2 {
        let next = heads(&mut ws, &subscription, 1).await;
        if next[0] % 2 == 1 {
            odd_after_fallback += 1;
        }
        seen.extend_from_slice(&next);
    }

    // Exactly once: increasing, no duplicate; the blocks missing are odd
    // blocks of one contiguous stretch (the even-only component's turn),
    // and every block outside it arrived.
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let first = seen[0];
    let last = *seen.last().expect("heads");
    let got: BTreeSet<u64> = seen.iter().copied().collect();
    let missing: Vec<u64> = (first..=last).filter(|n| !got.contains(n)).collect();
    assert!(!missing.is_empty(), "the even-only component never served");
    assert!(missing.iter().all(|n| n % 2 == 1), "{seen:?}");
    let (from, to) = (missing[0], *missing.last().expect("some"));
    assert!(
        (from..=to).all(|n| n % 2 == 0 || !got.contains(&n)),
        "one stretch of even-only delivery: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_replacement_is_refused_and_the_old_filter_keeps_serving() {
    let (dir, server) = server_watching().await;
    let (mut ws, subscription, mut seen) = live_heads(&server, 2).await;

    // One replacement refuses the live subscription; another is not a
    // component at all.
    place(
        dir.path(),
        "a_refusing.wasm",
        &evil_filter(&json!({"topic": "newHeads", "source": "heads", "refuse": true})),
    );
    place(dir.path(), "b_broken.wasm", b"\0asm but not really");
    wait_for_filters(&server.state, |state| {
        let report = state.filter_reloads.borrow();
        report.rejected.iter().any(|r| {
            r.file.ends_with("a_refusing.wasm")
                && r.reason.contains("on chain eth")
                && r.reason
                    .contains(&format!("refuses live subscription {subscription}"))
        }) && report
            .rejected
            .iter()
            .any(|r| r.file.ends_with("b_broken.wasm") && r.reason.contains("compiling"))
    })
    .await
    .expect("both refused");
    assert!(origin(&server.state, "eth", "newHeads").is_some_and(|o| o.starts_with("built-in")));
    // Chains without a live subscription take the refusing component: it
    // refuses only what it is asked.
    assert!(
        origin(&server.state, "bsc", "newHeads").is_some_and(|o| o.ends_with("a_refusing.wasm"))
    );
    seen.extend(heads(&mut ws, &subscription, 3).await);
    assert!(seen.windows(2).all(|w| w[1] == w[0] + 1), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_topic_appears_and_removing_it_ends_its_subscriptions() {
    let (dir, server) = server_watching().await;
    let mut ws = WsClient::connect(&server.ws_url("polygon", "demo"))
        .await
        .expect("connect");
    let unknown = ws
        .call("eth_subscribe", json!(["blocksOfNote"]))
        .await
        .expect("call");
    assert_eq!(unknown["error"]["code"], json!(-32602), "{unknown}");

    place(
        dir.path(),
        "blocks.wasm",
        &evil_filter(&json!({"topic": "blocksOfNote", "source": "heads"})),
    );
    wait_for_filters(&server.state, |state| {
        state
            .chains
            .values()
            .all(|chain| chain.filter("blocksOfNote").is_some())
    })
    .await
    .expect("added");
    let subscription = ws
        .subscribe(json!(["blocksOfNote"]))
        .await
        .expect("the new topic is served");
    let numbers = heads(&mut ws, &subscription, 2).await;
    assert_eq!(numbers[1], numbers[0] + 1);

    std::fs::remove_file(dir.path().join("blocks.wasm")).expect("remove");
    // Heads may still arrive until the end notice; nothing after it.
    let ended = loop {
        let params = ws.next_notification_params().await.expect("notification");
        assert_eq!(params["subscription"], json!(subscription));
        if params.get("error").is_some() {
            break params;
        }
    };
    assert_eq!(ended["error"]["code"], json!(-32000), "{ended}");
    assert!(
        ended["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("blocksOfNote filter was removed")),
        "{ended}"
    );
    let gone = ws
        .call("eth_subscribe", json!(["blocksOfNote"]))
        .await
        .expect("call");
    assert_eq!(gone["error"]["code"], json!(-32602), "{gone}");
    // The connection lives on, and nothing more arrives for the ended id.
    let heads_id = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let (id, _) = ws.next_notification().await.expect("a head");
    assert_eq!(id, heads_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_view_lists_what_every_chain_runs_behind_a_token() {
    const TOKEN: &str = "test-admin-token-0123456789";
    let dir = tempfile::tempdir().expect("temp dir");
    let example = chainsieve_tests::filters::built("chainsieve_example_erc20_transfers.wasm");
    place(dir.path(), "erc20.wasm", &example);
    let mut config = watching(dir.path());
    config.auth.admin_token = Some(TOKEN.into());
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    ws.subscribe(json!(["erc20Transfers"]))
        .await
        .expect("subscribe");
    place(dir.path(), "zz_broken.wasm", b"not wasm");
    wait_for_filters(&server.state, |state| {
        !state.filter_reloads.borrow().rejected.is_empty()
    })
    .await
    .expect("scanned");

    let url = format!("http://{}/admin/filters", server.addr);
    let client = reqwest::Client::new();
    let status = |request: reqwest::RequestBuilder| async move {
        request.send().await.expect("request").status().as_u16()
    };
    assert_eq!(status(client.get(&url)).await, 401);
    assert_eq!(status(client.get(&url).bearer_auth("wrong")).await, 401);
    let view: Value = client
        .get(&url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    let filters = view["filters"].as_array().expect("filters");
    assert_eq!(filters.len(), 3 * 8, "eight topics on three chains: {view}");
    let erc20: Vec<&Value> = filters
        .iter()
        .filter(|f| f["topic"] == json!("erc20Transfers"))
        .collect();
    assert_eq!(erc20.len(), 3);
    let hash = alloy_primitives::keccak256(&example).to_string();
    for entry in &erc20 {
        assert_eq!(entry["source"], json!("logs"));
        assert_eq!(entry["version"], json!("0.1.0"));
        assert_eq!(entry["hash"], json!(hash));
        assert!(
            entry["origin"]
                .as_str()
                .is_some_and(|o| o.ends_with("erc20.wasm"))
        );
        assert_eq!(entry["failures"], json!(0));
        assert_eq!(entry["disabled"], Value::Null);
        assert!(
            entry["loadedAt"]
                .as_u64()
                .is_some_and(|t| t > 1_700_000_000)
        );
        let expected = if entry["chain"] == json!("eth") { 1 } else { 0 };
        assert_eq!(entry["subscriptions"], json!(expected), "{entry}");
    }
    let rejected = view["rejected"].as_array().expect("rejected");
    assert!(
        rejected.iter().any(|r| r["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("zz_broken.wasm"))
            && r["reason"]
                .as_str()
                .is_some_and(|m| m.contains("compiling"))),
        "{view}"
    );

    // Without a configured token the endpoint does not exist.
    let plain = TestServer::started(chainsieve_tests::test_config()).await;
    let url = format!("http://{}/admin/filters", plain.addr);
    assert_eq!(status(client.get(&url).bearer_auth(TOKEN)).await, 404);
}
