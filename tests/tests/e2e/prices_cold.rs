//! `token_price` before the index began (docs/src/api.md, token_price):
//! real Uniswap V2 and V3 pools trade on anvil, then a server starts with
//! no backfill. The latest price and the price at a time before the
//! server started are read from the pools' state at that block, and equal
//! what the test computes from the same state itself; asked again, they
//! come from the store; the node-call limit and a node without old state
//! are refused with their codes.

use chainsieve_config::{Config, LogConfig, PriceConfig, Span};
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::dex::{Session, price_of, price_when};
use chainsieve_tests::uniswap::{Scene, expected, scene};
use chainsieve_tests::{TestServer, WsClient};
use serde_json::{Value, json};

const KEY: &str = "cold-price-test";

fn config(anvil: &Anvil, price: PriceConfig) -> Config {
    Config {
        // The index begins well after the trades.
        log: LogConfig {
            window: Span::Blocks(16),
            ..LogConfig::default()
        },
        price,
        ..anvil.config(KEY)
    }
}

async fn ask(client: &mut WsClient, scene: &Scene, timestamp: Option<u64>) -> Value {
    let mut params = json!({"token0": scene.beta, "token1": scene.alpha});
    if let Some(t) = timestamp {
        params["timestamp"] = json!(t);
    }
    client
        .call("token_price", json!([params]))
        .await
        .expect("answered")
}

/// The answer's BETA per ALPHA equals `expected` (to the 12 significant
/// digits the server gives, within rounding), from block `block` alone.
fn assert_priced(answer: &Value, expected: f64, block: u64) {
    let price: f64 = price_of(answer, "token0Price").parse().expect("a decimal");
    assert!(
        ((price - expected) / expected).abs() < 1e-9,
        "{price} against {expected}: {answer}"
    );
    assert_eq!(answer["result"]["blockNumbers"], json!([block]), "{answer}");
    assert_eq!(answer["result"]["token1Name"], "Alpha Token");
}

/// A client of `server`, and its first answer for the latest price once
/// the index has its first block (it follows the chain beside the
/// streams: blocks are mined until it answers).
async fn first_answer(server: &TestServer, anvil: &Anvil, scene: &Scene) -> (WsClient, Value) {
    server.wait_live("eth").await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let params = json!([{"token0": scene.beta, "token1": scene.alpha}]);
    let answer = price_when(&mut client, &heads, anvil, params, |answer| {
        answer["error"]["message"] != "no price data indexed on this chain yet on eth"
    })
    .await;
    (client, answer)
}

/// The scene on `chain`'s node, then a server reading it, a client and
/// its first answer for the latest price.
async fn started(chain: &Session<'_>) -> (Scene, TestServer, WsClient, Value) {
    let scene = scene(chain, 40).await;
    let server = TestServer::started(config(chain.anvil, PriceConfig::default())).await;
    let (client, now) = first_answer(&server, chain.anvil, &scene).await;
    (scene, server, client, now)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prices_from_the_pools_state_before_the_index_began() {
    let mut anvil = Anvil::start(1).await.expect("anvil");
    let chain = Session { anvil: &anvil };
    // Now: the pools' state at the index's newest block.
    let (scene, _server, mut client, now) = started(&chain).await;
    let tip = now["result"]["blockNumbers"][0]
        .as_u64()
        .unwrap_or_else(|| panic!("a block: {now}"));
    assert!(tip > scene.second + 30, "{now}");
    let at_tip = expected(&chain, &scene, tip).await;
    assert_priced(&now, at_tip, tip);

    // Before the server started, between the trades: the first prices.
    let (block, time) = scene.first;
    let then = ask(&mut client, &scene, Some(time + 500)).await;
    let at_first = expected(&chain, &scene, block).await;
    assert_priced(&then, at_first, block);
    assert!((at_first - at_tip).abs() > 100.0, "the prices moved");
    // In milliseconds, the same.
    let millis = ask(&mut client, &scene, Some((time + 500) * 1_000)).await;
    assert_eq!(millis["result"], then["result"]);
    // Before the chain's first block: out of range, the latest price.
    let first_second = ask(&mut client, &scene, Some(1)).await;
    assert_eq!(first_second["result"], now["result"], "{first_second}");

    // A request that needs more node calls than one may make, and more
    // than the chain's requests may make a second together.
    for (price, says) in [
        (
            PriceConfig {
                max_node_calls: 3,
                ..PriceConfig::default()
            },
            "[price] max_node_calls",
        ),
        (
            PriceConfig {
                node_calls_per_second: 5,
                ..PriceConfig::default()
            },
            "[price] node_calls_per_second",
        ),
    ] {
        let limited = TestServer::started(config(&anvil, price)).await;
        let (_, refused) = first_answer(&limited, &anvil, &scene).await;
        assert_eq!(refused["error"]["code"], -32005, "{refused}");
        let message = refused["error"]["message"].as_str().expect("a message");
        assert!(message.contains(says), "{message}");
    }

    // The node gone, the same questions are answered from the store; a
    // new one about the past cannot be.
    anvil.stop().await.expect("stop anvil");
    assert_eq!(
        ask(&mut client, &scene, None).await["result"],
        now["result"]
    );
    assert_eq!(
        ask(&mut client, &scene, Some(time + 500)).await["result"],
        then["result"]
    );
    let unanswered = ask(&mut client, &scene, Some(time - 5_000)).await;
    assert_eq!(unanswered["error"]["code"], -32002, "{unanswered}");
}

/// A node that keeps only its newest states (anvil `--prune-history 16`,
/// as a full node keeps 128) cannot price the past: -32001 naming that;
/// now still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_old_state_is_named() {
    let anvil = Anvil::start_with(1, 0, &["--prune-history", "16"])
        .await
        .expect("anvil");
    let chain = Session { anvil: &anvil };
    let (scene, _server, mut client, now) = started(&chain).await;
    assert!(now["result"]["token0Price"].is_string(), "{now}");
    let then = ask(&mut client, &scene, Some(scene.first.1 + 500)).await;
    assert_eq!(then["error"]["code"], -32001, "{then}");
    let message = then["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains(&format!("cannot read state at block {}", scene.first.0))
            && message.contains("archive"),
        "{message}: first {:?}, second {}",
        scene.first,
        scene.second
    );
}
