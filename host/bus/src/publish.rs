//! The ingest's side: each step its pipeline appends goes to the chain's
//! stream, in order, as one message encoded once ([`super::codec`]), at
//! the sequence that is its position ([`super::linear`]); once the bus has
//! it, it is handed on (to the leader's price index).
//!
//! A message's id (`Nats-Msg-Id`) is the chain, the position and the
//! step's tag, so a retry after a lost acknowledgement finds its own step
//! at its position and is not stored twice; a step whose position another
//! writer took is refused, so the stream stays one linear log whatever the
//! ingests do.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::linear::AppendError;
use super::{ChainLog, codec};
use std::sync::Arc;

use chainsieve_eventlog::Step;
use chainsieve_eventlog::store::Persist;

impl ChainLog {
    /// Publishes `step` at its position, or says why not.
    pub async fn append(&self, step: &Step) -> Result<(), AppendError> {
        self.linear
            .append(step.position, &self.message_id(step), self.payload(step))
            .await
    }

    fn message_id(&self, step: &Step) -> String {
        format!("{}:{}:{:016x}", self.chain, step.position, step.tag)
    }

    fn payload(&self, step: &Step) -> bytes::Bytes {
        codec::encode(&step.change).into()
    }
}

/// Publishes the steps the pipeline hands over, in order, until the
/// pipeline stops or `term` ends, and hands each one published to
/// `published` (the leader's price index indexes only what the log
/// holds). A step
/// another ingest already took ends `term` (this ingest no longer leads).
/// A step the bus does not take is tried again, with a growing pause,
/// until it does or `term` ends; what is still queued then is left to the
/// next leader, which reads the node from the log's tail.
pub async fn publish(
    log: ChainLog,
    mut steps: mpsc::Receiver<Persist>,
    published: mpsc::Sender<Arc<Step>>,
    term: CancellationToken,
) {
    loop {
        let step = tokio::select! {
            biased;
            () = term.cancelled() => return,
            step = steps.recv() => step,
        };
        let Some(Persist { step, .. }) = step else {
            return;
        };
        let taken = log
            .linear
            .append_until_taken(
                step.position,
                &log.message_id(&step),
                log.payload(&step),
                &term,
            )
            .await;
        match taken {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::error!(chain = %log.chain, error = %error, "stopped publishing");
                term.cancel();
                return;
            }
        }
        // The indexer ends with the term.
        let _ = published.send(step).await;
    }
}
