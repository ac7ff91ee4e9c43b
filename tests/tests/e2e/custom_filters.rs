//! A component dropped into the filters directory adds an `eth_subscribe`
//! type: the example `erc20Transfers` filter, built by the host's build
//! into `target/filters`, served by a real server next to the built-ins.

use chainsieve::filters::registry::BUILT_FILTERS_DIR;
use chainsieve_tests::filters::watching;
use chainsieve_tests::{TestServer, WsClient, assert_exact_filter, hex_address};
use serde_json::{Value, json};

const TRANSFER_TOPIC: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_topic_from_the_filters_directory_is_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = "chainsieve_example_erc20_transfers.wasm";
    std::fs::copy(
        std::path::Path::new(BUILT_FILTERS_DIR).join(file),
        dir.path().join(file),
    )
    .expect("copy the example");
    let config = watching(dir.path());
    let server = TestServer::start(config).await.expect("server");
    let token = chainsieve::ingest::devnet::known_tokens(1)[0].address;
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");

    let refused = ws
        .call(
            "eth_subscribe",
            json!(["erc20Transfers", {"minAmount": "-1"}]),
        )
        .await
        .expect("call");
    assert_eq!(refused["error"]["code"], json!(-32602));
    assert!(
        refused["error"]["message"]
            .as_str()
            .expect("message")
            .contains("minAmount must be"),
        "{refused}"
    );

    let custom = ws
        .subscribe(json!(["erc20Transfers", {"tokens": [hex_address(&token)], "minAmount": "0x1"}]))
        .await
        .expect("the new topic is served");
    // Same topic, so the control's events reach both in one order.
    let control = ws
        .subscribe(json!(["erc20Transfers"]))
        .await
        .expect("subscribe");
    let all = ws.collect_until(&control, 30).await.expect("logs");
    for (_, log) in all.iter().filter(|(s, _)| *s == control) {
        assert_eq!(
            log["topics"][0],
            json!(TRANSFER_TOPIC),
            "only ERC-20 transfers: {log}"
        );
    }
    // Every USDC transfer of at least 1 unit the control saw, in order.
    let key = |log: &Value| format!("{}:{}", log["blockHash"], log["logIndex"]);
    let usdc = hex_address(&token);
    let usdc_of_at_least_one = |log: &Value| {
        log["address"].as_str() == Some(usdc.as_str())
            && log["data"]
                .as_str()
                .is_some_and(|d| d.trim_start_matches("0x").bytes().any(|b| b != b'0'))
    };
    assert!(assert_exact_filter(&all, &custom, &control, key, usdc_of_at_least_one) > 0);
}
