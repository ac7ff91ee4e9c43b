//! `token_price` on a real node: Solidity fixtures (tests/contracts,
//! compiled by solc from npm) deployed on anvil, with the factories' code
//! placed at the real Uniswap factory addresses so the default allow-list
//! applies. Trades happen at chosen block times; answers are checked
//! before, between and after them, in both token orders, against a
//! spoofed pool, and across a reorg that undoes a trade.

use std::collections::BTreeMap;
use std::path::PathBuf;

use alloy_primitives::{Address, U256, address};
use alloy_sol_types::{SolCall, SolConstructor, sol};
use chainsieve::config::{AuthConfig, ChainConfig, Config, PriceConfig, SourceConfig};
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT};
use chainsieve_tests::{TestServer, WsClient};
use serde_json::{Value, json};

sol! {
    contract TestToken { constructor(string name_, uint8 decimals_); }
    contract Bytes32Token { constructor(bytes32 name_, uint8 decimals_); }
    contract TestPair {
        constructor(address factory_, address token0_, address token1_);
        function sync(uint112 reserve0, uint112 reserve1) external;
        function token0() external view returns (address);
    }
    contract TestV2Factory {
        function createPair(address tokenA, address tokenB) external returns (address pair);
        function getPair(address tokenA, address tokenB) external view returns (address);
    }
    contract TestV3Pool {
        function swapTo(uint160 sqrtPriceX96, uint128 liquidity) external;
        function token0() external view returns (address);
    }
    contract TestV3Factory {
        function createPool(address tokenA, address tokenB, uint24 fee) external returns (address pool);
        function getPool(address tokenA, address tokenB, uint24 fee) external view returns (address);
    }
}

const KEY: &str = "price-test";
const UNISWAP_V2_FACTORY: Address = address!("0x5C69bEe701ef814a2B6a3EDD4B1652CB9cc5aA6f");
const UNISWAP_V3_FACTORY: Address = address!("0x1F98431c8aD98523631AE4a59f267346ea31F984");

/// The fixtures compiled by solc: name → (creation code, runtime code).
async fn compile() -> BTreeMap<String, (String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new("node")
        .arg(root.join("js/compile.mjs"))
        .arg(root.join("contracts/PriceFixtures.sol"))
        .output()
        .await
        .expect("node runs solc");
    assert!(
        output.status.success(),
        "solc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let all: BTreeMap<String, Value> = serde_json::from_slice(&output.stdout).expect("JSON");
    all.into_iter()
        .map(|(name, c)| {
            let text = |k: &str| c[k].as_str().expect("code").to_string();
            (name, (text("bytecode"), text("runtime")))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    format!("0x{}", alloy_primitives::hex::encode(bytes))
}

/// A node session: sends transactions at chosen times and reads results.
struct Chain<'a> {
    anvil: &'a Anvil,
}

impl Chain<'_> {
    /// Sends `data` to `to` (or deploys it) in a block of its own at
    /// `timestamp`, if given; returns the receipt.
    async fn send(&self, to: Option<Address>, data: Vec<u8>, timestamp: Option<u64>) -> Value {
        if let Some(t) = timestamp {
            self.anvil
                .rpc("evm_setNextBlockTimestamp", json!([t]))
                .await
                .expect("set time");
        }
        let mut tx = json!({ "from": DEV_ACCOUNT, "data": hex(&data), "gas": "0x1000000" });
        if let Some(to) = to {
            tx["to"] = json!(to);
        }
        let hash = self.anvil.send(tx).await.expect("send");
        // Automine: the block exists once the call returns; mine if not.
        loop {
            let receipt = self
                .anvil
                .rpc("eth_getTransactionReceipt", json!([hash]))
                .await
                .expect("receipt");
            if !receipt.is_null() {
                assert_eq!(receipt["status"], "0x1", "{receipt}");
                return receipt;
            }
            self.anvil.mine(1).await.expect("mine");
        }
    }

    async fn deploy(&self, code: &str, args: Vec<u8>) -> Address {
        let mut data = alloy_primitives::hex::decode(code).expect("hex code");
        data.extend(args);
        let receipt = self.send(None, data, None).await;
        receipt["contractAddress"]
            .as_str()
            .expect("contract address")
            .parse()
            .expect("address")
    }

    async fn call<C: SolCall>(&self, to: Address, call: C) -> C::Return {
        let raw = self
            .anvil
            .rpc(
                "eth_call",
                json!([{ "to": to, "data": hex(&call.abi_encode()) }, "latest"]),
            )
            .await
            .expect("eth_call");
        let bytes = alloy_primitives::hex::decode(raw.as_str().expect("hex")).expect("hex");
        C::abi_decode_returns(&bytes).expect("decode")
    }

    async fn block_of(&self, receipt: &Value) -> u64 {
        u64::from_str_radix(
            receipt["blockNumber"]
                .as_str()
                .expect("number")
                .trim_start_matches("0x"),
            16,
        )
        .expect("hex")
    }
}

/// Asks `token_price` until `accept` takes the answer. The index follows
/// the stream beside the subscriptions, so between tries one more (empty)
/// block is mined and its head awaited: the index has then moved on.
async fn price_when(
    client: &mut WsClient,
    heads: &str,
    anvil: &Anvil,
    params: Value,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..50 {
        let answer = client
            .call("token_price", params.clone())
            .await
            .expect("token_price");
        if accept(&answer) {
            return answer;
        }
        anvil.mine(1).await.expect("mine");
        loop {
            let (sub, _) = client.next_notification().await.unwrap_or_else(|e| {
                panic!("no head while waiting for a token_price answer; last: {answer}: {e}")
            });
            if sub == heads {
                break;
            }
        }
    }
    panic!("token_price never gave the awaited answer for {params}");
}

fn price_of(answer: &Value, field: &str) -> String {
    answer["result"][field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {answer}"))
        .to_string()
}

/// Deployed fixtures: three tokens, both factories at Uniswap's
/// addresses, an ALPHA/BETA pair (announced by PairCreated), and a start
/// time `t0` safely after the node's latest block.
struct Fixture {
    alpha: Address,
    beta: Address,
    gamma: Address,
    pair: Address,
    alpha_first: bool,
    t0: u64,
}

impl Fixture {
    async fn deploy(chain: &Chain<'_>, code: &BTreeMap<String, (String, String)>) -> Self {
        let anvil = chain.anvil;
        // Tokens: 18 and 6 decimals, and a bytes32-named one with 8.
        let alpha = chain
            .deploy(
                &code["TestToken"].0,
                TestToken::constructorCall {
                    name_: "Alpha Token".into(),
                    decimals_: 18,
                }
                .abi_encode(),
            )
            .await;
        let beta = chain
            .deploy(
                &code["TestToken"].0,
                TestToken::constructorCall {
                    name_: "Beta Dollar".into(),
                    decimals_: 6,
                }
                .abi_encode(),
            )
            .await;
        let mut gamma_name = [0u8; 32];
        gamma_name[..5].copy_from_slice(b"Gamma");
        let gamma = chain
            .deploy(
                &code["Bytes32Token"].0,
                Bytes32Token::constructorCall {
                    name_: gamma_name.into(),
                    decimals_: 8,
                }
                .abi_encode(),
            )
            .await;
        // The factories, at Uniswap's addresses.
        for (factory, name) in [
            (UNISWAP_V2_FACTORY, "TestV2Factory"),
            (UNISWAP_V3_FACTORY, "TestV3Factory"),
        ] {
            anvil
                .rpc("anvil_setCode", json!([factory, code[name].1]))
                .await
                .expect("setCode");
        }
        // An ALPHA/BETA pair, announced by PairCreated.
        chain
            .send(
                Some(UNISWAP_V2_FACTORY),
                TestV2Factory::createPairCall {
                    tokenA: alpha,
                    tokenB: beta,
                }
                .abi_encode(),
                None,
            )
            .await;
        let pair = chain
            .call(
                UNISWAP_V2_FACTORY,
                TestV2Factory::getPairCall {
                    tokenA: alpha,
                    tokenB: beta,
                },
            )
            .await;
        let alpha_first = chain.call(pair, TestPair::token0Call {}).await == alpha;
        let latest = anvil
            .rpc("eth_getBlockByNumber", json!(["latest", false]))
            .await
            .expect("latest");
        let t0 = u64::from_str_radix(
            latest["timestamp"]
                .as_str()
                .expect("time")
                .trim_start_matches("0x"),
            16,
        )
        .expect("hex")
            + 1_000;

        Fixture {
            alpha,
            beta,
            gamma,
            pair,
            alpha_first,
            t0,
        }
    }

    /// A `sync` call setting reserves for `beta_per_alpha` BETA per ALPHA
    /// (10 ALPHA deep), in the pair's token order.
    fn reserves(&self, beta_per_alpha: u128) -> Vec<u8> {
        let (r_alpha, r_beta) = (10 * 10u128.pow(18), 10 * beta_per_alpha * 10u128.pow(6));
        let (r0, r1) = if self.alpha_first {
            (r_alpha, r_beta)
        } else {
            (r_beta, r_alpha)
        };
        TestPair::syncCall {
            reserve0: alloy_primitives::Uint::from(r0),
            reserve1: alloy_primitives::Uint::from(r1),
        }
        .abi_encode()
    }
}

/// A server config reading `anvil` as Ethereum, keeping price history in
/// `data_dir`, backfilling from `from_block` if given.
fn node_config(anvil: &Anvil, data_dir: &std::path::Path, from_block: Option<u64>) -> Config {
    Config {
        chains: BTreeMap::from([(
            "eth".to_string(),
            ChainConfig {
                chain_id: Some(1),
                source: SourceConfig::Node(anvil.ws_url()),
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
    let server = TestServer::start(config.clone()).await.expect("server");
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let chain = Chain { anvil: &anvil };

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
    // Before the first trade: the latest price.
    let before = client
        .call("token_price", ask(Some(t0 + 50), beta, alpha))
        .await
        .expect("price");
    assert_eq!(price_of(&before, "token0Price"), "2500", "{before}");

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
    let server = TestServer::start(config).await.expect("server again");
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
    let chain = Chain { anvil: &anvil };
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
    let server = TestServer::start(node_config(&anvil, data_dir.path(), Some(0)))
        .await
        .expect("server");
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
