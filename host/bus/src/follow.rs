//! The edge's side: a chain's log read from the bus into the edge's
//! pipeline. The newest steps (a window's worth) are placed before the
//! chain reports ready, as a source's past is, never notified; from there
//! on an ordered consumer delivers every step, in stream order, as it is
//! published.

use std::ops::ControlFlow;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::linear::Reader;
use super::{ChainLog, codec};
use chainsieve_model::SourceEvent;

/// Feeds `out` with `log`'s newest steps back to its `blocks`-th newest
/// block, then `Synced`, then every step after them, until `shutdown` or
/// the pipeline stops. Whatever fails on the bus is tried again from the
/// next step not yet delivered, so nothing is skipped and nothing is
/// delivered twice.
pub async fn follow(
    log: ChainLog,
    blocks: usize,
    out: mpsc::Sender<SourceEvent>,
    shutdown: CancellationToken,
) {
    let Some(tail) = log.tail_when_read(blocks, &shutdown).await else {
        return;
    };
    let next = tail.head + 1;
    if tail.place(&out).await.is_none() || out.send(SourceEvent::Synced).await.is_err() {
        return;
    }
    let mut into_pipeline = IntoPipeline {
        chain: &log.chain,
        out,
    };
    if let Err(error) = log.linear.read(next, &mut into_pipeline, &shutdown).await {
        tracing::error!(chain = %log.chain, error = format!("{error:#}"), "stopped following the log");
    }
}

/// Hands each step read to the pipeline, at its position.
struct IntoPipeline<'a> {
    chain: &'a str,
    out: mpsc::Sender<SourceEvent>,
}

impl Reader for IntoPipeline<'_> {
    async fn take(&mut self, run: Vec<(u64, Bytes)>) -> anyhow::Result<ControlFlow<()>> {
        for (position, payload) in run {
            let change = match codec::decode(&payload) {
                Ok(change) => change,
                Err(error) => {
                    // The window restarts after the gap it leaves: cursors
                    // before it are refused rather than resumed wrongly.
                    tracing::error!(chain = %self.chain, position, %error, "skipping a step this server cannot read");
                    continue;
                }
            };
            if self
                .out
                .send(SourceEvent::Logged { position, change })
                .await
                .is_err()
            {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}
