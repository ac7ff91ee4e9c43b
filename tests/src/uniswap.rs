//! The real Uniswap V2 and V3 contracts on anvil: the build artifacts of
//! the npm packages `@uniswap/v2-core` and `@uniswap/v3-core` (in
//! `tests/js`), their factories' code placed at the mainnet factory
//! addresses so the server's default allow-list applies, and pools traded
//! as on mainnet: a V2 pair by transfer and `sync()`, a V3 pool by `mint`
//! and `swap` through a callback contract (`V3Trader` of the fixtures).

use std::collections::BTreeMap;
use std::path::PathBuf;

use alloy_primitives::{Address, U256, aliases::I24};
use alloy_sol_types::{SolCall, SolConstructor, sol};
use serde_json::{Value, json};

use crate::anvil::DEV_ACCOUNT;
use crate::dex::{Session, TestToken, UNISWAP_V2_FACTORY, UNISWAP_V3_FACTORY, compile, hex};
use crate::quantity;

sol! {
    interface RealV2Factory {
        function createPair(address tokenA, address tokenB) external returns (address pair);
        function getPair(address tokenA, address tokenB) external view returns (address);
    }
    interface RealV2Pair {
        function sync() external;
        function getReserves() external view returns (uint112 reserve0, uint112 reserve1, uint32 blockTimestampLast);
    }
    interface RealV3Factory {
        function owner() external view returns (address);
        function enableFeeAmount(uint24 fee, int24 tickSpacing) external;
        function createPool(address tokenA, address tokenB, uint24 fee) external returns (address pool);
    }
    interface RealV3Pool {
        function initialize(uint160 sqrtPriceX96) external;
        function slot0() external view returns (uint160 sqrtPriceX96, int24 tick, uint16 observationIndex, uint16 observationCardinality, uint16 observationCardinalityNext, uint8 feeProtocol, bool unlocked);
        function liquidity() external view returns (uint128);
    }
    interface Trader {
        function mint(address pool, int24 tickLower, int24 tickUpper, uint128 amount) external;
        function swap(address pool, bool zeroForOne, int256 amountSpecified, uint160 sqrtPriceLimitX96) external;
    }
    interface Erc20 {
        function transfer(address to, uint256 value) external returns (bool);
    }
}

/// The fee tier of the V3 pools made here, and its tick spacing.
pub const FEE: u32 = 3_000;
const TICK_SPACING: i32 = 60;

/// The widest range a position of that spacing may span.
const FULL_RANGE: i32 = 887_220;

/// A build artifact's creation code: `file` under `tests/js/node_modules/@uniswap`.
fn artifact(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("js/node_modules/@uniswap")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} (npm ci --prefix tests/js): {e}", path.display()));
    let json: Value = serde_json::from_str(&text).expect("an artifact is JSON");
    let code = json["bytecode"].as_str().expect("creation code");
    code.trim_start_matches("0x").to_string()
}

/// Where the real factories are, and the trader contract.
pub struct Uniswap<'a> {
    pub chain: &'a Session<'a>,
    pub trader: Address,
}

impl<'a> Uniswap<'a> {
    /// Deploys both factories, moves their code to the mainnet addresses
    /// (the V3 factory's own address, an immutable in its code, patched to
    /// match) with the V3 factory's owner and fee tier set, and deploys
    /// the trader from the compiled `fixtures`.
    pub async fn place(
        chain: &'a Session<'a>,
        fixtures: &BTreeMap<String, (String, String)>,
    ) -> Self {
        let anvil = chain.anvil;
        let owner: Address = DEV_ACCOUNT.parse().expect("address");
        let v2 = chain
            .deploy(
                &artifact("v2-core/build/UniswapV2Factory.json"),
                owner.into_word().to_vec(),
            )
            .await;
        let v3 = chain
            .deploy(
                &artifact("v3-core/artifacts/contracts/UniswapV3Factory.sol/UniswapV3Factory.json"),
                Vec::new(),
            )
            .await;
        for (deployed, at) in [(v2, UNISWAP_V2_FACTORY), (v3, UNISWAP_V3_FACTORY)] {
            let code = anvil
                .rpc("eth_getCode", json!([deployed, "latest"]))
                .await
                .expect("code");
            let here = alloy_primitives::hex::encode(deployed);
            let there = alloy_primitives::hex::encode(at);
            let code = code
                .as_str()
                .expect("hex")
                .to_lowercase()
                .replace(&here, &there);
            anvil
                .rpc("anvil_setCode", json!([at, code]))
                .await
                .expect("setCode");
        }
        // The V3 factory's owner, in whichever of its first slots holds it,
        // so its owner may enable the fee tier.
        let word = format!("0x{}", alloy_primitives::hex::encode(owner.into_word()));
        let mut placed = false;
        for slot in 0..8u64 {
            let value = anvil
                .rpc(
                    "eth_getStorageAt",
                    json!([v3, format!("{slot:#x}"), "latest"]),
                )
                .await
                .expect("storage");
            if value.as_str() == Some(word.as_str()) {
                anvil
                    .rpc(
                        "anvil_setStorageAt",
                        json!([UNISWAP_V3_FACTORY, format!("{:#066x}", slot), word]),
                    )
                    .await
                    .expect("setStorageAt");
                placed = true;
            }
        }
        assert!(placed, "the V3 factory's owner slot");
        let this = Self {
            chain,
            trader: chain.deploy(&fixtures["V3Trader"].0, Vec::new()).await,
        };
        assert_eq!(
            chain
                .call(UNISWAP_V3_FACTORY, RealV3Factory::ownerCall {})
                .await,
            owner
        );
        this.send(
            UNISWAP_V3_FACTORY,
            RealV3Factory::enableFeeAmountCall {
                fee: FEE.try_into().expect("a fee"),
                tickSpacing: I24::try_from(TICK_SPACING).expect("a spacing"),
            },
            None,
        )
        .await;
        this
    }

    async fn send(&self, to: Address, call: impl SolCall, timestamp: Option<u64>) -> Value {
        self.chain
            .send(Some(to), call.abi_encode(), timestamp)
            .await
    }

    /// A V2 pair of the tokens, created by the real factory.
    pub async fn v2_pair(&self, a: Address, b: Address, timestamp: Option<u64>) -> Address {
        self.send(
            UNISWAP_V2_FACTORY,
            RealV2Factory::createPairCall {
                tokenA: a,
                tokenB: b,
            },
            timestamp,
        )
        .await;
        self.chain
            .call(
                UNISWAP_V2_FACTORY,
                RealV2Factory::getPairCall {
                    tokenA: a,
                    tokenB: b,
                },
            )
            .await
    }

    /// Adds `amount_a` of `a` and `amount_b` of `b` to the pair's
    /// balances, and `sync()` makes them its reserves, from a block at
    /// `timestamp` on; returns the last block's receipt.
    pub async fn v2_add(
        &self,
        pair: Address,
        (a, amount_a): (Address, U256),
        (b, amount_b): (Address, U256),
        timestamp: Option<u64>,
    ) -> Value {
        let mut timestamp = timestamp;
        for (token, amount) in [(a, amount_a), (b, amount_b)] {
            if !amount.is_zero() {
                self.send(
                    token,
                    Erc20::transferCall {
                        to: pair,
                        value: amount,
                    },
                    timestamp.take(),
                )
                .await;
            }
        }
        self.send(pair, RealV2Pair::syncCall {}, timestamp).await
    }

    /// A V3 pool of the tokens at the fee tier, created by the real
    /// factory and started at `sqrt_price_x96`.
    pub async fn v3_pool(&self, a: Address, b: Address, sqrt_price_x96: U256) -> Address {
        let receipt = self
            .send(
                UNISWAP_V3_FACTORY,
                RealV3Factory::createPoolCall {
                    tokenA: a,
                    tokenB: b,
                    fee: FEE.try_into().expect("a fee"),
                },
                None,
            )
            .await;
        // PoolCreated's last word is the pool.
        let data = receipt["logs"][0]["data"]
            .as_str()
            .expect("PoolCreated data");
        let pool: Address = format!("0x{}", &data[data.len() - 40..])
            .parse()
            .expect("address");
        self.send(
            pool,
            RealV3Pool::initializeCall {
                sqrtPriceX96: sqrt_price_x96.to(),
            },
            None,
        )
        .await;
        pool
    }

    /// Funds the trader with both tokens and mints `liquidity` over the
    /// whole price range.
    pub async fn v3_mint(&self, pool: Address, tokens: [Address; 2], liquidity: u128) {
        for token in tokens {
            self.send(
                token,
                Erc20::transferCall {
                    to: self.trader,
                    value: U256::from(10u64).pow(U256::from(28)),
                },
                None,
            )
            .await;
        }
        self.send(
            self.trader,
            Trader::mintCall {
                pool,
                tickLower: I24::try_from(-FULL_RANGE).expect("a tick"),
                tickUpper: I24::try_from(FULL_RANGE).expect("a tick"),
                amount: liquidity,
            },
            None,
        )
        .await;
    }

    /// Swaps in the pool until its price is `sqrt_price_x96` (down when
    /// `zero_for_one`), in a block at `timestamp`; returns the receipt.
    pub async fn v3_swap_to(
        &self,
        pool: Address,
        zero_for_one: bool,
        sqrt_price_x96: U256,
        timestamp: Option<u64>,
    ) -> Value {
        self.send(
            self.trader,
            Trader::swapCall {
                pool,
                zeroForOne: zero_for_one,
                amountSpecified: alloy_primitives::I256::try_from(10u64.pow(18)).expect("fits")
                    * alloy_primitives::I256::try_from(10u64.pow(9)).expect("fits"),
                sqrtPriceLimitX96: sqrt_price_x96.to(),
            },
            timestamp,
        )
        .await
    }
}

/// A V2 pair's reserves at `block`.
pub async fn reserves_at(chain: &Session<'_>, pair: Address, block: u64) -> (U256, U256) {
    let r = call_at(chain, pair, RealV2Pair::getReservesCall {}, block).await;
    (U256::from(r.reserve0), U256::from(r.reserve1))
}

/// A V3 pool's price and in-range liquidity at `block`.
pub async fn v3_state_at(chain: &Session<'_>, pool: Address, block: u64) -> (U256, u128) {
    let slot0 = call_at(chain, pool, RealV3Pool::slot0Call {}, block).await;
    let liquidity = call_at(chain, pool, RealV3Pool::liquidityCall {}, block).await;
    (U256::from(slot0.sqrtPriceX96), liquidity)
}

async fn call_at<C: SolCall>(chain: &Session<'_>, to: Address, call: C, block: u64) -> C::Return {
    let raw = chain
        .anvil
        .rpc(
            "eth_call",
            json!([{ "to": to, "data": hex(&call.abi_encode()) }, format!("{block:#x}")]),
        )
        .await
        .expect("eth_call");
    let bytes = alloy_primitives::hex::decode(raw.as_str().expect("hex")).expect("hex");
    C::abi_decode_returns(&bytes).expect("decode")
}

/// ALPHA has 18 decimals, BETA 6.
const ALPHA_DECIMALS: i32 = 18;
const BETA_DECIMALS: i32 = 6;

/// Liquidity minted in the V3 pool: about the V2 pair's, so both weigh.
const V3_LIQUIDITY: u128 = 500_000_000_000_000;

/// A scene of real pools for `token_price` before the index began (the
/// end-to-end test and the cold-price benchmark): what the pools went
/// through, and where.
pub struct Scene {
    pub alpha: Address,
    pub beta: Address,
    pub pair: Address,
    pub pool: Address,
    /// The last block of the first prices, and its time.
    pub first: (u64, u64),
    /// The block of the second prices.
    pub second: u64,
}

/// `10^exponent` as a U256.
fn units(amount: u64, exponent: u32) -> U256 {
    U256::from(amount) * U256::from(10u64).pow(U256::from(exponent))
}

/// √(token1 per token0, in base units) · 2^96 for `beta_per_alpha` whole
/// BETA per whole ALPHA, in the pool's token order.
fn sqrt_price(beta_per_alpha: f64, alpha_first: bool) -> U256 {
    let raw = beta_per_alpha * 10f64.powi(BETA_DECIMALS - ALPHA_DECIMALS);
    let raw = if alpha_first { raw } else { 1.0 / raw };
    U256::from((raw.sqrt() * 2f64.powi(96)) as u128)
}

/// Two tokens; a V2 pair at 2,000 BETA per ALPHA and a V3 pool at 2,100;
/// a thousand seconds later 2,500 and 2,400; then `empty_blocks` empty
/// blocks, 12 seconds apart.
pub async fn scene(chain: &Session<'_>, empty_blocks: u64) -> Scene {
    let fixtures = compile().await;
    let token = async |name: &str, decimals: u8| {
        let args = TestToken::constructorCall {
            name_: name.into(),
            decimals_: decimals,
        };
        chain
            .deploy(&fixtures["TestToken"].0, args.abi_encode())
            .await
    };
    let alpha = token("Alpha Token", 18).await;
    let beta = token("Beta Dollar", 6).await;
    let uniswap = Uniswap::place(chain, &fixtures).await;
    let alpha_first = alpha < beta;
    let pair = uniswap.v2_pair(alpha, beta, None).await;
    uniswap
        .v2_add(pair, (alpha, units(10, 18)), (beta, units(20_000, 6)), None)
        .await;
    let pool = uniswap
        .v3_pool(alpha, beta, sqrt_price(2_100.0, alpha_first))
        .await;
    uniswap.v3_mint(pool, [alpha, beta], V3_LIQUIDITY).await;
    let first = latest(chain).await;
    let later = first.1 + 1_000;
    uniswap
        .v2_add(
            pair,
            (alpha, U256::ZERO),
            (beta, units(5_000, 6)),
            Some(later),
        )
        .await;
    // BETA per ALPHA up: token1 per token0 up if ALPHA is token0.
    let receipt = uniswap
        .v3_swap_to(pool, !alpha_first, sqrt_price(2_400.0, alpha_first), None)
        .await;
    let second = chain.block_of(&receipt).await;
    chain
        .anvil
        .rpc("anvil_mine", json!([format!("{empty_blocks:#x}"), "0xc"]))
        .await
        .expect("mine");
    Scene {
        alpha,
        beta,
        pair,
        pool,
        first,
        second,
    }
}

/// The node's latest block: (number, time).
pub async fn latest(chain: &Session<'_>) -> (u64, u64) {
    let block = chain
        .anvil
        .rpc("eth_getBlockByNumber", json!(["latest", false]))
        .await
        .expect("latest");
    (quantity(&block["number"]), quantity(&block["timestamp"]))
}

/// BETA per ALPHA at `block`, computed here from the pools' state there:
/// each pool's price weighted by its liquidity (√(r0·r1) for the pair).
pub async fn expected(chain: &Session<'_>, scene: &Scene, block: u64) -> f64 {
    let alpha_first = scene.alpha < scene.beta;
    let to_f64 = |v: U256| f64::from(v);
    let (r0, r1) = reserves_at(chain, scene.pair, block).await;
    let (r_alpha, r_beta) = if alpha_first { (r0, r1) } else { (r1, r0) };
    let v2 = (to_f64(r_beta) / 1e6) / (to_f64(r_alpha) / 1e18);
    let v2_weight = (to_f64(r0) * to_f64(r1)).sqrt();
    let (sqrt_price, liquidity) = v3_state_at(chain, scene.pool, block).await;
    let raw = (to_f64(sqrt_price) / 2f64.powi(96)).powi(2);
    let scale = 10f64.powi(ALPHA_DECIMALS - BETA_DECIMALS);
    let v3 = if alpha_first {
        raw * scale
    } else {
        1.0 / (raw / scale)
    };
    let v3_weight = liquidity as f64;
    (v2 * v2_weight + v3 * v3_weight) / (v2_weight + v3_weight)
}
