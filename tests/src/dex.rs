//! DEX fixtures on a real node: Solidity contracts (tests/contracts,
//! compiled by solc from npm) deployed on anvil, with the factories' code
//! placed at the real Uniswap factory addresses so the default allow-list
//! applies; trades at chosen block times, and `token_price` asked until it
//! gives the awaited answer.

use std::collections::BTreeMap;
use std::path::PathBuf;

use alloy_primitives::{Address, address};
use alloy_sol_types::{SolCall, SolConstructor, sol};
use serde_json::{Value, json};

use crate::WsClient;
use crate::anvil::{Anvil, DEV_ACCOUNT};

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

pub const UNISWAP_V2_FACTORY: Address = address!("0x5C69bEe701ef814a2B6a3EDD4B1652CB9cc5aA6f");
pub const UNISWAP_V3_FACTORY: Address = address!("0x1F98431c8aD98523631AE4a59f267346ea31F984");

/// The fixtures compiled by solc: name → (creation code, runtime code).
pub async fn compile() -> BTreeMap<String, (String, String)> {
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

pub fn hex(bytes: &[u8]) -> String {
    format!("0x{}", alloy_primitives::hex::encode(bytes))
}

/// A node session: sends transactions at chosen times and reads results.
pub struct Session<'a> {
    pub anvil: &'a Anvil,
}

impl Session<'_> {
    /// Sends `data` to `to` (or deploys it) in a block of its own at
    /// `timestamp`, if given; returns the receipt.
    pub async fn send(&self, to: Option<Address>, data: Vec<u8>, timestamp: Option<u64>) -> Value {
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

    pub async fn deploy(&self, code: &str, args: Vec<u8>) -> Address {
        let mut data = alloy_primitives::hex::decode(code).expect("hex code");
        data.extend(args);
        let receipt = self.send(None, data, None).await;
        receipt["contractAddress"]
            .as_str()
            .expect("contract address")
            .parse()
            .expect("address")
    }

    pub async fn call<C: SolCall>(&self, to: Address, call: C) -> C::Return {
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

    pub async fn block_of(&self, receipt: &Value) -> u64 {
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
pub async fn price_when(
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

pub fn price_of(answer: &Value, field: &str) -> String {
    answer["result"][field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {answer}"))
        .to_string()
}

/// Deployed fixtures: three tokens, both factories at Uniswap's
/// addresses, an ALPHA/BETA pair (announced by PairCreated), and a start
/// time `t0` safely after the node's latest block.
pub struct Fixture {
    pub alpha: Address,
    pub beta: Address,
    pub gamma: Address,
    pub pair: Address,
    pub alpha_first: bool,
    pub t0: u64,
}

impl Fixture {
    pub async fn deploy(chain: &Session<'_>, code: &BTreeMap<String, (String, String)>) -> Self {
        let anvil = chain.anvil;
        // Tokens: 18 and 6 decimals, and a bytes32-named one with 8.
        let token = async |name: &str, decimals: u8| {
            let args = TestToken::constructorCall {
                name_: name.into(),
                decimals_: decimals,
            };
            chain.deploy(&code["TestToken"].0, args.abi_encode()).await
        };
        let alpha = token("Alpha Token", 18).await;
        let beta = token("Beta Dollar", 6).await;
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
    pub fn reserves(&self, beta_per_alpha: u128) -> Vec<u8> {
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
