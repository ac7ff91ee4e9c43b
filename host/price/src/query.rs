//! Answers `token_price` from the store: the pair's pools at the block of
//! the requested time, weighted by liquidity, or a route through one base
//! token when the pair has no pool of its own.

use alloy_primitives::Address;
use num_bigint::BigUint;

use super::math::{self, Price};
use super::store::{PoolState, PriceStore, Token};

/// A `token_price` answer, in the request's token order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceAnswer {
    /// Block time (seconds) of the newest pool state used.
    pub timestamp: u64,
    pub token0: Address,
    pub token0_name: String,
    /// Amount of token0 for one token1.
    pub token0_price: String,
    pub token1: Address,
    pub token1_name: String,
    /// Amount of token1 for one token0.
    pub token1_price: String,
    /// Blocks of the pool states used, ascending.
    pub block_numbers: Vec<u64>,
}

/// Why there is no answer.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    /// Nothing prices this pair (-32001).
    #[error("{0}")]
    NotFound(String),
    /// The nodes hold no state that old: not archive nodes (-32001).
    #[error("{0}")]
    NoState(String),
    /// The nodes failed or do not hold the block (-32002).
    #[error("{0}")]
    Unavailable(String),
    /// The answer needs more node calls than a request may make (-32005).
    #[error("{0}")]
    TooCostly(String),
    /// The store failed (-32603).
    #[error("price index: {0:#}")]
    Store(#[from] anyhow::Error),
}

/// Up to where a stored pool state holds: from the block the index
/// covers on (`covered`: every pool event since is indexed), a state holds
/// until the pool's next one; before it, only at its own block (it was
/// read from the nodes there).
#[derive(Clone, Copy, Debug)]
pub struct Reach {
    /// The block the question is asked at.
    pub block: u64,
    /// The first block the index covers; `None`: all of them.
    pub covered: Option<u64>,
}

impl Reach {
    fn holds(self, state_block: u64) -> bool {
        state_block == self.block || self.covered.is_none_or(|from| state_block >= from)
    }
}

/// One priced hop: how much of `quote` one `base` buys.
struct Quote {
    price: Price,
    /// Liquidity behind it (the smallest hop's, for a route).
    weight: BigUint,
    blocks: Vec<u64>,
}

/// The price of `token1` in `token0` and back at `timestamp` (seconds; the
/// latest indexed block when absent, before the first indexed block or
/// after the last), from the store alone: before the pair's first
/// indexed price, its latest.
pub fn token_price(
    store: &PriceStore,
    base_tokens: &[Address],
    timestamp: Option<u64>,
    token0: Address,
    token1: Address,
) -> Result<PriceAnswer, PriceError> {
    let Some((tip, _)) = store.tip()? else {
        return Err(nothing_indexed());
    };
    let at = match timestamp {
        Some(t) => store.block_at(t)?.map_or(tip, |(block, _)| block),
        None => tip,
    };
    let ask = |block| {
        let reach = Reach {
            block,
            covered: None,
        };
        at_block(store, base_tokens, reach, token0, token1)
    };
    match ask(at)? {
        Some(answer) => Ok(answer),
        None if at != tip => ask(tip)?.ok_or_else(|| unpriced(token0, token1)),
        None => Err(unpriced(token0, token1)),
    }
}

/// Nothing is indexed on the chain yet.
pub fn nothing_indexed() -> PriceError {
    PriceError::NotFound("no price data indexed on this chain yet".into())
}

/// No pool prices the pair.
pub fn unpriced(token0: Address, token1: Address) -> PriceError {
    PriceError::NotFound(format!(
        "no pool prices {token0:#x} against {token1:#x}, directly or through a base token"
    ))
}

/// Whether the stored states of the pair's own pools price it at
/// `reach`.
pub fn priced_directly(
    store: &PriceStore,
    reach: Reach,
    a: Address,
    b: Address,
) -> anyhow::Result<bool> {
    Ok(quote(store, a, b, reach)?.is_some())
}

/// The price of `token1` in `token0` and back from the pool states that
/// hold at `reach`; `None` when they do not price the pair.
pub fn at_block(
    store: &PriceStore,
    base_tokens: &[Address],
    reach: Reach,
    token0: Address,
    token1: Address,
) -> Result<Option<PriceAnswer>, PriceError> {
    let Some(quote) = price_at(store, base_tokens, token1, token0, reach)? else {
        return Ok(None);
    };
    let mut blocks = quote.blocks;
    blocks.sort_unstable();
    blocks.dedup();
    let newest = *blocks.last().expect("a quote uses at least one state");
    let timestamp = store.block_time(newest)?.unwrap_or_default();
    let name = |token| -> Result<String, PriceError> {
        Ok(store.token(token)?.map(|t| t.name).unwrap_or_default())
    };
    Ok(Some(PriceAnswer {
        timestamp,
        token0,
        token0_name: name(token0)?,
        token0_price: math::to_decimal(&quote.price),
        token1,
        token1_name: name(token1)?,
        token1_price: math::to_decimal(&quote.price.recip()),
        block_numbers: blocks,
    }))
}

/// How much `quote_token` one `base` buys at `block`: from their own
/// pools, else through a base token.
fn price_at(
    store: &PriceStore,
    base_tokens: &[Address],
    base: Address,
    quote_token: Address,
    reach: Reach,
) -> anyhow::Result<Option<Quote>> {
    match quote(store, base, quote_token, reach)? {
        Some(direct) => Ok(Some(direct)),
        None => route(store, base_tokens, base, quote_token, reach),
    }
}

/// How much `quote_token` one `base` buys at `block`, from their direct
/// pools; `None` when no pool of the pair has a usable state.
fn quote(
    store: &PriceStore,
    base: Address,
    quote_token: Address,
    reach: Reach,
) -> anyhow::Result<Option<Quote>> {
    let mut priced = Vec::new();
    let mut blocks = Vec::new();
    for pool in store.pools_of(base, quote_token)? {
        let Some((at, state)) = store
            .state_at(pool.address, reach.block)?
            .filter(|(at, _)| reach.holds(*at))
        else {
            continue;
        };
        let (Some(t0), Some(t1)) = (store.token(pool.token0)?, store.token(pool.token1)?) else {
            continue;
        };
        let Some((price, weight)) = pool_price(&state, &t0, &t1) else {
            continue;
        };
        // `price` is token1 per token0; orient it to quote per base.
        let price = if pool.token0 == base {
            price
        } else {
            price.recip()
        };
        priced.push((price, weight));
        blocks.push(at);
    }
    let total: BigUint = priced.iter().map(|(_, w)| w).sum();
    Ok(math::weighted(&priced).map(|price| Quote {
        price,
        weight: total,
        blocks,
    }))
}

/// One whole token0 in token1, and the pool's liquidity.
fn pool_price(state: &PoolState, t0: &Token, t1: &Token) -> Option<(Price, BigUint)> {
    match *state {
        PoolState::V2 { reserve0, reserve1 } => Some((
            math::v2_price(reserve0, reserve1, t0.decimals, t1.decimals)?,
            math::v2_liquidity(reserve0, reserve1),
        )),
        PoolState::V3 {
            sqrt_price_x96,
            liquidity,
        } => Some((
            math::v3_price(sqrt_price_x96, t0.decimals, t1.decimals)?,
            BigUint::from(liquidity),
        )),
    }
}

/// `base` → X → `quote_token` through the first base token X (in the
/// chain's order of preference) that both hops have pools for.
fn route(
    store: &PriceStore,
    base_tokens: &[Address],
    base: Address,
    quote_token: Address,
    reach: Reach,
) -> anyhow::Result<Option<Quote>> {
    for &via in base_tokens {
        if via == base || via == quote_token {
            continue;
        }
        let Some(first) = quote(store, base, via, reach)? else {
            continue;
        };
        let Some(second) = quote(store, via, quote_token, reach)? else {
            continue;
        };
        let mut blocks = first.blocks;
        blocks.extend(second.blocks);
        return Ok(Some(Quote {
            price: first.price * second.price,
            weight: first.weight.min(second.weight),
            blocks,
        }));
    }
    Ok(None)
}

/// Reads a request's `timestamp`: seconds, or milliseconds from 10^12 up.
pub fn seconds(timestamp: u64) -> u64 {
    if timestamp >= 1_000_000_000_000 {
        timestamp / 1_000
    } else {
        timestamp
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::U256;

    use super::*;
    use crate::store::{BlockUpdate, Pool, PoolKind, PriceWrite};

    fn token(byte: u8) -> Address {
        Address::repeat_byte(byte)
    }

    fn pool(byte: u8, kind: PoolKind, t0: Address, t1: Address) -> Pool {
        Pool {
            address: Address::repeat_byte(byte),
            kind,
            token0: t0,
            token1: t1,
            factory: Address::repeat_byte(0xf0),
        }
    }

    fn v2(r0: u128, r1: u128) -> PoolState {
        PoolState::V2 {
            reserve0: U256::from(r0),
            reserve1: U256::from(r1),
        }
    }

    const E18: u128 = 1_000_000_000_000_000_000;
    const E6: u128 = 1_000_000;

    /// WETH (18) and USDC (6) and a token only paired with WETH.
    fn store() -> (PriceStore, Address, Address, Address) {
        let store = PriceStore::in_memory().expect("store");
        let (usdc, weth, pepe) = (token(0x0a), token(0x0b), token(0x0c));
        for (t, name, decimals) in [
            (usdc, "USD Coin", 6),
            (weth, "Wrapped Ether", 18),
            (pepe, "Pepe", 18),
        ] {
            store
                .write(&PriceWrite::Token {
                    address: t,
                    token: Token {
                        name: name.into(),
                        decimals,
                    },
                })
                .expect("token");
        }
        let direct = pool(0xa1, PoolKind::V2, usdc, weth);
        let pepe_weth = pool(0xa2, PoolKind::V2, weth, pepe);
        // Block 10: 2,000 USDC per WETH; 1 WETH buys 1,000,000 PEPE.
        store
            .write(&PriceWrite::Block {
                update: BlockUpdate {
                    number: 10,
                    hash: alloy_primitives::B256::with_last_byte(10),
                    timestamp: 1_000,
                    pools: vec![direct, pepe_weth],
                    states: vec![
                        (direct.address, v2(2_000_000 * E6, 1_000 * E18)),
                        (pepe_weth.address, v2(10 * E18, 10_000_000 * E18)),
                    ],
                },
                position: None,
            })
            .expect("block 10");
        // Block 20: 2,500 USDC per WETH.
        store
            .write(&PriceWrite::Block {
                update: BlockUpdate {
                    number: 20,
                    hash: alloy_primitives::B256::with_last_byte(20),
                    timestamp: 1_120,
                    pools: vec![],
                    states: vec![(direct.address, v2(2_500_000 * E6, 1_000 * E18))],
                },
                position: None,
            })
            .expect("block 20");
        (store, usdc, weth, pepe)
    }

    #[test]
    fn direct_prices_by_time_in_both_orders() {
        let (store, usdc, weth, _) = store();
        let at = |t: Option<u64>, a, b| token_price(&store, &[weth], t, a, b).expect("price");
        let before = at(Some(1_100), usdc, weth);
        assert_eq!(before.token0_price, "2000", "USDC for one WETH");
        assert_eq!(before.token1_price, "0.0005");
        assert_eq!(
            (before.block_numbers.clone(), before.timestamp),
            (vec![10], 1_000)
        );
        assert_eq!(before.token0_name, "USD Coin");
        let after = at(Some(1_120), weth, usdc);
        assert_eq!(after.token0_price, "0.0004", "WETH for one USDC");
        assert_eq!(after.token1_price, "2500");
        // Before the first indexed block, and after the last: the latest.
        assert_eq!(at(Some(5), usdc, weth).token0_price, "2500");
        // A pair first priced later than the time asked: its latest price.
        let late = pool(0xa3, PoolKind::V2, usdc, token(0x0d));
        store
            .write(&PriceWrite::Token {
                address: token(0x0d),
                token: Token {
                    name: "Late".into(),
                    decimals: 6,
                },
            })
            .expect("token");
        store
            .write(&PriceWrite::Block {
                update: BlockUpdate {
                    number: 21,
                    hash: alloy_primitives::B256::with_last_byte(21),
                    timestamp: 1_130,
                    pools: vec![late],
                    states: vec![(late.address, v2(3 * E6, E6))],
                },
                position: None,
            })
            .expect("block 21");
        let p = token_price(&store, &[], Some(1_000), usdc, token(0x0d)).expect("price");
        assert_eq!(
            (p.token0_price.as_str(), p.block_numbers.clone()),
            ("3", vec![21])
        );
        assert_eq!(at(Some(99_999), usdc, weth).token0_price, "2500");
        assert_eq!(at(None, usdc, weth).block_numbers, vec![20]);
    }

    #[test]
    fn routes_through_a_base_token() {
        let (store, usdc, weth, pepe) = store();
        // USDC per PEPE at block 10: 2,000 / 1,000,000.
        let p = token_price(&store, &[weth], Some(1_000), usdc, pepe).expect("price");
        assert_eq!(p.token0_price, "0.002");
        assert_eq!(p.token1_price, "500");
        assert_eq!(p.block_numbers, vec![10]);
        // Both hops' blocks are listed.
        let p = token_price(&store, &[weth], None, usdc, pepe).expect("price");
        assert_eq!(p.block_numbers, vec![10, 20]);
        assert_eq!(p.timestamp, 1_120);
        // Without the base token there is no route.
        assert!(matches!(
            token_price(&store, &[], None, usdc, pepe),
            Err(PriceError::NotFound(_))
        ));
    }

    /// A state from before the index covered the chain holds only at its
    /// own block (it was read from the nodes there); from the covered
    /// block on, until the pool's next state.
    #[test]
    fn a_state_holds_as_far_as_the_index_covers() {
        let (store, usdc, weth, _) = store();
        let at = |block, covered| {
            at_block(&store, &[], Reach { block, covered }, usdc, weth)
                .expect("read")
                .map(|answer| answer.block_numbers)
        };
        // Block 10's state, asked at 15: held if the index covers from 10.
        assert_eq!(at(15, Some(10)), Some(vec![10]));
        assert_eq!(at(15, None), Some(vec![10]));
        // Covered only from 12: block 10's state may have changed since.
        assert_eq!(at(15, Some(12)), None);
        // At its own block it holds regardless.
        assert_eq!(at(10, Some(12)), Some(vec![10]));
        // Block 20's state is past the covered block.
        assert_eq!(at(25, Some(12)), Some(vec![20]));
        assert!(
            priced_directly(
                &store,
                Reach {
                    block: 25,
                    covered: Some(12)
                },
                weth,
                usdc
            )
            .expect("read")
        );
        assert!(
            !priced_directly(
                &store,
                Reach {
                    block: 15,
                    covered: Some(12)
                },
                weth,
                usdc
            )
            .expect("read")
        );
    }

    #[test]
    fn milliseconds_are_recognised() {
        assert_eq!(seconds(1_700_000_000), 1_700_000_000);
        assert_eq!(seconds(1_700_000_000_123), 1_700_000_000);
    }
}
