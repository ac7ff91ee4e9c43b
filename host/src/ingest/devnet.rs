//! The embedded devnet: a deterministic generator of realistic chain data
//! for one chain, the default source when no node is configured.
//!
//! From a seed it derives funded accounts and produces, at the chain's
//! cadence, pending transactions in micro-batches between blocks, then the
//! block that mines them. Transactions are really signed (legacy EIP-155 and
//! EIP-1559), so hashes and senders are what a node would report. They move
//! the native coin, transfer well-known ERC-20 tokens at their real
//! addresses, swap in Uniswap-V2-style pairs at the addresses the real
//! factories derive (with constant-product reserves), and now and then
//! create a contract, producing `Transfer`, `Sync` and `Swap` logs. Blocks
//! carry real transaction and receipt roots and logs blooms. Optional reorgs
//! re-mine the last blocks on a new branch.
//!
//! It also takes transactions from outside (`eth_sendRawTransaction`, as
//! [`Submission`]s): really signed by anyone, for this chain, in nonce
//! order. They are announced pending at once and mined by the next block
//! with room for them. The devnet runs no contract code, so they succeed,
//! use their intrinsic gas and log nothing.
//!
//! Transaction content never depends on the clock, so the same seed gives
//! the same transactions on every run; only block hashes follow the genesis
//! timestamp (fix it in the settings for a byte-identical stream).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_consensus::proofs::{calculate_receipt_root, calculate_transaction_root};
use alloy_consensus::{
    EMPTY_OMMER_ROOT_HASH, EMPTY_ROOT_HASH, Eip658Value, Header, Receipt, ReceiptEnvelope,
    ReceiptWithBloom, SignableTransaction, Signed, TxEip1559, TxEnvelope, TxLegacy,
};
use alloy_primitives::{
    Address, B256, Bytes, Log as PrimitiveLog, Signature, TxKind, U256, address, b256, keccak256,
    logs_bloom,
};
use alloy_rpc_types_eth::Log;
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::canonical::DEFAULT_WINDOW;
use super::events::SourceEvent;
use super::model::{Block, Transaction};

/// The `[devnet]` section of the config. Every key is optional.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DevnetSettings {
    /// Everything generated follows from it (with the chain id): the same
    /// seed gives the same accounts, transactions and logs. Default 1.
    pub seed: u64,
    /// Time between blocks in milliseconds. Default (`None`): the chain's
    /// own cadence, Ethereum 12 s, BNB Chain 3 s, Polygon 2 s.
    pub block_time_ms: Option<u64>,
    /// Micro-batches of pending transactions announced between two blocks
    /// (0 is read as 1). Default 4.
    pub pending_batches_per_block: u32,
    /// Transactions per block, spread over the pending micro-batches and
    /// capped by what fits the chain's gas limit. Default 12.
    pub transactions_per_block: u32,
    /// Block gas limit. Default (`None`): the chain's own, Ethereum 30 M,
    /// BNB Chain 140 M, Polygon 45 M. Raise it for submitted loads beyond
    /// what real blocks carry.
    pub gas_limit: Option<u64>,
    /// Blocks between reorgs; 0 never reorganises. Default 0.
    pub reorg_every: u64,
    /// Blocks a reorg replaces (0 disables reorgs), at most one less than
    /// the canonical tracker's window (larger values are capped: the
    /// tracker could not follow them). Default 2.
    pub reorg_depth: u64,
    /// Unix timestamp (seconds) of block 0. Default (`None`): as long
    /// before the start as `history_blocks` take, so the last of them is
    /// now. Set it for block hashes that do not change between runs.
    pub genesis_timestamp: Option<u64>,
    /// Blocks generated back to back at startup, before the real-time
    /// cadence begins: a past for `token_price` history and block lookups
    /// to answer from right away. Default 300 (an hour of Ethereum).
    pub history_blocks: u64,
}

impl Default for DevnetSettings {
    fn default() -> Self {
        Self {
            seed: 1,
            block_time_ms: None,
            pending_batches_per_block: 4,
            transactions_per_block: 12,
            gas_limit: None,
            reorg_every: 0,
            reorg_depth: 2,
            genesis_timestamp: None,
            history_blocks: 300,
        }
    }
}

/// A token the devnet trades, at its real address on its chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownToken {
    pub symbol: &'static str,
    /// What its `name()` returns on that chain.
    pub name: &'static str,
    pub address: Address,
    pub decimals: u8,
}

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

/// `Transfer(address,address,uint256)`.
pub const TRANSFER_TOPIC: B256 =
    b256!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");
/// `Sync(uint112,uint112)`.
pub const SYNC_TOPIC: B256 =
    b256!("0x1c411e9a96e071241c2f21f7726b17ae89e3cab4c78be50e062b03a9fffbbad1");
/// `Swap(address,uint256,uint256,uint256,uint256,address)`.
pub const SWAP_TOPIC: B256 =
    b256!("0xd78ad95fa46c994b6551d0da85fc275fe613ce37657fb8d5e3d130840159d822");
/// `transfer(address,uint256)`.
pub const TRANSFER_SELECTOR: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];
/// `swap(uint256,uint256,address,bytes)` of a V2 pair.
pub const SWAP_SELECTOR: [u8; 4] = [0x02, 0x2c, 0x0d, 0x9f];

// The first token of each chain is a stablecoin: tests and examples filter
// on `known_tokens(chain)[0]`, so keep it first.
const ETH_TOKENS: &[KnownToken] = &[
    KnownToken {
        symbol: "USDC",
        name: "USD Coin",
        address: address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        decimals: 6,
    },
    KnownToken {
        symbol: "WETH",
        name: "Wrapped Ether",
        address: address!("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2"),
        decimals: 18,
    },
    KnownToken {
        symbol: "USDT",
        name: "Tether USD",
        address: address!("0xdAC17F958D2ee523a2206206994597C13D831ec7"),
        decimals: 6,
    },
];
const BSC_TOKENS: &[KnownToken] = &[
    KnownToken {
        symbol: "USDT",
        name: "Tether USD",
        address: address!("0x55d398326f99059fF775485246999027B3197955"),
        decimals: 18,
    },
    KnownToken {
        symbol: "WBNB",
        name: "Wrapped BNB",
        address: address!("0xbb4CdB9CBd36B01bD1cBaEBF2De08d9173bc095c"),
        decimals: 18,
    },
];
const POLYGON_TOKENS: &[KnownToken] = &[
    KnownToken {
        symbol: "USDC",
        name: "USD Coin",
        address: address!("0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"),
        decimals: 6,
    },
    KnownToken {
        symbol: "WPOL",
        name: "Wrapped Polygon Ecosystem Token",
        address: address!("0x0d500B1d8E8eF31E21C99d1Db9A6444d3ADf1270"),
        decimals: 18,
    },
];

/// A V2 factory: name, address, init code hash of its pair contract.
struct Factory {
    dex: &'static str,
    address: Address,
    init_code_hash: B256,
}

const UNISWAP_V2: Factory = Factory {
    dex: "Uniswap V2",
    address: address!("0x5C69bEe701ef814a2B6a3EDD4B1652CB9cc5aA6f"),
    init_code_hash: b256!("0x96e8ac4277198ff8b6f785478aa9a39f403cb768dd02cbee326c3e7da348845f"),
};
const PANCAKE_V2: Factory = Factory {
    dex: "PancakeSwap V2",
    address: address!("0xcA143Ce32Fe78f1f7019d7d551a6402fC5350c73"),
    init_code_hash: b256!("0x00fb7f630766e6a796048ea87d01acd3068e8ff67d078148a3fa3f4a84f69bd5"),
};
const QUICKSWAP: Factory = Factory {
    dex: "QuickSwap",
    address: address!("0x5757371414417b8C6CAad45bAeF941aBc7d3Ab32"),
    init_code_hash: b256!("0x96e8ac4277198ff8b6f785478aa9a39f403cb768dd02cbee326c3e7da348845f"),
};

/// A pool the devnet trades in, with its starting reserves in whole tokens
/// (they set the starting price: ~3,000 USD per ETH, ~600 per BNB, ~0.25
/// per POL).
struct PoolSpec {
    factory: &'static Factory,
    a: &'static str,
    b: &'static str,
    units_a: u64,
    units_b: u64,
}

/// How one chain looks: cadence, gas, fees, tokens and pools.
struct Profile {
    block_time_ms: u64,
    gas_limit: u64,
    /// Base fee per gas in wei, kept fixed: at devnet loads (far below the
    /// gas target) the EIP-1559 rule would sink it to a few wei within a few
    /// hundred blocks, which no real chain shows. BNB Chain's is 0.
    base_fee: u64,
    /// The typical priority fee (EIP-1559) or premium over the base fee
    /// (legacy); each transaction pays 1–3 times it.
    tip: u128,
    tokens: &'static [KnownToken],
    pools: &'static [PoolSpec],
}

fn profile(chain_id: u64) -> Profile {
    match chain_id {
        56 => Profile {
            block_time_ms: 3_000,
            gas_limit: 140_000_000,
            base_fee: 0,
            tip: 1_000_000_000,
            tokens: BSC_TOKENS,
            pools: &[PoolSpec {
                factory: &PANCAKE_V2,
                a: "WBNB",
                b: "USDT",
                units_a: 20_000,
                units_b: 12_000_000,
            }],
        },
        137 => Profile {
            block_time_ms: 2_000,
            gas_limit: 45_000_000,
            base_fee: 30_000_000_000,
            tip: 30_000_000_000,
            tokens: POLYGON_TOKENS,
            pools: &[PoolSpec {
                factory: &QUICKSWAP,
                a: "WPOL",
                b: "USDC",
                units_a: 10_000_000,
                units_b: 2_500_000,
            }],
        },
        _ => Profile {
            block_time_ms: 12_000,
            gas_limit: 30_000_000,
            base_fee: 12_000_000_000,
            tip: 1_000_000_000,
            tokens: ETH_TOKENS,
            pools: &[
                PoolSpec {
                    factory: &UNISWAP_V2,
                    a: "WETH",
                    b: "USDC",
                    units_a: 10_000,
                    units_b: 30_000_000,
                },
                PoolSpec {
                    factory: &UNISWAP_V2,
                    a: "WETH",
                    b: "USDT",
                    units_a: 8_000,
                    units_b: 24_000_000,
                },
            ],
        },
    }
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

/// The address a V2 factory gives the pair of two tokens (either order):
/// CREATE2 with salt `keccak256(token0 ++ token1)`, as `UniswapV2Factory`
/// deploys it.
pub fn pair_address(factory: Address, init_code_hash: B256, a: Address, b: Address) -> Address {
    let (token0, token1) = if a < b { (a, b) } else { (b, a) };
    let mut salt = [0u8; 40];
    salt[..20].copy_from_slice(token0.as_slice());
    salt[20..].copy_from_slice(token1.as_slice());
    factory.create2(keccak256(salt), init_code_hash)
}

fn token(tokens: &[KnownToken], symbol: &str) -> KnownToken {
    *tokens
        .iter()
        .find(|t| t.symbol == symbol)
        .expect("pools name listed tokens")
}

fn pool_info(tokens: &[KnownToken], spec: &PoolSpec) -> KnownPool {
    let (a, b) = (token(tokens, spec.a).address, token(tokens, spec.b).address);
    KnownPool {
        dex: spec.factory.dex,
        factory: spec.factory.address,
        address: pair_address(spec.factory.address, spec.factory.init_code_hash, a, b),
        token0: a.min(b),
        token1: a.max(b),
    }
}

/// `units` whole tokens in the token's smallest unit.
fn whole(token: KnownToken, units: u64) -> U256 {
    U256::from(units) * U256::from(10u64).pow(U256::from(token.decimals))
}

/// The largest ERC-20 transfer, in hundredths of a token: a few thousand
/// dollars' worth, so amounts look like real payments.
fn transfer_cap_hundredths(symbol: &str) -> u64 {
    match symbol {
        "WETH" => 500,
        "WBNB" => 2_000,
        "WPOL" => 2_000_000,
        _ => 1_000_000,
    }
}

/// A pool's reserves, in the pair's token order.
#[derive(Clone, Debug)]
struct Pool {
    info: KnownPool,
    reserve0: U256,
    reserve1: U256,
}

/// A generated transaction with everything its block needs.
#[derive(Clone, Debug)]
struct Generated {
    tx: Arc<Transaction>,
    envelope: TxEnvelope,
    gas_used: u64,
    logs: Vec<PrimitiveLog>,
}

/// What a generated call does: its receiver, value, input, gas and logs.
struct Effects {
    to: Option<Address>,
    value: U256,
    input: Bytes,
    gas_used: u64,
    logs: Vec<PrimitiveLog>,
}

/// How many funded accounts send transactions.
const ACCOUNTS: usize = 16;

/// Gas used by each kind of transaction (typical mainnet figures).
const TRANSFER_GAS: u64 = 21_000;
const TOKEN_TRANSFER_GAS: u64 = 51_000;
const SWAP_GAS: u64 = 110_000;
const CREATE_GAS: u64 = 180_000;

/// Transactions waiting for a block, beyond which submissions are refused:
/// a load the blocks cannot carry must not grow the pool without bound.
pub const POOL_LIMIT: usize = 65_536;

/// Submissions taken into one pending announcement at most.
const SUBMISSIONS_PER_BATCH: usize = 1_024;

/// A transaction sent to the devnet (`eth_sendRawTransaction`): decoded
/// and its signer recovered by the caller, answered on `reply` once
/// announced (or refused).
#[derive(Debug)]
pub struct Submission {
    pub envelope: TxEnvelope,
    pub from: Address,
    pub reply: Answer,
}

/// Where a submission's outcome goes.
pub type Answer = oneshot::Sender<Result<(), Refusal>>;

/// Why the devnet refused a submitted transaction; the messages are
/// geth's, so clients that match on them keep working.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("nonce too low: next nonce {expected}, tx nonce {got}")]
    NonceTooLow { expected: u64, got: u64 },
    /// A node would queue it; the devnet keeps no future transactions.
    #[error(
        "nonce too high: next nonce {expected}, tx nonce {got} (the devnet does not queue future transactions)"
    )]
    NonceTooHigh { expected: u64, got: u64 },
    #[error("intrinsic gas too low: gas {gas}, minimum needed {needed}")]
    IntrinsicGas { gas: u64, needed: u64 },
    #[error("exceeds block gas limit: gas {gas}, block gas limit {limit}")]
    GasLimit { gas: u64, limit: u64 },
    #[error("txpool is full: {POOL_LIMIT} transactions wait for a block")]
    PoolFull,
}

/// The gas a transaction uses before any code runs (the yellow paper's
/// intrinsic gas): all a devnet transaction uses, as the devnet runs none.
fn intrinsic_gas(envelope: &TxEnvelope) -> u64 {
    use alloy_consensus::Transaction as _;
    let data: u64 = envelope
        .input()
        .iter()
        .map(|&byte| if byte == 0 { 4 } else { 16 })
        .sum();
    let create = if envelope.is_create() { 32_000 } else { 0 };
    let access = envelope.access_list().map_or(0, |list| {
        list.iter()
            .map(|item| 2_400 + 1_900 * item.storage_keys.len() as u64)
            .sum()
    });
    TRANSFER_GAS + create + data + access
}

/// The gas limit a transaction of `gas_used` asks for: 20% headroom, as
/// wallets' estimates add.
fn gas_limit_for(gas_used: u64) -> u64 {
    gas_used + gas_used / 5
}

/// The deterministic generator for one chain.
pub struct Devnet {
    chain_id: u64,
    settings: DevnetSettings,
    profile: Profile,
    genesis_timestamp: u64,
    rng: ChaCha8Rng,
    signers: Vec<PrivateKeySigner>,
    nonces: Vec<u64>,
    pools: Vec<Pool>,
    validator: Address,
    /// Block 0, kept apart from `recent`, which forgets old blocks.
    genesis: Arc<Block>,
    /// Announced, not yet mined, in the order blocks take them.
    pending: VecDeque<Generated>,
    /// The next nonce of every outside sender that submitted (the devnet's
    /// own accounts count in `nonces`).
    submitted_nonces: HashMap<Address, u64>,
    /// The last blocks with their contents, newest last, for reorgs.
    recent: VecDeque<(Arc<Block>, Arc<Vec<Generated>>)>,
    /// Pending micro-batches sent since the last block.
    batches_since_block: u32,
    blocks_since_reorg: u64,
    /// Reorgs so far: part of every block's identity, so a new branch never
    /// reproduces the hash of a block it replaces or of an older branch.
    reorgs: u64,
}

impl std::fmt::Debug for Devnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devnet")
            .field("chain_id", &self.chain_id)
            .field("settings", &self.settings)
            .field("genesis_timestamp", &self.genesis_timestamp)
            .finish_non_exhaustive()
    }
}

impl Devnet {
    /// The devnet of `chain_id` (an unknown id gets Ethereum's tokens,
    /// pools and cadence), with its genesis block built.
    pub fn new(chain_id: u64, settings: &DevnetSettings) -> Self {
        let profile = profile(chain_id);
        let derive = |label: &str| {
            keccak256(format!(
                "chainsieve devnet {} {chain_id} {label}",
                settings.seed
            ))
        };
        let signers: Vec<PrivateKeySigner> = (0..ACCOUNTS)
            .map(|i| {
                PrivateKeySigner::from_bytes(&derive(&format!("account {i}")))
                    .expect("a keccak output is a valid secp256k1 key")
            })
            .collect();
        let pools = profile
            .pools
            .iter()
            .map(|spec| {
                let info = pool_info(profile.tokens, spec);
                let a = token(profile.tokens, spec.a);
                let b = token(profile.tokens, spec.b);
                let (ra, rb) = (whole(a, spec.units_a), whole(b, spec.units_b));
                let (reserve0, reserve1) = if a.address == info.token0 {
                    (ra, rb)
                } else {
                    (rb, ra)
                };
                Pool {
                    info,
                    reserve0,
                    reserve1,
                }
            })
            .collect();
        let genesis_timestamp = settings.genesis_timestamp.unwrap_or_else(|| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            let block_ms = settings
                .block_time_ms
                .unwrap_or(profile.block_time_ms)
                .max(1);
            now.saturating_sub(block_offset(settings.history_blocks, block_ms))
        });
        let validator = Address::from_slice(&derive("validator")[12..]);
        // The block template reads the devnet; genesis replaces this right after.
        let placeholder = Arc::new(Block {
            hash: B256::ZERO,
            header: Header::default(),
            transactions: Vec::new(),
            logs: Vec::new(),
        });
        let mut devnet = Self {
            chain_id,
            settings: settings.clone(),
            profile,
            genesis_timestamp,
            rng: ChaCha8Rng::from_seed(derive("rng").0),
            nonces: vec![0; signers.len()],
            signers,
            pools,
            validator,
            genesis: placeholder,
            pending: VecDeque::new(),
            submitted_nonces: HashMap::new(),
            recent: VecDeque::new(),
            batches_since_block: 0,
            blocks_since_reorg: 0,
            reorgs: 0,
        };
        let genesis = devnet.template().build(None, &[]);
        devnet.genesis = genesis.clone();
        devnet.recent.push_back((genesis, Arc::new(Vec::new())));
        devnet
    }

    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// Block 0: the first thing [`run`] sends.
    pub fn genesis(&self) -> Arc<Block> {
        self.genesis.clone()
    }

    /// The configured block time, else the chain's own.
    pub fn block_time(&self) -> Duration {
        Duration::from_millis(
            self.settings
                .block_time_ms
                .unwrap_or(self.profile.block_time_ms)
                .max(1),
        )
    }

    /// The configured block gas limit, else the chain's own.
    pub fn gas_limit(&self) -> u64 {
        self.settings.gas_limit.unwrap_or(self.profile.gas_limit)
    }

    /// Takes a submitted transaction into the pool if it is the sender's
    /// next and a block can carry it; returns it for announcement.
    pub fn accept(
        &mut self,
        envelope: TxEnvelope,
        from: Address,
    ) -> Result<Arc<Transaction>, Refusal> {
        use alloy_consensus::Transaction as _;
        let gas = envelope.gas_limit();
        let needed = intrinsic_gas(&envelope);
        if gas < needed {
            return Err(Refusal::IntrinsicGas { gas, needed });
        }
        let limit = self.gas_limit();
        if gas > limit {
            return Err(Refusal::GasLimit { gas, limit });
        }
        if self.pending.len() >= POOL_LIMIT {
            return Err(Refusal::PoolFull);
        }
        let own = self.signers.iter().position(|s| s.address() == from);
        let next = match own {
            Some(account) => &mut self.nonces[account],
            None => self.submitted_nonces.entry(from).or_default(),
        };
        let (expected, got) = (*next, envelope.nonce());
        if got < expected {
            return Err(Refusal::NonceTooLow { expected, got });
        }
        if got > expected {
            return Err(Refusal::NonceTooHigh { expected, got });
        }
        *next += 1;
        let tx = Arc::new(Transaction::from_envelope(&envelope, from));
        self.pending.push_back(Generated {
            tx: tx.clone(),
            envelope,
            gas_used: needed,
            logs: Vec::new(),
        });
        Ok(tx)
    }

    /// The oldest pending transactions whose gas limits fit one block; the
    /// rest wait for the next.
    fn take_block_content(&mut self) -> Vec<Generated> {
        let limit = self.gas_limit();
        let mut reserved = 0;
        let fitting = self
            .pending
            .iter()
            .take_while(|g| {
                reserved += g.tx.gas;
                reserved <= limit
            })
            .count();
        self.pending.drain(..fitting).collect()
    }

    /// The accounts that send the devnet's transactions.
    pub fn accounts(&self) -> Vec<Address> {
        self.signers.iter().map(PrivateKeySigner::address).collect()
    }

    /// One tick, built on the spot: a micro-batch of pending transactions,
    /// or, after `pending_batches_per_block` of them, the block that mines
    /// them (or a reorg's whole new branch, oldest first). A tick whose batch
    /// would be empty yields nothing.
    pub fn next_step(&mut self) -> Vec<SourceEvent> {
        match self.step() {
            Step::Announce(events) => events,
            Step::Build(job) => self.mined(job.run()),
        }
    }

    /// One tick; a block is left to build as a [`BlockJob`].
    fn step(&mut self) -> Step {
        let batches = self.settings.pending_batches_per_block.max(1);
        if self.batches_since_block < batches {
            let per_block = self.settings.transactions_per_block;
            let count =
                per_block / batches + u32::from(self.batches_since_block < per_block % batches);
            self.batches_since_block += 1;
            let mut announced = Vec::new();
            let mut reserved: u64 = self.pending.iter().map(|g| g.tx.gas).sum();
            for _ in 0..count {
                // Stop where the next transaction might not fit the block,
                // so the next block mines all that is pending.
                if reserved + gas_limit_for(CREATE_GAS) > self.gas_limit() {
                    break;
                }
                let generated = self.generate();
                reserved += generated.tx.gas;
                announced.push(generated.tx.clone());
                self.pending.push_back(generated);
            }
            if announced.is_empty() {
                return Step::Announce(Vec::new());
            }
            return Step::Announce(vec![SourceEvent::Pending(announced)]);
        }
        self.batches_since_block = 0;
        self.blocks_since_reorg += 1;
        let content = Arc::new(self.take_block_content());
        let depth = self.reorg_depth();
        let reorg =
            self.settings.reorg_every > 0 && self.blocks_since_reorg >= self.settings.reorg_every;
        // Until the chain is `depth` blocks high the reorg waits.
        let contents = if reorg && depth > 0 && self.recent.len() > depth {
            self.blocks_since_reorg = 0;
            self.reorganise(depth, content)
        } else {
            vec![content]
        };
        Step::Build(BlockJob {
            template: self.template(),
            parent: self.tip(),
            contents,
        })
    }

    /// Takes the blocks a [`BlockJob`] built into the chain; their events.
    fn mined(&mut self, built: Built) -> Vec<SourceEvent> {
        built
            .into_iter()
            .map(|(block, content)| {
                self.remember(block.clone(), content);
                SourceEvent::Block(block)
            })
            .collect()
    }

    /// What building a block needs to know of the chain, as it is now.
    fn template(&self) -> BlockTemplate {
        BlockTemplate {
            chain_id: self.chain_id,
            seed: self.settings.seed,
            branch: self.reorgs,
            validator: self.validator,
            gas_limit: self.gas_limit(),
            base_fee: self.profile.base_fee,
            genesis_timestamp: self.genesis_timestamp,
            block_ms: u64::try_from(self.block_time().as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The configured reorg depth, capped below the tracker's window.
    fn reorg_depth(&self) -> usize {
        usize::try_from(self.settings.reorg_depth)
            .unwrap_or(usize::MAX)
            .min(DEFAULT_WINDOW - 1)
    }

    fn tip(&self) -> Arc<Block> {
        self.recent
            .back()
            .expect("the chain always has a block")
            .0
            .clone()
    }

    /// Drops the last `depth` blocks for a new branch that re-mines their
    /// transactions in the same order (so nonces stay consistent), then
    /// extends it with `content`: the contents of its `depth + 1` blocks.
    fn reorganise(
        &mut self,
        depth: usize,
        content: Arc<Vec<Generated>>,
    ) -> Vec<Arc<Vec<Generated>>> {
        self.reorgs += 1;
        let mut contents: Vec<Arc<Vec<Generated>>> = (0..depth)
            .map(|_| self.recent.pop_back().expect("more than depth blocks").1)
            .collect();
        contents.reverse();
        contents.push(content);
        contents
    }

    fn remember(&mut self, block: Arc<Block>, content: Arc<Vec<Generated>>) {
        self.recent.push_back((block, content));
        // A reorg of depth d needs the d blocks it replaces and their parent.
        let keep = self.reorg_depth() + 1;
        while self.recent.len() > keep {
            self.recent.pop_front();
        }
    }
}

/// What one tick of the devnet produced.
enum Step {
    /// Events ready to send.
    Announce(Vec<SourceEvent>),
    /// Blocks to build first.
    Build(BlockJob),
}

/// Blocks to build, chained on `parent`. Hashing a block's tries takes
/// milliseconds (~11 ms for 5,000 transactions), so [`run`] builds them off
/// the devnet's task, which meanwhile keeps announcing what is submitted.
struct BlockJob {
    template: BlockTemplate,
    parent: Arc<Block>,
    contents: Vec<Arc<Vec<Generated>>>,
}

/// Built blocks, oldest first, each with its content.
type Built = Vec<(Arc<Block>, Arc<Vec<Generated>>)>;

impl BlockJob {
    fn run(self) -> Built {
        let mut parent = self.parent;
        self.contents
            .into_iter()
            .map(|content| {
                let block = self.template.build(Some(&parent), &content);
                parent = block.clone();
                (block, content)
            })
            .collect()
    }
}

/// The chain's constants and current branch: all a block's build reads.
#[derive(Clone, Copy)]
struct BlockTemplate {
    chain_id: u64,
    seed: u64,
    /// Reorgs so far: part of every block's identity.
    branch: u64,
    validator: Address,
    gas_limit: u64,
    base_fee: u64,
    genesis_timestamp: u64,
    block_ms: u64,
}

impl BlockTemplate {
    /// The timestamp of block `number` (see [`block_offset`]).
    fn timestamp(&self, number: u64) -> u64 {
        self.genesis_timestamp
            .saturating_add(block_offset(number, self.block_ms))
    }

    fn build(&self, parent: Option<&Block>, content: &[Generated]) -> Arc<Block> {
        let number = parent.map_or(0, |p| p.number() + 1);
        let branch = self.branch;
        let mut cumulative = 0;
        let receipts: Vec<ReceiptEnvelope> = content
            .iter()
            .map(|g| {
                cumulative += g.gas_used;
                let receipt = Receipt {
                    status: Eip658Value::Eip658(true),
                    cumulative_gas_used: cumulative,
                    logs: g.logs.clone(),
                };
                let with_bloom = ReceiptWithBloom::new(receipt, logs_bloom(&g.logs));
                ReceiptEnvelope::from_typed(g.envelope.tx_type(), with_bloom)
            })
            .collect();
        let envelopes: Vec<&TxEnvelope> = content.iter().map(|g| &g.envelope).collect();
        let label = keccak256(format!(
            "chainsieve devnet {} {} {number} {branch}",
            self.seed, self.chain_id
        ));
        let header = Header {
            parent_hash: parent.map_or(B256::ZERO, |p| p.hash),
            ommers_hash: EMPTY_OMMER_ROOT_HASH,
            beneficiary: self.validator,
            // There is no state to commit to; a stable stand-in.
            state_root: keccak256(label),
            transactions_root: calculate_transaction_root(&envelopes),
            receipts_root: calculate_receipt_root(&receipts),
            logs_bloom: logs_bloom(content.iter().flat_map(|g| &g.logs)),
            difficulty: U256::ZERO,
            number,
            gas_limit: self.gas_limit,
            gas_used: cumulative,
            timestamp: self.timestamp(number),
            // At most 31 bytes: within the 32 consensus allows.
            extra_data: Bytes::from(format!("chainsieve/{branch}").into_bytes()),
            mix_hash: label,
            nonce: Default::default(),
            base_fee_per_gas: Some(self.base_fee),
            withdrawals_root: Some(EMPTY_ROOT_HASH),
            blob_gas_used: Some(0),
            excess_blob_gas: Some(0),
            parent_beacon_block_root: Some(B256::ZERO),
            // Later forks' fields (requests, access lists, slots) stay unset.
            ..Header::default()
        };
        let hash = header.hash_slow();
        let logs = content
            .iter()
            .enumerate()
            .flat_map(|(tx_index, g)| g.logs.iter().map(move |log| (tx_index, g.tx.hash, log)))
            .enumerate()
            .map(|(log_index, (tx_index, tx_hash, log))| Log {
                inner: log.clone(),
                block_hash: Some(hash),
                block_number: Some(number),
                block_timestamp: None,
                transaction_hash: Some(tx_hash),
                transaction_index: Some(tx_index as u64),
                log_index: Some(log_index as u64),
                removed: false,
            })
            .collect();
        Arc::new(Block {
            hash,
            header,
            transactions: content.iter().map(|g| g.tx.clone()).collect(),
            logs,
        })
    }
}

impl Devnet {
    /// A new signed transaction from a random account, with its effects:
    /// 40% native transfers, 30% token transfers, 25% swaps, 5% creations.
    fn generate(&mut self) -> Generated {
        let sender = self.rng.random_range(0..self.signers.len());
        let from = self.signers[sender].address();
        let other = self.signers
            [(sender + self.rng.random_range(1..self.signers.len())) % self.signers.len()]
        .address();
        let effects = match self.rng.random_range(0..20) {
            0..=7 => {
                // 0.000001 to 5 of the native coin.
                let wei = U256::from(self.rng.random_range(1u64..5_000_000))
                    * U256::from(1_000_000_000_000u64);
                Effects {
                    to: Some(other),
                    value: wei,
                    input: Bytes::new(),
                    gas_used: TRANSFER_GAS,
                    logs: Vec::new(),
                }
            }
            8..=13 => self.token_transfer(from, other),
            14..=18 => self.swap(from),
            _ => {
                let salt: [u8; 8] = self.rng.random();
                let mut code = INIT_CODE_PREFIX.to_vec();
                code.extend_from_slice(&salt);
                Effects {
                    to: None,
                    value: U256::ZERO,
                    input: Bytes::from(code),
                    gas_used: CREATE_GAS,
                    logs: Vec::new(),
                }
            }
        };
        self.sign_and_wrap(sender, effects)
    }

    /// Signs the call `effects` describes as the next transaction of
    /// `sender`: a third legacy (EIP-155), the rest EIP-1559.
    fn sign_and_wrap(&mut self, sender: usize, effects: Effects) -> Generated {
        let Effects {
            to,
            value,
            input,
            gas_used,
            logs,
        } = effects;
        let kind = to.map_or(TxKind::Create, TxKind::Call);
        let gas = gas_limit_for(gas_used);
        let nonce = self.nonces[sender];
        self.nonces[sender] += 1;
        let legacy = self.rng.random_range(0..3) == 0;
        let tip = self.profile.tip * self.rng.random_range(100..=300) / 100;
        let base_fee = u128::from(self.profile.base_fee);
        let signer = &self.signers[sender];
        let envelope = if legacy {
            TxEnvelope::from(sign(
                signer,
                TxLegacy {
                    chain_id: Some(self.chain_id),
                    nonce,
                    gas_price: base_fee + tip,
                    gas_limit: gas,
                    to: kind,
                    value,
                    input,
                },
            ))
        } else {
            TxEnvelope::from(sign(
                signer,
                TxEip1559 {
                    chain_id: self.chain_id,
                    nonce,
                    gas_limit: gas,
                    // Wallets cap at twice the base fee plus the tip.
                    max_fee_per_gas: 2 * base_fee + tip,
                    max_priority_fee_per_gas: tip,
                    to: kind,
                    value,
                    access_list: Default::default(),
                    input,
                },
            ))
        };
        let tx = Transaction::from_envelope(&envelope, signer.address());
        Generated {
            tx: Arc::new(tx),
            envelope,
            gas_used,
            logs,
        }
    }

    /// `transfer(to, amount)` of a random known token, logging `Transfer`.
    fn token_transfer(&mut self, from: Address, to: Address) -> Effects {
        let token = self.profile.tokens[self.rng.random_range(0..self.profile.tokens.len())];
        let hundredths = self
            .rng
            .random_range(1..=transfer_cap_hundredths(token.symbol));
        let amount = U256::from(hundredths)
            * U256::from(10u64).pow(U256::from(token.decimals.saturating_sub(2)));
        Effects {
            to: Some(token.address),
            value: U256::ZERO,
            input: abi_call(TRANSFER_SELECTOR, &[to.into_word(), amount.into()]),
            gas_used: TOKEN_TRANSFER_GAS,
            logs: vec![transfer_log(token.address, from, to, amount)],
        }
    }

    /// A swap in a random pool, in a random direction, of up to 0.3% of the
    /// input reserve (so prices drift like a market's, not a random walk
    /// off a cliff); reserves follow x·y = k with the 0.3% fee, rounding
    /// the output down as the pair contract requires.
    fn swap(&mut self, trader: Address) -> Effects {
        let index = self.rng.random_range(0..self.pools.len());
        let zero_for_one: bool = self.rng.random();
        let basis_points = U256::from(self.rng.random_range(1u64..=30));
        let pool = &mut self.pools[index];
        let (reserve_in, reserve_out) = if zero_for_one {
            (pool.reserve0, pool.reserve1)
        } else {
            (pool.reserve1, pool.reserve0)
        };
        let amount_in = (reserve_in * basis_points / U256::from(10_000)).max(U256::from(1));
        let amount_out = v2_amount_out(amount_in, reserve_in, reserve_out);
        let (token_in, token_out) = if zero_for_one {
            (pool.info.token0, pool.info.token1)
        } else {
            (pool.info.token1, pool.info.token0)
        };
        let (in0, in1, out0, out1) = if zero_for_one {
            pool.reserve0 += amount_in;
            pool.reserve1 -= amount_out;
            (amount_in, U256::ZERO, U256::ZERO, amount_out)
        } else {
            pool.reserve1 += amount_in;
            pool.reserve0 -= amount_out;
            (U256::ZERO, amount_in, amount_out, U256::ZERO)
        };
        let pair = pool.info.address;
        // swap(uint256 amount0Out, uint256 amount1Out, address to, bytes data)
        // with empty `data`: its offset (4 words in) and its zero length.
        let input = abi_call(
            SWAP_SELECTOR,
            &[
                out0.into(),
                out1.into(),
                trader.into_word(),
                U256::from(0x80).into(),
                B256::ZERO,
            ],
        );
        // The order a router-driven swap logs in: the input paid to the
        // pair, the output paid out, the new reserves, the swap.
        let logs = vec![
            transfer_log(token_in, trader, pair, amount_in),
            transfer_log(token_out, pair, trader, amount_out),
            PrimitiveLog::new_unchecked(
                pair,
                vec![SYNC_TOPIC],
                words(&[pool.reserve0.into(), pool.reserve1.into()]),
            ),
            PrimitiveLog::new_unchecked(
                pair,
                vec![SWAP_TOPIC, trader.into_word(), trader.into_word()],
                words(&[in0.into(), in1.into(), out0.into(), out1.into()]),
            ),
        ];
        Effects {
            to: Some(pair),
            value: U256::ZERO,
            input,
            gas_used: SWAP_GAS,
            logs,
        }
    }
}

/// `UniswapV2Library.getAmountOut`: the output for `amount_in` after the
/// 0.3% fee.
fn v2_amount_out(amount_in: U256, reserve_in: U256, reserve_out: U256) -> U256 {
    let with_fee = amount_in * U256::from(997);
    with_fee * reserve_out / (reserve_in * U256::from(1_000) + with_fee)
}

fn sign<T: SignableTransaction<Signature>>(signer: &PrivateKeySigner, tx: T) -> Signed<T> {
    let signature = signer
        .sign_hash_sync(&tx.signature_hash())
        .expect("signing with a local key cannot fail");
    tx.into_signed(signature)
}

/// The start of solc's init code (free memory pointer, non-payable check);
/// each creation appends a random salt so creations differ.
const INIT_CODE_PREFIX: [u8; 16] = [
    0x60, 0x80, 0x60, 0x40, 0x52, 0x34, 0x80, 0x15, 0x60, 0x0f, 0x57, 0x5f, 0x80, 0xfd, 0x5b, 0x50,
];

fn words(values: &[B256]) -> Bytes {
    values.iter().flat_map(|w| w.0).collect::<Vec<u8>>().into()
}

/// ABI call data: the selector, then static 32-byte words.
fn abi_call(selector: [u8; 4], args: &[B256]) -> Bytes {
    let mut input = selector.to_vec();
    input.extend(args.iter().flat_map(|w| w.0));
    input.into()
}

fn transfer_log(token: Address, from: Address, to: Address, amount: U256) -> PrimitiveLog {
    PrimitiveLog::new_unchecked(
        token,
        vec![TRANSFER_TOPIC, from.into_word(), to.into_word()],
        words(&[amount.into()]),
    )
}

/// Drives `devnet` in real time until `shutdown` is cancelled or the
/// receiver is gone: genesis first, then one step per
/// `block_time / (pending_batches_per_block + 1)`, so a block's pending
/// batches and the block itself share the block time evenly. Submitted
/// transactions are announced as they come: what arrived together is one
/// pending batch, with no waiting for more.
pub async fn run(
    mut devnet: Devnet,
    out: mpsc::Sender<SourceEvent>,
    mut submissions: mpsc::Receiver<Submission>,
    shutdown: CancellationToken,
) {
    if !send(&out, &shutdown, SourceEvent::Block(devnet.genesis())).await {
        return;
    }
    // The generated past, back to back.
    let mut history = devnet.settings.history_blocks;
    while history > 0 {
        for event in devnet.next_step() {
            if matches!(event, SourceEvent::Block(_)) {
                history = history.saturating_sub(1);
            }
            if !send(&out, &shutdown, event).await {
                return;
            }
        }
    }
    // What follows is live.
    if !send(&out, &shutdown, SourceEvent::Synced).await {
        return;
    }
    let steps = devnet.settings.pending_batches_per_block.max(1) + 1;
    let mut ticks =
        tokio::time::interval((devnet.block_time() / steps).max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The first tick completes at once; the first batch comes one period
    // after genesis.
    ticks.tick().await;
    let mut arrived = Vec::new();
    let mut open = true;
    // The block being built on the blocking pool; ticks wait for it.
    let mut building: Option<JoinHandle<Built>> = None;
    loop {
        let events = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            built = async { building.as_mut().expect("guarded").await }, if building.is_some() => {
                building = None;
                match built {
                    Ok(built) => devnet.mined(built),
                    Err(error) => {
                        tracing::error!(chain_id = devnet.chain_id, %error, "building a devnet block failed; the devnet stops");
                        return;
                    }
                }
            }
            _ = ticks.tick(), if building.is_none() => match devnet.step() {
                Step::Announce(events) => events,
                Step::Build(job) => {
                    building = Some(tokio::task::spawn_blocking(move || job.run()));
                    continue;
                }
            },
            received = submissions.recv_many(&mut arrived, SUBMISSIONS_PER_BATCH), if open => {
                // Closed: the chain no longer takes submissions.
                open = received > 0;
                let mut announced = Vec::new();
                let mut replies = Vec::with_capacity(arrived.len());
                for submission in arrived.drain(..) {
                    let outcome = devnet
                        .accept(submission.envelope, submission.from)
                        .map(|tx| announced.push(tx));
                    replies.push((submission.reply, outcome));
                }
                // Announced before answered: a client holding the hash
                // finds the transaction pending.
                if !announced.is_empty()
                    && !send(&out, &shutdown, SourceEvent::Pending(announced)).await
                {
                    return;
                }
                for (reply, outcome) in replies {
                    let _ = reply.send(outcome);
                }
                continue;
            }
        };
        for event in events {
            if !send(&out, &shutdown, event).await {
                return;
            }
        }
    }
}

/// Seconds from genesis to block `number` at `block_ms` per block: whole
/// seconds, at least one per block (a header has no finer unit and a child
/// must be younger than its parent).
fn block_offset(number: u64, block_ms: u64) -> u64 {
    if block_ms >= 1_000 {
        u64::try_from(u128::from(number) * u128::from(block_ms) / 1_000).unwrap_or(u64::MAX)
    } else {
        number
    }
}

/// Sends `event` unless shutdown comes first (a full channel must not keep
/// the devnet alive); false when the devnet should stop.
async fn send(
    out: &mpsc::Sender<SourceEvent>,
    shutdown: &CancellationToken,
    event: SourceEvent,
) -> bool {
    tokio::select! {
        biased;
        () = shutdown.cancelled() => false,
        sent = out.send(event) => sent.is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use alloy_consensus::transaction::SignerRecoverable;
    use alloy_eips::eip2718::Encodable2718;

    use super::super::canonical::CanonicalChain;
    use super::super::events::ChainEvent;
    use super::super::model::Fees;
    use super::*;

    fn settings() -> DevnetSettings {
        DevnetSettings {
            seed: 7,
            genesis_timestamp: Some(1_700_000_000),
            ..DevnetSettings::default()
        }
    }

    /// The events of `steps` ticks, genesis first.
    fn stream(devnet: &mut Devnet, steps: usize) -> Vec<SourceEvent> {
        let mut events = vec![SourceEvent::Block(devnet.genesis())];
        for _ in 0..steps {
            events.extend(devnet.next_step());
        }
        events
    }

    /// The next event [`run`] sends; `why` it should come in time.
    async fn next_event(events: &mut mpsc::Receiver<SourceEvent>, why: &str) -> SourceEvent {
        tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect(why)
            .expect("the devnet runs")
    }

    /// The nonces of a block's transactions, in order.
    fn nonces(block: &Block) -> Vec<u64> {
        block.transactions.iter().map(|t| t.nonce).collect()
    }

    /// A submissions queue nobody sends to.
    fn closed() -> mpsc::Receiver<Submission> {
        mpsc::channel(1).1
    }

    /// A transaction from an outside key, signed for chain 1.
    fn outside(nonce: u64, gas_limit: u64, input: &[u8]) -> (TxEnvelope, Address) {
        let signer =
            PrivateKeySigner::from_bytes(&keccak256("an outside sender")).expect("a valid key");
        let tx = TxEip1559 {
            chain_id: 1,
            nonce,
            gas_limit,
            max_fee_per_gas: 30_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(Address::repeat_byte(0x42)),
            value: U256::from(7),
            access_list: Default::default(),
            input: Bytes::copy_from_slice(input),
        };
        (TxEnvelope::from(sign(&signer, tx)), signer.address())
    }

    fn quiet() -> DevnetSettings {
        DevnetSettings {
            transactions_per_block: 0,
            ..settings()
        }
    }

    #[test]
    fn submitted_transactions_are_checked_announced_and_mined() {
        let mut devnet = Devnet::new(1, &quiet());
        let (first, from) = outside(0, 21_000, &[]);
        let tx = devnet
            .accept(first.clone(), from)
            .expect("the sender's first");
        assert_eq!((tx.hash, tx.from, tx.nonce), (*first.tx_hash(), from, 0));
        assert_eq!(
            envelope_of(&tx),
            first,
            "the model carries the whole transaction"
        );

        let refused = [
            // Nonces in order, as a node's pool wants them.
            (
                first,
                Refusal::NonceTooLow {
                    expected: 1,
                    got: 0,
                },
            ),
            (
                outside(2, 21_000, &[]).0,
                Refusal::NonceTooHigh {
                    expected: 1,
                    got: 2,
                },
            ),
            // Calldata costs 4 gas per zero byte and 16 per other byte.
            (
                outside(1, 21_019, &[0, 1]).0,
                Refusal::IntrinsicGas {
                    gas: 21_019,
                    needed: 21_020,
                },
            ),
            (
                outside(1, 30_000_001, &[]).0,
                Refusal::GasLimit {
                    gas: 30_000_001,
                    limit: 30_000_000,
                },
            ),
        ];
        for (tx, refusal) in refused {
            assert_eq!(devnet.accept(tx, from), Err(refusal));
        }
        let (second, _) = outside(1, 50_000, &[0, 1]);
        devnet.accept(second, from).expect("the sender's second");

        let (blocks, pending) = run_steps(&mut devnet, 5);
        assert!(
            pending.is_empty(),
            "nothing generated, nothing announced twice"
        );
        let block = &blocks[1];
        assert_eq!(block.number(), 1);
        assert_eq!(nonces(block), [0, 1]);
        // They succeed with their intrinsic gas and log nothing.
        assert_eq!(block.header.gas_used, 21_000 + 21_020);
        assert!(block.logs.is_empty());
        let envelopes: Vec<TxEnvelope> =
            block.transactions.iter().map(|t| envelope_of(t)).collect();
        assert_eq!(
            block.header.transactions_root,
            calculate_transaction_root(&envelopes)
        );
    }

    #[test]
    fn blocks_take_what_fits_their_gas_limit_and_leave_the_rest_pending() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                gas_limit: Some(100_000),
                ..quiet()
            },
        );
        for nonce in 0..10 {
            let (tx, from) = outside(nonce, 21_000, &[]);
            devnet.accept(tx, from).expect("in order");
        }
        let (blocks, _) = run_steps(&mut devnet, 15);
        let mined: Vec<Vec<u64>> = blocks[1..].iter().map(|b| nonces(b)).collect();
        assert_eq!(mined, [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
        assert!(blocks.iter().all(|b| b.header.gas_limit == 100_000));
    }

    /// While a block is built off the devnet's task, submissions keep
    /// being accepted; they wait for the next block.
    #[test]
    fn submissions_during_a_block_build_go_to_the_next_block() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                pending_batches_per_block: 1,
                ..quiet()
            },
        );
        let (first, from) = outside(0, 21_000, &[]);
        devnet.accept(first, from).expect("first");
        assert!(matches!(devnet.step(), Step::Announce(events) if events.is_empty()));
        let Step::Build(job) = devnet.step() else {
            panic!("the second tick is the block's");
        };
        let (during, _) = outside(1, 21_000, &[]);
        devnet
            .accept(during, from)
            .expect("accepted while building");
        let events = devnet.mined(job.run());
        let [SourceEvent::Block(block)] = &events[..] else {
            panic!("one block: {events:?}");
        };
        assert_eq!(nonces(block), [0]);
        // (run_steps lists genesis first.)
        let (blocks, _) = run_steps(&mut devnet, 2);
        assert_eq!(blocks[1].parent_hash(), block.hash);
        assert_eq!(nonces(&blocks[1]), [1]);
    }

    #[test]
    fn a_full_pool_refuses_more() {
        let mut devnet = Devnet::new(1, &quiet());
        let from = Address::repeat_byte(0x77);
        // The devnet trusts the caller's recovered sender, so unsigned
        // stand-ins fill the pool quickly.
        let stand_in = |nonce| {
            TxEnvelope::from(
                TxLegacy {
                    chain_id: Some(1),
                    nonce,
                    gas_price: 1,
                    gas_limit: 21_000,
                    to: TxKind::Call(from),
                    value: U256::ZERO,
                    input: Bytes::new(),
                }
                .into_signed(Signature::test_signature()),
            )
        };
        for nonce in 0..POOL_LIMIT as u64 {
            devnet.accept(stand_in(nonce), from).expect("room");
        }
        assert_eq!(
            devnet.accept(stand_in(POOL_LIMIT as u64), from),
            Err(Refusal::PoolFull)
        );
    }

    /// Submissions are announced as they arrive, without waiting for a
    /// tick, and every sender hears back, refused or not.
    #[tokio::test]
    async fn run_announces_submissions_at_once() {
        let slow = DevnetSettings {
            block_time_ms: Some(3_600_000),
            history_blocks: 0,
            ..quiet()
        };
        let (out, mut events) = mpsc::channel(16);
        let (submit, submitted) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        tokio::spawn(run(Devnet::new(1, &slow), out, submitted, shutdown.clone()));
        let mut answers = Vec::new();
        for nonce in [0, 1, 1] {
            let (envelope, from) = outside(nonce, 21_000, &[]);
            let (reply, answer) = oneshot::channel();
            submit
                .send(Submission {
                    envelope,
                    from,
                    reply,
                })
                .await
                .expect("the devnet runs");
            answers.push(answer);
        }
        let mut announced = Vec::new();
        while announced.len() < 2 {
            let event = next_event(&mut events, "announced without waiting for a block").await;
            if let SourceEvent::Pending(txs) = event {
                announced.extend(txs.iter().map(|tx| tx.nonce));
            }
        }
        assert_eq!(announced, [0, 1]);
        let mut outcomes = Vec::new();
        for answer in answers {
            outcomes.push(answer.await.expect("answered"));
        }
        assert_eq!(
            outcomes,
            [
                Ok(()),
                Ok(()),
                Err(Refusal::NonceTooLow {
                    expected: 2,
                    got: 1
                })
            ]
        );
        shutdown.cancel();
    }

    /// The blocks and pending transactions of `steps` ticks.
    fn run_steps(devnet: &mut Devnet, steps: usize) -> (Vec<Arc<Block>>, Vec<Arc<Transaction>>) {
        let mut blocks = Vec::new();
        let mut pending = Vec::new();
        for event in stream(devnet, steps) {
            match event {
                SourceEvent::Block(b) => blocks.push(b),
                SourceEvent::Pending(txs) => pending.extend(txs),
                SourceEvent::Synced => unreachable!("steps carry no marker"),
            }
        }
        (blocks, pending)
    }

    /// Rebuilds the signed envelope from the model's fields alone, so the
    /// checks below prove the model carries everything a node would report.
    fn envelope_of(tx: &Transaction) -> TxEnvelope {
        let chain_id = tx.chain_id.expect("devnet transactions name their chain");
        let to = tx.to.map_or(TxKind::Create, TxKind::Call);
        let parity = if tx.tx_type == 0 {
            tx.signature
                .v
                .checked_sub(chain_id * 2 + 35)
                .expect("EIP-155 v")
        } else {
            tx.signature.v
        };
        assert!(parity <= 1, "v {} of type {}", tx.signature.v, tx.tx_type);
        let signature = Signature::new(tx.signature.r, tx.signature.s, parity == 1);
        match tx.fees {
            Fees::GasPrice(gas_price) => {
                assert_eq!(tx.tx_type, 0);
                let unsigned = TxLegacy {
                    chain_id: Some(chain_id),
                    nonce: tx.nonce,
                    gas_price,
                    gas_limit: tx.gas,
                    to,
                    value: tx.value,
                    input: tx.input.clone(),
                };
                unsigned.into_signed(signature).into()
            }
            Fees::Dynamic {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            } => {
                assert_eq!(tx.tx_type, 2);
                let unsigned = TxEip1559 {
                    chain_id,
                    nonce: tx.nonce,
                    gas_limit: tx.gas,
                    max_fee_per_gas,
                    max_priority_fee_per_gas,
                    to,
                    value: tx.value,
                    access_list: tx.access_list.clone().expect("typed"),
                    input: tx.input.clone(),
                };
                unsigned.into_signed(signature).into()
            }
        }
    }

    fn word(data: &[u8], index: usize) -> U256 {
        U256::from_be_slice(&data[index * 32..(index + 1) * 32])
    }

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
                    pool.address,
                    pair_address(
                        pool.factory,
                        pair_init_code(pool.dex),
                        pool.token1,
                        pool.token0
                    ),
                    "either token order gives the same pair"
                );
            }
        }
    }

    fn pair_init_code(dex: &str) -> B256 {
        [UNISWAP_V2, PANCAKE_V2, QUICKSWAP]
            .into_iter()
            .find(|f| f.dex == dex)
            .expect("a known dex")
            .init_code_hash
    }

    #[test]
    fn settings_read_from_toml_with_defaults() {
        let empty: DevnetSettings = toml::from_str("").expect("every key is optional");
        assert_eq!(empty, DevnetSettings::default());
        let set: DevnetSettings =
            toml::from_str("seed = 9\nblock_time_ms = 500\nreorg_every = 4").expect("valid");
        assert_eq!(
            set,
            DevnetSettings {
                seed: 9,
                block_time_ms: Some(500),
                reorg_every: 4,
                ..DevnetSettings::default()
            }
        );
        assert!(toml::from_str::<DevnetSettings>("sed = 1").is_err());
    }

    #[test]
    fn cadence_and_timestamps() {
        let at = |chain, block_time_ms| {
            let mut devnet = Devnet::new(
                chain,
                &DevnetSettings {
                    block_time_ms,
                    ..settings()
                },
            );
            let (blocks, _) = run_steps(&mut devnet, 25);
            (
                devnet.block_time(),
                blocks
                    .iter()
                    .map(|b| b.header.timestamp - 1_700_000_000)
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            at(1, None),
            (Duration::from_secs(12), vec![0, 12, 24, 36, 48, 60])
        );
        assert_eq!(at(56, None).0, Duration::from_secs(3));
        assert_eq!(at(137, None).0, Duration::from_secs(2));
        assert_eq!(at(1, Some(1_500)).1, vec![0, 1, 3, 4, 6, 7]);
        assert_eq!(at(1, Some(150)).1, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let (a, pa) = run_steps(&mut Devnet::new(1, &settings()), 30);
        let (b, pb) = run_steps(&mut Devnet::new(1, &settings()), 30);
        let hashes = |blocks: &[Arc<Block>]| blocks.iter().map(|b| b.hash).collect::<Vec<_>>();
        let tx_hashes = |txs: &[Arc<Transaction>]| txs.iter().map(|t| t.hash).collect::<Vec<_>>();
        assert_eq!(hashes(&a), hashes(&b));
        assert_eq!(pa, pb);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.logs, y.logs);
        }
        assert_eq!(
            Devnet::new(1, &settings()).accounts(),
            Devnet::new(1, &settings()).accounts()
        );

        let other_seed = DevnetSettings {
            seed: 8,
            ..settings()
        };
        let (c, pc) = run_steps(&mut Devnet::new(1, &other_seed), 30);
        assert_ne!(hashes(&a), hashes(&c));
        assert_ne!(tx_hashes(&pa), tx_hashes(&pc));
        let (d, _) = run_steps(&mut Devnet::new(56, &settings()), 30);
        assert_ne!(hashes(&a)[1..], hashes(&d)[1..]);

        // Without a fixed genesis time, transactions still repeat exactly.
        let clock = DevnetSettings {
            genesis_timestamp: None,
            ..settings()
        };
        let (_, pe) = run_steps(&mut Devnet::new(1, &clock), 30);
        assert_eq!(tx_hashes(&pa), tx_hashes(&pe));
    }

    #[test]
    fn transactions_are_really_signed() {
        for chain in [1, 56, 137] {
            let devnet = &mut Devnet::new(chain, &settings());
            let accounts: HashSet<Address> = devnet.accounts().into_iter().collect();
            assert_eq!(accounts.len(), ACCOUNTS);
            let (_, pending) = run_steps(devnet, 40);
            let mut types = HashSet::new();
            let mut nonces: HashMap<Address, Vec<u64>> = HashMap::new();
            for tx in &pending {
                types.insert(tx.tx_type);
                assert_eq!(tx.chain_id, Some(chain));
                assert!(accounts.contains(&tx.from));
                let envelope = envelope_of(tx);
                assert_eq!(
                    keccak256(envelope.encoded_2718()),
                    tx.hash,
                    "hash is keccak of the signed encoding"
                );
                assert_eq!(
                    envelope.recover_signer().expect("recovers"),
                    tx.from,
                    "from recovers from the signature"
                );
                nonces.entry(tx.from).or_default().push(tx.nonce);
            }
            assert_eq!(
                types,
                HashSet::from([0, 2]),
                "legacy and EIP-1559 both appear"
            );
            for sequence in nonces.values() {
                assert_eq!(
                    *sequence,
                    (0..sequence.len() as u64).collect::<Vec<_>>(),
                    "nonces are consecutive"
                );
            }
        }
    }

    #[test]
    fn blocks_chain_with_real_roots_and_logs() {
        let mut devnet = Devnet::new(1, &settings());
        let (blocks, _) = run_steps(&mut devnet, 50);
        assert_eq!(blocks.len(), 11);
        assert_eq!(
            devnet.genesis().hash,
            blocks[0].hash,
            "genesis stays block 0"
        );
        assert_eq!(blocks[0].number(), 0);
        for pair in blocks.windows(2) {
            assert_eq!(pair[1].parent_hash(), pair[0].hash);
            assert_eq!(pair[1].number(), pair[0].number() + 1);
            assert!(pair[1].header.timestamp > pair[0].header.timestamp);
        }
        for block in &blocks {
            let h = &block.header;
            assert_eq!(block.hash, h.hash_slow());
            let envelopes: Vec<TxEnvelope> = block
                .transactions
                .iter()
                .map(|tx| envelope_of(tx))
                .collect();
            assert_eq!(h.transactions_root, calculate_transaction_root(&envelopes));
            if block.transactions.is_empty() {
                assert_eq!(h.receipts_root, EMPTY_ROOT_HASH);
            } else {
                assert_ne!(h.receipts_root, EMPTY_ROOT_HASH);
            }
            let logs: Vec<_> = block.logs.iter().map(|l| l.inner.clone()).collect();
            assert_eq!(h.logs_bloom, logs_bloom(&logs));
            assert!(h.gas_used <= h.gas_limit);
            assert_eq!(
                h.gas_used == 0,
                block.transactions.is_empty(),
                "gas used follows the transactions"
            );
            assert_eq!(h.withdrawals_root, Some(EMPTY_ROOT_HASH));
            assert_eq!(h.base_fee_per_gas, Some(12_000_000_000));
            for (i, log) in block.logs.iter().enumerate() {
                let tx_index = log.transaction_index.expect("index") as usize;
                assert_eq!(
                    (log.block_hash, log.block_number, log.log_index, log.removed),
                    (
                        Some(block.hash),
                        Some(block.number()),
                        Some(i as u64),
                        false
                    )
                );
                assert_eq!(
                    log.transaction_hash,
                    Some(block.transactions[tx_index].hash)
                );
            }
        }
    }

    #[test]
    fn pending_transactions_are_announced_once_before_their_block() {
        for reorg_every in [0, 3] {
            let mut devnet = Devnet::new(
                56,
                &DevnetSettings {
                    reorg_every,
                    ..settings()
                },
            );
            let mut announced = HashSet::new();
            let mut mined = HashSet::new();
            let mut blocks = 0;
            for event in stream(&mut devnet, 100) {
                match event {
                    SourceEvent::Pending(txs) => {
                        assert!(!txs.is_empty(), "no empty batches");
                        for tx in txs {
                            assert!(announced.insert(tx.hash), "announced once");
                        }
                    }
                    SourceEvent::Block(block) => {
                        blocks += 1;
                        for tx in &block.transactions {
                            assert!(announced.contains(&tx.hash), "announced before mined");
                            mined.insert(tx.hash);
                        }
                    }
                    SourceEvent::Synced => unreachable!("steps carry no marker"),
                }
            }
            assert!(blocks >= 20);
            // 100 steps end right after a block: nothing is left unmined.
            assert_eq!(announced, mined);
        }
    }

    #[test]
    fn token_transfers_log_transfer_events() {
        let mut devnet = Devnet::new(1, &settings());
        let (blocks, _) = run_steps(&mut devnet, 100);
        let tokens: HashSet<Address> = known_tokens(1).iter().map(|t| t.address).collect();
        let mut transfers = 0;
        let mut kinds = HashSet::new();
        for block in &blocks {
            for tx in &block.transactions {
                let logs: Vec<&Log> = block
                    .logs
                    .iter()
                    .filter(|l| l.transaction_hash == Some(tx.hash))
                    .collect();
                let selector = tx.input.get(..4);
                let Some(to) = tx.to else {
                    kinds.insert("create");
                    assert!(!tx.input.is_empty() && logs.is_empty());
                    continue;
                };
                if tx.input.is_empty() {
                    kinds.insert("native");
                    assert!(tx.value > U256::ZERO && logs.is_empty());
                    assert_eq!(tx.gas, gas_limit_for(TRANSFER_GAS));
                } else if selector == Some(&TRANSFER_SELECTOR[..]) {
                    kinds.insert("erc20");
                    transfers += 1;
                    assert_eq!(tx.input.len(), 4 + 2 * 32);
                    assert!(tx.input[4..16].iter().all(|b| *b == 0), "address padding");
                    let recipient = Address::from_slice(&tx.input[16..36]);
                    let amount = word(&tx.input[4..], 1);
                    assert!(tokens.contains(&to));
                    assert_eq!(logs.len(), 1);
                    let log = logs[0];
                    assert_eq!(Some(log.address()), tx.to);
                    assert_eq!(
                        log.topics(),
                        [TRANSFER_TOPIC, tx.from.into_word(), recipient.into_word()]
                    );
                    assert_eq!(log.data().data[..], amount.to_be_bytes::<32>()[..]);
                } else {
                    assert_eq!(selector, Some(&SWAP_SELECTOR[..]));
                    kinds.insert("swap");
                }
            }
        }
        assert!(transfers > 10);
        assert_eq!(kinds.len(), 4, "every kind appears: {kinds:?}");
    }

    #[test]
    fn swaps_follow_the_constant_product_rule() {
        for chain in [1, 56, 137] {
            let mut devnet = Devnet::new(chain, &settings());
            let (blocks, _) = run_steps(&mut devnet, 150);
            let pools: HashMap<Address, KnownPool> = known_pools(chain)
                .into_iter()
                .map(|p| (p.address, p))
                .collect();
            let mut reserves: HashMap<Address, (U256, U256)> = HashMap::new();
            let mut swaps = 0;
            for block in &blocks {
                for tx in &block.transactions {
                    if tx.input.get(..4) != Some(&SWAP_SELECTOR[..]) {
                        continue;
                    }
                    swaps += 1;
                    let pair = tx.to.expect("a call");
                    let pool = pools[&pair];
                    let logs: Vec<&Log> = block
                        .logs
                        .iter()
                        .filter(|l| l.transaction_hash == Some(tx.hash))
                        .collect();
                    let topics: Vec<B256> = logs.iter().map(|l| l.topics()[0]).collect();
                    assert_eq!(
                        topics,
                        [TRANSFER_TOPIC, TRANSFER_TOPIC, SYNC_TOPIC, SWAP_TOPIC]
                    );
                    let (sync, swap) = (logs[2], logs[3]);
                    assert_eq!((sync.address(), swap.address()), (pair, pair));
                    assert_eq!(
                        swap.topics()[1..],
                        [tx.from.into_word(), tx.from.into_word()]
                    );
                    let data = &swap.data().data;
                    let (in0, in1, out0, out1) =
                        (word(data, 0), word(data, 1), word(data, 2), word(data, 3));
                    let args = &tx.input[4..];
                    assert_eq!((word(args, 0), word(args, 1)), (out0, out1));
                    assert_eq!(word(args, 3), U256::from(0x80), "bytes offset");
                    assert_eq!(args.len(), 5 * 32);
                    // The paid-in transfer is of the input token, to the pair.
                    let (token_in, amount_in) = if in0 > U256::ZERO {
                        (pool.token0, in0)
                    } else {
                        (pool.token1, in1)
                    };
                    assert_eq!(logs[0].address(), token_in);
                    assert_eq!(logs[0].topics()[2], pair.into_word());
                    assert_eq!(word(&logs[0].data().data, 0), amount_in);
                    let (r0, r1) = (word(&sync.data().data, 0), word(&sync.data().data, 1));
                    assert!(r0 < U256::from(1u8) << 112 && r1 < U256::from(1u8) << 112);
                    if let Some((p0, p1)) = reserves.insert(pair, (r0, r1)) {
                        assert_eq!((r0, r1), (p0 + in0 - out0, p1 + in1 - out1));
                        assert!(r0 * r1 >= p0 * p1, "k never shrinks");
                        // The pair's own check: k holds on fee-adjusted balances.
                        let adjusted0 = r0 * U256::from(1_000) - in0 * U256::from(3);
                        let adjusted1 = r1 * U256::from(1_000) - in1 * U256::from(3);
                        assert!(adjusted0 * adjusted1 >= p0 * p1 * U256::from(1_000_000));
                    }
                }
            }
            assert!(swaps > 10, "{swaps} swaps on chain {chain}");
            // Prices stay near where they started (token0 of WETH/USDC is USDC).
            if chain == 1 {
                let (r_usdc, r_weth) = reserves[&known_pools(1)[0].address];
                let price =
                    (r_usdc.to::<u128>() as f64 / 1e6) / (r_weth.to::<u128>() as f64 / 1e18);
                assert!((2_000.0..4_000.0).contains(&price), "ETH at {price} USDC");
            }
        }
    }

    /// Feeds the devnet through the canonical tracker and checks each reorg.
    fn check_reorgs(chain_id: u64, every: u64, depth: u64, steps: usize) -> usize {
        let mut devnet = Devnet::new(
            chain_id,
            &DevnetSettings {
                reorg_every: every,
                reorg_depth: depth,
                ..settings()
            },
        );
        let mut chain = CanonicalChain::new(DEFAULT_WINDOW);
        chain.apply(devnet.genesis()).expect("genesis");
        let mut seen = HashSet::from([devnet.genesis().hash]);
        let mut reorgs = 0;
        for _ in 0..steps {
            let blocks: Vec<Arc<Block>> = devnet
                .next_step()
                .into_iter()
                .filter_map(|e| match e {
                    SourceEvent::Block(b) => Some(b),
                    SourceEvent::Pending(_) | SourceEvent::Synced => None,
                })
                .collect();
            let Some(first) = blocks.first() else {
                continue;
            };
            for block in &blocks {
                assert!(seen.insert(block.hash), "no block hash repeats");
            }
            let tip = chain.tip().expect("a tip").clone();
            let forked = first.parent_hash() != tip.hash;
            if forked {
                reorgs += 1;
                assert_eq!(blocks.len() as u64, depth + 1);
                let ancestor = chain
                    .by_hash(&first.parent_hash())
                    .expect("the branch starts on an earlier canonical block");
                assert_eq!(ancestor.number(), tip.number() - depth);
                let heights: Vec<u64> = blocks.iter().map(|b| b.number()).collect();
                assert_eq!(
                    heights,
                    (tip.number() - depth + 1..=tip.number() + 1).collect::<Vec<_>>()
                );
                for (replacement, height) in blocks.iter().zip(ancestor.number() + 1..=tip.number())
                {
                    let orphan = chain.by_number(height).expect("the orphaned block");
                    assert_ne!(orphan.hash, replacement.hash);
                    let txs = |b: &Block| b.transactions.iter().map(|t| t.hash).collect::<Vec<_>>();
                    assert_eq!(
                        txs(orphan),
                        txs(replacement),
                        "orphaned transactions re-mined"
                    );
                    let logs =
                        |b: &Block| b.logs.iter().map(|l| l.inner.clone()).collect::<Vec<_>>();
                    assert_eq!(logs(orphan), logs(replacement));
                }
            } else {
                assert_eq!(blocks.len(), 1);
            }
            let mut removed = 0;
            for block in blocks {
                for event in chain.apply(block).expect("the tracker places every block") {
                    if let ChainEvent::Removed(_) = event {
                        removed += 1;
                    }
                }
            }
            assert_eq!(removed, if forked { depth } else { 0 });
        }
        reorgs
    }

    #[test]
    fn reorgs_replace_the_last_blocks_and_remine_their_transactions() {
        // Every 5 blocks, depth 2: a reorg each 25 steps.
        assert!(check_reorgs(56, 5, 2, 80) >= 3);
        // Reorgs more often than their depth: branches overlap earlier ones.
        assert!(check_reorgs(1, 1, 3, 60) >= 8);
        assert!(check_reorgs(137, 2, 2, 60) >= 5);
        // Off by default.
        assert_eq!(check_reorgs(1, 0, 2, 60), 0);
        // Deeper than the tracker can follow: capped.
        let deep = DevnetSettings {
            reorg_depth: u64::MAX,
            ..settings()
        };
        assert_eq!(Devnet::new(1, &deep).reorg_depth(), DEFAULT_WINDOW - 1);
    }

    #[test]
    fn empty_blocks_when_no_transactions() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                transactions_per_block: 0,
                ..settings()
            },
        );
        let events = stream(&mut devnet, 10);
        assert_eq!(
            events.len(),
            3,
            "genesis and two blocks, no pending batches"
        );
        for event in events {
            let SourceEvent::Block(block) = event else {
                panic!("only blocks");
            };
            assert!(block.transactions.is_empty());
            assert_eq!(block.header.transactions_root, EMPTY_ROOT_HASH);
            assert_eq!(block.header.receipts_root, EMPTY_ROOT_HASH);
        }
    }

    #[test]
    fn blocks_never_overflow_the_gas_limit() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                transactions_per_block: 400,
                pending_batches_per_block: 1,
                ..settings()
            },
        );
        let (blocks, _) = run_steps(&mut devnet, 4);
        let block = &blocks[1];
        assert!(block.transactions.len() > 100);
        let limits: u64 = block.transactions.iter().map(|t| t.gas).sum();
        assert!(limits <= block.header.gas_limit);
    }

    /// The generated past comes at once: with an hour per block, five
    /// blocks after genesis can only be the history.
    #[tokio::test]
    async fn run_sends_the_history_back_to_back() {
        let slow = DevnetSettings {
            block_time_ms: Some(3_600_000),
            genesis_timestamp: None,
            history_blocks: 5,
            ..settings()
        };
        let devnet = Devnet::new(1, &slow);
        let genesis_time = devnet.genesis().header.timestamp;
        let (out, mut events) = mpsc::channel(64);
        let shutdown = CancellationToken::new();
        tokio::spawn(run(devnet, out, closed(), shutdown.clone()));
        let mut blocks = Vec::new();
        loop {
            match next_event(&mut events, "history arrives at once").await {
                SourceEvent::Block(block) => blocks.push(block),
                SourceEvent::Pending(_) => {}
                SourceEvent::Synced => break,
            }
        }
        assert_eq!(
            blocks.len(),
            6,
            "genesis and five history blocks, then the marker"
        );
        let last = &blocks[5];
        assert_eq!(last.number(), 5);
        assert_eq!(last.header.timestamp, genesis_time + 5 * 3_600);
        // The last history block is (about) now: genesis was set back.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        assert!(
            last.header.timestamp.abs_diff(now) <= 60,
            "{} vs {now}",
            last.header.timestamp
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn run_sends_genesis_then_steps_until_shutdown() {
        let fast = DevnetSettings {
            block_time_ms: Some(50),
            ..settings()
        };
        let devnet = Devnet::new(1, &fast);
        let genesis = devnet.genesis().hash;
        let (out, mut events) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(devnet, out, closed(), shutdown.clone()));
        let SourceEvent::Block(first) = next_event(&mut events, "events keep coming").await else {
            panic!("genesis comes first");
        };
        assert_eq!(first.hash, genesis);
        let mut pending = 0;
        loop {
            match next_event(&mut events, "events keep coming").await {
                SourceEvent::Pending(_) => pending += 1,
                SourceEvent::Block(block) => {
                    assert_eq!((block.number(), pending), (1, 4));
                    break;
                }
                SourceEvent::Synced => panic!("the history ends after block 1"),
            }
        }
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("run returns on shutdown")
            .expect("run does not panic");

        // A full channel nobody reads does not keep it alive either.
        let (out, _unread) = mpsc::channel(1);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(Devnet::new(1, &fast), out, closed(), shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("run returns on shutdown while blocked")
            .expect("run does not panic");

        // Nor does a receiver that is gone.
        let (out, events) = mpsc::channel(1);
        drop(events);
        tokio::time::timeout(
            Duration::from_secs(5),
            run(
                Devnet::new(1, &fast),
                out,
                closed(),
                CancellationToken::new(),
            ),
        )
        .await
        .expect("run returns when the receiver is gone");
    }
}
