//! The resuming clients (`clients/js`, `clients/py`, `clients/rust`) under
//! an application whose server is killed (`kill -9`) as soon as the
//! application has a block, and started again on its data directory (on
//! another port: the cutter sends the application's next connection
//! there): each of its handlers for
//! `newHeads`, `logs` and `bvMinedTransactions` receives exactly what a
//! control on a server that never stops receives, in order, removals
//! included. A kill can lose steps the server had sent but not yet
//! written; the restarted server reads their blocks from the node again
//! and resumes the application's cursors by their block
//! (docs/src/clients.md, How it is tested).

use std::path::Path;

use chainsieve_tests::anvil::{Anvil, ping_client};
use chainsieve_tests::control::{Control, application, newest};
use chainsieve_tests::cutter::Cutter;
use chainsieve_tests::process::{ServerProcess, anvil_config};
use chainsieve_tests::scripts::Conversation;
use chainsieve_tests::{TIMEOUT, TestServer, WsClient};
use serde_json::json;

const KEY: &str = "clients";
/// Times the application's server is killed and started again.
const KILLS: u64 = 6;

/// The killed server's config: `anvil`'s chain, its log on disk in
/// `data_dir`.
fn config(anvil: &Anvil, data_dir: &Path) -> String {
    let top = format!(r#"data_dir = "{}""#, data_dir.display());
    anvil_config(anvil, KEY, &top, "")
}

/// The server started on `config`, once its chain is ready and its log
/// holds a block: a subscription made before that would get the chain's
/// newest block as new, one the control (on a server that had it long
/// before) never got.
async fn start(config: &str) -> ServerProcess {
    let mut server = ServerProcess::start(Path::new(env!("CARGO_BIN_EXE_chainsieve")), config)
        .await
        .expect("the server starts");
    server
        .logged("chain ready")
        .await
        .expect("its chain is ready");
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let logged = async {
        while client
            .call("chainsieve_headCursor", json!([]))
            .await
            .expect("an answer")["result"]
            .is_null()
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(TIMEOUT, logged)
        .await
        .expect("its log holds a block in time");
    server
}

/// `KILLS` times: a block is mined (every other time after a reorg of
/// the last two), the application gets it, the server is killed at once;
/// while it is down one more block is mined and reaches the control; the
/// server starts again on its data directory, the application is let back
/// in and gets that block too.
async fn every_notification_reaches_the_application_once_across_kills(library: &str) {
    let anvil = Anvil::start(1).await.expect("anvil");
    let steady = TestServer::live(anvil.config(KEY)).await;
    let (setup, _, contract) = ping_client(&steady.ws_url("eth", KEY), &anvil).await;
    drop(setup);
    let mut control = Control::subscribe(&steady.ws_url("eth", KEY), &contract).await;
    let data_dir = tempfile::tempdir().expect("a data directory");
    let config = config(&anvil, data_dir.path());
    let mut server = start(&config).await;
    let cutter = Cutter::start(server.addr).await.expect("the cutter");
    let url = cutter.ws_url("eth", KEY);
    let mut application = Conversation::start(
        &application(library, "resuming_clients"),
        &[library, &url, &contract],
    );
    assert_eq!(application.next().await, json!({"ready": true}));

    for kill in 0..=KILLS {
        if kill % 2 == 1 {
            anvil.reorg(2).await.expect("a reorg");
        }
        anvil.ping(&contract, 1).await;
        let (number, hash) = newest(&anvil).await;
        let last = format!("{hash} {number}");
        control.until_block(&hash, 3).await;
        if kill == KILLS {
            application.say(&format!("report {last}")).await;
            break;
        }
        application.say(&format!("wait {last}")).await;
        assert_eq!(application.next().await, json!({"have": true}));
        // Held until the server is back, so the application's next
        // connection reaches the new one.
        let accepted = cutter.accepted();
        let held = cutter.hold();
        server.kill().await.expect("kill -9");
        anvil.ping(&contract, 1).await;
        let (number, hash) = newest(&anvil).await;
        control.until_block(&hash, 3).await;
        server = start(&config).await;
        cutter.redirect(server.addr);
        drop(held);
        cutter.until_accepted(accepted + 1).await;
        // The block mined while it was down reaches the application before
        // the next reorg can replace it (one the node replaced before the
        // restarted server read it, that server never serves: the control
        // would have its removal, the application neither it nor that).
        application.say(&format!("wait {hash} {number}")).await;
        assert_eq!(application.next().await, json!({"have": true}));
    }
    let report = application.report().await;
    assert_eq!(report["errors"], json!([]), "{report}");
    assert!(
        report["reconnections"].as_u64() >= Some(KILLS),
        "a reconnection per kill: {report}"
    );
    control.assert_same(library, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viem_application_gets_every_notification_once_across_kills() {
    every_notification_reaches_the_application_once_across_kills("viem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ethers_application_gets_every_notification_once_across_kills() {
    every_notification_reaches_the_application_once_across_kills("ethers").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web3py_application_gets_every_notification_once_across_kills() {
    every_notification_reaches_the_application_once_across_kills("python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alloy_application_gets_every_notification_once_across_kills() {
    every_notification_reaches_the_application_once_across_kills("alloy").await;
}
