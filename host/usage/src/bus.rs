//! Usage on the bus (docs/src/bus.md, Keys): each edge writes its own
//! hourly buckets to the KV bucket `<prefix>-usage`, one entry per key,
//! hour and edge (`<key id>.<hour>.<edge>`, holding what that edge counted
//! in the hour), so no two edges write one entry; a query sums a key's
//! entries over the edges. The bucket forgets an entry `[usage]
//! retention_days` after its last write.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::consumer::{DeliverPolicy, push};
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;

use crate::Counts;
use crate::ledger::{Flush, UsageStore};
use chainsieve_bus::Bus;
use chainsieve_bus::bucket::ATTEMPT;

/// The usage bucket, as one edge writes it.
#[derive(Debug)]
pub struct KvUsage {
    bucket: kv::Store,
    /// This edge's part of each entry's name.
    edge: String,
    /// For a query's inbox.
    client: async_nats::Client,
}

impl KvUsage {
    /// The usage bucket on `bus`, created if it does not exist; `edge`
    /// names this process's entries.
    pub async fn open(bus: &Bus, retention: Duration, edge: String) -> anyhow::Result<Self> {
        Ok(Self {
            bucket: bus.latest_bucket("usage", retention).await?,
            edge,
            client: bus.client(),
        })
    }
}

impl UsageStore for KvUsage {
    fn record(&self, flushes: Vec<Flush>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            for flush in flushes {
                let entry = format!("{}.{}.{}", flush.id, flush.hour, self.edge);
                let value = serde_json::to_vec(&flush.this_process)?;
                tokio::time::timeout(ATTEMPT, self.bucket.put(&entry, value.into()))
                    .await
                    .context("writing the usage: no answer")?
                    .with_context(|| format!("writing the usage {entry}"))?;
            }
            Ok(())
        })
    }

    fn read(
        &self,
        id: String,
        from: u64,
        to: u64,
    ) -> BoxFuture<'_, anyhow::Result<BTreeMap<u64, Counts>>> {
        Box::pin(async move {
            tokio::time::timeout(ATTEMPT, self.entries(&id, from, to))
                .await
                .context("reading the usage: no answer")?
        })
    }
}

impl KvUsage {
    /// Reads the latest value of each of key `id`'s entries, summing the
    /// edges' by hour.
    async fn entries(&self, id: &str, from: u64, to: u64) -> anyhow::Result<BTreeMap<u64, Counts>> {
        let prefix = format!("{}{id}.", self.bucket.prefix);
        let consumer = self
            .bucket
            .stream
            .create_consumer(push::OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                filter_subject: format!("{prefix}>"),
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
            .context("reading the usage")?;
        let mut pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.context("reading the usage")?;
        let mut hours: BTreeMap<u64, Counts> = BTreeMap::new();
        while pending > 0 {
            let Some(message) = messages.next().await else {
                break;
            };
            let message = message.context("reading the usage")?;
            pending = message.info().map_or(0, |info| info.pending);
            let hour = message
                .subject
                .strip_prefix(prefix.as_str())
                .and_then(|rest| rest.split('.').next())
                .and_then(|hour| hour.parse::<u64>().ok());
            let Some(hour) = hour.filter(|hour| (from..=to).contains(hour)) else {
                continue;
            };
            if message.payload.is_empty() {
                // A deleted or expired entry's marker.
                continue;
            }
            match serde_json::from_slice::<Counts>(&message.payload) {
                Ok(counts) => hours.entry(hour).or_default().add(&counts),
                Err(error) => {
                    tracing::warn!(subject = %message.subject, %error, "skipping usage that cannot be read");
                }
            }
        }
        Ok(hours)
    }
}
