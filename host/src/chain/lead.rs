//! An ingest's chain (docs/architecture.md, The bus): it stands by until it
//! holds the chain's lease, then leads for a term. A term restores the
//! log's tail from the bus, reads the node from there, and publishes every
//! step its pipeline appends; it ends when the lease is lost, when another
//! ingest's step fences it out, or at shutdown. Each term has its own
//! pipeline, source and publisher, so nothing queued in one term is
//! published in the next; the window and the log carry over and follow
//! the next term's tail.

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::SOURCE_QUEUE;
use super::pipeline::Pipeline;
use crate::bus::ChainLog;
use crate::bus::lease::Leases;
use crate::bus::{ingest, publish};
use crate::ingest::upstream::{UpstreamSettings, UpstreamStatus};

/// What every term of one chain's ingest shares.
#[derive(Debug)]
pub struct Leader {
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
}

impl Leader {
    /// Stands by and leads, term after term, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let chain = self.settings.chain.clone();
        loop {
            self.status.send_replace(UpstreamStatus::Standby);
            tracing::info!(%chain, "standing by for the chain's lease");
            let Some(lease) = self.leases.acquire(&chain, &shutdown).await else {
                return;
            };
            tracing::info!(%chain, "leading: this ingest writes the chain's log");
            let term = shutdown.child_token();
            let (events, source) = mpsc::channel(SOURCE_QUEUE);
            let (publish, steps) = mpsc::unbounded_channel();
            let pipeline = self.pipeline.persisting_to(publish);
            tokio::join!(
                ending(&term, lease.keep(term.clone())),
                ending(&term, pipeline.run(source, term.clone())),
                ending(
                    &term,
                    publish::publish(self.on_bus.clone(), steps, term.clone())
                ),
                ending(
                    &term,
                    ingest::run(
                        self.on_bus.clone(),
                        self.pipeline.state().log().clone(),
                        self.blocks,
                        self.settings.clone(),
                        events,
                        self.status.clone(),
                        term.clone(),
                    )
                ),
            );
            if shutdown.is_cancelled() {
                return;
            }
            tracing::warn!(%chain, "no longer leading");
        }
    }
}

/// Runs `part` of a term; whichever part ends first, for whatever reason,
/// ends the term, so no part runs on alone (a lease kept with no node
/// read, say).
async fn ending(term: &CancellationToken, part: impl Future<Output = ()>) {
    part.await;
    term.cancel();
}
