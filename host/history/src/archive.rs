//! A devnet chain's canonical blocks beyond its log window: what a node
//! chain's nodes are to its history streams (docs/src/api.md, History from
//! the nodes). [`keep`] follows the chain's logged steps; the newest blocks
//! stay in memory up to `[devnet] archive_memory_mib`, and with `[log]
//! data_dir` every block is also written to a file (redb) up to `[history]
//! max_blocks` behind the tip, so the whole generated history is held.
//! Blocks and transactions are found by hash as by number (the RPC
//! methods' lookups, docs/src/devnet.md), each hash indexed where its
//! block is held.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use alloy_primitives::B256;
use anyhow::Context;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::mpsc;

use chainsieve_eventlog::store::Persist;
use chainsieve_model::{Block, ChainEvent};

/// number → the canonical block, as serde JSON of [`Block`].
const BLOCKS: TableDefinition<u64, &[u8]> = TableDefinition::new("blocks");

/// block hash → its number.
const BLOCK_HASHES: TableDefinition<[u8; 32], u64> = TableDefinition::new("block_hashes");

/// transaction hash → its block's number.
const TRANSACTION_HASHES: TableDefinition<[u8; 32], u64> =
    TableDefinition::new("transaction_hashes");

/// number → the hashes indexed for its block (its own, then its
/// transactions'), to let them go with it.
const HASHES_AT: TableDefinition<u64, &[u8]> = TableDefinition::new("hashes_at");

/// What one indexed hash costs in memory, roughly (key, number, the map's
/// share).
const INDEXED_BYTES: usize = 64;

/// Steps the keeper takes into one disk commit, at most.
const ROUND: usize = 1_024;

/// One devnet chain's canonical blocks.
#[derive(Debug)]
pub struct Archive {
    /// Written by [`keep`] alone, read by history streams; held only to
    /// push, pop or clone an `Arc`, never across an await or a disk read.
    recent: RwLock<Recent>,
    /// Every block since the tip was `max_blocks` behind, on disk; `None`
    /// without a data directory (memory holds what there is).
    file: Option<Arc<ArchiveFile>>,
}

/// The newest canonical blocks, in memory.
#[derive(Debug, Default)]
struct Recent {
    /// Consecutive canonical blocks, oldest first, each with what it
    /// holds (roughly, counted once).
    blocks: VecDeque<(Arc<Block>, usize)>,
    /// What `blocks` and the indexes hold, roughly.
    bytes: usize,
    /// The held blocks' numbers by their hashes, and by their
    /// transactions'.
    by_hash: HashMap<B256, u64>,
    transactions: HashMap<B256, u64>,
    /// `[devnet] archive_memory_mib`.
    max_bytes: usize,
}

impl Recent {
    /// Takes a canonical change: an added block replaces the ones at and
    /// above its number (a reorg's), a removed one drops them.
    fn follow(&mut self, change: &ChainEvent) {
        let (ChainEvent::Added(block) | ChainEvent::Removed(block)) = change else {
            return;
        };
        while self
            .blocks
            .back()
            .is_some_and(|(last, _)| last.number() >= block.number())
        {
            self.pop_back();
        }
        if let ChainEvent::Added(block) = change {
            // A block that does not follow the last (the devnet's first) starts over.
            if self
                .blocks
                .back()
                .is_some_and(|(last, _)| last.number() + 1 != block.number())
            {
                self.blocks.clear();
                self.by_hash.clear();
                self.transactions.clear();
                self.bytes = 0;
            }
            let number = block.number();
            self.by_hash.insert(block.hash, number);
            for transaction in &block.transactions {
                self.transactions.insert(transaction.hash, number);
            }
            let bytes = block.approximate_bytes() + INDEXED_BYTES * (1 + block.transactions.len());
            self.bytes += bytes;
            self.blocks.push_back((block.clone(), bytes));
        }
    }

    fn pop_back(&mut self) {
        if let Some((block, bytes)) = self.blocks.pop_back() {
            self.forget(&block, bytes);
        }
    }

    /// Lets go of `block`'s hashes (those still naming it) and its bytes.
    fn forget(&mut self, block: &Block, bytes: usize) {
        let number = block.number();
        if self.by_hash.get(&block.hash) == Some(&number) {
            self.by_hash.remove(&block.hash);
        }
        for transaction in &block.transactions {
            if self.transactions.get(&transaction.hash) == Some(&number) {
                self.transactions.remove(&transaction.hash);
            }
        }
        self.bytes -= bytes;
    }

    /// Lets go of the oldest blocks past the memory bound.
    fn trim(&mut self) {
        while self.bytes > self.max_bytes
            && let Some((block, bytes)) = self.blocks.pop_front()
        {
            self.forget(&block, bytes);
        }
    }

    fn oldest(&self) -> Option<u64> {
        self.blocks.front().map(|(block, _)| block.number())
    }

    /// The held blocks of `bottom..=top`.
    fn range(&self, bottom: u64, top: u64) -> Vec<Arc<Block>> {
        let Some(oldest) = self.oldest().filter(|oldest| *oldest <= top) else {
            return Vec::new();
        };
        let skip = usize::try_from(bottom.saturating_sub(oldest)).unwrap_or(usize::MAX);
        let take = usize::try_from(top.saturating_sub(bottom.max(oldest)) + 1).unwrap_or(0);
        self.blocks
            .iter()
            .skip(skip)
            .take(take)
            .map(|(block, _)| block.clone())
            .collect()
    }
}

impl Archive {
    /// An archive holding `max_bytes` of blocks in memory, and with `path`
    /// every block on disk in a file made empty now (the devnet generates
    /// its chain anew at every start), keeping blocks up to `max_blocks`
    /// behind the tip; and the end of it [`keep`] reads.
    pub fn new(max_bytes: usize, path: Option<&Path>, max_blocks: u64) -> anyhow::Result<Self> {
        let file = path
            .map(|path| ArchiveFile::create(path, max_blocks).map(Arc::new))
            .transpose()?;
        Ok(Self {
            recent: RwLock::new(Recent {
                max_bytes,
                ..Recent::default()
            }),
            file,
        })
    }

    /// The oldest block held.
    pub async fn oldest(&self) -> anyhow::Result<Option<u64>> {
        let in_memory = self.read().oldest();
        match &self.file {
            None => Ok(in_memory),
            Some(file) => {
                let file = file.clone();
                let on_disk = tokio::task::spawn_blocking(move || file.oldest())
                    .await
                    .context("reading the archive's oldest block")??;
                Ok(on_disk.or(in_memory))
            }
        }
    }

    /// The held canonical blocks of `bottom..=top`, oldest first: consecutive
    /// from `bottom`, or none when `bottom` is not held.
    pub async fn range(&self, bottom: u64, top: u64) -> anyhow::Result<Vec<Arc<Block>>> {
        let mut from_memory = self.read().range(bottom, top);
        let first = from_memory.first().map(|block| block.number());
        if first == Some(bottom) {
            return Ok(from_memory);
        }
        let Some(file) = &self.file else {
            return Ok(Vec::new());
        };
        // What memory let go of is on disk (written before it was let go).
        let below = first.map_or(top, |first| first - 1).min(top);
        let file = file.clone();
        let mut blocks = tokio::task::spawn_blocking(move || file.range(bottom, below))
            .await
            .context("reading the archive's file")??;
        if blocks.first().map(|block| block.number()) != Some(bottom) {
            return Ok(Vec::new());
        }
        if blocks.last().map(|block| block.number()) == Some(below) {
            blocks.append(&mut from_memory);
        }
        Ok(blocks)
    }

    /// Canonical block `number`, if held.
    pub async fn block(&self, number: u64) -> anyhow::Result<Option<Arc<Block>>> {
        Ok(self.range(number, number).await?.pop())
    }

    /// The canonical block of hash `hash`, if held.
    pub async fn block_by_hash(&self, hash: B256) -> anyhow::Result<Option<Arc<Block>>> {
        let Some(number) = self
            .number_of(hash, BLOCK_HASHES, |recent| &recent.by_hash)
            .await?
        else {
            return Ok(None);
        };
        // A reorg may have replaced it since it was indexed.
        Ok(self.block(number).await?.filter(|block| block.hash == hash))
    }

    /// The canonical block holding transaction `hash`, and its index in
    /// it, if held.
    pub async fn transaction(&self, hash: B256) -> anyhow::Result<Option<(Arc<Block>, usize)>> {
        let number = self
            .number_of(hash, TRANSACTION_HASHES, |recent| &recent.transactions)
            .await?;
        let Some(number) = number else {
            return Ok(None);
        };
        let block = self.block(number).await?;
        Ok(block.and_then(|block| {
            let index = block.transactions.iter().position(|tx| tx.hash == hash)?;
            Some((block, index))
        }))
    }

    /// The block number `hash` is indexed under, in memory or on disk.
    async fn number_of(
        &self,
        hash: B256,
        table: TableDefinition<'static, [u8; 32], u64>,
        in_memory: impl Fn(&Recent) -> &HashMap<B256, u64>,
    ) -> anyhow::Result<Option<u64>> {
        if let Some(number) = in_memory(&self.read()).get(&hash).copied() {
            return Ok(Some(number));
        }
        let Some(file) = &self.file else {
            return Ok(None);
        };
        let file = file.clone();
        tokio::task::spawn_blocking(move || file.number_of(table, hash))
            .await
            .context("reading the archive's hashes")?
    }

    fn read(&self) -> RwLockReadGuard<'_, Recent> {
        // A panic while holding the lock cannot leave the blocks half
        // changed: each change is whole before the next.
        self.recent
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Recent> {
        self.recent
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Follows the chain's logged steps into `archive` until the pipeline
/// drops their sender: each round in memory at once, then on disk in one
/// commit, and only then does memory let go of what is past its bound.
pub async fn keep(archive: Arc<Archive>, chain: Arc<str>, mut steps: mpsc::Receiver<Persist>) {
    let mut round = Vec::new();
    while steps.recv_many(&mut round, ROUND).await > 0 {
        let changes: Vec<_> = round.drain(..).map(|persist| persist.step).collect();
        {
            let mut recent = archive.write();
            for step in &changes {
                recent.follow(&step.change);
            }
        }
        if let Some(file) = &archive.file {
            let file = file.clone();
            let written = tokio::task::spawn_blocking(move || file.write(&changes)).await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    // Memory keeps them while the disk fails.
                    tracing::error!(%chain, error = format!("{error:#}"), "cannot write the archive's blocks");
                    continue;
                }
                Err(panic) => {
                    tracing::error!(%chain, %panic, "the archive writer panicked");
                    continue;
                }
            }
        }
        archive.write().trim();
    }
}

/// The archive's file.
struct ArchiveFile {
    db: Database,
    /// How far behind the tip blocks are kept.
    max_blocks: u64,
}

impl std::fmt::Debug for ArchiveFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveFile").finish_non_exhaustive()
    }
}

impl ArchiveFile {
    /// Creates the file at `path`, empty.
    fn create(path: &Path, max_blocks: u64) -> anyhow::Result<Self> {
        if path.exists() {
            std::fs::remove_file(path)
                .with_context(|| format!("emptying the archive {}", path.display()))?;
        }
        let db = Database::create(path)
            .with_context(|| format!("creating the archive {}", path.display()))?;
        let txn = db.begin_write()?;
        txn.open_table(BLOCKS)?;
        txn.open_table(BLOCK_HASHES)?;
        txn.open_table(TRANSACTION_HASHES)?;
        txn.open_table(HASHES_AT)?;
        txn.commit().context("creating the archive's tables")?;
        Ok(Self { db, max_blocks })
    }

    /// Takes `steps` in order, then lets go of blocks more than
    /// `max_blocks` behind the new tip, in one commit.
    fn write(&self, steps: &[Arc<chainsieve_eventlog::Step>]) -> anyhow::Result<()> {
        let txn = self.db.begin_write()?;
        {
            let mut tables = Tables {
                blocks: txn.open_table(BLOCKS)?,
                block_hashes: txn.open_table(BLOCK_HASHES)?,
                transaction_hashes: txn.open_table(TRANSACTION_HASHES)?,
                hashes_at: txn.open_table(HASHES_AT)?,
            };
            let mut tip = None;
            for step in steps {
                match &step.change {
                    ChainEvent::Added(block) => {
                        let number = block.number();
                        tables.drop_from(number..)?;
                        let bytes = serde_json::to_vec(&**block).context("encoding a block")?;
                        tables.blocks.insert(number, bytes.as_slice())?;
                        let mut hashes = Vec::with_capacity(32 * (1 + block.transactions.len()));
                        hashes.extend_from_slice(block.hash.as_slice());
                        tables.block_hashes.insert(block.hash.0, number)?;
                        for transaction in &block.transactions {
                            hashes.extend_from_slice(transaction.hash.as_slice());
                            tables
                                .transaction_hashes
                                .insert(transaction.hash.0, number)?;
                        }
                        tables.hashes_at.insert(number, hashes.as_slice())?;
                        tip = Some(number);
                    }
                    ChainEvent::Removed(block) => tables.drop_from(block.number()..)?,
                    ChainEvent::Pending(_) | ChainEvent::Watch(_) | ChainEvent::Lifecycle(_) => {}
                }
            }
            if let Some(tip) = tip {
                tables.drop_from(..tip.saturating_sub(self.max_blocks))?;
            }
        }
        txn.commit().context("committing the archive's blocks")
    }

    /// The number `hash` is indexed under in `table`.
    fn number_of(
        &self,
        table: TableDefinition<'static, [u8; 32], u64>,
        hash: B256,
    ) -> anyhow::Result<Option<u64>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(table)?;
        Ok(table.get(hash.0)?.map(|number| number.value()))
    }

    fn oldest(&self) -> anyhow::Result<Option<u64>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(BLOCKS)?;
        Ok(table.first()?.map(|(number, _)| number.value()))
    }

    /// The blocks of `bottom..=top` it holds.
    fn range(&self, bottom: u64, top: u64) -> anyhow::Result<Vec<Arc<Block>>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(BLOCKS)?;
        table
            .range(bottom..=top)?
            .map(|entry| {
                let (number, bytes) = entry?;
                let block: Block = serde_json::from_slice(bytes.value())
                    .with_context(|| format!("reading block {} of the archive", number.value()))?;
                Ok(Arc::new(block))
            })
            .collect()
    }
}

/// The archive file's tables, open in one write.
struct Tables<'txn> {
    blocks: redb::Table<'txn, u64, &'static [u8]>,
    block_hashes: redb::Table<'txn, [u8; 32], u64>,
    transaction_hashes: redb::Table<'txn, [u8; 32], u64>,
    hashes_at: redb::Table<'txn, u64, &'static [u8]>,
}

impl Tables<'_> {
    /// Lets go of the blocks of `numbers` and the hashes indexed for them
    /// (those still naming them).
    fn drop_from(
        &mut self,
        numbers: impl std::ops::RangeBounds<u64> + Clone,
    ) -> anyhow::Result<()> {
        let mut indexed = Vec::new();
        for entry in self.hashes_at.range(numbers.clone())? {
            let (number, hashes) = entry?;
            indexed.push((number.value(), hashes.value().to_vec()));
        }
        for (number, hashes) in indexed {
            for (at, hash) in hashes.chunks_exact(32).enumerate() {
                let hash: [u8; 32] = hash.try_into().context("a 32-byte hash")?;
                let table = if at == 0 {
                    &mut self.block_hashes
                } else {
                    &mut self.transaction_hashes
                };
                if table.get(hash)?.map(|n| n.value()) == Some(number) {
                    table.remove(hash)?;
                }
            }
        }
        self.hashes_at.retain_in(numbers.clone(), |_, _| false)?;
        self.blocks.retain_in(numbers, |_, _| false)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::B256;

    use super::*;
    use chainsieve_eventlog::EventLog;

    /// A chain of fixture blocks as the pipeline logs it: `0..10`, each
    /// with a transaction of its own, then a reorg replacing 8 and 9 with
    /// branch 2's (empty).
    fn steps() -> Vec<Persist> {
        let log = EventLog::new("eth", 1_024, 64);
        let mut changes = Vec::new();
        let mut parent = B256::ZERO;
        let mut branch_one = Vec::new();
        for number in 0..10 {
            let transaction = B256::repeat_byte(100 + number as u8);
            let block = Arc::new(Block::fixture(number, 1, parent, &[transaction]));
            parent = block.hash;
            branch_one.push(block.clone());
            changes.push(ChainEvent::Added(block));
        }
        changes.push(ChainEvent::Removed(branch_one[9].clone()));
        changes.push(ChainEvent::Removed(branch_one[8].clone()));
        let mut parent = branch_one[7].hash;
        for number in 8..10 {
            let block = Arc::new(Block::fixture(number, 2, parent, &[]));
            parent = block.hash;
            changes.push(ChainEvent::Added(block));
        }
        changes
            .into_iter()
            .map(|change| Persist {
                step: log.append(change),
                oldest: 1,
            })
            .collect()
    }

    async fn kept(archive: Archive) -> Arc<Archive> {
        let archive = Arc::new(archive);
        let steps = steps();
        let (send, steps_in) = mpsc::channel(steps.len().max(1));
        for step in steps {
            send.try_send(step).expect("room for every step");
        }
        drop(send);
        keep(archive.clone(), "eth".into(), steps_in).await;
        archive
    }

    /// Numbers and branches (the hash's last byte) of what is held.
    async fn held(archive: &Archive, bottom: u64, top: u64) -> Vec<(u64, u8)> {
        archive
            .range(bottom, top)
            .await
            .expect("read")
            .iter()
            .map(|block| (block.number(), block.hash.0[31]))
            .collect()
    }

    fn canonical() -> Vec<(u64, u8)> {
        (0..10).map(|n| (n, if n < 8 { 1 } else { 2 })).collect()
    }

    #[tokio::test]
    async fn it_holds_the_canonical_chain_across_a_reorg() {
        let archive = kept(Archive::new(1 << 20, None, 100).expect("archive")).await;
        assert_eq!(held(&archive, 0, 9).await, canonical());
        assert_eq!(held(&archive, 3, 5).await, canonical()[3..=5]);
        assert_eq!(
            held(&archive, 8, 20).await,
            canonical()[8..],
            "up to the tip"
        );
        assert_eq!(held(&archive, 10, 20).await, [], "nothing past the tip");
        assert_eq!(archive.oldest().await.expect("oldest"), Some(0));
        let eight = archive.block(8).await.expect("read").expect("held");
        assert_eq!(eight.hash.0[31], 2, "the replacement's hash");
    }

    #[tokio::test]
    async fn memory_lets_the_oldest_go_past_its_bound() {
        // Room for about three fixture blocks.
        let one = Block::fixture(0, 1, B256::ZERO, &[B256::repeat_byte(7)]).approximate_bytes();
        let archive = kept(Archive::new(3 * one, None, 100).expect("archive")).await;
        let oldest = archive.oldest().await.expect("oldest").expect("some held");
        assert!((6..=8).contains(&oldest), "oldest held {oldest}");
        assert_eq!(held(&archive, 0, 9).await, [], "block 0 is not held");
        assert_eq!(
            held(&archive, oldest, 9).await,
            canonical()[oldest as usize..]
        );
    }

    #[tokio::test]
    async fn with_a_file_every_block_is_held_and_the_file_starts_empty() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("eth.devnet.redb");
        let archive = kept(Archive::new(1, Some(&path), 100).expect("archive")).await;
        assert_eq!(archive.read().blocks.len(), 0, "memory let go of all");
        assert_eq!(held(&archive, 0, 9).await, canonical(), "read from disk");
        assert_eq!(held(&archive, 4, 6).await, canonical()[4..=6]);
        drop(archive);
        let again = Archive::new(1, Some(&path), 100).expect("reopened");
        assert_eq!(
            again.oldest().await.expect("oldest"),
            None,
            "a new devnet, a new file"
        );
    }

    #[tokio::test]
    async fn the_file_keeps_max_blocks_behind_the_tip() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("eth.devnet.redb");
        let archive = kept(Archive::new(1, Some(&path), 4).expect("archive")).await;
        assert_eq!(archive.oldest().await.expect("oldest"), Some(5));
        assert_eq!(held(&archive, 0, 9).await, [], "block 0 is gone");
        assert_eq!(held(&archive, 5, 9).await, canonical()[5..]);
    }

    /// Memory holds the newest blocks and the file the older ones: a range
    /// reads both.
    #[tokio::test]
    async fn a_range_spans_the_file_and_memory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("eth.devnet.redb");
        let one = Block::fixture(0, 1, B256::ZERO, &[B256::repeat_byte(7)]).approximate_bytes();
        let archive = kept(Archive::new(3 * one, Some(&path), 100).expect("archive")).await;
        let in_memory = archive.read().oldest().expect("some in memory");
        assert!(in_memory > 0);
        assert_eq!(held(&archive, 0, 9).await, canonical());
        assert_eq!(held(&archive, 0, 2).await, canonical()[..=2], "all on disk");
        assert_eq!(
            held(&archive, in_memory - 1, in_memory).await,
            canonical()[in_memory as usize - 1..=in_memory as usize]
        );
    }

    /// Blocks and transactions are found by hash where their blocks are
    /// held, in memory or on disk; a block a reorg replaced, its
    /// transaction, and what the file let go of are not.
    #[tokio::test]
    async fn blocks_and_transactions_are_found_by_hash_where_held() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("eth.devnet.redb");
        let one = Block::fixture(0, 1, B256::ZERO, &[B256::repeat_byte(7)]).approximate_bytes();
        let archives = [
            (
                "memory",
                Archive::new(1 << 20, None, 100).expect("archive"),
                0,
            ),
            (
                "file",
                Archive::new(1, Some(&path), 100).expect("archive"),
                0,
            ),
            (
                "both",
                Archive::new(3 * one, None, 100).expect("archive"),
                6,
            ),
        ];
        for (kind, archive, from) in archives {
            let archive = kept(archive).await;
            let oldest = archive.oldest().await.expect("oldest").expect("held");
            assert!(oldest <= from.max(8), "{kind}");
            for block in archive.range(oldest, 9).await.expect("read") {
                let found = archive.block_by_hash(block.hash).await.expect("read");
                assert_eq!(found.map(|b| b.number()), Some(block.number()), "{kind}");
                for (index, tx) in block.transactions.iter().enumerate() {
                    let found = archive.transaction(tx.hash).await.expect("read");
                    assert_eq!(
                        found.map(|(b, i)| (b.number(), i)),
                        Some((block.number(), index)),
                        "{kind}"
                    );
                }
            }
            let replaced = steps()[8].step.change.clone();
            let ChainEvent::Added(replaced) = replaced else {
                panic!("an addition")
            };
            assert_eq!(replaced.hash.0[31], 1, "branch one's block 8");
            assert!(
                archive
                    .block_by_hash(replaced.hash)
                    .await
                    .expect("read")
                    .is_none(),
                "{kind}"
            );
            let orphan = replaced.transactions[0].hash;
            assert!(
                archive.transaction(orphan).await.expect("read").is_none(),
                "{kind}"
            );
        }
        // What the file lets go of behind the tip, it finds no more.
        let path = dir.path().join("short.devnet.redb");
        let archive = kept(Archive::new(1, Some(&path), 4).expect("archive")).await;
        let ChainEvent::Added(gone) = steps()[2].step.change.clone() else {
            panic!("an addition")
        };
        assert!(
            archive
                .block_by_hash(gone.hash)
                .await
                .expect("read")
                .is_none()
        );
        assert!(
            archive
                .transaction(gone.transactions[0].hash)
                .await
                .expect("read")
                .is_none()
        );
        let file = archive.file.as_ref().expect("a file");
        let hashes = file.number_of(BLOCK_HASHES, gone.hash).expect("read");
        assert_eq!(hashes, None, "its hash let go too");
    }
}
