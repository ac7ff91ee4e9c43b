//! `token_price` end to end on the devnet: its DEX swaps feed the same
//! indexer a node's blocks do, and the answers match the pools' reserves.

use alloy_sol_types::SolEvent;
use chainsieve_contracts::abi::IUniswapV2Pair;
use chainsieve_ingest::devnet::{known_pools, known_tokens};
use chainsieve_tests::{TIMEOUT, TestServer, WsClient, quantity};
use serde_json::{Value, json};

fn hex_u128(word: &str) -> u128 {
    u128::from_str_radix(word.trim_start_matches('0'), 16).unwrap_or(0)
}

/// Asks `token_price` after every new head until it answers with a result
/// `ready` takes (the indexer runs beside the streams, so a `Sync` log may
/// arrive before its block is indexed); gives up after [`TIMEOUT`].
async fn price_after_heads(
    client: &mut WsClient,
    heads: &str,
    params: Value,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let asking = async {
        loop {
            let answer = client
                .call("token_price", params.clone())
                .await
                .expect("token_price");
            match answer.get("result") {
                Some(result) if ready(result) => return result.clone(),
                Some(_) => {}
                None => assert_eq!(answer["error"]["code"], -32001, "{answer}"),
            }
            loop {
                let (sub, _) = client.next_notification().await.expect("a head");
                if sub == heads {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(TIMEOUT, asking)
        .await
        .expect("token_price answered as expected in time")
}

/// The block numbers a `token_price` result used.
fn blocks_of(answer: &Value) -> Vec<u64> {
    answer["blockNumbers"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| b.as_u64().expect("number"))
        .collect()
}

/// Whether `answer` prices from the pool's state at `block` alone; fails on
/// a state from after it (an earlier one means `block` is not indexed yet).
fn priced_at(answer: &Value, block: u64) -> bool {
    let blocks = blocks_of(answer);
    assert!(blocks.iter().all(|&b| b <= block), "{answer}");
    blocks == [block]
}

/// The WETH/USDC pair's `Sync` reserves at a block, and `token_price` at
/// that block's time, agree in both token orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devnet_prices_follow_the_pool_reserves() {
    let server = TestServer::default().await;
    let tokens = known_tokens(1);
    let usdc = tokens.iter().find(|t| t.symbol == "USDC").expect("USDC");
    let weth = tokens.iter().find(|t| t.symbol == "WETH").expect("WETH");
    let pool = known_pools(1)
        .into_iter()
        .find(|p| {
            (p.token0, p.token1) == (usdc.address, weth.address)
                || (p.token0, p.token1) == (weth.address, usdc.address)
        })
        .expect("a WETH/USDC pool");
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let syncs = client
        .subscribe(json!(["logs", { "address": pool.address, "topics": [IUniswapV2Pair::Sync::SIGNATURE_HASH] }]))
        .await
        .expect("logs");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    // The second of the first block with a Sync of the pair, and the last
    // Sync of that second (blocks share a second at sub-second cadences,
    // and a block may swap in the pool more than once; a price at a time
    // is the last state of that time): known once a Sync of a later
    // second arrives, as one subscription's logs come in order.
    let mut second: Option<u64> = None;
    let mut syncs_of_second: Vec<Value> = Vec::new();
    loop {
        let (sub, result) = client.next_notification().await.expect("notification");
        if sub != syncs {
            continue;
        }
        let time = quantity(&result["blockTimestamp"]);
        if time > *second.get_or_insert(time) {
            break;
        }
        syncs_of_second.push(result);
    }
    let timestamp = second.expect("a second");
    let sync = syncs_of_second.last().expect("a Sync");
    let data = sync["data"].as_str().expect("data");
    let (reserve0, reserve1) = (hex_u128(&data[2..66]), hex_u128(&data[66..130]));
    let number = quantity(&sync["blockNumber"]);
    let block = sync["blockNumber"].as_str().expect("number").to_string();
    let header = client
        .call("eth_getBlockByNumber", json!([block, false]))
        .await
        .expect("block");
    assert_eq!(
        quantity(&header["result"]["timestamp"]),
        timestamp,
        "the log's blockTimestamp is its block's"
    );
    let (r_usdc, r_weth) = if pool.token0 == usdc.address {
        (reserve0, reserve1)
    } else {
        (reserve1, reserve0)
    };
    // USDC for one WETH, from the reserves (a float cross-check of the
    // server's exact arithmetic).
    let expected = (r_usdc as f64 / 1e6) / (r_weth as f64 / 1e18);

    let answer = price_after_heads(
        &mut client,
        &heads,
        json!({ "timestamp": timestamp, "token0": usdc.address, "token1": weth.address }),
        |answer| priced_at(answer, number),
    )
    .await;
    let usdc_per_weth: f64 = answer["token0Price"]
        .as_str()
        .expect("price")
        .parse()
        .expect("decimal");
    assert!(
        ((usdc_per_weth - expected) / expected).abs() < 1e-12,
        "{answer} vs {expected}"
    );
    assert_eq!(answer["token0Name"], "USD Coin");
    assert_eq!(answer["token1Name"], "Wrapped Ether");
    assert_eq!(answer["timestamp"].as_u64(), Some(timestamp), "{answer}");

    // The other order, and milliseconds: the reciprocal.
    let flipped = price_after_heads(
        &mut client,
        &heads,
        json!({ "timestamp": timestamp * 1_000, "token0": weth.address, "token1": usdc.address }),
        |answer| priced_at(answer, number),
    )
    .await;
    assert_eq!(flipped["token1Price"], answer["token0Price"]);
    assert_eq!(flipped["token0Price"], answer["token1Price"]);
    assert_eq!(flipped["token0"], json!(weth.address));
}

/// The devnet generates its past at startup, so a price at an earlier time
/// is answered from the blocks of that time right away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devnet_history_answers_past_timestamps() {
    let mut config = chainsieve_tests::test_config();
    config.devnet.history_blocks = 60;
    config.devnet.transactions_per_block = 30;
    let genesis = config.devnet.genesis_timestamp.expect("fixed genesis");
    let block_ms = config.devnet.block_time_ms.expect("the test devnet's pace");
    // Whole seconds from genesis to block `n` (a header counts seconds).
    let offset = |n: u64| n * block_ms / 1_000;
    let server = TestServer::started(config).await;
    let tokens = known_tokens(1);
    let usdc = tokens.iter().find(|t| t.symbol == "USDC").expect("USDC");
    let weth = tokens.iter().find(|t| t.symbol == "WETH").expect("WETH");
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    // Block 30's time. The server is ready once its past is indexed, so
    // the first call answers from it: no waiting for live blocks.
    let past = genesis + offset(30);
    let answered = client
        .call(
            "token_price",
            json!({ "timestamp": past, "token0": usdc.address, "token1": weth.address }),
        )
        .await
        .expect("token_price");
    let answer = answered["result"].clone();
    assert!(answer.is_object(), "answered from the history: {answered}");
    let blocks = blocks_of(&answer);
    assert!(!blocks.is_empty(), "{answer}");
    assert!(
        blocks
            .iter()
            .all(|&b| genesis + offset(b) <= past && b < 60),
        "states of that time, from the history: {answer}"
    );
    assert!(answer["timestamp"].as_u64().expect("time") <= past);
}
