//! The price history of one chain in an embedded database (redb): pools
//! and their tokens, every pool state by block, block times, and token
//! metadata. It survives restarts (a file per chain) and rolls back
//! orphaned blocks exactly.
//!
//! Every change is a [`PriceWrite`]: the index makes them, and between
//! servers the bus's price journal carries them, so a store that applies
//! the journal's writes in order holds what the writer's holds
//! (docs/src/architecture.md, The bus).

use std::path::Path;

use alloy_primitives::{Address, B256, U256};
use anyhow::Context;
use redb::{
    Database, MultimapTableDefinition, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, WriteTransaction,
};
use serde::{Deserialize, Serialize};

pub use chainsieve_contracts::catalog::PoolKind;
use chainsieve_eventlog::Position;

/// A pool the index prices from: its tokens in the pool's own order and
/// the factory that created it (on the allow-list).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    pub address: Address,
    pub kind: PoolKind,
    pub token0: Address,
    pub token1: Address,
    pub factory: Address,
}

/// A pool's state after a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolState {
    V2 {
        reserve0: U256,
        reserve1: U256,
    },
    V3 {
        sqrt_price_x96: U256,
        liquidity: u128,
    },
}

/// Token metadata read by `eth_call`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub name: String,
    pub decimals: u8,
}

type Addr = [u8; 20];

/// block number → timestamp.
const BLOCK_TIMES: TableDefinition<u64, u64> = TableDefinition::new("block_times");
/// block number → hash, to resume after a restart from the last block.
const BLOCK_HASHES: TableDefinition<u64, [u8; 32]> = TableDefinition::new("block_hashes");
/// (timestamp, block number), to find the block at a time.
const TIME_INDEX: TableDefinition<(u64, u64), ()> = TableDefinition::new("time_index");
/// pool → kind, token0, token1, factory.
const POOLS: TableDefinition<Addr, (u8, Addr, Addr, Addr)> = TableDefinition::new("pools");
/// (lower token, higher token) → pools of that pair.
const PAIRS: MultimapTableDefinition<(Addr, Addr), Addr> = MultimapTableDefinition::new("pairs");
/// (pool, block) → encoded state.
const STATES: TableDefinition<(Addr, u64), [u8; 64]> = TableDefinition::new("states");
/// block → pools whose state it set, to roll the block back.
const BLOCK_STATES: MultimapTableDefinition<u64, Addr> =
    MultimapTableDefinition::new("block_states");
/// Progress markers, under the names below.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// [`META`]: the next block to backfill.
const BACKFILL_NEXT: &str = "backfill_next";
/// [`META`]: the last block the backfill fills.
const BACKFILL_END: &str = "backfill_end";
/// [`META`]: the first block the live index wrote: from there on every
/// pool event is indexed, so a pool's stored state holds until its next
/// one.
const LIVE_FROM: &str = "live_from";
/// [`META`]: the log position of the newest change indexed.
const INDEXED_THROUGH: &str = "indexed_through";
/// [`META`]: the sequence of the newest journal write applied.
const JOURNALED: &str = "journaled";
/// token → (decimals, name).
const TOKENS: TableDefinition<Addr, (u8, &str)> = TableDefinition::new("tokens");

/// One block's changes to the index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockUpdate {
    pub number: u64,
    pub hash: B256,
    pub timestamp: u64,
    /// Pools learned in this block (created, or first seen and checked).
    pub pools: Vec<Pool>,
    /// The last state of each pool that changed in this block.
    pub states: Vec<(Address, PoolState)>,
}

pub struct PriceStore {
    db: Database,
}

impl std::fmt::Debug for PriceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PriceStore").finish_non_exhaustive()
    }
}

impl PriceStore {
    /// Opens (or creates) the database file at `path`.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let db = Database::create(path)
            .with_context(|| format!("opening the price database {}", path.display()))?;
        Self::init(db)
    }

    /// A database in memory, for the devnet (whose history is regenerated
    /// at every start) and tests.
    pub fn in_memory() -> anyhow::Result<Self> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .context("creating an in-memory price database")?;
        Self::init(db)
    }

    fn init(db: Database) -> anyhow::Result<Self> {
        let txn = db.begin_write()?;
        txn.open_table(BLOCK_TIMES)?;
        txn.open_table(BLOCK_HASHES)?;
        txn.open_table(TIME_INDEX)?;
        txn.open_table(POOLS)?;
        txn.open_multimap_table(PAIRS)?;
        txn.open_table(STATES)?;
        txn.open_multimap_table(BLOCK_STATES)?;
        txn.open_table(TOKENS)?;
        {
            // A store written before the marker: the index began at its
            // first block.
            let mut meta = txn.open_table(META)?;
            if meta.get(LIVE_FROM)?.is_none()
                && let Some((first, _)) = txn.open_table(BLOCK_TIMES)?.first()?
            {
                meta.insert(LIVE_FROM, first.value())?;
            }
        }
        txn.commit().context("creating the price tables")?;
        Ok(Self { db })
    }

    /// Records `write`.
    pub fn write(&self, write: &PriceWrite) -> anyhow::Result<()> {
        let txn = self.db.begin_write()?;
        put(&txn, write)?;
        txn.commit().with_context(|| format!("storing {write}"))
    }

    /// Records a block's pools and states read from the nodes (no log
    /// position), unless the store holds another block at that height (a
    /// reorg replaced it meanwhile); whether it was written.
    pub fn write_unless_replaced(&self, update: &BlockUpdate) -> anyhow::Result<bool> {
        let txn = self.db.begin_write()?;
        let held = txn
            .open_table(BLOCK_HASHES)?
            .get(update.number)?
            .map(|hash| B256::from(hash.value()));
        if held.is_some_and(|hash| hash != update.hash) {
            return Ok(false);
        }
        put(
            &txn,
            &PriceWrite::Block {
                update: update.clone(),
                position: None,
            },
        )?;
        txn.commit().with_context(|| {
            format!(
                "storing block {}'s pools read from the nodes",
                update.number
            )
        })?;
        Ok(true)
    }

    /// The first block the live index wrote (see [`LIVE_FROM`]).
    pub fn live_from(&self) -> anyhow::Result<Option<u64>> {
        self.marker(LIVE_FROM)
    }

    /// Records a run of the price journal's writes, each with its
    /// sequence, in one transaction, with the newest sequence applied.
    pub fn write_journaled(&self, writes: &[(u64, PriceWrite)]) -> anyhow::Result<()> {
        let Some(&(newest, _)) = writes.last() else {
            return Ok(());
        };
        let txn = self.db.begin_write()?;
        for (sequence, write) in writes {
            put(&txn, write).with_context(|| format!("applying journal write {sequence}"))?;
        }
        txn.open_table(META)?.insert(JOURNALED, newest)?;
        txn.commit()
            .with_context(|| format!("storing the journal's writes up to {newest}"))
    }

    /// The sequence of the newest journal write applied (0: none).
    pub fn journaled(&self) -> anyhow::Result<u64> {
        Ok(self.marker(JOURNALED)?.unwrap_or(0))
    }

    /// The log position of the newest change indexed (0: none).
    pub fn indexed_through(&self) -> anyhow::Result<Position> {
        Ok(self.marker(INDEXED_THROUGH)?.unwrap_or(0))
    }

    /// Whether nothing was ever written.
    pub fn is_empty(&self) -> anyhow::Result<bool> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(BLOCK_TIMES)?.is_empty()?
            && txn.open_table(TOKENS)?.is_empty()?
            && txn.open_table(META)?.is_empty()?)
    }

    /// The backfill's progress, once it has run: the next block it reads
    /// and the last it fills.
    pub fn backfill(&self) -> anyhow::Result<Option<(u64, u64)>> {
        Ok(self.marker(BACKFILL_NEXT)?.zip(self.marker(BACKFILL_END)?))
    }

    /// The newest block recorded.
    pub fn tip(&self) -> anyhow::Result<Option<(u64, u64)>> {
        let txn = self.db.begin_read()?;
        let times = txn.open_table(BLOCK_TIMES)?;
        Ok(times.last()?.map(|(n, t)| (n.value(), t.value())))
    }

    /// The newest block recorded: (number, hash), where a node source
    /// resumes after a restart.
    pub fn tip_block(&self) -> anyhow::Result<Option<(u64, B256)>> {
        let txn = self.db.begin_read()?;
        let hashes = txn.open_table(BLOCK_HASHES)?;
        Ok(hashes
            .last()?
            .map(|(n, h)| (n.value(), B256::from(h.value()))))
    }

    /// The oldest block recorded.
    pub fn first_block(&self) -> anyhow::Result<Option<u64>> {
        let txn = self.db.begin_read()?;
        let times = txn.open_table(BLOCK_TIMES)?;
        Ok(times.first()?.map(|(n, _)| n.value()))
    }

    fn marker(&self, name: &str) -> anyhow::Result<Option<u64>> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        Ok(meta.get(name)?.map(|v| v.value()))
    }

    /// The time of block `number`, if recorded.
    pub fn block_time(&self, number: u64) -> anyhow::Result<Option<u64>> {
        let txn = self.db.begin_read()?;
        let times = txn.open_table(BLOCK_TIMES)?;
        Ok(times.get(number)?.map(|t| t.value()))
    }

    /// The hash of block `number`, if recorded.
    pub fn block_hash(&self, number: u64) -> anyhow::Result<Option<B256>> {
        let txn = self.db.begin_read()?;
        let hashes = txn.open_table(BLOCK_HASHES)?;
        Ok(hashes.get(number)?.map(|hash| B256::from(hash.value())))
    }

    /// The oldest block recorded at or after `number`: (number, timestamp).
    pub fn block_from(&self, number: u64) -> anyhow::Result<Option<(u64, u64)>> {
        let txn = self.db.begin_read()?;
        let times = txn.open_table(BLOCK_TIMES)?;
        let found = times.range(number..)?.next();
        Ok(match found {
            Some(entry) => {
                let (number, time) = entry?;
                Some((number.value(), time.value()))
            }
            None => None,
        })
    }

    /// The newest block at or before `timestamp`: (number, timestamp).
    pub fn block_at(&self, timestamp: u64) -> anyhow::Result<Option<(u64, u64)>> {
        let txn = self.db.begin_read()?;
        let index = txn.open_table(TIME_INDEX)?;
        let found = index.range(..=(timestamp, u64::MAX))?.next_back();
        Ok(match found {
            Some(entry) => {
                let (key, _) = entry?;
                let (time, number) = key.value();
                Some((number, time))
            }
            None => None,
        })
    }

    /// The pools of the pair (either order).
    pub fn pools_of(&self, a: Address, b: Address) -> anyhow::Result<Vec<Pool>> {
        let txn = self.db.begin_read()?;
        let pairs = txn.open_multimap_table(PAIRS)?;
        let pools = txn.open_table(POOLS)?;
        let mut found = Vec::new();
        for address in pairs.get(pair_key(a, b))? {
            let address = address?.value();
            if let Some(record) = pools.get(address)? {
                found.push(decode_pool(address, record.value()));
            }
        }
        Ok(found)
    }

    pub fn pool(&self, address: Address) -> anyhow::Result<Option<Pool>> {
        let txn = self.db.begin_read()?;
        let pools = txn.open_table(POOLS)?;
        Ok(pools
            .get(address.0.0)?
            .map(|r| decode_pool(address.0.0, r.value())))
    }

    /// The pool's newest state at or before `block`: (its block, state).
    pub fn state_at(&self, pool: Address, block: u64) -> anyhow::Result<Option<(u64, PoolState)>> {
        let txn = self.db.begin_read()?;
        let states = txn.open_table(STATES)?;
        let found = states.range((pool.0.0, 0)..=(pool.0.0, block))?.next_back();
        Ok(match found {
            Some(entry) => {
                let (key, value) = entry?;
                Some((key.value().1, decode_state(&value.value())))
            }
            None => None,
        })
    }

    pub fn token(&self, address: Address) -> anyhow::Result<Option<Token>> {
        let txn = self.db.begin_read()?;
        let tokens = txn.open_table(TOKENS)?;
        Ok(tokens.get(address.0.0)?.map(|t| {
            let (decimals, name) = t.value();
            Token {
                name: name.to_string(),
                decimals,
            }
        }))
    }
}

/// One change to a price store, as the index makes it and the bus's price
/// journal carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PriceWrite {
    /// A block indexed: its time, the pools it revealed, their states.
    /// `position` is the log step that added it (none for a backfilled
    /// block).
    Block {
        update: BlockUpdate,
        position: Option<Position>,
    },
    /// Block `number` left the canonical chain (log step `position`): what
    /// it set is forgotten. Pools it revealed stay known: they exist on
    /// every branch that created them, and an unknown pool is only ever
    /// checked once.
    RollBack { number: u64, position: Position },
    /// A token's metadata.
    Token { address: Address, token: Token },
    /// The backfill, which fills blocks up to `end`, has stored every block
    /// before `next`.
    Backfilled { next: u64, end: u64 },
}

impl std::fmt::Display for PriceWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Block { update, .. } => write!(f, "block {}", update.number),
            Self::RollBack { number, .. } => write!(f, "the rollback of block {number}"),
            Self::Token { address, .. } => write!(f, "token {address}"),
            Self::Backfilled { next, end } => {
                write!(f, "backfill progress (next {next} of {end})")
            }
        }
    }
}

/// Makes `write` in `txn`.
fn put(txn: &WriteTransaction, write: &PriceWrite) -> anyhow::Result<()> {
    match write {
        PriceWrite::Block { update, position } => {
            let mut times = txn.open_table(BLOCK_TIMES)?;
            let mut index = txn.open_table(TIME_INDEX)?;
            if let Some(old) = times.insert(update.number, update.timestamp)? {
                index.remove((old.value(), update.number))?;
            }
            index.insert((update.timestamp, update.number), ())?;
            txn.open_table(BLOCK_HASHES)?
                .insert(update.number, update.hash.0)?;
            let mut pools = txn.open_table(POOLS)?;
            let mut pairs = txn.open_multimap_table(PAIRS)?;
            for pool in &update.pools {
                pools.insert(pool.address.0.0, encode_pool(pool))?;
                pairs.insert(pair_key(pool.token0, pool.token1), pool.address.0.0)?;
            }
            let mut states = txn.open_table(STATES)?;
            let mut touched = txn.open_multimap_table(BLOCK_STATES)?;
            for (pool, state) in &update.states {
                states.insert((pool.0.0, update.number), encode_state(state))?;
                touched.insert(update.number, pool.0.0)?;
            }
            if let Some(position) = position {
                let mut meta = txn.open_table(META)?;
                meta.insert(INDEXED_THROUGH, position)?;
                if meta.get(LIVE_FROM)?.is_none() {
                    meta.insert(LIVE_FROM, update.number)?;
                }
            }
        }
        PriceWrite::RollBack { number, position } => {
            let mut times = txn.open_table(BLOCK_TIMES)?;
            if let Some(old) = times.remove(number)? {
                txn.open_table(TIME_INDEX)?.remove((old.value(), *number))?;
            }
            txn.open_table(BLOCK_HASHES)?.remove(number)?;
            let mut states = txn.open_table(STATES)?;
            let mut touched = txn.open_multimap_table(BLOCK_STATES)?;
            for pool in touched.remove_all(number)? {
                states.remove((pool?.value(), *number))?;
            }
            txn.open_table(META)?.insert(INDEXED_THROUGH, position)?;
        }
        PriceWrite::Token { address, token } => {
            txn.open_table(TOKENS)?
                .insert(address.0.0, (token.decimals, token.name.as_str()))?;
        }
        PriceWrite::Backfilled { next, end } => {
            let mut meta = txn.open_table(META)?;
            meta.insert(BACKFILL_NEXT, next)?;
            meta.insert(BACKFILL_END, end)?;
        }
    }
    Ok(())
}

fn pair_key(a: Address, b: Address) -> (Addr, Addr) {
    if a <= b {
        (a.0.0, b.0.0)
    } else {
        (b.0.0, a.0.0)
    }
}

fn encode_pool(pool: &Pool) -> (u8, Addr, Addr, Addr) {
    let kind = match pool.kind {
        PoolKind::V2 => 2,
        PoolKind::V3 => 3,
    };
    (kind, pool.token0.0.0, pool.token1.0.0, pool.factory.0.0)
}

fn decode_pool(address: Addr, (kind, token0, token1, factory): (u8, Addr, Addr, Addr)) -> Pool {
    Pool {
        address: Address::from(address),
        kind: if kind == 3 {
            PoolKind::V3
        } else {
            PoolKind::V2
        },
        token0: Address::from(token0),
        token1: Address::from(token1),
        factory: Address::from(factory),
    }
}

/// A state in 64 bytes: two big-endian words (V3's liquidity widened; a
/// V3 state is told apart by its pool's kind, so no tag is stored).
fn encode_state(state: &PoolState) -> [u8; 64] {
    let (a, b) = match *state {
        PoolState::V2 { reserve0, reserve1 } => (reserve0, reserve1),
        PoolState::V3 {
            sqrt_price_x96,
            liquidity,
        } => (
            sqrt_price_x96,
            U256::from(liquidity) | (U256::from(1) << 255),
        ),
    };
    let mut out = [0u8; 64];
    out[..32].copy_from_slice(&a.to_be_bytes::<32>());
    out[32..].copy_from_slice(&b.to_be_bytes::<32>());
    out
}

fn decode_state(bytes: &[u8; 64]) -> PoolState {
    let a = U256::from_be_slice(&bytes[..32]);
    let b = U256::from_be_slice(&bytes[32..]);
    // Reserves are uint112, so the top bit marks a V3 state.
    if b.bit(255) {
        PoolState::V3 {
            sqrt_price_x96: a,
            liquidity: (b & U256::from(u128::MAX)).to(),
        }
    } else {
        PoolState::V2 {
            reserve0: a,
            reserve1: b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(byte: u8) -> Address {
        Address::repeat_byte(byte)
    }

    /// A V2 pool of tokens 1 and 2.
    fn test_pool() -> Pool {
        Pool {
            address: addr(0xaa),
            kind: PoolKind::V2,
            token0: addr(1),
            token1: addr(2),
            factory: addr(0xf0),
        }
    }

    fn v2(r0: u64, r1: u64) -> PoolState {
        PoolState::V2 {
            reserve0: U256::from(r0),
            reserve1: U256::from(r1),
        }
    }

    #[test]
    fn states_by_block_times_and_rollback() {
        let store = PriceStore::in_memory().expect("store");
        let pool = test_pool();
        store
            .write(&PriceWrite::Block {
                update: BlockUpdate {
                    number: 10,
                    hash: B256::with_last_byte(10),
                    timestamp: 1_000,
                    pools: vec![pool],
                    states: vec![(pool.address, v2(1, 2))],
                },
                position: None,
            })
            .expect("block 10");
        store
            .write(&PriceWrite::Block {
                update: BlockUpdate {
                    number: 11,
                    hash: B256::with_last_byte(11),
                    timestamp: 1_012,
                    pools: vec![],
                    states: vec![],
                },
                position: None,
            })
            .expect("block 11");
        let v3 = PoolState::V3 {
            sqrt_price_x96: U256::from(7),
            liquidity: u128::MAX,
        };
        store
            .write(&PriceWrite::Block {
                update: BlockUpdate {
                    number: 12,
                    hash: B256::with_last_byte(12),
                    timestamp: 1_024,
                    pools: vec![],
                    states: vec![(pool.address, v3)],
                },
                position: None,
            })
            .expect("block 12");

        assert_eq!(store.pools_of(addr(2), addr(1)).expect("pools"), vec![pool]);
        assert_eq!(store.pool(pool.address).expect("pool"), Some(pool));
        assert_eq!(
            store.state_at(pool.address, 11).expect("state"),
            Some((10, v2(1, 2)))
        );
        assert_eq!(
            store.state_at(pool.address, 12).expect("state"),
            Some((12, v3))
        );
        assert_eq!(store.state_at(pool.address, 9).expect("state"), None);
        assert_eq!(store.block_at(1_020).expect("time"), Some((11, 1_012)));
        assert_eq!(store.block_at(999).expect("time"), None);
        assert_eq!(store.tip().expect("tip"), Some((12, 1_024)));
        assert_eq!(
            store.tip_block().expect("tip"),
            Some((12, B256::with_last_byte(12)))
        );

        store
            .write(&PriceWrite::RollBack {
                number: 12,
                position: 3,
            })
            .expect("roll back");
        assert_eq!(store.indexed_through().expect("through"), 3);
        assert_eq!(
            store.state_at(pool.address, 12).expect("state"),
            Some((10, v2(1, 2)))
        );
        assert_eq!(store.tip().expect("tip"), Some((11, 1_012)));
        assert_eq!(
            store.tip_block().expect("tip"),
            Some((11, B256::with_last_byte(11)))
        );
        assert_eq!(store.block_at(2_000).expect("time"), Some((11, 1_012)));
    }

    /// A run of journal writes lands in one transaction with the newest
    /// sequence; a changed block's position says how far the index got.
    /// The live index's first block is where coverage begins; what the
    /// nodes were asked is written beside it, never over another block of
    /// the same height.
    #[test]
    fn the_live_start_and_reads_from_the_nodes() {
        let store = PriceStore::in_memory().expect("store");
        let block = |number: u64, byte: u8| BlockUpdate {
            number,
            hash: B256::repeat_byte(byte),
            timestamp: 1_000 + number,
            ..BlockUpdate::default()
        };
        let live = |update: BlockUpdate, position| PriceWrite::Block {
            update,
            position: Some(position),
        };
        // Backfilled blocks (no position) do not start it.
        store
            .write(&PriceWrite::Block {
                update: block(3, 3),
                position: None,
            })
            .expect("backfilled");
        assert_eq!(store.live_from().expect("read"), None);
        store.write(&live(block(20, 20), 1)).expect("live");
        store.write(&live(block(21, 21), 2)).expect("live");
        assert_eq!(store.live_from().expect("read"), Some(20));
        // A read of block 5 from the nodes: written.
        let pool = test_pool();
        let read = BlockUpdate {
            pools: vec![pool],
            states: vec![(pool.address, v2(4, 8))],
            ..block(5, 5)
        };
        assert!(store.write_unless_replaced(&read).expect("write"));
        assert_eq!(
            store.state_at(pool.address, 9).expect("read"),
            Some((5, v2(4, 8)))
        );
        assert_eq!(store.block_from(4).expect("read"), Some((5, 1_005)));
        assert_eq!(
            store.block_hash(5).expect("read"),
            Some(B256::repeat_byte(5))
        );
        // One of block 21 of another branch: not written.
        let stale = BlockUpdate {
            states: vec![(pool.address, v2(1, 1))],
            ..block(21, 0xee)
        };
        assert!(!store.write_unless_replaced(&stale).expect("write"));
        assert_eq!(
            store.state_at(pool.address, 21).expect("read"),
            Some((5, v2(4, 8)))
        );
        assert_eq!(store.live_from().expect("read"), Some(20), "unchanged");
    }

    #[test]
    fn journal_runs_are_kept_with_their_sequence() {
        let store = PriceStore::in_memory().expect("store");
        assert_eq!(store.journaled().expect("journaled"), 0);
        assert_eq!(store.indexed_through().expect("through"), 0);
        let block = |number: u64, position| PriceWrite::Block {
            update: BlockUpdate {
                number,
                hash: B256::with_last_byte(number as u8),
                timestamp: number * 12,
                ..Default::default()
            },
            position,
        };
        store
            .write_journaled(&[
                (1, block(5, None)),
                (2, PriceWrite::Backfilled { next: 6, end: 9 }),
                (3, block(6, Some(40))),
            ])
            .expect("a run");
        assert_eq!(store.journaled().expect("journaled"), 3);
        assert_eq!(store.indexed_through().expect("through"), 40);
        assert_eq!(store.backfill().expect("markers"), Some((6, 9)));
        assert_eq!(store.tip().expect("tip"), Some((6, 72)));
        store
            .write_journaled(&[(
                4,
                PriceWrite::RollBack {
                    number: 6,
                    position: 41,
                },
            )])
            .expect("a rollback");
        assert_eq!(store.journaled().expect("journaled"), 4);
        assert_eq!(store.indexed_through().expect("through"), 41);
        assert_eq!(store.tip().expect("tip"), Some((5, 60)));
        store.write_journaled(&[]).expect("nothing");
        assert_eq!(store.journaled().expect("journaled"), 4);
    }

    #[test]
    fn survives_a_reopen() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("eth.redb");
        {
            let store = PriceStore::open(&path).expect("open");
            store
                .write(&PriceWrite::Token {
                    address: addr(1),
                    token: Token {
                        name: "Wrapped Ether".into(),
                        decimals: 18,
                    },
                })
                .expect("token");
            store
                .write(&PriceWrite::Block {
                    update: BlockUpdate {
                        number: 5,
                        hash: B256::with_last_byte(5),
                        timestamp: 50,
                        ..Default::default()
                    },
                    position: None,
                })
                .expect("block");
        }
        let store = PriceStore::open(&path).expect("reopen");
        assert_eq!(
            store.token(addr(1)).expect("token"),
            Some(Token {
                name: "Wrapped Ether".into(),
                decimals: 18
            })
        );
        assert_eq!(store.tip().expect("tip"), Some((5, 50)));
    }
}
