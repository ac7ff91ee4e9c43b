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
//!
//! Here: the [`Devnet`] and its ticks (its settings, the `[devnet]`
//! section, are the config's: [`DevnetSettings`]). Apart: `profile` (each
//! chain's cadence, fees, tokens and pairs), `workload` (what its own
//! accounts send), `mempool` (submissions), `block` (building blocks),
//! `reorg` and `task` (the real-time loop).

mod accounts;
mod block;
mod calls;
mod mempool;
mod profile;
mod reorg;
mod task;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod verified;
mod workload;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_consensus::Header;
use alloy_primitives::{Address, B256, keccak256};
use alloy_signer_local::PrivateKeySigner;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use block::{BlockJob, BlockTemplate, Built, Generated, block_offset};
use chainsieve_config::cadence;
use chainsieve_model::Block;
use chainsieve_model::SourceEvent;
use profile::{Profile, profile};
use workload::{CREATE_GAS, Pool, Unsigned, gas_limit_for};

pub use accounts::Accounts;
pub use calls::DevnetCalls;
pub use chainsieve_config::DevnetSettings;
pub use chainsieve_contracts::catalog::KnownToken;
pub use mempool::{
    Answer, DropRefused, POOL_LIMIT, PRICE_BUMP_PERCENT, Submission, SubmissionRefused, intrinsic,
};
pub use profile::{FinalityDepths, KnownPool, known_pools, known_tokens, typical_tip};
pub use task::{DevnetRequest, run};
pub use workload::{EMPTY_BLOB_COMMITMENT, empty_blob_hash};

/// How many funded accounts send transactions.
const ACCOUNTS: usize = 16;

/// What each of them holds at genesis, in ether.
const FUNDED_ETHER: u128 = 10_000;

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
    /// What the set-code transactions delegate new accounts to (an address
    /// of its own: the devnet keeps no code).
    wallet_implementation: Address,
    /// Block 0, kept apart from `recent`, which forgets old blocks.
    genesis: Arc<Block>,
    /// Announced, not yet mined, in the order blocks take them.
    pending: VecDeque<Generated>,
    /// The next nonce of every outside sender that submitted (the devnet's
    /// own accounts count in `nonces`).
    submitted_nonces: HashMap<Address, u64>,
    /// The last blocks with their contents, newest last, for reorgs.
    recent: VecDeque<(Arc<Block>, Arc<Vec<Generated>>)>,
    /// Nonces and gas for the RPC methods, shared with them.
    ledger: Arc<Accounts>,
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
            .map(|spec| Pool::new(profile.tokens, spec))
            .collect();
        let genesis_timestamp = settings.genesis_timestamp.unwrap_or_else(|| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            let block_ms = settings
                .block_time_ms
                .unwrap_or_else(|| cadence(chain_id).as_millis() as u64)
                .max(1);
            now.saturating_sub(block_offset(settings.history_blocks, block_ms))
        });
        let validator = Address::from_slice(&derive("validator")[12..]);
        let wallet_implementation = Address::from_slice(&derive("wallet")[12..]);
        // The block template reads the devnet; genesis replaces this right after.
        let placeholder = Arc::new(Block {
            hash: B256::ZERO,
            header: Header::default(),
            transactions: Vec::new(),
            logs: Vec::new(),
            lookup: None,
            gas_used: None,
            receipts: None,
        });
        let ledger = Arc::new(Accounts::new(
            signers.iter().map(|s| s.address()),
            alloy_primitives::U256::from(FUNDED_ETHER * 10u128.pow(18)),
        ));
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
            wallet_implementation,
            genesis: placeholder,
            pending: VecDeque::new(),
            submitted_nonces: HashMap::new(),
            recent: VecDeque::new(),
            ledger,
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

    /// What the RPC methods read of the devnet's accounts: nonces and
    /// balances.
    pub fn ledger(&self) -> Arc<Accounts> {
        self.ledger.clone()
    }

    /// Block 0: the first thing [`run`] sends.
    pub fn genesis(&self) -> Arc<Block> {
        self.genesis.clone()
    }

    /// How far below the tip the chain's `safe` and `finalized` blocks are:
    /// the profile's depths, deeper than the configured reorgs.
    pub fn finality_depths(&self) -> FinalityDepths {
        let reorgs = (self.settings.reorg_every > 0).then_some(self.settings.reorg_depth);
        self.profile.finality.beyond(reorgs)
    }

    /// The configured block time, else the chain's own.
    pub fn block_time(&self) -> Duration {
        match self.settings.block_time_ms {
            Some(ms) => Duration::from_millis(ms.max(1)),
            None => cadence(self.chain_id),
        }
    }

    /// The configured block gas limit, else the chain's own.
    pub fn gas_limit(&self) -> u64 {
        self.settings.gas_limit.unwrap_or(self.profile.gas_limit)
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
            Step::Work(job) => self.finish(job.run()),
        }
    }

    /// One tick; a batch is left to sign, or a block to build, as a [`Job`].
    fn step(&mut self) -> Step {
        let batches = self.settings.pending_batches_per_block.max(1);
        if self.batches_since_block < batches {
            let per_block = self.settings.transactions_per_block;
            let count =
                per_block / batches + u32::from(self.batches_since_block < per_block % batches);
            self.batches_since_block += 1;
            let mut batch = Vec::new();
            let mut reserved: u64 = self.pending.iter().map(|g| g.tx.gas).sum();
            for _ in 0..count {
                // Stop where the next transaction might not fit the block,
                // so the next block mines all that is pending.
                if reserved + gas_limit_for(CREATE_GAS) > self.gas_limit() {
                    break;
                }
                let unsigned = self.generate();
                reserved += unsigned.gas;
                batch.push(unsigned);
            }
            if batch.is_empty() {
                return Step::Announce(Vec::new());
            }
            // Its place in the pool is now: a submission taken while it is
            // signed goes after it, as it would have before the tick.
            return Step::Work(Job::Sign {
                at: self.pending.len(),
                batch,
            });
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
        Step::Work(Job::Build(BlockJob {
            template: self.template(),
            parent: self.tip(),
            contents,
        }))
    }

    /// Takes what a [`Job`] did into the chain; its events.
    fn finish(&mut self, done: Done) -> Vec<SourceEvent> {
        match done {
            Done::Signed { at, batch } => {
                let announced = batch.iter().map(|generated| generated.tx.clone()).collect();
                // Nothing leaves the pool while a job runs (ticks wait), so
                // `at` still marks what came after the tick.
                let later = self.pending.split_off(at.min(self.pending.len()));
                self.pending.extend(batch);
                self.pending.extend(later);
                vec![SourceEvent::Pending {
                    txs: announced,
                    seen_by: None,
                }]
            }
            Done::Built(built) => self.mined(built),
        }
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

    fn tip(&self) -> Arc<Block> {
        self.recent
            .back()
            .expect("the chain always has a block")
            .0
            .clone()
    }
}

/// What one tick of the devnet produced.
enum Step {
    /// Events ready to send.
    Announce(Vec<SourceEvent>),
    /// Work to do first, off the devnet's task ([`run`]).
    Work(Job),
}

/// What a tick leaves for the blocking pool: each takes milliseconds
/// (hashing a 5,000-transaction block's tries ~11 ms, signing 50
/// transactions ~2.6 ms), and submissions must not wait behind it.
enum Job {
    /// Blocks to build.
    Build(BlockJob),
    /// A pending batch of the devnet's own transactions to sign, and the
    /// place in the pool it was made for. Its nonces are taken when it is
    /// made, so an outside submission from one of the devnet's accounts
    /// meanwhile gets the nonce after them, as it would at any tick.
    Sign { at: usize, batch: Vec<Unsigned> },
}

/// What a [`Job`] did, for [`Devnet::finish`].
enum Done {
    Built(Built),
    Signed { at: usize, batch: Vec<Generated> },
}

impl Job {
    fn run(self) -> Done {
        match self {
            Self::Build(job) => Done::Built(job.run()),
            Self::Sign { at, batch } => Done::Signed {
                at,
                batch: batch.into_iter().map(Unsigned::sign).collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::testing::{run_steps, settings, stream};
    use super::*;
    use chainsieve_model::Transaction;

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
                    SourceEvent::Pending { txs, .. } => {
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
                    SourceEvent::Synced
                    | SourceEvent::Logged { .. }
                    | SourceEvent::Finality { .. }
                    | SourceEvent::Dropped(_) => {
                        unreachable!("steps carry no marker")
                    }
                }
            }
            assert!(blocks >= 20);
            // 100 steps end right after a block: nothing is left unmined.
            assert_eq!(announced, mined);
        }
    }
}
