//! Subscriptions that wait for finality (docs/src/api.md, Finality), on a
//! real node: anvil's `safe` and `finalized` blocks are 32 and 64 below
//! its head. Across a reorg the plain subscriber sees removals; the one
//! waiting for `finalized` is told of the canonical blocks only, once
//! final, never of a removal, and resumes from its cursors like any other.

use chainsieve_tests::anvil::{Anvil, deploy_ping};
use chainsieve_tests::{TestServer, WsClient, quantity};
use serde_json::{Value, json};

const KEY: &str = "finality-test";

/// The `params` of the next notification of `subscription`, skipping
/// others.
async fn next_of(client: &mut WsClient, subscription: &str) -> Value {
    loop {
        let params = client.next_notification_params().await.expect("in time");
        if params["subscription"] == subscription {
            return params;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalized_subscribers_never_see_a_removal_and_resume_by_cursor() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::started(anvil.config(KEY)).await;
    server.wait_live("eth").await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let contract = deploy_ping(&mut client, &heads, &anvil).await;
    // Its block is delivered, so mined: the head asked now is it.
    let deployed = anvil.block_number().await.expect("head");

    // Refused on pending transactions, with the reason.
    let refused = client
        .call(
            "eth_subscribe",
            json!(["newPendingTransactions", { "finality": "safe" }]),
        )
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let mut plain = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let plain_logs = plain
        .subscribe(json!(["logs", { "address": contract }]))
        .await
        .expect("logs");
    let mut waiting = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let final_logs = waiting
        .subscribe(json!(["logs", { "address": contract }, { "finality": "finalized" }]))
        .await
        .expect("final logs");
    let mut receipts = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let final_receipts = receipts
        .subscribe(json!(["transactionReceipts", { "toAddress": [contract] }, { "finality": "finalized" }]))
        .await
        .expect("final receipts");

    // Six calls, a block each, all delivered; then the last three
    // replaced by a reorg.
    anvil.ping(&contract, 6).await;
    let top = deployed + 6;
    let mut seen = Vec::new();
    while seen.len() < 6 {
        seen.push(next_of(&mut plain, &plain_logs).await["result"].clone());
    }
    anvil.reorg(3).await.expect("reorg");
    while seen.len() < 9 {
        seen.push(next_of(&mut plain, &plain_logs).await["result"].clone());
    }
    let removed: Vec<bool> = seen.iter().map(|l| l["removed"] == true).collect();
    assert_eq!(
        removed,
        [false, false, false, false, false, false, true, true, true]
    );
    let canonical: Vec<&Value> = seen[..3].iter().collect();

    // Final once 64 blocks are on top.
    anvil.mine(64).await.expect("mine");
    let mut told = Vec::new();
    let mut cursors = Vec::new();
    for _ in 0..3 {
        let params = next_of(&mut waiting, &final_logs).await;
        cursors.push(params["cursor"].as_str().expect("a cursor").to_string());
        told.push(params["result"].clone());
    }
    let told_refs: Vec<&Value> = told.iter().collect();
    assert_eq!(told_refs, canonical, "the canonical logs, in order");
    assert!(told.iter().all(|l| l["removed"] == false));
    assert!(
        told.iter().all(|l| quantity(&l["blockNumber"]) + 3 <= top),
        "none of the replaced blocks"
    );
    // The receipts of the same calls, final too: the node's.
    for log in &told {
        let receipt = next_of(&mut receipts, &final_receipts).await["result"].clone();
        let node = anvil
            .rpc("eth_getTransactionReceipt", json!([log["transactionHash"]]))
            .await
            .expect("the node's receipt");
        assert_eq!(receipt, json!([node]));
    }

    // A resume from the first cursor, waiting for finality too, gets the
    // other two; a reorged block's log never comes.
    let mut again = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let resumed = again
        .subscribe(json!(["logs", { "address": contract }, { "finality": "finalized", "resumeFrom": cursors[0] }]))
        .await
        .expect("resumed");
    for expected in &told[1..] {
        assert_eq!(&next_of(&mut again, &resumed).await["result"], expected);
    }
    // And new calls come once final, to both.
    anvil.ping(&contract, 1).await;
    anvil.mine(64).await.expect("mine");
    let next = next_of(&mut waiting, &final_logs).await["result"].clone();
    assert_eq!(next["removed"], false);
    assert_eq!(next_of(&mut again, &resumed).await["result"], next);
}
