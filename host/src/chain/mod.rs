//! One served chain: its source, its canonical tracker, and one filter actor
//! per topic. A hub task takes what the source produces, orders it through
//! the tracker, splits it into stream batches, and hands each batch to the
//! actors consuming that stream. The set of actors changes at run time when
//! the filters directory does ([`reload`]).

pub mod reload;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use chainsieve_filter_sdk::Source;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{ChainSpec, Config, SourceConfig};
use crate::filters::{FilterEngine, FilterHandle, FilterRegistry};
use crate::ingest::canonical::CanonicalChain;
use crate::ingest::devnet::{self, Devnet, Submission};
use crate::ingest::upstream::{self, UpstreamSettings, UpstreamStatus};
use crate::ingest::{ChainEvent, EventBatch, SourceEvent};
use crate::metrics::Metrics;
use crate::price::PriceIndex;

/// Source events that may wait for the hub; past that the source waits.
const SOURCE_QUEUE: usize = 1_024;

/// Submitted transactions that may wait for the devnet; past that the
/// submitting requests wait.
const SUBMISSION_QUEUE: usize = 4_096;

#[derive(Debug)]
pub struct Chain {
    /// The URL prefix (`eth`, `bsc`, `polygon`, …).
    pub name: String,
    pub chain_id: u64,
    /// The recent canonical blocks. Written only by the hub; read by RPC
    /// methods. Never held across an await.
    canonical: RwLock<CanonicalChain>,
    /// One actor per topic. Replaced whole (copy on write) when a topic is
    /// added or removed; readers clone the `Arc` and never hold the lock.
    filters: RwLock<Arc<BTreeMap<String, FilterHandle>>>,
    /// A node source's state (`None` for the devnet, which is always live);
    /// the source publishes, readers see the latest.
    pub upstream: Option<watch::Receiver<UpstreamStatus>>,
    /// A devnet chain's door for `eth_sendRawTransaction` (`None` on a
    /// node chain, whose transactions go to the node).
    pub submissions: Option<mpsc::Sender<Submission>>,
    /// `token_price`'s index of this chain's pools.
    pub price: Arc<PriceIndex>,
    /// Canonical blocks for the price indexer, in order.
    price_events: mpsc::UnboundedSender<ChainEvent>,
    /// For the actors of topics added at run time.
    pub metrics: Arc<Metrics>,
    /// Events ingested per stream, in [`stream_slot`] order.
    ingested: [Counter; 4],
    /// Set by the hub once the source's past is in place: until then
    /// nothing is notified and the chain is not ready.
    synced: watch::Sender<bool>,
}

/// A stream's place in [`Chain::ingested`].
fn stream_slot(source: Source) -> usize {
    match source {
        Source::PendingTransactions => 0,
        Source::MinedTransactions => 1,
        Source::Heads => 2,
        Source::Logs => 3,
    }
}

impl Chain {
    /// Starts the chain's filter actors, its source and its hub; they stop
    /// when `shutdown` is cancelled.
    pub fn start(
        spec: &ChainSpec,
        registry: &FilterRegistry,
        engine: &Arc<FilterEngine>,
        metrics: &Arc<Metrics>,
        config: &Config,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Arc<Chain>> {
        let filters = registry
            .active()
            .into_iter()
            .map(|(topic, component)| {
                let counted = metrics.actor(&spec.name, &topic);
                let handle = FilterHandle::spawn(engine.clone(), component, &spec.name, counted)?;
                Ok((topic, handle))
            })
            .collect::<anyhow::Result<_>>()?;
        let (price, price_events) = PriceIndex::start(spec, &config.price, shutdown)?;
        let (events, rx) = mpsc::channel(SOURCE_QUEUE);
        let (upstream, submissions) = match &spec.source {
            SourceConfig::Devnet => {
                let devnet = Devnet::new(spec.chain_id, &config.devnet);
                let (submit, submitted) = mpsc::channel(SUBMISSION_QUEUE);
                tokio::spawn(devnet::run(devnet, events, submitted, shutdown.clone()));
                (None, Some(submit))
            }
            SourceConfig::Node(url) => {
                let settings = UpstreamSettings {
                    chain: spec.name.clone(),
                    url: url.clone(),
                    chain_id: spec.chain_id,
                    backfill_limit: spec.window as u64,
                    resume_from: price.resume_from()?,
                };
                let (status, watcher) = watch::channel(UpstreamStatus::Connecting);
                tokio::spawn(upstream::run(settings, events, status, shutdown.clone()));
                (Some(watcher), None)
            }
        };
        let chain = Arc::new(Chain {
            name: spec.name.clone(),
            chain_id: spec.chain_id,
            canonical: RwLock::new(CanonicalChain::new(spec.window)),
            filters: RwLock::new(Arc::new(filters)),
            upstream,
            submissions,
            price,
            price_events,
            metrics: metrics.clone(),
            ingested: [
                Source::PendingTransactions,
                Source::MinedTransactions,
                Source::Heads,
                Source::Logs,
            ]
            .map(|source| metrics.events(&spec.name, source.name())),
            synced: watch::Sender::new(false),
        });
        tokio::spawn(chain.clone().hub(rx, shutdown.clone()));
        Ok(chain)
    }

    /// The state of the chain's source: the devnet is always live.
    pub fn source_status(&self) -> UpstreamStatus {
        self.upstream
            .as_ref()
            .map_or(UpstreamStatus::Live, |status| status.borrow().clone())
    }

    /// Whether the source's past (the devnet's history) is in place.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Watches [`Chain::is_synced`].
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// The actors serving this chain's topics now.
    pub fn filters(&self) -> Arc<BTreeMap<String, FilterHandle>> {
        self.filters
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The actor serving `topic`.
    pub fn filter(&self, topic: &str) -> Option<FilterHandle> {
        self.filters().get(topic).cloned()
    }

    /// Serves `topic` with `handle` from the next batch on.
    pub fn add_filter(&self, handle: FilterHandle) {
        self.update_filters(|filters| {
            filters.insert(handle.topic.to_string(), handle);
        });
    }

    /// Stops feeding `topic`; returns its actor for the caller to retire.
    pub fn remove_filter(&self, topic: &str) -> Option<FilterHandle> {
        let mut removed = None;
        self.update_filters(|filters| removed = filters.remove(topic));
        removed
    }

    fn update_filters(&self, change: impl FnOnce(&mut BTreeMap<String, FilterHandle>)) {
        let mut current = self
            .filters
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut next = (**current).clone();
        change(&mut next);
        *current = Arc::new(next);
    }

    /// Read access to the recent canonical blocks.
    pub fn canonical(&self) -> RwLockReadGuard<'_, CanonicalChain> {
        // A panic while holding the lock cannot leave the window half
        // updated in a way readers care about; keep serving.
        self.canonical
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn hub(
        self: Arc<Self>,
        mut source: mpsc::Receiver<SourceEvent>,
        shutdown: CancellationToken,
    ) {
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = source.recv() => event,
            };
            let Some(event) = event else {
                tracing::warn!(chain = %self.name, "source stopped");
                return;
            };
            if matches!(event, SourceEvent::Synced) {
                self.synced.send_replace(true);
                continue;
            }
            // The source's past is placed, never notified.
            let live = self.is_synced();
            for chain_event in self.order(event) {
                if !matches!(chain_event, ChainEvent::Pending(_)) {
                    // The indexer stops only at shutdown.
                    let _ = self.price_events.send(chain_event.clone());
                }
                if live {
                    self.dispatch(&chain_event).await;
                }
            }
        }
    }

    /// Runs blocks through the canonical tracker.
    fn order(&self, event: SourceEvent) -> Vec<ChainEvent> {
        match event {
            SourceEvent::Pending(txs) => vec![ChainEvent::Pending(txs)],
            SourceEvent::Synced => Vec::new(),
            SourceEvent::Block(block) => {
                let mut canonical = self
                    .canonical
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                match canonical.apply(block.clone()) {
                    Ok(events) => events,
                    Err(error) => {
                        tracing::error!(chain = %self.name, %error, "cannot place block; resynchronising from it");
                        canonical.reset(block)
                    }
                }
            }
        }
    }

    async fn dispatch(&self, event: &ChainEvent) {
        for batch in EventBatch::from_chain_event(event) {
            self.ingested[stream_slot(batch.source)].inc_by(batch.len() as u64);
            let batch = Arc::new(batch);
            for filter in self.filters().values() {
                if filter.source == batch.source
                    && filter.has_subscribers()
                    && !filter.send_batch(batch.clone()).await
                {
                    tracing::error!(chain = %self.name, topic = %filter.topic, "filter actor stopped");
                }
            }
        }
    }
}
