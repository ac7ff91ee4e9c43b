//! Where webhooks persist. [`Store`] is what the service needs of it: a
//! definition and a progress record per webhook, and, where other
//! processes write them too (the bus's KV buckets, `webhook/bus.rs`),
//! their changes as they come. The server of role `all` keeps them in the
//! embedded database ([`EmbeddedWebhooks`]: `webhooks.redb` under `[log]
//! data_dir`, or in memory), where only it writes.
//!
//! Every delivery writes its webhook's progress before and after its POST,
//! so writes are many and small: a task commits what queued up in one
//! transaction and answers each writer once it is durable.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::definition::{Definition, Progress};
use chainsieve_runtime::queues::Queues;
use chainsieve_runtime::tasks::{Part, Tasks};

/// What the webhook service keeps, wherever it keeps it.
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Every webhook, with its progress.
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Vec<(Definition, Progress)>>>;
    /// One webhook as the store holds it now, with its definition's
    /// revision; where others write too, this process's progress writes
    /// that follow expect the progress unchanged (one that lost its claim
    /// cannot overwrite its successor's).
    fn read(
        &self,
        id: String,
    ) -> BoxFuture<'_, anyhow::Result<Option<(Definition, u64, Progress)>>>;
    /// What other processes change, as they change it; never ends where
    /// only this process writes.
    fn changes(&self) -> BoxStream<'static, Change>;
    /// Writes a definition, new (`expected` 0) or changed from revision
    /// `expected` (refused if another write came since, where others
    /// write too); answers its revision.
    fn put_definition(
        &self,
        definition: Definition,
        expected: u64,
    ) -> BoxFuture<'_, anyhow::Result<u64>>;
    /// Writes a webhook's progress; done once it is durable.
    fn put_progress(&self, id: String, progress: Progress) -> BoxFuture<'_, anyhow::Result<()>>;
    /// Forgets a webhook.
    fn delete(&self, id: String) -> BoxFuture<'_, anyhow::Result<()>>;
    /// Called once no worker is left (at shutdown): what is queued is
    /// written, then the store lets go of its tasks.
    fn close(&self);
}

/// id → serde JSON of a [`Definition`].
const DEFINITIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("definitions");
/// id → serde JSON of a [`Progress`].
const PROGRESS: TableDefinition<&str, &[u8]> = TableDefinition::new("progress");

/// A change a store reports, with the revision it was written at.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Defined(Definition, u64),
    Progressed(String, Progress),
    Deleted(String),
}

/// The file's name under `data_dir`.
pub const FILE: &str = "webhooks.redb";

enum Write {
    Definition(Definition),
    Progress(String, Progress),
    Delete(String),
}

/// Writes that may wait for the webhooks database's committing task;
/// past that the writers wait (docs/src/operations.md, Queues).
pub const WRITE_QUEUE: usize = 1_024;

/// A write and its writer's answer.
type Queued = (Write, oneshot::Sender<anyhow::Result<()>>);

/// The embedded database's store.
#[derive(Debug)]
pub struct EmbeddedWebhooks {
    db: Arc<Database>,
    /// Writes for the committing task, each with the writer's answer.
    /// Bounded ([`WRITE_QUEUE`]): past it a writer waits for the disk.
    writes: mpsc::Sender<Queued>,
    /// Ends the committing task once what is queued is written.
    closing: CancellationToken,
}

impl EmbeddedWebhooks {
    /// Opens (or creates) `dir/webhooks.redb`, or a database in memory
    /// without `dir`, and starts its committing task on `tasks`: it ends
    /// once the store is closed or dropped.
    pub fn open(dir: Option<&Path>, tasks: &Tasks, queues: &Queues) -> anyhow::Result<Self> {
        let db = chainsieve_runtime::embedded::open(dir, FILE, "the webhooks database")?;
        let txn = db.begin_write()?;
        txn.open_table(DEFINITIONS)?;
        txn.open_table(PROGRESS)?;
        txn.commit().context("creating the webhooks tables")?;
        let db = Arc::new(db);
        let (writes, queued) = queues.channel("webhooks", "database writes", WRITE_QUEUE);
        let closing = CancellationToken::new();
        tasks.part(
            "webhooks database writer",
            Part::Service("webhooks"),
            commit(db.clone(), queued, closing.clone()),
        );
        Ok(Self {
            db,
            writes,
            closing,
        })
    }

    /// Queues `write` in call order: at once while there is room, else
    /// waiting in turn (a queue's waiters are served first come, first
    /// served, before any later try).
    fn queue(&self, write: Write) -> BoxFuture<'static, anyhow::Result<()>> {
        let (done, answer) = oneshot::channel();
        let closed = || anyhow::anyhow!("the webhooks database is closed");
        let waiting = match self.writes.try_send((write, done)) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(queued)) => Some((self.writes.clone(), queued)),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Box::pin(async move { Err(closed()) });
            }
        };
        Box::pin(async move {
            if let Some((writes, queued)) = waiting {
                writes.send(queued).await.map_err(|_| closed())?;
            }
            answer
                .await
                .map_err(|_| anyhow::anyhow!("the webhooks database is closed"))?
        })
    }
}

impl Store for EmbeddedWebhooks {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Vec<(Definition, Progress)>>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || read_all(&db))
                .await
                .context("reading the webhooks database")?
        })
    }

    fn read(
        &self,
        id: String,
    ) -> BoxFuture<'_, anyhow::Result<Option<(Definition, u64, Progress)>>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || read_one(&db, &id))
                .await
                .context("reading the webhooks database")?
        })
    }

    fn changes(&self) -> BoxStream<'static, Change> {
        // Only this process writes here.
        futures_util::stream::pending().boxed()
    }

    fn put_definition(
        &self,
        definition: Definition,
        _expected: u64,
    ) -> BoxFuture<'_, anyhow::Result<u64>> {
        let written = self.queue(Write::Definition(definition));
        // Revisions order a shared store's changes; this one reports none.
        Box::pin(async move { written.await.map(|()| 0) })
    }

    fn put_progress(&self, id: String, progress: Progress) -> BoxFuture<'_, anyhow::Result<()>> {
        self.queue(Write::Progress(id, progress))
    }

    fn delete(&self, id: String) -> BoxFuture<'_, anyhow::Result<()>> {
        self.queue(Write::Delete(id))
    }

    fn close(&self) {
        self.closing.cancel();
    }
}

fn read_one(db: &Database, id: &str) -> anyhow::Result<Option<(Definition, u64, Progress)>> {
    let txn = db.begin_read()?;
    let Some(definition) = txn.open_table(DEFINITIONS)?.get(id)? else {
        return Ok(None);
    };
    let definition = serde_json::from_slice(definition.value())
        .with_context(|| format!("reading webhook {id}"))?;
    let progress = match txn.open_table(PROGRESS)?.get(id)? {
        Some(bytes) => serde_json::from_slice(bytes.value())
            .with_context(|| format!("reading webhook {id}'s progress"))?,
        None => Progress::default(),
    };
    Ok(Some((definition, 0, progress)))
}

fn read_all(db: &Database) -> anyhow::Result<Vec<(Definition, Progress)>> {
    let txn = db.begin_read()?;
    let definitions = txn.open_table(DEFINITIONS)?;
    let progress = txn.open_table(PROGRESS)?;
    definitions
        .iter()?
        .map(|entry| {
            let (id, bytes) = entry?;
            let id = id.value();
            let definition = serde_json::from_slice(bytes.value())
                .with_context(|| format!("reading webhook {id}"))?;
            let progress = match progress.get(id)? {
                Some(bytes) => serde_json::from_slice(bytes.value())
                    .with_context(|| format!("reading webhook {id}'s progress"))?,
                None => Progress::default(),
            };
            Ok((definition, progress))
        })
        .collect()
}

/// Commits what queued up, a round at a time, and answers its writers,
/// until every writer is gone or `closing` (then what is queued first).
async fn commit(db: Arc<Database>, mut queued: mpsc::Receiver<Queued>, closing: CancellationToken) {
    let mut round = Vec::new();
    loop {
        let taken = tokio::select! {
            biased;
            taken = queued.recv_many(&mut round, 1_024) => taken,
            () = closing.cancelled() => {
                queued.close();
                queued.recv_many(&mut round, 1_024).await
            }
        };
        if taken == 0 {
            return;
        }
        let (writes, answers): (Vec<Write>, Vec<_>) =
            std::mem::take(&mut round).into_iter().unzip();
        let db = db.clone();
        let written = tokio::task::spawn_blocking(move || write_all(&db, &writes))
            .await
            .map_err(|panic| anyhow::anyhow!("the webhooks writer panicked: {panic}"))
            .and_then(|written| written);
        if let Err(error) = &written {
            tracing::error!(error = format!("{error:#}"), "cannot persist webhooks");
        }
        for answer in answers {
            let _ = answer.send(match &written {
                Ok(()) => Ok(()),
                Err(error) => Err(anyhow::anyhow!("{error:#}")),
            });
        }
    }
}

fn write_all(db: &Database, writes: &[Write]) -> anyhow::Result<()> {
    let txn = db.begin_write()?;
    {
        let mut definitions = txn.open_table(DEFINITIONS)?;
        let mut progress = txn.open_table(PROGRESS)?;
        for write in writes {
            match write {
                Write::Definition(definition) => {
                    let bytes = serde_json::to_vec(definition).context("encoding a webhook")?;
                    definitions.insert(definition.id.as_str(), bytes.as_slice())?;
                }
                Write::Progress(id, state) => {
                    // A webhook deleted meanwhile keeps no progress.
                    if definitions.get(id.as_str())?.is_some() {
                        let bytes =
                            serde_json::to_vec(state).context("encoding a webhook's progress")?;
                        progress.insert(id.as_str(), bytes.as_slice())?;
                    }
                }
                Write::Delete(id) => {
                    definitions.remove(id.as_str())?;
                    progress.remove(id.as_str())?;
                }
            }
        }
    }
    txn.commit().context("committing webhooks")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::definition::Batching;

    fn definition(id: &str) -> Definition {
        Definition {
            id: id.into(),
            owner: "owner".into(),
            chain: "eth".into(),
            url: "https://example.com/hook".into(),
            subscribe: vec![json!("logs"), json!({"address": "0x01"})],
            batch: Batching::default(),
            secret: "whsec_1".into(),
            created_at: 7,
            paused: None,
        }
    }

    /// Definitions and progress written by many writers at once come back
    /// after the database is opened again; a deleted webhook leaves
    /// nothing, and progress written after its delete is not kept.
    #[tokio::test]
    async fn webhooks_and_progress_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("temp dir");
        let tasks = chainsieve_runtime::tasks::Tasks::new(CancellationToken::new());
        {
            let store = EmbeddedWebhooks::open(Some(dir.path()), &tasks, &Queues::default())
                .expect("opens");
            for id in ["a", "b", "c"] {
                store
                    .put_definition(definition(id), 0)
                    .await
                    .expect("written");
            }
            let writes = (0..50u64).map(|n| {
                store.put_progress(
                    "a".into(),
                    Progress {
                        cursor: Some(format!("eth:{n}:0:00")),
                        deliveries: n,
                        ..Progress::default()
                    },
                )
            });
            for written in futures_util::future::join_all(writes).await {
                written.expect("written");
            }
            store.delete("b".into()).await.expect("deleted");
            store
                .put_progress("b".into(), Progress::default())
                .await
                .expect("a write about nothing is no error");
        }
        tasks.close();
        tasks.wait().await;
        let store = EmbeddedWebhooks::open(Some(dir.path()), &tasks, &Queues::default())
            .expect("opens again");
        let mut loaded = store.load().await.expect("loads");
        loaded.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        let ids: Vec<&str> = loaded.iter().map(|(d, _)| d.id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(loaded[0].0, definition("a"));
        assert_eq!(loaded[0].1.deliveries, 49, "the last write wins");
        assert_eq!(loaded[0].1.cursor.as_deref(), Some("eth:49:0:00"));
        assert_eq!(loaded[1].1, Progress::default());
        let read = store.read("a".into()).await.expect("reads");
        assert_eq!(read, Some((loaded[0].0.clone(), 0, loaded[0].1.clone())));
        assert_eq!(store.read("b".into()).await.expect("reads"), None);
    }

    /// Closed while a write is queued: the write is kept, the committing
    /// task ends though the store lives on (a server's shutdown waits for
    /// it), and later writes fail instead of waiting forever.
    #[tokio::test]
    async fn a_close_writes_what_is_queued_then_ends() {
        let tasks = chainsieve_runtime::tasks::Tasks::new(CancellationToken::new());
        let store = EmbeddedWebhooks::open(None, &tasks, &Queues::default()).expect("opens");
        let queued = store.put_definition(definition("a"), 0);
        store.close();
        queued.await.expect("written before the close took effect");
        tasks.close();
        tokio::time::timeout(std::time::Duration::from_secs(5), tasks.wait())
            .await
            .expect("the committing task ends");
        assert!(store.put_definition(definition("b"), 0).await.is_err());
        let loaded = store.load().await.expect("loads");
        assert_eq!(loaded.len(), 1);
    }
}
