//! Where watchlists persist. [`WatchlistStore`] is what the service needs
//! of it: everything at start, each change committed whole (one
//! transaction: an edit is all or nothing), and now and then the whole set
//! rewritten compactly. A server of role `all` keeps them in the embedded
//! database ([`EmbeddedWatchlists`]: `watchlists.redb` under `data_dir`,
//! or in memory), where only it writes.
//!
//! An edit is one row of a journal, its addresses packed: one B-tree
//! insert at the journal's end, however many addresses it holds. (A row
//! per address put 10,000 random keys into a tree of a million, rewriting
//! most of its leaves: ~100 ms an edit, docs/src/benchmarks.md,
//! Watchlists.) Loading replays the journal over the last snapshot; once
//! the journal outweighs what it describes, [`WatchlistStore::compact`]
//! writes a new snapshot and empties the journal, in one transaction.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use futures_util::future::BoxFuture;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::index::{Address, Handle, Index, Seq};

/// A watchlist as stored: whose it is and its name.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct ListRecord {
    /// The digest of the owning key's secret (as webhooks are owned).
    pub owner: String,
    pub name: String,
    /// Unix seconds.
    pub created: u64,
    pub updated: u64,
}

/// One change, committed with its edit's sequence number. Every address
/// it names is a real change (the service leaves out the others).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new watchlist with its first addresses.
    Create {
        record: ListRecord,
        joined: Vec<Address>,
    },
    /// Addresses that joined and left a watchlist; `Clear` is this with
    /// every address leaving.
    Edit {
        updated: u64,
        joined: Vec<Address>,
        left: Vec<Address>,
    },
    /// The watchlist and its addresses are gone.
    Delete,
}

/// What the store holds at start.
#[derive(Debug, Default)]
pub struct Loaded {
    pub lists: Vec<(Handle, ListRecord)>,
    /// Every membership, as of the last edit committed (its `seq`).
    pub index: Index,
    /// The handle the next new watchlist takes.
    pub next_handle: Handle,
    /// The journal's size: what compaction weighs.
    pub journal_bytes: u64,
}

/// What the watchlist service keeps, wherever it keeps it.
pub trait WatchlistStore: Send + Sync + std::fmt::Debug + 'static {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Loaded>>;
    /// Commits `change` to watchlist `handle` as edit `seq`; answers the
    /// bytes it added to the journal.
    fn commit(
        &self,
        seq: Seq,
        handle: Handle,
        change: Change,
    ) -> BoxFuture<'_, anyhow::Result<u64>>;
    /// Replaces everything up to edit `seq` with `members` (every
    /// watchlist's addresses as of it).
    fn compact(
        &self,
        seq: Seq,
        members: Vec<(Handle, Vec<Address>)>,
    ) -> BoxFuture<'_, anyhow::Result<()>>;
}

/// The file's name under `data_dir`.
pub const FILE: &str = "watchlists.redb";

/// handle → serde JSON of a [`ListRecord`].
const LISTS: TableDefinition<u32, &[u8]> = TableDefinition::new("lists");
/// seq → an encoded edit ([`encode`]).
const JOURNAL: TableDefinition<u64, &[u8]> = TableDefinition::new("journal");
/// (handle, part) → up to [`SNAPSHOT_PART`] packed addresses: the
/// memberships as of `snapshot_seq`.
const SNAPSHOT: TableDefinition<(u32, u32), &[u8]> = TableDefinition::new("snapshot");
/// `seq` (the last edit), `snapshot_seq`, `next_handle`.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Addresses per snapshot row: 80 KB values.
const SNAPSHOT_PART: usize = 4_096;

const JOINED: u8 = 1;
const LEFT: u8 = 2;
const DELETED: u8 = 3;

/// A journal row: the handle, then sections of a kind byte, a count and
/// the packed addresses.
fn encode(handle: Handle, change: &Change) -> Vec<u8> {
    let (joined, left, deleted): (&[Address], &[Address], bool) = match change {
        Change::Create { joined, .. } => (joined, &[], false),
        Change::Edit { joined, left, .. } => (joined, left, false),
        Change::Delete => (&[], &[], true),
    };
    let mut row = Vec::with_capacity(14 + 20 * (joined.len() + left.len()));
    row.extend_from_slice(&handle.to_be_bytes());
    for (kind, addresses) in [(LEFT, left), (JOINED, joined)] {
        if !addresses.is_empty() {
            row.push(kind);
            row.extend_from_slice(&(addresses.len() as u32).to_be_bytes());
            addresses.iter().for_each(|a| row.extend_from_slice(a));
        }
    }
    if deleted {
        row.push(DELETED);
    }
    row
}

/// Applies a journal row to `index` as edit `seq`; answers the watchlist
/// it deleted, if it did.
fn replay(index: &mut Index, seq: Seq, mut row: &[u8]) -> anyhow::Result<Option<Handle>> {
    let take = |row: &mut &[u8], n: usize| -> anyhow::Result<Vec<u8>> {
        let Some((head, rest)) = row.split_at_checked(n) else {
            bail!("journal row {seq} ends early");
        };
        *row = rest;
        Ok(head.to_vec())
    };
    let handle = Handle::from_be_bytes(take(&mut row, 4)?.try_into().unwrap_or_default());
    let (mut joined, mut left, mut deleted) = (Vec::new(), Vec::new(), false);
    while let Some((&kind, rest)) = row.split_first() {
        row = rest;
        if kind == DELETED {
            deleted = true;
            continue;
        }
        let count = u32::from_be_bytes(take(&mut row, 4)?.try_into().unwrap_or_default()) as usize;
        let packed = take(&mut row, 20 * count)?;
        let addresses = packed
            .chunks_exact(20)
            .map(|a| a.try_into().unwrap_or([0; 20]));
        match kind {
            JOINED => joined.extend(addresses),
            LEFT => left.extend(addresses),
            other => bail!("journal row {seq} has a section of kind {other}"),
        }
    }
    if deleted {
        left = index.members_of(handle, index.seq());
    }
    index.apply(seq, handle, &joined, &left);
    index.settle(seq);
    Ok(deleted.then_some(handle))
}

/// The embedded database's store.
#[derive(Debug)]
pub struct EmbeddedWatchlists {
    db: Arc<Database>,
}

impl EmbeddedWatchlists {
    /// Opens (or creates) `dir/watchlists.redb`, or a database in memory
    /// without `dir`.
    pub fn open(dir: Option<&Path>) -> anyhow::Result<Self> {
        let db = chainsieve_runtime::embedded::open(dir, FILE, "the watchlists database")?;
        let txn = db.begin_write()?;
        txn.open_table(LISTS)?;
        txn.open_table(JOURNAL)?;
        txn.open_table(SNAPSHOT)?;
        txn.open_table(META)?;
        txn.commit().context("creating the watchlist tables")?;
        Ok(Self { db: Arc::new(db) })
    }

    fn read_all(db: &Database) -> anyhow::Result<Loaded> {
        let txn = db.begin_read()?;
        let mut loaded = Loaded::default();
        for entry in txn.open_table(LISTS)?.iter()? {
            let (handle, value) = entry?;
            let record: ListRecord = serde_json::from_slice(value.value())
                .with_context(|| format!("decoding watchlist {}", handle.value()))?;
            loaded.lists.push((handle.value(), record));
        }
        for entry in txn.open_table(SNAPSHOT)?.iter()? {
            let (key, packed) = entry?;
            let handle = key.value().0;
            for address in packed.value().chunks_exact(20) {
                loaded
                    .index
                    .load(handle, address.try_into().context("a snapshot's address")?);
            }
        }
        let meta = txn.open_table(META)?;
        let snapshot_seq = meta.get("snapshot_seq")?.map_or(0, |v| v.value());
        loaded.index.loaded(snapshot_seq);
        for entry in txn.open_table(JOURNAL)?.iter()? {
            let (seq, row) = entry?;
            loaded.journal_bytes += row.value().len() as u64;
            replay(&mut loaded.index, seq.value(), row.value())
                .with_context(|| format!("replaying watchlist edit {}", seq.value()))?;
        }
        let seq = meta.get("seq")?.map_or(0, |v| v.value());
        if loaded.index.seq() != seq {
            bail!(
                "the watchlist journal ends at edit {}, the store's last is {seq}",
                loaded.index.seq()
            );
        }
        loaded.next_handle = meta.get("next_handle")?.map_or(1, |v| v.value()) as Handle;
        Ok(loaded)
    }

    fn write(db: &Database, seq: Seq, handle: Handle, change: Change) -> anyhow::Result<u64> {
        let txn = db.begin_write()?;
        let row = encode(handle, &change);
        {
            let mut lists = txn.open_table(LISTS)?;
            let mut meta = txn.open_table(META)?;
            match change {
                Change::Create { record, .. } => {
                    lists.insert(handle, serde_json::to_vec(&record)?.as_slice())?;
                    let next = meta.get("next_handle")?.map_or(1, |v| v.value());
                    meta.insert("next_handle", next.max(u64::from(handle) + 1))?;
                }
                Change::Edit { updated, .. } => {
                    let mut record: ListRecord = {
                        let value = lists
                            .get(handle)?
                            .with_context(|| format!("watchlist {handle} is not stored"))?;
                        serde_json::from_slice(value.value()).context("decoding a watchlist")?
                    };
                    record.updated = updated;
                    lists.insert(handle, serde_json::to_vec(&record)?.as_slice())?;
                }
                Change::Delete => {
                    lists.remove(handle)?;
                }
            }
            txn.open_table(JOURNAL)?.insert(seq, row.as_slice())?;
            meta.insert("seq", seq)?;
        }
        txn.commit().context("committing a watchlist edit")?;
        Ok(row.len() as u64)
    }

    fn rewrite(
        db: &Database,
        seq: Seq,
        members: Vec<(Handle, Vec<Address>)>,
    ) -> anyhow::Result<()> {
        let txn = db.begin_write()?;
        {
            let mut snapshot = txn.open_table(SNAPSHOT)?;
            snapshot.retain(|_, _| false)?;
            for (handle, addresses) in members {
                for (part, chunk) in addresses.chunks(SNAPSHOT_PART).enumerate() {
                    snapshot.insert((handle, part as u32), chunk.concat().as_slice())?;
                }
            }
            txn.open_table(JOURNAL)?.retain(|edit, _| edit > seq)?;
            txn.open_table(META)?.insert("snapshot_seq", seq)?;
        }
        txn.commit().context("committing a watchlist snapshot")?;
        Ok(())
    }
}

impl WatchlistStore for EmbeddedWatchlists {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Loaded>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || Self::read_all(&db))
                .await
                .context("reading the watchlists")?
                .context("reading the watchlists")
        })
    }

    fn commit(
        &self,
        seq: Seq,
        handle: Handle,
        change: Change,
    ) -> BoxFuture<'_, anyhow::Result<u64>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || Self::write(&db, seq, handle, change))
                .await
                .context("writing a watchlist edit")?
                .context("writing a watchlist edit")
        })
    }

    fn compact(
        &self,
        seq: Seq,
        members: Vec<(Handle, Vec<Address>)>,
    ) -> BoxFuture<'_, anyhow::Result<()>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || Self::rewrite(&db, seq, members))
                .await
                .context("writing a watchlist snapshot")?
                .context("writing a watchlist snapshot")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> ListRecord {
        ListRecord {
            owner: "owner".into(),
            name: name.into(),
            created: 1,
            updated: 1,
        }
    }

    fn members(index: &Index, handle: Handle) -> Vec<Address> {
        let mut members = index.members_of(handle, index.seq());
        members.sort_unstable();
        members
    }

    /// Every change persists across a reopen, in one piece, and so does
    /// what a compaction wrote, with the edits after it.
    #[tokio::test]
    async fn changes_and_snapshots_persist() {
        let dir = tempfile::tempdir().expect("dir");
        {
            let store = EmbeddedWatchlists::open(Some(dir.path())).expect("open");
            let joined: Vec<Address> = (1..=5u8).map(|n| [n; 20]).collect();
            let create = Change::Create {
                record: record("a"),
                joined,
            };
            store.commit(1, 3, create).await.expect("create");
            let other = Change::Create {
                record: record("b"),
                joined: vec![[9; 20]],
            };
            store.commit(2, 4, other).await.expect("create");
            let edit = Change::Edit {
                updated: 7,
                joined: vec![[6; 20]],
                left: vec![[2; 20]],
            };
            let bytes = store.commit(3, 3, edit).await.expect("edit");
            assert_eq!(bytes, 4 + 2 * (1 + 4 + 20));
            store.commit(4, 4, Change::Delete).await.expect("delete");
        }
        let store = EmbeddedWatchlists::open(Some(dir.path())).expect("reopen");
        let loaded = store.load().await.expect("load");
        assert_eq!(loaded.index.seq(), 4);
        assert_eq!(loaded.next_handle, 5);
        let mut updated = record("a");
        updated.updated = 7;
        assert_eq!(loaded.lists, vec![(3, updated)]);
        assert_eq!(
            members(&loaded.index, 3),
            vec![[1; 20], [3; 20], [4; 20], [5; 20], [6; 20]]
        );
        assert!(members(&loaded.index, 4).is_empty(), "deleted");

        let many: Vec<Address> = (0..10_000u32)
            .map(|n| {
                let mut a = [0u8; 20];
                a[..4].copy_from_slice(&n.to_be_bytes());
                a
            })
            .collect();
        store
            .compact(4, vec![(3, many.clone())])
            .await
            .expect("compact");
        let edit = Change::Edit {
            updated: 8,
            joined: vec![[7; 20]],
            left: vec![many[0]],
        };
        store.commit(5, 3, edit).await.expect("edit after");
        let loaded = store.load().await.expect("load");
        assert_eq!(loaded.index.seq(), 5);
        assert_eq!(
            loaded.journal_bytes,
            4 + 2 * (1 + 4 + 20),
            "the journal holds what came after"
        );
        let mut want: Vec<Address> = many[1..].to_vec();
        want.push([7; 20]);
        want.sort_unstable();
        assert_eq!(members(&loaded.index, 3), want);
    }

    /// A journal row that ends early is an error naming its edit, never a
    /// silently smaller watchlist.
    #[test]
    fn a_cut_row_is_refused() {
        let row = encode(
            1,
            &Change::Create {
                record: record("a"),
                joined: vec![[1; 20], [2; 20]],
            },
        );
        let mut index = Index::default();
        let cut = replay(&mut index, 1, &row[..row.len() - 1]).expect_err("cut");
        assert!(
            cut.to_string().contains("journal row 1 ends early"),
            "{cut}"
        );
        assert_eq!(replay(&mut index, 1, &row).expect("whole"), None);
        assert_eq!(index.addresses(), 2);
    }
}
