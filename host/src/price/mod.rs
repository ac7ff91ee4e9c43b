//! On-chain token prices from DEX pools (`token_price`).
//!
//! - [`dex`]: pool events, identifying calls, default factories and base tokens.
//! - [`math`]: exact pool prices, liquidity weighting, decimal output.
//! - [`query`]: the `token_price` answer: pools at a time, routes.
//! - [`store`]: the price history in an embedded database.
pub mod dex;
pub mod math;
pub mod query;
pub mod store;
