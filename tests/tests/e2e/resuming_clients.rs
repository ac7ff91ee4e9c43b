//! The resuming clients (`clients/js`: a viem transport, an ethers v6
//! provider; `clients/py`: a web3.py provider; `clients/rust`: an alloy
//! connector) under an application, through a proxy that cuts its
//! connection again and again, sometimes in the middle of a frame
//! (`chainsieve_tests::cutter`), while anvil makes transactions and
//! reorganises: each of its handlers for `newHeads`, `logs` and
//! `bvMinedTransactions` receives exactly what a control subscription that
//! never disconnects receives, in order, removals included. The same
//! application on the unmodified libraries (`tests/js/plain_clients.mjs`,
//! `chainsieve_tests::applications`) loses what came while it was cut off: the figure of the book's Clients
//! chapter.

use chainsieve_config::{Config, LogConfig, Span};
use chainsieve_tests::anvil::{Anvil, ping_client};
use chainsieve_tests::control::{Control, application, compare, newest, topics};
use chainsieve_tests::cutter::Cutter;
use chainsieve_tests::scripts::Conversation;
use chainsieve_tests::{TestServer, WsClient, quantity, test_config};
use serde_json::json;

const KEY: &str = "clients";
/// Connections cut while the chain moves.
const CUTS: u64 = 30;
/// Of them, at least this many cut a connection the client had made (the
/// rest may fall in its handshake, just after it reconnected).
const CUT_ESTABLISHED: u64 = 20;
/// Every how many cuts the node reorganises its last two blocks.
const REORG_EVERY: u64 = 6;

/// How the application's library comes back after a cut.
#[derive(Clone, Copy, PartialEq)]
enum Comeback {
    /// It reconnects and resumes (the packages): a block is mined as soon
    /// as it has reconnected, while it subscribes again, and the next cut
    /// follows at once.
    Resumes,
    /// It reconnects and subscribes again from "now" (viem): a block is
    /// mined once the server has its subscriptions again, and the next cut
    /// waits until the block reached its handlers, so what it loses is
    /// only what came while it was cut off.
    SubscribesAgain,
    /// It stays disconnected (ethers v6).
    Never,
}

/// The scenario both the resuming and the plain clients go through: the
/// application (`script`, on `library`) connected through the cutter, the
/// control directly; `CUTS` times a block is mined, the connection cut,
/// and while the application is held off, one more block is mined (and
/// every `REORG_EVERY`th time the last two are reorganised) and sent by
/// the server; then the application is let back in. Answers the control
/// (read up to the last block mined), the cutter, the application and the
/// last block ("<hash> <number>").
async fn cut_again_and_again(
    anvil: &Anvil,
    server: &TestServer,
    script: &str,
    library: &str,
    comeback: Comeback,
) -> (Control, Cutter, Conversation, String) {
    let (setup, _, contract) = ping_client(&server.ws_url("eth", KEY), anvil).await;
    drop(setup);
    let mut control = Control::subscribe(&server.ws_url("eth", KEY), &contract).await;
    let cutter = Cutter::start(server.addr).await.expect("the cutter");
    let url = cutter.ws_url("eth", KEY);
    let mut application = Conversation::start(script, &[library, &url, &contract]);
    assert_eq!(application.next().await, json!({"ready": true}));

    let mut last = String::new();
    for cut in 0..=CUTS {
        anvil.ping(&contract, 1).await;
        let (number, hash) = newest(anvil).await;
        last = format!("{hash} {number}");
        control.until_block(&hash, 3).await;
        if comeback == Comeback::SubscribesAgain {
            application.say(&format!("wait {last}")).await;
            assert_eq!(application.next().await, json!({"have": true}));
        }
        if cut == CUTS {
            break;
        }
        let accepted = cutter.accepted();
        let held = cutter.hold();
        cutter.cut();
        anvil.ping(&contract, 1).await;
        let reorganised = cut % REORG_EVERY == REORG_EVERY - 1;
        if reorganised {
            anvil.reorg(2).await.expect("a reorg");
        }
        // An empty block after a reorg: its head only.
        let topics = if reorganised { 1 } else { 3 };
        control.until_block(&newest(anvil).await.1, topics).await;
        if comeback == Comeback::SubscribesAgain {
            // Its old subscriptions gone: only the control's are left.
            subscriptions(server, &contract, 1.0).await;
        }
        drop(held);
        if comeback != Comeback::Never {
            cutter.until_accepted(accepted + 1).await;
        }
        if comeback == Comeback::SubscribesAgain {
            subscriptions(server, &contract, 2.0).await;
        }
    }
    (control, cutter, application, last)
}

/// Waits until the server counts `count` subscriptions of each topic.
async fn subscriptions(server: &TestServer, contract: &str, count: f64) {
    for (topic, _) in topics(contract) {
        let series = format!(r#"chainsieve_subscriptions{{chain="eth",topic="{topic}"}}"#);
        server.until_metric(&series, count).await;
    }
}

/// The application (`script`, on `library`) through the cuts.
async fn every_notification_reaches_the_application_once_across_cuts(library: &str, script: &str) {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::live(anvil.config(KEY)).await;
    let (control, cutter, mut application, last) =
        cut_again_and_again(&anvil, &server, script, library, Comeback::Resumes).await;
    application.say(&format!("report {last}")).await;
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
    for (topic, keys) in control.assert_same(library, &report) {
        let removed = keys
            .iter()
            .filter(|k| k.as_str().is_some_and(|k| k.ends_with("/true")))
            .count();
        if topic == "bvMinedTransactions" || (topic == "logs" && library == "viem") {
            assert!(removed > 0, "{topic}: the reorgs removed some: {keys:?}");
        }
    }
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viem_application_gets_every_notification_once_across_cuts() {
    let script = application("viem", "resuming_clients");
    every_notification_reaches_the_application_once_across_cuts("viem", &script).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ethers_application_gets_every_notification_once_across_cuts() {
    let script = application("ethers", "resuming_clients");
    every_notification_reaches_the_application_once_across_cuts("ethers", &script).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web3py_application_gets_every_notification_once_across_cuts() {
    let script = application("python", "resuming_clients");
    every_notification_reaches_the_application_once_across_cuts("python", &script).await;
}

/// The JavaScript package in a browser: the same application in a page of
/// headless Chromium (`tests/js/browser_clients.mjs`), on the browser's
/// own WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viem_application_in_chromium_gets_every_notification_once_across_cuts() {
    every_notification_reaches_the_application_once_across_cuts("viem", "browser_clients.mjs")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ethers_application_in_chromium_gets_every_notification_once_across_cuts() {
    every_notification_reaches_the_application_once_across_cuts("ethers", "browser_clients.mjs")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alloy_application_gets_every_notification_once_across_cuts() {
    let script = application("alloy", "resuming_clients");
    every_notification_reaches_the_application_once_across_cuts("alloy", &script).await;
}

/// The same scenario on the unmodified library loses what came while it
/// was cut off: viem and alloy subscribe again from "now", ethers v6 not
/// at all. Prints the figure the book's Clients chapter states.
async fn the_plain_library_loses_what_came_while_cut_off(library: &str) {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::live(anvil.config(KEY)).await;
    let comeback = if library == "ethers" {
        Comeback::Never
    } else {
        Comeback::SubscribesAgain
    };
    let script = application(library, "plain_clients");
    let (control, _cutter, mut application, _) =
        cut_again_and_again(&anvil, &server, &script, library, comeback).await;
    application.say("report").await;
    let report = application.report().await;
    assert_eq!(
        report["closed"],
        json!(comeback == Comeback::Never),
        "{report}"
    );
    let expected = control.keys(library);
    let compared = compare(&expected, &report);
    let mut figures = Vec::new();
    for (topic, (missing, extra)) in &compared {
        let total = expected[topic].len();
        assert!(
            !missing.is_empty(),
            "{library} (unmodified) lost some {topic} notifications"
        );
        assert_eq!(*extra, 0, "{topic}: nothing the control did not get");
        figures.push(format!("{topic} {} of {total}", missing.len()));
    }
    eprintln!(
        "unmodified {library} over {CUTS} cuts lost: {}",
        figures.join(", ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmodified_viem_loses_what_came_while_cut_off() {
    the_plain_library_loses_what_came_while_cut_off("viem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmodified_alloy_loses_what_came_while_cut_off() {
    the_plain_library_loses_what_came_while_cut_off("alloy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmodified_ethers_loses_everything_after_the_first_cut() {
    the_plain_library_loses_what_came_while_cut_off("ethers").await;
}

/// Every example of the book's Clients chapter (JavaScript, Python, Rust)
/// runs as pasted (its URL pointed at a devnet server) and prints what it
/// subscribed to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_books_client_examples_run_as_pasted() {
    let server = TestServer::default().await;
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text =
        std::fs::read_to_string(tests.join("../docs/src/clients.md")).expect("the Clients chapter");
    // (fence, file suffix, where the packages are installed)
    for (language, suffix, dir, count) in [("js", ".mjs", "js", 2), ("python", ".py", "py", 1)] {
        let examples: Vec<&str> = text
            .split(&format!("```{language}\n"))
            .skip(1)
            .map(|rest| rest.split("```").next().expect("a closed block"))
            .collect();
        assert_eq!(examples.len(), count, "the {language} examples");
        for example in examples {
            let code = example.replace(
                "ws://127.0.0.1:8080/eth/v1/demo",
                &server.ws_url("eth", "demo"),
            );
            let file = tempfile::Builder::new()
                .prefix(".book-example-")
                .suffix(suffix)
                .tempfile_in(tests.join(dir))
                .expect("a script file");
            std::fs::write(file.path(), code).expect("written");
            let mut running = Conversation::start_file(file.path(), &[]);
            let printed = running.next_text().await;
            assert!(!printed.trim().is_empty(), "{example}");
        }
    }
    // The Rust example is clients/rust/examples/follow.rs, which the
    // workspace's build compiles; run with the server's URL.
    let examples: Vec<&str> = text
        .split("```rust\n")
        .skip(1)
        .map(|rest| rest.split("```").next().expect("a closed block"))
        .collect();
    let source = tests.join("../clients/rust/examples/follow.rs");
    let file = std::fs::read_to_string(&source).expect("the Rust example");
    assert_eq!(
        examples,
        [file.as_str()],
        "the book shows examples/follow.rs"
    );
    let built = std::env::current_exe()
        .expect("this test's path")
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples/follow"))
        .expect("the target directory");
    assert!(
        built.exists(),
        "{} is built by `cargo test --workspace` (the README's test command); \
         alone: cargo build -p chainsieve-client --example follow",
        built.display()
    );
    let mut running = Conversation::start_program(&built, &[&server.ws_url("eth", "demo")]);
    let printed = running.next_text().await;
    assert!(
        printed.starts_with("block ") || printed.starts_with("transaction "),
        "{printed}"
    );
}

/// A resume the server refuses reaches the application's error handler as
/// the package's `ResumeRefusedError` (code, message, subscription,
/// cursor), never as a silent start from now: the application is kept off
/// until its pending-transaction cursor has left the log's window. That
/// subscription stops (`onRefused: "stop"`); its heads go on.
async fn a_refused_resume_reaches_the_application(library: &str) {
    const WINDOW: u64 = 4;
    let config = Config {
        log: LogConfig {
            window: Span::Blocks(WINDOW),
            ..LogConfig::default()
        },
        ..test_config()
    };
    let server = TestServer::started(config).await;
    let mut watcher = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let heads = watcher.subscribe(json!(["newHeads"])).await.expect("heads");
    let cutter = Cutter::start(server.addr).await.expect("the cutter");
    let url = cutter.ws_url("eth", "demo");
    let mut application =
        Conversation::start(&application(library, "refused_resume"), &[library, &url]);
    assert_eq!(application.next().await, json!({"pending": true}));

    let held = cutter.hold();
    cutter.cut();
    let now = watcher
        .call("eth_blockNumber", json!([]))
        .await
        .expect("the newest block");
    watcher
        .until_head(&heads, quantity(&now["result"]) + WINDOW + 2)
        .await;
    drop(held);

    let report = application.report().await;
    assert_eq!(
        report["refusals"].as_array().map(Vec::len),
        Some(1),
        "the pending subscription's only: {report}"
    );
    let refusal = &report["refusals"][0];
    assert_eq!(refusal["name"], "ResumeRefusedError", "{report}");
    assert_eq!(refusal["code"], -32001, "{report}");
    assert!(
        refusal["cursor"]
            .as_str()
            .is_some_and(|c| c.starts_with("eth:")),
        "{report}"
    );
    assert!(refusal["subscription"].is_string(), "{report}");
    let message = refusal["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("(-32001)") && message.contains("window"),
        "{report}"
    );
    assert_eq!(report["subscriptions"], 1, "the heads go on: {report}");
    assert!(report["headsAfter"].as_u64() >= Some(2), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resume_reaches_a_viem_application_as_an_error() {
    a_refused_resume_reaches_the_application("viem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resume_reaches_an_ethers_application_as_an_error() {
    a_refused_resume_reaches_the_application("ethers").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resume_reaches_a_web3py_application_as_an_error() {
    a_refused_resume_reaches_the_application("python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resume_reaches_an_alloy_application_as_an_error() {
    a_refused_resume_reaches_the_application("alloy").await;
}
