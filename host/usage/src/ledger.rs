//! Hourly buckets: every `[usage] flush_secs` the ledger takes what each
//! key's meter counted since the last flush and hands it to the store,
//! in the bucket of the hour it flushes in (so a count lands in its hour
//! or, within one flush, the next). A flush the store refuses is tried
//! again with the next one: nothing counted is dropped. What a key used is
//! the store's buckets plus what this process has not flushed yet.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Counts, HOUR, Meter, hour_of};
use chainsieve_runtime::tasks::{Part, Tasks};

/// One key's counts for one hour, as a flush hands them over.
#[derive(Clone, Debug, PartialEq)]
pub struct Flush {
    pub id: String,
    /// The hour's first Unix second.
    pub hour: u64,
    /// Counted since the last flush.
    pub delta: Counts,
    /// Everything this process counted in the hour, for a store that
    /// keeps each server's apart.
    pub this_process: Counts,
}

/// Where the hourly buckets are kept.
pub trait UsageStore: Send + Sync + std::fmt::Debug + 'static {
    /// Adds a flush's counts; done once they are durable.
    fn record(&self, flushes: Vec<Flush>) -> BoxFuture<'_, anyhow::Result<()>>;
    /// Key `id`'s buckets of the hours from `from` to `to`, summed over
    /// the servers that wrote them.
    fn read(
        &self,
        id: String,
        from: u64,
        to: u64,
    ) -> BoxFuture<'_, anyhow::Result<BTreeMap<u64, Counts>>>;
}

/// Gives every meter to count, by key id.
pub type Meters = Box<dyn Fn() -> Vec<(Arc<str>, Arc<Meter>)> + Send + Sync>;

/// What was flushed of one key.
#[derive(Debug, Default)]
struct Flushed {
    /// The meter's totals at the last flush.
    totals: Counts,
    /// The hour being counted, and what this process counted in it.
    hour: u64,
    in_hour: Counts,
}

/// The hourly buckets of every key.
#[derive(Debug)]
pub struct Ledger {
    store: Arc<dyn UsageStore>,
    /// By key id. Held by a flush from its reading of the meters until it
    /// has noted what the store took, and by a query while it reads: a
    /// query never sees a flush's counts both in the store and still
    /// unflushed.
    flushed: tokio::sync::Mutex<HashMap<Arc<str>, Flushed>>,
}

impl Ledger {
    /// The ledger over `store`, flushing `meters` every `every` on `tasks`
    /// until `shutdown`; then, once `sessions` have all ended (their last
    /// notifications counted), once more.
    pub fn spawn(
        store: Arc<dyn UsageStore>,
        meters: Meters,
        every: Duration,
        sessions: TaskTracker,
        tasks: &Tasks,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let ledger = Arc::new(Self {
            store,
            flushed: tokio::sync::Mutex::default(),
        });
        let flushing = ledger.clone();
        tasks.part("usage flush", Part::Service("usage"), async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                tokio::select! {
                    _ = ticks.tick() => flushing.flush_logged(&meters()).await,
                    () = shutdown.cancelled() => break,
                }
            }
            sessions.wait().await;
            flushing.flush_logged(&meters()).await;
        });
        ledger
    }

    async fn flush_logged(&self, meters: &[(Arc<str>, Arc<Meter>)]) {
        if let Err(error) = self.flush(meters, record_now()).await {
            tracing::warn!(
                error = format!("{error:#}"),
                "usage not written; tried again at the next flush"
            );
        }
    }

    /// Hands what `meters` counted since the last flush to the store, in
    /// the bucket of the hour `now` falls in.
    pub async fn flush(&self, meters: &[(Arc<str>, Arc<Meter>)], now: u64) -> anyhow::Result<()> {
        let mut flushed = self.flushed.lock().await;
        let hour = hour_of(now);
        let mut flushes = Vec::new();
        let mut taken = Vec::new();
        for (id, meter) in meters {
            let totals = meter.totals();
            let before = flushed.get(id);
            let delta = before.map_or_else(|| totals.clone(), |f| totals.since(&f.totals));
            if delta.is_empty() {
                continue;
            }
            let mut in_hour = match before {
                Some(before) if before.hour == hour => before.in_hour.clone(),
                _ => Counts::default(),
            };
            in_hour.add(&delta);
            flushes.push(Flush {
                id: id.to_string(),
                hour,
                delta,
                this_process: in_hour.clone(),
            });
            taken.push((
                id.clone(),
                Flushed {
                    totals,
                    hour,
                    in_hour,
                },
            ));
        }
        if flushes.is_empty() {
            return Ok(());
        }
        self.store.record(flushes).await?;
        flushed.extend(taken);
        Ok(())
    }

    /// Key `id`'s hourly buckets from `from` to `to` (Unix seconds): the
    /// store's, with what `meter` counted since the last flush in the
    /// current hour.
    pub async fn usage(
        &self,
        id: &str,
        meter: &Meter,
        from: u64,
        to: u64,
    ) -> anyhow::Result<BTreeMap<u64, Counts>> {
        let flushed = self.flushed.lock().await;
        let mut hours = self
            .store
            .read(id.to_string(), hour_of(from), to)
            .await
            .with_context(|| format!("reading the usage of key {id}"))?;
        let unflushed = match flushed.get(id) {
            Some(flushed) => meter.totals().since(&flushed.totals),
            None => meter.totals(),
        };
        let now = hour_of(record_now());
        if !unflushed.is_empty() && (hour_of(from)..=to).contains(&now) {
            hours.entry(now).or_default().add(&unflushed);
        }
        Ok(hours)
    }
}

fn record_now() -> u64 {
    chainsieve_runtime::clock::unix_now()
}

/// (key id, hour) → serde JSON of [`Counts`].
const USAGE: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("usage");

/// The embedded database's buckets (`usage.redb` under `data_dir`,
/// or in memory): one writer, so each flush adds to them.
#[derive(Debug)]
pub struct EmbeddedUsage {
    db: Arc<Database>,
    /// How long buckets are kept.
    retention: Duration,
    /// The hour buckets were last forgotten in: once an hour.
    pruned: Mutex<u64>,
}

/// The file's name under `data_dir`.
pub const FILE: &str = "usage.redb";

impl EmbeddedUsage {
    pub fn open(dir: Option<&Path>, retention: Duration) -> anyhow::Result<Self> {
        let db = chainsieve_runtime::embedded::open(dir, FILE, "the usage database")?;
        let txn = db.begin_write()?;
        txn.open_table(USAGE)?;
        txn.commit().context("creating the usage table")?;
        Ok(Self {
            db: Arc::new(db),
            retention,
            pruned: Mutex::new(0),
        })
    }

    /// The hour before which buckets go, if they are due to go now.
    fn prune_before(&self, hour: u64) -> Option<u64> {
        let mut pruned = self.pruned.lock().unwrap_or_else(PoisonError::into_inner);
        (*pruned != hour).then(|| {
            *pruned = hour;
            hour.saturating_sub(self.retention.as_secs())
        })
    }
}

impl UsageStore for EmbeddedUsage {
    fn record(&self, flushes: Vec<Flush>) -> BoxFuture<'_, anyhow::Result<()>> {
        let db = self.db.clone();
        let prune = flushes
            .iter()
            .map(|flush| flush.hour)
            .max()
            .and_then(|hour| self.prune_before(hour));
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let txn = db.begin_write()?;
                {
                    let mut table = txn.open_table(USAGE)?;
                    for flush in &flushes {
                        let key = (flush.id.as_str(), flush.hour);
                        let mut counts: Counts = match table.get(key)? {
                            Some(value) => serde_json::from_slice(value.value())
                                .context("decoding an hour's usage")?,
                            None => Counts::default(),
                        };
                        counts.add(&flush.delta);
                        let value = serde_json::to_vec(&counts)?;
                        table.insert(key, value.as_slice())?;
                    }
                    if let Some(before) = prune {
                        table.retain(|(_, hour), _| hour >= before)?;
                    }
                }
                txn.commit().context("committing the usage")
            })
            .await
            .context("writing the usage")?
        })
    }

    fn read(
        &self,
        id: String,
        from: u64,
        to: u64,
    ) -> BoxFuture<'_, anyhow::Result<BTreeMap<u64, Counts>>> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let txn = db.begin_read()?;
                let table = txn.open_table(USAGE)?;
                let mut hours = BTreeMap::new();
                for entry in table.range((id.as_str(), from)..=(id.as_str(), to))? {
                    let (key, value) = entry?;
                    let counts: Counts = serde_json::from_slice(value.value())
                        .context("decoding an hour's usage")?;
                    hours.insert(key.value().1, counts);
                }
                Ok(hours)
            })
            .await
            .context("reading the usage")?
        })
    }
}

/// Hours a bucket range may span in one query (a year).
pub const MAX_HOURS: u64 = 366 * 24;

/// Checks a query's range: `from` before `to`, within [`MAX_HOURS`].
pub fn check_range(from: u64, to: u64) -> Result<(), String> {
    if from > to {
        return Err(format!("from ({from}) is after to ({to})"));
    }
    if (to - from) / HOUR > MAX_HOURS {
        return Err(format!(
            "the range spans more than {MAX_HOURS} hours; ask for less"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
