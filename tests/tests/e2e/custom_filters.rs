//! A component dropped into the filters directory adds an `eth_subscribe`
//! type: the example `erc20Transfers` filter, built by the host's build
//! into `target/filters`, served by a real server next to the built-ins.

use alloy_primitives::U256;
use chainsieve_filters::registry::BUILT_FILTERS_DIR;
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
    let server = TestServer::started(config).await;
    let token = chainsieve_ingest::devnet::known_tokens(1)[0].address;
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

    // USDC transfers of at least 1, 100, 1,000 and 10,000 USDC (6
    // decimals), the first in hex: the devnet's amounts fall on both sides
    // of some of them.
    let thresholds: [(&str, u64); 4] = [
        ("0xf4240", 1_000_000),
        ("100000000", 100_000_000),
        ("1000000000", 1_000_000_000),
        ("10000000000", 10_000_000_000),
    ];
    let mut custom = Vec::new();
    for (given, units) in thresholds {
        let id = ws
            .subscribe(
                json!(["erc20Transfers", {"tokens": [hex_address(&token)], "minAmount": given}]),
            )
            .await
            .expect("the new topic is served");
        custom.push((id, U256::from(units)));
    }
    // Same topic, so the control's events reach all in one order.
    let control = ws
        .subscribe(json!(["erc20Transfers"]))
        .await
        .expect("subscribe");
    let all = ws.collect_until(&control, 60).await.expect("logs");
    for (_, log) in all.iter().filter(|(s, _)| *s == control) {
        assert_eq!(
            log["topics"][0],
            json!(TRANSFER_TOPIC),
            "only ERC-20 transfers: {log}"
        );
    }
    // Every USDC transfer of at least the threshold the control saw, in
    // order; and some threshold that let one through and held one back.
    let key = |log: &Value| format!("{}:{}", log["blockHash"], log["logIndex"]);
    let usdc = hex_address(&token);
    let amount = |log: &Value| -> U256 {
        log["data"]
            .as_str()
            .expect("data")
            .parse()
            .expect("a uint256")
    };
    let usdc_transfers = all
        .iter()
        .filter(|(s, log)| *s == control && log["address"].as_str() == Some(usdc.as_str()))
        .count();
    let mut splits = 0;
    for (id, min) in &custom {
        let at_least =
            |log: &Value| log["address"].as_str() == Some(usdc.as_str()) && amount(log) >= *min;
        let passed = assert_exact_filter(&all, id, &control, key, at_least);
        if passed > 0 && passed < usdc_transfers {
            splits += 1;
        }
    }
    assert!(
        splits > 0,
        "no threshold split the {usdc_transfers} USDC transfers the control saw"
    );
}
