//! The ingest's source: the chain's log continued from the bus, then the
//! node from where that log ends. The tail's steps are placed in the
//! pipeline's window and log at their positions (never published again),
//! and the node source resumes from their canonical blocks: a reorg that
//! happened while no ingest ran connects to them and comes out as
//! removals, so the stream stays one log with no gap and no duplicate.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use chainsieve_bus::Tail;
use chainsieve_eventlog::EventLog;
use chainsieve_ingest::canonical::CanonicalChain;
use chainsieve_ingest::upstream::{self, UpstreamSettings};
use chainsieve_model::SourceEvent;
use chainsieve_model::SourceState;
use chainsieve_node::NodePool;

/// Places `tail` (the log's on the bus) in the pipeline behind `out` (and
/// `log`, the pipeline's), then reads the node `settings` names from the
/// tail's blocks until `shutdown`.
pub async fn run(
    tail: Tail,
    log: Arc<EventLog>,
    mut settings: UpstreamSettings,
    pool: Arc<NodePool>,
    out: mpsc::Sender<SourceEvent>,
    status: watch::Sender<SourceState>,
    shutdown: CancellationToken,
) {
    tracing::info!(chain = %settings.chain, head = tail.head, steps = tail.steps.len(), "continuing the log on the bus");
    if tail.steps.is_empty() {
        log.continue_after(tail.head);
    }
    let mut canonical = CanonicalChain::new(settings.backfill_limit as usize);
    for (_, change) in &tail.steps {
        canonical.follow(change);
    }
    settings.resume_from = canonical
        .blocks()
        .map(|block| (block.number(), block.hash))
        .collect();
    if tail.place(&out).await.is_none() {
        return;
    }
    upstream::run(settings, pool, out, status, shutdown).await;
}
