//! Webhooks on the bus (docs/src/architecture.md, Webhooks): every edge
//! serves every webhook's API, and exactly one delivers each.
//!
//! - Definitions are in the KV bucket `<prefix>-webhooks`, progress
//!   (cursor, the batch in flight, counts, trouble) in
//!   `<prefix>-webhook-progress`, one key per webhook ([`KvStore`]). Every
//!   edge watches both, so a webhook made, paused or deleted on one is
//!   known to all within a moment, and an edge started later loads them.
//! - The edge that delivers a webhook holds its key in
//!   `<prefix>-webhook-leases` ([`LeaseClaims`]: the ingests' leases,
//!   `[webhooks] lease_ms` long). The others try to take it as it
//!   expires; the one that does reads the progress and goes on from the
//!   cursor, re-delivering at most the batch in flight.
//! - A definition changes only from the revision its writer read, and an
//!   edge writes a webhook's progress only over the revision it last read
//!   or wrote: one that lost its lease cannot overwrite its successor's.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::claim::{Claim, Claims};
use crate::definition::{Definition, Progress};
use crate::store::{Change, Store};
use chainsieve_bus::Bus;
use chainsieve_bus::bucket::{self, ATTEMPT};
use chainsieve_bus::lease::Leases;

/// Webhooks in the bus's KV buckets.
#[derive(Debug)]
pub struct KvStore {
    definitions: kv::Store,
    progress: kv::Store,
    /// The revision of each webhook's progress this process last read or
    /// wrote: its next write expects it. Short critical sections only.
    baselines: Mutex<HashMap<String, u64>>,
}

impl KvStore {
    /// The webhooks' buckets on `bus`, created if they do not exist.
    pub async fn open(bus: &Bus) -> anyhow::Result<Self> {
        Ok(Self {
            definitions: bus.latest_bucket("webhooks", Duration::ZERO).await?,
            progress: bus
                .latest_bucket("webhook-progress", Duration::ZERO)
                .await?,
            baselines: Mutex::default(),
        })
    }
}

impl KvStore {
    fn baselines(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.baselines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn definition(&self, id: &str) -> anyhow::Result<Option<(Definition, u64)>> {
        let entry = tokio::time::timeout(ATTEMPT, self.definitions.entry(id))
            .await
            .context("no answer")?
            .with_context(|| format!("reading webhook {id}"))?;
        entry
            .filter(|entry| entry.operation == kv::Operation::Put)
            .map(|entry| {
                let definition = serde_json::from_slice(&entry.value)
                    .with_context(|| format!("decoding webhook {id}"))?;
                Ok((definition, entry.revision))
            })
            .transpose()
    }

    /// A webhook's progress and its revision (0: none yet).
    async fn progress_of(&self, id: &str) -> anyhow::Result<(Progress, u64)> {
        let entry = tokio::time::timeout(ATTEMPT, self.progress.entry(id))
            .await
            .context("no answer")?
            .with_context(|| format!("reading webhook {id}'s progress"))?;
        match entry {
            Some(entry) if entry.operation == kv::Operation::Put => Ok((
                serde_json::from_slice(&entry.value)
                    .with_context(|| format!("decoding webhook {id}'s progress"))?,
                entry.revision,
            )),
            // Never written, or deleted: a write creates it.
            _ => Ok((Progress::default(), 0)),
        }
    }

    async fn load_all(&self) -> anyhow::Result<Vec<(Definition, Progress)>> {
        let keys = bucket::keys(&self.definitions, "webhooks").await?;
        let mut loaded = Vec::with_capacity(keys.len());
        for id in keys {
            if let Some((definition, _)) = self.definition(&id).await? {
                let (progress, revision) = self.progress_of(&id).await?;
                self.baselines().insert(id, revision);
                loaded.push((definition, progress));
            }
        }
        Ok(loaded)
    }
}

impl Store for KvStore {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Vec<(Definition, Progress)>>> {
        Box::pin(self.load_all())
    }

    fn read(
        &self,
        id: String,
    ) -> BoxFuture<'_, anyhow::Result<Option<(Definition, u64, Progress)>>> {
        Box::pin(async move {
            let Some((definition, revision)) = self.definition(&id).await? else {
                return Ok(None);
            };
            let (progress, baseline) = self.progress_of(&id).await?;
            self.baselines().insert(id, baseline);
            Ok(Some((definition, revision, progress)))
        })
    }

    fn changes(&self) -> BoxStream<'static, Change> {
        let (changes, taken) = mpsc::channel(1_024);
        tokio::spawn(watch(
            self.definitions.clone(),
            self.progress.clone(),
            changes,
        ));
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(taken))
    }

    fn put_definition(
        &self,
        definition: Definition,
        expected: u64,
    ) -> BoxFuture<'_, anyhow::Result<u64>> {
        Box::pin(async move {
            let value = serde_json::to_vec(&definition).context("encoding a webhook")?;
            let id = definition.id.as_str();
            let written = if expected == 0 {
                tokio::time::timeout(ATTEMPT, self.definitions.create(id, value.into()))
                    .await
                    .context("no answer")?
                    .map_err(anyhow::Error::new)
            } else {
                tokio::time::timeout(ATTEMPT, self.definitions.update(id, value.into(), expected))
                    .await
                    .context("no answer")?
                    .map_err(anyhow::Error::new)
            };
            written.with_context(|| {
                format!("writing webhook {id} (it may have changed meanwhile: try again)")
            })
        })
    }

    fn put_progress(&self, id: String, progress: Progress) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            let value: bytes::Bytes = serde_json::to_vec(&progress)
                .context("encoding a webhook's progress")?
                .into();
            let baseline = self.baselines().get(&id).copied();
            let write = async {
                match baseline {
                    Some(0) => self
                        .progress
                        .create(&id, value.clone())
                        .await
                        .map_err(anyhow::Error::new),
                    Some(revision) => self
                        .progress
                        .update(&id, value.clone(), revision)
                        .await
                        .map_err(anyhow::Error::new),
                    None => self
                        .progress
                        .put(&id, value.clone())
                        .await
                        .map_err(anyhow::Error::new),
                }
            };
            let written = tokio::time::timeout(ATTEMPT, write)
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer")));
            let revision = match written {
                Ok(revision) => revision,
                // An earlier write whose answer was lost may have landed:
                // the entry holds what this one would write.
                Err(error) => match self.progress.entry(&id).await {
                    Ok(Some(entry))
                        if entry.operation == kv::Operation::Put && entry.value == value =>
                    {
                        entry.revision
                    }
                    _ => {
                        return Err(error.context(format!(
                            "writing webhook {id}'s progress (another edge may deliver it now)"
                        )));
                    }
                },
            };
            self.baselines().insert(id, revision);
            Ok(())
        })
    }

    fn delete(&self, id: String) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            tokio::time::timeout(ATTEMPT, self.definitions.delete(&id))
                .await
                .context("no answer")?
                .with_context(|| format!("deleting webhook {id}"))?;
            tokio::time::timeout(ATTEMPT, self.progress.delete(&id))
                .await
                .context("no answer")?
                .with_context(|| format!("deleting webhook {id}'s progress"))?;
            self.baselines().remove(&id);
            Ok(())
        })
    }

    fn close(&self) {}
}

/// Watches both buckets (each key's latest value first, then every
/// change) into `changes`, watching again after a failure, until the
/// stream is dropped.
async fn watch(definitions: kv::Store, progress: kv::Store, changes: mpsc::Sender<Change>) {
    bucket::rewatch(&changes, "the webhooks", || async {
        let mut defined = definitions.watch_with_history(">").await?;
        let mut progressed = progress.watch_with_history(">").await?;
        loop {
            let change = tokio::select! {
                entry = defined.next() => match entry {
                    Some(entry) => definition_change(entry?),
                    None => return anyhow::Ok(()),
                },
                entry = progressed.next() => match entry {
                    Some(entry) => progress_change(entry?),
                    None => return anyhow::Ok(()),
                },
            };
            if let Some(change) = change
                && changes.send(change).await.is_err()
            {
                return anyhow::Ok(());
            }
        }
    })
    .await;
}

fn definition_change(entry: kv::Entry) -> Option<Change> {
    match entry.operation {
        kv::Operation::Put => match serde_json::from_slice(&entry.value) {
            Ok(definition) => Some(Change::Defined(definition, entry.revision)),
            Err(error) => {
                tracing::warn!(webhook = %entry.key, %error, "skipping a webhook that cannot be read");
                None
            }
        },
        kv::Operation::Delete | kv::Operation::Purge => Some(Change::Deleted(entry.key)),
    }
}

fn progress_change(entry: kv::Entry) -> Option<Change> {
    match entry.operation {
        kv::Operation::Put => serde_json::from_slice(&entry.value)
            .ok()
            .map(|progress| Change::Progressed(entry.key, progress)),
        kv::Operation::Delete | kv::Operation::Purge => None,
    }
}

/// Claims on the bus: the lease of a webhook's key in
/// `<prefix>-webhook-leases`, renewed by a task of its own until it is
/// lost or given back.
#[derive(Debug)]
pub struct LeaseClaims {
    leases: Leases,
    /// The keepers: a shutdown waits for them to give their leases back,
    /// so another edge takes over at once.
    keepers: TaskTracker,
}

impl LeaseClaims {
    /// Claims on `bus` for a process named `holder` (unique on the bus),
    /// each held `ttl` without renewal, kept by tasks on `keepers`.
    pub async fn open(
        bus: &Bus,
        ttl: Duration,
        holder: &str,
        keepers: &TaskTracker,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            leases: bus.lease_bucket("webhook-leases", ttl, holder).await?,
            keepers: keepers.clone(),
        })
    }
}

impl Claims for LeaseClaims {
    fn claim<'a>(
        &'a self,
        id: &'a str,
        stop: &'a CancellationToken,
    ) -> BoxFuture<'a, Option<Claim>> {
        Box::pin(async move {
            let lease = self.leases.acquire(id, stop).await?;
            // Cancelled when the lease is lost, or when the claim is
            // dropped: the keeper then gives the lease back.
            let lost = CancellationToken::new();
            self.keepers.spawn(lease.keep(lost.clone()));
            Some(Claim::new(lost.clone(), lost))
        })
    }
}

/// Who holds this process's claims: unique per process on the bus.
pub fn holder_name() -> String {
    format!("edge-{}-{:016x}", std::process::id(), rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_unique() {
        assert_ne!(holder_name(), holder_name());
    }
}
