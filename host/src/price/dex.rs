//! What the price index reads from DEXes: the pool events (V2 `Sync`, V3
//! `Swap`, factory `PairCreated`/`PoolCreated`), the calls that identify a
//! pool first seen by its state event, and the well-known factories and
//! base tokens of each chain.

use alloy_primitives::{Address, B256, U256, address};
use alloy_rpc_types_eth::Log;
use alloy_sol_types::{SolEvent, sol};

use super::store::{PoolKind, PoolState};

sol! {
    /// Uniswap V2 pair (PancakeSwap, QuickSwap, SushiSwap share it).
    event Sync(uint112 reserve0, uint112 reserve1);
    /// Uniswap V3 pool (PancakeSwap V3 shares it).
    event Swap(address indexed sender, address indexed recipient, int256 amount0, int256 amount1, uint160 sqrtPriceX96, uint128 liquidity, int24 tick);
    event PairCreated(address indexed token0, address indexed token1, address pair, uint256 index);
    event PoolCreated(address indexed token0, address indexed token1, uint24 indexed fee, int24 tickSpacing, address pool);

    function token0() external view returns (address);
    function token1() external view returns (address);
    function factory() external view returns (address);
    function fee() external view returns (uint24);
    function getPair(address tokenA, address tokenB) external view returns (address);
    function getPool(address tokenA, address tokenB, uint24 fee) external view returns (address);
    function decimals() external view returns (uint8);
    function name() external view returns (string);
}

/// A factory whose pools may set prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Factory {
    pub name: &'static str,
    pub address: Address,
    pub kind: PoolKind,
}

const fn v2(name: &'static str, address: Address) -> Factory {
    Factory {
        name,
        address,
        kind: PoolKind::V2,
    }
}

const fn v3(name: &'static str, address: Address) -> Factory {
    Factory {
        name,
        address,
        kind: PoolKind::V3,
    }
}

/// The factories trusted by default on a chain (empty for unknown ids).
pub fn default_factories(chain_id: u64) -> &'static [Factory] {
    const ETHEREUM: &[Factory] = &[
        v2(
            "Uniswap V2",
            address!("0x5C69bEe701ef814a2B6a3EDD4B1652CB9cc5aA6f"),
        ),
        v2(
            "SushiSwap",
            address!("0xC0AEe478e3658e2610c5F7A4A2E1777cE9e4f2Ac"),
        ),
        v3(
            "Uniswap V3",
            address!("0x1F98431c8aD98523631AE4a59f267346ea31F984"),
        ),
    ];
    const BSC: &[Factory] = &[
        v2(
            "PancakeSwap V2",
            address!("0xcA143Ce32Fe78f1f7019d7d551a6402fC5350c73"),
        ),
        v3(
            "PancakeSwap V3",
            address!("0x0BFbCF9fa4f9C56B0F40a671Ad40E0805A091865"),
        ),
        v3(
            "Uniswap V3",
            address!("0xdB1d10011AD0Ff90774D0C6Bb92e5C5c8b4461F7"),
        ),
    ];
    const POLYGON: &[Factory] = &[
        v2(
            "QuickSwap",
            address!("0x5757371414417b8C6CAad45bAeF941aBc7d3Ab32"),
        ),
        v2(
            "SushiSwap",
            address!("0xc35DADB65012eC5796536bD9864eD8773aBc74C4"),
        ),
        v3(
            "Uniswap V3",
            address!("0x1F98431c8aD98523631AE4a59f267346ea31F984"),
        ),
    ];
    match chain_id {
        1 => ETHEREUM,
        56 => BSC,
        137 => POLYGON,
        _ => &[],
    }
}

/// Tokens a price may route through when a pair has no pool of its own,
/// in order of preference (the chain's wrapped native coin, then
/// stablecoins).
pub fn default_base_tokens(chain_id: u64) -> &'static [Address] {
    const ETHEREUM: &[Address] = &[
        address!("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2"), // WETH
        address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"), // USDC
        address!("0xdAC17F958D2ee523a2206206994597C13D831ec7"), // USDT
    ];
    const BSC: &[Address] = &[
        address!("0xbb4CdB9CBd36B01bD1cBaEBF2De08d9173bc095c"), // WBNB
        address!("0x55d398326f99059fF775485246999027B3197955"), // USDT
    ];
    const POLYGON: &[Address] = &[
        address!("0x0d500B1d8E8eF31E21C99d1Db9A6444d3ADf1270"), // WPOL
        address!("0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"), // USDC
    ];
    match chain_id {
        1 => ETHEREUM,
        56 => BSC,
        137 => POLYGON,
        _ => &[],
    }
}

/// A pool event, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolEvent {
    /// A state change of the pool at `pool`.
    State { pool: Address, state: PoolState },
    /// A factory at `factory` created `pool` for the pair.
    Created {
        factory: Address,
        pool: Address,
        kind: PoolKind,
        token0: Address,
        token1: Address,
    },
}

/// Decodes `log` if it is one of the pool events; anything else (or a
/// malformed one) is `None`.
pub fn decode(log: &Log) -> Option<PoolEvent> {
    let inner = &log.inner;
    let topic: B256 = *inner.data.topics().first()?;
    if topic == Sync::SIGNATURE_HASH {
        let sync = Sync::decode_log_data(&inner.data).ok()?;
        return Some(PoolEvent::State {
            pool: inner.address,
            state: PoolState::V2 {
                reserve0: U256::from(sync.reserve0),
                reserve1: U256::from(sync.reserve1),
            },
        });
    }
    if topic == Swap::SIGNATURE_HASH {
        let swap = Swap::decode_log_data(&inner.data).ok()?;
        return Some(PoolEvent::State {
            pool: inner.address,
            state: PoolState::V3 {
                sqrt_price_x96: U256::from(swap.sqrtPriceX96),
                liquidity: swap.liquidity,
            },
        });
    }
    if topic == PairCreated::SIGNATURE_HASH {
        let created = PairCreated::decode_log_data(&inner.data).ok()?;
        return Some(PoolEvent::Created {
            factory: inner.address,
            pool: created.pair,
            kind: PoolKind::V2,
            token0: created.token0,
            token1: created.token1,
        });
    }
    if topic == PoolCreated::SIGNATURE_HASH {
        let created = PoolCreated::decode_log_data(&inner.data).ok()?;
        return Some(PoolEvent::Created {
            factory: inner.address,
            pool: created.pool,
            kind: PoolKind::V3,
            token0: created.token0,
            token1: created.token1,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{LogData, b256};

    use super::*;

    #[test]
    fn topics_are_the_real_ones() {
        assert_eq!(
            Sync::SIGNATURE_HASH,
            b256!("0x1c411e9a96e071241c2f21f7726b17ae89e3cab4c78be50e062b03a9fffbbad1")
        );
        assert_eq!(
            Swap::SIGNATURE_HASH,
            b256!("0xc42079f94a6350d7e6235f29174924f928cc2ac818eb64fed8004e115fbcca67")
        );
        assert_eq!(
            PairCreated::SIGNATURE_HASH,
            b256!("0x0d3648bd0f6ba80134a33ba9275ac585d9d315f0ad8355cddefde31afa28d0e9")
        );
        assert_eq!(
            PoolCreated::SIGNATURE_HASH,
            b256!("0x783cca1c0412dd0d695e784568c96da2e9c22ff989357a2e8b1d9b2b4e6b7118")
        );
    }

    fn log(address: Address, topics: Vec<B256>, data: Vec<u8>) -> Log {
        Log {
            inner: alloy_primitives::Log {
                address,
                data: LogData::new_unchecked(topics, data.into()),
            },
            ..Default::default()
        }
    }

    fn word(value: U256) -> [u8; 32] {
        value.to_be_bytes()
    }

    #[test]
    fn decodes_sync_swap_and_creations() {
        let pool = Address::repeat_byte(0xaa);
        let data = [word(U256::from(5)), word(U256::from(7))].concat();
        assert_eq!(
            decode(&log(pool, vec![Sync::SIGNATURE_HASH], data)),
            Some(PoolEvent::State {
                pool,
                state: PoolState::V2 {
                    reserve0: U256::from(5),
                    reserve1: U256::from(7)
                }
            })
        );
        let minus_one = U256::MAX;
        let data = [
            word(minus_one),
            word(U256::from(3)),
            word(U256::from(1) << 96),
            word(U256::from(1_000)),
            word(minus_one),
        ]
        .concat();
        let sender = B256::left_padding_from(&[1]);
        assert_eq!(
            decode(&log(pool, vec![Swap::SIGNATURE_HASH, sender, sender], data)),
            Some(PoolEvent::State {
                pool,
                state: PoolState::V3 {
                    sqrt_price_x96: U256::from(1) << 96,
                    liquidity: 1_000
                }
            })
        );
        let (t0, t1, factory) = (
            Address::repeat_byte(1),
            Address::repeat_byte(2),
            Address::repeat_byte(0xf0),
        );
        let data = [pool.into_word().0, word(U256::from(1))].concat();
        assert_eq!(
            decode(&log(
                factory,
                vec![PairCreated::SIGNATURE_HASH, t0.into_word(), t1.into_word()],
                data
            )),
            Some(PoolEvent::Created {
                factory,
                pool,
                kind: PoolKind::V2,
                token0: t0,
                token1: t1
            })
        );
        // A Sync with missing data is not a pool event.
        assert_eq!(
            decode(&log(pool, vec![Sync::SIGNATURE_HASH], vec![1])),
            None
        );
    }
}
