//! On-chain token prices from DEX pools (`token_price`).
//!
//! - [`calls`]: contract calls against the chain's source (node or devnet).
//! - [`dex`]: pool events, identifying calls, default factories and base tokens.
//! - [`indexer`]: pool events of canonical blocks into the store; rollbacks.
//! - [`math`]: exact pool prices, liquidity weighting, decimal output.
//! - [`query`]: the `token_price` answer: pools at a time, routes.
//! - [`store`]: the price history in an embedded database.
pub mod calls;
pub mod dex;
pub mod indexer;
pub mod math;
pub mod query;
pub mod store;
