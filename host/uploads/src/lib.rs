//! Where components uploaded through the admin API (`PUT
//! /admin/filters/<topic>`) are kept, so they outlive the process and, on
//! the bus, reach every edge. [`UploadStore`] is what the server needs of
//! it: every upload, writes and removals, and, where other processes write
//! too (the bus's object store, [`bus`]), their changes as they come. A
//! server of role `all` keeps them in the embedded database
//! ([`EmbeddedUploads`]: `filters.redb` under `data_dir`, or in memory).
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_bus`],
//! [`chainsieve_runtime`].

pub mod bus;

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

/// An upload made or removed, as a store reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UploadChange {
    /// A component's bytes, for its topic.
    Put(String, Vec<u8>),
    Removed(String),
}

/// Uploads as (topic, the component's bytes).
pub type Uploaded = Vec<(String, Vec<u8>)>;

/// The uploads, wherever they are kept.
pub trait UploadStore: Send + Sync + std::fmt::Debug + 'static {
    /// Every upload: (topic, the component's bytes).
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Uploaded>>;
    /// What others upload and remove, as they do (this process's own
    /// changes may come too); never ends where only this process writes.
    fn changes(&self) -> BoxStream<'static, UploadChange>;
    /// Keeps `bytes` as `topic`'s upload; done once durable.
    fn put(&self, topic: String, bytes: Vec<u8>) -> BoxFuture<'_, anyhow::Result<()>>;
    /// Forgets `topic`'s upload; answers whether there was one.
    fn remove(&self, topic: String) -> BoxFuture<'_, anyhow::Result<bool>>;
}

/// topic → the component's bytes.
const UPLOADS: TableDefinition<&str, &[u8]> = TableDefinition::new("uploads");

/// The file's name under `data_dir`.
pub const FILE: &str = "filters.redb";

/// The embedded database's uploads; only this process writes them.
#[derive(Debug)]
pub struct EmbeddedUploads {
    db: Arc<Database>,
}

impl EmbeddedUploads {
    /// Opens (or creates) `dir/filters.redb`, or a database in memory
    /// without `dir`.
    pub fn open(dir: Option<&Path>) -> anyhow::Result<Self> {
        let db = chainsieve_runtime::embedded::open(dir, FILE, "the uploaded filters' database")?;
        let txn = db.begin_write()?;
        txn.open_table(UPLOADS)?;
        txn.commit().context("creating the uploads table")?;
        Ok(Self { db: Arc::new(db) })
    }

    /// Runs `write` in a transaction of its own, off the runtime.
    fn write<T: Send + 'static>(
        &self,
        write: impl FnOnce(&mut redb::Table<'_, &str, &[u8]>) -> anyhow::Result<T> + Send + 'static,
    ) -> BoxFuture<'_, anyhow::Result<T>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let txn = db.begin_write()?;
                let written = write(&mut txn.open_table(UPLOADS)?)?;
                txn.commit().context("committing an upload")?;
                Ok(written)
            })
            .await
            .context("writing an upload")?
        })
    }
}

impl UploadStore for EmbeddedUploads {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Uploaded>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let txn = db.begin_read()?;
                let table = txn.open_table(UPLOADS)?;
                let mut uploads = Vec::new();
                for entry in table.iter()? {
                    let (topic, bytes) = entry?;
                    uploads.push((topic.value().to_string(), bytes.value().to_vec()));
                }
                Ok(uploads)
            })
            .await
            .context("reading the uploads")?
        })
    }

    fn changes(&self) -> BoxStream<'static, UploadChange> {
        Box::pin(futures_util::stream::pending())
    }

    fn put(&self, topic: String, bytes: Vec<u8>) -> BoxFuture<'_, anyhow::Result<()>> {
        self.write(move |table| {
            table.insert(topic.as_str(), bytes.as_slice())?;
            Ok(())
        })
    }

    fn remove(&self, topic: String) -> BoxFuture<'_, anyhow::Result<bool>> {
        self.write(move |table| Ok(table.remove(topic.as_str())?.is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn uploads_survive_a_reopen_and_removals_too() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = EmbeddedUploads::open(Some(dir.path())).expect("open");
            store.put("a".into(), vec![1, 2]).await.expect("put");
            store.put("b".into(), vec![3]).await.expect("put");
            store.put("a".into(), vec![4]).await.expect("replaced");
            assert!(store.remove("b".into()).await.expect("removed"));
            assert!(!store.remove("b".into()).await.expect("gone already"));
        }
        let store = EmbeddedUploads::open(Some(dir.path())).expect("reopen");
        assert_eq!(
            store.load().await.expect("load"),
            vec![("a".to_string(), vec![4])]
        );
    }
}
