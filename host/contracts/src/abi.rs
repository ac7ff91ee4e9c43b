//! The Solidity interfaces the devnet emits and the price index reads:
//! events (their `SIGNATURE_HASH` is the topic), calls (`SELECTOR`,
//! `abi_encode`) and their returns.

use alloy_sol_types::sol;

sol! {
    /// ERC-20 (the parts the server uses).
    interface IERC20 {
        event Transfer(address indexed from, address indexed to, uint256 value);
        function transfer(address to, uint256 value) external returns (bool);
        function decimals() external view returns (uint8);
        function name() external view returns (string);
    }

    /// What Uniswap V2 pairs and V3 pools (and their forks) both answer.
    interface IPool {
        function token0() external view returns (address);
        function token1() external view returns (address);
        function factory() external view returns (address);
    }

    /// Uniswap V2 pair (PancakeSwap, QuickSwap, SushiSwap share it).
    interface IUniswapV2Pair {
        event Sync(uint112 reserve0, uint112 reserve1);
        event Swap(address indexed sender, uint256 amount0In, uint256 amount1In, uint256 amount0Out, uint256 amount1Out, address indexed to);
        function swap(uint256 amount0Out, uint256 amount1Out, address to, bytes data) external;
        function getReserves() external view returns (uint112 reserve0, uint112 reserve1, uint32 blockTimestampLast);
    }

    interface IUniswapV2Factory {
        event PairCreated(address indexed token0, address indexed token1, address pair, uint256 index);
        function getPair(address tokenA, address tokenB) external view returns (address);
    }

    /// Uniswap V3 pool (PancakeSwap V3 shares it).
    interface IUniswapV3Pool {
        event Swap(address indexed sender, address indexed recipient, int256 amount0, int256 amount1, uint160 sqrtPriceX96, uint128 liquidity, int24 tick);
        function fee() external view returns (uint24);
        /// Its first word is the price; the rest differs between forks
        /// (PancakeSwap's `feeProtocol` is a uint32), so only that is read.
        function slot0() external view returns (uint160 sqrtPriceX96);
        function liquidity() external view returns (uint128);
    }

    interface IUniswapV3Factory {
        event PoolCreated(address indexed token0, address indexed token1, uint24 indexed fee, int24 tickSpacing, address pool);
        function getPool(address tokenA, address tokenB, uint24 fee) external view returns (address);
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::b256;
    use alloy_sol_types::{SolCall, SolEvent};

    use super::*;

    #[test]
    fn topics_are_the_real_ones() {
        assert_eq!(
            IERC20::Transfer::SIGNATURE_HASH,
            b256!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef")
        );
        assert_eq!(
            IUniswapV2Pair::Sync::SIGNATURE_HASH,
            b256!("0x1c411e9a96e071241c2f21f7726b17ae89e3cab4c78be50e062b03a9fffbbad1")
        );
        assert_eq!(
            IUniswapV2Pair::Swap::SIGNATURE_HASH,
            b256!("0xd78ad95fa46c994b6551d0da85fc275fe613ce37657fb8d5e3d130840159d822")
        );
        assert_eq!(
            IUniswapV3Pool::Swap::SIGNATURE_HASH,
            b256!("0xc42079f94a6350d7e6235f29174924f928cc2ac818eb64fed8004e115fbcca67")
        );
        assert_eq!(
            IUniswapV2Factory::PairCreated::SIGNATURE_HASH,
            b256!("0x0d3648bd0f6ba80134a33ba9275ac585d9d315f0ad8355cddefde31afa28d0e9")
        );
        assert_eq!(
            IUniswapV3Factory::PoolCreated::SIGNATURE_HASH,
            b256!("0x783cca1c0412dd0d695e784568c96da2e9c22ff989357a2e8b1d9b2b4e6b7118")
        );
        assert_eq!(IERC20::transferCall::SELECTOR, [0xa9, 0x05, 0x9c, 0xbb]);
        assert_eq!(IUniswapV2Pair::swapCall::SELECTOR, [0x02, 0x2c, 0x0d, 0x9f]);
    }
}
