//! The embedded devnet: a deterministic generator of realistic chain data
//! for one chain, the default source when no node is configured.
//!
//! From a seed it derives funded accounts and produces, at the chain's
//! cadence, pending transactions in micro-batches between blocks, then the
//! block that mines them. Transactions are really signed (legacy EIP-155 and
//! EIP-1559), so hashes and senders are what a node would report. They move
//! the native coin, transfer well-known ERC-20 tokens at their real
//! addresses, and swap in Uniswap-V2-style pairs at the addresses the real
//! factories derive (with constant-product reserves), producing `Transfer`,
//! `Sync` and `Swap` logs. Blocks carry real transaction and receipt roots
//! and logs blooms. Optional reorgs re-mine the last blocks on a new branch.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_consensus::proofs::{calculate_receipt_root, calculate_transaction_root};
use alloy_consensus::{
    EMPTY_OMMER_ROOT_HASH, EMPTY_ROOT_HASH, Eip658Value, Header, Receipt, ReceiptEnvelope,
    ReceiptWithBloom, SignableTransaction, Signed, TxEip1559, TxEnvelope, TxLegacy,
};
use alloy_primitives::{
    Address, B256, Bytes, Log as PrimitiveLog, TxKind, U256, address, b256, keccak256, logs_bloom,
};
use alloy_rpc_types_eth::Log;
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::events::SourceEvent;
use super::model::{Block, Fees, Transaction, TxSignature};

/// The `[devnet]` section of the config.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DevnetSettings {
    /// Everything generated follows from it (with the chain id): the same
    /// seed gives the same accounts, transactions and logs.
    pub seed: u64,
    /// Time between blocks; default the chain's own cadence (Ethereum 12 s,
    /// BNB Chain 3 s, Polygon 2 s).
    pub block_time_ms: Option<u64>,
    /// Micro-batches of pending transactions announced between two blocks.
    pub pending_batches_per_block: u32,
    /// Transactions per block, spread over the pending micro-batches.
    pub transactions_per_block: u32,
    /// Blocks between reorgs; 0 (the default) never reorganises.
    pub reorg_every: u64,
    /// Blocks a reorg replaces.
    pub reorg_depth: u64,
    /// Timestamp of block 0; default the time the devnet starts. Set it for
    /// block hashes that do not change between runs.
    pub genesis_timestamp: Option<u64>,
}

impl Default for DevnetSettings {
    fn default() -> Self {
        Self {
            seed: 1,
            block_time_ms: None,
            pending_batches_per_block: 4,
            transactions_per_block: 12,
            reorg_every: 0,
            reorg_depth: 2,
            genesis_timestamp: None,
        }
    }
}

/// A token the devnet trades, at its real address on its chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownToken {
    pub symbol: &'static str,
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
const TRANSFER_SELECTOR: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];
const SWAP_SELECTOR: [u8; 4] = [0x02, 0x2c, 0x0d, 0x9f];

const ETH_TOKENS: &[KnownToken] = &[
    KnownToken {
        symbol: "USDC",
        address: address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        decimals: 6,
    },
    KnownToken {
        symbol: "WETH",
        address: address!("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2"),
        decimals: 18,
    },
    KnownToken {
        symbol: "USDT",
        address: address!("0xdAC17F958D2ee523a2206206994597C13D831ec7"),
        decimals: 6,
    },
];
const BSC_TOKENS: &[KnownToken] = &[
    KnownToken {
        symbol: "USDT",
        address: address!("0x55d398326f99059fF775485246999027B3197955"),
        decimals: 18,
    },
    KnownToken {
        symbol: "WBNB",
        address: address!("0xbb4CdB9CBd36B01bD1cBaEBF2De08d9173bc095c"),
        decimals: 18,
    },
];
const POLYGON_TOKENS: &[KnownToken] = &[
    KnownToken {
        symbol: "USDC",
        address: address!("0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"),
        decimals: 6,
    },
    KnownToken {
        symbol: "WPOL",
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

/// How one chain looks: cadence, fees, tokens and pools.
struct Profile {
    block_time_ms: u64,
    gas_limit: u64,
    /// Base fee per gas in wei (0 where the chain burns nothing).
    base_fee: u64,
    /// Priority fee (EIP-1559) or premium over the base fee (legacy).
    tip: u128,
    tokens: &'static [KnownToken],
    /// (factory, token A symbol, token B symbol, whole units of A, of B).
    pools: &'static [(&'static Factory, &'static str, &'static str, u64, u64)],
}

fn profile(chain_id: u64) -> Profile {
    match chain_id {
        56 => Profile {
            block_time_ms: 3_000,
            gas_limit: 140_000_000,
            base_fee: 0,
            tip: 1_000_000_000,
            tokens: BSC_TOKENS,
            pools: &[(&PANCAKE_V2, "WBNB", "USDT", 20_000, 12_000_000)],
        },
        137 => Profile {
            block_time_ms: 2_000,
            gas_limit: 45_000_000,
            base_fee: 30_000_000_000,
            tip: 30_000_000_000,
            tokens: POLYGON_TOKENS,
            pools: &[(&QUICKSWAP, "WPOL", "USDC", 5_000_000, 2_500_000)],
        },
        _ => Profile {
            block_time_ms: 12_000,
            gas_limit: 30_000_000,
            base_fee: 12_000_000_000,
            tip: 1_000_000_000,
            tokens: ETH_TOKENS,
            pools: &[
                (&UNISWAP_V2, "WETH", "USDC", 10_000, 30_000_000),
                (&UNISWAP_V2, "WETH", "USDT", 8_000, 24_000_000),
            ],
        },
    }
}

/// The tokens the devnet of `chain_id` trades (Ethereum's for unknown ids).
pub fn known_tokens(chain_id: u64) -> &'static [KnownToken] {
    profile(chain_id).tokens
}

/// The address a V2 factory gives the pair of two tokens.
pub fn pair_address(factory: Address, init_code_hash: B256, a: Address, b: Address) -> Address {
    let (token0, token1) = if a < b { (a, b) } else { (b, a) };
    let mut salt = [0u8; 40];
    salt[..20].copy_from_slice(token0.as_slice());
    salt[20..].copy_from_slice(token1.as_slice());
    factory.create2(keccak256(salt), init_code_hash)
}

/// The pools the devnet of `chain_id` trades in.
pub fn known_pools(chain_id: u64) -> Vec<KnownPool> {
    let profile = profile(chain_id);
    let token = |symbol: &str| {
        profile
            .tokens
            .iter()
            .find(|t| t.symbol == symbol)
            .expect("pool tokens are listed tokens")
            .address
    };
    profile
        .pools
        .iter()
        .map(|(factory, a, b, _, _)| {
            let (a, b) = (token(a), token(b));
            KnownPool {
                dex: factory.dex,
                factory: factory.address,
                address: pair_address(factory.address, factory.init_code_hash, a, b),
                token0: a.min(b),
                token1: a.max(b),
            }
        })
        .collect()
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
    /// Announced, not yet mined.
    pending: Vec<Generated>,
    /// The last blocks with their contents, newest last, for reorgs.
    recent: VecDeque<(Arc<Block>, Arc<Vec<Generated>>)>,
    /// Pending micro-batches sent since the last block.
    batches_since_block: u32,
    blocks_since_reorg: u64,
}

impl std::fmt::Debug for Devnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devnet")
            .field("chain_id", &self.chain_id)
            .field("settings", &self.settings)
            .finish()
    }
}

impl Devnet {
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
                    .expect("a keccak output is a valid key")
            })
            .collect();
        let pools = known_pools(chain_id)
            .into_iter()
            .zip(profile.pools)
            .map(|(info, (_, a, _, units_a, units_b))| {
                let units = |symbol: &str, amount: u64| {
                    let t = profile
                        .tokens
                        .iter()
                        .find(|t| t.symbol == symbol)
                        .expect("listed token");
                    U256::from(amount) * U256::from(10u64).pow(U256::from(t.decimals))
                };
                let a_address = profile
                    .tokens
                    .iter()
                    .find(|t| t.symbol == *a)
                    .expect("listed token")
                    .address;
                let b_symbol = profile
                    .tokens
                    .iter()
                    .find(|t| {
                        t.address
                            == if a_address == info.token0 {
                                info.token1
                            } else {
                                info.token0
                            }
                    })
                    .expect("listed token")
                    .symbol;
                let (ra, rb) = (units(a, *units_a), units(b_symbol, *units_b));
                let (reserve0, reserve1) = if a_address == info.token0 {
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
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default()
        });
        let validator = Address::from_slice(&derive("validator")[12..]);
        let mut devnet = Self {
            chain_id,
            settings: settings.clone(),
            profile,
            genesis_timestamp,
            rng: ChaCha8Rng::seed_from_u64(settings.seed ^ chain_id.rotate_left(32)),
            nonces: vec![0; signers.len()],
            signers,
            pools,
            validator,
            pending: Vec::new(),
            recent: VecDeque::new(),
            batches_since_block: 0,
            blocks_since_reorg: 0,
        };
        let genesis = devnet.build_block(None, &[], 0);
        devnet.recent.push_back((genesis, Arc::new(Vec::new())));
        devnet
    }

    /// Block 0: the first thing [`run`] sends.
    pub fn genesis(&self) -> Arc<Block> {
        self.recent
            .front()
            .expect("genesis is built in new")
            .0
            .clone()
    }

    pub fn block_time(&self) -> Duration {
        Duration::from_millis(
            self.settings
                .block_time_ms
                .unwrap_or(self.profile.block_time_ms)
                .max(1),
        )
    }

    /// The accounts that send the devnet's transactions.
    pub fn accounts(&self) -> Vec<Address> {
        self.signers.iter().map(PrivateKeySigner::address).collect()
    }

    /// One tick: a micro-batch of pending transactions, or, after
    /// `pending_batches_per_block` of them, the block that mines them (or a
    /// reorg's whole new branch).
    pub fn next_step(&mut self) -> Vec<SourceEvent> {
        let batches = self.settings.pending_batches_per_block.max(1);
        if self.batches_since_block < batches {
            let per_block = self.settings.transactions_per_block;
            let count =
                per_block / batches + u32::from(self.batches_since_block < per_block % batches);
            self.batches_since_block += 1;
            let txs: Vec<Generated> = (0..count).map(|_| self.generate()).collect();
            let announced = txs.iter().map(|g| g.tx.clone()).collect();
            self.pending.extend(txs);
            return vec![SourceEvent::Pending(announced)];
        }
        self.batches_since_block = 0;
        self.blocks_since_reorg += 1;
        let content = Arc::new(std::mem::take(&mut self.pending));
        let depth = usize::try_from(self.settings.reorg_depth).unwrap_or(usize::MAX);
        let reorg =
            self.settings.reorg_every > 0 && self.blocks_since_reorg >= self.settings.reorg_every;
        if reorg && depth > 0 && self.recent.len() > depth {
            self.blocks_since_reorg = 0;
            return self.reorganise(depth, content);
        }
        let parent = self
            .recent
            .back()
            .expect("genesis is always recent")
            .0
            .clone();
        let block = self.build_block(Some(&parent), &content, 0);
        self.remember(block.clone(), content);
        vec![SourceEvent::Block(block)]
    }

    /// Replaces the last `depth` blocks with a branch that re-mines their
    /// transactions, then extends it with `content`.
    fn reorganise(&mut self, depth: usize, content: Arc<Vec<Generated>>) -> Vec<SourceEvent> {
        let orphaned: Vec<_> = (0..depth)
            .map(|_| self.recent.pop_back().expect("len > depth"))
            .collect();
        let mut events = Vec::new();
        let contents = orphaned
            .iter()
            .rev()
            .map(|(_, c)| c.clone())
            .chain(std::iter::once(content));
        for content in contents {
            let parent = self.recent.back().expect("an ancestor remains").0.clone();
            let block = self.build_block(Some(&parent), &content, 1);
            self.remember(block.clone(), content);
            events.push(SourceEvent::Block(block));
        }
        events
    }

    fn remember(&mut self, block: Arc<Block>, content: Arc<Vec<Generated>>) {
        self.recent.push_back((block, content));
        let keep = usize::try_from(self.settings.reorg_depth)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
            .max(2);
        while self.recent.len() > keep {
            self.recent.pop_front();
        }
    }

    fn build_block(&self, parent: Option<&Block>, content: &[Generated], branch: u8) -> Arc<Block> {
        let number = parent.map_or(0, |p| p.number() + 1);
        let seconds_per_block = self.block_time().as_millis().div_ceil(1_000).max(1) as u64;
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
                match g.envelope {
                    TxEnvelope::Legacy(_) => ReceiptEnvelope::Legacy(with_bloom),
                    _ => ReceiptEnvelope::Eip1559(with_bloom),
                }
            })
            .collect();
        let envelopes: Vec<&TxEnvelope> = content.iter().map(|g| &g.envelope).collect();
        let label = keccak256(format!(
            "chainsieve devnet {} {} {number} {branch}",
            self.settings.seed, self.chain_id
        ));
        let header = Header {
            parent_hash: parent.map_or(B256::ZERO, |p| p.hash),
            ommers_hash: EMPTY_OMMER_ROOT_HASH,
            beneficiary: self.validator,
            state_root: keccak256(label),
            transactions_root: if content.is_empty() {
                EMPTY_ROOT_HASH
            } else {
                calculate_transaction_root(&envelopes)
            },
            receipts_root: if content.is_empty() {
                EMPTY_ROOT_HASH
            } else {
                calculate_receipt_root(&receipts)
            },
            logs_bloom: logs_bloom(content.iter().flat_map(|g| &g.logs)),
            difficulty: U256::ZERO,
            number,
            gas_limit: self.profile.gas_limit,
            gas_used: cumulative,
            timestamp: self.genesis_timestamp + number * seconds_per_block,
            extra_data: Bytes::from(format!("chainsieve devnet/{branch}").into_bytes()),
            mix_hash: label,
            nonce: Default::default(),
            base_fee_per_gas: Some(self.profile.base_fee),
            withdrawals_root: Some(EMPTY_ROOT_HASH),
            blob_gas_used: Some(0),
            excess_blob_gas: Some(0),
            parent_beacon_block_root: Some(B256::ZERO),
            // Later forks' fields (requests, access lists, slots) stay unset.
            ..Header::default()
        };
        let hash = header.hash_slow();
        let mut log_index = 0;
        let logs = content
            .iter()
            .enumerate()
            .flat_map(|(tx_index, g)| g.logs.iter().map(move |log| (tx_index, g.tx.hash, log)))
            .map(|(tx_index, tx_hash, log)| {
                log_index += 1;
                Log {
                    inner: log.clone(),
                    block_hash: Some(hash),
                    block_number: Some(number),
                    block_timestamp: None,
                    transaction_hash: Some(tx_hash),
                    transaction_index: Some(tx_index as u64),
                    log_index: Some(log_index - 1),
                    removed: false,
                }
            })
            .collect();
        Arc::new(Block {
            hash,
            header,
            transactions: content.iter().map(|g| g.tx.clone()).collect(),
            logs,
        })
    }

    /// A new signed transaction from a random account, with its effects.
    fn generate(&mut self) -> Generated {
        let sender = self.rng.random_range(0..self.signers.len());
        let from = self.signers[sender].address();
        let other = self.signers
            [(sender + self.rng.random_range(1..self.signers.len())) % self.signers.len()]
        .address();
        let roll = self.rng.random_range(0..20);
        let Effects {
            to,
            value,
            input,
            gas_used,
            logs,
        } = match roll {
            0..=7 => {
                let wei = U256::from(self.rng.random_range(1u64..5_000_000))
                    * U256::from(1_000_000_000_000u64);
                Effects {
                    to: Some(other),
                    value: wei,
                    input: Bytes::new(),
                    gas_used: 21_000,
                    logs: Vec::new(),
                }
            }
            8..=13 => {
                let token =
                    self.profile.tokens[self.rng.random_range(0..self.profile.tokens.len())];
                let amount = U256::from(self.rng.random_range(1u64..1_000_000))
                    * U256::from(10u64).pow(U256::from(token.decimals.saturating_sub(2)));
                let input = abi_call(TRANSFER_SELECTOR, &[word_address(other), amount.into()]);
                let log = transfer_log(token.address, from, other, amount);
                Effects {
                    to: Some(token.address),
                    value: U256::ZERO,
                    input,
                    gas_used: 51_000,
                    logs: vec![log],
                }
            }
            14..=18 => self.swap(from),
            _ => {
                let salt: [u8; 8] = self.rng.random();
                let mut code = hex_literal_init_code().to_vec();
                code.extend_from_slice(&salt);
                Effects {
                    to: None,
                    value: U256::ZERO,
                    input: Bytes::from(code),
                    gas_used: 180_000,
                    logs: Vec::new(),
                }
            }
        };
        let kind = to.map_or(TxKind::Create, TxKind::Call);
        let gas = gas_used + gas_used / 5;
        let nonce = self.nonces[sender];
        self.nonces[sender] += 1;
        let legacy = self.rng.random_range(0..3) == 0;
        let signer = &self.signers[sender];
        let (envelope, fees, tx_type) = if legacy {
            let gas_price = u128::from(self.profile.base_fee) + self.profile.tip;
            let tx = TxLegacy {
                chain_id: Some(self.chain_id),
                nonce,
                gas_price,
                gas_limit: gas,
                to: kind,
                value,
                input: input.clone(),
            };
            (
                TxEnvelope::from(sign(signer, tx)),
                Fees::GasPrice(gas_price),
                0,
            )
        } else {
            let max_fee_per_gas = 2 * u128::from(self.profile.base_fee) + self.profile.tip;
            let tx = TxEip1559 {
                chain_id: self.chain_id,
                nonce,
                gas_limit: gas,
                max_fee_per_gas,
                max_priority_fee_per_gas: self.profile.tip,
                to: kind,
                value,
                access_list: Default::default(),
                input: input.clone(),
            };
            let fees = Fees::Dynamic {
                max_fee_per_gas,
                max_priority_fee_per_gas: self.profile.tip,
            };
            (TxEnvelope::from(sign(signer, tx)), fees, 2)
        };
        let signature = envelope.signature();
        let parity = u64::from(signature.v());
        let v = if tx_type == 0 {
            self.chain_id * 2 + 35 + parity
        } else {
            parity
        };
        let tx = Transaction {
            hash: *envelope.tx_hash(),
            tx_type,
            chain_id: Some(self.chain_id),
            nonce,
            from,
            to,
            value,
            gas,
            fees,
            input,
            access_list: (tx_type != 0).then(Default::default),
            signature: TxSignature {
                v,
                r: signature.r(),
                s: signature.s(),
            },
        };
        Generated {
            tx: Arc::new(tx),
            envelope,
            gas_used,
            logs,
        }
    }

    /// A swap in a random pool, in a random direction, of up to 1% of the
    /// input reserve; reserves follow x·y = k with the 0.3% fee.
    fn swap(&mut self, trader: Address) -> Effects {
        let index = self.rng.random_range(0..self.pools.len());
        let zero_for_one: bool = self.rng.random();
        let basis_points = U256::from(self.rng.random_range(1u64..=100));
        let pool = &mut self.pools[index];
        let (reserve_in, reserve_out) = if zero_for_one {
            (pool.reserve0, pool.reserve1)
        } else {
            (pool.reserve1, pool.reserve0)
        };
        let amount_in = (reserve_in * basis_points / U256::from(10_000)).max(U256::from(1));
        let with_fee = amount_in * U256::from(997);
        let amount_out = with_fee * reserve_out / (reserve_in * U256::from(1_000) + with_fee);
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
        let input = abi_call(
            SWAP_SELECTOR,
            &[
                out0.into(),
                out1.into(),
                word_address(trader),
                U256::from(0x80).into(),
                B256::ZERO,
            ],
        );
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
                vec![SWAP_TOPIC, word_address(trader), word_address(trader)],
                words(&[in0.into(), in1.into(), out0.into(), out1.into()]),
            ),
        ];
        Effects {
            to: Some(pair),
            value: U256::ZERO,
            input,
            gas_used: 110_000,
            logs,
        }
    }
}

fn sign<T: SignableTransaction<alloy_primitives::Signature>>(
    signer: &PrivateKeySigner,
    tx: T,
) -> Signed<T> {
    let signature = signer
        .sign_hash_sync(&tx.signature_hash())
        .expect("signing with a local key cannot fail");
    tx.into_signed(signature)
}

/// A minimal contract creation payload (an init code prefix, varied by salt).
fn hex_literal_init_code() -> &'static [u8] {
    &[
        0x60, 0x80, 0x60, 0x40, 0x52, 0x34, 0x80, 0x15, 0x60, 0x0f, 0x57, 0x5f, 0x80, 0xfd, 0x5b,
        0x50,
    ]
}

fn word_address(address: Address) -> B256 {
    address.into_word()
}

fn words(values: &[B256]) -> Bytes {
    values.iter().flat_map(|w| w.0).collect::<Vec<u8>>().into()
}

fn abi_call(selector: [u8; 4], args: &[B256]) -> Bytes {
    let mut input = selector.to_vec();
    input.extend(args.iter().flat_map(|w| w.0));
    input.into()
}

fn transfer_log(token: Address, from: Address, to: Address, amount: U256) -> PrimitiveLog {
    PrimitiveLog::new_unchecked(
        token,
        vec![TRANSFER_TOPIC, word_address(from), word_address(to)],
        words(&[amount.into()]),
    )
}

/// Drives `devnet` in real time until `shutdown` is cancelled or the
/// receiver is gone: genesis first, then one step per
/// `block_time / (pending_batches_per_block + 1)`.
pub async fn run(mut devnet: Devnet, out: mpsc::Sender<SourceEvent>, shutdown: CancellationToken) {
    if out
        .send(SourceEvent::Block(devnet.genesis()))
        .await
        .is_err()
    {
        return;
    }
    let steps = devnet.settings.pending_batches_per_block.max(1) + 1;
    let mut ticks =
        tokio::time::interval((devnet.block_time() / steps).max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        for event in devnet.next_step() {
            if out.send(event).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use alloy_consensus::transaction::SignerRecoverable;
    use alloy_eips::eip2718::Encodable2718;

    use super::*;

    fn settings() -> DevnetSettings {
        DevnetSettings {
            seed: 7,
            genesis_timestamp: Some(1_700_000_000),
            ..DevnetSettings::default()
        }
    }

    /// The blocks and pending batches of `steps` ticks.
    fn run_steps(devnet: &mut Devnet, steps: usize) -> (Vec<Arc<Block>>, Vec<Arc<Transaction>>) {
        let mut blocks = vec![devnet.genesis()];
        let mut pending = Vec::new();
        for _ in 0..steps {
            for event in devnet.next_step() {
                match event {
                    SourceEvent::Block(b) => blocks.push(b),
                    SourceEvent::Pending(txs) => pending.extend(txs),
                }
            }
        }
        (blocks, pending)
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
            "Pancake WBNB/USDT"
        );
        for chain in [1, 56, 137] {
            for pool in known_pools(chain) {
                assert!(pool.token0 < pool.token1);
            }
        }
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let (a, pa) = run_steps(&mut Devnet::new(1, &settings()), 30);
        let (b, pb) = run_steps(&mut Devnet::new(1, &settings()), 30);
        let hashes = |blocks: &[Arc<Block>]| blocks.iter().map(|b| b.hash).collect::<Vec<_>>();
        assert_eq!(hashes(&a), hashes(&b));
        assert_eq!(pa, pb);
        let (c, _) = run_steps(
            &mut Devnet::new(
                1,
                &DevnetSettings {
                    seed: 8,
                    ..settings()
                },
            ),
            30,
        );
        assert_ne!(hashes(&a), hashes(&c));
        let (d, _) = run_steps(&mut Devnet::new(56, &settings()), 30);
        assert_ne!(hashes(&a)[1..], hashes(&d)[1..]);
    }

    #[test]
    fn transactions_are_really_signed() {
        let mut devnet = Devnet::new(137, &settings());
        let (_, pending) = run_steps(&mut devnet, 40);
        let mut types = HashSet::new();
        for tx in &pending {
            types.insert(tx.tx_type);
            let signature = alloy_primitives::Signature::new(
                tx.signature.r,
                tx.signature.s,
                tx.signature.v % 2 == if tx.tx_type == 0 { 0 } else { 1 },
            );
            let (envelope, v_ok) = match &tx.fees {
                Fees::GasPrice(gas_price) => {
                    let unsigned = TxLegacy {
                        chain_id: Some(137),
                        nonce: tx.nonce,
                        gas_price: *gas_price,
                        gas_limit: tx.gas,
                        to: tx.to.map_or(TxKind::Create, TxKind::Call),
                        value: tx.value,
                        input: tx.input.clone(),
                    };
                    (
                        TxEnvelope::from(unsigned.into_signed(signature)),
                        tx.signature.v == 137 * 2 + 35 + u64::from(signature.v()),
                    )
                }
                Fees::Dynamic {
                    max_fee_per_gas,
                    max_priority_fee_per_gas,
                } => {
                    let unsigned = TxEip1559 {
                        chain_id: 137,
                        nonce: tx.nonce,
                        gas_limit: tx.gas,
                        max_fee_per_gas: *max_fee_per_gas,
                        max_priority_fee_per_gas: *max_priority_fee_per_gas,
                        to: tx.to.map_or(TxKind::Create, TxKind::Call),
                        value: tx.value,
                        access_list: Default::default(),
                        input: tx.input.clone(),
                    };
                    (
                        TxEnvelope::from(unsigned.into_signed(signature)),
                        tx.signature.v <= 1,
                    )
                }
            };
            assert!(v_ok, "v {} for type {}", tx.signature.v, tx.tx_type);
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
        }
        assert_eq!(
            types,
            HashSet::from([0, 2]),
            "legacy and EIP-1559 both appear"
        );
        let mut nonces: HashMap<Address, Vec<u64>> = HashMap::new();
        for tx in &pending {
            nonces.entry(tx.from).or_default().push(tx.nonce);
        }
        for sequence in nonces.values() {
            assert_eq!(
                *sequence,
                (0..sequence.len() as u64).collect::<Vec<_>>(),
                "nonces are consecutive"
            );
        }
    }

    #[test]
    fn blocks_chain_and_mine_every_announced_transaction_once() {
        let mut devnet = Devnet::new(1, &settings());
        let (blocks, pending) = run_steps(&mut devnet, 50);
        assert_eq!(blocks.len(), 11);
        for pair in blocks.windows(2) {
            assert_eq!(pair[1].parent_hash(), pair[0].hash);
            assert_eq!(pair[1].number(), pair[0].number() + 1);
            assert!(pair[1].header.timestamp > pair[0].header.timestamp);
        }
        let mined: Vec<B256> = blocks
            .iter()
            .flat_map(|b| b.transactions.iter().map(|t| t.hash))
            .collect();
        let announced: Vec<B256> = pending.iter().map(|t| t.hash).collect();
        assert_eq!(
            mined,
            announced[..mined.len()],
            "mined in announcement order, each once"
        );
        for block in &blocks {
            assert_eq!(block.hash, block.header.hash_slow());
            let logs: Vec<_> = block.logs.iter().map(|l| l.inner.clone()).collect();
            assert_eq!(block.header.logs_bloom, logs_bloom(&logs));
            for (i, log) in block.logs.iter().enumerate() {
                assert_eq!(
                    (log.block_hash, log.block_number, log.log_index),
                    (Some(block.hash), Some(block.number()), Some(i as u64))
                );
            }
        }
    }

    #[test]
    fn token_transfers_and_swaps_emit_their_logs() {
        let mut devnet = Devnet::new(1, &settings());
        let (blocks, _) = run_steps(&mut devnet, 100);
        let pools = known_pools(1);
        let mut transfers = 0;
        let mut k_before: HashMap<Address, U256> = HashMap::new();
        for block in &blocks {
            for log in &block.logs {
                let topics = log.topics();
                if topics[0] == TRANSFER_TOPIC {
                    transfers += 1;
                    assert_eq!(topics.len(), 3);
                }
                if topics[0] == SYNC_TOPIC {
                    let data = &log.data().data;
                    let k = U256::from_be_slice(&data[..32]) * U256::from_be_slice(&data[32..64]);
                    let previous = k_before.insert(log.address(), k);
                    assert!(
                        previous.is_none_or(|p| k >= p),
                        "x·y never shrinks with the fee"
                    );
                    assert!(pools.iter().any(|p| p.address == log.address()));
                }
            }
            for tx in &block.transactions {
                if tx.input.starts_with(&TRANSFER_SELECTOR) {
                    let log = block
                        .logs
                        .iter()
                        .find(|l| l.transaction_hash == Some(tx.hash))
                        .expect("a transfer logs");
                    assert_eq!(Some(log.address()), tx.to);
                    assert_eq!(log.topics()[1], tx.from.into_word());
                }
            }
        }
        assert!(transfers > 10 && !k_before.is_empty());
    }

    #[test]
    fn reorgs_remine_orphaned_transactions_on_a_new_branch() {
        let mut devnet = Devnet::new(
            56,
            &DevnetSettings {
                reorg_every: 5,
                reorg_depth: 2,
                ..settings()
            },
        );
        let (blocks, _) = run_steps(&mut devnet, 40);
        let by_hash: HashMap<B256, &Arc<Block>> = blocks.iter().map(|b| (b.hash, b)).collect();
        let forks: Vec<&Arc<Block>> = blocks
            .windows(2)
            .filter(|w| w[1].parent_hash() != w[0].hash)
            .map(|w| &w[1])
            .collect();
        assert!(!forks.is_empty(), "a reorg happened");
        for fork in forks {
            let ancestor = by_hash[&fork.parent_hash()];
            assert_eq!(fork.number(), ancestor.number() + 1);
            let orphan = blocks
                .iter()
                .find(|b| b.number() == fork.number() && b.hash != fork.hash)
                .expect("the orphaned block");
            let orphan_txs: Vec<B256> = orphan.transactions.iter().map(|t| t.hash).collect();
            let fork_txs: Vec<B256> = fork.transactions.iter().map(|t| t.hash).collect();
            assert_eq!(
                orphan_txs, fork_txs,
                "the new branch re-mines the orphaned transactions"
            );
        }
    }
}
