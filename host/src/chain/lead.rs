//! An ingest's chain (docs/architecture.md, The bus): it stands by until it
//! holds the chain's lease, its price store following the bus's price
//! journal meanwhile, then leads for a term. A term applies the rest of
//! the journal, restores the log's tail from the bus, reads the node from
//! there, publishes every step its pipeline appends, and indexes prices
//! from what it published, writing through the journal; it ends when the
//! lease is lost, when another ingest's write fences it out, or at
//! shutdown. Each term has its own pipeline, source, publisher and
//! indexer, so nothing queued in one term is published in the next; the
//! window and the log carry over and follow the next term's tail.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::SOURCE_QUEUE;
use super::pipeline::Pipeline;
use crate::bus::lease::Leases;
use crate::bus::prices::PriceJournal;
use crate::bus::{ChainLog, ingest, publish};
use crate::config::ChainSpec;
use crate::ingest::upstream::{UpstreamSettings, UpstreamStatus};
use crate::price::PriceIndex;

/// What every term of one chain's ingest shares.
#[derive(Debug)]
pub struct Leader {
    pub spec: ChainSpec,
    /// The chain's pipeline, copied for each term with a publisher of its
    /// own; the window and the log it writes carry over.
    pub pipeline: Pipeline,
    pub on_bus: ChainLog,
    pub leases: Leases,
    /// The tail a term restores: `[log] blocks`.
    pub blocks: usize,
    /// The node; each term resumes it from the tail it restored.
    pub settings: UpstreamSettings,
    pub status: watch::Sender<UpstreamStatus>,
    /// The price store every term indexes into, and its journal.
    pub price: Arc<PriceIndex>,
    pub prices: PriceJournal,
}

impl Leader {
    /// Stands by and leads, term after term, until `shutdown`, or until
    /// the price store cannot take the journal (then this ingest stops
    /// standing for the chain, and says why on `/readyz`).
    pub async fn run(self, shutdown: CancellationToken) {
        let chain = self.settings.chain.clone();
        loop {
            self.status.send_replace(UpstreamStatus::Standby);
            tracing::info!(%chain, "standing by for the chain's lease");
            // Standing by, the price store follows the journal.
            let standby = shutdown.child_token();
            let (lease, followed) = tokio::join!(
                async {
                    let lease = self.leases.acquire(&chain, &standby).await;
                    standby.cancel();
                    lease
                },
                async {
                    let followed = self
                        .prices
                        .follow(self.price.store().clone(), standby.clone())
                        .await;
                    standby.cancel();
                    followed
                },
            );
            if let Err(error) = followed {
                return self.give_up(&error);
            }
            let Some(lease) = lease else {
                return;
            };
            tracing::info!(%chain, "leading: this ingest writes the chain's log");
            let term = shutdown.child_token();
            let ((), led) = tokio::join!(
                ending(&term, lease.keep(term.clone())),
                ending(&term, self.lead(&term)),
            );
            if let Err(error) = led {
                return self.give_up(&error);
            }
            if shutdown.is_cancelled() {
                return;
            }
            tracing::warn!(%chain, "no longer leading");
        }
    }

    /// A term's work under the lease: the price history first, since the
    /// index goes on from the journal's last write; then the log's tail
    /// and the node; the index reads the steps after the last it indexed,
    /// then those published. An error: the price store cannot take the
    /// journal.
    async fn lead(&self, term: &CancellationToken) -> anyhow::Result<()> {
        let store = self.price.store();
        if self.prices.catch_up(store, term).await?.is_none() {
            return Ok(());
        }
        let recorder = self.prices.recorder(store.clone(), term.clone())?;
        let through = store.indexed_through()?;
        let Some(tail) = self.on_bus.tail_when_read(self.blocks, term).await else {
            return Ok(());
        };
        // The index ends with the term: the next leader indexes on from
        // the journal.
        let (indexing, index) =
            self.price
                .indexing(&self.spec, Arc::new(recorder), term.clone(), Duration::ZERO);
        let (published, published_steps) = mpsc::unbounded_channel();
        let (events, source) = mpsc::channel(SOURCE_QUEUE);
        let (publish, steps) = mpsc::unbounded_channel();
        let pipeline = self.pipeline.persisting_to(publish);
        let head = tail.head;
        tokio::join!(
            ending(term, pipeline.run(source, term.clone())),
            ending(
                term,
                publish::publish(self.on_bus.clone(), steps, published, term.clone())
            ),
            ending(
                term,
                ingest::run(
                    tail,
                    self.pipeline.state().log().clone(),
                    self.settings.clone(),
                    events,
                    self.status.clone(),
                    term.clone(),
                )
            ),
            ending(term, indexing),
            ending(
                term,
                self.on_bus
                    .feed_index(through, head, published_steps, index, term.clone())
            ),
        );
        Ok(())
    }

    /// Stops standing for the chain: its price store cannot take the
    /// journal, so it must not lead (its index would write from the wrong
    /// history).
    fn give_up(&self, error: &anyhow::Error) {
        let reason = format!("the price database cannot take the bus's price journal: {error:#}");
        tracing::error!(chain = %self.settings.chain, %reason, "this ingest no longer stands for the chain");
        self.status.send_replace(UpstreamStatus::Down { reason });
    }
}

/// Runs `part` of a term; whichever part ends first, for whatever reason,
/// ends the term, so no part runs on alone (a lease kept with no node
/// read, say).
async fn ending<T>(term: &CancellationToken, part: impl Future<Output = T>) -> T {
    let ended = part.await;
    term.cancel();
    ended
}
