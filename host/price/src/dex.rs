//! What the price index reads from DEXes: the pool events (V2 `Sync`, V3
//! `Swap`, factory `PairCreated`/`PoolCreated`) decoded, and the factories
//! and base tokens the catalog gives each chain by default.

use alloy_primitives::{Address, B256, U256};
use alloy_rpc_types_eth::Log;
use alloy_sol_types::SolEvent;

use super::store::{PoolKind, PoolState};
use chainsieve_contracts::abi::{
    IUniswapV2Factory, IUniswapV2Pair, IUniswapV3Factory, IUniswapV3Pool,
};
use chainsieve_contracts::catalog::{self, Factory};

/// The factories trusted by default on a chain: its catalog's (none for
/// unknown ids).
pub fn default_factories(chain_id: u64) -> &'static [Factory] {
    catalog::for_chain(chain_id)
        .map(|c| c.factories)
        .unwrap_or_default()
}

/// Tokens a price may route through when a pair has no pool of its own:
/// the catalog's base tokens of the chain (none for unknown ids).
pub fn default_base_tokens(chain_id: u64) -> &'static [Address] {
    catalog::for_chain(chain_id)
        .map(|c| c.base_tokens)
        .unwrap_or_default()
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
    if topic == IUniswapV2Pair::Sync::SIGNATURE_HASH {
        let sync = IUniswapV2Pair::Sync::decode_log_data(&inner.data).ok()?;
        return Some(PoolEvent::State {
            pool: inner.address,
            state: PoolState::V2 {
                reserve0: U256::from(sync.reserve0),
                reserve1: U256::from(sync.reserve1),
            },
        });
    }
    if topic == IUniswapV3Pool::Swap::SIGNATURE_HASH {
        let swap = IUniswapV3Pool::Swap::decode_log_data(&inner.data).ok()?;
        return Some(PoolEvent::State {
            pool: inner.address,
            state: PoolState::V3 {
                sqrt_price_x96: U256::from(swap.sqrtPriceX96),
                liquidity: swap.liquidity,
            },
        });
    }
    if topic == IUniswapV2Factory::PairCreated::SIGNATURE_HASH {
        let created = IUniswapV2Factory::PairCreated::decode_log_data(&inner.data).ok()?;
        return Some(PoolEvent::Created {
            factory: inner.address,
            pool: created.pair,
            kind: PoolKind::V2,
            token0: created.token0,
            token1: created.token1,
        });
    }
    if topic == IUniswapV3Factory::PoolCreated::SIGNATURE_HASH {
        let created = IUniswapV3Factory::PoolCreated::decode_log_data(&inner.data).ok()?;
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
    use alloy_primitives::LogData;

    use super::*;

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
            decode(&log(pool, vec![IUniswapV2Pair::Sync::SIGNATURE_HASH], data)),
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
            decode(&log(
                pool,
                vec![IUniswapV3Pool::Swap::SIGNATURE_HASH, sender, sender],
                data
            )),
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
                vec![
                    IUniswapV2Factory::PairCreated::SIGNATURE_HASH,
                    t0.into_word(),
                    t1.into_word()
                ],
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
            decode(&log(
                pool,
                vec![IUniswapV2Pair::Sync::SIGNATURE_HASH],
                vec![1]
            )),
            None
        );
    }
}
