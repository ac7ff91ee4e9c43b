//! On-chain token prices from DEX pools (`token_price`).
//!
//! - [`math`]: exact pool prices, liquidity weighting, decimal output.
pub mod math;
