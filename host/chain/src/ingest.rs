//! Role `ingest`: a node to the bus (docs/src/architecture.md, The bus).
//! It serves no client and runs no filter. It stands by until it
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

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::continued;
use super::pipeline::{DROP_CHECK_QUEUE, DropChecks, PERSIST_QUEUE, Pipeline};
use crate::parts::{Origin, Parts, SOURCE_QUEUE};
use chainsieve_bus::finality::FinalityMarks;
use chainsieve_bus::lease::Leases;
use chainsieve_bus::{Bus, ChainLog, publish};
use chainsieve_config::{ChainSpec, SourceSpec};
use chainsieve_ingest::upstream::{UpstreamSettings, drops};
use chainsieve_model::SourceState;
use chainsieve_node::NodePool;
use chainsieve_price::journal::PriceJournal;
use chainsieve_price::{Calls, FEED_QUEUE, PriceIndex, from_log};
use chainsieve_runtime::metrics::Metrics;

/// Stands for the chain's lease on `bus` and leads it term by term.
pub(super) async fn start(parts: &Parts<'_>, bus: &Bus) -> anyhow::Result<Origin> {
    let (SourceSpec::Nodes(nodes), Some(pool)) = (&parts.spec.source, parts.pool()) else {
        anyhow::bail!(
            "role ingest reads nodes, but chain {}'s source is the devnet",
            parts.spec.name
        );
    };
    let (status, watcher) = watch::channel(SourceState::Connecting);
    let holder = format!(
        "ingest pid {} #{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let leader = Leader {
        spec: parts.spec.clone(),
        pipeline: parts.pipeline(None, None),
        on_bus: bus.log(&parts.spec.name).await?,
        leases: bus.leases(&holder).await?,
        blocks: parts.spec.log_blocks,
        settings: parts.node_settings(nodes, Vec::new()),
        pool: pool.clone(),
        status,
        price: parts.price.clone(),
        prices: PriceJournal::open(bus, &parts.spec.name).await?,
        finality: bus.finality().await?,
        metrics: parts.metrics.clone(),
        drop_after: parts.config.lifecycle.drop_after(),
    };
    // A leader runs a pipeline of its own per term.
    // Its end would leave the chain's lease to expire with nobody leading
    // here: the process stops, and a standby takes the lease.
    parts.tasks.critical(
        parts.task("ingest"),
        parts.part(),
        leader.run(parts.shutdown.clone()),
    );
    Ok(Origin::Node {
        status: Some(watcher),
        pool,
    })
}

/// What every term of one chain's ingest shares.
#[derive(Debug)]
struct Leader {
    spec: ChainSpec,
    /// The chain's pipeline, copied for each term with a publisher of its
    /// own; the window and the log it writes carry over.
    pipeline: Pipeline,
    on_bus: ChainLog,
    leases: Leases,
    /// The tail a term restores: `[log] window`.
    blocks: usize,
    /// What the source follows; each term resumes it from the tail it
    /// restored.
    settings: UpstreamSettings,
    /// The chain's nodes, shared with the forwarded calls.
    pool: Arc<NodePool>,
    status: watch::Sender<SourceState>,
    /// The price store every term indexes into, and its journal.
    price: Arc<PriceIndex>,
    prices: PriceJournal,
    /// Where each term writes how far the chain is final, for the edges.
    finality: FinalityMarks,
    /// Where each term's queues are watched.
    metrics: Arc<Metrics>,
    /// How long a transaction is pending before each term's drop checker
    /// asks the nodes about it (`[lifecycle] drop_after_secs`).
    drop_after: Duration,
}

impl Leader {
    /// Stands by and leads, term after term, until `shutdown`, or until
    /// the price store cannot take the journal (then this ingest stops
    /// standing for the chain, and says why on `/readyz`).
    async fn run(self, shutdown: CancellationToken) {
        let chain = self.settings.chain.clone();
        loop {
            self.status.send_replace(SourceState::Standby);
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
                // On the heap: a term's parts are large futures, and a
                // debug build's poll frames hold them by value.
                ending(&term, Box::pin(self.lead(&term))),
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
        // The term follows the tail's turns into a tracker of its own, not
        // over what an earlier term of this process followed.
        self.pipeline.state().restart_lifecycle();
        // The index ends with the term: the next leader indexes on from
        // the journal.
        let (indexing, index) = self.price.indexing(
            &self.spec,
            Calls::Node(self.pool.clone()),
            Arc::new(recorder),
            term.clone(),
            Duration::ZERO,
        );
        let (chain, queues) = (self.spec.name.as_str(), &self.metrics.queues);
        queues.watch(chain, "price feed", &index);
        let (published, published_steps) = queues.channel(chain, "published prices", FEED_QUEUE);
        let (events, source) = queues.channel(chain, "source", SOURCE_QUEUE);
        let (publish, steps) = queues.channel(chain, "publish", PERSIST_QUEUE);
        let (asks, asked) = queues.channel(chain, "drop checks", DROP_CHECK_QUEUE);
        let pipeline = self
            .pipeline
            .persisting_to(publish)
            .checking_drops(DropChecks {
                asks,
                every: DropChecks::round(self.drop_after),
            });
        let dropped = events.clone();
        let head = tail.head;
        tokio::join!(
            ending(term, pipeline.run(source, term.clone())),
            ending(
                term,
                publish::publish(self.on_bus.clone(), steps, published, term.clone())
            ),
            ending(
                term,
                Box::pin(continued::run(
                    tail,
                    self.pipeline.state().log().clone(),
                    self.settings.clone(),
                    self.pool.clone(),
                    events,
                    self.status.clone(),
                    term.clone(),
                ))
            ),
            ending(term, Box::pin(indexing)),
            ending(
                term,
                drops::check(self.pool.clone(), asked, dropped, term.clone())
            ),
            ending(
                term,
                self.finality.publish(
                    &self.spec.name,
                    self.pipeline.state().log().clone(),
                    term.clone()
                )
            ),
            ending(
                term,
                from_log::feed_index(
                    &self.on_bus,
                    through,
                    head,
                    published_steps,
                    index,
                    term.clone()
                )
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
        self.status.send_replace(SourceState::Down { reason });
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
