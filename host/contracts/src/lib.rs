//! The contracts the server knows by heart, below both the devnet and the
//! price index (it imports neither):
//!
//! - [`abi`]: the Solidity interfaces (ERC-20, Uniswap V2 and V3), each
//!   defined once with `sol!`.
//! - [`catalog`]: the well-known tokens and DEX factories of each chain.
//!
//! May use (docs/src/architecture.md, Crates): no other crate of the
//! workspace.

pub mod abi;
pub mod catalog;
