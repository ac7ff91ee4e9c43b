//! API keys on the bus (docs/src/bus.md, Keys): the managed keys' records
//! in the KV bucket `<prefix>-keys`, one entry per key id. Every edge
//! watches it, so a key made, re-planned or revoked on one edge counts on
//! every edge within a moment, and an edge started later loads them all.
//! A record changes only over the revision its writer read.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tokio::sync::mpsc;

use crate::record::Record;
use crate::store::{KeyStore, PutError};
use chainsieve_bus::Bus;
use chainsieve_bus::bucket::{self, ATTEMPT};

/// Changes the watch may hold before the registry takes them.
const QUEUED: usize = 1_024;

/// The keys' bucket.
#[derive(Debug)]
pub struct KvKeys {
    bucket: kv::Store,
}

impl KvKeys {
    /// The keys' bucket on `bus`, created if it does not exist.
    pub async fn open(bus: &Bus) -> anyhow::Result<Self> {
        Ok(Self {
            bucket: bus.latest_bucket("keys", Duration::ZERO).await?,
        })
    }
}

impl KeyStore for KvKeys {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Vec<(Record, u64)>>> {
        Box::pin(async move {
            let ids = bucket::keys(&self.bucket, "keys").await?;
            let mut records = Vec::with_capacity(ids.len());
            for id in ids {
                let entry = tokio::time::timeout(ATTEMPT, self.bucket.entry(&id))
                    .await
                    .context("reading a key: no answer")?
                    .with_context(|| format!("reading key {id}"))?;
                if let Some(record) = entry.and_then(record_of) {
                    records.push(record);
                }
            }
            Ok(records)
        })
    }

    fn changes(&self) -> BoxStream<'static, (Record, u64)> {
        let (changes, taken) = mpsc::channel(QUEUED);
        tokio::spawn(watch(self.bucket.clone(), changes));
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(taken))
    }

    fn put(&self, record: Record, expected: u64) -> BoxFuture<'_, Result<u64, PutError>> {
        Box::pin(async move {
            let value = serde_json::to_vec(&record).context("encoding a key")?;
            let written = if expected == 0 {
                tokio::time::timeout(ATTEMPT, self.bucket.create(&record.id, value.into()))
                    .await
                    .context("writing a key: no answer")?
                    .map_err(|error| match error.kind() {
                        kv::CreateErrorKind::AlreadyExists => PutError::Conflict,
                        _ => PutError::Failed(anyhow::Error::new(error).context("writing a key")),
                    })?
            } else {
                tokio::time::timeout(
                    ATTEMPT,
                    self.bucket.update(&record.id, value.into(), expected),
                )
                .await
                .context("writing a key: no answer")?
                .map_err(|error| match error.kind() {
                    kv::UpdateErrorKind::WrongLastRevision => PutError::Conflict,
                    _ => PutError::Failed(anyhow::Error::new(error).context("writing a key")),
                })?
            };
            Ok(written)
        })
    }
}

/// Watches the bucket (each key's latest value first, then every change)
/// into `changes`, watching again after a failure, until the registry
/// drops the stream.
async fn watch(bucket: kv::Store, changes: mpsc::Sender<(Record, u64)>) {
    bucket::rewatch(&changes, "the keys", || async {
        let mut entries = bucket.watch_with_history(">").await?;
        while let Some(entry) = entries.next().await {
            if let Some(change) = record_of(entry?)
                && changes.send(change).await.is_err()
            {
                break;
            }
        }
        anyhow::Ok(())
    })
    .await;
}

fn record_of(entry: kv::Entry) -> Option<(Record, u64)> {
    match entry.operation {
        kv::Operation::Put => match serde_json::from_slice(&entry.value) {
            Ok(record) => Some((record, entry.revision)),
            Err(error) => {
                tracing::warn!(key = %entry.key, %error, "skipping a key record that cannot be read");
                None
            }
        },
        // Keys are revoked, never deleted: a record is never taken back.
        kv::Operation::Delete | kv::Operation::Purge => None,
    }
}
