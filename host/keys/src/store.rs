//! Where managed keys persist. [`KeyStore`] is what the registry needs of
//! it: every record with its revision, writes that succeed only over the
//! revision their writer read, and, where other processes write too (the
//! bus's KV bucket, `keys/bus.rs`), their changes as they come. A server
//! of role `all` keeps them in the embedded database ([`EmbeddedKeys`]:
//! `keys.redb` under `data_dir`, or in memory), where only it
//! writes.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::record::Record;

/// What the registry keeps, wherever it keeps it.
pub trait KeyStore: Send + Sync + std::fmt::Debug + 'static {
    /// Every record, with its revision.
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Vec<(Record, u64)>>>;
    /// Records as others write them, at their revisions (this process's
    /// own writes may come too); never ends where only this process
    /// writes.
    fn changes(&self) -> BoxStream<'static, (Record, u64)>;
    /// Writes `record`, new (`expected` 0) or over revision `expected`;
    /// answers its revision.
    fn put(&self, record: Record, expected: u64) -> BoxFuture<'_, Result<u64, PutError>>;
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    /// Another write came first (or the id is taken).
    #[error("the key changed meanwhile")]
    Conflict,
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

/// The file's name under `data_dir`.
pub const FILE: &str = "keys.redb";

/// id → serde JSON of a [`Stored`].
const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("keys");

#[derive(Deserialize, Serialize)]
struct Stored {
    revision: u64,
    record: Record,
}

/// The embedded database's store; writes are rare (the admin API's), so
/// each commits on its own.
#[derive(Debug)]
pub struct EmbeddedKeys {
    db: Arc<Database>,
}

impl EmbeddedKeys {
    /// Opens (or creates) `dir/keys.redb`, or a database in memory without
    /// `dir`.
    pub fn open(dir: Option<&Path>) -> anyhow::Result<Self> {
        let db = chainsieve_runtime::embedded::open(dir, FILE, "the keys database")?;
        let txn = db.begin_write()?;
        txn.open_table(KEYS)?;
        txn.commit().context("creating the keys table")?;
        Ok(Self { db: Arc::new(db) })
    }
}

impl KeyStore for EmbeddedKeys {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Vec<(Record, u64)>>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let txn = db.begin_read()?;
                let table = txn.open_table(KEYS)?;
                let mut records = Vec::new();
                for entry in table.iter()? {
                    let (id, value) = entry?;
                    let stored: Stored = serde_json::from_slice(value.value())
                        .with_context(|| format!("decoding key {}", id.value()))?;
                    records.push((stored.record, stored.revision));
                }
                Ok(records)
            })
            .await
            .context("reading the keys")?
        })
    }

    fn changes(&self) -> BoxStream<'static, (Record, u64)> {
        Box::pin(futures_util::stream::pending())
    }

    fn put(&self, record: Record, expected: u64) -> BoxFuture<'_, Result<u64, PutError>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let txn = db.begin_write().context("writing a key")?;
                let revision = {
                    let mut table = txn.open_table(KEYS).context("writing a key")?;
                    let current = match table.get(record.id.as_str()).context("reading a key")? {
                        Some(value) => {
                            serde_json::from_slice::<Stored>(value.value())
                                .context("decoding a key")?
                                .revision
                        }
                        None => 0,
                    };
                    if current != expected {
                        return Err(PutError::Conflict);
                    }
                    let revision = current + 1;
                    let id = record.id.clone();
                    let value = serde_json::to_vec(&Stored { revision, record })
                        .context("encoding a key")?;
                    table
                        .insert(id.as_str(), value.as_slice())
                        .context("writing a key")?;
                    revision
                };
                txn.commit().context("committing a key")?;
                Ok(revision)
            })
            .await
            .context("writing a key")?
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn record(id: &str, secret: &str) -> Record {
        Record {
            id: id.into(),
            digest: super::super::record::digest(secret),
            name: Some("bots".into()),
            plan: "default".into(),
            chains: None,
            methods: None,
            expires_at: None,
            created_at: 1,
            revoked_at: None,
        }
    }

    #[tokio::test]
    async fn keys_survive_a_reopen_and_writes_need_the_revision_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = EmbeddedKeys::open(Some(dir.path())).expect("open");
            assert_eq!(store.put(record("key_a", "s1"), 0).await.expect("new"), 1);
            assert!(matches!(
                store.put(record("key_a", "s2"), 0).await,
                Err(PutError::Conflict)
            ));
            let mut revoked = record("key_a", "s1");
            revoked.revoked_at = Some(5);
            assert_eq!(store.put(revoked.clone(), 1).await.expect("over 1"), 2);
            assert!(matches!(
                store.put(record("key_a", "s1"), 1).await,
                Err(PutError::Conflict)
            ));
        }
        let store = EmbeddedKeys::open(Some(dir.path())).expect("reopen");
        let loaded = store.load().await.expect("load");
        let mut revoked = record("key_a", "s1");
        revoked.revoked_at = Some(5);
        assert_eq!(loaded, vec![(revoked, 2)]);
    }
}
