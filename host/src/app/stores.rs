//! Where each feature keeps its state, decided in one place from the
//! process's role (docs/src/configuration.md, The data directory): a
//! server of role `all` keeps it in the embedded database's files under
//! the data directory (in memory without one), an edge on the bus (so
//! that every edge sees the same), and an ingest, which serves no client,
//! keeps only the config's keys, in memory.

use std::sync::Arc;

use chainsieve_bus::Bus;
use chainsieve_config::{Config, Role};
use chainsieve_keys::bus::KvKeys;
use chainsieve_keys::store::{EmbeddedKeys, KeyStore};
use chainsieve_runtime::metrics::Metrics;
use chainsieve_runtime::tasks::Tasks;
use chainsieve_uploads::bus::ObjectUploads;
use chainsieve_uploads::{EmbeddedUploads, UploadStore};
use chainsieve_usage::bus::KvUsage;
use chainsieve_usage::ledger::{EmbeddedUsage, UsageStore};
use chainsieve_watchlists::store::{EmbeddedWatchlists, WatchlistStore};
use chainsieve_webhook::bus::{KvStore as KvWebhooks, LeaseClaims, holder_name};
use chainsieve_webhook::claim::{Always, Claims};
use chainsieve_webhook::store::{EmbeddedWebhooks, Store as WebhookStore};

/// Every feature's store, opened before any chain starts.
pub struct Stores {
    /// The managed API keys (`keys.redb`, or the bus's KV bucket).
    pub keys: Arc<dyn KeyStore>,
    /// Uploaded filter components (`filters.redb`, or the bus's object
    /// store); `None` on an ingest, which runs no filters.
    pub uploads: Option<Arc<dyn UploadStore>>,
    /// Every key's hourly usage (`usage.redb`, or the bus's KV bucket);
    /// `None` on an ingest or with `[usage] enabled = false`.
    pub usage: Option<Arc<dyn UsageStore>>,
    /// The webhooks' definitions and cursors (`webhooks.redb`, or the
    /// bus's buckets) and who delivers each (this process, or the edge
    /// holding its lease); `None` on an ingest.
    pub webhooks: Option<(Arc<dyn WebhookStore>, Arc<dyn Claims>)>,
    /// The watchlists (`watchlists.redb`); `None` on an ingest and, until
    /// they are kept on the bus, on an edge.
    pub watchlists: Option<Arc<dyn WatchlistStore>>,
}

impl Stores {
    /// Opens the stores `config.role` keeps its features in: the data
    /// directory's files for role `all`, `bus` for an edge.
    pub async fn open(
        config: &Config,
        bus: Option<&Bus>,
        tasks: &Tasks,
        metrics: &Metrics,
    ) -> anyhow::Result<Self> {
        let retention = config.usage.retention();
        let metering = config.usage.enabled;
        Ok(match (config.role, bus) {
            (Role::Ingest, _) => Self {
                keys: Arc::new(EmbeddedKeys::open(None)?),
                uploads: None,
                usage: None,
                webhooks: None,
                watchlists: None,
            },
            (Role::All, _) => {
                let dir = config.data_dir();
                Self {
                    keys: Arc::new(EmbeddedKeys::open(dir)?),
                    uploads: Some(Arc::new(EmbeddedUploads::open(dir)?)),
                    usage: match metering {
                        true => Some(Arc::new(EmbeddedUsage::open(dir, retention)?)),
                        false => None,
                    },
                    webhooks: Some((
                        Arc::new(EmbeddedWebhooks::open(dir, tasks, &metrics.queues)?),
                        Arc::new(Always),
                    )),
                    watchlists: Some(Arc::new(EmbeddedWatchlists::open(dir)?)),
                }
            }
            (Role::Edge, Some(bus)) => {
                // Who this process is on the bus: its usage counts and
                // its webhook leases are its own.
                let holder = holder_name();
                let claims =
                    LeaseClaims::open(bus, config.webhooks.lease(), &holder, tasks.tracker());
                Self {
                    keys: Arc::new(KvKeys::open(bus).await?),
                    uploads: Some(Arc::new(ObjectUploads::open(bus).await?)),
                    usage: match metering {
                        true => Some(Arc::new(
                            KvUsage::open(bus, retention, holder.clone()).await?,
                        )),
                        false => None,
                    },
                    webhooks: Some((
                        Arc::new(KvWebhooks::open(bus).await?),
                        Arc::new(claims.await?),
                    )),
                    watchlists: None,
                }
            }
            (Role::Edge, None) => anyhow::bail!("an edge keeps its state on the bus, and has none"),
        })
    }
}
