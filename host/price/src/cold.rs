//! What the index does not hold, read from the chain's nodes
//! (docs/src/api.md, token_price): the block of a time before the index
//! began, and a pair's pools and their state at a block. The trusted
//! factories name the pools (`getPair`, `getPool` for each fee tier), so
//! the trust rule is the index's; what is read is written to the store,
//! so the same question goes to the nodes once.

use std::num::NonZeroU32;
use std::time::Duration;

use alloy_primitives::{Address, B256, Bytes, U64, U256};
use alloy_sol_types::SolCall;
use governor::DefaultDirectRateLimiter;
use serde_json::json;

use super::backfill::HeaderFields;
use super::query::PriceError;
use super::store::{BlockUpdate, Pool, PoolKind, PoolState, PriceStore, PriceWrite, Token};
use chainsieve_contracts::abi::{
    IERC20, IUniswapV2Factory, IUniswapV2Pair, IUniswapV3Factory, IUniswapV3Pool,
};
use chainsieve_contracts::catalog::Factory;
use chainsieve_node::{At, Call, NodeError, NodePool, decode, single};

/// The fee tiers of the V3 factories the catalog trusts (Uniswap's 100,
/// 500, 3000, 10000; PancakeSwap's 2500): a tier a factory lacks names no
/// pool.
const FEE_TIERS: [u32; 5] = [100, 500, 2_500, 3_000, 10_000];

/// How long the nodes may take to answer one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A block as the cold path needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub number: u64,
    pub hash: B256,
    pub timestamp: u64,
}

/// One request's reads of the nodes, at most `left` calls, within the
/// chain's calls a second.
pub struct ColdRead<'a> {
    nodes: &'a NodePool,
    store: &'a PriceStore,
    factories: &'a [Factory],
    /// The chain's `token_price` calls of its nodes a second (`[price]
    /// node_calls_per_second`), shared by every request, so that
    /// questions about many pairs cannot take the nodes' capacity.
    budget: &'a DefaultDirectRateLimiter,
    /// Calls this request may still make (`[price] max_node_calls`).
    left: u32,
    /// The request's limit, for the message when it is reached.
    max: u32,
}

impl<'a> ColdRead<'a> {
    pub fn new(
        nodes: &'a NodePool,
        store: &'a PriceStore,
        factories: &'a [Factory],
        budget: &'a DefaultDirectRateLimiter,
        max: u32,
    ) -> Self {
        Self {
            nodes,
            store,
            factories,
            budget,
            left: max,
            max,
        }
    }

    /// Takes `calls` from the request's allowance and the chain's.
    fn spend(&mut self, calls: u32) -> Result<(), PriceError> {
        self.left = self.left.checked_sub(calls).ok_or_else(|| {
            PriceError::TooCostly(format!(
                "the answer needs more than {} calls of the nodes ([price] max_node_calls)",
                self.max
            ))
        })?;
        let calls = NonZeroU32::new(calls).unwrap_or(NonZeroU32::MIN);
        self.budget.check_n(calls).ok().and_then(Result::ok).ok_or_else(|| {
            PriceError::TooCostly(
                "prices have made as many calls of the nodes as they may this second ([price] node_calls_per_second): ask again shortly".into(),
            )
        })
    }

    /// Block `number`'s header.
    pub async fn header(&mut self, number: u64) -> Result<Header, PriceError> {
        self.spend(1)?;
        let call = [Call::new(
            "eth_getBlockByNumber",
            json!([U64::from(number), false]),
        )];
        let answer = self
            .nodes
            .batch_at(&call, At::Block(number), CALL_TIMEOUT, None)
            .await
            .and_then(|answers| single::<Option<HeaderFields>>("eth_getBlockByNumber", answers))
            .map_err(|error| unavailable(&format!("reading block {number}"), &error))?;
        let fields = answer.ok_or_else(|| {
            PriceError::Unavailable(format!("the nodes do not hold block {number}"))
        })?;
        Ok(Header {
            number: fields.number.to(),
            hash: fields.hash,
            timestamp: fields.timestamp.to(),
        })
    }

    /// The newest block at or before `time`, searched between `low`
    /// (at or before it) and `high` (after it) by interpolation, halving
    /// where that does not narrow the span fast enough.
    pub async fn block_at_time(
        &mut self,
        time: u64,
        mut low: Header,
        mut high: Header,
    ) -> Result<Header, PriceError> {
        let mut halve = false;
        while high.number > low.number + 1 {
            let span = high.number - low.number;
            let guess = if halve {
                low.number + span / 2
            } else {
                let elapsed = u128::from(time - low.timestamp);
                let duration = u128::from(high.timestamp.saturating_sub(low.timestamp)).max(1);
                let step = u64::try_from(elapsed * u128::from(span) / duration).unwrap_or(span);
                low.number + step.clamp(1, span - 1)
            };
            let probe = self.header(guess).await?;
            if probe.timestamp <= time {
                low = probe;
            } else {
                high = probe;
            }
            // Interpolation and halving take turns once a probe left more
            // than half the span.
            halve = !halve && high.number - low.number > span / 2;
        }
        Ok(low)
    }

    /// Learns the pools that price `a` against `b` at block `at` (their
    /// own, or through the first of `vias` both hops have pools for,
    /// skipping a hop `known` says the store prices already), reads their
    /// state there and the tokens' metadata, and writes it all to the
    /// store.
    pub async fn learn(
        &mut self,
        at: Header,
        a: Address,
        b: Address,
        vias: &[Address],
        known: impl Fn(Address, Address) -> Result<bool, PriceError>,
    ) -> Result<(), PriceError> {
        let mut pools = self.pools_of(at, a, b).await?;
        let mut tokens = vec![a, b];
        if pools.is_empty() {
            for &via in vias.iter().filter(|via| **via != a && **via != b) {
                let Some(first) = self.hop(at, a, via, &known).await? else {
                    continue;
                };
                let Some(second) = self.hop(at, via, b, &known).await? else {
                    continue;
                };
                pools = [first, second].concat();
                tokens.push(via);
                break;
            }
        }
        let states = self.states(at, &pools).await?;
        self.tokens(&tokens).await?;
        let update = BlockUpdate {
            number: at.number,
            hash: at.hash,
            timestamp: at.timestamp,
            pools,
            states,
        };
        // A block reorganised out meanwhile is not written: the answer is
        // then read again from the store, which no longer holds it.
        self.store.write_unless_replaced(&update)?;
        Ok(())
    }

    /// The pools one hop of a route needs read: none if the store prices
    /// it already; `None` if no pool of the pair exists at `at`.
    async fn hop(
        &mut self,
        at: Header,
        x: Address,
        y: Address,
        known: &impl Fn(Address, Address) -> Result<bool, PriceError>,
    ) -> Result<Option<Vec<Pool>>, PriceError> {
        if known(x, y)? {
            return Ok(Some(Vec::new()));
        }
        let pools = self.pools_of(at, x, y).await?;
        Ok((!pools.is_empty()).then_some(pools))
    }

    /// The trusted factories' pools of the pair at block `at`, every
    /// factory and fee tier asked at once.
    async fn pools_of(
        &mut self,
        at: Header,
        a: Address,
        b: Address,
    ) -> Result<Vec<Pool>, PriceError> {
        let (token0, token1) = if a < b { (a, b) } else { (b, a) };
        let mut asks: Vec<(&Factory, Bytes)> = Vec::new();
        for factory in self.factories {
            match factory.kind {
                PoolKind::V2 => asks.push((
                    factory,
                    IUniswapV2Factory::getPairCall {
                        tokenA: token0,
                        tokenB: token1,
                    }
                    .abi_encode()
                    .into(),
                )),
                PoolKind::V3 => asks.extend(FEE_TIERS.iter().map(|&fee| {
                    let call = IUniswapV3Factory::getPoolCall {
                        tokenA: token0,
                        tokenB: token1,
                        fee: fee.try_into().unwrap_or_default(),
                    };
                    (factory, call.abi_encode().into())
                })),
            }
        }
        let answers = self
            .calls(
                Some(at),
                asks.iter()
                    .map(|(factory, data)| (factory.address, data.clone())),
            )
            .await?;
        let mut found: Vec<Pool> = Vec::new();
        for ((factory, _), raw) in asks.iter().zip(answers) {
            let pool = raw
                .filter(|raw| raw.len() >= 32)
                .map(|raw| Address::from_word(B256::from_slice(&raw[..32])))
                .filter(|pool| !pool.is_zero());
            if let Some(pool) = pool.filter(|pool| !found.iter().any(|f| f.address == *pool)) {
                found.push(Pool {
                    address: pool,
                    kind: factory.kind,
                    token0,
                    token1,
                    factory: factory.address,
                });
            }
        }
        Ok(found)
    }

    /// The pools' states at block `at`, read at once: a V2 pair's
    /// reserves, a V3 pool's price and liquidity. A pool that does not
    /// answer is left out.
    async fn states(
        &mut self,
        at: Header,
        pools: &[Pool],
    ) -> Result<Vec<(Address, PoolState)>, PriceError> {
        let mut asks: Vec<(Address, Bytes)> = Vec::new();
        for pool in pools {
            match pool.kind {
                PoolKind::V2 => asks.push((
                    pool.address,
                    IUniswapV2Pair::getReservesCall {}.abi_encode().into(),
                )),
                PoolKind::V3 => {
                    asks.push((
                        pool.address,
                        IUniswapV3Pool::slot0Call {}.abi_encode().into(),
                    ));
                    asks.push((
                        pool.address,
                        IUniswapV3Pool::liquidityCall {}.abi_encode().into(),
                    ));
                }
            }
        }
        let mut answers = self.calls(Some(at), asks).await?.into_iter();
        let mut states = Vec::with_capacity(pools.len());
        for pool in pools {
            let state = match pool.kind {
                PoolKind::V2 => {
                    decoded::<IUniswapV2Pair::getReservesCall>(answers.next()).map(|r| {
                        PoolState::V2 {
                            reserve0: U256::from(r.reserve0),
                            reserve1: U256::from(r.reserve1),
                        }
                    })
                }
                PoolKind::V3 => {
                    let price = decoded::<IUniswapV3Pool::slot0Call>(answers.next());
                    let liquidity = decoded::<IUniswapV3Pool::liquidityCall>(answers.next());
                    price
                        .zip(liquidity)
                        .map(|(price, liquidity)| PoolState::V3 {
                            sqrt_price_x96: U256::from(price),
                            liquidity,
                        })
                }
            };
            states.extend(state.map(|state| (pool.address, state)));
        }
        Ok(states)
    }

    /// Stores the tokens' decimals and names the store lacks, read at
    /// once; a token without readable decimals is left out (no price uses
    /// it).
    async fn tokens(&mut self, tokens: &[Address]) -> Result<(), PriceError> {
        let mut missing = Vec::new();
        for &token in tokens {
            if self.store.token(token)?.is_none() {
                missing.push(token);
            }
        }
        let asks = missing.iter().flat_map(|&token| {
            [
                (token, Bytes::from(IERC20::decimalsCall {}.abi_encode())),
                (token, Bytes::from(IERC20::nameCall {}.abi_encode())),
            ]
        });
        let mut answers = self.calls(None, asks).await?.into_iter();
        for token in missing {
            let decimals = decoded::<IERC20::decimalsCall>(answers.next());
            let name = answers
                .next()
                .flatten()
                .map(|raw| super::indexer::name_of(&raw))
                .unwrap_or_default();
            if let Some(decimals) = decimals {
                self.store.write(&PriceWrite::Token {
                    address: token,
                    token: Token { name, decimals },
                })?;
            }
        }
        Ok(())
    }

    /// `eth_call`s in one batch, at block `at` (by hash, so a reorg
    /// meanwhile cannot answer from another block) or, without, at the
    /// latest: each one's return data, `None` when it reverted or `to` had
    /// no code there. An error answer fails a whole batch, so then each
    /// call is asked alone to tell a revert from the rest: an error answer
    /// other than a revert at a block means the nodes no longer hold its
    /// state.
    async fn calls(
        &mut self,
        at: Option<Header>,
        asks: impl IntoIterator<Item = (Address, Bytes)>,
    ) -> Result<Vec<Option<Bytes>>, PriceError> {
        let asks: Vec<(Address, Bytes)> = asks.into_iter().collect();
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        self.spend(u32::try_from(asks.len()).unwrap_or(u32::MAX))?;
        let (block, read_at) = match at {
            Some(at) => (json!({"blockHash": at.hash}), At::Block(at.number)),
            None => (json!("latest"), At::Any),
        };
        let failed = |error: NodeError| match (at, error) {
            (Some(at), NodeError::Rpc { message, .. }) => PriceError::NoState(format!(
                "the nodes cannot read state at block {}: {message} (state that old needs archive nodes)",
                at.number
            )),
            (Some(at), other) => {
                unavailable(&format!("reading state at block {}", at.number), &other)
            }
            (None, other) => unavailable("reading tokens", &other),
        };
        let batch: Vec<Call> = asks
            .iter()
            .map(|(to, data)| Call::new("eth_call", json!([{"to": to, "data": data}, block])))
            .collect();
        match self
            .nodes
            .batch_at(&batch, read_at, CALL_TIMEOUT, None)
            .await
        {
            Ok(answers) => answers
                .iter()
                .map(|raw| {
                    let bytes: Bytes = decode("eth_call", raw).map_err(failed)?;
                    Ok((!bytes.is_empty()).then_some(bytes))
                })
                .collect(),
            Err(NodeError::Rpc { .. }) => {
                let mut each = Vec::with_capacity(asks.len());
                for (to, data) in asks {
                    each.push(
                        self.eth_call(to, data, block.clone(), read_at)
                            .await
                            .map_err(failed)?,
                    );
                }
                Ok(each)
            }
            Err(other) => Err(failed(other)),
        }
    }

    /// One `eth_call`; a revert (or no code: empty return data) is `None`,
    /// any other error answer the node's.
    async fn eth_call(
        &self,
        to: Address,
        data: Bytes,
        block: serde_json::Value,
        at: At,
    ) -> Result<Option<Bytes>, NodeError> {
        let call = [Call::new(
            "eth_call",
            json!([{"to": to, "data": data}, block]),
        )];
        match self.nodes.batch_at(&call, at, CALL_TIMEOUT, None).await {
            Ok(mut answers) => {
                let raw = answers.pop().ok_or(NodeError::Closed)?;
                let bytes: Bytes = decode("eth_call", &raw)?;
                Ok((!bytes.is_empty()).then_some(bytes))
            }
            Err(NodeError::Rpc { code, message, .. }) if reverted(code, &message) => Ok(None),
            Err(other) => Err(other),
        }
    }
}

/// A call's return decoded, if it answered and decodes.
fn decoded<C: SolCall>(raw: Option<Option<Bytes>>) -> Option<C::Return> {
    raw.flatten()
        .and_then(|raw| C::abi_decode_returns(&raw).ok())
}

/// Whether a node's error answer to `eth_call` says the call reverted
/// (EIP-1474's 3 "execution reverted", or the message geth, erigon,
/// reth and anvil give), rather than that the state is not there.
fn reverted(code: i64, message: &str) -> bool {
    code == 3 || message.to_ascii_lowercase().contains("revert")
}

fn unavailable(doing: &str, error: &NodeError) -> PriceError {
    PriceError::Unavailable(format!("{doing} from the nodes failed: {error}"))
}
