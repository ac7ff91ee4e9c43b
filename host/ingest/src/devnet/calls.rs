//! The devnet's answers to the price index's contract calls: its tokens'
//! `decimals()` and `name()`, its pairs' tokens and factory, and the
//! factories' `getPair`, from the chain's profile, as its contracts would
//! answer on a real chain.

use std::collections::HashMap;

use alloy_primitives::{Address, Bytes};
use alloy_sol_types::SolCall;
use futures_util::future::BoxFuture;

use super::{KnownPool, KnownToken, known_pools, known_tokens};
use chainsieve_contracts::abi::{IERC20, IPool, IUniswapV2Factory};
use chainsieve_node::ChainCalls;

/// The devnet's contracts: its tokens and its V2 pairs and factories.
#[derive(Debug)]
pub struct DevnetCalls {
    tokens: HashMap<Address, KnownToken>,
    pools: Vec<KnownPool>,
}

impl DevnetCalls {
    pub fn new(chain_id: u64) -> Self {
        Self {
            tokens: known_tokens(chain_id)
                .iter()
                .map(|t| (t.address, *t))
                .collect(),
            pools: known_pools(chain_id),
        }
    }

    fn answer(&self, to: Address, data: &[u8]) -> Option<Vec<u8>> {
        let selector: [u8; 4] = data.get(..4)?.try_into().ok()?;
        if let Some(token) = self.tokens.get(&to) {
            return match selector {
                IERC20::decimalsCall::SELECTOR => {
                    Some(IERC20::decimalsCall::abi_encode_returns(&token.decimals))
                }
                IERC20::nameCall::SELECTOR => Some(IERC20::nameCall::abi_encode_returns(
                    &token.name.to_string(),
                )),
                _ => None,
            };
        }
        if let Some(pool) = self.pools.iter().find(|p| p.address == to) {
            return match selector {
                IPool::token0Call::SELECTOR => {
                    Some(IPool::token0Call::abi_encode_returns(&pool.token0))
                }
                IPool::token1Call::SELECTOR => {
                    Some(IPool::token1Call::abi_encode_returns(&pool.token1))
                }
                IPool::factoryCall::SELECTOR => {
                    Some(IPool::factoryCall::abi_encode_returns(&pool.factory))
                }
                _ => None,
            };
        }
        if selector == IUniswapV2Factory::getPairCall::SELECTOR {
            let call = IUniswapV2Factory::getPairCall::abi_decode(data).ok()?;
            let pair = self
                .pools
                .iter()
                .find(|p| {
                    p.factory == to
                        && ((p.token0, p.token1) == (call.tokenA, call.tokenB)
                            || (p.token1, p.token0) == (call.tokenA, call.tokenB))
                })
                .map_or(Address::ZERO, |p| p.address);
            return Some(IUniswapV2Factory::getPairCall::abi_encode_returns(&pair));
        }
        None
    }
}

impl ChainCalls for DevnetCalls {
    fn call(&self, to: Address, data: Bytes) -> BoxFuture<'_, anyhow::Result<Option<Bytes>>> {
        let answer = self.answer(to, &data).map(Bytes::from);
        Box::pin(async move { Ok(answer) })
    }
}
