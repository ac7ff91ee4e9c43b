//! A node-fed chain's log window on disk (`data_dir`), in the
//! embedded database (redb): one record per step, by position, so a
//! restart keeps the window and resumes reach across it
//! (docs/src/architecture.md, The event log).
//!
//! The pipeline appends in memory and hands each step to [`write`], a task
//! that commits what queued up in one transaction, off the pipeline's
//! path. A crash may lose the last steps not yet committed, even ones
//! already sent; the next start gives their positions to new steps. A
//! cursor naming a lost block's step resumes by its block (read from the
//! nodes again, or -32002 until it is); one of a lost pending step is
//! refused by its tag, never resumed at the wrong place.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::mpsc;

use super::{Position, Step};
use chainsieve_model::ChainEvent;

/// position → the step's change, as serde JSON of [`ChainEvent`].
const STEPS: TableDefinition<u64, &[u8]> = TableDefinition::new("steps");

/// A step to persist, and the oldest position the window still holds
/// (older records are deleted in the same commit).
#[derive(Debug)]
pub struct Persist {
    pub step: Arc<Step>,
    pub oldest: Position,
}

pub struct LogStore {
    db: Database,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl LogStore {
    /// Opens (or creates) the database file at `path`.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let db = Database::create(path)
            .with_context(|| format!("opening the log database {}", path.display()))?;
        let txn = db.begin_write()?;
        txn.open_table(STEPS)?;
        txn.commit().context("creating the log table")?;
        Ok(Self { db })
    }

    /// Every stored step, oldest first.
    pub fn load(&self) -> anyhow::Result<Vec<(Position, ChainEvent)>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(STEPS)?;
        table
            .iter()?
            .map(|entry| {
                let (position, bytes) = entry?;
                let position = position.value();
                let change = serde_json::from_slice(bytes.value())
                    .with_context(|| format!("reading the stored step at position {position}"))?;
                Ok((position, change))
            })
            .collect()
    }

    /// Stores `steps` and deletes what the window no longer holds, in one
    /// commit.
    pub fn write(&self, steps: &[Persist]) -> anyhow::Result<()> {
        let txn = self.db.begin_write()?;
        {
            let mut table = txn.open_table(STEPS)?;
            for Persist { step, .. } in steps {
                let bytes = serde_json::to_vec(&step.change).context("encoding a step")?;
                table.insert(step.position, bytes.as_slice())?;
            }
            if let Some(oldest) = steps.iter().map(|p| p.oldest).max() {
                table.retain_in(..oldest, |_, _| false)?;
            }
        }
        txn.commit().context("committing steps")?;
        Ok(())
    }
}

/// Persists what `steps` brings until the pipeline drops its end, each
/// round of queued steps in one commit. A failed commit is logged and its
/// steps stay in memory only (the window still serves them until restart).
pub async fn write(store: LogStore, chain: Arc<str>, mut steps: mpsc::Receiver<Persist>) {
    let store = Arc::new(store);
    let mut round = Vec::new();
    while steps.recv_many(&mut round, 1_024).await > 0 {
        let batch = std::mem::take(&mut round);
        let writer = store.clone();
        let written = tokio::task::spawn_blocking(move || writer.write(&batch)).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(%chain, error = format!("{error:#}"), "cannot persist the log's steps");
            }
            Err(panic) => tracing::error!(%chain, %panic, "the log writer panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventLog;
    use chainsieve_config::LogConfig;
    use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
    use chainsieve_model::SourceEvent;

    /// Steps written are read back as they were; the ones the window let
    /// go of are deleted.
    #[test]
    fn steps_round_trip_and_the_window_bounds_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("eth.log.redb");
        let log = EventLog::new("eth", 3, LogConfig::default().memory_mib);
        let mut devnet = Devnet::new(1, &DevnetSettings::default());
        let mut written = Vec::new();
        {
            let store = LogStore::open(&path).expect("open");
            for event in std::iter::repeat_with(|| devnet.next_step())
                .flatten()
                .take(24)
            {
                let change = match event {
                    SourceEvent::Block(block) => ChainEvent::Added(block),
                    SourceEvent::Pending { txs, .. } => ChainEvent::Pending(txs),
                    SourceEvent::Synced
                    | SourceEvent::Logged { .. }
                    | SourceEvent::Finality { .. }
                    | SourceEvent::Dropped(_) => continue,
                };
                let step = log.append(change);
                let persist = Persist {
                    step,
                    oldest: log.oldest(),
                };
                store.write(std::slice::from_ref(&persist)).expect("write");
                written.push(persist.step);
            }
        }
        let loaded = LogStore::open(&path).expect("reopen").load().expect("load");
        let kept: Vec<&Arc<Step>> = written
            .iter()
            .filter(|step| step.position >= log.oldest())
            .collect();
        assert_eq!(loaded.len(), kept.len());
        assert!(loaded.len() < written.len(), "older steps were deleted");
        for ((position, change), step) in loaded.iter().zip(kept) {
            assert_eq!(*position, step.position);
            assert_eq!(
                serde_json::to_string(change).expect("JSON"),
                serde_json::to_string(&step.change).expect("JSON"),
            );
        }
    }
}
