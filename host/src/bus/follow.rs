//! The edge's side: a chain's log read from the bus into the edge's
//! pipeline. The newest steps (a window's worth) are placed before the
//! chain reports ready, as a source's past is, never notified; from there
//! on an ordered consumer delivers every step, in stream order, as it is
//! published.

use anyhow::Context;
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ChainLog, codec, pause};
use crate::ingest::SourceEvent;
use crate::log::Position;

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
    let mut next = tail.head + 1;
    if tail.place(&out).await.is_none() || out.send(SourceEvent::Synced).await.is_err() {
        return;
    }
    loop {
        let stopped = tokio::select! {
            () = shutdown.cancelled() => return,
            stopped = deliver(&log, &mut next, &out) => stopped,
        };
        match stopped {
            Delivery::PipelineGone => return,
            Delivery::Reconnected => {
                tracing::info!(chain = %log.chain, from = next, "reconnected to the bus; following the log anew");
            }
            Delivery::Failed(error) => {
                tracing::warn!(chain = %log.chain, from = next, error = format!("{error:#}"), "reading the log stopped; resuming");
                if pause(&shutdown).await.is_none() {
                    return;
                }
            }
        }
    }
}

enum Delivery {
    PipelineGone,
    /// The client reconnected: a restarted server has lost the consumer.
    Reconnected,
    Failed(anyhow::Error),
}

/// Delivers steps from `next` on through one ordered consumer until it
/// fails; `next` follows what was delivered.
async fn deliver(log: &ChainLog, next: &mut Position, out: &mpsc::Sender<SourceEvent>) -> Delivery {
    let messages = async {
        let consumer = log
            .stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: log.subject.clone(),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: *next,
                },
                ..Default::default()
            })
            .await
            .context("creating an ordered consumer")?;
        consumer.messages().await.context("pulling messages")
    };
    let mut connects = log.connects.clone();
    connects.mark_unchanged();
    let mut messages = match messages.await {
        Ok(messages) => messages,
        Err(error) => return Delivery::Failed(error),
    };
    loop {
        let message = tokio::select! {
            message = messages.next() => message,
            _ = connects.changed() => return Delivery::Reconnected,
        };
        let Some(message) = message else {
            return Delivery::Failed(anyhow::anyhow!("the consumer ended"));
        };
        let message = match message {
            Ok(message) => message,
            Err(error) => return Delivery::Failed(error.into()),
        };
        let position = match message.info() {
            Ok(info) => info.stream_sequence,
            Err(error) => return Delivery::Failed(anyhow::anyhow!("{error}")),
        };
        if position < *next {
            continue;
        }
        let change = match codec::decode(&message.payload) {
            Ok(change) => change,
            Err(error) => {
                // The window restarts after the gap it leaves: cursors
                // before it are refused rather than resumed wrongly.
                tracing::error!(chain = %log.chain, position, %error, "skipping a step this server cannot read");
                *next = position + 1;
                continue;
            }
        };
        if out
            .send(SourceEvent::Logged { position, change })
            .await
            .is_err()
        {
            return Delivery::PipelineGone;
        }
        *next = position + 1;
    }
}
