//! `token_price` on a real node: the DEX fixtures (`chainsieve_tests::dex`)
//! deployed on anvil. Trades happen at chosen block times; answers are checked
//! before, between and after them, in both token orders, against a
//! spoofed pool, and across a reorg that undoes a trade.

use std::collections::BTreeMap;

use alloy_primitives::{Address, U256};
use alloy_sol_types::{SolCall, SolConstructor};
use chainsieve_config::{AuthConfig, ChainConfig, Config, PriceConfig, SourceConfig};
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::dex::{
    Fixture, Session, TestPair, TestV3Factory, TestV3Pool, UNISWAP_V2_FACTORY, UNISWAP_V3_FACTORY,
    compile, price_of, price_when,
};
use chainsieve_tests::{TestServer, WsClient};
use serde_json::json;

const KEY: &str = "price-test";

/// A server config reading `anvil` as Ethereum, keeping price history in
/// `data_dir`, backfilling from `from_block` if given.
fn node_config(anvil: &Anvil, data_dir: &std::path::Path, from_block: Option<u64>) -> Config {
    Config {
        chains: BTreeMap::from([(
            "eth".to_string(),
            ChainConfig {
                chain_id: Some(1),
                source: SourceConfig::node(anvil.ws_url()),
                price_from_block: from_block,
                ..Default::default()
            },
        )]),
        auth: AuthConfig {
            keys: vec![KEY.to_string()],
            ..Default::default()
        },
        price: PriceConfig {
            data_dir: Some(data_dir.to_path_buf()),
            ..PriceConfig::default()
        },
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prices_from_real_pools_by_time_with_spoofing_and_reorgs() {
    let code = compile().await;
    let anvil = Anvil::start(1).await.expect("anvil");
    let data_dir = tempfile::tempdir().expect("data dir");
    let config = node_config(&anvil, data_dir.path(), Some(0));
    let server = TestServer::started(config.clone()).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let chain = Session { anvil: &anvil };

    let fixture = Fixture::deploy(&chain, &code).await;
    let (alpha, beta, gamma, pair, t0) = (
        fixture.alpha,
        fixture.beta,
        fixture.gamma,
        fixture.pair,
        fixture.t0,
    );
    let trade1 = chain
        .send(Some(pair), fixture.reserves(2_000), Some(t0 + 100))
        .await;
    let trade2 = chain
        .send(Some(pair), fixture.reserves(2_500), Some(t0 + 200))
        .await;
    let (block1, block2) = (chain.block_of(&trade1).await, chain.block_of(&trade2).await);

    // A spoofed pair: claims Uniswap's factory, which never made it.
    let spoof = chain
        .deploy(
            &code["TestPair"].0,
            TestPair::constructorCall {
                factory_: UNISWAP_V2_FACTORY,
                token0_: alpha.min(beta),
                token1_: alpha.max(beta),
            }
            .abi_encode(),
        )
        .await;
    // 1 ALPHA = 1 BETA, with more liquidity than the real pair: it would
    // dominate the weighted price if it counted.
    let spoofed = if alpha < beta {
        (1_000 * 10u128.pow(18), 1_000 * 10u128.pow(6))
    } else {
        (1_000 * 10u128.pow(6), 1_000 * 10u128.pow(18))
    };
    chain
        .send(
            Some(spoof),
            TestPair::syncCall {
                reserve0: alloy_primitives::Uint::from(spoofed.0),
                reserve1: alloy_primitives::Uint::from(spoofed.1),
            }
            .abi_encode(),
            Some(t0 + 250),
        )
        .await;

    // A V3 pool the factory made but did not announce: met by its Swap.
    chain
        .send(
            Some(UNISWAP_V3_FACTORY),
            TestV3Factory::createPoolCall {
                tokenA: alpha,
                tokenB: gamma,
                fee: alloy_primitives::Uint::from(3_000),
            }
            .abi_encode(),
            None,
        )
        .await;
    let v3 = chain
        .call(
            UNISWAP_V3_FACTORY,
            TestV3Factory::getPoolCall {
                tokenA: alpha,
                tokenB: gamma,
                fee: alloy_primitives::Uint::from(3_000),
            },
        )
        .await;
    // sqrtPriceX96 = 2^97: 4 raw token1 per raw token0.
    let sqrt_price = U256::from(1) << 97;
    chain
        .send(
            Some(v3),
            TestV3Pool::swapToCall {
                sqrtPriceX96: alloy_primitives::Uint::from(sqrt_price),
                liquidity: 1_000_000,
            }
            .abi_encode(),
            Some(t0 + 300),
        )
        .await;
    let v3_alpha_first = chain.call(v3, TestV3Pool::token0Call {}).await == alpha;

    let ask = |timestamp: Option<u64>, token0: Address, token1: Address| {
        let mut params = json!({ "token0": token0, "token1": token1 });
        if let Some(t) = timestamp {
            params["timestamp"] = json!(t);
        }
        params
    };
    // Wait until the index has the last block (the V3 Swap), so the
    // spoofed Sync before it has been seen too.
    let v3_answer = price_when(&mut client, &heads, &anvil, ask(None, gamma, alpha), |a| {
        a.get("result").is_some()
    })
    .await;
    let latest = client
        .call("token_price", ask(None, beta, alpha))
        .await
        .expect("price");
    assert_eq!(
        price_of(&latest, "token0Price"),
        "2500",
        "the spoofed pool sets no price: {latest}"
    );

    // Between the trades, and after them, in both orders and in ms.
    let between = client
        .call("token_price", ask(Some(t0 + 150), beta, alpha))
        .await
        .expect("price");
    assert_eq!(price_of(&between, "token0Price"), "2000", "{between}");
    assert_eq!(price_of(&between, "token1Price"), "0.0005");
    assert_eq!(between["result"]["blockNumbers"], json!([block1]));
    assert_eq!(between["result"]["timestamp"], json!(t0 + 100));
    assert_eq!(between["result"]["token0Name"], "Beta Dollar");
    assert_eq!(between["result"]["token1Name"], "Alpha Token");
    let flipped = client
        .call("token_price", ask(Some((t0 + 150) * 1_000), alpha, beta))
        .await
        .expect("price");
    assert_eq!(price_of(&flipped, "token0Price"), "0.0005", "{flipped}");
    assert_eq!(price_of(&flipped, "token1Price"), "2000");
    let after = client
        .call("token_price", ask(Some(t0 + 250), beta, alpha))
        .await
        .expect("price");
    assert_eq!(price_of(&after, "token0Price"), "2500");
    assert_eq!(after["result"]["blockNumbers"], json!([block2]));
    // Before the first trade the pair had no reserves, and before the
    // chain's first block nothing was: out of range, so the latest price,
    // its timestamp saying which time it is from (the nodes are asked at
    // the early block first).
    let latest = client
        .call("token_price", ask(None, beta, alpha))
        .await
        .expect("price");
    assert_eq!(
        latest["result"]["blockNumbers"],
        json!([block2]),
        "{latest}"
    );
    for early in [t0 + 50, 1, 1_000] {
        let before = client
            .call("token_price", ask(Some(early), beta, alpha))
            .await
            .expect("price");
        assert_eq!(before["result"], latest["result"], "at {early}: {before}");
    }

    // The V3 pool, found through its Swap; GAMMA's name is a bytes32.
    // 4 raw token1 per raw token0. ALPHA first: 1 ALPHA (10^18) buys
    // 4·10^18 raw GAMMA = 4·10^10 GAMMA. GAMMA first: 1 GAMMA (10^8) buys
    // 4·10^8 raw ALPHA, so one ALPHA costs 2.5·10^9 GAMMA.
    let gamma_per_alpha = if v3_alpha_first {
        "40000000000"
    } else {
        "2500000000"
    };
    assert_eq!(
        price_of(&v3_answer, "token0Price"),
        gamma_per_alpha,
        "{v3_answer}"
    );
    assert_eq!(v3_answer["result"]["token0Name"], "Gamma");

    // A trade, then a reorg that undoes it: the answer comes back.
    let trade3 = chain
        .send(Some(pair), fixture.reserves(3_000), Some(t0 + 500))
        .await;
    let block3 = chain.block_of(&trade3).await;
    price_when(&mut client, &heads, &anvil, ask(None, beta, alpha), |a| {
        a["result"]["token0Price"] == "3000"
    })
    .await;
    // Replace every block from the trade's up (waiting mined empty ones).
    let head = anvil.block_number().await.expect("head");
    anvil.reorg(head - block3 + 1).await.expect("reorg");
    anvil.mine(1).await.expect("mine");
    let undone = price_when(&mut client, &heads, &anvil, ask(None, beta, alpha), |a| {
        a["result"]["token0Price"] == "2500"
    })
    .await;
    assert_eq!(undone["result"]["blockNumbers"], json!([block2]));

    // Bad input on a node chain too.
    let same = client
        .call("token_price", ask(None, alpha, alpha))
        .await
        .expect("answer");
    assert_eq!(same["error"]["code"], -32602);
    let unknown = client
        .call("token_price", ask(None, beta, gamma))
        .await
        .expect("answer");
    assert_eq!(unknown["error"]["code"], -32001, "{unknown}");

    // A restart: the history survives in the data directory, and a trade
    // made while the server was down (not the node's head by the time it
    // is back) is indexed from where the index stopped.
    drop(client);
    server.stop().await;
    chain
        .send(Some(pair), fixture.reserves(3_500), Some(t0 + 10_000))
        .await;
    anvil.mine(3).await.expect("mine");
    let server = TestServer::started(config).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let kept = client
        .call("token_price", ask(Some(t0 + 150), beta, alpha))
        .await
        .expect("price");
    assert_eq!(price_of(&kept, "token0Price"), "2000", "{kept}");
    price_when(&mut client, &heads, &anvil, ask(None, beta, alpha), |a| {
        a["result"]["token0Price"] == "3500"
    })
    .await;
}

/// History from before the server ever ran: with `price_from_block`, the
/// pool's creation and trades are fetched by `eth_getLogs` and answer for
/// their times (the live index alone starts at the node's head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_backfilled_from_a_configured_block() {
    let code = compile().await;
    let anvil = Anvil::start(1).await.expect("anvil");
    let chain = Session { anvil: &anvil };
    let fixture = Fixture::deploy(&chain, &code).await;
    let t0 = fixture.t0;
    let trade = chain
        .send(Some(fixture.pair), fixture.reserves(2_000), Some(t0 + 100))
        .await;
    chain
        .send(Some(fixture.pair), fixture.reserves(2_500), Some(t0 + 200))
        .await;
    anvil.mine(5).await.expect("mine");

    let data_dir = tempfile::tempdir().expect("data dir");
    let server = TestServer::started(node_config(&anvil, data_dir.path(), Some(0))).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let params = json!({ "timestamp": t0 + 150, "token0": fixture.beta, "token1": fixture.alpha });
    let answer = price_when(&mut client, &heads, &anvil, params, |a| {
        a["result"]["token0Price"] == "2000"
    })
    .await;
    assert_eq!(
        answer["result"]["blockNumbers"],
        json!([chain.block_of(&trade).await])
    );
    assert_eq!(answer["result"]["token1Name"], "Alpha Token");
}
