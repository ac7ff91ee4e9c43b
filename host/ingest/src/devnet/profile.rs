//! How each chain looks to the devnet: its cadence, gas and fees, and the
//! catalog's tokens and V2 pairs it trades in.

use alloy_primitives::Address;

use chainsieve_contracts::catalog::{self, Factory, KnownToken, bsc, ethereum, polygon};
use chainsieve_model::{FinalMark, SourceEvent};

/// A Uniswap-V2-style pair, at the address its factory derives by CREATE2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownPool {
    pub dex: &'static str,
    pub factory: Address,
    pub address: Address,
    /// The lower-sorted token, as the pair contract orders them.
    pub token0: Address,
    pub token1: Address,
}

/// A pool the devnet trades in, with its starting reserves in whole tokens
/// (they set the starting price: ~3,000 USD per ETH, ~600 per BNB, ~0.25
/// per POL).
pub(super) struct PoolSpec {
    factory: &'static Factory,
    pub(super) a: &'static str,
    pub(super) b: &'static str,
    pub(super) units_a: u64,
    pub(super) units_b: u64,
}

/// How one chain looks, as it runs in 2026: gas, fees, tokens and pools
/// (its cadence is [`chainsieve_config::cadence`]).
pub(super) struct Profile {
    pub(super) gas_limit: u64,
    /// Base fee per gas in wei, kept fixed: at devnet loads (far below the
    /// gas target) the EIP-1559 rule would sink it to a few wei within a few
    /// hundred blocks, which no real chain shows. BNB Chain's is 0 (its
    /// validators' 0.05 gwei minimum gas price is the tip).
    pub(super) base_fee: u64,
    /// The typical priority fee (EIP-1559) or premium over the base fee
    /// (legacy); each transaction pays 1–3 times it.
    pub(super) tip: u128,
    /// Whether the chain takes EIP-4844 blob transactions (Polygon PoS
    /// does not).
    pub(super) blobs: bool,
    /// How far below the tip the `safe` and `finalized` blocks are.
    pub(super) finality: FinalityDepths,
    pub(super) tokens: &'static [KnownToken],
    pub(super) pools: &'static [PoolSpec],
}

/// How far below the tip a chain's `safe` and `finalized` blocks are, as
/// the devnet reports them (docs/src/devnet.md, Finality).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalityDepths {
    pub safe: u64,
    pub finalized: u64,
}

impl FinalityDepths {
    /// At least one block deeper than the devnet's reorgs (`reorg_depth`,
    /// when reorgs are on), so no reorg reaches a final block.
    pub(super) fn beyond(self, reorg_depth: Option<u64>) -> Self {
        let least = reorg_depth.map_or(0, |depth| depth + 1);
        Self {
            safe: self.safe.max(least),
            finalized: self.finalized.max(least),
        }
    }

    /// What the chain's finality is once block `tip` is its head.
    pub(super) fn at(self, tip: u64) -> SourceEvent {
        let mark = |depth: u64| {
            tip.checked_sub(depth)
                .map(|number| FinalMark { number, hash: None })
        };
        SourceEvent::Finality {
            safe: mark(self.safe),
            finalized: mark(self.finalized),
        }
    }
}

/// The profile of `chain_id`; an unknown id gets Ethereum's.
pub(super) fn profile(chain_id: u64) -> Profile {
    match chain_id {
        // BEP-619 (Fermi, January 2026): 0.45 s blocks of 45 M gas.
        56 => Profile {
            gas_limit: 45_000_000,
            base_fee: 0,
            tip: 50_000_000,
            blobs: true,
            // Fast finality: a block is finalized once the next two have
            // votes from two thirds of the validators.
            finality: FinalityDepths {
                safe: 1,
                finalized: 2,
            },
            tokens: catalog::BSC.tokens,
            pools: &[PoolSpec {
                factory: &bsc::PANCAKESWAP_V2,
                a: "WBNB",
                b: "USDT",
                units_a: 20_000,
                units_b: 12_000_000,
            }],
        },
        // Rio (October 2025): 60 M gas; tips from 25 gwei, base fees of
        // tens of gwei.
        137 => Profile {
            gas_limit: 60_000_000,
            base_fee: 30_000_000_000,
            tip: 30_000_000_000,
            blobs: false,
            // Milestones: finality within seconds, some 16 blocks.
            finality: FinalityDepths {
                safe: 8,
                finalized: 16,
            },
            tokens: catalog::POLYGON.tokens,
            pools: &[PoolSpec {
                factory: &polygon::QUICKSWAP,
                a: "WPOL",
                b: "USDC",
                units_a: 10_000_000,
                units_b: 2_500_000,
            }],
        },
        // 60 M gas since November 2025; base fees well under a gwei.
        _ => Profile {
            gas_limit: 60_000_000,
            base_fee: 500_000_000,
            tip: 100_000_000,
            blobs: true,
            // Two epochs of 32 slots to finality; one to `safe` (justified).
            finality: FinalityDepths {
                safe: 32,
                finalized: 64,
            },
            tokens: catalog::ETHEREUM.tokens,
            pools: &[
                PoolSpec {
                    factory: &ethereum::UNISWAP_V2,
                    a: "WETH",
                    b: "USDC",
                    units_a: 10_000,
                    units_b: 30_000_000,
                },
                PoolSpec {
                    factory: &ethereum::UNISWAP_V2,
                    a: "WETH",
                    b: "USDT",
                    units_a: 8_000,
                    units_b: 24_000_000,
                },
            ],
        },
    }
}

/// The tip a wallet pays on `chain_id` today (Ethereum's for unknown ids):
/// what the devnet's transactions pay at least, and suggests.
pub fn typical_tip(chain_id: u64) -> u128 {
    profile(chain_id).tip
}

/// The tokens the devnet of `chain_id` trades (Ethereum's for unknown ids,
/// as the devnet then behaves like Ethereum).
pub fn known_tokens(chain_id: u64) -> &'static [KnownToken] {
    profile(chain_id).tokens
}

/// The pools the devnet of `chain_id` trades in (Ethereum's for unknown ids).
pub fn known_pools(chain_id: u64) -> Vec<KnownPool> {
    let profile = profile(chain_id);
    profile
        .pools
        .iter()
        .map(|spec| pool_info(profile.tokens, spec))
        .collect()
}

pub(super) fn token(tokens: &[KnownToken], symbol: &str) -> KnownToken {
    *tokens
        .iter()
        .find(|t| t.symbol == symbol)
        .expect("pools name listed tokens")
}

pub(super) fn pool_info(tokens: &[KnownToken], spec: &PoolSpec) -> KnownPool {
    let (a, b) = (token(tokens, spec.a).address, token(tokens, spec.b).address);
    KnownPool {
        dex: spec.factory.name,
        factory: spec.factory.address,
        address: spec
            .factory
            .pair_address(a, b)
            .expect("the devnet's pools are in V2 factories of known init code"),
        token0: a.min(b),
        token1: a.max(b),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use alloy_primitives::address;

    use super::*;

    #[test]
    fn real_mainnet_pair_addresses() {
        let pools = known_pools(1);
        assert_eq!(
            pools[0].address,
            address!("0xB4e16d0168e52d35CaCD2c6185b44281Ec28C9Dc"),
            "Uniswap V2 WETH/USDC"
        );
        assert_eq!(
            pools[1].address,
            address!("0x0d4a11d5EEaaC28EC3F61d100daF4d40471f1852"),
            "Uniswap V2 WETH/USDT"
        );
        assert_eq!(
            known_pools(56)[0].address,
            address!("0x16b9a82891338f9bA80E2D6970FddA79D1eb0daE"),
            "PancakeSwap V2 WBNB/USDT"
        );
        for chain in [1, 56, 137] {
            let tokens: HashSet<Address> = known_tokens(chain).iter().map(|t| t.address).collect();
            for pool in known_pools(chain) {
                assert!(pool.token0 < pool.token1);
                assert!(tokens.contains(&pool.token0) && tokens.contains(&pool.token1));
                assert_eq!(
                    Some(pool.address),
                    factory(chain, pool.factory).pair_address(pool.token1, pool.token0),
                    "either token order gives the same pair"
                );
            }
        }
    }

    fn factory(chain_id: u64, address: Address) -> Factory {
        *catalog::for_chain(chain_id)
            .expect("a catalogued chain")
            .factories
            .iter()
            .find(|f| f.address == address)
            .expect("a catalogued factory")
    }
}
