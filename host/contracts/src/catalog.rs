//! The well-known tokens and DEX factories of each chain, at their real
//! addresses: the devnet trades these tokens in these factories' pairs, and
//! the price index trusts these factories and routes through these tokens
//! by default.

use alloy_primitives::{Address, B256, address, b256, keccak256};

/// A DEX pool kind: what its state events carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PoolKind {
    /// Uniswap V2 style: `Sync(reserve0, reserve1)`.
    V2,
    /// Uniswap V3 style: `Swap(…, sqrtPriceX96, liquidity, tick)`.
    V3,
}

/// A token at its real address on its chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownToken {
    pub symbol: &'static str,
    /// What its `name()` returns on that chain.
    pub name: &'static str,
    pub address: Address,
    pub decimals: u8,
}

/// A DEX factory whose pools may set prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Factory {
    pub name: &'static str,
    pub address: Address,
    pub kind: PoolKind,
    /// The init code hash of a V2 factory's pair contract, where the devnet
    /// derives that factory's pair addresses.
    pub pair_init_code_hash: Option<B256>,
}

impl Factory {
    /// The address this V2 factory gives the pair of two tokens (either
    /// order): CREATE2 with salt `keccak256(token0 ++ token1)`, as
    /// `UniswapV2Factory` deploys it; `None` without the init code hash.
    pub fn pair_address(&self, a: Address, b: Address) -> Option<Address> {
        let init_code_hash = self.pair_init_code_hash?;
        let (token0, token1) = if a < b { (a, b) } else { (b, a) };
        let mut salt = [0u8; 40];
        salt[..20].copy_from_slice(token0.as_slice());
        salt[20..].copy_from_slice(token1.as_slice());
        Some(self.address.create2(keccak256(salt), init_code_hash))
    }
}

/// What one chain has.
#[derive(Debug)]
pub struct Catalog {
    /// The tokens the devnet trades. The first is a stablecoin: tests and
    /// examples filter on `known_tokens(chain)[0]`, so keep it first.
    pub tokens: &'static [KnownToken],
    /// Tokens a price may route through when a pair has no pool of its own,
    /// in order of preference (the chain's wrapped native coin, then
    /// stablecoins).
    pub base_tokens: &'static [Address],
    /// The factories whose pools the price index trusts by default.
    pub factories: &'static [Factory],
}

/// The catalog of Ethereum (1), BNB Chain (56) or Polygon (137); `None`
/// for other chains.
pub fn for_chain(chain_id: u64) -> Option<&'static Catalog> {
    match chain_id {
        1 => Some(&ETHEREUM),
        56 => Some(&BSC),
        137 => Some(&POLYGON),
        _ => None,
    }
}

pub const ETHEREUM: Catalog = Catalog {
    tokens: &[ethereum::USDC, ethereum::WETH, ethereum::USDT],
    base_tokens: &[
        ethereum::WETH.address,
        ethereum::USDC.address,
        ethereum::USDT.address,
    ],
    factories: &[
        ethereum::UNISWAP_V2,
        ethereum::SUSHISWAP,
        ethereum::UNISWAP_V3,
    ],
};

pub const BSC: Catalog = Catalog {
    tokens: &[bsc::USDT, bsc::WBNB],
    base_tokens: &[bsc::WBNB.address, bsc::USDT.address],
    factories: &[bsc::PANCAKESWAP_V2, bsc::PANCAKESWAP_V3, bsc::UNISWAP_V3],
};

pub const POLYGON: Catalog = Catalog {
    tokens: &[polygon::USDC, polygon::WPOL],
    base_tokens: &[polygon::WPOL.address, polygon::USDC.address],
    factories: &[polygon::QUICKSWAP, polygon::SUSHISWAP, polygon::UNISWAP_V3],
};

/// The init code hash of Uniswap V2's pair contract (QuickSwap deploys the
/// same).
const UNISWAP_V2_PAIR: B256 =
    b256!("0x96e8ac4277198ff8b6f785478aa9a39f403cb768dd02cbee326c3e7da348845f");

const fn v2(name: &'static str, address: Address, pair_init_code_hash: Option<B256>) -> Factory {
    Factory {
        name,
        address,
        kind: PoolKind::V2,
        pair_init_code_hash,
    }
}

const fn v3(name: &'static str, address: Address) -> Factory {
    Factory {
        name,
        address,
        kind: PoolKind::V3,
        pair_init_code_hash: None,
    }
}

/// Ethereum mainnet.
pub mod ethereum {
    use super::*;

    pub const USDC: KnownToken = KnownToken {
        symbol: "USDC",
        name: "USD Coin",
        address: address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        decimals: 6,
    };
    pub const WETH: KnownToken = KnownToken {
        symbol: "WETH",
        name: "Wrapped Ether",
        address: address!("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2"),
        decimals: 18,
    };
    pub const USDT: KnownToken = KnownToken {
        symbol: "USDT",
        name: "Tether USD",
        address: address!("0xdAC17F958D2ee523a2206206994597C13D831ec7"),
        decimals: 6,
    };

    pub const UNISWAP_V2: Factory = v2(
        "Uniswap V2",
        address!("0x5C69bEe701ef814a2B6a3EDD4B1652CB9cc5aA6f"),
        Some(UNISWAP_V2_PAIR),
    );
    pub const SUSHISWAP: Factory = v2(
        "SushiSwap",
        address!("0xC0AEe478e3658e2610c5F7A4A2E1777cE9e4f2Ac"),
        None,
    );
    pub const UNISWAP_V3: Factory = v3(
        "Uniswap V3",
        address!("0x1F98431c8aD98523631AE4a59f267346ea31F984"),
    );
}

/// BNB Chain.
pub mod bsc {
    use super::*;

    pub const USDT: KnownToken = KnownToken {
        symbol: "USDT",
        name: "Tether USD",
        address: address!("0x55d398326f99059fF775485246999027B3197955"),
        decimals: 18,
    };
    pub const WBNB: KnownToken = KnownToken {
        symbol: "WBNB",
        name: "Wrapped BNB",
        address: address!("0xbb4CdB9CBd36B01bD1cBaEBF2De08d9173bc095c"),
        decimals: 18,
    };

    pub const PANCAKESWAP_V2: Factory = v2(
        "PancakeSwap V2",
        address!("0xcA143Ce32Fe78f1f7019d7d551a6402fC5350c73"),
        Some(b256!(
            "0x00fb7f630766e6a796048ea87d01acd3068e8ff67d078148a3fa3f4a84f69bd5"
        )),
    );
    pub const PANCAKESWAP_V3: Factory = v3(
        "PancakeSwap V3",
        address!("0x0BFbCF9fa4f9C56B0F40a671Ad40E0805A091865"),
    );
    pub const UNISWAP_V3: Factory = v3(
        "Uniswap V3",
        address!("0xdB1d10011AD0Ff90774D0C6Bb92e5C5c8b4461F7"),
    );
}

/// Polygon PoS.
pub mod polygon {
    use super::*;

    pub const USDC: KnownToken = KnownToken {
        symbol: "USDC",
        name: "USD Coin",
        address: address!("0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"),
        decimals: 6,
    };
    pub const WPOL: KnownToken = KnownToken {
        symbol: "WPOL",
        name: "Wrapped Polygon Ecosystem Token",
        address: address!("0x0d500B1d8E8eF31E21C99d1Db9A6444d3ADf1270"),
        decimals: 18,
    };

    pub const QUICKSWAP: Factory = v2(
        "QuickSwap",
        address!("0x5757371414417b8C6CAad45bAeF941aBc7d3Ab32"),
        Some(UNISWAP_V2_PAIR),
    );
    pub const SUSHISWAP: Factory = v2(
        "SushiSwap",
        address!("0xc35DADB65012eC5796536bD9864eD8773aBc74C4"),
        None,
    );
    pub const UNISWAP_V3: Factory = v3(
        "Uniswap V3",
        address!("0x1F98431c8aD98523631AE4a59f267346ea31F984"),
    );
}
