//! On-chain token prices from DEX pools (`token_price`).
//!
//! - [`math`]: exact pool prices, liquidity weighting, decimal output.
//! - [`store`]: the price history in an embedded database.
pub mod math;
pub mod store;
