//! The resuming clients of `clients/js` (a viem transport, an ethers v6
//! provider) under an application, through a proxy that cuts its
//! connection again and again, sometimes in the middle of a frame
//! (`chainsieve_tests::cutter`), while anvil makes transactions and
//! reorganises: each of its handlers for `newHeads`, `logs` and
//! `bvMinedTransactions` receives exactly what a control subscription that
//! never disconnects receives, in order, removals included.

use std::collections::BTreeMap;

use chainsieve_tests::anvil::{Anvil, ping_client};
use chainsieve_tests::cutter::Cutter;
use chainsieve_tests::scripts::Conversation;
use chainsieve_tests::{TIMEOUT, TestServer, WsClient, quantity};
use serde_json::{Value, json};

const KEY: &str = "clients";
/// Connections cut while the chain moves.
const CUTS: u64 = 30;
/// Of them, at least this many cut a connection the client had made (the
/// rest may fall in its handshake, just after it reconnected).
const CUT_ESTABLISHED: u64 = 20;
/// Every how many cuts the node reorganises its last two blocks.
const REORG_EVERY: u64 = 6;

/// The three topics an application follows: (name, params after it).
fn topics(contract: &str) -> [(&'static str, Vec<Value>); 3] {
    [
        ("newHeads", vec![]),
        ("logs", vec![json!({ "address": contract })]),
        (
            "bvMinedTransactions",
            vec![json!({ "toAddress": [contract] })],
        ),
    ]
}

/// What the script's handler for `topic` records of `result`, the same way
/// (`tests/js/resuming_clients.mjs`): a head's hash (ethers' "block" event
/// gives its number only), a log's block, index and removal, a
/// transaction's hash, block and removal.
fn key(library: &str, topic: &str, result: &Value) -> Value {
    let text = |field: &str| result[field].as_str().unwrap_or_default().to_string();
    match topic {
        "newHeads" if library == "ethers" => json!(quantity(&result["number"])),
        "newHeads" => json!(text("hash")),
        "logs" => json!(format!(
            "{}/{}/{}",
            text("blockHash"),
            quantity(&result["logIndex"]),
            result["removed"] == true
        )),
        _ => json!(format!(
            "{}/{}/{}",
            text("hash"),
            text("blockHash"),
            result["removed"] == true
        )),
    }
}

async fn every_notification_reaches_the_application_once_across_cuts(library: &str) {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::live(anvil.config(KEY)).await;
    let (setup, _, contract) = ping_client(&server.ws_url("eth", KEY), &anvil).await;
    drop(setup);

    // The control: subscribed before the application, read throughout by
    // a task of its own; nothing happens on the chain until both are.
    let mut control = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let mut ids = BTreeMap::new();
    for (topic, params) in topics(&contract) {
        let mut call = vec![json!(topic)];
        call.extend(params);
        let id = control
            .subscribe(Value::Array(call))
            .await
            .expect("subscribe");
        ids.insert(id, topic);
    }
    let mut feed = control.forward_notifications();

    let cutter = Cutter::start(server.addr).await.expect("the cutter");
    let url = cutter.ws_url("eth", KEY);
    let mut application = Conversation::start("resuming_clients.mjs", &[library, &url, &contract]);
    assert_eq!(application.next().await, json!({"ready": true}));

    for cut in 1..=CUTS {
        anvil.ping(&contract, 1).await;
        if cut % REORG_EVERY == 0 {
            anvil.reorg(2).await.expect("a reorg");
        }
        let accepted = cutter.accepted();
        cutter.cut();
        cutter.until_accepted(accepted + 1).await;
    }
    anvil.ping(&contract, 1).await;
    let last = anvil.block_number().await.expect("the last block");
    let last_hash = anvil.block(last).await.expect("the last block")["hash"]
        .as_str()
        .expect("a hash")
        .to_string();

    let mut controlled: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut seen_last: BTreeMap<&str, bool> = BTreeMap::new();
    while seen_last.len() < 3 {
        let params = tokio::time::timeout(TIMEOUT, feed.recv())
            .await
            .expect("the control's notifications in time")
            .expect("the control's connection is open");
        let topic = ids[params["subscription"].as_str().expect("an id")];
        let result = &params["result"];
        // ethers v6 hands a filter's listener no removed log (see the
        // script): an ethers application never sees one, however it is
        // connected.
        let unseen = library == "ethers" && topic == "logs" && result["removed"] == true;
        if !unseen {
            controlled
                .entry(topic)
                .or_default()
                .push(key(library, topic, result));
        }
        let block = if topic == "newHeads" {
            &result["hash"]
        } else {
            &result["blockHash"]
        };
        if *block == json!(last_hash) {
            seen_last.insert(topic, true);
        }
    }

    application.say(&format!("{last_hash} {last}")).await;
    let report = application.report().await;
    assert_eq!(report["errors"], json!([]), "{report}");
    assert!(
        report["reconnections"].as_u64() >= Some(CUT_ESTABLISHED),
        "cuts of established connections: {report}"
    );
    assert!(
        cutter.cut_mid_frame() > 0,
        "some cuts fell in the middle of a frame"
    );
    let mut differ = Vec::new();
    for (topic, expected) in &controlled {
        let removed = expected
            .iter()
            .filter(|k| k.as_str().is_some_and(|k| k.ends_with("/true")))
            .count();
        if *topic == "bvMinedTransactions" || (*topic == "logs" && library == "viem") {
            assert!(
                removed > 0,
                "{topic}: the reorgs removed some: {expected:?}"
            );
        }
        let got = report[*topic].as_array().expect("recorded");
        if got != expected {
            let missing: Vec<&Value> = expected.iter().filter(|e| !got.contains(e)).collect();
            let extra: Vec<&Value> = got.iter().filter(|g| !expected.contains(g)).collect();
            differ.push(format!(
                "{topic}: got {} of {}, missing {missing:?}, extra {extra:?}",
                got.len(),
                expected.len()
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{library}'s handlers got what the control got: {differ:#?}"
    );
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viem_application_gets_every_notification_once_across_cuts() {
    every_notification_reaches_the_application_once_across_cuts("viem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ethers_application_gets_every_notification_once_across_cuts() {
    every_notification_reaches_the_application_once_across_cuts("ethers").await;
}

/// Every JavaScript example of the book's Clients chapter runs as pasted
/// (its URL pointed at a devnet server) and prints what it subscribed to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_books_javascript_examples_run_as_pasted() {
    let server = TestServer::default().await;
    let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/clients.md");
    let text = std::fs::read_to_string(&page).expect("the Clients chapter");
    let examples: Vec<&str> = text
        .split("```js\n")
        .skip(1)
        .map(|rest| rest.split("```").next().expect("a closed block"))
        .collect();
    assert_eq!(examples.len(), 2, "the viem and the ethers example");
    for example in examples {
        let code = example.replace(
            "ws://127.0.0.1:8080/eth/v1/demo",
            &server.ws_url("eth", "demo"),
        );
        // Beside tests/js/node_modules, where the package is installed.
        let file = tempfile::Builder::new()
            .prefix(".book-example-")
            .suffix(".mjs")
            .tempfile_in(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("js"))
            .expect("a script file");
        std::fs::write(file.path(), code).expect("written");
        let mut running = Conversation::start_file(file.path(), &[]);
        let printed = running.next_text().await;
        assert!(!printed.trim().is_empty(), "{example}");
    }
}
