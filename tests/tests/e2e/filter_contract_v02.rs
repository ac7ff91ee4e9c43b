//! Contract 0.2 on a running server: a topic swaps between a 0.1 and a 0.2
//! component under a live subscription, every head once, in each
//! component's shape (the evil 0.2 one writes its own payloads); a 0.2
//! component that writes a bad payload is disabled like one that traps,
//! its subscribers told why; a subscription whose reach the host cannot
//! use is refused alone; and the 0.2 example serves decoded ERC-20
//! transfers from a filters directory next to the 0.1 example.

use chainsieve_tests::filters::{
    built, decoded_transfer, origin, place, test_filter, v0_1_build, wait_for_filters,
    wait_until_served, watching,
};
use chainsieve_tests::{TestServer, WsClient, hex_address};
use serde_json::{Value, json};

const EVIL: &str = "chainsieve_evil_filter_0_2.wasm";

/// Places the 0.2 evil `newHeads` in the server's filters directory and
/// waits until every chain serves it.
async fn swap_in_evil(dir: &std::path::Path, server: &TestServer) -> std::path::PathBuf {
    place(dir, "newHeads.wasm", &test_filter(EVIL));
    let file = dir.join("newHeads.wasm");
    wait_until_served(&server.state, "newHeads", &file)
        .await
        .expect("swapped in");
    file
}

/// A server whose `newHeads` is the evil 0.2 component (its filters
/// directory kept alive with it), and a client of its `eth` chain.
async fn serving_evil() -> (tempfile::TempDir, TestServer, WsClient) {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = TestServer::started(watching(dir.path())).await;
    swap_in_evil(dir.path(), &server).await;
    let ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    (dir, server, ws)
}

/// A head in the node's shape (the 0.1 build and the built-in send it), or
/// as the evil 0.2 component writes it.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    Node,
    Written,
}

fn shape(head: &Value) -> Shape {
    if head.get("contract") == Some(&json!("0.2")) {
        assert_eq!(head.as_object().map(|o| o.len()), Some(2), "{head}");
        Shape::Written
    } else {
        assert!(head["parentHash"].is_string(), "{head}");
        Shape::Node
    }
}

/// `newHeads` served by its 0.1 build, swapped for the 0.2 evil component
/// and then, the file removed, for the 0.2 built-in, under one live
/// subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_swaps_between_contract_versions_under_a_live_subscription() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = TestServer::started(watching(dir.path())).await;
    let (_, v0_1) = v0_1_build("newHeads");
    place(dir.path(), "newHeads.wasm", &v0_1);
    wait_until_served(&server.state, "newHeads", &dir.path().join("newHeads.wasm"))
        .await
        .expect("the 0.1 build serves");
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let subscription = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let mut seen: Vec<(u64, Shape)> = Vec::new();
    let next = async |ws: &mut WsClient| {
        let (id, head) = ws.next_notification().await.expect("a head");
        assert_eq!(id, subscription);
        (chainsieve_tests::quantity(&head["number"]), shape(&head))
    };
    seen.push(next(&mut ws).await);

    let file = swap_in_evil(dir.path(), &server).await;
    // Heads the 0.1 build sent before the swap may still be queued: read
    // until the 0.2 component's have come.
    loop {
        let head = next(&mut ws).await;
        let written = head.1 == Shape::Written;
        seen.push(head);
        if written && seen.iter().filter(|(_, s)| *s == Shape::Written).count() >= 2 {
            break;
        }
    }
    std::fs::remove_file(&file).expect("remove");
    wait_for_filters(&server.state, |state| {
        origin(state, "eth", "newHeads").is_some_and(|o| o.starts_with("built-in"))
    })
    .await
    .expect("fell back");
    loop {
        let head = next(&mut ws).await;
        let node = head.1 == Shape::Node;
        seen.push(head);
        if node
            && seen
                .last_chunk::<2>()
                .is_some_and(|[a, _]| a.1 == Shape::Node)
        {
            break;
        }
    }
    // Every head once, in order, across both swaps; node-shaped, then
    // written, then node-shaped again.
    assert!(seen.windows(2).all(|w| w[1].0 == w[0].0 + 1), "{seen:?}");
    let shapes: Vec<&Shape> = seen.iter().map(|(_, shape)| shape).collect();
    let changes = shapes.windows(2).filter(|w| w[0] != w[1]).count();
    assert_eq!(changes, 2, "{seen:?}");
}

/// Each way a 0.2 component can write a bad payload disables it (as many
/// bad answers in a row as a trapping one) and ends its subscriptions with
/// the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_written_payload_disables_the_component_with_the_reason() {
    for (write, reason) in [
        ("bad-json", "is not one JSON value"),
        (
            "huge",
            "over the limit of 65536 (filters.max_payload_bytes)",
        ),
        ("none", "wrote no payload for a match"),
    ] {
        let (_dir, _server, mut ws) = serving_evil().await;
        let subscription = ws
            .subscribe(json!(["newHeads", {"write": write}]))
            .await
            .expect("subscribe");
        let params = ws
            .next_notification_params()
            .await
            .unwrap_or_else(|e| panic!("{write}: no end: {e:#}"));
        assert_eq!(params["subscription"], json!(subscription));
        let error = &params["error"];
        assert_eq!(error["code"], json!(-32000), "{params}");
        let message = error["message"].as_str().expect("a message");
        assert!(
            message.contains("newHeads filter was disabled") && message.contains(reason),
            "{write}: {message}"
        );
    }
}

/// A subscription whose reach the host cannot use (the component claims
/// it takes every head, which the host serves itself only with a payload
/// kind, while it writes the payloads) is refused with -32603 and the
/// reason logged; the subscription already served keeps its heads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reach_the_host_cannot_use_refuses_that_subscription_only() {
    let (_dir, _server, mut ws) = serving_evil().await;
    let served = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let refused = ws
        .call(
            "eth_subscribe",
            json!(["newHeads", {"write": "claim-every"}]),
        )
        .await
        .expect("an answer");
    assert_eq!(refused["error"]["code"], json!(-32603), "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("newHeads filter failed")),
        "{refused}"
    );
    for _ in 0..2 {
        let (subscription, head) = ws.next_notification().await.expect("a head");
        assert_eq!(subscription, served);
        assert_eq!(shape(&head), Shape::Written);
    }
}

/// The 0.2 example beside the 0.1 one in a filters directory: each
/// transfer a client of `erc20TransfersDecoded` gets is a USDC transfer the
/// 0.1 `erc20Transfers` control saw, decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decoded_transfers_are_served_next_to_the_raw_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    for file in [
        "chainsieve_example_erc20_transfers.wasm",
        "chainsieve_example_erc20_transfers_decoded.wasm",
    ] {
        place(dir.path(), file, &built(file));
    }
    let server = TestServer::started(watching(dir.path())).await;
    let usdc = hex_address(&chainsieve_ingest::devnet::known_tokens(1)[0].address);
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    // The control first, so it has seen every block the decoded one has.
    let control = ws
        .subscribe(json!(["erc20Transfers", {"tokens": [usdc]}]))
        .await
        .expect("the 0.1 example");
    let decoded = ws
        .subscribe(json!(["erc20TransfersDecoded", {"tokens": [usdc]}]))
        .await
        .expect("the 0.2 example");
    let mut raw: Vec<Value> = Vec::new();
    let mut transfers: Vec<Value> = Vec::new();
    let block = |value: &Value| chainsieve_tests::quantity(&value["blockNumber"]);
    // Five decoded transfers, and the control past their last block.
    while transfers.len() < 5
        || raw
            .last()
            .is_none_or(|log| block(log) <= block(&transfers[transfers.len() - 1]))
    {
        let (id, value) = ws.next_notification().await.expect("a transfer");
        if id == control {
            raw.push(value);
        } else {
            assert_eq!(id, decoded);
            transfers.push(value);
        }
    }
    for transfer in &transfers {
        let log = raw
            .iter()
            .find(|log| {
                log["transactionHash"] == transfer["transactionHash"]
                    && log["logIndex"] == transfer["logIndex"]
            })
            .unwrap_or_else(|| panic!("the control saw {transfer}"));
        assert_eq!(transfer, &decoded_transfer(&usdc, log));
    }
}
