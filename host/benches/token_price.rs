//! `token_price` queries per second on a history of 1,000,000 pool states
//! (1,000 pools of 1,000 pairs, one state each per block over 1,000
//! blocks), in the redb file the server would use, at random past times.
//! docs/src/benchmarks.md reports the figure.
//!
//! Run: `cargo bench -p chainsieve --bench token_price`

use alloy_primitives::{Address, U256};
use chainsieve_price::query::token_price;
use chainsieve_price::store::{
    BlockUpdate, Pool, PoolKind, PoolState, PriceStore, PriceWrite, Token,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const POOLS: u64 = 1_000;
const BLOCKS: u64 = 1_000;

fn address(kind: u8, i: u64) -> Address {
    let mut a = [kind; 20];
    a[12..].copy_from_slice(&i.to_be_bytes());
    Address::from(a)
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = PriceStore::open(&dir.path().join("bench.redb")).expect("store");
    let quote = address(0xee, 0);
    store
        .write(&PriceWrite::Token {
            address: quote,
            token: Token {
                name: "Quote".into(),
                decimals: 6,
            },
        })
        .expect("token");
    let pools: Vec<Pool> = (0..POOLS)
        .map(|i| {
            let base = address(0xbb, i);
            store
                .write(&PriceWrite::Token {
                    address: base,
                    token: Token {
                        name: format!("Base {i}"),
                        decimals: 18,
                    },
                })
                .expect("token");
            Pool {
                address: address(0xaa, i),
                kind: if i % 2 == 0 {
                    PoolKind::V2
                } else {
                    PoolKind::V3
                },
                token0: base.min(quote),
                token1: base.max(quote),
                factory: address(0xff, 0),
            }
        })
        .collect();
    for block in 0..BLOCKS {
        let states = pools
            .iter()
            .enumerate()
            .map(|(i, pool)| {
                let x = U256::from(1_000_000 + block * 7 + i as u64);
                let state = match pool.kind {
                    PoolKind::V2 => PoolState::V2 {
                        reserve0: x * U256::from(10u64).pow(U256::from(12)),
                        reserve1: x,
                    },
                    PoolKind::V3 => PoolState::V3 {
                        sqrt_price_x96: x << 80,
                        liquidity: 1_000_000,
                    },
                };
                (pool.address, state)
            })
            .collect();
        store
            .write(&PriceWrite::Block {
                update: BlockUpdate {
                    number: block,
                    hash: alloy_primitives::B256::with_last_byte(block as u8),
                    timestamp: 1_700_000_000 + block * 12,
                    pools: if block == 0 {
                        pools.clone()
                    } else {
                        Vec::new()
                    },
                    states,
                },
                position: None,
            })
            .expect("block");
    }
    let mut group = c.benchmark_group("token_price");
    group.throughput(Throughput::Elements(1));
    let mut n: u64 = 0;
    group.bench_function("1M states, random pair and time", |b| {
        b.iter(|| {
            // A cheap spread over pairs and times (an LCG step).
            n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let pool = &pools[(n >> 33) as usize % pools.len()];
            let time = 1_700_000_000 + (n >> 20) % (BLOCKS * 12);
            let base = if pool.token0 == quote {
                pool.token1
            } else {
                pool.token0
            };
            token_price(&store, &[], Some(time), quote, base).expect("price")
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
